//! Cleanup of what interrupted runs leave behind (G4), and only that (G9): lakeswap deletes
//! an object only when its name is one lakeswap makes, in a place lakeswap writes.
//!
//! What is removed, all of it in the table's state location (`[output] state_url`):
//! - staged files `staging/<run id>/<col>=<date>/part-00000.parquet` of runs that do not hold
//!   a live lease on the partition (never a live run's; never staging an unfinished move still
//!   needs);
//! - expired leases `leases/<col>=<date>.json` (and the table's lease, `_merge.json`), leases
//!   of runs that died on this host ([`lease::holder_gone`]), and leases set aside during a
//!   take-over;
//! - with [`GcOptions::quarantine_older_than`], quarantined rows written longer ago than that;
//! - with [`GcOptions::runs_older_than`], the journals of runs that finished longer ago than
//!   that (never the newest run's, one still running, one with a move left to complete, or one
//!   that failed a date no later run has done since);
//! - on a local folder, temporary files of interrupted writes (`<name>#<n>`, which the object
//!   store API never lists) beside the paths lakeswap writes, and the empty probe files a run
//!   killed at start-up left (`.lakeswap-probe-…`, made to check that a folder is writable),
//!   once older than [`lease::TEMP_FILE_AGE`];
//! - tombstone and key-index objects of merged partitions that no committed footer names any
//!   more, once older than that too.
//!
//! Everything else, in the table or in its state location, is reported as "not mine" and left
//! alone. Staging is never the committed copy of a partition, so removing stale staging can
//! never lose committed data. Every `run` does this for its own partitions once it holds their
//! leases; `lakeswap gc` does it for the whole table.

use std::collections::{BTreeMap, BTreeSet};

use chrono::Utc;
use futures::TryStreamExt;
use object_store::{ObjectMeta, ObjectStoreExt};
use serde::Serialize;

use crate::commit;
use crate::error::{Error, Result};
use crate::lease;
use crate::sidecar;
use crate::store::StoreLocation;

/// What `gc` did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct GcReport {
    pub expired_leases: usize,
    /// (run, partition) staging folders removed.
    pub staging_removed: usize,
    /// (run, partition) staging folders kept: their run is alive, or its move is unfinished.
    pub staging_kept: usize,
    /// Temporary files of interrupted writes on a local folder (`<name>#<n>`).
    pub temp_files_removed: usize,
    /// Tombstone and key-index objects no footer names.
    pub sidecars_removed: usize,
    /// Quarantined files removed for their age (`--quarantine-older-than`).
    pub quarantine_removed: usize,
    /// Journals of finished runs removed for their age (`--runs-older-than`).
    pub runs_removed: usize,
    /// Spill folders of killed runs of this table removed from the spill folder.
    pub spill_removed: usize,
    /// Objects in the table or its state location that lakeswap did not write (full URLs):
    /// listed, left alone.
    pub not_mine: Vec<String>,
    /// Everything removed (or, with [`GcOptions::dry_run`], that would be), full URLs and
    /// local paths, sorted.
    pub removed: Vec<String>,
}

/// What `gc` may remove beyond debris.
#[derive(Debug, Clone, Default)]
pub struct GcOptions {
    /// Remove quarantined rows written longer ago than this. Never by default: they are the
    /// only copy of the rows a run set aside.
    pub quarantine_older_than: Option<chrono::Duration>,
    /// Remove the journals of runs that finished longer ago than this. Never by default: they
    /// are the table's history (`status`, `--retry-failed`).
    pub runs_older_than: Option<chrono::Duration>,
    /// The local folder runs spill to (`--spill-dir`): folders of killed runs of this table
    /// in it are removed.
    pub spill_dir: Option<std::path::PathBuf>,
    /// Remove nothing: report what would be removed.
    pub dry_run: bool,
}

/// A run id as [`crate::journal::new_run_id`] makes them: `20261129T115652.471Z-afcf82`.
pub fn is_run_id(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 27
        && b[..8].iter().all(u8::is_ascii_digit)
        && b[8] == b'T'
        && b[9..15].iter().all(u8::is_ascii_digit)
        && b[15] == b'.'
        && b[16..19].iter().all(u8::is_ascii_digit)
        && &b[19..21] == b"Z-"
        && b[21..].iter().all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(c))
}

/// A partition folder name `<column>=YYYY-MM-DD`.
pub fn is_partition_dir(s: &str, column: &str) -> bool {
    s.strip_prefix(column)
        .and_then(|r| r.strip_prefix('='))
        .is_some_and(|d| d.len() == 10 && chrono::NaiveDate::parse_from_str(d, "%Y-%m-%d").is_ok())
}

/// What a path is to lakeswap.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Entry {
    /// A committed partition file, the schema record: kept.
    Kept,
    /// A run's journal: kept unless asked otherwise.
    Journal,
    /// Rows a run set aside (`quarantine/<run>/<dir>/`): kept unless asked otherwise.
    Quarantined,
    /// A staged file of (run, partition folder).
    Staged(String, String),
    /// A partition lease, or the merge table lease.
    Lease,
    /// A lease set aside during a take-over.
    AsideLease,
    /// A tombstone or key-index object of a partition folder.
    Sidecar(String),
    /// An empty file a run made to check that the folder is writable.
    Probe,
    /// Not a name lakeswap makes.
    NotMine,
}

/// A path in the table (relative to its URL): only partition files are lakeswap's.
fn classify_data(rel: &str, column: &str) -> Entry {
    match rel.split('/').collect::<Vec<_>>().as_slice() {
        [dir, commit::PART_FILE] if is_partition_dir(dir, column) => Entry::Kept,
        [name] if crate::store::is_probe_name(name) => Entry::Probe,
        _ => Entry::NotMine,
    }
}

/// A path in the state location (relative to it).
fn classify_state(rel: &str, column: &str) -> Entry {
    let parts: Vec<&str> = rel.split('/').collect();
    let lease_name =
        |n: &str| n == "_merge.json" || n.strip_suffix(".json").is_some_and(|d| is_partition_dir(d, column));
    match parts.as_slice() {
        ["staging", run, dir, commit::PART_FILE] if is_run_id(run) && is_partition_dir(dir, column) => {
            Entry::Staged(run.to_string(), dir.to_string())
        }
        ["quarantine", run, dir, commit::PART_FILE] if is_run_id(run) && is_partition_dir(dir, column) => {
            Entry::Quarantined
        }
        ["runs", name] if name.strip_suffix(".json").is_some_and(is_run_id) => Entry::Journal,
        ["table-schema"] | ["table.json"] => Entry::Kept,
        // What a date's keys were checked with (`--skip-unchanged`): ~50 bytes per other date.
        ["checked", name] if name.strip_suffix(".json").is_some_and(|d| is_partition_dir(d, column)) => Entry::Kept,
        [name] if crate::store::is_probe_name(name) => Entry::Probe,
        ["leases", name] if lease_name(name) => Entry::Lease,
        ["leases", name]
            if name
                .split_once(".json.expired-")
                .is_some_and(|(d, r)| lease_name(&format!("{d}.json")) && is_run_id(r)) =>
        {
            Entry::AsideLease
        }
        _ => match sidecar::parse_name(rel) {
            Some((_, dir)) if is_partition_dir(&dir, column) => Entry::Sidecar(dir),
            _ => Entry::NotMine,
        },
    }
}

/// `name#<n>`: a temporary file of a local write, and the name it was for.
fn temp_base(name: &str) -> Option<&str> {
    let (base, n) = name.rsplit_once('#')?;
    (!base.is_empty() && !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())).then_some(base)
}

/// Every object under `at`, folder markers left out (zero-byte objects standing for a folder:
/// readers skip them, and they are nobody's mess).
async fn list_all(at: &StoreLocation) -> Result<Vec<ObjectMeta>> {
    let mut v: Vec<ObjectMeta> =
        at.store.list(Some(&at.prefix)).try_collect().await.map_err(|e| Error::store("cannot list", &at.url, e))?;
    crate::read::list::without_folder_markers(&mut v, &at.prefix);
    crate::read::list::empty_folder_markers(at, &mut v).await?;
    Ok(v)
}

async fn delete(at: &StoreLocation, path: &object_store::path::Path) -> Result<()> {
    match at.store.delete(path).await {
        Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
        Err(e) => Err(Error::store("cannot delete", at.display(path), e)),
    }
}

/// Removes an object for `gc` (with `dry`, only lists it) and lists it in `removed`.
async fn remove(
    at: &StoreLocation,
    path: &object_store::path::Path,
    dry: bool,
    removed: &mut Vec<String>,
) -> Result<()> {
    if !dry {
        delete(at, path).await?;
    }
    removed.push(at.display(path));
    Ok(())
}

/// Removes a local file or folder for `gc` (with `dry`, only lists it); whether it is (or would
/// be) gone.
fn remove_local(path: &std::path::Path, dry: bool, removed: &mut Vec<String>) -> bool {
    let gone =
        dry || if path.is_dir() { std::fs::remove_dir_all(path).is_ok() } else { std::fs::remove_file(path).is_ok() };
    if gone {
        removed.push(path.display().to_string());
    }
    gone
}

/// Whether staging of `run` for `dir` is stale: the partition's lease is not a live lease of
/// that run. An unreadable lease store keeps it (never delete what may be live).
async fn stale(state: &StoreLocation, run: &str, dir: &str) -> bool {
    match lease::read(state, &lease::lease_path(state, dir)).await {
        Ok(Some((Some(b), _))) => !(b.run_id == run && b.expires > Utc::now()) || lease::holder_gone(&b),
        Ok(_) => true,
        Err(_) => false,
    }
}

/// Removes the staged files of other runs for the partition folders in `dirs`, whose leases
/// the caller holds; staging an unfinished move needs (`keep`) stays. Only names lakeswap makes
/// are removed. Returns the number of (run, partition) staging folders removed.
pub async fn remove_stale_staging(
    state: &StoreLocation,
    column: &str,
    own_run: &str,
    dirs: &[String],
) -> Result<usize> {
    let candidate = |run: &String, dir: &String| run != own_run && dirs.contains(dir);
    let mut staged = Vec::new();
    for m in list_prefix(state, &["staging"]).await? {
        if let Entry::Staged(run, dir) = classify_state(&state.relative(&m.location), column) {
            if candidate(&run, &dir) {
                staged.push((m.location, run, dir));
            }
        }
    }
    // Temporary files of an interrupted staging write (local folders).
    let mut temp = Vec::new();
    for (path, rel, _) in local_temp_files(state, &["staging"]) {
        if let Some(Entry::Staged(run, dir)) = temp_base(&rel).map(|base| classify_state(base, column)) {
            if candidate(&run, &dir) {
                temp.push((path, run, dir));
            }
        }
    }
    if staged.is_empty() && temp.is_empty() {
        state.tidy(&state.child(&["staging"]));
        return Ok(0);
    }
    // Staging an unfinished move still needs is kept (read only when there is staging to
    // remove: the journals are many).
    let keep = crate::journal::pending_staging(state).await?;
    let kept = |run: &String, dir: &String| keep.contains(&format!("{run}/{dir}"));
    let mut removed = BTreeSet::new();
    for (location, run, dir) in staged {
        if !kept(&run, &dir) {
            delete(state, &location).await?;
            removed.insert((run, dir));
        }
    }
    for (path, run, dir) in temp {
        if !kept(&run, &dir) {
            let _ = std::fs::remove_file(path);
            removed.insert((run, dir));
        }
    }
    state.tidy(&state.child(&["staging"]));
    Ok(removed.len())
}

async fn list_prefix(at: &StoreLocation, parts: &[&str]) -> Result<Vec<ObjectMeta>> {
    let prefix = at.child(parts);
    at.store.list(Some(&prefix)).try_collect().await.map_err(|e| Error::store("cannot list", at.display(&prefix), e))
}

/// On a local folder, the temporary files (`name#n`) under `parts`: path, path relative to the
/// location, age.
fn local_temp_files(at: &StoreLocation, parts: &[&str]) -> Vec<(std::path::PathBuf, String, std::time::Duration)> {
    let mut found = Vec::new();
    let (Some(root), Some(start)) = (at.local_path(&at.child(&[])), at.local_path(&at.child(parts))) else {
        return found;
    };
    let mut stack = vec![start];
    while let Some(dir) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&dir) else { continue };
        for e in rd.flatten() {
            let Ok(meta) = e.metadata() else { continue };
            let path = e.path();
            if meta.is_dir() {
                stack.push(path);
            } else if temp_base(&e.file_name().to_string_lossy()).is_some() {
                let rel = path.strip_prefix(&root).map(|p| p.to_string_lossy().replace('\\', "/")).unwrap_or_default();
                let age = meta.modified().ok().and_then(|t| t.elapsed().ok()).unwrap_or_default();
                found.push((path, rel, age));
            }
        }
    }
    found
}

/// Removes the journals of runs that finished before `before` (their journal's last write),
/// except the newest run's, a run still running (or that died: `status` tells which), a run
/// with swaps left to complete, and a run that failed a date no later run has done since
/// (`status` shows it failed, `--retry-failed` retries it). Returns how many.
async fn remove_old_journals(
    state: &StoreLocation,
    journals: Vec<ObjectMeta>,
    before: chrono::DateTime<Utc>,
    dry: bool,
    removed: &mut Vec<String>,
) -> Result<usize> {
    use crate::commit::Action;
    // Oldest first (run ids sort by their start).
    let all = crate::journal::read_all(state).await?;
    let Some(newest) = all.last().map(|j| j.run_id.clone()) else { return Ok(0) };
    // The last run that did each date.
    let failed = |a: &Action| matches!(a, Action::Failed | Action::Stopped);
    let mut done: BTreeMap<chrono::NaiveDate, &str> = BTreeMap::new();
    for j in &all {
        for p in j.partitions.iter().filter(|p| !failed(&p.action)) {
            done.insert(p.date, &j.run_id);
        }
    }
    let removable: BTreeSet<&str> = all
        .iter()
        .filter(|j| {
            j.run_id != newest
                && j.status == "finished"
                && j.pending.is_empty()
                && j.partitions
                    .iter()
                    .filter(|p| failed(&p.action))
                    .all(|p| done.get(&p.date).is_some_and(|r| *r > j.run_id.as_str()))
        })
        .map(|j| j.run_id.as_str())
        .collect();
    let mut n = 0;
    for m in journals.into_iter().filter(|m| m.last_modified < before) {
        let run = m.location.filename().and_then(|f| f.strip_suffix(".json")).unwrap_or_default();
        if removable.contains(run) {
            remove(state, &m.location, dry, removed).await?;
            n += 1;
        }
    }
    Ok(n)
}

/// Cleans the whole table and its state location: see the module documentation.
pub async fn gc(out: &StoreLocation, state: &StoreLocation, column: &str, opts: &GcOptions) -> Result<GcReport> {
    let mut report = GcReport::default();
    let dry = opts.dry_run;
    let now = Utc::now();
    let old = |m: &ObjectMeta| (now - m.last_modified).to_std().unwrap_or_default() > lease::TEMP_FILE_AGE;
    // The table holds partition files only (and, for a moment, a run's probe).
    for m in list_all(out).await? {
        let rel = out.relative(&m.location);
        // An empty partition folder's marker, as the commit's foreign-object check sees it.
        if m.size == 0 && is_partition_dir(&rel, column) {
            continue;
        }
        match classify_data(&rel, column) {
            // A probe is empty: a file of that name with bytes in it is not one.
            Entry::NotMine => report.not_mine.push(out.display(&m.location)),
            Entry::Probe if m.size > 0 => report.not_mine.push(out.display(&m.location)),
            Entry::Probe if old(&m) => {
                remove(out, &m.location, dry, &mut report.removed).await?;
                report.temp_files_removed += 1;
            }
            _ => {}
        }
    }
    let pending = crate::journal::pending_staging(state).await?;
    let mut staged: BTreeMap<(String, String), Vec<ObjectMeta>> = BTreeMap::new();
    let mut sidecars: BTreeMap<String, Vec<ObjectMeta>> = BTreeMap::new();
    let mut journals: Vec<ObjectMeta> = Vec::new();
    for m in list_all(state).await? {
        let rel = state.relative(&m.location);
        match classify_state(&rel, column) {
            Entry::Kept => {}
            Entry::Journal => journals.push(m),
            Entry::Quarantined => {
                if opts.quarantine_older_than.is_some_and(|age| now - m.last_modified > age) {
                    remove(state, &m.location, dry, &mut report.removed).await?;
                    report.quarantine_removed += 1;
                }
            }
            Entry::Staged(run, dir) => staged.entry((run, dir)).or_default().push(m),
            Entry::Lease => {
                let expired = match lease::read(state, &m.location).await {
                    Ok(Some((Some(b), _))) => b.expires <= now || lease::holder_gone(&b),
                    Ok(Some((None, _))) => {
                        report.not_mine.push(format!("{} (not a lakeswap lease)", state.display(&m.location)));
                        false
                    }
                    _ => false,
                };
                if expired {
                    remove(state, &m.location, dry, &mut report.removed).await?;
                    report.expired_leases += 1;
                }
            }
            Entry::AsideLease => {
                remove(state, &m.location, dry, &mut report.removed).await?;
                report.expired_leases += 1;
            }
            Entry::Sidecar(dir) => sidecars.entry(dir).or_default().push(m),
            Entry::Probe if m.size > 0 => report.not_mine.push(state.display(&m.location)),
            Entry::Probe => {
                if old(&m) {
                    remove(state, &m.location, dry, &mut report.removed).await?;
                    report.temp_files_removed += 1;
                }
            }
            Entry::NotMine => report.not_mine.push(state.display(&m.location)),
        }
    }
    if let Some(age) = opts.runs_older_than {
        report.runs_removed = remove_old_journals(state, journals, now - age, dry, &mut report.removed).await?;
    }
    // Spill folders of this table's runs whose process is gone (a run removes its own).
    if let Some(dir) = &opts.spill_dir {
        for (run, path) in crate::spill::abandoned(dir, &state.url) {
            if is_run_id(&run) && remove_local(&path, dry, &mut report.removed) {
                report.spill_removed += 1;
            }
        }
    }
    for ((run, dir), files) in staged {
        if pending.contains(&format!("{run}/{dir}")) || !stale(state, &run, &dir).await {
            report.staging_kept += 1;
            continue;
        }
        for m in files {
            remove(state, &m.location, dry, &mut report.removed).await?;
        }
        report.staging_removed += 1;
    }
    // Tombstones and key indexes no committed footer names (and no unfinished move needs).
    for (dir, objects) in sidecars {
        let target = commit::target_path(out, &dir);
        let named: Vec<String> = match commit::committed_footer(out, &target).await {
            Ok(Some(Some(md))) => sidecar::referenced(md.file_metadata().key_value_metadata())
                .into_iter()
                .map(|(_, r)| r.object)
                .collect(),
            Ok(_) => Vec::new(),
            Err(_) => continue,
        };
        if pending.iter().any(|p| p.ends_with(&format!("/{dir}"))) {
            continue;
        }
        for m in objects {
            if old(&m) && !named.contains(&state.relative(&m.location)) {
                remove(state, &m.location, dry, &mut report.removed).await?;
                report.sidecars_removed += 1;
            }
        }
    }
    // Temporary files of interrupted local writes, beside the paths lakeswap writes.
    for (at, classify) in [(out, classify_data as fn(&str, &str) -> Entry), (state, classify_state)] {
        for (path, rel, age) in local_temp_files(at, &[]) {
            let ours = temp_base(&rel).is_some_and(|base| classify(base, column) != Entry::NotMine);
            if !ours {
                report.not_mine.push(format!("{}/{rel}", at.url));
            } else if age > lease::TEMP_FILE_AGE && remove_local(&path, dry, &mut report.removed) {
                report.temp_files_removed += 1;
            }
        }
    }
    if !dry {
        state.tidy(&state.child(&["staging"]));
    }
    report.not_mine.sort();
    report.removed.sort();
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_lakeswap_makes() {
        let c = "event_date";
        assert!(is_run_id("20261129T115652.471Z-afcf82"));
        assert!(!is_run_id("othertool") && !is_run_id("20261129T115652.471Z-AFCF82"));
        let staged = "staging/20261129T115652.471Z-afcf82/event_date=2026-11-01/part-00000.parquet";
        assert!(matches!(classify_state(staged, c), Entry::Staged(..)));
        for foreign in [
            "staging/othertool/keep/data.bin",
            "staging/20261129T115652.471Z-afcf82/notes.txt",
            "staging/20261129T115652.471Z-afcf82/event_date=2026-11-01/backup.parquet",
            "docs/report",
            "event_date=2026-11-01/part-00000.parquet",
            "leases/other.json",
            "runs/notes.json",
            "keys/event_date=2026-11-01/x.keys",
            "_lakeswap/runs/20261129T115652.471Z-afcf82.json",
        ] {
            assert_eq!(classify_state(foreign, c), Entry::NotMine, "{foreign}");
        }
        assert_eq!(classify_state("leases/event_date=2026-11-01.json", c), Entry::Lease);
        assert_eq!(classify_state("checked/event_date=2026-11-01.json", c), Entry::Kept);
        assert_eq!(classify_state("checked/notes.json", c), Entry::NotMine);
        assert_eq!(classify_data("event_date=2026-11-01/part-00000.parquet", c), Entry::Kept);
        for foreign in ["event_date=2026-11-01/backup.parquet", "_lakeswap/table-schema", staged, "notes.txt"] {
            assert_eq!(classify_data(foreign, c), Entry::NotMine, "{foreign}");
        }
        let probe = ".lakeswap-probe-4242-1764806400123456789-9f3a";
        assert_eq!((classify_state(probe, c), classify_data(probe, c)), (Entry::Probe, Entry::Probe));
        for foreign in [".lakeswap-probe-x", ".lakeswap-probe-1-2-zz", "staging/.lakeswap-probe-1-2-3a"] {
            assert_eq!(classify_state(foreign, c), Entry::NotMine, "{foreign}");
        }
        assert_eq!(temp_base("part-00000.parquet#12"), Some("part-00000.parquet"));
        assert_eq!(temp_base("report#x"), None);
    }
}
