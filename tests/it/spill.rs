//! Risk: a partition larger than `--memory-limit` is spilled to disk by key hash and prepared
//! bucket by bucket; a key's versions split across buckets, rows reaching the engine in
//! another order, or a spill left behind would change the numbers or the disk. The same data
//! under a tiny limit and under the default must give the same files, byte for byte (floats
//! included), the same conflicts, the same set-aside rows; a killed run's spill is `gc`'s; a
//! full spill disk fails the partition and touches nothing committed.

use crate::common::*;
use std::path::{Path, PathBuf};

/// A float sum and average (order-sensitive), a float sum and average of distinct values (added
/// in the order of the engine's hash set, whose size could follow how rows are batched), a
/// decimal sum, a distinct count, per currency.
const SQL: &str = r#"
[aggregate]
sql = """
SELECT currency, count(*) AS orders, sum(amount) AS revenue, sum(CAST(amount AS DOUBLE) / 7) AS float_sum,
       avg(CAST(amount AS DOUBLE)) AS float_avg, count(DISTINCT customer_id) AS customers,
       sum(DISTINCT CAST(amount AS DOUBLE) / 7) AS distinct_float_sum,
       avg(DISTINCT CAST(amount AS DOUBLE) / 3) AS distinct_float_avg, min(status) AS first_status
FROM events GROUP BY currency
"""
"#;

/// No groups: a float sum over the whole date (sensitive to how rows are batched), and
/// `events` read twice.
const GLOBAL: &str = r#"
[aggregate]
sql = """
SELECT count(*) AS orders, sum(CAST(amount AS DOUBLE) / 7) AS float_sum, avg(CAST(amount AS DOUBLE)) AS float_avg,
       approx_median(CAST(amount AS DOUBLE) / 7) AS approx,
       (SELECT count(DISTINCT customer_id) FROM events) AS customers
FROM events
"""
"#;

fn write(lake: &Lake, name: &str, text: String) -> PathBuf {
    let p = lake.dir.path().join(name);
    std::fs::write(&p, text).unwrap();
    p
}

/// A config over the lake, with `identity` and `extra` sections and `aggregate`.
fn config(lake: &Lake, name: &str, identity: &str, aggregate: &str) -> PathBuf {
    let text = format!(
        "[job]\nname = \"revenue_daily\"\nkind = \"aggregate\"\n\n[input]\nurl = \"{}\"\nformat = \"parquet\"\n\n[identity]\n{identity}\n{aggregate}\n[output]\nurl = \"{}\"\n",
        lake.input().display(),
        lake.output().display()
    );
    write(lake, name, text)
}

fn run(lake: &Lake, cfg: &Path, extra: &[&str]) -> std::process::Output {
    let mut args = vec!["run", "--config", cfg.to_str().unwrap(), "--from", "2026-11-01", "--to", "2026-11-03"];
    args.extend_from_slice(extra);
    cli(&args, lake.dir.path())
}

fn summary(path: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn spilled(s: &serde_json::Value) -> Vec<u64> {
    s["partitions"].as_array().unwrap().iter().map(|p| p["spilled_bytes"].as_u64().unwrap_or(0)).collect()
}

/// Runs `cfg` under `limit`, spilling into the lake's `spill/`; its output and summary.
/// Nothing of the run is left in the spill folder.
fn run_under(lake: &Lake, cfg: &Path, limit: &str) -> (std::process::Output, serde_json::Value) {
    let spill = lake.dir.path().join("spill");
    std::fs::create_dir_all(&spill).unwrap();
    let s = lake.dir.path().join("summary.json");
    let o = run(
        lake,
        cfg,
        &["--memory-limit", limit, "--spill-dir", spill.to_str().unwrap(), "--summary-json", s.to_str().unwrap()],
    );
    assert_eq!(std::fs::read_dir(&spill).unwrap().count(), 0, "spill left behind: {}", text(&o));
    (o, summary(&s))
}

/// Runs `cfg` in memory, then again under a 1 MiB limit in a fresh output; both tables and
/// summaries.
fn both(
    lake: &Lake,
    cfg: &Path,
) -> [(std::process::Output, std::collections::BTreeMap<String, Vec<u8>>, serde_json::Value); 2] {
    both_under(lake, cfg, "1MiB")
}

/// [`both`], spilled under `limit`.
fn both_under(
    lake: &Lake,
    cfg: &Path,
    limit: &str,
) -> [(std::process::Output, std::collections::BTreeMap<String, Vec<u8>>, serde_json::Value); 2] {
    let mut out = Vec::new();
    for limit in ["8GiB", limit] {
        let _ = std::fs::remove_dir_all(lake.output());
        let _ = std::fs::remove_dir_all(lake.state());
        let (o, s) = run_under(lake, cfg, limit);
        out.push((o, lake.snapshot(), s));
    }
    out.try_into().unwrap()
}

/// A config over the lake's `format` text objects (`amount` declared `decimal(12,2)`), keyed by
/// `order_id` and versioned, computing `sql`.
fn text_config(lake: &Lake, format: &str, sql: &str) -> PathBuf {
    let cfg = config(lake, &format!("{format}.toml"), "key = [\"order_id\"]\nversion = \"source_version\"", sql);
    let declared = format!("format = \"{format}\"\nschema = {{ amount = \"decimal(12,2)\" }}");
    let t = std::fs::read_to_string(&cfg).unwrap().replace("format = \"parquet\"", &declared);
    std::fs::write(&cfg, t).unwrap();
    cfg
}

/// Runs `cfg` in memory and spilled ([`both`]): both succeed, every date spills, the same files.
fn same_spilled(lake: &Lake, cfg: &Path) {
    let [(mem, mem_files, _), (sp, sp_files, sp_sum)] = both(lake, cfg);
    assert!(mem.status.success() && sp.status.success(), "{}\n{}", text(&mem), text(&sp));
    assert!(spilled(&sp_sum).iter().all(|&b| b > 0), "{sp_sum}");
    assert!(mem_files == sp_files, "the spilled partitions differ from the in-memory ones");
}

#[test]
fn a_partition_spilled_under_a_tiny_limit_gives_the_in_memory_bytes() {
    let lake = Lake::new();
    let rows = random_orders(16, 3, 20_000);
    lake.write_hive(&rows, 3);
    // The shorthand (against the model) and SQL with float sums (order-sensitive).
    let measures = lake.config();
    let key = "key = [\"order_id\"]\nversion = \"source_version\"";
    let sql = config(&lake, "sql.toml", key, SQL);
    let global = config(&lake, "global.toml", key, GLOBAL);
    for cfg in [measures.clone(), sql, global] {
        let [(mem, mem_files, mem_sum), (sp, sp_files, sp_sum)] = both(&lake, &cfg);
        assert!(mem.status.success() && sp.status.success(), "{}\n{}", text(&mem), text(&sp));
        assert_eq!(spilled(&mem_sum), [0, 0, 0]);
        assert!(spilled(&sp_sum).iter().all(|&b| b > 0), "every partition spilled: {sp_sum}");
        assert_eq!(mem_files.len(), 3);
        assert!(mem_files == sp_files, "the spilled partitions differ from the in-memory ones ({})", cfg.display());
        assert_eq!(mem_sum["partitions"][0]["counts"], sp_sum["partitions"][0]["counts"]);
        if cfg == measures {
            // The shorthand's numbers (the spilled run's files) are the model's.
            for (date, rows) in model(&rows) {
                assert_eq!(read_partition(&lake.partition_file(&date.to_string())), rows, "{date}");
            }
        }
    }
}

/// Windows without an order over dates large enough for the engine's sort to cut its input
/// into runs (150,000 rows of 8 groups a date, in row groups of 20,000): in memory and
/// spilled (under a limit whose share holds the window, which does not spill), the same bytes.
#[test]
fn windows_without_an_order_give_the_same_bytes_when_spilled() {
    use arrow::array::{ArrayRef, Float64Array, Int64Array, RecordBatch, StringArray};
    use arrow::datatypes::{DataType, Field, Schema};
    use std::sync::Arc;
    let lake = Lake::new();
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("ver", DataType::Int64, false),
        Field::new("grp", DataType::Utf8, false),
        Field::new("x", DataType::Float64, false),
    ]));
    use rand::{Rng, SeedableRng};
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(150_000);
    let props =
        parquet::file::properties::WriterProperties::builder().set_max_row_group_row_count(Some(20_000)).build();
    for day in 1..=3i64 {
        for part in 0..3 {
            let r: Vec<u64> = (0..50_000).map(|_| rng.random()).collect();
            let id = Int64Array::from_iter_values(r.iter().map(|v| day * 1_000_000 + (v % 100_000) as i64));
            let ver = Int64Array::from_iter_values((0..50_000).map(|i| part * 50_000 + i));
            let grp: StringArray =
                r.iter().map(|v| Some(["a", "b", "c", "d", "e", "f", "g", "h"][(v >> 20) as usize % 8])).collect();
            let x = Float64Array::from_iter_values(
                r.iter().map(|v| ((v >> 11) as f64 / (1u64 << 53) as f64 - 0.5) * 10f64.powi((v >> 3) as i32 % 17 - 5)),
            );
            let columns: Vec<ArrayRef> = vec![Arc::new(id), Arc::new(ver), Arc::new(grp), Arc::new(x)];
            let b = RecordBatch::try_new(schema.clone(), columns).unwrap();
            let path = lake.input().join(format!("event_date=2026-11-0{day}/part-{part}.parquet"));
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            let mut w = parquet::arrow::ArrowWriter::try_new(
                std::fs::File::create(&path).unwrap(),
                schema.clone(),
                Some(props.clone()),
            )
            .unwrap();
            w.write(&b).unwrap();
            w.close().unwrap();
        }
    }
    let sql = r#"
[aggregate]
sql = """
SELECT DISTINCT grp, sum(x) OVER (PARTITION BY grp) AS window_sum, first_value(id) OVER (PARTITION BY grp) AS first_id
FROM events
"""
"#;
    let cfg = config(&lake, "windows.toml", "key = [\"id\"]\nversion = \"ver\"", sql);
    let [(mem, mem_files, mem_sum), (sp, sp_files, sp_sum)] = both_under(&lake, &cfg, "24MiB");
    assert!(mem.status.success() && sp.status.success(), "{}\n{}", text(&mem), text(&sp));
    assert_eq!(spilled(&mem_sum), [0, 0, 0]);
    assert!(spilled(&sp_sum).iter().all(|&b| b > 0), "every partition spilled: {sp_sum}");
    assert!(mem_files == sp_files, "the spilled partitions differ from the in-memory ones");
}

#[test]
fn deletes_conflicts_and_set_aside_rows_are_the_same_when_spilled() {
    let lake = Lake::new();
    let mut rows = random_orders(17, 3, 15_000);
    // Conflicts: one key and version, two payloads — many keys, so they fall in many buckets.
    let mut bad: Vec<Order> = rows.iter().filter(|r| r.version == 1).step_by(997).cloned().collect();
    assert!(bad.len() > 10);
    for r in &mut bad {
        r.cents += 1;
    }
    rows.extend(bad.iter().cloned());
    lake.write_hive(&rows, 2);
    let key = "key = [\"order_id\"]\nversion = \"source_version\"";
    // Fail: exit 3, the same first keys and total.
    let fail = config(&lake, "fail.toml", key, SQL);
    let [(mem, _, mem_sum), (sp, _, sp_sum)] = both(&lake, &fail);
    assert_eq!((mem.status.code(), sp.status.code()), (Some(3), Some(3)), "{}", text(&sp));
    for p in 0..3 {
        let (m, s) = (&mem_sum["partitions"][p]["error"], &sp_sum["partitions"][p]["error"]);
        assert!(m.as_str().unwrap().contains("conflicting key(s)"), "{m}");
        assert_eq!(m, s);
    }
    // Quarantine and deletes: the same files, the same set-aside rows.
    let deleted = format!("{key}\ndeleted = {{ column = \"status\", equals = \"refunded\" }}\n\n[prepare]\non_conflict = \"quarantine\"\n");
    let aside = config(&lake, "aside.toml", &deleted, SQL);
    let [(mem, mem_files, mem_sum), (sp, sp_files, sp_sum)] = both(&lake, &aside);
    assert!(mem.status.success() && sp.status.success(), "{}", text(&sp));
    assert!(spilled(&sp_sum).iter().all(|&b| b > 0));
    assert!(mem_files == sp_files);
    for p in 0..3 {
        assert_eq!(mem_sum["partitions"][p]["counts"], sp_sum["partitions"][p]["counts"]);
        assert!(mem_sum["partitions"][p]["counts"]["deleted"].as_u64().unwrap() > 0);
        assert!(mem_sum["partitions"][p]["counts"]["quarantined_rows"].as_u64().unwrap() > 0);
    }
}

/// The spill folders (`lakeswap-<run id>`) in `dir`.
fn spill_folders(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir).map(|r| r.flatten().map(|e| e.path()).filter(|p| p.is_dir()).collect()).unwrap_or_default()
}

#[test]
fn a_run_killed_while_spilling_leaves_the_table_alone_and_gc_removes_its_spill() {
    let lake = Lake::new();
    lake.write_hive(&random_orders(18, 1, 200_000), 4);
    let cfg = lake.config();
    let spill = lake.dir.path().join("spill");
    std::fs::create_dir_all(&spill).unwrap();
    let date = ["--date", "2026-11-01", "--lease-ttl", "2"];
    let mut args = vec!["run", "--config", cfg.to_str().unwrap()];
    args.extend_from_slice(&date);
    // A committed partition first (in memory).
    assert!(cli(&args, lake.dir.path()).status.success());
    let before = lake.snapshot();
    args.extend_from_slice(&["--memory-limit", "1MiB", "--spill-dir", spill.to_str().unwrap()]);
    // Killed once its spill holds bucket files.
    let mut child = spilling(lake.dir.path(), &args, &spill);
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(spill_folders(&spill).len(), 1, "the killed run's spill stays until gc");
    assert!(lake.snapshot() == before, "the table changed");
    // Once the killed run's lease has expired, gc removes its spill (and only spill folders
    // of this table's runs).
    let other = spill.join("lakeswap-not-ours");
    std::fs::create_dir_all(&other).unwrap();
    std::thread::sleep(std::time::Duration::from_secs(3));
    let o = cli(&["gc", "--config", cfg.to_str().unwrap(), "--spill-dir", spill.to_str().unwrap()], lake.dir.path());
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("removed 1 spill folder"), "{}", text(&o));
    assert_eq!(spill_folders(&spill), [other]);
    assert!(lake.snapshot() == before);
}

/// lakeswap started with `args` in `dir`, returned once its spill folder in `spill` holds
/// bucket files.
fn spilling(dir: &Path, args: &[&str], spill: &Path) -> std::process::Child {
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_lakeswap"))
        .args(args)
        .current_dir(dir)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let started = std::time::Instant::now();
    loop {
        let files = spill_folders(spill).iter().flat_map(|f| walk(f)).count();
        if files > 8 {
            return child;
        }
        assert!(child.try_wait().unwrap().is_none(), "lakeswap ended before it spilled");
        assert!(started.elapsed().as_secs() < 60, "no spill after a minute");
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
}

/// `verify` stopped by a signal while it spills exits at once (128 + the signal) and removes
/// its spill folder; it wrote nothing else.
#[test]
fn verify_stopped_while_spilling_removes_its_spill() {
    let lake = Lake::new();
    lake.write_hive(&random_orders(24, 1, 200_000), 4);
    let cfg = lake.config();
    let spill = lake.dir.path().join("spill");
    std::fs::create_dir_all(&spill).unwrap();
    let mut args = vec!["run", "--config", cfg.to_str().unwrap(), "--date", "2026-11-01"];
    assert!(cli(&args, lake.dir.path()).status.success());
    let before = lake.snapshot();
    args[0] = "verify";
    args.extend_from_slice(&["--memory-limit", "1MiB", "--spill-dir", spill.to_str().unwrap()]);
    for (sig, code) in [(libc::SIGTERM, 143), (libc::SIGINT, 130)] {
        let mut child = spilling(lake.dir.path(), &args, &spill);
        // SAFETY: sends a signal to the child this test started.
        assert_eq!(unsafe { libc::kill(child.id() as i32, sig) }, 0);
        assert_eq!(child.wait().unwrap().code(), Some(code));
        assert_eq!(spill_folders(&spill).len(), 0, "the stopped verify removed its spill");
        assert!(lake.snapshot() == before);
    }
}

/// A tmpfs of `size` mounted at `dir` (CI runs as root), unmounted when dropped.
struct Tiny(PathBuf);

impl Tiny {
    fn mount(dir: &Path, size: &str) -> Tiny {
        std::fs::create_dir_all(dir).unwrap();
        let o = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs", dir.to_str().unwrap()])
            .output()
            .unwrap();
        assert!(o.status.success(), "this test mounts a small tmpfs (as root): {}", String::from_utf8_lossy(&o.stderr));
        Tiny(dir.to_path_buf())
    }
}

impl Drop for Tiny {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(&self.0).status();
    }
}

/// A lake whose 2026-11-01 is committed, and the arguments that run it again spilled under
/// 1 MiB into `spill`; the table as committed.
fn committed_then_spilled(lake: &Lake, spill: &Path) -> (Vec<String>, std::collections::BTreeMap<String, Vec<u8>>) {
    lake.write_hive(&random_orders(19, 1, 40_000), 2);
    let cfg = lake.config().to_str().unwrap().to_string();
    let base = ["run", "--config", &cfg, "--date", "2026-11-01"];
    assert!(cli(&base, lake.dir.path()).status.success());
    let mut args: Vec<String> = base.iter().map(|a| a.to_string()).collect();
    args.extend(["--memory-limit", "1MiB", "--spill-dir", spill.to_str().unwrap()].map(String::from));
    (args, lake.snapshot())
}

#[test]
fn a_full_spill_disk_fails_the_partition_and_keeps_what_is_committed() {
    let lake = Lake::new();
    let spill = lake.dir.path().join("tiny");
    let (args, before) = committed_then_spilled(&lake, &spill);
    let _tiny = Tiny::mount(&spill, "256k");
    let o = cli(&args.iter().map(String::as_str).collect::<Vec<_>>(), lake.dir.path());
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("spilling to") && text(&o).contains("--spill-dir"), "{}", text(&o));
    assert!(lake.snapshot() == before);
    assert_eq!(spill_folders(&spill).len(), 0, "the failed run removed its spill");
}

/// Spill files past the file-size limit (`ulimit -f`): the process was killed by SIGXFSZ
/// without a word, its summary left saying `running`. The write fails instead, and so does
/// the partition, saying why (exit 1); what is committed stays.
#[test]
fn a_file_size_limit_fails_the_partition_and_keeps_what_is_committed() {
    let lake = Lake::new();
    let spill = lake.dir.path().join("spill");
    let (mut args, before) = committed_then_spilled(&lake, &spill);
    let summary_at = lake.dir.path().join("summary.json");
    args.extend(["--summary-json".to_string(), summary_at.to_str().unwrap().to_string()]);
    // 64 blocks of 512 bytes: 32 KiB a file.
    let o = std::process::Command::new("sh")
        .arg("-c")
        .arg("ulimit -f 64 && exec \"$0\" \"$@\"")
        .arg(env!("CARGO_BIN_EXE_lakeswap"))
        .args(args)
        .current_dir(lake.dir.path())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("spilling to") && text(&o).contains("File too large"), "{}", text(&o));
    assert_eq!(summary(&summary_at)["exit_code"], 1);
    assert!(lake.snapshot() == before);
    assert_eq!(spill_folders(&spill).len(), 0, "the failed run removed its spill");
}

#[test]
fn a_spill_folder_inside_the_table_its_state_its_input_or_a_lookup_is_refused() {
    let lake = Lake::new();
    lake.write_hive(&random_orders(21, 1, 100), 1);
    let cfg = lake.config();
    let fx = lake.dir.path().join("fx");
    std::fs::create_dir_all(&fx).unwrap();
    std::fs::write(fx.join("fx.csv"), "currency,rate\nUSD,1\n").unwrap();
    let text_cfg = std::fs::read_to_string(&cfg).unwrap();
    std::fs::write(
        &cfg,
        format!("{text_cfg}\n[[aggregate.tables]]\nname = \"fx\"\nurl = \"{}\"\nformat = \"csv\"\n", fx.display()),
    )
    .unwrap();
    let base = ["run", "--config", cfg.to_str().unwrap(), "--date", "2026-11-01"];
    assert!(cli(&base, lake.dir.path()).status.success());
    let before = lake.snapshot();
    // A `..` after a folder that does not exist yet leads where creating it would.
    let table_name = lake.output().file_name().unwrap().to_owned();
    let around = lake.output().parent().unwrap().join("not-yet").join("..").join(table_name).join("x");
    for inside in [
        lake.output(),
        lake.output().join("event_date=2026-11-01/x"),
        around,
        lake.state(),
        lake.input().join("s"),
        fx.join("spill"),
    ] {
        let mut args = base.to_vec();
        args.extend_from_slice(&["--memory-limit", "1MiB", "--spill-dir", inside.to_str().unwrap()]);
        let o = cli(&args, lake.dir.path());
        assert_eq!(o.status.code(), Some(2), "{}: {}", inside.display(), text(&o));
        assert!(text(&o).contains("lies inside the") && text(&o).contains("Nothing was done"), "{}", text(&o));
        assert!(lake.snapshot() == before);
    }
    assert!(!lake.output().parent().unwrap().join("not-yet").exists(), "nothing created");
    // A path through a file is no folder: refused before anything runs.
    let file = lake.dir.path().join("a-file");
    std::fs::write(&file, "x").unwrap();
    for through in [file.clone(), file.join("spill")] {
        let mut args = base.to_vec();
        args.extend_from_slice(&["--spill-dir", through.to_str().unwrap()]);
        let o = cli(&args, lake.dir.path());
        assert_eq!(o.status.code(), Some(2), "{}", text(&o));
        assert!(text(&o).contains("is not a folder") && text(&o).contains("Nothing was done"), "{}", text(&o));
    }
}

/// `verify` recomputes within the budget a run has: a date a run spills is verified spilled
/// (the budget from `LAKESWAP_MEMORY_LIMIT` too), its spill folder emptied; a spill folder
/// whose parent is missing is refused before anything runs, and nothing is created.
#[test]
fn verify_spills_as_a_run_does_and_a_spill_folder_needs_its_parent() {
    let lake = Lake::new();
    lake.write_hive(&random_orders(23, 1, 40_000), 2);
    let cfg = lake.config();
    let spill = lake.dir.path().join("spill");
    let args = |command: &'static str| {
        vec![command, "--config", cfg.to_str().unwrap(), "--date", "2026-11-01", "--spill-dir", spill.to_str().unwrap()]
    };
    // The folder itself is created; a run spills into it and empties it.
    let s = lake.dir.path().join("summary.json");
    let mut run_args = args("run");
    run_args.extend_from_slice(&["--memory-limit", "1MiB", "--summary-json", s.to_str().unwrap()]);
    let o = cli(&run_args, lake.dir.path());
    assert!(o.status.success(), "{}", text(&o));
    assert!(spilled(&summary(&s))[0] > 0, "the run spilled");
    assert_eq!(spill_folders(&spill).len(), 0);
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_lakeswap"))
        .args(args("verify"))
        .args(["--json"])
        .env("LAKESWAP_MEMORY_LIMIT", "1MiB")
        // Not the default folder: refused there, where verify without --spill-dir would go.
        .env("TMPDIR", lake.dir.path().join("no-such").join("tmp"))
        .current_dir(lake.dir.path())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let report: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(report["partitions"][0]["action"], "verified", "{report}");
    assert!(report["partitions"][0]["spilled_bytes"].as_u64().unwrap_or(0) > 0, "verified spilled: {report}");
    assert_eq!(spill_folders(&spill).len(), 0, "verify emptied its spill folder");
    // A parent that is not there: refused, for run and verify, and nothing made.
    let before = lake.snapshot();
    let missing = lake.dir.path().join("not-mounted").join("spill");
    for command in ["run", "verify"] {
        let mut a = args(command);
        a[6] = missing.to_str().unwrap();
        let o = cli(&a, lake.dir.path());
        assert_eq!(o.status.code(), Some(2), "{command}: {}", text(&o));
        assert!(text(&o).contains("does not exist") && text(&o).contains("Nothing was done"), "{}", text(&o));
        assert!(!lake.dir.path().join("not-mounted").exists(), "{command} created nothing");
        assert!(lake.snapshot() == before);
    }
}

#[test]
fn memory_limits_are_checked_before_anything_runs() {
    let lake = Lake::new();
    lake.write_hive(&random_orders(20, 1, 100), 1);
    let cfg = lake.config();
    // Empty, as every other flag: the default is the flag left out.
    for bad in ["lots", "0%", "512KiB", "4 GiBs", "", " "] {
        let o = cli(
            &["run", "--config", cfg.to_str().unwrap(), "--date", "2026-11-01", "--memory-limit", bad],
            lake.dir.path(),
        );
        assert_eq!(o.status.code(), Some(2), "{bad}: {}", text(&o));
        assert!(text(&o).contains("--memory-limit"), "{}", text(&o));
        assert!(!lake.output().exists());
    }
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_lakeswap"))
        .args(["run", "--config", cfg.to_str().unwrap(), "--date", "2026-11-01"])
        .env("LAKESWAP_MEMORY_LIMIT", "")
        .current_dir(lake.dir.path())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("LAKESWAP_MEMORY_LIMIT") && text(&o).contains("empty"), "{}", text(&o));
    // More than the machine holds: run, and said (a date past memory would not be spilled).
    let o = cli(
        &["run", "--config", cfg.to_str().unwrap(), "--date", "2026-11-01", "--memory-limit", "1000TiB"],
        lake.dir.path(),
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(text(&o).contains("more than this machine's memory"), "{}", text(&o));
}

#[test]
fn csv_spills_like_parquet_and_bad_values_are_named_alike() {
    let lake = Lake::new();
    let rows = random_orders(21, 3, 12_000);
    for day in ["2026-11-01", "2026-11-02", "2026-11-03"] {
        let day_rows: Vec<Order> = rows.iter().filter(|r| r.date == d(day)).cloned().collect();
        for (i, part) in day_rows.chunks(day_rows.len() / 2 + 1).enumerate() {
            let p = lake.input().join(format!("event_date={day}/events-{i}.csv"));
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, csv_bytes(part)).unwrap();
        }
    }
    let cfg = lake.config();
    let t = std::fs::read_to_string(&cfg).unwrap().replace(
        "format = \"parquet\"",
        "format = \"csv\"\nschema = { amount = \"decimal(12,2)\", event_date = \"date\" }",
    );
    std::fs::write(&cfg, t).unwrap();
    let [(mem, mem_files, _), (sp, sp_files, sp_sum)] = both(&lake, &cfg);
    assert!(mem.status.success() && sp.status.success(), "{}", text(&sp));
    assert!(spilled(&sp_sum).iter().all(|&b| b > 0), "{sp_sum}");
    assert!(mem_files == sp_files);
    // A bad amount deep in the second object of a date: the same object, row and line.
    let p = lake.input().join("event_date=2026-11-02/events-1.csv");
    let mut lines: Vec<String> = std::fs::read_to_string(&p).unwrap().lines().map(str::to_string).collect();
    let at = lines.len() - 7;
    let fields: Vec<&str> = lines[at].split(',').collect();
    let amount = fields.iter().position(|f| f.contains('.')).unwrap();
    let mut broken: Vec<String> = fields.iter().map(|s| s.to_string()).collect();
    broken[amount] = "12.3.4".into();
    lines[at] = broken.join(",");
    std::fs::write(&p, lines.join("\n") + "\n").unwrap();
    let [(mem, _, mem_sum), (sp, _, sp_sum)] = both(&lake, &cfg);
    assert_eq!((mem.status.code(), sp.status.code()), (Some(3), Some(3)), "{}", text(&sp));
    let (m, s) = (&mem_sum["partitions"][1]["error"], &sp_sum["partitions"][1]["error"]);
    assert!(
        m.as_str().unwrap().contains("events-1.csv") && m.as_str().unwrap().contains(&format!("line {}", at + 1)),
        "{m}"
    );
    assert_eq!(m, s);
}

/// Long CSV objects (three batches of text each) are read a batch at a time when spilled: an
/// undeclared column whose last value alone is not an integer is a double from its first row
/// on, as in memory, and a quote never closed at the very end fails the date as in memory.
#[test]
fn a_long_csv_object_is_typed_by_all_its_values_when_spilled() {
    let lake = Lake::new();
    let rows = 150_000;
    for (n, day) in ["2026-11-01", "2026-11-02", "2026-11-03"].into_iter().enumerate() {
        let mut t = String::from("order_id,source_version,currency,amount,score,customer_id\n");
        for i in 0..rows {
            // One version in ten is repeated exactly, one key in seven has a second version.
            let (key, version) = match i % 10 {
                9 => (i - 1, 1 + (i - 1) % 7 / 6),
                _ => (i, 1 + i % 7 / 6),
            };
            let score = if i == rows - 3 { "2.5".to_string() } else { (key % 1000).to_string() };
            let currency = ["USD", "EUR", "GBP"][key % 3];
            t += &format!("o{n}-{key:07},{version},{currency},{}.{:02},{score},c{}\n", key % 500, key % 100, key % 997);
        }
        let p = lake.input().join(format!("event_date={day}/events.csv"));
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, t).unwrap();
    }
    let sql = r#"
[aggregate]
sql = """
SELECT currency, count(*) AS orders, sum(score) AS score, arrow_typeof(min(score)) AS score_type,
       sum(amount) AS revenue, count(DISTINCT customer_id) AS customers
FROM events GROUP BY currency
"""
"#;
    let cfg = text_config(&lake, "csv", sql);
    same_spilled(&lake, &cfg);
    let out = read_batch(&lake.partition_file("2026-11-02"));
    let types = out.column_by_name("score_type").unwrap();
    let types = types.as_any().downcast_ref::<arrow::array::StringArray>().unwrap();
    assert!(types.iter().all(|t| t == Some("Float64")), "{types:?}");
    // A quote opened in the last line and never closed: the same error, in memory and spilled.
    let p = lake.input().join("event_date=2026-11-02/events.csv");
    let mut t = std::fs::read_to_string(&p).unwrap();
    t += "o9999999,1,USD,1.00,7,\"c1\n";
    std::fs::write(&p, t).unwrap();
    let [(mem, _, mem_sum), (sp, _, sp_sum)] = both(&lake, &cfg);
    assert_eq!((mem.status.code(), sp.status.code()), (Some(3), Some(3)), "{}", text(&sp));
    let (m, s) = (&mem_sum["partitions"][1]["error"], &sp_sum["partitions"][1]["error"]);
    assert!(m.as_str().unwrap().contains("never closed") && m.as_str().unwrap().contains("events.csv"), "{m}");
    assert_eq!(m, s);
}

/// NDJSON objects larger than a part of the budget are read as pieces of lines when spilled (from
/// the store from start to end, or decompressed as read): a number typed by a value near the
/// end, a nested field with a value in one line only, a byte-order mark, blank lines and a
/// gzip object give the in-memory bytes; a bad line late in an object, the same error.
#[test]
fn a_large_ndjson_object_is_read_a_piece_at_a_time_when_spilled() {
    use std::io::Write;
    let lake = Lake::new();
    let rows = 40_000;
    let lines = |n: usize, from: usize, day: usize| -> String {
        let mut t = String::new();
        for i in from..from + n {
            // One version in ten is repeated exactly, one key in seven has a second version.
            let (key, version) = match i % 10 {
                9 => (i - 1, 1 + (i - 1) % 7 / 6),
                _ => (i, 1 + i % 7 / 6),
            };
            let score = if i == rows - 3 || i == rows + 5 { "2.5".to_string() } else { (key % 1000).to_string() };
            let tags = match key {
                k if k == rows - 100 => r#"["late"]"#.to_string(),
                k if k % 3 == 0 => "[null]".to_string(),
                _ => "[]".to_string(),
            };
            let currency = ["USD", "EUR", "GBP"][key % 3];
            t += &format!(
                r#"{{"order_id": "o{day}-{key:07}", "source_version": {version}, "currency": "{currency}", "amount": {}.{:02}, "score": {score}, "tags": {tags}, "empty": [null], "customer_id": "c{}"}}"#,
                key % 500,
                key % 100,
                key % 997
            );
            t += if i % 1000 == 0 { "\n\n" } else { "\n" };
        }
        t
    };
    for (n, day) in ["2026-11-01", "2026-11-02", "2026-11-03"].into_iter().enumerate() {
        let folder = lake.input().join(format!("event_date={day}"));
        std::fs::create_dir_all(&folder).unwrap();
        let bom = if n == 1 { "\u{feff}" } else { "" };
        std::fs::write(folder.join("events.json"), format!("{bom}{}", lines(rows, 0, n))).unwrap();
        // A compressed object: its stored bytes in a part's, its text past them.
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        gz.write_all(lines(300, rows, n).as_bytes()).unwrap();
        std::fs::write(folder.join("more.json.gz"), gz.finish().unwrap()).unwrap();
    }
    let sql = r#"
[aggregate]
sql = """
SELECT currency, count(*) AS orders, sum(score) AS score, arrow_typeof(min(score)) AS score_type,
       min(arrow_typeof(tags)) AS tags_type, min(arrow_typeof(empty)) AS empty_type,
       sum(amount) AS revenue, count(DISTINCT customer_id) AS customers
FROM events GROUP BY currency
"""
"#;
    let cfg = text_config(&lake, "ndjson", sql);
    same_spilled(&lake, &cfg);
    let out = read_batch(&lake.partition_file("2026-11-02"));
    let column = |name: &str| {
        let c = out.column_by_name(name).unwrap();
        let c = c.as_any().downcast_ref::<arrow::array::StringArray>().unwrap();
        c.iter().map(|v| v.unwrap().to_string()).collect::<Vec<_>>()
    };
    assert!(column("score_type").iter().all(|t| t == "Float64"), "{out:?}");
    assert!(column("tags_type").iter().all(|t| t.starts_with("List(Utf8") || t.contains("Utf8")), "{out:?}");
    assert!(column("empty_type").iter().all(|t| t.contains("Null")), "{out:?}");
    // Lines late in the object that are not JSON, or name a field twice: the same error, in
    // memory and spilled.
    let p = lake.input().join("event_date=2026-11-02/events.json");
    let good = std::fs::read_to_string(&p).unwrap();
    for (bad, says) in [
        (r#"{"order_id": "o9", "source_version": 1, "currency": "USD", "amount": 1.00, "score": 1, "#, "line 40041"),
        (r#"{"order_id": "o9", "order_id": "o8", "source_version": 1, "currency": "USD", "amount": 1.00}"#, "twice"),
    ] {
        std::fs::write(&p, format!("{good}{bad}\n")).unwrap();
        let [(mem, _, mem_sum), (sp, _, sp_sum)] = both(&lake, &cfg);
        assert_eq!((mem.status.code(), sp.status.code()), (Some(3), Some(3)), "{}", text(&sp));
        // Found when the run is planned (its types are read from every text object) or when the
        // date is read.
        let error = |s: &serde_json::Value| match &s["partitions"][1]["error"] {
            serde_json::Value::Null => s["error"].clone(),
            e => e.clone(),
        };
        let (m, s) = (error(&mem_sum), error(&sp_sum));
        assert!(m.as_str().unwrap().contains(says) && m.as_str().unwrap().contains("events.json"), "{m}");
        assert_eq!(m, s);
    }
}

/// A null in one column of a two-column key: the same object, row and column named in memory
/// and spilled (the buckets meet the rows in another order), the first row in input order.
#[test]
fn a_null_key_column_is_named_at_its_first_row_in_memory_and_spilled() {
    use arrow::array::{Array, StringArray};
    let lake = Lake::new();
    let rows: Vec<Order> = random_orders(23, 1, 30_000);
    let b = batch(&rows);
    let null_at = |column: &str, at: &[usize]| -> arrow::array::ArrayRef {
        let c = b.column_by_name(column).unwrap();
        let c = c.as_any().downcast_ref::<StringArray>().unwrap();
        std::sync::Arc::new(
            (0..c.len()).map(|i| (!at.contains(&i)).then(|| c.value(i).to_string())).collect::<StringArray>(),
        )
    };
    let schema = b.schema();
    let columns: Vec<arrow::array::ArrayRef> = schema
        .fields()
        .iter()
        .map(|f| match f.name().as_str() {
            "order_id" => null_at("order_id", &[20_000, 5_000, 27_000]),
            "customer_id" => null_at("customer_id", &[9_000]),
            _ => b.column_by_name(f.name()).unwrap().clone(),
        })
        .collect();
    let with_nulls = arrow::record_batch::RecordBatch::try_new(schema, columns).unwrap();
    write_parquet(&lake.input().join("event_date=2026-11-01/part-00000.parquet"), &with_nulls);
    let cfg = lake.config_with("key = [\"customer_id\", \"order_id\"]\nversion = \"source_version\"", "");
    let [(mem, _, mem_sum), (sp, _, sp_sum)] = both(&lake, &cfg);
    assert_eq!((mem.status.code(), sp.status.code()), (Some(3), Some(3)), "{}", text(&sp));
    let (m, s) = (&mem_sum["partitions"][0]["error"], &sp_sum["partitions"][0]["error"]);
    assert!(m.as_str().unwrap().contains("row 5000") && m.as_str().unwrap().contains("`order_id`"), "{m}");
    assert_eq!(m, s);
}

/// A merge's computed files wait on disk, not in memory, for the commit phase under a small
/// budget — the same bytes, also when keys move between dates (the files then commit together).
#[test]
fn a_merge_keeps_its_computed_files_on_disk_under_a_small_budget() {
    let lake = Lake::new();
    let first = random_orders(21, 3, 20_000);
    lake.write_hive(&first, 2);
    // A second batch: newer versions of some of the first day's orders, under the next dates.
    let moved: Vec<Order> = first
        .iter()
        .filter(|r| r.date == d("2026-11-01") && r.version == 1)
        .step_by(50)
        .enumerate()
        .map(|(i, r)| Order { version: 9, date: d("2026-11-02") + chrono::Days::new(i as u64 % 2), ..r.clone() })
        .collect();
    for (rel, b) in hive_parts(&moved, 1) {
        write_parquet(&lake.dir.path().join("in2").join(rel), &b);
    }
    let merge_cfg = |name: &str, input: &Path| {
        let text = format!(
            "[job]\nname = \"orders_current\"\nkind = \"merge\"\n\n[input]\nurl = \"{}\"\nformat = \"parquet\"\n\n\
             [identity]\nkey = [\"order_id\"]\nversion = \"source_version\"\n\
             deleted = {{ column = \"status\", equals = \"refunded\" }}\n\n[output]\nurl = \"{}\"\n",
            input.display(),
            lake.output().display()
        );
        write(&lake, name, text)
    };
    let (one, two) = (merge_cfg("one.toml", &lake.input()), merge_cfg("two.toml", &lake.dir.path().join("in2")));
    let mut tables = Vec::new();
    for limit in ["8GiB", "1MiB"] {
        let _ = std::fs::remove_dir_all(lake.output());
        let _ = std::fs::remove_dir_all(lake.state());
        let mut states = Vec::new();
        for cfg in [&one, &two] {
            let (o, s) = run_under(&lake, cfg, limit);
            assert!(o.status.success(), "{limit}: {}", text(&o));
            let written = spilled(&s);
            assert_eq!(written.len(), 3, "{s}");
            match limit {
                "8GiB" => assert!(written.iter().all(|&b| b == 0), "{s}"),
                // Within an eighth of 1 MiB, a file or two stay in memory: the rest wait on disk.
                _ => assert!(written.iter().filter(|&&b| b > 0).count() >= 2, "{s}"),
            }
            if cfg == &two {
                let moved_in: u64 =
                    s["partitions"].as_array().unwrap().iter().map(|p| p["merge"]["moved_in"].as_u64().unwrap()).sum();
                assert!(moved_in > 0, "the second batch moves keys between dates: {s}");
            }
            states.push(lake.snapshot());
        }
        tables.push(states);
    }
    assert_eq!(tables[0].len(), 2);
    assert!(tables[0][0] != tables[0][1], "the second batch changed the table");
    assert!(tables[0] == tables[1], "the files kept on disk were committed with other bytes");
}

/// The error each run of the bad input of `lake` (Parquet, `customer_id` declared int64) fails
/// the date 2026-11-01 with, one run per budget in `limits`; nothing is committed.
fn bad_input_errors(lake: &Lake, limits: &[&str]) -> Vec<String> {
    let toml = format!(
        "[job]\nname = \"revenue_daily\"\nkind = \"aggregate\"\n\n[input]\nurl = \"{}\"\nformat = \"parquet\"\n\
         schema = {{ customer_id = \"int64\" }}\n\n[identity]\nkey = [\"order_id\"]\nversion = \"source_version\"\n{MEASURES}\n\
         [output]\nurl = \"{}\"\n",
        lake.input().display(),
        lake.output().display()
    );
    let cfg = write(lake, "bad.toml", toml);
    let spill = lake.dir.path().join("spill");
    std::fs::create_dir_all(&spill).unwrap();
    let mut errors = Vec::new();
    for limit in limits {
        let s = lake.dir.path().join("summary.json");
        let o = cli(
            &[
                "run",
                "--config",
                cfg.to_str().unwrap(),
                "--date",
                "2026-11-01",
                "--memory-limit",
                limit,
                "--spill-dir",
                spill.to_str().unwrap(),
                "--summary-json",
                s.to_str().unwrap(),
            ],
            lake.dir.path(),
        );
        assert_eq!(o.status.code(), Some(3), "{limit}: {}", text(&o));
        let s = summary(&s);
        errors.push(s["partitions"][0]["error"].as_str().unwrap().to_string());
        assert!(!lake.partition_file("2026-11-01").exists());
    }
    errors
}

/// `n` orders of 2026-11-01 numbered from `first`, with customers that are numbers.
fn numbered_orders(first: usize, n: usize) -> Vec<Order> {
    (first..first + n)
        .map(|i| Order {
            customer: format!("{}", i % 500),
            ..order(&format!("o{i:06}"), 1, "2026-11-01", "USD", 100, "placed")
        })
        .collect()
}

/// An object larger than one part (64 Ki rows) with a bad value early and a row under the
/// wrong date folder later. In memory the folder is checked first: row 70,000 is named.
/// Spilled, an object is read again whole to name that same error only within a quarter of
/// the budget; this one's estimate (12× its stored bytes) is far past a quarter of 1 MiB, so
/// it is not read again and the date fails with the first fault its parts find: row 3's
/// value, named by object, row and column.
#[test]
fn a_large_bad_object_fails_within_the_budget_when_spilled() {
    let lake = Lake::new();
    let mut rows = numbered_orders(0, 100_000);
    rows[3].customer = "not a number".into();
    rows[70_000].date = d("2026-11-02");
    // One object, one row group, in the 2026-11-01 folder.
    write_parquet(&lake.input().join("event_date=2026-11-01/part-00000.parquet"), &batch(&rows));
    let errors = bad_input_errors(&lake, &["8GiB", "1MiB"]);
    assert!(errors[0].contains("70000") || errors[0].contains("70,000"), "the in-memory error: {}", errors[0]);
    assert!(names_row_3s_value(&errors[1]), "spilled past a quarter of the budget: {}", errors[1]);
}

/// Whether an error names the bad value of row 3 of `part-00000.parquet`: its object, row and
/// column, and the value.
fn names_row_3s_value(e: &str) -> bool {
    e.contains("part-00000.parquet") && e.contains("row 3,") && e.contains("customer_id") && e.contains("not a number")
}

/// The errors of a date of eight objects of 1,000 orders, in memory (8 GiB) and spilled
/// (1 MiB), the first object of which is `bad`. As the run estimates them, the date is past
/// 1 MiB and the bad object within a quarter of it: a spilled date starts to read it again
/// whole.
fn errors_with_a_small_bad_object(bad: &[Order]) -> Vec<String> {
    let lake = Lake::new();
    let folder = lake.input().join("event_date=2026-11-01");
    write_parquet(&folder.join("part-00000.parquet"), &batch(bad));
    for k in 1..=7 {
        write_parquet(&folder.join(format!("part-{k:05}.parquet")), &batch(&numbered_orders(k * 1_000, 1_000)));
    }
    let size = |k: usize| std::fs::metadata(folder.join(format!("part-{k:05}.parquet"))).unwrap().len();
    assert!(
        (0..8).map(size).sum::<u64>() * 12 > 1 << 20 && size(0) * 12 <= 1 << 18,
        "{:?}",
        (0..8).map(size).collect::<Vec<_>>()
    );
    bad_input_errors(&lake, &["8GiB", "1MiB"])
}

/// 1,000 orders with the same two kinds of fault as above: a bad value at row 3, a row under
/// the wrong date folder at row 800 (which the in-memory path names).
fn two_faults() -> Vec<Order> {
    let mut bad = numbered_orders(0, 1_000);
    bad[3].customer = "not a number".into();
    bad[800].date = d("2026-11-02");
    bad
}

/// The same two faults in a small object (several parts of a sixty-fourth of 1 MiB, within a
/// quarter of it) among seven good ones that make the date spill under 1 MiB: the spilled
/// date reads the bad object again whole and names the in-memory path's error, row 800.
#[test]
fn a_small_bad_object_of_a_spilled_date_fails_with_the_in_memory_error() {
    let errors = errors_with_a_small_bad_object(&two_faults());
    assert!(errors[0].contains("row 800,"), "the in-memory error: {}", errors[0]);
    assert_eq!(errors[0], errors[1], "spilled, the bad object read again names another error");
}

/// The same, the bad object's rows far wider than its bytes (a currency of 1,000 bytes, stored
/// once in its dictionary: ~1 MB decoded): the spilled date starts to read it again whole, but
/// what it decodes to passes the re-read's meter (a quarter of the budget, at least 1 MiB,
/// counting twice the rows' bytes as the in-memory path does), so the reading stops there and
/// the date names the first fault its parts found, row 3's value, not the in-memory path's
/// row 800.
#[test]
fn a_bad_object_that_decodes_past_the_re_reads_meter_is_not_read_again_whole() {
    let mut bad = two_faults();
    for o in &mut bad {
        o.currency = "U".repeat(1_000);
    }
    let errors = errors_with_a_small_bad_object(&bad);
    assert!(errors[0].contains("row 800,"), "the in-memory error: {}", errors[0]);
    assert!(names_row_3s_value(&errors[1]), "decoded past the re-read's meter: {}", errors[1]);
}

/// Dates of `n` rows whose `note` is one of ten values of `width` bytes (dictionary-encoded,
/// so the files are far smaller than their rows), in `objects` files a date.
fn notes(lake: &Lake, n: usize, width: usize, objects: usize) {
    use arrow::array::{ArrayRef, Int64Array, RecordBatch, StringArray};
    use arrow::datatypes::{DataType, Field, Schema};
    use std::sync::Arc;
    let schema = Arc::new(Schema::new(vec![
        Field::new("order_id", DataType::Utf8, false),
        Field::new("source_version", DataType::Int64, false),
        Field::new("currency", DataType::Utf8, false),
        Field::new("amount", DataType::Int64, false),
        Field::new("note", DataType::Utf8, false),
    ]));
    let notes: Vec<String> = (0..10u8).map(|i| char::from(b'A' + i).to_string().repeat(width)).collect();
    for day in 1..=3 {
        for o in 0..objects {
            let rows = o * n / objects..(o + 1) * n / objects;
            let ids: StringArray = rows.clone().map(|i| Some(format!("o{day}-{}", i * 7 % n))).collect();
            let versions = Int64Array::from_iter_values(rows.clone().map(|i| (i % 3) as i64));
            let currency: StringArray = rows.clone().map(|i| Some(["EUR", "USD", "GBP"][i * day % 3])).collect();
            let amount = Int64Array::from_iter_values(rows.clone().map(|i| (i * 31 % 1000) as i64));
            let note: StringArray = rows.clone().map(|i| Some(notes[(i * day) % 10].as_str())).collect();
            let columns: Vec<ArrayRef> =
                vec![Arc::new(ids), Arc::new(versions), Arc::new(currency), Arc::new(amount), Arc::new(note)];
            let b = RecordBatch::try_new(schema.clone(), columns).unwrap();
            let path = lake.input().join(format!("event_date=2026-11-0{day}/part-{o}.parquet"));
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            let mut w =
                parquet::arrow::ArrowWriter::try_new(std::fs::File::create(&path).unwrap(), schema.clone(), None)
                    .unwrap();
            w.write(&b).unwrap();
            w.close().unwrap();
        }
    }
}

/// Three dates of 150,000 rows whose `note` is one of ten 1,000-byte values: dictionary-encoded,
/// their files are small (a few MiB) and decode to ~150 MiB each, far past what the stored size
/// suggests.
fn far_past_their_size(lake: &Lake) -> PathBuf {
    notes(lake, 150_000, 1000, 1);
    for day in 1..=3 {
        let path = lake.input().join(format!("event_date=2026-11-0{day}/part-0.parquet"));
        // Estimated at 12× its size, it fits a 64 MiB budget.
        assert!(std::fs::metadata(&path).unwrap().len() * 12 < 64 << 20, "the file is far smaller than its rows");
    }
    let sql = r#"
[aggregate]
sql = """
SELECT currency, count(*) AS orders, sum(amount) AS revenue, count(DISTINCT note) AS notes,
       sum(length(note)) AS note_bytes
FROM events GROUP BY currency
"""
"#;
    config(lake, "wide.toml", "key = [\"order_id\"]\nversion = \"source_version\"", sql)
}

/// Runs `cfg` under `limit` with the debug log: output, summary, and the largest peak the
/// process reported (MiB).
fn run_logged(lake: &Lake, cfg: &Path, limit: &str, extra: &[&str]) -> (std::process::Output, serde_json::Value, u64) {
    let spill = lake.dir.path().join("spill");
    std::fs::create_dir_all(&spill).unwrap();
    let s = lake.dir.path().join("summary.json");
    let mut args = vec!["run", "--config", cfg.to_str().unwrap(), "--from", "2026-11-01", "--to", "2026-11-03"];
    args.extend_from_slice(&["--memory-limit", limit, "--spill-dir", spill.to_str().unwrap()]);
    args.extend_from_slice(&["--summary-json", s.to_str().unwrap()]);
    args.extend_from_slice(extra);
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_lakeswap"))
        .args(&args)
        .env("LAKESWAP_LOG", "lakeswap=debug")
        .current_dir(lake.dir.path())
        .output()
        .unwrap();
    let log = String::from_utf8_lossy(&o.stderr).into_owned();
    let peak = log
        .split("peak_mib=")
        .skip(1)
        .filter_map(|t| t.split(|c: char| !c.is_ascii_digit()).next()?.parse::<u64>().ok())
        .max()
        .unwrap_or(0);
    assert_eq!(std::fs::read_dir(&spill).unwrap().count(), 0, "spill left behind: {}", text(&o));
    (o, summary(&s), peak)
}

/// A date whose Parquet decodes far larger than its stored size suggests is counted as it is
/// read: past the budget it is spilled (not read past it), with the bytes of a run in memory.
#[test]
fn a_date_that_decodes_far_past_its_estimate_is_spilled_not_read_past_the_budget() {
    let lake = Lake::new();
    let cfg = far_past_their_size(&lake);
    let (mem, mem_sum, mem_peak) = run_logged(&lake, &cfg, "8GiB", &[]);
    assert!(mem.status.success(), "{}", text(&mem));
    assert_eq!(spilled(&mem_sum), [0, 0, 0]);
    let mem_files = lake.snapshot();
    assert_eq!(mem_files.len(), 3);
    let _ = std::fs::remove_dir_all(lake.output());
    let _ = std::fs::remove_dir_all(lake.state());
    let (sp, sp_sum, sp_peak) = run_logged(&lake, &cfg, "64MiB", &[]);
    assert!(sp.status.success(), "{}", text(&sp));
    let log = text(&sp);
    assert!(log.contains("decodes past the memory budget: spilled"), "{log}");
    assert!(spilled(&sp_sum).iter().all(|&b| b > 0), "every partition spilled: {sp_sum}");
    assert!(mem_files == lake.snapshot(), "the spilled partitions differ from the in-memory ones");
    // The partitions' log records: spilled bytes where there are some, left out where none.
    let records = |log: String| {
        log.lines().filter(|l| l.contains("record=\"partition\"")).map(str::to_string).collect::<Vec<_>>()
    };
    let (mem_records, sp_records) = (records(text(&mem)), records(log));
    assert_eq!((mem_records.len(), sp_records.len()), (3, 3), "{mem_records:?} {sp_records:?}");
    assert!(mem_records.iter().all(|l| !l.contains("spilled_bytes")), "{mem_records:?}");
    assert!(
        sp_records.iter().all(|l| l.contains("spilled_bytes=") && !l.contains("spilled_bytes=0 ")),
        "{sp_records:?}"
    );
    // In memory a date takes hundreds of MiB; under the budget the process stays near it (the
    // process takes ~75 MiB before it reads a row: the engine, the runtime, the mapped binary).
    assert!(mem_peak > 300, "the dates are large in memory: {mem_peak} MiB");
    assert!(sp_peak < 200, "the peak under a 64 MiB budget was {sp_peak} MiB");
}

/// Three such dates at once under a budget that holds one of them: each grows its share as it
/// decodes; one that finds no room gives back what it holds and is read again once there is
/// room for it. None is spilled, none waits forever, and the files are those of a run with room
/// for all.
#[test]
fn dates_that_outgrow_their_estimates_share_the_budget_without_spilling() {
    let lake = Lake::new();
    let cfg = far_past_their_size(&lake);
    let (mem, _, _) = run_logged(&lake, &cfg, "8GiB", &["--concurrency", "3"]);
    assert!(mem.status.success(), "{}", text(&mem));
    let mem_files = lake.snapshot();
    let _ = std::fs::remove_dir_all(lake.output());
    let _ = std::fs::remove_dir_all(lake.state());
    let (o, sum, _) = run_logged(&lake, &cfg, "500MiB", &["--concurrency", "3"]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(spilled(&sum), [0, 0, 0], "{sum}");
    assert!(text(&o).contains("decodes past its estimate: read again"), "{}", text(&o));
    assert!(mem_files == lake.snapshot());
}

/// Rows of a MiB of text each, four objects a date: under a 64 MiB budget no phase holds a date
/// whole (its parts, the buckets' batches and the engine's batches are cut by bytes, not only by
/// rows), and the files are those of a run in memory.
#[test]
fn rows_of_a_mib_each_stay_within_a_small_budget_and_give_the_same_bytes() {
    let lake = Lake::new();
    notes(&lake, 160, 1 << 20, 4);
    let sql = r#"
[aggregate]
sql = """
SELECT currency, count(*) AS orders, sum(amount) AS revenue, max(length(note)) AS widest,
       sum(CASE WHEN note < 'C' THEN 1 ELSE 0 END) AS early
FROM events GROUP BY currency
"""
"#;
    let cfg = config(&lake, "mib.toml", "key = [\"order_id\"]\nversion = \"source_version\"", sql);
    let (mem, _, mem_peak) = run_logged(&lake, &cfg, "8GiB", &[]);
    assert!(mem.status.success(), "{}", text(&mem));
    let mem_files = lake.snapshot();
    let _ = std::fs::remove_dir_all(lake.output());
    let _ = std::fs::remove_dir_all(lake.state());
    let (sp, sum, sp_peak) = run_logged(&lake, &cfg, "64MiB", &[]);
    assert!(sp.status.success(), "{}", text(&sp));
    assert!(spilled(&sum).iter().all(|&b| b > 0), "every partition spilled: {sum}");
    assert!(mem_files == lake.snapshot(), "the spilled partitions differ from the in-memory ones");
    // A date is 160 MiB of text; in memory the run takes ~550 MiB. Under the budget it takes
    // the process's own ~70 MiB, and about a MiB a bucket while the buckets are merged back
    // into input order (a batch of each, of at least one row).
    assert!(mem_peak > 450, "{mem_peak} MiB in memory");
    assert!(sp_peak < 350, "the peak under a 64 MiB budget was {sp_peak} MiB ({mem_peak} MiB in memory)");
}

/// A spilled date's Parquet object larger than a part of the budget is read from its store a
/// row group at a time, not fetched whole: the same bytes as in memory, its reads ranged, and
/// a read the store fails midway is the store's error (worth a retry, exit 1), never a corrupt
/// object's (exit 3).
#[tokio::test(flavor = "multi_thread")]
async fn a_large_parquet_object_is_read_a_row_group_at_a_time_when_spilled() {
    use crate::common::faults::{FaultStore, Mode};
    use lakeswap::ExitCode;
    use parquet::arrow::ArrowWriter;
    use parquet::file::properties::WriterProperties;
    use std::sync::atomic::Ordering;
    let lake = Lake::new();
    let rows = random_orders(61, 1, 60_000);
    // One object of six row groups.
    let props = WriterProperties::builder().set_max_row_group_row_count(Some(10_000)).build();
    let p = lake.input().join("event_date=2026-11-01/part-00000.parquet");
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    let b = batch(&rows);
    let mut w = ArrowWriter::try_new(std::fs::File::create(&p).unwrap(), b.schema(), Some(props)).unwrap();
    w.write(&b).unwrap();
    w.close().unwrap();
    let size = std::fs::metadata(&p).unwrap().len();
    let spill = lake.dir.path().join("spill");
    std::fs::create_dir_all(&spill).unwrap();
    let run = |mode: Mode, limit: u64| {
        let lake = &lake;
        let spill = spill.clone();
        async move {
            let mut job = lakeswap::Job::load(&lake.config()).unwrap();
            let store = FaultStore::new(job.input.store.clone(), mode);
            job.input.store = store.clone();
            let opts = lakeswap::RunOptions {
                dates: Some(vec![d("2026-11-01")]),
                memory_limit: limit,
                spill_dir: spill,
                ..Default::default()
            };
            (lakeswap::run::run(&job, &opts).await, store)
        }
    };
    let s = run(Mode::None, 8 << 30).await.0.unwrap();
    assert_eq!(s.exit_code, ExitCode::Ok, "{}", lakeswap::report::table(&s));
    let in_memory = lake.snapshot();
    let _ = std::fs::remove_dir_all(lake.output());
    let _ = std::fs::remove_dir_all(lake.state());
    let (s, store) = run(Mode::None, 1 << 20).await;
    let s = s.unwrap();
    assert_eq!(s.exit_code, ExitCode::Ok, "{}", lakeswap::report::table(&s));
    assert!(s.partitions[0].spilled_bytes > 0, "spilled");
    assert!(lake.snapshot() == in_memory, "the spilled partition differs from the in-memory one");
    // Its reads: the footer, then each row group once, never the whole object at once.
    let (gets, read) = (store.gets.load(Ordering::SeqCst), store.bytes_read.load(Ordering::SeqCst));
    assert!(gets > 6, "{gets} reads");
    assert!(read < size * 3, "{read} bytes read of an object of {size}");
    let calls = store.calls();
    // Each of its reads failing in turn (a failure while planning fails the run before any date).
    let mut failed = 0;
    for i in 0..calls {
        let _ = std::fs::remove_dir_all(lake.output());
        let _ = std::fs::remove_dir_all(lake.state());
        let Ok(s) = run(Mode::FailAt(i), 1 << 20).await.0 else { continue };
        let Some(err) = s.partitions.first().and_then(|p| p.error.clone()) else { continue };
        failed += 1;
        assert_eq!(s.exit_code, ExitCode::PartialFailure, "call {i}: {err}");
        assert!(!err.contains("corrupt") && !err.contains("bad input"), "call {i}: {err}");
        assert!(!lake.partition_file("2026-11-01").exists());
    }
    assert!(failed > 6, "only {failed} of {calls} failed reads failed the date");
}

/// A large NDJSON object's schema is read from its store a piece of lines at a time, on a
/// thread of its own (a spilled date's objects; planning). When the reading is abandoned — its
/// future dropped by a stop signal, or by a library caller — that thread makes no further read
/// of the object: here the reading is dropped while its first read waits at a gate, the read
/// is let through, and no second read follows, where the whole reading makes several.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abandoned_schema_reading_makes_no_further_read() {
    use crate::common::faults::{FaultStore, Mode};
    use object_store::ObjectStoreExt;
    use std::sync::atomic::Ordering::SeqCst;
    let mut loc = lakeswap::store::open("memory://abandoned-schema", &Default::default(), "test", true).unwrap();
    let counter = FaultStore::new(loc.store.clone(), Mode::None);
    loc.store = counter.clone();
    // A piece of lines and a little more: at least two reads for each of the reading's passes.
    let line = "{\"event_date\":\"2026-11-01\",\"order_id\":\"o-1\",\"amount\":12.5}\n";
    let text = line.repeat(lakeswap::read::PIECE / line.len() + 100);
    let path = loc.child(&["events.json"]);
    loc.store.put(&path, bytes::Bytes::from(text).into()).await.unwrap();
    let meta = loc.store.head(&path).await.unwrap();
    let decoder = dated_decoder(lakeswap::config::Format::Ndjson);
    let whole = lakeswap::read::streamed_schema(&loc, &decoder, &meta).await.unwrap();
    assert!(whole.field_with_name("amount").is_ok(), "{whole:?}");
    let reads = counter.gets.swap(0, SeqCst);
    assert!(reads >= 4, "the whole reading made {reads} reads");

    let (gate, arrived) = counter.gate_reads("events.json");
    {
        let reading = lakeswap::read::streamed_schema(&loc, &decoder, &meta);
        tokio::pin!(reading);
        tokio::select! {
            r = &mut reading => panic!("answered with its first read held: {r:?}"),
            _ = arrived.notified() => {}
        }
    }
    gate.add_permits(100);
    // Long enough for the first piece to be read through and the next read asked for.
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    assert_eq!(counter.gets.load(SeqCst), 1, "reads of a reading abandoned at its first (whole: {reads})");
}
