/* SPDX-License-Identifier: Apache-2.0 */
/*
 * scripts.h: the decision code built into the binary (the files under lua/,
 * concatenated at build time by lua/embed.sh) in its two forms, the EVAL
 * script and the Redis Function library, their names, and the calling
 * convention they share: how a request becomes KEYS/ARGV and how the
 * integers they return become tier results. No I/O: backend_redis.c sends
 * what this module builds.
 *
 * The two forms run the same code on the same KEYS and ARGV and return the
 * same reply: `FCALL <scripts_function_name()> numkeys KEYS... ARGV...`
 * after `FUNCTION LOAD REPLACE <scripts_library_code()>` (Redis >= 7.0,
 * where the code is loaded once and a call runs only the decision), or
 * `EVALSHA <scripts_sha1> numkeys KEYS... ARGV...` (any Redis, KeyDB; the
 * whole chunk runs on every call).
 */
#ifndef RATELIMITD_SCRIPTS_H
#define RATELIMITD_SCRIPTS_H

#include <stddef.h>
#include <stdint.h>

#include "config/config.h"
#include "core/decision.h"
#include "core/lease_id.h"

extern const char scripts_lua_source[]; /* generated: src/backend/redis/scripts_lua.c */

/*
 * The Redis Function library: "#!lua name=<name>", the code, and the
 * registration of the one function <name>, which takes KEYS and ARGV as the
 * EVAL script does and may write (no flags). <name> is "ratelimitd_" and
 * the first 16 hex digits of the SHA1 of the library text with "@NAME@" in
 * place of the name: daemons of different code sharing one Redis load
 * libraries of different names and never replace each other's. Both are
 * built at build time (lua/embed.sh), static and NUL-terminated; any thread
 * may call these at any time.
 */
const char *scripts_library_code(void);
const char *scripts_function_name(void);

/* Integers the script returns per tier, after {now_us, request_allowed}. */
#define SCRIPTS_RESULT_HEAD 2
#define SCRIPTS_RESULT_PER_TIER 7
/* And per tier after those, for a call whose ARGV[2] is SCRIPTS_DRY_RUN_BOTH. */
#define SCRIPTS_RESULT_PER_TIER_IF_DENIED 2

/* ARGV[2] of a call: a real run, a dry run, or a dry run that also reports
 * every tier's figures in a request denied elsewhere (remaining and
 * reset_us as if nothing were taken): what the Cluster backend's dry run
 * phase needs to answer a denial with the figures one Redis gives. */
#define SCRIPTS_RUN "0"
#define SCRIPTS_DRY_RUN "1"
#define SCRIPTS_DRY_RUN_BOTH "2"
/* ARGV[2] of a report (check_request.report): costs charged with no
 * decision, then every tier's figures for a cost of 1 (lua/check.lua). */
#define SCRIPTS_REPORT "3"
/* ARGV[2] of a lease operation (lua/check.lua's lease_ops). */
#define SCRIPTS_LEASE_RELEASE "r"
#define SCRIPTS_LEASE_RENEW "n"

/* ARGV[1] of a batch (lua/check.lua's decide_batch): several calls in one,
 * each decided as if alone. KEYS: every call's KEYS in order; ARGV:
 * SCRIPTS_BATCH, the count, then per call its number of KEYS and of ARGV,
 * then every call's ARGV in order. The reply holds each call's reply (or
 * its error). redis_node.c frames it. */
#define SCRIPTS_BATCH "B"

/* The script's SHA1 as 40 lowercase hex digits (computed once, at start). */
void scripts_sha1(char out[41]);

/*
 * The arguments of one script call: args[0..nkeys) are KEYS, the rest ARGV.
 * Free it with scripts_call_free.
 */
struct script_call {
    size_t nkeys;
    size_t nargs; /* keys included */
    size_t ntiers;
    int block; /* a local lease call: the reply ends with 2 more integers */
    const char **args;
    size_t *lens;
    char *mem;
    size_t mem_size;
    size_t cap; /* bytes of the one allocation, which starts at args */
};

/* Builds the call deciding every tier of every check of req. now_us < 0
 * means "the script reads Redis TIME" (clock: redis). */
void scripts_build_call(const struct config *cfg, const struct check_request *req, int64_t now_us,
                        struct script_call *out);
void scripts_call_free(struct script_call *call);

/* The same builds into a call built before and not freed (or zeroed),
 * reusing its memory when large enough: a caller that keeps its calls for
 * reuse allocates nothing per call once warm. */
void scripts_rebuild_call(const struct config *cfg, const struct check_request *req, int64_t now_us,
                          struct script_call *out);
void scripts_rebuild_lease_call(const struct config *cfg, int renew, const struct lease_ref *refs,
                                size_t n, int64_t now_us, struct script_call *out);

/* Builds the call releasing (renew 0) or renewing the n leases of refs,
 * one KEY each: ARGV now_us (or ""), SCRIPTS_LEASE_*, then per lease its
 * member and the renewal's timeout_us (0 for a release). */
void scripts_build_lease_call(const struct config *cfg, int renew, const struct lease_ref *refs,
                              size_t n, int64_t now_us, struct script_call *out);

/* Decodes a lease call's reply {now_us, then per lease: status,
 * expires_us} into out (nleases entries). Returns 0, or -1 with a message
 * if the reply does not have that shape. */
int scripts_decode_lease(const long long *ints, size_t n, size_t nleases, struct lease_outcome *out,
                         char *err, size_t errlen) RL_WUR;

/*
 * Decodes the script's integers into one tier_result per tier (out has
 * call->ntiers entries). Returns 0, or -1 with a message if the reply does
 * not have the expected shape (a script and daemon out of step).
 */
int scripts_decode_result(const long long *ints, size_t n, size_t ntiers, struct tier_result *out,
                          char *err, size_t errlen) RL_WUR;

/*
 * Decodes the reply of a call built by scripts_build_call: out as
 * scripts_decode_result, and for a local lease call (call->block) the two
 * integers after the usual reply: *granted, the units the take got (or the
 * give-back returned), and *until_us, when they must be spent by (both 0
 * for any other call). Shared by the single-server and Cluster backends.
 * Returns 0, or -1 with a message if the reply does not have that shape.
 */
int scripts_decode_call(const struct script_call *call, const long long *ints, size_t n,
                        struct tier_result *out, int64_t *granted, int64_t *until_us, char *err,
                        size_t errlen) RL_WUR;

/*
 * Decodes the reply of a SCRIPTS_DRY_RUN_BOTH call: out as
 * scripts_decode_result, and if_denied (ntiers entries) the same results
 * with remaining and reset_us as if nothing were taken. Returns 0, or -1
 * with a message if the reply does not have that shape.
 */
int scripts_decode_dry_run_both(const long long *ints, size_t n, size_t ntiers,
                                struct tier_result *out, struct tier_result *if_denied, char *err,
                                size_t errlen) RL_WUR;

#endif
