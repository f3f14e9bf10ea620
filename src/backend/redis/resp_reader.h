/* SPDX-License-Identifier: Apache-2.0 */
/*
 * resp_reader.h: the parser of Redis's replies (RESP2) that redis_conn.c
 * uses in place of hiredis's reader. It builds the same redisReply tree as
 * hiredis (types STRING, ARRAY, INTEGER, NIL, STATUS, ERROR; strings
 * NUL-terminated), but every node of a reply in one arena that the caller
 * empties once the reply is handled, and it parses straight from the
 * caller's bytes, which it never keeps: a batch's reply (an array of arrays
 * of integers) cost the daemon a malloc, a free and a fair share of
 * hiredis's generic reader per integer (bench/instructions.py).
 *
 * Owns the arena and the message of the last protocol error; not the
 * bytes (the caller's input buffer), not the socket.
 */
#ifndef RATELIMITD_RESP_READER_H
#define RATELIMITD_RESP_READER_H

#include <stddef.h>
#include <sys/types.h>

#include <hiredis/hiredis.h>

struct resp_block;

struct resp_reader {
    struct resp_block *first; /* kept for the reader's life; NULL until used */
    struct resp_block *extra; /* overflow (a large reply), freed by reset */
    char errstr[128];         /* the last protocol error */
};

/* Nesting deeper than this is a protocol error (hiredis allows 7). */
#define RESP_MAX_DEPTH 7

/*
 * Parses the reply at the start of data (len bytes). Returns the bytes it
 * takes (> 0) with *out pointing at the reply; 0 when data holds only part
 * of it (nothing is kept: call again with more, from the same start); -1
 * on a protocol error, described in r->errstr. A reply lives until the
 * next parse or resp_reader_reset (the next parse frees it).
 */
ssize_t resp_reader_parse(struct resp_reader *r, const char *data, size_t len, redisReply **out);

/* Frees every reply parsed so far (the first block stays, for reuse). */
void resp_reader_reset(struct resp_reader *r);

/* Frees everything; the reader is then empty and may be reused. */
void resp_reader_free(struct resp_reader *r);

#endif
