/*
 * front.h: what the worker knows of a front, a protocol served on listening
 * sockets of its own (HTTP/1.1 on listen and admin_listen, gRPC on
 * grpc_listen): one ops table per front, and the registry of every front
 * (front.c). The worker makes one instance of each front its config enables
 * and loops over them for a reload, a drain, the end of a drain and the
 * end; it never names a front.
 *
 * Adding a front: a folder under src/front/ whose instance embeds struct
 * front and whose ops table is one row of front_all (front.c).
 *
 * Owns the contract between the worker and its fronts; not the sockets'
 * plumbing (listener.h), not the protocols (front/<name>/).
 */
#ifndef RATELIMITD_FRONT_H
#define RATELIMITD_FRONT_H

#include <stddef.h>

struct config;
struct worker;
struct front_ops;

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
    /* Makes the front of worker w from w->config: opens its listening
     * sockets (listener.h) and starts accepting. first: the same front of
     * worker 0, whose unix sockets the other workers share; NULL on worker
     * 0. Returns the instance (the worker owns it: ops->free), or NULL
     * with a message, having released what it made. */
    struct front *(*new)(struct worker *w, const struct front *first, char *err, size_t errlen);
    /* A reload, on the worker's loop: the front's limits and token apply,
     * to open connections too. */
    void (*apply_config)(struct front *f, const struct config *cfg);
    /* Stops accepting; open connections end once their answers are
     * written; each ends its connections and calls worker_maybe_idle. */
    void (*drain)(struct front *f);
    /* Nothing left to answer or to write. */
    int (*idle)(const struct front *f);
    /* Closes every connection (pending calls cancelled) and the listening
     * sockets. Called with the instance already out of the worker's array,
     * so that worker_maybe_idle from a closing connection does not see it. */
    void (*free)(struct front *f);
};

/* Room for the rows of front_all in a worker's array (front.c checks it). */
#define FRONT_MAX 4

/* Every front, in the order they are made; NULL-terminated. A worker's
 * fronts[i] is an instance of front_all[i] (NULL: not enabled). */
extern const struct front_ops *const front_all[];

#endif
