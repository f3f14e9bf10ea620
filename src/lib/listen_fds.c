/* SPDX-License-Identifier: Apache-2.0 */
/*
 * listen_fds.c: the process's listening sockets by field (listen_fds.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#ifdef HAVE_SYSTEMD
#include <systemd/sd-daemon.h>
#endif

#include "lib/listen.h"
#include "lib/listen_fds.h"

/* sd_listen_fds(3): the first passed descriptor. */
#define LISTEN_FDS_START 3

struct listen_fd {
    int fd;
    const char *field; /* a static name from the caller's fields, or the caller's */
    int passed;        /* given at start, not bound here */
    size_t taken;      /* copies listen_fds_take gave */
    int own_file;      /* passed by a hand-over: a unix socket's file is ours now */
};

struct listen_fds {
    struct listen_fd fds[LISTEN_FDS_MAX];
    size_t n;
    int handed_over;
};

struct listen_fds *listen_fds_new(void)
{
    return xcalloc(1, sizeof(struct listen_fds));
}

void listen_fds_free(struct listen_fds *s)
{
    if (!s)
        return;
    listen_fds_handed_over(s);
    free(s);
}

#ifndef HAVE_SYSTEMD
/* LISTEN_FDNAMES's n names into names[0..n), or every one "unknown" when
 * it is not set (as libsystemd). -EINVAL if it holds another count. */
static int split_names(const char *fdnames, int n, char **names)
{
    const char *p = fdnames;
    for (int i = 0; i < n; i++) {
        if (!fdnames) {
            names[i] = xstrdup("unknown");
            continue;
        }
        if (!p)
            return -EINVAL;
        const char *colon = strchr(p, ':');
        names[i] = xstrndup(p, colon ? (size_t)(colon - p) : strlen(p));
        p = colon ? colon + 1 : NULL;
    }
    return fdnames && p ? -EINVAL : n;
}
#endif

/* The passed descriptors' count and names (*names: NULL-terminated, the
 * caller frees each and the array), 0 when none are this process's, or a
 * negative errno. The variables are gone afterwards. */
static int passed_fds(char ***names)
{
#ifdef HAVE_SYSTEMD
    return sd_listen_fds_with_names(1, names);
#else
    /* The same reading as libsystemd's, for a build without it. */
    const char *pid = getenv("LISTEN_PID"), *count = getenv("LISTEN_FDS");
    char *end;
    long n = 0;
    *names = NULL;
    if (pid && count) {
        long p = strtol(pid, &end, 10);
        if (*end != '\0' || p <= 0)
            n = -EINVAL;
        else if (p == (long)getpid()) {
            n = strtol(count, &end, 10);
            n = *end != '\0' || n < 0 || n > INT_MAX - LISTEN_FDS_START ? -EINVAL : n;
        }
    }
    if (n > 0) {
        *names = xcalloc((size_t)n + 1, sizeof **names);
        n = split_names(getenv("LISTEN_FDNAMES"), (int)n, *names);
    }
    if (n < 0 && *names) {
        for (int i = 0; (*names)[i]; i++)
            free((*names)[i]);
        free(*names);
        *names = NULL;
    }
    unsetenv("LISTEN_PID");
    unsetenv("LISTEN_FDS");
    unsetenv("LISTEN_FDNAMES");
    return (int)n;
#endif
}

/* The field fd belongs to: the one its name names, else the one whose
 * address it is bound to; -1 if none. */
static int match(int fd, const char *name, const struct listen_field *fields, size_t n)
{
    for (size_t i = 0; name && i < n; i++)
        if (fields[i].addr && strcmp(name, fields[i].name) == 0)
            return (int)i;
    for (size_t i = 0; i < n; i++)
        if (fields[i].addr && listen_is_at(fd, fields[i].addr))
            return (int)i;
    return -1;
}

/* Checks that fd is a listening stream socket and readies it. */
static int adopt(int fd, const char *name, char *err, size_t errlen)
{
    int type = 0, acc = 0;
    socklen_t len = sizeof type, alen = sizeof acc;
    if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) < 0 || type != SOCK_STREAM ||
        getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &acc, &alen) < 0 || !acc) {
        snprintf(err, errlen, "passed descriptor %d (name %s) is not a listening stream socket", fd,
                 name ? name : "none");
        return -1;
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0 || fcntl(fd, F_SETFD, FD_CLOEXEC) < 0) {
        snprintf(err, errlen, "passed descriptor %d: %s", fd, strerror(errno));
        return -1;
    }
    return 0;
}

/* Every field set has a socket among those passed. */
static int all_passed(const struct listen_fds *s, const struct listen_field *fields, size_t n,
                      char *err, size_t errlen)
{
    for (size_t i = 0; i < n; i++) {
        size_t k = 0;
        while (k < s->n && strcmp(s->fds[k].field, fields[i].name) != 0)
            k++;
        if (fields[i].addr && k == s->n) {
            snprintf(err, errlen,
                     "%s %s: no socket was passed for it (LISTEN_FDS): give the socket unit a "
                     "ListenStream= with FileDescriptorName=%s, or unset the field",
                     fields[i].name, fields[i].addr, fields[i].name);
            return -1;
        }
    }
    return 0;
}

int listen_fds_inherit(struct listen_fds *s, const struct listen_field *fields, size_t n, int exact,
                       char *err, size_t errlen)
{
    char **names = NULL;
    int count = passed_fds(&names), rc = 0;
    if (count < 0) {
        snprintf(err, errlen, "cannot read LISTEN_FDS: %s", strerror(-count));
        return -1;
    }
    if (count > LISTEN_FDS_MAX) {
        snprintf(err, errlen, "LISTEN_FDS: %d sockets, more than %d", count, LISTEN_FDS_MAX);
        return -1;
    }
    for (int i = 0; i < count; i++) {
        int fd = LISTEN_FDS_START + i;
        const char *name = names ? names[i] : NULL;
        int f = rc < 0 ? -1 : adopt(fd, name, err, errlen) < 0 ? -2 : match(fd, name, fields, n);
        if (f == -1 && rc == 0)
            snprintf(err, errlen,
                     "passed socket %d (name %s) matches none of the fields set by name or "
                     "address; name it (FileDescriptorName=) listen, admin_listen or "
                     "grpc_listen",
                     fd, name ? name : "none");
        if (f >= 0 && exact && !listen_is_at(fd, fields[f].addr)) {
            snprintf(err, errlen,
                     "%s %s: the socket passed for it is bound elsewhere; a changed address "
                     "needs a restart, not a hand-over",
                     fields[f].name, fields[f].addr);
            f = -2;
        }
        if (f < 0) {
            rc = -1;
            close(fd);
            continue;
        }
        s->fds[s->n++] =
            (struct listen_fd){.fd = fd, .field = fields[f].name, .passed = 1, .own_file = exact};
    }
    for (int i = 0; names && names[i]; i++)
        free(names[i]);
    free(names);
    if (rc == 0 && count > 0 && all_passed(s, fields, n, err, errlen) < 0)
        rc = -1;
    return rc < 0 ? -1 : count;
}

int listen_fds_take(struct listen_fds *s, const char *field, int *own_file, char *err,
                    size_t errlen)
{
    /* The field's least taken socket: one a worker, then they share. */
    struct listen_fd *best = NULL;
    for (size_t i = 0; i < s->n; i++) {
        struct listen_fd *f = &s->fds[i];
        if (f->passed && strcmp(f->field, field) == 0 && (!best || f->taken < best->taken))
            best = f;
    }
    if (!best)
        return -1;
    int fd = fcntl(best->fd, F_DUPFD_CLOEXEC, 0);
    if (fd < 0) {
        snprintf(err, errlen, "%s: cannot copy the passed socket: %s", field, strerror(errno));
        return -2;
    }
    best->taken++;
    *own_file = best->own_file;
    return fd;
}

int listen_fds_add(struct listen_fds *s, const char *field, int fd, char *err, size_t errlen)
{
    if (s->n == LISTEN_FDS_MAX) {
        snprintf(err, errlen, "%s: more than %d listening sockets", field, LISTEN_FDS_MAX);
        return -1;
    }
    int copy = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (copy < 0) {
        snprintf(err, errlen, "%s: cannot copy the socket: %s", field, strerror(errno));
        return -1;
    }
    s->fds[s->n++] = (struct listen_fd){.fd = copy, .field = field};
    return 0;
}

size_t listen_fds_count(const struct listen_fds *s)
{
    return s->n;
}

int listen_fds_fd(const struct listen_fds *s, size_t i)
{
    return s->fds[i].fd;
}

const char *listen_fds_field(const struct listen_fds *s, size_t i)
{
    return s->fds[i].field;
}

int listen_fds_is_handed_over(const struct listen_fds *s)
{
    return s->handed_over;
}

void listen_fds_handed_over(struct listen_fds *s)
{
    s->handed_over = 1;
    for (size_t i = 0; i < s->n; i++)
        close(s->fds[i].fd);
    s->n = 0;
}
