/* SPDX-License-Identifier: Apache-2.0 */
/*
 * listener.h: the connection plumbing every front carries, written once:
 * its listening sockets (opened with listen.h, the unix ones shared with
 * worker 0), the accept batch, the pause of accepting when descriptors run
 * out (EMFILE, ENFILE...) and its resume, the process-wide count behind
 * max_connections, the bearer token of auth_token_file, and the drain's
 * stop of accepting.
 *
 * Owns the listening sockets and the token's copy; not the connections
 * (each front's own), not the protocol.
 */
#ifndef RATELIMITD_LISTENER_H
#define RATELIMITD_LISTENER_H

#include <event2/event_struct.h>
#include <stddef.h>
#include <sys/socket.h>

#include "lib/util.h"

struct config;
struct front_host;

/* Listening sockets of one front at most (HTTP: listen and admin_listen). */
#define LISTENER_MAX_SOCKETS 2
/* Connections accepted per readable event. */
#define LISTENER_ACCEPT_BATCH 64
/* After accept() fails for want of descriptors, accepting pauses this long
 * rather than spin on a listening socket that stays readable. */
#define LISTENER_ACCEPT_RESUME_S 1

struct listener;

/* One listening socket. */
struct listener_socket {
    struct listener *l;
    int fd;         /* -1: none */
    char *path;     /* a unix socket file to unlink at the end (worker 0's), or NULL */
    unsigned roles; /* the front's: what it serves here */
    int counted;    /* its connections count towards max_connections */
    int tls;        /* enum tls_listener: the config's block that may make it TLS */
    struct event ev;
};

/* A connection was accepted on s: the front owns fd from here on. peer is
 * the client's address (family AF_UNSPEC when the kernel gave none). */
typedef void listener_accept_fn(void *arg, const struct listener_socket *s, int fd,
                                const struct sockaddr *peer);

struct listener {
    const struct front_host *host;
    listener_accept_fn *on_accept;
    void *arg;
    struct listener_socket socks[LISTENER_MAX_SOCKETS];
    size_t nsocks;
    struct event resume; /* re-enables accepting after running out of descriptors */
    size_t max_conns;    /* process-wide: counted in server.connections */
    char *token;         /* NULL: no token needed */
    size_t token_len;
    int draining;
};

/* Readies l on host's loop, with no socket yet, and applies its config
 * (listener_apply_config). Accepted connections go to on_accept(arg, ...).
 * Cannot fail. */
void listener_init(struct listener *l, const struct front_host *host, listener_accept_fn *on_accept,
                   void *arg);

/*
 * Opens a listening socket on addr (listen.h: TCP or "unix:/path"), the
 * value of the policy file's field `field` (which a failure's message
 * names first: with several listeners, the address alone does not say
 * which setting to change), with
 * cfg's socket file permissions, SO_REUSEPORT when cfg has several
 * workers; accepting starts with listener_start. first: the same front's listener on
 * worker 0, whose sockets were added in the same order (NULL on worker 0):
 * a unix socket is one file, so the other workers share worker 0's socket.
 * Returns the socket (owned by l), or NULL with a message.
 */
struct listener_socket *listener_open(struct listener *l, const struct config *cfg,
                                      const char *field, const char *addr,
                                      const struct listener *first, unsigned roles, int counted,
                                      char *err, size_t errlen) RL_WUR;

/* Starts accepting on every socket opened. Returns -1 if libevent cannot
 * watch them (the caller says so in its own words). */
int listener_start(struct listener *l) RL_WUR;

/* A reload: max_connections and the token apply, to the next connection
 * and the next request. */
void listener_apply_config(struct listener *l, const struct config *cfg);

/* A new connection on s takes its place in max_connections (one count for
 * the whole process, whichever worker accepted: SO_REUSEPORT does not
 * spread connections evenly, so a share per worker would refuse some below
 * the configured value). Returns 1 (*counted: a unit is held, give it back
 * with listener_release; 0 on a socket whose connections do not count) or
 * 0 when the process holds max_connections already: the front answers the
 * connection's first request with an error and closes it. */
int listener_admit(struct listener *l, const struct listener_socket *s, int *counted) RL_WUR;
void listener_release(struct listener *l);

/* True if value ("Bearer <token>", as a client sent it in its
 * Authorization header; NULL: none) carries the configured token, or no
 * token is configured. The comparison's time depends on the length the
 * client sent, never on the token. */
int listener_bearer_ok(const struct listener *l, const char *value, size_t len);

/* A drain: stops accepting for good. */
void listener_drain(struct listener *l);

/* Stops accepting and closes the sockets; the first worker's unix socket
 * files go with them. */
void listener_fini(struct listener *l);

#endif
