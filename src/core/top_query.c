/* SPDX-License-Identifier: Apache-2.0 */
/*
 * top_query.c: one query of the heaviest keys (top_keys.h): the backend's
 * sketches of the window read in one call, merged, and answered once. A
 * struct top_query lives as a reset does (reset.c): its pending call owns
 * the deadline, the one answer, cancel and free.
 */
#include <stdlib.h>
#include <string.h>

#include "core/backend.h"
#include "core/pending.h"
#include "core/top_keys.h"

struct top_query {
    struct pending p; /* first: the life of the call */
    struct core *core;
    struct config *cfg; /* reference: the policy points into it */
    const struct policy *policy;
    enum top_by by;
    int window;
    size_t n;
    top_reply_fn reply;
    void *ctx;
};

static void query_free(struct pending *p)
{
    struct top_query *q = (struct top_query *)p;
    config_unref(q->cfg);
    free(q);
}

/* The one place a query answers. */
static void answer(struct top_query *q, struct top_result *res)
{
    if (!pending_answer(&q->p))
        return;
    res->policy = q->policy->name;
    res->by = q->by;
    res->window = q->window;
    q->reply(q->ctx, res);
}

static void failed(struct top_query *q, const char *what)
{
    char why[64];
    struct top_result res = {.why = core_backend_said(q->core, why, sizeof why, what)};
    answer(q, &res);
}

/* How many daemons the members name ("<daemon id>/<worker>"). */
static size_t count_daemons(const struct backend_top_blob *b, size_t n)
{
    size_t daemons = 0;
    for (size_t i = 0; i < n; i++) {
        const char *slash = memchr(b[i].member, '/', b[i].member_len);
        size_t len = slash ? (size_t)(slash - b[i].member) : b[i].member_len;
        size_t j = 0;
        for (; j < i; j++) {
            const char *s2 = memchr(b[j].member, '/', b[j].member_len);
            size_t l2 = s2 ? (size_t)(s2 - b[j].member) : b[j].member_len;
            if (l2 == len && memcmp(b[j].member, b[i].member, len) == 0)
                break;
        }
        daemons += j == i;
    }
    return daemons;
}

/* Reads the sketch of q->by of each blob (denied first, then used) and
 * merges them into res. A blob that is not two sketches is skipped (a
 * daemon of another version). */
static void merge(struct top_query *q, const struct backend_top_reply *br, struct top_result *res)
{
    struct space_saving_summary *sum = xcalloc(br->n ? br->n : 1, sizeof *sum);
    size_t m = 0;
    for (size_t i = 0; i < br->n; i++) {
        const char *p = br->blobs[i].data, *end = p + br->blobs[i].len;
        struct space_saving_summary denied, used;
        if (space_saving_read(&p, end, &denied) < 0)
            continue;
        if (space_saving_read(&p, end, &used) < 0) {
            free(denied.e);
            continue;
        }
        sum[m] = q->by == TOP_BY_DENIED ? denied : used;
        free(q->by == TOP_BY_DENIED ? used.e : denied.e);
        res->total += sum[m++].total;
    }
    struct space_saving_entry *keys;
    size_t n = space_saving_merge(sum, m, &keys);
    res->ok = 1;
    res->daemons = count_daemons(br->blobs, br->n);
    res->merged_at_us = util_realtime_us();
    res->keys = keys;
    res->n = n < q->n ? n : q->n;
    answer(q, res);
    free(keys);
    for (size_t i = 0; i < m; i++)
        free(sum[i].e);
    free(sum);
}

static void on_top_done(void *arg, const struct backend_top_reply *br)
{
    struct top_query *q = arg;
    pending_completed(&q->p);
    struct top_result res = {0};
    if (br->status == BACKEND_OK) {
        merge(q, br, &res);
    } else {
        res.why = br->errmsg;
        answer(q, &res);
    }
    pending_maybe_free(&q->p);
}

static void on_deadline(struct pending *p)
{
    failed((struct top_query *)p, "did not answer in time");
}

struct top_query *top_query_start(struct core *core, const struct policy *p, enum top_by by,
                                  int window, size_t n, top_reply_fn reply, void *ctx)
{
    struct top_query *q = xcalloc(1, sizeof *q);
    pending_begin(&q->p, on_deadline, query_free);
    q->core = core;
    q->cfg = config_ref(core->config);
    q->policy = p;
    q->by = by;
    q->window = window;
    q->n = n;
    q->reply = reply;
    q->ctx = ctx;
    int64_t lo, hi;
    top_keys_window(util_realtime_us(), window, &lo, &hi);
    struct backend *b = core->backend;
    pending_call(&q->p);
    int rc = b->ops->top_get ? b->ops->top_get(b, q->cfg, p->name, lo, hi, on_top_done, q) : -1;
    if (pending_called(&q->p, rc, core->base, backend_call_timeout_us(b, q->cfg)) < 0)
        failed(q, "is unavailable");
    return pending_started(&q->p) ? q : NULL;
}

void top_query_cancel(struct top_query *q)
{
    if (q)
        pending_cancel(&q->p);
}
