/* SPDX-License-Identifier: Apache-2.0 */
/*
 * resets.c: the Redis reset channel (resets.h): the commands of one reset
 * and the life of their replies, and the listener subscribed to the
 * channel. Owns each pending reset (freed right after its done) and the
 * listener's connection and channel name. Does not own where either goes:
 * the backends pick the server.
 */
#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/redis/redis_node.h"
#include "backend/redis/resets.h"
#include "config/config.h"
#include "config/policy.h"

/* ---- the channel ---- */

int resets_channel_follow(char **channel, struct resets_listener **l, const char *key_prefix)
{
    size_t plen = strlen(key_prefix);
    char *name = xmalloc(plen + sizeof "reset");
    memcpy(name, key_prefix, plen);
    memcpy(name + plen, "reset", sizeof "reset");
    if (*channel && strcmp(*channel, name) == 0) {
        free(name);
        return 0;
    }
    free(*channel);
    *channel = name;
    resets_listener_free(*l);
    *l = NULL;
    return 1;
}

/* ---- one reset ---- */

void resets_cmds_build(struct resets_cmds *c, const struct config *cfg, const struct policy *p,
                       const char *key, size_t keylen, const char *channel)
{
    /* At most two keys per tier. */
    size_t maxkeys = 2 * p->ntiers + 1;
    c->del_argv = xcalloc(maxkeys, sizeof *c->del_argv);
    c->del_lens = xcalloc(maxkeys, sizeof *c->del_lens);
    c->keys = xmalloc(maxkeys * POLICY_KEY_BUF);
    size_t argc = 0;
    c->del_argv[argc] = "DEL";
    c->del_lens[argc++] = 3;
    char *at = c->keys;
    for (size_t j = 0; j < p->ntiers; j++) {
        for (int k = 0; k < policy_algorithm_nkeys(p->tiers[j].algorithm); k++) {
            int n = policy_tier_key(cfg->key_prefix, p->name, key, keylen, &p->tiers[j], k, at,
                                    POLICY_KEY_BUF);
            if (n < 0)
                abort(); /* POLICY_KEY_BUF bounds every valid key (policy.h) */
            c->del_argv[argc] = at;
            c->del_lens[argc++] = (size_t)n;
            at += POLICY_KEY_BUF;
        }
    }
    c->del_argc = (int)argc;
    size_t plen = strlen(p->name);
    c->msg = xmalloc(plen + 1 + keylen);
    memcpy(c->msg, p->name, plen);
    c->msg[plen] = ':';
    memcpy(c->msg + plen + 1, key, keylen);
    c->pub_argv[0] = "PUBLISH";
    c->pub_argv[1] = channel;
    c->pub_argv[2] = c->msg;
    c->pub_lens[0] = 7;
    c->pub_lens[1] = strlen(channel);
    c->pub_lens[2] = plen + 1 + keylen;
}

void resets_cmds_free(struct resets_cmds *c)
{
    free(c->del_argv);
    free(c->del_lens);
    free(c->keys);
    free(c->msg);
    *c = (struct resets_cmds){0};
}

/* One reset in flight: its DEL and its PUBLISH, pipelined. */
struct pending_reset {
    backend_reset_done_fn done;
    void *arg;
    const char *lost; /* static: the message for a lost connection */
    int outstanding;  /* replies still due */
    struct backend_reset_reply reply;
    char err[RL_ERRLEN];
};

/* A reply that failed: the first failure is the one reported. */
static void reset_failed(struct pending_reset *r, enum backend_status st, const char *msg)
{
    if (r->reply.status != BACKEND_OK)
        return;
    r->reply.status = st;
    snprintf(r->err, sizeof r->err, "%s", msg);
    r->reply.errmsg = r->err;
}

static void on_reset_reply(struct pending_reset *r, const redisReply *rr, long long *into)
{
    if (!rr)
        reset_failed(r, BACKEND_UNAVAILABLE, r->lost);
    else if (rr->type == REDIS_REPLY_ERROR)
        reset_failed(r, BACKEND_ERROR, rr->str);
    else if (rr->type == REDIS_REPLY_INTEGER)
        *into = rr->integer;
    else
        reset_failed(r, BACKEND_ERROR, "unexpected reply to a reset");
    if (--r->outstanding > 0)
        return;
    r->done(r->arg, &r->reply);
    free(r);
}

static void on_del_reply(void *arg, redisReply *rr)
{
    struct pending_reset *r = arg;
    on_reset_reply(r, rr, &r->reply.deleted);
}

static void on_publish_reply(void *arg, redisReply *rr)
{
    struct pending_reset *r = arg;
    on_reset_reply(r, rr, &r->reply.notified);
}

int resets_send(struct redis_node *n, struct resets_cmds *c, const char *lost,
                backend_reset_done_fn done, void *arg)
{
    struct pending_reset *r = xcalloc(1, sizeof *r);
    r->done = done;
    r->arg = arg;
    r->lost = lost;
    r->reply.status = BACKEND_OK;
    if (redis_node_command(n, on_del_reply, r, c->del_argc, c->del_argv, c->del_lens) < 0) {
        free(r);
        return -1;
    }
    /* A reply comes from the event loop, never inside the send: the count
     * may follow it. */
    r->outstanding = 1;
    if (redis_node_command(n, on_publish_reply, r, 3, c->pub_argv, c->pub_lens) == 0)
        r->outstanding++;
    else
        reset_failed(r, BACKEND_UNAVAILABLE, "cannot send PUBLISH");
    return 0;
}

/* ---- the listener ---- */

struct resets_listener {
    const struct logger *log;
    struct backend *owner; /* whose on_reset hears the announcements */
    char *channel;
    const char *target; /* borrowed; NULL: name the node */
    resets_down_fn down;
    void *down_arg;
    struct redis_conn *conn;
};

/* "<policy>:<key>" as resets_cmds_build makes it; anything else (another
 * program on the channel) is ignored. */
static void on_message(struct resets_listener *l, const char *msg, size_t len)
{
    /* A run-time override's change (overrides_store.h): JSON, which no
     * "<policy>:" starts with. */
    if (len > 0 && msg[0] == '{') {
        if (l->owner->on_override)
            l->owner->on_override(l->owner->on_override_arg, msg, len);
        return;
    }
    const char *colon = memchr(msg, ':', len);
    if (!colon || colon == msg || (size_t)(colon - msg) > POLICY_NAME_MAX)
        return;
    char policy[POLICY_NAME_MAX + 1];
    memcpy(policy, msg, (size_t)(colon - msg));
    policy[colon - msg] = '\0';
    if (!policy_name_valid(policy) || !l->owner->on_reset)
        return;
    size_t keylen = len - (size_t)(colon - msg) - 1;
    l->owner->on_reset(l->owner->on_reset_arg, policy, colon + 1, keylen);
}

/* The reply to SUBSCRIBE: the subscription stands from here. */
static void on_subscribed(void *arg, redisReply *r)
{
    struct resets_listener *l = arg;
    if (!r)
        return; /* connection gone: it resubscribes on reconnect */
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 3 ||
        r->element[0]->type != REDIS_REPLY_STRING || strcmp(r->element[0]->str, "subscribe") != 0) {
        log_event(l->log, LOG_LVL_ERROR, "redis reset listener setup failed", "target",
                  l->target ? l->target : redis_conn_target(l->conn), "error",
                  r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply", NULL);
        redis_conn_drop(l->conn, "SUBSCRIBE refused");
        return;
    }
    /* Healthy: the next loss reconnects after the shortest backoff, not
     * after one doubled by every loss the listener ever had. */
    redis_conn_healthy(l->conn);
    if (l->target)
        log_event(l->log, LOG_LVL_INFO, "redis reset listener subscribed", "channel", l->channel,
                  NULL);
    else
        log_event(l->log, LOG_LVL_INFO, "redis reset listener subscribed", "channel", l->channel,
                  "node", redis_conn_target(l->conn), NULL);
    /* Resets announced while no subscription stood were not heard. */
    if (l->owner->on_reset)
        l->owner->on_reset(l->owner->on_reset_arg, NULL, NULL, 0);
}

static void on_up(void *arg, struct redis_conn *c)
{
    struct resets_listener *l = arg;
    const char *argv[] = {"SUBSCRIBE", l->channel};
    size_t lens[] = {9, strlen(l->channel)};
    if (redis_conn_command(c, on_subscribed, l, 2, argv, lens) < 0)
        redis_conn_drop(c, "cannot send SUBSCRIBE");
}

/* Every message on the subscribed connection (the SUBSCRIBE call took its
 * confirmation). */
static void on_push(void *arg, redisReply *r)
{
    struct resets_listener *l = arg;
    if (r->type == REDIS_REPLY_ARRAY && r->elements == 3 &&
        r->element[0]->type == REDIS_REPLY_STRING && strcmp(r->element[0]->str, "message") == 0 &&
        r->element[2]->type == REDIS_REPLY_STRING)
        on_message(l, r->element[2]->str, r->element[2]->len);
}

static void on_down(void *arg, struct redis_conn *c, const char *why)
{
    struct resets_listener *l = arg;
    (void)c;
    if (l->down)
        l->down(l->down_arg, l, why);
}

struct resets_listener *resets_listener_new(struct event_base *base, const struct logger *lg,
                                            struct backend *owner, const char *channel,
                                            const struct redis_endpoint *ep, const char *target,
                                            resets_down_fn down, void *down_arg)
{
    struct resets_listener *l = xcalloc(1, sizeof *l);
    l->log = lg;
    l->owner = owner;
    l->channel = xstrdup(channel);
    l->target = target;
    l->down = down;
    l->down_arg = down_arg;
    struct redis_conn_events ev = {.up = on_up, .down = on_down, .push = on_push, .arg = l};
    l->conn = redis_conn_new(base, lg, "resets", ep, &ev);
    redis_conn_connect(l->conn);
    return l;
}

void resets_listener_set_endpoint(struct resets_listener *l, const struct redis_endpoint *ep)
{
    redis_conn_set_endpoint(l->conn, ep);
}

void resets_listener_move(struct resets_listener *l, const struct redis_endpoint *ep,
                          const char *why)
{
    redis_conn_set_endpoint(l->conn, ep);
    redis_conn_drop(l->conn, why);
    redis_conn_connect(l->conn);
}

const char *resets_listener_target(const struct resets_listener *l)
{
    return redis_conn_target(l->conn);
}

void resets_listener_free(struct resets_listener *l)
{
    if (!l)
        return;
    redis_conn_free(l->conn);
    free(l->channel);
    free(l);
}
