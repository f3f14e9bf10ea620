/*
 * worker.h: one event loop and everything that lives on it: the fronts'
 * connections, a backend connection, the failure_mode local store, the deny
 * cache and a metrics shard. Nothing here is shared with another worker, so
 * the hot path takes no lock; what is process-wide lives in struct server
 * (the in-memory store under its lock, the counts behind max_connections
 * and max_inflight).
 */
#ifndef RATELIMITD_WORKER_H
#define RATELIMITD_WORKER_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "config/config.h"
#include "front/front.h"
#include "lib/log.h"

struct event_base;
struct backend;
struct local_store;
struct deny_cache;
struct metrics;
struct server;

struct worker {
    struct server *srv;
    unsigned id; /* 0 runs on the main thread's loop */
    struct event_base *base;
    const struct logger *log;
    struct config *config; /* this worker's current snapshot (one reference) */
    struct backend *backend;
    int backend_up;          /* backend_ready, kept for other threads (atomic access) */
    struct deny_cache *deny; /* NULL: no deny cache */
    struct metrics *metrics; /* this worker's shard */
    /* An instance of front_all[i] (front.h), each with its listening
     * sockets; NULL: not enabled by the config. */
    struct front *fronts[FRONT_MAX];
    size_t inflight;            /* checks started and not yet answered */
    int draining;               /* no new checks; stop once idle */
    int64_t reset_seen_us;      /* monotonic: the last reset announcement heard */
    struct log_limit late_log;  /* "redis deadline passed" */
    struct log_limit error_log; /* "redis error" */

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
};

/* Makes worker id on base from srv->config: its backend (not started), its
 * metrics shard and every front the config enables, in front_all's order
 * (the local store is the server's). On error returns -1 with a message;
 * worker_fini then frees what was made. */
int worker_init(struct worker *w, struct server *srv, unsigned id, struct event_base *base,
                char *err, size_t errlen) RL_WUR;

/* Starts the backend (connecting to Redis) and, for every worker but 0, a
 * thread running its loop. Returns -1 with a message if a thread cannot
 * be started. */
int worker_start(struct worker *w, char *err, size_t errlen) RL_WUR;

/* From the main thread. A reload: the worker takes its own reference to
 * cfg on its own loop; checks in flight keep the snapshot they started
 * with; limits apply to open connections. */
void worker_post_config(struct worker *w, struct config *cfg);

/* From the main thread. Stops taking new checks; the worker's loop exits
 * once every check in flight is answered and written. */
void worker_post_drain(struct worker *w);

/* Waits for the worker's thread to end (none: returns at once). */
void worker_join(struct worker *w);

/* Frees everything the worker holds (not the struct). */
void worker_fini(struct worker *w);

/* Why the daemon take checks right now ("shutting_down",
 * "redis_unavailable"), or NULL when ready. */
const char *worker_unready_reason(const struct worker *w);

/* The whole process's metrics as Prometheus text (every worker's shard
 * summed); the caller frees it. */
char *worker_metrics_text(struct worker *w);

/* A reset of (policy, key) was announced or made here: drops the key from
 * this worker's deny cache and from the process's failure_mode local store,
 * and remembers when (a denial of a check sent before is not cached).
 * policy NULL: announcements may have been missed: empties the deny cache.
 * On the worker's own thread. */
void worker_forget_key(struct worker *w, const char *policy, const char *key, size_t keylen);

/* Adds (want) or removes an event of a front's connection on the worker's
 * loop, tracking it in *added so that an unchanged wish costs no
 * epoll_ctl. Failing means libevent is out of memory: the connection would
 * then only end at its timer, or never: aborts like any allocation. */
struct event;
void worker_event_want(struct event *ev, int *added, int want);

/* The front tells the worker it may have become idle (an answer written, a
 * connection closed): a drain ends once no check is in flight and every
 * front is idle. */
void worker_maybe_idle(struct worker *w);

#endif
