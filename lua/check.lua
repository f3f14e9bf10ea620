-- check.lua: the entry point. Decides one HTTP request, every tier of every
-- check, atomically (Redis runs a script alone), in two passes: read and
-- decide everything, then write only if the request is allowed.
--
-- ARGV[1]  now in µs (decimal), or "" for the Redis server's TIME
-- ARGV[2]  "1" for a dry run (decide and report, write nothing), else "0"
-- ARGV[3]  N, the number of checks; then per check:
--            shadow ("0"/"1"), cost (integer >= 0), ntiers; then per tier:
--            algorithm, limit, window_us, burst (0 = default),
--            precision_us (0 unless sliding_window_buckets)
-- KEYS     per check, per tier, in order: sliding_window_log takes two (the
--          ZSET, then its sequence counter), every other algorithm one.
--
-- The request is allowed iff every tier of every non-shadow check allows.
-- A shadow check is decided the same way but never denies the request; its
-- tiers are taken (written) only if the request and the check both allow.
-- A denied request, a dry run and a cost of 0 write nothing.
--
-- Returns integers only (Redis truncates Lua numbers): {now_us,
-- request_allowed, then 7 per tier: allowed, limit, remaining, reset_us,
-- retry_us (-1: never, the cost exceeds the limit), delay_us, reason}.
-- A tier's figures are computed as if its cost were taken iff it is taken by
-- a real (not dry) run of this request, so a dry run reports exactly what
-- the real request would.

local ALGORITHMS = {
    fixed_window = fixed_window,
    sliding_window_log = sliding_window_log,
    sliding_window_counter = sliding_window_counter,
    sliding_window_buckets = sliding_window_buckets,
    token_bucket = token_bucket,
    gcra = gcra,
    leaky_bucket = leaky_bucket,
}

local REASON_NONE = 0
local REASON_COST_EXCEEDS_LIMIT = 1

-- ARGV[i] as an integer >= min; anything else is a bug in the caller.
local function arg_int(i, min)
    local v = tonumber(ARGV[i])
    if not v or v < min or v ~= math.floor(v) or v > 2 ^ 53 then
        error('ratelimitd: ARGV[' .. i .. '] must be an integer >= ' .. min
            .. ', got ' .. tostring(ARGV[i]))
    end
    return v
end

-- ARGV[i] as a boolean, from "0" or "1".
local function arg_flag(i)
    local v = ARGV[i]
    if v ~= '0' and v ~= '1' then
        error('ratelimitd: ARGV[' .. i .. '] must be 0 or 1, got ' .. tostring(v))
    end
    return v == '1'
end

local now
if ARGV[1] == '' then
    local time = redis.call('TIME')
    now = tonumber(time[1]) * 1000000 + tonumber(time[2])
else
    now = arg_int(1, 0)
end
local dry_run = arg_flag(2)

-- Parse the checks and hand each tier its keys.
local checks = {}
local argi, nkeys = 4, 0
for c = 1, arg_int(3, 0) do
    local check = { shadow = arg_flag(argi), cost = arg_int(argi + 1, 0), tiers = {} }
    local ntiers = arg_int(argi + 2, 1)
    argi = argi + 3
    for i = 1, ntiers do
        local alg = ALGORITHMS[ARGV[argi]]
        if not alg then
            error('ratelimitd: unknown algorithm ' .. tostring(ARGV[argi]))
        end
        local t = {
            alg = alg,
            now = now,
            cost = check.cost,
            limit = arg_int(argi + 1, 1),
            window = arg_int(argi + 2, 1),
            burst = arg_int(argi + 3, 0),
            precision = arg_int(argi + 4, 0),
            keys = {},
        }
        if alg == sliding_window_buckets
            and (t.precision < 1 or math.fmod(t.window, t.precision) ~= 0) then
            error('ratelimitd: precision_us must divide window_us')
        end
        for k = 1, alg.nkeys do
            t.keys[k] = KEYS[nkeys + k]
        end
        nkeys = nkeys + alg.nkeys
        argi = argi + 5
        check.tiers[i] = t
    end
    checks[c] = check
end
if nkeys ~= #KEYS or argi ~= #ARGV + 1 then
    error('ratelimitd: the checks need ' .. nkeys .. ' keys and ' .. (argi - 1)
        .. ' arguments, got ' .. #KEYS .. ' and ' .. #ARGV)
end

-- Pass 1: read every tier and decide. Every tier is read even after one has
-- denied, because every tier reports its figures.
local request_allowed = true
for _, check in ipairs(checks) do
    check.allowed = true
    for _, t in ipairs(check.tiers) do
        t.capacity = t.alg.capacity(t)
        t.st = t.alg.load(t)
        t.reason = REASON_NONE
        if t.cost == 0 then
            t.allowed = true
        elseif t.cost > t.capacity then
            -- Could never pass; also keeps cost * window below 2^53 in the
            -- algorithms, which are only asked about cost <= capacity.
            t.allowed = false
            t.reason = REASON_COST_EXCEEDS_LIMIT
        else
            t.allowed = t.alg.allows(t, t.st)
        end
        check.allowed = check.allowed and t.allowed
    end
    if not check.shadow and not check.allowed then
        request_allowed = false
    end
end

-- The figures, from the state read in pass 1, before anything is written.
local out = { now, request_allowed and 1 or 0 }
for _, check in ipairs(checks) do
    -- A non-shadow check of an allowed request is always allowed.
    local consumed = request_allowed and check.allowed
    for _, t in ipairs(check.tiers) do
        local remaining, reset = t.alg.figures(t, t.st, consumed)
        local retry, delay = 0, 0
        if t.reason == REASON_COST_EXCEEDS_LIMIT then
            retry = -1
        elseif not t.allowed then
            retry = t.alg.retry(t, t.st)
        elseif t.cost > 0 and t.alg.delay then
            delay = t.alg.delay(t, t.st)
        end
        local n = #out
        out[n + 1] = t.allowed and 1 or 0
        out[n + 2] = t.capacity
        out[n + 3] = remaining
        out[n + 4] = reset
        out[n + 5] = retry
        out[n + 6] = delay
        out[n + 7] = t.reason
    end
end

-- Pass 2: take the cost, only for a real run of an allowed request.
if request_allowed and not dry_run then
    for _, check in ipairs(checks) do
        if check.allowed and check.cost > 0 then
            for _, t in ipairs(check.tiers) do
                t.alg.commit(t, t.st)
            end
        end
    end
end

return out
