/* SPDX-License-Identifier: Apache-2.0 */
/*
 * registry.h: every front the daemon has, in the order a worker makes them
 * (registry.c). Apart from front.h so that the fronts, which include
 * front.h, and the list that names them do not include each other.
 */
#ifndef RATELIMITD_REGISTRY_H
#define RATELIMITD_REGISTRY_H

#include "front/front.h"

/* Room for the rows of front_all in a worker's array (registry.c checks it). */
#define FRONT_MAX 4

/* Every front, in the order they are made; NULL-terminated. A worker's
 * fronts[i] is an instance of front_all[i] (NULL: not enabled). */
extern const struct front_ops *const front_all[];

#endif
