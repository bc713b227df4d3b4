//! `lakeswap status`: what the run journal and the committed files say — recent runs, and per
//! partition whether it is committed, failed or missing, with its rows, lineage and the last
//! run that touched it, and a bar per date so a missing or odd day stands out.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use chrono::NaiveDate;
use futures::TryStreamExt;
use serde::Serialize;

use crate::commit::{self, Action};
use crate::error::{Error, Result};
use crate::journal::{self, Journal};
use crate::lineage::Lineage;
use crate::run::Job;
use crate::store::StoreLocation;

/// One partition's state.
#[derive(Debug, Clone, Serialize)]
pub struct PartitionStatus {
    pub date: NaiveDate,
    /// `committed`, `failed` (the last run that touched it failed it; an older file may stay),
    /// `missing`, `unknown` (a file without lakeswap's lineage: not written by it) or
    /// `misplaced` (a file whose lineage is another date's: copied in).
    pub state: &'static str,
    pub committed: bool,
    /// `current` when the file's schema is the table's, `older` when it was written under
    /// another schema (a rebuild that did not reach it yet).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub schema: Option<&'static str>,
    /// A daily table's file written under another config than the one `status` was given
    /// (another query, zone, key …): `other`, computed again by the next run; else absent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub config: Option<&'static str>,
    pub lineage: Option<Lineage>,
    /// Objects in the partition folder that lakeswap did not write (a partition is one object).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub foreign: Vec<String>,
    /// The last run that wrote the partition (created, replaced) or failed it.
    pub last_run: Option<(String, Action)>,
    /// A later run that planned this date and recorded no outcome for it: it died (or is still
    /// running), and may have swapped in its file. Its journal is written at its end, so the
    /// file is the one of `last_run` or that run's, whole.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unrecorded_run: Option<(String, String)>,
    pub error: Option<String>,
}

/// What `status` shows.
#[derive(Debug, Clone, Serialize)]
pub struct Status {
    /// The run journals, oldest first.
    #[serde(skip)]
    pub journals: Vec<Journal>,
    pub partitions: Vec<PartitionStatus>,
    /// Objects and folders at the table's top level that are neither a date's folder nor a
    /// name readers skip (`_…`, `.…`): a reader of the whole table reads them too.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub strays: Vec<String>,
    /// The table is computed from its input alone (an aggregate): a run rewrites a partition,
    /// `verify` checks it. A merged table is its own history.
    #[serde(skip)]
    pub recomputable: bool,
}

/// The journals (oldest first) and the state of each partition of `dates` (default: every
/// date that is committed, has an outcome in a journal, or was planned by a run that died).
pub async fn status(job: &Job, dates: Option<Vec<NaiveDate>>) -> Result<Status> {
    job.check_layout(false).await?;
    let out = &job.output;
    let mut journals = journal::read_all(&job.state).await?;
    // A journal still `running` is a run that is running, or one that died: a live run holds
    // leases, renewed while it lives.
    if journals.iter().any(|j| j.status == "running") {
        let live = live_runs(&job.state).await;
        for j in journals.iter_mut().filter(|j| j.status == "running") {
            if !live.contains(&j.run_id) {
                j.status = "died".into();
            }
        }
    }
    // A move's swaps are recorded before the first one and the record is not updated after
    // each: those the committed files show done are not pending.
    for j in journals.iter_mut().filter(|j| !j.pending.is_empty()) {
        let mut left = Vec::new();
        for p in std::mem::take(&mut j.pending) {
            match crate::run::commit::pending_state(job, &j.run_id, &p).await? {
                crate::run::commit::PendingState::Done { .. } => {}
                _ => left.push(p),
            }
        }
        j.pending = left;
    }
    let column = &job.config.partition.column;
    let listing =
        out.store.list_with_delimiter(Some(&out.prefix)).await.map_err(|e| Error::store("cannot list", &out.url, e))?;
    let prefix = format!("{column}=");
    let committed: Vec<NaiveDate> = listing
        .common_prefixes
        .iter()
        .filter_map(|p| p.filename()?.strip_prefix(&prefix).and_then(|d| NaiveDate::parse_from_str(d, "%Y-%m-%d").ok()))
        .collect();
    // The run that wrote the file, and a failure no later run has mended: a run that wrote the
    // partition, or found its file current (unchanged, skipped), clears an older failure.
    let mut last: BTreeMap<NaiveDate, (String, Action, Option<String>)> = BTreeMap::new();
    let mut failed: BTreeMap<NaiveDate, (String, Action, Option<String>)> = BTreeMap::new();
    for j in &journals {
        for p in &j.partitions {
            let run = (j.run_id.clone(), p.action, p.error.clone());
            match p.action {
                Action::Created | Action::Replaced => {
                    failed.remove(&p.date);
                    last.insert(p.date, run);
                }
                // Refused the date's lease, or lost it to another run (exit 4): the date was that
                // run's, whatever it did with it; this failure says nothing of the date.
                Action::Failed if p.exit_code == crate::ExitCode::Leased.code() => {}
                Action::Failed => {
                    failed.insert(p.date, run);
                }
                Action::Unchanged | Action::Skipped => {
                    failed.remove(&p.date);
                }
                _ => {}
            }
        }
    }
    last.extend(failed);
    // Runs that died or are running after planning a date, with no outcome for it recorded since.
    let mut unrecorded: BTreeMap<NaiveDate, (String, String)> = BTreeMap::new();
    for j in &journals {
        for p in &j.partitions {
            if matches!(p.action, Action::Created | Action::Replaced | Action::Unchanged | Action::Skipped) {
                unrecorded.remove(&p.date);
            }
        }
        if j.status == "died" || j.status == "running" {
            for d in j.dates.iter().filter(|d| !j.partitions.iter().any(|p| p.date == **d)) {
                unrecorded.insert(*d, (j.run_id.clone(), j.status.clone()));
            }
        }
    }
    let dates = dates.unwrap_or_else(|| {
        let mut d: Vec<NaiveDate> =
            committed.iter().copied().chain(last.keys().copied()).chain(unrecorded.keys().copied()).collect();
        d.sort();
        d.dedup();
        d
    });
    let table = crate::schema::table_schema(out, &job.state, column).await?;
    let mut parts = Vec::with_capacity(dates.len());
    let fingerprint = job.config.fingerprint();
    for date in dates {
        let dir = commit::partition_dir(column, date);
        let found =
            commit::committed_footer(out, &commit::target_path(out, &dir)).await.map_err(Error::of_partition)?;
        let committed = found.is_some();
        let footer = found.flatten();
        let lineage = footer.as_ref().and_then(|md| Lineage::from_footer(md.file_metadata().key_value_metadata()));
        let schema = match (&table, footer.as_ref().and_then(crate::schema::of_footer)) {
            (Some(t), Some(f)) => Some(if crate::schema::differences(t, &f).is_empty() { "current" } else { "older" }),
            _ => None,
        };
        let config = lineage
            .as_ref()
            .filter(|l| job.kind.output_from_input_alone() && l.config_fingerprint != fingerprint)
            .map(|_| "other");
        // Also where no file is committed: a second spelling of the date is read all the same.
        let found = commit::foreign_objects(out, &dir).await.map_err(Error::of_partition)?;
        let foreign: Vec<String> = found.iter().map(|p| out.relative(p)).collect();
        let run = last.get(&date);
        let failed = run.is_some_and(|(_, a, _)| *a == Action::Failed);
        // What the file is comes first: a file lakeswap did not write, or another date's, is
        // what readers get, whatever the last run of the date did.
        let state = match (failed, committed, &lineage) {
            (_, true, None) => "unknown",
            (_, true, Some(l)) if l.date.is_some_and(|d| d != date) => "misplaced",
            (true, ..) => "failed",
            (false, true, Some(_)) => "committed",
            (false, false, _) => "missing",
        };
        parts.push(PartitionStatus {
            date,
            state,
            committed,
            schema,
            config,
            foreign,
            lineage,
            last_run: run.map(|(id, a, _)| (id.clone(), *a)),
            unrecorded_run: unrecorded.remove(&date),
            error: run.and_then(|(_, _, e)| e.clone()),
        });
    }
    let strays = strays_in(out, column, listing).await?;
    Ok(Status { journals, partitions: parts, strays, recomputable: job.kind.output_from_input_alone() })
}

/// What the table's folder holds outside its partitions, which readers of the whole table
/// read too: objects at its top level, and folders not named `<column>=<date>` (hidden ones,
/// `_…` and `.…`, left out, as readers skip them).
pub async fn strays(job: &Job) -> Result<Vec<String>> {
    let out = &job.output;
    let listing =
        out.store.list_with_delimiter(Some(&out.prefix)).await.map_err(|e| Error::store("cannot list", &out.url, e))?;
    strays_in(out, &job.config.partition.column, listing).await
}

/// [`strays`] in the table's `listing` (with a delimiter). An empty folder's marker (`x/`, an
/// S3 console's "Create folder") holds no rows for a reader, nor does a folder holding nothing
/// else.
async fn strays_in(out: &StoreLocation, column: &str, mut listing: object_store::ListResult) -> Result<Vec<String>> {
    crate::read::list::empty_folder_markers(out, &mut listing.objects).await?;
    let mut found = named_strays(out, column, &listing);
    for folder in &listing.common_prefixes {
        let name = format!("{}/", out.relative(folder));
        if found.contains(&name) {
            // Zero-byte objects up to the first that is not (a folder of data is not read whole).
            let mut listed = out.store.list(Some(folder));
            let mut held: Vec<object_store::ObjectMeta> = Vec::new();
            while let Some(m) =
                listed.try_next().await.map_err(|e| Error::store("cannot list", out.display(folder), e))?
            {
                let data = m.size > 0;
                held.push(m);
                if data {
                    break;
                }
            }
            crate::read::list::without_folder_markers(&mut held, folder);
            crate::read::list::empty_folder_markers(out, &mut held).await?;
            if held.is_empty() {
                found.retain(|f| f != &name);
            }
        }
    }
    Ok(found)
}

fn named_strays(out: &StoreLocation, column: &str, listing: &object_store::ListResult) -> Vec<String> {
    let prefix = format!("{column}=");
    let dated =
        |name: &str| name.strip_prefix(&prefix).is_some_and(|d| NaiveDate::parse_from_str(d, "%Y-%m-%d").is_ok());
    let read = |name: &str| !name.starts_with('_') && !name.starts_with('.');
    listing
        .objects
        .iter()
        .filter(|m| !crate::read::list::is_folder_marker(m, &out.prefix, &listing.common_prefixes))
        .filter_map(|m| m.location.filename().filter(|n| read(n)).map(|_| out.relative(&m.location)))
        .chain(
            listing
                .common_prefixes
                .iter()
                .filter_map(|p| p.filename().filter(|n| read(n) && !dated(n)).map(|_| format!("{}/", out.relative(p)))),
        )
        .collect()
}

/// The runs that hold a live lease: unexpired, and not of a process known to be gone.
async fn live_runs(state: &crate::store::StoreLocation) -> std::collections::BTreeSet<String> {
    use futures::TryStreamExt;
    let prefix = state.child(&["leases"]);
    let listed: Vec<object_store::ObjectMeta> = state.store.list(Some(&prefix)).try_collect().await.unwrap_or_default();
    let now = chrono::Utc::now();
    let mut live = std::collections::BTreeSet::new();
    for m in listed {
        if let Ok(Some((Some(b), _))) = crate::lease::read(state, &m.location).await {
            if b.expires > now && !crate::lease::holder_gone(&b) {
                live.insert(b.run_id);
            }
        }
    }
    live
}

/// The status as text: recent runs, then a line and a bar per partition.
pub fn render(status: &Status, recent: usize) -> String {
    let (journals, parts) = (&status.journals, &status.partitions);
    let mut s = String::new();
    let _ = writeln!(s, "recent runs:");
    if journals.is_empty() {
        let _ = writeln!(s, "  (none)");
    }
    for j in journals.iter().rev().take(recent) {
        let failed = j.partitions.iter().filter(|p| p.action == Action::Failed).count();
        let stopped = match j.partitions.iter().filter(|p| p.action == Action::Stopped).count() {
            0 => String::new(),
            n => format!(", {n} stopped"),
        };
        let secs = j.finished_at.map(|f| (f - j.started_at).num_milliseconds() as f64 / 1000.0);
        let _ = writeln!(
            s,
            "  {}  {:<8}  exit {:<2}  {} partition(s), {} failed{}  {}  on {}",
            j.run_id,
            j.status,
            j.exit_code.map_or("-".into(), |c| c.to_string()),
            j.partitions.len().max(j.dates.len()),
            failed,
            stopped,
            secs.map_or_else(
                || match j.status.as_str() {
                    "died" => "died: it holds no live lease and never recorded its end (killed, its machine went \
                               away, or its store failed when it wrote its journal)"
                        .to_string(),
                    _ => "still running".to_string(),
                },
                |t| format!("{t:.2}s")
            ),
            j.host
        );
        // Every row a run set aside in its own folder, on any date: a date it left untouched has
        // no lineage to show them; one it found unchanged keeps them under the run that wrote it.
        let aside: u64 = j.partitions.iter().map(|p| p.quarantined_by_run()).sum();
        if aside > 0 {
            let _ = writeln!(
                s,
                "    {aside} conflicting row(s) set aside under quarantine/{}/ in the state location",
                j.run_id
            );
        }
    }
    // A merge that moves keys between dates records its swaps first: left pending, a crash
    // stopped it between two of them, and the next run of the table completes it.
    for j in journals.iter().filter(|j| !j.pending.is_empty()) {
        let dirs: Vec<&str> = j.pending.iter().map(|p| p.dir.as_str()).collect();
        let _ = writeln!(
            s,
            "\nunfinished move: run {} moved {} key(s) between dates and did not swap in {}; a reader may see \
             a moved key under two dates until the next run of this table completes it",
            j.run_id,
            j.moves.len(),
            dirs.join(", ")
        );
    }
    // A merged partition holds the rows of every batch that touched it, not one input's: its
    // bar shows the rows it holds, and it has no input rows or input fingerprint of its own.
    let bar_rows = |l: &Lineage| if status.recomputable { l.counts.input_rows } else { l.output_rows };
    let max_rows = parts.iter().filter_map(|p| p.lineage.as_ref().map(bar_rows)).max().unwrap_or(0).max(1);
    let _ = writeln!(s, "\npartitions:");
    let _ = writeln!(
        s,
        "  {:<10}  {:<9}  {:>10}  {:>8}  {:<20}  {:<32}  last run",
        "date", "state", "input rows", "rows", "", "lineage (config/input)"
    );
    for p in parts {
        let (input, rows, lin) = match &p.lineage {
            Some(l) if status.recomputable => (
                l.counts.input_rows.to_string(),
                l.output_rows.to_string(),
                format!(
                    "{}/{}",
                    l.config_fingerprint.chars().take(8).collect::<String>(),
                    l.input_fingerprint.chars().take(8).collect::<String>()
                ),
            ),
            Some(l) => (
                "-".into(),
                l.output_rows.to_string(),
                format!("{}/-", l.config_fingerprint.chars().take(8).collect::<String>()),
            ),
            None => ("-".into(), "-".into(), "-".into()),
        };
        let width = p.lineage.as_ref().map_or(0, |l| (bar_rows(l) * 20).div_ceil(max_rows) as usize);
        let bar: String = match p.state {
            "missing" => "·".repeat(20),
            _ => "█".repeat(width.min(20)),
        };
        // No run wrote a file lakeswap did not write, or one of another date.
        let mut last = match p.state {
            "unknown" | "misplaced" => "-".to_string(),
            _ => p.last_run.as_ref().map_or("-".to_string(), |(id, a)| format!("{id} ({a})")),
        };
        // A file lakeswap did not write is no partition of an older schema: a rebuild leaves it too.
        if p.schema == Some("older") && p.state != "unknown" {
            last.push_str("  [older schema: rebuild with --schema-change rebuild]");
        }
        if p.config.is_some() && matches!(p.state, "committed" | "failed") {
            last.push_str("  [written under another config: the next run computes it again]");
        }
        let _ = writeln!(
            s,
            "  {:<10}  {:<9}  {:>10}  {:>8}  {:<20}  {:<32}  {}",
            p.date, p.state, input, rows, bar, lin, last
        );
        if let Some(q) = p.lineage.as_ref().map(|l| l.counts.quarantined_rows).filter(|q| *q > 0) {
            let _ =
                writeln!(s, "              {q} conflicting row(s) set aside under quarantine/ in the state location when it was written");
        }
        if !p.foreign.is_empty() {
            let _ = writeln!(
                s,
                "              foreign objects (not lakeswap's, read by readers too): {}",
                p.foreign.join(", ")
            );
        }
        let then = if status.recomputable {
            "`verify` compares it with its input, a run replaces it"
        } else {
            "a merged table is its own history: put this date's own file back (from a backup)"
        };
        match (p.state, p.lineage.as_ref().and_then(|l| l.date)) {
            ("unknown", _) => {
                let what = if status.recomputable {
                    "a run fails this date rather than overwrite it: move the file away (to keep it), or set \
                     `[output] foreign_files = \"remove\"` to have a run replace it"
                } else {
                    then
                };
                let _ = writeln!(
                    s,
                    "              its file has no lakeswap lineage: lakeswap did not write it (copied in by hand?), or it \
                     was damaged since; \
                     {what}"
                );
            }
            ("misplaced", Some(d)) => {
                let _ =
                    writeln!(s, "              its file's lineage is {d}'s: a file of another date copied in; {then}");
            }
            _ => {}
        }
        match &p.unrecorded_run {
            Some((id, how)) if how == "running" => {
                let _ = writeln!(s, "              run {id} is running on this date: its file may change");
            }
            Some((id, _)) => {
                let _ = writeln!(
                    s,
                    "              run {id} died holding this date and recorded nothing for it: what is committed \
                     here is whole, from before that run or swapped in by it; a run of this date settles it"
                );
            }
            None => {}
        }
        match (&p.error, p.state) {
            (Some(e), "failed") => {
                let _ = writeln!(s, "              {e}");
                if p.committed {
                    let _ = writeln!(
                        s,
                        "              readers still see the file an earlier run committed (its rows are on the line above)"
                    );
                }
            }
            (Some(e), _) if p.last_run.as_ref().is_some_and(|(_, a)| *a == Action::Failed) => {
                let _ = writeln!(s, "              the last run of this date failed: {e}");
            }
            _ => {}
        }
    }
    if !status.strays.is_empty() {
        let _ = writeln!(
            s,
            "\nin the table's folder but in no partition (not lakeswap's; a reader of the whole table reads them \
             too; `gc` lists them): {}",
            status.strays.join(", ")
        );
    }
    s
}
