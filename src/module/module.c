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
 * Owns: the command, its Redis reads and writes (GET or HGETALL; SET, or
 * HINCRBY, HDEL and PEXPIRE, each with "!", so that replicas and the AOF
 * get the effects, never this command; a log's and a concurrency tier's
 * sorted-set commands and the lease calls', groups of their own below),
 * the server's TIME, read once per call as the script reads it once per
 * batch, and the order of a request's steps (check.lua's decide, charge,
 * lease_ops, take_block and give_back).
 * Does not own: the arguments' grammar (module_args.c), the arithmetic.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "limiter/redis_state.h"
#include "module/module_args.h"
#include "module/redismodule_api.h"

/* The API table: the module's one static, written once by OnLoad before
 * any command can run (see redismodule_api.h for why it must be one). */
static struct redis_module_api rm;

/* One call's context: Redis's, the server's TIME once read, and the lease
 * nonce of the request being decided (NULL: none). */
struct call {
    RedisModuleCtx *ctx;
    int64_t time; /* µs; -1 until read */
    const char *nonce;
};

/* The server's TIME in µs, read at the call's first need. */
static int server_time(struct call *k, int64_t *now)
{
    if (k->time < 0) {
        RedisModuleCallReply *r = rm.Call(k->ctx, "TIME", "");
        int64_t part[2] = {0, 0};
        if (!r || rm.CallReplyType(r) != REDISMODULE_REPLY_ARRAY || rm.CallReplyLength(r) != 2) {
            if (r)
                rm.FreeCallReply(r);
            return -1;
        }
        for (size_t i = 0; i < 2; i++) {
            size_t len;
            const char *p = rm.CallReplyStringPtr(rm.CallReplyArrayElement(r, i), &len);
            for (size_t j = 0; p && j < len; j++)
                part[i] = part[i] * 10 + (p[j] - '0');
        }
        rm.FreeCallReply(r);
        k->time = part[0] * 1000000 + part[1];
    }
    *now = k->time;
    return 0;
}

/* Replies "ERR ratelimitd: <what>: <r's error>" (a Redis command refused,
 * as the script's redis.call raises). */
static void reply_call_error(struct call *k, const char *what, RedisModuleCallReply *r)
{
    char err[200];
    size_t len = 0;
    const char *msg = r ? rm.CallReplyStringPtr(r, &len) : NULL;
    snprintf(err, sizeof err, "ERR ratelimitd: %s: %.*s", what,
             msg ? (int)(len > 120 ? 120 : len) : 6, msg ? msg : "failed");
    rm.ReplyWithError(k->ctx, err);
}

/* The pairs of r, an array reply of what (HGETALL's field, value; or a
 * WITHSCORES range's member, score), as *n fields pointing into r (which
 * the caller frees after them: rm.Free); NULL having replied the error of
 * a reply that is no array (another type: the script's error), r freed. */
static struct redis_field *fields_of(struct call *k, const char *what, RedisModuleCallReply *r,
                                     size_t *n)
{
    if (!r || rm.CallReplyType(r) != REDISMODULE_REPLY_ARRAY) {
        reply_call_error(k, what, r);
        if (r)
            rm.FreeCallReply(r);
        return NULL;
    }
    *n = rm.CallReplyLength(r) / 2;
    struct redis_field *f = rm.Alloc((*n + 1) * sizeof *f);
    for (size_t i = 0; i < *n; i++) {
        f[i].name = rm.CallReplyStringPtr(rm.CallReplyArrayElement(r, 2 * i), &f[i].name_len);
        f[i].value = rm.CallReplyStringPtr(rm.CallReplyArrayElement(r, 2 * i + 1), &f[i].value_len);
    }
    return f;
}

/* Pass 1 for a hash tier: HGETALL (another type is the script's error). */
static int read_hash(struct call *k, RedisModuleString *key, struct redis_tier *x,
                     const struct module_tier *t, int64_t cost, int64_t now)
{
    size_t n;
    RedisModuleCallReply *r = rm.Call(k->ctx, "HGETALL", "s", key);
    struct redis_field *f = fields_of(k, "HGETALL", r, &n);
    if (!f)
        return -1;
    int allowed = redis_state_read_hash(x, &t->t, cost, f, n, now);
    rm.Free(f);
    rm.FreeCallReply(r);
    if (allowed < 0)
        rm.ReplyWithError(k->ctx, "ERR ratelimitd: a bucket hash holds a field or value that "
                                  "is no integer");
    return allowed;
}

/* (defined with the strings' and hashes' writes, below) */
static int run(struct call *k, const char *what, RedisModuleCallReply *r);

/* ---- sliding_window_log: the sorted set and its sequence counter ----
 * The script's commands, read (ZCOUNT, ZRANGEBYSCORE ... LIMIT i 1) and
 * written (ZREMRANGEBYSCORE, INCRBY, ZADD in chunks, PEXPIRE both), apart
 * from the strings' and hashes' I/O above and below. */

/* A read of one set: the call, its key, and the reply a command failed
 * with (NULL after a failure: a score that is no integer). */
struct zset_read {
    struct call *k;
    RedisModuleString *key;
    const char *what;
    RedisModuleCallReply *err;
};

static int zset_failed(struct zset_read *z, const char *what, RedisModuleCallReply *r)
{
    z->what = what;
    z->err = r;
    return -1;
}

static int zset_count(void *ctx, int64_t from, int64_t *n)
{
    struct zset_read *z = ctx;
    char bound[24];
    snprintf(bound, sizeof bound, "(%lld", (long long)from);
    RedisModuleCallReply *r = rm.Call(z->k->ctx, "ZCOUNT", "scc", z->key, bound, "+inf");
    if (!r || rm.CallReplyType(r) != REDISMODULE_REPLY_INTEGER)
        return zset_failed(z, "ZCOUNT", r);
    *n = rm.CallReplyInteger(r);
    rm.FreeCallReply(r);
    return 0;
}

/* The score of [member, score] in r (a ZRANGEBYSCORE's reply, or its
 * REV twin's), which is freed. */
static int zset_score_of(struct zset_read *z, const char *what, RedisModuleCallReply *r,
                         int64_t *score)
{
    size_t len = 0;
    if (!r || rm.CallReplyType(r) != REDISMODULE_REPLY_ARRAY)
        return zset_failed(z, what, r);
    const char *p = rm.CallReplyLength(r) == 2
                        ? rm.CallReplyStringPtr(rm.CallReplyArrayElement(r, 1), &len)
                        : NULL;
    int bad = !p || redis_state_integer(p, len, score) < 0;
    rm.FreeCallReply(r);
    return bad ? zset_failed(z, what, NULL) : 0;
}

static int zset_newest(void *ctx, int64_t from, int64_t *score)
{
    struct zset_read *z = ctx;
    char bound[24];
    snprintf(bound, sizeof bound, "(%lld", (long long)from);
    return zset_score_of(z, "ZREVRANGEBYSCORE",
                         rm.Call(z->k->ctx, "ZREVRANGEBYSCORE", "sccccll", z->key, "+inf", bound,
                                 "WITHSCORES", "LIMIT", 0LL, 1LL),
                         score);
}

static int zset_score(void *ctx, int64_t from, int64_t i, int64_t *score)
{
    struct zset_read *z = ctx;
    char bound[24];
    snprintf(bound, sizeof bound, "(%lld", (long long)from);
    return zset_score_of(z, "ZRANGEBYSCORE",
                         rm.Call(z->k->ctx, "ZRANGEBYSCORE", "sccccll", z->key, bound, "+inf",
                                 "WITHSCORES", "LIMIT", (long long)i, 1LL),
                         score);
}

/* Pass 1 for a log tier: as read_tier; or (t NULL) a report's second read
 * of x's scores (redis_state_reread_log), 0 or -1 having replied. */
static int read_log(struct call *k, RedisModuleString *key, struct redis_tier *x,
                    const struct module_tier *t, int64_t cost, int64_t now)
{
    struct zset_read z = {k, key, NULL, NULL};
    struct redis_zset_reader reader = {&z, zset_count, zset_newest, zset_score};
    int allowed = t ? redis_state_read_log(x, &t->t, cost, &reader, now)
                    : redis_state_reread_log(x, &reader, now);
    if (allowed >= 0)
        return allowed;
    if (z.err)
        reply_call_error(k, z.what, z.err);
    else
        rm.ReplyWithError(k->ctx, "ERR ratelimitd: a log's sorted set holds a score that is no "
                                  "integer");
    if (z.err)
        rm.FreeCallReply(z.err);
    return -1;
}

/* One ZADD of the members scored w->score numbered seq .. seq + n - 1. */
static int zadd_chunk(struct call *k, RedisModuleString *key, const struct redis_write *w,
                      long long seq, size_t n)
{
    char score[24], member[48];
    int slen = snprintf(score, sizeof score, "%lld", (long long)w->score);
    RedisModuleString **v = rm.Alloc(2 * n * sizeof *v);
    for (size_t j = 0; j < n; j++) {
        int mlen = snprintf(member, sizeof member, "%s-%lld", score, seq + (long long)j);
        v[2 * j] = rm.CreateString(k->ctx, score, (size_t)slen);
        v[2 * j + 1] = rm.CreateString(k->ctx, member, (size_t)mlen);
    }
    int rc = run(k, "ZADD", rm.Call(k->ctx, "ZADD", "!sv", key, v, 2 * n));
    for (size_t j = 0; j < 2 * n; j++)
        rm.FreeString(k->ctx, v[j]);
    rm.Free(v);
    return rc;
}

/* A log tier's write (redis_state.h's REDIS_LAYOUT_LOG): key[0] the set,
 * key[1] its counter. */
static int write_log(struct call *k, RedisModuleString **key, const struct redis_write *w)
{
    if (run(k, "ZREMRANGEBYSCORE",
            rm.Call(k->ctx, "ZREMRANGEBYSCORE", "!scl", key[0], "-inf", (long long)w->field)) < 0)
        return -1;
    RedisModuleCallReply *r = rm.Call(k->ctx, "INCRBY", "!sl", key[1], (long long)w->by);
    if (!r || rm.CallReplyType(r) != REDISMODULE_REPLY_INTEGER) {
        reply_call_error(k, "INCRBY", r);
        if (r)
            rm.FreeCallReply(r);
        return -1;
    }
    long long last = rm.CallReplyInteger(r);
    rm.FreeCallReply(r);
    for (long long seq = last - w->by + 1; seq <= last; seq += REDIS_LOG_CHUNK) {
        long long n = last - seq + 1 < REDIS_LOG_CHUNK ? last - seq + 1 : REDIS_LOG_CHUNK;
        if (zadd_chunk(k, key[0], w, seq, (size_t)n) < 0)
            return -1;
    }
    for (int i = 0; i < 2; i++)
        if (run(k, "PEXPIRE", rm.Call(k->ctx, "PEXPIRE", "!sl", key[i], (long long)w->ex.ms)) < 0)
            return -1;
    return 0;
}

/* ---- concurrency: the sorted set of leases, and the lease calls ----
 * The script's commands: ZRANGEBYSCORE key (now +inf WITHSCORES to read;
 * ZREMRANGEBYSCORE, ZADD and PEXPIRE to take a lease; ZSCORE, then ZREM,
 * or ZADD XX, PTTL and PEXPIRE, to release or renew one. */

/* Pass 1 for a concurrency tier: as read_tier. */
static int read_leases(struct call *k, RedisModuleString *key, struct redis_tier *x,
                       const struct module_tier *t, int64_t cost, int64_t now)
{
    char bound[24];
    snprintf(bound, sizeof bound, "(%lld", (long long)now);
    size_t n;
    RedisModuleCallReply *r =
        rm.Call(k->ctx, "ZRANGEBYSCORE", "sccc", key, bound, "+inf", "WITHSCORES");
    struct redis_field *f = fields_of(k, "ZRANGEBYSCORE", r, &n);
    if (!f)
        return -1;
    int allowed = redis_state_read_leases(x, &t->t, cost, k->nonce, f, n, now);
    rm.Free(f);
    rm.FreeCallReply(r);
    if (allowed < 0)
        rm.ReplyWithError(k->ctx, "ERR ratelimitd: a concurrency set holds a score that is no "
                                  "integer, or more units than 2^53");
    return allowed;
}

/* A concurrency tier's write (redis_state.h's REDIS_LAYOUT_LEASES). */
static int write_leases(struct call *k, RedisModuleString *key, const struct redis_write *w)
{
    char score[24], member[48];
    snprintf(score, sizeof score, "%lld", (long long)w->score);
    snprintf(member, sizeof member, "%lld:%s", (long long)w->by, w->nonce);
    if (run(k, "ZREMRANGEBYSCORE",
            rm.Call(k->ctx, "ZREMRANGEBYSCORE", "!scl", key, "-inf", (long long)w->field)) < 0 ||
        run(k, "ZADD", rm.Call(k->ctx, "ZADD", "!scc", key, score, member)) < 0)
        return -1;
    return run(k, "PEXPIRE", rm.Call(k->ctx, "PEXPIRE", "!sl", key, (long long)w->ex.ms));
}

/* One lease call on key: ZSCORE of member (anything but a string: the
 * member unknown, as the script's pcall), then the write the outcome
 * asks for. 0 with out[0..2) its status and expiry, or -1 having replied
 * the error of a write Redis refused. */
static int lease_op(struct call *k, RedisModuleString *key, const struct module_arg *member,
                    int renew, int64_t timeout, int64_t now, int64_t *out)
{
    int64_t px;
    size_t len = 0;
    RedisModuleCallReply *r = rm.Call(k->ctx, "ZSCORE", "sb", key, member->p, member->len);
    const char *score = r && rm.CallReplyType(r) == REDISMODULE_REPLY_STRING
                            ? rm.CallReplyStringPtr(r, &len)
                            : NULL;
    int write = redis_state_lease_op(score, len, renew, timeout, now, &out[0], &out[1], &px);
    if (r)
        rm.FreeCallReply(r);
    if (write == 1)
        return run(k, "ZREM", rm.Call(k->ctx, "ZREM", "!sb", key, member->p, member->len));
    if (write == 0)
        return 0;
    if (run(k, "ZADD",
            rm.Call(k->ctx, "ZADD", "!sclb", key, "XX", (long long)out[1], member->p,
                    member->len)) < 0)
        return -1;
    r = rm.Call(k->ctx, "PTTL", "s", key);
    long long pttl =
        r && rm.CallReplyType(r) == REDISMODULE_REPLY_INTEGER ? rm.CallReplyInteger(r) : -1;
    if (r)
        rm.FreeCallReply(r);
    if (pttl >= px)
        return 0;
    return run(k, "PEXPIRE", rm.Call(k->ctx, "PEXPIRE", "!sl", key, (long long)px));
}

/* ARGV[2] "r" or "n" (check.lua's lease_ops): each key's lease in turn,
 * its timeout decoded as it comes (a bad one fails the request after the
 * leases before it were acted on, as the script's error does), replying
 * {now, then status and expiry per key}. */
static void lease_ops(struct call *k, RedisModuleString **keys, size_t nk,
                      const struct module_arg *argv, size_t na, const struct module_request *req)
{
    char err[MODULE_ERR_BUF + 8];
    int64_t now = req->now, timeout;
    if (req->server_clock && server_time(k, &now) < 0) {
        rm.ReplyWithError(k->ctx, "ERR ratelimitd: TIME failed");
        return;
    }
    int64_t *out = rm.Alloc((1 + 2 * nk) * sizeof *out);
    size_t i = 0;
    memcpy(err, "ERR ", 4);
    for (; i < nk; i++) {
        if (module_args_lease_timeout(argv, na, i, &timeout, err + 4, MODULE_ERR_BUF) < 0) {
            rm.ReplyWithError(k->ctx, err);
            break;
        }
        if (lease_op(k, keys[i], &argv[2 + 2 * i], req->lease_op == 'n', timeout, now,
                     out + 1 + 2 * i) < 0)
            break;
    }
    if (i == nk) {
        out[0] = now;
        rm.ReplyWithArray(k->ctx, (long)(1 + 2 * nk));
        for (size_t j = 0; j < 1 + 2 * nk; j++)
            rm.ReplyWithLongLong(k->ctx, out[j]);
    }
    rm.Free(out);
}

/* ---- the strings and hashes ---- */

/* Pass 1 for one tier: GET its key (anything but a string reads as absent,
 * as the script's pcall of GET), or HGETALL, decode and decide. Returns 1
 * if it allows, 0 if not, or -1 having replied the script's error (a
 * calendar tier's bounds that do not hold now, a key of another type). */
static int read_tier(struct call *k, RedisModuleString *key, struct redis_tier *x,
                     const struct module_tier *t, int64_t cost, int64_t now)
{
    if (redis_state_layout(&t->t) == REDIS_LAYOUT_LOG)
        return read_log(k, key, x, t, cost, now);
    if (redis_state_layout(&t->t) == REDIS_LAYOUT_LEASES)
        return read_leases(k, key, x, t, cost, now);
    if (redis_state_layout(&t->t) == REDIS_LAYOUT_HASH)
        return read_hash(k, key, x, t, cost, now);
    RedisModuleCallReply *r = rm.Call(k->ctx, "GET", "s", key);
    const char *val = NULL;
    size_t len = 0;
    if (r && rm.CallReplyType(r) == REDISMODULE_REPLY_STRING)
        val = rm.CallReplyStringPtr(r, &len);
    int allowed = redis_state_read(x, &t->t, t->calendar ? t->bounds : NULL, cost, val, len, now);
    if (r)
        rm.FreeCallReply(r);
    if (allowed < 0) {
        char err[160];
        snprintf(err, sizeof err,
                 "ERR ratelimitd: now %lld is outside the calendar bounds sent [%lld, %lld): "
                 "clocks a window apart",
                 (long long)now, (long long)t->bounds[0], (long long)t->bounds[3]);
        rm.ReplyWithError(k->ctx, err);
    }
    return allowed;
}

/* Runs one write command; 0, or -1 having replied its error. A SET
 * refused (out of memory under a maxmemory policy that evicts nothing),
 * or a HINCRBY on a key another tier of the request just made a string,
 * fails the request as the script's redis.call raises, its writes before
 * kept, as there. */
static int run(struct call *k, const char *what, RedisModuleCallReply *r)
{
    int ok = r && rm.CallReplyType(r) != REDISMODULE_REPLY_ERROR;
    if (!ok)
        reply_call_error(k, what, r);
    if (r)
        rm.FreeCallReply(r);
    return ok ? 0 : -1;
}

/* Makes w's write to the tier's keys (key[0], and a log's counter
 * key[1]), each command replicated as itself ("!"). */
static int write_state(struct call *k, RedisModuleString **keys, const struct module_tier *t,
                       const struct redis_write *w)
{
    RedisModuleString *key = keys[0];
    if (redis_state_layout(&t->t) == REDIS_LAYOUT_LOG)
        return write_log(k, keys, w);
    if (redis_state_layout(&t->t) == REDIS_LAYOUT_LEASES)
        return write_leases(k, key, w);
    if (redis_state_layout(&t->t) == REDIS_LAYOUT_STRING)
        return run(k, "SET",
                   rm.Call(k->ctx, "SET", "!sbcl", key, w->buf, w->len, w->ex.at ? "PXAT" : "PX",
                           (long long)w->ex.ms));
    if (run(k, "HINCRBY",
            rm.Call(k->ctx, "HINCRBY", "!sll", key, (long long)w->field, (long long)w->by)) < 0)
        return -1;
    for (size_t i = 0; i < w->ndel; i++)
        if (run(k, "HDEL", rm.Call(k->ctx, "HDEL", "!sl", key, (long long)w->del[i])) < 0)
            return -1;
    return run(k, "PEXPIRE", rm.Call(k->ctx, "PEXPIRE", "!sl", key, (long long)w->ex.ms));
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
    char err[160];
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
                rm.ReplyWithError(k->ctx, err);
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
    for (size_t i = 0; i < req->ntiers; i++)
        if (redis_state_layout(&req->tiers[i].t) == REDIS_LAYOUT_LOG &&
            read_log(k, keys[req->tiers[i].key], redis_state_tier_at(xs, i), NULL, 0, now) < 0)
            return;
    rm.ReplyWithArray(k->ctx, (long)(2 + 7 * req->ntiers));
    rm.ReplyWithLongLong(k->ctx, now);
    rm.ReplyWithLongLong(k->ctx, request_allowed);
    for (size_t i = 0; i < req->ntiers; i++) {
        redis_state_figures(redis_state_tier_at(xs, i), now, 0, fig);
        for (int f = 0; f < REDIS_STATE_FIGURES; f++)
            rm.ReplyWithLongLong(k->ctx, fig[f]);
    }
}

/* Replies check.lua's array: out[0..n), then the block's two integers. */
static void reply_block(struct call *k, const int64_t *out, size_t n, int64_t a, int64_t b)
{
    rm.ReplyWithArray(k->ctx, (long)(n + 2));
    for (size_t i = 0; i < n; i++)
        rm.ReplyWithLongLong(k->ctx, out[i]);
    rm.ReplyWithLongLong(k->ctx, a);
    rm.ReplyWithLongLong(k->ctx, b);
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
        rm.ReplyWithError(k->ctx, "ERR ratelimitd: TIME failed");
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
                rm.ReplyWithError(k->ctx, "ERR ratelimitd: a concurrency tier needs the lease "
                                          "nonce (ARGV's last)");
                return;
            }
            redis_state_commit(redis_state_tier_at(xs, i), now, req->server_clock, &w);
            if (write_state(k, keys + req->tiers[i].key, &req->tiers[i], &w) < 0)
                return;
        }
    }
    rm.ReplyWithArray(k->ctx, (long)n);
    for (size_t i = 0; i < n; i++)
        rm.ReplyWithLongLong(k->ctx, out[i]);
}

/* Decodes and decides one request: keys[0..nk), argv[0..na); replies with
 * its array or its error. */
static void one_request(struct call *k, RedisModuleString **keys, size_t nk,
                        const struct module_arg *argv, size_t na)
{
    char err[MODULE_ERR_BUF + 8];
    struct module_request req;
    /* Sized by the counts, which the framing bounded by argc. */
    req.checks = rm.Alloc((na / 2 + 1) * sizeof *req.checks);
    req.tiers = rm.Alloc((nk + 1) * sizeof *req.tiers);
    int *check_allowed = rm.Alloc((na / 2 + 1) * sizeof *check_allowed);
    int64_t *out = rm.Alloc((2 + 9 * nk) * sizeof *out);
    void *xs = rm.Alloc((nk + 1) * redis_state_tier_size());
    memset(xs, 0, (nk + 1) * redis_state_tier_size());
    memcpy(err, "ERR ", 4);
    if (module_args_request(argv, na, nk, &req, err + 4, MODULE_ERR_BUF) < 0) {
        rm.ReplyWithError(k->ctx, err);
    } else if (req.lease_op) {
        lease_ops(k, keys, nk, argv, na, &req);
    } else {
        k->nonce = req.has_nonce ? req.nonce : NULL;
        decide(k, keys, &req, xs, check_allowed, out);
    }
    for (size_t i = 0; i < nk; i++)
        redis_state_release(redis_state_tier_at(xs, i));
    rm.Free(xs);
    rm.Free(out);
    rm.Free(check_allowed);
    rm.Free(req.tiers);
    rm.Free(req.checks);
}

/* argv[1] "B": the batch, each request decided in turn with its own reply. */
static void batch(struct call *k, RedisModuleString **keys, size_t nkeys,
                  const struct module_arg *argv, size_t na)
{
    char err[MODULE_ERR_BUF + 8];
    size_t n;
    memcpy(err, "ERR ", 4);
    if (module_args_batch_count(argv, na, &n, err + 4, MODULE_ERR_BUF) < 0) {
        rm.ReplyWithError(k->ctx, err);
        return;
    }
    size_t *nk = rm.Alloc(2 * n * sizeof *nk), *nargs = nk + n;
    if (module_args_batch_counts(argv, na, nkeys, n, nk, nargs, err + 4, MODULE_ERR_BUF) < 0) {
        rm.ReplyWithError(k->ctx, err);
    } else {
        size_t ko = 0, ao = 2 + 2 * n;
        rm.ReplyWithArray(k->ctx, (long)n);
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
    struct call k = {ctx, -1, NULL};
    if (na >= 1 && args[0].len == 1 && args[0].p[0] == 'B')
        batch(&k, argv + 2, (size_t)numkeys, args, na);
    else
        one_request(&k, argv + 2, (size_t)numkeys, args, na);
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
