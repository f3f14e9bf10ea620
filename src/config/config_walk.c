/* SPDX-License-Identifier: Apache-2.0 */
/*
 * config_walk.c: libyaml and the generic walker of the policy file. Loads
 * the file whole with libyaml's document API (so every node keeps its line
 * and column), walks a mapping against a field table (config_internal.h's
 * struct field): each row names a field, its type, whether it is required
 * and where in the target struct it is stored. Unknown fields, duplicate
 * fields, wrong node types, nulls and invalid values are all errors
 * reported as "<file>:<line>:<column>: <path>: <message>", pointing at the
 * offending node (at the mapping, for a missing field).
 *
 * Owns the messages, the node helpers, parse_value/cfg_parse_fields and the
 * document's loading (one document, syntax errors with their position).
 * Does not own any table (config_fields.c and its siblings), what a value
 * means beyond its type (their checkers and custom parsers), nor the
 * snapshot (config.c).
 */
#include "config/config_internal.h"
#include "config/policy.h"
#include "lib/buf.h"
#include "lib/util.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

/* ---- messages ---------------------------------------------------------- */

/* The message of fmt and ap, built to its length (the caller frees it):
 * only the caller's error buffer bounds what is reported. */
static char *format_message(const char *fmt, va_list ap) __attribute__((format(printf, 1, 0)));
static char *format_message(const char *fmt, va_list ap)
{
    va_list again;
    int n;
    char *msg;

    va_copy(again, ap);
    n = vsnprintf(NULL, 0, fmt, again);
    va_end(again);
    msg = xmalloc(n < 0 ? 1 : (size_t)n + 1);
    if (n < 0)
        msg[0] = '\0'; /* only a bad format: the position still says where */
    else
        vsnprintf(msg, (size_t)n + 1, fmt, ap);
    return msg;
}

/* "<file>:<line>:<col>: <path>: <message>" into ld->err. */
static void report(struct loader *ld, size_t line, size_t col, const char *path, const char *fmt,
                   va_list ap) __attribute__((format(printf, 5, 0)));
static void report(struct loader *ld, size_t line, size_t col, const char *path, const char *fmt,
                   va_list ap)
{
    char *msg = format_message(fmt, ap);

    snprintf(ld->err, ld->errlen, "%s:%zu:%zu: %s%s%s", ld->name, line, col, path,
             *path ? ": " : "", msg);
    free(msg);
}

/* Reports an error at node and returns -1. path is the dotted path to the
 * node ("" for the top), fmt the message. */
__attribute__((format(printf, 4, 5))) int cfg_fail(struct loader *ld, const yaml_node_t *node,
                                                   const char *path, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    report(ld, node->start_mark.line + 1, node->start_mark.column + 1, path, fmt, ap);
    va_end(ap);
    return -1;
}

/* Like fail, but at byte `at` of a scalar's value when the scalar sits on
 * one line with no escapes (its width in the file is its length, plus two
 * quotes), where the column is exact; else at the node. */
__attribute__((format(printf, 5, 6))) int cfg_fail_in(struct loader *ld, const yaml_node_t *node,
                                                      size_t at, const char *path, const char *fmt,
                                                      ...)
{
    va_list ap;
    size_t col = node->start_mark.column + 1;
    size_t width = node->end_mark.column - node->start_mark.column;
    size_t quotes = node->data.scalar.style == YAML_PLAIN_SCALAR_STYLE ? 0 : 2;

    if (node->start_mark.line == node->end_mark.line && width == node->data.scalar.length + quotes)
        col += at + quotes / 2;
    va_start(ap, fmt);
    report(ld, node->start_mark.line + 1, col, path, fmt, ap);
    va_end(ap);
    return -1;
}

/* A value from the file made safe to quote in a message: at most
 * SHOWN_LEN - 4 bytes, anything not printable ASCII shown as '?'. */
const char *cfg_shown(const char *s, char buf[SHOWN_LEN])
{
    size_t i;

    for (i = 0; s[i] != '\0' && i < SHOWN_LEN - 4; i++)
        buf[i] = s[i] >= 0x20 && s[i] < 0x7f ? s[i] : '?';
    strcpy(buf + i, s[i] != '\0' ? "..." : "");
    return buf;
}

/* Appends name to a ", "-separated list, kept NUL-terminated (b->len does
 * not count the NUL) and built to its length: a message quoting a list is
 * never cut inside it. */
void cfg_list_add(struct buf *b, const char *name)
{
    if (b->len > 0)
        buf_append(b, ", ", 2);
    buf_append_str(b, name);
    *buf_reserve(b, 1) = '\0';
}

void cfg_join(char *out, const char *path, const char *name)
{
    snprintf(out, PATH_LEN, "%s%s%s", path, *path ? "." : "", name);
}

/* ---- nodes --------------------------------------------------------------- */

int cfg_is_null(const yaml_node_t *n)
{
    static const char *const nulls[] = {"", "~", "null", "Null", "NULL"};
    size_t i;

    if (n->type != YAML_SCALAR_NODE || n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
        return 0;
    for (i = 0; i < sizeof nulls / sizeof nulls[0]; i++)
        if (strcmp((const char *)n->data.scalar.value, nulls[i]) == 0)
            return 1;
    return 0;
}

const char *cfg_kind(const yaml_node_t *n)
{
    switch (n->type) {
    case YAML_MAPPING_NODE:
        return "a mapping";
    case YAML_SEQUENCE_NODE:
        return "a sequence";
    default:
        return cfg_is_null(n) ? "null" : "a scalar";
    }
}

yaml_node_t *cfg_node_at(struct loader *ld, int index)
{
    return yaml_document_get_node(&ld->doc, index);
}

/*
 * The text of a scalar node, or NULL after reporting why the node is not one:
 * a mapping, a sequence, a null, or a string with a NUL byte in it. With
 * plain_only, a quoted scalar is refused too: in YAML "5" and "true" are
 * strings, not a number and a boolean.
 */
const char *cfg_scalar_text(struct loader *ld, const yaml_node_t *node, const char *path,
                            const char *expected, int plain_only)
{
    const char *s;

    if (node->type != YAML_SCALAR_NODE || cfg_is_null(node))
        return cfg_fail(ld, node, path, "expected %s, got %s", expected, cfg_kind(node)), NULL;
    s = (const char *)node->data.scalar.value;
    if (strlen(s) != node->data.scalar.length)
        cfg_fail(ld, node, path, "contains a NUL byte");
    else if (plain_only && node->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
        cfg_fail(ld, node, path, "expected %s, got a quoted string", expected);
    else
        return s;
    return NULL;
}

/* A policy or tier name: its text, or NULL after reporting it invalid. */
const char *cfg_name_text(struct loader *ld, const yaml_node_t *node, const char *path)
{
    char buf[SHOWN_LEN];
    const char *s = cfg_scalar_text(ld, node, path, "a name", 0);

    if (s != NULL && !policy_name_valid(s)) {
        cfg_fail(ld, node, path, "invalid name \"%s\": use 1 to %d of A-Z a-z 0-9 _ . -",
                 cfg_shown(s, buf), POLICY_NAME_MAX);
        return NULL;
    }
    return s;
}

/* The value of the field called name in a mapping, or NULL. */
const yaml_node_t *cfg_field_node(struct loader *ld, const yaml_node_t *map, const char *name)
{
    const yaml_node_pair_t *pair;

    for (pair = map->data.mapping.pairs.start; pair < map->data.mapping.pairs.top; pair++) {
        const yaml_node_t *key = cfg_node_at(ld, pair->key);
        if (key->type == YAML_SCALAR_NODE &&
            strcmp((const char *)key->data.scalar.value, name) == 0)
            return cfg_node_at(ld, pair->value);
    }
    return NULL;
}

/* ---- the walker ---------------------------------------------------------------- */

/* An F_CHOICE field: the index of its value among f->choices, into slot. */
static int parse_choice(struct loader *ld, const struct field *f, const yaml_node_t *node,
                        const char *path, void *slot)
{
    const char *s = cfg_scalar_text(ld, node, path, "a string", 0);
    if (s == NULL)
        return -1;
    for (size_t i = 0; f->choices[i] != NULL; i++) {
        if (strcmp(s, f->choices[i]) == 0) {
            *(int *)slot = (int)i;
            return 0;
        }
    }
    struct buf list = {NULL, 0, 0};
    char buf[SHOWN_LEN];
    for (size_t i = 0; f->choices[i] != NULL; i++)
        cfg_list_add(&list, f->choices[i]);
    cfg_fail(ld, node, path, "invalid value \"%s\": must be one of %s", cfg_shown(s, buf),
             list.data);
    buf_free(&list);
    return -1;
}

/* Parses one field's value node into target. Longer than most functions
 * here and kept whole: one case per enum field_type, each a few lines, so
 * that a new type is one case in one place. */
static int parse_value(struct loader *ld, const struct field *f, const yaml_node_t *node,
                       const char *path, void *target)
{
    void *slot = (char *)target + f->offset;
    char msg[RL_ERRLEN], buf[SHOWN_LEN];
    const char *s = NULL;
    int rc = 0;

    switch (f->type) {
    case F_SECTION:
        return cfg_parse_fields(ld, node, path, f->section, target);
    case F_CUSTOM:
        return f->parse(ld, node, path, slot);
    case F_NAME:
        if ((s = cfg_name_text(ld, node, path)) == NULL)
            return -1;
        strcpy(slot, s);
        return 0;
    case F_STRING:
        if ((s = cfg_scalar_text(ld, node, path, "a string", 0)) == NULL)
            return -1;
        /* The value is not quoted back: a Redis URL may hold a password. */
        if (f->check != NULL && f->check(s, msg, sizeof msg) < 0)
            return cfg_fail(ld, node, path, "%s", msg);
        free(*(char **)slot);
        *(char **)slot = xstrdup(s);
        return 0;
    case F_INT:
        if ((s = cfg_scalar_text(ld, node, path, "an integer", 1)) == NULL)
            return -1;
        rc = util_parse_int64(s, f->min, f->max, slot, msg, sizeof msg);
        break;
    case F_DURATION:
        if ((s = cfg_scalar_text(ld, node, path, "a duration", 0)) == NULL)
            return -1;
        rc = util_parse_duration(s, f->max, slot, msg, sizeof msg);
        break;
    case F_BOOL:
        if ((s = cfg_scalar_text(ld, node, path, "true or false", 1)) == NULL)
            return -1;
        if (strcmp(s, "true") == 0 || strcmp(s, "false") == 0) {
            *(int *)slot = s[0] == 't';
            return 0;
        }
        rc = -1;
        snprintf(msg, sizeof msg, "expected true or false");
        break;
    case F_CHOICE:
        return parse_choice(ld, f, node, path, slot);
    }
    if (rc < 0)
        return cfg_fail(ld, node, path, "invalid value \"%s\": %s", cfg_shown(s, buf), msg);
    return 0;
}

/* Where a list of known fields too long for the caller's error buffer
 * sends the reader: every field is there. */
#define FIELDS_PAGE "ratelimitd.yaml(5) or docs/configuration.md"

/*
 * Reports an unknown field with the table's known names: all of them when
 * the report fits the caller's buffer; else as many as fit (one at least:
 * a buffer too small for that is too small for any report) and how many
 * more, with the page that lists them, so that the message ends whole
 * instead of being cut mid-name.
 */
static int unknown_field(struct loader *ld, const yaml_node_t *key, const char *path,
                         const char *name, const struct field *fields)
{
    char buf[SHOWN_LEN];
    struct buf known = {NULL, 0, 0};
    size_t n = 0;

    while (fields[n].name != NULL)
        n++;
    for (size_t shown = n; shown > 0; shown--) {
        known.len = 0;
        for (size_t i = 0; i < shown; i++)
            cfg_list_add(&known, fields[i].name);
        if (shown < n) {
            buf_append_str(&known, " and ");
            buf_append_int(&known, (long long)(n - shown));
            buf_append_str(&known, " more in " FIELDS_PAGE);
            *buf_reserve(&known, 1) = '\0';
        }
        cfg_fail(ld, key, path, "unknown field \"%s\" (known: %s)", cfg_shown(name, buf),
                 known.data);
        /* A report that filled the buffer may have been cut: one name
         * fewer then, even if it fitted exactly. */
        if (strlen(ld->err) + 1 < ld->errlen)
            break;
    }
    buf_free(&known);
    return -1;
}

/*
 * Parses a mapping against a field table into target: every key must name a
 * field, at most once; every required field must be there. Fields absent
 * keep what target already holds (the defaults).
 */
int cfg_parse_fields(struct loader *ld, const yaml_node_t *map, const char *path,
                     const struct field *fields, void *target)
{
    const yaml_node_t *seen[MAX_FIELDS] = {NULL};
    const yaml_node_pair_t *pair;
    char child[PATH_LEN];
    const struct field *f;

    if (map->type != YAML_MAPPING_NODE)
        return cfg_fail(ld, map, path, "expected a mapping, got %s", cfg_kind(map));
    for (pair = map->data.mapping.pairs.start; pair < map->data.mapping.pairs.top; pair++) {
        const yaml_node_t *key = cfg_node_at(ld, pair->key);
        const char *name = cfg_scalar_text(ld, key, path, "a field name", 0);

        if (name == NULL)
            return -1;
        for (f = fields; f->name != NULL && strcmp(f->name, name) != 0; f++)
            ;
        if (f->name == NULL && ld->unknown != NULL && ld->unknown(ld, key, path, name) == 0)
            continue;
        if (f->name == NULL)
            return unknown_field(ld, key, path, name, fields);
        if (seen[f - fields] != NULL)
            return cfg_fail(ld, key, path, "duplicate field \"%s\"", name);
        seen[f - fields] = key;
        cfg_join(child, path, f->name);
        if (parse_value(ld, f, cfg_node_at(ld, pair->value), child, target) < 0)
            return -1;
    }
    for (f = fields; f->name != NULL; f++)
        if (f->required && seen[f - fields] == NULL)
            return cfg_fail(ld, map, path, "missing required field \"%s\"", f->name);
    return 0;
}

/* ---- the document ------------------------------------------------------------- */

/* Whether the byte at line:col (both from 0) of yaml is a tab that only
 * blanks precede on its line: a tab in the indentation, which YAML
 * forbids. Lines end at "\n", "\r\n" or "\r", as libyaml counts them. */
static int tab_in_indentation(const char *yaml, size_t len, size_t line, size_t col)
{
    size_t i = 0, at;

    for (size_t l = 0; l < line; l++) {
        while (i < len && yaml[i] != '\n' && yaml[i] != '\r')
            i++;
        if (i == len)
            return 0;
        i += yaml[i] == '\r' && i + 1 < len && yaml[i + 1] == '\n' ? 2 : 1;
    }
    /* Blanks are one byte each, so up to the mark a column is a byte. */
    for (at = i; at < i + col; at++)
        if (at >= len || (yaml[at] != ' ' && yaml[at] != '\t'))
            return 0;
    return at < len && yaml[at] == '\t';
}

/* Reports libyaml's complaint with the position it gives. A reader error
 * (bad UTF-8, say) has only a byte offset, so the line is counted here. */
static void syntax_error(struct loader *ld, const yaml_parser_t *parser, const char *yaml,
                         size_t len)
{
    size_t line = parser->problem_mark.line + 1, col = parser->problem_mark.column + 1, i;
    const char *problem = parser->problem ? parser->problem : "invalid YAML";

    if (parser->error == YAML_MEMORY_ERROR)
        problem = "out of memory";
    if (parser->error == YAML_READER_ERROR) {
        /* Columns count characters, as libyaml's do: skip UTF-8 continuation bytes. */
        line = col = 1;
        for (i = 0; i < parser->problem_offset && i < len; i++) {
            if (yaml[i] == '\n')
                line++, col = 1;
            else if (((unsigned char)yaml[i] & 0xc0) != 0x80)
                col++;
        }
    }
    /* libyaml says "found character that cannot start any token" (or that
     * the tab "violates indentation"): true, but it names neither the tab
     * nor the fix. */
    if (parser->error == YAML_SCANNER_ERROR &&
        tab_in_indentation(yaml, len, parser->problem_mark.line, parser->problem_mark.column))
        snprintf(ld->err, ld->errlen,
                 "%s:%zu:%zu: tabs are not allowed for indentation; indent with spaces", ld->name,
                 line, col);
    else if (parser->context != NULL)
        snprintf(ld->err, ld->errlen, "%s:%zu:%zu: %s (%s at %zu:%zu)", ld->name, line, col,
                 problem, parser->context, parser->context_mark.line + 1,
                 parser->context_mark.column + 1);
    else
        snprintf(ld->err, ld->errlen, "%s:%zu:%zu: %s", ld->name, line, col, problem);
}

/* Loads the one document of the stream into ld->doc. On success the caller
 * deletes ld->doc; on failure there is nothing to delete. */
int cfg_load_document(struct loader *ld, yaml_parser_t *parser, const char *yaml, size_t len)
{
    yaml_document_t extra;
    const yaml_node_t *root;
    int rc = 0;

    if (!yaml_parser_load(parser, &ld->doc)) {
        syntax_error(ld, parser, yaml, len);
        return -1;
    }
    if (yaml_document_get_root_node(&ld->doc) == NULL) {
        snprintf(ld->err, ld->errlen, "%s:1:1: the file is empty; expected a mapping", ld->name);
        rc = -1;
    } else if (!yaml_parser_load(parser, &extra)) {
        syntax_error(ld, parser, yaml, len);
        rc = -1;
    } else {
        if ((root = yaml_document_get_root_node(&extra)) != NULL)
            rc = cfg_fail(ld, root, "", "a second YAML document; the file must hold only one");
        yaml_document_delete(&extra);
    }
    if (rc < 0)
        yaml_document_delete(&ld->doc);
    return rc;
}
