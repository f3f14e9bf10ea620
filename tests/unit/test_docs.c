/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_docs.c: the docs agree with the config table, the one place that
 * defines the policy file's fields.
 *
 * - Every field the policy file accepts has a row in docs/configuration.md's
 *   reference ("| `path` |"), whose "on reload" column says `restart`
 *   exactly when the table does, and an entry in ratelimitd.yaml(5); it is
 *   shown in conf/ratelimitd.yaml (as "name:"). A new field without docs
 *   fails here, and so does a row or an entry naming a field that does not
 *   exist.
 * - The lists of restart-only and reloadable fields in docs/configuration.md,
 *   ratelimitd(8) and ratelimitd.yaml(5) (between "fields: restart" or
 *   "fields: applied" and "fields: end" marks) name exactly the table's.
 * - ratelimitd(8)'s HTTP API has a ".SS METHOD /path" heading for every
 *   method of every row of the route table (".SS /path ... (any method)"
 *   for a row taking any), and every such heading names a row that takes
 *   that method: a path served without docs, or documented but not served,
 *   fails here.
 * - The stop timeouts that ship (the systemd unit, ratelimitd(8),
 *   docker/compose.yaml, the Dockerfile's advice, the Kubernetes grace
 *   periods) agree and exceed the longest drain the code allows, which
 *   docs/operations.md and ratelimitd(8) state.
 * - Every test file is named in docs/testing.md, and every source file of
 *   src/ has a row in docs/architecture.md's table.
 * - ratelimitd(8)'s "Error codes", docs/http-api.md's Errors table (both
 *   with statuses) and docs/openapi.yaml's ErrorCode enum list exactly the
 *   codes and statuses of request_error.c's table, the one the code uses.
 * - The one version (configure.ac's AC_INIT) is the newest release of
 *   CHANGELOG.md and of debian/changelog.
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "core/request_error.h"
#include "front/http/http_routes.h"
#include "tap.h"
#include "worker.h"

struct docs {
    char *reference; /* docs/configuration.md */
    char *example;   /* conf/ratelimitd.yaml */
    char *operations;
};

static char *slurp(const char *dir, const char *name)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *buf = NULL;
    size_t len = 0, cap = 0, n;
    char chunk[4096];
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) {
        if (len + n + 1 > cap) {
            cap = (len + n + 1) * 2;
            buf = xrealloc(buf, cap);
        }
        memcpy(buf + len, chunk, n);
        len += n;
    }
    fclose(f);
    if (buf)
        buf[len] = '\0';
    return buf;
}

static void check_field(const char *path, void *arg)
{
    struct docs *d = arg;
    char quoted[160], key[160];
    snprintf(quoted, sizeof quoted, "\n| `%s` |", path);
    ok(strstr(d->reference, quoted) != NULL, "docs/configuration.md has a row for `%s`", path);
    const char *last = strrchr(path, '.');
    snprintf(key, sizeof key, "%s:", last ? last + 1 : path);
    ok(strstr(d->example, key) != NULL, "conf/ratelimitd.yaml shows %s", key);
}

/* The number after the first `before` in file (e.g. "TimeoutStopSec=70s":
 * 70), 0 if none follows it, or -1 if the file or the text is not there. */
static long number_after(const char *dir, const char *file, const char *before)
{
    char *text = slurp(dir, file);
    const char *at = text ? strstr(text, before) : NULL;
    long n = at ? strtol(at + strlen(before), NULL, 10) : -1;
    free(text);
    return n;
}

static int file_has(const char *dir, const char *file, const char *what)
{
    return number_after(dir, file, what) != -1;
}

/* A stop timeout shorter than the drain kills the daemon with answers still
 * owed (SIGKILL); the places that say how long to wait must agree. */
static void test_stop_timeouts(const char *dir, const struct docs *d)
{
    const long drain = CONFIG_REDIS_TIMEOUT_MAX_US / 1000000 + WORKER_DRAIN_MAX_S;
    const long unit = number_after(dir, "systemd/ratelimitd.service.in", "\nTimeoutStopSec=");
    const long man = number_after(dir, "man/ratelimitd.8.in", "TimeoutStopSec=");
    const long compose = number_after(dir, "docker/compose.yaml", "stop_grace_period: ");
    const long docker = number_after(dir, "docker/Dockerfile", "--time ");
    char said[128];

    ok(unit > drain, "the unit's TimeoutStopSec (%ld s) exceeds the longest drain (%ld s)", unit,
       drain);
    ok(man == unit, "ratelimitd(8) says the unit's TimeoutStopSec (%ld s, the unit %ld s)", man,
       unit);
    ok(compose > drain, "compose.yaml's stop_grace_period (%ld s) exceeds the longest drain",
       compose);
    ok(docker > drain, "the Dockerfile's docker stop --time (%ld s) exceeds the longest drain",
       docker);
    /* Kubernetes: the grace period covers the preStop sleep, then the drain. */
    static const char *const pods[] = {"deploy/kubernetes/shared/deployment.yaml",
                                       "deploy/kubernetes/sidecar/deployment.yaml"};
    for (size_t i = 0; i < sizeof pods / sizeof pods[0]; i++) {
        const long grace = number_after(dir, pods[i], "terminationGracePeriodSeconds: ");
        const long sleep = number_after(dir, pods[i], "[\"/bin/sleep\", \"");
        ok(grace > drain + (sleep > 0 ? sleep : 0),
           "%s: terminationGracePeriodSeconds (%ld s) exceeds the preStop sleep (%ld s) and the "
           "longest drain",
           pods[i], grace, sleep > 0 ? sleep : 0);
    }
    snprintf(said, sizeof said, "at most `redis.timeout` + %d s", WORKER_DRAIN_MAX_S);
    ok(d->operations && strstr(d->operations, said), "docs/operations.md: %s", said);
    snprintf(said, sizeof said, "redis.timeout\nplus %d seconds", WORKER_DRAIN_MAX_S);
    ok(file_has(dir, "man/ratelimitd.8.in", said),
       "ratelimitd(8): the drain lasts at most redis.timeout plus %d seconds", WORKER_DRAIN_MAX_S);
}

static int has_suffix(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

static int has_prefix(const char *s, const char *prefix)
{
    return strncmp(s, prefix, strlen(prefix)) == 0;
}

/* Calls fn(path, arg) for every file under dir/sub (sub itself a path
 * relative to dir, e.g. "src"), and under its folders too when recurse,
 * with path relative to dir ("src/lib/util.c"). Returns the number of
 * files seen, or -1 when dir/sub cannot be read. */
static long walk_files(const char *dir, const char *sub, int recurse,
                       void (*fn)(const char *path, void *arg), void *arg)
{
    char full[2048];
    if ((size_t)snprintf(full, sizeof full, "%s/%s", dir, sub) >= sizeof full)
        return -1;
    DIR *d = opendir(full);
    if (!d)
        return -1;
    long n = 0;
    const struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        char path[1024];
        if (e->d_name[0] == '.' ||
            (size_t)snprintf(path, sizeof path, "%s/%s", sub, e->d_name) >= sizeof path ||
            (size_t)snprintf(full, sizeof full, "%s/%s", dir, path) >= sizeof full)
            continue;
        DIR *child = opendir(full);
        if (child) {
            closedir(child);
            long m = recurse ? walk_files(dir, path, recurse, fn, arg) : 0;
            n += m > 0 ? m : 0;
        } else {
            fn(path, arg);
            n++;
        }
    }
    closedir(d);
    return n;
}

/* What a doc must name: every file under some folders that `wanted`
 * picks, found in the doc as before + the file's path + after. */
struct doc_check {
    const char *doc;            /* the document's text */
    const char *name;           /* for messages: "docs/testing.md" */
    const char *before, *after; /* around a path where the doc names it */
    int (*wanted)(const char *path);
    long checked; /* files looked for */
};

static void check_named(const char *path, void *arg)
{
    struct doc_check *c = arg;
    if (!c->wanted(path))
        return;
    char needle[1100];
    snprintf(needle, sizeof needle, "%s%s%s", c->before, path, c->after);
    ok(c->doc && strstr(c->doc, needle) != NULL, "%s names %s", c->name, path);
    c->checked++;
}

/* Checks that the doc c->name names every wanted file of the folders (a
 * NULL-terminated list), at least `least` of them, so that an unreadable
 * tree cannot pass. */
static void test_doc_names(const char *dir, struct doc_check *c, const char *const *folders,
                           int recurse, long least)
{
    char *doc = slurp(dir, c->name);
    c->doc = doc;
    ok(doc != NULL, "%s is readable", c->name);
    for (; *folders; folders++)
        ok(walk_files(dir, *folders, recurse, check_named, c) > 0, "%s is readable", *folders);
    ok(c->checked >= least, "%s: %ld files looked for", c->name, c->checked);
    free(doc);
}

/* A test file: tests/unit/test_*.c, tests/integration/test_*.py|sh,
 * tests/fuzz/fuzz_*.c. */
static int is_test_file(const char *path)
{
    const char *base = strrchr(path, '/') + 1;
    if (has_prefix(path, "tests/unit/"))
        return has_prefix(base, "test_") && has_suffix(base, ".c");
    if (has_prefix(path, "tests/integration/"))
        return has_prefix(base, "test_") && (has_suffix(base, ".py") || has_suffix(base, ".sh"));
    return has_prefix(base, "fuzz_") && has_suffix(base, ".c");
}

/* A source file of src/, not a generated one (scripts_lua.c, ui_page.c,
 * protoc-c's). */
static int is_source_file(const char *path)
{
    return (has_suffix(path, ".c") || has_suffix(path, ".h")) && !has_suffix(path, "_lua.c") &&
           !has_suffix(path, "/ui_page.c") && strstr(path, ".pb-c.") == NULL;
}

/* Every test file is named in docs/testing.md, which says what each one
 * proves; every source file has a row of docs/architecture.md's table
 * (a line starting "| `path` |"), which says what each one owns. */
static void test_file_docs(const char *dir)
{
    static const char *const test_folders[] = {"tests/unit", "tests/integration", "tests/fuzz",
                                               NULL};
    static const char *const source_folders[] = {"src", NULL};
    struct doc_check tests = {NULL, "docs/testing.md", "`", "`", is_test_file, 0};
    struct doc_check sources = {NULL, "docs/architecture.md", "\n| `", "` |", is_source_file, 0};
    test_doc_names(dir, &tests, test_folders, 0, 40);
    test_doc_names(dir, &sources, source_folders, 1, 60);
}

/* ---- restart-only marks: the docs say it of exactly the table's fields ---------- */

/* Every field of the table with its mark, for the checks below. */
#define MAX_PATHS 256
struct table {
    char path[MAX_PATHS][128];
    int restart[MAX_PATHS];
    size_t n;
};

static void collect_field(const char *path, void *arg)
{
    struct table *tb = arg;
    if (tb->n < MAX_PATHS) {
        snprintf(tb->path[tb->n], sizeof tb->path[0], "%s", path);
        tb->restart[tb->n++] = config_field_restart(path);
    }
}

/* a is a proper ancestor of p: "redis" of "redis.url", "policies" of
 * "policies.NAME.tiers[].limit". */
static int is_ancestor(const char *a, const char *p)
{
    size_t n = strlen(a);
    return strncmp(a, p, n) == 0 && (p[n] == '.' || p[n] == '[');
}

/* A field whose descendants do not all share its mark ("redis": its
 * timeout is reloaded, its url is not): the docs mark each child instead. */
static int is_mixed(const struct table *tb, size_t i)
{
    for (size_t j = 0; j < tb->n; j++)
        if (is_ancestor(tb->path[i], tb->path[j]) && tb->restart[j] != tb->restart[i])
            return 1;
    return 0;
}

/* Whether a list of fields of one mark names path i: fields are listed at
 * the highest level where their whole subtree shares the mark ("redis.tls",
 * "policies"), never a mixed field. */
static int listed(const struct table *tb, size_t i)
{
    if (is_mixed(tb, i))
        return 0;
    for (size_t j = 0; j < tb->n; j++)
        if (is_ancestor(tb->path[j], tb->path[i]) && !is_mixed(tb, j))
            return 0;
    return 1;
}

/* The reference row of path ("| `path` | type | default | mark |"): the
 * fourth cell, copied into mark; 0 when there is no such row. */
static int row_mark(const char *doc, const char *path, char *mark, size_t size)
{
    char row[192];
    const char *at, *cell;
    snprintf(row, sizeof row, "\n| `%s` |", path);
    if ((at = strstr(doc, row)) == NULL)
        return 0;
    cell = at + 1;
    for (int i = 0; i < 3 && cell; i++)
        cell = strchr(cell + 1, '|');
    const char *end = cell ? strchr(cell + 1, '|') : NULL;
    if (cell == NULL || end == NULL || strchr(cell, '\n') < end)
        return snprintf(mark, size, "?"), 1;
    cell++;
    while (*cell == ' ')
        cell++;
    while (end > cell && end[-1] == ' ')
        end--;
    snprintf(mark, size, "%.*s", (int)(end - cell), cell);
    return 1;
}

/* ratelimitd.yaml(5)'s entry ".TP\n.B path" (or ".TQ\n.B path") up to the
 * next .TP or .SS, or that of its section ("Every field below changes only
 * with a restart"). */
static const char *man_entry(const char *man, const char *path, const char **end)
{
    char head[192], roff[160];
    const char *at, *tp, *ss, *name = strstr(path, "NAME");

    /* The page writes policies.NAME.shadow as policies.\fINAME\fP.shadow. */
    if (name)
        snprintf(roff, sizeof roff, "%.*s\\fINAME\\fP%s", (int)(name - path), path, name + 4);
    else
        snprintf(roff, sizeof roff, "%s", path);
    path = roff;
    snprintf(head, sizeof head, ".TP\n.B %s\n", path);
    if ((at = strstr(man, head)) == NULL) {
        snprintf(head, sizeof head, ".TQ\n.B %s\n", path);
        if ((at = strstr(man, head)) == NULL)
            return NULL;
    }
    tp = strstr(at + strlen(head), ".TP\n");
    ss = strstr(at + strlen(head), ".SS");
    *end = tp && (!ss || tp < ss) ? tp : ss ? ss : at + strlen(at);
    return at;
}

static int says_restart(const char *from, const char *to)
{
    static const char *const phrases[] = {"hanges only with a restart", "needs a restart"};
    for (size_t i = 0; i < sizeof phrases / sizeof phrases[0]; i++) {
        const char *at = strstr(from, phrases[i]);
        if (at != NULL && at < to)
            return 1;
    }
    return 0;
}

static int man_marks(const char *man, const char *path, int *found)
{
    const char *end, *at = man_entry(man, path, &end), *dot = strrchr(path, '.');
    char section[192];

    if ((*found = at != NULL) == 0)
        return 0;
    if (says_restart(at, end))
        return 1;
    if (dot == NULL)
        return 0;
    snprintf(section, sizeof section, "%.*s", (int)(dot - path), path);
    at = man_entry(man, section, &end);
    return at != NULL && strstr(at, "Every field below changes only with a restart") != NULL &&
           strstr(at, "Every field below changes only with a restart") < end;
}

static void test_marks(const struct table *tb, const char *reference, const char *man)
{
    for (size_t i = 0; i < tb->n; i++) {
        const char *path = tb->path[i];
        char mark[64];
        int found;
        const char *want = tb->restart[i] ? "restart" : is_mixed(tb, i) ? "per field" : "applied";

        if (row_mark(reference, path, mark, sizeof mark))
            ok(strcmp(mark, want) == 0, "docs/configuration.md: `%s` is marked \"%s\" (\"%s\")",
               path, want, mark);
        int marked = man_marks(man, path, &found);
        ok(found, "ratelimitd.yaml(5) has an entry for %s", path);
        if (found && !is_mixed(tb, i))
            ok(marked == tb->restart[i], "ratelimitd.yaml(5) %s %s as changing only with a restart",
               tb->restart[i] ? "marks" : "does not mark", path);
    }
}

/* ---- the lists of restart-only and reloadable fields ------------------------ */

/* Whether names (a '\n'-joined list) holds name. */
static int has_name(const char *names, const char *name)
{
    size_t n = strlen(name);
    for (const char *at = names; (at = strstr(at, name)) != NULL; at += n)
        if ((at == names || at[-1] == '\n') && at[n] == '\n')
            return 1;
    return 0;
}

/* The names a list gives between `open` and `close`, '\n'-joined into out:
 * in Markdown each `quoted` word, in a man page the first word of each
 * .B/.BR line. Returns 0 when the marks are not there. */
static int list_names(const char *doc, const char *open, const char *close, int man, char *out,
                      size_t size)
{
    const char *at = doc ? strstr(doc, open) : NULL, *end = at ? strstr(at, close) : NULL;
    size_t len = 0;
    out[0] = '\0';
    if (at == NULL || end == NULL)
        return 0;
    for (at += strlen(open); at < end;) {
        const char *word, *stop;
        if (man) {
            const char *line = at;
            at = strchr(at, '\n');
            at = at ? at + 1 : end;
            if (strncmp(line, ".B ", 3) && strncmp(line, ".BR ", 4))
                continue;
            word = strchr(line, ' ') + 1;
            stop = word + strcspn(word, " \n");
        } else {
            if ((word = strchr(at, '`')) == NULL || word >= end)
                break;
            word++;
            if ((stop = strchr(word, '`')) == NULL || stop >= end)
                break;
            at = stop + 1;
        }
        if (len + (size_t)(stop - word) + 2 < size)
            len += (size_t)snprintf(out + len, size - len, "%.*s\n", (int)(stop - word), word);
    }
    return 1;
}

/* One page's list of one mark names exactly the table's fields of that
 * mark (at the level listed() says), and nothing else. */
static void test_list(const struct table *tb, const char *name, const char *doc, int man,
                      int restart)
{
    const char *kind = restart ? "restart" : "applied";
    char open[64], close[64], names[8192];
    snprintf(open, sizeof open, man ? ".\\\" fields: %s\n" : "<!-- fields: %s -->", kind);
    snprintf(close, sizeof close, man ? ".\\\" fields: end" : "<!-- fields: end -->");
    if (!ok(list_names(doc, open, close, man, names, sizeof names), "%s has its %s list", name,
            kind))
        return;
    size_t want = 0;
    for (size_t i = 0; i < tb->n; i++) {
        if (tb->restart[i] != restart || !listed(tb, i))
            continue;
        want++;
        ok(has_name(names, tb->path[i]), "%s's %s list names %s", name, kind, tb->path[i]);
    }
    size_t got = 0;
    for (const char *at = names; *at; at = strchr(at, '\n') + 1) {
        char word[128];
        snprintf(word, sizeof word, "%.*s", (int)strcspn(at, "\n"), at);
        int known = -1;
        for (size_t i = 0; i < tb->n; i++)
            if (strcmp(tb->path[i], word) == 0)
                known = (tb->restart[i] == restart && listed(tb, i));
        ok(known == 1, "%s's %s list: %s is a field of that mark", name, kind, word);
        got++;
    }
    ok(got == want, "%s's %s list: %zu names, the table %zu", name, kind, got, want);
}

/* ---- no docs of fields that do not exist ------------------------------------- */

/* Every row of docs/configuration.md's reference ("| `path` | ...", after
 * its "## Fields" heading and up to the next heading) and every entry of
 * ratelimitd.yaml(5)'s FIELDS section (".TP"/".TQ" then ".B path") names a
 * field of the table. */
static void test_known(const char *reference, const char *man)
{
    const char *at = reference ? strstr(reference, "\n## Fields\n") : NULL;
    const char *end = at ? strstr(at + 1, "\n## ") : NULL;
    long rows = 0, entries = 0;
    for (; at && (at = strstr(at, "\n| `")) != NULL && (!end || at < end); at++) {
        char path[160];
        snprintf(path, sizeof path, "%.*s", (int)strcspn(at + 4, "`\n"), at + 4);
        ok(config_field_restart(path) != -1, "docs/configuration.md's row `%s` is a field", path);
        rows++;
    }
    ok(rows >= 60, "docs/configuration.md's reference has its rows (%ld)", rows);

    at = man ? strstr(man, "\n.SH FIELDS\n") : NULL;
    end = at ? strstr(at + 1, "\n.SH ") : NULL;
    for (; at && end; at++) {
        const char *tp = strstr(at, "\n.TP\n.B "), *tq = strstr(at, "\n.TQ\n.B ");
        at = tp && (!tq || tp < tq) ? tp : tq;
        if (at == NULL || at > end)
            break;
        char path[160], *p = path;
        snprintf(path, sizeof path, "%.*s", (int)strcspn(at + 8, "\n"), at + 8);
        /* ".B policies.\fINAME\fP.shadow" is policies.NAME.shadow */
        for (const char *s = path; *s; s++) {
            if (strncmp(s, "\\fI", 3) == 0 || strncmp(s, "\\fP", 3) == 0 ||
                strncmp(s, "\\fR", 3) == 0 || strncmp(s, "\\fB", 3) == 0) {
                s += 2;
                continue;
            }
            *p++ = *s;
        }
        *p = '\0';
        ok(config_field_restart(path) != -1, "ratelimitd.yaml(5)'s entry %s is a field", path);
        entries++;
    }
    ok(entries >= 60, "ratelimitd.yaml(5)'s FIELDS has its entries (%ld)", entries);
}

/* ---- the HTTP API: ratelimitd(8)'s headings and the route table ------------- */

/* The text of ratelimitd(8)'s HTTP API section, from its ".SH" up to the
 * next, in out; 0 when there is none. */
static int http_api_section(const char *man, char *out, size_t size)
{
    const char *at = man ? strstr(man, "\n.SH HTTP API\n") : NULL;
    const char *end = at ? strstr(at + 1, "\n.SH ") : NULL;
    if (end == NULL || (size_t)(end - at) + 2 > size)
        return 0;
    snprintf(out, size, "%.*s\n", (int)(end - at), at);
    return 1;
}

/* Whether the section has a heading ".SS method path" (method NULL:
 * ".SS path", saying "(any method)"), the path whole or, for a prefix
 * row, followed by its placeholders ("\fIpolicy\fP"). */
static int has_heading(const char *api, const char *method, const struct http_route *r)
{
    char head[160];
    if (method)
        snprintf(head, sizeof head, "\n.SS %s %s", method, r->path);
    else
        snprintf(head, sizeof head, "\n.SS %s", r->path);
    for (const char *at = api; (at = strstr(at, head)) != NULL; at++) {
        const char *rest = at + strlen(head), *eol = strchr(rest, '\n');
        if (!r->prefix && *rest != '\n' && *rest != ' ')
            continue;
        if (method || (eol && strstr(rest, "(any method)") && strstr(rest, "(any method)") < eol))
            return 1;
    }
    return 0;
}

static void check_route_documented(const struct http_route *r, void *arg)
{
    const char *api = arg;
    if (r->methods == HTTP_ROUTE_ANY_METHOD) {
        ok(has_heading(api, NULL, r), "ratelimitd(8) has a heading \".SS %s... (any method)\"",
           r->path);
        return;
    }
    for (unsigned m = 0; m < 64; m++) {
        /* HEAD is GET without the body: the page says "also HEAD". */
        if (!(r->methods & HTTP_ROUTE_METHOD(m)) || m == HTTP_HEAD)
            continue;
        const char *name = http_method_str((enum http_method)m);
        ok(has_heading(api, name, r), "ratelimitd(8) has a heading \".SS %s %s\"", name, r->path);
    }
}

/* Every heading naming a path (".SS POST /check", ".SS /auth/...") is a
 * row of the table that takes the method it names. */
static void test_headings_served(const char *api)
{
    const unsigned every_role = HTTP_ROLE_CHECKS | HTTP_ROLE_ADMIN | HTTP_ROLE_KEYS;
    long headings = 0;
    for (const char *at = api; (at = strstr(at, "\n.SS ")) != NULL; at++) {
        const char *line = at + strlen("\n.SS "), *path = line;
        char method[16] = "", where[128];
        size_t n = strspn(line, "ABCDEFGHIJKLMNOPQRSTUVWXYZ");
        if (n > 0 && n < sizeof method && line[n] == ' ' && line[n + 1] == '/') {
            snprintf(method, sizeof method, "%.*s", (int)n, line);
            path = line + n + 1;
        } else if (*line != '/') {
            continue; /* a heading of its own ("Error codes") */
        }
        snprintf(where, sizeof where, "%.*s", (int)strcspn(path, " \\\n"), path);
        const struct http_route *r = http_routes_find(where, every_role);
        int served = r != NULL;
        for (unsigned m = 0; served && method[0] && m < 64; m++)
            if (strcmp(http_method_str((enum http_method)m), method) == 0)
                served = http_route_allows(r, (enum http_method)m);
        ok(served, "ratelimitd(8)'s heading \"%.*s\" is served", (int)strcspn(line, "\n"), line);
        headings++;
    }
    ok(headings >= 10, "ratelimitd(8)'s HTTP API has its headings (%ld)", headings);
}

static void test_routes_documented(const char *man)
{
    static char api[65536];
    if (!ok(http_api_section(man, api, sizeof api), "ratelimitd(8) has an HTTP API section"))
        return;
    http_routes_foreach(check_route_documented, api);
    test_headings_served(api);
}

/* ---- error codes: request_error.c's table and the docs' lists ---------------- */

/* Codes with their statuses (0: the list gives none), a pair per row. */
#define MAX_CODES 64
struct codes {
    char name[MAX_CODES][48];
    int status[MAX_CODES];
    size_t n;
};

static void add_code(struct codes *c, const char *name, size_t len, int status)
{
    if (c->n < MAX_CODES) {
        snprintf(c->name[c->n], sizeof c->name[0], "%.*s", (int)len, name);
        c->status[c->n++] = status;
    }
}

static void collect_code(enum request_code code, const char *name, int status, void *arg)
{
    if (ok(name && *name && status >= 400 && status < 600, "the error table's row %d is a code",
           (int)code))
        add_code(arg, name, strlen(name), status);
}

/* Whether c has the code name with status (0 on either side: any). */
static int has_code(const struct codes *c, const char *name, int status)
{
    for (size_t i = 0; i < c->n; i++)
        if (strcmp(c->name[i], name) == 0 && (!status || !c->status[i] || c->status[i] == status))
            return 1;
    return 0;
}

/* ratelimitd(8)'s entries between the "errors:" marks: ".TP", then
 * ".BR code \" (400)\"", each status on that line a pair (a code listed
 * without one is -1, which no row has). */
static void man_codes(const char *man, struct codes *out)
{
    const char *at = man ? strstr(man, ".\\\" errors: begin\n") : NULL;
    const char *end = at ? strstr(at, ".\\\" errors: end\n") : NULL;
    while (at && end && (at = strstr(at, "\n.TP\n.B")) != NULL && at < end) {
        const char *name = strchr(at + strlen("\n.TP\n.B"), ' ') + 1;
        size_t len = strcspn(name, " \n"), had = out->n;
        const char *eol = name + strcspn(name, "\n");
        for (const char *d = name + len; d < eol; d++)
            if (d[0] >= '1' && d[0] <= '5' && strspn(d, "0123456789") == 3)
                add_code(out, name, len, (int)strtol(d, NULL, 10)), d += 2;
        if (out->n == had)
            add_code(out, name, len, -1);
        at = eol;
    }
}

/* docs/openapi.yaml's ErrorCode enum ("        - code" lines), no status. */
static void openapi_codes(const char *api, struct codes *out)
{
    static const char head[] = "\n    ErrorCode:\n      enum:\n";
    const char *at = api ? strstr(api, head) : NULL;
    for (at = at ? at + strlen(head) - 1 : NULL; at && strncmp(at, "\n        - ", 11) == 0;
         at += 11 + strcspn(at + 11, "\n"))
        add_code(out, at + 11, strcspn(at + 11, "\n"), 0);
}

/* docs/http-api.md's table under "## Errors": "| 400 | `code` | when |". */
static void markdown_codes(const char *md, struct codes *out)
{
    const char *at = md ? strstr(md, "\n## Errors\n") : NULL;
    const char *end = at ? strstr(at + 1, "\n## ") : NULL;
    for (; at && end && (at = strstr(at + 1, "\n| ")) != NULL && at < end;) {
        char *after;
        long status = strtol(at + 3, &after, 10);
        if (status > 0 && strncmp(after, " | `", 4) == 0)
            add_code(out, after + 4, strcspn(after + 4, "`\n"), (int)status);
    }
}

/* "code (400)" ("code (-1)": listed without a status), or "code" for a
 * list without statuses. */
static const char *code_text(const struct codes *c, size_t i, char *out, size_t size)
{
    snprintf(out, size, "%s (%d)", c->name[i], c->status[i]);
    return c->status[i] ? out : c->name[i];
}

/* A list names every code of the table (with its status, when the list
 * gives statuses) and no code or status the table lacks. */
static void test_codes(const struct codes *table, const struct codes *list, const char *name)
{
    char what[80];
    ok(list->n >= 20, "%s lists the error codes (%zu)", name, list->n);
    for (size_t i = 0; i < table->n; i++)
        ok(has_code(list, table->name[i], table->status[i]), "%s lists %s", name,
           code_text(table, i, what, sizeof what));
    for (size_t i = 0; i < list->n; i++)
        ok(has_code(table, list->name[i], list->status[i]), "%s: %s is in the error table", name,
           code_text(list, i, what, sizeof what));
}

static void test_error_codes(const char *dir, const char *man)
{
    static struct codes table, in_man, in_api, in_md;
    char *api = slurp(dir, "docs/openapi.yaml"), *md = slurp(dir, "docs/http-api.md");
    request_codes_foreach(collect_code, &table);
    man_codes(man, &in_man);
    test_codes(&table, &in_man, "ratelimitd(8)");
    openapi_codes(api, &in_api);
    test_codes(&table, &in_api, "docs/openapi.yaml (ErrorCode)");
    markdown_codes(md, &in_md);
    test_codes(&table, &in_md, "docs/http-api.md (Errors)");
    free(api);
    free(md);
}

/* ---- one version: configure.ac, CHANGELOG.md, debian/changelog ---------------- */

/* CHANGELOG.md's newest release: the text after the first "\n## [" that
 * is not "[Unreleased]", up to "]", into out; "" when there is none. */
static void newest_release(const char *changelog, char *out, size_t size)
{
    out[0] = '\0';
    for (const char *p = changelog; p && (p = strstr(p, "\n## [")) != NULL; p++) {
        p += strlen("\n## [");
        size_t n = strcspn(p, "]\n");
        if (strncmp(p, "Unreleased]", strlen("Unreleased]")) == 0 || p[n] != ']')
            continue;
        snprintf(out, size, "%.*s", (int)n, p);
        return;
    }
}

static void test_versions(const char *dir)
{
    char *ac = slurp(dir, "configure.ac");
    char *changelog = slurp(dir, "CHANGELOG.md");
    char *deb = slurp(dir, "debian/changelog");
    char want[128], newest[128];

    snprintf(want, sizeof want, "AC_INIT([ratelimitd], [%s]", PACKAGE_VERSION);
    ok(ac && strstr(ac, want), "configure.ac: %s (this build's version)", want);
    ok(changelog && strstr(changelog, "\n## [Unreleased]\n"), "CHANGELOG.md has [Unreleased]");
    newest_release(changelog, newest, sizeof newest);
    is_str(newest, PACKAGE_VERSION, "CHANGELOG.md's newest release is configure.ac's version");
    snprintf(want, sizeof want, "\n## [%s] - ", PACKAGE_VERSION);
    const char *date = changelog ? strstr(changelog, want) : NULL;
    ok(date && strspn(date + strlen(want), "0123456789-") == 10, "CHANGELOG.md: %sYYYY-MM-DD",
       want + 1);
    snprintf(want, sizeof want, "ratelimitd (%s) ", PACKAGE_VERSION);
    ok(deb && strncmp(deb, want, strlen(want)) == 0, "debian/changelog starts with %s", want);
    snprintf(want, sizeof want, "\nARG VERSION=%s\n", PACKAGE_VERSION);
    ok(file_has(dir, "docker/Dockerfile", want), "docker/Dockerfile's image label: ARG VERSION=%s",
       PACKAGE_VERSION);
    free(ac);
    free(changelog);
    free(deb);
}

int main(void)
{
    const char *dir = getenv("RL_SRCDIR") ? getenv("RL_SRCDIR") : ".";
    struct docs d = {slurp(dir, "docs/configuration.md"), slurp(dir, "conf/ratelimitd.yaml"),
                     slurp(dir, "docs/operations.md")};
    char *man5 = slurp(dir, "man/ratelimitd.yaml.5.in"), *man8 = slurp(dir, "man/ratelimitd.8.in");
    static struct table tb;

    if (ok(d.reference && d.example && man5 && man8,
           "docs/configuration.md, conf/ratelimitd.yaml and the man pages are readable")) {
        config_foreach_field(check_field, &d);
        config_foreach_field(collect_field, &tb);
        ok(tb.n > 60 && tb.n < MAX_PATHS, "the table has its fields (%zu)", tb.n);
        test_marks(&tb, d.reference, man5);
        for (int restart = 1; restart >= 0; restart--) {
            test_list(&tb, "docs/configuration.md", d.reference, 0, restart);
            test_list(&tb, "ratelimitd(8)", man8, 1, restart);
            test_list(&tb, "ratelimitd.yaml(5)", man5, 1, restart);
        }
        test_known(d.reference, man5);
    }
    test_routes_documented(man8);
    test_error_codes(dir, man8);
    test_stop_timeouts(dir, &d);
    test_file_docs(dir);
    test_versions(dir);
    free(d.reference);
    free(d.example);
    free(d.operations);
    free(man5);
    free(man8);
    return tap_done();
}
