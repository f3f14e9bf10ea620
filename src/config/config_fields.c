/* SPDX-License-Identifier: Apache-2.0 */
/*
 * config_fields.c: the rows of struct config, the top level of the policy
 * file and its redis, redis.tls, redis.sentinel, tls, admin_tls and
 * grpc_tls sections: each row's
 * name, type, bounds, default and reload rule (applied on reload, or needs
 * a restart), the value checkers its strings pass, and the custom parsers
 * of the values a type alone cannot read (workers, listen_mode,
 * listen_group, auth_token_file, trusted_proxies). Every row that carries
 * a reload rule is here, so one file answers "what survives a reload".
 *
 * Does not own the walker that reads the rows (config_walk.c), the walks
 * over them for defaults, reload and docs (config.c), redis.sentinel and
 * redis.cluster's list parsers and the rules between redis's fields
 * (config_redis.c), nor the tables of items a custom parser builds
 * (policies, tiers and overrides in config_policies.c, descriptors in
 * config_domains.c): those live beside their parser, whose private structs
 * they fill.
 */
#include "config/config.h"
#include "config/config_internal.h"
#include "config/redis_url.h"
#include "lib/hostport.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#define MAX_BODY_MIN 64
#define MAX_BODY_MAX 16777216
#define UNIX_PATH_MAX (sizeof(((struct sockaddr_un *)0)->sun_path) - 1)
#define SENTINEL_NAME_MAX 255 /* redis.sentinel.master_name */
#define SERVER_NAME_MAX 253   /* redis.tls.server_name: a DNS name's limit */

static int parse_token_file(struct loader *ld, const yaml_node_t *node, const char *path,
                            void *slot);
static int parse_workers(struct loader *ld, const yaml_node_t *node, const char *path, void *slot);
static int parse_trusted_proxies(struct loader *ld, const yaml_node_t *node, const char *path,
                                 void *slot);
static int parse_listen_mode(struct loader *ld, const yaml_node_t *node, const char *path,
                             void *slot);
static int parse_listen_group(struct loader *ld, const yaml_node_t *node, const char *path,
                              void *slot);

/* ---- value checks ---------------------------------------------------------- */

static int check_unix_path(const char *p, char *err, size_t errlen)
{
    if (p[0] != '/' || p[1] == '\0')
        return snprintf(err, errlen, "a unix socket path must be absolute (unix:/path)"), -1;
    if (strlen(p) > UNIX_PATH_MAX)
        return snprintf(err, errlen, "unix socket path longer than %zu bytes", UNIX_PATH_MAX), -1;
    return 0;
}

static int check_listen(const char *s, char *err, size_t errlen)
{
    if (strncmp(s, "unix:", 5) == 0)
        return check_unix_path(s + 5, err, errlen);
    struct hostport hp;
    return hostport_parse(s, strlen(s), 0, &hp, err, errlen);
}

/* A file the daemon reads at start (redis.tls's CA, certificate, key):
 * checked now, so that --check-config finds a typo or a permission
 * problem rather than the first connection. Whether its content is a valid
 * certificate is for redis_tls.c to say when it loads it. */
static int check_readable(const char *s, char *err, size_t errlen)
{
    struct stat st;
    int fd, rc = 0;

    if (s[0] != '/')
        return snprintf(err, errlen, "must be an absolute path"), -1;
    if ((fd = open(s, O_RDONLY | O_CLOEXEC)) < 0)
        return snprintf(err, errlen, "cannot read %s: %s", s, strerror(errno)), -1;
    if (fstat(fd, &st) < 0)
        rc = -1, snprintf(err, errlen, "cannot read %s: %s", s, strerror(errno));
    else if (!S_ISREG(st.st_mode))
        rc = -1, snprintf(err, errlen, "cannot read %s: not a regular file", s);
    close(fd); /* read-only: nothing to lose */
    return rc;
}

/* Printable ASCII with no space, at most max bytes: what a TLS server name
 * or a Sentinel master name can be (both travel in protocol messages where
 * a space or a control byte would split or corrupt them). */
static int check_token(const char *s, size_t max, char *err, size_t errlen)
{
    if (*s == '\0')
        return snprintf(err, errlen, "must not be empty"), -1;
    if (strlen(s) > max)
        return snprintf(err, errlen, "longer than %zu bytes", max), -1;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++)
        if (*p <= 0x20 || *p >= 0x7f)
            return snprintf(err, errlen, "must be printable ASCII with no spaces"), -1;
    return 0;
}

static int check_server_name(const char *s, char *err, size_t errlen)
{
    return check_token(s, SERVER_NAME_MAX, err, errlen);
}

static int check_master_name(const char *s, char *err, size_t errlen)
{
    return check_token(s, SENTINEL_NAME_MAX, err, errlen);
}

/* The prefix goes in front of the hash tag, so a brace in it would move the
 * tag; whitespace and control bytes would only make keys hard to handle. */
static int check_prefix(const char *s, char *err, size_t errlen)
{
    const char *p;

    if (strlen(s) > CONFIG_PREFIX_MAX)
        return snprintf(err, errlen, "longer than %d bytes", CONFIG_PREFIX_MAX), -1;
    if (strpbrk(s, "{}") != NULL)
        return snprintf(err, errlen, "must not contain { or } (they would move the hash tag)"), -1;
    for (p = s; *p; p++)
        if ((unsigned char)*p <= 0x20 || *p == 0x7f)
            return snprintf(err, errlen, "must not contain whitespace or control characters"), -1;
    return 0;
}

/* ---- the field tables -------------------------------------------------------- */

/* F_CHOICE values are stored through an int. */
_Static_assert(sizeof(enum clock_source) == sizeof(int), "enum clock_source is an int");
_Static_assert(sizeof(enum log_level) == sizeof(int), "enum log_level is an int");
_Static_assert(sizeof(enum overload_action) == sizeof(int), "enum overload_action is an int");
_Static_assert(sizeof(enum backend_kind) == sizeof(int), "enum backend_kind is an int");
_Static_assert(sizeof(enum header_mode) == sizeof(int), "enum header_mode is an int");
_Static_assert(sizeof(enum redis_module_mode) == sizeof(int), "enum redis_module_mode is an int");
static const char *const backend_names[] = {
    [BACKEND_KIND_REDIS] = "redis", [BACKEND_KIND_MEMORY] = "memory", NULL};
static const char *const redis_module_names[] = {
    [REDIS_MODULE_AUTO] = "auto", [REDIS_MODULE_ON] = "on", [REDIS_MODULE_OFF] = "off", NULL};
const char *config_redis_module_name(enum redis_module_mode m)
{
    return redis_module_names[m];
}

static const char *const clock_names[] = {
    [CLOCK_SOURCE_REDIS] = "redis", [CLOCK_SOURCE_LOCAL] = "local", NULL};
static const char *const log_level_names[] = {[LOG_LVL_DEBUG] = "debug",
                                              [LOG_LVL_INFO] = "info",
                                              [LOG_LVL_WARN] = "warn",
                                              [LOG_LVL_ERROR] = "error",
                                              NULL};
static const char *const overload_names[] = {
    [OVERLOAD_FAILURE_MODE] = "failure_mode", [OVERLOAD_REJECT] = "reject", NULL};
/* HEADERS_INHERIT is not a choice: it is what "not set" is stored as. */
const char *const cfg_header_names[] = {[HEADERS_X_RATELIMIT] = "x-ratelimit",
                                        [HEADERS_IETF] = "ietf",
                                        [HEADERS_BOTH] = "both",
                                        [HEADERS_NONE] = "none",
                                        NULL};

static int check_absolute(const char *s, char *err, size_t errlen)
{
    if (s[0] != '/')
        return snprintf(err, errlen, "must be an absolute path"), -1;
    return 0;
}

/* redis.tls, redis.sentinel: sections of struct config itself. */
static const struct field redis_tls_fields[] = {
    {"ca_file", F_STRING, .offset = offsetof(struct config, redis_tls.ca_file),
     .check = check_readable, .reload = RELOAD_RESTART},
    {"cert_file", F_STRING, .offset = offsetof(struct config, redis_tls.cert_file),
     .check = check_readable, .reload = RELOAD_RESTART},
    {"key_file", F_STRING, .offset = offsetof(struct config, redis_tls.key_file),
     .check = check_readable, .reload = RELOAD_RESTART},
    {"server_name", F_STRING, .offset = offsetof(struct config, redis_tls.server_name),
     .check = check_server_name, .reload = RELOAD_RESTART},
    {"verify", F_BOOL, .offset = offsetof(struct config, redis_tls.verify), .def = 1,
     .reload = RELOAD_RESTART},
    {.name = NULL},
};

/* tls, admin_tls, grpc_tls: the same rows, each into its listener's
 * struct listen_tls_config. A reload applies them, block added or removed
 * included, to the connections accepted after it (config_tls.c reads the
 * files again every time). */
const char *const cfg_client_auth_names[] = {[TLS_CLIENT_AUTH_NONE] = "none",
                                             [TLS_CLIENT_AUTH_REQUEST] = "request",
                                             [TLS_CLIENT_AUTH_REQUIRE] = "require",
                                             NULL};

#define LISTEN_TLS_FIELDS(table, i)                                                                \
    static const struct field table[] = {                                                          \
        {"cert_file", F_STRING, .required = 1,                                                     \
         .offset = offsetof(struct config, listen_tls[i].cert_file), .check = check_readable},     \
        {"key_file", F_STRING, .required = 1,                                                      \
         .offset = offsetof(struct config, listen_tls[i].key_file), .check = check_readable},      \
        {"client_ca_file", F_STRING,                                                               \
         .offset = offsetof(struct config, listen_tls[i].client_ca_file),                          \
         .check = check_readable},                                                                 \
        {"client_auth", F_CHOICE, .offset = offsetof(struct config, listen_tls[i].client_auth),    \
         .choices = cfg_client_auth_names, .def = TLS_CLIENT_AUTH_NONE},                           \
        {.name = NULL},                                                                            \
    }
LISTEN_TLS_FIELDS(tls_fields, TLS_LISTEN);
LISTEN_TLS_FIELDS(admin_tls_fields, TLS_ADMIN_LISTEN);
LISTEN_TLS_FIELDS(grpc_tls_fields, TLS_GRPC_LISTEN);

static const struct field redis_sentinel_fields[] = {
    {"addresses", F_CUSTOM, .required = 1, .offset = offsetof(struct config, redis_sentinel),
     .parse = cfg_parse_sentinel_addresses,
     .store = STORE_LIST(struct config, redis_sentinel.addresses, redis_sentinel.naddresses),
     .reload = RELOAD_RESTART},
    {"master_name", F_STRING, .required = 1,
     .offset = offsetof(struct config, redis_sentinel.master_name), .check = check_master_name,
     .reload = RELOAD_RESTART},
    {"password", F_CUSTOM, .offset = offsetof(struct config, redis_sentinel.password),
     .parse = cfg_parse_sentinel_password,
     .store = STORE(S_STRING, struct config, redis_sentinel.password), .reload = RELOAD_RESTART},
    {.name = NULL},
};

static const struct field redis_fields[] = {
    {"url", F_CUSTOM, .offset = 0 /* the whole config */, .parse = cfg_parse_redis_url,
     .def_str = CONFIG_DEFAULT_REDIS_URL, .store = STORE(S_STRING, struct config, redis_url),
     .reload = RELOAD_RESTART},
    {"timeout", F_DURATION, .offset = offsetof(struct config, redis_timeout_us),
     .max = CONFIG_REDIS_TIMEOUT_MAX_US, .def = CONFIG_DEFAULT_TIMEOUT_US},
    {"batch", F_INT, .offset = offsetof(struct config, redis_batch), .min = 1,
     .max = CONFIG_REDIS_BATCH_MAX, .def = CONFIG_DEFAULT_REDIS_BATCH},
    {"module", F_CHOICE, .offset = offsetof(struct config, redis_module),
     .choices = redis_module_names, .def = REDIS_MODULE_AUTO, .reload = RELOAD_RESTART},
    {"key_prefix", F_STRING, .offset = offsetof(struct config, key_prefix), .check = check_prefix,
     .def_str = CONFIG_DEFAULT_PREFIX},
    {"tls", F_SECTION, .section = redis_tls_fields, .reload = RELOAD_RESTART},
    {"sentinel", F_SECTION, .section = redis_sentinel_fields, .reload = RELOAD_RESTART},
    {"cluster", F_CUSTOM, .offset = 0 /* the whole config */, .parse = cfg_parse_cluster,
     .store = STORE_LIST(struct config, redis_cluster, redis_ncluster), .reload = RELOAD_RESTART},
    {.name = NULL},
};

const struct field cfg_top_fields[] = {
    {"listen", F_STRING, .offset = offsetof(struct config, listen), .check = check_listen,
     .def_str = CONFIG_DEFAULT_LISTEN, .reload = RELOAD_RESTART},
    {"listen_mode", F_CUSTOM, .offset = offsetof(struct config, listen_mode),
     .parse = parse_listen_mode, .def = -1, .store = STORE(S_INT64, struct config, listen_mode),
     .reload = RELOAD_RESTART},
    {"listen_group", F_CUSTOM, .offset = 0 /* the whole config */, .parse = parse_listen_group,
     .def = -1, .store = STORE(S_INT64, struct config, listen_gid), .reload = RELOAD_RESTART},
    {"backend", F_CHOICE, .offset = offsetof(struct config, backend), .choices = backend_names,
     .def = BACKEND_KIND_REDIS, .reload = RELOAD_RESTART},
    {"workers", F_CUSTOM, .offset = 0 /* the whole config */, .parse = parse_workers, .def = 1,
     .store = STORE(S_INT64, struct config, workers), .reload = RELOAD_RESTART},
    {"redis", F_SECTION, .section = redis_fields},
    {"clock", F_CHOICE, .offset = offsetof(struct config, clock), .choices = clock_names,
     .def = CLOCK_SOURCE_REDIS},
    {"max_body", F_INT, .offset = offsetof(struct config, max_body), .min = MAX_BODY_MIN,
     .max = MAX_BODY_MAX, .def = CONFIG_DEFAULT_MAX_BODY},
    {"log_level", F_CHOICE, .offset = offsetof(struct config, log_level),
     .choices = log_level_names, .def = LOG_LVL_INFO},
    {"access_log", F_BOOL, .offset = offsetof(struct config, access_log)},
    {"admin_listen", F_STRING, .offset = offsetof(struct config, admin_listen),
     .check = check_listen, .reload = RELOAD_RESTART},
    /* Read per request (http_routes.c), so a reload applies it. */
    {"admin_on_listen", F_BOOL, .offset = offsetof(struct config, admin_on_listen), .def = 0},
    {"grpc_listen", F_STRING, .offset = offsetof(struct config, grpc_listen), .check = check_listen,
     .reload = RELOAD_RESTART},
    {"grpc_max_streams", F_INT, .offset = offsetof(struct config, grpc_max_streams), .min = 1,
     .max = 10000, .def = CONFIG_DEFAULT_GRPC_MAX_STREAMS},
    {"watch", F_BOOL, .offset = offsetof(struct config, watch), .def = 0, .reload = RELOAD_RESTART},
    {"max_inflight", F_INT, .offset = offsetof(struct config, max_inflight), .min = 1,
     .max = 1000000, .def = CONFIG_DEFAULT_MAX_INFLIGHT},
    {"overload", F_CHOICE, .offset = offsetof(struct config, overload), .choices = overload_names,
     .def = OVERLOAD_FAILURE_MODE},
    {"max_connections", F_INT, .offset = offsetof(struct config, max_connections), .min = 16,
     .max = 1000000, .def = CONFIG_DEFAULT_MAX_CONNECTIONS},
    {"idle_timeout", F_DURATION, .offset = offsetof(struct config, idle_timeout_us),
     .max = 3600LL * 1000000, .def = CONFIG_DEFAULT_IDLE_TIMEOUT_US},
    {"request_timeout", F_DURATION, .offset = offsetof(struct config, request_timeout_us),
     .max = 3600LL * 1000000, .def = CONFIG_DEFAULT_REQUEST_TIMEOUT_US},
    {"local_max_keys", F_INT, .offset = offsetof(struct config, local_max_keys), .min = 1,
     .max = 100000000, .def = CONFIG_DEFAULT_LOCAL_MAX_KEYS, .reload = RELOAD_RESTART},
    /* Read once at start, as the store it saves is made then. */
    {"state_file", F_STRING, .offset = offsetof(struct config, state_file), .check = check_absolute,
     .reload = RELOAD_RESTART},
    {"state_interval", F_DURATION, .offset = offsetof(struct config, state_interval_us),
     .max = 86400LL * 1000000, .def = CONFIG_DEFAULT_STATE_INTERVAL_US, .reload = RELOAD_RESTART},
    {"deny_cache_max_keys", F_INT, .offset = offsetof(struct config, deny_cache_max_keys), .min = 0,
     .max = 100000000, .def = CONFIG_DEFAULT_DENY_CACHE_MAX_KEYS},
    {"headers", F_CHOICE, .offset = offsetof(struct config, headers), .choices = cfg_header_names,
     .def = HEADERS_X_RATELIMIT},
    {"auth_token_file", F_CUSTOM, .offset = 0 /* the whole config */, .parse = parse_token_file},
    {"trusted_proxies", F_CUSTOM, .offset = offsetof(struct config, trusted_proxies),
     .parse = parse_trusted_proxies},
    {"deny_status", F_INT, .offset = offsetof(struct config, deny_status), .min = 400, .max = 499,
     .def = CONFIG_DEFAULT_DENY_STATUS},
    {"policies", F_CUSTOM, .required = 1, .offset = 0 /* the whole config */,
     .parse = cfg_parse_policies, .section = cfg_policy_fields},
    {"domains", F_CUSTOM, .offset = 0 /* read after the policies */,
     .parse = cfg_parse_domains_later, .section = cfg_domain_fields},
    {"envoy_config", F_STRING, .offset = offsetof(struct config, envoy_config),
     .check = check_absolute},
    {"envoy_merge_domains", F_BOOL, .offset = offsetof(struct config, envoy_merge_domains),
     .def = 0},
    {"envoy_shadow_mode", F_BOOL, .offset = offsetof(struct config, envoy_shadow_mode), .def = 0},
    {"envoy_quota_mode", F_BOOL, .offset = offsetof(struct config, envoy_quota_mode), .def = 0},
    /* Read as domains are built and per Envoy request (rls.c): applied. */
    {"envoy_calendar_units", F_BOOL, .offset = offsetof(struct config, envoy_calendar_units),
     .def = 0},
    {"tls", F_SECTION, .section = tls_fields},
    {"admin_tls", F_SECTION, .section = admin_tls_fields},
    {"grpc_tls", F_SECTION, .section = grpc_tls_fields},
    {.name = NULL},
};

_Static_assert(NROWS(redis_fields) <= MAX_FIELDS && NROWS(cfg_top_fields) <= MAX_FIELDS &&
                   NROWS(redis_tls_fields) <= MAX_FIELDS &&
                   NROWS(redis_sentinel_fields) <= MAX_FIELDS && NROWS(tls_fields) <= MAX_FIELDS,
               "raise MAX_FIELDS");

/* ---- custom parsers and the rule between listen's fields --------------------------- */

/* trusted_proxies: a sequence of addresses, CIDR networks and "unix". */
static int parse_trusted_proxies(struct loader *ld, const yaml_node_t *node, const char *path,
                                 void *slot)
{
    struct client_trust *t = slot;
    const yaml_node_item_t *item;
    char child[PATH_LEN], msg[RL_ERRLEN], buf[SHOWN_LEN];
    size_t n, i;

    if (node->type != YAML_SEQUENCE_NODE)
        return cfg_fail(ld, node, path, "expected a sequence of addresses or networks, got %s",
                        cfg_kind(node));
    n = (size_t)(node->data.sequence.items.top - node->data.sequence.items.start);
    if (n > CLIENT_IP_TRUSTED_MAX)
        return cfg_fail(ld, node, path, "at most %d entries are allowed", CLIENT_IP_TRUSTED_MAX);
    client_trust_free(t);
    t->unix_trusted = 0;
    t->nets = xcalloc(n ? n : 1, sizeof *t->nets);
    for (i = 0, item = node->data.sequence.items.start; i < n; i++, item++) {
        const yaml_node_t *v = cfg_node_at(ld, *item);
        const char *s;

        snprintf(child, sizeof child, "%s[%zu]", path, i);
        if ((s = cfg_scalar_text(ld, v, child, "an address, a network or unix", 0)) == NULL)
            return -1;
        if (strcmp(s, "unix") == 0) {
            t->unix_trusted = 1;
            continue;
        }
        if (client_ip_parse_net(s, &t->nets[t->n], msg, sizeof msg) < 0)
            return cfg_fail(ld, v, child, "invalid value \"%s\": %s", cfg_shown(s, buf), msg);
        t->n++;
    }
    return 0;
}

/* workers: a number of event loops, or "auto" (one per CPU, counted when
 * the daemon starts, stored as 0). */
static int parse_workers(struct loader *ld, const yaml_node_t *node, const char *path, void *slot)
{
    struct config *c = slot;
    const char *text = cfg_scalar_text(ld, node, path, "a number or auto", 0);
    char err[RL_ERRLEN];
    if (text == NULL)
        return -1;
    if (strcmp(text, "auto") == 0) {
        c->workers = 0;
        return 0;
    }
    if (util_parse_int64(text, 1, CONFIG_WORKERS_MAX, &c->workers, err, sizeof err) < 0)
        return cfg_fail(ld, node, path, "must be auto or a number from 1 to %d: %s",
                        CONFIG_WORKERS_MAX, err);
    return 0;
}

/* listen_mode: the unix socket files' mode, in octal ("0660"): at most
 * 0777, as chmod takes it; setuid, setgid and sticky mean nothing on a
 * socket. Quoted or not, the text is read as octal. */
static int parse_listen_mode(struct loader *ld, const yaml_node_t *node, const char *path,
                             void *slot)
{
    const char *text = cfg_scalar_text(ld, node, path, "an octal mode such as \"0660\"", 0);
    char buf[SHOWN_LEN];
    size_t n;

    if (text == NULL)
        return -1;
    n = strspn(text, "01234567");
    if (n == 0 || n > 4 || text[n] != '\0' || strtol(text, NULL, 8) > 0777)
        return cfg_fail(ld, node, path,
                        "invalid value \"%s\": must be an octal mode from 0000 to 0777, "
                        "such as \"0660\"",
                        cfg_shown(text, buf));
    *(int64_t *)slot = strtol(text, NULL, 8);
    return 0;
}

/*
 * listen_group: a group name, looked up now (so that a typo is an error at
 * its line, not at bind), or a numeric gid, which need not have a name.
 */
static int parse_listen_group(struct loader *ld, const yaml_node_t *node, const char *path,
                              void *slot)
{
    struct config *c = slot;
    const char *text = cfg_scalar_text(ld, node, path, "a group name or number", 0);
    char buf[SHOWN_LEN], msg[RL_ERRLEN], sbuf[4096];
    struct group grp, *found = NULL;
    int64_t gid;

    if (text == NULL)
        return -1;
    if (text[0] >= '0' && text[0] <= '9') {
        /* (gid_t)-1 means "no change" to chown: not a group. */
        if (util_parse_int64(text, 0, (int64_t)UINT32_MAX - 1, &gid, msg, sizeof msg) < 0)
            return cfg_fail(ld, node, path, "invalid group number \"%s\": %s", cfg_shown(text, buf),
                            msg);
    } else {
        /* Some NSS modules report "no such group" as ENOENT or ESRCH. */
        int rc = getgrnam_r(text, &grp, sbuf, sizeof sbuf, &found);
        if (found == NULL && (rc == 0 || rc == ENOENT || rc == ESRCH))
            return cfg_fail(ld, node, path, "unknown group \"%s\"", cfg_shown(text, buf));
        if (found == NULL)
            return cfg_fail(ld, node, path, "cannot look up group \"%s\": %s", cfg_shown(text, buf),
                            strerror(rc));
        gid = (int64_t)found->gr_gid;
    }
    free(c->listen_group);
    c->listen_group = xstrdup(text);
    c->listen_gid = gid;
    return 0;
}

/* listen_mode and listen_group set a socket file's mode and group: with no
 * unix socket listener they would do nothing, which the file's author
 * surely did not mean. */
int cfg_check_unix_fields(struct loader *ld, const yaml_node_t *root, const struct config *c)
{
    static const char *const names[] = {"listen_mode", "listen_group"};
    size_t i;

    if (strncmp(c->listen, "unix:", 5) == 0 ||
        (c->admin_listen != NULL && strncmp(c->admin_listen, "unix:", 5) == 0) ||
        (c->grpc_listen != NULL && strncmp(c->grpc_listen, "unix:", 5) == 0))
        return 0;
    for (i = 0; i < sizeof names / sizeof names[0]; i++) {
        const yaml_node_t *node = cfg_field_node(ld, root, names[i]);
        if (node != NULL)
            return cfg_fail(ld, node, names[i],
                            "applies only to unix sockets, and none of listen, admin_listen, "
                            "grpc_listen is unix:/path");
    }
    return 0;
}

/* admin_on_listen puts the admin API on keys on listen, which never serves
 * it when admin_listen is set: the pair says two things at once. */
int cfg_check_admin_on_listen(struct loader *ld, const yaml_node_t *root, const struct config *c)
{
    const yaml_node_t *node = cfg_field_node(ld, root, "admin_on_listen");
    if (node != NULL && c->admin_on_listen && c->admin_listen != NULL)
        return cfg_fail(ld, node, "admin_on_listen",
                        "applies only without admin_listen (which then serves /v1/keys/): "
                        "remove one of them");
    return 0;
}

/*
 * auth_token_file: the token is read with the policy file, so a reload
 * (SIGHUP) picks up a rotated token and a missing or empty file is an error
 * at its line. Trailing whitespace (the newline editors add) is not part of
 * the token. The token itself never appears in a message.
 */
static int parse_token_file(struct loader *ld, const yaml_node_t *node, const char *path,
                            void *slot)
{
    struct config *c = slot;
    const char *file = cfg_scalar_text(ld, node, path, "a path", 0);
    char buf[CONFIG_TOKEN_MAX + 2];

    if (file == NULL)
        return -1;
    if (file[0] != '/')
        return cfg_fail(ld, node, path, "must be an absolute path");
    FILE *f = fopen(file, "rb");
    if (f == NULL)
        return cfg_fail(ld, node, path, "cannot open %s: %s", file, strerror(errno));
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    int bad = ferror(f);
    fclose(f);
    if (bad)
        return cfg_fail(ld, node, path, "cannot read %s", file);
    while (n > 0 && isspace((unsigned char)buf[n - 1]))
        n--;
    buf[n] = '\0';
    if (n > CONFIG_TOKEN_MAX)
        return cfg_fail(ld, node, path, "%s: the token is longer than %d bytes", file,
                        CONFIG_TOKEN_MAX);
    if (n < CONFIG_TOKEN_MIN || strlen(buf) != n || strpbrk(buf, " \t\r\n"))
        return cfg_fail(ld, node, path,
                        "%s: the token must be %d to %d bytes with no whitespace or NUL", file,
                        CONFIG_TOKEN_MIN, CONFIG_TOKEN_MAX);
    free(c->auth_token_file);
    free(c->auth_token);
    c->auth_token_file = xstrdup(file);
    c->auth_token = xstrdup(buf);
    return 0;
}

/* One of backend_names, or -1. */
static int backend_kind_of(const char *name)
{
    for (int i = 0; backend_names[i] != NULL; i++)
        if (strcmp(backend_names[i], name) == 0)
            return i;
    return -1;
}

/* Before the rules between fields, so that they hold for the values in
 * use. A --redis-url is one server, so it
 * cannot stand beside the file's sentinel or cluster, which name others;
 * its value is never quoted back (it may hold a password). */
int cfg_apply_cli(struct loader *ld, struct config *c, const struct config_cli *cli)
{
    char msg[RL_ERRLEN];
    int kind;

    if (cli == NULL)
        return 0;
    if (cli->listen != NULL) {
        if (check_listen(cli->listen, msg, sizeof msg) < 0)
            return snprintf(ld->err, ld->errlen, "--listen %s: %s", cli->listen, msg), -1;
        free(c->listen);
        c->listen = xstrdup(cli->listen);
    }
    if (cli->backend != NULL) {
        if ((kind = backend_kind_of(cli->backend)) < 0)
            return snprintf(ld->err, ld->errlen, "--backend: redis or memory, not \"%s\"",
                            cli->backend),
                   -1;
        c->backend = kind;
        ld->backend_from_cli = 1;
    }
    if (cli->redis_url == NULL)
        return 0;
    if (c->backend == BACKEND_KIND_MEMORY)
        return snprintf(ld->err, ld->errlen, "--redis-url: not used with backend memory"), -1;
    if (c->redis_ncluster > 0 || c->redis_sentinel.naddresses > 0)
        return snprintf(ld->err, ld->errlen,
                        "--redis-url: %s names redis.%s, which the one URL would replace: "
                        "remove one of them",
                        ld->name, c->redis_ncluster > 0 ? "cluster" : "sentinel"),
               -1;
    if (cfg_redis_url_set(c, cli->redis_url, msg, sizeof msg) < 0)
        return snprintf(ld->err, ld->errlen, "--redis-url: %s", msg), -1;
    return 0;
}
