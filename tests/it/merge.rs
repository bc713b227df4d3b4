//! Risk: a MERGE lets replays, late data or old versions change the current state. A
//! version-guarded upsert: replays change nothing, older versions are ignored, deletes stick,
//! and any order of batches gives the same bytes as a plain model.

use crate::common::backends::{Backend, Kind, STATE};
use crate::common::faults::{FaultStore, Mode};
use crate::common::*;
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

/// Risk: a merge table's `[identity]` edited between batches: under another key each stored
/// row is found by no key and held twice (one entity under two dates); under another version
/// older rows win. The table records the identity it was merged by; another is refused (exit 2)
/// with nothing done. A table whose record predates identities adopts that of its next run
/// whose every partition succeeds.
#[tokio::test(flavor = "multi_thread")]
async fn a_merge_under_another_identity_is_refused() {
    let b = Backend::new(Kind::Local);
    seed_a_and_b(&b).await;
    let before = b.partitions().await;
    put_batch(&b, "b2", &[order("a", 2, "2026-11-02", "USD", 7, "placed")]).await;
    let job_keyed = |batch: &str, identity: &str| {
        let text = format!(
            "[job]\nname = \"orders_current\"\nkind = \"merge\"\n\n[input]\nurl = \"{}\"\nformat = \"parquet\"\n\n\
             [identity]\n{identity}\n\n[output]\nurl = \"{}\"\n",
            b.url(batch),
            b.url("out")
        );
        Job::from_config(JobConfig::parse(&text, "merge.toml").unwrap(), "merge.toml").unwrap()
    };
    let refused = |e: lakeswap::Error| {
        assert_eq!(e.exit_code(), ExitCode::Usage, "{e}");
        assert!(e.to_string().contains("was merged by key [\"order_id\"] with version \"source_version\""), "{e}");
    };
    for identity in [
        "key = [\"customer_id\"]\nversion = \"source_version\"",
        "key = [\"order_id\", \"currency\"]\nversion = \"source_version\"",
    ] {
        refused(run::run(&job_keyed("b2", identity), &RunOptions::default()).await.expect_err(identity));
    }
    assert_eq!(b.partitions().await, before, "nothing done");
    // A record without an identity (an older table). A run under another key fails its date
    // (the stored tombstones are keyed by `order_id`) and records nothing; the next run whose
    // every partition succeeds records its identity, which is then kept.
    put_batch(&b, "bd", &[order("b", 2, "2026-11-01", "USD", 5, "deleted")]).await;
    assert_eq!(merge(&b, "bd", None).await.exit_code, ExitCode::Ok);
    b.delete(STATE, "table-schema").await;
    put_batch(&b, "b3", &[order("c", 1, "2026-11-01", "USD", 9, "placed")]).await;
    let other = |batch: &str| job_keyed(batch, "key = [\"customer_id\"]\nversion = \"source_version\"");
    let s = run::run(&other("b3"), &RunOptions::default()).await.unwrap();
    assert_ne!(s.exit_code, ExitCode::Ok, "{}", lakeswap::report::table(&s));
    assert_eq!(merge(&b, "b3", None).await.exit_code, ExitCode::Ok);
    refused(run::run(&other("b3"), &RunOptions::default()).await.expect_err("refused"));
    // The table's own identity merges; the key moves to 2026-11-02 and is under one date.
    let s = merge(&b, "b2", None).await;
    assert_eq!(s.exit_code, ExitCode::Ok, "{}", lakeswap::report::table(&s));
    let keys: Vec<String> =
        b.partitions().await.values().flat_map(|f| state(f)).map(|(k, ..)| k).filter(|k| k == "a").collect();
    assert_eq!(keys, ["a"]);
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

/// Risk: a merged partition's file restored from another date (the wrong backup) was read as
/// that date's stored rows and merged into: its keys held under two dates, exit 0, and the
/// misplacement gone from `status` once rewritten. The date fails naming the file; `status`
/// says a merged table cannot be rewritten from its input.
#[tokio::test(flavor = "multi_thread")]
async fn a_merged_partition_copied_from_another_date_is_not_merged_into() {
    let b = Backend::new(Kind::Local);
    let rows = [order("a", 1, "2026-11-01", "USD", 100, "placed"), order("b", 1, "2026-11-02", "USD", 5, "placed")];
    put_batch(&b, "b1", &rows).await;
    assert_eq!(merge(&b, "b1", None).await.exit_code, ExitCode::Ok);
    let first = b.get("out", "event_date=2026-11-01/part-00000.parquet").await.unwrap();
    b.put("out", "event_date=2026-11-02/part-00000.parquet", first.clone()).await;
    let before = b.objects("out").await;
    let status = lakeswap::status::status(&merge_job(&b, "b1"), None).await.unwrap();
    let states: Vec<&str> = status.partitions.iter().map(|p| p.state).collect();
    assert_eq!(states, ["committed", "misplaced"]);
    let shown = lakeswap::status::render(&status, 5);
    assert!(shown.contains("lineage is 2026-11-01's") && shown.contains("its own history"), "{shown}");
    // A merged partition holds every batch's rows: no input rows or input fingerprint of its own.
    let line = shown.lines().find(|l| l.trim_start().starts_with("2026-11-01")).unwrap();
    let cols: Vec<&str> = line.split_whitespace().collect();
    assert_eq!((cols[2], cols[3]), ("-", "1"), "{shown}");
    assert!(cols[5].ends_with("/-"), "{shown}");
    put_batch(&b, "b2", &[order("c", 1, "2026-11-02", "USD", 7, "placed")]).await;
    let s = merge(&b, "b2", None).await;
    assert_eq!(actions(&s), [Action::Failed], "{}", lakeswap::report::table(&s));
    let err = s.partitions[0].error.clone().unwrap();
    assert!(err.contains("event_date=2026-11-02") && err.contains("partition of 2026-11-01"), "{err}");
    assert_eq!(b.objects("out").await, before, "nothing is merged into it");
    let status = lakeswap::status::status(&merge_job(&b, "b2"), Some(vec![d("2026-11-02")])).await.unwrap();
    // What the file is comes first; the failure is the last run's.
    assert_eq!(status.partitions[0].state, "misplaced");
    assert!(matches!(status.partitions[0].last_run, Some((_, Action::Failed))));
    // A copy another tool wrote (no lakeswap lineage) is not merged into either.
    b.put("out", "event_date=2026-11-03/part-00000.parquet", parquet_bytes(&batch(&rows[..1]))).await;
    put_batch(&b, "b3", &[order("d", 1, "2026-11-03", "USD", 7, "placed")]).await;
    let s = merge(&b, "b3", None).await;
    assert_eq!(actions(&s), [Action::Failed], "{}", lakeswap::report::table(&s));
    assert!(s.partitions[0].error.as_deref().is_some_and(|e| e.contains("no lakeswap lineage")), "{s:?}");
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
    assert_eq!(actions(&s), [Action::Untouched, Action::Created], "11-02 has no batch rows: left alone");
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
        .chain(
            b.objects(STATE)
                .await
                .into_iter()
                // (not `table.json`: it names this table, and the copies are other tables)
                .filter(|(k, _)| !k.starts_with("runs/") && !k.starts_with("leases/") && k != "table.json")
                .map(|(k, v)| (format!("state/{k}"), v)),
        )
        .collect();
    // The expected state after the second batch, on a copy.
    let reference = Backend::new(Kind::Memory);
    put_batch(&reference, "b1", &first).await;
    put_batch(&reference, "b2", &second).await;
    merge(&reference, "b1", None).await;
    let mut counted = merge_job(&reference, "b2");
    let counter = FaultStore::wrap_output(&mut counted, Mode::None);
    run::run(&counted, &RunOptions::default()).await.unwrap();
    let want = reference.partitions().await;
    for i in 0..counter.calls() {
        // Start each crash from the old state.
        let c = Backend::new(Kind::Memory);
        put_batch(&c, "b2", &second).await;
        for (k, v) in &table {
            match k.strip_prefix("state/") {
                Some(k) => c.put(STATE, k, v.clone()).await,
                None => c.put("out", k, v.clone()).await,
            }
        }
        let mut job = merge_job(&c, "b2");
        FaultStore::wrap_output(&mut job, Mode::CrashAt(i));
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
    let q = b.objects(STATE).await.into_keys().filter(|k| k.starts_with("quarantine/")).count();
    assert_eq!(q, 1, "the conflicting row is set aside");
}

/// Risk: a batch holding a newer version of a key and, beside it, another row at the stored
/// version (`a` v1 stored as 100; the batch has `a` v1 at 999 and `a` v2): only the newest was
/// compared with the stored row, so the conflict passed with exit 0 — and under quarantine the
/// 999 row was lost, set aside nowhere. The same rows in one batch are a conflict. Now they are
/// whatever the batching: exit 3 naming the key; or, under quarantine, the row set aside and
/// the newest version merged, as one batch would. A delete at the stored version is no conflict.
#[tokio::test(flavor = "multi_thread")]
async fn a_superseded_row_of_the_batch_is_checked_against_the_stored_version() {
    let conflicting =
        [order("a", 1, "2026-11-01", "USD", 999, "placed"), order("a", 2, "2026-11-01", "USD", 150, "shipped")];
    let b = Backend::new(Kind::Local);
    seed_a_and_b(&b).await;
    let before = b.partitions().await;
    put_batch(&b, "b2", &conflicting).await;
    let s = merge(&b, "b2", None).await;
    assert_eq!(s.exit_code, ExitCode::DataContract, "{}", lakeswap::report::table(&s));
    let e = s.partitions[0].error.clone().unwrap();
    assert!(e.contains("key a version 1") && e.contains("stored partition"), "{e}");
    assert_eq!(b.partitions().await, before, "nothing written");

    let job = merge_job_with(&b, "b2", "[prepare]\non_conflict = \"quarantine\"\n");
    let s = run::run(&job, &RunOptions::default()).await.unwrap();
    assert_eq!(s.exit_code, ExitCode::Ok, "{}", lakeswap::report::table(&s));
    let m = s.partitions[0].merge.unwrap();
    assert_eq!((m.conflicts, m.updated), (1, 1), "{}", lakeswap::report::table(&s));
    let rows = state(&b.get("out", "event_date=2026-11-01/part-00000.parquet").await.unwrap());
    assert_eq!(rows[0], ("a".to_string(), 2, "shipped".to_string(), 150), "the newest version merged");
    let q = b.objects(STATE).await.into_keys().filter(|k| k.starts_with("quarantine/")).count();
    assert_eq!(q, 1, "the conflicting row is set aside");

    // The stored row itself, or a delete at a version a newer one replaces, beside the newest:
    // no conflict.
    let b = Backend::new(Kind::Local);
    seed_a_and_b(&b).await;
    let replay =
        [order("a", 1, "2026-11-01", "USD", 100, "placed"), order("a", 2, "2026-11-01", "USD", 150, "shipped")];
    put_batch(&b, "b2", &replay).await;
    let s = merge(&b, "b2", None).await;
    assert_eq!(s.exit_code, ExitCode::Ok, "{}", lakeswap::report::table(&s));
    put_batch(&b, "b3", &[order("b", 3, "2026-11-01", "USD", 5, "deleted")]).await;
    assert_eq!(merge(&b, "b3", None).await.exit_code, ExitCode::Ok);
    let after_delete =
        [order("b", 3, "2026-11-01", "USD", 5, "deleted"), order("b", 4, "2026-11-01", "USD", 6, "placed")];
    put_batch(&b, "b4", &after_delete).await;
    let s = merge(&b, "b4", None).await;
    assert_eq!(s.exit_code, ExitCode::Ok, "{}", lakeswap::report::table(&s));
    // A live row at a deleted version, beside a newer one: a conflict.
    let b = Backend::new(Kind::Local);
    seed_a_and_b(&b).await;
    put_batch(&b, "b2", &[order("b", 3, "2026-11-01", "USD", 5, "deleted")]).await;
    assert_eq!(merge(&b, "b2", None).await.exit_code, ExitCode::Ok);
    let live_at_delete =
        [order("b", 3, "2026-11-01", "USD", 5, "placed"), order("b", 4, "2026-11-01", "USD", 6, "placed")];
    put_batch(&b, "b3", &live_at_delete).await;
    let s = merge(&b, "b3", None).await;
    assert_eq!(s.exit_code, ExitCode::DataContract, "{}", lakeswap::report::table(&s));
    assert!(s.partitions[0].error.clone().unwrap().contains("a delete of the same version"));
}

/// The same, for a key the newest version moves to another date: its other row at the stored
/// version, under the new date or a third one, is checked against the row it leaves.
#[tokio::test(flavor = "multi_thread")]
async fn a_superseded_row_beside_a_move_is_checked_against_the_row_it_leaves() {
    for third in [false, true] {
        let b = Backend::new(Kind::Local);
        seed_a_and_b(&b).await;
        let before = b.partitions().await;
        let old_day = if third { "2026-11-03" } else { "2026-11-02" };
        let rows = [order("a", 1, old_day, "USD", 999, "placed"), order("a", 2, "2026-11-02", "USD", 150, "shipped")];
        put_batch(&b, "b2", &rows).await;
        let s = merge(&b, "b2", None).await;
        let t = lakeswap::report::table(&s);
        assert_eq!(s.exit_code, ExitCode::DataContract, "third date: {third}\n{t}");
        let e: Vec<String> = s.partitions.iter().filter_map(|p| p.error.clone()).collect();
        assert!(
            e.iter().any(|e| e.contains("key a version 1") && e.contains("stored partition of 2026-11-01")),
            "{e:?}"
        );
        assert_eq!(b.partitions().await, before, "nothing written");

        let job = merge_job_with(&b, "b2", "[prepare]\non_conflict = \"quarantine\"\n");
        let s = run::run(&job, &RunOptions::default()).await.unwrap();
        assert_eq!(s.exit_code, ExitCode::Ok, "{}", lakeswap::report::table(&s));
        assert_eq!(where_keys_live(&b).await.get("a").cloned(), Some(vec!["2026-11-02".to_string()]));
        let q = b.objects(STATE).await.into_keys().filter(|k| k.starts_with("quarantine/")).count();
        assert_eq!(q, 1, "the conflicting row is set aside");
    }
    // The stored row itself beside the move, under its own date: no conflict. Under a third
    // date it is another row (its date differs), as it is alone or in one batch with the row.
    for (old_day, exit) in [("2026-11-01", ExitCode::Ok), ("2026-11-03", ExitCode::DataContract)] {
        let b = Backend::new(Kind::Local);
        seed_a_and_b(&b).await;
        let rows = [order("a", 1, old_day, "USD", 100, "placed"), order("a", 2, "2026-11-02", "USD", 150, "shipped")];
        put_batch(&b, "b2", &rows).await;
        let s = merge(&b, "b2", None).await;
        assert_eq!(s.exit_code, exit, "{old_day}: {}", lakeswap::report::table(&s));
    }
}

/// Risk: a key's newest version in the batch stays under its stored date while an older row of
/// it, at the stored version with other values, is dated elsewhere in the batch: it was dropped
/// as superseded without ever being compared with the stored row (exit 0, the row lost; under
/// quarantine set aside nowhere). One batch holding all three rows is a conflict.
#[tokio::test]
async fn a_superseded_row_under_another_date_is_checked_against_the_row_that_stays() {
    let b = Backend::new(Kind::Local);
    seed_a_and_b(&b).await;
    let before = b.partitions().await;
    let rows = [order("a", 1, "2026-11-02", "USD", 999, "placed"), order("a", 2, "2026-11-01", "USD", 150, "shipped")];
    put_batch(&b, "b2", &rows).await;
    let s = merge(&b, "b2", None).await;
    let t = lakeswap::report::table(&s);
    assert_eq!(s.exit_code, ExitCode::DataContract, "{t}");
    let e: Vec<String> = s.partitions.iter().filter_map(|p| p.error.clone()).collect();
    assert!(e.iter().any(|e| e.contains("key a version 1") && e.contains("stored partition of 2026-11-01")), "{e:?}");
    assert_eq!(s.partitions.iter().filter(|p| p.error.is_some()).count(), 2, "the dates sharing the key fail: {t}");
    assert_eq!(b.partitions().await, before, "nothing written");

    let job = merge_job_with(&b, "b2", "[prepare]\non_conflict = \"quarantine\"\n");
    let s = run::run(&job, &RunOptions::default()).await.unwrap();
    assert_eq!(s.exit_code, ExitCode::Ok, "{}", lakeswap::report::table(&s));
    assert_eq!(where_keys_live(&b).await.get("a").cloned(), Some(vec!["2026-11-01".to_string()]));
    let q = b.objects(STATE).await.into_keys().filter(|k| k.starts_with("quarantine/")).count();
    assert_eq!(q, 1, "the conflicting row is set aside");

    // A row older than the stored one: no conflict. The stored row's values under another date
    // are another row (its date differs): a conflict, as that row alone is.
    for (old, exit) in [
        (order("a", 0, "2026-11-02", "USD", 7, "placed"), ExitCode::Ok),
        (order("a", 1, "2026-11-02", "USD", 100, "placed"), ExitCode::DataContract),
    ] {
        let b = Backend::new(Kind::Local);
        seed_a_and_b(&b).await;
        put_batch(&b, "b2", &[old, order("a", 2, "2026-11-01", "USD", 150, "shipped")]).await;
        let s = merge(&b, "b2", None).await;
        assert_eq!(s.exit_code, exit, "{}", lakeswap::report::table(&s));
        assert_eq!(where_keys_live(&b).await.get("a").cloned(), Some(vec!["2026-11-01".to_string()]));
    }
}

/// Risk: under quarantine, a version in conflict on one date was set aside there, but a row of
/// that version on another date whose own newest version is newer was dropped as superseded —
/// neither merged nor set aside (a row lost). A version in conflict is set aside on every date
/// that holds it, below its winner too.
#[tokio::test]
async fn a_version_in_conflict_is_set_aside_on_every_date_below_a_newer_winner() {
    let b = Backend::new(Kind::Local);
    let rows = [
        order("b", 1, "2026-11-01", "USD", 10, "placed"),
        order("b", 1, "2026-11-01", "USD", 11, "placed"),
        order("b", 1, "2026-11-03", "USD", 12, "placed"),
        order("b", 4, "2026-11-03", "USD", 10, "shipped"),
    ];
    put_batch(&b, "b1", &rows).await;
    let job = merge_job_with(&b, "b1", "[prepare]\non_conflict = \"quarantine\"\n");
    let s = run::run(&job, &RunOptions::default()).await.unwrap();
    let t = lakeswap::report::table(&s);
    assert_eq!(s.exit_code, ExitCode::Ok, "{t}");
    assert_eq!(where_keys_live(&b).await.get("b").cloned(), Some(vec!["2026-11-03".to_string()]));
    let set_aside: u64 = s.partitions.iter().map(|p| p.counts.map_or(0, |c| c.quarantined_rows)).sum();
    assert_eq!(set_aside, 3, "every row of version 1 is set aside: {t}");
}

// ---------------------------------------------------------------------------------------
// A key lives under one date: a newer version under another date moves it.

/// Every key of every partition, with its date: key -> dates.
async fn where_keys_live(b: &Backend) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (k, v) in b.partitions().await {
        let date = k.split('=').nth(1).unwrap()[..10].to_string();
        for r in state(&v) {
            out.entry(r.0).or_default().push(date.clone());
        }
    }
    out
}

async fn a_key_that_changes_date_moves(kind: Kind) {
    let b = Backend::new(kind);
    put_batch(
        &b,
        "b1",
        &[order("k0", 1, "2026-11-01", "USD", 1, "placed"), order("k1", 1, "2026-11-01", "USD", 2, "placed")],
    )
    .await;
    assert_eq!(merge(&b, "b1", None).await.exit_code, ExitCode::Ok);
    // k0 is re-dated by its producer.
    put_batch(&b, "b2", &[order("k0", 2, "2026-11-02", "USD", 3, "shipped")]).await;
    let s = merge(&b, "b2", None).await;
    assert_eq!(s.exit_code, ExitCode::Ok, "{}", lakeswap::report::table(&s));
    let by_date: BTreeMap<_, _> = s.partitions.iter().map(|p| (p.date.to_string(), p.merge.unwrap())).collect();
    assert_eq!((by_date["2026-11-01"].moved_out, by_date["2026-11-02"].moved_in), (1, 1));
    let live = where_keys_live(&b).await;
    assert_eq!(live["k0"], ["2026-11-02"], "one row per key, at the date of its latest version");
    assert_eq!(live["k1"], ["2026-11-01"]);
    // Late, older data under a third date changes nothing (and creates no partition).
    put_batch(&b, "b3", &[order("k0", 1, "2026-11-03", "USD", 9, "placed")]).await;
    let before = b.partitions().await;
    let s = merge(&b, "b3", None).await;
    assert_eq!(s.exit_code, ExitCode::Ok, "{}", lakeswap::report::table(&s));
    assert_eq!(s.partitions.len(), 1, "only the batch's date: {}", lakeswap::report::table(&s));
    assert_eq!(s.partitions[0].merge.unwrap().ignored_older, 1);
    assert!(b.partitions().await == before, "nothing changes, no partition is created");
    // A delete under the old date: the key leaves 11-02, and the tombstone keeps it gone.
    put_batch(&b, "b4", &[order("k0", 3, "2026-11-01", "USD", 0, "deleted")]).await;
    assert_eq!(merge(&b, "b4", None).await.exit_code, ExitCode::Ok);
    assert!(!where_keys_live(&b).await.contains_key("k0"));
    put_batch(&b, "b5", &[order("k0", 2, "2026-11-02", "USD", 3, "shipped")]).await;
    assert_eq!(merge(&b, "b5", None).await.exit_code, ExitCode::Ok);
    assert!(!where_keys_live(&b).await.contains_key("k0"), "an older version never resurrects a deleted key");
    // Each partition's footer names one key index (and at most one tombstone object); the
    // objects of the files it replaced are gone.
    let objects = b.objects(STATE).await;
    for (k, _) in b.partitions().await {
        let dir = k.split('/').next().unwrap().to_string();
        let count = |kind: &str| objects.keys().filter(|o| o.starts_with(&format!("{kind}/{dir}/"))).count();
        assert_eq!(count("keys"), 1, "{dir}: {:?}", objects.keys().collect::<Vec<_>>());
        assert!(count("tombstones") <= 1, "{dir}");
    }
    // The journal names the moves.
    let journals = lakeswap::journal::read_all(&b.location(STATE)).await.unwrap();
    assert!(journals.iter().any(|j| j.moves.iter().any(|m| m.key == "k0" && m.to == d("2026-11-02"))));
}

async fn on_date_change_fail_refuses_the_batch(kind: Kind) {
    let b = Backend::new(kind);
    put_batch(&b, "b1", &[order("k0", 1, "2026-11-01", "USD", 1, "placed")]).await;
    merge(&b, "b1", None).await;
    let before = b.partitions().await;
    put_batch(
        &b,
        "b2",
        &[order("k0", 2, "2026-11-02", "USD", 3, "shipped"), order("k9", 1, "2026-11-03", "USD", 1, "placed")],
    )
    .await;
    let job = merge_job_with(&b, "b2", "[merge]\non_date_change = \"fail\"\n");
    let s = run::run(&job, &RunOptions::default()).await.unwrap();
    assert_eq!(s.exit_code, ExitCode::DataContract, "{}", lakeswap::report::table(&s));
    let e = s.partitions.iter().find(|p| p.date == d("2026-11-02")).unwrap().error.clone().unwrap();
    assert!(e.contains("key k0") && e.contains("2026-11-01") && e.contains("seen under two dates"), "{e}");
    let after = b.partitions().await;
    assert_eq!(
        after.get("event_date=2026-11-01/part-00000.parquet"),
        before.get("event_date=2026-11-01/part-00000.parquet")
    );
    assert!(!after.contains_key("event_date=2026-11-02/part-00000.parquet"));
}

/// A random stream in which keys change dates from version to version.
fn wandering_stream(seed: u64) -> Vec<Order> {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let dates = ["2026-11-01", "2026-11-02", "2026-11-03"];
    let mut rows = Vec::new();
    for k in 0..40 {
        for v in 1..=rng.random_range(1..5) {
            let date = dates[rng.random_range(0..3)];
            let status = if rng.random_bool(0.2) { "deleted" } else { ["placed", "shipped"][rng.random_range(0..2)] };
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

async fn any_split_of_wandering_keys_gives_the_model(kind: Kind) {
    for seed in 0..5u64 {
        let rows = wandering_stream(seed);
        let model = latest(&rows);
        let one = Backend::new(kind);
        put_batch(&one, "all", &rows).await;
        let s = merge(&one, "all", None).await;
        assert_eq!(s.exit_code, ExitCode::Ok, "seed {seed}: {}", lakeswap::report::table(&s));
        let want = one.partitions().await;
        let got: BTreeMap<String, Vec<_>> =
            want.iter().map(|(k, v)| (k.clone(), state(v))).filter(|(_, v)| !v.is_empty()).collect();
        assert_eq!(got, model, "seed {seed}: one batch equals the model");
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed + 200);
        let b = Backend::new(kind);
        let mut shuffled = rows.clone();
        shuffled.shuffle(&mut rng);
        let cuts = rng.random_range(2..7);
        let mut batches: Vec<Vec<Order>> = shuffled.chunks(shuffled.len().div_ceil(cuts)).map(|c| c.to_vec()).collect();
        batches.push(batches[rng.random_range(0..batches.len())].clone());
        for (i, batch) in batches.iter().enumerate() {
            let name = format!("batch{i}");
            put_batch(&b, &name, batch).await;
            let s = merge(&b, &name, None).await;
            assert_eq!(s.exit_code, ExitCode::Ok, "seed {seed} batch {i}: {}", lakeswap::report::table(&s));
        }
        let live = where_keys_live(&b).await;
        assert!(live.values().all(|d| d.len() == 1), "seed {seed}: a key under two dates: {live:?}");
        let got: BTreeMap<String, Vec<u8>> = b
            .partitions()
            .await
            .into_iter()
            .filter(|(_, v)| !state(v).is_empty() || want.contains_key(&String::new()))
            .collect();
        let want_live: BTreeMap<String, Vec<u8>> = want.into_iter().filter(|(_, v)| !state(v).is_empty()).collect();
        assert_eq!(got.keys().collect::<Vec<_>>(), want_live.keys().collect::<Vec<_>>(), "seed {seed}");
        for (k, v) in &want_live {
            assert_eq!(state(&got[k]), state(v), "seed {seed}: {k}");
        }
    }
}

/// Risk: under `on_conflict = "quarantine"`, the table depends on how events are split into
/// batches. Random keys wandering between dates, with conflicts inside a date and one version
/// under two dates: one batch equals the model (a key keeps its newest version without a
/// conflict; gone when that is a delete), and any split into batches that holds each conflict
/// whole, in any order, some batches twice, gives the same bytes.
#[tokio::test(flavor = "multi_thread")]
async fn quarantine_any_split_that_holds_each_conflict_whole_gives_the_model() {
    let quarantine = "[prepare]\non_conflict = \"quarantine\"\n";
    let dates = ["2026-11-01", "2026-11-02", "2026-11-03"];
    for seed in 0..5u64 {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed + 300);
        let mut rows = wandering_stream(seed);
        let mut conflicting: Vec<Order> = Vec::new();
        for r in &rows {
            if rng.random_bool(0.15) {
                let mut other = r.clone();
                if rng.random_bool(0.5) {
                    other.cents += 1;
                } else {
                    other.date = d(dates[(dates.iter().position(|x| d(x) == r.date).unwrap() + 1) % 3]);
                }
                conflicting.push(other);
            }
        }
        rows.extend(conflicting);
        // The model: a version with two different rows is in conflict.
        let mut by_version: BTreeMap<(String, i64), Vec<&Order>> = BTreeMap::new();
        for r in &rows {
            by_version.entry((r.order_id.clone(), r.version)).or_default().push(r);
        }
        let clean: Vec<Order> =
            by_version.values().filter(|rs| rs.iter().all(|r| **r == *rs[0])).map(|rs| rs[0].clone()).collect();
        assert!(clean.len() < by_version.len(), "seed {seed}: the stream has conflicts");
        let model = latest(&clean);
        let one = Backend::new(Kind::Local);
        put_batch(&one, "all", &rows).await;
        let s = run::run(&merge_job_with(&one, "all", quarantine), &RunOptions::default()).await.unwrap();
        assert_eq!(s.exit_code, ExitCode::Ok, "seed {seed}: {}", lakeswap::report::table(&s));
        let want = one.partitions().await;
        let got: BTreeMap<String, Vec<_>> =
            want.iter().map(|(k, v)| (k.clone(), state(v))).filter(|(_, v)| !v.is_empty()).collect();
        assert_eq!(got, model, "seed {seed}: one batch equals the model");
        // Units: the rows of one key and version; shuffled, cut into batches, one applied twice.
        let mut units: Vec<Vec<Order>> = by_version.into_values().map(|rs| rs.into_iter().cloned().collect()).collect();
        units.shuffle(&mut rng);
        let cuts = rng.random_range(2..7);
        let mut batches: Vec<Vec<Order>> = units.chunks(units.len().div_ceil(cuts)).map(|c| c.concat()).collect();
        batches.push(batches[rng.random_range(0..batches.len())].clone());
        let b = Backend::new(Kind::Local);
        for (i, batch) in batches.iter().enumerate() {
            let name = format!("batch{i}");
            put_batch(&b, &name, batch).await;
            let s = run::run(&merge_job_with(&b, &name, quarantine), &RunOptions::default()).await.unwrap();
            assert_eq!(s.exit_code, ExitCode::Ok, "seed {seed} batch {i}: {}", lakeswap::report::table(&s));
        }
        let live = where_keys_live(&b).await;
        assert!(live.values().all(|d| d.len() == 1), "seed {seed}: a key under two dates: {live:?}");
        let split: BTreeMap<String, Vec<_>> =
            b.partitions().await.iter().map(|(k, v)| (k.clone(), state(v))).filter(|(_, v)| !v.is_empty()).collect();
        assert_eq!(split, model, "seed {seed}: batches equal the model");
    }
}

macro_rules! move_suite {
    ($name:ident, $kind:expr $(, $attr:meta)?) => {
        mod $name {
            use super::*;
            #[tokio::test(flavor = "multi_thread")]
            $(#[$attr])?
            async fn a_key_that_changes_date_moves() {
                super::a_key_that_changes_date_moves($kind).await
            }
            #[tokio::test(flavor = "multi_thread")]
            $(#[$attr])?
            async fn on_date_change_fail_refuses_the_batch() {
                super::on_date_change_fail_refuses_the_batch($kind).await
            }
            #[tokio::test(flavor = "multi_thread")]
            $(#[$attr])?
            async fn any_split_of_wandering_keys_gives_the_model() {
                super::any_split_of_wandering_keys_gives_the_model($kind).await
            }
        }
    };
}

move_suite!(local, Kind::Local);
move_suite!(s3, Kind::S3, ignore = "needs the S3 server that scripts/test starts (not requested)");

/// Three dates, then a batch that moves `a` from 11-01 to 11-02 and `b` from 11-02 to 11-03:
/// three partitions in one move set; 11-01 only loses keys (it is swapped last).
fn two_moves() -> (Vec<Order>, Vec<Order>) {
    let first = vec![
        order("a", 1, "2026-11-01", "USD", 1, "placed"),
        order("b", 1, "2026-11-02", "USD", 2, "placed"),
        order("c", 1, "2026-11-03", "USD", 3, "placed"),
    ];
    let second =
        vec![order("a", 2, "2026-11-02", "USD", 4, "shipped"), order("b", 2, "2026-11-03", "USD", 5, "shipped")];
    (first, second)
}

/// A crash at any store call of a merge that moves keys: every partition is old or new, the
/// move is all-or-nothing once the next run of the table has completed what was pending, and a
/// re-run converges.
#[tokio::test(flavor = "multi_thread")]
async fn a_crash_between_the_swaps_of_a_move_is_completed_by_the_next_run() {
    let (first, second) = two_moves();
    async fn seed(c: &Backend, first: &[Order], second: &[Order]) {
        put_batch(c, "b1", first).await;
        put_batch(c, "b2", second).await;
        put_batch(c, "none", &[]).await;
        merge(c, "b1", None).await;
    }
    /// A seeded table whose merge of `b2` crashed at store call `i`.
    async fn crashed_at(i: usize, first: &[Order], second: &[Order]) -> Backend {
        let c = Backend::new(Kind::Memory);
        seed(&c, first, second).await;
        let mut job = merge_job(&c, "b2");
        FaultStore::wrap_output(&mut job, Mode::CrashAt(i));
        let _ = run::run(&job, &RunOptions { lease_ttl: Duration::from_millis(150), ..Default::default() }).await;
        c
    }
    let reference = Backend::new(Kind::Memory);
    seed(&reference, &first, &second).await;
    let old = reference.partitions().await;
    let mut counted = merge_job(&reference, "b2");
    let counter = FaultStore::wrap_output(&mut counted, Mode::None);
    assert_eq!(run::run(&counted, &RunOptions::default()).await.unwrap().exit_code, ExitCode::Ok);
    let want = reference.partitions().await;
    assert_eq!(where_keys_live(&reference).await["a"], ["2026-11-02"]);
    let mut saw_pending = false;
    for i in 0..counter.calls() {
        let c = crashed_at(i, &first, &second).await;
        for (k, v) in c.partitions().await {
            assert!(old.get(&k) == Some(&v) || want.get(&k) == Some(&v), "crash at {i}: {k} is neither old nor new");
        }
        let journals = lakeswap::journal::read_all(&c.location(STATE)).await.unwrap();
        let crashed = journals.iter().find(|j| !j.pending.is_empty()).map(|j| j.run_id.clone());
        let dates = ["2026-11-01", "2026-11-02", "2026-11-03"];
        let file = |date: &str| format!("event_date={date}/part-00000.parquet");
        if crashed.is_some() {
            saw_pending = true;
            // `status` names the swaps still to do, not those the crash let through.
            let now = c.partitions().await;
            let status = lakeswap::status::status(&merge_job(&c, "none"), None).await.unwrap();
            let text = lakeswap::status::render(&status, 5);
            let line = text.lines().find(|l| l.contains("unfinished move")).unwrap_or("");
            for date in dates {
                let done = now.get(&file(date)) == want.get(&file(date));
                assert_eq!(line.contains(&format!("event_date={date}")), !done, "crash at {i}, {date}: {text}");
            }
        }
        // The next run of the table (an empty batch; one without any object, refused otherwise,
        // when a move is pending) completes what was pending: all or nothing.
        tokio::time::sleep(Duration::from_millis(200)).await;
        let batch = if crashed.is_some() && i % 2 == 0 { "nothing" } else { "none" };
        let undone = c.partitions().await;
        let s = run::run(&merge_job(&c, batch), &RunOptions { wait: true, ..Default::default() }).await.unwrap();
        assert_eq!(s.exit_code, ExitCode::Ok, "crash at {i}: {}", lakeswap::report::table(&s));
        // The swaps it completed are in its summary (the table changed there).
        if let Some(crashed) = &crashed {
            let mut completed: Vec<String> = s.completed.iter().map(|c| c.partition.clone()).collect();
            completed.sort();
            let want_completed: Vec<String> = dates
                .iter()
                .filter(|date| undone.get(&file(date)) != want.get(&file(date)))
                .map(|date| format!("event_date={date}"))
                .collect();
            assert_eq!(completed, want_completed, "crash at {i}");
            assert!(s.completed.iter().all(|c| &c.run_id == crashed), "crash at {i}");
            let shown = lakeswap::report::table(&s);
            assert_eq!(shown.matches("completed first: ").count(), completed.len(), "{shown}");
            let json: serde_json::Value = serde_json::from_str(&lakeswap::report::json(&s)).unwrap();
            assert_eq!(json["completed_moves"].as_array().map_or(0, |a| a.len()), completed.len(), "{json}");
        }
        let now = c.partitions().await;
        assert!(now == old || now == want, "crash at {i}: the move is all or nothing: {:?}", where_keys_live(&c).await);
        if let Some(crashed) = &crashed {
            // Each file of the completed move is credited to the run that made it.
            assert_eq!(now, want, "crash at {i}");
            let status = lakeswap::status::status(&merge_job(&c, "none"), None).await.unwrap();
            let text = lakeswap::status::render(&status, 5);
            assert!(!text.contains("unfinished move") && !text.contains("died holding"), "crash at {i}: {text}");
            for date in dates {
                let p = status.partitions.iter().find(|p| p.date.to_string() == date).unwrap();
                assert!(
                    p.last_run
                        .as_ref()
                        .is_some_and(|(id, a)| id == crashed && matches!(a, Action::Created | Action::Replaced)),
                    "crash at {i}, {date}: {text}"
                );
            }
        }
        let s = run::run(&merge_job(&c, "b2"), &RunOptions { wait: true, ..Default::default() }).await.unwrap();
        assert_eq!(s.exit_code, ExitCode::Ok, "crash at {i}: {}", lakeswap::report::table(&s));
        assert_eq!(c.partitions().await, want, "crash at {i}: the re-run converges");
    }
    assert!(saw_pending, "some crash fell between the swaps");

    // A crash left swaps pending, then the table was emptied by hand: the next run of the
    // table swaps none of them in (they belong to a table that is gone) and clears them.
    let mut abandoned = false;
    for i in 0..counter.calls() {
        let c = crashed_at(i, &first, &second).await;
        let journals = lakeswap::journal::read_all(&c.location(STATE)).await.unwrap();
        if journals.iter().all(|j| j.pending.is_empty()) {
            continue;
        }
        let out = c.location("out");
        for k in c.partitions().await.into_keys() {
            object_store::ObjectStoreExt::delete(&out.store, &out.child(&[&k])).await.unwrap();
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        let s = run::run(&merge_job(&c, "none"), &RunOptions { wait: true, ..Default::default() }).await.unwrap();
        assert_eq!(s.exit_code, ExitCode::Ok, "crash at {i}: {}", lakeswap::report::table(&s));
        assert!(
            c.partitions().await.is_empty(),
            "crash at {i}: a stale partition came back: {:?}",
            c.partitions().await.keys()
        );
        let journals = lakeswap::journal::read_all(&c.location(STATE)).await.unwrap();
        assert!(journals.iter().all(|j| j.pending.is_empty()), "crash at {i}: the pending swaps are cleared");
        let status = lakeswap::status::status(&merge_job(&c, "none"), None).await.unwrap();
        let text = lakeswap::status::render(&status, 5);
        assert!(!text.contains("unfinished move") && !text.contains("died holding"), "crash at {i}: {text}");
        assert!(c.objects(STATE).await.keys().all(|k| !k.starts_with("staging/")), "crash at {i}: staging removed");
        abandoned = true;
    }
    assert!(abandoned, "some crash left swaps pending");
}

/// A move killed after its gaining dates were swapped, its losing date not. Rewritten with the
/// same bytes (a restored or copied table: new e-tags), a partition is as the run saw it, so the
/// next run completes the move. Changed for real, the move cannot be completed and its keys are
/// under two dates: the next run says so, naming them (exit 1, nothing of it done), instead of
/// going on as if the table were whole; merging the batch again puts each key under one date.
#[tokio::test(flavor = "multi_thread")]
async fn a_killed_move_over_a_copied_or_changed_partition() {
    let (first, second) = two_moves();
    let file = |date: &str| format!("event_date={date}/part-00000.parquet");
    let seeded = || async {
        let c = Backend::new(Kind::Memory);
        put_batch(&c, "b1", &first).await;
        put_batch(&c, "b2", &second).await;
        put_batch(&c, "none", &[]).await;
        merge(&c, "b1", None).await;
        c
    };
    let reference = seeded().await;
    let old = reference.partitions().await;
    let mut counted = merge_job(&reference, "b2");
    let counter = FaultStore::wrap_output(&mut counted, Mode::None);
    assert_eq!(run::run(&counted, &RunOptions::default()).await.unwrap().exit_code, ExitCode::Ok);
    let want = reference.partitions().await;
    // The crash that left 11-02 and 11-03 new and 11-01 old.
    let crashed_at = |i: usize| {
        let seeded = &seeded;
        async move {
            let c = seeded().await;
            let mut job = merge_job(&c, "b2");
            FaultStore::wrap_output(&mut job, Mode::CrashAt(i));
            let _ = run::run(&job, &RunOptions { lease_ttl: Duration::from_millis(150), ..Default::default() }).await;
            tokio::time::sleep(Duration::from_millis(200)).await;
            c
        }
    };
    let mut half = None;
    for i in 0..counter.calls() {
        let now = crashed_at(i).await.partitions().await;
        if now[&file("2026-11-01")] == old[&file("2026-11-01")]
            && now[&file("2026-11-02")] == want[&file("2026-11-02")]
            && now[&file("2026-11-03")] == want[&file("2026-11-03")]
        {
            half = Some(i);
            break;
        }
    }
    let i = half.expect("a crash fell between the gaining and the losing swaps");
    let wait = RunOptions { wait: true, ..Default::default() };

    // Every committed object rewritten with its own bytes: the move is completed.
    let c = crashed_at(i).await;
    let out = c.location("out");
    for (k, v) in c.objects("out").await {
        object_store::ObjectStoreExt::put(&out.store, &out.child(&[&k]), v.into()).await.unwrap();
    }
    let s = run::run(&merge_job(&c, "none"), &wait).await.unwrap();
    assert_eq!(s.exit_code, ExitCode::Ok, "{}", lakeswap::report::table(&s));
    assert_eq!(c.partitions().await, want, "the move is completed over a byte-identical copy");

    // The table restored from a backup taken before the killed run (the gaining dates too, or
    // only they): the move is abandoned, nothing lost, no key under two dates.
    for whole in [true, false] {
        let c = crashed_at(i).await;
        let out = c.location("out");
        for (k, v) in old.iter().filter(|(k, _)| whole || !k.starts_with("event_date=2026-11-01")) {
            object_store::ObjectStoreExt::put(&out.store, &out.child(&[k]), v.clone().into()).await.unwrap();
        }
        let s = run::run(&merge_job(&c, "none"), &wait).await.unwrap();
        assert_eq!(s.exit_code, ExitCode::Ok, "{}", lakeswap::report::table(&s));
        assert!(s.completed.is_empty(), "{}", lakeswap::report::table(&s));
        assert_eq!(c.partitions().await, old, "whole: {whole}: the table as restored");
    }

    // 11-01 replaced by another table's 11-01 (which also holds `d`): `a` is under two dates.
    let other = seeded().await;
    put_batch(&other, "b3", &[order("d", 1, "2026-11-01", "USD", 9, "placed")]).await;
    merge(&other, "b3", None).await;
    let c = crashed_at(i).await;
    let out = c.location("out");
    for (k, v) in other.objects("out").await.into_iter().filter(|(k, _)| k.starts_with("event_date=2026-11-01")) {
        object_store::ObjectStoreExt::put(&out.store, &out.child(&[&k]), v.into()).await.unwrap();
    }
    let before = c.partitions().await;
    let e = run::run(&merge_job(&c, "none"), &wait).await.unwrap_err();
    assert_eq!(e.exit_code(), ExitCode::PartialFailure, "{e}");
    let text = e.to_string();
    for says in ["1 key(s) it moved may now be under two dates", "a under 2026-11-01 and 2026-11-02", "again"] {
        assert!(text.contains(says), "{says}: {text}");
    }
    assert_eq!(c.partitions().await, before, "nothing of the run was done");
    assert_eq!(where_keys_live(&c).await["a"], ["2026-11-01", "2026-11-02"]);
    // The move is recorded abandoned: the next run goes ahead, and says nothing is pending.
    let s = run::run(&merge_job(&c, "none"), &wait).await.unwrap();
    assert_eq!(s.exit_code, ExitCode::Ok, "{}", lakeswap::report::table(&s));
    let status = lakeswap::status::status(&merge_job(&c, "none"), None).await.unwrap();
    assert!(!lakeswap::status::render(&status, 5).contains("unfinished move"));
    // Merging the batch again moves `a` off its older date.
    let s = run::run(&merge_job(&c, "b2"), &wait).await.unwrap();
    assert_eq!(s.exit_code, ExitCode::Ok, "{}", lakeswap::report::table(&s));
    let at = where_keys_live(&c).await;
    assert_eq!(
        (&at["a"][..], &at["b"][..], &at["d"][..]),
        (&["2026-11-02".to_string()][..], &["2026-11-03".to_string()][..], &["2026-11-01".to_string()][..]),
        "{at:?}"
    );
}

/// A journal recording pending swaps that cannot be read (damaged by hand, a bad restore) is
/// never taken for no journal: the next run, gc and status refuse naming it, the staged files
/// stay, and once it is restored the next run completes the move.
#[tokio::test(flavor = "multi_thread")]
async fn an_unreadable_journal_of_a_killed_move_stops_runs_and_gc() {
    let first = vec![order("a", 1, "2026-11-01", "USD", 1, "placed"), order("b", 1, "2026-11-02", "USD", 2, "placed")];
    let second =
        vec![order("a", 2, "2026-11-02", "USD", 4, "shipped"), order("b", 2, "2026-11-01", "USD", 5, "shipped")];
    let mut tried = 0;
    for i in 0..200 {
        let c = Backend::new(Kind::Memory);
        put_batch(&c, "b1", &first).await;
        put_batch(&c, "b2", &second).await;
        put_batch(&c, "none", &[]).await;
        merge(&c, "b1", None).await;
        let mut job = merge_job(&c, "b2");
        FaultStore::wrap_output(&mut job, Mode::CrashAt(i));
        let _ = run::run(&job, &RunOptions { lease_ttl: Duration::from_millis(150), ..Default::default() }).await;
        let state = c.location(STATE);
        let journals = lakeswap::journal::read_all(&state).await.unwrap();
        let Some(j) = journals.iter().find(|j| !j.pending.is_empty()) else { continue };
        let path = state.child(&["runs", &format!("{}.json", j.run_id)]);
        let whole = object_store::ObjectStoreExt::get(&state.store, &path).await.unwrap().bytes().await.unwrap();
        object_store::ObjectStoreExt::put(&state.store, &path, whole.slice(..whole.len() / 2).into()).await.unwrap();
        let before =
            (c.partitions().await, c.objects(STATE).await.into_keys().filter(|k| k.starts_with("staging/")).count());
        tokio::time::sleep(Duration::from_millis(200)).await;
        let refused = |e: lakeswap::Error| {
            assert_eq!(e.exit_code(), ExitCode::Usage, "{e}");
            assert!(
                e.to_string().contains(&format!("{}.json", j.run_id)) && e.to_string().contains("cannot be read"),
                "{e}"
            );
        };
        refused(run::run(&merge_job(&c, "none"), &RunOptions { wait: true, ..Default::default() }).await.unwrap_err());
        let gc = lakeswap::gc::gc(&c.location("out"), &state, "event_date", &Default::default()).await;
        refused(gc.unwrap_err());
        refused(lakeswap::status::status(&merge_job(&c, "none"), None).await.unwrap_err());
        let after =
            (c.partitions().await, c.objects(STATE).await.into_keys().filter(|k| k.starts_with("staging/")).count());
        assert_eq!(after, before, "crash at {i}: nothing touched, the staged files kept");
        // Restored, the journal's move is completed by the next run.
        object_store::ObjectStoreExt::put(&state.store, &path, whole.into()).await.unwrap();
        let s = run::run(&merge_job(&c, "none"), &RunOptions { wait: true, ..Default::default() }).await.unwrap();
        assert_eq!(s.exit_code, ExitCode::Ok, "{}", lakeswap::report::table(&s));
        let at = where_keys_live(&c).await;
        assert!(at["a"].len() == 1 && at["b"].len() == 1, "crash at {i}: each key under one date: {at:?}");
        tried += 1;
        if tried == 3 {
            break;
        }
    }
    assert!(tried > 0, "no crash left swaps pending");
    // In a local folder, a journal the listing leaves out (a dangling link, a pipe) is no
    // journal skipped either.
    let c = Backend::new(Kind::Local);
    put_batch(&c, "b1", &first).await;
    put_batch(&c, "none", &[]).await;
    merge(&c, "b1", None).await;
    let runs = std::path::PathBuf::from(c.url(STATE)).join("runs");
    let journal = std::fs::read_dir(&runs).unwrap().next().unwrap().unwrap().path();
    std::fs::remove_file(&journal).unwrap();
    std::os::unix::fs::symlink(runs.join("gone"), &journal).unwrap();
    let e = run::run(&merge_job(&c, "none"), &RunOptions::default()).await.unwrap_err();
    assert_eq!(e.exit_code(), ExitCode::Usage, "{e}");
    assert!(e.to_string().contains("not a file that can be read"), "{e}");
}

// ---------------------------------------------------------------------------------------
// Tombstones stay out of the footer, and expire when told.

/// 3 M inserts, then 3 M deletes: a zero-row partition whose footer stays small and which
/// pyarrow reads, alone and as a data set.
#[tokio::test(flavor = "multi_thread")]
async fn three_million_deletes_keep_the_footer_small() {
    use arrow::array::{Date32Array, Decimal128Array, Int64Array, StringArray};
    let b = Backend::new(Kind::Local);
    let n = 3_000_000usize;
    let make = |version: i64, status: &str| {
        let ids = StringArray::from_iter_values((0..n).map(|i| format!("ord-{i:09}")));
        let cols: Vec<arrow::array::ArrayRef> = vec![
            std::sync::Arc::new(ids),
            std::sync::Arc::new(Int64Array::from(vec![version; n])),
            std::sync::Arc::new(Date32Array::from(vec![lakeswap::dates::to_days(d("2026-11-01")); n])),
            std::sync::Arc::new(StringArray::from_iter_values((0..n).map(|i| format!("cus-{}", i % 1000)))),
            std::sync::Arc::new(StringArray::from_iter_values(std::iter::repeat_n("USD", n))),
            std::sync::Arc::new(Decimal128Array::from(vec![100i128; n]).with_precision_and_scale(12, 2).unwrap()),
            std::sync::Arc::new(StringArray::from_iter_values(std::iter::repeat_n(status, n))),
        ];
        arrow::array::RecordBatch::try_new(schema(), cols).unwrap()
    };
    b.put("b1", "x.parquet", parquet_bytes(&make(1, "placed"))).await;
    assert_eq!(merge(&b, "b1", None).await.exit_code, ExitCode::Ok);
    b.put("b2", "x.parquet", parquet_bytes(&make(2, "deleted"))).await;
    let s = merge(&b, "b2", None).await;
    assert_eq!(s.exit_code, ExitCode::Ok, "{}", lakeswap::report::table(&s));
    assert_eq!(s.partitions[0].merge.unwrap().deleted, n as u64);
    let file = b.get("out", "event_date=2026-11-01/part-00000.parquet").await.unwrap();
    let footer = u32::from_le_bytes(file[file.len() - 8..file.len() - 4].try_into().unwrap()) as usize;
    assert!(footer < 64 * 1024, "footer of {footer} bytes");
    let script = "import sys, pyarrow.parquet as pq, pyarrow.dataset as ds\n\
        t = pq.read_table(sys.argv[1])\n\
        d = ds.dataset(sys.argv[2], format='parquet', partitioning='hive').to_table()\n\
        print(t.num_rows, d.num_rows)";
    let root = b.url("out");
    let o = std::process::Command::new("python3")
        .args(["-c", script, &format!("{root}/event_date=2026-11-01/part-00000.parquet"), &root])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "0 0");
    // The deletes still hold: an older version does not bring a key back.
    b.put("b3", "x.parquet", parquet_bytes(&make(1, "placed").slice(0, 10))).await;
    let s = merge(&b, "b3", None).await;
    assert_eq!(s.partitions[0].merge.unwrap().ignored_older, 10);
}

/// With `tombstone_retention`, tombstones whose version (a timestamp) is older than the
/// retention are dropped at the next write of their partition — and an older version arriving
/// after that can bring the key back, as the README says.
#[tokio::test(flavor = "multi_thread")]
async fn tombstones_older_than_the_retention_are_dropped() {
    use arrow::array::TimestampMicrosecondArray;
    let b = Backend::new(Kind::Local);
    let now = chrono::Utc::now();
    let at = |days: i64| (now - chrono::Duration::days(days)).timestamp_micros();
    // source_version as a timestamp (microseconds, UTC).
    let rows = |list: &[(&str, i64, &str)]| {
        let orders: Vec<Order> = list.iter().map(|(k, _, st)| order(k, 0, "2026-11-01", "USD", 1, st)).collect();
        let base = batch(&orders);
        let ts =
            TimestampMicrosecondArray::from(list.iter().map(|(_, v, _)| *v).collect::<Vec<_>>()).with_timezone("UTC");
        let mut cols = base.columns().to_vec();
        cols[1] = std::sync::Arc::new(ts);
        let mut fields: Vec<arrow::datatypes::Field> =
            base.schema().fields().iter().map(|f| f.as_ref().clone()).collect();
        fields[1] = arrow::datatypes::Field::new(
            "source_version",
            arrow::datatypes::DataType::Timestamp(arrow::datatypes::TimeUnit::Microsecond, Some("UTC".into())),
            true,
        );
        arrow::array::RecordBatch::try_new(std::sync::Arc::new(arrow::datatypes::Schema::new(fields)), cols).unwrap()
    };
    let with = "[merge]\ntombstone_retention = \"30d\"\n";
    let go = |name: &'static str, batch: arrow::array::RecordBatch| {
        let b = &b;
        async move {
            b.put(name, "x.parquet", parquet_bytes(&batch)).await;
            let s = run::run(&merge_job_with(b, name, with), &RunOptions::default()).await.unwrap();
            assert_eq!(s.exit_code, ExitCode::Ok, "{}", lakeswap::report::table(&s));
            s
        }
    };
    go("b1", rows(&[("old", at(60), "placed"), ("new", at(60), "placed"), ("keep", at(60), "placed")])).await;
    // A write of the partition drops tombstones older than 30 days: here the delete of `old`
    // is older than that already (the row goes, its tombstone is not kept).
    let s = go("b2", rows(&[("old", at(40), "deleted"), ("new", at(5), "deleted")])).await;
    let m = s.partitions[0].merge.unwrap();
    assert_eq!((m.deleted, m.expired_tombstones), (2, 1));
    let s = go("b3", rows(&[("keep", at(1), "shipped")])).await;
    assert_eq!(s.partitions[0].merge.unwrap().expired_tombstones, 0);
    let s = go("b4", rows(&[("old", at(50), "placed"), ("new", at(10), "placed")])).await;
    let m = s.partitions[0].merge.unwrap();
    assert_eq!((m.inserted, m.ignored_older), (1, 1), "the key whose tombstone expired comes back; the other does not");
    // A retention on an integer version is refused before anything runs.
    put_batch(&b, "b5", &[order("x", 1, "2026-11-01", "USD", 1, "placed")]).await;
    let e = run::run(&merge_job_with(&b, "b5", with), &RunOptions::default()).await.unwrap_err().to_string();
    assert!(e.contains("merge.tombstone_retention") && e.contains("date or a timestamp"), "{e}");
}

/// Risk: a merge batch whose key reads as another type than the table's (int32 beside int64)
/// is let through by `--schema-change rebuild`; its keys then miss their stored rows, and one
/// key is held under two dates with exit 0. Or its version does (a timestamp in ms, then in
/// µs; an integer, then a date): the tombstones keep the old type's integers, and an older
/// row brings a deleted key back. Refused before anything is done (exit 2); an integer version
/// widened stays an integer, and is accepted.
#[test]
fn a_merge_tables_key_and_version_keep_their_types() {
    use arrow::array::{ArrayRef, Date32Array, Int32Array, Int64Array, RecordBatch};
    use std::sync::Arc;
    let lake = Lake::new();
    let batch = |name: &str, k: ArrayRef, v: i64, day: i32| {
        let n = k.len();
        let dir = lake.dir.path().join(name);
        std::fs::create_dir_all(&dir).unwrap();
        let version: ArrayRef = match name {
            "b3" => Arc::new(Date32Array::from(vec![v as i32; n])),
            _ => Arc::new(Int64Array::from(vec![v; n])),
        };
        let b = RecordBatch::try_from_iter([
            ("k", k),
            ("v", version),
            ("event_date", Arc::new(Date32Array::from(vec![day; n])) as ArrayRef),
        ])
        .unwrap();
        write_parquet(&dir.join("p.parquet"), &b);
        let toml = format!(
            "[job]\nname = \"m\"\nkind = \"merge\"\n\n[input]\nurl = \"{}\"\nformat = \"parquet\"\n\n\
             [identity]\nkey = [\"k\"]\nversion = \"v\"\n\n[partition]\ncolumn = \"event_date\"\n\n[output]\nurl = \"{}\"\n",
            dir.display(),
            lake.output().display()
        );
        let cfg = lake.dir.path().join(format!("{name}.toml"));
        std::fs::write(&cfg, toml).unwrap();
        cfg
    };
    let b1 = batch("b1", Arc::new(Int64Array::from(vec![1001, 1002])), 1, 20_758);
    let o = cli(&["run", "--config", b1.to_str().unwrap()], lake.dir.path());
    assert!(o.status.success(), "{}", text(&o));
    let before = lake.snapshot();
    let b2 = batch("b2", Arc::new(Int32Array::from(vec![1001])), 2, 20_759);
    // Without a rebuild too: the refusal never advises one, which would be refused.
    let o = cli(&["run", "--config", b2.to_str().unwrap()], lake.dir.path());
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        text(&o).contains("keeps its type") && !text(&o).contains("run with --schema-change rebuild"),
        "{}",
        text(&o)
    );
    let o = cli(&["run", "--config", b2.to_str().unwrap(), "--schema-change", "rebuild"], lake.dir.path());
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        text(&o).contains("key column `k` as Int32 where the table") && text(&o).contains("holds Int64"),
        "{}",
        text(&o)
    );
    assert_eq!(lake.snapshot(), before, "nothing was done");
    let b3 = batch("b3", Arc::new(Int64Array::from(vec![1001])), 2, 20_759);
    let o = cli(&["run", "--config", b3.to_str().unwrap(), "--schema-change", "rebuild"], lake.dir.path());
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("version column `v` as Date32 where the table"), "{}", text(&o));
    assert_eq!(lake.snapshot(), before, "nothing was done");
}

/// Risk: a CSV merge whose batches type an undeclared column by their values (`10.5` a
/// float, `11` an integer): the refusal advised only a rebuild, and the rebuild failed on the
/// stored `10.5` as a store error (exit 1, retried for ever). The refusal names the
/// declaration that keeps one type; the rebuild fails as the data problem it is (exit 3).
#[test]
fn a_csv_merge_whose_batches_infer_other_types_is_told_to_declare_them() {
    let lake = Lake::new();
    let batch = |name: &str, rows: &str, schema: &str| {
        let dir = lake.dir.path().join(name);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("a.csv"), format!("id,v,event_date,amount\n{rows}")).unwrap();
        let toml = format!(
            "[job]\nname = \"m\"\nkind = \"merge\"\n\n[input]\nurl = \"{}\"\nformat = \"csv\"\n{schema}\n\n\
             [identity]\nkey = [\"id\"]\nversion = \"v\"\n\n[partition]\ncolumn = \"event_date\"\n\n[output]\nurl = \"{}\"\n",
            dir.display(),
            lake.output().display()
        );
        let cfg = lake.dir.path().join(format!("{name}.toml"));
        std::fs::write(&cfg, toml).unwrap();
        cfg
    };
    let b1 = batch("b1", "1,1,2026-11-01,10.5\n2,1,2026-11-01,3.25\n", "");
    let o = cli(&["run", "--config", b1.to_str().unwrap()], lake.dir.path());
    assert!(o.status.success(), "{}", text(&o));
    let before = lake.snapshot();
    let b2 = batch("b2", "1,2,2026-11-01,11\n3,1,2026-11-01,4\n", "");
    let o = cli(&["run", "--config", b2.to_str().unwrap()], lake.dir.path());
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("declare it in [input.schema] as the table has it"), "{}", text(&o));
    let o = cli(&["run", "--config", b2.to_str().unwrap(), "--schema-change", "rebuild"], lake.dir.path());
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    assert!(text(&o).contains("10.5 does not convert exactly") && text(&o).contains("[input.schema]"), "{}", text(&o));
    assert_eq!(lake.snapshot(), before, "the table is as it was");
    let b2 = batch("b2", "1,2,2026-11-01,11\n3,1,2026-11-01,4\n", "schema = { amount = \"float64\" }");
    let o = cli(&["run", "--config", b2.to_str().unwrap()], lake.dir.path());
    assert!(o.status.success(), "{}", text(&o));
}

/// Risk: a merged table rebuilt with a column that was a timestamp now an integer (epoch
/// seconds from a new producer), or the reverse: the stored values were converted through
/// the engine's epoch (`2026-11-01 10:00` became 1793527200000000, microseconds beside the new
/// seconds; 1762000000 seconds became 1970-01-01 00:29:22), exit 0. A number is no time and a
/// time no number without a unit: the rebuild fails the date (exit 3), the table as it was.
#[test]
fn a_rebuild_never_reads_times_as_numbers_or_numbers_as_times() {
    use arrow::array::{ArrayRef, Date32Array, Int64Array, RecordBatch, TimestampMicrosecondArray};
    use std::sync::Arc;
    for (first, second) in [("time", "number"), ("number", "time")] {
        let lake = Lake::new();
        let batch = |name: &str, id: i64, ts: &str| {
            let dir = lake.dir.path().join(name);
            std::fs::create_dir_all(&dir).unwrap();
            let ts: ArrayRef = match ts {
                "time" => Arc::new(TimestampMicrosecondArray::from(vec![1_793_527_200_000_000])),
                _ => Arc::new(Int64Array::from(vec![1_762_000_000])),
            };
            let b = RecordBatch::try_from_iter([
                ("id", Arc::new(Int64Array::from(vec![id])) as ArrayRef),
                ("v", Arc::new(Int64Array::from(vec![1])) as ArrayRef),
                ("event_date", Arc::new(Date32Array::from(vec![20_758])) as ArrayRef),
                ("ts", ts),
            ])
            .unwrap();
            write_parquet(&dir.join("p.parquet"), &b);
            let toml = format!(
                "[job]\nname = \"m\"\nkind = \"merge\"\n\n[input]\nurl = \"{}\"\nformat = \"parquet\"\n\n\
                 [identity]\nkey = [\"id\"]\nversion = \"v\"\n\n[partition]\ncolumn = \"event_date\"\n\n[output]\nurl = \"{}\"\n",
                dir.display(),
                lake.output().display()
            );
            let cfg = lake.dir.path().join(format!("{name}.toml"));
            std::fs::write(&cfg, toml).unwrap();
            cfg
        };
        let b1 = batch("b1", 1, first);
        let o = cli(&["run", "--config", b1.to_str().unwrap()], lake.dir.path());
        assert!(o.status.success(), "{}", text(&o));
        let before = lake.snapshot();
        let b2 = batch("b2", 2, second);
        let o = cli(&["run", "--config", b2.to_str().unwrap(), "--schema-change", "rebuild"], lake.dir.path());
        assert_eq!(o.status.code(), Some(3), "{first} then {second}: {}", text(&o));
        let said = if first == "time" { "holds times where Int64 holds numbers" } else { "holds numbers where" };
        assert!(text(&o).contains(said) && text(&o).contains("`ts`"), "{first} then {second}: {}", text(&o));
        assert_eq!(lake.snapshot(), before, "the table is as it was");
    }
}

// ---------------------------------------------------------------------------------------
// A date that fails keeps the table whole: one date per key, moves all or nothing, no row lost.

fn action_of(s: &lakeswap::RunSummary, day: &str) -> Option<Action> {
    s.partitions.iter().find(|p| p.date == d(day)).map(|p| p.action)
}

/// Risk: a date of the batch fails early — a conflict inside the batch, or with a stored row
/// under another date — and the other dates skip the version guard against the keys stored
/// under it: an older version (or a newer one, which would have to move the key out of the
/// failed date) is committed beside the stored row, one key under two dates, with exit 3. A
/// date holding a key stored under a failed date fails with it; an unrelated date commits.
#[tokio::test(flavor = "multi_thread")]
async fn a_failed_date_still_guards_the_keys_stored_under_it() {
    for (version, cause) in [(1, "in the batch"), (5, "in the batch"), (1, "stored"), (5, "stored")] {
        let b = Backend::new(Kind::Local);
        let seed = [order("k2", 3, "2026-11-03", "USD", 2, "placed"), order("k5", 1, "2026-11-01", "USD", 5, "placed")];
        put_batch(&b, "b1", &seed).await;
        assert_eq!(merge(&b, "b1", None).await.exit_code, ExitCode::Ok);
        let before = b.partitions().await;
        let mut rows = vec![
            order("k2", version, "2026-11-02", "USD", 2, "placed"),
            order("k9", 1, "2026-11-04", "USD", 9, "placed"),
        ];
        match cause {
            // One version of k7 with two payloads, both under 11-03.
            "in the batch" => rows.extend([
                order("k7", 1, "2026-11-03", "USD", 1, "placed"),
                order("k7", 1, "2026-11-03", "USD", 2, "placed"),
            ]),
            // The stored version of k5 (under 11-01), under 11-03.
            _ => rows.push(order("k5", 1, "2026-11-03", "USD", 6, "placed")),
        }
        put_batch(&b, "b2", &rows).await;
        let s = merge(&b, "b2", None).await;
        let table = lakeswap::report::table(&s);
        let case = format!("k2 v{version}, 11-03 failing {cause}");
        assert_eq!(s.exit_code, ExitCode::DataContract, "{case}: {table}");
        assert_eq!(action_of(&s, "2026-11-03"), Some(Action::Failed), "{case}: {table}");
        assert_eq!(action_of(&s, "2026-11-02"), Some(Action::Failed), "{case}: {table}");
        let e = s.partitions.iter().find(|p| p.date == d("2026-11-02")).unwrap().error.clone().unwrap();
        assert!(e.contains("stored under 2026-11-03"), "{case}: {e}");
        assert_eq!(action_of(&s, "2026-11-04"), Some(Action::Created), "{case}: an unrelated date commits: {table}");
        let live = where_keys_live(&b).await;
        assert_eq!(live["k2"], ["2026-11-03"], "{case}: {live:?}");
        assert!(live.values().all(|d| d.len() == 1), "{case}: a key under two dates: {live:?}");
        let mut after = b.partitions().await;
        assert!(after.remove("event_date=2026-11-04/part-00000.parquet").is_some());
        assert_eq!(after, before, "{case}: nothing else written, no 11-02 created");
        // A later, clean batch finds the table whole.
        put_batch(&b, "b3", &[order("k8", 1, "2026-11-05", "USD", 8, "placed")]).await;
        assert_eq!(merge(&b, "b3", None).await.exit_code, ExitCode::Ok, "{case}");
        assert_eq!(where_keys_live(&b).await["k2"], ["2026-11-03"], "{case}");
    }
}

/// Risk: a key moving between two dates is half-applied when one side fails while it is merged
/// (a conflict with its own stored rows, found after the moves were decided): the key is lost
/// when the date it moves to fails, under both dates when the date it leaves fails. Both sides
/// fail and keep their files; an unrelated date commits; the fixed batch then moves the key.
#[tokio::test(flavor = "multi_thread")]
async fn a_move_whose_other_side_fails_while_merged_writes_neither() {
    for target_fails in [true, false] {
        let case = if target_fails { "the date gaining the key fails" } else { "the date losing it fails" };
        let b = Backend::new(Kind::Local);
        let seed = [
            order("k1", 1, "2026-11-01", "USD", 10, "placed"),
            order("k2", 1, "2026-11-01", "USD", 20, "placed"),
            order("k3", 1, "2026-11-02", "USD", 30, "placed"),
        ];
        put_batch(&b, "b1", &seed).await;
        assert_eq!(merge(&b, "b1", None).await.exit_code, ExitCode::Ok);
        let before = b.partitions().await;
        let moving = order("k1", 2, "2026-11-02", "USD", 11, "shipped");
        // The same version as a stored row, another payload: under 11-02, or under 11-01.
        let conflict = if target_fails {
            order("k3", 1, "2026-11-02", "USD", 99, "placed")
        } else {
            order("k2", 1, "2026-11-01", "USD", 99, "placed")
        };
        put_batch(&b, "b2", &[moving.clone(), conflict, order("k9", 1, "2026-11-04", "USD", 9, "placed")]).await;
        let s = merge(&b, "b2", None).await;
        let table = lakeswap::report::table(&s);
        assert_eq!(s.exit_code, ExitCode::DataContract, "{case}: {table}");
        assert_eq!(action_of(&s, "2026-11-01"), Some(Action::Failed), "{case}: {table}");
        assert_eq!(action_of(&s, "2026-11-02"), Some(Action::Failed), "{case}: {table}");
        assert_eq!(action_of(&s, "2026-11-04"), Some(Action::Created), "{case}: {table}");
        let live = where_keys_live(&b).await;
        assert_eq!(live["k1"], ["2026-11-01"], "{case}: the key stays where it was: {live:?}");
        let mut after = b.partitions().await;
        assert!(after.remove("event_date=2026-11-04/part-00000.parquet").is_some());
        assert_eq!(after, before, "{case}: both sides untouched");
        let journals = lakeswap::journal::read_all(&b.location(STATE)).await.unwrap();
        assert!(journals.iter().all(|j| j.moves.is_empty() && j.pending.is_empty()), "{case}: no move recorded");
        // Without the conflict, the key moves.
        put_batch(&b, "b3", &[moving]).await;
        let s = merge(&b, "b3", None).await;
        assert_eq!(s.exit_code, ExitCode::Ok, "{case}: {}", lakeswap::report::table(&s));
        let live = where_keys_live(&b).await;
        assert_eq!(live["k1"], ["2026-11-02"], "{case}: {live:?}");
        assert!(live.values().all(|d| d.len() == 1), "{case}: {live:?}");
    }
}

/// Risk: with `on_conflict = "quarantine"`, a row conflicting with a stored row is neither kept
/// nor set aside when its partition ends up unchanged (the stored row's date) or untouched
/// (another date, where it creates nothing) — and under another date it is not even counted.
/// The row is set aside and counted either way; the table does not change.
#[tokio::test(flavor = "multi_thread")]
async fn quarantine_sets_rows_aside_when_their_partition_does_not_change() {
    use arrow::array::AsArray;
    for (date, action) in [("2026-11-01", Action::Unchanged), ("2026-11-03", Action::Untouched)] {
        let b = Backend::new(Kind::Local);
        // Seeded by the same config: a partition whose rows stay is unchanged byte for byte.
        let quarantine = "[prepare]\non_conflict = \"quarantine\"\n";
        let seed = [order("a", 1, "2026-11-01", "USD", 100, "placed"), order("b", 1, "2026-11-01", "USD", 5, "placed")];
        put_batch(&b, "b1", &seed).await;
        run::run(&merge_job_with(&b, "b1", quarantine), &RunOptions::default()).await.unwrap();
        let before = b.partitions().await;
        // Key b, version 1, is stored under 11-01 with 5 cents.
        put_batch(&b, "b2", &[order("b", 1, date, "USD", 6, "placed")]).await;
        let job = merge_job_with(&b, "b2", quarantine);
        let s = run::run(&job, &RunOptions::default()).await.unwrap();
        let table = lakeswap::report::table(&s);
        assert_eq!(s.exit_code, ExitCode::Ok, "{date}: {table}");
        assert_eq!(b.partitions().await, before, "{date}: the stored row stays, nothing is created");
        assert_eq!(actions(&s), [action], "{date}: {table}");
        let p = &s.partitions[0];
        assert_eq!((p.merge.unwrap().conflicts, p.counts.unwrap().quarantined_rows), (1, 1), "{date}: {table}");
        assert_eq!(lakeswap::report::quarantined_now(&s), 1, "{date}");
        assert!(table.contains("1 conflicting row(s) set aside"), "{date}: {table}");
        // `status` names them too, under the run, whatever became of their date.
        let status = lakeswap::status::status(&job, None).await.unwrap();
        let shown = lakeswap::status::render(&status, 5);
        let line = format!("1 conflicting row(s) set aside under quarantine/{}/", s.run_id);
        assert!(shown.contains(&line), "{date}: {shown}");
        let q: Vec<(String, Vec<u8>)> =
            b.objects(STATE).await.into_iter().filter(|(k, _)| k.starts_with("quarantine/")).collect();
        let names: Vec<&String> = q.iter().map(|x| &x.0).collect();
        assert_eq!(q.len(), 1, "{date}: the conflicting row is set aside: {names:?}");
        assert!(q[0].0.ends_with(&format!("event_date={date}/part-00000.parquet")), "{}", q[0].0);
        let file = bytes::Bytes::from(q[0].1.clone());
        let r = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file).unwrap().build().unwrap();
        let rows: Vec<arrow::array::RecordBatch> = r.map(|b| b.unwrap()).collect();
        assert_eq!(rows.iter().map(|b| b.num_rows()).sum::<usize>(), 1, "{date}");
        let id = rows[0].column_by_name("order_id").unwrap().as_string::<i32>().value(0).to_string();
        let amount = rows[0].column_by_name("amount").unwrap();
        let cents = amount.as_primitive::<arrow::datatypes::Decimal128Type>().value(0);
        assert_eq!((id.as_str(), cents), ("b", 6), "{date}: the incoming row, as it came");
    }
}

/// Risk: a Parquet batch with two columns of one name had the second read as the first: the
/// merge committed rows that never existed (two different rows taken for exact duplicates).
#[tokio::test(flavor = "multi_thread")]
async fn a_batch_with_two_columns_of_one_name_is_refused() {
    let b = Backend::new(Kind::Local);
    seed_a_and_b(&b).await;
    let before = b.partitions().await;
    let rows = [order("c", 1, "2026-11-01", "USD", 1, "placed"), order("c", 1, "2026-11-01", "USD", 1, "placed")];
    let two = with_second_column(&batch(&rows), "status", vec!["placed", "shipped"]);
    b.put("b2", "batch.parquet", parquet_bytes(&two)).await;
    // Refused as the batch is planned, before any date is read.
    let err = match run::run(&merge_job(&b, "b2"), &RunOptions::default()).await {
        Err(e) => {
            assert_eq!(e.exit_code(), ExitCode::DataContract, "{e}");
            e.to_string()
        }
        Ok(s) => panic!("accepted: {}", lakeswap::report::table(&s)),
    };
    assert!(err.contains("batch.parquet") && err.contains("column `status`: the object has two columns"), "{err}");
    assert_eq!(b.partitions().await, before, "the table as it was");
}

/// Risk: the report's `conflicts` counted only conflicts with stored rows: two keys in
/// conflict within the batch showed `conflicts 0` beside four rows set aside.
#[tokio::test(flavor = "multi_thread")]
async fn conflicts_within_the_batch_are_counted_as_conflicts() {
    let b = Backend::new(Kind::Local);
    let rows = [
        order("c", 1, "2026-11-01", "USD", 1, "placed"),
        order("c", 1, "2026-11-01", "USD", 2, "placed"),
        order("d", 1, "2026-11-01", "USD", 3, "placed"),
        order("d", 1, "2026-11-01", "USD", 4, "placed"),
        order("e", 1, "2026-11-01", "USD", 5, "placed"),
    ];
    put_batch(&b, "b1", &rows).await;
    let job = merge_job_with(&b, "b1", "[prepare]\non_conflict = \"quarantine\"\n");
    let s = run::run(&job, &RunOptions::default()).await.unwrap();
    let table = lakeswap::report::table(&s);
    assert_eq!(s.exit_code, ExitCode::Ok, "{table}");
    let p = &s.partitions[0];
    let m = p.merge.unwrap();
    assert_eq!((m.inserted, m.conflicts, p.counts.unwrap().quarantined_rows), (1, 4, 4), "{table}");
}

/// Risk: a merge batch's dates read in other shapes than the run's — a column only on a later
/// date (dropped without a word), the columns in another order (refused as a schema change, by
/// which file sorts first), text written as `large_string` (refused as another type). Every
/// date's columns are taken by name, in any order and text encoding; a column the run's schema
/// lacks fails its date (exit 3), naming it.
#[test]
fn a_merge_dates_columns_are_the_runs_by_name_in_any_order_and_text_encoding() {
    use arrow::array::{ArrayRef, Date32Array, Int64Array, LargeStringArray, RecordBatch};
    use std::sync::Arc;
    let lake = Lake::new();
    let config = |name: &str, format: &str| text_merge_config(&lake, name, format, "");
    let files = |name: &str, f: &[(&str, &str)]| write_files(&lake, name, f);
    let run = |cfg: std::path::PathBuf| cli(&["run", "--config", cfg.to_str().unwrap()], lake.dir.path());
    let val = |date: &str| column_text(&lake, date, "val");
    files("b1", &[("a.csv", "id,v,val,event_date\n1,1,x,2026-11-01\n")]);
    let o = run(config("b1", "csv"));
    assert!(o.status.success(), "{}", text(&o));
    // The same columns in another order.
    files("b2", &[("a.csv", "event_date,val,v,id\n2026-11-01,y,2,1\n")]);
    let o = run(config("b2", "csv"));
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(val("2026-11-01"), ["y"]);
    // Text as large_string.
    let dir = lake.dir.path().join("b3");
    std::fs::create_dir_all(&dir).unwrap();
    let b = RecordBatch::try_from_iter([
        ("id", Arc::new(Int64Array::from(vec![1])) as ArrayRef),
        ("v", Arc::new(Int64Array::from(vec![3])) as ArrayRef),
        ("val", Arc::new(LargeStringArray::from(vec!["z"])) as ArrayRef),
        ("event_date", Arc::new(Date32Array::from(vec![20_758])) as ArrayRef),
    ])
    .unwrap();
    write_parquet(&dir.join("p.parquet"), &b);
    let o = run(config("b3", "parquet"));
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(val("2026-11-01"), ["z"]);
    // A column only on a later date of the batch.
    files(
        "b4",
        &[
            ("a.csv", "id,v,val,event_date\n2,1,p,2026-11-02\n"),
            ("b.csv", "id,v,val,extra,event_date\n3,1,q,E,2026-11-03\n"),
        ],
    );
    let o = run(config("b4", "csv"));
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    assert!(
        text(&o).contains("2026-11-03") && text(&o).contains("`extra` (Utf8) is not in the run's schema"),
        "{}",
        text(&o)
    );
    assert_eq!(val("2026-11-02"), ["p"]);
    assert!(!lake.partition_file("2026-11-03").exists());
    // A column of the run that a date's objects lack is null there.
    files(
        "b5",
        &[("a.csv", "id,v,val,event_date\n4,1,r,2026-11-04\n"), ("b.csv", "id,v,event_date\n5,1,2026-11-05\n")],
    );
    let o = run(config("b5", "csv"));
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(val("2026-11-05"), [""]);
    // Parquet by date folders: a producer still on the old columns (no `val`) under the first
    // date, the new ones under the next. The run's schema is every date's (it was the first
    // date's: the table's `val` was called removed, and a rebuild, as advised, dropped it).
    let parquet = |dir: &str, id: i64, val: Option<&str>| {
        let path = lake.dir.path().join("b6").join(dir).join("p.parquet");
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        let mut columns = vec![
            ("id", Arc::new(Int64Array::from(vec![id])) as ArrayRef),
            ("v", Arc::new(Int64Array::from(vec![1])) as ArrayRef),
        ];
        if let Some(v) = val {
            columns.push(("val", Arc::new(arrow::array::StringArray::from(vec![v])) as ArrayRef));
        }
        write_parquet(&path, &RecordBatch::try_from_iter(columns).unwrap());
    };
    parquet("event_date=2026-11-06", 6, None);
    parquet("event_date=2026-11-07", 7, Some("s"));
    let o = run(config("b6", "parquet"));
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(
        (val("2026-11-06"), val("2026-11-07"), val("2026-11-01")),
        (vec![String::new()], vec!["s".to_string()], vec!["z".to_string()])
    );
}

/// Risk: with `on_conflict = "quarantine"`, the table depended on how events were split into
/// batches: a key whose version 1 was in conflict was set aside whole when its version 2 came
/// in the same batch, while `{v1, v1'}` then `{v2}` stored version 2; a conflict at a key's
/// newest version set aside its older version under another date, which a batch of its own
/// merges. A version in conflict — inside a date, or one version under two dates — is set aside,
/// and the key keeps its newest version without one over every date of the batch: every split
/// that holds each conflict whole, in any order, gives the same bytes.
#[test]
fn quarantine_keeps_a_keys_newest_version_without_a_conflict_however_the_batch_is_split() {
    // Events in units: the rows of a conflict are one unit.
    let units = [
        "1,9,x,2026-11-03\n1,9,y,2026-11-03\n", // key 1: a conflict at its newest version…
        "1,2,old,2026-11-04\n",                 // … and its newest other version, elsewhere
        "2,2,b2,2026-11-04\n",
        "3,1,p,2026-11-02\n3,1,q,2026-11-02\n", // key 3: a conflict at an older version
        "3,2,r,2026-11-02\n",
        "4,5,s,2026-11-03\n4,5,t,2026-11-04\n", // key 4: its newest version under two dates…
        "4,4,u,2026-11-04\n",                   // … and its newest other version
        "5,3,w,2026-11-03\n5,3,z,2026-11-03\n", // key 5: nothing but a conflict
    ];
    let splits: [&[&[usize]]; 5] = [
        &[&[0, 1, 2, 3, 4, 5, 6, 7]],
        &[&[0], &[1], &[2], &[3], &[4], &[5], &[6], &[7]],
        &[&[7], &[6], &[5], &[4], &[3], &[2], &[1], &[0]],
        &[&[1, 3, 5], &[0, 2, 4, 6, 7]],
        &[&[6, 4, 2, 0], &[1, 3, 5, 7], &[0, 5]],
    ];
    let mut first: Option<std::collections::BTreeMap<String, Vec<u8>>> = None;
    for split in splits {
        let lake = Lake::new();
        let quarantine = "[prepare]\non_conflict = \"quarantine\"\n\n";
        let run = |name: &str, rows: &str| {
            write_files(&lake, name, &[("a.csv", &format!("id,v,val,event_date\n{rows}"))]);
            let cfg = text_merge_config(&lake, name, "csv", quarantine);
            let o = cli(&["run", "--config", cfg.to_str().unwrap()], lake.dir.path());
            assert!(o.status.success(), "{split:?}: {}", text(&o));
        };
        run("b0", "1,1,a1,2026-11-01\n2,1,b1,2026-11-01\n");
        for (i, batch) in split.iter().enumerate() {
            run(&format!("b{}", i + 1), &batch.iter().map(|&u| units[u]).collect::<String>());
        }
        assert_eq!(column_text(&lake, "2026-11-01", "val"), Vec::<String>::new(), "{split:?}: keys 1 and 2 moved");
        assert_eq!(column_text(&lake, "2026-11-02", "val"), ["r"], "{split:?}");
        assert!(!lake.partition_file("2026-11-03").exists(), "{split:?}: nothing but conflicts");
        assert_eq!(column_text(&lake, "2026-11-04", "val"), ["old", "b2", "u"], "{split:?}");
        let got = lake.snapshot();
        match &first {
            None => first = Some(got),
            Some(want) => assert!(&got == want, "{split:?}: other bytes than one batch"),
        }
    }
}

/// Risk: under `on_conflict = "quarantine"` with `on_date_change = "fail"`, a key's newest
/// version under two dates of the batch was set aside as a conflict and the run exited 0 —
/// while the key changed date, which that setting refuses. Both dates fail (exit 3), naming it.
#[test]
fn quarantine_still_refuses_a_key_under_two_dates_with_on_date_change_fail() {
    let lake = Lake::new();
    write_files(
        &lake,
        "b",
        &[("a.csv", "id,v,val,event_date\n1,5,x,2026-11-01\n1,5,y,2026-11-02\n2,1,z,2026-11-03\n")],
    );
    let extra = "[prepare]\non_conflict = \"quarantine\"\n\n[merge]\non_date_change = \"fail\"\n\n";
    let cfg = text_merge_config(&lake, "b", "csv", extra);
    let o = cli(&["run", "--config", cfg.to_str().unwrap()], lake.dir.path());
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    assert!(text(&o).contains("seen under two dates"), "{}", text(&o));
    assert!(!lake.partition_file("2026-11-01").exists() && !lake.partition_file("2026-11-02").exists());
    assert_eq!(column_text(&lake, "2026-11-03", "val"), ["z"], "an unrelated date commits");
}

/// Risk: one version of a key under two dates of a batch is a conflict, but was only seen at
/// the key's newest version: at an older one (which a newer version supersedes) the batch
/// merged with exit 0, where the same conflict inside one date fails, and under quarantine its
/// rows were neither set aside nor counted. It fails both dates (exit 3), or its rows are set
/// aside and the newer version is merged.
#[test]
fn an_older_version_under_two_dates_is_a_conflict() {
    // The newer version under one of the two dates, or under a third (each date then holds
    // one version of the key).
    let cases = [
        ("2026-11-02", "id,v,val,event_date\n1,1,x,2026-11-01\n1,1,y,2026-11-02\n1,2,z,2026-11-02\n2,1,w,2026-11-03\n"),
        ("2026-11-04", "id,v,val,event_date\n1,1,x,2026-11-01\n1,1,y,2026-11-02\n1,2,z,2026-11-04\n2,1,w,2026-11-03\n"),
    ];
    for ((newer, rows), quarantine) in cases.into_iter().flat_map(|c| [(c, false), (c, true)]) {
        let lake = Lake::new();
        write_files(&lake, "b", &[("a.csv", rows)]);
        let extra = if quarantine { "[prepare]\non_conflict = \"quarantine\"\n\n" } else { "" };
        let cfg = text_merge_config(&lake, "b", "csv", extra);
        let summary = lake.dir.path().join("summary.json");
        let o = cli(
            &["run", "--config", cfg.to_str().unwrap(), "--summary-json", summary.to_str().unwrap()],
            lake.dir.path(),
        );
        let s: serde_json::Value = serde_json::from_slice(&std::fs::read(&summary).unwrap()).unwrap();
        let part = |date: &str| s["partitions"].as_array().unwrap().iter().find(|p| p["date"] == date).unwrap().clone();
        if quarantine {
            assert!(o.status.success(), "{}", text(&o));
            assert_eq!(column_text(&lake, newer, "val"), ["z"]);
            assert!(!lake.partition_file("2026-11-01").exists());
            for date in ["2026-11-01", "2026-11-02"] {
                assert_eq!(part(date)["counts"]["quarantined_rows"], 1, "{date}: {s}");
            }
        } else {
            assert_eq!(o.status.code(), Some(3), "{}", text(&o));
            assert!(text(&o).contains("key 1 version 1"), "{}", text(&o));
            assert!(!lake.partition_file("2026-11-01").exists() && !lake.partition_file(newer).exists());
        }
        assert_eq!(column_text(&lake, "2026-11-03", "val"), ["w"], "an unrelated date commits");
    }
}

/// Risk: a date of the batch fails before it is merged (a conflict inside it, an unreadable
/// row), and another date of the batch holding an older version of one of its keys commits
/// that version: the table holds a version the batch itself supersedes. A date sharing a key
/// with the failed date fails with it and an unrelated date commits; when the failed date's
/// rows could not be read, its keys are unknown and no date of the batch is merged.
#[test]
fn a_failed_date_guards_its_keys_in_the_batch() {
    for cause in ["a conflict", "an unreadable row"] {
        let lake = Lake::new();
        let newer = match cause {
            "a conflict" => "id,v,val\n1,2,new\n2,1,x\n2,1,y\n",
            _ => "id,v,val\n1,2,new\n2,1,\"x\n",
        };
        write_files(
            &lake,
            "b",
            &[
                ("event_date=2026-11-01/a.csv", "id,v,val\n1,1,old\n3,1,c\n"),
                ("event_date=2026-11-02/a.csv", newer),
                ("event_date=2026-11-03/a.csv", "id,v,val\n4,1,d\n"),
            ],
        );
        let cfg = text_merge_config(&lake, "b", "csv", "");
        let o = cli(&["run", "--config", cfg.to_str().unwrap()], lake.dir.path());
        let out = text(&o);
        assert_ne!(o.status.code(), Some(0), "{cause}: {out}");
        assert!(
            !lake.partition_file("2026-11-01").exists(),
            "{cause}: the older version of key 1 is not merged: {out}"
        );
        assert!(!lake.partition_file("2026-11-02").exists(), "{cause}: {out}");
        match cause {
            "a conflict" => {
                assert!(out.contains("key 1 is also under 2026-11-02 in this batch, which failed"), "{out}");
                assert_eq!(column_text(&lake, "2026-11-03", "val"), ["d"], "an unrelated date commits: {out}");
            }
            _ => {
                assert!(
                    out.contains("2026-11-02, a date of this batch, failed before its keys could be read"),
                    "{out}"
                );
                assert!(!lake.partition_file("2026-11-03").exists(), "{cause}: {out}");
            }
        }
        // Fixed, the batch merges whole: key 1 at its newest version, under its newest date.
        write_files(&lake, "b", &[("event_date=2026-11-02/a.csv", "id,v,val\n1,2,new\n2,1,x\n")]);
        let o = cli(&["run", "--config", cfg.to_str().unwrap()], lake.dir.path());
        assert!(o.status.success(), "{cause}: {}", text(&o));
        assert_eq!(column_text(&lake, "2026-11-01", "val"), ["c"], "{cause}");
        assert_eq!(column_text(&lake, "2026-11-02", "val"), ["new", "x"], "{cause}");
    }
}

/// Risk: the guard above misses a date that shares a key with the failed date only through
/// another date, or through a key written differently (a null key beside it, another integer
/// width), or a date that fails later (a conflict between dates, with a key stored under
/// another date, or with its own stored rows): the other date commits a version the batch
/// supersedes, or loses a key. Each case: the dates' values after the run (`None`: no file).
#[test]
fn dates_sharing_keys_with_a_failed_date_fail_with_it() {
    type Case<'a> =
        (&'a str, &'a [(&'a str, &'a str)], &'a [(&'a str, &'a str)], &'a [(&'a str, Option<&'a [&'a str]>)]);

    let cases: &[Case] = &[
        (
            "a null key beside a text key",
            &[],
            &[
                ("event_date=2026-11-01/a.csv", "id,v,val\nk1,1,old\n"),
                ("event_date=2026-11-02/a.csv", "id,v,val\nk1,2,new\n,1,z\n"),
            ],
            &[("2026-11-01", None), ("2026-11-02", None)],
        ),
        (
            "a key read as text on the failed date",
            &[],
            &[
                ("event_date=2026-11-01/a.csv", "id,v,val\n1,1,old\n"),
                ("event_date=2026-11-02/a.csv", "id,v,val\n1,2,new\nx,1,z\n"),
            ],
            &[("2026-11-01", None), ("2026-11-02", None)],
        ),
        (
            "through another date",
            &[],
            &[
                ("event_date=2026-11-01/a.csv", "id,v,val\n1,3,b\n2,3,newest\n"),
                ("event_date=2026-11-02/a.csv", "id,v,val\n1,5,a\n9,1,x\n9,1,y\n"),
                ("event_date=2026-11-03/a.csv", "id,v,val\n2,2,older\n"),
                ("event_date=2026-11-04/a.csv", "id,v,val\n4,1,d\n"),
            ],
            &[("2026-11-01", None), ("2026-11-02", None), ("2026-11-03", None), ("2026-11-04", Some(&["d"]))],
        ),
        (
            "a conflict between dates",
            &[("event_date=2026-11-03/a.csv", "id,v,val\n2,1,stored\n")],
            &[
                ("event_date=2026-11-01/a.csv", "id,v,val\n1,1,a\n2,3,newest\n"),
                ("event_date=2026-11-02/a.csv", "id,v,val\n1,1,b\n"),
                ("event_date=2026-11-03/a.csv", "id,v,val\n2,2,newer\n3,1,c\n"),
            ],
            &[("2026-11-01", None), ("2026-11-02", None), ("2026-11-03", Some(&["stored"]))],
        ),
        (
            "a conflict with a key stored under another date",
            &[("event_date=2026-11-09/a.csv", "id,v,val\n5,1,stored\n")],
            &[
                ("event_date=2026-11-01/a.csv", "id,v,val\n5,1,other\n2,3,newest\n"),
                ("event_date=2026-11-03/a.csv", "id,v,val\n2,2,older\n3,1,c\n"),
            ],
            &[("2026-11-01", None), ("2026-11-03", None), ("2026-11-09", Some(&["stored"]))],
        ),
        (
            "a conflict with its own stored rows",
            &[("event_date=2026-11-01/a.csv", "id,v,val\n5,1,stored\n")],
            &[
                ("event_date=2026-11-01/a.csv", "id,v,val\n5,1,other\n2,3,newest\n"),
                ("event_date=2026-11-03/a.csv", "id,v,val\n2,2,older\n3,1,c\n"),
            ],
            &[("2026-11-01", Some(&["stored"])), ("2026-11-03", None)],
        ),
    ];
    for (case, seed, batch, expect) in cases {
        let lake = Lake::new();
        let run = |name: &str| {
            let cfg = text_merge_config(&lake, name, "csv", "");
            cli(&["run", "--config", cfg.to_str().unwrap()], lake.dir.path())
        };
        if !seed.is_empty() {
            write_files(&lake, "seed", seed);
            let o = run("seed");
            assert!(o.status.success(), "{case}: {}", text(&o));
        }
        write_files(&lake, "batch", batch);
        let o = run("batch");
        let out = text(&o);
        assert_ne!(o.status.code(), Some(0), "{case}: {out}");
        for (date, values) in *expect {
            match values {
                None => assert!(!lake.partition_file(date).exists(), "{case}: {date} is written: {out}"),
                Some(v) => assert_eq!(column_text(&lake, date, "val"), *v, "{case}: {date}: {out}"),
            }
        }
        assert!(out.contains("in this batch") || out.contains("failed before its keys could be read"), "{case}: {out}");
    }
}

/// Risk: `--allow-empty` and `--skip-unchanged` were accepted by a merge run and did nothing, so
/// a user believed a date without input was written, or a merge skipped. Both are refused with
/// exit 2 before anything is read or written, by `run` and `--dry-run`.
#[test]
fn aggregate_only_flags_are_refused_by_a_merge() {
    let lake = Lake::new();
    write_files(&lake, "b", &[("a.csv", "id,v,event_date\n1,1,2026-11-01\n")]);
    let cfg = text_merge_config(&lake, "b", "csv", "");
    let c = cfg.to_str().unwrap();
    for flag in ["--allow-empty", "--skip-unchanged"] {
        for extra in [&[][..], &["--dry-run"]] {
            let mut args = vec!["run", "--config", c, "--date", "2026-11-01", flag];
            args.extend_from_slice(extra);
            let o = cli(&args, lake.dir.path());
            assert_eq!(o.status.code(), Some(2), "{flag} {extra:?}: {}", text(&o));
            assert!(text(&o).contains(flag) && text(&o).contains("merge"), "{}", text(&o));
            assert!(!lake.partition_file("2026-11-01").exists(), "{flag}: {}", text(&o));
        }
    }
    let o = cli(&["run", "--config", c, "--date", "2026-11-01"], lake.dir.path());
    assert!(o.status.success(), "{}", text(&o));
    assert!(lake.partition_file("2026-11-01").exists(), "{}", text(&o));
    // A date without batch rows is left alone, and the plan says it may be.
    let o = cli(&["run", "--config", c, "--date", "2026-11-02", "--dry-run"], lake.dir.path());
    assert!(o.status.success() && text(&o).contains("if it holds any (else left alone)"), "{}", text(&o));
    let o = cli(&["run", "--config", c, "--date", "2026-11-02"], lake.dir.path());
    assert!(o.status.success() && table_of(&o).contains("untouched"), "{}", text(&o));
    // A Hive input's folders tell it without reading.
    write_files(&lake, "h", &[("event_date=2026-11-01/a.csv", "id,v\n1,2\n")]);
    let hive = text_merge_config(&lake, "h", "csv", "");
    let o = cli(&["run", "--config", hive.to_str().unwrap(), "--date", "2026-11-02", "--dry-run"], lake.dir.path());
    assert!(o.status.success() && text(&o).contains("no batch rows: would be left alone"), "{}", text(&o));
}

/// Risk: a merge whose input lists no object (a mistyped prefix: an object store has no folders
/// to miss) exited 0 having merged nothing, every day; with `--date` it exited 3 naming no
/// object. Refused with exit 2, naming the input; markers and `_` names are not data.
#[test]
fn a_merge_of_an_input_without_objects_is_refused() {
    let lake = Lake::new();
    write_files(&lake, "b", &[("_SUCCESS", ""), (".hidden.csv", "id,v,event_date\n1,1,2026-11-01\n")]);
    let cfg = text_merge_config(&lake, "b", "csv", "");
    let c = cfg.to_str().unwrap();
    for extra in [&[][..], &["--date", "2026-11-01"], &["--dry-run"]] {
        let mut args = vec!["run", "--config", c];
        args.extend_from_slice(extra);
        let o = cli(&args, lake.dir.path());
        assert_eq!(o.status.code(), Some(2), "{extra:?}: {}", text(&o));
        assert!(text(&o).contains("holds no data objects") && text(&o).contains("/b"), "{}", text(&o));
    }
    assert!(!lake.partition_file("2026-11-01").exists());
}

/// A merge job over the text objects of `<lake>/<name>/` (key `id`, version `v`), with `extra`
/// sections before `[output]`: its config's path.
/// Risk: a CSV header ending in a comma (`id,v,event_date,`), or an NDJSON field `""`, was
/// stored by a merge as a column named `` — read back by no name, named by each reader its own
/// way. Refused before anything is done (exit 2), naming the column's place.
#[test]
fn a_merge_refuses_a_column_with_no_name() {
    let lake = Lake::new();
    for (name, format, body) in [
        ("c", "csv", "id,v,event_date,\n1,1,2026-11-01,x\n"),
        ("j", "ndjson", "{\"id\": 1, \"v\": 1, \"event_date\": \"2026-11-01\", \"\": \"x\"}\n"),
    ] {
        write_files(&lake, name, &[(&format!("a.{format}"), body)]);
        let o =
            cli(&["run", "--config", text_merge_config(&lake, name, format, "").to_str().unwrap()], lake.dir.path());
        assert_eq!(o.status.code(), Some(2), "{format}: {}", text(&o));
        assert!(text(&o).contains("a column with no name") && text(&o).contains("input.url"), "{format}: {}", text(&o));
        assert!(!lake.output().exists(), "{format}: nothing written");
    }
}

fn text_merge_config(lake: &Lake, name: &str, format: &str, extra: &str) -> std::path::PathBuf {
    let toml = format!(
        "[job]\nname = \"m\"\nkind = \"merge\"\n\n[input]\nurl = \"{}\"\nformat = \"{format}\"\n\n\
         [identity]\nkey = [\"id\"]\nversion = \"v\"\n\n[partition]\ncolumn = \"event_date\"\n\n{extra}[output]\nurl = \"{}\"\n",
        lake.dir.path().join(name).display(),
        lake.output().display()
    );
    let cfg = lake.dir.path().join(format!("{name}.toml"));
    std::fs::write(&cfg, toml).unwrap();
    cfg
}

/// Writes `files` (path, text) into `<lake>/<name>/`.
fn write_files(lake: &Lake, name: &str, files: &[(&str, &str)]) {
    let dir = lake.dir.path().join(name);
    std::fs::create_dir_all(&dir).unwrap();
    for (f, body) in files {
        let path = dir.join(f);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, body).unwrap();
    }
}

/// The values of `column` in the committed partition of `date`, as text.
fn column_text(lake: &Lake, date: &str, column: &str) -> Vec<String> {
    let bytes = bytes::Bytes::from(std::fs::read(lake.partition_file(date)).unwrap());
    let reader =
        parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(bytes).unwrap().build().unwrap();
    let mut out = Vec::new();
    for b in reader {
        let b = b.unwrap();
        let c = b.column_by_name(column).unwrap();
        out.extend((0..b.num_rows()).map(|i| arrow::util::display::array_value_to_string(c, i).unwrap()));
    }
    out
}

/// Risk: a merge orders a zone-less (wall-clock) version against versions it never sees in one
/// date's prepare: the stored row, a tombstone, the key's row under another date of the batch.
/// 01:40-04:00 is 30 minutes before 01:10-05:00 in New York on 2026-11-01, but as wall-clock
/// times it is the later: the table kept (or took back) the older row, or a deleted key came
/// back. Each such pair now fails its dates (exit 3) and the table stays as it was.
/// A merge over every date of its batch (no dates given) with a row whose date cannot be told —
/// past the zone's table of clock changes, or past the year 9999 — fails naming the row; it
/// merged nothing and said "0 created", exit 0.
#[test]
fn a_batch_row_without_a_date_fails_a_merge_over_every_date() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    for (zone, ts, says) in [
        ("America/New_York", "2150-06-01T12:00:00Z", "2100 or later"),
        ("Asia/Tokyo", "9999-12-31T20:00:00Z", "outside the years 0001 to 9999"),
    ] {
        let cfg = root.join("job.toml");
        std::fs::write(
            &cfg,
            format!(
                "[job]\nname = \"m\"\nkind = \"merge\"\ntimezone = \"{zone}\"\n\n[input]\nurl = \"in\"\nformat = \"csv\"\n\
                 schema = {{ v = \"int64\", ts = \"timestamp\", amount = \"int64\" }}\n\n[identity]\nkey = [\"id\"]\n\
                 version = \"v\"\n\n[partition]\ncolumn = \"event_date\"\nfrom_timestamp = \"ts\"\n\n[output]\nurl = \"out\"\n"
            ),
        )
        .unwrap();
        std::fs::create_dir_all(root.join("in")).unwrap();
        std::fs::write(root.join("in/a.csv"), format!("id,v,ts,amount\nr0,1,{ts},0\nr1,1,2026-11-01T12:00:00Z,1\n"))
            .unwrap();
        let o = cli(&["run", "--config", cfg.to_str().unwrap()], root);
        assert_eq!(o.status.code(), Some(3), "{zone}: {}", text(&o));
        assert!(text(&o).contains(says) && text(&o).contains("a.csv"), "{zone}: {}", text(&o));
        assert!(!root.join("out").exists() || walk(&root.join("out")).is_empty(), "{zone}: nothing written");
    }
}

/// Writes `root/job.toml`: a merge of the CSV objects under `in/` keyed by `id`, versioned by
/// `v`, with the input columns `schema` declares and `partition` added to `[partition]`.
fn csv_merge_job(root: &std::path::Path, schema: &str, partition: &str) -> std::path::PathBuf {
    let cfg = root.join("job.toml");
    let text = format!(
        "[job]\nname = \"m\"\nkind = \"merge\"\n\n[input]\nurl = \"in\"\nformat = \"csv\"\nschema = {{ {schema} }}\n\n\
         [identity]\nkey = [\"id\"]\nversion = \"v\"\n\n[partition]\ncolumn = \"event_date\"\n{partition}\n\
         [output]\nurl = \"out\"\n"
    );
    std::fs::write(&cfg, text).unwrap();
    cfg
}

/// A date whose key is stored under a date of the batch that failed names the key.
#[test]
fn a_key_stored_under_a_failed_date_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let cfg = csv_merge_job(root, "v = \"int64\", event_date = \"date\", amount = \"int64\"", "");
    std::fs::create_dir_all(root.join("in")).unwrap();
    let batch = |rows: &str| {
        std::fs::write(root.join("in/a.csv"), format!("id,v,event_date,amount\n{rows}")).unwrap();
        cli(&["run", "--config", cfg.to_str().unwrap()], root)
    };
    assert_eq!(batch("k,1,2026-11-01,10\nx,1,2026-11-01,1\n").status.code(), Some(0));
    // The 1st fails on a conflict; `k` moves from it to the 2nd.
    let o = batch("x,2,2026-11-01,2\nx,2,2026-11-01,3\nk,2,2026-11-02,20\n");
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    assert!(
        text(&o).contains("key k of this date is stored under 2026-11-01, which failed: it cannot"),
        "{}",
        text(&o)
    );
}

/// Rows dated by a timestamp: an input column named like the partition column but for case
/// (`EVENT_DATE`) was stored beside the `event_date=` folders, where Hive readers see the
/// folder's date in its place; and `event_date=` folders of the input were read as plain
/// folders, their values lost (rows alike in two of them merged as duplicates). Both exit 0;
/// both refused now, naming what is wrong.
#[test]
fn rows_dated_by_a_timestamp_read_no_date_from_names_alike() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let cfg = csv_merge_job(root, "v = \"int64\", ts = \"timestamp\"", "from_timestamp = \"ts\"\n");
    let input = root.join("in");
    std::fs::create_dir_all(&input).unwrap();
    std::fs::write(input.join("a.csv"), "id,v,ts,EVENT_DATE\nk,1,2026-11-01T05:00:00Z,2026-11-02\n").unwrap();
    let o = cli(&["run", "--config", cfg.to_str().unwrap()], root);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("partition.column") && text(&o).contains("a column `EVENT_DATE`"), "{}", text(&o));
    std::fs::remove_file(input.join("a.csv")).unwrap();
    for day in ["event_date=2026-11-05", "event_date=2026-11-06"] {
        std::fs::create_dir_all(input.join(day)).unwrap();
        std::fs::write(input.join(day).join("a.csv"), "id,v,ts\nk,1,2026-11-01T05:00:00Z\n").unwrap();
    }
    let o = cli(&["run", "--config", cfg.to_str().unwrap()], root);
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    assert!(text(&o).contains("`event_date=2026-11-0") && text(&o).contains("from_timestamp"), "{}", text(&o));
    assert!(!root.join("out").exists() || walk(&root.join("out")).is_empty(), "nothing written");
    // Declared not data, the folders are read as one input.
    let ignored = std::fs::read_to_string(&cfg)
        .unwrap()
        .replace("format = \"csv\"", "format = \"csv\"\nignore_folder_values = true");
    std::fs::write(&cfg, ignored).unwrap();
    let o = cli(&["run", "--config", cfg.to_str().unwrap()], root);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
}

#[test]
fn wall_clock_versions_in_a_repeated_hour_are_not_guessed_against_the_table() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let cfg = root.join("job.toml");
    std::fs::write(
        &cfg,
        "[job]\nname = \"m\"\nkind = \"merge\"\ntimezone = \"America/New_York\"\n\n[input]\nurl = \"in\"\nformat = \"csv\"\n\
         schema = { v = \"timestamp_ntz\", amount = \"int64\", event_date = \"date\" }\n\n[identity]\nkey = [\"id\"]\n\
         version = \"v\"\ndeleted = { column = \"op\", equals = \"d\" }\n\n[partition]\ncolumn = \"event_date\"\n\n\
         [output]\nurl = \"out\"\n",
    )
    .unwrap();
    let batch = |rows: &[&str]| {
        let _ = std::fs::remove_dir_all(root.join("in"));
        std::fs::create_dir_all(root.join("in")).unwrap();
        let body: String = rows.iter().map(|r| format!("{r}\n")).collect();
        std::fs::write(root.join("in/a.csv"), format!("id,v,event_date,amount,op\n{body}")).unwrap();
        cli(&["run", "--config", cfg.to_str().unwrap()], root)
    };
    let table = || walk(&root.join("out")).into_iter().map(|p| std::fs::read(p).unwrap()).collect::<Vec<_>>();
    let (early, late) = ("2026-11-01T01:40:00-04:00", "2026-11-01T01:10:00-05:00");
    for (first, second, what) in [
        (format!("k1,{early},2026-11-01,10,u"), format!("k1,{late},2026-11-01,20,u"), "a newer row read as older"),
        (format!("k1,{late},2026-11-01,20,u"), format!("k1,{early},2026-11-01,10,u"), "an older row read as newer"),
        (format!("k1,{late},2026-11-01,20,d"), format!("k1,{early},2026-11-01,10,u"), "a deleted key brought back"),
    ] {
        let _ = std::fs::remove_dir_all(root.join("out"));
        let o = batch(&[&first, "k2,2026-11-01T00:10:00-04:00,2026-11-01,5,u"]);
        assert_eq!(o.status.code(), Some(0), "{what}: {}", text(&o));
        let before = table();
        let o = batch(&[&second]);
        assert_eq!(o.status.code(), Some(3), "{what}: {}", text(&o));
        assert!(
            text(&o).contains("key k1: version") && text(&o).contains("the stored version"),
            "{what}: {}",
            text(&o)
        );
        assert_eq!(table(), before, "{what}: the table as it was");
    }
    // Stored under another date: the key would move.
    for (first, second) in [(early, late), (late, early)] {
        let _ = std::fs::remove_dir_all(root.join("out"));
        let o = batch(&[&format!("k1,{first},2026-11-01,10,u")]);
        assert_eq!(o.status.code(), Some(0), "{}", text(&o));
        let before = table();
        let o = batch(&[&format!("k1,{second},2026-11-02,20,u")]);
        assert_eq!(o.status.code(), Some(3), "{}", text(&o));
        assert!(text(&o).contains("stored under 2026-11-01 are both wall-clock times"), "{}", text(&o));
        assert_eq!(table(), before, "the table as it was");
    }
    // Under two dates of one batch.
    let _ = std::fs::remove_dir_all(root.join("out"));
    let o = batch(&[&format!("k1,{early},2026-11-01,10,u"), &format!("k1,{late},2026-11-02,20,u")]);
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    for date in ["2026-11-01", "2026-11-02"] {
        assert!(
            text(&o)
                .lines()
                .any(|l| l.starts_with(&format!("error: {date}")) && l.contains("two of its versions in this batch")),
            "{}",
            text(&o)
        );
    }
    assert!(table().is_empty(), "nothing merged");
}

/// Risk: rows that differ only by the sign of a zero, or by a NaN's bits, are one row in a
/// batch but not against the table: the stored bytes depended on which came first, and a
/// replay of the other was refused as a conflict.
#[test]
fn a_zeros_sign_and_a_nans_bits_tell_no_row_apart_against_the_table() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let cfg = csv_merge_job(root, "v = \"int64\", f = \"float64\", event_date = \"date\"", "");
    let batch = |rows: &[&str]| {
        let _ = std::fs::remove_dir_all(root.join("in"));
        std::fs::create_dir_all(root.join("in")).unwrap();
        let body: String = rows.iter().map(|r| format!("{r}\n")).collect();
        std::fs::write(root.join("in/a.csv"), format!("id,v,event_date,f\n{body}")).unwrap();
        cli(&["run", "--config", cfg.to_str().unwrap()], root)
    };
    let table = || walk(&root.join("out")).into_iter().map(|p| std::fs::read(p).unwrap()).collect::<Vec<_>>();
    let rows = ["k1,1,2026-11-01,-0.0", "k1,1,2026-11-01,0.0", "k2,1,2026-11-01,NaN", "k2,1,2026-11-01,-NaN"];
    let mut tables = Vec::new();
    for order in [[0, 1, 2, 3], [1, 0, 3, 2]] {
        let _ = std::fs::remove_dir_all(root.join("out"));
        let o = batch(&order.map(|i| rows[i]));
        assert_eq!(o.status.code(), Some(0), "{}", text(&o));
        tables.push(table());
    }
    assert_eq!(tables[0], tables[1], "the stored bytes depend on the rows' order");
    assert_eq!(column_text_in(root, "f"), ["0.0", "NaN"]);
    // Replays of either form over the stored one change nothing.
    for replay in [[0, 3], [1, 2]] {
        let o = batch(&replay.map(|i| rows[i]));
        assert_eq!(o.status.code(), Some(0), "{}", text(&o));
        assert_eq!(table(), tables[0]);
    }
}

/// A tombstone keeps its key, version and date: a later delete at that version is a replay
/// whatever its other columns, but under another date it is a conflict, as any row is there.
#[test]
fn a_replayed_delete_is_unchanged_under_its_date_and_a_conflict_under_another() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let deleted = "\n[identity.deleted]\ncolumn = \"op\"\nequals = \"D\"\n";
    let cfg = csv_merge_job(root, "v = \"int64\", event_date = \"date\", x = \"int64\"", deleted);
    std::fs::create_dir_all(root.join("in")).unwrap();
    let batch = |row: &str| {
        std::fs::write(root.join("in/a.csv"), format!("id,v,event_date,op,x\n{row}\n")).unwrap();
        cli(&["run", "--config", cfg.to_str().unwrap()], root)
    };
    let table =
        || walk(&root.join("out")).into_iter().map(|p| (p.clone(), std::fs::read(p).unwrap())).collect::<Vec<_>>();
    let o = batch("k,5,2026-11-01,D,0");
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let stored = table();
    assert!(!stored.is_empty(), "the tombstone is stored");
    let o = batch("k,5,2026-11-01,D,9");
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(table(), stored, "a replayed delete changes nothing");
    let o = batch("k,5,2026-11-02,D,0");
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    assert!(text(&o).contains("conflicting key") && text(&o).contains("key k version 5"), "{}", text(&o));
    assert_eq!(table(), stored, "nothing written for the conflict");
}

/// An epoch version past what the table's timestamps hold is refused naming its value as the
/// count it is, not as the formatter's error.
#[test]
fn an_epoch_version_past_the_calendar_is_named_by_its_count() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let cfg = csv_merge_job(root, "v = \"timestamp(s)\", event_date = \"date\"", "");
    std::fs::create_dir_all(root.join("in")).unwrap();
    std::fs::write(root.join("in/a.csv"), "id,v,event_date\na,9300000000000000,2026-11-01\n").unwrap();
    let o = cli(&["run", "--config", cfg.to_str().unwrap()], root);
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    let t = text(&o);
    assert!(t.contains("a.csv, row 0 (line 2), column `v`"), "{t}");
    assert!(t.contains("the value 9300000000000000 (seconds since 1970) does not convert exactly"), "{t}");
    assert!(!t.contains("Cast error"), "{t}");
}

/// The values of `column` in the one committed partition under `<root>/out`, as text.
fn column_text_in(root: &std::path::Path, column: &str) -> Vec<String> {
    let files: Vec<_> =
        walk(&root.join("out")).into_iter().filter(|p| p.extension().is_some_and(|e| e == "parquet")).collect();
    assert_eq!(files.len(), 1, "{files:?}");
    let b = read_batch(&files[0]);
    let c = b.column_by_name(column).unwrap();
    (0..b.num_rows()).map(|i| arrow::util::display::array_value_to_string(c, i).unwrap()).collect()
}

/// Risk: which text object of a merge batch is listed first decides the run's columns. A batch
/// whose first object holds deletes alone (no payload) refused the table's declared column as
/// "removed", while the same objects named the other way round merged; and a batch of a header
/// alone, merged for a date, failed it ("missing key column") where a zero-row Parquet object
/// leaves it untouched (an empty CSV object is refused, as an empty Parquet object is).
#[test]
fn a_text_merge_batch_has_its_declared_columns_whichever_object_comes_first() {
    let extra = "[identity.deleted]\ncolumn = \"op\"\nequals = \"D\"\n\n";
    let first = r#"{"id":1,"v":1,"event_date":"2026-11-01","op":"I","x":11}
{"id":2,"v":1,"event_date":"2026-11-01","op":"I","x":21}
"#;
    let delete = r#"{"id":1,"v":2,"event_date":"2026-11-01","op":"D"}
"#;
    let update = r#"{"id":2,"v":2,"event_date":"2026-11-01","op":"I","x":22}
"#;
    for (a, b) in [(delete, update), (update, delete)] {
        let lake = Lake::new();
        write_files(&lake, "b1", &[("a.ndjson", first)]);
        write_files(&lake, "b2", &[("a.ndjson", a), ("b.ndjson", b)]);
        let with_schema = |name: &str| {
            let cfg = text_merge_config(&lake, name, "ndjson", extra);
            let toml = std::fs::read_to_string(&cfg).unwrap();
            std::fs::write(
                &cfg,
                toml.replace("format = \"ndjson\"\n", "format = \"ndjson\"\nschema = { x = \"int64\" }\n"),
            )
            .unwrap();
            cfg
        };
        for name in ["b1", "b2"] {
            let o = cli(&["run", "--config", with_schema(name).to_str().unwrap()], lake.dir.path());
            assert!(o.status.success(), "{name}: {}", text(&o));
        }
        assert_eq!(column_text(&lake, "2026-11-01", "id"), ["2"]);
        assert_eq!(column_text(&lake, "2026-11-01", "x"), ["22"]);

        // A batch of a header alone brings nothing to the date it is run for; an empty CSV
        // object beside it has lost even its header line, and fails the run naming it.
        let bytes = std::fs::read(lake.partition_file("2026-11-01")).unwrap();
        write_files(&lake, "b3", &[("h.csv", "id,v,event_date,op,x\n"), ("e.csv", "")]);
        let cfg = text_merge_config(&lake, "b3", "csv", extra);
        let args = ["run", "--config", cfg.to_str().unwrap(), "--from", "2026-11-01", "--to", "2026-11-02"];
        let o = cli(&args, lake.dir.path());
        assert_eq!(o.status.code(), Some(3), "{}", text(&o));
        assert!(text(&o).contains("e.csv") && text(&o).contains("empty (0 bytes)"), "{}", text(&o));
        assert_eq!(std::fs::read(lake.partition_file("2026-11-01")).unwrap(), bytes);
        std::fs::remove_file(lake.dir.path().join("b3/e.csv")).unwrap();
        let o = cli(&args, lake.dir.path());
        assert!(o.status.success(), "{}", text(&o));
        assert_eq!(std::fs::read(lake.partition_file("2026-11-01")).unwrap(), bytes);
    }
    // With no table yet, such a batch gives no column a type: said, nothing written.
    let lake = Lake::new();
    write_files(&lake, "b3", &[("h.csv", "id,v,event_date,op,x\n")]);
    let cfg = text_merge_config(&lake, "b3", "csv", extra);
    let o = cli(&["run", "--config", cfg.to_str().unwrap(), "--date", "2026-11-01"], lake.dir.path());
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("no object of the batch has a row"), "{}", text(&o));
    assert!(!lake.partition_file("2026-11-01").exists());
}
