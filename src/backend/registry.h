/* SPDX-License-Identifier: Apache-2.0 */
/*
 * registry.h: every backend the daemon has (registry.c), which one a config
 * snapshot chooses, and what the backends of every worker share. The
 * worker makes its backend here and main.c the process's shared state, so
 * that neither names a backend; the core sees only core/backend.h.
 */
#ifndef RATELIMITD_BACKEND_REGISTRY_H
#define RATELIMITD_BACKEND_REGISTRY_H

#include <stddef.h>
#include <stdint.h>

#include "config/config.h"
#include "core/backend.h"
#include "lib/log.h"

struct event_base;
struct metrics;
struct memory_state_extra;
struct memory_state_stats;

/* What the backends of every worker share, made once per process: the
 * in-memory store of `backend: memory` and of failure_mode local's
 * fallback, so that limits stay exact however requests are spread. */
struct backend_shared;

/* From cfg's local_max_keys, its tables keyed with hash_seed (secret),
 * and its state_file read and then written every state_interval
 * (memory_state.h), logged to log. NULL with a message when the
 * state_file's directory takes no file. extra (may be NULL) is what the
 * state_file carries besides the counters (memory_state.h), copied. cfg
 * and log must outlive it. */
struct backend_shared *backend_registry_shared_new(const struct config *cfg, uint64_t hash_seed,
                                                   const struct logger *log,
                                                   const struct memory_state_extra *extra,
                                                   char *err, size_t errlen) RL_WUR;

/* The graceful stop, once every worker has drained and ended: writes the
 * state_file (if any) a last time, so that every check answered is in it. */
void backend_registry_shared_stopped(struct backend_shared *s);

/* A USR2 hand-over's halves (handover.h): the shared store's image written
 * whole to fd (the old process, drained), or read from fd to its end into
 * the store (the new one, before it accepts; *loaded: the live entries).
 * Blocking; fd not closed. 0, or -1 with a message (a failed load changes
 * nothing). */
int backend_registry_shared_dump(struct backend_shared *s, int fd, char *err, size_t errlen) RL_WUR;
int backend_registry_shared_load(struct backend_shared *s, int fd, size_t *loaded, char *err,
                                 size_t errlen) RL_WUR;

/* The state_file's write counts into out: 1, or 0 when there is none. */
int backend_registry_state_stats(struct backend_shared *s, struct memory_state_stats *out);

/* Every backend made on s must be freed first; writes no state_file.
 * NULL is a no-op. */
void backend_registry_shared_free(struct backend_shared *s);

/* What a backend is made from: a worker's loop, log and metrics shard, and
 * the process's shared state; each must outlive the backend. */
struct backend_env {
    struct event_base *base;
    const struct logger *log;
    struct metrics *metrics;
    struct backend_shared *shared;
};

/* The backend cfg chooses, made on env. NULL with a message. */
struct backend *backend_registry_new(const struct backend_env *env, const struct config *cfg,
                                     char *err, size_t errlen) RL_WUR;

/* failure_mode local's fallback: the same algorithms in env's shared
 * store, through the backend interface. Never NULL. */
struct backend *backend_registry_fallback_new(const struct backend_env *env);

/* The script built into this binary (the first row's that has one). */
const char *backend_registry_script(void);

#endif
