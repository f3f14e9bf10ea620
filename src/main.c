/* SPDX-License-Identifier: Apache-2.0 */
/*
 * main.c: options, start-up order, signals and exit codes.
 *
 * Start-up: load and validate the policy file (exit 1 with file:line:col on
 * any error), bind the HTTP socket, start connecting to Redis, run the loop.
 * SIGTERM/SIGINT: stop accepting, answer the checks in flight, exit 0.
 * SIGHUP: reload the policy file; an invalid file keeps the old policies.
 * SIGUSR2: hand the listening sockets over to the binary at the same path
 * (handover.h). Sockets passed at start (systemd's socket activation, a
 * hand-over) are used instead of binding (listen_fds.h).
 */
#include <event2/event.h>
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sysexits.h>
#include <unistd.h>

#include "backend/memory_state.h"
#include "backend/registry.h"
#include "build_info.h"
#include "config/config.h"
#include "core/backend.h"
#include "core/override_change.h"
#include "core/override_json.h"
#include "core/overrides.h"
#include "handover.h"
#include "lib/listen_fds.h"
#include "lib/timer.h"
#include "notify.h"
#include "reload.h"
#include "server.h"
#include "status.h"
#include "watch.h"
#include "worker.h"

/* How long sockets passed at start wait for readiness (on_hold_over). */
#define ACCEPT_HOLD_US (5 * 1000000LL)

#ifndef SYSCONFDIR
#define SYSCONFDIR "/etc"
#endif
#define DEFAULT_CONFIG SYSCONFDIR "/ratelimitd.yaml"

static void usage(FILE *out)
{
    fprintf(out,
            "Usage: ratelimitd [OPTIONS]\n"
            "A rate-limit decision daemon: POST /check answers from limits counted in Redis,\n"
            "or in this process's memory with backend: memory.\n"
            "\n"
            "  -c, --config FILE     policy file (default " DEFAULT_CONFIG ")\n"
            "  -t, --check-config    validate the policy file (and the envoy directory)\n"
            "                        and exit (0 valid, 1 not)\n"
            "      --envoy-config DIR\n"
            "                        envoyproxy/ratelimit's YAML files, one domain each\n"
            "                        (default: the policy file's envoy_config)\n"
            "      --envoy-merge-domains[=true|false]\n"
            "                        merge a domain defined in several files (default: the\n"
            "                        policy file's envoy_merge_domains, false)\n"
            "      --envoy-shadow-mode\n"
            "                        Envoy's answers are never OVER_LIMIT (as the file's\n"
            "                        envoy_shadow_mode: true)\n"
            "      --envoy-quota-mode\n"
            "                        every Envoy descriptor is a quota descriptor (as the\n"
            "                        file's envoy_quota_mode: true)\n"
            "      --listen ADDR     listen here, not at the file's listen (same forms)\n"
            "      --backend NAME    redis or memory, whatever the file's backend says\n"
            "      --redis-url URL   this Redis, not the file's redis.url (others can read\n"
            "                        a password in it with ps)\n"
            "                        (these three hold on every reload)\n"
            "  -l, --log-level LVL   debug, info, warn or error (default: the file's log_level)\n"
            "      --strict-permissions\n"
            "                        refuse a policy file that others may write, or a token\n"
            "                        file they may read or write (default: warn)\n"
            "      --print-script    print the Lua script built into this binary\n"
            "  -h, --help            this text\n"
            "  -V, --version         print the version, the commit and the compiled features\n"
            "\n"
            "Signals: SIGHUP reloads the policy file and the envoy directory; SIGTERM or\n"
            "SIGINT drain and exit; SIGUSR2 starts the binary at the same path with the\n"
            "same options, hands it the listening sockets, and drains once it is ready.\n"
            "Exit status: 0 clean exit, 1 invalid policy file or cannot listen, 64 bad usage.\n");
}

/* Every worker stops accepting, answers what it has and ends. */
static void drain_all(struct server *srv)
{
    srv->draining = 1;
    for (size_t i = 0; i < srv->nworkers; i++)
        worker_post_drain(&srv->workers[i]);
}

static void on_shutdown_signal(evutil_socket_t sig, short what, void *arg)
{
    struct server *srv = arg;
    if (srv->draining)
        return;
    log_event(&srv->log, LOG_LVL_INFO, "shutting down", "signal", sig == SIGINT ? "INT" : "TERM",
              NULL);
    notify_stopping(srv->notify);
    drain_all(srv);
}

/* The hand-over's new process is ready. No STOPPING=1: the unit goes on,
 * its main PID now the new process's. */
static void on_handed_over(void *arg)
{
    drain_all(arg);
}

/* The hand-over's counters (handover_env): the process's shared store. */
static int dump_store(void *arg, int fd, char *err, size_t errlen)
{
    return backend_registry_shared_dump(((struct server *)arg)->backends, fd, err, errlen);
}

static int load_store(void *arg, int fd, size_t *loaded, char *err, size_t errlen)
{
    return backend_registry_shared_load(((struct server *)arg)->backends, fd, loaded, err, errlen);
}

static void on_handover_signal(evutil_socket_t sig, short what, void *arg)
{
    struct server *srv = arg;
    if (srv->draining) {
        log_event(&srv->log, LOG_LVL_WARN, "SIGUSR2 refused: draining", NULL);
        return;
    }
    handover_start(srv->handover);
}

static void release_accept(struct server *srv)
{
    srv->accept_held = 0;
    for (size_t i = 0; i < srv->nworkers; i++)
        worker_post_accept(&srv->workers[i]);
}

/* Readiness reached: systemd hears it, and an old process that started
 * this one may go. */
static void tell_state(struct server *srv)
{
    notify_state(srv->notify, srv);
    if (!server_ready(srv) || !srv->accept_held)
        return;
    /* With backend: memory the counters come first: the old process's
     * last check is in them before this one takes any. */
    handover_ready(srv->handover, srv->config->backend == BACKEND_KIND_MEMORY);
    release_accept(srv);
}

/* Sockets systemd held while no process served: past ACCEPT_HOLD_US
 * unready (a Redis that does not answer), their waiting connections get the
 * policies' failure_mode answers rather than wait on. */
static void on_hold_over(evutil_socket_t fd, short what, void *arg)
{
    struct server *srv = arg;
    if (!srv->accept_held)
        return;
    log_event(&srv->log, LOG_LVL_WARN,
              "not ready after 5 s on the sockets passed at start: accepting now "
              "(failure_mode answers until the backend is up)",
              NULL);
    release_accept(srv);
}

/* What the options ask for besides the server's own fields. */
struct options {
    int check_only;
    int strict_perms;
};

/* A file whose mode grants others (not the owner, not the group: root:
 * ratelimitd 0640 is how the daemon is meant to read its files) any of the
 * bits in mask: a warning, or with --strict-permissions a refusal (-1): to
 * start, or with --check-config a failed check, said as such (nothing was
 * going to start). what names the file and how loose it is, e.g. "the
 * policy file is writable". */
static int check_file_mode(const struct server *srv, const char *path, mode_t mask,
                           const char *what, const char *fix, const struct options *o)
{
    struct stat st;
    if (stat(path, &st) < 0 || !(st.st_mode & mask))
        return 0; /* a missing file is config_load's to report */
    if (o->strict_perms) {
        fprintf(stderr, "ratelimitd: %s: %s by others; %s (chmod %s it)\n", path, what,
                o->check_only ? "not valid with --strict-permissions" : "refusing to start", fix);
        return -1;
    }
    char msg[128];
    snprintf(msg, sizeof msg, "%s by others", what);
    log_event(&srv->log, LOG_LVL_WARN, msg, "file", path, "chmod", fix, NULL);
    return 0;
}

/* Anyone who may write the policy file may lift every limit; anyone who
 * may read the token file may call /check as any client, and anyone who may
 * write it may lock them all out at the next reload. cfg NULL: checks the
 * policy file (before it is loaded); else cfg's auth_token_file, if any.
 * Both are checked at start only; a reload does not check again. */
static int check_permissions(const struct server *srv, const struct config *cfg,
                             const struct options *o)
{
    if (!cfg)
        return check_file_mode(srv, srv->config_path, S_IWOTH, "the policy file is writable", "o-w",
                               o);
    if (cfg->auth_token_file)
        return check_file_mode(srv, cfg->auth_token_file, S_IROTH | S_IWOTH,
                               "the auth_token_file is readable or writable", "o-rw", o);
    return 0;
}

/* Every connection costs a descriptor: raise the soft limit to the hard one,
 * and say so if max_connections still does not fit. */
static void raise_fd_limit(const struct server *srv)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
        return;
    if (rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        (void)setrlimit(RLIMIT_NOFILE, &rl);
        (void)getrlimit(RLIMIT_NOFILE, &rl);
    }
    if (rl.rlim_cur != RLIM_INFINITY && (rlim_t)srv->config->max_connections + 64 > rl.rlim_cur) {
        char lim[24];
        snprintf(lim, sizeof lim, "%llu", (unsigned long long)rl.rlim_cur);
        log_event(&srv->log, LOG_LVL_WARN,
                  "max_connections exceeds the descriptor limit; accepts will pause at it",
                  "nofile", lim, NULL);
    }
}

/* Tearing down restores the default signal actions: a second SIGTERM during
 * the exit must not kill the process halfway. */
static void block_stop_signals(void)
{
    sigset_t stop_signals;
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGTERM);
    sigaddset(&stop_signals, SIGINT);
    sigprocmask(SIG_BLOCK, &stop_signals, NULL);
}

/* A worker's backend became ready or unready: tell systemd. */
static void on_backend_state(evutil_socket_t fd, short what, void *arg)
{
    char buf[64];
    while (read(fd, buf, sizeof buf) > 0)
        ;
    tell_state(arg);
}

/* workers: auto is one per CPU. */
static size_t worker_count(const struct config *cfg)
{
    if (cfg->workers > 0)
        return (size_t)cfg->workers;
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > CONFIG_WORKERS_MAX ? CONFIG_WORKERS_MAX : (size_t)n;
}

/* Makes the workers: 0 on the main loop, each other on a loop of its own. */
static int make_workers(struct server *srv, char *err, size_t errlen)
{
    size_t n = worker_count(srv->config);
    srv->workers = xcalloc(n, sizeof *srv->workers);
    for (size_t i = 0; i < n; i++) {
        struct event_base *base = i == 0 ? srv->base : event_base_new();
        if (!base) {
            snprintf(err, errlen, "cannot create an event loop");
            return -1;
        }
        srv->nworkers = i + 1;
        if (worker_init(&srv->workers[i], srv, (unsigned)i, base, err, errlen) < 0)
            return -1;
    }
    return 0;
}

static void on_reload_signal(evutil_socket_t sig, short what, void *arg)
{
    reload_config(arg, "SIGHUP");
}

/* Reads the options into srv and o. Returns -1 to go on, or the exit code
 * when they say to stop here (--help, --version, --print-script, a bad
 * option). Long because it is the option table and one case per option:
 * split, an option's name and its meaning would sit apart. */
static int parse_options(int argc, char **argv, struct server *srv, struct options *o)
{
    static const struct option opts[] = {
        {"config", required_argument, NULL, 'c'},
        {"check-config", no_argument, NULL, 't'},
        {"envoy-config", required_argument, NULL, 'E'},
        {"envoy-merge-domains", optional_argument, NULL, 'M'},
        {"envoy-shadow-mode", no_argument, NULL, 'W'},
        {"envoy-quota-mode", no_argument, NULL, 'Q'},
        {"listen", required_argument, NULL, 'L'},
        {"backend", required_argument, NULL, 'B'},
        {"redis-url", required_argument, NULL, 'R'},
        {"log-level", required_argument, NULL, 'l'},
        {"print-script", no_argument, NULL, 'P'},
        {"strict-permissions", no_argument, NULL, 'S'},
        {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, 'V'},
        {NULL, 0, NULL, 0},
    };
    int opt;
    while ((opt = getopt_long(argc, argv, "c:tl:hV", opts, NULL)) != -1) {
        switch (opt) {
        case 'c':
            srv->config_path = optarg;
            break;
        case 't':
            o->check_only = 1;
            break;
        case 'E':
            srv->cli.envoy_dir = optarg;
            break;
        case 'M':
            if (optarg == NULL || strcmp(optarg, "true") == 0)
                srv->cli.envoy_merge_domains = 1;
            else if (strcmp(optarg, "false") == 0)
                srv->cli.envoy_merge_domains = 0;
            else {
                fprintf(stderr,
                        "ratelimitd: --envoy-merge-domains takes true or false, not \"%s\"\n",
                        optarg);
                return EX_USAGE;
            }
            break;
        case 'W':
            srv->cli.envoy_shadow_mode = 1;
            break;
        case 'Q':
            srv->cli.envoy_quota_mode = 1;
            break;
        case 'L':
            srv->cli.listen = optarg;
            break;
        case 'B':
            srv->cli.backend = optarg;
            break;
        case 'R':
            srv->cli.redis_url = optarg;
            break;
        case 'l':
            if (log_level_from_name(optarg, &srv->log.level) < 0) {
                fprintf(stderr, "ratelimitd: unknown log level \"%s\"\n", optarg);
                return EX_USAGE;
            }
            srv->log_level_from_cli = 1;
            break;
        case 'S':
            o->strict_perms = 1;
            break;
        case 'P':
            fputs(backend_registry_script(), stdout);
            return 0;
        case 'h':
            usage(stdout);
            return 0;
        case 'V':
            printf("ratelimitd %s (commit %s; features %s)\n", PACKAGE_VERSION, RATELIMITD_COMMIT,
                   RATELIMITD_FEATURES);
            return 0;
        default:
            usage(stderr);
            return EX_USAGE;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "ratelimitd: unexpected argument \"%s\"\n", argv[optind]);
        usage(stderr);
        return EX_USAGE;
    }
    return -1;
}

/* Loads the policy file into srv->config (its permissions first). Returns
 * -1 to go on and start, or the exit code: 1 for a file refused, 0 after
 * --check-config's report. */
static int load(struct server *srv, const struct options *o)
{
    char err[RL_ERRLEN * 2];
    if (check_permissions(srv, NULL, o) < 0)
        return 1;
    srv->config = config_load_cli(srv->config_path, &srv->cli, err, sizeof err);
    if (!srv->config) {
        fprintf(stderr, "ratelimitd: %s\n", err);
        return 1;
    }
    if (check_permissions(srv, srv->config, o) < 0)
        return 1;
    if (!srv->log_level_from_cli)
        srv->log.level = srv->config->log_level;
    for (const char *s = srv->config->warning; s && *s && o->check_only;) {
        const char *end = strchr(s, '\n');
        int len = end ? (int)(end - s) : (int)strlen(s);
        fprintf(stderr, "ratelimitd: warning: %.*s\n", len, s);
        s += len + (end != NULL);
    }
    if (o->check_only)
        reload_loaded(srv, srv->config, 1); /* no watch yet: the certificates' warnings */
    if (!o->check_only)
        return -1;
    size_t np = srv->config->npolicies, nd = srv->config->ndomains;
    printf("%s: ok, %zu %s, %zu %s", srv->config_path, np, np == 1 ? "policy" : "policies", nd,
           nd == 1 ? "domain" : "domains");
    if (srv->config->envoy_config)
        printf(" (envoy_config %s)", srv->config->envoy_config);
    printf("\n");
    return 0;
}

/* The main loop's own events: the signals. */
struct main_events {
    struct event *sigterm, *sigint, *sighup, *sigusr2;
    struct event *hold; /* on_hold_over's, for sockets systemd passed */
};

static void on_watch_change(void *arg)
{
    reload_config(arg, "watch");
}

/* The hand-over (which must know first whether an old process started
 * this one: then the sockets passed must be at the policy file's addresses)
 * and the listening sockets passed at start. */
static int start_handover(struct server *srv, char *err, size_t errlen)
{
    const struct config *c = srv->config;
    const struct listen_field fields[] = {
        {"listen", c->listen}, {"admin_listen", c->admin_listen}, {"grpc_listen", c->grpc_listen}};
    srv->sockets = listen_fds_new();
    const struct handover_env he = {.base = srv->base,
                                    .log = &srv->log,
                                    .sockets = srv->sockets,
                                    .notify = srv->notify,
                                    .argv = srv->argv,
                                    .on_done = on_handed_over,
                                    .dump = dump_store,
                                    .load = load_store,
                                    .arg = srv};
    srv->handover = handover_new(&he);
    int handed = handover_expected(srv->handover);
    if (listen_fds_inherit(srv->sockets, fields, 3, handed, err, errlen) < 0)
        return -1;
    /* Accepting before ready would answer checks unready (a Redis not yet
     * connected: failure_mode's answers). Started by a hand-over, the old
     * process serves meanwhile; on sockets systemd holds, connections wait
     * in the backlog, as during the restart itself (up to ACCEPT_HOLD_US). */
    srv->accept_held = handed || listen_fds_count(srv->sockets) > 0;
    return 0;
}

/* An expired override leaves the backend's store too: worker 0 runs on
 * this loop, and sends the removal on its backend. */
static void expired_override(void *arg, const struct override *o)
{
    struct server *srv = arg;
    if (srv->workers && srv->nworkers > 0 && srv->workers[0].core.backend)
        override_change_expired(&srv->workers[0].core, o);
}

/* Every second: an expired override stops applying at its expiry on its
 * own (overrides_apply); this removes it, logged and counted, once. */
static void on_sweep(evutil_socket_t fd, short what, void *arg)
{
    struct server *srv = arg;
    (void)fd;
    (void)what;
    (void)overrides_sweep(srv->overrides, util_realtime_us(), &srv->log, expired_override, srv);
}

/* The state file's extra section (memory_state.h): the run-time overrides
 * of backend: memory, which live nowhere else. */
static void save_overrides(void *arg, struct buf *out)
{
    override_json_save_all(arg, util_realtime_us(), out);
}

static void load_overrides(void *arg, const void *data, size_t len)
{
    (void)override_json_load_all(arg, data, len, util_realtime_us());
}

/* The process-wide parts, before any worker: the hash seed, the main loop,
 * systemd's notifier, the failure_mode local store, the state pipe. */
static int start_process(struct server *srv)
{
    signal(SIGPIPE, SIG_IGN);
    raise_fd_limit(srv);
    /* A secret hash seed: callers choose the keys of the in-memory tables. */
    srv->hash_seed = (uint64_t)util_monotonic_us() ^ ((uint64_t)getpid() << 40);
    if (getrandom(&srv->hash_seed, sizeof srv->hash_seed, GRND_NONBLOCK) !=
        (ssize_t)sizeof srv->hash_seed)
        log_event(&srv->log, LOG_LVL_WARN, "getrandom failed; tables seeded from the clock", NULL);
    srv->config_loaded_us = util_realtime_us();
    srv->base = event_base_new();
    if (!srv->base) {
        fprintf(stderr, "ratelimitd: cannot create the event loop\n");
        return -1;
    }
    srv->notify = notify_new(srv->base);
    char err[RL_ERRLEN * 2];
    if (!(srv->status = status_new(srv->base, worker_metrics_sum, srv, err, sizeof err))) {
        fprintf(stderr, "ratelimitd: %s\n", err);
        return -1;
    }
    if (start_handover(srv, err, sizeof err) < 0) {
        fprintf(stderr, "ratelimitd: %s\n", err);
        return -1;
    }
    srv->overrides = overrides_new(srv->hash_seed);
    const struct memory_state_extra extra = {save_overrides, load_overrides, srv->overrides};
    srv->backends = backend_registry_shared_new(srv->config, srv->hash_seed, &srv->log, &extra, err,
                                                sizeof err);
    if (!srv->backends) {
        fprintf(stderr, "ratelimitd: %s\n", err);
        return -1;
    }
    struct timeval second = {1, 0};
    if (!(srv->sweep_ev = event_new(srv->base, -1, EV_PERSIST, on_sweep, srv)) ||
        event_add(srv->sweep_ev, &second) < 0) {
        fprintf(stderr, "ratelimitd: cannot create a timer\n");
        return -1;
    }
    /* READY=1 waits for the script to be loaded in Redis by every worker. */
    if (pipe2(srv->state_pipe, O_NONBLOCK | O_CLOEXEC) < 0 ||
        !(srv->state_ev = event_new(srv->base, srv->state_pipe[0], EV_READ | EV_PERSIST,
                                    on_backend_state, srv)) ||
        event_add(srv->state_ev, NULL) < 0) {
        fprintf(stderr, "ratelimitd: cannot create a pipe\n");
        return -1;
    }
    return 0;
}

/* The workers, the signals and the watch, then the workers' threads. */
static int start(struct server *srv, struct main_events *ev)
{
    char err[RL_ERRLEN * 2];
    if (start_process(srv) < 0)
        return -1;
    if (make_workers(srv, err, sizeof err) < 0) {
        fprintf(stderr, "ratelimitd: %s\n", err);
        return -1;
    }
    ev->sigterm = evsignal_new(srv->base, SIGTERM, on_shutdown_signal, srv);
    ev->sigint = evsignal_new(srv->base, SIGINT, on_shutdown_signal, srv);
    ev->sighup = evsignal_new(srv->base, SIGHUP, on_reload_signal, srv);
    ev->sigusr2 = evsignal_new(srv->base, SIGUSR2, on_handover_signal, srv);
    if (!ev->sigterm || !ev->sigint || !ev->sighup || !ev->sigusr2 ||
        evsignal_add(ev->sigterm, NULL) < 0 || evsignal_add(ev->sigint, NULL) < 0 ||
        evsignal_add(ev->sighup, NULL) < 0 || evsignal_add(ev->sigusr2, NULL) < 0) {
        fprintf(stderr, "ratelimitd: cannot install signal handlers\n");
        return -1;
    }
    if (srv->accept_held && !handover_expected(srv->handover)) {
        if (!(ev->hold = evtimer_new(srv->base, on_hold_over, srv)))
            return -1;
        timer_arm_us(ev->hold, ACCEPT_HOLD_US);
    }
    struct watch_target wt = {srv->base, srv->config_path, srv->config->envoy_config,
                              &srv->log, on_watch_change,  srv};
    if (srv->config->watch && !(srv->watch = watch_new(&wt, err, sizeof err))) {
        fprintf(stderr, "ratelimitd: %s\n", err);
        return -1;
    }
    reload_loaded(srv, srv->config, 0);
    for (size_t i = 0; i < srv->nworkers; i++) {
        if (worker_start(&srv->workers[i], !srv->accept_held, err, sizeof err) < 0) {
            fprintf(stderr, "ratelimitd: %s\n", err);
            return -1;
        }
    }
    return 0;
}

/* Says the daemon is up, and runs the main loop until the drain ends it. */
static int run(struct server *srv)
{
    tell_state(srv); /* READY=1 now with backend: memory */
    const struct config *cfg = srv->config;
    char npol[24], nw[24];
    snprintf(npol, sizeof npol, "%zu", cfg->npolicies);
    snprintf(nw, sizeof nw, "%zu", srv->nworkers);
    int memory = cfg->backend == BACKEND_KIND_MEMORY;
    /* Every listener, and the clock the limits really run on: the memory
     * backend reads the daemon's own whatever clock: says. A pair of
     * NULLs ends the list early where a listener is not set. */
    const char *kv[14] = {"listen", cfg->listen};
    size_t n = 2;
    if (cfg->admin_listen)
        kv[n++] = "admin_listen", kv[n++] = cfg->admin_listen;
    if (cfg->grpc_listen)
        kv[n++] = "grpc_listen", kv[n++] = cfg->grpc_listen;
    kv[n++] = memory ? "backend" : "redis";
    kv[n++] = srv->workers[0].core.backend->ops->target(srv->workers[0].core.backend);
    kv[n++] = "clock";
    kv[n++] = memory || cfg->clock == CLOCK_SOURCE_LOCAL ? "local" : "redis";
    /* Each node's path follows in its "redis code loaded" line. */
    if (!memory)
        kv[n++] = "redis_module", kv[n++] = config_redis_module_name(cfg->redis_module);
    char tls[48] = "";
    for (int i = 0; i < TLS_NLISTENERS; i++)
        if (cfg->listen_tls[i].server)
            snprintf(tls + strlen(tls), sizeof tls - strlen(tls), "%s%s", tls[0] ? "," : "",
                     tls_listener_names[i]);
    if (tls[0])
        kv[n++] = "tls", kv[n++] = tls;
    log_event(&srv->log, LOG_LVL_INFO, "ratelimitd started", "version", PACKAGE_VERSION, "commit",
              RATELIMITD_COMMIT, "policies", npol, "workers", nw, kv[0], kv[1], kv[2], kv[3], kv[4],
              kv[5], kv[6], kv[7], kv[8], kv[9], kv[10], kv[11], kv[12], kv[13], NULL);
    reload_log_warnings(srv, cfg);
    if (!cfg->admin_listen && !cfg->auth_token_file && !cfg->admin_on_listen)
        log_event(&srv->log, LOG_LVL_WARN,
                  "the admin API (/v1/keys/) is not served: listen has no auth_token_file to "
                  "guard it; set admin_listen, auth_token_file or admin_on_listen: true",
                  NULL);
    if (event_base_dispatch(srv->base) < 0) {
        fprintf(stderr, "ratelimitd: event loop failed\n");
        return -1;
    }
    log_event(&srv->log, LOG_LVL_INFO, "stopped", NULL);
    return 0;
}

/* Undoes start, however far it went: joins the workers, frees everything. */
static void stop(struct server *srv, struct main_events *ev)
{
    block_stop_signals();
    watch_free(srv->watch);
    /* The other workers end when drained (or at their drain's backstop). */
    for (size_t i = 1; i < srv->nworkers && !srv->draining; i++)
        if (srv->workers[i].has_thread)
            worker_post_drain(&srv->workers[i]);
    for (size_t i = 0; i < srv->nworkers; i++)
        worker_join(&srv->workers[i]);
    /* Drained: a hand-over's new process gets every check answered. */
    handover_finish(srv->handover);
    /* Drained: the last state_file write holds every check answered. */
    if (srv->draining && srv->backends)
        backend_registry_shared_stopped(srv->backends);
    for (size_t i = 0; i < srv->nworkers; i++) {
        struct event_base *base = srv->workers[i].core.base;
        worker_fini(&srv->workers[i]);
        if (i > 0)
            event_base_free(base);
    }
    free(srv->workers);
    if (srv->state_ev)
        event_free(srv->state_ev);
    for (int i = 0; i < 2; i++)
        if (srv->state_pipe[i] >= 0)
            close(srv->state_pipe[i]);
    backend_registry_shared_free(srv->backends);
    if (srv->sweep_ev)
        event_free(srv->sweep_ev);
    overrides_free(srv->overrides);
    handover_free(srv->handover);
    listen_fds_free(srv->sockets);
    notify_free(srv->notify);
    status_free(srv->status);
    if (ev->sigterm)
        event_free(ev->sigterm);
    if (ev->sigint)
        event_free(ev->sigint);
    if (ev->sighup)
        event_free(ev->sighup);
    if (ev->sigusr2)
        event_free(ev->sigusr2);
    if (ev->hold)
        event_free(ev->hold);
    if (srv->base)
        event_base_free(srv->base);
}

int main(int argc, char **argv)
{
    struct server srv = {.log = {.level = LOG_LVL_INFO},
                         .config_path = DEFAULT_CONFIG,
                         .cli = {.envoy_merge_domains = -1},
                         .state_pipe = {-1, -1}};
    struct options o = {0, 0};
    struct main_events ev = {NULL, NULL, NULL, NULL, NULL};
    int rc;

    srv.argv = argv;
    log_detect_journal(&srv.log);
    if ((rc = parse_options(argc, argv, &srv, &o)) >= 0)
        return rc;
    if ((rc = load(&srv, &o)) >= 0) {
        config_unref(srv.config);
        return rc;
    }
    rc = start(&srv, &ev) == 0 && run(&srv) == 0 ? 0 : 1;
    stop(&srv, &ev);
    config_unref(srv.config);
    return rc;
}
