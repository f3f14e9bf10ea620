/* SPDX-License-Identifier: Apache-2.0 */
/*
 * call_resp.c: a script call as RESP (call_resp.h).
 */
#include "backend/redis/call_resp.h"

#include <string.h>

#include "lib/util.h"

void call_resp_bulk(struct buf *out, const char *s, size_t len)
{
    char *p = buf_reserve(out, len + UTIL_INT_CHARS + 5);
    size_t n = 0;
    p[n++] = '$';
    n += util_format_int(p + n, (long long)len);
    p[n++] = '\r';
    p[n++] = '\n';
    memcpy(p + n, s, len);
    n += len;
    p[n++] = '\r';
    p[n++] = '\n';
    out->len += n;
}

void call_resp_head(struct buf *out, const char *cmd, const char *name, size_t nargs)
{
    out->len = 0;
    buf_append_char(out, '*');
    buf_append_int(out, (long long)((name ? 2 : 1) + nargs));
    buf_append(out, "\r\n", 2);
    call_resp_bulk(out, cmd, strlen(cmd));
    if (name)
        call_resp_bulk(out, name, strlen(name));
}

void call_resp_call(struct buf *out, const char *cmd, const char *name,
                    const struct script_call *call)
{
    char nkeys[UTIL_INT_CHARS];
    call_resp_head(out, cmd, name, 1 + call->nargs);
    call_resp_bulk(out, nkeys, util_format_int(nkeys, (long long)call->nkeys));
    for (size_t i = 0; i < call->nargs; i++)
        call_resp_bulk(out, call->args[i], call->lens[i]);
}
