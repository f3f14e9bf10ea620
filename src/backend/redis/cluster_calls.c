/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cluster_calls.c: the Redis Cluster backend's calls (cluster_calls.h):
 * a request's checks grouped by slot, sent, redirected, retried and
 * answered. Owns the calls in flight and their groups; asks the topology
 * (cluster_topology.h) which node serves a slot, and for a refresh on a
 * MOVED. Speaks RESP only through redis_node.
 *
 * Every key of one check shares its hash tag (policy.h), so a check is in
 * one slot. One group: one call, atomic and two-pass on its node, as on a
 * single Redis. Several groups (Redis refuses keys of different slots in
 * one call, CROSSSLOT, even on one node): two phases.
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
 *      limits allow, never more), and their figures say so
 *      (backend_reply.taken names the checks that committed: rls.c's
 *      second round must not decide them again).
 * A report (check_request.report) decides nothing: every group is charged
 * at once, atomically on its node; a group that fails leaves the others
 * charged (an overcount on a retried 503, never an undercount). A local
 * lease's take or give-back (core/local_lease.h) is one check, so one
 * group, its reply's two more integers decoded as on one server. A lease
 * operation (renew, release) is per lease: one call per slot, no phases.
 *
 * Per group: MOVED counts on the node that sent it, refreshes the map and
 * resends to the named node; ASK resends there behind ASKING (the map is
 * unchanged); at most MAX_REDIRECTS. TRYAGAIN, CLUSTERDOWN and a node not
 * ready yet wait RETRY_DELAY_US, at most MAX_RETRIES times. Past a bound,
 * or when the node's connection goes, the group (and its request) is
 * unavailable: the failure_mode answer. Deadlines are check.c's; a call
 * here always completes (done exactly once), even after check.c gave up on
 * it, and its memory is freed right after done.
 */
#include <event2/event.h>
#include <event2/event_struct.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/redis/cluster_calls.h"
#include "backend/redis/cluster_topology.h"
#include "backend/redis/scripts.h"
#include "config/config.h"
#include "core/metrics.h"
#include "lib/timer.h"

#define MAX_REDIRECTS 5
#define MAX_RETRIES 3
#define RETRY_DELAY_US 20000

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

static void send_group(struct cgroup *g);

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
        cluster_topology_refresh(b);
    if (++g->redirects > MAX_REDIRECTS) {
        group_fail(g, BACKEND_UNAVAILABLE, "too many cluster redirects");
        return 0;
    }
    g->redirect = cluster_topology_node(b, host[0] ? host : from->host, port);
    /* Parked, it is a replica promoted since the last map: a master now. */
    cluster_topology_wake(g->redirect);
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
        cluster_topology_refresh(b);
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
            cluster_topology_refresh(b);
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

int cluster_calls_decide(struct backend *iface, const struct config *cfg,
                         const struct check_request *req, int64_t now_us, backend_done_fn done,
                         void *arg)
{
    struct backend_cluster *b = (struct backend_cluster *)iface;
    cluster_topology_follow(b, cfg);
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

int cluster_calls_lease(struct backend *iface, const struct config *cfg, int renew,
                        const struct lease_ref *refs, size_t n, backend_lease_done_fn done,
                        void *arg)
{
    struct backend_cluster *b = (struct backend_cluster *)iface;
    cluster_topology_follow(b, cfg);
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

void cluster_calls_shutdown(struct backend_cluster *b)
{
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
}
