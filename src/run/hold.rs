//! The `hold` stage of a run: the run is journaled (status `running`), each partition's lease
//! is taken and its committed state read under it (the swap compares with that state), what
//! crashed runs left for those partitions is cleaned up, unchanged partitions are skipped, and
//! a flat input is read. Kinds whose runs exclude each other (merges) first take the table
//! lease and complete the swaps an interrupted run left pending.

use std::sync::Arc;

use super::planned::Planned;
use super::{report, Event, Job, RunOptions};
use crate::commit::{self, Action, Seen};
use crate::error::{Error, Result};
use crate::gc;
use crate::journal::{Journal, PartitionReport};
use crate::kind::Context;
use crate::lease::{Leases, Renewer};
use crate::plan::{Layout, PartitionPlan, Plan};
use crate::prepare::PrepareStats;
use crate::read::{self, FlatInput};

/// The table's lease: held by a merge for its whole run (one run of a merge table at a time),
/// and by a run making a new table from its commit to its first swap.
pub const TABLE_LEASE: &str = crate::lease::TABLE;

/// A run holding its partitions.
pub struct Held {
    pub run_id: String,
    pub started: std::time::Instant,
    /// The plan, its partitions those held.
    pub plan: Arc<Plan>,
    pub flat: Option<Arc<FlatInput>>,
    pub new_table_schema: Option<arrow::datatypes::SchemaRef>,
    /// The record is written only to add the identity of a table recorded without one.
    pub identity_adopted: bool,
    /// The run gives a new table its schema, holding the table from its commit until its first
    /// partition is swapped in (never a merge's run, which holds the table all along).
    pub makes_table: bool,
    pub rebuild: bool,
    pub now: chrono::DateTime<chrono::Utc>,
    /// `None` when verifying: nothing is written, no lease taken.
    pub leases: Option<Arc<Leases>>,
    pub renewer: Option<Renewer>,
    pub journal: Journal,
    /// Partitions already decided: refused, skipped.
    pub reports: Vec<PartitionReport>,
    /// The run's memory budget and spill folder (removed when the run is dropped).
    pub spill: Arc<crate::spill::Area>,
}

impl Held {
    pub fn context<'a>(&'a self, job: &'a Job, opts: &'a RunOptions) -> Context<'a> {
        Context {
            job,
            opts,
            run_id: &self.run_id,
            plan: &self.plan,
            flat: self.flat.as_ref(),
            leases: self.leases.as_ref(),
            rebuild: self.rebuild,
            now: self.now,
            spill: &self.spill,
        }
    }
}

/// Takes the run's leases (see the module documentation).
pub async fn hold(job: &Job, opts: &RunOptions, planned: Planned) -> Result<Held> {
    let cfg = &job.config;
    let Planned { run_id, started, now, mut plan, flat, mut new_table_schema, identity_adopted, rebuild } = planned;
    let dates = plan.partitions.iter().map(|p| p.date).collect();
    let leases = Arc::new(Leases::new(job.state.clone(), &run_id, opts.lease_ttl, opts.wait));
    // Renewing from the first lease on: taking the others may wait (--wait) longer than a TTL.
    let renewer = Some(leases.spawn_renewer());
    let mut completed = Vec::new();
    // A run that gives a new table its schema: two first runs with different queries would
    // each record theirs, and the table hold partitions of both (readers cast one to the
    // other's types, or fail). A merge holds the table from here on; another run takes it
    // when it commits ([`super::commit`]).
    let creates = new_table_schema.is_some() && !rebuild && !identity_adopted;
    if job.kind.one_run_at_a_time() {
        // One run of this table at a time; then finish what an interrupted one left.
        leases.acquire(TABLE_LEASE, &opts.stop).await.map_err(|e| match e {
            crate::error::PartitionError::Stopped { signal } => Error::Stopped(signal),
            e => Error::Leased(format!("the table {} is busy: {e}", job.output.url)),
        })?;
        if creates {
            // Planned before the table was held: another run may have made it since.
            match made_meanwhile(job, new_table_schema.as_ref()).await {
                Ok(Some(table)) => {
                    new_table_schema = None;
                    plan.output_schema = Some(table);
                }
                Ok(None) => {}
                Err(e) => {
                    leases.release(TABLE_LEASE).await;
                    return Err(e);
                }
            }
        }
    }
    let makes_table = creates && !job.kind.one_run_at_a_time();
    if !job.kind.one_run_at_a_time() {
        // A run killed while it made the table left the table's lease: taken over and removed
        // (a live holder's stays).
        leases.clear_if_gone(TABLE_LEASE, &opts.stop).await;
    }
    if job.kind.one_run_at_a_time() {
        match super::commit::roll_forward(job, &run_id).await {
            Ok(done) => completed = done,
            Err(e) => {
                leases.release(TABLE_LEASE).await;
                return Err(e);
            }
        }
    }
    // Journaled once the table is this run's (a run refused as busy leaves no journal).
    let mut journal = Journal::start(&run_id, &cfg.job.name, dates, now);
    journal.guarded = plan.others.iter().map(|p| p.date).collect();
    journal.completed = completed;
    journal.config = Some(cfg.fingerprint());
    if let Err(e) = journal.write(&job.state).await {
        leases.release(TABLE_LEASE).await;
        return Err(e);
    }
    opts.observer.event(&Event::Planned { run_id: &run_id, partitions: plan.partitions.len() });
    // Leases first, then the committed state as seen under them (the swap compares with it).
    let mut reports = Vec::new();
    let mut held: Vec<PartitionPlan> = Vec::new();
    let mut todo = std::mem::take(&mut plan.partitions);
    if job.kind.output_from_input_alone() && !opts.allow_empty {
        // A date no input object can hold fails without a lease: nothing will be written for
        // it, and a long range with a few days of input stays quick.
        todo.retain(|p| {
            if !p.inputs.is_empty() {
                return true;
            }
            opts.observer.event(&Event::Passed { date: p.date, why: "no input" });
            let e = crate::error::PartitionError::MissingInput { date: p.date };
            let r = report(p.date, Action::Failed, Some(PrepareStats::default()), 0, 0.0, Some(e));
            opts.observer.event(&Event::Done { report: &r });
            reports.push(r);
            false
        });
    }
    // An aggregate's dates this run does not compute still guard their keys (no key under
    // two dates of the range).
    let guards = job.kind.output_from_input_alone() && !cfg.is_whole_record_key();
    // Dates outside the range whose keys guard it (a retried run's others); kept in the plan
    // until the dates to skip are known (a retried date is not skipped beside them).
    let mut others = if guards { plan.others.clone() } else { Vec::new() };
    for p in todo {
        let seen = match leases.acquire(&p.dir, &opts.stop).await {
            Ok(()) => commit::head(&job.output, &commit::target_path(&job.output, &p.dir)).await,
            Err(e) => Err(e),
        };
        match seen {
            Ok(meta) => held.push(PartitionPlan { seen: Seen { meta }, ..p }),
            Err(e) => {
                leases.release(&p.dir).await;
                if guards && matches!(e, crate::error::PartitionError::Leased { .. }) {
                    others.push(p.clone());
                }
                opts.observer.event(&Event::Passed { date: p.date, why: "refused" });
                let r = report(p.date, Action::Failed, None, 0, 0.0, Some(e));
                opts.observer.event(&Event::Done { report: &r });
                reports.push(r);
            }
        }
    }
    let dirs: Vec<String> = held.iter().map(|p| p.dir.clone()).collect();
    leases.remove_leftovers(&dirs);
    if let Err(e) = gc::remove_stale_staging(&job.state, &cfg.partition.column, &run_id, &dirs).await {
        tracing::warn!(error = %e, "could not remove stale staging");
    }
    // --skip-unchanged: a committed partition whose footer names the same rules, the same
    // config and the same input objects, alone in its folder, is skipped without reading its
    // input — unless its keys were never checked with those of another date skipped.
    let mut todo = Vec::with_capacity(held.len());
    let mut skips = Vec::new();
    for p in held {
        match skippable(job, opts, &plan, &p).await {
            Some(committed) => skips.push((p, committed)),
            None => todo.push(p),
        }
    }
    let again = unchecked_skips(job, &plan, &skips.iter().map(|(p, _)| p).collect::<Vec<_>>()).await;
    for (p, committed) in skips {
        if again.contains(&p.date) {
            tracing::info!(date = %p.date, "unchanged, computed again: its keys were never checked with those of another date this run skips");
            todo.push(p);
        } else {
            leases.release(&p.dir).await;
            opts.observer.event(&Event::Passed { date: p.date, why: "skipped" });
            // The committed file's counts: what the table holds for the date.
            let r = report(p.date, Action::Skipped, Some(committed.counts), committed.output_rows, 0.0, None);
            opts.observer.event(&Event::Done { report: &r });
            reports.push(r);
            if guards {
                others.push(p);
            }
        }
    }
    todo.sort_by_key(|p| p.date);
    plan.partitions = todo;
    // Nothing computed, nothing to guard.
    plan.others = if plan.partitions.is_empty() { Vec::new() } else { others };
    let flat = read_input(job, &mut plan, flat).await;
    let spill = super::spill_area(job, opts, &run_id);
    Ok(Held {
        run_id,
        started,
        plan: Arc::new(plan),
        flat,
        new_table_schema,
        identity_adopted,
        makes_table,
        rebuild,
        now,
        leases: Some(leases),
        renewer,
        journal,
        reports,
        spill,
    })
}

/// The table this run planned as new, when another run made it since with the same schema and
/// dating (the run goes on, recording nothing); one made otherwise is refused, as the run would
/// have been had it started after. A merge takes the table's column order, as when planned.
pub(super) async fn made_meanwhile(
    job: &Job,
    planned: Option<&arrow::datatypes::SchemaRef>,
) -> Result<Option<arrow::datatypes::SchemaRef>> {
    let cfg = &job.config;
    let record = crate::schema::table_record(&job.output, &job.state, &cfg.partition.column).await?;
    let (Some(table), Some(planned)) = (record.schema, planned) else { return Ok(None) };
    let mut differences = crate::schema::differences(&table, planned);
    if job.kind.reads_stored_state() {
        differences.retain(|d| !d.starts_with("the columns are reordered"));
    }
    differences.extend(crate::schema::redating(record.partitioning.as_deref(), cfg));
    if let Some(have) = record.identity.filter(|_| job.kind.reads_stored_state()) {
        if have != crate::schema::identity_text(&cfg.identity) {
            differences.push(format!("it was merged by {have}"));
        }
    }
    match differences.is_empty() {
        true => Ok(Some(table)),
        false => Err(Error::Usage(format!(
            "another run made the table {} while this one was planned, with another schema: {}. Nothing was \
             done. Run again to see the table as it is now (and change the config, or write to a new output)",
            job.output.url,
            differences.join("; ")
        ))),
    }
}

/// Holds nothing, writes nothing: for `verify`.
pub async fn unleased(job: &Job, opts: &RunOptions, planned: Planned) -> Result<Held> {
    let Planned { run_id, started, now, mut plan, flat, new_table_schema, identity_adopted, rebuild } = planned;
    for p in &mut plan.partitions {
        p.seen.meta =
            commit::head(&job.output, &commit::target_path(&job.output, &p.dir)).await.map_err(Error::of_partition)?;
    }
    let dates = plan.partitions.iter().map(|p| p.date).collect();
    let journal = Journal::start(&run_id, &job.config.job.name, dates, now);
    let flat = read_input(job, &mut plan, flat).await;
    let spill = super::spill_area(job, opts, &run_id);
    Ok(Held {
        run_id,
        started,
        plan: Arc::new(plan),
        flat,
        new_table_schema,
        identity_adopted,
        makes_table: false,
        rebuild,
        now,
        leases: None,
        renewer: None,
        journal,
        reports: Vec::new(),
        spill,
    })
}

/// Reads a flat input once for every held date; for text objects, a date's inputs become the
/// objects where its rows were found.
async fn read_input(job: &Job, plan: &mut Plan, flat: Option<Arc<FlatInput>>) -> Option<Arc<FlatInput>> {
    if plan.layout != Layout::Flat {
        return None;
    }
    let flat = match flat {
        Some(f) => f,
        None => {
            let mut dates: Vec<_> = plan.partitions.iter().chain(&plan.others).map(|p| p.date).collect();
            dates.sort();
            Arc::new(read::read_flat(&job.input, &plan.decoder, &plan.objects, &dates).await)
        }
    };
    if job.config.input.format != crate::config::Format::Parquet {
        for p in plan.partitions.iter_mut().chain(plan.others.iter_mut()) {
            p.inputs = flat.objects_of(p.date, &plan.objects, &job.input);
        }
    }
    Some(flat)
}

/// With `--skip-unchanged`, the lineage of a committed partition a run skips: one made under
/// the same rules and config from the same input objects, still the bytes written
/// ([`commit::intact`]), alone in its folder (a folder holding a foreign object is computed,
/// which fails or removes it).
pub(super) async fn skippable(
    job: &Job,
    opts: &RunOptions,
    plan: &Plan,
    p: &PartitionPlan,
) -> Option<crate::lineage::Lineage> {
    if !(opts.skip_unchanged && job.kind.output_from_input_alone() && p.seen.meta.is_some()) {
        return None;
    }
    // A retried date is computed, to be checked against the retried run's other dates (a
    // skipped one would be checked against none: no record names them).
    if !plan.others.is_empty() {
        return None;
    }
    // The committed file, read once: its lineage names this config, these rules and these input
    // objects, and its bytes are those written (a file changed since, rewritten with its footer
    // kept or a byte flipped, is computed again).
    let path = commit::target_path(&job.output, &p.dir);
    let bytes = object_store::ObjectStoreExt::get(&job.output.store, &path).await.ok()?.bytes().await.ok()?;
    let committed = unchanged_inputs(job, plan, p, commit::lineage_of(&bytes)?)?;
    if !commit::intact(&bytes) {
        return None;
    }
    crate::commit::foreign_objects(&job.output, &p.dir).await.is_ok_and(|f| f.is_empty()).then_some(committed)
}

/// Of the dates a `--skip-unchanged` run may skip (`skips`), those it computes after all: a
/// pair of skipped dates is checked by nothing in the run, so each pair must have been checked
/// together before, holding the keys they hold now ([`crate::crossdate::unchecked`]).
pub(super) async fn unchecked_skips(
    job: &Job,
    plan: &Plan,
    skips: &[&PartitionPlan],
) -> std::collections::BTreeSet<chrono::NaiveDate> {
    if skips.len() < 2 || !job.kind.output_from_input_alone() || job.config.is_whole_record_key() {
        return Default::default();
    }
    let config = job.config.fingerprint();
    let keyed: Vec<(&PartitionPlan, String)> =
        skips.iter().map(|p| (*p, crate::crossdate::keys_fingerprint(job, &config, plan, p))).collect();
    crate::crossdate::unchecked(&job.state, &keyed).await
}

/// `lineage` (the committed file's), when it was made by this config, under the current rules,
/// from exactly the input objects listed now.
fn unchanged_inputs(
    job: &Job,
    plan: &Plan,
    p: &PartitionPlan,
    lineage: crate::lineage::Lineage,
) -> Option<crate::lineage::Lineage> {
    let mut inputs = plan.lineage_inputs(p, &job.input);
    inputs.sort();
    let same = lineage.rules == crate::lineage::RULES
        && lineage.config_fingerprint == job.config.fingerprint()
        && lineage.date == Some(p.date)
        && lineage.input_fingerprint == crate::lineage::input_fingerprint(&inputs)
        && !inputs.is_empty();
    same.then_some(lineage)
}
