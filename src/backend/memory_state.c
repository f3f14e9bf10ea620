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
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lib/util.h"

struct memory_state {
    struct backend_memory_store *store;
    const char *path; /* the config's, which outlives this */
    int64_t interval_us;
    const struct logger *log;
    pthread_t thread;
    int stop_pipe[2]; /* a byte (or the close) ends the writer */
    /* The image's room, kept from write to write (one write at a time:
     * the thread's, then the last one after it is joined), so that the
     * snapshot, under the store's lock, neither grows it nor faults its
     * pages in: a first snapshot is several times slower (locked_us in
     * the debug line). Costs one image's size for the process's life. */
    struct buf image;
    pthread_mutex_t mu; /* guards stats */
    struct memory_state_stats stats;
    struct memory_state_extra extra; /* save NULL: none */
};

/* Snapshot, write, count; says why on failure (every one: a write every
 * state_interval at most, and each failure is news). */
static void save(struct memory_state *ms, const char *why)
{
    int64_t t0 = util_monotonic_us();
    struct buf *b = &ms->image;
    b->len = 0;
    int64_t locked; /* what decisions waited, at most */
    struct buf extra = {0};
    if (ms->extra.save)
        ms->extra.save(ms->extra.arg, &extra);
    size_t n = backend_memory_store_snapshot(ms->store, b, &locked, &extra);
    buf_free(&extra);
    char err[RL_ERRLEN];
    int rc = store_file_write(ms->path, b->data, b->len, err, sizeof err);
    int64_t took = util_monotonic_us() - t0;
    pthread_mutex_lock(&ms->mu);
    if (rc == 0) {
        ms->stats.writes_ok++;
        ms->stats.last_duration_us = took;
        ms->stats.last_bytes = b->len;
    } else {
        ms->stats.writes_failed++;
    }
    pthread_mutex_unlock(&ms->mu);
    char keys[24], us[24], lock_us[24];
    snprintf(keys, sizeof keys, "%zu", n);
    snprintf(us, sizeof us, "%lld", (long long)took);
    snprintf(lock_us, sizeof lock_us, "%lld", (long long)locked);
    if (rc == 0)
        log_event(ms->log, LOG_LVL_DEBUG, "state file written", "path", ms->path, "keys", keys,
                  "us", us, "locked_us", lock_us, "at", why, NULL);
    else
        log_event(ms->log, LOG_LVL_WARN, "state file not written", "error", err, "at", why, NULL);
}

/* Waits out each interval on a pipe that memory_state_stop writes to:
 * poll's relative timeout measured against the monotonic clock, not a
 * condition variable's absolute deadline (which libfaketime, the tests'
 * frozen wall clock, turns into a busy loop). */
static void *writer_main(void *arg)
{
    struct memory_state *ms = arg;
    int64_t next = util_monotonic_us() + ms->interval_us;
    for (;;) {
        int64_t left = next - util_monotonic_us();
        struct pollfd p = {.fd = ms->stop_pipe[0], .events = POLLIN};
        int rc = left > 0 ? poll(&p, 1, (int)((left + 999) / 1000)) : 0;
        if (rc > 0)
            return NULL; /* told to stop */
        if (rc < 0 && errno != EINTR) {
            /* Cannot wait (ENOMEM): no busy loop of writes; the stop's
             * write still comes, and the operator hears of the gap. */
            log_event(ms->log, LOG_LVL_WARN, "state file: periodic writes stopped", "error",
                      strerror(errno), NULL);
            return NULL;
        }
        if (util_monotonic_us() < next)
            continue;
        save(ms, "interval");
        next = util_monotonic_us() + ms->interval_us;
    }
}

/* The start-up read: never fatal, every outcome logged. */
static void restore(struct memory_state *ms)
{
    struct buf b = {0};
    char err[RL_ERRLEN];
    int rc = store_file_read(ms->path, &b, err, sizeof err);
    struct store_file_counts c = {0, 0, NULL, 0};
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
        if (c.extra_len && ms->extra.load)
            ms->extra.load(ms->extra.arg, c.extra, c.extra_len);
    }
    buf_free(&b);
}

int memory_state_start(struct backend_memory_store *store, const struct config *cfg,
                       const struct logger *log, const struct memory_state_extra *extra,
                       struct memory_state **out, char *err, size_t errlen)
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
    if (extra)
        ms->extra = *extra;
    restore(ms);
    pthread_mutex_init(&ms->mu, NULL);
    int rc = pipe2(ms->stop_pipe, O_CLOEXEC) < 0 ? errno : 0;
    if (rc == 0 && (rc = pthread_create(&ms->thread, NULL, writer_main, ms)) != 0)
        close(ms->stop_pipe[0]), close(ms->stop_pipe[1]);
    if (rc != 0) {
        snprintf(err, errlen, "state_file: cannot start its writer: %s", strerror(rc));
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
    /* Closing the write end wakes the poll as a byte would, and cannot
     * fail for a full pipe. */
    close(ms->stop_pipe[1]);
    pthread_join(ms->thread, NULL);
    close(ms->stop_pipe[0]);
    if (final)
        save(ms, "stop");
    buf_free(&ms->image);
    pthread_mutex_destroy(&ms->mu);
    free(ms);
}

void memory_state_stats(struct memory_state *ms, struct memory_state_stats *out)
{
    pthread_mutex_lock(&ms->mu);
    *out = ms->stats;
    pthread_mutex_unlock(&ms->mu);
}
