/* SPDX-License-Identifier: Apache-2.0 */
/*
 * overrides_store.c: run-time overrides in Redis (overrides_store.h): the
 * scripts of a change, the re-read, and their replies. Owns each pending
 * call (freed right after its done).
 */
#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/redis/overrides_store.h"
#include "backend/redis/redis_node.h"
#include "config/policy.h"

/* HSET (or HDEL) then PUBLISH, atomically: a script is never interleaved
 * with another client's commands. A removal announces only what it
 * removed. */
static const char put_script[] = "redis.call('HSET', KEYS[1], ARGV[1], ARGV[2]) "
                                 "redis.call('PUBLISH', ARGV[3], ARGV[2]) return 1";
static const char del_script[] = "local n = redis.call('HDEL', KEYS[1], ARGV[1]) "
                                 "if n > 0 then redis.call('PUBLISH', ARGV[3], ARGV[2]) end "
                                 "return n";
/* An expired override, removed only as it was stored: a PUT may have
 * replaced it since the remover read it. */
static const char expire_script[] =
    "if redis.call('HGET', KEYS[1], ARGV[1]) ~= ARGV[4] then return 0 end "
    "redis.call('HDEL', KEYS[1], ARGV[1]) redis.call('PUBLISH', ARGV[3], ARGV[2]) return 1";

int overrides_store_key(const char *key_prefix, char *out, size_t len)
{
    int n = snprintf(out, len, "%s{overrides}", key_prefix);
    return n < 0 || (size_t)n >= len ? -1 : n;
}

struct pending_store {
    backend_override_done_fn done;
    void *arg;
    const char *lost; /* static */
};

static void fail(struct pending_store *p, enum backend_status st, const char *msg)
{
    struct backend_override_reply r = {.status = st, .errmsg = msg};
    p->done(p->arg, &r);
}

static void on_store_reply(void *arg, redisReply *rr)
{
    struct pending_store *p = arg;
    if (!rr)
        fail(p, BACKEND_UNAVAILABLE, p->lost);
    else if (rr->type == REDIS_REPLY_ERROR)
        fail(p, BACKEND_ERROR, rr->str);
    else if (rr->type != REDIS_REPLY_INTEGER)
        fail(p, BACKEND_ERROR, "unexpected reply to an override change");
    else
        p->done(p->arg,
                &(struct backend_override_reply){.status = BACKEND_OK, .existed = rr->integer});
    free(p);
}

/* HGETALL's reply: field, value, field, value... */
static void on_load_reply(void *arg, redisReply *rr)
{
    struct pending_store *p = arg;
    if (!rr)
        fail(p, BACKEND_UNAVAILABLE, p->lost);
    else if (rr->type == REDIS_REPLY_ERROR)
        fail(p, BACKEND_ERROR, rr->str);
    else if (rr->type != REDIS_REPLY_ARRAY || rr->elements % 2)
        fail(p, BACKEND_ERROR, "unexpected reply to HGETALL");
    else {
        size_t n = rr->elements / 2;
        const char **vals = xcalloc(n ? n : 1, sizeof *vals);
        size_t *lens = xcalloc(n ? n : 1, sizeof *lens), m = 0;
        for (size_t i = 0; i < n; i++) {
            const redisReply *v = rr->element[2 * i + 1];
            if (v->type != REDIS_REPLY_STRING)
                continue;
            vals[m] = v->str;
            lens[m++] = v->len;
        }
        p->done(p->arg, &(struct backend_override_reply){
                            .status = BACKEND_OK, .n = m, .values = vals, .lens = lens});
        free(vals);
        free(lens);
    }
    free(p);
}

int overrides_store_send(struct redis_node *n, const char *key_prefix, const char *channel,
                         const char *policy, const char *key, size_t keylen, const char *json,
                         size_t len, int remove, const struct buf *expect, const char *lost,
                         backend_override_done_fn done, void *arg)
{
    char hkey[POLICY_KEY_BUF];
    int hlen = overrides_store_key(key_prefix, hkey, sizeof hkey);
    size_t plen = strlen(policy);
    char *field = xmalloc(plen + 1 + keylen);
    memcpy(field, policy, plen);
    field[plen] = ':';
    memcpy(field + plen + 1, key, keylen);
    const char *script = !remove ? put_script : expect ? expire_script : del_script;
    const char *argv[] = {"EVAL", script, "1",     hkey,
                          field,  json,   channel, expect ? expect->data : ""};
    size_t lens[] = {4,
                     strlen(script),
                     1,
                     (size_t)hlen,
                     plen + 1 + keylen,
                     len,
                     strlen(channel),
                     expect ? expect->len : 0};
    struct pending_store *p = xcalloc(1, sizeof *p);
    *p = (struct pending_store){done, arg, lost};
    int argc = expect ? 8 : 7;
    int rc = hlen < 0 ? -1 : redis_node_command(n, on_store_reply, p, argc, argv, lens);
    free(field);
    if (rc < 0)
        free(p);
    return rc;
}

int overrides_store_load(struct redis_node *n, const char *key_prefix, const char *lost,
                         backend_override_done_fn done, void *arg)
{
    char hkey[POLICY_KEY_BUF];
    int hlen = overrides_store_key(key_prefix, hkey, sizeof hkey);
    const char *argv[] = {"HGETALL", hkey};
    size_t lens[] = {7, (size_t)hlen};
    struct pending_store *p = xcalloc(1, sizeof *p);
    *p = (struct pending_store){done, arg, lost};
    int rc = hlen < 0 ? -1 : redis_node_command(n, on_load_reply, p, 2, argv, lens);
    if (rc < 0)
        free(p);
    return rc;
}
