/* SPDX-License-Identifier: Apache-2.0 */
/*
 * backend_cluster.c: the Redis Cluster backend (backend_cluster.h): its
 * interface table, making it from the seeds parsed at load and freeing
 * it, readiness and timeouts as the interface asks, and resets: the DEL
 * and PUBLISH on the slot's master, and the reset listener (resets.h) on
 * one node, moved to another when it goes.
 *
 * Its state (struct backend_cluster) is shared with the other two files:
 * the topology (cluster_topology.c: nodes, slot map, refresh) and the
 * calls (cluster_calls.c: grouping by slot, sending, redirects, retries,
 * completion). Speaks RESP only through redis_node and resets.
 */
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/redis/backend_cluster.h"
#include "backend/redis/cluster_calls.h"
#include "backend/redis/cluster_topology.h"
#include "backend/redis/overrides_store.h"
#include "backend/redis/redis_conn.h"
#include "backend/redis/redis_tls.h"
#include "backend/redis/resets.h"
#include "backend/redis/top_store.h"
#include "config/config.h"

/* ---- resets (resets.h) ---- */

static int cluster_reset(struct backend *iface, const struct config *cfg, const struct policy *p,
                         const char *key, size_t keylen, backend_reset_done_fn done, void *arg)
{
    struct backend_cluster *b = (struct backend_cluster *)iface;
    if (!b->have_map || !b->channel || p->ntiers == 0)
        return -1;
    struct resets_cmds c;
    resets_cmds_build(&c, cfg, p, key, keylen, b->channel);
    /* On the slot's master (every key shares one hash tag): the PUBLISH
     * after the DEL on the same node, and the cluster bus carries it to
     * every node. */
    struct cnode *cn = b->slot_node[redis_cluster_keyslot(c.del_argv[1], c.del_lens[1])];
    int rc =
        cn ? resets_send(cn->node, &c, "connection to a redis cluster node lost", done, arg) : -1;
    resets_cmds_free(&c);
    return rc;
}

/* ---- run-time overrides (overrides_store.h) ---- */

/* The master of the overrides hash's slot, or NULL. */
static struct redis_node *overrides_node(struct backend_cluster *b, const struct config *cfg)
{
    char hkey[POLICY_KEY_BUF];
    int n = overrides_store_key(cfg->key_prefix, hkey, sizeof hkey);
    if (!b->have_map || n < 0)
        return NULL;
    struct cnode *cn = b->slot_node[redis_cluster_keyslot(hkey, (size_t)n)];
    return cn ? cn->node : NULL;
}

static int cluster_override_store(struct backend *iface, const struct config *cfg,
                                  const char *policy, const char *key, size_t keylen,
                                  const char *json, size_t len, int remove,
                                  const struct buf *expect, backend_override_done_fn done,
                                  void *arg)
{
    struct backend_cluster *b = (struct backend_cluster *)iface;
    struct redis_node *n = overrides_node(b, cfg);
    if (!n || !b->channel)
        return -1;
    return overrides_store_send(n, cfg->key_prefix, b->channel, policy, key, keylen, json, len,
                                remove, expect, "connection to a redis cluster node lost", done,
                                arg);
}

static int cluster_override_load(struct backend *iface, const struct config *cfg,
                                 backend_override_done_fn done, void *arg)
{
    struct redis_node *n = overrides_node((struct backend_cluster *)iface, cfg);
    if (!n)
        return -1;
    return overrides_store_load(n, cfg->key_prefix, "connection to a redis cluster node lost", done,
                                arg);
}

/* The node the listener should use: a master of the map, the one after
 * the current in round robin, else a seed. */
static struct cnode *sub_pick(struct backend_cluster *b)
{
    size_t start = 0;
    for (size_t i = 0; i < b->nnodes; i++)
        if (b->nodes[i] == b->sub_node)
            start = i + 1;
    for (size_t k = 0; k < b->nnodes; k++) {
        struct cnode *cn = b->nodes[(start + k) % b->nnodes];
        if (redis_node_ready(cn->node))
            return cn;
    }
    return b->nodes[start % b->nnodes];
}

/* ---- the heaviest keys (top_store.h), on the policy's slot's master ---- */

static struct redis_node *top_node(struct backend_cluster *b, const struct config *cfg,
                                   const char *policy)
{
    if (!b->have_map)
        return NULL;
    struct buf key = {0};
    top_store_key(&key, cfg->key_prefix, policy, 0);
    struct cnode *cn = b->slot_node[redis_cluster_keyslot(key.data, key.len)];
    buf_free(&key);
    return cn ? cn->node : NULL;
}

static int cluster_top_put(struct backend *iface, const struct config *cfg, const char *policy,
                           int64_t minute, const char *member, const char *data, size_t len)
{
    struct redis_node *n = top_node((struct backend_cluster *)iface, cfg, policy);
    return n ? top_store_put(n, cfg->key_prefix, policy, minute, member, data, len) : -1;
}

static int cluster_top_get(struct backend *iface, const struct config *cfg, const char *policy,
                           int64_t lo, int64_t hi, backend_top_done_fn done, void *arg)
{
    struct redis_node *n = top_node((struct backend_cluster *)iface, cfg, policy);
    return n ? top_store_get(n, cfg->key_prefix, policy, lo, hi,
                             "connection to a redis cluster node lost", done, arg)
             : -1;
}

static void on_sub_down(void *arg, struct resets_listener *l, const char *why)
{
    struct backend_cluster *b = arg;
    if (b->freeing)
        return;
    log_event(b->log, LOG_LVL_WARN, "redis reset listener lost", "node", resets_listener_target(l),
              "reason", why, NULL);
    /* Elsewhere next time: this node may be gone for good. */
    b->sub_node = sub_pick(b);
    struct redis_endpoint ep =
        redis_conn_endpoint(&b->creds, b->sub_node->host, b->sub_node->port, b->tls);
    resets_listener_set_endpoint(l, &ep);
}

static void sub_start(struct backend_cluster *b)
{
    if (!b->channel || !b->started || b->sub)
        return;
    b->sub_node = sub_pick(b);
    struct redis_endpoint ep =
        redis_conn_endpoint(&b->creds, b->sub_node->host, b->sub_node->port, b->tls);
    b->sub =
        resets_listener_new(b->base, b->log, &b->base_iface, b->channel, &ep, NULL, on_sub_down, b);
}

static void cluster_watch_resets(struct backend *iface, const struct config *cfg)
{
    struct backend_cluster *b = (struct backend_cluster *)iface;
    if (resets_channel_follow(&b->channel, &b->sub, cfg->key_prefix))
        sub_start(b);
}

/* ---- the rest of the interface ---- */

static void cluster_start(struct backend *iface)
{
    struct backend_cluster *b = (struct backend_cluster *)iface;
    b->started = 1;
    for (size_t i = 0; i < b->nnodes; i++)
        redis_node_start(b->nodes[i]->node);
    sub_start(b);
    /* The first map comes from the first seed that connects (on_node_state),
     * or the timer's next try. */
    cluster_topology_arm(b);
}

static int cluster_ready(const struct backend *iface)
{
    return ((const struct backend_cluster *)iface)->ready;
}

/* Tells the stall rule of each node whose calls have waited past the
 * timeout with no reply: check.c does not say which call timed out. */
static void cluster_note_timeout(struct backend *iface)
{
    struct backend_cluster *b = (struct backend_cluster *)iface;
    int64_t now = util_monotonic_us();
    for (size_t i = 0; i < b->nnodes; i++) {
        struct cnode *cn = b->nodes[i];
        if (cn->inflight > 0 && now - cn->last_progress_us >= b->timeout_us)
            redis_node_note_timeout(cn->node);
    }
}

static const char *cluster_target(const struct backend *iface)
{
    return ((const struct backend_cluster *)iface)->target;
}

static void cluster_free(struct backend *iface)
{
    struct backend_cluster *b = (struct backend_cluster *)iface;
    b->freeing = 1;
    resets_listener_free(b->sub);
    /* Freeing a node completes its calls (NULL): their groups fail, and
     * calls complete once every group has. Calls waiting on a retry timer
     * fail here. */
    for (size_t i = 0; i < b->nnodes; i++)
        redis_node_free(b->nodes[i]->node);
    cluster_calls_shutdown(b);
    for (size_t i = 0; i < b->nnodes; i++) {
        free(b->nodes[i]->host);
        free(b->nodes[i]);
    }
    free(b->nodes);
    if (b->refresh_ev)
        event_free(b->refresh_ev);
    redis_cluster_map_free(&b->map);
    redis_tls_free(b->tls);
    redis_url_free(&b->creds);
    free(b->channel);
    free(b);
}

/* The masters of the map (the nodes not parked) that are ready: all by the
 * module, all by the Functions, or some of each. */
static const char *cluster_decides_by(const struct backend *iface)
{
    const struct backend_cluster *b = (const struct backend_cluster *)iface;
    int module = 0, functions = 0;
    for (size_t i = 0; i < b->nnodes; i++) {
        const struct cnode *cn = b->nodes[i];
        if (cn->parked || !redis_node_ready(cn->node))
            continue;
        if (redis_node_by_module(cn->node))
            module = 1;
        else
            functions = 1;
    }
    return module && functions ? "module,functions" : module ? "module" : "functions";
}

/* The first master of the map unusable under redis.module: on. */
static const char *cluster_unusable(const struct backend *iface)
{
    const struct backend_cluster *b = (const struct backend_cluster *)iface;
    for (size_t i = 0; i < b->nnodes; i++)
        if (!b->nodes[i]->parked && redis_node_unusable(b->nodes[i]->node))
            return redis_node_unusable(b->nodes[i]->node);
    return NULL;
}

/* redis.timeout bounds every call. */
static int64_t cluster_call_timeout_us(const struct backend *b, const struct config *cfg)
{
    (void)b;
    return cfg->redis_timeout_us;
}

static const struct backend_ops cluster_ops = {
    .name = "redis",
    .decide = cluster_calls_decide,
    .lease = cluster_calls_lease,
    .reset = cluster_reset,
    .watch_resets = cluster_watch_resets,
    .top_put = cluster_top_put,
    .top_get = cluster_top_get,
    .override_store = cluster_override_store,
    .override_load = cluster_override_load,
    .call_timeout_us = cluster_call_timeout_us,
    .note_timeout = cluster_note_timeout,
    .start = cluster_start,
    .ready = cluster_ready,
    .decides_by = cluster_decides_by,
    .unusable = cluster_unusable,
    .target = cluster_target,
    .free = cluster_free,
    .local_leases = 1,
};

struct backend *backend_cluster_new(struct event_base *base, const struct config *cfg,
                                    const struct logger *lg, struct metrics *m, char *err,
                                    size_t errlen)
{
    struct backend_cluster *b = xcalloc(1, sizeof *b);
    b->base_iface.ops = &cluster_ops;
    b->base = base;
    b->log = lg;
    b->metrics = m;
    b->module = cfg->redis_module;
    b->refresh_ev = cluster_topology_timer_new(b);
    if (!b->refresh_ev) {
        snprintf(err, errlen, "cannot create a timer");
        cluster_free(&b->base_iface);
        return NULL;
    }
    if (cfg->redis_tls_on && !(b->tls = redis_tls_new(&cfg->redis_tls, err, errlen))) {
        cluster_free(&b->base_iface);
        return NULL;
    }
    /* The seeds as parsed at load: TCP URLs, one scheme, db 0
     * (config_redis.c). The first seed's credentials serve every node. */
    for (size_t i = 0; i < cfg->redis_ncluster; i++) {
        const struct redis_url *u = &cfg->redis_seeds[i];
        if (i == 0) {
            redis_url_copy(&b->creds, u, REDIS_URL_PASSWORD_ENV);
            snprintf(b->target, sizeof b->target, "cluster:%s:%d", u->host, u->port);
        }
        cluster_topology_node(b, u->host, u->port);
    }
    if (b->nnodes == 0) {
        snprintf(err, errlen, "redis.cluster: no seed");
        cluster_free(&b->base_iface);
        return NULL;
    }
    return &b->base_iface;
}
