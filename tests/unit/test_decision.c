/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_decision.c: decision.c, pure: the request-level decision and the
 * per-check allowed of decision_summarize (and of decision_summarize_allowed
 * alone), the binding tier rules, the
 * strictest failure mode, the outcome of each verdict, and the HTTP front's
 * mapping of outcomes to statuses (response_status), table-driven.
 */
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "core/decision.h"
#include "front/http/response.h"
#include "tap.h"

static const char yaml[] = "policies:\n"
                           "  a:\n"
                           "    deny_status: 403\n"
                           "    tiers:\n"
                           "      - {name: x, algorithm: fixed_window, limit: 10, window: 1m}\n"
                           "      - {name: y, algorithm: fixed_window, limit: 100, window: 1h}\n"
                           "  b:\n"
                           "    failure_mode: local\n"
                           "    tiers:\n"
                           "      - {name: x, algorithm: leaky_bucket, limit: 10, window: 1s}\n"
                           "  s:\n"
                           "    shadow: true\n"
                           "    tiers:\n"
                           "      - {name: x, algorithm: fixed_window, limit: 1, window: 1s}\n"
                           "  c:\n"
                           "    failure_mode: closed\n"
                           "    tiers:\n"
                           "      - {name: x, algorithm: fixed_window, limit: 5, window: 1m}\n";

static struct config *cfg;

/* A request of the named policies (one check each, NULL-terminated). */
static struct check_request req_of(const char *const *names)
{
    struct check_request r = {0};
    while (names[r.nchecks])
        r.nchecks++;
    r.checks = xcalloc(r.nchecks, sizeof *r.checks);
    for (size_t i = 0; i < r.nchecks; i++)
        r.checks[i] = (struct check_item){.policy = config_find_policy(cfg, names[i]),
                                          .key = xstrdup("k"),
                                          .keylen = 1,
                                          .cost = 1};
    return r;
}

static struct tier_result t(int allowed, int64_t remaining, int64_t reset_us, int64_t retry_us)
{
    return (struct tier_result){.allowed = allowed,
                                .limit = 10,
                                .remaining = remaining,
                                .reset_us = reset_us,
                                .retry_us = retry_us};
}

static void test_summarize(void)
{
    static const char *const ab[] = {"a", "b", NULL};
    struct check_request r = req_of(ab);
    struct decision_summary sum;

    /* a: two tiers, b: one (leaky). */
    struct tier_result all[] = {t(1, 5, 10, 0), t(1, 2, 20, 0), t(1, 2, 30, 0)};
    all[2].delay_us = 700;
    decision_summarize(&r, all, &sum);
    ok(sum.allowed && !sum.shadow_denied, "all allowed: allowed");
    is_int(sum.check_allowed, 3, "all allowed: both checks allowed");
    ok(sum.binding == &all[2], "allowed: fewest remaining binds, ties to the longest reset");
    ok(sum.any_leaky && sum.delay_us == 700, "allowed: the leaky tier's delay");
    is_int(sum.retry_us, 0, "allowed: no wait");

    struct tier_result second_denied[] = {t(1, 5, 10, 0), t(0, 0, 20, 500), t(1, 2, 30, 0)};
    decision_summarize(&r, second_denied, &sum);
    ok(!sum.allowed, "a tier of a denied: denied");
    ok(!decision_check_allowed(&sum, 0) && decision_check_allowed(&sum, 1),
       "per check: a denied, b allowed");
    ok(sum.binding == &second_denied[1] && sum.retry_us == 500, "denied: the denying tier binds");
    is_int(sum.delay_us, 0, "denied: no delay");

    struct tier_result both_denied[] = {t(0, 0, 10, 300), t(1, 2, 20, 0), t(0, 0, 30, 900)};
    decision_summarize(&r, both_denied, &sum);
    is_int(sum.check_allowed, 0, "both denied: no check allowed");
    ok(sum.binding == &both_denied[2], "denied: the longest wait binds");
    both_denied[0].retry_us = -1;
    decision_summarize(&r, both_denied, &sum);
    ok(sum.binding == &both_denied[0] && sum.retry_us == -1, "denied: no finite wait is longest");
    request_free(&r);
}

static void test_shadow(void)
{
    static const char *const as[] = {"a", "s", NULL};
    struct check_request r = req_of(as);
    struct decision_summary sum;
    struct tier_result res[] = {t(1, 5, 10, 0), t(1, 6, 20, 0), t(0, 0, 30, 900)};
    decision_summarize(&r, res, &sum);
    ok(sum.allowed && sum.shadow_denied, "a shadow check never denies; shadow_denied");
    ok(decision_check_allowed(&sum, 0) && !decision_check_allowed(&sum, 1),
       "per check: the shadow check's own tiers denied");
    ok(sum.binding == &res[0], "a shadow tier does not bind");
    res[0].allowed = 0;
    res[0].retry_us = 100;
    decision_summarize(&r, res, &sum);
    ok(!sum.allowed && !sum.shadow_denied, "denied: shadow_denied is not reported");
    ok(sum.binding == &res[0], "denied: the shadow tier's longer wait does not bind");
    request_free(&r);

    static const char *const s_only[] = {"s", NULL};
    r = req_of(s_only);
    struct tier_result one[] = {t(0, 0, 30, 900)};
    decision_summarize(&r, one, &sum);
    ok(sum.allowed && sum.binding == &one[0], "only shadow checks: its tier binds");
    request_free(&r);
}

static void test_failure_mode(void)
{
    static const struct {
        const char *names[4];
        enum failure_mode want;
    } cases[] = {
        {{"a", NULL}, FAILURE_OPEN},
        {{"a", "b", NULL}, FAILURE_LOCAL},
        {{"b", "c", "a", NULL}, FAILURE_CLOSED},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct check_request r = req_of(cases[i].names);
        is_int(request_failure_mode(&r), cases[i].want, "failure mode %zu: the strictest", i);
        request_free(&r);
    }
}

/* verdict_outcome and the HTTP front's mapping, table-driven. */
static void test_outcomes(void)
{
    static const struct {
        const char *policy;
        enum verdict_kind kind;
        int allowed, use_deny_status;
        enum verdict_outcome outcome;
        int status;
    } cases[] = {
        {"a", VERDICT_DECIDED, 1, 0, OUTCOME_ALLOWED, 200},
        {"a", VERDICT_DECIDED, 0, 0, OUTCOME_DENIED, 429},
        {"a", VERDICT_DECIDED, 0, 1, OUTCOME_DENIED, 403},
        {"a", VERDICT_LOCAL, 0, 0, OUTCOME_DENIED, 429},
        {"b", VERDICT_LOCAL, 1, 0, OUTCOME_ALLOWED, 200},
        {"a", VERDICT_UNAVAILABLE, 0, 0, OUTCOME_ALLOWED, 200},
        {"b", VERDICT_UNAVAILABLE, 0, 0, OUTCOME_ALLOWED, 200},
        {"c", VERDICT_UNAVAILABLE, 0, 0, OUTCOME_UNAVAILABLE, 503},
        {"a", VERDICT_OVERLOADED, 0, 0, OUTCOME_UNAVAILABLE, 503},
        {"c", VERDICT_OVERLOADED, 0, 1, OUTCOME_UNAVAILABLE, 503},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *names[] = {cases[i].policy, NULL};
        struct check_request r = req_of(names);
        r.use_deny_status = cases[i].use_deny_status;
        size_t n = request_tiers(&r);
        struct tier_result res[4];
        for (size_t k = 0; k < n; k++)
            res[k] = t(cases[i].allowed, cases[i].allowed, 10, cases[i].allowed ? 0 : 100);
        struct verdict v = {.kind = cases[i].kind, .req = &r};
        if (v.kind == VERDICT_DECIDED || v.kind == VERDICT_LOCAL) {
            v.results = res;
            decision_summarize(&r, res, &v.sum);
        }
        is_int(verdict_outcome(&v), cases[i].outcome, "outcome %zu", i);
        is_int(response_status(&v), cases[i].status, "HTTP status %zu", i);
        request_free(&r);
    }
}

/* The decision alone, as limiter_local.c reads it before the figures: the
 * same allowed fields as decision_summarize, from `allowed` only. */
static void test_summarize_allowed(void)
{
    static const char *const bsa[] = {"b", "s", "a", NULL};
    struct check_request r = req_of(bsa);
    struct decision_summary sum, full;
    /* b: one tier (leaky, with a delay), s: one (shadow), a: two. */
    static const struct {
        int allowed[4];
        int want_allowed, want_checks, want_shadow_denied;
        const char *what;
    } cases[] = {
        {{1, 1, 1, 1}, 1, 7, 0, "all allowed"},
        {{1, 0, 1, 1}, 1, 5, 1, "only the shadow check denies: allowed, shadow_denied"},
        {{1, 1, 1, 0}, 0, 3, 0, "a's second tier denies: denied, check a not allowed"},
        {{0, 0, 1, 1}, 0, 4, 0, "b and the shadow deny: denied, no shadow_denied"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        struct tier_result res[4];
        for (size_t k = 0; k < 4; k++)
            res[k] = (struct tier_result){.allowed = cases[c].allowed[k], .delay_us = 700};
        decision_summarize_allowed(&r, res, &sum);
        ok(sum.allowed == cases[c].want_allowed, "%s: allowed", cases[c].what);
        is_int(sum.check_allowed, cases[c].want_checks, "%s: per check", cases[c].what);
        is_int(sum.shadow_denied, cases[c].want_shadow_denied, "%s: shadow_denied", cases[c].what);
        ok(!sum.binding && !sum.retry_us && !sum.any_leaky && !sum.delay_us,
           "%s: nothing else summarized", cases[c].what);
        decision_summarize(&r, res, &full);
        ok(full.allowed == sum.allowed && full.check_allowed == sum.check_allowed &&
               full.shadow_denied == sum.shadow_denied,
           "%s: as decision_summarize decides", cases[c].what);
    }
    request_free(&r);
}

int main(void)
{
    char err[512];
    cfg = config_load_string("test", yaml, sizeof yaml - 1, err, sizeof err);
    if (!cfg) {
        printf("# %s\nBail out!\n", err);
        return 1;
    }
    test_summarize();
    test_shadow();
    test_summarize_allowed();
    test_failure_mode();
    test_outcomes();
    config_unref(cfg);
    return tap_done();
}
