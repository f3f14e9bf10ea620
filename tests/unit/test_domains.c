/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_domains.c: Envoy domains (domains.h). The policy file's `domains:`
 * and envoyproxy/ratelimit's files: every error with its file:line:col,
 * what each field becomes (the @envoy policy, shadow copies, replaces,
 * paths); envoyproxy/ratelimit's matching rules (exact value, then pattern
 * in written order, then key only; a limit applies only at the depth of the
 * request's last entry); units; loading a directory (order, duplicates,
 * --envoy-config winning over envoy_config:, a reload seeing new files);
 * the shipped conf/envoy examples; and the /rlconfig views (domains_dump.h),
 * text to the byte and JSON read back with jansson.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "config/config.h"
#include "config/domains.h"
#include "config/domains_dump.h"
#include "tap.h"

/* One policy "p" (lines 1-3) and the start of `domains:` (line 4). */
#define PRE                                                                                        \
    "policies:\n"                                                                                  \
    "  p: {tiers: [{name: a, algorithm: fixed_window, limit: 10, window: 1s}]}\n"                  \
    "  o: {tiers: [{name: a, algorithm: fixed_window, limit: 10, window: 1s}], overrides: "        \
    "[{prefix: x, tiers: [{name: b, algorithm: gcra, limit: 1, window: 1s}]}]}\n"                  \
    "domains:\n"

/* domains_match and domains_find over a snapshot's domains (none for NULL). */
static const struct domain_limit *snap_match(const struct config *c, const char *domain, size_t len,
                                             const struct descriptor_entry *e, size_t n)
{
    return domains_match(c ? c->domains : NULL, c ? c->ndomains : 0, domain, len, e, n);
}

static const struct domain *snap_find(const struct config *c, const char *name, size_t len)
{
    return domains_find(c ? c->domains : NULL, c ? c->ndomains : 0, name, len);
}

static struct config *load(const char *yaml, char *err, size_t errlen)
{
    return config_load_string("t.yaml", yaml, strlen(yaml), err, errlen);
}

static const struct error_case {
    const char *what;
    const char *yaml; /* after PRE */
    const char *at;   /* "line:column" */
    const char *msg;  /* a substring of what follows "t.yaml:line:column: " */
} error_cases[] = {
    {"domains not a sequence", "  d: 1\n", "5:3", "domains: expected a sequence of domains"},
    {"domain missing", "  - descriptors: []\n", "5:5",
     "domains[0]: missing required field \"domain\""},
    {"domain empty", "  - domain: \"\"\n", "5:13", "domains[0].domain: must not be empty"},
    {"unknown domain field", "  - domain: d\n    limit: 1\n", "6:5", "unknown field \"limit\""},
    {"descriptors not a sequence", "  - domain: d\n    descriptors: {key: a}\n", "6:18",
     "domains[0].descriptors: expected a sequence of descriptors"},
    {"key missing", "  - domain: d\n    descriptors:\n      - value: v\n", "7:9",
     "domains[0].descriptors[0]: missing required field \"key\""},
    {"key empty", "  - domain: d\n    descriptors:\n      - key: ''\n", "7:14",
     "descriptors[0].key: must not be empty"},
    {"unknown descriptor field", "  - domain: d\n    descriptors:\n      - {key: a, limit: 3}\n",
     "7:18", "unknown field \"limit\""},
    {"unknown policy", "  - domain: d\n    descriptors:\n      - {key: a, policy: nope}\n", "7:26",
     "unknown policy \"nope\""},
    {"policy and rate_limit",
     "  - domain: d\n    descriptors:\n      - {key: a, policy: p, rate_limit: {unlimited: "
     "true}}\n",
     "7:26", "give policy or rate_limit, not both"},
    {"bad unit",
     "  - domain: d\n    descriptors:\n      - key: a\n        rate_limit: {unit: "
     "fortnight, requests_per_unit: 1}\n",
     "8:28", "rate_limit.unit: invalid value \"fortnight\""},
    {"unit UNKNOWN",
     "  - domain: d\n    descriptors:\n      - key: a\n        rate_limit: {unit: "
     "unknown, requests_per_unit: 1}\n",
     "8:28", "invalid value \"unknown\""},
    {"requests_per_unit -1",
     "  - domain: d\n    descriptors:\n      - key: a\n        rate_limit: {unit: second, "
     "requests_per_unit: -1}\n",
     "8:55", "requests_per_unit: invalid value \"-1\""},
    {"unit_multiplier 0",
     "  - domain: d\n    descriptors:\n      - key: a\n        rate_limit: {unit: second, "
     "requests_per_unit: 1, unit_multiplier: 0}\n",
     "8:75", "unit_multiplier: invalid value \"0\""},
    {"unit_multiplier past 366 days",
     "  - domain: d\n    descriptors:\n      - key: a\n        rate_limit: {unit: year, "
     "requests_per_unit: 1, unit_multiplier: 2}\n",
     "8:21", "window: must be between 1ms and 366d"},
    {"share_threshold without a wildcard",
     "  - domain: d\n    descriptors:\n      - {key: a, value: v, share_threshold: true}\n", "7:45",
     "share_threshold: true needs a wildcard value"},
    {"share_threshold on a value with no '*'",
     "  - domain: d\n    descriptors:\n      - {key: a, value: 'v.x', share_threshold: true}\n",
     "7:49", "share_threshold: true needs a wildcard value (one with a '*')"},
    {"share_threshold without a value",
     "  - domain: d\n    descriptors:\n      - {key: a, share_threshold: true}\n", "7:35",
     "share_threshold: true needs a wildcard value"},
    {"share_threshold not a bool",
     "  - domain: d\n    descriptors:\n      - {key: a, value: 'v*', share_threshold: 1}\n", "7:48",
     "share_threshold: invalid value \"1\""},
    {"metadata not a mapping", "  - domain: d\n    descriptors:\n      - {key: a, metadata: [x]}\n",
     "7:28", "descriptors[0].metadata: expected a mapping, got a sequence"},
    {"a field outside envoyproxy/ratelimit's schema",
     "  - domain: d\n    descriptors:\n      - {key: a, soft_requests_per_unit: 1}\n", "7:18",
     "unknown field \"soft_requests_per_unit\""},
    {"requests_per_unit missing",
     "  - domain: d\n    descriptors:\n      - key: a\n        rate_limit: {unit: second}\n",
     "8:21", "missing required field \"requests_per_unit\""},
    {"unit missing",
     "  - domain: d\n    descriptors:\n      - key: a\n        rate_limit: {requests_per_unit: "
     "1}\n",
     "8:21", "missing required field \"unit\" (or unlimited: true)"},
    {"unlimited with a unit",
     "  - domain: d\n    descriptors:\n      - key: a\n        rate_limit: {unlimited: true, "
     "unit: second}\n",
     "8:45", "unlimited: true takes no unit"},
    {"replaces itself",
     "  - domain: d\n    descriptors:\n      - key: a\n        rate_limit: {name: x, unit: "
     "second, requests_per_unit: 1, replaces: [{name: x}]}\n",
     "8:77", "replaces names this limit itself"},
    {"replaces without name",
     "  - domain: d\n    descriptors:\n      - key: a\n        rate_limit: {name: x, unit: "
     "second, requests_per_unit: 1, replaces: [{}]}\n",
     "8:78", "replaces[0]: missing required field \"name\""},
    {"shadow_mode not a bool",
     "  - domain: d\n    descriptors:\n      - {key: a, policy: p, shadow_mode: yes}\n", "7:42",
     "shadow_mode: invalid value \"yes\""},
    {"duplicate exact",
     "  - domain: d\n    descriptors:\n      - {key: a, value: v, policy: p}\n      - {key: "
     "b}\n      - {key: a, value: v}\n",
     "9:9",
     "descriptors[2]: duplicate descriptor: key \"a\" value \"v\" (also "
     "domains[0].descriptors[0], line 7)"},
    {"duplicate prefix",
     "  - domain: d\n    descriptors:\n      - {key: a, value: 'v*'}\n      - {key: a, value: "
     "'v*'}\n",
     "8:9", "duplicate descriptor: key \"a\" value \"v*\""},
    {"duplicate key only", "  - domain: d\n    descriptors:\n      - {key: a}\n      - {key: a}\n",
     "8:9", "duplicate descriptor: key \"a\" with no value"},
    {"duplicate nested",
     "  - domain: d\n    descriptors:\n      - key: a\n        descriptors:\n          - {key: "
     "b}\n          - {key: b}\n",
     "10:13", "domains[0].descriptors[0].descriptors[1]: duplicate descriptor"},
    {"domain twice", "  - domain: d\n  - domain: e\n  - domain: d\n", "7:13",
     "domain \"d\" is defined twice: also at t.yaml:5:13 (envoy_merge_domains: true merges "
     "them)"},
    {"merged domains with one descriptor twice",
     "  - domain: d\n    descriptors: [{key: a, value: v}]\n  - domain: d\n    descriptors: "
     "[{key: b}, {key: a, value: v, policy: p}]\nenvoy_merge_domains: true\n",
     "7:13",
     "domain \"d\": duplicate descriptor: key \"a\" value \"v\" at the top of both this domain "
     "and the one at t.yaml:5:13"},
    {"envoy_config relative", "  []\nenvoy_config: envoy\n", "6:15",
     "envoy_config: must be an absolute path"},
    {"envoy_config missing dir", "  []\nenvoy_config: /nonexistent-ratelimitd-dir\n", "",
     "/nonexistent-ratelimitd-dir: No such file or directory"},
};

/* n levels of descriptors, the deepest a key-only node. */
static struct config *nested(int n, char *err, size_t errlen)
{
    char yaml[4096] = PRE "  - domain: d\n    descriptors: ";
    for (int i = 1; i < n; i++)
        strcat(yaml, "[{key: a, descriptors: ");
    strcat(yaml, "[{key: a}]");
    for (int i = 1; i < n; i++)
        strcat(yaml, "}]");
    strcat(yaml, "\n");
    return load(yaml, err, errlen);
}

/* Descriptors nested one level deeper than allowed: refused, with no
 * unbounded recursion. */
static void test_depth(void)
{
    char err[1024];
    struct config *c = nested(17, err, sizeof err);
    ok(c == NULL && strstr(err, "descriptors nested deeper than 16 levels") != NULL,
       "17 levels refused (%s)", err);
    config_unref(c);
    c = nested(16, err, sizeof err);
    ok(c != NULL, "16 levels load (%s)", c ? "" : err);
    struct descriptor_entry e[16];
    for (int i = 0; i < 16; i++)
        e[i] = (struct descriptor_entry){"a", 1, "v", 1};
    ok(c && snap_match(c, "d", 1, e, 16) == NULL, "no limit at the end: none");
    config_unref(c);
}

static void test_errors(void)
{
    for (size_t i = 0; i < sizeof error_cases / sizeof error_cases[0]; i++) {
        const struct error_case *e = &error_cases[i];
        char yaml[4096], err[1024], want[64];
        snprintf(yaml, sizeof yaml, "%s%s", PRE, e->yaml);
        struct config *c = load(yaml, err, sizeof err);
        ok(c == NULL, "%s: refused", e->what);
        config_unref(c);
        snprintf(want, sizeof want, "t.yaml:%s: ", e->at);
        if (*e->at)
            ok(strncmp(err, want, strlen(want)) == 0, "%s: at %s (%s)", e->what, e->at, err);
        ok(strstr(err, e->msg) != NULL, "%s: says \"%s\" (%s)", e->what, e->msg, err);
    }
}

/* A request descriptor from "k=v,k2=v2". */
static size_t entries_of(char *text, struct descriptor_entry *out, size_t max)
{
    size_t n = 0;
    for (char *save = NULL, *tok = strtok_r(text, ",", &save); tok && n < max;
         tok = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(tok, '=');
        *eq = '\0';
        out[n++] = (struct descriptor_entry){tok, strlen(tok), eq + 1, strlen(eq + 1)};
    }
    return n;
}

/* The path of the limit "k=v,..." matches in domain d, or "-" for none. */
static const char *match(const struct config *c, const char *d, const char *desc)
{
    static char text[256];
    struct descriptor_entry e[8];
    snprintf(text, sizeof text, "%s", desc);
    size_t n = entries_of(text, e, 8);
    const struct domain_limit *l = snap_match(c, d, strlen(d), e, n);
    return l ? l->path : "-";
}

static void test_matching(void)
{
    static const char yaml[] =
        PRE "  - domain: edge\n"
            "    descriptors:\n"
            "      - {key: k, value: exact, rate_limit: {unit: second, requests_per_unit: 1}}\n"
            "      - {key: k, value: 'ex*', rate_limit: {unit: second, requests_per_unit: 2}}\n"
            "      - {key: k, value: 'e*', rate_limit: {unit: second, requests_per_unit: 3}}\n"
            "      - {key: k, rate_limit: {unit: second, requests_per_unit: 4}}\n"
            "      - key: parent\n"
            "        rate_limit: {unit: minute, requests_per_unit: 5}\n"
            "        descriptors:\n"
            "          - {key: child, policy: p}\n"
            "          - key: mid\n"
            "            descriptors:\n"
            "              - {key: leaf, value: x, rate_limit: {unlimited: true}}\n"
            "      - {key: 'z', value: 'a*', policy: p}\n"
            "      - {key: zz, value: '*', policy: p}\n"
            "      - {key: blank, value: '', policy: p}\n"
            "  - domain: other\n"
            "    descriptors: [{key: k, policy: p}]\n";
    static const struct {
        const char *domain, *desc, *want;
    } cases[] = {
        {"edge", "k=exact", "k_exact"},
        {"edge", "k=exactly", "k_ex*"}, /* no exact: the first written prefix */
        {"edge", "k=exa", "k_ex*"},
        {"edge", "k=eagle", "k_e*"},
        {"edge", "k=e", "k_e*"},
        {"edge", "k=", "k"}, /* empty value: key only */
        {"edge", "k=other", "k"},
        {"edge", "K=exact", "-"}, /* keys are case-sensitive */
        {"edge", "parent=1", "parent"},
        {"edge", "parent=1,child=2", "parent.child"},
        {"edge", "parent=1,child=2,more=3", "-"}, /* longer than the branch */
        {"edge", "parent=1,mid=2", "-"},          /* a node with no limit */
        {"edge", "parent=1,mid=2,leaf=x", "parent.mid.leaf_x"},
        {"edge", "parent=1,mid=2,leaf=y", "-"},
        {"edge", "child=2", "-"}, /* not at the top */
        {"edge", "z=abc", "z_a*"},
        {"edge", "z=a", "z_a*"},
        {"edge", "z=b", "-"},
        {"edge", "zz=anything", "zz_*"},
        {"edge", "zz=", "zz_*"},
        {"edge", "blank=any", "blank"}, /* value: "" is no value, as in envoyproxy/ratelimit */
        {"edge", "blank=", "blank"},
        {"other", "k=exact", "k"},
        {"nope", "k=exact", "-"},
        {"edg", "k=exact", "-"},
    };
    char err[1024];
    struct config *c = load(yaml, err, sizeof err);
    ok(c != NULL, "matching config loads (%s)", c ? "" : err);
    if (!c)
        return;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        is_str(match(c, cases[i].domain, cases[i].desc), cases[i].want, "%s %s", cases[i].domain,
               cases[i].desc);
    ok(snap_match(c, "edge", 4, NULL, 0) == NULL, "no entries: no limit");
    ok(snap_find(c, "edge", 4) == &c->domains[0] && snap_find(c, "other", 5) != NULL,
       "domains_find: known domains");
    ok(snap_find(c, "edg", 3) == NULL && snap_find(c, "edgee", 5) == NULL &&
           snap_find(NULL, "edge", 4) == NULL,
       "domains_find: unknown ones");
    /* Bytes, not C strings: a NUL in a value is just a byte. */
    struct descriptor_entry nul = {"k", 1, "exact\0x", 7};
    is_str(snap_match(c, "edge", 4, &nul, 1)->path, "k_ex*", "a NUL inside a value");
    ok(snap_match(NULL, "edge", 4, &nul, 1) == NULL, "no config: no limit");
    config_unref(c);
}

static void test_limits(void)
{
    static const char yaml[] =
        PRE "  - domain: d\n"
            "    descriptors:\n"
            "      - key: a\n"
            "        rate_limit: {name: big, unit: year, requests_per_unit: 1000000000, replaces: "
            "[{name: x}, {name: y}]}\n"
            "      - {key: b, shadow_mode: true, detailed_metric: true, rate_limit: {unit: MONTH, "
            "requests_per_unit: 7}}\n"
            "      - {key: c, policy: p}\n"
            "      - {key: e, policy: p, shadow_mode: true}\n"
            "      - {key: f, policy: o, shadow_mode: true}\n"
            "      - {key: g, rate_limit: {unlimited: true, name: free}}\n"
            "      - {key: h, shadow_mode: true}\n"
            "headers: ietf\n"
            "deny_status: 403\n";
    char err[1024];
    struct config *c = load(yaml, err, sizeof err);
    ok(c != NULL, "limits config loads (%s)", c ? "" : err);
    if (!c)
        return;
    struct descriptor_entry e = {"a", 1, "1", 1};
    const struct domain_limit *l = snap_match(c, "d", 1, &e, 1);
    ok(l && l->policy == l->owned && l->policy != NULL, "rate_limit: owns its policy");
    is_str(l->policy->name, "@envoy", "the policy is @envoy");
    is_int(l->policy->ntiers, 1, "one tier");
    is_str(l->policy->tiers[0].name, "year", "tier named for the unit");
    is_int(l->policy->tiers[0].algorithm, ALG_FIXED_WINDOW, "fixed_window");
    is_int(l->policy->tiers[0].limit, 1000000000, "limit is requests_per_unit");
    is_int(l->policy->tiers[0].window_us, 365LL * 86400 * 1000000, "a year is 365 days");
    is_int(l->policy->headers, HEADERS_IETF, "headers from the top level (written after)");
    is_int(l->policy->deny_status, 403, "deny_status from the top level");
    is_int(l->policy->shadow, 0, "not shadow");
    is_int(l->policy->failure_mode, FAILURE_OPEN, "failure_mode open, as policies default");
    is_int(l->unit, RLS_UNIT_YEAR, "unit kept");
    is_int(l->requests_per_unit, 1000000000, "requests_per_unit kept");
    is_str(l->name, "big", "name kept");
    is_int(l->nreplaces, 2, "two replaces");
    ok(l->nreplaces == 2 && strcmp(l->replaces[0], "x") == 0 && strcmp(l->replaces[1], "y") == 0,
       "replaces in order");
    ok(!l->unlimited && !l->detailed_metric, "not unlimited, no detailed_metric");

    e.key = "b";
    l = snap_match(c, "d", 1, &e, 1);
    ok(l && l->policy->shadow, "shadow_mode: the @envoy policy is shadow");
    ok(l && l->detailed_metric, "detailed_metric");
    is_int(l->unit, RLS_UNIT_MONTH, "unit in upper case accepted");
    is_int(l->policy->tiers[0].window_us, 30LL * 86400 * 1000000, "a month is 30 days");
    ok(l->name == NULL, "no name");

    e.key = "c";
    l = snap_match(c, "d", 1, &e, 1);
    ok(l && l->policy == config_find_policy(c, "p") && l->owned == NULL,
       "policy: the snapshot's own policy");
    is_int(l->unit, RLS_UNIT_UNKNOWN, "policy: no unit");

    e.key = "e";
    l = snap_match(c, "d", 1, &e, 1);
    ok(l && l->owned && l->policy == l->owned, "policy + shadow_mode: a copy");
    ok(l && l->policy->shadow && strcmp(l->policy->name, "p") == 0, "the copy: shadow, same name");
    ok(!config_find_policy(c, "p")->shadow, "the original stays non-shadow");

    e.key = "f";
    l = snap_match(c, "d", 1, &e, 1);
    ok(l && l->policy->shadow && l->policy->overrides != NULL &&
           l->policy->overrides != config_find_policy(c, "o")->overrides,
       "a shadow copy with overrides has its own");
    const struct policy *v = policy_for_key(l->policy, "xyz", 3);
    ok(v != l->policy && v->shadow && strcmp(v->tiers[0].name, "b") == 0,
       "its override's variant is shadow too");
    v = policy_for_key(config_find_policy(c, "o"), "xyz", 3);
    ok(!v->shadow && strcmp(v->tiers[0].name, "b") == 0, "the original's variant is not");

    e.key = "g";
    l = snap_match(c, "d", 1, &e, 1);
    ok(l && l->unlimited && l->policy == NULL, "unlimited: no policy");
    is_str(l ? l->name : NULL, "free", "an unlimited limit keeps its name");

    e.key = "h";
    ok(snap_match(c, "d", 1, &e, 1) == NULL, "shadow_mode with no limit: nothing to apply");
    config_unref(c);
}

static void test_units(void)
{
    static const struct {
        const char *name;
        enum rls_unit u;
        int64_t s;
    } units[] = {
        {"second", RLS_UNIT_SECOND, 1},    {"minute", RLS_UNIT_MINUTE, 60},
        {"hour", RLS_UNIT_HOUR, 3600},     {"day", RLS_UNIT_DAY, 86400},
        {"week", RLS_UNIT_WEEK, 604800},   {"month", RLS_UNIT_MONTH, 2592000},
        {"year", RLS_UNIT_YEAR, 31536000},
    };
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
        enum rls_unit u = RLS_UNIT_UNKNOWN;
        ok(rls_unit_from_name(units[i].name, &u) == 0 && u == units[i].u, "unit %s", units[i].name);
        is_int(rls_unit_seconds(units[i].u), units[i].s, "%s in seconds", units[i].name);
        char upper[16];
        for (size_t j = 0; j <= strlen(units[i].name); j++)
            upper[j] = (char)(units[i].name[j] >= 'a' ? units[i].name[j] - 32 : units[i].name[j]);
        is_str(rls_unit_name(units[i].u), upper, "%s's Envoy name", units[i].name);
    }
    enum rls_unit u;
    ok(rls_unit_from_name("unknown", &u) < 0, "UNKNOWN is not a unit");
    ok(rls_unit_from_name("", &u) < 0, "empty is not a unit");
    is_int(rls_unit_seconds(RLS_UNIT_UNKNOWN), 0, "UNKNOWN: 0 seconds");
    is_int(rls_unit_seconds((enum rls_unit)99), 0, "out of range: 0 seconds");
    is_str(rls_unit_name((enum rls_unit)99), "UNKNOWN", "out of range: UNKNOWN");
}

/* ---- envoyproxy/ratelimit's directory ----------------------------------- */

static char tmpdir[64];

static void put(const char *name, const char *text)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    FILE *f = fopen(path, "w");
    if (!f || fputs(text, f) < 0 || fclose(f) != 0)
        ok(0, "cannot write %s", path);
}

static void rm(const char *name)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    unlink(path);
}

/* The policy file t.yaml in tmpdir, with `extra` after a policy. */
static const char *policy_file(const char *extra)
{
    static char path[256];
    char text[2048];
    snprintf(text, sizeof text, PRE "  []\n%s", extra);
    snprintf(path, sizeof path, "%s/policy/t.yaml", tmpdir);
    FILE *f = fopen(path, "w");
    if (!f || fputs(text, f) < 0 || fclose(f) != 0)
        ok(0, "cannot write %s", path);
    return path;
}

static const char *match_in(const struct config *c, const char *d, const char *desc)
{
    return c ? match(c, d, desc) : "(no config)";
}

static void test_envoy_dir(void)
{
    char err[1024], dir[128], extra[256], want[1024];
    struct config *c;

    snprintf(tmpdir, sizeof tmpdir, "/tmp/test_domains.XXXXXX");
    if (!mkdtemp(tmpdir)) {
        ok(0, "mkdtemp");
        return;
    }
    snprintf(dir, sizeof dir, "%s/policy", tmpdir);
    mkdir(dir, 0700);
    /* An empty directory: no domains, fine. */
    c = config_load_envoy(policy_file(""), tmpdir, err, sizeof err);
    ok(c && c->ndomains == 0, "an empty directory loads (%s)", c ? "" : err);
    config_unref(c);

    put("b.yaml", "domain: beta\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, "
                  "requests_per_unit: 3}\n");
    put("a.yml", "# first\ndomain: alpha\ndescriptors:\n  - key: k\n    value: v\n"
                 "    rate_limit: {unit: second, requests_per_unit: 1}\n");
    put("notes.txt", "not yaml: [\n");
    put(".hidden.yaml", "not yaml: [\n");
    mkdir(strcat(strcpy(extra, tmpdir), "/sub.yaml"), 0700); /* a directory: skipped */
    c = config_load_envoy(policy_file(""), tmpdir, err, sizeof err);
    ok(c && c->ndomains == 2, "two files, two domains (%s)", c ? "" : err);
    is_str(match_in(c, "alpha", "k=v"), "k_v", "alpha from a.yml");
    is_str(match_in(c, "beta", "k=x"), "k", "beta from b.yaml");
    if (c) {
        snprintf(want, sizeof want, "%s/a.yml:2:9", tmpdir);
        is_str(c->domains[0].file, want, "a domain remembers where it was defined");
        is_str(c->envoy_config, tmpdir, "--envoy-config is the snapshot's envoy_config");
    }
    config_unref(c);

    /* envoy_config: in the file, and the CLI winning over it. */
    snprintf(extra, sizeof extra, "envoy_config: %s\n", tmpdir);
    c = config_load(policy_file(extra), err, sizeof err);
    ok(c && c->ndomains == 2, "envoy_config: loads the directory (%s)", c ? "" : err);
    config_unref(c);
    snprintf(dir, sizeof dir, "%s/empty", tmpdir);
    mkdir(dir, 0700);
    c = config_load_envoy(policy_file(extra), dir, err, sizeof err);
    ok(c && c->ndomains == 0 && strcmp(c->envoy_config, dir) == 0,
       "--envoy-config wins over envoy_config: (%s)", c ? "" : err);
    config_unref(c);

    /* A reload is a new load: a new file is seen, a removed one is gone. */
    put("c.yaml", "domain: gamma\n");
    rm("a.yml");
    c = config_load(policy_file(extra), err, sizeof err);
    ok(c && c->ndomains == 2, "a load sees the directory as it is now (%s)", c ? "" : err);
    is_str(match_in(c, "alpha", "k=v"), "-", "the removed file's domain is gone");
    ok(c && snap_match(c, "gamma", 5, NULL, 0) == NULL && c->ndomains == 2 &&
           strcmp(c->domains[1].name, "gamma") == 0,
       "the new file's domain is there");
    config_unref(c);

    /* Errors: file:line:col of the file at fault. */
    static const struct {
        const char *what, *text, *at, *msg;
    } cases[] = {
        {"policy: refused", "domain: x\ndescriptors:\n  - {key: k, policy: p}\n", "3:22",
         "descriptors[0]: policy: is ratelimitd's extension"},
        {"unknown field", "domain: x\nlimits: []\n", "2:1", "unknown field \"limits\""},
        {"domain missing", "descriptors: []\n", "1:1", "missing required field \"domain\""},
        {"syntax", "domain: [x\n", "2:1", "did not find expected"},
        {"empty file", "", "1:1", "the file is empty"},
        {"a sequence", "- domain: x\n", "1:1", "expected a mapping"},
        {"bad unit",
         "domain: x\ndescriptors:\n  - key: k\n    rate_limit: {unit: ms, "
         "requests_per_unit: 1}\n",
         "4:24", "descriptors[0].rate_limit.unit: invalid value \"ms\""},
        {"same domain as another file", "domain: beta\n", "1:9",
         "domain \"beta\" is defined twice: also at "},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        put("z.yaml", cases[i].text);
        c = config_load_envoy(policy_file(""), tmpdir, err, sizeof err);
        ok(c == NULL, "%s: refused", cases[i].what);
        config_unref(c);
        snprintf(want, sizeof want, "%s/z.yaml:%s: ", tmpdir, cases[i].at);
        ok(strncmp(err, want, strlen(want)) == 0, "%s: at z.yaml:%s (%s)", cases[i].what,
           cases[i].at, err);
        ok(strstr(err, cases[i].msg) != NULL, "%s: says \"%s\"", cases[i].what, cases[i].msg);
    }
    snprintf(want, sizeof want, "also at %s/b.yaml:1:9", tmpdir);
    ok(strstr(err, want) != NULL, "the duplicate names the other file (%s)", err);
    rm("z.yaml");

    /* A domain in a file and in domains: (the file is read after). */
    c = config_load_envoy(policy_file(""), tmpdir, err, sizeof err);
    config_unref(c);
    char text[512];
    snprintf(text, sizeof text, "%s/policy/t.yaml", tmpdir);
    FILE *f = fopen(text, "w");
    fputs(PRE "  - domain: beta\n", f);
    fclose(f);
    c = config_load_envoy(text, tmpdir, err, sizeof err);
    snprintf(want, sizeof want,
             "%s/b.yaml:1:9: domain \"beta\" is defined twice: also at %s:5:13 "
             "(envoy_merge_domains: true merges them)",
             tmpdir, text);
    ok(c == NULL && strcmp(err, want) == 0, "domains: and a file: both places named (%s)", err);
    config_unref(c);

    /* A directory that is not there. */
    c = config_load_envoy(text, "/nonexistent-ratelimitd-envoy", err, sizeof err);
    ok(c == NULL && strstr(err, "/nonexistent-ratelimitd-envoy: No such file") != NULL,
       "a missing directory is an error (%s)", err);
    config_unref(c);

    rm("b.yaml");
    rm("c.yaml");
    rm("notes.txt");
    rm(".hidden.yaml");
    rm("policy/t.yaml");
    rmdir(dir);
    snprintf(dir, sizeof dir, "%s/sub.yaml", tmpdir);
    rmdir(dir);
    snprintf(dir, sizeof dir, "%s/policy", tmpdir);
    rmdir(dir);
    ok(rmdir(tmpdir) == 0, "temp dir cleaned up");
}

/* The shipped examples: envoyproxy/ratelimit's README configurations,
 * loaded unchanged, matching as its documentation says. */
static void test_shipped(const char *srcdir)
{
    char path[512], dir[512], err[1024];
    snprintf(path, sizeof path, "%s/conf/ratelimitd.yaml", srcdir);
    snprintf(dir, sizeof dir, "%s/conf/envoy", srcdir);
    struct config *c = config_load_envoy(path, dir, err, sizeof err);
    ok(c != NULL, "conf/ratelimitd.yaml with conf/envoy loads (%s)", c ? "" : err);
    if (!c)
        return;
    is_str(match(c, "db_ops", "database=accounts"), "database_accounts", "db_ops: accounts");
    is_str(match(c, "db_ops", "database=other"), "-", "db_ops: another database: none");
    is_str(match(c, "db_ops", "source_cluster=frontend"), "-", "db_ops: a branch, no limit");
    is_str(match(c, "db_ops", "source_cluster=frontend,destination_cluster=payments"),
           "source_cluster_frontend.destination_cluster_payments", "db_ops: nested exact");
    is_str(match(c, "db_ops", "source_cluster=frontend,destination_cluster=x"),
           "source_cluster_frontend.destination_cluster", "db_ops: nested key only");
    const struct domain_limit *l;
    struct descriptor_entry e[2] = {{"channel", 7, "promo", 5}, {"recipient", 9, "+1", 2}};
    l = snap_match(c, "notifications", 13, e, 2);
    ok(l && l->policy && l->policy->shadow && l->requests_per_unit == 3 && l->unit == RLS_UNIT_DAY,
       "notifications: promo per recipient, 3/day, shadow");
    l = snap_match(c, "notifications", 13, e + 1, 1);
    ok(l && !l->policy->shadow && l->detailed_metric, "notifications: recipient, detailed");
    struct descriptor_entry k[2] = {{"client", 6, "internal-build", 14}, {"plan", 4, "premium", 7}};
    l = snap_match(c, "public_api", 10, k, 1);
    ok(l && l->requests_per_unit == 1000 && l->unit == RLS_UNIT_MINUTE, "public_api: wildcard");
    k[0].value = "monitoring", k[0].valuelen = 10;
    l = snap_match(c, "public_api", 10, k, 1);
    ok(l && l->unlimited, "public_api: unlimited");
    k[0].value = "acme", k[0].valuelen = 4;
    l = snap_match(c, "public_api", 10, k, 1);
    ok(l && l->name && strcmp(l->name, "per_client") == 0, "public_api: per client");
    l = snap_match(c, "public_api", 10, k, 2);
    ok(l && l->nreplaces == 1 && strcmp(l->replaces[0], "per_client") == 0,
       "public_api: premium replaces per_client");
    config_unref(c);
}

/* domains_equal: the reload line's "domains changed" (config_changes). */
static void test_equal(void)
{
    static const char base[] = PRE "  - domain: d\n"
                                   "    descriptors:\n"
                                   "      - key: a\n"
                                   "        value: v\n"
                                   "        rate_limit: {unit: minute, requests_per_unit: 5}\n"
                                   "      - {key: c, policy: p}\n";
    char err[1024], changed[sizeof base + 8];
    struct config *a = load(base, err, sizeof err), *b = load(base, err, sizeof err);
    ok(a && b, "two loads of one file (%s)", a && b ? "" : err);
    if (!a || !b)
        return;
    ok(domains_equal(a->domains, a->ndomains, b->domains, b->ndomains), "the same file: equal");
    static const char *const edits[][2] = {
        {"requests_per_unit: 5", "requests_per_unit: 6"},
        {"unit: minute", "unit: second"},
        {"value: v", "value: w"},
        {"policy: p", "policy: o"},
    };
    for (size_t i = 0; i < sizeof edits / sizeof edits[0]; i++) {
        snprintf(changed, sizeof changed, "%s", base);
        /* Each edit keeps the length: written over the text in place. */
        memcpy(strstr(changed, edits[i][0]), edits[i][1], strlen(edits[i][0]));
        struct config *c = load(changed, err, sizeof err);
        ok(c && !domains_equal(a->domains, a->ndomains, c->domains, c->ndomains),
           "%s -> %s: not equal (%s)", edits[i][0], edits[i][1], c ? "" : err);
        config_unref(c);
    }
    config_unref(a);
    config_unref(b);
}

static void test_dump(void)
{
    static const char yaml[] =
        PRE "  - domain: e\n"
            "    descriptors:\n"
            "      - key: tenant\n"
            "        value: \"beta*\"\n"
            "        rate_limit: {name: tenants, unit: hour, requests_per_unit: 3}\n"
            "        descriptors:\n"
            "          - key: user\n"
            "            rate_limit: {unit: minute, requests_per_unit: 2, replaces: [{name: "
            "tenants}, {name: x}]}\n"
            "      - {key: free, rate_limit: {unlimited: true}}\n"
            "      - {key: ip, policy: p, shadow_mode: true}\n"
            "      - {key: path, value: /a, policy: o}\n"
            "      - {key: nolimit, descriptors: [{key: k, value: v, policy: p}]}\n"
            "  - domain: a\n"
            "    descriptors: [{key: k, rate_limit: {unit: second, requests_per_unit: 7}}]\n";
    static const char want[] =
        "a.k: unit=SECOND requests_per_unit=7, shadow_mode: false, unlimited: false, "
        "detailed_metric: false, quota_mode: false\n"
        "e.free: unit=UNKNOWN requests_per_unit=0, shadow_mode: false, unlimited: true, "
        "detailed_metric: false, quota_mode: false\n"
        "e.ip: unit=UNKNOWN requests_per_unit=0, shadow_mode: true, unlimited: false, "
        "detailed_metric: false, quota_mode: false, policy: p{a: fixed_window limit=10 "
        "window_us=1000000}\n"
        "e.nolimit.k_v: unit=UNKNOWN requests_per_unit=0, shadow_mode: false, unlimited: false, "
        "detailed_metric: false, quota_mode: false, policy: p{a: fixed_window limit=10 "
        "window_us=1000000}\n"
        "e.path_/a: unit=UNKNOWN requests_per_unit=0, shadow_mode: false, unlimited: false, "
        "detailed_metric: false, quota_mode: false, policy: o{a: fixed_window limit=10 "
        "window_us=1000000}\n"
        "e.tenant_beta*: unit=HOUR requests_per_unit=3, shadow_mode: false, unlimited: false, "
        "name: tenants, detailed_metric: false, quota_mode: false\n"
        "e.tenant_beta*.user: unit=MINUTE requests_per_unit=2, shadow_mode: false, unlimited: "
        "false, replaces: [tenants, x], detailed_metric: false, quota_mode: false\n";
    char err[1024];
    struct config *c = load(yaml, err, sizeof err);
    ok(c != NULL, "a file for the dump loads (%s)", c ? "" : err);
    if (!c)
        return;
    struct buf b = {0};
    domains_dump_text(c->domains, c->ndomains, &b);
    buf_append_char(&b, '\0');
    is_str(b.data, want, "text: one line per limit, envoyproxy/ratelimit's start");

    b.len = 0;
    domains_dump_json(c->domains, c->ndomains, &b);
    json_error_t jerr;
    json_t *root = json_loadb(b.data, b.len, 0, &jerr);
    ok(root != NULL, "JSON: valid (%s)", root ? "" : jerr.text);
    json_t *doms = json_object_get(root, "domains");
    json_t *e = json_array_get(doms, json_array_size(doms) - 1);
    json_t *limits = json_object_get(e, "limits");
    ok(json_is_string(json_object_get(e, "domain")) &&
           strcmp(json_string_value(json_object_get(e, "domain")), "e") == 0 &&
           json_array_size(limits) == 6,
       "JSON: domain e with its 6 limits (%zu)", json_array_size(limits));
    json_t *ip = json_array_get(limits, 1);
    json_t *pol = json_object_get(ip, "policy");
    json_t *tier = json_array_get(json_object_get(pol, "tiers"), 0);
    ok(strcmp(json_string_value(json_object_get(ip, "key")), "e.ip") == 0 &&
           json_is_true(json_object_get(ip, "shadow_mode")) &&
           strcmp(json_string_value(json_object_get(pol, "name")), "p") == 0 &&
           json_is_true(json_object_get(pol, "shadow")) &&
           strcmp(json_string_value(json_object_get(tier, "algorithm")), "fixed_window") == 0 &&
           json_integer_value(json_object_get(tier, "window_us")) == 1000000,
       "JSON: a policy: descriptor names its policy, shadow copy, tiers");
    json_t *free_ = json_array_get(limits, 0);
    ok(json_is_null(json_object_get(free_, "policy")) &&
           json_is_true(json_object_get(free_, "unlimited")),
       "JSON: unlimited has no policy");
    json_t *user = json_array_get(limits, 5);
    json_t *entries = json_object_get(user, "descriptors");
    ok(json_array_size(entries) == 2 &&
           strcmp(json_string_value(json_object_get(json_array_get(entries, 0), "value")),
                  "beta*") == 0 &&
           json_is_null(json_object_get(json_array_get(entries, 1), "value")) &&
           json_array_size(json_object_get(user, "replaces")) == 2 &&
           strcmp(json_string_value(json_object_get(user, "unit")), "MINUTE") == 0 &&
           json_integer_value(json_object_get(user, "requests_per_unit")) == 2 &&
           strcmp(json_string_value(json_object_get(
                      json_object_get(json_array_get(limits, 4), "policy"), "name")),
                  "@envoy") == 0,
       "JSON: entries from the root (prefix kept, null for any), replaces, unit, @envoy");
    json_decref(root);
    buf_free(&b);
    config_unref(c);

    struct buf none = {0};
    domains_dump_text(NULL, 0, &none);
    ok(none.len == 0, "text: no domains, nothing");
    domains_dump_json(NULL, 0, &none);
    ok(none.len == 14 && memcmp(none.data, "{\"domains\":[]}", 14) == 0, "JSON: no domains");
    buf_free(&none);
}

/* The key entries ("k=v,...") a matched limit counts under, "-" if none
 * matches. */
static const char *shared_key(const struct config *c, const char *d, const char *desc)
{
    static char text[256], out[256];
    struct descriptor_entry e[8], shared[DOMAINS_DEPTH_MAX];
    snprintf(text, sizeof text, "%s", desc);
    size_t n = entries_of(text, e, 8), at = 0;
    const struct domain_limit *l = snap_match(c, d, strlen(d), e, n);
    if (l == NULL)
        return "-";
    domains_share_entries(l, e, n, shared);
    for (size_t i = 0; i < n; i++)
        at += (size_t)snprintf(out + at, sizeof out - at, "%s%.*s=%.*s", i ? "," : "",
                               (int)shared[i].keylen, shared[i].key, (int)shared[i].valuelen,
                               shared[i].value);
    return out;
}

/* The metric name of "k=v,..." in d: the request's ("+name"), the
 * config's path ("=path"), or "-" for no match. */
static const char *metric_of(const struct config *c, const char *d, const char *desc)
{
    static char text[256], out[300];
    struct descriptor_entry e[8];
    size_t len;
    snprintf(text, sizeof text, "%s", desc);
    size_t n = entries_of(text, e, 8);
    const struct domain_limit *l = snap_match(c, d, strlen(d), e, n);
    if (l == NULL)
        return "-";
    char *name = domains_metric_name(l, e, n, &len);
    if (name == NULL) {
        snprintf(out, sizeof out, "=%s", l->path);
    } else {
        ok(strlen(name) == len, "%s: the name's length (%zu)", desc, len);
        snprintf(out, sizeof out, "+%s", name);
    }
    free(name);
    return out;
}

/* A '*' anywhere in a value is a wildcard matching any run of bytes (a
 * trailing one alone: envoyproxy/ratelimit's prefix wildcard); several
 * patterns of a key are tried in the order written, after the exact value
 * and before the key alone; nested levels the same. */
static void test_wildcards(void)
{
    static const char yaml[] = PRE "  - domain: w\n"
                                   "    descriptors:\n"
                                   "      - {key: m, value: 'bar*b', policy: p}\n"
                                   "      - {key: m, value: 'a*b*c', policy: p}\n"
                                   "      - {key: m, value: '*', policy: p}\n"
                                   "      - {key: h, value: '*.example.com', policy: p}\n"
                                   "      - {key: h, value: 'api.*', policy: p}\n"
                                   "      - {key: h, value: 'api.example.com', policy: p}\n"
                                   "      - {key: h, policy: p}\n"
                                   "      - {key: path, value: '/api/*/users', policy: p}\n"
                                   "      - {key: o, value: 'ab*', policy: p}\n"
                                   "      - {key: o, value: 'a*', policy: p}\n"
                                   "      - {key: o, value: 'abc', policy: p}\n"
                                   "      - {key: o, policy: p}\n"
                                   "      - key: n\n"
                                   "        value: 'x*'\n"
                                   "        descriptors:\n"
                                   "          - {key: s, value: '*y', policy: p}\n"
                                   "          - {key: s, value: yes, policy: p}\n"
                                   "          - {key: s, policy: p}\n";
    static const struct {
        const char *desc, *want;
    } cases[] = {
        {"m=barxb", "m_bar*b"},    /* a middle '*' */
        {"m=barb", "m_bar*b"},     /* ... matching the empty run */
        {"m=bar*b", "m_bar*b"},    /* ... or a '*' itself */
        {"m=bar/x/yb", "m_bar*b"}, /* ... or any bytes */
        {"m=barbx", "m_*"},        /* not a prefix: the end must match too */
        {"m=abc", "m_a*b*c"},      /* several, every run empty */
        {"m=a1b2c", "m_a*b*c"},    /* several, none empty */
        {"m=abcbcbc", "m_a*b*c"},  /* the last 'c' at the end */
        {"m=acb", "m_*"},          /* the order of the pieces counts */
        {"m=abcx", "m_*"},         /* ... and the end */
        {"m=", "m_*"},             /* '*' alone matches every value, the empty one too */
        {"h=foo.example.com", "h_*.example.com"},   /* a leading '*' */
        {"h=.example.com", "h_*.example.com"},      /* ... the empty run */
        {"h=example.com", "h"},                     /* the '.' is no wildcard: the key alone */
        {"h=api.example.com", "h_api.example.com"}, /* exact before every pattern */
        {"h=api.example.org", "h_api.*"},
        {"h=api.x.example.com", "h_*.example.com"}, /* both match: the first written */
        {"path=/api/v1/users", "path_/api/*/users"},
        {"path=/api//users", "path_/api/*/users"},
        {"path=/api/a/b/users", "path_/api/*/users"}, /* '*' crosses '/' */
        {"path=/api/v1/users/7", "-"},                /* not a prefix match */
        {"o=abc", "o_abc"},                           /* exact first */
        {"o=abd", "o_ab*"}, /* then the first written wildcard that matches */
        {"o=ab", "o_ab*"},  /* a trailing wildcard matches its prefix itself */
        {"o=azz", "o_a*"},  /* the second written */
        {"o=b", "o"},       /* then the key alone */
        {"n=x1,s=yes", "n_x*.s_yes"},
        {"n=x1,s=joy", "n_x*.s_*y"},
        {"n=x1,s=no", "n_x*.s"},
        {"n=z,s=yes", "-"},
    };
    char err[1024];
    struct config *c = load(yaml, err, sizeof err);
    ok(c != NULL, "wildcards config loads (%s)", c ? "" : err);
    if (!c)
        return;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        is_str(match(c, "w", cases[i].desc), cases[i].want, "wildcard: %s", cases[i].desc);
    config_unref(c);

    /* The order written decides between two wildcards of one key, whatever
     * their lengths: written the other way round, "a*" wins. */
    static const char swapped[] = PRE "  - domain: w\n"
                                      "    descriptors:\n"
                                      "      - {key: o, value: 'a*', policy: p}\n"
                                      "      - {key: o, value: 'ab*', policy: p}\n";
    c = load(swapped, err, sizeof err);
    ok(c != NULL, "swapped wildcards load (%s)", c ? "" : err);
    if (c)
        is_str(match(c, "w", "o=abd"), "o_a*", "wildcards: the first written wins");
    config_unref(c);
}

/* domains_glob on its own: bytes, not characters; and a pattern built to
 * make a backtracking matcher exponential finishes in O(pattern * value). */
static void test_glob(void)
{
    static const struct {
        const char *pattern, *value;
        int want;
    } cases[] = {
        {"", "", 1},
        {"", "a", 0},
        {"*", "", 1},
        {"**", "x", 1},
        {"a", "a", 1},
        {"a", "A", 0},
        {"a*", "a", 1},
        {"a*", "ab", 1},
        {"a*", "ba", 0},
        {"*a", "ba", 1},
        {"*a", "ab", 0},
        {"a*b", "ab", 1},
        {"a*b", "axxb", 1},
        {"a*b", "axxbx", 0},
        {"*a*", "xxaxx", 1},
        {"*a*", "xxx", 0},
        {"a*b*c", "aXbYbZc", 1},
        {"a*b*c", "aXcYb", 0},
        {"a**b", "ab", 1},
        {"*ab", "aab", 1},
        {"*aab", "aaab", 1},
        {"a*ab", "aaab", 1},
        {"*x*y", "xyxy", 1},
        {"*x*y", "yx", 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        ok(domains_glob(cases[i].pattern, cases[i].value, strlen(cases[i].value)) == cases[i].want,
           "glob: \"%s\" %s \"%s\"", cases[i].pattern, cases[i].want ? "matches" : "does not match",
           cases[i].value);
    /* Bytes: a NUL in the value is a byte like any other, never the end. */
    ok(domains_glob("a*c", "a\0c", 3) == 1, "glob: a NUL byte in the value matched by '*'");
    ok(domains_glob("a", "a\0", 2) == 0, "glob: a NUL byte after the pattern's end: no match");

    /* a*a*a*a*a*b against 100 000 'a's: no match, and no exponential
     * search (a naive backtracking matcher takes C(100000, 5) steps). */
    size_t n = 100000;
    char *v = xmalloc(n);
    memset(v, 'a', n);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int m = domains_glob("a*a*a*a*a*b", v, n);
    v[n - 1] = 'b';
    int m2 = domains_glob("a*a*a*a*a*b", v, n);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
    ok(m == 0 && m2 == 1, "glob: a*a*a*a*a*b against 100000 bytes: no, then (ending in b) yes");
    ok(ms < 2000, "glob: the pathological pattern is linear-ish (%.1f ms)", ms);
    free(v);
}

/* share_threshold: the keys of every value a shared wildcard matches are
 * one; metrics of detailed_metric and value_to_metric. */
static void test_share_and_metrics(void)
{
    static const char yaml[] = PRE
        "  - domain: s\n"
        "    descriptors:\n"
        "      - {key: files, value: 'files/*', share_threshold: true,\n"
        "         rate_limit: {unit: hour, requests_per_unit: 10}}\n"
        "      - {key: noshare, value: 'n/*', rate_limit: {unit: hour, requests_per_unit: 10}}\n"
        "      - {key: mid, value: 'api/*/files', share_threshold: true,\n"
        "         rate_limit: {unit: hour, requests_per_unit: 10}}\n"
        "      - {key: host, value: '*.example.com', value_to_metric: true,\n"
        "         rate_limit: {unit: hour, requests_per_unit: 10}}\n"
        "      - key: outer\n"
        "        value: 'o*'\n"
        "        share_threshold: true\n"
        "        descriptors:\n"
        "          - {key: user, rate_limit: {unit: hour, requests_per_unit: 1}}\n"
        "          - {key: d, value: 'x*', share_threshold: true, detailed_metric: true,\n"
        "             rate_limit: {unit: hour, requests_per_unit: 1}}\n"
        "      - key: route\n"
        "        value_to_metric: true\n"
        "        descriptors:\n"
        "          - key: method\n"
        "            value_to_metric: true\n"
        "            descriptors:\n"
        "              - {key: subject, rate_limit: {unit: minute, requests_per_unit: 60}}\n"
        "      - {key: grpc_path, value_to_metric: true,\n"
        "         rate_limit: {unit: minute, requests_per_unit: 50}}\n"
        "      - {key: wild, value: 'w*', value_to_metric: true,\n"
        "         rate_limit: {unit: minute, requests_per_unit: 50}}\n"
        "      - {key: fixed, value: f, value_to_metric: true,\n"
        "         rate_limit: {unit: minute, requests_per_unit: 50}}\n"
        "      - {key: detailed_path, detailed_metric: true,\n"
        "         rate_limit: {unit: minute, requests_per_unit: 50}}\n"
        "      - {key: quota, quota_mode: true, rate_limit: {unit: minute, requests_per_unit: "
        "0}}\n";
    char err[1024];
    struct config *c = load(yaml, err, sizeof err);
    ok(c != NULL, "share_threshold config loads (%s)", c ? "" : err);
    if (!c)
        return;
    /* kind 'k': the key's entries; 'm': the metric name. */
    static const struct {
        char kind;
        const char *desc, *want, *what;
    } cases[] = {
        {'k', "files=files/a.pdf", "files=files/*", "share_threshold: a.pdf counts as the pattern"},
        {'k', "files=files/b.csv", "files=files/*", "share_threshold: b.csv too: one counter"},
        {'k', "noshare=n/a", "noshare=n/a", "no share_threshold: the value"},
        {'k', "mid=api/v1/files", "mid=api/*/files", "share_threshold on a middle '*'"},
        {'k', "mid=api/v2/files", "mid=api/*/files", "... every value it matches: one counter"},
        {'m', "mid=api/v1/files", "=mid_api/*/files", "a middle pattern's metric: as written"},
        {'m', "host=a.example.com", "+host_a.example.com",
         "value_to_metric on a leading '*': the whole value"},
        {'k', "outer=o1,user=ann", "outer=o*,user=ann",
         "share_threshold on a parent level: that level shared, the leaf's value kept"},
        {'k', "outer=o2,d=x9", "outer=o*,d=x*", "two shared levels"},
        {'m', "files=files/a.pdf", "=files_files/*", "share_threshold's metric: the pattern"},
        {'m', "outer=o2,d=x9", "+outer_o*.d_x*", "detailed_metric, shared levels: their patterns"},
        {'m', "route=api,method=GET,subject=123", "+route_api.method_GET.subject",
         "value_to_metric on two levels: their values, the leaf's key alone"},
        {'m', "grpc_path=/a.B/C", "+grpc_path_/a.B/C", "value_to_metric, key-only leaf: the value"},
        {'m', "grpc_path=", "+grpc_path", "value_to_metric, empty value: the key"},
        {'m', "wild=w42", "+wild_w42", "value_to_metric on a wildcard: the whole value"},
        {'m', "fixed=f", "=fixed_f", "value_to_metric on an exact value: as is"},
        {'m', "detailed_path=/x", "+detailed_path_/x", "detailed_metric: the request's value"},
        {'m', "noshare=n/a", "=noshare_n/*", "neither: the config's path"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        is_str(cases[i].kind == 'k' ? shared_key(c, "s", cases[i].desc)
                                    : metric_of(c, "s", cases[i].desc),
               cases[i].want, "%s", cases[i].what);
    const struct descriptor_entry q = {"quota", 5, "v", 1};
    const struct domain_limit *l = snap_match(c, "s", 1, &q, 1);
    ok(l && l->quota_mode == 1, "quota_mode: stored on the limit");
    ok(l && l->requests_per_unit == 0 && l->policy && l->policy->tiers[0].limit == 0 &&
           l->policy->tiers[0].window_us == 60000000,
       "requests_per_unit 0: a fixed window of limit 0 (every request over it)");
    config_unref(c);
}

/* Fields of envoyproxy/ratelimit's schema ratelimitd does not act on load
 * with a warning that names them (file:line:col); unit_multiplier makes
 * the window that many units. */
static void test_schema_fields(void)
{
    static const char yaml[] =
        PRE "  - domain: m\n"
            "    descriptors:\n"
            "      - key: a\n"
            "        metadata: {name: service_1}\n"
            "        rate_limit: {unit: minute, requests_per_unit: 20, unit_multiplier: 5}\n"
            "      - key: b\n"
            "        metadata:\n"
            "          service_with_quota: {name: service_2}\n"
            "      - key: c\n"
            "        name: misplaced\n"
            "        rate_limit: {unit: hour, requests_per_unit: 3, shadow_mode: true}\n";
    char err[1024];
    struct config *c = load(yaml, err, sizeof err);
    ok(c != NULL, "metadata and unit_multiplier load (%s)", c ? "" : err);
    if (!c)
        return;
    is_str(c->warning,
           "t.yaml:8:19: domains[0].descriptors[0].metadata: read and ignored: ratelimitd does "
           "not act on this field\n"
           "t.yaml:12:11: domains[0].descriptors[1].metadata: read and ignored: ratelimitd does "
           "not act on this field\n"
           "t.yaml:14:9: domains[0].descriptors[2]: \"name\" is not a field here: read and ignored "
           "(as envoyproxy/ratelimit does)\n"
           "t.yaml:15:56: domains[0].descriptors[2].rate_limit: \"shadow_mode\" is not a field "
           "here: read and ignored (as envoyproxy/ratelimit does)",
           "metadata, and keys of the peer's list out of their place: one warning each");
    const struct descriptor_entry cq = {"c", 1, "x", 1};
    const struct domain_limit *lc = snap_match(c, "m", 1, &cq, 1);
    ok(lc && lc->requests_per_unit == 3 && lc->name == NULL && lc->policy && !lc->policy->shadow,
       "misplaced keys change nothing (no name, not shadow)");
    const struct descriptor_entry a = {"a", 1, "x", 1};
    const struct domain_limit *l = snap_match(c, "m", 1, &a, 1);
    ok(l && l->policy && l->policy->tiers[0].window_us == 300000000LL &&
           l->unit == RLS_UNIT_MINUTE && l->requests_per_unit == 20,
       "unit_multiplier 5 of minute: a 5-minute window, answered as 20 per MINUTE");
    config_unref(c);

    /* Past 64 warnings (WARNINGS_MAX), one more line counts the rest. */
    char big[16384];
    size_t at = (size_t)snprintf(big, sizeof big, PRE "  - domain: many\n    descriptors:\n");
    for (int i = 0; i < 70; i++)
        at += (size_t)snprintf(big + at, sizeof big - at, "      - {key: k%d, metadata: {}}\n", i);
    c = load(big, err, sizeof err);
    ok(c != NULL, "70 metadata fields load (%s)", c ? "" : err);
    if (c) {
        size_t lines = 1;
        for (const char *p = c->warning; *p; p++)
            lines += *p == '\n';
        const char *last = strrchr(c->warning, '\n');
        is_str(last ? last + 1 : "", "... and 6 more", "the warnings past 64 counted");
        ok(lines == 65, "64 warnings and the count (%zu lines)", lines);
    }
    config_unref(c);
}

/* envoy_merge_domains: a domain in several places becomes one, top-level
 * descriptors put together; the command line's switch wins. */
static void test_merge(void)
{
    static const char yaml[] = PRE "  - domain: d\n"
                                   "    descriptors: [{key: a, value: 'v*', policy: p}]\n"
                                   "  - domain: e\n"
                                   "  - domain: d\n"
                                   "    descriptors: [{key: a, value: 'w*', policy: p}, {key: b, "
                                   "policy: p}]\n"
                                   "envoy_merge_domains: true\n";
    char err[1024];
    struct config *c = load(yaml, err, sizeof err);
    ok(c != NULL, "merged domains load (%s)", c ? "" : err);
    if (!c)
        return;
    ok(c->ndomains == 2 && strcmp(c->domains[0].name, "d") == 0 && c->domains[0].nchildren == 3,
       "d and e: d's descriptors from both places");
    is_str(match(c, "d", "a=v1"), "a_v*", "the first place's wildcard");
    is_str(match(c, "d", "a=w1"), "a_w*", "the second's");
    is_str(match(c, "d", "b=1"), "b", "the second's key");
    config_unref(c);
}

int main(void)
{
    const char *srcdir = getenv("RL_SRCDIR");

    test_errors();
    test_depth();
    test_matching();
    test_wildcards();
    test_glob();
    test_share_and_metrics();
    test_schema_fields();
    test_merge();
    test_limits();
    test_equal();
    test_dump();
    test_units();
    test_envoy_dir();
    test_shipped(srcdir ? srcdir : ".");
    return tap_done();
}
