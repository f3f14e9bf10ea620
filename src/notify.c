/* SPDX-License-Identifier: Apache-2.0 */
/*
 * notify.c: sd_notify messages and the watchdog timer (see notify.h).
 */
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#ifdef HAVE_SYSTEMD
#include <systemd/sd-daemon.h>
#endif

#include "lib/timer.h"
#include "lib/util.h"
#include "notify.h"
#include "server.h"

/* How long a hand-over's old process waits for systemd to read MAINPID=. */
#define NOTIFY_BARRIER_US 5000000

struct notify {
    struct event *watchdog;
    int ready_sent; /* READY=1 sent once Redis was first ready */
    int reloading;  /* RELOADING=1 sent: the next state carries READY=1 */
};

static void notify_send(const char *msg)
{
#ifdef HAVE_SYSTEMD
    /* Failure only means no manager listens: nothing to do about it. */
    (void)sd_notify(0, msg);
#else
    (void)msg;
#endif
}

static void on_watchdog(evutil_socket_t fd, short what, void *arg)
{
    notify_send("WATCHDOG=1");
}

struct notify *notify_new(struct event_base *base)
{
    struct notify *n = xcalloc(1, sizeof *n);
#ifdef HAVE_SYSTEMD
    uint64_t usec = 0;
    if (sd_watchdog_enabled(0, &usec) > 0 && usec > 0) {
        /* Half the interval, as systemd recommends: the loop must be stuck
         * for a whole interval before systemd acts. */
        n->watchdog = event_new(base, -1, EV_PERSIST, on_watchdog, n);
        if (!n->watchdog) { /* out of memory, as xcalloc would be */
            fprintf(stderr, "ratelimitd: cannot make the watchdog's timer\n");
            abort();
        }
        timer_arm_us(n->watchdog, (int64_t)(usec / 2));
    }
#else
    (void)base;
#endif
    return n;
}

void notify_free(struct notify *n)
{
    if (!n)
        return;
    if (n->watchdog)
        event_free(n->watchdog);
    free(n);
}

void notify_state(struct notify *n, const struct server *srv)
{
    int ready = server_ready(srv);
    /* systemd waits for READY=1 after RELOADING=1 whether or not Redis is
     * up: the reload itself is over. */
    int say_ready = (ready && !n->ready_sent) || (n->reloading && n->ready_sent);
    char msg[256];
    snprintf(msg, sizeof msg, "%sSTATUS=%zu policies loaded, %s", say_ready ? "READY=1\n" : "",
             srv->config->npolicies,
             srv->config->backend == BACKEND_KIND_MEMORY ? "in-memory backend"
             : ready                                     ? "redis connected"
                                                         : "redis unavailable");
    n->ready_sent |= ready;
    n->reloading = 0;
    notify_send(msg);
}

void notify_reloading(struct notify *n)
{
    /* READY=1 must follow, at the next notify_state. */
    n->reloading = 1;
    notify_send("RELOADING=1");
}

void notify_stopping(struct notify *n)
{
    notify_send("STOPPING=1\nSTATUS=draining checks in flight");
}

void notify_mainpid(struct notify *n, long pid)
{
    char msg[64];
    snprintf(msg, sizeof msg, "MAINPID=%ld", pid);
    notify_send(msg);
#ifdef HAVE_SYSTEMD
    /* Failure (no manager, or one too old for barriers) leaves only the
     * ordering of two datagrams and an exit to chance: nothing else to do. */
    (void)sd_notify_barrier(0, NOTIFY_BARRIER_US);
#endif
}
