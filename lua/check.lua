-- SPDX-License-Identifier: Apache-2.0
-- check.lua: the entry point, decide(keys, argv). Decides one HTTP request,
-- every tier of every check, atomically (Redis runs a script or a function
-- alone), in two passes: read and decide everything, then write only if the
-- request is allowed. The EVAL script ends with `return decide(KEYS, ARGV)`;
-- the Function library registers decide itself (lua/embed.sh adds either).
--
-- argv[1]  now in µs (decimal), or "" for the Redis server's TIME
-- argv[2]  "1" for a dry run (decide and report, write nothing), else "0";
--          "2" for a dry run whose reply also carries the figures of a
--          denied request (see the reply below); "3" for a report (see
--          below)
-- then two per check:
--   cost     an integer >= 0
--   policy   its settings, space-separated: shadow ("0"/"1"), then five
--            per tier: algorithm, limit, window_us, burst (0 = default),
--            precision_us (0 unless sliding_window_buckets); e.g.
--            "0 fixed_window 100 60000000 0 0" (concurrency: window_us is
--            the lease timeout; a calendar tier is "calendar_window limit
--            p:s:e:n 0 0", four bounds in µs in place of window_us, see
--            lua/calendar_window.lua)
--   then, iff the count of ARGV is odd, the lease nonce: the random part
--            of every lease this request takes (22 of [A-Za-z0-9_-])
-- keys     per check, per tier, in order: sliding_window_log takes two (the
--          ZSET, then its sequence counter), every other algorithm one.
--
-- A policy's settings are the same string on every call until a reload
-- changes them, so they are parsed and validated once and kept, by string,
-- in the library (the Function form's chunk lives on): a call parses only
-- its header and costs, two arguments per check instead of 3 + 5 per tier.
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
-- With argv[2] "2", 2 more per tier follow, in tier order: remaining and
-- reset_us as if nothing were taken, i.e. the tier's figures in a request
-- that another node's checks deny (the Cluster backend's first phase,
-- src/backend/redis/backend_cluster.c: allowed here, denied overall). The
-- other 5 figures do not depend on whether the cost is taken.
--
-- A report (argv[2] "3", POST /report): usage known only after the answer.
-- Every tier of every check is charged its cost with no decision (the
-- algorithm's report: past the limit if so, a debt that later checks wait
-- out; a cost < 0 gives back where the algorithm's `refunds` says it can),
-- then every tier reports the figures a dry run of cost 1 sees right after
-- the charge: allowed is whether a unit would pass now, retry_us how long
-- until one does. request_allowed: every tier of every non-shadow check
-- would let a unit pass. Costs may be negative (>= -2^53) only here.
--
-- Local leases (src/core/local_lease.h): one check, every tier of an
-- algorithm with lease_avail (fixed_window, calendar_window, token_bucket,
-- gcra).
-- argv[2] "L<want>": take a block. Decided as a real run of the check's
-- cost; if allowed, takes g units of every tier instead, cost <= g <= want,
-- as many as every tier has left; the figures are those after g is taken.
-- Two integers follow the usual reply: g (0 if denied) and the time the
-- block must be spent by (the earliest tier's lease_until; 0 if denied).
-- argv[2] "G<taken>": give a block back: the check's cost (> 0) returns to
-- every tier that is still in the window of time `taken` (the block's
-- take's now_us; buckets always, no higher than full), then the figures
-- of a cost of 1 as a report's. Two integers follow: the units given back
-- to every tier (the cost, or 0 if a tier's window has passed) and 0.

local ALGORITHMS = {
    fixed_window = fixed_window,
    sliding_window_log = sliding_window_log,
    sliding_window_counter = sliding_window_counter,
    sliding_window_buckets = sliding_window_buckets,
    token_bucket = token_bucket,
    gcra = gcra,
    leaky_bucket = leaky_bucket,
    concurrency = concurrency,
    calendar_window = calendar_window,
}

local REASON_NONE = 0
local REASON_COST_EXCEEDS_LIMIT = 1

-- s as an integer >= least, or nil. (v % 1 rather than floor(v): no call;
-- NaN and inf fail it.)
local function int_of(s, least)
    local v = tonumber(s)
    if v and v >= least and v % 1 == 0 and v <= EXACT_MAX then
        return v
    end
    return nil
end

-- int_of(s, least) for the strings that calls repeat (a batch's counts,
-- the costs): what tonumber made of s is kept, by s, so that a repeated
-- string costs a table lookup instead of a tonumber (a strtod). Emptied at
-- INTS_MAX strings: distinct strings cost a little more, never an answer.
local INTS, nints = {}, 0
local INTS_MAX = 1000

local function int_of_kept(s, least)
    if s == nil then
        return nil -- an argument past the end (nil is no table key)
    end
    local v = INTS[s]
    if v == nil then
        v = int_of(s, -EXACT_MAX) or false
        if nints >= INTS_MAX then
            INTS, nints = {}, 0
        end
        INTS[s], nints = v, nints + 1
    end
    if v and v >= least then
        return v
    end
    return nil
end

-- A request's arguments are argv[ao + 1 .. ao + na] (a batch's requests
-- share its ARGV, and its KEYS the same way: no copies), and its i-th is
-- named ARGV[i] in errors, as in a call of its own.

-- Raises the error for the request's i-th argument, which is not an integer
-- >= least: a bug in the caller. Used as
-- `int_of(argv[ao + i], least) or bad_int(argv, ao, i, least)`.
local function bad_int(argv, ao, i, least)
    error('ratelimitd: ARGV[' .. i .. '] must be an integer >= ' .. least
        .. ', got ' .. tostring(argv[ao + i]))
end

-- The request's i-th argument as a boolean, from "0" or "1".
local function arg_flag(argv, ao, i)
    local v = argv[ao + i]
    if v ~= '0' and v ~= '1' then
        error('ratelimitd: ARGV[' .. i .. '] must be 0 or 1, got ' .. tostring(v))
    end
    return v == '1'
end

-- The server's TIME of the batch being decided (decide_batch): false
-- until a request of the batch reads it, nil outside a batch.
local batch_time = nil

-- The current time in µs: the request's first argument, or the server's
-- TIME if it is "". In a
-- batch, TIME is read once, by the first request that needs it: the batch
-- runs alone, so every request in it is decided at the instant the call
-- started, as Redis itself sees the keys' expiry then (Redis 7 freezes a
-- script's time for that). Saves a TIME per request. Sets now_is_server
-- (common.lua) for the request.
local function arg_now(argv, ao)
    now_is_server = argv[ao + 1] == ''
    if now_is_server then
        if batch_time then
            return batch_time
        end
        -- Arithmetic converts TIME's two decimal strings: no tonumber calls.
        local time = redis.call('TIME')
        local now = time[1] * 1000000 + time[2]
        if batch_time == false then
            batch_time = now
        end
        return now
    end
    return int_of(argv[ao + 1], 0) or bad_int(argv, ao, 1, 0)
end

-- One tier's settings from words[i .. i + 4] of a policy string, validated.
local function parse_tier(s, words, i)
    local alg = ALGORITHMS[words[i]]
    if not alg then
        error('ratelimitd: unknown algorithm ' .. tostring(words[i]) .. ' in "' .. s .. '"')
    end
    local t = { alg = alg, nkeys = alg.nkeys, name = words[i] }
    -- A fixed window may have a limit of 0 (envoyproxy/ratelimit's
    -- requests_per_unit: 0, which denies every request); other algorithms
    -- divide by it.
    t.limit = int_of(words[i + 1],
        (alg == fixed_window or alg == calendar_window) and 0 or 1)
    if alg.parse_window then
        -- calendar_window: the window's bounds, not its length
        t.window = alg.parse_window(t, words[i + 2]) and 1 or nil
    else
        t.window = int_of(words[i + 2], 1)
    end
    t.burst = int_of(words[i + 3], 0)
    t.precision = int_of(words[i + 4], 0)
    if not (t.limit and t.window and t.burst and t.precision) then
        error('ratelimitd: limit, window_us, burst and precision_us must be integers'
            .. ' (window >= 1, limit >= 1, or >= 0 for fixed_window) in "' .. s .. '"')
    end
    if alg == sliding_window_buckets
        and (t.precision < 1 or fmod(t.window, t.precision) ~= 0) then
        error('ratelimitd: precision_us must divide window_us in "' .. s .. '"')
    end
    t.capacity = alg.capacity(t)
    return t
end

-- A policy string parsed: {shadow, ntiers, [1 .. ntiers] = tiers}, each
-- tier a table with its settings (alg, nkeys, limit, window, burst,
-- precision, capacity) to which a call adds its own fields.
local function parse_policy(s)
    local words, n = {}, 0
    for w in gmatch(s, '%S+') do
        n = n + 1
        words[n] = w
    end
    local ntiers = (n - 1) / 5
    if (words[1] ~= '0' and words[1] ~= '1') or ntiers < 1 or ntiers ~= floor(ntiers) then
        error('ratelimitd: a policy is "shadow" then 5 words per tier, got "' .. s .. '"')
    end
    local policy = { shadow = words[1] == '1', ntiers = ntiers }
    for i = 1, ntiers do
        policy[i] = parse_tier(s, words, 2 + 5 * (i - 1))
    end
    return policy
end

-- The policies parsed so far, by their string; emptied when it reaches
-- POLICIES_MAX strings, which only many reloads, many daemons of different
-- configurations sharing one Redis, or per-key overrides with more than
-- that many distinct tier sets in use would reach (then a call parses its
-- policies again: slower, never wrong).
local POLICIES, npolicies = {}, 0
local POLICIES_MAX = 1000

-- Which call this is: a policy's `call` says which call last used it.
local ncalls = 0

-- The policy for s when POLICIES[s] cannot serve this call: s is new (it
-- is parsed and kept), or this call already uses POLICIES[s] (two keys of
-- one policy: its tier tables carry one call's fields, so the second gets
-- a parse of its own).
local function policy_parsed(s)
    local policy = parse_policy(s)
    if not POLICIES[s] then
        if npolicies >= POLICIES_MAX then
            POLICIES, npolicies = {}, 0
        end
        POLICIES[s], npolicies = policy, npolicies + 1
    end
    return policy
end

-- The checks and tiers of the call being decided, reused from call to call
-- (in the Function form the chunk runs once, so these live on: allocating
-- fewer tables per call is most of what a call costs beyond its Redis
-- commands). Entries past the call's counts are left over from earlier
-- calls and never read; every field an algorithm reads is a setting, set
-- by parse, or set by its own load before it is read.
local CHECKS, TIERS = {}, {}

-- Parses the checks of the request (keys[ko + 1 .. ko + nk], argv[ao + 1
-- .. ao + na]) into CHECKS[1..nchecks], each {shadow, cost, first, last},
-- TIERS[first..last] being its tiers. Returns nchecks and the number of
-- tiers in all.
local function parse(keys, ko, nk, argv, ao, na, now, least_cost)
    local nargs = na
    -- An odd count: the last is the lease nonce (concurrency.lua).
    local nonce = nil
    if nargs % 2 == 1 then
        nonce = argv[ao + nargs]
        nargs = nargs - 1
        if #nonce ~= 22 or not match(nonce, '^[%w_-]+$') then
            error('ratelimitd: the lease nonce must be 22 of [A-Za-z0-9_-], got '
                .. tostring(nonce))
        end
    end
    if nargs < 2 then
        error('ratelimitd: ARGV is now, dry_run, then cost and policy per check'
            .. ' (and the lease nonce); got ' .. na .. ' arguments')
    end
    ncalls = ncalls + 1
    local nkeys, ntiers = ko, 0
    for c = 1, nargs / 2 - 1 do
        local check = CHECKS[c]
        if not check then
            check = {}
            CHECKS[c] = check
        end
        local cost = int_of_kept(argv[ao + 2 * c + 1], least_cost)
            or bad_int(argv, ao, 2 * c + 1, least_cost)
        local s = argv[ao + 2 * c + 2]
        local policy = POLICIES[s]
        if not policy or policy.call == ncalls then
            policy = policy_parsed(s)
        end
        policy.call = ncalls
        check.shadow, check.cost, check.first = policy.shadow, cost, ntiers + 1
        for i = 1, policy.ntiers do
            local t = policy[i]
            t.now, t.cost, t.key, t.key2 = now, cost, keys[nkeys + 1], keys[nkeys + 2]
            t.nonce = nonce
            nkeys = nkeys + t.nkeys
            ntiers = ntiers + 1
            TIERS[ntiers] = t
        end
        check.last = ntiers
    end
    -- (A tier past the request's keys read its neighbour's, or nil: never
    -- used, as this refuses the request first.)
    if nkeys - ko ~= nk then
        error('ratelimitd: the checks need ' .. nkeys - ko .. ' keys, got ' .. nk)
    end
    return nargs / 2 - 1, ntiers
end

-- Pass 1 for one tier: reads its state and decides.
local function read_and_decide(t)
    local alg = t.alg
    alg.load(t)
    t.reason = REASON_NONE
    if t.cost == 0 then
        t.allowed = true
    elseif t.cost > t.capacity then
        -- Could never pass; also keeps cost * window below 2^53 in the
        -- algorithms, which are only asked about cost <= capacity.
        t.allowed = false
        t.reason = REASON_COST_EXCEEDS_LIMIT
    else
        t.allowed = alg.allows(t)
    end
    return t.allowed
end

-- Stores one tier's 7 figures in out[n + 1 .. n + 7], from the state read
-- in pass 1.
local function report(out, n, t, consumed)
    local alg = t.alg
    local remaining, reset = alg.figures(t, consumed)
    local retry, delay = 0, 0
    if t.reason == REASON_COST_EXCEEDS_LIMIT then
        retry = -1
    elseif not t.allowed then
        retry = alg.retry(t)
    elseif t.cost > 0 and alg.delay then
        delay = alg.delay(t)
    end
    out[n + 1] = t.allowed and 1 or 0
    out[n + 2] = t.capacity
    out[n + 3] = remaining
    out[n + 4] = reset
    out[n + 5] = retry
    out[n + 6] = delay
    out[n + 7] = t.reason
end

-- The reply, reused from call to call like CHECKS (Redis converts it when
-- decide returns); nout is how many integers it held last.
local OUT, nout = {}, 0

-- The reply, sized to n integers (it ends at its first nil).
local function reply_of_size(n)
    for i = n + 1, nout do
        OUT[i] = nil
    end
    nout = n
    return OUT
end

-- A report: charges every tier, then reads its figures for a unit (see the
-- top of this file). Returns request_allowed.
local function charge(nchecks, ntiers, tiers)
    -- All refused before anything is written (a script's writes stay).
    for i = 1, ntiers do
        local t = tiers[i]
        if not t.alg.report then
            error('ratelimitd: ' .. t.name .. ' takes no report')
        elseif t.cost < 0 and not t.alg.refunds then
            error('ratelimitd: ' .. t.name .. ' cannot give back a cost')
        end
    end
    local request_allowed = true
    for c = 1, nchecks do
        local check = CHECKS[c]
        for i = check.first, check.last do
            local t = tiers[i]
            local alg = t.alg
            if t.cost ~= 0 then
                alg.load(t)
                alg.report(t)
            end
            t.cost = 1
            if not read_and_decide(t) and not check.shadow then
                request_allowed = false
            end
        end
    end
    return request_allowed
end

-- ARGV[2] "r" (release) or "n" (renew): not a decision but lease
-- operations (concurrency.lua), one per key: ARGV[2 + 2i - 1] the lease's
-- member, ARGV[2 + 2i] the renewal's timeout in µs ("0" for a release).
-- Returns {now_us, then per lease: status (1 done, 2 expired, 0 unknown),
-- expires_us (renewed: the new expiry, else 0)}.
local function lease_ops(keys, ko, nk, argv, ao, na, now, op)
    if na ~= 2 + 2 * nk then
        error('ratelimitd: a lease operation takes a member and a timeout per key; got '
            .. na .. ' arguments for ' .. nk .. ' keys')
    end
    local out = { now }
    for i = 1, nk do
        local timeout = int_of(argv[ao + 2 + 2 * i], 0) or bad_int(argv, ao, 2 + 2 * i, 0)
        local status, expires = concurrency.lease_op(keys[ko + i], argv[ao + 1 + 2 * i], op,
            timeout, now)
        out[2 * i], out[2 * i + 1] = status, expires
    end
    return out
end

-- The tiers of a lease call (see the top of this file): one check, every
-- tier able to lease.
local function lease_tiers(nchecks, ntiers, tiers)
    if nchecks ~= 1 then
        error('ratelimitd: a lease call takes exactly one check, got ' .. nchecks)
    end
    for i = 1, ntiers do
        if not tiers[i].alg.lease_avail then
            error('ratelimitd: ' .. tiers[i].name .. ' cannot be leased')
        end
    end
end

-- argv[2] "L<want>": takes a block (see the top of this file).
local function take_block(keys, ko, nk, argv, ao, na, now, want)
    local nchecks, ntiers = parse(keys, ko, nk, argv, ao, na, now, 1)
    local tiers = TIERS
    lease_tiers(nchecks, ntiers, tiers)
    local allowed = true
    for i = 1, ntiers do
        allowed = read_and_decide(tiers[i]) and allowed
    end
    local granted, until_us = 0, 0
    if allowed then
        granted = max(want, tiers[1].cost)
        until_us = EXACT_MAX
        for i = 1, ntiers do
            local t = tiers[i]
            granted = min(granted, t.alg.lease_avail(t))
            until_us = min(until_us, t.alg.lease_until(t))
        end
        for i = 1, ntiers do
            tiers[i].cost = granted
        end
    end
    local out = reply_of_size(4 + 7 * ntiers)
    out[1], out[2] = now, allowed and 1 or 0
    for i = 1, ntiers do
        report(out, 2 + 7 * (i - 1), tiers[i], allowed)
    end
    if allowed then
        for i = 1, ntiers do
            tiers[i].alg.commit(tiers[i])
        end
    end
    out[3 + 7 * ntiers], out[4 + 7 * ntiers] = granted, until_us
    return out
end

-- argv[2] "G<taken>": gives a block back (see the top of this file). A
-- tier whose window has passed since `taken` takes nothing back: a unit is
-- never returned into a later window than the one it was taken from.
local function give_back(keys, ko, nk, argv, ao, na, now, taken)
    local nchecks, ntiers = parse(keys, ko, nk, argv, ao, na, now, 1)
    local tiers = TIERS
    lease_tiers(nchecks, ntiers, tiers)
    local units = tiers[1].cost
    local same = true
    for i = 1, ntiers do
        local t = tiers[i]
        t.alg.load(t)
        same = same and t.alg.lease_same(t, taken)
    end
    if same then
        for i = 1, ntiers do
            local t = tiers[i]
            t.cost = -units
            t.alg.report(t)
        end
    end
    local out = reply_of_size(4 + 7 * ntiers)
    local allowed = true
    for i = 1, ntiers do
        local t = tiers[i]
        t.cost = 1
        allowed = read_and_decide(t) and allowed
        report(out, 2 + 7 * (i - 1), t, false)
    end
    out[1], out[2] = now, allowed and 1 or 0
    out[3 + 7 * ntiers], out[4 + 7 * ntiers] = same and units or 0, 0
    return out
end

-- Decides one request: keys[ko + 1 .. ko + nk], argv[ao + 1 .. ao + na].
local function decide(keys, ko, nk, argv, ao, na)
    if not fmod then
        bind_globals()
    end
    local now = arg_now(argv, ao)
    local mode = argv[ao + 2]
    if mode and #mode > 1 then
        local op, n = match(mode, '^([LG])(%d+)$')
        n = n and int_of(n, 1)
        if not n then
            error('ratelimitd: ARGV[2] must be 0, 1, 2, 3, r, n, L<want> or G<taken>, got '
                .. tostring(mode))
        end
        if op == 'L' then
            return take_block(keys, ko, nk, argv, ao, na, now, n)
        end
        return give_back(keys, ko, nk, argv, ao, na, now, n)
    end
    if mode == '3' then
        local nchecks, ntiers = parse(keys, ko, nk, argv, ao, na, now, -EXACT_MAX)
        local out = reply_of_size(2 + 7 * ntiers)
        out[1], out[2] = now, charge(nchecks, ntiers, TIERS) and 1 or 0
        for i = 1, ntiers do
            report(out, 2 + 7 * (i - 1), TIERS[i], false)
        end
        return out
    end
    if mode == 'r' or mode == 'n' then
        return lease_ops(keys, ko, nk, argv, ao, na, now, mode)
    end
    local both = mode == '2'
    local dry_run = both or arg_flag(argv, ao, 2)
    local nchecks, ntiers = parse(keys, ko, nk, argv, ao, na, now, 0)
    local checks, tiers = CHECKS, TIERS

    -- Pass 1: read every tier and decide. Every tier is read even after one
    -- has denied, because every tier reports its figures.
    local request_allowed = true
    for c = 1, nchecks do
        local check = checks[c]
        local allowed = true
        for i = check.first, check.last do
            allowed = read_and_decide(tiers[i]) and allowed
        end
        check.allowed = allowed
        if not check.shadow and not allowed then
            request_allowed = false
        end
    end

    -- The figures, before anything is written. A non-shadow check of an
    -- allowed request is always allowed.
    local n = 2 + 7 * ntiers
    if both then
        n = n + 2 * ntiers
    end
    local out = reply_of_size(n)
    out[1], out[2] = now, request_allowed and 1 or 0
    for c = 1, nchecks do
        local check = checks[c]
        local consumed = request_allowed and check.allowed
        for i = check.first, check.last do
            report(out, 2 + 7 * (i - 1), tiers[i], consumed)
        end
    end
    if both then
        local base = 2 + 7 * ntiers
        for i = 1, ntiers do
            out[base + 2 * i - 1], out[base + 2 * i] = tiers[i].alg.figures(tiers[i], false)
        end
    end

    -- Pass 2: take the cost, only for a real run of an allowed request.
    if request_allowed and not dry_run then
        for c = 1, nchecks do
            local check = checks[c]
            if check.allowed and check.cost > 0 then
                for i = check.first, check.last do
                    tiers[i].alg.commit(tiers[i])
                end
            end
        end
    end
    return out
end

-- A batch (redis.batch, src/backend/redis/redis_node.c): several requests
-- in one call, decided one after the other, each exactly as decide alone
-- would (atomic, since nothing else runs during the call), each with its
-- own reply. argv[1] "B" (never a time: those are decimal or ""), argv[2]
-- the count n, then two per request: how many of KEYS and of ARGV are its
-- own; then every request's ARGV, in order; KEYS is every request's KEYS,
-- in order. Returns n replies: each decide's array, or an error reply for
-- a request decide refused (its neighbours are decided all the same).
-- Each request is decided in place, through offsets into KEYS and ARGV.
local BATCH_OUT, BATCH_NOUT, BATCH_REPLY = {}, {}, {}
-- Each request's counts of KEYS and ARGV, as the framing's check read them
-- (a string's conversion to a number is a strtod: not done twice).
local BATCH_NK, BATCH_NA = {}, {}

-- A copy of src[from + 1 .. from + n], for a request of fewer than 2
-- arguments (refused): decide reads ARGV[1] and ARGV[2] before it counts
-- them, and must read nil there, not a neighbour's, to refuse it as alone.
local function slice(src, from, n)
    local t = {}
    for i = 1, n do
        t[i] = src[from + i]
    end
    return t
end

-- Decides one request of a batch (keys[ko + 1 .. ko + nk], argv[ao + 1 ..
-- ao + na]).
local function decide_in_batch(keys, ko, nk, argv, ao, na)
    if na < 2 then
        return decide(slice(keys, ko, nk), 0, nk, slice(argv, ao, na), 0, na)
    end
    return decide(keys, ko, nk, argv, ao, na)
end

local function decide_batch(keys, argv)
    if not fmod then
        bind_globals()
    end
    local n = int_of(argv[2], 1) or bad_int(argv, 0, 2, 1)
    -- The framing is checked whole before anything is decided: a malformed
    -- batch (a daemon bug) fails as one error, having written nothing.
    local koff, aoff = 0, 2 + 2 * n
    local nks, nas = BATCH_NK, BATCH_NA
    for r = 1, n do
        local nk = int_of_kept(argv[1 + 2 * r], 0) or bad_int(argv, 0, 1 + 2 * r, 0)
        local na = int_of_kept(argv[2 + 2 * r], 0) or bad_int(argv, 0, 2 + 2 * r, 0)
        nks[r], nas[r] = nk, na
        koff, aoff = koff + nk, aoff + na
    end
    if koff ~= #keys or aoff ~= #argv then
        error('ratelimitd: a batch of ' .. n .. ' requests takes ' .. koff .. ' keys and '
            .. aoff .. ' arguments, got ' .. #keys .. ' and ' .. #argv)
    end
    local out1, nout1 = OUT, nout -- the single request's, put back after
    batch_time = false
    koff, aoff = 0, 2 + 2 * n
    for r = 1, n do
        local nk, na = nks[r], nas[r]
        -- Each request fills a reply table of its own (decide reuses OUT
        -- from call to call): swapped in, and out again after.
        OUT, nout = BATCH_OUT[r] or {}, BATCH_NOUT[r] or 0
        local ok, res = pcall(decide_in_batch, keys, koff, nk, argv, aoff, na)
        koff, aoff = koff + nk, aoff + na
        BATCH_OUT[r], BATCH_NOUT[r] = OUT, nout
        if ok or (type(res) == 'table' and res.err) then
            BATCH_REPLY[r] = res -- a reply, or a Redis command's error
        else
            -- error()'s message, as the error reply Redis makes of it
            BATCH_REPLY[r] = { err = 'ERR ' .. tostring(res) }
        end
    end
    OUT, nout = out1, nout1
    batch_time = nil
    -- The reply ends at n: a larger batch before left entries past it.
    for r = n + 1, #BATCH_REPLY do
        BATCH_REPLY[r] = nil
    end
    return BATCH_REPLY
end

-- The entry point the EVAL script and the Function call (lua/embed.sh): a
-- batch, or one request.
local function decide_any(keys, argv)
    if argv[1] == 'B' then
        return decide_batch(keys, argv)
    end
    -- Set at every entry, not only cleared when a batch ends: a batch
    -- stopped midway (FUNCTION KILL) must not leave its time to later calls.
    batch_time = nil
    return decide(keys, 0, #keys, argv, 0, #argv)
end
