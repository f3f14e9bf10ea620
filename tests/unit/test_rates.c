/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_rates.c: the per-second rings of GET /v1/rates (core/rates.c):
 * running totals in, per-second differences out, oldest first; counts made
 * before the first word land in its second; skipped seconds are zeros; a
 * gap longer than the ring clears it; a total that goes down counts 0; only
 * the config's policies are shown, an unseen one as zeros; a clock stepped
 * back counts in the last second.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "core/rates.h"
#include "tap.h"

static const char yaml[] =
    "listen: 127.0.0.1:1\n"
    "backend: memory\n"
    "policies:\n"
    "  api:\n"
    "    tiers: [{name: t, algorithm: fixed_window, limit: 1, window: 1m}]\n"
    "  idle:\n"
    "    tiers: [{name: t, algorithm: fixed_window, limit: 1, window: 1m}]\n";

/* The JSON of the last `seconds`, with "now" emptied (a time); the caller
 * frees it. */
static char *json(struct rates *r, const struct config *cfg, int seconds)
{
    struct buf b = {0};
    rates_json(r, cfg, seconds, &b);
    buf_append_char(&b, '\0');
    char *now = strstr(b.data, "\"now\":\"");
    char *end = now ? strchr(now + 7, '"') : NULL;
    if (now && end)
        memmove(now + 7, end, strlen(end) + 1);
    return b.data;
}

static void expect(struct rates *r, const struct config *cfg, int seconds, const char *api,
                   const char *idle, const char *what)
{
    char want[512];
    snprintf(want, sizeof want,
             "{\"interval_s\":1,\"now\":\"\",\"policies\":{\"api\":%s,\"idle\":%s}}", api, idle);
    char *got = json(r, cfg, seconds);
    is_str(got, want, "%s", what);
    free(got);
}

/* The sum of the figures of every array that opens with `open` in text. */
static long sum_figures(const char *text, const char *open)
{
    long sum = 0;
    for (const char *p = strstr(text, open); p; p = strstr(p, open)) {
        char *end;
        for (p += strlen(open); *p != ']'; p = *end == ',' ? end + 1 : end)
            sum += strtol(p, &end, 10);
    }
    return sum;
}

#define ZEROS1 "{\"allowed\":[0],\"denied\":[0]}"
#define ZEROS3 "{\"allowed\":[0,0,0],\"denied\":[0,0,0]}"

static void test_seconds(struct rates *r, const struct config *cfg)
{
    expect(r, cfg, 3, ZEROS3, ZEROS3, "before any word: zeros for every policy");
    rates_record(r, 1000, "api", 5, 3);
    expect(r, cfg, 3, "{\"allowed\":[0,0,5],\"denied\":[0,0,3]}", ZEROS3,
           "the first word: what came before it lands in its second");
    rates_record(r, 1001, "api", 8, 3);
    rates_record(r, 1001, "gone", 100, 100); /* not in the config */
    expect(r, cfg, 3, "{\"allowed\":[0,5,3],\"denied\":[0,3,0]}", ZEROS3,
           "the next second: the difference; a policy not in the config not shown");
    rates_record(r, 1004, "api", 10, 4);
    expect(r, cfg, 4, "{\"allowed\":[3,0,0,2],\"denied\":[0,0,0,1]}",
           "{\"allowed\":[0,0,0,0],\"denied\":[0,0,0,0]}",
           "skipped seconds are zeros, the later one holds everything since");
    rates_record(r, 1004, "api", 12, 4);
    expect(r, cfg, 1, "{\"allowed\":[4],\"denied\":[1]}", ZEROS1, "two words in one second add up");
    rates_record(r, 1003, "api", 13, 4);
    expect(r, cfg, 1, "{\"allowed\":[5],\"denied\":[1]}", ZEROS1,
           "a clock stepped back counts in the last second");
    rates_record(r, 1005, "api", 1, 1);
    expect(r, cfg, 1, ZEROS1, ZEROS1, "a total that went down counts 0");
}

static void test_ring(struct rates *r, const struct config *cfg)
{
    rates_record(r, 1005 + RATES_SECONDS + 7, "api", 4, 2);
    expect(r, cfg, 1, "{\"allowed\":[3],\"denied\":[1]}", ZEROS1,
           "after a gap longer than the ring: the new second's difference");
    char *all = json(r, cfg, RATES_SECONDS);
    is_int(sum_figures(all, "\"allowed\":["), 3, "and no allowed figure of the old ring is left");
    is_int(sum_figures(all, "\"denied\":["), 1, "nor a denied one");
    free(all);
    char *whole = json(r, cfg, 0);
    int commas = 0;
    for (const char *p = strstr(whole, "\"allowed\":["); *p != ']'; p++)
        commas += *p == ',';
    is_int(commas + 1, RATES_SECONDS, "seconds out of range: the whole ring");
    free(whole);
}

/* A clock near the epoch (a host with no real-time clock, before NTP): the
 * seconds before the first are zeros, not whatever lies before the ring. */
static void test_epoch(const struct config *cfg)
{
    struct rates *r = rates_new();
    rates_record(r, 5, "api", 7, 2);
    char *all = json(r, cfg, RATES_SECONDS);
    is_int(sum_figures(all, "\"allowed\":["), 7, "clock at the epoch + 5 s: only what was counted");
    is_int(sum_figures(all, "\"denied\":["), 2, "and its denials");
    free(all);
    rates_free(r);
}

int main(void)
{
    char err[RL_ERRLEN];
    struct config *cfg = config_load_string("test.yaml", yaml, strlen(yaml), err, sizeof err);
    if (!ok(cfg != NULL, "test config loads")) {
        printf("# %s\n", err);
        return tap_done();
    }
    struct rates *r = rates_new();
    test_seconds(r, cfg);
    test_ring(r, cfg);
    test_epoch(cfg);
    rates_free(r);
    rates_free(NULL);
    config_unref(cfg);
    return tap_done();
}
