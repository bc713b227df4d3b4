//! Record: the run journal `STATE/runs/<run_id>.json` (docs/design.md §7) — who ran what,
//! when, and what happened to each partition. Written when a run starts (status `running`)
//! and again when it ends, so a killed run leaves a trace.

use chrono::{DateTime, NaiveDate, Utc};
use futures::TryStreamExt;
use object_store::ObjectStoreExt;
use serde::{Deserialize, Serialize};

use crate::commit::Action;
use crate::error::{Error, ExitCode, Result};
use crate::prepare::PrepareStats;
use crate::store::StoreLocation;

/// What happened to one partition in a run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PartitionReport {
    pub date: NaiveDate,
    pub action: Action,
    /// The counts of preparation; `None` (`null`) when the partition failed before they were
    /// taken (its rows were not all read), never zeros standing for unknown.
    pub counts: Option<PrepareStats>,
    pub output_rows: u64,
    /// What a merge did (merge jobs only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub merge: Option<crate::merge::MergeStats>,
    pub seconds: f64,
    /// Bytes written to local spill files while computing the partition.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub spilled_bytes: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Something worth knowing about a partition that went well (`verify`: rows that match
    /// under a lineage out of date).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    pub exit_code: i32,
}

impl PartitionReport {
    /// The rows this run set aside under its own quarantine folder for the partition: an
    /// aggregate run writes them with the partition's file (one that finds the partition
    /// unchanged writes no new copy), a merge whenever it ran the date.
    pub fn quarantined_by_run(&self) -> u64 {
        let written = matches!(self.action, Action::Created | Action::Replaced)
            || (self.merge.is_some() && matches!(self.action, Action::Unchanged | Action::Untouched));
        match (written, self.counts) {
            (true, Some(c)) => c.quarantined_rows,
            _ => 0,
        }
    }
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// A partition file a merge staged and has still to swap in: the swaps of a merge that moves
/// keys between dates are recorded before the first one, so the next merge run completes them
/// after a crash (rolls forward).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingSwap {
    /// The partition folder, `<col>=<date>`.
    pub dir: String,
    /// The committed object's e-tag and version when the run planned the swap (none: the
    /// partition did not exist).
    pub e_tag: Option<String>,
    pub version: Option<String>,
    /// Whether the committed object existed, and its size.
    pub existed: bool,
    #[serde(default)]
    pub size: u64,
    /// A digest of the committed object's bytes ([`crate::commit::digest`]): a byte-identical
    /// copy of it (a restored or copied table, whose e-tags differ) is the partition as seen.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    /// A digest of the file to swap in: once its staged copy is gone, the partition holds these
    /// bytes when the swap was done, and anything else when it was rewritten since (a restore).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub staged_digest: Option<String>,
}

/// A swap an interrupted run (`run_id`) left pending, completed by a later run of the table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompletedSwap {
    pub run_id: String,
    /// The partition folder, `<col>=<date>`.
    pub partition: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Journal {
    pub run_id: String,
    pub tool: String,
    pub job: String,
    pub host: String,
    pub pid: u32,
    pub started_at: DateTime<Utc>,
    #[serde(default)]
    pub finished_at: Option<DateTime<Utc>>,
    /// `running`, `finished`.
    pub status: String,
    #[serde(default)]
    pub exit_code: Option<i32>,
    pub dates: Vec<NaiveDate>,
    /// Dates outside `dates` whose keys the run's were checked against (a retry's: the retried
    /// run's other dates), which a retry of this run checks against too.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub guarded: Vec<NaiveDate>,
    pub partitions: Vec<PartitionReport>,
    /// Swaps staged and not yet known to be done (merges that move keys between dates).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pending: Vec<PendingSwap>,
    /// Swaps an interrupted run left pending that this run completed before its own work.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub completed: Vec<CompletedSwap>,
    /// Keys this run moves from one date to another (merges), for `status`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub moves: Vec<crate::merge::Move>,
    /// The fingerprint of the config the run ran under (its `${VAR}`s and `--var`s read): a
    /// retry of its failed dates must run under the same one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<String>,
}

/// A new, sortable run id: UTC start time and a random suffix.
pub fn new_run_id(now: DateTime<Utc>) -> String {
    format!("{}-{:06x}", now.format("%Y%m%dT%H%M%S%.3fZ"), rand::random::<u32>() & 0xff_ffff)
}

pub fn host() -> String {
    gethostname::gethostname().to_string_lossy().into_owned()
}

impl Journal {
    pub fn start(run_id: &str, job: &str, dates: Vec<NaiveDate>, now: DateTime<Utc>) -> Self {
        Journal {
            run_id: run_id.to_string(),
            tool: crate::lineage::tool(),
            job: job.to_string(),
            host: host(),
            pid: std::process::id(),
            started_at: now,
            finished_at: None,
            status: "running".into(),
            exit_code: None,
            dates,
            guarded: Vec::new(),
            partitions: Vec::new(),
            pending: Vec::new(),
            completed: Vec::new(),
            moves: Vec::new(),
            config: None,
        }
    }

    pub fn finish(&mut self, partitions: Vec<PartitionReport>, exit: ExitCode) {
        self.partitions = partitions;
        self.finished_at = Some(Utc::now());
        self.status = "finished".into();
        self.exit_code = Some(exit.code());
    }

    pub async fn write(&self, state: &StoreLocation) -> Result<()> {
        let path = state.child(&["runs", &format!("{}.json", self.run_id)]);
        let body = serde_json::to_vec_pretty(self).unwrap_or_default();
        state
            .store
            .put(&path, body.into())
            .await
            .map_err(|e| Error::store("cannot write the run journal", state.display(&path), e))?;
        Ok(())
    }
}

/// Whether an object's name is a journal's: `<run id>.json`.
fn is_journal_name(name: &str) -> bool {
    name.strip_suffix(".json").is_some_and(crate::gc::is_run_id)
}

fn unreadable_journal(path: &str, why: &str) -> Error {
    Error::Usage(format!(
        "the run journal {path} cannot be read ({why}). It may record swaps a killed merge left unfinished, \
         which every run of this table finishes first, and whose staged files gc keeps: restore the file, or \
         remove it once you know it records none. Nothing was done"
    ))
}

/// Every journal of the table (in its state location), oldest first.
pub async fn read_all(state: &StoreLocation) -> Result<Vec<Journal>> {
    let prefix = state.child(&["runs"]);
    let metas: Vec<_> = state
        .store
        .list(Some(&prefix))
        .try_collect()
        .await
        .map_err(|e| Error::store("cannot list", state.display(&prefix), e))?;
    // A local folder's listing leaves out what is not a regular file: a journal behind a
    // dangling link, or a pipe, would be skipped unseen.
    if let Some(folder) = state.local_path(&prefix) {
        let listed: std::collections::HashSet<_> = metas.iter().filter_map(|m| m.location.filename()).collect();
        for entry in std::fs::read_dir(&folder).into_iter().flatten().flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            // A file now is a journal written since the listing (by a run at the same time).
            if is_journal_name(&name) && !listed.contains(name.as_str()) && !entry.path().is_file() {
                return Err(unreadable_journal(&entry.path().display().to_string(), "not a file that can be read"));
            }
        }
    }
    // Only `<run id>.json` is a journal (gc names anything else as not lakeswap's). Read 16 at
    // a time: a table run every hour has thousands, one request each on an object store.
    let reads = metas.into_iter().filter(|m| m.location.filename().is_some_and(is_journal_name)).map(|m| {
        let (store, shown) = (state.store.clone(), state.display(&m.location));
        async move {
            let unreadable = |e: object_store::Error| Error::store("cannot read the run journal", shown.clone(), e);
            let bytes = match store.get(&m.location).await {
                Ok(r) => r.bytes().await.map_err(unreadable)?,
                // Removed since the listing (a journal removed by hand).
                Err(object_store::Error::NotFound { .. }) => return Ok(None),
                Err(e) => return Err(unreadable(e)),
            };
            serde_json::from_slice::<Journal>(&bytes).map(Some).map_err(|e| unreadable_journal(&shown, &e.to_string()))
        }
    });
    // The first error ends the reading: the reads in flight are dropped.
    use futures::StreamExt;
    let read: Vec<Option<Journal>> = futures::stream::iter(reads).buffered(16).try_collect().await?;
    let mut v: Vec<Journal> = read.into_iter().flatten().collect();
    v.sort_by(|a, b| a.run_id.cmp(&b.run_id));
    Ok(v)
}

/// The staging (`<run id>/<partition folder>`) that unfinished swaps of merges still need.
pub async fn pending_staging(state: &StoreLocation) -> Result<std::collections::BTreeSet<String>> {
    Ok(read_all(state)
        .await?
        .iter()
        .flat_map(|j| j.pending.iter().map(move |p| format!("{}/{}", j.run_id, p.dir)))
        .collect())
}
