/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_grpc_arena.c: the gRPC front's decode arena (grpc_arena.c):
 * alignment, allocations past the block and larger than it, sizes too
 * large to count, reset and reuse, an arena without a block, and
 * protobuf-c unpacking through it (a good message, then a truncated one);
 * ASan and valgrind see that the overflow blocks are freed.
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

int main(void)
{
    test_block();
    test_no_block();
    test_protobuf();
    return tap_done();
}
