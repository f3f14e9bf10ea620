/* SPDX-License-Identifier: Apache-2.0 */
/*
 * metrics_render.c: the shards' counters as the Prometheus text exposition
 * (format 0.0.4): every family's name, type and HELP, the label values
 * escaped, the histograms made cumulative. Owns the text; not the counting
 * (metrics.c), not serving it (http_routes.c, grpc.c), not the gauges
 * (passed in by the caller).
 *
 * Numbers are kept as integers (counts, microseconds) and rendered exactly
 * as decimals, so the text never depends on printf's float formatting.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/metrics.h"
#include "core/metrics_internal.h"
#include "lib/util.h"

#define PREFIX "ratelimitd_"

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

static const char *const rls_front_label[METRICS_RLS_NFRONTS] = {"grpc", "json"};
static const char *const rls_code_label[METRICS_RLS_NCODES] = {"ok", "over_limit", "unavailable",
                                                               "invalid"};
static const char *const rls_result_label[METRICS_RLS_NRESULTS] = {
    "ok", "over_limit", "shadow_over_limit", "unlimited", "unmatched"};

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
        put(b, "%s_bucket{le=\"%s\"} %" PRIu64 "\n", name, seconds(metrics_bucket_us[i], text),
            cumulative);
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
        put(b, "%s_bucket{le=\"%" PRIu64 "\"} %" PRIu64 "\n", name, metrics_batch_le[i],
            cumulative);
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
    name = PREFIX "redis_decision_path";
    put_family(b, name, "gauge",
               "1 for the path that decides on the node (module: ratelimitd.check, functions: "
               "the Redis Functions) when every worker's connection to it takes that path.");
    for (size_t i = 0; i < m->nnodes; i++) {
        const struct node_slot *s = &m->nodes[i];
        if (!s->path_reports)
            continue;
        put(b, "%s{node=\"", name);
        put_label_value(b, s->name);
        put(b, "\",path=\"module\"} %d\n", s->by_module == s->path_reports);
        put(b, "%s{node=\"", name);
        put_label_value(b, s->name);
        put(b, "\",path=\"functions\"} %d\n", s->by_functions == s->path_reports);
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

/* state_file's writes (memory_state.c), when it is set. */
static void put_state_file(struct buf *b, const struct metrics_gauges *g)
{
    char text[SECONDS_BUF];
    put_family(b, PREFIX "state_file_writes_total", "counter",
               "Writes of the state_file by result (periodic and at stop).");
    put(b, PREFIX "state_file_writes_total{result=\"ok\"} %" PRIu64 "\n", g->state_writes_ok);
    put(b, PREFIX "state_file_writes_total{result=\"error\"} %" PRIu64 "\n",
        g->state_writes_failed);
    put_scalar(b, PREFIX "state_file_last_write_duration_seconds", "gauge",
               "The last good write's duration, from the snapshot to the directory's fsync.",
               seconds(g->state_last_write_us, text));
    put_u64_scalar(b, PREFIX "state_file_last_write_bytes", "gauge",
                   "The size of the last state_file written.", g->state_last_write_bytes);
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
    if (g->state_file)
        put_state_file(&b, g);
    return b.p;
}
