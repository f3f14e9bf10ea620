/* SPDX-License-Identifier: Apache-2.0 */
/*
 * backend.c: what every backend shares (backend.h): the readiness listener
 * and freeing through the ops table. Does not own any backend (those are
 * under src/backend/, listed by backend/registry.c).
 */
#include "core/backend.h"

void backend_on_state(struct backend *b, backend_state_fn fn, void *arg)
{
    b->on_state = fn;
    b->on_state_arg = arg;
}

void backend_on_reset(struct backend *b, backend_reset_seen_fn fn, void *arg)
{
    b->on_reset = fn;
    b->on_reset_arg = arg;
}

void backend_on_override(struct backend *b, backend_override_seen_fn fn, void *arg)
{
    b->on_override = fn;
    b->on_override_arg = arg;
}

void backend_state_changed(struct backend *b)
{
    int ready = backend_ready(b);
    if (ready == b->reported_ready)
        return;
    b->reported_ready = ready;
    if (b->on_state)
        b->on_state(b->on_state_arg, ready);
}

void backend_free(struct backend *b)
{
    if (b)
        b->ops->free(b);
}
