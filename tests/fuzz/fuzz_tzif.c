/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_tzif.c: libFuzzer harness for the TZif reader (lib/tzif.c) and the
 * calendar windows computed on what it reads (lib/calendar.c). The input is
 * a zone file as /usr/share/zoneinfo holds them; the harness parses it and,
 * if it is accepted, asks the zone about instants from 1900 to 2200 and
 * asks for windows of every unit there.
 *
 * Beyond what ASan/UBSan/LSan catch, the harness aborts when a documented
 * contract breaks: a refusal says why; an offset is within a day and two
 * hours; the next transition comes after the instant asked about; the
 * first instant of a wall time is within that of it; a window is never
 * empty-ended the wrong way round (start <= end).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "lib/calendar.h"
#include "lib/tzif.h"

#define SPAN (26 * 3600)

static void check_zone(const struct tzif_zone *z, const uint8_t *data, size_t size)
{
    /* Instants from 1900 to 2200, some drawn from the input's bytes. */
    int64_t ts[8] = {-2208988800LL, 0, 1700000000LL, 1711846800LL, 7258118400LL, 1, 2, 3};
    for (size_t i = 5; i < 8; i++) {
        uint64_t h = 1469598103934665603ULL ^ i;
        for (size_t k = 0; k < size; k++)
            h = (h ^ data[k]) * 1099511628211ULL;
        ts[i] = -2208988800LL + (int64_t)(h % 9467107200ULL);
    }
    for (size_t i = 0; i < 8; i++) {
        int64_t t = ts[i];
        int32_t off = tzif_offset(z, t);
        if (off < -SPAN || off > SPAN)
            abort();
        if (tzif_next_transition(z, t) <= t)
            abort();
        int64_t u = tzif_first_instant(z, t);
        if (u < t - SPAN || u > t + SPAN)
            abort();
        for (int unit = CALENDAR_DAY; unit <= CALENDAR_YEAR; unit++) {
            struct calendar_spec c = {(enum calendar_unit)unit, z, 1 + (int)(t % 31 + 31) % 31,
                                      (int)(t % 7 + 7) % 7};
            int64_t s, e, b[4];
            calendar_window(&c, t * 1000000, &s, &e);
            if (s > e)
                abort();
            calendar_bounds(&c, t * 1000000, b);
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct tzif_zone *z = NULL;
    char err[256];
    if (tzif_parse(data, size, "Fuzz/Zone", &z, err, sizeof err) < 0) {
        if (z != NULL || !memchr(err, '\0', sizeof err) || !err[0])
            abort(); /* a refusal always says why, and gives nothing */
        return 0;
    }
    check_zone(z, data, size);
    tzif_free(z);
    return 0;
}
