//! A run: the stages of the contract, in order (docs/design.md §2).
//!
//! ```text
//! plan     the dates, the input objects, the table's schema       → Planned
//! hold     each partition's lease, its committed state, cleanup    → Held
//! compute  the job's kind turns every held partition into a file   → Computed
//!          (an aggregate checks keys across dates; a merge moves keys between them)
//! commit   each file swapped in (staged first, then swapped)        → Committed
//! record   the run journal and the summary                          → RunSummary
//! ```
//!
//! Each stage takes the previous stage's result. [`dry_run`] stops after `plan`; [`verify`]
//! computes without leases and compares with what is committed instead of committing. A
//! failed partition never stops the others: its error and exit code go into its
//! [`PartitionReport`]. The library prints nothing: a run reports to the [`Observer`] it is
//! given.

use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::NaiveDate;

use crate::commit::Action;
use crate::config::{ConfigError, JobConfig};
use crate::error::{ExitCode, PartitionError, Result};
use crate::journal::PartitionReport;
use crate::kind::{self, Kind};
use crate::prepare::PrepareStats;
use crate::store::{self, StoreLocation};

pub(crate) mod commit;
mod hold;
mod observe;
mod planned;

pub use crate::stop::Stop;
pub use observe::{Event, Observer, Silent};
pub use planned::{local_place_holding, Planned};

/// A job: its validated config, its kind and its two stores.
#[derive(Debug, Clone)]
pub struct Job {
    pub config: JobConfig,
    pub kind: Arc<dyn Kind>,
    pub input: StoreLocation,
    pub output: StoreLocation,
    /// Where the table's run state lives (`[output] state_url`): journals, leases, staged and
    /// quarantined files, the table's schema, sidecars.
    pub state: StoreLocation,
}

impl Job {
    /// Loads a config file and opens its stores. Relative paths are taken from the current
    /// directory.
    pub fn load(path: &std::path::Path) -> Result<Job> {
        Job::load_with(path, &crate::vars::Vars::environment())
    }

    /// Loads a config file with its `${VAR}`s taken from `vars`, and opens its stores.
    pub fn load_with(path: &std::path::Path, vars: &crate::vars::Vars) -> Result<Job> {
        let config = JobConfig::load_with(path, vars)?;
        Job::from_config(config, &path.display().to_string())
    }

    /// Loads a config file and opens its stores for a command that only reads (`status`,
    /// `verify`, `--dry-run`): nothing is created or written, and a table not written yet
    /// reads as empty.
    pub fn load_read_only(path: &std::path::Path, vars: &crate::vars::Vars) -> Result<Job> {
        let config = JobConfig::load_with(path, vars)?;
        Job::open(config, &path.display().to_string(), Access::ReadOnly)
    }

    /// Loads a config file for a command that reads or tidies the output alone (`status`,
    /// `gc`): an input folder not made yet is no error there, as nothing is read from it.
    pub fn load_for_output(path: &std::path::Path, vars: &crate::vars::Vars, writes: bool) -> Result<Job> {
        let config = JobConfig::load_with(path, vars)?;
        let access = if writes { Access::OutputOnly } else { Access::OutputReadOnly };
        Job::open(config, &path.display().to_string(), access)
    }

    /// Opens the stores of a validated config.
    pub fn from_config(config: JobConfig, origin: &str) -> Result<Job> {
        Job::open(config, origin, Access::Run)
    }

    fn open(mut config: JobConfig, origin: &str, access: Access) -> Result<Job> {
        let writes = matches!(access, Access::Run | Access::OutputOnly);
        config.origin = origin.to_string();
        let fix = |e: ConfigError| match e {
            ConfigError::Invalid { key, message, .. } => {
                ConfigError::Invalid { path: origin.to_string(), key, message }
            }
            other => other,
        };
        // An input folder not made yet is input not arrived yet (exit 1, as an empty one or a
        // bucket prefix with no object), not a config error a scheduler would not retry.
        let reads_input = matches!(access, Access::Run | Access::ReadOnly);
        if let Some(dir) = store::missing_local_folder(&config.input.url).filter(|_| reads_input) {
            return Err(crate::Error::Input(crate::error::InputError::unreadable(
                crate::error::Location::object(config.input.url.clone()),
                format!(
                    "the input folder {} does not exist (yet): no input has arrived there, so no date can be \
                     computed; a run after it arrives computes them (a plain path is taken relative to the current \
                     directory, here {})",
                    dir.display(),
                    std::env::current_dir().map_or_else(|_| "?".into(), |d| d.display().to_string())
                ),
            )));
        }
        let input = match reads_input {
            true => store::open(&config.input.url, &config.input.options, "input.url", false),
            false => store::open_read(&config.input.url, &config.input.options, "input.url"),
        }
        .map_err(fix)?;
        let (url, options) = (&config.output.url, &config.output.options);
        let output = match writes {
            true => store::open(url, options, "output.url", true),
            false => store::open_read(url, options, "output.url"),
        }
        .map_err(fix)?;
        let state_url = config.output.state_url().unwrap_or_default();
        let state = match writes {
            true => store::open_state(&state_url, options, &output),
            false => store::open_state_read(&state_url, options, &output),
        }
        .map_err(fix)?;
        let kind = kind::of(&config)?;
        Ok(Job { config, kind, input, output, state })
    }
}

/// What a command does with a job's stores.
#[derive(Clone, Copy)]
enum Access {
    /// A run: reads the input, writes the output.
    Run,
    /// Reads the input and the output, writes nothing (`--dry-run`, `verify`).
    ReadOnly,
    /// Tidies the output, reads no input (`gc`).
    OutputOnly,
    /// Reads the output alone (`status`, `gc --dry-run`).
    OutputReadOnly,
}

impl Job {
    /// The name of a table whose run state (`table.json`) lies in the output's folder `old`:
    /// the output is the folder around tables (`_lakeswap/<table>/`), not a table.
    async fn holds_tables(&self, old: &str) -> Result<Option<String>> {
        use object_store::ObjectStoreExt;
        if old != LEGACY_STATE[0] {
            return Ok(None);
        }
        let at = self.output.child(&[old]);
        let listed = self.output.store.list_with_delimiter(Some(&at)).await;
        let listed = listed.map_err(|e| crate::Error::store("cannot list", self.output.display(&at), e))?;
        for folder in &listed.common_prefixes {
            let marker = folder.clone().join(TABLE_MARKER);
            match self.output.store.head(&marker).await {
                Ok(_) => return Ok(folder.filename().map(str::to_string)),
                Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => return Err(crate::Error::store("cannot read", self.output.display(&marker), e)),
            }
        }
        Ok(None)
    }

    /// The folder around the output that is a lakeswap table, and its run state, if one is: a
    /// folder `A` whose default state `parent(A)/_lakeswap/name(A)/` names a table.
    async fn inside_table(&self) -> Result<Option<(String, String)>> {
        use object_store::ObjectStoreExt;
        if let Some(root) = self.output.protocol.local_root() {
            for folder in root.ancestors().skip(1) {
                let (Some(parent), Some(name)) = (folder.parent(), folder.file_name()) else { continue };
                let state = parent.join(LEGACY_STATE[0]).join(name);
                if state.join(TABLE_MARKER).is_file() {
                    return Ok(Some((folder.display().to_string(), state.display().to_string())));
                }
            }
            return Ok(None);
        }
        let parts: Vec<String> = self.output.prefix.parts().map(|p| p.as_ref().to_string()).collect();
        // Keys as the prefix names them (`p~q`), joined as they are: built part by part, each
        // part would be encoded again (`p%7Eq`), and another key asked for.
        let key = |parts: &[&str]| object_store::path::Path::parse(parts.join("/"));
        for i in (1..parts.len()).rev() {
            let mut state: Vec<&str> = parts[..i - 1].iter().map(String::as_str).collect();
            state.extend([LEGACY_STATE[0], parts[i - 1].as_str()]);
            let Ok(state) = key(&state) else { continue };
            let marker = state.clone().join(TABLE_MARKER);
            match self.output.store.head(&marker).await {
                Ok(_) => {
                    let folder: Vec<&str> = parts[..i].iter().map(String::as_str).collect();
                    let folder = key(&folder).unwrap_or_default();
                    return Ok(Some((self.output.display(&folder), self.output.display(&state))));
                }
                Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => return Err(crate::Error::store("cannot read", self.output.display(&marker), e)),
            }
        }
        Ok(None)
    }

    /// Checks the table and its state location belong together, before anything reads or
    /// writes state:
    /// - a table whose run state still lives inside it (`OUT/_lakeswap/`, `_staging/`,
    ///   `_quarantine/`, as lakeswap 0.1.0 wrote it) is refused: a run would otherwise start a
    ///   second, empty state beside it and forget the table's journals, schema record and a
    ///   merge's tombstones (and readers would read the leftovers);
    /// - the state names its table (`STATE/table.json`, written by the first command that
    ///   writes to it: `claim`): a state location another table uses is refused — two tables
    ///   sharing one state would take each other's leases, journals, schema record and sidecars
    ///   (`gc` would delete the other's tombstones). Commands that only read (`status`,
    ///   `verify`, `--dry-run`) check the record without writing it, so read-only credentials do.
    pub async fn check_layout(&self, claim: bool) -> Result<()> {
        use futures::StreamExt;
        let (out, state) = (&self.output.url, &self.state.url);
        let refuse = |key: &str, message: String| -> crate::Error {
            ConfigError::Invalid { path: self.config.origin.clone(), key: key.into(), message }.into()
        };
        if let Some((table, its_state)) = self.inside_table().await? {
            return Err(refuse(
                "output.url",
                format!(
                    "`{out}` lies inside the lakeswap table {table} (whose run state is {its_state}): readers of that \
                     table would read this one's files as its rows, and its runs refuse a folder holding another \
                     table. Give this table a folder outside it (beside it, say). Nothing was done"
                ),
            ));
        }
        for old in LEGACY_STATE {
            let path = self.output.child(&[old]);
            match self.output.store.list(Some(&path)).next().await {
                None => {}
                Some(Err(e)) => return Err(crate::Error::store("cannot list", self.output.display(&path), e)),
                Some(Ok(_)) => {
                    if let Some(name) = self.holds_tables(old).await? {
                        return Err(refuse(
                            "output.url",
                            format!(
                                "`{out}` holds other lakeswap tables: {out}/{old}/{name}/ is the run state of the \
                                 table {out}/{name}. A table needs a folder of its own, inside it or beside it \
                                 (is a variable of the URL empty?). Nothing was done"
                            ),
                        ));
                    }
                    return Err(refuse(
                        "output.url",
                        format!(
                            "`{out}` keeps lakeswap's run state inside the table ({out}/{old}/), as lakeswap \
                             0.1.0 wrote it; it now lives beside the table, at `{state}` (`[output] state_url`), \
                             so that readers see the table only. Move it there once, with no run going (making that \
                             folder first where it is missing): \
                             {out}/_lakeswap/* to {state}/, {out}/_staging/ to {state}/staging/, \
                             {out}/_quarantine/ to {state}/quarantine/ (each when present); then run again"
                        ),
                    ));
                }
            }
        }
        let mine = self.table_identity();
        let marker = self.state.child(&[TABLE_MARKER]);
        if claim {
            let body = serde_json::to_vec_pretty(&serde_json::json!({ "table": mine })).unwrap_or_default();
            let create = object_store::PutOptions { mode: object_store::PutMode::Create, ..Default::default() };
            match self.state.store.put_opts(&marker, body.into(), create).await {
                Ok(_) => return Ok(()),
                Err(object_store::Error::AlreadyExists { .. } | object_store::Error::Precondition { .. }) => {}
                Err(e) => return Err(crate::Error::store("cannot write", self.state.display(&marker), e)),
            }
        }
        let bytes = crate::commit::get(&self.state, &marker).await.map_err(crate::Error::of_partition)?;
        if bytes.is_none() {
            // Not claimed yet: no command has written to this state.
            return Ok(());
        }
        let theirs = bytes
            .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
            .and_then(|v| v.get("table").and_then(|t| t.as_str()).map(str::to_string));
        if theirs.as_deref() == Some(mine.as_str()) {
            return Ok(());
        }
        Err(refuse(
            "output.state_url",
            format!(
                "the state location `{state}` belongs to another table ({}, says {}), not to `{mine}`: two \
                 tables sharing one state would take each other's leases, journals and a merge's tombstones. \
                 Give this table a state of its own (`state_url`). If the table itself was moved or copied \
                 together with this state, write its new location into {} and run again",
                theirs.as_deref().unwrap_or("an unreadable record"),
                self.state.display(&marker),
                self.state.display(&marker)
            ),
        ))
    }

    /// What names the table in its state's marker: the canonical folder of a local table, the
    /// URL of one in an object store.
    fn table_identity(&self) -> String {
        match self.output.protocol.local_root() {
            Some(root) => root.display().to_string(),
            None => self.output.url.trim_end_matches('/').to_string(),
        }
    }
}

/// The folders lakeswap 0.1.0 kept the run state in, inside the table.
const LEGACY_STATE: [&str; 3] = ["_lakeswap", "_staging", "_quarantine"];

/// The object in a state location naming the table it belongs to.
const TABLE_MARKER: &str = "table.json";

/// How to run.
#[derive(Clone)]
pub struct RunOptions {
    /// The dates to run; `None` for every date the input holds (merge jobs).
    pub dates: Option<Vec<NaiveDate>>,
    /// Dates this run does not compute whose keys its dates are checked against, as if in its
    /// range (a daily table's: no key under two dates) — a retried run's other dates, which
    /// its failed dates were never checked with.
    pub guard_dates: Vec<NaiveDate>,
    /// Partitions processed at once.
    pub concurrency: usize,
    /// Write a zero-row partition for a date without input instead of failing it.
    pub allow_empty: bool,
    /// How long a partition lease lives without renewal (renewed every third of it).
    pub lease_ttl: Duration,
    /// Wait for partitions leased by another run instead of failing them (exit 4).
    pub wait: bool,
    /// Skip partitions whose committed footer shows the same config and input objects.
    pub skip_unchanged: bool,
    /// What to do when the output schema differs from the table's.
    pub schema_change: crate::schema::SchemaChange,
    /// Who hears of the run's progress.
    pub observer: Arc<dyn Observer>,
    /// Asks the run to stop politely (see [`Stop`]).
    pub stop: Arc<Stop>,
    /// The run's memory budget, in bytes (`--memory-limit`).
    pub memory_limit: u64,
    /// Where partitions larger than the budget spill (`--spill-dir`).
    pub spill_dir: std::path::PathBuf,
}

impl std::fmt::Debug for RunOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunOptions").field("dates", &self.dates).field("concurrency", &self.concurrency).finish()
    }
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            dates: None,
            guard_dates: Vec::new(),
            concurrency: default_concurrency(),
            allow_empty: false,
            lease_ttl: DEFAULT_LEASE_TTL,
            wait: false,
            skip_unchanged: false,
            schema_change: Default::default(),
            observer: Arc::new(Silent),
            stop: Arc::new(Stop::default()),
            memory_limit: crate::spill::default_limit(),
            spill_dir: std::env::temp_dir(),
        }
    }
}

/// The memory budget and spill folder of run `run_id`.
pub(crate) fn spill_area(job: &Job, opts: &RunOptions, run_id: &str) -> Arc<crate::spill::Area> {
    // Resolved as it was checked: a `..` after a missing folder creates nothing.
    let spill_dir = crate::read::list::physical(&opts.spill_dir);
    Arc::new(crate::spill::Area::new(&spill_dir, run_id, job.state.url.clone(), opts.memory_limit))
}

/// The default time to live of a partition lease.
pub const DEFAULT_LEASE_TTL: Duration = Duration::from_secs(60);

/// The longest lease: a crashed run's partitions stay leased this long. A run of any length
/// renews its leases, so no run needs more.
pub const MAX_LEASE_TTL: Duration = Duration::from_secs(7 * 24 * 3600);

/// Refuses options the job's kind has no use for: a flag accepted and ignored would let a user
/// believe it did something.
fn check_for_kind(job: &Job, opts: &RunOptions) -> Result<()> {
    if !job.kind.output_from_input_alone() {
        let kind = job.kind.name();
        if opts.allow_empty {
            return Err(crate::Error::Usage(format!(
                "--allow-empty writes a zero-row partition for a date without input; a {kind} run changes \
                 only the keys its batch holds, so a date without input already changes nothing. Run \
                 without it"
            )));
        }
        if opts.skip_unchanged {
            return Err(crate::Error::Usage(format!(
                "--skip-unchanged skips a partition recomputed from the same input; a {kind} table's \
                 partitions also hold every row merged before, so they are never recomputed from input \
                 alone (a replayed batch changes nothing: its versions are not newer). Run without it"
            )));
        }
    }
    Ok(())
}

/// Refuses options a run cannot honour as given.
fn check_options(opts: &RunOptions) -> Result<()> {
    if opts.lease_ttl.is_zero() || opts.lease_ttl > MAX_LEASE_TTL {
        return Err(crate::Error::Usage(format!(
            "the lease TTL must be more than 0 and at most {} seconds (7 days), not {} s: a crashed run's \
             partitions stay leased that long, and a live run renews its leases every third of it",
            MAX_LEASE_TTL.as_secs(),
            opts.lease_ttl.as_secs_f64()
        )));
    }
    Ok(())
}

/// The default number of partitions at once: one per core, at most 8 (beyond that the
/// partitions in flight cost memory without adding speed).
pub fn default_concurrency() -> usize {
    std::thread::available_parallelism().map(|n| n.get()).unwrap_or(2).clamp(1, 8)
}

/// What a run did.
#[derive(Debug, Clone)]
pub struct RunSummary {
    pub run_id: String,
    pub partitions: Vec<PartitionReport>,
    pub exit_code: ExitCode,
    pub seconds: f64,
    /// The run journal could not be written (the store went away): the partitions' reports
    /// still say what happened to each; the exit code is at least 1.
    pub journal_error: Option<String>,
    /// A merge's run: its table shows a merge's counts, also when no partition got that far.
    pub merge: bool,
    /// Swaps a killed run left pending that this run completed first (merges that move keys).
    pub completed: Vec<crate::journal::CompletedSwap>,
}

impl RunSummary {
    pub fn failed(&self) -> impl Iterator<Item = &PartitionReport> {
        self.partitions.iter().filter(|p| matches!(p.action, Action::Failed | Action::Stopped | Action::Differs))
    }
}

/// Runs a job over a set of dates: plan, hold, compute, commit, record.
pub async fn run(job: &Job, opts: &RunOptions) -> Result<RunSummary> {
    check_options(opts)?;
    check_for_kind(job, opts)?;
    // Checked first, claimed once the plan holds: a run refused by its plan writes nothing.
    job.check_layout(false).await?;
    let planned = Planned::new(job, opts, false).await?;
    job.check_layout(true).await?;
    let held = hold::hold(job, opts, planned).await?;
    let computed = job.kind.compute(&held.context(job, opts)).await;
    let committed = commit::commit(job, opts, held, computed).await;
    commit::record(job, opts, committed).await
}

/// The plan as text, for `--dry-run`: nothing is touched.
pub async fn dry_run(job: &Job, opts: &RunOptions) -> Result<String> {
    check_options(opts)?;
    check_for_kind(job, opts)?;
    job.check_layout(false).await?;
    let mut planned = Planned::new(job, opts, false).await?;
    planned.plan.look_up_targets(&job.output).await?;
    let mut verdicts = std::collections::BTreeMap::new();
    let mut skips = Vec::new();
    for p in &planned.plan.partitions {
        if hold::skippable(job, opts, &planned.plan, p).await.is_some() {
            skips.push(p);
        }
    }
    let again = hold::unchecked_skips(job, &planned.plan, &skips).await;
    for p in &planned.plan.partitions {
        let v = match (skips.iter().any(|s| s.date == p.date), again.contains(&p.date)) {
            (true, false) => {
                Some("would skip (--skip-unchanged: made from these input objects, by this config)".to_string())
            }
            (true, true) => Some(
                "would compute again (--skip-unchanged: unchanged, but its keys were never checked with those of \
                 another date this run would skip)"
                    .to_string(),
            ),
            (false, _) => verdict(job, opts, &planned.plan, p).await,
        };
        if let Some(v) = v {
            verdicts.insert(p.date, v);
        }
    }
    Ok(planned.plan.describe(&job.input, &job.output, &verdicts))
}

/// What a run would do with a planned partition it does not skip, where the plan alone does not
/// say it: leave it alone, write it empty, or fail it for what its folder holds.
async fn verdict(
    job: &Job,
    opts: &RunOptions,
    plan: &crate::plan::Plan,
    p: &crate::plan::PartitionPlan,
) -> Option<String> {
    use crate::config::ForeignFiles;
    let merge = job.kind.reads_stored_state();
    if p.inputs.is_empty() && merge {
        return Some("no batch rows: would be left alone".into());
    }
    if p.inputs.is_empty() && !opts.allow_empty {
        return None;
    }
    // The run's own check of the folder: objects lakeswap did not write fail the date, unless
    // `foreign_files = "remove"` may remove them.
    let foreign = match self::commit::foreign(job, &p.dir).await {
        Err(crate::error::PartitionError::Foreign { objects, remove_set, .. }) => {
            return Some(format!(
                "would fail: objects lakeswap did not write are in its folder: {} ({})",
                objects.join(", "),
                if remove_set {
                    "move them away: `foreign_files = \"remove\"` removes only objects inside the partition's own \
                     folder, and nothing through a symbolic link"
                } else {
                    "move them away, or set `foreign_files = \"remove\"`"
                }
            ))
        }
        Err(e) => return Some(format!("would fail: {e}")),
        Ok(found) => found,
    };
    let remove = job.config.output.foreign_files == ForeignFiles::Remove;
    let out = &job.output;
    let lineage = match p.seen.meta {
        Some(_) => crate::commit::committed_lineage(out, &crate::commit::target_path(out, &p.dir)).await.ok().flatten(),
        None => None,
    };
    // What `foreign_files = "remove"` would delete or overwrite, said before the run does it.
    let mut removes = Vec::new();
    if !foreign.is_empty() {
        removes.push(format!(
            "remove objects lakeswap did not write: {}",
            crate::commit::foreign_names(out, &p.dir, &foreign).join(", ")
        ));
    }
    if matches!(lineage, Some(None)) && remove && !merge {
        removes.push("overwrite its file, which lakeswap did not write".to_string());
    }
    let removing = |verdict: &str| format!("{verdict}, and {} (foreign_files = \"remove\")", removes.join(", and "));
    let told: Option<String> = match lineage {
        Some(None) if merge || !remove => Some(
            "would fail: its file has no lakeswap lineage (lakeswap did not write it, or it was damaged since); move it away, or set \
             `foreign_files = \"remove\"` (an aggregate)"
                .into(),
        ),
        Some(Some(l)) if merge && l.date.is_some_and(|d| d != p.date) => {
            Some("would fail: its file's lineage is another date's (a file of that date copied in)".into())
        }
        _ if p.inputs.is_empty() => Some("no input: would be written as a zero-row file (--allow-empty)".into()),
        // Every object of a flat input may hold any date: which dates the batch holds is read.
        _ if merge && plan.layout == crate::plan::Layout::Flat => {
            Some("would merge the batch's rows of this date, if it holds any (else left alone)".into())
        }
        _ => None,
    };
    match told {
        Some(t) if t.starts_with("would fail") || removes.is_empty() => Some(t),
        Some(t) => Some(removing(&t)),
        None if removes.is_empty() => None,
        None if p.seen.meta.is_some() => Some(removing("would replace its file (or keep it, when unchanged)")),
        None => Some(removing("would create")),
    }
}

/// Recomputes partitions without leases and compares each with its committed file; writes
/// nothing. An aggregate job only: a merged table is its own history.
pub async fn verify(job: &Job, opts: &RunOptions) -> Result<RunSummary> {
    if !job.kind.output_from_input_alone() {
        return Err(crate::Error::Usage(format!(
            "verify recomputes partitions from their input; a {} table is its own history",
            job.kind.name()
        )));
    }
    job.check_layout(false).await?;
    let planned = Planned::new(job, opts, true).await?;
    let held = hold::unleased(job, opts, planned).await?;
    let computed = job.kind.compute(&held.context(job, opts)).await;
    commit::compare(job, held, computed).await
}

/// A partition's report.
pub(crate) fn report(
    date: NaiveDate,
    action: Action,
    counts: Option<PrepareStats>,
    output_rows: u64,
    seconds: f64,
    error: Option<PartitionError>,
) -> PartitionReport {
    let exit_code = error.as_ref().map_or(ExitCode::Ok, |e| e.exit_code()).code();
    let action = match &error {
        Some(PartitionError::Stopped { .. }) => Action::Stopped,
        Some(PartitionError::Differs { .. }) => Action::Differs,
        _ => action,
    };
    // Nothing was written for a date that failed or stopped, whatever it computed.
    let output_rows = if matches!(action, Action::Failed | Action::Stopped) { 0 } else { output_rows };
    PartitionReport {
        date,
        action,
        counts,
        output_rows,
        merge: None,
        seconds,
        spilled_bytes: 0,
        error: error.map(|e| e.to_string()),
        note: None,
        exit_code,
    }
}

fn exit_of(code: i32) -> ExitCode {
    match code {
        0 => ExitCode::Ok,
        2 => ExitCode::Usage,
        3 => ExitCode::DataContract,
        4 => ExitCode::Leased,
        129 => ExitCode::HungUp,
        130 => ExitCode::Interrupted,
        143 => ExitCode::Terminated,
        _ => ExitCode::PartialFailure,
    }
}

fn elapsed(t: Instant) -> f64 {
    t.elapsed().as_secs_f64()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_ttl_of_none_or_past_a_week_is_refused_not_changed() {
        let with = |lease_ttl| check_options(&RunOptions { lease_ttl, ..Default::default() });
        for ttl in [Duration::ZERO, MAX_LEASE_TTL + Duration::from_millis(1), Duration::MAX] {
            assert!(matches!(with(ttl), Err(crate::Error::Usage(m)) if m.contains("lease TTL")), "{ttl:?}");
        }
        for ttl in [Duration::from_millis(150), DEFAULT_LEASE_TTL, MAX_LEASE_TTL] {
            assert!(with(ttl).is_ok(), "{ttl:?}");
        }
    }
}
