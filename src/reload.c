/*
 * reload.c: a policy reload, all or nothing. Owns the rule of which fields a
 * reload may change (policies, redis.timeout, key_prefix, clock, max_body,
 * idle_timeout, request_timeout, max_connections, max_inflight, overload,
 * log_level, access_log, auth_token_file, grpc_max_streams, domains,
 * envoy_config and the envoy directory's files) and which need a restart
 * (listen, admin_listen, grpc_listen, listen_mode, listen_group, redis.url,
 * redis.tls.*, redis.sentinel.*, redis.cluster, watch, local_max_keys,
 * backend, workers).
 */
#include <stdio.h>
#include <string.h>

#include "core/metrics.h"
#include "notify.h"
#include "reload.h"
#include "watch.h"
#include "worker.h"

static int differ(const char *a, const char *b)
{
    return (a == NULL) != (b == NULL) || (a && strcmp(a, b) != 0);
}

static int differ_lists(char *const *a, size_t na, char *const *b, size_t nb)
{
    if (na != nb)
        return 1;
    for (size_t i = 0; i < na; i++)
        if (strcmp(a[i], b[i]) != 0)
            return 1;
    return 0;
}

/* The redis.tls, redis.sentinel or redis.cluster field that changed, or
 * NULL. The backend's connections, their TLS context (the files are read
 * when it is made) and its discovery are built once, at start. */
static const char *redis_mode_field(const struct config *old, const struct config *new)
{
    const struct redis_tls_config *ot = &old->redis_tls, *nt = &new->redis_tls;
    const struct redis_sentinel_config *os = &old->redis_sentinel, *ns = &new->redis_sentinel;

    if (differ(ot->ca_file, nt->ca_file))
        return "redis.tls.ca_file";
    if (differ(ot->cert_file, nt->cert_file))
        return "redis.tls.cert_file";
    if (differ(ot->key_file, nt->key_file))
        return "redis.tls.key_file";
    if (differ(ot->server_name, nt->server_name))
        return "redis.tls.server_name";
    if (ot->verify != nt->verify)
        return "redis.tls.verify";
    if (differ_lists(os->addresses, os->naddresses, ns->addresses, ns->naddresses))
        return "redis.sentinel.addresses";
    if (differ(os->master_name, ns->master_name))
        return "redis.sentinel.master_name";
    if (differ(os->password, ns->password))
        return "redis.sentinel.password";
    if (differ_lists(old->redis_cluster, old->redis_ncluster, new->redis_cluster,
                     new->redis_ncluster))
        return "redis.cluster";
    return NULL;
}

/* The first field whose change needs a restart, or NULL: a reload that
 * changes one is refused as a whole, so the running state always matches
 * one file. */
static const char *restart_field(const struct config *old, const struct config *new)
{
    if (differ(old->listen, new->listen))
        return "listen";
    if (differ(old->admin_listen, new->admin_listen))
        return "admin_listen";
    if (differ(old->grpc_listen, new->grpc_listen))
        return "grpc_listen";
    /* Applied to the socket files when they are made, at start. */
    if (old->listen_mode != new->listen_mode)
        return "listen_mode";
    if (old->listen_gid != new->listen_gid)
        return "listen_group";
    if (differ(old->redis_url, new->redis_url))
        return "redis.url";
    const char *redis = redis_mode_field(old, new);
    if (redis)
        return redis;
    if (old->watch != new->watch)
        return "watch";
    if (old->local_max_keys != new->local_max_keys)
        return "local_max_keys";
    if (old->backend != new->backend)
        return "backend";
    if (old->workers != new->workers)
        return "workers";
    return NULL;
}

int reload_config(struct server *srv, const char *trigger)
{
    char err[RL_ERRLEN * 2];
    notify_reloading(srv->notify);
    struct config *c = config_load_envoy(srv->config_path, srv->envoy_config_cli, err, sizeof err);
    if (!c) {
        log_event(&srv->log, LOG_LVL_ERROR, "reload failed, keeping the old policies", "trigger",
                  trigger, "error", err, NULL);
        notify_state(srv->notify, srv);
        metrics_reload(srv->workers[0].core.metrics, 0);
        return -1;
    }
    const char *field = restart_field(srv->config, c);
    if (field) {
        log_event(&srv->log, LOG_LVL_ERROR,
                  "reload refused, keeping the old policies: this field changes only with a "
                  "restart",
                  "trigger", trigger, "field", field, NULL);
        config_unref(c);
        notify_state(srv->notify, srv);
        metrics_reload(srv->workers[0].core.metrics, 0);
        return -1;
    }
    config_unref(srv->config);
    srv->config = c; /* checks in flight keep their own reference */
    srv->config_loaded_us = util_realtime_us();
    metrics_reload(srv->workers[0].core.metrics, 1);
    for (size_t i = 0; i < srv->nworkers; i++)
        worker_post_config(&srv->workers[i], c);
    if (!srv->log_level_from_cli)
        srv->log.level = c->log_level;
    /* envoy_config may now name another directory. */
    watch_follow(srv->watch);
    char n[24], nd[24];
    snprintf(n, sizeof n, "%zu", c->npolicies);
    snprintf(nd, sizeof nd, "%zu", c->ndomains);
    log_event(&srv->log, LOG_LVL_INFO, "policies reloaded", "trigger", trigger, "policies", n,
              "domains", nd, NULL);
    notify_state(srv->notify, srv);
    return 0;
}
