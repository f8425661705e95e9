#!/usr/bin/env python3
"""Interleaved A/B timing of two whole commands: the honest way to compare them on a shared machine.

Runs A and B n times each, in pairs whose order alternates (AB, BA, AB, ...), so drifting load
falls on both alike; each run's wall time and CPU time (user + system of the command and its
children). Prints, for A and B, the median wall and CPU seconds, and the median of the paired
ratios A/B. A command that fails stops the comparison with its exit status and output.

Usage: bench/ab.py [-n PAIRS] [--timeout S] 'COMMAND A' 'COMMAND B'   (each run by bash -c)
"""
import argparse
import os
import resource
import statistics
import subprocess
import sys
import time


def run(cmd, timeout):
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    p = subprocess.run(["bash", "-c", cmd], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout)
    wall = time.monotonic() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    if p.returncode != 0:
        sys.stdout.write(p.stdout.decode("utf-8", "replace")[-3000:])
        sys.exit("ab: '%s' exited with %d" % (cmd, p.returncode))
    return wall, cpu


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-n", type=int, default=5, help="pairs (default 5)")
    ap.add_argument("--timeout", type=float, default=600, help="seconds per run")
    ap.add_argument("a")
    ap.add_argument("b")
    a = ap.parse_args()
    if a.n < 1:
        sys.exit("ab: -n must be at least 1")
    res = {"A": [], "B": []}
    for i in range(a.n):
        for k in (("A", "B") if i % 2 == 0 else ("B", "A")):
            res[k].append(run(a.a if k == "A" else a.b, a.timeout))
    load = os.getloadavg()[0]
    print("%d interleaved pairs, load average %.2f at the end" % (a.n, load))
    print("%-4s %14s %14s   %s" % ("", "median wall s", "median cpu s", "command"))
    for k, cmd in (("A", a.a), ("B", a.b)):
        print("%-4s %14.3f %14.3f   %s" % (k, statistics.median(w for w, _ in res[k]),
                                          statistics.median(c for _, c in res[k]), cmd))
    rw = statistics.median(x[0] / y[0] for x, y in zip(res["A"], res["B"]))
    rc = statistics.median(x[1] / y[1] for x, y in zip(res["A"], res["B"]) if y[1] > 0) if any(
        y[1] > 0 for y in res["B"]) else float("nan")
    print("A/B  %14.2f %14.2f   (median of the paired ratios)" % (rw, rc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
