/*
 * grpc.h: the gRPC front of one worker: h2c (HTTP/2 with prior knowledge,
 * as Envoy's gRPC client speaks it) on libevent's core, with nghttp2 for
 * the framing, HPACK and flow control and protobuf-c for the messages
 * (generated at build time from proto/).
 *
 *   /envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit -> rls.c
 *   /grpc.health.v1.Health/Check    -> SERVING when the worker is ready
 *                                      (as /readyz), NOT_SERVING otherwise
 *   anything else                   -> grpc-status UNIMPLEMENTED
 *
 * Limits, so that what a client sends keeps memory bounded:
 * grpc_max_streams concurrent streams per connection, a header list of
 * GRPC_HEADER_LIST_MAX bytes, one message of max_body bytes, HTTP/2's
 * default frame size, nghttp2's flood guards (SETTINGS, queued PING and
 * SETTINGS acknowledgements, RST_STREAM rate: CVE-2023-44487), at most
 * GRPC_OUT_MAX bytes of output waiting per connection (reading stops while
 * the peer does not read), idle_timeout, and max_connections counted with
 * the HTTP front's connections.
 */
#ifndef RATELIMITD_GRPC_H
#define RATELIMITD_GRPC_H

#include <stddef.h>

#include "config/config.h"
#include "lib/util.h"

struct worker;
struct grpc;

/* SETTINGS_MAX_HEADER_LIST_SIZE, and the most header bytes a stream may
 * send (name + value + 32 each, as HTTP/2 counts them). */
#define GRPC_HEADER_LIST_MAX 16384
/* Bytes waiting to be written on one connection before it stops reading. */
#define GRPC_OUT_MAX 65536

/* Serves on fd, a listening socket the caller keeps owning (listen.h) and
 * that must outlive the front. Takes its limits from w->config. Returns
 * NULL with a message on failure. */
struct grpc *grpc_new(struct worker *w, int fd, char *err, size_t errlen) RL_WUR;

/* A reload: max_body, idle_timeout, max_connections, grpc_max_streams (for
 * connections accepted afterwards) and the token apply. */
void grpc_apply_config(struct grpc *g, const struct config *cfg);

/* Stops accepting; every connection gets a GOAWAY naming the last stream it
 * sent, those streams are still answered, then the connection closes. */
void grpc_drain(struct grpc *g);

/* No stream awaiting its answer and nothing left to write. */
int grpc_idle(const struct grpc *g);

/* Closes every connection (pending calls are cancelled with rls_cancel)
 * and stops watching the listening socket. NULL is a no-op. */
void grpc_free(struct grpc *g);

#endif
