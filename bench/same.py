#!/usr/bin/env python3
"""Compares two daily-revenue tables exactly.

usage: same.py DIR_A DIR_B

Every event_date=D/ partition of both, every row: the same dates, the same currencies, the same
counts, and decimals equal as exact numbers (the scale may differ: 1.50 equals 1.5). Prints
`SAME: …` and exits 0, or names the first difference and exits 1.
"""
import glob
import os
import sys
from decimal import Decimal

import pyarrow.parquet as pq


def rows(root):
    out = {}
    for folder in sorted(glob.glob(os.path.join(root, "event_date=*"))):
        day = os.path.basename(folder).split("=", 1)[1]
        for f in sorted(glob.glob(os.path.join(folder, "*.parquet"))):
            for r in pq.read_table(f).to_pylist():
                key = (day, r["currency"])
                if key in out:
                    sys.exit(f"{f}: {key} twice")
                out[key] = {k: (Decimal(v) if isinstance(v, Decimal) else v) for k, v in r.items()}
    return out


def main():
    a, b = rows(sys.argv[1]), rows(sys.argv[2])
    if a.keys() != b.keys():
        sys.exit(f"DIFFERENT: only in A {sorted(a.keys() - b.keys())[:5]}, only in B {sorted(b.keys() - a.keys())[:5]}")
    for k in sorted(a):
        if a[k] != b[k]:
            sys.exit(f"DIFFERENT at {k}: {a[k]} vs {b[k]}")
    days = len({d for d, _ in a})
    orders = sum(r["orders"] for r in a.values())
    revenue = sum(r["revenue"] for r in a.values())
    print(f"SAME: {sys.argv[1]} vs {sys.argv[2]}: {days} partitions, {len(a)} rows; orders={orders} revenue={revenue}")


if __name__ == "__main__":
    main()
