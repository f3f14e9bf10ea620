# SPDX-License-Identifier: Apache-2.0
"""test_status_page.py: the status page (GET /) in a real browser: Debian's
chromium, headless, driven by chromedriver through python3-selenium,
against a daemon on a real redis-server under load (a thread sending
/check for a normal key and, while `abuse` is set, for an abusive key that
is denied).

- The page loads with no SEVERE entry in the browser's log (a CSP
  violation is one: the page runs only under its own policy).
- The chart's figures (each policy's allowed total over five minutes, and
  the polyline drawn from them) move between two refreshes.
- The top-denied table lists the abusive key; pressing its reset button
  makes the key allowed again (a /check answers 200).
- The override form (tier, limit, ttl) changes the X-RateLimit-Limit that
  /check answers for the key.
- At 360x740 (a phone) the document is no wider than the window: wide
  tables scroll inside their box.
- With auth_token_file the page asks for the token; a wrong one is
  dropped and asked again; with the right one it works, kept in the tab's
  sessionStorage.
- A screenshot goes to the test's temp dir, and to the path in
  $RATELIMITD_SCREENSHOT or after --screenshot (docs/status-page.png is
  made so).

SKIP only when chromium, chromedriver or selenium is absent (tools/deps.sh
--test installs them). Every wait is a bounded WebDriverWait.
"""
import importlib.util
import json
import os
import shutil
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from daemon import Daemon  # noqa: E402

TOKEN = "status-page-token"
WAIT_S = 30  # generous: a loaded 2-core machine, or valgrind
ABUSIVE = "tenant/abusive:1"  # a '/' and a ':' to be percent-encoded on the way

POLICY = """\
policies:
  api:
    tiers:
      - {name: hour, algorithm: fixed_window, limit: 30, window: 1h}
  login:
    tiers:
      - {name: hour, algorithm: fixed_window, limit: 100000, window: 1h}
"""


def browser_parts():
    """(chromium, chromedriver, selenium module) or a reason to skip."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    if importlib.util.find_spec("selenium") is None:
        return "python3-selenium is not installed (tools/deps.sh --test)"
    if not chromium or not driver:
        return "chromium or chromium-driver is not installed (tools/deps.sh --test)"
    return chromium, driver


def make_driver(chromium, chromedriver, width=1200, height=1400):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    opts = webdriver.ChromeOptions()
    opts.binary_location = chromium
    for a in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
              "--window-size=%d,%d" % (width, height), "--no-first-run",
              "--disable-extensions", "--disable-background-networking"):
        opts.add_argument(a)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    d = webdriver.Chrome(service=Service(chromedriver), options=opts)
    harness.at_exit(d.quit)
    return d


def wait(driver, cond, what):
    """cond(driver) until true, or WAIT_S. What it reads may be redrawn
    under it (every refresh): a stale element is "not yet"."""
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.support.ui import WebDriverWait
    t0 = time.monotonic()
    try:
        return WebDriverWait(driver, WAIT_S, poll_frequency=0.1,
                             ignored_exceptions=[StaleElementReferenceException]).until(cond)
    except Exception:
        harness.diag("timed out after %.1f s waiting for %s" % (time.monotonic() - t0, what))
        raise


def severe(driver, allow=()):
    """The browser log's SEVERE entries, but those naming one of allow."""
    return [e for e in driver.get_log("browser")
            if e["level"] == "SEVERE" and not any(a in e["message"] for a in allow)]


class Load:
    """Checks in a loop: normal keys always (api's in turn among 1000, each
    far below its 30 an hour; login's one key far below its limit), and
    the abusive one while abuse is set: past its 30 an hour, denied."""

    def __init__(self, d):
        self.d = d
        self.abuse = threading.Event()
        self.abuse.set()
        self.stop = threading.Event()
        self.sent = 0
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()
        harness.at_exit(self.close)

    def run(self):
        conn = self.d.connection()
        rounds = 0
        while not self.stop.is_set():
            rounds += 1
            keys = [("api", "normal-%d" % (rounds % 1000)), ("login", "user-1")]
            if self.abuse.is_set():
                keys += [("api", ABUSIVE)] * 8
            for policy, key in keys:
                conn.request("POST", "/check", body=json.dumps({"policy": policy, "key": key}))
                conn.getresponse().read()
                self.sent += 1
            # Pacing, not synchronisation: about 20 rounds a second.
            self.stop.wait(0.05)
        conn.close()

    def close(self):
        self.stop.set()
        self.thread.join(10)


def chart_total(driver, policy):
    """(allowed total, polyline points) of policy's chart as drawn."""
    from selenium.webdriver.common.by import By
    box = driver.find_element(By.CSS_SELECTOR, '.chart[data-policy="%s"]' % policy)
    total = int(box.find_element(By.CSS_SELECTOR, "span.allowed").get_attribute("data-total"))
    points = box.find_element(By.CSS_SELECTOR, "polyline.allowed").get_attribute("points")
    return total, points


def refreshed(driver):
    return driver.execute_script("return document.body.getAttribute('data-refreshed')")


def click_in_row(driver, key, button):
    """Clicks button (a CSS selector) in key's row of the top-denied table:
    True once clicked. The table is redrawn every refresh, so a row found
    may be gone by the click: the caller's wait asks again."""
    from selenium.common.exceptions import StaleElementReferenceException
    try:
        row = top_row(driver, key)
        if row is None:
            return False
        row.find_element("css selector", button).click()
        return True
    except StaleElementReferenceException:
        return False


def top_row(driver, key):
    from selenium.webdriver.common.by import By
    for tr in driver.find_elements(By.CSS_SELECTOR, '#top div[data-policy="api"] tr[data-key]'):
        if tr.get_attribute("data-key") == key:
            return tr
    return None


def page_under_load(chromium, chromedriver, redis, shot):
    from selenium.webdriver.common.by import By
    d = Daemon("unix:" + redis.socket_path, POLICY, admin=True, timeout="2s").start()
    load = Load(d)
    drv = make_driver(chromium, chromedriver)
    url = "http://127.0.0.1:%d/" % d.admin_port
    t0 = time.monotonic()
    drv.get(url)
    wait(drv, lambda x: refreshed(x), "the first refresh")
    harness.diag("first refresh %.0f ms after the page was asked for"
                 % ((time.monotonic() - t0) * 1000))
    harness.ok("version" in drv.find_element(By.ID, "build").text,
               "the page shows version, commit and uptime (%r)"
               % drv.find_element(By.ID, "build").text)

    first = wait(drv, lambda x: chart_total(x, "api")[0] > 0 and chart_total(x, "api"),
                 "a chart with decisions")
    mark = refreshed(drv)
    second = wait(drv, lambda x: refreshed(x) != mark and chart_total(x, "api") != first
                  and chart_total(x, "api"), "the chart to move")
    harness.ok(second[0] > first[0] and second[1] != first[1],
               "the chart's figures move between two refreshes (allowed %d -> %d)"
               % (first[0], second[0]))
    harness.ok(drv.find_elements(By.CSS_SELECTOR, '.chart[data-policy="login"]'),
               "a chart per policy")

    row = wait(drv, lambda x: top_row(x, ABUSIVE), "the abusive key in the top-denied table")
    harness.ok(row is not None, "the top-denied table lists the abusive key")
    nodes = drv.find_element(By.ID, "nodes").text
    harness.ok("yes" in nodes and ("functions" in nodes or "module" in nodes),
               "the backend table shows the Redis node connected, with its path (%r)" % nodes)
    # Reset: no more abuse first, or the key is spent again at once.
    load.abuse.clear()
    harness.eq(d.check("api", ABUSIVE).status, 429, "the abusive key is denied before reset")
    wait(drv, lambda x: click_in_row(x, ABUSIVE, "button.reset"), "a click on reset")
    wait(drv, lambda x: x.find_element(By.ID, "top-result").text.endswith(": done"),
         "the reset to be done")
    r = d.check("api", ABUSIVE)
    harness.eq(r.status, 200, "after pressing reset, /check allows the abusive key again")

    # Override: tier hour, limit 5000, for an hour.
    harness.eq(r.headers.get("x-ratelimit-limit"), "30", "X-RateLimit-Limit before: the tier's")
    wait(drv, lambda x: click_in_row(x, ABUSIVE, "button.override"), "a click on override")
    limit = drv.find_element(By.ID, "ov-limit")
    limit.clear()
    limit.send_keys("5000")
    ttl = drv.find_element(By.ID, "ov-ttl")
    ttl.clear()
    ttl.send_keys("1h")
    drv.find_element(By.CSS_SELECTOR, "#override button[type=submit]").click()
    wait(drv, lambda x: "applied" in x.find_element(By.ID, "ov-result").text,
         "the override to be applied")
    got = harness.wait_until(
        lambda: (lambda h: h if h == "5000" else None)(
            d.check("api", ABUSIVE).headers.get("x-ratelimit-limit")),
        timeout=WAIT_S, what="X-RateLimit-Limit 5000")
    harness.eq(got, "5000", "the override form changes the X-RateLimit-Limit /check answers")
    cell = wait(drv, lambda x: (lambda t: t if "1" in t else None)(
        x.find_element(By.CSS_SELECTOR, "#policies tbody tr td:last-child").text),
        "the policy's override count")
    harness.eq(cell, "1", "the policies table counts the run-time override")
    load.abuse.set()  # the screenshot shows a denied key again
    shot_path = os.path.join(harness.make_tempdir(), "status-page.png")
    drv.save_screenshot(shot_path)
    if shot:
        shutil.copyfile(shot_path, shot)
        harness.diag("screenshot written to %s" % shot)

    drv.set_window_size(360, 740)
    widths = wait(drv, lambda x: x.execute_script(
        "return [document.documentElement.scrollWidth, window.innerWidth]"), "the widths")
    harness.ok(widths[0] <= widths[1],
               "at 360x740 the page is no wider than the window (scrollWidth %d, width %d)"
               % tuple(widths))
    errors = severe(drv)
    harness.eq(errors, [], "no SEVERE entry in the browser's log (CSP violations included)")
    harness.diag("load thread sent %d checks" % load.sent)
    load.close()
    drv.quit()
    d.stop()


def page_with_token(chromium, chromedriver, redis):
    from selenium.webdriver.common.by import By
    d = Daemon("unix:" + redis.socket_path, POLICY, admin=True,
               extra="auth_token_file: %s\n" % harness.token_file(TOKEN)).start()
    drv = make_driver(chromium, chromedriver)
    drv.get("http://127.0.0.1:%d/ui/" % d.admin_port)
    form = wait(drv, lambda x: (lambda f: f if f.is_displayed() else None)(
        x.find_element(By.ID, "login")), "the token form")
    harness.ok(form.is_displayed() and not drv.find_element(By.ID, "content").is_displayed(),
               "with a token file the page asks for the token")
    drv.find_element(By.ID, "token").send_keys("not-" + TOKEN)
    form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    wait(drv, lambda x: x.find_element(By.ID, "login").is_displayed() and x.execute_script(
        "return sessionStorage.getItem('ratelimitd-token') === null"), "a wrong token dropped")
    harness.ok(True, "a wrong token: the page asks again and keeps nothing")
    drv.find_element(By.ID, "token").send_keys(TOKEN)
    form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    wait(drv, lambda x: refreshed(x), "a refresh with the token")
    harness.ok(drv.find_element(By.ID, "content").is_displayed()
               and "version" in drv.find_element(By.ID, "build").text,
               "with the token it shows the status")
    kept = drv.execute_script("return sessionStorage.getItem('ratelimitd-token')")
    harness.eq(kept, TOKEN, "the token is kept in sessionStorage (this tab only)")
    # The first calls were refused 401 before the token was given: those
    # lines are expected; nothing else may be.
    harness.eq(severe(drv, allow=("401",)), [], "no other SEVERE entry in the browser's log")
    drv.quit()
    d.stop()


def main():
    shot = os.environ.get("RATELIMITD_SCREENSHOT")
    if "--screenshot" in sys.argv:
        shot = sys.argv[sys.argv.index("--screenshot") + 1]
    parts = browser_parts()
    if isinstance(parts, str):
        harness.skip_all(parts)
    redis = harness.RedisServer()
    try:
        redis.start()
    except RuntimeError as e:
        harness.skip_all(str(e))
    page_under_load(parts[0], parts[1], redis, shot and os.path.abspath(shot))
    page_with_token(parts[0], parts[1], redis)


harness.run(main)
