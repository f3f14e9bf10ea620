/* SPDX-License-Identifier: Apache-2.0 */
/*
 * pending.h: the life of one call the core makes on behalf of a front (a
 * check, a key reset), written once. Such a call has two reasons to live:
 * the answer the front waits for, and the backend calls not yet completed
 * (whose callbacks still point to it). It is freed in one place when both
 * are over, and never while a frame that uses it still runs (the starter,
 * or a frame calling a backend that may complete within the call: such a
 * frame holds it, pending_hold, since it still reads the struct after).
 *
 * A struct pending is embedded first in the call's own struct; the owner
 * supplies what to do at the deadline (answer per its failure rule) and how
 * to free itself. Owns: the deadline timer, the exactly-once answer flag,
 * cancel and the moment of freeing. Does not own: what the answer is, the
 * backend, or anything the owner holds.
 */
#ifndef RATELIMITD_PENDING_H
#define RATELIMITD_PENDING_H

#include <event2/event_struct.h>
#include <stdint.h>

#include "lib/util.h"

struct pending;
typedef void (*pending_fn)(struct pending *p);

struct pending {
    struct event deadline;
    pending_fn on_deadline; /* the deadline passed while waiting: answer */
    pending_fn free;        /* frees the struct p is embedded in */
    unsigned calls;         /* backend calls not yet completed */
    int waiting;            /* the front waits for the answer */
    unsigned holds;         /* frames still using p (the starter, a nested
                             * synchronous call): not freed before they end */
    int armed;              /* the deadline timer is pending */
};

/* Begins a call: waiting, held by its starter (pending_started). */
void pending_begin(struct pending *p, pending_fn on_deadline, pending_fn free);

/* A backend call was made (its completion calls pending_completed). */
static inline void pending_call(struct pending *p)
{
    p->calls++;
}

/* A frame that may see a backend complete within it holds p around that
 * (nothing frees p meanwhile); the frame's caller frees it after. */
static inline void pending_hold(struct pending *p)
{
    p->holds++;
}

static inline void pending_unhold(struct pending *p)
{
    p->holds--;
}

/* One backend call completed. The caller then answers if p->waiting, and
 * ends with pending_maybe_free. */
static inline void pending_completed(struct pending *p)
{
    p->calls--;
}

/* Arms the deadline timeout_us from now on base, if the front still waits
 * for a call not yet completed and timeout_us > 0. */
void pending_arm(struct pending *p, struct event_base *base, int64_t timeout_us);

/* Ends the start of one backend call: rc is what the backend's call
 * returned after pending_call. On -1 its callback never runs: the call is
 * taken back (pending_completed) and -1 returned, for the caller to answer
 * without the backend. On 0 the deadline is armed (pending_arm) and 0
 * returned. */
int pending_called(struct pending *p, int rc, struct event_base *base, int64_t timeout_us) RL_WUR;

/* Stops the deadline, if armed (a call that arms it again next). */
void pending_disarm(struct pending *p);

/* Claims the one answer: returns 1 (the caller answers now; the deadline is
 * disarmed) or 0 (answered or cancelled already: nothing to do). */
int pending_answer(struct pending *p);

/* The front no longer wants the answer: returns 1 if it was waiting (the
 * call is then freed once its backend calls complete), else 0. */
int pending_cancel(struct pending *p);

/* The starter returns (its hold ends): returns 1 if the front still waits
 * (the front gets a handle), else 0, p being freed if nothing else needs
 * it. */
int pending_started(struct pending *p);

/* Frees the call once nothing can reach it any more: not waiting, no
 * backend call pending, no frame holding it. Every completion callback ends
 * with it; nothing may touch p afterwards. */
void pending_maybe_free(struct pending *p);

#endif
