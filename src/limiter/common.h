/* SPDX-License-Identifier: Apache-2.0 */
/*
 * common.h: the limiter's integer arithmetic, the C twin of the helpers of
 * lua/common.lua (idiv, idiv_ceil, EXACT_MAX) that every algorithm file
 * and the store use.
 *
 * Owns: floor and ceiling division, min and max, a sum rounded as the
 * scripts' doubles round it, and the 2^53 bound, in
 * int64 and (where state left over from another configuration or a clock
 * that went backwards could push a product past int64) in __int128, where
 * the script, in doubles, would merely lose exactness.
 * Does not own: the expiry rule (local_store.h) or any algorithm's steps.
 */
#ifndef RATELIMITD_LIMITER_COMMON_H
#define RATELIMITD_LIMITER_COMMON_H

#include <stdint.h>

__extension__ typedef __int128 i128;

#define EXACT_MAX (1LL << 53) /* EXACT_MAX in lua/common.lua */

/* floor(a / b) and ceil(a / b) for b > 0 (idiv and idiv_ceil in common.lua),
 * in 128 bits where a product may pass 64. */
static inline int64_t idiv(int64_t a, int64_t b)
{
    int64_t q = a / b;
    if (a % b < 0)
        q--;
    return q;
}

static inline int64_t idiv_ceil(int64_t a, int64_t b)
{
    int64_t q = a / b;
    if (a % b > 0)
        q++;
    return q;
}

/* Nearly every call's operands fit in 64 bits, where the division is one
 * instruction rather than a call to libgcc's 128-bit division, which
 * showed among a memory-backend check's top costs (callgrind). */
static inline int fits64(i128 v)
{
    return v == (int64_t)v;
}

static inline i128 idiv128(i128 a, i128 b)
{
    if (fits64(a) && fits64(b))
        return idiv((int64_t)a, (int64_t)b);
    i128 q = a / b;
    if (a % b < 0)
        q--;
    return q;
}

static inline i128 idiv_ceil128(i128 a, i128 b)
{
    if (fits64(a) && fits64(b))
        return idiv_ceil((int64_t)a, (int64_t)b);
    i128 q = a / b;
    if (a % b > 0)
        q++;
    return q;
}

/* a + b as the scripts' doubles hold it: the exact sum rounded once to
 * the nearest double, ties to even (as x86-64 and the C default rounding
 * mode convert), so it differs from a + b only past 2^53, where a limit
 * that the scripts multiply by nothing (a fixed window of 2^53) can take
 * them; |a + b| < 2^63. */
static inline int64_t lua_add(int64_t a, int64_t b)
{
    return (int64_t)(double)(a + b);
}

static inline int64_t max64(int64_t a, int64_t b)
{
    return a > b ? a : b;
}

static inline int64_t min64(int64_t a, int64_t b)
{
    return a < b ? a : b;
}

#endif
