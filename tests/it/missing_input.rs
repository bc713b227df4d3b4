//! Risk: a late or lost input silently wipes good output (G7). A date without input fails
//! loudly and keeps its old output; `--allow-empty` writes a zero-row file instead.

use crate::common::*;
use lakeswap::commit::Action;
use lakeswap::ExitCode;

#[tokio::test(flavor = "multi_thread")]
async fn missing_input_fails_and_keeps_the_old_output() {
    let lake = Lake::new();
    lake.write_hive(&random_orders(31, 2, 50), 1);
    run_range(&lake.config(), "2026-11-01", "2026-11-02").await;
    let before = lake.snapshot();
    std::fs::remove_dir_all(lake.input().join("event_date=2026-11-02")).unwrap();
    let s = run_range(&lake.config(), "2026-11-01", "2026-11-03").await;
    assert_eq!(s.exit_code, ExitCode::PartialFailure);
    let actions: Vec<Action> = s.partitions.iter().map(|p| p.action).collect();
    assert_eq!(actions, [Action::Unchanged, Action::Failed, Action::Failed]);
    assert!(s.partitions[1].error.as_ref().unwrap().contains("--allow-empty"));
    assert_eq!(lake.snapshot(), before);
}

#[tokio::test(flavor = "multi_thread")]
async fn allow_empty_writes_a_zero_row_partition() {
    let lake = Lake::new();
    lake.write_hive(&random_orders(32, 1, 50), 1);
    let s = run_with(&lake.config(), "2026-11-01", "2026-11-02", |o| o.allow_empty = true).await;
    assert_eq!(s.exit_code, ExitCode::Ok, "{}", lakeswap::report::table(&s));
    assert_eq!(s.partitions[1].action, Action::Created);
    assert!(read_partition(&lake.partition_file("2026-11-02")).is_empty());
    assert!(!read_partition(&lake.partition_file("2026-11-01")).is_empty());
}
