-- SPDX-License-Identifier: Apache-2.0
-- sliding_window_counter.lua: the sliding window, estimated from two counts.
--
-- Keeps the counts of the current aligned window and of the previous one,
-- and assumes the previous window's units were spread evenly: at `elapsed`
-- µs into the current window the estimate is
--     prev * (W - elapsed) / W + cur
-- and a request fits iff estimate + cost <= limit. Compared in integers,
-- multiplied through by W, so that no fraction is ever rounded:
--     prev * (W - elapsed) <= (limit - cur - cost) * W
-- (that form also keeps both sides <= limit * W <= 2^53).
--
-- State: STRING KEYS[1] "c:<e>:<c>:<p>": c units in the window ending at e
-- (absolute µs), p in the window before it. Stored e == the current
-- window's end: cur = c, prev = p; e == its start: the window has rolled,
-- prev = c and cur = 0; anything else (older, or a window whose length
-- changed): both 0. One GET, one SET ... PX (or PXAT: expiry_until).
-- Expiry: the end of the next window, when this window's count stops
-- weighing on the estimate.
-- Figures: remaining = floor(limit - estimate after); reset = end of the
-- next window if cur > 0, end of this one if only prev > 0; retry = the first
-- µs at which the weighted prev has decayed enough, in this window or the
-- next.
-- Report: cur += cost, past the limit if so; it weighs on the estimate of
-- the next window too. Counts saturate at floor(2^53 / W), so that every
-- product above stays exact. No refund: which window counted the units
-- given back is not known, and the two weigh differently.

local sliding_window_counter = { nkeys = 1 }

function sliding_window_counter.capacity(t)
    return t.limit
end

function sliding_window_counter.load(t)
    local start = idiv(t.now, t.window) * t.window
    t.start, t.cur, t.prev, t.elapsed = start, 0, 0, t.now - start
    local v = get_string(t.key)
    if v then
        local se, sc, sp = match(v, '^c:(%d+):(%d+):(%d+)$')
        se = tonumber(se)
        if se == start + t.window then
            t.cur, t.prev = tonumber(sc), tonumber(sp)
        elseif se == start then
            t.prev = tonumber(sc)
        end
    end
end

function sliding_window_counter.allows(t)
    local room = t.limit - t.cur - t.cost
    return room >= 0 and t.prev * (t.window - t.elapsed) <= room * t.window
end

function sliding_window_counter.figures(t, consumed)
    local W = t.window
    local cur = t.cur
    if consumed then
        cur = cur + t.cost
    end
    -- floor((limit * W - prev * (W - elapsed) - cur * W) / W), never < 0.
    local remaining = 0
    local room = t.limit - cur
    if room > 0 then
        remaining = max(0, idiv(room * W - t.prev * (W - t.elapsed), W))
    end
    local reset = 0
    if cur > 0 then
        reset = t.start + 2 * W - t.now
    elseif t.prev > 0 then
        reset = t.start + W - t.now
    end
    return remaining, reset
end

function sliding_window_counter.retry(t)
    local W = t.window
    local room = t.limit - t.cur - t.cost
    if room >= 0 and t.prev > 0 then
        -- Fits later in this window, at the first elapsed with
        -- prev * (W - elapsed) <= room * W, i.e. W - elapsed <= room * W / prev.
        return t.start + (W - idiv(room * W, t.prev)) - t.now
    end
    -- Only in the next window, where prev' = cur and cur' = 0.
    if t.cur == 0 then
        return t.start + W - t.now
    end
    return t.start + W + (W - idiv((t.limit - t.cost) * W, t.cur)) - t.now
end

function sliding_window_counter.commit(t)
    local e = t.start + t.window
    redis.call('SET', t.key, format(FMT_C, e, t.cur + t.cost, t.prev),
        expiry_until(t.now, e + t.window))
end

function sliding_window_counter.report(t)
    t.cost = max(0, min(t.cost, idiv(EXACT_MAX, t.window) - t.cur))
    sliding_window_counter.commit(t)
end
