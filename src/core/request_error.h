/* SPDX-License-Identifier: Apache-2.0 */
/*
 * request_error.h: every error code the daemon answers with, and why a
 * request was refused in a form every front can answer with (a code of the
 * table, whose HTTP status it implies, and a message) that needs no JSON
 * library: the decoders (check_json.c, rls_json.c), auth.c, admin.c and
 * rls.c's checks of an Envoy request all report through it, and the HTTP
 * front writes its own refusals (routing, framing, overload) by code too.
 *
 * Owns the table of codes (name and HTTP status), the type and its one
 * filler. Does not own how a front writes it out (response.c: a JSON error
 * body; grpc_call.c: INVALID_ARGUMENT and the message, as gRPC has no such
 * codes), nor the headers some codes go with (Allow, Retry-After: the
 * caller's).
 */
#ifndef RATELIMITD_REQUEST_ERROR_H
#define RATELIMITD_REQUEST_ERROR_H

#include "lib/util.h"

/* The codes, as a client reads them in a body's "error"; their names and
 * statuses are in request_error.c's table, which ratelimitd(8),
 * docs/openapi.yaml's ErrorCode and docs/http-api.md are tested against
 * (tests/unit/test_docs.c). */
enum request_code {
    RC_INVALID_JSON,
    RC_INVALID_REQUEST,
    RC_MISSING_FIELD,
    RC_INVALID_TYPE,
    RC_UNKNOWN_FIELD,
    RC_UNKNOWN_POLICY,         /* named in a body: 400 */
    RC_UNKNOWN_POLICY_IN_PATH, /* the same code, named by a path: 404 */
    RC_INVALID_KEY,
    RC_INVALID_COST,
    RC_REFUND_NOT_SUPPORTED,
    RC_REPORT_NOT_SUPPORTED,
    RC_INVALID_LIMIT,
    RC_INVALID_PATH,
    RC_INVALID_FORMAT,
    RC_INVALID_QUERY,
    RC_INVALID_LEASES,
    RC_NO_RELEASE_PATH,
    RC_MISSING_KEY,
    RC_BAD_REQUEST,
    RC_UNAUTHORIZED,
    RC_NOT_FOUND,
    RC_METHOD_NOT_ALLOWED,
    RC_REQUEST_TIMEOUT,
    RC_BODY_TOO_LARGE,
    RC_HEADERS_TOO_LARGE,
    RC_NOT_IMPLEMENTED,
    RC_HTTP_VERSION_NOT_SUPPORTED,
    RC_BACKEND_UNAVAILABLE,
    RC_OVERLOADED,
    RC_TOO_MANY_CONNECTIONS,
    RC_INVALID_BODY,
    RC_UNKNOWN_TIER,
    RC_INVALID_TTL,
    RC_OVERRIDE_NOT_FOUND,
    RC_COUNT /* not a code: the table's size */
};

/* The code as written in a body ("invalid_json"), a static string. */
const char *request_code_name(enum request_code code);

/* The HTTP status a refusal with this code is answered with (400). */
int request_code_status(enum request_code code);

/* Calls fn for every row of the table, in order: what the docs test walks. */
void request_codes_foreach(void (*fn)(enum request_code code, const char *name, int status,
                                      void *arg),
                           void *arg);

struct request_error {
    enum request_code code;
    char message[RL_ERRLEN];
};

/* Fills err with code and a printf-style message; returns -1. */
int request_fail(struct request_error *err, enum request_code code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
