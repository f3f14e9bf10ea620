/* SPDX-License-Identifier: Apache-2.0 */
/*
 * timer.h: a one-shot libevent timer armed for a number of microseconds,
 * with the daemon's one policy for evtimer_add failing.
 *
 * Owns the conversion to a timeval and that policy. Does not own the event
 * (the caller assigns, embeds and deletes it).
 *
 * evtimer_add on an assigned timer fails only when libevent cannot grow its
 * timer heap (out of memory) or the event base is broken. No caller could
 * keep its promise (a check's deadline, a reconnect, the watchdog's ping)
 * without the timer, and none could do better than stop: so the failure is
 * a broken invariant, reported and aborted on, as front_event_want does for
 * I/O events.
 */
#ifndef RATELIMITD_TIMER_H
#define RATELIMITD_TIMER_H

#include <stdint.h>

struct event;

/* Arms ev (an assigned timer, pending or not) to fire once after us
 * microseconds; us <= 0 fires at the next loop iteration. */
void timer_arm_us(struct event *ev, int64_t us);

#endif
