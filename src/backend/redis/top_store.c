/* SPDX-License-Identifier: Apache-2.0 */
/*
 * top_store.c: the sketches' hashes in Redis (top_store.h). A read holds
 * the fields' bytes it has gathered until its last HGETALL answers.
 */
#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/redis/redis_node.h"
#include "backend/redis/top_store.h"
#include "core/top_keys.h"

void top_store_key(struct buf *out, const char *key_prefix, const char *policy, int64_t minute)
{
    buf_append_str(out, key_prefix);
    buf_append_str(out, "top:{");
    buf_append_str(out, policy);
    buf_append_str(out, "}:");
    buf_append_int(out, (long long)minute);
}

/* A hand-over's replies are not awaited: the next tick writes again. */
static void on_put_reply(void *arg, redisReply *r)
{
    (void)arg, (void)r;
}

int top_store_put(struct redis_node *n, const char *key_prefix, const char *policy, int64_t minute,
                  const char *member, const char *data, size_t len)
{
    /* Not on a connection still being set up (AUTH, the code loading):
     * the next tick writes again. */
    if (!redis_node_ready(n))
        return -1;
    struct buf key = {0};
    top_store_key(&key, key_prefix, policy, minute);
    char ttl[24];
    snprintf(ttl, sizeof ttl, "%d", TOP_KEYS_TTL_S);
    const char *hset[] = {"HSET", key.data, member, data};
    size_t hset_lens[] = {4, key.len, strlen(member), len};
    const char *expire[] = {"EXPIRE", key.data, ttl};
    size_t expire_lens[] = {6, key.len, strlen(ttl)};
    int rc = redis_node_command(n, on_put_reply, NULL, 4, hset, hset_lens);
    /* EXPIRE unsent (the connection went between the two): the hash then
     * lives until a later tick's EXPIRE, or the next connection's. */
    if (rc == 0 && redis_node_command(n, on_put_reply, NULL, 3, expire, expire_lens) < 0) {
    }
    buf_free(&key);
    return rc;
}

struct top_read {
    backend_top_done_fn done;
    void *arg;
    const char *lost;
    unsigned outstanding;
    enum backend_status status;
    char *errmsg;
    struct backend_top_blob *blobs; /* owned bytes */
    size_t n, cap;
};

static void keep(struct top_read *t, const redisReply *f, const redisReply *v)
{
    if (t->n == t->cap) {
        t->cap = t->cap ? 2 * t->cap : 8;
        t->blobs = xrealloc(t->blobs, t->cap * sizeof *t->blobs);
    }
    char *m = xmalloc(f->len + 1), *d = xmalloc(v->len + 1);
    memcpy(m, f->str, f->len);
    memcpy(d, v->str, v->len);
    t->blobs[t->n++] = (struct backend_top_blob){m, f->len, d, v->len};
}

static void read_free(struct top_read *t)
{
    for (size_t i = 0; i < t->n; i++) {
        free((char *)t->blobs[i].member);
        free((char *)t->blobs[i].data);
    }
    free(t->blobs);
    free(t->errmsg);
    free(t);
}

/* The first failure is the one told. */
static void fail(struct top_read *t, enum backend_status st, const char *why)
{
    if (t->status != BACKEND_OK)
        return;
    t->status = st;
    t->errmsg = xstrdup(why);
}

static void on_hgetall(void *arg, redisReply *r)
{
    struct top_read *t = arg;
    if (!r)
        fail(t, BACKEND_UNAVAILABLE, t->lost);
    else if (r->type == REDIS_REPLY_ERROR)
        fail(t, BACKEND_ERROR, r->str);
    else if (r->type == REDIS_REPLY_ARRAY)
        for (size_t i = 0; i + 1 < r->elements; i += 2)
            if (r->element[i]->type == REDIS_REPLY_STRING &&
                r->element[i + 1]->type == REDIS_REPLY_STRING)
                keep(t, r->element[i], r->element[i + 1]);
    if (--t->outstanding > 0)
        return;
    struct backend_top_reply reply = {t->status, t->blobs, t->n, t->errmsg};
    t->done(t->arg, &reply);
    read_free(t);
}

int top_store_get(struct redis_node *n, const char *key_prefix, const char *policy, int64_t lo,
                  int64_t hi, const char *lost, backend_top_done_fn done, void *arg)
{
    if (!redis_node_ready(n))
        return -1;
    struct top_read *t = xcalloc(1, sizeof *t);
    *t = (struct top_read){.done = done, .arg = arg, .lost = lost, .status = BACKEND_OK};
    struct buf key = {0};
    for (int64_t m = lo; m <= hi; m++) {
        key.len = 0;
        top_store_key(&key, key_prefix, policy, m);
        const char *argv[] = {"HGETALL", key.data};
        size_t lens[] = {7, key.len};
        if (redis_node_command(n, on_hgetall, t, 2, argv, lens) < 0)
            break;
        /* Replies come from the event loop, never inside the send. */
        t->outstanding++;
    }
    buf_free(&key);
    if (t->outstanding == 0) {
        read_free(t);
        return -1;
    }
    if (t->outstanding < (unsigned)(hi - lo + 1))
        fail(t, BACKEND_UNAVAILABLE, lost);
    return 0;
}
