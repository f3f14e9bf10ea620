/* SPDX-License-Identifier: Apache-2.0 */
/*
 * listen.c: listening sockets (listen.h). What a TCP address may be is
 * hostport.c's, the parser that checked the setting.
 */
#include <errno.h>
#include <netdb.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "lib/hostport.h"
#include "lib/listen.h"

#define LISTEN_BACKLOG 1024

/* Gives the socket file at path its mode and group; -1 with a message. */
static int set_perm(const char *path, const struct listen_perm *perm, char *err, size_t errlen)
{
    /* chown first: for a non-root owner, changing the group may clear mode
     * bits, and the mode written in the file must be the one that holds. */
    if (perm->gid >= 0 && chown(path, (uid_t)-1, (gid_t)perm->gid) < 0) {
        snprintf(err, errlen,
                 "cannot give %s to group %s: %s (the daemon must run as root or be "
                 "a member of that group)",
                 path, perm->group ? perm->group : "?", strerror(errno));
        return -1;
    }
    if (perm->mode >= 0 && chmod(path, (mode_t)perm->mode) < 0) {
        snprintf(err, errlen, "cannot chmod %s to %04o: %s", path, (unsigned)perm->mode,
                 strerror(errno));
        return -1;
    }
    return 0;
}

static int open_unix(const char *path, const struct listen_perm *perm, char *err, size_t errlen)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof sa.sun_path) {
        snprintf(err, errlen, "unix socket path too long: %s", path);
        return -1;
    }
    strcpy(sa.sun_path, path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
        snprintf(err, errlen, "socket: %s", strerror(errno));
        return -1;
    }
    struct stat st;
    if (lstat(path, &st) == 0 && S_ISSOCK(st.st_mode)) {
        int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        int live = probe >= 0 && connect(probe, (struct sockaddr *)&sa, sizeof sa) == 0;
        if (probe >= 0)
            close(probe);
        if (live) {
            snprintf(err, errlen, "%s is in use by another process", path);
            close(fd);
            return -1;
        }
        unlink(path);
    }
    if (bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
        snprintf(err, errlen, "cannot bind %s: %s", path, strerror(errno));
        close(fd);
        return -1;
    }
    /* The file is ours from bind on: on any failure below it goes too. */
    int ok = !perm || set_perm(path, perm, err, errlen) == 0;
    if (ok && listen(fd, LISTEN_BACKLOG) < 0) {
        snprintf(err, errlen, "cannot listen on %s: %s", path, strerror(errno));
        ok = 0;
    }
    if (!ok) {
        close(fd);
        unlink(path);
        return -1;
    }
    return fd;
}

/* The address a TCP setting resolves to, as open_tcp binds it; -1 if none. */
static int resolve_tcp(const char *addr, struct addrinfo **ai, char *err, size_t errlen)
{
    struct hostport hp;
    char port[8], msg[RL_ERRLEN];
    if (hostport_parse(addr, strlen(addr), 0, &hp, msg, sizeof msg) < 0) {
        snprintf(err, errlen, "bad address %s: %s", addr, msg);
        return -1;
    }
    snprintf(port, sizeof port, "%d", hp.port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC,
                             .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    int rc = getaddrinfo(hp.host, port, &hints, ai);
    if (rc != 0) {
        snprintf(err, errlen, "cannot resolve %s: %s", addr, gai_strerror(rc));
        return -1;
    }
    return 0;
}

static int open_tcp(const char *addr, int reuseport, char *err, size_t errlen)
{
    struct addrinfo *ai;
    if (resolve_tcp(addr, &ai, err, errlen) < 0)
        return -1;
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
    int one = 1;
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0 ||
        (reuseport && setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one) < 0) ||
        bind(fd, ai->ai_addr, ai->ai_addrlen) < 0 || listen(fd, LISTEN_BACKLOG) < 0) {
        snprintf(err, errlen, "cannot bind %s: %s", addr, strerror(errno));
        if (fd >= 0)
            close(fd);
        fd = -1;
    }
    freeaddrinfo(ai);
    return fd;
}

int listen_open(const char *addr, int reuseport, const struct listen_perm *perm, char *err,
                size_t errlen)
{
    if (strncmp(addr, "unix:", 5) == 0)
        return open_unix(addr + 5, perm, err, errlen);
    return open_tcp(addr, reuseport, err, errlen);
}

int listen_is_at(int fd, const char *addr)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    if (getsockname(fd, (struct sockaddr *)&ss, &len) < 0)
        return 0;
    if (strncmp(addr, "unix:", 5) == 0) {
        const struct sockaddr_un *un = (const struct sockaddr_un *)&ss;
        return ss.ss_family == AF_UNIX && len > offsetof(struct sockaddr_un, sun_path) &&
               strncmp(un->sun_path, addr + 5, sizeof un->sun_path) == 0;
    }
    struct addrinfo *ai;
    char err[RL_ERRLEN];
    if (resolve_tcp(addr, &ai, err, sizeof err) < 0)
        return 0;
    int same = ai->ai_addrlen == len && memcmp(ai->ai_addr, &ss, len) == 0;
    freeaddrinfo(ai);
    return same;
}

void listen_close(int fd, const char *addr)
{
    if (fd < 0)
        return;
    close(fd);
    if (addr && strncmp(addr, "unix:", 5) == 0)
        unlink(addr + 5);
}
