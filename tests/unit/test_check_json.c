/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_check_json.c: decoding of POST /check bodies, one table row per rule.
 */
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "front/http/check_json.h"
#include "tap.h"

static const char yaml[] =
    "policies:\n"
    "  login:\n"
    "    tiers:\n"
    "      - {name: burst, algorithm: token_bucket, limit: 5, window: 1s}\n"
    "  log:\n"
    "    tiers:\n"
    "      - {name: l, algorithm: sliding_window_log, limit: 5, window: 1s}\n"
    "  user:\n"
    "    tiers:\n"
    "      - {name: m, algorithm: fixed_window, limit: 5, window: 1m}\n"
    "    overrides:\n"
    "      - key: \"vip:1\"\n"
    "        tiers: [{name: m, algorithm: fixed_window, limit: 50, "
    "window: 1m}]\n"
    "      - prefix: \"vip:\"\n"
    "        tiers: [{name: m, algorithm: fixed_window, limit: 20, "
    "window: 1m}]\n";

struct bad_case {
    const char *body;
    const char *code;
    const char *needle; /* must appear in the message */
};

static const struct bad_case bad[] = {
    {"", "invalid_json", "empty body: a JSON object is required"},
    {" \r\n", "invalid_json", "empty body"},
    {"{\"policy\":", "invalid_json", "malformed JSON"},
    {"policy=login&key=a", "invalid_json", "malformed JSON"},
    {"[1,2]", "invalid_request", "must be a JSON object"},
    {"\"login\"", "invalid_request", "must be a JSON object"},
    {"42", "invalid_request", "must be a JSON object"},
    {"{\"key\":\"a\"}", "missing_field", "\"policy\""},
    {"{\"policy\":\"login\"}", "missing_field", "\"key\""},
    {"{\"policy\":1,\"key\":\"a\"}", "invalid_type", "\"policy\""},
    {"{\"policy\":\"login\",\"key\":7}", "invalid_type", "\"key\""},
    {"{\"policy\":\"login\",\"key\":\"a\",\"dry_run\":1}", "invalid_type", "dry_run"},
    {"{\"policy\":\"login\",\"key\":\"a\",\"colour\":\"red\"}", "unknown_field", "\"colour\""},
    {"{\"policy\":\"nope\",\"key\":\"a\"}", "unknown_policy", "\"nope\""},
    {"{\"policy\":\"login\",\"key\":\"\"}", "invalid_key", "empty"},
    {"{\"policy\":\"login\",\"key\":\"a\\u0000b\"}", "invalid_key", "NUL"},
    {"{\"policy\":\"login\\u0000x\",\"key\":\"a\"}", "unknown_policy", "unknown policy"},
    {"{\"policy\":\"login\",\"key\":\"a\",\"cost\":-1}", "invalid_cost", "between 0"},
    {"{\"policy\":\"login\",\"key\":\"a\",\"cost\":1.5}", "invalid_cost", "whole number"},
    {"{\"policy\":\"login\",\"key\":\"a\",\"cost\":1.0}", "invalid_cost", "whole number"},
    {"{\"policy\":\"login\",\"key\":\"a\",\"cost\":\"1\"}", "invalid_cost", "whole number"},
    {"{\"policy\":\"login\",\"key\":\"a\",\"cost\":1000000001}", "invalid_cost", "between 0"},
    {"{\"checks\":[]}", "invalid_request", "empty"},
    {"{\"checks\":{}}", "invalid_type", "array"},
    {"{\"checks\":[{\"policy\":\"login\",\"key\":\"a\"}],\"policy\":\"login\"}", "invalid_request",
     "cannot be combined"},
    {"{\"checks\":[{\"policy\":\"login\",\"key\":\"a\",\"dry_run\":true}]}", "unknown_field",
     "\"dry_run\" in checks[0]"},
    {"{\"checks\":[{\"policy\":\"login\",\"key\":\"a\"},5]}", "invalid_request",
     "checks[1] must be an object"},
    {"{\"checks\":[{\"policy\":\"login\",\"key\":\"a\"}],\"extra\":1}", "unknown_field",
     "\"extra\""},
    {"{\"policy\":\"login\",\"key\":\"a\",\"key\":\"b\"}", "invalid_json", "duplicate"},
    {"{\"checks\":[{\"policy\":\"login\",\"key\":\"a\",\"cost\":600000000},"
     "{\"policy\":\"login\",\"key\":\"a\",\"cost\":600000000}]}",
     "invalid_cost", "add up"},
};

static void test_bad(const struct config *cfg)
{
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct check_request r;
        struct request_error e = {0};
        int rc = check_json_parse(cfg, bad[i].body, strlen(bad[i].body), &r, &e);
        ok(rc == -1 && request_code_status(e.code) == 400 &&
               strcmp(request_code_name(e.code), bad[i].code) == 0 &&
               strstr(e.message, bad[i].needle) != NULL,
           "rejects %s as %s", bad[i].body, bad[i].code);
        if (rc == -1 && (strcmp(request_code_name(e.code), bad[i].code) != 0 ||
                         !strstr(e.message, bad[i].needle)))
            printf("#   got %s: %s\n", request_code_name(e.code), e.message);
        ok(r.nchecks == 0 && r.checks == NULL, "nothing left allocated for %s", bad[i].body);
    }
}

static void test_key_lengths(const struct config *cfg)
{
    char body[POLICY_KEY_MAX + 100];
    for (int len = POLICY_KEY_MAX; len <= POLICY_KEY_MAX + 1; len++) {
        int n = snprintf(body, sizeof body, "{\"policy\":\"login\",\"key\":\"");
        memset(body + n, 'k', (size_t)len);
        strcpy(body + n + len, "\"}");
        struct check_request r;
        struct request_error e;
        int rc = check_json_parse(cfg, body, strlen(body), &r, &e);
        if (len == POLICY_KEY_MAX) {
            ok(rc == 0 && r.checks[0].keylen == POLICY_KEY_MAX, "a key of %d bytes is accepted",
               len);
            request_free(&r);
        } else {
            ok(rc == -1 && strcmp(request_code_name(e.code), "invalid_key") == 0,
               "a key of %d bytes is refused", len);
        }
    }
}

static void test_good(const struct config *cfg)
{
    struct check_request r;
    struct request_error e;
    const char *one = "{\"policy\":\"login\",\"key\":\"ip:203.0.113.7\"}";
    ok(check_json_parse(cfg, one, strlen(one), &r, &e) == 0, "one check parses");
    is_int(r.nchecks, 1, "one check");
    is_str(r.checks[0].policy->name, "login", "its policy");
    is_str(r.checks[0].key, "ip:203.0.113.7", "its key");
    is_int(r.checks[0].cost, 1, "cost defaults to 1");
    is_int(r.dry_run, 0, "dry_run defaults to false");
    request_free(&r);

    const char *multi = "{\"checks\":[{\"policy\":\"login\",\"key\":\"all\"},"
                        "{\"policy\":\"user\",\"key\":\"u42\",\"cost\":2},"
                        "{\"policy\":\"login\",\"key\":\"all\",\"cost\":3},"
                        "{\"policy\":\"user\",\"key\":\"all\",\"cost\":0}],\"dry_run\":true}";
    ok(check_json_parse(cfg, multi, strlen(multi), &r, &e) == 0, "several checks parse");
    is_int(r.nchecks, 3, "the same policy and key twice count as one check");
    is_int(r.checks[0].cost, 4, "whose costs are added");
    is_int(r.checks[1].cost, 2, "cost per check");
    is_int(r.checks[2].cost, 0, "cost 0 is allowed");
    ok(r.checks[2].policy != r.checks[0].policy, "same key, other policy: another check");
    is_int(r.dry_run, 1, "dry_run per request");
    request_free(&r);
    request_free(&r); /* twice is harmless */

    const char *cost = "{\"policy\":\"login\",\"key\":\"k\",\"cost\":1000000000,\"dry_run\":false}";
    ok(check_json_parse(cfg, cost, strlen(cost), &r, &e) == 0 && r.checks[0].cost == 1000000000,
       "cost 1000000000 is the largest accepted");
    request_free(&r);

    const char *utf = "{\"policy\":\"login\",\"key\":\"\xc3\xa9t\xc3\xa9 {x} * \\r\\n\"}";
    ok(check_json_parse(cfg, utf, strlen(utf), &r, &e) == 0 &&
           strcmp(r.checks[0].key, "\xc3\xa9t\xc3\xa9 {x} * \r\n") == 0,
       "any bytes but NUL in a key are kept as they are");
    request_free(&r);
}

/* The limit of the first tier a body's one check is decided by; -1 if the
 * body is refused. */
static int64_t limit_of(const struct config *cfg, const char *body)
{
    struct check_request r;
    struct request_error e;
    int64_t limit = -1;
    if (check_json_parse(cfg, body, strlen(body), &r, &e) == 0)
        limit = r.checks[0].policy->tiers[0].limit;
    request_free(&r);
    return limit;
}

/* Per-key overrides: each check gets its key's variant, on both paths. */
static void test_overrides(const struct config *cfg)
{
    is_int(limit_of(cfg, "{\"policy\":\"user\",\"key\":\"vip:1\"}"), 50, "an exact override");
    is_int(limit_of(cfg, "{\"policy\":\"user\",\"key\":\"v\\u0069p:1\"}"), 50,
           "an exact override, on jansson's path");
    is_int(limit_of(cfg, "{\"policy\":\"user\",\"key\":\"vip:7\"}"), 20, "a prefix override");
    is_int(limit_of(cfg, "{\"policy\":\"user\",\"key\":\"vip:1x\"}"), 20,
           "a longer key than the exact one: the prefix");
    is_int(limit_of(cfg, "{\"policy\":\"user\",\"key\":\"vi\"}"), 5, "no override: the policy");
    is_int(limit_of(cfg, "{\"policy\":\"login\",\"key\":\"vip:1\"}"), 5,
           "another policy's overrides do not apply");

    struct check_request r;
    struct request_error e;
    const char *multi = "{\"checks\":[{\"policy\":\"user\",\"key\":\"vip:1\"},"
                        "{\"policy\":\"user\",\"key\":\"vip:2\"},"
                        "{\"policy\":\"user\",\"key\":\"vip:1\",\"cost\":4},"
                        "{\"policy\":\"user\",\"key\":\"u\"}]}";
    if (ok(check_json_parse(cfg, multi, strlen(multi), &r, &e) == 0,
           "several checks with overrides")) {
        is_int(r.nchecks, 3, "the same key twice is still one check");
        is_int(r.checks[0].cost, 5, "whose costs are added");
        ok(r.checks[0].policy->tiers[0].limit == 50 && r.checks[1].policy->tiers[0].limit == 20 &&
               r.checks[2].policy->tiers[0].limit == 5,
           "each check has its key's tiers");
        ok(strcmp(r.checks[0].policy->name, "user") == 0 &&
               strcmp(r.checks[1].policy->name, "user") == 0,
           "a variant keeps the policy's name");
    }
    request_free(&r);
}

/* Bodies at the edges of the fast path for plain bodies: each must get
 * exactly jansson's answer (check_json_parse_full). */
static const char *const edges[] = {
    "{\"policy\":\"login\",\"key\":\"a\"}",
    " \t\r\n{ \"policy\" : \"login\" , \"key\" : \"a\" , \"cost\" : 7 } \n",
    "{\"key\":\"a\",\"policy\":\"login\"}",
    "{\"policy\":\"login\",\"key\":\"a\",\"cost\":0}",
    "{\"policy\":\"login\",\"key\":\"a\",\"cost\":00}",
    "{\"policy\":\"login\",\"key\":\"a\",\"cost\":01}",
    "{\"policy\":\"login\",\"key\":\"a\",\"cost\":-0}",
    "{\"policy\":\"login\",\"key\":\"a\",\"cost\":1e3}",
    "{\"policy\":\"login\",\"key\":\"a\",\"cost\":1E3}",
    "{\"policy\":\"login\",\"key\":\"a\",\"cost\":1.}",
    "{\"policy\":\"login\",\"key\":\"a\",\"cost\":1000000000}",
    "{\"policy\":\"login\",\"key\":\"a\",\"cost\":1000000001}",
    "{\"policy\":\"login\",\"key\":\"a\",\"cost\":99999999999999999999999}",
    "{\"policy\":\"login\",\"key\":\"a\",\"cost\":}",
    "{\"policy\":\"login\",\"key\":\"a\",\"cost\":5,\"cost\":6}",
    "{\"policy\":\"login\",\"key\":\"a\",\"dry_run\":true}",
    "{\"policy\":\"login\",\"key\":\"a\",\"dry_run\":false}",
    "{\"policy\":\"login\",\"key\":\"a\",\"dry_run\":tru}",
    "{\"policy\":\"login\",\"key\":\"a\",\"dry_run\":truex}",
    "{\"policy\":\"login\",\"key\":\"a\",\"dry_run\":null}",
    "{\"policy\":\"login\",\"key\":\"a\",\"dry_run\":true,\"dry_run\":true}",
    "{\"policy\":\"login\",\"key\":\"a\",}",
    "{\"policy\":\"login\",\"key\":\"a\"}x",
    "{\"policy\":\"login\",\"key\":\"a\"}}",
    "{\"policy\":\"login\",\"key\":\"a\"",
    "{\"policy\":\"login\",\"key\":\"a",
    "{\"policy\":\"login\",\"key\":\"a\\\"b\"}",
    "{\"policy\":\"login\",\"key\":\"a\tb\"}",
    "{\"policy\":\"login\",\"key\":\"\x7f\"}",
    "{\"policy\":\"login\",\"key\":\"\xff\"}",
    "{\"policy\":\"login\",\"key\":\"\xc3\xa9\"}",
    "{\"policy\":\"login\",\"policy\":\"user\",\"key\":\"a\"}",
    "{\"policy\":\"\",\"key\":\"a\"}",
    "{\"policy\":\"log\\u0069n\",\"key\":\"a\"}",
    "{\"policy\":\"login\",\"key\":\"\"}",
    "{\"policy\":\"login\",\"ke\\u0079\":\"a\"}",
    "{\"policy\":\"login\",\"key\":\"a\",\"checks\":[]}",
    "{\"policy\":\"user\",\"key\":\"a\",\"cost\":3,\"dry_run\":true}",
    "{\"policy\":"
    "\"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\","
    "\"key\":\"a\"}",
    "{}",
    "{",
    "",
    "{\"policy\":\"login\",\"key\":\"a\"} \x01",
    /* keys with overrides (policy user): exact, prefix, the prefix alone,
     * escaped so only jansson reads them */
    "{\"policy\":\"user\",\"key\":\"vip:1\"}",
    "{\"policy\":\"user\",\"key\":\"vip:2\",\"cost\":2}",
    "{\"policy\":\"user\",\"key\":\"vip:\"}",
    "{\"policy\":\"user\",\"key\":\"vip\"}",
    "{\"policy\":\"user\",\"key\":\"v\\u0069p:1\"}",
    "{\"policy\":\"login\",\"key\":\"vip:1\"}",
};

/* Both paths give the same answer for body[0..len). */
static int paths_agree(const struct config *cfg, const char *body, size_t len)
{
    struct check_request a, b;
    struct request_error ea = {0}, eb = {0};
    int ra = check_json_parse(cfg, body, len, &a, &ea);
    int rb = check_json_parse_full(cfg, body, len, &b, &eb);
    int same = ra == rb;
    if (same && ra == 0) {
        same = a.dry_run == b.dry_run && a.nchecks == b.nchecks;
        for (size_t i = 0; same && i < a.nchecks; i++)
            same = a.checks[i].policy == b.checks[i].policy &&
                   a.checks[i].keylen == b.checks[i].keylen &&
                   memcmp(a.checks[i].key, b.checks[i].key, a.checks[i].keylen) == 0 &&
                   a.checks[i].cost == b.checks[i].cost;
    } else if (same) {
        same = ea.code == eb.code && strcmp(ea.message, eb.message) == 0;
    }
    if (ra == 0)
        request_free(&a);
    if (rb == 0)
        request_free(&b);
    return same;
}

static void test_paths_agree(const struct config *cfg)
{
    for (size_t i = 0; i < sizeof edges / sizeof edges[0]; i++)
        ok(paths_agree(cfg, edges[i], strlen(edges[i])), "fast path agrees with jansson on %s",
           edges[i]);
    int all = 1;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        all = all && paths_agree(cfg, bad[i].body, strlen(bad[i].body));
    ok(all, "and on every refused body above");
    static const char nul[] = "{\"policy\":\"login\",\"key\":\"a\"}\0";
    ok(paths_agree(cfg, nul, sizeof nul - 1), "and on a body with a NUL after it");
    /* Every prefix of a plain body: each cut is somewhere the fast path
     * must give up. */
    const char *full = edges[1];
    all = 1;
    for (size_t n = 0; n <= strlen(full); n++)
        all = all && paths_agree(cfg, full, n);
    ok(all, "and on every prefix of a plain body");
}

/* POST /report bodies (check_json_parse_report): negative costs where the
 * algorithms give back, the same shapes without dry_run. */
static const struct bad_case bad_reports[] = {
    {"{\"policy\":\"login\",\"key\":\"a\",\"dry_run\":true}", "unknown_field", "\"dry_run\""},
    {"{\"checks\":[{\"policy\":\"login\",\"key\":\"a\"}],\"dry_run\":false}", "unknown_field",
     "\"dry_run\""},
    {"{\"policy\":\"login\",\"key\":\"a\",\"cost\":-1000000001}", "invalid_cost", "between -"},
    {"{\"policy\":\"log\",\"key\":\"a\",\"cost\":-1}", "refund_not_supported",
     "sliding_window_log cannot give back"},
    {"{\"checks\":[{\"policy\":\"login\",\"key\":\"a\",\"cost\":-1},"
     "{\"policy\":\"log\",\"key\":\"a\",\"cost\":-1}]}",
     "refund_not_supported", "tier \"l\""},
    {"{\"checks\":[{\"policy\":\"login\",\"key\":\"a\",\"cost\":-600000000},"
     "{\"policy\":\"login\",\"key\":\"a\",\"cost\":-600000000}]}",
     "invalid_cost", "add up"},
};

static void test_reports(const struct config *cfg)
{
    for (size_t i = 0; i < sizeof bad_reports / sizeof bad_reports[0]; i++) {
        const struct bad_case *b = &bad_reports[i];
        struct check_request r;
        struct request_error e = {0};
        int rc = check_json_parse_report(cfg, b->body, strlen(b->body), &r, &e);
        ok(rc == -1 && request_code_status(e.code) == 400 &&
               strcmp(request_code_name(e.code), b->code) == 0 &&
               strstr(e.message, b->needle) != NULL && r.checks == NULL,
           "report: rejects %s as %s", b->body, b->code);
        if (rc == -1 && strcmp(request_code_name(e.code), b->code) != 0)
            printf("#   got %s: %s\n", request_code_name(e.code), e.message);
    }
    struct check_request r;
    struct request_error e;
    const char *body = "{\"checks\":[{\"policy\":\"login\",\"key\":\"a\",\"cost\":-3},"
                       "{\"policy\":\"log\",\"key\":\"a\",\"cost\":7},"
                       "{\"policy\":\"login\",\"key\":\"a\",\"cost\":1}]}";
    int rc = check_json_parse_report(cfg, body, strlen(body), &r, &e);
    ok(rc == 0 && r.report && !r.dry_run && r.nchecks == 2 && r.checks[0].cost == -2 &&
           r.checks[1].cost == 7,
       "report: a refund and a charge, duplicates added up");
    if (rc == 0)
        request_free(&r);
    body = "{\"policy\":\"login\",\"key\":\"a\",\"cost\":-1}";
    rc = check_json_parse(cfg, body, strlen(body), &r, &e);
    ok(rc == -1 && strcmp(request_code_name(e.code), "invalid_cost") == 0,
       "/check still refuses a negative cost");
    body = "{\"policy\":\"login\",\"key\":\"a\"}";
    rc = check_json_parse_report(cfg, body, strlen(body), &r, &e);
    ok(rc == 0 && r.report && r.checks[0].cost == 1, "report: cost defaults to 1");
    if (rc == 0)
        request_free(&r);
}

int main(void)
{
    char err[RL_ERRLEN];
    struct config *cfg = config_load_string("test.yaml", yaml, strlen(yaml), err, sizeof err);
    if (!ok(cfg != NULL, "test config loads"))
        printf("# %s\n", err);
    else {
        test_bad(cfg);
        test_key_lengths(cfg);
        test_good(cfg);
        test_paths_agree(cfg);
        test_overrides(cfg);
        test_reports(cfg);
    }
    config_unref(cfg);
    return tap_done();
}
