/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cluster_topology.c: the Redis Cluster backend's view of the cluster
 * (cluster_topology.h).
 *
 * Owns: the nodes (one redis_node per address the cluster named, each
 * required to be a master, kept until the backend is freed; those that a
 * complete map does not name as masters, e.g. replicas given as seeds, are
 * parked: disconnected until a map names them or no node is left to ask
 * for the map), the slot map (redis_cluster.h) and which node serves each
 * slot, whether every slot is served by a ready master (ready), failovers
 * seen, and the map refresh: one CLUSTER SLOTS in flight at a time, on the
 * refresh timer, on a node lost or up, and on a MOVED (cluster_calls.c
 * asks). Does not own the calls (cluster_calls.c) nor the reset listener
 * (backend_cluster.c).
 */
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/redis/cluster_topology.h"
#include "backend/redis/redis_conn.h"
#include "config/config.h"
#include "core/metrics.h"
#include "lib/timer.h"

/* While the map is incomplete or a master is not ready, the map is asked
 * for again this often: a failover is seen within this of the cluster
 * electing the new master (a MOVED comes only from a node that is up). */
#define REFRESH_NOT_READY_US 250000
/* And this often while ready: a slot given up (DELSLOTS) or a topology
 * change that no call has run into yet. */
#define REFRESH_READY_US 5000000
/* A CLUSTER SLOTS unanswered this long: its node is hung (paused, cut off
 * with the connection still open) and is dropped, or no refresh would ever
 * be sent again (one in flight at a time). Checked on the refresh timer. */
#define REFRESH_TIMEOUT_US 1000000

void cluster_topology_arm(struct backend_cluster *b)
{
    timer_arm_us(b->refresh_ev, b->ready ? REFRESH_READY_US : REFRESH_NOT_READY_US);
}

static void recompute_ready(struct backend_cluster *b)
{
    int was = b->ready;
    int ready = b->have_map && redis_cluster_map_unserved(&b->map) == 0;
    for (size_t s = 0; ready && s < REDIS_CLUSTER_SLOTS; s++)
        ready = b->slot_node[s] && redis_node_ready(b->slot_node[s]->node);
    b->ready = ready;
    if (b->freeing)
        return;
    backend_state_changed(&b->base_iface);
    /* Not ready any more: ask for the map soon, not at the slow pace. */
    if (was && !ready && b->started)
        cluster_topology_arm(b);
}

static void on_node_state(void *arg, struct redis_node *n, int ready)
{
    struct cnode *cn = arg;
    struct backend_cluster *b = cn->b;
    if (b->freeing)
        return;
    recompute_ready(b);
    /* A master lost: its slots may be served elsewhere soon. A node up
     * while the cluster is not ready: the map it has may be what is
     * missing (at start, the first seed that answers gives it). */
    if (!ready || !b->ready)
        cluster_topology_refresh(b);
}

struct cnode *cluster_topology_node(struct backend_cluster *b, const char *host, int port)
{
    for (size_t i = 0; i < b->nnodes; i++)
        if (b->nodes[i]->port == port && strcmp(b->nodes[i]->host, host) == 0)
            return b->nodes[i];
    struct cnode *cn = xcalloc(1, sizeof *cn);
    cn->b = b;
    cn->host = xstrdup(host);
    cn->port = port;
    struct redis_endpoint ep = redis_conn_endpoint(&b->creds, cn->host, port, b->tls);
    cn->node = redis_node_new(b->base, b->log, b->metrics, &ep, 1, on_node_state, cn);
    redis_node_set_timeout(cn->node, b->timeout_us);
    redis_node_set_batch(cn->node, b->batch);
    redis_node_set_module(cn->node, b->module);
    b->nodes = xrealloc(b->nodes, (b->nnodes + 1) * sizeof *b->nodes);
    b->nodes[b->nnodes++] = cn;
    if (b->started)
        redis_node_start(cn->node);
    return cn;
}

/* ---- the slot map ---- */

/* Counts a failover on each master that took slots from a master gone
 * from the new map (the old one failed or was demoted): a slot that moved
 * between two masters of the new map is resharding, not a failover. */
static void count_failovers(struct backend_cluster *b, struct cnode *const *old,
                            struct cnode *const *masters, size_t nmasters)
{
    struct cnode *counted[64];
    size_t ncounted = 0;
    for (size_t s = 0; s < REDIS_CLUSTER_SLOTS; s++) {
        struct cnode *was = old[s], *now = b->slot_node[s];
        if (!was || !now || was == now)
            continue;
        size_t i;
        for (i = 0; i < nmasters && masters[i] != was; i++)
            ;
        if (i < nmasters)
            continue;
        for (i = 0; i < ncounted && counted[i] != now; i++)
            ;
        if (i < ncounted || ncounted == 64)
            continue;
        counted[ncounted++] = now;
        metrics_node_count(b->metrics, redis_node_target(now->node), METRICS_NODE_FAILOVERS);
        log_event(b->log, LOG_LVL_WARN, "redis cluster failover seen", "new_master",
                  redis_node_target(now->node), "old_master", redis_node_target(was->node), NULL);
    }
}

/*
 * A node that is not a master of a complete map is parked: a replica would
 * otherwise reconnect forever, each time refused by the ROLE check (a
 * warning, a reconnect counted). A map with a slot unserved parks nothing:
 * it may be a cluster still forming. A master named again is restarted.
 */
static void park_nodes(struct backend_cluster *b, struct cnode *const *masters, size_t nmasters)
{
    int complete = redis_cluster_map_unserved(&b->map) == 0;
    for (size_t i = 0; i < b->nnodes; i++) {
        struct cnode *cn = b->nodes[i];
        size_t k;
        for (k = 0; k < nmasters && masters[k] != cn; k++)
            ;
        if (k < nmasters) {
            cluster_topology_wake(cn);
        } else if (k == nmasters && complete && !cn->parked) {
            cn->parked = 1;
            log_event(b->log, LOG_LVL_INFO, "redis cluster node let go", "node",
                      redis_node_target(cn->node), "reason", "not a master of the cluster", NULL);
            redis_node_stop(cn->node, "not a master of the cluster");
        }
    }
}

void cluster_topology_wake(struct cnode *cn)
{
    if (cn->parked) {
        cn->parked = 0;
        redis_node_start(cn->node);
    }
}

/* Every parked node connects again: none is left to ask for the map. */
static void unpark_all(struct backend_cluster *b)
{
    for (size_t i = 0; i < b->nnodes; i++)
        cluster_topology_wake(b->nodes[i]);
}

static void map_install(struct backend_cluster *b, struct redis_cluster_map *m)
{
    struct cnode **old = xmalloc(sizeof b->slot_node);
    memcpy(old, b->slot_node, sizeof b->slot_node);
    struct cnode **by_master = xcalloc(m->nmasters ? m->nmasters : 1, sizeof *by_master);
    for (size_t i = 0; i < m->nmasters; i++)
        by_master[i] = cluster_topology_node(b, m->masters[i].host, m->masters[i].port);
    for (size_t s = 0; s < REDIS_CLUSTER_SLOTS; s++)
        b->slot_node[s] = m->slot_master[s] < 0 ? NULL : by_master[m->slot_master[s]];
    if (b->have_map)
        count_failovers(b, old, by_master, m->nmasters);
    redis_cluster_map_free(&b->map);
    b->map = *m;
    b->have_map = 1;
    free(old);
    recompute_ready(b);
    park_nodes(b, by_master, m->nmasters);
    free(by_master);
}

static void on_slots_reply(void *arg, redisReply *r)
{
    struct cnode *cn = arg;
    struct backend_cluster *b = cn->b;
    b->refresh_inflight = 0;
    if (b->freeing)
        return;
    struct redis_cluster_map m;
    char err[RL_ERRLEN];
    if (!r) {
        err[0] = '\0';
    } else if (r->type == REDIS_REPLY_ERROR) {
        log_event(b->log, LOG_LVL_WARN, "redis cluster map refresh failed", "node",
                  redis_node_target(cn->node), "error", r->str, NULL);
    } else if (redis_cluster_map_parse(r, cn->host, &m, err, sizeof err) < 0) {
        log_event(b->log, LOG_LVL_WARN, "redis cluster map refresh failed", "node",
                  redis_node_target(cn->node), "error", err, NULL);
    } else {
        map_install(b, &m);
    }
    if (b->refresh_again) {
        b->refresh_again = 0;
        cluster_topology_refresh(b);
    }
}

void cluster_topology_refresh(struct backend_cluster *b)
{
    if (b->freeing || !b->started)
        return;
    if (b->refresh_inflight) {
        b->refresh_again = 1;
        return;
    }
    const char *argv[] = {"CLUSTER", "SLOTS"};
    const size_t lens[] = {7, 5};
    for (size_t k = 0; k < b->nnodes; k++) {
        struct cnode *cn = b->nodes[(b->next_refresh_node + k) % b->nnodes];
        if (redis_node_command(cn->node, on_slots_reply, cn, 2, argv, lens) == 0) {
            b->next_refresh_node = (b->next_refresh_node + k + 1) % b->nnodes;
            b->refresh_inflight = 1;
            b->refresh_node = cn;
            b->refresh_sent_us = util_monotonic_us();
            return;
        }
    }
    /* Nothing connected: the timer asks again, with every node. */
    unpark_all(b);
    recompute_ready(b);
}

static void on_refresh_timer(evutil_socket_t fd, short what, void *arg)
{
    struct backend_cluster *b = arg;
    /* The drop completes the refresh (NULL): the next goes elsewhere. */
    if (b->refresh_inflight && util_monotonic_us() - b->refresh_sent_us >= REFRESH_TIMEOUT_US)
        redis_node_drop(b->refresh_node->node, "no answer to CLUSTER SLOTS in time");
    cluster_topology_refresh(b);
    if (!b->freeing)
        cluster_topology_arm(b);
}

void cluster_topology_follow(struct backend_cluster *b, const struct config *cfg)
{
    if (b->timeout_us != cfg->redis_timeout_us || b->batch != cfg->redis_batch) {
        b->timeout_us = cfg->redis_timeout_us;
        b->batch = cfg->redis_batch;
        for (size_t i = 0; i < b->nnodes; i++) {
            redis_node_set_timeout(b->nodes[i]->node, b->timeout_us);
            redis_node_set_batch(b->nodes[i]->node, b->batch);
        }
    }
}

struct event *cluster_topology_timer_new(struct backend_cluster *b)
{
    return evtimer_new(b->base, on_refresh_timer, b);
}
