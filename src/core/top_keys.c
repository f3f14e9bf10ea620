/* SPDX-License-Identifier: Apache-2.0 */
/*
 * top_keys.c: a loop's sketches of the current minute per policy, fed
 * after each decision and handed to the backend by a timer (top_keys.h).
 * The hand-over is the tick's, never a check's: a check only adds to two
 * sketches it finds by its policy's place in the snapshot.
 */
#include <event2/event.h>
#include <stdlib.h>
#include <string.h>

#include "core/backend.h"
#include "core/top_keys.h"
#include "lib/buf.h"
#include "lib/timer.h"

struct top_policy {
    char *name;
    struct space_saving *denied, *used;
    int64_t minute; /* the minute the sketches are of */
    int dirty;      /* counted since the last hand-over */
};

struct top_keys {
    struct core *core;
    struct event *tick;
    char *member;
    uint64_t seed;
    const struct config *cfg; /* the snapshot pol[] follows (core's reference) */
    size_t npol;
    struct top_policy *pol;
    struct buf out; /* the hand-over's text, kept: no allocation once grown */
};

static int64_t minute_now(void)
{
    return util_realtime_us() / 60000000;
}

void top_keys_window(int64_t now_us, int minutes, int64_t *lo, int64_t *hi)
{
    *hi = now_us / 60000000;
    *lo = *hi - minutes;
}

size_t top_keys_bytes_per_policy(void)
{
    return 2 * space_saving_bytes(TOP_KEYS_CAP) + sizeof(struct top_policy);
}

static void policy_free(struct top_policy *tp)
{
    free(tp->name);
    space_saving_free(tp->denied);
    space_saving_free(tp->used);
}

/* Hands tp's sketches over as of its minute. */
static void hand_over(struct top_keys *t, struct top_policy *tp)
{
    struct backend *b = t->core->backend;
    if (!b->ops->top_put)
        return;
    t->out.len = 0;
    space_saving_write(tp->denied, &t->out);
    space_saving_write(tp->used, &t->out);
    /* Not sent: the sketches stay dirty for the next tick. */
    if (b->ops->top_put(b, t->core->config, tp->name, tp->minute, t->member, t->out.data,
                        t->out.len) == 0)
        tp->dirty = 0;
}

/* Once a second: the changed sketches handed over; a minute that ended is
 * handed over a last time and its sketches start again. */
static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what;
    struct top_keys *t = arg;
    int64_t now = minute_now();
    for (size_t i = 0; i < t->npol; i++) {
        struct top_policy *tp = &t->pol[i];
        if (tp->dirty)
            hand_over(t, tp);
        if (tp->minute != now) {
            space_saving_clear(tp->denied);
            space_saving_clear(tp->used);
            tp->minute = now;
            tp->dirty = 0;
        }
    }
    timer_arm_us(t->tick, TOP_KEYS_TICK_US);
}

void top_keys_flush(struct top_keys *t)
{
    for (size_t i = 0; t && i < t->npol; i++)
        if (t->pol[i].dirty)
            hand_over(t, &t->pol[i]);
}

void top_keys_reload(struct top_keys *t, const struct config *cfg)
{
    if (!t)
        return;
    struct top_policy *pol = xcalloc(cfg->npolicies ? cfg->npolicies : 1, sizeof *pol);
    for (size_t i = 0; i < cfg->npolicies; i++) {
        struct top_policy *tp = &pol[i];
        for (size_t j = 0; j < t->npol && !tp->name; j++)
            if (t->pol[j].name && strcmp(t->pol[j].name, cfg->policies[i].name) == 0)
                *tp = t->pol[j], t->pol[j].name = NULL, t->pol[j].denied = t->pol[j].used = NULL;
        if (tp->name)
            continue;
        tp->name = xstrdup(cfg->policies[i].name);
        tp->denied = space_saving_new(TOP_KEYS_CAP, t->seed ^ (2 * i));
        tp->used = space_saving_new(TOP_KEYS_CAP, t->seed ^ (2 * i + 1));
        tp->minute = minute_now();
    }
    for (size_t j = 0; j < t->npol; j++)
        policy_free(&t->pol[j]);
    free(t->pol);
    t->pol = pol;
    t->npol = cfg->npolicies;
    t->cfg = cfg;
}

struct top_keys *top_keys_new(struct core *core, const char *member, uint64_t seed)
{
    struct top_keys *t = xcalloc(1, sizeof *t);
    t->core = core;
    t->member = xstrdup(member);
    t->seed = seed;
    top_keys_reload(t, core->config);
    t->tick = evtimer_new(core->base, on_tick, t);
    if (!t->tick)
        abort(); /* out of memory in libevent, as timer.h */
    timer_arm_us(t->tick, TOP_KEYS_TICK_US);
    return t;
}

void top_keys_free(struct top_keys *t)
{
    if (!t)
        return;
    if (t->tick)
        event_free(t->tick);
    for (size_t i = 0; i < t->npol; i++)
        policy_free(&t->pol[i]);
    free(t->pol);
    free(t->member);
    buf_free(&t->out);
    free(t);
}

/* The sketches of p: by its place when p is of the snapshot they follow,
 * else by name (a check begun before a reload, an Envoy request's own
 * policy); NULL when none is kept. */
static struct top_policy *policy_of(struct top_keys *t, const struct config *cfg,
                                    const struct policy *p)
{
    if (cfg == t->cfg && p >= cfg->policies && p < cfg->policies + cfg->npolicies)
        return &t->pol[p - cfg->policies];
    for (size_t i = 0; i < t->npol; i++)
        if (strcmp(t->pol[i].name, p->name) == 0)
            return &t->pol[i];
    return NULL;
}

void top_keys_count(struct top_keys *t, const struct config *cfg, const struct check_item *it,
                    int denied, int admitted)
{
    if (!t || (!denied && (!admitted || it->cost <= 0)))
        return;
    struct top_policy *tp = policy_of(t, cfg, it->policy);
    if (!tp)
        return;
    if (denied)
        space_saving_add(tp->denied, it->key, it->keylen, 1);
    else
        space_saving_add(tp->used, it->key, it->keylen, (uint64_t)it->cost);
    tp->dirty = 1;
}
