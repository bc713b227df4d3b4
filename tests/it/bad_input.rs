//! Risk: bad input is committed, or takes good partitions down with it. A conflict fails only
//! its partitions, naming keys and objects; quarantine; keys under two dates; rows in the wrong
//! folder; overflow. (Null keys, versions and dates are in `catalogue.rs`.)

use crate::common::*;
use lakeswap::commit::Action;
use lakeswap::ExitCode;

#[tokio::test(flavor = "multi_thread")]
async fn a_conflict_fails_only_its_partition() {
    let lake = Lake::new();
    let mut rows = random_orders(21, 3, 100);
    lake.write_hive(&rows, 2);
    run_range(&lake.config(), "2026-11-01", "2026-11-03").await;
    let before = lake.snapshot();
    // Two conflicting rows on the 2nd: same key and version, another amount.
    for r in rows.clone().iter().filter(|r| r.date == d("2026-11-02")).take(2) {
        let mut c = r.clone();
        c.cents += 1;
        rows.push(c);
    }
    // And a new version on the 1st and 3rd, so those partitions change.
    for day in ["2026-11-01", "2026-11-03"] {
        let mut late = rows.iter().find(|r| r.date == d(day)).unwrap().clone();
        late.version = 50;
        rows.push(late);
    }
    lake.write_hive(&rows, 2);
    let s = run_range(&lake.config(), "2026-11-01", "2026-11-03").await;
    assert_eq!(s.exit_code, ExitCode::DataContract);
    let actions: Vec<Action> = s.partitions.iter().map(|p| p.action).collect();
    assert_eq!(actions, [Action::Replaced, Action::Failed, Action::Replaced]);
    let err = s.partitions[1].error.clone().unwrap();
    assert!(
        err.contains("2 conflicting key(s)")
            && err.contains("ord-001-")
            && err.contains("event_date=2026-11-02/part-0000"),
        "{err}"
    );
    // The failed partition is untouched.
    assert_eq!(
        lake.snapshot()["event_date=2026-11-02/part-00000.parquet"],
        before["event_date=2026-11-02/part-00000.parquet"]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn conflict_names_at_most_five_keys_sorted() {
    let lake = Lake::new();
    let mut rows: Vec<Order> = (0..8).map(|i| order(&format!("k{i}"), 1, "2026-11-01", "USD", 100, "placed")).collect();
    for i in (0..8).rev() {
        rows.push(order(&format!("k{i}"), 1, "2026-11-01", "USD", 100, "shipped"));
    }
    lake.write_hive(&rows, 1);
    let s = run_range(&lake.config(), "2026-11-01", "2026-11-01").await;
    let err = s.partitions[0].error.clone().unwrap();
    assert!(err.starts_with("8 conflicting key(s)"), "{err}");
    assert!(err.contains("first 5: key k0 version 1") && err.contains("key k4") && !err.contains("key k5"), "{err}");
}

#[tokio::test(flavor = "multi_thread")]
async fn quarantine_sets_conflicts_aside_and_commits_the_rest() {
    let lake = Lake::new();
    let rows = vec![
        order("a", 1, "2026-11-01", "USD", 100, "placed"),
        order("a", 1, "2026-11-01", "USD", 101, "placed"),
        order("a", 2, "2026-11-01", "USD", 100, "placed"),
        order("b", 1, "2026-11-01", "USD", 700, "placed"),
        order("c", 1, "2026-11-01", "USD", 10, "placed"),
        order("c", 2, "2026-11-01", "USD", 20, "placed"),
        order("c", 2, "2026-11-01", "USD", 21, "placed"),
        order("d", 3, "2026-11-01", "USD", 30, "placed"),
        order("d", 3, "2026-11-01", "USD", 31, "placed"),
    ];
    lake.write_hive(&rows, 1);
    let cfg = lake
        .config_with("key = [\"order_id\"]\nversion = \"source_version\"", "[prepare]\non_conflict = \"quarantine\"\n");
    let s = run_range(&cfg, "2026-11-01", "2026-11-01").await;
    assert_eq!(s.exit_code, ExitCode::Ok);
    assert_eq!(s.partitions[0].counts.unwrap().quarantined_rows, 6, "the rows of each version in conflict");
    assert_eq!(s.partitions[0].counts.unwrap().conflicting_keys, 3);
    // a keeps version 2 (its conflict is at version 1), c its version 1 (its newest is in
    // conflict), d nothing: each key keeps its newest version without a conflict.
    let got = read_partition(&lake.partition_file("2026-11-01"));
    assert_eq!((got[0].orders, got[0].revenue), (3, 810), "a at 100, b at 700, c at 10");
    let q = lake.state().join(format!("quarantine/{}/event_date=2026-11-01/part-00000.parquet", s.run_id));
    assert!(q.exists(), "quarantined rows are kept in the state's quarantine/");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_key_under_two_dates_fails_both_partitions() {
    let lake = Lake::new();
    let rows = vec![
        order("a", 1, "2026-11-01", "USD", 100, "placed"),
        order("x", 1, "2026-11-01", "USD", 100, "placed"),
        order("a", 2, "2026-11-02", "USD", 100, "placed"),
        order("y", 1, "2026-11-02", "USD", 100, "placed"),
        order("z", 1, "2026-11-03", "USD", 100, "placed"),
    ];
    lake.write_hive(&rows, 1);
    let s = run_range(&lake.config(), "2026-11-01", "2026-11-03").await;
    assert_eq!(s.exit_code, ExitCode::DataContract);
    let actions: Vec<Action> = s.partitions.iter().map(|p| p.action).collect();
    assert_eq!(actions, [Action::Failed, Action::Failed, Action::Created]);
    let err = s.partitions[0].error.clone().unwrap();
    assert!(
        err.contains("seen under two dates") && err.contains("key a") && err.contains("event_date=2026-11-02"),
        "{err}"
    );
    assert!(!lake.partition_file("2026-11-01").exists());
}

/// Risk: a date of the range that the run does not compute — skipped as unchanged, or held by
/// another run — was left out of the check, so a late file putting its key under another date
/// committed that date with the key counted twice (exit 0 with `--skip-unchanged`).
#[tokio::test(flavor = "multi_thread")]
async fn a_key_under_two_dates_is_caught_against_dates_the_run_does_not_compute() {
    let lake = Lake::new();
    let rows = vec![
        order("a", 1, "2026-11-01", "USD", 100, "placed"),
        order("x", 1, "2026-11-01", "USD", 100, "placed"),
        order("y", 1, "2026-11-02", "USD", 100, "placed"),
        order("z", 1, "2026-11-03", "USD", 100, "placed"),
    ];
    lake.write_hive(&rows, 1);
    assert_eq!(run_range(&lake.config(), "2026-11-01", "2026-11-03").await.exit_code, ExitCode::Ok);
    let before = lake.snapshot();
    // A late file under the 2nd with key a, which the 1st holds.
    let late = [order("a", 2, "2026-11-02", "USD", 100, "placed")];
    write_parquet(&lake.input().join("event_date=2026-11-02/part-00001.parquet"), &batch(&late));
    let s = run_with(&lake.config(), "2026-11-01", "2026-11-03", |o| o.skip_unchanged = true).await;
    let actions: Vec<Action> = s.partitions.iter().map(|p| p.action).collect();
    assert_eq!(actions, [Action::Skipped, Action::Failed, Action::Skipped], "{}", lakeswap::report::table(&s));
    assert_eq!(s.exit_code, ExitCode::DataContract);
    let err = s.partitions[1].error.clone().unwrap();
    assert!(
        err.contains("seen under two dates") && err.contains("key a") && err.contains("event_date=2026-11-01"),
        "{err}"
    );
    assert_eq!(lake.snapshot(), before, "nothing is written");
    // The 1st held by a live run of another host: its input is read all the same.
    let lease = serde_json::json!({"run_id": "20261204T000000.000Z-abcdef", "host": "elsewhere", "pid": 1,
        "since": "2026-12-04T00:00:00Z", "expires": (chrono::Utc::now() + chrono::Duration::hours(1)).to_rfc3339()});
    std::fs::create_dir_all(lake.state().join("leases")).unwrap();
    std::fs::write(lake.state().join("leases/event_date=2026-11-01.json"), serde_json::to_vec(&lease).unwrap())
        .unwrap();
    let s = run_range(&lake.config(), "2026-11-01", "2026-11-03").await;
    let actions: Vec<Action> = s.partitions.iter().map(|p| p.action).collect();
    assert_eq!(actions, [Action::Failed, Action::Failed, Action::Unchanged], "{}", lakeswap::report::table(&s));
    assert!(s.partitions[0].error.as_deref().is_some_and(|e| e.contains("leased")), "{s:?}");
    assert!(s.partitions[1].error.as_deref().is_some_and(|e| e.contains("seen under two dates")), "{s:?}");
    assert_eq!(lake.snapshot(), before, "nothing is written");
    // The input failing to read (a store error at each call in turn): whenever it is the
    // skipped 1st's, or a second read that names the shared keys, the 2nd cannot be shown free
    // of the 1st's keys and fails rather than pass unchecked. At no call does the 2nd commit.
    std::fs::remove_file(lake.state().join("leases/event_date=2026-11-01.json")).unwrap();
    let (mut unread, mut named) = (0, 0);
    for i in 0..24 {
        let mut job = lakeswap::Job::load(&lake.config()).unwrap();
        job.input.store =
            crate::common::faults::FaultStore::new(job.input.store.clone(), crate::common::faults::Mode::FailAt(i));
        let opts = lakeswap::RunOptions {
            dates: Some(vec![d("2026-11-01"), d("2026-11-02"), d("2026-11-03")]),
            skip_unchanged: true,
            ..Default::default()
        };
        let Ok(s) = lakeswap::run::run(&job, &opts).await else { continue };
        assert_eq!(s.partitions[1].action, Action::Failed, "call {i}: {}", lakeswap::report::table(&s));
        let err = s.partitions[1].error.clone().unwrap();
        if err.contains("the keys of 2026-11-01") && err.contains("could not be read") {
            unread += 1;
            assert_eq!(s.partitions[0].action, Action::Skipped, "call {i}");
        }
        // Or read to find the shared hashes, and not again to name the keys.
        if err.contains("could not be read again to name the keys") {
            named += 1;
        }
        assert_eq!(lake.snapshot(), before, "call {i}: nothing is written");
    }
    assert!(unread > 0 && named > 0, "no call failed the guard's read ({unread}) or the naming ({named})");
}

/// Risk: every key of a date also under another (a re-exported day): the keys behind the
/// matches were gathered by a scan of those gathered so far, quadratic in the shared keys (a
/// run over two dates of 1 M shared keys did not end, nor stop on a signal).
#[tokio::test(flavor = "multi_thread")]
async fn every_key_under_two_dates_fails_both_partitions() {
    let lake = Lake::new();
    let n = 100_000;
    let rows: Vec<_> = ["2026-11-01", "2026-11-02"]
        .iter()
        .enumerate()
        .flat_map(|(v, date)| (0..n).map(move |i| order(&format!("k{i:06}"), v as i64 + 1, date, "USD", 100, "placed")))
        .collect();
    lake.write_hive(&rows, 1);
    let s = run_range(&lake.config(), "2026-11-01", "2026-11-02").await;
    assert_eq!(s.exit_code, ExitCode::DataContract);
    let err = s.partitions[0].error.clone().unwrap();
    assert!(err.contains("seen under two dates") && err.contains("key k000000"), "{err}");
    assert!(s.partitions.iter().all(|p| p.action == Action::Failed));
}

/// Risk: one key typed differently under two dates (an int32 id beside an int64 one, or an
/// integer id inferred from one date's CSV beside text ids in another's) gives two sets of key
/// bytes, so the key is counted under both dates with exit 0 — or, were only the odd date to
/// fail, the others would commit a key that is also under it. Every date fails, naming the
/// types, and nothing is written; declaring the type finds the key under two dates.
#[tokio::test(flavor = "multi_thread")]
async fn a_key_typed_differently_under_two_dates_is_not_missed() {
    use arrow::array::{ArrayRef, Int32Array, Int64Array, RecordBatch};
    use std::sync::Arc;
    let config = |lake: &Lake, format: &str, schema: &str| {
        let text = format!(
            "[job]\nname = \"t\"\nkind = \"aggregate\"\n\n[input]\nurl = \"{}\"\nformat = \"{format}\"\n{schema}\n\n\
             [identity]\nkey = [\"id\"]\nversion = \"v\"\n\n[aggregate]\nsql = \"SELECT count(*) AS n FROM events\"\n\n\
             [output]\nurl = \"{}\"\n",
            lake.input().display(),
            lake.output().display()
        );
        let p = lake.input().parent().unwrap().join("job.toml");
        std::fs::write(&p, text).unwrap();
        p
    };
    let dir = |lake: &Lake, date: &str| {
        let d = lake.input().join(format!("event_date={date}"));
        std::fs::create_dir_all(&d).unwrap();
        d
    };

    // CSV: ids all digits on the 1st and 3rd (int64), text on the 2nd; 1001 is under the 1st and the 2nd.
    let lake = Lake::new();
    std::fs::write(dir(&lake, "2026-11-01").join("a.csv"), "id,v\n1001,1\n1002,1\n").unwrap();
    std::fs::write(dir(&lake, "2026-11-02").join("a.csv"), "id,v\n1001,2\nX-1003,1\n").unwrap();
    std::fs::write(dir(&lake, "2026-11-03").join("a.csv"), "id,v\n2001,1\n").unwrap();
    let s = run_range(&config(&lake, "csv", ""), "2026-11-01", "2026-11-03").await;
    assert_eq!(s.exit_code, ExitCode::DataContract);
    let actions: Vec<Action> = s.partitions.iter().map(|p| p.action).collect();
    assert_eq!(actions, [Action::Failed, Action::Failed, Action::Failed]);
    let err = s.partitions[1].error.clone().unwrap();
    assert!(
        err.contains("key column `id` is utf8 under this date but Int64 under 2026-11-01 and 1 other date")
            && err.contains("id = \"utf8\""),
        "{err}"
    );
    for p in [0, 2] {
        let err = s.partitions[p].error.clone().unwrap();
        assert!(err.contains("key column `id` is Int64 under this date but utf8 under 2026-11-02:"), "{err}");
    }
    assert!(["2026-11-01", "2026-11-02", "2026-11-03"].iter().all(|d| !lake.partition_file(d).exists()));
    // Declared text, every date reads it alike: the key under two dates fails both.
    let s = run_range(&config(&lake, "csv", "schema = { id = \"utf8\" }"), "2026-11-01", "2026-11-03").await;
    let actions: Vec<Action> = s.partitions.iter().map(|p| p.action).collect();
    assert_eq!(actions, [Action::Failed, Action::Failed, Action::Created]);
    assert!(s.partitions[0].error.clone().unwrap().contains("key 1001"), "{:?}", s.partitions[0].error);

    // Parquet: int32 ids on the 1st, int64 on the 2nd (a tie: the earlier date's types are kept).
    let lake = Lake::new();
    let write = |date: &str, ids: ArrayRef| {
        let v: ArrayRef = Arc::new(Int64Array::from(vec![1; ids.len()]));
        write_parquet(
            &dir(&lake, date).join("a.parquet"),
            &RecordBatch::try_from_iter([("id", ids), ("v", v)]).unwrap(),
        );
    };
    write("2026-11-01", Arc::new(Int32Array::from(vec![1001, 1002])));
    write("2026-11-02", Arc::new(Int64Array::from(vec![1001])));
    let s = run_range(&config(&lake, "parquet", ""), "2026-11-01", "2026-11-02").await;
    let actions: Vec<Action> = s.partitions.iter().map(|p| p.action).collect();
    assert_eq!(actions, [Action::Failed, Action::Failed]);
    let err = s.partitions[1].error.clone().unwrap();
    assert!(
        err.contains("is Int64 under this date but Int32 under 2026-11-01:") && err.contains("id = \"int64\""),
        "{err}"
    );
    let err = s.partitions[0].error.clone().unwrap();
    assert!(err.contains("is Int32 under this date but Int64 under 2026-11-02:"), "{err}");
    // A guard typed otherwise (2026-11-02 run alone, then the range with 11-02 unchanged):
    // the computed date fails too.
    write("2026-11-03", Arc::new(Int32Array::from(vec![3001])));
    let schema_free = config(&lake, "parquet", "");
    assert_eq!(run_range(&schema_free, "2026-11-02", "2026-11-02").await.exit_code, ExitCode::Ok);
    let s = run_with(&schema_free, "2026-11-02", "2026-11-03", |o| o.skip_unchanged = true).await;
    let actions: Vec<Action> = s.partitions.iter().map(|p| p.action).collect();
    assert_eq!(actions, [Action::Skipped, Action::Failed], "{s:?}");
    assert!(s.partitions[1]
        .error
        .as_deref()
        .is_some_and(|e| e.contains("Int32 under this date but Int64 under 2026-11-02")));
    assert!(!lake.partition_file("2026-11-03").exists());
    let s = run_range(&config(&lake, "parquet", "schema = { id = \"int64\" }"), "2026-11-01", "2026-11-02").await;
    assert!(
        s.partitions.iter().all(|p| p.error.as_deref().is_some_and(|e| e.contains("seen under two dates"))),
        "{s:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_row_in_the_wrong_date_folder_is_bad_input() {
    let lake = Lake::new();
    let rows =
        vec![order("a", 1, "2026-11-01", "USD", 100, "placed"), order("b", 1, "2026-11-02", "USD", 100, "placed")];
    write_parquet(&lake.input().join("event_date=2026-11-01/part-00000.parquet"), &batch(&rows));
    let s = run_range(&lake.config(), "2026-11-01", "2026-11-01").await;
    let e = s.partitions[0].error.clone().unwrap();
    assert!(e.contains("row 1, column `event_date`") && e.contains("holds 2026-11-02"), "{e}");
}

#[tokio::test(flavor = "multi_thread")]
async fn decimal_overflow_names_the_measure_and_spares_the_rest() {
    let lake = Lake::new();
    // Amounts declared decimal(38,2): ten of 10^35 fit one by one, but their sum does not.
    let small: Vec<Order> = (0..5).map(|i| order(&format!("s{i}"), 1, "2026-11-01", "USD", 100, "placed")).collect();
    let big: Vec<Order> =
        (0..20).map(|i| order(&format!("o{i}"), 1, "2026-11-02", "USD", 10i128.pow(37), "placed")).collect();
    write_parquet(
        &lake.input().join("event_date=2026-11-01/part-00000.parquet"),
        &recast(&batch(&small), 5, arrow::datatypes::DataType::Decimal128(38, 2)),
    );
    write_parquet(
        &lake.input().join("event_date=2026-11-02/part-00000.parquet"),
        &recast(&batch(&big), 5, arrow::datatypes::DataType::Decimal128(38, 2)),
    );
    let s = run_range(&lake.config(), "2026-11-01", "2026-11-02").await;
    assert_eq!(s.exit_code, ExitCode::DataContract);
    assert_eq!(s.partitions[0].action, Action::Created);
    assert_eq!(s.partitions[1].action, Action::Failed);
    let e = s.partitions[1].error.clone().unwrap();
    assert!(e.contains("measure `revenue` overflows") && e.contains("decimal(38)"), "{e}");
    assert!(!lake.partition_file("2026-11-02").exists());
}
