//! The job kind: what a run computes from each date's prepared rows (docs/design.md §2).
//!
//! A kind is a [`Kind`] — [`aggregate`] (a daily table) or [`merge`] (a current-state table) —
//! chosen by `[job] kind` in [`of`]. It decides the output schema, which columns the input
//! must hold, whether its partitions depend on their input alone (`--skip-unchanged`,
//! `verify`) or also on what is stored, and it computes the held partitions of a run into
//! files. A new kind (an SCD-2 history table, say) is one new file and one line in [`of`].

use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use bytes::Bytes;
use chrono::{DateTime, Utc};
use futures::future::BoxFuture;

use crate::config::{ConfigError, JobConfig, JobKind};
use crate::error::PartitionError;
use crate::lease::Leases;
use crate::merge::{MergeStats, Move};
use crate::plan::{PartitionPlan, Plan};
use crate::prepare::{Identity, PrepareStats};
use crate::read::{self, FlatInput, Table};
use crate::run::{Job, RunOptions};
use crate::sidecar::Sidecar;

pub mod aggregate;
pub mod merge;

/// What planning a kind gives: the output schema, the query plan when there is one, and the
/// input columns its computation reads beyond those of the identity (every object must hold
/// them); or the config key at fault and the reason.
pub type Planned = Result<(SchemaRef, Option<String>, Vec<String>), (String, String)>;

/// What a job computes. See the module documentation.
pub trait Kind: std::fmt::Debug + Send + Sync {
    /// `aggregate`, `merge`.
    fn name(&self) -> &'static str;

    /// The columns the config uses, besides identity and partition: every input object must
    /// hold them.
    fn required_columns(&self) -> Vec<String>;

    /// Checks the kind's config against the record schema (with the partition column, a
    /// date) and the lookup tables; gives the output schema, and the query plan when there is
    /// one (for `--dry-run`). The error is the config key and the reason.
    fn output_schema<'a>(
        &'a self,
        cfg: &'a JobConfig,
        record: &'a SchemaRef,
        lookups: &'a [crate::engine::Lookup],
    ) -> BoxFuture<'a, Planned>;

    /// Whether a run must name its dates (else: every date of the input).
    fn needs_dates(&self) -> bool;

    /// Whether a partition depends on its input alone (so `--skip-unchanged` and `verify` apply),
    /// rather than also on what is stored.
    fn output_from_input_alone(&self) -> bool;

    /// Whether computing a partition reads what is stored (then a schema rebuild converts it).
    fn reads_stored_state(&self) -> bool {
        !self.output_from_input_alone()
    }

    /// Whether runs of one table must not overlap at all (they may move keys between dates).
    fn one_run_at_a_time(&self) -> bool {
        false
    }

    /// Computes every held partition: its file, or why it fails.
    fn compute<'a>(&'a self, cx: &'a Context<'a>) -> BoxFuture<'a, Computed>;
}

/// The kind of a config.
pub fn of(cfg: &JobConfig) -> Result<Arc<dyn Kind>, ConfigError> {
    Ok(match cfg.job.kind {
        JobKind::Aggregate => Arc::new(aggregate::Aggregate::new(cfg)?),
        JobKind::Merge => Arc::new(merge::Merge::new(cfg)?),
    })
}

/// What a kind computes with.
pub struct Context<'a> {
    pub job: &'a Job,
    pub opts: &'a RunOptions,
    pub run_id: &'a str,
    /// The plan; its partitions are those held.
    pub plan: &'a Arc<Plan>,
    pub flat: Option<&'a Arc<FlatInput>>,
    /// The run's leases (`None` when verifying): a kind may need more partitions.
    pub leases: Option<&'a Arc<Leases>>,
    /// The table is rebuilt under a new schema.
    pub rebuild: bool,
    pub now: DateTime<Utc>,
    /// The run's memory budget and spill folder.
    pub spill: &'a crate::spill::Area,
}

impl Context<'_> {
    /// Keeps a computed file until its commit: in memory while the budget allows
    /// ([`crate::spill::Area::may_hold`]), else in the run's spill folder (its bytes then count
    /// as spilled). A run computes every partition before it commits the first, so this keeps a
    /// long run's memory flat in its number of dates.
    pub fn keep(&self, dir: &str, mut f: PartitionFile) -> Result<PartitionFile, PartitionError> {
        let Body::Memory(bytes) = &f.body else { return Ok(f) };
        let len = bytes.len() as u64;
        if f.skip || self.spill.may_hold(len) {
            return Ok(f);
        }
        let path = self.spill.folder("files")?.join(format!("{dir}.parquet"));
        std::fs::write(&path, bytes)
            .map_err(|e| PartitionError::Spill { path: path.display().to_string(), message: e.to_string() })?;
        f.body = Body::File { path, len };
        f.spilled_bytes += len;
        Ok(f)
    }

    /// The rows of one partition date: a Hive folder's objects, or the date's share of a flat
    /// input. A date without rows has the run's reference record schema.
    pub async fn table(&self, p: &PartitionPlan) -> Result<Table, PartitionError> {
        self.table_within(p, None).await
    }

    /// [`Context::table`], its rows counted by `meter` as they are read (not a flat input's,
    /// read before).
    pub async fn table_within(
        &self,
        p: &PartitionPlan,
        meter: Option<Arc<crate::spill::Meter>>,
    ) -> Result<Table, PartitionError> {
        let plan = self.plan;
        let table = match self.flat {
            Some(f) => f.table(p.date, &p.inputs, &plan.decoder)?,
            None => {
                read::read_date_within(&self.job.input, &plan.decoder, &p.inputs, p.date, Some(p.date), meter).await?
            }
        };
        match (&plan.record_schema, table.num_rows()) {
            (Some(schema), 0) => Ok(Table::empty(schema.clone())),
            _ => Ok(table),
        }
    }

    /// The identity of the job; with `key = ["*"]`, the columns of `table`.
    pub fn identity(&self, table: &Table) -> Identity {
        let cfg = &self.job.config;
        let mut id = Identity::from_config(cfg, &[]);
        if cfg.is_whole_record_key() {
            id.key = table.schema().fields().iter().map(|f| f.name().clone()).collect();
        }
        id.key_hashes = self.plan.partitions.len() + self.plan.others.len() > 1 && !cfg.is_whole_record_key();
        id.threads = self.threads();
        id
    }

    /// Threads for one partition's work: the cores left over by the partitions that run at
    /// once go to each (its hash pass, its query).
    pub fn threads(&self) -> usize {
        let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
        (cores / self.opts.concurrency.clamp(1, self.plan.partitions.len().max(1))).max(1)
    }

    /// Fails a partition whose output schema is not the run's.
    pub fn check_output(&self, schema: &SchemaRef) -> Result<(), PartitionError> {
        match &self.plan.output_schema {
            Some(expected) => {
                crate::schema::same_output(expected, schema).map_err(|why| PartitionError::OutputSchema { why })
            }
            None => Ok(()),
        }
    }
}

/// What the `compute` stage gives: a file (or a failure) per partition, and the keys a merge
/// moves between dates.
#[derive(Default)]
pub struct Computed {
    pub outcomes: Vec<Outcome>,
    pub moves: Vec<Move>,
    /// The dates whose keys a daily run checked against each other (computed and guarding
    /// alike, when there were two or more), each with its keys' fingerprint
    /// ([`crate::crossdate::keys_fingerprint`]): recorded for each date committed.
    pub checked: std::collections::BTreeMap<chrono::NaiveDate, String>,
}

/// A computed file's bytes: in memory, or in the run's spill folder until committed
/// ([`Context::keep`]).
#[derive(Debug, Clone)]
pub enum Body {
    Memory(Bytes),
    File { path: std::path::PathBuf, len: u64 },
}

impl Body {
    /// The bytes (read back from the spill folder when there).
    pub async fn load(&self) -> Result<Bytes, PartitionError> {
        match self {
            Body::Memory(b) => Ok(b.clone()),
            Body::File { path, .. } => {
                tokio::fs::read(path).await.map(Bytes::from).map_err(|e| PartitionError::Spill {
                    path: path.display().to_string(),
                    message: format!("cannot read back a computed file: {e}"),
                })
            }
        }
    }
}

/// One partition, computed.
pub struct Outcome {
    pub plan: PartitionPlan,
    pub result: Result<PartitionFile, PartitionError>,
    pub seconds: f64,
}

/// A partition's file, ready to commit.
#[derive(Debug, Clone)]
pub struct PartitionFile {
    pub body: Body,
    pub rows: usize,
    pub schema: SchemaRef,
    pub stats: PrepareStats,
    pub merge: Option<MergeStats>,
    /// Rows set aside (`on_conflict = "quarantine"`), as a Parquet file.
    pub quarantine: Option<Bytes>,
    /// Objects the file's footer names, written before it is swapped in.
    pub sidecars: Vec<Sidecar>,
    /// Objects the replaced file's footer named: removed once the swap is done.
    pub replaces: Vec<String>,
    /// Nothing to write (a merge date without batch rows).
    pub skip: bool,
    /// Bytes written to spill files while computing it.
    pub spilled_bytes: u64,
    /// A digest of the committed file it was computed from ([`crate::commit::digest`]; merges):
    /// a swap left pending by a killed run can then tell a byte-identical copy of that file
    /// (a restore, a copied table) from a change.
    pub seen_digest: Option<String>,
}
