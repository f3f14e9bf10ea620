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
-- State: HASH KEYS[1] {w = window index, c = count in w, p = count in w - 1}.
-- Stored w == current: cur = c, prev = p; w == current - 1: the window has
-- rolled, prev = c and cur = 0; anything older: both 0.
-- Expiry: the end of the next window, when this window's count stops
-- weighing on the estimate.
-- Figures: remaining = floor(limit - estimate after); reset = end of the
-- next window if cur > 0, end of this one if only prev > 0; retry = the first
-- µs at which the weighted prev has decayed enough, in this window or the
-- next.

local sliding_window_counter = { nkeys = 1 }

function sliding_window_counter.capacity(t)
    return t.limit
end

function sliding_window_counter.load(t)
    local idx = idiv(t.now, t.window)
    local v = redis.call('HMGET', t.keys[1], 'w', 'c', 'p')
    local w = tonumber(v[1])
    local cur, prev = 0, 0
    if w == idx then
        cur = tonumber(v[2]) or 0
        prev = tonumber(v[3]) or 0
    elseif w == idx - 1 then
        prev = tonumber(v[2]) or 0
    end
    return { idx = idx, cur = cur, prev = prev, elapsed = t.now - idx * t.window }
end

function sliding_window_counter.allows(t, st)
    local room = t.limit - st.cur - t.cost
    return room >= 0 and st.prev * (t.window - st.elapsed) <= room * t.window
end

function sliding_window_counter.figures(t, st, consumed)
    local W = t.window
    local cur = st.cur
    if consumed then
        cur = cur + t.cost
    end
    -- floor((limit * W - prev * (W - elapsed) - cur * W) / W), never < 0.
    local remaining = 0
    local room = t.limit - cur
    if room > 0 then
        remaining = math.max(0, idiv(room * W - st.prev * (W - st.elapsed), W))
    end
    local reset = 0
    if cur > 0 then
        reset = (st.idx + 2) * W - t.now
    elseif st.prev > 0 then
        reset = (st.idx + 1) * W - t.now
    end
    return remaining, reset
end

function sliding_window_counter.retry(t, st)
    local W = t.window
    local room = t.limit - st.cur - t.cost
    if room >= 0 and st.prev > 0 then
        -- Fits later in this window, at the first elapsed with
        -- prev * (W - elapsed) <= room * W, i.e. W - elapsed <= room * W / prev.
        return st.idx * W + (W - idiv(room * W, st.prev)) - t.now
    end
    -- Only in the next window, where prev' = cur and cur' = 0.
    if st.cur == 0 then
        return (st.idx + 1) * W - t.now
    end
    return (st.idx + 1) * W + (W - idiv((t.limit - t.cost) * W, st.cur)) - t.now
end

function sliding_window_counter.commit(t, st)
    local key = t.keys[1]
    redis.call('HSET', key, 'w', fmt(st.idx), 'c', fmt(st.cur + t.cost),
        'p', fmt(st.prev))
    expire_in(key, (st.idx + 2) * t.window - t.now)
end
