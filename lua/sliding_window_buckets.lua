-- sliding_window_buckets.lua: the sliding window, counted in small buckets.
--
-- The window W is cut into n = W / P buckets of precision P µs (P divides
-- W, n <= 1000). Units taken are counted in the bucket of their time,
-- floor(t / P); the count is the sum of the n buckets ending with the current
-- one, [cur - n + 1, cur]. Exact to within P, with bounded memory (unlike
-- the log) and no estimate (unlike the counter).
--
-- State: HASH KEYS[1], field = bucket index (decimal), value = units taken.
-- Buckets older than the window are deleted only on commit.
-- Expiry: when the newest bucket leaves the window, (newest + n) * P.
-- Figures: remaining = limit - count; reset = (newest + n) * P - now;
-- retry = the moment enough of the oldest buckets have left the window.

local sliding_window_buckets = { nkeys = 1 }

function sliding_window_buckets.capacity(t)
    return t.limit
end

function sliding_window_buckets.load(t)
    local n = idiv(t.window, t.precision)
    local cur = idiv(t.now, t.precision)
    local oldest = cur - n + 1
    local flat = redis.call('HGETALL', t.keys[1])
    local live, stale, count = {}, {}, 0
    for i = 1, #flat, 2 do
        local b = tonumber(flat[i])
        if b < oldest then
            stale[#stale + 1] = flat[i]
        elseif b <= cur then
            local c = tonumber(flat[i + 1])
            live[#live + 1] = { b, c }
            count = count + c
        end
        -- A bucket after cur (a clock ahead of ours) is kept but not counted.
    end
    -- Oldest first, for retry's walk and so that the last one is the newest.
    table.sort(live, function(x, y) return x[1] < y[1] end)
    return { n = n, cur = cur, live = live, stale = stale, count = count }
end

function sliding_window_buckets.allows(t, st)
    return st.count + t.cost <= t.limit
end

-- µs from now until bucket b leaves the window.
local function bucket_leaves(t, st, b)
    return (b + st.n) * t.precision - t.now
end

function sliding_window_buckets.figures(t, st, consumed)
    local count = st.count
    local newest = nil
    if #st.live > 0 then
        newest = st.live[#st.live][1]
    end
    if consumed and t.cost > 0 then
        count = count + t.cost
        newest = st.cur
    end
    local reset = 0
    if newest then
        reset = bucket_leaves(t, st, newest)
    end
    return math.max(0, t.limit - count), reset
end

function sliding_window_buckets.retry(t, st)
    -- Free the oldest buckets one by one until the request fits; cost <=
    -- limit, so it fits at the latest once all of them have left.
    local left = st.count
    for _, bc in ipairs(st.live) do
        left = left - bc[2]
        if left + t.cost <= t.limit then
            return bucket_leaves(t, st, bc[1])
        end
    end
    return 0 -- not reached: denied means some bucket holds units
end

function sliding_window_buckets.commit(t, st)
    local key = t.keys[1]
    redis.call('HINCRBY', key, fmt(st.cur), fmt(t.cost))
    if #st.stale > 0 then
        call_chunked('HDEL', key, st.stale, 1)
    end
    expire_in(key, bucket_leaves(t, st, st.cur))
end
