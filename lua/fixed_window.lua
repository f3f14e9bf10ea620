-- fixed_window.lua: at most `limit` units per aligned window of window_us.
--
-- Time is cut into windows [k * W, (k + 1) * W); each window counts from 0.
-- Cheap and exact, but a client can spend 2 * limit around a boundary.
--
-- State: HASH KEYS[1] {w = window index floor(now / W), n = units taken}.
-- A stored w other than the current index means the count is 0: no need to
-- reset anything when a window ends.
-- Expiry: the end of the window (plus slack); after that w is stale anyway.
-- Figures: remaining = limit - n; reset = end of window if n > 0; retry =
-- end of window (the next window starts empty, and cost <= limit).

local fixed_window = { nkeys = 1 }

function fixed_window.capacity(t)
    return t.limit
end

function fixed_window.load(t)
    local idx = idiv(t.now, t.window)
    local v = redis.call('HMGET', t.keys[1], 'w', 'n')
    local n = 0
    if tonumber(v[1]) == idx then
        n = tonumber(v[2]) or 0
    end
    return { idx = idx, n = n, window_end = (idx + 1) * t.window }
end

function fixed_window.allows(t, st)
    return st.n + t.cost <= t.limit
end

function fixed_window.figures(t, st, consumed)
    local n = st.n
    if consumed then
        n = n + t.cost
    end
    local reset = 0
    if n > 0 then
        reset = st.window_end - t.now
    end
    return math.max(0, t.limit - n), reset
end

function fixed_window.retry(t, st)
    return st.window_end - t.now
end

function fixed_window.commit(t, st)
    local key = t.keys[1]
    redis.call('HSET', key, 'w', fmt(st.idx), 'n', fmt(st.n + t.cost))
    expire_in(key, st.window_end - t.now)
end
