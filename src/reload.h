/* SPDX-License-Identifier: Apache-2.0 */
/*
 * reload.h: replacing the running policies with a new load of the policy
 * file (SIGHUP, or a change seen by watch.c).
 */
#ifndef RATELIMITD_RELOAD_H
#define RATELIMITD_RELOAD_H

#include "server.h"

/*
 * Loads srv->config_path again. A valid file replaces srv->config at once
 * (checks in flight keep the snapshot they started with, and counters of
 * unchanged tiers carry on: they live in Redis under the same keys). An
 * invalid file, or one that changes a field only a restart can apply, is
 * logged and the old policies stay. `trigger` ("SIGHUP", "watch") is logged.
 * Returns 0 if the new file is in force.
 */
int reload_config(struct server *srv, const char *trigger);

/* Logs each of c's warnings (config.h: one a line), at start and on
 * reload. */
void reload_log_warnings(struct server *srv, const struct config *c);

/* What a load in force (at start, after a reload) means beyond the
 * workers: the watch follows c's envoy_config directory and TLS files,
 * and a listener's certificate that is expired or not yet valid is
 * warned about (served all the same: see docs/configuration.md's TLS
 * section), on stderr too with to_stderr (-t). */
void reload_loaded(struct server *srv, const struct config *c, int to_stderr);

#endif
