//! Risk: cleanup deletes what a live run needs or what lakeswap did not write, or leaves a
//! crashed run's debris forever; a foreign object in a partition folder goes unnoticed (G9).
//! `gc` removes stale staging and expired leases, never a live run's staging, and nothing whose
//! name lakeswap does not make; a partition is one object, checked.

use crate::common::*;

fn put(path: &std::path::Path, body: &[u8]) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, body).unwrap();
}

fn lease(run: &str, expires: &str) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({"run_id": run, "host": "h", "pid": 1,
        "since": "2026-01-01T00:00:00Z", "expires": expires}))
    .unwrap()
}

#[test]
fn gc_removes_stale_staging_and_expired_leases_only() {
    let lake = Lake::new();
    lake.write_hive(&random_orders(95, 1, 50), 1);
    let state = lake.state();
    let live_until = (chrono::Utc::now() + chrono::Duration::hours(1)).to_rfc3339();
    // A live run: lease held, staging in progress.
    put(&state.join("leases/event_date=2026-11-02.json"), &lease("20260101T000000.000Z-aaaaaa", &live_until));
    put(&state.join("staging/20260101T000000.000Z-aaaaaa/event_date=2026-11-02/part-00000.parquet"), b"in progress");
    // A crashed run: expired lease, staging left behind, and staging without any lease.
    put(
        &state.join("leases/event_date=2026-11-03.json"),
        &lease("20260101T000000.000Z-dddddd", "2026-01-01T00:01:00Z"),
    );
    put(&state.join("staging/20260101T000000.000Z-dddddd/event_date=2026-11-03/part-00000.parquet"), b"debris");
    put(&state.join("staging/20260101T000000.000Z-dddddd/event_date=2026-11-04/part-00000.parquet"), b"debris");
    // Staging of a run that lost its lease to another live run.
    put(&state.join("staging/20260101T000000.000Z-0000aa/event_date=2026-11-02/part-00000.parquet"), b"debris");

    // A dry run of a table never run makes no folder: it writes nothing.
    let fresh = lake.dir.path().join("fresh.toml");
    let config = std::fs::read_to_string(lake.config()).unwrap();
    let out = lake.output().display().to_string();
    std::fs::write(&fresh, config.replace(&out, &format!("{out}-fresh"))).unwrap();
    let o = cli(&["gc", "--config", fresh.to_str().unwrap(), "--dry-run"], lake.dir.path());
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(!std::path::Path::new(&format!("{out}-fresh")).exists(), "a dry run made the table's folder");
    // `--dry-run` lists what gc would remove, and removes nothing.
    let o = cli(&["gc", "--config", lake.config().to_str().unwrap(), "--dry-run"], lake.dir.path());
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(text(&o).contains("would remove 1 expired lease(s) and 3 stale staged file(s); kept 1"), "{}", text(&o));
    assert!(text(&o).contains("would remove (4):"), "{}", text(&o));
    assert!(
        text(&o).contains("staging/20260101T000000.000Z-0000aa/event_date=2026-11-02/part-00000.parquet"),
        "{}",
        text(&o)
    );
    assert!(state.join("leases/event_date=2026-11-03.json").exists());
    assert!(state.join("staging/20260101T000000.000Z-dddddd/event_date=2026-11-04/part-00000.parquet").exists());
    let o = cli(&["gc", "--config", lake.config().to_str().unwrap()], lake.dir.path());
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(text(&o).contains("removed 1 expired lease(s) and 3 stale staged file(s); kept 1"), "{}", text(&o));
    assert!(!text(&o).contains("would"), "{}", text(&o));
    assert!(state.join("leases/event_date=2026-11-02.json").exists());
    assert!(state.join("staging/20260101T000000.000Z-aaaaaa/event_date=2026-11-02/part-00000.parquet").exists());
    assert!(!state.join("leases/event_date=2026-11-03.json").exists());
    assert!(!state.join("staging/20260101T000000.000Z-dddddd").exists());
    assert!(!state.join("staging/20260101T000000.000Z-0000aa").exists());
}

/// Interrupted local writes leave `<name>#<n>` files the object store API never lists: gc
/// removes the old ones anywhere under the output, and leaves a young one (a write in flight).
#[test]
fn gc_removes_old_temporary_files_of_interrupted_writes() {
    let lake = Lake::new();
    lake.write_hive(&random_orders(97, 1, 50), 1);
    let o = cli(
        &["run", "--config", lake.config().to_str().unwrap(), "--from", "2026-11-01", "--to", "2026-11-01"],
        lake.dir.path(),
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let (out, state) = (lake.output(), lake.state());
    let old = [
        out.join("event_date=2026-11-01/part-00000.parquet#7"),
        state.join("runs/20260101T000000.000Z-abcdef.json#2"),
        state.join("leases/event_date=2026-11-05.json#11"),
    ];
    let young = out.join("event_date=2026-11-01/part-00000.parquet#8");
    let an_hour_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
    for p in &old {
        put(p, b"interrupted write");
        std::fs::File::options().write(true).open(p).unwrap().set_modified(an_hour_ago).unwrap();
    }
    put(&young, b"write in flight");
    let committed = std::fs::read(lake.partition_file("2026-11-01")).unwrap();

    let o = cli(&["gc", "--config", lake.config().to_str().unwrap()], lake.dir.path());
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(text(&o).contains("removed 3 temporary file(s) of interrupted writes"), "{}", text(&o));
    assert!(old.iter().all(|p| !p.exists()));
    assert!(young.exists());
    assert_eq!(std::fs::read(lake.partition_file("2026-11-01")).unwrap(), committed, "the committed file is untouched");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_run_cleans_its_own_partitions_first() {
    let lake = Lake::new();
    lake.write_hive(&random_orders(96, 2, 50), 1);
    let state = lake.state();
    put(&state.join("staging/20260101T000000.000Z-dddddd/event_date=2026-11-01/part-00000.parquet"), b"debris");
    put(
        &state.join("staging/20260101T000000.000Z-dddddd/event_date=2026-11-01/part-00000.parquet#3"),
        b"interrupted write",
    );
    put(
        &state.join("staging/20260101T000000.000Z-dddddd/event_date=2026-11-09/part-00000.parquet"),
        b"not this run's partition",
    );
    let s = run_range(&lake.config(), "2026-11-01", "2026-11-02").await;
    assert_eq!(s.exit_code, lakeswap::ExitCode::Ok);
    assert!(!state.join("staging/20260101T000000.000Z-dddddd/event_date=2026-11-01").exists());
    assert!(state.join("staging/20260101T000000.000Z-dddddd/event_date=2026-11-09/part-00000.parquet").exists());
}

/// Foreign objects in every place gc looks: all left alone, and listed; lakeswap's own debris
/// beside them removed.
async fn gc_touches_only_what_lakeswap_wrote(kind: crate::common::backends::Kind) {
    use crate::common::backends::{Backend, Kind, STATE};
    let b = Backend::new(kind);
    b.write_input(&random_orders(98, 1, 30), 1).await;
    let s = lakeswap::run::run(
        &b.job(),
        &lakeswap::RunOptions { dates: Some(vec![d("2026-11-01")]), ..Default::default() },
    )
    .await
    .unwrap();
    assert_eq!(s.exit_code, lakeswap::ExitCode::Ok);
    let run = "20260101T000000.000Z-dddddd";
    // (location, path in it)
    let foreign = [
        (STATE, "staging/othertool/keep/data.bin".to_string()),
        (STATE, format!("staging/{run}/notes.txt")),
        (STATE, format!("staging/{run}/event_date=2026-11-05/backup.parquet")),
        (STATE, "leases/other.json".to_string()),
        (STATE, "runs/notes.json".to_string()),
        (STATE, "keys/event_date=2026-11-01/mine.keys".to_string()),
        (STATE, "notes.txt".to_string()),
        ("out", "docs/report".to_string()),
        ("out", "event_date=2026-11-01/backup.parquet".to_string()),
        ("out", "notes.txt".to_string()),
        // What an older version kept in the table is not this version's to remove.
        ("out", format!("_staging/{run}/event_date=2026-11-05/part-00000.parquet")),
    ];
    for (at, f) in &foreign {
        b.put(at, f, b"not lakeswap's".to_vec()).await;
    }
    b.put(STATE, "leases/event_date=2026-11-09.json", b"{ not a lease".to_vec()).await;
    // lakeswap's own debris: a dead run's staging, an expired lease.
    b.put(STATE, &format!("staging/{run}/event_date=2026-11-05/part-00000.parquet"), b"debris".to_vec()).await;
    b.put(STATE, "leases/event_date=2026-11-05.json", lease(run, "2026-01-01T00:01:00Z")).await;
    let mut local_temp = Vec::new();
    if kind == Kind::Local {
        // Temporary-looking names that are not beside a path lakeswap writes.
        let root = std::path::PathBuf::from(b.url("out"));
        for f in ["docs/report#2", "event_date=2026-11-01/backup.parquet#1"] {
            let p = root.join(f);
            put(&p, b"not lakeswap's");
            let old = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
            std::fs::File::options().write(true).open(&p).unwrap().set_modified(old).unwrap();
            local_temp.push(p);
        }
    }
    // A run killed while it checked a folder is writable leaves an empty probe: removed once
    // old, kept while a starting run may still hold it; lakeswap's either way. A file of that
    // name with bytes in it is not a probe.
    let mut probes = Vec::new();
    if kind == Kind::Local {
        for (at, age, body) in [("out", 3600, ""), (STATE, 3600, ""), ("out", 0, ""), ("out", 3600, "data")] {
            let name = format!(".lakeswap-probe-77-1764806400{age}{}-9f3a", body.len());
            let p = std::path::PathBuf::from(b.url(at)).join(name);
            put(&p, body.as_bytes());
            let then = std::time::SystemTime::now() - std::time::Duration::from_secs(age);
            std::fs::File::options().write(true).open(&p).unwrap().set_modified(then).unwrap();
            probes.push((p, age > 0 && body.is_empty(), !body.is_empty()));
        }
    }
    let job = b.job();
    // A dry run removes nothing, and reports exactly what the real one then removes.
    let before = (b.objects("out").await, b.objects(STATE).await);
    let dry = lakeswap::gc::GcOptions { dry_run: true, ..Default::default() };
    let would = lakeswap::gc::gc(&job.output, &job.state, "event_date", &dry).await.unwrap();
    assert_eq!((b.objects("out").await, b.objects(STATE).await), before, "a dry run removed something");
    assert!(probes.iter().all(|(p, ..)| p.exists()), "a dry run removed a probe");
    let r = lakeswap::gc::gc(&job.output, &job.state, "event_date", &Default::default()).await.unwrap();
    assert_eq!(would, r, "the dry run's report differs from what was removed");
    assert!(
        r.removed.iter().any(|p| p.contains(&format!("staging/{run}/event_date=2026-11-05/part-00000.parquet"))),
        "{r:?}"
    );
    for (p, removed, foreign) in &probes {
        assert_eq!(p.exists(), !removed, "{}: {r:?}", p.display());
        let name = p.file_name().unwrap().to_string_lossy().to_string();
        assert_eq!(r.not_mine.iter().any(|n| n.ends_with(&name)), *foreign, "{name}: {:?}", r.not_mine);
    }
    if kind == Kind::Local {
        assert_eq!(r.temp_files_removed, 2, "{r:?}");
    }
    assert_eq!((r.staging_removed, r.expired_leases), (1, 1), "{r:?}");
    for (at, f) in &foreign {
        assert!(b.objects(at).await.contains_key(f), "{at}/{f} was removed");
        let url = format!("{}/{f}", b.url(at));
        assert!(r.not_mine.iter().any(|n| n.starts_with(&url)), "{url} is not listed: {:?}", r.not_mine);
    }
    let left = b.objects(STATE).await;
    assert!(left.contains_key("leases/event_date=2026-11-09.json"));
    assert!(r.not_mine.iter().any(|n| n.contains("event_date=2026-11-09.json (not a lakeswap lease)")));
    assert!(!left.contains_key(&format!("staging/{run}/event_date=2026-11-05/part-00000.parquet")));
    for p in local_temp {
        assert!(p.exists(), "{} was removed", p.display());
    }
}

/// The revenue job of `b`'s `in` and `out`, with `extra` lines in `[output]`.
fn job_text(b: &crate::common::backends::Backend, extra: &str) -> String {
    if b.kind == crate::common::backends::Kind::Local {
        std::fs::create_dir_all(b.url("in")).unwrap();
    }
    format!(
        "[job]\nname = \"t\"\nkind = \"aggregate\"\n[input]\nurl = \"{}\"\nformat = \"parquet\"\n[identity]\nkey = [\"order_id\"]\n\
         version = \"source_version\"\n{MEASURES}\n[output]\nurl = \"{}\"\n{extra}\n",
        b.url("in"),
        b.url("out")
    )
}

/// A folder that spells a partition's date another way (`event_date=2026-11-1/`,
/// `event_date=2026 11 02/`, escaped `event_date=2026%2D11%2D03/`) is read as that date by
/// readers that take it from the folder name (DuckDB's `hive_partitioning` adds its rows to the
/// date's): its objects are the partition's foreign objects. The run fails the date, verify and
/// status name them, and `foreign_files = "remove"` removes them; folders of other dates, or of
/// no date, stay.
async fn a_second_spelling_of_a_partition_folder_is_refused(kind: crate::common::backends::Kind) {
    use crate::common::backends::{Backend, Kind};
    let b = Backend::new(kind);
    b.write_input(&random_orders(98, 3, 40), 1).await;
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("job.toml");
    std::fs::write(&cfg, job_text(&b, "")).unwrap();
    let c = cfg.to_str().unwrap();
    let run = |extra: &[&str]| {
        let mut args = vec!["run", "--config", c, "--from", "2026-11-01", "--to", "2026-11-03"];
        args.extend_from_slice(extra);
        cli(&args, dir.path())
    };
    let o = run(&[]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let committed = b.partitions().await;
    let file = |d: &str| committed[&format!("event_date={d}/part-00000.parquet")].clone();
    // (date, folder as the store lists it)
    let mut respelled = vec![("2026-11-01", "event_date=2026-11-1"), ("2026-11-02", "event_date=2026 11 02")];
    for (date, folder) in &respelled {
        b.put("out", &format!("{folder}/part-00000.parquet"), file(date)).await;
    }
    if kind == Kind::Local {
        // As a Hive writer escapes it on disk (an object store's own escaping would double it).
        let at = std::path::Path::new(&b.url("out")).join("event_date=2026%2D11%2D03");
        std::fs::create_dir_all(&at).unwrap();
        std::fs::write(at.join("part-00000.parquet"), file("2026-11-03")).unwrap();
        respelled.push(("2026-11-03", "event_date=2026%2D11%2D03"));
    }
    let left_alone = [
        "event_date=2026-11-10/part-00000.parquet",
        "event_date=2026-11-03.bak/part-00000.parquet",
        "event_date=2026-11-01 AD/part-00000.parquet",
    ];
    for at in left_alone {
        b.put("out", at, file("2026-11-03")).await;
    }
    for extra in [&[][..], &["--skip-unchanged"]] {
        let o = run(extra);
        assert_eq!(o.status.code(), Some(1), "{extra:?}: {}", text(&o));
        let t = text(&o);
        for (date, folder) in &respelled {
            let said = t.lines().any(|l| {
                l.starts_with(&format!("error: {date}"))
                    && l.contains(&format!("{folder}/part-00000.parquet"))
                    && l.contains("spells the same date")
            });
            assert!(said, "{extra:?} {folder}: {t}");
        }
        assert_eq!(t.lines().filter(|l| l.starts_with("error: 2026-11-")).count(), respelled.len(), "{extra:?}: {t}");
    }
    let o = cli(&["verify", "--config", c, "--from", "2026-11-01", "--to", "2026-11-03"], dir.path());
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        text(&o).contains("event_date=2026-11-1/part-00000.parquet (its folder spells the same date"),
        "{}",
        text(&o)
    );
    let o = cli(&["status", "--config", c, "--json"], dir.path());
    let st: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let first = st["partitions"].as_array().unwrap().iter().find(|p| p["date"] == "2026-11-01").unwrap();
    assert_eq!(first["foreign"], serde_json::json!(["event_date=2026-11-1/part-00000.parquet"]), "{st:#}");
    // `remove` removes nothing outside a partition's own folder: a folder taken for the date
    // by mistake must never be deleted. Moved away, the dates commit.
    std::fs::write(&cfg, job_text(&b, "foreign_files = \"remove\"")).unwrap();
    let o = run(&[]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("lakeswap removes nothing outside the partition's folder"), "{}", text(&o));
    // Its advice is not to set what is set, in the run, the plan and verify.
    let moved = "Move them away: `foreign_files = \"remove\"` removes only objects inside the partition's own folder";
    assert!(text(&o).contains(moved) && !text(&o).contains("or set `[output]"), "{}", text(&o));
    let plan = text(&run(&["--dry-run"]));
    assert!(plan.contains(&moved.to_lowercase()[..20]) && !plan.contains("or set `foreign_files"), "{plan}");
    let o = cli(&["verify", "--config", c, "--from", "2026-11-01", "--to", "2026-11-03"], dir.path());
    assert!(text(&o).contains(moved) && !text(&o).contains("or set `[output]"), "{}", text(&o));
    let mut want = committed.clone();
    want.extend(left_alone.iter().map(|at| (at.to_string(), file("2026-11-03"))));
    let listed = b.partitions().await;
    assert!(want.iter().all(|(k, v)| listed.get(k) == Some(v)), "nothing removed: {:?}", listed.keys());
    for (_, folder) in &respelled {
        match kind {
            Kind::Local => std::fs::remove_dir_all(std::path::Path::new(&b.url("out")).join(folder)).unwrap(),
            _ => b.delete("out", &format!("{folder}/part-00000.parquet")).await,
        }
    }
    let o = run(&[]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(b.partitions().await, want, "the partitions as they were");
}

/// `foreign_files = "remove"` never removes through a symbolic link: removing
/// `event_date=2026-11-01/old/part-00000.parquet` through `old -> ../event_date=2026-11-03`
/// removed 11-03's partition. The date fails instead, naming the link, and every partition
/// stays.
#[cfg(unix)]
#[tokio::test(flavor = "multi_thread")]
async fn remove_never_removes_through_a_link() {
    use crate::common::backends::{Backend, Kind};
    let b = Backend::new(Kind::Local);
    b.write_input(&random_orders(97, 3, 40), 1).await;
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("job.toml");
    std::fs::write(&cfg, job_text(&b, "foreign_files = \"remove\"")).unwrap();
    let c = cfg.to_str().unwrap();
    let run = || cli(&["run", "--config", c, "--from", "2026-11-01", "--to", "2026-11-03"], dir.path());
    let o = run();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let committed = b.partitions().await;
    let out = std::path::PathBuf::from(b.url("out"));
    std::os::unix::fs::symlink("../event_date=2026-11-03", out.join("event_date=2026-11-01/old")).unwrap();
    std::os::unix::fs::symlink("event_date=2026-11-02", out.join("event_date=2026-11-2")).unwrap();
    let o = run();
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        text(&o).contains("event_date=2026-11-01/old/part-00000.parquet (reached through a symbolic link"),
        "{}",
        text(&o)
    );
    assert!(text(&o).contains("event_date=2026-11-2/part-00000.parquet (its folder spells"), "{}", text(&o));
    for (k, v) in &committed {
        assert_eq!(std::fs::read(out.join(k)).ok().as_ref(), Some(v), "{k} was removed or changed");
    }
}

/// A second object in a partition folder fails that partition (exit 1), naming it; status and
/// verify report it; with `foreign_files = "remove"` the run removes it.
async fn a_foreign_object_in_a_partition_is_refused(kind: crate::common::backends::Kind) {
    use crate::common::backends::Backend;
    let b = Backend::new(kind);
    let rows = random_orders(99, 2, 40);
    b.write_input(&rows, 1).await;
    let dir = tempfile::tempdir().unwrap();
    let cfg_text = |extra: &str| job_text(&b, extra);
    let cfg = dir.path().join("job.toml");
    std::fs::write(&cfg, cfg_text("")).unwrap();
    let c = cfg.to_str().unwrap();
    let o = cli(&["run", "--config", c, "--from", "2026-11-01", "--to", "2026-11-02"], dir.path());
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let committed = b.partitions().await;
    b.put(
        "out",
        "event_date=2026-11-01/part-00001.parquet",
        committed["event_date=2026-11-01/part-00000.parquet"].clone(),
    )
    .await;
    let o = cli(&["run", "--config", c, "--from", "2026-11-01", "--to", "2026-11-02"], dir.path());
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let t = text(&o);
    assert!(
        t.contains("error: 2026-11-01")
            && t.contains("event_date=2026-11-01/part-00001.parquet")
            && t.contains("foreign_files"),
        "{t}"
    );
    let o = cli(&["status", "--config", c], dir.path());
    assert!(text(&o).contains("foreign objects") && text(&o).contains("part-00001.parquet"), "{}", text(&o));
    let o = cli(&["verify", "--config", c, "--from", "2026-11-01", "--to", "2026-11-02"], dir.path());
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("objects lakeswap did not write"), "{}", text(&o));
    assert!(b.get("out", "event_date=2026-11-01/part-00001.parquet").await.is_some(), "never deleted unasked");
    std::fs::write(&cfg, cfg_text("foreign_files = \"remove\"")).unwrap();
    let o = cli(&["run", "--config", c, "--from", "2026-11-01", "--to", "2026-11-02"], dir.path());
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(b.partitions().await, committed, "the foreign object is gone, the partition as it was");
}

macro_rules! suite {
    ($name:ident, $kind:expr $(, $attr:meta)?) => {
        mod $name {
            #[tokio::test(flavor = "multi_thread")]
            $(#[$attr])?
            async fn gc_touches_only_what_lakeswap_wrote() {
                super::gc_touches_only_what_lakeswap_wrote($kind).await
            }
            #[tokio::test(flavor = "multi_thread")]
            $(#[$attr])?
            async fn a_foreign_object_in_a_partition_is_refused() {
                super::a_foreign_object_in_a_partition_is_refused($kind).await
            }
            #[tokio::test(flavor = "multi_thread")]
            $(#[$attr])?
            async fn a_second_spelling_of_a_partition_folder_is_refused() {
                super::a_second_spelling_of_a_partition_folder_is_refused($kind).await
            }
        }
    };
}

suite!(local, crate::common::backends::Kind::Local);
suite!(s3, crate::common::backends::Kind::S3, ignore = "needs the S3 server that scripts/test starts (not requested)");

/// Risk: a table run every hour gathers a journal per run forever, and each merge run, `status`
/// and `--retry-failed` read them all. `gc --runs-older-than AGE` removes the journals of runs
/// that finished longer ago, and never the newest run's, one still running (or killed), one
/// with a move left to complete, or one that failed a date no later run has done since.
#[test]
fn gc_removes_the_journals_of_runs_that_finished_long_ago() {
    let lake = Lake::new();
    lake.write_hive(&random_orders(97, 2, 50), 1);
    let cfg = lake.config();
    let cfg = cfg.to_str().unwrap();
    let run_with = |from: &str, to: &str, extra: &[&str], code: i32| {
        let o = cli(&[&["run", "--config", cfg, "--from", from, "--to", to], extra].concat(), lake.dir.path());
        assert_eq!(o.status.code(), Some(code), "{}", text(&o));
    };
    let run = |from: &str, to: &str| run_with(from, to, &[], 0);
    run("2026-11-01", "2026-11-01");
    // A date without input fails, and no later run does it.
    run_with("2026-11-05", "2026-11-05", &[], 1);
    run("2026-11-02", "2026-11-02");
    run("2026-11-01", "2026-11-02");
    let runs = lake.state().join("runs");
    let names = || {
        let mut v: Vec<String> =
            std::fs::read_dir(&runs).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        v.sort();
        v
    };
    let finished = names();
    assert_eq!(finished.len(), 4, "{finished:?}");
    // A killed run (its journal still `running`) and one with a move left to complete.
    let j: serde_json::Value = serde_json::from_slice(&std::fs::read(runs.join(&finished[0])).unwrap()).unwrap();
    let mut killed = j.clone();
    killed["run_id"] = "20200101T000000.000Z-aaaaaa".into();
    killed["status"] = "running".into();
    put(&runs.join("20200101T000000.000Z-aaaaaa.json"), &serde_json::to_vec(&killed).unwrap());
    let mut moving = j.clone();
    moving["run_id"] = "20200101T000000.000Z-bbbbbb".into();
    moving["pending"] =
        serde_json::json!([{"dir": "event_date=2026-11-01", "e_tag": null, "version": null, "existed": false}]);
    put(&runs.join("20200101T000000.000Z-bbbbbb.json"), &serde_json::to_vec(&moving).unwrap());
    // Every journal finished 40 days ago.
    let age = |name: &str, days: u64| {
        let f = std::fs::File::options().write(true).open(runs.join(name)).unwrap();
        f.set_modified(std::time::SystemTime::now() - std::time::Duration::from_secs(days * 86_400)).unwrap();
    };
    names().iter().for_each(|n| age(n, 40));
    let gc = |extra: &[&str]| {
        let o = cli(&[&["gc", "--config", cfg], extra].concat(), lake.dir.path());
        assert_eq!(o.status.code(), Some(0), "{}", text(&o));
        text(&o)
    };
    // Younger than the age: kept.
    assert!(!gc(&["--runs-older-than", "60d"]).contains("journal"), "{:?}", names());
    assert_eq!(names().len(), 6);
    let o = gc(&["--runs-older-than", "30d", "--dry-run"]);
    assert!(o.contains("would remove 2 journal(s) of runs that finished more than 30d ago"), "{o}");
    assert!(o.contains(&finished[0]) && o.contains(&finished[2]) && !o.contains(&finished[3]), "{o}");
    assert_eq!(names().len(), 6, "a dry run removes nothing");
    let o = gc(&["--runs-older-than", "30d"]);
    assert!(o.contains("removed 2 journal(s)"), "{o}");
    let kept = names();
    assert_eq!(
        kept,
        ["20200101T000000.000Z-aaaaaa.json", "20200101T000000.000Z-bbbbbb.json", &finished[1], &finished[3]],
        "the killed run's, the unfinished move's, the unmended failure's and the newest run's journals stay"
    );
    let o = cli(&["status", "--config", cfg], lake.dir.path());
    assert!(text(&o).contains("2026-11-05"), "status still shows the failed date: {}", text(&o));
    // Later runs, one doing the failed date: the journals they supersede go at the next gc.
    run_with("2026-11-05", "2026-11-05", &["--allow-empty"], 0);
    run("2026-11-01", "2026-11-01");
    assert!(gc(&["--runs-older-than", "30d"]).contains("removed 2 journal(s)"));
    assert!(!names().contains(&finished[1]) && !names().contains(&finished[3]) && names().len() == 4, "{:?}", names());
    let o = cli(&["gc", "--config", cfg, "--runs-older-than", "soon"], lake.dir.path());
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
}
