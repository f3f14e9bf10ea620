/* SPDX-License-Identifier: Apache-2.0 */
/*
 * override_json.c: the JSON of a run-time override (override_json.h), read
 * with jansson and written with json_out. Owns the shapes and their checks.
 */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/override_json.h"

/* ---- times ---- */

const char *override_time_format(int64_t us, char *out)
{
    time_t s = (time_t)(us / 1000000);
    struct tm tm;
    gmtime_r(&s, &tm);
    size_t n = strftime(out, OVERRIDE_TIME_BUF, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(out + n, OVERRIDE_TIME_BUF - n, ".%06dZ", (int)(us % 1000000));
    return out;
}

/* n decimal digits at s into *v; 0 or -1. */
static int digits(const char *s, int n, int *v)
{
    *v = 0;
    for (int i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        *v = *v * 10 + (s[i] - '0');
    }
    return 0;
}

int override_time_parse(const char *s, int64_t *us)
{
    struct tm tm = {0};
    int y, mo, d, h, mi, sec;
    if (strlen(s) < 20 || digits(s, 4, &y) || s[4] != '-' || digits(s + 5, 2, &mo) || s[7] != '-' ||
        digits(s + 8, 2, &d) || (s[10] != 'T' && s[10] != 't') || digits(s + 11, 2, &h) ||
        s[13] != ':' || digits(s + 14, 2, &mi) || s[16] != ':' || digits(s + 17, 2, &sec) ||
        mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || sec > 60)
        return -1;
    const char *p = s + 19;
    int64_t frac = 0, scale = 1000000;
    if (*p == '.') {
        if (p[1] < '0' || p[1] > '9')
            return -1;
        for (p++; *p >= '0' && *p <= '9'; p++)
            if (scale > 1)
                frac += (*p - '0') * (scale /= 10);
    }
    int off = 0;
    if (*p == 'Z' || *p == 'z') {
        p++;
    } else if (*p == '+' || *p == '-') {
        int oh, om;
        if (digits(p + 1, 2, &oh) || p[3] != ':' || digits(p + 4, 2, &om) || oh > 23 || om > 59)
            return -1;
        off = (*p == '-' ? -1 : 1) * (oh * 3600 + om * 60);
        p += 6;
    } else {
        return -1;
    }
    if (*p)
        return -1;
    tm.tm_year = y - 1900;
    tm.tm_mon = mo - 1;
    tm.tm_mday = d;
    tm.tm_hour = h;
    tm.tm_min = mi;
    tm.tm_sec = sec;
    time_t t = timegm(&tm);
    if (t == (time_t)-1)
        return -1;
    *us = ((int64_t)t - off) * 1000000 + frac;
    return 0;
}

/* ---- out ---- */

static void time_or_null(struct json_out *j, int64_t us)
{
    char buf[OVERRIDE_TIME_BUF];
    if (us > 0)
        json_out_cstr(j, override_time_format(us, buf));
    else
        json_out_null(j);
}

static void str_or_null(struct json_out *j, const char *s)
{
    if (s)
        json_out_cstr(j, s);
    else
        json_out_null(j);
}

void override_json(struct json_out *j, const struct override *o, int open)
{
    json_out_begin(j, '{');
    json_out_lkey(j, "policy");
    json_out_cstr(j, o->policy);
    json_out_lkey(j, "key");
    json_out_str(j, o->key, o->keylen);
    json_out_lkey(j, "tiers");
    json_out_begin(j, '{');
    for (size_t i = 0; i < o->ntiers; i++) {
        json_out_key(j, o->tiers[i].name);
        json_out_begin(j, '{');
        json_out_lkey(j, "limit");
        json_out_int(j, o->tiers[i].limit);
        if (o->tiers[i].burst >= 0) {
            json_out_lkey(j, "burst");
            json_out_int(j, o->tiers[i].burst);
        }
        json_out_end(j, '}');
    }
    json_out_end(j, '}');
    json_out_lkey(j, "expires_at");
    time_or_null(j, o->expires_us);
    json_out_lkey(j, "note");
    str_or_null(j, o->note);
    json_out_lkey(j, "updated_at");
    time_or_null(j, o->updated_us);
    json_out_lkey(j, "by");
    str_or_null(j, o->by);
    if (!open)
        json_out_end(j, '}');
}

void override_json_deleted(struct json_out *j, const char *policy, const char *key, size_t keylen,
                           int64_t updated_us)
{
    json_out_begin(j, '{');
    json_out_lkey(j, "policy");
    json_out_cstr(j, policy);
    json_out_lkey(j, "key");
    json_out_str(j, key, keylen);
    json_out_lkey(j, "deleted");
    json_out_bool(j, 1);
    json_out_lkey(j, "updated_at");
    time_or_null(j, updated_us);
    json_out_end(j, '}');
}

/* ---- in ---- */

static const struct tier *tier_named(const struct policy *p, const char *name)
{
    for (size_t i = 0; i < p->ntiers; i++)
        if (strcmp(p->tiers[i].name, name) == 0)
            return &p->tiers[i];
    return NULL;
}

/* One member of "tiers": {"limit": N[, "burst": B]} checked against the
 * tier of that name (the key's tier list first, then the policy's). */
static int body_tier(const struct policy *p, const struct policy *variant, const char *name,
                     json_t *v, struct override_tier *out, struct request_error *err)
{
    const struct tier *t = tier_named(variant, name);
    if (!t)
        t = tier_named(p, name);
    if (!t)
        return request_fail(err, RC_UNKNOWN_TIER, "policy \"%s\" has no tier named \"%s\"", p->name,
                            name);
    json_t *limit = json_object_get(v, "limit"), *burst = json_object_get(v, "burst");
    if (!json_is_object(v) || !json_is_integer(limit) || (burst && !json_is_integer(burst)) ||
        json_object_size(v) != 1u + (burst != NULL))
        return request_fail(err, RC_INVALID_BODY,
                            "tiers.%s must be {\"limit\": <integer>[, \"burst\": <integer>]}",
                            name);
    snprintf(out->name, sizeof out->name, "%s", name);
    out->limit = json_integer_value(limit);
    out->burst = burst ? json_integer_value(burst) : -1;
    struct tier check = *t;
    check.limit = out->limit;
    if (burst)
        check.burst = out->burst;
    char why[RL_ERRLEN];
    if (out->limit < 1 || (burst && out->burst < 0) ||
        policy_tier_validate(&check, why, sizeof why) < 0)
        return request_fail(err, RC_INVALID_LIMIT, "tiers.%s: %s", name,
                            out->limit < 1            ? "limit must be at least 1"
                            : burst && out->burst < 0 ? "burst must not be negative"
                                                      : why);
    return 0;
}

static int body_tiers(const struct policy *p, const struct policy *variant, json_t *tiers,
                      struct override *o, struct request_error *err)
{
    size_t n = json_is_object(tiers) ? json_object_size(tiers) : 0;
    if (n == 0 || n > POLICY_MAX_TIERS)
        return request_fail(err, RC_INVALID_BODY,
                            "\"tiers\" must be an object of 1 to %d tiers by name",
                            POLICY_MAX_TIERS);
    o->tiers = xcalloc(n, sizeof *o->tiers);
    const char *name;
    json_t *v;
    json_object_foreach(tiers, name, v)
    {
        if (body_tier(p, variant, name, v, &o->tiers[o->ntiers], err) < 0)
            return -1;
        o->ntiers++;
    }
    return 0;
}

/* "ttl" or "expires_at" (not both) into o->expires_us; neither: never. */
static int body_expiry(json_t *root, int64_t now_us, struct override *o, struct request_error *err)
{
    json_t *ttl = json_object_get(root, "ttl"), *at = json_object_get(root, "expires_at");
    char why[RL_ERRLEN];
    int64_t us;
    if (ttl && at)
        return request_fail(err, RC_INVALID_TTL, "give \"ttl\" or \"expires_at\", not both");
    if (ttl &&
        (!json_is_string(ttl) || util_parse_duration(json_string_value(ttl), OVERRIDE_TTL_MAX_US,
                                                     &us, why, sizeof why) < 0))
        return request_fail(err, RC_INVALID_TTL,
                            "\"ttl\" must be a duration such as \"7d\" or \"90m\", up to 3660d");
    if (ttl)
        o->expires_us = now_us + us;
    if (at && (!json_is_string(at) || override_time_parse(json_string_value(at), &us) < 0))
        return request_fail(err, RC_INVALID_TTL,
                            "\"expires_at\" must be an RFC 3339 time such as "
                            "\"2026-12-04T18:00:00Z\"");
    if (at && us <= now_us)
        return request_fail(err, RC_INVALID_TTL, "\"expires_at\" is in the past");
    if (at)
        o->expires_us = us;
    return 0;
}

int override_body_parse(const struct policy *p, const struct policy *variant, const char *key,
                        size_t keylen, const char *body, size_t len, int64_t now_us,
                        struct override **out, struct request_error *err)
{
    /* The override is stored, announced and saved as JSON, which cleans a
     * byte that is not UTF-8 to '?': other daemons (and this one, after a
     * re-read or a restart) would apply it to another key. */
    if (!json_out_utf8_valid(key, keylen))
        return request_fail(err, RC_INVALID_KEY,
                            "a run-time override's key must be valid UTF-8 (it is stored as JSON)");
    json_error_t jerr;
    json_t *root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!json_is_object(root)) {
        json_decref(root);
        return request_fail(err, RC_INVALID_BODY, "the body must be a JSON object: %s",
                            root ? "it is not an object" : jerr.text);
    }
    struct override *o = xcalloc(1, sizeof *o);
    snprintf(o->policy, sizeof o->policy, "%s", p->name);
    o->key = xstrndup(key, keylen);
    o->keylen = keylen;
    o->updated_us = now_us;
    const char *name;
    json_t *v, *note = json_object_get(root, "note");
    int rc = 0;
    json_object_foreach(root, name, v)
    {
        if (strcmp(name, "tiers") != 0 && strcmp(name, "ttl") != 0 &&
            strcmp(name, "expires_at") != 0 && strcmp(name, "note") != 0) {
            rc = request_fail(err, RC_INVALID_BODY, "unknown member \"%s\"", name);
            break;
        }
    }
    if (rc == 0 && note && !json_is_null(note) &&
        (!json_is_string(note) || json_string_length(note) > 1024))
        rc = request_fail(err, RC_INVALID_BODY, "\"note\" must be a string of up to 1024 bytes");
    if (rc == 0 && json_is_string(note))
        o->note = xstrdup(json_string_value(note));
    if (rc == 0)
        rc = body_tiers(p, variant, json_object_get(root, "tiers"), o, err);
    if (rc == 0)
        rc = body_expiry(root, now_us, o, err);
    json_decref(root);
    if (rc < 0) {
        override_free(o);
        return -1;
    }
    *out = o;
    return 0;
}

/* The stored form's "tiers" (already checked when it was stored: only the
 * shape is read here). */
static int stored_tiers(json_t *tiers, struct override *o)
{
    size_t n = json_is_object(tiers) ? json_object_size(tiers) : 0;
    if (n == 0 || n > POLICY_MAX_TIERS)
        return -1;
    o->tiers = xcalloc(n, sizeof *o->tiers);
    const char *name;
    json_t *v;
    json_object_foreach(tiers, name, v)
    {
        json_t *limit = json_object_get(v, "limit"), *burst = json_object_get(v, "burst");
        if (!policy_name_valid(name) || !json_is_integer(limit) ||
            (burst && !json_is_integer(burst)))
            return -1;
        struct override_tier *t = &o->tiers[o->ntiers++];
        snprintf(t->name, sizeof t->name, "%s", name);
        t->limit = json_integer_value(limit);
        t->burst = burst ? json_integer_value(burst) : -1;
    }
    return 0;
}

static int stored_time(json_t *v, int64_t *us)
{
    *us = 0;
    return json_is_null(v) || !v ? 0
           : json_is_string(v)   ? override_time_parse(json_string_value(v), us)
                                 : -1;
}

static char *stored_str(json_t *v)
{
    return json_is_string(v) ? xstrdup(json_string_value(v)) : NULL;
}

int override_json_parse(const char *s, size_t len, struct override **out, int *deleted)
{
    json_error_t jerr;
    json_t *root = json_loadb(s, len, 0, &jerr);
    json_t *policy = json_object_get(root, "policy"), *key = json_object_get(root, "key");
    if (!json_is_string(policy) || !policy_name_valid(json_string_value(policy)) ||
        !json_is_string(key) || json_string_length(key) == 0 ||
        json_string_length(key) > POLICY_KEY_MAX) {
        json_decref(root);
        return -1;
    }
    struct override *o = xcalloc(1, sizeof *o);
    snprintf(o->policy, sizeof o->policy, "%s", json_string_value(policy));
    o->keylen = json_string_length(key);
    o->key = xstrndup(json_string_value(key), o->keylen);
    *deleted = json_is_true(json_object_get(root, "deleted"));
    int rc = stored_time(json_object_get(root, "updated_at"), &o->updated_us);
    if (rc == 0 && !*deleted) {
        rc = stored_tiers(json_object_get(root, "tiers"), o);
        /* An expiry at or before the epoch would read as none (0: never):
         * an override meant to end would never end. Corrupt: refused. */
        if (rc == 0)
            rc = stored_time(json_object_get(root, "expires_at"), &o->expires_us);
        if (rc == 0 && json_is_string(json_object_get(root, "expires_at")) && o->expires_us <= 0)
            rc = -1;
        o->note = stored_str(json_object_get(root, "note"));
        o->by = stored_str(json_object_get(root, "by"));
    }
    json_decref(root);
    if (rc < 0) {
        override_free(o);
        return -1;
    }
    *out = o;
    return 0;
}

/* ---- the state file's section ---- */

void override_json_save_all(struct overrides *t, int64_t now_us, struct buf *out)
{
    struct override **v;
    size_t n;
    int more;
    overrides_page(t, NULL, NULL, 0, SIZE_MAX, now_us, &v, &n, &more);
    for (size_t i = 0; i < n; i++) {
        struct json_out j = json_out_start(out);
        override_json(&j, v[i], 0);
        buf_append_char(out, '\n');
        override_free(v[i]);
    }
    free(v);
}

size_t override_json_load_all(struct overrides *t, const char *data, size_t len, int64_t now_us)
{
    size_t set = 0;
    for (const char *p = data, *end = data + len; p < end;) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);
        struct override *o;
        int deleted;
        if (override_json_parse(p, n, &o, &deleted) == 0) {
            if (deleted || override_expired(o, now_us))
                override_free(o);
            else
                set += (size_t)overrides_set(t, o, NULL);
        }
        p += n + 1;
    }
    return set;
}
