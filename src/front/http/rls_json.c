/* SPDX-License-Identifier: Apache-2.0 */
/*
 * rls_json.c: decoding POST /json bodies (rls_json.h) with jansson. Owns
 * the accepted shape and the field types; what a valid request is beyond
 * that (a domain, at most REQUEST_MAX_CHECKS descriptors, keys, costs) is
 * rls_start's rule, the same for gRPC.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "front/http/check_json.h"
#include "front/http/rls_json.h"

/* The member spelt snake (or camel, protojson's name), or NULL; both at
 * once are ambiguous. */
static int member(json_t *obj, const char *snake, const char *camel, json_t **out,
                  const char *where, struct request_error *err)
{
    json_t *a = json_object_get(obj, snake), *b = camel ? json_object_get(obj, camel) : NULL;
    if (a && b)
        return request_fail(err, RC_INVALID_REQUEST, "\"%s\" and \"%s\" both in %s", snake, camel,
                            where);
    *out = a ? a : b;
    return 0;
}

/* hits_addend: a whole number in [0, REQUEST_MAX_COST], or (protojson's
 * form of a uint64) a string of its digits. Absent: *out untouched. */
static int hits(json_t *v, int64_t *out, const char *where, struct request_error *err)
{
    if (!v)
        return 0;
    int64_t n = -1;
    if (json_is_integer(v)) {
        n = json_integer_value(v);
    } else if (json_is_string(v)) {
        const char *s = json_string_value(v);
        size_t len = json_string_length(v);
        n = len && len <= 10 ? 0 : -1;
        for (size_t i = 0; n >= 0 && i < len; i++)
            n = s[i] >= '0' && s[i] <= '9' ? n * 10 + (s[i] - '0') : -1;
    }
    if (n < 0 || n > REQUEST_MAX_COST)
        return request_fail(err, RC_INVALID_COST,
                            "\"hits_addend\" in %s must be a whole number between 0 "
                            "and %lld",
                            where, REQUEST_MAX_COST);
    *out = n;
    return 0;
}

static int string_field(json_t *obj, const char *name, const char *where, int required,
                        const char **s, size_t *len, struct request_error *err)
{
    json_t *v = json_object_get(obj, name);
    *s = "";
    *len = 0;
    if (!v)
        return required
                   ? request_fail(err, RC_MISSING_FIELD, "missing field \"%s\" in %s", name, where)
                   : 0;
    if (!json_is_string(v))
        return request_fail(err, RC_INVALID_TYPE, "\"%s\" in %s must be a string", name, where);
    *s = json_string_value(v);
    *len = json_string_length(v);
    return 0;
}

/* Envoy's per-request limit override: {"requests_per_unit": N, "unit":
 * "MINUTE"} (protojson: the enum by name or number; requestsPerUnit too).
 * Its range is rls.c's to judge. Absent: nothing set. */
static int parse_limit(json_t *l, struct rls_descriptor *rd, const char *where,
                       struct request_error *err)
{
    static const char *const fields[] = {"requests_per_unit", "requestsPerUnit", "unit", NULL};
    json_t *n, *u;
    if (!l || json_is_null(l)) /* protojson's null: unset */
        return 0;
    if (!json_is_object(l))
        return request_fail(err, RC_INVALID_TYPE, "\"limit\" in %s must be an object", where);
    if (check_json_only_fields(l, fields, where, err) < 0 ||
        member(l, "requests_per_unit", "requestsPerUnit", &n, where, err) < 0)
        return -1;
    u = json_object_get(l, "unit");
    if (!n || !json_is_integer(n) || !u)
        return request_fail(err, RC_INVALID_LIMIT,
                            "\"limit\" in %s needs requests_per_unit (a number) and unit", where);
    rd->has_limit = 1;
    rd->limit_requests_per_unit = json_integer_value(n);
    if (json_is_integer(u) && json_integer_value(u) >= 0 && json_integer_value(u) <= 255)
        rd->limit_unit = (enum rls_unit)json_integer_value(u);
    else if (!json_is_string(u) || rls_unit_from_name(json_string_value(u), &rd->limit_unit) < 0)
        return request_fail(err, RC_INVALID_LIMIT, "\"unit\" of \"limit\" in %s is not a unit",
                            where);
    return 0;
}

/* Decodes descriptors[i] into out->descriptors[i], its entries from *next. */
static int parse_descriptor(json_t *d, size_t i, struct rls_json *out, size_t *next,
                            struct request_error *err)
{
    static const char *const fields[] = {"entries", "hits_addend", "hitsAddend", "limit", NULL};
    static const char *const entry_fields[] = {"key", "value", NULL};
    char where[48];
    snprintf(where, sizeof where, "descriptors[%zu]", i);
    if (!json_is_object(d))
        return request_fail(err, RC_INVALID_TYPE, "%s must be an object", where);
    json_t *entries, *h;
    if (check_json_only_fields(d, fields, where, err) < 0 ||
        member(d, "hits_addend", "hitsAddend", &h, where, err) < 0)
        return -1;
    struct rls_descriptor *rd = &out->descriptors[i];
    rd->hits_addend = -1;
    if (hits(h, &rd->hits_addend, where, err) < 0 ||
        parse_limit(json_object_get(d, "limit"), rd, where, err) < 0)
        return -1;
    entries = json_object_get(d, "entries");
    if (entries && !json_is_array(entries))
        return request_fail(err, RC_INVALID_TYPE, "\"entries\" in %s must be an array", where);
    rd->entries = &out->entries[*next];
    rd->nentries = json_array_size(entries);
    for (size_t j = 0; j < rd->nentries; j++) {
        json_t *e = json_array_get(entries, j);
        struct descriptor_entry *de = &out->entries[(*next)++];
        snprintf(where, sizeof where, "descriptors[%zu].entries[%zu]", i, j);
        if (!json_is_object(e))
            return request_fail(err, RC_INVALID_TYPE, "%s must be an object", where);
        if (check_json_only_fields(e, entry_fields, where, err) < 0 ||
            string_field(e, "key", where, 1, &de->key, &de->keylen, err) < 0 ||
            string_field(e, "value", where, 0, &de->value, &de->valuelen, err) < 0)
            return -1;
    }
    return 0;
}

/* How many entries every descriptor has in all (the array to allocate). */
static size_t count_entries(json_t *descriptors)
{
    size_t n = 0;
    for (size_t i = 0; i < json_array_size(descriptors); i++) {
        json_t *d = json_array_get(descriptors, i);
        json_t *e = json_is_object(d) ? json_object_get(d, "entries") : NULL;
        n += json_is_array(e) ? json_array_size(e) : 0;
    }
    return n;
}

static int parse_root(json_t *root, struct rls_json *out, struct request_error *err)
{
    static const char *const fields[] = {"domain", "descriptors", "hits_addend", "hitsAddend",
                                         NULL};
    if (!json_is_object(root))
        return request_fail(err, RC_INVALID_REQUEST, "the body must be a JSON object");
    json_t *h, *descriptors = json_object_get(root, "descriptors");
    if (check_json_only_fields(root, fields, "the request", err) < 0 ||
        string_field(root, "domain", "the request", 1, &out->req.domain, &out->req.domainlen, err) <
            0 ||
        member(root, "hits_addend", "hitsAddend", &h, "the request", err) < 0 ||
        hits(h, &out->req.hits_addend, "the request", err) < 0)
        return -1;
    if (descriptors && !json_is_array(descriptors))
        return request_fail(err, RC_INVALID_TYPE, "\"descriptors\" must be an array");
    size_t n = json_array_size(descriptors);
    /* The rest is rls_start's rule; checked here too so that a huge array
     * is not copied first. */
    if (n > REQUEST_MAX_CHECKS)
        return request_fail(err, RC_INVALID_REQUEST, "%zu descriptors, over the limit of %d", n,
                            REQUEST_MAX_CHECKS);
    out->descriptors = xcalloc(n ? n : 1, sizeof *out->descriptors);
    out->entries = xcalloc(count_entries(descriptors) + 1, sizeof *out->entries);
    out->req.descriptors = out->descriptors;
    out->req.ndescriptors = n;
    size_t next = 0;
    for (size_t i = 0; i < n; i++)
        if (parse_descriptor(json_array_get(descriptors, i), i, out, &next, err) < 0)
            return -1;
    return 0;
}

int rls_json_parse(const char *body, size_t len, struct rls_json *out, struct request_error *err)
{
    memset(out, 0, sizeof *out);
    out->req.front = RLS_FRONT_JSON;
    json_t *root = check_json_load(body, len, err);
    if (!root)
        return -1;
    out->root = root;
    if (parse_root(root, out, err) < 0) {
        rls_json_free(out);
        return -1;
    }
    return 0;
}

void rls_json_free(struct rls_json *j)
{
    json_decref(j->root);
    free(j->descriptors);
    free(j->entries);
    memset(j, 0, sizeof *j);
    j->req.front = RLS_FRONT_JSON;
}
