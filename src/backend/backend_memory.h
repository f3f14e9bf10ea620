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
#include "lib/buf.h"
#include "limiter/store_file.h"

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

/* The store's image as of the wall clock now (store_file.h), appended to
 * out: its entries copied under the lock (the one pause a saver imposes on
 * decisions), its checksum computed and the bytes written (by the caller)
 * with the lock free, extra (NULL: none) as the image's extra section.
 * Returns the entries; *locked_us (unless NULL) how long the lock was
 * held. */
size_t backend_memory_store_snapshot(struct backend_memory_store *s, struct buf *out,
                                     int64_t *locked_us, const struct buf *extra);

/* Reads an image of len bytes into the store under the lock (entries
 * expired by the wall clock now dropped). 0 and *c, or -1 with a message
 * and the store unchanged. */
int backend_memory_store_restore(struct backend_memory_store *s, const void *data, size_t len,
                                 struct store_file_counts *c, char *err, size_t errlen) RL_WUR;

/* The hand-over's halves on a descriptor (blocking; fd not closed): the
 * store's snapshot, with extra (NULL: none) as its extra section, written
 * whole to fd; or fd read to its end into image (the caller's, to free:
 * c->extra points into it) and restored. 0, or -1 with a message (a
 * failed load changes nothing). */
int backend_memory_store_dump(struct backend_memory_store *s, int fd, const struct buf *extra,
                              char *err, size_t errlen) RL_WUR;
int backend_memory_store_load(struct backend_memory_store *s, int fd, struct buf *image,
                              struct store_file_counts *c, char *err, size_t errlen) RL_WUR;

/* A backend deciding in store (which must outlive it). Never NULL. */
struct backend *backend_memory_new(struct backend_memory_store *store);

#endif
