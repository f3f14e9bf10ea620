/* SPDX-License-Identifier: Apache-2.0 */
/*
 * memory_state.c: `state_file:` (memory_state.h): when the in-memory store
 * is read from and written to its file, and what is said about it.
 *
 * Owns: the writer thread and its schedule, the start-up read and its
 * warnings, the start-up error for a directory that takes no file, the
 * write counts for /metrics.
 * Does not own: the format or the atomic write (limiter/store_file.c), the
 * store's lock (backend_memory.c takes it for the snapshot), signals
 * (main.c calls memory_state_stop after the drain).
 *
 * A thread of its own rather than a timer on the main loop: worker 0 runs
 * on that loop, and the write (an fsync of megabytes) would stall its
 * requests. Decisions wait only for the snapshot, taken under the store's
 * lock without I/O; the bytes are written with the lock free.
 */
#include "backend/memory_state.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "lib/util.h"

struct memory_state {
    struct backend_memory_store *store;
    const char *path; /* the config's, which outlives this */
    int64_t interval_us;
    const struct logger *log;
    pthread_t thread;
    pthread_mutex_t mu; /* guards stop and stats */
    pthread_cond_t wake;
    int stop;
    struct memory_state_stats stats;
};

/* Snapshot, write, count; says why on failure (every one: a write every
 * state_interval at most, and each failure is news). */
static void save(struct memory_state *ms, const char *why)
{
    int64_t t0 = util_monotonic_us();
    struct buf b = {0};
    size_t n = backend_memory_store_snapshot(ms->store, &b);
    char err[RL_ERRLEN];
    int rc = store_file_write(ms->path, b.data, b.len, err, sizeof err);
    int64_t took = util_monotonic_us() - t0;
    pthread_mutex_lock(&ms->mu);
    if (rc == 0) {
        ms->stats.writes_ok++;
        ms->stats.last_duration_us = took;
        ms->stats.last_bytes = b.len;
    } else {
        ms->stats.writes_failed++;
    }
    pthread_mutex_unlock(&ms->mu);
    char keys[24], us[24];
    snprintf(keys, sizeof keys, "%zu", n);
    snprintf(us, sizeof us, "%lld", (long long)took);
    if (rc == 0)
        log_event(ms->log, LOG_LVL_DEBUG, "state file written", "path", ms->path, "keys", keys,
                  "us", us, "at", why, NULL);
    else
        log_event(ms->log, LOG_LVL_WARN, "state file not written", "error", err, "at", why, NULL);
    buf_free(&b);
}

static void *writer_main(void *arg)
{
    struct memory_state *ms = arg;
    pthread_mutex_lock(&ms->mu);
    while (!ms->stop) {
        /* The condition variable runs on CLOCK_MONOTONIC: a wall clock
         * set back must not stop the writes. */
        struct timespec at;
        clock_gettime(CLOCK_MONOTONIC, &at);
        int64_t ns = at.tv_nsec + (ms->interval_us % 1000000) * 1000;
        at.tv_sec += (time_t)(ms->interval_us / 1000000 + ns / 1000000000);
        at.tv_nsec = (long)(ns % 1000000000);
        int rc = 0;
        while (!ms->stop && rc != ETIMEDOUT)
            rc = pthread_cond_timedwait(&ms->wake, &ms->mu, &at);
        if (ms->stop)
            break;
        pthread_mutex_unlock(&ms->mu);
        save(ms, "interval");
        pthread_mutex_lock(&ms->mu);
    }
    pthread_mutex_unlock(&ms->mu);
    return NULL;
}

/* The start-up read: never fatal, every outcome logged. */
static void restore(struct memory_state *ms)
{
    struct buf b = {0};
    char err[RL_ERRLEN];
    int rc = store_file_read(ms->path, &b, err, sizeof err);
    struct store_file_counts c = {0, 0};
    if (rc == 1) {
        log_event(ms->log, LOG_LVL_INFO, "no state file: starting empty", "path", ms->path, NULL);
    } else if (rc < 0 ||
               backend_memory_store_restore(ms->store, b.data, b.len, &c, err, sizeof err) < 0) {
        log_event(ms->log, LOG_LVL_WARN, "state file unusable: starting empty", "path", ms->path,
                  "error", err, NULL);
    } else {
        char loaded[24], expired[24];
        snprintf(loaded, sizeof loaded, "%zu", c.loaded);
        snprintf(expired, sizeof expired, "%zu", c.expired);
        log_event(ms->log, LOG_LVL_INFO, "state file read", "path", ms->path, "keys", loaded,
                  "expired", expired, NULL);
    }
    buf_free(&b);
}

int memory_state_start(struct backend_memory_store *store, const struct config *cfg,
                       const struct logger *log, struct memory_state **out, char *err,
                       size_t errlen)
{
    *out = NULL;
    if (!cfg->state_file)
        return 0;
    char why[RL_ERRLEN];
    if (store_file_probe(cfg->state_file, why, sizeof why) < 0)
        return snprintf(err, errlen, "state_file: %s", why), -1;
    struct memory_state *ms = xcalloc(1, sizeof *ms);
    ms->store = store, ms->path = cfg->state_file, ms->log = log;
    ms->interval_us = cfg->state_interval_us;
    restore(ms);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&ms->wake, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&ms->mu, NULL);
    int rc = pthread_create(&ms->thread, NULL, writer_main, ms);
    if (rc != 0) {
        snprintf(err, errlen, "state_file: cannot start its writer: %s", strerror(rc));
        pthread_cond_destroy(&ms->wake);
        pthread_mutex_destroy(&ms->mu);
        free(ms);
        return -1;
    }
    *out = ms;
    return 0;
}

void memory_state_stop(struct memory_state *ms, int final)
{
    if (!ms)
        return;
    pthread_mutex_lock(&ms->mu);
    ms->stop = 1;
    pthread_cond_signal(&ms->wake);
    pthread_mutex_unlock(&ms->mu);
    pthread_join(ms->thread, NULL);
    if (final)
        save(ms, "stop");
    pthread_cond_destroy(&ms->wake);
    pthread_mutex_destroy(&ms->mu);
    free(ms);
}

void memory_state_stats(struct memory_state *ms, struct memory_state_stats *out)
{
    pthread_mutex_lock(&ms->mu);
    *out = ms->stats;
    pthread_mutex_unlock(&ms->mu);
}
