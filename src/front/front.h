/* SPDX-License-Identifier: Apache-2.0 */
/*
 * front.h: what the worker knows of a front, a protocol served on listening
 * sockets of its own (HTTP/1.1 on listen and admin_listen, gRPC on
 * grpc_listen): one ops table per front, listed in registry.c, and what the
 * worker lends each front (struct front_host). The worker makes one
 * instance of each front its config enables and loops over them for a
 * reload, a drain, the end of a drain and the end; it never names a front.
 *
 * Adding a front: a folder under src/front/ whose instance embeds struct
 * front and whose ops table is one row of front_all (registry.c).
 *
 * Owns the contract between the worker and its fronts; not the sockets'
 * plumbing (listener.h), not the protocols (front/<name>/).
 */
#ifndef RATELIMITD_FRONT_H
#define RATELIMITD_FRONT_H

#include <stddef.h>

#include "core/core.h"

struct buf;
struct config;
struct event;
struct front_ops;
struct listen_fds;

/* What a front is lent by the loop it runs on (the worker fills one and
 * keeps it as long as its fronts live): the core it hands requests to and
 * the few things only the embedder knows. A front names no worker. */
struct front_host {
    struct core *core;
    size_t *connections; /* process-wide, behind max_connections */
    /* Process-wide: the sockets passed at start, and those bound, for a
     * hand-over (listen_fds.h); NULL: none. */
    struct listen_fds *sockets;
    const int *draining; /* nonzero: no new request is taken */
    /* Why the daemon takes no checks right now ("shutting_down",
     * "redis_unavailable"), or NULL when ready. */
    const char *(*unready_reason)(void *arg);
    /* More for /readyz, or NULL: when ready, what decides (the backend's
     * decides_by); when not, why, naming the node (its unusable). */
    const char *(*ready_detail)(void *arg, int ready);
    /* The whole process's metrics as Prometheus text; the caller frees it. */
    char *(*metrics_text)(void *arg);
    /* The status page's JSON (GET /v1/status; GET /v1/rates of the last
     * `seconds`), appended to out. */
    void (*status_json)(void *arg, struct buf *out);
    void (*rates_json)(void *arg, int seconds, struct buf *out);
    /* A front may have become idle (an answer written, a connection
     * closed): a drain ends once no check is in flight and every front is
     * idle. */
    void (*maybe_idle)(void *arg);
    void *arg;
};

/* The first member of each front's instance: the worker holds instances by
 * this and calls their ops through it. */
struct front {
    const struct front_ops *ops;
};

struct front_ops {
    const char *name; /* for messages: "http", "grpc" */
    /* Whether cfg asks for this front. Read when a worker is made: the
     * listening addresses need a restart, as reload.c says. */
    int (*enabled)(const struct config *cfg);
    /* Makes the front on host's loop from host->core->config: opens its
     * listening sockets (listener.h), not yet accepting. first: the same
     * front of loop 0, whose unix sockets the other loops share; NULL on
     * loop 0. Returns the instance (the worker owns it: ops->free), or NULL
     * with a message, having released what it made. */
    struct front *(*new)(const struct front_host *host, const struct front *first, char *err,
                         size_t errlen);
    /* Starts accepting on the sockets new opened (held back, in a USR2
     * hand-over, until the process is ready). -1 if libevent cannot watch
     * them. */
    int (*start)(struct front *f);
    /* A reload, on the worker's loop: the front's limits and token apply,
     * to open connections too. */
    void (*apply_config)(struct front *f, const struct config *cfg);
    /* Stops accepting; open connections end once their answers are
     * written; each ends its connections and calls host->maybe_idle. */
    void (*drain)(struct front *f);
    /* Nothing left to answer or to write. */
    int (*idle)(const struct front *f);
    /* Closes every connection (pending calls cancelled) and the listening
     * sockets. Called with the instance already out of the worker's array,
     * so that maybe_idle from a closing connection does not see it. */
    void (*free)(struct front *f);
    /* The access log's status of a verdict in this front's numbering, or
     * NULL; the worker lends the core the first front's that has one. */
    core_status_fn log_status;
};

/* Adds (want) or removes an event of a connection on its loop, tracking it
 * in *added so that an unchanged wish costs no epoll_ctl. Failing means
 * libevent is out of memory: the connection would then only end at its
 * timer, or never: aborts like any allocation. */
void front_event_want(struct event *ev, int *added, int want);

#endif
