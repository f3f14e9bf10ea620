/* SPDX-License-Identifier: Apache-2.0 */
/*
 * config_internal.h: what the files of the policy-file loader share, and
 * nothing else: the loader's state (struct loader), the shape of a field
 * table's row (struct field), the walker's helpers, and the few tables and
 * parsers one of those files names in another's. Included only by
 * src/config/config*.c; everything outside them sees config.h alone.
 *
 *   config.c           the snapshot's life: defaults, load, ref/unref, the
 *                      walks over the tables (reload rules, docs)
 *   config_walk.c      libyaml, the generic walker, file:line:col messages
 *   config_fields.c    struct config's rows (defaults, reload rules) and
 *                      their value checkers and custom parsers
 *   config_redis.c     redis.sentinel and redis.cluster's lists, the rules
 *                      between redis's fields
 *   config_policies.c  policies, tiers, overrides (and their tables)
 *   config_domains.c   `domains:` and envoyproxy/ratelimit's files
 *   config_tls.c       tls, admin_tls, grpc_tls: their rules, their contexts
 *
 * What one of those files defines for another carries the prefix cfg_: the
 * library is linked whole, and a name such as join or kind must not reach
 * the rest of the daemon.
 *
 * Owns the types above; does not own struct config (config.h), nor what a
 * valid tier is (policy.c). Includes no header of its own module's users
 * (config.h among them), so that config.c including it makes no cycle:
 * struct config and struct policy are only named here.
 */
#ifndef RATELIMITD_CONFIG_INTERNAL_H
#define RATELIMITD_CONFIG_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <yaml.h>

#include "lib/util.h"

#define PATH_LEN 256  /* "policies.<name>.tiers[15].precision" and some */
#define SHOWN_LEN 48  /* a value quoted in a message */
#define MAX_FIELDS 40 /* rows in the largest field table */
#define NROWS(t) (sizeof(t) / sizeof((t)[0]) - 1)

struct buf;
struct config;
struct config_cli;
struct policy;

struct loader {
    yaml_document_t doc;
    const char *name; /* the file, for messages */
    char *err;
    size_t errlen;
    struct config *c;           /* the snapshot being built */
    const yaml_node_t *domains; /* `domains:`, parsed once the policies are final */
    int envoy_file;             /* an envoyproxy/ratelimit file: no `policy:` */
    int depth;                  /* of the descriptors being parsed */
    int backend_from_cli;       /* --backend: the file's redis section left aside on purpose */
    /* When set, asked about a key no field of the table names: 0 to skip
     * it (the callee warns), -1 to refuse it as unknown. */
    int (*unknown)(struct loader *ld, const yaml_node_t *key, const char *path, const char *name);
};

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

/* ---- config_walk.c: messages, nodes, the walker, the document ---------------- */

/* Reports an error at node and returns -1. path is the dotted path to the
 * node ("" for the top), fmt the message. */
__attribute__((format(printf, 4, 5))) int cfg_fail(struct loader *ld, const yaml_node_t *node,
                                                   const char *path, const char *fmt, ...);
/* Like fail, at byte `at` of a scalar's value where the column is exact. */
__attribute__((format(printf, 5, 6))) int cfg_fail_in(struct loader *ld, const yaml_node_t *node,
                                                      size_t at, const char *path, const char *fmt,
                                                      ...);
/* A value from the file made safe to quote in a message, in buf. */
const char *cfg_shown(const char *s, char buf[SHOWN_LEN]);
/* Appends name to a ", "-separated list in b, kept NUL-terminated and
 * built to its length (the caller frees it with buf_free). */
void cfg_list_add(struct buf *b, const char *name);
/* path.name into out (PATH_LEN bytes); name alone at the top. */
void cfg_join(char *out, const char *path, const char *name);

/* Whether n is a YAML null (a plain "", "~", "null", "Null", "NULL"). */
int cfg_is_null(const yaml_node_t *n);
/* "a mapping", "a sequence", "null" or "a scalar", for messages. */
const char *cfg_kind(const yaml_node_t *n);
yaml_node_t *cfg_node_at(struct loader *ld, int index);
/* A scalar's text, or NULL after reporting why the node is not one. */
const char *cfg_scalar_text(struct loader *ld, const yaml_node_t *node, const char *path,
                            const char *expected, int plain_only);
/* A policy or tier name: its text, or NULL after reporting it invalid. */
const char *cfg_name_text(struct loader *ld, const yaml_node_t *node, const char *path);
/* The value of the field called name in a mapping, or NULL. */
const yaml_node_t *cfg_field_node(struct loader *ld, const yaml_node_t *map, const char *name);

/* Parses a mapping against a field table into target (see config_walk.c). */
int cfg_parse_fields(struct loader *ld, const yaml_node_t *map, const char *path,
                     const struct field *fields, void *target) RL_WUR;
/* Loads the one document of the stream into ld->doc. On success the caller
 * deletes ld->doc; on failure there is nothing to delete. */
int cfg_load_document(struct loader *ld, yaml_parser_t *parser, const char *yaml,
                      size_t len) RL_WUR;

/* ---- config.c ------------------------------------------------------------------ */

/* Gives target every default of the table (sections included). Strings
 * are copies, owned by target. */
void cfg_set_defaults(const struct field *fields, void *target);

/* ---- config_fields.c: the rows of struct config ------------------------------- */

extern const struct field cfg_top_fields[];
/* headers: the top level's and each policy's. */
extern const char *const cfg_header_names[];
/* listen_mode and listen_group need a unix socket listener. */
int cfg_check_unix_fields(struct loader *ld, const yaml_node_t *root,
                          const struct config *c) RL_WUR;
/* admin_on_listen: true needs no admin_listen. */
int cfg_check_admin_on_listen(struct loader *ld, const yaml_node_t *root,
                              const struct config *c) RL_WUR;
/* cli's listen, backend and redis_url over c's (cli NULL: none), checked
 * as the file's values are; -1 with the option named in ld->err. */
int cfg_apply_cli(struct loader *ld, struct config *c, const struct config_cli *cli) RL_WUR;
/* client_auth's words: none, request, require. */
extern const char *const cfg_client_auth_names[];

/* ---- config_tls.c: tls, admin_tls, grpc_tls ----------------------------------- */

/* The rules between a TLS block's fields and its listener, once the file
 * is read; then each block's context made from its files (tls_server.h). */
int cfg_load_listen_tls(struct loader *ld, const yaml_node_t *root, struct config *c) RL_WUR;
/* Frees what cfg_load_listen_tls and the fields made. */
void cfg_free_listen_tls(struct config *c);

/* ---- config_redis.c: redis.sentinel, redis.cluster, the rules between them ---- */

int cfg_parse_sentinel_addresses(struct loader *ld, const yaml_node_t *node, const char *path,
                                 void *slot) RL_WUR;
int cfg_parse_sentinel_password(struct loader *ld, const yaml_node_t *node, const char *path,
                                void *slot) RL_WUR;
int cfg_parse_cluster(struct loader *ld, const yaml_node_t *node, const char *path,
                      void *slot) RL_WUR;
/* redis.url: parsed into the whole config at slot (cfg_redis_url_set). */
int cfg_parse_redis_url(struct loader *ld, const yaml_node_t *node, const char *path,
                        void *slot) RL_WUR;
/* c->redis_url becomes a copy of text and c->redis_server its parse (the
 * one parse of a Redis URL at load); -1 with a message that never quotes
 * the credentials, c unchanged. */
int cfg_redis_url_set(struct config *c, const char *text, char *err, size_t errlen) RL_WUR;
/* The rules between redis's fields, once the file is read; sets
 * redis_tls_on. */
int cfg_check_redis_modes(struct loader *ld, const yaml_node_t *root, struct config *c) RL_WUR;

/* ---- config_policies.c: policies, tiers, overrides ----------------------------- */

extern const struct field cfg_policy_fields[];
/* The policies mapping: name -> policy, into the struct config at slot. */
int cfg_parse_policies(struct loader *ld, const yaml_node_t *node, const char *path,
                       void *slot) RL_WUR;
/* policies.NAME.overrides into *slot (a struct policy_overrides *). */
int cfg_parse_overrides(struct loader *ld, const yaml_node_t *node, const char *path,
                        void *slot) RL_WUR;

/* The snapshot's zone `name` (loaded on first use and kept in it; "" is
 * UTC, built in), or -1 with a message (config_policies.c). */
struct tzif_zone;
int cfg_zone(struct loader *ld, const char *name, const struct tzif_zone **out, char *err,
             size_t errlen) __attribute__((warn_unused_result));
/* A policy's key template before its fields are read: "${ip}". */
int cfg_default_key(struct loader *ld, const yaml_node_t *at, const char *path,
                    struct policy *p) RL_WUR;
/* Per-policy settings left unset take the top-level value. */
void cfg_inherit_settings(struct config *c);

/* ---- config_domains.c: Envoy domains ------------------------------------------- */

extern const struct field cfg_domain_fields[];
/* `domains:`, noted for cfg_load_all_domains. */
int cfg_parse_domains_later(struct loader *ld, const yaml_node_t *node, const char *path,
                            void *slot) RL_WUR;
/* rate_limit: of a descriptor (config.c's walk over the rows names it). */
int cfg_parse_rate_limit(struct loader *ld, const yaml_node_t *node, const char *path,
                         void *slot) RL_WUR;
/* Every domain, from the policy file and the envoy directory, sorted (and
 * merged with envoy_merge_domains; merge: the command line's switch, -1
 * for the file's). */
int cfg_load_all_domains(struct loader *ld, const char *envoy_dir, int merge) RL_WUR;

#endif
