/* SPDX-License-Identifier: Apache-2.0 */
/*
 * module_keys.c: a tier's key read and written for ratelimitd.check. See
 * module_keys.h for the contract.
 *
 * Owns: the key API calls, the replicated commands, HGETALL, HINCRBY,
 * HDEL and PEXPIRE (a bucket hash: still through RedisModule_Call, each
 * with "!", so that its effects replicate; Redis 7.0's key API has no
 * hash iteration that would pay). Does not own: the decision, the reply.
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

/* Pass 1 for a hash tier: HGETALL (another type is the script's error). */
static int read_hash(const struct module_keys *k, RedisModuleString *key, struct redis_tier *x,
                     const struct module_tier *t, int64_t cost, int64_t now, char *err)
{
    const struct redis_module_api *rm = k->rm;
    RedisModuleCallReply *r = rm->Call(k->ctx, "HGETALL", "s", key);
    if (!r || rm->CallReplyType(r) != REDISMODULE_REPLY_ARRAY) {
        call_error(err, k, "HGETALL", r);
        if (r)
            rm->FreeCallReply(r);
        return -1;
    }
    size_t n = rm->CallReplyLength(r) / 2;
    struct redis_field *f = rm->Alloc((n + 1) * sizeof *f);
    for (size_t i = 0; i < n; i++) {
        f[i].name = rm->CallReplyStringPtr(rm->CallReplyArrayElement(r, 2 * i), &f[i].name_len);
        f[i].value =
            rm->CallReplyStringPtr(rm->CallReplyArrayElement(r, 2 * i + 1), &f[i].value_len);
    }
    int allowed = redis_state_read_hash(x, &t->t, cost, f, n, now);
    rm->Free(f);
    rm->FreeCallReply(r);
    if (allowed < 0)
        snprintf(err, MODULE_KEYS_ERR,
                 "ERR ratelimitd: a bucket hash holds a field or value that is no integer");
    return allowed;
}

int module_keys_read(const struct module_keys *k, RedisModuleString *key, struct redis_tier *x,
                     const struct module_tier *t, int64_t cost, int64_t now, char *err)
{
    const struct redis_module_api *rm = k->rm;
    if (redis_state_layout(&t->t) == REDIS_LAYOUT_HASH)
        return read_hash(k, key, x, t, cost, now, err);
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

int module_keys_write(const struct module_keys *k, RedisModuleString *key,
                      const struct module_tier *t, const struct redis_write *w, char *err)
{
    const struct redis_module_api *rm = k->rm;
    if (redis_state_layout(&t->t) == REDIS_LAYOUT_STRING)
        return write_string(k, key, w, err);
    if (run(k, "HINCRBY",
            rm->Call(k->ctx, "HINCRBY", "!sll", key, (long long)w->field, (long long)w->by),
            err) < 0)
        return -1;
    for (size_t i = 0; i < w->ndel; i++)
        if (run(k, "HDEL", rm->Call(k->ctx, "HDEL", "!sl", key, (long long)w->del[i]), err) < 0)
            return -1;
    return run(k, "PEXPIRE", rm->Call(k->ctx, "PEXPIRE", "!sl", key, (long long)w->ex.ms), err);
}
