/*
 * watch.h: `watch: true`: reload the policy file when it, or a file of its
 * envoy_config directory, changes, with inotify on their directories, so
 * that an edit in place, a rename over it and the swap of a symlinked
 * directory (a Kubernetes ConfigMap's ..data) are all seen.
 */
#ifndef RATELIMITD_WATCH_H
#define RATELIMITD_WATCH_H

#include <stddef.h>

#include "lib/util.h"
#include "server.h"

struct watch;

/* Starts watching srv->config_path's directory. NULL with a message if
 * inotify cannot be set up. */
struct watch *watch_new(struct server *srv, char *err, size_t errlen) RL_WUR;

/* Watches the envoy_config directory of srv's current snapshot (and stops
 * watching the previous one): called at start and after every reload.
 * NULL is a no-op. */
void watch_follow(struct watch *w);

/* NULL is a no-op. */
void watch_free(struct watch *w);

#endif
