/* SPDX-License-Identifier: Apache-2.0 */
/*
 * store_file.h: the in-memory store's counters as bytes (an image), and an
 * image as a file, so that they outlive the process: `state_file:` writes
 * one at every graceful stop and every `state_interval`, and reads it at
 * start; a hand-over to a new process (USR2) moves the same image over a
 * descriptor (store_file_write_fd/_read_fd; with the store's lock:
 * backend_memory_store_dump/_load).
 *
 * Owns: the format, its validation, and the atomic write of a file.
 * Does not own: locking (the caller holds the store still while encoding
 * or decoding: backend_memory.c takes its lock), when to write, logs.
 *
 * Times in the image are the store's own: wall-clock µs since the epoch
 * (the memory backend always decides on CLOCK_REALTIME, whatever `clock:`
 * says), so an image read after an outage continues every window at the
 * same wall time: a 60 s window that began 20 s before the stop ends 40 s
 * after it, however long the process was away. Entries whose expiry has
 * passed when the image is read are dropped.
 *
 * Format, version 2, every integer little-endian:
 *   "RLDSTATE" (8 bytes), u32 version, u32 0, i64 written_at_us, u64 count,
 *   count entries, oldest use first (so that loading keeps the LRU order):
 *     u32 keylen, the key's bytes, i64 expires_at, i64 expires_from_end,
 *     u8 kind (limiter_internal.h's enum kind), then by kind:
 *       fixed  i64 e, n, s, u8 cal      counter  i64 e, c, p
 *       token  i64 s, t, w              gcra     i64 d, t, w
 *       log    u32 n, n x (i64 score, count, before)
 *       buckets u32 n, n x (i64 start, count)
 *       leases u32 n, n x (i64 expires, units, LEASE_NONCE_LEN bytes)
 *   u32 extra_len, extra_len bytes: the caller's section (the run-time
 *     overrides of backend: memory, memory_state.h), opaque here, never
 *     empty: an image with nothing extra is written as version 1,
 *   u64 SipHash-2-4, under a fixed key, of every byte before it.
 * A reader refuses another magic, another version, a bad checksum, a short
 * or long image and any entry the algorithms could not have written (a
 * zero scale, unsorted runs or buckets, a key too long): all or nothing.
 * Version 1 (no extra section) is still read, and written when there is
 * nothing extra: the previous release reads it, so a roll-back keeps the
 * counters.
 */
#ifndef RATELIMITD_STORE_FILE_H
#define RATELIMITD_STORE_FILE_H

#include <stddef.h>
#include <stdint.h>

#include "lib/buf.h"
#include "lib/util.h"

#define STORE_FILE_VERSION 2

struct local_store;

/* What a load did. */
struct store_file_counts {
    size_t loaded;     /* live entries read into the store */
    size_t expired;    /* entries in the image dropped as expired */
    const void *extra; /* the extra section, in the image read (NULL: none) */
    size_t extra_len;
};

/* The checksum an image ends with, of its len bytes before it: for tests
 * and tools that build an image by hand. */
uint64_t store_file_sum(const void *data, size_t len);

/* Appends the image of every live entry of s as of now_us to out; returns
 * how many entries it holds. */
size_t store_file_encode(const struct local_store *s, int64_t now_us, struct buf *out);

/* store_file_encode in two halves, for a caller that holds the store
 * still for the first only: the entries (one pass over the store, no
 * I/O, no hashing), appended to out from `start` (out->len before the
 * call), then the checksum over them (the store not read). Between the
 * two, out holds no image yet. */
size_t store_file_snapshot(const struct local_store *s, int64_t now_us, struct buf *out);
void store_file_seal(struct buf *out, size_t start, const void *extra, size_t extra_len);

/* Reads the image of len bytes into s (an entry under a key s already has
 * replaces it), dropping entries expired as of now_us; a full store evicts
 * as a decision would. 0 and *c, or -1 with a message and s unchanged. */
int store_file_decode(struct local_store *s, const void *data, size_t len, int64_t now_us,
                      struct store_file_counts *c, char *err, size_t errlen) RL_WUR;

/* len bytes written whole to fd (blocking; not closed), or fd read to its
 * end into out (appended): how an image crosses a descriptor (the
 * hand-over's halves, backend_memory_store_dump/_load). 0, or -1 with a
 * message. */
int store_file_write_fd(int fd, const void *data, size_t len, char *err, size_t errlen) RL_WUR;
int store_file_read_fd(int fd, struct buf *out, char *err, size_t errlen) RL_WUR;

/* Replaces the file at path with len bytes, atomically: a new file (mode
 * 0600) in the same directory, written, fsync'd, renamed over path, and
 * the directory fsync'd; a crash at any point leaves the old file or the
 * new one whole, never a mix (a stray temporary at worst). 0, or -1 with a
 * message and path untouched. */
int store_file_write(const char *path, const void *data, size_t len, char *err,
                     size_t errlen) RL_WUR;

/* Whether path's directory takes a new file, by making one as
 * store_file_write would and removing it. 0, or -1 with a message. */
int store_file_probe(const char *path, char *err, size_t errlen) RL_WUR;

/* The whole file at path into out (appended). 0; 1 when there is no file
 * (ENOENT); -1 with a message. */
int store_file_read(const char *path, struct buf *out, char *err, size_t errlen) RL_WUR;

#endif
