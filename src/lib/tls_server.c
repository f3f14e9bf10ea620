/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tls_server.c: a listener's TLS context (tls_server.h) on OpenSSL: the
 * certificate chain and its key checked to match, TLS 1.2 at least, the
 * client CA and verification mode of client_auth, ALPN, a session id
 * context (without one, resuming a session whose client was verified
 * fails), and the certificate's validity and serial read once.
 */
#include <openssl/asn1.h>
#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "lib/tls_server.h"

const char *const tls_listener_names[TLS_NLISTENERS] = {
    [TLS_LISTEN] = "listen",
    [TLS_ADMIN_LISTEN] = "admin_listen",
    [TLS_GRPC_LISTEN] = "grpc_listen",
};

#define SESSION_ID_CONTEXT "ratelimitd"

/* "what path: reason", the reason the first OpenSSL put in its queue
 * (the root cause: "No such file", "key values mismatch"), the queue then
 * emptied so that it says nothing about the next call. */
static struct tls_server *fail(struct tls_server *t, char *err, size_t errlen, const char *what,
                               const char *path)
{
    unsigned long e = ERR_peek_error();
    char reason[256] = "no reason given";
    if (e != 0)
        ERR_error_string_n(e, reason, sizeof reason);
    ERR_clear_error();
    snprintf(err, errlen, "%s %s: %s", what, path, reason);
    tls_server_free(t);
    return NULL;
}

static const unsigned char alpn_h2[] = "\x02h2";
static const unsigned char alpn_http11[] = "\x08http/1.1";

/* The ALPN protocol of the listener, when the client offers it. A client
 * offering others only: on the gRPC listener (h2, which can speak nothing
 * else) the handshake ends with no_application_protocol, as RFC 7301 asks
 * (a client sent there by mistake is told so, rather than answered a
 * garbled HTTP/2 GOAWAY); on the HTTP listener it goes on without one
 * (curl and older clients speak HTTP/1.1 anyway). */
static int select_alpn(SSL *ssl, const unsigned char **out, unsigned char *outlen,
                       const unsigned char *in, unsigned int inlen, void *arg)
{
    const unsigned char *want = arg; /* length-prefixed, as on the wire */
    (void)ssl;
    for (unsigned i = 0; i < inlen; i += 1u + in[i]) {
        if (i + 1u + in[i] > inlen)
            break;
        if (in[i] == want[0] && memcmp(in + i + 1, want + 1, want[0]) == 0) {
            *out = in + i + 1;
            *outlen = in[i];
            return SSL_TLSEXT_ERR_OK;
        }
    }
    return want == alpn_h2 ? SSL_TLSEXT_ERR_ALERT_FATAL : SSL_TLSEXT_ERR_NOACK;
}

/* OpenSSL's password callback: no passphrase. Without it OpenSSL asks for
 * one on the terminal, which would hang -t and a reload (the daemon has
 * no one to answer); with it an encrypted key fails at once, and *arg
 * says why. */
static int no_passphrase(char *buf, int size, int rwflag, void *arg)
{
    (void)buf, (void)size, (void)rwflag;
    if (arg != NULL)
        *(int *)arg = 1;
    return -1;
}

static int64_t asn1_seconds(const ASN1_TIME *t)
{
    struct tm tm;
    if (t == NULL || ASN1_TIME_to_tm(t, &tm) != 1)
        return 0;
    return (int64_t)timegm(&tm);
}

/* The certificate's serial in hex, its validity and its digest. */
static int read_certificate(struct tls_server *t)
{
    X509 *x = SSL_CTX_get0_certificate(t->ctx);
    unsigned n = 0;
    if (x == NULL)
        return -1;
    t->not_before = asn1_seconds(X509_get0_notBefore(x));
    t->not_after = asn1_seconds(X509_get0_notAfter(x));
    BIGNUM *bn = ASN1_INTEGER_to_BN(X509_get0_serialNumber(x), NULL);
    char *hex = bn ? BN_bn2hex(bn) : NULL;
    snprintf(t->serial, sizeof t->serial, "%s", hex ? hex : "?");
    OPENSSL_free(hex);
    BN_free(bn);
    return X509_digest(x, EVP_sha256(), t->digest, &n) == 1 && n == sizeof t->digest ? 0 : -1;
}

int tls_use_key_file(struct ssl_ctx_st *ctx, const char *key_file, const char *what, char *err,
                     size_t errlen)
{
    int asked = 0; /* OpenSSL wanted a passphrase (no_passphrase) */
    SSL_CTX_set_default_passwd_cb(ctx, no_passphrase);
    SSL_CTX_set_default_passwd_cb_userdata(ctx, &asked);
    int used = SSL_CTX_use_PrivateKey_file(ctx, key_file, SSL_FILETYPE_PEM);
    SSL_CTX_set_default_passwd_cb_userdata(ctx, NULL); /* &asked is gone after this call */
    if (used == 1)
        return 0;
    if (asked) {
        ERR_clear_error();
        snprintf(err, errlen,
                 "%s %s: the key is encrypted (it needs a passphrase, which ratelimitd "
                 "never asks for): give it unencrypted",
                 what, key_file);
    } else {
        fail(NULL, err, errlen, what, key_file);
    }
    return -1;
}

struct tls_server *tls_server_new(const struct tls_server_params *p, char *err, size_t errlen)
{
    struct tls_server *t = xcalloc(1, sizeof *t);
    ERR_clear_error();
    if ((t->ctx = SSL_CTX_new(TLS_server_method())) == NULL)
        return fail(t, err, errlen, "cannot make a TLS context for", p->cert_file);
    SSL_CTX_set_min_proto_version(t->ctx, TLS1_2_VERSION);
    /* No renegotiation (TLS 1.2): a client could make the server redo the
     * costly half of a handshake at will. */
    SSL_CTX_set_options(t->ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_CIPHER_SERVER_PREFERENCE);
    if (SSL_CTX_use_certificate_chain_file(t->ctx, p->cert_file) != 1)
        return fail(t, err, errlen, "cert_file", p->cert_file);
    if (tls_use_key_file(t->ctx, p->key_file, "key_file", err, errlen) < 0) {
        tls_server_free(t);
        return NULL;
    }
    if (SSL_CTX_check_private_key(t->ctx) != 1)
        return fail(t, err, errlen, "key_file (not the certificate's key)", p->key_file);
    if (read_certificate(t) < 0)
        return fail(t, err, errlen, "cert_file", p->cert_file);
    if (p->client_ca_file != NULL) {
        STACK_OF(X509_NAME) *names = SSL_load_client_CA_file(p->client_ca_file);
        if (SSL_CTX_load_verify_locations(t->ctx, p->client_ca_file, NULL) != 1 || names == NULL) {
            sk_X509_NAME_pop_free(names, X509_NAME_free);
            return fail(t, err, errlen, "client_ca_file", p->client_ca_file);
        }
        SSL_CTX_set_client_CA_list(t->ctx, names); /* takes names */
    }
    int mode = p->client_auth == TLS_CLIENT_AUTH_NONE ? SSL_VERIFY_NONE
               : p->client_auth == TLS_CLIENT_AUTH_REQUEST
                   ? SSL_VERIFY_PEER
                   : SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT;
    SSL_CTX_set_verify(t->ctx, mode, NULL);
    if (SSL_CTX_set_session_id_context(t->ctx, (const unsigned char *)SESSION_ID_CONTEXT,
                                       sizeof SESSION_ID_CONTEXT - 1) != 1)
        return fail(t, err, errlen, "cannot set the session context of", p->cert_file);
    if (p->alpn != NULL)
        SSL_CTX_set_alpn_select_cb(t->ctx, select_alpn,
                                   (void *)(strcmp(p->alpn, "h2") == 0 ? alpn_h2 : alpn_http11));
    return t;
}

void tls_server_free(struct tls_server *t)
{
    if (t == NULL)
        return;
    SSL_CTX_free(t->ctx);
    free(t);
}

int tls_server_same(const struct tls_server *a, const struct tls_server *b)
{
    if (a == NULL || b == NULL)
        return a == b;
    return memcmp(a->digest, b->digest, sizeof a->digest) == 0;
}

const char *tls_server_validity(const struct tls_server *t, int64_t now)
{
    if (t->not_after && now > t->not_after)
        return "expired";
    if (t->not_before && now < t->not_before)
        return "not yet valid";
    return NULL;
}
