#!/usr/bin/env python3
"""The reference job in DuckDB: lakeswap's peer in its own benchmark.

usage: duckdb_job.py --input DIR --output DIR --from YYYY-MM-DD --to YYYY-MM-DD

Reads the reference raw orders (DIR/event_date=D/*.parquet), drops exact duplicates, refuses a
key + version with two payloads, keeps the latest version of each order, computes revenue per
currency and date, and writes one Parquet file per date, each replacing its partition folder
(written to a staging folder first, then renamed over the old one). DUCKDB_MEMORY_LIMIT (e.g.
1GB) runs DuckDB under a memory budget, spilling to a folder beside the output.
"""
import argparse
import glob
import os
import shutil
import sys
import uuid

import duckdb

DAILY = """
SELECT event_date, currency,
       count(*)::BIGINT                                                                   AS orders,
       coalesce(sum(amount) FILTER (WHERE status IN ('placed', 'shipped')), 0)::DECIMAL(38,2) AS revenue,
       count(*) FILTER (WHERE status = 'cancelled')::BIGINT                               AS cancelled_orders,
       coalesce(sum(amount) FILTER (WHERE status = 'refunded'), 0)::DECIMAL(38,2)         AS refunded_amount,
       count(DISTINCT customer_id)::BIGINT                                                AS customers
FROM (SELECT * FROM distinct_rows
      QUALIFY row_number() OVER (PARTITION BY order_id ORDER BY source_version DESC) = 1)
GROUP BY event_date, currency
"""


def main():
    ap = argparse.ArgumentParser(usage=__doc__)
    ap.add_argument("--input", required=True)
    ap.add_argument("--output", required=True)
    ap.add_argument("--from", dest="first", required=True)
    ap.add_argument("--to", dest="last", required=True)
    a = ap.parse_args()
    files = sorted(
        f for f in glob.glob(os.path.join(a.input, "event_date=*", "*.parquet"))
        if a.first <= f.split("event_date=")[1][:10] <= a.last
    )
    if not files:
        sys.exit("no input for the range")
    con = duckdb.connect()
    if os.environ.get("DUCKDB_MEMORY_LIMIT"):
        con.execute(f"SET memory_limit = '{os.environ['DUCKDB_MEMORY_LIMIT']}'")
        con.execute(f"SET temp_directory = '{a.output}.spill'")
    con.execute("CREATE TEMP TABLE distinct_rows AS SELECT DISTINCT * FROM read_parquet($f, hive_partitioning = false)",
                {"f": files})
    clash = con.execute("SELECT order_id, source_version FROM distinct_rows GROUP BY 1, 2 HAVING count(*) > 1 LIMIT 5").fetchall()
    if clash:
        sys.exit(f"conflicting versions: {clash}")
    con.execute(f"CREATE TEMP TABLE daily AS {DAILY}")
    staging = os.path.join(a.output, f"_staging-{uuid.uuid4().hex[:8]}")
    os.makedirs(staging)
    for (day,) in con.execute("SELECT DISTINCT event_date FROM daily ORDER BY 1").fetchall():
        folder = os.path.join(staging, f"event_date={day}")
        os.makedirs(folder)
        con.execute(f"COPY (SELECT * EXCLUDE (event_date) FROM daily WHERE event_date = DATE '{day}' ORDER BY currency) "
                    f"TO '{folder}/part-00000.parquet' (FORMAT parquet)")
        target = os.path.join(a.output, f"event_date={day}")
        old = target + ".old"
        if os.path.exists(target):
            os.rename(target, old)
        os.rename(folder, target)
        shutil.rmtree(old, ignore_errors=True)
    shutil.rmtree(staging, ignore_errors=True)


if __name__ == "__main__":
    main()
