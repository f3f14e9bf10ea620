/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_redis_conn.c: redis_conn against a scripted fake server on a unix
 * socket in a temp dir, both on one event loop: AUTH and SELECT first,
 * pipelined replies in order, pushes, a setup error dropping the
 * connection, every call completed exactly once on loss (with callbacks
 * that send and drop while the queue is being emptied), a drop from a
 * reply callback with more replies already read, a protocol error, free
 * with calls waiting, reconnection after a refused connect, and the
 * connect deadline over a TLS handshake the server never answers.
 */
#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "backend/redis/redis_conn.h"
#include "backend/redis/redis_tls.h"
#include "config/config.h"
#include "lib/util.h"
#include "tap.h"

static struct event_base *base;
static const struct logger lg = {.level = LOG_LVL_ERROR + 1}; /* silent */

/* ---- the fake server: one client at a time ---- */

static int listen_fd = -1;
static struct event *accept_ev;
static struct bufferevent *server; /* the accepted client, or NULL */
static char received[4096];        /* what the client sent, as text */
static size_t nreceived;
static int accepts;

static void server_read(struct bufferevent *bev, void *arg)
{
    struct evbuffer *in = bufferevent_get_input(bev);
    size_t n = evbuffer_get_length(in);
    if (n > sizeof received - 1 - nreceived)
        n = sizeof received - 1 - nreceived;
    evbuffer_remove(in, received + nreceived, n);
    nreceived += n;
    received[nreceived] = '\0';
}

static void server_event(struct bufferevent *bev, short what, void *arg)
{
    if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR)) {
        bufferevent_free(bev);
        server = NULL;
    }
}

static void on_accept(evutil_socket_t fd, short what, void *arg)
{
    int c = accept(fd, NULL, NULL);
    if (c < 0)
        return;
    evutil_make_socket_nonblocking(c);
    if (server)
        bufferevent_free(server);
    server = bufferevent_socket_new(base, c, BEV_OPT_CLOSE_ON_FREE);
    bufferevent_setcb(server, server_read, NULL, server_event, NULL);
    bufferevent_enable(server, EV_READ | EV_WRITE);
    nreceived = 0;
    received[0] = '\0';
    accepts++;
}

static void server_listen(const char *path)
{
    struct sockaddr_un un = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof un.sun_path) {
        printf("Bail out! socket path too long\n");
        exit(1);
    }
    memcpy(un.sun_path, path, strlen(path) + 1);
    listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0);
    if (listen_fd < 0 || bind(listen_fd, (struct sockaddr *)&un, sizeof un) < 0 ||
        listen(listen_fd, 8) < 0) {
        printf("Bail out! cannot listen on %s: %s\n", path, strerror(errno));
        exit(1);
    }
    accept_ev = event_new(base, listen_fd, EV_READ | EV_PERSIST, on_accept, NULL);
    event_add(accept_ev, NULL);
}

static void server_send(const char *resp)
{
    bufferevent_write(server, resp, strlen(resp));
}

static void server_close(void)
{
    if (server)
        bufferevent_free(server);
    server = NULL;
}

/* Runs the loop until cond() holds, for at most 3 s. */
static int run_until(int (*cond)(void))
{
    int64_t end = util_monotonic_us() + 3000000;
    while (!cond() && util_monotonic_us() < end) {
        struct timeval tv = {0, 10000};
        event_base_loopexit(base, &tv);
        event_base_dispatch(base);
    }
    return cond();
}

/* ---- the client's view ---- */

static int ups, downs;
static char last_down[300];
static int calls_done; /* completions seen */
static int calls_null; /* of which NULL */
static char order[64]; /* one letter per completion: its arg's tag */
static int pushes;
static struct redis_conn *conn;

static void on_up(void *arg, struct redis_conn *c)
{
    ups++;
}

static void on_down(void *arg, struct redis_conn *c, const char *why)
{
    downs++;
    snprintf(last_down, sizeof last_down, "%s", why);
}

static void on_push(void *arg, redisReply *r)
{
    pushes++;
}

static void record(void *arg, redisReply *r)
{
    size_t n = strlen(order);
    if (n < sizeof order - 1) {
        order[n] = *(const char *)arg;
        order[n + 1] = '\0';
    }
    calls_done++;
    if (!r)
        calls_null++;
}

/* Completes like record, and on a NULL reply also sends (which must be
 * refused) and drops (a no-op when down): the reentrancy a loss allows. */
static int resend_rc = 99;
static void record_and_reenter(void *arg, redisReply *r)
{
    record(arg, r);
    if (!r) {
        resend_rc = redis_conn_send(conn, "*1\r\n$4\r\nPING\r\n", 14, record, "z");
        redis_conn_drop(conn, "again");
    }
}

/* Drops the connection from inside its reply. */
static void record_and_drop(void *arg, redisReply *r)
{
    record(arg, r);
    if (r)
        redis_conn_drop(conn, "dropped by a callback");
}

static int is_up(void)
{
    return ups > 0 && redis_conn_is_up(conn) && server != NULL;
}
static int has_setup(void)
{
    return strstr(received, "SELECT") != NULL;
}
static int got_ping(void)
{
    return strstr(received, "PING") != NULL;
}
static int three_done(void)
{
    return calls_done >= 3;
}
static int one_push(void)
{
    return pushes >= 1;
}
static int is_down(void)
{
    return downs > 0;
}
static int accepts_before; /* accepts when the connection was lost */
static int reconnected(void)
{
    return accepts > accepts_before && ups >= 1 && redis_conn_is_up(conn) && server;
}

static void reset_counts(void)
{
    accepts_before = accepts;
    ups = downs = calls_done = calls_null = pushes = 0;
    order[0] = last_down[0] = '\0';
}

static const char *ping[] = {"PING"};
static const size_t ping_len[] = {4};

/* Three PINGs tagged tags[0..2], the first completing with first; waits
 * until the server has them. */
static void send_three(redis_reply_fn first, const char *tags)
{
    reset_counts();
    nreceived = 0;
    ok(redis_conn_command(conn, first, (void *)&tags[0], 1, ping, ping_len) == 0 &&
           redis_conn_command(conn, record, (void *)&tags[1], 1, ping, ping_len) == 0 &&
           redis_conn_command(conn, record, (void *)&tags[2], 1, ping, ping_len) == 0,
       "three PINGs queued");
    run_until(got_ping);
}

/* After a reconnection, one call whose reply is `bytes`, which the reader
 * must refuse: the connection drops and the call completes once, with
 * NULL, not with what followed. */
static void reply_drops(const char *bytes, const char *what)
{
    ok(run_until(reconnected), "reconnects");
    run_until(has_setup);
    server_send("+OK\r\n+OK\r\n");
    reset_counts();
    nreceived = 0;
    ok(redis_conn_command(conn, record, "p", 1, ping, ping_len) == 0, "a PING queued");
    run_until(got_ping);
    server_send(bytes);
    ok(run_until(is_down), "%s drops the connection", what);
    is_str(order, "p", "the waiting call completed once");
    is_int(calls_null, 1, "with NULL, not with what followed");
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN); /* as the daemon does (main.c) */
    base = event_base_new();
    char dir[] = "/tmp/rl-test-conn-XXXXXX";
    if (!mkdtemp(dir)) {
        printf("Bail out! mkdtemp\n");
        return 1;
    }
    char path[200];
    snprintf(path, sizeof path, "%s/redis.sock", dir);
    server_listen(path);

    struct redis_endpoint ep = {.unix_path = path, .password = "pw", .db = 3};
    struct redis_conn_events ev = {.up = on_up, .down = on_down, .push = on_push};
    conn = redis_conn_new(base, &lg, "data", &ep, &ev);
    char want_target[220];
    snprintf(want_target, sizeof want_target, "unix:%s", path);
    is_str(redis_conn_target(conn), want_target, "target names the unix socket");
    ok(redis_conn_send(conn, "*1\r\n$4\r\nPING\r\n", 14, record, "x") == -1,
       "a send before connecting is refused");

    /* AUTH and SELECT first, then what the owner sends. */
    redis_conn_connect(conn);
    ok(run_until(is_up), "connects; up called");
    ok(run_until(has_setup), "AUTH and SELECT sent");
    is_str(received, "*2\r\n$4\r\nAUTH\r\n$2\r\npw\r\n*2\r\n$6\r\nSELECT\r\n$1\r\n3\r\n",
           "AUTH password then SELECT db, first");
    server_send("+OK\r\n+OK\r\n");

    /* Pipelined: three calls, their replies in one write, in order. */
    nreceived = 0;
    ok(redis_conn_command(conn, record, "a", 1, ping, ping_len) == 0, "call a sent");
    ok(redis_conn_command(conn, record, "b", 1, ping, ping_len) == 0, "call b sent");
    ok(redis_conn_command(conn, record, "c", 1, ping, ping_len) == 0, "call c sent");
    ok(run_until(got_ping), "the server got the calls");
    server_send("+PONG\r\n:2\r\n$1\r\nc\r\n*3\r\n$7\r\nmessage\r\n$1\r\nq\r\n$1\r\nm\r\n");
    ok(run_until(three_done), "three replies");
    is_str(order, "abc", "completed in the order sent");
    is_int(calls_null, 0, "with their replies");
    ok(run_until(one_push), "a reply no call waits for is a push");

    /* Loss with calls waiting: each completes once with NULL (a callback
     * that sends and drops meanwhile changes nothing), then down. */
    send_three(record_and_reenter, "def");
    server_close();
    ok(run_until(is_down), "the loss is seen");
    is_str(order, "def", "every waiting call completed once, in order");
    is_int(calls_null, 3, "with NULL");
    is_int(resend_rc, -1, "a send from a completion during the loss is refused");
    is_int(downs, 1, "down called once");
    ok(!redis_conn_is_up(conn), "not up");

    /* It reconnects by itself, AUTH and SELECT again. */
    ok(run_until(reconnected), "reconnects after the backoff");
    ok(run_until(has_setup), "AUTH and SELECT again");
    server_send("+OK\r\n+OK\r\n");

    /* A drop from inside a reply, with the next replies already read:
     * they are not given to the calls, which complete with NULL. */
    send_three(record_and_drop, "ghi");
    server_send("+PONG\r\n+PONG\r\n+PONG\r\n");
    ok(run_until(three_done), "three completions");
    is_str(order, "ghi", "in order");
    is_int(calls_null, 2, "the two after the drop with NULL");
    is_str(last_down, "dropped by a callback", "down says why");

    /* AUTH refused: the connection is dropped, the SELECT completes
     * quietly, down names the command. */
    ok(run_until(reconnected), "reconnects");
    ok(run_until(has_setup), "AUTH and SELECT sent");
    reset_counts();
    server_send("-WRONGPASS invalid username-password pair\r\n+OK\r\n");
    ok(run_until(is_down), "AUTH's error drops the connection");
    ok(strncmp(last_down, "AUTH refused: WRONGPASS", 23) == 0, "down says AUTH: %s", last_down);

    /* Bytes that are not RESP: the reader's error drops the connection
     * (input never aborts the daemon), the waiting call completes with
     * NULL, and it reconnects as after any loss. */
    reply_drops("?this is not RESP\r\n+PONG\r\n", "a protocol error");
    ok(strncmp(last_down, "protocol error", 14) == 0, "down says why: %s", last_down);

    /* An array far larger than any reply (8 GB of element pointers): the
     * reader fails and the connection drops, instead of an allocation
     * aborting the daemon. */
    reply_drops("*1000000000\r\n:1\r\n", "a billion-element array");

    /* Free with a call waiting: it completes with NULL, no down. */
    ok(run_until(reconnected), "reconnects");
    run_until(has_setup);
    server_send("+OK\r\n+OK\r\n");
    reset_counts();
    ok(redis_conn_command(conn, record, "j", 1, ping, ping_len) == 0, "a PING queued");
    redis_conn_free(conn);
    is_str(order, "j", "free completes the waiting call");
    is_int(calls_null, 1, "with NULL");
    is_int(downs, 0, "and calls no down");

    /* Nothing listening: the connect fails, down is called, and it keeps
     * trying. */
    server_close();
    event_free(accept_ev);
    close(listen_fd);
    unlink(path);
    reset_counts();
    conn = redis_conn_new(base, &lg, "data", &ep, &ev);
    redis_conn_connect(conn);
    ok(run_until(is_down), "a refused connect calls down");
    ok(!redis_conn_is_up(conn), "not up");
    redis_conn_free(conn);

    /* TLS to a server that accepts and never answers the handshake: the
     * connect deadline covers the handshake, not only the TCP connect. */
    server_listen(path);
    struct redis_tls_config tcfg = {.verify = 1}; /* the system's CA store */
    char err[300];
    struct redis_tls *tls = redis_tls_new(&tcfg, err, sizeof err);
    ok(tls != NULL, "a TLS context: %s", tls ? "made" : err);
    struct redis_endpoint tep = {.unix_path = path, .tls = tls};
    reset_counts();
    nreceived = 0;
    int64_t t0 = util_monotonic_us();
    conn = redis_conn_new(base, &lg, "data", &tep, &ev);
    redis_conn_connect(conn);
    ok(run_until(is_down), "a handshake with no answer ends");
    int64_t took = util_monotonic_us() - t0;
    ok(accepts > accepts_before && nreceived > 0, "the server got the ClientHello");
    is_str(last_down, "connect timed out", "down says the connect timed out");
    ok(took >= 900000 && took < 2000000, "after the 1 s deadline (%lld us)", (long long)took);
    is_int(ups, 0, "never up");
    redis_conn_free(conn);
    redis_tls_free(tls);
    server_close();
    event_free(accept_ev);
    close(listen_fd);
    unlink(path);

    rmdir(dir);
    event_base_free(base);
    return tap_done();
}
