/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_metrics.c: the Prometheus text rendered by metrics_render.c, exactly, for a
 * small scenario; label escaping; histogram buckets (boundaries,
 * cumulativity, sum); the cap on policy label values and "_other"; exact
 * decimal seconds.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/metrics.h"
#include "lib/util.h"
#include "tap.h"

/* The value of the sample whose line starts with series followed by a space
 * (e.g. `ratelimitd_policies` or `x_bucket{le="0.001"}`); -1 if absent, -2 if
 * present more than once. */
static long long sample(const char *text, const char *series)
{
    size_t n = strlen(series);
    long long v = -1;
    int seen = 0;
    for (const char *line = text; *line; line = strchr(line, '\n') + 1) {
        if (strncmp(line, series, n) == 0 && line[n] == ' ') {
            v = strtoll(line + n + 1, NULL, 10);
            seen++;
        }
        if (!strchr(line, '\n'))
            break;
    }
    return seen > 1 ? -2 : v;
}

/* The rest of the sample's line after "series ", in out; "" if absent. */
static const char *sample_text(const char *text, const char *series, char *out, size_t outlen)
{
    size_t n = strlen(series);
    out[0] = '\0';
    for (const char *line = text; line; line = strchr(line, '\n')) {
        if (*line == '\n')
            line++;
        if (strncmp(line, series, n) == 0 && line[n] == ' ') {
            size_t len = strcspn(line + n + 1, "\n");
            if (len >= outlen)
                len = outlen - 1;
            memcpy(out, line + n + 1, len);
            out[len] = '\0';
            break;
        }
    }
    return out;
}

static size_t count_substr(const char *text, const char *needle)
{
    size_t count = 0;
    for (const char *p = text; (p = strstr(p, needle)) != NULL; p += strlen(needle))
        count++;
    return count;
}

/* The scenario's exposition, one line each (newlines added when joined). */
static const char *const expected_scenario[] = {
    "# HELP ratelimitd_build_info Always 1; the labels name the build: version, commit, compiled "
    "features.",
    "# TYPE ratelimitd_build_info gauge",
    "ratelimitd_build_info{version=\"1.2.3\",commit=\"abc1234\",features=\"tls,grpc\"} 1",
    "# HELP ratelimitd_checks_total Checks decided, by policy and decision (a request "
    "counts once per check).",
    "# TYPE ratelimitd_checks_total counter",
    "ratelimitd_checks_total{policy=\"login\",decision=\"allowed\"} 2",
    "ratelimitd_checks_total{policy=\"login\",decision=\"denied\"} 1",
    "ratelimitd_checks_total{policy=\"login\",decision=\"shadow_denied\"} 0",
    "ratelimitd_checks_total{policy=\"login\",decision=\"degraded\"} 0",
    "ratelimitd_checks_total{policy=\"login\",decision=\"unavailable\"} 0",
    "ratelimitd_checks_total{policy=\"login\",decision=\"local\"} 0",
    "ratelimitd_checks_total{policy=\"api\",decision=\"allowed\"} 0",
    "ratelimitd_checks_total{policy=\"api\",decision=\"denied\"} 0",
    "ratelimitd_checks_total{policy=\"api\",decision=\"shadow_denied\"} 1",
    "ratelimitd_checks_total{policy=\"api\",decision=\"degraded\"} 1",
    "ratelimitd_checks_total{policy=\"api\",decision=\"unavailable\"} 0",
    "ratelimitd_checks_total{policy=\"api\",decision=\"local\"} 0",
    "# HELP ratelimitd_reports_total Checks of POST /report (usage charged after the answer), by "
    "policy and what became of the charge.",
    "# TYPE ratelimitd_reports_total counter",
    "ratelimitd_reports_total{policy=\"login\",result=\"recorded\"} 2",
    "ratelimitd_reports_total{policy=\"login\",result=\"local\"} 0",
    "ratelimitd_reports_total{policy=\"login\",result=\"not_recorded\"} 0",
    "ratelimitd_reports_total{policy=\"login\",result=\"unavailable\"} 0",
    "ratelimitd_reports_total{policy=\"api\",result=\"recorded\"} 0",
    "ratelimitd_reports_total{policy=\"api\",result=\"local\"} 0",
    "ratelimitd_reports_total{policy=\"api\",result=\"not_recorded\"} 1",
    "ratelimitd_reports_total{policy=\"api\",result=\"unavailable\"} 0",
    "# HELP ratelimitd_checks_in_flight Checks accepted and not yet answered.",
    "# TYPE ratelimitd_checks_in_flight gauge",
    "ratelimitd_checks_in_flight 3",
    "# HELP ratelimitd_http_responses_total HTTP answers sent, by status code.",
    "# TYPE ratelimitd_http_responses_total counter",
    "ratelimitd_http_responses_total{status=\"200\"} 2",
    "ratelimitd_http_responses_total{status=\"400\"} 0",
    "ratelimitd_http_responses_total{status=\"401\"} 0",
    "ratelimitd_http_responses_total{status=\"404\"} 0",
    "ratelimitd_http_responses_total{status=\"405\"} 0",
    "ratelimitd_http_responses_total{status=\"408\"} 0",
    "ratelimitd_http_responses_total{status=\"413\"} 0",
    "ratelimitd_http_responses_total{status=\"418\"} 1",
    "ratelimitd_http_responses_total{status=\"429\"} 1",
    "ratelimitd_http_responses_total{status=\"431\"} 0",
    "ratelimitd_http_responses_total{status=\"501\"} 0",
    "ratelimitd_http_responses_total{status=\"503\"} 0",
    "ratelimitd_http_responses_total{status=\"505\"} 0",
    "# HELP ratelimitd_rls_requests_total Envoy rate limit service requests (gRPC ShouldRateLimit, "
    "POST /json), by front and answer.",
    "# TYPE ratelimitd_rls_requests_total counter",
    "ratelimitd_rls_requests_total{front=\"grpc\",code=\"ok\"} 2",
    "ratelimitd_rls_requests_total{front=\"grpc\",code=\"over_limit\"} 0",
    "ratelimitd_rls_requests_total{front=\"grpc\",code=\"unavailable\"} 0",
    "ratelimitd_rls_requests_total{front=\"grpc\",code=\"invalid\"} 0",
    "ratelimitd_rls_requests_total{front=\"json\",code=\"ok\"} 0",
    "ratelimitd_rls_requests_total{front=\"json\",code=\"over_limit\"} 1",
    "ratelimitd_rls_requests_total{front=\"json\",code=\"unavailable\"} 0",
    "ratelimitd_rls_requests_total{front=\"json\",code=\"invalid\"} 1",
    "# HELP ratelimitd_rls_descriptors_total Descriptors of rate limit service requests, by "
    "domain, "
    "matched limit and result.",
    "# TYPE ratelimitd_rls_descriptors_total counter",
    "ratelimitd_rls_descriptors_total{domain=\"edge\",descriptor=\"path_/login\",result=\"ok\"} 2",
    "ratelimitd_rls_descriptors_total{domain=\"edge\",descriptor=\"path_/"
    "login\",result=\"over_limit\"} "
    "1",
    "ratelimitd_rls_descriptors_total{domain=\"edge\",descriptor=\"\",result=\"unmatched\"} 1",
    "ratelimitd_rls_descriptors_total{domain=\"\",descriptor=\"\",result=\"unmatched\"} 1",
    "ratelimitd_rls_descriptors_total{domain=\"edge\",descriptor=\"user_a__\",result=\"shadow_over_"
    "limit\"} 1",
    "ratelimitd_rls_descriptors_total{domain=\"edge\",descriptor=\"user_a_b\",result=\"shadow_over_"
    "limit\"} 1",
    "# HELP ratelimitd_redis_up 1 when connected to Redis with the script loaded, else 0.",
    "# TYPE ratelimitd_redis_up gauge",
    "ratelimitd_redis_up 1",
    "# HELP ratelimitd_redis_request_duration_seconds Round-trip time of Redis script calls.",
    "# TYPE ratelimitd_redis_request_duration_seconds histogram",
    "ratelimitd_redis_request_duration_seconds_bucket{le=\"0.0001\"} 2",
    "ratelimitd_redis_request_duration_seconds_bucket{le=\"0.00025\"} 3",
    "ratelimitd_redis_request_duration_seconds_bucket{le=\"0.0005\"} 3",
    "ratelimitd_redis_request_duration_seconds_bucket{le=\"0.001\"} 3",
    "ratelimitd_redis_request_duration_seconds_bucket{le=\"0.0025\"} 4",
    "ratelimitd_redis_request_duration_seconds_bucket{le=\"0.005\"} 4",
    "ratelimitd_redis_request_duration_seconds_bucket{le=\"0.01\"} 4",
    "ratelimitd_redis_request_duration_seconds_bucket{le=\"0.025\"} 4",
    "ratelimitd_redis_request_duration_seconds_bucket{le=\"0.05\"} 4",
    "ratelimitd_redis_request_duration_seconds_bucket{le=\"0.1\"} 4",
    "ratelimitd_redis_request_duration_seconds_bucket{le=\"0.25\"} 4",
    "ratelimitd_redis_request_duration_seconds_bucket{le=\"0.5\"} 4",
    "ratelimitd_redis_request_duration_seconds_bucket{le=\"1\"} 4",
    "ratelimitd_redis_request_duration_seconds_bucket{le=\"+Inf\"} 5",
    "ratelimitd_redis_request_duration_seconds_sum 2.002251",
    "ratelimitd_redis_request_duration_seconds_count 5",
    "# HELP ratelimitd_redis_batch_size Requests per Redis call of the decision code (redis.batch "
    "bounds it).",
    "# TYPE ratelimitd_redis_batch_size histogram",
    "ratelimitd_redis_batch_size_bucket{le=\"1\"} 1",
    "ratelimitd_redis_batch_size_bucket{le=\"2\"} 1",
    "ratelimitd_redis_batch_size_bucket{le=\"4\"} 2",
    "ratelimitd_redis_batch_size_bucket{le=\"8\"} 2",
    "ratelimitd_redis_batch_size_bucket{le=\"16\"} 2",
    "ratelimitd_redis_batch_size_bucket{le=\"32\"} 2",
    "ratelimitd_redis_batch_size_bucket{le=\"64\"} 3",
    "ratelimitd_redis_batch_size_bucket{le=\"128\"} 3",
    "ratelimitd_redis_batch_size_bucket{le=\"256\"} 3",
    "ratelimitd_redis_batch_size_bucket{le=\"512\"} 3",
    "ratelimitd_redis_batch_size_bucket{le=\"1024\"} 3",
    "ratelimitd_redis_batch_size_bucket{le=\"+Inf\"} 4",
    "ratelimitd_redis_batch_size_sum 2068",
    "ratelimitd_redis_batch_size_count 4",
    "# HELP ratelimitd_redis_node_up 1 when every worker's connection to the node is up with the "
    "code loaded.",
    "# TYPE ratelimitd_redis_node_up gauge",
    "# HELP ratelimitd_redis_decision_path 1 for the path that decides on the node (module: "
    "ratelimitd.check, functions: the Redis Functions) when every worker's connection to it takes "
    "that path.",
    "# TYPE ratelimitd_redis_decision_path gauge",
    "# HELP ratelimitd_redis_node_calls_total Decision calls sent, by node.",
    "# TYPE ratelimitd_redis_node_calls_total counter",
    "# HELP ratelimitd_redis_node_errors_total Error replies (other than redirects), by node.",
    "# TYPE ratelimitd_redis_node_errors_total counter",
    "# HELP ratelimitd_redis_node_reconnects_total Connections lost or dropped, by node.",
    "# TYPE ratelimitd_redis_node_reconnects_total counter",
    "# HELP ratelimitd_redis_node_moved_total MOVED redirects received, by the node that sent "
    "them.",
    "# TYPE ratelimitd_redis_node_moved_total counter",
    "# HELP ratelimitd_redis_node_ask_total ASK redirects received, by the node that sent them.",
    "# TYPE ratelimitd_redis_node_ask_total counter",
    "# HELP ratelimitd_redis_node_failovers_total Times the node became the master in place of "
    "another (Sentinel switch, Cluster slot map change), by the new master.",
    "# TYPE ratelimitd_redis_node_failovers_total counter",
    "# HELP ratelimitd_local_leases_taken_total Blocks of units taken from Redis for a hot key, to "
    "decide its checks locally (lease:), by policy.",
    "# TYPE ratelimitd_local_leases_taken_total counter",
    "ratelimitd_local_leases_taken_total{policy=\"login\"} 2",
    "ratelimitd_local_leases_taken_total{policy=\"api\"} 0",
    "# HELP ratelimitd_local_lease_units_leased_total Units taken in those blocks beyond the "
    "asking check's cost, by policy.",
    "# TYPE ratelimitd_local_lease_units_leased_total counter",
    "ratelimitd_local_lease_units_leased_total{policy=\"login\"} 500",
    "ratelimitd_local_lease_units_leased_total{policy=\"api\"} 0",
    "# HELP ratelimitd_local_lease_units_returned_total Unspent leased units given back to "
    "Redis, by policy.",
    "# TYPE ratelimitd_local_lease_units_returned_total counter",
    "ratelimitd_local_lease_units_returned_total{policy=\"login\"} 0",
    "ratelimitd_local_lease_units_returned_total{policy=\"api\"} 0",
    "# HELP ratelimitd_local_lease_units_stranded_total Unspent leased units not given back "
    "(window over, reset, Redis unreachable): under-admission, by policy.",
    "# TYPE ratelimitd_local_lease_units_stranded_total counter",
    "ratelimitd_local_lease_units_stranded_total{policy=\"login\"} 0",
    "ratelimitd_local_lease_units_stranded_total{policy=\"api\"} 7",
    "# HELP ratelimitd_redis_reconnects_total Redis connections lost or dropped, each followed by "
    "reconnecting.",
    "# TYPE ratelimitd_redis_reconnects_total counter",
    "ratelimitd_redis_reconnects_total 1",
    "# HELP ratelimitd_redis_noscript_reloads_total NOSCRIPT replies answered by "
    "reloading the script and retrying.",
    "# TYPE ratelimitd_redis_noscript_reloads_total counter",
    "ratelimitd_redis_noscript_reloads_total 0",
    "# HELP ratelimitd_redis_timeouts_total Checks answered at their deadline because "
    "Redis was late.",
    "# TYPE ratelimitd_redis_timeouts_total counter",
    "ratelimitd_redis_timeouts_total 0",
    "# HELP ratelimitd_redis_errors_total Error replies from Redis.",
    "# TYPE ratelimitd_redis_errors_total counter",
    "ratelimitd_redis_errors_total 2",
    "# HELP ratelimitd_deny_cache_hits_total Checks denied by the local deny cache, without "
    "asking Redis.",
    "# TYPE ratelimitd_deny_cache_hits_total counter",
    "ratelimitd_deny_cache_hits_total 3",
    "# HELP ratelimitd_key_resets_total Keys reset through the admin API (DELETE /v1/keys/...).",
    "# TYPE ratelimitd_key_resets_total counter",
    "ratelimitd_key_resets_total 1",
    "# HELP ratelimitd_grpc_connections_total HTTP/2 connections accepted on grpc_listen.",
    "# TYPE ratelimitd_grpc_connections_total counter",
    "ratelimitd_grpc_connections_total 0",
    "# HELP ratelimitd_grpc_streams_total HTTP/2 streams (gRPC calls) opened on grpc_listen.",
    "# TYPE ratelimitd_grpc_streams_total counter",
    "ratelimitd_grpc_streams_total 0",
    "# HELP ratelimitd_grpc_protocol_errors_total gRPC connections closed for an HTTP/2 "
    "protocol error or a flood (SETTINGS, PING, RST_STREAM).",
    "# TYPE ratelimitd_grpc_protocol_errors_total counter",
    "ratelimitd_grpc_protocol_errors_total 0",
    "# HELP ratelimitd_leases_acquired_total Concurrency leases this daemon handed out (allowed "
    "/check answers, one per concurrency tier).",
    "# TYPE ratelimitd_leases_acquired_total counter",
    "ratelimitd_leases_acquired_total 0",
    "# HELP ratelimitd_leases_released_total Leases freed by POST /release on this daemon.",
    "# TYPE ratelimitd_leases_released_total counter",
    "ratelimitd_leases_released_total 0",
    "# HELP ratelimitd_leases_renewed_total Leases extended by POST /renew on this daemon.",
    "# TYPE ratelimitd_leases_renewed_total counter",
    "ratelimitd_leases_renewed_total 0",
    "# HELP ratelimitd_leases_expired_total Leases that POST /release or /renew on this daemon "
    "found already expired.",
    "# TYPE ratelimitd_leases_expired_total counter",
    "ratelimitd_leases_expired_total 0",
    "# HELP ratelimitd_config_reloads_total Policy file reloads, by result.",
    "# TYPE ratelimitd_config_reloads_total counter",
    "ratelimitd_config_reloads_total{result=\"success\"} 1",
    "ratelimitd_config_reloads_total{result=\"failure\"} 1",
    "# HELP ratelimitd_config_loaded_timestamp_seconds Unix time of the last successful "
    "policy file load.",
    "# TYPE ratelimitd_config_loaded_timestamp_seconds gauge",
    "ratelimitd_config_loaded_timestamp_seconds 1700000000.25",
    "# HELP ratelimitd_policies Policies in the current policy file.",
    "# TYPE ratelimitd_policies gauge",
    "ratelimitd_policies 2",
};

static void test_scenario(void)
{
    struct metrics *m = metrics_new();
    metrics_policy_seen(m, "login");
    metrics_policy_seen(m, "api");
    metrics_policy_seen(m, "login"); /* a reload: no second series */
    metrics_check(m, "login", METRICS_ALLOWED);
    metrics_check(m, "login", METRICS_ALLOWED);
    metrics_check(m, "login", METRICS_DENIED);
    metrics_check(m, "api", METRICS_SHADOW_DENIED);
    metrics_check(m, "api", METRICS_DEGRADED);
    metrics_report(m, "login", METRICS_REPORT_RECORDED);
    metrics_report(m, "login", METRICS_REPORT_RECORDED);
    metrics_report(m, "api", METRICS_REPORT_NOT_RECORDED);
    metrics_report(m, "api", METRICS_NREPORTS); /* out of range: ignored */
    metrics_local_lease(m, "login", METRICS_LOCAL_LEASES_TAKEN, 2);
    metrics_local_lease(m, "login", METRICS_LOCAL_LEASE_LEASED, 500);
    metrics_local_lease(m, "api", METRICS_LOCAL_LEASE_STRANDED, 7);
    metrics_local_lease(m, "api", METRICS_NLOCAL_LEASE, 1); /* out of range: ignored */
    metrics_http_status(m, 200);
    metrics_http_status(m, 200);
    metrics_http_status(m, 429);
    metrics_http_status(m, 418);
    metrics_rls_request(m, METRICS_RLS_GRPC, METRICS_RLS_OK);
    metrics_rls_request(m, METRICS_RLS_GRPC, METRICS_RLS_OK);
    metrics_rls_request(m, METRICS_RLS_JSON, METRICS_RLS_OVER_LIMIT);
    metrics_rls_request(m, METRICS_RLS_JSON, METRICS_RLS_INVALID);
    metrics_rls_request(m, METRICS_RLS_NFRONTS, METRICS_RLS_OK); /* out of range: ignored */
    metrics_rls_descriptor(m, "edge", "path_/login", 11, 0, METRICS_RLS_DESC_OK);
    metrics_rls_descriptor(m, "edge", "path_/login", 11, 0, METRICS_RLS_DESC_OVER_LIMIT);
    metrics_rls_descriptor(m, "edge", "path_/login", 11, 0, METRICS_RLS_DESC_OK);
    metrics_rls_descriptor(m, "edge", "", 0, 0, METRICS_RLS_DESC_UNMATCHED);
    metrics_rls_descriptor(m, "", "", 0, 0, METRICS_RLS_DESC_UNMATCHED);
    /* a request's bytes: a newline and a non-ASCII byte become '_' */
    metrics_rls_descriptor(m, "edge", "user_a\n\xc3", 8, 1, METRICS_RLS_DESC_SHADOW_OVER_LIMIT);
    metrics_rls_descriptor(m, "edge", "user_a_b", 8, 1, METRICS_RLS_DESC_SHADOW_OVER_LIMIT);
    metrics_redis_latency(m, NULL, 50);      /* le 0.0001 */
    metrics_redis_latency(m, NULL, 100);     /* le 0.0001: the bound is inclusive */
    metrics_redis_latency(m, NULL, 101);     /* le 0.00025 */
    metrics_redis_latency(m, NULL, 2000);    /* le 0.0025 */
    metrics_redis_batch(m, 1);               /* le 1 */
    metrics_redis_batch(m, 3);               /* le 4 */
    metrics_redis_batch(m, 64);              /* le 64: the bound is inclusive */
    metrics_redis_batch(m, 2000);            /* +Inf */
    metrics_redis_latency(m, NULL, 2000000); /* +Inf only */
    metrics_count(m, METRICS_REDIS_RECONNECTS);
    metrics_count(m, METRICS_REDIS_ERRORS);
    metrics_count(m, METRICS_REDIS_ERRORS);
    for (int i = 0; i < 3; i++)
        metrics_count(m, METRICS_DENY_CACHE_HITS);
    metrics_count(m, METRICS_KEY_RESETS);
    metrics_reload(m, 1);
    metrics_reload(m, 0);

    struct metrics_gauges g = {.version = "1.2.3",
                               .commit = "abc1234",
                               .features = "tls,grpc",
                               .checks_in_flight = 3,
                               .redis_up = 7,
                               .config_loaded_us = 1700000000250000LL,
                               .policies = 2};
    char *text = metrics_render(m, &g);
    size_t n = sizeof expected_scenario / sizeof expected_scenario[0];
    size_t len = 0;
    for (size_t i = 0; i < n; i++)
        len += strlen(expected_scenario[i]) + 1;
    char *want = xmalloc(len + 1);
    want[0] = '\0';
    for (size_t i = 0; i < n; i++)
        strcat(strcat(want, expected_scenario[i]), "\n");
    is_str(text, want, "scenario: the exact exposition");
    if (strcmp(text, want) != 0) {
        printf("# ---- got:\n");
        for (const char *l = text; *l;) {
            size_t ln = strcspn(l, "\n");
            printf("# %.*s\n", (int)ln, l);
            l += ln + (l[ln] == '\n');
        }
    }
    free(want);
    free(text);
    metrics_free(m);
}

static void test_empty(void)
{
    struct metrics *m = metrics_new();
    char *text = metrics_render(m, NULL);

    /* build_info + checks + reports + in_flight + http + rls requests + rls
     * descriptors + redis_up + 2 histograms + 4 local lease families + 6 counters +
     * 3 grpc counters + reloads + timestamp + policies */
    is_int(count_substr(text, "# TYPE "), 38, "empty: 38 families");
    is_int(count_substr(text, "# HELP "), 38, "empty: 38 HELP lines");
    ok(strstr(text, "# TYPE ratelimitd_checks_total counter\n# HELP ratelimitd_http") == NULL &&
           strstr(text, "# TYPE ratelimitd_checks_total counter\n"
                        "# HELP ratelimitd_reports_total") != NULL &&
           strstr(text, "# TYPE ratelimitd_reports_total counter\n"
                        "# HELP ratelimitd_checks_in_flight") != NULL,
       "empty: checks_total and reports_total have no samples before a policy is seen");
    is_int(sample(text, "ratelimitd_build_info{version=\"\",commit=\"\",features=\"\"}"), 1,
           "empty: NULL version, commit and features are \"\"");
    is_int(sample(text, "ratelimitd_redis_timeouts_total"), 0, "empty: counters at 0");
    ok(strstr(text, "status=\"other\"") == NULL, "empty: no status=\"other\" series");
    ok(strstr(text, "status=\"403\"") == NULL,
       "empty: a status the config may choose has no series before its first answer");
    is_int(sample(text, "ratelimitd_redis_request_duration_seconds_count"), 0,
           "empty: histogram count 0");
    is_int(sample(text, "ratelimitd_redis_request_duration_seconds_bucket{le=\"+Inf\"}"), 0,
           "empty: +Inf bucket 0");
    char v[64];
    is_str(sample_text(text, "ratelimitd_redis_request_duration_seconds_sum", v, sizeof v), "0",
           "empty: histogram sum 0");
    is_str(sample_text(text, "ratelimitd_config_loaded_timestamp_seconds", v, sizeof v), "0",
           "empty: timestamp 0");
    ok(text[strlen(text) - 1] == '\n', "empty: the text ends with a newline");
    free(text);

    /* Out-of-range enums are ignored, not counted anywhere. */
    metrics_check(m, "login", (enum metrics_decision)METRICS_NDECISIONS);
    metrics_check(m, "login", (enum metrics_decision) - 1);
    metrics_count(m, (enum metrics_counter)METRICS_NCOUNTERS);
    metrics_count(m, (enum metrics_counter) - 1);
    text = metrics_render(m, NULL);
    ok(strstr(text, "policy=") == NULL, "bad decision: no policy series created");
    is_int(count_substr(text, " 1\n"), 1, "bad counter: nothing counted (only build_info is 1)");
    free(text);
    metrics_free(m);
    metrics_free(NULL);
    ok(1, "metrics_free(NULL) is a no-op");
}

static void test_escaping(void)
{
    static const struct {
        const char *raw, *escaped;
    } cases[] = {
        {"plain-1.0", "plain-1.0"},
        {"a\"b", "a\\\"b"},
        {"a\\b", "a\\\\b"},
        {"a\nb", "a\\nb"},
        {"\\n", "\\\\n"}, /* a backslash then n, not a newline */
        {"\"\\\n\"", "\\\"\\\\\\n\\\""},
        {"tab\tand\r", "tab\tand\r"}, /* only \, " and newline are escaped */
        {"", ""},
    };
    struct metrics *m = metrics_new();
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct metrics_gauges g = {
            .version = cases[i].raw, .commit = cases[i].raw, .features = cases[i].raw};
        char *text = metrics_render(m, &g);
        char want[256];
        snprintf(want, sizeof want,
                 "ratelimitd_build_info{version=\"%s\",commit=\"%s\",features=\"%s\"} 1\n",
                 cases[i].escaped, cases[i].escaped, cases[i].escaped);
        ok(strstr(text, want) != NULL, "escaping: label value case %zu", i);
        free(text);
    }

    /* Invalid policy names are never rendered, escaped or not: they fold. */
    metrics_check(m, "a\"b", METRICS_ALLOWED);
    metrics_check(m, "line\nbreak", METRICS_ALLOWED);
    char *text = metrics_render(m, NULL);
    is_int(sample(text, "ratelimitd_checks_total{policy=\"_other\",decision=\"allowed\"}"), 2,
           "escaping: names outside the policy grammar fold into _other");
    ok(strstr(text, "a\\\"b") == NULL && strstr(text, "break") == NULL,
       "escaping: no trace of the invalid names");
    free(text);
    metrics_free(m);
}

static void test_histogram(void)
{
    static const char *const le[] = {"0.0001", "0.00025", "0.0005", "0.001", "0.0025",
                                     "0.005",  "0.01",    "0.025",  "0.05",  "0.1",
                                     "0.25",   "0.5",     "1",      "+Inf"};
    static const int64_t bound[] = {100,   250,   500,    1000,   2500,   5000,   10000,
                                    25000, 50000, 100000, 250000, 500000, 1000000};
    const size_t nle = sizeof le / sizeof le[0];
    struct metrics *m = metrics_new();
    long long want[sizeof le / sizeof le[0]] = {0};
    uint64_t sum = 0, count = 0;

    /* Each bound, each bound + 1, and a few uneven repeats: bucket i gets
     * everything <= bound[i]. */
    for (size_t i = 0; i < nle - 1; i++) {
        for (size_t r = 0; r <= i % 3; r++) {
            metrics_redis_latency(m, NULL, bound[i]);
            metrics_redis_latency(m, NULL, bound[i] + 1);
            sum += (uint64_t)(2 * bound[i] + 1);
            count += 2;
            for (size_t j = i; j < nle; j++)
                want[j]++;
            for (size_t j = i + 1; j < nle; j++)
                want[j]++;
        }
    }
    metrics_redis_latency(m, NULL, -5); /* a clock step: counted as 0 */
    metrics_redis_latency(m, NULL, 0);
    metrics_redis_latency(m, NULL, INT64_C(3600000000)); /* an hour: +Inf only */
    sum += UINT64_C(3600000000);
    count += 3;
    for (size_t j = 0; j < nle; j++)
        want[j] += j == nle - 1 ? 3 : 2;

    char *text = metrics_render(m, NULL);
    long long prev = 0;
    int cumulative = 1, exact = 1;
    for (size_t i = 0; i < nle; i++) {
        char series[128];
        snprintf(series, sizeof series,
                 "ratelimitd_redis_request_duration_seconds_bucket{le=\"%s\"}", le[i]);
        long long v = sample(text, series);
        if (v < prev)
            cumulative = 0;
        if (v != want[i]) {
            exact = 0;
            printf("# bucket le=%s: got %lld, want %lld\n", le[i], v, want[i]);
        }
        prev = v;
    }
    ok(cumulative, "histogram: buckets are cumulative (never decrease)");
    ok(exact, "histogram: every bucket holds exactly the values <= its bound");
    is_int(sample(text, "ratelimitd_redis_request_duration_seconds_count"), count,
           "histogram: _count");
    is_int(sample(text, "ratelimitd_redis_request_duration_seconds_bucket{le=\"+Inf\"}"), count,
           "histogram: +Inf bucket equals _count");
    char got[64], want_sum[64];
    snprintf(want_sum, sizeof want_sum, "%llu.%06llu", (unsigned long long)(sum / 1000000),
             (unsigned long long)(sum % 1000000));
    while (want_sum[strlen(want_sum) - 1] == '0')
        want_sum[strlen(want_sum) - 1] = '\0';
    is_str(sample_text(text, "ratelimitd_redis_request_duration_seconds_sum", got, sizeof got),
           want_sum, "histogram: _sum in exact seconds");
    is_int(count_substr(text, "ratelimitd_redis_request_duration_seconds_bucket{"), nle,
           "histogram: 14 buckets");
    free(text);
    metrics_free(m);
}

static void test_seconds(void)
{
    static const struct {
        int64_t us;
        const char *text;
    } cases[] = {
        {0, "0"},
        {1, "0.000001"},
        {10, "0.00001"},
        {1500000, "1.5"},
        {1000000, "1"},
        {1700000000123456LL, "1700000000.123456"},
        {-1500000, "-1.5"},
        {INT64_MAX, "9223372036854.775807"},
        {INT64_MIN, "-9223372036854.775808"},
    };
    struct metrics *m = metrics_new();
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct metrics_gauges g = {.config_loaded_us = cases[i].us};
        char *text = metrics_render(m, &g);
        char got[64];
        is_str(sample_text(text, "ratelimitd_config_loaded_timestamp_seconds", got, sizeof got),
               cases[i].text, "seconds: %lld us", (long long)cases[i].us);
        free(text);
    }
    metrics_free(m);
}

static void test_policy_cap(void)
{
    struct metrics *m = metrics_new();
    char name[80], series[160];

    /* Many reloads, each with new names: only the first METRICS_MAX_POLICIES
     * get a series of their own. */
    for (int i = 0; i < METRICS_MAX_POLICIES + 500; i++) {
        snprintf(name, sizeof name, "p%d", i);
        metrics_policy_seen(m, name);
        metrics_check(m, name, METRICS_ALLOWED);
    }
    metrics_check(m, "p0", METRICS_DENIED); /* an old name keeps its own series */
    metrics_check(m, "p1023", METRICS_DENIED);
    metrics_check(m, "p1024", METRICS_DENIED);  /* past the cap */
    metrics_check(m, "_other", METRICS_DENIED); /* a policy really named _other */
    metrics_check(m, NULL, METRICS_LOCAL);
    metrics_check(m, "", METRICS_LOCAL);
    metrics_check(m, "sp ace", METRICS_LOCAL);
    memset(name, 'x', 65);
    name[65] = '\0';
    metrics_check(m, name, METRICS_LOCAL); /* 65 characters: too long */
    name[64] = '\0';
    metrics_check(m, name, METRICS_LOCAL); /* 64: valid, but past the cap */

    char *text = metrics_render(m, NULL);
    is_int(count_substr(text, "decision=\"allowed\"}"), METRICS_MAX_POLICIES + 1,
           "cap: %d policies plus _other", METRICS_MAX_POLICIES);
    is_int(sample(text, "ratelimitd_checks_total{policy=\"p0\",decision=\"allowed\"}"), 1,
           "cap: the first policy has its series");
    is_int(sample(text, "ratelimitd_checks_total{policy=\"p0\",decision=\"denied\"}"), 1,
           "cap: and keeps counting into it");
    is_int(sample(text, "ratelimitd_checks_total{policy=\"p1023\",decision=\"denied\"}"), 1,
           "cap: the last policy under the cap has its series");
    is_int(sample(text, "ratelimitd_checks_total{policy=\"p1024\",decision=\"allowed\"}"), -1,
           "cap: the first past the cap has none");
    is_int(sample(text, "ratelimitd_checks_total{policy=\"_other\",decision=\"allowed\"}"), 500,
           "cap: the 500 past the cap are counted under _other, once each");
    is_int(sample(text, "ratelimitd_checks_total{policy=\"_other\",decision=\"denied\"}"), 2,
           "cap: _other also holds a policy named _other (one series, not two)");
    is_int(sample(text, "ratelimitd_checks_total{policy=\"_other\",decision=\"local\"}"), 5,
           "cap: NULL, empty, bad and too long names fold into _other");
    ok(strstr(text, "xxxxxxxx") == NULL, "cap: the long names appear nowhere");
    free(text);
    metrics_free(m);

    /* Under the cap, "_other" for a bad name is just one more series. */
    m = metrics_new();
    metrics_policy_seen(m, "a");
    metrics_check(m, "bad name", METRICS_DENIED);
    metrics_policy_seen(m, "b");
    text = metrics_render(m, NULL);
    snprintf(series, sizeof series, "ratelimitd_checks_total{policy=\"%s\",decision=\"denied\"}",
             "_other");
    is_int(sample(text, series), 1, "under the cap: a bad name counts under _other");
    ok(strstr(text, "policy=\"a\"") < strstr(text, "policy=\"_other\"") &&
           strstr(text, "policy=\"_other\"") < strstr(text, "policy=\"b\""),
       "under the cap: series in order of first sight");
    free(text);
    metrics_free(m);
}

/* detailed_metric series are capped per shard; the rest fold into
 * descriptor="_other" of their domain; a sum of shards keeps them all. */
static void test_rls_cap(void)
{
    struct metrics *m = metrics_new();
    char name[32];
    for (int i = 0; i < METRICS_MAX_RLS_DETAILED + 5; i++) {
        int n = snprintf(name, sizeof name, "user_%d", i);
        metrics_rls_descriptor(m, "edge", name, (size_t)n, 1, METRICS_RLS_DESC_OK);
    }
    metrics_rls_descriptor(m, "edge", "path_/login", 11, 0, METRICS_RLS_DESC_OK);
    char *text = metrics_render(m, NULL);
    is_int(count_substr(text, "ratelimitd_rls_descriptors_total{"), METRICS_MAX_RLS_DETAILED + 2,
           "rls cap: the cap, _other and a config series");
    is_int(sample(text, "ratelimitd_rls_descriptors_total{domain=\"edge\",descriptor=\"_other\","
                        "result=\"ok\"}"),
           5, "rls cap: the 5 past the cap count under _other");
    is_int(sample(text, "ratelimitd_rls_descriptors_total{domain=\"edge\",descriptor=\"path_/"
                        "login\",result=\"ok\"}"),
           1, "rls cap: a config series is still counted past the detailed cap");
    free(text);
    struct metrics *sum = metrics_new();
    metrics_add(sum, m);
    metrics_add(sum, m);
    text = metrics_render(sum, NULL);
    is_int(sample(text, "ratelimitd_rls_descriptors_total{domain=\"edge\",descriptor=\"user_7\","
                        "result=\"ok\"}"),
           2, "rls sum: two shards add up");
    free(text);
    metrics_free(sum);
    metrics_free(m);
}

/* Per-node series: counted per node, up only when every shard says so,
 * capped with "_other". */
static void test_nodes(void)
{
    struct metrics *a = metrics_new(), *b = metrics_new();
    metrics_node_count(a, "127.0.0.1:7000", METRICS_NODE_CALLS);
    metrics_node_count(a, "127.0.0.1:7000", METRICS_NODE_CALLS);
    metrics_node_count(b, "127.0.0.1:7000", METRICS_NODE_MOVED);
    metrics_node_up(a, "127.0.0.1:7000", 1);
    metrics_node_up(b, "127.0.0.1:7000", 0);
    metrics_node_up(a, "[::1]:7001", 0);
    metrics_node_up(a, "[::1]:7001", 1); /* the last word counts */
    metrics_node_up(b, "[::1]:7001", 1);
    /* Paths: 7000's shards differ, 7001's both say module (the last
     * word), 7002 only the Functions, 7003 is not ready. */
    metrics_node_path(a, "127.0.0.1:7000", 1);
    metrics_node_path(b, "127.0.0.1:7000", 0);
    metrics_node_path(a, "[::1]:7001", 0);
    metrics_node_path(a, "[::1]:7001", 1);
    metrics_node_path(b, "[::1]:7001", 1);
    metrics_node_path(a, "127.0.0.1:7002", 0);
    metrics_node_path(a, "127.0.0.1:7003", -1);
    struct metrics *sum = metrics_new();
    metrics_add(sum, a);
    metrics_add(sum, b);
    char *text = metrics_render(sum, NULL);
    is_int(sample(text, "ratelimitd_redis_node_calls_total{node=\"127.0.0.1:7000\"}"), 2,
           "nodes: calls summed over shards");
    is_int(sample(text, "ratelimitd_redis_node_moved_total{node=\"127.0.0.1:7000\"}"), 1,
           "nodes: MOVED counted");
    is_int(sample(text, "ratelimitd_redis_node_ask_total{node=\"[::1]:7001\"}"), 0,
           "nodes: a node seen only by up has its counters at 0");
    is_int(sample(text, "ratelimitd_redis_node_up{node=\"127.0.0.1:7000\"}"), 0,
           "nodes: down when one shard's connection is down");
    is_int(sample(text, "ratelimitd_redis_node_up{node=\"[::1]:7001\"}"), 1,
           "nodes: up when every shard's is up");
    static const struct {
        const char *series;
        int want;
        const char *what;
    } paths[] = {
        {"{node=\"127.0.0.1:7000\",path=\"module\"}", 0, "shards differ: not module"},
        {"{node=\"127.0.0.1:7000\",path=\"functions\"}", 0, "shards differ: not functions"},
        {"{node=\"[::1]:7001\",path=\"module\"}", 1, "every shard's last word: module"},
        {"{node=\"[::1]:7001\",path=\"functions\"}", 0, "module: not functions"},
        {"{node=\"127.0.0.1:7002\",path=\"functions\"}", 1, "functions"},
        {"{node=\"127.0.0.1:7002\",path=\"module\"}", 0, "functions: not module"},
        {"{node=\"127.0.0.1:7003\",path=\"module\"}", 0, "not ready: not module"},
        {"{node=\"127.0.0.1:7003\",path=\"functions\"}", 0, "not ready: not functions"},
    };
    for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
        char series[128];
        snprintf(series, sizeof series, "ratelimitd_redis_decision_path%s", paths[i].series);
        is_int(sample(text, series), paths[i].want, "decision path: %s", paths[i].what);
    }
    free(text);
    metrics_free(sum);
    metrics_free(a);
    metrics_free(b);

    struct metrics *m = metrics_new();
    char name[32];
    for (int i = 0; i < METRICS_MAX_NODES + 10; i++) {
        snprintf(name, sizeof name, "10.0.0.1:%d", 7000 + i);
        metrics_node_count(m, name, METRICS_NODE_ERRORS);
    }
    text = metrics_render(m, NULL);
    is_int(count_substr(text, "ratelimitd_redis_node_errors_total{"), METRICS_MAX_NODES + 1,
           "nodes: capped, plus _other");
    is_int(sample(text, "ratelimitd_redis_node_errors_total{node=\"_other\"}"), 10,
           "nodes: the rest count under _other");
    free(text);
    metrics_free(m);
}

/* Each status under its own label (403 from deny_status, 501 for an
 * unknown method): never "other"; numbers that are no status are ignored. */
static void test_statuses(void)
{
    struct metrics *m = metrics_new();
    metrics_http_status(m, 403);
    metrics_http_status(m, 403);
    metrics_http_status(m, 501);
    metrics_http_status(m, 499);
    metrics_http_status(m, 0);
    metrics_http_status(m, 600);
    char *text = metrics_render(m, NULL);
    is_int(sample(text, "ratelimitd_http_responses_total{status=\"403\"}"), 2,
           "statuses: 403 under its own label");
    is_int(sample(text, "ratelimitd_http_responses_total{status=\"501\"}"), 1,
           "statuses: 501 under its own label");
    is_int(sample(text, "ratelimitd_http_responses_total{status=\"499\"}"), 1,
           "statuses: any deny_status under its own label");
    ok(strstr(text, "\"other\"") == NULL && strstr(text, "status=\"0\"") == NULL &&
           strstr(text, "status=\"600\"") == NULL,
       "statuses: no other, 0 or 600 series");
    ok(strstr(text, "status=\"403\"} 2\nratelimitd_http_responses_total{status=\"404\"}") != NULL,
       "statuses: rendered in numeric order");
    free(text);
    metrics_free(m);
}

/* backend: memory renders no Redis series. */
static void test_no_redis(void)
{
    struct metrics *m = metrics_new();
    metrics_redis_latency(m, NULL, 50);
    metrics_count(m, METRICS_REDIS_ERRORS);
    metrics_count(m, METRICS_KEY_RESETS);
    struct metrics_gauges g = {.no_redis = 1};
    char *text = metrics_render(m, &g);
    ok(strstr(text, "ratelimitd_redis") == NULL, "no_redis: no ratelimitd_redis_* series");
    is_int(sample(text, "ratelimitd_key_resets_total"), 1, "no_redis: the other counters remain");
    is_int(count_substr(text, "# TYPE "), 19,
           "no_redis: 19 families (37 less redis_up, 2 histograms, 7 per node, 4 local "
           "lease families, 4 counters)");
    free(text);
    metrics_free(m);
}

/* state_file's families: only with it set, with its counts as given. */
static void test_state_file(void)
{
    struct metrics *m = metrics_new();
    struct metrics_gauges g = {.no_redis = 1};
    char *text = metrics_render(m, &g);
    ok(strstr(text, "state_file") == NULL, "no state_file: no ratelimitd_state_file_* series");
    free(text);
    g = (struct metrics_gauges){.no_redis = 1,
                                .state_file = 1,
                                .state_writes_ok = 12,
                                .state_writes_failed = 2,
                                .state_last_write_us = 17250,
                                .state_last_write_bytes = 7162664};
    text = metrics_render(m, &g);
    ok(strstr(text, "# TYPE ratelimitd_state_file_writes_total counter\n"
                    "ratelimitd_state_file_writes_total{result=\"ok\"} 12\n"
                    "ratelimitd_state_file_writes_total{result=\"error\"} 2\n") != NULL,
       "state_file: writes by result");
    ok(strstr(text, "\nratelimitd_state_file_last_write_duration_seconds 0.01725\n") != NULL,
       "state_file: the last write's duration in seconds");
    is_int(sample(text, "ratelimitd_state_file_last_write_bytes"), 7162664,
           "state_file: the last write's size");
    free(text);
    metrics_free(m);
}

int main(void)
{
    test_statuses();
    test_no_redis();
    test_state_file();
    test_nodes();
    test_scenario();
    test_empty();
    test_escaping();
    test_histogram();
    test_seconds();
    test_policy_cap();
    test_rls_cap();
    return tap_done();
}
