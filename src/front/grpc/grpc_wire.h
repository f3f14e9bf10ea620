/* SPDX-License-Identifier: Apache-2.0 */
/*
 * grpc_wire.h: ShouldRateLimit's answer in protobuf's wire format, written
 * by hand straight into the stream's output buffer: no protobuf-c message
 * is built, no size is computed twice. The bytes are those protobuf-c
 * packs from the same answer as a RateLimitResponse message (tests/unit/
 * test_grpc_wire.c checks it on random answers):
 *
 *   overall_code           rls_answer.overall
 *   statuses[i].code       statuses[i].code
 *     .limit_remaining     held to [0, UINT32_MAX]
 *     .current_limit       when has_limit: requests_per_unit (held to
 *                          [0, UINT32_MAX]), unit, name (limit_name or "")
 *     .duration_until_reset  when has_limit: seconds (until_reset_s, >= 0)
 *   response_headers_to_add  headers: key (name), value (up to a NUL)
 *
 * proto3's rules: a zero number and an empty string are left out, a message
 * that is set is written even when empty.
 */
#ifndef RATELIMITD_GRPC_WIRE_H
#define RATELIMITD_GRPC_WIRE_H

#include <stddef.h>

#include "core/rls.h"
#include "lib/buf.h"

/* The gRPC message prefix: 1 byte compressed flag, 4 bytes length. */
#define GRPC_PREFIX 5

/* Appends to out the gRPC message of a (RLS_DECIDED): the 5-byte prefix
 * (not compressed, length) and the RateLimitResponse. Returns the bytes
 * appended. */
size_t grpc_wire_rls_response(struct buf *out, const struct rls_answer *a);

#endif
