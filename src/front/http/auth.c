/* SPDX-License-Identifier: Apache-2.0 */
/*
 * auth.c: forward-auth requests decoded into checks (auth.h).
 *
 * Owns the /auth path's shape, the X-RateLimit-Cost header and what a
 * missing key part does; not the template syntax (key_template.c), not who
 * the client is (client_ip.c), not the answer (response.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "front/http/auth.h"

#define AUTH_XFF_MAX HTTP_MAX_HEADERS

/* The policy named by the path's segment after /auth/ (Envoy's ext_authz
 * appends the original path, so whatever follows a further '/' is not part
 * of the name). NULL if none; then name holds the segment (cut to
 * POLICY_NAME_MAX bytes), for the message. */
static const struct policy *path_policy(const struct config *cfg, const char *path, char *name)
{
    const char *s = path + strlen(AUTH_PATH_PREFIX);
    size_t n = strcspn(s, "/");
    memcpy(name, s, n > POLICY_NAME_MAX ? POLICY_NAME_MAX : n);
    name[n > POLICY_NAME_MAX ? POLICY_NAME_MAX : n] = '\0';
    if (n == 0 || n > POLICY_NAME_MAX)
        return NULL;
    return config_find_policy(cfg, name);
}

/* What a template's variables read: the client address (resolved on first
 * use) and the request's headers. */
struct lookup {
    const struct config *cfg;
    const struct http_parse *p;
    const struct client_addr *peer;
    int resolved;
    char ip[CLIENT_IP_TEXT];
};

static const char *lookup(void *arg, const char *name)
{
    struct lookup *l = arg;
    if (name)
        return http_parse_header(l->p, name);
    if (!l->resolved) {
        const char *xff[AUTH_XFF_MAX];
        size_t nxff = http_parse_headers(l->p, "X-Forwarded-For", xff, AUTH_XFF_MAX);
        struct client_addr client;
        l->resolved = 1;
        if (client_ip_resolve(&l->cfg->trusted_proxies, l->peer, xff, nxff,
                              http_parse_header(l->p, "X-Real-IP"), &client) == 0)
            client_ip_format(&client, l->ip);
    }
    return l->ip;
}

/* The one place a forward-auth check item is made: per-key settings of the
 * policy (overrides) would be chosen here, from the key. */
static void auth_item(struct check_request *out, const struct policy *p, const char *key,
                      size_t keylen, int64_t cost)
{
    out->checks = xcalloc(1, sizeof *out->checks);
    out->checks[0] = (struct check_item){.policy = policy_for_key(p, key, keylen),
                                         .key = xstrndup(key, keylen),
                                         .keylen = keylen,
                                         .cost = cost};
    out->nchecks = 1;
    out->dry_run = 0;
    out->use_deny_status = 1;
}

enum auth_outcome auth_parse(const struct config *cfg, const struct http_parse *p,
                             const struct client_addr *peer, struct check_request *out,
                             struct auth_skip *skip, struct request_error *err)
{
    char name[POLICY_NAME_MAX + 1], key[POLICY_KEY_MAX + 1], msg[RL_ERRLEN];
    const struct http_request *req = http_parse_request(p);
    memset(out, 0, sizeof *out);
    const struct policy *pol = path_policy(cfg, req->path, name);
    if (!pol && !name[0]) {
        request_fail(err, RC_UNKNOWN_POLICY_IN_PATH,
                     "the path names no policy: use /auth/<policy>");
        return AUTH_ERROR;
    }
    if (!pol) {
        request_fail(err, RC_UNKNOWN_POLICY_IN_PATH, "no policy named \"%.80s\"", name);
        return AUTH_ERROR;
    }
    /* A lease needs a release, which a gateway never sends (the config
     * refuses forward-auth settings on such a policy, config_policies.c). */
    if (policy_may_lease(pol)) {
        request_fail(err, RC_NO_RELEASE_PATH,
                     "policy \"%s\" has a concurrency tier: forward-auth cannot release a lease",
                     pol->name);
        return AUTH_ERROR;
    }

    int64_t cost = 1;
    const char *c = http_parse_header(p, "X-RateLimit-Cost");
    if (c && util_parse_int64(c, 0, REQUEST_MAX_COST, &cost, msg, sizeof msg) < 0) {
        request_fail(err, RC_INVALID_COST, "X-RateLimit-Cost: %s", msg);
        return AUTH_ERROR;
    }

    struct lookup l = {.cfg = cfg, .p = p, .peer = peer};
    size_t keylen;
    const char *missing;
    enum key_render r =
        key_template_render(&pol->key, lookup, &l, pol->missing_key == MISSING_KEY_SHARED, key,
                            sizeof key, &keylen, &missing);
    if (r == KEY_RENDER_TOO_LONG) {
        request_fail(err, RC_INVALID_KEY, "the key built from the request is over %d bytes",
                     POLICY_KEY_MAX);
        return AUTH_ERROR;
    }
    if (r == KEY_RENDER_MISSING && pol->missing_key == MISSING_KEY_SKIP) {
        *skip = (struct auth_skip){.policy = pol, .missing = missing};
        return AUTH_SKIP;
    }
    if (r == KEY_RENDER_MISSING && pol->missing_key == MISSING_KEY_REJECT) {
        request_fail(err, RC_MISSING_KEY,
                     "the request lacks %s%.64s%s, a part of policy \"%s\"'s key",
                     strcmp(missing, "ip") == 0 ? "a client address (" : "the header ", missing,
                     strcmp(missing, "ip") == 0 ? ")" : "", pol->name);
        return AUTH_ERROR;
    }
    auth_item(out, pol, key, keylen, cost);
    return AUTH_CHECK;
}
