/*
 * backend_redis.c: the Redis backend (backend.h) on one server: a
 * redis_node (redis_node.h) that runs the code, and the reset listener, a
 * redis_conn of its own subscribed to "<key_prefix>reset". See
 * backend_redis.h. Owns the node, the listener, the TLS context (when the
 * URL is rediss://), the URL's credentials and every in-flight call's copy
 * of its arguments.
 *
 * Resets (the admin API's DELETE) go on the node's connection: one DEL of
 * every Redis key of the key's tiers (they share one hash tag, so the DEL is
 * Cluster-safe), then one PUBLISH on "<key_prefix>reset" of
 * "<policy>:<key bytes>" (policy names never hold ':', so the first ':'
 * ends the name, and the key is sent as it is, any bytes). Every backend
 * listens on its second connection and reports each announcement to
 * on_reset; after each (re)subscription it reports a NULL policy, since
 * announcements made while it was down were lost.
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
#include "backend/redis/redis_conn.h"
#include "backend/redis/redis_node.h"
#include "backend/redis/redis_sentinel.h"
#include "backend/redis/redis_tls.h"
#include "backend/redis/scripts.h"
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
    struct redis_conn *sub;
    char *channel; /* owned; NULL until watch_resets */
    int started;   /* ops->start was called: the listener may connect */
};

/* One reset in flight: its DEL and its PUBLISH, pipelined. */
struct pending_reset {
    backend_reset_done_fn done;
    void *arg;
    int outstanding; /* replies still due */
    struct backend_reset_reply reply;
    char err[RL_ERRLEN];
};

/* One call in flight; owns its arguments (the node borrows them, and may
 * send them again after a NOSCRIPT). */
struct pending {
    struct backend_redis *b;
    backend_done_fn done;
    void *arg;
    struct script_call call;
};

/* ---- the server ---- */

/* Where the node and the listener connect: the URL's scheme, credentials
 * and db, at host:port (or the URL's unix socket when host is NULL). */
static void make_endpoint(const struct backend_redis *b, const char *host, int port,
                          struct redis_endpoint *ep)
{
    *ep = (struct redis_endpoint){
        .host = host,
        .port = port,
        .unix_path = host ? NULL : b->url.unix_path,
        .user = b->url.user,
        .password = b->url.password,
        .db = b->url.db,
        .tls = b->tls,
    };
}

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
    struct redis_endpoint ep;
    make_endpoint(b, h, port, &ep);
    set_target(b, h, port);
    b->master_known = 1;
    b->moving = 1;
    redis_node_set_endpoint(b->node, &ep);
    b->moving = 0;
    if (!b->sub) {
        sub_start(b); /* the first address: the listener may now connect */
    } else {
        redis_conn_set_endpoint(b->sub, &ep);
        redis_conn_drop(b->sub, "the master moved");
        redis_conn_connect(b->sub);
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

static void pending_free(struct pending *p)
{
    scripts_call_free(&p->call);
    free(p);
}

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
    } else if (r->type == REDIS_REPLY_ARRAY) {
        complete_ok(p, r);
    } else {
        complete(p, BACKEND_ERROR, "script reply is not an array");
    }
    pending_free(p);
}

static int redis_decide(struct backend *iface, const struct config *cfg,
                        const struct check_request *req, int64_t now_us, backend_done_fn done,
                        void *arg)
{
    struct backend_redis *b = (struct backend_redis *)iface;
    /* The circuit is open (down, reconnecting, or not yet answering):
     * answer now rather than wait for a deadline. */
    if (!redis_node_ready(b->node))
        return -1;
    struct pending *p = xcalloc(1, sizeof *p);
    p->b = b;
    p->done = done;
    p->arg = arg;
    scripts_build_call(cfg, req, now_us, &p->call);
    /* redis.timeout may change on reload: the stall rule follows. */
    redis_node_set_timeout(b->node, cfg->redis_timeout_us);
    if (redis_node_call(b->node, &p->call, 0, on_call_reply, p) < 0) {
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

static void on_reset_reply(struct pending_reset *r, const redisReply *rr, long long *into)
{
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

static void on_del_reply(void *arg, redisReply *rr)
{
    struct pending_reset *r = arg;
    on_reset_reply(r, rr, &r->reply.deleted);
}

static void on_publish_reply(void *arg, redisReply *rr)
{
    struct pending_reset *r = arg;
    on_reset_reply(r, rr, &r->reply.notified);
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
    if (!redis_node_ready(b->node) || !b->channel)
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
    if (redis_node_command(b->node, on_del_reply, r, (int)argc, argv, lens) == 0) {
        rc = 0;
        r->outstanding = 1;
        if (redis_node_command(b->node, on_publish_reply, r, 3, pub, publens) == 0)
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

/* The reply to SUBSCRIBE: the subscription stands from here. */
static void on_subscribed(void *arg, redisReply *r)
{
    struct backend_redis *b = arg;
    if (!r)
        return; /* connection gone: it resubscribes on reconnect */
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 3 ||
        r->element[0]->type != REDIS_REPLY_STRING || strcmp(r->element[0]->str, "subscribe") != 0) {
        log_event(b->log, LOG_LVL_ERROR, "redis reset listener setup failed", "target", b->target,
                  "error", r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply", NULL);
        redis_conn_drop(b->sub, "SUBSCRIBE refused");
        return;
    }
    redis_conn_healthy(b->sub);
    log_event(b->log, LOG_LVL_INFO, "redis reset listener subscribed", "channel", b->channel, NULL);
    /* Resets announced while no subscription stood were not heard. */
    if (b->base_iface.on_reset)
        b->base_iface.on_reset(b->base_iface.on_reset_arg, NULL, NULL, 0);
}

static void on_sub_up(void *arg, struct redis_conn *c)
{
    struct backend_redis *b = arg;
    const char *argv[] = {"SUBSCRIBE", b->channel};
    size_t lens[] = {9, strlen(b->channel)};
    redis_conn_command(c, on_subscribed, b, 2, argv, lens);
}

/* Every message on the subscribed connection (the SUBSCRIBE call took its
 * confirmation). */
static void on_sub_push(void *arg, redisReply *r)
{
    struct backend_redis *b = arg;
    if (r->type == REDIS_REPLY_ARRAY && r->elements == 3 &&
        r->element[0]->type == REDIS_REPLY_STRING && strcmp(r->element[0]->str, "message") == 0 &&
        r->element[2]->type == REDIS_REPLY_STRING)
        sub_message(b, r->element[2]->str, r->element[2]->len);
}

static void sub_start(struct backend_redis *b)
{
    if (!b->channel || b->sub || !b->started || (b->sentinel && !b->master_known))
        return;
    struct redis_endpoint ep;
    /* The node's current server, whatever set it (URL or sentinel). */
    make_endpoint(b, b->master_host, b->master_port, &ep);
    struct redis_conn_events ev = {.push = on_sub_push, .up = on_sub_up, .arg = b};
    b->sub = redis_conn_new(b->base, b->log, "resets", &ep, &ev);
    redis_conn_connect(b->sub);
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
    /* A new connection for the new channel: unsubscribing in place would
     * mix the old channel's messages with the new confirmation. */
    redis_conn_free(b->sub);
    b->sub = NULL;
    free(b->channel);
    b->channel = channel;
    if (b->started)
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
    redis_conn_free(b->sub);
    free(b->channel);
    free(b->master_host);
    redis_tls_free(b->tls);
    redis_url_free(&b->url);
    free(b);
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
    .reset = redis_reset,
    .watch_resets = redis_watch_resets,
    .call_timeout_us = redis_call_timeout_us,
    .note_timeout = redis_note_timeout,
    .start = redis_start,
    .ready = redis_ready,
    .target = redis_target,
    .free = redis_free,
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
    if (redis_url_parse(cfg->redis_url, &b->url, err, errlen) < 0) {
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
    struct redis_endpoint ep;
    make_endpoint(b, b->master_host, b->master_port, &ep);
    b->node = redis_node_new(base, lg, m, &ep, sentinel, on_node_state, b);
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
