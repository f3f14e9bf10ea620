/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tls_server.h: the server side of TLS on the daemon's own listeners
 * (listen, admin_listen, grpc_listen), front-neutral: one OpenSSL SSL_CTX
 * made from a certificate chain, its key, an optional client CA and a
 * client_auth mode, with TLS 1.2 as the least version and ALPN. The
 * policy file's loader makes one per listener block (tls, admin_tls,
 * grpc_tls), so that -t and a reload read and check the files, and the
 * snapshot that holds it is what the workers swap on a reload.
 *
 * Reference counting is OpenSSL's own: every SSL made from the context
 * holds a reference to it, so a connection accepted under an old snapshot
 * keeps its context after the snapshot (and tls_server_free) let go.
 *
 * Owns the context and what was read from the certificate; not the
 * connections (front/tls.c), not the policy file's fields (config/).
 */
#ifndef RATELIMITD_TLS_SERVER_H
#define RATELIMITD_TLS_SERVER_H

#include <stddef.h>
#include <stdint.h>

#include "lib/util.h"

struct ssl_ctx_st;

/* The listeners that may serve TLS, in the order of their labels. */
enum tls_listener { TLS_LISTEN, TLS_ADMIN_LISTEN, TLS_GRPC_LISTEN, TLS_NLISTENERS };
/* "listen", "admin_listen", "grpc_listen": the metrics' listener label. */
extern const char *const tls_listener_names[TLS_NLISTENERS];

/* client_auth: no certificate asked for; asked for and verified when
 * given; required and verified. */
enum tls_client_auth { TLS_CLIENT_AUTH_NONE, TLS_CLIENT_AUTH_REQUEST, TLS_CLIENT_AUTH_REQUIRE };

struct tls_server_params {
    const char *cert_file;      /* PEM: the certificate, then its chain */
    const char *key_file;       /* PEM: its private key */
    const char *client_ca_file; /* PEM: the CAs client certificates chain to; NULL: none */
    enum tls_client_auth client_auth;
    const char *alpn; /* the protocol this listener speaks: "h2", "http/1.1" */
};

struct tls_server {
    struct ssl_ctx_st *ctx;
    int64_t not_before, not_after; /* the certificate's, seconds since the epoch */
    char serial[80];               /* hex, for messages */
    unsigned char digest[32];      /* SHA-256 of the certificate: tells a rotation */
};

/*
 * Reads the files and makes the context. On failure returns NULL and
 * writes "<which file> <path>: <OpenSSL's reason>" into err: an unreadable
 * or garbage certificate or key, a key that is not the certificate's, a
 * CA file without a certificate. An expired certificate is not a failure
 * (tls_server_validity says so, and the daemon warns).
 */
struct tls_server *tls_server_new(const struct tls_server_params *p, char *err,
                                  size_t errlen) RL_WUR;

/* Loads key_file (PEM) into ctx, never asking for a passphrase: OpenSSL
 * would prompt on the terminal and wait, which hangs -t, a start and a
 * reload. An encrypted key fails at once. On failure writes
 * "<what> <key_file>: <reason>" into err and returns -1. Shared by the
 * listeners' contexts and the Redis client's (redis.tls). */
int tls_use_key_file(struct ssl_ctx_st *ctx, const char *key_file, const char *what, char *err,
                     size_t errlen) RL_WUR;

/* Drops the daemon's reference; open connections keep theirs. NULL is a
 * no-op. */
void tls_server_free(struct tls_server *t);

/* Whether a and b serve the same certificate (both NULL: yes). */
int tls_server_same(const struct tls_server *a, const struct tls_server *b);

/* NULL if the certificate is valid at now (seconds since the epoch), else
 * "expired" or "not yet valid". */
const char *tls_server_validity(const struct tls_server *t, int64_t now) RL_WUR;

#endif
