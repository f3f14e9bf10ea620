/* SPDX-License-Identifier: Apache-2.0 */
/*
 * metrics.c: the counters behind /metrics (metrics.h). Owns the storage of
 * every counter and of the histograms, the bounded tables of label values
 * (policies, RLS series, nodes), and the sum of the shards. Does not own
 * the text exposition (metrics_render.c), serving it (http_routes.c),
 * reading clocks (callers pass microseconds) or any value that lives
 * elsewhere (the gauges, passed in at render time).
 */
#include <stdlib.h>
#include <string.h>

#include "config/policy.h"
#include "core/metrics.h"
#include "core/metrics_internal.h"
#include "lib/util.h"
#include <pthread.h>

#define OTHER_POLICY "_other"

const int64_t metrics_bucket_us[NBUCKETS] = {100,   250,   500,    1000,   2500,   5000,   10000,
                                             25000, 50000, 100000, 250000, 500000, 1000000};
const uint64_t metrics_batch_le[NBATCH] = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024};

#define RLS_LABEL_MAX 200

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
    (void)policy_slot(m, policy); /* made at zero: the slot itself is not needed */
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

void metrics_redis_batch(struct metrics *m, size_t n)
{
    size_t i = 0;
    while (i < NBATCH && n > metrics_batch_le[i])
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

void metrics_redis_latency(struct metrics *m, const char *node, int64_t us)
{
    if (us < 0)
        us = 0;
    size_t i = 0;
    while (i < NBUCKETS && us > metrics_bucket_us[i]) /* le: "less than or equal" */
        i++;
    pthread_mutex_lock(&m->lock);
    m->latency[i]++;
    m->latency_sum_us += (uint64_t)us;
    m->latency_count++;
    if (node) {
        struct node_slot *s = node_slot(m, node);
        s->latency_sum_us += (uint64_t)us;
        s->latency_count++;
    }
    pthread_mutex_unlock(&m->lock);
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

void metrics_node_path(struct metrics *m, const char *node, int module)
{
    pthread_mutex_lock(&m->lock);
    struct node_slot *s = node_slot(m, node);
    s->path_reports = 1;
    s->by_module = module == 1;
    s->by_functions = module == 0;
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
        t->path_reports += f->path_reports;
        t->by_module += f->by_module;
        t->by_functions += f->by_functions;
        t->latency_sum_us += f->latency_sum_us;
        t->latency_count += f->latency_count;
    }
    pthread_mutex_unlock(&into->lock);
    pthread_mutex_unlock(&from->lock);
}

void metrics_each_policy(const struct metrics *m, metrics_policy_fn *fn, void *arg)
{
    for (size_t i = 0; i < m->npolicies; i++)
        fn(arg, m->policies[i].name, m->policies[i].checks);
}

void metrics_each_node(const struct metrics *m, metrics_node_fn *fn, void *arg)
{
    for (size_t i = 0; i < m->nnodes; i++) {
        const struct node_slot *s = &m->nodes[i];
        struct metrics_node_view v = {
            .name = s->name,
            .up = s->up_reports == 0 ? -1 : s->up_count == s->up_reports,
            .path = s->path_reports == 0                 ? -1
                    : s->by_module == s->path_reports    ? 1
                    : s->by_functions == s->path_reports ? 0
                                                         : -1,
            .errors = s->n[METRICS_NODE_ERRORS],
            .latency_sum_us = s->latency_sum_us,
            .latency_count = s->latency_count,
        };
        fn(arg, &v);
    }
}
