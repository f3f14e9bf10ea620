/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_hostport.c: the one host:port rule (hostport.h) that the listeners,
 * the Redis URL, the cluster seeds and the sentinels share: names, IPv4 and
 * bracketed IPv6 hosts, a port of 1 to 65535 (never 0), a default port or
 * none, and only the n bytes given read.
 */
#include <string.h>

#include "lib/hostport.h"
#include "tap.h"

static const struct {
    const char *what, *s;
    size_t n; /* 0: strlen(s) */
    int default_port;
    const char *host; /* NULL: refused, with err starting with... */
    int port;
    const char *err;
} cases[] = {
    {"name and port", "redis.internal:6380", 0, 0, "redis.internal", 6380, NULL},
    {"IPv4 and port", "127.0.0.1:1", 0, 0, "127.0.0.1", 1, NULL},
    {"the highest port", "h:65535", 0, 0, "h", 65535, NULL},
    {"underscore and dash in a name", "my-host_1.example:80", 0, 0, "my-host_1.example", 80, NULL},
    {"IPv6 in brackets", "[::1]:7000", 0, 0, "::1", 7000, NULL},
    {"the default port", "localhost", 0, 6379, "localhost", 6379, NULL},
    {"the default port after IPv6", "[fe80::1]", 0, 6379, "fe80::1", 6379, NULL},
    {"a written port over the default", "h:7", 0, 6379, "h", 7, NULL},
    {"only n bytes read", "h:80/3", 4, 6379, "h", 80, NULL},
    {"port 0 refused", "127.0.0.1:0", 0, 0, NULL, 0, "invalid port: must be between 1 and 65535"},
    {"port 0 refused with a default", "h:0", 0, 6379, NULL, 0, "invalid port"},
    {"port too large", "h:65536", 0, 0, NULL, 0, "invalid port"},
    {"port far too large", "h:123456789", 0, 0, NULL, 0, "invalid port"},
    {"port junk", "h:80x", 0, 0, NULL, 0, "invalid port"},
    {"port empty", "h:", 0, 6379, NULL, 0, "invalid port"},
    {"port signed", "h:+80", 0, 0, NULL, 0, "invalid port"},
    {"port required", "localhost", 0, 0, NULL, 0, "expected host:port"},
    {"port required after IPv6", "[::1]", 0, 0, NULL, 0, "expected host:port"},
    {"junk after IPv6", "[::1]x", 0, 6379, NULL, 0, "expected host:port"},
    {"bare IPv6", "::1:8080", 0, 0, NULL, 0, "an IPv6 address must be in brackets"},
    {"bare IPv6, a default port", "fe80::1", 0, 6379, NULL, 0, "an IPv6 address must be in"},
    {"bad IPv6", "[zz]:80", 0, 0, NULL, 0, "invalid IPv6 address in brackets"},
    {"unterminated IPv6", "[::1:80", 0, 0, NULL, 0, "invalid IPv6 address in brackets"},
    {"empty host", ":6379", 0, 0, NULL, 0, "invalid host"},
    {"empty", "", 0, 6379, NULL, 0, "invalid host"},
    {"a space in the host", "a b:80", 0, 0, NULL, 0, "invalid host"},
    {"an @ in the host", "u@h:80", 0, 0, NULL, 0, "invalid host"},
};

/* A name of exactly len bytes. */
static void name_of(char *buf, size_t len)
{
    memset(buf, 'a', len);
    buf[len] = '\0';
}

int main(void)
{
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct hostport hp;
        char err[RL_ERRLEN] = "";
        size_t n = cases[i].n ? cases[i].n : strlen(cases[i].s);
        int rc = hostport_parse(cases[i].s, n, cases[i].default_port, &hp, err, sizeof err);
        if (cases[i].host) {
            ok(rc == 0 && strcmp(hp.host, cases[i].host) == 0 && hp.port == cases[i].port,
               "%s: %s port %d", cases[i].what, cases[i].host, cases[i].port);
        } else {
            ok(rc < 0 && strncmp(err, cases[i].err, strlen(cases[i].err)) == 0, "%s: %s",
               cases[i].what, cases[i].err);
            if (rc == 0 || strncmp(err, cases[i].err, strlen(cases[i].err)) != 0)
                printf("#   rc %d, err \"%s\"\n", rc, err);
        }
    }

    /* A DNS name's limit, and one byte over it. */
    char name[HOSTPORT_HOST_MAX + 8], msg[RL_ERRLEN];
    struct hostport hp;
    name_of(name, HOSTPORT_HOST_MAX);
    ok(hostport_parse(name, strlen(name), 6379, &hp, msg, sizeof msg) == 0 &&
           strlen(hp.host) == HOSTPORT_HOST_MAX,
       "a host of %d bytes", HOSTPORT_HOST_MAX);
    name_of(name, HOSTPORT_HOST_MAX + 1);
    ok(hostport_parse(name, strlen(name), 6379, &hp, msg, sizeof msg) < 0,
       "a host of %d bytes refused", HOSTPORT_HOST_MAX + 1);
    return tap_done();
}
