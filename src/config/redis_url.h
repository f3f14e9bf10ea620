/* SPDX-License-Identifier: Apache-2.0 */
/*
 * redis_url.h: the one parser of `redis.url` and redis.cluster's seeds,
 * run once at load (config_redis.c): the backends connect with the parsed
 * form in the config snapshot, so the file's check and the connection can
 * never disagree.
 *
 *   redis://[[user]:password@]host[:port][/db]   host may be [IPv6]
 *   rediss://...                                 the same, over TLS
 *   unix:/path/redis.sock                        never TLS
 *
 * Credentials are percent-decoded ("p%40ss" is "p@ss").
 */
#ifndef RATELIMITD_REDIS_URL_H
#define RATELIMITD_REDIS_URL_H

#include <stddef.h>

#include "lib/util.h"

#define REDIS_URL_MAX_DB 1048576

struct redis_url {
    char *host; /* NULL for a unix socket */
    int port;
    char *unix_path;
    char *user;     /* NULL: none (AUTH with the password alone) */
    char *password; /* NULL: no AUTH */
    int db;
    int tls; /* rediss:// */
};

/* Fills *out (free with redis_url_free) or returns -1 with a message that
 * never repeats the credentials. */
int redis_url_parse(const char *url, struct redis_url *out, char *err, size_t errlen) RL_WUR;

/* *dst becomes a copy of *src with strings of its own (free with
 * redis_url_free): for what outlives the config snapshot src is in, a
 * backend. password_env: its password is redis_url_password's, the
 * variable's over src's (NULL: src's). */
void redis_url_copy(struct redis_url *dst, const struct redis_url *src, const char *password_env);

/* Frees the strings, the credentials wiped first; safe on a zeroed or
 * freed struct. */
void redis_url_free(struct redis_url *u);

/* The environment variables whose value, when set and not empty, is the
 * password of the Redis servers (overriding redis.url's or
 * redis.cluster's) or of the sentinels (overriding redis.sentinel's), so
 * that it need not be written in the policy file. Never logged. */
#define REDIS_URL_PASSWORD_ENV "RATELIMITD_REDIS_PASSWORD"
#define REDIS_URL_SENTINEL_PASSWORD_ENV "RATELIMITD_SENTINEL_PASSWORD"

/* The password to AUTH with: the value of the environment variable env
 * when set and not empty, else configured (may be NULL). Returns a new
 * string (the caller frees it), or NULL: no password. */
char *redis_url_password(const char *env, const char *configured);

#endif
