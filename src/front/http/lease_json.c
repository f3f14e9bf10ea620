/* SPDX-License-Identifier: Apache-2.0 */
/*
 * lease_json.c: the bodies of POST /release and POST /renew (lease_json.h),
 * with jansson for the request and json_out for the answer.
 */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "front/http/check_json.h"
#include "front/http/lease_json.h"
#include "front/http/response.h"
#include "lib/json_out.h"

int lease_json_parse(const char *body, size_t len, char ***ids, size_t *n,
                     struct request_error *err)
{
    static const char *const fields[] = {"leases", NULL};
    json_t *root = check_json_load(body, len, err);
    *ids = NULL;
    *n = 0;
    if (!root)
        return -1;
    json_t *leases = json_is_object(root) ? json_object_get(root, "leases") : NULL;
    int rc = -1;
    if (!json_is_object(root))
        request_fail(err, RC_INVALID_REQUEST, "the body must be an object");
    else if (check_json_only_fields(root, fields, "the body", err) < 0)
        ;
    else if (!leases)
        request_fail(err, RC_MISSING_FIELD, "missing field \"leases\"");
    else if (!json_is_array(leases) || json_array_size(leases) == 0 ||
             json_array_size(leases) > LEASE_MAX_IDS)
        request_fail(err, RC_INVALID_LEASES, "leases must be an array of 1 to %d lease ids",
                     LEASE_MAX_IDS);
    else
        rc = 0;
    for (size_t i = 0; rc == 0 && i < json_array_size(leases); i++) {
        json_t *v = json_array_get(leases, i);
        if (!json_is_string(v) || json_string_length(v) == 0 ||
            json_string_length(v) > LEASE_ID_MAX ||
            strlen(json_string_value(v)) != json_string_length(v))
            rc = request_fail(err, RC_INVALID_LEASES, "leases[%zu] must be a lease id (a string)",
                              i);
    }
    if (rc == 0) {
        *n = json_array_size(leases);
        *ids = xcalloc(*n, sizeof **ids);
        for (size_t i = 0; i < *n; i++)
            (*ids)[i] = xstrdup(json_string_value(json_array_get(leases, i)));
    }
    json_decref(root);
    return rc;
}

static const char *status_name(const struct lease_result *res, enum lease_status st)
{
    switch (st) {
    case LEASE_DONE:
        return res->renew ? "renewed" : "released";
    case LEASE_EXPIRED:
        return "expired";
    case LEASE_UNKNOWN:
        break;
    }
    return "unknown";
}

int lease_json_render(struct buf *out, const struct lease_result *res, unsigned flags)
{
    if (!res->ok) {
        response_error(out, RC_BACKEND_UNAVAILABLE, res->why, "Retry-After", "1", flags);
        return 503;
    }
    struct buf body = {0};
    struct json_out j = json_out_start(&body);
    json_out_begin(&j, '{');
    if (res->renew) {
        json_out_lkey(&j, "renewed");
        json_out_int(&j, (long long)res->renewed);
        json_out_lkey(&j, "expired");
        json_out_int(&j, (long long)res->expired);
        json_out_lkey(&j, "unknown");
        json_out_int(&j, (long long)res->unknown);
    } else {
        json_out_lkey(&j, "released");
        json_out_int(&j, (long long)res->released);
        json_out_lkey(&j, "unknown");
        json_out_int(&j, (long long)(res->unknown + res->expired));
        json_out_lkey(&j, "expired");
        json_out_int(&j, (long long)res->expired);
    }
    json_out_lkey(&j, "leases");
    json_out_begin(&j, '[');
    for (size_t i = 0; i < res->n; i++) {
        json_out_begin(&j, '{');
        json_out_lkey(&j, "id");
        json_out_cstr(&j, res->ids[i]);
        json_out_lkey(&j, "status");
        json_out_cstr(&j, status_name(res, res->outcomes[i].status));
        if (res->renew && res->outcomes[i].status == LEASE_DONE) {
            json_out_lkey(&j, "expires_ms");
            json_out_int(&j, res->outcomes[i].expires_us / 1000);
        }
        json_out_end(&j, '}');
    }
    json_out_end(&j, ']');
    json_out_end(&j, '}');
    response_body(out, 200, NULL, body.data, body.len, flags);
    buf_free(&body);
    return 200;
}
