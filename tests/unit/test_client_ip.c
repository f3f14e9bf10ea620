/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_client_ip.c: who the client is (client_ip.c) and the key templates
 * that use it (key_template.c): CIDR matching at the edges of networks,
 * IPv4-mapped addresses, the X-Forwarded-For walk over several lines,
 * spaces, empty entries, ports and garbage; compiling and rendering
 * templates, missing parts, the length limit.
 */
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/key_template.h"
#include "lib/client_ip.h"
#include "tap.h"

static const struct net_case {
    const char *net, *addr;
    int inside;
} net_cases[] = {
    {"10.0.0.0/8", "10.0.0.0", 1},
    {"10.0.0.0/8", "10.255.255.255", 1},
    {"10.0.0.0/8", "11.0.0.0", 0},
    {"10.0.0.0/8", "9.255.255.255", 0},
    {"192.168.1.128/25", "192.168.1.128", 1},
    {"192.168.1.128/25", "192.168.1.255", 1},
    {"192.168.1.128/25", "192.168.1.127", 0},
    {"172.16.0.0/12", "172.31.255.255", 1},
    {"172.16.0.0/12", "172.32.0.0", 0},
    {"127.0.0.1", "127.0.0.1", 1},
    {"127.0.0.1", "127.0.0.2", 0},
    {"0.0.0.0/0", "203.0.113.9", 1},
    {"0.0.0.0/0", "::1", 0},
    {"::1", "::1", 1},
    {"::1", "::2", 0},
    {"fd00::/8", "fdff:ffff::1", 1},
    {"fd00::/8", "fe00::", 0},
    {"2001:db8::/33", "2001:db8:7fff::1", 1},
    {"2001:db8::/33", "2001:db8:8000::", 0},
    {"::/0", "2001:db8::1", 1},
    {"127.0.0.1", "::ffff:127.0.0.1", 1},
    {"::ffff:10.0.0.0/104", "10.1.2.3", 1},
    {"::ffff:10.0.0.0/104", "11.1.2.3", 0},
    {"10.0.0.0/8", "::ffff:10.9.9.9", 1},
};

static void test_nets(void)
{
    for (size_t i = 0; i < sizeof net_cases / sizeof net_cases[0]; i++) {
        const struct net_case *c = &net_cases[i];
        struct client_net n;
        struct client_addr a;
        char err[RL_ERRLEN];
        struct client_trust t = {.n = 1, .nets = &n};
        if (client_ip_parse_net(c->net, &n, err, sizeof err) < 0 ||
            client_ip_parse_addr(c->addr, strlen(c->addr), &a) < 0) {
            ok(0, "%s / %s parse", c->net, c->addr);
            continue;
        }
        is_int(client_ip_trusted(&t, &a), c->inside, "%s %s %s", c->addr,
               c->inside ? "in" : "not in", c->net);
    }
    static const char *const bad[] = {
        "10.0.0.0/33", "10.1.0.0/8",  "::1/129",     "1.2.3.4:80",        "[::1]", "host", "",
        "10.0.0.0/",   "10.0.0.0/-1", "10.0.0.0/ 8", "::ffff:10.0.0.0/95"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct client_net n;
        char err[RL_ERRLEN];
        ok(client_ip_parse_net(bad[i], &n, err, sizeof err) < 0, "\"%s\" is refused (%s)", bad[i],
           err);
    }
}

/* The client per client_ip_resolve, as text ("" when none). */
static const char *resolve(const struct client_trust *t, const char *peer, const char *xff1,
                           const char *xff2, const char *real_ip)
{
    static char out[CLIENT_IP_TEXT];
    struct client_addr p = {.family = AF_UNSPEC}, c;
    const char *xff[2] = {xff1, xff2};
    size_t n = xff2 ? 2 : xff1 ? 1 : 0;
    if (peer && client_ip_parse_addr(peer, strlen(peer), &p) < 0)
        return "bad peer";
    if (client_ip_resolve(t, &p, xff, n, real_ip, &c) < 0)
        return "";
    client_ip_format(&c, out);
    return out;
}

static void test_walk(void)
{
    struct client_net nets[2];
    char err[RL_ERRLEN];
    if (client_ip_parse_net("10.0.0.0/8", &nets[0], err, sizeof err) < 0 ||
        client_ip_parse_net("::1", &nets[1], err, sizeof err) < 0)
        abort();
    struct client_trust t = {.n = 2, .nets = nets}, none = {0}, unix_too = t;
    unix_too.unix_trusted = 1;

    is_str(resolve(&t, "203.0.113.1", "1.1.1.1", NULL, NULL), "203.0.113.1",
           "an untrusted peer's X-Forwarded-For is ignored");
    is_str(resolve(&t, "203.0.113.1", NULL, NULL, "1.1.1.1"), "203.0.113.1",
           "an untrusted peer's X-Real-IP is ignored");
    is_str(resolve(&t, "10.0.0.1", NULL, NULL, NULL), "10.0.0.1",
           "a trusted peer with nothing to say is the client");
    is_str(resolve(&t, "10.0.0.1", "1.1.1.1", NULL, NULL), "1.1.1.1", "one hop");
    is_str(resolve(&t, "10.0.0.1", "6.6.6.6, 1.1.1.1, 10.0.0.2", NULL, NULL), "1.1.1.1",
           "the right-most untrusted entry; what the client wrote on the left is ignored");
    is_str(resolve(&t, "10.0.0.1", "6.6.6.6, 1.1.1.1", "10.0.0.3,10.0.0.2", NULL), "1.1.1.1",
           "the walk goes on over an earlier X-Forwarded-For line");
    is_str(resolve(&t, "10.0.0.1", "10.0.0.5 , \t10.0.0.4", "10.0.0.3", NULL), "10.0.0.5",
           "every entry trusted: the left-most");
    is_str(resolve(&t, "10.0.0.1", " 1.1.1.1 ,, ", NULL, NULL), "1.1.1.1",
           "spaces and empty entries");
    is_str(resolve(&t, "10.0.0.1", "1.1.1.1, garbage", NULL, NULL), "10.0.0.1",
           "garbage right of the client: the last trusted hop (the peer)");
    is_str(resolve(&t, "10.0.0.1", "1.1.1.1, 2.2.2.2:5555, 10.0.0.9", NULL, NULL), "10.0.0.9",
           "an entry with a port is not an address: the last trusted hop");
    is_str(resolve(&t, "10.0.0.1", "unknown", NULL, NULL), "10.0.0.1", "\"unknown\"");
    is_str(resolve(&t, "10.0.0.1", "[2001:db8::1]", NULL, NULL), "10.0.0.1",
           "brackets are not an address");
    is_str(resolve(&t, "10.0.0.1", "2001:db8::1", NULL, NULL), "2001:db8::1", "an IPv6 client");
    is_str(resolve(&t, "10.0.0.1", "::ffff:1.2.3.4", NULL, NULL), "1.2.3.4",
           "an IPv4-mapped client is written as IPv4");
    is_str(resolve(&t, "::1", "1.1.1.1", NULL, NULL), "1.1.1.1", "a trusted IPv6 peer");
    is_str(resolve(&t, "::ffff:10.1.1.1", "1.1.1.1", NULL, NULL), "1.1.1.1",
           "an IPv4-mapped peer inside an IPv4 network");
    is_str(resolve(&t, "10.0.0.1", NULL, NULL, "1.1.1.1"), "1.1.1.1",
           "X-Real-IP without X-Forwarded-For");
    is_str(resolve(&t, "10.0.0.1", "2.2.2.2", NULL, "1.1.1.1"), "2.2.2.2",
           "X-Forwarded-For wins over X-Real-IP");
    is_str(resolve(&t, "10.0.0.1", NULL, NULL, "1.1.1.1, 2.2.2.2"), "10.0.0.1",
           "an X-Real-IP that is not one address is ignored");
    is_str(resolve(&none, NULL, "1.1.1.1", NULL, NULL), "", "an untrusted unix peer: no address");
    is_str(resolve(&unix_too, NULL, "1.1.1.1", NULL, NULL), "1.1.1.1",
           "a trusted unix peer's X-Forwarded-For");
    is_str(resolve(&unix_too, NULL, "garbage", NULL, NULL), "",
           "a trusted unix peer and garbage: no address, never the garbage");
}

static const char *lookup(void *arg, const char *name)
{
    const char *const *h = arg; /* name, value, ..., NULL; "ip" for ${ip} */
    for (; *h; h += 2)
        if (strcmp(h[0], name ? name : "ip") == 0)
            return h[1];
    return NULL;
}

static void test_templates(void)
{
    struct key_template t;
    char err[RL_ERRLEN], out[64];
    size_t at, len;
    const char *missing;
    const char *const values[] = {"ip", "192.0.2.1", "X-Tenant", "acme", "Empty", "", NULL};

    ok(key_template_compile("t:${header:X-Tenant}:${ip}:$$", &t, &at, err, sizeof err) == 0,
       "a composite template compiles");
    is_int(key_template_render(&t, lookup, (void *)values, 0, out, sizeof out, &len, &missing),
           KEY_RENDER_OK, "renders");
    is_str(out, "t:acme:192.0.2.1:$", "literal, header, ip, $$");
    is_int((int)len, (int)strlen("t:acme:192.0.2.1:$"), "its length");

    ok(key_template_compile("${header:X-Api-Key}", &t, &at, err, sizeof err) == 0, "header only");
    is_int(key_template_render(&t, lookup, (void *)values, 0, out, sizeof out, &len, &missing),
           KEY_RENDER_MISSING, "an absent header is missing");
    is_str(missing, "X-Api-Key", "named");
    ok(key_template_compile("${header:Empty}/${ip}", &t, &at, err, sizeof err) == 0, "compiles");
    is_int(key_template_render(&t, lookup, (void *)values, 1, out, sizeof out, &len, &missing),
           KEY_RENDER_MISSING, "an empty header is missing too");
    is_str(out, "-/192.0.2.1", "filled with - when shared");
    ok(key_template_compile("${header:x-tenant}", &t, &at, err, sizeof err) == 0 &&
           strcmp(t.text + t.parts[0].off, "x-tenant") == 0,
       "the header name is kept as written (looked up in any case by the caller)");

    ok(key_template_compile("${ip}${ip}${ip}${ip}${ip}", &t, &at, err, sizeof err) == 0,
       "compiles");
    is_int(key_template_render(&t, lookup, (void *)values, 0, out, 40, &len, &missing),
           KEY_RENDER_TOO_LONG, "a key over the buffer is refused, not cut");

    static const struct {
        const char *src;
        size_t at;
    } bad[] = {{"", 0},        {"a$", 1},         {"${", 0},
               {"x${ipx}", 1}, {"${header:}", 0}, {"${header:a b}", 10},
               {"$x", 0},      {"${HEADER:a}", 0}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = key_template_compile(bad[i].src, &t, &at, err, sizeof err);
        ok(rc < 0 && at == bad[i].at, "\"%s\" is refused at byte %zu (%s, at %zu)", bad[i].src,
           bad[i].at, err, at);
    }
    char longer[KEY_TEMPLATE_MAX + 2];
    memset(longer, 'a', sizeof longer - 1);
    longer[sizeof longer - 1] = '\0';
    ok(key_template_compile(longer, &t, &at, err, sizeof err) < 0, "257 bytes are refused");
    longer[KEY_TEMPLATE_MAX] = '\0';
    ok(key_template_compile(longer, &t, &at, err, sizeof err) == 0, "256 bytes are fine");
}

int main(void)
{
    test_nets();
    test_walk();
    test_templates();
    return tap_done();
}
