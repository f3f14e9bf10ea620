-- SPDX-License-Identifier: Apache-2.0
-- gcra.lua: the token bucket as a Generic Cell Rate Algorithm.
--
-- Same parameters, decisions and figures as token_bucket.lua for the same
-- requests at the same times, but the state is a single value: the
-- theoretical arrival time TAT, when the bucket would be full again. Each
-- unit of cost pushes TAT one emission interval (W / limit µs) further.
--
-- In scaled units (one emission interval = W units, so 1 µs = limit units),
-- d = max(0, TAT - now) * limit is how empty the bucket is: token_bucket's S
-- is C * W - d. A request fits iff d + cost * W <= C * W.
--
-- State: a plain string KEYS[1] "g:<d>:<t>:<w>": at time t (absolute µs)
-- the bucket was d / w tokens short of full, i.e. TAT = t + d / limit
-- exactly (the TAT itself is not stored: as a time it only means a number
-- of tokens at the rate it was computed at, and a reload may change that
-- rate). Read at now: d - (now - t) * limit with the current limit, never
-- below 0 (the same as TAT - now in scaled units); with a window other than
-- w, d is first rounded up to whole tokens short, at most C. So a change of
-- limit or burst carries the tokens missing over as they are, refilled at
-- the new rate; one GET, one SET ... PX.
-- Expiry: when TAT passes (plus slack); a missing key is an idle one.
-- Figures: remaining = floor((C * W - d) / W); reset = ceil(d / limit);
-- retry = ceil((d + cost * W - C * W) / limit).
-- Report: d += cost * W, past C * W if so (TAT moves further than a full
-- bucket: a debt), saturating at 2^53; a refund moves TAT back, never
-- before now (d >= 0).
--
-- leaky_bucket.lua reuses these functions (and so gcra_read/gcra_write).

local gcra = { nkeys = 1, capacity = bucket_capacity }

-- d for the state stored in t.key, as of t.now; 0 for a missing key.
local function gcra_read(t)
    local v = get_string(t.key)
    if not v then
        return 0
    end
    local d, at, w = match(v, '^g:(%d+):(%d+):(%d+)$')
    d, at, w = tonumber(d), tonumber(at), tonumber(w)
    if not w then
        return 0 -- another layout: as absent
    end
    if w ~= t.window then
        d = min(idiv_ceil(d, w), t.capacity) * t.window
    end
    local elapsed = t.now - at
    if elapsed <= 0 then
        -- A clock behind the writer's: TAT is further away from it.
        return d - elapsed * t.limit
    end
    -- Compared this way, not as d - elapsed * limit, so that a long idle
    -- cannot overflow: TAT has passed, the bucket is full.
    if elapsed >= idiv_ceil(d, t.limit) then
        return 0
    end
    return d - elapsed * t.limit
end

-- Stores d as of now, and makes the key expire when TAT passes.
local function gcra_write(t, d)
    redis.call('SET', t.key, format(FMT_G, d, t.now, t.window),
        'PX', px_in(idiv_ceil(d, t.limit)))
end

function gcra.load(t)
    t.d, t.full = gcra_read(t), t.capacity * t.window
end

function gcra.allows(t)
    return t.d + t.cost * t.window <= t.full
end

function gcra.figures(t, consumed)
    local d = t.d
    if consumed then
        d = d + t.cost * t.window
    end
    return max(0, idiv(t.full - d, t.window)), idiv_ceil(d, t.limit)
end

function gcra.retry(t)
    return idiv_ceil(t.d + t.cost * t.window - t.full, t.limit)
end

function gcra.commit(t)
    gcra_write(t, t.d + t.cost * t.window)
end

gcra.refunds = true

function gcra.report(t)
    gcra_write(t, min(max(0, t.d + t.cost * t.window), EXACT_MAX))
end

-- Local leases: as token_bucket's (units consumed now, spent soon).
function gcra.lease_avail(t)
    return idiv(t.full - t.d, t.window)
end

gcra.lease_until = token_bucket.lease_until
gcra.lease_same = token_bucket.lease_same
