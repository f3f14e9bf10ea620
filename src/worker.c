/*
 * worker.c: one event loop's state (worker.h): its backend, local store,
 * metrics shard and HTTP front, made from the config snapshot it is given;
 * readiness, the metrics text and the end of a drain.
 */
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>

#include "backend_memory.h"
#include "backend_redis.h"
#include "http.h"
#include "limiter_local.h"
#include "metrics.h"
#include "notify.h"
#include "server.h"
#include "worker.h"

static void on_backend_state(void *arg, int ready)
{
    struct worker *w = arg;
    notify_state(w->srv->notify, w->srv);
}

int worker_init(struct worker *w, struct server *srv, unsigned id, struct event_base *base,
                char *err, size_t errlen)
{
    const struct config *cfg = srv->config;
    *w = (struct worker){.srv = srv, .id = id, .base = base, .log = &srv->log};
    w->config = config_ref(srv->config);
    w->metrics = metrics_new();
    for (size_t i = 0; i < cfg->npolicies; i++)
        metrics_policy_seen(w->metrics, cfg->policies[i].name);
    w->local = local_store_new((size_t)cfg->local_max_keys, srv->hash_seed);
    if (cfg->backend == BACKEND_KIND_MEMORY)
        w->backend = backend_memory_new(w->local);
    else
        w->backend = backend_redis_new(base, cfg->redis_url, w->log, w->metrics, err, errlen);
    if (!w->backend)
        return -1;
    backend_on_state(w->backend, on_backend_state, w);
    w->http = http_new(w, err, errlen);
    return w->http ? 0 : -1;
}

void worker_start(struct worker *w)
{
    w->backend->ops->start(w->backend);
}

void worker_set_config(struct worker *w, struct config *cfg)
{
    config_unref(w->config);
    w->config = config_ref(cfg); /* checks in flight keep their own reference */
    for (size_t i = 0; i < cfg->npolicies; i++)
        metrics_policy_seen(w->metrics, cfg->policies[i].name);
    http_apply_config(w->http, cfg);
}

void worker_drain(struct worker *w)
{
    w->draining = 1;
    http_drain(w->http);
    worker_maybe_idle(w);
}

void worker_fini(struct worker *w)
{
    /* The backend first: checks still waiting (after the drain's backstop)
     * complete as unavailable and are answered while their requests are
     * alive; http_free then closes the connections. */
    backend_free(w->backend);
    w->backend = NULL;
    http_free(w->http);
    w->http = NULL;
    local_store_free(w->local);
    w->local = NULL;
    metrics_free(w->metrics);
    w->metrics = NULL;
    config_unref(w->config);
    w->config = NULL;
}

const char *worker_unready_reason(const struct worker *w)
{
    if (w->draining)
        return "shutting_down";
    if (!server_ready(w->srv))
        return "redis_unavailable";
    return NULL;
}

char *worker_metrics_text(struct worker *w)
{
    const struct server *srv = w->srv;
    struct metrics_gauges g = {
        .version = PACKAGE_VERSION,
        .checks_in_flight = w->inflight,
        .redis_up = server_ready(srv),
        .config_loaded_us = srv->config_loaded_us,
        .policies = w->config->npolicies,
    };
    return metrics_render(w->metrics, &g);
}

void worker_maybe_idle(struct worker *w)
{
    if (w->draining && w->inflight == 0 && http_idle(w->http))
        event_base_loopexit(w->base, NULL);
}

int server_ready(const struct server *srv)
{
    for (size_t i = 0; i < srv->nworkers; i++)
        if (!srv->workers[i].backend || !backend_ready(srv->workers[i].backend))
            return 0;
    return srv->nworkers > 0;
}
