/* SPDX-License-Identifier: Apache-2.0 */
/*
 * pending.c: the life of one pending call (pending.h).
 */
#include <event2/event.h>
#include <stdlib.h>

#include "core/pending.h"
#include "lib/timer.h"

void pending_disarm(struct pending *p)
{
    if (p->armed)
        event_del(&p->deadline);
    p->armed = 0;
}

void pending_begin(struct pending *p, pending_fn on_deadline, pending_fn free_fn)
{
    p->on_deadline = on_deadline;
    p->free = free_fn;
    p->calls = 0;
    p->waiting = 1;
    p->holds = 1;
    p->armed = 0;
}

static void on_timer(evutil_socket_t fd, short what, void *arg)
{
    struct pending *p = arg;
    (void)fd;
    (void)what;
    p->armed = 0;
    p->on_deadline(p);
}

void pending_arm(struct pending *p, struct event_base *base, int64_t timeout_us)
{
    if (!p->waiting || !p->calls || timeout_us <= 0)
        return;
    if (evtimer_assign(&p->deadline, base, on_timer, p) < 0)
        abort(); /* only with a NULL base or event: a broken invariant */
    timer_arm_us(&p->deadline, timeout_us);
    p->armed = 1;
}

int pending_called(struct pending *p, int rc, struct event_base *base, int64_t timeout_us)
{
    if (rc < 0) {
        pending_completed(p);
        return -1;
    }
    pending_arm(p, base, timeout_us);
    return 0;
}

int pending_answer(struct pending *p)
{
    if (!p->waiting)
        return 0;
    p->waiting = 0;
    pending_disarm(p);
    return 1;
}

int pending_cancel(struct pending *p)
{
    if (!pending_answer(p))
        return 0;
    pending_maybe_free(p);
    return 1;
}

int pending_started(struct pending *p)
{
    p->holds--;
    if (p->waiting)
        return 1;
    pending_maybe_free(p);
    return 0;
}

void pending_maybe_free(struct pending *p)
{
    if (p->waiting || p->calls || p->holds)
        return;
    pending_disarm(p);
    p->free(p);
}
