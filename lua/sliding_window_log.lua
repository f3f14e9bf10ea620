-- SPDX-License-Identifier: Apache-2.0
-- sliding_window_log.lua: at most `limit` units in any window_us ending now.
--
-- Exact sliding window: remembers the time of every unit taken.
--
-- State: ZSET KEYS[1] with one member per unit of cost, scored by the time
-- it was taken (absolute µs, so any change of settings reads it right); the
-- units that count are those scored after now - W (including any from a
-- daemon whose clock is ahead of ours).
-- Members must be unique even when two requests (from two daemons) land on
-- the same µs, so a member is "<now>-<seq>", seq coming from INCRBY on the
-- sequence counter KEYS[2].
-- Old members are trimmed only on commit: a read never writes.
-- Expiry (both keys): W after the newest member (plus slack).
-- Figures: remaining = limit - count; reset = newest + W - now; retry = the
-- moment enough of the oldest units have left the window.
-- Report: as commit, with at most `limit` members: every unit of a report
-- leaves the window at the same moment, so more would deny exactly the same
-- requests (unless a reload raises the limit before they leave). No
-- refund: which members to take back is not known.

local sliding_window_log = { nkeys = 2 }

function sliding_window_log.capacity(t)
    return t.limit
end

function sliding_window_log.load(t)
    t.from = '(' .. fmt(t.now - t.window) -- "score > now - W"
    t.count = redis.call('ZCOUNT', t.key, t.from, '+inf')
end

function sliding_window_log.allows(t)
    return t.count + t.cost <= t.limit
end

-- The score of the newest member in the window, or nil; kept in t.newest
-- for commit: the newest member after it is max(newest, now).
local function log_newest(t)
    local newest = nil
    if t.count > 0 then
        local top = redis.call('ZREVRANGEBYSCORE', t.key, '+inf', t.from,
            'WITHSCORES', 'LIMIT', 0, 1)
        newest = tonumber(top[2])
    end
    t.newest = newest
    return newest
end

function sliding_window_log.figures(t, consumed)
    local count = t.count
    local newest = log_newest(t)
    if consumed and t.cost > 0 then
        count = count + t.cost
        -- max(): a member from a daemon whose clock is ahead can be newer.
        newest = max(newest or t.now, t.now)
    end
    local reset = 0
    if newest then
        reset = newest + t.window - t.now
    end
    return max(0, t.limit - count), reset
end

function sliding_window_log.retry(t)
    -- With the in-window scores s_1 <= ... <= s_count, the request fits once
    -- count + cost - limit of them have left: at s_(count+cost-limit) + W.
    local k = t.count + t.cost - t.limit
    local r = redis.call('ZRANGEBYSCORE', t.key, t.from, '+inf', 'WITHSCORES',
        'LIMIT', fmt(k - 1), 1)
    return tonumber(r[2]) + t.window - t.now
end

function sliding_window_log.commit(t)
    local key, seqkey = t.key, t.key2
    redis.call('ZREMRANGEBYSCORE', key, '-inf', fmt(t.now - t.window))
    local last = redis.call('INCRBY', seqkey, fmt(t.cost))
    local now = fmt(t.now)
    if t.cost == 1 then
        redis.call('ZADD', key, now, now .. '-' .. fmt(last))
    else
        local args = {}
        for seq = last - t.cost + 1, last do
            args[#args + 1] = now
            args[#args + 1] = now .. '-' .. fmt(seq)
        end
        call_chunked('ZADD', key, args, 2)
    end
    -- The newest member is now, unless a clock ahead of ours wrote one later
    -- (figures, always run before commit, read the newest in the window).
    local ttl = max(t.newest or t.now, t.now) + t.window - t.now
    local px = px_in(ttl)
    redis.call('PEXPIRE', key, px)
    redis.call('PEXPIRE', seqkey, px)
end

function sliding_window_log.report(t)
    t.cost = min(t.cost, t.limit)
    log_newest(t)
    sliding_window_log.commit(t)
end
