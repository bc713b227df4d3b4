//! Risk: a real process death mid-run exposes a partial or mixed partition (G1, G4). The real
//! binary runs a 30-partition backfill and is killed with SIGKILL at seeded random instants,
//! 20 times, while a reader thread reads every partition the whole time. No read ever sees
//! anything but the whole old or the whole new file; a final run converges to the expected
//! bytes and leaves no staging and no lease.

use crate::common::*;
use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn config(lake: &Lake, out: &str) -> std::path::PathBuf {
    let p = lake.config();
    let text = std::fs::read_to_string(&p).unwrap().replace(&lake.output().display().to_string(), out);
    let path = lake.dir.path().join(format!("{}.toml", out.replace('/', "_")));
    std::fs::write(&path, text).unwrap();
    path
}

fn files(root: &std::path::Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    for day in 1..=30 {
        let date = d("2026-11-01") + chrono::Days::new(day - 1);
        if let Ok(b) = std::fs::read(root.join(format!("event_date={date}/part-00000.parquet"))) {
            out.insert(date.to_string(), b);
        }
    }
    out
}

#[test]
fn sigkill_at_random_instants_never_exposes_a_partial_partition() {
    let lake = Lake::new();
    let rows = random_orders(81, 30, 120);
    lake.write_hive(&rows, 2);
    let out = lake.output().display().to_string();
    let range = ["--from", "2026-11-01", "--to", "2026-11-30"];
    let run = |cfg: &std::path::Path, extra: &[&str]| {
        let mut args = vec!["run", "--config", cfg.to_str().unwrap()];
        args.extend_from_slice(&range);
        args.extend_from_slice(extra);
        args.iter().map(|s| s.to_string()).collect::<Vec<_>>()
    };
    let bin = env!("CARGO_BIN_EXE_lakeswap");
    let cfg = config(&lake, &out);
    assert!(std::process::Command::new(bin).args(run(&cfg, &[])).output().unwrap().status.success());
    let old = files(&lake.output());
    assert_eq!(old.len(), 30);

    // New input for every date, and the expected new files (same input objects, other output).
    let mut new_rows = rows.clone();
    for day in 0..30 {
        let date = d("2026-11-01") + chrono::Days::new(day);
        let mut late = rows.iter().find(|r| r.date == date).unwrap().clone();
        late.version = 7;
        late.cents += 1;
        new_rows.push(late);
    }
    lake.write_hive(&new_rows, 2);
    let ref_out = lake.dir.path().join("ref").display().to_string();
    let t = Instant::now();
    assert!(std::process::Command::new(bin)
        .args(run(&config(&lake, &ref_out), &[]))
        .output()
        .unwrap()
        .status
        .success());
    let full_run = t.elapsed();
    let expected = files(std::path::Path::new(&ref_out));
    assert_eq!(expected.len(), 30);

    // A reader that never stops looking.
    let stop = Arc::new(AtomicBool::new(false));
    let reads = Arc::new(AtomicUsize::new(0));
    let reader = {
        let (stop, reads, root) = (stop.clone(), reads.clone(), lake.output());
        let (old, expected) = (old.clone(), expected.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                for (date, bytes) in files(&root) {
                    assert!(
                        bytes == old[&date] || bytes == expected[&date],
                        "a reader saw a partial or mixed file for {date}"
                    );
                    reads.fetch_add(1, Ordering::Relaxed);
                }
            }
        })
    };

    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(2026);
    let horizon = (full_run.as_millis() as u64).max(20) + 10;
    let mut mid_run = 0;
    for trial in 0..20 {
        // Every other trial starts again from the old files (swapped back in atomically), so
        // most kills land in the middle of replacing partitions.
        if trial % 2 == 0 {
            for (date, bytes) in &old {
                let dir = lake.output().join(format!("event_date={date}"));
                std::fs::write(dir.join(".restore"), bytes).unwrap();
                std::fs::rename(dir.join(".restore"), dir.join("part-00000.parquet")).unwrap();
            }
        }
        let mut child = std::process::Command::new(bin)
            .args(run(&cfg, &["--lease-ttl", "1", "--wait"]))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(rng.random_range(0..horizon)));
        let _ = child.kill(); // SIGKILL
        let _ = child.wait();
        let now = files(&lake.output());
        let new = now.iter().filter(|(k, v)| **v == expected[*k]).count();
        let leases = walk(&lake.state().join("leases")).into_iter().filter(|p| !p.to_string_lossy().contains('#'));
        if (new > 0 && new < 30) || leases.count() > 0 {
            mid_run += 1;
        }
    }
    eprintln!("kills in the middle of a run: {mid_run} of 20; reads: {}", reads.load(Ordering::Relaxed));
    assert!(mid_run >= 5, "only {mid_run} of 20 kills landed in the middle of a run");
    let last = std::process::Command::new(bin).args(run(&cfg, &["--lease-ttl", "1", "--wait"])).output().unwrap();
    stop.store(true, Ordering::Relaxed);
    reader.join().expect("the reader saw only whole files");
    assert!(last.status.success(), "{}", text(&last));
    assert_eq!(files(&lake.output()), expected);
    assert!(reads.load(Ordering::Relaxed) > 30, "the reader read {} files", reads.load(Ordering::Relaxed));
    let staging: Vec<_> = walk(&lake.state().join("staging"));
    assert!(staging.is_empty(), "{staging:?}");
    // No lease is left. (A write killed mid-way can leave a `name#N` temporary file, which
    // is no object for the store API; runs remove those once they are old.)
    let leases: Vec<_> =
        walk(&lake.state().join("leases")).into_iter().filter(|p| !p.to_string_lossy().contains('#')).collect();
    assert!(leases.is_empty(), "{leases:?}");
}
