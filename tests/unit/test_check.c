/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_check.c: check.c (and reset.c, through the same pending-call life)
 * driven by a fake backend on a real libevent loop: the reply comes exactly
 * once, the deadline answers and the late completion only frees, a cancel
 * before completion, every failure_mode (local through a fallback memory
 * backend), the deny cache, max_inflight. Run it under valgrind to see that
 * every path frees what it holds.
 */
#include <event2/event.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend_memory.h"
#include "config/config.h"
#include "core/backend.h"
#include "core/check.h"
#include "core/core.h"
#include "core/deny_cache.h"
#include "core/metrics.h"
#include "core/reset.h"
#include "tap.h"

static const char yaml[] = "max_inflight: 2\n"
                           "overload: reject\n"
                           "redis:\n"
                           "  timeout: 20ms\n"
                           "policies:\n"
                           "  open:\n"
                           "    tiers:\n"
                           "      - {name: t, algorithm: fixed_window, limit: 1, window: 1m}\n"
                           "  closed:\n"
                           "    failure_mode: closed\n"
                           "    tiers:\n"
                           "      - {name: t, algorithm: fixed_window, limit: 1, window: 1m}\n"
                           "  local:\n"
                           "    failure_mode: local\n"
                           "    tiers:\n"
                           "      - {name: t, algorithm: fixed_window, limit: 1, window: 1h}\n"
                           "      - {name: u, algorithm: fixed_window, limit: 5, window: 1h}\n";

/* ---- a fake backend: answers as the test tells it ---- */

enum fake_mode {
    FAKE_SYNC,        /* completes within decide */
    FAKE_LATER,       /* completes on the loop, at once */
    FAKE_REFUSE,      /* decide returns -1 */
    FAKE_ERROR,       /* completes within decide with BACKEND_ERROR */
    FAKE_UNAVAILABLE, /* completes within decide with BACKEND_UNAVAILABLE */
    FAKE_NEVER,       /* completes only when the test says (fake_complete) */
};

struct fake {
    struct backend base; /* first */
    struct event_base *loop;
    enum fake_mode mode;
    int allowed;          /* what OK reports for every tier */
    int64_t retry_us;     /* a denial's wait */
    int calls;            /* decide and reset calls taken */
    int timeouts;         /* note_timeout calls */
    backend_done_fn done; /* a decide not yet completed */
    backend_reset_done_fn reset_done;
    void *arg;
    size_t ntiers;
};

static void fake_answer(struct fake *f, enum backend_status st)
{
    struct tier_result res[8];
    for (size_t i = 0; i < f->ntiers && i < 8; i++)
        res[i] = (struct tier_result){.allowed = f->allowed,
                                      .limit = 1,
                                      .remaining = f->allowed ? 1 : 0,
                                      .reset_us = 60000000,
                                      .retry_us = f->allowed ? 0 : f->retry_us};
    backend_done_fn done = f->done;
    backend_reset_done_fn reset_done = f->reset_done;
    void *arg = f->arg;
    f->done = NULL;
    f->reset_done = NULL;
    if (done) {
        struct backend_reply r = {.status = st,
                                  .results = res,
                                  .errmsg =
                                      st == BACKEND_ERROR ? "ERR boom" : "lost the connection"};
        done(arg, &r);
    } else if (reset_done) {
        struct backend_reset_reply r = {
            .status = st, .deleted = 3, .notified = 1, .errmsg = "lost the connection"};
        reset_done(arg, &r);
    }
}

/* Completes the call the fake holds (FAKE_NEVER, or a late one). */
static void fake_complete(struct fake *f)
{
    fake_answer(f, BACKEND_OK);
}

static void on_later(evutil_socket_t fd, short what, void *arg)
{
    fake_complete(arg);
}

/* What decide and reset share: keep the callback, then answer per mode. */
static int fake_take(struct fake *f)
{
    f->calls++;
    switch (f->mode) {
    case FAKE_REFUSE:
        f->done = NULL;
        f->reset_done = NULL;
        return -1;
    case FAKE_SYNC:
        fake_answer(f, BACKEND_OK);
        break;
    case FAKE_ERROR:
        fake_answer(f, BACKEND_ERROR);
        break;
    case FAKE_UNAVAILABLE:
        fake_answer(f, BACKEND_UNAVAILABLE);
        break;
    case FAKE_LATER:
        if (event_base_once(f->loop, -1, EV_TIMEOUT, on_later, f, NULL) < 0)
            abort();
        break;
    case FAKE_NEVER:
        break;
    }
    return 0;
}

static int fake_decide(struct backend *b, const struct config *cfg, const struct check_request *req,
                       int64_t now_us, backend_done_fn done, void *arg)
{
    struct fake *f = (struct fake *)b;
    f->done = done;
    f->arg = arg;
    f->ntiers = request_tiers(req);
    return fake_take(f);
}

static int fake_reset(struct backend *b, const struct config *cfg, const struct policy *p,
                      const char *key, size_t keylen, backend_reset_done_fn done, void *arg)
{
    struct fake *f = (struct fake *)b;
    f->reset_done = done;
    f->arg = arg;
    return fake_take(f);
}

static void fake_watch_resets(struct backend *b, const struct config *cfg)
{
}

static int64_t fake_call_timeout_us(const struct backend *b, const struct config *cfg)
{
    return cfg->redis_timeout_us;
}

static void fake_note_timeout(struct backend *b)
{
    ((struct fake *)b)->timeouts++;
}

static void fake_start(struct backend *b)
{
}

static int fake_ready(const struct backend *b)
{
    return 1;
}

static const char *fake_target(const struct backend *b)
{
    return "fake";
}

static void fake_free(struct backend *b)
{
}

/* Named "redis": the core's words about it must be today's, byte for byte. */
static const struct backend_ops fake_ops = {
    .name = "redis",
    .decide = fake_decide,
    .reset = fake_reset,
    .watch_resets = fake_watch_resets,
    .call_timeout_us = fake_call_timeout_us,
    .note_timeout = fake_note_timeout,
    .start = fake_start,
    .ready = fake_ready,
    .target = fake_target,
    .free = fake_free,
};

/* ---- the harness ---- */

static struct fake fake;
static struct core core;
static size_t backend_pending;
static struct backend_memory_store *store;
static int idle_calls;
static struct logger quiet = {.level = LOG_LVL_ERROR};

/* What the front saw. */
struct seen {
    int replies;
    enum verdict_kind kind;
    enum verdict_outcome outcome;
    int allowed, cached;
    char why[128];
};

static void on_reply(void *ctx, const struct verdict *v)
{
    struct seen *s = ctx;
    s->replies++;
    s->kind = v->kind;
    s->outcome = verdict_outcome(v);
    s->allowed = v->kind == VERDICT_DECIDED || v->kind == VERDICT_LOCAL ? v->sum.allowed : -1;
    s->cached = v->cached;
    snprintf(s->why, sizeof s->why, "%s", v->why ? v->why : "");
}

static int status_of(const struct verdict *v)
{
    return 200 + (int)verdict_outcome(v);
}

static void on_idle(void *arg)
{
    idle_calls++;
}

static void setup(struct event_base *loop, struct config *cfg)
{
    fake =
        (struct fake){.base = {.ops = &fake_ops}, .loop = loop, .allowed = 1, .retry_us = 1000000};
    core = (struct core){.base = loop,
                         .log = &quiet,
                         .config = cfg,
                         .backend = &fake.base,
                         .metrics = metrics_new(),
                         .backend_pending = &backend_pending,
                         .status_of = status_of,
                         .idle = on_idle};
}

/* A request of one check of policy name for key, cost 1. */
static struct check_request one(const char *name, const char *key)
{
    struct check_request r = {.nchecks = 1};
    r.checks = xcalloc(1, sizeof *r.checks);
    r.checks[0] = (struct check_item){.policy = config_find_policy(core.config, name),
                                      .key = xstrdup(key),
                                      .keylen = strlen(key),
                                      .cost = 1};
    return r;
}

/* Starts a check of (name, key) with the fake in mode. */
static struct check *start(enum fake_mode mode, const char *name, const char *key, struct seen *s)
{
    fake.mode = mode;
    struct check_request r = one(name, key);
    struct check *c = check_start(&core, &r, on_reply, s);
    ok(r.checks == NULL && r.nchecks == 0, "%s: check_start takes the request", key);
    return c;
}

static void run(struct event_base *loop, int ms)
{
    struct timeval tv = {.tv_sec = 0, .tv_usec = ms * 1000};
    event_base_loopexit(loop, &tv);
    event_base_dispatch(loop);
}

/* ---- the cases ---- */

static void test_sync(struct event_base *loop)
{
    struct seen s = {0};
    struct check *c = start(FAKE_SYNC, "open", "sync", &s);
    ok(c == NULL, "sync: no handle once answered within check_start");
    is_int(s.replies, 1, "sync: one reply, before check_start returned");
    is_int(s.kind, VERDICT_DECIDED, "sync: decided");
    is_int(s.outcome, OUTCOME_ALLOWED, "sync: allowed");
    is_int(core.inflight, 0, "sync: nothing in flight");
    is_int(backend_pending, 0, "sync: max_inflight's unit given back");
    ok(idle_calls > 0, "sync: the embedder is told it may be idle");
}

static void test_later(struct event_base *loop)
{
    struct seen s = {0};
    fake.allowed = 0;
    struct check *c = start(FAKE_LATER, "open", "later", &s);
    ok(c != NULL, "later: a handle while the backend works");
    is_int(s.replies, 0, "later: no reply yet");
    is_int(core.inflight, 1, "later: one check in flight");
    is_int(backend_pending, 1, "later: one backend call counted");
    run(loop, 5);
    is_int(s.replies, 1, "later: one reply from the loop");
    is_int(s.outcome, OUTCOME_DENIED, "later: denied");
    is_int(core.inflight, 0, "later: nothing in flight");
    is_int(backend_pending, 0, "later: the unit given back");
    fake.allowed = 1;
}

static void test_failures(struct event_base *loop)
{
    static const struct {
        enum fake_mode mode;
        const char *policy, *why;
        enum verdict_outcome outcome;
    } cases[] = {
        {FAKE_REFUSE, "open", "redis is unavailable", OUTCOME_ALLOWED},
        {FAKE_ERROR, "open", "redis returned an error", OUTCOME_ALLOWED},
        {FAKE_UNAVAILABLE, "open", "lost the connection", OUTCOME_ALLOWED},
        {FAKE_REFUSE, "closed", "redis is unavailable", OUTCOME_UNAVAILABLE},
        {FAKE_ERROR, "closed", "redis returned an error", OUTCOME_UNAVAILABLE},
        {FAKE_UNAVAILABLE, "closed", "lost the connection", OUTCOME_UNAVAILABLE},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct seen s = {0};
        char key[32];
        snprintf(key, sizeof key, "fail%zu", i);
        struct check *c = start(cases[i].mode, cases[i].policy, key, &s);
        ok(c == NULL && s.replies == 1, "%s: one reply within check_start", key);
        is_int(s.kind, VERDICT_UNAVAILABLE, "%s: unavailable", key);
        is_str(s.why, cases[i].why, "%s: the reason", key);
        is_int(s.outcome, cases[i].outcome, "%s: the policy's failure_mode", key);
        is_int(backend_pending, 0, "%s: no unit held", key);
    }
}

static void test_deadline(struct event_base *loop)
{
    struct seen s = {0};
    struct check *c = start(FAKE_NEVER, "closed", "late", &s);
    ok(c != NULL, "deadline: a handle while the backend works");
    run(loop, 60);
    is_int(s.replies, 1, "deadline: one reply at the deadline");
    is_str(s.why, "redis did not answer in time", "deadline: the reason");
    is_int(s.outcome, OUTCOME_UNAVAILABLE, "deadline: failure_mode closed");
    is_int(fake.timeouts, 1, "deadline: the backend is told");
    is_int(core.inflight, 0, "deadline: not in flight for the front");
    is_int(backend_pending, 1, "deadline: the call still holds its unit");
    fake_complete(&fake);
    is_int(s.replies, 1, "deadline: the late completion does not reply again");
    is_int(backend_pending, 0, "deadline: the late completion gives the unit back");
}

static void test_cancel(struct event_base *loop)
{
    struct seen s = {0};
    struct check *c = start(FAKE_LATER, "open", "cancel", &s);
    check_cancel(c);
    is_int(core.inflight, 0, "cancel: not in flight");
    run(loop, 5);
    is_int(s.replies, 0, "cancel: no reply after the completion");
    is_int(backend_pending, 0, "cancel: the completion gives the unit back");
    check_cancel(NULL);
    ok(1, "check_cancel(NULL) is a no-op");

    /* Cancelled, then the deadline would have passed: nothing fires. */
    c = start(FAKE_NEVER, "open", "cancel2", &s);
    check_cancel(c);
    run(loop, 40);
    is_int(fake.timeouts, 1, "cancel: no deadline once cancelled");
    fake_complete(&fake);
    is_int(s.replies, 0, "cancel: never a reply");
}

static void test_local(struct event_base *loop)
{
    struct seen s = {0};
    start(FAKE_REFUSE, "local", "loc", &s);
    is_int(s.kind, VERDICT_LOCAL, "local: refused, the fallback decides");
    is_int(s.outcome, OUTCOME_ALLOWED, "local: the first allowed (limit 1)");
    memset(&s, 0, sizeof s);
    start(FAKE_ERROR, "local", "loc", &s);
    is_int(s.replies, 1, "local, from a backend's callback: one reply");
    is_int(s.kind, VERDICT_LOCAL, "local, from a backend's callback: the fallback decides");
    is_int(s.outcome, OUTCOME_DENIED, "local: the second denied: the store counts");
    memset(&s, 0, sizeof s);
    struct check *c = start(FAKE_NEVER, "local", "loc2", &s);
    ok(c != NULL, "local at the deadline: a handle");
    run(loop, 60);
    is_int(s.replies, 1, "local at the deadline: one reply");
    is_int(s.kind, VERDICT_LOCAL, "local at the deadline: the fallback decides");
    fake_complete(&fake);
    is_int(s.replies, 1, "local at the deadline: the late completion only frees");

    /* A reset forgets the key in the fallback's store. */
    core_forget_key(&core, "local", "loc", 3);
    memset(&s, 0, sizeof s);
    start(FAKE_REFUSE, "local", "loc", &s);
    is_int(s.outcome, OUTCOME_ALLOWED, "local: allowed again once the key is forgotten");

    /* No fallback: failure_mode local answers as open. */
    struct backend *fb = core.fallback;
    core.fallback = NULL;
    memset(&s, 0, sizeof s);
    start(FAKE_REFUSE, "local", "loc", &s);
    is_int(s.kind, VERDICT_UNAVAILABLE, "local without a fallback: unavailable");
    is_int(s.outcome, OUTCOME_ALLOWED, "local without a fallback: as open");
    core.fallback = fb;
}

static void test_deny_cache(struct event_base *loop)
{
    core.deny = deny_cache_new(16, 1);
    fake.allowed = 0;
    struct seen s = {0};
    start(FAKE_SYNC, "open", "hot", &s);
    is_int(s.outcome, OUTCOME_DENIED, "deny cache: denied by the backend");
    int calls = fake.calls;
    memset(&s, 0, sizeof s);
    start(FAKE_SYNC, "open", "hot", &s);
    is_int(fake.calls, calls, "deny cache: the backend is not asked again");
    ok(s.cached && s.outcome == OUTCOME_DENIED, "deny cache: denied from the cache");

    /* A reset forgets the denial. */
    core_forget_key(&core, "open", "hot", 3);
    memset(&s, 0, sizeof s);
    start(FAKE_SYNC, "open", "hot", &s);
    is_int(fake.calls, calls + 1, "deny cache: asked again after a reset");
    /* ... and one sent before the reset announcement is not cached: the
     * announcement comes after the check was sent. */
    fake.mode = FAKE_NEVER;
    struct check_request r = one("open", "hot2");
    check_start(&core, &r, on_reply, &s);
    core_forget_key(&core, "open", "nothing", 7);
    fake_complete(&fake);
    calls = fake.calls;
    start(FAKE_SYNC, "open", "hot2", &s);
    is_int(fake.calls, calls + 1, "deny cache: a denial sent before a reset is not cached");
    fake.allowed = 1;
    deny_cache_free(core.deny);
    core.deny = NULL;
}

static void test_max_inflight(struct event_base *loop)
{
    struct seen a = {0}, b = {0}, c = {0};
    struct check *ca = start(FAKE_NEVER, "open", "q1", &a);
    backend_done_fn done1 = fake.done;
    void *arg1 = fake.arg;
    struct check *cb = start(FAKE_NEVER, "open", "q2", &b);
    ok(ca && cb, "max_inflight: two calls wait (max_inflight 2)");
    struct check *cc = start(FAKE_NEVER, "open", "q3", &c);
    ok(cc == NULL && c.replies == 1, "max_inflight: the third is answered at once");
    is_int(c.kind, VERDICT_OVERLOADED, "max_inflight: overloaded (overload: reject)");
    is_int(c.outcome, OUTCOME_UNAVAILABLE, "max_inflight: outcome unavailable");
    is_int(backend_pending, 2, "max_inflight: two units held");
    fake_complete(&fake); /* q2 */
    fake.done = done1;
    fake.arg = arg1;
    fake_complete(&fake); /* q1 */
    ok(a.replies == 1 && b.replies == 1, "max_inflight: both answered once");
    is_int(backend_pending, 0, "max_inflight: every unit given back");
}

/* ---- resets: the same pending-call life ---- */

struct reset_seen {
    int replies, ok;
    long long deleted;
    char why[128];
};

static void on_reset(void *ctx, const struct reset_result *r)
{
    struct reset_seen *s = ctx;
    s->replies++;
    s->ok = r->ok;
    s->deleted = r->deleted;
    snprintf(s->why, sizeof s->why, "%s", r->why ? r->why : "");
}

static struct reset *reset(enum fake_mode mode, struct reset_seen *s)
{
    fake.mode = mode;
    return reset_start(&core, config_find_policy(core.config, "open"), xstrdup("k"), 1, "peer",
                       on_reset, s);
}

static void test_resets(struct event_base *loop)
{
    struct reset_seen s = {0};
    ok(reset(FAKE_SYNC, &s) == NULL, "reset sync: no handle");
    ok(s.replies == 1 && s.ok && s.deleted == 3, "reset sync: one reply, ok");
    memset(&s, 0, sizeof s);
    reset(FAKE_REFUSE, &s);
    ok(s.replies == 1 && !s.ok, "reset refused: one reply, failed");
    is_str(s.why, "redis is unavailable", "reset refused: the reason");
    memset(&s, 0, sizeof s);
    ok(reset(FAKE_NEVER, &s) != NULL, "reset never: a handle");
    run(loop, 60);
    is_int(s.replies, 1, "reset deadline: one reply");
    is_str(s.why, "redis did not answer in time", "reset deadline: the reason");
    fake_complete(&fake);
    is_int(s.replies, 1, "reset deadline: the late completion only frees");
    memset(&s, 0, sizeof s);
    struct reset *r = reset(FAKE_LATER, &s);
    reset_cancel(r);
    run(loop, 5);
    is_int(s.replies, 0, "reset cancelled: no reply");
    reset_cancel(NULL);
    ok(1, "reset_cancel(NULL) is a no-op");
}

int main(void)
{
    char err[512];
    struct config *cfg = config_load_string("test", yaml, sizeof yaml - 1, err, sizeof err);
    if (!cfg) {
        printf("# %s\nBail out!\n", err);
        return 1;
    }
    struct event_base *loop = event_base_new();
    setup(loop, cfg);
    store = backend_memory_store_new(100, 7);
    core.fallback = backend_memory_new(store);

    test_sync(loop);
    test_later(loop);
    test_failures(loop);
    test_deadline(loop);
    test_cancel(loop);
    test_local(loop);
    test_deny_cache(loop);
    test_max_inflight(loop);
    test_resets(loop);

    backend_free(core.fallback);
    backend_memory_store_free(store);
    metrics_free(core.metrics);
    event_base_free(loop);
    config_unref(cfg);
    return tap_done();
}
