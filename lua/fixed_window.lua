-- SPDX-License-Identifier: Apache-2.0
-- fixed_window.lua: at most `limit` units per aligned window of window_us.
--
-- Time is cut into windows [k * W, (k + 1) * W); each window counts from 0.
-- Cheap and exact, but a client can spend 2 * limit around a boundary.
--
-- State: STRING KEYS[1] "f:<e>:<n>": n units taken in the window that ends at
-- e (absolute µs). A stored e other than the current window's end means the
-- count is 0: no need to reset anything when a window ends, and a window
-- whose length changed (a reload) starts from 0 unless it ends at the same
-- instant. One GET to read, one SET ... PX (PXAT with `clock: redis`) to write.
-- Expiry: the end of the window (plus slack); after that e is stale anyway.
-- Figures: remaining = limit - n; reset = end of window if n > 0; retry =
-- end of window (the next window starts empty, and cost <= limit).
-- Report: n += cost, past the limit if so: denied until the window ends,
-- when the count starts from 0 again (an overage is not carried into the
-- next window); a refund (cost < 0) takes back from this window's count,
-- never below 0 (units counted in an earlier window are already forgotten).

local fixed_window = { nkeys = 1 }

function fixed_window.capacity(t)
    return t.limit
end

function fixed_window.load(t)
    -- now >= 0 (ARGV[1] is validated, TIME is past 1970), so fmod is the
    -- plain remainder: one call cheaper than idiv, which also covers < 0.
    local now, w = t.now, t.window
    local e = now - fmod(now, w) + w
    t.window_end, t.n = e, 0
    local v = get_string(t.key)
    if v then
        local se, sn = match(v, '^f:(%d+):(%d+)$')
        if tonumber(se) == e then
            t.n = tonumber(sn)
        end
    end
end

function fixed_window.allows(t)
    return t.n + t.cost <= t.limit
end

function fixed_window.figures(t, consumed)
    local n = t.n
    if consumed then
        n = n + t.cost
    end
    -- A limit of 0 (envoyproxy/ratelimit's requests_per_unit: 0) is
    -- always full: it resets when the window ends, as there.
    if n == 0 and t.limit > 0 then
        return t.limit, 0
    end
    -- n > limit after a cut of the limit (a reload): none remaining.
    local remaining = t.limit - n
    if remaining < 0 then
        remaining = 0
    end
    return remaining, t.window_end - t.now
end

function fixed_window.retry(t)
    return t.window_end - t.now
end

-- The state strings "f:<e>:<n>" of counts up to F_KEPT_N, by window end
-- e, for at most F_KEPT_ENDS ends at once (all dropped when one more comes):
-- with spread keys most writes of a window store one of a few counts (1 for
-- a new key), and a kept string saves a format and a new string (garbage)
-- per write.
local F_KEPT, nf_kept = {}, 0
local F_KEPT_N, F_KEPT_ENDS = 64, 8

local function state_string(e, n)
    local by_n = F_KEPT[e]
    if not by_n then
        if nf_kept >= F_KEPT_ENDS then
            F_KEPT, nf_kept = {}, 0
        end
        by_n = {}
        F_KEPT[e], nf_kept = by_n, nf_kept + 1
    end
    local s = by_n[n]
    if not s then
        s = format(FMT_F, e, n)
        if n <= F_KEPT_N then
            by_n[n] = s
        end
    end
    return s
end

function fixed_window.commit(t)
    redis.call('SET', t.key, state_string(t.window_end, t.n + t.cost),
        expiry_until(t.now, t.window_end))
end

fixed_window.refunds = true

function fixed_window.report(t)
    local n = min(max(0, t.n + t.cost), EXACT_MAX)
    redis.call('SET', t.key, state_string(t.window_end, n),
        expiry_until(t.now, t.window_end))
end

-- Local leases (lua/check.lua's take_block and give_back): the units a
-- block may take now, when it must be spent by (the window's end: never in
-- a later window), and whether a block taken at `taken` (µs) may be given
-- back now (the same window only).
function fixed_window.lease_avail(t)
    return t.limit - t.n
end

function fixed_window.lease_until(t)
    return t.window_end
end

function fixed_window.lease_same(t, taken)
    return taken >= t.window_end - t.window
end
