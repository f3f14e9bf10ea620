/* SPDX-License-Identifier: Apache-2.0 */
/*
 * client_ip.h: who the client of a forward-auth request is (`${ip}` in a
 * key template). The connection's peer, unless the peer is one of the
 * `trusted_proxies`: then the right-most address of X-Forwarded-For that is
 * not a trusted proxy (or X-Real-IP when there is no X-Forwarded-For).
 *
 * The walk over X-Forwarded-For goes right to left over every entry of
 * every X-Forwarded-For line (lines in order, then entries in order, as
 * RFC 9110 combines them), since each trusted proxy appends the address it
 * saw to the right:
 *   - an empty entry (",,") is skipped;
 *   - a trusted address: its hop is a proxy, go on to the left;
 *   - an untrusted address: that is the client;
 *   - every entry trusted: the left-most one;
 *   - an entry that is not a bare IPv4 or IPv6 address (a name, garbage,
 *     "1.2.3.4:80" with a port, "[::1]" in brackets, "unknown"): the walk
 *     stops and the client is the last trusted hop (the address to its
 *     right, or the peer itself), never the garbage: a value no proxy
 *     vouched for must not become a key.
 * X-Real-IP, used only when there is no X-Forwarded-For, must be one bare
 * address; otherwise the peer is the client.
 *
 * IPv4-mapped IPv6 addresses (::ffff:1.2.3.4) count as their IPv4 address
 * everywhere, in trusted_proxies and in headers, and are written as IPv4.
 * No I/O and no HTTP types: pure functions of their arguments.
 */
#ifndef RATELIMITD_CLIENT_IP_H
#define RATELIMITD_CLIENT_IP_H

#include <stddef.h>
#include <sys/socket.h>

#include "lib/util.h"

#define CLIENT_IP_TEXT 46         /* INET6_ADDRSTRLEN: an address as text, with its NUL */
#define CLIENT_IP_TRUSTED_MAX 256 /* entries of trusted_proxies */

/* An IPv4 (family AF_INET, 4 bytes of a) or IPv6 address; AF_UNSPEC: a
 * unix-socket peer, which has no address. */
struct client_addr {
    int family;
    unsigned char a[16];
};

struct client_net {
    struct client_addr addr; /* bits past prefix are zero */
    unsigned prefix;         /* 0..32 or 0..128 */
};

/* The trusted_proxies of a config (owned by it; immutable once loaded). */
struct client_trust {
    int unix_trusted; /* "unix": peers on a unix socket are proxies */
    size_t n;
    struct client_net *nets; /* owned */
};

/* Parses "1.2.3.4", "10.0.0.0/8", "::1", "fd00::/8" (a bare address is
 * /32 or /128). Bits set past the prefix ("10.1.2.3/8") are an error, as
 * they usually mean a typo. Returns 0, or -1 with a message. */
int client_ip_parse_net(const char *s, struct client_net *out, char *err, size_t errlen) RL_WUR;

/* Parses one bare address of len bytes (no port, no brackets, no spaces).
 * Returns 0 or -1. */
int client_ip_parse_addr(const char *s, size_t len, struct client_addr *out) RL_WUR;

/* The address of a socket peer (sockaddr_in, sockaddr_in6, or AF_UNIX,
 * which gives family AF_UNSPEC). */
void client_ip_from_sockaddr(const struct sockaddr *sa, struct client_addr *out);

/* True if a is inside one of t's networks (or a unix peer and "unix" is
 * trusted). */
int client_ip_trusted(const struct client_trust *t, const struct client_addr *a);

/* Writes a as text ("1.2.3.4", "2001:db8::1") into out; "" for a unix peer. */
void client_ip_format(const struct client_addr *a, char out[CLIENT_IP_TEXT]);

/*
 * The client of one request per the rules above. peer: the connection's
 * peer. xff: the nxff X-Forwarded-For lines in order; real_ip: X-Real-IP or
 * NULL. Writes the client's address into *out; returns -1 when there is
 * none (a unix-socket peer with nothing trusted to say who is behind it).
 */
int client_ip_resolve(const struct client_trust *t, const struct client_addr *peer,
                      const char *const *xff, size_t nxff, const char *real_ip,
                      struct client_addr *out) RL_WUR;

void client_trust_free(struct client_trust *t); /* the nets; the struct is the caller's */

#endif
