/* SPDX-License-Identifier: Apache-2.0 */
/*
 * call_resp.h: a script call as the RESP command Redis reads, written
 * straight into a buffer rather than by hiredis's formatter, which builds
 * each argument's header with sdscatfmt and a new string per call (a share
 * of the daemon's time per check that bench/instructions.py measures).
 *
 * Owns: RESP's bulk strings and array heads, and a lone call's framing.
 * Does not own: which command and name a node uses (redis_node.c), a
 * batch's framing (redis_node.c, over its members), the call's arguments
 * (scripts.c).
 */
#ifndef RATELIMITD_CALL_RESP_H
#define RATELIMITD_CALL_RESP_H

#include <stddef.h>

#include "backend/redis/scripts.h"
#include "lib/buf.h"

/* One bulk string, appended to out. */
void call_resp_bulk(struct buf *out, const char *s, size_t len);

/* out emptied, then the head of a command of nargs arguments after cmd and
 * name (name NULL: none, as ratelimitd.check has none; FCALL's function
 * name, EVALSHA's SHA1). */
void call_resp_head(struct buf *out, const char *cmd, const char *name, size_t nargs);

/* out emptied, then call whole: the head, the number of keys, then its
 * arguments. */
void call_resp_call(struct buf *out, const char *cmd, const char *name,
                    const struct script_call *call);

#endif
