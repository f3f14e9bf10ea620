/* SPDX-License-Identifier: Apache-2.0 */
/*
 * backend_memory.h: the in-memory backend (backend.h) and the store it
 * decides in, which every worker shares; see backend_memory.c.
 */
#ifndef RATELIMITD_BACKEND_MEMORY_H
#define RATELIMITD_BACKEND_MEMORY_H

#include <stddef.h>
#include <stdint.h>

#include "core/backend.h"

/* The process's in-memory store under its lock: one per process, shared by
 * every worker's memory backends (`backend: memory`, and the fallback of
 * failure_mode local). */
struct backend_memory_store;

/* A new empty store of at most max_keys entries, its hash keyed with
 * hash_seed (limiter_local.h). Never NULL. */
struct backend_memory_store *backend_memory_store_new(size_t max_keys, uint64_t hash_seed);

/* Frees the store (every backend on it must be freed first). NULL is a
 * no-op. */
void backend_memory_store_free(struct backend_memory_store *s);

/* A backend deciding in store (which must outlive it). Never NULL. */
struct backend *backend_memory_new(struct backend_memory_store *store);

#endif
