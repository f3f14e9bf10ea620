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
 * value gets a comma first. The caller keeps the shape right (keys only
 * inside objects, one value after each key).
 */
#ifndef RATELIMITD_JSON_OUT_H
#define RATELIMITD_JSON_OUT_H

#include <stddef.h>
#include <stdint.h>

#include "buf.h"

/* Opens an object ('{') or an array ('['); json_end closes it ('}' or ']'). */
void json_out_begin(struct buf *b, char open);
void json_out_end(struct buf *b, char close);

/* "key": (key is trusted text: a literal of the caller's). */
void json_out_key(struct buf *b, const char *key);

/* A string of len bytes (may contain NUL: written as \u0000), cleaned. */
void json_out_str(struct buf *b, const char *s, size_t len);

/* A NUL-terminated string, cleaned. */
void json_out_cstr(struct buf *b, const char *s);

void json_out_int(struct buf *b, int64_t v);

void json_out_bool(struct buf *b, int v);

void json_out_null(struct buf *b);

#endif
