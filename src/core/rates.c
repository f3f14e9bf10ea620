/* SPDX-License-Identifier: Apache-2.0 */
/*
 * rates.c: the per-second rings of GET /v1/rates (rates.h). A policy's
 * ring holds the counts of the seconds ending at `last`: slot sec %
 * RATES_SECONDS holds second sec, so a second needs no shifting. Policies
 * are few and fed once a second: a linear search finds them.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "config/config.h"
#include "core/rates.h"
#include "lib/json_out.h"
#include "lib/util.h"

struct ring {
    char name[POLICY_NAME_MAX + 1];
    /* The running totals at `last`. They start at 0, as the process's
     * counters do (metrics.c never forgets a policy): what came before
     * the first word counts in its second. */
    uint64_t base_allowed, base_denied;
    uint32_t allowed[RATES_SECONDS], denied[RATES_SECONDS];
};

struct rates {
    pthread_mutex_t lock;
    int64_t last; /* the last second recorded; 0: none */
    struct ring *rings;
    size_t n, cap;
};

struct rates *rates_new(void)
{
    struct rates *r = xcalloc(1, sizeof *r);
    pthread_mutex_init(&r->lock, NULL);
    return r;
}

void rates_free(struct rates *r)
{
    if (!r)
        return;
    pthread_mutex_destroy(&r->lock);
    free(r->rings);
    free(r);
}

static struct ring *find(struct rates *r, const char *policy)
{
    for (size_t i = 0; i < r->n; i++)
        if (strcmp(r->rings[i].name, policy) == 0)
            return &r->rings[i];
    return NULL;
}

/* Zeros every ring's slots of the seconds after `last` up to sec. */
static void advance(struct rates *r, int64_t sec)
{
    if (r->last == 0 || sec - r->last >= RATES_SECONDS) {
        for (size_t i = 0; i < r->n; i++) {
            memset(r->rings[i].allowed, 0, sizeof r->rings[i].allowed);
            memset(r->rings[i].denied, 0, sizeof r->rings[i].denied);
        }
    } else {
        for (int64_t s = r->last + 1; s <= sec; s++)
            for (size_t i = 0; i < r->n; i++)
                r->rings[i].allowed[s % RATES_SECONDS] = r->rings[i].denied[s % RATES_SECONDS] = 0;
    }
    r->last = sec;
}

static uint32_t delta(uint64_t now, uint64_t *base)
{
    uint64_t d = now >= *base ? now - *base : 0;
    *base = now;
    return d > UINT32_MAX ? UINT32_MAX : (uint32_t)d;
}

void rates_record(struct rates *r, int64_t sec, const char *policy, uint64_t allowed,
                  uint64_t denied)
{
    if (sec <= 0 || strlen(policy) > POLICY_NAME_MAX)
        return;
    pthread_mutex_lock(&r->lock);
    if (sec > r->last)
        advance(r, sec);
    struct ring *g = find(r, policy);
    if (!g) {
        if (r->n == r->cap) {
            r->cap = r->cap ? 2 * r->cap : 8;
            r->rings = xrealloc(r->rings, r->cap * sizeof *r->rings);
        }
        g = &r->rings[r->n++];
        memset(g, 0, sizeof *g);
        strcpy(g->name, policy); /* fits: checked above */
    }
    /* A clock stepped back writes into the last second rather than the past. */
    size_t slot = (size_t)(r->last % RATES_SECONDS);
    g->allowed[slot] += delta(allowed, &g->base_allowed);
    g->denied[slot] += delta(denied, &g->base_denied);
    pthread_mutex_unlock(&r->lock);
}

static void series(struct json_out *j, const uint32_t *ring, int64_t last, int seconds)
{
    json_out_begin(j, '[');
    /* A clock near the epoch (no real-time clock yet): the seconds before
     * the first are zeros, never an index before the ring. */
    for (int64_t s = last - seconds + 1; s <= last; s++)
        json_out_int(j, s > 0 ? ring[s % RATES_SECONDS] : 0);
    json_out_end(j, ']');
}

void rates_json(struct rates *r, const struct config *cfg, int seconds, struct buf *out)
{
    static const uint32_t zeros[RATES_SECONDS];
    if (seconds < 1 || seconds > RATES_SECONDS)
        seconds = RATES_SECONDS;
    pthread_mutex_lock(&r->lock);
    /* Before the first word, the seconds end now: the chart starts empty. */
    int64_t last = r->last ? r->last : (int64_t)time(NULL);
    struct json_out j = json_out_start(out);
    json_out_begin(&j, '{');
    json_out_lkey(&j, "interval_s");
    json_out_int(&j, 1);
    json_out_lkey(&j, "now");
    char when[UTIL_RFC3339_BUF];
    json_out_cstr(&j, util_format_rfc3339(last * 1000000, when));
    json_out_lkey(&j, "policies");
    json_out_begin(&j, '{');
    for (size_t i = 0; i < cfg->npolicies; i++) {
        const struct ring *g = find(r, cfg->policies[i].name);
        json_out_key(&j, cfg->policies[i].name);
        json_out_begin(&j, '{');
        json_out_lkey(&j, "allowed");
        series(&j, g ? g->allowed : zeros, last, seconds);
        json_out_lkey(&j, "denied");
        series(&j, g ? g->denied : zeros, last, seconds);
        json_out_end(&j, '}');
    }
    json_out_end(&j, '}');
    json_out_end(&j, '}');
    pthread_mutex_unlock(&r->lock);
}
