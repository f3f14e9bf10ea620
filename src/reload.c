/* SPDX-License-Identifier: Apache-2.0 */
/*
 * reload.c: a policy reload, all or nothing: load, refuse a file that
 * changes a field only a restart applies, swap the snapshot, tell the
 * workers. Does not own which fields those are: each row of the field
 * tables (config_fields.c) says it, and config_restart_field walks them.
 */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "core/metrics.h"
#include "notify.h"
#include "reload.h"
#include "status.h"
#include "watch.h"
#include "worker.h"

void reload_loaded(struct server *srv, const struct config *c, int to_stderr)
{
    const char *files[WATCH_MAX_FILES];
    size_t n = 0;
    char when[32];
    watch_follow(srv->watch, c->envoy_config);
    for (int i = 0; i < TLS_NLISTENERS; i++) {
        const struct listen_tls_config *t = &c->listen_tls[i];
        if (t->server == NULL)
            continue;
        files[n++] = t->cert_file;
        files[n++] = t->key_file;
        if (t->client_ca_file)
            files[n++] = t->client_ca_file;
        const char *bad = tls_server_validity(t->server, (int64_t)time(NULL));
        if (bad == NULL)
            continue;
        time_t at =
            (time_t)(strcmp(bad, "expired") == 0 ? t->server->not_after : t->server->not_before);
        struct tm tm;
        strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", gmtime_r(&at, &tm));
        log_event(&srv->log, LOG_LVL_WARN,
                  "a listener's TLS certificate is not valid now: clients will refuse it",
                  "listener", tls_listener_names[i], "cert_file", t->cert_file, "certificate", bad,
                  strcmp(bad, "expired") == 0 ? "not_after" : "not_before", when, NULL);
        if (to_stderr)
            fprintf(stderr, "ratelimitd: warning: %s: certificate %s %s (%s %s)\n",
                    tls_listener_names[i], t->cert_file, bad,
                    strcmp(bad, "expired") == 0 ? "notAfter" : "notBefore", when);
    }
    watch_follow_files(srv->watch, files, n);
}

int reload_config(struct server *srv, const char *trigger)
{
    char err[RL_ERRLEN * 2];
    notify_reloading(srv->notify);
    struct config *c = config_load_cli(srv->config_path, &srv->cli, err, sizeof err);
    if (!c) {
        log_event(&srv->log, LOG_LVL_ERROR, "reload failed, keeping the old policies", "trigger",
                  trigger, "error", err, NULL);
        notify_state(srv->notify, srv);
        metrics_reload(srv->workers[0].core.metrics, 0);
        status_reload(srv->status, 0, err);
        return -1;
    }
    char field[128];
    if (config_restart_field(srv->config, c, field, sizeof field)) {
        log_event(&srv->log, LOG_LVL_ERROR,
                  "reload refused, keeping the old policies: this field changes only with a "
                  "restart",
                  "trigger", trigger, "field", field, NULL);
        config_unref(c);
        notify_state(srv->notify, srv);
        metrics_reload(srv->workers[0].core.metrics, 0);
        snprintf(err, sizeof err, "this field changes only with a restart: %s", field);
        status_reload(srv->status, 0, err);
        return -1;
    }
    struct config_changes ch;
    config_changes(srv->config, c, &ch);
    config_unref(srv->config);
    srv->config = c; /* checks in flight keep their own reference */
    srv->config_loaded_us = util_realtime_us();
    metrics_reload(srv->workers[0].core.metrics, 1);
    status_reload(srv->status, 1, NULL);
    for (size_t i = 0; i < srv->nworkers; i++)
        worker_post_config(&srv->workers[i], c);
    if (!srv->log_level_from_cli)
        srv->log.level = c->log_level;
    /* envoy_config may now name another directory, TLS other files. */
    reload_loaded(srv, c, 0);
    char n[24], nd[24];
    snprintf(n, sizeof n, "%zu", c->npolicies);
    snprintf(nd, sizeof nd, "%zu", c->ndomains);
    /* What changed, each list only when it has names; "changes=none" for a
     * file saved as it was, so the line never leaves one wondering. */
    const char *kv[8] = {NULL};
    size_t k = 0;
    const char *names[4] = {"fields_changed", "policies_added", "policies_removed",
                            "policies_changed"};
    const char *lists[4] = {ch.fields, ch.added, ch.removed, ch.changed};
    for (size_t i = 0; i < 4; i++)
        if (lists[i][0])
            kv[k++] = names[i], kv[k++] = lists[i];
    if (k == 0)
        kv[k++] = "changes", kv[k++] = "none";
    log_event(&srv->log, LOG_LVL_INFO, "policies reloaded", "trigger", trigger, "policies", n,
              "domains", nd, kv[0], kv[1], kv[2], kv[3], kv[4], kv[5], kv[6], kv[7], NULL);
    reload_log_warnings(srv, c);
    notify_state(srv->notify, srv);
    return 0;
}

void reload_log_warnings(struct server *srv, const struct config *c)
{
    char line[RL_ERRLEN * 3];
    for (const char *s = c->warning; s != NULL && *s != '\0';) {
        const char *end = strchr(s, '\n');
        size_t len = end ? (size_t)(end - s) : strlen(s);
        snprintf(line, sizeof line, "%.*s", (int)len, s);
        log_event(&srv->log, LOG_LVL_WARN, "a part of the policy file does nothing", "warning",
                  line, NULL);
        s = end ? end + 1 : s + len;
    }
}
