-- SPDX-License-Identifier: Apache-2.0
-- concurrency.lua: at most `limit` units held at once per key, each held by
-- a lease that ends when its caller releases it or when it expires.
--
-- The tier's window_us is its lease_timeout (policy_tier_span_us). A lease
-- is one member of ZSET KEYS[1], "<units>:<nonce>" (units: the request's
-- cost; nonce: the daemon's random part of the request, ARGV's last), scored
-- by the absolute µs at which it expires. A lease holds its units while its
-- expiry is after now; an expired member stays as a tombstone for one more
-- lease timeout, so that a late release or renew is told "expired" rather
-- than "unknown", and is then trimmed by the next commit.
-- Expiry (the key): one lease timeout after the latest lease expires (plus
-- slack), so the key goes with its last tombstone.
-- Figures: remaining = limit - units held; reset = when the last live lease
-- expires; retry = when enough of the earliest leases will have expired (an
-- upper bound: a release frees units sooner).
-- lease_op (check.lua's decide with ARGV[2] "r" or "n") releases or renews
-- one lease by its member.

local concurrency = { nkeys = 1 }

function concurrency.capacity(t)
    return t.limit
end

-- The live leases, by expiry: t.scores[i], t.units[i] for i = 1 .. t.nlive.
function concurrency.load(t)
    local r = redis.call('ZRANGEBYSCORE', t.key, '(' .. fmt(t.now), '+inf', 'WITHSCORES')
    local held, n, scores, units = 0, 0, {}, {}
    for i = 1, #r, 2 do
        local u = tonumber(match(r[i], '^(%d+):'))
        if u then
            n = n + 1
            scores[n], units[n] = tonumber(r[i + 1]), u
            held = held + u
        end
    end
    t.held, t.nlive, t.scores, t.units = held, n, scores, units
end

function concurrency.allows(t)
    return t.held + t.cost <= t.limit
end

function concurrency.figures(t, consumed)
    local held, last = t.held, nil
    if t.nlive > 0 then
        last = t.scores[t.nlive]
    end
    if consumed and t.cost > 0 then
        held = held + t.cost
        last = max(last or 0, t.now + t.window)
    end
    local reset = 0
    if last then
        reset = last - t.now
    end
    return max(0, t.limit - held), reset
end

function concurrency.retry(t)
    -- The earliest expiry after which held + cost <= limit.
    local need, freed = t.held + t.cost - t.limit, 0
    for i = 1, t.nlive do
        freed = freed + t.units[i]
        if freed >= need then
            return t.scores[i] - t.now
        end
    end
    return t.window -- not reached: cost <= limit
end

function concurrency.commit(t)
    if not t.nonce then
        error('ratelimitd: a concurrency tier needs the lease nonce (ARGV\'s last)')
    end
    local key, w = t.key, t.window
    redis.call('ZREMRANGEBYSCORE', key, '-inf', fmt(t.now - w))
    local expires = t.now + w
    redis.call('ZADD', key, fmt(expires), fmt(t.cost) .. ':' .. t.nonce)
    local last = expires
    if t.nlive > 0 then
        last = max(last, t.scores[t.nlive])
    end
    expire_in(key, last + w - t.now)
end

-- Releases (op "r") or renews (op "n", for timeout µs from now) the lease
-- `member` of key. Returns status, expires_us: 1 and its (new) expiry if it
-- was held; 2, 0 if it had expired (a tombstone: nothing to free, and a
-- renew cannot revive it); 0, 0 if it is unknown (never taken, released
-- already, or expired so long ago that it was trimmed).
function concurrency.lease_op(key, member, op, timeout, now)
    local s = redis.pcall('ZSCORE', key, member)
    if type(s) ~= 'string' then
        return 0, 0
    end
    if tonumber(s) <= now then
        return 2, 0
    end
    if op == 'r' then
        redis.call('ZREM', key, member)
        return 1, 0
    end
    local expires = now + timeout
    redis.call('ZADD', key, 'XX', fmt(expires), member)
    local want = px_in(expires + timeout - now)
    if redis.call('PTTL', key) < want then
        redis.call('PEXPIRE', key, want)
    end
    return 1, expires
end
