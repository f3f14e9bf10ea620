/* SPDX-License-Identifier: Apache-2.0 */
/*
 * handover.c: the USR2 hand-over (handover.h).
 */
#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "handover.h"
#include "lib/listen_fds.h"
#include "lib/log.h"
#include "lib/timer.h"
#include "lib/util.h"
#include "notify.h"

extern char **environ;

/* What the new process writes on the socket: ready, or exec failed (then an
 * int, the errno). */
#define HANDOVER_READY 'R'
/* Ready, and wants the counters: the old one drains first, then writes its
 * store's image on the socket and closes it. */
#define HANDOVER_READY_SEND 'S'
#define HANDOVER_EXEC_FAILED 'E'
/* sd_listen_fds(3): the first passed descriptor. */
#define FIRST_FD 3
/* How long a new process that closed its socket may take to be reaped. */
#define HANDOVER_REAP_MS 2000
/* Room for a pid's digits in a variable the child fills. */
#define PID_DIGITS 20

struct handover {
    struct handover_env env;
    char path[2 * PATH_MAX + 2]; /* a directory, a slash, argv[0] */
    int parent_fd;               /* the old process's socket, when it started this one; else -1 */
    pid_t child;                 /* the new process while it starts; 0: none */
    int done;                    /* handed over: this process is draining */
    int store_fd; /* the socket the drained store goes to (handover_finish); else -1 */
    struct event *sock_ev, *timeout;
};

/* The binary's path: argv[0] if it names a file (made absolute: the child
 * runs from the same directory, but a path is said in the log), else the
 * path /proc/self/exe points to now, at start. */
static void record_path(struct handover *h, const char *argv0)
{
    char cwd[PATH_MAX];
    if (argv0 && argv0[0] == '/')
        snprintf(h->path, sizeof h->path, "%s", argv0);
    else if (argv0 && strchr(argv0, '/') && getcwd(cwd, sizeof cwd))
        snprintf(h->path, sizeof h->path, "%s/%s", cwd, argv0);
    else {
        ssize_t n = readlink("/proc/self/exe", h->path, sizeof h->path - 1);
        h->path[n > 0 ? n : 0] = '\0';
    }
}

struct handover *handover_new(const struct handover_env *env)
{
    struct handover *h = xcalloc(1, sizeof *h);
    h->env = *env;
    h->parent_fd = h->store_fd = -1;
    record_path(h, env->argv[0]);
    const char *fd = getenv("RATELIMITD_HANDOVER_FD");
    char *end;
    long v = fd ? strtol(fd, &end, 10) : -1;
    if (fd && *end == '\0' && v >= FIRST_FD && v < INT_MAX &&
        fcntl((int)v, F_SETFD, FD_CLOEXEC) == 0)
        h->parent_fd = (int)v;
    unsetenv("RATELIMITD_HANDOVER_FD");
    return h;
}

static void stop_watching(struct handover *h)
{
    if (h->sock_ev) {
        close(event_get_fd(h->sock_ev));
        event_free(h->sock_ev);
    }
    if (h->timeout)
        event_free(h->timeout);
    h->sock_ev = h->timeout = NULL;
}

void handover_free(struct handover *h)
{
    if (!h)
        return;
    stop_watching(h);
    if (h->parent_fd >= 0)
        close(h->parent_fd);
    if (h->store_fd >= 0)
        close(h->store_fd);
    free(h);
}

int handover_expected(const struct handover *h)
{
    return h->parent_fd >= 0;
}

/* A hand-over that did not happen: the new process's end, said in the log
 * (its own messages, on the same stderr, say more). */
static void failed(struct handover *h, const char *why)
{
    char pid[24];
    snprintf(pid, sizeof pid, "%ld", (long)h->child);
    log_event(h->env.log, LOG_LVL_ERROR, "hand-over failed, this process keeps serving", "new_pid",
              pid, "binary", h->path, "reason", why, NULL);
    stop_watching(h);
    h->child = 0;
}

/* The socket closed without the ready byte: how the new process ended. It
 * closes the socket by exiting, so its status comes within moments; one
 * still running after HANDOVER_REAP_MS closed it some other way, and is
 * killed: two processes must not serve on with nobody draining. */
static void ended(struct handover *h)
{
    int st = 0;
    char why[96] = "closed the socket before it was ready (killed)";
    pid_t got = 0;
    for (int i = 0; i < HANDOVER_REAP_MS && got == 0; i++)
        if ((got = waitpid(h->child, &st, WNOHANG)) == 0)
            (void)usleep(1000);
    if (got == 0 && kill(h->child, SIGKILL) == 0)
        (void)waitpid(h->child, NULL, 0); /* a SIGKILL ends it: why says so */
    if (got == h->child) {
        if (WIFEXITED(st))
            snprintf(why, sizeof why, "exited with status %d before it was ready", WEXITSTATUS(st));
        else if (WIFSIGNALED(st))
            snprintf(why, sizeof why, "killed by signal %d before it was ready", WTERMSIG(st));
    }
    failed(h, why);
}

static void on_sock(evutil_socket_t fd, short what, void *arg)
{
    struct handover *h = arg;
    char buf[1 + sizeof(int)];
    ssize_t n = read(fd, buf, sizeof buf);
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return;
    if (n > 0 && (buf[0] == HANDOVER_READY || buf[0] == HANDOVER_READY_SEND)) {
        char pid[24];
        snprintf(pid, sizeof pid, "%ld", (long)h->child);
        log_event(h->env.log, LOG_LVL_INFO, "hand-over: the new process is ready; draining",
                  "new_pid", pid, "counters", buf[0] == HANDOVER_READY_SEND ? "sent" : "none",
                  NULL);
        /* systemd must know the new main PID before this one exits. */
        notify_mainpid(h->env.notify, (long)h->child);
        if (buf[0] == HANDOVER_READY_SEND) /* kept open past stop_watching */
            h->store_fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
        stop_watching(h);
        h->child = 0;
        h->done = 1;
        listen_fds_handed_over(h->env.sockets);
        h->env.on_done(h->env.arg);
        return;
    }
    if (n == (ssize_t)sizeof buf && buf[0] == HANDOVER_EXEC_FAILED) {
        int e;
        memcpy(&e, buf + 1, sizeof e);
        char why[128];
        snprintf(why, sizeof why, "cannot run the binary: %s", strerror(e));
        (void)waitpid(h->child, NULL, 0); /* it _exits right after */
        failed(h, why);
        return;
    }
    ended(h);
}

static void on_timeout(evutil_socket_t fd, short what, void *arg)
{
    struct handover *h = arg;
    /* Stopped: the socket's end then says how (ended). */
    (void)kill(h->child, SIGTERM);
    log_event(h->env.log, LOG_LVL_ERROR,
              "hand-over: the new process is not ready in time; stopping it", NULL);
}

/* "NAME=" followed by room for a pid, which the child writes. */
static char *pid_var(const char *name)
{
    size_t len = strlen(name);
    char *v = xcalloc(len + PID_DIGITS + 2, 1);
    memcpy(v, name, len);
    v[len] = '=';
    return v;
}

/* In the child, between fork and exec: no allocation, no locks. */
static void put_pid(char *var, pid_t pid)
{
    char digits[PID_DIGITS];
    size_t n = 0;
    do
        digits[n++] = (char)('0' + pid % 10);
    while ((pid /= 10) > 0);
    char *p = strchr(var, '=') + 1;
    while (n > 0)
        *p++ = digits[--n];
    *p = '\0';
}

/* The environment the new process gets: this one's, less what named this
 * process's sockets and watchdog, plus its own (pid variables filled in the
 * child). */
struct child_env {
    char **vars;
    char *listen_pid, *watchdog_pid; /* watchdog_pid: NULL if no watchdog */
};

static int skipped(const char *var)
{
    static const char *const names[] = {"LISTEN_PID=", "LISTEN_FDS=", "LISTEN_FDNAMES=",
                                        "WATCHDOG_PID=", "RATELIMITD_HANDOVER_FD="};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strncmp(var, names[i], strlen(names[i])) == 0)
            return 1;
    return 0;
}

static void child_env_make(struct child_env *ce, const struct listen_fds *s)
{
    size_t n = 0, k = listen_fds_count(s), names_len = 0;
    while (environ[n])
        n++;
    ce->vars = xcalloc(n + 6, sizeof *ce->vars);
    size_t j = 0;
    for (size_t i = 0; i < n; i++)
        if (!skipped(environ[i]))
            ce->vars[j++] = xstrdup(environ[i]);
    for (size_t i = 0; i < k; i++)
        names_len += strlen(listen_fds_field(s, i)) + 1;
    char *names = xcalloc(names_len + sizeof "LISTEN_FDNAMES=", 1);
    strcpy(names, "LISTEN_FDNAMES=");
    for (size_t i = 0; i < k; i++)
        sprintf(names + strlen(names), "%s%s", i ? ":" : "", listen_fds_field(s, i));
    ce->vars[j++] = names;
    ce->vars[j] = xcalloc(48, 1);
    snprintf(ce->vars[j++], 48, "LISTEN_FDS=%zu", k);
    ce->vars[j] = xcalloc(48, 1);
    snprintf(ce->vars[j++], 48, "RATELIMITD_HANDOVER_FD=%zu", FIRST_FD + k);
    ce->vars[j++] = ce->listen_pid = pid_var("LISTEN_PID");
    ce->watchdog_pid = getenv("WATCHDOG_USEC") ? pid_var("WATCHDOG_PID") : NULL;
    ce->vars[j] = ce->watchdog_pid;
}

static void child_env_free(struct child_env *ce)
{
    for (size_t i = 0; ce->vars[i]; i++)
        free(ce->vars[i]);
    free(ce->vars);
}

/* In the child: the sockets at 3.., the socket after them, nothing else
 * open beyond (a Redis connection must not outlive its owner in the new
 * process), then the binary. Only async-signal-safe calls. */
static void run_child(const struct handover *h, const struct child_env *ce, const int *fds,
                      size_t k, int sock_w)
{
    int above = (int)(FIRST_FD + k + 1), copies[LISTEN_FDS_MAX + 1];
    for (size_t i = 0; i <= k; i++)
        if ((copies[i] = fcntl(i < k ? fds[i] : sock_w, F_DUPFD, above)) < 0)
            goto fail;
    for (size_t i = 0; i <= k; i++)
        if (dup2(copies[i], (int)(FIRST_FD + i)) < 0)
            goto fail;
    (void)close_range((unsigned)above, ~0U, 0);
    put_pid(ce->listen_pid, getpid());
    if (ce->watchdog_pid)
        put_pid(ce->watchdog_pid, getpid());
    sigset_t none;
    sigemptyset(&none);
    (void)sigprocmask(SIG_SETMASK, &none, NULL);
    execve(h->path, h->env.argv, ce->vars);
fail:;
    char msg[1 + sizeof(int)] = {HANDOVER_EXEC_FAILED};
    int e = errno;
    memcpy(msg + 1, &e, sizeof e);
    (void)!write(FIRST_FD + (int)k, msg, sizeof msg);
    _exit(127);
}

void handover_start(struct handover *h)
{
    if (h->child || h->done || h->parent_fd >= 0) {
        log_event(h->env.log, LOG_LVL_WARN, "SIGUSR2 refused: a hand-over is under way", "state",
                  h->child  ? "starting a new process"
                  : h->done ? "handed over, draining"
                            : "not yet ready itself",
                  NULL);
        return;
    }
    const struct listen_fds *s = h->env.sockets;
    size_t k = listen_fds_count(s);
    int fds[LISTEN_FDS_MAX], p[2];
    for (size_t i = 0; i < k; i++)
        fds[i] = listen_fds_fd(s, i);
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, p) < 0) {
        failed(h, strerror(errno));
        return;
    }
    struct child_env ce;
    child_env_make(&ce, s);
    pid_t pid = fork();
    if (pid == 0)
        run_child(h, &ce, fds, k, p[1]);
    int fork_errno = errno;
    child_env_free(&ce);
    close(p[1]);
    if (pid < 0) {
        close(p[0]);
        failed(h, strerror(fork_errno));
        return;
    }
    h->child = pid;
    char spid[24];
    snprintf(spid, sizeof spid, "%ld", (long)pid);
    log_event(h->env.log, LOG_LVL_INFO, "SIGUSR2: handing over to a new process", "new_pid", spid,
              "binary", h->path, NULL);
    h->sock_ev = event_new(h->env.base, p[0], EV_READ | EV_PERSIST, on_sock, h);
    h->timeout = evtimer_new(h->env.base, on_timeout, h);
    if (!h->sock_ev || !h->timeout || event_add(h->sock_ev, NULL) < 0)
        abort(); /* out of memory, as xcalloc would be */
    timer_arm_us(h->timeout, (int64_t)HANDOVER_TIMEOUT_S * 1000000);
}

void handover_finish(struct handover *h)
{
    if (!h || h->store_fd < 0)
        return;
    char err[RL_ERRLEN];
    if (h->env.dump(h->env.arg, h->store_fd, err, sizeof err) < 0)
        log_event(h->env.log, LOG_LVL_ERROR,
                  "hand-over: the counters could not be sent; the new process starts without them",
                  "error", err, NULL);
    close(h->store_fd);
    h->store_fd = -1;
}

/* Asks the old process for its counters and waits for them: it drains
 * first (nobody accepts meanwhile; connections wait in the backlog), so the
 * image holds every check it answered, and none is decided twice. */
static void receive_store(struct handover *h)
{
    char b = HANDOVER_READY_SEND, err[RL_ERRLEN], n[24];
    size_t loaded = 0;
    if (write(h->parent_fd, &b, 1) != 1 || shutdown(h->parent_fd, SHUT_WR) < 0) {
        log_event(h->env.log, LOG_LVL_WARN, "hand-over: cannot tell the old process to go", "error",
                  strerror(errno), NULL);
        return;
    }
    if (h->env.load(h->env.arg, h->parent_fd, &loaded, err, sizeof err) < 0) {
        log_event(h->env.log, LOG_LVL_WARN,
                  "hand-over: no counters from the old process; starting without them", "error",
                  err, NULL);
        return;
    }
    snprintf(n, sizeof n, "%zu", loaded);
    log_event(h->env.log, LOG_LVL_INFO, "hand-over: counters received", "entries", n, NULL);
}

void handover_ready(struct handover *h, int want_store)
{
    if (h->parent_fd < 0)
        return;
    char b = HANDOVER_READY;
    if (want_store)
        receive_store(h);
    else if (write(h->parent_fd, &b, 1) != 1)
        log_event(h->env.log, LOG_LVL_WARN, "hand-over: cannot tell the old process to go", "error",
                  strerror(errno), NULL);
    close(h->parent_fd);
    h->parent_fd = -1;
}
