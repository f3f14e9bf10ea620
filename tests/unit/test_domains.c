/*
 * test_domains.c: Envoy domains (domains.h). The policy file's `domains:`
 * and envoyproxy/ratelimit's files: every error with its file:line:col,
 * what each field becomes (the @envoy policy, shadow copies, replaces,
 * paths); envoyproxy/ratelimit's matching rules (exact value, then prefix
 * in written order, then key only; a limit applies only at the depth of the
 * request's last entry); units; loading a directory (order, duplicates,
 * --envoy-config winning over envoy_config:, a reload seeing new files);
 * and the shipped conf/envoy examples.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config.h"
#include "domains.h"
#include "tap.h"

/* One policy "p" (lines 1-3) and the start of `domains:` (line 4). */
#define PRE                                                                                        \
    "policies:\n"                                                                                  \
    "  p: {tiers: [{name: a, algorithm: fixed_window, limit: 10, window: 1s}]}\n"                  \
    "  o: {tiers: [{name: a, algorithm: fixed_window, limit: 10, window: 1s}], overrides: "        \
    "[{prefix: x, tiers: [{name: b, algorithm: gcra, limit: 1, window: 1s}]}]}\n"                  \
    "domains:\n"

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
    {"requests_per_unit 0",
     "  - domain: d\n    descriptors:\n      - key: a\n        rate_limit: {unit: second, "
     "requests_per_unit: 0}\n",
     "8:55", "requests_per_unit: invalid value \"0\""},
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
     "domain \"d\" is defined twice: also at t.yaml:5:13"},
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
    ok(c && domains_match(c, "d", 1, e, 16) == NULL, "no limit at the end: none");
    config_unref(c);
}

static void test_errors(void)
{
    for (size_t i = 0; i < sizeof(error_cases) / sizeof(error_cases[0]); i++) {
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
    const struct domain_limit *l = domains_match(c, d, strlen(d), e, n);
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
        {"other", "k=exact", "k"},
        {"nope", "k=exact", "-"},
        {"edg", "k=exact", "-"},
    };
    char err[1024];
    struct config *c = load(yaml, err, sizeof err);
    ok(c != NULL, "matching config loads (%s)", c ? "" : err);
    if (!c)
        return;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        is_str(match(c, cases[i].domain, cases[i].desc), cases[i].want, "%s %s", cases[i].domain,
               cases[i].desc);
    ok(domains_match(c, "edge", 4, NULL, 0) == NULL, "no entries: no limit");
    /* Bytes, not C strings: a NUL in a value is just a byte. */
    struct descriptor_entry nul = {"k", 1, "exact\0x", 7};
    is_str(domains_match(c, "edge", 4, &nul, 1)->path, "k_ex*", "a NUL inside a value");
    ok(domains_match(NULL, "edge", 4, &nul, 1) == NULL, "no config: no limit");
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
    const struct domain_limit *l = domains_match(c, "d", 1, &e, 1);
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
    l = domains_match(c, "d", 1, &e, 1);
    ok(l && l->policy->shadow, "shadow_mode: the @envoy policy is shadow");
    ok(l && l->detailed_metric, "detailed_metric");
    is_int(l->unit, RLS_UNIT_MONTH, "unit in upper case accepted");
    is_int(l->policy->tiers[0].window_us, 30LL * 86400 * 1000000, "a month is 30 days");
    ok(l->name == NULL, "no name");

    e.key = "c";
    l = domains_match(c, "d", 1, &e, 1);
    ok(l && l->policy == config_find_policy(c, "p") && l->owned == NULL,
       "policy: the snapshot's own policy");
    is_int(l->unit, RLS_UNIT_UNKNOWN, "policy: no unit");

    e.key = "e";
    l = domains_match(c, "d", 1, &e, 1);
    ok(l && l->owned && l->policy == l->owned, "policy + shadow_mode: a copy");
    ok(l && l->policy->shadow && strcmp(l->policy->name, "p") == 0, "the copy: shadow, same name");
    ok(!config_find_policy(c, "p")->shadow, "the original stays non-shadow");

    e.key = "f";
    l = domains_match(c, "d", 1, &e, 1);
    ok(l && l->policy->shadow && l->policy->overrides != NULL &&
           l->policy->overrides != config_find_policy(c, "o")->overrides,
       "a shadow copy with overrides has its own");
    const struct policy *v = policy_for_key(l->policy, "xyz", 3);
    ok(v != l->policy && v->shadow && strcmp(v->tiers[0].name, "b") == 0,
       "its override's variant is shadow too");
    v = policy_for_key(config_find_policy(c, "o"), "xyz", 3);
    ok(!v->shadow && strcmp(v->tiers[0].name, "b") == 0, "the original's variant is not");

    e.key = "g";
    l = domains_match(c, "d", 1, &e, 1);
    ok(l && l->unlimited && l->policy == NULL, "unlimited: no policy");
    is_str(l ? l->name : NULL, "free", "an unlimited limit keeps its name");

    e.key = "h";
    ok(domains_match(c, "d", 1, &e, 1) == NULL, "shadow_mode with no limit: nothing to apply");
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
    for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
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

int main(void)
{
    test_errors();
    test_depth();
    test_matching();
    test_limits();
    test_units();
    return tap_done();
}
