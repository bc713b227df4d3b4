//! Risk: a MERGE lets replays, late data or old versions change the current state. A
//! version-guarded upsert: replays change nothing, older versions are ignored, deletes stick,
//! and any order of batches gives the same bytes as a plain model.

mod common;
use common::backends::{Backend, Kind};
use common::faults::{FaultStore, Mode};
use common::*;
use lakeswap::commit::Action;
use lakeswap::{run, ExitCode, Job, JobConfig, RunOptions};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

fn merge_job(b: &Backend, batch: &str) -> Job {
    merge_job_with(b, batch, "")
}

fn merge_job_with(b: &Backend, batch: &str, extra: &str) -> Job {
    let text = format!(
        "[job]\nname = \"orders_current\"\nkind = \"merge\"\n\n[input]\nurl = \"{}\"\nformat = \"parquet\"\n\n\
         [identity]\nkey = [\"order_id\"]\nversion = \"source_version\"\ndeleted = {{ column = \"status\", equals = \"deleted\" }}\n\n\
         {extra}\n[output]\nurl = \"{}\"\n",
        b.url(batch),
        b.url("out")
    );
    if b.kind == Kind::Local {
        std::fs::create_dir_all(b.url(batch)).unwrap();
    }
    Job::from_config(JobConfig::parse(&text, "merge.toml").unwrap(), "merge.toml").unwrap()
}

async fn put_batch(b: &Backend, name: &str, rows: &[Order]) {
    b.put(name, "batch.parquet", parquet_bytes(&batch(rows))).await;
}

/// Merges keys `a` (100, placed) and `b` (5, placed), version 1, on 2026-11-01.
async fn seed_a_and_b(b: &Backend) {
    let rows = [order("a", 1, "2026-11-01", "USD", 100, "placed"), order("b", 1, "2026-11-01", "USD", 5, "placed")];
    put_batch(b, "b1", &rows).await;
    merge(b, "b1", None).await;
}

async fn merge(b: &Backend, batch: &str, dates: Option<(&str, &str)>) -> lakeswap::RunSummary {
    let opts =
        RunOptions { dates: dates.map(|(f, t)| lakeswap::dates::range(d(f), d(t)).unwrap()), ..Default::default() };
    run::run(&merge_job(b, batch), &opts).await.unwrap()
}

/// The rows of a merged partition: order id -> (version, status, cents).
fn state(bytes: &[u8]) -> Vec<(String, i64, String, i128)> {
    use arrow::array::AsArray;
    let r = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(bytes::Bytes::from(bytes.to_vec()))
        .unwrap()
        .build()
        .unwrap();
    let mut out = Vec::new();
    for b in r {
        let b = b.unwrap();
        assert!(b.column_by_name("event_date").is_none(), "the partition column lives in the path only");
        let id = b.column_by_name("order_id").unwrap().as_string::<i32>().clone();
        let v = b.column_by_name("source_version").unwrap().as_primitive::<arrow::datatypes::Int64Type>().clone();
        let st = b.column_by_name("status").unwrap().as_string::<i32>().clone();
        let c = b.column_by_name("amount").unwrap().as_primitive::<arrow::datatypes::Decimal128Type>().clone();
        for i in 0..b.num_rows() {
            out.push((id.value(i).to_string(), v.value(i), st.value(i).to_string(), c.value(i)));
        }
    }
    out
}

fn actions(s: &lakeswap::RunSummary) -> Vec<Action> {
    s.partitions.iter().map(|p| p.action).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn upserts_replays_older_versions_and_conflicts() {
    let b = Backend::new(Kind::Local);
    let first = vec![
        order("a", 1, "2026-11-01", "USD", 100, "placed"),
        order("b", 1, "2026-11-01", "USD", 200, "placed"),
        order("c", 3, "2026-11-02", "EUR", 300, "placed"),
    ];
    put_batch(&b, "b1", &first).await;
    let s = merge(&b, "b1", None).await;
    assert_eq!(actions(&s), [Action::Created, Action::Created], "{}", lakeswap::report::table(&s));
    assert_eq!(s.partitions[0].merge.unwrap().inserted, 2);
    let day1 = b.get("out", "event_date=2026-11-01/part-00000.parquet").await.unwrap();
    assert_eq!(state(&day1).iter().map(|r| r.0.as_str()).collect::<Vec<_>>(), ["a", "b"], "sorted by key");

    // A replay changes nothing and rewrites nothing.
    let s = merge(&b, "b1", None).await;
    assert_eq!(actions(&s), [Action::Unchanged, Action::Unchanged]);
    assert_eq!(s.partitions[0].merge.unwrap().unchanged, 2);

    // Newer versions win, older ones are ignored; untouched partitions are not rewritten.
    let second =
        vec![order("a", 2, "2026-11-01", "USD", 150, "shipped"), order("b", 0, "2026-11-01", "USD", 999, "refunded")];
    put_batch(&b, "b2", &second).await;
    let day2_before = b.get("out", "event_date=2026-11-02/part-00000.parquet").await.unwrap();
    let s = merge(&b, "b2", None).await;
    assert_eq!(actions(&s), [Action::Replaced], "only the batch's date: {}", lakeswap::report::table(&s));
    let m = s.partitions[0].merge.unwrap();
    assert_eq!((m.updated, m.ignored_older, m.inserted), (1, 1, 0));
    let rows = state(&b.get("out", "event_date=2026-11-01/part-00000.parquet").await.unwrap());
    assert_eq!(rows[0], ("a".to_string(), 2, "shipped".to_string(), 150));
    assert_eq!(rows[1], ("b".to_string(), 1, "placed".to_string(), 200));
    assert_eq!(b.get("out", "event_date=2026-11-02/part-00000.parquet").await.unwrap(), day2_before);

    // Same key and version as stored, another payload: a conflict, nothing written.
    let before = b.partitions().await;
    put_batch(&b, "b3", &[order("a", 2, "2026-11-01", "USD", 151, "shipped")]).await;
    let s = merge(&b, "b3", None).await;
    assert_eq!(s.exit_code, ExitCode::DataContract);
    let e = s.partitions[0].error.clone().unwrap();
    assert!(e.contains("key a version 2") && e.contains("stored partition"), "{e}");
    assert_eq!(b.partitions().await, before);
}

#[tokio::test(flavor = "multi_thread")]
async fn deletes_stick_and_older_versions_never_resurrect() {
    let b = Backend::new(Kind::Local);
    seed_a_and_b(&b).await;
    put_batch(&b, "b2", &[order("a", 3, "2026-11-01", "USD", 100, "deleted")]).await;
    let s = merge(&b, "b2", None).await;
    assert_eq!(s.partitions[0].merge.unwrap().deleted, 1);
    let keys = |bytes: Vec<u8>| state(&bytes).into_iter().map(|r| r.0).collect::<Vec<_>>();
    assert_eq!(keys(b.get("out", "event_date=2026-11-01/part-00000.parquet").await.unwrap()), ["b"]);
    // Late, older data for the deleted key: ignored.
    put_batch(&b, "b3", &[order("a", 2, "2026-11-01", "USD", 100, "shipped")]).await;
    let s = merge(&b, "b3", None).await;
    assert_eq!(actions(&s), [Action::Unchanged]);
    assert_eq!(s.partitions[0].merge.unwrap().ignored_older, 1);
    assert_eq!(keys(b.get("out", "event_date=2026-11-01/part-00000.parquet").await.unwrap()), ["b"]);
    // A newer version brings it back.
    put_batch(&b, "b4", &[order("a", 4, "2026-11-01", "USD", 100, "placed")]).await;
    merge(&b, "b4", None).await;
    assert_eq!(keys(b.get("out", "event_date=2026-11-01/part-00000.parquet").await.unwrap()), ["a", "b"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_range_merges_only_its_dates_and_leaves_the_others() {
    let b = Backend::new(Kind::Local);
    put_batch(
        &b,
        "b1",
        &[order("a", 1, "2026-11-01", "USD", 1, "placed"), order("b", 1, "2026-11-03", "USD", 1, "placed")],
    )
    .await;
    let s = merge(&b, "b1", Some(("2026-11-02", "2026-11-03"))).await;
    assert_eq!(s.exit_code, ExitCode::Ok, "{}", lakeswap::report::table(&s));
    assert_eq!(actions(&s), [Action::Skipped, Action::Created], "11-02 has no batch rows: left alone");
    assert_eq!(b.partitions().await.keys().collect::<Vec<_>>(), ["event_date=2026-11-03/part-00000.parquet"]);
}

/// A random stream: keys with several versions, some deletes, exact duplicates, replays.
fn stream(seed: u64) -> Vec<Order> {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let mut rows = Vec::new();
    for k in 0..60 {
        let date = if k % 2 == 0 { "2026-11-01" } else { "2026-11-02" };
        for v in 1..=rng.random_range(1..5) {
            let status = if rng.random_bool(0.25) {
                "deleted"
            } else {
                ["placed", "shipped", "refunded"][rng.random_range(0..3)]
            };
            let r = order(&format!("k{k:03}"), v, date, "USD", 100 * v as i128 + k, status);
            if rng.random_bool(0.2) {
                rows.push(r.clone());
            }
            rows.push(r);
        }
    }
    rows.shuffle(&mut rng);
    rows
}

/// The plain model: the latest version per key; a key whose latest version is a delete is gone.
fn latest(rows: &[Order]) -> BTreeMap<String, Vec<(String, i64, String, i128)>> {
    let mut best: HashMap<&str, &Order> = HashMap::new();
    for r in rows {
        let e = best.entry(&r.order_id).or_insert(r);
        if r.version > e.version {
            *e = r;
        }
    }
    let mut out: BTreeMap<String, Vec<_>> = BTreeMap::new();
    for r in best.values().filter(|r| r.status != "deleted") {
        out.entry(format!("event_date={}/part-00000.parquet", r.date)).or_default().push((
            r.order_id.clone(),
            r.version,
            r.status.clone(),
            r.cents,
        ));
    }
    out.values_mut().for_each(|v| v.sort());
    out
}

#[tokio::test(flavor = "multi_thread")]
async fn any_batches_in_any_order_give_the_model_byte_for_byte() {
    for seed in 0..6u64 {
        let rows = stream(seed);
        // All events in one batch: the reference bytes.
        let one = Backend::new(Kind::Local);
        put_batch(&one, "all", &rows).await;
        assert_eq!(merge(&one, "all", None).await.exit_code, ExitCode::Ok);
        let want = one.partitions().await;
        let model = latest(&rows);
        let got: BTreeMap<String, Vec<_>> = want.iter().map(|(k, v)| (k.clone(), state(v))).collect();
        assert_eq!(got, model, "seed {seed}: one batch equals the model");

        // Random batches, random order, some applied twice.
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed + 100);
        let b = Backend::new(Kind::Local);
        let mut shuffled = rows.clone();
        shuffled.shuffle(&mut rng);
        let cuts = rng.random_range(2..6);
        let size = shuffled.len().div_ceil(cuts);
        let mut batches: Vec<Vec<Order>> = shuffled.chunks(size).map(|c| c.to_vec()).collect();
        let again = batches[rng.random_range(0..batches.len())].clone();
        batches.push(again);
        for (i, batch) in batches.iter().enumerate() {
            let name = format!("batch{i}");
            put_batch(&b, &name, batch).await;
            let s = merge(&b, &name, None).await;
            assert_eq!(s.exit_code, ExitCode::Ok, "seed {seed} batch {i}: {}", lakeswap::report::table(&s));
        }
        assert_eq!(b.partitions().await, want, "seed {seed}: the same bytes whatever the batches and their order");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_crash_mid_merge_leaves_old_or_new_and_a_rerun_converges() {
    let b = Backend::new(Kind::Memory);
    let rows = stream(42);
    let (first, second): (Vec<Order>, Vec<Order>) = rows.iter().cloned().partition(|r| r.version <= 2);
    put_batch(&b, "b1", &first).await;
    put_batch(&b, "b2", &second).await;
    merge(&b, "b1", None).await;
    let old = b.partitions().await;
    // The table: its partitions and the objects their footers name (tombstones, key indexes).
    let table: Vec<(String, Vec<u8>)> = b
        .objects("out")
        .await
        .into_iter()
        .filter(|(k, _)| !k.starts_with("_lakeswap/runs/") && !k.starts_with("_lakeswap/leases/"))
        .collect();
    // The expected state after the second batch, on a copy.
    let reference = Backend::new(Kind::Memory);
    put_batch(&reference, "b1", &first).await;
    put_batch(&reference, "b2", &second).await;
    merge(&reference, "b1", None).await;
    let mut counted = merge_job(&reference, "b2");
    let counter = FaultStore::new(counted.output.store.clone(), Mode::None);
    counted.output.store = counter.clone();
    run::run(&counted, &RunOptions::default()).await.unwrap();
    let want = reference.partitions().await;
    for i in 0..counter.calls() {
        // Start each crash from the old state.
        let c = Backend::new(Kind::Memory);
        put_batch(&c, "b2", &second).await;
        for (k, v) in &table {
            c.put("out", k, v.clone()).await;
        }
        let mut job = merge_job(&c, "b2");
        job.output.store = FaultStore::new(job.output.store.clone(), Mode::CrashAt(i));
        let _ = run::run(&job, &RunOptions { lease_ttl: Duration::from_millis(150), ..Default::default() }).await;
        for (k, v) in c.partitions().await {
            assert!(old.get(&k) == Some(&v) || want.get(&k) == Some(&v), "crash at {i}: {k} is neither old nor new");
        }
        let s = run::run(&merge_job(&c, "b2"), &RunOptions { wait: true, ..Default::default() }).await.unwrap();
        assert_eq!(s.exit_code, ExitCode::Ok, "crash at {i}: {}", lakeswap::report::table(&s));
        assert_eq!(c.partitions().await, want, "crash at {i}: the re-run converges");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn quarantine_sets_a_stored_conflict_aside_and_keeps_the_stored_row() {
    let b = Backend::new(Kind::Local);
    seed_a_and_b(&b).await;
    put_batch(
        &b,
        "b2",
        &[order("a", 1, "2026-11-01", "USD", 101, "placed"), order("b", 2, "2026-11-01", "USD", 6, "shipped")],
    )
    .await;
    let job = merge_job_with(&b, "b2", "[prepare]\non_conflict = \"quarantine\"\n");
    let s = run::run(&job, &RunOptions::default()).await.unwrap();
    assert_eq!(s.exit_code, ExitCode::Ok, "{}", lakeswap::report::table(&s));
    let m = s.partitions[0].merge.unwrap();
    assert_eq!((m.conflicts, m.updated), (1, 1));
    assert!(lakeswap::report::table(&s).contains("conflicts"));
    let rows = state(&b.get("out", "event_date=2026-11-01/part-00000.parquet").await.unwrap());
    assert_eq!(rows[0], ("a".to_string(), 1, "placed".to_string(), 100), "the stored row stays");
    assert_eq!(rows[1].1, 2);
    let q = b.objects("out").await.into_keys().filter(|k| k.starts_with("_quarantine/")).count();
    assert_eq!(q, 1, "the conflicting row is set aside");
}
