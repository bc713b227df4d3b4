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

/// Two first runs of a new table at once, with queries that give other types: one makes the
/// table, the other is refused as it would have been after it (both committed before, one
/// partition with `orders` an integer and one with a decimal, which DuckDB's read of the table
/// cast to integers).
#[test]
fn first_runs_of_a_new_table_agree_on_its_schema() {
    let lake = Lake::new();
    lake.write_hive(&random_orders(92, 2, 300), 2);
    let counted = lake.config();
    let summed = lake.dir.path().join("summed.toml");
    let text_of = std::fs::read_to_string(&counted).unwrap();
    let other = text_of.replace("fn = \"count\" }", "fn = \"sum\", column = \"amount\" }");
    assert_ne!(other, text_of);
    std::fs::write(&summed, other).unwrap();
    for _ in 0..3 {
        let _ = std::fs::remove_dir_all(lake.output());
        let _ = std::fs::remove_dir_all(lake.state());
        let spawn = |cfg: &std::path::Path, date: &str| {
            std::process::Command::new(env!("CARGO_BIN_EXE_lakeswap"))
                .args(["run", "--config", cfg.to_str().unwrap(), "--date", date, "--wait"])
                .current_dir(lake.dir.path())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        };
        let racers = [spawn(&counted, "2026-11-01"), spawn(&summed, "2026-11-02")];
        let outs: Vec<_> = racers.into_iter().map(|c| c.wait_with_output().unwrap()).collect();
        let mut codes: Vec<i32> = outs.iter().map(|o| o.status.code().unwrap()).collect();
        codes.sort();
        assert_eq!(codes, [0, 2], "{}\n{}", text(&outs[0]), text(&outs[1]));
        let loser = outs.iter().find(|o| o.status.code() == Some(2)).unwrap();
        let t = text(loser);
        assert!(t.contains("another run made the table") || t.contains("would change the schema"), "{t}");
        let made: Vec<_> = std::fs::read_dir(lake.output()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(made.len(), 1, "one partition, of the run that made the table: {made:?}");
    }
}

/// A run of 2026-11-01 with a 300 ms lease, held at its first staging write until the gate
/// lets it on: its task, the gate, the lease's time-to-live.
async fn held_at_staging(
    lake: &Lake,
) -> (tokio::task::JoinHandle<lakeswap::RunSummary>, Arc<tokio::sync::Semaphore>, Duration) {
    held_at_staging_with(lake, &lake.config()).await
}

/// [`held_at_staging`] under the config at `cfg`.
async fn held_at_staging_with(
    lake: &Lake,
    cfg: &std::path::Path,
) -> (tokio::task::JoinHandle<lakeswap::RunSummary>, Arc<tokio::sync::Semaphore>, Duration) {
    // The table made first (a zero-row date): a run making a new table holds the table from its
    // commit to its first swap, so a run held at that swap would keep the other one waiting.
    let made = run_with(&lake.config(), "2026-11-02", "2026-11-02", |o| o.allow_empty = true).await;
    assert_eq!(made.exit_code, ExitCode::Ok, "{}", lakeswap::report::table(&made));
    let mut slow = Job::load(cfg).unwrap();
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

/// A run stalled past its lease's expiry after it computed a date (a paused process, a slow
/// store) must not swap its file in once a later run has taken the date over and found the
/// committed file right (`unchanged`: it writes nothing, so the swap's compare-and-swap alone
/// would pass). The lease is checked again at the swap: exit 4, the later run's table kept.
#[tokio::test(flavor = "multi_thread")]
async fn a_stalled_run_does_not_swap_in_after_a_later_run_found_the_date_unchanged() {
    let lake = Lake::new();
    let rows = random_orders(94, 1, 100);
    lake.write_hive(&rows, 1);
    let first = run_range(&lake.config(), "2026-11-01", "2026-11-01").await;
    assert_eq!(first.exit_code, ExitCode::Ok, "{}", lakeswap::report::table(&first));
    // The stalled run computes under another config (a deploy rolled back later): revenue of
    // placed orders alone, the same columns.
    let text_of = std::fs::read_to_string(lake.config()).unwrap();
    let other = text_of.replace(r#"status = ["placed", "shipped"]"#, r#"status = ["placed"]"#);
    assert_ne!(other, text_of);
    let cfg = lake.dir.path().join("other.toml");
    std::fs::write(&cfg, other).unwrap();
    let (holder, gate, ttl) = held_at_staging_with(&lake, &cfg).await;
    // Its lease lapses (its file gone, as if it had expired), and a later run under the first
    // config finds the committed file right.
    std::fs::remove_file(lake.state().join("leases/event_date=2026-11-01.json")).unwrap();
    let later = run_range(&lake.config(), "2026-11-01", "2026-11-01").await;
    assert_eq!(later.exit_code, ExitCode::Ok, "{}", lakeswap::report::table(&later));
    assert_eq!(later.partitions[0].action, Action::Unchanged, "{}", lakeswap::report::table(&later));
    let committed = lake.snapshot();
    tokio::time::sleep(ttl * 2).await;
    gate.add_permits(1000);
    let s = holder.await.unwrap();
    assert_eq!(s.exit_code, ExitCode::Leased, "{}", lakeswap::report::table(&s));
    assert_eq!(lake.snapshot(), committed, "the later run's table kept");
    assert_eq!(read_partition(&lake.partition_file("2026-11-01")), model(&rows)[&d("2026-11-01")]);
}

/// A store that fails while a run holds its lease lets the lease expire: the run writes
/// nothing, and says the store failed (exit 1, which a scheduler retries as a failure) — not
/// that another run took the date over (exit 4), which no run did. Whether the store fails
/// the renewals (every read of a lease is refused) or leaves them without an answer (a frozen
/// server: every write of a lease waits).
#[tokio::test(flavor = "multi_thread")]
async fn a_lease_that_expired_because_the_store_failed_is_a_store_failure() {
    for hangs in [false, true] {
        let lake = Lake::new();
        lake.write_hive(&random_orders(94, 1, 100), 1);
        let made = run_with(&lake.config(), "2026-11-02", "2026-11-02", |o| o.allow_empty = true).await;
        assert_eq!(made.exit_code, ExitCode::Ok, "{}", lakeswap::report::table(&made));
        let before = lake.snapshot();
        let mut slow = Job::load(&lake.config()).unwrap();
        let faulty = FaultStore::wrap_output(&mut slow, Mode::None);
        // Held when it looks at the committed partition, under its lease.
        let (gate, arrived) = faulty.gate_reads("event_date=2026-11-01/");
        let ttl = Duration::from_millis(300);
        let holder = tokio::spawn(async move {
            let o = lakeswap::RunOptions { dates: Some(vec![d("2026-11-01")]), lease_ttl: ttl, ..Default::default() };
            run::run(&slow, &o).await.unwrap()
        });
        arrived.notified().await;
        let frozen = match hangs {
            true => Some(faulty.gate("leases/").0),
            false => {
                faulty.deny("leases/");
                None
            }
        };
        tokio::time::sleep(ttl * 3).await;
        gate.add_permits(1000);
        // The store answers again, later: the renewal under way ends, the lease is released.
        if let Some(frozen) = frozen {
            tokio::time::sleep(ttl * 2).await;
            frozen.add_permits(1000);
        }
        let s = holder.await.unwrap();
        let t = lakeswap::report::table(&s);
        assert_eq!(s.exit_code, ExitCode::PartialFailure, "hangs: {hangs}\n{t}");
        assert_eq!(s.partitions[0].action, Action::Failed, "{t}");
        let e = s.partitions[0].error.as_deref().unwrap();
        let why = if hangs { "had no answer" } else { "Permission denied" };
        assert!(e.contains("the store failed") && e.contains(why) && !e.contains("took it over"), "{e}");
        assert_eq!(lake.snapshot(), before, "nothing written");
    }
}

/// A run of 2026-11-01 into an in-memory store with conditional writes (`memory://NAME`), behind
/// a fault wrapper, held under its lease (`ttl`) as it looks for the committed partition; the
/// gate lets it go on.
async fn held_in_memory(
    seed: u64,
    name: &str,
    ttl: Duration,
) -> (Lake, Arc<FaultStore>, Arc<tokio::sync::Semaphore>, tokio::task::JoinHandle<lakeswap::RunSummary>) {
    let lake = Lake::new();
    lake.write_hive(&random_orders(seed, 1, 100), 1);
    let out = lake.output().display().to_string();
    let cfg = lake.dir.path().join("memory.toml");
    let text = std::fs::read_to_string(lake.config()).unwrap();
    std::fs::write(&cfg, text.replace(&format!("url = \"{out}\""), &format!("url = \"memory://{name}/t\""))).unwrap();
    let mut job = Job::load(&cfg).unwrap();
    let faulty = FaultStore::wrap_output(&mut job, Mode::None);
    let (gate, arrived) = faulty.gate_reads("event_date=2026-11-01/");
    let holder = tokio::spawn(async move {
        let o = lakeswap::RunOptions { dates: Some(vec![d("2026-11-01")]), lease_ttl: ttl, ..Default::default() };
        run::run(&job, &o).await.unwrap()
    });
    arrived.notified().await;
    (lake, faulty, gate, holder)
}

/// Risk: on an object store, a lease renewal the store applied but whose answer was lost (a
/// timeout; the client retries a put the store had applied) left the run with the lease's old
/// e-tag: its next renewal was refused by the compare-and-swap and the lease taken for lost to
/// another run — the date failed with exit 4, "another run took it over", with no other run.
/// The lease read back names this run: it is renewed from the version read.
#[tokio::test(flavor = "multi_thread")]
async fn a_renewal_whose_answer_was_lost_keeps_the_lease() {
    let ttl = Duration::from_millis(300);
    let (_lake, faulty, gate, holder) = held_in_memory(95, "renewal-lost", ttl).await;
    faulty.lose_update("leases/");
    // Several renewals: the one whose answer is lost, and those after it.
    tokio::time::sleep(ttl * 3).await;
    gate.add_permits(1000);
    let s = holder.await.unwrap();
    let t = lakeswap::report::table(&s);
    assert_eq!(faulty.updates_lost.load(std::sync::atomic::Ordering::SeqCst), 1, "a renewal's answer was lost");
    assert_eq!(s.exit_code, ExitCode::Ok, "{t}");
    assert_eq!(s.partitions[0].action, Action::Created, "{t}");
}

/// Risk: after a renewal's lost answer, the lease is read back; when that read failed too (the
/// store failing for a moment), the lease was taken for lost to another run (exit 4) with no
/// other run. It is a renewal that failed: tried again at the next pass, which keeps the lease
/// once the store answers.
#[tokio::test(flavor = "multi_thread")]
async fn a_lease_whose_read_back_failed_is_renewed_again_not_lost() {
    use std::sync::atomic::Ordering::SeqCst;
    let ttl = Duration::from_millis(600);
    let (_lake, faulty, gate, holder) = held_in_memory(96, "read-back-failed", ttl).await;
    faulty.lose_update("leases/");
    faulty.deny("leases/");
    // A renewal whose answer is lost, then one whose read-back is refused.
    let started = std::time::Instant::now();
    while faulty.updates_lost.load(SeqCst) == 0 || faulty.denied.load(SeqCst) == 0 {
        assert!(started.elapsed() < Duration::from_secs(10), "no renewal reached the store");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    faulty.allow();
    tokio::time::sleep(ttl * 2).await;
    gate.add_permits(1000);
    let s = holder.await.unwrap();
    let t = lakeswap::report::table(&s);
    assert_eq!(s.exit_code, ExitCode::Ok, "{t}");
    assert_eq!(s.partitions[0].action, Action::Created, "{t}");
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

/// Risk: a daily run does not hold the table. One planned under the table's schema, whose date
/// another run's `--schema-change rebuild` did not cover, committed its partition in the old
/// schema after the rebuild recorded the new one: a table of two schemas, exit 0 for both.
/// The run is refused at its commit (exit 2, nothing written); had it committed first, the
/// rebuild says the date is left in the old schema (exit 1).
#[tokio::test(flavor = "multi_thread")]
async fn a_run_planned_before_a_rebuild_does_not_commit_the_old_schema() {
    let lake = Lake::new();
    lake.write_hive(&random_orders(94, 3, 100), 1);
    let counted = lake.config();
    let old = run_range(&counted, "2026-11-01", "2026-11-01").await;
    assert_eq!(old.exit_code, ExitCode::Ok, "{}", lakeswap::report::table(&old));
    let summed = lake.dir.path().join("summed.toml");
    let text_of = std::fs::read_to_string(&counted).unwrap();
    let other = text_of.replace("fn = \"count\" }", "fn = \"sum\", column = \"amount\" }");
    assert_ne!(other, text_of);
    std::fs::write(&summed, other).unwrap();
    let rebuild = |o: &mut lakeswap::RunOptions| o.schema_change = lakeswap::schema::SchemaChange::Rebuild;

    // The old config's run of 2026-11-02, planned and held as it takes its date's lease.
    let mut slow = Job::load(&counted).unwrap();
    let faulty = FaultStore::wrap_output(&mut slow, Mode::None);
    let (gate, arrived) = faulty.gate("leases/event_date=2026-11-02");
    let held = tokio::spawn(async move {
        let o = lakeswap::RunOptions { dates: Some(vec![d("2026-11-02")]), ..Default::default() };
        run::run(&slow, &o).await.unwrap()
    });
    arrived.notified().await;
    let rebuilt = run_with(&summed, "2026-11-01", "2026-11-01", rebuild).await;
    assert_eq!(rebuilt.exit_code, ExitCode::Ok, "{}", lakeswap::report::table(&rebuilt));
    let after_rebuild = lake.snapshot();
    gate.add_permits(1000);
    let s = held.await.unwrap();
    assert_eq!(s.exit_code, ExitCode::Usage, "{}", lakeswap::report::table(&s));
    let e = s.partitions[0].error.as_deref().unwrap();
    assert!(e.contains("another run changed the schema of the table") && e.contains("Nothing was written"), "{e}");
    assert_eq!(lake.snapshot(), after_rebuild, "nothing written");
    assert!(!lake.partition_file("2026-11-02").exists());

    // The other order, rebuilding back to counts: a run of the table's config (sums) commits
    // 2026-11-03 while a rebuild planned before it is held; the rebuild reports the date left in
    // the old schema.
    let mut slow = Job::load(&counted).unwrap();
    let faulty = FaultStore::wrap_output(&mut slow, Mode::None);
    let (gate, arrived) = faulty.gate("leases/event_date=2026-11-01");
    let held = tokio::spawn(async move {
        let o = lakeswap::RunOptions {
            dates: Some(vec![d("2026-11-01")]),
            schema_change: lakeswap::schema::SchemaChange::Rebuild,
            ..Default::default()
        };
        run::run(&slow, &o).await.unwrap()
    });
    arrived.notified().await;
    // Planned before the rebuild recorded anything: the old schema is still the table's.
    let late = run_range(&summed, "2026-11-03", "2026-11-03").await;
    assert_eq!(late.exit_code, ExitCode::Ok, "{}", lakeswap::report::table(&late));
    gate.add_permits(1000);
    let s = held.await.unwrap();
    assert_eq!(s.exit_code, ExitCode::PartialFailure, "{}", lakeswap::report::table(&s));
    let left = s.partitions.iter().find(|p| p.date == d("2026-11-03")).expect("the date left in the old schema");
    assert_eq!(left.action, Action::Failed);
    assert!(
        left.error.as_deref().unwrap().contains("in the table's old schema while this run rebuilt"),
        "{:?}",
        left.error
    );
    let done = s.partitions.iter().find(|p| p.date == d("2026-11-01")).unwrap();
    assert_eq!(done.action, Action::Replaced, "{}", lakeswap::report::table(&s));
    // Rebuilt over every date, the table is whole again.
    let whole = run_with(&counted, "2026-11-01", "2026-11-03", rebuild).await;
    assert_eq!(whole.exit_code, ExitCode::Ok, "{}", lakeswap::report::table(&whole));
}
