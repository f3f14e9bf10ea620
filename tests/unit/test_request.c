/*
 * test_request.c: decoding of POST /check bodies, one table row per rule.
 */
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "request.h"
#include "tap.h"

static const char yaml[] = "policies:\n"
                           "  login:\n"
                           "    tiers:\n"
                           "      - {name: burst, algorithm: token_bucket, limit: 5, window: 1s}\n"
                           "  user:\n"
                           "    tiers:\n"
                           "      - {name: m, algorithm: fixed_window, limit: 5, window: 1m}\n";

struct bad_case {
    const char *body;
    const char *code;
    const char *needle; /* must appear in the message */
};

static const struct bad_case bad[] = {
    {"", "invalid_json", "malformed JSON"},
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
        int rc = request_parse(cfg, bad[i].body, strlen(bad[i].body), &r, &e);
        ok(rc == -1 && e.status == 400 && e.code && strcmp(e.code, bad[i].code) == 0 &&
               strstr(e.message, bad[i].needle) != NULL,
           "rejects %s as %s", bad[i].body, bad[i].code);
        if (rc == -1 && (!e.code || strcmp(e.code, bad[i].code) != 0 ||
                         !strstr(e.message, bad[i].needle)))
            printf("#   got %s: %s\n", e.code, e.message);
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
        int rc = request_parse(cfg, body, strlen(body), &r, &e);
        if (len == POLICY_KEY_MAX) {
            ok(rc == 0 && r.checks[0].keylen == POLICY_KEY_MAX, "a key of %d bytes is accepted",
               len);
            request_free(&r);
        } else {
            ok(rc == -1 && strcmp(e.code, "invalid_key") == 0, "a key of %d bytes is refused",
               len);
        }
    }
}

static void test_good(const struct config *cfg)
{
    struct check_request r;
    struct request_error e;
    const char *one = "{\"policy\":\"login\",\"key\":\"ip:203.0.113.7\"}";
    ok(request_parse(cfg, one, strlen(one), &r, &e) == 0, "one check parses");
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
    ok(request_parse(cfg, multi, strlen(multi), &r, &e) == 0, "several checks parse");
    is_int(r.nchecks, 3, "the same policy and key twice count as one check");
    is_int(r.checks[0].cost, 4, "whose costs are added");
    is_int(r.checks[1].cost, 2, "cost per check");
    is_int(r.checks[2].cost, 0, "cost 0 is allowed");
    ok(r.checks[2].policy != r.checks[0].policy, "same key, other policy: another check");
    is_int(r.dry_run, 1, "dry_run per request");
    request_free(&r);
    request_free(&r); /* twice is harmless */

    const char *cost = "{\"policy\":\"login\",\"key\":\"k\",\"cost\":1000000000,\"dry_run\":false}";
    ok(request_parse(cfg, cost, strlen(cost), &r, &e) == 0 && r.checks[0].cost == 1000000000,
       "cost 1000000000 is the largest accepted");
    request_free(&r);

    const char *utf = "{\"policy\":\"login\",\"key\":\"\xc3\xa9t\xc3\xa9 {x} * \\r\\n\"}";
    ok(request_parse(cfg, utf, strlen(utf), &r, &e) == 0 &&
           strcmp(r.checks[0].key, "\xc3\xa9t\xc3\xa9 {x} * \r\n") == 0,
       "any bytes but NUL in a key are kept as they are");
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
    }
    config_unref(cfg);
    return tap_done();
}
