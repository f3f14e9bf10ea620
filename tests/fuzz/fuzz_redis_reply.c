/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_redis_reply.c: libFuzzer harness for what the daemon reads of a
 * Redis Cluster's replies (redis_cluster.c): the input is RESP as a server
 * would send it, read by hiredis's reader as redis_conn.c reads it, and
 * every reply goes through redis_cluster_map_parse (as a CLUSTER SLOTS
 * reply) and, when it is an error, redis_cluster_redirect (as a MOVED or
 * ASK); the input as a whole is also a key for redis_cluster_keyslot.
 *
 * Beyond what ASan/UBSan/LSan catch, the harness aborts when a documented
 * contract breaks: a parsed map names only masters it holds, each with a
 * host and a port in 1..65535, and counts its unserved slots right; a
 * redirect has a slot under 16384, a port in range and a terminated host;
 * a key's slot is under 16384 and is its hash tag's slot when it has one.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "backend/redis/redis_cluster.h"

static void check_map(const redisReply *r)
{
    struct redis_cluster_map map;
    char err[256];
    if (redis_cluster_map_parse(r, "127.0.0.1", &map, err, sizeof err) < 0) {
        if (!memchr(err, '\0', sizeof err) || !err[0])
            abort(); /* a failure always says why */
        return;
    }
    size_t unserved = 0;
    for (size_t s = 0; s < REDIS_CLUSTER_SLOTS; s++) {
        if (map.slot_master[s] < 0)
            unserved++;
        else if ((size_t)map.slot_master[s] >= map.nmasters)
            abort();
    }
    if (unserved != redis_cluster_map_unserved(&map))
        abort();
    for (size_t i = 0; i < map.nmasters; i++)
        if (!map.masters[i].host || !map.masters[i].host[0] || map.masters[i].port < 1 ||
            map.masters[i].port > 65535)
            abort();
    redis_cluster_map_free(&map);
}

static void check_redirect(const redisReply *r)
{
    if (r->type != REDIS_REPLY_ERROR)
        return;
    unsigned slot = 0;
    char host[64];
    int port = 0;
    memset(host, 'x', sizeof host);
    int kind = redis_cluster_redirect(r->str, &slot, host, sizeof host, &port);
    if (kind < 0 || kind > 2)
        abort();
    if (kind && (slot >= REDIS_CLUSTER_SLOTS || port < 1 || port > 65535 ||
                 !memchr(host, '\0', sizeof host)))
        abort();
}

static void check_keyslot(const uint8_t *data, size_t size)
{
    const char *key = (const char *)data;
    unsigned slot = redis_cluster_keyslot(key, size);
    if (slot >= REDIS_CLUSTER_SLOTS)
        abort();
    const char *open = memchr(key, '{', size);
    if (!open)
        return;
    size_t rest = size - (size_t)(open - key) - 1;
    const char *close = memchr(open + 1, '}', rest);
    if (close && close > open + 1 &&
        slot != redis_cluster_keyslot(open + 1, (size_t)(close - open - 1)))
        abort();
}

/* Debian's hiredis 0.14 allocates an array's elements as soon as it reads
 * the array's header ("*300000000" is 2.4 GB of calloc; 1.0 added a cap,
 * maxelements): inputs that declare an array larger than any reply the
 * daemon reads are left out, since that is the reader's trust in its
 * server, not this code's. */
#define MAX_ELEMENTS 100000

static int declares_huge_array(const uint8_t *data, size_t size)
{
    for (size_t i = 0; i < size; i++) {
        if (data[i] != '*')
            continue;
        unsigned long long n = 0;
        for (size_t j = i + 1; j < size && data[j] >= '0' && data[j] <= '9'; j++)
            if ((n = n * 10 + (data[j] - '0')) > MAX_ELEMENTS)
                return 1;
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    check_keyslot(data, size);
    if (declares_huge_array(data, size))
        return 0;
    redisReader *rd = redisReaderCreate();
    if (!rd)
        return 0;
    if (redisReaderFeed(rd, (const char *)data, size) == REDIS_OK) {
        /* Bounded: each reply consumes input. */
        for (int i = 0; i < 64; i++) {
            void *reply = NULL;
            if (redisReaderGetReply(rd, &reply) != REDIS_OK || !reply)
                break;
            check_map(reply);
            check_redirect(reply);
            freeReplyObject(reply);
        }
    }
    redisReaderFree(rd);
    return 0;
}
