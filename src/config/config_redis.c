/* SPDX-License-Identifier: Apache-2.0 */
/*
 * config_redis.c: the Redis modes of the policy file beyond one URL:
 * redis.sentinel.addresses and .password, redis.cluster's seed URLs, and
 * the rules between redis's fields once the section is read (sentinel or
 * cluster, not both; no redis.url beside a cluster; redis.tls only with
 * rediss://, its certificate and key together), which set redis_tls_on.
 *
 * Does not own the rows of redis's sections (config_fields.c, with every
 * other row of struct config), what a URL is (redis_url.c), nor connecting
 * (backend/redis/).
 */
#include "config/config.h"
#include "config/config_internal.h"
#include "config/redis_url.h"
#include "lib/hostport.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SENTINELS_MAX 16     /* redis.sentinel.addresses; deployments run 3 or 5 */
#define CLUSTER_SEEDS_MAX 64 /* redis.cluster; one live seed is enough */

/* ---- redis modes: TLS, Sentinel, Cluster ------------------------------------------ */

/* A sentinel: "host:port" or "[v6]:port" (Sentinel has no default port
 * worth guessing: 26379 is a convention, not a rule). */
static int check_sentinel_address(void *ctx, size_t i, const char *s, char *err, size_t errlen)
{
    (void)ctx, (void)i;
    struct hostport hp;
    return hostport_parse(s, strlen(s), 0, &hp, err, errlen);
}

/* A cluster seed: a TCP URL (cluster nodes announce host:port, never a
 * socket path) on database 0, the only one Cluster has; parsed into
 * c->redis_seeds[i], the form the backend connects with. */
static int check_cluster_seed(void *ctx, size_t i, const char *s, char *err, size_t errlen)
{
    struct config *c = ctx;
    struct redis_url u;

    if (redis_url_parse(s, &u, err, errlen) < 0)
        return -1;
    if (u.unix_path != NULL || u.db != 0) {
        snprintf(err, errlen, "%s",
                 u.unix_path != NULL ? "a cluster seed must be redis:// or rediss://, not unix:"
                                     : "Redis Cluster has only database 0");
        redis_url_free(&u);
        return -1;
    }
    /* Seed i follows the i already parsed: config_free frees them. */
    c->redis_seeds = xrealloc(c->redis_seeds, (i + 1) * sizeof *c->redis_seeds);
    c->redis_seeds[i] = u;
    return 0;
}

/*
 * A sequence of 1 to max strings, each passing check (given ctx and the
 * item's index), into a new array stored in *items and *n as soon as it
 * exists, so that config_free frees what was parsed whatever fails. Values
 * are not quoted back: a URL may hold a password.
 */
static int parse_string_list(struct loader *ld, const yaml_node_t *node, const char *path,
                             size_t max, const char *what,
                             int (*check)(void *ctx, size_t i, const char *s, char *err,
                                          size_t errlen),
                             void *ctx, char ***items, size_t *n)
{
    const yaml_node_item_t *item;
    char child[PATH_LEN], msg[RL_ERRLEN];
    size_t count;

    if (node->type != YAML_SEQUENCE_NODE)
        return cfg_fail(ld, node, path, "expected a sequence of %s, got %s", what, cfg_kind(node));
    count = (size_t)(node->data.sequence.items.top - node->data.sequence.items.start);
    if (count == 0 || count > max)
        return cfg_fail(ld, node, path, "must list 1 to %zu %s", max, what);
    *items = xcalloc(count, sizeof **items);
    for (item = node->data.sequence.items.start; *n < count; item++) {
        const yaml_node_t *v = cfg_node_at(ld, *item);
        const char *s;

        snprintf(child, sizeof child, "%s[%zu]", path, *n);
        if ((s = cfg_scalar_text(ld, v, child, "a string", 0)) == NULL)
            return -1;
        if (check(ctx, *n, s, msg, sizeof msg) < 0)
            return cfg_fail(ld, v, child, "%s", msg);
        (*items)[(*n)++] = xstrdup(s);
    }
    return 0;
}

int cfg_parse_sentinel_addresses(struct loader *ld, const yaml_node_t *node, const char *path,
                                 void *slot)
{
    struct redis_sentinel_config *sc = slot;
    return parse_string_list(ld, node, path, SENTINELS_MAX, "sentinel addresses (host:port)",
                             check_sentinel_address, NULL, &sc->addresses, &sc->naddresses);
}

/* redis.sentinel.password: a string, or null for none (the sentinels'
 * AUTH is often off even when the data nodes' is on). */
int cfg_parse_sentinel_password(struct loader *ld, const yaml_node_t *node, const char *path,
                                void *slot)
{
    const char *s;

    if (cfg_is_null(node))
        return 0;
    if ((s = cfg_scalar_text(ld, node, path, "a string or null", 0)) == NULL)
        return -1;
    if (*s == '\0')
        return cfg_fail(ld, node, path, "must not be empty: leave it out (or null) for no AUTH");
    *(char **)slot = xstrdup(s);
    return 0;
}

/* redis.url's value (the file's or --redis-url's, or the default) as
 * written and parsed: the one parse of it (redis_url.c). */
int cfg_redis_url_set(struct config *c, const char *text, char *err, size_t errlen)
{
    struct redis_url u;
    char *copy;

    if (redis_url_parse(text, &u, err, errlen) < 0)
        return -1;
    copy = xstrdup(text); /* text may be c->redis_url itself */
    free(c->redis_url);
    c->redis_url = copy;
    redis_url_free(&c->redis_server);
    c->redis_server = u;
    return 0;
}

/* redis.url: syntax only (whether a server answers there is for the
 * backend to find out); the value is never quoted back. */
int cfg_parse_redis_url(struct loader *ld, const yaml_node_t *node, const char *path, void *slot)
{
    char msg[RL_ERRLEN];
    const char *s;

    if ((s = cfg_scalar_text(ld, node, path, "a string", 0)) == NULL)
        return -1;
    if (cfg_redis_url_set(slot, s, msg, sizeof msg) < 0)
        return cfg_fail(ld, node, path, "%s", msg);
    return 0;
}

/* redis.cluster: seed URLs, all of one scheme, since one redis.tls (or
 * none) serves every node the cluster announces. */
int cfg_parse_cluster(struct loader *ld, const yaml_node_t *node, const char *path, void *slot)
{
    struct config *c = slot;
    char child[PATH_LEN];

    if (parse_string_list(ld, node, path, CLUSTER_SEEDS_MAX, "seed URLs", check_cluster_seed, c,
                          &c->redis_cluster, &c->redis_ncluster) < 0)
        return -1;
    for (size_t i = 1; i < c->redis_ncluster; i++) {
        if (c->redis_seeds[i].tls != c->redis_seeds[0].tls) {
            snprintf(child, sizeof child, "%s[%zu]", path, i);
            return cfg_fail(ld, cfg_node_at(ld, node->data.sequence.items.start[i]), child,
                            "every seed must use the scheme of %s[0] (%s)", path,
                            c->redis_seeds[0].tls ? "rediss://" : "redis://");
        }
    }
    return 0;
}

/* redis.tls's client certificate and key go together. */
static int check_tls_pair(struct loader *ld, const yaml_node_t *tls)
{
    const yaml_node_t *cert = cfg_field_node(ld, tls, "cert_file");
    const yaml_node_t *key = cfg_field_node(ld, tls, "key_file");

    if (cert != NULL && key == NULL)
        return cfg_fail(ld, cert, "redis.tls.cert_file", "needs key_file (the certificate's key)");
    if (key != NULL && cert == NULL)
        return cfg_fail(ld, key, "redis.tls.key_file", "needs cert_file (the key's certificate)");
    return 0;
}

/*
 * The rules between redis's fields, once the section is read: sentinel and
 * cluster exclude each other; a cluster takes its URLs from the seeds, so
 * an explicit redis.url beside it would be silently ignored (refused);
 * Sentinel answers host:port, so its redis.url cannot be a socket; a tls
 * section with plain URLs would be silently ignored (refused). Sets
 * redis_tls_on from the scheme of the URLs in use.
 */
int cfg_check_redis_modes(struct loader *ld, const yaml_node_t *root, struct config *c)
{
    const yaml_node_t *redis = cfg_field_node(ld, root, "redis");
    const yaml_node_t *url, *tls, *sentinel, *cluster;
    char msg[RL_ERRLEN];

    /* Neither the file nor --redis-url gave one: the default's parse. */
    if (c->redis_server.host == NULL && c->redis_server.unix_path == NULL &&
        cfg_redis_url_set(c, c->redis_url, msg, sizeof msg) < 0)
        abort(); /* CONFIG_DEFAULT_REDIS_URL is valid */
    if (redis == NULL) {
        c->redis_tls_on = c->redis_server.tls;
        return 0;
    }
    /* Warned about, not refused (as listen_mode without a unix socket
     * is): a memory file is often the Redis one with its backend line
     * switched (the container image's), and the section then does
     * nothing rather than something wrong. The daemon logs the warning at
     * start and on reload, -t prints it. Not with --backend memory (as
     * tools/run.sh gives it): the command line says it on purpose. */
    if (c->backend == BACKEND_KIND_MEMORY && ld->backend_from_cli)
        return 0;
    if (c->backend == BACKEND_KIND_MEMORY) {
        char note[4096 + RL_ERRLEN]; /* the file's path, then the message */
        snprintf(note, sizeof note,
                 "%s:%zu:%zu: redis: not used with backend: memory (nothing calls Redis): remove "
                 "the section or set backend: redis",
                 ld->name, redis->start_mark.line + 1, redis->start_mark.column + 1);
        free(c->warning);
        c->warning = xstrdup(note);
        return 0;
    }
    url = cfg_field_node(ld, redis, "url");
    tls = cfg_field_node(ld, redis, "tls");
    sentinel = cfg_field_node(ld, redis, "sentinel");
    cluster = cfg_field_node(ld, redis, "cluster");
    if (cluster != NULL && sentinel != NULL)
        return cfg_fail(ld, cluster, "redis.cluster", "give sentinel or cluster, not both");
    if (cluster != NULL && url != NULL)
        return cfg_fail(ld, url, "redis.url",
                        "not used with redis.cluster (the seed URLs give the scheme and "
                        "credentials): remove it");
    if (c->redis_ncluster > 0) {
        c->redis_tls_on = c->redis_seeds[0].tls;
    } else {
        c->redis_tls_on = c->redis_server.tls;
        if (sentinel != NULL && c->redis_server.unix_path != NULL)
            return cfg_fail(ld, url, "redis.url",
                            "must be redis:// or rediss:// with redis.sentinel (the sentinels give "
                            "the master's host and port)");
    }
    if (tls != NULL && !c->redis_tls_on)
        return cfg_fail(ld, tls, "redis.tls", "applies only to rediss:// URLs, and %s is not one",
                        cluster != NULL ? "redis.cluster" : "redis.url");
    return tls != NULL ? check_tls_pair(ld, tls) : 0;
}
