/* SPDX-License-Identifier: Apache-2.0 */
/*
 * conn.h: what a front's connection is on its socket, whatever the
 * protocol: the descriptor and its bytes (plain or TLS, tls.h), the read
 * and write events and the one timer, and the way a connection ends: its
 * side shut once the last answer is written, then what the peer still
 * sends read and dropped for a while (lingering), because closing with
 * unread input makes the kernel reset the connection and the peer would
 * lose the last answer.
 *
 * Each front's connection embeds one struct front_conn and keeps its own
 * protocol state beside it (http.c, grpc.c).
 *
 * Owns the socket's events, the TLS layer's life, reading and writing
 * with their retries, the shutdown, and when the timer is armed; not when
 * a connection must close, what its timer stands for, or what its bytes
 * mean (the fronts).
 */
#ifndef RATELIMITD_FRONT_CONN_H
#define RATELIMITD_FRONT_CONN_H

#include <event2/event.h>
#include <event2/event_struct.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "front/listener.h"
#include "front/tls.h"
#include "lib/util.h"

struct core;

struct front_conn {
    int fd;
    struct front_io io; /* fd's bytes, plain or TLS */
    struct event rd, wr, timer;
    int reading, writing; /* rd, wr added (front_event_want) */
    int lingering;        /* written and shut down: dropping what the peer sends */
    int64_t linger_until_us;
    int64_t last_us;  /* monotonic: last bytes written (and read, as the front says) */
    int64_t timer_at; /* the deadline timer is armed for (monotonic); 0: not armed */
};

/* fd, accepted on s, with its events on core's loop calling on_read,
 * on_write and on_timer with arg, and its TLS layer made with the context
 * of the snapshot in force now (a reload's serves only the connections
 * accepted after it). Cannot fail: event_assign fails only for bad
 * arguments (aborts). */
void front_conn_init(struct front_conn *fc, const struct core *core,
                     const struct listener_socket *s, int fd, event_callback_fn on_read,
                     event_callback_fn on_write, event_callback_fn on_timer, void *arg);

/* Removes the events, frees the TLS layer, closes fd. */
void front_conn_fini(struct front_conn *fc);

enum front_conn_read {
    FRONT_CONN_DATA,    /* *n bytes of plaintext */
    FRONT_CONN_NOTHING, /* nothing now (maybe only a handshake moved) */
    FRONT_CONN_END,     /* the peer ended its stream */
    FRONT_CONN_BROKEN,  /* an error: the connection is of no more use */
};

/* Reads at most len bytes into buf. When only a handshake moved, the
 * write event is added if its answer still waits for the socket. */
enum front_conn_read front_conn_read(struct front_conn *fc, void *buf, size_t len,
                                     size_t *n) RL_WUR;

/* Sends what the socket takes of data[0..len) (len > 0), again after a
 * signal. Returns the count taken (> 0, and last_us is now), 0 when the
 * socket takes nothing now, -1 when the connection broke. */
ssize_t front_conn_send(struct front_conn *fc, const void *data, size_t len) RL_WUR;

/* Everything is written: shuts our side (a TLS close_notify first) and
 * starts lingering for linger_us. Returns -1 if the socket is gone (the
 * caller frees the connection). */
int front_conn_linger(struct front_conn *fc, int64_t linger_us) RL_WUR;

/* Arms the timer for deadline (monotonic µs; 0: none), unless it is armed
 * for an earlier one: then it fires early, and the front's on_timer asks
 * front_conn_timer_due. A keep-alive connection's deadline moves forward
 * on every request: arming once per idle period instead of once or twice
 * per request saves a libevent heap update each time (callgrind), as
 * nginx's lazy timers do. */
void front_conn_arm(struct front_conn *fc, int64_t deadline);

/* In the front's on_timer, with the deadline the timer stands for now (0:
 * none): 1 if it has come (the front acts), else 0, the timer armed again
 * for it if there is one. */
int front_conn_timer_due(struct front_conn *fc, int64_t deadline);

/* Asks for the read and write events as wanted, then runs the read event
 * now if TLS holds plaintext the socket will not announce. */
void front_conn_want(struct front_conn *fc, int want_read, int want_write);

#endif
