//! Risk: other engines read the table differently (G1's readers). The output, read back by
//! DuckDB (`read_parquet(..., hive_partitioning = true)`) and by pyarrow's Hive-partitioned
//! dataset, equals the model. Needs `python3` with `duckdb` and `pyarrow` (the test script
//! installs them); without them these tests fail, they never pass silently.

use crate::common::*;

fn read_with(engine: &str, dir: &std::path::Path) -> Vec<serde_json::Value> {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/py/read_output.py");
    let o = std::process::Command::new("python3")
        .arg(&script)
        .arg(engine)
        .arg(dir)
        .output()
        .expect("python3 is needed for the reader tests (the README's test command installs it)");
    assert!(
        o.status.success(),
        "{engine} could not read the output (pip install duckdb pyarrow): {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

fn expected(rows: &[Order]) -> Vec<serde_json::Value> {
    let money = |c: i128| format!("{}.{:02}", c / 100, c % 100);
    let mut out = Vec::new();
    for (date, rs) in model(rows) {
        for r in rs {
            out.push(serde_json::json!({
                "event_date": date.to_string(), "currency": r.currency, "orders": r.orders,
                "revenue": money(r.revenue), "cancelled_orders": r.cancelled,
                "refunded_amount": money(r.refunded), "customers": r.customers,
            }));
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread")]
async fn duckdb_and_pyarrow_read_the_expected_values() {
    let lake = Lake::new();
    let rows = random_orders(51, 3, 300);
    lake.write_hive(&rows, 2);
    let s = run_range(&lake.config(), "2026-11-01", "2026-11-03").await;
    assert_eq!(s.exit_code, lakeswap::ExitCode::Ok);
    // Leftovers of a crashed run under `_` folders must not confuse readers.
    std::fs::create_dir_all(lake.output().join("_staging/x/event_date=2026-11-01")).unwrap();
    std::fs::copy(
        lake.partition_file("2026-11-01"),
        lake.output().join("_staging/x/event_date=2026-11-01/part-00000.parquet"),
    )
    .unwrap();
    let want = expected(&rows);
    assert_eq!(want.len(), 12);
    assert_eq!(read_with("duckdb", &lake.output()), want);
    assert_eq!(read_with("pyarrow", &lake.output()), want);
}
