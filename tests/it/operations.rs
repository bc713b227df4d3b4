//! Risk: daily operation is costly or opaque. Trailing windows skip unchanged days without
//! reading them, a failed run's partitions can be retried exactly, shards split a backfill
//! without overlap, logs go out as JSON, and dates follow the job's time zone across DST.

use crate::common::faults::{FaultStore, Mode};
use crate::common::*;
use lakeswap::commit::Action;
use lakeswap::{run, ExitCode, Job, RunOptions};
use std::sync::atomic::Ordering;

#[tokio::test(flavor = "multi_thread")]
async fn skip_unchanged_reads_only_the_changed_days() {
    let lake = Lake::new();
    let rows = random_orders(111, 3, 100);
    lake.write_hive(&rows, 2);
    run_range(&lake.config(), "2026-11-01", "2026-11-03").await;
    // Late data for the 2nd only.
    let mut day2: Vec<Order> = rows.iter().filter(|r| r.date == d("2026-11-02")).cloned().collect();
    let mut late = day2[0].clone();
    late.version = 42;
    day2.push(late);
    write_parquet(&lake.input().join("event_date=2026-11-02/part-00001.parquet"), &batch(&day2));

    let mut job = Job::load(&lake.config()).unwrap();
    let counter = FaultStore::new(job.input.store.clone(), Mode::None);
    job.input.store = counter.clone();
    let opts = RunOptions {
        dates: Some(lakeswap::dates::range(d("2026-11-01"), d("2026-11-03")).unwrap()),
        skip_unchanged: true,
        ..Default::default()
    };
    let s = run::run(&job, &opts).await.unwrap();
    let actions: Vec<Action> = s.partitions.iter().map(|p| p.action).collect();
    assert_eq!(actions, [Action::Skipped, Action::Replaced, Action::Skipped], "{}", lakeswap::report::table(&s));
    // Every object's footer to learn the run's schema (a ranged read each), then the whole of
    // the 2nd's two objects, and the 1st's and 3rd's for their keys: a skipped date still
    // takes part in the check that no key is under two dates.
    assert_eq!(counter.gets.load(Ordering::SeqCst), 6 + 2 + 4);
    // Without the flag every day is read again, and found unchanged.
    let s = run::run(&Job::load(&lake.config()).unwrap(), &RunOptions { skip_unchanged: false, ..opts.clone() })
        .await
        .unwrap();
    assert!(s.partitions.iter().all(|p| p.action == Action::Unchanged));
    // A file copied into the 1st's folder: readers would see its rows too, so the 1st is not
    // skipped, and fails naming it, as a run without the flag does.
    let first = lake.partition_file("2026-11-01");
    std::fs::copy(&first, first.with_file_name("part-00001.parquet")).unwrap();
    let s = run::run(&Job::load(&lake.config()).unwrap(), &opts).await.unwrap();
    let actions: Vec<Action> = s.partitions.iter().map(|p| p.action).collect();
    assert_eq!(actions, [Action::Failed, Action::Skipped, Action::Skipped], "{}", lakeswap::report::table(&s));
    assert!(s.partitions[0].error.as_deref().is_some_and(|e| e.contains("part-00001.parquet")), "{s:?}");
    std::fs::remove_file(first.with_file_name("part-00001.parquet")).unwrap();

    // The 3rd as an older lakeswap wrote it, under a rule since fixed (a row short, its footer
    // without the rules it followed): recomputed, not kept as unchanged.
    let third = lake.partition_file("2026-11-03");
    let right = std::fs::read(&third).unwrap();
    let reader =
        parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(std::fs::File::open(&third).unwrap())
            .unwrap();
    let kv = reader.metadata().file_metadata().key_value_metadata().cloned().unwrap();
    let lineage = kv.iter().find(|k| k.key == lakeswap::lineage::FOOTER_KEY).unwrap().value.clone().unwrap();
    let mut older: serde_json::Value = serde_json::from_str(&lineage).unwrap();
    assert_eq!(older["rules"], lakeswap::lineage::RULES);
    older.as_object_mut().unwrap().remove("rules");
    let b = reader.build().unwrap().next().unwrap().unwrap();
    let short = b.slice(1, b.num_rows() - 1);
    let props = parquet::file::properties::WriterProperties::builder()
        .set_key_value_metadata(Some(vec![parquet::file::metadata::KeyValue::new(
            lakeswap::lineage::FOOTER_KEY.to_string(),
            older.to_string(),
        )]))
        .build();
    let mut w =
        parquet::arrow::ArrowWriter::try_new(std::fs::File::create(&third).unwrap(), short.schema(), Some(props))
            .unwrap();
    w.write(&short).unwrap();
    w.close().unwrap();
    let s = run::run(&Job::load(&lake.config()).unwrap(), &opts).await.unwrap();
    let actions: Vec<Action> = s.partitions.iter().map(|p| p.action).collect();
    assert_eq!(actions, [Action::Skipped, Action::Skipped, Action::Replaced], "{}", lakeswap::report::table(&s));
    assert_eq!(std::fs::read(&third).unwrap(), right);
}

/// Risk: a key committed under two dates by two runs of one date each (a daily schedule, a retry
/// of a late date, shards) is caught by a later run covering both — but a `--skip-unchanged`
/// window skipped both dates, as neither changed, and never checked them: the key counted twice
/// with exit 0 on every scheduled run. Two skipped dates whose keys no run checked together are
/// not both skipped: the later is computed, the other guarding it.
#[tokio::test(flavor = "multi_thread")]
async fn a_skip_window_checks_dates_whose_keys_were_never_checked_together() {
    let lake = Lake::new();
    let mut rows = random_orders(113, 3, 40);
    let twice = order("ord-000-000001", 9, "2026-11-02", "USD", 100, "placed");
    rows.push(twice.clone());
    lake.write_hive(&rows, 1);
    let cfg = lake.config();
    for date in ["2026-11-01", "2026-11-02"] {
        let s = run_range(&cfg, date, date).await;
        assert_eq!(s.exit_code, ExitCode::Ok, "one date alone: {}", lakeswap::report::table(&s));
    }
    let window = |from: &str, to: &str| RunOptions {
        dates: Some(lakeswap::dates::range(d(from), d(to)).unwrap()),
        skip_unchanged: true,
        ..Default::default()
    };
    let job = Job::load(&cfg).unwrap();
    let plan = run::dry_run(&job, &window("2026-11-01", "2026-11-02")).await.unwrap();
    assert!(plan.contains("would compute again"), "{plan}");
    let committed = lake.snapshot();
    let s = run::run(&job, &window("2026-11-01", "2026-11-02")).await.unwrap();
    let actions: Vec<Action> = s.partitions.iter().map(|p| p.action).collect();
    assert_eq!(actions, [Action::Skipped, Action::Failed], "{}", lakeswap::report::table(&s));
    assert_eq!(s.exit_code, ExitCode::DataContract, "{}", lakeswap::report::table(&s));
    let e = s.partitions[1].error.as_deref().unwrap();
    assert!(e.contains("ord-000-000001") && e.contains("two dates"), "{e}");
    assert_eq!(lake.snapshot(), committed, "nothing written");

    // The late row gone, the 2nd is computed (its input changed) and checked with the 1st.
    rows.retain(|r| r != &twice);
    let day2: Vec<Order> = rows.iter().filter(|r| r.date == d("2026-11-02")).cloned().collect();
    write_parquet(&lake.input().join("event_date=2026-11-02/part-00000.parquet"), &batch(&day2));
    let s = run::run(&job, &window("2026-11-01", "2026-11-02")).await.unwrap();
    let actions: Vec<Action> = s.partitions.iter().map(|p| p.action).collect();
    assert_eq!(actions, [Action::Skipped, Action::Replaced], "{}", lakeswap::report::table(&s));
    let s = run::run(&job, &window("2026-11-01", "2026-11-02")).await.unwrap();
    assert!(s.partitions.iter().all(|p| p.action == Action::Skipped), "{}", lakeswap::report::table(&s));
    // The 2nd changed again and run alone: what it was checked with is of other keys.
    let mut late = day2[1].clone();
    late.version += 10;
    let day2: Vec<Order> = day2.iter().cloned().chain([late]).collect();
    write_parquet(&lake.input().join("event_date=2026-11-02/part-00000.parquet"), &batch(&day2));
    assert_eq!(run_range(&cfg, "2026-11-02", "2026-11-02").await.exit_code, ExitCode::Ok);
    let s = run::run(&job, &window("2026-11-01", "2026-11-02")).await.unwrap();
    let actions: Vec<Action> = s.partitions.iter().map(|p| p.action).collect();
    assert_eq!(actions, [Action::Skipped, Action::Unchanged], "{}", lakeswap::report::table(&s));
    // The 3rd, run alone, was checked with neither: computed again once, then never.
    let s = run_range(&cfg, "2026-11-03", "2026-11-03").await;
    assert_eq!(s.exit_code, ExitCode::Ok, "{}", lakeswap::report::table(&s));
    let s = run::run(&job, &window("2026-11-01", "2026-11-03")).await.unwrap();
    let actions: Vec<Action> = s.partitions.iter().map(|p| p.action).collect();
    assert_eq!(actions, [Action::Skipped, Action::Skipped, Action::Unchanged], "{}", lakeswap::report::table(&s));
    for _ in 0..2 {
        let s = run::run(&job, &window("2026-11-01", "2026-11-03")).await.unwrap();
        assert!(s.partitions.iter().all(|p| p.action == Action::Skipped), "{}", lakeswap::report::table(&s));
    }
    // A gc keeps what the dates were checked with.
    let g = lakeswap::gc::gc(&job.output, &job.state, "event_date", &Default::default()).await.unwrap();
    assert!(g.not_mine.is_empty(), "{g:?}");
    let s = run::run(&job, &window("2026-11-01", "2026-11-03")).await.unwrap();
    assert!(s.partitions.iter().all(|p| p.action == Action::Skipped), "{}", lakeswap::report::table(&s));
}

/// Two windows of other ranges taking turns (a shard of a backfill, a trailing window) each
/// check some pairs of dates: what a date was checked with adds up, and both settle into
/// skipping rather than computing a date again on every run.
#[tokio::test(flavor = "multi_thread")]
async fn skip_windows_of_other_ranges_settle() {
    let lake = Lake::new();
    lake.write_hive(&random_orders(114, 3, 30), 1);
    let cfg = lake.config();
    for date in ["2026-11-01", "2026-11-02", "2026-11-03"] {
        assert_eq!(run_range(&cfg, date, date).await.exit_code, ExitCode::Ok);
    }
    let job = Job::load(&cfg).unwrap();
    let shard =
        RunOptions { dates: Some(vec![d("2026-11-01"), d("2026-11-03")]), skip_unchanged: true, ..Default::default() };
    let trailing = RunOptions { dates: Some(vec![d("2026-11-02"), d("2026-11-03")]), ..shard.clone() };
    let mut computed = Vec::new();
    for _ in 0..3 {
        for o in [&shard, &trailing] {
            let s = run::run(&job, o).await.unwrap();
            assert_eq!(s.exit_code, ExitCode::Ok, "{}", lakeswap::report::table(&s));
            computed.push(s.partitions.iter().filter(|p| p.action != Action::Skipped).count());
        }
    }
    assert_eq!(computed, [1, 1, 0, 0, 0, 0], "the 3rd once for each pair, then never");
}

/// The run id a `--summary-json` file names.
fn run_id_in(summary: &std::path::Path) -> String {
    let s: serde_json::Value = serde_json::from_slice(&std::fs::read(summary).unwrap()).unwrap();
    s["run_id"].as_str().unwrap_or_else(|| panic!("no run id: {s}")).to_string()
}

/// The dates of the partition lines of a run's table.
fn dates_in(o: &std::process::Output) -> Vec<String> {
    table_of(o).lines().filter(|l| l.starts_with("2026-")).map(|l| l[..10].to_string()).collect()
}

#[test]
fn retry_failed_reruns_exactly_the_failed_partitions() {
    let lake = Lake::new();
    let rows = random_orders(112, 3, 50);
    lake.write_hive(&rows, 1);
    // A conflict on the 3rd.
    let mut bad: Vec<Order> = rows.iter().filter(|r| r.date == d("2026-11-03")).cloned().collect();
    let mut c = bad[0].clone();
    c.cents += 1;
    bad.push(c);
    write_parquet(&lake.input().join("event_date=2026-11-03/part-00000.parquet"), &batch(&bad));
    let cfg = lake.config();
    let o = cli(
        &[
            "run",
            "--config",
            cfg.to_str().unwrap(),
            "--from",
            "2026-11-01",
            "--to",
            "2026-11-03",
            "--summary-json",
            "s.json",
        ],
        lake.dir.path(),
    );
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    let run_id = run_id_in(&lake.dir.path().join("s.json"));
    // Under another config (another query; another `--var` alike) the retry is refused before
    // anything runs: the run's dates would be computed two ways.
    let other = lake.dir.path().join("other.toml");
    let t = std::fs::read_to_string(&cfg).unwrap();
    let t2 = t.replace(r#"status = ["placed", "shipped"]"#, r#"status = ["placed"]"#);
    assert_ne!(t, t2);
    std::fs::write(&other, t2).unwrap();
    let before = lake.snapshot();
    let o = cli(&["run", "--config", other.to_str().unwrap(), "--retry-failed", &run_id], lake.dir.path());
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("ran under another config"), "{}", text(&o));
    assert_eq!(lake.snapshot(), before);
    // Fix the source, retry just that run's failures.
    let good: Vec<Order> = rows.iter().filter(|r| r.date == d("2026-11-03")).cloned().collect();
    write_parquet(&lake.input().join("event_date=2026-11-03/part-00000.parquet"), &batch(&good));
    let o = cli(&["run", "--config", cfg.to_str().unwrap(), "--retry-failed", &run_id], lake.dir.path());
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let (out, lines) = (table_of(&o), dates_in(&o));
    assert_eq!(lines, ["2026-11-03"], "{out}");
    assert!(out.contains("created"), "{out}");
    let o = cli(&["run", "--config", cfg.to_str().unwrap(), "--retry-failed", "no-such-run"], lake.dir.path());
    assert_eq!(o.status.code(), Some(2));
    // A run killed before it reported on any date (its journal as it was written at start):
    // every date it planned is retried, not "nothing to retry" with exit 0.
    let killed = "20261204T000000.000Z-abcdef";
    let journal = lakeswap::journal::Journal::start(
        killed,
        "t",
        lakeswap::dates::range(d("2026-11-01"), d("2026-11-03")).unwrap(),
        chrono::Utc::now(),
    );
    std::fs::write(lake.state().join(format!("runs/{killed}.json")), serde_json::to_vec(&journal).unwrap()).unwrap();
    let o = cli(&["run", "--config", cfg.to_str().unwrap(), "--retry-failed", killed], lake.dir.path());
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let (out, lines) = (table_of(&o), dates_in(&o));
    assert_eq!(lines, ["2026-11-01", "2026-11-02", "2026-11-03"], "{out}");
    assert!(text(&o).contains("did not finish"), "{}", text(&o));
}

/// Risk: a retried date runs alone, so its keys are never checked against the dates its run
/// committed: a date that failed before the check (a conflict) retried with a key of another
/// date passed, the key counting on both, exit 0. A retry checks against the run's other dates.
#[test]
fn a_retried_date_is_checked_against_the_runs_other_dates() {
    let lake = Lake::new();
    let rows = random_orders(115, 3, 40);
    lake.write_hive(&rows, 1);
    let day3: Vec<Order> = rows.iter().filter(|r| r.date == d("2026-11-03")).cloned().collect();
    // The 3rd holds a key of the 1st, and a conflict: it fails before the check.
    let twice = order("ord-000-000001", 9, "2026-11-03", "USD", 100, "placed");
    let mut conflict = day3[0].clone();
    conflict.cents += 1;
    let bad: Vec<Order> = day3.iter().cloned().chain([twice.clone(), conflict]).collect();
    let object = lake.input().join("event_date=2026-11-03/part-00000.parquet");
    write_parquet(&object, &batch(&bad));
    let cfg = lake.config();
    let config = cfg.to_str().unwrap();
    let run = &["run", "--config", config, "--from", "2026-11-01", "--to", "2026-11-03", "--summary-json", "s.json"];
    let o = cli(run, lake.dir.path());
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    assert!(text(&o).contains("conflicting"), "{}", text(&o));
    let run_id = run_id_in(&lake.dir.path().join("s.json"));
    let committed = lake.snapshot();
    // The conflict fixed, the key of the 1st still there: the retry fails the 3rd, writing nothing.
    write_parquet(&object, &batch(&day3.iter().cloned().chain([twice]).collect::<Vec<_>>()));
    let retry = ["run", "--config", config, "--retry-failed", &run_id];
    let o = cli(&[&retry[..], &["--dry-run"]].concat(), lake.dir.path());
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(
        text(&o).contains("checked against (no key under two dates), not written: 2026-11-01, 2026-11-02"),
        "{}",
        text(&o)
    );
    let o = cli(&[&retry[..], &["--summary-json", "r.json"]].concat(), lake.dir.path());
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    assert!(text(&o).contains("ord-000-000001") && text(&o).contains("two dates"), "{}", text(&o));
    assert!(text(&o).contains("against the 2 other date(s)"), "{}", text(&o));
    assert_eq!(lake.snapshot(), committed, "nothing written");
    // The retry retried: checked against the first run's other dates still.
    let again = run_id_in(&lake.dir.path().join("r.json"));
    let o = cli(&["run", "--config", config, "--retry-failed", &again], lake.dir.path());
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    assert!(text(&o).contains("ord-000-000001") && text(&o).contains("two dates"), "{}", text(&o));
    assert_eq!(lake.snapshot(), committed, "nothing written");
    // The key under one date: the retry writes the 3rd alone.
    write_parquet(&object, &batch(&day3));
    let o = cli(&retry, lake.dir.path());
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let (out, lines) = (table_of(&o), dates_in(&o));
    assert_eq!(lines, ["2026-11-03"], "{out}");
}

/// A retried date found unchanged is computed all the same, to be checked against the run's
/// other dates: skipped, it was checked against none. And a date of the run whose input is gone
/// leaves the retried dates' keys unchecked: they fail, naming it.
#[test]
fn a_retried_date_is_checked_with_skip_unchanged_and_without_a_guards_input() {
    let lake = Lake::new();
    let rows = random_orders(116, 3, 40);
    lake.write_hive(&rows, 1);
    let cfg = lake.config();
    let config = cfg.to_str().unwrap();
    let run = &["run", "--config", config, "--from", "2026-11-01", "--to", "2026-11-03", "--summary-json", "s.json"];
    assert_eq!(cli(run, lake.dir.path()).status.code(), Some(0));
    let run_id = run_id_in(&lake.dir.path().join("s.json"));
    // The run's journal as one that failed the 3rd for a passing reason (a store error).
    let path = lake.state().join(format!("runs/{run_id}.json"));
    let mut journal: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    journal["partitions"][2]["action"] = "failed".into();
    journal["partitions"][2]["exit_code"] = 1.into();
    std::fs::write(&path, serde_json::to_vec(&journal).unwrap()).unwrap();
    // Meanwhile the 1st, run alone, took a key of the 3rd.
    let day3_key = rows.iter().find(|r| r.date == d("2026-11-03")).unwrap().order_id.clone();
    let day1: Vec<Order> = rows.iter().filter(|r| r.date == d("2026-11-01")).cloned().collect();
    let late = order(&day3_key, 99, "2026-11-01", "USD", 100, "placed");
    let object = lake.input().join("event_date=2026-11-01/part-00000.parquet");
    write_parquet(&object, &batch(&day1.iter().cloned().chain([late]).collect::<Vec<_>>()));
    let o = cli(&["run", "--config", config, "--date", "2026-11-01"], lake.dir.path());
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let committed = lake.snapshot();
    let retry = ["run", "--config", config, "--retry-failed", &run_id, "--skip-unchanged"];
    let o = cli(&retry, lake.dir.path());
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    assert!(text(&o).contains(&day3_key) && text(&o).contains("two dates"), "{}", text(&o));
    assert_eq!(lake.snapshot(), committed, "nothing written");
    // The key back under one date, the 2nd's input gone: its keys are unknown.
    write_parquet(&object, &batch(&day1));
    std::fs::remove_dir_all(lake.input().join("event_date=2026-11-02")).unwrap();
    let o = cli(&retry, lake.dir.path());
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("the keys of 2026-11-02") && text(&o).contains("no objects now"), "{}", text(&o));
    assert_eq!(lake.snapshot(), committed, "nothing written");
}

#[test]
fn four_shards_commit_every_partition_once() {
    let lake = Lake::new();
    let rows = random_orders(113, 12, 60);
    lake.write_hive(&rows, 1);
    let cfg = lake.config();
    let bin = env!("CARGO_BIN_EXE_lakeswap");
    let children: Vec<_> = (0..4)
        .map(|i| {
            std::process::Command::new(bin)
                .args(["run", "--config", cfg.to_str().unwrap(), "--from", "2026-11-01", "--to", "2026-11-12"])
                .args(["--shard", &format!("{i}/4"), "--wait"])
                .output_async()
        })
        .collect();
    let mut created = std::collections::BTreeMap::<String, usize>::new();
    for c in children {
        let o = c.wait_with_output().unwrap();
        assert_eq!(o.status.code(), Some(0), "{}", text(&o));
        let out = table_of(&o);
        assert_eq!(out.lines().filter(|l| l.starts_with("2026-")).count(), 3, "a quarter of 12 dates: {out}");
        for l in out.lines().filter(|l| l.starts_with("2026-") && l.contains(" created ")) {
            *created.entry(l[..10].to_string()).or_default() += 1;
        }
    }
    assert_eq!(created.len(), 12);
    assert!(created.values().all(|&n| n == 1), "{created:?}");
    for (date, want) in model(&rows) {
        assert_eq!(read_partition(&lake.partition_file(&date.to_string())), want);
    }
    let o = cli(
        &["run", "--config", cfg.to_str().unwrap(), "--from", "2026-11-01", "--to", "2026-11-12", "--shard", "4/4"],
        lake.dir.path(),
    );
    assert_eq!(o.status.code(), Some(2));
}

trait Spawn {
    fn output_async(&mut self) -> std::process::Child;
}
impl Spawn for std::process::Command {
    fn output_async(&mut self) -> std::process::Child {
        self.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped()).spawn().unwrap()
    }
}

#[test]
fn json_logs_for_collectors() {
    let lake = Lake::new();
    lake.write_hive(&random_orders(114, 1, 20), 1);
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_lakeswap"))
        .args(["run", "--config", lake.config().to_str().unwrap(), "--date", "2026-11-01", "--log-format", "json"])
        .env("LAKESWAP_LOG", "info")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0));
    let logs: Vec<serde_json::Value> =
        String::from_utf8_lossy(&o.stderr).lines().map(|l| serde_json::from_str(l).expect("a JSON log line")).collect();
    assert!(logs.iter().any(|l| l["fields"]["message"] == "planned"), "{logs:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn dates_from_timestamps_follow_the_time_zone_across_dst() {
    use arrow::array::{RecordBatch, StringArray, TimestampMicrosecondArray};
    use arrow::datatypes::{DataType, Field, Schema, TimeUnit};
    use std::sync::Arc;
    let lake = Lake::new();
    // Europe/Berlin moves to summer time at 2026-03-29 01:00 UTC.
    let stamps = [
        ("a", "2026-03-28T22:59:00Z"), // 23:59 CET on the 28th
        ("b", "2026-03-28T23:00:00Z"), // 00:00 CET on the 29th
        ("c", "2026-03-29T21:59:00Z"), // 23:59 CEST on the 29th
        ("d", "2026-03-29T22:00:00Z"), // 00:00 CEST on the 30th
    ];
    let us: Vec<i64> =
        stamps.iter().map(|(_, t)| chrono::DateTime::parse_from_rfc3339(t).unwrap().timestamp_micros()).collect();
    let schema = Arc::new(Schema::new(vec![
        Field::new("order_id", DataType::Utf8, true),
        Field::new("updated_at", DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())), true),
        Field::new("currency", DataType::Utf8, true),
    ]));
    let b = RecordBatch::try_new(
        schema,
        vec![
            Arc::new(StringArray::from(stamps.iter().map(|(k, _)| *k).collect::<Vec<_>>())),
            Arc::new(TimestampMicrosecondArray::from(us).with_timezone("UTC")),
            Arc::new(StringArray::from(vec!["EUR"; 4])),
        ],
    )
    .unwrap();
    write_parquet(&lake.input().join("events.parquet"), &b);
    let text = format!(
        "[job]\nname = \"tz\"\nkind = \"aggregate\"\ntimezone = \"Europe/Berlin\"\n[input]\nurl = \"{}\"\nformat = \"parquet\"\n\
         [identity]\nkey = [\"order_id\"]\nversion = \"updated_at\"\n[partition]\ncolumn = \"event_date\"\nfrom_timestamp = \"updated_at\"\n\
         [aggregate]\ngroup_by = [\"currency\"]\nmeasures = [{{ name = \"orders\", fn = \"count\" }}]\n[output]\nurl = \"{}\"\n",
        lake.input().display(),
        lake.output().display()
    );
    let cfg = lake.dir.path().join("tz.toml");
    std::fs::write(&cfg, text).unwrap();
    let s = run_range(&cfg, "2026-03-28", "2026-03-30").await;
    assert_eq!(s.exit_code, ExitCode::Ok, "{}", lakeswap::report::table(&s));
    let orders: Vec<u64> = s.partitions.iter().map(|p| p.counts.unwrap().input_rows).collect();
    assert_eq!(orders, [1, 2, 1], "28th: a; 29th: b, c; 30th: d");
    // Past the zone table's last daylight-saving change (2099): 2100-07-01 22:30 UTC is 00:30
    // of the 2nd in Berlin's summer time, but the table would give 23:30 of the 1st. Refused,
    // naming the row, rather than dated by a guess; Tokyo, which keeps one offset, is exact.
    let late = "2100-07-01T22:30:00Z";
    let us = vec![chrono::DateTime::parse_from_rfc3339(late).unwrap().timestamp_micros()];
    let one = |zone: &str| {
        let b = RecordBatch::try_from_iter([
            ("order_id", Arc::new(StringArray::from(vec!["e"])) as arrow::array::ArrayRef),
            ("updated_at", Arc::new(TimestampMicrosecondArray::from(us.clone()).with_timezone(zone))),
            ("currency", Arc::new(StringArray::from(vec!["EUR"]))),
        ])
        .unwrap();
        write_parquet(&lake.input().join("events.parquet"), &b);
    };
    one("UTC");
    let s = run_range(&cfg, "2100-07-02", "2100-07-02").await;
    assert_eq!(s.exit_code, ExitCode::DataContract, "{}", lakeswap::report::table(&s));
    let e = s.partitions[0].error.clone().unwrap();
    assert!(e.contains("2100-07-01T22:30:00Z") && e.contains("Europe/Berlin") && e.contains("row 0"), "{e}");
    // (In a table of its own: the Berlin table keeps how its rows are dated.)
    let tokyo = lake.dir.path().join("tokyo").display().to_string();
    let text = std::fs::read_to_string(&cfg).unwrap().replace("Europe/Berlin", "Asia/Tokyo");
    std::fs::write(&cfg, text.replace(&lake.output().display().to_string(), &tokyo)).unwrap();
    let s = run_range(&cfg, "2100-07-02", "2100-07-02").await;
    assert_eq!(s.exit_code, ExitCode::Ok, "{}", lakeswap::report::table(&s));
    // An input column named like the partition column beside `from_timestamp`: the query's
    // `event_date` would be that column, not the partition's date. Refused before anything runs.
    let b = RecordBatch::try_from_iter([
        ("order_id", Arc::new(StringArray::from(vec!["f"])) as arrow::array::ArrayRef),
        ("updated_at", Arc::new(TimestampMicrosecondArray::from(vec![0]).with_timezone("UTC"))),
        ("currency", Arc::new(StringArray::from(vec!["EUR"]))),
        ("event_date", Arc::new(arrow::array::Date32Array::from(vec![20_000]))),
    ])
    .unwrap();
    write_parquet(&lake.input().join("events.parquet"), &b);
    let opts = RunOptions { dates: Some(vec![d("1970-01-01")]), ..Default::default() };
    let e = run::run(&Job::load(&cfg).unwrap(), &opts).await.unwrap_err();
    assert_eq!(e.exit_code(), ExitCode::Usage, "{e}");
    assert!(e.to_string().contains("partition.column") && e.to_string().contains("of its own"), "{e}");
    // `today` and `yesterday` are taken in the job's zone too.
    let today = chrono::Utc::now().with_timezone(&chrono_tz::Pacific::Kiritimati).date_naive();
    assert_eq!(lakeswap::dates::resolve("today", chrono_tz::Pacific::Kiritimati).unwrap(), today);
}

#[test]
fn status_shows_committed_failed_and_missing_days() {
    let lake = Lake::new();
    let rows = random_orders(115, 3, 40);
    lake.write_hive(&rows, 1);
    let cfg = lake.config();
    let c = cfg.to_str().unwrap();
    cli(&["run", "--config", c, "--from", "2026-11-01", "--to", "2026-11-03"], lake.dir.path());
    // The 3rd goes bad in a second run; the 5th never had input.
    let mut bad: Vec<Order> = rows.iter().filter(|r| r.date == d("2026-11-03")).cloned().collect();
    let mut x = bad[0].clone();
    x.cents += 1;
    bad.push(x);
    write_parquet(&lake.input().join("event_date=2026-11-03/part-00000.parquet"), &batch(&bad));
    cli(&["run", "--config", c, "--from", "2026-11-03", "--to", "2026-11-03"], lake.dir.path());
    let o = cli(&["status", "--config", c, "--from", "2026-11-01", "--to", "2026-11-05"], lake.dir.path());
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let out = text(&o);
    assert!(out.contains("recent runs:") && out.matches("finished").count() == 2, "{out}");
    let line = |date: &str| out.lines().find(|l| l.trim_start().starts_with(date)).unwrap_or("").to_string();
    assert!(line("2026-11-01").contains("committed") && line("2026-11-01").contains("█"), "{out}");
    assert!(line("2026-11-03").contains("failed"), "{out}");
    assert!(out.contains("conflicting key"), "the failure is shown: {out}");
    assert!(out.contains("readers still see the file an earlier run committed"), "{out}");
    assert!(line("2026-11-05").contains("missing") && line("2026-11-05").contains("····"), "{out}");
    let o = cli(&["status", "--config", c, "--json"], lake.dir.path());
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let states: Vec<&str> = v["partitions"].as_array().unwrap().iter().map(|p| p["state"].as_str().unwrap()).collect();
    assert_eq!(states, ["committed", "committed", "failed"]);
    assert_eq!(v["runs"].as_array().unwrap().len(), 2);
    // What the file is comes first: another date's file, or one lakeswap did not write, in the
    // failed date's folder is shown as such, the last run's failure beside it.
    let kept = std::fs::read(lake.partition_file("2026-11-03")).unwrap();
    let third = |out: &str| out.lines().find(|l| l.trim_start().starts_with("2026-11-03")).unwrap_or("").to_string();
    std::fs::copy(lake.partition_file("2026-11-01"), lake.partition_file("2026-11-03")).unwrap();
    let out = text(&cli(&["status", "--config", c], lake.dir.path()));
    assert!(third(&out).contains("misplaced") && out.contains("lineage is 2026-11-01's"), "{out}");
    assert!(out.contains("the last run of this date failed: 1 conflicting key"), "{out}");
    write_parquet(&lake.partition_file("2026-11-03"), &batch(&rows[..1]));
    let out = text(&cli(&["status", "--config", c], lake.dir.path()));
    assert!(third(&out).contains("unknown") && out.contains("no lakeswap lineage"), "{out}");
    assert!(!out.contains("older schema") && out.contains("the last run of this date failed"), "{out}");
    std::fs::write(lake.partition_file("2026-11-03"), kept).unwrap();
    // The bad object taken back: a run finds the 3rd's file current, and its failure is over.
    lake.write_hive(&rows, 1);
    let o = cli(&["run", "--config", c, "--date", "2026-11-03"], lake.dir.path());
    assert!(text(&o).contains("unchanged"), "{}", text(&o));
    let o = cli(&["status", "--config", c, "--json"], lake.dir.path());
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let states: Vec<&str> = v["partitions"].as_array().unwrap().iter().map(|p| p["state"].as_str().unwrap()).collect();
    assert_eq!(states, ["committed", "committed", "committed"], "{v}");
    assert!(v["partitions"][0].get("config").is_none(), "{v}");
    // A run that started later and was refused the 1st's lease (exit 4), while the run holding
    // it committed the date: the date is the holder's, not failed (the refused run's journal
    // sorted last, its failure was shown as the date's, with the holder's lease message).
    let runs = lake.state().join("runs");
    let newest = std::fs::read_dir(&runs).unwrap().map(|e| e.unwrap().path()).max().unwrap();
    let mut refused: serde_json::Value = serde_json::from_slice(&std::fs::read(&newest).unwrap()).unwrap();
    refused["run_id"] = "29991231T000000.000Z-ffffff".into();
    refused["partitions"] = serde_json::json!([{
        "date": "2026-11-01", "action": "failed", "counts": null, "output_rows": 0, "seconds": 0.0,
        "error": "partition is leased by run 20261101T000000.000Z-aaaaaa", "exit_code": 4
    }]);
    let refused_path = runs.join("29991231T000000.000Z-ffffff.json");
    std::fs::write(&refused_path, serde_json::to_vec(&refused).unwrap()).unwrap();
    let o = cli(&["status", "--config", c, "--json"], lake.dir.path());
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["partitions"][0]["state"], "committed", "{v}");
    std::fs::remove_file(refused_path).unwrap();
    // Under a config that computes other numbers, the files are those of the config before:
    // said, until a run computes them again.
    let other = lake.dir.path().join("other.toml");
    std::fs::write(
        &other,
        std::fs::read_to_string(&cfg)
            .unwrap()
            .replace("fn = \"count\" }", "fn = \"count\", where = { status = [\"placed\"] } }"),
    )
    .unwrap();
    let o = &other.to_str().unwrap();
    let out = text(&cli(&["status", "--config", o], lake.dir.path()));
    assert_eq!(out.matches("[written under another config: the next run computes it again]").count(), 3, "{out}");
    let v: serde_json::Value =
        serde_json::from_slice(&cli(&["status", "--config", o, "--json"], lake.dir.path()).stdout).unwrap();
    assert_eq!(v["partitions"][0]["config"], "other", "{v}");
    cli(&["run", "--config", o, "--date", "2026-11-01"], lake.dir.path());
    let out = text(&cli(&["status", "--config", o], lake.dir.path()));
    assert_eq!(out.matches("[written under another config").count(), 2, "{out}");
}

/// Risk: a committed file changed after its commit kept its lineage in its footer: rewritten
/// with other numbers and the footer's metadata kept, or a byte flipped in its data, it was
/// skipped by every later `--skip-unchanged` run (exit 0), for good. A daily table's file is
/// sealed (a digest of all its bytes in its footer), and one changed is computed again.
#[test]
fn a_committed_file_changed_after_its_commit_is_computed_again_not_skipped() {
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
    let lake = Lake::new();
    lake.write_hive(&random_orders(131, 3, 40), 1);
    let cfg = lake.config();
    let c = cfg.to_str().unwrap();
    let run = || {
        cli(&["run", "--config", c, "--from", "2026-11-01", "--to", "2026-11-03", "--skip-unchanged"], lake.dir.path())
    };
    assert!(run().status.success());
    let right: Vec<Vec<u8>> = ["2026-11-01", "2026-11-02", "2026-11-03"]
        .iter()
        .map(|d| std::fs::read(lake.partition_file(d)).unwrap())
        .collect();
    assert!(table_of(&run()).contains("3 skipped"));
    // Other numbers, the footer's metadata (lineage and seal) kept.
    let file = lake.partition_file("2026-11-01");
    let reader = ParquetRecordBatchReaderBuilder::try_new(bytes::Bytes::from(right[0].clone())).unwrap();
    let kv = reader.metadata().file_metadata().key_value_metadata().cloned();
    let b: arrow::array::RecordBatch = reader.build().unwrap().next().unwrap().unwrap();
    let i = b.schema().index_of("orders").unwrap();
    let more = arrow::compute::kernels::numeric::add(b.column(i), &arrow::array::Int64Array::new_scalar(1000)).unwrap();
    let mut columns = b.columns().to_vec();
    columns[i] = more;
    let edited = arrow::array::RecordBatch::try_new(b.schema(), columns).unwrap();
    let props = parquet::file::properties::WriterProperties::builder().set_key_value_metadata(kv).build();
    let mut w =
        parquet::arrow::ArrowWriter::try_new(std::fs::File::create(&file).unwrap(), edited.schema(), Some(props))
            .unwrap();
    w.write(&edited).unwrap();
    w.close().unwrap();
    // A byte of the other's data flipped.
    let mut flipped = right[1].clone();
    flipped[8] ^= 0x55;
    std::fs::write(lake.partition_file("2026-11-02"), &flipped).unwrap();
    // A byte of the third's page indexes, just before its footer, where readers' statistics
    // are: a plain read still gives its rows.
    let mut flipped = right[2].clone();
    let n = flipped.len();
    let footer = u32::from_le_bytes(flipped[n - 8..n - 4].try_into().unwrap()) as usize;
    flipped[n - 8 - footer - 1] ^= 0x01;
    std::fs::write(lake.partition_file("2026-11-03"), &flipped).unwrap();
    let o = run();
    let t = table_of(&o);
    assert!(o.status.success(), "{}", text(&o));
    for date in ["2026-11-01", "2026-11-02", "2026-11-03"] {
        let l = t.lines().find(|l| l.starts_with(date)).unwrap_or_default();
        assert!(l.contains("replaced"), "{date} is computed again: {t}");
    }
    assert!(t.contains("0 skipped"), "{t}");
    for (i, date) in ["2026-11-01", "2026-11-02", "2026-11-03"].iter().enumerate() {
        assert_eq!(std::fs::read(lake.partition_file(date)).unwrap(), right[i], "{date}");
    }
    assert!(table_of(&run()).contains("3 skipped"));
}

/// Risks, where lineage said "unchanged" of what changed, or "wrong" of what is right:
/// - a flat input's dates share their input objects, so one date's file copied over another's
///   (a restore from the wrong backup) was skipped by `--skip-unchanged` and shown as committed;
/// - a file without lineage (copied in by hand) was shown as committed by the run that wrote
///   the file before it, and an object at the table's top level was not shown at all; a run
///   overwrote that file (lakeswap did not write it);
/// - a local input rewritten in place at its size with its modification time put back
///   (`cp -p`, `rsync -t --inplace`) kept its e-tag (inode, time, size): skipped, stale;
/// - an input only touched made `verify` call right rows "differs" (exit 1).
#[test]
fn lineage_tells_a_copied_partition_a_foreign_file_and_a_rewritten_input() {
    let lake = Lake::new();
    let rows = random_orders(121, 3, 40);
    write_parquet(&lake.input().join("all.parquet"), &batch(&rows));
    let cfg = lake.config();
    let c = cfg.to_str().unwrap();
    let run = |extra: &[&str]| {
        let mut args = vec!["run", "--config", c, "--from", "2026-11-01", "--to", "2026-11-03"];
        args.extend_from_slice(extra);
        cli(&args, lake.dir.path())
    };
    let status = || text(&cli(&["status", "--config", c], lake.dir.path()));
    let line = |out: &str, date: &str| out.lines().find(|l| l.trim_start().starts_with(date)).unwrap_or("").to_string();
    assert!(run(&[]).status.success());
    let right = std::fs::read(lake.partition_file("2026-11-01")).unwrap();

    std::fs::copy(lake.partition_file("2026-11-02"), lake.partition_file("2026-11-01")).unwrap();
    let o = cli(&["verify", "--config", c, "--date", "2026-11-01"], lake.dir.path());
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("its lineage is 2026-11-02's"), "{}", text(&o));
    let out = status();
    assert!(line(&out, "2026-11-01").contains("misplaced") && out.contains("lineage is 2026-11-02's"), "{out}");
    let o = run(&["--skip-unchanged"]);
    assert!(line(&table_of(&o), "2026-11-01").contains("replaced"), "{}", text(&o));
    assert_eq!(std::fs::read(lake.partition_file("2026-11-01")).unwrap(), right);

    write_parquet(&lake.partition_file("2026-11-03"), &batch(&rows[..1]));
    write_parquet(&lake.output().join("stray.parquet"), &batch(&rows[..1]));
    let out = status();
    assert!(line(&out, "2026-11-03").contains("unknown") && out.contains("no lakeswap lineage"), "{out}");
    assert!(out.contains("a run fails this date rather than overwrite it") && !out.contains("older schema"), "{out}");
    assert!(out.contains("in no partition") && out.contains("stray.parquet"), "{out}");
    let v: serde_json::Value =
        serde_json::from_slice(&cli(&["status", "--config", c, "--json"], lake.dir.path()).stdout).unwrap();
    assert_eq!(v["strays"], serde_json::json!(["stray.parquet"]), "{v}");
    // Not lakeswap's file: a run does not overwrite it (G9), only with `foreign_files = "remove"`.
    let foreign = std::fs::read(lake.partition_file("2026-11-03")).unwrap();
    let o = run(&["--skip-unchanged"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(line(&table_of(&o), "2026-11-03").contains("failed"), "{}", text(&o));
    assert!(text(&o).contains("has no lakeswap lineage") && text(&o).contains("foreign_files"), "{}", text(&o));
    assert_eq!(std::fs::read(lake.partition_file("2026-11-03")).unwrap(), foreign);
    let o = cli(&["verify", "--config", c, "--date", "2026-11-03"], lake.dir.path());
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("A run does not overwrite it"), "{}", text(&o));
    let toml = std::fs::read_to_string(&cfg).unwrap();
    std::fs::write(&cfg, format!("{toml}foreign_files = \"remove\"\n")).unwrap();
    assert!(line(&table_of(&run(&["--skip-unchanged"])), "2026-11-03").contains("replaced"));
    std::fs::write(&cfg, toml).unwrap();
    std::fs::remove_file(lake.output().join("stray.parquet")).unwrap();
    assert!(!status().contains("in no partition"));

    // The same rows written again, at the same size, the modification time put back.
    let input = lake.input().join("all.parquet");
    let (before, mtime) = (std::fs::read(&input).unwrap(), std::fs::metadata(&input).unwrap().modified().unwrap());
    let mut changed = rows.clone();
    let i = changed.iter().position(|r| r.date == d("2026-11-02")).unwrap();
    changed[i].status = if changed[i].status == "placed" { "shipped".into() } else { "placed".into() };
    let mut b = Vec::new();
    for attempt in 0..changed.len() {
        // Another row's status where the first change changed the size (compression).
        b = parquet_bytes(&batch(&changed));
        if b.len() == before.len() {
            break;
        }
        changed = rows.clone();
        let j = (i + attempt + 1) % changed.len();
        changed[j].status = if changed[j].status == "placed" { "shipped".into() } else { "placed".into() };
    }
    assert_eq!(b.len(), before.len(), "a same-size change");
    assert_ne!(b, before);
    std::fs::write(&input, &b).unwrap();
    std::fs::File::options().write(true).open(&input).unwrap().set_modified(mtime).unwrap();
    let o = run(&["--skip-unchanged"]);
    assert!(table_of(&o).contains(", 0 skipped"), "a rewritten input is read again: {}", text(&o));
    let o = cli(&["verify", "--config", c, "--from", "2026-11-01", "--to", "2026-11-03"], lake.dir.path());
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));

    // Touched only: the rows are right, the lineage out of date; exit 0, said.
    std::fs::File::options().write(true).open(&input).unwrap().set_modified(std::time::SystemTime::now()).unwrap();
    let o = cli(&["verify", "--config", c, "--from", "2026-11-01", "--to", "2026-11-03"], lake.dir.path());
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(text(&o).contains("3 verified") && text(&o).contains("lineage is out of date"), "{}", text(&o));
    // The right rows in a file written by hand: no lakeswap file, which a run would not
    // replace (it fails the date), so it differs, said why.
    let committed = read_batch(&lake.partition_file("2026-11-02"));
    write_parquet(&lake.partition_file("2026-11-02"), &committed);
    let o = cli(&["verify", "--config", c, "--date", "2026-11-02"], lake.dir.path());
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("no lakeswap lineage"), "{}", text(&o));
    // A wrong row is still found.
    write_parquet(&lake.partition_file("2026-11-02"), &batch(&rows[..1]));
    let o = cli(&["verify", "--config", c, "--from", "2026-11-01", "--to", "2026-11-03"], lake.dir.path());
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
}

/// Risk: `--dry-run` said "would replace" of dates the run fails (a foreign object in the
/// folder, a file lakeswap did not write) and "would fail" of a date `--allow-empty` writes.
#[test]
fn a_dry_run_says_what_the_run_does_with_each_date() {
    let lake = Lake::new();
    lake.write_hive(&random_orders(117, 3, 40), 1);
    let cfg = lake.config();
    let c = cfg.to_str().unwrap();
    let run = |extra: &[&str]| {
        let mut args = vec!["run", "--config", c, "--from", "2026-11-01", "--to", "2026-11-04"];
        args.extend_from_slice(extra);
        cli(&args, lake.dir.path())
    };
    let o = run(&["--allow-empty"]);
    assert!(o.status.success(), "{}", text(&o));
    std::fs::write(lake.output().join("event_date=2026-11-01/extra.parquet"), b"x").unwrap();
    std::fs::write(lake.partition_file("2026-11-02"), b"not lakeswap's").unwrap();
    let plan = String::from_utf8(run(&["--dry-run", "--allow-empty"]).stdout).unwrap();
    let says = |date: &str| plan.lines().find(|l| l.contains(&format!("event_date={date} "))).unwrap_or("").to_string();
    assert!(
        says("2026-11-01").contains("would fail: objects lakeswap did not write")
            && says("2026-11-01").contains("extra.parquet"),
        "{plan}"
    );
    assert!(says("2026-11-02").contains("would fail: its file has no lakeswap lineage"), "{plan}");
    assert!(says("2026-11-03").contains("would replace"), "{plan}");
    assert!(says("2026-11-04").contains("zero-row file (--allow-empty)"), "{plan}");
    // The run does as the plan said.
    let o = run(&["--allow-empty"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let table = table_of(&o);
    let action = |date: &str| table.lines().find(|l| l.starts_with(date)).unwrap_or("").to_string();
    assert!(action("2026-11-01").contains("failed") && action("2026-11-02").contains("failed"), "{table}");
    assert!(action("2026-11-03").contains("unchanged") && action("2026-11-04").contains("unchanged"), "{table}");
    // With `foreign_files = "remove"`, the plan names what the run would delete or overwrite.
    let toml = std::fs::read_to_string(&cfg).unwrap();
    std::fs::write(&cfg, format!("{toml}foreign_files = \"remove\"\n")).unwrap();
    let plan = String::from_utf8(run(&["--dry-run"]).stdout).unwrap();
    let says = |date: &str| plan.lines().find(|l| l.contains(&format!("event_date={date} "))).unwrap_or("").to_string();
    assert!(says("2026-11-01").contains("would replace its file (or keep it, when unchanged), and remove objects lakeswap did not write: event_date=2026-11-01/extra.parquet (foreign_files = \"remove\")"), "{plan}");
    assert!(says("2026-11-02").contains("and overwrite its file, which lakeswap did not write"), "{plan}");
    assert!(says("2026-11-03").contains("would replace (or keep, when unchanged)"), "{plan}");
    let o = run(&["--allow-empty"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(!lake.output().join("event_date=2026-11-01/extra.parquet").exists());
}

#[test]
fn verify_finds_a_file_that_does_not_match_its_input() {
    let lake = Lake::new();
    lake.write_hive(&random_orders(116, 2, 40), 1);
    let c = lake.config();
    let c = c.to_str().unwrap();
    cli(&["run", "--config", c, "--from", "2026-11-01", "--to", "2026-11-02"], lake.dir.path());
    let o = cli(&["verify", "--config", c, "--from", "2026-11-01", "--to", "2026-11-02"], lake.dir.path());
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(text(&o).matches(" verified ").count(), 2, "{}", text(&o));
    // A hand-edited partition: another day's (valid) file copied over it.
    std::fs::copy(lake.partition_file("2026-11-01"), lake.partition_file("2026-11-02")).unwrap();
    let before = lake.snapshot();
    let o = cli(&["verify", "--config", c, "--from", "2026-11-01", "--to", "2026-11-02"], lake.dir.path());
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("event_date=2026-11-02/part-00000.parquet differs from a recomputation"), "{}", text(&o));
    assert_eq!(lake.snapshot(), before, "verify writes nothing");
    assert!(!lake.state().join("leases").exists() || lake.state().join("leases").read_dir().unwrap().next().is_none());
    // A day without input, written with --allow-empty, verifies as the zero-row file it is.
    let o = cli(&["run", "--config", c, "--date", "2026-11-04", "--allow-empty"], lake.dir.path());
    assert!(o.status.success(), "{}", text(&o));
    let o = cli(&["verify", "--config", c, "--date", "2026-11-04"], lake.dir.path());
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(text(&o).contains(" verified "), "{}", text(&o));
    // Its totals are verify's: it ran nothing, created nothing.
    assert!(text(&o).contains("verify: 1 verified, 0 differ, 0 failed in"), "{}", text(&o));
    assert!(!text(&o).contains("created"), "{}", text(&o));
    // A day without input and without a file is what `run` leaves: nothing to rewrite.
    let o = cli(&["verify", "--config", c, "--date", "2026-11-05"], lake.dir.path());
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(text(&o).contains(" untouched ") && !text(&o).contains("Run the date again"), "{}", text(&o));
    // Committed, and its input gone since: that file differs.
    let day5 = lake.partition_file("2026-11-05");
    std::fs::create_dir_all(day5.parent().unwrap()).unwrap();
    std::fs::copy(lake.partition_file("2026-11-01"), &day5).unwrap();
    let o = cli(&["verify", "--config", c, "--date", "2026-11-05"], lake.dir.path());
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains(" differs "), "{}", text(&o));
    assert!(text(&o).contains("verify: 0 verified, 1 differ, 0 failed in"), "{}", text(&o));
    // What a run would do with it is said (it fails the date and keeps the file).
    assert!(text(&o).contains("no input object holds this date now") && !text(&o).contains("Run the date again"));
    // … unless the file is not lakeswap's: a run would not touch it, --allow-empty neither.
    std::fs::write(&day5, b"not lakeswap's").unwrap();
    let o = cli(&["verify", "--config", c, "--date", "2026-11-05"], lake.dir.path());
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("A run does not overwrite it") && !text(&o).contains("--allow-empty"), "{}", text(&o));
    // Written under another config (a measure changed since): said so, not taken for a change
    // of its input.
    let cfg = std::fs::read_to_string(c).unwrap();
    std::fs::write(c, cfg.replace("\"cancelled\"]", "\"cancelled\", \"refunded\"]")).unwrap();
    let o = cli(&["verify", "--config", c, "--date", "2026-11-01"], lake.dir.path());
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("it was written under another config"), "{}", text(&o));
    assert!(!text(&o).contains("input objects changed"), "{}", text(&o));
}

/// Risk: a committed file changed where its rows still read alike — a footer statistic
/// edited (DuckDB then skipped the row group its filter needed), a bit flipped in a page that
/// another reader fails on — was `verified` (exit 0) as "lineage out of date". Its seal tells.
#[test]
fn verify_finds_a_file_changed_since_it_was_written_though_its_rows_read_alike() {
    let lake = Lake::new();
    lake.write_hive(&random_orders(117, 1, 40), 1);
    let c = lake.config();
    let c = c.to_str().unwrap();
    let o = cli(&["run", "--config", c, "--date", "2026-11-01"], lake.dir.path());
    assert!(o.status.success(), "{}", text(&o));
    let file = lake.partition_file("2026-11-01");
    let original = std::fs::read(&file).unwrap();
    let mut bytes = original.clone();
    // The `orders` column's maximum in the footer's statistics, made smaller.
    let md = parquet::file::reader::SerializedFileReader::new(bytes::Bytes::from(bytes.clone())).unwrap();
    use parquet::file::reader::FileReader;
    let md = md.metadata();
    let at = md.file_metadata().schema_descr().columns().iter().position(|c| c.name() == "orders").unwrap();
    let max = match md.row_group(0).column(at).statistics().unwrap() {
        parquet::file::statistics::Statistics::Int64(s) => *s.max_opt().unwrap(),
        other => panic!("{other:?}"),
    };
    let footer =
        bytes.len() - 8 - u32::from_le_bytes(bytes[bytes.len() - 8..bytes.len() - 4].try_into().unwrap()) as usize;
    let needle = max.to_le_bytes();
    let i = footer + bytes[footer..].windows(8).position(|w| w == needle).unwrap();
    bytes[i..i + 8].copy_from_slice(&(max - 1).to_le_bytes());
    std::fs::write(&file, &bytes).unwrap();
    assert!(lakeswap::commit::same_rows(&std::fs::read(&file).unwrap().into(), &original.into()));
    let o = cli(&["verify", "--config", c, "--date", "2026-11-01"], lake.dir.path());
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("its seal no longer matches"), "{}", text(&o));
    // A run rewrites it as written.
    let o = cli(&["run", "--config", c, "--date", "2026-11-01"], lake.dir.path());
    assert!(o.status.success() && text(&o).contains("replaced"), "{}", text(&o));
    let o = cli(&["verify", "--config", c, "--date", "2026-11-01"], lake.dir.path());
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    // Rewritten by another writer with the same rows and no lineage (no seal): a run would not
    // replace it (not lakeswap's), so it is no `verified` partition either.
    let b = read_batch(&file);
    let mut w = parquet::arrow::ArrowWriter::try_new(std::fs::File::create(&file).unwrap(), b.schema(), None).unwrap();
    w.write(&b).unwrap();
    w.close().unwrap();
    let o = cli(&["verify", "--config", c, "--date", "2026-11-01"], lake.dir.path());
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("no lakeswap lineage"), "{}", text(&o));
    // Rewritten by a writer that kept the footer's lineage and dropped its seal: the rows read
    // alike, and the lineage says lakeswap sealed the file (it was `verified`, exit 0).
    std::fs::remove_file(&file).unwrap();
    let o = cli(&["run", "--config", c, "--date", "2026-11-01"], lake.dir.path());
    assert!(o.status.success(), "{}", text(&o));
    let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(bytes::Bytes::from(
        std::fs::read(&file).unwrap(),
    ))
    .unwrap();
    let kv: Vec<_> = reader.metadata().file_metadata().key_value_metadata().unwrap().clone();
    assert!(kv.iter().any(|k| k.key == "lakeswap.seal"));
    let kv = kv.into_iter().filter(|k| k.key != "lakeswap.seal").collect();
    let b = reader.build().unwrap().next().unwrap().unwrap();
    let props = parquet::file::properties::WriterProperties::builder().set_key_value_metadata(Some(kv)).build();
    let mut w =
        parquet::arrow::ArrowWriter::try_new(std::fs::File::create(&file).unwrap(), b.schema(), Some(props)).unwrap();
    w.write(&b).unwrap();
    w.close().unwrap();
    let o = cli(&["verify", "--config", c, "--date", "2026-11-01"], lake.dir.path());
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("or is gone from a file lakeswap sealed"), "{}", text(&o));
}

/// A table inside another on an object store whose folder name the store's paths encode
/// (`p~q`): the outer table's state was looked for under `p%7Eq`, not found, and the inner
/// table made inside it (exit 0).
#[tokio::test(flavor = "multi_thread")]
async fn a_table_inside_another_named_with_a_tilde_is_refused_on_an_object_store() {
    let lake = Lake::new();
    lake.write_hive(&random_orders(119, 1, 40), 1);
    let out = lake.output().display().to_string();
    let text = std::fs::read_to_string(lake.config()).unwrap();
    let cfg = |url: &str, name: &str| {
        let p = lake.dir.path().join(name);
        std::fs::write(&p, text.replace(&format!("url = \"{out}\""), &format!("url = \"{url}\""))).unwrap();
        p
    };
    let outer = cfg("memory://encoded/p~q", "outer.toml");
    let s = run_range(&outer, "2026-11-01", "2026-11-01").await;
    assert_eq!(s.exit_code, lakeswap::ExitCode::Ok, "{}", lakeswap::report::table(&s));
    let inner = Job::load(&cfg("memory://encoded/p~q/inner", "inner.toml")).unwrap();
    let opts = RunOptions { dates: Some(vec![d("2026-11-01")]), ..Default::default() };
    let e = run::run(&inner, &opts).await.map(|_| ()).unwrap_err();
    assert_eq!(e.exit_code(), lakeswap::ExitCode::Usage, "{e}");
    assert!(e.to_string().contains("lies inside the lakeswap table memory://encoded/p~q"), "{e}");
}

/// Risks: a table made inside another table's folder (`lake/revenue/inner`) was accepted: its
/// files were read as the outer table's rows by readers of it, and the outer table's runs
/// were refused from then on (exit 2, never retried). A store endpoint that is not a web
/// address made the store's client panic (exit 101, the summary left "running").
#[test]
fn a_table_inside_another_and_an_endpoint_that_is_no_address_are_refused() {
    let lake = Lake::new();
    lake.write_hive(&random_orders(118, 1, 40), 1);
    let c = lake.config();
    let o = cli(&["run", "--config", c.to_str().unwrap(), "--date", "2026-11-01"], lake.dir.path());
    assert!(o.status.success(), "{}", text(&o));
    let inner = lake.dir.path().join("inner.toml");
    let out = lake.output().display().to_string();
    let t =
        std::fs::read_to_string(&c).unwrap().replace(&format!("url = \"{out}\""), &format!("url = \"{out}/inner\""));
    std::fs::write(&inner, t).unwrap();
    let before = lake.snapshot();
    let o = cli(&["run", "--config", inner.to_str().unwrap(), "--date", "2026-11-01"], lake.dir.path());
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("lies inside the lakeswap table"), "{}", text(&o));
    assert_eq!(lake.snapshot(), before);
    let o = cli(&["run", "--config", c.to_str().unwrap(), "--date", "2026-11-01"], lake.dir.path());
    assert!(o.status.success(), "{}", text(&o));
    // An endpoint in the options, and in the environment.
    let s3 = lake.dir.path().join("s3.toml");
    let t = std::fs::read_to_string(&c).unwrap().replace(
        &format!("url = \"{out}\""),
        "url = \"s3://b/t\"\noptions = { endpoint = \"not a url\", region = \"x\" }",
    );
    std::fs::write(&s3, t).unwrap();
    let o = cli(&["run", "--config", s3.to_str().unwrap(), "--date", "2026-11-01"], lake.dir.path());
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("`not a url`, from the option `endpoint`, is not a web address"), "{}", text(&o));
    let t = std::fs::read_to_string(&c).unwrap().replace(&format!("url = \"{out}\""), "url = \"s3://b/t\"");
    std::fs::write(&s3, t).unwrap();
    // An address without its scheme, and one with spaces around it (the store's client
    // panicked on both).
    for (endpoint, says) in
        [("127.0.0.1:9000", "from the environment (AWS_ENDPOINT_URL"), (" http://127.0.0.1:9000", "without spaces")]
    {
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_lakeswap"))
            .args(["status", "--config", s3.to_str().unwrap()])
            .env("AWS_ENDPOINT_URL", endpoint)
            .env("AWS_REGION", "x")
            .current_dir(lake.dir.path())
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2), "{endpoint}: {}", text(&o));
        assert!(text(&o).contains(says), "{endpoint}: {}", text(&o));
    }
}

/// Risk: a store that fails while the run's plan reads a Parquet footer (a timeout, an EIO)
/// was taken for a file that is not Parquet: exit 3, which schedulers do not retry. Whichever
/// call fails, the run exits 1 (worth a retry), never 3.
#[tokio::test(flavor = "multi_thread")]
async fn a_store_failing_while_the_plan_reads_footers_is_worth_a_retry() {
    let lake = Lake::new();
    lake.write_hive(&random_orders(116, 1, 40), 2);
    let opts = RunOptions { dates: Some(vec![d("2026-11-01")]), ..Default::default() };
    let mut failed = 0;
    for i in 0..8 {
        let mut job = Job::load(&lake.config()).unwrap();
        job.input.store = FaultStore::new(job.input.store.clone(), Mode::FailAt(i));
        let code = match run::run(&job, &opts).await {
            Ok(s) => s.exit_code,
            Err(e) => e.exit_code(),
        };
        assert!(matches!(code, ExitCode::Ok | ExitCode::PartialFailure), "call {i}: {code:?}");
        failed += usize::from(code == ExitCode::PartialFailure);
    }
    assert!(failed > 0, "no call failed the run");
}

/// Risks: a partition folder that is a symbolic link to another table's (or another date's)
/// partition was written through — a run of this table replaced the other table's committed
/// file, exit 0; a store that failed while the table's files were read for a plan or a status
/// was called a usage error (exit 2, which schedulers do not retry); a `--summary-json` naming
/// a folder was found only after every partition had committed; a date that failed reported
/// the rows it would have written.
#[test]
fn links_store_failures_and_summaries_are_told_apart_and_nothing_is_written_through_a_link() {
    let lake = Lake::new();
    lake.write_hive(&random_orders(91, 2, 40), 1);
    let cfg = lake.config();
    let c = cfg.to_str().unwrap();
    let o = cli(&["run", "--config", c, "--from", "2026-11-01", "--to", "2026-11-02"], lake.dir.path());
    assert!(o.status.success(), "{}", text(&o));
    // Table B (another query) with its 2026-11-01 folder linked to table A's.
    let b_out = lake.dir.path().join("b");
    std::fs::create_dir_all(&b_out).unwrap();
    std::os::unix::fs::symlink(lake.output().join("event_date=2026-11-01"), b_out.join("event_date=2026-11-01"))
        .unwrap();
    let b_cfg = lake.dir.path().join("b.toml");
    let text_b = std::fs::read_to_string(&cfg)
        .unwrap()
        .replace(&format!("url = \"{}\"", lake.output().display()), &format!("url = \"{}\"", b_out.display()))
        .replace(
            "{ name = \"orders\",           fn = \"count\" }",
            "{ name = \"orders\", fn = \"count\", where = \"amount > 100\" }",
        );
    assert_ne!(text_b, std::fs::read_to_string(&cfg).unwrap());
    std::fs::write(&b_cfg, text_b).unwrap();
    let before = lake.snapshot();
    let b = b_cfg.to_str().unwrap();
    let o = cli(
        &["run", "--config", b, "--from", "2026-11-01", "--to", "2026-11-02", "--summary-json", "s.json"],
        lake.dir.path(),
    );
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("reached through a symbolic link"), "{}", text(&o));
    assert_eq!(lake.snapshot(), before, "table A is as it was");
    assert!(b_out.join("event_date=2026-11-02/part-00000.parquet").exists(), "B's other date commits");
    // The failed date reports no rows written.
    let s: serde_json::Value = serde_json::from_slice(&std::fs::read(lake.dir.path().join("s.json")).unwrap()).unwrap();
    let failed = s["partitions"].as_array().unwrap().iter().find(|p| p["action"] == "failed").unwrap().clone();
    assert_eq!((failed["date"].as_str(), failed["output_rows"].as_u64()), (Some("2026-11-01"), Some(0)), "{s}");

    // A summary path that is a folder: refused before anything runs.
    std::fs::create_dir_all(lake.dir.path().join("sums")).unwrap();
    let o = cli(&["run", "--config", c, "--date", "2026-11-02", "--summary-json", "sums"], lake.dir.path());
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("it is a folder"), "{}", text(&o));

    // A partition folder that cannot be read (a file where the folder was): a store error for
    // `status`, `verify` and `run` alike (exit 1), not a usage error.
    let dir = lake.output().join("event_date=2026-11-02");
    std::fs::remove_dir_all(&dir).unwrap();
    std::fs::write(&dir, b"not a folder").unwrap();
    for args in [
        vec!["status", "--config", c],
        vec!["verify", "--config", c, "--date", "2026-11-02"],
        vec!["run", "--config", c, "--date", "2026-11-02"],
    ] {
        let o = cli(&args, lake.dir.path());
        assert_eq!(o.status.code(), Some(1), "{args:?}: {}", text(&o));
    }
}
