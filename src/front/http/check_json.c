/* SPDX-License-Identifier: Apache-2.0 */
/*
 * check_json.c: decoding and validating a POST /check body (JSON, jansson).
 *
 * Owns: the accepted shapes (one check, or "checks": [...]), the field
 * types, the key and cost rules and the merging of duplicate checks.
 *
 * Two paths, one answer. Nearly every body is one plain check, e.g.
 * {"policy":"api","key":"user:1","cost":1}: plain_parse reads exactly that
 * shape (ASCII strings without escapes, a small non-negative integer, true
 * or false) straight from the bytes, and gives up on anything else, valid
 * or not. What it gives up on goes through jansson (check_json_parse_full),
 * which alone writes errors. So plain_parse only has to be right about
 * what it accepts: the unit tests and fuzz_request compare the two paths on
 * every input. Building a jansson tree was most of the cost of a check's
 * parsing.
 * Both set a check's policy through policy_for_key once its key is known,
 * so a key with an override gets its variant (policy.h).
 * Does not own: policy lookup rules (config_policies.c, policy.c) or what happens
 * next (check.c).
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "front/http/check_json.h"

json_t *check_json_load(const char *body, size_t len, struct request_error *err)
{
    json_error_t jerr;
    /* jansson's word for nothing to read ("line 1, column 0") helps no one. */
    size_t blank = 0;
    while (blank < len && strchr(" \t\r\n", body[blank]) && body[blank] != '\0')
        blank++;
    if (blank == len) {
        request_fail(err, RC_INVALID_JSON, "empty body: a JSON object is required");
        return NULL;
    }
    json_t *root =
        json_loadb(body, len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL | JSON_DECODE_ANY, &jerr);
    if (!root && json_error_code(&jerr) == json_error_numeric_overflow)
        request_fail(err, RC_INVALID_COST, "a number is too large (%s)", jerr.text);
    else if (!root)
        request_fail(err, RC_INVALID_JSON, "malformed JSON at line %d, column %d: %s", jerr.line,
                     jerr.column, jerr.text);
    return root;
}

int check_json_only_fields(json_t *obj, const char *const *allowed, const char *where,
                           struct request_error *err)
{
    const char *name;
    json_t *v;
    json_object_foreach(obj, name, v)
    {
        const char *const *a = allowed;
        while (*a && strcmp(*a, name) != 0)
            a++;
        if (!*a)
            return request_fail(err, RC_UNKNOWN_FIELD, "unknown field \"%s\" in %s", name, where);
    }
    return 0;
}

/* Decodes one {"policy","key","cost"} object into item (key not yet owned).
 * A report's cost may be negative, and its top level has no dry_run. */
static int parse_check(const struct config *cfg, json_t *obj, const char *where, int allow_top,
                       int report, struct check_item *item, struct request_error *err)
{
    static const char *const check_fields[] = {"policy", "key", "cost", NULL};
    static const char *const top_fields[] = {"policy", "key", "cost", "dry_run", NULL};
    if (report)
        allow_top = 0;
    *item = (struct check_item){.cost = 0};
    if (!json_is_object(obj))
        return request_fail(err, RC_INVALID_REQUEST, "%s must be an object", where);
    if (check_json_only_fields(obj, allow_top ? top_fields : check_fields, where, err) < 0)
        return -1;

    json_t *policy = json_object_get(obj, "policy");
    if (!policy)
        return request_fail(err, RC_MISSING_FIELD, "missing field \"policy\" in %s", where);
    if (!json_is_string(policy))
        return request_fail(err, RC_INVALID_TYPE, "\"policy\" in %s must be a string", where);
    item->policy = config_find_policy(cfg, json_string_value(policy));
    if (!item->policy || strlen(json_string_value(policy)) != json_string_length(policy))
        return request_fail(err, RC_UNKNOWN_POLICY, "unknown policy \"%.64s\"",
                            json_string_value(policy));

    json_t *key = json_object_get(obj, "key");
    if (!key)
        return request_fail(err, RC_MISSING_FIELD, "missing field \"key\" in %s", where);
    if (!json_is_string(key))
        return request_fail(err, RC_INVALID_TYPE, "\"key\" in %s must be a string", where);
    size_t keylen = json_string_length(key);
    if (keylen == 0)
        return request_fail(err, RC_INVALID_KEY, "\"key\" in %s is empty", where);
    if (keylen > POLICY_KEY_MAX)
        return request_fail(err, RC_INVALID_KEY, "\"key\" in %s is %zu bytes, over the limit of %d",
                            where, keylen, POLICY_KEY_MAX);
    if (memchr(json_string_value(key), '\0', keylen))
        return request_fail(err, RC_INVALID_KEY, "\"key\" in %s contains a NUL byte", where);
    item->key = (char *)json_string_value(key);
    item->keylen = keylen;
    /* The key may have tiers of its own (per-key overrides). */
    item->policy = policy_for_key(item->policy, item->key, keylen);

    json_t *cost = json_object_get(obj, "cost");
    item->cost = 1;
    if (cost) {
        if (!json_is_integer(cost))
            return request_fail(err, RC_INVALID_COST, "\"cost\" in %s must be a whole number",
                                where);
        json_int_t c = json_integer_value(cost);
        if (report && (c < -REQUEST_MAX_COST || c > REQUEST_MAX_COST))
            return request_fail(err, RC_INVALID_COST,
                                "\"cost\" in %s must be between %lld and %lld", where,
                                -REQUEST_MAX_COST, REQUEST_MAX_COST);
        if (!report && (c < 0 || c > REQUEST_MAX_COST))
            return request_fail(err, RC_INVALID_COST, "\"cost\" in %s must be between 0 and %lld",
                                where, REQUEST_MAX_COST);
        item->cost = (int64_t)c;
    }
    return 0;
}

/* Adds item to out, merging it into an earlier check on the same (policy,
 * key); takes a copy of the key. Comparing policy pointers is enough: one
 * policy and one key always give the same variant (policy_for_key). */
static int add_check(struct check_request *out, const struct check_item *item,
                     struct request_error *err)
{
    for (size_t i = 0; i < out->nchecks; i++) {
        struct check_item *c = &out->checks[i];
        if (c->policy == item->policy && c->keylen == item->keylen &&
            memcmp(c->key, item->key, item->keylen) == 0) {
            if (c->cost + item->cost > REQUEST_MAX_COST || c->cost + item->cost < -REQUEST_MAX_COST)
                return request_fail(
                    err, RC_INVALID_COST,
                    "the costs of policy \"%s\" and this key add up to more than %lld",
                    item->policy->name, REQUEST_MAX_COST);
            c->cost += item->cost;
            return 0;
        }
    }
    struct check_item *c = &out->checks[out->nchecks++];
    *c = *item;
    c->key = xstrndup(item->key, item->keylen);
    return 0;
}

/* A plain body being read: p moves forward, never past end. */
struct plain {
    const char *p, *end;
};

static void plain_ws(struct plain *r)
{
    while (r->p < r->end && (*r->p == ' ' || *r->p == '\t' || *r->p == '\n' || *r->p == '\r'))
        r->p++;
}

static int plain_char(struct plain *r, char c)
{
    plain_ws(r);
    if (r->p == r->end || *r->p != c)
        return -1;
    r->p++;
    return 0;
}

/* A string of printable ASCII without escapes: what JSON means by it is
 * its bytes. */
static int plain_string(struct plain *r, const char **s, size_t *len)
{
    if (plain_char(r, '"') < 0)
        return -1;
    const char *start = r->p;
    while (r->p < r->end && *r->p != '"') {
        unsigned char c = (unsigned char)*r->p;
        if (c < 0x20 || c >= 0x80 || c == '\\')
            return -1;
        r->p++;
    }
    if (r->p == r->end)
        return -1;
    *s = start;
    *len = (size_t)(r->p - start);
    r->p++;
    return 0;
}

/* A JSON integer in [0, REQUEST_MAX_COST]: digits, no leading zero, not
 * followed by a fraction or an exponent. */
static int plain_cost(struct plain *r, int64_t *out)
{
    plain_ws(r);
    int64_t v = 0;
    const char *start = r->p;
    while (r->p < r->end && *r->p >= '0' && *r->p <= '9') {
        v = v * 10 + (*r->p - '0');
        if (v > REQUEST_MAX_COST)
            return -1;
        r->p++;
    }
    size_t n = (size_t)(r->p - start);
    if (n == 0 || (n > 1 && *start == '0'))
        return -1;
    if (r->p < r->end && (*r->p == '.' || *r->p == 'e' || *r->p == 'E'))
        return -1;
    *out = v;
    return 0;
}

static int plain_word(struct plain *r, const char *w)
{
    size_t n = strlen(w);
    if ((size_t)(r->end - r->p) < n || memcmp(r->p, w, n) != 0)
        return -1;
    r->p += n;
    return 0;
}

/* The fast path: one plain check, or -1 for jansson to decide. */
static int plain_parse(const struct config *cfg, const char *body, size_t len,
                       struct check_request *out)
{
    struct plain r = {body, body + len};
    const char *policy = NULL, *key = NULL;
    size_t policy_len = 0, key_len = 0;
    int64_t cost = 1;
    int seen_cost = 0, seen_dry = 0, dry = 0;
    if (plain_char(&r, '{') < 0)
        return -1;
    for (;;) {
        const char *name;
        size_t n;
        if (plain_string(&r, &name, &n) < 0 || plain_char(&r, ':') < 0)
            return -1;
        if (n == 6 && memcmp(name, "policy", 6) == 0 && !policy) {
            if (plain_string(&r, &policy, &policy_len) < 0)
                return -1;
        } else if (n == 3 && memcmp(name, "key", 3) == 0 && !key) {
            if (plain_string(&r, &key, &key_len) < 0)
                return -1;
        } else if (n == 4 && memcmp(name, "cost", 4) == 0 && !seen_cost) {
            if (plain_cost(&r, &cost) < 0)
                return -1;
            seen_cost = 1;
        } else if (n == 7 && memcmp(name, "dry_run", 7) == 0 && !seen_dry) {
            plain_ws(&r);
            if (plain_word(&r, "true") == 0)
                dry = 1;
            else if (plain_word(&r, "false") < 0)
                return -1;
            seen_dry = 1;
        } else {
            return -1;
        }
        plain_ws(&r);
        if (r.p < r.end && *r.p == ',') {
            r.p++;
            continue;
        }
        if (plain_char(&r, '}') < 0)
            return -1;
        break;
    }
    plain_ws(&r);
    if (r.p != r.end || !policy || !key || key_len == 0 || key_len > POLICY_KEY_MAX ||
        policy_len > POLICY_NAME_MAX)
        return -1;
    char name_buf[POLICY_NAME_MAX + 1];
    memcpy(name_buf, policy, policy_len);
    name_buf[policy_len] = '\0';
    const struct policy *pol = config_find_policy(cfg, name_buf);
    if (!pol)
        return -1;
    out->dry_run = dry;
    out->checks = xcalloc(1, sizeof *out->checks);
    out->checks[0] = (struct check_item){.policy = policy_for_key(pol, key, key_len),
                                         .key = xstrndup(key, key_len),
                                         .keylen = key_len,
                                         .cost = cost};
    out->nchecks = 1;
    return 0;
}

int check_json_parse(const struct config *cfg, const char *body, size_t len,
                     struct check_request *out, struct request_error *err)
{
    memset(out, 0, sizeof *out);
    if (plain_parse(cfg, body, len, out) == 0)
        return 0;
    return check_json_parse_full(cfg, body, len, out, err);
}

/* A report's checks against what their algorithms can take
 * (policy_algorithm_reports, policy_algorithm_refunds). */
static int report_allowed(const struct check_request *r, struct request_error *err)
{
    for (size_t i = 0; i < r->nchecks; i++) {
        const struct check_item *c = &r->checks[i];
        for (size_t j = 0; j < c->policy->ntiers; j++) {
            enum algorithm a = c->policy->tiers[j].algorithm;
            const char *name = policy_algorithm_name(a);
            if (!policy_algorithm_reports(a))
                return request_fail(err, RC_REPORT_NOT_SUPPORTED,
                                    "policy \"%s\" tier \"%s\": %s cannot be charged a report",
                                    c->policy->name, c->policy->tiers[j].name, name);
            if (c->cost < 0 && !policy_algorithm_refunds(a))
                return request_fail(
                    err, RC_REFUND_NOT_SUPPORTED,
                    "policy \"%s\" tier \"%s\": %s cannot give back a cost exactly (a negative "
                    "cost is a refund: only fixed_window, token_bucket, gcra and leaky_bucket "
                    "take one)",
                    c->policy->name, c->policy->tiers[j].name, name);
        }
    }
    return 0;
}

static int parse_jansson(const struct config *cfg, const char *body, size_t len, int report,
                         struct check_request *out, struct request_error *err);

int check_json_parse_full(const struct config *cfg, const char *body, size_t len,
                          struct check_request *out, struct request_error *err)
{
    return parse_jansson(cfg, body, len, 0, out, err);
}

int check_json_parse_report(const struct config *cfg, const char *body, size_t len,
                            struct check_request *out, struct request_error *err)
{
    if (parse_jansson(cfg, body, len, 1, out, err) < 0)
        return -1;
    out->report = 1;
    if (report_allowed(out, err) < 0) {
        request_free(out);
        return -1;
    }
    return 0;
}

/* The shape with "checks" (an array of checks), root being the whole body;
 * report: a /report body. On -1, out is freed by the caller. */
static int parse_checks(const struct config *cfg, json_t *root, json_t *checks, int report,
                        struct check_request *out, struct request_error *err)
{
    /* A report's: from the second on (no dry_run). */
    static const char *const multi_fields[] = {"dry_run", "checks", NULL};
    if (json_object_get(root, "policy") || json_object_get(root, "key") ||
        json_object_get(root, "cost")) {
        request_fail(err, RC_INVALID_REQUEST,
                     "\"checks\" cannot be combined with \"policy\", \"key\" or "
                     "\"cost\": put each check inside \"checks\"");
        return -1;
    }
    if (check_json_only_fields(root, multi_fields + report, "the request", err) < 0)
        return -1;
    if (!json_is_array(checks)) {
        request_fail(err, RC_INVALID_TYPE, "\"checks\" must be an array");
        return -1;
    }
    size_t n = json_array_size(checks);
    if (n == 0) {
        request_fail(err, RC_INVALID_REQUEST, "\"checks\" is empty");
        return -1;
    }
    if (n > REQUEST_MAX_CHECKS) {
        request_fail(err, RC_INVALID_REQUEST, "\"checks\" has %zu entries, over the limit of %d", n,
                     REQUEST_MAX_CHECKS);
        return -1;
    }
    out->checks = xcalloc(n, sizeof *out->checks);
    for (size_t i = 0; i < n; i++) {
        char where[32];
        struct check_item item;
        snprintf(where, sizeof where, "checks[%zu]", i);
        if (parse_check(cfg, json_array_get(checks, i), where, 0, report, &item, err) < 0 ||
            add_check(out, &item, err) < 0)
            return -1;
    }
    return 0;
}

/* Both shapes through jansson; report: a /report body (check_json.h). */
static int parse_jansson(const struct config *cfg, const char *body, size_t len, int report,
                         struct check_request *out, struct request_error *err)
{
    memset(out, 0, sizeof *out);
    json_t *root = check_json_load(body, len, err);
    if (!root)
        return -1;
    int rc = -1;
    if (!json_is_object(root)) {
        request_fail(err, RC_INVALID_REQUEST, "the body must be a JSON object");
        goto done;
    }

    json_t *dry = report ? NULL : json_object_get(root, "dry_run");
    if (dry && !json_is_boolean(dry)) {
        request_fail(err, RC_INVALID_TYPE, "\"dry_run\" must be true or false");
        goto done;
    }
    out->dry_run = dry && json_is_true(dry);

    json_t *checks = json_object_get(root, "checks");
    struct check_item item;
    if (!checks) {
        out->checks = xcalloc(1, sizeof *out->checks);
        if (parse_check(cfg, root, "the request", 1, report, &item, err) < 0 ||
            add_check(out, &item, err) < 0)
            goto done;
        rc = 0;
        goto done;
    }

    rc = parse_checks(cfg, root, checks, report, out, err);
done:
    json_decref(root);
    if (rc < 0)
        request_free(out);
    return rc;
}
