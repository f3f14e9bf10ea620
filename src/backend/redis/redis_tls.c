/* SPDX-License-Identifier: Apache-2.0 */
/*
 * redis_tls.c: TLS for connections to Redis (see redis_tls.h), on OpenSSL.
 * Owns the SSL_CTX and a copy of server_name; each SSL it makes is owned
 * by the caller (in practice by the bufferevent it is given to).
 */
#include <arpa/inet.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/redis/redis_tls.h"
#include "config/config.h"
#include "lib/tls_server.h"

struct redis_tls {
    SSL_CTX *ctx;
    char *server_name; /* NULL: the host connected to */
    int verify;
};

/* OpenSSL's reason for the last failure (its error queue emptied), or
 * fallback. */
static const char *ssl_reason(char *buf, size_t len, const char *fallback)
{
    unsigned long e = ERR_get_error();
    unsigned long last = e;
    while ((e = ERR_get_error()) != 0)
        last = e;
    if (!last)
        return fallback;
    ERR_error_string_n(last, buf, len);
    return buf;
}

static void tls_fail(struct redis_tls *t, char *err, size_t errlen, const char *what,
                     const char *file)
{
    char reason[256];
    snprintf(err, errlen, "redis.tls: %s %s: %s", what, file ? file : "",
             ssl_reason(reason, sizeof reason, "unknown error"));
    redis_tls_free(t);
}

struct redis_tls *redis_tls_new(const struct redis_tls_config *cfg, char *err, size_t errlen)
{
    struct redis_tls *t = xcalloc(1, sizeof *t);
    t->verify = cfg->verify;
    t->server_name = cfg->server_name ? xstrdup(cfg->server_name) : NULL;
    ERR_clear_error();
    t->ctx = SSL_CTX_new(TLS_client_method());
    if (!t->ctx) {
        tls_fail(t, err, errlen, "cannot create a TLS context", NULL);
        return NULL;
    }
    SSL_CTX_set_min_proto_version(t->ctx, TLS1_2_VERSION);
    if (cfg->ca_file) {
        if (SSL_CTX_load_verify_locations(t->ctx, cfg->ca_file, NULL) != 1) {
            tls_fail(t, err, errlen, "cannot load ca_file", cfg->ca_file);
            return NULL;
        }
    } else if (SSL_CTX_set_default_verify_paths(t->ctx) != 1) {
        tls_fail(t, err, errlen, "cannot load the system's CA store", NULL);
        return NULL;
    }
    if (cfg->cert_file) {
        if (SSL_CTX_use_certificate_chain_file(t->ctx, cfg->cert_file) != 1) {
            tls_fail(t, err, errlen, "cannot load cert_file", cfg->cert_file);
            return NULL;
        }
        if (!cfg->key_file) {
            tls_fail(t, err, errlen, "cannot load key_file", NULL);
            return NULL;
        }
        if (tls_use_key_file(t->ctx, cfg->key_file, "redis.tls: key_file", err, errlen) < 0) {
            redis_tls_free(t);
            return NULL;
        }
        if (SSL_CTX_check_private_key(t->ctx) != 1) {
            tls_fail(t, err, errlen, "key_file does not match cert_file", cfg->key_file);
            return NULL;
        }
    }
    SSL_CTX_set_verify(t->ctx, t->verify ? SSL_VERIFY_PEER : SSL_VERIFY_NONE, NULL);
    return t;
}

static int is_ip_literal(const char *s)
{
    unsigned char buf[sizeof(struct in6_addr)];
    return inet_pton(AF_INET, s, buf) == 1 || inet_pton(AF_INET6, s, buf) == 1;
}

struct ssl_st *redis_tls_ssl(struct redis_tls *t, const char *host, char *err, size_t errlen)
{
    char reason[256];
    const char *name = t->server_name ? t->server_name : host;
    ERR_clear_error();
    SSL *ssl = SSL_new(t->ctx);
    if (!ssl) {
        snprintf(err, errlen, "cannot create a TLS session: %s",
                 ssl_reason(reason, sizeof reason, "unknown error"));
        return NULL;
    }
    if (!name)
        return ssl; /* a unix socket and no server_name: nothing to name */
    int ip = is_ip_literal(name);
    /* SNI carries host names only (RFC 6066: never an IP literal). */
    int ok = ip || SSL_set_tlsext_host_name(ssl, name) == 1;
    if (ok && t->verify) {
        if (ip)
            ok = X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), name) == 1;
        else
            ok = SSL_set1_host(ssl, name) == 1;
    }
    if (!ok) {
        snprintf(err, errlen, "cannot set the TLS server name %s: %s", name,
                 ssl_reason(reason, sizeof reason, "unknown error"));
        SSL_free(ssl);
        return NULL;
    }
    return ssl;
}

void redis_tls_error(struct bufferevent *bev, int before_reply, char *out, size_t outlen)
{
    out[0] = '\0';
    SSL *ssl = bufferevent_openssl_get_ssl(bev);
    /* libevent queues SSL_get_error's code (a small number, no library)
     * and then OpenSSL's own errors; of these the last is the closest to
     * the cause. */
    unsigned long e, lib_err = 0, ssl_code = 0;
    while ((e = bufferevent_get_openssl_error(bev)) != 0) {
        if (ERR_GET_LIB(e) != 0)
            lib_err = e;
        else if (!ssl_code)
            ssl_code = e;
    }
    long vr = ssl ? SSL_get_verify_result(ssl) : X509_V_OK;
    if (vr != X509_V_OK) {
        snprintf(out, outlen, "certificate verify failed: %s", X509_verify_cert_error_string(vr));
    } else if (lib_err) {
        const char *reason = ERR_reason_error_string(lib_err);
        if (reason)
            snprintf(out, outlen, "TLS error: %s", reason);
        else
            ERR_error_string_n(lib_err, out, outlen);
    } else if (ssl_code == SSL_ERROR_SYSCALL) {
        /* A TLS 1.3 server that requires a client certificate and got none
         * sends its alert after our handshake ended, and closes; when our
         * first command crossed the close, the reset discards the alert
         * unread (seen on a slow host). Before any reply, say so. */
        snprintf(out, outlen, "TLS session closed by the server%s",
                 before_reply ? " before any reply (does it require a client certificate?)" : "");
    } else if (ssl_code) {
        snprintf(out, outlen, "TLS error (SSL_get_error %lu)", ssl_code);
    }
}

void redis_tls_free(struct redis_tls *t)
{
    if (!t)
        return;
    SSL_CTX_free(t->ctx);
    free(t->server_name);
    free(t);
}
