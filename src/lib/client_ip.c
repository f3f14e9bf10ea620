/* SPDX-License-Identifier: Apache-2.0 */
/*
 * client_ip.c: addresses, trusted_proxies networks and the X-Forwarded-For
 * walk (client_ip.h). Owns the rules of who the client is; not where the
 * headers come from (auth.c) nor the parsing of the policy file (config_fields.c).
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/un.h>

#include "lib/client_ip.h"

/* ::ffff:a.b.c.d becomes a.b.c.d, so that one client never has two keys. */
static void unmap(struct client_addr *a)
{
    static const unsigned char mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    if (a->family == AF_INET6 && memcmp(a->a, mapped, 12) == 0) {
        a->family = AF_INET;
        memmove(a->a, a->a + 12, 4);
        memset(a->a + 4, 0, 12);
    }
}

int client_ip_parse_addr(const char *s, size_t len, struct client_addr *out)
{
    char text[CLIENT_IP_TEXT];
    memset(out, 0, sizeof *out);
    if (len == 0 || len >= sizeof text)
        return -1;
    memcpy(text, s, len);
    text[len] = '\0';
    /* inet_pton refuses ports, brackets, spaces, zone ids and names. */
    if (inet_pton(AF_INET, text, out->a) == 1) {
        out->family = AF_INET;
        return 0;
    }
    if (inet_pton(AF_INET6, text, out->a) == 1) {
        out->family = AF_INET6;
        unmap(out);
        return 0;
    }
    return -1;
}

/* True if the bits of a past prefix are all zero. */
static int host_bits_zero(const struct client_addr *a, unsigned prefix)
{
    unsigned bytes = a->family == AF_INET ? 4 : 16;
    for (unsigned i = prefix / 8; i < bytes; i++) {
        unsigned char mask = i == prefix / 8 ? (unsigned char)(0xffu >> (prefix % 8)) : 0xff;
        if (a->a[i] & mask)
            return 0;
    }
    return 1;
}

int client_ip_parse_net(const char *s, struct client_net *out, char *err, size_t errlen)
{
    const char *slash = strchr(s, '/');
    size_t alen = slash ? (size_t)(slash - s) : strlen(s);
    int64_t prefix;
    char msg[RL_ERRLEN];
    memset(out, 0, sizeof *out);
    if (client_ip_parse_addr(s, alen, &out->addr) < 0) {
        snprintf(err, errlen, "not an IPv4 or IPv6 address or network (CIDR)");
        return -1;
    }
    int v4 = out->addr.family == AF_INET;
    /* ::ffff:10.0.0.0/104 was unmapped by the parse: its prefix shrinks by 96. */
    int mapped = v4 && memchr(s, ':', alen) != NULL;
    unsigned max = v4 ? 32 : 128;
    if (!slash) {
        out->prefix = max;
        return 0;
    }
    if (util_parse_int64(slash + 1, mapped ? 96 : 0, mapped ? 128 : max, &prefix, msg, sizeof msg) <
        0) {
        snprintf(err, errlen, "invalid prefix length: %s", msg);
        return -1;
    }
    out->prefix = (unsigned)prefix - (mapped ? 96 : 0);
    if (!host_bits_zero(&out->addr, out->prefix)) {
        snprintf(err, errlen, "bits set past the /%u prefix (the network address is meant)",
                 (unsigned)prefix);
        return -1;
    }
    return 0;
}

void client_ip_from_sockaddr(const struct sockaddr *sa, struct client_addr *out)
{
    memset(out, 0, sizeof *out);
    if (sa->sa_family == AF_INET) {
        out->family = AF_INET;
        memcpy(out->a, &((const struct sockaddr_in *)sa)->sin_addr, 4);
    } else if (sa->sa_family == AF_INET6) {
        out->family = AF_INET6;
        memcpy(out->a, &((const struct sockaddr_in6 *)sa)->sin6_addr, 16);
        unmap(out);
    } else {
        out->family = AF_UNSPEC;
    }
}

static int net_contains(const struct client_net *n, const struct client_addr *a)
{
    if (n->addr.family != a->family)
        return 0;
    unsigned full = n->prefix / 8, rest = n->prefix % 8;
    if (memcmp(n->addr.a, a->a, full) != 0)
        return 0;
    if (rest == 0)
        return 1;
    unsigned char mask = (unsigned char)(0xffu << (8 - rest));
    return (n->addr.a[full] & mask) == (a->a[full] & mask);
}

int client_ip_trusted(const struct client_trust *t, const struct client_addr *a)
{
    if (a->family == AF_UNSPEC)
        return t->unix_trusted;
    for (size_t i = 0; i < t->n; i++)
        if (net_contains(&t->nets[i], a))
            return 1;
    return 0;
}

void client_ip_format(const struct client_addr *a, char out[CLIENT_IP_TEXT])
{
    out[0] = '\0';
    if (a->family != AF_UNSPEC && !inet_ntop(a->family, a->a, out, CLIENT_IP_TEXT))
        out[0] = '\0'; /* cannot happen: the buffer fits any address */
}

static int is_ows(char ch)
{
    return ch == ' ' || ch == '\t';
}

/* One entry of a list, s[start, end), parsed with its optional whitespace
 * trimmed. Returns 1 for an address, 0 for an empty entry, -1 otherwise. */
static int list_entry(const char *s, size_t start, size_t end, struct client_addr *a)
{
    while (start < end && is_ows(s[start]))
        start++;
    while (end > start && is_ows(s[end - 1]))
        end--;
    if (start == end)
        return 0;
    return client_ip_parse_addr(s + start, end - start, a) == 0 ? 1 : -1;
}

/* The walk of client_ip.h over the X-Forwarded-For lines; *hop starts as
 * the (trusted) peer and ends as the client. */
static void walk_forwarded(const struct client_trust *t, const char *const *xff, size_t nxff,
                           struct client_addr *hop)
{
    for (size_t line = nxff; line-- > 0;) {
        const char *s = xff[line];
        size_t end = strlen(s);
        for (;;) {
            size_t start = end;
            while (start > 0 && s[start - 1] != ',')
                start--;
            struct client_addr a;
            int kind = list_entry(s, start, end, &a);
            if (kind < 0)
                return; /* garbage: the last trusted hop */
            if (kind > 0) {
                *hop = a;
                if (!client_ip_trusted(t, &a))
                    return;
            }
            if (start == 0)
                break;
            end = start - 1;
        }
    }
}

int client_ip_resolve(const struct client_trust *t, const struct client_addr *peer,
                      const char *const *xff, size_t nxff, const char *real_ip,
                      struct client_addr *out)
{
    *out = *peer;
    if (client_ip_trusted(t, peer)) {
        struct client_addr a;
        if (nxff > 0)
            walk_forwarded(t, xff, nxff, out);
        else if (real_ip && list_entry(real_ip, 0, strlen(real_ip), &a) > 0)
            *out = a;
    }
    return out->family == AF_UNSPEC ? -1 : 0;
}

void client_trust_free(struct client_trust *t)
{
    if (!t)
        return;
    free(t->nets);
    t->nets = NULL;
    t->n = 0;
}
