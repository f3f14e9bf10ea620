/* SPDX-License-Identifier: Apache-2.0 */
/*
 * backend_cluster.c: the Redis Cluster backend (backend_cluster.h).
 *
 * Owns: the nodes (one redis_node per address the cluster named, each
 * required to be a master, kept until the backend is freed; those that a
 * complete map does not name as masters, e.g. replicas given as seeds, are
 * parked: disconnected until a map names them or no node is left to ask
 * for the map), the slot map
 * (redis_cluster.h) and which node serves each slot, the map refresh (one
 * CLUSTER SLOTS in flight at a time), the calls in flight and their
 * retries, which node the reset listener (resets.h) is on. Speaks RESP
 * only through redis_node, redis_conn and resets.
 *
 * A request's checks are grouped by slot (every key of one check shares
 * its hash tag, policy.h). One group: one call, atomic and two-pass on its
 * node, as on a single Redis. Several groups (Redis refuses keys of
 * different slots in one call, CROSSSLOT, even on one node): two phases.
 *   1. Every group runs as a dry run, in parallel. A group that denies
 *      makes the request denied, and nothing was written anywhere: every
 *      tier then reports its figures as if nothing were taken, which the
 *      dry run returns alongside those of an allowed request
 *      (SCRIPTS_DRY_RUN_BOTH), so the answer is exactly one Redis's for
 *      the same denied request, at no extra round trip. A dry run request
 *      ends here.
 *   2. Otherwise every group runs for real, in parallel, re-checking on
 *      its node atomically. A group that now denies (another request took
 *      the room between the phases) writes nothing and the request is
 *      answered denied; groups that committed keep what they took (no
 *      refund: that can only make clients get fewer admissions than the
 *      limits allow, never more), and their figures say so: each group
 *      reports what its own run did (taken where it committed, untaken
 *      where it denied), and the reply names the checks that committed
 *      (backend_reply.taken: the Envoy service's second round, rls.c,
 *      must not decide them again).
 * A report (check_request.report) decides nothing, so it has no phase 1:
 * every group is charged at once, atomically on its node; a group that
 * fails leaves the others charged (the request is answered per
 * failure_mode, and a caller that retries a 503 may charge those twice:
 * an overcount, never an undercount).
 * The tier results are put back in the request's check order.
 * A local lease's take or give-back (check_request.block_op, core/
 * local_lease.h) is a request of one check, so one group: one call in its
 * mode ("L<want>", "G<taken>"), its reply's two more integers decoded as
 * on one server (scripts_decode_call), with the redirects, retries and
 * failures of any call (a take whose node is lost completes unavailable,
 * once: the core then decides through Redis again; a give-back that fails
 * counts its units stranded, local_lease_calls.c).
 *
 * Redirects and retries per group: MOVED counts on the node that sent it,
 * refreshes the map and resends to the named node; ASK resends to the
 * named node preceded by ASKING (the map is unchanged); at most
 * MAX_REDIRECTS per group. TRYAGAIN, CLUSTERDOWN and a node not ready yet
 * (just named by a redirect, still connecting) wait RETRY_DELAY_US, at
 * most MAX_RETRIES times. Past a bound, or when the node's connection
 * goes, the group (and its request) is unavailable: the failure_mode
 * answer. Deadlines are check.c's; a call here always completes (done
 * exactly once), even after check.c gave up on it, and its memory is
 * freed right after done.
 */
#include <event2/event.h>
#include <event2/event_struct.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/redis/backend_cluster.h"
#include "backend/redis/redis_cluster.h"
#include "backend/redis/redis_conn.h"
#include "backend/redis/redis_node.h"
#include "backend/redis/redis_tls.h"
#include "backend/redis/resets.h"
#include "backend/redis/scripts.h"
#include "config/config.h"
#include "config/redis_url.h"
#include "core/metrics.h"
#include "lib/timer.h"

#define MAX_REDIRECTS 5
#define MAX_RETRIES 3
#define RETRY_DELAY_US 20000
/* While the map is incomplete or a master is not ready, the map is asked
 * for again this often: a failover is seen within this of the cluster
 * electing the new master (a MOVED comes only from a node that is up). */
#define REFRESH_NOT_READY_US 250000
/* And this often while ready: a slot given up (DELSLOTS) or a topology
 * change that no call has run into yet. */
#define REFRESH_READY_US 5000000
/* A CLUSTER SLOTS unanswered this long: its node is hung (paused, cut off
 * with the connection still open) and is dropped, or no refresh would ever
 * be sent again (one in flight at a time). Checked on the refresh timer. */
#define REFRESH_TIMEOUT_US 1000000
#define HOST_MAX 256

struct backend_cluster;

struct cnode {
    struct backend_cluster *b;
    struct redis_node *node;
    char *host;
    int port;
    int parked;               /* stopped: not a master of the map */
    int inflight;             /* calls sent, no reply yet */
    int64_t last_progress_us; /* monotonic: last reply, or first send when idle */
};

struct ccall;

/* The checks of one slot, and their call. */
struct cgroup {
    struct ccall *call;
    unsigned slot;
    struct check_request sub; /* shallow copies of the request's items */
    size_t *index;            /* sub.checks[i] is the request's check index[i] */
    struct script_call sc;
    struct tier_result *res; /* sc.ntiers */
    /* Phase 1: res with nothing taken, the figures if the request is denied */
    struct tier_result *res_if_denied;
    struct cnode *sent_to;  /* the node of the call in flight */
    struct cnode *redirect; /* MOVED/ASK target for the next send; NULL: the map's */
    int asking;
    int redirects, retries;
    int allowed; /* the script's request_allowed for this group */
    /* A local lease take or give-back (sub.block_op): the reply's two more
     * integers (scripts_decode_call). */
    int64_t lease_granted, lease_until_us;
    /* A lease operation's group: its leases (copies) and their outcomes. */
    struct lease_ref *lrefs;
    struct lease_outcome *lout;
    size_t nl;
    struct event retry_ev;
    int retry_armed;
};

/* One request in flight. */
struct ccall {
    struct backend_cluster *b;
    struct ccall *prev, *next; /* b->calls */
    backend_done_fn done;
    backend_lease_done_fn lease_done; /* a lease operation instead of a check */
    size_t nleases;
    void *arg;
    const struct check_request *req;
    size_t ngroups;
    struct cgroup *groups;
    size_t *offset; /* the first result of each of the request's checks */
    size_t outstanding;
    int phase; /* 1: the dry run of a request of several groups; 2: the rest */
    enum backend_status status;
    char err[RL_ERRLEN];
};

struct backend_cluster {
    struct backend base_iface; /* first: a struct backend * points here */
    struct event_base *base;
    const struct logger *log;
    struct metrics *metrics;
    struct redis_tls *tls;
    struct redis_url creds; /* every node's: the first seed's (the env's password) */
    char target[HOST_MAX + 32];

    size_t nnodes;
    struct cnode **nodes;
    size_t next_refresh_node; /* round robin over nodes */

    int have_map;
    struct redis_cluster_map map;
    struct cnode *slot_node[REDIS_CLUSTER_SLOTS];
    int ready;
    int refresh_inflight, refresh_again;
    struct cnode *refresh_node; /* the node of the refresh in flight */
    int64_t refresh_sent_us;    /* monotonic */
    struct event *refresh_ev;
    int64_t timeout_us; /* the last config's redis.timeout, for note_timeout */
    int64_t batch;      /* the last config's redis.batch, every node's */

    struct ccall *calls;
    int started, freeing;

    /* The reset listener. */
    struct resets_listener *sub;
    struct cnode *sub_node;
    char *channel;
};

static void send_group(struct cgroup *g);
static void request_refresh(struct backend_cluster *b);

/* ---- nodes ---- */

static void arm_refresh(struct backend_cluster *b)
{
    timer_arm_us(b->refresh_ev, b->ready ? REFRESH_READY_US : REFRESH_NOT_READY_US);
}

static void recompute_ready(struct backend_cluster *b)
{
    int was = b->ready;
    int ready = b->have_map && redis_cluster_map_unserved(&b->map) == 0;
    for (size_t s = 0; ready && s < REDIS_CLUSTER_SLOTS; s++)
        ready = b->slot_node[s] && redis_node_ready(b->slot_node[s]->node);
    b->ready = ready;
    if (b->freeing)
        return;
    backend_state_changed(&b->base_iface);
    /* Not ready any more: ask for the map soon, not at the slow pace. */
    if (was && !ready && b->started)
        arm_refresh(b);
}

static void on_node_state(void *arg, struct redis_node *n, int ready)
{
    struct cnode *cn = arg;
    struct backend_cluster *b = cn->b;
    if (b->freeing)
        return;
    recompute_ready(b);
    /* A master lost: its slots may be served elsewhere soon. A node up
     * while the cluster is not ready: the map it has may be what is
     * missing (at start, the first seed that answers gives it). */
    if (!ready || !b->ready)
        request_refresh(b);
}

/* The node at host:port, made (and started) if new. */
static struct cnode *node_get(struct backend_cluster *b, const char *host, int port)
{
    for (size_t i = 0; i < b->nnodes; i++)
        if (b->nodes[i]->port == port && strcmp(b->nodes[i]->host, host) == 0)
            return b->nodes[i];
    struct cnode *cn = xcalloc(1, sizeof *cn);
    cn->b = b;
    cn->host = xstrdup(host);
    cn->port = port;
    struct redis_endpoint ep = redis_conn_endpoint(&b->creds, cn->host, port, b->tls);
    cn->node = redis_node_new(b->base, b->log, b->metrics, &ep, 1, on_node_state, cn);
    redis_node_set_timeout(cn->node, b->timeout_us);
    redis_node_set_batch(cn->node, b->batch);
    b->nodes = xrealloc(b->nodes, (b->nnodes + 1) * sizeof *b->nodes);
    b->nodes[b->nnodes++] = cn;
    if (b->started)
        redis_node_start(cn->node);
    return cn;
}

/* ---- the slot map ---- */

/* Counts a failover on each master that took slots from a master gone
 * from the new map (the old one failed or was demoted): a slot that moved
 * between two masters of the new map is resharding, not a failover. */
static void count_failovers(struct backend_cluster *b, struct cnode *const *old,
                            struct cnode *const *masters, size_t nmasters)
{
    struct cnode *counted[64];
    size_t ncounted = 0;
    for (size_t s = 0; s < REDIS_CLUSTER_SLOTS; s++) {
        struct cnode *was = old[s], *now = b->slot_node[s];
        if (!was || !now || was == now)
            continue;
        size_t i;
        for (i = 0; i < nmasters && masters[i] != was; i++)
            ;
        if (i < nmasters)
            continue;
        for (i = 0; i < ncounted && counted[i] != now; i++)
            ;
        if (i < ncounted || ncounted == 64)
            continue;
        counted[ncounted++] = now;
        metrics_node_count(b->metrics, redis_node_target(now->node), METRICS_NODE_FAILOVERS);
        log_event(b->log, LOG_LVL_WARN, "redis cluster failover seen", "new_master",
                  redis_node_target(now->node), "old_master", redis_node_target(was->node), NULL);
    }
}

/*
 * A node that is not a master of a complete map is parked: a replica would
 * otherwise reconnect forever, each time refused by the ROLE check (a
 * warning, a reconnect counted). A map with a slot unserved parks nothing:
 * it may be a cluster still forming. A master named again is restarted.
 */
static void park_nodes(struct backend_cluster *b, struct cnode *const *masters, size_t nmasters)
{
    int complete = redis_cluster_map_unserved(&b->map) == 0;
    for (size_t i = 0; i < b->nnodes; i++) {
        struct cnode *cn = b->nodes[i];
        size_t k;
        for (k = 0; k < nmasters && masters[k] != cn; k++)
            ;
        if (k < nmasters && cn->parked) {
            cn->parked = 0;
            redis_node_start(cn->node);
        } else if (k == nmasters && complete && !cn->parked) {
            cn->parked = 1;
            log_event(b->log, LOG_LVL_INFO, "redis cluster node let go", "node",
                      redis_node_target(cn->node), "reason", "not a master of the cluster", NULL);
            redis_node_stop(cn->node, "not a master of the cluster");
        }
    }
}

/* Every parked node connects again: none is left to ask for the map. */
static void unpark_all(struct backend_cluster *b)
{
    for (size_t i = 0; i < b->nnodes; i++) {
        if (b->nodes[i]->parked) {
            b->nodes[i]->parked = 0;
            redis_node_start(b->nodes[i]->node);
        }
    }
}

static void map_install(struct backend_cluster *b, struct redis_cluster_map *m)
{
    struct cnode **old = xmalloc(sizeof b->slot_node);
    memcpy(old, b->slot_node, sizeof b->slot_node);
    struct cnode **by_master = xcalloc(m->nmasters ? m->nmasters : 1, sizeof *by_master);
    for (size_t i = 0; i < m->nmasters; i++)
        by_master[i] = node_get(b, m->masters[i].host, m->masters[i].port);
    for (size_t s = 0; s < REDIS_CLUSTER_SLOTS; s++)
        b->slot_node[s] = m->slot_master[s] < 0 ? NULL : by_master[m->slot_master[s]];
    if (b->have_map)
        count_failovers(b, old, by_master, m->nmasters);
    redis_cluster_map_free(&b->map);
    b->map = *m;
    b->have_map = 1;
    free(old);
    recompute_ready(b);
    park_nodes(b, by_master, m->nmasters);
    free(by_master);
}

static void on_slots_reply(void *arg, redisReply *r)
{
    struct cnode *cn = arg;
    struct backend_cluster *b = cn->b;
    b->refresh_inflight = 0;
    if (b->freeing)
        return;
    struct redis_cluster_map m;
    char err[RL_ERRLEN];
    if (!r) {
        err[0] = '\0';
    } else if (r->type == REDIS_REPLY_ERROR) {
        log_event(b->log, LOG_LVL_WARN, "redis cluster map refresh failed", "node",
                  redis_node_target(cn->node), "error", r->str, NULL);
    } else if (redis_cluster_map_parse(r, cn->host, &m, err, sizeof err) < 0) {
        log_event(b->log, LOG_LVL_WARN, "redis cluster map refresh failed", "node",
                  redis_node_target(cn->node), "error", err, NULL);
    } else {
        map_install(b, &m);
    }
    if (b->refresh_again) {
        b->refresh_again = 0;
        request_refresh(b);
    }
}

/* CLUSTER SLOTS on the next connected node, round robin; one at a time
 * (a second request while one is in flight makes one more after it). */
static void request_refresh(struct backend_cluster *b)
{
    if (b->freeing || !b->started)
        return;
    if (b->refresh_inflight) {
        b->refresh_again = 1;
        return;
    }
    const char *argv[] = {"CLUSTER", "SLOTS"};
    const size_t lens[] = {7, 5};
    for (size_t k = 0; k < b->nnodes; k++) {
        struct cnode *cn = b->nodes[(b->next_refresh_node + k) % b->nnodes];
        if (redis_node_command(cn->node, on_slots_reply, cn, 2, argv, lens) == 0) {
            b->next_refresh_node = (b->next_refresh_node + k + 1) % b->nnodes;
            b->refresh_inflight = 1;
            b->refresh_node = cn;
            b->refresh_sent_us = util_monotonic_us();
            return;
        }
    }
    /* Nothing connected: the timer asks again, with every node. */
    unpark_all(b);
    recompute_ready(b);
}

static void on_refresh_timer(evutil_socket_t fd, short what, void *arg)
{
    struct backend_cluster *b = arg;
    /* The drop completes the refresh (NULL): the next goes elsewhere. */
    if (b->refresh_inflight && util_monotonic_us() - b->refresh_sent_us >= REFRESH_TIMEOUT_US)
        redis_node_drop(b->refresh_node->node, "no answer to CLUSTER SLOTS in time");
    request_refresh(b);
    if (!b->freeing)
        arm_refresh(b);
}

/* ---- calls ---- */

static void call_free(struct ccall *c)
{
    for (size_t i = 0; i < c->ngroups; i++) {
        struct cgroup *g = &c->groups[i];
        if (g->retry_armed)
            event_del(&g->retry_ev);
        free(g->sub.checks);
        free(g->index);
        free(g->res);
        free(g->res_if_denied);
        free(g->lrefs);
        free(g->lout);
        scripts_call_free(&g->sc);
    }
    free(c->groups);
    free(c->offset);
    free(c);
}

static void call_unlink(struct ccall *c)
{
    if (c->prev)
        c->prev->next = c->next;
    else
        c->b->calls = c->next;
    if (c->next)
        c->next->prev = c->prev;
}

/* Whether every group's script allowed. */
static int all_allowed(const struct ccall *c)
{
    for (size_t i = 0; i < c->ngroups; i++)
        if (!c->groups[i].allowed)
            return 0;
    return 1;
}

/* The request's results from its groups', in check order. A request
 * denied in phase 1 took nothing anywhere: every group reports its figures
 * as if nothing were taken (a denying group's are those already). */
static void complete_ok(struct ccall *c)
{
    size_t n = request_tiers(c->req);
    struct tier_result *out = xcalloc(n ? n : 1, sizeof *out);
    int untaken = c->phase == 1 && !all_allowed(c);
    /* Denied in phase 2 (more than one group): the groups that allowed
     * committed, and the caller must know it (rls.c must not decide them
     * again). A single group's run is atomic: denied, it took nothing. */
    int partial = c->phase == 2 && c->ngroups > 1 && !all_allowed(c);
    uint64_t taken = 0;
    for (size_t i = 0; i < c->ngroups; i++) {
        const struct cgroup *g = &c->groups[i];
        const struct tier_result *res = untaken ? g->res_if_denied : g->res;
        size_t from = 0;
        for (size_t k = 0; k < g->sub.nchecks; k++) {
            size_t nt = g->sub.checks[k].policy->ntiers;
            memcpy(out + c->offset[g->index[k]], res + from, nt * sizeof *out);
            from += nt;
            if (partial && g->allowed)
                taken |= (uint64_t)1 << g->index[k];
        }
    }
    struct backend_reply reply = {.status = BACKEND_OK, .results = out, .taken = taken};
    if (c->ngroups == 1) {
        /* A local lease call is one check: one group. */
        reply.lease_granted = c->groups[0].lease_granted;
        reply.lease_until_us = c->groups[0].lease_until_us;
    }
    c->done(c->arg, &reply);
    free(out);
}

/* A lease operation's outcomes from its groups', in the order asked (each
 * group's index lists the leases it took, in order). */
static void complete_lease(struct ccall *c)
{
    struct lease_outcome *out = xcalloc(c->nleases ? c->nleases : 1, sizeof *out);
    for (size_t i = 0; i < c->ngroups; i++)
        for (size_t k = 0; k < c->groups[i].nl; k++)
            out[c->groups[i].index[k]] = c->groups[i].lout[k];
    struct backend_lease_reply reply = {.status = BACKEND_OK, .outcomes = out};
    c->lease_done(c->arg, &reply);
    free(out);
}

static void call_finish(struct ccall *c)
{
    call_unlink(c);
    if (c->lease_done) {
        if (c->status == BACKEND_OK) {
            complete_lease(c);
        } else {
            struct backend_lease_reply reply = {.status = c->status, .errmsg = c->err};
            c->lease_done(c->arg, &reply);
        }
    } else if (c->status == BACKEND_OK) {
        complete_ok(c);
    } else {
        struct backend_reply reply = {.status = c->status, .errmsg = c->err};
        c->done(c->arg, &reply);
    }
    call_free(c);
}

/* The first failure of a call is the one reported. */
static void call_fail(struct ccall *c, enum backend_status st, const char *msg)
{
    if (c->status != BACKEND_OK)
        return;
    c->status = st;
    snprintf(c->err, sizeof c->err, "%s", msg);
}

/* Sends every group with ARGV[2] = run (SCRIPTS_RUN...); run NULL: as
 * the call was built (a request of one group, a report: the mode
 * scripts_build_call wrote, a local lease's "L<want>" or "G<taken>"
 * included). */
static void start_phase(struct ccall *c, int phase, const char *run)
{
    c->phase = phase;
    c->outstanding = c->ngroups;
    for (size_t i = 0; i < c->ngroups; i++) {
        struct cgroup *g = &c->groups[i];
        /* ARGV[2], right after the keys and the time; each is one byte, as
         * the argument scripts_build_call wrote there. */
        if (run)
            g->sc.args[g->sc.nkeys + 1] = run;
        g->redirects = g->retries = 0;
        g->redirect = NULL;
        g->asking = 0;
    }
    for (size_t i = 0; i < c->ngroups; i++)
        send_group(&c->groups[i]);
}

static void group_done(struct cgroup *g)
{
    struct ccall *c = g->call;
    if (--c->outstanding > 0)
        return;
    /* A dry run request, or a denial somewhere: phase 1 is the answer,
     * and nothing was written. */
    if (c->status == BACKEND_OK && c->phase == 1 && all_allowed(c) && !c->req->dry_run) {
        start_phase(c, 2, SCRIPTS_RUN);
        return;
    }
    call_finish(c);
}

static void group_fail(struct cgroup *g, enum backend_status st, const char *msg)
{
    call_fail(g->call, st, msg);
    group_done(g);
}

static void on_retry_timer(evutil_socket_t fd, short what, void *arg)
{
    struct cgroup *g = arg;
    g->retry_armed = 0;
    send_group(g);
}

/* Sends again after RETRY_DELAY_US, or fails the group past MAX_RETRIES. */
static void retry_later(struct cgroup *g, const char *why)
{
    struct backend_cluster *b = g->call->b;
    if (b->freeing || ++g->retries > MAX_RETRIES) {
        group_fail(g, BACKEND_UNAVAILABLE, why);
        return;
    }
    if (evtimer_assign(&g->retry_ev, b->base, on_retry_timer, g) < 0) {
        group_fail(g, BACKEND_UNAVAILABLE, why);
        return;
    }
    timer_arm_us(&g->retry_ev, RETRY_DELAY_US);
    g->retry_armed = 1;
}

static void decode_group(struct cgroup *g, const redisReply *r)
{
    struct redis_node_ints ints;
    char err[RL_ERRLEN];
    if (redis_node_ints_of(r, &ints) < 0 || ints.n < SCRIPTS_RESULT_HEAD) {
        call_fail(g->call, BACKEND_ERROR, REDIS_NODE_NOT_INTS);
    } else if (g->call->lease_done) {
        if (scripts_decode_lease(ints.v, ints.n, g->nl, g->lout, err, sizeof err) < 0)
            call_fail(g->call, BACKEND_ERROR, err);
    } else if ((g->call->phase == 1
                    ? scripts_decode_dry_run_both(ints.v, ints.n, g->sc.ntiers, g->res,
                                                  g->res_if_denied, err, sizeof err)
                    : scripts_decode_call(&g->sc, ints.v, ints.n, g->res, &g->lease_granted,
                                          &g->lease_until_us, err, sizeof err)) < 0) {
        call_fail(g->call, BACKEND_ERROR, err);
    } else {
        g->allowed = ints.v[1] != 0;
    }
    redis_node_ints_free(&ints);
}

/* MOVED or ASK: resend to the named node. Returns 0 if handled. */
static int follow_redirect(struct cgroup *g, struct cnode *from, const char *msg)
{
    struct backend_cluster *b = g->call->b;
    char host[HOST_MAX];
    unsigned slot;
    int port;
    int kind = redis_cluster_redirect(msg, &slot, host, sizeof host, &port);
    if (!kind)
        return -1;
    metrics_node_count(b->metrics, redis_node_target(from->node),
                       kind == 1 ? METRICS_NODE_MOVED : METRICS_NODE_ASK);
    if (kind == 1)
        request_refresh(b);
    if (++g->redirects > MAX_REDIRECTS) {
        group_fail(g, BACKEND_UNAVAILABLE, "too many cluster redirects");
        return 0;
    }
    g->redirect = node_get(b, host[0] ? host : from->host, port);
    if (g->redirect->parked) {
        /* A replica promoted since the last map: a master now. */
        g->redirect->parked = 0;
        redis_node_start(g->redirect->node);
    }
    g->asking = kind == 2;
    send_group(g);
    return 0;
}

static void on_group_reply(void *arg, redisReply *r)
{
    struct cgroup *g = arg;
    struct cnode *cn = g->sent_to;
    struct backend_cluster *b = g->call->b;
    g->sent_to = NULL;
    cn->inflight--;
    cn->last_progress_us = util_monotonic_us();
    if (!r) {
        request_refresh(b);
        group_fail(g, BACKEND_UNAVAILABLE, "connection to a redis cluster node lost");
        return;
    }
    if (r->type == REDIS_REPLY_ERROR) {
        if (b->freeing) {
            group_fail(g, BACKEND_UNAVAILABLE, "shutting down");
        } else if (follow_redirect(g, cn, r->str) == 0) {
        } else if (strncmp(r->str, "TRYAGAIN", 8) == 0) {
            retry_later(g, r->str);
        } else if (strncmp(r->str, "CLUSTERDOWN", 11) == 0) {
            /* A slot not served, or the node cut off: the map may say. */
            request_refresh(b);
            retry_later(g, r->str);
        } else {
            group_fail(g, BACKEND_ERROR, r->str);
        }
        return;
    }
    if (r->type == REDIS_REPLY_ARRAY)
        decode_group(g, r);
    else
        call_fail(g->call, BACKEND_ERROR, "script reply is not an array");
    group_done(g);
}

static void send_group(struct cgroup *g)
{
    struct backend_cluster *b = g->call->b;
    struct cnode *cn = g->redirect ? g->redirect : b->slot_node[g->slot];
    if (!cn) {
        retry_later(g, "a slot of the request has no master");
        return;
    }
    /* Set before the call in case its reply came at once. */
    g->sent_to = cn;
    if (cn->inflight++ == 0)
        cn->last_progress_us = util_monotonic_us();
    /* Batched with the other calls of its slot (the keys of one FCALL
     * share a slot); after an ASK, alone behind its ASKING. */
    int rc = g->asking ? redis_node_call(cn->node, &g->sc, 1, on_group_reply, g)
                       : redis_node_call_batched(cn->node, &g->sc, g->slot, on_group_reply, g);
    if (rc < 0) {
        g->sent_to = NULL;
        cn->inflight--;
        /* Just named by a redirect and still connecting, or down. */
        retry_later(g, "the redis cluster node of a slot is not ready");
    }
}

/* The slot of check it: that of its first key (all its keys share one). */
static unsigned check_slot(const struct config *cfg, const struct check_item *it)
{
    char key[POLICY_KEY_BUF];
    int n = policy_tier_key(cfg->key_prefix, it->policy->name, it->key, it->keylen,
                            &it->policy->tiers[0], 0, key, sizeof key);
    if (n < 0)
        abort(); /* POLICY_KEY_BUF bounds every valid key (policy.h) */
    return redis_cluster_keyslot(key, (size_t)n);
}

/* Groups req's checks by slot into c->groups, each with its call built. */
static void make_groups(struct ccall *c, const struct config *cfg, int64_t now_us)
{
    const struct check_request *req = c->req;
    unsigned slots[REQUEST_MAX_CHECKS];
    size_t n = req->nchecks;
    c->groups = xcalloc(n ? n : 1, sizeof *c->groups);
    c->offset = xcalloc(n ? n : 1, sizeof *c->offset);
    size_t off = 0;
    for (size_t i = 0; i < n; i++) {
        c->offset[i] = off;
        off += req->checks[i].policy->ntiers;
        slots[i] = check_slot(cfg, &req->checks[i]);
        size_t g;
        for (g = 0; g < c->ngroups && c->groups[g].slot != slots[i]; g++)
            ;
        if (g == c->ngroups) {
            c->groups[g].slot = slots[i];
            c->groups[g].call = c;
            c->groups[g].sub.checks = xcalloc(n, sizeof *c->groups[g].sub.checks);
            c->groups[g].index = xcalloc(n, sizeof *c->groups[g].index);
            c->groups[g].sub.dry_run = req->dry_run;
            c->groups[g].sub.report = req->report;
            /* A local lease's take or give-back: one check, one group. */
            c->groups[g].sub.block_op = req->block_op;
            c->groups[g].sub.block_units = req->block_units;
            c->groups[g].sub.block_taken_us = req->block_taken_us;
            memcpy(c->groups[g].sub.lease_nonce, req->lease_nonce, sizeof req->lease_nonce);
            c->ngroups++;
        }
        struct cgroup *grp = &c->groups[g];
        /* A shallow copy: the request owns the key and any policy made for
         * it, and outlives the call (backend.h); owned stays NULL here. */
        grp->sub.checks[grp->sub.nchecks] = req->checks[i];
        grp->sub.checks[grp->sub.nchecks].owned = NULL;
        grp->index[grp->sub.nchecks++] = i;
    }
    for (size_t g = 0; g < c->ngroups; g++) {
        scripts_build_call(cfg, &c->groups[g].sub, now_us, &c->groups[g].sc);
        size_t nt = c->groups[g].sc.ntiers ? c->groups[g].sc.ntiers : 1;
        c->groups[g].res = xcalloc(nt, sizeof *c->groups[g].res);
        c->groups[g].res_if_denied = xcalloc(nt, sizeof *c->groups[g].res_if_denied);
    }
}

/* redis.timeout and redis.batch may change on reload: every node's stall
 * rule and batches follow. */
static void follow_timeout(struct backend_cluster *b, const struct config *cfg)
{
    if (b->timeout_us != cfg->redis_timeout_us || b->batch != cfg->redis_batch) {
        b->timeout_us = cfg->redis_timeout_us;
        b->batch = cfg->redis_batch;
        for (size_t i = 0; i < b->nnodes; i++) {
            redis_node_set_timeout(b->nodes[i]->node, b->timeout_us);
            redis_node_set_batch(b->nodes[i]->node, b->batch);
        }
    }
}

static struct ccall *call_new(struct backend_cluster *b, void *arg)
{
    struct ccall *c = xcalloc(1, sizeof *c);
    c->b = b;
    c->arg = arg;
    c->status = BACKEND_OK;
    return c;
}

/* Registers c (its groups made) among the calls in flight and returns 1;
 * or frees it and returns 0 if a slot's master is not ready: the caller
 * answers now rather than wait for the deadline (the circuit is open for
 * that part of the cluster). */
static int call_link(struct backend_cluster *b, struct ccall *c)
{
    for (size_t i = 0; i < c->ngroups; i++) {
        struct cnode *cn = b->slot_node[c->groups[i].slot];
        if (!cn || !redis_node_ready(cn->node)) {
            call_free(c);
            return 0;
        }
    }
    c->next = b->calls;
    if (b->calls)
        b->calls->prev = c;
    b->calls = c;
    return 1;
}

static int cluster_decide(struct backend *iface, const struct config *cfg,
                          const struct check_request *req, int64_t now_us, backend_done_fn done,
                          void *arg)
{
    struct backend_cluster *b = (struct backend_cluster *)iface;
    follow_timeout(b, cfg);
    if (!b->have_map || req->nchecks == 0)
        return -1;
    struct ccall *c = call_new(b, arg);
    c->done = done;
    c->req = req;
    make_groups(c, cfg, now_us);
    if (!call_link(b, c))
        return -1;
    /* One group, or a report (no decision: nothing to agree on first):
     * each call as built. */
    if (req->report || c->ngroups == 1)
        start_phase(c, 2, NULL);
    else
        start_phase(c, 1, SCRIPTS_DRY_RUN_BOTH);
    return 0;
}

/* Groups the leases by the slot of their key, one call per slot (a lease
 * operation is per lease: no two phases). */
static int cluster_lease(struct backend *iface, const struct config *cfg, int renew,
                         const struct lease_ref *refs, size_t n, backend_lease_done_fn done,
                         void *arg)
{
    struct backend_cluster *b = (struct backend_cluster *)iface;
    follow_timeout(b, cfg);
    if (!b->have_map || n == 0)
        return -1;
    struct ccall *c = call_new(b, arg);
    c->lease_done = done;
    c->nleases = n;
    c->groups = xcalloc(n, sizeof *c->groups);
    char key[POLICY_KEY_BUF];
    for (size_t i = 0; i < n; i++) {
        int k = policy_redis_key(cfg->key_prefix, refs[i].policy, refs[i].key, refs[i].keylen,
                                 refs[i].tier, NULL, key, sizeof key);
        if (k < 0)
            abort(); /* a decoded id's parts fit POLICY_KEY_BUF */
        unsigned slot = redis_cluster_keyslot(key, (size_t)k);
        size_t g;
        for (g = 0; g < c->ngroups && c->groups[g].slot != slot; g++)
            ;
        struct cgroup *grp = &c->groups[g];
        if (g == c->ngroups) {
            grp->slot = slot;
            grp->call = c;
            grp->lrefs = xcalloc(n, sizeof *grp->lrefs);
            grp->lout = xcalloc(n, sizeof *grp->lout);
            grp->index = xcalloc(n, sizeof *grp->index);
            c->ngroups++;
        }
        grp->lrefs[grp->nl] = refs[i];
        grp->index[grp->nl++] = i;
    }
    int64_t now = cfg->clock == CLOCK_SOURCE_LOCAL ? util_realtime_us() : -1;
    for (size_t g = 0; g < c->ngroups; g++)
        scripts_build_lease_call(cfg, renew, c->groups[g].lrefs, c->groups[g].nl, now,
                                 &c->groups[g].sc);
    if (!call_link(b, c))
        return -1;
    start_phase(c, 2, renew ? SCRIPTS_LEASE_RENEW : SCRIPTS_LEASE_RELEASE);
    return 0;
}

/* ---- resets (resets.h) ---- */

static int cluster_reset(struct backend *iface, const struct config *cfg, const struct policy *p,
                         const char *key, size_t keylen, backend_reset_done_fn done, void *arg)
{
    struct backend_cluster *b = (struct backend_cluster *)iface;
    if (!b->have_map || !b->channel || p->ntiers == 0)
        return -1;
    struct resets_cmds c;
    resets_cmds_build(&c, cfg, p, key, keylen, b->channel);
    /* On the slot's master (every key shares one hash tag): the PUBLISH
     * after the DEL on the same node, and the cluster bus carries it to
     * every node. */
    struct cnode *cn = b->slot_node[redis_cluster_keyslot(c.del_argv[1], c.del_lens[1])];
    int rc =
        cn ? resets_send(cn->node, &c, "connection to a redis cluster node lost", done, arg) : -1;
    resets_cmds_free(&c);
    return rc;
}

/* The node the listener should use: a master of the map, the one after
 * the current in round robin, else a seed. */
static struct cnode *sub_pick(struct backend_cluster *b)
{
    size_t start = 0;
    for (size_t i = 0; i < b->nnodes; i++)
        if (b->nodes[i] == b->sub_node)
            start = i + 1;
    for (size_t k = 0; k < b->nnodes; k++) {
        struct cnode *cn = b->nodes[(start + k) % b->nnodes];
        if (redis_node_ready(cn->node))
            return cn;
    }
    return b->nodes[start % b->nnodes];
}

static void on_sub_down(void *arg, struct resets_listener *l, const char *why)
{
    struct backend_cluster *b = arg;
    if (b->freeing)
        return;
    log_event(b->log, LOG_LVL_WARN, "redis reset listener lost", "node", resets_listener_target(l),
              "reason", why, NULL);
    /* Elsewhere next time: this node may be gone for good. */
    b->sub_node = sub_pick(b);
    struct redis_endpoint ep =
        redis_conn_endpoint(&b->creds, b->sub_node->host, b->sub_node->port, b->tls);
    resets_listener_set_endpoint(l, &ep);
}

static void sub_start(struct backend_cluster *b)
{
    if (!b->channel || !b->started || b->sub)
        return;
    b->sub_node = sub_pick(b);
    struct redis_endpoint ep =
        redis_conn_endpoint(&b->creds, b->sub_node->host, b->sub_node->port, b->tls);
    b->sub =
        resets_listener_new(b->base, b->log, &b->base_iface, b->channel, &ep, NULL, on_sub_down, b);
}

static void cluster_watch_resets(struct backend *iface, const struct config *cfg)
{
    struct backend_cluster *b = (struct backend_cluster *)iface;
    if (resets_channel_follow(&b->channel, &b->sub, cfg->key_prefix))
        sub_start(b);
}

/* ---- the rest of the interface ---- */

static void cluster_start(struct backend *iface)
{
    struct backend_cluster *b = (struct backend_cluster *)iface;
    b->started = 1;
    for (size_t i = 0; i < b->nnodes; i++)
        redis_node_start(b->nodes[i]->node);
    sub_start(b);
    /* The first map comes from the first seed that connects (on_node_state),
     * or the timer's next try. */
    arm_refresh(b);
}

static int cluster_ready(const struct backend *iface)
{
    return ((const struct backend_cluster *)iface)->ready;
}

/* Tells the stall rule of each node whose calls have waited past the
 * timeout with no reply: check.c does not say which call timed out. */
static void cluster_note_timeout(struct backend *iface)
{
    struct backend_cluster *b = (struct backend_cluster *)iface;
    int64_t now = util_monotonic_us();
    for (size_t i = 0; i < b->nnodes; i++) {
        struct cnode *cn = b->nodes[i];
        if (cn->inflight > 0 && now - cn->last_progress_us >= b->timeout_us)
            redis_node_note_timeout(cn->node);
    }
}

static const char *cluster_target(const struct backend *iface)
{
    return ((const struct backend_cluster *)iface)->target;
}

static void cluster_free(struct backend *iface)
{
    struct backend_cluster *b = (struct backend_cluster *)iface;
    b->freeing = 1;
    resets_listener_free(b->sub);
    /* Freeing a node completes its calls (NULL): their groups fail, and
     * calls complete once every group has. Calls waiting on a retry timer
     * fail here. */
    for (size_t i = 0; i < b->nnodes; i++)
        redis_node_free(b->nodes[i]->node);
    while (b->calls) {
        struct ccall *c = b->calls;
        for (size_t i = 0; i < c->ngroups; i++) {
            struct cgroup *g = &c->groups[i];
            if (g->retry_armed) {
                event_del(&g->retry_ev);
                g->retry_armed = 0;
                group_fail(g, BACKEND_UNAVAILABLE, "shutting down");
                if (b->calls != c)
                    break; /* c finished and was freed */
            }
        }
        if (b->calls == c) {
            /* Only groups neither in flight nor waiting: cannot happen, as
             * each group is always one or the other until done; finish it
             * rather than loop. */
            call_fail(c, BACKEND_UNAVAILABLE, "shutting down");
            call_finish(c);
        }
    }
    for (size_t i = 0; i < b->nnodes; i++) {
        free(b->nodes[i]->host);
        free(b->nodes[i]);
    }
    free(b->nodes);
    if (b->refresh_ev)
        event_free(b->refresh_ev);
    redis_cluster_map_free(&b->map);
    redis_tls_free(b->tls);
    redis_url_free(&b->creds);
    free(b->channel);
    free(b);
}

/* redis.timeout bounds every call. */
static int64_t cluster_call_timeout_us(const struct backend *b, const struct config *cfg)
{
    (void)b;
    return cfg->redis_timeout_us;
}

static const struct backend_ops cluster_ops = {
    .name = "redis",
    .decide = cluster_decide,
    .lease = cluster_lease,
    .reset = cluster_reset,
    .watch_resets = cluster_watch_resets,
    .call_timeout_us = cluster_call_timeout_us,
    .note_timeout = cluster_note_timeout,
    .start = cluster_start,
    .ready = cluster_ready,
    .target = cluster_target,
    .free = cluster_free,
    .local_leases = 1,
};

struct backend *backend_cluster_new(struct event_base *base, const struct config *cfg,
                                    const struct logger *lg, struct metrics *m, char *err,
                                    size_t errlen)
{
    struct backend_cluster *b = xcalloc(1, sizeof *b);
    b->base_iface.ops = &cluster_ops;
    b->base = base;
    b->log = lg;
    b->metrics = m;
    b->refresh_ev = evtimer_new(base, on_refresh_timer, b);
    if (!b->refresh_ev) {
        snprintf(err, errlen, "cannot create a timer");
        cluster_free(&b->base_iface);
        return NULL;
    }
    if (cfg->redis_tls_on && !(b->tls = redis_tls_new(&cfg->redis_tls, err, errlen))) {
        cluster_free(&b->base_iface);
        return NULL;
    }
    /* The seeds as parsed at load: TCP URLs, one scheme, db 0
     * (config_redis.c). The first seed's credentials serve every node. */
    for (size_t i = 0; i < cfg->redis_ncluster; i++) {
        const struct redis_url *u = &cfg->redis_seeds[i];
        if (i == 0) {
            redis_url_copy(&b->creds, u, REDIS_URL_PASSWORD_ENV);
            snprintf(b->target, sizeof b->target, "cluster:%s:%d", u->host, u->port);
        }
        node_get(b, u->host, u->port);
    }
    if (b->nnodes == 0) {
        snprintf(err, errlen, "redis.cluster: no seed");
        cluster_free(&b->base_iface);
        return NULL;
    }
    return &b->base_iface;
}
