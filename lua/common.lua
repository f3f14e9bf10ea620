-- SPDX-License-Identifier: Apache-2.0
-- common.lua: helpers shared by every algorithm.
--
-- The build concatenates common.lua, the algorithm files and check.lua
-- into one chunk, twice (lua/embed.sh): as the EVAL script, which ends with
-- `return decide(KEYS, ARGV)`, and as a Redis Function library, which ends
-- by registering decide. In the library the chunk runs once, at FUNCTION
-- LOAD: every function below is defined once, and a call only runs decide.
-- Nothing here is global (Redis forbids new globals in both forms), and
-- nothing at the top level calls Redis (a library may not while loading).
--
-- Arithmetic: Lua 5.1 numbers are doubles, exact for integers up to 2^53.
-- The daemon validates every tier so that capacity * window_us and
-- limit * window_us stay <= 2^53; every intermediate value in the algorithms
-- is kept an integer in that range, and every division goes through idiv or
-- idiv_ceil below, never through a bare `/`.
--
-- Each algorithm file defines one table with the same fields, which check.lua
-- drives. t is one tier: its settings t.limit, t.window, t.burst,
-- t.precision, t.capacity (kept from call to call with the parsed policy,
-- see check.lua), and the call's t.now, t.cost, t.key (and t.key2 for a
-- second key); load stores the algorithm's state in t as well, so nothing
-- may read a field of the state that its own load did not set this call.
--   nkeys                  how many KEYS the tier consumes
--   capacity(t)            the figure reported as `limit`
--   load(t)                reads the tier's state as of t.now (reads only)
--   allows(t)              the decision, only asked when 0 < cost <= capacity
--   figures(t, consumed) -> remaining, reset_us
--                          as if the request's cost were taken iff consumed
--   retry(t)               µs until this request would be allowed, only
--                          asked when denied with cost <= capacity
--   delay(t)               (optional) µs the allowed request must wait
--   commit(t)              takes the cost: writes the state and its expiry
--   report(t)              (a report, see check.lua) charges t.cost with no
--                          decision, past the limit if so (a debt), after
--                          load; writes the state and its expiry
--   refunds                true if report also takes a cost < 0 (gives
--                          back, exactly, never below nothing used)
--
-- Stored state never depends on settings the reader cannot know: times are
-- absolute µs, and a value scaled by the window is stored with it, so a tier
-- whose settings changed (a reload) reads it correctly. A state string
-- starts with its algorithm's letter (f, c, t, g), so that a tier whose
-- algorithm changed reads another's state as absent.

-- The library functions used on every call, as upvalues: bound by the
-- first call (decide calls bind_globals), as Redis 7.0 lets a library see
-- no global at all while it loads; in the Function form that is once.
local fmod, floor, max, min, format, match, gmatch, tonumber, type

-- The formats of the state strings (f: fixed_window, c: counter, t: token
-- bucket, g: gcra, w: calendar window) and of one integer. '%d' is twice as fast as '%.0f' and
-- exact where Lua's integer format is 64 bits wide (it is checked); else
-- they fall back to '%.0f'.
local FMT_INT, FMT_F, FMT_C, FMT_T, FMT_G, FMT_W

-- Whether SET takes PXAT (Redis 6.2+). redis.REDIS_VERSION_NUM exists from
-- Redis 7.0 on: older servers (Redis 6.0, KeyDB, which run the EVAL form)
-- get PX, which every Redis since 2.6.12 takes.
local set_takes_pxat = false

local function bind_globals()
    local v = redis.REDIS_VERSION_NUM
    set_takes_pxat = _G.type(v) == 'number' and v >= 0x060200
    fmod, floor, max, min = math.fmod, math.floor, math.max, math.min
    format, match, gmatch = string.format, string.match, string.gmatch
    tonumber, type = _G.tonumber, _G.type
    local int = '%d'
    if format(int, 2 ^ 53) ~= '9007199254740992' then
        int = '%.0f'
    end
    FMT_INT = int
    FMT_F = 'f:' .. int .. ':' .. int
    FMT_C = 'c:' .. int .. ':' .. int .. ':' .. int
    FMT_T = 't:' .. int .. ':' .. int .. ':' .. int
    FMT_G = 'g:' .. int .. ':' .. int .. ':' .. int
    FMT_W = 'w:' .. int .. ':' .. int .. ':' .. int
end

-- The largest integer a double holds exactly: validated settings keep every
-- product below it, and a report's debt saturates at it (check.lua).
local EXACT_MAX = 2 ^ 53

-- Every key written lives this long after its state stops mattering: covers
-- clock skew between daemons and the time between a script and the next.
local EXPIRY_SLACK_MS = 1000

-- A local lease's block of a bucket (token_bucket, gcra) is spent within
-- this long of being taken (lua/token_bucket.lua's lease_until).
local LEASE_BUCKET_SPAN_US = 1000000

-- How many members one ZADD/HDEL takes at most: unpack() is bounded by the
-- Lua C stack (a few thousand values).
local CALL_CHUNK = 512

-- floor(a / b), exactly, for integers |a| <= 2^53 and 0 < b <= 2^53.
-- Exact by construction rather than by a rounding argument: math.fmod gives
-- the exact remainder (IEEE fmod never rounds), a - r is then a multiple of
-- b no larger than |a|, so the division is exact; the truncated quotient is
-- then corrected by one for a negative a. (math.floor(a / b) corrected by
-- +-1 against q * b works too, but q * b may itself round near 2^53.)
local function idiv(a, b)
    local r = fmod(a, b) -- sign of a, |r| < b
    local q = (a - r) / b
    if r < 0 then
        q = q - 1
    end
    return q
end

-- ceil(a / b), exactly, same ranges as idiv.
local function idiv_ceil(a, b)
    local r = fmod(a, b)
    local q = (a - r) / b
    if r > 0 then
        q = q + 1
    end
    return q
end

-- An integer as a plain decimal string: tostring() would print 1.7e+15.
local function fmt(n)
    return format(FMT_INT, n)
end

-- The PX/PEXPIRE argument for a key that matters `us` more microseconds
-- (rounded up to ms), plus slack: a number, which redis.call formats
-- exactly (%.17g; a PX here is below 2^53 / 1000 ms anyway).
local function px_in(us)
    return idiv_ceil(us, 1000) + EXPIRY_SLACK_MS
end

-- Whether the call's now is the Redis server's clock (`clock: redis`: TIME,
-- see check.lua's arg_now), set for every request. Then an expiry can be
-- absolute (PXAT): the windows are cut by the clock Redis expires keys by.
local now_is_server = false

-- An integer as a decimal string, kept for the value last asked for (an
-- expiry argument: see expiry_until).
local int_last, int_last_s = nil, nil
local function int_string(n)
    if n ~= int_last then
        int_last, int_last_s = n, format(FMT_INT, n)
    end
    return int_last_s
end

-- SET's expiry option and its argument for state that matters until
-- end_us (absolute µs, > now), rounded up to ms, plus slack: `PXAT end`
-- when now is Redis's TIME, else `PX end - now`. Either is the same from
-- one write to the next while a window lasts (PXAT; PX within one batch of
-- `clock: redis`, or one millisecond), so the argument is a kept string:
-- a number would make Redis format it (%.17g) on every call, and a PX
-- makes Redis add its clock. (fixed_window, calendar_window,
-- sliding_window_counter; measured with bench/batch_redis_cpu.py
-- LIBRARIES=.)
local function expiry_until(now, end_us)
    if now_is_server and set_takes_pxat then
        return 'PXAT', int_string(idiv_ceil(end_us, 1000) + EXPIRY_SLACK_MS)
    end
    return 'PX', int_string(idiv_ceil(end_us - now, 1000) + EXPIRY_SLACK_MS)
end

-- Makes key live for `us` more microseconds (rounded up to ms), plus slack.
local function expire_in(key, us)
    redis.call('PEXPIRE', key, px_in(us))
end

-- The string value of key, or nil if it is missing or not a string (state
-- of another layout, e.g. written by an older daemon: read as absent, and
-- replaced on the next commit, since SET overwrites any type).
local function get_string(key)
    local v = redis.pcall('GET', key)
    if type(v) == 'string' then
        return v
    end
    return nil
end

-- Calls `cmd key` with args[1..n] in chunks of CALL_CHUNK * per values, so
-- each call gets whole groups of `per` values (ZADD takes score + member).
local function call_chunked(cmd, key, args, per)
    local n = #args
    local step = CALL_CHUNK * per
    for i = 1, n, step do
        redis.call(cmd, key, unpack(args, i, min(i + step - 1, n)))
    end
end
