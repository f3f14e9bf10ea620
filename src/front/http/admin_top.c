/* SPDX-License-Identifier: Apache-2.0 */
/*
 * admin_top.c: the heaviest keys' path, query and answer (admin_top.h).
 */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "front/http/admin_top.h"
#include "front/http/http_parse.h"
#include "front/http/response.h"
#include "lib/json_out.h"

/* Which of words[] (n of them) the parameter name of url is: its index,
 * def when absent, -1 when none. */
static int word_param(const char *url, const char *name, const char *const *words, int n, int def)
{
    size_t len;
    const char *v = http_query_param(url, name, &len);
    if (!v)
        return def;
    for (int i = 0; i < n; i++)
        if (strlen(words[i]) == len && strncmp(v, words[i], len) == 0)
            return i;
    return -1;
}

static const char *const by_words[] = {"denied", "used"};
static const char *const window_words[] = {"1m", "10m"};
static const int window_minutes[] = {1, 10};

/* n: digits only, 1 .. TOP_KEYS_N_MAX; absent: the default. */
static int n_param(const char *url, size_t *out)
{
    size_t len;
    const char *v = http_query_param(url, "n", &len);
    if (!v) {
        *out = ADMIN_TOP_N_DEFAULT;
        return 0;
    }
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        if (v[i] < '0' || v[i] > '9' || n > TOP_KEYS_N_MAX)
            return -1;
        n = n * 10 + (size_t)(v[i] - '0');
    }
    if (len == 0 || n < 1 || n > TOP_KEYS_N_MAX)
        return -1;
    *out = n;
    return 0;
}

int admin_top_parse(const struct config *cfg, const char *path, const char *url,
                    struct admin_top_query *out, struct request_error *err)
{
    memset(out, 0, sizeof *out);
    const char *name = path + strlen(ADMIN_TOP_PREFIX);
    if (strchr(name, '/'))
        return request_fail(err, RC_INVALID_PATH, "the path must be /v1/top/<policy>");
    out->policy = strlen(name) <= POLICY_NAME_MAX ? config_find_policy(cfg, name) : NULL;
    if (!out->policy)
        return request_fail(err, RC_UNKNOWN_POLICY_IN_PATH, "no policy named \"%.*s\"",
                            POLICY_NAME_MAX, name);
    int by = word_param(url, "by", by_words, 2, 0);
    if (by < 0)
        return request_fail(err, RC_INVALID_QUERY, "by must be denied or used");
    int w = word_param(url, "window", window_words, 2, 0);
    if (w < 0)
        return request_fail(err, RC_INVALID_QUERY, "window must be 1m or 10m");
    if (n_param(url, &out->n) < 0)
        return request_fail(err, RC_INVALID_QUERY, "n must be a whole number from 1 to %d",
                            TOP_KEYS_N_MAX);
    out->by = by == 0 ? TOP_BY_DENIED : TOP_BY_USED;
    out->window = window_minutes[w];
    return 0;
}

static void rfc3339(int64_t us, char *out, size_t len)
{
    time_t at = (time_t)(us / 1000000);
    struct tm tm;
    strftime(out, len, "%Y-%m-%dT%H:%M:%SZ", gmtime_r(&at, &tm));
}

int admin_render_top(struct buf *out, const struct top_result *r, unsigned flags)
{
    if (!r->ok) {
        response_error(out, RC_BACKEND_UNAVAILABLE,
                       r->why ? r->why : "the backend could not answer", "Retry-After", "1", flags);
        return 503;
    }
    char when[32];
    rfc3339(r->merged_at_us, when, sizeof when);
    struct buf body = {0};
    struct json_out j = json_out_start(&body);
    json_out_begin(&j, '{');
    json_out_lkey(&j, "policy");
    json_out_cstr(&j, r->policy);
    json_out_lkey(&j, "by");
    json_out_cstr(&j, by_words[r->by == TOP_BY_USED]);
    json_out_lkey(&j, "window");
    json_out_cstr(&j, window_words[r->window != 1]);
    json_out_lkey(&j, "total");
    json_out_int(&j, (int64_t)r->total);
    json_out_lkey(&j, "daemons");
    json_out_int(&j, (int64_t)r->daemons);
    json_out_lkey(&j, "merged_at");
    json_out_cstr(&j, when);
    json_out_lkey(&j, "keys");
    json_out_begin(&j, '[');
    for (size_t i = 0; i < r->n; i++) {
        json_out_begin(&j, '{');
        json_out_lkey(&j, "key");
        json_out_str(&j, r->keys[i].key, r->keys[i].len);
        json_out_lkey(&j, "count");
        json_out_int(&j, (int64_t)r->keys[i].count);
        json_out_lkey(&j, "error");
        json_out_int(&j, (int64_t)r->keys[i].err);
        json_out_end(&j, '}');
    }
    json_out_end(&j, ']');
    json_out_end(&j, '}');
    response_body(out, 200, NULL, body.data, body.len, flags);
    buf_free(&body);
    return 200;
}
