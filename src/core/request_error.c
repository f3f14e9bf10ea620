/* SPDX-License-Identifier: Apache-2.0 */
/*
 * request_error.c: the table of error codes and request_fail
 * (request_error.h). Owns nothing else.
 */
#include <stdarg.h>
#include <stdio.h>

#include "core/request_error.h"

static const struct {
    const char *name;
    int status;
} codes[] = {
    [RC_INVALID_JSON] = {"invalid_json", 400},
    [RC_INVALID_REQUEST] = {"invalid_request", 400},
    [RC_MISSING_FIELD] = {"missing_field", 400},
    [RC_INVALID_TYPE] = {"invalid_type", 400},
    [RC_UNKNOWN_FIELD] = {"unknown_field", 400},
    [RC_UNKNOWN_POLICY] = {"unknown_policy", 400},
    /* A path names a resource: a policy that is not there is not found. */
    [RC_UNKNOWN_POLICY_IN_PATH] = {"unknown_policy", 404},
    [RC_INVALID_KEY] = {"invalid_key", 400},
    [RC_INVALID_COST] = {"invalid_cost", 400},
    [RC_REFUND_NOT_SUPPORTED] = {"refund_not_supported", 400},
    [RC_REPORT_NOT_SUPPORTED] = {"report_not_supported", 400},
    [RC_INVALID_LIMIT] = {"invalid_limit", 400},
    [RC_INVALID_PATH] = {"invalid_path", 400},
    [RC_INVALID_FORMAT] = {"invalid_format", 400},
    [RC_INVALID_QUERY] = {"invalid_query", 400},
    [RC_INVALID_LEASES] = {"invalid_leases", 400},
    [RC_NO_RELEASE_PATH] = {"no_release_path", 400},
    [RC_MISSING_KEY] = {"missing_key", 400},
    [RC_BAD_REQUEST] = {"bad_request", 400},
    [RC_UNAUTHORIZED] = {"unauthorized", 401},
    [RC_NOT_FOUND] = {"not_found", 404},
    [RC_METHOD_NOT_ALLOWED] = {"method_not_allowed", 405},
    [RC_REQUEST_TIMEOUT] = {"request_timeout", 408},
    [RC_BODY_TOO_LARGE] = {"body_too_large", 413},
    [RC_HEADERS_TOO_LARGE] = {"headers_too_large", 431},
    [RC_NOT_IMPLEMENTED] = {"not_implemented", 501},
    [RC_HTTP_VERSION_NOT_SUPPORTED] = {"http_version_not_supported", 505},
    [RC_BACKEND_UNAVAILABLE] = {"backend_unavailable", 503},
    [RC_OVERLOADED] = {"overloaded", 503},
    [RC_TOO_MANY_CONNECTIONS] = {"too_many_connections", 503},
    [RC_INVALID_BODY] = {"invalid_body", 400},
    [RC_UNKNOWN_TIER] = {"unknown_tier", 400},
    [RC_INVALID_TTL] = {"invalid_ttl", 400},
    [RC_OVERRIDE_NOT_FOUND] = {"override_not_found", 404},
};

/* A code added to the enum without a row fails the build here (a row left
 * empty in the middle is caught by test_docs.c, which finds no name). */
_Static_assert(sizeof codes / sizeof codes[0] == RC_COUNT, "a request_code without a row");

const char *request_code_name(enum request_code code)
{
    return codes[code].name;
}

int request_code_status(enum request_code code)
{
    return codes[code].status;
}

void request_codes_foreach(void (*fn)(enum request_code code, const char *name, int status,
                                      void *arg),
                           void *arg)
{
    for (size_t i = 0; i < RC_COUNT; i++)
        fn((enum request_code)i, codes[i].name, codes[i].status, arg);
}

int request_fail(struct request_error *err, enum request_code code, const char *fmt, ...)
{
    va_list ap;
    err->code = code;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof err->message, fmt, ap);
    va_end(ap);
    return -1;
}
