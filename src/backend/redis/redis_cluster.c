/* SPDX-License-Identifier: Apache-2.0 */
/*
 * redis_cluster.c: Redis Cluster's layout without I/O (redis_cluster.h):
 * the key slot as Redis computes it (keyHashSlot in Redis's cluster.c),
 * the slot map read from a CLUSTER SLOTS reply, and MOVED/ASK errors.
 * Owns nothing but the maps it fills; sending CLUSTER SLOTS and acting on
 * a redirect are backend_cluster.c's.
 */
#include "backend/redis/redis_cluster.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* CRC16-CCITT (XMODEM: polynomial 0x1021, initial value 0, no reflection),
 * the checksum Redis Cluster hashes keys with; bitwise rather than by
 * table since keys are short and this runs once per check. */
static uint16_t crc16_xmodem(const char *buf, size_t len)
{
    uint16_t crc = 0;
    for (size_t i = 0; i < len; i++) {
        crc ^= (uint16_t)((uint16_t)(unsigned char)buf[i] << 8);
        for (int b = 0; b < 8; b++)
            crc = (crc & 0x8000) ? (uint16_t)((crc << 1) ^ 0x1021) : (uint16_t)(crc << 1);
    }
    return crc;
}

unsigned redis_cluster_keyslot(const char *key, size_t len)
{
    /* Redis's rule exactly: the first '{', then the first '}' after it;
     * an empty tag ("{}") or no closing brace hashes the whole key. */
    const char *open = memchr(key, '{', len);
    if (open) {
        size_t start = (size_t)(open - key) + 1;
        const char *close = memchr(key + start, '}', len - start);
        if (close && close > key + start)
            return crc16_xmodem(key + start, (size_t)(close - (key + start))) &
                   (REDIS_CLUSTER_SLOTS - 1);
    }
    return crc16_xmodem(key, len) & (REDIS_CLUSTER_SLOTS - 1);
}

void redis_cluster_map_free(struct redis_cluster_map *m)
{
    if (!m)
        return;
    for (size_t i = 0; i < m->nmasters; i++)
        free(m->masters[i].host);
    free(m->masters);
    m->masters = NULL;
    m->nmasters = 0;
}

size_t redis_cluster_map_unserved(const struct redis_cluster_map *m)
{
    size_t n = 0;
    for (size_t s = 0; s < REDIS_CLUSTER_SLOTS; s++)
        n += m->slot_master[s] < 0;
    return n;
}

static int fail(char *err, size_t errlen, const char *msg, size_t i)
{
    snprintf(err, errlen, "CLUSTER SLOTS reply, range %zu: %s", i, msg);
    return -1;
}

/* The index of host:port in m->masters, added if new; -1 on no memory or
 * too many masters for the int16_t slot table. */
static int master_index(struct redis_cluster_map *m, const char *host, size_t hostlen, int port)
{
    for (size_t i = 0; i < m->nmasters; i++)
        if (m->masters[i].port == port && strlen(m->masters[i].host) == hostlen &&
            memcmp(m->masters[i].host, host, hostlen) == 0)
            return (int)i;
    if (m->nmasters >= REDIS_CLUSTER_SLOTS)
        return -1;
    struct redis_cluster_master *grown =
        realloc(m->masters, (m->nmasters + 1) * sizeof *m->masters);
    if (!grown)
        return -1;
    m->masters = grown;
    char *h = malloc(hostlen + 1);
    if (!h)
        return -1;
    memcpy(h, host, hostlen);
    h[hostlen] = '\0';
    m->masters[m->nmasters].host = h;
    m->masters[m->nmasters].port = port;
    return (int)m->nmasters++;
}

/* One entry: [first, last, [host, port, id?, ...], replicas...]. */
static int parse_range(const redisReply *e, const char *from_host, struct redis_cluster_map *m,
                       size_t i, char *err, size_t errlen)
{
    if (e->type != REDIS_REPLY_ARRAY || e->elements < 3)
        return fail(err, errlen, "not an array of at least 3 elements", i);
    const redisReply *first = e->element[0], *last = e->element[1], *node = e->element[2];
    if (first->type != REDIS_REPLY_INTEGER || last->type != REDIS_REPLY_INTEGER ||
        first->integer < 0 || last->integer >= REDIS_CLUSTER_SLOTS ||
        first->integer > last->integer)
        return fail(err, errlen, "bad slot range", i);
    if (node->type != REDIS_REPLY_ARRAY || node->elements < 2 ||
        node->element[0]->type != REDIS_REPLY_STRING ||
        node->element[1]->type != REDIS_REPLY_INTEGER || node->element[1]->integer <= 0 ||
        node->element[1]->integer > 65535 ||
        memchr(node->element[0]->str, '\0', node->element[0]->len))
        return fail(err, errlen, "bad master [host, port]", i);
    const char *host = node->element[0]->str;
    size_t hostlen = node->element[0]->len;
    /* Redis 7 names a node whose address it does not know "" (or "?" with
     * cluster-preferred-endpoint-type unknown-endpoint): the one asked. */
    if (hostlen == 0 || (hostlen == 1 && host[0] == '?')) {
        host = from_host;
        hostlen = strlen(from_host);
    }
    int idx = master_index(m, host, hostlen, (int)node->element[1]->integer);
    if (idx < 0)
        return fail(err, errlen, "out of memory", i);
    for (long long s = first->integer; s <= last->integer; s++)
        m->slot_master[s] = (int16_t)idx;
    return 0;
}

int redis_cluster_map_parse(const redisReply *r, const char *from_host,
                            struct redis_cluster_map *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    for (size_t s = 0; s < REDIS_CLUSTER_SLOTS; s++)
        out->slot_master[s] = -1;
    if (!r || r->type != REDIS_REPLY_ARRAY) {
        snprintf(err, errlen, "CLUSTER SLOTS reply is not an array");
        return -1;
    }
    for (size_t i = 0; i < r->elements; i++) {
        if (parse_range(r->element[i], from_host, out, i, err, errlen) < 0) {
            redis_cluster_map_free(out);
            for (size_t s = 0; s < REDIS_CLUSTER_SLOTS; s++)
                out->slot_master[s] = -1;
            return -1;
        }
    }
    return 0;
}

int redis_cluster_redirect(const char *err, unsigned *slot, char *host, size_t hostlen, int *port)
{
    int kind;
    const char *p;
    if (strncmp(err, "MOVED ", 6) == 0) {
        kind = 1;
        p = err + 6;
    } else if (strncmp(err, "ASK ", 4) == 0) {
        kind = 2;
        p = err + 4;
    } else {
        return 0;
    }
    char *end;
    unsigned long s = strtoul(p, &end, 10);
    if (end == p || *end != ' ' || s >= REDIS_CLUSTER_SLOTS)
        return 0;
    const char *addr = end + 1;
    /* host:port with the last ':' as the separator (Redis prints IPv6
     * hosts bare: "MOVED 1 ::1:7000"); brackets are taken off if present. */
    const char *colon = strrchr(addr, ':');
    if (!colon)
        return 0;
    char *pend;
    unsigned long pt = strtoul(colon + 1, &pend, 10);
    if (pend == colon + 1 || *pend != '\0' || pt == 0 || pt > 65535)
        return 0;
    const char *h = addr;
    size_t hl = (size_t)(colon - addr);
    if (hl >= 2 && h[0] == '[' && h[hl - 1] == ']') {
        h++;
        hl -= 2;
    }
    /* An empty host (":6381") is the node that answered: the caller's. */
    if (hl >= hostlen)
        return 0;
    memcpy(host, h, hl);
    host[hl] = '\0';
    *slot = (unsigned)s;
    *port = (int)pt;
    return kind;
}
