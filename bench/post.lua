-- SPDX-License-Identifier: Apache-2.0
-- bench/post.lua: wrk script used by bench/run.sh.
--
-- Sends POST /check with a JSON body {"policy":P,"key":K,"cost":1}.
--   BENCH_MODE=spread  K is "user:<n>", n uniform in 1..BENCH_KEYS (100000)
--   BENCH_MODE=hot     K is "user:hot" on every request
--   BENCH_POLICY       policy name in the body (fw)
--   BENCH_CLOSE=1      "Connection: close" on every request: a new connection
--                      (and TLS handshake) per request (bench/tls.sh); wrk's
--                      -H is not used, since wrk.format is given its headers
--   BENCH_AUTH=/path   forward-auth shape instead (run.sh's `mem` target):
--                      GET /path with the key in the header X-Key, so that
--                      nginx `limit_req` (zone keyed by $http_x_key) and
--                      ratelimitd's /auth/<policy> (key "${header:X-Key}")
--                      receive byte-identical requests
-- All request strings are built in init(), before wrk starts its clock, so
-- the per-request cost inside wrk is one random number and a table lookup.
--
-- done() prints one line that run.sh parses:
--   RESULT rps=.. requests=.. secs=.. p50_ms=.. p90_ms=.. p99_ms=.. max_ms=..
--          non2xx=.. sockerr=..
-- (non2xx is wrk's errors.status: responses with a status >= 400.)

local mode   = os.getenv("BENCH_MODE") or "spread"
local nkeys  = tonumber(os.getenv("BENCH_KEYS") or "100000")
local policy = os.getenv("BENCH_POLICY") or "fw"
local close  = os.getenv("BENCH_CLOSE") == "1"
local auth   = os.getenv("BENCH_AUTH")

local pool = {}
local npool = 0

local function build(key)
  if auth then return wrk.format("GET", auth, { ["X-Key"] = key }) end
  local body = '{"policy":"' .. policy .. '","key":"' .. key .. '","cost":1}'
  local headers = { ["Content-Type"] = "application/json" }
  if close then headers["Connection"] = "close" end
  return wrk.format("POST", "/check", headers, body)
end

function init(args)
  if mode == "hot" then
    pool[1] = build("user:hot")
    npool = 1
  else
    for n = 1, nkeys do pool[n] = build("user:" .. n) end
    npool = nkeys
  end
  -- a different sequence per run and per thread
  math.randomseed(os.time() + math.floor(os.clock() * 1e6))
end

function request()
  if npool == 1 then return pool[1] end
  return pool[math.random(1, npool)]
end

function done(summary, latency, requests)
  local secs = summary.duration / 1e6
  local e = summary.errors
  io.write(string.format(
    "RESULT rps=%.1f requests=%d secs=%.3f p50_ms=%.3f p90_ms=%.3f p99_ms=%.3f max_ms=%.3f non2xx=%d sockerr=%d\n",
    summary.requests / secs, summary.requests, secs,
    latency:percentile(50) / 1000, latency:percentile(90) / 1000,
    latency:percentile(99) / 1000, latency.max / 1000,
    e.status, e.connect + e.read + e.write + e.timeout))
end
