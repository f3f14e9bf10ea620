/* SPDX-License-Identifier: Apache-2.0 */
/*
 * registry.c: the list of backends (registry.h), one row per backend, and
 * the process-wide state they share. Adding a backend is a file or folder
 * under src/backend/ and one row here; the worker and main.c name none.
 * Owns the choice of a backend from the config snapshot; does not own what
 * any backend does (its own files) nor the interface (core/backend.h).
 */
#include <stdio.h>
#include <stdlib.h>

#include "backend/backend_memory.h"
#include "backend/memory_state.h"
#include "backend/redis/backend_cluster.h"
#include "backend/redis/backend_redis.h"
#include "backend/redis/scripts.h"
#include "backend/registry.h"

/* One row per backend. */
struct backend_row {
    /* Whether cfg chooses this backend; exactly one row says yes to a
     * valid snapshot. */
    int (*chosen)(const struct config *cfg);
    /* Makes it from cfg (not kept); does not connect (ops->start does).
     * NULL with a message. */
    struct backend *(*new)(const struct backend_env *env, const struct config *cfg, char *err,
                           size_t errlen);
    /* The code it runs elsewhere, as --print-script prints it; NULL: none
     * (it decides in this process). */
    const char *script;
};

struct backend_shared {
    struct backend_memory_store *store;
    struct memory_state *state; /* NULL: no state_file */
    /* What the state file and a hand-over carry besides the counters. */
    struct memory_state_extra extra; /* save NULL: nothing */
};

struct backend_shared *backend_registry_shared_new(const struct config *cfg, uint64_t hash_seed,
                                                   const struct logger *log,
                                                   const struct memory_state_extra *extra,
                                                   char *err, size_t errlen)
{
    struct backend_shared *s = xcalloc(1, sizeof *s);
    s->store = backend_memory_store_new((size_t)cfg->local_max_keys, hash_seed);
    if (extra)
        s->extra = *extra;
    if (memory_state_start(s->store, cfg, log, extra, &s->state, err, errlen) < 0) {
        backend_registry_shared_free(s);
        return NULL;
    }
    return s;
}

void backend_registry_shared_stopped(struct backend_shared *s)
{
    memory_state_stop(s->state, 1);
    s->state = NULL;
}

int backend_registry_shared_dump(struct backend_shared *s, int fd, char *err, size_t errlen)
{
    struct buf extra = {0};
    if (s->extra.save)
        s->extra.save(s->extra.arg, &extra);
    int rc = backend_memory_store_dump(s->store, fd, &extra, err, errlen);
    buf_free(&extra);
    return rc;
}

int backend_registry_shared_load(struct backend_shared *s, int fd, size_t *loaded, char *err,
                                 size_t errlen)
{
    struct store_file_counts c = {0, 0, NULL, 0};
    struct buf image = {0};
    int rc = backend_memory_store_load(s->store, fd, &image, &c, err, errlen);
    *loaded = c.loaded;
    if (rc == 0 && c.extra_len && s->extra.load)
        s->extra.load(s->extra.arg, c.extra, c.extra_len);
    buf_free(&image);
    return rc;
}

int backend_registry_state_stats(struct backend_shared *s, struct memory_state_stats *out)
{
    if (!s->state)
        return 0;
    memory_state_stats(s->state, out);
    return 1;
}

void backend_registry_shared_free(struct backend_shared *s)
{
    if (!s)
        return;
    memory_state_stop(s->state, 0);
    backend_memory_store_free(s->store);
    free(s);
}

static int memory_chosen(const struct config *cfg)
{
    return cfg->backend == BACKEND_KIND_MEMORY;
}

static struct backend *memory_new(const struct backend_env *env, const struct config *cfg,
                                  char *err, size_t errlen)
{
    (void)cfg, (void)err, (void)errlen;
    return backend_memory_new(env->shared->store);
}

/* One server: a plain redis.url, or the master redis.sentinel names. */
static int redis_chosen(const struct config *cfg)
{
    return cfg->backend == BACKEND_KIND_REDIS && cfg->redis_ncluster == 0;
}

static struct backend *redis_new(const struct backend_env *env, const struct config *cfg, char *err,
                                 size_t errlen)
{
    return backend_redis_new(env->base, cfg, env->log, env->metrics, err, errlen);
}

static int cluster_chosen(const struct config *cfg)
{
    return cfg->backend == BACKEND_KIND_REDIS && cfg->redis_ncluster > 0;
}

static struct backend *cluster_new(const struct backend_env *env, const struct config *cfg,
                                   char *err, size_t errlen)
{
    return backend_cluster_new(env->base, cfg, env->log, env->metrics, err, errlen);
}

static const struct backend_row memory_row = {memory_chosen, memory_new, NULL};
static const struct backend_row redis_row = {redis_chosen, redis_new, scripts_lua_source};
static const struct backend_row cluster_row = {cluster_chosen, cluster_new, scripts_lua_source};

/* One row per backend; NULL-terminated. */
static const struct backend_row *const backend_all[] = {&memory_row, &redis_row, &cluster_row,
                                                        NULL};

struct backend *backend_registry_new(const struct backend_env *env, const struct config *cfg,
                                     char *err, size_t errlen)
{
    for (size_t i = 0; backend_all[i]; i++)
        if (backend_all[i]->chosen(cfg))
            return backend_all[i]->new (env, cfg, err, errlen);
    /* The loader accepts no snapshot that no row takes. */
    snprintf(err, errlen, "no backend takes this configuration");
    return NULL;
}

struct backend *backend_registry_fallback_new(const struct backend_env *env)
{
    return memory_new(env, NULL, NULL, 0);
}

const char *backend_registry_script(void)
{
    for (size_t i = 0; backend_all[i]; i++)
        if (backend_all[i]->script)
            return backend_all[i]->script;
    return "";
}
