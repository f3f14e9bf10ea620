/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_rls_json.c: libFuzzer harness for a POST /json body (Envoy's rate
 * limit service in envoyproxy/ratelimit's JSON form), minus the network, the
 * config and the backend: what http.c and rls.c do with the bytes before
 * and after the decision.
 *
 *   refused  -> response_error() with the request_error (the 400 answer);
 *   accepted -> every descriptor's check key (rls_key), then response_rls()
 *               of an answer with one status per descriptor, their fields
 *               drawn from a hash of the input, and of an unavailable one.
 *
 * Beyond what ASan/UBSan/LSan catch, it aborts when a contract breaks:
 * rls_json_parse refuses with 400 and a code, or accepts a request whose
 * fields are exactly jansson's reading of the same body (domain, entries,
 * both spellings of hits_addend, the -1 of an unset one); a key decodes back
 * to exactly the domain and the entries (the escaping is injective), and
 * is refused only when its escaped form is longer than POLICY_KEY_MAX; every
 * answer is a complete HTTP response whose Content-Length is its body's and
 * whose body is a JSON object that agrees with its status.
 */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/rls.h"
#include "front/http/response.h"
#include "front/http/rls_json.h"
#include "lib/buf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(int cond, const char *what)
{
    if (!cond) {
        fprintf(stderr, "fuzz_rls_json: %s\n", what);
        abort();
    }
}

/* The body of a complete HTTP response in b, as a JSON object; its status
 * in *status. The answer holds no NUL byte (JSON escapes it), so a NUL is
 * put after it for the string functions. */
static json_t *answer_body(struct buf *b, int *status)
{
    size_t len = b->len;
    buf_append_char(b, '\0');
    b->len = len;
    check(strlen(b->data) == len, "a NUL byte in an answer");
    const char *end = strstr(b->data, "\r\n\r\n");
    check(end != NULL, "an answer without the end of its head");
    check(len > 12 && memcmp(b->data, "HTTP/1.1 ", 9) == 0, "no status line");
    *status = atoi(b->data + 9);
    const char *cl = strstr(b->data, "\r\nContent-Length: ");
    check(cl != NULL && cl < end, "no Content-Length");
    size_t body_len = len - (size_t)(end + 4 - b->data);
    check((size_t)strtoul(cl + 18, NULL, 10) == body_len, "Content-Length is not the body's");
    json_error_t jerr;
    json_t *j = json_loadb(end + 4, body_len, 0, &jerr);
    check(j != NULL && json_is_object(j), "the body is not a JSON object");
    return j;
}

/* Decodes one escaped part of a key from *p (up to a separator or end). */
static size_t unescape(const char **p, const char *end, char *out)
{
    size_t n = 0;
    while (*p < end && **p != '|' && **p != '=') {
        if (**p == '%') {
            check(end - *p >= 3, "a cut escape");
            const char *e = *p + 1;
            char c = e[0] == '2' && e[1] == '5'   ? '%'
                     : e[0] == '7' && e[1] == 'C' ? '|'
                     : e[0] == '3' && e[1] == 'D' ? '='
                     : e[0] == '0' && e[1] == '0' ? '\0'
                                                  : 'X';
            check(c != 'X', "an unknown escape");
            out[n++] = c;
            *p += 3;
        } else {
            out[n++] = *(*p)++;
        }
    }
    return n;
}

static size_t escaped_len(const char *s, size_t len)
{
    size_t n = 0;
    for (size_t i = 0; i < len; i++)
        n += (s[i] == '%' || s[i] == '|' || s[i] == '=' || s[i] == '\0') ? 3 : 1;
    return n;
}

static void check_key(const struct rls_request *r, const struct rls_descriptor *d)
{
    char key[POLICY_KEY_MAX], part[POLICY_KEY_MAX];
    size_t want = escaped_len(r->domain, r->domainlen);
    for (size_t i = 0; i < d->nentries; i++)
        want += 2 + escaped_len(d->entries[i].key, d->entries[i].keylen) +
                escaped_len(d->entries[i].value, d->entries[i].valuelen);
    long n = rls_key(r->domain, r->domainlen, d->entries, d->nentries, key, sizeof key);
    if (n < 0) {
        check(want > POLICY_KEY_MAX, "a key refused though it fits");
        return;
    }
    check((size_t)n == want, "a key of the wrong length");
    check(memchr(key, '\0', (size_t)n) == NULL, "a key holding NUL");
    const char *p = key, *end = key + n;
    size_t len = unescape(&p, end, part);
    check(len == r->domainlen && memcmp(part, r->domain, len) == 0, "the domain does not decode");
    for (size_t i = 0; i < d->nentries; i++) {
        const struct descriptor_entry *e = &d->entries[i];
        check(p < end && *p++ == '|', "no | before an entry");
        len = unescape(&p, end, part);
        check(len == e->keylen && memcmp(part, e->key, len) == 0, "an entry key does not decode");
        check(p < end && *p++ == '=', "no = in an entry");
        len = unescape(&p, end, part);
        check(len == e->valuelen && memcmp(part, e->value, len) == 0,
              "an entry value does not decode");
    }
    check(p == end, "bytes after the last entry");
}

/* A string member of o equal to (s, len); absent means "". */
static int same_string(json_t *o, const char *name, const char *s, size_t len)
{
    json_t *v = json_object_get(o, name);
    if (!v)
        return len == 0;
    return json_is_string(v) && json_string_length(v) == len &&
           memcmp(json_string_value(v), s, len) == 0;
}

/* hits_addend (or hitsAddend) of o as rls_json reads it; unset: dflt. */
static int64_t hits_of(json_t *o, int64_t dflt)
{
    json_t *v = json_object_get(o, "hits_addend");
    if (!v)
        v = json_object_get(o, "hitsAddend");
    if (!v)
        return dflt;
    if (json_is_integer(v))
        return json_integer_value(v);
    return strtoll(json_string_value(v), NULL, 10);
}

/* The accepted request is jansson's reading of the same body. */
static void check_decoding(const uint8_t *data, size_t size, const struct rls_request *r)
{
    json_t *root = json_loadb((const char *)data, size,
                              JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL | JSON_DECODE_ANY, NULL);
    check(root != NULL, "accepted a body jansson refuses");
    check(r->front == RLS_FRONT_JSON, "front is not json");
    check(same_string(root, "domain", r->domain, r->domainlen), "domain differs");
    check(hits_of(root, 0) == r->hits_addend, "hits_addend differs");
    json_t *ds = json_object_get(root, "descriptors");
    check(json_array_size(ds) == r->ndescriptors && r->ndescriptors <= REQUEST_MAX_CHECKS,
          "descriptor count differs");
    for (size_t i = 0; i < r->ndescriptors; i++) {
        json_t *d = json_array_get(ds, i), *es = json_object_get(d, "entries");
        check(hits_of(d, -1) == r->descriptors[i].hits_addend, "a descriptor's hits differ");
        check(json_array_size(es) == r->descriptors[i].nentries, "entry count differs");
        for (size_t k = 0; k < r->descriptors[i].nentries; k++) {
            const struct descriptor_entry *e = &r->descriptors[i].entries[k];
            json_t *je = json_array_get(es, k);
            check(same_string(je, "key", e->key, e->keylen), "an entry key differs");
            check(same_string(je, "value", e->value, e->valuelen), "an entry value differs");
        }
    }
    json_decref(root);
}

/* A small generator seeded from the input (splitmix64). */
static uint64_t next(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static void check_answers(const struct rls_request *r, uint64_t seed)
{
    static const int64_t edge[] = {
        0, 1, 999, 1000, 1001, 999999, 1000000, 1000001, INT64_MAX / 1000, 4294967295LL};
    struct rls_status st[REQUEST_MAX_CHECKS];
    int over = 0;
    for (size_t i = 0; i < r->ndescriptors; i++) {
        uint64_t x = next(&seed);
        st[i] = (struct rls_status){
            .code = (enum rls_code)(x % 3),
            .has_limit = (int)((x >> 2) & 1),
            .requests_per_unit = edge[(x >> 3) % 10],
            .unit = (enum rls_unit)((x >> 8) % 8),
            .limit_name = (x >> 11) & 1 ? "name\"with\\quotes" : NULL,
            .limit_remaining = edge[(x >> 12) % 10],
            .until_reset_s = edge[(x >> 16) % 10],
        };
        over |= st[i].code == RLS_CODE_OVER_LIMIT;
    }
    struct rls_header h[2] = {{"X-RateLimit-Limit", "5", 1}, {"Retry-After", "1\x01\xff", 3}};
    struct rls_answer a = {.outcome = RLS_DECIDED,
                           .overall = over ? RLS_CODE_OVER_LIMIT : RLS_CODE_OK,
                           .statuses = st,
                           .nstatuses = r->ndescriptors,
                           .headers = h,
                           .nheaders = next(&seed) % 3};
    struct buf b = {0};
    int status = response_rls(&b, &a, 0), got;
    json_t *j = answer_body(&b, &got);
    check(got == status && status == (over ? 429 : 200), "status and overall code disagree");
    check(strcmp(json_string_value(json_object_get(j, "overallCode")),
                 over ? "OVER_LIMIT" : "OK") == 0,
          "overallCode");
    check(json_array_size(json_object_get(j, "statuses")) == r->ndescriptors, "statuses count");
    json_decref(j);
    b.len = 0;
    struct rls_answer u = {.outcome = RLS_UNAVAILABLE, .message = "redis is unavailable"};
    check(response_rls(&b, &u, 0) == 503, "unavailable is not 503");
    j = answer_body(&b, &got);
    check(got == 503 && json_object_get(j, "error"), "the 503 body");
    json_decref(j);
    buf_free(&b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct rls_json j;
    struct request_error err;
    struct buf b = {0};
    uint64_t seed = 14695981039346656037ULL;
    for (size_t i = 0; i < size; i++)
        seed = (seed ^ data[i]) * 1099511628211ULL;
    if (rls_json_parse((const char *)data, size, &j, &err) < 0) {
        check(request_code_status(err.code) == 400, "a refusal without 400");
        response_error(&b, err.code, err.message, NULL, NULL, 0);
        int got;
        json_t *body = answer_body(&b, &got);
        check(got == 400, "the refusal is not 400");
        json_decref(body);
        buf_free(&b);
        return 0;
    }
    check_decoding(data, size, &j.req);
    for (size_t i = 0; i < j.req.ndescriptors; i++)
        check_key(&j.req, &j.req.descriptors[i]);
    check_answers(&j.req, seed);
    rls_json_free(&j);
    return 0;
}
