/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_redis_cluster.c: redis_cluster.c against Redis's own numbers: key
 * slots (values from CLUSTER KEYSLOT of Redis 7.0.15), CLUSTER SLOTS replies read
 * from RESP text by hiredis's reader (as the backend receives them),
 * malformed replies refused, and MOVED/ASK errors.
 */
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "backend/redis/redis_cluster.h"
#include "tap.h"

static unsigned slot_of(const char *key)
{
    return redis_cluster_keyslot(key, strlen(key));
}

static void test_keyslot(void)
{
    /* "123456789" is the CRC16/XMODEM check string: 0x31C3 = 12739. */
    is_int(slot_of("123456789"), 0x31C3 & 16383, "CRC16 check value");
    is_int(slot_of("foo"), 12182, "foo");
    is_int(slot_of("bar"), 5061, "bar");
    is_int(slot_of(""), 0, "empty key");
    is_int(slot_of("{user1000}.following"), slot_of("{user1000}.followers"),
           "one hash tag, one slot");
    is_int(slot_of("{user1000}.following"), slot_of("user1000"), "the tag alone is hashed");
    is_int(slot_of("foo{}{bar}"), 8363, "empty first tag: whole key");
    ok(slot_of("foo{}{bar}") != slot_of("bar"), "foo{}{bar} is not hashed by {bar}");
    is_int(slot_of("foo{{bar}}zap"), 4015, "foo{{bar}}zap");
    is_int(slot_of("foo{{bar}}zap"), slot_of("{bar"), "tag: first '{' to the next '}'");
    is_int(slot_of("foo{bar}{zap}"), slot_of("bar"), "only the first tag counts");
    is_int(slot_of("{unclosed"), 470, "no '}': whole key");
    ok(slot_of("{unclosed") != slot_of("unclosed"), "no '}' hashes the '{' too");
    /* The daemon's own key shape: every tier of one check shares a slot. */
    is_int(slot_of("rl:{api:alice}:0"), 4287, "policy key shape");
    is_int(slot_of("rl:{api:alice}:0"), slot_of("rl:{api:alice}:1:s"), "tiers share a slot");
    /* Bytes, not C strings: a NUL inside the tag is hashed. */
    is_int(redis_cluster_keyslot("{a\0b}", 5), redis_cluster_keyslot("a\0b", 3), "NUL in a tag");
    int all_below = 1;
    char k[16];
    for (int i = 0; i < 5000; i++) {
        snprintf(k, sizeof k, "k%d", i);
        all_below &= slot_of(k) < REDIS_CLUSTER_SLOTS;
    }
    ok(all_below, "every slot below 16384");
}

/* A reply parsed from RESP text, as the backend's reader produces it. */
static redisReply *resp(const char *text)
{
    redisReader *r = redisReaderCreate();
    void *reply = NULL;
    if (redisReaderFeed(r, text, strlen(text)) != REDIS_OK ||
        redisReaderGetReply(r, &reply) != REDIS_OK)
        reply = NULL;
    redisReaderFree(r);
    return reply;
}

static void test_map(void)
{
    char err[256];
    struct redis_cluster_map m;
    /* Three ranges on two masters (one listed twice, with a replica),
     * slots 10000..16383 served by a node the reply names by "" (Redis 7's
     * unknown endpoint: the node asked). */
    const char *text = "*4\r\n"
                       "*4\r\n:0\r\n:5460\r\n"
                       "*3\r\n$9\r\n127.0.0.1\r\n:7000\r\n$2\r\nid\r\n"
                       "*3\r\n$9\r\n127.0.0.1\r\n:7003\r\n$2\r\nid\r\n"
                       "*3\r\n:5461\r\n:9999\r\n"
                       "*3\r\n$9\r\n127.0.0.1\r\n:7001\r\n$2\r\nid\r\n"
                       "*3\r\n:10000\r\n:10000\r\n"
                       "*3\r\n$9\r\n127.0.0.1\r\n:7000\r\n$2\r\nid\r\n"
                       "*3\r\n:10001\r\n:16383\r\n"
                       "*2\r\n$0\r\n\r\n:7002\r\n";
    redisReply *r = resp(text);
    ok(r != NULL, "RESP text read");
    is_int(redis_cluster_map_parse(r, "10.0.0.9", &m, err, sizeof err), 0, "map parsed");
    is_int(m.nmasters, 3, "masters deduplicated by host:port");
    is_int(redis_cluster_map_unserved(&m), 0, "every slot served");
    is_str(m.masters[m.slot_master[0]].host, "127.0.0.1", "slot 0 host");
    is_int(m.masters[m.slot_master[5460]].port, 7000, "slot 5460 on 7000");
    is_int(m.masters[m.slot_master[5461]].port, 7001, "slot 5461 on 7001");
    is_int(m.slot_master[10000], m.slot_master[0], "a second range of 7000");
    is_str(m.masters[m.slot_master[16383]].host, "10.0.0.9", "empty host: the node asked");
    is_int(m.masters[m.slot_master[16383]].port, 7002, "slot 16383 on 7002");
    redis_cluster_map_free(&m);
    redis_cluster_map_free(&m); /* idempotent */
    freeReplyObject(r);

    /* A map with a hole. */
    r = resp("*1\r\n*3\r\n:0\r\n:99\r\n*2\r\n$1\r\nh\r\n:1\r\n");
    is_int(redis_cluster_map_parse(r, "x", &m, err, sizeof err), 0, "partial map parsed");
    is_int(redis_cluster_map_unserved(&m), 16384 - 100, "unserved slots counted");
    is_int(m.slot_master[100], -1, "slot 100 unserved");
    redis_cluster_map_free(&m);
    freeReplyObject(r);

    /* An empty cluster (no slots assigned yet). */
    r = resp("*0\r\n");
    is_int(redis_cluster_map_parse(r, "x", &m, err, sizeof err), 0, "empty reply parsed");
    is_int(redis_cluster_map_unserved(&m), 16384, "nothing served");
    redis_cluster_map_free(&m);
    freeReplyObject(r);

    static const struct {
        const char *text, *why;
    } bad[] = {
        {"-ERR This instance has cluster support disabled\r\n", "an error"},
        {":1\r\n", "an integer"},
        {"*1\r\n:1\r\n", "an entry that is not an array"},
        {"*1\r\n*2\r\n:0\r\n:1\r\n", "no master"},
        {"*1\r\n*3\r\n:5\r\n:1\r\n*2\r\n$1\r\nh\r\n:1\r\n", "first > last"},
        {"*1\r\n*3\r\n:0\r\n:16384\r\n*2\r\n$1\r\nh\r\n:1\r\n", "slot 16384"},
        {"*1\r\n*3\r\n:-1\r\n:1\r\n*2\r\n$1\r\nh\r\n:1\r\n", "negative slot"},
        {"*1\r\n*3\r\n$1\r\n0\r\n:1\r\n*2\r\n$1\r\nh\r\n:1\r\n", "slot as a string"},
        {"*1\r\n*3\r\n:0\r\n:1\r\n*1\r\n$1\r\nh\r\n", "master without port"},
        {"*1\r\n*3\r\n:0\r\n:1\r\n*2\r\n$1\r\nh\r\n:0\r\n", "port 0"},
        {"*1\r\n*3\r\n:0\r\n:1\r\n*2\r\n$1\r\nh\r\n:65536\r\n", "port 65536"},
        {"*1\r\n*3\r\n:0\r\n:1\r\n*2\r\n:1\r\n:1\r\n", "host as an integer"},
        {"*2\r\n*3\r\n:0\r\n:1\r\n*2\r\n$1\r\nh\r\n:1\r\n:7\r\n", "second entry broken"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        r = resp(bad[i].text);
        err[0] = '\0';
        int rc = redis_cluster_map_parse(r, "x", &m, err, sizeof err);
        ok(rc == -1 && err[0] != '\0' && m.nmasters == 0 && m.masters == NULL &&
               m.slot_master[0] == -1,
           "refused: %s (%s)", bad[i].why, err);
        redis_cluster_map_free(&m);
        freeReplyObject(r);
    }
    is_int(redis_cluster_map_parse(NULL, "x", &m, err, sizeof err), -1, "NULL reply refused");
}

static void test_redirect(void)
{
    char host[64];
    unsigned slot = 0;
    int port = 0;
    is_int(redis_cluster_redirect("MOVED 3999 127.0.0.1:6381", &slot, host, sizeof host, &port), 1,
           "MOVED");
    is_int(slot, 3999, "MOVED slot");
    is_str(host, "127.0.0.1", "MOVED host");
    is_int(port, 6381, "MOVED port");
    is_int(redis_cluster_redirect("ASK 16383 10.1.2.3:7000", &slot, host, sizeof host, &port), 2,
           "ASK");
    is_int(slot, 16383, "ASK slot");
    is_str(host, "10.1.2.3", "ASK host");
    is_int(port, 7000, "ASK port");
    is_int(redis_cluster_redirect("MOVED 1 ::1:7000", &slot, host, sizeof host, &port), 1,
           "MOVED to IPv6");
    is_str(host, "::1", "IPv6 host: the last ':' separates the port");
    is_int(port, 7000, "IPv6 port");
    is_int(redis_cluster_redirect("ASK 2 [fe80::1]:7001", &slot, host, sizeof host, &port), 2,
           "bracketed IPv6");
    is_str(host, "fe80::1", "brackets taken off");
    is_int(redis_cluster_redirect("MOVED 5 :7002", &slot, host, sizeof host, &port), 1,
           "MOVED with an unknown endpoint");
    is_str(host, "", "empty host: the node that answered");
    is_int(redis_cluster_redirect("MOVED 5 redis-3.internal:7002", &slot, host, sizeof host, &port),
           1, "hostname");
    is_str(host, "redis-3.internal", "hostname kept");

    static const char *const not_redirects[] = {
        "ERR unknown command",
        "TRYAGAIN Multiple keys request during rehashing of slot",
        "CLUSTERDOWN The cluster is down",
        "MOVED",
        "MOVED ",
        "MOVED x 127.0.0.1:1",
        "MOVED 16384 127.0.0.1:1",
        "MOVED 1 127.0.0.1",
        "MOVED 1 127.0.0.1:",
        "MOVED 1 127.0.0.1:0",
        "MOVED 1 127.0.0.1:65536",
        "MOVED 1 127.0.0.1:70x",
        "MOVED 1  ",
        "ASK 1:127.0.0.1:7000",
        "moved 1 127.0.0.1:7000",
    };
    for (size_t i = 0; i < sizeof not_redirects / sizeof not_redirects[0]; i++)
        is_int(redis_cluster_redirect(not_redirects[i], &slot, host, sizeof host, &port), 0,
               "not a redirect: \"%s\"", not_redirects[i]);
    char small[4];
    is_int(redis_cluster_redirect("MOVED 1 127.0.0.1:7000", &slot, small, sizeof small, &port), 0,
           "a host longer than the buffer is refused");
}

int main(void)
{
    test_keyslot();
    test_map();
    test_redirect();
    return tap_done();
}
