/* SPDX-License-Identifier: Apache-2.0 */
/*
 * lease_id.h: concurrency leases (the `concurrency` algorithm) as the
 * backends and fronts see them: the lease id that a /check answer hands out
 * and /release and /renew take back, a lease decoded from it, and what a
 * backend did to one. Pure: no I/O, no state.
 *
 * A lease id carries everything any daemon needs to find the lease, so
 * that daemons keep no state of their own about leases:
 *
 *     <where>.<policy>.<tier>.<key>.<units>.<nonce>
 *
 * where is "b" (held by the backend, Redis or memory) or "l" (held in this
 * daemon's memory by failure_mode local: no other daemon knows it);
 * policy, tier and key are base64url without padding (any bytes); units is
 * the decimal cost the lease holds; nonce is LEASE_NONCE_LEN base64url
 * characters of randomness drawn once per request. The id is URL-safe and
 * holds no comma, so that one header can list several. The backend stores
 * a lease as the member "<units>:<nonce>" of its tier's key: an id edited
 * to name another key, tier or cost names a member that does not exist, so
 * releasing someone else's lease takes its nonce.
 *
 * Owns: the id codec and the nonce. Does not own: how a backend keeps
 * leases (lua/concurrency.lua, limiter_local.c), the call (lease.h).
 */
#ifndef RATELIMITD_LEASE_ID_H
#define RATELIMITD_LEASE_ID_H

#include <stddef.h>
#include <stdint.h>

#include "config/policy.h"
#include "core/decision.h"
#include "lib/util.h"

#define LEASE_NONCE_LEN 22 /* 16 random bytes in base64url */
#define LEASE_MAX_IDS 100  /* per /release or /renew */
_Static_assert(sizeof(((struct check_request *)0)->lease_nonce) == LEASE_NONCE_LEN + 1,
               "decision.h's lease_nonce holds one nonce and its NUL");
/* The longest id: 5 dots, where, base64url of two names and a key, units. */
#define LEASE_ID_MAX                                                                               \
    (2 + 5 + 4 * ((2 * POLICY_NAME_MAX + POLICY_KEY_MAX) / 3 + 3) + 20 + LEASE_NONCE_LEN)
#define LEASE_MEMBER_MAX (24 + LEASE_NONCE_LEN)

/* A lease named by its id. */
struct lease_ref {
    int local; /* "l": this daemon's failure_mode local memory */
    char policy[POLICY_NAME_MAX + 1];
    char tier[POLICY_NAME_MAX + 1];
    char key[POLICY_KEY_MAX];
    size_t keylen;
    int64_t units;
    char nonce[LEASE_NONCE_LEN + 1];
    int64_t timeout_us; /* a renew's new lease time (the tier's lease_timeout) */
};

enum lease_status {
    LEASE_UNKNOWN = 0, /* never taken, released already, or long expired */
    LEASE_DONE = 1,    /* released, or renewed */
    LEASE_EXPIRED = 2, /* it had expired: nothing freed, not renewed */
};

/* What a backend did to one lease. */
struct lease_outcome {
    enum lease_status status;
    int64_t expires_us; /* renewed: the new expiry (absolute µs) */
};

/* Fills nonce with LEASE_NONCE_LEN random base64url characters and a NUL.
 * Returns 0, or -1 if the system has no randomness to give. */
int lease_nonce_new(char nonce[LEASE_NONCE_LEN + 1]) RL_WUR;

/* Writes the id of the lease of (policy, key, tier) holding units with
 * nonce into out (NUL-terminated; LEASE_ID_MAX + 1 bytes are enough).
 * Returns its length, or -1 if out is too small. */
int lease_id_encode(int local, const char *policy, const char *tier, const char *key, size_t keylen,
                    int64_t units, const char *nonce, char *out, size_t outlen) RL_WUR;

/* Decodes an id of len bytes. Returns 0, or -1 if it is no lease id. */
int lease_id_decode(const char *id, size_t len, struct lease_ref *out) RL_WUR;

/* The backend's member for the lease: "<units>:<nonce>". Returns its length. */
size_t lease_member(const struct lease_ref *r, char out[LEASE_MEMBER_MAX]);

/* 1 if check i of v's request took a lease on each of its concurrency
 * tiers (a decided, allowed, real request whose check allowed with a cost),
 * else 0. v->req must be set (as in a reply callback). */
int lease_taken(const struct verdict *v, size_t i);

#endif
