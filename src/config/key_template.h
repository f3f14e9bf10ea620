/* SPDX-License-Identifier: Apache-2.0 */
/*
 * key_template.h: a policy's `key:` template, which builds the caller's key
 * from a forward-auth request (auth.c): literal text plus `${ip}` (the
 * client address, client_ip.h) and `${header:Name}` (a request header);
 * `$$` is a literal `$`. Compiled once at config load into a fixed-size
 * struct embedded in struct policy (no pointers, so a policy may be copied
 * by value), rendered per request. No I/O, no HTTP types: the caller hands
 * over the values through a callback.
 */
#ifndef RATELIMITD_KEY_TEMPLATE_H
#define RATELIMITD_KEY_TEMPLATE_H

#include <stddef.h>

#include "lib/util.h"

#define KEY_TEMPLATE_MAX 256  /* bytes of a template as written */
#define KEY_TEMPLATE_PARTS 16 /* literal and variable parts */
#define KEY_TEMPLATE_DEFAULT "${ip}"
#define KEY_TEMPLATE_MISSING "-" /* a missing part under missing_key: shared */

enum key_part_kind { KEY_PART_LITERAL, KEY_PART_IP, KEY_PART_HEADER };

struct key_part {
    enum key_part_kind kind;
    unsigned short off, len; /* literal text or header name, in text */
};

struct key_template {
    size_t nparts;
    struct key_part parts[KEY_TEMPLATE_PARTS];
    /* literals ($$ undone) and header names, each NUL-terminated */
    char text[KEY_TEMPLATE_MAX + KEY_TEMPLATE_PARTS + 1];
    char source[KEY_TEMPLATE_MAX + 1]; /* as written, for messages and logs */
};

/*
 * Compiles src into *out. On error returns -1 with a message and the byte
 * offset in src where the fault is (*at), e.g. an unknown `${...}`, an
 * unclosed `${`, a lone `$`, an invalid header name, an empty template.
 */
int key_template_compile(const char *src, struct key_template *out, size_t *at, char *err,
                         size_t errlen) RL_WUR;

/* The value of one variable part for one request: the client address
 * (name NULL) or the first header called name; NULL or "" when absent. */
typedef const char *(*key_template_lookup_fn)(void *arg, const char *name);

enum key_render {
    KEY_RENDER_OK,
    KEY_RENDER_MISSING, /* a variable part was absent or empty */
    KEY_RENDER_TOO_LONG /* the key would exceed outlen - 1 bytes */
};

/*
 * Renders t for one request into out (NUL-terminated, *len bytes). A part
 * that is absent or empty makes the result KEY_RENDER_MISSING: with
 * fill_missing it is written as KEY_TEMPLATE_MISSING and rendering goes
 * on (the key is then complete), else out is left unfinished and *missing
 * points at the part that was absent (its header name, or "ip").
 */
enum key_render key_template_render(const struct key_template *t, key_template_lookup_fn lookup,
                                    void *arg, int fill_missing, char *out, size_t outlen,
                                    size_t *len, const char **missing);

#endif
