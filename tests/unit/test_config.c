/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_config.c: loading the policy file. Every class of error with the exact
 * file:line:column it must point at; a full file's values; the defaults; the
 * example conf/ratelimitd.yaml; reference counting and lookup.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config/config.h"
#include "tap.h"

/* A policy "p" with one valid tier "a" on lines 1-7: the tier mapping starts
 * at 4:9, limit's value at 6:16, window's at 7:17. */
#define TIER_A                                                                                     \
    "      - name: a\n"                                                                            \
    "        algorithm: fixed_window\n"                                                            \
    "        limit: 10\n"                                                                          \
    "        window: 1s\n"
#define POLICY_P "policies:\n  p:\n    tiers:\n" TIER_A

/* POLICY_P with overrides from line 9 (each line "      - {...}", whose
 * mapping starts at column 9); OT is a valid tier list for them. */
#define OVR(lines) POLICY_P "    overrides:\n" lines
#define OT "[{name: o, algorithm: fixed_window, limit: 5, window: 1s}]"

/* A one-tier policy "p" whose tier is given line by line from line 4. */
#define TIER(lines) "policies:\n  p:\n    tiers:\n      - " lines

/* redis.tls with a rediss:// URL; the tls mapping starts at 4:5. */
#define TLS_S(lines) "redis:\n  url: rediss://h\n  tls:\n" lines POLICY_P
/* redis.sentinel from line 3 (its mapping starts at 3:5). */
#define SENTINEL(lines) "redis:\n  sentinel:\n" lines POLICY_P
#define SEED8                                                                                      \
    "\"redis://a:1\", \"redis://a:1\", \"redis://a:1\", \"redis://a:1\", "                         \
    "\"redis://a:1\", \"redis://a:1\", \"redis://a:1\", \"redis://a:1\""
#define SEEDS64 SEED8 ", " SEED8 ", " SEED8 ", " SEED8 ", " SEED8 ", " SEED8 ", " SEED8 ", " SEED8

static const struct error_case {
    const char *what;
    const char *yaml;
    const char *at;  /* "line:column" */
    const char *msg; /* a substring of what follows "t.yaml:line:column: " */
} error_cases[] = {
    /* YAML syntax, with libyaml's own position */
    {"mapping in a plain scalar", "a: b: c\n", "1:5", "mapping values are not allowed"},
    /* a tab in the indentation, at the tab, however libyaml words it */
    {"tab indentation", "policies:\n\tp: 1\n", "2:1",
     "tabs are not allowed for indentation; indent with spaces"},
    {"tab after spaces", "policies:\n  \tp: 1\n", "2:3", "tabs are not allowed for indentation"},
    {"tab before a sibling key", "redis:\n  url: x\n\ttimeout: 1s\n", "3:1",
     "tabs are not allowed for indentation"},
    {"tab in a block scalar's indentation", "listen: |\n\tx\n", "2:1",
     "tabs are not allowed for indentation"},
    {"tab indentation after CRLF", "policies:\r\n\tp: 1\r\n", "2:1",
     "tabs are not allowed for indentation"},
    {"tab indentation after CR", "policies:\r\tp: 1\r", "2:1",
     "tabs are not allowed for indentation"},
    {"unclosed flow sequence", "policies: [a,\n", "2:1", "did not find expected"},
    {"unclosed quote", "listen: \"abc\n", "2:1", "found unexpected end of stream"},
    {"bad indentation", "policies:\n  p:\n    tiers:\n   x: 1\n", "4:4",
     "did not find expected key"},
    {"invalid UTF-8", "listen: \"\xff\"\n" POLICY_P, "1:10", "invalid leading UTF-8 octet"},
    {"invalid UTF-8 after UTF-8", "# \xc3\xa9\nlisten: \"\xc3\xa9\xff\"\n" POLICY_P, "2:11",
     "invalid leading UTF-8 octet"},
    {"undefined alias", "listen: *nowhere\n" POLICY_P, "1:9", "found undefined alias"},
    {"empty file", "", "1:1", "the file is empty"},
    {"only comments", "# nothing\n", "1:1", "the file is empty"},
    {"a second document", POLICY_P "---\nlisten: x\n", "9:1", "a second YAML document"},

    /* unknown fields, at every level, naming the key and its siblings */
    {"unknown top-level field", "listn: x\n" POLICY_P, "1:1",
     "unknown field \"listn\" (known: listen, listen_mode, listen_group, backend, workers, redis, "
     "clock, max_body, log_level, access_log, "
     "admin_listen, admin_on_listen, grpc_listen, grpc_max_streams, watch, max_inflight, overload, "
     "max_connections, idle_timeout, request_timeout, "
     "local_max_keys, state_file, state_interval, deny_cache_max_keys, headers, auth_token_file, "
     "trusted_proxies, "
     "deny_status, policies, domains, envoy_config, envoy_merge_domains, envoy_shadow_mode, "
     "envoy_quota_mode, envoy_calendar_units, tls, admin_tls, grpc_tls)"},
    {"local_max_keys 0", "local_max_keys: 0\n" POLICY_P, "1:17", "local_max_keys: invalid value"},
    {"deny_cache_max_keys -1", "deny_cache_max_keys: -1\n" POLICY_P, "1:22",
     "deny_cache_max_keys: invalid value \"-1\""},
    {"deny_cache_max_keys too large", "deny_cache_max_keys: 100000001\n" POLICY_P, "1:22",
     "deny_cache_max_keys: invalid value \"100000001\""},
    {"deny_cache_max_keys quoted", "deny_cache_max_keys: \"5\"\n" POLICY_P, "1:22",
     "deny_cache_max_keys: expected an integer, got a quoted string"},
    {"bad log_level", "log_level: loud\n" POLICY_P, "1:12",
     "log_level: invalid value \"loud\": must be one of debug, info, warn, error"},
    {"bad access_log", "access_log: yes\n" POLICY_P, "1:13", "access_log: invalid value"},
    {"bad admin_listen", "admin_listen: nowhere\n" POLICY_P, "1:15", "admin_listen:"},
    {"max_inflight 0", "max_inflight: 0\n" POLICY_P, "1:15", "max_inflight: invalid value"},
    {"bad overload", "overload: drop\n" POLICY_P, "1:11",
     "overload: invalid value \"drop\": must be one of failure_mode, reject"},
    {"max_connections 1", "max_connections: 1\n" POLICY_P, "1:18",
     "max_connections: invalid value"},
    {"idle_timeout 0", "idle_timeout: 0s\n" POLICY_P, "1:15", "idle_timeout: invalid value"},
    {"relative auth_token_file", "auth_token_file: token\n" POLICY_P, "1:18",
     "auth_token_file: must be an absolute path"},
    {"unknown redis field", "redis:\n  tiemout: 1s\n" POLICY_P, "2:3",
     "redis: unknown field \"tiemout\" (known: url, timeout, batch, module, key_prefix, tls, "
     "sentinel, cluster)"},
    {"bad redis.module", "redis:\n  module: yes\n" POLICY_P, "2:11",
     "redis.module: invalid value \"yes\": must be one of auto, on, off"},
    {"unknown policy field", "policies:\n  p:\n    failuremode: open\n    tiers:\n" TIER_A, "3:5",
     "policies.p: unknown field \"failuremode\""},
    {"unknown tier field", POLICY_P "        limt: 5\n", "8:9",
     "policies.p.tiers[0]: unknown field \"limt\" (known: name, algorithm, limit, window, burst, "
     "precision, lease_timeout, calendar, timezone, anchor_day, week_start)"},
    {"unknown field quoted safely", "\"a\\x01b\": 1\n" POLICY_P, "1:1", "unknown field \"a?b\""},

    /* wrong node types */
    {"top level is a sequence", "- policies\n", "1:1", "expected a mapping, got a sequence"},
    {"top level is a scalar", "policies\n", "1:1", "expected a mapping, got a scalar"},
    {"redis is a scalar", "redis: 5\n" POLICY_P, "1:8", "redis: expected a mapping, got a scalar"},
    {"redis is null", "redis:\n" POLICY_P, "1:7", "redis: expected a mapping, got null"},
    {"listen is a sequence", "listen: [a]\n" POLICY_P, "1:9",
     "listen: expected a string, got a sequence"},
    {"listen is null", "listen: ~\n" POLICY_P, "1:9", "listen: expected a string, got null"},
    {"policies is a sequence", "policies: [p]\n", "1:11",
     "policies: expected a mapping of policy names to policies, got a sequence"},
    {"policy is a scalar", "policies:\n  p: 5\n", "2:6",
     "policies.p: expected a mapping, got a scalar"},
    {"tiers is a mapping", "policies:\n  p:\n    tiers: {}\n", "3:12",
     "policies.p.tiers: expected a sequence of tiers, got a mapping"},
    {"tier is a scalar", "policies:\n  p:\n    tiers:\n      - a\n", "4:9",
     "policies.p.tiers[0]: expected a mapping, got a scalar"},
    {"limit is a mapping", TIER("name: a\n        algorithm: gcra\n        limit: {a: 1}\n"),
     "6:16", "policies.p.tiers[0].limit: expected an integer, got a mapping"},
    {"limit is quoted", TIER("name: a\n        algorithm: gcra\n        limit: \"10\"\n"), "6:16",
     "policies.p.tiers[0].limit: expected an integer, got a quoted string"},
    {"window is a sequence",
     TIER("name: a\n        algorithm: gcra\n        limit: 1\n"
          "        window: [1s]\n"),
     "7:17", "policies.p.tiers[0].window: expected a duration, got a sequence"},
    {"headers unknown", "headers: ietf-10\n" POLICY_P, "1:10",
     "headers: invalid value \"ietf-10\": must be one of x-ratelimit, ietf, both, none"},
    {"policy headers unknown", "policies:\n  p:\n    headers: X-RateLimit\n    tiers:\n" TIER_A,
     "3:14", "policies.p.headers: invalid value \"X-RateLimit\": must be one of"},
    {"policy headers null", "policies:\n  p:\n    headers:\n    tiers:\n" TIER_A, "3:13",
     "policies.p.headers: expected a string, got null"},
    {"deny_cache is 1", "policies:\n  p:\n    deny_cache: 1\n    tiers:\n" TIER_A, "3:17",
     "policies.p.deny_cache: invalid value \"1\": expected true or false"},
    {"deny_cache is null", "policies:\n  p:\n    deny_cache:\n    tiers:\n" TIER_A, "3:16",
     "policies.p.deny_cache: expected true or false, got null"},
    {"shadow is yes", "policies:\n  p:\n    shadow: yes\n    tiers:\n" TIER_A, "3:13",
     "policies.p.shadow: invalid value \"yes\": expected true or false"},
    {"shadow is quoted", "policies:\n  p:\n    shadow: \"true\"\n    tiers:\n" TIER_A, "3:13",
     "policies.p.shadow: expected true or false, got a quoted string"},
    {"field name is a sequence", "policies:\n  p:\n    ? [x]\n    : 1\n", "3:7",
     "policies.p: expected a field name, got a sequence"},
    {"a NUL byte in a string", "listen: \"a\\0b\"\n" POLICY_P, "1:9",
     "listen: contains a NUL byte"},

    /* per-key overrides */
    {"overrides is a mapping", POLICY_P "    overrides: {}\n", "8:16",
     "policies.p.overrides: expected a sequence of overrides, got a mapping"},
    {"override is a scalar", OVR("      - a\n"), "9:9",
     "policies.p.overrides[0]: expected a mapping, got a scalar"},
    {"override with key and prefix", OVR("      - {key: a, prefix: b, tiers: " OT "}\n"), "9:9",
     "policies.p.overrides[0]: give key or prefix, not both"},
    {"override without key or prefix", OVR("      - {tiers: " OT "}\n"), "9:9",
     "policies.p.overrides[0]: missing key (one exact key) or prefix"},
    {"override without tiers", OVR("      - {key: a}\n"), "9:9",
     "policies.p.overrides[0]: missing required field \"tiers\""},
    {"override with empty tiers", OVR("      - {key: a, tiers: []}\n"), "9:25",
     "policies.p.overrides[0].tiers: at least one tier is required"},
    {"unknown override field", OVR("      - {key: a, limt: 1, tiers: " OT "}\n"), "9:18",
     "policies.p.overrides[0]: unknown field \"limt\" (known: key, prefix, tiers)"},
    {"empty prefix", OVR("      - {prefix: \"\", tiers: " OT "}\n"), "9:18",
     "policies.p.overrides[0].prefix: must not be empty"},
    {"empty key", OVR("      - {key: '', tiers: " OT "}\n"), "9:15",
     "policies.p.overrides[0].key: must not be empty"},
    {"key with a NUL byte", OVR("      - {key: \"a\\0b\", tiers: " OT "}\n"), "9:15",
     "policies.p.overrides[0].key: contains a NUL byte"},
    {"key is a sequence", OVR("      - {key: [a], tiers: " OT "}\n"), "9:15",
     "policies.p.overrides[0].key: expected a string, got a sequence"},
    {"invalid override tier",
     OVR("      - {key: a, tiers: [{name: o, algorithm: gcra, limit: 0, window: 1s}]}\n"), "9:60",
     "policies.p.overrides[0].tiers[0].limit: must be between 1 and"},
    {"duplicate override tier name",
     OVR("      - key: a\n"
         "        tiers:\n"
         "          - {name: o, algorithm: gcra, limit: 1, window: 1s}\n"
         "          - {name: o, algorithm: gcra, limit: 2, window: 1s}\n"),
     "12:20", "policies.p.overrides[0].tiers[1]: duplicate tier name \"o\""},
    {"duplicate override key",
     OVR("      - {key: a, tiers: " OT "}\n      - {prefix: a, tiers: " OT "}\n"
         "      - {key: a, tiers: " OT "}\n"),
     "11:15", "policies.p.overrides[2].key: duplicate key \"a\" (also overrides[0], line 9)"},
    {"duplicate override prefix",
     OVR("      - {prefix: \"vip:\", tiers: " OT "}\n      - {key: x, tiers: " OT "}\n"
         "      - {prefix: 'vip:', tiers: " OT "}\n"),
     "11:18",
     "policies.p.overrides[2].prefix: duplicate prefix \"vip:\" (also overrides[0], line 9)"},
    {"duplicate key in the second policy",
     "policies:\n  q:\n    tiers: " OT "\n  p:\n    tiers: " OT "\n    overrides:\n"
     "      - {key: a, tiers: " OT "}\n      - {key: a, tiers: " OT "}\n",
     "8:15", "policies.p.overrides[1].key: duplicate key \"a\""},

    /* missing required fields: at the mapping that lacks them */
    {"missing policies", "listen: 127.0.0.1:80\n", "1:1", "missing required field \"policies\""},
    {"missing tiers", "policies:\n  p:\n    shadow: true\n", "3:5",
     "policies.p: missing required field \"tiers\""},
    {"missing name", TIER("algorithm: gcra\n        limit: 1\n        window: 1s\n"), "4:9",
     "policies.p.tiers[0]: missing required field \"name\""},
    {"missing algorithm", TIER("name: a\n        limit: 1\n        window: 1s\n"), "4:9",
     "policies.p.tiers[0]: missing required field \"algorithm\""},
    {"missing limit", TIER("name: a\n        algorithm: gcra\n        window: 1s\n"), "4:9",
     "policies.p.tiers[0]: missing required field \"limit\""},
    {"missing window", TIER("name: a\n        algorithm: gcra\n        limit: 1\n"), "4:9",
     "policies.p.tiers[0]: missing required field \"window\""},
    {"missing precision",
     TIER("name: a\n        algorithm: sliding_window_buckets\n"
          "        limit: 1\n        window: 1m\n"),
     "4:9", "policies.p.tiers[0].precision: required for sliding_window_buckets"},
    /* concurrency: lease_timeout instead of window; no forward-auth or Envoy */
    {"concurrency without lease_timeout",
     TIER("name: a\n        algorithm: concurrency\n        limit: 2\n"), "4:9",
     "policies.p.tiers[0].lease_timeout: required for concurrency"},
    {"concurrency with a window",
     TIER("name: a\n        algorithm: concurrency\n        limit: 2\n        window: 1s\n"
          "        lease_timeout: 30s\n"),
     "7:17",
     "policies.p.tiers[0].window: not allowed for concurrency (a lease lives "
     "lease_timeout)"},
    {"lease_timeout of another algorithm",
     TIER("name: a\n        algorithm: gcra\n        limit: 2\n        window: 1s\n"
          "        lease_timeout: 30s\n"),
     "8:24",
     "policies.p.tiers[0].lease_timeout: not allowed for gcra (only concurrency takes "
     "one)"},
    {"lease_timeout too long",
     TIER("name: a\n        algorithm: concurrency\n        limit: 2\n        lease_timeout: "
          "367d\n"),
     "7:24", "policies.p.tiers[0].lease_timeout: must be between 1ms and 366d, got 367d"},
    {"concurrency limit too large",
     TIER("name: a\n        algorithm: concurrency\n        limit: 100001\n"
          "        lease_timeout: 1s\n"),
     "6:16", "policies.p.tiers[0].limit: must be between 1 and 100000 for concurrency, got 100001"},
    {"concurrency policy with a forward-auth key",
     "policies:\n  p:\n    key: \"${header:X-User}\"\n    tiers:\n"
     "      - {name: a, algorithm: concurrency, limit: 2, lease_timeout: 30s}\n",
     "3:10",
     "policies.p: key: a policy with a concurrency tier cannot serve forward-auth "
     "(/auth/<policy> has no way to release a lease)"},
    {"concurrency override with deny_status",
     "policies:\n  p:\n    deny_status: 403\n    tiers:\n" TIER_A "    overrides:\n"
     "      - {key: a, tiers: [{name: c, algorithm: concurrency, limit: 1, lease_timeout: 1s}]}\n",
     "3:18",
     "policies.p: deny_status: a policy with a concurrency tier cannot serve forward-auth "
     "(/auth/<policy> has no way to release a lease)"},
    {"concurrency policy named by an Envoy descriptor",
     "policies:\n  p:\n    tiers:\n"
     "      - {name: a, algorithm: concurrency, limit: 2, lease_timeout: 30s}\n"
     "domains:\n  - domain: d\n    descriptors:\n      - {key: k, policy: p}\n",
     "8:26",
     "domains[0].descriptors[0]: policy \"p\" has a concurrency tier, which Envoy's rate "
     "limit service cannot use (it has no way to release a lease)"},
    {"no policies", "policies: {}\n", "1:11", "policies: at least one policy is required"},
    {"no tiers", "policies:\n  p:\n    tiers: []\n", "3:12", "policies.p.tiers: at least one tier"},

    /* names */
    {"unknown algorithm", TIER("name: a\n        algorithm: fixed\n"), "5:20",
     "policies.p.tiers[0].algorithm: unknown algorithm \"fixed\" (known: fixed_window, "
     "sliding_window_log, sliding_window_counter, sliding_window_buckets, token_bucket, gcra, "
     "leaky_bucket, concurrency)"},
    {"bad policy name", "policies:\n  \"a b\":\n    tiers:\n" TIER_A, "2:3",
     "policies: invalid name \"a b\": use 1 to 64 of A-Z a-z 0-9 _ . -"},
    {"policy name too long",
     "policies:\n  p1234567890123456789012345678901234567890123456789012345678901234:\n"
     "    tiers:\n" TIER_A,
     "2:3",
     "policies: invalid name \"p1234567890123456789012345678901234567890123...\": use 1 to 64"},
    {"bad tier name", TIER("name: a:b\n"), "4:15",
     "policies.p.tiers[0].name: invalid name \"a:b\""},

    /* duplicates: libyaml does not see them, the loader must */
    {"duplicate policy", POLICY_P "  p:\n    tiers:\n" TIER_A, "8:3",
     "policies: duplicate policy \"p\""},
    {"duplicate policy out of order",
     "policies:\n  q:\n    tiers:\n" TIER_A "  p:\n    tiers:\n" TIER_A "  q:\n    tiers:\n" TIER_A,
     "14:3", "policies: duplicate policy \"q\""},
    {"duplicate tier name", POLICY_P TIER_A, "8:15",
     "policies.p.tiers[1]: duplicate tier name \"a\""},
    {"duplicate tier field", POLICY_P "        limit: 5\n", "8:9",
     "policies.p.tiers[0]: duplicate field \"limit\""},
    {"duplicate top-level field", "clock: redis\nclock: local\n" POLICY_P, "2:1",
     "duplicate field \"clock\""},
    {"duplicate redis field", "redis:\n  url: unix:/a\n  url: unix:/b\n" POLICY_P, "3:3",
     "redis: duplicate field \"url\""},

    /* zero and negative values */
    {"limit 0",
     TIER("name: a\n        algorithm: fixed_window\n        limit: 0\n        window: 1s\n"),
     "6:16", "policies.p.tiers[0].limit: must be between 1 and 1000000000 for fixed_window, got 0"},
    {"limit -5", TIER("name: a\n        algorithm: gcra\n        limit: -5\n        window: 1s\n"),
     "6:16", "policies.p.tiers[0].limit: must be between 1 and 1000000000 for gcra, got -5"},
    {"limit too large",
     TIER("name: a\n        algorithm: gcra\n        limit: 99999999999999999999\n"), "6:16",
     "policies.p.tiers[0].limit: invalid value \"99999999999999999999\": does not fit in 64 bits"},
    {"limit not a number", TIER("name: a\n        algorithm: gcra\n        limit: ten\n"), "6:16",
     "policies.p.tiers[0].limit: invalid value \"ten\": not a decimal integer"},
    {"window 0s", TIER("name: a\n        algorithm: gcra\n        limit: 1\n        window: 0s\n"),
     "7:17", "policies.p.tiers[0].window: invalid value \"0s\": must be greater than zero"},
    {"window -1s",
     TIER("name: a\n        algorithm: gcra\n        limit: 1\n        window: -1s\n"), "7:17",
     "policies.p.tiers[0].window: invalid value \"-1s\": must be greater than zero"},
    {"max_body 0", "max_body: 0\n" POLICY_P, "1:11",
     "max_body: invalid value \"0\": must be between 64 and 16777216"},
    {"max_body -1", "max_body: -1\n" POLICY_P, "1:11",
     "max_body: invalid value \"-1\": must be between"},
    {"max_body too large", "max_body: 16777217\n" POLICY_P, "1:11",
     "must be between 64 and 16777216"},
    {"timeout 0ms", "redis:\n  timeout: 0ms\n" POLICY_P, "2:12",
     "redis.timeout: invalid value \"0ms\": must be greater than zero"},
    {"burst -1 on token_bucket",
     TIER("name: a\n        algorithm: token_bucket\n        limit: 5\n"
          "        window: 1s\n        burst: -1\n"),
     "8:16", "policies.p.tiers[0].burst: must be at least 1, got -1"},
    {"burst 0 written on token_bucket",
     TIER("name: a\n        algorithm: token_bucket\n"
          "        limit: 5\n        window: 1s\n        burst: 0\n"),
     "8:16", "policies.p.tiers[0].burst: 0 is not allowed for token_bucket"},
    {"burst -1 on leaky_bucket",
     TIER("name: a\n        algorithm: leaky_bucket\n        limit: 5\n"
          "        window: 1s\n        burst: -1\n"),
     "8:16", "policies.p.tiers[0].burst: must be at least 0, got -1"},

    /* durations */
    {"window 1.5s",
     TIER("name: a\n        algorithm: gcra\n        limit: 1\n        window: 1.5s\n"), "7:17",
     "policies.p.tiers[0].window: invalid value \"1.5s\": fractions are not allowed"},
    {"window 10", TIER("name: a\n        algorithm: gcra\n        limit: 1\n        window: 10\n"),
     "7:17", "policies.p.tiers[0].window: invalid value \"10\": missing unit (ms, s, m, h or d)"},
    {"window s", TIER("name: a\n        algorithm: gcra\n        limit: 1\n        window: s\n"),
     "7:17", "policies.p.tiers[0].window: invalid value \"s\": expected <integer><unit>"},
    {"window 5x", TIER("name: a\n        algorithm: gcra\n        limit: 1\n        window: 5x\n"),
     "7:17", "invalid value \"5x\": unknown unit (use ms, s, m, h or d)"},
    {"window 367d",
     TIER("name: a\n        algorithm: fixed_window\n        limit: 1\n"
          "        window: 367d\n"),
     "7:17", "policies.p.tiers[0].window: must be between 1ms and 366d, got 367d"},
    {"timeout 61s", "redis:\n  timeout: 61s\n" POLICY_P, "2:12",
     "redis.timeout: invalid value \"61s\": too long (at most 1m)"},

    /* the algorithms' rules, pointing at the field at fault */
    {"precision does not divide window",
     TIER("name: a\n        algorithm: sliding_window_buckets\n        limit: 10\n"
          "        window: 60s\n        precision: 7s\n"),
     "8:20", "policies.p.tiers[0].precision: 7s does not divide window 1m"},
    {"too many buckets",
     TIER("name: a\n        algorithm: sliding_window_buckets\n        limit: 10\n"
          "        window: 1h\n        precision: 1s\n"),
     "8:20", "policies.p.tiers[0].precision: 1s splits window 1h into 3600 buckets (at most 1000)"},
    {"precision on fixed_window", POLICY_P "        precision: 1s\n", "8:20",
     "policies.p.tiers[0].precision: not allowed for fixed_window"},
    /* calendar tiers (POLICY_P's window on line 7) */
    {"calendar beside window", POLICY_P "        calendar: day\n", "7:17",
     "policies.p.tiers[0].window: give window or calendar, not both"},
    {"unknown calendar",
     TIER("name: a\n        algorithm: fixed_window\n        limit: 1\n"
          "        calendar: fortnight\n"),
     "7:19",
     "policies.p.tiers[0].calendar: unknown calendar \"fortnight\" (known: day, week, "
     "month, year)"},
    {"calendar on gcra",
     TIER("name: a\n        algorithm: gcra\n        limit: 1\n"
          "        calendar: month\n"),
     "7:19", "policies.p.tiers[0].calendar: only fixed_window takes one, not gcra"},
    {"unknown zone",
     TIER("name: a\n        algorithm: fixed_window\n        limit: 1\n"
          "        calendar: day\n        timezone: Nowhere/Town\n"),
     "8:19", "policies.p.tiers[0].timezone: unknown time zone \"Nowhere/Town\""},
    {"anchor_day 0",
     TIER("name: a\n        algorithm: fixed_window\n        limit: 1\n"
          "        calendar: month\n        anchor_day: 0\n"),
     "8:21", "policies.p.tiers[0].anchor_day: "},
    {"anchor_day on a week",
     TIER("name: a\n        algorithm: fixed_window\n        limit: 1\n"
          "        calendar: week\n        anchor_day: 3\n"),
     "8:21", "policies.p.tiers[0].anchor_day: only calendar: month takes one"},
    {"week_start on a month",
     TIER("name: a\n        algorithm: fixed_window\n        limit: 1\n"
          "        calendar: month\n        week_start: sunday\n"),
     "8:21", "policies.p.tiers[0].week_start: only calendar: week takes one"},
    {"unknown week_start",
     TIER("name: a\n        algorithm: fixed_window\n        limit: 1\n"
          "        calendar: week\n        week_start: caturday\n"),
     "8:21", "policies.p.tiers[0].week_start: invalid value \"caturday\": must be one of monday"},
    {"timezone without calendar", POLICY_P "        timezone: UTC\n", "8:19",
     "policies.p.tiers[0].timezone: only a calendar tier takes one"},
    {"burst on fixed_window", POLICY_P "        burst: 5\n", "8:16",
     "policies.p.tiers[0].burst: not allowed for fixed_window"},
    {"burst 0 written on fixed_window", POLICY_P "        burst: 0\n", "8:16",
     "policies.p.tiers[0].burst: 0 is not allowed for fixed_window"},
    {"sliding_window_log limit",
     TIER("name: a\n        algorithm: sliding_window_log\n"
          "        limit: 1000001\n        window: 1h\n"),
     "6:16", "policies.p.tiers[0].limit: must be between 1 and 1000000 for sliding_window_log"},
    {"capacity times window",
     TIER("name: a\n        algorithm: token_bucket\n        limit: 1\n"
          "        window: 366d\n        burst: 1000\n"),
     "8:16", "policies.p.tiers[0].burst: capacity 1000 per 366d is too large for exact arithmetic"},
    {"limit times window",
     TIER("name: a\n        algorithm: sliding_window_counter\n"
          "        limit: 1000000\n        window: 100d\n"),
     "6:16", "policies.p.tiers[0].limit: limit 1000000 per 100d is too large"},
    {"error in a later tier",
     POLICY_P "      - name: b\n        algorithm: gcra\n        limit: 0\n"
              "        window: 1s\n",
     "10:16", "policies.p.tiers[1].limit: must be between 1"},

    /* listen */
    {"listen without port", "listen: localhost\n" POLICY_P, "1:9", "listen: expected host:port"},
    {"listen port 0", "listen: 127.0.0.1:0\n" POLICY_P, "1:9",
     "listen: invalid port: must be between 1 and 65535"},
    {"listen port too large", "listen: 127.0.0.1:65536\n" POLICY_P, "1:9", "listen: invalid port"},
    {"listen port junk", "listen: 127.0.0.1:80x\n" POLICY_P, "1:9", "listen: invalid port"},
    {"listen bare IPv6", "listen: \"::1:8080\"\n" POLICY_P, "1:9",
     "listen: an IPv6 address must be in brackets"},
    {"listen bad IPv6", "listen: \"[zz]:80\"\n" POLICY_P, "1:9",
     "listen: invalid IPv6 address in brackets"},
    {"listen IPv6 without port", "listen: \"[::1]\"\n" POLICY_P, "1:9",
     "listen: expected host:port"},
    {"listen bad host", "listen: \"a b:80\"\n" POLICY_P, "1:9", "listen: invalid host"},
    {"listen empty", "listen: \"\"\n" POLICY_P, "1:9", "listen: invalid host"},
    {"listen relative unix", "listen: unix:run/rl.sock\n" POLICY_P, "1:9",
     "listen: a unix socket path must be absolute"},

    /* listen_mode, listen_group */
    {"listen_mode not octal", "listen: unix:/r.sock\nlisten_mode: \"0680\"\n" POLICY_P, "2:14",
     "listen_mode: invalid value \"0680\": must be an octal mode from 0000 to 0777"},
    {"listen_mode above 0777", "listen: unix:/r.sock\nlisten_mode: \"1777\"\n" POLICY_P, "2:14",
     "listen_mode: invalid value \"1777\""},
    {"listen_mode too long", "listen: unix:/r.sock\nlisten_mode: \"00660\"\n" POLICY_P, "2:14",
     "listen_mode: invalid value \"00660\""},
    {"listen_mode empty", "listen: unix:/r.sock\nlisten_mode: \"\"\n" POLICY_P, "2:14",
     "listen_mode: invalid value \"\""},
    {"listen_mode a sequence", "listen: unix:/r.sock\nlisten_mode: [6, 6]\n" POLICY_P, "2:14",
     "listen_mode: expected an octal mode such as \"0660\", got a sequence"},
    {"listen_group unknown", "listen: unix:/r.sock\nlisten_group: no-such-group-rl\n" POLICY_P,
     "2:15", "listen_group: unknown group \"no-such-group-rl\""},
    {"listen_group gid too large", "listen: unix:/r.sock\nlisten_group: 4294967295\n" POLICY_P,
     "2:15", "listen_group: invalid group number \"4294967295\""},
    {"listen_group null", "listen: unix:/r.sock\nlisten_group:\n" POLICY_P, "2:14",
     "listen_group: expected a group name or number, got null"},
    {"listen_mode without a unix socket", "listen_mode: \"0660\"\n" POLICY_P, "1:14",
     "listen_mode: applies only to unix sockets, and none of listen, admin_listen, grpc_listen "
     "is unix:/path"},
    {"bad grpc_listen", "grpc_listen: nowhere\n" POLICY_P, "1:14", "grpc_listen:"},
    {"grpc_max_streams 0", "grpc_max_streams: 0\n" POLICY_P, "1:19",
     "grpc_max_streams: invalid value"},
    {"listen_group without a unix socket",
     "admin_listen: 127.0.0.1:9090\nlisten_group: 0\n" POLICY_P, "2:15",
     "listen_group: applies only to unix sockets"},

    /* admin_on_listen: listen never serves the keys with admin_listen */
    {"admin_on_listen with admin_listen",
     "admin_listen: 127.0.0.1:9090\nadmin_on_listen: true\n" POLICY_P, "2:18",
     "admin_on_listen: applies only without admin_listen"},
    {"admin_on_listen not a bool", "admin_on_listen: maybe\n" POLICY_P, "1:18", "admin_on_listen:"},

    /* redis */
    {"url scheme", "redis:\n  url: http://127.0.0.1\n" POLICY_P, "2:8",
     "redis.url: must be redis[s]://[[user]:password@]host[:port][/db] or unix:/path"},
    {"url credentials without colon", "redis:\n  url: redis://user@host\n" POLICY_P, "2:8",
     "redis.url: credentials must be [user]:password@"},
    {"url port", "redis:\n  url: redis://host:0/0\n" POLICY_P, "2:8", "redis.url: invalid port"},
    {"url database", "redis:\n  url: redis://host/x\n" POLICY_P, "2:8",
     "redis.url: invalid database number"},
    {"url bad escape", "redis:\n  url: \"redis://:p%zz@host\"\n" POLICY_P, "2:8",
     "redis.url: a % in the credentials must start a %XX escape"},
    {"url cut escape", "redis:\n  url: \"redis://:p%4@host\"\n" POLICY_P, "2:8",
     "redis.url: a % in the credentials must start a %XX escape"},
    {"url empty host", "redis:\n  url: redis://:6379\n" POLICY_P, "2:8", "redis.url: invalid host"},
    {"url does not echo a password", "redis:\n  url: redis://:s3cret@ho st\n" POLICY_P, "2:8",
     "redis.url: invalid host: use a name, an IPv4 address or [IPv6]"},

    /* clock, prefix, failure_mode */
    {"bad clock", "clock: wall\n" POLICY_P, "1:8",
     "clock: invalid value \"wall\": must be one of redis, local"},
    {"bad failure_mode", "policies:\n  p:\n    failure_mode: maybe\n    tiers:\n" TIER_A, "3:19",
     "policies.p.failure_mode: invalid value \"maybe\": must be one of open, closed, local"},
    {"prefix with a brace", "redis:\n  key_prefix: \"a{b\"\n" POLICY_P, "2:15",
     "redis.key_prefix: must not contain { or }"},
    {"prefix with a space", "redis:\n  key_prefix: \"a b\"\n" POLICY_P, "2:15",
     "redis.key_prefix: must not contain whitespace"},
    {"prefix too long",
     "redis:\n  key_prefix: "
     "\"123456789012345678901234567890123456789012345678901234567890123456789012345678901234567890"
     "123456789012345678901234567890123456789\"\n" POLICY_P,
     "2:15", "redis.key_prefix: longer than 128 bytes"},

    /* forward-auth: key templates, at the byte of the template at fault */
    {"key: unknown variable", "policies:\n  p:\n    key: \"a:${host}\"\n    tiers:\n" TIER_A,
     "3:13", "policies.p.key: unknown variable \"${host}\" at byte 3"},
    {"key: unknown variable, plain", "policies:\n  p:\n    key: a${ipv6}\n    tiers:\n" TIER_A,
     "3:11", "policies.p.key: unknown variable \"${ipv6}\""},
    {"key: unclosed", "policies:\n  p:\n    key: \"${header:X-Api-Key\"\n    tiers:\n" TIER_A,
     "3:11", "policies.p.key: unclosed \"${\" at byte 1"},
    {"key: lone $", "policies:\n  p:\n    key: \"cost$5\"\n    tiers:\n" TIER_A, "3:15",
     "policies.p.key: a lone \"$\" at byte 5: write $$ for a literal $"},
    {"key: bad header name", "policies:\n  p:\n    key: \"${header:X Key}\"\n    tiers:\n" TIER_A,
     "3:21", "policies.p.key: invalid character in header name at byte 11"},
    {"key: empty header name", "policies:\n  p:\n    key: \"${header:}\"\n    tiers:\n" TIER_A,
     "3:11", "policies.p.key: unknown variable \"${header:}\""},
    {"key: empty", "policies:\n  p:\n    key: \"\"\n    tiers:\n" TIER_A, "3:11",
     "policies.p.key: the key template is empty"},
    {"key: a mapping", "policies:\n  p:\n    key: {a: 1}\n    tiers:\n" TIER_A, "3:10",
     "policies.p.key: expected a key template, got a mapping"},
    {"key: too many parts",
     "policies:\n  p:\n    key: \"a${ip}b${ip}c${ip}d${ip}e${ip}f${ip}g${ip}h${ip}i\"\n"
     "    tiers:\n" TIER_A,
     "3:59", "policies.p.key: more than 16 parts"},
    {"missing_key: bad", "policies:\n  p:\n    missing_key: drop\n    tiers:\n" TIER_A, "3:18",
     "policies.p.missing_key: invalid value \"drop\": must be one of skip, shared, reject"},
    {"policy deny_status 500", "policies:\n  p:\n    deny_status: 500\n    tiers:\n" TIER_A, "3:18",
     "policies.p.deny_status: invalid value \"500\""},
    {"deny_status 200", "deny_status: 200\n" POLICY_P, "1:14",
     "deny_status: invalid value \"200\""},
    {"deny_status quoted", "deny_status: \"429\"\n" POLICY_P, "1:14",
     "deny_status: expected an integer, got a quoted string"},
    /* trusted_proxies, at the entry at fault */
    {"trusted_proxies: not a list", "trusted_proxies: 10.0.0.0/8\n" POLICY_P, "1:18",
     "trusted_proxies: expected a sequence of addresses or networks, got a scalar"},
    {"trusted_proxies: a name", "trusted_proxies: [127.0.0.1, proxy.local]\n" POLICY_P, "1:30",
     "trusted_proxies[1]: invalid value \"proxy.local\": not an IPv4 or IPv6 address"},
    {"trusted_proxies: prefix too long", "trusted_proxies:\n  - 10.0.0.0/33\n" POLICY_P, "2:5",
     "trusted_proxies[0]: invalid value \"10.0.0.0/33\": invalid prefix length"},
    {"trusted_proxies: v6 prefix", "trusted_proxies: [\"fd00::/129\"]\n" POLICY_P, "1:19",
     "trusted_proxies[0]: invalid value \"fd00::/129\": invalid prefix length"},
    {"trusted_proxies: host bits", "trusted_proxies: [10.1.2.3/8]\n" POLICY_P, "1:19",
     "trusted_proxies[0]: invalid value \"10.1.2.3/8\": bits set past the /8 prefix"},
    {"trusted_proxies: a port", "trusted_proxies: [\"127.0.0.1:80\"]\n" POLICY_P, "1:19",
     "trusted_proxies[0]: invalid value \"127.0.0.1:80\": not an IPv4 or IPv6"},
    /* redis.tls */
    {"tls: unknown field", TLS_S("    cafile: /x\n"), "4:5",
     "redis.tls: unknown field \"cafile\" (known: ca_file, cert_file, key_file, server_name, "
     "verify)"},
    {"tls: relative ca_file", TLS_S("    ca_file: ca.crt\n"), "4:14",
     "redis.tls.ca_file: must be an absolute path"},
    {"tls: missing ca_file", TLS_S("    ca_file: /nonexistent/ca.crt\n"), "4:14",
     "redis.tls.ca_file: cannot read /nonexistent/ca.crt: No such file or directory"},
    {"tls: a directory as key_file", TLS_S("    key_file: /\n"), "4:15",
     "redis.tls.key_file: cannot read /: not a regular file"},
    {"tls: server_name with a space", TLS_S("    server_name: \"a b\"\n"), "4:18",
     "redis.tls.server_name: must be printable ASCII with no spaces"},
    {"tls: empty server_name", TLS_S("    server_name: \"\"\n"), "4:18",
     "redis.tls.server_name: must not be empty"},
    {"tls: verify not a boolean", TLS_S("    verify: yes\n"), "4:13",
     "redis.tls.verify: invalid value \"yes\": expected true or false"},
    {"tls: a scalar", "redis:\n  url: rediss://h\n  tls: on\n" POLICY_P, "3:8",
     "redis.tls: expected a mapping, got a scalar"},
    {"tls with redis://", "redis:\n  url: redis://h\n  tls:\n    verify: false\n" POLICY_P, "4:5",
     "redis.tls: applies only to rediss:// URLs, and redis.url is not one"},
    {"tls with the default url", "redis:\n  tls: {verify: true}\n" POLICY_P, "2:8",
     "redis.tls: applies only to rediss:// URLs, and redis.url is not one"},
    {"tls with unix:", "redis:\n  url: unix:/r.sock\n  tls: {verify: true}\n" POLICY_P, "3:8",
     "redis.tls: applies only to rediss:// URLs, and redis.url is not one"},
    {"tls with redis:// seeds",
     "redis:\n  cluster: [\"redis://a:1\"]\n  tls: {verify: true}\n" POLICY_P, "3:8",
     "redis.tls: applies only to rediss:// URLs, and redis.cluster is not one"},
    {"rediss url with a bad port", "redis:\n  url: rediss://h:x\n" POLICY_P, "2:8",
     "redis.url: invalid port"},

    /* tls, admin_tls, grpc_tls (readable files that are no certificates:
     * the rules between the fields come first) */
    {"listen tls: no key_file", "tls:\n  cert_file: /etc/passwd\n" POLICY_P, "2:3",
     "tls: missing required field \"key_file\""},
    {"listen tls: require without a CA",
     "tls:\n  cert_file: /etc/passwd\n  key_file: /etc/passwd\n  client_auth: require\n" POLICY_P,
     "4:16", "tls.client_auth: require needs client_ca_file"},
    {"listen tls: request without a CA",
     "tls:\n  cert_file: /etc/passwd\n  key_file: /etc/passwd\n  client_auth: request\n" POLICY_P,
     "4:16", "tls.client_auth: request needs client_ca_file"},
    {"listen tls: a CA with client_auth none",
     "tls:\n  cert_file: /etc/passwd\n  key_file: /etc/passwd\n  client_ca_file: "
     "/etc/passwd\n" POLICY_P,
     "4:19", "tls.client_ca_file: does nothing with client_auth: none"},
    {"listen tls: unknown client_auth",
     "tls:\n  cert_file: /etc/passwd\n  key_file: /etc/passwd\n  client_auth: optional\n" POLICY_P,
     "4:16", "tls.client_auth: invalid value \"optional\""},
    {"listen tls: missing cert_file",
     "tls:\n  cert_file: /nonexistent.pem\n  key_file: /x\n" POLICY_P, "2:14",
     "tls.cert_file: cannot read /nonexistent.pem: No such file or directory"},
    {"listen tls: not a certificate",
     "tls:\n  cert_file: /etc/passwd\n  key_file: /etc/passwd\n" POLICY_P, "2:3",
     "tls: cert_file /etc/passwd: error:"},
    {"admin_tls without admin_listen",
     "admin_tls:\n  cert_file: /etc/passwd\n  key_file: /etc/passwd\n" POLICY_P, "2:3",
     "admin_tls: applies only with admin_listen, which is not set"},
    {"grpc_tls without grpc_listen",
     "grpc_tls:\n  cert_file: /etc/passwd\n  key_file: /etc/passwd\n" POLICY_P, "2:3",
     "grpc_tls: applies only with grpc_listen, which is not set"},

    /* redis.sentinel */
    {"sentinel: no master_name", SENTINEL("    addresses: [\"127.0.0.1:26379\"]\n"), "3:5",
     "redis.sentinel: missing required field \"master_name\""},
    {"sentinel: no addresses", SENTINEL("    master_name: m\n"), "3:5",
     "redis.sentinel: missing required field \"addresses\""},
    {"sentinel: empty addresses", SENTINEL("    addresses: []\n    master_name: m\n"), "3:16",
     "redis.sentinel.addresses: must list 1 to 16 sentinel addresses (host:port)"},
    {"sentinel: addresses a scalar", SENTINEL("    addresses: h:1\n    master_name: m\n"), "3:16",
     "redis.sentinel.addresses: expected a sequence of sentinel addresses (host:port), got a "
     "scalar"},
    {"sentinel: address without port", SENTINEL("    addresses: [\"h:1\", \"h\"]\n"), "3:24",
     "redis.sentinel.addresses[1]: expected host:port"},
    {"sentinel: IPv6 without brackets", SENTINEL("    addresses: [\"::1:26379\"]\n"), "3:17",
     "redis.sentinel.addresses[0]: an IPv6 address must be in brackets"},
    {"sentinel: bad port", SENTINEL("    addresses: [\"[::1]:0\"]\n"), "3:17",
     "redis.sentinel.addresses[0]: invalid port"},
    {"sentinel: null address", SENTINEL("    addresses: [~]\n"), "3:17",
     "redis.sentinel.addresses[0]: expected a string, got null"},
    {"sentinel: master_name with a space",
     SENTINEL("    addresses: [\"h:1\"]\n    master_name: \"my master\"\n"), "4:18",
     "redis.sentinel.master_name: must be printable ASCII with no spaces"},
    {"sentinel: master_name control byte",
     SENTINEL("    addresses: [\"h:1\"]\n    master_name: \"m\\tx\"\n"), "4:18",
     "redis.sentinel.master_name: must be printable ASCII with no spaces"},
    {"sentinel: empty password",
     SENTINEL("    addresses: [\"h:1\"]\n    master_name: m\n    password: \"\"\n"), "5:15",
     "redis.sentinel.password: must not be empty"},
    {"sentinel: password a sequence",
     SENTINEL("    addresses: [\"h:1\"]\n    master_name: m\n    password: [a]\n"), "5:15",
     "redis.sentinel.password: expected a string or null, got a sequence"},
    {"sentinel with a unix: url",
     "redis:\n  url: unix:/r.sock\n  sentinel: {addresses: [\"h:1\"], master_name: m}\n" POLICY_P,
     "2:8", "redis.url: must be redis:// or rediss:// with redis.sentinel"},
    {"sentinel and cluster",
     "redis:\n  sentinel: {addresses: [\"h:1\"], master_name: m}\n  cluster: "
     "[\"redis://a:1\"]\n" POLICY_P,
     "3:12", "redis.cluster: give sentinel or cluster, not both"},

    /* redis.cluster */
    {"cluster: empty", "redis:\n  cluster: []\n" POLICY_P, "2:12",
     "redis.cluster: must list 1 to 64 seed URLs"},
    {"cluster: a scalar", "redis:\n  cluster: redis://h\n" POLICY_P, "2:12",
     "redis.cluster: expected a sequence of seed URLs, got a scalar"},
    {"cluster: a unix: seed", "redis:\n  cluster: [\"unix:/r.sock\"]\n" POLICY_P, "2:13",
     "redis.cluster[0]: a cluster seed must be redis:// or rediss://, not unix:"},
    {"cluster: db 1", "redis:\n  cluster: [\"redis://a:1/0\", \"redis://b:2/1\"]\n" POLICY_P,
     "2:30", "redis.cluster[1]: Redis Cluster has only database 0"},
    {"cluster: bad scheme", "redis:\n  cluster: [\"http://a\"]\n" POLICY_P, "2:13",
     "redis.cluster[0]: must be redis[s]://"},
    {"cluster: a password is not echoed", "redis:\n  cluster: [\"redis://:s3cret@a b\"]\n" POLICY_P,
     "2:13", "redis.cluster[0]: invalid host"},
    {"cluster: mixed schemes", "redis:\n  cluster: [\"redis://a:1\", \"rediss://b:2\"]\n" POLICY_P,
     "2:28", "redis.cluster[1]: every seed must use the scheme of redis.cluster[0] (redis://)"},
    {"cluster and url", "redis:\n  url: redis://a\n  cluster: [\"redis://a:1\"]\n" POLICY_P, "2:8",
     "redis.url: not used with redis.cluster"},
    {"cluster: 65 seeds", "redis:\n  cluster: [" SEEDS64 ", \"redis://a:1\"]\n" POLICY_P, "2:12",
     "redis.cluster: must list 1 to 64 seed URLs"},

    {"trusted_proxies: empty prefix", "trusted_proxies: [10.0.0.0/]\n" POLICY_P, "1:19",
     "trusted_proxies[0]: invalid value \"10.0.0.0/\": invalid prefix length"},
    {"trusted_proxies: null entry", "trusted_proxies: [~]\n" POLICY_P, "1:19",
     "trusted_proxies[0]: expected an address, a network or unix, got null"},
};

static void test_errors(void)
{
    int leaked = 0;
    size_t i;

    for (i = 0; i < sizeof error_cases / sizeof error_cases[0]; i++) {
        const struct error_case *e = &error_cases[i];
        char err[1024] = "", prefix[64];
        struct config *c = config_load_string("t.yaml", e->yaml, strlen(e->yaml), err, sizeof err);

        snprintf(prefix, sizeof prefix, "t.yaml:%s: ", e->at);
        if (!ok(c == NULL && strncmp(err, prefix, strlen(prefix)) == 0 && strstr(err, e->msg), "%s",
                e->what))
            printf("#   got  \"%s\"\n#   want \"%s%s...\"\n", err, prefix, e->msg);
        leaked += strstr(err, "s3cret") != NULL;
        config_unref(c);
    }
    is_int(leaked, 0, "no message quotes a Redis password");
}

/* The top level's known fields, in the order the unknown-field message
 * lists them (error_cases has the whole list). */
#define TOP_KNOWN                                                                                  \
    "listen, listen_mode, listen_group, backend, workers, redis, clock, max_body, log_level, "     \
    "access_log, admin_listen, admin_on_listen, grpc_listen, grpc_max_streams, watch, "            \
    "max_inflight, overload, max_connections, idle_timeout, request_timeout, local_max_keys, "     \
    "state_file, state_interval, deny_cache_max_keys, headers, auth_token_file, trusted_proxies, " \
    "deny_status, policies, "                                                                      \
    "domains, envoy_config, envoy_merge_domains, envoy_shadow_mode, envoy_quota_mode, "            \
    "envoy_calendar_units, tls, admin_tls, grpc_tls"
#define TOP_NKNOWN 38
#define FIELDS_PAGE "ratelimitd.yaml(5) or docs/configuration.md)"

/* How many names a ", "-separated prefix of TOP_KNOWN holds; 0 if names
 * (len bytes) is not one, ending at a name's end. */
static int top_known_prefix(const char *names, size_t len)
{
    int n = 1;

    if (len == 0 || strncmp(names, TOP_KNOWN, len) != 0 || TOP_KNOWN[len] != ',')
        return 0;
    for (size_t i = 0; i < len; i++)
        n += names[i] == ',';
    return n;
}

/* An unknown field's list of known ones, in a buffer too small for it
 * (main's is 512 bytes; the file's name comes first), ends whole: the
 * names that fit, in order, then how many more and where every field is
 * listed. */
static void test_unknown_field_bounded(void)
{
    static const struct {
        const char *name; /* the file: its length takes room */
        size_t errlen;
    } cases[] = {
        {"/etc/ratelimitd.yaml", 512},
        {"/var/lib/a/rather/long/path/to/where/the/policy/file/lives/ratelimitd.yaml", 512},
        {"t.yaml", 200},
    };
    const char *yaml = "listn: x\n" POLICY_P;

    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char err[1024] = "", head[1024];
        struct config *c =
            config_load_string(cases[i].name, yaml, strlen(yaml), err, cases[i].errlen);
        const char *list = NULL, *and = NULL;
        int shown = 0, more = 0, end = 0;

        snprintf(head, sizeof head, "%s:1:1: unknown field \"listn\" (known: ", cases[i].name);
        if (strncmp(err, head, strlen(head)) == 0)
            list = err + strlen(head);
        if (list && (and = strstr(list, " and ")) != NULL)
            shown = top_known_prefix(list, (size_t)(and-list));
        if (and&&sscanf(and, " and %d more in %n", &more, &end) == 1 && end > 0)
            end = strcmp(and+end, FIELDS_PAGE) == 0;
        if (!ok(c == NULL && shown > 0 && shown + more == TOP_NKNOWN && end,
                "%s in %zu bytes: %d names whole, then how many more and where", cases[i].name,
                cases[i].errlen, shown))
            printf("#   got \"%s\"\n", err);
        config_unref(c);
    }
}

/* The 17th tier is refused, at the 17th tier. */
static void test_too_many_tiers(void)
{
    char yaml[8192] = "policies:\n  p:\n    tiers:\n", err[1024] = "";
    struct config *c;
    int i;

    for (i = 0; i < POLICY_MAX_TIERS + 1; i++) {
        size_t n = strlen(yaml);
        snprintf(yaml + n, sizeof yaml - n,
                 "      - {name: t%d, algorithm: fixed_window, limit: 1, window: 1s}\n", i);
    }
    c = config_load_string("t.yaml", yaml, strlen(yaml), err, sizeof err);
    ok(c == NULL, "17 tiers are refused");
    is_str(err, "t.yaml:20:9: policies.p.tiers: at most 16 tiers are allowed", "at the 17th tier");
    config_unref(c);

    yaml[strlen(yaml) -
         strlen("      - {name: t16, algorithm: fixed_window, limit: 1, window: 1s}\n")] = '\0';
    c = config_load_string("t.yaml", yaml, strlen(yaml), err, sizeof err);
    ok(c != NULL && c->npolicies == 1 && c->policies[0].ntiers == POLICY_MAX_TIERS,
       "16 tiers are fine");
    config_unref(c);
}

static const char full_yaml[] =
    "listen: \"[::1]:9000\"\n"
    "redis:\n"
    "  url: \"redis://user:p@ss/w@redis.internal:6380/2\"\n"
    "  timeout: 250ms\n"
    "  key_prefix: 'app:rl:'\n"
    "clock: local\n"
    "max_body: 65536\n"
    "log_level: debug\n"
    "access_log: true\n"
    "admin_listen: 127.0.0.1:9090\n"
    "watch: true\n"
    "max_inflight: 500\n"
    "overload: reject\n"
    "max_connections: 100\n"
    "idle_timeout: 5s\n"
    "local_max_keys: 500\n"
    "deny_cache_max_keys: 0\n"
    "policies:\n"
    "  zeta:\n"
    "    failure_mode: closed\n"
    "    shadow: true\n"
    "    deny_cache: false\n"
    "    tiers:\n"
    "      - name: t1\n"
    "        algorithm: sliding_window_buckets\n"
    "        limit: 300\n"
    "        window: 1m\n"
    "        precision: 1s\n"
    "      - {name: t2, algorithm: leaky_bucket, limit: 50, window: 1s, burst: 0}\n"
    "      - {name: t3, algorithm: token_bucket, limit: 5, window: 1s}\n"
    "  alpha:\n"
    "    shadow: false\n"
    "    deny_cache: true\n"
    "    failure_mode: open\n"
    "    tiers: &shared\n"
    "      - name: only\n"
    "        algorithm: gcra\n"
    "        limit: 10\n"
    "        window: 1m\n"
    "        burst: 3\n"
    "  mid.dle-1:\n"
    "    tiers: *shared\n";

static void test_full(void)
{
    char err[1024] = "";
    struct config *c =
        config_load_string("full.yaml", full_yaml, strlen(full_yaml), err, sizeof err);
    const struct policy *p;
    const struct tier *t;

    if (!ok(c != NULL, "a full file loads"))
        printf("#   %s\n", err);
    if (c == NULL)
        return;
    is_int(c->refcount, 1, "one reference");
    is_str(c->path, "full.yaml", "path");
    is_str(c->listen, "[::1]:9000", "listen");
    is_str(c->redis_url, "redis://user:p@ss/w@redis.internal:6380/2", "redis.url");
    is_int(c->redis_timeout_us, 250000, "redis.timeout");
    is_str(c->key_prefix, "app:rl:", "redis.key_prefix");
    is_int(c->clock, CLOCK_SOURCE_LOCAL, "clock");
    is_int(c->max_body, 65536, "max_body");
    is_int(c->log_level, LOG_LVL_DEBUG, "log_level");
    is_int(c->access_log, 1, "access_log");
    is_str(c->admin_listen, "127.0.0.1:9090", "admin_listen");
    is_int(c->watch, 1, "watch");
    is_int(c->max_inflight, 500, "max_inflight");
    is_int(c->overload, OVERLOAD_REJECT, "overload");
    is_int(c->max_connections, 100, "max_connections");
    is_int(c->idle_timeout_us, 5000000, "idle_timeout");
    is_int(c->local_max_keys, 500, "local_max_keys");
    is_int(c->deny_cache_max_keys, 0, "deny_cache_max_keys 0 (no cache)");

    is_int(c->npolicies, 3, "three policies");
    is_str(c->policies[0].name, "alpha", "sorted: alpha");
    is_str(c->policies[1].name, "mid.dle-1", "sorted: mid.dle-1");
    is_str(c->policies[2].name, "zeta", "sorted: zeta");

    p = config_find_policy(c, "zeta");
    ok(p == &c->policies[2], "find zeta");
    is_int(p->failure_mode, FAILURE_CLOSED, "zeta failure_mode");
    is_int(p->shadow, 1, "zeta shadow");
    is_int(p->deny_cache, 0, "zeta deny_cache false");
    is_int(p->ntiers, 3, "zeta has three tiers");
    t = &p->tiers[0];
    is_str(t->name, "t1", "t1 name");
    is_int(t->algorithm, ALG_SLIDING_WINDOW_BUCKETS, "t1 algorithm");
    is_int(t->limit, 300, "t1 limit");
    is_int(t->window_us, 60000000, "t1 window");
    is_int(t->precision_us, 1000000, "t1 precision");
    is_int(t->burst, 0, "t1 burst");
    t = &p->tiers[1];
    is_str(t->name, "t2", "t2 name (flow mapping)");
    is_int(t->algorithm, ALG_LEAKY_BUCKET, "t2 algorithm");
    is_int(t->burst, 0, "t2 burst 0 is allowed for leaky_bucket");
    is_int(policy_tier_capacity(t), 1, "t2 capacity");
    t = &p->tiers[2];
    is_int(t->algorithm, ALG_TOKEN_BUCKET, "t3 algorithm");
    is_int(policy_tier_capacity(t), 5, "t3 capacity defaults to limit");

    p = config_find_policy(c, "alpha");
    ok(p == &c->policies[0], "find alpha");
    is_int(p->failure_mode, FAILURE_OPEN, "alpha failure_mode");
    is_int(p->shadow, 0, "alpha shadow");
    is_int(p->deny_cache, 1, "alpha deny_cache true");
    is_int(p->ntiers, 1, "alpha has one tier");
    is_int(p->tiers[0].algorithm, ALG_GCRA, "alpha algorithm");
    is_int(p->tiers[0].burst, 3, "alpha burst");

    p = config_find_policy(c, "mid.dle-1");
    ok(p == &c->policies[1], "find mid.dle-1");
    ok(p->ntiers == 1 && strcmp(p->tiers[0].name, "only") == 0 && p->tiers[0].limit == 10,
       "an alias shares the tiers");
    is_int(p->deny_cache, 1, "mid.dle-1 deny_cache defaults to true");

    ok(config_find_policy(c, "") == NULL, "no policy \"\"");
    ok(config_find_policy(c, "aaa") == NULL, "no policy before the first");
    ok(config_find_policy(c, "zzz") == NULL, "no policy after the last");
    ok(config_find_policy(c, "mid") == NULL, "no policy between");
    ok(config_find_policy(c, NULL) == NULL, "NULL name");
    ok(config_find_policy(NULL, "zeta") == NULL, "NULL config");

    ok(config_ref(c) == c, "config_ref returns the snapshot");
    is_int(c->refcount, 2, "two references");
    config_unref(c);
    is_int(c->refcount, 1, "one reference again");
    config_unref(c); /* frees: valgrind says whether it did */
    config_unref(NULL);
    ok(config_ref(NULL) == NULL, "config_ref(NULL) is NULL");
}

static void test_defaults(void)
{
    static const char yaml[] = POLICY_P;
    char err[1024] = "";
    struct config *c = config_load_string("min.yaml", yaml, strlen(yaml), err, sizeof err);
    const struct tier *t;

    if (!ok(c != NULL, "a minimal file loads"))
        printf("#   %s\n", err);
    if (c == NULL)
        return;
    is_str(c->listen, CONFIG_DEFAULT_LISTEN, "default listen");
    is_str(c->redis_url, CONFIG_DEFAULT_REDIS_URL, "default redis.url");
    is_int(c->redis_timeout_us, CONFIG_DEFAULT_TIMEOUT_US, "default redis.timeout");
    is_str(c->key_prefix, CONFIG_DEFAULT_PREFIX, "default redis.key_prefix");
    is_int(c->clock, CLOCK_SOURCE_REDIS, "default clock");
    is_int(c->max_body, CONFIG_DEFAULT_MAX_BODY, "default max_body");
    is_int(c->log_level, LOG_LVL_INFO, "default log_level");
    ok(!c->access_log && !c->watch && !c->admin_listen && !c->auth_token_file,
       "access_log, watch off; no admin_listen, no auth_token_file by default");
    is_int(c->max_inflight, CONFIG_DEFAULT_MAX_INFLIGHT, "default max_inflight");
    is_int(c->overload, OVERLOAD_FAILURE_MODE, "default overload");
    is_int(c->max_connections, CONFIG_DEFAULT_MAX_CONNECTIONS, "default max_connections");
    is_int(c->idle_timeout_us, CONFIG_DEFAULT_IDLE_TIMEOUT_US, "default idle_timeout");
    is_int(c->local_max_keys, CONFIG_DEFAULT_LOCAL_MAX_KEYS, "default local_max_keys");
    is_int(c->deny_cache_max_keys, 100000, "default deny_cache_max_keys");
    ok(c->listen_mode == -1 && c->listen_gid == -1 && c->listen_group == NULL,
       "no listen_mode, no listen_group by default: bind's mode and group stay");
    ok(c->envoy_config == NULL && c->ndomains == 0 && c->domains == NULL,
       "no envoy_config, no domains by default");
    is_int(c->policies[0].failure_mode, FAILURE_OPEN, "default failure_mode");
    is_int(c->policies[0].shadow, 0, "default shadow");
    is_int(c->policies[0].deny_cache, 1, "default deny_cache");
    is_int(c->headers, HEADERS_X_RATELIMIT, "default headers");
    is_int(c->policies[0].headers, HEADERS_X_RATELIMIT, "a policy's headers default to it");
    is_str(c->policies[0].key.source, "${ip}", "default key: the client address");
    ok(c->policies[0].key.nparts == 1 && c->policies[0].key.parts[0].kind == KEY_PART_IP,
       "the default key compiles to ${ip}");
    is_int(c->policies[0].missing_key, MISSING_KEY_SKIP, "default missing_key");
    is_int(c->deny_status, 429, "default deny_status");
    is_int(c->policies[0].deny_status, 429, "a policy's deny_status defaults to the top-level one");
    ok(c->trusted_proxies.n == 0 && !c->trusted_proxies.unix_trusted, "no trusted proxies");
    t = &c->policies[0].tiers[0];
    ok(t->burst == 0 && t->precision_us == 0, "default burst and precision");
    ok(strcmp(t->name, "a") == 0 && t->algorithm == ALG_FIXED_WINDOW && t->limit == 10 &&
           t->window_us == 1000000,
       "tier values");
    config_unref(c);
}

/* head (top-level fields) followed by the policy p. */
static struct config *load_with_policy(const char *head, char *err, size_t errlen)
{
    char yaml[1024];

    snprintf(yaml, sizeof yaml, "%s%s", head, POLICY_P);
    return config_load_string("t.yaml", yaml, strlen(yaml), err, errlen);
}

/* redis.module: auto by default, each word to its mode. */
static void test_redis_module(void)
{
    static const struct {
        const char *head;
        enum redis_module_mode want;
    } cases[] = {
        {"", REDIS_MODULE_AUTO},
        {"redis:\n  module: auto\n", REDIS_MODULE_AUTO},
        {"redis:\n  module: on\n", REDIS_MODULE_ON},
        {"redis:\n  module: off\n", REDIS_MODULE_OFF},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char err[1024] = "";
        struct config *c = load_with_policy(cases[i].head, err, sizeof err);
        if (ok(c != NULL, "redis.module case %zu loads (%s)", i, err))
            is_int(c->redis_module, cases[i].want, "redis.module case %zu: mode %s", i,
                   config_redis_module_name(cases[i].want));
        config_unref(c);
    }
}

/* Writes "x" to dir/name; its path into out. */
static int make_file(const char *dir, const char *name, char *out, size_t outlen)
{
    snprintf(out, outlen, "%s/%s", dir, name);
    FILE *f = fopen(out, "w");
    return f != NULL && fputs("x\n", f) >= 0 && fclose(f) == 0 ? 0 : -1;
}

/* redis.tls: the files are only checked readable at load (their content is
 * redis_tls.c's business); a certificate needs its key and the reverse, at
 * the field given; verify defaults to true; the scheme turns TLS on. */
static void test_redis_tls(void)
{
    char dir[] = "/tmp/rl-tls-XXXXXX", ca[64], crt[64], key[64], yaml[1024], err[1024];
    struct config *c;

    if (!ok(mkdtemp(dir) != NULL, "temp dir for TLS files"))
        return;
    if (!ok(make_file(dir, "ca.crt", ca, sizeof ca) == 0 &&
                make_file(dir, "c.crt", crt, sizeof crt) == 0 &&
                make_file(dir, "c.key", key, sizeof key) == 0,
            "TLS files written"))
        goto out;

    snprintf(yaml, sizeof yaml,
             "redis:\n  url: \"rediss://:pw@redis.internal:6380/1\"\n  tls:\n    ca_file: %s\n"
             "    cert_file: %s\n    key_file: %s\n    server_name: redis.internal\n"
             "    verify: false\n" POLICY_P,
             ca, crt, key);
    c = config_load_string("t.yaml", yaml, strlen(yaml), err, sizeof err);
    if (ok(c != NULL, "a full redis.tls loads") || (printf("#   %s\n", err), 0)) {
        const struct redis_tls_config *t = &c->redis_tls;
        ok(c->redis_tls_on && strcmp(t->ca_file, ca) == 0 && strcmp(t->cert_file, crt) == 0 &&
               strcmp(t->key_file, key) == 0 && strcmp(t->server_name, "redis.internal") == 0 &&
               t->verify == 0,
           "redis.tls values");
    }
    config_unref(c);

    snprintf(yaml, sizeof yaml, "redis:\n  url: rediss://h\n  tls:\n    cert_file: %s\n" POLICY_P,
             crt);
    c = config_load_string("t.yaml", yaml, strlen(yaml), err, sizeof err);
    ok(c == NULL && strncmp(err, "t.yaml:4:16: redis.tls.cert_file: needs key_file", 48) == 0,
       "cert_file without key_file: %s", err);
    config_unref(c);

    snprintf(yaml, sizeof yaml,
             "redis:\n  url: rediss://h\n  tls:\n    ca_file: %s\n    key_file: %s\n" POLICY_P, ca,
             key);
    c = config_load_string("t.yaml", yaml, strlen(yaml), err, sizeof err);
    ok(c == NULL && strncmp(err, "t.yaml:5:15: redis.tls.key_file: needs cert_file", 48) == 0,
       "key_file without cert_file: %s", err);
    config_unref(c);

    /* Unreadable: only meaningful when not root (root reads anything). */
    if (geteuid() != 0 && chmod(key, 0) == 0) {
        snprintf(yaml, sizeof yaml,
                 "redis:\n  url: rediss://h\n  tls:\n    key_file: %s\n" POLICY_P, key);
        c = config_load_string("t.yaml", yaml, strlen(yaml), err, sizeof err);
        ok(c == NULL && strstr(err, "t.yaml:4:15: redis.tls.key_file: cannot read ") == err &&
               strstr(err, "Permission denied"),
           "an unreadable key_file: %s", err);
        config_unref(c);
    } else {
        ok(1, "# SKIP an unreadable key_file: running as root");
    }
out:
    unlink(ca);
    unlink(crt);
    unlink(key);
    rmdir(dir);
}

/* What each mode loads into, and the defaults of the new fields. */
static void test_redis_modes(void)
{
    char err[1024] = "";
    struct config *c = load_with_policy("", err, sizeof err);

    if (ok(c != NULL, "a file without redis modes loads"))
        ok(!c->redis_tls_on && c->redis_tls.verify == 1 && !c->redis_tls.ca_file &&
               !c->redis_tls.cert_file && !c->redis_tls.key_file && !c->redis_tls.server_name &&
               c->redis_sentinel.naddresses == 0 && !c->redis_sentinel.addresses &&
               !c->redis_sentinel.master_name && !c->redis_sentinel.password &&
               c->redis_ncluster == 0 && !c->redis_cluster,
           "defaults: plain TCP, verify on, no sentinel, no cluster");
    config_unref(c);

    c = load_with_policy("redis:\n  url: \"rediss://[::1]:6380\"\n", err, sizeof err);
    ok(c != NULL && c->redis_tls_on && c->redis_tls.verify == 1,
       "rediss:// without a tls section: TLS on, verified");
    config_unref(c);

    c = load_with_policy(
        "redis:\n  url: \"redis://:pw@x/2\"\n  sentinel:\n"
        "    addresses: [\"10.0.0.1:26379\", \"[::1]:26380\", \"s3.local:26381\"]\n"
        "    master_name: my-master.1\n    password: null\n",
        err, sizeof err);
    if (ok(c != NULL, "sentinel mode loads") || (printf("#   %s\n", err), 0)) {
        const struct redis_sentinel_config *s = &c->redis_sentinel;
        ok(s->naddresses == 3 && strcmp(s->addresses[0], "10.0.0.1:26379") == 0 &&
               strcmp(s->addresses[1], "[::1]:26380") == 0 &&
               strcmp(s->addresses[2], "s3.local:26381") == 0 &&
               strcmp(s->master_name, "my-master.1") == 0 && s->password == NULL &&
               !c->redis_tls_on,
           "sentinel values; password: null is none");
    }
    config_unref(c);

    c = load_with_policy("redis:\n  url: rediss://x\n  sentinel: {addresses: [\"h:1\"], "
                         "master_name: m, password: \"s p\"}\n",
                         err, sizeof err);
    ok(c != NULL && strcmp(c->redis_sentinel.password, "s p") == 0 && c->redis_tls_on,
       "sentinel password and rediss://");
    config_unref(c);

    c = load_with_policy("redis:\n  cluster:\n    - \"rediss://u:p@10.0.0.1:7000\"\n"
                         "    - rediss://10.0.0.2:7001/0\n    - \"rediss://[::1]\"\n"
                         "  tls: {verify: false}\n",
                         err, sizeof err);
    if (ok(c != NULL, "cluster mode loads") || (printf("#   %s\n", err), 0))
        ok(c->redis_ncluster == 3 &&
               strcmp(c->redis_cluster[0], "rediss://u:p@10.0.0.1:7000") == 0 &&
               strcmp(c->redis_cluster[2], "rediss://[::1]") == 0 && c->redis_tls_on &&
               !c->redis_tls.verify && strcmp(c->redis_url, CONFIG_DEFAULT_REDIS_URL) == 0,
           "cluster seeds in order; TLS from their scheme");
    config_unref(c);

    c = load_with_policy("redis:\n  cluster: [\"redis://a:1\"]\n", err, sizeof err);
    ok(c != NULL && c->redis_ncluster == 1 && !c->redis_tls_on, "one plain seed");
    config_unref(c);
}

/* Values at the edge of what is valid. */
static void test_edges(void)
{
    static const struct {
        const char *what, *yaml;
    } cases[] = {
        {"unix listen and redis",
         "listen: unix:/run/rl.sock\nredis:\n  url: unix:/run/redis.sock\n"},
        {"IPv6 redis without port", "redis:\n  url: \"redis://[::1]/3\"\n"},
        {"redis password only", "redis:\n  url: \"redis://:secret@localhost\"\n"},
        {"redis escaped password", "redis:\n  url: \"redis://u:p%40ss%2f@localhost:1/\"\n"},
        {"empty prefix", "redis:\n  key_prefix: \"\"\n"},
        {"128-byte prefix",
         "redis:\n  key_prefix: "
         "\"1234567890123456789012345678901234567890123456789012345678901234567890123456789012345"
         "6789012345678901234567890123456789012345678\"\n"},
        {"bounds", "max_body: 64\nredis:\n  timeout: 60s\n"},
        {"max bounds", "max_body: 16777216\nredis:\n  timeout: 1ms\n"},
        {"hostname listen", "listen: my-host_1.example:65535\n"},
        {"empty redis mapping", "redis: {}\n"},
    };
    size_t i;

    for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char err[1024] = "";
        struct config *c = load_with_policy(cases[i].yaml, err, sizeof err);

        if (!ok(c != NULL, "valid: %s", cases[i].what))
            printf("#   %s\n", err);
        config_unref(c);
    }
}

/* A policy without headers takes the top-level mode, wherever in the file
 * that is written (here after the policies); one with its own keeps it. */
static void test_headers_inherit(void)
{
    static const char yaml[] = "policies:\n"
                               "  a: {tiers: [{name: t, algorithm: gcra, limit: 1, window: 1s}]}\n"
                               "  b:\n"
                               "    headers: none\n"
                               "    tiers: [{name: t, algorithm: gcra, limit: 1, window: 1s}]\n"
                               "headers: both\n";
    char err[1024] = "";
    struct config *c = config_load_string("h.yaml", yaml, strlen(yaml), err, sizeof err);
    if (!ok(c != NULL, "headers file loads"))
        printf("#   %s\n", err);
    if (c == NULL)
        return;
    is_int(c->headers, HEADERS_BOTH, "top-level headers: both");
    is_int(config_find_policy(c, "a")->headers, HEADERS_BOTH,
           "a policy without headers inherits the top-level mode written after it");
    is_int(config_find_policy(c, "b")->headers, HEADERS_NONE, "a policy's own mode wins");
    config_unref(c);
}

/* listen_mode and listen_group as stored: octal, a gid from a name or a
 * number, on either listener. */
static void test_listen_perm(void)
{
    static const struct {
        const char *what, *yaml;
        int64_t mode, gid;
    } cases[] = {
        {"quoted 0660", "listen: unix:/r.sock\nlisten_mode: \"0660\"\n", 0660, -1},
        {"plain 0600", "listen: unix:/r.sock\nlisten_mode: 0600\n", 0600, -1},
        {"three digits 777", "listen: unix:/r.sock\nlisten_mode: \"777\"\n", 0777, -1},
        {"0000", "listen: unix:/r.sock\nlisten_mode: \"0000\"\n", 0, -1},
        {"group root by name", "listen: unix:/r.sock\nlisten_group: root\n", -1, 0},
        {"a gid with no name", "listen: unix:/r.sock\nlisten_group: 4294967294\n", -1,
         4294967294LL},
        {"on admin_listen alone",
         "admin_listen: unix:/a.sock\nlisten_mode: \"0660\"\nlisten_group: \"12\"\n", 0660, 12},
    };
    size_t i;

    for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char err[1024] = "";
        struct config *c = load_with_policy(cases[i].yaml, err, sizeof err);

        if (!ok(c != NULL && c->listen_mode == cases[i].mode && c->listen_gid == cases[i].gid,
                "listen_mode, listen_group: %s", cases[i].what))
            printf("#   %s\n", c ? "wrong values" : err);
        config_unref(c);
    }
}

static void test_example(void)
{
    const char *dir = getenv("RL_SRCDIR");
    char path[4096], err[1024] = "";
    struct config *c;
    const struct policy *p;
    int seen[ALG__COUNT] = {0}, all = 1;
    size_t i, j;

    snprintf(path, sizeof path, "%s/conf/ratelimitd.yaml", dir ? dir : ".");
    c = config_load(path, err, sizeof err);
    if (!ok(c != NULL, "conf/ratelimitd.yaml loads"))
        printf("#   %s\n", err);
    if (c == NULL)
        return;
    is_str(c->listen, "127.0.0.1:8080", "example listen");
    is_str(c->redis_url, "redis://127.0.0.1:6379/0", "example redis.url");
    is_int(c->redis_timeout_us, 50000, "example redis.timeout");
    is_str(c->key_prefix, "rl:", "example key_prefix");
    is_int(c->clock, CLOCK_SOURCE_REDIS, "example clock");
    is_int(c->max_body, 16384, "example max_body");
    p = config_find_policy(c, "login");
    ok(p != NULL && p->failure_mode == FAILURE_CLOSED && !p->shadow && p->ntiers == 2,
       "example login policy");
    if (p != NULL && p->ntiers == 2) {
        const struct tier *b = &p->tiers[0], *h = &p->tiers[1];
        ok(strcmp(b->name, "burst") == 0 && b->algorithm == ALG_TOKEN_BUCKET && b->limit == 5 &&
               b->window_us == 60000000 && b->burst == 10,
           "login burst: token_bucket 5 per 1m, burst 10");
        ok(strcmp(h->name, "hourly") == 0 && h->algorithm == ALG_SLIDING_WINDOW_LOG &&
               h->limit == 100 && h->window_us == 3600000000LL,
           "login hourly: sliding_window_log 100 per 1h");
    }
    for (i = 0; i < c->npolicies; i++)
        for (j = 0; j < c->policies[i].ntiers; j++)
            seen[c->policies[i].tiers[j].algorithm] = 1;
    for (i = 0; i < ALG__COUNT; i++)
        all &= seen[i];
    ok(all, "the example shows every algorithm");
    ok(c->envoy_config == NULL, "example: no envoy_config (commented out)");
    ok(c->ndomains == 1 && strcmp(c->domains[0].name, "edge_proxy") == 0 &&
           c->domains[0].nchildren == 4,
       "example: the domain edge_proxy with four descriptors");
    config_unref(c);
}

static void test_files(void)
{
    char path[] = "/tmp/test_config_XXXXXX", want[64], err[1024] = "";
    const char bad[] = POLICY_P "        limit: 5\n";
    struct config *c;
    int fd;

    c = config_load("/nonexistent/ratelimitd.yaml", err, sizeof err);
    ok(c == NULL, "a missing file is an error");
    is_str(err, "/nonexistent/ratelimitd.yaml: No such file or directory", "and says so");

    c = config_load("/tmp", err, sizeof err);
    ok(c == NULL, "a directory is an error");
    is_str(err, "/tmp: Is a directory", "and says so");

    fd = mkstemp(path);
    if (!ok(fd >= 0 && write(fd, bad, strlen(bad)) == (ssize_t)strlen(bad), "temp file"))
        return;
    close(fd);
    c = config_load(path, err, sizeof err);
    snprintf(want, sizeof want, "%s:8:9: ", path);
    ok(c == NULL && strncmp(err, want, strlen(want)) == 0, "errors name the file: %s", err);
    unlink(path);
}

/* auth_token_file: read at load, trimmed, never quoted back. */
static void test_token_file(void)
{
    char dir[] = "/tmp/rl-token-XXXXXX", path[64], yaml[256], err[1024];
    if (!ok(mkdtemp(dir) != NULL, "temp dir for token files"))
        return;
    snprintf(path, sizeof path, "%s/token", dir);
    static const struct {
        const char *content; /* NULL: no file */
        const char *want;    /* NULL: an error containing `error` */
        const char *error;
    } cases[] = {
        {"s3cr3t-t0ken-0123456789\n", "s3cr3t-t0ken-0123456789", NULL},
        {"", NULL, "the token must be 16 to 4096 bytes"},
        {"short\n", NULL, "the token must be 16 to 4096 bytes"},
        {"has space in the token\n", NULL, "no whitespace"},
        {NULL, NULL, "cannot open"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        unlink(path);
        if (cases[i].content) {
            FILE *f = fopen(path, "w");
            fputs(cases[i].content, f);
            fclose(f);
        }
        snprintf(yaml, sizeof yaml, "auth_token_file: %s\n" POLICY_P, path);
        struct config *c = config_load_string("t.yaml", yaml, strlen(yaml), err, sizeof err);
        if (cases[i].want) {
            ok(c && strcmp(c->auth_token, cases[i].want) == 0 &&
                   strcmp(c->auth_token_file, path) == 0,
               "token file case %zu: the token, trimmed", i);
        } else {
            ok(!c && strncmp(err, "t.yaml:1:18: auth_token_file: ", 30) == 0 &&
                   strstr(err, cases[i].error) && !strstr(err, "short\n"),
               "token file case %zu: %s", i, err);
        }
        config_unref(c);
    }
    unlink(path);
    rmdir(dir);
}

/* The forward-auth fields: a top-level deny_status after the policies
 * still reaches them; a policy's own wins; templates and networks compile. */
static void test_auth_fields(void)
{
    static const char yaml[] =
        "policies:\n"
        "  a:\n"
        "    key: \"${header:X-Tenant}:$${ip}:${ip}\"\n"
        "    missing_key: reject\n"
        "    tiers:\n" TIER_A "  b:\n"
        "    deny_status: 429\n"
        "    missing_key: shared\n"
        "    tiers:\n" TIER_A "deny_status: 403\n"
        "trusted_proxies: [unix, 10.0.0.0/8, \"::1\", \"::ffff:192.168.0.0/112\"]\n";
    char err[1024] = "";
    struct config *c = config_load_string("auth.yaml", yaml, strlen(yaml), err, sizeof err);

    if (!ok(c != NULL, "forward-auth fields load"))
        printf("#   %s\n", err);
    if (c == NULL)
        return;
    const struct policy *a = config_find_policy(c, "a"), *b = config_find_policy(c, "b");
    is_int(c->deny_status, 403, "top-level deny_status");
    is_int(a->deny_status, 403, "inherited by a policy without its own, though written after");
    is_int(b->deny_status, 429, "a policy's own deny_status wins");
    is_int(a->missing_key, MISSING_KEY_REJECT, "missing_key reject");
    is_int(b->missing_key, MISSING_KEY_SHARED, "missing_key shared");
    ok(a->key.nparts == 3 && a->key.parts[0].kind == KEY_PART_HEADER &&
           strcmp(a->key.text + a->key.parts[0].off, "X-Tenant") == 0 &&
           a->key.parts[1].kind == KEY_PART_LITERAL &&
           strcmp(a->key.text + a->key.parts[1].off, ":${ip}:") == 0 &&
           a->key.parts[2].kind == KEY_PART_IP,
       "the template's parts, $$ as a literal $");
    ok(c->trusted_proxies.unix_trusted && c->trusted_proxies.n == 3, "trusted_proxies entries");
    ok(c->trusted_proxies.nets[2].addr.family == AF_INET && c->trusted_proxies.nets[2].prefix == 16,
       "an IPv4-mapped network counts as IPv4");
    config_unref(c);
}

/* A key or prefix longer than POLICY_KEY_MAX; one of exactly that many
 * bytes is fine. */
static void test_override_lengths(void)
{
    static char yaml[4096];
    char key[POLICY_KEY_MAX + 2], err[1024] = "";
    struct config *c;

    memset(key, 'k', POLICY_KEY_MAX + 1);
    key[POLICY_KEY_MAX + 1] = '\0';
    snprintf(yaml, sizeof yaml, OVR("      - {prefix: %s, tiers: " OT "}\n"), key);
    c = config_load_string("t.yaml", yaml, strlen(yaml), err, sizeof err);
    is_str(err,
           "t.yaml:9:18: policies.p.overrides[0].prefix: longer than 1024 bytes (the longest key)",
           "a prefix of 1025 bytes is refused at its value");
    config_unref(c);

    key[POLICY_KEY_MAX] = '\0';
    snprintf(yaml, sizeof yaml, OVR("      - {key: %s, tiers: " OT "}\n"), key);
    c = config_load_string("t.yaml", yaml, strlen(yaml), err, sizeof err);
    ok(c != NULL && policy_for_key(&c->policies[0], key, POLICY_KEY_MAX)->tiers[0].limit == 5,
       "a key of 1024 bytes is fine and matches");
    config_unref(c);
}

/* The 10001st override is refused, at itself. */
static void test_too_many_overrides(void)
{
    size_t cap = 128 * (POLICY_MAX_OVERRIDES + 1) + 256, n;
    char *yaml = xmalloc(cap), err[1024] = "";
    struct config *c;
    int i;

    n = (size_t)snprintf(yaml, cap, "%s", OVR(""));
    for (i = 0; i <= POLICY_MAX_OVERRIDES; i++)
        n += (size_t)snprintf(yaml + n, cap - n, "      - {key: k%d, tiers: " OT "}\n", i);
    c = config_load_string("t.yaml", yaml, n, err, sizeof err);
    is_str(err, "t.yaml:10009:9: policies.p.overrides: at most 10000 overrides are allowed",
           "10001 overrides are refused at the 10001st");
    config_unref(c);

    n -= strlen("      - {key: k10000, tiers: " OT "}\n");
    c = config_load_string("t.yaml", yaml, n, err, sizeof err);
    ok(c != NULL && policy_overrides_count(c->policies[0].overrides) == POLICY_MAX_OVERRIDES &&
           policy_for_key(&c->policies[0], "k9999", 5)->tiers[0].limit == 5 &&
           policy_for_key(&c->policies[0], "k10000", 6)->tiers[0].limit == 10,
       "10000 overrides are fine");
    config_unref(c);
    free(yaml);
}

/* Variants take the policy's settings wherever the overrides are written. */
static void test_overrides_loaded(void)
{
    static const char yaml[] =
        "policies:\n"
        "  api:\n"
        "    overrides:\n"
        "      - key: \"tenant:acme\"\n"
        "        tiers:\n"
        "          - {name: minute, algorithm: gcra, limit: 1000, window: 1m}\n"
        "          - {name: day, algorithm: fixed_window, limit: 9, window: 1d}\n"
        "      - {prefix: \"vip:\", tiers: &vip [{name: m, algorithm: "
        "token_bucket, limit: 50, window: 1m}]}\n"
        "      - {prefix: \"vip:gold:\", tiers: *vip}\n"
        "    failure_mode: closed\n"
        "    shadow: true\n"
        "    deny_cache: false\n"
        "    tiers:\n"
        "      - {name: minute, algorithm: gcra, limit: 100, window: 1m}\n"
        "  other:\n"
        "    tiers: [{name: m, algorithm: gcra, limit: 7, window: 1m}]\n";
    char err[1024] = "";
    struct config *c = config_load_string("t.yaml", yaml, strlen(yaml), err, sizeof err);
    const struct policy *p, *v;

    if (!ok(c != NULL, "a policy with overrides loads"))
        printf("#   %s\n", err);
    if (c == NULL)
        return;
    p = config_find_policy(c, "api");
    v = policy_for_key(p, "tenant:acme", 11);
    ok(v != p && v->ntiers == 2 && v->tiers[0].limit == 1000 && v->tiers[1].limit == 9 &&
           strcmp(v->tiers[1].name, "day") == 0,
       "the exact key has its two tiers");
    ok(strcmp(v->name, "api") == 0 && v->failure_mode == FAILURE_CLOSED && v->shadow &&
           !v->deny_cache,
       "and the policy's settings, written after the overrides");
    v = policy_for_key(p, "vip:gold:1", 10);
    ok(v != p && v->tiers[0].limit == 50 && v->tiers[0].algorithm == ALG_TOKEN_BUCKET &&
           v != policy_for_key(p, "vip:1", 5),
       "an aliased tier list serves two prefixes, each its own variant");
    ok(policy_for_key(p, "tenant:acm", 10) == p, "other keys: the policy");
    ok(config_find_policy(c, "other")->overrides == NULL, "a policy without overrides has none");
    config_unref(c);
}

/* ---- the field table: defaults and reload rules ---------------------------------- */

#define MINIMAL                                                                                    \
    "policies: {p: {tiers: [{name: t, algorithm: fixed_window, limit: 1, window: 1s}]}}\n"

/* Every default of a top-level or redis.* field, as config_field_default
 * writes it: losing one from the table fails here. */
static const struct {
    const char *path, *text;
} want_defaults[] = {
    {"listen", "127.0.0.1:8080"},
    {"listen_mode", "-1"},
    {"listen_group", "-1"},
    {"backend", "0"},
    {"workers", "1"},
    {"redis.url", "redis://127.0.0.1:6379/0"},
    {"redis.timeout", "50000"},
    {"redis.batch", "32"},
    {"redis.module", "0"},
    {"redis.key_prefix", "rl:"},
    {"redis.tls.verify", "1"},
    {"clock", "0"},
    {"max_body", "16384"},
    {"log_level", "1"},
    {"access_log", "0"},
    {"grpc_max_streams", "100"},
    {"watch", "0"},
    {"max_inflight", "10000"},
    {"overload", "0"},
    {"max_connections", "4096"},
    {"idle_timeout", "30000000"},
    {"request_timeout", "10000000"},
    {"local_max_keys", "100000"},
    {"state_interval", "10000000"},
    {"deny_cache_max_keys", "100000"},
    {"headers", "0"},
    {"deny_status", "429"},
};

/* The fields only a restart applies; every other field a reload applies. */
static const char *const want_restart[] = {
    "listen",
    "listen_mode",
    "listen_group",
    "backend",
    "workers",
    "redis.url",
    "redis.module",
    "redis.tls",
    "redis.tls.ca_file",
    "redis.tls.cert_file",
    "redis.tls.key_file",
    "redis.tls.server_name",
    "redis.tls.verify",
    "redis.sentinel",
    "redis.sentinel.addresses",
    "redis.sentinel.master_name",
    "redis.sentinel.password",
    "redis.cluster",
    "admin_listen",
    "grpc_listen",
    "watch",
    "local_max_keys",
    "state_file",
    "state_interval",
};

struct table_walk {
    const struct config *c;
    int checked;
};

static const char *wanted_default(const char *path)
{
    for (size_t i = 0; i < sizeof want_defaults / sizeof want_defaults[0]; i++)
        if (strcmp(want_defaults[i].path, path) == 0)
            return want_defaults[i].text;
    return NULL;
}

static int wanted_restart(const char *path)
{
    for (size_t i = 0; i < sizeof want_restart / sizeof want_restart[0]; i++)
        if (strcmp(want_restart[i], path) == 0)
            return 1;
    return 0;
}

/* For every field: the table's default is the one wanted, a file that
 * leaves the field out gets it (config_new), and the reload rule is the one
 * wanted. */
static void check_row(const char *path, void *arg)
{
    struct table_walk *w = arg;
    char def[256] = "", got[256] = "";
    int has_def = config_field_default(path, def, sizeof def);
    int has_value = config_field_value(w->c, path, got, sizeof got);
    const char *want = wanted_default(path);

    w->checked++;
    if (has_value >= 0) { /* a field of struct config itself */
        if (want != NULL)
            ok(has_def == 1 && strcmp(def, want) == 0, "%s: the table's default is %s (%s)", path,
               want, def);
        else
            ok(has_def == 0 || (strcmp(def, "0") == 0), "%s: no default in the table (%s)", path,
               def);
        ok(has_def == has_value && strcmp(def, got) == 0,
           "%s: a file without it gets the table's default (%s, got %s)", path, def, got);
    }
    is_int(config_field_restart(path), wanted_restart(path), "%s: %s", path,
           wanted_restart(path) ? "changes only with a restart" : "a reload applies it");
}

static void test_table_defaults(void)
{
    char err[1024] = "";
    struct config *c = config_load_string("t.yaml", MINIMAL, strlen(MINIMAL), err, sizeof err);
    struct table_walk w = {c, 0};
    char buf[64];

    if (!ok(c != NULL, "a minimal file loads (%s)", err))
        return;
    config_foreach_field(check_row, &w);
    ok(w.checked > 70, "every field walked (%d)", w.checked);
    for (size_t i = 0; i < sizeof want_defaults / sizeof want_defaults[0]; i++)
        ok(config_field_value(c, want_defaults[i].path, buf, sizeof buf) == 1,
           "%s is a field of the table", want_defaults[i].path);
    for (size_t i = 0; i < sizeof want_restart / sizeof want_restart[0]; i++)
        is_int(config_field_restart(want_restart[i]), 1, "%s is a restart field of the table",
               want_restart[i]);
    is_int(config_field_restart("no_such_field"), -1, "an unknown path has no rule");
    config_unref(c);
}

/* config_restart_field names the field a reload may not change, and lets
 * one through that changes only reloadable fields. */
static void test_reload_rule(void)
{
    static const struct {
        const char *yaml, *field;
    } cases[] = {
        {"listen: 127.0.0.1:9999\n", "listen"},
        {"admin_listen: 127.0.0.1:9998\n", "admin_listen"},
        {"grpc_listen: 127.0.0.1:9997\n", "grpc_listen"},
        {"listen: unix:/tmp/x.sock\nlisten_mode: \"0600\"\n", "listen"},
        {"backend: memory\n", "backend"},
        {"workers: 2\n", "workers"},
        {"redis: {url: \"redis://127.0.0.1:6380/0\"}\n", "redis.url"},
        {"redis: {url: \"rediss://127.0.0.1:6379/0\", tls: {verify: false}}\n", "redis.url"},
        {"redis: {sentinel: {addresses: [\"a:1\"], master_name: m}}\n", "redis.sentinel.addresses"},
        {"redis: {cluster: [\"redis://a:1\"]}\n", "redis.cluster"},
        {"watch: true\n", "watch"},
        {"local_max_keys: 5\n", "local_max_keys"},
        /* A reload applies these. */
        {"max_body: 1024\n", NULL},
        {"deny_cache_max_keys: 0\n", NULL},
        {"headers: ietf\n", NULL},
        {"deny_status: 403\n", NULL},
        {"envoy_shadow_mode: true\nenvoy_quota_mode: true\n", NULL},
        {"trusted_proxies: [\"10.0.0.0/8\"]\n", NULL},
        {"redis: {timeout: 1s, key_prefix: \"x:\"}\nclock: local\nlog_level: debug\n", NULL},
        {"", NULL},
    };
    char err[1024] = "", text[2048], field[128];
    struct config *old = config_load_string("t.yaml", MINIMAL, strlen(MINIMAL), err, sizeof err);

    for (size_t i = 0; old != NULL && i < sizeof cases / sizeof cases[0]; i++) {
        snprintf(text, sizeof text, "%s%s", cases[i].yaml, MINIMAL);
        struct config *new = config_load_string("t.yaml", text, strlen(text), err, sizeof err);
        if (!ok(new != NULL, "reload case %zu loads (%s)", i, err))
            continue;
        int found = config_restart_field(old, new, field, sizeof field);
        if (cases[i].field != NULL)
            ok(found == 1 && strcmp(field, cases[i].field) == 0, "%s needs a restart (%s)",
               cases[i].field, found ? field : "none");
        else
            ok(found == 0, "case %zu: a reload applies it (%s)", i, found ? field : "none");
        ok(config_restart_field(new, new, field, sizeof field) == 0,
           "a snapshot against itself: nothing differs");
        config_unref(new);
    }
    config_unref(old);
}

/* backend: memory calls no Redis: a redis: section loads, with a warning
 * at its line (the daemon logs it); none otherwise. */
static void test_warnings(void)
{
    static const struct {
        const char *yaml, *want; /* want NULL: no warning */
    } cases[] = {
        {"backend: memory\nredis:\n  url: redis://127.0.0.1:6379/0\n" POLICY_P,
         "t.yaml:3:3: redis: not used with backend: memory (nothing calls Redis): remove the "
         "section or set backend: redis"},
        {"redis: {timeout: 1s}\nbackend: memory\n" POLICY_P,
         "t.yaml:1:8: redis: not used with backend: memory"},
        {"backend: memory\n" POLICY_P, NULL},
        {"redis: {timeout: 1s}\n" POLICY_P, NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char err[RL_ERRLEN * 2];
        struct config *c =
            config_load_string("t.yaml", cases[i].yaml, strlen(cases[i].yaml), err, sizeof err);
        if (!ok(c != NULL, "warning case %zu loads: %s", i, c ? "" : err))
            continue;
        if (cases[i].want)
            ok(c->warning && strncmp(c->warning, cases[i].want, strlen(cases[i].want)) == 0,
               "warning case %zu: %s", i, c->warning ? c->warning : "(none)");
        else
            ok(c->warning == NULL, "warning case %zu: none", i);
        config_unref(c);
    }
}

/* --listen, --backend, --redis-url over the file's values; errors name
 * the option, and never quote a URL (it may hold a password). */
static void test_cli_overrides(void)
{
    static const struct {
        const char *yaml, *listen, *backend, *url;
        const char *error; /* NULL: loads */
    } cases[] = {
        {"listen: 127.0.0.1:1\nredis:\n  url: redis://h:1/0\n" POLICY_P, "127.0.0.1:9", "memory",
         NULL, NULL},
        {"backend: memory\n" POLICY_P, NULL, "redis", "rediss://:s3cret@h:6380/2", NULL},
        {POLICY_P, "nope", NULL, NULL, "--listen nope: expected host:port"},
        {POLICY_P, NULL, "mem", NULL, "--backend: redis or memory, not \"mem\""},
        {POLICY_P, NULL, "memory", "redis://h", "--redis-url: not used with backend memory"},
        {SENTINEL("    addresses: [h:26379]\n    master_name: m\n"), NULL, NULL, "redis://h",
         "names redis.sentinel, which the one URL would replace"},
        {POLICY_P, NULL, NULL, "redis://:s3cret@h:x", "--redis-url: "},
    };
    char path[] = "/tmp/test_config_cli_XXXXXX", err[1024];
    int fd = mkstemp(path);
    if (!ok(fd >= 0, "temp file for the command-line cases"))
        return;
    close(fd);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        FILE *f = fopen(path, "w");
        fputs(cases[i].yaml, f);
        fclose(f);
        struct config_cli cli = {.envoy_merge_domains = -1,
                                 .listen = cases[i].listen,
                                 .backend = cases[i].backend,
                                 .redis_url = cases[i].url};
        struct config *c = config_load_cli(path, &cli, err, sizeof err);
        if (cases[i].error) {
            ok(!c && strstr(err, cases[i].error) && !strstr(err, "s3cret"), "cli case %zu: %s", i,
               c ? "(loaded)" : err);
        } else if (ok(c != NULL, "cli case %zu loads: %s", i, c ? "" : err)) {
            ok((!cases[i].listen || strcmp(c->listen, cases[i].listen) == 0) &&
                   (int)c->backend == (strcmp(cases[i].backend, "memory") == 0) &&
                   (!cases[i].url || strcmp(c->redis_url, cases[i].url) == 0) &&
                   c->redis_tls_on == (cases[i].url != NULL) && c->warning == NULL,
               "cli case %zu: the options win, rediss:// is TLS, no warning for the redis section "
               "--backend memory leaves aside",
               i);
        }
        config_unref(c);
    }
    unlink(path);
}

/* redis.url and the cluster seeds parsed once, at load, into the snapshot
 * (redis_server, redis_seeds): the form the backends connect with. */
static int same_url(const struct redis_url *u, const char *host, int port, const char *unix_path,
                    const char *user, const char *password, int db, int tls)
{
    return (host ? u->host && strcmp(u->host, host) == 0 : !u->host) && u->port == port &&
           (unix_path ? u->unix_path && strcmp(u->unix_path, unix_path) == 0 : !u->unix_path) &&
           (user ? u->user && strcmp(u->user, user) == 0 : !u->user) &&
           (password ? u->password && strcmp(u->password, password) == 0 : !u->password) &&
           u->db == db && u->tls == tls;
}

static void test_redis_parsed(void)
{
    char err[1024] = "";
    struct config *c = load_with_policy("", err, sizeof err);
    ok(c && same_url(&c->redis_server, "127.0.0.1", 6379, NULL, NULL, NULL, 0, 0) &&
           !c->redis_seeds,
       "the default URL parsed: %s", c ? "" : err);
    config_unref(c);

    c = load_with_policy("redis:\n  url: \"rediss://u%40x:p%2F@[::1]:6380/5\"\n", err, sizeof err);
    ok(c && same_url(&c->redis_server, "::1", 6380, NULL, "u@x", "p/", 5, 1) && c->redis_tls_on,
       "redis.url parsed: host, port, decoded credentials, db, TLS: %s", c ? "" : err);
    config_unref(c);

    c = load_with_policy("redis:\n  url: unix:/run/redis.sock\n", err, sizeof err);
    ok(c && same_url(&c->redis_server, NULL, 0, "/run/redis.sock", NULL, NULL, 0, 0),
       "a unix socket URL parsed: %s", c ? "" : err);
    config_unref(c);

    c = load_with_policy("redis:\n  cluster: [\"redis://:pw@a:7000\", redis://b]\n", err,
                         sizeof err);
    ok(c && c->redis_ncluster == 2 &&
           same_url(&c->redis_seeds[0], "a", 7000, NULL, NULL, "pw", 0, 0) &&
           same_url(&c->redis_seeds[1], "b", 6379, NULL, NULL, NULL, 0, 0),
       "the cluster seeds parsed, in order: %s", c ? "" : err);
    config_unref(c);

    char path[] = "/tmp/test_config_parsed_XXXXXX";
    int fd = mkstemp(path);
    if (!ok(fd >= 0, "temp file for --redis-url"))
        return;
    if (write(fd, POLICY_P, strlen(POLICY_P)) != (ssize_t)strlen(POLICY_P))
        ok(0, "write the temp file");
    close(fd);
    struct config_cli cli = {.envoy_merge_domains = -1, .redis_url = "redis://h:7/1"};
    c = config_load_cli(path, &cli, err, sizeof err);
    ok(c && same_url(&c->redis_server, "h", 7, NULL, NULL, NULL, 1, 0),
       "--redis-url parsed over the default: %s", c ? "" : err);
    config_unref(c);
    unlink(path);
}

int main(void)
{
    test_cli_overrides();
    test_warnings();
    test_errors();
    test_unknown_field_bounded();
    test_too_many_tiers();
    test_override_lengths();
    test_too_many_overrides();
    test_overrides_loaded();
    test_full();
    test_defaults();
    test_auth_fields();
    test_edges();
    test_headers_inherit();
    test_listen_perm();
    test_example();
    test_files();
    test_token_file();
    test_redis_tls();
    test_redis_modes();
    test_redis_module();
    test_redis_parsed();
    test_table_defaults();
    test_reload_rule();
    return tap_done();
}
