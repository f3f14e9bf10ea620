/* SPDX-License-Identifier: Apache-2.0 */
/*
 * domains.c: the Envoy descriptor tree of a config snapshot, its lookup
 * (domains_match) and Envoy's rate limit units. Parsing the tree from YAML
 * is config_domains.c's job (one parser for the policy file's `domains:` and for
 * envoyproxy/ratelimit's files); this file owns how a level is ordered, so
 * that a lookup is a binary search per descriptor entry, and how a tree is
 * freed. It knows no config snapshot (config.h includes this file's header,
 * not the other way): it is given the domains and the top-level defaults.
 *
 * A level's children are sorted by (key, kind, ...), kind being exact
 * value, pattern (a value with a '*': "beta*", "*.example.com",
 * "a*b*c"), then no value. Exact values sort by value; patterns
 * keep the order they were written in, because envoyproxy/ratelimit tries
 * its wildcards in that order and the first one that matches wins. A
 * trailing '*' alone is envoyproxy/ratelimit's prefix wildcard; a '*'
 * anywhere else is ratelimitd's extension of it (docs/envoy.md), matched
 * by domains_glob.
 *
 * Also owns what a matched limit makes of the request's values: the
 * entries its counter is keyed by (share_threshold) and its metric name
 * (detailed_metric, value_to_metric), and the merging of a domain defined
 * in several files.
 */
#include "config/domains.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

enum node_kind { KIND_EXACT, KIND_PATTERN, KIND_ANY };

static const struct {
    const char *upper, *lower;
    int64_t seconds;
} units[] = {
    [RLS_UNIT_UNKNOWN] = {"UNKNOWN", "unknown", 0},
    [RLS_UNIT_SECOND] = {"SECOND", "second", 1},
    [RLS_UNIT_MINUTE] = {"MINUTE", "minute", 60},
    [RLS_UNIT_HOUR] = {"HOUR", "hour", 3600},
    [RLS_UNIT_DAY] = {"DAY", "day", 86400},
    [RLS_UNIT_MONTH] = {"MONTH", "month", 30LL * 86400},
    [RLS_UNIT_YEAR] = {"YEAR", "year", 365LL * 86400},
    [RLS_UNIT_WEEK] = {"WEEK", "week", 7LL * 86400},
};
#define NUNITS (sizeof units / sizeof units[0])

int64_t rls_unit_seconds(enum rls_unit u)
{
    return (size_t)u < NUNITS ? units[u].seconds : 0;
}

const char *rls_unit_name(enum rls_unit u)
{
    return (size_t)u < NUNITS ? units[u].upper : units[RLS_UNIT_UNKNOWN].upper;
}

int rls_unit_from_name(const char *name, enum rls_unit *out)
{
    for (size_t i = RLS_UNIT_SECOND; i < NUNITS; i++)
        if (strcasecmp(name, units[i].lower) == 0) {
            *out = (enum rls_unit)i;
            return 0;
        }
    return -1;
}

/* policy.c's judgement of an @envoy tier, where a limit of 0 (every
 * request denied, as envoyproxy/ratelimit's requests_per_unit: 0) is
 * valid: policies written in the policy file keep their `limit:` of at
 * least 1, and only these fixed windows reach the scripts with 0. */
static int envoy_tier_validate(struct tier *t, char *err, size_t errlen)
{
    int64_t limit = t->limit;
    int rc;

    if (limit == 0)
        t->limit = 1;
    rc = policy_tier_validate(t, err, errlen);
    t->limit = limit;
    return rc;
}

int domains_envoy_policy(struct policy *p, enum rls_unit unit, int64_t requests_per_unit,
                         int shadow, enum header_mode headers, int64_t deny_status, char *err,
                         size_t errlen)
{
    struct tier *t = &p->tiers[0];
    memset(p, 0, sizeof *p);
    strcpy(p->name, DOMAINS_ENVOY_POLICY);
    p->failure_mode = FAILURE_OPEN;
    p->shadow = shadow;
    p->deny_cache = 1;
    p->headers = headers;
    p->deny_status = deny_status;
    p->ntiers = 1;
    if ((size_t)unit >= NUNITS || unit == RLS_UNIT_UNKNOWN)
        return snprintf(err, errlen, "unknown unit %d", (int)unit), -1;
    snprintf(t->name, sizeof t->name, "%s", units[unit].lower);
    t->algorithm = ALG_FIXED_WINDOW;
    t->limit = requests_per_unit;
    t->window_us = units[unit].seconds * 1000000;
    return envoy_tier_validate(t, err, errlen);
}

int domains_envoy_multiply(struct policy *p, int64_t multiplier, char *err, size_t errlen)
{
    struct tier *t = &p->tiers[0];
    if (multiplier < 1 || t->window_us > INT64_MAX / multiplier)
        return snprintf(err, errlen, "unit_multiplier %" PRId64 " is out of range", multiplier), -1;
    t->window_us *= multiplier;
    return envoy_tier_validate(t, err, errlen);
}

int domains_envoy_calendar(struct policy *p, enum rls_unit unit, const struct tzif_zone *zone)
{
    struct tier *t = &p->tiers[0];
    if (unit != RLS_UNIT_MONTH && unit != RLS_UNIT_YEAR)
        return 0;
    /* window_us keeps the unit's length: what rls_tier_unit reports. */
    t->calendar =
        (struct calendar_spec){unit == RLS_UNIT_MONTH ? CALENDAR_MONTH : CALENDAR_YEAR, zone, 1, 0};
    return 0;
}

/* ---- ordering ------------------------------------------------------------- */

static enum node_kind node_kind(const struct domain_node *n)
{
    return n->value == NULL ? KIND_ANY : n->value_pattern ? KIND_PATTERN : KIND_EXACT;
}

/* Compares len bytes at a (any bytes) with the NUL-terminated b, as memcmp
 * over unsigned bytes, a shorter string first. */
static int cmp_bytes(const char *a, size_t len, const char *b)
{
    size_t blen = strlen(b), n = len < blen ? len : blen;
    int c = memcmp(a, b, n);
    return c ? c : (len > blen) - (len < blen);
}

struct ordered {
    struct domain_node node;
    size_t index;
};

static int ordered_cmp(const void *pa, const void *pb)
{
    const struct ordered *a = pa, *b = pb;
    enum node_kind ka = node_kind(&a->node), kb = node_kind(&b->node);
    int c = strcmp(a->node.key, b->node.key);

    if (c == 0)
        c = (ka > kb) - (ka < kb);
    if (c == 0 && ka == KIND_EXACT)
        c = strcmp(a->node.value, b->node.value);
    return c ? c : (a->index > b->index) - (a->index < b->index);
}

static int same_selector(const struct domain_node *a, const struct domain_node *b)
{
    if (strcmp(a->key, b->key) != 0 || node_kind(a) != node_kind(b))
        return 0;
    return a->value == NULL || strcmp(a->value, b->value) == 0;
}

int domains_sort_level(struct domain_node *nodes, size_t n, size_t *first, size_t *second)
{
    struct ordered *o;
    int rc = 0;

    if (n < 2)
        return 0;
    o = xcalloc(n, sizeof *o);
    for (size_t i = 0; i < n; i++)
        o[i] = (struct ordered){nodes[i], i};
    qsort(o, n, sizeof *o, ordered_cmp);
    /* Equal selectors sort next to each other, except patterns, which keep
     * their written order within their key: compare those pairwise. */
    *second = SIZE_MAX;
    for (size_t i = 0; i < n; i++)
        for (size_t j = i + 1; j < n && strcmp(o[i].node.key, o[j].node.key) == 0; j++) {
            if (!same_selector(&o[i].node, &o[j].node))
                continue;
            size_t lo = o[i].index < o[j].index ? o[i].index : o[j].index;
            size_t hi = o[i].index ^ o[j].index ^ lo;
            if (hi < *second || (hi == *second && lo < *first))
                *first = lo, *second = hi;
            rc = -1;
        }
    if (rc == 0)
        for (size_t i = 0; i < n; i++)
            nodes[i] = o[i].node;
    free(o);
    return rc;
}

struct ordered_domain {
    struct domain domain;
    size_t index;
};

static int ordered_domain_cmp(const void *pa, const void *pb)
{
    const struct ordered_domain *a = pa, *b = pb;
    int c = strcmp(a->domain.name, b->domain.name);
    return c ? c : (a->index > b->index) - (a->index < b->index);
}

int domains_sort(struct domain *domains, size_t n, size_t *first, size_t *second)
{
    struct ordered_domain *o;
    int rc = 0;

    if (n < 2)
        return 0;
    o = xcalloc(n, sizeof *o);
    for (size_t i = 0; i < n; i++)
        o[i] = (struct ordered_domain){domains[i], i};
    qsort(o, n, sizeof *o, ordered_domain_cmp);
    /* The pair loaded first, by the later one's load position. */
    size_t later = SIZE_MAX;
    for (size_t i = 1; i < n; i++)
        if (strcmp(o[i].domain.name, o[i - 1].domain.name) == 0 && o[i].index < later) {
            later = o[i].index;
            *first = i - 1;
            *second = i;
            rc = -1;
        }
    for (size_t i = 0; i < n; i++)
        domains[i] = o[i].domain;
    free(o);
    return rc;
}

/* ---- lookup ------------------------------------------------------------------ */

/* Orders node against (key, kind, value): the sort order above, with all
 * pattern nodes of a key equal to each other. */
static int probe_cmp(const struct domain_node *node, const struct descriptor_entry *e,
                     enum node_kind kind)
{
    enum node_kind k = node_kind(node);
    int c = -cmp_bytes(e->key, e->keylen, node->key);

    if (c == 0)
        c = (k > kind) - (k < kind);
    if (c == 0 && kind == KIND_EXACT)
        c = -cmp_bytes(e->value, e->valuelen, node->value);
    return c;
}

/* The first of the n nodes not ordered before (e's key, kind, e's value). */
static size_t lower_bound(const struct domain_node *nodes, size_t n,
                          const struct descriptor_entry *e, enum node_kind kind)
{
    size_t lo = 0, hi = n;

    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (probe_cmp(&nodes[mid], e, kind) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

int domains_glob(const char *pattern, const char *s, size_t len)
{
    const char *p = pattern, *star = NULL;
    size_t i = 0, mark = 0;

    /* Each '*' first matches nothing; on a mismatch, the last '*' met takes
     * one more byte and the rest of the pattern is tried again from there.
     * Going back to an earlier '*' never helps: whatever it could still
     * take, the later one can take as well. */
    while (i < len) {
        if (*p == '*') {
            star = ++p;
            mark = i;
        } else if (*p != '\0' && *p == s[i]) {
            p++;
            i++;
        } else if (star != NULL) {
            p = star;
            i = ++mark;
        } else {
            return 0;
        }
    }
    while (*p == '*')
        p++;
    return *p == '\0';
}

/* envoyproxy/ratelimit's order: exactly that value, else the first written
 * pattern that matches it, else the key with no value. */
static const struct domain_node *match_level(const struct domain_node *nodes, size_t n,
                                             const struct descriptor_entry *e)
{
    size_t i = lower_bound(nodes, n, e, KIND_EXACT);

    if (i < n && probe_cmp(&nodes[i], e, KIND_EXACT) == 0)
        return &nodes[i];
    for (i = lower_bound(nodes, n, e, KIND_PATTERN);
         i < n && probe_cmp(&nodes[i], e, KIND_PATTERN) == 0; i++)
        if (domains_glob(nodes[i].value, e->value, e->valuelen))
            return &nodes[i];
    i = lower_bound(nodes, n, e, KIND_ANY);
    if (i < n && probe_cmp(&nodes[i], e, KIND_ANY) == 0)
        return &nodes[i];
    return NULL;
}

const struct domain *domains_find(const struct domain *domains, size_t ndomains, const char *name,
                                  size_t len)
{
    size_t lo = 0, hi = domains != NULL ? ndomains : 0;

    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int cmp = cmp_bytes(name, len, domains[mid].name);
        if (cmp == 0)
            return &domains[mid];
        if (cmp < 0)
            hi = mid;
        else
            lo = mid + 1;
    }
    return NULL;
}

const struct domain_limit *domains_match(const struct domain *domains, size_t ndomains,
                                         const char *domain, size_t domainlen,
                                         const struct descriptor_entry *entries, size_t n)
{
    const struct domain *d = domains_find(domains, ndomains, domain, domainlen);
    const struct domain_node *nodes, *node = NULL;
    size_t nnodes;

    if (d == NULL || n == 0)
        return NULL;
    nodes = d->children;
    nnodes = d->nchildren;
    for (size_t i = 0; i < n; i++) {
        /* A descriptor longer than the tree's branch matches nothing. */
        if (nnodes == 0)
            return NULL;
        node = match_level(nodes, nnodes, &entries[i]);
        if (node == NULL)
            return NULL;
        nodes = node->children;
        nnodes = node->nchildren;
    }
    return node->has_limit ? &node->limit : NULL;
}

/* ---- freeing ------------------------------------------------------------------- */

void domain_node_free(struct domain_node *n)
{
    if (n == NULL)
        return;
    for (size_t i = 0; i < n->nchildren; i++)
        domain_node_free(&n->children[i]);
    free(n->children);
    free(n->key);
    free(n->value);
    if (n->limit.owned != NULL) {
        policy_overrides_free(n->limit.owned->overrides);
        free(n->limit.owned);
    }
    free(n->limit.name);
    for (size_t i = 0; i < n->limit.nreplaces; i++)
        free(n->limit.replaces[i]);
    free(n->limit.replaces);
    free(n->limit.path);
    for (size_t i = 0; i < n->limit.depth; i++) {
        if (n->limit.share != NULL)
            free(n->limit.share[i]);
        if (n->limit.names != NULL)
            free(n->limit.names[i]);
    }
    free(n->limit.share);
    free(n->limit.names);
    memset(n, 0, sizeof *n);
}

void domain_free(struct domain *d)
{
    if (d == NULL)
        return;
    for (size_t i = 0; i < d->nchildren; i++)
        domain_node_free(&d->children[i]);
    free(d->children);
    free(d->name);
    free(d->file);
    memset(d, 0, sizeof *d);
}

static int same_text(const char *a, const char *b)
{
    return a == b || (a != NULL && b != NULL && strcmp(a, b) == 0);
}

static int limits_equal(const struct domain_limit *a, const struct domain_limit *b)
{
    if (a->unlimited != b->unlimited || a->detailed_metric != b->detailed_metric ||
        a->quota_mode != b->quota_mode || a->metric_values != b->metric_values ||
        a->depth != b->depth || (a->share == NULL) != (b->share == NULL) || a->unit != b->unit ||
        a->requests_per_unit != b->requests_per_unit || !same_text(a->name, b->name) ||
        !same_text(a->path, b->path) || a->nreplaces != b->nreplaces ||
        (a->policy == NULL) != (b->policy == NULL) ||
        (a->policy != NULL && !policy_equal(a->policy, b->policy)))
        return 0;
    for (size_t i = 0; i < a->nreplaces; i++)
        if (strcmp(a->replaces[i], b->replaces[i]) != 0)
            return 0;
    for (size_t i = 0; a->share != NULL && i < a->depth; i++)
        if (!same_text(a->share[i], b->share[i]))
            return 0;
    return 1;
}

static int nodes_equal(const struct domain_node *a, const struct domain_node *b, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const struct domain_node *x = &a[i], *y = &b[i];
        if (strcmp(x->key, y->key) != 0 || !same_text(x->value, y->value) ||
            x->value_pattern != y->value_pattern || x->share_threshold != y->share_threshold ||
            x->value_to_metric != y->value_to_metric || x->has_limit != y->has_limit ||
            (x->has_limit && !limits_equal(&x->limit, &y->limit)) || x->nchildren != y->nchildren ||
            !nodes_equal(x->children, y->children, x->nchildren))
            return 0;
    }
    return 1;
}

int domains_equal(const struct domain *a, size_t na, const struct domain *b, size_t nb)
{
    if (na != nb)
        return 0;
    for (size_t i = 0; i < na; i++)
        if (strcmp(a[i].name, b[i].name) != 0 || a[i].nchildren != b[i].nchildren ||
            !nodes_equal(a[i].children, b[i].children, a[i].nchildren))
            return 0;
    return 1;
}

/* ---- what a matched limit makes of the request ------------------------------------ */

void domains_share_entries(const struct domain_limit *l, const struct descriptor_entry *in,
                           size_t n, struct descriptor_entry *out)
{
    for (size_t i = 0; i < n; i++) {
        out[i] = in[i];
        if (l->share != NULL && i < l->depth && l->share[i] != NULL) {
            out[i].value = l->share[i];
            out[i].valuelen = strlen(l->share[i]);
        }
    }
}

/* Appends len bytes of s at buf + *at (room checked by the caller). */
static void put(char *buf, size_t *at, const char *s, size_t len)
{
    memcpy(buf + *at, s, len);
    *at += len;
}

char *domains_metric_name(const struct domain_limit *l, const struct descriptor_entry *in, size_t n,
                          size_t *len)
{
    struct descriptor_entry e[DOMAINS_DEPTH_MAX];
    size_t size = 1, at = 0;
    char *out;

    if ((!l->detailed_metric && l->metric_values == 0) || n > DOMAINS_DEPTH_MAX ||
        (!l->detailed_metric && (l->names == NULL || n != l->depth)))
        return NULL;
    domains_share_entries(l, in, n, e);
    for (size_t i = 0; i < n; i++)
        size += e[i].keylen + 2 + e[i].valuelen + (l->names ? strlen(l->names[i]) : 0);
    out = xmalloc(size);
    for (size_t i = 0; i < n; i++) {
        if (i)
            put(out, &at, ".", 1);
        if (!l->detailed_metric && !(l->metric_values & (UINT32_C(1) << i))) {
            put(out, &at, l->names[i], strlen(l->names[i])); /* as the config names it */
            continue;
        }
        put(out, &at, e[i].key, e[i].keylen);
        /* detailed_metric spells every level key_value, as
         * envoyproxy/ratelimit does; value_to_metric leaves out an empty
         * value's '_'. */
        if (l->detailed_metric || e[i].valuelen > 0) {
            put(out, &at, "_", 1);
            put(out, &at, e[i].value, e[i].valuelen);
        }
    }
    out[at] = '\0';
    *len = at;
    return out;
}

/* ---- merging ------------------------------------------------------------------------ */

/* Merges domains[lo..hi) (one name, hi - lo >= 2) into domains[lo]; see
 * domains_merge. */
static int merge_run(struct domain *domains, size_t lo, size_t hi, size_t *first, size_t *second,
                     size_t *node)
{
    size_t total = 0, at = 0, a, b;
    struct domain_node *all;

    for (size_t i = lo; i < hi; i++)
        total += domains[i].nchildren;
    all = xcalloc(total ? total : 1, sizeof *all);
    for (size_t i = lo; i < hi; i++) {
        memcpy(all + at, domains[i].children, domains[i].nchildren * sizeof *all);
        at += domains[i].nchildren;
    }
    if (domains_sort_level(all, total, &a, &b) < 0) {
        /* Positions in the concatenation back to (domain, descriptor). */
        size_t i;
        for (i = lo; a >= domains[i].nchildren; i++)
            a -= domains[i].nchildren;
        *first = i;
        for (i = lo; b >= domains[i].nchildren; i++)
            b -= domains[i].nchildren;
        *second = i;
        *node = b;
        free(all);
        return -1;
    }
    free(domains[lo].children);
    domains[lo].children = all;
    domains[lo].nchildren = total;
    for (size_t i = lo + 1; i < hi; i++) {
        free(domains[i].children); /* the nodes moved to domains[lo] */
        domains[i].children = NULL;
        domains[i].nchildren = 0;
        domain_free(&domains[i]);
    }
    return 0;
}

int domains_merge(struct domain *domains, size_t *n, size_t *first, size_t *second, size_t *node)
{
    size_t out = 0;

    for (size_t lo = 0, hi; lo < *n; lo = hi) {
        for (hi = lo + 1; hi < *n && strcmp(domains[hi].name, domains[lo].name) == 0; hi++)
            ;
        if (hi - lo > 1 && merge_run(domains, lo, hi, first, second, node) < 0) {
            /* Leave the array whole for the caller's message and free:
             * close the gap the merged runs before this one left. */
            memmove(&domains[out], &domains[lo], (*n - lo) * sizeof *domains);
            *first -= lo - out;
            *second -= lo - out;
            *n -= lo - out;
            return -1;
        }
        domains[out++] = domains[lo];
    }
    *n = out;
    return 0;
}
