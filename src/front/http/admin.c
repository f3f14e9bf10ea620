/*
 * admin.c: the admin API on keys (admin.h): decoding /v1/keys/<policy>/<key>,
 * the inspection built on the core, the life of one reset and the JSON of
 * both answers.
 *
 * An inspection is a dry run through check_start like any check, so it sees
 * exactly what a check would (Redis, the memory store, or per failure_mode)
 * and writes nothing: the backends' contract is that a dry run and a cost
 * of 0 write nothing. It asks twice in one atomic call: at cost 0 for the
 * state as it is (a cost-1 dry run would report remaining after a request),
 * and at cost 1 for whether a next request would pass and when it could.
 *
 * A struct admin_reset is the single owner of one reset: a config
 * reference (the policy points into it), the key, the deadline timer
 * (embedded). Like a check it has two reasons to live, the answer to the
 * front and the backend's completion, and is freed when both are over.
 */
#include <event2/event.h>
#include <event2/event_struct.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "core/check.h"
#include "core/metrics.h"
#include "front/http/admin.h"
#include "front/http/response.h"
#include "lib/json_out.h"
#include "lib/log.h"
#include "worker.h"

/* ---- the path ---- */

static int fail(struct request_error *err, int status, const char *code, const char *message)
{
    err->status = status;
    err->code = code;
    snprintf(err->message, sizeof err->message, "%s", message);
    return -1;
}

static int hex_value(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* Percent-decodes s (len bytes) into out (room for len bytes). Returns the
 * decoded length, or -1 on a '%' not followed by two hex digits. */
static long percent_decode(const char *s, size_t len, char *out)
{
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] != '%') {
            out[n++] = s[i];
            continue;
        }
        int hi = i + 2 < len ? hex_value(s[i + 1]) : -1;
        int lo = hi >= 0 ? hex_value(s[i + 2]) : -1;
        if (lo < 0)
            return -1;
        out[n++] = (char)(hi << 4 | lo);
        i += 2;
    }
    return (long)n;
}

int admin_parse_path(const struct config *cfg, const char *path, struct admin_target *out,
                     struct request_error *err)
{
    memset(out, 0, sizeof *out);
    const char *name = path + strlen(ADMIN_KEYS_PREFIX);
    const char *slash = strchr(name, '/');
    if (!slash)
        return fail(err, 400, "invalid_path", "the path must be /v1/keys/<policy>/<key>");
    char pname[POLICY_NAME_MAX + 1];
    size_t plen = (size_t)(slash - name);
    if (plen == 0 || plen > POLICY_NAME_MAX)
        return fail(err, 404, "unknown_policy", "no such policy");
    memcpy(pname, name, plen);
    pname[plen] = '\0';
    const struct policy *p = config_find_policy(cfg, pname);
    if (!p)
        return fail(err, 404, "unknown_policy", "no such policy");

    const char *enc = slash + 1;
    size_t enclen = strlen(enc);
    /* Each escape shrinks three bytes into one: the decoded key is never
     * longer than its encoding. */
    char *key = xmalloc(enclen + 1);
    long n = percent_decode(enc, enclen, key);
    const char *why = NULL;
    if (n < 0)
        why = "a '%' in the key is not followed by two hex digits";
    else if (n == 0)
        why = "the key is empty";
    else if (n > POLICY_KEY_MAX)
        why = "the key is over the limit of 1024 bytes";
    else if (memchr(key, '\0', (size_t)n))
        why = "the key contains a NUL byte";
    if (why) {
        free(key);
        return fail(err, 400, n < 0 ? "invalid_path" : "invalid_key", why);
    }
    key[n] = '\0';
    /* An overridden key is looked at and reset in its override's tiers. */
    out->policy = policy_for_key(p, key, (size_t)n);
    out->key = key;
    out->keylen = (size_t)n;
    return 0;
}

/* ---- inspection ---- */

void admin_inspect_request(struct admin_target *t, struct check_request *out)
{
    memset(out, 0, sizeof *out);
    out->dry_run = 1;
    out->inspect = 1;
    out->nchecks = 2;
    out->checks = xcalloc(2, sizeof *out->checks);
    out->checks[0] =
        (struct check_item){.policy = t->policy, .key = t->key, .keylen = t->keylen, .cost = 0};
    out->checks[1] = out->checks[0];
    out->checks[1].key = xstrndup(t->key, t->keylen);
    out->checks[1].cost = 1;
    t->key = NULL;
}

static void names_json(struct json_out *j, const char *policy, const char *key, size_t keylen)
{
    json_out_key(j, "policy");
    json_out_cstr(j, policy);
    json_out_key(j, "key");
    json_out_str(j, key, keylen);
}

int admin_render_inspect(struct buf *out, const struct verdict *v, unsigned flags)
{
    if (v->kind == VERDICT_OVERLOADED) {
        response_error(out, 503, "overloaded", "too many checks in flight", "Retry-After", "1",
                       flags);
        return 503;
    }
    if (v->kind == VERDICT_UNAVAILABLE) {
        response_error(out, 503, "backend_unavailable",
                       v->why ? v->why : "the backend could not answer", "Retry-After", "1", flags);
        return 503;
    }
    const struct check_item *c = &v->req->checks[0];
    const struct policy *p = c->policy;
    const struct tier_result *now = v->results, *next = v->results + p->ntiers;
    int allowed = 1;
    for (size_t i = 0; i < p->ntiers; i++)
        allowed &= next[i].allowed;
    struct buf body = {0};
    struct json_out j = json_out_start(&body);
    json_out_begin(&j, '{');
    names_json(&j, p->name, c->key, c->keylen);
    json_out_key(&j, "allowed");
    json_out_bool(&j, allowed);
    if (v->kind == VERDICT_LOCAL) {
        json_out_key(&j, "degraded");
        json_out_bool(&j, 1);
        json_out_key(&j, "local");
        json_out_bool(&j, 1);
    }
    json_out_key(&j, "tiers");
    json_out_begin(&j, '[');
    for (size_t i = 0; i < p->ntiers; i++)
        response_tier_json(&j, &p->tiers[i], &now[i], &next[i], RESPONSE_TIER_INSPECT);
    json_out_end(&j, ']');
    json_out_end(&j, '}');
    response_body(out, 200, NULL, body.data, body.len, flags);
    buf_free(&body);
    return 200;
}

/* ---- resets ---- */

struct admin_reset {
    struct worker *w;
    struct config *cfg; /* reference: the policy points into it */
    const struct policy *policy;
    char *key;
    size_t keylen;
    char peer[64];
    admin_reset_reply_fn reply; /* NULL once answered or cancelled */
    void *ctx;
    struct event deadline;
    int deadline_armed;
    int backend_pending;
    int starting; /* inside admin_reset_start: the caller still holds r */
};

static void reset_maybe_free(struct admin_reset *r)
{
    if (r->reply || r->backend_pending || r->starting)
        return;
    if (r->deadline_armed)
        event_del(&r->deadline);
    config_unref(r->cfg);
    free(r->key);
    free(r);
}

/* The one place a reset answers. */
static void reset_answer(struct admin_reset *r, struct admin_reset_result *res)
{
    admin_reset_reply_fn reply = r->reply;
    r->reply = NULL;
    if (r->deadline_armed) {
        event_del(&r->deadline);
        r->deadline_armed = 0;
    }
    res->policy = r->policy->name;
    res->key = r->key;
    res->keylen = r->keylen;
    reply(r->ctx, res);
}

static void on_reset_done(void *arg, const struct backend_reset_reply *br)
{
    struct admin_reset *r = arg;
    struct worker *w = r->w;
    r->backend_pending = 0;
    if (br->status == BACKEND_OK) {
        char deleted[24];
        snprintf(deleted, sizeof deleted, "%lld", br->deleted);
        log_event(w->log, LOG_LVL_INFO, "key reset", "policy", r->policy->name, "key", r->key,
                  "deleted", deleted, "peer", r->peer, NULL);
        metrics_count(w->metrics, METRICS_KEY_RESETS);
        /* This worker hears its own announcement too, unless its listener
         * is down: forget the key here now rather than rely on it. */
        worker_forget_key(w, r->policy->name, r->key, r->keylen);
    } else {
        log_event(w->log, LOG_LVL_WARN, "key reset failed", "policy", r->policy->name, "key",
                  r->key, "error", br->errmsg, "peer", r->peer, NULL);
    }
    if (r->reply) {
        struct admin_reset_result res = {.ok = br->status == BACKEND_OK,
                                         .deleted = br->deleted,
                                         .notified = br->notified,
                                         .why = br->errmsg};
        reset_answer(r, &res);
    }
    reset_maybe_free(r);
}

static void on_reset_deadline(evutil_socket_t fd, short what, void *arg)
{
    struct admin_reset *r = arg;
    r->deadline_armed = 0;
    struct admin_reset_result res = {.why = "redis did not answer in time"};
    reset_answer(r, &res);
    reset_maybe_free(r);
}

struct admin_reset *admin_reset_start(struct worker *w, struct admin_target *t, const char *peer,
                                      admin_reset_reply_fn reply, void *ctx)
{
    struct admin_reset *r = xcalloc(1, sizeof *r);
    r->w = w;
    r->cfg = config_ref(w->config);
    r->policy = t->policy;
    r->key = t->key;
    r->keylen = t->keylen;
    t->key = NULL;
    snprintf(r->peer, sizeof r->peer, "%s", peer ? peer : "");
    r->reply = reply;
    r->ctx = ctx;
    r->starting = 1;
    r->backend_pending = 1;
    if (backend_reset(w->backend, r->cfg, r->policy, r->key, r->keylen, on_reset_done, r) < 0) {
        r->backend_pending = 0;
        struct admin_reset_result res = {.why = "redis is unavailable"};
        reset_answer(r, &res);
    } else if (r->backend_pending && r->reply) {
        struct timeval tv = {.tv_sec = r->cfg->redis_timeout_us / 1000000,
                             .tv_usec = r->cfg->redis_timeout_us % 1000000};
        if (evtimer_assign(&r->deadline, w->base, on_reset_deadline, r) < 0 ||
            evtimer_add(&r->deadline, &tv) < 0)
            abort(); /* only on a broken event base */
        r->deadline_armed = 1;
    }
    r->starting = 0;
    if (!r->reply) {
        reset_maybe_free(r);
        return NULL;
    }
    return r;
}

void admin_reset_cancel(struct admin_reset *r)
{
    if (!r || !r->reply)
        return;
    r->reply = NULL;
    if (r->deadline_armed) {
        event_del(&r->deadline);
        r->deadline_armed = 0;
    }
    reset_maybe_free(r);
}

int admin_render_reset(struct buf *out, const struct admin_reset_result *res, unsigned flags)
{
    if (!res->ok) {
        response_error(out, 503, "backend_unavailable",
                       res->why ? res->why : "the backend could not reset the key", "Retry-After",
                       "1", flags);
        return 503;
    }
    struct buf body = {0};
    struct json_out j = json_out_start(&body);
    json_out_begin(&j, '{');
    names_json(&j, res->policy, res->key, res->keylen);
    json_out_key(&j, "reset");
    json_out_bool(&j, 1);
    json_out_key(&j, "deleted");
    json_out_int(&j, res->deleted);
    if (res->notified >= 0) {
        json_out_key(&j, "notified");
        json_out_int(&j, res->notified);
    }
    json_out_end(&j, '}');
    response_body(out, 200, NULL, body.data, body.len, flags);
    buf_free(&body);
    return 200;
}
