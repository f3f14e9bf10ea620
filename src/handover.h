/* SPDX-License-Identifier: Apache-2.0 */
/*
 * handover.h: the USR2 hand-over, as nginx's binary upgrade. The old
 * process starts the binary now at the path it was started from, with the
 * same arguments, passing it every listening socket (listen_fds.h, as
 * LISTEN_FDS with LISTEN_PID set to the new process) and the write end of
 * a socket. The new process takes the sockets, starts, and once ready (the
 * moment it would send READY=1) writes one byte on it: only then does
 * the old tell systemd the new one is the main PID (MAINPID=, sent by the
 * main PID itself: NotifyAccess=main suffices), stop accepting, drain and
 * exit. With backend: memory the byte asks for the counters too: the old
 * process then drains first and writes its store's image on the same
 * socket (a socketpair), which the new one loads before it accepts: every
 * check is decided in one store or the other, never both, and no
 * connection is refused (they wait in the sockets' backlog). The socket
 * closing without that byte (a bad policy file, a crash, a
 * binary that cannot run) leaves the old serving, with the reason in the
 * log; so does a new process not ready within HANDOVER_TIMEOUT_S (it is
 * stopped). A USR2 during a hand-over or a drain is refused.
 *
 * Owns the child's start, the socketpair and the sequence; not the sockets
 * (listen_fds.c), not the drain (main.c's, through on_done).
 */
#ifndef RATELIMITD_HANDOVER_H
#define RATELIMITD_HANDOVER_H

struct event_base;
struct listen_fds;
struct logger;
struct notify;

/* How long a new process may take to become ready. */
#define HANDOVER_TIMEOUT_S 60

struct handover;

/* What a hand-over works with: all borrowed, living as long as it does.
 * on_done(arg): the new process is ready; this one stops accepting. */
struct handover_env {
    struct event_base *base;
    const struct logger *log;
    struct listen_fds *sockets;
    struct notify *notify;
    char *const *argv; /* as main received it */
    void (*on_done)(void *arg);
    /* The counters' halves (backend/registry.h): the old process's store
     * written to fd, the new one's filled from it. */
    int (*dump)(void *arg, int fd, char *err, size_t errlen);
    int (*load)(void *arg, int fd, size_t *loaded, char *err, size_t errlen);
    void *arg;
};

/*
 * Records the binary's path as this process was started (argv[0] made
 * absolute, else /proc/self/exe's target: the path, not the inode, so that
 * a binary replaced by an upgrade is the one started), and takes the socket
 * of an old process that started this one, if any (the variable
 * RATELIMITD_HANDOVER_FD, removed). Never fails.
 */
struct handover *handover_new(const struct handover_env *env);
void handover_free(struct handover *h); /* NULL is a no-op */

/* SIGUSR2: starts a hand-over, or says in the log why not. */
void handover_start(struct handover *h);

/* This process is ready: if an old one started it, tells it to go. Once;
 * later calls do nothing. want_store (backend: memory): first asks for the
 * old one's counters, and waits until it has drained and sent them (a
 * failure is a warning: this process starts without them). */
void handover_ready(struct handover *h, int want_store);

/* At the end of this process's drain, after every worker's last check: the
 * store's image to the new process, if it asked. NULL is a no-op. */
void handover_finish(struct handover *h);

/* True if an old process started this one and waits for it to be ready. */
int handover_expected(const struct handover *h);

#endif
