/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_lease_id.c: lease ids (src/core/lease_id.c): every id encoded
 * decodes to what it was made of (hostile keys, the longest names and
 * keys); what is not an id is refused; nonces are random and URL-safe;
 * the member the backends store.
 */
#include <stdio.h>
#include <string.h>

#include "core/lease_id.h"
#include "tap.h"

static const char NONCE[] = "abcdefghij0123456789-_";

static int round_trip(const char *policy, const char *tier, const char *key, size_t keylen,
                      int64_t units, int local)
{
    char id[LEASE_ID_MAX + 1];
    struct lease_ref r;
    int n = lease_id_encode(local, policy, tier, key, keylen, units, NONCE, id, sizeof id);
    if (n < 0 || (size_t)n != strlen(id) || strcspn(id, ", {}%") != (size_t)n)
        return 0;
    if (lease_id_decode(id, (size_t)n, &r) < 0)
        return 0;
    return r.local == local && strcmp(r.policy, policy) == 0 && strcmp(r.tier, tier) == 0 &&
           r.keylen == keylen && memcmp(r.key, key, keylen) == 0 && r.units == units &&
           strcmp(r.nonce, NONCE) == 0;
}

static void test_round_trip(void)
{
    static const char *const keys[] = {"u",   "user:42", "a{b}", "x y,z", "ключ",
                                       "%25", "\r\n",    "ab",   "abc",   "abcd"};
    int all = 1;
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        all &= round_trip("api", "inflight", keys[i], strlen(keys[i]), 1 + (int64_t)i, (int)i & 1);
    ok(all, "ids of hostile keys decode to their parts, URL-safe and without commas");
    ok(round_trip("p", "t", "a\0b", 3, 1, 0), "a key holding a NUL");
    char policy[POLICY_NAME_MAX + 1], key[POLICY_KEY_MAX];
    memset(policy, 'p', POLICY_NAME_MAX);
    policy[POLICY_NAME_MAX] = '\0';
    for (size_t i = 0; i < sizeof key; i++)
        key[i] = (char)(i * 7 + 1);
    ok(round_trip(policy, policy, key, sizeof key, REQUEST_MAX_COST, 1),
       "the longest names and key, the largest cost, fit LEASE_ID_MAX");
    char small[16];
    ok(lease_id_encode(0, "api", "t", "key", 3, 1, NONCE, small, sizeof small) == -1,
       "too small a buffer: -1");
}

static void test_refused(void)
{
    static const char *const bad[] = {
        "",
        "junk",
        "b.x.y.z.1.short",
        "x.YXBp.dA.dQ.1.abcdefghij0123456789-_",           /* unknown place */
        "b.YXBp.dA.dQ.0.abcdefghij0123456789-_",           /* 0 units */
        "b.YXBp.dA.dQ.01.abcdefghij0123456789-_",          /* a leading zero */
        "b.YXBp.dA.dQ.1.abcdefghij0123456789-",            /* a short nonce */
        "b.YXBp.dA.dQ.1.abcdefghij0123456789-_.x",         /* a seventh part */
        "b.YXBp.dA..1.abcdefghij0123456789-_",             /* an empty key */
        "b.YSBi.dA.dQ.1.abcdefghij0123456789-_",           /* policy "a b" */
        "b.YXBp.dA.d.1.abcdefghij0123456789-_",            /* 1 char of base64 */
        "b.YXBp.dA.dQ.1.abcdefghij0123456789+_",           /* '+' in the nonce */
        "b.YXBp.dA.dQ.99999999999.abcdefghij0123456789-_", /* past the cost bound */
    };
    int all = 1;
    struct lease_ref r;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        if (lease_id_decode(bad[i], strlen(bad[i]), &r) == 0) {
            printf("#   accepted %s\n", bad[i]);
            all = 0;
        }
    ok(all, "what is not a lease id is refused");
    const char *good = "b.YXBp.dA.dQ.1.abcdefghij0123456789-_";
    ok(lease_id_decode(good, strlen(good), &r) == 0 && strcmp(r.policy, "api") == 0 &&
           r.keylen == 1 && r.key[0] == 'u',
       "a hand-written id decodes");
    char m[LEASE_MEMBER_MAX];
    ok(lease_member(&r, m) == strlen("1:abcdefghij0123456789-_") &&
           strcmp(m, "1:abcdefghij0123456789-_") == 0,
       "the member: units:nonce");
}

static void test_nonce(void)
{
    char a[LEASE_NONCE_LEN + 1], b[LEASE_NONCE_LEN + 1];
    ok(lease_nonce_new(a) == 0 && lease_nonce_new(b) == 0, "nonces drawn");
    ok(strlen(a) == LEASE_NONCE_LEN && strspn(a, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuv"
                                                 "wxyz0123456789-_") == LEASE_NONCE_LEN,
       "a nonce is %d base64url characters", LEASE_NONCE_LEN);
    ok(strcmp(a, b) != 0, "two nonces differ");
}

int main(void)
{
    test_round_trip();
    test_refused();
    test_nonce();
    return tap_done();
}
