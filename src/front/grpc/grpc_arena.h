/* SPDX-License-Identifier: Apache-2.0 */
/*
 * grpc_arena.h: the gRPC front's two allocators, one per worker, so that a
 * steady stream of calls costs no malloc and no free.
 *
 * struct grpc_arena, a bump allocator for what lives only while one call
 * is decoded and handed to the core: protobuf-c's unpacked request (through
 * grpc_arena_protobuf, a ProtobufCAllocator) and the descriptor arrays that
 * point into it. One pre-sized block, allocated once; what does not fit in
 * it is malloc'd and kept on a list. grpc_arena_reset makes the whole block
 * free again and frees the list.
 *
 * struct grpc_pool, free lists by size class for what nghttp2 allocates
 * per stream and per frame (through grpc_pool_nghttp2, an nghttp2_mem):
 * a freed block waits on its class's list (at most GRPC_POOL_KEEP of
 * them) for the next allocation of that class; larger ones are malloc'd.
 * What a worker keeps is so bounded: GRPC_POOL_KEEP blocks of each class,
 * about 1 MiB at most, much less under a load of small unary calls.
 *
 * Each owns its blocks; not what is built in them (the arena's caller drops
 * every pointer into it before the reset; nghttp2 frees what it took before
 * the pool is finished).
 */
#ifndef RATELIMITD_GRPC_ARENA_H
#define RATELIMITD_GRPC_ARENA_H

#include <nghttp2/nghttp2.h>
#include <protobuf-c/protobuf-c.h>
#include <stddef.h>

struct grpc_arena_big;

struct grpc_arena {
    unsigned char *block; /* owned, cap bytes */
    size_t cap;
    size_t used;
    struct grpc_arena_big *big; /* allocations that did not fit, newest first */
    size_t nbig;                /* how many: they cost a malloc each */
};

/* An arena with one block of cap bytes (0: every allocation overflows). */
void grpc_arena_init(struct grpc_arena *a, size_t cap);

/* n bytes aligned for any type, valid until the next reset; n == 0 gives a
 * distinct valid pointer too. NULL only when n is too large to count
 * (near SIZE_MAX): protobuf-c then fails the unpack. Out of memory aborts,
 * like every allocation of the daemon (xmalloc). */
void *grpc_arena_alloc(struct grpc_arena *a, size_t n);

/* Every allocation is released: the block is reused from its start, the
 * overflow blocks are freed. */
void grpc_arena_reset(struct grpc_arena *a);

/* Frees everything; the arena may be initialised again. NULL: no-op. */
void grpc_arena_fini(struct grpc_arena *a);

/* An allocator for protobuf-c's unpack that takes from a; its free does
 * nothing (the reset frees): so never call free_unpacked with a NULL
 * allocator on what it made. */
ProtobufCAllocator grpc_arena_protobuf(struct grpc_arena *a);

/* Size classes of 32, 64, ... 4096 bytes. */
#define GRPC_POOL_CLASSES 8
#define GRPC_POOL_MAX 4096
/* Free blocks kept per class. */
#define GRPC_POOL_KEEP 128

struct grpc_pool {
    void *free[GRPC_POOL_CLASSES]; /* each class's free blocks, linked */
    size_t nfree[GRPC_POOL_CLASSES];
    size_t mallocs; /* blocks taken from malloc so far, for the tests */
};

void grpc_pool_init(struct grpc_pool *p);

/* n bytes aligned for any type, from the free list of the smallest class
 * that holds them (a new block when it is empty); past GRPC_POOL_MAX, a
 * block of its own. NULL when out of memory or n too large: nghttp2 then
 * answers NGHTTP2_ERR_NOMEM, which ends the connection, not the daemon. */
void *grpc_pool_alloc(struct grpc_pool *p, size_t n);

/* Zeroed nmemb * size bytes; NULL on overflow too. */
void *grpc_pool_calloc(struct grpc_pool *p, size_t nmemb, size_t size);

/* realloc's contract: ptr NULL allocates; a block that already holds n
 * bytes is returned as it is; otherwise the bytes move to a larger one.
 * NULL (ptr untouched) when out of memory. n == 0 frees ptr and returns
 * NULL. */
void *grpc_pool_realloc(struct grpc_pool *p, void *ptr, size_t n);

/* Gives ptr (from this pool, or NULL) back. */
void grpc_pool_free(struct grpc_pool *p, void *ptr);

/* Frees the blocks on the free lists; the pool may be initialised again.
 * Every block handed out must have been given back. NULL: no-op. */
void grpc_pool_fini(struct grpc_pool *p);

/* The allocator for nghttp2_session_server_new3 taking from p. */
nghttp2_mem grpc_pool_nghttp2(struct grpc_pool *p);

#endif
