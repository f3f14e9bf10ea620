/*
 * server.h: the one struct that holds the daemon's mutable state. Every
 * module gets it (or the part it needs) passed explicitly; there are no other
 * mutable globals, so that worker threads can later each own one.
 */
#ifndef RATELIMITD_SERVER_H
#define RATELIMITD_SERVER_H

#include <stddef.h>

#include "config.h"
#include "log.h"

struct event_base;
struct backend;
struct http;
struct watch;
struct notify;
struct metrics;
struct local_store;

struct server {
    struct event_base *base;
    struct logger log;
    int log_level_from_cli; /* --log-level given: the file's log_level is ignored */
    const char *config_path;
    struct config *config; /* current snapshot; one reference held here */
    struct backend *backend;
    struct http *http;
    struct watch *watch; /* NULL unless `watch: true` */
    struct notify *notify;
    struct metrics *metrics;
    struct local_store *local; /* state for failure_mode local */
    int64_t config_loaded_us; /* wall clock of the last good load, for /metrics */
    size_t inflight; /* checks accepted and not yet answered */
    size_t writing;  /* answers handed to libevent and not yet written */
    size_t redis_pending; /* calls sent to Redis and not yet completed */
    int draining;    /* SIGTERM seen: no new checks, exit when inflight is 0 */
};

#endif
