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

/* host[:port] or [v6][:port], up to the end of s[0..n). */
static int parse_host_port(struct redis_url *u, const char *s, size_t n, char *err, size_t errlen)
{
    const char *end = s + n, *host_end, *p;
    if (*s == '[') {
        host_end = memchr(s, ']', n);
        if (!host_end)
            return snprintf(err, errlen, "unterminated [IPv6] address"), -1;
        u->host = xstrndup(s + 1, (size_t)(host_end - s - 1));
        p = host_end + 1;
    } else {
        host_end = memchr(s, ':', n);
        if (!host_end)
            host_end = end;
        u->host = xstrndup(s, (size_t)(host_end - s));
        p = host_end;
    }
    if (!u->host[0] || strpbrk(u->host, " \t/@[]"))
        return snprintf(err, errlen, "invalid host: use a name, an IPv4 address or [IPv6]"), -1;
    u->port = 6379;
    if (p == end)
        return 0;
    char buf[8], msg[RL_ERRLEN];
    int64_t port;
    if (*p != ':' || (size_t)(end - p - 1) >= sizeof buf || end - p == 1)
        return snprintf(err, errlen, "invalid port"), -1;
    memcpy(buf, p + 1, (size_t)(end - p - 1));
    buf[end - p - 1] = '\0';
    if (util_parse_int64(buf, 1, 65535, &port, msg, sizeof msg) < 0)
        return snprintf(err, errlen, "invalid port: %s", msg), -1;
    u->port = (int)port;
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

void redis_url_free(struct redis_url *u)
{
    free(u->host);
    free(u->unix_path);
    free(u->user);
    free(u->password);
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
