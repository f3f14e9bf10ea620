/* SPDX-License-Identifier: Apache-2.0 */
/*
 * front.c: what every front's connections share that is not accepting
 * (listener.c): the bookkeeping of their events on the loop.
 */
#include <event2/event.h>
#include <stdlib.h>

#include "front/front.h"

void front_event_want(struct event *ev, int *added, int want)
{
    if (want == *added)
        return;
    if ((want ? event_add(ev, NULL) : event_del(ev)) < 0)
        abort();
    *added = want;
}
