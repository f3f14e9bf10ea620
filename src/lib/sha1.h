/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sha1.h: SHA-1 (FIPS 180-4), for two names: the Lua script's, the way
 * Redis names it for EVALSHA (scripts.c), and the content of the watched
 * files, so that watch.c reloads only when a file really changed. Not for
 * anything that needs collision resistance.
 */
#ifndef RATELIMITD_SHA1_H
#define RATELIMITD_SHA1_H

#include <stddef.h>

/* Writes the SHA-1 of data[0..len) as 40 lowercase hex digits and a NUL. */
void sha1_hex(const void *data, size_t len, char out[41]);

#endif
