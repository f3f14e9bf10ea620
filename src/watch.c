/* SPDX-License-Identifier: Apache-2.0 */
/*
 * watch.c: reloads on a change of the policy file's content, of the
 * envoyproxy/ratelimit files in the envoy_config directory, or of the
 * files the listeners' TLS blocks name (certificates, keys, client CAs).
 *
 * Any event in one of the directories arms a short timer (editors and ConfigMap
 * updates come as bursts of events); when it fires, the policy file's
 * content, each domain file's name and content and each TLS file's are hashed, and the
 * policies are reloaded only if the hash differs from the last one seen,
 * so unrelated files in the directories cause no reload.
 *
 * Does not own the reload: it tells its owner through the changed callback
 * (the server reloads), so that the watch knows no server and reload.c
 * alone knows both.
 */
#include <errno.h>
#include <event2/event.h>
#include <libgen.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <unistd.h>

#include "config/envoy_config.h"
#include "lib/log.h"
#include "lib/sha1.h"
#include "lib/timer.h"
#include "watch.h"

#define WATCH_SETTLE_US 100000
#define WATCH_MAX_FILE (16 << 20)

struct watch {
    struct event_base *base;
    char *config_path;
    struct logger *log;
    void (*changed)(void *arg);
    void *arg;
    int fd;
    struct event *readable;
    struct event *settle;
    char sha[41];    /* of the content last loaded or seen invalid */
    int file_wd;     /* the policy file's directory */
    int envoy_wd;    /* the envoy directory's, -1 if none (or file_wd's) */
    char *envoy_dir; /* the directory envoy_wd watches */
    /* Files a load reads besides (the listeners' certificates, keys and
     * CAs), and the watches of their directories (-1: none). */
    size_t nfiles;
    char *files[WATCH_MAX_FILES];
    int file_wds[WATCH_MAX_FILES];
};

#define WATCH_MASK                                                                                 \
    (IN_CLOSE_WRITE | IN_MOVED_TO | IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_ATTRIB)

/* The SHA1 of the file's content, or "" if it cannot be read. */
static void hash_file(const char *path, char out[41])
{
    out[0] = '\0';
    FILE *f = fopen(path, "rb");
    if (!f)
        return;
    char *buf = xmalloc(WATCH_MAX_FILE);
    size_t n = fread(buf, 1, WATCH_MAX_FILE, f);
    if (!ferror(f))
        sha1_hex(buf, n, out);
    fclose(f);
    free(buf);
}

/* Appends "<path> <sha1>\n" of one domain file to a growing list. */
struct listing {
    char *buf;
    size_t len;
};

static int add_to_listing(const char *path, const char *text, size_t len, void *arg)
{
    struct listing *l = arg;
    char sha[41];
    size_t n = strlen(path) + sizeof sha + 2;

    sha1_hex(text, len, sha);
    l->buf = xrealloc(l->buf, l->len + n);
    l->len += (size_t)snprintf(l->buf + l->len, n, "%s %s\n", path, sha);
    return 0;
}

/* The SHA1 of everything a load reads: the policy file, and the envoy
 * directory's domain files (names and contents); "" if the policy file
 * cannot be read. A directory that cannot be read hashes as such, so that
 * its return is a change. */
static void hash_inputs(const struct watch *w, char out[41])
{
    struct listing l = {NULL, 0};
    char err[256], sha[41];

    hash_file(w->config_path, out);
    if (!out[0] || (!w->envoy_dir && w->nfiles == 0))
        return;
    add_to_listing(w->config_path, out, strlen(out), &l);
    if (w->envoy_dir && envoy_config_each(w->envoy_dir, add_to_listing, &l, err, sizeof err) < 0)
        add_to_listing(err, "", 0, &l);
    /* A file that cannot be read counts as "" (the load will say why). */
    for (size_t i = 0; i < w->nfiles; i++) {
        hash_file(w->files[i], sha);
        add_to_listing(w->files[i], sha, strlen(sha), &l);
    }
    sha1_hex(l.buf, l.len, out);
    free(l.buf);
}

/* Whether another of the files' watches (not the one at skip) is wd:
 * inotify gives a directory one watch, however often it is added. */
static int shared_wd(const struct watch *w, int wd, size_t skip)
{
    for (size_t i = 0; i < w->nfiles; i++)
        if (i != skip && w->file_wds[i] == wd)
            return 1;
    return 0;
}

static void on_settled(evutil_socket_t fd, short what, void *arg)
{
    struct watch *w = arg;
    char sha[41];
    hash_inputs(w, sha);
    if (!sha[0] || strcmp(sha, w->sha) == 0)
        return; /* gone for a moment (a rename in progress) or unchanged */
    memcpy(w->sha, sha, sizeof sha);
    w->changed(w->arg);
}

static void on_readable(evutil_socket_t fd, short what, void *arg)
{
    struct watch *w = arg;
    char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
    /* Drain the queue; the events themselves do not matter, only that the
     * directory changed. */
    while (read(w->fd, buf, sizeof buf) > 0)
        ;
    timer_arm_us(w->settle, WATCH_SETTLE_US);
}

struct watch *watch_new(const struct watch_target *t, char *err, size_t errlen)
{
    struct watch *w = xcalloc(1, sizeof *w);
    w->base = t->base;
    w->config_path = xstrdup(t->config_path);
    w->log = t->log;
    w->changed = t->changed;
    w->arg = t->arg;
    w->fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    char *copy = xstrdup(t->config_path);
    const char *dir = dirname(copy);
    w->envoy_wd = -1;
    if (w->fd < 0 || (w->file_wd = inotify_add_watch(w->fd, dir, WATCH_MASK)) < 0) {
        snprintf(err, errlen, "watch: cannot watch %s: %s", dir, strerror(errno));
        free(copy);
        watch_free(w);
        return NULL;
    }
    free(copy);
    watch_follow(w, t->envoy_dir);
    /* No hash yet: the first change seen reloads even if the file changed
     * between config_load and now. */
    w->readable = event_new(w->base, w->fd, EV_READ | EV_PERSIST, on_readable, w);
    w->settle = evtimer_new(w->base, on_settled, w);
    if (!w->readable || !w->settle || event_add(w->readable, NULL) < 0) {
        snprintf(err, errlen, "watch: cannot register with the event loop");
        watch_free(w);
        return NULL;
    }
    return w;
}

void watch_follow(struct watch *w, const char *want)
{

    if (w == NULL || (want && w->envoy_dir && strcmp(want, w->envoy_dir) == 0) ||
        (!want && !w->envoy_dir))
        return;
    /* The same directory as the policy file's has the same watch: keep it. */
    if (w->envoy_wd >= 0 && w->envoy_wd != w->file_wd && !shared_wd(w, w->envoy_wd, SIZE_MAX))
        (void)inotify_rm_watch(w->fd, w->envoy_wd); /* gone with its directory: nothing to undo */
    w->envoy_wd = -1;
    free(w->envoy_dir);
    w->envoy_dir = want ? xstrdup(want) : NULL;
    if (want && (w->envoy_wd = inotify_add_watch(w->fd, want, WATCH_MASK)) < 0)
        log_event(w->log, LOG_LVL_WARN,
                  "watch: cannot watch the envoy_config directory; SIGHUP still reloads it",
                  "directory", want, "error", strerror(errno), NULL);
}

void watch_follow_files(struct watch *w, const char *const *files, size_t n)
{
    if (w == NULL)
        return;
    if (n > WATCH_MAX_FILES)
        n = WATCH_MAX_FILES;
    for (size_t i = 0; i < w->nfiles; i++) {
        if (w->file_wds[i] >= 0 && w->file_wds[i] != w->file_wd && w->file_wds[i] != w->envoy_wd &&
            !shared_wd(w, w->file_wds[i], i))
            (void)inotify_rm_watch(w->fd, w->file_wds[i]); /* as in watch_follow */
        free(w->files[i]);
    }
    w->nfiles = n;
    for (size_t i = 0; i < n; i++) {
        w->files[i] = xstrdup(files[i]);
        char *copy = xstrdup(files[i]);
        /* The directory, not the file: a rotation renames a new file over
         * the old one, or swaps a symlinked directory (a Kubernetes
         * Secret's ..data), and the old file's watch would see neither. */
        if ((w->file_wds[i] = inotify_add_watch(w->fd, dirname(copy), WATCH_MASK)) < 0)
            log_event(w->log, LOG_LVL_WARN,
                      "watch: cannot watch a certificate's directory; SIGHUP still reloads it",
                      "file", files[i], "error", strerror(errno), NULL);
        free(copy);
    }
}

void watch_free(struct watch *w)
{
    if (!w)
        return;
    for (size_t i = 0; i < w->nfiles; i++)
        free(w->files[i]);
    if (w->readable)
        event_free(w->readable);
    if (w->settle)
        event_free(w->settle);
    if (w->fd >= 0)
        close(w->fd);
    free(w->envoy_dir);
    free(w->config_path);
    free(w);
}
