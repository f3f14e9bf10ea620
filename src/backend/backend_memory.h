/*
 * backend_memory.h: the in-memory backend (backend.h); see backend_memory.c.
 */
#ifndef RATELIMITD_BACKEND_MEMORY_H
#define RATELIMITD_BACKEND_MEMORY_H

#include <pthread.h>

#include "backend/backend.h"

struct local_store;

/* Decides with store under lock (both must outlive the backend). Never
 * NULL. */
struct backend *backend_memory_new(struct local_store *store, pthread_mutex_t *lock);

#endif
