/*
 * check.h: the life of one POST /check: decode, build the script call, send
 * it, arm the deadline, answer exactly once, free exactly once.
 */
#ifndef RATELIMITD_CHECK_H
#define RATELIMITD_CHECK_H

#include <stddef.h>

#include "server.h"

struct evhttp_request;

/* Takes over answering req (the body is read from it). The check holds a
 * reference to the current config snapshot until it is freed. */
void check_start(struct server *srv, struct evhttp_request *req);

#endif
