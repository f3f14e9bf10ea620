/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_docs.c: every field the policy file accepts is documented in the
 * README's reference (as `path`) and shown in conf/ratelimitd.yaml (as
 * "name:"). A new field without docs fails here. And the stop timeouts that
 * ship (the systemd unit, ratelimitd(8), docker/compose.yaml, the
 * Dockerfile's advice, the Kubernetes grace periods) agree and exceed the
 * longest drain the code allows,
 * which the README and ratelimitd(8) state. The README's reference and
 * ratelimitd.yaml(5) say "changes only with a restart" of exactly the
 * fields whose row in the field table says so. Every test file is named in
 * docs/testing.md, and every source file of src/ has a row in
 * docs/architecture.md's table. The one version (configure.ac's AC_INIT)
 * is the newest release of CHANGELOG.md and of debian/changelog.
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "front/http/http.h"
#include "tap.h"

struct docs {
    char *readme;
    char *example;
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
    snprintf(quoted, sizeof quoted, "`%s`", path);
    ok(strstr(d->readme, quoted) != NULL, "README documents %s", quoted);
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
    const long drain = CONFIG_REDIS_TIMEOUT_MAX_US / 1000000 + HTTP_DRAIN_MAX_S;
    const long unit = number_after(dir, "systemd/ratelimitd.service.in", "\nTimeoutStopSec=");
    const long man = number_after(dir, "man/ratelimitd.8", "TimeoutStopSec=");
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
    snprintf(said, sizeof said, "at most `redis.timeout` + %d s", HTTP_DRAIN_MAX_S);
    ok(d->readme && strstr(d->readme, said), "README: %s", said);
    snprintf(said, sizeof said, "redis.timeout\nplus %d seconds", HTTP_DRAIN_MAX_S);
    ok(file_has(dir, "man/ratelimitd.8", said),
       "ratelimitd(8): the drain lasts at most redis.timeout plus %d seconds", HTTP_DRAIN_MAX_S);
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

/* A source file of src/, not a generated one (scripts_lua.c, protoc-c's). */
static int is_source_file(const char *path)
{
    return (has_suffix(path, ".c") || has_suffix(path, ".h")) && !has_suffix(path, "_lua.c") &&
           strstr(path, ".pb-c.") == NULL;
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

struct marks {
    const char *readme;
    const char *man;
};

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

/* The README's reference row of path ("| `path` |"), or NULL. Its mark, or
 * that of the section's row ("Every `redis.tls` field changes only with a
 * restart"). */
static int readme_marks(const char *readme, const char *path, int *found)
{
    char row[192], section[192], every[192];
    const char *at, *end, *dot = strrchr(path, '.');

    snprintf(row, sizeof row, "\n| `%s` |", path);
    if ((at = strstr(readme, row)) == NULL)
        return *found = 0, 0;
    *found = 1;
    end = strchr(at + 1, '\n');
    if (says_restart(at, end ? end : at + strlen(at)))
        return 1;
    if (dot == NULL)
        return 0;
    snprintf(section, sizeof section, "\n| `%.*s` |", (int)(dot - path), path);
    snprintf(every, sizeof every, "very `%.*s` field changes only with a restart",
             (int)(dot - path), path);
    at = strstr(readme, section);
    end = at ? strchr(at + 1, '\n') : NULL;
    return at && end && (at = strstr(at, every)) != NULL && at < end;
}

/* ratelimitd.yaml(5)'s entry ".TP\n.B path" up to the next .TP or .SS, or
 * that of its section ("Every field below changes only with a restart"). */
static const char *man_entry(const char *man, const char *path, const char **end)
{
    char head[192];
    const char *at, *tp, *ss;

    snprintf(head, sizeof head, ".TP\n.B %s\n", path);
    if ((at = strstr(man, head)) == NULL)
        return NULL;
    tp = strstr(at + strlen(head), ".TP\n");
    ss = strstr(at + strlen(head), ".SS");
    *end = tp && (!ss || tp < ss) ? tp : ss ? ss : at + strlen(at);
    return at;
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

static void check_restart_mark(const char *path, void *arg)
{
    const struct marks *m = arg;
    int restart = config_field_restart(path), found;
    int marked = readme_marks(m->readme, path, &found);

    if (found)
        ok(marked == restart, "README %s `%s` as changing only with a restart",
           restart ? "marks" : "does not mark", path);
    marked = man_marks(m->man, path, &found);
    if (found)
        ok(marked == restart, "ratelimitd.yaml(5) %s %s as changing only with a restart",
           restart ? "marks" : "does not mark", path);
    if (restart)
        ok(found, "ratelimitd.yaml(5) has an entry for %s", path);
}

static void test_restart_marks(const char *dir, const struct docs *d)
{
    struct marks m = {d->readme, slurp(dir, "man/ratelimitd.yaml.5")};

    if (ok(m.readme && m.man, "README.md and man/ratelimitd.yaml.5 are readable"))
        config_foreach_field(check_restart_mark, &m);
    free((char *)m.man);
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
    free(ac);
    free(changelog);
    free(deb);
}

int main(void)
{
    const char *dir = getenv("RL_SRCDIR") ? getenv("RL_SRCDIR") : ".";
    struct docs d = {slurp(dir, "README.md"), slurp(dir, "conf/ratelimitd.yaml")};
    if (ok(d.readme && d.example, "README.md and conf/ratelimitd.yaml are readable"))
        config_foreach_field(check_field, &d);
    test_stop_timeouts(dir, &d);
    test_file_docs(dir);
    test_restart_marks(dir, &d);
    test_versions(dir);
    free(d.readme);
    free(d.example);
    return tap_done();
}
