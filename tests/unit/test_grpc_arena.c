/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_grpc_arena.c: the gRPC front's decode arena (grpc_arena.c):
 * alignment, allocations past the block and larger than it, sizes too
 * large to count, reset and reuse, an arena without a block, and
 * protobuf-c unpacking through it (a good message, then a truncated one);
 * and the size-class pool nghttp2 allocates from: reuse by class, blocks
 * past the largest class, realloc within and across classes, calloc over
 * a used block and past SIZE_MAX, the bound on kept blocks, a real nghttp2
 * session on it. ASan and valgrind see that every block is freed.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "front/grpc/grpc_arena.h"
#include "tap.h"

#include "envoy/service/ratelimit/v3/rls.pb-c.h"

static int aligned(const void *p)
{
    return (uintptr_t)p % _Alignof(max_align_t) == 0;
}

static void test_block(void)
{
    struct grpc_arena a;
    grpc_arena_init(&a, 256);
    char *p = grpc_arena_alloc(&a, 1), *q = grpc_arena_alloc(&a, 3), *z = grpc_arena_alloc(&a, 0);
    ok(p && q && z && p != q && q != z && p != z, "small allocations, 0 bytes too, are distinct");
    ok(aligned(p) && aligned(q) && aligned(z), "and aligned for any type");
    memset(q, 'x', 3);
    is_int(a.nbig, 0, "all in the block");
    is_int(a.used, 3 * _Alignof(max_align_t), "each takes a multiple of the alignment");

    char *big = grpc_arena_alloc(&a, 1000);
    ok(big && aligned(big), "an allocation larger than the block");
    memset(big, 'y', 1000); /* ASan: it has its 1000 bytes */
    is_int(a.nbig, 1, "comes from an overflow block");
    char *rest = grpc_arena_alloc(&a, 256 - a.used);
    ok(rest >= (char *)a.block && rest < (char *)a.block + a.cap,
       "what is left of the block is still used");
    is_int(a.used, a.cap, "to its last byte");
    char *more = grpc_arena_alloc(&a, 1);
    ok(more && aligned(more), "a full block: small allocations overflow too");
    is_int(a.nbig, 2, "one block each");

    ok(grpc_arena_alloc(&a, SIZE_MAX) == NULL, "SIZE_MAX bytes: NULL, nothing taken");
    ok(grpc_arena_alloc(&a, SIZE_MAX / 2 + 1) == NULL, "past SIZE_MAX / 2: NULL");
    is_int(a.nbig, 2, "no overflow block for them");

    grpc_arena_reset(&a);
    is_int(a.used, 0, "reset: the block is free again");
    is_int(a.nbig, 0, "and the overflow blocks are freed");
    ok(grpc_arena_alloc(&a, 8) == p,
       "reuse: the first allocation after a reset is the block's start");
    grpc_arena_reset(&a);
    grpc_arena_fini(&a);
    ok(a.block == NULL && a.cap == 0, "fini leaves an empty arena");
    grpc_arena_fini(NULL);
    ok(1, "fini(NULL) is a no-op");
}

static void test_no_block(void)
{
    struct grpc_arena a;
    grpc_arena_init(&a, 0);
    void *p = grpc_arena_alloc(&a, 0), *q = grpc_arena_alloc(&a, 24);
    ok(p && q && p != q && aligned(q), "an arena without a block still allocates");
    is_int(a.nbig, 2, "every allocation from an overflow block");
    grpc_arena_fini(&a);
}

static void test_protobuf(void)
{
    /* A RateLimitRequest packed by protobuf-c. */
    Envoy__Extensions__Common__Ratelimit__V3__RateLimitDescriptor__Entry e =
        ENVOY__EXTENSIONS__COMMON__RATELIMIT__V3__RATE_LIMIT_DESCRIPTOR__ENTRY__INIT;
    e.key = "user";
    e.value = "alice";
    Envoy__Extensions__Common__Ratelimit__V3__RateLimitDescriptor__Entry *ep = &e;
    Envoy__Extensions__Common__Ratelimit__V3__RateLimitDescriptor d =
        ENVOY__EXTENSIONS__COMMON__RATELIMIT__V3__RATE_LIMIT_DESCRIPTOR__INIT;
    d.n_entries = 1;
    d.entries = &ep;
    Envoy__Extensions__Common__Ratelimit__V3__RateLimitDescriptor *dp = &d;
    Envoy__Service__Ratelimit__V3__RateLimitRequest m =
        ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_REQUEST__INIT;
    m.domain = "edge";
    m.n_descriptors = 1;
    m.descriptors = &dp;
    m.hits_addend = 3;
    uint8_t wire[256];
    size_t n = protobuf_c_message_pack(&m.base, wire);

    struct grpc_arena a;
    grpc_arena_init(&a, 512);
    ProtobufCAllocator alloc = grpc_arena_protobuf(&a);
    for (int round = 0; round < 2; round++) {
        Envoy__Service__Ratelimit__V3__RateLimitRequest *u =
            envoy__service__ratelimit__v3__rate_limit_request__unpack(&alloc, n, wire);
        ok(u && strcmp(u->domain, "edge") == 0 && u->n_descriptors == 1 &&
               strcmp(u->descriptors[0]->entries[0]->value, "alice") == 0 && u->hits_addend == 3,
           "round %d: unpacked into the arena", round + 1);
        ok(a.used > 0 && a.nbig == 0, "round %d: all of it in the block", round + 1);
        /* The arena's free is a no-op: free_unpacked with it frees nothing. */
        envoy__service__ratelimit__v3__rate_limit_request__free_unpacked(u, &alloc);
        grpc_arena_reset(&a);
    }
    ok(envoy__service__ratelimit__v3__rate_limit_request__unpack(&alloc, n - 3, wire) == NULL,
       "a truncated message: NULL");
    grpc_arena_reset(&a); /* what the failed unpack took is released here */
    is_int(a.used, 0, "and the reset releases what it took");
    grpc_arena_fini(&a);

    /* A block too small for the message: the unpack still works. */
    grpc_arena_init(&a, 16);
    alloc = grpc_arena_protobuf(&a);
    Envoy__Service__Ratelimit__V3__RateLimitRequest *u =
        envoy__service__ratelimit__v3__rate_limit_request__unpack(&alloc, n, wire);
    ok(u && strcmp(u->descriptors[0]->entries[0]->key, "user") == 0 && a.nbig > 0,
       "a message larger than the block unpacks from overflow blocks");
    grpc_arena_fini(&a); /* frees them: no leak */
}

static void test_pool(void)
{
    struct grpc_pool p;
    grpc_pool_init(&p);
    char *a = grpc_pool_alloc(&p, 1);
    ok(a && aligned(a), "a pool block, aligned for any type");
    memset(a, 'x', 32); /* ASan: the class's 32 bytes are there */
    is_int(p.mallocs, 1, "the first block of a class comes from malloc");
    grpc_pool_free(&p, a);
    is_int(p.nfree[0], 1, "freed: it waits on its class's list");
    char *b = grpc_pool_alloc(&p, 20);
    ok(b == a, "the next allocation of that class reuses it");
    is_int(p.mallocs, 1, "without a malloc");
    char *c = grpc_pool_calloc(&p, 4, 8);
    ok(c && c[0] == 0 && c[31] == 0, "calloc zeroes");
    grpc_pool_free(&p, c);
    c = grpc_pool_calloc(&p, 1, 32);
    ok(c && memchr(c, 'x', 32) == NULL, "calloc zeroes a reused (dirty) block too");
    ok(grpc_pool_calloc(&p, SIZE_MAX / 2, 3) == NULL, "calloc past SIZE_MAX: NULL");
    ok(grpc_pool_alloc(&p, SIZE_MAX) == NULL, "SIZE_MAX bytes: NULL");

    memcpy(b, "0123456789", 10);
    ok(grpc_pool_realloc(&p, b, 32) == b, "realloc within the block's class: the same block");
    char *g = grpc_pool_realloc(&p, b, 100);
    ok(g && memcmp(g, "0123456789", 10) == 0, "realloc past it: a larger class, bytes moved");
    is_int(p.nfree[0], 1, "the old block is back on its list");
    char *big = grpc_pool_realloc(&p, g, GRPC_POOL_MAX + 1);
    ok(big && memcmp(big, "0123456789", 10) == 0 && aligned(big),
       "realloc past the largest class: a block of its own");
    memset(big, 'y', GRPC_POOL_MAX + 1);
    size_t before = p.mallocs;
    grpc_pool_free(&p, big); /* to malloc's free: no list for it */
    char *big2 = grpc_pool_alloc(&p, GRPC_POOL_MAX + 1);
    is_int(p.mallocs, before + 1, "such a block is never kept: the next one is malloc'd");
    grpc_pool_free(&p, big2);
    char *n = grpc_pool_realloc(&p, NULL, 10);
    ok(n != NULL, "realloc(NULL) allocates");
    is_int(p.nfree[0], 0, "(from the list)");
    grpc_pool_free(&p, n);
    grpc_pool_free(&p, c);
    char *r = grpc_pool_alloc(&p, 8);
    ok(grpc_pool_realloc(&p, r, 0) == NULL, "realloc to 0 frees");
    grpc_pool_free(&p, NULL);
    ok(1, "free(NULL) is a no-op");

    /* More blocks of one class than the pool keeps. */
    void *many[GRPC_POOL_KEEP + 10];
    for (size_t i = 0; i < sizeof many / sizeof many[0]; i++)
        many[i] = grpc_pool_alloc(&p, 64);
    for (size_t i = 0; i < sizeof many / sizeof many[0]; i++)
        grpc_pool_free(&p, many[i]);
    is_int(p.nfree[1], GRPC_POOL_KEEP, "at most GRPC_POOL_KEEP blocks kept per class");
    grpc_pool_fini(&p);
    is_int(p.nfree[0] + p.nfree[1], 0, "fini empties the lists");
    grpc_pool_fini(NULL);

    /* nghttp2 on it: a server session that sends its SETTINGS. */
    grpc_pool_init(&p);
    nghttp2_mem mem = grpc_pool_nghttp2(&p);
    nghttp2_session_callbacks *cb;
    nghttp2_session *s = NULL;
    ok(nghttp2_session_callbacks_new(&cb) == 0 &&
           nghttp2_session_server_new3(&s, cb, NULL, NULL, &mem) == 0,
       "an nghttp2 session on the pool");
    nghttp2_session_callbacks_del(cb);
    const uint8_t *data;
    ok(s && nghttp2_submit_settings(s, NGHTTP2_FLAG_NONE, NULL, 0) == 0 &&
           nghttp2_session_mem_send(s, &data) > 0,
       "sends its SETTINGS");
    nghttp2_session_del(s);
    ok(p.mallocs > 0, "its memory came from the pool (%zu blocks)", p.mallocs);
    grpc_pool_fini(&p); /* everything given back: no leak */
}

int main(void)
{
    test_block();
    test_no_block();
    test_protobuf();
    test_pool();
    return tap_done();
}
