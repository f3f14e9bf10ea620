/* SPDX-License-Identifier: Apache-2.0 */
/*
 * redis_tls.h: TLS for connections to Redis and its sentinels (OpenSSL,
 * used through libevent_openssl's bufferevents by redis_conn.c). One
 * struct redis_tls per backend, made from the policy file's redis.tls; a
 * new SSL per connection, with SNI and verification of the server's name.
 *
 * Verification is on unless redis.tls.verify is false: the chain must lead
 * to ca_file (or the system's store when ca_file is unset), and the
 * certificate must name server_name, or else the host connected to (an IP
 * address is checked as an IP address).
 */
#ifndef RATELIMITD_REDIS_TLS_H
#define RATELIMITD_REDIS_TLS_H

#include <stddef.h>

#include "lib/util.h"

struct redis_tls_config;
struct ssl_st;
struct bufferevent;

struct redis_tls;

/* Loads the CA, certificate and key. NULL with a message naming the file
 * and OpenSSL's reason when one cannot be used. */
struct redis_tls *redis_tls_new(const struct redis_tls_config *cfg, char *err,
                                size_t errlen) RL_WUR;

/* A new client SSL for a connection to host. NULL with a message. */
struct ssl_st *redis_tls_ssl(struct redis_tls *t, const char *host, char *err,
                             size_t errlen) RL_WUR;

/* Why the handshake (or the session) on bev failed, one line for the log,
 * e.g. "certificate verify failed: unable to get local issuer
 * certificate". before_reply: the server never answered on this session,
 * so a close with no TLS alert read most likely refused our certificate. */
void redis_tls_error(struct bufferevent *bev, int before_reply, char *out, size_t outlen);

void redis_tls_free(struct redis_tls *t); /* NULL is a no-op */

#endif
