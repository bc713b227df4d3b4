//! A run: plan, then for every partition read → prepare → compute, then commit.
//!
//! Partitions stream through with bounded concurrency (`--concurrency`), so memory holds a
//! few partitions' rows, never the whole range. Computing and committing are two phases:
//! every partition is computed (to a small encoded file) before any is committed, so the
//! run-wide check for keys seen under two dates can fail both partitions before either is
//! written. A failed partition never stops the others; its error and exit code go into its
//! [`PartitionReport`].

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow::datatypes::SchemaRef;
use bytes::Bytes;
use chrono::{NaiveDate, Utc};
use futures::StreamExt;
use indicatif::ProgressBar;

use crate::aggregate;
use crate::commit::{self, Action};
use crate::config::{ConfigError, JobConfig, JobKind};
use crate::crossdate;
use crate::error::{ConflictKey, Error, ExitCode, PartitionError, Result};
use crate::gc;
use crate::journal::{self, Journal, PartitionReport};
use crate::lease::Leases;
use crate::lineage::Lineage;
use crate::merge::{self, MergeStats};
use crate::plan::{self, Layout, PartitionPlan, Plan};
use crate::prepare::{self, Identity, PrepareStats};
use crate::read::{self, FlatInput, Table};
use crate::store::{self, StoreLocation};

/// A job: its validated config and its two stores.
#[derive(Debug, Clone)]
pub struct Job {
    pub config: JobConfig,
    pub input: StoreLocation,
    pub output: StoreLocation,
}

impl Job {
    /// Loads a config file and opens its stores. Relative paths are taken from the current
    /// directory.
    pub fn load(path: &std::path::Path) -> Result<Job> {
        let config = JobConfig::load(path)?;
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
        Ok(Job { config, input, output })
    }
}

/// How to run.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// The dates to run; `None` for every date the input holds (merge jobs).
    pub dates: Option<Vec<NaiveDate>>,
    /// Partitions processed at once.
    pub concurrency: usize,
    /// Write a zero-row partition for a date without input instead of failing it.
    pub allow_empty: bool,
    /// Plan, print, touch nothing.
    pub dry_run: bool,
    /// Progress display; hidden by default.
    pub progress: ProgressBar,
    /// Print a plain progress line per partition on stderr (when there is no terminal).
    pub plain_progress: bool,
    /// How long a partition lease lives without renewal (renewed every third of it).
    pub lease_ttl: Duration,
    /// Wait for partitions leased by another run instead of failing them (exit 4).
    pub wait: bool,
    /// Skip partitions whose committed footer shows the same config and input objects.
    pub skip_unchanged: bool,
    /// Recompute in memory and compare with what is committed; write nothing.
    pub verify: bool,
    /// What to do when the output schema differs from the table's.
    pub schema_change: crate::schema::SchemaChange,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            dates: None,
            concurrency: default_concurrency(),
            allow_empty: false,
            dry_run: false,
            progress: ProgressBar::hidden(),
            plain_progress: false,
            lease_ttl: DEFAULT_LEASE_TTL,
            wait: false,
            skip_unchanged: false,
            verify: false,
            schema_change: Default::default(),
        }
    }
}

/// The default time to live of a partition lease.
pub const DEFAULT_LEASE_TTL: Duration = Duration::from_secs(60);

/// One partition per core.
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
    /// The plan as text, for `--dry-run`.
    pub plan: Option<String>,
}

impl RunSummary {
    pub fn failed(&self) -> impl Iterator<Item = &PartitionReport> {
        self.partitions.iter().filter(|p| p.action == Action::Failed)
    }
}

/// Progress of a run: a bar on a terminal, a plain line per partition otherwise.
struct Progress<'a> {
    bar: &'a ProgressBar,
    plain: bool,
    total: usize,
    done: std::sync::atomic::AtomicUsize,
    rows: std::sync::atomic::AtomicU64,
    started: Instant,
}

impl<'a> Progress<'a> {
    fn new(opts: &'a RunOptions, total: usize) -> Self {
        opts.progress.set_length(total as u64);
        Progress {
            bar: &opts.progress,
            plain: opts.plain_progress,
            total,
            done: Default::default(),
            rows: Default::default(),
            started: Instant::now(),
        }
    }

    /// A partition is through its expensive part (computed, skipped, or refused).
    fn done(&self, date: NaiveDate, what: &str, input_rows: u64) {
        use std::sync::atomic::Ordering::Relaxed;
        let n = self.done.fetch_add(1, Relaxed) + 1;
        let rows = self.rows.fetch_add(input_rows, Relaxed) + input_rows;
        let rate = rows as f64 / self.started.elapsed().as_secs_f64().max(1e-3) / 1e6;
        self.bar.set_message(format!("{rate:.1} M rows/s"));
        self.bar.inc(1);
        if self.plain {
            eprintln!("progress: {n}/{} partitions ({date} {what}), {rate:.1} M rows/s", self.total);
        }
    }
}

/// A computed partition, ready to commit.
struct Computed {
    bytes: Bytes,
    rows: usize,
    stats: PrepareStats,
    key_hashes: Vec<u64>,
    quarantine: Option<Bytes>,
    merge: Option<MergeStats>,
    /// A merge date without batch rows: left alone.
    skip: bool,
}

struct Outcome {
    date: NaiveDate,
    result: std::result::Result<Computed, PartitionError>,
    seconds: f64,
}

/// Runs a job over a set of dates.
pub async fn run(job: &Job, opts: &RunOptions) -> Result<RunSummary> {
    let started = Instant::now();
    let now = Utc::now();
    let run_id = journal::new_run_id(now);
    let cfg = &job.config;
    let merging = cfg.job.kind == JobKind::Merge;
    if opts.dates.is_none() && !merging {
        return Err(Error::Usage("an aggregate job needs --date or --from/--to".into()));
    }
    if opts.verify && merging {
        return Err(Error::Usage(
            "verify recomputes aggregate partitions from their input; a merged table is its own history".into(),
        ));
    }
    let mut plan = plan::plan(cfg, &job.input, opts.dates.as_deref()).await?;
    // A merge without a range takes every date of a flat batch: known only once it is read.
    let mut flat_first: Option<Arc<FlatInput>> = None;
    if opts.dates.is_none() && plan.layout == Layout::Flat {
        let read = read::read_flat(&job.input, &plan.decoder, &plan.objects, &[]).await;
        plan.add_partitions(cfg, &read.dates());
        flat_first = Some(Arc::new(read));
    }
    // The table's schema: a run never changes it silently.
    let table_schema = crate::schema::table_schema(&job.output, &cfg.partition.column).await?;
    let new_table_schema = match (&table_schema, &plan.output_schema) {
        (Some(t), Some(o)) if !crate::schema::differences(t, o).is_empty() => {
            if opts.schema_change != crate::schema::SchemaChange::Rebuild || opts.verify {
                return Err(Error::Usage(format!(
                    "this run would change the schema of the table {}: {}. Nothing was done. To rewrite the \
                     whole table under the new schema, run with --schema-change rebuild over a range that \
                     covers every committed partition (lakeswap status lists them); or write to a new output",
                    job.output.url,
                    crate::schema::differences(t, o).join("; ")
                )));
            }
            let committed = crate::schema::committed_dates(&job.output, &cfg.partition.column).await?;
            if merging && opts.dates.is_none() {
                // A merged table is rebuilt from its stored state: every committed date.
                let batch: std::collections::BTreeSet<NaiveDate> = plan.partitions.iter().map(|p| p.date).collect();
                let rest: Vec<NaiveDate> = committed.iter().copied().filter(|d| !batch.contains(d)).collect();
                plan.add_partitions(cfg, &rest);
                plan.partitions.sort_by_key(|p| p.date);
            }
            let planned: std::collections::BTreeSet<NaiveDate> = plan.partitions.iter().map(|p| p.date).collect();
            let missing: Vec<String> =
                committed.iter().filter(|d| !planned.contains(d)).map(|d| d.to_string()).collect();
            if !missing.is_empty() {
                return Err(Error::Usage(format!(
                    "--schema-change rebuild rewrites every committed partition, but {} of them are outside this \
                     run's range (first: {}); run over {} to {}",
                    missing.len(),
                    missing.iter().take(5).cloned().collect::<Vec<_>>().join(", "),
                    committed.first().map(|d| d.to_string()).unwrap_or_default(),
                    committed.last().map(|d| d.to_string()).unwrap_or_default()
                )));
            }
            plan.output_schema.clone()
        }
        (None, Some(o)) => Some(o.clone()),
        _ => None,
    };
    // Rebuilding under a new schema: stored merge state is converted, and rewritten even
    // where the batch has no rows.
    let rebuild = table_schema.is_some() && new_table_schema.is_some();
    let dates_owned: Vec<NaiveDate> = plan.partitions.iter().map(|p| p.date).collect();
    let dates = dates_owned.as_slice();
    tracing::info!(run_id = %run_id, partitions = plan.partitions.len(), objects = plan.objects.len(), seconds = started.elapsed().as_secs_f64(), "planned");
    if opts.dry_run {
        plan.look_up_targets(&job.output).await?;
        let partitions = plan
            .partitions
            .iter()
            .map(|p| report(p.date, Action::Planned, PrepareStats::default(), 0, 0.0, None))
            .collect();
        return Ok(RunSummary {
            run_id,
            partitions,
            exit_code: ExitCode::Ok,
            seconds: started.elapsed().as_secs_f64(),
            plan: Some(plan.describe(&job.input, &job.output)),
        });
    }

    let mut journal = Journal::start(&run_id, &cfg.job.name, dates.to_vec(), now);
    if !opts.verify {
        journal.write(&job.output).await?;
    }
    let progress = Progress::new(opts, plan.partitions.len());

    // Leases first, then the committed state as seen under them (the swap compares with it).
    let leases = Arc::new(Leases::new(job.output.clone(), &run_id, opts.lease_ttl, opts.wait));
    let mut reports: Vec<PartitionReport> = Vec::new();
    let mut held: Vec<PartitionPlan> = Vec::new();
    for p in &plan.partitions {
        // `verify` writes nothing, so it takes no lease.
        let leased = if opts.verify { Ok(()) } else { leases.acquire(&p.dir).await };
        let seen = match leased {
            Ok(()) => commit::head(&job.output, &commit::target_path(&job.output, &p.dir)).await,
            Err(e) => Err(e),
        };
        match seen {
            Ok(meta) => held.push(PartitionPlan { seen: commit::Seen { meta }, ..p.clone() }),
            Err(e) => {
                leases.release(&p.dir).await;
                progress.done(p.date, "refused", 0);
                reports.push(report(p.date, Action::Failed, PrepareStats::default(), 0, 0.0, Some(e)));
            }
        }
    }
    let _renewer = leases.spawn_renewer();
    let dirs: Vec<String> = held.iter().map(|p| p.dir.clone()).collect();
    if !opts.verify {
        dirs.iter().for_each(|d| leases.remove_leftovers(d));
        if let Err(e) = gc::remove_stale_staging(&job.output, &run_id, Some(&dirs)).await {
            tracing::warn!(error = %e, "could not remove stale staging");
        }
    }
    // --skip-unchanged: a committed partition whose footer names the same config and the same
    // input objects (paths, sizes, e-tags) is skipped without reading its input.
    let mut todo = Vec::with_capacity(held.len());
    for p in held {
        if opts.skip_unchanged && !merging && p.seen.meta.is_some() && unchanged_inputs(job, &p).await {
            leases.release(&p.dir).await;
            progress.done(p.date, "skipped", 0);
            reports.push(report(p.date, Action::Skipped, PrepareStats::default(), 0, 0.0, None));
        } else {
            todo.push(p);
        }
    }
    let mut plan = Plan { partitions: todo, ..plan };

    // Phase 1: compute every partition, a few at a time.
    let flat = match (plan.layout, flat_first) {
        (_, Some(f)) => Some(f),
        (Layout::Flat, None) => Some(Arc::new(read::read_flat(&job.input, &plan.decoder, &plan.objects, dates).await)),
        (Layout::Hive, None) => None,
    };
    // Text objects of a flat input: a date's inputs are the objects where its rows were found.
    if let (Some(f), true) = (&flat, cfg.input.format != crate::config::Format::Parquet) {
        for p in &mut plan.partitions {
            p.inputs = f.objects_of(p.date, &plan.objects, &job.input);
        }
    }
    let plan = Arc::new(plan);
    let mut id = Identity::from_config(cfg, &[]);
    id.key_hashes = plan.partitions.len() > 1 && !cfg.is_whole_record_key();
    // Cores left over by concurrent partitions go to each partition's hash pass.
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    id.threads = (cores / opts.concurrency.clamp(1, plan.partitions.len().max(1))).max(1);
    let id = Arc::new(id);
    let mut outcomes: Vec<Outcome> = futures::stream::iter(plan.partitions.iter().cloned())
        .map(|p| {
            let (plan, id, flat, progress) = (plan.clone(), id.clone(), flat.clone(), &progress);
            async move {
                let t = Instant::now();
                let result = compute_partition(job, &plan, &p, &id, flat.as_deref(), opts.allow_empty, rebuild).await;
                match &result {
                    Ok(c) => progress.done(p.date, "computed", c.stats.input_rows),
                    Err(_) => progress.done(p.date, "failed", 0),
                }
                Outcome { date: p.date, result, seconds: t.elapsed().as_secs_f64() }
            }
        })
        .buffer_unordered(opts.concurrency.max(1))
        .collect()
        .await;
    outcomes.sort_by_key(|o| o.date);

    tracing::info!(seconds = started.elapsed().as_secs_f64(), "computed");
    // Phase 2: a key seen under two dates fails both partitions.
    let check = cross_date_check(job, &plan, &id, flat.as_deref(), &mut outcomes);
    check.await;
    tracing::info!(seconds = started.elapsed().as_secs_f64(), "checked keys across dates");

    // Phase 3: commit. A table without a schema record (new, or being rebuilt) gets one first.
    if let (Some(schema), false) = (&new_table_schema, opts.verify) {
        if outcomes.iter().any(|o| o.result.as_ref().is_ok_and(|c| !c.skip)) {
            crate::schema::record(&job.output, schema).await?;
        }
    }
    let by_date: BTreeMap<NaiveDate, &PartitionPlan> = plan.partitions.iter().map(|p| (p.date, p)).collect();
    let schema = plan.output_schema.clone();
    let committed: Vec<PartitionReport> = futures::stream::iter(outcomes)
        .map(|o| {
            let p = by_date[&o.date];
            let (run_id, schema, leases) = (run_id.as_str(), schema.clone(), leases.clone());
            async move {
                let t = Instant::now();
                let r = match o.result {
                    Err(e) => report(o.date, Action::Failed, PrepareStats::default(), 0, o.seconds, Some(e)),
                    Ok(c) => {
                        let res = match leases.check(&p.dir) {
                            _ if opts.verify => verify_partition(job, p, &c).await,
                            Ok(()) if c.skip => Ok(Action::Skipped),
                            Ok(()) => commit_partition(job, run_id, p, &c, schema).await,
                            Err(e) => Err(e),
                        };
                        let secs = o.seconds + t.elapsed().as_secs_f64();
                        match res {
                            Ok(action) => PartitionReport {
                                merge: c.merge,
                                ..report(o.date, action, c.stats, c.rows as u64, secs, None)
                            },
                            Err(e) => report(o.date, Action::Failed, c.stats, c.rows as u64, secs, Some(e)),
                        }
                    }
                };
                leases.release(&p.dir).await;
                r
            }
        })
        .buffer_unordered(opts.concurrency.max(1))
        .collect()
        .await;
    reports.extend(committed);
    tracing::info!(seconds = started.elapsed().as_secs_f64(), "committed");
    reports.sort_by_key(|r| r.date);
    opts.progress.finish_and_clear();

    // Empty staging folders (this run's, and `_staging/` itself when nothing else is in it).
    let staging_root = job.output.child(&["_staging"]);
    job.output.tidy(&staging_root);
    let exit = ExitCode::combine(reports.iter().map(|r| exit_of(r.exit_code)));
    journal.finish(reports.clone(), exit);
    if !opts.verify {
        journal.write(&job.output).await?;
    }
    Ok(RunSummary {
        run_id,
        partitions: reports,
        exit_code: exit,
        seconds: started.elapsed().as_secs_f64(),
        plan: None,
    })
}

fn exit_of(code: i32) -> ExitCode {
    match code {
        0 => ExitCode::Ok,
        2 => ExitCode::Usage,
        3 => ExitCode::DataContract,
        4 => ExitCode::Leased,
        _ => ExitCode::PartialFailure,
    }
}

fn report(
    date: NaiveDate,
    action: Action,
    counts: PrepareStats,
    output_rows: u64,
    seconds: f64,
    error: Option<PartitionError>,
) -> PartitionReport {
    let exit_code = error.as_ref().map_or(ExitCode::Ok, |e| e.exit_code()).code();
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

/// Compares a recomputed partition with the committed file.
async fn verify_partition(job: &Job, p: &PartitionPlan, c: &Computed) -> std::result::Result<Action, PartitionError> {
    let path = commit::target_path(&job.output, &p.dir);
    match commit::get(&job.output, &path).await? {
        Some(b) if b == c.bytes => Ok(Action::Verified),
        Some(_) => Err(PartitionError::Differs {
            path: job.output.display(&path),
            why: "its bytes differ from a recomputation".into(),
        }),
        None => Err(PartitionError::Differs { path: job.output.display(&path), why: "it is missing".into() }),
    }
}

/// Whether the committed file of a partition was made by this config from exactly the input
/// objects listed now.
async fn unchanged_inputs(job: &Job, p: &PartitionPlan) -> bool {
    let Ok(Some(Some(lineage))) =
        commit::committed_lineage(&job.output, &commit::target_path(&job.output, &p.dir)).await
    else {
        return false;
    };
    let mut inputs = p.lineage_inputs(&job.input);
    inputs.sort();
    lineage.config_fingerprint == job.config.fingerprint()
        && lineage.input_fingerprint == crate::lineage::input_fingerprint(&inputs)
        && !inputs.is_empty()
}

/// The input table of one partition.
async fn load_table(
    job: &Job,
    plan: &Plan,
    p: &PartitionPlan,
    flat: Option<&FlatInput>,
) -> std::result::Result<Table, PartitionError> {
    let table = match flat {
        Some(f) => f.table(p.date, &p.inputs, &plan.decoder)?,
        None => read::read_date(&job.input, &plan.decoder, &p.inputs, p.date, Some(p.date)).await?,
    };
    // A date without rows has the run's reference record schema.
    match (&plan.record_schema, table.num_rows()) {
        (Some(schema), 0) => Ok(Table::empty(schema.clone())),
        _ => Ok(table),
    }
}

async fn compute_partition(
    job: &Job,
    plan: &Plan,
    p: &PartitionPlan,
    id: &Arc<Identity>,
    flat: Option<&FlatInput>,
    allow_empty: bool,
    rebuild: bool,
) -> std::result::Result<Computed, PartitionError> {
    let started = std::time::Instant::now();
    let table = load_table(job, plan, p, flat).await?;
    let read_s = started.elapsed().as_secs_f64();
    let merging = job.config.job.kind == JobKind::Merge;
    if table.num_rows() == 0 && !allow_empty && !merging {
        return Err(PartitionError::MissingInput { date: p.date });
    }
    // A merge reads the stored partition, as committed when the lease was taken.
    let stored = match (&p.seen.meta, merging) {
        (Some(_), true) => commit::get(&job.output, &commit::target_path(&job.output, &p.dir)).await?,
        _ => None,
    };
    let cfg = job.config.clone();
    // The whole record as the key: the columns of this date's record schema.
    let id = if cfg.is_whole_record_key() {
        Arc::new(Identity { key: table.schema().fields().iter().map(|f| f.name().clone()).collect(), ..(**id).clone() })
    } else {
        id.clone()
    };
    let expected = plan.output_schema.clone();
    let inputs = p.lineage_inputs(&job.input);
    let date = p.date;
    tokio::task::spawn_blocking(move || {
        let phase = std::time::Instant::now();
        let prepared = prepare::prepare(table, &id)?;
        let prepare_s = phase.elapsed().as_secs_f64();
        let record = prepared.table.schema().clone();
        let schema = match &cfg.aggregate {
            Some(agg) => aggregate::output_schema(agg, &record).map_err(PartitionError::Other)?,
            None => merge::output_schema(&record, &cfg.partition.column),
        };
        if let Some(expected) = &expected {
            crate::schema::same_output(expected, &schema).map_err(|why| PartitionError::OutputSchema { why })?;
        }
        let mut quarantined = prepared.quarantined.clone();
        let (batch, lineage, extra, merge_stats) = if merging {
            let tombs = merge::tombstone_schema(&schema, &id.key);
            let stored = stored
                .map(|b| merge::read_stored(&b, &schema, &tombs, rebuild.then_some(cfg.timezone())))
                .transpose()?;
            let m = merge::merge(&prepared, &id, &schema, &tombs, stored)?;
            // The bytes of a merged partition depend on its state only, not on the batch.
            let lineage =
                Lineage::new(cfg.fingerprint(), Vec::new(), PrepareStats::default(), m.rows.num_rows() as u64);
            let extra = if m.tombstones.num_rows() > 0 {
                vec![(merge::TOMBSTONES_KEY, merge::encode_tombstones(&m.tombstones)?)]
            } else {
                Vec::new()
            };
            quarantined.extend(&m.quarantined);
            quarantined.sort_unstable();
            (m.rows, lineage, extra, Some(m.stats))
        } else {
            let agg = cfg.aggregate.as_ref().ok_or_else(|| PartitionError::Other("no [aggregate] section".into()))?;
            let batch = aggregate::aggregate(&prepared, agg, &schema, id.threads)?;
            let lineage = Lineage::new(cfg.fingerprint(), inputs, prepared.stats, batch.num_rows() as u64);
            (batch, lineage, Vec::new(), None)
        };
        let compute_s = phase.elapsed().as_secs_f64() - prepare_s;
        let bytes = commit::encode(&batch, &lineage, &extra)?;
        let encode_s = phase.elapsed().as_secs_f64() - prepare_s - compute_s;
        tracing::debug!(%date, read_s, prepare_s, compute_s, encode_s, "computed partition");
        let quarantine = if quarantined.is_empty() {
            None
        } else {
            let rows = prepared.table.take(&quarantined).map_err(|e| PartitionError::Other(e.to_string()))?;
            Some(commit::encode(&rows, &lineage, &[])?)
        };
        Ok(Computed {
            bytes,
            rows: batch.num_rows(),
            stats: prepared.stats,
            key_hashes: prepared.key_hashes,
            quarantine,
            merge: merge_stats,
            skip: merging && prepared.stats.input_rows == 0 && !rebuild,
        })
    })
    .await
    .map_err(|e| PartitionError::Other(format!("compute task failed: {e}")))?
}

async fn commit_partition(
    job: &Job,
    run_id: &str,
    p: &PartitionPlan,
    c: &Computed,
    schema: Option<SchemaRef>,
) -> std::result::Result<Action, PartitionError> {
    let schema = schema.ok_or_else(|| PartitionError::Other("no output schema".into()))?;
    if let Some(q) = &c.quarantine {
        let path = job.output.child(&["_quarantine", run_id, &p.dir, commit::PART_FILE]);
        commit::upload(&job.output, &path, q.clone()).await?;
    }
    commit::commit(&job.output, run_id, &p.dir, c.bytes.clone(), &schema, c.rows, &p.seen).await
}

/// A key's bytes, its text, and where it was found.
type NamedKey = (Vec<u8>, String, crate::error::Location);

/// Fails every pair of partitions that share a key. Hashes find candidates cheaply; the
/// candidates' partitions are then read again to name the keys and rule out hash collisions.
async fn cross_date_check(job: &Job, plan: &Plan, id: &Identity, flat: Option<&FlatInput>, outcomes: &mut [Outcome]) {
    let ok: Vec<usize> = (0..outcomes.len()).filter(|&i| outcomes[i].result.is_ok()).collect();
    if ok.len() < 2 || job.config.is_whole_record_key() {
        return;
    }
    // Hashes in two lists are candidates: found by merging the sorted lists range by range of
    // the hash space (`crossdate`), the ranges on two threads.
    let lists: Vec<&[u64]> =
        ok.iter().map(|&i| outcomes[i].result.as_ref().map(|c| c.key_hashes.as_slice()).unwrap_or(&[])).collect();
    let mut shared = crossdate::shared_hashes(&lists);
    if shared.is_empty() {
        return;
    }
    shared.sort_unstable();
    shared.dedup();
    let mut candidates: BTreeMap<usize, Vec<u64>> = BTreeMap::new();
    for (j, l) in lists.iter().enumerate() {
        let hits: Vec<u64> = shared.iter().copied().filter(|h| l.binary_search(h).is_ok()).collect();
        if !hits.is_empty() {
            candidates.insert(j, hits);
        }
    }
    if candidates.is_empty() {
        return;
    }
    // Name the real keys (equal bytes), per partition.
    let by_date: BTreeMap<NaiveDate, &PartitionPlan> = plan.partitions.iter().map(|p| (p.date, p)).collect();
    let mut found: Vec<(usize, Vec<NamedKey>)> = Vec::new();
    for (j, mut hashes) in candidates {
        hashes.sort_unstable();
        hashes.dedup();
        let idx = ok[j];
        let p = by_date[&outcomes[idx].date];
        if let Ok(table) = load_table(job, plan, p, flat).await {
            let keys = prepare::keys_with_hashes(&table, id, &hashes);
            found.push((idx, keys.into_iter().map(|(b, s, row)| (b, s, table.locate(row, None))).collect()));
        }
    }
    let mut shared: BTreeMap<Vec<u8>, Vec<(usize, String, crate::error::Location)>> = BTreeMap::new();
    for (idx, keys) in &found {
        for (b, s, loc) in keys {
            shared.entry(b.clone()).or_default().push((*idx, s.clone(), loc.clone()));
        }
    }
    let mut per_partition: BTreeMap<usize, Vec<ConflictKey>> = BTreeMap::new();
    for places in shared.values().filter(|v| v.len() > 1) {
        let at: Vec<_> = places.iter().map(|(_, _, l)| l.clone()).collect();
        for (idx, key, _) in places {
            per_partition.entry(*idx).or_default().push(ConflictKey {
                key: key.clone(),
                version: None,
                at: at.clone(),
            });
        }
    }
    for (idx, mut keys) in per_partition {
        keys.sort_by(|a, b| a.key.cmp(&b.key));
        let total = keys.len();
        keys.truncate(5);
        outcomes[idx].result = Err(PartitionError::KeyUnderTwoDates { keys, total });
    }
}
