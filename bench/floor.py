#!/usr/bin/env python3
"""The read floor: DuckDB decoding every column the job needs, and nothing else.

usage: floor.py --input DIR --from YYYY-MM-DD --to YYYY-MM-DD

Exact de-duplication compares whole rows, so the job needs all eight columns of the reference
orders: this scans them with one cheap aggregate each (DuckDB must decode every value). What
lakeswap does beyond this floor is its own cost.
"""
import argparse
import glob
import os

import duckdb


def main():
    ap = argparse.ArgumentParser(usage=__doc__)
    ap.add_argument("--input", required=True)
    ap.add_argument("--from", dest="first", required=True)
    ap.add_argument("--to", dest="last", required=True)
    a = ap.parse_args()
    files = sorted(
        f for f in glob.glob(os.path.join(a.input, "event_date=*", "*.parquet"))
        if a.first <= f.split("event_date=")[1][:10] <= a.last
    )
    duckdb.connect().execute(
        "SELECT count(*), min(order_id), max(source_version), min(event_timestamp), max(event_date), "
        "min(customer_id), max(currency), sum(amount), max(status) FROM read_parquet($f, hive_partitioning = false)",
        {"f": files},
    ).fetchone()


if __name__ == "__main__":
    main()
