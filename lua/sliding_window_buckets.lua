-- SPDX-License-Identifier: Apache-2.0
-- sliding_window_buckets.lua: the sliding window, counted in small buckets.
--
-- The window W is cut into n = W / P buckets of precision P µs (P divides
-- W, n <= 1000). Units taken are counted in the bucket of their time, which
-- starts at floor(t / P) * P; the count is the sum of the buckets that start
-- in [now_start - W + P, now_start], now_start being the start of the
-- current bucket. Exact to within P, with bounded memory (unlike the log)
-- and no estimate (unlike the counter).
--
-- State: HASH KEYS[1], field = the bucket's start (absolute µs, decimal),
-- value = units taken. Absolute starts keep their meaning when W or P
-- change (a reload): a bucket counts while its start is in the window.
-- Buckets older than the window are deleted only on commit.
-- Expiry: when the newest bucket leaves the window.
-- Figures: remaining = limit - count; reset = when the newest bucket
-- leaves; retry = the moment enough of the oldest buckets have left.
-- Report: as commit, past the limit if so (the current bucket). No refund:
-- which bucket counted the units given back is not known.

local sliding_window_buckets = { nkeys = 1 }

function sliding_window_buckets.capacity(t)
    return t.limit
end

function sliding_window_buckets.load(t)
    local cur = idiv(t.now, t.precision) * t.precision
    local oldest = cur - t.window + t.precision
    local flat = redis.call('HGETALL', t.key)
    local count, newest, live, counts, stale = 0, nil, nil, nil, nil
    for i = 1, #flat, 2 do
        local b = tonumber(flat[i])
        if b < oldest then
            stale = stale or {}
            stale[#stale + 1] = flat[i]
        elseif b <= cur then
            local c = tonumber(flat[i + 1])
            if not live then
                live, counts = {}, {}
            end
            live[#live + 1] = b
            counts[b] = c
            count = count + c
            if not newest or b > newest then
                newest = b
            end
        end
        -- A bucket after cur (a clock ahead of ours) is kept but not counted.
    end
    t.cur, t.count, t.newest, t.live, t.counts, t.stale = cur, count, newest, live, counts, stale
end

function sliding_window_buckets.allows(t)
    return t.count + t.cost <= t.limit
end

-- µs from now until the bucket starting at b leaves the window: the first
-- bucket start s with s - W + P > b (b + W for a start aligned to P).
local function bucket_leaves(t, b)
    return idiv_ceil(b + t.window - t.precision + 1, t.precision) * t.precision - t.now
end

function sliding_window_buckets.figures(t, consumed)
    local count, newest = t.count, t.newest
    if consumed and t.cost > 0 then
        count = count + t.cost
        newest = t.cur
    end
    local reset = 0
    if newest then
        reset = bucket_leaves(t, newest)
    end
    return max(0, t.limit - count), reset
end

function sliding_window_buckets.retry(t)
    -- Free the oldest buckets one by one until the request fits; cost <=
    -- limit, so it fits at the latest once all of them have left.
    local live = t.live
    table.sort(live)
    local left = t.count
    for i = 1, #live do
        left = left - t.counts[live[i]]
        if left + t.cost <= t.limit then
            return bucket_leaves(t, live[i])
        end
    end
    return 0 -- not reached: denied means some bucket holds units
end

function sliding_window_buckets.commit(t)
    redis.call('HINCRBY', t.key, fmt(t.cur), fmt(t.cost))
    if t.stale then
        call_chunked('HDEL', t.key, t.stale, 1)
    end
    expire_in(t.key, bucket_leaves(t, t.cur))
end

sliding_window_buckets.report = sliding_window_buckets.commit
