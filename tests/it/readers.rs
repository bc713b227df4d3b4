//! Risk: other engines read the table differently, or read more than the table (G1's readers).
//! The output, read back by DuckDB, Polars, pyarrow and Spark with the one-line read the README
//! documents for each, equals the model — with rows set aside in quarantine, a crashed run's
//! staging and the run journals all present in the state location beside it — and the partition
//! column comes back as a date. Needs `python3` with `duckdb`, `polars`, `pyarrow` and `pyspark`
//! (and Java for Spark); the test script installs them. Without them these tests fail, they
//! never pass silently.

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
        "{engine} could not read the output (scripts/test installs the readers: duckdb, polars, pyarrow, pyspark, Java): {}",
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

/// A table with everything a run leaves beside it: journals, a quarantined conflict, a
/// crashed run's staged copy of a partition. The expected rows leave the version in conflict out.
async fn table_with_state() -> (Lake, Vec<serde_json::Value>) {
    let lake = Lake::new();
    let mut rows = random_orders(51, 3, 300);
    let mut conflict = rows.iter().find(|r| r.date == d("2026-11-02")).unwrap().clone();
    conflict.cents += 1;
    rows.push(conflict.clone());
    lake.write_hive(&rows, 2);
    let cfg = lake
        .config_with("key = [\"order_id\"]\nversion = \"source_version\"", "[prepare]\non_conflict = \"quarantine\"\n");
    let s = run_with(&cfg, "2026-11-01", "2026-11-03", |_| {}).await;
    assert_eq!(s.exit_code, lakeswap::ExitCode::Ok, "{}", lakeswap::report::table(&s));
    assert_eq!(walk(&lake.state().join("quarantine")).len(), 1, "the conflict is set aside");
    // A crashed run's staged copy of a partition.
    let staged = lake.state().join("staging/20260101T000000.000Z-dddddd/event_date=2026-11-01/part-00000.parquet");
    std::fs::create_dir_all(staged.parent().unwrap()).unwrap();
    std::fs::copy(lake.partition_file("2026-11-01"), staged).unwrap();
    // The table folder holds the partitions and nothing else.
    let files: Vec<String> = lake.snapshot().into_keys().collect();
    assert_eq!(files.len(), 3, "{files:?}");
    assert!(files.iter().all(|f| f.starts_with("event_date=") && f.ends_with("/part-00000.parquet")), "{files:?}");
    // The version in conflict is set aside; its key keeps its newest other version.
    let kept: Vec<Order> =
        rows.into_iter().filter(|r| (&r.order_id, r.version) != (&conflict.order_id, conflict.version)).collect();
    let want = expected(&kept);
    assert_eq!(want.len(), 12);
    (lake, want)
}

#[tokio::test(flavor = "multi_thread")]
async fn duckdb_reads_the_table_and_only_the_table() {
    let (lake, want) = table_with_state().await;
    assert_eq!(read_with("duckdb", &lake.output()), want);
}

#[tokio::test(flavor = "multi_thread")]
async fn polars_reads_the_table_and_only_the_table() {
    let (lake, want) = table_with_state().await;
    assert_eq!(read_with("polars", &lake.output()), want);
}

#[tokio::test(flavor = "multi_thread")]
async fn pyarrow_reads_the_table_with_a_date_partition() {
    let (lake, want) = table_with_state().await;
    assert_eq!(read_with("pyarrow", &lake.output()), want);
}

#[tokio::test(flavor = "multi_thread")]
async fn spark_reads_the_table_and_only_the_table() {
    let (lake, want) = table_with_state().await;
    assert_eq!(read_with("spark", &lake.output()), want);
}

/// A table written while the state lived inside it (`OUT/_lakeswap/`) is refused by every
/// command that would read or write its state — nothing touched — until the state is moved as
/// the message says; then the table and its history are as they were.
#[test]
fn a_table_with_its_state_inside_is_refused_until_moved() {
    let lake = Lake::new();
    lake.write_hive(&random_orders(52, 2, 50), 1);
    let cfg = lake.config();
    let cfg = cfg.to_str().unwrap();
    let run = ["run", "--config", cfg, "--from", "2026-11-01", "--to", "2026-11-02"];
    let o = cli(&run, lake.dir.path());
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    // The state as lakeswap 0.1.0 kept it.
    std::fs::rename(lake.state(), lake.output().join("_lakeswap")).unwrap();
    let before = lake.snapshot();
    let verify = ["verify", "--config", cfg, "--from", "2026-11-01", "--to", "2026-11-02"];
    for args in [&run[..], &verify, &["status", "--config", cfg], &["gc", "--config", cfg]] {
        let o = cli(args, lake.dir.path());
        let err = text(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains("output.url") && err.contains("_lakeswap/* to") && err.contains("_lakeswap/out"), "{err}");
    }
    assert_eq!(lake.snapshot(), before, "nothing in the table was touched");
    // Moved as told (the state folder made first: the refused runs made none).
    assert!(!lake.state().exists());
    std::fs::create_dir_all(lake.state()).unwrap();
    for e in std::fs::read_dir(lake.output().join("_lakeswap")).unwrap().flatten() {
        std::fs::rename(e.path(), lake.state().join(e.file_name())).unwrap();
    }
    std::fs::remove_dir(lake.output().join("_lakeswap")).unwrap();
    let o = cli(&run, lake.dir.path());
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(table_of(&o).matches(" unchanged ").count(), 2, "{}", text(&o));
    assert_eq!(std::fs::read_dir(lake.state().join("runs")).unwrap().count(), 2, "the history is kept");
    // Staging or quarantine left in the table alone is refused too: readers would read it.
    let left = lake.output().join("_quarantine/20260101T000000.000Z-dddddd/event_date=2026-11-01/part-00000.parquet");
    std::fs::create_dir_all(left.parent().unwrap()).unwrap();
    std::fs::copy(lake.partition_file("2026-11-01"), &left).unwrap();
    let o = cli(&run, lake.dir.path());
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("_quarantine/"), "{}", text(&o));
}

/// Two tables pointed at one state location: the second is refused before it reads or writes
/// anything of the first's (their leases, journals, schema record and tombstones would mix).
#[test]
fn a_state_location_belongs_to_one_table() {
    let lake = Lake::new();
    lake.write_hive(&random_orders(54, 1, 50), 1);
    let shared = lake.dir.path().join("shared-state");
    let cfg_for = |out: &str, name: &str| {
        let text = std::fs::read_to_string(lake.config()).unwrap().replace(
            &format!("url = \"{}\"", lake.output().display()),
            &format!("url = \"{}\"\nstate_url = \"{}\"", lake.dir.path().join(out).display(), shared.display()),
        );
        let p = lake.dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p
    };
    let (a, b) = (cfg_for("table_a", "a.toml"), cfg_for("table_b", "b.toml"));
    let run = |cfg: &std::path::Path| {
        cli(&["run", "--config", cfg.to_str().unwrap(), "--date", "2026-11-01"], lake.dir.path())
    };
    let o = run(&a);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let state_before = walk(&shared);
    for args in [vec!["run", "--date", "2026-11-01"], vec!["status"], vec!["gc"]] {
        let mut full = vec![args[0], "--config", b.to_str().unwrap()];
        full.extend_from_slice(&args[1..]);
        let o = cli(&full, lake.dir.path());
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", text(&o));
        assert!(text(&o).contains("belongs to another table") && text(&o).contains("table_a"), "{}", text(&o));
    }
    assert_eq!(walk(&shared), state_before, "nothing of the first table's state was touched");
    assert!(!lake.dir.path().join("table_b/event_date=2026-11-01").exists());
    let o = run(&a);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
}

/// `state_url` puts the state where it says; the default location is not made.
#[test]
fn state_url_puts_the_state_where_it_says() {
    let lake = Lake::new();
    lake.write_hive(&random_orders(53, 2, 50), 1);
    let cfg = lake.config();
    let elsewhere = lake.dir.path().join("ops/state/revenue");
    let mut text_cfg = std::fs::read_to_string(&cfg).unwrap();
    text_cfg.push_str(&format!("state_url = \"{}\"\n", elsewhere.display()));
    std::fs::write(&cfg, text_cfg).unwrap();
    let cfg = cfg.to_str().unwrap();
    // Commands that only read write nothing into the state (read-only credentials do).
    for args in [&["status", "--config", cfg][..], &["run", "--config", cfg, "--date", "2026-11-01", "--dry-run"]] {
        let o = cli(args, lake.dir.path());
        assert_eq!(o.status.code(), Some(0), "{args:?}: {}", text(&o));
    }
    assert!(walk(&elsewhere).is_empty(), "{:?}", walk(&elsewhere));
    for _ in 0..2 {
        let o = cli(&["run", "--config", cfg, "--from", "2026-11-01", "--to", "2026-11-02"], lake.dir.path());
        assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    }
    assert_eq!(std::fs::read_dir(elsewhere.join("runs")).unwrap().count(), 2);
    assert!(elsewhere.join("table-schema").exists() && elsewhere.join("table.json").exists());
    assert!(!lake.state().exists(), "the default location is not made");
    assert_eq!(lake.snapshot().len(), 2, "the table holds its two partitions only");
    // `status` and `verify` write nothing at all, not even a probe of whether they could
    // (a read-only mount does): every folder keeps its modification time.
    let stamps = || {
        [lake.output(), elsewhere.clone()]
            .iter()
            .flat_map(|root| {
                walk(root).into_iter().filter_map(|f| f.parent().map(|p| p.to_path_buf())).chain([root.clone()])
            })
            .map(|d| (d.clone(), std::fs::metadata(&d).unwrap().modified().unwrap()))
            .collect::<std::collections::BTreeMap<_, _>>()
    };
    let before = stamps();
    let o = cli(&["status", "--config", cfg], lake.dir.path());
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(table_of(&o).contains("committed"), "{}", text(&o));
    let o = cli(&["verify", "--config", cfg, "--from", "2026-11-01", "--to", "2026-11-02"], lake.dir.path());
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let o = cli(&["run", "--config", cfg, "--date", "2026-11-03", "--dry-run"], lake.dir.path());
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(stamps(), before);
    // With the table folder gone, they still know it as the table its state names, as a run
    // does; and what a run would refuse, they refuse without writing.
    let table = lake.output();
    std::fs::rename(&table, lake.dir.path().join("aside")).unwrap();
    for args in [&["status", "--config", cfg][..], &["run", "--config", cfg, "--date", "2026-11-01", "--dry-run"]] {
        let o = cli(args, lake.dir.path());
        assert_eq!(o.status.code(), Some(0), "{args:?}: {}", text(&o));
    }
    assert!(!table.exists());
    std::fs::write(&table, "a file").unwrap();
    let o = cli(&["status", "--config", cfg], lake.dir.path());
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("is not a folder"), "{}", text(&o));
    // Nor a path through a file, which no run could make a folder of.
    let through = text_cfg_with(cfg, &table, &table.join("sub"));
    let o = cli(&["status", "--config", &through], lake.dir.path());
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("is not a folder"), "{}", text(&o));
    std::fs::remove_file(&table).unwrap();
    std::fs::rename(lake.dir.path().join("aside"), &table).unwrap();
    // A new schema is refused while the table holds partitions under the old one ...
    let renamed = std::fs::read_to_string(cfg).unwrap().replace("name = \"orders\"", "name = \"order_count\"");
    std::fs::write(cfg, renamed).unwrap();
    let run = ["run", "--config", cfg, "--from", "2026-11-01", "--to", "2026-11-02"];
    let o = cli(&run, lake.dir.path());
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("would change the schema"), "{}", text(&o));
    // ... and accepted once the table folder is emptied by hand, its state left behind.
    std::fs::remove_dir_all(lake.output()).unwrap();
    let o = cli(&run, lake.dir.path());
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(table_of(&o).matches(" created ").count(), 2, "{}", text(&o));
}

/// A copy of the config at `cfg` with the output URL `from` replaced by `to`; its path.
fn text_cfg_with(cfg: &str, from: &std::path::Path, to: &std::path::Path) -> String {
    let body = std::fs::read_to_string(cfg).unwrap();
    let body = body.replace(&format!("url = \"{}\"", from.display()), &format!("url = \"{}\"", to.display()));
    assert!(body.contains(&to.display().to_string()), "{body}");
    let copy = format!("{cfg}.through.toml");
    std::fs::write(&copy, body).unwrap();
    copy
}

/// A state folder that lies inside the table only through a symlink is refused before
/// anything is written into the table.
#[test]
fn a_state_inside_the_table_through_a_symlink_is_refused() {
    let lake = Lake::new();
    lake.write_hive(&random_orders(55, 1, 20), 1);
    let real = lake.dir.path().join("real/tab");
    std::fs::create_dir_all(&real).unwrap();
    let link = lake.dir.path().join("linktab");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    // The table by its real path, the state through the link: no lexical check sees it.
    let cfg = lake.config();
    let cfg_text = std::fs::read_to_string(&cfg).unwrap().replace(
        &format!("url = \"{}\"", lake.output().display()),
        &format!("url = \"{}\"\nstate_url = \"{}\"", real.display(), link.join("_state").display()),
    );
    std::fs::write(&cfg, cfg_text).unwrap();
    let cfg = cfg.to_str().unwrap();
    // Commands that write nothing see it too, though the state folder does not exist yet.
    for args in [
        &["run", "--config", cfg, "--date", "2026-11-01", "--dry-run"][..],
        &["status", "--config", cfg],
        &["run", "--config", cfg, "--date", "2026-11-01"],
    ] {
        let o = cli(args, lake.dir.path());
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", text(&o));
        assert!(text(&o).contains("output.state_url") && text(&o).contains("inside one another"), "{}", text(&o));
    }
    assert!(walk(&real).is_empty(), "nothing written into the table: {:?}", walk(&real));
}
