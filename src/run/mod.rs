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

mod commit;
mod hold;
mod observe;
mod planned;

pub use crate::stop::Stop;
pub use observe::{Event, Observer, Silent};
pub use planned::Planned;

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

    /// Opens the stores of a validated config.
    pub fn from_config(mut config: JobConfig, origin: &str) -> Result<Job> {
        config.origin = origin.to_string();
        let fix = |e: ConfigError| match e {
            ConfigError::Invalid { key, message, .. } => {
                ConfigError::Invalid { path: origin.to_string(), key, message }
            }
            other => other,
        };
        let input = store::open(&config.input.url, &config.input.options, "input.url", false).map_err(fix)?;
        let output = store::open(&config.output.url, &config.output.options, "output.url", true).map_err(fix)?;
        let state_url = config.output.state_url().unwrap_or_default();
        let state = store::open_state(&state_url, &config.output.options, &output).map_err(fix)?;
        let kind = kind::of(&config)?;
        Ok(Job { config, kind, input, output, state })
    }
}

impl Job {
    /// Refuses a table whose run state still lives inside it (`OUT/_lakeswap/`, as lakeswap
    /// wrote it before `[output] state_url`): a run would otherwise start a second, empty state
    /// beside it and forget the table's journals, schema record and a merge's tombstones.
    pub async fn check_layout(&self) -> Result<()> {
        use futures::StreamExt;
        let old = self.output.child(&[LEGACY_STATE]);
        let found = self.output.store.list(Some(&old)).next().await;
        match found {
            None => Ok(()),
            Some(Err(e)) => Err(crate::Error::store("cannot list", self.output.display(&old), e)),
            Some(Ok(_)) => {
                let (out, state) = (&self.output.url, &self.state.url);
                Err(ConfigError::Invalid {
                    path: self.config.origin.clone(),
                    key: "output.url".into(),
                    message: format!(
                        "`{out}` keeps lakeswap's run state inside the table ({out}/_lakeswap/), as older versions \
                         wrote it; it now lives beside the table, at `{state}` (`[output] state_url`), so that \
                         readers see the table only. Move it there once, with no run going: {out}/_lakeswap/* to \
                         {state}/, {out}/_staging/ to {state}/staging/, {out}/_quarantine/ to \
                         {state}/quarantine/ (those two when present); then run again"
                    ),
                }
                .into())
            }
        }
    }
}

/// The folder older versions kept the run state in, inside the table.
const LEGACY_STATE: &str = "_lakeswap";

/// How to run.
#[derive(Clone)]
pub struct RunOptions {
    /// The dates to run; `None` for every date the input holds (merge jobs).
    pub dates: Option<Vec<NaiveDate>>,
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
            concurrency: default_concurrency(),
            allow_empty: false,
            lease_ttl: DEFAULT_LEASE_TTL,
            wait: false,
            skip_unchanged: false,
            schema_change: Default::default(),
            observer: Arc::new(Silent),
            stop: Arc::new(Stop::default()),
        }
    }
}

/// The default time to live of a partition lease.
pub const DEFAULT_LEASE_TTL: Duration = Duration::from_secs(60);

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
}

impl RunSummary {
    pub fn failed(&self) -> impl Iterator<Item = &PartitionReport> {
        self.partitions.iter().filter(|p| matches!(p.action, Action::Failed | Action::Stopped | Action::Differs))
    }
}

/// Runs a job over a set of dates: plan, hold, compute, commit, record.
pub async fn run(job: &Job, opts: &RunOptions) -> Result<RunSummary> {
    let planned = Planned::new(job, opts, false).await?;
    let held = hold::hold(job, opts, planned).await?;
    let computed = job.kind.compute(&held.context(job, opts)).await;
    let committed = commit::commit(job, opts, held, computed).await;
    commit::record(job, opts, committed).await
}

/// The plan as text, for `--dry-run`: nothing is touched.
pub async fn dry_run(job: &Job, opts: &RunOptions) -> Result<String> {
    let mut planned = Planned::new(job, opts, false).await?;
    planned.plan.look_up_targets(&job.output).await?;
    Ok(planned.plan.describe(&job.input, &job.output))
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
    let planned = Planned::new(job, opts, true).await?;
    let held = hold::unleased(job, opts, planned).await?;
    let computed = job.kind.compute(&held.context(job, opts)).await;
    commit::compare(job, held, computed).await
}

/// A partition's report.
pub(crate) fn report(
    date: NaiveDate,
    action: Action,
    counts: PrepareStats,
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
    PartitionReport {
        date,
        action,
        counts,
        output_rows,
        merge: None,
        seconds,
        error: error.map(|e| e.to_string()),
        exit_code,
    }
}

fn exit_of(code: i32) -> ExitCode {
    match code {
        0 => ExitCode::Ok,
        2 => ExitCode::Usage,
        3 => ExitCode::DataContract,
        4 => ExitCode::Leased,
        130 => ExitCode::Interrupted,
        143 => ExitCode::Terminated,
        _ => ExitCode::PartialFailure,
    }
}

fn elapsed(t: Instant) -> f64 {
    t.elapsed().as_secs_f64()
}
