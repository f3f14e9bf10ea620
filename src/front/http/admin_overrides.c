/* SPDX-License-Identifier: Apache-2.0 */
/*
 * admin_overrides.c: the admin API on run-time overrides (admin_overrides.h):
 * the answers of PUT, GET and DELETE /v1/overrides/<policy>/<key> and of
 * the paginated GET /v1/overrides/<policy>, and the list's cursor. Owns
 * those answers' JSON; not the change (core/override_change.c) nor the
 * table (core/overrides.c) nor the override's own JSON (override_json.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/override_json.h"
#include "front/http/admin_overrides.h"
#include "front/http/response.h"
#include "lib/json_out.h"

static void answer(struct buf *out, struct buf *body, unsigned flags)
{
    response_body(out, 200, NULL, body->data, body->len, flags);
    buf_free(body);
}

int admin_overrides_render_change(struct buf *out, const struct override_change_result *r,
                                  unsigned flags)
{
    if (!r->ok) {
        response_error(out, RC_BACKEND_UNAVAILABLE,
                       r->why ? r->why : "the backend could not store the override", "Retry-After",
                       "1", flags);
        return 503;
    }
    if (!r->now && !r->found) {
        response_error(out, RC_OVERRIDE_NOT_FOUND, "no run-time override of this key", NULL, NULL,
                       flags);
        return 404;
    }
    struct buf body = {0};
    struct json_out j = json_out_start(&body);
    if (r->now) {
        override_json(&j, r->now, 1);
        json_out_lkey(&j, "previous");
        if (r->previous)
            override_json(&j, r->previous, 0);
        else
            json_out_null(&j);
        json_out_end(&j, '}');
    } else {
        json_out_begin(&j, '{');
        json_out_lkey(&j, "policy");
        json_out_cstr(&j, r->policy);
        json_out_lkey(&j, "key");
        json_out_str(&j, r->key, r->keylen);
        json_out_lkey(&j, "deleted");
        json_out_bool(&j, 1);
        json_out_end(&j, '}');
    }
    answer(out, &body, flags);
    return 200;
}

int admin_overrides_render_one(struct buf *out, const struct override *o, unsigned flags)
{
    if (!o) {
        response_error(out, RC_OVERRIDE_NOT_FOUND, "no run-time override of this key", NULL, NULL,
                       flags);
        return 404;
    }
    struct buf body = {0};
    struct json_out j = json_out_start(&body);
    override_json(&j, o, 0);
    answer(out, &body, flags);
    return 200;
}

int admin_overrides_render_page(struct buf *out, const char *policy, struct override *const *v,
                                size_t n, int more, unsigned flags)
{
    static const char hex[] = "0123456789abcdef";
    struct buf body = {0};
    struct json_out j = json_out_start(&body);
    json_out_begin(&j, '{');
    json_out_lkey(&j, "policy");
    json_out_cstr(&j, policy);
    json_out_lkey(&j, "overrides");
    json_out_begin(&j, '[');
    for (size_t i = 0; i < n; i++)
        override_json(&j, v[i], 0);
    json_out_end(&j, ']');
    json_out_lkey(&j, "next_cursor");
    if (more && n > 0) {
        /* The last key's bytes in hex: the next page starts after it. */
        const struct override *last = v[n - 1];
        char *c = xmalloc(2 * last->keylen + 1);
        for (size_t i = 0; i < last->keylen; i++) {
            c[2 * i] = hex[(unsigned char)last->key[i] >> 4];
            c[2 * i + 1] = hex[(unsigned char)last->key[i] & 15];
        }
        json_out_str(&j, c, 2 * last->keylen);
        free(c);
    } else {
        json_out_null(&j);
    }
    json_out_end(&j, '}');
    answer(out, &body, flags);
    return 200;
}

static int hexval(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

long admin_overrides_cursor(const char *s, size_t len, char *out)
{
    if (len == 0 || len % 2 || len / 2 > POLICY_KEY_MAX)
        return -1;
    for (size_t i = 0; i < len; i += 2) {
        int hi = hexval(s[i]), lo = hexval(s[i + 1]);
        if (hi < 0 || lo < 0)
            return -1;
        out[i / 2] = (char)(hi << 4 | lo);
    }
    return (long)(len / 2);
}
