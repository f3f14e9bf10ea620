/* SPDX-License-Identifier: Apache-2.0 */
/*
 * metrics.h: the daemon's Prometheus metrics: counters and a histogram
 * recorded as things happen, rendered on demand in the text exposition
 * format 0.0.4. Pure: no I/O, no clock, no libevent; the caller serves the
 * text and passes in the values that live elsewhere (struct metrics_gauges).
 *
 * One struct metrics per worker (a shard), recorded by that worker's thread
 * under the shard's own mutex, uncontended except while a scrape sums the
 * shards (metrics_add).
 * Everything stored is a plain sum (the histogram keeps per-bucket counts,
 * not cumulative ones), so summing workers at render time needs only an
 * "add b into a" later.
 *
 * Every label value is bounded by something the daemon owns, never by what
 * callers send: policy names come from the policy file and are capped at
 * METRICS_MAX_POLICIES distinct values over the process's life (the rest,
 * and any name that is not a valid policy name, fold into policy="_other");
 * statuses are HTTP statuses (100 to 599) the daemon itself chose.
 */
#ifndef RATELIMITD_METRICS_H
#define RATELIMITD_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "core/metrics_types.h"

/* Values that live elsewhere in the daemon, read at render time. */
struct metrics_gauges {
    const char *version;      /* ratelimitd_build_info{version}; NULL renders "" */
    const char *commit;       /* ...{commit}: git's short hash or "unknown"; NULL renders "" */
    const char *features;     /* ...{features}: "tls,grpc,systemd"; NULL renders "" */
    size_t checks_in_flight;  /* ratelimitd_checks_in_flight (server.inflight) */
    int redis_up;             /* ratelimitd_redis_up: nonzero renders 1 */
    int no_redis;             /* backend: memory: no ratelimitd_redis_* series at all */
    int64_t config_loaded_us; /* wall clock, µs since the epoch, of the last good load */
    size_t policies;          /* ratelimitd_policies: in the current config */
    /* ratelimitd_state_file_*: rendered only with state_file set */
    int state_file;
    uint64_t state_writes_ok, state_writes_failed;
    int64_t state_last_write_us;     /* the last good write's duration */
    uint64_t state_last_write_bytes; /* and its size */
    /* By listener: its certificate's notAfter (seconds since the epoch), or
     * 0 when it serves plain text. */
    int64_t tls_not_after[METRICS_TLS_LISTENERS];
};

struct metrics;

/* An empty set: every counter 0, no policy seen. Never NULL. */
struct metrics *metrics_new(void);

/* NULL is a no-op. */
void metrics_free(struct metrics *m);

/*
 * Makes a policy's ratelimitd_checks_total series exist (at 0) before its
 * first check; the daemon calls it for every configured policy on each
 * load. Series are never removed (a counter must not vanish or restart
 * while the process lives), which is why the number of names is capped.
 */
void metrics_policy_seen(struct metrics *m, const char *policy);

/* Counts one check of policy with decision d (out of range: ignored). */
void metrics_check(struct metrics *m, const char *policy, enum metrics_decision d);

/* Counts one check of a report of policy with result r (out of range:
 * ignored); its series exist from metrics_policy_seen on, as checks'. */
void metrics_report(struct metrics *m, const char *policy, enum metrics_report r);

/* Adds n to policy's local lease counter k (out of range: ignored). */
void metrics_local_lease(struct metrics *m, const char *policy, enum metrics_local_lease k,
                         uint64_t n);

/* Counts one rate limit service request by front and answer (out of
 * range: ignored). */
void metrics_rls_request(struct metrics *m, enum metrics_rls_front f, enum metrics_rls_code c);

/* Counts one descriptor of a rate limit service request. domain and
 * descriptor are label values ("" allowed); descriptor is len bytes of any
 * content (bytes outside printable ASCII are rendered as '_'; cut at 200).
 * detailed: descriptor comes from the request, not the config (capped at
 * METRICS_MAX_RLS_DETAILED distinct series). */
void metrics_rls_descriptor(struct metrics *m, const char *domain, const char *descriptor,
                            size_t len, int detailed, enum metrics_rls_result r);

/* Counts one HTTP answer under its own status label (a number outside
 * 100..599, which no answer carries, is ignored). */
void metrics_http_status(struct metrics *m, int status);

/* Records one Redis round trip of us microseconds (negative counts as 0),
 * also under node's own sums when node is not NULL (the status page's
 * latency per node). */
void metrics_redis_latency(struct metrics *m, const char *node, int64_t us);

/* Records one Redis call of the decision code carrying n requests (a
 * batch, redis.batch; 1 when sent alone). */
void metrics_redis_batch(struct metrics *m, size_t n);

/* Adds one to counter c (out of range: ignored). */
void metrics_count(struct metrics *m, enum metrics_counter c);

/* Adds n to counter c (out of range: ignored). */
void metrics_count_n(struct metrics *m, enum metrics_counter c, uint64_t n);

/* Counts one TLS handshake's end on a listener (out of range: ignored). */
void metrics_tls_handshake(struct metrics *m, unsigned listener, enum metrics_tls_result r);

/* Counts one config reload: ok nonzero for success, 0 for failure. */
void metrics_reload(struct metrics *m, int ok);

/* Adds one to node's counter c (out of range: ignored). */
void metrics_node_count(struct metrics *m, const char *node, enum metrics_node_counter c);

/* This shard's connection to node is ready (1) or not (0). Rendered as
 * ratelimitd_redis_node_up{node}: 1 when every shard that has reported on
 * the node says ready. */
void metrics_node_up(struct metrics *m, const char *node, int up);

/* What decides on node through this shard's connection: 1 the module
 * (ratelimitd.check), 0 the Functions, -1 nothing (not ready). Rendered as
 * ratelimitd_redis_decision_path{node,path="module"|"functions"}: 1 when
 * every shard that has reported on the node says that path. */
void metrics_node_path(struct metrics *m, const char *node, int module);

/* Adds every count of from into into (a worker's shard into the sum that
 * is rendered); takes both locks, from first. */
void metrics_add(struct metrics *into, struct metrics *from);

/* What the status page (status.c) reads of a sum that its caller owns
 * (metrics_add into a fresh set): no lock is taken. */
typedef void metrics_policy_fn(void *arg, const char *policy,
                               const uint64_t checks[METRICS_NDECISIONS]);
void metrics_each_policy(const struct metrics *m, metrics_policy_fn *fn, void *arg);

struct metrics_node_view {
    const char *name; /* host:port or a unix path, as the node label */
    int up;           /* 1 every shard's connection is ready, 0 not, -1 no word yet */
    int path;         /* 1 the module, 0 the Functions, -1 neither (or mixed) */
    uint64_t errors;  /* ratelimitd_redis_node_errors_total */
    uint64_t latency_sum_us, latency_count; /* the round trips of every call */
};
typedef void metrics_node_fn(void *arg, const struct metrics_node_view *n);
void metrics_each_node(const struct metrics *m, metrics_node_fn *fn, void *arg);

/*
 * The whole exposition as text (metrics_render.c; Content-Type: text/plain; version=0.0.4;
 * charset=utf-8). g may be NULL (gauges render as 0). The caller frees the
 * result with free(); never NULL.
 */
char *metrics_render(const struct metrics *m, const struct metrics_gauges *g);

#endif
