/* SPDX-License-Identifier: Apache-2.0 */
/*
 * domains_dump.h: the debug view of a snapshot's Envoy domains (domains.h),
 * envoyproxy/ratelimit's /rlconfig: every limit of every domain as
 * ratelimitd understood it, as text or JSON. Pure: it writes into a
 * buffer and knows no front; the admin listener serves it
 * (http_routes.c, GET /rlconfig).
 *
 * Owns the two formats and the one table of a limit's fields that drives
 * both (a field added to struct domain_limit is one row there). Does not
 * own the tree (domains.c, config_domains.c) nor the HTTP answer.
 */
#ifndef RATELIMITD_DOMAINS_DUMP_H
#define RATELIMITD_DOMAINS_DUMP_H

#include <stddef.h>

#include "config/domains.h"
#include "lib/buf.h"

/*
 * Appends one line per limit, domains by name and descriptors in the
 * order a lookup tries them, each line starting as envoyproxy/ratelimit's
 * dump does:
 *
 *   <domain>.<key>_<value>.<key>: unit=MINUTE requests_per_unit=5, shadow_mode: false, ...
 *
 * then ratelimitd's other fields of the limit (", name: value"; a string
 * or list that is not set is left out) and, for a `policy:` descriptor,
 * ", policy: NAME{tier: algorithm limit=N window_us=N[ burst=N]
 * [ precision_us=N][ calendar=UNIT timezone=ZONE[ anchor_day=N |
 * week_start=DAY]], ...}". Nothing for no limit.
 */
void domains_dump_text(const struct domain *domains, size_t n, struct buf *out);

/*
 * Appends the same as one JSON document:
 *   {"domains":[{"domain":NAME,"limits":[{"key":"<domain>.<path>",
 *     "descriptors":[{"key":K,"value":V or null}...],
 *     <every field of the table>, "policy":{"name","shadow","tiers":[{"name",
 *     "algorithm","limit","window_us","burst","precision_us"[,"calendar":
 *     {"unit","timezone","anchor_day","week_start"}]}]} or null}]}]}
 * A value written "prefix*" is shown so; "policy" is null for an unlimited
 * limit and "@envoy" (DOMAINS_ENVOY_POLICY) for a `rate_limit:` one.
 */
void domains_dump_json(const struct domain *domains, size_t n, struct buf *out);

#endif
