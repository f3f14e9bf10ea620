/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_top_keys.c: the heaviest keys' rotation with chosen minutes: the
 * minutes a window reads (core/top_keys.h), and the memory backend's board
 * (backend/memory_top.h): what a query of a window finds, a member's
 * newer hand-over replacing its older one, minutes past TOP_KEYS_TTL_S
 * forgotten.
 */
#include <stdio.h>
#include <string.h>

#include "backend/memory_top.h"
#include "core/top_keys.h"
#include "tap.h"

/* The minutes a window covers: the current one and the whole ones before,
 * so that a key last counted 11 minutes ago is out of window=10m. */
static void windows(void)
{
    int64_t now = 1700000000LL * 1000000 + 30 * 1000000; /* 30 s into a minute */
    int64_t lo, hi;
    top_keys_window(now, 1, &lo, &hi);
    is_int(hi, now / 60000000, "1m: up to the current minute");
    is_int(lo, hi - 1, "1m: and the one before");
    top_keys_window(now, 10, &lo, &hi);
    is_int(hi - lo, 10, "10m: the current minute and the ten before");
    int64_t hot = now - 11 * 60000000LL - 31 * 1000000; /* 11.5 min ago: last minute out */
    ok(hot / 60000000 < lo, "a minute 11.5 min ago is out of 10m");
    int64_t warm = now - 10 * 60000000LL;
    ok(warm / 60000000 >= lo, "a minute 10 min ago is in 10m");
}

/* What a get found: "member=data" lines, in the board's order. */
static char found[512];

static void on_get(void *arg, const struct backend_top_reply *r)
{
    (void)arg;
    found[0] = '\0';
    for (size_t i = 0; i < r->n; i++)
        snprintf(found + strlen(found), sizeof found - strlen(found), "%.*s=%.*s;",
                 (int)r->blobs[i].member_len, r->blobs[i].member, (int)r->blobs[i].len,
                 r->blobs[i].data);
}

static void board(void)
{
    struct memory_top *t = memory_top_new();
    int64_t m = 29000000, lo, hi;
    memory_top_put(t, "api", m - 11, "d/0", "cold", 4);
    memory_top_put(t, "api", m - 10, "d/0", "warm", 4);
    memory_top_put(t, "api", m, "d/0", "now", 3);
    memory_top_put(t, "api", m, "d/1", "w1", 2);
    memory_top_put(t, "other", m, "d/0", "x", 1);
    top_keys_window(m * 60000000 + 59000000, 10, &lo, &hi);
    memory_top_get(t, "api", lo, hi, on_get, NULL);
    is_str(found, "d/0=warm;d/0=now;d/1=w1;",
           "window=10m: minutes m-10 .. m of the policy, every worker; m-11 out");
    memory_top_put(t, "api", m, "d/0", "later", 5);
    memory_top_get(t, "api", m, m, on_get, NULL);
    is_str(found, "d/0=later;d/1=w1;", "a worker's next hand-over replaces its last");
    memory_top_get(t, "api", m - 100, m - 1, on_get, NULL);
    is_str(found, "d/0=cold;d/0=warm;", "minutes within TOP_KEYS_TTL_S are kept");
    memory_top_put(t, "api", m + 2, "d/0", "on", 2);
    memory_top_get(t, "api", m - 100, m - 1, on_get, NULL);
    is_str(found, "d/0=warm;", "a hand-over 13 minutes on forgets the minute 11 back");
    memory_top_free(t);
}

int main(void)
{
    windows();
    board();
    return tap_done();
}
