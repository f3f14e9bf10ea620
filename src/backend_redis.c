/*
 * backend_redis.c: the Redis backend (backend.h) on one pipelined
 * connection. See backend_redis.h. Owns the hiredis context, the URL's credentials, the reconnect
 * timer and every in-flight call's copy of its arguments.
 *
 * Commands are pipelined: hiredis writes each call into one output buffer
 * and replies come back in order, so AUTH, SELECT and SCRIPT LOAD sent right
 * after connect always run before any EVALSHA, and a SCRIPT LOAD sent after a
 * NOSCRIPT always runs before the retried EVALSHA.
 *
 * Resets (the admin API's DELETE) go on the same connection: one DEL of
 * every Redis key of the key's tiers (they share one hash tag, so the DEL is
 * Cluster-safe), then one PUBLISH on "<key_prefix>reset" of
 * "<policy>:<key bytes>" (policy names never hold ':', so the first ':'
 * ends the name, and the key is sent as it is, any bytes). Every backend
 * listens on a second connection of its own, subscribed to that channel,
 * reconnecting with the same backoff, and reports each announcement to
 * on_reset; after each (re)subscription it reports a NULL policy, since
 * announcements made while it was down were lost.
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

    /* The reset listener: a second connection, subscribed to channel. */
    redisAsyncContext *sub_ac;
    char *channel; /* owned; NULL until watch_resets */
    int sub_dropping;
    int started; /* ops->start was called: the listener may connect */
    struct event *sub_reconnect_ev;
    int64_t sub_backoff_us;
};

/* One reset in flight: its DEL and its PUBLISH, pipelined. */
struct pending_reset {
    backend_reset_done_fn done;
    void *arg;
    int outstanding; /* replies still due */
    struct backend_reset_reply reply;
    char err[RL_ERRLEN];
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

/* AUTH [user] password, queued on ac when the URL (or the environment)
 * gives a password: the user only when the URL names one. */
static void send_auth(redisAsyncContext *ac, const struct redis_url *u, redisCallbackFn *fn)
{
    if (!u->password)
        return;
    const char *argv[] = {"AUTH", u->user ? u->user : u->password, u->password};
    size_t lens[] = {4, strlen(argv[1]), strlen(u->password)};
    redisAsyncCommandArgv(ac, fn, "AUTH", u->user ? 3 : 2, argv, lens);
}

/* A new context to the URL's server, or NULL (logged). */
static redisAsyncContext *connect_url(struct backend_redis *b)
{
    redisAsyncContext *ac = b->url.unix_path ? redisAsyncConnectUnix(b->url.unix_path)
                                             : redisAsyncConnect(b->url.host, b->url.port);
    if (!ac || ac->err) {
        log_event(b->log, LOG_LVL_WARN, "redis connect failed", "target", b->target, "error",
                  ac ? ac->errstr : "out of memory", NULL);
        if (ac)
            redisAsyncFree(ac);
        return NULL;
    }
    ac->data = b;
    redisLibeventAttach(ac, b->base);
    return ac;
}

static void start_connect(struct backend_redis *b)
{
    redisAsyncContext *ac = connect_url(b);
    if (!ac) {
        schedule_reconnect(b);
        return;
    }
    b->ac = ac;
    b->state = CONN_CONNECTING;
    b->setup_failed = 0;
    b->use_eval = 0; /* a new connection may be to another server */
    redisAsyncSetConnectCallback(ac, on_connect);
    redisAsyncSetDisconnectCallback(ac, on_disconnect);
    struct timeval tv = {.tv_sec = READY_TIMEOUT_US / 1000000,
                         .tv_usec = READY_TIMEOUT_US % 1000000};
    evtimer_add(b->ready_timeout_ev, &tv);

    /* Queued now, sent as soon as the socket connects, ahead of any check. */
    const struct redis_url *u = &b->url;
    send_auth(ac, u, on_setup_reply);
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

/* ---- resets ---- */

static void reset_reply_done(struct pending_reset *r)
{
    if (--r->outstanding > 0)
        return;
    r->done(r->arg, &r->reply);
    free(r);
}

/* A reply that failed: the first failure is the one reported. */
static void reset_failed(struct pending_reset *r, enum backend_status st, const char *msg)
{
    if (r->reply.status != BACKEND_OK)
        return;
    r->reply.status = st;
    snprintf(r->err, sizeof r->err, "%s", msg);
    r->reply.errmsg = r->err;
}

static void on_reset_reply(redisAsyncContext *ac, void *reply, void *privdata, long long *into)
{
    redisReply *rr = reply;
    struct pending_reset *r = privdata;
    if (!rr)
        reset_failed(r, BACKEND_UNAVAILABLE, "connection to redis lost");
    else if (rr->type == REDIS_REPLY_ERROR)
        reset_failed(r, BACKEND_ERROR, rr->str);
    else if (rr->type == REDIS_REPLY_INTEGER)
        *into = rr->integer;
    else
        reset_failed(r, BACKEND_ERROR, "unexpected reply to a reset");
    reset_reply_done(r);
}

static void on_del_reply(redisAsyncContext *ac, void *reply, void *privdata)
{
    struct pending_reset *r = privdata;
    on_reset_reply(ac, reply, privdata, &r->reply.deleted);
}

static void on_publish_reply(redisAsyncContext *ac, void *reply, void *privdata)
{
    struct pending_reset *r = privdata;
    on_reset_reply(ac, reply, privdata, &r->reply.notified);
}

/* "DEL" and every Redis key of every tier of (p, key), as argv into mem
 * (sized by the caller: POLICY_KEY_BUF per key). Returns argc. */
static size_t del_argv(const struct config *cfg, const struct policy *p, const char *key,
                       size_t keylen, const char **argv, size_t *lens, char *mem)
{
    size_t argc = 0;
    argv[argc] = "DEL";
    lens[argc++] = 3;
    for (size_t j = 0; j < p->ntiers; j++) {
        for (int k = 0; k < policy_algorithm_nkeys(p->tiers[j].algorithm); k++) {
            int n = policy_tier_key(cfg->key_prefix, p->name, key, keylen, &p->tiers[j], k, mem,
                                    POLICY_KEY_BUF);
            if (n < 0)
                abort(); /* POLICY_KEY_BUF bounds every valid key (as in scripts.c) */
            argv[argc] = mem;
            lens[argc++] = (size_t)n;
            mem += POLICY_KEY_BUF;
        }
    }
    return argc;
}

static int redis_reset(struct backend *iface, const struct config *cfg, const struct policy *p,
                       const char *key, size_t keylen, backend_reset_done_fn done, void *arg)
{
    struct backend_redis *b = (struct backend_redis *)iface;
    if (!redis_ready(iface) || !b->channel)
        return -1;
    /* At most two keys per tier. */
    size_t maxkeys = 2 * p->ntiers + 1;
    const char **argv = xcalloc(maxkeys, sizeof *argv);
    size_t *lens = xcalloc(maxkeys, sizeof *lens);
    char *mem = xmalloc(maxkeys * POLICY_KEY_BUF);
    size_t argc = del_argv(cfg, p, key, keylen, argv, lens, mem);
    size_t plen = strlen(p->name);
    char *msg = xmalloc(plen + 1 + keylen);
    memcpy(msg, p->name, plen);
    msg[plen] = ':';
    memcpy(msg + plen + 1, key, keylen);
    const char *pub[] = {"PUBLISH", b->channel, msg};
    size_t publens[] = {7, strlen(b->channel), plen + 1 + keylen};

    struct pending_reset *r = xcalloc(1, sizeof *r);
    r->done = done;
    r->arg = arg;
    r->reply.status = BACKEND_OK;
    int rc = -1;
    /* Queued together: the PUBLISH runs right after the DEL, so no daemon
     * hears of the reset before the state is gone. */
    if (redisAsyncCommandArgv(b->ac, on_del_reply, r, (int)argc, argv, lens) == REDIS_OK) {
        rc = 0;
        r->outstanding = 1;
        if (redisAsyncCommandArgv(b->ac, on_publish_reply, r, 3, pub, publens) == REDIS_OK)
            r->outstanding++;
        else
            reset_failed(r, BACKEND_UNAVAILABLE, "cannot send PUBLISH");
    } else {
        free(r);
    }
    free(argv);
    free(lens);
    free(mem);
    free(msg);
    return rc;
}

/* ---- the reset listener ---- */

static void sub_connect(struct backend_redis *b);

static void sub_schedule_reconnect(struct backend_redis *b)
{
    b->sub_ac = NULL;
    if (b->freeing)
        return;
    int64_t d =
        b->sub_backoff_us / 2 + (int64_t)(next_random(b) % (uint64_t)(b->sub_backoff_us / 2 + 1));
    struct timeval tv = {.tv_sec = d / 1000000, .tv_usec = d % 1000000};
    evtimer_add(b->sub_reconnect_ev, &tv);
    b->sub_backoff_us =
        b->sub_backoff_us * 2 > BACKOFF_MAX_US ? BACKOFF_MAX_US : b->sub_backoff_us * 2;
}

static void on_sub_reconnect_timer(evutil_socket_t fd, short what, void *arg)
{
    sub_connect(arg);
}

static void on_sub_connect(const redisAsyncContext *ac, int status)
{
    struct backend_redis *b = ac->data;
    if (status != REDIS_OK) {
        log_event(b->log, LOG_LVL_WARN, "redis reset listener connect failed", "target", b->target,
                  "error", ac->errstr, NULL);
        sub_schedule_reconnect(b); /* hiredis frees the context */
    }
}

static void on_sub_disconnect(const redisAsyncContext *ac, int status)
{
    struct backend_redis *b = ac->data;
    if (b->sub_dropping)
        return;
    if (!b->freeing)
        log_event(b->log, LOG_LVL_WARN, "redis reset listener lost", "target", b->target, "error",
                  status == REDIS_OK ? "closed" : ac->errstr, NULL);
    sub_schedule_reconnect(b);
}

static void on_sub_setup_reply(redisAsyncContext *ac, void *reply, void *privdata)
{
    redisReply *r = reply;
    struct backend_redis *b = ac->data;
    if (r && r->type == REDIS_REPLY_ERROR)
        log_event(b->log, LOG_LVL_ERROR, "redis reset listener setup failed", "target", b->target,
                  "error", r->str, NULL);
}

/* "<policy>:<key>" as published by redis_reset; anything else (another
 * program on the channel) is ignored. */
static void sub_message(struct backend_redis *b, const char *msg, size_t len)
{
    const char *colon = memchr(msg, ':', len);
    if (!colon || colon == msg || (size_t)(colon - msg) > POLICY_NAME_MAX)
        return;
    char policy[POLICY_NAME_MAX + 1];
    memcpy(policy, msg, (size_t)(colon - msg));
    policy[colon - msg] = '\0';
    if (!policy_name_valid(policy) || !b->base_iface.on_reset)
        return;
    size_t keylen = len - (size_t)(colon - msg) - 1;
    b->base_iface.on_reset(b->base_iface.on_reset_arg, policy, colon + 1, keylen);
}

/* Every reply on the subscribed connection: the confirmation, then each
 * message; NULL when the connection goes. */
static void on_sub_reply(redisAsyncContext *ac, void *reply, void *privdata)
{
    redisReply *r = reply;
    struct backend_redis *b = ac->data;
    if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 3 ||
        r->element[0]->type != REDIS_REPLY_STRING)
        return;
    const char *kind = r->element[0]->str;
    if (strcmp(kind, "subscribe") == 0) {
        b->sub_backoff_us = BACKOFF_MIN_US;
        log_event(b->log, LOG_LVL_INFO, "redis reset listener subscribed", "channel", b->channel,
                  NULL);
        /* Resets announced while no subscription stood were not heard. */
        if (b->base_iface.on_reset)
            b->base_iface.on_reset(b->base_iface.on_reset_arg, NULL, NULL, 0);
    } else if (strcmp(kind, "message") == 0 && r->element[2]->type == REDIS_REPLY_STRING) {
        sub_message(b, r->element[2]->str, r->element[2]->len);
    }
}

static void sub_connect(struct backend_redis *b)
{
    if (!b->channel || b->sub_ac)
        return;
    redisAsyncContext *ac = connect_url(b);
    if (!ac) {
        sub_schedule_reconnect(b);
        return;
    }
    b->sub_ac = ac;
    redisAsyncSetConnectCallback(ac, on_sub_connect);
    redisAsyncSetDisconnectCallback(ac, on_sub_disconnect);
    send_auth(ac, &b->url, on_sub_setup_reply);
    const char *argv[] = {"SUBSCRIBE", b->channel};
    size_t lens[] = {9, strlen(b->channel)};
    redisAsyncCommandArgv(ac, on_sub_reply, NULL, 2, argv, lens);
}

/* Closes the listener's connection, if any, without a reconnect. */
static void sub_drop(struct backend_redis *b)
{
    event_del(b->sub_reconnect_ev);
    if (!b->sub_ac)
        return;
    redisAsyncContext *ac = b->sub_ac;
    b->sub_ac = NULL;
    b->sub_dropping = 1;
    redisAsyncFree(ac);
    b->sub_dropping = 0;
}

static void redis_watch_resets(struct backend *iface, const struct config *cfg)
{
    struct backend_redis *b = (struct backend_redis *)iface;
    size_t plen = strlen(cfg->key_prefix);
    char *channel = xmalloc(plen + sizeof "reset");
    memcpy(channel, cfg->key_prefix, plen);
    memcpy(channel + plen, "reset", sizeof "reset");
    if (b->channel && strcmp(b->channel, channel) == 0) {
        free(channel);
        return;
    }
    sub_drop(b);
    free(b->channel);
    b->channel = channel;
    if (b->started)
        sub_connect(b);
}

static void redis_start(struct backend *iface)
{
    struct backend_redis *b = (struct backend_redis *)iface;
    b->started = 1;
    start_connect(b);
    sub_connect(b);
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
    if (b->sub_ac) {
        redisAsyncContext *ac = b->sub_ac;
        b->sub_ac = NULL;
        redisAsyncFree(ac);
    }
    if (b->sub_reconnect_ev)
        event_free(b->sub_reconnect_ev);
    free(b->channel);
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
    .reset = redis_reset,
    .watch_resets = redis_watch_resets,
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
    b->sub_reconnect_ev = evtimer_new(base, on_sub_reconnect_timer, b);
    b->sub_backoff_us = BACKOFF_MIN_US;
    if (!b->reconnect_ev || !b->ready_timeout_ev || !b->sub_reconnect_ev) {
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
