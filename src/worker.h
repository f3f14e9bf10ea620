/* SPDX-License-Identifier: Apache-2.0 */
/*
 * worker.h: one event loop and everything that lives on it: the fronts'
 * connections and the core's state (struct core: a backend connection, the
 * fallback of failure_mode local, the deny cache, a metrics shard). None of
 * it is another worker's; the locks the hot path still takes are the
 * metrics shard's mutex (uncontended but for /metrics summing the shards,
 * metrics.c) and, with the memory backend or failure_mode local, the
 * in-memory store's (backend_memory.c). What is process-wide lives in
 * struct server (the in-memory store, the counts behind max_connections
 * and max_inflight).
 */
#ifndef RATELIMITD_WORKER_H
#define RATELIMITD_WORKER_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "config/config.h"
#include "core/core.h"
#include "front/registry.h"
#include "lib/log.h"

struct event_base;
struct server;

/* A drain's backstop, past redis.timeout: by then every check has its
 * answer, and this is the time left to write them. So the longest drain is
 * CONFIG_REDIS_TIMEOUT_MAX_US + WORKER_DRAIN_MAX_S, which the systemd unit's
 * TimeoutStopSec and docker/compose.yaml's stop_grace_period must exceed
 * (test_docs checks them). The worker sets it for every front. */
#define WORKER_DRAIN_MAX_S 5

struct worker {
    struct server *srv;
    unsigned id; /* 0 runs on the main thread's loop */
    /* What the core needs of this loop: the loop itself, the logger, the
     * current config snapshot (one reference), the backend and the
     * fallback, the deny cache, the metrics shard, the checks in flight. */
    struct core core;
    int backend_up; /* backend_ready, kept for other threads (atomic access) */
    /* An instance of front_all[i] (registry.h), each with its listening
     * sockets; NULL: not enabled by the config. */
    struct front *fronts[FRONT_MAX];
    struct front_host host; /* what the fronts are lent: the core, the counts, callbacks */
    int draining;           /* no new checks; stop once idle */

    /* From the main thread to a worker with a thread of its own: a new
     * config snapshot or a drain, under the lock, then a byte on the pipe
     * wakes its loop. */
    pthread_t thread;
    int has_thread;
    int wake[2]; /* pipe: [0] read by the worker's loop, [1] written by main */
    struct event *wake_ev;
    pthread_mutex_t mail_lock;
    struct config *mail_config; /* a reference, or NULL */
    int mail_drain;
    int mail_accept; /* accepting held back at start begins */
};

/* Every worker's metrics shard summed into a new set (the caller frees
 * it), as /metrics and the status page read them. srv_arg: the struct
 * server. Any thread. */
struct metrics *worker_metrics_sum(void *srv_arg);

/* Makes worker id on base from srv->config: its core (backend, not
 * started; the fallback on the server's in-memory store; deny cache;
 * metrics shard) and every front the config enables, in front_all's order.
 * On error returns -1 with a message;
 * worker_fini then frees what was made. */
int worker_init(struct worker *w, struct server *srv, unsigned id, struct event_base *base,
                char *err, size_t errlen) RL_WUR;

/* Starts the backend (connecting to Redis), accepting unless held back
 * (accept 0: a USR2 hand-over's new process waits until it is ready;
 * worker_post_accept) and, for every worker but 0, a thread running its
 * loop. Returns -1 with a message if a thread cannot be started or the
 * sockets cannot be watched. */
int worker_start(struct worker *w, int accept, char *err, size_t errlen) RL_WUR;

/* From the main thread. A reload: the worker takes its own reference to
 * cfg on its own loop; checks in flight keep the snapshot they started
 * with; limits apply to open connections. */
void worker_post_config(struct worker *w, struct config *cfg);

/* From the main thread. Stops taking new checks; the worker's loop exits
 * once every check in flight is answered and written. */
void worker_post_drain(struct worker *w);

/* From the main thread. Starts accepting, held back at worker_start. */
void worker_post_accept(struct worker *w);

/* Waits for the worker's thread to end (none: returns at once). */
void worker_join(struct worker *w);

/* Frees everything the worker holds (not the struct). */
void worker_fini(struct worker *w);

#endif
