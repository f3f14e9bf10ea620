/*
 * server.h: the process-wide state: the policy file and its current
 * snapshot, the main event loop (signals, reloads, the file watch, systemd
 * notification) and the workers. What one event loop owns lives in struct
 * worker (worker.h). There are no other mutable globals.
 */
#ifndef RATELIMITD_SERVER_H
#define RATELIMITD_SERVER_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "config/config.h"
#include "lib/log.h"

struct event_base;
struct watch;
struct notify;
struct worker;

struct server {
    struct event_base *base; /* the main loop; worker 0 runs on it */
    struct logger log;
    int log_level_from_cli; /* --log-level given: the file's log_level is ignored */
    const char *config_path;
    const char *envoy_config_cli; /* --envoy-config DIR; NULL: the file's envoy_config */
    struct config *config;        /* current snapshot; one reference held here */
    struct watch *watch;          /* NULL unless `watch: true` */
    struct notify *notify;
    int64_t config_loaded_us; /* wall clock of the last good load, for /metrics */
    uint64_t hash_seed;       /* secret: keys the in-memory tables */
    /* The in-memory store of failure_mode local and backend: memory, shared
     * by every worker so that limits stay exact however requests are
     * spread; local_lock serialises whole decisions (every tier of a
     * request at once). */
    struct local_store *local;
    pthread_mutex_t local_lock;
    int state_pipe[2];      /* a worker's backend readiness changed: a byte */
    struct event *state_ev; /* reads state_pipe[0] on the main loop */
    size_t nworkers;
    struct worker *workers; /* nworkers of them */
    int draining;           /* SIGTERM seen */
    /* Process-wide counts behind max_connections and max_inflight, taken
     * and released by every worker with server_count_take/_release (two
     * atomic operations per connection or Redis call: 0.3 to 0.5 % of the
     * daemon's samples with 2 workers, bench/memory_workers.sh; a share per
     * worker would be free but refuse below the value, as SO_REUSEPORT
     * spreads connections unevenly). */
    size_t connections;     /* counted connections open on `listen` */
    size_t backend_pending; /* backend calls not yet completed */
};

/* True when every worker's backend is ready (systemd READY=1, /readyz).
 * Any thread. */
int server_ready(const struct server *srv);

/* Takes one unit of *count if fewer than max are taken, so that the
 * workers together never hold more than max: returns 1 (taken; give it
 * back with server_count_release) or 0. Any thread. */
int server_count_take(size_t *count, size_t max) RL_WUR;
void server_count_release(size_t *count);

/* Decides req in the shared in-memory store (server.local), under its
 * lock. Any thread. */
struct tier_result;
struct check_request;
void server_local_decide(struct server *srv, const char *key_prefix,
                         const struct check_request *req, int64_t now_us, struct tier_result *out);

#endif
