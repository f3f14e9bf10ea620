/*
 * backend_memory.h: the in-memory backend (backend.h); see backend_memory.c.
 */
#ifndef RATELIMITD_BACKEND_MEMORY_H
#define RATELIMITD_BACKEND_MEMORY_H

#include "backend.h"

struct local_store;

/* Decides with store, which must outlive the backend. Never NULL. */
struct backend *backend_memory_new(struct local_store *store);

#endif
