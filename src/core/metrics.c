/* SPDX-License-Identifier: Apache-2.0 */
/*
 * metrics.c: the counters behind /metrics and their text exposition
 * (Prometheus text format 0.0.4). Owns the storage of every counter and of
 * the Redis latency histogram, the bounded table of policy label values, the
 * names and HELP texts, and the rendering with label escaping. Does not own
 * serving the text (http_routes.c, grpc.c), reading clocks (callers pass microseconds) or
 * any value that lives elsewhere (the gauges, passed in at render time).
 *
 * Numbers are kept as integers (counts, microseconds) and rendered exactly
 * as decimals, so the text never depends on printf's float formatting.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/policy.h"
#include "core/metrics.h"
#include "lib/util.h"
#include <pthread.h>

#define PREFIX "ratelimitd_"
#define OTHER_POLICY "_other"

static const char *const decision_label[METRICS_NDECISIONS] = {
    [METRICS_ALLOWED] = "allowed",
    [METRICS_DENIED] = "denied",
    [METRICS_SHADOW_DENIED] = "shadow_denied",
    [METRICS_DEGRADED] = "degraded",
    [METRICS_UNAVAILABLE] = "unavailable",
    [METRICS_LOCAL] = "local",
};

static const char *const report_label[METRICS_NREPORTS] = {
    [METRICS_REPORT_RECORDED] = "recorded",
    [METRICS_REPORT_LOCAL] = "local",
    [METRICS_REPORT_NOT_RECORDED] = "not_recorded",
    [METRICS_REPORT_UNAVAILABLE] = "unavailable",
};

static const struct {
    const char *name;
    const char *help;
    int redis; /* a Redis series: not rendered without Redis (metrics_gauges.no_redis) */
} counter_info[METRICS_NCOUNTERS] = {
    [METRICS_REDIS_RECONNECTS] =
        {PREFIX "redis_reconnects_total",
         "Redis connections lost or dropped, each followed by reconnecting.", 1},
    [METRICS_REDIS_NOSCRIPT_RELOADS] = {PREFIX "redis_noscript_reloads_total",
                                        "NOSCRIPT replies answered by reloading the script "
                                        "and retrying.",
                                        1},
    [METRICS_REDIS_TIMEOUTS] = {PREFIX "redis_timeouts_total",
                                "Checks answered at their deadline because Redis was late.", 1},
    [METRICS_REDIS_ERRORS] = {PREFIX "redis_errors_total", "Error replies from Redis.", 1},
    [METRICS_DENY_CACHE_HITS] = {PREFIX "deny_cache_hits_total",
                                 "Checks denied by the local deny cache, without asking Redis.", 0},
    [METRICS_KEY_RESETS] = {PREFIX "key_resets_total",
                            "Keys reset through the admin API (DELETE /v1/keys/...).", 0},
    [METRICS_GRPC_CONNECTIONS] = {PREFIX "grpc_connections_total",
                                  "HTTP/2 connections accepted on grpc_listen.", 0},
    [METRICS_GRPC_STREAMS] = {PREFIX "grpc_streams_total",
                              "HTTP/2 streams (gRPC calls) opened on grpc_listen.", 0},
    [METRICS_GRPC_PROTOCOL_ERRORS] = {PREFIX "grpc_protocol_errors_total",
                                      "gRPC connections closed for an HTTP/2 protocol error or "
                                      "a flood (SETTINGS, PING, RST_STREAM).",
                                      0},
    [METRICS_LEASES_ACQUIRED] = {PREFIX "leases_acquired_total",
                                 "Concurrency leases this daemon handed out (allowed /check "
                                 "answers, one per concurrency tier).",
                                 0},
    [METRICS_LEASES_RELEASED] = {PREFIX "leases_released_total",
                                 "Leases freed by POST /release on this daemon.", 0},
    [METRICS_LEASES_RENEWED] = {PREFIX "leases_renewed_total",
                                "Leases extended by POST /renew on this daemon.", 0},
    [METRICS_LEASES_EXPIRED] = {PREFIX "leases_expired_total",
                                "Leases that POST /release or /renew on this daemon found "
                                "already expired.",
                                0},
};

/* The statuses the daemon sends whatever its config (response.c's
 * reason_phrase), rendered even at 0 so that their series exist from the
 * start; a status the config chooses (deny_status: 403, ...) appears with
 * its first answer. Every status is counted under its own label. */
static const int known_status[] = {200, 400, 401, 404, 405, 408, 413, 429, 431, 501, 503, 505};
#define NSTATUS (sizeof known_status / sizeof known_status[0])
#define STATUS_MIN 100 /* http[] holds the statuses STATUS_MIN .. STATUS_MAX */
#define STATUS_MAX 599

/* Upper bounds (le) of the latency buckets, in µs: 100µs to 1s; then +Inf. */
static const int64_t bucket_us[] = {100,   250,   500,    1000,   2500,   5000,   10000,
                                    25000, 50000, 100000, 250000, 500000, 1000000};
#define NBUCKETS (sizeof bucket_us / sizeof bucket_us[0])

/* Upper bounds (le) of the batch size buckets, in requests per Redis call
 * (redis.batch is at most CONFIG_REDIS_BATCH_MAX); then +Inf. */
static const uint64_t batch_le[] = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024};
#define NBATCH (sizeof batch_le / sizeof batch_le[0])

/* Policy slots are found through an open-addressing index of slot number + 1
 * (0: empty). At most METRICS_MAX_POLICIES + 1 slots ever exist (the extra
 * one is "_other"), so a fixed index at most half full never needs to grow. */
#define INDEX_SIZE 4096
_Static_assert(INDEX_SIZE >= 2 * (METRICS_MAX_POLICIES + 1), "index too small");
_Static_assert(METRICS_MAX_POLICIES + 1 <= UINT16_MAX, "index entries are 16 bits");

struct policy_slot {
    char name[POLICY_NAME_MAX + 1];
    uint64_t checks[METRICS_NDECISIONS];
    uint64_t reports[METRICS_NREPORTS];
    uint64_t local_lease[METRICS_NLOCAL_LEASE];
};

/* One (domain, descriptor) series of ratelimitd_rls_descriptors_total. */
struct rls_series {
    char *domain, *descriptor; /* owned */
    int detailed;
    uint64_t n[METRICS_RLS_NRESULTS];
};

#define RLS_LABEL_MAX 200

static const char *const rls_front_label[METRICS_RLS_NFRONTS] = {"grpc", "json"};
static const char *const rls_code_label[METRICS_RLS_NCODES] = {"ok", "over_limit", "unavailable",
                                                               "invalid"};
static const char *const rls_result_label[METRICS_RLS_NRESULTS] = {
    "ok", "over_limit", "shadow_over_limit", "unlimited", "unmatched"};

/* One Redis node's series. up_reports counts the shards whose last word on
 * the node is summed here, up_count those of them that said ready. */
#define NODE_LABEL_MAX 300
struct node_slot {
    char name[NODE_LABEL_MAX];
    uint64_t n[METRICS_NODE_NCOUNTERS];
    uint64_t up_reports, up_count;
};

static const struct {
    const char *name, *help;
} node_counter_info[METRICS_NODE_NCOUNTERS] = {
    [METRICS_NODE_CALLS] = {PREFIX "redis_node_calls_total", "Decision calls sent, by node."},
    [METRICS_NODE_ERRORS] = {PREFIX "redis_node_errors_total",
                             "Error replies (other than redirects), by node."},
    [METRICS_NODE_RECONNECTS] = {PREFIX "redis_node_reconnects_total",
                                 "Connections lost or dropped, by node."},
    [METRICS_NODE_MOVED] = {PREFIX "redis_node_moved_total",
                            "MOVED redirects received, by the node that sent them."},
    [METRICS_NODE_ASK] = {PREFIX "redis_node_ask_total",
                          "ASK redirects received, by the node that sent them."},
    [METRICS_NODE_FAILOVERS] = {PREFIX "redis_node_failovers_total",
                                "Times the node became the master in place of another (Sentinel "
                                "switch, Cluster slot map change), by the new master."},
};

struct metrics {
    /* Taken by the owning worker while it records and by whoever renders
     * the sum of every worker's shard: uncontended but for a scrape. */
    pthread_mutex_t lock;
    struct policy_slot *policies; /* in order of first sight, the render order */
    size_t npolicies, policies_cap;
    uint16_t index[INDEX_SIZE];
    uint64_t http[STATUS_MAX - STATUS_MIN + 1]; /* by status - STATUS_MIN */
    uint64_t latency[NBUCKETS + 1];             /* per bucket, not cumulative; last: +Inf */
    uint64_t latency_sum_us;
    uint64_t latency_count;
    uint64_t batch[NBATCH + 1]; /* per bucket, not cumulative; last: +Inf */
    uint64_t batch_sum;
    uint64_t batch_count;
    uint64_t counters[METRICS_NCOUNTERS];
    uint64_t reloads[2]; /* [0] failure, [1] success */
    uint64_t tls[METRICS_TLS_LISTENERS][METRICS_TLS_NRESULTS];
    uint64_t rls_requests[METRICS_RLS_NFRONTS][METRICS_RLS_NCODES];
    /* The series in order of first sight (the render order), found through
     * an open-addressing index of series number + 1 (0: empty), of
     * rls_index_size entries, kept at most half full. */
    struct rls_series *rls;
    size_t nrls, rls_cap, ndetailed;
    size_t *rls_index;
    size_t rls_index_size;
    /* Few (the nodes of one deployment): found by a linear search. */
    struct node_slot nodes[METRICS_MAX_NODES + 1]; /* the last: "_other" */
    size_t nnodes;
};

struct metrics *metrics_new(void)
{
    struct metrics *m = xcalloc(1, sizeof(struct metrics));
    pthread_mutex_init(&m->lock, NULL);
    return m;
}

void metrics_free(struct metrics *m)
{
    if (!m)
        return;
    pthread_mutex_destroy(&m->lock);
    for (size_t i = 0; i < m->nrls; i++) {
        free(m->rls[i].domain);
        free(m->rls[i].descriptor);
    }
    free(m->rls);
    free(m->rls_index);
    free(m->policies);
    free(m);
}

/* FNV-1a. */
static size_t name_hash(const char *s)
{
    uint32_t h = 2166136261u;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 16777619u;
    return h;
}

/* The slot counting name, created at zero if new. An invalid name, or a new
 * one past the cap, gets the "_other" slot (shared with a policy that is
 * really called "_other": a series must never appear twice). The pointer is
 * valid until the next call. */
static struct policy_slot *policy_slot(struct metrics *m, const char *name)
{
    if (!policy_name_valid(name))
        name = OTHER_POLICY;
    for (;;) {
        size_t h = name_hash(name) & (INDEX_SIZE - 1);
        for (; m->index[h]; h = (h + 1) & (INDEX_SIZE - 1)) {
            struct policy_slot *s = &m->policies[m->index[h] - 1];
            if (strcmp(s->name, name) == 0)
                return s;
        }
        if (m->npolicies < METRICS_MAX_POLICIES || strcmp(name, OTHER_POLICY) == 0) {
            if (m->npolicies == m->policies_cap) {
                m->policies_cap = m->policies_cap ? 2 * m->policies_cap : 16;
                m->policies = xrealloc(m->policies, m->policies_cap * sizeof *m->policies);
            }
            struct policy_slot *s = &m->policies[m->npolicies++];
            memset(s, 0, sizeof *s);
            strcpy(s->name, name); /* fits: policy_name_valid bounds it */
            m->index[h] = (uint16_t)m->npolicies;
            return s;
        }
        name = OTHER_POLICY; /* full: look up (or create) "_other" instead */
    }
}

void metrics_policy_seen(struct metrics *m, const char *policy)
{
    pthread_mutex_lock(&m->lock);
    (void)policy_slot(m, policy);
    pthread_mutex_unlock(&m->lock);
}

void metrics_check(struct metrics *m, const char *policy, enum metrics_decision d)
{
    if ((unsigned)d >= METRICS_NDECISIONS)
        return;
    pthread_mutex_lock(&m->lock);
    policy_slot(m, policy)->checks[d]++;
    pthread_mutex_unlock(&m->lock);
}

void metrics_report(struct metrics *m, const char *policy, enum metrics_report r)
{
    if ((unsigned)r >= METRICS_NREPORTS)
        return;
    pthread_mutex_lock(&m->lock);
    policy_slot(m, policy)->reports[r]++;
    pthread_mutex_unlock(&m->lock);
}

void metrics_local_lease(struct metrics *m, const char *policy, enum metrics_local_lease k,
                         uint64_t n)
{
    if ((unsigned)k >= METRICS_NLOCAL_LEASE)
        return;
    pthread_mutex_lock(&m->lock);
    policy_slot(m, policy)->local_lease[k] += n;
    pthread_mutex_unlock(&m->lock);
}

void metrics_rls_request(struct metrics *m, enum metrics_rls_front f, enum metrics_rls_code c)
{
    if ((unsigned)f >= METRICS_RLS_NFRONTS || (unsigned)c >= METRICS_RLS_NCODES)
        return;
    pthread_mutex_lock(&m->lock);
    m->rls_requests[f][c]++;
    pthread_mutex_unlock(&m->lock);
}

/* FNV-1a over domain, a NUL and descriptor. */
static size_t rls_hash(const char *domain, const char *descriptor)
{
    return name_hash(descriptor) * 31 + name_hash(domain);
}

static void rls_index_put(struct metrics *m, size_t slot)
{
    const struct rls_series *r = &m->rls[slot];
    size_t mask = m->rls_index_size - 1;
    size_t h = rls_hash(r->domain, r->descriptor) & mask;
    while (m->rls_index[h])
        h = (h + 1) & mask;
    m->rls_index[h] = slot + 1;
}

/* The series of (domain, descriptor), or NULL if it does not exist. */
static struct rls_series *rls_find(struct metrics *m, const char *domain, const char *descriptor)
{
    if (!m->rls_index_size)
        return NULL;
    size_t mask = m->rls_index_size - 1;
    for (size_t h = rls_hash(domain, descriptor) & mask; m->rls_index[h]; h = (h + 1) & mask) {
        struct rls_series *r = &m->rls[m->rls_index[h] - 1];
        if (strcmp(r->descriptor, descriptor) == 0 && strcmp(r->domain, domain) == 0)
            return r;
    }
    return NULL;
}

/* A new series at zero; the caller has checked the caps. */
static struct rls_series *rls_add(struct metrics *m, const char *domain, const char *descriptor,
                                  int detailed)
{
    if (m->nrls == m->rls_cap) {
        m->rls_cap = m->rls_cap ? 2 * m->rls_cap : 16;
        m->rls = xrealloc(m->rls, m->rls_cap * sizeof *m->rls);
    }
    if (2 * (m->nrls + 1) > m->rls_index_size) {
        free(m->rls_index);
        m->rls_index_size = m->rls_index_size ? 2 * m->rls_index_size : 64;
        m->rls_index = xcalloc(m->rls_index_size, sizeof *m->rls_index);
        for (size_t i = 0; i < m->nrls; i++)
            rls_index_put(m, i);
    }
    struct rls_series *r = &m->rls[m->nrls];
    memset(r, 0, sizeof *r);
    r->domain = xstrdup(domain);
    r->descriptor = xstrdup(descriptor);
    r->detailed = detailed;
    rls_index_put(m, m->nrls++);
    m->ndetailed += detailed != 0;
    return r;
}

/* The series counting (domain, descriptor), created at zero if new; past
 * a cap, (domain, "_other"), which may always be created: domains come
 * from the config. */
static struct rls_series *rls_series(struct metrics *m, const char *domain, const char *descriptor,
                                     int detailed)
{
    struct rls_series *r = rls_find(m, domain, descriptor);
    if (r)
        return r;
    if (m->nrls < METRICS_MAX_RLS_SERIES && (!detailed || m->ndetailed < METRICS_MAX_RLS_DETAILED))
        return rls_add(m, domain, descriptor, detailed);
    r = rls_find(m, domain, OTHER_POLICY);
    return r ? r : rls_add(m, domain, OTHER_POLICY, 0);
}

void metrics_rls_descriptor(struct metrics *m, const char *domain, const char *descriptor,
                            size_t len, int detailed, enum metrics_rls_result res)
{
    if ((unsigned)res >= METRICS_RLS_NRESULTS)
        return;
    /* Label values must be UTF-8 and short: a request's bytes are not. */
    char label[RLS_LABEL_MAX + 1];
    size_t n = len < RLS_LABEL_MAX ? len : RLS_LABEL_MAX;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)descriptor[i];
        label[i] = ch >= 0x20 && ch < 0x7f ? (char)ch : '_';
    }
    label[n] = '\0';
    pthread_mutex_lock(&m->lock);
    rls_series(m, domain, label, detailed)->n[res]++;
    pthread_mutex_unlock(&m->lock);
}

void metrics_http_status(struct metrics *m, int status)
{
    if (status < STATUS_MIN || status > STATUS_MAX)
        return; /* not an HTTP status: the daemon never sends one */
    pthread_mutex_lock(&m->lock);
    m->http[status - STATUS_MIN]++;
    pthread_mutex_unlock(&m->lock);
}

void metrics_redis_latency(struct metrics *m, int64_t us)
{
    if (us < 0)
        us = 0;
    size_t i = 0;
    while (i < NBUCKETS && us > bucket_us[i]) /* le: "less than or equal" */
        i++;
    pthread_mutex_lock(&m->lock);
    m->latency[i]++;
    m->latency_sum_us += (uint64_t)us;
    m->latency_count++;
    pthread_mutex_unlock(&m->lock);
}

void metrics_redis_batch(struct metrics *m, size_t n)
{
    size_t i = 0;
    while (i < NBATCH && n > batch_le[i])
        i++;
    pthread_mutex_lock(&m->lock);
    m->batch[i]++;
    m->batch_sum += n;
    m->batch_count++;
    pthread_mutex_unlock(&m->lock);
}

void metrics_count(struct metrics *m, enum metrics_counter c)
{
    metrics_count_n(m, c, 1);
}

void metrics_count_n(struct metrics *m, enum metrics_counter c, uint64_t n)
{
    if ((unsigned)c >= METRICS_NCOUNTERS || n == 0)
        return;
    pthread_mutex_lock(&m->lock);
    m->counters[c] += n;
    pthread_mutex_unlock(&m->lock);
}

/* The slot of node (created at zero), or "_other" past the cap. Called
 * with the lock held. */
static struct node_slot *node_slot(struct metrics *m, const char *node)
{
    for (size_t i = 0; i < m->nnodes; i++)
        if (strcmp(m->nodes[i].name, node) == 0)
            return &m->nodes[i];
    if (strlen(node) >= NODE_LABEL_MAX || m->nnodes >= METRICS_MAX_NODES) {
        node = OTHER_POLICY;
        for (size_t i = 0; i < m->nnodes; i++)
            if (strcmp(m->nodes[i].name, node) == 0)
                return &m->nodes[i];
    }
    struct node_slot *s = &m->nodes[m->nnodes++];
    memset(s, 0, sizeof *s);
    strcpy(s->name, node); /* fits: checked above, or "_other" */
    return s;
}

void metrics_node_count(struct metrics *m, const char *node, enum metrics_node_counter c)
{
    if ((unsigned)c >= METRICS_NODE_NCOUNTERS)
        return;
    pthread_mutex_lock(&m->lock);
    node_slot(m, node)->n[c]++;
    pthread_mutex_unlock(&m->lock);
}

void metrics_node_up(struct metrics *m, const char *node, int up)
{
    pthread_mutex_lock(&m->lock);
    struct node_slot *s = node_slot(m, node);
    s->up_reports = 1;
    s->up_count = up ? 1 : 0;
    pthread_mutex_unlock(&m->lock);
}

void metrics_tls_handshake(struct metrics *m, unsigned listener, enum metrics_tls_result r)
{
    if (listener >= METRICS_TLS_LISTENERS || (unsigned)r >= METRICS_TLS_NRESULTS)
        return;
    pthread_mutex_lock(&m->lock);
    m->tls[listener][r]++;
    pthread_mutex_unlock(&m->lock);
}

void metrics_reload(struct metrics *m, int ok)
{
    pthread_mutex_lock(&m->lock);
    m->reloads[ok ? 1 : 0]++;
    pthread_mutex_unlock(&m->lock);
}

void metrics_add(struct metrics *into, struct metrics *from)
{
    pthread_mutex_lock(&from->lock);
    pthread_mutex_lock(&into->lock);
    for (size_t i = 0; i < from->npolicies; i++) {
        const struct policy_slot *f = &from->policies[i];
        struct policy_slot *t = policy_slot(into, f->name);
        for (size_t d = 0; d < METRICS_NDECISIONS; d++)
            t->checks[d] += f->checks[d];
        for (size_t r = 0; r < METRICS_NREPORTS; r++)
            t->reports[r] += f->reports[r];
        for (size_t k = 0; k < METRICS_NLOCAL_LEASE; k++)
            t->local_lease[k] += f->local_lease[k];
    }
    for (size_t i = 0; i < sizeof into->http / sizeof into->http[0]; i++)
        into->http[i] += from->http[i];
    for (size_t i = 0; i <= NBUCKETS; i++)
        into->latency[i] += from->latency[i];
    into->latency_sum_us += from->latency_sum_us;
    into->latency_count += from->latency_count;
    for (size_t i = 0; i <= NBATCH; i++)
        into->batch[i] += from->batch[i];
    into->batch_sum += from->batch_sum;
    into->batch_count += from->batch_count;
    for (size_t i = 0; i < METRICS_NCOUNTERS; i++)
        into->counters[i] += from->counters[i];
    for (size_t i = 0; i < 2; i++)
        into->reloads[i] += from->reloads[i];
    for (size_t l = 0; l < METRICS_TLS_LISTENERS; l++)
        for (size_t r = 0; r < METRICS_TLS_NRESULTS; r++)
            into->tls[l][r] += from->tls[l][r];
    for (size_t f = 0; f < METRICS_RLS_NFRONTS; f++)
        for (size_t c = 0; c < METRICS_RLS_NCODES; c++)
            into->rls_requests[f][c] += from->rls_requests[f][c];
    /* The sum takes every shard's series as they are: each shard is
     * capped, so the sum is too (by the number of workers). */
    for (size_t i = 0; i < from->nrls; i++) {
        const struct rls_series *f = &from->rls[i];
        struct rls_series *t = rls_find(into, f->domain, f->descriptor);
        if (!t)
            t = rls_add(into, f->domain, f->descriptor, f->detailed);
        for (size_t r = 0; r < METRICS_RLS_NRESULTS; r++)
            t->n[r] += f->n[r];
    }
    for (size_t i = 0; i < from->nnodes; i++) {
        const struct node_slot *f = &from->nodes[i];
        struct node_slot *t = node_slot(into, f->name);
        for (size_t c = 0; c < METRICS_NODE_NCOUNTERS; c++)
            t->n[c] += f->n[c];
        t->up_reports += f->up_reports;
        t->up_count += f->up_count;
    }
    pthread_mutex_unlock(&into->lock);
    pthread_mutex_unlock(&from->lock);
}

/* ------------------------------------------------------------- rendering */

struct buf {
    char *p;
    size_t len, cap;
};

__attribute__((format(printf, 2, 3))) static void put(struct buf *b, const char *fmt, ...)
{
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
        va_end(ap);
        if (n < 0)
            abort(); /* only on a bad format: a bug */
        if ((size_t)n < b->cap - b->len) {
            b->len += (size_t)n;
            return;
        }
        b->cap = 2 * b->cap + (size_t)n;
        b->p = xrealloc(b->p, b->cap);
    }
}

/* A label value with \, " and newline escaped, as the format requires. */
static void put_label_value(struct buf *b, const char *s)
{
    for (; *s; s++) {
        if (*s == '\\')
            put(b, "\\\\");
        else if (*s == '"')
            put(b, "\\\"");
        else if (*s == '\n')
            put(b, "\\n");
        else
            put(b, "%c", *s);
    }
}

/* Microseconds as exact decimal seconds: "0.00025", "1", "1700000000.5". */
#define SECONDS_BUF 32
static const char *seconds(int64_t us, char *out)
{
    uint64_t a = us < 0 ? -(uint64_t)us : (uint64_t)us;
    int n = snprintf(out, SECONDS_BUF, "%s%" PRIu64, us < 0 ? "-" : "", a / 1000000);
    if (a % 1000000) {
        snprintf(out + n, (size_t)(SECONDS_BUF - n), ".%06" PRIu64, a % 1000000);
        size_t end = strlen(out);
        while (out[end - 1] == '0')
            out[--end] = '\0';
    }
    return out;
}

static void put_family(struct buf *b, const char *name, const char *type, const char *help)
{
    put(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* A family of one unlabelled sample whose value is already text. */
static void put_scalar(struct buf *b, const char *name, const char *type, const char *help,
                       const char *value)
{
    put_family(b, name, type, help);
    put(b, "%s %s\n", name, value);
}

static void put_u64_scalar(struct buf *b, const char *name, const char *type, const char *help,
                           uint64_t v)
{
    char text[24];
    snprintf(text, sizeof text, "%" PRIu64, v);
    put_scalar(b, name, type, help, text);
}

static void put_checks(struct buf *b, const struct metrics *m)
{
    const char *name = PREFIX "checks_total";
    put_family(b, name, "counter",
               "Checks decided, by policy and decision (a request counts once per check).");
    for (size_t i = 0; i < m->npolicies; i++) {
        for (size_t d = 0; d < METRICS_NDECISIONS; d++) {
            put(b, "%s{policy=\"", name);
            put_label_value(b, m->policies[i].name);
            put(b, "\",decision=\"%s\"} %" PRIu64 "\n", decision_label[d],
                m->policies[i].checks[d]);
        }
    }
}

static void put_reports(struct buf *b, const struct metrics *m)
{
    const char *name = PREFIX "reports_total";
    put_family(b, name, "counter",
               "Checks of POST /report (usage charged after the answer), by policy and what "
               "became of the charge.");
    for (size_t i = 0; i < m->npolicies; i++) {
        for (size_t r = 0; r < METRICS_NREPORTS; r++) {
            put(b, "%s{policy=\"", name);
            put_label_value(b, m->policies[i].name);
            put(b, "\",result=\"%s\"} %" PRIu64 "\n", report_label[r], m->policies[i].reports[r]);
        }
    }
}

static void put_local_leases(struct buf *b, const struct metrics *m)
{
    static const struct {
        const char *name, *help;
    } info[METRICS_NLOCAL_LEASE] = {
        [METRICS_LOCAL_LEASES_TAKEN] = {PREFIX "local_leases_taken_total",
                                        "Blocks of units taken from Redis for a hot key, to "
                                        "decide its checks locally (lease:), by policy."},
        [METRICS_LOCAL_LEASE_LEASED] = {PREFIX "local_lease_units_leased_total",
                                        "Units taken in those blocks beyond the asking check's "
                                        "cost, by policy."},
        [METRICS_LOCAL_LEASE_RETURNED] = {PREFIX "local_lease_units_returned_total",
                                          "Unspent leased units given back to Redis, by policy."},
        [METRICS_LOCAL_LEASE_STRANDED] = {PREFIX "local_lease_units_stranded_total",
                                          "Unspent leased units not given back (window over, "
                                          "reset, Redis unreachable): under-admission, by "
                                          "policy."},
    };
    for (size_t k = 0; k < METRICS_NLOCAL_LEASE; k++) {
        put_family(b, info[k].name, "counter", info[k].help);
        for (size_t i = 0; i < m->npolicies; i++) {
            put(b, "%s{policy=\"", info[k].name);
            put_label_value(b, m->policies[i].name);
            put(b, "\"} %" PRIu64 "\n", m->policies[i].local_lease[k]);
        }
    }
}

static void put_http(struct buf *b, const struct metrics *m)
{
    const char *name = PREFIX "http_responses_total";
    put_family(b, name, "counter", "HTTP answers sent, by status code.");
    size_t k = 0;
    for (int status = STATUS_MIN; status <= STATUS_MAX; status++) {
        int known = k < NSTATUS && known_status[k] == status;
        k += (size_t)known;
        if (known || m->http[status - STATUS_MIN])
            put(b, "%s{status=\"%d\"} %" PRIu64 "\n", name, status, m->http[status - STATUS_MIN]);
    }
}

static void put_rls(struct buf *b, const struct metrics *m)
{
    const char *name = PREFIX "rls_requests_total";
    put_family(b, name, "counter",
               "Envoy rate limit service requests (gRPC ShouldRateLimit, POST /json), by front "
               "and answer.");
    for (size_t f = 0; f < METRICS_RLS_NFRONTS; f++)
        for (size_t c = 0; c < METRICS_RLS_NCODES; c++)
            put(b, "%s{front=\"%s\",code=\"%s\"} %" PRIu64 "\n", name, rls_front_label[f],
                rls_code_label[c], m->rls_requests[f][c]);
    name = PREFIX "rls_descriptors_total";
    put_family(b, name, "counter",
               "Descriptors of rate limit service requests, by domain, matched limit and result.");
    for (size_t i = 0; i < m->nrls; i++) {
        for (size_t r = 0; r < METRICS_RLS_NRESULTS; r++) {
            if (!m->rls[i].n[r])
                continue; /* most series see one or two results: keep the text short */
            put(b, "%s{domain=\"", name);
            put_label_value(b, m->rls[i].domain);
            put(b, "\",descriptor=\"");
            put_label_value(b, m->rls[i].descriptor);
            put(b, "\",result=\"%s\"} %" PRIu64 "\n", rls_result_label[r], m->rls[i].n[r]);
        }
    }
}

static void put_latency(struct buf *b, const struct metrics *m)
{
    const char *name = PREFIX "redis_request_duration_seconds";
    char text[SECONDS_BUF];
    uint64_t cumulative = 0;
    put_family(b, name, "histogram", "Round-trip time of Redis script calls.");
    for (size_t i = 0; i < NBUCKETS; i++) {
        cumulative += m->latency[i];
        put(b, "%s_bucket{le=\"%s\"} %" PRIu64 "\n", name, seconds(bucket_us[i], text), cumulative);
    }
    put(b, "%s_bucket{le=\"+Inf\"} %" PRIu64 "\n", name, m->latency_count);
    put(b, "%s_sum %s\n", name, seconds((int64_t)m->latency_sum_us, text));
    put(b, "%s_count %" PRIu64 "\n", name, m->latency_count);
}

static void put_batch(struct buf *b, const struct metrics *m)
{
    const char *name = PREFIX "redis_batch_size";
    uint64_t cumulative = 0;
    put_family(b, name, "histogram",
               "Requests per Redis call of the decision code (redis.batch bounds it).");
    for (size_t i = 0; i < NBATCH; i++) {
        cumulative += m->batch[i];
        put(b, "%s_bucket{le=\"%" PRIu64 "\"} %" PRIu64 "\n", name, batch_le[i], cumulative);
    }
    put(b, "%s_bucket{le=\"+Inf\"} %" PRIu64 "\n", name, m->batch_count);
    put(b, "%s_sum %" PRIu64 "\n", name, m->batch_sum);
    put(b, "%s_count %" PRIu64 "\n", name, m->batch_count);
}

static void put_node_label(struct buf *b, const char *name, const char *node)
{
    put(b, "%s{node=\"", name);
    put_label_value(b, node);
    put(b, "\"}");
}

static void put_nodes(struct buf *b, const struct metrics *m)
{
    const char *name = PREFIX "redis_node_up";
    put_family(b, name, "gauge",
               "1 when every worker's connection to the node is up with the code loaded.");
    for (size_t i = 0; i < m->nnodes; i++) {
        const struct node_slot *s = &m->nodes[i];
        put_node_label(b, name, s->name);
        put(b, " %d\n", s->up_reports && s->up_count == s->up_reports);
    }
    for (size_t c = 0; c < METRICS_NODE_NCOUNTERS; c++) {
        put_family(b, node_counter_info[c].name, "counter", node_counter_info[c].help);
        for (size_t i = 0; i < m->nnodes; i++) {
            put_node_label(b, node_counter_info[c].name, m->nodes[i].name);
            put(b, " %" PRIu64 "\n", m->nodes[i].n[c]);
        }
    }
}

static void put_reloads(struct buf *b, const struct metrics *m)
{
    const char *name = PREFIX "config_reloads_total";
    put_family(b, name, "counter", "Policy file reloads, by result.");
    put(b, "%s{result=\"success\"} %" PRIu64 "\n", name, m->reloads[1]);
    put(b, "%s{result=\"failure\"} %" PRIu64 "\n", name, m->reloads[0]);
}

/* The TLS series of the listeners that serve TLS now or have counted a
 * handshake (a counter never vanishes once it has a value). */
static void put_tls(struct buf *b, const struct metrics *m, const struct metrics_gauges *g)
{
    static const char *const listeners[METRICS_TLS_LISTENERS] = {"listen", "admin_listen",
                                                                 "grpc_listen"};
    static const char *const results[METRICS_TLS_NRESULTS] = {"ok", "client_certificate",
                                                              "protocol", "aborted"};
    const char *name = PREFIX "tls_handshakes_total";
    int shown[METRICS_TLS_LISTENERS], any = 0;
    for (size_t l = 0; l < METRICS_TLS_LISTENERS; l++) {
        shown[l] = g->tls_not_after[l] != 0;
        for (size_t r = 0; r < METRICS_TLS_NRESULTS; r++)
            shown[l] |= m->tls[l][r] != 0;
        any |= shown[l];
    }
    if (!any)
        return;
    put_family(b, name, "counter", "TLS handshakes ended, by listener and result.");
    for (size_t l = 0; l < METRICS_TLS_LISTENERS; l++)
        for (size_t r = 0; shown[l] && r < METRICS_TLS_NRESULTS; r++)
            put(b, "%s{listener=\"%s\",result=\"%s\"} %" PRIu64 "\n", name, listeners[l],
                results[r], m->tls[l][r]);
    name = PREFIX "tls_certificate_not_after_seconds";
    put_family(b, name, "gauge",
               "Unix time at which the listener's certificate expires (notAfter).");
    for (size_t l = 0; l < METRICS_TLS_LISTENERS; l++)
        if (g->tls_not_after[l] != 0)
            put(b, "%s{listener=\"%s\"} %" PRId64 "\n", name, listeners[l], g->tls_not_after[l]);
}

char *metrics_render(const struct metrics *m, const struct metrics_gauges *g)
{
    static const struct metrics_gauges zero;
    struct buf b = {.cap = 4096};
    char text[SECONDS_BUF];

    if (!g)
        g = &zero;
    b.p = xmalloc(b.cap);

    put_family(&b, PREFIX "build_info", "gauge",
               "Always 1; the labels name the build: version, commit, compiled features.");
    put(&b, PREFIX "build_info{version=\"");
    put_label_value(&b, g->version ? g->version : "");
    put(&b, "\",commit=\"");
    put_label_value(&b, g->commit ? g->commit : "");
    put(&b, "\",features=\"");
    put_label_value(&b, g->features ? g->features : "");
    put(&b, "\"} 1\n");

    put_checks(&b, m);
    put_reports(&b, m);
    put_u64_scalar(&b, PREFIX "checks_in_flight", "gauge", "Checks accepted and not yet answered.",
                   g->checks_in_flight);
    put_http(&b, m);
    put_rls(&b, m);
    /* Without Redis, its series would only say something false (up, or
     * down forever) or nothing at all (counters stuck at 0). */
    if (!g->no_redis) {
        put_u64_scalar(&b, PREFIX "redis_up", "gauge",
                       "1 when connected to Redis with the script loaded, else 0.",
                       g->redis_up ? 1 : 0);
        put_latency(&b, m);
        put_batch(&b, m);
        put_nodes(&b, m);
        put_local_leases(&b, m); /* Redis's blocks: none in memory */
    }
    for (size_t i = 0; i < METRICS_NCOUNTERS; i++)
        if (!(g->no_redis && counter_info[i].redis))
            put_u64_scalar(&b, counter_info[i].name, "counter", counter_info[i].help,
                           m->counters[i]);
    put_tls(&b, m, g);
    put_reloads(&b, m);
    put_scalar(&b, PREFIX "config_loaded_timestamp_seconds", "gauge",
               "Unix time of the last successful policy file load.",
               seconds(g->config_loaded_us, text));
    put_u64_scalar(&b, PREFIX "policies", "gauge", "Policies in the current policy file.",
                   g->policies);
    return b.p;
}
