/* SPDX-License-Identifier: Apache-2.0 */
/*
 * hostport.h: the one parser of a TCP address, "host", "host:port", "[v6]"
 * or "[v6]:port", used by every setting that names one (listen,
 * admin_listen, grpc_listen, redis.url's authority, redis.cluster's seeds,
 * redis.sentinel.addresses) and by the code that binds or connects there,
 * so that what the policy file accepts is what the daemon uses.
 *
 * The rule: host is a name or an IPv4 address (A-Z a-z 0-9 . - _, at most
 * 253 bytes, a DNS name's limit) or an IPv6 address in brackets (checked by
 * inet_pton); an IPv6 address without brackets is refused with a message
 * saying so. The port is 1 to 65535: port 0 is refused everywhere, since a
 * listener bound to "any free port" would be one no client can find, and
 * no server listens on port 0.
 *
 * Owns the syntax only: resolving a name and binding or connecting are the
 * callers' (listen.c, redis_conn.c).
 */
#ifndef RATELIMITD_HOSTPORT_H
#define RATELIMITD_HOSTPORT_H

#include <stddef.h>

#include "lib/util.h"

#define HOSTPORT_HOST_MAX 253

struct hostport {
    char host[HOSTPORT_HOST_MAX + 1]; /* without the brackets of an IPv6 address */
    int port;
};

/* Parses s[0..n) into *out. default_port: the port when none is written;
 * 0: a port is required. Returns 0, or -1 with a message in err (which
 * quotes nothing of s, as a URL around it may hold a password). */
int hostport_parse(const char *s, size_t n, int default_port, struct hostport *out, char *err,
                   size_t errlen) RL_WUR;

#endif
