/* SPDX-License-Identifier: Apache-2.0 */
/* timer.c: see timer.h for what it owns and why a failure aborts. */
#include "lib/timer.h"

#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>

void timer_arm_us(struct event *ev, int64_t us)
{
    if (us < 0)
        us = 0;
    struct timeval tv = {.tv_sec = (time_t)(us / 1000000), .tv_usec = (suseconds_t)(us % 1000000)};
    if (evtimer_add(ev, &tv) < 0) {
        fprintf(stderr, "ratelimitd: cannot arm a timer (out of memory, or a broken event base)\n");
        abort();
    }
}
