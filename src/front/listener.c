/* SPDX-License-Identifier: Apache-2.0 */
/*
 * listener.c: the connection plumbing of every front (listener.h).
 */
#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include "config/config.h"
#include "front/front.h"
#include "front/listener.h"
#include "lib/listen.h"
#include "lib/listen_fds.h"
#include "lib/timer.h"

/* Stops watching every socket (event_del fails only for an event never
 * assigned: a socket that has none is skipped). */
static void unwatch(struct listener *l)
{
    for (size_t i = 0; i < l->nsocks; i++)
        event_del(&l->socks[i].ev);
}

static int watch(struct listener *l)
{
    for (size_t i = 0; i < l->nsocks; i++)
        if (event_add(&l->socks[i].ev, NULL) < 0)
            return -1;
    return 0;
}

static void on_resume(evutil_socket_t fd, short what, void *arg)
{
    struct listener *l = arg;
    if (!l->draining && watch(l) < 0)
        abort(); /* as in front_event_want */
}

static void pause_accepting(struct listener *l)
{
    unwatch(l);
    timer_arm_us(&l->resume, LISTENER_ACCEPT_RESUME_S * 1000000);
}

static void on_accept(evutil_socket_t fd, short what, void *arg)
{
    struct listener_socket *s = arg;
    struct listener *l = s->l;
    for (int i = 0; i < LISTENER_ACCEPT_BATCH; i++) {
        struct sockaddr_storage peer;
        socklen_t peer_len = sizeof peer;
        int cfd = accept4(fd, (struct sockaddr *)&peer, &peer_len, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (cfd >= 0) {
            if (peer_len == 0 || peer_len > sizeof peer)
                peer.ss_family = AF_UNSPEC;
            l->on_accept(l->arg, s, cfd, (struct sockaddr *)&peer);
            continue;
        }
        if (errno == EINTR || errno == ECONNABORTED || errno == EPROTO)
            continue;
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
            pause_accepting(l);
        return; /* EAGAIN: none left */
    }
}

void listener_init(struct listener *l, const struct front_host *host,
                   listener_accept_fn *on_accept_fn, void *arg)
{
    *l = (struct listener){.host = host, .on_accept = on_accept_fn, .arg = arg};
    if (evtimer_assign(&l->resume, host->core->base, on_resume, l) < 0)
        abort(); /* only with bad arguments */
    listener_apply_config(l, host->core->config);
}

/* A listening socket for field's addr. One passed at start (socket
 * activation, a hand-over) comes first (*borrowed: its unix socket file is
 * systemd's, never to be removed here; a hand-over's is ours). Else every worker
 * binds its own TCP socket (SO_REUSEPORT when there are several: the kernel
 * spreads connections among them); a unix socket is one file, so workers
 * after the first share the first one's socket (shared: its descriptor, or
 * -1). A socket bound here is recorded for a hand-over. */
static int open_fd(struct listen_fds *set, const struct config *cfg, const char *field,
                   const char *addr, int shared, int *borrowed, char *err, size_t errlen)
{
    int own_file = 0;
    int fd = set ? listen_fds_take(set, field, &own_file, err, errlen) : -1;
    *borrowed = fd != -1 && !own_file;
    if (fd != -1)
        return fd < 0 ? -1 : fd;
    if (shared >= 0 && strncmp(addr, "unix:", 5) == 0) {
        fd = fcntl(shared, F_DUPFD_CLOEXEC, 0);
        if (fd < 0)
            snprintf(err, errlen, "%s: %s", addr, strerror(errno));
        return fd;
    }
    const struct listen_perm perm = {
        .mode = cfg->listen_mode, .gid = cfg->listen_gid, .group = cfg->listen_group};
    fd = listen_open(addr, cfg->workers != 1, &perm, err, errlen);
    if (fd >= 0 && set && listen_fds_add(set, field, fd, err, errlen) < 0) {
        listen_close(fd, addr);
        return -1;
    }
    return fd;
}

struct listener_socket *listener_open(struct listener *l, const struct config *cfg,
                                      const char *field, const char *addr,
                                      const struct listener *first, unsigned roles, int counted,
                                      char *err, size_t errlen)
{
    if (l->nsocks == LISTENER_MAX_SOCKETS)
        abort(); /* a front opening more sockets than it said: a bug */
    int shared = first && l->nsocks < first->nsocks ? first->socks[l->nsocks].fd : -1;
    char msg[RL_ERRLEN * 2];
    int borrowed;
    int fd = open_fd(l->host->sockets, cfg, field, addr, shared, &borrowed, msg, sizeof msg);
    if (fd < 0) {
        snprintf(err, errlen, "%s: %s", field, msg);
        return NULL;
    }
    struct listener_socket *s = &l->socks[l->nsocks++];
    /* The first worker's socket file goes with it; the others share it.
     * systemd's stays. */
    *s = (struct listener_socket){.l = l,
                                  .fd = fd,
                                  .path = first || borrowed ? NULL : xstrdup(addr),
                                  .roles = roles,
                                  .counted = counted};
    if (event_assign(&s->ev, l->host->core->base, fd, EV_READ | EV_PERSIST, on_accept, s) < 0)
        abort(); /* only with bad arguments */
    return s;
}

int listener_start(struct listener *l)
{
    return watch(l);
}

void listener_apply_config(struct listener *l, const struct config *cfg)
{
    l->max_conns = (size_t)cfg->max_connections;
    if (l->token) {
        explicit_bzero(l->token, l->token_len);
        free(l->token);
    }
    l->token = cfg->auth_token ? xstrdup(cfg->auth_token) : NULL;
    l->token_len = l->token ? strlen(l->token) : 0;
}

int listener_admit(struct listener *l, const struct listener_socket *s, int *counted)
{
    *counted = 0;
    /* Only the sockets that count: callers filling the check port must not
     * lock out health probes and scrapes on admin_listen. */
    if (!s->counted)
        return 1;
    if (!core_count_take(l->host->connections, l->max_conns))
        return 0;
    *counted = 1;
    return 1;
}

void listener_release(struct listener *l)
{
    core_count_release(l->host->connections);
}

int listener_bearer_ok(const struct listener *l, const char *value, size_t len)
{
    if (!l->token)
        return 1;
    if (!value || len < 7 || strncasecmp(value, "Bearer ", 7) != 0)
        return 0;
    return util_consttime_equal(value + 7, len - 7, l->token, l->token_len);
}

void listener_drain(struct listener *l)
{
    l->draining = 1;
    unwatch(l);
    event_del(&l->resume);
}

void listener_fini(struct listener *l)
{
    unwatch(l);
    event_del(&l->resume);
    /* After a hand-over the socket files are the next process's. */
    int keep = l->host->sockets && listen_fds_is_handed_over(l->host->sockets);
    for (size_t i = 0; i < l->nsocks; i++) {
        listen_close(l->socks[i].fd, keep ? NULL : l->socks[i].path);
        free(l->socks[i].path);
    }
    l->nsocks = 0;
    if (l->token) {
        explicit_bzero(l->token, l->token_len);
        free(l->token);
    }
    l->token = NULL;
}
