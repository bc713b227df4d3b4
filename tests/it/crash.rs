//! Risk: a crash leaves a partition half-written, mixed, or lost (G1, G4). A fault-injecting
//! store "crashes" a 3-partition run at every call index it makes (that call and all later
//! ones fail, as if the process died there), and separately lets every call take effect but
//! report a timeout (an unknown outcome). After each: every partition is wholly old or wholly
//! new, and the next run converges to the expected bytes with no staging or lease left.

use crate::common::backends::{Backend, Kind};
use crate::common::faults::{FaultStore, Mode};
use crate::common::*;
use lakeswap::{dates, run, ExitCode, RunOptions};
use std::collections::BTreeMap;
use std::time::Duration;

fn opts() -> RunOptions {
    RunOptions { dates: Some(dates::range(d("2026-11-01"), d("2026-11-03")).unwrap()), ..Default::default() }
}

async fn copy_partitions(b: &Backend, from: &BTreeMap<String, Vec<u8>>, sub: &str) {
    for (k, v) in from {
        b.put(sub, k, v.clone()).await;
    }
}

async fn every_crash_point(kind: Kind) {
    let b = Backend::new(kind);
    // The old state: two of three dates committed from older input.
    let old_rows = random_orders(71, 3, 120);
    b.write_input(&old_rows, 1).await;
    let s = run::run(&b.job_at("old"), &RunOptions { dates: Some(vec![d("2026-11-01"), d("2026-11-02")]), ..opts() })
        .await
        .unwrap();
    assert_eq!(s.exit_code, ExitCode::Ok);
    let old = b.partitions_at("old").await;
    assert_eq!(old.len(), 2);
    // New input: late versions on every date.
    let mut rows = old_rows.clone();
    for day in ["2026-11-01", "2026-11-02", "2026-11-03"] {
        let mut late = rows.iter().find(|r| r.date == d(day)).unwrap().clone();
        late.version = 9;
        late.status = "refunded".into();
        rows.push(late);
    }
    b.write_input(&rows, 1).await;

    // The reference run: counts the calls, gives the expected bytes.
    copy_partitions(&b, &old, "ref").await;
    let mut job = b.job_at("ref");
    let counter = FaultStore::wrap_output(&mut job, Mode::None);
    assert_eq!(run::run(&job, &opts()).await.unwrap().exit_code, ExitCode::Ok);
    let expected = b.partitions_at("ref").await;
    assert_eq!(expected.len(), 3);
    let calls = counter.calls();
    assert!(calls > 20, "a run makes {calls} store calls");

    for (label, mode) in
        (0..calls).map(|i| ("crash", Mode::CrashAt(i))).chain((0..calls).map(|i| ("lie", Mode::LieAt(i))))
    {
        let sub = format!("{label}{mode:?}").replace(['(', ')'], "");
        copy_partitions(&b, &old, &sub).await;
        let mut job = b.job_at(&sub);
        FaultStore::wrap_output(&mut job, mode);
        let short = RunOptions { lease_ttl: Duration::from_millis(200), ..opts() };
        let _ = run::run(&job, &short).await;
        // Wholly old or wholly new, never anything else.
        let now = b.partitions_at(&sub).await;
        for (k, v) in &now {
            let is_old = old.get(k) == Some(v);
            let is_new = expected.get(k) == Some(v);
            assert!(is_old || is_new, "{mode:?}: {k} is neither the old nor the new file");
        }
        for k in old.keys() {
            assert!(now.contains_key(k), "{mode:?}: committed partition {k} vanished");
        }
        // The next run (waiting out the dead run's leases) converges.
        let next = RunOptions { wait: true, ..opts() };
        let s = run::run(&b.job_at(&sub), &next).await.unwrap();
        assert_eq!(s.exit_code, ExitCode::Ok, "{mode:?}: {}", lakeswap::report::table(&s));
        assert_eq!(b.partitions_at(&sub).await, expected, "{mode:?}: the re-run converges to the expected bytes");
        let leftovers: Vec<String> = b
            .objects(&Backend::state_of(&sub))
            .await
            .into_keys()
            .filter(|k| k.starts_with("staging") || k.starts_with("leases"))
            .collect();
        assert!(leftovers.is_empty(), "{mode:?}: {leftovers:?}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn every_crash_point_local() {
    every_crash_point(Kind::Local).await
}

#[tokio::test(flavor = "multi_thread")]
async fn every_crash_point_memory() {
    every_crash_point(Kind::Memory).await
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs the S3 server that scripts/test starts (not requested)"]
async fn every_crash_point_s3() {
    every_crash_point(Kind::S3).await
}
