/* SPDX-License-Identifier: Apache-2.0 */
/*
 * lease_json.h: the bodies of POST /release and POST /renew (core/lease.h):
 * decoding {"leases": ["<id>", ...]} and writing the answer.
 *
 *   /release -> 200 {"released": n, "unknown": m, "leases": [{"id",
 *               "status": "released" | "expired" | "unknown"}]}
 *               (unknown counts every lease not freed by this call:
 *               expired ones too, which "expired" also counts)
 *   /renew   -> 200 {"renewed": n, "expired": k, "unknown": m, "leases":
 *               [{"id", "status": "renewed" | "expired" | "unknown"[,
 *               "expires_ms"]}]}
 *   backend unavailable -> 503 {"error": "backend_unavailable", "message"}
 *
 * Owns the shapes; not the ids (lease.c) nor the call.
 */
#ifndef RATELIMITD_LEASE_JSON_H
#define RATELIMITD_LEASE_JSON_H

#include <stddef.h>

#include "core/lease.h"
#include "core/request_error.h"
#include "lib/buf.h"

/* Decodes a body into *ids (n malloc'ed strings, in a malloc'ed array, both
 * the caller's: lease_start takes them). Returns 0, or -1 with err filled
 * (nothing to free). */
int lease_json_parse(const char *body, size_t len, char ***ids, size_t *n,
                     struct request_error *err) RL_WUR;

/* Writes the answer to res (head and body); returns its status. */
int lease_json_render(struct buf *out, const struct lease_result *res, unsigned flags);

#endif
