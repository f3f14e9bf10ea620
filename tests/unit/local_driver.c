/* SPDX-License-Identifier: Apache-2.0 */
/*
 * local_driver.c: drives limiter_local.c from JSON lines, for the
 * differential test against the Lua script (tests/integration/
 * test_local_diff.py). Not installed.
 *
 *     local_driver POLICY.yaml [MAX_KEYS]
 *     local_driver --print-library
 *
 * (The second form prints scripts_library_code(), the Redis Function
 * library as the daemon builds it, for tests/integration/test_scripts.py.)
 *
 * Reads one request per line on stdin:
 *     {"now_us": N, "dry_run": false, "checks": [{"policy": P, "key": K, "cost": C}]}
 * (dry_run, cost and "nonce", the lease nonce, optional; checks are taken
 * as given, not merged; with "report": true a report, whose costs may be
 * negative), or a release of concurrency leases (release_line), and
 * writes one line per request:
 *     {"allowed": 0|1, "tiers": [[allowed, limit, remaining, reset_us,
 *      retry_us, delay_us, reason], ...], "keys": [[redis_key, expiry], ...],
 *      "size": entries, "policies": [settings, ...]}
 * tiers in check then tier order, as the script returns them; keys are the
 * script's KEYS in order (the log's ZSET and its sequence key), each with
 * local_store_expiry (absolute µs, -1: none), the sequence key sharing its
 * ZSET's entry; policies are the settings strings scripts_build_call sends
 * for each check at now_us (a calendar tier's bounds among them). A
 * malformed line ends the program with status 1.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/redis/scripts.h"
#include "config/config.h"
#include "config/policy.h"
#include "limiter/limiter_local.h"

static void die(const char *msg, const char *detail)
{
    fprintf(stderr, "local_driver: %s%s%s\n", msg, detail ? ": " : "", detail ? detail : "");
    exit(1);
}

/* Decodes one line into req (keys point into root, which must outlive it). */
static int64_t parse_line(const struct config *cfg, json_t *root, struct check_request *req)
{
    json_t *now = json_object_get(root, "now_us");
    json_t *dry = json_object_get(root, "dry_run");
    json_t *report = json_object_get(root, "report");
    json_t *checks = json_object_get(root, "checks");
    if (!json_is_integer(now) || json_integer_value(now) < 0)
        die("now_us must be an integer >= 0", NULL);
    if (dry && !json_is_boolean(dry))
        die("dry_run must be a boolean", NULL);
    if (!json_is_array(checks) || json_array_size(checks) == 0)
        die("checks must be a non-empty array", NULL);
    if (report && !json_is_boolean(report))
        die("report must be a boolean", NULL);
    req->dry_run = dry && json_is_true(dry);
    req->report = report && json_is_true(report);
    json_int_t least = req->report ? -REQUEST_MAX_COST : 0;
    json_t *nonce = json_object_get(root, "nonce");
    if (nonce && (!json_is_string(nonce) || json_string_length(nonce) != LEASE_NONCE_LEN))
        die("nonce must be a string of 22 characters", NULL);
    if (nonce)
        memcpy(req->lease_nonce, json_string_value(nonce), LEASE_NONCE_LEN + 1);
    req->nchecks = json_array_size(checks);
    req->checks = calloc(req->nchecks, sizeof *req->checks);
    if (!req->checks)
        die("out of memory", NULL);
    for (size_t i = 0; i < req->nchecks; i++) {
        json_t *c = json_array_get(checks, i);
        json_t *policy = json_object_get(c, "policy");
        json_t *key = json_object_get(c, "key");
        json_t *cost = json_object_get(c, "cost");
        if (!json_is_string(policy) || !json_is_string(key))
            die("a check needs a string policy and key", NULL);
        struct check_item *it = &req->checks[i];
        it->policy = config_find_policy(cfg, json_string_value(policy));
        if (!it->policy)
            die("unknown policy", json_string_value(policy));
        it->key = (char *)json_string_value(key);
        it->keylen = json_string_length(key);
        if (it->keylen == 0 || it->keylen > POLICY_KEY_MAX)
            die("bad key length", NULL);
        it->cost = 1;
        if (cost) {
            if (!json_is_integer(cost) || json_integer_value(cost) < least ||
                json_integer_value(cost) > REQUEST_MAX_COST)
                die("cost must be an integer in [0, 1e9] ([-1e9, 1e9] in a report)", NULL);
            it->cost = json_integer_value(cost);
        }
    }
    return json_integer_value(now);
}

/* Writes reply as one line, and frees it. */
static void put_reply(json_t *reply)
{
    char *text = json_dumps(reply, JSON_COMPACT);
    if (!text)
        die("cannot encode the reply", NULL);
    printf("%s\n", text);
    fflush(stdout);
    free(text);
    json_decref(reply);
}

/* {"now_us": N, "release": [{"policy","key","tier","units","nonce"}]}:
 * releases them (local_store_lease) and writes {"outcomes": [status...],
 * "keys": [[redis_key, expiry]...]}, a key per lease. */
static void release_line(const struct config *cfg, struct local_store *store, json_t *root)
{
    json_t *now = json_object_get(root, "now_us"), *list = json_object_get(root, "release");
    if (!json_is_integer(now) || !json_is_array(list))
        die("a release needs now_us and a release array", NULL);
    size_t n = json_array_size(list);
    struct lease_ref *refs = calloc(n ? n : 1, sizeof *refs);
    struct lease_outcome *out = calloc(n ? n : 1, sizeof *out);
    if (!refs || !out)
        die("out of memory", NULL);
    for (size_t i = 0; i < n; i++) {
        json_t *l = json_array_get(list, i);
        const char *policy, *key, *tier, *nonce;
        json_int_t units;
        if (json_unpack(l, "{s:s,s:s,s:s,s:I,s:s}", "policy", &policy, "key", &key, "tier", &tier,
                        "units", &units, "nonce", &nonce) < 0)
            die("bad lease", NULL);
        snprintf(refs[i].policy, sizeof refs[i].policy, "%s", policy);
        snprintf(refs[i].tier, sizeof refs[i].tier, "%s", tier);
        refs[i].keylen = strlen(key);
        if (refs[i].keylen > sizeof refs[i].key)
            die("key too long", NULL);
        memcpy(refs[i].key, key, refs[i].keylen);
        refs[i].units = units;
        snprintf(refs[i].nonce, sizeof refs[i].nonce, "%s", nonce);
    }
    int64_t t = json_integer_value(now);
    local_store_lease(store, cfg->key_prefix, 0, refs, n, t, out);
    json_t *outcomes = json_array(), *keys = json_array();
    for (size_t i = 0; i < n; i++) {
        char k[POLICY_KEY_BUF];
        int len = policy_redis_key(cfg->key_prefix, refs[i].policy, refs[i].key, refs[i].keylen,
                                   refs[i].tier, NULL, k, sizeof k);
        if (len < 0)
            die("key too long", NULL);
        json_array_append_new(outcomes, json_integer(out[i].status));
        json_array_append_new(
            keys, json_pack("[sI]", k, (json_int_t)local_store_expiry(store, k, (size_t)len, t)));
    }
    put_reply(json_pack("{s:o,s:o}", "outcomes", outcomes, "keys", keys));
    free(refs);
    free(out);
}

int main(int argc, char **argv)
{
    if (argc == 2 && strcmp(argv[1], "--print-library") == 0) {
        fputs(scripts_library_code(), stdout);
        return fflush(stdout) == 0 ? 0 : 1;
    }
    if (argc < 2 || argc > 3) {
        fprintf(stderr, "usage: local_driver POLICY.yaml [MAX_KEYS]\n");
        return 64;
    }
    char err[RL_ERRLEN];
    struct config *cfg = config_load(argv[1], err, sizeof err);
    if (!cfg)
        die("bad policy file", err);
    size_t max_keys = argc == 3 ? (size_t)strtoull(argv[2], NULL, 10) : (size_t)1 << 20;
    struct local_store *store = local_store_new(max_keys, 0x5eed5eed5eedULL);

    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    while ((n = getline(&line, &cap, stdin)) > 0) {
        json_error_t jerr;
        json_t *root = json_loadb(line, (size_t)n, 0, &jerr);
        if (!root || !json_is_object(root))
            die("bad JSON line", root ? NULL : jerr.text);
        if (json_object_get(root, "release")) {
            release_line(cfg, store, root);
            json_decref(root);
            continue;
        }
        struct check_request req = {0};
        int64_t now = parse_line(cfg, root, &req);
        size_t ntiers = 0;
        for (size_t i = 0; i < req.nchecks; i++)
            ntiers += req.checks[i].policy->ntiers;
        struct tier_result *out = calloc(ntiers, sizeof *out);
        if (!out)
            die("out of memory", NULL);
        int allowed = local_decide(store, cfg->key_prefix, &req, now, out);

        json_t *tiers = json_array(), *keys = json_array();
        size_t k = 0;
        for (size_t i = 0; i < req.nchecks; i++) {
            const struct check_item *c = &req.checks[i];
            for (size_t j = 0; j < c->policy->ntiers; j++, k++) {
                const struct tier_result *r = &out[k];
                json_array_append_new(tiers,
                                      json_pack("[iIIIIIi]", r->allowed, (json_int_t)r->limit,
                                                (json_int_t)r->remaining, (json_int_t)r->reset_us,
                                                (json_int_t)r->retry_us, (json_int_t)r->delay_us,
                                                r->cost_exceeds_limit));
                const struct tier *t = &c->policy->tiers[j];
                static const char *const suffix[] = {NULL, "seq"};
                char main_key[POLICY_KEY_BUF], name[POLICY_KEY_BUF];
                int len = policy_redis_key(cfg->key_prefix, c->policy->name, c->key, c->keylen,
                                           t->name, NULL, main_key, sizeof main_key);
                if (len < 0)
                    die("key too long", NULL);
                int64_t expiry = local_store_expiry(store, main_key, (size_t)len, now);
                for (int q = 0; q < policy_algorithm_nkeys(t->algorithm); q++) {
                    if (policy_redis_key(cfg->key_prefix, c->policy->name, c->key, c->keylen,
                                         t->name, suffix[q], name, sizeof name) < 0)
                        die("key too long", NULL);
                    json_array_append_new(keys, json_pack("[sI]", name, (json_int_t)expiry));
                }
            }
        }
        struct script_call call;
        scripts_build_call(cfg, &req, now, &call);
        json_t *policies = json_array();
        for (size_t i = 0; i < req.nchecks; i++)
            json_array_append_new(policies, json_string(call.args[call.nkeys + 2 + 2 * i + 1]));
        scripts_call_free(&call);
        put_reply(json_pack("{s:i,s:o,s:o,s:I,s:o}", "allowed", allowed, "tiers", tiers, "keys",
                            keys, "size", (json_int_t)local_store_size(store), "policies",
                            policies));
        free(out);
        free(req.checks);
        json_decref(root);
    }
    free(line);
    local_store_free(store);
    config_unref(cfg);
    return 0;
}
