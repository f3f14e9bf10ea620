/* SPDX-License-Identifier: Apache-2.0 */
/*
 * lease_id.c: lease ids, nonces and which checks took leases (lease_id.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "core/lease_id.h"

static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

int lease_nonce_new(char nonce[LEASE_NONCE_LEN + 1])
{
    unsigned char r[LEASE_NONCE_LEN];
    if (getrandom(r, sizeof r, 0) != (ssize_t)sizeof r)
        return -1;
    for (size_t i = 0; i < LEASE_NONCE_LEN; i++)
        nonce[i] = b64[r[i] & 63]; /* 22 * 6 = 132 random bits */
    nonce[LEASE_NONCE_LEN] = '\0';
    return 0;
}

/* Appends base64url (no padding) of s[0..len) at out + *n; -1 if no room. */
static int put_b64(char *out, size_t outlen, size_t *n, const unsigned char *s, size_t len)
{
    for (size_t i = 0; i < len; i += 3) {
        unsigned v = (unsigned)s[i] << 16;
        size_t k = len - i < 3 ? len - i : 3;
        if (k > 1)
            v |= (unsigned)s[i + 1] << 8;
        if (k > 2)
            v |= s[i + 2];
        if (*n + k + 2 > outlen)
            return -1;
        for (size_t j = 0; j <= k; j++)
            out[(*n)++] = b64[(v >> (18 - 6 * j)) & 63];
    }
    return 0;
}

static int b64_value(char c)
{
    const char *p = c ? strchr(b64, c) : NULL;
    return p ? (int)(p - b64) : -1;
}

/* Decodes base64url s[0..len) into out (at most cap bytes); -1 if invalid. */
static int get_b64(const char *s, size_t len, unsigned char *out, size_t cap, size_t *outlen)
{
    size_t n = 0;
    if (len % 4 == 1)
        return -1;
    for (size_t i = 0; i < len; i += 4) {
        size_t k = len - i < 4 ? len - i : 4;
        unsigned v = 0;
        for (size_t j = 0; j < 4; j++) {
            int d = j < k ? b64_value(s[i + j]) : 0;
            if (d < 0)
                return -1;
            v = v << 6 | (unsigned)d;
        }
        for (size_t j = 0; j + 1 < k; j++) {
            if (n == cap)
                return -1;
            out[n++] = (unsigned char)(v >> (16 - 8 * j));
        }
    }
    *outlen = n;
    return 0;
}

int lease_id_encode(int local, const char *policy, const char *tier, const char *key, size_t keylen,
                    int64_t units, const char *nonce, char *out, size_t outlen)
{
    size_t n = 0;
    if (outlen < 3)
        return -1;
    out[n++] = local ? 'l' : 'b';
    out[n++] = '.';
    if (put_b64(out, outlen, &n, (const unsigned char *)policy, strlen(policy)) < 0 ||
        n + 1 >= outlen)
        return -1;
    out[n++] = '.';
    if (put_b64(out, outlen, &n, (const unsigned char *)tier, strlen(tier)) < 0 || n + 1 >= outlen)
        return -1;
    out[n++] = '.';
    if (put_b64(out, outlen, &n, (const unsigned char *)key, keylen) < 0)
        return -1;
    int m = snprintf(out + n, outlen - n, ".%lld.%s", (long long)units, nonce);
    if (m < 0 || (size_t)m >= outlen - n)
        return -1;
    return (int)(n + (size_t)m);
}

/* The next '.'-separated part of id[*at..len): its start and length. */
static const char *part(const char *id, size_t len, size_t *at, size_t *plen)
{
    if (*at > len)
        return NULL;
    const char *s = id + *at;
    const char *dot = memchr(s, '.', len - *at);
    *plen = dot ? (size_t)(dot - s) : len - *at;
    *at += *plen + 1;
    return s;
}

static int get_name(const char *s, size_t len, char *out)
{
    size_t n;
    if (get_b64(s, len, (unsigned char *)out, POLICY_NAME_MAX, &n) < 0)
        return -1;
    out[n] = '\0';
    return policy_name_valid(out) ? 0 : -1;
}

int lease_id_decode(const char *id, size_t len, struct lease_ref *out)
{
    const char *p[6];
    size_t plen[6], at = 0;
    memset(out, 0, sizeof *out);
    for (int i = 0; i < 6; i++)
        if (!(p[i] = part(id, len, &at, &plen[i])))
            return -1;
    if (at <= len || plen[0] != 1 || (p[0][0] != 'b' && p[0][0] != 'l'))
        return -1; /* more parts than six, or an unknown place */
    out->local = p[0][0] == 'l';
    if (get_name(p[1], plen[1], out->policy) < 0 || get_name(p[2], plen[2], out->tier) < 0 ||
        get_b64(p[3], plen[3], (unsigned char *)out->key, sizeof out->key, &out->keylen) < 0 ||
        out->keylen == 0)
        return -1;
    if (plen[4] < 1 || plen[4] > 10 || (plen[4] > 1 && p[4][0] == '0'))
        return -1;
    for (size_t i = 0; i < plen[4]; i++) {
        if (p[4][i] < '0' || p[4][i] > '9')
            return -1;
        out->units = out->units * 10 + (p[4][i] - '0');
    }
    if (out->units < 1 || out->units > REQUEST_MAX_COST || plen[5] != LEASE_NONCE_LEN)
        return -1;
    for (size_t i = 0; i < LEASE_NONCE_LEN; i++)
        if (b64_value(p[5][i]) < 0)
            return -1;
    memcpy(out->nonce, p[5], LEASE_NONCE_LEN);
    out->nonce[LEASE_NONCE_LEN] = '\0';
    return 0;
}

size_t lease_member(const struct lease_ref *r, char out[LEASE_MEMBER_MAX])
{
    int n = snprintf(out, LEASE_MEMBER_MAX, "%lld:%s", (long long)r->units, r->nonce);
    return n > 0 ? (size_t)n : 0;
}

int lease_taken(const struct verdict *v, size_t i)
{
    const struct check_request *req = v->req;
    return (v->kind == VERDICT_DECIDED || v->kind == VERDICT_LOCAL) && !v->cached &&
           !req->dry_run && req->lease_nonce[0] != '\0' && v->sum.allowed &&
           decision_check_allowed(&v->sum, i) && req->checks[i].cost > 0 &&
           policy_has_concurrency(req->checks[i].policy);
}
