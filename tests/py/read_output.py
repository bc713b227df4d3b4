#!/usr/bin/env python3
"""Reads a lakeswap output folder as a Hive-partitioned data set with a real reader and prints
one JSON object per row (decimals as strings), sorted by date and currency.

usage: read_output.py duckdb|pyarrow|pyarrow-s3 DIR
"""
import json
import sys


def rows_duckdb(root):
    import duckdb
    q = (f"SELECT CAST(event_date AS VARCHAR) AS event_date, currency, orders, CAST(revenue AS VARCHAR) AS revenue, "
         f"cancelled_orders, CAST(refunded_amount AS VARCHAR) AS refunded_amount, customers "
         f"FROM read_parquet('{root}/*/*.parquet', hive_partitioning = true) ORDER BY 1, 2")
    con = duckdb.connect()
    cols = [d[0] for d in con.execute(q).description]
    return [dict(zip(cols, r)) for r in con.execute(q).fetchall()]


def rows_pyarrow(root, filesystem=None):
    import pyarrow.dataset as ds
    part = ds.partitioning(flavor="hive")
    t = ds.dataset(root, format="parquet", partitioning=part, filesystem=filesystem).to_table()
    out = []
    for r in t.to_pylist():
        out.append({
            "event_date": str(r["event_date"]),
            "currency": r["currency"],
            "orders": r["orders"],
            "revenue": str(r["revenue"]),
            "cancelled_orders": r["cancelled_orders"],
            "refunded_amount": str(r["refunded_amount"]),
            "customers": r["customers"],
        })
    return sorted(out, key=lambda r: (r["event_date"], r["currency"]))


def main():
    engine, root = sys.argv[1], sys.argv[2]
    if engine == "duckdb":
        rows = rows_duckdb(root)
    elif engine == "pyarrow":
        rows = rows_pyarrow(root)
    elif engine == "pyarrow-s3":
        import os
        import pyarrow.fs as pafs
        fs = pafs.S3FileSystem(endpoint_override=os.environ["AWS_ENDPOINT_URL"], scheme="http",
                               access_key=os.environ["AWS_ACCESS_KEY_ID"], secret_key=os.environ["AWS_SECRET_ACCESS_KEY"],
                               region=os.environ.get("AWS_REGION", "us-east-1"))
        rows = rows_pyarrow(root, filesystem=fs)
    else:
        sys.exit(f"unknown engine {engine}")
    for r in rows:
        print(json.dumps(r, sort_keys=True))


if __name__ == "__main__":
    main()
