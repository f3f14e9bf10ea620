/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_overrides.c: the table of run-time overrides (overrides.c) and their
 * JSON (override_json.c): a change applied once however often it is heard
 * (not older than the table's), removals by age, expiry at the exact
 * instant, the sweep, pages in key order with every entry exactly once, the
 * limits a check gets (named tiers replaced, the others kept, numbers the
 * algorithm refuses skipped), the PUT body's every refusal, the stored form
 * read back as written, RFC 3339 times, and 100 000 entries.
 */
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/decision.h"
#include "core/override_json.h"
#include "core/overrides.h"
#include "tap.h"

#define T0 1790000000000000LL /* 2026-09-21, µs */
#define SEC 1000000LL

static struct policy pol;

static void make_policy(void)
{
    memset(&pol, 0, sizeof pol);
    snprintf(pol.name, sizeof pol.name, "api");
    pol.ntiers = 2;
    pol.tiers[0] = (struct tier){
        .name = "minute", .algorithm = ALG_FIXED_WINDOW, .limit = 3, .window_us = 60 * SEC};
    pol.tiers[1] = (struct tier){
        .name = "day", .algorithm = ALG_TOKEN_BUCKET, .limit = 100, .window_us = 86400 * SEC};
}

static struct override *ovr(const char *key, int64_t limit, int64_t updated, int64_t expires)
{
    struct override *o = calloc(1, sizeof *o);
    snprintf(o->policy, sizeof o->policy, "api");
    o->key = strdup(key);
    o->keylen = strlen(key);
    o->ntiers = 1;
    o->tiers = calloc(1, sizeof *o->tiers);
    snprintf(o->tiers[0].name, sizeof o->tiers[0].name, "minute");
    o->tiers[0].limit = limit;
    o->tiers[0].burst = -1;
    o->updated_us = updated;
    o->expires_us = expires;
    return o;
}

static int64_t limit_of(struct overrides *t, const char *key, int64_t now)
{
    struct override *o = overrides_get(t, "api", key, strlen(key), now);
    int64_t l = o ? o->tiers[0].limit : -1;
    override_free(o);
    return l;
}

static void test_changes(void)
{
    struct overrides *t = overrides_new(1);
    struct override *prev;
    ok(overrides_set(t, ovr("a", 10, T0, 0), &prev) == 1 && !prev, "a first set applies");
    ok(overrides_set(t, ovr("a", 11, T0, 0), NULL) == 0 && limit_of(t, "a", T0) == 10,
       "the same change heard again (same time) is not applied");
    ok(overrides_set(t, ovr("a", 9, T0 - 1, 0), NULL) == 0 && limit_of(t, "a", T0) == 10,
       "an older change is not applied");
    ok(overrides_set(t, ovr("a", 12, T0 + 1, 0), &prev) == 1 && prev &&
           prev->tiers[0].limit == 10 && limit_of(t, "a", T0) == 12,
       "a newer change applies and hands back the previous");
    override_free(prev);
    ok(overrides_delete(t, "api", "a", 1, T0, NULL) == 0 && limit_of(t, "a", T0) == 12,
       "a removal older than the entry is not applied");
    ok(overrides_delete(t, "api", "a", 1, T0 + 1, &prev) == 1 && prev &&
           limit_of(t, "a", T0) == -1 && overrides_count(t) == 0,
       "a removal as new as the entry applies");
    override_free(prev);
    ok(overrides_delete(t, "api", "a", 1, INT64_MAX, NULL) == 0, "removing none: 0");
    ok(overrides_get(t, "other", "a", 1, T0) == NULL, "another policy's key is another entry");
    overrides_free(t);
}

/* A re-read sent before changes and answered after them keeps them. */
static void test_reread(void)
{
    struct overrides *t = overrides_new(5);
    (void)overrides_set(t, ovr("a", 10, T0, 0), NULL);
    (void)overrides_set(t, ovr("b", 10, T0, 0), NULL);
    (void)overrides_set(t, ovr("gone", 10, T0, 0), NULL);
    /* The read is sent a microsecond after those (the clock's unit). */
    int64_t before = util_monotonic_us(), sent;
    while ((sent = util_monotonic_us()) == before)
        ;
    (void)overrides_set(t, ovr("c", 10, T0 + 1, 0), NULL);  /* after the read was sent */
    (void)overrides_set(t, ovr("a", 11, T0 + 2, 0), NULL);  /* newer than the store's */
    (void)overrides_delete(t, "api", "b", 1, T0 + 3, NULL); /* removed after it was sent */
    struct override **v = calloc(3, sizeof *v);
    v[0] = ovr("a", 10, T0, 0);
    v[1] = ovr("b", 10, T0, 0);
    v[2] = ovr("new", 12, T0, 0);
    overrides_replace_all(t, v, 3, sent);
    ok(limit_of(t, "a", T0) == 11 && limit_of(t, "b", T0) == -1 && limit_of(t, "c", T0) == 10 &&
           limit_of(t, "new", T0) == 12 && limit_of(t, "gone", T0) == -1 && overrides_count(t) == 3,
       "a re-read: what was heard since it was sent stays (a newer set, a removal, a new key), "
       "what the store lacks otherwise goes, what it has comes");
    v = calloc(1, sizeof *v);
    v[0] = ovr("b", 10, T0, 0);
    overrides_replace_all(t, v, 1, util_monotonic_us());
    ok(limit_of(t, "b", T0) == 10 && overrides_count(t) == 1,
       "a re-read sent after the removal brings back what the store has");
    overrides_free(t);
}

static void test_expiry(void)
{
    struct overrides *t = overrides_new(2);
    (void)overrides_set(t, ovr("e", 10, T0, T0 + 2 * SEC), NULL);
    (void)overrides_set(t, ovr("never", 10, T0, 0), NULL);
    ok(limit_of(t, "e", T0 + 2 * SEC - 1) == 10, "in force 1 µs before its expiry");
    ok(limit_of(t, "e", T0 + 2 * SEC) == -1, "not in force at its expiry");
    is_int((long long)overrides_policy_count(t, "api", T0 + 2 * SEC), 1LL,
           "the gauge counts what is in force");
    ok(overrides_sweep(t, T0 + SEC, NULL, NULL, NULL) == 0 && overrides_count(t) == 2,
       "a sweep before the expiry removes nothing");
    ok(overrides_sweep(t, T0 + 2 * SEC, NULL, NULL, NULL) == 1 && overrides_count(t) == 1,
       "a sweep at the expiry removes it");
    (void)overrides_set(t, ovr("late", 10, T0, T0 + 5 * SEC), NULL);
    (void)overrides_set(t, ovr("soon", 10, T0, T0 + 3 * SEC), NULL);
    ok(overrides_sweep(t, T0 + 3 * SEC, NULL, NULL, NULL) == 1 &&
           overrides_sweep(t, T0 + 4 * SEC, NULL, NULL, NULL) == 0 &&
           overrides_sweep(t, T0 + 5 * SEC, NULL, NULL, NULL) == 1 && overrides_count(t) == 1,
       "each sweep at each expiry, none between (the next expiry is kept)");
    struct buf b = {0};
    const char *names[] = {"api"};
    overrides_metrics(t, names, 1, T0, &b);
    buf_append_char(&b, '\0');
    ok(strstr(b.data, "ratelimitd_override_changes_total{policy=\"api\",op=\"expired\"} 3\n") &&
           strstr(b.data, "ratelimitd_overrides{policy=\"api\"} 1\n"),
       "the metrics count the expiry and the one in force");
    buf_free(&b);
    overrides_free(t);
}

static void test_pages(void)
{
    struct overrides *t = overrides_new(3);
    enum { N = 100000 };
    char key[32];
    for (int i = 0; i < N; i++) {
        snprintf(key, sizeof key, "k%06d", i);
        (void)overrides_set(t, ovr(key, 10 + i, T0, 0), NULL);
    }
    is_int((long long)overrides_count(t), (long long)N, "100 000 entries");
    char *after = NULL;
    size_t afterlen = 0, seen = 0, pages = 0;
    int in_order = 1, more = 1;
    while (more && pages <= N) {
        struct override **v;
        size_t n;
        overrides_page(t, "api", after, afterlen, 1000, T0, &v, &n, &more);
        for (size_t i = 0; i < n; i++) {
            snprintf(key, sizeof key, "k%06zu", seen + i);
            in_order &= strcmp(v[i]->key, key) == 0;
        }
        seen += n, pages++;
        free(after);
        after = n ? strdup(v[n - 1]->key) : NULL;
        afterlen = after ? strlen(after) : 0;
        for (size_t i = 0; i < n; i++)
            override_free(v[i]);
        free(v);
    }
    free(after);
    ok(seen == N && pages == N / 1000 && in_order, "pages of 1000: each entry once, in key order");
    overrides_free(t);
}

static void test_apply(void)
{
    struct overrides *t = overrides_new(4);
    struct override *o = ovr("big", 50, T0, 0);
    o->tiers = realloc(o->tiers, 3 * sizeof *o->tiers);
    o->ntiers = 3;
    o->tiers[1] = (struct override_tier){.name = "day", .limit = 500, .burst = 600};
    o->tiers[2] = (struct override_tier){.name = "week", .limit = 7, .burst = -1};
    (void)overrides_set(t, o, NULL);
    struct check_item item = {.policy = &pol, .key = "big", .keylen = 3};
    ok(overrides_apply(t, &item, T0) == 1 && item.owned && item.policy == item.owned &&
           item.policy->tiers[0].limit == 50 && item.policy->tiers[1].limit == 500 &&
           item.policy->tiers[1].burst == 600 && item.runtime_tiers == 3 && pol.tiers[0].limit == 3,
       "a check gets a copy with the named tiers' limits; the policy is untouched");
    free(item.owned);
    struct check_item plain = {.policy = &pol, .key = "small", .keylen = 5};
    ok(overrides_apply(t, &plain, T0) == 0 && !plain.owned && plain.policy == &pol,
       "a key without one keeps the policy");
    (void)overrides_set(t, ovr("bad", 0, T0, 0), NULL); /* a limit no tier takes */
    struct check_item bad = {.policy = &pol, .key = "bad", .keylen = 3};
    ok(overrides_apply(t, &bad, T0) == 1 && bad.runtime_tiers == 0 &&
           bad.policy->tiers[0].limit == 3,
       "numbers the algorithm refuses are skipped: the tier keeps its own");
    free(bad.owned);
    overrides_free(t);
}

/* ---- a check of a key without an override takes no lock ---- */

struct held {
    struct overrides *t;
    int done;   /* atomic */
    int result; /* overrides_apply's */
};

static void *sweeper(void *arg)
{
    struct held *h = arg;
    const struct logger lg = {LOG_LVL_DEBUG, 0};
    /* Logs "override expired" under the write lock, to a full pipe. */
    h->result = (int)overrides_sweep(h->t, T0 + 2 * SEC, &lg, NULL, NULL);
    __atomic_store_n(&h->done, 1, __ATOMIC_RELEASE);
    return NULL;
}

static void *checker(void *arg)
{
    struct held *h = arg;
    struct check_item item = {.policy = &pol, .key = "nobody", .keylen = 6};
    h->result = overrides_apply(h->t, &item, T0 + 2 * SEC);
    free(item.owned);
    __atomic_store_n(&h->done, 1, __ATOMIC_RELEASE);
    return NULL;
}

static int done_within(const struct held *h, int ms)
{
    for (int i = 0; i < ms && !__atomic_load_n(&h->done, __ATOMIC_ACQUIRE); i++)
        usleep(1000);
    return __atomic_load_n(&h->done, __ATOMIC_ACQUIRE);
}

/* The sweep holds the write lock while it logs; stderr is a full pipe, so
 * it holds it until the test reads the pipe. A check of a key without an
 * override must be decided meanwhile: the hot path takes no lock for it. */
static void test_apply_without_lock(void)
{
    struct overrides *t = overrides_new(6);
    (void)overrides_set(t, ovr("held", 10, T0, 0), NULL);
    (void)overrides_set(t, ovr("soon", 10, T0, T0 + SEC), NULL);
    int p[2], saved = dup(2);
    char junk[4096] = {0};
    if (pipe(p) < 0 || saved < 0) {
        ok(0, "a pipe for stderr");
        return;
    }
    (void)fcntl(p[1], F_SETFL, O_NONBLOCK);
    while (write(p[1], junk, sizeof junk) > 0) {
    }
    (void)fcntl(p[1], F_SETFL, 0);
    (void)fcntl(p[0], F_SETFL, O_NONBLOCK);
    dup2(p[1], 2);
    struct held sw = {t, 0, 0}, ck = {t, 0, -1};
    pthread_t a, b;
    pthread_create(&a, NULL, sweeper, &sw);
    usleep(200 * 1000); /* the sweeper is in its write, under the lock */
    int blocked = !__atomic_load_n(&sw.done, __ATOMIC_ACQUIRE);
    pthread_create(&b, NULL, checker, &ck);
    int decided = done_within(&ck, 2000);
    while (!__atomic_load_n(&sw.done, __ATOMIC_ACQUIRE) || !__atomic_load_n(&ck.done, 0)) {
        if (read(p[0], junk, sizeof junk) <= 0)
            usleep(1000);
    }
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    dup2(saved, 2);
    close(saved);
    close(p[0]);
    close(p[1]);
    ok(blocked && sw.result == 1, "the sweep held the write lock while it logged");
    ok(decided && ck.result == 0,
       "meanwhile a check of a key without an override was decided (no lock taken)");
    struct check_item held = {.policy = &pol, .key = "held", .keylen = 4};
    ok(overrides_apply(t, &held, T0 + 2 * SEC) == 1 && held.policy->tiers[0].limit == 10,
       "the filter rebuilt by the sweep keeps the entries left");
    free(held.owned);
    struct check_item soon = {.policy = &pol, .key = "soon", .keylen = 4};
    ok(overrides_apply(t, &soon, T0 + 2 * SEC) == 0 && !soon.owned, "the swept one is gone");
    overrides_free(t);
}

/* Removals clear the filter's bits (rebuilt once they outnumber the
 * entries): a key removed, then set again, then removed, is never found
 * after its removal; one kept always is. */
static void test_filter_removals(void)
{
    struct overrides *t = overrides_new(7);
    (void)overrides_set(t, ovr("keep", 9, T0, 0), NULL);
    int right = 1;
    for (int i = 0; i < 200; i++) {
        char key[16];
        snprintf(key, sizeof key, "k%d", i);
        (void)overrides_set(t, ovr(key, 5, T0 + i, 0), NULL);
        struct check_item in = {.policy = &pol, .key = key, .keylen = strlen(key)};
        right &= overrides_apply(t, &in, T0) == 1;
        free(in.owned);
        right &= overrides_delete(t, "api", key, strlen(key), INT64_MAX, NULL) == 1;
        struct check_item out = {.policy = &pol, .key = key, .keylen = strlen(key)};
        right &= overrides_apply(t, &out, T0) == 0;
        struct check_item keep = {.policy = &pol, .key = "keep", .keylen = 4};
        right &= overrides_apply(t, &keep, T0) == 1;
        free(keep.owned);
    }
    ok(right,
       "200 set-then-removed keys: each applies while set, never after; the kept one always");
    overrides_free(t);
}

static int body(const char *json, enum request_code *code)
{
    struct override *o = NULL;
    struct request_error err;
    int rc = override_body_parse(&pol, &pol, "k", 1, json, strlen(json), T0, &o, &err);
    if (rc < 0)
        *code = err.code;
    override_free(o);
    return rc;
}

/* A key that is not UTF-8 would be stored and announced as another key
 * (JSON cleans the byte to '?'): refused. */
static void test_body_key_utf8(void)
{
    struct override *o = NULL;
    struct request_error err;
    const char *json = "{\"tiers\":{\"minute\":{\"limit\":5}}}";
    ok(override_body_parse(&pol, &pol, "a\xff", 2, json, strlen(json), T0, &o, &err) < 0 &&
           err.code == RC_INVALID_KEY && !o,
       "a key with a byte that is not UTF-8: 400 invalid_key");
    ok(override_body_parse(&pol, &pol, "caf\xc3\xa9", 5, json, strlen(json), T0, &o, &err) == 0 &&
           o && o->keylen == 5,
       "a UTF-8 key is taken as is");
    override_free(o);
}

static void test_body(void)
{
    static const struct {
        const char *json;
        enum request_code code;
    } bads[] = {
        {"{not json", RC_INVALID_BODY},
        {"[]", RC_INVALID_BODY},
        {"{}", RC_INVALID_BODY},
        {"{\"tiers\":{}}", RC_INVALID_BODY},
        {"{\"tiers\":{\"minute\":{\"limit\":\"5\"}}}", RC_INVALID_BODY},
        {"{\"tiers\":{\"minute\":{\"limit\":5,\"x\":1}}}", RC_INVALID_BODY},
        {"{\"tiers\":{\"minute\":{\"limit\":5}},\"x\":1}", RC_INVALID_BODY},
        {"{\"tiers\":{\"minute\":{\"limit\":5}},\"note\":7}", RC_INVALID_BODY},
        {"{\"tiers\":{\"hour\":{\"limit\":5}}}", RC_UNKNOWN_TIER},
        {"{\"tiers\":{\"minute\":{\"limit\":0}}}", RC_INVALID_LIMIT},
        {"{\"tiers\":{\"day\":{\"limit\":5,\"burst\":-1}}}", RC_INVALID_LIMIT},
        {"{\"tiers\":{\"minute\":{\"limit\":5}},\"ttl\":\"soon\"}", RC_INVALID_TTL},
        {"{\"tiers\":{\"minute\":{\"limit\":5}},\"ttl\":\"0s\"}", RC_INVALID_TTL},
        {"{\"tiers\":{\"minute\":{\"limit\":5}},\"ttl\":7}", RC_INVALID_TTL},
        {"{\"tiers\":{\"minute\":{\"limit\":5}},\"expires_at\":\"2020-01-01T00:00:00Z\"}",
         RC_INVALID_TTL},
        {"{\"tiers\":{\"minute\":{\"limit\":5}},\"expires_at\":\"tomorrow\"}", RC_INVALID_TTL},
        {"{\"tiers\":{\"minute\":{\"limit\":5}},\"ttl\":\"1h\",\"expires_at\":"
         "\"2999-01-01T00:00:00Z\"}",
         RC_INVALID_TTL},
    };
    for (size_t i = 0; i < sizeof bads / sizeof bads[0]; i++) {
        enum request_code code = RC_COUNT;
        ok(body(bads[i].json, &code) < 0 && code == bads[i].code, "refused as %s: %s",
           request_code_name(bads[i].code), bads[i].json);
    }
    struct override *o = NULL;
    struct request_error err;
    const char *good = "{\"tiers\":{\"minute\":{\"limit\":10000},\"day\":{\"limit\":5,\"burst\":"
                       "9}},\"ttl\":\"7d\",\"note\":\"plan upgrade #123\"}";
    ok(override_body_parse(&pol, &pol, "tenant:acme", 11, good, strlen(good), T0, &o, &err) == 0 &&
           o->ntiers == 2 && o->tiers[0].limit == 10000 && o->tiers[1].burst == 9 &&
           o->expires_us == T0 + 7 * 86400 * SEC && strcmp(o->note, "plan upgrade #123") == 0,
       "a good body: tiers, ttl, note");
    /* The stored form, read back, writes the same bytes. */
    o->by = strdup("127.0.0.1 token=none");
    struct buf a = {0}, b = {0};
    struct json_out j = json_out_start(&a);
    override_json(&j, o, 0);
    struct override *back = NULL;
    int deleted = -1;
    ok(override_json_parse(a.data, a.len, &back, &deleted) == 0 && deleted == 0,
       "the stored form reads back");
    j = json_out_start(&b);
    override_json(&j, back, 0);
    ok(a.len == b.len && memcmp(a.data, b.data, a.len) == 0,
       "and writes the same bytes (what an expiry's removal compares)");
    override_free(back);
    override_free(o);
    buf_free(&a);
    buf_free(&b);
    const char *before_epoch = "{\"policy\":\"api\",\"key\":\"k\",\"tiers\":{\"minute\":{\"limit\":"
                               "1}},\"expires_at\":\"1900-01-01T00:00:00Z\",\"updated_at\":null}";
    back = NULL;
    ok(override_json_parse(before_epoch, strlen(before_epoch), &back, &deleted) < 0 && !back,
       "a stored expiry before the epoch (which would read as never) is refused");
    override_free(back);
    int64_t us;
    ok(override_time_parse("2026-12-04T18:00:00Z", &us) == 0 && us == 1796407200LL * SEC,
       "RFC 3339 in UTC");
    ok(override_time_parse("2026-12-04T19:30:00.5+01:30", &us) == 0 &&
           us == 1796407200LL * SEC + SEC / 2,
       "an offset and a fraction");
    char text[OVERRIDE_TIME_BUF];
    is_str(override_time_format(1796407200LL * SEC + 7, text), "2026-12-04T18:00:00.000007Z",
           "formatted with microseconds");
    ok(override_time_parse("2026-13-04T18:00:00Z", &us) < 0 &&
           override_time_parse("2026-12-04 18:00:00Z", &us) < 0 &&
           override_time_parse("2026-12-04T18:00:00", &us) < 0,
       "a bad month, a space, no zone: refused");
}

int main(void)
{
    make_policy();
    test_changes();
    test_reread();
    test_expiry();
    test_pages();
    test_apply();
    test_apply_without_lock();
    test_filter_removals();
    test_body();
    test_body_key_utf8();
    return tap_done();
}
