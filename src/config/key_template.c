/* SPDX-License-Identifier: Apache-2.0 */
/*
 * key_template.c: compiling and rendering `key:` templates (key_template.h).
 *
 * Owns the template syntax; not where the values come from (auth.c, and
 * client_ip.c for the address) nor what a valid key is (request rules in
 * auth.c, POLICY_KEY_MAX in policy.h).
 */
#include <stdio.h>
#include <string.h>

#include "config/key_template.h"

/* RFC 9110's token characters: the only ones a header name may hold. */
static int token_char(char ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
           (ch != '\0' && strchr("!#$%&'*+-.^_`|~", ch) != NULL);
}

/* Appends a part whose text (may be empty for ${ip}) goes into t->text. */
static int add_part(struct key_template *t, size_t *used, enum key_part_kind kind, const char *s,
                    size_t n, char *err, size_t errlen)
{
    if (t->nparts == KEY_TEMPLATE_PARTS) {
        snprintf(err, errlen, "more than %d parts", KEY_TEMPLATE_PARTS);
        return -1;
    }
    /* Each part's text ends with a NUL (a header name is looked up as a C
     * string): at most the source's length plus one byte per part. */
    memcpy(t->text + *used, s, n);
    t->parts[t->nparts++] =
        (struct key_part){.kind = kind, .off = (unsigned short)*used, .len = (unsigned short)n};
    *used += n;
    t->text[(*used)++] = '\0';
    return 0;
}

/* The variable starting at src[i] == '$', src[i + 1] == '{'. Returns the
 * offset past its '}', or 0 after writing an error (*at set). */
static size_t compile_var(const char *src, size_t i, struct key_template *t, size_t *used,
                          size_t *at, char *err, size_t errlen)
{
    const char *name = src + i + 2;
    const char *close = strchr(name, '}');
    *at = i;
    if (!close) {
        snprintf(err, errlen, "unclosed \"${\" at byte %zu", i + 1);
        return 0;
    }
    size_t n = (size_t)(close - name);
    if (n == 2 && memcmp(name, "ip", 2) == 0) {
        if (add_part(t, used, KEY_PART_IP, "", 0, err, errlen) < 0)
            return 0;
        return (size_t)(close - src) + 1;
    }
    if (n > 7 && memcmp(name, "header:", 7) == 0) {
        for (size_t k = 7; k < n; k++) {
            if (!token_char(name[k])) {
                *at = i + 2 + k;
                snprintf(err, errlen, "invalid character in header name at byte %zu", i + 3 + k);
                return 0;
            }
        }
        if (add_part(t, used, KEY_PART_HEADER, name + 7, n - 7, err, errlen) < 0)
            return 0;
        return (size_t)(close - src) + 1;
    }
    snprintf(err, errlen, "unknown variable \"${%.*s}\" at byte %zu (known: ${ip}, ${header:Name})",
             (int)(n > 32 ? 32 : n), name, i + 1);
    return 0;
}

int key_template_compile(const char *src, struct key_template *out, size_t *at, char *err,
                         size_t errlen)
{
    size_t len = strlen(src), used = 0, i = 0;
    memset(out, 0, sizeof *out);
    *at = 0;
    if (len == 0) {
        snprintf(err, errlen, "the key template is empty");
        return -1;
    }
    if (len > KEY_TEMPLATE_MAX) {
        snprintf(err, errlen, "the key template is longer than %d bytes", KEY_TEMPLATE_MAX);
        return -1;
    }
    memcpy(out->source, src, len + 1);
    while (i < len) {
        if (src[i] == '$' && src[i + 1] == '{') {
            size_t next = compile_var(src, i, out, &used, at, err, errlen);
            if (next == 0)
                return -1;
            i = next;
            continue;
        }
        if (src[i] == '$' && src[i + 1] != '$') {
            *at = i;
            snprintf(err, errlen, "a lone \"$\" at byte %zu: write $$ for a literal $", i + 1);
            return -1;
        }
        /* A literal run, up to the next '$' that is not "$$". */
        char lit[KEY_TEMPLATE_MAX + 1];
        size_t n = 0;
        *at = i;
        while (i < len && !(src[i] == '$' && src[i + 1] != '$')) {
            lit[n++] = src[i];
            i += src[i] == '$' ? 2 : 1;
        }
        if (add_part(out, &used, KEY_PART_LITERAL, lit, n, err, errlen) < 0)
            return -1;
    }
    return 0;
}

/* Appends n bytes to out at *len; 0 when they do not fit (NUL included). */
static int put(char *out, size_t outlen, size_t *len, const char *s, size_t n)
{
    if (n >= outlen - *len)
        return 0;
    memcpy(out + *len, s, n);
    *len += n;
    out[*len] = '\0';
    return 1;
}

enum key_render key_template_render(const struct key_template *t, key_template_lookup_fn lookup,
                                    void *arg, int fill_missing, char *out, size_t outlen,
                                    size_t *len, const char **missing)
{
    enum key_render rc = KEY_RENDER_OK;
    *len = 0;
    out[0] = '\0';
    *missing = NULL;
    for (size_t i = 0; i < t->nparts; i++) {
        const struct key_part *p = &t->parts[i];
        const char *name = t->text + p->off, *v;
        if (p->kind == KEY_PART_LITERAL) {
            if (!put(out, outlen, len, name, p->len))
                return KEY_RENDER_TOO_LONG;
            continue;
        }
        v = lookup(arg, p->kind == KEY_PART_IP ? NULL : name);
        if (!v || !*v) {
            if (!*missing)
                *missing = p->kind == KEY_PART_IP ? "ip" : name;
            rc = KEY_RENDER_MISSING;
            if (!fill_missing)
                return rc;
            v = KEY_TEMPLATE_MISSING;
        }
        if (!put(out, outlen, len, v, strlen(v)))
            return KEY_RENDER_TOO_LONG;
    }
    return rc;
}
