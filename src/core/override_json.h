/* SPDX-License-Identifier: Apache-2.0 */
/*
 * override_json.h: the JSON of a run-time override (overrides.h), in its
 * three forms: the PUT body a client sends, the object the admin API
 * answers with, and the same object as stored and announced through the
 * backend (with "deleted": true for a removal). One form out, so that what
 * a client reads is what every daemon stores.
 *
 * Owns the shapes, their checks against a policy (tier names, limits a
 * tier's algorithm accepts, ttl and expires_at) and RFC 3339 times. Does
 * not own the table (overrides.c) nor where the JSON is sent.
 */
#ifndef RATELIMITD_OVERRIDE_JSON_H
#define RATELIMITD_OVERRIDE_JSON_H

#include <stddef.h>
#include <stdint.h>

#include "core/overrides.h"
#include "core/request_error.h"
#include "lib/json_out.h"

/* Longest ttl accepted: ten years. */
#define OVERRIDE_TTL_MAX_US (3660LL * 86400 * 1000000)

/* RFC 3339 in UTC with microseconds ("2026-11-29T13:30:46.123456Z") of
 * a wall-clock time in µs; out has OVERRIDE_TIME_BUF bytes. */
#define OVERRIDE_TIME_BUF 40
const char *override_time_format(int64_t us, char *out);

/* Parses RFC 3339 ("Z" or a numeric offset, optional fraction) into µs.
 * Returns 0 or -1. */
int override_time_parse(const char *s, int64_t *us) RL_WUR;

/* The override as the API answers it: {"policy","key","tiers":{...},
 * "expires_at","note","updated_at","by"} (the object left open when
 * open is 1, for the caller to add "previous"). */
void override_json(struct json_out *j, const struct override *o, int open);

/*
 * The PUT body for (p, key) (p the policy, variant the tier list that
 * applies to the key: p or a file override's variant), as of now_us.
 * Returns 0 with *out (owned; by is left NULL) or -1 with err: 400
 * invalid_body (not JSON, wrong shape, an unknown member), unknown_tier,
 * invalid_limit, invalid_ttl.
 */
int override_body_parse(const struct policy *p, const struct policy *variant, const char *key,
                        size_t keylen, const char *body, size_t len, int64_t now_us,
                        struct override **out, struct request_error *err) RL_WUR;

/* The stored or announced form: 0 with *out (owned), or a removal
 * (*deleted 1, *out with policy, key and updated_us only), or -1 when it
 * is not one (another program's message): ignored. */
int override_json_parse(const char *s, size_t len, struct override **out, int *deleted) RL_WUR;

/* Every override of t in force as of now_us, one JSON object a line,
 * appended to out: what the state file of backend: memory keeps. */
void override_json_save_all(struct overrides *t, int64_t now_us, struct buf *out);

/* Reads what override_json_save_all wrote (len bytes) into t, dropping
 * what has expired as of now_us or is not one; returns how many it set. */
size_t override_json_load_all(struct overrides *t, const char *data, size_t len, int64_t now_us);

/* The announcement of a removal of (policy, key) at updated_us. */
void override_json_deleted(struct json_out *j, const char *policy, const char *key, size_t keylen,
                           int64_t updated_us);

#endif
