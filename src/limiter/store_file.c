/* SPDX-License-Identifier: Apache-2.0 */
/*
 * store_file.c: the in-memory store's image and its file (store_file.h for
 * the format and the contract).
 *
 * Owns: encoding entries, validating and decoding an image (one parser
 * run twice: first to check every byte with the store untouched, then to
 * fill it, so that a bad image changes nothing), the checksum, the atomic
 * write and the whole-file read.
 * Does not own: the entries' meaning (the algorithm files), locking, when.
 */
#include "limiter/store_file.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lib/siphash.h"
#include "limiter/limiter_internal.h"
#include "limiter/limiter_local.h"

#define MAGIC "RLDSTATE"
#define HEADER_LEN 32
#define SUM_LEN 8
/* Far beyond any time, count or scaled value the algorithms write, and
 * small enough that their sums and differences cannot overflow. */
#define VALUE_MAX (1LL << 62)

/* Integrity, not secrecy: a fixed key ("ratelimitd-state" in ASCII). */
static const struct siphash_key sum_key = {0x74696d696c657461ULL, 0x65746174732d64ULL};

uint64_t store_file_sum(const void *data, size_t len)
{
    return siphash24(&sum_key, data, len);
}

/* ---- encoding ---------------------------------------------------------------- */

/* Writers into room already reserved: the snapshot runs under the store's
 * lock, so an entry's room is reserved once (entry_size) rather than
 * checked field by field, which halved its time. */
static void put_u8(unsigned char **p, unsigned v)
{
    *(*p)++ = (unsigned char)v;
}

static void put_le(unsigned char **p, uint64_t v, int n)
{
    for (int i = 0; i < n; i++)
        (*p)[i] = (unsigned char)(v >> (8 * i));
    *p += n;
}

static void put_i64(unsigned char **p, int64_t v)
{
    put_le(p, (uint64_t)v, 8);
}

static void put_bytes(unsigned char **p, const void *data, size_t n)
{
    memcpy(*p, data, n);
    *p += n;
}

/* The bytes e takes in an image. */
static size_t entry_size(const struct entry *e)
{
    size_t n = 4 + e->keylen + 8 + 8 + 1;
    switch (e->kind) {
    case KIND_FIXED:
        return n + 25;
    case KIND_COUNTER:
    case KIND_TOKEN:
    case KIND_GCRA:
        return n + 24;
    case KIND_LOG:
        return n + 4 + 24 * (e->u.log.len - e->u.log.head);
    case KIND_BUCKETS:
        return n + 4 + 16 * e->u.swb.len;
    case KIND_LEASES:
        return n + 4 + (16 + LEASE_NONCE_LEN) * e->u.ls.len;
    case KIND_NONE:
        break;
    }
    return n;
}

static void put_state(unsigned char **p, const struct entry *e)
{
    switch (e->kind) {
    case KIND_FIXED:
        put_i64(p, e->u.fw.e), put_i64(p, e->u.fw.n), put_i64(p, e->u.fw.s);
        put_u8(p, (unsigned)e->u.fw.cal);
        break;
    case KIND_COUNTER:
        put_i64(p, e->u.swc.e), put_i64(p, e->u.swc.c), put_i64(p, e->u.swc.p);
        break;
    case KIND_TOKEN:
        put_i64(p, e->u.tb.s), put_i64(p, e->u.tb.t), put_i64(p, e->u.tb.w);
        break;
    case KIND_GCRA:
        put_i64(p, e->u.gc.d), put_i64(p, e->u.gc.t), put_i64(p, e->u.gc.w);
        break;
    case KIND_LOG:
        put_le(p, e->u.log.len - e->u.log.head, 4);
        for (size_t i = e->u.log.head; i < e->u.log.len; i++) {
            const struct log_run *r = &e->u.log.runs[i];
            put_i64(p, r->score), put_i64(p, r->count), put_i64(p, r->before);
        }
        break;
    case KIND_BUCKETS:
        put_le(p, e->u.swb.len, 4);
        for (size_t i = 0; i < e->u.swb.len; i++)
            put_i64(p, e->u.swb.b[i].start), put_i64(p, e->u.swb.b[i].count);
        break;
    case KIND_LEASES:
        put_le(p, e->u.ls.len, 4);
        for (size_t i = 0; i < e->u.ls.len; i++) {
            put_i64(p, e->u.ls.l[i].expires), put_i64(p, e->u.ls.l[i].units);
            put_bytes(p, e->u.ls.l[i].nonce, LEASE_NONCE_LEN);
        }
        break;
    case KIND_NONE:
        break;
    }
}

size_t store_file_snapshot(const struct local_store *s, int64_t now_us, struct buf *out)
{
    size_t start = out->len, n = 0;
    unsigned char *p = (unsigned char *)buf_reserve(out, HEADER_LEN);
    put_bytes(&p, MAGIC, 8);
    put_le(&p, STORE_FILE_VERSION, 4);
    put_le(&p, 0, 4);
    put_i64(&p, now_us);
    out->len += HEADER_LEN; /* the count, the last 8 bytes, is filled in below */
    /* Oldest use first: loading inserts each as the newest. */
    for (const struct lru_node *nd = s->t.oldest; nd; nd = nd->newer) {
        const struct entry *e = (const struct entry *)nd;
        /* A created entry not yet written is absent, as in Redis. */
        if (e->kind == KIND_NONE || now_us > e->expires_at)
            continue;
        size_t size = entry_size(e);
        p = (unsigned char *)buf_reserve(out, size);
        put_le(&p, e->keylen, 4);
        put_bytes(&p, e->key, e->keylen);
        put_i64(&p, e->expires_at), put_i64(&p, e->expires_from_end);
        put_u8(&p, (unsigned)e->kind);
        put_state(&p, e);
        out->len += size;
        n++;
    }
    p = (unsigned char *)out->data + start + HEADER_LEN - 8;
    put_le(&p, n, 8);
    return n;
}

void store_file_seal(struct buf *out, size_t start, const void *extra, size_t extra_len)
{
    unsigned char *p;
    if (extra_len == 0) {
        /* Nothing extra: the version 1 image, which the previous release
         * reads too, so that rolling back (a restart, a hand-over) keeps
         * the counters unless there are run-time overrides to carry. */
        p = (unsigned char *)out->data + start + 8;
        put_le(&p, 1, 4);
    } else {
        p = (unsigned char *)buf_reserve(out, 4);
        put_le(&p, extra_len, 4);
        out->len += 4;
        buf_append(out, extra, extra_len);
    }
    uint64_t sum = store_file_sum(out->data + start, out->len - start);
    p = (unsigned char *)buf_reserve(out, SUM_LEN);
    put_le(&p, sum, 8);
    out->len += SUM_LEN;
}

size_t store_file_encode(const struct local_store *s, int64_t now_us, struct buf *out)
{
    size_t start = out->len, n = store_file_snapshot(s, now_us, out);
    store_file_seal(out, start, NULL, 0);
    return n;
}

/* ---- decoding ---------------------------------------------------------------- */

/* The bytes not yet read; bad is set by the first read past the end or of
 * an out-of-range value, and every later read returns 0. */
struct reader {
    const unsigned char *p;
    size_t left;
    const char *bad; /* why, or NULL */
};

static uint64_t get_le(struct reader *r, size_t n)
{
    if (r->bad || r->left < n) {
        r->bad = r->bad ? r->bad : "truncated";
        return 0;
    }
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++)
        v |= (uint64_t)r->p[i] << (8 * i);
    r->p += n, r->left -= n;
    return v;
}

static int64_t get_i64(struct reader *r)
{
    int64_t v = (int64_t)get_le(r, 8);
    if (v > VALUE_MAX || v < -VALUE_MAX) {
        r->bad = r->bad ? r->bad : "a value out of range";
        return 0;
    }
    return v;
}

static const unsigned char *get_bytes(struct reader *r, size_t n)
{
    if (r->bad || r->left < n) {
        r->bad = r->bad ? r->bad : "truncated";
        return NULL;
    }
    const unsigned char *p = r->p;
    r->p += n, r->left -= n;
    return p;
}

static void refuse(struct reader *r, int cond, const char *why)
{
    if (cond && !r->bad)
        r->bad = why;
}

/* A count of n items of item_len bytes each that the rest can hold. */
static size_t get_count(struct reader *r, size_t item_len)
{
    size_t n = (size_t)get_le(r, 4);
    refuse(r, n > r->left / item_len, "truncated");
    return r->bad ? 0 : n;
}

static void get_log(struct reader *r, struct entry *e)
{
    size_t n = get_count(r, 24);
    struct log_run *runs = e ? xcalloc(n + 1, sizeof *runs) : NULL;
    int64_t prev_score = 0, next_before = 0;
    for (size_t i = 0; i < n && !r->bad; i++) {
        /* One read per statement: an initializer list's are unsequenced. */
        struct log_run x;
        x.score = get_i64(r);
        x.count = get_i64(r);
        x.before = get_i64(r);
        /* sliding_window_log.c's invariants: one run per distinct µs in
         * order, each of some units, and `before` running on. */
        refuse(r,
               x.count <= 0 || x.before < 0 || (i > 0 && x.score <= prev_score) ||
                   (i > 0 && x.before != next_before),
               "a log out of order");
        prev_score = x.score, next_before = x.before + x.count;
        if (runs)
            runs[i] = x;
    }
    if (e)
        e->u.log.runs = runs, e->u.log.head = 0, e->u.log.len = n, e->u.log.cap = n + 1;
}

static void get_buckets(struct reader *r, struct entry *e)
{
    size_t n = get_count(r, 16);
    struct swb_bucket *b = e ? xcalloc(n + 1, sizeof *b) : NULL;
    int64_t prev = 0;
    for (size_t i = 0; i < n && !r->bad; i++) {
        struct swb_bucket x;
        x.start = get_i64(r);
        x.count = get_i64(r);
        refuse(r, x.count < 0 || (i > 0 && x.start <= prev), "buckets out of order");
        prev = x.start;
        if (b)
            b[i] = x;
    }
    if (e)
        e->u.swb.b = b, e->u.swb.len = n, e->u.swb.cap = n + 1;
}

static void get_leases(struct reader *r, struct entry *e)
{
    size_t n = get_count(r, 16 + LEASE_NONCE_LEN);
    struct lease *l = e ? xcalloc(n + 1, sizeof *l) : NULL;
    for (size_t i = 0; i < n && !r->bad; i++) {
        struct lease x = {0};
        x.expires = get_i64(r);
        x.units = get_i64(r);
        const unsigned char *nonce = get_bytes(r, LEASE_NONCE_LEN);
        refuse(r, x.units < 0, "a lease of negative units");
        for (size_t j = 0; nonce && j < LEASE_NONCE_LEN; j++)
            refuse(r, nonce[j] == 0, "a lease's nonce with a NUL");
        if (l && nonce)
            memcpy(x.nonce, nonce, LEASE_NONCE_LEN), l[i] = x;
    }
    if (e)
        e->u.ls.l = l, e->u.ls.len = n, e->u.ls.cap = n + 1;
}

/* One kind's state into e (NULL: only checked). */
static void get_state(struct reader *r, enum kind k, struct entry *e)
{
    struct entry scratch;
    struct entry *x = e ? e : &scratch;
    switch (k) {
    case KIND_FIXED:
        x->u.fw.e = get_i64(r), x->u.fw.n = get_i64(r), x->u.fw.s = get_i64(r);
        x->u.fw.cal = (int)get_le(r, 1);
        refuse(r, x->u.fw.cal > 1 || x->u.fw.n < 0, "a bad fixed window");
        break;
    case KIND_COUNTER:
        x->u.swc.e = get_i64(r), x->u.swc.c = get_i64(r), x->u.swc.p = get_i64(r);
        refuse(r, x->u.swc.c < 0 || x->u.swc.p < 0, "a bad counter");
        break;
    case KIND_TOKEN:
        x->u.tb.s = get_i64(r), x->u.tb.t = get_i64(r), x->u.tb.w = get_i64(r);
        refuse(r, x->u.tb.w <= 0 || x->u.tb.s < 0, "a bad token bucket"); /* w divides */
        break;
    case KIND_GCRA:
        x->u.gc.d = get_i64(r), x->u.gc.t = get_i64(r), x->u.gc.w = get_i64(r);
        refuse(r, x->u.gc.w <= 0 || x->u.gc.d < 0, "a bad gcra state"); /* w divides */
        break;
    case KIND_LOG:
        get_log(r, e);
        break;
    case KIND_BUCKETS:
        get_buckets(r, e);
        break;
    case KIND_LEASES:
        get_leases(r, e);
        break;
    case KIND_NONE:
        refuse(r, 1, "an unknown kind");
        break;
    }
}

/* Every entry of the image, checked (s NULL) or put into s. */
static void get_entries(struct reader *r, uint64_t count, struct local_store *s, int64_t now,
                        struct store_file_counts *c)
{
    for (uint64_t i = 0; i < count && !r->bad; i++) {
        size_t keylen = (size_t)get_le(r, 4);
        refuse(r, keylen == 0 || keylen >= POLICY_KEY_BUF, "a key of a bad length");
        const unsigned char *key = get_bytes(r, keylen);
        int64_t expires_at = get_i64(r), from_end = get_i64(r);
        unsigned k = (unsigned)get_le(r, 1);
        refuse(r, k <= KIND_NONE || k > KIND_LEASES, "an unknown kind");
        int live = now <= expires_at;
        struct entry *e = NULL;
        if (s && live && !r->bad) {
            e = local_store_get_or_create(s, (const char *)key, keylen, now);
            local_store_become(e, KIND_NONE);
            e->kind = (enum kind)k, e->expires_at = expires_at, e->expires_from_end = from_end;
        }
        get_state(r, r->bad ? KIND_NONE : (enum kind)k, e);
        if (s)
            live ? c->loaded++ : c->expired++;
    }
}

int store_file_decode(struct local_store *s, const void *data, size_t len, int64_t now_us,
                      struct store_file_counts *c, char *err, size_t errlen)
{
    *c = (struct store_file_counts){0, 0, NULL, 0};
    if (len < HEADER_LEN + SUM_LEN || memcmp(data, MAGIC, 8) != 0) {
        snprintf(err, errlen, len < HEADER_LEN + SUM_LEN ? "truncated" : "not a state file");
        return -1;
    }
    struct reader r = {(const unsigned char *)data + 8, len - 8 - SUM_LEN, NULL};
    uint32_t version = (uint32_t)get_le(&r, 4);
    if (version != STORE_FILE_VERSION && version != 1) {
        snprintf(err, errlen, "format version %u, this binary reads %u", version,
                 STORE_FILE_VERSION);
        return -1;
    }
    struct reader sum = {(const unsigned char *)data + len - SUM_LEN, SUM_LEN, NULL};
    if (get_le(&sum, 8) != store_file_sum(data, len - SUM_LEN)) {
        snprintf(err, errlen, "checksum mismatch (corrupted or cut short)");
        return -1;
    }
    get_le(&r, 4), get_i64(&r); /* reserved, written_at */
    uint64_t count = get_le(&r, 8);
    struct reader body = r;
    get_entries(&r, count, NULL, now_us, c);
    if (version >= 2 && !r.bad) {
        size_t n = (size_t)get_le(&r, 4);
        refuse(&r, n > r.left, "an extra section longer than the image");
        c->extra = r.bad ? NULL : get_bytes(&r, n);
        c->extra_len = r.bad ? 0 : n;
    }
    refuse(&r, r.left != 0, "bytes after the last entry");
    if (r.bad) {
        snprintf(err, errlen, "%s", r.bad);
        return -1;
    }
    get_entries(&body, count, s, now_us, c);
    return 0;
}

/* ---- descriptors and files ----------------------------------------------------- */

static int write_all(int fd, const char *p, size_t len)
{
    while (len > 0) {
        ssize_t n = write(fd, p, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -1;
        p += n, len -= (size_t)n;
    }
    return 0;
}

static int read_all(int fd, struct buf *out)
{
    for (;;) {
        char *p = buf_reserve(out, 65536);
        ssize_t n = read(fd, p, 65536);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return (int)n;
        out->len += (size_t)n;
    }
}

int store_file_write_fd(int fd, const void *data, size_t len, char *err, size_t errlen)
{
    if (write_all(fd, data, len) < 0)
        return snprintf(err, errlen, "cannot write the state: %s", strerror(errno)), -1;
    return 0;
}

int store_file_read_fd(int fd, struct buf *out, char *err, size_t errlen)
{
    if (read_all(fd, out) < 0)
        return snprintf(err, errlen, "cannot read the state: %s", strerror(errno)), -1;
    return 0;
}

/* The directory part of path ("." for none) into dir. */
static void dir_of(const char *path, char *dir, size_t dirlen)
{
    const char *slash = strrchr(path, '/');
    if (!slash)
        snprintf(dir, dirlen, ".");
    else
        snprintf(dir, dirlen, "%.*s", slash == path ? 1 : (int)(slash - path), path);
}

/* Makes the rename durable: without it a power cut may bring back the old
 * name's contents after we said the new ones were written. */
static int sync_dir(const char *path)
{
    char dir[PATH_MAX];
    dir_of(path, dir, sizeof dir);
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    int rc = fsync(fd);
    close(fd);
    return rc;
}

/* A new file beside path (its name into tmp, PATH_MAX bytes), or -1 with
 * a message. mkostemp creates it 0600 and exclusively: never another
 * writer's, never readable by others while it is being written. */
static int make_temp(const char *path, char *tmp, char *err, size_t errlen)
{
    if (snprintf(tmp, PATH_MAX, "%s.XXXXXX", path) >= PATH_MAX)
        return snprintf(err, errlen, "%s: path too long", path), -1;
    int fd = mkostemp(tmp, O_CLOEXEC);
    if (fd < 0)
        snprintf(err, errlen, "cannot create a file beside %s: %s", path, strerror(errno));
    return fd;
}

int store_file_probe(const char *path, char *err, size_t errlen)
{
    char tmp[PATH_MAX];
    int fd = make_temp(path, tmp, err, errlen);
    if (fd < 0)
        return -1;
    close(fd);
    unlink(tmp);
    return 0;
}

int store_file_write(const char *path, const void *data, size_t len, char *err, size_t errlen)
{
    char tmp[PATH_MAX];
    int fd = make_temp(path, tmp, err, errlen);
    if (fd < 0)
        return -1;
    const char *step = "write";
    int rc = write_all(fd, data, len);
    if (rc == 0 && (step = "fsync", rc = fsync(fd)) == 0)
        step = "rename", rc = rename(tmp, path);
    int saved = errno;
    close(fd);
    if (rc < 0) {
        unlink(tmp);
        snprintf(err, errlen, "cannot %s %s: %s", step, tmp, strerror(saved));
        return -1;
    }
    if (sync_dir(path) < 0) {
        snprintf(err, errlen, "cannot fsync the directory of %s: %s", path, strerror(errno));
        return -1;
    }
    return 0;
}

int store_file_read(const char *path, struct buf *out, char *err, size_t errlen)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
    if (fd < 0 && errno == ENOENT)
        return 1;
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0) {
        snprintf(err, errlen, "cannot read %s: %s", path, strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    if (!S_ISREG(st.st_mode)) {
        snprintf(err, errlen, "cannot read %s: not a regular file", path);
        close(fd);
        return -1;
    }
    int rc = read_all(fd, out);
    if (rc < 0)
        snprintf(err, errlen, "cannot read %s: %s", path, strerror(errno));
    close(fd);
    return rc;
}
