/* SPDX-License-Identifier: Apache-2.0 */
/*
 * config.c: the policy file, from YAML text to an immutable,
 * reference-counted struct config: the snapshot's life (new with the
 * tables' defaults, load, ref, unref, free), and the walks over the field
 * tables that answer for a row outside the load: its reload rule
 * (config_restart_field, config_field_restart), its default and value
 * (config_field_default, config_field_value), every row's path
 * (config_foreach_field, which the docs test reads).
 *
 * The loading itself is spread by concern (config_internal.h lists the
 * files): the walker and its file:line:col messages in config_walk.c, the
 * rows of struct config in config_fields.c, Redis's modes in
 * config_redis.c, policies in config_policies.c, Envoy domains in
 * config_domains.c. This file only runs them in order. Defaults live in
 * config.h and the tables' rows; what a valid tier is, in policy.c.
 */
#include "config/config.h"
#include "config/config_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#define FILE_MAX (16 * 1024 * 1024) /* a policy file is never near this */

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
void cfg_set_defaults(const struct field *fields, void *target)
{
    for (const struct field *f = fields; f->name != NULL; f++) {
        struct field_store st = store_of(f);
        void *slot = (char *)target + st.offset;

        if (f->type == F_SECTION)
            cfg_set_defaults(f->section, target);
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

/* ---- what a reload changes -------------------------------------------------------- */

/* Appends name to a comma-separated list of at most size - 1 bytes; a name
 * that does not fit is counted in *cut instead, so the list stays bounded
 * and says how much it left out. */
static void list_add(char *list, size_t size, size_t *cut, const char *name)
{
    size_t len = strlen(list), n = strlen(name) + (len ? 1 : 0);
    /* room for the name and a later ",+NNNN more" */
    if (*cut || len + n + 12 >= size) {
        (*cut)++;
        return;
    }
    snprintf(list + len, size - len, "%s%s", len ? "," : "", name);
}

static void list_end(char *list, size_t size, size_t cut)
{
    size_t len = strlen(list);
    if (cut)
        snprintf(list + len, size - len, "%s+%zu more", len ? "," : "", cut);
}

static int same_trust(const struct client_trust *a, const struct client_trust *b)
{
    if (a->unix_trusted != b->unix_trusted || a->n != b->n)
        return 0;
    for (size_t i = 0; i < a->n; i++)
        if (a->nets[i].prefix != b->nets[i].prefix ||
            a->nets[i].addr.family != b->nets[i].addr.family ||
            memcmp(a->nets[i].addr.a, b->nets[i].addr.a, sizeof a->nets[i].addr.a) != 0)
            return 0;
    return 1;
}

/* The listener TLS block whose field f is (f one of its rows). */
static const struct listen_tls_config *listener_tls(const struct config *c, const struct field *f)
{
    size_t i = (f->offset - offsetof(struct config, listen_tls)) / sizeof c->listen_tls[0];
    return &c->listen_tls[i];
}

/* The rows of fields (sections walked, by dotted path) whose values
 * differ; rows without a stored value are compared by hand, the policies
 * and domains left to their own lists. */
static void changed_fields(const struct field *fields, const char *prefix, const struct config *a,
                           const struct config *b, char *list, size_t size, size_t *cut)
{
    for (const struct field *f = fields; f->name != NULL; f++) {
        char path[PATH_LEN];
        int same;
        snprintf(path, sizeof path, "%s%s", prefix, f->name);
        if (f->type == F_SECTION) {
            strcat(path, ".");
            changed_fields(f->section, path, a, b, list, size, cut);
            continue;
        }
        if (strcmp(path, "auth_token_file") == 0) /* the path, or a rotated token */
            same = same_string(a->auth_token_file, b->auth_token_file) &&
                   same_string(a->auth_token, b->auth_token);
        else if (strcmp(path, "trusted_proxies") == 0)
            same = same_trust(&a->trusted_proxies, &b->trusted_proxies);
        else if (strcmp(f->name, "cert_file") == 0 &&
                 f->offset != offsetof(struct config, redis_tls.cert_file))
            /* a listener's certificate, rotated under the same name */
            same = same_value(f, a, b) &&
                   tls_server_same(listener_tls(a, f)->server, listener_tls(b, f)->server);
        else if (strcmp(path, "domains") == 0)
            same = domains_equal(a->domains, a->ndomains, b->domains, b->ndomains);
        else
            same = same_value(f, a, b);
        if (!same)
            list_add(list, size, cut, path);
    }
}

void config_changes(const struct config *old, const struct config *new, struct config_changes *out)
{
    size_t cut[4] = {0, 0, 0, 0};
    memset(out, 0, sizeof *out);
    changed_fields(cfg_top_fields, "", old, new, out->fields, sizeof out->fields, &cut[0]);
    /* Both sorted by name: one merge. */
    size_t i = 0, j = 0;
    while (i < old->npolicies || j < new->npolicies) {
        int cmp = i == old->npolicies   ? 1
                  : j == new->npolicies ? -1
                                        : strcmp(old->policies[i].name, new->policies[j].name);
        if (cmp < 0) {
            list_add(out->removed, sizeof out->removed, &cut[1], old->policies[i++].name);
        } else if (cmp > 0) {
            list_add(out->added, sizeof out->added, &cut[2], new->policies[j++].name);
        } else {
            if (!policy_equal(&old->policies[i], &new->policies[j]))
                list_add(out->changed, sizeof out->changed, &cut[3], new->policies[j].name);
            i++, j++;
        }
    }
    list_end(out->fields, sizeof out->fields, cut[0]);
    list_end(out->removed, sizeof out->removed, cut[1]);
    list_end(out->added, sizeof out->added, cut[2]);
    list_end(out->changed, sizeof out->changed, cut[3]);
}

/* ---- loading ---------------------------------------------------------------------- */

/* A snapshot holding the defaults of the field tables, nothing else. */
static struct config *config_new(const char *name)
{
    struct config *c = xcalloc(1, sizeof *c);

    c->refcount = 1;
    c->path = xstrdup(name);
    cfg_set_defaults(cfg_top_fields, c);
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
    for (size_t i = 0; i < c->redis_ncluster; i++) {
        free_secret(c->redis_cluster[i]); /* seed URLs carry credentials */
        redis_url_free(&c->redis_seeds[i]);
    }
    free(c->redis_cluster);
    free(c->redis_seeds);
    redis_url_free(&c->redis_server);
}

static void config_free(struct config *c)
{
    if (c == NULL)
        return;
    free_redis_modes(c);
    cfg_free_listen_tls(c);
    free(c->path);
    free(c->listen);
    free(c->listen_group);
    free(c->redis_url);
    free(c->key_prefix);
    free(c->admin_listen);
    free(c->warning);
    free(c->grpc_listen);
    free(c->auth_token_file);
    free_secret(c->auth_token);
    client_trust_free(&c->trusted_proxies);
    for (size_t i = 0; i < c->npolicies; i++)
        policy_overrides_free(c->policies[i].overrides);
    free(c->policies);
    for (size_t i = 0; i < c->nzones; i++)
        tzif_free(c->zones[i]);
    free(c->zones);
    for (size_t i = 0; i < c->ndomains; i++)
        domain_free(&c->domains[i]);
    free(c->domains);
    free(c->envoy_config);
    free(c->state_file);
    free(c);
}

/* config_load_string, with the command line's settings (cli; NULL:
 * none). */
static struct config *load_string(const char *name, const char *yaml, size_t len,
                                  const struct config_cli *cli, char *err, size_t errlen)
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
    if (cfg_load_document(&ld, &parser, yaml, len) < 0) {
        yaml_parser_delete(&parser);
        return NULL;
    }
    c = config_new(name);
    ld.c = c;
    root = yaml_document_get_root_node(&ld.doc);
    if (cfg_parse_fields(&ld, root, "", cfg_top_fields, c) < 0 || cfg_apply_cli(&ld, c, cli) < 0 ||
        cfg_check_unix_fields(&ld, root, c) < 0 || cfg_check_admin_on_listen(&ld, root, c) < 0 ||
        cfg_check_redis_modes(&ld, root, c) < 0 || cfg_load_listen_tls(&ld, root, c) < 0) {
        config_free(c);
        c = NULL;
    } else {
        cfg_inherit_settings(c);
        /* Envoy's calendar units count in UTC (domains and rls.c). */
        if (c->envoy_calendar_units && cfg_zone(&ld, "", &c->utc, err, errlen) < 0)
            abort(); /* "" is built in: it cannot fail */
        /* Every per-policy setting is final, wherever it came from. */
        for (size_t i = 0; i < c->npolicies; i++)
            policy_overrides_inherit(&c->policies[i]);
        /* Last: the domains' policies are copies of final ones, or take
         * the top-level defaults. */
        if (cfg_load_all_domains(&ld, cli ? cli->envoy_dir : NULL,
                                 cli ? cli->envoy_merge_domains : -1) < 0) {
            config_free(c);
            c = NULL;
        } else if (cli) {
            c->envoy_shadow_mode |= cli->envoy_shadow_mode;
            c->envoy_quota_mode |= cli->envoy_quota_mode;
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
    struct config_cli cli = {.envoy_dir = envoy_dir, .envoy_merge_domains = -1};
    return config_load_cli(path, &cli, err, errlen);
}

struct config *config_load_cli(const char *path, const struct config_cli *cli, char *err,
                               size_t errlen)
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
        c = load_string(path, buf, len, cli, err, errlen);
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
                 f->type == F_SECTION || f->parse == cfg_parse_rate_limit ? "."
                 : f->parse == cfg_parse_policies                         ? ".NAME."
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
    walk_rows(cfg_top_fields, "", 1, foreach_row, &a);
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
    walk_rows(cfg_top_fields, "", 1, find_row, &a);
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
    return find_restart_field(cfg_top_fields, "", old, new, path, size);
}
