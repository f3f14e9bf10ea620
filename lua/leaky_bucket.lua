-- SPDX-License-Identifier: Apache-2.0
-- leaky_bucket.lua: shaping, like nginx's limit_req without nodelay.
--
-- Requests leave at one per emission interval W / limit µs; up to `burst`
-- more wait in a queue and are told how long to wait (delay_us); beyond that
-- they are denied. This is GCRA with capacity burst + 1: the request that
-- finds the queue empty passes at once, the k-th queued one waits k
-- intervals. So the state, the decisions and the figures are gcra.lua's,
-- with `limit` reported as burst + 1.
--
-- State, expiry, changes of settings, reports and refunds: as gcra.lua (a
-- report raises the level, past the queue if so).
-- delay_us: for an allowed request of cost c >= 1, when its last unit is
-- due: ceil((d + (c - 1) * W) / limit), d taken before the request.

local leaky_bucket = {
    nkeys = 1,
    load = gcra.load,
    allows = gcra.allows,
    figures = gcra.figures,
    retry = gcra.retry,
    commit = gcra.commit,
    report = gcra.report,
    refunds = true,
}

function leaky_bucket.capacity(t)
    return t.burst + 1
end

function leaky_bucket.delay(t)
    return idiv_ceil(t.d + (t.cost - 1) * t.window, t.limit)
end
