/* SPDX-License-Identifier: Apache-2.0 */
/*
 * siphash.h: SipHash-2-4 (Aumasson and Bernstein), the keyed hash for every
 * table whose keys callers choose (the limiter's local_store.c, deny_cache.c):
 * with a secret key, a caller cannot pick keys that collide and turn the
 * table into a list. Pure; no state beyond the key the caller keeps.
 */
#ifndef RATELIMITD_SIPHASH_H
#define RATELIMITD_SIPHASH_H

#include <stddef.h>
#include <stdint.h>

struct siphash_key {
    uint64_t k0, k1;
};

/* The two 64-bit key halves spread from one 64-bit seed (splitmix64 steps),
 * so a table needs only one random number to be keyed. */
struct siphash_key siphash_key_from_seed(uint64_t seed);

/* SipHash-2-4 of len bytes at data (any bytes, NUL included) under key. */
uint64_t siphash24(const struct siphash_key *key, const void *data, size_t len);

#endif
