/* SPDX-License-Identifier: Apache-2.0 */
/*
 * request_error.h: why a request was refused, in a form every front can
 * answer with (an HTTP status, a stable code, a message) and that needs no
 * JSON library: the decoders (check_json.c, rls_json.c), auth.c, admin.c
 * and rls.c's checks of an Envoy request all report through it.
 *
 * Owns the type and its one filler. Does not own how a front writes it out
 * (response.c: a JSON error body; grpc.c: a status and message).
 */
#ifndef RATELIMITD_REQUEST_ERROR_H
#define RATELIMITD_REQUEST_ERROR_H

#include "lib/util.h"

struct request_error {
    int status;       /* HTTP status: 400 */
    const char *code; /* static string, e.g. "invalid_json" */
    char message[RL_ERRLEN];
};

/* Fills err as a 400 with code (a static string) and a printf-style
 * message; returns -1. Every JSON body decoder (/check, /json, rls.c's
 * checks) reports through it. */
int request_fail(struct request_error *err, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
