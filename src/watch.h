/* SPDX-License-Identifier: Apache-2.0 */
/*
 * watch.h: `watch: true`: reload the policy file when it, or a file of its
 * envoy_config directory, or a listener's certificate, key or client CA,
 * changes, with inotify on their directories, so
 * that an edit in place, a rename over it and the swap of a symlinked
 * directory (a Kubernetes ConfigMap's ..data) are all seen.
 */
#ifndef RATELIMITD_WATCH_H
#define RATELIMITD_WATCH_H

#include <stddef.h>

#include "lib/log.h"
#include "lib/util.h"

struct event_base;
struct watch;

/* What a watch needs from its owner. */
struct watch_target {
    struct event_base *base;    /* the loop whose thread calls changed */
    const char *config_path;    /* the policy file (copied) */
    const char *envoy_dir;      /* its envoy_config directory; NULL: none */
    struct logger *log;         /* outlives the watch */
    void (*changed)(void *arg); /* the content changed: reload */
    void *arg;
};

/* Starts watching the policy file's directory and the envoy directory.
 * NULL with a message if inotify cannot be set up. */
struct watch *watch_new(const struct watch_target *t, char *err, size_t errlen) RL_WUR;

/* Watches envoy_dir (NULL: none) instead of the previous envoy_config
 * directory: called after every reload, since it may name another. NULL
 * is a no-op. */
void watch_follow(struct watch *w, const char *envoy_dir);

/* At most this many other files. */
#define WATCH_MAX_FILES 9

/* Watches these files too (their directories), instead of the previous
 * list: the listeners' certificates, keys and client CAs, which a load
 * reads and a rotation replaces (at most WATCH_MAX_FILES; copied). Called
 * after every load. NULL is a no-op. */
void watch_follow_files(struct watch *w, const char *const *files, size_t n);

/* NULL is a no-op. */
void watch_free(struct watch *w);

#endif
