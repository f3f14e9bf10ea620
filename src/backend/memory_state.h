/* SPDX-License-Identifier: Apache-2.0 */
/*
 * memory_state.h: `state_file:`, the in-memory store kept across a stop
 * (memory_state.c): read at start, written every `state_interval` by a
 * thread of its own, and once more at a graceful stop.
 */
#ifndef RATELIMITD_MEMORY_STATE_H
#define RATELIMITD_MEMORY_STATE_H

#include <stdint.h>

#include "backend/backend_memory.h"
#include "config/config.h"
#include "lib/log.h"

struct memory_state;

/* What /metrics shows of the writes. */
struct memory_state_stats {
    uint64_t writes_ok, writes_failed;
    int64_t last_duration_us; /* the last write, snapshot to directory fsync */
    uint64_t last_bytes;      /* the last image written */
};

/* What the file carries besides the store's counters (the run-time
 * overrides, core/overrides.h, which the backend does not know): save
 * appends their bytes (any thread: the writer's), load reads them back at
 * start. */
struct memory_state_extra {
    void (*save)(void *arg, struct buf *out);
    void (*load)(void *arg, const void *data, size_t len);
    void *arg;
};

/*
 * With cfg->state_file set: reads the file into store (none: an empty
 * start; a truncated, corrupted or foreign one: a warning and an empty
 * start), then starts the thread that writes it every state_interval.
 * *out NULL when cfg has none. -1 with a message, nothing started, when
 * the file's directory takes no file: an operator who asked for counters
 * that survive a stop learns now, not after the next one. cfg, store and
 * log must outlive the state.
 */
int memory_state_start(struct backend_memory_store *store, const struct config *cfg,
                       const struct logger *log, const struct memory_state_extra *extra,
                       struct memory_state **out, char *err, size_t errlen) RL_WUR;

/* Stops the thread; with final (a graceful stop, after the drain, so that
 * every check answered is in it) writes the file once more. Frees ms; NULL
 * is a no-op. */
void memory_state_stop(struct memory_state *ms, int final);

/* The counts so far (any thread). */
void memory_state_stats(struct memory_state *ms, struct memory_state_stats *out);

#endif
