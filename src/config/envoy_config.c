/* SPDX-License-Identifier: Apache-2.0 */
/*
 * envoy_config.c: listing and reading the directory of envoyproxy/
 * ratelimit's YAML files. No YAML here: config_domains.c parses each file with the
 * same descriptor parser as the policy file's `domains:` section.
 *
 * The order is sorted by name so that a load is reproducible and "defined
 * twice" names the same two files every time.
 */
#include "config/envoy_config.h"

#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Writes a message into err; returns -1. */
__attribute__((format(printf, 3, 4))) static int fail(char *err, size_t errlen, const char *fmt,
                                                      ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return -1;
}

static int has_suffix(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n > m && strcmp(s + n - m, suffix) == 0;
}

static int name_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The file's whole text, NUL-terminated, in *out (the caller frees it). */
static int read_file(const char *path, char **out, size_t *outlen, char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    size_t len = 0, cap = 4096, got;
    char *buf;

    if (f == NULL)
        return fail(err, errlen, "%s: %s", path, strerror(errno));
    buf = xmalloc(cap);
    while ((got = fread(buf + len, 1, cap - len - 1, f)) > 0) {
        len += got;
        if (len > ENVOY_CONFIG_FILE_MAX)
            break;
        if (len == cap - 1)
            buf = xrealloc(buf, cap *= 2);
    }
    int bad = ferror(f);
    fclose(f); /* read-only: nothing to lose if close fails */
    if (bad || len > ENVOY_CONFIG_FILE_MAX) {
        if (bad)
            snprintf(err, errlen, "%s: cannot read it", path);
        else
            snprintf(err, errlen, "%s: larger than %d bytes", path, ENVOY_CONFIG_FILE_MAX);
        free(buf);
        return -1;
    }
    buf[len] = '\0';
    *out = buf;
    *outlen = len;
    return 0;
}

/* The names of the directory's domain files, sorted; *n of them. */
static int list_files(const char *dir, char ***names, size_t *n, char *err, size_t errlen)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    size_t cap = 16;
    int rc = 0;

    *n = 0;
    if (d == NULL)
        return fail(err, errlen, "%s: %s", dir, strerror(errno));
    *names = xcalloc(cap, sizeof **names);
    errno = 0;
    while (rc == 0 && (e = readdir(d)) != NULL) {
        char path[4096];
        struct stat st;

        if (e->d_name[0] == '.' ||
            !(has_suffix(e->d_name, ".yaml") || has_suffix(e->d_name, ".yml")))
            continue;
        if (snprintf(path, sizeof path, "%s/%s", dir, e->d_name) >= (int)sizeof path)
            rc = fail(err, errlen, "%s/%s: path too long", dir, e->d_name);
        else if (stat(path, &st) < 0)
            rc = fail(err, errlen, "%s: %s", path, strerror(errno));
        else if (!S_ISREG(st.st_mode))
            continue;
        else if (*n == ENVOY_CONFIG_FILES_MAX)
            rc = fail(err, errlen, "%s: more than %d domain files", dir, ENVOY_CONFIG_FILES_MAX);
        else {
            if (*n == cap)
                *names = xrealloc(*names, (cap *= 2) * sizeof **names);
            (*names)[(*n)++] = xstrdup(path);
        }
        errno = 0;
    }
    if (rc == 0 && errno != 0)
        rc = fail(err, errlen, "%s: %s", dir, strerror(errno));
    closedir(d);
    qsort(*names, *n, sizeof **names, name_cmp);
    return rc;
}

int envoy_config_each(const char *dir,
                      int (*fn)(const char *path, const char *text, size_t len, void *arg),
                      void *arg, char *err, size_t errlen)
{
    char **names = NULL;
    size_t n, i;
    int rc = list_files(dir, &names, &n, err, errlen);

    for (i = 0; rc == 0 && i < n; i++) {
        char *text = NULL;
        size_t len = 0;
        if ((rc = read_file(names[i], &text, &len, err, errlen)) == 0) {
            rc = fn(names[i], text, len, arg);
            free(text);
        }
    }
    for (i = 0; i < n; i++)
        free(names[i]);
    free(names);
    return rc;
}
