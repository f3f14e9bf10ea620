-- SPDX-License-Identifier: Apache-2.0
-- bench/grpc_check.lua: wrk script of bench/grpc.sh. Sends POST /check with
-- the body in $BENCH_BODY on every request (built once, in init), and
-- prints the RESULT line grpc.sh parses (rps and requests).
local req

function init(args)
  req = wrk.format("POST", "/check", { ["Content-Type"] = "application/json" },
                   os.getenv("BENCH_BODY"))
end

function request()
  return req
end

function done(summary, latency, requests)
  local secs = summary.duration / 1e6
  io.write(string.format("RESULT rps=%.1f requests=%d non2xx=%d sockerr=%d\n",
    summary.requests / secs, summary.requests, summary.errors.status,
    summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout))
end
