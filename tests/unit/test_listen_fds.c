/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_listen_fds.c: the sockets passed at start (listen_fds.h), read from
 * the environment as systemd sets it, with sockets placed at 3.. in this
 * process: none passed, LISTEN_PID another's, bad variables; matched by
 * name (over the address), by address, a socket matched to nothing, a
 * field not passed, a hand-over's socket elsewhere, a descriptor that is no
 * listening socket; workers taking one socket each, then sharing; the
 * bound sockets recorded for a hand-over. Built twice: test_listen_fds
 * reads through libsystemd (when the build has it), test_listen_fds_env
 * through listen_fds.c's own reading, so both readings answer the same.
 */
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "lib/listen.h"
#include "lib/listen_fds.h"
#include "tap.h"

#define MAX_PASSED 3

/* A TCP socket on 127.0.0.1, listening (or not: a bound one only), its
 * port in *port. */
static int tcp_socket(int listening, int *port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) < 0 ||
        (listening && listen(fd, 8) < 0) || getsockname(fd, (struct sockaddr *)&a, &len) < 0) {
        perror("socket");
        exit(2);
    }
    *port = ntohs(a.sin_port);
    return fd;
}

/* The port fd is bound to. */
static int port_of(int fd)
{
    struct sockaddr_in a;
    socklen_t len = sizeof a;
    return getsockname(fd, (struct sockaddr *)&a, &len) < 0 ? -1 : ntohs(a.sin_port);
}

/* Places fds[0..n) at 3.. and sets the variables as systemd does (pid: 0
 * for this process's). */
static void pass(const int *fds, int n, const char *names, long pid)
{
    int high[MAX_PASSED];
    for (int i = 0; i < n; i++)
        high[i] = fcntl(fds[i], F_DUPFD, 100);
    for (int i = 0; i < n; i++)
        if (fds[i] < 3 || fds[i] >= 3 + n)
            close(fds[i]);
    for (int i = 0; i < n; i++) {
        dup2(high[i], 3 + i);
        close(high[i]);
    }
    char v[32];
    snprintf(v, sizeof v, "%ld", pid ? pid : (long)getpid());
    setenv("LISTEN_PID", v, 1);
    snprintf(v, sizeof v, "%d", n);
    setenv("LISTEN_FDS", v, 1);
    if (names)
        setenv("LISTEN_FDNAMES", names, 1);
    else
        unsetenv("LISTEN_FDNAMES");
}

/* The fields a policy file sets: listen and admin_listen at these ports
 * (0: unset). */
struct setting {
    char listen[32], admin[32];
    struct listen_field f[3];
};

static void set_fields(struct setting *st, int listen_port, int admin_port)
{
    snprintf(st->listen, sizeof st->listen, "127.0.0.1:%d", listen_port);
    snprintf(st->admin, sizeof st->admin, "127.0.0.1:%d", admin_port);
    st->f[0] = (struct listen_field){"listen", st->listen};
    st->f[1] = (struct listen_field){"admin_listen", admin_port ? st->admin : NULL};
    st->f[2] = (struct listen_field){"grpc_listen", NULL};
}

/* Inherits with fields; returns the count, *s the set (the caller frees). */
static int inherit(struct listen_fds **s, const struct setting *st, int exact, char *err)
{
    *s = listen_fds_new();
    err[0] = '\0';
    return listen_fds_inherit(*s, st->f, 3, exact, err, 256);
}

static void test_none_and_not_ours(void)
{
    struct setting st;
    struct listen_fds *s;
    char err[256];
    set_fields(&st, 1, 0);
    unsetenv("LISTEN_PID");
    unsetenv("LISTEN_FDS");
    is_int(inherit(&s, &st, 0, err), 0, "nothing passed: 0 sockets");
    char e2[64];
    int own;
    is_int(listen_fds_take(s, "listen", &own, e2, sizeof e2), -1,
           "and listen is bound by the caller");
    listen_fds_free(s);

    int port, fd = tcp_socket(1, &port);
    pass(&fd, 1, "listen", (long)getpid() + 1);
    set_fields(&st, port, 0);
    is_int(inherit(&s, &st, 0, err), 0, "LISTEN_PID another process's: 0 sockets");
    ok(!getenv("LISTEN_PID") && !getenv("LISTEN_FDS"), "and the variables are gone");
    ok(fcntl(3, F_GETFD) >= 0, "the descriptor left alone (another's)");
    listen_fds_free(s);
    close(3);

    setenv("LISTEN_PID", "x1", 1);
    setenv("LISTEN_FDS", "1", 1);
    is_int(inherit(&s, &st, 0, err), -1, "LISTEN_PID not a number: an error");
    ok(strstr(err, "cannot read LISTEN_FDS") != NULL, "saying so: %s", err);
    listen_fds_free(s);
}

static void test_matching(void)
{
    struct setting st;
    struct listen_fds *s;
    char err[256], e2[64];
    int own;
    int p1, p2, fds[2];
    fds[0] = tcp_socket(1, &p1);
    fds[1] = tcp_socket(1, &p2);
    /* By name: the name wins over the address the field says. */
    pass(fds, 1, "listen", 0);
    set_fields(&st, p2, 0);
    is_int(inherit(&s, &st, 0, err), 1, "one socket named listen: taken (%s)", err);
    int fd = listen_fds_take(s, "listen", &own, e2, sizeof e2);
    is_int(port_of(fd), p1, "by name: listen gets it, at its own port");
    is_int(own, 0, "systemd's: its socket file is not this process's to remove");
    ok(fcntl(fd, F_GETFL) & O_NONBLOCK, "made non-blocking");
    ok(fcntl(3, F_GETFD) & FD_CLOEXEC, "and close-on-exec");
    close(fd);
    listen_fds_free(s);
    ok(fcntl(3, F_GETFD) < 0, "freeing the set closes the passed socket");

    /* By address: no names, admin_listen's passed first. */
    fds[0] = tcp_socket(1, &p1);
    fds[1] = tcp_socket(1, &p2);
    pass(fds, 2, NULL, 0);
    set_fields(&st, p2, p1);
    is_int(inherit(&s, &st, 0, err), 2, "two sockets without names: taken (%s)", err);
    fd = listen_fds_take(s, "listen", &own, e2, sizeof e2);
    is_int(port_of(fd), p2, "by address: listen gets the one at its address");
    close(fd);
    fd = listen_fds_take(s, "admin_listen", &own, e2, sizeof e2);
    is_int(port_of(fd), p1, "and admin_listen the other");
    close(fd);
    listen_fds_free(s);
}

static void test_errors(void)
{
    struct setting st;
    struct listen_fds *s;
    char err[256];
    int p1, p2, p3, fds[2];
    fds[0] = tcp_socket(1, &p1);
    fds[1] = tcp_socket(1, &p2);
    pass(fds, 2, "listen:extra", 0);
    set_fields(&st, p1, 0);
    is_int(inherit(&s, &st, 0, err), -1, "a socket matched to no field: an error");
    ok(strstr(err, "passed socket 4 (name extra) matches none") != NULL, "naming it: %s", err);
    listen_fds_free(s);
    ok(fcntl(3, F_GETFD) < 0 && fcntl(4, F_GETFD) < 0, "both closed once the set is freed");

    fds[0] = tcp_socket(1, &p1);
    pass(fds, 1, "listen", 0);
    set_fields(&st, p1, 9);
    is_int(inherit(&s, &st, 0, err), -1, "admin_listen set and not passed: an error");
    ok(strstr(err, "admin_listen 127.0.0.1:9: no socket was passed") != NULL, "naming it: %s", err);
    listen_fds_free(s);

    close(tcp_socket(1, &p3)); /* a port other than p1's */
    fds[0] = tcp_socket(1, &p1);
    pass(fds, 1, "listen", 0);
    set_fields(&st, p3, 0);
    is_int(inherit(&s, &st, 1, err), -1, "a hand-over's listen bound elsewhere: an error");
    ok(strstr(err, "needs a restart, not a hand-over") != NULL, "saying why: %s", err);
    listen_fds_free(s);

    fds[0] = tcp_socket(0, &p1);
    pass(fds, 1, "listen", 0);
    set_fields(&st, p1, 0);
    is_int(inherit(&s, &st, 0, err), -1, "a socket not listening: an error");
    ok(strstr(err, "is not a listening stream socket") != NULL, "saying so: %s", err);
    listen_fds_free(s);

    fds[0] = tcp_socket(1, &p1);
    fds[1] = tcp_socket(1, &p2);
    pass(fds, 2, "listen", 0);
    set_fields(&st, p1, p2); /* the second would match admin_listen by address */
    is_int(inherit(&s, &st, 0, err), -1, "fewer names than sockets: an error");
    listen_fds_free(s);
    close(3);
    close(4);
}

static void test_workers_and_handover(void)
{
    struct setting st;
    struct listen_fds *s;
    char err[256], e2[64];
    int own;
    int p1, p2, fds[1];
    fds[0] = tcp_socket(1, &p1);
    pass(fds, 1, "listen", 0);
    set_fields(&st, p1, 0);
    is_int(inherit(&s, &st, 0, err), 1, "one socket for listen");
    int a = listen_fds_take(s, "listen", &own, e2, sizeof e2);
    int b = listen_fds_take(s, "listen", &own, e2, sizeof e2);
    ok(a >= 0 && b >= 0 && a != b && port_of(a) == p1 && port_of(b) == p1,
       "two workers share it, each with a copy of its own");
    listen_fds_free(s);
    fds[0] = fcntl(a, F_DUPFD, 3);
    pass(fds, 1, "listen", 0);
    is_int(inherit(&s, &st, 1, err), 1, "a hand-over's socket for listen (%s)", err);
    close(listen_fds_take(s, "listen", &own, e2, sizeof e2));
    is_int(own, 1, "a hand-over's: its socket file is this process's now");
    close(a);
    close(b);
    int bound = tcp_socket(1, &p2);
    is_int(listen_fds_add(s, "admin_listen", bound, e2, sizeof e2), 0, "a bound socket recorded");
    is_int(listen_fds_count(s), 2, "the set holds both, for a hand-over");
    is_str(listen_fds_field(s, 1), "admin_listen", "with its field");
    is_int(listen_fds_take(s, "admin_listen", &own, e2, sizeof e2), -1,
           "a bound one is not taken by the workers (they bound it)");
    ok(!listen_fds_is_handed_over(s), "not handed over yet");
    int copy = listen_fds_fd(s, 1);
    listen_fds_handed_over(s);
    ok(listen_fds_is_handed_over(s) && listen_fds_count(s) == 0 && fcntl(copy, F_GETFD) < 0,
       "handed over: the copies closed, the socket files the next process's");
    close(bound);
    listen_fds_free(s);
}

int main(void)
{
    test_none_and_not_ours();
    test_matching();
    test_errors();
    test_workers_and_handover();
    return tap_done();
}
