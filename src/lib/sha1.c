/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sha1.c: SHA-1 written from FIPS 180-4 (sections 4.1.1, 5.1.1, 6.1): a
 * one-shot digest of a buffer, which is all its callers (the script's name,
 * the watched files' content) need.
 *
 * Owns no state: the working variables live on the caller's stack.
 */
#include "lib/sha1.h"

#include <stdint.h>
#include <string.h>

static uint32_t rol(uint32_t x, unsigned n)
{
    return (x << n) | (x >> (32 - n));
}

/* Processes one 64-byte block into the hash state h (FIPS 180-4, 6.1.2). */
static void sha1_block(uint32_t h[5], const unsigned char *block)
{
    uint32_t w[80], a, b, c, d, e, f, k, t;
    int i;

    for (i = 0; i < 16; i++)
        w[i] = (uint32_t)block[4 * i] << 24 | (uint32_t)block[4 * i + 1] << 16 |
               (uint32_t)block[4 * i + 2] << 8 | (uint32_t)block[4 * i + 3];
    for (i = 16; i < 80; i++)
        w[i] = rol(w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16], 1);

    a = h[0], b = h[1], c = h[2], d = h[3], e = h[4];
    for (i = 0; i < 80; i++) {
        if (i < 20) {
            f = (b & c) | (~b & d); /* Ch */
            k = 0x5a827999;
        } else if (i < 40) {
            f = b ^ c ^ d; /* Parity */
            k = 0x6ed9eba1;
        } else if (i < 60) {
            f = (b & c) | (b & d) | (c & d); /* Maj */
            k = 0x8f1bbcdc;
        } else {
            f = b ^ c ^ d;
            k = 0xca62c1d6;
        }
        t = rol(a, 5) + f + e + k + w[i];
        e = d;
        d = c;
        c = rol(b, 30);
        b = a;
        a = t;
    }
    h[0] += a, h[1] += b, h[2] += c, h[3] += d, h[4] += e;
}

void sha1_hex(const void *data, size_t len, char out[41])
{
    static const char hex[] = "0123456789abcdef";
    const unsigned char *p = data;
    uint32_t h[5] = {0x67452301, 0xefcdab89, 0x98badcfe, 0x10325476, 0xc3d2e1f0};
    unsigned char tail[128];
    uint64_t bits = (uint64_t)len * 8;
    size_t rest, ntail, i;

    for (rest = len; rest >= 64; rest -= 64, p += 64)
        sha1_block(h, p);

    /* Padding (5.1.1): a 1 bit, zeros up to 56 mod 64, the length in bits
     * as a 64-bit big-endian number; one block, or two if the rest is too
     * long to leave room for the length. */
    ntail = rest < 56 ? 64 : 128;
    memset(tail, 0, sizeof tail);
    if (rest > 0)
        memcpy(tail, p, rest);
    tail[rest] = 0x80;
    for (i = 0; i < 8; i++)
        tail[ntail - 1 - i] = (unsigned char)(bits >> (8 * i));
    for (i = 0; i < ntail; i += 64)
        sha1_block(h, tail + i);

    for (i = 0; i < 20; i++) {
        unsigned char byte = (unsigned char)(h[i / 4] >> (24 - 8 * (i % 4)));
        out[2 * i] = hex[byte >> 4];
        out[2 * i + 1] = hex[byte & 15];
    }
    out[40] = '\0';
}
