/* SPDX-License-Identifier: Apache-2.0 */
/*
 * metrics_types.h: the label values and caps of the daemon's metrics
 * (metrics.h): the enums callers count by and the bounds on every label.
 * Types only, so that metrics.h and the shards' shape
 * (metrics_internal.h) both read them without including each other.
 *
 * Owns these names and numbers; not the counting (metrics.c), not the
 * text (metrics_render.c).
 */
#ifndef RATELIMITD_METRICS_TYPES_H
#define RATELIMITD_METRICS_TYPES_H

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

/* Local leases of hot keys (core/local_lease.h), by policy: one family
 * each, ratelimitd_local_lease..._total. */
enum metrics_local_lease {
    METRICS_LOCAL_LEASES_TAKEN,   /* ratelimitd_local_leases_taken_total */
    METRICS_LOCAL_LEASE_LEASED,   /* ratelimitd_local_lease_units_leased_total */
    METRICS_LOCAL_LEASE_RETURNED, /* ratelimitd_local_lease_units_returned_total */
    METRICS_LOCAL_LEASE_STRANDED, /* ratelimitd_local_lease_units_stranded_total */
    METRICS_NLOCAL_LEASE
};

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

#endif
