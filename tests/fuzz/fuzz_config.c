/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_config.c: libFuzzer harness for the policy file. The input is the
 * YAML text given to config_load_string().
 *
 * Refused: the message must follow config.h's contract,
 * "<file>:<line>:<column>: <what is wrong>".
 * Accepted: the snapshot must hold what config.c promises: at least one
 * policy, sorted by name without duplicates and each found by
 * config_find_policy; 1 to 16 tiers with unique valid names, each passing
 * policy_tier_validate; a key_prefix within its rules. Then every policy is
 * taken through what a check does with it (the script call, with the
 * longest key a request may carry, and a decision answer), since config and
 * request validation together promise that those cannot fail.
 *
 * A broken contract aborts, so libFuzzer saves the input.
 */
#include <ctype.h>
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/redis/scripts.h"
#include "config/config.h"
#include "config/policy.h"
#include "front/http/response.h"
#include "lib/buf.h"

#define NAME "fuzz.yaml"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define REQUIRE(cond, ...)                                                                         \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz_config: %s:%d: %s: ", __FILE__, __LINE__, #cond);                \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

/* Skips "<digits>:" at *p; 0 if not there. */
static int skip_number(const char **p)
{
    const char *s = *p;

    if (!isdigit((unsigned char)*s) || *s == '0')
        return 0;
    while (isdigit((unsigned char)*s))
        s++;
    if (*s != ':')
        return 0;
    *p = s + 1;
    return 1;
}

static void check_error(const char *err)
{
    const char *p = err;

    REQUIRE(strncmp(p, NAME ":", sizeof NAME) == 0, "%s", err);
    p += sizeof NAME;
    REQUIRE(skip_number(&p) && skip_number(&p) && *p == ' ' && p[1] != '\0',
            "not file:line:column: message: %s", err);
}

/* A check of every policy with the longest key a request may carry, all of
 * it bytes that must be escaped: the largest script call the policy can
 * cause. Each check is one request of its own, as cost and shadowing differ. */
static void exercise(const struct config *c)
{
    static char key[POLICY_KEY_MAX + 1];
    struct tier_result results[POLICY_MAX_TIERS];
    struct check_item item;
    struct check_request req = {.nchecks = 1, .checks = &item};
    struct script_call call;
    struct buf out = {0};
    json_t *body;

    if (key[0] == '\0')
        memset(key, '%', POLICY_KEY_MAX);
    for (size_t i = 0; i < c->npolicies; i++) {
        const struct policy *p = &c->policies[i];

        item = (struct check_item){.policy = p, .key = key, .keylen = POLICY_KEY_MAX, .cost = 1};
        scripts_build_call(c, &req, 1700000000000000LL, &call);
        REQUIRE(call.ntiers == p->ntiers, "%zu tiers in the call", call.ntiers);
        for (size_t k = 0; k < call.nkeys; k++)
            REQUIRE(strlen(call.args[k]) == call.lens[k] && call.lens[k] < POLICY_KEY_BUF,
                    "key %zu of policy %s", k, p->name);
        scripts_call_free(&call);

        for (size_t j = 0; j < p->ntiers; j++)
            results[j] = (struct tier_result){.allowed = (int)(j & 1),
                                              .limit = policy_tier_capacity(&p->tiers[j]),
                                              .remaining = (int64_t)j,
                                              .reset_us = p->tiers[j].window_us,
                                              .retry_us = j == 3 ? -1 : p->tiers[j].window_us,
                                              .delay_us = p->tiers[j].precision_us};
        struct verdict v = {.kind = VERDICT_DECIDED, .req = &req, .results = results};
        decision_summarize(&req, results, &v.sum);
        out.len = 0;
        response_verdict(&out, &v, 0);
        buf_append_char(&out, '\0');
        const char *json = strstr(out.data, "\r\n\r\n");
        REQUIRE(json != NULL, "no end of head: %s", out.data);
        body = json_loads(json + 4, 0, NULL);
        REQUIRE(json_is_object(body), "not a JSON object: %s", json + 4);
        json_decref(body);
    }
    buf_free(&out);
}

/* What policy_for_key gives for a few keys (dictionary words among them):
 * p itself or a variant with p's name and settings, valid tiers of unique
 * names, and no overrides of its own. */
static void check_variants(const struct policy *p)
{
    static const char *const keys[] = {"", "a", "k", "vip:", "vip:1", "tenant:acme", "key"};
    char msg[RL_ERRLEN];

    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        const struct policy *v = policy_for_key(p, keys[i], strlen(keys[i]));
        if (v == p)
            continue;
        REQUIRE(v->overrides == NULL && strcmp(v->name, p->name) == 0 &&
                    v->failure_mode == p->failure_mode && v->shadow == p->shadow &&
                    v->deny_cache == p->deny_cache,
                "variant of %s for %s", p->name, keys[i]);
        REQUIRE(v->ntiers >= 1 && v->ntiers <= POLICY_MAX_TIERS, "%zu variant tiers", v->ntiers);
        for (size_t j = 0; j < v->ntiers; j++) {
            REQUIRE(policy_tier_validate(&v->tiers[j], msg, sizeof msg) == 0, "%s: %s", p->name,
                    msg);
            for (size_t k = 0; k < j; k++)
                REQUIRE(strcmp(v->tiers[k].name, v->tiers[j].name) != 0, "duplicate tier %s",
                        v->tiers[j].name);
        }
    }
}

static void check_config(const struct config *c)
{
    REQUIRE(c->refcount == 1, "refcount %d", c->refcount);
    REQUIRE(c->npolicies >= 1 && c->policies != NULL, "%zu policies", c->npolicies);
    REQUIRE(c->listen != NULL && c->redis_url != NULL && c->key_prefix != NULL, "a NULL string");
    REQUIRE(strlen(c->key_prefix) <= CONFIG_PREFIX_MAX && strpbrk(c->key_prefix, "{}") == NULL,
            "key_prefix %s", c->key_prefix);
    REQUIRE(c->redis_timeout_us > 0 && c->redis_timeout_us <= 60000000, "timeout %lld",
            (long long)c->redis_timeout_us);
    REQUIRE(c->max_body >= 64 && c->max_body <= 16777216, "max_body %lld", (long long)c->max_body);
    REQUIRE(c->clock == CLOCK_SOURCE_REDIS || c->clock == CLOCK_SOURCE_LOCAL, "clock %d",
            (int)c->clock);

    for (size_t i = 0; i < c->npolicies; i++) {
        const struct policy *p = &c->policies[i];
        char msg[RL_ERRLEN];

        REQUIRE(policy_name_valid(p->name), "policy name %s", p->name);
        REQUIRE(i == 0 || strcmp(c->policies[i - 1].name, p->name) < 0,
                "policies %s and %s are not sorted or not unique", c->policies[i - 1].name,
                p->name);
        REQUIRE(config_find_policy(c, p->name) == p, "config_find_policy(%s)", p->name);
        REQUIRE(p->failure_mode == FAILURE_OPEN || p->failure_mode == FAILURE_CLOSED ||
                    p->failure_mode == FAILURE_LOCAL,
                "failure_mode %d", (int)p->failure_mode);
        REQUIRE(p->shadow == 0 || p->shadow == 1, "shadow %d", p->shadow);
        REQUIRE(p->ntiers >= 1 && p->ntiers <= POLICY_MAX_TIERS, "%zu tiers", p->ntiers);
        for (size_t j = 0; j < p->ntiers; j++) {
            REQUIRE(policy_name_valid(p->tiers[j].name), "tier name %s", p->tiers[j].name);
            REQUIRE(policy_tier_validate(&p->tiers[j], msg, sizeof msg) == 0, "%s.%s: %s", p->name,
                    p->tiers[j].name, msg);
            for (size_t k = 0; k < j; k++)
                REQUIRE(strcmp(p->tiers[k].name, p->tiers[j].name) != 0, "duplicate tier %s",
                        p->tiers[j].name);
        }
        check_variants(p);
    }
    REQUIRE(config_find_policy(c, "") == NULL, "the empty name found a policy");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[RL_ERRLEN] = "";
    struct config *c = config_load_string(NAME, (const char *)data, size, err, sizeof err);

    if (c == NULL) {
        check_error(err);
        return 0;
    }
    check_config(c);
    exercise(c);
    /* Two holders, as during a reload: the snapshot lives until the last. */
    REQUIRE(config_ref(c) == c, "config_ref");
    config_unref(c);
    REQUIRE(config_find_policy(c, c->policies[0].name) == &c->policies[0], "after one unref");
    config_unref(c);
    return 0;
}
