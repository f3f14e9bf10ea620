/* SPDX-License-Identifier: Apache-2.0 */
/*
 * module.c: ratelimitd.so, the Redis module: `ratelimitd.check numkeys
 * KEYS... ARGV...` takes exactly the batched FCALL's arguments
 * (lua/check.lua: one request, or argv[1] "B" and a batch) and answers
 * exactly its reply, reading and writing the same keys with the same
 * values and expiries, decided by the memory backend's C (through
 * limiter/redis_state.h). A request it refuses (module_args.h) it answers
 * with an error, as the script answers one; within a batch, per request.
 *
 * Owns: the command, its decisions and replies (the order of a request's
 * steps: check.lua's decide, charge, lease_ops, take_block and
 * give_back), the server's TIME, read once per call as the script reads
 * it once per batch.
 * Does not own: the arguments' grammar (module_args.c), the keys' reads
 * and writes and their replication, a lease call's included
 * (module_keys.c), the arithmetic.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "limiter/redis_state.h"
#include "module/module_args.h"
#include "module/module_keys.h"
#include "module/redismodule_api.h"

/* The API table: the module's one static, written once by OnLoad before
 * any command can run (see redismodule_api.h for why it must be one). */
static struct redis_module_api rm;

/* One call's context: Redis's, the server's TIME once read, and the lease
 * nonce of the request being decided (NULL: none). */
struct call {
    struct module_keys keys; /* Redis's context, and the API table */
    int64_t time;            /* µs; -1 until read */
    const char *nonce;       /* the request's lease nonce (in req), or NULL */
    /* a request's arrays, sized for the call's largest (call_begin) */
    struct module_check *checks;
    struct module_tier *tiers;
    int *check_allowed;
    int64_t *out; /* room for 9 integers per tier */
    void *xs;     /* the tiers' struct redis_tier */
    /* the request last decoded into req (checks, tiers), and from which
     * arguments (last NULL: none) */
    struct module_request req;
    const struct module_arg *last;
    size_t last_na, last_nk;
};

/* The server's TIME in µs, read at the call's first need. Read here, not
 * through RedisModule_Call("TIME"), which costs Redis a fake client and a
 * parsed reply per call: TIME is the same clock (the server process's
 * gettimeofday, the wall clock), read in the same process. */
static int server_time(struct call *k, int64_t *now)
{
    if (k->time < 0) {
        struct timespec ts;
        if (clock_gettime(CLOCK_REALTIME, &ts) != 0)
            return -1;
        k->time = (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
    }
    *now = k->time;
    return 0;
}

/* Pass 1 for one tier (module_keys_read): 1 if it allows, 0 if not, or
 * -1 having replied the script's error. */
static int read_tier(struct call *k, RedisModuleString *key, struct redis_tier *x,
                     const struct module_tier *t, int64_t cost, int64_t now)
{
    char err[MODULE_KEYS_ERR];
    int allowed = module_keys_read(&k->keys, key, x, t, cost, k->nonce, now, err);
    if (allowed < 0)
        rm.ReplyWithError(k->keys.ctx, err);
    return allowed;
}

/* Makes and replicates one tier's write to its keys (keys[0], and a log's
 * counter keys[1]: module_keys_write); 0, or -1 having replied its
 * error. */
static int write_state(struct call *k, RedisModuleString **keys, const struct module_tier *t,
                       const struct redis_write *w)
{
    char err[MODULE_KEYS_ERR];
    if (module_keys_write(&k->keys, keys, t, w, err) == 0)
        return 0;
    rm.ReplyWithError(k->keys.ctx, err);
    return -1;
}

/* ARGV[2] "r" or "n" (check.lua's lease_ops): each key's lease in turn
 * (module_keys_lease_op), its timeout decoded as it comes (a bad one
 * fails the request after the leases before it were acted on, as the
 * script's error does), replying {now, then status and expiry per key}.
 * out: room for 1 + 2 per key. */
static void lease_ops(struct call *k, RedisModuleString **keys, size_t nk,
                      const struct module_arg *argv, size_t na, const struct module_request *req,
                      int64_t *out)
{
    char err[MODULE_ERR_BUF + 8];
    int64_t now = req->now, timeout;
    if (req->server_clock && server_time(k, &now) < 0) {
        rm.ReplyWithError(k->keys.ctx, "ERR ratelimitd: TIME failed");
        return;
    }
    memcpy(err, "ERR ", 4);
    for (size_t i = 0; i < nk; i++) {
        if (module_args_lease_timeout(argv, na, i, &timeout, err + 4, MODULE_ERR_BUF) < 0 ||
            module_keys_lease_op(&k->keys, keys[i], &argv[2 + 2 * i], req->lease_op == 'n', timeout,
                                 now, out + 1 + 2 * i, err) < 0) {
            rm.ReplyWithError(k->keys.ctx, err);
            return;
        }
    }
    out[0] = now;
    rm.ReplyWithArray(k->keys.ctx, (long)(1 + 2 * nk));
    for (size_t j = 0; j < 1 + 2 * nk; j++)
        rm.ReplyWithLongLong(k->keys.ctx, out[j]);
}

/* A report (argv[2] "3", check.lua's charge): every tier of every check,
 * in order, charged its cost with no decision (read, write), then read
 * again and decided for a unit. An algorithm that takes no report (or no
 * refund, for a cost < 0) refuses the request before anything is written;
 * a calendar tier's bounds that do not hold now, or a key of another
 * type, refuse it where the script raises, after the tiers before it were
 * written, as there. */
static void report(struct call *k, RedisModuleString **keys, const struct module_request *req,
                   void *xs, int64_t now)
{
    char err[MODULE_KEYS_ERR];
    int64_t fig[REDIS_STATE_FIGURES];
    for (size_t c = 0; c < req->nchecks; c++) {
        for (size_t i = req->checks[c].first; i < req->checks[c].last; i++) {
            enum algorithm a = req->tiers[i].t.algorithm;
            const char *why = !policy_algorithm_reports(a) ? "takes no report"
                              : req->checks[c].cost < 0 && !policy_algorithm_refunds(a)
                                  ? "cannot give back a cost"
                                  : NULL;
            if (why) {
                snprintf(err, sizeof err, "ERR ratelimitd: %s %s", policy_algorithm_name(a), why);
                rm.ReplyWithError(k->keys.ctx, err);
                return;
            }
        }
    }
    int request_allowed = 1;
    for (size_t c = 0; c < req->nchecks; c++) {
        const struct module_check *chk = &req->checks[c];
        for (size_t i = chk->first; i < chk->last; i++) {
            const struct module_tier *t = &req->tiers[i];
            struct redis_tier *x = redis_state_tier_at(xs, i);
            if (chk->cost != 0) {
                struct redis_write w;
                if (read_tier(k, keys[t->key], x, t, 0, now) < 0)
                    return;
                redis_state_report(x, chk->cost, now, req->server_clock, &w);
                if (write_state(k, keys + t->key, t, &w) < 0)
                    return;
            }
            int allowed = read_tier(k, keys[t->key], x, t, 1, now);
            if (allowed < 0)
                return;
            if (!allowed && !chk->shadow)
                request_allowed = 0;
        }
    }
    for (size_t i = 0; i < req->ntiers; i++) {
        const struct module_tier *t = &req->tiers[i];
        if (module_keys_reread(&k->keys, keys[t->key], redis_state_tier_at(xs, i), t, now, err) <
            0) {
            rm.ReplyWithError(k->keys.ctx, err);
            return;
        }
    }
    rm.ReplyWithArray(k->keys.ctx, (long)(2 + 7 * req->ntiers));
    rm.ReplyWithLongLong(k->keys.ctx, now);
    rm.ReplyWithLongLong(k->keys.ctx, request_allowed);
    for (size_t i = 0; i < req->ntiers; i++) {
        redis_state_figures(redis_state_tier_at(xs, i), now, 0, fig);
        for (int f = 0; f < REDIS_STATE_FIGURES; f++)
            rm.ReplyWithLongLong(k->keys.ctx, fig[f]);
    }
}

/* Replies check.lua's array: out[0..n), then the block's two integers. */
static void reply_block(struct call *k, const int64_t *out, size_t n, int64_t a, int64_t b)
{
    rm.ReplyWithArray(k->keys.ctx, (long)(n + 2));
    for (size_t i = 0; i < n; i++)
        rm.ReplyWithLongLong(k->keys.ctx, out[i]);
    rm.ReplyWithLongLong(k->keys.ctx, a);
    rm.ReplyWithLongLong(k->keys.ctx, b);
}

/* ARGV[2] "L<want>" (check.lua's take_block): the check decided as a real
 * run; if every tier allows, a block of as many units as each has left
 * (tier.c's tier_take_block) is every tier's cost, reported and taken.
 * "G<taken>" (give_back): every tier loaded, and if the block's windows
 * still hold them all, each given back the check's cost as a report's
 * refund (each from its own read, as the script's loads all come first);
 * then each read afresh and reported as a report's unit. out: room for
 * 2 + 7 per tier. */
static void block(struct call *k, RedisModuleString **keys, const struct module_request *req,
                  void *xs, int64_t *out, int64_t now)
{
    size_t n = req->ntiers;
    int64_t units = req->checks[0].cost, a = 0, b = 0;
    int allowed = 1, same = 0;
    for (size_t i = 0; i < n; i++) {
        int got = read_tier(k, keys[req->tiers[i].key], redis_state_tier_at(xs, i), &req->tiers[i],
                            req->block == 'L' ? units : 0, now);
        if (got < 0)
            return;
        allowed &= got;
    }
    if (req->block == 'L' && allowed)
        a = redis_state_take_block(xs, n, req->block_n, now, &b);
    if (req->block == 'G') {
        same = redis_state_lease_same(xs, n, req->block_n);
        for (size_t i = 0; same && i < n; i++) {
            struct redis_write w;
            redis_state_report(redis_state_tier_at(xs, i), -units, now, req->server_clock, &w);
            if (write_state(k, keys + req->tiers[i].key, &req->tiers[i], &w) < 0)
                return;
        }
        a = same ? units : 0;
        for (size_t i = 0; i < n; i++) {
            int got = read_tier(k, keys[req->tiers[i].key], redis_state_tier_at(xs, i),
                                &req->tiers[i], 1, now);
            if (got < 0)
                return;
            allowed &= got;
        }
    }
    out[0] = now;
    out[1] = allowed;
    for (size_t i = 0; i < n; i++)
        redis_state_figures(redis_state_tier_at(xs, i), now, req->block == 'L' && allowed,
                            out + 2 + REDIS_STATE_FIGURES * i);
    for (size_t i = 0; req->block == 'L' && allowed && i < n; i++) {
        struct redis_write w;
        redis_state_commit(redis_state_tier_at(xs, i), now, req->server_clock, &w);
        if (write_state(k, keys + req->tiers[i].key, &req->tiers[i], &w) < 0)
            return;
    }
    reply_block(k, out, 2 + REDIS_STATE_FIGURES * n, a, b);
}

/* Decides one request whose arguments are decoded in req, replying with
 * check.lua's array, whose integers (out: room for 9 per tier) are all
 * computed from pass 1's state before pass 2 writes, and sent after it:
 * a write the script's redis.call would raise on answers its error. */
static void decide(struct call *k, RedisModuleString **keys, struct module_request *req, void *xs,
                   int *check_allowed, int64_t *out)
{
    int64_t now = req->now;
    size_t n = 2;
    if (req->server_clock && server_time(k, &now) < 0) {
        rm.ReplyWithError(k->keys.ctx, "ERR ratelimitd: TIME failed");
        return;
    }
    if (req->report) {
        report(k, keys, req, xs, now);
        return;
    }
    if (req->block) {
        block(k, keys, req, xs, out, now);
        return;
    }
    int request_allowed = 1;
    for (size_t c = 0; c < req->nchecks; c++) {
        const struct module_check *chk = &req->checks[c];
        check_allowed[c] = 1;
        for (size_t i = chk->first; i < chk->last; i++) {
            int allowed = read_tier(k, keys[req->tiers[i].key], redis_state_tier_at(xs, i),
                                    &req->tiers[i], chk->cost, now);
            if (allowed < 0)
                return;
            check_allowed[c] &= allowed;
        }
        if (!chk->shadow && !check_allowed[c])
            request_allowed = 0;
    }
    out[0] = now;
    out[1] = request_allowed;
    for (size_t c = 0; c < req->nchecks; c++) {
        const struct module_check *chk = &req->checks[c];
        for (size_t i = chk->first; i < chk->last; i++, n += REDIS_STATE_FIGURES)
            redis_state_figures(redis_state_tier_at(xs, i), now,
                                request_allowed && check_allowed[c], out + n);
    }
    for (size_t i = 0; req->both && i < req->ntiers; i++, n += 2) {
        int64_t fig[REDIS_STATE_FIGURES];
        redis_state_figures(redis_state_tier_at(xs, i), now, 0, fig);
        out[n] = fig[2];
        out[n + 1] = fig[3];
    }
    for (size_t c = 0; request_allowed && !req->dry_run && c < req->nchecks; c++) {
        const struct module_check *chk = &req->checks[c];
        for (size_t i = chk->first; check_allowed[c] && chk->cost > 0 && i < chk->last; i++) {
            struct redis_write w;
            if (!redis_state_can_commit(redis_state_tier_at(xs, i))) {
                rm.ReplyWithError(k->keys.ctx, "ERR ratelimitd: a concurrency tier needs the lease "
                                               "nonce (ARGV's last)");
                return;
            }
            redis_state_commit(redis_state_tier_at(xs, i), now, req->server_clock, &w);
            if (write_state(k, keys + req->tiers[i].key, &req->tiers[i], &w) < 0)
                return;
        }
    }
    rm.ReplyWithArray(k->keys.ctx, (long)n);
    for (size_t i = 0; i < n; i++)
        rm.ReplyWithLongLong(k->keys.ctx, out[i]);
}

/* Whether argv[0..na), with nk keys, is byte for byte the request k
 * decoded last: the requests of a batch mostly are (the same policies and
 * costs, "" for Redis's clock; only their keys differ), and comparing
 * costs Redis less than decoding the policies again. */
static int decoded_last(const struct call *k, const struct module_arg *argv, size_t na, size_t nk)
{
    if (!k->last || k->last_na != na || k->last_nk != nk)
        return 0;
    for (size_t i = 0; i < na; i++)
        if (argv[i].len != k->last[i].len || memcmp(argv[i].p, k->last[i].p, argv[i].len) != 0)
            return 0;
    return 1;
}

/* Decodes and decides one request: keys[0..nk), argv[0..na); replies with
 * its array or its error. */
static void one_request(struct call *k, RedisModuleString **keys, size_t nk,
                        const struct module_arg *argv, size_t na)
{
    char err[MODULE_ERR_BUF + 8];
    if (!decoded_last(k, argv, na, nk)) {
        k->last = NULL;
        k->req.checks = k->checks;
        k->req.tiers = k->tiers;
        memcpy(err, "ERR ", 4);
        if (module_args_request(argv, na, nk, &k->req, err + 4, MODULE_ERR_BUF) < 0) {
            rm.ReplyWithError(k->keys.ctx, err);
            return;
        }
        k->last = argv, k->last_na = na, k->last_nk = nk;
    }
    k->nonce = k->req.has_nonce ? k->req.nonce : NULL;
    if (k->req.lease_op)
        lease_ops(k, keys, nk, argv, na, &k->req, k->out);
    else
        decide(k, keys, &k->req, k->xs, k->check_allowed, k->out);
    for (size_t i = 0; i < nk; i++)
        redis_state_release(redis_state_tier_at(k->xs, i));
}

/* n bytes rounded up to the strictest alignment, as malloc aligns. */
static size_t aligned(size_t n)
{
    size_t a = _Alignof(max_align_t);
    return (n + a - 1) / a * a;
}

/* Readies k's arrays for any request of a call of nk keys and na
 * arguments (each request's counts are at most these): one allocation
 * per call, not five per request, as a batch's requests are many and
 * small. */
static void call_begin(struct call *k, size_t nk, size_t na)
{
    size_t sz[5] = {aligned((na / 2 + 1) * sizeof *k->checks), aligned((nk + 1) * sizeof *k->tiers),
                    aligned((nk + 1) * redis_state_tier_size()),
                    aligned((2 + 9 * nk) * sizeof *k->out),
                    aligned((na / 2 + 1) * sizeof *k->check_allowed)};
    char *p = rm.Alloc(sz[0] + sz[1] + sz[2] + sz[3] + sz[4]);
    k->checks = (struct module_check *)p;
    k->tiers = (struct module_tier *)(p += sz[0]);
    k->xs = p += sz[1];
    k->out = (int64_t *)(p += sz[2]);
    k->check_allowed = (int *)(p + sz[3]);
    /* zeroed once: redis_state_release zeroes each tier after a request */
    memset(k->xs, 0, sz[2]);
}

static void call_end(struct call *k)
{
    rm.Free(k->checks);
}

/* argv[1] "B": the batch, each request decided in turn with its own reply. */
static void batch(struct call *k, RedisModuleString **keys, size_t nkeys,
                  const struct module_arg *argv, size_t na)
{
    char err[MODULE_ERR_BUF + 8];
    size_t n;
    memcpy(err, "ERR ", 4);
    if (module_args_batch_count(argv, na, &n, err + 4, MODULE_ERR_BUF) < 0) {
        rm.ReplyWithError(k->keys.ctx, err);
        return;
    }
    size_t *nk = rm.Alloc(2 * n * sizeof *nk), *nargs = nk + n;
    if (module_args_batch_counts(argv, na, nkeys, n, nk, nargs, err + 4, MODULE_ERR_BUF) < 0) {
        rm.ReplyWithError(k->keys.ctx, err);
    } else {
        size_t ko = 0, ao = 2 + 2 * n;
        rm.ReplyWithArray(k->keys.ctx, (long)n);
        for (size_t r = 0; r < n; r++) {
            one_request(k, keys + ko, nk[r], argv + ao, nargs[r]);
            ko += nk[r], ao += nargs[r];
        }
    }
    rm.Free(nk);
}

/* ratelimitd.check numkeys key... arg... */
static int check_command(RedisModuleCtx *ctx, RedisModuleString **argv, int argc)
{
    size_t len;
    const char *p;
    long long numkeys = 0;
    if (argc < 2)
        return rm.WrongArity(ctx);
    p = rm.StringPtrLen(argv[1], &len);
    for (size_t i = 0; i < len && numkeys <= argc; i++)
        numkeys = p[i] >= '0' && p[i] <= '9' ? numkeys * 10 + (p[i] - '0') : argc + 1;
    if (len == 0 || numkeys > argc - 2) {
        if (rm.IsKeysPositionRequest(ctx))
            return REDISMODULE_OK;
        return rm.ReplyWithError(ctx, "ERR ratelimitd: numkeys must be an integer from 0 to the "
                                      "number of arguments after it");
    }
    if (rm.IsKeysPositionRequest(ctx)) {
        for (int i = 0; i < numkeys; i++)
            rm.KeyAtPos(ctx, 2 + i);
        return REDISMODULE_OK;
    }
    size_t na = (size_t)(argc - 2 - numkeys);
    struct module_arg *args = rm.Alloc((na + 1) * sizeof *args);
    for (size_t i = 0; i < na; i++)
        args[i].p = rm.StringPtrLen(argv[2 + numkeys + i], &args[i].len);
    struct call k = {.keys = {&rm, ctx}, .time = -1};
    call_begin(&k, (size_t)numkeys, na);
    if (na >= 1 && args[0].len == 1 && args[0].p[0] == 'B')
        batch(&k, argv + 2, (size_t)numkeys, args, na);
    else
        one_request(&k, argv + 2, (size_t)numkeys, args, na);
    call_end(&k);
    rm.Free(args);
    return REDISMODULE_OK;
}

/* The one symbol the module exports (it is built -fvisibility=hidden, so
 * that none of its names binds to one of Redis's). */
__attribute__((visibility("default"))) int RedisModule_OnLoad(RedisModuleCtx *ctx,
                                                              RedisModuleString **argv, int argc);

int RedisModule_OnLoad(RedisModuleCtx *ctx, RedisModuleString **argv, int argc)
{
    (void)argv;
    (void)argc;
    if (module_api_init(&rm, ctx, "ratelimitd", 1) != REDISMODULE_OK)
        return REDISMODULE_ERR;
    /* Keys by getkeys-api: numkeys says where they end, as FCALL's. */
    if (rm.CreateCommand(ctx, "ratelimitd.check", check_command, "write deny-oom getkeys-api", 0, 0,
                         0) != REDISMODULE_OK)
        return REDISMODULE_ERR;
    return REDISMODULE_OK;
}
