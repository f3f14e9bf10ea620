/* SPDX-License-Identifier: Apache-2.0 */
/*
 * backend_redis.c: the Redis backend (backend.h) on one server: a
 * redis_node (redis_node.h) that runs the code, and the reset listener
 * (resets.h) subscribed to "<key_prefix>reset". See
 * backend_redis.h. Owns the node, the listener, the TLS context (when the
 * URL is rediss://), the URL's credentials and every in-flight call's copy
 * of its arguments (and the finished calls kept for reuse).
 *
 * Resets (the admin API's DELETE) go on the node's connection, and the
 * listener is its own connection to the same server: both are resets.h's.
 *
 * Sentinel mode: the server is the master the sentinels name. That lookup
 * (redis_sentinel.c) plugs into two functions here: set_master, which
 * points the node (and the listener) at a new address, and master_lost,
 * called when the server says it is no longer a master (READONLY).
 */
#include <event2/event.h>
#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/redis/backend_redis.h"
#include "backend/redis/overrides_store.h"
#include "backend/redis/redis_conn.h"
#include "backend/redis/redis_node.h"
#include "backend/redis/redis_sentinel.h"
#include "backend/redis/redis_tls.h"
#include "backend/redis/resets.h"
#include "backend/redis/scripts.h"
#include "backend/redis/top_store.h"
#include "config/config.h"
#include "config/redis_url.h"
#include "core/metrics.h"

struct backend_redis {
    struct backend base_iface; /* first: a struct backend * points here */
    struct event_base *base;
    const struct logger *log;
    struct metrics *metrics;
    struct redis_url url;  /* scheme, credentials and db of every connection */
    struct redis_tls *tls; /* NULL: plain */
    char target[300];
    struct redis_node *node;
    char *master_host; /* where the node connects; NULL: the URL's unix socket */
    int master_port;
    int freeing;

    /* Sentinel mode: where master_host comes from. The node and the
     * listener connect only once the sentinels have named the master. */
    struct redis_sentinel *sentinel; /* NULL: the URL's server */
    int master_known;
    int moving; /* inside set_master: the node's loss is ours, not news */

    /* The reset listener: a second connection, subscribed to channel. */
    struct resets_listener *sub;
    char *channel; /* owned; NULL until watch_resets */
    int started;   /* ops->start was called: the listener may connect */
    /* Finished calls kept for reuse with their arguments' memory: no
     * allocation per check once warm. */
    struct pending *spare;
    size_t nspare;
};

/* One call in flight; owns its arguments (the node borrows them, and may
 * send them again after a NOSCRIPT). */
struct pending {
    struct backend_redis *b;
    backend_done_fn done;
    backend_lease_done_fn lease_done; /* a lease operation's call instead */
    size_t nleases;
    void *arg;
    struct script_call call;
    struct pending *next_spare;
};

/* Spares kept at most: the calls in flight at a busy moment. */
#define MAX_SPARE_PENDING 256

/* ---- the server ---- */

static void set_target(struct backend_redis *b, const char *host, int port)
{
    if (!host)
        snprintf(b->target, sizeof b->target, "unix:%s", b->url.unix_path);
    else if (strchr(host, ':'))
        snprintf(b->target, sizeof b->target, "[%s]:%d/%d", host, port, b->url.db);
    else
        snprintf(b->target, sizeof b->target, "%s:%d/%d", host, port, b->url.db);
}

/*
 * The master is now at host:port (sentinel mode: the sentinels named it).
 * The node drops its connection and connects there; the listener follows,
 * since PUBLISH runs on the master. Called for each address the sentinels
 * report (on_sentinel_master).
 */
static void sub_start(struct backend_redis *b);

static void set_master(struct backend_redis *b, const char *host, int port)
{
    char *h = xstrdup(host); /* host may be b->master_host itself */
    free(b->master_host);
    b->master_host = h;
    b->master_port = port;
    struct redis_endpoint ep = redis_conn_endpoint(&b->url, h, port, b->tls);
    set_target(b, h, port);
    b->master_known = 1;
    b->moving = 1;
    redis_node_set_endpoint(b->node, &ep);
    b->moving = 0;
    if (!b->sub) {
        sub_start(b); /* the first address: the listener may now connect */
    } else {
        resets_listener_move(b->sub, &ep, "the master moved");
    }
}

/*
 * The server is no longer the master (a READONLY reply: it was demoted by
 * a failover). The node's connection is dropped, so that no call waits on
 * a replica; in sentinel mode this is also where a new lookup starts.
 */
static void master_lost(struct backend_redis *b, const char *why)
{
    log_event(b->log, LOG_LVL_WARN, "redis master lost", "target", b->target, "reason", why, NULL);
    /* Asked first, so that the lookup is logged with this reason rather
     * than the loss the drop reports. */
    if (b->sentinel)
        redis_sentinel_rediscover(b->sentinel, why);
    redis_node_drop(b->node, why);
}

/* The sentinels named the master (the first time, or a new one). */
static void on_sentinel_master(void *arg, const char *host, int port)
{
    set_master(arg, host, port);
}

static int redis_ready(const struct backend *iface)
{
    const struct backend_redis *b = (const struct backend_redis *)iface;
    return redis_node_ready(b->node);
}

static void on_node_state(void *arg, struct redis_node *n, int ready)
{
    struct backend_redis *b = arg;
    if (b->freeing)
        return;
    /* The master went (crashed, or demoted: ROLE, READONLY): perhaps a
     * failover the +switch-master watch has not reported (yet). */
    if (!ready && b->sentinel && b->master_known && !b->moving)
        redis_sentinel_rediscover(b->sentinel, "connection to the master lost");
    backend_state_changed(&b->base_iface);
}

/* ---- calls ---- */

/* A call on b to fill: a spare (its call's memory kept) or a new one. NULL
 * when the circuit is open (down, reconnecting, or not yet answering): the
 * caller answers now rather than wait for a deadline. */
static struct pending *pending_new(struct backend_redis *b)
{
    if (!redis_node_ready(b->node))
        return NULL;
    struct pending *p = b->spare;
    if (p) {
        b->spare = p->next_spare;
        b->nspare--;
        struct script_call keep = p->call;
        *p = (struct pending){.call = keep};
    } else {
        p = xcalloc(1, sizeof *p);
    }
    p->b = b;
    return p;
}

static void pending_free(struct pending *p)
{
    struct backend_redis *b = p->b;
    if (b && !b->freeing && b->nspare < MAX_SPARE_PENDING) {
        p->next_spare = b->spare;
        b->spare = p;
        b->nspare++;
        return;
    }
    scripts_call_free(&p->call);
    free(p);
}

/* The script's integers, decoded into one result per tier for the caller
 * (and a local lease call's two more, scripts_decode_call). */
static void complete_ok(struct pending *p, const redisReply *r)
{
    struct redis_node_ints ints;
    struct tier_result res_buf[8];
    size_t ntiers = p->call.ntiers;
    struct tier_result *res = ntiers <= 8 ? res_buf : xcalloc(ntiers, sizeof *res);
    char err[RL_ERRLEN];
    struct backend_reply reply = {.status = BACKEND_OK, .results = res};
    if (redis_node_ints_of(r, &ints) < 0) {
        reply = (struct backend_reply){.status = BACKEND_ERROR, .errmsg = REDIS_NODE_NOT_INTS};
    } else if (scripts_decode_call(&p->call, ints.v, ints.n, res, &reply.lease_granted,
                                   &reply.lease_until_us, err, sizeof err) < 0) {
        reply = (struct backend_reply){.status = BACKEND_ERROR, .errmsg = err};
    }
    p->done(p->arg, &reply);
    redis_node_ints_free(&ints);
    if (res != res_buf)
        free(res);
}

/* A lease operation's integers, decoded into one outcome per lease. */
static void complete_lease(struct pending *p, const redisReply *r)
{
    struct redis_node_ints ints;
    struct lease_outcome *out = xcalloc(p->nleases ? p->nleases : 1, sizeof *out);
    char err[RL_ERRLEN];
    struct backend_lease_reply reply = {.status = BACKEND_OK, .outcomes = out};
    if (redis_node_ints_of(r, &ints) < 0)
        reply =
            (struct backend_lease_reply){BACKEND_ERROR, NULL, "lease reply holds a non-integer"};
    else if (scripts_decode_lease(ints.v, ints.n, p->nleases, out, err, sizeof err) < 0)
        reply = (struct backend_lease_reply){BACKEND_ERROR, NULL, err};
    p->lease_done(p->arg, &reply);
    redis_node_ints_free(&ints);
    free(out);
}

static void complete(struct pending *p, enum backend_status status, const char *errmsg)
{
    if (p->lease_done) {
        struct backend_lease_reply reply = {.status = status, .errmsg = errmsg};
        p->lease_done(p->arg, &reply);
        return;
    }
    struct backend_reply reply = {.status = status, .errmsg = errmsg};
    p->done(p->arg, &reply);
}

static void on_call_reply(void *arg, redisReply *r)
{
    struct pending *p = arg;
    struct backend_redis *b = p->b;
    if (!r) {
        complete(p, BACKEND_UNAVAILABLE, "connection to redis lost");
    } else if (r->type == REDIS_REPLY_ERROR && strncmp(r->str, "READONLY", 8) == 0) {
        /* A replica now: answered per failure_mode, not as an error. */
        complete(p, BACKEND_UNAVAILABLE, "redis is no longer the master");
        master_lost(b, r->str);
    } else if (r->type == REDIS_REPLY_ERROR) {
        complete(p, BACKEND_ERROR, r->str);
    } else if (r->type == REDIS_REPLY_ARRAY && p->lease_done) {
        complete_lease(p, r);
    } else if (r->type == REDIS_REPLY_ARRAY) {
        complete_ok(p, r);
    } else {
        complete(p, BACKEND_ERROR, "script reply is not an array");
    }
    pending_free(p);
}

/* Sends p's call (built, with its completion set); p is freed if it
 * cannot be sent. Returns as decide does. */
static int send_call(struct backend_redis *b, const struct config *cfg, struct pending *p,
                     void *arg)
{
    p->arg = arg;
    /* redis.timeout and redis.batch may change on reload: the stall rule
     * and the batches follow. */
    redis_node_set_timeout(b->node, cfg->redis_timeout_us);
    redis_node_set_batch(b->node, cfg->redis_batch);
    if (redis_node_call_batched(b->node, &p->call, 0, on_call_reply, p) < 0) {
        pending_free(p);
        return -1;
    }
    return 0;
}

static int redis_decide(struct backend *iface, const struct config *cfg,
                        const struct check_request *req, int64_t now_us, backend_done_fn done,
                        void *arg)
{
    struct pending *p = pending_new((struct backend_redis *)iface);
    if (!p)
        return -1;
    p->done = done;
    scripts_rebuild_call(cfg, req, now_us, &p->call);
    return send_call(p->b, cfg, p, arg);
}

static int redis_lease(struct backend *iface, const struct config *cfg, int renew,
                       const struct lease_ref *refs, size_t n, backend_lease_done_fn done,
                       void *arg)
{
    struct pending *p = pending_new((struct backend_redis *)iface);
    if (!p)
        return -1;
    p->lease_done = done;
    p->nleases = n;
    int64_t now = cfg->clock == CLOCK_SOURCE_LOCAL ? util_realtime_us() : -1;
    scripts_rebuild_lease_call(cfg, renew, refs, n, now, &p->call);
    return send_call(p->b, cfg, p, arg);
}

/* ---- resets (resets.h) ---- */

static int redis_reset(struct backend *iface, const struct config *cfg, const struct policy *p,
                       const char *key, size_t keylen, backend_reset_done_fn done, void *arg)
{
    struct backend_redis *b = (struct backend_redis *)iface;
    if (!redis_node_ready(b->node) || !b->channel)
        return -1;
    struct resets_cmds c;
    resets_cmds_build(&c, cfg, p, key, keylen, b->channel);
    int rc = resets_send(b->node, &c, "connection to redis lost", done, arg);
    resets_cmds_free(&c);
    return rc;
}

/* ---- the heaviest keys (top_store.h) ---- */

static int redis_top_put(struct backend *iface, const struct config *cfg, const char *policy,
                         int64_t minute, const char *member, const char *data, size_t len)
{
    struct backend_redis *b = (struct backend_redis *)iface;
    return top_store_put(b->node, cfg->key_prefix, policy, minute, member, data, len);
}

static int redis_top_get(struct backend *iface, const struct config *cfg, const char *policy,
                         int64_t lo, int64_t hi, backend_top_done_fn done, void *arg)
{
    struct backend_redis *b = (struct backend_redis *)iface;
    return top_store_get(b->node, cfg->key_prefix, policy, lo, hi, "connection to redis lost", done,
                         arg);
}

/* ---- run-time overrides (overrides_store.h) ---- */

static int redis_override_store(struct backend *iface, const struct config *cfg, const char *policy,
                                const char *key, size_t keylen, const char *json, size_t len,
                                int remove, const struct buf *expect, backend_override_done_fn done,
                                void *arg)
{
    struct backend_redis *b = (struct backend_redis *)iface;
    if (!redis_node_ready(b->node) || !b->channel)
        return -1;
    return overrides_store_send(b->node, cfg->key_prefix, b->channel, policy, key, keylen, json,
                                len, remove, expect, "connection to redis lost", done, arg);
}

static int redis_override_load(struct backend *iface, const struct config *cfg,
                               backend_override_done_fn done, void *arg)
{
    struct backend_redis *b = (struct backend_redis *)iface;
    if (!redis_node_ready(b->node))
        return -1;
    return overrides_store_load(b->node, cfg->key_prefix, "connection to redis lost", done, arg);
}

static void sub_start(struct backend_redis *b)
{
    if (!b->channel || b->sub || !b->started || (b->sentinel && !b->master_known))
        return;
    /* The node's current server, whatever set it (URL or sentinel). */
    struct redis_endpoint ep = redis_conn_endpoint(&b->url, b->master_host, b->master_port, b->tls);
    b->sub = resets_listener_new(b->base, b->log, &b->base_iface, b->channel, &ep, b->target, NULL,
                                 NULL);
}

static void redis_watch_resets(struct backend *iface, const struct config *cfg)
{
    struct backend_redis *b = (struct backend_redis *)iface;
    if (resets_channel_follow(&b->channel, &b->sub, cfg->key_prefix))
        sub_start(b);
}

static void redis_start(struct backend *iface)
{
    struct backend_redis *b = (struct backend_redis *)iface;
    b->started = 1;
    if (b->sentinel) {
        /* The node and the listener start at the first address named. */
        redis_sentinel_start(b->sentinel);
        return;
    }
    redis_node_start(b->node);
    sub_start(b);
}

static void redis_note_timeout(struct backend *iface)
{
    redis_node_note_timeout(((struct backend_redis *)iface)->node);
}

static const char *redis_target(const struct backend *iface)
{
    return ((const struct backend_redis *)iface)->target;
}

static void redis_free(struct backend *iface)
{
    struct backend_redis *b = (struct backend_redis *)iface;
    b->freeing = 1;
    redis_sentinel_free(b->sentinel);
    redis_node_free(b->node);
    while (b->spare) {
        struct pending *p = b->spare;
        b->spare = p->next_spare;
        scripts_call_free(&p->call);
        free(p);
    }
    resets_listener_free(b->sub);
    free(b->channel);
    free(b->master_host);
    redis_tls_free(b->tls);
    redis_url_free(&b->url);
    free(b);
}

static const char *redis_decides_by(const struct backend *iface)
{
    return redis_node_by_module(((const struct backend_redis *)iface)->node) ? "module"
                                                                             : "functions";
}

static const char *redis_unusable(const struct backend *iface)
{
    return redis_node_unusable(((const struct backend_redis *)iface)->node);
}

/* redis.timeout bounds every call. */
static int64_t redis_call_timeout_us(const struct backend *b, const struct config *cfg)
{
    (void)b;
    return cfg->redis_timeout_us;
}

static const struct backend_ops redis_ops = {
    .name = "redis",
    .decide = redis_decide,
    .lease = redis_lease,
    .reset = redis_reset,
    .watch_resets = redis_watch_resets,
    .top_put = redis_top_put,
    .top_get = redis_top_get,
    .override_store = redis_override_store,
    .override_load = redis_override_load,
    .call_timeout_us = redis_call_timeout_us,
    .note_timeout = redis_note_timeout,
    .start = redis_start,
    .ready = redis_ready,
    .decides_by = redis_decides_by,
    .unusable = redis_unusable,
    .target = redis_target,
    .free = redis_free,
    .local_leases = 1,
};

struct backend *backend_redis_new(struct event_base *base, const struct config *cfg,
                                  const struct logger *lg, struct metrics *m, char *err,
                                  size_t errlen)
{
    struct backend_redis *b = xcalloc(1, sizeof *b);
    b->base_iface.ops = &redis_ops;
    b->base = base;
    b->log = lg;
    b->metrics = m;
    /* A copy: the backend outlives the snapshot it was made from. */
    redis_url_copy(&b->url, &cfg->redis_server, REDIS_URL_PASSWORD_ENV);
    if (cfg->redis_tls_on && !(b->tls = redis_tls_new(&cfg->redis_tls, err, errlen))) {
        redis_free(&b->base_iface);
        return NULL;
    }
    /* Sentinel mode: the URL's host:port is not used, but it is where the
     * node points until the sentinels name the master (set_master); the
     * node must then be a master (ROLE) before it is ready. */
    int sentinel = cfg->redis_sentinel.naddresses > 0;
    b->master_host = b->url.host ? xstrdup(b->url.host) : NULL;
    b->master_port = b->url.port;
    set_target(b, b->master_host, b->master_port);
    struct redis_endpoint ep = redis_conn_endpoint(&b->url, b->master_host, b->master_port, b->tls);
    b->node = redis_node_new(base, lg, m, &ep, sentinel, on_node_state, b);
    redis_node_set_module(b->node, cfg->redis_module);
    if (sentinel) {
        b->sentinel =
            redis_sentinel_new(base, lg, m, &cfg->redis_sentinel, b->tls, on_sentinel_master, b);
        if (!b->sentinel) {
            snprintf(err, errlen, "redis.sentinel: no usable sentinel address");
            redis_free(&b->base_iface);
            return NULL;
        }
    }
    return &b->base_iface;
}
