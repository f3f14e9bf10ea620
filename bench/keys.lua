-- SPDX-License-Identifier: Apache-2.0
-- keys.lua: wrk script: POST /check with the key cycling over KEYS distinct
-- values (env RL_KEYS, default 100000), policy from RL_POLICY (default bench).
local nkeys = tonumber(os.getenv("RL_KEYS") or "100000")
local policy = os.getenv("RL_POLICY") or "bench"
local counter = 0

function setup(thread)
    thread:set("offset", counter)
    counter = counter + 7919 -- threads start at different keys
end

function init(args)
    i = offset or 0
end

function request()
    i = i + 1
    local body = string.format('{"policy":"%s","key":"user:%d"}', policy, i % nkeys)
    return wrk.format("POST", "/check", { ["Content-Type"] = "application/json" }, body)
end
