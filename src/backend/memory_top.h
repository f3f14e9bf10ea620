/* SPDX-License-Identifier: Apache-2.0 */
/*
 * memory_top.h: where `backend: memory` keeps the sketches of the heaviest
 * keys (core/top_keys.h) its workers hand over: in the process, under a
 * lock of its own (not the decisions' store lock), for TOP_KEYS_TTL_S, so
 * that a query on any worker merges every worker's sketches.
 *
 * Owns the board and its lock. Does not own the sketches' text (it keeps
 * bytes) nor the window rule (the query asks for minutes).
 */
#ifndef RATELIMITD_MEMORY_TOP_H
#define RATELIMITD_MEMORY_TOP_H

#include <stddef.h>
#include <stdint.h>

#include "core/backend.h"

struct memory_top;

struct memory_top *memory_top_new(void);
void memory_top_free(struct memory_top *t); /* NULL is a no-op */

/* Keeps a copy of member's sketches of (policy, minute), replacing its
 * earlier ones, and forgets every minute older than TOP_KEYS_TTL_S before
 * minute. Any thread. */
void memory_top_put(struct memory_top *t, const char *policy, int64_t minute, const char *member,
                    const char *data, size_t len);

/* Calls done at once with every member's sketches of policy's minutes
 * lo .. hi. Any thread. */
void memory_top_get(struct memory_top *t, const char *policy, int64_t lo, int64_t hi,
                    backend_top_done_fn done, void *arg);

#endif
