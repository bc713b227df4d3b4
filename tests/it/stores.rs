//! Risk: the job behaves differently on a real object store. One conformance suite, written
//! once, run on every backend: in-memory, local folder, a real S3-compatible server
//! (SeaweedFS) and Azurite. The server suites are `#[ignore]`d in a plain `cargo test` (shown
//! as ignored: not requested); `scripts/test` starts the servers and runs them, and there a
//! missing server is a failure.

use crate::common::backends::{Backend, Kind, STATE};
use crate::common::faults::{FaultStore, Mode};
use crate::common::*;
use lakeswap::commit::Action;
use lakeswap::{dates, run, ExitCode, RunOptions};
use std::sync::Arc;
use std::time::Duration;

fn opts(from: &str, to: &str) -> RunOptions {
    RunOptions { dates: Some(dates::range(d(from), d(to)).unwrap()), ..Default::default() }
}

fn actions(s: &lakeswap::RunSummary) -> Vec<Action> {
    s.partitions.iter().map(|p| p.action).collect()
}

async fn run_is_correct_and_rerun_byte_identical(kind: Kind) {
    let b = Backend::new(kind);
    let rows = random_orders(61, 3, 200);
    b.write_input(&rows, 2).await;
    let job = b.job();
    let s = run::run(&job, &opts("2026-11-01", "2026-11-03")).await.unwrap();
    assert_eq!(actions(&s), [Action::Created; 3], "{}", lakeswap::report::table(&s));
    let first = b.partitions().await;
    assert_eq!(first.len(), 3, "{:?}", first.keys());
    for (date, want) in model(&rows) {
        assert_eq!(partition_rows(&first[&format!("event_date={date}/part-00000.parquet")]), want, "{date}");
    }
    let s = run::run(&job, &opts("2026-11-01", "2026-11-03")).await.unwrap();
    assert_eq!(actions(&s), [Action::Unchanged; 3]);
    assert_eq!(b.partitions().await, first);
    let leftovers: Vec<String> =
        b.objects(STATE).await.into_keys().filter(|k| k.starts_with("staging") || k.starts_with("leases")).collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    assert_eq!(b.objects(STATE).await.keys().filter(|k| k.starts_with("runs/")).count(), 2);
    // The table holds its partitions and nothing else: readers read the table only.
    assert_eq!(b.objects("out").await.into_keys().collect::<Vec<_>>(), first.into_keys().collect::<Vec<_>>());
}

async fn conflict_fails_only_its_partition(kind: Kind) {
    let b = Backend::new(kind);
    let mut rows = random_orders(62, 2, 100);
    let mut c = rows.iter().find(|r| r.date == d("2026-11-02")).unwrap().clone();
    c.cents += 7;
    rows.push(c);
    b.write_input(&rows, 1).await;
    let s = run::run(&b.job(), &opts("2026-11-01", "2026-11-02")).await.unwrap();
    assert_eq!(s.exit_code, ExitCode::DataContract);
    assert_eq!(actions(&s), [Action::Created, Action::Failed]);
    assert!(s.partitions[1].error.as_ref().unwrap().contains("1 conflicting key(s)"));
    assert_eq!(b.partitions().await.len(), 1);
}

async fn crashed_leftovers_are_cleaned(kind: Kind) {
    let b = Backend::new(kind);
    b.write_input(&random_orders(63, 1, 100), 1).await;
    // A crashed run left a staged file and an expired lease.
    b.put(STATE, "staging/20260101T000000.000Z-dead00/event_date=2026-11-01/part-00000.parquet", b"junk".to_vec())
        .await;
    let expired = serde_json::json!({"run_id": "20260101T000000.000Z-dead00", "host": "gone", "pid": 1,
        "since": "2026-01-01T00:00:00Z", "expires": "2026-01-01T00:01:00Z"});
    b.put(STATE, "leases/event_date=2026-11-01.json", serde_json::to_vec(&expired).unwrap()).await;
    let s = run::run(&b.job(), &opts("2026-11-01", "2026-11-01")).await.unwrap();
    assert_eq!(actions(&s), [Action::Created], "{}", lakeswap::report::table(&s));
    let left: Vec<String> = b.objects(STATE).await.into_keys().filter(|k| !k.starts_with("runs/")).collect();
    assert_eq!(left, ["table-schema", "table.json"]);
    assert_eq!(b.objects("out").await.into_keys().collect::<Vec<_>>(), ["event_date=2026-11-01/part-00000.parquet"]);
}

async fn racing_runs_never_interleave(kind: Kind) {
    let b = Backend::new(kind);
    let rows = random_orders(64, 2, 150);
    b.write_input(&rows, 1).await;
    let job = Arc::new(b.job());
    // Without --wait: each partition is created by exactly one run; the others are refused
    // (leased, exit 4) or find it unchanged.
    let tasks: Vec<_> = (0..4)
        .map(|_| {
            let job = job.clone();
            tokio::spawn(async move { run::run(&job, &opts("2026-11-01", "2026-11-02")).await.unwrap() })
        })
        .collect();
    let mut created = [0; 2];
    for t in tasks {
        let s = t.await.unwrap();
        for (i, p) in s.partitions.iter().enumerate() {
            match p.action {
                Action::Created => created[i] += 1,
                Action::Unchanged => {}
                Action::Failed => {
                    assert_eq!(p.exit_code, 4, "{:?}", p.error);
                    let e = p.error.as_deref().unwrap();
                    assert!(e.contains("leased by run") && e.contains("expires at"), "{e}");
                }
                other => panic!("{other:?}"),
            }
        }
    }
    assert_eq!(created, [1, 1]);
    let expected = model(&rows);
    for (k, v) in b.partitions().await {
        let date = d(k.trim_start_matches("event_date=").trim_end_matches("/part-00000.parquet"));
        assert_eq!(partition_rows(&v), expected[&date]);
    }
    // With --wait every run succeeds, one after the other.
    let tasks: Vec<_> = (0..3)
        .map(|_| {
            let job = job.clone();
            tokio::spawn(async move {
                let mut o = opts("2026-11-01", "2026-11-02");
                o.wait = true;
                run::run(&job, &o).await.unwrap()
            })
        })
        .collect();
    for t in tasks {
        assert_eq!(t.await.unwrap().exit_code, ExitCode::Ok);
    }
}

async fn stale_run_is_fenced_off(kind: Kind) {
    let b = Backend::new(kind);
    b.write_input(&random_orders(65, 1, 100), 1).await;
    let mut job = b.job();
    run::run(&job, &opts("2026-11-01", "2026-11-01")).await.unwrap();
    // New input, so the next run has something to write.
    b.write_input(&random_orders(66, 1, 100), 1).await;
    let faulty = FaultStore::wrap_output(&mut job, Mode::None);
    let (gate, arrived) = faulty.gate("staging/");
    let job = Arc::new(job);
    let j = job.clone();
    let stale = tokio::spawn(async move { run::run(&j, &opts("2026-11-01", "2026-11-01")).await.unwrap() });
    arrived.notified().await;
    // Meanwhile another writer commits the partition (as a run whose lease had expired would).
    b.put("out", "event_date=2026-11-01/part-00000.parquet", b"committed by another writer".to_vec()).await;
    gate.add_permits(1000);
    let s = stale.await.unwrap();
    assert_eq!(actions(&s), [Action::Failed]);
    let e = s.partitions[0].error.as_deref().unwrap();
    assert!(e.contains("changed since this run planned it"), "{e}");
    assert_eq!(b.get("out", "event_date=2026-11-01/part-00000.parquet").await.unwrap(), b"committed by another writer");
    assert!(b.objects(STATE).await.keys().all(|k| !k.starts_with("staging")));
}

async fn transient_faults_fail_the_partition_and_a_rerun_converges(kind: Kind) {
    let b = Backend::new(kind);
    b.write_input(&random_orders(67, 2, 100), 1).await;
    let mut counted = b.job();
    let reference = FaultStore::wrap_output(&mut counted, Mode::None);
    run::run(&counted, &opts("2026-11-01", "2026-11-02")).await.unwrap();
    let want = b.partitions().await;
    let calls = reference.calls();
    for i in (0..calls).step_by(3) {
        let b2 = Backend::new(kind);
        b2.write_input(&random_orders(67, 2, 100), 1).await;
        let mut job = b2.job();
        FaultStore::wrap_output(&mut job, Mode::FailAt(i));
        // A short lease: a failed release leaves the lease to expire.
        let faulty = RunOptions { lease_ttl: Duration::from_millis(300), ..opts("2026-11-01", "2026-11-02") };
        let _ = run::run(&job, &faulty).await;
        let rerun = RunOptions { wait: true, ..opts("2026-11-01", "2026-11-02") };
        let s = run::run(&b2.job(), &rerun).await.unwrap();
        assert_eq!(s.exit_code, ExitCode::Ok, "fault at call {i}: {}", lakeswap::report::table(&s));
        let got = b2.partitions().await;
        assert_eq!(got.keys().collect::<Vec<_>>(), want.keys().collect::<Vec<_>>());
        for (k, v) in &got {
            assert_eq!(partition_rows(v), partition_rows(&want[k]), "fault at call {i}: {k}");
        }
    }
}

async fn large_partitions_go_up_in_parts(kind: Kind) {
    let b = Backend::new(kind);
    let mut out = b.location(STATE);
    let counting = FaultStore::new(out.store.clone(), Mode::None);
    out.store = counting.clone();
    let big: Vec<u8> = (0..20 * 1024 * 1024).map(|i| (i % 251) as u8).collect();
    let path = out.child(&["staging", "r", "event_date=2026-11-01", "part-00000.parquet"]);
    lakeswap::commit::upload(&out, &path, bytes::Bytes::from(big.clone())).await.unwrap();
    assert_eq!(counting.multipart.load(std::sync::atomic::Ordering::SeqCst), 1);
    assert_eq!(b.get(STATE, "staging/r/event_date=2026-11-01/part-00000.parquet").await.unwrap(), big);
    let small = out.child(&["small"]);
    lakeswap::commit::upload(&out, &small, bytes::Bytes::from_static(b"x")).await.unwrap();
    assert_eq!(counting.multipart.load(std::sync::atomic::Ordering::SeqCst), 1, "small objects: one put");

    // A part fails: the upload is aborted, the error names the object, and nothing is there.
    counting.fail_part(1);
    let failed = out.child(&["staging", "r", "event_date=2026-11-02", "part-00000.parquet"]);
    let err = lakeswap::commit::upload(&out, &failed, bytes::Bytes::from(big)).await.unwrap_err();
    assert!(err.to_string().contains("event_date=2026-11-02"), "{err}");
    assert_eq!(counting.aborts.load(std::sync::atomic::Ordering::SeqCst), 1, "the upload is aborted");
    assert!(b.get(STATE, "staging/r/event_date=2026-11-02/part-00000.parquet").await.is_none(), "nothing committed");
}

/// `status` learns a partition's lineage from the end of its file (ranged reads, which every
/// backend must serve), not by downloading it: a merged current-state partition can be large.
async fn lineage_is_read_from_the_footer_alone(kind: Kind) {
    let b = Backend::new(kind);
    let mut out = b.location("out");
    let counting = FaultStore::new(out.store.clone(), Mode::None);
    out.store = counting.clone();
    // ~200 k distinct rows: several MiB of Parquet, far more than its footer.
    let rows: Vec<Order> = (0..200_000)
        .map(|i| order(&format!("ord-{i:09}-{}", i * 7919 % 100_003), 1, "2026-11-01", "USD", i as i128 * 37, "placed"))
        .collect();
    let counts = lakeswap::prepare::PrepareStats { input_rows: rows.len() as u64, ..Default::default() };
    let lineage = lakeswap::lineage::Lineage::new("cfg".into(), d("2026-11-01"), Vec::new(), counts, rows.len() as u64);
    let file = lakeswap::commit::encode(&batch(&rows), &lineage, &[]).unwrap();
    assert!(file.len() > 2 * 1024 * 1024, "{} bytes", file.len());
    let path = out.child(&["event_date=2026-11-01", "part-00000.parquet"]);
    lakeswap::commit::upload(&out, &path, file.clone()).await.unwrap();
    counting.bytes_read.store(0, std::sync::atomic::Ordering::SeqCst);

    let found = lakeswap::commit::committed_lineage(&out, &path).await.unwrap();
    assert_eq!(found, Some(Some(lineage)));
    let read = counting.bytes_read.load(std::sync::atomic::Ordering::SeqCst);
    assert!(read <= 64 * 1024, "read {read} of {} bytes", file.len());
    let missing = out.child(&["event_date=2026-11-02", "part-00000.parquet"]);
    assert_eq!(lakeswap::commit::committed_lineage(&out, &missing).await.unwrap(), None);
    // Not Parquet at all (empty, or a few bytes): committed, without lineage.
    for (i, junk) in [&b""[..], b"PAR1", b"not a parquet file at all"].into_iter().enumerate() {
        let p = out.child(&[&format!("event_date=2026-11-1{i}"), "part-00000.parquet"]);
        lakeswap::commit::upload(&out, &p, bytes::Bytes::from(junk.to_vec())).await.unwrap();
        assert_eq!(lakeswap::commit::committed_lineage(&out, &p).await.unwrap(), Some(None), "{junk:?}");
    }
}

/// Dates spilled under a tiny budget read their objects (larger than a part of it) from the
/// store a row group at a time, in ranged reads: the model's numbers, as when read whole.
async fn spilled_dates_read_objects_in_ranges(kind: Kind) {
    let b = Backend::new(kind);
    let rows = random_orders(63, 2, 6_000);
    b.write_input(&rows, 1).await;
    // Each object past a part's bytes under 1 MiB (a sixty-fourth): read in ranges, not whole.
    let objects = b.objects("in").await;
    assert!(objects.len() == 2 && objects.values().all(|o| o.len() > 16 << 10), "{:?}", objects.keys());
    let spill = tempfile::tempdir().unwrap();
    let o =
        RunOptions { memory_limit: 1 << 20, spill_dir: spill.path().to_path_buf(), ..opts("2026-11-01", "2026-11-02") };
    let s = run::run(&b.job(), &o).await.unwrap();
    assert_eq!(actions(&s), [Action::Created; 2], "{}", lakeswap::report::table(&s));
    assert!(s.partitions.iter().all(|p| p.spilled_bytes > 0), "{}", lakeswap::report::table(&s));
    let out = b.partitions().await;
    for (date, want) in model(&rows) {
        assert_eq!(partition_rows(&out[&format!("event_date={date}/part-00000.parquet")]), want, "{date}");
    }
}

/// Dates spilled under a tiny budget read their NDJSON objects (larger than a part of it, plain
/// and gzip) from the store as pieces of lines: the model's numbers.
async fn spilled_ndjson_objects_are_read_in_pieces(kind: Kind) {
    use std::io::Write;
    let b = Backend::new(kind);
    let rows = random_orders(64, 2, 6_000);
    let mut by_date: std::collections::BTreeMap<_, Vec<_>> = std::collections::BTreeMap::new();
    for r in &rows {
        by_date.entry(r.date).or_default().push(r.clone());
    }
    for (date, rows) in &by_date {
        let (a, z) = rows.split_at(rows.len() / 2);
        b.put("in", &format!("event_date={date}/a.json"), ndjson_bytes(a)).await;
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(&ndjson_bytes(z)).unwrap();
        b.put("in", &format!("event_date={date}/z.json.gz"), gz.finish().unwrap()).await;
    }
    let objects = b.objects("in").await;
    assert!(objects.len() == 4 && objects.values().all(|o| o.len() > 16 << 10), "{:?}", objects.keys());
    let mut cfg = b.job().config.clone();
    cfg.input.format = lakeswap::config::Format::Ndjson;
    cfg.input.schema.insert("amount".into(), "decimal(12,2)".into());
    let job = lakeswap::Job::from_config(cfg, "test.toml").unwrap();
    let spill = tempfile::tempdir().unwrap();
    let o =
        RunOptions { memory_limit: 1 << 20, spill_dir: spill.path().to_path_buf(), ..opts("2026-11-01", "2026-11-02") };
    let s = run::run(&job, &o).await.unwrap();
    assert_eq!(actions(&s), [Action::Created; 2], "{}", lakeswap::report::table(&s));
    assert!(s.partitions.iter().all(|p| p.spilled_bytes > 0), "{}", lakeswap::report::table(&s));
    let out = b.partitions().await;
    for (date, want) in model(&rows) {
        assert_eq!(partition_rows(&out[&format!("event_date={date}/part-00000.parquet")]), want, "{date}");
    }
}

macro_rules! suite {
    ($name:ident, $kind:expr $(, $attr:meta)?) => {
        mod $name {
            use super::*;
            #[tokio::test(flavor = "multi_thread")]
            $(#[$attr])?
            async fn run_is_correct_and_rerun_byte_identical() {
                super::run_is_correct_and_rerun_byte_identical($kind).await
            }
            #[tokio::test(flavor = "multi_thread")]
            $(#[$attr])?
            async fn conflict_fails_only_its_partition() {
                super::conflict_fails_only_its_partition($kind).await
            }
            #[tokio::test(flavor = "multi_thread")]
            $(#[$attr])?
            async fn crashed_leftovers_are_cleaned() {
                super::crashed_leftovers_are_cleaned($kind).await
            }
            #[tokio::test(flavor = "multi_thread")]
            $(#[$attr])?
            async fn racing_runs_never_interleave() {
                super::racing_runs_never_interleave($kind).await
            }
            #[tokio::test(flavor = "multi_thread")]
            $(#[$attr])?
            async fn stale_run_is_fenced_off() {
                super::stale_run_is_fenced_off($kind).await
            }
            #[tokio::test(flavor = "multi_thread")]
            $(#[$attr])?
            async fn large_partitions_go_up_in_parts() {
                super::large_partitions_go_up_in_parts($kind).await
            }
            #[tokio::test(flavor = "multi_thread")]
            $(#[$attr])?
            async fn lineage_is_read_from_the_footer_alone() {
                super::lineage_is_read_from_the_footer_alone($kind).await
            }
            #[tokio::test(flavor = "multi_thread")]
            $(#[$attr])?
            async fn spilled_dates_read_objects_in_ranges() {
                super::spilled_dates_read_objects_in_ranges($kind).await
            }
            #[tokio::test(flavor = "multi_thread")]
            $(#[$attr])?
            async fn spilled_ndjson_objects_are_read_in_pieces() {
                super::spilled_ndjson_objects_are_read_in_pieces($kind).await
            }
            #[tokio::test(flavor = "multi_thread")]
            $(#[$attr])?
            async fn transient_faults_fail_the_partition_and_a_rerun_converges() {
                super::transient_faults_fail_the_partition_and_a_rerun_converges($kind).await
            }
        }
    };
}

suite!(memory, Kind::Memory);
suite!(local, Kind::Local);
suite!(s3, Kind::S3, ignore = "needs the S3 server that scripts/test starts (not requested)");
suite!(azure, Kind::Azure, ignore = "needs the Azurite server that scripts/test starts (not requested)");

/// The output on S3, read back by pyarrow's S3 filesystem as a Hive-partitioned data set.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs the S3 server that scripts/test starts (not requested)"]
async fn s3_output_read_by_pyarrow() {
    let b = Backend::new(Kind::S3);
    let rows = random_orders(68, 2, 200);
    b.write_input(&rows, 1).await;
    let s = run::run(&b.job(), &opts("2026-11-01", "2026-11-02")).await.unwrap();
    assert_eq!(s.exit_code, ExitCode::Ok);
    let root = b.url("out").trim_start_matches("s3://").to_string();
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/py/read_output.py");
    let o = std::process::Command::new("python3").arg(script).arg("pyarrow-s3").arg(&root).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let got: Vec<serde_json::Value> =
        String::from_utf8_lossy(&o.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let n: usize = model(&rows).values().map(Vec::len).sum();
    assert_eq!(got.len(), n);
    let orders: i64 = got.iter().map(|r| r["orders"].as_i64().unwrap()).sum();
    let want: i64 = model(&rows).values().flatten().map(|r| r.orders).sum();
    assert_eq!(orders, want);
}
