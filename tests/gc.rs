//! Risk: cleanup deletes what a live run needs, or leaves a crashed run's debris forever.
//! `gc` removes stale staging and expired leases and never touches a live run's staging.

mod common;
use common::*;

fn put(path: &std::path::Path, body: &[u8]) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, body).unwrap();
}

fn lease(run: &str, expires: &str) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({"run_id": run, "host": "h", "pid": 1,
        "since": "2026-01-01T00:00:00Z", "expires": expires}))
    .unwrap()
}

#[test]
fn gc_removes_stale_staging_and_expired_leases_only() {
    let lake = Lake::new();
    lake.write_hive(&random_orders(95, 1, 50), 1);
    let out = lake.output();
    let live_until = (chrono::Utc::now() + chrono::Duration::hours(1)).to_rfc3339();
    // A live run: lease held, staging in progress.
    put(&out.join("_lakeswap/leases/event_date=2026-11-02.json"), &lease("20260101T000000.000Z-aaaaaa", &live_until));
    put(&out.join("_staging/20260101T000000.000Z-aaaaaa/event_date=2026-11-02/part-00000.parquet"), b"in progress");
    // A crashed run: expired lease, staging left behind, and staging without any lease.
    put(
        &out.join("_lakeswap/leases/event_date=2026-11-03.json"),
        &lease("20260101T000000.000Z-dddddd", "2026-01-01T00:01:00Z"),
    );
    put(&out.join("_staging/20260101T000000.000Z-dddddd/event_date=2026-11-03/part-00000.parquet"), b"debris");
    put(&out.join("_staging/20260101T000000.000Z-dddddd/event_date=2026-11-04/part-00000.parquet"), b"debris");
    // Staging of a run that lost its lease to another live run.
    put(&out.join("_staging/20260101T000000.000Z-0000aa/event_date=2026-11-02/part-00000.parquet"), b"debris");

    let o = cli(&["gc", "--config", lake.config().to_str().unwrap()], lake.dir.path());
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(text(&o).contains("removed 1 expired lease(s) and 3 stale staged file(s); kept 1"), "{}", text(&o));
    assert!(out.join("_lakeswap/leases/event_date=2026-11-02.json").exists());
    assert!(out.join("_staging/20260101T000000.000Z-aaaaaa/event_date=2026-11-02/part-00000.parquet").exists());
    assert!(!out.join("_lakeswap/leases/event_date=2026-11-03.json").exists());
    assert!(!out.join("_staging/20260101T000000.000Z-dddddd").exists());
    assert!(!out.join("_staging/20260101T000000.000Z-0000aa").exists());
}

/// Interrupted local writes leave `<name>#<n>` files the object store API never lists: gc
/// removes the old ones anywhere under the output, and leaves a young one (a write in flight).
#[test]
fn gc_removes_old_temporary_files_of_interrupted_writes() {
    let lake = Lake::new();
    lake.write_hive(&random_orders(97, 1, 50), 1);
    let o = cli(
        &["run", "--config", lake.config().to_str().unwrap(), "--from", "2026-11-01", "--to", "2026-11-01"],
        lake.dir.path(),
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let out = lake.output();
    let old = [
        out.join("event_date=2026-11-01/part-00000.parquet#7"),
        out.join("_lakeswap/runs/20260101T000000.000Z-abcdef.json#2"),
        out.join("_lakeswap/leases/event_date=2026-11-05.json#11"),
    ];
    let young = out.join("event_date=2026-11-01/part-00000.parquet#8");
    let an_hour_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
    for p in &old {
        put(p, b"interrupted write");
        std::fs::File::options().write(true).open(p).unwrap().set_modified(an_hour_ago).unwrap();
    }
    put(&young, b"write in flight");
    let committed = std::fs::read(lake.partition_file("2026-11-01")).unwrap();

    let o = cli(&["gc", "--config", lake.config().to_str().unwrap()], lake.dir.path());
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(text(&o).contains("removed 3 temporary file(s) of interrupted writes"), "{}", text(&o));
    assert!(old.iter().all(|p| !p.exists()));
    assert!(young.exists());
    assert_eq!(std::fs::read(lake.partition_file("2026-11-01")).unwrap(), committed, "the committed file is untouched");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_run_cleans_its_own_partitions_first() {
    let lake = Lake::new();
    lake.write_hive(&random_orders(96, 2, 50), 1);
    let out = lake.output();
    put(&out.join("_staging/20260101T000000.000Z-dddddd/event_date=2026-11-01/part-00000.parquet"), b"debris");
    put(
        &out.join("_staging/20260101T000000.000Z-dddddd/event_date=2026-11-01/part-00000.parquet#3"),
        b"interrupted write",
    );
    put(
        &out.join("_staging/20260101T000000.000Z-dddddd/event_date=2026-11-09/part-00000.parquet"),
        b"not this run's partition",
    );
    let s = run_range(&lake.config(), "2026-11-01", "2026-11-02").await;
    assert_eq!(s.exit_code, lakeswap::ExitCode::Ok);
    assert!(!out.join("_staging/20260101T000000.000Z-dddddd/event_date=2026-11-01").exists());
    assert!(out.join("_staging/20260101T000000.000Z-dddddd/event_date=2026-11-09/part-00000.parquet").exists());
}
