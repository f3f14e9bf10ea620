/* SPDX-License-Identifier: Apache-2.0 */
/* The status page's code: every 2 s it reads /v1/status, /v1/rates and
 * /v1/top/<policy> and redraws; reset and override call the admin API.
 * Every figure and key goes in through textContent or an attribute, never
 * as markup: keys are whatever clients sent. */
"use strict";
(function () {
  var REFRESH_MS = 2000;
  var SVG = "http://www.w3.org/2000/svg";
  var timer = null;
  var busy = false; /* a refresh in flight: a slow daemon gets no pile of them */
  var policies = [];

  function $(id) { return document.getElementById(id); }

  function el(tag, text, cls) {
    var e = document.createElement(tag);
    if (text !== undefined && text !== null) e.textContent = String(text);
    if (cls) e.className = cls;
    return e;
  }

  function row(cells) {
    var tr = el("tr");
    cells.forEach(function (c) { tr.appendChild(c instanceof Node ? c : el("td", c)); });
    return tr;
  }

  function fill(tbody, rows) {
    while (tbody.firstChild) tbody.removeChild(tbody.firstChild);
    rows.forEach(function (r) { tbody.appendChild(r); });
  }

  /* An admin API call with the tab's token; a 401 asks for one. */
  function api(method, path, body) {
    var headers = {};
    var token = sessionStorage.getItem("ratelimitd-token");
    if (token) headers.Authorization = "Bearer " + token;
    if (body !== undefined) headers["Content-Type"] = "application/json";
    return fetch(path, {
      method: method, headers: headers, cache: "no-store",
      body: body === undefined ? undefined : JSON.stringify(body)
    }).then(function (r) {
      if (r.status === 401) {
        sessionStorage.removeItem("ratelimitd-token"); /* none, or a wrong one */
        askToken();
        throw new Error("unauthorized");
      }
      return r.json().then(function (j) { return { status: r.status, body: j }; });
    });
  }

  function askToken() {
    stop();
    $("login").hidden = false;
    $("content").hidden = true;
    $("token").focus();
  }

  function problem(text) {
    var p = $("problem");
    p.hidden = !text;
    p.textContent = text || "";
  }

  function duration(s) {
    var d = Math.floor(s / 86400), h = Math.floor(s % 86400 / 3600), m = Math.floor(s % 3600 / 60);
    return (d ? d + "d " : "") + (d || h ? h + "h " : "") + m + "m " + (s % 60) + "s";
  }

  function showStatus(st) {
    $("build").textContent = "version " + st.version + " \u00b7 commit " + st.commit +
      " \u00b7 up " + duration(st.uptime_s) + " \u00b7 started " + st.started_at;
    policies = st.policies;
    var rows = [];
    st.policies.forEach(function (p) {
      p.tiers.forEach(function (t, i) {
        rows.push(row([i ? "" : p.name, t.name, t.algorithm, el("td", t.limit, "num"),
          t.window === null ? "-" : t.window, t.burst === undefined ? "-" : t.burst,
          el("td", i ? "" : p.overrides, "num")]));
      });
    });
    fill($("policies").tBodies[0], rows);
    $("backend-kind").textContent = "backend: " + st.backend.kind;
    fill($("nodes").tBodies[0], st.backend.nodes.map(function (n) {
      return row([n.address, n.role, el("td", n.connected ? "yes" : "no", n.connected ? "ok" : "bad"),
        n.path === null ? "-" : n.path,
        el("td", n.latency_ms === null ? "-" : n.latency_ms.toFixed(3) + " ms", "num"),
        el("td", n.errors, "num")]);
    }));
    var ce = st.last_config_error;
    $("config-error").textContent = ce ? "last configuration error (" + ce.at + "): " + ce.error
      : "no configuration error since start";
    $("config-error").className = ce ? "bad" : "muted";
    fill($("reloads").tBodies[0], st.reloads.map(function (r) {
      return row([r.at, el("td", r.ok ? "ok" : "failed", r.ok ? "ok" : "bad"),
        r.error === null ? "" : r.error]);
    }));
  }

  function polyline(values, max, cls) {
    var line = document.createElementNS(SVG, "polyline");
    var n = values.length;
    var pts = values.map(function (v, i) {
      return (n > 1 ? i * 300 / (n - 1) : 0).toFixed(1) + "," + (100 - v * 95 / max).toFixed(1);
    });
    line.setAttribute("points", pts.join(" "));
    line.setAttribute("fill", "none");
    line.setAttribute("stroke", cls === "allowed" ? "#1f6feb" : "#d1242f");
    line.setAttribute("stroke-width", "1.5");
    line.setAttribute("vector-effect", "non-scaling-stroke");
    line.setAttribute("class", cls);
    return line;
  }

  function sum(a) { return a.reduce(function (x, y) { return x + y; }, 0); }

  function showRates(r) {
    var box = $("rates");
    while (box.firstChild) box.removeChild(box.firstChild);
    Object.keys(r.policies).forEach(function (name) {
      var p = r.policies[name];
      var max = Math.max(1, Math.max.apply(null, p.allowed.concat(p.denied)));
      var div = el("div", null, "chart");
      div.setAttribute("data-policy", name);
      var legend = el("p", null, "legend");
      legend.appendChild(el("strong", name + ": "));
      var last = p.allowed.length - 1;
      var a = el("span", p.allowed[last] + "/s allowed", "allowed");
      a.setAttribute("data-total", sum(p.allowed));
      var d = el("span", p.denied[last] + "/s denied", "denied");
      d.setAttribute("data-total", sum(p.denied));
      legend.appendChild(a);
      legend.appendChild(document.createTextNode(" \u00b7 "));
      legend.appendChild(d);
      legend.appendChild(el("span", " \u00b7 peak " + max + "/s, to " + r.now, "muted"));
      var svg = document.createElementNS(SVG, "svg");
      svg.setAttribute("viewBox", "0 0 300 100");
      svg.setAttribute("preserveAspectRatio", "none");
      svg.setAttribute("role", "img");
      svg.setAttribute("aria-label", name + " decisions per second");
      svg.appendChild(polyline(p.allowed, max, "allowed"));
      svg.appendChild(polyline(p.denied, max, "denied"));
      div.appendChild(legend);
      div.appendChild(svg);
      box.appendChild(div);
    });
  }

  /* The result stays outside the table, which the next refresh redraws. */
  function actionResult(text, ok) {
    $("top-result").textContent = text;
    $("top-result").className = ok ? "ok" : "bad";
  }

  function resetKey(policy, key) {
    var what = "reset of " + policy + " / " + key;
    api("DELETE", "/v1/keys/" + encodeURIComponent(policy) + "/" + encodeURIComponent(key))
      .then(function (r) {
        actionResult(r.status === 200 ? what + ": done" : what + " failed: " + r.body.message,
          r.status === 200);
      }, function (e) { actionResult(what + " failed: " + e.message, false); });
  }

  function openOverride(policy, key) {
    var f = $("override");
    f.hidden = false;
    f.setAttribute("data-policy", policy);
    f.setAttribute("data-key", key);
    $("ov-target").textContent = policy + " / " + key;
    var sel = $("ov-tier");
    while (sel.firstChild) sel.removeChild(sel.firstChild);
    policies.filter(function (p) { return p.name === policy; }).forEach(function (p) {
      p.tiers.forEach(function (t) {
        var o = el("option", t.name + " (now " + t.limit + ")");
        o.value = t.name;
        sel.appendChild(o);
      });
    });
    $("ov-result").textContent = "";
    $("ov-limit").focus();
  }

  function applyOverride(ev) {
    ev.preventDefault();
    var f = $("override"), tiers = {};
    tiers[$("ov-tier").value] = { limit: Number($("ov-limit").value) };
    var policy = f.getAttribute("data-policy"), key = f.getAttribute("data-key");
    api("PUT", "/v1/overrides/" + encodeURIComponent(policy) + "/" + encodeURIComponent(key),
      { tiers: tiers, ttl: $("ov-ttl").value }).then(function (r) {
      $("ov-result").textContent = r.status === 200
        ? "override applied" + (r.body.expires_at ? " until " + r.body.expires_at : "")
        : "refused: " + r.body.message;
      $("ov-result").className = r.status === 200 ? "ok" : "bad";
    }, function () { $("ov-result").textContent = "failed"; });
  }

  function topTable(t) {
    var wrap = el("div");
    wrap.setAttribute("data-policy", t.policy);
    wrap.appendChild(el("h3", t.policy + ": " + t.total + " denied in " + t.window +
      " across " + t.daemons + " daemon" + (t.daemons === 1 ? "" : "s")));
    if (!t.keys.length) {
      wrap.appendChild(el("p", "no denied key", "muted"));
      return wrap;
    }
    var table = el("table"), head = el("thead"), body = el("tbody");
    head.appendChild(row([el("th", "key"), el("th", "denied"), el("th", "\u00b1"), el("th", "")]));
    t.keys.forEach(function (k) {
      var reset = el("button", "reset"), over = el("button", "override");
      reset.type = over.type = "button";
      reset.className = "reset";
      over.className = "override";
      reset.addEventListener("click", function () { resetKey(t.policy, k.key); });
      over.addEventListener("click", function () { openOverride(t.policy, k.key); });
      var actions = el("td");
      actions.appendChild(reset);
      actions.appendChild(document.createTextNode(" "));
      actions.appendChild(over);
      var tr = row([el("td", k.key, "key"), el("td", k.count, "num"), el("td", k.error, "num"), actions]);
      tr.setAttribute("data-key", k.key);
      body.appendChild(tr);
    });
    table.appendChild(head);
    table.appendChild(body);
    var box = el("div", null, "box");
    box.appendChild(table);
    wrap.appendChild(box);
    return wrap;
  }

  function showTop(answers) {
    var box = $("top");
    while (box.firstChild) box.removeChild(box.firstChild);
    answers.forEach(function (a) {
      if (a.status === 200) box.appendChild(topTable(a.body));
      else box.appendChild(el("p", a.body.message || "not available", "muted"));
    });
  }

  function refresh() {
    if (busy) return;
    busy = true;
    Promise.all([api("GET", "/v1/status"), api("GET", "/v1/rates?seconds=300")])
      .then(function (both) {
        showStatus(both[0].body);
        showRates(both[1].body);
        return Promise.all(policies.map(function (p) {
          return api("GET", "/v1/top/" + encodeURIComponent(p.name) + "?by=denied&window=1m&n=10");
        }));
      }).then(function (tops) {
        showTop(tops);
        problem("");
        document.body.setAttribute("data-refreshed", String(Date.now()));
      }, function (e) {
        if (e.message !== "unauthorized") problem("cannot reach the daemon: " + e.message);
      }).then(function () { busy = false; });
  }

  function stop() {
    if (timer !== null) clearInterval(timer);
    timer = null;
  }

  function start() {
    stop();
    $("login").hidden = true;
    $("content").hidden = false;
    refresh();
    timer = setInterval(refresh, REFRESH_MS);
  }

  $("login").addEventListener("submit", function (ev) {
    ev.preventDefault();
    sessionStorage.setItem("ratelimitd-token", $("token").value);
    $("token").value = "";
    start();
  });
  $("override").addEventListener("submit", applyOverride);
  $("ov-cancel").addEventListener("click", function () { $("override").hidden = true; });
  start();
})();
