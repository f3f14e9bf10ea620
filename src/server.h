/* SPDX-License-Identifier: Apache-2.0 */
/*
 * server.h: the process-wide state: the policy file and its current
 * snapshot, the main event loop (signals, reloads, the file watch, systemd
 * notification) and the workers. What one event loop owns lives in struct
 * worker (worker.h). There are no other mutable globals.
 */
#ifndef RATELIMITD_SERVER_H
#define RATELIMITD_SERVER_H

#include <stddef.h>
#include <stdint.h>

#include "config/config.h"
#include "lib/log.h"

struct event_base;
struct backend_shared;
struct event;
struct overrides;
struct watch;
struct handover;
struct listen_fds;
struct notify;
struct status;
struct worker;

struct server {
    struct event_base *base; /* the main loop; worker 0 runs on it */
    struct logger log;
    int log_level_from_cli; /* --log-level given: the file's log_level is ignored */
    const char *config_path;
    char **argv;           /* as main got them: what a hand-over starts again */
    struct config_cli cli; /* what the options say over the policy file */
    struct config *config; /* current snapshot; one reference held here */
    struct watch *watch;   /* NULL unless `watch: true` */
    struct notify *notify;
    struct status *status;    /* the status page's history (status.h) */
    int64_t config_loaded_us; /* wall clock of the last good load, for /metrics */
    uint64_t hash_seed;       /* secret: keys the in-memory tables */
    /* What every worker's backends share (backend/registry.h): the
     * in-memory store of failure_mode local and backend: memory, so that
     * limits stay exact however requests are spread. */
    struct backend_shared *backends;
    /* Run-time overrides (core/overrides.h), read by every worker; the
     * main loop removes the expired ones every second (sweep_ev). */
    struct overrides *overrides;
    struct event *sweep_ev;
    int state_pipe[2];      /* a worker's backend readiness changed: a byte */
    struct event *state_ev; /* reads state_pipe[0] on the main loop */
    /* Every listening socket, passed at start or bound, by field: what a
     * USR2 hand-over passes on (handover.h). */
    struct listen_fds *sockets;
    struct handover *handover;
    int accept_held; /* not ready yet on passed sockets (a hand-over, systemd): not accepting */
    size_t nworkers;
    struct worker *workers; /* nworkers of them */
    int draining;           /* SIGTERM seen */
    /* Process-wide counts behind max_connections and max_inflight, taken
     * and released by every worker with core_count_take/_release (core.h). */
    size_t connections;     /* counted connections open on `listen` */
    size_t backend_pending; /* backend calls not yet completed */
};

/* True when every worker's backend is ready (systemd READY=1, /readyz).
 * Any thread. */
int server_ready(const struct server *srv);

#endif
