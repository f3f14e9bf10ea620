/* SPDX-License-Identifier: Apache-2.0 */
/*
 * worker.c: one event loop's state (worker.h): its core (backend, fallback,
 * deny cache, metrics shard) and fronts (front.h), made from the config
 * snapshot it is given; its thread
 * (every worker but 0, which runs on the main loop), the mailbox through
 * which the main thread hands it a reload or a drain; readiness, the
 * metrics text and the end of a drain.
 */
#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/memory_state.h"
#include "backend/registry.h"
#include "build_info.h"
#include "core/deny_cache.h"
#include "core/local_lease_calls.h"
#include "core/metrics.h"
#include "core/override_change.h"
#include "core/overrides.h"
#include "core/top_keys.h"
#include "front/registry.h"
#include "lib/siphash.h"
#include "notify.h"
#include "server.h"
#include "status.h"
#include "worker.h"

/* Per-check warnings: at most one line a second per site and worker. */
#define WORKER_LOG_INTERVAL_US 1000000

/* On the worker's thread: publish readiness, and wake the main loop, which
 * alone speaks to systemd. */
static void on_backend_state(void *arg, int ready)
{
    struct worker *w = arg;
    /* A backend that stores overrides could not be read before it was
     * ready (its listener may subscribe first). */
    if (ready)
        override_change_reload(&w->core);
    __atomic_store_n(&w->backend_up, ready, __ATOMIC_RELEASE);
    /* A full pipe already holds a wake-up. */
    if (write(w->srv->state_pipe[1], "", 1) < 0) {
    }
}

static void on_reset_seen(void *arg, const char *policy, const char *key, size_t keylen)
{
    core_forget_key(arg, policy, key, keylen);
    /* The listener (re)subscribed: override changes may have been missed
     * too. */
    if (!policy)
        override_change_reload(arg);
}

static void on_override_seen(void *arg, const char *json, size_t len)
{
    override_change_heard(arg, json, len);
}

/* A drain ends once no check is in flight and every front is idle. */
static void maybe_idle(void *arg)
{
    struct worker *w = arg;
    if (!w->draining || w->core.inflight != 0)
        return;
    for (size_t i = 0; front_all[i]; i++)
        if (w->fronts[i] && !w->fronts[i]->ops->idle(w->fronts[i]))
            return;
    event_base_loopexit(w->core.base, NULL);
}

/* front_host: why no check is taken now, or NULL. */
static const char *unready_reason(void *arg)
{
    const struct worker *w = arg;
    if (w->draining)
        return "shutting_down";
    if (!server_ready(w->srv))
        return "redis_unavailable";
    return NULL;
}

/* front_host: this worker's backend's word (every worker's connections
 * ask the same nodes the same question). */
static const char *ready_detail(void *arg, int ready)
{
    const struct worker *w = arg;
    const struct backend *b = w->core.backend;
    if (ready)
        return b->ops->decides_by ? b->ops->decides_by(b) : NULL;
    return b->ops->unusable ? b->ops->unusable(b) : NULL;
}

struct metrics *worker_metrics_sum(void *srv_arg)
{
    const struct server *srv = srv_arg;
    struct metrics *sum = metrics_new();
    for (size_t i = 0; i < srv->nworkers; i++)
        metrics_add(sum, srv->workers[i].core.metrics);
    return sum;
}

/* front_host: the whole process's metrics (every worker's shard summed). */
static char *metrics_text(void *arg)
{
    const struct worker *w = arg;
    const struct server *srv = w->srv;
    struct metrics *sum = worker_metrics_sum(w->srv);
    size_t inflight = 0;
    for (size_t i = 0; i < srv->nworkers; i++)
        inflight += __atomic_load_n(&srv->workers[i].core.inflight, __ATOMIC_RELAXED);
    struct metrics_gauges g = {
        .version = PACKAGE_VERSION,
        .commit = RATELIMITD_COMMIT,
        .features = RATELIMITD_FEATURES,
        .checks_in_flight = inflight,
        .redis_up = server_ready(srv),
        .no_redis = w->core.config->backend == BACKEND_KIND_MEMORY,
        .config_loaded_us = srv->config_loaded_us,
        .policies = w->core.config->npolicies,
    };
    struct memory_state_stats st;
    if (backend_registry_state_stats(srv->backends, &st))
        g.state_file = 1, g.state_writes_ok = st.writes_ok,
        g.state_writes_failed = st.writes_failed, g.state_last_write_us = st.last_duration_us,
        g.state_last_write_bytes = st.last_bytes;
    _Static_assert(METRICS_TLS_LISTENERS == TLS_NLISTENERS, "one TLS label per listener");
    for (size_t l = 0; l < TLS_NLISTENERS; l++) {
        const struct tls_server *t = w->core.config->listen_tls[l].server;
        g.tls_not_after[l] = t ? t->not_after : 0;
    }
    char *text = metrics_render(sum, &g);
    metrics_free(sum);
    const struct config *cfg = w->core.config;
    const char **names = xcalloc(cfg->npolicies + 1, sizeof *names);
    for (size_t i = 0; i < cfg->npolicies; i++)
        names[i] = cfg->policies[i].name;
    struct buf b = {0};
    buf_append_str(&b, text);
    free(text);
    overrides_metrics(srv->overrides, names, cfg->npolicies, util_realtime_us(), &b);
    free(names);
    buf_append_char(&b, '\0');
    return b.data;
}

/* front_host: the status page's JSON, of this worker's snapshot. */
static void status_text(void *arg, struct buf *out)
{
    const struct worker *w = arg;
    status_json(w->srv->status, w->core.config, w->srv->overrides, out);
}

static void rates_text(void *arg, int seconds, struct buf *out)
{
    const struct worker *w = arg;
    status_rates_json(w->srv->status, w->core.config, seconds, out);
}

/* The deny cache of the snapshot's size (none for 0), empty: a reload may
 * change limits, and a denial under the old ones proves nothing. */
static void reset_deny_cache(struct worker *w, const struct config *cfg)
{
    deny_cache_free(w->core.deny);
    w->core.deny = cfg->deny_cache_max_keys > 0
                       ? deny_cache_new((size_t)cfg->deny_cache_max_keys, w->srv->hash_seed ^ w->id)
                       : NULL;
}

static void set_config(struct worker *w, struct config *cfg)
{
    struct core *core = &w->core;
    if (core->deny && cfg->deny_cache_max_keys == core->config->deny_cache_max_keys)
        deny_cache_clear(core->deny);
    else
        reset_deny_cache(w, cfg);
    local_lease_reload(core, cfg);
    top_keys_reload(core->top, cfg);
    config_unref(core->config);
    core->config = cfg; /* checks in flight keep their own reference */
    core->backend->ops->watch_resets(core->backend, cfg);
    for (size_t i = 0; i < cfg->npolicies; i++)
        metrics_policy_seen(core->metrics, cfg->policies[i].name);
    for (size_t i = 0; front_all[i]; i++)
        if (w->fronts[i])
            w->fronts[i]->ops->apply_config(w->fronts[i], cfg);
}

/* This loop's sketches of the heaviest keys, named for the fleet's view
 * "<host>:<pid>:<tag>/<worker>": the tag, from the secret seed through a
 * one-way hash, tells apart two daemons that once had the same pid. */
static void make_top(struct worker *w)
{
    char host[64] = "", member[128];
    if (gethostname(host, sizeof host) < 0 || !host[0])
        snprintf(host, sizeof host, "localhost");
    host[sizeof host - 1] = '\0';
    struct siphash_key k = siphash_key_from_seed(w->srv->hash_seed);
    snprintf(member, sizeof member, "%s:%ld:%08llx/%u", host, (long)getpid(),
             (unsigned long long)(siphash24(&k, "daemon", 6) & 0xffffffffULL), w->id);
    w->core.top = top_keys_new(&w->core, member, w->srv->hash_seed ^ w->id ^ 0x746f70ULL);
}

/* The fronts stop taking checks and the loop ends once idle, or at the
 * backstop, whichever comes first: past redis.timeout every check has its
 * answer, and WORKER_DRAIN_MAX_S is the time left to write them. The rule
 * is the worker's, so that every front's connections get it. */
static void drain(struct worker *w)
{
    w->draining = 1;
    /* Unspent blocks go back while Redis is still there to take them. */
    local_lease_drain(&w->core);
    top_keys_flush(w->core.top);
    for (size_t i = 0; front_all[i]; i++)
        if (w->fronts[i])
            w->fronts[i]->ops->drain(w->fronts[i]);
    struct timeval backstop = {.tv_sec =
                                   WORKER_DRAIN_MAX_S + w->core.config->redis_timeout_us / 1000000};
    /* It fails only out of memory: the drain then ends when idle. */
    (void)event_base_loopexit(w->core.base, &backstop);
    maybe_idle(w);
}

/* Every front starts accepting. -1 only if libevent cannot watch a socket
 * (out of memory). */
static int start_fronts(struct worker *w, char *err, size_t errlen)
{
    for (size_t i = 0; front_all[i]; i++)
        if (w->fronts[i] && w->fronts[i]->ops->start(w->fronts[i]) < 0) {
            snprintf(err, errlen, "cannot watch the %s front's listening sockets",
                     front_all[i]->name);
            return -1;
        }
    return 0;
}

/* Accepting held back at start begins, on the worker's loop. */
static void start_held(struct worker *w)
{
    char err[RL_ERRLEN];
    if (start_fronts(w, err, sizeof err) < 0)
        abort(); /* out of memory in libevent, as in front_event_want */
}

/* The mailbox, on the worker's own loop. */
static void on_wake(evutil_socket_t fd, short what, void *arg)
{
    struct worker *w = arg;
    char buf[64];
    while (read(fd, buf, sizeof buf) > 0)
        ;
    pthread_mutex_lock(&w->mail_lock);
    struct config *cfg = w->mail_config;
    int do_drain = w->mail_drain, do_accept = w->mail_accept;
    w->mail_config = NULL;
    w->mail_drain = w->mail_accept = 0;
    pthread_mutex_unlock(&w->mail_lock);
    if (cfg)
        set_config(w, cfg);
    if (do_accept && !w->draining)
        start_held(w);
    if (do_drain && !w->draining)
        drain(w);
}

static void post(struct worker *w)
{
    /* A full pipe already holds a wake-up. */
    if (write(w->wake[1], "", 1) < 0) {
    }
}

/* Makes every front cfg enables; worker 0's are made first, and the
 * others share its unix sockets. The access log speaks the first front's
 * numbering of statuses that has one (the HTTP front's). */
static int make_fronts(struct worker *w, const struct config *cfg, char *err, size_t errlen)
{
    const struct worker *first = w->id ? &w->srv->workers[0] : NULL;
    for (size_t i = 0; front_all[i]; i++) {
        const struct front_ops *ops = front_all[i];
        if (!ops->enabled(cfg))
            continue;
        w->fronts[i] = ops->new (&w->host, first ? first->fronts[i] : NULL, err, errlen);
        if (!w->fronts[i])
            return -1;
        if (!w->core.status_of)
            w->core.status_of = ops->log_status;
    }
    return 0;
}

int worker_init(struct worker *w, struct server *srv, unsigned id, struct event_base *base,
                char *err, size_t errlen)
{
    const struct config *cfg = srv->config;
    *w = (struct worker){.srv = srv,
                         .id = id,
                         .core = {.base = base,
                                  .log = &srv->log,
                                  .late_log = {.interval_us = WORKER_LOG_INTERVAL_US},
                                  .error_log = {.interval_us = WORKER_LOG_INTERVAL_US},
                                  .backend_pending = &srv->backend_pending,
                                  .overrides = srv->overrides,
                                  .idle = maybe_idle,
                                  .idle_arg = w},
                         .wake = {-1, -1}};
    struct core *core = &w->core;
    w->host = (struct front_host){.core = core,
                                  .connections = &srv->connections,
                                  .sockets = srv->sockets,
                                  .draining = &w->draining,
                                  .unready_reason = unready_reason,
                                  .ready_detail = ready_detail,
                                  .metrics_text = metrics_text,
                                  .status_json = status_text,
                                  .rates_json = rates_text,
                                  .maybe_idle = maybe_idle,
                                  .arg = w};
    pthread_mutex_init(&w->mail_lock, NULL);
    core->config = config_ref(srv->config);
    reset_deny_cache(w, cfg);
    core->metrics = metrics_new();
    for (size_t i = 0; i < cfg->npolicies; i++)
        metrics_policy_seen(core->metrics, cfg->policies[i].name);
    if (pipe2(w->wake, O_NONBLOCK | O_CLOEXEC) < 0 ||
        !(w->wake_ev = event_new(base, w->wake[0], EV_READ | EV_PERSIST, on_wake, w)) ||
        event_add(w->wake_ev, NULL) < 0) {
        snprintf(err, errlen, "cannot create a worker's mailbox: %s", strerror(errno));
        return -1;
    }
    const struct backend_env env = {base, core->log, core->metrics, srv->backends};
    core->fallback = backend_registry_fallback_new(&env);
    core->backend = backend_registry_new(&env, cfg, err, errlen);
    if (!core->backend)
        return -1;
    if (core->backend->ops->local_leases)
        core->leases = local_lease_new(w->srv->hash_seed ^ w->id ^ 0x6c65617365ULL);
    make_top(w);
    backend_on_state(core->backend, on_backend_state, w);
    backend_on_reset(core->backend, on_reset_seen, core);
    backend_on_override(core->backend, on_override_seen, core);
    core->backend->ops->watch_resets(core->backend, cfg);
    w->backend_up = backend_ready(core->backend);
    return make_fronts(w, cfg, err, errlen);
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    if (event_base_dispatch(w->core.base) < 0)
        log_event(w->core.log, LOG_LVL_ERROR, "a worker's event loop failed", NULL);
    return NULL;
}

int worker_start(struct worker *w, int accept, char *err, size_t errlen)
{
    w->core.backend->ops->start(w->core.backend);
    if (accept && start_fronts(w, err, errlen) < 0)
        return -1;
    if (w->id == 0)
        return 0;
    int rc = pthread_create(&w->thread, NULL, worker_main, w);
    if (rc != 0) {
        snprintf(err, errlen, "cannot start worker %u: %s", w->id, strerror(rc));
        return -1;
    }
    w->has_thread = 1;
    return 0;
}

void worker_post_config(struct worker *w, struct config *cfg)
{
    if (!w->has_thread) {
        set_config(w, config_ref(cfg));
        return;
    }
    pthread_mutex_lock(&w->mail_lock);
    config_unref(w->mail_config); /* an older reload not yet taken */
    w->mail_config = config_ref(cfg);
    pthread_mutex_unlock(&w->mail_lock);
    post(w);
}

/* Runs now(w) on w's loop: at once for a worker with no thread of its own
 * (worker 0, on the main loop), else by raising *flag in its mailbox. */
static void post_flag(struct worker *w, int *flag, void (*now)(struct worker *))
{
    if (!w->has_thread) {
        now(w);
        return;
    }
    pthread_mutex_lock(&w->mail_lock);
    *flag = 1;
    pthread_mutex_unlock(&w->mail_lock);
    post(w);
}

void worker_post_drain(struct worker *w)
{
    post_flag(w, &w->mail_drain, drain);
}

void worker_post_accept(struct worker *w)
{
    post_flag(w, &w->mail_accept, start_held);
}

void worker_join(struct worker *w)
{
    if (w->has_thread)
        pthread_join(w->thread, NULL);
    w->has_thread = 0;
}

void worker_fini(struct worker *w)
{
    /* The backend first: checks still waiting (after the drain's backstop)
     * complete as unavailable and are answered while their requests are
     * alive; the fronts then close the connections and their sockets. The
     * sketches' timer hands over to the backend: it goes first. */
    top_keys_free(w->core.top);
    w->core.top = NULL;
    backend_free(w->core.backend);
    w->core.backend = NULL;
    /* In the reverse order of making. Each is out of the array before it
     * is freed: closing its connections asks whether a drain is over,
     * which looks at the fronts still there. */
    for (size_t i = FRONT_MAX; i-- > 0;) {
        struct front *f = w->fronts[i];
        w->fronts[i] = NULL;
        if (f)
            f->ops->free(f);
    }
    if (w->wake_ev)
        event_free(w->wake_ev);
    w->wake_ev = NULL;
    for (int i = 0; i < 2; i++)
        if (w->wake[i] >= 0)
            close(w->wake[i]);
    config_unref(w->mail_config);
    w->mail_config = NULL;
    pthread_mutex_destroy(&w->mail_lock);
    backend_free(w->core.fallback);
    w->core.fallback = NULL;
    deny_cache_free(w->core.deny);
    w->core.deny = NULL;
    local_lease_free(w->core.leases, NULL, NULL);
    w->core.leases = NULL;
    metrics_free(w->core.metrics);
    w->core.metrics = NULL;
    config_unref(w->core.config);
    w->core.config = NULL;
}

int server_ready(const struct server *srv)
{
    for (size_t i = 0; i < srv->nworkers; i++)
        if (!__atomic_load_n(&srv->workers[i].backend_up, __ATOMIC_ACQUIRE))
            return 0;
    return srv->nworkers > 0;
}
