/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_redis_url.c: where the Redis and sentinel passwords come from
 * (redis_url_password): the environment over the configured one, an empty
 * value taken as unset, always a copy the caller frees; and the copy of a
 * parsed URL a backend keeps (redis_url_copy), strings of its own, its
 * password the environment's when set.
 */
#include <stdlib.h>
#include <string.h>

#include "config/redis_url.h"
#include "tap.h"

/* A name of the test's own, so that the test does not depend on (or
 * change) the real variables of whoever runs it. */
#define ENV "RATELIMITD_TEST_REDIS_URL_PASSWORD"

static void check(const char *env, const char *configured, const char *want, const char *what)
{
    if (env)
        setenv(ENV, env, 1);
    else
        unsetenv(ENV);
    char *got = redis_url_password(ENV, configured);
    if (want)
        is_str(got ? got : "(null)", want, "%s", what);
    else
        ok(got == NULL, "%s", what);
    ok(!got || got != configured, "%s: a copy", what);
    free(got);
}

/* A backend's copy of the snapshot's parsed URL outlives the snapshot. */
static void check_copy(void)
{
    struct redis_url src, dst;
    char err[RL_ERRLEN];
    if (!ok(redis_url_parse("rediss://u:conf@h:7000/3", &src, err, sizeof err) == 0, "parse: %s",
            err))
        return;
    unsetenv(ENV);
    redis_url_copy(&dst, &src, ENV);
    ok(dst.host != src.host && strcmp(dst.host, "h") == 0 && dst.port == 7000 && dst.db == 3 &&
           dst.tls && dst.user != src.user && strcmp(dst.user, "u") == 0 &&
           dst.password != src.password && strcmp(dst.password, "conf") == 0,
       "a copy with strings of its own, the URL's password with no variable");
    redis_url_free(&dst);
    setenv(ENV, "env", 1);
    redis_url_copy(&dst, &src, ENV);
    ok(dst.password && strcmp(dst.password, "env") == 0, "the variable's password in the copy");
    redis_url_free(&dst);
    redis_url_copy(&dst, &src, NULL);
    ok(dst.password && strcmp(dst.password, "conf") == 0, "no variable named: the URL's password");
    redis_url_free(&dst);
    redis_url_free(&src);
    ok(src.host == NULL && src.password == NULL, "freed: zeroed");
    unsetenv(ENV);
}

int main(void)
{
    check_copy();
    is_str(REDIS_URL_PASSWORD_ENV, "RATELIMITD_REDIS_PASSWORD", "the servers' variable");
    is_str(REDIS_URL_SENTINEL_PASSWORD_ENV, "RATELIMITD_SENTINEL_PASSWORD",
           "the sentinels' variable");
    check(NULL, "conf", "conf", "no variable: the configured password");
    check(NULL, NULL, NULL, "no variable, none configured: no password");
    check("env", "conf", "env", "the variable wins over the configured password");
    check("env", NULL, "env", "the variable with none configured");
    check("", "conf", "conf", "an empty variable is taken as unset");
    check("", NULL, NULL, "an empty variable and none configured: no password");
    unsetenv(ENV);
    return tap_done();
}
