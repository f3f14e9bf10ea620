/* SPDX-License-Identifier: Apache-2.0 */
/*
 * status.c: the process's history for the status page (status.h). The
 * sample is taken on the main loop; requests read it from any worker's
 * thread under the one lock, which the decision path never takes.
 *
 * A node's latency is the mean round trip of this daemon's calls to it
 * over the last second that had any (every worker's connections to it),
 * not a probe of its own: an idle daemon keeps the last figure.
 */
#include <event2/event.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "build_info.h"
#include "config/config.h"
#include "core/metrics.h"
#include "core/overrides.h"
#include "core/rates.h"
#include "lib/json_out.h"
#include "lib/util.h"
#include "status.h"

#define STATUS_TICK_US 1000000

struct reload_entry {
    int64_t at_us;
    int ok;
    char error[RL_ERRLEN * 2];
};

#define STATUS_NODE_NAME_MAX 300 /* as the metrics' node labels */

struct node_latency {
    char name[STATUS_NODE_NAME_MAX];
    uint64_t sum_us, count; /* the totals at the last sample */
    int64_t last_us;        /* the mean of the last second with calls; -1: none */
};

struct status {
    status_sum_fn *sum;
    void *sum_arg;
    struct event *tick;
    int64_t started_us, started_mono_us;
    struct rates *rates;
    pthread_mutex_t lock; /* the fields below */
    struct reload_entry reloads[STATUS_RELOADS];
    size_t nreloads; /* ever: the newest is reloads[(nreloads - 1) % STATUS_RELOADS] */
    struct reload_entry last_error;
    struct node_latency nodes[METRICS_MAX_NODES + 1];
    size_t nnodes;
};

struct sample {
    struct status *st;
    int64_t sec;
};

/* What was let through counts as allowed: shadow denials and failure_mode
 * open's passes. A failure_mode local decision counts as allowed too: the
 * metrics count it as local, allowed or not, and a Redis outage should not
 * read as a drop to nothing. */
static void sample_policy(void *arg, const char *policy, const uint64_t checks[METRICS_NDECISIONS])
{
    const struct sample *s = arg;
    uint64_t allowed = checks[METRICS_ALLOWED] + checks[METRICS_SHADOW_DENIED] +
                       checks[METRICS_DEGRADED] + checks[METRICS_LOCAL];
    rates_record(s->st->rates, s->sec, policy, allowed, checks[METRICS_DENIED]);
}

static struct node_latency *node_of(struct status *st, const char *name)
{
    for (size_t i = 0; i < st->nnodes; i++)
        if (strcmp(st->nodes[i].name, name) == 0)
            return &st->nodes[i];
    if (st->nnodes == sizeof st->nodes / sizeof st->nodes[0] ||
        strlen(name) >= STATUS_NODE_NAME_MAX)
        return NULL;
    struct node_latency *n = &st->nodes[st->nnodes++];
    memset(n, 0, sizeof *n);
    strcpy(n->name, name); /* fits: checked above */
    n->last_us = -1;
    return n;
}

static void sample_node(void *arg, const struct metrics_node_view *v)
{
    struct status *st = arg;
    struct node_latency *n = node_of(st, v->name);
    if (!n)
        return;
    if (v->latency_count > n->count)
        n->last_us = (int64_t)((v->latency_sum_us - n->sum_us) / (v->latency_count - n->count));
    n->sum_us = v->latency_sum_us;
    n->count = v->latency_count;
}

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what;
    struct status *st = arg;
    struct metrics *sum = st->sum(st->sum_arg);
    struct sample s = {st, util_realtime_us() / 1000000};
    metrics_each_policy(sum, sample_policy, &s);
    pthread_mutex_lock(&st->lock);
    metrics_each_node(sum, sample_node, st);
    pthread_mutex_unlock(&st->lock);
    metrics_free(sum);
}

struct status *status_new(struct event_base *base, status_sum_fn *sum, void *arg, char *err,
                          size_t errlen)
{
    struct status *st = xcalloc(1, sizeof *st);
    st->sum = sum;
    st->sum_arg = arg;
    st->started_us = util_realtime_us();
    st->started_mono_us = util_monotonic_us();
    st->rates = rates_new();
    pthread_mutex_init(&st->lock, NULL);
    st->tick = event_new(base, -1, EV_PERSIST, on_tick, st);
    struct timeval tv = {STATUS_TICK_US / 1000000, STATUS_TICK_US % 1000000};
    if (!st->tick || event_add(st->tick, &tv) < 0) {
        snprintf(err, errlen, "cannot make the status page's timer");
        status_free(st);
        return NULL;
    }
    return st;
}

void status_free(struct status *st)
{
    if (!st)
        return;
    if (st->tick)
        event_free(st->tick);
    rates_free(st->rates);
    pthread_mutex_destroy(&st->lock);
    free(st);
}

void status_reload(struct status *st, int ok, const char *error)
{
    pthread_mutex_lock(&st->lock);
    struct reload_entry *e = &st->reloads[st->nreloads++ % STATUS_RELOADS];
    e->at_us = util_realtime_us();
    e->ok = ok;
    snprintf(e->error, sizeof e->error, "%s", ok || !error ? "" : error);
    if (!ok)
        st->last_error = *e;
    pthread_mutex_unlock(&st->lock);
}

static void tier_json(struct json_out *j, const struct tier *t)
{
    char d[UTIL_DURATION_BUF];
    json_out_begin(j, '{');
    json_out_lkey(j, "name");
    json_out_cstr(j, t->name);
    json_out_lkey(j, "algorithm");
    json_out_cstr(j, policy_algorithm_name(t->algorithm));
    json_out_lkey(j, "limit");
    json_out_int(j, t->limit);
    /* A concurrency tier counts leases held, over no window. */
    json_out_lkey(j, "window");
    if (t->window_us > 0)
        json_out_cstr(j, util_format_duration(t->window_us, d, sizeof d));
    else
        json_out_null(j);
    if (t->burst > 0) {
        json_out_lkey(j, "burst");
        json_out_int(j, t->burst);
    }
    json_out_end(j, '}');
}

static void policies_json(struct json_out *j, struct overrides *ov, const struct config *cfg)
{
    int64_t now = util_realtime_us();
    json_out_lkey(j, "policies");
    json_out_begin(j, '[');
    for (size_t i = 0; i < cfg->npolicies; i++) {
        const struct policy *p = &cfg->policies[i];
        json_out_begin(j, '{');
        json_out_lkey(j, "name");
        json_out_cstr(j, p->name);
        json_out_lkey(j, "tiers");
        json_out_begin(j, '[');
        for (size_t t = 0; t < p->ntiers; t++)
            tier_json(j, &p->tiers[t]);
        json_out_end(j, ']');
        json_out_lkey(j, "overrides");
        json_out_int(j, (int64_t)overrides_policy_count(ov, p->name, now));
        json_out_end(j, '}');
    }
    json_out_end(j, ']');
}

struct nodes_out {
    struct status *st;
    struct json_out *j;
};

/* Under st->lock. The daemon sends its decisions to primaries only. */
static void node_json(void *arg, const struct metrics_node_view *v)
{
    struct nodes_out *o = arg;
    struct json_out *j = o->j;
    const struct node_latency *n = node_of(o->st, v->name);
    json_out_begin(j, '{');
    json_out_lkey(j, "address");
    json_out_cstr(j, v->name);
    json_out_lkey(j, "role");
    json_out_cstr(j, "primary");
    json_out_lkey(j, "connected");
    json_out_bool(j, v->up == 1);
    json_out_lkey(j, "path");
    if (v->path < 0)
        json_out_null(j);
    else
        json_out_cstr(j, v->path ? "module" : "functions");
    json_out_lkey(j, "latency_ms");
    if (n && n->last_us >= 0)
        json_out_thousandths(j, n->last_us);
    else
        json_out_null(j);
    json_out_lkey(j, "errors");
    json_out_int(j, (int64_t)v->errors);
    json_out_end(j, '}');
}

static void backend_json(struct json_out *j, struct status *st, const struct config *cfg)
{
    json_out_lkey(j, "backend");
    json_out_begin(j, '{');
    json_out_lkey(j, "kind");
    json_out_cstr(j, cfg->backend == BACKEND_KIND_MEMORY ? "memory" : "redis");
    json_out_lkey(j, "nodes");
    json_out_begin(j, '[');
    struct metrics *sum = st->sum(st->sum_arg);
    struct nodes_out o = {st, j};
    pthread_mutex_lock(&st->lock);
    metrics_each_node(sum, node_json, &o);
    pthread_mutex_unlock(&st->lock);
    metrics_free(sum);
    json_out_end(j, ']');
    json_out_end(j, '}');
}

/* A reload {"at","ok","error"}; the last configuration error is one
 * without "ok" (with_ok 0): it is never ok. */
static void reload_json(struct json_out *j, const struct reload_entry *e, int with_ok)
{
    char at[UTIL_RFC3339_BUF];
    json_out_begin(j, '{');
    json_out_lkey(j, "at");
    json_out_cstr(j, util_format_rfc3339(e->at_us, at));
    if (with_ok) {
        json_out_lkey(j, "ok");
        json_out_bool(j, e->ok);
    }
    json_out_lkey(j, "error");
    if (e->ok)
        json_out_null(j);
    else
        json_out_cstr(j, e->error);
    json_out_end(j, '}');
}

/* Newest first; under st->lock. */
static void history_json(struct json_out *j, const struct status *st)
{
    json_out_lkey(j, "reloads");
    json_out_begin(j, '[');
    size_t n = st->nreloads < STATUS_RELOADS ? st->nreloads : STATUS_RELOADS;
    for (size_t k = 0; k < n; k++)
        reload_json(j, &st->reloads[(st->nreloads - 1 - k) % STATUS_RELOADS], 1);
    json_out_end(j, ']');
    json_out_lkey(j, "last_config_error");
    if (st->last_error.at_us)
        reload_json(j, &st->last_error, 0);
    else
        json_out_null(j);
}

void status_json(struct status *st, const struct config *cfg, struct overrides *ov, struct buf *out)
{
    char at[UTIL_RFC3339_BUF];
    struct json_out j = json_out_start(out);
    json_out_begin(&j, '{');
    json_out_lkey(&j, "version");
    json_out_cstr(&j, PACKAGE_VERSION);
    json_out_lkey(&j, "commit");
    json_out_cstr(&j, RATELIMITD_COMMIT);
    json_out_lkey(&j, "started_at");
    json_out_cstr(&j, util_format_rfc3339(st->started_us, at));
    json_out_lkey(&j, "uptime_s");
    json_out_int(&j, (util_monotonic_us() - st->started_mono_us) / 1000000);
    policies_json(&j, ov, cfg);
    backend_json(&j, st, cfg);
    pthread_mutex_lock(&st->lock);
    history_json(&j, st);
    pthread_mutex_unlock(&st->lock);
    json_out_end(&j, '}');
}

void status_rates_json(struct status *st, const struct config *cfg, int seconds, struct buf *out)
{
    rates_json(st->rates, cfg, seconds, out);
}
