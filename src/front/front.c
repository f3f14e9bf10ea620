/*
 * front.c: the registry of fronts (front.h). One row per front; the worker
 * makes them in this order and frees them in the reverse one.
 */
#include "front/front.h"
#include "front/grpc/grpc.h"
#include "front/http/http.h"

const struct front_ops *const front_all[] = {&http_front, &grpc_front, NULL};

_Static_assert(sizeof front_all / sizeof front_all[0] <= FRONT_MAX + 1,
               "FRONT_MAX (front.h) must hold every row of front_all");
