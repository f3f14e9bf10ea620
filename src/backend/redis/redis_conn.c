/* SPDX-License-Identifier: Apache-2.0 */
/*
 * redis_conn.c: one connection to one Redis server on a libevent
 * bufferevent (see redis_conn.h). Owns the bufferevent (and through it the
 * socket and the SSL), hiredis's reply reader, the FIFO of calls waiting
 * for their replies, the endpoint's strings, and two embedded timers: the
 * connect deadline and the reconnect backoff.
 *
 * Replies come in the order commands were written, so the FIFO's head is
 * always the call the next reply belongs to; a reply with no call waiting
 * is a push (pub/sub). AUTH and SELECT are written first on every
 * connection, ahead of whatever the up callback queues, and their failure
 * drops the connection: a connection on the wrong db or without AUTH must
 * never serve calls.
 *
 * Replies are built in the connection's arena (struct reply_arena), not
 * with a malloc per element as hiredis's own reader does: a batch's reply
 * is an array of arrays of integers, and its mallocs and frees were the
 * largest share of the daemon's instructions per check on the Redis path
 * (bench/instructions.py). The arena is emptied after each reply's
 * callback, which is as long as a reply lives (redis_conn.h).
 *
 * Reentrancy: callbacks may send and may drop. Every drop bumps gen, and
 * the read loop stops as soon as gen changed under it; a drop detaches the
 * FIFO before completing its calls, so a call sent from one of those
 * callbacks (refused: not connected) can never land in a queue being
 * emptied.
 */
#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/event.h>
#include <event2/event_struct.h>
#include <hiredis/hiredis.h>
#include <hiredis/read.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdalign.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "backend/redis/redis_conn.h"
#include "backend/redis/redis_tls.h"
#include "lib/timer.h"
#include "lib/util.h"

#define CONNECT_TIMEOUT_US 1000000 /* TCP connect and TLS handshake */
#define BACKOFF_MIN_US 50000
#define BACKOFF_MAX_US 2000000
#define CONNECT_LOG_INTERVAL_US 10000000 /* one "connect failed" line per connection */

enum conn_state { CONN_DOWN, CONN_CONNECTING, CONN_UP };

struct waiting_call {
    redis_reply_fn fn;
    void *arg;
};

/* A ring of waiting calls; cap is a power of two (or 0). */
struct call_fifo {
    struct waiting_call *v;
    size_t head, count, cap;
};

/* Where the reader's reply objects live: bump allocation in a first block
 * kept for the connection's life, the rare overflow (a large reply) in
 * blocks of their own, freed when the arena is emptied. */
#define ARENA_BLOCK 16384
struct arena_block {
    struct arena_block *next;
    size_t used, size;
    alignas(max_align_t) char mem[];
};
struct reply_arena {
    struct arena_block *first; /* NULL until the first reply */
    struct arena_block *extra; /* overflow blocks, freed by arena_reset */
};

struct redis_conn {
    struct event_base *base;
    const struct logger *log;
    char *role;
    struct redis_conn_events ev;

    /* The endpoint, owned copies. */
    char *host, *unix_path, *user, *password;
    int port, db;
    struct redis_tls *tls;
    char target[300];

    enum conn_state state;
    struct bufferevent *bev;
    redisReader *reader;
    struct reply_arena arena;
    struct call_fifo fifo;
    unsigned gen; /* bumped by every close: callbacks detect a drop */
    int replied;  /* a reply came on this connection (for the TLS error) */

    struct event connect_timer;
    struct event reconnect_timer;
    int64_t backoff_us;
    uint64_t rng;
    /* While the server stays unreachable the reconnects (every 50 ms to
     * 2 s) would log a line each: at most one per interval, the next one
     * saying how many were folded into it, and the "connected" line how
     * many attempts failed in all. */
    struct log_limit connect_log;
    uint64_t failed_connects;
};

static void close_conn(struct redis_conn *c, const char *why, int reconnect);

/* ---- the FIFO ---- */

static void fifo_push(struct call_fifo *f, redis_reply_fn fn, void *arg)
{
    if (f->count == f->cap) {
        size_t ncap = f->cap ? f->cap * 2 : 16;
        struct waiting_call *nv = xcalloc(ncap, sizeof *nv);
        for (size_t i = 0; i < f->count; i++)
            nv[i] = f->v[(f->head + i) & (f->cap - 1)];
        free(f->v);
        f->v = nv;
        f->head = 0;
        f->cap = ncap;
    }
    f->v[(f->head + f->count) & (f->cap - 1)] = (struct waiting_call){fn, arg};
    f->count++;
}

static struct waiting_call fifo_pop(struct call_fifo *f)
{
    struct waiting_call w = f->v[f->head];
    f->head = (f->head + 1) & (f->cap - 1);
    f->count--;
    return w;
}

/* Completes every call of f with NULL, then frees it. f was detached from
 * the connection first: calls sent from these callbacks go elsewhere. */
static void fifo_fail_all(struct call_fifo *f)
{
    while (f->count) {
        struct waiting_call w = fifo_pop(f);
        w.fn(w.arg, NULL);
    }
    free(f->v);
}

/* ---- the reply arena ---- */

static struct arena_block *block_new(size_t size)
{
    struct arena_block *b = xmalloc(sizeof *b + size);
    b->next = NULL;
    b->used = 0;
    b->size = size;
    return b;
}

static void *arena_alloc(struct reply_arena *a, size_t n)
{
    n = (n + alignof(max_align_t) - 1) & ~(alignof(max_align_t) - 1);
    if (!a->first)
        a->first = block_new(ARENA_BLOCK);
    struct arena_block *b = a->extra ? a->extra : a->first;
    if (b->size - b->used < n) {
        b = block_new(n > ARENA_BLOCK ? n : ARENA_BLOCK);
        b->next = a->extra;
        a->extra = b;
    }
    void *p = b->mem + b->used;
    b->used += n;
    return p;
}

/* Frees every reply built so far (and a partial one). */
static void arena_reset(struct reply_arena *a)
{
    while (a->extra) {
        struct arena_block *b = a->extra;
        a->extra = b->next;
        free(b);
    }
    if (a->first)
        a->first->used = 0;
}

static void arena_free(struct reply_arena *a)
{
    arena_reset(a);
    free(a->first);
    a->first = NULL;
}

/* The reader's object functions (hiredis's read.h), building the same
 * redisReply tree as its defaults, in the arena its privdata points to. */
static redisReply *reply_new(const redisReadTask *task, int type)
{
    redisReply *r = arena_alloc(task->privdata, sizeof *r);
    memset(r, 0, sizeof *r);
    r->type = type;
    if (task->parent) {
        redisReply *parent = task->parent->obj;
        parent->element[task->idx] = r;
    }
    return r;
}

static void *reply_string(const redisReadTask *task, char *str, size_t len)
{
    char *copy = arena_alloc(task->privdata, len + 1);
    memcpy(copy, str, len);
    copy[len] = '\0';
    redisReply *r = reply_new(task, task->type);
    r->str = copy;
    r->len = len;
    return r;
}

#if HIREDIS_MAJOR >= 1
typedef size_t reply_count;
#else
typedef int reply_count;
#endif

/* More elements than any reply of ours holds: a broken or hostile server.
 * NULL makes the reader fail with an error (the connection is dropped)
 * rather than xmalloc abort the daemon, or memset gigabytes. */
#define REPLY_MAX_ELEMENTS (1 << 20)

static void *reply_array(const redisReadTask *task, reply_count n)
{
    if (n > REPLY_MAX_ELEMENTS)
        return NULL;
    redisReply **elements =
        n > 0 ? arena_alloc(task->privdata, (size_t)n * sizeof *elements) : NULL;
    if (elements)
        memset(elements, 0, (size_t)n * sizeof *elements);
    redisReply *r = reply_new(task, task->type);
    r->element = elements;
    r->elements = n > 0 ? (size_t)n : 0;
    return r;
}

static void *reply_integer(const redisReadTask *task, long long v)
{
    redisReply *r = reply_new(task, REDIS_REPLY_INTEGER);
    r->integer = v;
    return r;
}

static void *reply_nil(const redisReadTask *task)
{
    return reply_new(task, REDIS_REPLY_NIL);
}

#if HIREDIS_MAJOR >= 1
static void *reply_double(const redisReadTask *task, double v, char *str, size_t len)
{
    redisReply *r = reply_string(task, str, len);
    r->dval = v;
    return r;
}

static void *reply_bool(const redisReadTask *task, int v)
{
    redisReply *r = reply_new(task, task->type);
    r->integer = v != 0;
    return r;
}
#endif

/* Nothing: the arena is emptied after each reply. */
static void reply_free(void *r)
{
    (void)r;
}

static redisReplyObjectFunctions reply_functions = {
    .createString = reply_string,
    .createArray = reply_array,
    .createInteger = reply_integer,
    .createNil = reply_nil,
#if HIREDIS_MAJOR >= 1
    .createDouble = reply_double,
    .createBool = reply_bool,
#endif
    .freeObject = reply_free,
};

/* ---- endpoint ---- */

static char *dup_or_null(const char *s)
{
    return s ? xstrdup(s) : NULL;
}

static void endpoint_free(struct redis_conn *c)
{
    free(c->host);
    free(c->unix_path);
    free(c->user);
    free(c->password);
    c->host = c->unix_path = c->user = c->password = NULL;
}

static void endpoint_copy(struct redis_conn *c, const struct redis_endpoint *ep)
{
    endpoint_free(c);
    c->host = dup_or_null(ep->host);
    c->unix_path = dup_or_null(ep->unix_path);
    c->user = dup_or_null(ep->user);
    c->password = dup_or_null(ep->password);
    c->port = ep->port;
    c->db = ep->db;
    c->tls = ep->tls;
    if (c->unix_path)
        snprintf(c->target, sizeof c->target, "unix:%s", c->unix_path);
    else if (c->host && strchr(c->host, ':'))
        snprintf(c->target, sizeof c->target, "[%s]:%d", c->host, c->port);
    else
        snprintf(c->target, sizeof c->target, "%s:%d", c->host ? c->host : "", c->port);
}

/* ---- backoff ---- */

static uint64_t next_random(struct redis_conn *c)
{
    /* xorshift64*: jitter only, no need for quality. */
    c->rng ^= c->rng >> 12;
    c->rng ^= c->rng << 25;
    c->rng ^= c->rng >> 27;
    return c->rng * 2685821657736338717ULL;
}

static void schedule_reconnect(struct redis_conn *c)
{
    /* Half fixed, half random, so that many daemons (and connections)
     * losing one server together do not reconnect in lockstep. */
    int64_t d = c->backoff_us / 2 + (int64_t)(next_random(c) % (uint64_t)(c->backoff_us / 2 + 1));
    timer_arm_us(&c->reconnect_timer, d);
    c->backoff_us = c->backoff_us * 2 > BACKOFF_MAX_US ? BACKOFF_MAX_US : c->backoff_us * 2;
}

/* ---- reading ---- */

static void auth_reply(void *arg, redisReply *r);
static void select_reply(void *arg, redisReply *r);

static void on_read(struct bufferevent *bev, void *arg)
{
    struct redis_conn *c = arg;
    struct evbuffer *in = bufferevent_get_input(bev);
    unsigned gen = c->gen;
    struct evbuffer_iovec v[8];
    for (;;) {
        int n = evbuffer_peek(in, -1, NULL, v, 8);
        if (n <= 0)
            break;
        size_t fed = 0;
        for (int i = 0; i < n && i < 8; i++) {
            redisReaderFeed(c->reader, v[i].iov_base, v[i].iov_len);
            fed += v[i].iov_len;
        }
        evbuffer_drain(in, fed);
    }
    for (;;) {
        void *reply = NULL;
        if (redisReaderGetReply(c->reader, &reply) != REDIS_OK) {
            char why[200];
            snprintf(why, sizeof why, "protocol error: %s", c->reader->errstr);
            close_conn(c, why, 1);
            return;
        }
        if (!reply)
            return;
        redisReply *r = reply;
        c->replied = 1;
        if (c->fifo.count) {
            struct waiting_call w = fifo_pop(&c->fifo);
            w.fn(w.arg, r);
        } else if (c->ev.push) {
            c->ev.push(c->ev.arg, r);
        }
        /* The reply's life ends here; a partial one left by a drop under
         * the callback goes too (its reader went with the drop). */
        arena_reset(&c->arena);
        if (c->gen != gen)
            return; /* dropped by the callback: the reader went with it */
    }
}

/* ---- connecting ---- */

static void log_conn(const struct redis_conn *c, enum log_level lvl, const char *msg, const char *k,
                     const char *v)
{
    log_event(c->log, lvl, msg, "role", c->role, "target", c->target, k, v, NULL);
}

/* A failed attempt to connect: logged through the connection's limit. */
static void log_connect_failed(struct redis_conn *c, const char *why)
{
    c->failed_connects++;
    log_limited(c->log, &c->connect_log, util_monotonic_us(), LOG_LVL_WARN, "redis connect failed",
                "role", c->role, "target", c->target, "error", why, NULL);
}

/* AUTH and SELECT, first on the connection. -1 when one cannot be queued
 * (out of memory, or the connection already gone): the connection must
 * not carry calls unauthenticated or on the wrong database. */
static int send_setup(struct redis_conn *c)
{
    int rc = 0;
    if (c->password) {
        const char *argv[] = {"AUTH", c->user ? c->user : c->password, c->password};
        size_t lens[] = {4, strlen(argv[1]), strlen(c->password)};
        if (c->user)
            rc = redis_conn_command(c, auth_reply, c, 3, argv, lens);
        else
            rc = redis_conn_command(c, auth_reply, c, 2, (const char *[]){"AUTH", c->password},
                                    (size_t[]){4, strlen(c->password)});
    }
    if (rc == 0 && c->db) {
        char db[UTIL_INT_CHARS];
        size_t n = util_format_int(db, c->db);
        rc = redis_conn_command(c, select_reply, c, 2, (const char *[]){"SELECT", db},
                                (size_t[]){6, n});
    }
    return rc;
}

/* The reply to AUTH or SELECT: an error drops the connection (logged once:
 * the drop completes the other setup call with NULL, which is ignored). */
static void setup_reply(struct redis_conn *c, const char *command, const redisReply *r)
{
    if (!r || r->type != REDIS_REPLY_ERROR)
        return;
    char why[300];
    snprintf(why, sizeof why, "%s refused: %s", command, r->str);
    log_event(c->log, LOG_LVL_ERROR, "redis setup command failed", "role", c->role, "target",
              c->target, "command", command, "error", r->str, NULL);
    close_conn(c, why, 1);
}

static void auth_reply(void *arg, redisReply *r)
{
    setup_reply(arg, "AUTH", r);
}

static void select_reply(void *arg, redisReply *r)
{
    setup_reply(arg, "SELECT", r);
}

static void describe_error(struct redis_conn *c, short what, char *out, size_t outlen)
{
    int e = EVUTIL_SOCKET_ERROR();
    if (c->tls && c->bev)
        redis_tls_error(c->bev, !c->replied, out, outlen);
    if (!c->tls || !out[0]) {
        if (what & BEV_EVENT_EOF)
            snprintf(out, outlen, "closed by the server");
        else
            snprintf(out, outlen, "%s", e ? strerror(e) : "connection error");
    }
}

static void on_event(struct bufferevent *bev, short what, void *arg)
{
    struct redis_conn *c = arg;
    if (what & BEV_EVENT_CONNECTED) {
        event_del(&c->connect_timer);
        c->state = CONN_UP;
        if (c->host) {
            int one = 1;
            /* Small commands, each awaited: no Nagle delay. A failure
             * only costs latency. */
            (void)setsockopt(bufferevent_getfd(bev), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        }
        char failed[24];
        snprintf(failed, sizeof failed, "%llu", (unsigned long long)c->failed_connects);
        const char *kv[4] = {NULL}; /* the optional pairs; a NULL key ends the line */
        size_t k = 0;
        if (c->tls)
            kv[k++] = "tls", kv[k++] = "on";
        if (c->failed_connects)
            kv[k++] = "failed_attempts", kv[k++] = failed;
        log_event(c->log, LOG_LVL_INFO, "redis connected", "role", c->role, "target", c->target,
                  kv[0], kv[1], kv[2], kv[3], NULL);
        /* The next outage's first failure is news: logged at once. */
        c->failed_connects = 0;
        c->connect_log = (struct log_limit){.interval_us = CONNECT_LOG_INTERVAL_US};
        unsigned gen = c->gen;
        if (send_setup(c) < 0) {
            redis_conn_drop(c, "cannot queue AUTH or SELECT");
            return;
        }
        if (c->gen == gen && c->ev.up)
            c->ev.up(c->ev.arg, c);
        return;
    }
    if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR)) {
        char why[300] = "";
        describe_error(c, what, why, sizeof why);
        if (c->state == CONN_CONNECTING)
            log_connect_failed(c, why);
        else
            log_conn(c, LOG_LVL_WARN, "redis connection lost", "error", why);
        close_conn(c, why, 1);
    }
}

static void on_connect_timeout(evutil_socket_t fd, short what, void *arg)
{
    struct redis_conn *c = arg;
    if (c->state != CONN_CONNECTING)
        return;
    log_connect_failed(c, "connect timed out");
    close_conn(c, "connect timed out", 1);
}

/* The address of the endpoint into ss, or -1 with a message. */
static int resolve(struct redis_conn *c, struct sockaddr_storage *ss, socklen_t *len, char *err,
                   size_t errlen)
{
    memset(ss, 0, sizeof *ss);
    if (c->unix_path) {
        struct sockaddr_un *un = (struct sockaddr_un *)ss;
        if (strlen(c->unix_path) >= sizeof un->sun_path) {
            snprintf(err, errlen, "unix socket path too long");
            return -1;
        }
        un->sun_family = AF_UNIX;
        memcpy(un->sun_path, c->unix_path, strlen(c->unix_path) + 1);
        *len = (socklen_t)sizeof *un;
        return 0;
    }
    char port[UTIL_INT_CHARS + 1];
    port[util_format_int(port, c->port)] = '\0'; /* it writes no NUL */
    struct addrinfo hints = {
        .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV};
    struct addrinfo *res = NULL;
    /* Blocking, as hiredis's connect was: the hosts are IP literals or
     * names in /etc/hosts in every deployment we know of. */
    int rc = getaddrinfo(c->host ? c->host : "", port, &hints, &res);
    if (rc != 0 || !res) {
        snprintf(err, errlen, "cannot resolve: %s", rc ? gai_strerror(rc) : "no address");
        if (res)
            freeaddrinfo(res);
        return -1;
    }
    memcpy(ss, res->ai_addr, res->ai_addrlen);
    *len = res->ai_addrlen;
    freeaddrinfo(res);
    return 0;
}

/* A new bufferevent (TLS when the endpoint says so), or NULL with a
 * message. */
static struct bufferevent *new_bev(struct redis_conn *c, char *err, size_t errlen)
{
    if (!c->tls) {
        struct bufferevent *bev = bufferevent_socket_new(c->base, -1, BEV_OPT_CLOSE_ON_FREE);
        if (!bev)
            snprintf(err, errlen, "cannot create a bufferevent");
        return bev;
    }
    struct ssl_st *ssl = redis_tls_ssl(c->tls, c->host, err, errlen);
    if (!ssl)
        return NULL;
    /* The bufferevent owns the SSL from here (BEV_OPT_CLOSE_ON_FREE). */
    struct bufferevent *bev = bufferevent_openssl_socket_new(
        c->base, -1, ssl, BUFFEREVENT_SSL_CONNECTING, BEV_OPT_CLOSE_ON_FREE);
    if (!bev) {
        snprintf(err, errlen, "cannot create a TLS bufferevent");
        return NULL;
    }
    /* Redis closes without close_notify (e.g. on CLIENT KILL): a plain
     * EOF, not an error to report as a TLS failure. */
    bufferevent_openssl_set_allow_dirty_shutdown(bev, 1);
    return bev;
}

static void start_connect(struct redis_conn *c)
{
    char err[300] = "";
    struct sockaddr_storage ss;
    socklen_t len = 0;
    event_del(&c->reconnect_timer);
    c->reader = redisReaderCreateWithFunctions(&reply_functions);
    c->reader->privdata = &c->arena;
    c->replied = 0;
    c->state = CONN_CONNECTING;
    if (resolve(c, &ss, &len, err, sizeof err) < 0 || !(c->bev = new_bev(c, err, sizeof err))) {
        log_connect_failed(c, err);
        close_conn(c, err, 1);
        return;
    }
    bufferevent_setcb(c->bev, on_read, NULL, on_event, c);
    if (bufferevent_socket_connect(c->bev, (struct sockaddr *)&ss, (int)len) < 0 ||
        bufferevent_enable(c->bev, EV_READ | EV_WRITE) < 0) {
        int e = EVUTIL_SOCKET_ERROR();
        snprintf(err, sizeof err, "%s", e ? strerror(e) : "cannot connect");
        log_connect_failed(c, err);
        close_conn(c, err, 1);
        return;
    }
    timer_arm_us(&c->connect_timer, CONNECT_TIMEOUT_US);
}

static void on_reconnect_timer(evutil_socket_t fd, short what, void *arg)
{
    start_connect(arg);
}

/*
 * Closes the connection (if any): detaches the FIFO, schedules the
 * reconnect when asked, then completes the detached calls with NULL and
 * tells the owner (down) when there was a connection or an attempt (free
 * cleared the events first: no down then).
 */
static void close_conn(struct redis_conn *c, const char *why, int reconnect)
{
    int was = c->state != CONN_DOWN;
    c->gen++;
    c->state = CONN_DOWN;
    event_del(&c->connect_timer);
    if (c->bev) {
        bufferevent_free(c->bev);
        c->bev = NULL;
    }
    if (c->reader) {
        redisReaderFree(c->reader);
        c->reader = NULL;
    }
    struct call_fifo calls = c->fifo;
    c->fifo = (struct call_fifo){0};
    if (reconnect)
        schedule_reconnect(c);
    unsigned gen = c->gen;
    fifo_fail_all(&calls);
    if (was && c->gen == gen && c->ev.down)
        c->ev.down(c->ev.arg, c, why);
}

/* ---- the interface ---- */

struct redis_conn *redis_conn_new(struct event_base *base, const struct logger *lg,
                                  const char *role, const struct redis_endpoint *ep,
                                  const struct redis_conn_events *ev)
{
    struct redis_conn *c = xcalloc(1, sizeof *c);
    c->base = base;
    c->log = lg;
    c->role = xstrdup(role);
    if (ev)
        c->ev = *ev;
    endpoint_copy(c, ep);
    c->backoff_us = BACKOFF_MIN_US;
    c->connect_log.interval_us = CONNECT_LOG_INTERVAL_US;
    /* Seeded per connection: connections of one process must not share
     * their jitter either. */
    c->rng = (uint64_t)util_monotonic_us() ^ ((uint64_t)getpid() << 32) ^ (uint64_t)(uintptr_t)c ^
             0x9e3779b97f4a7c15ULL;
    evtimer_assign(&c->connect_timer, base, on_connect_timeout, c);
    evtimer_assign(&c->reconnect_timer, base, on_reconnect_timer, c);
    return c;
}

void redis_conn_set_endpoint(struct redis_conn *c, const struct redis_endpoint *ep)
{
    endpoint_copy(c, ep);
}

void redis_conn_connect(struct redis_conn *c)
{
    if (c->state != CONN_DOWN)
        return;
    start_connect(c);
}

int redis_conn_send(struct redis_conn *c, const char *cmd, size_t len, redis_reply_fn fn, void *arg)
{
    if (c->state != CONN_UP || bufferevent_write(c->bev, cmd, len) < 0)
        return -1;
    fifo_push(&c->fifo, fn, arg);
    return 0;
}

int redis_conn_command(struct redis_conn *c, redis_reply_fn fn, void *arg, int argc,
                       const char **argv, const size_t *lens)
{
    char *cmd = NULL;
    int n = redisFormatCommandArgv(&cmd, argc, argv, lens);
    if (n < 0)
        return -1;
    int rc = redis_conn_send(c, cmd, (size_t)n, fn, arg);
    free(cmd);
    return rc;
}

int redis_conn_is_up(const struct redis_conn *c)
{
    return c->state == CONN_UP;
}

void redis_conn_drop(struct redis_conn *c, const char *why)
{
    if (c->state == CONN_DOWN)
        return;
    log_conn(c, LOG_LVL_WARN, "redis connection dropped", "reason", why);
    close_conn(c, why, 1);
}

void redis_conn_stop(struct redis_conn *c, const char *why)
{
    event_del(&c->reconnect_timer);
    if (c->state == CONN_DOWN)
        return;
    log_conn(c, LOG_LVL_INFO, "redis connection closed", "reason", why);
    close_conn(c, why, 0);
}

void redis_conn_healthy(struct redis_conn *c)
{
    c->backoff_us = BACKOFF_MIN_US;
}

struct redis_endpoint redis_conn_endpoint(const struct redis_url *u, const char *host, int port,
                                          struct redis_tls *tls)
{
    return (struct redis_endpoint){
        .host = host,
        .port = port,
        .unix_path = host ? NULL : u->unix_path,
        .user = u->user,
        .password = u->password,
        .db = u->db,
        .tls = tls,
    };
}

const char *redis_conn_target(const struct redis_conn *c)
{
    return c->target;
}

void redis_conn_free(struct redis_conn *c)
{
    if (!c)
        return;
    c->ev = (struct redis_conn_events){0}; /* no down callback */
    close_conn(c, "freed", 0);
    event_del(&c->reconnect_timer);
    endpoint_free(c);
    arena_free(&c->arena);
    free(c->role);
    free(c);
}
