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

/* Puts the command line's switches over a fresh load c (before it is
 * published, at start and on every reload): --envoy-shadow-mode and
 * --envoy-quota-mode turn their field on whatever the file says, so they
 * last across reloads. */
void server_apply_cli(const struct server *srv, struct config *c);

#endif
