/* SPDX-License-Identifier: Apache-2.0 */
/*
 * registry.c: the list of fronts (registry.h). One row per front; the
 * worker makes them in this order and frees them in the reverse one.
 * Adding a front is a folder under src/front/ and one row here.
 */
#include "front/registry.h"
#include "front/grpc/grpc.h"
#include "front/http/http.h"

const struct front_ops *const front_all[] = {&http_front, &grpc_front, NULL};

_Static_assert(sizeof front_all / sizeof front_all[0] <= FRONT_MAX + 1,
               "FRONT_MAX (registry.h) must hold every row of front_all");
