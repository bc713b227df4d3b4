#!/usr/bin/env python3
"""Paired whole-process timer of lakeswap's benchmark.

usage: timer.py [-n 5] [--warmup 1] [--vs "COMMAND_B"] -- COMMAND_A [ARG ...]

Each figure is measured from outside the process, start-up included: wall (monotonic clock from
spawn to reap), cpu (user + system of the process and the children it waited for) and peak
(the largest resident set, ru_maxrss). With --vs, A and B alternate (A B A B ...) and A/B is
taken pair by pair, so a drift of the shared machine's speed hits both sides of a ratio alike.
Prints min, median and max of every figure; the commands' own output is discarded.
"""
import argparse
import os
import shlex
import statistics
import subprocess
import time

FIGURES = ("user s", "cpu s", "wall s", "peak MiB")


def once(cmd):
    start = time.monotonic()
    child = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(child.pid, 0)
    return {
        "wall s": time.monotonic() - start,
        "cpu s": usage.ru_utime + usage.ru_stime,
        "user s": usage.ru_utime,
        "peak MiB": usage.ru_maxrss / 1024,
        "exit": os.waitstatus_to_exitcode(status),
    }


def report(label, runs):
    print(f"{label} exit {sorted({r['exit'] for r in runs})} ({len(runs)} runs)")
    for k in FIGURES:
        v = [r[k] for r in runs]
        print(f"{label} {k:<9} {min(v):>10.3f} {statistics.median(v):>10.3f} {max(v):>10.3f}")


def main():
    ap = argparse.ArgumentParser(usage=__doc__)
    ap.add_argument("-n", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--vs")
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    a = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    b = shlex.split(args.vs) if args.vs else None
    for _ in range(args.warmup):
        once(a)
        if b:
            once(b)
    ra, rb = [], []
    for _ in range(args.n):
        ra.append(once(a))
        if b:
            rb.append(once(b))
    print(f"{'':14} {'min':>10} {'median':>10} {'max':>10}")
    report("A", ra)
    if b:
        report("B", rb)
        for k in ("cpu s", "wall s"):
            ratios = [x[k] / y[k] for x, y in zip(ra, rb) if y[k] > 0]
            print(f"A/B {k:<9} {min(ratios):>10.4f} {statistics.median(ratios):>10.4f} {max(ratios):>10.4f}")


if __name__ == "__main__":
    main()
