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

/* Distinct policy label values kept before folding into "_other". */
#define METRICS_MAX_POLICIES 1024

/* The outcome of one check, the `decision` label of ratelimitd_checks_total. */
enum metrics_decision {
    METRICS_ALLOWED,       /* allowed by the backend (Redis, or memory) */
    METRICS_DENIED,        /* denied by the backend (or the deny cache) */
    METRICS_SHADOW_DENIED, /* a shadow policy would have denied */
    METRICS_DEGRADED,      /* the backend could not decide; failure_mode open allowed */
    METRICS_UNAVAILABLE,   /* the backend could not decide; failure_mode closed: 503 */
    METRICS_LOCAL,         /* Redis could not decide; decided in memory (failure_mode local) */
    METRICS_NDECISIONS
};

/* What became of one check of a report (POST /report), the `result` label
 * of ratelimitd_reports_total. */
enum metrics_report {
    METRICS_REPORT_RECORDED,     /* charged by the backend (Redis, or memory) */
    METRICS_REPORT_LOCAL,        /* Redis could not: charged in memory (failure_mode local) */
    METRICS_REPORT_NOT_RECORDED, /* Redis could not: answered 200 uncharged (open) */
    METRICS_REPORT_UNAVAILABLE,  /* Redis could not: answered 503 (closed) */
    METRICS_NREPORTS
};

/* The unlabelled counters, each a family of its own. */
enum metrics_counter {
    METRICS_REDIS_RECONNECTS,       /* ratelimitd_redis_reconnects_total */
    METRICS_REDIS_NOSCRIPT_RELOADS, /* ratelimitd_redis_noscript_reloads_total */
    METRICS_REDIS_TIMEOUTS,         /* ratelimitd_redis_timeouts_total */
    METRICS_REDIS_ERRORS,           /* ratelimitd_redis_errors_total */
    METRICS_DENY_CACHE_HITS,        /* ratelimitd_deny_cache_hits_total */
    METRICS_KEY_RESETS,             /* ratelimitd_key_resets_total */
    METRICS_GRPC_CONNECTIONS,       /* ratelimitd_grpc_connections_total */
    METRICS_GRPC_STREAMS,           /* ratelimitd_grpc_streams_total */
    METRICS_GRPC_PROTOCOL_ERRORS,   /* ratelimitd_grpc_protocol_errors_total */
    METRICS_LEASES_ACQUIRED,        /* ratelimitd_leases_acquired_total */
    METRICS_LEASES_RELEASED,        /* ratelimitd_leases_released_total */
    METRICS_LEASES_RENEWED,         /* ratelimitd_leases_renewed_total */
    METRICS_LEASES_EXPIRED,         /* ratelimitd_leases_expired_total */
    METRICS_NCOUNTERS
};

/* Envoy rate limit service answers (ratelimitd_rls_requests_total). */
enum metrics_rls_front { METRICS_RLS_GRPC, METRICS_RLS_JSON, METRICS_RLS_NFRONTS };
enum metrics_rls_code {
    METRICS_RLS_OK,
    METRICS_RLS_OVER_LIMIT,
    METRICS_RLS_UNAVAILABLE,
    METRICS_RLS_INVALID,
    METRICS_RLS_NCODES
};

/* What became of one descriptor (ratelimitd_rls_descriptors_total). */
enum metrics_rls_result {
    METRICS_RLS_DESC_OK,
    METRICS_RLS_DESC_OVER_LIMIT,
    METRICS_RLS_DESC_SHADOW_OVER_LIMIT,
    METRICS_RLS_DESC_UNLIMITED,
    METRICS_RLS_DESC_UNMATCHED,
    METRICS_RLS_NRESULTS
};

/* Distinct (domain, descriptor) series a shard keeps for detailed_metric
 * descriptors, whose label is the request's own values; past it they count
 * under descriptor="_other". Series named by the config are bounded by the
 * config, but all of them together are held to METRICS_MAX_RLS_SERIES
 * over the process's life (reloads may name new ones). */
#define METRICS_MAX_RLS_DETAILED 1000
#define METRICS_MAX_RLS_SERIES 10000

/* TLS handshakes on the daemon's listeners (ratelimitd_tls_handshakes_total),
 * by listener (enum tls_listener's order: listen, admin_listen,
 * grpc_listen) and result. */
#define METRICS_TLS_LISTENERS 3
enum metrics_tls_result {
    METRICS_TLS_OK,                 /* completed */
    METRICS_TLS_CLIENT_CERTIFICATE, /* failed: none given under require, or not verified */
    METRICS_TLS_PROTOCOL,           /* failed: anything else (version, cipher, garbage) */
    METRICS_TLS_ABORTED,            /* closed before it ended (by the client, or a timeout) */
    METRICS_TLS_NRESULTS
};

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

/* Local leases of hot keys (core/local_lease.h), by policy: one family
 * each, ratelimitd_local_lease..._total. */
enum metrics_local_lease {
    METRICS_LOCAL_LEASES_TAKEN,   /* ratelimitd_local_leases_taken_total */
    METRICS_LOCAL_LEASE_LEASED,   /* ratelimitd_local_lease_units_leased_total */
    METRICS_LOCAL_LEASE_RETURNED, /* ratelimitd_local_lease_units_returned_total */
    METRICS_LOCAL_LEASE_STRANDED, /* ratelimitd_local_lease_units_stranded_total */
    METRICS_NLOCAL_LEASE
};

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

/* Records one Redis round trip of us microseconds (negative counts as 0). */
void metrics_redis_latency(struct metrics *m, int64_t us);

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

/*
 * Per Redis node series, labelled node="host:port" (the node's target):
 * the nodes are those the policy file names or a cluster's slot map
 * reports, capped at METRICS_MAX_NODES over the process's life (the rest
 * fold into node="_other").
 */
#define METRICS_MAX_NODES 64
enum metrics_node_counter {
    METRICS_NODE_CALLS,      /* ratelimitd_redis_node_calls_total */
    METRICS_NODE_ERRORS,     /* ratelimitd_redis_node_errors_total */
    METRICS_NODE_RECONNECTS, /* ratelimitd_redis_node_reconnects_total */
    METRICS_NODE_MOVED,      /* ratelimitd_redis_node_moved_total */
    METRICS_NODE_ASK,        /* ratelimitd_redis_node_ask_total */
    METRICS_NODE_FAILOVERS,  /* ratelimitd_redis_node_failovers_total */
    METRICS_NODE_NCOUNTERS
};

/* Adds one to node's counter c (out of range: ignored). */
void metrics_node_count(struct metrics *m, const char *node, enum metrics_node_counter c);

/* This shard's connection to node is ready (1) or not (0). Rendered as
 * ratelimitd_redis_node_up{node}: 1 when every shard that has reported on
 * the node says ready. */
void metrics_node_up(struct metrics *m, const char *node, int up);

/* Adds every count of from into into (a worker's shard into the sum that
 * is rendered); takes both locks, from first. */
void metrics_add(struct metrics *into, struct metrics *from);

/*
 * The whole exposition as text (Content-Type: text/plain; version=0.0.4;
 * charset=utf-8). g may be NULL (gauges render as 0). The caller frees the
 * result with free(); never NULL.
 */
char *metrics_render(const struct metrics *m, const struct metrics_gauges *g);

#endif
