/*
 * backend_redis.c: the Redis backend (backend.h) on one pipelined
 * connection. See backend_redis.h. Owns the hiredis context, the URL's credentials, the reconnect
 * timer and every in-flight call's copy of its arguments.
 *
 * Commands are pipelined: hiredis writes each call into one output buffer
 * and replies come back in order, so AUTH, SELECT and SCRIPT LOAD sent right
 * after connect always run before any EVALSHA, and a SCRIPT LOAD sent after a
 * NOSCRIPT always runs before the retried EVALSHA.
 */
#include <event2/event.h>
#include <hiredis/adapters/libevent.h>
#include <hiredis/async.h>
#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "backend_redis.h"
#include "buf.h"
#include "metrics.h"
#include "redis_url.h"
#include "scripts.h"

#define BACKOFF_MIN_US 50000
#define BACKOFF_MAX_US 2000000
/* From connect to the script loaded: a Redis that accepts the connection but
 * never answers (paused, overloaded) is dropped after this. */
#define READY_TIMEOUT_US 1000000
/* Checks in a row that reached their deadline with no reply from Redis in
 * between: the connection is then taken as hung, and dropped. */
#define STALL_TIMEOUTS 3
/* Reloads of the code (and retries) one call may need: a flush can land
 * between a reload and the retry that follows it. */
#define CODE_RELOAD_RETRIES 3

enum conn_state { CONN_DOWN, CONN_CONNECTING, CONN_UP };

struct backend_redis {
    struct backend base_iface; /* first: a struct backend * points here */
    struct event_base *base;
    const struct logger *log;
    struct metrics *metrics;
    struct redis_url url;
    char target[300];
    char sha[41];

    redisAsyncContext *ac;
    enum conn_state state;
    int script_loaded;
    int use_eval;       /* the server has no Functions (Redis 6, KeyDB): EVALSHA */
    int load_in_flight; /* a SCRIPT LOAD is queued: retries can follow it */
    int setup_failed;   /* AUTH or SELECT failed on this connection */
    int freeing;
    struct event *reconnect_ev;
    struct event *ready_timeout_ev;
    int stalled_timeouts; /* deadlines passed since the last reply */
    int dropping;         /* inside drop_connection */
    int64_t backoff_us;
    uint64_t rng;
    struct buf cmd; /* the RESP of the call being sent, reused */
};

/* One call in flight; owns its arguments, kept for a NOSCRIPT retry. */
struct pending {
    struct backend_redis *b;
    backend_done_fn done;
    void *arg;
    int retries;         /* reloads of the code for this call */
    int64_t sent_us;     /* monotonic, for the round-trip histogram */
    int64_t deadline_us; /* monotonic: a reply after it is late */
    struct script_call call;
};

static void start_connect(struct backend_redis *b);

/* ---- connection life ---- */

static uint64_t next_random(struct backend_redis *b)
{
    /* xorshift64*: jitter only, no need for quality. */
    b->rng ^= b->rng >> 12;
    b->rng ^= b->rng << 25;
    b->rng ^= b->rng >> 27;
    return b->rng * 2685821657736338717ULL;
}

/* Records whether the script is loaded, telling the listener on a change. */
static int redis_ready(const struct backend *iface)
{
    const struct backend_redis *b = (const struct backend_redis *)iface;
    return b->state == CONN_UP && b->script_loaded;
}

static void set_loaded(struct backend_redis *b, int loaded)
{
    b->script_loaded = loaded;
    if (!b->freeing)
        backend_state_changed(&b->base_iface);
}

static void schedule_reconnect(struct backend_redis *b)
{
    b->state = CONN_DOWN;
    set_loaded(b, 0);
    b->load_in_flight = 0;
    b->ac = NULL;
    event_del(b->ready_timeout_ev);
    if (b->freeing)
        return;
    /* Half fixed, half random, so that many daemons restarting together do
     * not reconnect in lockstep. */
    int64_t d = b->backoff_us / 2 + (int64_t)(next_random(b) % (uint64_t)(b->backoff_us / 2 + 1));
    struct timeval tv = {.tv_sec = d / 1000000, .tv_usec = d % 1000000};
    evtimer_add(b->reconnect_ev, &tv);
    b->backoff_us = b->backoff_us * 2 > BACKOFF_MAX_US ? BACKOFF_MAX_US : b->backoff_us * 2;
}

static void on_reconnect_timer(evutil_socket_t fd, short what, void *arg)
{
    start_connect(arg);
}

/*
 * Drops the connection at once: every call waiting on it completes as
 * unavailable (answered per failure_mode), and reconnection starts after the
 * backoff. Until the script is loaded again, redis_decide refuses at once:
 * the circuit is open. Never called from inside a hiredis callback.
 */
static void drop_connection(struct backend_redis *b, const char *why)
{
    log_event(b->log, LOG_LVL_WARN, "redis connection dropped", "target", b->target, "reason", why,
              NULL);
    redisAsyncContext *ac = b->ac;
    b->ac = NULL;
    b->dropping = 1; /* on_disconnect, if hiredis calls it, leaves it to us */
    redisAsyncFree(ac);
    b->dropping = 0;
    metrics_count(b->metrics, METRICS_REDIS_RECONNECTS);
    schedule_reconnect(b);
}

static void on_ready_timeout(evutil_socket_t fd, short what, void *arg)
{
    struct backend_redis *b = arg;
    if (b->ac && !redis_ready(&b->base_iface))
        drop_connection(b, "no answer to connect and SCRIPT LOAD in time");
}

static void on_connect(const redisAsyncContext *ac, int status)
{
    struct backend_redis *b = ac->data;
    if (status != REDIS_OK) {
        log_event(b->log, LOG_LVL_WARN, "redis connect failed", "target", b->target, "error",
                  ac->errstr, NULL);
        /* hiredis frees the context after this callback returns. */
        schedule_reconnect(b);
        return;
    }
    b->state = CONN_UP;
    log_event(b->log, LOG_LVL_INFO, "redis connected", "target", b->target, NULL);
}

static void on_disconnect(const redisAsyncContext *ac, int status)
{
    struct backend_redis *b = ac->data;
    if (b->dropping)
        return;
    metrics_count(b->metrics, METRICS_REDIS_RECONNECTS);
    if (!b->freeing)
        log_event(b->log, LOG_LVL_WARN, "redis connection lost", "target", b->target, "error",
                  status == REDIS_OK ? "closed" : ac->errstr, NULL);
    schedule_reconnect(b);
}

/* Replies to AUTH and SELECT: only failures matter. They are logged, and the
 * connection never becomes ready (checks are answered per failure_mode). */
static void on_setup_reply(redisAsyncContext *ac, void *reply, void *privdata)
{
    redisReply *r = reply;
    struct backend_redis *b = ac->data;
    if (r && r->type == REDIS_REPLY_ERROR) {
        log_event(b->log, LOG_LVL_ERROR, "redis setup command failed", "command",
                  (const char *)privdata, "target", b->target, "error", r->str, NULL);
        /* Never ready on this connection (a failed SELECT would put every
         * counter in db 0): the ready timeout drops it and retries. */
        b->setup_failed = 1;
    }
}

/* The code is loaded: connected and answering, the circuit closes. */
static void loaded(struct backend_redis *b, const char *how)
{
    if (!b->script_loaded)
        log_event(b->log, LOG_LVL_INFO, "redis code loaded", "as", how, "sha1", b->sha, NULL);
    event_del(b->ready_timeout_ev);
    b->backoff_us = BACKOFF_MIN_US;
    b->stalled_timeouts = 0;
    set_loaded(b, 1);
}

static void send_script_load(struct backend_redis *b);

static void on_script_loaded(redisAsyncContext *ac, void *reply, void *privdata)
{
    redisReply *r = reply;
    struct backend_redis *b = privdata;
    if (!r)
        return; /* connection gone; the next connect loads again */
    b->load_in_flight = 0;
    if (b->setup_failed)
        return;
    if (!b->use_eval && r->type == REDIS_REPLY_STRING &&
        strcmp(r->str, scripts_function_name()) == 0) {
        loaded(b, "function");
        return;
    }
    if (b->use_eval && r->type == REDIS_REPLY_STRING && strcmp(r->str, b->sha) == 0) {
        loaded(b, "script");
        return;
    }
    /* No FUNCTION command here (before Redis 7, KeyDB, or renamed away):
     * the same code by EVALSHA, decided once per connection. */
    if (!b->use_eval && r->type == REDIS_REPLY_ERROR &&
        (strncasecmp(r->str, "ERR unknown command", 19) == 0 ||
         strncasecmp(r->str, "ERR unknown subcommand", 22) == 0)) {
        b->use_eval = 1;
        log_event(b->log, LOG_LVL_INFO, "redis has no Functions, using EVALSHA", "target",
                  b->target, NULL);
        send_script_load(b);
        return;
    }
    metrics_count(b->metrics, METRICS_REDIS_ERRORS);
    log_event(b->log, LOG_LVL_ERROR, "redis code load failed", "target", b->target, "error",
              r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply", NULL);
}

/* FUNCTION LOAD REPLACE (Redis 7+) or SCRIPT LOAD. REPLACE because a
 * library of this name holds exactly this code (the name is its hash). */
static void send_script_load(struct backend_redis *b)
{
    if (b->load_in_flight || !b->ac)
        return;
    const char *fn_argv[] = {"FUNCTION", "LOAD", "REPLACE", scripts_library_code()};
    size_t fn_lens[] = {8, 4, 7, strlen(scripts_library_code())};
    const char *sc_argv[] = {"SCRIPT", "LOAD", scripts_lua_source};
    size_t sc_lens[] = {6, 4, strlen(scripts_lua_source)};
    int rc = b->use_eval ? redisAsyncCommandArgv(b->ac, on_script_loaded, b, 3, sc_argv, sc_lens)
                         : redisAsyncCommandArgv(b->ac, on_script_loaded, b, 4, fn_argv, fn_lens);
    if (rc == REDIS_OK)
        b->load_in_flight = 1;
}

static void start_connect(struct backend_redis *b)
{
    redisAsyncContext *ac = b->url.unix_path ? redisAsyncConnectUnix(b->url.unix_path)
                                             : redisAsyncConnect(b->url.host, b->url.port);
    if (!ac || ac->err) {
        log_event(b->log, LOG_LVL_WARN, "redis connect failed", "target", b->target, "error",
                  ac ? ac->errstr : "out of memory", NULL);
        if (ac)
            redisAsyncFree(ac);
        schedule_reconnect(b);
        return;
    }
    ac->data = b;
    b->ac = ac;
    b->state = CONN_CONNECTING;
    b->setup_failed = 0;
    b->use_eval = 0; /* a new connection may be to another server */
    redisLibeventAttach(ac, b->base);
    redisAsyncSetConnectCallback(ac, on_connect);
    redisAsyncSetDisconnectCallback(ac, on_disconnect);
    struct timeval tv = {.tv_sec = READY_TIMEOUT_US / 1000000,
                         .tv_usec = READY_TIMEOUT_US % 1000000};
    evtimer_add(b->ready_timeout_ev, &tv);

    /* Queued now, sent as soon as the socket connects, ahead of any check. */
    const struct redis_url *u = &b->url;
    if (u->password) {
        /* AUTH [user] password: the user only when the URL names one. */
        const char *argv[] = {"AUTH", u->user ? u->user : u->password, u->password};
        size_t lens[] = {4, strlen(argv[1]), strlen(u->password)};
        redisAsyncCommandArgv(ac, on_setup_reply, "AUTH", u->user ? 3 : 2, argv, lens);
    }
    if (u->db) {
        char db[16];
        snprintf(db, sizeof db, "%d", u->db);
        const char *argv[] = {"SELECT", db};
        size_t lens[] = {6, strlen(db)};
        redisAsyncCommandArgv(ac, on_setup_reply, "SELECT", 2, argv, lens);
    }
    send_script_load(b);
}

/* ---- calls ---- */

static void pending_free(struct pending *p)
{
    scripts_call_free(&p->call);
    free(p);
}

static int send_pending(struct pending *p);

/* The script's integers, decoded into one result per tier for the caller. */
static void complete_ok(struct pending *p, const redisReply *r)
{
    long long ints_buf[64];
    struct tier_result res_buf[8];
    size_t ntiers = p->call.ntiers;
    long long *ints = r->elements <= 64 ? ints_buf : xcalloc(r->elements, sizeof *ints);
    struct tier_result *res = ntiers <= 8 ? res_buf : xcalloc(ntiers, sizeof *res);
    char err[RL_ERRLEN];
    size_t i;
    for (i = 0; i < r->elements && r->element[i]->type == REDIS_REPLY_INTEGER; i++)
        ints[i] = r->element[i]->integer;
    struct backend_reply reply = {.status = BACKEND_OK, .results = res};
    if (i != r->elements) {
        reply = (struct backend_reply){BACKEND_ERROR, NULL, "script reply holds a non-integer"};
    } else if (scripts_decode_result(ints, r->elements, ntiers, res, err, sizeof err) < 0) {
        reply = (struct backend_reply){BACKEND_ERROR, NULL, err};
    }
    p->done(p->arg, &reply);
    if (ints != ints_buf)
        free(ints);
    if (res != res_buf)
        free(res);
}

static void complete(struct pending *p, enum backend_status status, const char *errmsg)
{
    struct backend_reply reply = {.status = status, .errmsg = errmsg};
    p->done(p->arg, &reply);
}

/* The error of a call whose code Redis no longer holds (SCRIPT FLUSH,
 * FUNCTION FLUSH, a restarted Redis): reload and retry. */
static int code_missing(const char *err)
{
    return strncmp(err, "NOSCRIPT", 8) == 0 || strncmp(err, "ERR Function not found", 22) == 0;
}

static void on_eval_reply(redisAsyncContext *ac, void *reply, void *privdata)
{
    redisReply *r = reply;
    struct pending *p = privdata;
    struct backend_redis *b = p->b;

    if (r) {
        int64_t now = util_monotonic_us();
        /* Only a reply in time shows the connection healthy: a Redis that
         * answers every call after its deadline keeps the count growing,
         * and the circuit opens as for one that does not answer. */
        if (now <= p->deadline_us)
            b->stalled_timeouts = 0;
        metrics_redis_latency(b->metrics, now - p->sent_us);
    }
    if (!r) {
        complete(p, BACKEND_UNAVAILABLE, "connection to redis lost");
    } else if (r->type == REDIS_REPLY_ERROR) {
        /* After SCRIPT FLUSH or a restart of Redis, reload and retry once:
         * the caller never sees NOSCRIPT. */
        if (code_missing(r->str) && p->retries < CODE_RELOAD_RETRIES && b->ac == ac) {
            p->retries++;
            metrics_count(b->metrics, METRICS_REDIS_NOSCRIPT_RELOADS);
            log_event(b->log, LOG_LVL_INFO, "redis script missing, reloading", "target", b->target,
                      NULL);
            send_script_load(b);
            if (send_pending(p) == 0)
                return;
            complete(p, BACKEND_UNAVAILABLE, "connection to redis lost");
        } else {
            metrics_count(b->metrics, METRICS_REDIS_ERRORS);
            complete(p, BACKEND_ERROR, r->str);
        }
    } else if (r->type == REDIS_REPLY_ARRAY) {
        complete_ok(p, r);
    } else {
        complete(p, BACKEND_ERROR, "script reply is not an array");
    }
    pending_free(p);
}

static void resp_bulk(struct buf *out, const char *s, size_t len)
{
    buf_append_char(out, '$');
    buf_append_int(out, (long long)len);
    buf_append(out, "\r\n", 2);
    buf_append(out, s, len);
    buf_append(out, "\r\n", 2);
}

/* The call as RESP, into out (emptied first): FCALL (or EVALSHA on a server
 * without Functions), the function's name (or the SHA1), the number of
 * keys, then the call's arguments. Written here rather than by hiredis's
 * formatter, which builds each argument's header with sdscatfmt and a new
 * string per call: a tenth of the daemon's time per check. */
static void resp_format_call(const struct backend_redis *b, const struct script_call *call,
                             struct buf *out)
{
    char nkeys[UTIL_INT_CHARS];
    const char *cmd = b->use_eval ? "EVALSHA" : "FCALL";
    const char *name = b->use_eval ? b->sha : scripts_function_name();
    out->len = 0;
    buf_append_char(out, '*');
    buf_append_int(out, (long long)(3 + call->nargs));
    buf_append(out, "\r\n", 2);
    resp_bulk(out, cmd, strlen(cmd));
    resp_bulk(out, name, strlen(name));
    resp_bulk(out, nkeys, util_format_int(nkeys, (long long)call->nkeys));
    for (size_t i = 0; i < call->nargs; i++)
        resp_bulk(out, call->args[i], call->lens[i]);
}

static int send_pending(struct pending *p)
{
    struct backend_redis *b = p->b;
    if (!b->ac || b->state == CONN_DOWN)
        return -1;
    p->sent_us = util_monotonic_us();
    resp_format_call(b, &p->call, &b->cmd);
    return redisAsyncFormattedCommand(b->ac, on_eval_reply, p, b->cmd.data, b->cmd.len) == REDIS_OK
               ? 0
               : -1;
}

static int redis_decide(struct backend *iface, const struct config *cfg,
                        const struct check_request *req, int64_t now_us, backend_done_fn done,
                        void *arg)
{
    struct backend_redis *b = (struct backend_redis *)iface;
    /* The circuit is open (down, reconnecting, or not yet answering):
     * answer now rather than wait for a deadline. */
    if (!redis_ready(iface))
        return -1;
    struct pending *p = xcalloc(1, sizeof *p);
    p->b = b;
    p->done = done;
    p->arg = arg;
    p->deadline_us = util_monotonic_us() + cfg->redis_timeout_us;
    scripts_build_call(cfg, req, now_us, &p->call);
    if (send_pending(p) < 0) {
        pending_free(p);
        return -1;
    }
    return 0;
}

static void redis_start(struct backend *iface)
{
    start_connect((struct backend_redis *)iface);
}

static void redis_note_timeout(struct backend *iface)
{
    struct backend_redis *b = (struct backend_redis *)iface;
    if (b->ac && ++b->stalled_timeouts >= STALL_TIMEOUTS)
        drop_connection(b, "no reply in time to several checks in a row");
}

static const char *redis_target(const struct backend *iface)
{
    return ((const struct backend_redis *)iface)->target;
}

static void redis_free(struct backend *iface)
{
    struct backend_redis *b = (struct backend_redis *)iface;
    b->freeing = 1;
    if (b->ac) {
        redisAsyncContext *ac = b->ac;
        b->ac = NULL;
        redisAsyncFree(ac);
    }
    if (b->reconnect_ev)
        event_free(b->reconnect_ev);
    if (b->ready_timeout_ev)
        event_free(b->ready_timeout_ev);
    redis_url_free(&b->url);
    buf_free(&b->cmd);
    free(b);
}

static const struct backend_ops redis_ops = {
    .name = "redis",
    .decide = redis_decide,
    .note_timeout = redis_note_timeout,
    .start = redis_start,
    .ready = redis_ready,
    .target = redis_target,
    .free = redis_free,
};

struct backend *backend_redis_new(struct event_base *base, const char *url, const struct logger *lg,
                                  struct metrics *m, char *err, size_t errlen)
{
    struct backend_redis *b = xcalloc(1, sizeof *b);
    b->base_iface.ops = &redis_ops;
    b->base = base;
    b->log = lg;
    b->metrics = m;
    b->backoff_us = BACKOFF_MIN_US;
    b->rng = (uint64_t)util_monotonic_us() ^ ((uint64_t)getpid() << 32) ^ 0x9e3779b97f4a7c15ULL;
    scripts_sha1(b->sha);
    b->reconnect_ev = evtimer_new(base, on_reconnect_timer, b);
    b->ready_timeout_ev = evtimer_new(base, on_ready_timeout, b);
    if (!b->reconnect_ev || !b->ready_timeout_ev) {
        snprintf(err, errlen, "cannot create timers");
        redis_free(&b->base_iface);
        return NULL;
    }
    if (redis_url_parse(url, &b->url, err, errlen) < 0) {
        redis_free(&b->base_iface);
        return NULL;
    }
    /* The password from the environment wins over the URL's, so that it
     * need not be written in the policy file. */
    const char *env = getenv(BACKEND_PASSWORD_ENV);
    if (env && *env) {
        free(b->url.password);
        b->url.password = xstrdup(env);
    }
    if (b->url.unix_path)
        snprintf(b->target, sizeof b->target, "unix:%s", b->url.unix_path);
    else
        snprintf(b->target, sizeof b->target, "%s:%d/%d", b->url.host, b->url.port, b->url.db);
    return &b->base_iface;
}
