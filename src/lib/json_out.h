/* SPDX-License-Identifier: Apache-2.0 */
/*
 * json_out.h: writes JSON of a fixed shape straight into a struct buf, for
 * the answers on the hot path (no tree, no allocation beyond the buffer's).
 *
 * The output is what jansson's json_dumps(JSON_COMPACT) writes for the same
 * values: no spaces, '"', '\\' and control characters escaped (\b \f \n \r
 * \t, else \u00XX in upper case), everything else as is. Strings are cleaned
 * on the way: a byte that does not start a valid UTF-8 sequence (overlong
 * forms, surrogates and code points past U+10FFFF included) becomes '?', so
 * the output is always valid JSON whatever the input bytes.
 *
 * Separators are implicit: a key or a value written right after a complete
 * value of the same object or array gets a comma first. The caller keeps the
 * shape right (keys only inside objects, one value after each key).
 */
#ifndef RATELIMITD_JSON_OUT_H
#define RATELIMITD_JSON_OUT_H

#include <stddef.h>
#include <stdint.h>

#include "lib/buf.h"

/* One document being written at the end of a buffer. */
struct json_out {
    struct buf *b;
    int comma; /* the next key or value follows a complete value */
};

/* Starts a document at the end of b (whatever b holds already stays). */
struct json_out json_out_start(struct buf *b);

/* Opens an object ('{') or an array ('['); json_end closes it ('}' or ']'). */
void json_out_begin(struct json_out *j, char open);
void json_out_end(struct json_out *j, char close);

/* "key": (key is trusted text: a literal of the caller's). */
void json_out_key(struct json_out *j, const char *key);

/* The same for a string literal of plain ASCII (nothing to escape), quoted
 * at compile time and written with one copy: the answers' keys, a sixth of
 * the instructions of a check's answer when escaped one by one. */
#define json_out_lkey(j, lit) json_out_raw_key((j), "\"" lit "\":", sizeof(lit) + 2)

/* Writes quoted (len bytes: "key": as it must appear) where a key goes.
 * Inline so that a literal's length reaches buf_append as a constant. */
static inline void json_out_raw_key(struct json_out *j, const char *quoted, size_t len)
{
    if (j->comma)
        buf_append_char(j->b, ',');
    j->comma = 0;
    buf_append(j->b, quoted, len);
}

/* 1 if s (len bytes) is valid UTF-8 as json_out_str writes it unchanged
 * (no byte cleaned to '?'), else 0: what must survive a JSON round trip
 * byte for byte (a run-time override's key) is checked with it. */
int json_out_utf8_valid(const char *s, size_t len);

/* A string of len bytes (may contain NUL: written as \u0000), cleaned. */
void json_out_str(struct json_out *j, const char *s, size_t len);

/* A NUL-terminated string, cleaned. */
void json_out_cstr(struct json_out *j, const char *s);

void json_out_int(struct json_out *j, int64_t v);

/* v / 1000 with three decimals (1234 -> 1.234): a latency in ms from µs. */
void json_out_thousandths(struct json_out *j, int64_t v);

void json_out_bool(struct json_out *j, int v);

void json_out_null(struct json_out *j);

#endif
