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

#include "config.h"
#include "log.h"

struct event_base;
struct watch;
struct notify;
struct worker;

struct server {
    struct event_base *base; /* the main loop; worker 0 runs on it */
    struct logger log;
    int log_level_from_cli; /* --log-level given: the file's log_level is ignored */
    const char *config_path;
    struct config *config; /* current snapshot; one reference held here */
    struct watch *watch;   /* NULL unless `watch: true` */
    struct notify *notify;
    int64_t config_loaded_us; /* wall clock of the last good load, for /metrics */
    uint64_t hash_seed;       /* secret: keys the in-memory tables */
    size_t nworkers;
    struct worker *workers; /* nworkers of them */
    int draining;           /* SIGTERM seen */
};

/* True when every worker's backend is ready (systemd READY=1, /readyz). */
int server_ready(const struct server *srv);

#endif
