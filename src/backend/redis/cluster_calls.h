/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cluster_calls.h: the Redis Cluster backend's calls (cluster_calls.c):
 * its decide and lease operations (backend.h's contracts), and failing
 * what waits when the backend is freed. Not for use outside backend/redis/.
 */
#ifndef RATELIMITD_CLUSTER_CALLS_H
#define RATELIMITD_CLUSTER_CALLS_H

#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"

struct backend_cluster;
struct config;

/* backend_ops.decide: the request's checks grouped by slot, one or two
 * phases. -1 (done never called) without a map or when a slot's master is
 * not ready. */
int cluster_calls_decide(struct backend *iface, const struct config *cfg,
                         const struct check_request *req, int64_t now_us, backend_done_fn done,
                         void *arg) RL_WUR;

/* backend_ops.lease: the leases grouped by the slot of their key, one call
 * per slot. -1 as cluster_calls_decide. */
int cluster_calls_lease(struct backend *iface, const struct config *cfg, int renew,
                        const struct lease_ref *refs, size_t n, backend_lease_done_fn done,
                        void *arg) RL_WUR;

/* At free, once every node is freed (which completed the calls in flight):
 * the calls waiting on a retry timer complete, unavailable. */
void cluster_calls_shutdown(struct backend_cluster *b);

#endif
