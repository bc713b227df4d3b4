//! The `commit` and `record` stages of a run.
//!
//! Each computed file goes in through [`crate::commit`]: compared with what is committed
//! (`unchanged` writes nothing), staged, verified, swapped in by the store's protocol. A
//! partition folder must hold nothing else (G3, G9): foreign objects fail the partition unless
//! the job says `foreign_files = "remove"`. The objects a file's footer names (tombstones, key
//! index) are written before it; those the replaced file named are removed after it.
//!
//! A run that makes a new table takes the table's lease before its schema record is written
//! and holds it until its first partition is swapped in: a first run committing at the same
//! moment waits, then finds the table made and goes on only if its schema is the same.
//!
//! A merge that moves keys between dates stages every file first, records the pending swaps
//! in the run journal, and only then swaps them in — the dates gaining keys before the dates
//! losing them — so a crash in between leaves a record the next run of the table completes
//! ([`roll_forward`]). Between two of those swaps a reader can see a moved key under both
//! dates.
//!
//! Rows a merge sets aside (`on_conflict = "quarantine"`) are written whenever it sets them
//! aside, also when its partition is unchanged or untouched: a merged file depends on the
//! resulting state only, so unchanged bytes do not mean they were written before (they do for
//! an aggregate, whose file names its input).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Instant;

use futures::StreamExt;
use object_store::ObjectStoreExt;

use super::hold::{Held, TABLE_LEASE};
use super::{exit_of, report, Event, Job, RunOptions, RunSummary};
use crate::commit::{self, Action, Seen, Staged};
use crate::config::ForeignFiles;
use crate::error::{ExitCode, PartitionError, Result};
use crate::journal::{self, Journal, PartitionReport, PendingSwap};
use crate::kind::{Computed, Outcome, PartitionFile};
use crate::lease::{Leases, Renewer};

/// A run whose partitions are committed (or failed).
pub struct Committed {
    pub run_id: String,
    pub started: Instant,
    pub journal: Journal,
    pub reports: Vec<PartitionReport>,
    _renewer: Option<Renewer>,
}

/// Commits every computed partition (see the module documentation).
pub async fn commit(job: &Job, opts: &RunOptions, held: Held, computed: Computed) -> Committed {
    let Held {
        run_id,
        started,
        mut new_table_schema,
        identity_adopted,
        makes_table,
        leases,
        renewer,
        mut journal,
        mut reports,
        plan,
        rebuild,
        ..
    } = held;
    let Some(leases) = leases else {
        return Committed { run_id, started, journal, reports, _renewer: renewer };
    };
    let Computed { mut outcomes, moves, checked } = computed;
    let writes = |outcomes: &[Outcome]| outcomes.iter().any(|o| o.result.as_ref().is_ok_and(|f| !f.skip));
    // A run that makes a new table holds it from here until its first partition is swapped in:
    // another first run waits, then finds the table made (and is refused if its schema is
    // another), as if it had started after.
    let mut holds_table = false;
    if makes_table && writes(&outcomes) {
        let made = match leases.acquire_waiting(TABLE_LEASE, &opts.stop, true).await {
            Ok(()) => {
                holds_table = true;
                super::hold::made_meanwhile(job, new_table_schema.as_ref()).await.map_err(|e| match e {
                    crate::Error::Usage(m) => PartitionError::Refused(m),
                    other => other.into(),
                })
            }
            Err(e) => Err(e),
        };
        match made {
            Ok(made) => new_table_schema = new_table_schema.filter(|_| made.is_none()),
            Err(e) => fail_all(&mut outcomes, &e),
        }
        if new_table_schema.is_none() && holds_table {
            leases.release(TABLE_LEASE).await;
            holds_table = false;
        }
    }
    // Held, unless it lapsed (a stalled run: another may have taken it and made the table).
    if holds_table {
        if let Err(e) = leases.check(TABLE_LEASE) {
            fail_all(&mut outcomes, &e);
        }
    }
    // A daily run's table may have been rebuilt under another schema since this run was
    // planned (the rebuild records it before its first swap, under leases of its dates): the
    // run's partitions would sit in a table of another schema. Refused, nothing swapped in.
    // Checked again before each swap ([`commit_one`]).
    let planned = plan.output_schema.as_ref().filter(|_| new_table_schema.is_none() && !job.kind.one_run_at_a_time());
    if let Some(schema) = planned.filter(|_| writes(&outcomes)) {
        if let Err(e) = schema_unchanged(job, schema).await {
            fail_all(&mut outcomes, &e);
        }
    }
    // A table without a schema record (new, or rebuilt) gets one before its first swap.
    let mut rebuilt = false;
    if let Some(schema) = &new_table_schema {
        let record = match identity_adopted {
            true => !outcomes.is_empty() && outcomes.iter().all(|o| o.result.is_ok()),
            false => writes(&outcomes),
        };
        if record {
            let identity = job.kind.reads_stored_state().then(|| crate::schema::identity_text(&job.config.identity));
            let partitioning = crate::schema::partitioning_text(&job.config);
            match crate::schema::record(&job.state, schema, partitioning, identity).await {
                Ok(()) => rebuilt = rebuild && !job.kind.one_run_at_a_time(),
                Err(e) => fail_all(&mut outcomes, &PartitionError::Other(e.to_string())),
            }
        }
    }
    let done: Vec<PartitionReport> = if moves.is_empty() {
        let checked = &checked;
        let one = |o: Outcome| {
            let (leases, run_id) = (leases.clone(), run_id.as_str());
            async move {
                let t = Instant::now();
                let date = o.plan.date;
                let r = match o.result {
                    Err(e) => report(date, Action::Failed, None, 0, o.seconds, Some(e)),
                    Ok(f) => {
                        let res = match leases.check(&o.plan.dir).and_then(|_| opts.stop.check()) {
                            Ok(()) if f.skip => {
                                set_aside(job, run_id, &o.plan.dir, &f).await.map(|()| Action::Untouched)
                            }
                            Ok(()) => commit_one(job, run_id, &o.plan.dir, &o.plan.seen, &f, planned, &leases)
                                .await
                                .map_err(|e| lost_lease(&leases, &o.plan.dir, e)),
                            Err(e) => Err(e),
                        };
                        // Recorded under its lease, after it is swapped in (what it was
                        // checked with, for a later `--skip-unchanged` run).
                        if let (Ok(Action::Created | Action::Replaced | Action::Unchanged), Some(keys)) =
                            (&res, checked.get(&date))
                        {
                            let with = checked.iter().filter(|(d, _)| **d != date);
                            let record = crate::crossdate::Checked {
                                keys: keys.clone(),
                                with: with.map(|(d, k)| (*d, k.clone())).collect(),
                            };
                            crate::crossdate::record_checked(&job.state, &o.plan.dir, record).await;
                        }
                        finished(date, res, &f, o.seconds + t.elapsed().as_secs_f64())
                    }
                };
                leases.release(&o.plan.dir).await;
                opts.observer.event(&Event::Done { report: &r });
                r
            }
        };
        // The table's first partitions one at a time until one is swapped in; then the rest.
        let mut done = Vec::new();
        let mut rest = outcomes.into_iter();
        while holds_table {
            let Some(mut o) = rest.next() else { break };
            if let Err(e) = leases.check(TABLE_LEASE) {
                o.result = o.result.and(Err(e));
            }
            let r = one(o).await;
            if matches!(r.action, Action::Created | Action::Replaced | Action::Unchanged) {
                leases.release(TABLE_LEASE).await;
                holds_table = false;
            }
            done.push(r);
        }
        let rest: Vec<PartitionReport> =
            futures::stream::iter(rest).map(one).buffer_unordered(opts.concurrency.max(1)).collect().await;
        done.extend(rest);
        done
    } else {
        journal.moves = moves.clone();
        let dirs: Vec<String> = outcomes.iter().map(|o| o.plan.dir.clone()).collect();
        let done = commit_together(job, &run_id, &leases, &mut journal, outcomes, &moves, &opts.stop).await;
        for d in &dirs {
            leases.release(d).await;
        }
        for r in &done {
            opts.observer.event(&Event::Done { report: r });
        }
        done
    };
    reports.extend(done);
    if let (true, Some(schema)) = (rebuilt, &new_table_schema) {
        for r in left_in_old_schema(job, &journal.dates, schema).await {
            opts.observer.event(&Event::Done { report: &r });
            reports.push(r);
        }
    }
    // Held by a merge, or by the run that made the table (a no-op otherwise).
    leases.release(TABLE_LEASE).await;
    Committed { run_id, started, journal, reports, _renewer: renewer }
}

/// Refused when the table's schema record, read now, is no longer what a daily run was planned
/// against (its output `schema`): another run rebuilt the table under another schema since.
async fn schema_unchanged(job: &Job, schema: &arrow::datatypes::SchemaRef) -> std::result::Result<(), PartitionError> {
    let changes = crate::schema::recorded_changes(&job.state, schema, &job.config)
        .await
        .map_err(|e| PartitionError::Other(e.to_string()))?;
    if changes.is_empty() {
        return Ok(());
    }
    Err(PartitionError::Refused(format!(
        "another run changed the schema of the table {} while this one ran (--schema-change rebuild); against \
         the table's schema now, this run's output would be a change: {}. Nothing was written for this date; run \
         again to be checked against the table as it is now",
        job.output.url,
        changes.join("; ")
    )))
}

/// After a daily table was rebuilt under `schema`: the dates another run committed in the old
/// schema while this one ran (it was planned before the new schema was recorded, for dates this
/// run did not cover), each reported failed — the table is whole under its new schema only once
/// they are rebuilt too.
async fn left_in_old_schema(
    job: &Job,
    dates: &[chrono::NaiveDate],
    schema: &arrow::datatypes::SchemaRef,
) -> Vec<PartitionReport> {
    let column = &job.config.partition.column;
    let committed = match crate::schema::committed_dates(&job.output, column).await {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!(error = %e, "cannot list the committed partitions after the rebuild");
            return Vec::new();
        }
    };
    let mut out = Vec::new();
    for date in committed.into_iter().filter(|d| !dates.contains(d)) {
        let dir = commit::partition_dir(column, date);
        let file = commit::target_path(&job.output, &dir);
        let older = match commit::committed_footer(&job.output, &file).await {
            Ok(Some(Some(md))) => {
                crate::schema::of_footer(&md).is_some_and(|s| !crate::schema::differences(&s, schema).is_empty())
            }
            Ok(_) => false,
            Err(e) => {
                tracing::warn!(error = %e, %date, "cannot read a partition committed during the rebuild");
                false
            }
        };
        if older {
            let e = PartitionError::Other(format!(
                "{} was committed by another run in the table's old schema while this run rebuilt the table; \
                 run {date} again with this config",
                job.output.display(&file)
            ));
            out.push(report(date, Action::Failed, None, 0, 0.0, Some(e)));
        }
    }
    out
}

/// Fails every partition not failed yet with `e` (or its words, where it cannot be copied).
fn fail_all(outcomes: &mut [Outcome], e: &PartitionError) {
    for o in outcomes.iter_mut().filter(|o| o.result.is_ok()) {
        o.result = Err(match e {
            PartitionError::Stopped { signal } => PartitionError::Stopped { signal },
            PartitionError::Refused(m) => PartitionError::Refused(m.clone()),
            PartitionError::LeaseLost { dir } => PartitionError::LeaseLost { dir: dir.clone() },
            PartitionError::LeaseUnrenewed { dir, error } => {
                PartitionError::LeaseUnrenewed { dir: dir.clone(), error: error.clone() }
            }
            other => PartitionError::Other(other.to_string()),
        });
    }
}

fn finished(
    date: chrono::NaiveDate,
    res: std::result::Result<Action, PartitionError>,
    f: &PartitionFile,
    secs: f64,
) -> PartitionReport {
    match res {
        Ok(action) => PartitionReport {
            merge: f.merge,
            spilled_bytes: f.spilled_bytes,
            ..report(date, action, Some(f.stats), f.rows as u64, secs, None)
        },
        Err(e) => PartitionReport {
            merge: f.merge,
            spilled_bytes: f.spilled_bytes,
            ..report(date, Action::Failed, Some(f.stats), f.rows as u64, secs, Some(e))
        },
    }
}

/// The objects of a partition folder other than its file: an error, or (with
/// `foreign_files = "remove"`) the list to remove once the file is swapped in.
pub(crate) async fn foreign(
    job: &Job,
    dir: &str,
) -> std::result::Result<Vec<object_store::path::Path>, PartitionError> {
    // A partition folder (or file) that is a link: the swap would replace what it leads to.
    let file = commit::target_path(&job.output, dir);
    if let Some(link) = commit::first_link(&job.output, &job.output.relative(&file)) {
        let target = std::fs::read_link(&link).map(|t| format!(" to {}", t.display())).unwrap_or_default();
        return Err(PartitionError::Linked {
            path: job.output.display(&file),
            link: format!("{}{target}", link.display()),
        });
    }
    let found = commit::foreign_objects(&job.output, dir).await?;
    let remove = job.config.output.foreign_files == ForeignFiles::Remove;
    if found.is_empty() || (remove && found.iter().all(|p| commit::removable(&job.output, dir, p))) {
        return Ok(found);
    }
    Err(PartitionError::Foreign {
        dir: job.output.display(&job.output.child(&[dir])),
        objects: commit::foreign_names(&job.output, dir, &found),
        remove_set: remove,
    })
}

/// A swap refused because the partition changed since it was planned, while this run's lease of
/// it (or of the table) has lapsed: another run took it over and committed — this run lost its
/// lease (exit 4, as when that is found before the swap), not a failure of its own, even when
/// the store's failure let the lease lapse.
fn lost_lease(leases: &Leases, dir: &str, e: PartitionError) -> PartitionError {
    match e {
        PartitionError::Fenced { .. } if held(leases, dir).is_err() => {
            PartitionError::LeaseLost { dir: dir.to_string() }
        }
        e => e,
    }
}

/// Whether this run still holds the lease of `dir`, and the table's when it holds that too.
fn held(leases: &Leases, dir: &str) -> std::result::Result<(), PartitionError> {
    leases.check(dir)?;
    match leases.holds(TABLE_LEASE) {
        true => leases.check(TABLE_LEASE),
        false => Ok(()),
    }
}

/// Writes a partition's quarantined rows, when it has any.
async fn set_aside(job: &Job, run_id: &str, dir: &str, f: &PartitionFile) -> std::result::Result<(), PartitionError> {
    if let Some(q) = &f.quarantine {
        commit::upload(&job.state, &commit::quarantine_path(&job.state, run_id, dir), q.clone()).await?;
    }
    Ok(())
}

/// Writes what goes before a partition file: its quarantined rows and the objects it names.
async fn before(job: &Job, run_id: &str, dir: &str, f: &PartitionFile) -> std::result::Result<(), PartitionError> {
    let state = &job.state;
    set_aside(job, run_id, dir, f).await?;
    for s in &f.sidecars {
        let path = state.child(&[&s.reference.object]);
        // Content-addressed: an object of that name holds these bytes already.
        if commit::head(state, &path).await?.is_none() {
            commit::upload(state, &path, s.bytes.clone()).await?;
        }
    }
    Ok(())
}

/// Removes what the replaced file named and the folder's foreign objects, once swapped in.
async fn after(job: &Job, f: &PartitionFile, foreign: &[object_store::path::Path]) {
    let out = &job.output;
    for rel in &f.replaces {
        let _ = job.state.store.delete(&job.state.child(&[rel])).await;
    }
    for p in foreign {
        tracing::info!(object = %out.display(p), "removing a foreign object (foreign_files = \"remove\")");
        let _ = out.store.delete(p).await;
    }
}

async fn commit_one(
    job: &Job,
    run_id: &str,
    dir: &str,
    seen: &Seen,
    f: &PartitionFile,
    planned: Option<&arrow::datatypes::SchemaRef>,
    leases: &Leases,
) -> std::result::Result<Action, PartitionError> {
    let foreign = foreign(job, dir).await?;
    let out = &job.output;
    // Staged first: a partition whose bytes are already committed writes nothing else (its
    // sidecars were written with it, and an aggregate's quarantined rows too; a merge's are
    // this batch's: see the module documentation).
    let bytes = f.body.load().await?;
    // A committed file lakeswap did not write is replaced only when the job says so.
    let replace_foreign = job.config.output.foreign_files == ForeignFiles::Remove;
    let action =
        match commit::stage(out, &job.state, run_id, dir, &bytes, &f.schema, f.rows, seen, replace_foreign).await? {
            Staged::Unchanged if f.merge.is_some() => {
                set_aside(job, run_id, dir, f).await?;
                Action::Unchanged
            }
            Staged::Unchanged => Action::Unchanged,
            Staged::Ready(staged) => {
                // Checked again just before the swap: a rebuild may have recorded another
                // schema while this run's commits went on.
                if let Some(schema) = planned {
                    if let Err(e) = schema_unchanged(job, schema).await {
                        let _ = job.state.store.delete(&staged).await;
                        return Err(e);
                    }
                }
                // The lease checked again at the swap itself: staging and the checks above take
                // time, and a run stalled past its lease's expiry (a paused process, a slow
                // store) must not swap in a file a later run has found committed already.
                let ready = async { before(job, run_id, dir, f).await.and_then(|()| held(leases, dir)) };
                if let Err(e) = ready.await {
                    let _ = job.state.store.delete(&staged).await;
                    return Err(e);
                }
                commit::swap_in(out, &job.state, &staged, dir, bytes, seen).await?
            }
        };
    if action != Action::Unchanged || !foreign.is_empty() {
        after(job, f, &foreign).await;
    }
    Ok(action)
}

/// The partitions of a merge that moves keys: staged first, the swaps recorded, then swapped
/// — all of them, or (before the first swap) none.
async fn commit_together(
    job: &Job,
    run_id: &str,
    leases: &Arc<Leases>,
    journal: &mut Journal,
    outcomes: Vec<Outcome>,
    moves: &[crate::merge::Move],
    stop: &super::Stop,
) -> Vec<PartitionReport> {
    let (out, state) = (&job.output, &job.state);
    let mut reports = Vec::new();
    // Stage every file.
    let mut staged: Vec<(Outcome, PartitionFile, Staged, Vec<object_store::path::Path>)> = Vec::new();
    // A digest of each file to swap in: the pending record tells a swap done from a partition
    // rewritten since (a restore) by it.
    let mut digests = std::collections::HashMap::new();
    let mut failure: Option<String> = None;
    for o in outcomes {
        let date = o.plan.date;
        match o.result {
            Err(e) => reports.push(report(date, Action::Failed, None, 0, o.seconds, Some(e))),
            Ok(f) if f.skip => {
                // Nothing to swap, and no moves: only its quarantined rows, if any.
                let res = set_aside(job, run_id, &o.plan.dir, &f).await.map(|()| Action::Untouched);
                reports.push(finished(date, res, &f, o.seconds))
            }
            Ok(f) => {
                let step = async {
                    leases.check(&o.plan.dir)?;
                    let foreign = foreign(job, &o.plan.dir).await?;
                    let bytes = f.body.load().await?;
                    digests.insert(o.plan.dir.clone(), commit::digest(&bytes));
                    // The stored file was read as the merge's state: lakeswap's own (see `holds_its_date`).
                    let s =
                        commit::stage(out, state, run_id, &o.plan.dir, &bytes, &f.schema, f.rows, &o.plan.seen, false)
                            .await?;
                    match &s {
                        Staged::Ready(staged) => {
                            if let Err(e) = before(job, run_id, &o.plan.dir, &f).await {
                                let _ = state.store.delete(staged).await;
                                return Err(e);
                            }
                        }
                        // A merge's file: see the module documentation.
                        Staged::Unchanged => set_aside(job, run_id, &o.plan.dir, &f).await?,
                    }
                    Ok::<_, PartitionError>((s, foreign))
                };
                match step.await {
                    Ok((s, foreign)) => staged.push((Outcome { result: Ok(f.clone()), ..o }, f, s, foreign)),
                    Err(e) => {
                        failure.get_or_insert_with(|| format!("{date}: {e}"));
                        reports.push(finished(date, Err(e), &f, o.seconds));
                    }
                }
            }
        }
    }
    let abort =
        |reports: &mut Vec<PartitionReport>, staged: Vec<(Outcome, PartitionFile, Staged, Vec<_>)>, why: &str| {
            for (o, f, _, _) in staged {
                let e = PartitionError::Other(format!(
                    "keys move between this date and others, and {why}: nothing was swapped in. Run again"
                ));
                reports.push(finished(o.plan.date, Err(e), &f, o.seconds));
            }
        };
    // Asked to stop before the first swap: none is done.
    if let (None, Some(signal)) = (&failure, stop.stopped()) {
        for (_, _, s, _) in &staged {
            if let Staged::Ready(p) = s {
                let _ = state.store.delete(p).await;
            }
        }
        for (o, f, _, _) in staged {
            reports.push(finished(o.plan.date, Err(PartitionError::Stopped { signal }), &f, o.seconds));
        }
        return reports;
    }
    if let Some(why) = failure {
        for (_, _, s, _) in &staged {
            if let Staged::Ready(p) = s {
                let _ = state.store.delete(p).await;
            }
        }
        abort(&mut reports, staged, &format!("another of them could not be staged ({why})"));
        return reports;
    }
    // The leases checked again before the swaps are recorded (a later run completes recorded
    // swaps): a run stalled past its leases since staging swaps nothing.
    if staged.iter().any(|(o, ..)| held(leases, &o.plan.dir).is_err()) {
        for (_, _, s, _) in &staged {
            if let Staged::Ready(p) = s {
                let _ = state.store.delete(p).await;
            }
        }
        for (o, f, _, _) in staged {
            let e = held(leases, &o.plan.dir).err().unwrap_or_else(|| {
                PartitionError::Other(
                    "keys move between this date and others, and this run lost another's lease: nothing was \
                     swapped in. Run again"
                        .into(),
                )
            });
            reports.push(finished(o.plan.date, Err(e), &f, o.seconds));
        }
        return reports;
    }
    // Record the swaps before the first one.
    journal.pending = staged
        .iter()
        .filter(|(_, _, s, _)| matches!(s, Staged::Ready(_)))
        .map(|(o, f, _, _)| PendingSwap {
            dir: o.plan.dir.clone(),
            digest: f.seen_digest.clone(),
            staged_digest: digests.get(&o.plan.dir).cloned(),
            e_tag: o.plan.seen.meta.as_ref().and_then(|m| m.e_tag.clone()),
            version: o.plan.seen.meta.as_ref().and_then(|m| m.version.clone()),
            existed: o.plan.seen.meta.is_some(),
            size: o.plan.seen.meta.as_ref().map_or(0, |m| m.size),
        })
        .collect();
    if let Err(e) = journal.write(state).await {
        abort(&mut reports, staged, &format!("the pending swaps could not be recorded ({e})"));
        return reports;
    }
    // Gaining dates first: a reader may see a moved key twice for a moment, never lose it.
    staged.sort_by_key(|(o, _, _, _)| (!moves.iter().any(|m| m.to == o.plan.date), o.plan.date));
    for (o, f, s, foreign) in staged {
        let t = Instant::now();
        let res = match s {
            Staged::Unchanged => Ok(Action::Unchanged),
            Staged::Ready(path) => match f.body.load().await {
                Ok(bytes) => commit::swap_in(out, state, &path, &o.plan.dir, bytes, &o.plan.seen)
                    .await
                    .map_err(|e| lost_lease(leases, &o.plan.dir, e)),
                Err(e) => Err(e),
            },
        };
        if res.is_ok() {
            after(job, &f, &foreign).await;
            journal.pending.retain(|p| p.dir != o.plan.dir);
        }
        reports.push(finished(o.plan.date, res, &f, o.seconds + t.elapsed().as_secs_f64()));
    }
    reports
}

/// Writes the journal and gives the summary.
pub async fn record(job: &Job, opts: &RunOptions, committed: Committed) -> Result<RunSummary> {
    let Committed { run_id, started, mut journal, mut reports, _renewer } = committed;
    drop(_renewer);
    let _ = opts;
    reports.sort_by_key(|r| r.date);
    // This run's empty staging folders. Only its own: another run (a shard beside this one)
    // may have just made the folder of the file it is about to write.
    job.state.tidy(&job.state.child(&["staging", &run_id]));
    let exit = ExitCode::combine(reports.iter().map(|r| exit_of(r.exit_code)));
    journal.finish(reports.clone(), exit);
    // A store that went away mid-run: the reports still say what happened to each partition.
    let (exit_code, journal_error) = match journal.write(&job.state).await {
        Ok(()) => (exit, None),
        Err(e) => (ExitCode::combine([exit, ExitCode::PartialFailure]), Some(e.to_string())),
    };
    Ok(RunSummary {
        run_id,
        completed: journal.completed.clone(),
        partitions: reports,
        exit_code,
        seconds: super::elapsed(started),
        journal_error,
        merge: job.kind.name() == "merge",
    })
}

/// `verify`'s note on a partition whose rows match a recomputation while its lineage does not.
fn stale_lineage(committed: &bytes::Bytes, date: chrono::NaiveDate) -> String {
    let why = match lineage_apart(committed, date) {
        Some(why) => why,
        None if !commit::has_seal(committed) => "it was written by an older lakeswap, before files were sealed, so \
                                                 its bytes cannot be checked"
            .to_string(),
        None => "its lineage is out of date (input objects touched, renamed or rewritten with the same rows since, \
                 or a config that computes the same)"
            .to_string(),
    };
    format!("its rows match a recomputation, but {why}: the next run rewrites it")
}

/// Why lakeswap's own file of a date may differ from its recomputation (`computed`), as far as
/// the two lineages tell: another config, other input objects, an older lakeswap.
fn why_differs(committed: &bytes::Bytes, computed: &bytes::Bytes, fingerprint: &str) -> String {
    let (Some(old), Some(new)) = (commit::lineage_of(committed), commit::lineage_of(computed)) else {
        return String::new();
    };
    let short = |f: &str| f.chars().take(8).collect::<String>();
    let mut why = Vec::new();
    if old.config_fingerprint != fingerprint {
        why.push(format!(
            "it was written under another config (fingerprint {}, the config's now {}: its SQL, measures, \
             identity or schema changed)",
            short(&old.config_fingerprint),
            short(fingerprint)
        ));
    }
    if old.input_fingerprint != new.input_fingerprint {
        why.push("its input objects changed since it was written (added, removed or rewritten)".to_string());
    }
    if old.rules != new.rules {
        why.push(format!("it was written by an older lakeswap (rules {}, now {})", old.rules, new.rules));
    }
    match why.len() {
        0 => String::new(),
        _ => format!(": {}", why.join("; ")),
    }
}

/// Whether a committed file carries lakeswap's lineage (lakeswap wrote it).
fn has_lineage(committed: &bytes::Bytes) -> bool {
    commit::lineage_of(committed).is_some()
}

/// What sets a committed file apart from lakeswap's own file of `date`: no lineage, or
/// another date's.
fn lineage_apart(committed: &bytes::Bytes, date: chrono::NaiveDate) -> Option<String> {
    match commit::lineage_of(committed) {
        None => Some("it has no lakeswap lineage (lakeswap did not write it, or it was damaged since)".to_string()),
        Some(l) => {
            l.date.filter(|d| *d != date).map(|d| format!("its lineage is {d}'s (a file of that date copied in)"))
        }
    }
}

/// `verify`: each recomputed file compared with the committed one; nothing written.
pub async fn compare(job: &Job, held: Held, computed: Computed) -> Result<RunSummary> {
    let mut reports = held.reports;
    for o in computed.outcomes {
        let date = o.plan.date;
        let r = match o.result {
            Err(e) => report(date, Action::Failed, None, 0, o.seconds, Some(e)),
            Ok(f) => {
                let path = commit::target_path(&job.output, &o.plan.dir);
                let res = async {
                    let foreign = commit::foreign_objects(&job.output, &o.plan.dir).await?;
                    if !foreign.is_empty() {
                        let names = commit::foreign_names(&job.output, &o.plan.dir, &foreign);
                        let removable = foreign.iter().all(|p| commit::removable(&job.output, &o.plan.dir, p));
                        let advice = match (job.config.output.foreign_files == ForeignFiles::Remove, removable) {
                            (_, false) => {
                                "Move them away: `foreign_files = \"remove\"` removes only objects inside the \
                                 partition's own folder, and nothing through a symbolic link"
                            }
                            (true, true) => "A run of the date removes them (`foreign_files = \"remove\"`)",
                            (false, true) => {
                                "Move them away, or set `[output] foreign_files = \"remove\"` and run the date again"
                            }
                        };
                        return Err(PartitionError::Differs {
                            path: job.output.display(&path),
                            why: format!(
                                "readers of it would also read objects lakeswap did not write: {}. {advice}",
                                names.join(", ")
                            ),
                        });
                    }
                    let bytes = f.body.load().await?;
                    match commit::get(&job.output, &path).await? {
                        Some(b) if b == bytes => Ok((Action::Verified, None)),
                        // Rows that read alike prove little of a changed file: its statistics
                        // (what readers skip row groups by) or a page another reader decodes
                        // otherwise may be what changed.
                        Some(b) if commit::seal_broken(&b) => Err(PartitionError::Differs {
                            path: job.output.display(&path),
                            why: "its bytes changed after lakeswap wrote them (its seal no longer matches, or is \
                                  gone from a file lakeswap sealed: a damaged or edited file, or one another tool \
                                  rewrote), so readers may see other values or fail to read it. Run the date again to \
                                  rewrite it"
                                .into(),
                        }),
                        // Inputs touched, renamed or rewritten alike: the data is right.
                        // A file lakeswap did not write (no lineage) is one a run replaces only
                        // under `foreign_files = "remove"`, whatever its rows.
                        Some(b) if has_lineage(&b) && commit::same_rows(&bytes, &b) => {
                            Ok((Action::Verified, Some(stale_lineage(&b, date))))
                        }
                        Some(b) if o.plan.inputs.is_empty() && has_lineage(&b) => Err(PartitionError::Differs {
                            path: job.output.display(&path),
                            why: "no input object holds this date now, so its rows are nobody's. A run fails the \
                                  date and keeps this file (--allow-empty replaces it with a zero-row file); put \
                                  the input back to keep the rows"
                                .into(),
                        }),
                        Some(b) => Err(PartitionError::Differs {
                            path: job.output.display(&path),
                            why: match lineage_apart(&b, date) {
                                Some(apart) if !has_lineage(&b) => format!(
                                    "its bytes differ from a recomputation, and {apart}. A run does not overwrite \
                                     it: move it away, or set `[output] foreign_files = \"remove\"`, and run the \
                                     date again"
                                ),
                                Some(apart) => format!(
                                    "its bytes differ from a recomputation, and {apart}. Run the date again to \
                                     rewrite it"
                                ),
                                None => format!(
                                    "its bytes differ{}. Run the date again to rewrite it",
                                    why_differs(&b, &bytes, &job.config.fingerprint())
                                ),
                            },
                        }),
                        // No input and nothing committed: what `run` leaves (it commits a
                        // date without input only with --allow-empty).
                        None if f.stats.input_rows == 0 => Ok((Action::Untouched, None)),
                        None => Err(PartitionError::Differs {
                            path: job.output.display(&path),
                            why: "it is missing. Run the date again to write it".into(),
                        }),
                    }
                }
                .await;
                let note = res.as_ref().ok().and_then(|(_, n)| n.clone());
                PartitionReport { note, ..finished(date, res.map(|(a, _)| a), &f, o.seconds) }
            }
        };
        reports.push(r);
    }
    reports.sort_by_key(|r| r.date);
    let exit = ExitCode::combine(reports.iter().map(|r| exit_of(r.exit_code)));
    Ok(RunSummary {
        run_id: held.run_id,
        completed: Vec::new(),
        partitions: reports,
        exit_code: exit,
        seconds: super::elapsed(held.started),
        journal_error: None,
        merge: false,
    })
}

/// Where a swap that an interrupted run recorded as pending stands.
pub(crate) enum PendingState {
    /// Not swapped, and the partition still as the run saw it: it can be completed.
    Ready { staged: object_store::path::Path, seen: Seen, bytes: bytes::Bytes },
    /// Swapped already; its staged copy is left when the record was not updated.
    Done { staged_left: Option<object_store::path::Path> },
    /// The partition changed since (before its swap, or after it: a restore), or its staged
    /// copy is gone while it is as seen: never to be completed.
    Stale { staged: object_store::path::Path },
}

/// Where run `run_id`'s pending swap `p` stands (reads the staged copy and the committed file).
pub(crate) async fn pending_state(job: &Job, run_id: &str, p: &PendingSwap) -> Result<PendingState> {
    let (out, state) = (&job.output, &job.state);
    let failed = crate::Error::of_partition;
    let target = commit::target_path(out, &p.dir);
    let staged = commit::staging_path(state, run_id, &p.dir);
    let seen = Seen {
        meta: p.existed.then(|| object_store::ObjectMeta {
            location: target.clone(),
            last_modified: chrono::Utc::now(),
            size: p.size,
            e_tag: p.e_tag.clone(),
            version: p.version.clone(),
        }),
    };
    let bytes = commit::get(state, &staged).await.map_err(failed)?;
    let now = commit::head(out, &target).await.map_err(failed)?;
    let as_seen = seen.same_object(&now);
    Ok(match (bytes, as_seen) {
        (Some(bytes), true) => PendingState::Ready { staged, seen, bytes },
        (Some(b), false) => {
            let committed = match &now {
                Some(_) => commit::get(out, &target).await.map_err(failed)?,
                None => None,
            };
            match committed {
                // Swapped already; the record was not updated.
                Some(c) if c == b => PendingState::Done { staged_left: Some(staged) },
                // A byte-identical copy of the file seen (a restored or copied table): swapped
                // over the object there now.
                Some(c) if p.digest.as_deref() == Some(commit::digest(&c).as_str()) => {
                    PendingState::Ready { staged, seen: Seen { meta: now }, bytes: b }
                }
                _ => PendingState::Stale { staged },
            }
        }
        (None, _) => match &p.staged_digest {
            // Its staged copy gone: swapped, when the partition holds the file swapped in; else
            // rewritten or removed since (a table restored from a backup), or the copy lost.
            Some(d) => {
                let committed = match &now {
                    Some(_) => commit::get(out, &target).await.map_err(failed)?,
                    None => None,
                };
                match committed {
                    Some(c) if commit::digest(&c) == *d => PendingState::Done { staged_left: None },
                    _ => PendingState::Stale { staged },
                }
            }
            // Recorded without one (an older lakeswap): swapped when the partition changed.
            None if as_seen => PendingState::Stale { staged },
            None => PendingState::Done { staged_left: None },
        },
    })
}

/// Completes the swaps interrupted runs recorded as pending (merges that move keys): a recorded
/// set is completed only when each of its partitions is still as that run saw it or already
/// swapped; when any changed since (or lost its staged file), none is swapped — a table emptied
/// or rewritten in between must not get a stale partition back. Called under the table lease,
/// so no other run of the table is in between. The interrupted run's journal then records what
/// became of each of its dates, so `status` credits each file to the run that made it.
pub async fn roll_forward(job: &Job, run_id: &str) -> Result<Vec<journal::CompletedSwap>> {
    let (out, state) = (&job.output, &job.state);
    let mut completed = Vec::new();
    for mut j in journal::read_all(state).await? {
        if j.pending.is_empty() || j.run_id == run_id {
            continue;
        }
        let mut ready = Vec::new();
        let mut stale = Vec::new();
        let mut swapped = Vec::new();
        for p in std::mem::take(&mut j.pending) {
            match pending_state(job, &j.run_id, &p).await? {
                PendingState::Ready { staged, seen, bytes } => ready.push((p, staged, seen, bytes)),
                PendingState::Done { staged_left } => {
                    if let Some(staged) = staged_left {
                        let _ = state.store.delete(&staged).await;
                    }
                    swapped.push(p);
                }
                PendingState::Stale { staged } => stale.push((p, staged)),
            }
        }
        let mut abandoned = Vec::new();
        if stale.is_empty() {
            for (p, staged, seen, b) in ready {
                match commit::swap_in(out, state, &staged, &p.dir, b, &seen).await {
                    Ok(_) => {
                        tracing::warn!(run = %j.run_id, partition = %p.dir, "completed a swap an interrupted run left pending");
                        completed.push(journal::CompletedSwap { run_id: j.run_id.clone(), partition: p.dir.clone() });
                        swapped.push(p);
                    }
                    Err(e) => {
                        tracing::warn!(run = %j.run_id, partition = %p.dir, error = %e, "cannot complete a pending swap");
                        abandoned.push((p, format!("its swap, left pending, could not be completed: {e}")));
                    }
                }
            }
        } else {
            let dirs: Vec<&str> = stale.iter().map(|(p, _)| p.dir.as_str()).collect();
            tracing::warn!(run = %j.run_id, changed = %dirs.join(", "),
                "an interrupted run's pending swaps are abandoned: these partitions changed since (or lost their staged copy)");
            let why = format!(
                "the run died between the swaps of a move; they were abandoned because {} changed since (or lost \
                 its staged copy), so this date keeps the file it had",
                dirs.join(", ")
            );
            for (p, staged) in stale.into_iter().chain(ready.into_iter().map(|(p, s, _, _)| (p, s))) {
                let _ = state.store.delete(&staged).await;
                abandoned.push((p, why.clone()));
            }
        }
        let twice = held_twice(job, &j, &swapped, &abandoned).await?;
        record_rolled(&mut j, &job.config.partition.column, run_id, swapped, abandoned);
        j.write(state).await?;
        if !twice.is_empty() {
            let shown: Vec<String> =
                twice.iter().take(5).map(|m| format!("{} under {} and {}", m.key, m.from, m.to)).collect();
            return Err(crate::Error::Unfinished(format!(
                "run {} died between the swaps of a move, and a partition of it changed since (not by a \
                 lakeswap run of this table), so the move cannot be completed: {} key(s) it moved may now be \
                 under two dates ({}{}). Nothing of this run was done. Merge the batch that moved them again \
                 (a key's newer version moves it off the older date), or restore those partitions; the move \
                 is recorded as abandoned, so the next run goes ahead",
                j.run_id,
                twice.len(),
                shown.join(", "),
                if twice.len() > shown.len() { ", …" } else { "" }
            )));
        }
    }
    Ok(completed)
}

/// The keys an interrupted run moved to a date whose swap it did, from a date whose swap is now
/// abandoned, while both partitions are committed: the table holds them under both dates.
async fn held_twice(
    job: &Job,
    j: &Journal,
    swapped: &[PendingSwap],
    abandoned: &[(PendingSwap, String)],
) -> Result<Vec<crate::merge::Move>> {
    if swapped.is_empty() || abandoned.is_empty() {
        return Ok(Vec::new());
    }
    let column = &job.config.partition.column;
    let mut present = BTreeSet::new();
    for dir in swapped.iter().map(|p| &p.dir).chain(abandoned.iter().map(|(p, _)| &p.dir)) {
        let target = commit::target_path(&job.output, dir);
        let now = commit::head(&job.output, &target).await.map_err(crate::Error::of_partition)?;
        if now.is_some() {
            present.insert(dir.clone());
        }
    }
    let dir = |d: chrono::NaiveDate| format!("{column}={d}");
    Ok(j.moves
        .iter()
        .filter(|m| {
            let (from, to) = (dir(m.from), dir(m.to));
            present.contains(&from)
                && present.contains(&to)
                && swapped.iter().any(|p| p.dir == to)
                && abandoned.iter().any(|(p, _)| p.dir == from)
        })
        .cloned()
        .collect())
}

/// What became of an interrupted move run's dates: its swaps done (by it, or completed by run
/// `by`) are its files; those abandoned keep the file they had; every other date it planned
/// it left alone (a move run stages every partition it changes, and records them all pending).
fn record_rolled(
    j: &mut Journal,
    column: &str,
    by: &str,
    swapped: Vec<PendingSwap>,
    abandoned: Vec<(PendingSwap, String)>,
) {
    let date_of = |dir: &str| {
        dir.strip_prefix(column)
            .and_then(|d| d.strip_prefix('='))
            .and_then(|d| chrono::NaiveDate::parse_from_str(d, "%Y-%m-%d").ok())
    };
    for p in swapped {
        if let Some(date) = date_of(&p.dir) {
            let action = if p.existed { Action::Replaced } else { Action::Created };
            let mut r = report(date, action, None, 0, 0.0, None);
            r.note = Some(format!("swapped in after this run died, by run {by} (it completes a move left pending)"));
            j.partitions.push(r);
        }
    }
    for (p, why) in abandoned {
        if let Some(date) = date_of(&p.dir) {
            let mut r = report(date, Action::Failed, None, 0, 0.0, None);
            r.error = Some(why);
            r.exit_code = ExitCode::PartialFailure.code();
            j.partitions.push(r);
        }
    }
    let recorded: BTreeSet<chrono::NaiveDate> = j.partitions.iter().map(|p| p.date).collect();
    for d in j.dates.clone().into_iter().filter(|d| !recorded.contains(d)) {
        j.partitions.push(report(d, Action::Untouched, None, 0, 0.0, None));
    }
    j.partitions.sort_by_key(|p| p.date);
}
