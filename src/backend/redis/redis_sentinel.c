/* SPDX-License-Identifier: Apache-2.0 */
/*
 * redis_sentinel.c: finding the master through Redis Sentinel (see
 * redis_sentinel.h). Owns two connections (redis_conn.h) to sentinels: the
 * query connection, pointed at one sentinel at a time, which asks SENTINEL
 * get-master-addr-by-name; and the watch connection, subscribed to
 * +switch-master on the sentinel that last answered. Owns its copy of the
 * configuration (addresses, name, password) and its timers. Does not own
 * the master's connection: the owner points its node at each address
 * reported, and verifies there that the server is a master (ROLE).
 *
 * One query round at a time (rediscover while one runs asks for one more
 * round after it, never a second one in parallel): the sentinels are asked
 * in turn, starting from the last one that answered, each within
 * QUERY_TIMEOUT_US of the question (or of its connect failing), until one
 * names the master. A round in which none does is logged as "redis sentinel
 * unreachable" (rate-limited) and retried after POLL_UNKNOWN_US.
 *
 * Rounds also run by themselves: every POLL_UNKNOWN_US while no master is
 * known, or for SUSPECT_US after the owner reported the master lost (the
 * sentinels need a few seconds to fail over after a crash, and a missed
 * +switch-master must not cost the long interval) or a new address was
 * reported (the owner's ROLE check may refuse it), and every POLL_KNOWN_US
 * otherwise, which bounds how long a +switch-master missed while the watch
 * connection was down can go unnoticed.
 */
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/redis/redis_conn.h"
#include "backend/redis/redis_sentinel.h"
#include "config/config.h"
#include "config/redis_url.h"
#include "core/metrics.h"
#include "lib/hostport.h"
#include "lib/timer.h"
#include "lib/util.h"

#define SWITCH_CHANNEL "+switch-master"

/* A sentinel on loopback or a LAN answers in well under a millisecond; one
 * that takes this long is as good as down, and the next one is asked. */
#define QUERY_TIMEOUT_US 500000
#define POLL_UNKNOWN_US 1000000
#define POLL_KNOWN_US 10000000
#define SUSPECT_US 30000000

/* One sentinel of redis.sentinel.addresses, parsed once. */
struct sentinel_addr {
    char *host;
    int port;
};

struct redis_sentinel {
    struct event_base *base;
    const struct logger *log;
    struct metrics *metrics;
    struct redis_tls *tls; /* borrowed */
    redis_sentinel_master_fn fn;
    void *arg;

    struct sentinel_addr *addrs; /* owned, naddrs entries */
    size_t naddrs;
    char *master_name; /* owned */
    char *password;    /* owned; NULL: no AUTH */

    struct redis_conn *query;
    size_t cur;                /* the sentinel the query connection points at */
    int in_round;              /* a round of questions is under way */
    int again;                 /* rediscover asked during the round: one more after it */
    int awaiting;              /* the question is sent, its answer not yet in */
    int switching;             /* on_step is dropping the query connection */
    size_t tried;              /* sentinels asked (or found down) in this round */
    struct event *deadline_ev; /* the current sentinel's time is up */
    struct event *step_ev;     /* next sentinel or next round, out of callbacks */
    struct event *poll_ev;

    struct redis_conn *watch;
    size_t watch_idx;  /* the sentinel the watch connection points at */
    int watch_pointed; /* watch_idx is set: the watch connection exists */
    int subscribed;    /* the SUBSCRIBE was confirmed on this connection */

    char *master_host; /* owned; NULL: unknown */
    int master_port;
    int64_t suspect_until_us; /* monotonic: poll fast until then */
    struct log_limit unreachable_limit;
    struct log_limit rediscover_limit;
};

static void start_round(struct redis_sentinel *s);
static void ask_again(struct redis_sentinel *s, const char *why);

/* ---- configuration ---- */

/* "host:port" or "[v6]:port" through the parser that validated it
 * (hostport.h), so the two can never disagree. */
static int parse_addr(const char *text, struct sentinel_addr *out)
{
    char err[RL_ERRLEN];
    struct hostport hp;
    if (hostport_parse(text, strlen(text), 0, &hp, err, sizeof err) < 0)
        return -1;
    out->host = xstrdup(hp.host);
    out->port = hp.port;
    return 0;
}

/* The endpoint of sentinel i: the sentinels' own password, no db. */
static struct redis_endpoint endpoint_of(const struct redis_sentinel *s, size_t i)
{
    return (struct redis_endpoint){
        .host = s->addrs[i].host, .port = s->addrs[i].port, .password = s->password, .tls = s->tls};
}

/* "host:port" or "[v6]:port", as redis_node_target names a node. */
static void format_target(char *out, size_t outlen, const char *host, int port)
{
    snprintf(out, outlen, strchr(host, ':') ? "[%s]:%d" : "%s:%d", host, port);
}

/* ---- the master's address ---- */

/* A sentinel named host:port as the master: tells the owner when it is new
 * (the first address, or a failover). */
static void report(struct redis_sentinel *s, const char *host, int port, const char *source)
{
    char to[300];
    if (s->master_host && strcmp(s->master_host, host) == 0 && s->master_port == port)
        return;
    format_target(to, sizeof to, host, port);
    if (s->master_host) {
        char from[300];
        format_target(from, sizeof from, s->master_host, s->master_port);
        log_event(s->log, LOG_LVL_WARN, "redis sentinel: master switched", "master", s->master_name,
                  "from", from, "to", to, "source", source, NULL);
        metrics_node_count(s->metrics, to, METRICS_NODE_FAILOVERS);
    } else {
        log_event(s->log, LOG_LVL_INFO, "redis sentinel: master is at", "master", s->master_name,
                  "address", to, "source", source, NULL);
    }
    free(s->master_host);
    s->master_host = xstrdup(host);
    s->master_port = port;
    /* Asked again each second for a while: a sentinel may name a server
     * that is not (yet) the master, and the owner's node then never
     * becomes ready, a state it does not report as a loss. */
    s->suspect_until_us = util_monotonic_us() + SUSPECT_US;
    s->fn(s->arg, s->master_host, s->master_port);
}

/* A port as a sentinel sends it: decimal, 1..65535. */
static int parse_port(const char *text, size_t len, int *out)
{
    char buf[8], err[RL_ERRLEN];
    int64_t v;
    if (len == 0 || len >= sizeof buf)
        return -1;
    memcpy(buf, text, len);
    buf[len] = '\0';
    if (util_parse_int64(buf, 1, 65535, &v, err, sizeof err) < 0)
        return -1;
    *out = (int)v;
    return 0;
}

/* ---- rounds of questions ---- */

static void schedule_poll(struct redis_sentinel *s)
{
    int fast = !s->master_host || util_monotonic_us() < s->suspect_until_us;
    timer_arm_us(s->poll_ev, fast ? POLL_UNKNOWN_US : POLL_KNOWN_US);
}

/* The round is over (an answer, or every sentinel failed). */
static void end_round(struct redis_sentinel *s)
{
    s->in_round = 0;
    s->awaiting = 0;
    event_del(s->deadline_ev);
    if (s->again) {
        s->again = 0;
        timer_arm_us(s->step_ev, 0);
        return;
    }
    schedule_poll(s);
}

/* Points the watch connection at sentinel i, the one that just answered,
 * unless it is there already. */
static void watch_at(struct redis_sentinel *s, size_t i)
{
    if (s->watch_pointed && s->watch_idx == i)
        return;
    struct redis_endpoint ep = endpoint_of(s, i);
    redis_conn_set_endpoint(s->watch, &ep);
    s->watch_idx = i;
    s->watch_pointed = 1;
    s->subscribed = 0;
    redis_conn_drop(s->watch, "following the sentinel that answers");
    redis_conn_connect(s->watch);
}

/* The current sentinel failed us (why for the log): the next one, from a
 * timer so that the query connection is never switched inside its own
 * callback. */
static void sentinel_failed(struct redis_sentinel *s, const char *why)
{
    log_event(s->log, LOG_LVL_DEBUG, "redis sentinel did not answer", "sentinel",
              redis_conn_target(s->query), "reason", why, NULL);
    s->awaiting = 0;
    event_del(s->deadline_ev);
    s->tried++;
    timer_arm_us(s->step_ev, 0);
}

static void on_master_addr(void *arg, redisReply *r)
{
    struct redis_sentinel *s = arg;
    int port;
    if (!s->awaiting)
        return; /* a question given up on (deadline, switch) */
    s->awaiting = 0;
    if (!r) {
        sentinel_failed(s, "connection lost");
        return;
    }
    if (r->type == REDIS_REPLY_NIL) {
        log_event(s->log, LOG_LVL_WARN, "redis sentinel does not know the master", "sentinel",
                  redis_conn_target(s->query), "master", s->master_name, NULL);
        sentinel_failed(s, "unknown master");
        return;
    }
    if (r->type == REDIS_REPLY_ERROR) {
        log_event(s->log, LOG_LVL_WARN, "redis sentinel refused the question", "sentinel",
                  redis_conn_target(s->query), "error", r->str, NULL);
        sentinel_failed(s, "error");
        return;
    }
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
        r->element[0]->type != REDIS_REPLY_STRING || r->element[1]->type != REDIS_REPLY_STRING ||
        parse_port(r->element[1]->str, r->element[1]->len, &port) < 0) {
        sentinel_failed(s, "unexpected answer");
        return;
    }
    char *host = xstrndup(r->element[0]->str, r->element[0]->len);
    watch_at(s, s->cur);
    end_round(s);
    report(s, host, port, "query");
    free(host);
}

static void ask(struct redis_sentinel *s)
{
    const char *argv[] = {"SENTINEL", "get-master-addr-by-name", s->master_name};
    size_t lens[] = {8, 23, strlen(s->master_name)};
    if (redis_conn_command(s->query, on_master_addr, s, 3, argv, lens) < 0) {
        sentinel_failed(s, "not connected");
        return;
    }
    s->awaiting = 1;
    timer_arm_us(s->deadline_ev, QUERY_TIMEOUT_US);
}

/* Asks sentinel cur: at once when connected to it, else when the
 * connection comes up (query_up) or fails (query_down). */
static void ask_current(struct redis_sentinel *s)
{
    if (redis_conn_is_up(s->query)) {
        ask(s);
        return;
    }
    redis_conn_connect(s->query);
}

static void on_step(evutil_socket_t fd, short what, void *arg)
{
    struct redis_sentinel *s = arg;
    (void)fd;
    (void)what;
    if (!s->in_round) {
        start_round(s);
        return;
    }
    if (s->tried >= s->naddrs) {
        log_limited(s->log, &s->unreachable_limit, util_monotonic_us(), LOG_LVL_ERROR,
                    "redis sentinel unreachable", "master", s->master_name, "reason",
                    "no sentinel named the master", NULL);
        end_round(s);
        return;
    }
    s->cur = (s->cur + 1) % s->naddrs;
    struct redis_endpoint ep = endpoint_of(s, s->cur);
    redis_conn_set_endpoint(s->query, &ep);
    /* Its down callback must not count the sentinel just left as failed
     * once more. */
    s->switching = 1;
    redis_conn_drop(s->query, "asking the next sentinel");
    s->switching = 0;
    ask_current(s);
}

static void start_round(struct redis_sentinel *s)
{
    event_del(s->poll_ev);
    s->in_round = 1;
    s->tried = 0;
    ask_current(s);
}

static void on_deadline(evutil_socket_t fd, short what, void *arg)
{
    struct redis_sentinel *s = arg;
    (void)fd;
    (void)what;
    if (s->in_round)
        sentinel_failed(s, "no answer in time");
}

static void on_poll(evutil_socket_t fd, short what, void *arg)
{
    struct redis_sentinel *s = arg;
    (void)fd;
    (void)what;
    if (!s->in_round)
        start_round(s);
}

static void query_up(void *arg, struct redis_conn *c)
{
    struct redis_sentinel *s = arg;
    (void)c;
    if (s->in_round && !s->awaiting)
        ask(s);
}

static void query_down(void *arg, struct redis_conn *c, const char *why)
{
    struct redis_sentinel *s = arg;
    (void)c;
    /* A question sent has already completed with NULL. A connect that
     * failed before the question: this sentinel is out of this round. */
    if (s->in_round && !s->awaiting && !s->switching &&
        !event_pending(s->step_ev, EV_TIMEOUT, NULL))
        sentinel_failed(s, why);
}

/* ---- the watch connection ---- */

static void on_subscribed(void *arg, redisReply *r)
{
    struct redis_sentinel *s = arg;
    if (!r)
        return;
    if (r->type == REDIS_REPLY_ERROR) {
        log_event(s->log, LOG_LVL_WARN, "redis sentinel refused SUBSCRIBE", "sentinel",
                  redis_conn_target(s->watch), "error", r->str, NULL);
        return;
    }
    s->subscribed = 1;
    /* A failover announced while no subscription stood went unheard. */
    ask_again(s, "subscribed to " SWITCH_CHANNEL);
}

static void watch_up(void *arg, struct redis_conn *c)
{
    const char *argv[] = {"SUBSCRIBE", SWITCH_CHANNEL};
    size_t lens[] = {9, sizeof SWITCH_CHANNEL - 1};
    /* Not queued when the connection is lost at once (its down follows,
     * the drop does nothing, and the reconnect subscribes) or out of
     * memory: dropped, so that the reconnect subscribes, rather than a
     * watch that would never hear a failover. */
    if (redis_conn_command(c, on_subscribed, arg, 2, argv, lens) < 0)
        redis_conn_drop(c, "cannot queue SUBSCRIBE");
}

static void watch_down(void *arg, struct redis_conn *c, const char *why)
{
    struct redis_sentinel *s = arg;
    (void)c;
    if (!s->subscribed)
        return; /* a connect that failed: redis_conn retries */
    s->subscribed = 0;
    log_event(s->log, LOG_LVL_WARN, "redis sentinel watch lost", "sentinel",
              redis_conn_target(s->watch), "reason", why, NULL);
    /* Perhaps this sentinel is gone: a round finds one that answers, and
     * the watch follows it. */
    ask_again(s, "sentinel watch lost");
}

/* "<name> <old-ip> <old-port> <new-ip> <new-port>" */
static void on_switch(struct redis_sentinel *s, const char *msg, size_t len)
{
    const char *field[5];
    size_t flen[5], n = 0;
    const char *p = msg, *end = msg + len;
    while (p < end && n < 5) {
        const char *sp = memchr(p, ' ', (size_t)(end - p));
        const char *e = sp ? sp : end;
        field[n] = p;
        flen[n++] = (size_t)(e - p);
        p = sp ? sp + 1 : end;
    }
    int port;
    if (n != 5 || p != end || parse_port(field[4], flen[4], &port) < 0) {
        log_event(s->log, LOG_LVL_WARN, "redis sentinel: unexpected " SWITCH_CHANNEL " message",
                  NULL);
        return;
    }
    if (flen[0] != strlen(s->master_name) || memcmp(field[0], s->master_name, flen[0]) != 0)
        return; /* another master watched by the same sentinels */
    char *host = xstrndup(field[3], flen[3]);
    report(s, host, port, SWITCH_CHANNEL);
    free(host);
}

static void watch_push(void *arg, redisReply *r)
{
    struct redis_sentinel *s = arg;
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 3)
        return;
    const redisReply *kind = r->element[0], *chan = r->element[1], *msg = r->element[2];
    if (kind->type == REDIS_REPLY_STRING && strcmp(kind->str, "message") == 0 &&
        chan->type == REDIS_REPLY_STRING && strcmp(chan->str, SWITCH_CHANNEL) == 0 &&
        msg->type == REDIS_REPLY_STRING)
        on_switch(s, msg->str, msg->len);
}

/* ---- the interface ---- */

struct redis_sentinel *redis_sentinel_new(struct event_base *base, const struct logger *lg,
                                          struct metrics *m,
                                          const struct redis_sentinel_config *cfg,
                                          struct redis_tls *tls, redis_sentinel_master_fn fn,
                                          void *arg)
{
    if (cfg->naddresses == 0 || !cfg->master_name)
        return NULL;
    struct redis_sentinel *s = xcalloc(1, sizeof *s);
    s->base = base;
    s->log = lg;
    s->metrics = m;
    s->tls = tls;
    s->fn = fn;
    s->arg = arg;
    s->unreachable_limit.interval_us = 10 * POLL_UNKNOWN_US;
    s->rediscover_limit.interval_us = 1000000;
    s->master_name = xstrdup(cfg->master_name);
    s->password = redis_url_password(REDIS_URL_SENTINEL_PASSWORD_ENV, cfg->password);
    s->addrs = xcalloc(cfg->naddresses, sizeof *s->addrs);
    for (size_t i = 0; i < cfg->naddresses; i++) {
        /* The config was validated at load: an address that does not parse
         * now is skipped rather than trusted. */
        if (parse_addr(cfg->addresses[i], &s->addrs[s->naddrs]) == 0)
            s->naddrs++;
        else
            log_event(lg, LOG_LVL_ERROR, "redis sentinel: bad address skipped", "address",
                      cfg->addresses[i], NULL);
    }
    s->deadline_ev = evtimer_new(base, on_deadline, s);
    s->step_ev = evtimer_new(base, on_step, s);
    s->poll_ev = evtimer_new(base, on_poll, s);
    if (s->naddrs == 0 || !s->deadline_ev || !s->step_ev || !s->poll_ev) {
        redis_sentinel_free(s);
        return NULL;
    }
    struct redis_endpoint ep = endpoint_of(s, 0);
    struct redis_conn_events qev = {.up = query_up, .down = query_down, .arg = s};
    struct redis_conn_events wev = {
        .up = watch_up, .down = watch_down, .push = watch_push, .arg = s};
    s->query = redis_conn_new(base, lg, "sentinel", &ep, &qev);
    s->watch = redis_conn_new(base, lg, "sentinel-watch", &ep, &wev);
    return s;
}

void redis_sentinel_start(struct redis_sentinel *s)
{
    start_round(s);
}

/* A round as soon as possible, or one more after the current one. */
static void ask_again(struct redis_sentinel *s, const char *why)
{
    log_event(s->log, LOG_LVL_DEBUG, "redis sentinel: asking again", "reason", why, NULL);
    if (s->in_round) {
        s->again = 1;
        return;
    }
    /* From a timer: the owner may call from inside a connection's
     * callback, and a round may switch connections. */
    event_del(s->poll_ev);
    timer_arm_us(s->step_ev, 0);
}

void redis_sentinel_rediscover(struct redis_sentinel *s, const char *why)
{
    int64_t now = util_monotonic_us();
    /* The owner asks on every failed reconnect too: one line a second. */
    log_limited(s->log, &s->rediscover_limit, now, LOG_LVL_INFO,
                "redis sentinel: asking for the master", "master", s->master_name, "reason", why,
                NULL);
    s->suspect_until_us = now + SUSPECT_US;
    ask_again(s, why);
}

void redis_sentinel_free(struct redis_sentinel *s)
{
    if (!s)
        return;
    redis_conn_free(s->query);
    redis_conn_free(s->watch);
    if (s->deadline_ev)
        event_free(s->deadline_ev);
    if (s->step_ev)
        event_free(s->step_ev);
    if (s->poll_ev)
        event_free(s->poll_ev);
    for (size_t i = 0; i < s->naddrs; i++)
        free(s->addrs[i].host);
    free(s->addrs);
    free(s->master_name);
    free(s->password);
    free(s->master_host);
    free(s);
}
