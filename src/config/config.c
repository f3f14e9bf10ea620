/*
 * config.c: the policy file, from YAML text to an immutable, reference-counted
 * struct config. The only code that reads the file or knows libyaml.
 *
 * The file is loaded whole with libyaml's document API (so every node keeps
 * its line and column) and walked by one generic function driven by the field
 * tables below: each table row names a field, its type, whether it is
 * required and where in the target struct it is stored. Unknown fields,
 * duplicate fields, wrong node types, nulls and invalid values are all errors
 * reported as "<file>:<line>:<column>: <path>: <message>", pointing at the
 * offending node (at the mapping, for a missing field).
 *
 * What a valid tier is belongs to policy.c (policy_tier_validate); this file
 * only maps its messages back to the line of the field they name. Defaults
 * live in config.h.
 */
#include "config/config.h"
#include "config/envoy_config.h"
#include "config/redis_url.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>
#include <yaml.h>

#define FILE_MAX (16 * 1024 * 1024) /* a policy file is never near this */
#define MAX_BODY_MIN 64
#define MAX_BODY_MAX 16777216
#define PATH_LEN 256  /* "policies.<name>.tiers[15].precision" and some */
#define SHOWN_LEN 48  /* a value quoted in a message */
#define MAX_FIELDS 32 /* rows in the largest field table */
#define UNIX_PATH_MAX (sizeof(((struct sockaddr_un *)0)->sun_path) - 1)
#define SENTINELS_MAX 16      /* redis.sentinel.addresses; deployments run 3 or 5 */
#define CLUSTER_SEEDS_MAX 64  /* redis.cluster; one live seed is enough */
#define SENTINEL_NAME_MAX 255 /* redis.sentinel.master_name */
#define SERVER_NAME_MAX 253   /* redis.tls.server_name: a DNS name's limit */

struct loader {
    yaml_document_t doc;
    const char *name; /* the file, for messages */
    char *err;
    size_t errlen;
    struct config *c;           /* the snapshot being built */
    const yaml_node_t *domains; /* `domains:`, parsed once the policies are final */
    int envoy_file;             /* an envoyproxy/ratelimit file: no `policy:` */
    int depth;                  /* of the descriptors being parsed */
};

/* ---- messages ---------------------------------------------------------- */

/* Reports an error at node and returns -1. path is the dotted path to the
 * node ("" for the top), fmt the message. */
__attribute__((format(printf, 4, 5))) static int fail(struct loader *ld, const yaml_node_t *node,
                                                      const char *path, const char *fmt, ...)
{
    char msg[2 * RL_ERRLEN];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(ld->err, ld->errlen, "%s:%zu:%zu: %s%s%s", ld->name, node->start_mark.line + 1,
             node->start_mark.column + 1, path, *path ? ": " : "", msg);
    return -1;
}

/* Like fail, but at byte `at` of a scalar's value when the scalar sits on
 * one line with no escapes (its width in the file is its length, plus two
 * quotes), where the column is exact; else at the node. */
__attribute__((format(printf, 5, 6))) static int fail_in(struct loader *ld, const yaml_node_t *node,
                                                         size_t at, const char *path,
                                                         const char *fmt, ...)
{
    char msg[2 * RL_ERRLEN];
    va_list ap;
    size_t col = node->start_mark.column + 1;
    size_t width = node->end_mark.column - node->start_mark.column;
    size_t quotes = node->data.scalar.style == YAML_PLAIN_SCALAR_STYLE ? 0 : 2;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (node->start_mark.line == node->end_mark.line && width == node->data.scalar.length + quotes)
        col += at + quotes / 2;
    snprintf(ld->err, ld->errlen, "%s:%zu:%zu: %s: %s", ld->name, node->start_mark.line + 1, col,
             path, msg);
    return -1;
}

/* A value from the file made safe to quote in a message: at most
 * SHOWN_LEN - 4 bytes, anything not printable ASCII shown as '?'. */
static const char *shown(const char *s, char buf[SHOWN_LEN])
{
    size_t i;

    for (i = 0; s[i] != '\0' && i < SHOWN_LEN - 4; i++)
        buf[i] = s[i] >= 0x20 && s[i] < 0x7f ? s[i] : '?';
    strcpy(buf + i, s[i] != '\0' ? "..." : "");
    return buf;
}

/* Appends name to a ", "-separated list in buf. */
static void list_add(char *buf, size_t size, const char *name)
{
    size_t n = strlen(buf);
    snprintf(buf + n, size - n, "%s%s", n ? ", " : "", name);
}

static void join(char *out, const char *path, const char *name)
{
    snprintf(out, PATH_LEN, "%s%s%s", path, *path ? "." : "", name);
}

/* ---- nodes --------------------------------------------------------------- */

static int is_null(const yaml_node_t *n)
{
    static const char *const nulls[] = {"", "~", "null", "Null", "NULL"};
    size_t i;

    if (n->type != YAML_SCALAR_NODE || n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
        return 0;
    for (i = 0; i < sizeof nulls / sizeof nulls[0]; i++)
        if (strcmp((const char *)n->data.scalar.value, nulls[i]) == 0)
            return 1;
    return 0;
}

static const char *kind(const yaml_node_t *n)
{
    switch (n->type) {
    case YAML_MAPPING_NODE:
        return "a mapping";
    case YAML_SEQUENCE_NODE:
        return "a sequence";
    default:
        return is_null(n) ? "null" : "a scalar";
    }
}

static yaml_node_t *node_at(struct loader *ld, int index)
{
    return yaml_document_get_node(&ld->doc, index);
}

/*
 * The text of a scalar node, or NULL after reporting why the node is not one:
 * a mapping, a sequence, a null, or a string with a NUL byte in it. With
 * plain_only, a quoted scalar is refused too: in YAML "5" and "true" are
 * strings, not a number and a boolean.
 */
static const char *scalar_text(struct loader *ld, const yaml_node_t *node, const char *path,
                               const char *expected, int plain_only)
{
    const char *s;

    if (node->type != YAML_SCALAR_NODE || is_null(node))
        return fail(ld, node, path, "expected %s, got %s", expected, kind(node)), NULL;
    s = (const char *)node->data.scalar.value;
    if (strlen(s) != node->data.scalar.length)
        fail(ld, node, path, "contains a NUL byte");
    else if (plain_only && node->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
        fail(ld, node, path, "expected %s, got a quoted string", expected);
    else
        return s;
    return NULL;
}

/* A policy or tier name: its text, or NULL after reporting it invalid. */
static const char *name_text(struct loader *ld, const yaml_node_t *node, const char *path)
{
    char buf[SHOWN_LEN];
    const char *s = scalar_text(ld, node, path, "a name", 0);

    if (s != NULL && !policy_name_valid(s)) {
        fail(ld, node, path, "invalid name \"%s\": use 1 to %d of A-Z a-z 0-9 _ . -", shown(s, buf),
             POLICY_NAME_MAX);
        return NULL;
    }
    return s;
}

/* The value of the field called name in a mapping, or NULL. */
static const yaml_node_t *field_node(struct loader *ld, const yaml_node_t *map, const char *name)
{
    const yaml_node_pair_t *pair;

    for (pair = map->data.mapping.pairs.start; pair < map->data.mapping.pairs.top; pair++) {
        const yaml_node_t *key = node_at(ld, pair->key);
        if (key->type == YAML_SCALAR_NODE &&
            strcmp((const char *)key->data.scalar.value, name) == 0)
            return node_at(ld, pair->value);
    }
    return NULL;
}

/* ---- value checks ---------------------------------------------------------- */

static int check_unix_path(const char *p, char *err, size_t errlen)
{
    if (p[0] != '/' || p[1] == '\0')
        return snprintf(err, errlen, "a unix socket path must be absolute (unix:/path)"), -1;
    if (strlen(p) > UNIX_PATH_MAX)
        return snprintf(err, errlen, "unix socket path longer than %zu bytes", UNIX_PATH_MAX), -1;
    return 0;
}

/* "host", "host:port", "[v6]" or "[v6]:port" (the port optional unless
 * port_required). host is a name or IPv4 address: A-Z a-z 0-9 . - _ */
static int check_host_port(const char *s, int port_required, char *err, size_t errlen)
{
    char v6[INET6_ADDRSTRLEN + 1], msg[RL_ERRLEN];
    struct in6_addr addr;
    const char *rest;
    int64_t port;
    size_t n;

    if (s[0] == '[') {
        rest = strchr(s, ']');
        n = rest ? (size_t)(rest - s - 1) : 0;
        if (rest == NULL || n >= sizeof v6)
            return snprintf(err, errlen, "invalid IPv6 address in brackets"), -1;
        memcpy(v6, s + 1, n);
        v6[n] = '\0';
        if (inet_pton(AF_INET6, v6, &addr) != 1)
            return snprintf(err, errlen, "invalid IPv6 address in brackets"), -1;
        rest++;
    } else {
        n = strspn(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789.-_");
        rest = s + n;
        if (*rest == ':' && strchr(rest + 1, ':') != NULL)
            return snprintf(err, errlen, "an IPv6 address must be in brackets: [::1]:port"), -1;
        if (n == 0 || n > 253 || (*rest != ':' && *rest != '\0'))
            return snprintf(err, errlen, "invalid host: use a name, an IPv4 address or [IPv6]"), -1;
    }
    if (*rest == '\0' && !port_required)
        return 0;
    if (*rest != ':')
        return snprintf(err, errlen, "expected host:port"), -1;
    if (util_parse_int64(rest + 1, 1, 65535, &port, msg, sizeof msg) < 0)
        return snprintf(err, errlen, "invalid port: %s", msg), -1;
    return 0;
}

static int check_listen(const char *s, char *err, size_t errlen)
{
    if (strncmp(s, "unix:", 5) == 0)
        return check_unix_path(s + 5, err, errlen);
    return check_host_port(s, 1, err, errlen);
}

/* Syntax only (redis_url.c, the parser the backend connects with):
 * whether a server answers there is for the backend to find out. */
static int check_redis_url(const char *s, char *err, size_t errlen)
{
    struct redis_url u;
    if (redis_url_parse(s, &u, err, errlen) < 0)
        return -1;
    redis_url_free(&u);
    return 0;
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

/* A sentinel: "host:port" or "[v6]:port" (Sentinel has no default port
 * worth guessing: 26379 is a convention, not a rule). */
static int check_sentinel_address(const char *s, char *err, size_t errlen)
{
    return check_host_port(s, 1, err, errlen);
}

/* A cluster seed: a TCP URL (cluster nodes announce host:port, never a
 * socket path) on database 0, the only one Cluster has. */
static int check_cluster_seed(const char *s, char *err, size_t errlen)
{
    struct redis_url u;
    int rc = 0;

    if (redis_url_parse(s, &u, err, errlen) < 0)
        return -1;
    if (u.unix_path != NULL)
        rc = -1, snprintf(err, errlen, "a cluster seed must be redis:// or rediss://, not unix:");
    else if (u.db != 0)
        rc = -1, snprintf(err, errlen, "Redis Cluster has only database 0");
    redis_url_free(&u);
    return rc;
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

enum field_type {
    F_STRING,   /* char *, replacing (and freeing) the default; optional check */
    F_NAME,     /* char[POLICY_NAME_MAX + 1], per policy_name_valid */
    F_INT,      /* int64_t in [min, max] */
    F_DURATION, /* int64_t microseconds, at most max */
    F_BOOL,     /* int: true or false */
    F_CHOICE,   /* int: the index of the value in choices */
    F_SECTION,  /* a nested mapping whose fields go into the same target */
    F_CUSTOM,   /* parse() gets the node and the address of the field */
};

/* Whether a reload may change a field: RELOAD_APPLIES, or RELOAD_RESTART
 * when its value is used only at start (to make the sockets, the backend,
 * the stores or the watch), so that a reload changing it is refused
 * (reload.c). */
enum reload_rule { RELOAD_APPLIES, RELOAD_RESTART };

/* How a field's value is stored in its target, for its default and for the
 * comparison of two snapshots. */
enum store_kind { S_NONE, S_STRING, S_INT, S_INT64, S_LIST };

struct field_store {
    enum store_kind kind;
    size_t offset;       /* of the value in the target */
    size_t count_offset; /* S_LIST: of its size_t count (the value is a char **) */
};

#define STORE(kind, type, member)                                                                  \
    {                                                                                              \
        kind, offsetof(type, member), 0                                                            \
    }
#define STORE_LIST(type, member, count)                                                            \
    {                                                                                              \
        S_LIST, offsetof(type, member), offsetof(type, count)                                      \
    }

struct field {
    const char *name;
    enum field_type type;
    int required;
    size_t offset; /* of the stored value in the target struct */
    int64_t min, max;
    const char *const *choices; /* F_CHOICE, NULL-terminated */
    int (*check)(const char *s, char *err, size_t errlen);
    const struct field *section; /* F_SECTION; for F_CUSTOM, the fields of each
                                    item it parses (read by config_foreach_field) */
    int (*parse)(struct loader *ld, const yaml_node_t *node, const char *path, void *slot);
    /* The default, set before the file is read: def for F_INT, F_DURATION,
     * F_BOOL, F_CHOICE (and an F_CUSTOM's V_INT64 store), def_str for
     * F_STRING (NULL: none). */
    int64_t def;
    const char *def_str;
    /* Where an F_CUSTOM row keeps its value, when a default or reload's
     * comparison needs it; other types store at offset, by their type. */
    struct field_store store;
    enum reload_rule reload;
};

static int parse_algorithm(struct loader *ld, const yaml_node_t *node, const char *path,
                           void *slot);
static int parse_tiers(struct loader *ld, const yaml_node_t *node, const char *path, void *slot);
static int parse_overrides(struct loader *ld, const yaml_node_t *node, const char *path,
                           void *slot);
static int parse_policies(struct loader *ld, const yaml_node_t *node, const char *path, void *slot);
static int parse_token_file(struct loader *ld, const yaml_node_t *node, const char *path,
                            void *slot);
static int parse_workers(struct loader *ld, const yaml_node_t *node, const char *path, void *slot);
static int parse_key_template(struct loader *ld, const yaml_node_t *node, const char *path,
                              void *slot);
static int parse_trusted_proxies(struct loader *ld, const yaml_node_t *node, const char *path,
                                 void *slot);
static int parse_listen_mode(struct loader *ld, const yaml_node_t *node, const char *path,
                             void *slot);
static int parse_listen_group(struct loader *ld, const yaml_node_t *node, const char *path,
                              void *slot);
static int parse_domains_later(struct loader *ld, const yaml_node_t *node, const char *path,
                               void *slot);
static int parse_descriptors(struct loader *ld, const yaml_node_t *node, const char *path,
                             void *slot);
static int parse_rate_limit(struct loader *ld, const yaml_node_t *node, const char *path,
                            void *slot);
static int parse_unit(struct loader *ld, const yaml_node_t *node, const char *path, void *slot);
static int parse_replaces(struct loader *ld, const yaml_node_t *node, const char *path, void *slot);
static int parse_sentinel_addresses(struct loader *ld, const yaml_node_t *node, const char *path,
                                    void *slot);
static int parse_sentinel_password(struct loader *ld, const yaml_node_t *node, const char *path,
                                   void *slot);
static int parse_cluster(struct loader *ld, const yaml_node_t *node, const char *path, void *slot);

/* F_CHOICE values are stored through an int. */
_Static_assert(sizeof(enum clock_source) == sizeof(int), "enum clock_source is an int");
_Static_assert(sizeof(enum failure_mode) == sizeof(int), "enum failure_mode is an int");
_Static_assert(sizeof(enum log_level) == sizeof(int), "enum log_level is an int");
_Static_assert(sizeof(enum overload_action) == sizeof(int), "enum overload_action is an int");
_Static_assert(sizeof(enum backend_kind) == sizeof(int), "enum backend_kind is an int");
_Static_assert(sizeof(enum header_mode) == sizeof(int), "enum header_mode is an int");
_Static_assert(sizeof(enum missing_key) == sizeof(int), "enum missing_key is an int");
static const char *const backend_names[] = {
    [BACKEND_KIND_REDIS] = "redis", [BACKEND_KIND_MEMORY] = "memory", NULL};
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
static const char *const header_names[] = {[HEADERS_X_RATELIMIT] = "x-ratelimit",
                                           [HEADERS_IETF] = "ietf",
                                           [HEADERS_BOTH] = "both",
                                           [HEADERS_NONE] = "none",
                                           NULL};
static const char *const missing_key_names[] = {[MISSING_KEY_SKIP] = "skip",
                                                [MISSING_KEY_SHARED] = "shared",
                                                [MISSING_KEY_REJECT] = "reject",
                                                NULL};
static const char *const failure_names[] = {
    [FAILURE_OPEN] = "open", [FAILURE_CLOSED] = "closed", [FAILURE_LOCAL] = "local", NULL};

/* A tier's numbers are judged by policy_tier_validate, so the table only
 * asks for integers and durations here, not their bounds. */
static const struct field tier_fields[] = {
    {"name", F_NAME, .required = 1, .offset = offsetof(struct tier, name)},
    {"algorithm", F_CUSTOM, .required = 1, .offset = offsetof(struct tier, algorithm),
     .parse = parse_algorithm},
    {"limit", F_INT, .required = 1, .offset = offsetof(struct tier, limit), .min = INT64_MIN,
     .max = INT64_MAX},
    {"window", F_DURATION, .required = 1, .offset = offsetof(struct tier, window_us),
     .max = INT64_MAX},
    {"burst", F_INT, .offset = offsetof(struct tier, burst), .min = INT64_MIN, .max = INT64_MAX},
    {"precision", F_DURATION, .offset = offsetof(struct tier, precision_us), .max = INT64_MAX},
    {.name = NULL},
};

/* The text of an override's key or prefix: what a request's key can match. */
static int check_override_text(const char *s, char *err, size_t errlen)
{
    if (*s == '\0')
        return snprintf(err, errlen, "must not be empty"), -1;
    if (strlen(s) > POLICY_KEY_MAX)
        return snprintf(err, errlen, "longer than %d bytes (the longest key)", POLICY_KEY_MAX), -1;
    return 0;
}

/* One item of policies.NAME.overrides while it is parsed: exactly one of
 * key and prefix (owned here), and tiers in a policy, parse_tiers's target. */
struct override_entry {
    char *key;
    char *prefix;
    struct policy tiers;
};

static const struct field override_fields[] = {
    {"key", F_STRING, .offset = offsetof(struct override_entry, key), .check = check_override_text},
    {"prefix", F_STRING, .offset = offsetof(struct override_entry, prefix),
     .check = check_override_text},
    {"tiers", F_CUSTOM, .required = 1, .offset = offsetof(struct override_entry, tiers),
     .parse = parse_tiers, .section = tier_fields},
    {.name = NULL},
};

static const struct field policy_fields[] = {
    {"failure_mode", F_CHOICE, .offset = offsetof(struct policy, failure_mode),
     .choices = failure_names},
    {"shadow", F_BOOL, .offset = offsetof(struct policy, shadow)},
    {"deny_cache", F_BOOL, .offset = offsetof(struct policy, deny_cache), .def = 1},
    /* HEADERS_INHERIT: the top-level headers, set at the end of the load. */
    {"headers", F_CHOICE, .offset = offsetof(struct policy, headers), .choices = header_names,
     .def = HEADERS_INHERIT},
    {"key", F_CUSTOM, .offset = offsetof(struct policy, key), .parse = parse_key_template},
    {"missing_key", F_CHOICE, .offset = offsetof(struct policy, missing_key),
     .choices = missing_key_names},
    {"deny_status", F_INT, .offset = offsetof(struct policy, deny_status), .min = 400, .max = 499},
    {"tiers", F_CUSTOM, .required = 1, .offset = 0 /* the whole policy */, .parse = parse_tiers,
     .section = tier_fields},
    {"overrides", F_CUSTOM, .offset = offsetof(struct policy, overrides), .parse = parse_overrides,
     .section = override_fields},
    {.name = NULL},
};

/* Envoy domains (domains.h): the policy file's `domains:` items and
 * envoyproxy/ratelimit's files share these tables, so both accept exactly
 * the same fields (policy: aside, refused in the latter). */
static int check_not_empty(const char *s, char *err, size_t errlen)
{
    if (*s == '\0')
        return snprintf(err, errlen, "must not be empty"), -1;
    if (strlen(s) > POLICY_KEY_MAX)
        return snprintf(err, errlen, "longer than %d bytes (the longest key)", POLICY_KEY_MAX), -1;
    return 0;
}

struct node_list {
    size_t n;
    struct domain_node *items;
};

/* One rate_limit: while it is parsed. */
struct rate_limit_entry {
    enum rls_unit unit;
    int64_t requests_per_unit;
    int unlimited;
    char *name;
    size_t nreplaces;
    char **replaces;
};

/* One descriptor while it is parsed; its strings are owned here until the
 * node takes them. */
struct node_entry {
    char *key;
    char *value;
    char *policy;
    int has_rate_limit;
    struct rate_limit_entry rl;
    int shadow_mode;
    int detailed_metric;
    struct node_list children;
};

/* One domain (a `domains:` item, or a whole envoyproxy/ratelimit file). */
struct domain_entry {
    char *domain;
    struct node_list descriptors;
};

struct replaces_entry {
    char *name;
};

static const struct field replaces_fields[] = {
    {"name", F_STRING, .required = 1, .offset = offsetof(struct replaces_entry, name),
     .check = check_not_empty},
    {.name = NULL},
};

static const struct field rate_limit_fields[] = {
    {"unit", F_CUSTOM, .offset = offsetof(struct rate_limit_entry, unit), .parse = parse_unit},
    {"requests_per_unit", F_INT, .offset = offsetof(struct rate_limit_entry, requests_per_unit),
     .min = 1, .max = 1000000000},
    {"unlimited", F_BOOL, .offset = offsetof(struct rate_limit_entry, unlimited)},
    {"name", F_STRING, .offset = offsetof(struct rate_limit_entry, name), .check = check_not_empty},
    {"replaces", F_CUSTOM, .offset = 0 /* the whole rate_limit */, .parse = parse_replaces,
     .section = replaces_fields},
    {.name = NULL},
};

static const struct field descriptor_fields[] = {
    {"key", F_STRING, .required = 1, .offset = offsetof(struct node_entry, key),
     .check = check_not_empty},
    /* May be empty: envoyproxy/ratelimit reads value: "" as no value. */
    {"value", F_STRING, .offset = offsetof(struct node_entry, value)},
    {"policy", F_STRING, .offset = offsetof(struct node_entry, policy)},
    {"rate_limit", F_CUSTOM, .offset = 0 /* the whole entry */, .parse = parse_rate_limit,
     .section = rate_limit_fields},
    {"shadow_mode", F_BOOL, .offset = offsetof(struct node_entry, shadow_mode)},
    {"detailed_metric", F_BOOL, .offset = offsetof(struct node_entry, detailed_metric)},
    {"descriptors", F_CUSTOM, .offset = offsetof(struct node_entry, children),
     .parse = parse_descriptors, .section = descriptor_fields},
    {.name = NULL},
};

static const struct field domain_fields[] = {
    {"domain", F_STRING, .required = 1, .offset = offsetof(struct domain_entry, domain),
     .check = check_not_empty},
    {"descriptors", F_CUSTOM, .offset = offsetof(struct domain_entry, descriptors),
     .parse = parse_descriptors, .section = descriptor_fields},
    {.name = NULL},
};

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

static const struct field redis_sentinel_fields[] = {
    {"addresses", F_CUSTOM, .required = 1, .offset = offsetof(struct config, redis_sentinel),
     .parse = parse_sentinel_addresses,
     .store = STORE_LIST(struct config, redis_sentinel.addresses, redis_sentinel.naddresses),
     .reload = RELOAD_RESTART},
    {"master_name", F_STRING, .required = 1,
     .offset = offsetof(struct config, redis_sentinel.master_name), .check = check_master_name,
     .reload = RELOAD_RESTART},
    {"password", F_CUSTOM, .offset = offsetof(struct config, redis_sentinel.password),
     .parse = parse_sentinel_password,
     .store = STORE(S_STRING, struct config, redis_sentinel.password), .reload = RELOAD_RESTART},
    {.name = NULL},
};

static const struct field redis_fields[] = {
    {"url", F_STRING, .offset = offsetof(struct config, redis_url), .check = check_redis_url,
     .def_str = CONFIG_DEFAULT_REDIS_URL, .reload = RELOAD_RESTART},
    {"timeout", F_DURATION, .offset = offsetof(struct config, redis_timeout_us),
     .max = CONFIG_REDIS_TIMEOUT_MAX_US, .def = CONFIG_DEFAULT_TIMEOUT_US},
    {"key_prefix", F_STRING, .offset = offsetof(struct config, key_prefix), .check = check_prefix,
     .def_str = CONFIG_DEFAULT_PREFIX},
    {"tls", F_SECTION, .section = redis_tls_fields, .reload = RELOAD_RESTART},
    {"sentinel", F_SECTION, .section = redis_sentinel_fields, .reload = RELOAD_RESTART},
    {"cluster", F_CUSTOM, .offset = 0 /* the whole config */, .parse = parse_cluster,
     .store = STORE_LIST(struct config, redis_cluster, redis_ncluster), .reload = RELOAD_RESTART},
    {.name = NULL},
};

static const struct field top_fields[] = {
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
    {"deny_cache_max_keys", F_INT, .offset = offsetof(struct config, deny_cache_max_keys), .min = 0,
     .max = 100000000, .def = CONFIG_DEFAULT_DENY_CACHE_MAX_KEYS},
    {"headers", F_CHOICE, .offset = offsetof(struct config, headers), .choices = header_names,
     .def = HEADERS_X_RATELIMIT},
    {"auth_token_file", F_CUSTOM, .offset = 0 /* the whole config */, .parse = parse_token_file},
    {"trusted_proxies", F_CUSTOM, .offset = offsetof(struct config, trusted_proxies),
     .parse = parse_trusted_proxies},
    {"deny_status", F_INT, .offset = offsetof(struct config, deny_status), .min = 400, .max = 499,
     .def = CONFIG_DEFAULT_DENY_STATUS},
    {"policies", F_CUSTOM, .required = 1, .offset = 0 /* the whole config */,
     .parse = parse_policies, .section = policy_fields},
    {"domains", F_CUSTOM, .offset = 0 /* read after the policies */, .parse = parse_domains_later,
     .section = domain_fields},
    {"envoy_config", F_STRING, .offset = offsetof(struct config, envoy_config),
     .check = check_absolute},
    {.name = NULL},
};

#define NROWS(t) (sizeof(t) / sizeof((t)[0]) - 1)
_Static_assert(NROWS(tier_fields) <= MAX_FIELDS && NROWS(policy_fields) <= MAX_FIELDS &&
                   NROWS(override_fields) <= MAX_FIELDS && NROWS(redis_fields) <= MAX_FIELDS &&
                   NROWS(top_fields) <= MAX_FIELDS && NROWS(descriptor_fields) <= MAX_FIELDS &&
                   NROWS(redis_tls_fields) <= MAX_FIELDS &&
                   NROWS(redis_sentinel_fields) <= MAX_FIELDS,
               "raise MAX_FIELDS");

/* ---- defaults and reload rules ----------------------------------------------------- */

/* Where f keeps its value: at offset by its type, or as its row says. */
static struct field_store store_of(const struct field *f)
{
    switch (f->type) {
    case F_STRING:
        return (struct field_store){S_STRING, f->offset, 0};
    case F_INT:
    case F_DURATION:
        return (struct field_store){S_INT64, f->offset, 0};
    case F_BOOL:
    case F_CHOICE:
        return (struct field_store){S_INT, f->offset, 0};
    case F_NAME:
    case F_SECTION:
    case F_CUSTOM:
        break;
    }
    return f->store;
}

/* Gives target every default of the table (sections included). Strings
 * are copies, owned by target. */
static void set_defaults(const struct field *fields, void *target)
{
    for (const struct field *f = fields; f->name != NULL; f++) {
        struct field_store st = store_of(f);
        void *slot = (char *)target + st.offset;

        if (f->type == F_SECTION)
            set_defaults(f->section, target);
        else if (st.kind == S_STRING && f->def_str != NULL)
            *(char **)slot = xstrdup(f->def_str);
        else if (st.kind == S_INT64)
            *(int64_t *)slot = f->def;
        else if (st.kind == S_INT)
            *(int *)slot = (int)f->def;
    }
}

static int same_string(const char *a, const char *b)
{
    return (a == NULL && b == NULL) || (a != NULL && b != NULL && strcmp(a, b) == 0);
}

/* Whether a and b hold the same value of f. */
static int same_value(const struct field *f, const void *a, const void *b)
{
    struct field_store st = store_of(f);
    const char *x = (const char *)a + st.offset, *y = (const char *)b + st.offset;
    size_t n;

    switch (st.kind) {
    case S_STRING:
        return same_string(*(char *const *)x, *(char *const *)y);
    case S_INT:
        return *(const int *)x == *(const int *)y;
    case S_INT64:
        return *(const int64_t *)x == *(const int64_t *)y;
    case S_LIST:
        n = *(const size_t *)((const char *)a + st.count_offset);
        if (n != *(const size_t *)((const char *)b + st.count_offset))
            return 0;
        for (size_t i = 0; i < n; i++)
            if (strcmp((*(char *const *const *)x)[i], (*(char *const *const *)y)[i]) != 0)
                return 0;
        return 1;
    case S_NONE:
        break;
    }
    return 1;
}

/* The first restart-only field (in table order) whose value differs
 * between a and b, its dotted path in path; 0 if none. */
static int find_restart_field(const struct field *fields, const char *prefix, const void *a,
                              const void *b, char *path, size_t size)
{
    for (const struct field *f = fields; f->name != NULL; f++) {
        snprintf(path, size, "%s%s", prefix, f->name);
        if (f->type == F_SECTION) {
            char section[PATH_LEN];
            snprintf(section, sizeof section, "%s.", path);
            if (find_restart_field(f->section, section, a, b, path, size))
                return 1;
        } else if (f->reload == RELOAD_RESTART && !same_value(f, a, b)) {
            return 1;
        }
    }
    return 0;
}

/* ---- the walker ---------------------------------------------------------------- */

static int parse_fields(struct loader *ld, const yaml_node_t *map, const char *path,
                        const struct field *fields, void *target);

/* Parses one field's value node into target. */
static int parse_value(struct loader *ld, const struct field *f, const yaml_node_t *node,
                       const char *path, void *target)
{
    void *slot = (char *)target + f->offset;
    char msg[RL_ERRLEN], buf[SHOWN_LEN], list[RL_ERRLEN / 2] = "";
    const char *s = NULL;
    int rc = 0;
    size_t i;

    switch (f->type) {
    case F_SECTION:
        return parse_fields(ld, node, path, f->section, target);
    case F_CUSTOM:
        return f->parse(ld, node, path, slot);
    case F_NAME:
        if ((s = name_text(ld, node, path)) == NULL)
            return -1;
        strcpy(slot, s);
        return 0;
    case F_STRING:
        if ((s = scalar_text(ld, node, path, "a string", 0)) == NULL)
            return -1;
        /* The value is not quoted back: a Redis URL may hold a password. */
        if (f->check != NULL && f->check(s, msg, sizeof msg) < 0)
            return fail(ld, node, path, "%s", msg);
        free(*(char **)slot);
        *(char **)slot = xstrdup(s);
        return 0;
    case F_INT:
        if ((s = scalar_text(ld, node, path, "an integer", 1)) == NULL)
            return -1;
        rc = util_parse_int64(s, f->min, f->max, slot, msg, sizeof msg);
        break;
    case F_DURATION:
        if ((s = scalar_text(ld, node, path, "a duration", 0)) == NULL)
            return -1;
        rc = util_parse_duration(s, f->max, slot, msg, sizeof msg);
        break;
    case F_BOOL:
        if ((s = scalar_text(ld, node, path, "true or false", 1)) == NULL)
            return -1;
        if (strcmp(s, "true") == 0 || strcmp(s, "false") == 0) {
            *(int *)slot = s[0] == 't';
            return 0;
        }
        rc = -1;
        snprintf(msg, sizeof msg, "expected true or false");
        break;
    case F_CHOICE:
        if ((s = scalar_text(ld, node, path, "a string", 0)) == NULL)
            return -1;
        for (i = 0; f->choices[i] != NULL; i++) {
            if (strcmp(s, f->choices[i]) == 0) {
                *(int *)slot = (int)i;
                return 0;
            }
            list_add(list, sizeof list, f->choices[i]);
        }
        rc = -1;
        snprintf(msg, sizeof msg, "must be one of %s", list);
        break;
    }
    if (rc < 0)
        return fail(ld, node, path, "invalid value \"%s\": %s", shown(s, buf), msg);
    return 0;
}

/*
 * Parses a mapping against a field table into target: every key must name a
 * field, at most once; every required field must be there. Fields absent
 * keep what target already holds (the defaults).
 */
static int parse_fields(struct loader *ld, const yaml_node_t *map, const char *path,
                        const struct field *fields, void *target)
{
    const yaml_node_t *seen[MAX_FIELDS] = {NULL};
    const yaml_node_pair_t *pair;
    char child[PATH_LEN], buf[SHOWN_LEN], known[2 * RL_ERRLEN] = "";
    const struct field *f;

    if (map->type != YAML_MAPPING_NODE)
        return fail(ld, map, path, "expected a mapping, got %s", kind(map));
    for (pair = map->data.mapping.pairs.start; pair < map->data.mapping.pairs.top; pair++) {
        const yaml_node_t *key = node_at(ld, pair->key);
        const char *name = scalar_text(ld, key, path, "a field name", 0);

        if (name == NULL)
            return -1;
        for (f = fields; f->name != NULL && strcmp(f->name, name) != 0; f++)
            ;
        if (f->name == NULL) {
            for (f = fields; f->name != NULL; f++)
                list_add(known, sizeof known, f->name);
            return fail(ld, key, path, "unknown field \"%s\" (known: %s)", shown(name, buf), known);
        }
        if (seen[f - fields] != NULL)
            return fail(ld, key, path, "duplicate field \"%s\"", name);
        seen[f - fields] = key;
        join(child, path, f->name);
        if (parse_value(ld, f, node_at(ld, pair->value), child, target) < 0)
            return -1;
    }
    for (f = fields; f->name != NULL; f++)
        if (f->required && seen[f - fields] == NULL)
            return fail(ld, map, path, "missing required field \"%s\"", f->name);
    return 0;
}

/* ---- policies and tiers ---------------------------------------------------------- */

static int parse_algorithm(struct loader *ld, const yaml_node_t *node, const char *path, void *slot)
{
    char buf[SHOWN_LEN], list[RL_ERRLEN] = "";
    const char *s = scalar_text(ld, node, path, "an algorithm name", 0);
    int i;

    if (s == NULL)
        return -1;
    if (policy_algorithm_from_name(s, slot) == 0)
        return 0;
    for (i = 0; i < ALG__COUNT; i++)
        list_add(list, sizeof list, policy_algorithm_name((enum algorithm)i));
    return fail(ld, node, path, "unknown algorithm \"%s\" (known: %s)", shown(s, buf), list);
}

/*
 * Judges a parsed tier. policy_tier_validate's message starts with the name
 * of the field at fault; the error points at that field's value, or at the
 * tier when the field is absent (a missing precision, say).
 */
static int check_tier(struct loader *ld, const yaml_node_t *map, const char *path,
                      const struct tier *t)
{
    char msg[RL_ERRLEN], field[PATH_LEN];
    const yaml_node_t *at, *burst;
    size_t n;

    if (policy_tier_validate(t, msg, sizeof msg) < 0) {
        n = strcspn(msg, ":");
        snprintf(field, sizeof field, "%.*s", (int)n, msg);
        at = msg[n] == ':' ? field_node(ld, map, field) : NULL;
        return fail(ld, at ? at : map, "", "%s.%s", path, msg);
    }
    burst = field_node(ld, map, "burst");
    if (burst != NULL && t->burst == 0 && !policy_burst_zero_meaningful(t->algorithm))
        return fail(ld, burst, "", "%s.burst: 0 is not allowed for %s; leave burst out instead",
                    path, policy_algorithm_name(t->algorithm));
    return 0;
}

static int parse_tiers(struct loader *ld, const yaml_node_t *node, const char *path, void *slot)
{
    struct policy *p = slot;
    const yaml_node_item_t *item;
    char child[PATH_LEN];
    size_t i, j;

    if (node->type != YAML_SEQUENCE_NODE)
        return fail(ld, node, path, "expected a sequence of tiers, got %s", kind(node));
    item = node->data.sequence.items.start;
    if (item == node->data.sequence.items.top)
        return fail(ld, node, path, "at least one tier is required");
    for (i = 0; item < node->data.sequence.items.top; item++, i++) {
        const yaml_node_t *map = node_at(ld, *item);
        struct tier *t;

        if (i == POLICY_MAX_TIERS)
            return fail(ld, map, path, "at most %d tiers are allowed", POLICY_MAX_TIERS);
        t = &p->tiers[i];
        snprintf(child, sizeof child, "%s[%zu]", path, i);
        memset(t, 0, sizeof *t);
        if (parse_fields(ld, map, child, tier_fields, t) < 0 || check_tier(ld, map, child, t) < 0)
            return -1;
        for (j = 0; j < i; j++)
            if (strcmp(p->tiers[j].name, t->name) == 0)
                return fail(ld, field_node(ld, map, "name"), child, "duplicate tier name \"%s\"",
                            t->name);
        p->ntiers = i + 1;
    }
    return 0;
}

/* Indexes a policy's overrides, and reports two of the same key, or of the
 * same prefix, at the later one's key or prefix. seq is the overrides
 * sequence, whose items were added in order. */
static int index_overrides(struct loader *ld, const yaml_node_t *seq, const char *path,
                           struct policy_overrides *o)
{
    const yaml_node_t *second_map, *first_map, *at;
    char buf[SHOWN_LEN];
    const char *what;
    size_t first, second;

    if (policy_overrides_index(o, &first, &second) == 0)
        return 0;
    first_map = node_at(ld, seq->data.sequence.items.start[first]);
    second_map = node_at(ld, seq->data.sequence.items.start[second]);
    what = field_node(ld, second_map, "key") != NULL ? "key" : "prefix";
    at = field_node(ld, second_map, what);
    return fail(ld, at, "", "%s[%zu].%s: duplicate %s \"%s\" (also overrides[%zu], line %zu)", path,
                second, what, what, shown((const char *)at->data.scalar.value, buf), first,
                first_map->start_mark.line + 1);
}

/*
 * policies.NAME.overrides: a sequence of {key | prefix, tiers}. The set is
 * stored in *slot (the policy's overrides) as soon as it exists, so that
 * whoever frees the policy frees it, whatever fails here. The variants get
 * the policy's settings at the end of the load (policy_overrides_inherit,
 * called by config_load_string once every per-policy setting is final).
 */
static int parse_overrides(struct loader *ld, const yaml_node_t *node, const char *path, void *slot)
{
    struct policy_overrides **out = slot;
    const yaml_node_item_t *item;
    char child[PATH_LEN];
    size_t i;

    if (node->type != YAML_SEQUENCE_NODE)
        return fail(ld, node, path, "expected a sequence of overrides, got %s", kind(node));
    *out = policy_overrides_new();
    for (i = 0, item = node->data.sequence.items.start; item < node->data.sequence.items.top;
         item++, i++) {
        const yaml_node_t *map = node_at(ld, *item);
        struct override_entry e = {NULL, NULL, {.ntiers = 0}};
        const char *text;
        int rc;

        if (i == POLICY_MAX_OVERRIDES)
            return fail(ld, map, path, "at most %d overrides are allowed", POLICY_MAX_OVERRIDES);
        snprintf(child, sizeof child, "%s[%zu]", path, i);
        rc = parse_fields(ld, map, child, override_fields, &e);
        if (rc == 0 && e.key != NULL && e.prefix != NULL)
            rc = fail(ld, map, child, "give key or prefix, not both");
        else if (rc == 0 && e.key == NULL && e.prefix == NULL)
            rc = fail(ld, map, child,
                      "missing key (one exact key) or prefix (every key that starts with it)");
        text = e.key != NULL ? e.key : e.prefix;
        if (rc == 0)
            policy_overrides_add(*out, e.prefix != NULL, text, strlen(text), e.tiers.tiers,
                                 e.tiers.ntiers);
        free(e.key);
        free(e.prefix);
        if (rc < 0)
            return -1;
    }
    /* No overrides: keep the lookup at its one-branch fast case. */
    if (i == 0) {
        policy_overrides_free(*out);
        *out = NULL;
    }
    return index_overrides(ld, node, path, *out);
}

/* A policy's place in the file, to sort by name and still report a
 * duplicate at its second occurrence. */
struct entry {
    const struct policy *policy;
    const yaml_node_t *key;
    size_t index;
};

static int entry_cmp(const void *a, const void *b)
{
    const struct entry *x = a, *y = b;
    int c = strcmp(x->policy->name, y->policy->name);

    return c ? c : (x->index > y->index) - (x->index < y->index);
}

static int policy_cmp(const void *name, const void *p)
{
    return strcmp(name, ((const struct policy *)p)->name);
}

/* A policy's key template before its fields are read: "${ip}". */
static int default_key(struct loader *ld, const yaml_node_t *at, const char *path, struct policy *p)
{
    char msg[RL_ERRLEN];
    size_t off;
    if (key_template_compile(KEY_TEMPLATE_DEFAULT, &p->key, &off, msg, sizeof msg) < 0)
        return fail(ld, at, path, "%s", msg); /* a broken invariant, reported all the same */
    return 0;
}

/* key: a template (key_template.h), compiled now so that a bad one is an
 * error at its line and column, never a surprise per request. */
static int parse_key_template(struct loader *ld, const yaml_node_t *node, const char *path,
                              void *slot)
{
    const char *s = scalar_text(ld, node, path, "a key template", 0);
    char msg[RL_ERRLEN];
    size_t at;

    if (s == NULL)
        return -1;
    if (key_template_compile(s, slot, &at, msg, sizeof msg) < 0)
        return fail_in(ld, node, at, path, "%s", msg);
    return 0;
}

/* trusted_proxies: a sequence of addresses, CIDR networks and "unix". */
static int parse_trusted_proxies(struct loader *ld, const yaml_node_t *node, const char *path,
                                 void *slot)
{
    struct client_trust *t = slot;
    const yaml_node_item_t *item;
    char child[PATH_LEN], msg[RL_ERRLEN], buf[SHOWN_LEN];
    size_t n, i;

    if (node->type != YAML_SEQUENCE_NODE)
        return fail(ld, node, path, "expected a sequence of addresses or networks, got %s",
                    kind(node));
    n = (size_t)(node->data.sequence.items.top - node->data.sequence.items.start);
    if (n > CLIENT_IP_TRUSTED_MAX)
        return fail(ld, node, path, "at most %d entries are allowed", CLIENT_IP_TRUSTED_MAX);
    client_trust_free(t);
    t->unix_trusted = 0;
    t->nets = xcalloc(n ? n : 1, sizeof *t->nets);
    for (i = 0, item = node->data.sequence.items.start; i < n; i++, item++) {
        const yaml_node_t *v = node_at(ld, *item);
        const char *s;

        snprintf(child, sizeof child, "%s[%zu]", path, i);
        if ((s = scalar_text(ld, v, child, "an address, a network or unix", 0)) == NULL)
            return -1;
        if (strcmp(s, "unix") == 0) {
            t->unix_trusted = 1;
            continue;
        }
        if (client_ip_parse_net(s, &t->nets[t->n], msg, sizeof msg) < 0)
            return fail(ld, v, child, "invalid value \"%s\": %s", shown(s, buf), msg);
        t->n++;
    }
    return 0;
}

/* The policies mapping: name -> policy. Leaves c->policies sorted by name. */
static int parse_policies(struct loader *ld, const yaml_node_t *node, const char *path, void *slot)
{
    struct config *c = slot;
    const yaml_node_pair_t *pair;
    struct policy *parsed;
    struct entry *order;
    char child[PATH_LEN];
    size_t n, i;
    int rc = 0;

    if (node->type != YAML_MAPPING_NODE)
        return fail(ld, node, path, "expected a mapping of policy names to policies, got %s",
                    kind(node));
    n = (size_t)(node->data.mapping.pairs.top - node->data.mapping.pairs.start);
    if (n == 0)
        return fail(ld, node, path, "at least one policy is required");

    parsed = xcalloc(n, sizeof *parsed);
    order = xcalloc(n, sizeof *order);
    for (i = 0, pair = node->data.mapping.pairs.start; i < n && rc == 0; i++, pair++) {
        const yaml_node_t *key = node_at(ld, pair->key);
        const char *name = name_text(ld, key, path);

        if (name == NULL) {
            rc = -1;
            break;
        }
        order[i] = (struct entry){&parsed[i], key, i};
        strcpy(parsed[i].name, name);
        set_defaults(policy_fields, &parsed[i]);
        if (default_key(ld, key, child, &parsed[i]) < 0) {
            rc = -1;
            break;
        }
        join(child, path, name);
        rc = parse_fields(ld, node_at(ld, pair->value), child, policy_fields, &parsed[i]);
    }
    if (rc == 0) {
        qsort(order, n, sizeof *order, entry_cmp);
        for (i = 1; i < n && rc == 0; i++)
            if (strcmp(order[i].policy->name, order[i - 1].policy->name) == 0)
                rc = fail(ld, order[i].key, path, "duplicate policy \"%s\"", order[i].policy->name);
    }
    if (rc == 0) {
        /* The copies take over each policy's overrides. */
        c->policies = xcalloc(n, sizeof *c->policies);
        for (i = 0; i < n; i++)
            c->policies[i] = *order[i].policy;
        c->npolicies = n;
    } else {
        for (i = 0; i < n; i++)
            policy_overrides_free(parsed[i].overrides);
    }
    free(order);
    free(parsed);
    return rc;
}

/* workers: a number of event loops, or "auto" (one per CPU, counted when
 * the daemon starts, stored as 0). */
static int parse_workers(struct loader *ld, const yaml_node_t *node, const char *path, void *slot)
{
    struct config *c = slot;
    const char *text = scalar_text(ld, node, path, "a number or auto", 0);
    char err[RL_ERRLEN];
    if (text == NULL)
        return -1;
    if (strcmp(text, "auto") == 0) {
        c->workers = 0;
        return 0;
    }
    if (util_parse_int64(text, 1, CONFIG_WORKERS_MAX, &c->workers, err, sizeof err) < 0)
        return fail(ld, node, path, "must be auto or a number from 1 to %d: %s", CONFIG_WORKERS_MAX,
                    err);
    return 0;
}

/* listen_mode: the unix socket files' mode, in octal ("0660"): at most
 * 0777, as chmod takes it; setuid, setgid and sticky mean nothing on a
 * socket. Quoted or not, the text is read as octal. */
static int parse_listen_mode(struct loader *ld, const yaml_node_t *node, const char *path,
                             void *slot)
{
    const char *text = scalar_text(ld, node, path, "an octal mode such as \"0660\"", 0);
    char buf[SHOWN_LEN];
    size_t n;

    if (text == NULL)
        return -1;
    n = strspn(text, "01234567");
    if (n == 0 || n > 4 || text[n] != '\0' || strtol(text, NULL, 8) > 0777)
        return fail(ld, node, path,
                    "invalid value \"%s\": must be an octal mode from 0000 to 0777, "
                    "such as \"0660\"",
                    shown(text, buf));
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
    const char *text = scalar_text(ld, node, path, "a group name or number", 0);
    char buf[SHOWN_LEN], msg[RL_ERRLEN], sbuf[4096];
    struct group grp, *found = NULL;
    int64_t gid;

    if (text == NULL)
        return -1;
    if (text[0] >= '0' && text[0] <= '9') {
        /* (gid_t)-1 means "no change" to chown: not a group. */
        if (util_parse_int64(text, 0, (int64_t)UINT32_MAX - 1, &gid, msg, sizeof msg) < 0)
            return fail(ld, node, path, "invalid group number \"%s\": %s", shown(text, buf), msg);
    } else {
        /* Some NSS modules report "no such group" as ENOENT or ESRCH. */
        int rc = getgrnam_r(text, &grp, sbuf, sizeof sbuf, &found);
        if (found == NULL && (rc == 0 || rc == ENOENT || rc == ESRCH))
            return fail(ld, node, path, "unknown group \"%s\"", shown(text, buf));
        if (found == NULL)
            return fail(ld, node, path, "cannot look up group \"%s\": %s", shown(text, buf),
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
static int check_unix_fields(struct loader *ld, const yaml_node_t *root, const struct config *c)
{
    static const char *const names[] = {"listen_mode", "listen_group"};
    size_t i;

    if (strncmp(c->listen, "unix:", 5) == 0 ||
        (c->admin_listen != NULL && strncmp(c->admin_listen, "unix:", 5) == 0) ||
        (c->grpc_listen != NULL && strncmp(c->grpc_listen, "unix:", 5) == 0))
        return 0;
    for (i = 0; i < sizeof names / sizeof names[0]; i++) {
        const yaml_node_t *node = field_node(ld, root, names[i]);
        if (node != NULL)
            return fail(ld, node, names[i],
                        "applies only to unix sockets, and none of listen, admin_listen, "
                        "grpc_listen is unix:/path");
    }
    return 0;
}

/* ---- redis modes: TLS, Sentinel, Cluster ------------------------------------------ */

/*
 * A sequence of 1 to max strings, each passing check, into a new array
 * stored in *items and *n as soon as it exists, so that config_free frees
 * what was parsed whatever fails. Values are not quoted back: a URL may
 * hold a password.
 */
static int parse_string_list(struct loader *ld, const yaml_node_t *node, const char *path,
                             size_t max, const char *what,
                             int (*check)(const char *s, char *err, size_t errlen), char ***items,
                             size_t *n)
{
    const yaml_node_item_t *item;
    char child[PATH_LEN], msg[RL_ERRLEN];
    size_t count;

    if (node->type != YAML_SEQUENCE_NODE)
        return fail(ld, node, path, "expected a sequence of %s, got %s", what, kind(node));
    count = (size_t)(node->data.sequence.items.top - node->data.sequence.items.start);
    if (count == 0 || count > max)
        return fail(ld, node, path, "must list 1 to %zu %s", max, what);
    *items = xcalloc(count, sizeof **items);
    for (item = node->data.sequence.items.start; *n < count; item++) {
        const yaml_node_t *v = node_at(ld, *item);
        const char *s;

        snprintf(child, sizeof child, "%s[%zu]", path, *n);
        if ((s = scalar_text(ld, v, child, "a string", 0)) == NULL)
            return -1;
        if (check(s, msg, sizeof msg) < 0)
            return fail(ld, v, child, "%s", msg);
        (*items)[(*n)++] = xstrdup(s);
    }
    return 0;
}

static int parse_sentinel_addresses(struct loader *ld, const yaml_node_t *node, const char *path,
                                    void *slot)
{
    struct redis_sentinel_config *sc = slot;
    return parse_string_list(ld, node, path, SENTINELS_MAX, "sentinel addresses (host:port)",
                             check_sentinel_address, &sc->addresses, &sc->naddresses);
}

/* redis.sentinel.password: a string, or null for none (the sentinels'
 * AUTH is often off even when the data nodes' is on). */
static int parse_sentinel_password(struct loader *ld, const yaml_node_t *node, const char *path,
                                   void *slot)
{
    const char *s;

    if (is_null(node))
        return 0;
    if ((s = scalar_text(ld, node, path, "a string or null", 0)) == NULL)
        return -1;
    if (*s == '\0')
        return fail(ld, node, path, "must not be empty: leave it out (or null) for no AUTH");
    *(char **)slot = xstrdup(s);
    return 0;
}

static int is_rediss(const char *url)
{
    return strncmp(url, "rediss://", 9) == 0;
}

/* redis.cluster: seed URLs, all of one scheme, since one redis.tls (or
 * none) serves every node the cluster announces. */
static int parse_cluster(struct loader *ld, const yaml_node_t *node, const char *path, void *slot)
{
    struct config *c = slot;
    char child[PATH_LEN];

    if (parse_string_list(ld, node, path, CLUSTER_SEEDS_MAX, "seed URLs", check_cluster_seed,
                          &c->redis_cluster, &c->redis_ncluster) < 0)
        return -1;
    for (size_t i = 1; i < c->redis_ncluster; i++) {
        if (is_rediss(c->redis_cluster[i]) != is_rediss(c->redis_cluster[0])) {
            snprintf(child, sizeof child, "%s[%zu]", path, i);
            return fail(ld, node_at(ld, node->data.sequence.items.start[i]), child,
                        "every seed must use the scheme of %s[0] (%s)", path,
                        is_rediss(c->redis_cluster[0]) ? "rediss://" : "redis://");
        }
    }
    return 0;
}

/* redis.tls's client certificate and key go together. */
static int check_tls_pair(struct loader *ld, const yaml_node_t *tls)
{
    const yaml_node_t *cert = field_node(ld, tls, "cert_file");
    const yaml_node_t *key = field_node(ld, tls, "key_file");

    if (cert != NULL && key == NULL)
        return fail(ld, cert, "redis.tls.cert_file", "needs key_file (the certificate's key)");
    if (key != NULL && cert == NULL)
        return fail(ld, key, "redis.tls.key_file", "needs cert_file (the key's certificate)");
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
static int check_redis_modes(struct loader *ld, const yaml_node_t *root, struct config *c)
{
    const yaml_node_t *redis = field_node(ld, root, "redis");
    const yaml_node_t *url, *tls, *sentinel, *cluster;
    struct redis_url u;
    char msg[RL_ERRLEN];
    int is_unix;

    if (redis == NULL)
        return 0; /* the default URL: plain TCP */
    url = field_node(ld, redis, "url");
    tls = field_node(ld, redis, "tls");
    sentinel = field_node(ld, redis, "sentinel");
    cluster = field_node(ld, redis, "cluster");
    if (cluster != NULL && sentinel != NULL)
        return fail(ld, cluster, "redis.cluster", "give sentinel or cluster, not both");
    if (cluster != NULL && url != NULL)
        return fail(ld, url, "redis.url",
                    "not used with redis.cluster (the seed URLs give the scheme and "
                    "credentials): remove it");
    if (c->redis_ncluster > 0) {
        c->redis_tls_on = is_rediss(c->redis_cluster[0]);
    } else {
        /* Validated by its field already; checked all the same. */
        if (redis_url_parse(c->redis_url, &u, msg, sizeof msg) < 0)
            return fail(ld, url != NULL ? url : redis, "redis.url", "%s", msg);
        c->redis_tls_on = u.tls;
        is_unix = u.unix_path != NULL;
        redis_url_free(&u);
        if (sentinel != NULL && is_unix)
            return fail(ld, url, "redis.url",
                        "must be redis:// or rediss:// with redis.sentinel (the sentinels give "
                        "the master's host and port)");
    }
    if (tls != NULL && !c->redis_tls_on)
        return fail(ld, tls, "redis.tls", "applies only to rediss:// URLs, and %s is not one",
                    cluster != NULL ? "redis.cluster" : "redis.url");
    return tls != NULL ? check_tls_pair(ld, tls) : 0;
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
    const char *file = scalar_text(ld, node, path, "a path", 0);
    char buf[CONFIG_TOKEN_MAX + 2];

    if (file == NULL)
        return -1;
    if (file[0] != '/')
        return fail(ld, node, path, "must be an absolute path");
    FILE *f = fopen(file, "rb");
    if (f == NULL)
        return fail(ld, node, path, "cannot open %s: %s", file, strerror(errno));
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    int bad = ferror(f);
    fclose(f);
    if (bad)
        return fail(ld, node, path, "cannot read %s", file);
    while (n > 0 && isspace((unsigned char)buf[n - 1]))
        n--;
    buf[n] = '\0';
    if (n > CONFIG_TOKEN_MAX)
        return fail(ld, node, path, "%s: the token is longer than %d bytes", file,
                    CONFIG_TOKEN_MAX);
    if (n < CONFIG_TOKEN_MIN || strlen(buf) != n || strpbrk(buf, " \t\r\n"))
        return fail(ld, node, path,
                    "%s: the token must be %d to %d bytes with no whitespace or NUL", file,
                    CONFIG_TOKEN_MIN, CONFIG_TOKEN_MAX);
    free(c->auth_token_file);
    free(c->auth_token);
    c->auth_token_file = xstrdup(file);
    c->auth_token = xstrdup(buf);
    return 0;
}

/* Per-policy settings left unset take the top-level value. Done after the
 * whole file is read, since the top-level field may come after `policies`;
 * afterwards the answer needs only the policy, never the config. */
static void inherit_settings(struct config *c)
{
    for (size_t i = 0; i < c->npolicies; i++) {
        if (c->policies[i].headers == HEADERS_INHERIT)
            c->policies[i].headers = c->headers;
        if (c->policies[i].deny_status == 0)
            c->policies[i].deny_status = c->deny_status;
    }
}

/* ---- Envoy domains ------------------------------------------------------------------ */

#define DOMAINS_DEPTH_MAX 16 /* nested descriptors; Envoy's are a few entries long */

/* `domains:` is only noted here: a descriptor may name a policy written
 * further down, and its shadow copy must take the top-level defaults, so
 * load_domains parses it once the whole file has been read. */
static int parse_domains_later(struct loader *ld, const yaml_node_t *node, const char *path,
                               void *slot)
{
    (void)path, (void)slot;
    ld->domains = node;
    return 0;
}

static int parse_unit(struct loader *ld, const yaml_node_t *node, const char *path, void *slot)
{
    char buf[SHOWN_LEN];
    const char *s = scalar_text(ld, node, path, "a unit", 0);

    if (s == NULL)
        return -1;
    if (rls_unit_from_name(s, slot) < 0)
        return fail(ld, node, path,
                    "invalid value \"%s\": must be one of second, minute, hour, day, week, "
                    "month, year",
                    shown(s, buf));
    return 0;
}

/* rate_limit.replaces: a sequence of {name}. */
static int parse_replaces(struct loader *ld, const yaml_node_t *node, const char *path, void *slot)
{
    struct rate_limit_entry *rl = slot;
    const yaml_node_item_t *item;
    char child[PATH_LEN];
    size_t n, i;

    if (node->type != YAML_SEQUENCE_NODE)
        return fail(ld, node, path, "expected a sequence of {name: ...}, got %s", kind(node));
    n = (size_t)(node->data.sequence.items.top - node->data.sequence.items.start);
    rl->replaces = xcalloc(n ? n : 1, sizeof *rl->replaces);
    for (i = 0, item = node->data.sequence.items.start; i < n; i++, item++) {
        struct replaces_entry e = {NULL};
        snprintf(child, sizeof child, "%s[%zu]", path, i);
        if (parse_fields(ld, node_at(ld, *item), child, replaces_fields, &e) < 0) {
            free(e.name);
            return -1;
        }
        rl->replaces[rl->nreplaces++] = e.name;
    }
    return 0;
}

/* rate_limit: envoyproxy/ratelimit's rules: unlimited, or a unit and a
 * number of requests per unit; a limit does not replace itself. */
static int parse_rate_limit(struct loader *ld, const yaml_node_t *node, const char *path,
                            void *slot)
{
    struct node_entry *e = slot;
    struct rate_limit_entry *rl = &e->rl;
    const yaml_node_t *at;

    e->has_rate_limit = 1;
    if (parse_fields(ld, node, path, rate_limit_fields, rl) < 0)
        return -1;
    if (rl->unlimited) {
        if ((at = field_node(ld, node, "unit")) != NULL ||
            (at = field_node(ld, node, "requests_per_unit")) != NULL)
            return fail(ld, at, path, "unlimited: true takes no unit or requests_per_unit");
    } else if (field_node(ld, node, "unit") == NULL) {
        return fail(ld, node, path, "missing required field \"unit\" (or unlimited: true)");
    } else if (field_node(ld, node, "requests_per_unit") == NULL) {
        return fail(ld, node, path, "missing required field \"requests_per_unit\"");
    }
    for (size_t i = 0; rl->name != NULL && i < rl->nreplaces; i++)
        if (strcmp(rl->replaces[i], rl->name) == 0)
            return fail(ld, field_node(ld, node, "replaces"), path,
                        "replaces names this limit itself (\"%s\")", rl->name);
    return 0;
}

static void node_entry_free(struct node_entry *e)
{
    free(e->key);
    free(e->value);
    free(e->policy);
    free(e->rl.name);
    for (size_t i = 0; i < e->rl.nreplaces; i++)
        free(e->rl.replaces[i]);
    free(e->rl.replaces);
    for (size_t i = 0; i < e->children.n; i++)
        domain_node_free(&e->children.items[i]);
    free(e->children.items);
}

/* The overrides node of policies.NAME in the policy file, or NULL. */
static const yaml_node_t *policy_overrides_node(struct loader *ld, const char *name)
{
    const yaml_node_t *root = yaml_document_get_root_node(&ld->doc);
    const yaml_node_t *n = field_node(ld, root, "policies");

    if (n != NULL && n->type == YAML_MAPPING_NODE)
        n = field_node(ld, n, name);
    return n != NULL && n->type == YAML_MAPPING_NODE ? field_node(ld, n, "overrides") : NULL;
}

/*
 * policy: NAME with shadow_mode: a copy of the policy with shadow set (same
 * name, so the same Redis keys). Its overrides' variants must be shadow
 * too, and a copy of the struct would share the original's, so the
 * overrides are parsed again from the file for the copy (it owns them).
 */
static struct policy *shadow_copy(struct loader *ld, const struct policy *p, const char *path)
{
    struct policy *copy = xmalloc(sizeof *copy);
    const yaml_node_t *o;
    char child[PATH_LEN];

    *copy = *p;
    copy->shadow = 1;
    copy->overrides = NULL;
    if (p->overrides != NULL && (o = policy_overrides_node(ld, p->name)) != NULL) {
        snprintf(child, sizeof child, "policies.%s.overrides", p->name);
        if (parse_overrides(ld, o, child, &copy->overrides) < 0) {
            /* Parsed once already, so this cannot fail; say where if it does. */
            fail(ld, o, path, "cannot copy the overrides of policy \"%s\"", p->name);
            policy_overrides_free(copy->overrides);
            free(copy);
            return NULL;
        }
    }
    policy_overrides_inherit(copy);
    return copy;
}

/* rate_limit: {unit, requests_per_unit}: one fixed_window tier of that
 * many requests per unit, with the top-level defaults, as
 * envoyproxy/ratelimit counts it. */
static struct policy *envoy_policy(struct loader *ld, const yaml_node_t *map, const char *path,
                                   const struct rate_limit_entry *rl, int shadow)
{
    struct policy *p = xcalloc(1, sizeof *p);
    char msg[RL_ERRLEN], where[PATH_LEN + 16];

    snprintf(where, sizeof where, "%s.rate_limit", path);
    /* requests_per_unit's bounds and the units' lengths keep this true;
     * policy.c stays the judge all the same. */
    if (domains_envoy_policy(p, rl->unit, rl->requests_per_unit, shadow, ld->c->headers,
                             ld->c->deny_status, msg, sizeof msg) < 0) {
        fail(ld, field_node(ld, map, "rate_limit"), where, "%s", msg);
        free(p);
        return NULL;
    }
    if (default_key(ld, map, where, p) < 0) {
        free(p);
        return NULL;
    }
    return p;
}

/* Gives node the limit its entry describes: a named policy (or its shadow
 * copy), an @envoy policy, unlimited, or none. */
static int build_limit(struct loader *ld, const yaml_node_t *map, const char *path,
                       struct node_entry *e, struct domain_node *node)
{
    struct domain_limit *l = &node->limit;
    const struct policy *p;
    char buf[SHOWN_LEN];

    l->detailed_metric = e->detailed_metric;
    if (e->policy != NULL) {
        if (ld->envoy_file)
            return fail(ld, field_node(ld, map, "policy"), path,
                        "policy: is ratelimitd's extension of the policy file's domains:, not "
                        "part of envoyproxy/ratelimit's files");
        if (e->has_rate_limit)
            return fail(ld, field_node(ld, map, "policy"), path,
                        "give policy or rate_limit, not both");
        if ((p = config_find_policy(ld->c, e->policy)) == NULL)
            return fail(ld, field_node(ld, map, "policy"), path, "unknown policy \"%s\"",
                        shown(e->policy, buf));
        if (e->shadow_mode && !p->shadow) {
            if ((l->owned = shadow_copy(ld, p, path)) == NULL)
                return -1;
            p = l->owned;
        }
        l->policy = p;
        node->has_limit = 1;
        return 0;
    }
    if (!e->has_rate_limit)
        return 0; /* a node on the way to deeper ones, or one that limits nothing */
    node->has_limit = 1;
    l->unlimited = e->rl.unlimited;
    l->name = e->rl.name;
    l->nreplaces = e->rl.nreplaces;
    l->replaces = e->rl.replaces;
    e->rl.name = NULL;
    e->rl.replaces = NULL;
    e->rl.nreplaces = 0;
    if (l->unlimited)
        return 0;
    l->unit = e->rl.unit;
    l->requests_per_unit = e->rl.requests_per_unit;
    if ((l->owned = envoy_policy(ld, map, path, &e->rl, e->shadow_mode)) == NULL)
        return -1;
    l->policy = l->owned;
    return 0;
}

/* Parses one descriptor mapping into node (zeroed; on failure it may hold
 * a part, which domain_node_free frees). */
static int parse_descriptor(struct loader *ld, const yaml_node_t *map, const char *path,
                            struct domain_node *node)
{
    struct node_entry e = {.key = NULL};
    int rc = parse_fields(ld, map, path, descriptor_fields, &e);

    if (rc == 0) {
        node->key = e.key;
        e.key = NULL;
        if (e.value != NULL && e.value[0] == '\0') {
            free(e.value);
            e.value = NULL;
        }
        if (e.value != NULL) {
            size_t n = strlen(e.value);
            /* envoyproxy/ratelimit's wildcard: only a trailing '*'. */
            node->value_prefix = e.value[n - 1] == '*';
            if (node->value_prefix)
                e.value[n - 1] = '\0';
            node->value = e.value;
            e.value = NULL;
        }
        node->nchildren = e.children.n;
        node->children = e.children.items;
        e.children = (struct node_list){0, NULL};
        rc = build_limit(ld, map, path, &e, node);
    }
    node_entry_free(&e);
    return rc;
}

/* A descriptor's selector as the file wrote it, for messages. */
static const char *selector_text(const struct domain_node *n, char *buf, size_t size)
{
    char k[SHOWN_LEN], v[SHOWN_LEN];
    if (n->value == NULL)
        snprintf(buf, size, "key \"%s\" with no value", shown(n->key, k));
    else
        snprintf(buf, size, "key \"%s\" value \"%s%s\"", shown(n->key, k), shown(n->value, v),
                 n->value_prefix ? "*" : "");
    return buf;
}

/* descriptors: a sequence of descriptors, stored in *slot (a node_list) as
 * soon as it is allocated so that its owner frees whatever was built. */
static int parse_descriptors(struct loader *ld, const yaml_node_t *node, const char *path,
                             void *slot)
{
    struct node_list *list = slot;
    const yaml_node_item_t *start;
    char child[PATH_LEN], what[2 * SHOWN_LEN + 32];
    size_t n, i, first, second;
    int rc = 0;

    if (node->type != YAML_SEQUENCE_NODE)
        return fail(ld, node, path, "expected a sequence of descriptors, got %s", kind(node));
    if (ld->depth == DOMAINS_DEPTH_MAX)
        return fail(ld, node, path, "descriptors nested deeper than %d levels", DOMAINS_DEPTH_MAX);
    start = node->data.sequence.items.start;
    n = (size_t)(node->data.sequence.items.top - start);
    list->items = xcalloc(n ? n : 1, sizeof *list->items);
    list->n = n;
    ld->depth++;
    for (i = 0; i < n && rc == 0; i++) {
        snprintf(child, sizeof child, "%s[%zu]", path, i);
        rc = parse_descriptor(ld, node_at(ld, start[i]), child, &list->items[i]);
    }
    ld->depth--;
    if (rc == 0 && domains_sort_level(list->items, n, &first, &second) < 0) {
        const yaml_node_t *map = node_at(ld, start[second]);
        snprintf(child, sizeof child, "%s[%zu]", path, second);
        /* Unsorted on failure: the items are still in the file's order. */
        selector_text(&list->items[second], what, sizeof what);
        rc = fail(ld, map, child, "duplicate descriptor: %s (also %s[%zu], line %zu)", what, path,
                  first, node_at(ld, start[first])->start_mark.line + 1);
    }
    return rc;
}

/* One domain mapping into d; "file:line:col" of it kept for messages. */
static int parse_domain(struct loader *ld, const yaml_node_t *map, const char *path,
                        struct domain *d)
{
    struct domain_entry e = {NULL, {0, NULL}};
    const yaml_node_t *at;
    char where[RL_ERRLEN];
    int rc = parse_fields(ld, map, path, domain_fields, &e);

    d->name = e.domain;
    d->nchildren = e.descriptors.n;
    d->children = e.descriptors.items;
    if (rc == 0) {
        at = field_node(ld, map, "domain");
        snprintf(where, sizeof where, "%s:%zu:%zu", ld->name, at->start_mark.line + 1,
                 at->start_mark.column + 1);
        d->file = xstrdup(where);
    }
    return rc;
}

/* The `limit.path` of every limited node: "key_value.key..." as
 * envoyproxy/ratelimit names its stats (a prefix value keeps its '*'). */
static void set_paths(struct domain_node *nodes, size_t n, const char *prefix)
{
    for (size_t i = 0; i < n; i++) {
        struct domain_node *d = &nodes[i];
        size_t len = strlen(prefix) + strlen(d->key) + (d->value ? strlen(d->value) : 0) + 4;
        char *path = xmalloc(len);

        snprintf(path, len, "%s%s%s%s%s%s", prefix, *prefix ? "." : "", d->key, d->value ? "_" : "",
                 d->value ? d->value : "", d->value_prefix ? "*" : "");
        set_paths(d->children, d->nchildren, path);
        if (d->has_limit)
            d->limit.path = path;
        else
            free(path);
    }
}

/* Appends a domain to c's array. */
static struct domain *add_domain(struct config *c)
{
    c->domains = xrealloc(c->domains, (c->ndomains + 1) * sizeof *c->domains);
    memset(&c->domains[c->ndomains], 0, sizeof *c->domains);
    return &c->domains[c->ndomains++];
}

/* The policy file's `domains:`: a sequence of {domain, descriptors}. */
static int load_domains(struct loader *ld)
{
    const yaml_node_t *node = ld->domains;
    const yaml_node_item_t *item;
    char child[PATH_LEN];
    size_t i;

    if (node == NULL)
        return 0;
    if (node->type != YAML_SEQUENCE_NODE)
        return fail(ld, node, "domains", "expected a sequence of domains, got %s", kind(node));
    for (i = 0, item = node->data.sequence.items.start; item < node->data.sequence.items.top;
         item++, i++) {
        struct domain *d = add_domain(ld->c);
        snprintf(child, sizeof child, "domains[%zu]", i);
        if (parse_domain(ld, node_at(ld, *item), child, d) < 0)
            return -1;
        set_paths(d->children, d->nchildren, "");
    }
    return 0;
}

static int load_document(struct loader *ld, yaml_parser_t *parser, const char *yaml, size_t len);

/* One of envoyproxy/ratelimit's files: exactly one domain. */
static int load_envoy_file(const char *file, const char *text, size_t len, void *arg)
{
    struct loader *policy_ld = arg;
    struct loader ld = {.name = file,
                        .err = policy_ld->err,
                        .errlen = policy_ld->errlen,
                        .c = policy_ld->c,
                        .envoy_file = 1};
    yaml_parser_t parser;
    int rc;

    if (!yaml_parser_initialize(&parser))
        return snprintf(ld.err, ld.errlen, "%s: out of memory", file), -1;
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
    rc = load_document(&ld, &parser, text, len);
    if (rc == 0) {
        struct domain *d = add_domain(ld.c);
        rc = parse_domain(&ld, yaml_document_get_root_node(&ld.doc), "", d);
        if (rc == 0)
            set_paths(d->children, d->nchildren, "");
        yaml_document_delete(&ld.doc);
    }
    yaml_parser_delete(&parser);
    return rc;
}

/* Every domain, from the policy file and the envoy directory (envoy_dir,
 * else the file's envoy_config:), sorted by name; a name twice is an error
 * naming both places. */
static int load_all_domains(struct loader *ld, const char *envoy_dir)
{
    struct config *c = ld->c;
    size_t first, second;

    if (envoy_dir != NULL) {
        free(c->envoy_config);
        c->envoy_config = xstrdup(envoy_dir);
    }
    if (load_domains(ld) < 0)
        return -1;
    if (c->envoy_config != NULL &&
        envoy_config_each(c->envoy_config, load_envoy_file, ld, ld->err, ld->errlen) < 0)
        return -1;
    if (domains_sort(c->domains, c->ndomains, &first, &second) < 0) {
        char buf[SHOWN_LEN];
        snprintf(ld->err, ld->errlen, "%s: domain \"%s\" is defined twice: also at %s",
                 c->domains[second].file, shown(c->domains[second].name, buf),
                 c->domains[first].file);
        return -1;
    }
    return 0;
}

/* ---- loading ---------------------------------------------------------------------- */

/* A snapshot holding the defaults of the field tables, nothing else. */
static struct config *config_new(const char *name)
{
    struct config *c = xcalloc(1, sizeof *c);

    c->refcount = 1;
    c->path = xstrdup(name);
    set_defaults(top_fields, c);
    return c;
}

/* Frees a string that may hold a password, leaving no copy in freed memory. */
static void free_secret(char *s)
{
    if (s != NULL) {
        explicit_bzero(s, strlen(s));
        free(s);
    }
}

static void free_redis_modes(struct config *c)
{
    free(c->redis_tls.ca_file);
    free(c->redis_tls.cert_file);
    free(c->redis_tls.key_file);
    free(c->redis_tls.server_name);
    for (size_t i = 0; i < c->redis_sentinel.naddresses; i++)
        free(c->redis_sentinel.addresses[i]);
    free(c->redis_sentinel.addresses);
    free(c->redis_sentinel.master_name);
    free_secret(c->redis_sentinel.password);
    for (size_t i = 0; i < c->redis_ncluster; i++)
        free_secret(c->redis_cluster[i]); /* seed URLs carry credentials */
    free(c->redis_cluster);
}

static void config_free(struct config *c)
{
    if (c == NULL)
        return;
    free_redis_modes(c);
    free(c->path);
    free(c->listen);
    free(c->listen_group);
    free(c->redis_url);
    free(c->key_prefix);
    free(c->admin_listen);
    free(c->grpc_listen);
    free(c->auth_token_file);
    free_secret(c->auth_token);
    client_trust_free(&c->trusted_proxies);
    for (size_t i = 0; i < c->npolicies; i++)
        policy_overrides_free(c->policies[i].overrides);
    free(c->policies);
    for (size_t i = 0; i < c->ndomains; i++)
        domain_free(&c->domains[i]);
    free(c->domains);
    free(c->envoy_config);
    free(c);
}

/* Reports libyaml's complaint with the position it gives. A reader error
 * (bad UTF-8, say) has only a byte offset, so the line is counted here. */
static void syntax_error(struct loader *ld, const yaml_parser_t *parser, const char *yaml,
                         size_t len)
{
    size_t line = parser->problem_mark.line + 1, col = parser->problem_mark.column + 1, i;
    const char *problem = parser->problem ? parser->problem : "invalid YAML";

    if (parser->error == YAML_MEMORY_ERROR)
        problem = "out of memory";
    if (parser->error == YAML_READER_ERROR) {
        /* Columns count characters, as libyaml's do: skip UTF-8 continuation bytes. */
        line = col = 1;
        for (i = 0; i < parser->problem_offset && i < len; i++) {
            if (yaml[i] == '\n')
                line++, col = 1;
            else if (((unsigned char)yaml[i] & 0xc0) != 0x80)
                col++;
        }
    }
    if (parser->context != NULL)
        snprintf(ld->err, ld->errlen, "%s:%zu:%zu: %s (%s at %zu:%zu)", ld->name, line, col,
                 problem, parser->context, parser->context_mark.line + 1,
                 parser->context_mark.column + 1);
    else
        snprintf(ld->err, ld->errlen, "%s:%zu:%zu: %s", ld->name, line, col, problem);
}

/* Loads the one document of the stream into ld->doc. On success the caller
 * deletes ld->doc; on failure there is nothing to delete. */
static int load_document(struct loader *ld, yaml_parser_t *parser, const char *yaml, size_t len)
{
    yaml_document_t extra;
    const yaml_node_t *root;
    int rc = 0;

    if (!yaml_parser_load(parser, &ld->doc)) {
        syntax_error(ld, parser, yaml, len);
        return -1;
    }
    if (yaml_document_get_root_node(&ld->doc) == NULL) {
        snprintf(ld->err, ld->errlen, "%s:1:1: the file is empty; expected a mapping", ld->name);
        rc = -1;
    } else if (!yaml_parser_load(parser, &extra)) {
        syntax_error(ld, parser, yaml, len);
        rc = -1;
    } else {
        if ((root = yaml_document_get_root_node(&extra)) != NULL)
            rc = fail(ld, root, "", "a second YAML document; the file must hold only one");
        yaml_document_delete(&extra);
    }
    if (rc < 0)
        yaml_document_delete(&ld->doc);
    return rc;
}

/* config_load_string, with the envoy directory of --envoy-config (NULL:
 * the file's envoy_config:, if any). */
static struct config *load_string(const char *name, const char *yaml, size_t len,
                                  const char *envoy_dir, char *err, size_t errlen)
{
    struct loader ld = {.name = name, .err = err, .errlen = errlen};
    yaml_parser_t parser;
    const yaml_node_t *root;
    struct config *c;

    if (!yaml_parser_initialize(&parser)) {
        snprintf(err, errlen, "%s: out of memory", name);
        return NULL;
    }
    yaml_parser_set_input_string(&parser, (const unsigned char *)yaml, len);
    if (load_document(&ld, &parser, yaml, len) < 0) {
        yaml_parser_delete(&parser);
        return NULL;
    }
    c = config_new(name);
    ld.c = c;
    root = yaml_document_get_root_node(&ld.doc);
    if (parse_fields(&ld, root, "", top_fields, c) < 0 || check_unix_fields(&ld, root, c) < 0 ||
        check_redis_modes(&ld, root, c) < 0) {
        config_free(c);
        c = NULL;
    } else {
        inherit_settings(c);
        /* Every per-policy setting is final, wherever it came from. */
        for (size_t i = 0; i < c->npolicies; i++)
            policy_overrides_inherit(&c->policies[i]);
        /* Last: the domains' policies are copies of final ones, or take
         * the top-level defaults. */
        if (load_all_domains(&ld, envoy_dir) < 0) {
            config_free(c);
            c = NULL;
        }
    }
    yaml_document_delete(&ld.doc);
    yaml_parser_delete(&parser);
    return c;
}

struct config *config_load_string(const char *name, const char *yaml, size_t len, char *err,
                                  size_t errlen)
{
    return load_string(name, yaml, len, NULL, err, errlen);
}

struct config *config_load(const char *path, char *err, size_t errlen)
{
    return config_load_envoy(path, NULL, err, errlen);
}

struct config *config_load_envoy(const char *path, const char *envoy_dir, char *err, size_t errlen)
{
    struct config *c = NULL;
    size_t len = 0, cap = 4096, got;
    char *buf;
    FILE *f = fopen(path, "rb");

    if (f == NULL) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return NULL;
    }
    buf = xmalloc(cap);
    while ((got = fread(buf + len, 1, cap - len, f)) > 0) {
        len += got;
        if (len > FILE_MAX)
            break;
        if (len == cap)
            buf = xrealloc(buf, cap *= 2);
    }
    if (ferror(f))
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
    else if (len > FILE_MAX)
        snprintf(err, errlen, "%s: larger than %d bytes", path, FILE_MAX);
    else
        c = load_string(path, buf, len, envoy_dir, err, errlen);
    fclose(f); /* read-only: nothing to lose if close fails */
    free(buf);
    return c;
}

/* The count is atomic because checks running on other worker threads hold
 * references to the same snapshot. */
struct config *config_ref(struct config *c)
{
    if (c != NULL)
        __atomic_add_fetch(&c->refcount, 1, __ATOMIC_RELAXED);
    return c;
}

void config_unref(struct config *c)
{
    if (c != NULL && __atomic_sub_fetch(&c->refcount, 1, __ATOMIC_ACQ_REL) == 0)
        config_free(c);
}

const struct policy *config_find_policy(const struct config *c, const char *name)
{
    if (c == NULL || name == NULL)
        return NULL;
    return bsearch(name, c->policies, c->npolicies, sizeof *c->policies, policy_cmp);
}

/* Calls fn with every row's dotted path: a section's fields follow a '.',
 * each policy's follow ".NAME.", each tier's and each override's follow
 * "[].". in_config: the row's value lives in struct config itself (the top
 * level and its sections). fn returns nonzero to stop the walk. */
typedef int walk_fn(const char *path, const struct field *f, int in_config, void *arg);

static int walk_rows(const struct field *fields, const char *prefix, int in_config, walk_fn *fn,
                     void *arg)
{
    for (const struct field *f = fields; f->name; f++) {
        char path[128], child[sizeof path + 8];
        snprintf(path, sizeof path, "%s%s", prefix, f->name);
        if (fn(path, f, in_config, arg))
            return 1;
        /* descriptors nest in descriptors: their fields are listed once. */
        if (!f->section || f->section == fields)
            continue;
        snprintf(child, sizeof child, "%s%s", path,
                 f->type == F_SECTION || f->parse == parse_rate_limit ? "."
                 : f->parse == parse_policies                         ? ".NAME."
                                                                      : "[].");
        if (walk_rows(f->section, child, in_config && f->type == F_SECTION, fn, arg))
            return 1;
    }
    return 0;
}

struct foreach_arg {
    void (*fn)(const char *path, void *arg);
    void *arg;
};

static int foreach_row(const char *path, const struct field *f, int in_config, void *arg)
{
    struct foreach_arg *a = arg;
    (void)f, (void)in_config;
    a->fn(path, a->arg);
    return 0;
}

void config_foreach_field(void (*fn)(const char *path, void *arg), void *arg)
{
    struct foreach_arg a = {fn, arg};
    walk_rows(top_fields, "", 1, foreach_row, &a);
}

/* The row of a dotted path, found by walk_rows. */
struct find_arg {
    const char *path;
    const struct field *f;
    int in_config;
};

static int find_row(const char *path, const struct field *f, int in_config, void *arg)
{
    struct find_arg *a = arg;
    if (strcmp(path, a->path) != 0)
        return 0;
    a->f = f;
    a->in_config = in_config;
    return 1;
}

static const struct field *row_of(const char *path, int *in_config)
{
    struct find_arg a = {path, NULL, 0};
    walk_rows(top_fields, "", 1, find_row, &a);
    if (in_config != NULL)
        *in_config = a.in_config;
    return a.f;
}

int config_field_restart(const char *path)
{
    const struct field *f = row_of(path, NULL);
    return f == NULL ? -1 : f->reload == RELOAD_RESTART;
}

/* A stored value as text: strings as they are, numbers in decimal. */
static int value_text(struct field_store st, const void *slot, char *buf, size_t size)
{
    if (st.kind == S_STRING && *(char *const *)slot != NULL)
        return snprintf(buf, size, "%s", *(char *const *)slot), 1;
    if (st.kind == S_INT64)
        return snprintf(buf, size, "%" PRId64, *(const int64_t *)slot), 1;
    if (st.kind == S_INT)
        return snprintf(buf, size, "%d", *(const int *)slot), 1;
    return 0;
}

int config_field_default(const char *path, char *buf, size_t size)
{
    const struct field *f = row_of(path, NULL);
    struct field_store st;
    int as_int = 0;
    const char *as_string = NULL;

    if (f == NULL)
        return -1;
    st = store_of(f);
    if (st.kind == S_STRING && f->def_str == NULL)
        return 0;
    as_string = f->def_str;
    as_int = (int)f->def;
    return value_text(st,
                      st.kind == S_STRING  ? (const void *)&as_string
                      : st.kind == S_INT64 ? (const void *)&f->def
                                           : (const void *)&as_int,
                      buf, size);
}

int config_field_value(const struct config *c, const char *path, char *buf, size_t size)
{
    int in_config;
    const struct field *f = row_of(path, &in_config);

    if (f == NULL || !in_config)
        return -1;
    return value_text(store_of(f), (const char *)c + store_of(f).offset, buf, size);
}

int config_restart_field(const struct config *old, const struct config *new, char *path,
                         size_t size)
{
    return find_restart_field(top_fields, "", old, new, path, size);
}
