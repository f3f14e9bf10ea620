/* SPDX-License-Identifier: Apache-2.0 */
/*
 * override_change.c: one change of a run-time override (override_change.h)
 * and the announcements of others'. A struct override_change is the single
 * owner of one change: the new override (or the removal's key), the
 * previous one as this daemon had it, the JSON sent and the pending call.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/backend.h"
#include "core/override_change.h"
#include "core/override_json.h"
#include "core/pending.h"

struct override_change {
    struct pending p; /* first: the life of the call */
    struct core *core;
    struct override *o; /* NULL: a removal */
    char policy[POLICY_NAME_MAX + 1];
    char *key;
    size_t keylen;
    struct override *previous;
    int64_t at_us;
    char peer[64];
    char token[24];
    struct buf json;
    override_reply_fn reply;
    void *ctx;
};

static void change_free(struct pending *p)
{
    struct override_change *c = (struct override_change *)p;
    override_free(c->o);
    override_free(c->previous);
    free(c->key);
    buf_free(&c->json);
    free(c);
}

/* The one place a change answers. */
static void answer(struct override_change *c, struct override_change_result *res)
{
    if (!pending_answer(&c->p))
        return;
    res->policy = c->policy;
    res->key = c->key;
    res->keylen = c->keylen;
    res->now = c->o;
    res->previous = c->previous;
    c->reply(c->ctx, res);
}

/* The tiers of o as compact JSON for a log line ("-" for none). */
static void tiers_text(const struct override *o, struct buf *b)
{
    if (!o) {
        buf_append_str(b, "-");
    } else {
        struct json_out j = json_out_start(b);
        json_out_begin(&j, '{');
        for (size_t i = 0; i < o->ntiers; i++) {
            json_out_key(&j, o->tiers[i].name);
            json_out_int(&j, o->tiers[i].limit);
        }
        json_out_end(&j, '}');
    }
    buf_append_char(b, '\0');
}

/* Stored (or there was nothing to store: memory): apply it here now,
 * whether or not this loop hears its own announcement, and log it. */
static void applied(struct override_change *c, int found)
{
    struct core *core = c->core;
    if (c->o)
        (void)overrides_set(core->overrides, override_copy(c->o), NULL);
    else if (found)
        (void)overrides_delete(core->overrides, c->policy, c->key, c->keylen, c->at_us, NULL);
    core_forget_key(core, c->policy, c->key, c->keylen);
    struct buf old = {0}, new = {0};
    tiers_text(c->previous, &old);
    tiers_text(c->o, &new);
    if (c->o || found)
        log_event(core->log, LOG_LVL_INFO, c->o ? "override set" : "override deleted", "policy",
                  c->policy, "key", c->key, "old", old.data, "new", new.data, "peer", c->peer,
                  "token", c->token, NULL);
    buf_free(&old);
    buf_free(&new);
    struct override_change_result res = {.ok = 1, .found = c->o ? 1 : found};
    answer(c, &res);
}

static void on_stored(void *arg, const struct backend_override_reply *r)
{
    struct override_change *c = arg;
    pending_completed(&c->p);
    if (r->status == BACKEND_OK) {
        applied(c, r->existed > 0);
    } else {
        log_event(c->core->log, LOG_LVL_WARN, "override change failed", "policy", c->policy, "key",
                  c->key, "error", r->errmsg, NULL);
        struct override_change_result res = {.why = r->errmsg};
        answer(c, &res);
    }
    pending_maybe_free(&c->p);
}

static void backend_failed(struct override_change *c, const char *what)
{
    char why[64];
    struct override_change_result res = {.why = core_backend_said(c->core, why, sizeof why, what)};
    answer(c, &res);
}

static void on_deadline(struct pending *p)
{
    backend_failed((struct override_change *)p, "did not answer in time");
}

/* Sends the change to the backend's store; a backend without one (memory)
 * is the table itself. */
static void store(struct override_change *c)
{
    struct core *core = c->core;
    struct backend *b = core->backend;
    if (!b->ops->override_store) {
        applied(c, c->previous != NULL);
        return;
    }
    struct json_out j = json_out_start(&c->json);
    if (c->o)
        override_json(&j, c->o, 0);
    else
        override_json_deleted(&j, c->policy, c->key, c->keylen, c->at_us);
    pending_call(&c->p);
    struct config *cfg = core->config;
    int rc = b->ops->override_store(b, cfg, c->policy, c->key, c->keylen, c->json.data, c->json.len,
                                    c->o == NULL, NULL, on_stored, c);
    if (pending_called(&c->p, rc, core->base, backend_call_timeout_us(b, cfg)) < 0)
        backend_failed(c, "is unavailable");
}

struct override_change *override_change_start(struct core *core, struct override *o,
                                              const char *policy, const char *key, size_t keylen,
                                              const char *peer, const char *token,
                                              override_reply_fn reply, void *ctx)
{
    struct override_change *c = xcalloc(1, sizeof *c);
    pending_begin(&c->p, on_deadline, change_free);
    c->core = core;
    c->o = o;
    snprintf(c->policy, sizeof c->policy, "%s", policy);
    c->key = xstrndup(key, keylen);
    c->keylen = keylen;
    c->at_us = o ? o->updated_us : util_realtime_us();
    c->previous = overrides_get(core->overrides, policy, key, keylen, c->at_us);
    /* A change made after this daemon saw one is newer than it, whatever
     * the clock of the daemon that made that one: a clock ahead of this
     * one's must not make this change look older, to be dropped by every
     * table (a removal answered 200 and left in force) while the store
     * holds it. An expired entry not yet swept counts too (INT64_MIN: no
     * expiry has passed), or it would refuse this change here. */
    struct override *seen = overrides_get(core->overrides, policy, key, keylen, INT64_MIN);
    if (seen && seen->updated_us >= c->at_us) {
        c->at_us = seen->updated_us + 1;
        if (o)
            o->updated_us = c->at_us;
    }
    override_free(seen);
    c->reply = reply;
    c->ctx = ctx;
    snprintf(c->peer, sizeof c->peer, "%s", peer);
    snprintf(c->token, sizeof c->token, "%s", token);
    if (o) {
        size_t n = strlen(peer) + strlen(token) + sizeof " token=";
        o->by = xmalloc(n);
        snprintf(o->by, n, "%s token=%s", peer, token);
    }
    store(c);
    return pending_started(&c->p) ? c : NULL;
}

void override_change_cancel(struct override_change *c)
{
    if (c)
        pending_cancel(&c->p);
}

void override_change_heard(struct core *core, const char *json, size_t len)
{
    struct override *o;
    int deleted;
    if (!core->overrides || override_json_parse(json, len, &o, &deleted) < 0)
        return;
    /* Every worker hears it: the table takes it once (not newer the second
     * time), but each worker's deny cache must forget the key. */
    core_forget_key(core, o->policy, o->key, o->keylen);
    if (deleted) {
        /* An expired one is left to this daemon's own sweep, which logs
         * and counts it as expired (the removal heard is another's). */
        struct override *cur =
            overrides_get(core->overrides, o->policy, o->key, o->keylen, util_realtime_us());
        if (cur)
            (void)overrides_delete(core->overrides, o->policy, o->key, o->keylen, o->updated_us,
                                   NULL);
        override_free(cur);
        override_free(o);
    } else {
        (void)overrides_set(core->overrides, o, NULL);
    }
}

static void on_expired_removed(void *arg, const struct backend_override_reply *r)
{
    /* Nobody waits: a failure leaves the entry to the next remover. */
    (void)arg;
    (void)r;
}

void override_change_expired(struct core *core, const struct override *o)
{
    struct backend *b = core->backend;
    if (!b->ops->override_store)
        return;
    struct buf stored = {0}, gone = {0};
    struct json_out j = json_out_start(&stored);
    override_json(&j, o, 0);
    j = json_out_start(&gone);
    override_json_deleted(&j, o->policy, o->key, o->keylen, o->updated_us);
    (void)b->ops->override_store(b, core->config, o->policy, o->key, o->keylen, gone.data, gone.len,
                                 1, &stored, on_expired_removed, NULL);
    buf_free(&stored);
    buf_free(&gone);
}

/* A re-read in flight: when it was sent. */
struct reload {
    struct core *core;
    int64_t sent_us; /* monotonic */
};

static void on_loaded(void *arg, const struct backend_override_reply *r)
{
    struct reload *rl = arg;
    struct core *core = rl->core;
    int64_t since = rl->sent_us;
    free(rl);
    if (r->status != BACKEND_OK) {
        log_event(core->log, LOG_LVL_WARN, "override re-read failed", "error", r->errmsg, NULL);
        return;
    }
    int64_t now = util_realtime_us();
    struct override **v = xcalloc(r->n ? r->n : 1, sizeof *v);
    size_t n = 0;
    for (size_t i = 0; i < r->n; i++) {
        int deleted;
        if (override_json_parse(r->values[i], r->lens[i], &v[n], &deleted) < 0)
            continue;
        if (!deleted && override_expired(v[n], now))
            override_change_expired(core, v[n]); /* expired while no daemon ran */
        if (deleted || override_expired(v[n], now))
            override_free(v[n]);
        else
            n++;
    }
    overrides_replace_all(core->overrides, v, n, since);
}

void override_change_reload(struct core *core)
{
    struct backend *b = core->backend;
    if (!core->overrides || !b->ops->override_load)
        return;
    struct reload *rl = xmalloc(sizeof *rl);
    *rl = (struct reload){core, util_monotonic_us()};
    if (b->ops->override_load(b, core->config, on_loaded, rl) < 0) {
        free(rl);
        log_event(core->log, LOG_LVL_WARN, "override re-read failed", "error",
                  "the backend is unavailable", NULL);
    }
}
