-- gcra.lua: the token bucket as a Generic Cell Rate Algorithm.
--
-- Same parameters, decisions and figures as token_bucket.lua for the same
-- requests at the same times, but the state is a single number: the
-- theoretical arrival time TAT, when the bucket would be full again. Each
-- unit of cost pushes TAT one emission interval (W / limit µs) further.
--
-- In scaled units (one emission interval = W units, so 1 µs = limit units),
-- d = max(0, TAT - now) * limit is how empty the bucket is: token_bucket's S
-- is C * W - d. A request fits iff d + cost * W <= C * W.
--
-- State: a plain string KEYS[1] "<a>:<b>" meaning TAT = a + b / limit µs
-- exactly (0 <= b < limit): an exact rational, no rounding ever stored.
-- Expiry: when TAT passes (plus slack); a missing key is an idle one.
-- Figures: remaining = floor((C * W - d) / W); reset = ceil(d / limit);
-- retry = ceil((d + cost * W - C * W) / limit).
--
-- leaky_bucket.lua reuses these functions (and so gcra_read/gcra_write).

local gcra = { nkeys = 1, capacity = bucket_capacity }

-- d for the TAT stored in key, as of now; 0 for a missing key.
local function gcra_read(key, now, limit)
    local v = redis.call('GET', key)
    if not v then
        return 0
    end
    local a, b = string.match(v, '^(%-?%d+):(%d+)$')
    a, b = tonumber(a), tonumber(b)
    if not a or not b then
        error('ratelimitd: malformed GCRA state in ' .. key)
    end
    local behind = now - a
    if behind <= 0 then
        return -behind * limit + b
    end
    -- TAT is in the past: the bucket is full (d = 0). Compared this way, not
    -- as b - behind * limit, so a long idle cannot overflow.
    if behind >= idiv_ceil(b, limit) then
        return 0
    end
    return b - behind * limit
end

-- Stores TAT = now + d / limit and makes the key expire when it passes.
local function gcra_write(key, now, limit, d)
    local tat = fmt(now + idiv(d, limit)) .. ':' .. fmt(math.fmod(d, limit))
    redis.call('SET', key, tat, 'PX', px_in(idiv_ceil(d, limit)))
end

function gcra.load(t)
    return { d = gcra_read(t.keys[1], t.now, t.limit), full = t.capacity * t.window }
end

function gcra.allows(t, st)
    return st.d + t.cost * t.window <= st.full
end

function gcra.figures(t, st, consumed)
    local d = st.d
    if consumed then
        d = d + t.cost * t.window
    end
    return math.max(0, idiv(st.full - d, t.window)), idiv_ceil(d, t.limit)
end

function gcra.retry(t, st)
    return idiv_ceil(st.d + t.cost * t.window - st.full, t.limit)
end

function gcra.commit(t, st)
    gcra_write(t.keys[1], t.now, t.limit, st.d + t.cost * t.window)
end
