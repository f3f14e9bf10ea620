/* SPDX-License-Identifier: Apache-2.0 */
/*
 * siphash.c: SipHash-2-4, as in the reference implementation (little-endian
 * message words whatever the host's byte order). See siphash.h.
 */
#include "lib/siphash.h"

#define ROTL(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))
#define SIPROUND                                                                                   \
    do {                                                                                           \
        v0 += v1;                                                                                  \
        v1 = ROTL(v1, 13);                                                                         \
        v1 ^= v0;                                                                                  \
        v0 = ROTL(v0, 32);                                                                         \
        v2 += v3;                                                                                  \
        v3 = ROTL(v3, 16);                                                                         \
        v3 ^= v2;                                                                                  \
        v0 += v3;                                                                                  \
        v3 = ROTL(v3, 21);                                                                         \
        v3 ^= v0;                                                                                  \
        v2 += v1;                                                                                  \
        v1 = ROTL(v1, 17);                                                                         \
        v1 ^= v2;                                                                                  \
        v2 = ROTL(v2, 32);                                                                         \
    } while (0)

struct siphash_key siphash_key_from_seed(uint64_t seed)
{
    struct siphash_key k;
    uint64_t z = seed, half[2];
    for (int i = 0; i < 2; i++) {
        z += 0x9e3779b97f4a7c15ULL;
        uint64_t x = z;
        x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
        x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
        half[i] = x ^ (x >> 31);
    }
    k.k0 = half[0];
    k.k1 = half[1];
    return k;
}

uint64_t siphash24(const struct siphash_key *key, const void *data, size_t len)
{
    const unsigned char *in = data;
    uint64_t v0 = 0x736f6d6570736575ULL ^ key->k0, v1 = 0x646f72616e646f6dULL ^ key->k1;
    uint64_t v2 = 0x6c7967656e657261ULL ^ key->k0, v3 = 0x7465646279746573ULL ^ key->k1;
    size_t i, whole = len - len % 8;
    for (i = 0; i < whole; i += 8) {
        uint64_t m = 0;
        for (int j = 0; j < 8; j++)
            m |= (uint64_t)in[i + (size_t)j] << (8 * j);
        v3 ^= m;
        SIPROUND;
        SIPROUND;
        v0 ^= m;
    }
    uint64_t b = (uint64_t)len << 56;
    for (int j = 0; i + (size_t)j < len; j++)
        b |= (uint64_t)in[i + (size_t)j] << (8 * j);
    v3 ^= b;
    SIPROUND;
    SIPROUND;
    v0 ^= b;
    v2 ^= 0xff;
    SIPROUND;
    SIPROUND;
    SIPROUND;
    SIPROUND;
    return v0 ^ v1 ^ v2 ^ v3;
}
