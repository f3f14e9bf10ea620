/* SPDX-License-Identifier: Apache-2.0 */
/*
 * metrics_internal.h: what the two files of the metrics share, and nothing
 * else: the shape of a shard (struct metrics) and of its slots, and the
 * histograms' bucket bounds. Included only by src/core/metrics*.c;
 * everything outside them sees metrics.h alone.
 *
 *   metrics.c         the shards: made, recorded into, summed, freed
 *   metrics_render.c  a shard as Prometheus text: names, HELP, labels
 *
 * Owns these types and bounds; not the counting (metrics.c), not the
 * text (metrics_render.c).
 */
#ifndef RATELIMITD_METRICS_INTERNAL_H
#define RATELIMITD_METRICS_INTERNAL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "config/policy.h"
#include "core/metrics_types.h"

#define STATUS_MIN 100 /* http[] holds the statuses STATUS_MIN .. STATUS_MAX */
#define STATUS_MAX 599

/* Upper bounds (le) of the latency buckets, in µs: 100µs to 1s; then +Inf. */
#define NBUCKETS 13
extern const int64_t metrics_bucket_us[NBUCKETS];

/* Upper bounds (le) of the batch size buckets, in requests per Redis call
 * (redis.batch is at most CONFIG_REDIS_BATCH_MAX); then +Inf. */
#define NBATCH 11
extern const uint64_t metrics_batch_le[NBATCH];

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

/* One Redis node's series. up_reports counts the shards whose last word on
 * the node is summed here, up_count those of them that said ready. */
#define NODE_LABEL_MAX 300
struct node_slot {
    char name[NODE_LABEL_MAX];
    uint64_t n[METRICS_NODE_NCOUNTERS];
    uint64_t up_reports, up_count;
    uint64_t path_reports, by_module, by_functions; /* as up_*, per path */
    uint64_t latency_sum_us, latency_count;         /* its calls' round trips */
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

#endif
