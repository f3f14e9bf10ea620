/* SPDX-License-Identifier: Apache-2.0 */
/*
 * domains.h: Envoy rate limit descriptors mapped to limits. Two sources
 * load into the same tree, held by the config snapshot:
 *   - the policy file's top-level `domains:` section, whose descriptors
 *     name one of ratelimitd's policies (`policy:`) or give
 *     envoyproxy/ratelimit's own `rate_limit: {unit, requests_per_unit}`;
 *   - envoyproxy/ratelimit's YAML files, unchanged, one domain per file,
 *     from the directory of `envoy_config:` (or --envoy-config DIR).
 * Also owns the lookup of one request descriptor in that tree, with
 * envoyproxy/ratelimit's matching rules. No I/O past loading; no front type.
 */
#ifndef RATELIMITD_DOMAINS_H
#define RATELIMITD_DOMAINS_H

#include <stddef.h>
#include <stdint.h>

#include "config/policy.h"

/* Envoy's RateLimitResponse.RateLimit.Unit, with its numbering. */
enum rls_unit {
    RLS_UNIT_UNKNOWN = 0,
    RLS_UNIT_SECOND = 1,
    RLS_UNIT_MINUTE = 2,
    RLS_UNIT_HOUR = 3,
    RLS_UNIT_DAY = 4,
    RLS_UNIT_MONTH = 5,
    RLS_UNIT_YEAR = 6,
    RLS_UNIT_WEEK = 7,
};

/* One entry of a request's descriptor, as a front decoded it (any bytes). */
struct descriptor_entry {
    const char *key;
    size_t keylen;
    const char *value;
    size_t valuelen;
};

/* What a matched descriptor applies. */
struct domain_limit {
    /* The policy that decides it: one of the snapshot's policies, a copy of
     * one with shadow set (shadow_mode), or the limit's own fixed-window
     * policy (rate_limit:). NULL when unlimited. Owned by the snapshot. */
    const struct policy *policy;
    /* The policy made for this node (rate_limit:, or a shadow_mode copy of a
     * named policy), freed with the tree; NULL when policy is one of the
     * snapshot's own policies (or NULL). */
    struct policy *owned;
    int unlimited;       /* rate_limit.unlimited: always OK, nothing counted */
    int detailed_metric; /* metrics name the request's values, not the config's */
    int quota_mode;      /* a soft limit: over it, the request is denied only when
                          * every quota descriptor of the request is over (rls.c) */
    char *name;          /* rate_limit.name (NULL: none), what `replaces` names */
    size_t nreplaces;
    char **replaces; /* names of limits this one replaces when both match */
    /* rate_limit: as configured; policy: RLS_UNIT_UNKNOWN and 0 (the answer
     * derives them from the binding tier) */
    enum rls_unit unit;
    int64_t requests_per_unit;
    char *path; /* "key_value.key..." as envoyproxy/ratelimit's stats name it */
    /* The depth of the node (the number of entries a descriptor has when
     * it meets this limit), and per level what replaces the request's
     * value, set at load (config_domains.c):
     *   share[i]: share_threshold on that level's wildcard node: the
     *     pattern as written ("files/" then a star), which takes the place of the
     *     value in the counter's key and in the metric name, so that every
     *     value the wildcard matches shares one counter; NULL elsewhere.
     *     share itself is NULL when no level shares.
     *   metric_values: bit i set when level i's node has value_to_metric
     *     and matched by wildcard or by key alone: the metric names the
     *     request's value there rather than the config's; names (NULL when
     *     metric_values is 0) then holds every level's name as the config
     *     spells it ("key_value", "key_pattern*", "key") for the others. */
    size_t depth;
    char **share;
    uint32_t metric_values;
    char **names;
};

/* A node of a domain's descriptor tree. */
struct domain_node {
    char *key;
    /* The value as written; NULL: any value. With a '*' in it, a pattern
     * (value_pattern): each '*' matches any run of bytes, the empty one too
     * ("beta*", "*.example.com", "a*b*c"). */
    char *value;
    int value_pattern;   /* value holds a '*': matched as a pattern, not exactly */
    int share_threshold; /* share_threshold: every value the pattern matches, one counter */
    int value_to_metric; /* value_to_metric: metrics name the request's value here */
    int has_limit;
    struct domain_limit limit;
    size_t nchildren;
    struct domain_node *children;
};

struct domain {
    char *name;
    char *file; /* "file:line:col" of its `domain:`, for messages */
    size_t nchildren;
    struct domain_node *children;
};

/*
 * The limit descriptor `entries` (n >= 1) of `domain` matches in c, with
 * envoyproxy/ratelimit's rules: entry by entry, a child with that key and
 * exactly that value wins, then the first written of that key whose
 * pattern matches the value (domains_glob), then one with that key and no
 * value; the limit is that of the node reached by the
 * last entry (a limit on a node reached earlier does not apply to a longer
 * descriptor). NULL when nothing matches (unknown domain, no path, or no
 * limit at the end of it).
 */
const struct domain_limit *domains_match(const struct domain *domains, size_t ndomains,
                                         const char *domain, size_t domainlen,
                                         const struct descriptor_entry *entries, size_t n);

/* The domain of that name (len bytes) in c, or NULL: tells an unknown
 * domain from a known one where a descriptor matched nothing (metrics). */
const struct domain *domains_find(const struct domain *domains, size_t ndomains, const char *name,
                                  size_t len);

/* Whether two snapshots' domains decide alike: the same names, trees,
 * values and limits (policies compared with policy_equal). For the reload
 * line's list of what changed; the file positions are not compared. */
int domains_equal(const struct domain *a, size_t na, const struct domain *b, size_t nb);

/*
 * Whether the NUL-terminated pattern matches len bytes at s (any bytes):
 * every '*' in it matches any run of bytes, possibly empty, every other
 * byte itself; there is no escape. Greedy, with one point to go back to
 * (the last '*' met): at most strlen(pattern) * len steps, however many
 * '*' there are, and no allocation.
 */
int domains_glob(const char *pattern, const char *s, size_t len);

/* Nested descriptors at most (a domain's tree is at most this deep). */
#define DOMAINS_DEPTH_MAX 16

/*
 * The entries a matched limit l counts under: in[0..n) copied to out, with
 * the value of each level l->share names replaced by its pattern, so that
 * share_threshold's wildcard values share one key. out has room for n
 * entries; n is l->depth whenever l came from domains_match (a limit
 * without share copies in unchanged).
 */
void domains_share_entries(const struct domain_limit *l, const struct descriptor_entry *in,
                           size_t n, struct descriptor_entry *out);

/*
 * The metric name of a request's descriptor (in, n entries) that matched
 * l, when it depends on the request: detailed_metric ("key_value" of every
 * entry, shared levels as their pattern) or a value_to_metric level; the
 * name is "key_value.key..." as envoyproxy/ratelimit's stats spell it.
 * Returns a new string (the caller frees it) with its length in *len, or
 * NULL when the config's own l->path names it.
 */
char *domains_metric_name(const struct domain_limit *l, const struct descriptor_entry *in, size_t n,
                          size_t *len);

/*
 * Merges the domains defined more than once (adjacent after domains_sort,
 * in the order they were loaded) into the first of each name, as
 * envoyproxy/ratelimit's MERGE_DOMAIN_CONFIG does: their top-level
 * descriptors are put together (a wildcard's place in the order it is
 * tried follows the order of loading), and the same selector at the top
 * of two of them is an error: returns -1 with *first and *second the two
 * domains holding it (positions in the array as left, *n updated, that
 * name's domains unmerged) and *node its position among *second's
 * top-level descriptors. Returns 0 with *n the domains left.
 */
int domains_merge(struct domain *domains, size_t *n, size_t *first, size_t *second,
                  size_t *node) RL_WUR;

/* The number of seconds in unit (MONTH 30 days, YEAR 365 days, as
 * envoyproxy/ratelimit counts them); 0 for UNKNOWN. */
int64_t rls_unit_seconds(enum rls_unit u);

/* The unit's name as Envoy spells it ("SECOND"...), and its lower-case form
 * from envoyproxy/ratelimit's YAML files ("second"...; any case is accepted, as
 * envoyproxy/ratelimit upper-cases it), -1 if unknown or UNKNOWN. */
const char *rls_unit_name(enum rls_unit u);
int rls_unit_from_name(const char *lower, enum rls_unit *out) RL_WUR;

/* The name of the policies made from envoyproxy/ratelimit's limits: not a
 * valid policy name, so never one of `policies:`. */
#define DOMAINS_ENVOY_POLICY "@envoy"

/*
 * Fills *p with the policy of an envoyproxy/ratelimit limit of
 * requests_per_unit per unit, as that project counts it: one fixed_window
 * tier named for the unit ("minute"), failure_mode open, the config's
 * top-level headers and deny_status. requests_per_unit 0 is valid: a limit
 * that denies every request (policies' own `limit:` stays at least 1). Used for the files'
 * `rate_limit:` and for Envoy's per-request limit override. Returns 0, or -1 with a message (an
 * unknown unit, a limit policy.c refuses).
 */
int domains_envoy_policy(struct policy *p, enum rls_unit unit, int64_t requests_per_unit,
                         int shadow, enum header_mode headers, int64_t deny_status, char *err,
                         size_t errlen) RL_WUR;

/* Makes *p's window (domains_envoy_policy's) multiplier units long:
 * rate_limit.unit_multiplier. Returns 0, or -1 with a message (a window
 * policy.c refuses). */
int domains_envoy_multiply(struct policy *p, int64_t multiplier, char *err, size_t errlen) RL_WUR;

/* envoy_calendar_units: makes *p's window (domains_envoy_policy's, unit
 * MONTH or YEAR) a calendar month or year in zone (UTC); other units stay
 * as they are (a DAY of 86400 s is already a UTC day). Returns 0. */
int domains_envoy_calendar(struct policy *p, enum rls_unit unit,
                           const struct tzif_zone *zone) RL_WUR;

/* Frees a domain's tree (not the struct itself); called by config_free. */
void domain_free(struct domain *d);

/* Frees one node's tree and limit (not the struct itself). */
void domain_node_free(struct domain_node *n);

/*
 * Makes a level of the tree ready for domains_match: sorts the n nodes by
 * key, then exact values (by value), then patterns (in the order they
 * were written, which is the order envoyproxy/ratelimit tries them), then
 * the value-less node. Two nodes with the same key and value are
 * ambiguous: returns -1 with *first and *second set to their positions
 * before the sort (*second the later one). Returns 0 otherwise.
 */
int domains_sort_level(struct domain_node *nodes, size_t n, size_t *first, size_t *second) RL_WUR;

/* Sorts c's domains by name for domains_match, those of one name in the
 * order they were loaded. Two of the same name: returns -1 with *first
 * and *second their positions after the sort (adjacent; *second loaded
 * later; of all such pairs, the one whose second was loaded first); 0
 * otherwise. Sorted either way. */
int domains_sort(struct domain *domains, size_t n, size_t *first, size_t *second) RL_WUR;

#endif
