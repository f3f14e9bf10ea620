# SPDX-License-Identifier: Apache-2.0
"""test_harness.py: harness.in_one_window, the guard every test that counts
inside a fixed window runs its counting through (TAP).

Windows of 1 s and bodies that sleep: a run made to start 0.8 s into a
window and last 0.4 s crosses a boundary whatever the machine's speed (a
slow machine only starts it later, still past 0.8 s or already in the next
window, where it is checked the same way). What is checked is what the
guard promises, measured by the bodies themselves:
- the answer returned is from a run that started and ended in one window;
- a run that crossed is followed by another, with a fresh key;
- with fresh_keys=False the second run starts in a window no run counted in;
- a body slower than the window fails the test with its durations.
"""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402


def recorder(seconds, length, late_first):
    """A body that sleeps `length` and records (fresh, start, end); its first
    run starts 0.8 of the window in when late_first."""
    runs = []

    def body(fresh):
        if late_first and not runs:
            time.sleep((0.8 * seconds - time.time() % seconds) % seconds)
        start = time.time()
        time.sleep(length)
        runs.append((fresh, start, time.time()))
        return len(runs)

    return runs, body


def same_window(seconds, run):
    return run[1] // seconds == run[2] // seconds


def main():
    runs, body = recorder(1.0, 0.4, True)
    got = harness.in_one_window(1.0, body, "a late run")
    last = runs[got - 1]
    harness.ok(got == len(runs) and same_window(1.0, last),
               "the answer is the last run's, inside one window (%d runs)" % len(runs))
    harness.ok(all(not same_window(1.0, r) for r in runs[:-1]),
               "every run before it crossed a boundary")
    harness.eq(len({r[0] for r in runs}), len(runs), "each run had a fresh key")

    runs, body = recorder(1.0, 0.4, True)
    harness.in_one_window(1.0, body, "a late run, fixed keys", fresh_keys=False)
    harness.ok(len(runs) >= 2 or same_window(1.0, runs[0]),
               "fixed keys: a crossing run is run again (%d runs)" % len(runs))
    harness.ok(all(b[1] // 1.0 > a[2] // 1.0 for a, b in zip(runs, runs[1:])),
               "fixed keys: each second run starts in a window after the one the run before "
               "ended in: nothing counted in it")

    runs, body = recorder(0.25, 0.3, False)
    try:
        harness.in_one_window(0.25, body, "a body slower than its window")
        harness.ok(False, "a body slower than its window fails")
    except harness.Fatal as e:
        harness.ok(len(runs) == 3 and "every run crossed" in str(e),
                   "a body slower than its window fails after 3 runs: %s" % e)


harness.run(main)
