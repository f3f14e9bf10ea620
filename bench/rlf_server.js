// SPDX-License-Identifier: Apache-2.0
'use strict';
// bench/rlf_server.js: the Node peer for bench/run.sh.
//
// What a Node team would write for the same job: node:http, one
// rate-limiter-flexible RateLimiterRedis (a fixed window in Redis, one Lua
// call per decision) per policy on one ioredis client per process, under
// node:cluster.
//
//   node rlf_server.js PORT REDIS_PORT WORKERS
//
// POST /check {"policy":"fw","key":"...","cost":1}
//   200 / 429 with {"allowed":..,"limit":..,"remaining":..,"reset_ms":..},
//   X-RateLimit-Limit / -Remaining / -Reset, and Retry-After on 429;
//   400 on a bad body or unknown policy, 503 if Redis fails (fail closed).
// Policies: fw = 100 per 60 s (the one fixed-window policy the bench uses).
// Prints "ready" once every worker listens.

const http = require('node:http');
const cluster = require('node:cluster');
const Redis = require('ioredis');
const { RateLimiterRedis, RateLimiterRes } = require('rate-limiter-flexible');

const port = Number(process.argv[2] || 8081);
const redisPort = Number(process.argv[3] || 6379);
const workers = Math.max(1, Number(process.argv[4] || 2));
const POLICIES = { fw: { points: 100, duration: 60 } };

function serve(onReady) {
  const redis = new Redis({ host: '127.0.0.1', port: redisPort, enableOfflineQueue: false });
  redis.on('error', (err) => console.error('redis:', err.message));
  const limiters = {};
  for (const [name, p] of Object.entries(POLICIES)) {
    limiters[name] = new RateLimiterRedis({
      storeClient: redis, keyPrefix: 'rlf:' + name, points: p.points, duration: p.duration,
    });
  }

  const reply = (res, code, obj, extra) => {
    const text = JSON.stringify(obj);
    res.writeHead(code, Object.assign({
      'Content-Type': 'application/json',
      'Content-Length': Buffer.byteLength(text),
    }, extra || {}));
    res.end(text);
  };

  const answer = (res, limiter, r, allowed) => {
    const resetMs = Math.max(0, Math.ceil(r.msBeforeNext));
    const remaining = Math.max(0, r.remainingPoints);
    const h = {
      'X-RateLimit-Limit': String(limiter.points),
      'X-RateLimit-Remaining': String(remaining),
      'X-RateLimit-Reset': String(Math.ceil(resetMs / 1000)),
    };
    if (!allowed) h['Retry-After'] = String(Math.max(1, Math.ceil(resetMs / 1000)));
    reply(res, allowed ? 200 : 429,
      { allowed, limit: limiter.points, remaining, reset_ms: resetMs }, h);
  };

  const server = http.createServer((req, res) => {
    if (req.method !== 'POST' || req.url !== '/check') return reply(res, 404, { error: 'not_found' });
    let body = '';
    req.setEncoding('utf8');
    req.on('data', (d) => { if (body.length < 16384) body += d; });
    req.on('end', () => {
      let m;
      try { m = JSON.parse(body); } catch (e) { return reply(res, 400, { error: 'invalid_json' }); }
      const limiter = m && limiters[m.policy];
      if (!limiter) return reply(res, 400, { error: 'unknown_policy' });
      if (typeof m.key !== 'string' || m.key === '') return reply(res, 400, { error: 'invalid_key' });
      const cost = m.cost === undefined ? 1 : m.cost;
      if (!Number.isInteger(cost) || cost < 1) return reply(res, 400, { error: 'invalid_cost' });
      limiter.consume(m.key, cost).then(
        (r) => answer(res, limiter, r, true),
        (r) => (r instanceof RateLimiterRes
          ? answer(res, limiter, r, false)
          : reply(res, 503, { error: 'backend_unavailable' })),
      );
    });
  });

  const stop = () => { server.close(); redis.disconnect(); setTimeout(() => process.exit(0), 100).unref(); };
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
  redis.once('ready', () => server.listen(port, '127.0.0.1', onReady));
}

if (workers > 1 && cluster.isPrimary) {
  let up = 0;
  let stopping = false;
  for (let i = 0; i < workers; i++) cluster.fork();
  cluster.on('listening', () => { if (++up === workers) console.log('ready'); });
  cluster.on('exit', () => {
    if (stopping && Object.keys(cluster.workers).length === 0) process.exit(0);
  });
  const stopAll = () => {
    stopping = true;
    for (const w of Object.values(cluster.workers)) w.process.kill('SIGTERM');
    setTimeout(() => process.exit(0), 3000).unref();
  };
  process.on('SIGTERM', stopAll);
  process.on('SIGINT', stopAll);
} else {
  serve(() => console.log('ready'));
}
