/*
 * worker.h: one event loop and everything that lives on it: the fronts'
 * connections, a backend connection, the failure_mode local store, the deny
 * cache and a metrics shard. Nothing here is shared with another worker, so
 * the hot path takes no lock; what is process-wide lives in struct server.
 */
#ifndef RATELIMITD_WORKER_H
#define RATELIMITD_WORKER_H

#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "log.h"

struct event_base;
struct backend;
struct local_store;
struct deny_cache;
struct metrics;
struct http;
struct server;

struct worker {
    struct server *srv;
    unsigned id;
    struct event_base *base;
    const struct logger *log;
    struct config *config; /* this worker's current snapshot (one reference) */
    struct backend *backend;
    struct local_store *local; /* failure_mode local (and backend: memory) */
    struct deny_cache *deny;   /* NULL: no deny cache */
    struct metrics *metrics;   /* this worker's shard */
    struct http *http;
    size_t inflight;        /* checks started and not yet answered */
    size_t backend_pending; /* backend calls not yet completed */
    int draining;           /* no new checks; stop once idle */
};

/* Makes worker id on base from srv->config: its backend (not started), its
 * store and metrics, and its HTTP front. On error returns -1 with a message;
 * worker_fini then frees what was made. */
int worker_init(struct worker *w, struct server *srv, unsigned id, struct event_base *base,
                char *err, size_t errlen) RL_WUR;

/* Starts the backend (connecting to Redis). */
void worker_start(struct worker *w);

/* A reload: the worker takes its own reference to cfg; checks in flight keep
 * the snapshot they started with; limits apply to open connections. */
void worker_set_config(struct worker *w, struct config *cfg);

/* Stops taking new checks; the loop exits once every check in flight is
 * answered and written. */
void worker_drain(struct worker *w);

/* Frees everything the worker holds (not the struct). */
void worker_fini(struct worker *w);

/* Why the daemon take checks right now ("shutting_down",
 * "redis_unavailable"), or NULL when ready. */
const char *worker_unready_reason(const struct worker *w);

/* The whole process's metrics as Prometheus text (every worker's shard
 * summed); the caller frees it. */
char *worker_metrics_text(struct worker *w);

/* The front tells the worker it may have become idle (an answer written, a
 * connection closed): a drain ends once no check is in flight and every
 * front is idle. */
void worker_maybe_idle(struct worker *w);

#endif
