/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_request.c: libFuzzer harness for the life of one POST /check body,
 * minus the network and Redis. The input is the body, exactly as http.c
 * hands it to check.c; the harness then does what check.c does:
 *
 *   refused  -> response_error() with the request_error (the 400 answer);
 *   accepted -> scripts_build_call() (local clock and Redis TIME), then
 *               response_verdict() of a decided verdict from tier results
 *               the script could have returned (decoded by
 *               scripts_decode_result), of an unavailable one (the
 *               degraded / 503 answer), and the failure_mode local path:
 *               local_decide() on a small fresh store (so it evicts) at a
 *               few times, each answered by a local verdict.
 *
 * The policy file is fixed (below) and built once: every algorithm, a
 * multi-tier policy, a shadow policy, a failure_mode: closed policy with
 * per-key overrides, and a
 * worst case for key length (a 128-byte key_prefix, 64-byte policy and tier
 * names, 16 sliding_window_log tiers of two keys each).
 *
 * Beyond what ASan/UBSan/LSan catch, the harness aborts when a documented
 * contract breaks: check_json_parse's rules about an accepted request (and
 * its fast path's answer being check_json_parse_full's, always), the
 * script call's shape, key encoding (each Redis key must decode back to
 * exactly the caller's key, inside one hash tag), and every answer being a
 * complete HTTP response whose Content-Length is its body's, and whose body
 * is a JSON object that agrees with its status, byte for byte what jansson
 * prints for it.
 *
 * The tier results are not read from the input as such (that would make
 * the seed corpus something other than request bodies): they come from a
 * small generator seeded with a hash of the input, biased towards edge
 * values (0, -1, 999/1000/1001 microseconds, INT64_MIN/MAX). A new input
 * is a new set of results, so coverage of response.c still guides the
 * fuzzer, and a crash reproduces from its input alone.
 */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/redis/scripts.h"
#include "config/config.h"
#include "config/policy.h"
#include "front/http/check_json.h"
#include "front/http/response.h"
#include "limiter/limiter_local.h"

#define NOW_US 1700000000000000LL

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Names in the request dictionary (request.dict) are the policies here. */
static const char policy_yaml[] =
    "redis:\n"
    /* 128 bytes, the longest key_prefix allowed. */
    "  key_prefix: \"rl:"
    "ppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppp"
    "pppppppppppppppppppppppppppppp:\"\n"
    "clock: local\n"
    "policies:\n"
    "  all:\n"
    "    tiers:\n"
    "      - {name: fw, algorithm: fixed_window, limit: 10, window: 1s}\n"
    "      - {name: swl, algorithm: sliding_window_log, limit: 100, window: 1m}\n"
    "      - {name: swc, algorithm: sliding_window_counter, limit: 1000, window: 1h}\n"
    "      - {name: swb, algorithm: sliding_window_buckets, limit: 300, window: 1m, "
    "precision: 1s}\n"
    "      - {name: tb, algorithm: token_bucket, limit: 5, window: 1s, burst: 10}\n"
    "      - {name: gcra, algorithm: gcra, limit: 10, window: 1m, burst: 3}\n"
    "      - {name: lb, algorithm: leaky_bucket, limit: 50, window: 1s, burst: 20}\n"
    "  fixed_window:\n"
    "    tiers: [{name: t, algorithm: fixed_window, limit: 1000000000, window: 366d}]\n"
    "  sliding_window_log:\n"
    "    tiers: [{name: t, algorithm: sliding_window_log, limit: 1000000, window: 1ms}]\n"
    "  sliding_window_counter:\n"
    "    tiers: [{name: t, algorithm: sliding_window_counter, limit: 1, window: 1d}]\n"
    "  sliding_window_buckets:\n"
    "    tiers: [{name: t, algorithm: sliding_window_buckets, limit: 7, window: 1s, "
    "precision: 1ms}]\n"
    "  token_bucket:\n"
    "    tiers: [{name: t, algorithm: token_bucket, limit: 1, window: 1ms}]\n"
    "  gcra:\n"
    "    tiers: [{name: t, algorithm: gcra, limit: 3, window: 1h, burst: 1}]\n"
    "  leaky_bucket:\n"
    "    tiers: [{name: t, algorithm: leaky_bucket, limit: 2, window: 1s}]\n"
    "  shadow:\n"
    "    shadow: true\n"
    "    tiers:\n"
    "      - {name: minute, algorithm: fixed_window, limit: 5, window: 1m}\n"
    "      - {name: drain, algorithm: leaky_bucket, limit: 5, window: 1s, burst: 0}\n"
    "  closed:\n"
    "    failure_mode: closed\n"
    "    tiers:\n"
    "      - {name: burst, algorithm: token_bucket, limit: 5, window: 1s, burst: 10}\n"
    "      - {name: hourly, algorithm: gcra, limit: 100, window: 1h}\n"
    /* Per-key overrides: an exact key, and prefixes of two lengths. */
    "    overrides:\n"
    "      - {key: \"vip:1\", tiers: [{name: v, algorithm: sliding_window_log, limit: 3, "
    "window: 1s}]}\n"
    "      - {prefix: \"vip:\", tiers: [{name: burst, algorithm: gcra, limit: 2, window: 1s}, "
    "{name: l, algorithm: leaky_bucket, limit: 1, window: 1s, burst: 1}]}\n"
    "      - {prefix: \"v\", tiers: [{name: f, algorithm: fixed_window, limit: 1, window: 1s}]}\n"
    "  local:\n"
    "    failure_mode: local\n"
    "    tiers:\n"
    "      - {name: swl, algorithm: sliding_window_log, limit: 3, window: 1s}\n"
    "      - {name: swb, algorithm: sliding_window_buckets, limit: 5, window: 10ms, "
    "precision: 1ms}\n"
    "      - {name: lb, algorithm: leaky_bucket, limit: 2, window: 1ms, burst: 1}\n"
    "  shadow-closed.x_1:\n"
    "    failure_mode: closed\n"
    "    shadow: true\n"
    "    tiers: [{name: a.b-c_d, algorithm: sliding_window_counter, limit: 9, window: 10s}]\n"
    /* 64-byte policy name, 16 tiers with 64-byte names: the longest keys. */
    "  P123456789012345678901234567890123456789012345678901234567890123:\n"
    "    tiers:\n"
    "      - {name: T000000000000000000000000000000000000000000000000000000000000000, "
    "algorithm: sliding_window_log, limit: 1, window: 1s}\n"
    "      - {name: T000000000000000000000000000000000000000000000000000000000000001, "
    "algorithm: sliding_window_log, limit: 2, window: 1s}\n"
    "      - {name: T000000000000000000000000000000000000000000000000000000000000002, "
    "algorithm: sliding_window_log, limit: 3, window: 1s}\n"
    "      - {name: T000000000000000000000000000000000000000000000000000000000000003, "
    "algorithm: sliding_window_log, limit: 4, window: 1s}\n"
    "      - {name: T000000000000000000000000000000000000000000000000000000000000004, "
    "algorithm: sliding_window_log, limit: 5, window: 1s}\n"
    "      - {name: T000000000000000000000000000000000000000000000000000000000000005, "
    "algorithm: sliding_window_log, limit: 6, window: 1s}\n"
    "      - {name: T000000000000000000000000000000000000000000000000000000000000006, "
    "algorithm: sliding_window_log, limit: 7, window: 1s}\n"
    "      - {name: T000000000000000000000000000000000000000000000000000000000000007, "
    "algorithm: sliding_window_log, limit: 8, window: 1s}\n"
    "      - {name: T000000000000000000000000000000000000000000000000000000000000008, "
    "algorithm: sliding_window_log, limit: 9, window: 1s}\n"
    "      - {name: T000000000000000000000000000000000000000000000000000000000000009, "
    "algorithm: sliding_window_log, limit: 10, window: 1s}\n"
    "      - {name: T000000000000000000000000000000000000000000000000000000000000010, "
    "algorithm: sliding_window_log, limit: 11, window: 1s}\n"
    "      - {name: T000000000000000000000000000000000000000000000000000000000000011, "
    "algorithm: sliding_window_log, limit: 12, window: 1s}\n"
    "      - {name: T000000000000000000000000000000000000000000000000000000000000012, "
    "algorithm: sliding_window_log, limit: 13, window: 1s}\n"
    "      - {name: T000000000000000000000000000000000000000000000000000000000000013, "
    "algorithm: sliding_window_log, limit: 14, window: 1s}\n"
    "      - {name: T000000000000000000000000000000000000000000000000000000000000014, "
    "algorithm: sliding_window_log, limit: 15, window: 1s}\n"
    "      - {name: T000000000000000000000000000000000000000000000000000000000000015, "
    "algorithm: sliding_window_log, limit: 16, window: 1s}\n";

static struct config *cfg;

/* A broken contract: report it and abort, so libFuzzer saves the input. */
#define REQUIRE(cond, ...)                                                                         \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz_request: %s:%d: %s: ", __FILE__, __LINE__, #cond);               \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    char err[RL_ERRLEN];

    (void)argc;
    (void)argv;
    cfg = config_load_string("fuzz_request.yaml", policy_yaml, sizeof policy_yaml - 1, err,
                             sizeof err);
    if (cfg == NULL) {
        fprintf(stderr, "fuzz_request: the harness's policy file is invalid: %s\n", err);
        abort();
    }
    /* Kept for the whole run: still reachable at exit, so not a leak. */
    return 0;
}

/* ---- tier results ------------------------------------------------------ */

static uint64_t fnv1a(const uint8_t *data, size_t size)
{
    uint64_t h = 0xcbf29ce484222325ULL;

    for (size_t i = 0; i < size; i++)
        h = (h ^ data[i]) * 0x100000001b3ULL;
    return h;
}

/* splitmix64: small, fast, and good enough to pick test values. */
static uint64_t next(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);

    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* A value a script reply might carry: mostly edges and small numbers. */
static long long pick(uint64_t *s)
{
    /* clang-format off */
    static const long long edges[] = {
        0, 1, -1, 2, 999, 1000, 1001, 999999, 1000000, 1000001, 3600000000LL,
        INT64_MAX, INT64_MIN, INT64_MAX - 999, INT64_MIN + 1, (long long)1 << 53};
    /* clang-format on */
    uint64_t r = next(s);

    switch (r & 3) {
    case 0:
    case 1:
        return edges[(r >> 2) % (sizeof edges / sizeof edges[0])];
    case 2:
        return (long long)((r >> 2) % 5000000);
    default:
        return (long long)next(s);
    }
}

/* ---- contracts ----------------------------------------------------------- */

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    return c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/*
 * One Redis key must be <prefix>{<policy>:<encoded key>}:<tier>[:<suffix>],
 * with the hash tag the first {...} of the key and the encoded key decoding
 * back to exactly the caller's key (so distinct keys never collide).
 */
static void check_redis_key(const char *arg, size_t len, const struct check_item *c,
                            const struct tier *t, int k)
{
    const char *prefix = cfg->key_prefix, *p = arg, *end = arg + len;
    size_t plen = strlen(prefix), nlen = strlen(c->policy->name), i = 0;

    REQUIRE(strlen(arg) == len, "key argument has a NUL byte");
    REQUIRE(len > plen + nlen + 2 && memcmp(p, prefix, plen) == 0 && p[plen] == '{' &&
                memcmp(p + plen + 1, c->policy->name, nlen) == 0 && p[plen + 1 + nlen] == ':',
            "key %s does not start with the prefix and {policy:", arg);
    REQUIRE(strchr(arg, '{') == arg + plen, "a '{' before the hash tag in %s", arg);
    p += plen + nlen + 2;
    for (; p < end && *p != '}'; i++) {
        char b = *p;
        REQUIRE(b != '{', "'{' inside the hash tag of %s", arg);
        if (b == '%') {
            REQUIRE(end - p >= 3 && hexval(p[1]) >= 0 && hexval(p[2]) >= 0, "bad escape in %s",
                    arg);
            b = (char)(hexval(p[1]) * 16 + hexval(p[2]));
            p += 3;
        } else {
            p++;
        }
        REQUIRE(i < c->keylen && c->key[i] == b, "key %s does not decode to the caller's key", arg);
    }
    REQUIRE(i == c->keylen, "key %s decodes to a prefix of the caller's key", arg);
    REQUIRE(end - p >= 2 && p[0] == '}' && p[1] == ':', "no }: after the key in %s", arg);
    p += 2;
    REQUIRE((size_t)(end - p) >= strlen(t->name) && memcmp(p, t->name, strlen(t->name)) == 0,
            "no tier name in %s", arg);
    p += strlen(t->name);
    REQUIRE(k == 0 ? p == end : strcmp(p, ":seq") == 0, "bad suffix in %s", arg);
}

static void check_call(const struct check_request *req, const struct script_call *call,
                       int64_t now_us)
{
    size_t nkeys = 0, ntiers = 0, a = 0;

    for (size_t i = 0; i < req->nchecks; i++) {
        const struct policy *p = req->checks[i].policy;
        for (size_t j = 0; j < p->ntiers; j++)
            nkeys += (size_t)policy_algorithm_nkeys(p->tiers[j].algorithm);
        ntiers += p->ntiers;
    }
    REQUIRE(call->nkeys == nkeys && call->ntiers == ntiers, "%zu keys and %zu tiers", call->nkeys,
            call->ntiers);
    REQUIRE(call->nargs == nkeys + 2 + 2 * req->nchecks, "%zu arguments", call->nargs);
    for (size_t i = 0; i < req->nchecks; i++) {
        const struct check_item *c = &req->checks[i];
        for (size_t j = 0; j < c->policy->ntiers; j++) {
            const struct tier *t = &c->policy->tiers[j];
            for (int k = 0; k < policy_algorithm_nkeys(t->algorithm); k++, a++)
                check_redis_key(call->args[a], call->lens[a], c, t, k);
        }
    }
    for (; a < call->nargs; a++)
        REQUIRE(strlen(call->args[a]) == call->lens[a], "argument %zu: length", a);
    if (now_us < 0)
        REQUIRE(call->lens[nkeys] == 0, "now_us should be empty for Redis TIME");
    else
        REQUIRE(strcmp(call->args[nkeys], "1700000000000000") == 0, "now_us is %s",
                call->args[nkeys]);
}

/* One rendered answer: the status and the body (without its newline). */
struct answer {
    int status;
    char *body;
};

/* Takes the HTTP response in b apart, checking its framing. */
static void take_apart(struct buf *b, struct answer *ans)
{
    buf_append_char(b, '\0');
    REQUIRE(strncmp(b->data, "HTTP/1.1 ", 9) == 0, "no status line: %s", b->data);
    ans->status = atoi(b->data + 9);
    const char *end = strstr(b->data, "\r\n\r\n");
    REQUIRE(end != NULL, "no end of head: %s", b->data);
    const char *cl = strstr(b->data, "\r\nContent-Length: ");
    REQUIRE(cl != NULL && cl < end, "no Content-Length: %s", b->data);
    size_t len = strlen(end + 4);
    REQUIRE((size_t)atoll(cl + 18) == len, "Content-Length %lld for %zu bytes", atoll(cl + 18),
            len);
    REQUIRE(len > 0 && end[4 + len - 1] == '\n', "the body does not end with a newline");
    ans->body = strndup(end + 4, len - 1);
    REQUIRE(ans->body != NULL, "out of memory");
    buf_free(b);
}

static void render(const struct verdict *v, struct answer *ans)
{
    struct buf b = {0};
    int status = response_verdict(&b, v, 0);
    take_apart(&b, ans);
    REQUIRE(status == ans->status, "returned %d, wrote %d", status, ans->status);
}

static void answer_free(struct answer *ans)
{
    free(ans->body);
    ans->body = NULL;
}

/* Every answer is a JSON object as jansson prints it; a decision's
 * "allowed" matches its status. */
static void check_answer(const struct answer *ans, const struct check_request *req)
{
    json_error_t jerr;
    json_t *body;

    REQUIRE(ans->body != NULL, "no body");
    body = json_loads(ans->body, 0, &jerr);
    REQUIRE(json_is_object(body), "body is not a JSON object: %s", ans->body);
    char *again = json_dumps(body, JSON_COMPACT);
    REQUIRE(again && strcmp(again, ans->body) == 0, "not as jansson prints it: %s", ans->body);
    free(again);
    if (req != NULL) {
        json_t *allowed = json_object_get(body, "allowed");
        json_t *checks = json_object_get(body, "checks");
        REQUIRE(json_is_boolean(allowed), "no \"allowed\" in %s", ans->body);
        REQUIRE(json_array_size(checks) == req->nchecks, "%zu checks in %s", req->nchecks,
                ans->body);
        if (ans->status == 200)
            REQUIRE(json_is_true(allowed), "200 but not allowed: %s", ans->body);
        else
            REQUIRE((ans->status == 429 || ans->status == 503) && json_is_false(allowed),
                    "status %d: %s", ans->status, ans->body);
    }
    json_decref(body);
}

static void check_request(const struct check_request *req)
{
    REQUIRE(req->nchecks >= 1 && req->nchecks <= REQUEST_MAX_CHECKS, "%zu checks", req->nchecks);
    REQUIRE(req->dry_run == 0 || req->dry_run == 1, "dry_run %d", req->dry_run);
    for (size_t i = 0; i < req->nchecks; i++) {
        const struct check_item *c = &req->checks[i];
        /* The named policy, or the override its key picks. */
        REQUIRE(c->policy != NULL && policy_for_key(config_find_policy(cfg, c->policy->name),
                                                    c->key, c->keylen) == c->policy,
                "check %zu: policy", i);
        REQUIRE(c->keylen >= 1 && c->keylen <= POLICY_KEY_MAX, "check %zu: keylen %zu", i,
                c->keylen);
        REQUIRE(memchr(c->key, '\0', c->keylen) == NULL && c->key[c->keylen] == '\0',
                "check %zu: NUL in the key or not terminated", i);
        REQUIRE(c->cost >= 0 && c->cost <= REQUEST_MAX_COST, "check %zu: cost %lld", i,
                (long long)c->cost);
        for (size_t j = 0; j < i; j++)
            REQUIRE(req->checks[j].policy != c->policy || req->checks[j].keylen != c->keylen ||
                        memcmp(req->checks[j].key, c->key, c->keylen) != 0,
                    "checks %zu and %zu were not merged", j, i);
    }
}

/* ---- the harness ----------------------------------------------------------- */

/*
 * failure_mode local: the request decided three times by a fresh store of
 * 1, 3 or 64 keys (the smaller ones evict, even the request's own keys), at
 * times from the seed within local_decide's 0..2^53 (times may go back, as a
 * wall clock may). Run for every request, whatever its policies' mode: the
 * function's contract does not depend on it.
 */
static void decide_locally(const struct check_request *req, size_t ntiers, uint64_t seed)
{
    static const size_t sizes[] = {1, 3, 64};
    size_t max_keys = sizes[next(&seed) % 3];
    struct local_store *store = local_store_new(max_keys, 0x0123456789abcdefULL);
    struct tier_result *results = calloc(ntiers, sizeof *results);
    int64_t now = (int64_t)(next(&seed) % 4 == 0 ? next(&seed) % ((1ULL << 53) + 1) : NOW_US);
    struct answer ans;

    REQUIRE(store != NULL && results != NULL, "out of memory");
    for (int round = 0; round < 3; round++) {
        int allowed = local_decide(store, cfg->key_prefix, req, now, results), expect = 1;
        const struct tier_result *r = results;

        for (size_t i = 0; i < req->nchecks; i++)
            for (size_t j = 0; j < req->checks[i].policy->ntiers; j++, r++)
                if (!r->allowed && !req->checks[i].policy->shadow)
                    expect = 0;
        REQUIRE(allowed == expect, "local_decide returned %d, its tiers say %d", allowed, expect);
        REQUIRE(local_store_size(store) <= max_keys, "%zu entries in a store of %zu",
                local_store_size(store), max_keys);
        struct verdict v = {.kind = VERDICT_LOCAL, .req = req, .results = results};
        decision_summarize(req, results, &v.sum);
        render(&v, &ans);
        check_answer(&ans, req);
        REQUIRE(ans.status == (allowed ? 200 : 429), "status %d for allowed %d", ans.status,
                allowed);
        answer_free(&ans);

        /* Next: the same microsecond, a little later, or a jump either way. */
        switch (next(&seed) % 4) {
        case 0:
            break;
        case 1:
            now += (int64_t)(next(&seed) % 2000000);
            break;
        case 2:
            now -= (int64_t)(next(&seed) % 2000000);
            break;
        default:
            now = (int64_t)(next(&seed) % ((1ULL << 53) + 1));
            break;
        }
        if (now < 0)
            now = 0;
        if (now > (1LL << 53))
            now = 1LL << 53;
    }
    local_store_free(store);
    free(results);
}

static void decide(const struct check_request *req, size_t ntiers, uint64_t seed)
{
    size_t n = SCRIPTS_RESULT_HEAD + SCRIPTS_RESULT_PER_TIER * ntiers;
    long long *ints = calloc(n + 1, sizeof *ints);
    struct tier_result *results = calloc(ntiers, sizeof *results);
    uint64_t deny = next(&seed) & 3; /* how often a tier denies: never .. always */
    char err[RL_ERRLEN];
    struct answer ans;

    REQUIRE(ints != NULL && results != NULL, "out of memory");
    ints[0] = NOW_US;
    ints[1] = 1;
    for (size_t i = 0; i < ntiers; i++) {
        long long *v = ints + SCRIPTS_RESULT_HEAD + SCRIPTS_RESULT_PER_TIER * i;
        uint64_t r = next(&seed);
        v[0] = deny == 0 ? 1 : deny == 3 ? 0 : (r % (deny == 1 ? 8 : 2)) != 0;
        for (int k = 1; k < SCRIPTS_RESULT_PER_TIER - 1; k++)
            v[k] = pick(&seed);
        v[6] = (long long)(next(&seed) % 3); /* reason: 0, 1 (cost_exceeds_limit), other */
    }
    /* A reply of the wrong shape is refused, never read past. */
    REQUIRE(scripts_decode_result(ints, n + 1, ntiers, results, err, sizeof err) < 0,
            "a reply one integer too long was accepted");
    REQUIRE(scripts_decode_result(ints, n, ntiers, results, err, sizeof err) == 0, "%s", err);

    struct verdict v = {.kind = VERDICT_DECIDED, .req = req, .results = results};
    decision_summarize(req, results, &v.sum);
    render(&v, &ans);
    check_answer(&ans, req);
    answer_free(&ans);

    v = (struct verdict){
        .kind = VERDICT_UNAVAILABLE, .req = req, .why = "fuzz: redis is unavailable"};
    render(&v, &ans);
    check_answer(&ans, req);
    answer_free(&ans);

    free(results);
    free(ints);
}

/* check_json_parse (with its fast path for plain bodies) answers exactly what
 * jansson's path alone answers. */
static void check_same_as_full(const uint8_t *data, size_t size, int rc,
                               const struct check_request *req, const struct request_error *err)
{
    struct check_request full;
    struct request_error ferr;
    int frc = check_json_parse_full(cfg, (const char *)data, size, &full, &ferr);
    REQUIRE(frc == rc, "check_json_parse says %d, check_json_parse_full %d", rc, frc);
    if (rc < 0) {
        REQUIRE(err->code == ferr.code && strcmp(err->message, ferr.message) == 0,
                "the paths refuse differently: %s / %s", err->message, ferr.message);
        return;
    }
    REQUIRE(req->dry_run == full.dry_run && req->nchecks == full.nchecks,
            "the paths accept differently");
    for (size_t i = 0; i < req->nchecks; i++)
        REQUIRE(req->checks[i].policy == full.checks[i].policy &&
                    req->checks[i].keylen == full.checks[i].keylen &&
                    memcmp(req->checks[i].key, full.checks[i].key, req->checks[i].keylen) == 0 &&
                    req->checks[i].cost == full.checks[i].cost,
                "check %zu differs between the paths", i);
    request_free(&full);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct check_request req;
    struct request_error err;
    struct script_call call;
    struct answer ans;

    int rc = check_json_parse(cfg, (const char *)data, size, &req, &err);
    check_same_as_full(data, size, rc, &req, &err);
    if (rc < 0) {
        REQUIRE(req.nchecks == 0 && req.checks == NULL, "a refused request left checks behind");
        REQUIRE(request_code_status(err.code) == 400, "status %d", request_code_status(err.code));
        REQUIRE(memchr(err.message, '\0', sizeof err.message) != NULL, "message not terminated");
        /* What check.c answers. */
        struct buf b = {0};
        response_error(&b, err.code, err.message, NULL, NULL, 0);
        take_apart(&b, &ans);
        REQUIRE(ans.status == 400, "status %d", ans.status);
        check_answer(&ans, NULL);
        answer_free(&ans);
        return 0;
    }
    check_request(&req);

    scripts_build_call(cfg, &req, NOW_US, &call);
    check_call(&req, &call, NOW_US);
    size_t ntiers = call.ntiers;
    scripts_call_free(&call);
    scripts_build_call(cfg, &req, -1, &call);
    check_call(&req, &call, -1);
    scripts_call_free(&call);

    decide(&req, ntiers, fnv1a(data, size));
    decide_locally(&req, ntiers, fnv1a(data, size) ^ 0x5bd1e995);

    request_free(&req);
    request_free(&req); /* safe on a freed struct */
    return 0;
}
