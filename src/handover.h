/* SPDX-License-Identifier: Apache-2.0 */
/*
 * handover.h: the USR2 hand-over, as nginx's binary upgrade. The old
 * process starts the binary now at the path it was started from, with the
 * same arguments, passing it every listening socket (listen_fds.h, as
 * LISTEN_FDS with LISTEN_PID set to the new process) and the write end of
 * a pipe. The new process takes the sockets, starts, and once ready (the
 * moment it would send READY=1) writes one byte on the pipe: only then does
 * the old tell systemd the new one is the main PID (MAINPID=, sent by the
 * main PID itself: NotifyAccess=main suffices), stop accepting, drain and
 * exit. The pipe closing without that byte (a bad policy file, a crash, a
 * binary that cannot run) leaves the old serving, with the reason in the
 * log; so does a new process not ready within HANDOVER_TIMEOUT_S (it is
 * stopped). A USR2 during a hand-over or a drain is refused.
 *
 * Owns the child's start, the pipe and the sequence; not the sockets
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
    void *arg;
};

/*
 * Records the binary's path as this process was started (argv[0] made
 * absolute, else /proc/self/exe's target: the path, not the inode, so that
 * a binary replaced by an upgrade is the one started), and takes the pipe
 * of an old process that started this one, if any (the variable
 * RATELIMITD_HANDOVER_FD, removed). Never fails.
 */
struct handover *handover_new(const struct handover_env *env);
void handover_free(struct handover *h); /* NULL is a no-op */

/* SIGUSR2: starts a hand-over, or says in the log why not. */
void handover_start(struct handover *h);

/* This process is ready: if an old one started it, tells it to go. Once;
 * later calls do nothing. */
void handover_ready(struct handover *h);

/* True if an old process started this one and waits for it to be ready. */
int handover_expected(const struct handover *h);

#endif
