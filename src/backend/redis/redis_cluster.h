/* SPDX-License-Identifier: Apache-2.0 */
/*
 * redis_cluster.h: what the cluster backend (backend_cluster.c) knows of
 * Redis Cluster's layout, without I/O: the slot of a key (CRC16 of its
 * hash tag, as Redis computes it) and the slot map, read from a CLUSTER
 * SLOTS reply: which master serves each of the 16384 slots.
 */
#ifndef RATELIMITD_REDIS_CLUSTER_H
#define RATELIMITD_REDIS_CLUSTER_H

#include <stddef.h>
#include <stdint.h>

#include <hiredis/hiredis.h>

#include "lib/util.h"

#define REDIS_CLUSTER_SLOTS 16384

/* The slot of key: CRC16 (XMODEM) of the part between the first '{' and
 * the next '}' when that part is not empty, else of the whole key, mod
 * 16384. */
unsigned redis_cluster_keyslot(const char *key, size_t len);

/* A master, as CLUSTER SLOTS names it. */
struct redis_cluster_master {
    char *host;
    int port;
};

/* Which master serves each slot. */
struct redis_cluster_map {
    size_t nmasters;
    struct redis_cluster_master *masters;
    int16_t slot_master[REDIS_CLUSTER_SLOTS]; /* index into masters; -1: unserved */
};

/* Fills *out from a CLUSTER SLOTS reply (free with redis_cluster_map_free);
 * an empty host ("" or "?") stands for the host the reply came from
 * (from_host). -1 with a message if the reply has another shape. */
int redis_cluster_map_parse(const redisReply *r, const char *from_host,
                            struct redis_cluster_map *out, char *err, size_t errlen) RL_WUR;

/* Slots with no master. */
size_t redis_cluster_map_unserved(const struct redis_cluster_map *m);

void redis_cluster_map_free(struct redis_cluster_map *m);

/* A MOVED or ASK error ("MOVED 3999 127.0.0.1:6381"): its slot, host and
 * port into the caller's buffer (host "" means the node that answered, as
 * Redis 7 says when it does not know the address). Returns 1 for MOVED, 2
 * for ASK, 0 for any other reply. */
int redis_cluster_redirect(const char *err, unsigned *slot, char *host, size_t hostlen, int *port);

#endif
