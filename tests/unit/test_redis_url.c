/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_redis_url.c: where the Redis and sentinel passwords come from
 * (redis_url_password): the environment over the configured one, an empty
 * value taken as unset, always a copy the caller frees.
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

int main(void)
{
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
