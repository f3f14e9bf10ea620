/* SPDX-License-Identifier: Apache-2.0 */
/*
 * hostport.c: parsing of "host[:port]" and "[v6][:port]" (hostport.h).
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "lib/hostport.h"

#define HOST_CHARS "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789.-_"

/* The bracketed IPv6 address at the start of s[0..n) into out->host; the
 * rest of s in *rest. */
static int parse_v6(const char *s, size_t n, struct hostport *out, const char **rest, char *err,
                    size_t errlen)
{
    const char *close = memchr(s, ']', n);
    size_t len = close ? (size_t)(close - s - 1) : 0;
    struct in6_addr addr;

    if (close == NULL || len >= INET6_ADDRSTRLEN)
        return snprintf(err, errlen, "invalid IPv6 address in brackets"), -1;
    memcpy(out->host, s + 1, len);
    out->host[len] = '\0';
    if (inet_pton(AF_INET6, out->host, &addr) != 1)
        return snprintf(err, errlen, "invalid IPv6 address in brackets"), -1;
    *rest = close + 1;
    return 0;
}

/* The name or IPv4 address at the start of s[0..n) into out->host. */
static int parse_name(const char *s, size_t n, struct hostport *out, const char **rest, char *err,
                      size_t errlen)
{
    const char *end = s + n;
    size_t len = 0;

    while (len < n && strchr(HOST_CHARS, s[len]) != NULL && s[len] != '\0')
        len++;
    *rest = s + len;
    if (*rest < end && **rest == ':' && memchr(*rest + 1, ':', (size_t)(end - *rest - 1)))
        return snprintf(err, errlen, "an IPv6 address must be in brackets: [::1]:port"), -1;
    if (len == 0 || len > HOSTPORT_HOST_MAX || (*rest < end && **rest != ':'))
        return snprintf(err, errlen, "invalid host: use a name, an IPv4 address or [IPv6]"), -1;
    memcpy(out->host, s, len);
    out->host[len] = '\0';
    return 0;
}

int hostport_parse(const char *s, size_t n, int default_port, struct hostport *out, char *err,
                   size_t errlen)
{
    const char *end = s + n, *rest;
    char digits[8], msg[RL_ERRLEN];
    int64_t port;

    if ((n > 0 && s[0] == '[' ? parse_v6(s, n, out, &rest, err, errlen)
                              : parse_name(s, n, out, &rest, err, errlen)) < 0)
        return -1;
    if (rest == end && default_port > 0) {
        out->port = default_port;
        return 0;
    }
    if (rest == end || *rest != ':')
        return snprintf(err, errlen, "expected host:port"), -1;
    rest++;
    /* Longer than any port: refused by the range check below all the same,
     * without copying it whole. */
    if ((size_t)(end - rest) >= sizeof digits)
        return snprintf(err, errlen, "invalid port: must be between 1 and 65535"), -1;
    memcpy(digits, rest, (size_t)(end - rest));
    digits[end - rest] = '\0';
    if (util_parse_int64(digits, 1, 65535, &port, msg, sizeof msg) < 0)
        return snprintf(err, errlen, "invalid port: %s", msg), -1;
    out->port = (int)port;
    return 0;
}
