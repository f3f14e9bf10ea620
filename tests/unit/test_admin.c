/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_admin.c: the admin API's path decoding (admin.c): policy lookup,
 * strict percent-decoding of the key, and each error with its status and
 * code. Table-driven.
 */
#include <stdlib.h>
#include <string.h>

#include "front/http/admin.h"
#include "tap.h"

static const char yaml[] = "listen: 127.0.0.1:1\n"
                           "policies:\n"
                           "  api:\n"
                           "    tiers:\n"
                           "      - {name: m, algorithm: fixed_window, limit: 1, window: 1m}\n";

struct good {
    const char *path;
    const char *key; /* decoded */
    size_t keylen;
};

static const struct good goods[] = {
    {"/v1/keys/api/user:1", "user:1", 6},
    {"/v1/keys/api/tenant%3Aacme", "tenant:acme", 11},
    {"/v1/keys/api/a%2Fb/c", "a/b/c", 5}, /* a raw '/' is part of the key */
    {"/v1/keys/api/100%25", "100%", 4},
    {"/v1/keys/api/with%20space", "with space", 10},
    {"/v1/keys/api/%e2%82%ac", "\xe2\x82\xac", 3}, /* lower-case hex */
    {"/v1/keys/api/%FF", "\xff", 1},
    {"/v1/keys/api/a+b", "a+b", 3}, /* '+' is not a space in a path */
};

struct bad {
    const char *path;
    int status;
    const char *code;
};

static const struct bad bads[] = {
    {"/v1/keys/api", 400, "invalid_path"},      {"/v1/keys/api/", 400, "invalid_key"},
    {"/v1/keys/api/%", 400, "invalid_path"},    {"/v1/keys/api/%4", 400, "invalid_path"},
    {"/v1/keys/api/%zz", 400, "invalid_path"},  {"/v1/keys/api/a%4g", 400, "invalid_path"},
    {"/v1/keys/api/a%00b", 400, "invalid_key"}, {"/v1/keys/nope/a", 404, "unknown_policy"},
    {"/v1/keys//a", 404, "unknown_policy"},     {"/v1/keys/", 400, "invalid_path"},
};

static void test_good(const struct config *cfg)
{
    for (size_t i = 0; i < sizeof goods / sizeof goods[0]; i++) {
        struct admin_target t;
        struct request_error err;
        int rc = admin_parse_path(cfg, goods[i].path, &t, &err);
        if (!ok(rc == 0, "%s decodes", goods[i].path)) {
            printf("#   %s: %s\n", request_code_name(err.code), err.message);
            continue;
        }
        ok(t.keylen == goods[i].keylen && memcmp(t.key, goods[i].key, t.keylen) == 0,
           "%s: the key's bytes", goods[i].path);
        is_str(t.policy->name, "api", "%s: the policy", goods[i].path);
        free(t.key);
    }
}

static void test_bad(const struct config *cfg)
{
    for (size_t i = 0; i < sizeof bads / sizeof bads[0]; i++) {
        struct admin_target t;
        struct request_error err;
        int rc = admin_parse_path(cfg, bads[i].path, &t, &err);
        ok(rc < 0 && t.key == NULL, "%s is refused", bads[i].path);
        if (rc < 0) {
            is_int(request_code_status(err.code), bads[i].status, "%s: status", bads[i].path);
            is_str(request_code_name(err.code), bads[i].code, "%s: code", bads[i].path);
        } else {
            free(t.key);
        }
    }
}

/* The key's length limit, counted after decoding. */
static void test_lengths(const struct config *cfg)
{
    size_t n = strlen(ADMIN_KEYS_PREFIX "api/");
    char *path = malloc(n + 3 * (POLICY_KEY_MAX + 1) + 1);
    memcpy(path, ADMIN_KEYS_PREFIX "api/", n);
    for (size_t i = 0; i < POLICY_KEY_MAX; i++)
        memcpy(path + n + 3 * i, "%41", 3);
    path[n + 3 * POLICY_KEY_MAX] = '\0';
    struct admin_target t;
    struct request_error err;
    ok(admin_parse_path(cfg, path, &t, &err) == 0 && t.keylen == POLICY_KEY_MAX,
       "a key of exactly %d bytes, all escaped, is accepted", POLICY_KEY_MAX);
    free(t.key);
    strcpy(path + n + 3 * POLICY_KEY_MAX, "B");
    ok(admin_parse_path(cfg, path, &t, &err) < 0 && request_code_status(err.code) == 400 &&
           strcmp(request_code_name(err.code), "invalid_key") == 0,
       "one byte more is refused (400 invalid_key)");
    free(path);
}

/* The inspection request: two checks of the key, cost 0 then 1, a dry run
 * not counted as checks; the target's key is taken. */
static void test_inspect_request(const struct config *cfg)
{
    struct admin_target t;
    struct request_error err;
    if (admin_parse_path(cfg, "/v1/keys/api/k", &t, &err) < 0)
        return;
    struct check_request r;
    admin_inspect_request(&t, &r);
    ok(t.key == NULL, "inspect: the target's key is taken");
    ok(r.dry_run && r.inspect && r.nchecks == 2, "inspect: a dry run of two checks, inspect set");
    ok(r.checks[0].cost == 0 && r.checks[1].cost == 1, "inspect: costs 0 then 1");
    ok(r.checks[0].key != r.checks[1].key && r.checks[1].keylen == 1 &&
           memcmp(r.checks[1].key, "k", 1) == 0,
       "inspect: each check owns its copy of the key");
    request_free(&r);
}

int main(void)
{
    char err[RL_ERRLEN];
    struct config *cfg = config_load_string("test.yaml", yaml, strlen(yaml), err, sizeof err);
    if (!ok(cfg != NULL, "test config loads")) {
        printf("# %s\n", err);
        return tap_done();
    }
    test_good(cfg);
    test_bad(cfg);
    test_lengths(cfg);
    test_inspect_request(cfg);
    config_unref(cfg);
    return tap_done();
}
