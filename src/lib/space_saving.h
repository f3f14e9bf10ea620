/* SPDX-License-Identifier: Apache-2.0 */
/*
 * space_saving.h: the Space-Saving sketch (Metwally, Agrawal and El Abbadi,
 * 2005) of a weighted stream of keys: at most `cap` counters, each an
 * overestimate of its key's weight with an error bound, so that
 * count - err <= true weight <= count, and every key whose weight exceeds
 * total / cap holds a counter. Also the sketch's text form, and the merge of
 * several sketches' texts (mergeable summaries: Agarwal et al., 2012).
 *
 * The counters sit in the stream-summary (buckets of equal counts in
 * ascending order), indexed by an open-addressed table keyed with SipHash:
 * an update of weight 1 is O(1), and one of weight w walks past the
 * distinct counts it overtakes (at most cap). A binary min-heap, O(log cap)
 * for any weight, cost twice the instructions on the spread benchmark's
 * keys (every one new: the replaced counter sinks the heap's whole depth
 * through the ties at the minimum). Everything is allocated by
 * space_saving_new: an update never allocates.
 *
 * Keys longer than SPACE_SAVING_KEY_MAX bytes are named by their first
 * bytes, '~' and the hex of a fixed-key SipHash of the whole key, so that
 * two long keys with a common prefix stay apart and every daemon names a
 * key alike (space_saving_name).
 *
 * Owns: the sketch, its text and the merge. Not thread-safe; pure (no clock,
 * no I/O).
 */
#ifndef RATELIMITD_SPACE_SAVING_H
#define RATELIMITD_SPACE_SAVING_H

#include <stddef.h>
#include <stdint.h>

#include "lib/buf.h"
#include "lib/util.h"

#define SPACE_SAVING_KEY_MAX 48

struct space_saving;

/* A sketch of cap counters (1 .. 65535), its table keyed with seed. */
struct space_saving *space_saving_new(size_t cap, uint64_t seed);
void space_saving_free(struct space_saving *s); /* NULL is a no-op */

/* Forgets every counter (a new window). */
void space_saving_clear(struct space_saving *s);

/* Adds weight w (> 0) to key (len bytes, any bytes). */
void space_saving_add(struct space_saving *s, const char *key, size_t len, uint64_t w);

/* The weight of the whole stream, and the bound on a key without a counter:
 * the smallest count once every counter is taken, else 0. */
uint64_t space_saving_total(const struct space_saving *s);
uint64_t space_saving_min(const struct space_saving *s);

/* The bytes space_saving_new allocated for a sketch of cap counters. */
size_t space_saving_bytes(size_t cap);

/* The name a key is counted under (see above) into out (room for
 * SPACE_SAVING_KEY_MAX bytes); returns its length. */
size_t space_saving_name(const char *key, size_t len, char *out);

/* One counter, as read or merged: key is borrowed (from the sketch or the
 * text it was read from). */
struct space_saving_entry {
    const char *key;
    size_t len;
    uint64_t count, err;
};

/* s's counters in no order: the number written to out (room for cap). */
size_t space_saving_entries(const struct space_saving *s, struct space_saving_entry *out);

/* Appends s as text: "<total> <min> <n>\n" then n lines
 * "<count> <err> <len> <key bytes>\n". */
void space_saving_write(const struct space_saving *s, struct buf *out);

/* A sketch read back from its text (space_saving_read). */
struct space_saving_summary {
    uint64_t total, min;
    size_t n;
    struct space_saving_entry *e; /* owned (free it); keys point into the text */
};

/* Reads one sketch's text at *p (up to end), advancing *p past it. -1 on
 * text that is not a sketch (nothing to free). */
int space_saving_read(const char **p, const char *end, struct space_saving_summary *out) RL_WUR;

/* The merge of m sketches: per key, the sum of its counts where it has a
 * counter, plus each other sketch's min (its weight there is at most that),
 * and likewise the errors, so that the bound still holds for the sum. out
 * (allocated; keys borrowed from the summaries) is sorted by count
 * descending, ties by key; returns its length. */
size_t space_saving_merge(const struct space_saving_summary *s, size_t m,
                          struct space_saving_entry **out);

#endif
