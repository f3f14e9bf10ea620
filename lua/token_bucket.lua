-- SPDX-License-Identifier: Apache-2.0
-- token_bucket.lua: a bucket of `capacity` tokens refilled at limit per W.
--
-- capacity C = burst, or limit if burst is 0. Each unit of cost takes a
-- token; tokens come back continuously at limit / W per µs, up to C.
--
-- Exact integer arithmetic in scaled units: S = tokens * W, so one token is
-- W units and the refill is exactly `limit` units per µs (no fraction of a
-- token is ever rounded). A full bucket is C * W <= 2^53.
--
-- State: STRING KEYS[1] "t:<s>:<t>:<w>": the bucket held s / w tokens at time
-- t (absolute µs). A missing key is a full bucket. The tokens carry over a
-- change of limit or burst as they are (capped at the new capacity, refilled
-- at the new rate from t); over a change of window they are rounded down to
-- whole tokens. One GET, one SET ... PX.
-- Expiry: when the bucket is full again (plus slack), as a full bucket and
-- a missing key are the same. (A commit always takes at least one token, so
-- the state written is never full.)
-- Figures: remaining = floor(S / W); reset = ceil((C * W - S) / limit);
-- retry = ceil((cost * W - S) / limit).
-- Report: S -= cost * W, below 0 if so (a debt, stored as a negative s):
-- denied until the refill has paid it back; a refund gives the tokens back,
-- up to a full bucket. A debt saturates at C * W - 2^53 (at least one
-- window of refill). A change of window (a reload) forgives a debt: the
-- bucket reads empty, as gcra.lua's does.

local token_bucket = { nkeys = 1 }

-- Shared with gcra.lua: the same bucket, the same capacity.
local function bucket_capacity(t)
    if t.burst > 0 then
        return t.burst
    end
    return t.limit
end

token_bucket.capacity = bucket_capacity

function token_bucket.load(t)
    local full = t.capacity * t.window
    t.full, t.s, t.last = full, full, t.now
    local v = get_string(t.key)
    if not v then
        return
    end
    local s, last, w = match(v, '^t:(%-?%d+):(%d+):(%d+)$')
    s, last, w = tonumber(s), tonumber(last), tonumber(w)
    if not w then
        return -- another layout: as absent
    end
    if w ~= t.window then
        s = max(0, min(idiv(s, w), t.capacity)) * t.window
    end
    -- A clock behind the one that wrote t refills nothing (elapsed >= 0).
    local elapsed = max(0, t.now - last)
    -- Compare elapsed against the time to fill up rather than multiplying
    -- it by limit: after a long idle elapsed * limit could pass 2^53. (Past
    -- a cut of the capacity, s > full: full at once.)
    if elapsed >= idiv_ceil(full - s, t.limit) then
        s = full
    else
        s = s + elapsed * t.limit
    end
    t.s, t.last = s, max(last, t.now)
end

function token_bucket.allows(t)
    return t.s >= t.cost * t.window
end

-- Refill only starts at t.last, which is later than now only when this
-- daemon's clock is behind the one that wrote the state (else it is 0).
local function refill_starts(t)
    return t.last - t.now
end

function token_bucket.figures(t, consumed)
    local s = t.s
    if consumed then
        s = s - t.cost * t.window
    end
    local reset = 0
    if s < t.full then
        reset = refill_starts(t) + idiv_ceil(t.full - s, t.limit)
    end
    return max(0, idiv(s, t.window)), reset
end

function token_bucket.retry(t)
    return refill_starts(t) + idiv_ceil(t.cost * t.window - t.s, t.limit)
end

-- Stores S = s as of t.last (the later of the two times: S is what the
-- bucket holds then), expiring when the bucket is full again.
local function token_bucket_write(t, s)
    redis.call('SET', t.key, format(FMT_T, s, t.last, t.window),
        'PX', px_in(refill_starts(t) + idiv_ceil(t.full - s, t.limit)))
end

function token_bucket.commit(t)
    token_bucket_write(t, t.s - t.cost * t.window)
end

token_bucket.refunds = true

function token_bucket.report(t)
    token_bucket_write(t, max(min(t.s - t.cost * t.window, t.full), t.full - EXACT_MAX))
end

-- Local leases (lua/check.lua's take_block): the whole tokens there now.
-- Tokens taken are consumed now, so a block has no window to stay in; it
-- is spent within LEASE_BUCKET_SPAN_US (or the window, if shorter) so
-- that an admission never trails its token by more, and a block given
-- back refills the bucket no higher than full, as if never taken.
function token_bucket.lease_avail(t)
    return idiv(t.s, t.window)
end

function token_bucket.lease_until(t)
    return t.now + min(t.window, LEASE_BUCKET_SPAN_US)
end

function token_bucket.lease_same(t, taken)
    return true
end
