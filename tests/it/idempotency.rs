//! Risk: a re-run appends, drifts, or depends on the range. Re-runs are byte-identical and
//! reported `unchanged`; a range equals each day run alone; a partition is one object.

use crate::common::*;
use lakeswap::commit::Action;

#[tokio::test(flavor = "multi_thread")]
async fn rerun_is_byte_identical_and_unchanged() {
    let lake = Lake::new();
    lake.write_hive(&random_orders(11, 3, 200), 2);
    let first = run_range(&lake.config(), "2026-11-01", "2026-11-03").await;
    assert!(first.partitions.iter().all(|p| p.action == Action::Created));
    let before = lake.snapshot();
    assert_eq!(before.len(), 3, "exactly one object per partition: {:?}", before.keys());
    for _ in 0..2 {
        let again = run_range(&lake.config(), "2026-11-01", "2026-11-03").await;
        assert!(again.partitions.iter().all(|p| p.action == Action::Unchanged), "{}", lakeswap::report::table(&again));
        assert_eq!(lake.snapshot(), before);
    }
    // Forcing a rewrite (delete and run) gives the very same bytes.
    std::fs::remove_file(lake.partition_file("2026-11-02")).unwrap();
    let third = run_range(&lake.config(), "2026-11-01", "2026-11-03").await;
    assert_eq!(third.partitions[1].action, Action::Created);
    assert_eq!(lake.snapshot(), before);
    // No staging is left behind.
    let staging = lake.state().join("staging");
    let leftovers: Vec<_> = walk(&staging);
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_range_equals_each_day_alone() {
    let lake = Lake::new();
    lake.write_hive(&random_orders(12, 4, 250), 2);
    run_range(&lake.config(), "2026-11-01", "2026-11-04").await;
    let whole = lake.snapshot();
    assert_eq!(whole.len(), 4);
    std::fs::remove_dir_all(lake.output()).unwrap();
    for day in ["2026-11-03", "2026-11-01", "2026-11-04", "2026-11-02"] {
        let s = run_range(&lake.config(), day, day).await;
        assert_eq!(s.exit_code, lakeswap::ExitCode::Ok);
    }
    assert_eq!(lake.snapshot(), whole, "the bytes of a date do not depend on the range run");
}

#[tokio::test(flavor = "multi_thread")]
async fn changed_input_replaces_the_partition_whole() {
    let lake = Lake::new();
    let mut rows = random_orders(13, 2, 100);
    lake.write_hive(&rows, 1);
    run_range(&lake.config(), "2026-11-01", "2026-11-02").await;
    let before = lake.snapshot();
    // Late data for the 2nd: a newer version of one order.
    let mut late = rows.iter().find(|r| r.date == d("2026-11-02")).unwrap().clone();
    late.version = 99;
    late.status = "refunded".into();
    rows.push(late);
    let day2: Vec<Order> = rows.iter().filter(|r| r.date == d("2026-11-02")).cloned().collect();
    write_parquet(&lake.input().join("event_date=2026-11-02/part-00000.parquet"), &batch(&day2));
    let s = run_range(&lake.config(), "2026-11-01", "2026-11-02").await;
    assert_eq!(s.partitions[0].action, Action::Unchanged);
    assert_eq!(s.partitions[1].action, Action::Replaced);
    let after = lake.snapshot();
    assert_eq!(after.len(), 2);
    assert_eq!(after["event_date=2026-11-01/part-00000.parquet"], before["event_date=2026-11-01/part-00000.parquet"]);
    assert_eq!(read_partition(&lake.partition_file("2026-11-02")), model(&rows)[&d("2026-11-02")]);
}
