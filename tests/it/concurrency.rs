//! Risk: two runs over overlapping dates interleave on a partition (G6). Processes race over
//! one range; a live holder keeps its lease by renewing it; the loser is told who holds it.

use crate::common::faults::{FaultStore, Mode};
use crate::common::*;
use lakeswap::commit::Action;
use lakeswap::{run, ExitCode, Job};
use std::sync::Arc;
use std::time::Duration;

#[test]
fn racing_processes_end_in_the_expected_bytes() {
    let lake = Lake::new();
    let rows = random_orders(91, 10, 150);
    lake.write_hive(&rows, 2);
    let cfg = lake.config();
    let bin = env!("CARGO_BIN_EXE_lakeswap");
    let args = ["run", "--config", cfg.to_str().unwrap(), "--from", "2026-11-01", "--to", "2026-11-10"];
    let spawn = |extra: &[&str]| {
        std::process::Command::new(bin)
            .args(args)
            .args(extra)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    let children: Vec<_> = (0..4).map(|_| spawn(&[])).collect();
    for c in children {
        let o = c.wait_with_output().unwrap();
        let code = o.status.code().unwrap();
        assert!(code == 0 || code == 4, "exit {code}: {}", text(&o));
        if code == 4 {
            let t = text(&o);
            assert!(t.contains("leased by run") && t.contains("pid") && t.contains("expires at"), "{t}");
        }
    }
    let expected = model(&rows);
    for (date, want) in &expected {
        assert_eq!(&read_partition(&lake.partition_file(&date.to_string())), want, "{date}");
    }
    let once = lake.snapshot();
    // With --wait, every racer succeeds and the bytes stay the same.
    let children: Vec<_> = (0..3).map(|_| spawn(&["--wait"])).collect();
    for c in children {
        let o = c.wait_with_output().unwrap();
        assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    }
    assert_eq!(lake.snapshot(), once);
    assert!(lake.state().join("leases").read_dir().map_or(true, |mut d| d.next().is_none()));
}

/// A run of 2026-11-01 with a 300 ms lease, held at its first staging write until the gate
/// lets it on: its task, the gate, the lease's time-to-live.
async fn held_at_staging(
    lake: &Lake,
) -> (tokio::task::JoinHandle<lakeswap::RunSummary>, Arc<tokio::sync::Semaphore>, Duration) {
    let mut slow = Job::load(&lake.config()).unwrap();
    let faulty = FaultStore::wrap_output(&mut slow, Mode::None);
    let (gate, arrived) = faulty.gate("staging/");
    let ttl = Duration::from_millis(300);
    let holder = tokio::spawn(async move {
        let o = lakeswap::RunOptions { dates: Some(vec![d("2026-11-01")]), lease_ttl: ttl, ..Default::default() };
        run::run(&slow, &o).await.unwrap()
    });
    arrived.notified().await;
    (holder, gate, ttl)
}

/// A run whose lease lapsed while it wrote (taken over by another run, which committed) finds
/// the partition changed at its swap: it lost its lease — exit 4, which a scheduler retries —
/// not a failure of its own (exit 1); nothing is overwritten.
#[tokio::test(flavor = "multi_thread")]
async fn a_run_that_lost_its_lease_while_writing_exits_as_leased() {
    let lake = Lake::new();
    lake.write_hive(&random_orders(93, 1, 100), 1);
    let (holder, gate, ttl) = held_at_staging(&lake).await;
    // Its lease gone (as if it had expired), another run takes the date and commits it.
    std::fs::remove_file(lake.state().join("leases/event_date=2026-11-01.json")).unwrap();
    let other = run_range(&lake.config(), "2026-11-01", "2026-11-01").await;
    assert_eq!(other.exit_code, ExitCode::Ok, "{}", lakeswap::report::table(&other));
    let committed = lake.snapshot();
    tokio::time::sleep(ttl * 2).await;
    gate.add_permits(1000);
    let s = holder.await.unwrap();
    assert_eq!(s.exit_code, ExitCode::Leased, "{}", lakeswap::report::table(&s));
    assert!(s.partitions[0].error.as_deref().unwrap().contains("lost the lease"), "{}", lakeswap::report::table(&s));
    assert_eq!(lake.snapshot(), committed, "nothing overwritten");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_live_holder_renews_its_lease_and_keeps_others_out() {
    let lake = Lake::new();
    lake.write_hive(&random_orders(92, 1, 100), 1);
    let (holder, gate, ttl) = held_at_staging(&lake).await;
    // Held at the gate for several lease lifetimes: renewals keep the lease.
    for _ in 0..3 {
        tokio::time::sleep(ttl).await;
        let other = run_range(&lake.config(), "2026-11-01", "2026-11-01").await;
        assert_eq!(other.exit_code, ExitCode::Leased, "{}", lakeswap::report::table(&other));
        assert!(other.partitions[0].error.as_deref().unwrap().contains("leased by run"));
    }
    gate.add_permits(1000);
    let s = holder.await.unwrap();
    assert_eq!(s.partitions[0].action, Action::Created, "{}", lakeswap::report::table(&s));
}
