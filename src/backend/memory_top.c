/* SPDX-License-Identifier: Apache-2.0 */
/*
 * memory_top.c: the in-process board of handed-over sketches
 * (memory_top.h): an array of entries, few (policies x workers x minutes
 * kept), searched whole under the lock once a second per worker and policy,
 * and per query.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "backend/memory_top.h"
#include "core/top_keys.h"

struct entry {
    char *policy, *member;
    int64_t minute;
    char *data;
    size_t len;
};

struct memory_top {
    pthread_mutex_t lock;
    struct entry *e;
    size_t n, cap;
};

struct memory_top *memory_top_new(void)
{
    struct memory_top *t = xcalloc(1, sizeof *t);
    pthread_mutex_init(&t->lock, NULL);
    return t;
}

static void entry_free(struct entry *e)
{
    free(e->policy);
    free(e->member);
    free(e->data);
}

void memory_top_free(struct memory_top *t)
{
    if (!t)
        return;
    for (size_t i = 0; i < t->n; i++)
        entry_free(&t->e[i]);
    free(t->e);
    pthread_mutex_destroy(&t->lock);
    free(t);
}

/* Under the lock: the entries older than the kept minutes go. */
static void expire(struct memory_top *t, int64_t minute)
{
    size_t k = 0;
    for (size_t i = 0; i < t->n; i++) {
        if (t->e[i].minute < minute - TOP_KEYS_TTL_S / 60)
            entry_free(&t->e[i]);
        else
            t->e[k++] = t->e[i];
    }
    t->n = k;
}

void memory_top_put(struct memory_top *t, const char *policy, int64_t minute, const char *member,
                    const char *data, size_t len)
{
    char *copy = xmalloc(len ? len : 1);
    memcpy(copy, data, len);
    pthread_mutex_lock(&t->lock);
    expire(t, minute);
    struct entry *e = NULL;
    for (size_t i = 0; i < t->n && !e; i++)
        if (t->e[i].minute == minute && strcmp(t->e[i].policy, policy) == 0 &&
            strcmp(t->e[i].member, member) == 0)
            e = &t->e[i];
    if (!e) {
        if (t->n == t->cap) {
            t->cap = t->cap ? 2 * t->cap : 16;
            t->e = xrealloc(t->e, t->cap * sizeof *t->e);
        }
        e = &t->e[t->n++];
        *e = (struct entry){xstrdup(policy), xstrdup(member), minute, NULL, 0};
    }
    free(e->data);
    e->data = copy;
    e->len = len;
    pthread_mutex_unlock(&t->lock);
}

void memory_top_get(struct memory_top *t, const char *policy, int64_t lo, int64_t hi,
                    backend_top_done_fn done, void *arg)
{
    pthread_mutex_lock(&t->lock);
    struct backend_top_blob *b = xcalloc(t->n ? t->n : 1, sizeof *b);
    size_t n = 0;
    for (size_t i = 0; i < t->n; i++) {
        const struct entry *e = &t->e[i];
        if (e->minute < lo || e->minute > hi || strcmp(e->policy, policy) != 0)
            continue;
        char *data = xmalloc(e->len ? e->len : 1);
        memcpy(data, e->data, e->len);
        b[n++] = (struct backend_top_blob){xstrdup(e->member), strlen(e->member), data, e->len};
    }
    pthread_mutex_unlock(&t->lock);
    struct backend_top_reply reply = {.status = BACKEND_OK, .blobs = b, .n = n};
    done(arg, &reply);
    for (size_t i = 0; i < n; i++) {
        free((char *)b[i].member);
        free((char *)b[i].data);
    }
    free(b);
}
