/*
 * watch.c: reloads on a change of the policy file's content.
 *
 * Any event in the directory arms a short timer (editors and ConfigMap
 * updates come as bursts of events); when it fires, the file's content is
 * hashed and the policies are reloaded only if the hash differs from the last
 * one seen, so unrelated files in the directory cause no reload.
 */
#include <errno.h>
#include <event2/event.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <unistd.h>

#include "reload.h"
#include "sha1.h"
#include "watch.h"

#define WATCH_SETTLE_US 100000
#define WATCH_MAX_FILE (16 << 20)

struct watch {
    struct server *srv;
    int fd;
    struct event *readable;
    struct event *settle;
    char sha[41]; /* of the content last loaded or seen invalid */
};

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

static void on_settled(evutil_socket_t fd, short what, void *arg)
{
    struct watch *w = arg;
    char sha[41];
    hash_file(w->srv->config_path, sha);
    if (!sha[0] || strcmp(sha, w->sha) == 0)
        return; /* gone for a moment (a rename in progress) or unchanged */
    memcpy(w->sha, sha, sizeof sha);
    reload_config(w->srv, "watch");
}

static void on_readable(evutil_socket_t fd, short what, void *arg)
{
    struct watch *w = arg;
    char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
    /* Drain the queue; the events themselves do not matter, only that the
     * directory changed. */
    while (read(w->fd, buf, sizeof buf) > 0)
        ;
    struct timeval tv = {.tv_sec = 0, .tv_usec = WATCH_SETTLE_US};
    evtimer_add(w->settle, &tv);
}

struct watch *watch_new(struct server *srv, char *err, size_t errlen)
{
    struct watch *w = xcalloc(1, sizeof *w);
    w->srv = srv;
    w->fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    char *copy = xstrdup(srv->config_path);
    const char *dir = dirname(copy);
    if (w->fd < 0 || inotify_add_watch(w->fd, dir,
                                       IN_CLOSE_WRITE | IN_MOVED_TO | IN_CREATE | IN_DELETE |
                                           IN_MOVED_FROM | IN_ATTRIB) < 0) {
        snprintf(err, errlen, "watch: cannot watch %s: %s", dir, strerror(errno));
        free(copy);
        watch_free(w);
        return NULL;
    }
    free(copy);
    /* No hash yet: the first change seen reloads even if the file changed
     * between config_load and now. */
    w->readable = event_new(srv->base, w->fd, EV_READ | EV_PERSIST, on_readable, w);
    w->settle = evtimer_new(srv->base, on_settled, w);
    if (!w->readable || !w->settle || event_add(w->readable, NULL) < 0) {
        snprintf(err, errlen, "watch: cannot register with the event loop");
        watch_free(w);
        return NULL;
    }
    return w;
}

void watch_free(struct watch *w)
{
    if (!w)
        return;
    if (w->readable)
        event_free(w->readable);
    if (w->settle)
        event_free(w->settle);
    if (w->fd >= 0)
        close(w->fd);
    free(w);
}
