/*
 * test_docs.c: every field the policy file accepts is documented in the
 * README's reference (as `path`) and shown in conf/ratelimitd.yaml (as
 * "name:"). A new field without docs fails here.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
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

int main(void)
{
    const char *dir = getenv("RL_SRCDIR") ? getenv("RL_SRCDIR") : ".";
    struct docs d = {slurp(dir, "README.md"), slurp(dir, "conf/ratelimitd.yaml")};
    if (ok(d.readme && d.example, "README.md and conf/ratelimitd.yaml are readable"))
        config_foreach_field(check_field, &d);
    free(d.readme);
    free(d.example);
    return tap_done();
}
