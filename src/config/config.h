/* SPDX-License-Identifier: Apache-2.0 */
/*
 * config.h: the policy file. config_load() turns a YAML file into an
 * immutable, reference-counted snapshot; nothing else reads the file.
 *
 * Ownership: config_load returns a snapshot with one reference, owned by the
 * caller. Every holder (the server, each check in flight) takes its own
 * reference with config_ref and drops it with config_unref; the last unref
 * frees it. A snapshot is never modified after config_load returns, so a
 * reload can swap the server's pointer while older checks finish under the
 * snapshot they started with.
 */
#ifndef RATELIMITD_CONFIG_H
#define RATELIMITD_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include "config/domains.h"
#include "config/policy.h"
#include "config/redis_url.h"
#include "lib/client_ip.h"
#include "lib/log.h"
#include "lib/tls_server.h"
#include "lib/util.h"

#define CONFIG_PREFIX_MAX 128
#define CONFIG_TOKEN_MIN 16
#define CONFIG_TOKEN_MAX 4096

enum clock_source { CLOCK_SOURCE_REDIS, CLOCK_SOURCE_LOCAL };

/* What a check gets when max_inflight checks are already waiting for Redis:
 * its policies' failure_mode answer at once, or 503 overloaded. */
enum overload_action { OVERLOAD_FAILURE_MODE, OVERLOAD_REJECT };

/* Where decisions are made: Redis (shared by every daemon) or this process's
 * memory (backend_memory.c); backend/registry.c maps each to a backend. */
enum backend_kind { BACKEND_KIND_REDIS, BACKEND_KIND_MEMORY };

/* redis.module: whether a node's decisions go through the ratelimitd.check
 * module command (ratelimitd.so) where the node has it and the Functions
 * elsewhere (auto), only through it (on: a node without it is
 * unavailable), or never (off). */
enum redis_module_mode { REDIS_MODULE_AUTO, REDIS_MODULE_ON, REDIS_MODULE_OFF };
/* "auto", "on" or "off", as the file writes it. */
const char *config_redis_module_name(enum redis_module_mode m);

/* redis.tls: used by every connection when the URLs are rediss://. */
struct redis_tls_config {
    char *ca_file;     /* NULL: the system's CA store */
    char *cert_file;   /* client certificate; NULL: none */
    char *key_file;    /* its key; set iff cert_file is */
    char *server_name; /* the name verified and sent (SNI); NULL: the host */
    int verify;        /* default 1 */
};

/* redis.sentinel: the master is found through these sentinels. */
struct redis_sentinel_config {
    size_t naddresses; /* 0: no sentinel */
    char **addresses;  /* "host:port", "[v6]:port" */
    char *master_name;
    char *password; /* the sentinels' own; NULL: none */
};

/* tls, admin_tls, grpc_tls: TLS on one of the daemon's listeners. */
struct listen_tls_config {
    char *cert_file;           /* NULL: the block is absent, the listener is plain text */
    char *key_file;            /* set iff cert_file is */
    char *client_ca_file;      /* NULL: none (client_auth none) */
    int client_auth;           /* enum tls_client_auth */
    struct tls_server *server; /* made at load from the files above; NULL: plain */
};

#define CONFIG_WORKERS_MAX 64

struct config {
    int refcount;
    char *path;          /* the file it was loaded from */
    char *listen;        /* "host:port", "[v6]:port" or "unix:/path" */
    int64_t listen_mode; /* unix socket files' mode; -1: bind's 0777 & ~umask */
    char *listen_group;  /* their group as written; NULL: the daemon's own */
    int64_t listen_gid;  /* listen_group resolved at load; -1: none */
    enum backend_kind backend;
    int64_t workers; /* event loops; 0: one per CPU (auto) */
    char *redis_url; /* single and sentinel modes, as written (the reload's comparison) */
    /* redis_url parsed, once, at load (config_redis.c): what the backend
     * connects with (the password before RATELIMITD_REDIS_PASSWORD). */
    struct redis_url redis_server;
    int64_t redis_timeout_us;
    int64_t redis_batch; /* requests per call of the decision code; 1: one each */
    enum redis_module_mode redis_module;
    int redis_tls_on; /* the URLs are rediss:// */
    struct redis_tls_config redis_tls;
    struct redis_sentinel_config redis_sentinel;
    size_t redis_ncluster;         /* 0: not a cluster */
    char **redis_cluster;          /* seed URLs, as written */
    struct redis_url *redis_seeds; /* redis_cluster parsed at load: TCP, db 0, one scheme */
    char *key_prefix;
    enum clock_source clock;
    int64_t max_body;
    enum log_level log_level;
    int access_log;      /* one log line per check */
    char *admin_listen;  /* NULL: /metrics, /healthz, /readyz on `listen` */
    int admin_on_listen; /* /v1/keys/ on `listen` without a token (no admin_listen) */
    /* Envoy's MONTH and YEAR as calendar months and years in UTC (else 30
     * and 365 days, as envoyproxy/ratelimit); utc is set with it. */
    int envoy_calendar_units;
    const struct tzif_zone *utc;
    char *warning;        /* NULL, or "file:line:col: path: message" lines ('\n' between)
                           * of parts that do nothing (a redis: section with backend:
                           * memory, an envoy file's metadata:): each logged */
    int watch;            /* reload when the file (or its directory) changes */
    int64_t max_inflight; /* checks waiting for Redis at once */
    enum overload_action overload;
    int64_t max_connections;
    int64_t idle_timeout_us;             /* a connection silent this long is closed */
    int64_t request_timeout_us;          /* head and body of one request arrive within it */
    int64_t local_max_keys;              /* keys held in memory for failure_mode local */
    char *state_file;                    /* the memory store's file (store_file.h); NULL: none */
    int64_t state_interval_us;           /* how often it is written while running */
    int64_t deny_cache_max_keys;         /* entries in each worker's deny cache; 0: no cache */
    enum header_mode headers;            /* for policies that do not set their own */
    char *auth_token_file;               /* NULL: /check needs no token */
    char *auth_token;                    /* its content, read at load */
    struct client_trust trusted_proxies; /* whose X-Forwarded-For ${ip} believes */
    int64_t deny_status;                 /* forward-auth's status for a denial, by default */
    size_t npolicies;
    /* The time zones of the calendar tiers, each loaded once (tzif.c) and
     * freed with the snapshot; tiers point at them. */
    struct tzif_zone **zones;
    size_t nzones;
    struct policy *policies; /* sorted by name for policy lookup */

    /* The gRPC front (grpc.h). */
    char *grpc_listen;        /* NULL: none */
    int64_t grpc_max_streams; /* SETTINGS_MAX_CONCURRENT_STREAMS per connection */

    /* By enum tls_listener: listen's, admin_listen's, grpc_listen's. */
    struct listen_tls_config listen_tls[TLS_NLISTENERS];

    char *envoy_config;      /* envoyproxy/ratelimit's YAML directory; NULL: none */
    int envoy_merge_domains; /* a domain in several files (or domains:): merged, not an error */
    /* envoyproxy/ratelimit's SHADOW_MODE and global quota mode, for Envoy's
     * requests (rls.c): an OVER_LIMIT answer is sent as OK; every descriptor
     * is a quota descriptor. Set by the file or the command line. */
    int envoy_shadow_mode;
    int envoy_quota_mode;
    size_t ndomains;
    struct domain *domains; /* Envoy domains (domains.h), sorted by name */
};

/* Defaults, also written in the README and conf/ratelimitd.yaml; the field
 * tables (config.c) give them to each field. */
#define CONFIG_DEFAULT_LISTEN "127.0.0.1:8080"
#define CONFIG_DEFAULT_REDIS_URL "redis://127.0.0.1:6379/0"
#define CONFIG_DEFAULT_TIMEOUT_US 50000
/* redis.timeout's largest value; a drain can last this plus
 * WORKER_DRAIN_MAX_S (worker.h). */
#define CONFIG_REDIS_TIMEOUT_MAX_US 60000000
/* redis.batch: its default (bench/batch_sweep.sh measures it) and largest
 * value. */
#define CONFIG_DEFAULT_REDIS_BATCH 32
#define CONFIG_REDIS_BATCH_MAX 1024
#define CONFIG_DEFAULT_PREFIX "rl:"
#define CONFIG_DEFAULT_MAX_BODY 16384
#define CONFIG_DEFAULT_MAX_INFLIGHT 10000
#define CONFIG_DEFAULT_MAX_CONNECTIONS 4096
#define CONFIG_DEFAULT_GRPC_MAX_STREAMS 100
#define CONFIG_DEFAULT_IDLE_TIMEOUT_US 30000000
#define CONFIG_DEFAULT_REQUEST_TIMEOUT_US 10000000
#define CONFIG_DEFAULT_LOCAL_MAX_KEYS 100000
#define CONFIG_DEFAULT_STATE_INTERVAL_US 10000000
#define CONFIG_DEFAULT_DENY_CACHE_MAX_KEYS 100000
#define CONFIG_DEFAULT_DENY_STATUS 429

/*
 * Loads and validates a policy file. On error returns NULL and writes
 * "<file>:<line>:<column>: <what is wrong>" (line and column 1-based) into
 * err. Unknown keys, wrong types, missing required fields and every invalid
 * value are errors; nothing falls back to a default silently.
 */
struct config *config_load(const char *path, char *err, size_t errlen) RL_WUR;

/* Same, with the envoyproxy/ratelimit directory of --envoy-config, which
 * wins over the file's envoy_config: (NULL: the file's, if any). The
 * directory's files are loaded with the policy file, so a reload re-reads
 * them and -t validates them. */
struct config *config_load_envoy(const char *path, const char *envoy_dir, char *err,
                                 size_t errlen) RL_WUR;

/* What the command line says over the policy file, for config_load_cli. */
struct config_cli {
    const char *envoy_dir;   /* --envoy-config DIR; NULL: the file's envoy_config */
    int envoy_merge_domains; /* --envoy-merge-domains[=BOOL]; -1: the file's */
    /* --envoy-shadow-mode, --envoy-quota-mode: 1 turns the field on whatever
     * the file says, at start and on every reload */
    int envoy_shadow_mode;
    int envoy_quota_mode;
    /* --listen, --backend, --redis-url: the value over the file's listen,
     * backend and redis.url, at start and on every reload; NULL: the
     * file's. */
    const char *listen;
    const char *backend;
    const char *redis_url;
};

/* config_load_envoy with every command-line setting of c (NULL: none). */
struct config *config_load_cli(const char *path, const struct config_cli *cli, char *err,
                               size_t errlen) RL_WUR;

/* Same, from a buffer; `name` stands for the file in messages (for tests). */
struct config *config_load_string(const char *name, const char *yaml, size_t len, char *err,
                                  size_t errlen) RL_WUR;

struct config *config_ref(struct config *c);
void config_unref(struct config *c); /* NULL is a no-op */

/* The policy of that name, or NULL. */
const struct policy *config_find_policy(const struct config *c, const char *name);

/* Calls fn with the path of every field the policy file accepts, e.g.
 * "redis.url", "policies.NAME.shadow", "policies.NAME.tiers[].limit": the
 * docs test walks it so that no field goes undocumented. */
void config_foreach_field(void (*fn)(const char *path, void *arg), void *arg);

/*
 * The field table's reload rule: the first field (in the table's order)
 * that only a restart applies and whose value differs between old and new,
 * its dotted path ("listen", "redis.tls.ca_file") written into path.
 * Returns 1 if there is one, 0 if a reload may apply new as a whole.
 */
int config_restart_field(const struct config *old, const struct config *new, char *path,
                         size_t size) RL_WUR;

/*
 * What a reload changes, for its log line: comma-separated names, each list
 * bounded (a list too long ends with "+N more"), "" for none. fields: the
 * rows whose value differs, by dotted path ("max_body", "redis.timeout",
 * "auth_token_file" when the token rotates; "domains" when their number
 * does); the policies by name.
 */
struct config_changes {
    char fields[256], added[256], removed[256], changed[256];
};
void config_changes(const struct config *old, const struct config *new, struct config_changes *out);

/* For the docs test and the table's own tests, by dotted path (as
 * config_foreach_field gives it): config_field_restart is 1 for a field
 * that changes only with a restart, 0 for one a reload applies, -1 for an
 * unknown path. config_field_default writes the table's default as text
 * (strings as written, numbers, booleans and choices as integers) and
 * returns 1, or 0 when it has none (-1: unknown path). config_field_value
 * writes c's value of a top-level or redis.* field the same way: 1, 0 for a
 * NULL string or a value with no text form, -1 for a path not stored in
 * struct config. */
int config_field_restart(const char *path);
int config_field_default(const char *path, char *buf, size_t size);
int config_field_value(const struct config *c, const char *path, char *buf, size_t size);

#endif
