//! The `plan` stage of a run: the plan ([`crate::plan`]), and the table's schema decision — a
//! run never changes the table's schema silently ([`crate::schema`]).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Instant;

use arrow::datatypes::SchemaRef;
use chrono::{DateTime, NaiveDate, Utc};

use super::{Job, RunOptions};
use crate::error::{Error, Result};
use crate::journal;
use crate::plan::{self, Layout, Plan};
use crate::read::{self, FlatInput};
use crate::schema::{self, SchemaChange};

/// A planned run.
pub struct Planned {
    pub run_id: String,
    pub started: Instant,
    pub now: DateTime<Utc>,
    pub plan: Plan,
    /// A flat input already read (a merge without dates learns its dates by reading it).
    pub flat: Option<Arc<FlatInput>>,
    /// The schema to record as the table's before the first swap: a new table's, or a rebuilt
    /// one's.
    pub new_table_schema: Option<SchemaRef>,
    /// `new_table_schema` is the table's own, recorded again to add this run's identity (a
    /// merge table recorded without one): only by a run whose every partition succeeds.
    pub identity_adopted: bool,
    /// The table is rebuilt under a new schema (`--schema-change rebuild`).
    pub rebuild: bool,
}

impl Planned {
    pub async fn new(job: &Job, opts: &RunOptions, verify: bool) -> Result<Planned> {
        check_spill_dir(job, &opts.spill_dir)?;
        let started = Instant::now();
        let now = Utc::now();
        let run_id = journal::new_run_id(now);
        let cfg = &job.config;
        if opts.dates.is_none() && job.kind.needs_dates() {
            return Err(Error::Usage(format!("a {} job needs dates: --date D, or --from A --to B", job.kind.name())));
        }
        // Planned with the run's dates; taken out of its partitions once their objects are listed.
        let checked = job.kind.output_from_input_alone() && !cfg.is_whole_record_key();
        let guards: BTreeSet<NaiveDate> = match (&opts.dates, checked) {
            (Some(d), true) if !d.is_empty() => opts.guard_dates.iter().copied().filter(|g| !d.contains(g)).collect(),
            _ => BTreeSet::new(),
        };
        // The run's dates first: the plan's reference schema is its first date's with objects,
        // and a guard is read for its keys alone.
        let dates = opts.dates.as_ref().map(|d| d.iter().chain(&guards).copied().collect::<Vec<_>>());
        let mut plan = plan::plan(cfg, job.kind.as_ref(), &job.input, dates.as_deref()).await?;
        (plan.others, plan.partitions) =
            std::mem::take(&mut plan.partitions).into_iter().partition(|p| guards.contains(&p.date));
        if job.kind.reads_stored_state() && plan.layout == Layout::Flat && plan.objects.is_empty() {
            empty_batch(job, opts).await?;
        }
        // Without dates, every date of a flat input: known only once it is read.
        let mut flat = None;
        if opts.dates.is_none() && plan.layout == Layout::Flat {
            let read = read::read_flat(&job.input, &plan.decoder, &plan.objects, &[]).await;
            // An object that cannot be read tells no dates: the run cannot know which dates it
            // would leave out (with dates given, it fails those it serves).
            if let Some(e) = read.failed.values().next() {
                return Err(Error::Input(e.clone()));
            }
            plan.add_partitions(cfg, &read.dates());
            flat = Some(Arc::new(read));
        }
        let record = schema::table_record(&job.output, &job.state, &cfg.partition.column).await?;
        let (table, recorded_identity) = (record.schema, record.identity);
        // Rows dated otherwise than the table's (another zone, another timestamp column): a
        // change like the schema's, made only by rewriting every partition.
        let redated = schema::redating(record.partitioning.as_deref(), cfg);
        plan::type_empty_columns(&mut plan, cfg, &job.input, table.as_ref(), job.kind.reads_stored_state())?;
        if job.kind.reads_stored_state() {
            plan::declared_columns(&mut plan, cfg, table.as_ref());
        }
        // A merge batch whose objects hold no row (a header alone) brings nothing: its dates are
        // merged as the table's columns, with no rows (untouched).
        if let (Some(t), None, true) = (&table, &plan.output_schema, job.kind.reads_stored_state()) {
            plan.output_schema = Some(t.clone());
        }
        // A merge stores rows by column name: the same columns in another order (the first
        // object's header order) keep the table's order.
        if let (Some(t), Some(o)) = (&table, &plan.output_schema) {
            let same_columns = t.fields().len() == o.fields().len()
                && t.fields().iter().all(|f| o.field_with_name(f.name()).is_ok_and(|g| g.data_type() == f.data_type()));
            if job.kind.reads_stored_state() && same_columns && t.fields() != o.fields() {
                plan.output_schema = Some(t.clone());
            }
        }
        // A merge table keeps the identity it was merged by; one recorded before identities
        // were adopts that of its next run whose every partition succeeds (a date failing on
        // stored tombstones of another key says the run's identity is not the table's).
        let mut identity_unrecorded = false;
        if let (Some(_), true) = (&table, job.kind.reads_stored_state()) {
            let want = schema::identity_text(&cfg.identity);
            match recorded_identity {
                Some(have) if have != want => {
                    let said = |text: &str| {
                        let v: serde_json::Value = serde_json::from_str(text).unwrap_or_default();
                        format!("key {} with version {}", v["key"], v["version"])
                    };
                    return Err(Error::Usage(format!(
                        "the table {} was merged by {}; this config says {}. A merge table's rows are found by \
                         their key and ordered by their version: under another key each would be held twice, under \
                         another version older rows could win over newer ones and deletes. Nothing was done. Keep \
                         the table's [identity], or write a new table (another [output] url) and merge every batch \
                         into it",
                        job.output.url,
                        said(&have),
                        said(&want)
                    )));
                }
                Some(_) => {}
                None => identity_unrecorded = true,
            }
        }
        let output_schema = plan.output_schema.clone();
        let changes = |t: &arrow::datatypes::Schema, o: &arrow::datatypes::Schema| {
            schema::differences(t, o).into_iter().chain(redated.clone()).collect::<Vec<_>>()
        };
        let (new_table_schema, rebuild) = match (&table, &output_schema) {
            (Some(t), Some(o)) if !changes(t, o).is_empty() => {
                // A merge table's rows are rebuilt from what it stores under their dates.
                if let (Some(why), true) = (&redated, job.kind.reads_stored_state()) {
                    return Err(Error::Usage(format!(
                        "this run would date the rows of the merge table {} otherwise: {why}. A merge table keeps \
                         how its rows are dated, even by --schema-change rebuild. Nothing was done. Keep the \
                         table's [partition] and timezone, or write a new table (another [output] url) and merge \
                         every batch into it",
                        job.output.url
                    )));
                }
                // The stored keys of a merge table are found by their bytes, which follow the
                // key's type: a retyped key would not find its stored row, and be held twice.
                // Its tombstones keep each deleted key's version as the integer it was stored as
                // (a timestamp in its unit): a retyped version would compare against them in
                // another unit, and an older row could bring a deleted key back.
                if job.kind.reads_stored_state() {
                    let version = cfg.identity.version.iter().map(|v| (v, "version column", "version"));
                    let keys = cfg.identity.key.iter().map(|k| (k, "key column", "key"));
                    for (k, what, role) in keys.chain(version) {
                        if let (Ok(a), Ok(b)) = (t.field_with_name(k), o.field_with_name(k)) {
                            let (a_type, b_type) = (read::unify::base(a.data_type()), read::unify::base(b.data_type()));
                            // Versions are compared (and tombstones kept) as int64: any integer
                            // type keeps their order.
                            let widened = role == "version" && a_type.is_integer() && b_type.is_integer();
                            if a_type != b_type && !widened {
                                return Err(Error::Usage(format!(
                                    "this run reads the {what} `{k}` as {} where the table {} holds {}; a merge \
                                     table's {role} keeps its type, even by --schema-change rebuild (stored keys and \
                                     tombstones are compared by it). Nothing was done. Declare its type in \
                                     [input.schema] as the table holds it",
                                    b.data_type(),
                                    job.output.url,
                                    a.data_type()
                                )));
                            }
                        }
                    }
                }
                if opts.schema_change != SchemaChange::Rebuild || verify {
                    let differences = changes(t, o);
                    // A column the run's objects lack is not there to keep: a rebuild drops it.
                    let drops = match differences.iter().any(|d| d.ends_with(") removed")) {
                        true => {
                            " (which drops a removed column's stored values from every partition: where only \
                             some producers lack the column yet, run once they all write it instead)"
                        }
                        false => "",
                    };
                    // Text inputs type undeclared columns by their values, which differ from run to run.
                    let inferred = match cfg.input.format {
                        // Dated otherwise, the same columns: nothing to declare.
                        _ if schema::differences(t, o).is_empty() => "",
                        crate::config::Format::Parquet => {
                            " Where the input's own types changed (a producer now writes decimal(10,3) where \
                             the table holds decimal(10,2)), declare the column in [input.schema] as the table \
                             has it instead."
                        }
                        _ => {
                            " Where a column's type was inferred from this run's values (a CSV or NDJSON input: \
                             `1` an integer, `1.5` a float), declare it in [input.schema] as the table has it \
                             instead."
                        }
                    };
                    return Err(Error::Usage(format!(
                        "this run would change the schema of the table {}: {}. Nothing was done. To rewrite \
                         the whole table under the new schema, run with --schema-change rebuild over a range \
                         that covers every committed partition (lakeswap status lists them){drops}; or write to \
                         a new output.{inferred}",
                        job.output.url,
                        differences.join("; ")
                    )));
                }
                let committed = schema::committed_dates(&job.output, &cfg.partition.column).await?;
                if job.kind.reads_stored_state() && opts.dates.is_none() {
                    // A table that is its own history is rebuilt from its stored state: every
                    // committed date.
                    let batch: BTreeSet<NaiveDate> = plan.partitions.iter().map(|p| p.date).collect();
                    let rest: Vec<NaiveDate> = committed.iter().copied().filter(|d| !batch.contains(d)).collect();
                    plan.add_partitions(cfg, &rest);
                    plan.partitions.sort_by_key(|p| p.date);
                }
                let planned: BTreeSet<NaiveDate> = plan.partitions.iter().map(|p| p.date).collect();
                let missing: Vec<String> =
                    committed.iter().filter(|d| !planned.contains(d)).map(|d| d.to_string()).collect();
                if !missing.is_empty() {
                    return Err(Error::Usage(format!(
                        "--schema-change rebuild rewrites every committed partition, but {} of them are outside \
                         this run's range (first: {}); run over {} to {}",
                        missing.len(),
                        missing.iter().take(5).cloned().collect::<Vec<_>>().join(", "),
                        // Every committed date and every date of this run.
                        committed.iter().chain(&planned).min().map(|d| d.to_string()).unwrap_or_default(),
                        committed.iter().chain(&planned).max().map(|d| d.to_string()).unwrap_or_default()
                    )));
                }
                (Some(o.clone()), true)
            }
            (None, Some(o)) => (Some(o.clone()), false),
            (Some(t), _) if identity_unrecorded => (Some(t.clone()), false),
            _ => (None, false),
        };
        tracing::info!(%run_id, partitions = plan.partitions.len(), objects = plan.objects.len(), seconds = super::elapsed(started), "planned");
        let identity_adopted = identity_unrecorded && table.is_some() && !rebuild;
        Ok(Planned { run_id, started, now, plan, flat, new_table_schema, identity_adopted, rebuild })
    }
}

/// A merge's batch of nothing: on an object store a mistyped prefix lists nothing (there are no
/// folders to miss), and a daily merge pointed there would succeed every day. Refused, unless a
/// move a killed run left pending is to be completed (a run of the table completes it, over every
/// date: without `--date`).
async fn empty_batch(job: &Job, opts: &RunOptions) -> Result<()> {
    let pending = journal::read_all(&job.state).await?.iter().any(|j| !j.pending.is_empty());
    if pending && opts.dates.is_none() {
        return Ok(());
    }
    Err(Error::Usage(format!(
        "the input {} holds no data objects (names starting with `_` or `.` and folder markers are not data): a \
         merge needs a batch. Nothing was done. Check [input] url{}",
        job.input.url,
        match pending {
            true => "; a move a killed run left pending is completed by a run without --date, over an empty batch too",
            false => "",
        }
    )))
}

/// The job's local place (its table, run state, input or a lookup table) that `path` lies
/// inside, if any: what it is and its URL. Under the input, a folder or file named `_…` or `.…`
/// is not read as data, and not inside it.
pub fn local_place_holding(job: &Job, path: &std::path::Path) -> Option<(String, String)> {
    let resolved = crate::read::list::physical(path);
    let lookups: Vec<(String, crate::store::StoreLocation)> = match &job.config.aggregate {
        Some(a) => a
            .tables
            .iter()
            .filter_map(|t| {
                let location = crate::store::open(&t.url, &t.options, "aggregate.tables.url", false).ok()?;
                Some((format!("lookup table `{}`", t.name), location))
            })
            .collect(),
        None => Vec::new(),
    };
    let own = [("table", &job.output), ("run state", &job.state), ("input", &job.input)];
    let places = own.into_iter().map(|(w, l)| (w.to_string(), l)).chain(lookups.iter().map(|(w, l)| (w.clone(), l)));
    for (what, location) in places {
        if let Some(root) = location.protocol.local_root() {
            let root = crate::read::list::physical(root);
            let hidden = what == "input"
                && resolved
                    .strip_prefix(&root)
                    .is_ok_and(|rel| !crate::read::list::is_data_name(&rel.to_string_lossy()));
            if resolved.starts_with(&root) && !hidden {
                return Some((what, location.url.clone()));
            }
        }
    }
    None
}

/// A spill folder inside the table, its state, its input or a lookup table is refused:
/// readers (and later runs) would read a killed run's spill files as data. Compared resolved:
/// symbolic links followed, and a `..` after a folder that does not exist yet taken as creating
/// it would (`new/../x` is `x`). An existing path that is not a folder, a folder that
/// cannot be written, or a missing folder whose parent is missing too (a mistyped path, a disk
/// not mounted: the run would spill elsewhere than meant) is refused too, before anything runs.
fn check_spill_dir(job: &Job, spill_dir: &std::path::Path) -> Result<()> {
    let resolved = crate::read::list::physical(spill_dir);
    if let Some((what, url)) = local_place_holding(job, spill_dir) {
        return Err(Error::Usage(format!(
            "the spill folder {} lies inside the {what} {url}: a run's spill files would be read as its data. \
             Nothing was done. Choose a --spill-dir outside it (without one, the system's temp folder: TMPDIR)",
            spill_dir.display(),
        )));
    }
    // The folder, or its parent when a date that spills is to create it.
    let at = match resolved.parent() {
        Some(parent) if !resolved.exists() => parent,
        _ => resolved.as_path(),
    };
    let unusable = |why: &str| {
        Error::Usage(format!(
            "the spill folder {} (--spill-dir; without one, TMPDIR): {} {why}. Nothing was done",
            spill_dir.display(),
            at.display()
        ))
    };
    if !at.exists() {
        return Err(unusable(
            "does not exist (a mistyped path, or a disk not mounted?); a run creates the spill folder itself, not \
             the folders above it. Create them, or choose another folder",
        ));
    }
    if !at.is_dir() {
        return Err(unusable("is not a folder"));
    }
    if !writable(at) {
        return Err(unusable("cannot be written"));
    }
    Ok(())
}

/// Whether this process may create files in folder `dir`.
#[cfg(unix)]
fn writable(dir: &std::path::Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(path) = std::ffi::CString::new(dir.as_os_str().as_bytes()) else { return false };
    // SAFETY: `path` is a valid NUL-terminated string for the duration of the call.
    unsafe { libc::access(path.as_ptr(), libc::W_OK) == 0 }
}

#[cfg(not(unix))]
fn writable(dir: &std::path::Path) -> bool {
    std::fs::metadata(dir).is_ok_and(|m| !m.permissions().readonly())
}
