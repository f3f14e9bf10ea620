/* SPDX-License-Identifier: Apache-2.0 */
/*
 * admin.c: the admin API on keys (admin.h): decoding /v1/keys/<policy>/<key>,
 * the inspection built on the core, a reset handed to the core (reset.c,
 * which owns its life) and the JSON of both answers.
 *
 * An inspection is a dry run through check_start like any check, so it sees
 * exactly what a check would (Redis, the memory store, or per failure_mode)
 * and writes nothing: the backends' contract is that a dry run and a cost
 * of 0 write nothing. It asks twice in one atomic call: at cost 0 for the
 * state as it is (a cost-1 dry run would report remaining after a request),
 * and at cost 1 for whether a next request would pass and when it could.

 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "core/overrides.h"
#include "front/http/admin.h"
#include "front/http/response.h"
#include "lib/json_out.h"

/* ---- the path ---- */

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
    return admin_parse_path_in(cfg, ADMIN_KEYS_PREFIX, path, out, err);
}

int admin_parse_path_in(const struct config *cfg, const char *prefix, const char *path,
                        struct admin_target *out, struct request_error *err)
{
    memset(out, 0, sizeof *out);
    const char *name = path + strlen(prefix);
    const char *slash = strchr(name, '/');
    if (!slash)
        return request_fail(err, RC_INVALID_PATH, "the path must be %s<policy>/<key>", prefix);
    char pname[POLICY_NAME_MAX + 1];
    size_t plen = (size_t)(slash - name);
    if (plen == 0)
        return request_fail(err, RC_UNKNOWN_POLICY_IN_PATH,
                            "the path names no policy: use %s<policy>/<key>", prefix);
    memcpy(pname, name, plen > POLICY_NAME_MAX ? POLICY_NAME_MAX : plen);
    pname[plen > POLICY_NAME_MAX ? POLICY_NAME_MAX : plen] = '\0';
    const struct policy *p = plen > POLICY_NAME_MAX ? NULL : config_find_policy(cfg, pname);
    if (!p)
        return request_fail(err, RC_UNKNOWN_POLICY_IN_PATH, "no policy named \"%s\"", pname);

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
        return request_fail(err, n < 0 ? RC_INVALID_PATH : RC_INVALID_KEY, "%s", why);
    }
    key[n] = '\0';
    /* An overridden key is looked at and reset in its override's tiers. */
    out->policy = policy_for_key(p, key, (size_t)n);
    out->base = p;
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
    out->checks[0] = (struct check_item){.policy = t->policy,
                                         .key = t->key,
                                         .keylen = t->keylen,
                                         .cost = 0,
                                         .file_override = t->policy != t->base};
    out->checks[1] = out->checks[0];
    out->checks[1].key = xstrndup(t->key, t->keylen);
    out->checks[1].cost = 1;
    t->key = NULL;
}

static void names_json(struct json_out *j, const char *policy, const char *key, size_t keylen)
{
    json_out_lkey(j, "policy");
    json_out_cstr(j, policy);
    json_out_lkey(j, "key");
    json_out_str(j, key, keylen);
}

int admin_render_inspect(struct buf *out, const struct verdict *v, unsigned flags)
{
    if (v->kind == VERDICT_OVERLOADED) {
        response_error(out, RC_OVERLOADED, "too many checks in flight", "Retry-After", "1", flags);
        return 503;
    }
    if (v->kind == VERDICT_UNAVAILABLE) {
        response_error(out, RC_BACKEND_UNAVAILABLE,
                       v->why ? v->why : "the backend could not answer", "Retry-After", "1", flags);
        return 503;
    }
    const struct check_item *c = &v->req->checks[0];
    const struct policy *p = c->policy;
    const struct tier_result *now = v->results, *next = v->results + p->ntiers;
    int allowed = decision_check_allowed(&v->sum, 1); /* the cost-1 check */
    struct buf body = {0};
    struct json_out j = json_out_start(&body);
    json_out_begin(&j, '{');
    names_json(&j, p->name, c->key, c->keylen);
    json_out_lkey(&j, "allowed");
    json_out_bool(&j, allowed);
    if (v->kind == VERDICT_LOCAL) {
        json_out_lkey(&j, "degraded");
        json_out_bool(&j, 1);
        json_out_lkey(&j, "local");
        json_out_bool(&j, 1);
    }
    json_out_lkey(&j, "tiers");
    json_out_begin(&j, '[');
    for (size_t i = 0; i < p->ntiers; i++) {
        enum limit_source src = (c->runtime_tiers >> i) & 1 ? LIMIT_RUNTIME_OVERRIDE
                                : c->file_override          ? LIMIT_FILE_OVERRIDE
                                                            : LIMIT_POLICY;
        response_tier_json(&j, &p->tiers[i], &now[i], &next[i], RESPONSE_TIER_INSPECT,
                           limit_source_name(src));
    }
    json_out_end(&j, ']');
    json_out_end(&j, '}');
    response_body(out, 200, NULL, body.data, body.len, flags);
    buf_free(&body);
    return 200;
}

/* ---- resets ---- */

struct reset *admin_reset_start(struct core *core, struct admin_target *t, const char *peer,
                                reset_reply_fn reply, void *ctx)
{
    char *key = t->key;
    t->key = NULL;
    return reset_start(core, t->policy, key, t->keylen, peer, reply, ctx);
}

int admin_render_reset(struct buf *out, const struct reset_result *res, unsigned flags)
{
    if (!res->ok) {
        response_error(out, RC_BACKEND_UNAVAILABLE,
                       res->why ? res->why : "the backend could not reset the key", "Retry-After",
                       "1", flags);
        return 503;
    }
    struct buf body = {0};
    struct json_out j = json_out_start(&body);
    json_out_begin(&j, '{');
    names_json(&j, res->policy, res->key, res->keylen);
    json_out_lkey(&j, "reset");
    json_out_bool(&j, 1);
    json_out_lkey(&j, "deleted");
    json_out_int(&j, res->deleted);
    if (res->notified >= 0) {
        json_out_lkey(&j, "notified");
        json_out_int(&j, res->notified);
    }
    json_out_end(&j, '}');
    response_body(out, 200, NULL, body.data, body.len, flags);
    buf_free(&body);
    return 200;
}
