/* SPDX-License-Identifier: Apache-2.0 */
/*
 * module_keys.c: a tier's keys read and written for ratelimitd.check, and
 * the lease calls' one lease. See module_keys.h for the contract.
 *
 * Owns: the key API calls, the replicated commands, and through
 * RedisModule_Call, each write with "!", so that its effects replicate:
 * a bucket hash's HGETALL, HINCRBY, HDEL and PEXPIRE (Redis 7.0's key API
 * has no hash iteration that would pay); a log's ZCOUNT, ZRANGEBYSCORE and
 * its REV twin (reads), ZREMRANGEBYSCORE, INCRBY, ZADD in chunks and
 * PEXPIRE (writes); a concurrency set's ZRANGEBYSCORE (read),
 * ZREMRANGEBYSCORE, ZADD and PEXPIRE (writes); a lease call's ZSCORE, ZREM
 * or ZADD XX, PTTL and PEXPIRE.
 * Does not own: the decision, the reply.
 */
#include "module/module_keys.h"

#include <stdio.h>
#include <string.h>

/* "ERR ratelimitd: <what>: <r's error>" (a Redis command refused, as the
 * script's redis.call raises) into err. */
static void call_error(char *err, const struct module_keys *k, const char *what,
                       RedisModuleCallReply *r)
{
    size_t len = 0;
    const char *msg = r ? k->rm->CallReplyStringPtr(r, &len) : NULL;
    snprintf(err, MODULE_KEYS_ERR, "ERR ratelimitd: %s: %.*s", what,
             msg ? (int)(len > 120 ? 120 : len) : 6, msg ? msg : "failed");
}

/* The pairs of r, an array reply of what (HGETALL's field, value; or a
 * WITHSCORES range's member, score), as *n fields pointing into r (which
 * the caller frees after them: rm->Free); NULL with the error of a reply
 * that is no array (another type: the script's error) in err, r freed. */
static struct redis_field *fields_of(const struct module_keys *k, const char *what,
                                     RedisModuleCallReply *r, size_t *n, char *err)
{
    const struct redis_module_api *rm = k->rm;
    if (!r || rm->CallReplyType(r) != REDISMODULE_REPLY_ARRAY) {
        call_error(err, k, what, r);
        if (r)
            rm->FreeCallReply(r);
        return NULL;
    }
    *n = rm->CallReplyLength(r) / 2;
    struct redis_field *f = rm->Alloc((*n + 1) * sizeof *f);
    for (size_t i = 0; i < *n; i++) {
        f[i].name = rm->CallReplyStringPtr(rm->CallReplyArrayElement(r, 2 * i), &f[i].name_len);
        f[i].value =
            rm->CallReplyStringPtr(rm->CallReplyArrayElement(r, 2 * i + 1), &f[i].value_len);
    }
    return f;
}

/* Pass 1 for a hash tier: HGETALL (another type is the script's error). */
static int read_hash(const struct module_keys *k, RedisModuleString *key, struct redis_tier *x,
                     const struct module_tier *t, int64_t cost, int64_t now, char *err)
{
    size_t n;
    RedisModuleCallReply *r = k->rm->Call(k->ctx, "HGETALL", "s", key);
    struct redis_field *f = fields_of(k, "HGETALL", r, &n, err);
    if (!f)
        return -1;
    int allowed = redis_state_read_hash(x, &t->t, cost, f, n, now);
    k->rm->Free(f);
    k->rm->FreeCallReply(r);
    if (allowed < 0)
        snprintf(err, MODULE_KEYS_ERR,
                 "ERR ratelimitd: a bucket hash holds a field or value that is no integer");
    return allowed;
}

/* ---- sliding_window_log: the sorted set and its sequence counter ----
 * The script's commands, read (ZCOUNT, ZRANGEBYSCORE ... LIMIT i 1 and its
 * REV twin) and written (ZREMRANGEBYSCORE, INCRBY, ZADD in chunks, PEXPIRE
 * both). */

/* A read of one set: its key, and the reply a command failed with (NULL
 * after a failure: a score that is no integer). */
struct zset_read {
    const struct module_keys *k;
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
    const struct redis_module_api *rm = z->k->rm;
    char bound[24];
    snprintf(bound, sizeof bound, "(%lld", (long long)from);
    RedisModuleCallReply *r = rm->Call(z->k->ctx, "ZCOUNT", "scc", z->key, bound, "+inf");
    if (!r || rm->CallReplyType(r) != REDISMODULE_REPLY_INTEGER)
        return zset_failed(z, "ZCOUNT", r);
    *n = rm->CallReplyInteger(r);
    rm->FreeCallReply(r);
    return 0;
}

/* The score of [member, score] in r (a ZRANGEBYSCORE's reply, or its
 * REV twin's), which is freed. */
static int zset_score_of(struct zset_read *z, const char *what, RedisModuleCallReply *r,
                         int64_t *score)
{
    const struct redis_module_api *rm = z->k->rm;
    size_t len = 0;
    if (!r || rm->CallReplyType(r) != REDISMODULE_REPLY_ARRAY)
        return zset_failed(z, what, r);
    const char *p = rm->CallReplyLength(r) == 2
                        ? rm->CallReplyStringPtr(rm->CallReplyArrayElement(r, 1), &len)
                        : NULL;
    int bad = !p || redis_state_integer(p, len, score) < 0;
    rm->FreeCallReply(r);
    return bad ? zset_failed(z, what, NULL) : 0;
}

static int zset_newest(void *ctx, int64_t from, int64_t *score)
{
    struct zset_read *z = ctx;
    char bound[24];
    snprintf(bound, sizeof bound, "(%lld", (long long)from);
    return zset_score_of(z, "ZREVRANGEBYSCORE",
                         z->k->rm->Call(z->k->ctx, "ZREVRANGEBYSCORE", "sccccll", z->key, "+inf",
                                        bound, "WITHSCORES", "LIMIT", 0LL, 1LL),
                         score);
}

static int zset_score(void *ctx, int64_t from, int64_t i, int64_t *score)
{
    struct zset_read *z = ctx;
    char bound[24];
    snprintf(bound, sizeof bound, "(%lld", (long long)from);
    return zset_score_of(z, "ZRANGEBYSCORE",
                         z->k->rm->Call(z->k->ctx, "ZRANGEBYSCORE", "sccccll", z->key, bound,
                                        "+inf", "WITHSCORES", "LIMIT", (long long)i, 1LL),
                         score);
}

/* Pass 1 for a log tier; or (t NULL) a report's second read of x's scores
 * (redis_state_reread_log), 0 or -1 with the error in err. */
static int read_log(const struct module_keys *k, RedisModuleString *key, struct redis_tier *x,
                    const struct module_tier *t, int64_t cost, int64_t now, char *err)
{
    struct zset_read z = {k, key, NULL, NULL};
    struct redis_zset_reader reader = {&z, zset_count, zset_newest, zset_score};
    int allowed = t ? redis_state_read_log(x, &t->t, cost, &reader, now)
                    : redis_state_reread_log(x, &reader, now);
    if (allowed >= 0)
        return allowed;
    if (z.err) {
        call_error(err, k, z.what, z.err);
        k->rm->FreeCallReply(z.err);
    } else {
        snprintf(err, MODULE_KEYS_ERR,
                 "ERR ratelimitd: a log's sorted set holds a score that is no integer");
    }
    return -1;
}

/* ---- concurrency: the sorted set of leases ----
 * The script's commands: ZRANGEBYSCORE key (now +inf WITHSCORES to read;
 * ZREMRANGEBYSCORE, ZADD and PEXPIRE to take a lease. */

/* Pass 1 for a concurrency tier. */
static int read_leases(const struct module_keys *k, RedisModuleString *key, struct redis_tier *x,
                       const struct module_tier *t, int64_t cost, const char *nonce, int64_t now,
                       char *err)
{
    char bound[24];
    snprintf(bound, sizeof bound, "(%lld", (long long)now);
    size_t n;
    RedisModuleCallReply *r =
        k->rm->Call(k->ctx, "ZRANGEBYSCORE", "sccc", key, bound, "+inf", "WITHSCORES");
    struct redis_field *f = fields_of(k, "ZRANGEBYSCORE", r, &n, err);
    if (!f)
        return -1;
    int allowed = redis_state_read_leases(x, &t->t, cost, nonce, f, n, now);
    k->rm->Free(f);
    k->rm->FreeCallReply(r);
    if (allowed < 0)
        snprintf(err, MODULE_KEYS_ERR,
                 "ERR ratelimitd: a concurrency set holds a score that is no integer, or more "
                 "units than 2^53");
    return allowed;
}

int module_keys_read(const struct module_keys *k, RedisModuleString *key, struct redis_tier *x,
                     const struct module_tier *t, int64_t cost, const char *nonce, int64_t now,
                     char *err)
{
    const struct redis_module_api *rm = k->rm;
    switch (redis_state_layout(&t->t)) {
    case REDIS_LAYOUT_HASH:
        return read_hash(k, key, x, t, cost, now, err);
    case REDIS_LAYOUT_LOG:
        return read_log(k, key, x, t, cost, now, err);
    case REDIS_LAYOUT_LEASES:
        return read_leases(k, key, x, t, cost, nonce, now, err);
    case REDIS_LAYOUT_STRING:
        break;
    }
    /* Read-only: no WATCH is touched, as the script's GET touches none.
     * The bytes are decoded before the key closes, so DMA's pointer never
     * outlives it. */
    RedisModuleKey *h = rm->OpenKey(k->ctx, key, REDISMODULE_READ);
    const char *val = NULL;
    size_t len = 0;
    if (h && rm->KeyType(h) == REDISMODULE_KEYTYPE_STRING)
        val = rm->StringDMA(h, &len, REDISMODULE_READ);
    int allowed = redis_state_read(x, &t->t, t->calendar ? t->bounds : NULL, cost, val, len, now);
    if (h)
        rm->CloseKey(h);
    if (allowed < 0)
        snprintf(err, MODULE_KEYS_ERR,
                 "ERR ratelimitd: now %lld is outside the calendar bounds sent [%lld, %lld): "
                 "clocks a window apart",
                 (long long)now, (long long)t->bounds[0], (long long)t->bounds[3]);
    return allowed;
}

int module_keys_reread(const struct module_keys *k, RedisModuleString *key, struct redis_tier *x,
                       const struct module_tier *t, int64_t now, char *err)
{
    if (redis_state_layout(&t->t) != REDIS_LAYOUT_LOG)
        return 0;
    return read_log(k, key, x, NULL, 0, now, err);
}

/* Runs one write command's reply r; 0, or -1 with its error in err. */
static int run(const struct module_keys *k, const char *what, RedisModuleCallReply *r, char *err)
{
    int ok = r && k->rm->CallReplyType(r) != REDISMODULE_REPLY_ERROR;
    if (!ok)
        call_error(err, k, what, r);
    if (r)
        k->rm->FreeCallReply(r);
    return ok ? 0 : -1;
}

/* Sizes h's string (a string already if string, else empty) to n bytes,
 * as tightly as SET sizes a value. Growing a string in place reserves as
 * much again (Redis's sdsMakeRoomFor); so a value that grows (a count
 * gaining a digit) grows one byte more, then shrinks to n, which
 * reallocates it to fit (a string shrunk below its spare room is), and
 * keeps the size SET gives it, not 16 bytes more. 0, or -1. */
static int resize(const struct redis_module_api *rm, RedisModuleKey *h, int string, size_t n)
{
    size_t cur = 0;
    if (string)
        rm->StringDMA(h, &cur, REDISMODULE_READ);
    if (string && n > cur && rm->StringTruncate(h, n + 1) != REDISMODULE_OK)
        return -1;
    return rm->StringTruncate(h, n) == REDISMODULE_OK ? 0 : -1;
}

/* A string tier's SET key value PX|PXAT ms, made through the key API:
 * the value written in place (StringTruncate then DMA: no allocation once
 * the key holds a string of Redis's own, raw encoding, which this write
 * leaves), the expiry as the absolute time SET would give it, SET ...
 * PXAT that time replicated, as Redis 7 replicates a SET ... PX, and
 * SET's keyspace events. A key of another type (no daemon's) is replaced
 * by SET itself, which overwrites it as one key, where the key API would
 * delete it and make a new one (a "new" event SET does not give). */
static int write_string(const struct module_keys *k, RedisModuleString *key,
                        const struct redis_write *w, char *err)
{
    const struct redis_module_api *rm = k->rm;
    long long at = w->ex.at ? (long long)w->ex.ms : rm->Milliseconds() + (long long)w->ex.ms;
    if (w->ex.ms <= 0) {
        snprintf(err, MODULE_KEYS_ERR,
                 "ERR ratelimitd: SET: ERR invalid expire time in 'set' command");
        return -1;
    }
    RedisModuleKey *h = rm->OpenKey(k->ctx, key, REDISMODULE_READ | REDISMODULE_WRITE);
    if (!h) {
        snprintf(err, MODULE_KEYS_ERR, "ERR ratelimitd: SET: failed");
        return -1;
    }
    int type = rm->KeyType(h);
    if (type != REDISMODULE_KEYTYPE_EMPTY && type != REDISMODULE_KEYTYPE_STRING) {
        rm->CloseKey(h);
        return run(k, "SET", rm->Call(k->ctx, "SET", "!sbcl", key, w->buf, w->len, "PXAT", at),
                   err);
    }
    size_t len = 0;
    char *p = NULL;
    if (resize(rm, h, type == REDISMODULE_KEYTYPE_STRING, w->len) == 0)
        p = rm->StringDMA(h, &len, REDISMODULE_WRITE);
    int ok = p && len == w->len;
    if (ok)
        memcpy(p, w->buf, w->len);
    ok = ok && rm->SetAbsExpire(h, at) == REDISMODULE_OK;
    rm->CloseKey(h);
    if (!ok) {
        snprintf(err, MODULE_KEYS_ERR, "ERR ratelimitd: SET: failed");
        return -1;
    }
    rm->Replicate(k->ctx, "SET", "sbcl", key, w->buf, w->len, "PXAT", at);
    /* SET's own events, in its order, for keyspace notifications */
    rm->NotifyKeyspaceEvent(k->ctx, REDISMODULE_NOTIFY_STRING, "set", key);
    rm->NotifyKeyspaceEvent(k->ctx, REDISMODULE_NOTIFY_GENERIC, "expire", key);
    return 0;
}

/* One ZADD of the members scored w->score numbered seq .. seq + n - 1. */
static int zadd_chunk(const struct module_keys *k, RedisModuleString *key,
                      const struct redis_write *w, long long seq, size_t n, char *err)
{
    const struct redis_module_api *rm = k->rm;
    char score[24], member[48];
    int slen = snprintf(score, sizeof score, "%lld", (long long)w->score);
    RedisModuleString **v = rm->Alloc(2 * n * sizeof *v);
    for (size_t j = 0; j < n; j++) {
        int mlen = snprintf(member, sizeof member, "%s-%lld", score, seq + (long long)j);
        v[2 * j] = rm->CreateString(k->ctx, score, (size_t)slen);
        v[2 * j + 1] = rm->CreateString(k->ctx, member, (size_t)mlen);
    }
    int rc = run(k, "ZADD", rm->Call(k->ctx, "ZADD", "!sv", key, v, 2 * n), err);
    for (size_t j = 0; j < 2 * n; j++)
        rm->FreeString(k->ctx, v[j]);
    rm->Free(v);
    return rc;
}

/* A log tier's write (redis_state.h's REDIS_LAYOUT_LOG): key[0] the set,
 * key[1] its counter. */
static int write_log(const struct module_keys *k, RedisModuleString **key,
                     const struct redis_write *w, char *err)
{
    const struct redis_module_api *rm = k->rm;
    if (run(k, "ZREMRANGEBYSCORE",
            rm->Call(k->ctx, "ZREMRANGEBYSCORE", "!scl", key[0], "-inf", (long long)w->field),
            err) < 0)
        return -1;
    RedisModuleCallReply *r = rm->Call(k->ctx, "INCRBY", "!sl", key[1], (long long)w->by);
    if (!r || rm->CallReplyType(r) != REDISMODULE_REPLY_INTEGER) {
        call_error(err, k, "INCRBY", r);
        if (r)
            rm->FreeCallReply(r);
        return -1;
    }
    long long last = rm->CallReplyInteger(r);
    rm->FreeCallReply(r);
    for (long long seq = last - w->by + 1; seq <= last; seq += REDIS_LOG_CHUNK) {
        long long n = last - seq + 1 < REDIS_LOG_CHUNK ? last - seq + 1 : REDIS_LOG_CHUNK;
        if (zadd_chunk(k, key[0], w, seq, (size_t)n, err) < 0)
            return -1;
    }
    for (int i = 0; i < 2; i++)
        if (run(k, "PEXPIRE", rm->Call(k->ctx, "PEXPIRE", "!sl", key[i], (long long)w->ex.ms),
                err) < 0)
            return -1;
    return 0;
}

/* A concurrency tier's write (redis_state.h's REDIS_LAYOUT_LEASES). */
static int write_leases(const struct module_keys *k, RedisModuleString *key,
                        const struct redis_write *w, char *err)
{
    const struct redis_module_api *rm = k->rm;
    char score[24], member[48];
    snprintf(score, sizeof score, "%lld", (long long)w->score);
    snprintf(member, sizeof member, "%lld:%s", (long long)w->by, w->nonce);
    if (run(k, "ZREMRANGEBYSCORE",
            rm->Call(k->ctx, "ZREMRANGEBYSCORE", "!scl", key, "-inf", (long long)w->field),
            err) < 0 ||
        run(k, "ZADD", rm->Call(k->ctx, "ZADD", "!scc", key, score, member), err) < 0)
        return -1;
    return run(k, "PEXPIRE", rm->Call(k->ctx, "PEXPIRE", "!sl", key, (long long)w->ex.ms), err);
}

/* A hash tier's write (redis_state.h's REDIS_LAYOUT_HASH). */
static int write_hash(const struct module_keys *k, RedisModuleString *key,
                      const struct redis_write *w, char *err)
{
    const struct redis_module_api *rm = k->rm;
    if (run(k, "HINCRBY",
            rm->Call(k->ctx, "HINCRBY", "!sll", key, (long long)w->field, (long long)w->by),
            err) < 0)
        return -1;
    for (size_t i = 0; i < w->ndel; i++)
        if (run(k, "HDEL", rm->Call(k->ctx, "HDEL", "!sl", key, (long long)w->del[i]), err) < 0)
            return -1;
    return run(k, "PEXPIRE", rm->Call(k->ctx, "PEXPIRE", "!sl", key, (long long)w->ex.ms), err);
}

int module_keys_write(const struct module_keys *k, RedisModuleString **key,
                      const struct module_tier *t, const struct redis_write *w, char *err)
{
    switch (redis_state_layout(&t->t)) {
    case REDIS_LAYOUT_STRING:
        return write_string(k, key[0], w, err);
    case REDIS_LAYOUT_HASH:
        return write_hash(k, key[0], w, err);
    case REDIS_LAYOUT_LOG:
        return write_log(k, key, w, err);
    case REDIS_LAYOUT_LEASES:
        return write_leases(k, key[0], w, err);
    }
    return -1; /* not reached: every layout is a case */
}

/* ---- the lease calls: ZSCORE, then ZREM, or ZADD XX, PTTL and PEXPIRE */

int module_keys_lease_op(const struct module_keys *k, RedisModuleString *key,
                         const struct module_arg *member, int renew, int64_t timeout, int64_t now,
                         int64_t *out, char *err)
{
    const struct redis_module_api *rm = k->rm;
    int64_t px;
    size_t len = 0;
    RedisModuleCallReply *r = rm->Call(k->ctx, "ZSCORE", "sb", key, member->p, member->len);
    const char *score = r && rm->CallReplyType(r) == REDISMODULE_REPLY_STRING
                            ? rm->CallReplyStringPtr(r, &len)
                            : NULL;
    int write = redis_state_lease_op(score, len, renew, timeout, now, &out[0], &out[1], &px);
    if (r)
        rm->FreeCallReply(r);
    if (write == 1)
        return run(k, "ZREM", rm->Call(k->ctx, "ZREM", "!sb", key, member->p, member->len), err);
    if (write == 0)
        return 0;
    if (run(k, "ZADD",
            rm->Call(k->ctx, "ZADD", "!sclb", key, "XX", (long long)out[1], member->p, member->len),
            err) < 0)
        return -1;
    r = rm->Call(k->ctx, "PTTL", "s", key);
    long long pttl =
        r && rm->CallReplyType(r) == REDISMODULE_REPLY_INTEGER ? rm->CallReplyInteger(r) : -1;
    if (r)
        rm->FreeCallReply(r);
    if (pttl >= px)
        return 0;
    return run(k, "PEXPIRE", rm->Call(k->ctx, "PEXPIRE", "!sl", key, (long long)px), err);
}
