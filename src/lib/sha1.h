/*
 * sha1.h: SHA-1 (FIPS 180-4), only to name the Lua scripts the way Redis
 * does for EVALSHA. Not for anything that needs collision resistance.
 */
#ifndef RATELIMITD_SHA1_H
#define RATELIMITD_SHA1_H

#include <stddef.h>

/* Writes the SHA-1 of data[0..len) as 40 lowercase hex digits and a NUL. */
void sha1_hex(const void *data, size_t len, char out[41]);

#endif
