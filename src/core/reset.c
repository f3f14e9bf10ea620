/* SPDX-License-Identifier: Apache-2.0 */
/*
 * reset.c: one key reset (reset.h). A struct reset is the single owner of
 * one reset: a config reference (the policy points into it), the key and
 * the pending call (pending.c: the deadline, the one answer, cancel and
 * free), so that a reset lives exactly as a check does.
 */
#include <stdio.h>
#include <stdlib.h>

#include "core/backend.h"
#include "core/metrics.h"
#include "core/pending.h"
#include "core/reset.h"

struct reset {
    struct pending p; /* first: the life of the call */
    struct core *core;
    struct config *cfg; /* reference: the policy points into it */
    const struct policy *policy;
    char *key;
    size_t keylen;
    char peer[64];
    reset_reply_fn reply;
    void *ctx;
};

static void reset_free(struct pending *p)
{
    struct reset *r = (struct reset *)p;
    config_unref(r->cfg);
    free(r->key);
    free(r);
}

/* The one place a reset answers. */
static void answer(struct reset *r, struct reset_result *res)
{
    if (!pending_answer(&r->p))
        return;
    res->policy = r->policy->name;
    res->key = r->key;
    res->keylen = r->keylen;
    r->reply(r->ctx, res);
}

/* answer with "<backend> <what>". */
static void backend_failed(struct reset *r, const char *what)
{
    char why[64];
    struct reset_result res = {.why = core_backend_said(r->core, why, sizeof why, what)};
    answer(r, &res);
}

static void on_reset_done(void *arg, const struct backend_reset_reply *br)
{
    struct reset *r = arg;
    struct core *core = r->core;
    pending_completed(&r->p);
    if (br->status == BACKEND_OK) {
        char deleted[24];
        snprintf(deleted, sizeof deleted, "%lld", br->deleted);
        log_event(core->log, LOG_LVL_INFO, "key reset", "policy", r->policy->name, "key", r->key,
                  "deleted", deleted, "peer", r->peer, NULL);
        metrics_count(core->metrics, METRICS_KEY_RESETS);
        /* This loop hears its own announcement too, unless its listener
         * is down: forget the key here now rather than rely on it. */
        core_forget_key(core, r->policy->name, r->key, r->keylen);
    } else {
        log_event(core->log, LOG_LVL_WARN, "key reset failed", "policy", r->policy->name, "key",
                  r->key, "error", br->errmsg, "peer", r->peer, NULL);
    }
    struct reset_result res = {.ok = br->status == BACKEND_OK,
                               .deleted = br->deleted,
                               .notified = br->notified,
                               .why = br->errmsg};
    answer(r, &res);
    pending_maybe_free(&r->p);
}

static void on_deadline(struct pending *p)
{
    /* The backend call is still pending: r outlives the answer. */
    backend_failed((struct reset *)p, "did not answer in time");
}

struct reset *reset_start(struct core *core, const struct policy *p, char *key, size_t keylen,
                          const char *peer, reset_reply_fn reply, void *ctx)
{
    struct reset *r = xcalloc(1, sizeof *r);
    pending_begin(&r->p, on_deadline, reset_free);
    r->core = core;
    r->cfg = config_ref(core->config);
    r->policy = p;
    r->key = key;
    r->keylen = keylen;
    snprintf(r->peer, sizeof r->peer, "%s", peer ? peer : "");
    r->reply = reply;
    r->ctx = ctx;
    pending_call(&r->p);
    int rc = backend_reset(core->backend, r->cfg, p, key, keylen, on_reset_done, r);
    if (pending_called(&r->p, rc, core->base, backend_call_timeout_us(core->backend, r->cfg)) < 0)
        backend_failed(r, "is unavailable");
    return pending_started(&r->p) ? r : NULL;
}

void reset_cancel(struct reset *r)
{
    if (r)
        pending_cancel(&r->p);
}
