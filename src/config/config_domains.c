/* SPDX-License-Identifier: Apache-2.0 */
/*
 * config_domains.c: the one descriptor parser, of the policy file's
 * `domains:` and of envoyproxy/ratelimit's files (one domain each, read
 * from the envoy_config directory): the same tables for both, so both
 * accept exactly the same fields (policy: aside, refused in the latter).
 * Builds each descriptor's limit: a named policy (or its shadow copy), an
 * @envoy policy of one fixed_window tier, unlimited, or none; sets the
 * stats paths; sorts the domains and reports a name defined twice.
 *
 * The descriptor tables live here rather than in config_fields.c: they
 * fill structs private to this parser while it parses (struct node_entry
 * and its kin), and none carries a reload rule.
 *
 * Does not own the descriptor tree's shape, order and matching (domains.c),
 * which files of the directory are domains (envoy_config.c), nor the
 * policies a descriptor names (config_policies.c).
 */
#include "config/config.h"
#include "config/config_internal.h"
#include "config/domains.h"
#include "config/envoy_config.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- Envoy domains ------------------------------------------------------------------ */

static int parse_descriptors(struct loader *ld, const yaml_node_t *node, const char *path,
                             void *slot);
static int parse_unit(struct loader *ld, const yaml_node_t *node, const char *path, void *slot);
static int parse_replaces(struct loader *ld, const yaml_node_t *node, const char *path, void *slot);
static int parse_ignored(struct loader *ld, const yaml_node_t *node, const char *path, void *slot);

/* Envoy domains (domains.h): the policy file's `domains:` items and
 * envoyproxy/ratelimit's files share these tables, so both accept exactly
 * the same fields (policy: aside, refused in the latter). */
static int check_not_empty(const char *s, char *err, size_t errlen)
{
    if (*s == '\0')
        return snprintf(err, errlen, "must not be empty"), -1;
    if (strlen(s) > POLICY_KEY_MAX)
        return snprintf(err, errlen, "longer than %d bytes (the longest key)", POLICY_KEY_MAX), -1;
    return 0;
}

struct node_list {
    size_t n;
    struct domain_node *items;
};

/* One rate_limit: while it is parsed. */
struct rate_limit_entry {
    enum rls_unit unit;
    int64_t requests_per_unit;
    int64_t unit_multiplier; /* the window is this many units (0: not given, 1) */
    int unlimited;
    char *name;
    size_t nreplaces;
    char **replaces;
};

/* One descriptor while it is parsed; its strings are owned here until the
 * node takes them. */
struct node_entry {
    char *key;
    char *value;
    char *policy;
    int has_rate_limit;
    struct rate_limit_entry rl;
    int shadow_mode;
    int detailed_metric;
    int value_to_metric;
    int share_threshold;
    int quota_mode;
    int ignored; /* a slot for the fields read and ignored (parse_ignored) */
    struct node_list children;
};

/* One domain (a `domains:` item, or a whole envoyproxy/ratelimit file). */
struct domain_entry {
    char *domain;
    struct node_list descriptors;
};

struct replaces_entry {
    char *name;
};

static const struct field replaces_fields[] = {
    {"name", F_STRING, .required = 1, .offset = offsetof(struct replaces_entry, name),
     .check = check_not_empty},
    {.name = NULL},
};

static const struct field rate_limit_fields[] = {
    {"unit", F_CUSTOM, .offset = offsetof(struct rate_limit_entry, unit), .parse = parse_unit},
    /* 0 denies every request, as in envoyproxy/ratelimit (whose reload
     * test relies on it); a policy's `limit:` stays at least 1. */
    {"requests_per_unit", F_INT, .offset = offsetof(struct rate_limit_entry, requests_per_unit),
     .min = 0, .max = 1000000000},
    {"unit_multiplier", F_INT, .offset = offsetof(struct rate_limit_entry, unit_multiplier),
     .min = 1, .max = 1000000},
    {"unlimited", F_BOOL, .offset = offsetof(struct rate_limit_entry, unlimited)},
    {"name", F_STRING, .offset = offsetof(struct rate_limit_entry, name), .check = check_not_empty},
    {"replaces", F_CUSTOM, .offset = 0 /* the whole rate_limit */, .parse = parse_replaces,
     .section = replaces_fields},
    {.name = NULL},
};

static const struct field descriptor_fields[] = {
    {"key", F_STRING, .required = 1, .offset = offsetof(struct node_entry, key),
     .check = check_not_empty},
    /* May be empty: envoyproxy/ratelimit reads value: "" as no value. */
    {"value", F_STRING, .offset = offsetof(struct node_entry, value)},
    {"policy", F_STRING, .offset = offsetof(struct node_entry, policy)},
    {"rate_limit", F_CUSTOM, .offset = 0 /* the whole entry */, .parse = cfg_parse_rate_limit,
     .section = rate_limit_fields},
    {"shadow_mode", F_BOOL, .offset = offsetof(struct node_entry, shadow_mode)},
    {"detailed_metric", F_BOOL, .offset = offsetof(struct node_entry, detailed_metric)},
    {"value_to_metric", F_BOOL, .offset = offsetof(struct node_entry, value_to_metric)},
    {"share_threshold", F_BOOL, .offset = offsetof(struct node_entry, share_threshold)},
    {"quota_mode", F_BOOL, .offset = offsetof(struct node_entry, quota_mode)},
    /* envoyproxy/ratelimit sends it to Envoy with an answer; read (any
     * mapping) and ignored here, with a warning. */
    {"metadata", F_CUSTOM, .offset = offsetof(struct node_entry, ignored), .parse = parse_ignored},
    {"descriptors", F_CUSTOM, .offset = offsetof(struct node_entry, children),
     .parse = parse_descriptors, .section = descriptor_fields},
    {.name = NULL},
};

_Static_assert(NROWS(descriptor_fields) <= MAX_FIELDS, "raise MAX_FIELDS");

const struct field cfg_domain_fields[] = {
    {"domain", F_STRING, .required = 1, .offset = offsetof(struct domain_entry, domain),
     .check = check_not_empty},
    {"descriptors", F_CUSTOM, .offset = offsetof(struct domain_entry, descriptors),
     .parse = parse_descriptors, .section = descriptor_fields},
    {.name = NULL},
};

/* `domains:` is only noted here: a descriptor may name a policy written
 * further down, and its shadow copy must take the top-level defaults, so
 * load_domains parses it once the whole file has been read. */
int cfg_parse_domains_later(struct loader *ld, const yaml_node_t *node, const char *path,
                            void *slot)
{
    (void)path, (void)slot;
    ld->domains = node;
    return 0;
}

/* Warnings kept in a snapshot past which the rest are only counted. */
#define WARNINGS_MAX 64

/* Adds "file:line:col: path: message" to the snapshot's warnings (one a
 * line; main.c and reload.c log each): a part of a file that loads but
 * does nothing. Past WARNINGS_MAX of them, one more line counts the rest. */
__attribute__((format(printf, 4, 5))) static void warn(struct loader *ld, const yaml_node_t *node,
                                                       const char *path, const char *fmt, ...)
{
    struct config *c = ld->c;
    char msg[RL_ERRLEN], line[2 * RL_ERRLEN + 4096];
    size_t lines = 0, old = c->warning ? strlen(c->warning) : 0;
    unsigned long more = 1;
    va_list ap;

    for (size_t i = 0; i < old; i++)
        lines += c->warning[i] == '\n';
    if (old > 0 && lines + 1 >= WARNINGS_MAX) {
        char *last = strrchr(c->warning, '\n');
        if (last != NULL && sscanf(last + 1, "... and %lu more", &more) == 1) {
            *last = '\0';
            more++;
        }
        snprintf(line, sizeof line, "... and %lu more", more);
    } else {
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
        snprintf(line, sizeof line, "%s:%zu:%zu: %s%s%s", ld->name, node->start_mark.line + 1,
                 node->start_mark.column + 1, path, *path ? ": " : "", msg);
    }
    old = c->warning ? strlen(c->warning) : 0;
    c->warning = xrealloc(c->warning, old + strlen(line) + 2);
    snprintf(c->warning + old, strlen(line) + 2, "%s%s", old ? "\n" : "", line);
}

/* envoyproxy/ratelimit checks the keys of its files against one list, not
 * per mapping: a key of that list in another place (name: beside key:,
 * unit: outside rate_limit:) loads there, and is ignored. So here, with a
 * warning; any other unknown key is refused, as there. */
static int tolerate_peer_key(struct loader *ld, const yaml_node_t *key, const char *path,
                             const char *name)
{
    static const char *const peer_keys[] = {
        "domain",
        "key",
        "value",
        "descriptors",
        "rate_limit",
        "unit",
        "requests_per_unit",
        "unlimited",
        "shadow_mode",
        "name",
        "replaces",
        "detailed_metric",
        "value_to_metric",
        "share_threshold",
        "quota_mode",
        "metadata",
    };
    for (size_t i = 0; i < sizeof peer_keys / sizeof peer_keys[0]; i++)
        if (strcmp(name, peer_keys[i]) == 0) {
            warn(ld, key, path,
                 "\"%s\" is not a field here: read and ignored (as envoyproxy/ratelimit "
                 "does)",
                 name);
            return 0;
        }
    return -1;
}

/* A field of envoyproxy/ratelimit's schema that ratelimitd reads and does
 * not act on: any value, accepted with a warning naming it. */
static int parse_ignored(struct loader *ld, const yaml_node_t *node, const char *path, void *slot)
{
    (void)slot;
    if (node->type != YAML_MAPPING_NODE)
        return cfg_fail(ld, node, path, "expected a mapping, got %s", cfg_kind(node));
    warn(ld, node, path, "read and ignored: ratelimitd does not act on this field");
    return 0;
}

static int parse_unit(struct loader *ld, const yaml_node_t *node, const char *path, void *slot)
{
    char buf[SHOWN_LEN];
    const char *s = cfg_scalar_text(ld, node, path, "a unit", 0);

    if (s == NULL)
        return -1;
    if (rls_unit_from_name(s, slot) < 0)
        return cfg_fail(ld, node, path,
                        "invalid value \"%s\": must be one of second, minute, hour, day, week, "
                        "month, year",
                        cfg_shown(s, buf));
    return 0;
}

/* rate_limit.replaces: a sequence of {name}. */
static int parse_replaces(struct loader *ld, const yaml_node_t *node, const char *path, void *slot)
{
    struct rate_limit_entry *rl = slot;
    const yaml_node_item_t *item;
    char child[PATH_LEN];
    size_t n, i;

    if (node->type != YAML_SEQUENCE_NODE)
        return cfg_fail(ld, node, path, "expected a sequence of {name: ...}, got %s",
                        cfg_kind(node));
    n = (size_t)(node->data.sequence.items.top - node->data.sequence.items.start);
    rl->replaces = xcalloc(n ? n : 1, sizeof *rl->replaces);
    for (i = 0, item = node->data.sequence.items.start; i < n; i++, item++) {
        struct replaces_entry e = {NULL};
        snprintf(child, sizeof child, "%s[%zu]", path, i);
        if (cfg_parse_fields(ld, cfg_node_at(ld, *item), child, replaces_fields, &e) < 0) {
            free(e.name);
            return -1;
        }
        rl->replaces[rl->nreplaces++] = e.name;
    }
    return 0;
}

/* rate_limit: envoyproxy/ratelimit's rules: unlimited, or a unit and a
 * number of requests per unit; a limit does not replace itself. */
int cfg_parse_rate_limit(struct loader *ld, const yaml_node_t *node, const char *path, void *slot)
{
    struct node_entry *e = slot;
    struct rate_limit_entry *rl = &e->rl;
    const yaml_node_t *at;

    e->has_rate_limit = 1;
    if (cfg_parse_fields(ld, node, path, rate_limit_fields, rl) < 0)
        return -1;
    if (rl->unlimited) {
        if ((at = cfg_field_node(ld, node, "unit")) != NULL ||
            (at = cfg_field_node(ld, node, "requests_per_unit")) != NULL)
            return cfg_fail(ld, at, path, "unlimited: true takes no unit or requests_per_unit");
    } else if (cfg_field_node(ld, node, "unit") == NULL) {
        return cfg_fail(ld, node, path, "missing required field \"unit\" (or unlimited: true)");
    } else if (cfg_field_node(ld, node, "requests_per_unit") == NULL) {
        return cfg_fail(ld, node, path, "missing required field \"requests_per_unit\"");
    }
    for (size_t i = 0; rl->name != NULL && i < rl->nreplaces; i++)
        if (strcmp(rl->replaces[i], rl->name) == 0)
            return cfg_fail(ld, cfg_field_node(ld, node, "replaces"), path,
                            "replaces names this limit itself (\"%s\")", rl->name);
    return 0;
}

static void node_entry_free(struct node_entry *e)
{
    free(e->key);
    free(e->value);
    free(e->policy);
    free(e->rl.name);
    for (size_t i = 0; i < e->rl.nreplaces; i++)
        free(e->rl.replaces[i]);
    free(e->rl.replaces);
    for (size_t i = 0; i < e->children.n; i++)
        domain_node_free(&e->children.items[i]);
    free(e->children.items);
}

/* The overrides node of policies.NAME in the policy file, or NULL. */
static const yaml_node_t *policy_overrides_node(struct loader *ld, const char *name)
{
    const yaml_node_t *root = yaml_document_get_root_node(&ld->doc);
    const yaml_node_t *n = cfg_field_node(ld, root, "policies");

    if (n != NULL && n->type == YAML_MAPPING_NODE)
        n = cfg_field_node(ld, n, name);
    return n != NULL && n->type == YAML_MAPPING_NODE ? cfg_field_node(ld, n, "overrides") : NULL;
}

/*
 * policy: NAME with shadow_mode: a copy of the policy with shadow set (same
 * name, so the same Redis keys). Its overrides' variants must be shadow
 * too, and a copy of the struct would share the original's, so the
 * overrides are parsed again from the file for the copy (it owns them).
 */
static struct policy *shadow_copy(struct loader *ld, const struct policy *p, const char *path)
{
    struct policy *copy = xmalloc(sizeof *copy);
    const yaml_node_t *o;
    char child[PATH_LEN];

    *copy = *p;
    copy->shadow = 1;
    copy->overrides = NULL;
    if (p->overrides != NULL && (o = policy_overrides_node(ld, p->name)) != NULL) {
        snprintf(child, sizeof child, "policies.%s.overrides", p->name);
        if (cfg_parse_overrides(ld, o, child, &copy->overrides) < 0) {
            /* Parsed once already, so this cannot fail; say where if it does. */
            cfg_fail(ld, o, path, "cannot copy the overrides of policy \"%s\"", p->name);
            policy_overrides_free(copy->overrides);
            free(copy);
            return NULL;
        }
    }
    policy_overrides_inherit(copy);
    return copy;
}

/* envoy_calendar_units: MONTH and YEAR as calendar spans in UTC; a
 * multiple of one has no calendar meaning. */
static int envoy_calendar(struct loader *ld, const struct rate_limit_entry *rl, struct policy *p,
                          char *msg, size_t msglen)
{
    if (!ld->c->envoy_calendar_units || (rl->unit != RLS_UNIT_MONTH && rl->unit != RLS_UNIT_YEAR))
        return 0;
    if (rl->unit_multiplier > 1)
        return snprintf(msg, msglen,
                        "unit_multiplier %lld with a calendar %s (envoy_calendar_units: true): "
                        "not supported",
                        (long long)rl->unit_multiplier, rls_unit_name(rl->unit)),
               -1;
    return domains_envoy_calendar(p, rl->unit, ld->c->utc);
}

/* rate_limit: {unit, requests_per_unit}: one fixed_window tier of that
 * many requests per unit, with the top-level defaults, as
 * envoyproxy/ratelimit counts it. */
static struct policy *envoy_policy(struct loader *ld, const yaml_node_t *map, const char *path,
                                   const struct rate_limit_entry *rl, int shadow)
{
    struct policy *p = xcalloc(1, sizeof *p);
    char msg[RL_ERRLEN], where[PATH_LEN + 16];

    snprintf(where, sizeof where, "%s.rate_limit", path);
    /* requests_per_unit's bounds and the units' lengths keep this true;
     * policy.c stays the judge all the same. */
    if (domains_envoy_policy(p, rl->unit, rl->requests_per_unit, shadow, ld->c->headers,
                             ld->c->deny_status, msg, sizeof msg) < 0 ||
        (rl->unit_multiplier > 1 &&
         domains_envoy_multiply(p, rl->unit_multiplier, msg, sizeof msg) < 0) ||
        envoy_calendar(ld, rl, p, msg, sizeof msg) < 0) {
        cfg_fail(ld, cfg_field_node(ld, map, "rate_limit"), where, "%s", msg);
        free(p);
        return NULL;
    }
    if (cfg_default_key(ld, map, where, p) < 0) {
        free(p);
        return NULL;
    }
    return p;
}

/* Gives node the limit its entry describes: a named policy (or its shadow
 * copy), an @envoy policy, unlimited, or none. */
static int build_limit(struct loader *ld, const yaml_node_t *map, const char *path,
                       struct node_entry *e, struct domain_node *node)
{
    struct domain_limit *l = &node->limit;
    const struct policy *p;
    char buf[SHOWN_LEN];

    l->detailed_metric = e->detailed_metric;
    l->quota_mode = e->quota_mode;
    if (e->policy != NULL) {
        if (ld->envoy_file)
            return cfg_fail(ld, cfg_field_node(ld, map, "policy"), path,
                            "policy: is ratelimitd's extension of the policy file's domains:, not "
                            "part of envoyproxy/ratelimit's files");
        if (e->has_rate_limit)
            return cfg_fail(ld, cfg_field_node(ld, map, "policy"), path,
                            "give policy or rate_limit, not both");
        if ((p = config_find_policy(ld->c, e->policy)) == NULL)
            return cfg_fail(ld, cfg_field_node(ld, map, "policy"), path, "unknown policy \"%s\"",
                            cfg_shown(e->policy, buf));
        if (policy_may_lease(p))
            return cfg_fail(ld, cfg_field_node(ld, map, "policy"), path,
                            "policy \"%s\" has a concurrency tier, which Envoy's rate limit "
                            "service cannot use (it has no way to release a lease)",
                            cfg_shown(e->policy, buf));
        if (e->shadow_mode && !p->shadow) {
            if ((l->owned = shadow_copy(ld, p, path)) == NULL)
                return -1;
            p = l->owned;
        }
        l->policy = p;
        node->has_limit = 1;
        return 0;
    }
    if (!e->has_rate_limit)
        return 0; /* a node on the way to deeper ones, or one that limits nothing */
    node->has_limit = 1;
    l->unlimited = e->rl.unlimited;
    l->name = e->rl.name;
    l->nreplaces = e->rl.nreplaces;
    l->replaces = e->rl.replaces;
    e->rl.name = NULL;
    e->rl.replaces = NULL;
    e->rl.nreplaces = 0;
    if (l->unlimited)
        return 0;
    l->unit = e->rl.unit;
    l->requests_per_unit = e->rl.requests_per_unit;
    if ((l->owned = envoy_policy(ld, map, path, &e->rl, e->shadow_mode)) == NULL)
        return -1;
    l->policy = l->owned;
    return 0;
}

/* Parses one descriptor mapping into node (zeroed; on failure it may hold
 * a part, which domain_node_free frees). */
static int parse_descriptor(struct loader *ld, const yaml_node_t *map, const char *path,
                            struct domain_node *node)
{
    struct node_entry e = {.key = NULL};
    int rc = cfg_parse_fields(ld, map, path, descriptor_fields, &e);

    /* As envoyproxy/ratelimit: share_threshold only on a wildcard (here
     * any pattern, wherever its '*' stands). */
    if (rc == 0 && e.share_threshold && (e.value == NULL || strchr(e.value, '*') == NULL))
        rc = cfg_fail(ld, cfg_field_node(ld, map, "share_threshold"), path,
                      "share_threshold: true needs a wildcard value (one with a '*')");
    if (rc == 0) {
        node->share_threshold = e.share_threshold;
        node->value_to_metric = e.value_to_metric;
        node->key = e.key;
        e.key = NULL;
        if (e.value != NULL && e.value[0] == '\0') {
            free(e.value);
            e.value = NULL;
        }
        if (e.value != NULL) {
            /* Kept as written: a '*' anywhere makes it a pattern. */
            node->value_pattern = strchr(e.value, '*') != NULL;
            node->value = e.value;
            e.value = NULL;
        }
        node->nchildren = e.children.n;
        node->children = e.children.items;
        e.children = (struct node_list){0, NULL};
        rc = build_limit(ld, map, path, &e, node);
    }
    node_entry_free(&e);
    return rc;
}

/* A descriptor's selector as the file wrote it, for messages. */
static const char *selector_text(const struct domain_node *n, char *buf, size_t size)
{
    char k[SHOWN_LEN], v[SHOWN_LEN];
    if (n->value == NULL)
        snprintf(buf, size, "key \"%s\" with no value", cfg_shown(n->key, k));
    else
        snprintf(buf, size, "key \"%s\" value \"%s\"", cfg_shown(n->key, k),
                 cfg_shown(n->value, v));
    return buf;
}

/* descriptors: a sequence of descriptors, stored in *slot (a node_list) as
 * soon as it is allocated so that its owner frees whatever was built. */
static int parse_descriptors(struct loader *ld, const yaml_node_t *node, const char *path,
                             void *slot)
{
    struct node_list *list = slot;
    const yaml_node_item_t *start;
    char child[PATH_LEN], what[2 * SHOWN_LEN + 32];
    size_t n, i, first, second;
    int rc = 0;

    if (node->type != YAML_SEQUENCE_NODE)
        return cfg_fail(ld, node, path, "expected a sequence of descriptors, got %s",
                        cfg_kind(node));
    if (ld->depth == DOMAINS_DEPTH_MAX)
        return cfg_fail(ld, node, path, "descriptors nested deeper than %d levels",
                        DOMAINS_DEPTH_MAX);
    start = node->data.sequence.items.start;
    n = (size_t)(node->data.sequence.items.top - start);
    list->items = xcalloc(n ? n : 1, sizeof *list->items);
    list->n = n;
    ld->depth++;
    for (i = 0; i < n && rc == 0; i++) {
        snprintf(child, sizeof child, "%s[%zu]", path, i);
        rc = parse_descriptor(ld, cfg_node_at(ld, start[i]), child, &list->items[i]);
    }
    ld->depth--;
    if (rc == 0 && domains_sort_level(list->items, n, &first, &second) < 0) {
        const yaml_node_t *map = cfg_node_at(ld, start[second]);
        snprintf(child, sizeof child, "%s[%zu]", path, second);
        /* Unsorted on failure: the items are still in the file's order. */
        selector_text(&list->items[second], what, sizeof what);
        rc = cfg_fail(ld, map, child, "duplicate descriptor: %s (also %s[%zu], line %zu)", what,
                      path, first, cfg_node_at(ld, start[first])->start_mark.line + 1);
    }
    return rc;
}

/* One domain mapping into d; "file:line:col" of it kept for messages. */
static int parse_domain(struct loader *ld, const yaml_node_t *map, const char *path,
                        struct domain *d)
{
    struct domain_entry e = {NULL, {0, NULL}};
    const yaml_node_t *at;
    char where[RL_ERRLEN];
    int rc = cfg_parse_fields(ld, map, path, cfg_domain_fields, &e);

    d->name = e.domain;
    d->nchildren = e.descriptors.n;
    d->children = e.descriptors.items;
    if (rc == 0) {
        at = cfg_field_node(ld, map, "domain");
        snprintf(where, sizeof where, "%s:%zu:%zu", ld->name, at->start_mark.line + 1,
                 at->start_mark.column + 1);
        d->file = xstrdup(where);
    }
    return rc;
}

/* A node's name in a stats path: "key", or "key_value" with the value as
 * written ("tenant_beta*"). */
static char *level_name(const struct domain_node *d)
{
    size_t len = strlen(d->key) + (d->value ? strlen(d->value) : 0) + 2;
    char *s = xmalloc(len);

    snprintf(s, len, "%s%s%s", d->key, d->value ? "_" : "", d->value ? d->value : "");
    return s;
}

/* What a limited node's limit makes of a request (domains.h): its depth,
 * the patterns of the share_threshold levels on its way, the
 * value_to_metric levels and, with those, every level's name. up[0..depth)
 * are the nodes from the top down to the limited one. */
static void set_request_rules(struct domain_limit *l, const struct domain_node *const *up,
                              size_t depth)
{
    l->depth = depth;
    for (size_t i = 0; i < depth; i++) {
        const struct domain_node *u = up[i];
        if (u->share_threshold) {
            if (l->share == NULL)
                l->share = xcalloc(depth, sizeof *l->share);
            l->share[i] = xstrdup(u->value); /* the pattern as written */
        } else if (u->value_to_metric && (u->value == NULL || u->value_pattern)) {
            l->metric_values |= UINT32_C(1) << i;
        }
    }
    if (l->metric_values != 0) {
        l->names = xcalloc(depth, sizeof *l->names);
        for (size_t i = 0; i < depth; i++)
            l->names[i] = level_name(up[i]);
    }
}

/* The `limit.path` of every limited node: "key_value.key..." as
 * envoyproxy/ratelimit names its stats (a pattern as written, '*' kept),
 * and its request rules. up[0..depth) are the nodes above this level. */
static void set_paths(struct domain_node *nodes, size_t n, const char *prefix,
                      const struct domain_node **up, size_t depth)
{
    for (size_t i = 0; i < n; i++) {
        struct domain_node *d = &nodes[i];
        char *name = level_name(d);
        size_t len = strlen(prefix) + strlen(name) + 2;
        char *path = xmalloc(len);

        snprintf(path, len, "%s%s%s", prefix, *prefix ? "." : "", name);
        free(name);
        up[depth] = d;
        set_paths(d->children, d->nchildren, path, up, depth + 1);
        if (d->has_limit) {
            d->limit.path = path;
            set_request_rules(&d->limit, up, depth + 1);
        } else {
            free(path);
        }
    }
}

/* set_paths over a whole domain. */
static void set_domain_paths(struct domain *d)
{
    const struct domain_node *up[DOMAINS_DEPTH_MAX + 1];
    set_paths(d->children, d->nchildren, "", up, 0);
}

/* Appends a domain to c's array. */
static struct domain *add_domain(struct config *c)
{
    c->domains = xrealloc(c->domains, (c->ndomains + 1) * sizeof *c->domains);
    memset(&c->domains[c->ndomains], 0, sizeof *c->domains);
    return &c->domains[c->ndomains++];
}

/* The policy file's `domains:`: a sequence of {domain, descriptors}. */
static int load_domains(struct loader *ld)
{
    const yaml_node_t *node = ld->domains;
    const yaml_node_item_t *item;
    char child[PATH_LEN];
    size_t i;

    if (node == NULL)
        return 0;
    if (node->type != YAML_SEQUENCE_NODE)
        return cfg_fail(ld, node, "domains", "expected a sequence of domains, got %s",
                        cfg_kind(node));
    ld->unknown = tolerate_peer_key;
    for (i = 0, item = node->data.sequence.items.start; item < node->data.sequence.items.top;
         item++, i++) {
        struct domain *d = add_domain(ld->c);
        snprintf(child, sizeof child, "domains[%zu]", i);
        if (parse_domain(ld, cfg_node_at(ld, *item), child, d) < 0) {
            ld->unknown = NULL;
            return -1;
        }
        set_domain_paths(d);
    }
    ld->unknown = NULL;
    return 0;
}

/* One of envoyproxy/ratelimit's files: exactly one domain. */
static int load_envoy_file(const char *file, const char *text, size_t len, void *arg)
{
    struct loader *policy_ld = arg;
    struct loader ld = {.name = file,
                        .err = policy_ld->err,
                        .errlen = policy_ld->errlen,
                        .c = policy_ld->c,
                        .envoy_file = 1,
                        .unknown = tolerate_peer_key};
    yaml_parser_t parser;
    int rc;

    if (!yaml_parser_initialize(&parser))
        return snprintf(ld.err, ld.errlen, "%s: out of memory", file), -1;
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
    rc = cfg_load_document(&ld, &parser, text, len);
    if (rc == 0) {
        struct domain *d = add_domain(ld.c);
        rc = parse_domain(&ld, yaml_document_get_root_node(&ld.doc), "", d);
        if (rc == 0)
            set_domain_paths(d);
        yaml_document_delete(&ld.doc);
    }
    yaml_parser_delete(&parser);
    return rc;
}

/* Every domain, from the policy file and the envoy directory (envoy_dir,
 * else the file's envoy_config:), sorted by name. A name twice is an error
 * naming both places, or with envoy_merge_domains (merge: -1 for the
 * file's, else the command line's) one domain of all their top-level
 * descriptors, as envoyproxy/ratelimit's MERGE_DOMAIN_CONFIG. */
int cfg_load_all_domains(struct loader *ld, const char *envoy_dir, int merge)
{
    struct config *c = ld->c;
    size_t first, second, node;
    char buf[SHOWN_LEN], what[2 * SHOWN_LEN + 32];

    if (envoy_dir != NULL) {
        free(c->envoy_config);
        c->envoy_config = xstrdup(envoy_dir);
    }
    if (merge >= 0)
        c->envoy_merge_domains = merge;
    if (load_domains(ld) < 0)
        return -1;
    if (c->envoy_config != NULL &&
        envoy_config_each(c->envoy_config, load_envoy_file, ld, ld->err, ld->errlen) < 0)
        return -1;
    if (domains_sort(c->domains, c->ndomains, &first, &second) == 0)
        return 0;
    if (!c->envoy_merge_domains) {
        snprintf(ld->err, ld->errlen,
                 "%s: domain \"%s\" is defined twice: also at %s (envoy_merge_domains: true "
                 "merges them)",
                 c->domains[second].file, cfg_shown(c->domains[second].name, buf),
                 c->domains[first].file);
        return -1;
    }
    if (domains_merge(c->domains, &c->ndomains, &first, &second, &node) < 0) {
        selector_text(&c->domains[second].children[node], what, sizeof what);
        snprintf(ld->err, ld->errlen,
                 "%s: domain \"%s\": duplicate descriptor: %s at the top of both this domain "
                 "and the one at %s (envoy_merge_domains merges domains, not descriptors)",
                 c->domains[second].file, cfg_shown(c->domains[second].name, buf), what,
                 c->domains[first].file);
        return -1;
    }
    return 0;
}
