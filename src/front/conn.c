/* SPDX-License-Identifier: Apache-2.0 */
/*
 * conn.c: a front's connection on its socket (conn.h): the part of the
 * HTTP and gRPC fronts' connections that does not depend on the protocol.
 */
#include <errno.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include "config/config.h"
#include "core/core.h"
#include "front/conn.h"
#include "front/front.h"
#include "lib/timer.h"

void front_conn_init(struct front_conn *fc, const struct core *core,
                     const struct listener_socket *s, int fd, event_callback_fn on_read,
                     event_callback_fn on_write, event_callback_fn on_timer, void *arg)
{
    fc->fd = fd;
    if (event_assign(&fc->rd, core->base, fd, EV_READ | EV_PERSIST, on_read, arg) < 0 ||
        event_assign(&fc->wr, core->base, fd, EV_WRITE | EV_PERSIST, on_write, arg) < 0 ||
        evtimer_assign(&fc->timer, core->base, on_timer, arg) < 0)
        abort(); /* only with bad arguments */
    front_io_init(&fc->io, fd, core->config->listen_tls[s->tls].server, (enum tls_listener)s->tls,
                  &fc->rd, core);
    fc->last_us = util_monotonic_us();
}

void front_conn_fini(struct front_conn *fc)
{
    /* event_del fails only for an event never assigned; close only on a
     * bad descriptor: neither can happen here. */
    event_del(&fc->rd);
    event_del(&fc->wr);
    event_del(&fc->timer);
    front_io_fini(&fc->io);
    close(fc->fd);
}

enum front_conn_read front_conn_read(struct front_conn *fc, void *buf, size_t len, size_t *n)
{
    ssize_t got = front_io_recv(&fc->io, buf, len);
    if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
        /* Only a handshake moved, its answer maybe still to write. */
        if (front_io_pending(&fc->io))
            front_event_want(&fc->wr, &fc->writing, 1);
        return FRONT_CONN_NOTHING;
    }
    if (got < 0)
        return FRONT_CONN_BROKEN;
    if (got == 0)
        return FRONT_CONN_END;
    *n = (size_t)got;
    return FRONT_CONN_DATA;
}

ssize_t front_conn_send(struct front_conn *fc, const void *data, size_t len)
{
    for (;;) {
        ssize_t n = front_io_send(&fc->io, data, len);
        if (n > 0) {
            fc->last_us = util_monotonic_us();
            return n;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return 0;
        return -1;
    }
}

int front_conn_linger(struct front_conn *fc, int64_t linger_us)
{
    front_io_shutdown(&fc->io);
    if (shutdown(fc->fd, SHUT_WR) < 0)
        return -1;
    fc->lingering = 1;
    fc->linger_until_us = util_monotonic_us() + linger_us;
    return 0;
}

void front_conn_arm(struct front_conn *fc, int64_t deadline)
{
    if (deadline == 0 || (fc->timer_at && fc->timer_at <= deadline))
        return;
    timer_arm_us(&fc->timer, deadline - util_monotonic_us());
    fc->timer_at = deadline;
}

int front_conn_timer_due(struct front_conn *fc, int64_t deadline)
{
    fc->timer_at = 0;
    if (deadline == 0)
        return 0;
    if (deadline > util_monotonic_us()) {
        front_conn_arm(fc, deadline);
        return 0;
    }
    return 1;
}

void front_conn_want(struct front_conn *fc, int want_read, int want_write)
{
    front_event_want(&fc->wr, &fc->writing, want_write);
    front_event_want(&fc->rd, &fc->reading, want_read);
    front_io_kick(&fc->io);
}
