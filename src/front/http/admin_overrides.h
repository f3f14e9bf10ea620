/* SPDX-License-Identifier: Apache-2.0 */
/*
 * admin_overrides.h: the admin API on run-time overrides, below the HTTP
 * routing (http_routes.c routes /v1/overrides/ here):
 *
 *   PUT    /v1/overrides/<policy>/<key>  sets the key's override
 *   GET    /v1/overrides/<policy>/<key>  the override in force (404 if none)
 *   DELETE /v1/overrides/<policy>/<key>  removes it (404 if none)
 *   GET    /v1/overrides/<policy>?cursor=&limit=  a page of the policy's
 *
 * The key is percent-encoded as in /v1/keys/ (admin_parse_path_in). Owns
 * the answers' JSON and the list's cursor (the last key's bytes in hex).
 */
#ifndef RATELIMITD_ADMIN_OVERRIDES_H
#define RATELIMITD_ADMIN_OVERRIDES_H

#include <stddef.h>

#include "core/override_change.h"
#include "lib/buf.h"

#define ADMIN_OVERRIDES_PREFIX "/v1/overrides/"
#define ADMIN_OVERRIDES_PAGE_DEFAULT 100
#define ADMIN_OVERRIDES_PAGE_MAX 1000

/* The answer to a PUT or DELETE: 200 with the override and "previous" (a
 * PUT) or {"policy","key","deleted":true}; 404 override_not_found (a
 * DELETE of none); 503 backend_unavailable. Appends to out; returns the
 * status. */
int admin_overrides_render_change(struct buf *out, const struct override_change_result *r,
                                  unsigned flags);

/* The answer to a GET of one: 200 with o, or 404 when o is NULL. */
int admin_overrides_render_one(struct buf *out, const struct override *o, unsigned flags);

/* The answer to a GET of a policy's: {"policy","overrides":[...],
 * "next_cursor"} (a cursor when more follow, else null). */
int admin_overrides_render_page(struct buf *out, const char *policy, struct override *const *v,
                                size_t n, int more, unsigned flags);

/* Decodes a cursor (len bytes) into out (POLICY_KEY_MAX bytes): the key
 * length, or -1 if it is not one. */
long admin_overrides_cursor(const char *s, size_t len, char *out);

#endif
