/* SPDX-License-Identifier: Apache-2.0 */
/*
 * domains_dump.c: the text and JSON views of a snapshot's Envoy domains
 * (domains_dump.h). One table, FIELDS, lists a limit's fields with how to
 * read them; both views walk it, so a field added to struct domain_limit
 * is one row here. The walk keeps the entries above a node as a chain of
 * stack frames (no depth bound, no allocation).
 */
#include "config/domains_dump.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "lib/json_out.h"

enum dump_kind {
    DUMP_BOOL,   /* int at offset */
    DUMP_INT,    /* int64_t at offset */
    DUMP_STR,    /* char * at offset; NULL: not set */
    DUMP_STRS,   /* char ** at offset, its count (size_t) at count */
    DUMP_UNIT,   /* enum rls_unit at offset */
    DUMP_SHADOW, /* the policy's shadow (a shadow_mode limit decides with a shadow copy) */
};

struct dump_field {
    const char *name;
    enum dump_kind kind;
    size_t offset, count;
    const char *text; /* how the text view starts it; NULL: ", <name>: " */
};

#define AT(f) offsetof(struct domain_limit, f)

/* The fields of a limit, in the order both views write them. The first
 * three make the line envoyproxy/ratelimit's dump writes. */
static const struct dump_field FIELDS[] = {
    {"unit", DUMP_UNIT, AT(unit), 0, " unit="},
    {"requests_per_unit", DUMP_INT, AT(requests_per_unit), 0, " requests_per_unit="},
    {"shadow_mode", DUMP_SHADOW, 0, 0, NULL},
    {"unlimited", DUMP_BOOL, AT(unlimited), 0, NULL},
    {"name", DUMP_STR, AT(name), 0, NULL},
    {"replaces", DUMP_STRS, AT(replaces), AT(nreplaces), NULL},
    {"detailed_metric", DUMP_BOOL, AT(detailed_metric), 0, NULL},
    {"quota_mode", DUMP_BOOL, AT(quota_mode), 0, NULL},
};

#define NFIELDS (sizeof FIELDS / sizeof FIELDS[0])

/* A tier's numbers after its name and algorithm; the text view leaves a
 * 0 out unless always. */
static const struct {
    const char *name;
    size_t offset; /* of an int64_t in struct tier */
    int always;
} TIER_INTS[] = {
    {"limit", offsetof(struct tier, limit), 1},
    {"window_us", offsetof(struct tier, window_us), 1},
    {"burst", offsetof(struct tier, burst), 0},
    {"precision_us", offsetof(struct tier, precision_us), 0},
};

#define NTIER_INTS (sizeof TIER_INTS / sizeof TIER_INTS[0])

static int64_t tier_int(const struct tier *t, size_t k)
{
    return *(const int64_t *)((const char *)t + TIER_INTS[k].offset);
}

/* A node and the frames above it, root first when followed up. */
struct frame {
    const struct domain_node *node;
    const struct frame *up;
};

/* A field's value, read once for either view: a boolean, an integer, a
 * string (NULL: not set) or a list of strings. */
struct field_value {
    enum { V_BOOL, V_INT, V_STR, V_STRS } type;
    int64_t i; /* V_BOOL, V_INT */
    const char *s;
    char *const *strs;
    size_t n;
};

static struct field_value field_read(const struct domain_limit *l, const struct dump_field *f)
{
    const char *at = (const char *)l + f->offset;
    struct field_value v = {0};
    switch (f->kind) {
    case DUMP_BOOL:
        v.type = V_BOOL, v.i = *(const int *)at;
        break;
    case DUMP_SHADOW:
        v.type = V_BOOL, v.i = l->policy && l->policy->shadow;
        break;
    case DUMP_INT:
        v.type = V_INT, v.i = *(const int64_t *)at;
        break;
    case DUMP_STR:
        v.type = V_STR, v.s = *(char *const *)at;
        break;
    case DUMP_STRS:
        v.type = V_STRS, v.strs = *(char **const *)at;
        v.n = *(const size_t *)((const char *)l + f->count);
        break;
    case DUMP_UNIT:
        v.type = V_STR, v.s = rls_unit_name(*(const enum rls_unit *)at);
        break;
    }
    return v;
}

/* Whether the limit's policy is one of `policies:` (a `policy:` descriptor)
 * rather than a `rate_limit:`'s own. */
static int named_policy(const struct domain_limit *l)
{
    return l->policy && strcmp(l->policy->name, DOMAINS_ENVOY_POLICY) != 0;
}

/* ---- text ---- */

static void text_key(struct buf *out, const char *domain, const struct domain_limit *l)
{
    buf_append_str(out, domain);
    buf_append_char(out, '.');
    buf_append_str(out, l->path ? l->path : "");
    buf_append_char(out, ':');
}

static void text_field(struct buf *out, const struct domain_limit *l, const struct dump_field *f)
{
    struct field_value v = field_read(l, f);
    if ((v.type == V_STR && !v.s) || (v.type == V_STRS && !v.n))
        return;
    if (f->text) {
        buf_append_str(out, f->text);
    } else {
        buf_append_str(out, ", ");
        buf_append_str(out, f->name);
        buf_append_str(out, ": ");
    }
    if (v.type == V_BOOL) {
        buf_append_str(out, v.i ? "true" : "false");
    } else if (v.type == V_INT) {
        buf_append_int(out, v.i);
    } else if (v.type == V_STR) {
        buf_append_str(out, v.s);
    } else {
        buf_append_char(out, '[');
        for (size_t i = 0; i < v.n; i++) {
            if (i)
                buf_append_str(out, ", ");
            buf_append_str(out, v.strs[i]);
        }
        buf_append_char(out, ']');
    }
}

/* A calendar tier's settings as text, " calendar=month timezone=UTC
 * anchor_day=1"; nothing for another tier. */
static void text_calendar(struct buf *out, const struct calendar_spec *c)
{
    if (c->unit == CALENDAR_NONE)
        return;
    buf_append_str(out, " calendar=");
    buf_append_str(out, calendar_unit_names[c->unit - 1]);
    buf_append_str(out, " timezone=");
    buf_append_str(out, tzif_name(c->zone));
    if (c->unit == CALENDAR_MONTH) {
        buf_append_str(out, " anchor_day=");
        buf_append_int(out, c->anchor_day);
    } else if (c->unit == CALENDAR_WEEK) {
        buf_append_str(out, " week_start=");
        buf_append_str(out, calendar_weekday_names[c->week_start]);
    }
}

/* The same as JSON, "calendar":{"unit":...,"timezone":...,...}; nothing
 * for another tier. */
static void json_calendar(struct json_out *j, const struct calendar_spec *c)
{
    if (c->unit == CALENDAR_NONE)
        return;
    json_out_lkey(j, "calendar");
    json_out_begin(j, '{');
    json_out_lkey(j, "unit");
    json_out_cstr(j, calendar_unit_names[c->unit - 1]);
    json_out_lkey(j, "timezone");
    json_out_cstr(j, tzif_name(c->zone));
    json_out_lkey(j, "anchor_day");
    json_out_int(j, c->anchor_day);
    json_out_lkey(j, "week_start");
    json_out_cstr(j, calendar_weekday_names[c->week_start]);
    json_out_end(j, '}');
}

static void text_policy(struct buf *out, const struct policy *p)
{
    buf_append_str(out, ", policy: ");
    buf_append_str(out, p->name);
    buf_append_char(out, '{');
    for (size_t i = 0; i < p->ntiers; i++) {
        const struct tier *t = &p->tiers[i];
        if (i)
            buf_append_str(out, ", ");
        buf_append_str(out, t->name);
        buf_append_str(out, ": ");
        buf_append_str(out, policy_algorithm_name(t->algorithm));
        for (size_t k = 0; k < NTIER_INTS; k++) {
            if (!TIER_INTS[k].always && !tier_int(t, k))
                continue;
            buf_append_char(out, ' ');
            buf_append_str(out, TIER_INTS[k].name);
            buf_append_char(out, '=');
            buf_append_int(out, tier_int(t, k));
        }
        text_calendar(out, &t->calendar);
    }
    buf_append_char(out, '}');
}

static void text_nodes(struct buf *out, const char *domain, const struct domain_node *nodes,
                       size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const struct domain_node *d = &nodes[i];
        if (d->has_limit) {
            const struct domain_limit *l = &d->limit;
            text_key(out, domain, l);
            for (size_t k = 0; k < NFIELDS; k++)
                text_field(out, l, &FIELDS[k]);
            if (named_policy(l))
                text_policy(out, l->policy);
            buf_append_char(out, '\n');
        }
        text_nodes(out, domain, d->children, d->nchildren);
    }
}

void domains_dump_text(const struct domain *domains, size_t n, struct buf *out)
{
    for (size_t i = 0; i < n; i++)
        text_nodes(out, domains[i].name, domains[i].children, domains[i].nchildren);
}

/* ---- JSON ---- */

static void json_field(struct json_out *j, const struct domain_limit *l, const struct dump_field *f)
{
    struct field_value v = field_read(l, f);
    json_out_key(j, f->name);
    if (v.type == V_BOOL) {
        json_out_bool(j, (int)v.i);
    } else if (v.type == V_INT) {
        json_out_int(j, v.i);
    } else if (v.type == V_STR) {
        if (v.s)
            json_out_cstr(j, v.s);
        else
            json_out_null(j);
    } else {
        json_out_begin(j, '[');
        for (size_t i = 0; i < v.n; i++)
            json_out_cstr(j, v.strs[i]);
        json_out_end(j, ']');
    }
}

static void json_policy(struct json_out *j, const struct policy *p)
{
    json_out_lkey(j, "policy");
    if (!p) {
        json_out_null(j);
        return;
    }
    json_out_begin(j, '{');
    json_out_lkey(j, "name");
    json_out_cstr(j, p->name);
    json_out_lkey(j, "shadow");
    json_out_bool(j, p->shadow);
    json_out_lkey(j, "tiers");
    json_out_begin(j, '[');
    for (size_t i = 0; i < p->ntiers; i++) {
        const struct tier *t = &p->tiers[i];
        json_out_begin(j, '{');
        json_out_lkey(j, "name");
        json_out_cstr(j, t->name);
        json_out_lkey(j, "algorithm");
        json_out_cstr(j, policy_algorithm_name(t->algorithm));
        for (size_t k = 0; k < NTIER_INTS; k++) {
            json_out_key(j, TIER_INTS[k].name);
            json_out_int(j, tier_int(t, k));
        }
        json_calendar(j, &t->calendar);
        json_out_end(j, '}');
    }
    json_out_end(j, ']');
    json_out_end(j, '}');
}

/* The entries from the root down to f's node. */
static void json_entries(struct json_out *j, const struct frame *f)
{
    if (f->up)
        json_entries(j, f->up);
    const struct domain_node *d = f->node;
    json_out_begin(j, '{');
    json_out_lkey(j, "key");
    json_out_cstr(j, d->key);
    json_out_lkey(j, "value");
    if (!d->value)
        json_out_null(j);
    else
        json_out_cstr(j, d->value); /* as written: a pattern keeps its '*'s */
    json_out_end(j, '}');
}

static void json_nodes(struct json_out *j, struct buf *scratch, const char *domain,
                       const struct domain_node *nodes, size_t n, const struct frame *up)
{
    for (size_t i = 0; i < n; i++) {
        const struct domain_node *d = &nodes[i];
        struct frame f = {.node = d, .up = up};
        if (d->has_limit) {
            const struct domain_limit *l = &d->limit;
            json_out_begin(j, '{');
            json_out_lkey(j, "key");
            scratch->len = 0;
            buf_append_str(scratch, domain);
            buf_append_char(scratch, '.');
            buf_append_str(scratch, l->path ? l->path : "");
            json_out_str(j, scratch->data, scratch->len);
            json_out_lkey(j, "descriptors");
            json_out_begin(j, '[');
            json_entries(j, &f);
            json_out_end(j, ']');
            for (size_t k = 0; k < NFIELDS; k++)
                json_field(j, l, &FIELDS[k]);
            json_policy(j, l->unlimited ? NULL : l->policy);
            json_out_end(j, '}');
        }
        json_nodes(j, scratch, domain, d->children, d->nchildren, &f);
    }
}

void domains_dump_json(const struct domain *domains, size_t n, struct buf *out)
{
    struct json_out j = json_out_start(out);
    struct buf scratch = {0};
    json_out_begin(&j, '{');
    json_out_lkey(&j, "domains");
    json_out_begin(&j, '[');
    for (size_t i = 0; i < n; i++) {
        json_out_begin(&j, '{');
        json_out_lkey(&j, "domain");
        json_out_cstr(&j, domains[i].name);
        json_out_lkey(&j, "limits");
        json_out_begin(&j, '[');
        json_nodes(&j, &scratch, domains[i].name, domains[i].children, domains[i].nchildren, NULL);
        json_out_end(&j, ']');
        json_out_end(&j, '}');
    }
    json_out_end(&j, ']');
    json_out_end(&j, '}');
    buf_free(&scratch);
}
