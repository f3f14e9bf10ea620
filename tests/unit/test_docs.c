/*
 * test_docs.c: every field the policy file accepts is documented in the
 * README's reference (as `path`) and shown in conf/ratelimitd.yaml (as
 * "name:"). A new field without docs fails here. And the stop timeouts that
 * ship (the systemd unit, ratelimitd(8), docker/compose.yaml, the
 * Dockerfile's advice) agree and exceed the longest drain the code allows,
 * which the README and ratelimitd(8) state.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "front/http/http.h"
#include "tap.h"

struct docs {
    char *readme;
    char *example;
};

static char *slurp(const char *dir, const char *name)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *buf = NULL;
    size_t len = 0, cap = 0, n;
    char chunk[4096];
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) {
        if (len + n + 1 > cap) {
            cap = (len + n + 1) * 2;
            buf = xrealloc(buf, cap);
        }
        memcpy(buf + len, chunk, n);
        len += n;
    }
    fclose(f);
    if (buf)
        buf[len] = '\0';
    return buf;
}

static void check_field(const char *path, void *arg)
{
    struct docs *d = arg;
    char quoted[160], key[160];
    snprintf(quoted, sizeof quoted, "`%s`", path);
    ok(strstr(d->readme, quoted) != NULL, "README documents %s", quoted);
    const char *last = strrchr(path, '.');
    snprintf(key, sizeof key, "%s:", last ? last + 1 : path);
    ok(strstr(d->example, key) != NULL, "conf/ratelimitd.yaml shows %s", key);
}

/* The number after the first `before` in file (e.g. "TimeoutStopSec=70s":
 * 70), 0 if none follows it, or -1 if the file or the text is not there. */
static long number_after(const char *dir, const char *file, const char *before)
{
    char *text = slurp(dir, file);
    const char *at = text ? strstr(text, before) : NULL;
    long n = at ? strtol(at + strlen(before), NULL, 10) : -1;
    free(text);
    return n;
}

static int file_has(const char *dir, const char *file, const char *what)
{
    return number_after(dir, file, what) != -1;
}

/* A stop timeout shorter than the drain kills the daemon with answers still
 * owed (SIGKILL); the places that say how long to wait must agree. */
static void test_stop_timeouts(const char *dir, const struct docs *d)
{
    const long drain = CONFIG_REDIS_TIMEOUT_MAX_US / 1000000 + HTTP_DRAIN_MAX_S;
    const long unit = number_after(dir, "systemd/ratelimitd.service.in", "\nTimeoutStopSec=");
    const long man = number_after(dir, "man/ratelimitd.8", "TimeoutStopSec=");
    const long compose = number_after(dir, "docker/compose.yaml", "stop_grace_period: ");
    const long docker = number_after(dir, "docker/Dockerfile", "--time ");
    char said[128];

    ok(unit > drain, "the unit's TimeoutStopSec (%ld s) exceeds the longest drain (%ld s)", unit,
       drain);
    ok(man == unit, "ratelimitd(8) says the unit's TimeoutStopSec (%ld s, the unit %ld s)", man,
       unit);
    ok(compose > drain, "compose.yaml's stop_grace_period (%ld s) exceeds the longest drain",
       compose);
    ok(docker > drain, "the Dockerfile's docker stop --time (%ld s) exceeds the longest drain",
       docker);
    snprintf(said, sizeof said, "at most `redis.timeout` + %d s", HTTP_DRAIN_MAX_S);
    ok(d->readme && strstr(d->readme, said), "README: %s", said);
    snprintf(said, sizeof said, "redis.timeout\nplus %d seconds", HTTP_DRAIN_MAX_S);
    ok(file_has(dir, "man/ratelimitd.8", said),
       "ratelimitd(8): the drain lasts at most redis.timeout plus %d seconds", HTTP_DRAIN_MAX_S);
}

int main(void)
{
    const char *dir = getenv("RL_SRCDIR") ? getenv("RL_SRCDIR") : ".";
    struct docs d = {slurp(dir, "README.md"), slurp(dir, "conf/ratelimitd.yaml")};
    if (ok(d.readme && d.example, "README.md and conf/ratelimitd.yaml are readable"))
        config_foreach_field(check_field, &d);
    test_stop_timeouts(dir, &d);
    free(d.readme);
    free(d.example);
    return tap_done();
}
