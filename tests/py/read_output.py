#!/usr/bin/env python3
"""Reads a lakeswap table with a real reader, by the one-line read the README documents for it,
and prints one JSON object per row (the date as YYYY-MM-DD, decimals as strings), sorted by date
and currency. Fails when the partition column does not come back as a date.

usage: read_output.py duckdb|polars|pyarrow|pyarrow-s3|spark DIR
"""
import datetime
import decimal
import json
import sys


def rows_duckdb(out):
    import duckdb
    # README: SELECT * FROM read_parquet('OUT/**/*.parquet', hive_partitioning = true)
    rel = duckdb.sql(f"SELECT * FROM read_parquet('{out}/**/*.parquet', hive_partitioning = true)")
    return [dict(zip(rel.columns, r)) for r in rel.fetchall()]


def rows_polars(out):
    import polars as pl
    # README: pl.scan_parquet(OUT, hive_partitioning=True)
    return pl.scan_parquet(out, hive_partitioning=True).collect().to_dicts()


def rows_pyarrow(out, filesystem=None):
    import pyarrow as pa
    import pyarrow.dataset as ds
    # README: ds.dataset(OUT, format="parquet",
    #                    partitioning=ds.partitioning(pa.schema([("event_date", pa.date32())]), flavor="hive"))
    part = ds.partitioning(pa.schema([("event_date", pa.date32())]), flavor="hive")
    return ds.dataset(out, format="parquet", partitioning=part, filesystem=filesystem).to_table().to_pylist()


def rows_spark(out):
    import os
    from pyspark.sql import SparkSession
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (SparkSession.builder.master("local[1]").appName("lakeswap-reader")
             .config("spark.ui.enabled", "false").config("spark.sql.session.timeZone", "UTC").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    try:
        # README: spark.read.parquet(OUT)
        return [r.asDict() for r in spark.read.parquet(out).collect()]
    finally:
        spark.stop()


def plain(row):
    out = {}
    for k, v in row.items():
        if k == "event_date":
            if type(v) is not datetime.date:
                sys.exit(f"event_date came back as {type(v).__name__} ({v!r}), not a date")
            v = v.isoformat()
        elif isinstance(v, decimal.Decimal):
            v = str(v)
        out[k] = v
    return out


def main():
    engine, out = sys.argv[1], sys.argv[2]
    if engine == "duckdb":
        rows = rows_duckdb(out)
    elif engine == "polars":
        rows = rows_polars(out)
    elif engine == "pyarrow":
        rows = rows_pyarrow(out)
    elif engine == "pyarrow-s3":
        import os
        import pyarrow.fs as pafs
        fs = pafs.S3FileSystem(endpoint_override=os.environ["AWS_ENDPOINT_URL"], scheme="http",
                               access_key=os.environ["AWS_ACCESS_KEY_ID"], secret_key=os.environ["AWS_SECRET_ACCESS_KEY"],
                               region=os.environ.get("AWS_REGION", "us-east-1"))
        rows = rows_pyarrow(out, filesystem=fs)
    elif engine == "spark":
        rows = rows_spark(out)
    else:
        sys.exit(f"unknown engine {engine}")
    for r in sorted((plain(r) for r in rows), key=lambda r: (r["event_date"], r["currency"])):
        print(json.dumps(r, sort_keys=True))


if __name__ == "__main__":
    main()
