/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tls.c: a front connection's bytes, plain or TLS (tls.h). Over TLS the
 * SSL reads from and writes to two memory BIOs: recv() fills the first,
 * send() empties the second, so the socket is touched in one place each
 * way, one system call moves a whole handshake flight, and OpenSSL never
 * returns "want write" from a read.
 */
#include <errno.h>
#include <event2/event.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <stdlib.h>
#include <sys/socket.h>

#include "core/core.h"
#include "core/metrics.h"
#include "front/tls.h"
#include "lib/log.h"

#define TLS_READ_CHUNK 16384 /* ciphertext read at once */
#define TLS_OUT_MAX 65536    /* ciphertext held for the socket before send says EAGAIN */
#define TLS_READ_ROUNDS 16   /* SSL_read calls per front_io_recv, for fairness */

enum { IO_HANDSHAKING, IO_OPEN, IO_FAILED };

void front_io_init(struct front_io *io, int fd, const struct tls_server *server,
                   enum tls_listener listener, struct event *rd, const struct core *core)
{
    *io = (struct front_io){.fd = fd, .rd = rd, .core = core, .listener = (unsigned char)listener};
    if (server == NULL)
        return;
    BIO *in = BIO_new(BIO_s_mem()), *out = BIO_new(BIO_s_mem());
    if ((io->ssl = SSL_new(server->ctx)) == NULL || in == NULL || out == NULL)
        abort(); /* out of memory, as xmalloc */
    /* An empty input buffer means "more to come", never the end. */
    BIO_set_mem_eof_return(in, -1);
    SSL_set_bio(io->ssl, in, out); /* the SSL owns both */
    SSL_set_accept_state(io->ssl);
    /* A handshake flight, then an answer: two small writes in a row, which
     * Nagle's algorithm would hold for the client's delayed ACK. A unix
     * socket refuses the option: nothing to do there. */
    int one = 1;
    (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

/* Why a handshake failed, as the metrics' class and a line at debug. */
static void handshake_failed(struct front_io *io)
{
    unsigned long e = ERR_peek_error();
    long verify = SSL_get_verify_result(io->ssl);
    int reason = ERR_GET_REASON(e);
    enum metrics_tls_result r = METRICS_TLS_PROTOCOL;
    char text[256] = "the connection broke";

    if (verify != X509_V_OK || reason == SSL_R_PEER_DID_NOT_RETURN_A_CERTIFICATE ||
        reason == SSL_R_CERTIFICATE_VERIFY_FAILED)
        r = METRICS_TLS_CLIENT_CERTIFICATE;
    if (verify != X509_V_OK)
        snprintf(text, sizeof text, "client certificate: %s",
                 X509_verify_cert_error_string(verify));
    else if (e != 0)
        ERR_error_string_n(e, text, sizeof text);
    ERR_clear_error();
    io->state = IO_FAILED;
    metrics_tls_handshake(io->core->metrics, io->listener, r);
    log_event(io->core->log, LOG_LVL_DEBUG, "TLS handshake failed", "listener",
              tls_listener_names[io->listener], "reason", text, NULL);
}

/* The handshake just ended: the front's early output goes into records. */
static void handshake_done(struct front_io *io)
{
    io->state = IO_OPEN;
    metrics_tls_handshake(io->core->metrics, io->listener, METRICS_TLS_OK);
    if (io->early.len > 0 && SSL_write(io->ssl, io->early.data, (int)io->early.len) <= 0)
        handshake_failed(io); /* a memory BIO takes everything: not seen */
    buf_free(&io->early);
}

int front_io_pending(const struct front_io *io)
{
    return io->ssl != NULL && BIO_ctrl_pending(SSL_get_wbio(io->ssl)) > 0;
}

int front_io_flush(struct front_io *io)
{
    if (io->ssl == NULL)
        return 0;
    BIO *out = SSL_get_wbio(io->ssl);
    char *data;
    long n;
    while ((n = BIO_get_mem_data(out, &data)) > 0) {
        ssize_t sent = send(io->fd, data, (size_t)n, MSG_NOSIGNAL);
        if (sent < 0 && errno == EINTR)
            continue;
        if (sent < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return 0;
        if (sent <= 0)
            return -1;
        if (sent == n) {
            (void)BIO_reset(out); /* all of it: emptied without a copy */
            continue;
        }
        /* Drops what was sent from the front of the buffer. */
        char drop[4096];
        for (ssize_t left = sent; left > 0;) {
            int k = BIO_read(out, drop, left < (ssize_t)sizeof drop ? (int)left : (int)sizeof drop);
            if (k <= 0)
                return -1;
            left -= k;
        }
    }
    return 0;
}

/* Reads the socket into OpenSSL's input. Returns what recv returned. */
static ssize_t pull(struct front_io *io)
{
    char raw[TLS_READ_CHUNK];
    ssize_t r;
    do
        r = recv(io->fd, raw, sizeof raw, 0);
    while (r < 0 && errno == EINTR);
    if (r > 0 && BIO_write(SSL_get_rbio(io->ssl), raw, (int)r) != (int)r)
        abort(); /* a memory BIO takes everything but out of memory */
    return r;
}

void front_io_kick(struct front_io *io)
{
    /* Only while the front reads: a front that stopped (a full pipeline, a
     * full output) keeps its backpressure, and kicks again when it
     * resumes. */
    if (io->more && event_pending(io->rd, EV_READ, NULL))
        event_active(io->rd, EV_READ, 0);
}

ssize_t front_io_recv(struct front_io *io, void *buf, size_t len)
{
    if (io->ssl == NULL)
        return recv(io->fd, buf, len, 0);
    if (io->state == IO_FAILED)
        return errno = EPROTO, -1;
    size_t got = 0;
    ssize_t r = -1;
    int rounds = 0, err = EAGAIN, closed = 0;
    ERR_clear_error();
    while (got < len && rounds++ < TLS_READ_ROUNDS) {
        int n = SSL_read(io->ssl, (char *)buf + got,
                         len - got > INT32_MAX ? INT32_MAX : (int)(len - got));
        /* Asked before handshake_done's SSL_write, which would answer it. */
        int e = n > 0 ? SSL_ERROR_NONE : SSL_get_error(io->ssl, n);
        if (io->state == IO_HANDSHAKING && SSL_is_init_finished(io->ssl))
            handshake_done(io);
        if (n > 0) {
            got += (size_t)n;
            continue;
        }
        if (e == SSL_ERROR_WANT_READ) {
            if ((r = pull(io)) > 0)
                continue;
            err = r == 0 ? 0 : errno;
            break;
        }
        if (e == SSL_ERROR_ZERO_RETURN) {
            r = 0, err = 0, closed = 1; /* close_notify */
            break;
        }
        if (io->state == IO_HANDSHAKING)
            handshake_failed(io);
        else
            io->state = IO_FAILED, ERR_clear_error();
        err = EPROTO;
        break;
    }
    /* What OpenSSL answered (a handshake flight, an alert) goes now; with
     * plaintext read, the front writes next and its answer leaves with
     * it (the session tickets after a handshake) in one segment. */
    if (got == 0 && front_io_flush(io) < 0)
        return errno = EPIPE, -1;
    /* Stopped by our own bounds with bytes left inside OpenSSL, or by the
     * peer's close_notify after plaintext (returned now, the end at the
     * next call): the socket may have nothing more to say, so its event
     * would not come. */
    io->more = ((got == len || rounds > TLS_READ_ROUNDS) && io->state == IO_OPEN &&
                (SSL_pending(io->ssl) > 0 || BIO_ctrl_pending(SSL_get_rbio(io->ssl)) > 0)) ||
               (closed && got > 0);
    front_io_kick(io);
    if (got > 0)
        return (ssize_t)got;
    if (err == 0)
        return 0;
    return errno = err, -1;
}

ssize_t front_io_send(struct front_io *io, const void *data, size_t len)
{
    if (io->ssl == NULL)
        return send(io->fd, data, len, MSG_NOSIGNAL);
    if (io->state == IO_FAILED)
        return errno = EPIPE, -1;
    if (io->state == IO_HANDSHAKING) {
        buf_append(&io->early, data, len);
        return (ssize_t)len;
    }
    if (front_io_flush(io) < 0)
        return errno = EPIPE, -1;
    size_t taken = 0;
    ERR_clear_error();
    while (taken < len && BIO_ctrl_pending(SSL_get_wbio(io->ssl)) < TLS_OUT_MAX) {
        size_t n = len - taken < TLS_READ_CHUNK ? len - taken : TLS_READ_CHUNK;
        if (SSL_write(io->ssl, (const char *)data + taken, (int)n) != (int)n) {
            io->state = IO_FAILED;
            ERR_clear_error();
            return errno = EPIPE, -1;
        }
        taken += n;
        if (front_io_flush(io) < 0)
            return errno = EPIPE, -1;
    }
    if (taken == 0)
        return errno = EAGAIN, -1;
    return (ssize_t)taken;
}

void front_io_shutdown(struct front_io *io)
{
    if (io->ssl == NULL || io->state != IO_OPEN)
        return;
    ERR_clear_error();
    (void)SSL_shutdown(io->ssl); /* queues close_notify; the answer is not awaited */
    ERR_clear_error();
    /* The shutdown of the socket follows anyway: a failed flush only
     * loses the close_notify, which a peer may not wait for. */
    if (front_io_flush(io) < 0)
        return;
}

void front_io_fini(struct front_io *io)
{
    if (io->ssl == NULL)
        return;
    if (io->state == IO_HANDSHAKING)
        metrics_tls_handshake(io->core->metrics, io->listener, METRICS_TLS_ABORTED);
    SSL_free(io->ssl);
    io->ssl = NULL;
    buf_free(&io->early);
}
