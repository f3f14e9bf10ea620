/* SPDX-License-Identifier: Apache-2.0 */
/*
 * redis_url.c: parsing of redis://, rediss:// and unix: URLs (see redis_url.h).
 * Owns the syntax, and where the password comes from (the environment or
 * the config); whether a server answers there is the backend's
 * business.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/redis_url.h"
#include "lib/hostport.h"

static int hexval(int c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    c = tolower(c);
    return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* Percent-decodes s[0..n) into a new string; NULL on a bad escape or %00. */
static char *pct_decode(const char *s, size_t n)
{
    char *out = xmalloc(n + 1), *o = out;
    for (size_t i = 0; i < n; i++) {
        if (s[i] != '%') {
            *o++ = s[i];
            continue;
        }
        int hi = i + 2 < n ? hexval((unsigned char)s[i + 1]) : -1;
        int lo = i + 2 < n ? hexval((unsigned char)s[i + 2]) : -1;
        if (hi < 0 || lo < 0 || (hi == 0 && lo == 0)) {
            free(out);
            return NULL;
        }
        *o++ = (char)(hi * 16 + lo);
        i += 2;
    }
    *o = '\0';
    return out;
}

static int fail(struct redis_url *u, char *err, size_t errlen, const char *msg)
{
    snprintf(err, errlen, "%s", msg);
    redis_url_free(u);
    return -1;
}

/* host[:port] or [v6][:port], up to the end of s[0..n): hostport.c's
 * rule, Redis's port by default. */
static int parse_host_port(struct redis_url *u, const char *s, size_t n, char *err, size_t errlen)
{
    struct hostport hp;
    if (hostport_parse(s, n, 6379, &hp, err, errlen) < 0)
        return -1;
    u->host = xstrdup(hp.host);
    u->port = hp.port;
    return 0;
}

int redis_url_parse(const char *url, struct redis_url *u, char *err, size_t errlen)
{
    memset(u, 0, sizeof *u);
    if (strncmp(url, "unix:", 5) == 0) {
        const char *path = url + 5;
        if (path[0] != '/')
            return fail(u, err, errlen, "a unix socket path must be absolute");
        u->unix_path = xstrdup(path);
        return 0;
    }
    /* rediss:// differs only in the transport: the same syntax follows. */
    u->tls = strncmp(url, "rediss://", 9) == 0;
    if (!u->tls && strncmp(url, "redis://", 8) != 0)
        return fail(u, err, errlen,
                    "must be redis[s]://[[user]:password@]host[:port][/db] or unix:/path");
    const char *rest = url + (u->tls ? 9 : 8);
    /* The password may hold '@' and '/', the host neither: the last '@'
     * ends the credentials. */
    const char *at = strrchr(rest, '@');
    if (at) {
        const char *colon = memchr(rest, ':', (size_t)(at - rest));
        if (!colon || colon + 1 == at)
            return fail(u, err, errlen, "credentials must be [user]:password@");
        if (colon > rest && !(u->user = pct_decode(rest, (size_t)(colon - rest))))
            return fail(u, err, errlen, "a % in the credentials must start a %XX escape");
        if (!(u->password = pct_decode(colon + 1, (size_t)(at - colon - 1))))
            return fail(u, err, errlen, "a % in the credentials must start a %XX escape");
        rest = at + 1;
    }
    const char *slash = strchr(rest, '/');
    size_t n = slash ? (size_t)(slash - rest) : strlen(rest);
    if (parse_host_port(u, rest, n, err, errlen) < 0) {
        redis_url_free(u);
        return -1;
    }
    if (slash && slash[1]) {
        char msg[RL_ERRLEN];
        int64_t db;
        if (util_parse_int64(slash + 1, 0, REDIS_URL_MAX_DB, &db, msg, sizeof msg) < 0) {
            snprintf(err, errlen, "invalid database number: %s", msg);
            redis_url_free(u);
            return -1;
        }
        u->db = (int)db;
    }
    return 0;
}

static char *dup_or_null(const char *s)
{
    return s ? xstrdup(s) : NULL;
}

void redis_url_copy(struct redis_url *dst, const struct redis_url *src, const char *password_env)
{
    *dst = *src;
    dst->host = dup_or_null(src->host);
    dst->unix_path = dup_or_null(src->unix_path);
    dst->user = dup_or_null(src->user);
    dst->password =
        password_env ? redis_url_password(password_env, src->password) : dup_or_null(src->password);
}

/* Credentials are wiped before they are freed: a config snapshot keeps its
 * parsed URLs for its whole life, and freed memory is no place for them. */
static void free_secret(char *s)
{
    if (s != NULL) {
        explicit_bzero(s, strlen(s));
        free(s);
    }
}

void redis_url_free(struct redis_url *u)
{
    free(u->host);
    free(u->unix_path);
    free_secret(u->user);
    free_secret(u->password);
    memset(u, 0, sizeof *u);
}

char *redis_url_password(const char *env, const char *configured)
{
    /* The environment wins, so that the password need not be written in
     * the policy file; an empty value is taken as unset. */
    const char *value = getenv(env);
    if (!value || !*value)
        value = configured;
    return value ? xstrdup(value) : NULL;
}
