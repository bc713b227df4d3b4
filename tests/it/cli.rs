//! Risk: the command line misleads. The bundled example runs from a fresh clone; config
//! mistakes are refused before anything runs (exit 2) with the key named; exit codes follow
//! the contract; `--dry-run` touches nothing.

use crate::common::*;
use std::path::Path;
use std::sync::Arc;

fn example_dir() -> tempfile::TempDir {
    let t = tempfile::tempdir().unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    std::fs::create_dir_all(t.path().join("config")).unwrap();
    for c in ["example.toml", "orders_current.toml", "revenue_from_current.toml"] {
        std::fs::copy(root.join("config").join(c), t.path().join("config").join(c)).unwrap();
    }
    std::fs::create_dir_all(t.path().join("examples/data")).unwrap();
    std::os::unix::fs::symlink(root.join("examples/data/orders"), t.path().join("examples/data/orders")).unwrap();
    t
}

#[test]
fn the_bundled_example_runs_and_reruns_unchanged() {
    let t = example_dir();
    let args = ["run", "--config", "config/example.toml", "--from", "2026-11-01", "--to", "2026-11-07"];
    let o = cli(&args, t.path());
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let out = table_of(&o);
    for h in ["partition", "action", "input rows", "duplicates", "superseded", "output rows", "time"] {
        assert!(out.contains(h), "summary column {h}: {out}");
    }
    assert_eq!(out.matches(" created ").count(), 7, "{out}");
    for day in 1..=7 {
        let p = t.path().join(format!("lake/revenue_daily/event_date=2026-11-0{day}/part-00000.parquet"));
        let rows = read_partition(&p);
        assert_eq!(rows.iter().map(|r| r.currency.as_str()).collect::<Vec<_>>(), ["EUR", "GBP", "JPY", "USD"]);
        assert!(rows.iter().all(|r| r.orders > 0 && r.revenue > 0));
    }
    assert!(rows_have_cancelled_and_refunded(t.path()));
    let o = cli(&args, t.path());
    assert_eq!(o.status.code(), Some(0));
    assert_eq!(table_of(&o).matches(" unchanged ").count(), 7, "{}", text(&o));
    let journals = std::fs::read_dir(t.path().join("lake/_lakeswap/revenue_daily/runs")).unwrap().count();
    assert_eq!(journals, 2);
}

fn rows_have_cancelled_and_refunded(root: &Path) -> bool {
    let rows = read_partition(&root.join("lake/revenue_daily/event_date=2026-11-01/part-00000.parquet"));
    rows.iter().any(|r| r.cancelled > 0) && rows.iter().any(|r| r.refunded > 0)
}

fn config_error(edit: impl Fn(String) -> String) -> (Option<i32>, String) {
    let t = example_dir();
    let cfg = t.path().join("config/example.toml");
    let text0 = std::fs::read_to_string(&cfg).unwrap();
    std::fs::write(&cfg, edit(text0)).unwrap();
    let o = cli(&["run", "--config", "config/example.toml", "--date", "2026-11-01"], t.path());
    assert!(!t.path().join("lake/revenue_daily/event_date=2026-11-01").exists(), "nothing is written");
    (o.status.code(), text(&o))
}

#[test]
fn config_errors_name_the_key_and_exit_2() {
    let (code, out) = config_error(|t| t.replace("[aggregate]\n", "[aggregate]\ngrup_by = 1\n"));
    assert_eq!(code, Some(2), "{out}");
    assert!(out.contains("unknown field `grup_by`"), "{out}");

    let (code, out) = config_error(|t| t.replace("version = \"source_version\"", ""));
    assert_eq!(code, Some(2), "{out}");
    assert!(out.contains("identity.version") && out.contains("needs a version"), "{out}");

    let (code, out) = config_error(|t| t.replace("count(DISTINCT customer_id)", "count(DISTINCT client_id)"));
    assert_eq!(code, Some(2), "{out}");
    assert!(out.contains("aggregate.sql") && out.contains("client_id") && out.contains("config/example.toml"), "{out}");

    let (code, out) = config_error(|t| t.replace("version = \"source_version\"", "version = \"revision\""));
    assert_eq!(code, Some(2), "{out}");
    assert!(out.contains("identity.version") && out.contains("no column `revision`"), "{out}");

    let (code, out) = config_error(|t| t.replace("timezone = \"UTC\"", "timezone = \"Mars/Olympus\""));
    assert_eq!(code, Some(2), "{out}");
    assert!(out.contains("job.timezone"), "{out}");

    // An input URL naming one object, not the folder holding it.
    let (code, out) = config_error(|t| {
        t.replace(
            "url = \"examples/data/orders\"",
            "url = \"examples/data/orders/event_date=2026-11-01/part-00000.parquet\"",
        )
    });
    assert_eq!(code, Some(2), "{out}");
    assert!(out.contains("input.url") && out.contains("is a file; name the folder"), "{out}");

    // A store inside the process: a command's writes would end with it.
    let (code, out) =
        config_error(|t| t.replace("url = \"lake/revenue_daily\"", "url = \"memory://lake/revenue_daily\""));
    assert_eq!(code, Some(2), "{out}");
    assert!(out.contains("memory://lake/revenue_daily") && out.contains("inside one process"), "{out}");
}

/// An output URL that is the folder around a table (an empty variable in it, say) is named as
/// such, not taken for a table of an old layout to move, and nothing is touched.
#[test]
fn an_output_around_another_table_is_refused_naming_it() {
    let t = example_dir();
    let o = cli(&["run", "--config", "config/example.toml", "--date", "2026-11-01"], t.path());
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let cfg = t.path().join("config/example.toml");
    let around = std::fs::read_to_string(&cfg).unwrap().replace("url = \"lake/revenue_daily\"", "url = \"lake\"");
    std::fs::write(t.path().join("config/around.toml"), around).unwrap();
    let before = std::fs::read(t.path().join("lake/_lakeswap/revenue_daily/table.json")).unwrap();
    let o = cli(&["run", "--config", "config/around.toml", "--date", "2026-11-01"], t.path());
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("holds other lakeswap tables") && text(&o).contains("revenue_daily"), "{}", text(&o));
    assert!(!text(&o).contains("Move it there"), "{}", text(&o));
    assert_eq!(std::fs::read(t.path().join("lake/_lakeswap/revenue_daily/table.json")).unwrap(), before);
}

#[test]
fn usage_errors_exit_2() {
    let t = example_dir();
    let o = cli(&["run", "--config", "config/example.toml"], t.path());
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let o = cli(&["run", "--config", "config/example.toml", "--date", "2026-02-30"], t.path());
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o).contains("YYYY-MM-DD"));
    let o = cli(&["run", "--config", "config/example.toml", "--from", "2026-11-05", "--to", "2026-11-01"], t.path());
    assert_eq!(o.status.code(), Some(2));
    let o = cli(&["run", "--config", "missing.toml", "--date", "2026-11-01"], t.path());
    assert_eq!(o.status.code(), Some(2));
    // A date whose folder would not be YYYY-MM-DD.
    for far in ["+10000-01-01", "today-3650000"] {
        let o = cli(&["run", "--config", "config/example.toml", "--date", far, "--allow-empty"], t.path());
        assert_eq!(o.status.code(), Some(2), "{}", text(&o));
        assert!(text(&o).contains("0001 to 9999"), "{}", text(&o));
    }
    assert!(
        !t.path().join("lake/revenue_daily").exists()
            || std::fs::read_dir(t.path().join("lake/revenue_daily")).unwrap().next().is_none()
    );
}

#[test]
fn dry_run_prints_the_plan_and_touches_nothing() {
    let t = example_dir();
    let o = cli(
        &["run", "--config", "config/example.toml", "--from", "2026-11-01", "--to", "2026-11-02", "--dry-run"],
        t.path(),
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let out = text(&o);
    assert!(
        out.contains("event_date=2026-11-01") && out.contains("part-00000.parquet") && out.contains("would create"),
        "{out}"
    );
    // Not even the folders a first run makes; `status` neither.
    assert!(!t.path().join("lake").exists());
    let o = cli(&["status", "--config", "config/example.toml"], t.path());
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(!t.path().join("lake").exists());
    // Quiet, it still plans: a refusal is its answer (a scheduler's pre-flight check).
    let cfg = t.path().join("config/example.toml");
    let body = std::fs::read_to_string(&cfg).unwrap().replace("count(DISTINCT customer_id)", "count(DISTINCT client)");
    std::fs::write(&cfg, body).unwrap();
    let o = cli(&["run", "--config", "config/example.toml", "--date", "2026-11-01", "--dry-run", "-q"], t.path());
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("client"), "{}", text(&o));
    // A run refused as a whole takes back the folders it made for the table and its state; a
    // folder with something in it stays.
    let o = cli(&["run", "--config", "config/example.toml", "--date", "2026-11-01"], t.path());
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(!t.path().join("lake").exists(), "{}", text(&o));
    std::fs::create_dir_all(t.path().join("lake/notes")).unwrap();
    let o = cli(&["run", "--config", "config/example.toml", "--date", "2026-11-01"], t.path());
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let left: Vec<_> = walkdir(&t.path().join("lake"));
    assert_eq!(left, ["notes"], "{}", text(&o));
}

/// The folders under `root`, relative, sorted.
fn walkdir(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            out.push(e.path().strip_prefix(root).unwrap().to_string_lossy().to_string());
            if e.path().is_dir() {
                stack.push(e.path());
            }
        }
    }
    out.sort();
    out
}

#[test]
fn summary_json_and_exit_code_of_a_missing_date() {
    let t = example_dir();
    let o = cli(
        &[
            "run",
            "--config",
            "config/example.toml",
            "--from",
            "2026-11-07",
            "--to",
            "2026-11-08",
            "--summary-json",
            "s.json",
        ],
        t.path(),
    );
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let s: serde_json::Value = serde_json::from_slice(&std::fs::read(t.path().join("s.json")).unwrap()).unwrap();
    assert_eq!(s["exit_code"], 1);
    assert_eq!(s["partitions"][0]["action"], "created");
    assert_eq!(s["partitions"][1]["action"], "failed");
}

/// A date that fails before its rows are all counted (a conflict) reports no counts — `null` in
/// `--summary-json` and the log, `-` in the table — never zeros beside its error; a date that
/// commits reports what it read.
#[test]
fn a_failed_date_reports_no_counts_rather_than_zeros() {
    let t = example_dir();
    let o = cli(&["generate", "--out", "gen", "--days", "2", "--rows-per-day", "3000", "--conflicts", "1"], t.path());
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let meta: serde_json::Value =
        serde_json::from_slice(&std::fs::read(t.path().join("gen/_gen_meta.json")).unwrap()).unwrap();
    let cfg =
        std::fs::read_to_string(t.path().join("config/example.toml")).unwrap().replace("examples/data/orders", "gen");
    std::fs::write(t.path().join("gen.toml"), cfg).unwrap();
    let args =
        ["run", "--config", "gen.toml", "--from", "2026-11-01", "--to", "2026-11-02", "--summary-json", "s.json"];
    let o = cli(&[&args[..], &["--log-format", "json"]].concat(), t.path());
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    let s: serde_json::Value = serde_json::from_slice(&std::fs::read(t.path().join("s.json")).unwrap()).unwrap();
    let parts = s["partitions"].as_array().unwrap();
    let failed: Vec<&serde_json::Value> = parts.iter().filter(|p| p["action"] == "failed").collect();
    assert!(!failed.is_empty(), "{s}");
    for p in &failed {
        assert!(p["counts"].is_null() && p["error"].as_str().unwrap().contains("conflicting"), "{p}");
    }
    for p in parts.iter().filter(|p| p["action"] == "created") {
        let date = p["date"].as_str().unwrap();
        assert_eq!(p["counts"]["input_rows"], meta["days"][date]["raw_rows"], "{p} {meta}");
    }
    let log = String::from_utf8_lossy(&o.stderr).to_string();
    let records: Vec<serde_json::Value> = log
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .filter(|r: &serde_json::Value| r["fields"]["record"] == "partition" || r["record"] == "partition")
        .collect();
    assert_eq!(records.len(), parts.len(), "{log}");
    for r in records {
        let f = if r["fields"].is_object() { &r["fields"] } else { &r };
        assert_eq!(f["input_rows"].is_null(), f["action"] == "failed", "{r}");
    }
    // The table: "-" in the failed row's count columns.
    let o = cli(&args[..7], t.path());
    let row = text(&o).lines().find(|l| l.contains(" failed ")).map(str::to_string).unwrap_or_default();
    assert!(row.split_whitespace().nth(2) == Some("-"), "{}", text(&o));
}

#[test]
fn generate_is_deterministic_and_counts_match() {
    let t = tempfile::tempdir().unwrap();
    for out in ["a", "b"] {
        let o = cli(
            &[
                "generate",
                "--out",
                out,
                "--days",
                "2",
                "--rows-per-day",
                "5000",
                "--conflicts",
                "3",
                "--files-per-day",
                "2",
            ],
            t.path(),
        );
        assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    }
    let a = std::fs::read(t.path().join("a/event_date=2026-11-02/part-00001.parquet")).unwrap();
    let b = std::fs::read(t.path().join("b/event_date=2026-11-02/part-00001.parquet")).unwrap();
    assert_eq!(a, b);
    let meta: serde_json::Value =
        serde_json::from_slice(&std::fs::read(t.path().join("a/_gen_meta.json")).unwrap()).unwrap();
    assert_eq!(meta["total"]["raw_rows"], 10_003);
    // Refused before anything is written: a second data set into the first, counts that do not
    // fit, a store that ends with the process.
    let before = std::fs::read(t.path().join("a/_gen_meta.json")).unwrap();
    for (args, says) in [
        (&["--out", "a"][..], "already holds"),
        (&["--out", "c", "--days", "0"][..], "--days 0"),
        (&["--out", "c", "--rows-per-day", "10", "--conflicts", "6"][..], "at most half"),
        (&["--out", "c", "--files-per-day", "0"][..], "--files-per-day 0"),
        (&["--out", "memory://x/y"][..], "memory://"),
        (&["--out", "MEMORY:///x"][..], "MEMORY:///x"),
        (&["--out", "c", "--start-date", "9999-12-31", "--days", "2"][..], "past 9999-12-31"),
    ] {
        let o = cli(&[&["generate"][..], args].concat(), t.path());
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", text(&o));
        assert!(text(&o).contains(says) && !text(&o).contains("panicked"), "{args:?}: {}", text(&o));
    }
    assert_eq!(std::fs::read(t.path().join("a/_gen_meta.json")).unwrap(), before);
    assert!(std::fs::read_dir(t.path().join("c")).map_or(true, |mut d| d.next().is_none()));
    assert_eq!(meta["total"]["duplicate_rows"], 300);
}

#[test]
fn secrets_never_appear_in_output() {
    // A plain HTTP server that answers every request with an error, standing in for a store.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let mut server = std::process::Command::new("python3")
        .args(["-m", "http.server", &port.to_string(), "--bind", "127.0.0.1"])
        .current_dir(std::env::temp_dir())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("python3 runs the stand-in server");
    for _ in 0..50 {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let t = tempfile::tempdir().unwrap();
    let secret = "SUPERSECRET-0123456789";
    let cfg = format!(
        "[job]\nname = \"s\"\nkind = \"aggregate\"\n[input]\nurl = \"s3://bucket/in\"\nformat = \"parquet\"\n\
         options = {{ aws_access_key_id = \"AKIA-TEST\", aws_secret_access_key = \"{secret}\", aws_endpoint = \"http://127.0.0.1:{port}\", aws_allow_http = \"true\", aws_region = \"us-east-1\" }}\n\
         [identity]\nkey = [\"order_id\"]\nversion = \"source_version\"\n{MEASURES}\n[output]\nurl = \"out\"\n"
    );
    std::fs::write(t.path().join("s.toml"), cfg).unwrap();
    for extra in [&["--dry-run"][..], &[][..]] {
        let mut args = vec!["run", "--config", "s.toml", "--date", "2026-11-01"];
        args.extend_from_slice(extra);
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_lakeswap"))
            .args(&args)
            .env("LAKESWAP_LOG", "debug")
            .current_dir(t.path())
            .output()
            .unwrap();
        let out = text(&o);
        assert_ne!(o.status.code(), Some(0), "{out}");
        assert!(out.contains("s3://bucket/in"), "the error names the store: {out}");
        assert!(!out.contains(secret), "the secret leaked: {out}");
    }
    let _ = server.kill();
    let _ = server.wait();
    let journals = t.path().join("_lakeswap/out/runs");
    if let Ok(rd) = std::fs::read_dir(journals) {
        for e in rd.flatten() {
            assert!(!std::fs::read_to_string(e.path()).unwrap().contains(secret));
        }
    }
}

#[test]
fn the_two_stage_example_gives_the_same_revenue() {
    let t = example_dir();
    let o = cli(&["run", "--config", "config/orders_current.toml"], t.path());
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(text(&o).contains("inserted"), "{}", text(&o));
    let range = ["--from", "2026-11-01", "--to", "2026-11-07"];
    let o = cli(&[&["run", "--config", "config/revenue_from_current.toml"][..], &range].concat(), t.path());
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let o = cli(&[&["run", "--config", "config/example.toml"][..], &range].concat(), t.path());
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    for day in 1..=7 {
        let p = |table: &str| t.path().join(format!("lake/{table}/event_date=2026-11-0{day}/part-00000.parquet"));
        assert_eq!(read_partition(&p("revenue_from_current")), read_partition(&p("revenue_daily")), "day {day}");
    }
    // A replay of the same batch changes nothing.
    let o = cli(&["run", "--config", "config/orders_current.toml"], t.path());
    assert_eq!(o.status.code(), Some(0));
    let unchanged = text(&o).lines().filter(|l| l.starts_with("2026-11-0") && l.contains(" unchanged ")).count();
    assert_eq!(unchanged, 7, "{}", text(&o));

    // Every order of the 7th moves to the 6th (a newer version): the current table's 7th is a
    // file of no rows, and the revenue of the 7th follows it — no rows, not the old ones kept
    // by a refusal for missing input.
    use arrow::array::{ArrayRef, AsArray, Date32Array, Int64Array, RecordBatch};
    let whole = |path: &Path| {
        let bytes = bytes::Bytes::from(std::fs::read(path).unwrap());
        let reader =
            parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(bytes).unwrap().build().unwrap();
        let schema = arrow::record_batch::RecordBatchReader::schema(&reader);
        let batches: Vec<RecordBatch> = reader.map(Result::unwrap).collect();
        arrow::compute::concat_batches(&schema, &batches).unwrap()
    };
    let seventh = t.path().join("lake/orders_current/event_date=2026-11-07/part-00000.parquet");
    let b = whole(&seventh);
    let version = b.column_by_name("source_version").unwrap().as_primitive::<arrow::datatypes::Int64Type>();
    let newer: ArrayRef = Arc::new(Int64Array::from_iter_values(version.values().iter().map(|v| v + 1)));
    let sixth = (d("2026-11-06") - d("1970-01-01")).num_days() as i32;
    let schema = b.schema();
    let mut columns: Vec<(&str, ArrayRef)> = schema
        .fields()
        .iter()
        .zip(b.columns())
        .map(|(f, c)| (f.name().as_str(), if f.name() == "source_version" { newer.clone() } else { c.clone() }))
        .collect();
    columns.push(("event_date", Arc::new(Date32Array::from(vec![sixth; b.num_rows()]))));
    std::fs::create_dir_all(t.path().join("moves")).unwrap();
    write_parquet(&t.path().join("moves/m.parquet"), &RecordBatch::try_from_iter(columns).unwrap());
    let cfg = std::fs::read_to_string(t.path().join("config/orders_current.toml"))
        .unwrap()
        .replace("url = \"examples/data/orders\"", "url = \"moves\"");
    std::fs::write(t.path().join("moves.toml"), cfg).unwrap();
    let o = cli(&["run", "--config", "moves.toml"], t.path());
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(whole(&seventh).num_rows(), 0);
    let o = cli(
        &["run", "--config", "config/revenue_from_current.toml", "--from", "2026-11-06", "--to", "2026-11-07"],
        t.path(),
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let revenue =
        |day: u32| t.path().join(format!("lake/revenue_from_current/event_date=2026-11-0{day}/part-00000.parquet"));
    assert_eq!(whole(&revenue(7)).num_rows(), 0);
    let orders = |day: u32| -> i64 {
        let b = whole(&revenue(day));
        b.column_by_name("orders").unwrap().as_primitive::<arrow::datatypes::Int64Type>().values().iter().sum()
    };
    let moved = b.num_rows() as i64;
    let o = cli(&["run", "--config", "config/example.toml", "--date", "2026-11-06"], t.path());
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let daily = |day: u32| -> i64 {
        let b = whole(&t.path().join(format!("lake/revenue_daily/event_date=2026-11-0{day}/part-00000.parquet")));
        b.column_by_name("orders").unwrap().as_primitive::<arrow::datatypes::Int64Type>().values().iter().sum()
    };
    assert_eq!(orders(6), daily(6) + moved);
}
