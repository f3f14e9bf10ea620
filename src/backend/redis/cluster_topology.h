/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cluster_topology.h: the state of the Redis Cluster backend, shared by
 * its three files (backend_cluster.c: the interface, making and freeing,
 * the reset listener; cluster_topology.c: the nodes, the slot map and its
 * refresh; cluster_calls.c: the calls), and what the topology offers the
 * other two. Not for use outside backend/redis/.
 */
#ifndef RATELIMITD_CLUSTER_TOPOLOGY_H
#define RATELIMITD_CLUSTER_TOPOLOGY_H

#include <stdint.h>

#include "backend/redis/redis_cluster.h"
#include "backend/redis/redis_node.h"
#include "config/redis_url.h"
#include "core/backend.h"
#include "lib/log.h"

#define HOST_MAX 256

struct backend_cluster;
struct ccall;
struct config;
struct event;
struct metrics;
struct redis_tls;
struct resets_listener;

struct cnode {
    struct backend_cluster *b;
    struct redis_node *node;
    char *host;
    int port;
    int parked;               /* stopped: not a master of the map */
    int inflight;             /* calls sent, no reply yet */
    int64_t last_progress_us; /* monotonic: last reply, or first send when idle */
};

struct backend_cluster {
    struct backend base_iface; /* first: a struct backend * points here */
    struct event_base *base;
    const struct logger *log;
    struct metrics *metrics;
    struct redis_tls *tls;
    struct redis_url creds; /* every node's: the first seed's (the env's password) */
    char target[HOST_MAX + 32];

    size_t nnodes;
    struct cnode **nodes;
    size_t next_refresh_node; /* round robin over nodes */

    int have_map;
    struct redis_cluster_map map;
    struct cnode *slot_node[REDIS_CLUSTER_SLOTS];
    int ready;
    int refresh_inflight, refresh_again;
    struct cnode *refresh_node; /* the node of the refresh in flight */
    int64_t refresh_sent_us;    /* monotonic */
    struct event *refresh_ev;
    int64_t timeout_us;            /* the last config's redis.timeout, for note_timeout */
    int64_t batch;                 /* the last config's redis.batch, every node's */
    enum redis_module_mode module; /* redis.module (restart only), every node's */

    struct ccall *calls;
    int started, freeing;

    /* The reset listener. */
    struct resets_listener *sub;
    struct cnode *sub_node;
    char *channel;
};

/* The node at host:port, made (and started, once the backend is) if new. */
struct cnode *cluster_topology_node(struct backend_cluster *b, const char *host, int port);

/* A parked node connects again (a MOVED named it: a replica promoted since
 * the last map); nothing if it is not parked. */
void cluster_topology_wake(struct cnode *cn);

/* CLUSTER SLOTS on the next connected node, round robin; one at a time
 * (a second request while one is in flight makes one more after it). */
void cluster_topology_refresh(struct backend_cluster *b);

/* The refresh timer, at the pace of whether the cluster is ready. */
void cluster_topology_arm(struct backend_cluster *b);

/* The refresh timer's event (NULL: out of memory); armed by
 * cluster_topology_arm, freed by the backend. */
struct event *cluster_topology_timer_new(struct backend_cluster *b);

/* redis.timeout and redis.batch may change on reload: every node's stall
 * rule and batches follow cfg's. */
void cluster_topology_follow(struct backend_cluster *b, const struct config *cfg);

#endif
