/* SPDX-License-Identifier: Apache-2.0 */
/*
 * redis_node.c: one Redis server the decision code runs on (see
 * redis_node.h). Owns its redis_conn, the ready timer, the RESP buffer the
 * calls are formatted into, and each call's retry state (struct node_call,
 * back on a spare list once the call's callback has run, freed with the
 * node); borrows the calls' arguments.
 *
 * Commands are pipelined on one connection and replies come in order, so
 * the ROLE check and the code load queued by the up callback always run
 * before any call, and a load sent after a NOSCRIPT always runs before the
 * retried call.
 *
 * Batches (redis.batch > 1): redis_node_call_batched queues the call, and
 * an event made active once per loop turn (after the callbacks already
 * active: the reads that made the calls) sends the queue, up to
 * redis.batch calls of one group (Cluster slot) per FCALL, in the framing
 * of lua/check.lua's decide_batch. A batch is one node_call whose members
 * (the queued node_calls, linked by next) each get their own element of
 * the reply; an error reply to the whole call (NOSCRIPT retried first:
 * the call ran nothing) or the connection's loss reaches every member.
 *
 * The module (redis.module): the up callback also calls `ratelimitd.check
 * 0`, pipelined between ROLE and the load: "ERR unknown command" (or NOPERM: the ACL
 * does not allow it) says the node has no usable module, any other answer
 * (the module's own error for an empty request) that it has. The same
 * command is the probe so that it works under exactly the ACL that its use
 * needs. Where it is usable, a call (or a batch of them) goes as
 * `ratelimitd.check` with the FCALL's arguments (the module takes every
 * call the Functions take). Under redis.module: on a node without
 * it is never ready: the connection is dropped (and reconnects, asking
 * again), and redis_node_unusable says why. A module unloaded while
 * connected shows as "ERR unknown command" to a call: the node then takes
 * the Functions (auto; the call is sent again, as after a NOSCRIPT) or
 * drops the connection (on).
 */
#include <event2/event.h>
#include <event2/event_struct.h>
#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "backend/redis/call_resp.h"
#include "backend/redis/redis_node.h"
#include "config/config.h"
#include "core/metrics.h"
#include "lib/buf.h"
#include "lib/timer.h"
#include "lib/util.h"

/* From connect to the code loaded: a Redis that accepts the connection but
 * never answers (paused, overloaded) is dropped after this. */
#define READY_TIMEOUT_US 1000000
/* Calls in a row that reached their deadline with no reply in time in
 * between: the connection is then taken as hung, and dropped. */
#define STALL_TIMEOUTS 3
/* Reloads of the code (and retries) one call may need: a flush can land
 * between a reload and the retry that follows it. */
#define CODE_RELOAD_RETRIES 3
/* The module's command (src/module/module.c). */
#define MODULE_COMMAND "ratelimitd.check"

struct redis_node {
    struct event_base *base;
    const struct logger *log;
    struct metrics *metrics;
    struct redis_conn *conn;
    int require_master;
    redis_node_state_fn on_state;
    void *on_state_arg;
    char sha[41];

    int was_up;         /* this connection came up (its loss is a reconnect) */
    int role_ok;        /* ROLE said master (or no check required) */
    int loaded;         /* the code is loaded on this connection */
    int use_eval;       /* the server has no Functions (Redis 6, KeyDB): EVALSHA */
    int load_in_flight; /* a load is queued: retries can follow it */
    int reported;       /* what on_state was last told */
    int reported_path;  /* what the metrics were last told: -1 none, 0 Functions, 1 module */
    enum redis_module_mode module_mode;
    int module_known;   /* the probe answered on this connection */
    int has_module;     /* ratelimitd.check is here, and may be called */
    char unusable[200]; /* redis.module: on, and the last probe found no module; or "" */
    int freeing;
    int stalled_timeouts; /* deadlines passed since the last reply in time */
    int64_t timeout_us;   /* the calls' deadline; 0: every reply is in time */
    struct event ready_timer;
    struct buf cmd; /* the RESP of the call being sent, reused */
    /* Batches: the calls queued this loop turn, in order, sent by flush_ev;
     * sorted (by group, then order) through order[] when groups differ. */
    int64_t batch_max; /* redis.batch; 1: no queue, every call sent at once */
    struct event flush_ev;
    struct node_call *queue_head, *queue_tail;
    size_t nqueued;
    struct node_call **order;
    size_t order_cap;
    /* Finished calls kept for reuse: no allocation per call once warm. */
    struct node_call *spare;
    size_t nspare;
};

/* One call in flight, kept for a NOSCRIPT retry. */
struct node_call {
    struct redis_node *n;
    const struct script_call *call; /* borrowed: valid until fn is called */
    redis_reply_fn fn;
    void *arg;
    int asking;
    int retries;
    int64_t sent_us; /* monotonic, for the round-trip histogram */
    struct node_call *next_spare;
    /* Batches: a queued call's group and place in the queue, and its link
     * (the queue, then its batch's members); a batch has call NULL and its
     * members in members (nmembers of them). */
    unsigned group;
    size_t seq;
    struct node_call *next;
    struct node_call *members;
    size_t nmembers;
};

/* Spares kept at most: the calls in flight at a busy moment. */
#define MAX_SPARE_CALLS 256

/* The path is known: off, or the probe answered (under on, a node
 * without the module is dropped at the answer: module_absent). */
static int module_settled(const struct redis_node *n)
{
    return n->module_mode == REDIS_MODULE_OFF || n->module_known;
}

static int node_is_ready(const struct redis_node *n)
{
    return redis_conn_is_up(n->conn) && n->role_ok && n->loaded && module_settled(n);
}

/* Tells the owner and the metrics when readiness (or, for the metrics,
 * the path that decides) changed. */
static void update_state(struct redis_node *n)
{
    int ready = node_is_ready(n);
    int path = ready ? n->has_module : -1;
    if (n->freeing || (ready == n->reported && path == n->reported_path))
        return;
    n->reported_path = path;
    metrics_node_path(n->metrics, redis_conn_target(n->conn), path);
    if (ready == n->reported)
        return;
    n->reported = ready;
    metrics_node_up(n->metrics, redis_conn_target(n->conn), ready);
    if (n->on_state)
        n->on_state(n->on_state_arg, n, ready);
}

/* ---- the code ---- */

static void send_load(struct redis_node *n);

static void log_node(const struct redis_node *n, enum log_level lvl, const char *msg, const char *k,
                     const char *v)
{
    log_event(n->log, lvl, msg, "target", redis_conn_target(n->conn), k, v, NULL);
}

static void loaded(struct redis_node *n, const char *how)
{
    /* The module's probe was sent before the load: its answer is known. */
    if (!n->loaded)
        log_event(n->log, LOG_LVL_INFO, "redis code loaded", "target", redis_conn_target(n->conn),
                  "as", how, "sha1", n->sha, "decides_by", n->has_module ? "module" : how, NULL);
    n->loaded = 1;
    n->stalled_timeouts = 0;
    event_del(&n->ready_timer);
    redis_conn_healthy(n->conn);
    update_state(n);
}

static void on_load_reply(void *arg, redisReply *r)
{
    struct redis_node *n = arg;
    if (!r)
        return; /* connection gone; the next connect loads again */
    n->load_in_flight = 0;
    if (!n->use_eval && r->type == REDIS_REPLY_STRING &&
        strcmp(r->str, scripts_function_name()) == 0) {
        loaded(n, "function");
        return;
    }
    if (n->use_eval && r->type == REDIS_REPLY_STRING && strcmp(r->str, n->sha) == 0) {
        loaded(n, "script");
        return;
    }
    /* No FUNCTION command here (before Redis 7, KeyDB, or renamed away):
     * the same code by EVALSHA, decided once per connection. */
    if (!n->use_eval && r->type == REDIS_REPLY_ERROR &&
        (strncasecmp(r->str, "ERR unknown command", 19) == 0 ||
         strncasecmp(r->str, "ERR unknown subcommand", 22) == 0)) {
        n->use_eval = 1;
        log_node(n, LOG_LVL_INFO, "redis has no Functions, using EVALSHA", NULL, NULL);
        send_load(n);
        return;
    }
    metrics_count(n->metrics, METRICS_REDIS_ERRORS);
    metrics_node_count(n->metrics, redis_conn_target(n->conn), METRICS_NODE_ERRORS);
    log_node(n, LOG_LVL_ERROR, "redis code load failed", "error",
             r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
}

/* FUNCTION LOAD REPLACE (Redis 7+) or SCRIPT LOAD. REPLACE because a
 * library of this name holds exactly this code (the name is its hash). */
static void send_load(struct redis_node *n)
{
    if (n->load_in_flight)
        return;
    const char *fn_argv[] = {"FUNCTION", "LOAD", "REPLACE", scripts_library_code()};
    size_t fn_lens[] = {8, 4, 7, strlen(scripts_library_code())};
    const char *sc_argv[] = {"SCRIPT", "LOAD", scripts_lua_source};
    size_t sc_lens[] = {6, 4, strlen(scripts_lua_source)};
    int rc = n->use_eval ? redis_conn_command(n->conn, on_load_reply, n, 3, sc_argv, sc_lens)
                         : redis_conn_command(n->conn, on_load_reply, n, 4, fn_argv, fn_lens);
    if (rc == 0)
        n->load_in_flight = 1;
}

/* ROLE's reply: its first element names the role. A replica (or a
 * sentinel) must never run the code: its writes would fail, or be lost. */
static void on_role_reply(void *arg, redisReply *r)
{
    struct redis_node *n = arg;
    if (!r)
        return;
    if (r->type == REDIS_REPLY_ARRAY && r->elements > 0 &&
        r->element[0]->type == REDIS_REPLY_STRING && strcmp(r->element[0]->str, "master") == 0) {
        n->role_ok = 1;
        update_state(n);
        return;
    }
    const char *role =
        r->type == REDIS_REPLY_ARRAY && r->elements > 0 && r->element[0]->type == REDIS_REPLY_STRING
            ? r->element[0]->str
        : r->type == REDIS_REPLY_ERROR ? r->str
                                       : "unexpected reply";
    log_node(n, LOG_LVL_WARN, "redis node is not a master", "role", role);
    redis_conn_drop(n->conn, "not a master");
}

/* ---- the module ---- */

/* The probe found no usable module (why: absent, or the ACL's refusal). */
static void module_absent(struct redis_node *n, const char *why)
{
    n->module_known = 1;
    n->has_module = 0;
    if (n->module_mode == REDIS_MODULE_ON) {
        snprintf(n->unusable, sizeof n->unusable, "%s: %s (redis.module: on)",
                 redis_conn_target(n->conn), why);
        log_node(n, LOG_LVL_WARN, "redis node unusable under redis.module: on", "reason", why);
        redis_conn_drop(n->conn, "no usable ratelimitd.check (redis.module: on)");
        return;
    }
    log_node(n, LOG_LVL_INFO, "redis node decides by the Functions", "reason", why);
    update_state(n);
}

static void on_module_reply(void *arg, redisReply *r)
{
    struct redis_node *n = arg;
    if (!r)
        return;
    if (r->type == REDIS_REPLY_ERROR && strncmp(r->str, "ERR ratelimitd", 14) != 0) {
        if (strncasecmp(r->str, "ERR unknown command", 19) == 0) {
            module_absent(n, "no ratelimitd.check: ratelimitd.so is not loaded");
            return;
        }
        if (strncmp(r->str, "NOPERM", 6) == 0) {
            module_absent(n, "the ACL does not allow ratelimitd.check");
            return;
        }
        /* LOADING, BUSY...: the ready timer drops the connection, and the
         * next one asks again. */
        metrics_node_count(n->metrics, redis_conn_target(n->conn), METRICS_NODE_ERRORS);
        log_node(n, LOG_LVL_ERROR, "redis module probe failed", "error", r->str);
        return;
    }
    n->module_known = 1;
    n->has_module = 1;
    n->unusable[0] = '\0';
    update_state(n);
}

/* Asks whether ratelimitd.check is here (see the top of the file). */
static int send_module_probe(struct redis_node *n)
{
    const char *argv[] = {MODULE_COMMAND, "0"};
    size_t lens[] = {strlen(MODULE_COMMAND), 1};
    return redis_conn_command(n->conn, on_module_reply, n, 2, argv, lens);
}

/* A call's reply says the module went (MODULE UNLOAD while connected):
 * the call was sent to it, and nothing ran. */
static int module_gone(const char *err)
{
    return strncasecmp(err, "ERR unknown command", 19) == 0 && strstr(err, MODULE_COMMAND) != NULL;
}

/* ---- connection events ---- */

static void on_up(void *arg, struct redis_conn *c)
{
    struct redis_node *n = arg;
    n->was_up = 1;
    n->loaded = 0;
    n->use_eval = 0; /* a new connection may be to another server */
    n->load_in_flight = 0;
    n->stalled_timeouts = 0;
    n->role_ok = !n->require_master;
    n->module_known = 0;
    n->has_module = 0;
    timer_arm_us(&n->ready_timer, READY_TIMEOUT_US);
    /* ROLE not queued (out of memory, or the connection gone, when the
     * drop does nothing): a connection that cannot say it is a master's
     * goes now rather than at the ready timer, and reconnects. */
    if (n->require_master &&
        redis_conn_command(c, on_role_reply, n, 1, (const char *[]){"ROLE"}, (size_t[]){4}) < 0) {
        redis_conn_drop(c, "cannot queue ROLE");
        return;
    }
    /* Before the load, so that its answer is known when the load's is. */
    if (n->module_mode != REDIS_MODULE_OFF && send_module_probe(n) < 0) {
        redis_conn_drop(c, "cannot queue the module probe");
        return;
    }
    send_load(n);
}

static void on_down(void *arg, struct redis_conn *c, const char *why)
{
    struct redis_node *n = arg;
    event_del(&n->ready_timer);
    n->loaded = 0;
    n->role_ok = 0;
    n->load_in_flight = 0;
    if (n->was_up) {
        n->was_up = 0;
        metrics_count(n->metrics, METRICS_REDIS_RECONNECTS);
        metrics_node_count(n->metrics, redis_conn_target(c), METRICS_NODE_RECONNECTS);
    }
    update_state(n);
}

static void on_ready_timeout(evutil_socket_t fd, short what, void *arg)
{
    struct redis_node *n = arg;
    if (!node_is_ready(n))
        redis_conn_drop(n->conn, "no answer to connect and code load in time");
}

/* ---- calls ---- */

/* The command and name n's calls go by: ratelimitd.check where the module
 * is, else FCALL and the function's name (EVALSHA and the SHA1 on a server
 * without Functions). */
static void command_of(const struct redis_node *n, const char **cmd, const char **name)
{
    *cmd = n->has_module ? MODULE_COMMAND : n->use_eval ? "EVALSHA" : "FCALL";
    *name = n->has_module ? NULL : n->use_eval ? n->sha : scripts_function_name();
}

/* A batch as RESP, into out (emptied first): the head, the number of
 * keys, every member's KEYS, then ARGV: SCRIPTS_BATCH, the count, each
 * member's number of keys and of arguments, then every member's arguments
 * (scripts.h). */
static void resp_format_batch(const struct redis_node *n, const struct node_call *b,
                              struct buf *out)
{
    char num[UTIL_INT_CHARS];
    size_t nargs = 0, nkeys = 0;
    for (const struct node_call *m = b->members; m; m = m->next) {
        nargs += m->call->nargs;
        nkeys += m->call->nkeys;
    }
    const char *cmd, *name;
    command_of(n, &cmd, &name);
    call_resp_head(out, cmd, name, 1 + 2 + 2 * b->nmembers + nargs);
    call_resp_bulk(out, num, util_format_int(num, (long long)nkeys));
    for (const struct node_call *m = b->members; m; m = m->next)
        for (size_t i = 0; i < m->call->nkeys; i++)
            call_resp_bulk(out, m->call->args[i], m->call->lens[i]);
    call_resp_bulk(out, SCRIPTS_BATCH, strlen(SCRIPTS_BATCH));
    call_resp_bulk(out, num, util_format_int(num, (long long)b->nmembers));
    for (const struct node_call *m = b->members; m; m = m->next) {
        call_resp_bulk(out, num, util_format_int(num, (long long)m->call->nkeys));
        call_resp_bulk(out, num,
                       util_format_int(num, (long long)(m->call->nargs - m->call->nkeys)));
    }
    for (const struct node_call *m = b->members; m; m = m->next)
        for (size_t i = m->call->nkeys; i < m->call->nargs; i++)
            call_resp_bulk(out, m->call->args[i], m->call->lens[i]);
}

static void ignore_reply(void *arg, redisReply *r)
{
}

static void on_call_reply(void *arg, redisReply *r);

static struct node_call *call_new(struct redis_node *n)
{
    struct node_call *nc = n->spare;
    if (!nc)
        return xcalloc(1, sizeof *nc);
    n->spare = nc->next_spare;
    n->nspare--;
    return nc;
}

/* During redis_node_free the calls complete after the spares went: freed. */
static void call_done(struct redis_node *n, struct node_call *nc)
{
    if (n->freeing || n->nspare >= MAX_SPARE_CALLS) {
        free(nc);
        return;
    }
    nc->next_spare = n->spare;
    n->spare = nc;
    n->nspare++;
}

static int send_call(struct node_call *nc)
{
    static const char asking[] = "*1\r\n$6\r\nASKING\r\n";
    struct redis_node *n = nc->n;
    /* ASKING's reply is OK (or an error the call's own reply repeats):
     * nothing to do with it. */
    if (nc->asking && redis_conn_send(n->conn, asking, sizeof asking - 1, ignore_reply, NULL) < 0)
        return -1;
    nc->sent_us = util_monotonic_us();
    const char *cmd, *name;
    command_of(n, &cmd, &name);
    if (nc->call)
        call_resp_call(&n->cmd, cmd, name, nc->call);
    else
        resp_format_batch(n, nc, &n->cmd);
    return redis_conn_send(n->conn, n->cmd.data, n->cmd.len, on_call_reply, nc);
}

/* The error of a call whose code Redis no longer holds (SCRIPT FLUSH,
 * FUNCTION FLUSH, a restarted Redis): reload and retry. */
static int code_missing(const char *err)
{
    return strncmp(err, "NOSCRIPT", 8) == 0 || strncmp(err, "ERR Function not found", 22) == 0;
}

/* Redirections are the cluster owner's to count (moved, ask), not errors
 * of the node. */
static int is_redirect(const char *err)
{
    return strncmp(err, "MOVED ", 6) == 0 || strncmp(err, "ASK ", 4) == 0;
}

static void count_error(struct redis_node *n, const redisReply *r)
{
    if (r && r->type == REDIS_REPLY_ERROR && !is_redirect(r->str)) {
        metrics_count(n->metrics, METRICS_REDIS_ERRORS);
        metrics_node_count(n->metrics, redis_conn_target(n->conn), METRICS_NODE_ERRORS);
    }
}

/* r (NULL: the connection went) to nc's caller, or to each member of a
 * batch: its own element of the reply, or r itself when r is not the
 * batch's array (an error to the whole call); then nc is done. */
static void deliver(struct redis_node *n, struct node_call *nc, redisReply *r)
{
    if (nc->call) {
        nc->fn(nc->arg, r);
        call_done(n, nc);
        return;
    }
    static char wrong_shape[] = "ERR batch reply of the wrong shape";
    redisReply wrong = {
        .type = REDIS_REPLY_ERROR, .str = wrong_shape, .len = sizeof wrong_shape - 1};
    int split = r && r->type == REDIS_REPLY_ARRAY && r->elements == nc->nmembers;
    if (r && r->type != REDIS_REPLY_ERROR && !split) {
        count_error(n, &wrong);
        r = &wrong;
    }
    struct node_call *m = nc->members;
    call_done(n, nc);
    for (size_t i = 0; m; i++) {
        struct node_call *next = m->next;
        redisReply *mr = split ? r->element[i] : r;
        if (split)
            count_error(n, mr);
        m->fn(m->arg, mr);
        call_done(n, m);
        m = next;
    }
}

static void on_call_reply(void *arg, redisReply *r)
{
    struct node_call *nc = arg;
    struct redis_node *n = nc->n;
    if (r) {
        int64_t now = util_monotonic_us();
        /* Only a reply in time shows the connection healthy: a Redis that
         * answers every call after its deadline keeps the count growing,
         * and the node is dropped as one that does not answer. */
        if (!n->timeout_us || now - nc->sent_us <= n->timeout_us)
            n->stalled_timeouts = 0;
        metrics_redis_latency(n->metrics, redis_conn_target(n->conn), now - nc->sent_us);
    }
    if (r && r->type == REDIS_REPLY_ERROR && module_gone(r->str)) {
        /* The first of the calls in flight to see it says so. */
        if (n->has_module)
            module_absent(n, "ratelimitd.check went (MODULE UNLOAD)");
        /* Under auto, the same call again, through the Functions (under
         * on, module_absent dropped the connection). */
        if (n->module_mode == REDIS_MODULE_AUTO) {
            if (send_call(nc) == 0)
                return;
            deliver(n, nc, NULL);
            return;
        }
    }
    if (r && r->type == REDIS_REPLY_ERROR) {
        /* After SCRIPT FLUSH or a restart of Redis, reload and retry: the
         * caller never sees NOSCRIPT. */
        if (code_missing(r->str) && nc->retries < CODE_RELOAD_RETRIES) {
            nc->retries++;
            metrics_count(n->metrics, METRICS_REDIS_NOSCRIPT_RELOADS);
            log_node(n, LOG_LVL_INFO, "redis script missing, reloading", NULL, NULL);
            send_load(n);
            if (send_call(nc) == 0)
                return;
            deliver(n, nc, NULL);
            return;
        }
        /* A batch's members count theirs: one each, as if sent alone. */
        if (nc->call)
            count_error(n, r);
        else
            for (size_t i = 0; i < nc->nmembers; i++)
                count_error(n, r);
    }
    deliver(n, nc, r);
}

int redis_node_ints_of(const redisReply *r, struct redis_node_ints *ri)
{
    ri->n = r->elements;
    ri->v = ri->n <= sizeof ri->buf / sizeof ri->buf[0] ? ri->buf : xcalloc(ri->n, sizeof *ri->v);
    for (size_t i = 0; i < r->elements; i++) {
        if (r->element[i]->type != REDIS_REPLY_INTEGER)
            return -1;
        ri->v[i] = r->element[i]->integer;
    }
    return 0;
}

void redis_node_ints_free(struct redis_node_ints *ri)
{
    if (ri->v != ri->buf)
        free(ri->v);
    ri->v = NULL;
}

int redis_node_call(struct redis_node *n, const struct script_call *call, int asking,
                    redis_reply_fn fn, void *arg)
{
    if (!node_is_ready(n))
        return -1;
    struct node_call *nc = call_new(n);
    *nc = (struct node_call){.n = n, .call = call, .fn = fn, .arg = arg, .asking = asking};
    if (send_call(nc) < 0) {
        call_done(n, nc);
        return -1;
    }
    metrics_node_count(n->metrics, redis_conn_target(n->conn), METRICS_NODE_CALLS);
    metrics_redis_batch(n->metrics, 1);
    return 0;
}

/* Sends the first k of calls (one group, in order): alone when k is 1, else
 * as one batch. Completes them with NULL if they cannot be sent. */
static void send_chunk(struct redis_node *n, struct node_call **calls, size_t k)
{
    struct node_call *nc = calls[0];
    if (k > 1) {
        nc = call_new(n);
        *nc = (struct node_call){.n = n, .nmembers = k, .members = calls[0]};
        for (size_t i = 0; i < k; i++)
            calls[i]->next = i + 1 < k ? calls[i + 1] : NULL;
    }
    if (!node_is_ready(n) || send_call(nc) < 0) {
        deliver(n, nc, NULL);
        return;
    }
    metrics_node_count(n->metrics, redis_conn_target(n->conn), METRICS_NODE_CALLS);
    metrics_redis_batch(n->metrics, k);
}

static int by_group(const void *a, const void *b)
{
    const struct node_call *x = *(struct node_call *const *)a, *y = *(struct node_call *const *)b;
    if (x->group != y->group)
        return x->group < y->group ? -1 : 1;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/* The end of a loop turn: sends the queue, each group's calls in order, at
 * most batch_max per call. Calls queued meanwhile (a completion that calls
 * again) wait for the next turn. */
static void on_flush(evutil_socket_t fd, short what, void *arg)
{
    struct redis_node *n = arg;
    size_t k = n->nqueued;
    if (k > n->order_cap) {
        n->order_cap = k;
        free(n->order);
        n->order = xcalloc(k, sizeof *n->order);
    }
    struct node_call **order = n->order;
    int mixed = 0;
    size_t i = 0;
    for (struct node_call *nc = n->queue_head; nc; nc = nc->next) {
        order[i++] = nc;
        mixed |= nc->group != order[0]->group;
    }
    n->queue_head = n->queue_tail = NULL;
    n->nqueued = 0;
    if (mixed)
        qsort(order, k, sizeof *order, by_group);
    /* A completion below (a call that cannot be sent) may queue again, but
     * never flush: the event runs no earlier than the next turn, so order
     * stays as it is until this loop ends. */
    for (i = 0; i < k;) {
        size_t c = 1;
        while (i + c < k && c < (size_t)n->batch_max && order[i + c]->group == order[i]->group)
            c++;
        send_chunk(n, order + i, c);
        i += c;
    }
}

int redis_node_call_batched(struct redis_node *n, const struct script_call *call, unsigned group,
                            redis_reply_fn fn, void *arg)
{
    if (n->batch_max <= 1 || n->freeing)
        return redis_node_call(n, call, 0, fn, arg);
    if (!node_is_ready(n))
        return -1;
    struct node_call *nc = call_new(n);
    *nc = (struct node_call){
        .n = n, .call = call, .fn = fn, .arg = arg, .group = group, .seq = n->nqueued};
    if (n->queue_tail)
        n->queue_tail->next = nc;
    else
        n->queue_head = nc;
    n->queue_tail = nc;
    if (n->nqueued++ == 0)
        event_active(&n->flush_ev, 0, 0);
    return 0;
}

void redis_node_set_batch(struct redis_node *n, int64_t batch)
{
    n->batch_max = batch;
}

void redis_node_set_module(struct redis_node *n, enum redis_module_mode mode)
{
    n->module_mode = mode;
}

const char *redis_node_unusable(const struct redis_node *n)
{
    return n->unusable[0] ? n->unusable : NULL;
}

int redis_node_by_module(const struct redis_node *n)
{
    return node_is_ready(n) && n->has_module;
}

int redis_node_command(struct redis_node *n, redis_reply_fn fn, void *arg, int argc,
                       const char **argv, const size_t *lens)
{
    return redis_conn_command(n->conn, fn, arg, argc, argv, lens);
}

void redis_node_set_timeout(struct redis_node *n, int64_t timeout_us)
{
    n->timeout_us = timeout_us;
}

void redis_node_note_timeout(struct redis_node *n)
{
    if (redis_conn_is_up(n->conn) && ++n->stalled_timeouts >= STALL_TIMEOUTS)
        redis_conn_drop(n->conn, "no reply in time to several checks in a row");
}

/* ---- life ---- */

struct redis_node *redis_node_new(struct event_base *base, const struct logger *lg,
                                  struct metrics *m, const struct redis_endpoint *ep,
                                  int require_master, redis_node_state_fn fn, void *arg)
{
    struct redis_node *n = xcalloc(1, sizeof *n);
    *n = (struct redis_node){.base = base,
                             .log = lg,
                             .metrics = m,
                             .require_master = require_master,
                             .on_state = fn,
                             .on_state_arg = arg};
    n->batch_max = 1;
    n->reported_path = -1;
    scripts_sha1(n->sha);
    evtimer_assign(&n->ready_timer, base, on_ready_timeout, n);
    event_assign(&n->flush_ev, base, -1, 0, on_flush, n);
    struct redis_conn_events ev = {.up = on_up, .down = on_down, .arg = n};
    n->conn = redis_conn_new(base, lg, "data", ep, &ev);
    metrics_node_up(m, redis_conn_target(n->conn), 0);
    return n;
}

void redis_node_start(struct redis_node *n)
{
    redis_conn_connect(n->conn);
}

int redis_node_ready(const struct redis_node *n)
{
    return node_is_ready(n);
}

void redis_node_set_endpoint(struct redis_node *n, const struct redis_endpoint *ep)
{
    /* Dropped first, so that the loss (and up=0) is reported under the old
     * target's name. */
    redis_conn_drop(n->conn, "the server moved");
    redis_conn_set_endpoint(n->conn, ep);
    metrics_node_up(n->metrics, redis_conn_target(n->conn), 0);
    redis_conn_connect(n->conn);
}

void redis_node_drop(struct redis_node *n, const char *why)
{
    redis_conn_drop(n->conn, why);
}

void redis_node_stop(struct redis_node *n, const char *why)
{
    redis_conn_stop(n->conn, why);
}

const char *redis_node_target(const struct redis_node *n)
{
    return redis_conn_target(n->conn);
}

void redis_node_free(struct redis_node *n)
{
    if (!n)
        return;
    n->freeing = 1;
    /* The calls queued for a batch, then those still waiting, complete
     * with NULL here, n still valid. */
    event_del(&n->flush_ev);
    while (n->queue_head) {
        struct node_call *nc = n->queue_head;
        n->queue_head = nc->next;
        nc->fn(nc->arg, NULL);
        free(nc);
    }
    redis_conn_free(n->conn);
    event_del(&n->ready_timer);
    while (n->spare) {
        struct node_call *nc = n->spare;
        n->spare = nc->next_spare;
        free(nc);
    }
    buf_free(&n->cmd);
    free(n->order);
    free(n);
}
