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
 * value, prefix value ("beta*"), then no value. Exact values sort by
 * value; prefix values keep the order they were written in, because
 * envoyproxy/ratelimit tries its wildcards in that order and the first one
 * that matches wins.
 */
#include "config/domains.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

enum node_kind { KIND_EXACT, KIND_PREFIX, KIND_ANY };

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
    return policy_tier_validate(t, err, errlen);
}

/* ---- ordering ------------------------------------------------------------- */

static enum node_kind node_kind(const struct domain_node *n)
{
    return n->value == NULL ? KIND_ANY : n->value_prefix ? KIND_PREFIX : KIND_EXACT;
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
    /* Equal selectors sort next to each other, except prefixes, which keep
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
    *second = SIZE_MAX;
    for (size_t i = 1; i < n; i++)
        if (strcmp(o[i].domain.name, o[i - 1].domain.name) == 0 && o[i].index < *second) {
            *first = o[i - 1].index;
            *second = o[i].index;
            rc = -1;
        }
    if (rc == 0)
        for (size_t i = 0; i < n; i++)
            domains[i] = o[i].domain;
    free(o);
    return rc;
}

/* ---- lookup ------------------------------------------------------------------ */

/* Orders node against (key, kind, value): the sort order above, with all
 * prefix nodes of a key equal to each other. */
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

/* envoyproxy/ratelimit's order: exactly that value, else the first written
 * prefix the value starts with, else the key with no value. */
static const struct domain_node *match_level(const struct domain_node *nodes, size_t n,
                                             const struct descriptor_entry *e)
{
    size_t i = lower_bound(nodes, n, e, KIND_EXACT);

    if (i < n && probe_cmp(&nodes[i], e, KIND_EXACT) == 0)
        return &nodes[i];
    for (i = lower_bound(nodes, n, e, KIND_PREFIX);
         i < n && probe_cmp(&nodes[i], e, KIND_PREFIX) == 0; i++) {
        size_t plen = strlen(nodes[i].value);
        if (plen <= e->valuelen && memcmp(e->value, nodes[i].value, plen) == 0)
            return &nodes[i];
    }
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
        a->quota_mode != b->quota_mode || a->unit != b->unit ||
        a->requests_per_unit != b->requests_per_unit || !same_text(a->name, b->name) ||
        !same_text(a->path, b->path) || a->nreplaces != b->nreplaces ||
        (a->policy == NULL) != (b->policy == NULL) ||
        (a->policy != NULL && !policy_equal(a->policy, b->policy)))
        return 0;
    for (size_t i = 0; i < a->nreplaces; i++)
        if (strcmp(a->replaces[i], b->replaces[i]) != 0)
            return 0;
    return 1;
}

static int nodes_equal(const struct domain_node *a, const struct domain_node *b, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const struct domain_node *x = &a[i], *y = &b[i];
        if (strcmp(x->key, y->key) != 0 || !same_text(x->value, y->value) ||
            x->value_prefix != y->value_prefix || x->has_limit != y->has_limit ||
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
