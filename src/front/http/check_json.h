/* SPDX-License-Identifier: Apache-2.0 */
/*
 * check_json.h: the body of POST /check decoded into a plain struct, with
 * every rule about what a valid request is. No I/O, no Redis: a pure
 * function of (config, bytes), so it can be unit-tested and fuzzed.
 *
 * jansson stays behind this header (json_t is only named, never defined
 * here): the callers of check_json_parse need not include it.
 */
#ifndef RATELIMITD_CHECK_JSON_H
#define RATELIMITD_CHECK_JSON_H

#include <stddef.h>
#include <stdint.h>

#include "config/config.h"
#include "core/decision.h"
#include "core/request_error.h"
#include "lib/util.h"

/* jansson's object type (jansson.h: typedef struct json_t json_t). */
struct json_t;

/* The JSON value of body (duplicate keys refused, NUL bytes and any
 * top-level value allowed), owned by the caller (json_decref); NULL with
 * err filled (400 invalid_json, or invalid_cost for a number too large).
 * The first step of both JSON decoders (this file and rls_json.c), so that
 * they refuse the same bytes the same way. */
struct json_t *check_json_load(const char *body, size_t len, struct request_error *err) RL_WUR;

/* Refuses (400 unknown_field, naming it and `where`) any member of obj not
 * named in allowed (NULL-terminated). Returns 0 or -1. */
int check_json_only_fields(struct json_t *obj, const char *const *allowed, const char *where,
                           struct request_error *err) RL_WUR;

/*
 * Decodes a /check body. On success fills *out (free it with request_free)
 * and returns 0. On error returns -1, fills *err and leaves *out empty.
 * The config must outlive *out: items point at its policies.
 */
int check_json_parse(const struct config *cfg, const char *body, size_t len,
                     struct check_request *out, struct request_error *err) RL_WUR;

/* The same decoding through jansson only, without the fast path for plain
 * bodies: the reference check_json_parse is tested against. */
int check_json_parse_full(const struct config *cfg, const char *body, size_t len,
                          struct check_request *out, struct request_error *err) RL_WUR;

/*
 * Decodes a POST /report body: the shapes of /check without dry_run, each
 * cost between -REQUEST_MAX_COST and REQUEST_MAX_COST (negative: a refund),
 * duplicates merged. Refuses (400) a tier whose algorithm takes no report
 * (report_not_supported) or, for a negative cost, gives nothing back
 * exactly (refund_not_supported; policy_algorithm_refunds). Sets
 * out->report. Same ownership as check_json_parse.
 */
int check_json_parse_report(const struct config *cfg, const char *body, size_t len,
                            struct check_request *out, struct request_error *err) RL_WUR;

#endif
