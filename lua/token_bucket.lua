-- token_bucket.lua: a bucket of `capacity` tokens refilled at limit per W.
--
-- capacity C = burst, or limit if burst is 0. Each unit of cost takes a
-- token; tokens come back continuously at limit / W per µs, up to C.
--
-- Exact integer arithmetic in scaled units: S = tokens * W, so one token is
-- W units and the refill is exactly `limit` units per µs (no fraction of a
-- token is ever rounded). A full bucket is C * W <= 2^53.
--
-- State: HASH KEYS[1] {s = S at time t, t = time of that S (µs)}. A missing
-- key is a full bucket.
-- Expiry: when the bucket is full again (plus slack), as a full bucket and
-- a missing key are the same. (A commit always takes at least one token, so
-- the state written is never full.)
-- Figures: remaining = floor(S / W); reset = ceil((C * W - S) / limit);
-- retry = ceil((cost * W - S) / limit).

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
    local v = redis.call('HMGET', t.keys[1], 's', 't')
    local s, last = tonumber(v[1]), tonumber(v[2])
    if not s or not last then
        return { s = full, last = t.now, full = full }
    end
    -- A clock behind the one that wrote t refills nothing (elapsed >= 0).
    local elapsed = math.max(0, t.now - last)
    -- Compare elapsed against the time to fill up rather than multiplying
    -- it by limit: after a long idle elapsed * limit could pass 2^53.
    if elapsed >= idiv_ceil(full - s, t.limit) then
        s = full
    else
        s = s + elapsed * t.limit
    end
    return { s = s, last = math.max(last, t.now), full = full }
end

function token_bucket.allows(t, st)
    return st.s >= t.cost * t.window
end

-- Refill only starts at st.last, which is later than now only when this
-- daemon's clock is behind the one that wrote the state (else it is 0).
local function refill_starts(t, st)
    return st.last - t.now
end

function token_bucket.figures(t, st, consumed)
    local s = st.s
    if consumed then
        s = s - t.cost * t.window
    end
    local reset = 0
    if s < st.full then
        reset = refill_starts(t, st) + idiv_ceil(st.full - s, t.limit)
    end
    return idiv(s, t.window), reset
end

function token_bucket.retry(t, st)
    return refill_starts(t, st) + idiv_ceil(t.cost * t.window - st.s, t.limit)
end

function token_bucket.commit(t, st)
    local key = t.keys[1]
    local s = st.s - t.cost * t.window
    -- Keep the later of the two times: S is what the bucket holds then.
    redis.call('HSET', key, 's', fmt(s), 't', fmt(st.last))
    expire_in(key, refill_starts(t, st) + idiv_ceil(st.full - s, t.limit))
end
