/* SPDX-License-Identifier: Apache-2.0 */
/*
 * config_policies.c: the policy file's `policies:` mapping: each policy's
 * fields, its tiers and its per-key overrides, parsed by the walker against
 * the tables below, kept sorted by name (config_find_policy); and, once the
 * whole file is read, the per-policy settings left unset taking the
 * top-level value.
 *
 * The tables of policies, tiers and overrides live here rather than in
 * config_fields.c: they fill structs this file's parsers own while they
 * parse (struct override_entry) or build (struct policy), and none carries
 * a reload rule (a reload takes every policy as the file has it).
 *
 * Does not own what a valid tier is (policy.c's policy_tier_validate: this
 * file only maps its messages back to the line of the field they name),
 * the overrides' lookup (policy.c), nor key templates (key_template.c).
 */
#include "config/config.h"
#include "config/config_internal.h"
#include "lib/buf.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int parse_algorithm(struct loader *ld, const yaml_node_t *node, const char *path,
                           void *slot);
static int parse_tiers(struct loader *ld, const yaml_node_t *node, const char *path, void *slot);
static int parse_key_template(struct loader *ld, const yaml_node_t *node, const char *path,
                              void *slot);
static int parse_calendar(struct loader *ld, const yaml_node_t *node, const char *path, void *slot);
static int parse_timezone(struct loader *ld, const yaml_node_t *node, const char *path, void *slot);

/* ---- the field tables -------------------------------------------------------- */

/* F_CHOICE values are stored through an int. */
_Static_assert(sizeof(enum failure_mode) == sizeof(int), "enum failure_mode is an int");
_Static_assert(sizeof(enum missing_key) == sizeof(int), "enum missing_key is an int");
static const char *const missing_key_names[] = {[MISSING_KEY_SKIP] = "skip",
                                                [MISSING_KEY_SHARED] = "shared",
                                                [MISSING_KEY_REJECT] = "reject",
                                                NULL};
static const char *const failure_names[] = {
    [FAILURE_OPEN] = "open", [FAILURE_CLOSED] = "closed", [FAILURE_LOCAL] = "local", NULL};

/* A tier's numbers are judged by policy_tier_validate, so the table only
 * asks for integers and durations here, not their bounds. */
static const struct field tier_fields[] = {
    {"name", F_NAME, .required = 1, .offset = offsetof(struct tier, name)},
    {"algorithm", F_CUSTOM, .required = 1, .offset = offsetof(struct tier, algorithm),
     .parse = parse_algorithm},
    {"limit", F_INT, .required = 1, .offset = offsetof(struct tier, limit), .min = INT64_MIN,
     .max = INT64_MAX},
    /* Required by every algorithm but concurrency (policy_tier_validate),
     * and not with calendar (check_calendar). */
    {"window", F_DURATION, .offset = offsetof(struct tier, window_us), .max = INT64_MAX},
    {"burst", F_INT, .offset = offsetof(struct tier, burst), .min = INT64_MIN, .max = INT64_MAX},
    {"precision", F_DURATION, .offset = offsetof(struct tier, precision_us), .max = INT64_MAX},
    {"lease_timeout", F_DURATION, .offset = offsetof(struct tier, lease_timeout_us),
     .max = INT64_MAX},
    {"calendar", F_CUSTOM, .offset = offsetof(struct tier, calendar.unit), .parse = parse_calendar},
    {"timezone", F_CUSTOM, .offset = offsetof(struct tier, calendar.zone), .parse = parse_timezone},
    {"anchor_day", F_INT, .offset = offsetof(struct tier, calendar.anchor_day), .min = 1,
     .max = 31},
    {"week_start", F_CHOICE, .offset = offsetof(struct tier, calendar.week_start),
     .choices = calendar_weekday_names},
    {.name = NULL},
};

/* policies.NAME.lease: "auto" or a number of units (1 to 10^9). */
static int parse_lease(struct loader *ld, const yaml_node_t *node, const char *path, void *slot)
{
    char msg[RL_ERRLEN];
    const char *s = cfg_scalar_text(ld, node, path, "auto or a number of units", 0);

    if (s == NULL)
        return -1;
    if (strcmp(s, "auto") == 0) {
        *(int64_t *)slot = POLICY_LEASE_AUTO;
        return 0;
    }
    if (util_parse_int64(s, 1, 1000000000, slot, msg, sizeof msg) < 0)
        return cfg_fail(ld, node, path, "expected auto or a number of units: %s", msg);
    return 0;
}

/* The text of an override's key or prefix: what a request's key can match. */
static int check_override_text(const char *s, char *err, size_t errlen)
{
    if (*s == '\0')
        return snprintf(err, errlen, "must not be empty"), -1;
    if (strlen(s) > POLICY_KEY_MAX)
        return snprintf(err, errlen, "longer than %d bytes (the longest key)", POLICY_KEY_MAX), -1;
    return 0;
}

/* One item of policies.NAME.overrides while it is parsed: exactly one of
 * key and prefix (owned here), and tiers in a policy, parse_tiers's target. */
struct override_entry {
    char *key;
    char *prefix;
    struct policy tiers;
};

static const struct field override_fields[] = {
    {"key", F_STRING, .offset = offsetof(struct override_entry, key), .check = check_override_text},
    {"prefix", F_STRING, .offset = offsetof(struct override_entry, prefix),
     .check = check_override_text},
    {"tiers", F_CUSTOM, .required = 1, .offset = offsetof(struct override_entry, tiers),
     .parse = parse_tiers, .section = tier_fields},
    {.name = NULL},
};

const struct field cfg_policy_fields[] = {
    {"failure_mode", F_CHOICE, .offset = offsetof(struct policy, failure_mode),
     .choices = failure_names},
    {"shadow", F_BOOL, .offset = offsetof(struct policy, shadow)},
    {"deny_cache", F_BOOL, .offset = offsetof(struct policy, deny_cache), .def = 1},
    {"lease", F_CUSTOM, .offset = offsetof(struct policy, lease), .parse = parse_lease},
    /* HEADERS_INHERIT: the top-level headers, set at the end of the load. */
    {"headers", F_CHOICE, .offset = offsetof(struct policy, headers), .choices = cfg_header_names,
     .def = HEADERS_INHERIT},
    {"key", F_CUSTOM, .offset = offsetof(struct policy, key), .parse = parse_key_template},
    {"missing_key", F_CHOICE, .offset = offsetof(struct policy, missing_key),
     .choices = missing_key_names},
    {"deny_status", F_INT, .offset = offsetof(struct policy, deny_status), .min = 400, .max = 499},
    {"tiers", F_CUSTOM, .required = 1, .offset = 0 /* the whole policy */, .parse = parse_tiers,
     .section = tier_fields},
    {"overrides", F_CUSTOM, .offset = offsetof(struct policy, overrides),
     .parse = cfg_parse_overrides, .section = override_fields},
    {.name = NULL},
};

_Static_assert(NROWS(tier_fields) <= MAX_FIELDS && NROWS(cfg_policy_fields) <= MAX_FIELDS &&
                   NROWS(override_fields) <= MAX_FIELDS,
               "raise MAX_FIELDS");

/* ---- policies and tiers ---------------------------------------------------------- */

static int parse_algorithm(struct loader *ld, const yaml_node_t *node, const char *path, void *slot)
{
    char buf[SHOWN_LEN];
    struct buf list = {NULL, 0, 0};
    const char *s = cfg_scalar_text(ld, node, path, "an algorithm name", 0);
    int i;

    if (s == NULL)
        return -1;
    if (policy_algorithm_from_name(s, slot) == 0)
        return 0;
    for (i = 0; i < ALG__COUNT; i++)
        cfg_list_add(&list, policy_algorithm_name((enum algorithm)i));
    cfg_fail(ld, node, path, "unknown algorithm \"%s\" (known: %s)", cfg_shown(s, buf), list.data);
    buf_free(&list);
    return -1;
}

static int parse_calendar(struct loader *ld, const yaml_node_t *node, const char *path, void *slot)
{
    char buf[SHOWN_LEN];
    struct buf list = {NULL, 0, 0};
    const char *s = cfg_scalar_text(ld, node, path, "a calendar unit", 0);

    if (s == NULL)
        return -1;
    for (int i = 0; calendar_unit_names[i] != NULL; i++) {
        if (strcmp(s, calendar_unit_names[i]) == 0) {
            *(enum calendar_unit *)slot = (enum calendar_unit)(i + 1);
            return 0;
        }
    }
    for (int i = 0; calendar_unit_names[i] != NULL; i++)
        cfg_list_add(&list, calendar_unit_names[i]);
    cfg_fail(ld, node, path, "unknown calendar \"%s\" (known: %s)", cfg_shown(s, buf), list.data);
    buf_free(&list);
    return -1;
}

int cfg_zone(struct loader *ld, const char *name, const struct tzif_zone **out, char *err,
             size_t errlen)
{
    struct config *c = ld->c;
    struct tzif_zone *z = NULL;

    for (size_t i = 0; i < c->nzones; i++) {
        if (strcmp(tzif_name(c->zones[i]), name) == 0) {
            *out = c->zones[i];
            return 0;
        }
    }
    if (name[0] == '\0')
        z = tzif_new_utc(); /* the default: no file needed */
    else if (tzif_load(NULL, name, &z, err, errlen) < 0)
        return -1;
    c->zones = xrealloc(c->zones, (c->nzones + 1) * sizeof *c->zones);
    c->zones[c->nzones++] = z;
    *out = z;
    return 0;
}

/* A tier's timezone: loaded now, so that -t fails on an unknown zone. */
static int parse_timezone(struct loader *ld, const yaml_node_t *node, const char *path, void *slot)
{
    char msg[RL_ERRLEN];
    const char *s = cfg_scalar_text(ld, node, path, "a time zone name", 0);

    if (s == NULL)
        return -1;
    if (*s == '\0')
        return cfg_fail(ld, node, path, "must not be empty (leave it out for UTC)");
    if (cfg_zone(ld, s, slot, msg, sizeof msg) < 0)
        return cfg_fail(ld, node, path, "%s", msg);
    return 0;
}

/* A field that only some tiers take: its node if present where it should
 * not be, with the message why. */
static int check_only_with(struct loader *ld, const yaml_node_t *map, const char *path,
                           const char *field, int allowed, const char *why)
{
    const yaml_node_t *at = cfg_field_node(ld, map, field);
    if (at != NULL && !allowed)
        return cfg_fail(ld, at, "", "%s.%s: %s", path, field, why);
    return 0;
}

/* The rules between window and the calendar's fields; fills in the
 * calendar's defaults (UTC, anchor day 1) and the nominal window. */
static int check_calendar(struct loader *ld, const yaml_node_t *map, const char *path,
                          struct tier *t)
{
    struct calendar_spec *c = &t->calendar;
    const yaml_node_t *window = cfg_field_node(ld, map, "window");
    char msg[RL_ERRLEN];

    if (c->unit == CALENDAR_NONE) {
        if (window == NULL && t->algorithm != ALG_CONCURRENCY)
            return cfg_fail(ld, map, path, "missing required field \"window\" (or calendar)");
        if (check_only_with(ld, map, path, "timezone", 0, "only a calendar tier takes one") < 0 ||
            check_only_with(ld, map, path, "anchor_day", 0, "only calendar: month takes one") < 0 ||
            check_only_with(ld, map, path, "week_start", 0, "only calendar: week takes one") < 0)
            return -1;
        return 0;
    }
    if (window != NULL)
        return cfg_fail(ld, window, "", "%s.window: give window or calendar, not both", path);
    if (check_only_with(ld, map, path, "anchor_day", c->unit == CALENDAR_MONTH,
                        "only calendar: month takes one") < 0 ||
        check_only_with(ld, map, path, "week_start", c->unit == CALENDAR_WEEK,
                        "only calendar: week takes one") < 0)
        return -1;
    if (c->zone == NULL && cfg_zone(ld, "", &c->zone, msg, sizeof msg) < 0)
        return cfg_fail(ld, map, path, "%s", msg);
    if (c->anchor_day == 0)
        c->anchor_day = 1;
    t->window_us = calendar_max_span_us(c->unit);
    return 0;
}

/*
 * Judges a parsed tier. policy_tier_validate's message starts with the name
 * of the field at fault; the error points at that field's value, or at the
 * tier when the field is absent (a missing precision, say).
 */
static int check_tier(struct loader *ld, const yaml_node_t *map, const char *path, struct tier *t)
{
    char msg[RL_ERRLEN], field[PATH_LEN];
    const yaml_node_t *at, *burst;
    size_t n;

    if (check_calendar(ld, map, path, t) < 0)
        return -1;
    if (policy_tier_validate(t, msg, sizeof msg) < 0) {
        n = strcspn(msg, ":");
        snprintf(field, sizeof field, "%.*s", (int)n, msg);
        at = msg[n] == ':' ? cfg_field_node(ld, map, field) : NULL;
        return cfg_fail(ld, at ? at : map, "", "%s.%s", path, msg);
    }
    burst = cfg_field_node(ld, map, "burst");
    if (burst != NULL && t->burst == 0 && !policy_burst_zero_meaningful(t->algorithm))
        return cfg_fail(ld, burst, "", "%s.burst: 0 is not allowed for %s; leave burst out instead",
                        path, policy_algorithm_name(t->algorithm));
    return 0;
}

static int parse_tiers(struct loader *ld, const yaml_node_t *node, const char *path, void *slot)
{
    struct policy *p = slot;
    const yaml_node_item_t *item;
    char child[PATH_LEN];
    size_t i, j;

    if (node->type != YAML_SEQUENCE_NODE)
        return cfg_fail(ld, node, path, "expected a sequence of tiers, got %s", cfg_kind(node));
    item = node->data.sequence.items.start;
    if (item == node->data.sequence.items.top)
        return cfg_fail(ld, node, path, "at least one tier is required");
    for (i = 0; item < node->data.sequence.items.top; item++, i++) {
        const yaml_node_t *map = cfg_node_at(ld, *item);
        struct tier *t;

        if (i == POLICY_MAX_TIERS)
            return cfg_fail(ld, map, path, "at most %d tiers are allowed", POLICY_MAX_TIERS);
        t = &p->tiers[i];
        snprintf(child, sizeof child, "%s[%zu]", path, i);
        memset(t, 0, sizeof *t);
        if (cfg_parse_fields(ld, map, child, tier_fields, t) < 0 ||
            check_tier(ld, map, child, t) < 0)
            return -1;
        for (j = 0; j < i; j++)
            if (strcmp(p->tiers[j].name, t->name) == 0)
                return cfg_fail(ld, cfg_field_node(ld, map, "name"), child,
                                "duplicate tier name \"%s\"", t->name);
        p->ntiers = i + 1;
    }
    return 0;
}

/* Indexes a policy's overrides, and reports two of the same key, or of the
 * same prefix, at the later one's key or prefix. seq is the overrides
 * sequence, whose items were added in order. */
static int index_overrides(struct loader *ld, const yaml_node_t *seq, const char *path,
                           struct policy_overrides *o)
{
    const yaml_node_t *second_map, *first_map, *at;
    char buf[SHOWN_LEN];
    const char *what;
    size_t first, second;

    if (policy_overrides_index(o, &first, &second) == 0)
        return 0;
    first_map = cfg_node_at(ld, seq->data.sequence.items.start[first]);
    second_map = cfg_node_at(ld, seq->data.sequence.items.start[second]);
    what = cfg_field_node(ld, second_map, "key") != NULL ? "key" : "prefix";
    at = cfg_field_node(ld, second_map, what);
    return cfg_fail(ld, at, "", "%s[%zu].%s: duplicate %s \"%s\" (also overrides[%zu], line %zu)",
                    path, second, what, what, cfg_shown((const char *)at->data.scalar.value, buf),
                    first, first_map->start_mark.line + 1);
}

/*
 * policies.NAME.overrides: a sequence of {key | prefix, tiers}. The set is
 * stored in *slot (the policy's overrides) as soon as it exists, so that
 * whoever frees the policy frees it, whatever fails here. The variants get
 * the policy's settings at the end of the load (policy_overrides_inherit,
 * called by config_load_string once every per-policy setting is final).
 */
int cfg_parse_overrides(struct loader *ld, const yaml_node_t *node, const char *path, void *slot)
{
    struct policy_overrides **out = slot;
    const yaml_node_item_t *item;
    char child[PATH_LEN];
    size_t i;

    if (node->type != YAML_SEQUENCE_NODE)
        return cfg_fail(ld, node, path, "expected a sequence of overrides, got %s", cfg_kind(node));
    *out = policy_overrides_new();
    for (i = 0, item = node->data.sequence.items.start; item < node->data.sequence.items.top;
         item++, i++) {
        const yaml_node_t *map = cfg_node_at(ld, *item);
        struct override_entry e = {NULL, NULL, {.ntiers = 0}};
        const char *text;
        int rc;

        if (i == POLICY_MAX_OVERRIDES)
            return cfg_fail(ld, map, path, "at most %d overrides are allowed",
                            POLICY_MAX_OVERRIDES);
        snprintf(child, sizeof child, "%s[%zu]", path, i);
        rc = cfg_parse_fields(ld, map, child, override_fields, &e);
        if (rc == 0 && e.key != NULL && e.prefix != NULL)
            rc = cfg_fail(ld, map, child, "give key or prefix, not both");
        else if (rc == 0 && e.key == NULL && e.prefix == NULL)
            rc = cfg_fail(ld, map, child,
                          "missing key (one exact key) or prefix (every key that starts with it)");
        text = e.key != NULL ? e.key : e.prefix;
        if (rc == 0)
            policy_overrides_add(*out, e.prefix != NULL, text, strlen(text), e.tiers.tiers,
                                 e.tiers.ntiers);
        free(e.key);
        free(e.prefix);
        if (rc < 0)
            return -1;
    }
    /* No overrides: keep the lookup at its one-branch fast case. */
    if (i == 0) {
        policy_overrides_free(*out);
        *out = NULL;
    }
    return index_overrides(ld, node, path, *out);
}

/* A policy's place in the file, to sort by name and still report a
 * duplicate at its second occurrence. */
struct entry {
    const struct policy *policy;
    const yaml_node_t *key;
    size_t index;
};

static int entry_cmp(const void *a, const void *b)
{
    const struct entry *x = a, *y = b;
    int c = strcmp(x->policy->name, y->policy->name);

    return c ? c : (x->index > y->index) - (x->index < y->index);
}

static int policy_cmp(const void *name, const void *p)
{
    return strcmp(name, ((const struct policy *)p)->name);
}

/* A policy's key template before its fields are read: "${ip}". */
int cfg_default_key(struct loader *ld, const yaml_node_t *at, const char *path, struct policy *p)
{
    char msg[RL_ERRLEN];
    size_t off;
    if (key_template_compile(KEY_TEMPLATE_DEFAULT, &p->key, &off, msg, sizeof msg) < 0)
        return cfg_fail(ld, at, path, "%s", msg); /* a broken invariant, reported all the same */
    return 0;
}

/* key: a template (key_template.h), compiled now so that a bad one is an
 * error at its line and column, never a surprise per request. */
static int parse_key_template(struct loader *ld, const yaml_node_t *node, const char *path,
                              void *slot)
{
    const char *s = cfg_scalar_text(ld, node, path, "a key template", 0);
    char msg[RL_ERRLEN];
    size_t at;

    if (s == NULL)
        return -1;
    if (key_template_compile(s, slot, &at, msg, sizeof msg) < 0)
        return cfg_fail_in(ld, node, at, path, "%s", msg);
    return 0;
}
/* The forward-auth settings, which only /auth/<policy> reads. */
static const char *const auth_fields[] = {"key", "missing_key", "deny_status"};

/* A policy that takes leases (a concurrency tier, its own or an override's)
 * must be released by its caller, which a gateway asking /auth/<policy>
 * cannot do: its forward-auth settings are refused here, at their line,
 * and auth.c refuses the path at request time. */
static int check_lease_fronts(struct loader *ld, const yaml_node_t *map, const char *path,
                              const struct policy *p)
{
    if (!policy_may_lease(p))
        return 0;
    for (size_t i = 0; i < sizeof auth_fields / sizeof auth_fields[0]; i++) {
        const yaml_node_t *at = cfg_field_node(ld, map, auth_fields[i]);
        if (at != NULL)
            return cfg_fail(ld, at, path,
                            "%s: a policy with a concurrency tier cannot serve forward-auth "
                            "(/auth/<policy> has no way to release a lease)",
                            auth_fields[i]);
    }
    return 0;
}

/* A policy with `lease:` must lease on every tier (local leases, core/
 * local_lease.h): refused at the field otherwise. */
static int check_local_lease(struct loader *ld, const yaml_node_t *map, const char *path,
                             const struct policy *p)
{
    if (p->lease == 0)
        return 0;
    for (size_t j = 0; j < p->ntiers; j++) {
        enum algorithm a = p->tiers[j].algorithm;
        if (!policy_algorithm_leases(a))
            return cfg_fail(ld, cfg_field_node(ld, map, "lease"), path,
                            "lease: tier \"%s\" is %s, which cannot be leased exactly "
                            "(only fixed_window, calendar windows, token_bucket and gcra can)",
                            p->tiers[j].name, policy_algorithm_name(a));
    }
    return 0;
}

/* The policies mapping: name -> policy. Leaves c->policies sorted by name. */
int cfg_parse_policies(struct loader *ld, const yaml_node_t *node, const char *path, void *slot)
{
    struct config *c = slot;
    const yaml_node_pair_t *pair;
    struct policy *parsed;
    struct entry *order;
    char child[PATH_LEN];
    size_t n, i;
    int rc = 0;

    if (node->type != YAML_MAPPING_NODE)
        return cfg_fail(ld, node, path, "expected a mapping of policy names to policies, got %s",
                        cfg_kind(node));
    n = (size_t)(node->data.mapping.pairs.top - node->data.mapping.pairs.start);
    if (n == 0)
        return cfg_fail(ld, node, path, "at least one policy is required");

    parsed = xcalloc(n, sizeof *parsed);
    order = xcalloc(n, sizeof *order);
    for (i = 0, pair = node->data.mapping.pairs.start; i < n && rc == 0; i++, pair++) {
        const yaml_node_t *key = cfg_node_at(ld, pair->key);
        const char *name = cfg_name_text(ld, key, path);

        if (name == NULL) {
            rc = -1;
            break;
        }
        order[i] = (struct entry){&parsed[i], key, i};
        strcpy(parsed[i].name, name);
        cfg_set_defaults(cfg_policy_fields, &parsed[i]);
        if (cfg_default_key(ld, key, child, &parsed[i]) < 0) {
            rc = -1;
            break;
        }
        cfg_join(child, path, name);
        rc = cfg_parse_fields(ld, cfg_node_at(ld, pair->value), child, cfg_policy_fields,
                              &parsed[i]);
        if (rc == 0)
            rc = check_lease_fronts(ld, cfg_node_at(ld, pair->value), child, &parsed[i]);
        if (rc == 0)
            rc = check_local_lease(ld, cfg_node_at(ld, pair->value), child, &parsed[i]);
    }
    if (rc == 0) {
        qsort(order, n, sizeof *order, entry_cmp);
        for (i = 1; i < n && rc == 0; i++)
            if (strcmp(order[i].policy->name, order[i - 1].policy->name) == 0)
                rc = cfg_fail(ld, order[i].key, path, "duplicate policy \"%s\"",
                              order[i].policy->name);
    }
    if (rc == 0) {
        /* The copies take over each policy's overrides. */
        c->policies = xcalloc(n, sizeof *c->policies);
        for (i = 0; i < n; i++)
            c->policies[i] = *order[i].policy;
        c->npolicies = n;
    } else {
        for (i = 0; i < n; i++)
            policy_overrides_free(parsed[i].overrides);
    }
    free(order);
    free(parsed);
    return rc;
}

/* Per-policy settings left unset take the top-level value. Done after the
 * whole file is read, since the top-level field may come after `policies`;
 * afterwards the answer needs only the policy, never the config. */
void cfg_inherit_settings(struct config *c)
{
    for (size_t i = 0; i < c->npolicies; i++) {
        if (c->policies[i].headers == HEADERS_INHERIT)
            c->policies[i].headers = c->headers;
        if (c->policies[i].deny_status == 0)
            c->policies[i].deny_status = c->deny_status;
    }
}

const struct policy *config_find_policy(const struct config *c, const char *name)
{
    if (c == NULL || name == NULL)
        return NULL;
    return bsearch(name, c->policies, c->npolicies, sizeof *c->policies, policy_cmp);
}
