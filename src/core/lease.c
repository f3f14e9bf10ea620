/* SPDX-License-Identifier: Apache-2.0 */
/*
 * lease.c: lease ids and one release or renew call (lease.h). A struct
 * lease_call is the single owner of one call: a config reference (for the
 * key prefix and the renew's lease times), the ids, the decoded leases and
 * their outcomes, and the pending call (pending.c), so that it lives as a
 * check does. Local leases ("l") go to the fallback store (in process,
 * synchronous), the others to the backend in one call.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "backend/backend.h"
#include "core/lease.h"
#include "core/metrics.h"
#include "core/pending.h"

static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

int lease_nonce_new(char nonce[LEASE_NONCE_LEN + 1])
{
    unsigned char r[LEASE_NONCE_LEN];
    if (getrandom(r, sizeof r, 0) != (ssize_t)sizeof r)
        return -1;
    for (size_t i = 0; i < LEASE_NONCE_LEN; i++)
        nonce[i] = b64[r[i] & 63]; /* 22 * 6 = 132 random bits */
    nonce[LEASE_NONCE_LEN] = '\0';
    return 0;
}

/* Appends base64url (no padding) of s[0..len) at out + *n; -1 if no room. */
static int put_b64(char *out, size_t outlen, size_t *n, const unsigned char *s, size_t len)
{
    for (size_t i = 0; i < len; i += 3) {
        unsigned v = (unsigned)s[i] << 16;
        size_t k = len - i < 3 ? len - i : 3;
        if (k > 1)
            v |= (unsigned)s[i + 1] << 8;
        if (k > 2)
            v |= s[i + 2];
        if (*n + k + 2 > outlen)
            return -1;
        for (size_t j = 0; j <= k; j++)
            out[(*n)++] = b64[(v >> (18 - 6 * j)) & 63];
    }
    return 0;
}

static int b64_value(char c)
{
    const char *p = c ? strchr(b64, c) : NULL;
    return p ? (int)(p - b64) : -1;
}

/* Decodes base64url s[0..len) into out (at most cap bytes); -1 if invalid. */
static int get_b64(const char *s, size_t len, unsigned char *out, size_t cap, size_t *outlen)
{
    size_t n = 0;
    if (len % 4 == 1)
        return -1;
    for (size_t i = 0; i < len; i += 4) {
        size_t k = len - i < 4 ? len - i : 4;
        unsigned v = 0;
        for (size_t j = 0; j < 4; j++) {
            int d = j < k ? b64_value(s[i + j]) : 0;
            if (d < 0)
                return -1;
            v = v << 6 | (unsigned)d;
        }
        for (size_t j = 0; j + 1 < k; j++) {
            if (n == cap)
                return -1;
            out[n++] = (unsigned char)(v >> (16 - 8 * j));
        }
    }
    *outlen = n;
    return 0;
}

int lease_id_encode(int local, const char *policy, const char *tier, const char *key, size_t keylen,
                    int64_t units, const char *nonce, char *out, size_t outlen)
{
    size_t n = 0;
    if (outlen < 3)
        return -1;
    out[n++] = local ? 'l' : 'b';
    out[n++] = '.';
    if (put_b64(out, outlen, &n, (const unsigned char *)policy, strlen(policy)) < 0 ||
        n + 1 >= outlen)
        return -1;
    out[n++] = '.';
    if (put_b64(out, outlen, &n, (const unsigned char *)tier, strlen(tier)) < 0 || n + 1 >= outlen)
        return -1;
    out[n++] = '.';
    if (put_b64(out, outlen, &n, (const unsigned char *)key, keylen) < 0)
        return -1;
    int m = snprintf(out + n, outlen - n, ".%lld.%s", (long long)units, nonce);
    if (m < 0 || (size_t)m >= outlen - n)
        return -1;
    return (int)(n + (size_t)m);
}

/* The next '.'-separated part of id[*at..len): its start and length. */
static const char *part(const char *id, size_t len, size_t *at, size_t *plen)
{
    if (*at > len)
        return NULL;
    const char *s = id + *at;
    const char *dot = memchr(s, '.', len - *at);
    *plen = dot ? (size_t)(dot - s) : len - *at;
    *at += *plen + 1;
    return s;
}

static int get_name(const char *s, size_t len, char *out)
{
    size_t n;
    if (get_b64(s, len, (unsigned char *)out, POLICY_NAME_MAX, &n) < 0)
        return -1;
    out[n] = '\0';
    return policy_name_valid(out) ? 0 : -1;
}

int lease_id_decode(const char *id, size_t len, struct lease_ref *out)
{
    const char *p[6];
    size_t plen[6], at = 0;
    memset(out, 0, sizeof *out);
    for (int i = 0; i < 6; i++)
        if (!(p[i] = part(id, len, &at, &plen[i])))
            return -1;
    if (at <= len || plen[0] != 1 || (p[0][0] != 'b' && p[0][0] != 'l'))
        return -1; /* more parts than six, or an unknown place */
    out->local = p[0][0] == 'l';
    if (get_name(p[1], plen[1], out->policy) < 0 || get_name(p[2], plen[2], out->tier) < 0 ||
        get_b64(p[3], plen[3], (unsigned char *)out->key, sizeof out->key, &out->keylen) < 0 ||
        out->keylen == 0)
        return -1;
    if (plen[4] < 1 || plen[4] > 10 || (plen[4] > 1 && p[4][0] == '0'))
        return -1;
    for (size_t i = 0; i < plen[4]; i++) {
        if (p[4][i] < '0' || p[4][i] > '9')
            return -1;
        out->units = out->units * 10 + (p[4][i] - '0');
    }
    if (out->units < 1 || out->units > REQUEST_MAX_COST || plen[5] != LEASE_NONCE_LEN)
        return -1;
    for (size_t i = 0; i < LEASE_NONCE_LEN; i++)
        if (b64_value(p[5][i]) < 0)
            return -1;
    memcpy(out->nonce, p[5], LEASE_NONCE_LEN);
    out->nonce[LEASE_NONCE_LEN] = '\0';
    return 0;
}

size_t lease_member(const struct lease_ref *r, char out[LEASE_MEMBER_MAX])
{
    int n = snprintf(out, LEASE_MEMBER_MAX, "%lld:%s", (long long)r->units, r->nonce);
    return n > 0 ? (size_t)n : 0;
}

int lease_taken(const struct verdict *v, size_t i)
{
    const struct check_request *req = v->req;
    return (v->kind == VERDICT_DECIDED || v->kind == VERDICT_LOCAL) && !v->cached &&
           !req->dry_run && req->lease_nonce[0] != '\0' && v->sum.allowed &&
           decision_check_allowed(&v->sum, i) && req->checks[i].cost > 0 &&
           policy_has_concurrency(req->checks[i].policy);
}

/* ---- one release or renew ---- */

struct lease_call {
    struct pending p; /* first: the life of the call */
    struct core *core;
    struct config *cfg; /* reference: the key prefix, the lease times */
    int renew;
    size_t n;
    char **ids; /* owned, n */
    struct lease_ref *refs;
    struct lease_outcome *out;
    size_t *sent; /* refs of the backend call: indexes into refs */
    size_t nsent;
    struct lease_ref *batch; /* the refs of the backend call, in order */
    lease_reply_fn reply;
    void *ctx;
};

static void call_free(struct pending *p)
{
    struct lease_call *l = (struct lease_call *)p;
    for (size_t i = 0; i < l->n; i++)
        free(l->ids[i]);
    free(l->ids);
    free(l->refs);
    free(l->out);
    free(l->sent);
    free(l->batch);
    config_unref(l->cfg);
    free(l);
}

static void answer(struct lease_call *l, const char *why)
{
    if (!pending_answer(&l->p))
        return;
    struct lease_result res = {.ok = why == NULL,
                               .why = why,
                               .renew = l->renew,
                               .n = l->n,
                               .ids = (const char *const *)l->ids,
                               .outcomes = l->out};
    for (size_t i = 0; why == NULL && i < l->n; i++) {
        switch (l->out[i].status) {
        case LEASE_DONE:
            if (l->renew)
                res.renewed++;
            else
                res.released++;
            break;
        case LEASE_EXPIRED:
            res.expired++;
            break;
        case LEASE_UNKNOWN:
            res.unknown++;
            break;
        }
    }
    if (why == NULL) {
        metrics_count_n(l->core->metrics,
                        l->renew ? METRICS_LEASES_RENEWED : METRICS_LEASES_RELEASED,
                        l->renew ? res.renewed : res.released);
        metrics_count_n(l->core->metrics, METRICS_LEASES_EXPIRED, res.expired);
    }
    l->reply(l->ctx, &res);
}

static void on_backend_done(void *arg, const struct backend_lease_reply *r)
{
    struct lease_call *l = arg;
    pending_completed(&l->p);
    if (r->status == BACKEND_OK) {
        for (size_t i = 0; i < l->nsent; i++)
            l->out[l->sent[i]] = r->outcomes[i];
        answer(l, NULL);
    } else {
        char why[64];
        answer(l, core_backend_said(l->core, why, sizeof why,
                                    r->status == BACKEND_ERROR ? "returned an error"
                                                               : "is unavailable"));
    }
    pending_maybe_free(&l->p);
}

/* The fallback's answer for the local leases: within the call (memory). */
static void on_local_done(void *arg, const struct backend_lease_reply *r)
{
    struct lease_call *l = arg;
    pending_completed(&l->p);
    for (size_t i = 0, k = 0; r->status == BACKEND_OK && i < l->n; i++)
        if (l->refs[i].local && l->refs[i].keylen > 0)
            l->out[i] = r->outcomes[k++];
}

static void on_deadline(struct pending *p)
{
    struct lease_call *l = (struct lease_call *)p;
    char why[64];
    answer(l, core_backend_said(l->core, why, sizeof why, "did not answer in time"));
}

/* The lease time a renew gives: the tier's current lease_timeout, or 0 if
 * the config has no such concurrency tier (then the lease is unknown). */
static int64_t renew_timeout(const struct config *cfg, const struct lease_ref *r)
{
    const struct policy *p = config_find_policy(cfg, r->policy);
    if (!p)
        return 0;
    p = policy_for_key(p, r->key, r->keylen);
    for (size_t j = 0; j < p->ntiers; j++)
        if (strcmp(p->tiers[j].name, r->tier) == 0 && p->tiers[j].algorithm == ALG_CONCURRENCY)
            return p->tiers[j].lease_timeout_us;
    return 0;
}

/* Gathers the refs for which want(ref) holds into l->batch (and their
 * indexes into l->sent); returns how many. */
static size_t gather(struct lease_call *l, int local)
{
    l->nsent = 0;
    for (size_t i = 0; i < l->n; i++) {
        if (l->refs[i].keylen == 0 || l->refs[i].local != local)
            continue;
        l->batch[l->nsent] = l->refs[i];
        l->sent[l->nsent++] = i;
    }
    return l->nsent;
}

struct lease_call *lease_start(struct core *core, int renew, char **ids, size_t n,
                               lease_reply_fn reply, void *ctx)
{
    struct lease_call *l = xcalloc(1, sizeof *l);
    pending_begin(&l->p, on_deadline, call_free);
    l->core = core;
    l->cfg = config_ref(core->config);
    l->renew = renew;
    l->n = n;
    l->ids = ids;
    l->reply = reply;
    l->ctx = ctx;
    size_t m = n ? n : 1;
    l->refs = xcalloc(m, sizeof *l->refs);
    l->out = xcalloc(m, sizeof *l->out);
    l->sent = xcalloc(m, sizeof *l->sent);
    l->batch = xcalloc(m, sizeof *l->batch);
    /* A ref left with keylen 0 is unknown without asking anyone. */
    for (size_t i = 0; i < n; i++) {
        struct lease_ref *r = &l->refs[i];
        if (lease_id_decode(ids[i], strlen(ids[i]), r) < 0 ||
            (renew && (r->timeout_us = renew_timeout(l->cfg, r)) == 0) ||
            (r->local && !core->fallback))
            memset(r, 0, sizeof *r);
    }
    if (core->fallback && gather(l, 1) > 0) {
        pending_hold(&l->p);
        pending_call(&l->p);
        if (core->fallback->ops->lease(core->fallback, l->cfg, renew, l->batch, l->nsent,
                                       on_local_done, l) < 0)
            pending_completed(&l->p);
        pending_unhold(&l->p);
    }
    if (gather(l, 0) == 0) {
        answer(l, NULL);
    } else {
        pending_call(&l->p);
        if (core->backend->ops->lease(core->backend, l->cfg, renew, l->batch, l->nsent,
                                      on_backend_done, l) < 0) {
            pending_completed(&l->p);
            char why[64];
            answer(l, core_backend_said(core, why, sizeof why, "is unavailable"));
        } else {
            pending_arm(&l->p, core->base, backend_call_timeout_us(core->backend, l->cfg));
        }
    }
    return pending_started(&l->p) ? l : NULL;
}

void lease_cancel(struct lease_call *l)
{
    if (l)
        pending_cancel(&l->p);
}
