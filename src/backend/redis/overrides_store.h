/* SPDX-License-Identifier: Apache-2.0 */
/*
 * overrides_store.h: run-time overrides (core/overrides.h) in Redis,
 * written once for both Redis backends (one server, a cluster).
 *
 * Every override of a key_prefix is one field of one hash,
 * "<key_prefix>{overrides}" (one hash tag: a cluster keeps it on one
 * node), named "<policy>:<key bytes>", whose value is the override's JSON
 * (core/override_json.h, with its expires_at). A change is one script:
 * HSET (or HDEL) and PUBLISH of the JSON on the reset channel
 * ("<key_prefix>reset", resets.h), so that no daemon hears of a change
 * that is not stored, nor misses one that is, once it has re-read the hash
 * after (re)subscribing. An override's JSON starts with '{', which no
 * reset announcement does (a policy name does not), and daemons that know
 * no overrides ignore it.
 *
 * Owns the hash's name, the commands and their replies. Does not own which
 * node a command goes to (the backends) nor the listener (resets.c).
 */
#ifndef RATELIMITD_OVERRIDES_STORE_H
#define RATELIMITD_OVERRIDES_STORE_H

#include <stddef.h>

#include "core/backend.h"
#include "lib/buf.h"

struct redis_node;

/* "<key_prefix>{overrides}" into out (len bytes); its length, or -1 if
 * it does not fit. */
int overrides_store_key(const char *key_prefix, char *out, size_t len);

/* Stores json as (policy, key)'s override, or removes it (remove 1; json
 * then announces the removal; with expect, only if the stored value is
 * expect), and publishes json on channel, on n.
 * Returns -1 when the command cannot be sent (done never called), else 0
 * and done is called exactly once; lost is the message for a connection
 * lost before the reply. */
int overrides_store_send(struct redis_node *n, const char *key_prefix, const char *channel,
                         const char *policy, const char *key, size_t keylen, const char *json,
                         size_t len, int remove, const struct buf *expect, const char *lost,
                         backend_override_done_fn done, void *arg) RL_WUR;

/* Reads every field of the hash (HGETALL) on n: done gets the values. Same
 * rule as overrides_store_send. */
int overrides_store_load(struct redis_node *n, const char *key_prefix, const char *lost,
                         backend_override_done_fn done, void *arg) RL_WUR;

#endif
