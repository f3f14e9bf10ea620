/* SPDX-License-Identifier: Apache-2.0 */
/*
 * grpc_arena.c: the gRPC front's per-worker allocators (grpc_arena.h): the
 * decode arena and the size-class pool nghttp2 allocates from. Owns their
 * blocks; not the data put in them.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "front/grpc/grpc_arena.h"
#include "lib/util.h"

/* Every allocation is aligned like max_align_t (16 on x86-64). */
#define ARENA_ALIGN _Alignof(max_align_t)

/* An allocation past the block: its header, then its bytes. */
struct grpc_arena_big {
    struct grpc_arena_big *next;
    max_align_t data[]; /* aligned as the block's allocations */
};

void grpc_arena_init(struct grpc_arena *a, size_t cap)
{
    *a = (struct grpc_arena){.cap = cap, .block = cap ? xmalloc(cap) : NULL};
}

void *grpc_arena_alloc(struct grpc_arena *a, size_t n)
{
    if (n > SIZE_MAX / 2)
        return NULL; /* no rounding or header may overflow below */
    size_t need = (n + ARENA_ALIGN - 1) / ARENA_ALIGN * ARENA_ALIGN;
    if (need == 0)
        need = ARENA_ALIGN; /* a distinct pointer for every call */
    if (need <= a->cap - a->used) {
        void *p = a->block + a->used;
        a->used += need;
        return p;
    }
    struct grpc_arena_big *b = xmalloc(sizeof *b + need);
    b->next = a->big;
    a->big = b;
    a->nbig++;
    return b->data;
}

void grpc_arena_reset(struct grpc_arena *a)
{
    while (a->big) {
        struct grpc_arena_big *next = a->big->next;
        free(a->big);
        a->big = next;
    }
    a->nbig = 0;
    a->used = 0;
}

void grpc_arena_fini(struct grpc_arena *a)
{
    if (!a)
        return;
    grpc_arena_reset(a);
    free(a->block);
    *a = (struct grpc_arena){0};
}

static void *pb_alloc(void *data, size_t n)
{
    return grpc_arena_alloc(data, n);
}

static void pb_free(void *data, void *p)
{
    (void)data;
    (void)p; /* released by grpc_arena_reset */
}

ProtobufCAllocator grpc_arena_protobuf(struct grpc_arena *a)
{
    return (ProtobufCAllocator){.alloc = pb_alloc, .free = pb_free, .allocator_data = a};
}

/* ---- the pool ---- */

/* Before each block: its class (GRPC_POOL_CLASSES: a block of its own)
 * and how many bytes it holds; padded so that the block keeps malloc's
 * alignment. */
union pool_head {
    struct {
        size_t cls;
        size_t cap;
    } h;
    max_align_t align;
};

static union pool_head *head_of(void *ptr)
{
    return (union pool_head *)ptr - 1;
}

void grpc_pool_init(struct grpc_pool *p)
{
    *p = (struct grpc_pool){0};
}

void *grpc_pool_alloc(struct grpc_pool *p, size_t n)
{
    size_t cls = 0, cap = 32;
    while (cls < GRPC_POOL_CLASSES && cap < n) {
        cls++;
        cap <<= 1;
    }
    if (cls == GRPC_POOL_CLASSES) {
        if (n > SIZE_MAX - sizeof(union pool_head))
            return NULL;
        cap = n;
    } else if (p->free[cls]) {
        void *ptr = p->free[cls];
        memcpy(&p->free[cls], ptr, sizeof(void *)); /* the next free block */
        p->nfree[cls]--;
        return ptr;
    }
    union pool_head *h = malloc(sizeof *h + cap);
    if (!h)
        return NULL;
    p->mallocs++;
    h->h.cls = cls;
    h->h.cap = cap;
    return h + 1;
}

void *grpc_pool_calloc(struct grpc_pool *p, size_t nmemb, size_t size)
{
    if (size && nmemb > SIZE_MAX / size)
        return NULL;
    void *ptr = grpc_pool_alloc(p, nmemb * size);
    if (ptr)
        memset(ptr, 0, nmemb * size);
    return ptr;
}

void grpc_pool_free(struct grpc_pool *p, void *ptr)
{
    if (!ptr)
        return;
    union pool_head *h = head_of(ptr);
    size_t cls = h->h.cls;
    if (cls == GRPC_POOL_CLASSES || p->nfree[cls] >= GRPC_POOL_KEEP) {
        free(h);
        return;
    }
    memcpy(ptr, &p->free[cls], sizeof(void *)); /* links it in its own bytes */
    p->free[cls] = ptr;
    p->nfree[cls]++;
}

void *grpc_pool_realloc(struct grpc_pool *p, void *ptr, size_t n)
{
    if (!ptr)
        return grpc_pool_alloc(p, n);
    if (n == 0) {
        grpc_pool_free(p, ptr);
        return NULL;
    }
    size_t cap = head_of(ptr)->h.cap;
    if (n <= cap)
        return ptr;
    void *to = grpc_pool_alloc(p, n);
    if (!to)
        return NULL;
    memcpy(to, ptr, cap);
    grpc_pool_free(p, ptr);
    return to;
}

void grpc_pool_fini(struct grpc_pool *p)
{
    if (!p)
        return;
    for (size_t cls = 0; cls < GRPC_POOL_CLASSES; cls++) {
        while (p->free[cls]) {
            void *ptr = p->free[cls];
            memcpy(&p->free[cls], ptr, sizeof(void *));
            free(head_of(ptr));
        }
    }
    *p = (struct grpc_pool){0};
}

static void *ng_malloc(size_t n, void *data)
{
    return grpc_pool_alloc(data, n);
}

static void ng_free(void *ptr, void *data)
{
    grpc_pool_free(data, ptr);
}

static void *ng_calloc(size_t nmemb, size_t size, void *data)
{
    return grpc_pool_calloc(data, nmemb, size);
}

static void *ng_realloc(void *ptr, size_t n, void *data)
{
    return grpc_pool_realloc(data, ptr, n);
}

nghttp2_mem grpc_pool_nghttp2(struct grpc_pool *p)
{
    return (nghttp2_mem){.mem_user_data = p,
                         .malloc = ng_malloc,
                         .free = ng_free,
                         .calloc = ng_calloc,
                         .realloc = ng_realloc};
}
