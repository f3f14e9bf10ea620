-- SPDX-License-Identifier: Apache-2.0
-- calendar_window.lua: a fixed window whose bounds are calendar days,
-- weeks, months or years in a time zone (a fixed_window tier with
-- `calendar:`). Redis knows no time zones, so the daemon computes the
-- bounds (src/lib/calendar.c) and sends four instants around its own clock
-- in place of window_us, "p:s:e:n" in µs: the window before [p, s), the
-- current one [s, e), the next [e, n). The script picks the one that holds
-- its `now` (Redis TIME under clock: redis), so a daemon whose clock is a
-- little off from Redis's still counts in the window Redis's clock is in:
-- exact across daemons. A `now` outside [p, n) (clocks a whole window
-- apart) is an error, never a guess.
--
-- State: STRING KEYS[1] "w:<s>:<e>:<n>": n units taken in the window
-- [s, e). Both ends must match for the count to be this window's, so a
-- window of another length (a reload from month to day, say) never shares
-- a count even when the two end together. One GET, one SET ... PX (or
-- PXAT, see common.lua's expiry_until) with the expiry at the window's end
-- plus slack.
-- Figures and retry as fixed_window's: reset and retry at the window's end.
-- Report and refund as fixed_window's, in the calendar window.

local calendar_window = { nkeys = 1 }

-- Reads the bounds word into t; false if it is not four ascending integers.
function calendar_window.parse_window(t, w)
    local p, s, e, n = match(w, '^(%d+):(%d+):(%d+):(%d+)$')
    p, s, e, n = tonumber(p), tonumber(s), tonumber(e), tonumber(n)
    if not (p and p < s and s < e and e < n and n <= 2 ^ 53) then
        return false
    end
    t.bounds_p, t.bounds_s, t.bounds_e, t.bounds_n = p, s, e, n
    t.window = e - s
    return true
end

function calendar_window.capacity(t)
    return t.limit
end

function calendar_window.load(t)
    local now, s, e = t.now, t.bounds_s, t.bounds_e
    if now < s then
        s, e = t.bounds_p, s
    elseif now >= e then
        s, e = e, t.bounds_n
    end
    if now < s or now >= e then
        error('ratelimitd: now ' .. now .. ' is outside the calendar bounds sent ['
            .. t.bounds_p .. ', ' .. t.bounds_n .. '): clocks a window apart')
    end
    t.window_start, t.window_end, t.n = s, e, 0
    local v = get_string(t.key)
    if v then
        local vs, ve, vn = match(v, '^w:(%d+):(%d+):(%d+)$')
        if tonumber(vs) == s and tonumber(ve) == e then
            t.n = tonumber(vn)
        end
    end
end

calendar_window.allows = fixed_window.allows
calendar_window.figures = fixed_window.figures
calendar_window.retry = fixed_window.retry

function calendar_window.commit(t)
    redis.call('SET', t.key, format(FMT_W, t.window_start, t.window_end, t.n + t.cost),
        expiry_until(t.now, t.window_end))
end

calendar_window.refunds = true

function calendar_window.report(t)
    local n = min(max(0, t.n + t.cost), EXACT_MAX)
    redis.call('SET', t.key, format(FMT_W, t.window_start, t.window_end, n),
        expiry_until(t.now, t.window_end))
end

-- Local leases: as fixed_window's, on the calendar window's bounds.
calendar_window.lease_avail = fixed_window.lease_avail
calendar_window.lease_until = fixed_window.lease_until

function calendar_window.lease_same(t, taken)
    return taken >= t.window_start
end
