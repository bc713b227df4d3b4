//! `kind = "merge"`: a version-guarded MERGE of a batch of change events into a current-state
//! table, one row per key, each key under one date (docs/design.md §2; the upsert of one partition is
//! [`crate::merge`]).
//!
//! A run goes:
//! 1. every date of the batch is read and prepared (duplicates, conflicts, the latest version
//!    per key within the date);
//! 2. a key the batch holds under several dates keeps only its newest version — the others
//!    are dropped (two dates with one version are a conflict). Under `on_conflict =
//!    "quarantine"`, a version in conflict anywhere in the batch is first set aside on every
//!    date, and the key keeps its newest version without one;
//! 3. every other committed partition's key index ([`crate::sidecar`]: sorted key hashes) is
//!    searched for the batch's keys — no partition's rows are read unless it holds a candidate.
//!    A key stored under another date *moves* when the batch's version is newer (the new date
//!    gains the row, the old one loses it), is ignored when older, and is a conflict when equal;
//!    with `[merge] on_date_change = "fail"` a move fails the batch's date instead (exit 3).
//!    A date of the batch that has failed writes nothing, but its stored rows still guard the
//!    others: a date holding a key stored under it fails too;
//!
//!    Dates of the batch that hold the same key commit together or not at all (a key's newest
//!    version depends on every date holding it): when one fails, at any step, the dates sharing
//!    keys with it fail too — every date, when the failed date's rows could not be read at all;
//! 4. each touched partition is merged and encoded, with its tombstones and key index as objects
//!    its footer names. Partitions that move keys between them commit together or not at all:
//!    if one fails — before or while it is merged — all of them fail.
//!
//! Runs of one merged table never overlap (the table lease); the commit stage records the swaps
//! of a run that moves keys before the first one, so a crash in between is completed by the
//! next run. Tombstones older than `[merge] tombstone_retention` (measured on the version
//! column against the run's clock) are dropped at the next write of their partition.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::hash::BuildHasher;
use std::time::Instant;

use arrow::array::{ArrayRef, RecordBatch};
use arrow::datatypes::{DataType, SchemaRef, TimeUnit};
use bytes::Bytes;
use chrono::NaiveDate;
use futures::future::BoxFuture;
use futures::StreamExt;

use super::{Body, Computed, Context, Kind, Outcome, PartitionFile, Planned};
use crate::commit::{self, Seen};
use crate::config::{ConfigError, JobConfig, OnConflict, OnDateChange};
use crate::error::{ConflictKey, InputError, Location, PartitionError};
use crate::lineage::Lineage;
use crate::merge::{self as engine, MergeStats, Move, TombstonesAt};
use crate::plan::PartitionPlan;
use crate::prepare::{self, Identity, PrepareStats, Prepared};
use crate::read::Table;
use crate::run::Event;
use crate::sidecar::{self, Sidecar};

/// A current-state table.
#[derive(Debug)]
pub struct Merge {
    retention: Option<chrono::Duration>,
    on_date_change: OnDateChange,
}

impl Merge {
    pub fn new(cfg: &JobConfig) -> Result<Self, ConfigError> {
        let m = cfg.merge.clone().unwrap_or_default();
        let retention = match &m.tombstone_retention {
            Some(r) => Some(crate::config::parse_duration(r).map_err(|message| ConfigError::Invalid {
                path: cfg.origin.clone(),
                key: "merge.tombstone_retention".into(),
                message,
            })?),
            None => None,
        };
        Ok(Merge { retention, on_date_change: m.on_date_change })
    }
}

impl Kind for Merge {
    fn name(&self) -> &'static str {
        "merge"
    }

    fn required_columns(&self) -> Vec<String> {
        Vec::new()
    }

    fn output_schema<'a>(
        &'a self,
        cfg: &'a JobConfig,
        record: &'a SchemaRef,
        _lookups: &'a [crate::engine::Lookup],
    ) -> BoxFuture<'a, Planned> {
        Box::pin(async move { self.output(cfg, record).map(|s| (s, None, Vec::new())) })
    }

    fn needs_dates(&self) -> bool {
        false
    }

    fn output_from_input_alone(&self) -> bool {
        false
    }

    fn one_run_at_a_time(&self) -> bool {
        true
    }

    fn compute<'a>(&'a self, cx: &'a Context<'a>) -> BoxFuture<'a, Computed> {
        Box::pin(self.compute_all(cx))
    }
}

/// A winning row of the batch: its key's hash, version and row id.
#[derive(Debug, Clone, Copy)]
struct KeyAt {
    hash: u64,
    version: i64,
    row: u32,
}

/// One date of the batch, prepared.
struct Dated {
    prepared: Prepared,
    id: Identity,
    /// The winners, by hash.
    keys: Vec<KeyAt>,
    /// The stored file, as committed when the lease was taken.
    stored: Option<Bytes>,
    /// Winners dropped (an older version than another date's, or than what is stored).
    dropped: HashSet<u32>,
    /// Winners set aside as conflicts (`on_conflict = "quarantine"`).
    quarantined: Vec<u32>,
    older: u64,
}

/// A partition in the work of a run: a date of the batch, or a date that only loses keys.
struct Slot {
    plan: PartitionPlan,
    started: Instant,
    state: Result<Option<Dated>, PartitionError>,
    /// Keys leaving this partition for another date.
    removals: HashSet<Vec<u8>>,
    /// Its stored file, for partitions outside the batch.
    stored: Option<Bytes>,
    /// Keys arriving here from another date.
    moved_in: u64,
    /// A date of the batch that failed: the hashes of its rows' keys (`None` when they could not
    /// be read).
    failed_keys: Option<Option<HashSet<u64>>>,
}

impl Slot {
    fn fail(&mut self, e: PartitionError) {
        if self.state.is_ok() {
            self.state = Err(e);
        }
    }
}

impl Merge {
    fn output(&self, cfg: &JobConfig, record: &SchemaRef) -> Result<SchemaRef, (String, String)> {
        if self.retention.is_some() {
            let v = cfg.identity.version.as_deref().unwrap_or_default();
            let t = record.field_with_name(v).map(|f| f.data_type().clone()).unwrap_or(DataType::Null);
            if !matches!(t, DataType::Date32 | DataType::Date64 | DataType::Timestamp(_, _)) {
                return Err((
                    "merge.tombstone_retention".into(),
                    format!(
                        "a retention is measured on the version column, which is {t} here; it needs a date or a \
                         timestamp version (or leave the retention out: tombstones are then kept)"
                    ),
                ));
            }
        }
        // A merge stores every input column: one with no name (a CSV header ending in a comma,
        // an NDJSON field `""`) cannot be read back by its name, and readers name it themselves
        // (DuckDB `column3`, Spark `_c3`).
        if record.fields().iter().any(|f| f.name().trim().is_empty()) {
            return Err((
                "input.url".into(),
                "the input has a column with no name (a CSV header ending in a comma, or an NDJSON field `\"\"`), \
                 and a merge stores every input column: name it in the objects"
                    .into(),
            ));
        }
        Ok(engine::output_schema(record, &cfg.partition.column))
    }

    async fn compute_all(&self, cx: &Context<'_>) -> Computed {
        // 1. Every date of the batch, prepared.
        let mut slots: Vec<Slot> = futures::stream::iter(cx.plan.partitions.iter().cloned())
            .map(|p| async move {
                let started = Instant::now();
                let mut keys = None;
                let state = cx.opts.stop.unless(prepare_date(cx, &p, &mut keys)).await.map(Some);
                let failed_keys = state.is_err().then_some(keys);
                Slot { plan: p, started, state, removals: HashSet::new(), stored: None, moved_in: 0, failed_keys }
            })
            .buffered(cx.opts.concurrency.max(1))
            .collect()
            .await;
        let mut moves = Vec::new();
        let mut shared = Shared::default();
        if !cx.job.config.is_whole_record_key() {
            if cx.job.config.prepare.on_conflict == OnConflict::Quarantine {
                set_aside_across_dates(&mut slots, self.on_date_change);
            }
            // Keys of a date of the batch that failed while it was prepared.
            guard_failed_dates(&mut slots, &mut shared);
            // 2. Keys under several dates of the batch: the newest version wins.
            self.within_batch(cx, &mut slots, &mut shared);
            fail_shared(&mut slots.iter_mut().map(|s| (s.plan.date, &mut s.state)).collect::<Vec<_>>(), &shared);
            // 3. Keys stored under another date.
            self.against_table(cx, &mut slots, &mut moves).await;
        }
        // Dates that share keys of the batch, and partitions that move keys between them, commit
        // together or not at all.
        fail_together(
            &mut slots.iter_mut().map(|s| (s.plan.date, &mut s.state)).collect::<Vec<_>>(),
            &shared,
            &mut moves,
        );
        for slot in &mut slots {
            slot.moved_in = moves.iter().filter(|m| m.to == slot.plan.date).count() as u64;
        }
        // 4. Merge and encode each.
        let mut outcomes: Vec<Outcome> = futures::stream::iter(slots)
            .map(|slot| async move {
                let date = slot.plan.date;
                let outcome = match cx.opts.stop.check() {
                    Ok(()) => self.finish(cx, slot).await,
                    Err(e) => {
                        Outcome { plan: slot.plan, result: Err(e), seconds: slot.started.elapsed().as_secs_f64() }
                    }
                };
                let input_rows = outcome.result.as_ref().map_or(0, |f| f.stats.input_rows);
                cx.opts.observer.event(&Event::Computed { date, input_rows, failed: outcome.result.is_err() });
                outcome
            })
            .buffered(cx.opts.concurrency.max(1))
            .collect()
            .await;
        // A partition can also fail while it is merged (a conflict with its own stored rows, a
        // stop, an unreadable tombstone object): the partitions it shares keys of the batch or
        // moves keys with fail with it.
        fail_together(
            &mut outcomes.iter_mut().map(|o| (o.plan.date, &mut o.result)).collect::<Vec<_>>(),
            &shared,
            &mut moves,
        );
        Computed { outcomes, moves, ..Default::default() }
    }

    /// A key the batch holds under several dates keeps its newest version only.
    fn within_batch(&self, cx: &Context<'_>, slots: &mut [Slot], shared: &mut Shared) {
        // The versions' type, for versions a zone-less clock cannot order.
        let cfg = &cx.job.config;
        let version_type = cfg.identity.version.as_ref().and_then(|v| {
            slots.iter().find_map(|slot| match &slot.state {
                Ok(Some(d)) => d.prepared.table.column(v).and_then(|c| c.first().map(|a| a.data_type().clone())),
                _ => None,
            })
        });
        let mut all: Vec<(u64, usize, usize)> = Vec::new();
        for (s, slot) in slots.iter().enumerate() {
            if let Ok(Some(d)) = &slot.state {
                all.extend(d.keys.iter().enumerate().map(|(i, k)| (k.hash, s, i)));
            }
        }
        all.sort_unstable();
        let mut failures: Vec<(usize, PartitionError)> = Vec::new();
        let mut drops: Vec<(usize, u32)> = Vec::new();
        let cols = DateKeys::columns(slots);
        let keys = DateKeys::new(&cols);
        // The winners of keys held by several dates: (key hash, version, slot, row).
        let mut winners: Vec<(u64, i64, usize, u32)> = Vec::new();
        for group in all.chunk_by(|a, b| a.0 == b.0) {
            if group.iter().all(|g| g.1 == group[0].1) {
                continue;
            }
            // The real keys behind the hash (equal bytes), each with its places.
            let mut by_key: BTreeMap<Vec<u8>, Vec<(usize, KeyAt)>> = BTreeMap::new();
            for &(_, s, i) in group {
                let Ok(Some(d)) = &slots[s].state else { continue };
                let k = d.keys[i];
                by_key.entry(keys.get(s, k.row)).or_default().push((s, k));
            }
            for places in by_key.values() {
                let dates: BTreeSet<usize> = places.iter().map(|(s, _)| *s).collect();
                if dates.len() < 2 {
                    continue;
                }
                let named = |(s, k): &(usize, KeyAt)| match &slots[*s].state {
                    Ok(Some(d)) => (render(d, k.row), d.prepared.table.locate(k.row as usize, None)),
                    _ => (String::new(), Location::object("?")),
                };
                for a in &dates {
                    for b in dates.range(a + 1..) {
                        shared.add(slots[*a].plan.date, slots[*b].plan.date, || named(&places[0]).0);
                    }
                }
                if self.on_date_change == OnDateChange::Fail {
                    let at: Vec<Location> = places.iter().map(|p| named(p).1).collect();
                    for s in &dates {
                        let key = ConflictKey { key: named(&places[0]).0, version: None, at: at.clone() };
                        failures.push((*s, PartitionError::KeyUnderTwoDates { keys: vec![key], total: 1 }));
                    }
                    continue;
                }
                let newest = places.iter().map(|(_, k)| k.version).max().unwrap_or(i64::MIN);
                if let Some(ty @ DataType::Timestamp(_, None)) = &version_type {
                    let unordered =
                        crate::prepare::Unordered::new(ty, cfg.timezone(), places.iter().map(|(_, k)| &k.version));
                    if let Some(other) = places.iter().find(|(_, k)| unordered.apart(newest, k.version)) {
                        let top = places.iter().find(|(_, k)| k.version == newest).unwrap_or(other);
                        let (key, at) = named(top);
                        let message = format!(
                            "key {key}: two of its versions in this batch ({} and {}, under {} and {}) are {}",
                            prepare::show_version(ty, newest),
                            prepare::show_version(ty, other.1.version),
                            slots[top.0].plan.date,
                            slots[other.0].plan.date,
                            prepare::unordered_reason(cfg.timezone())
                        );
                        for s in &dates {
                            failures.push((*s, InputError::bad(at.clone(), message.clone()).into()));
                        }
                        continue;
                    }
                }
                let top: Vec<&(usize, KeyAt)> = places.iter().filter(|(_, k)| k.version == newest).collect();
                let top_dates: BTreeSet<usize> = top.iter().map(|(s, _)| *s).collect();
                if top_dates.len() > 1 {
                    // One version under two dates: the dates differ, so the payloads do. (Under
                    // `on_conflict = "quarantine"` such a version is already set aside.)
                    let at: Vec<Location> = top.iter().map(|p| named(p).1).collect();
                    let version =
                        version_type.as_ref().map_or(newest.to_string(), |t| prepare::show_version(t, newest));
                    let key = ConflictKey { key: named(top[0]).0, version: Some(version), at };
                    for (s, _) in places {
                        failures.push((*s, PartitionError::Conflict { keys: vec![key.clone()], total: 1 }));
                    }
                    continue;
                }
                for (s, k) in places {
                    if k.version < newest {
                        drops.push((*s, k.row));
                    }
                }
                winners.extend(places.iter().map(|(s, k)| (k.hash, k.version, *s, k.row)));
            }
        }
        // A key's older version under two dates is a conflict too (its rows differ in their
        // date), though no date keeps it: it fails the dates, or its rows are set aside.
        if !winners.is_empty() {
            for (key, version, rows) in older_versions_under_two_dates(slots, &keys, winners) {
                let quarantine = cfg.prepare.on_conflict == OnConflict::Quarantine;
                let at: Vec<Location> = rows
                    .iter()
                    .filter_map(|&(s, r)| match &slots[s].state {
                        Ok(Some(d)) => Some(d.prepared.table.locate(r as usize, None)),
                        _ => None,
                    })
                    .collect();
                let shown = version_type.as_ref().map_or(version.to_string(), |t| prepare::show_version(t, version));
                let conflict = ConflictKey { key: key.clone(), version: Some(shown), at };
                for &(s, r) in &rows {
                    match (quarantine, &mut slots[s].state) {
                        (true, Ok(Some(d))) => d.quarantined.push(r),
                        _ => failures.push((s, PartitionError::Conflict { keys: vec![conflict.clone()], total: 1 })),
                    }
                }
            }
        }
        for (s, row) in drops {
            if let Ok(Some(d)) = &mut slots[s].state {
                d.dropped.insert(row);
            }
        }
        for (s, e) in failures {
            slots[s].fail(e);
        }
    }

    /// Searches every other committed partition's key index for the batch's keys; moves,
    /// ignores or refuses each key found (see the module documentation).
    async fn against_table(&self, cx: &Context<'_>, slots: &mut Vec<Slot>, moves: &mut Vec<Move>) {
        let out = &cx.job.output;
        let column = &cx.job.config.partition.column;
        let committed = match crate::schema::committed_dates(out, column).await {
            Ok(d) => d,
            Err(e) => {
                let m = e.to_string();
                slots.iter_mut().for_each(|s| s.fail(PartitionError::Other(m.clone())));
                return;
            }
        };
        // The batch's live keys, by hash, with their slot and place.
        let mut wanted: Vec<(u64, usize, usize)> = Vec::new();
        for (s, slot) in slots.iter().enumerate() {
            if let Ok(Some(d)) = &slot.state {
                wanted.extend(
                    d.keys.iter().enumerate().filter(|(_, k)| !d.dropped.contains(&k.row)).map(|(i, k)| (k.hash, s, i)),
                );
            }
        }
        if wanted.is_empty() {
            return;
        }
        wanted.sort_unstable();
        let cols = DateKeys::columns(slots);
        let keys = DateKeys::new(&cols);
        let held: BTreeMap<NaiveDate, usize> = slots.iter().enumerate().map(|(i, s)| (s.plan.date, i)).collect();
        // Keys another date of the batch holds a newer version of (step 2 dropped their rows).
        let elsewhere: HashSet<u64> = slots
            .iter()
            .filter_map(|slot| match &slot.state {
                Ok(Some(d)) => Some(d.keys.iter().filter(|k| d.dropped.contains(&k.row)).map(|k| k.hash)),
                _ => None,
            })
            .flatten()
            .collect();
        let mut moving = Moving::default();
        for date in committed {
            // A date of the batch that has failed is searched too (its index from the committed
            // footer): its stored rows stay, and guard the other dates.
            let (index, failed) = match held.get(&date) {
                Some(&i) => match &slots[i].state {
                    Ok(Some(d)) => (d.stored.clone(), false),
                    _ => (None, true),
                },
                None => (None, false),
            };
            let dir = commit::partition_dir(column, date);
            let hashes = match partition_index(cx, &dir, index.as_ref()).await {
                Ok(h) => h,
                Err(e) => {
                    // Cannot tell whether a key lives there: nothing is merged.
                    let m = format!("cannot read the key index of {dir}: {e}");
                    slots.iter_mut().for_each(|s| s.fail(PartitionError::Other(m.clone())));
                    return;
                }
            };
            let candidates: Vec<(usize, usize)> = wanted
                .iter()
                .filter(|(h, s, _)| slots[*s].plan.date != date && hashes.binary_search(h).is_ok())
                .map(|&(_, s, i)| (s, i))
                .collect();
            // The batch's newest versions of keys stored here, and held by other dates too.
            let checked = held.get(&date).filter(|_| !failed && !elsewhere.is_empty());
            if let Some(&i) = checked {
                let own: Vec<(usize, usize)> = wanted
                    .iter()
                    .filter(|(h, s, _)| *s == i && elsewhere.contains(h) && hashes.binary_search(h).is_ok())
                    .map(|&(_, s, k)| (s, k))
                    .collect();
                if !own.is_empty() {
                    self.stays(cx, slots, i, &own, &keys, &mut moving).await;
                }
            }
            if candidates.is_empty() {
                continue;
            }
            if failed {
                fail_beside(slots, &candidates, date);
                continue;
            }
            // The partition that holds them: held already, or leased now.
            let p = match held.get(&date) {
                Some(&i) => i,
                None => match lease_extra(cx, &dir, date).await {
                    Ok(slot) => {
                        slots.push(slot);
                        slots.len() - 1
                    }
                    Err(e) => {
                        for (s, _) in &candidates {
                            slots[*s].fail(PartitionError::Other(format!("keys of this date live under {dir}: {e}")));
                        }
                        continue;
                    }
                },
            };
            self.resolve(cx, slots, p, &candidates, &keys, &mut moving).await;
            // A partition leased only to look its keys up, and losing none: let it go.
            if p + 1 == slots.len()
                && !held.contains_key(&date)
                && slots[p].removals.is_empty()
                && slots[p].state.is_ok()
            {
                let slot = slots.pop();
                if let (Some(slot), Some(leases)) = (slot, cx.leases) {
                    leases.release(&slot.plan.dir).await;
                }
            }
        }
        conflicts_beside_moves(cx, slots, &keys, &moving);
        moves.append(&mut moving.moves);
    }

    /// Decides each candidate key of the batch found in stored partition `p`.
    async fn resolve(
        &self,
        cx: &Context<'_>,
        slots: &mut [Slot],
        p: usize,
        candidates: &[(usize, usize)],
        keys: &DateKeys<'_>,
        moving: &mut Moving,
    ) {
        if slots[p].state.is_err() {
            // It failed: its keys cannot be decided against it.
            let from = slots[p].plan.date;
            fail_beside(slots, candidates, from);
            return;
        }
        let stored_bytes = match &slots[p].state {
            Ok(Some(d)) => d.stored.clone(),
            Ok(None) => slots[p].stored.clone(),
            Err(_) => return,
        };
        let Some(stored_bytes) = stored_bytes else { return };
        let from = slots[p].plan.date;
        let stored = match stored_state(cx, &stored_bytes).await {
            Ok(s) => s,
            Err(e) => {
                for (s, _) in candidates {
                    slots[*s].fail(PartitionError::Other(format!("the stored partition of {from}: {e}")));
                }
                return;
            }
        };
        let found = stored_versions(cx, &stored, &hashes_of(slots, candidates));
        let version_col = cx.job.config.identity.version.clone().unwrap_or_default();
        // The stored rows of the keys that move out, kept to check the batch's rows at their
        // version against.
        let mut leaving: Vec<(Vec<u8>, i64, Option<u32>)> = Vec::new();
        for &(s, i) in candidates {
            let Ok(Some(d)) = &slots[s].state else { continue };
            let k = d.keys[i];
            let bytes = keys.get(s, k.row);
            let Some(&(stored_version, stored_row)) = found.get(&bytes) else { continue }; // a hash collision
            let to = slots[s].plan.date;
            let text = render(d, k.row);
            let version_type =
                d.prepared.table.column(&version_col).and_then(|c| c.first().map(|a| a.data_type().clone()));
            if let Some(ty @ DataType::Timestamp(_, None)) = &version_type {
                let unordered =
                    prepare::Unordered::new(ty, cx.job.config.timezone(), [k.version, stored_version].iter());
                if unordered.apart(k.version, stored_version) {
                    let message = format!(
                        "key {text}: version {} and the version {} stored under {from} are both {}",
                        prepare::show_version(ty, k.version),
                        prepare::show_version(ty, stored_version),
                        prepare::unordered_reason(cx.job.config.timezone())
                    );
                    let at = d.prepared.table.locate(k.row as usize, Some(&version_col));
                    slots[s].fail(InputError::bad(at, message).into());
                    continue;
                }
            }
            let shown = version_type.as_ref().map_or(k.version.to_string(), |t| prepare::show_version(t, k.version));
            match k.version.cmp(&stored_version) {
                std::cmp::Ordering::Greater if self.on_date_change == OnDateChange::Fail => {
                    let at = vec![
                        d.prepared.table.locate(k.row as usize, None),
                        Location::object(format!("the stored partition of {from}")),
                    ];
                    slots[s].fail(PartitionError::KeyUnderTwoDates {
                        keys: vec![ConflictKey { key: text, version: Some(shown), at }],
                        total: 1,
                    });
                }
                std::cmp::Ordering::Greater => {
                    leaving.push((bytes.clone(), stored_version, stored_row));
                    slots[p].removals.insert(bytes);
                    moving.moves.push(Move { key: text, version: k.version, from, to });
                }
                std::cmp::Ordering::Less => {
                    if let Ok(Some(d)) = &mut slots[s].state {
                        d.dropped.insert(k.row);
                        d.older += 1;
                    }
                }
                std::cmp::Ordering::Equal => {
                    let at = vec![
                        d.prepared.table.locate(k.row as usize, None),
                        Location::object(format!("the stored partition of {from}")),
                    ];
                    let conflict = ConflictKey { key: text, version: Some(shown), at };
                    if d.id.on_conflict == OnConflict::Quarantine {
                        if let Ok(Some(d)) = &mut slots[s].state {
                            d.dropped.insert(k.row);
                            d.quarantined.push(k.row);
                        }
                    } else {
                        slots[s].fail(PartitionError::Conflict { keys: vec![conflict], total: 1 });
                    }
                }
            }
        }
        moving.add(from, &stored.0, leaving, false);
    }

    /// The batch's keys whose newest version stays under stored date `p` (`own`, slot and
    /// place), held by other dates of the batch too: a row there at the stored version is a
    /// conflict (its date is another than the stored row's), as one batch holding both finds.
    async fn stays(
        &self,
        cx: &Context<'_>,
        slots: &mut [Slot],
        p: usize,
        own: &[(usize, usize)],
        keys: &DateKeys<'_>,
        moving: &mut Moving,
    ) {
        let Ok(Some(d)) = &slots[p].state else { return };
        let Some(stored_bytes) = d.stored.clone() else { return };
        let from = slots[p].plan.date;
        let stored = match stored_state(cx, &stored_bytes).await {
            Ok(s) => s,
            Err(e) => {
                slots[p].fail(PartitionError::Other(format!("the stored partition of {from}: {e}")));
                return;
            }
        };
        let found = stored_versions(cx, &stored, &hashes_of(slots, own));
        let staying: Vec<(Vec<u8>, i64, Option<u32>)> = own
            .iter()
            .filter_map(|&(s, i)| {
                let Ok(Some(d)) = &slots[s].state else { return None };
                let bytes = keys.get(s, d.keys[i].row);
                found.get(&bytes).map(|&(version, row)| (bytes, version, row))
            })
            .collect();
        moving.add(from, &stored.0, staying, true);
    }

    /// Merges one partition and encodes its file, tombstones and key index.
    async fn finish(&self, cx: &Context<'_>, slot: Slot) -> Outcome {
        let Slot { plan, started, state, removals, stored, moved_in, .. } = slot;
        let result = match state {
            Err(e) => Err(e),
            Ok(dated) => {
                let stored = dated.as_ref().map_or(stored, |d| d.stored.clone());
                let file = self.encode(cx, &plan, dated, stored, removals, moved_in).await;
                file.and_then(|f| cx.keep(&plan.dir, f))
            }
        };
        Outcome { plan, result, seconds: started.elapsed().as_secs_f64() }
    }

    async fn encode(
        &self,
        cx: &Context<'_>,
        plan: &PartitionPlan,
        dated: Option<Dated>,
        stored: Option<Bytes>,
        removals: HashSet<Vec<u8>>,
        moved_in: u64,
    ) -> Result<PartitionFile, PartitionError> {
        let (tombs_at, replaces) = match &stored {
            Some(b) => engine::stored_refs(b)?,
            None => (TombstonesAt::None, Vec::new()),
        };
        let tombstones = match tombs_at {
            TombstonesAt::None => None,
            TombstonesAt::Footer(b) => Some(b),
            TombstonesAt::Object(r) => Some(fetch(cx, &r.object).await?),
        };
        let schema = cx.plan.output_schema.clone().ok_or_else(|| PartitionError::Other("no output schema".into()))?;
        let cfg = cx.job.config.clone();
        let rebuild = cx.rebuild.then_some(cfg.timezone());
        let cutoff = match (self.retention, &cx.plan.record_schema) {
            (Some(r), Some(record)) => {
                version_cutoff(record, cfg.identity.version.as_deref().unwrap_or_default(), cx.now - r)
            }
            _ => None,
        };
        let (dir, date) = (plan.dir.clone(), plan.date);
        let existed = stored.is_some();
        tokio::task::spawn_blocking(move || {
            let seen_digest = stored.as_ref().map(|b| commit::digest(b));
            let key: Vec<String> = match &dated {
                Some(d) => d.id.key.clone(),
                None => cfg.identity.key.clone(),
            };
            let tomb_schema = engine::tombstone_schema(&schema, &key);
            let read = stored
                .as_ref()
                .map(|b| engine::read_stored(b, tombstones, &schema, &tomb_schema, rebuild))
                .transpose()?;
            let (read, moved_out) = match read {
                Some((rows, tombs)) => {
                    let (rows, a) = engine::without_keys(&rows, &key, &removals).map_err(PartitionError::Other)?;
                    let (tombs, b) = engine::without_keys(&tombs, &key, &removals).map_err(PartitionError::Other)?;
                    (Some((rows, tombs)), a + b)
                }
                None => (None, 0),
            };
            let (rows, tombs, mut stats, counts, quarantine) = match dated {
                Some(mut d) => {
                    let mut quarantined = std::mem::take(&mut d.quarantined);
                    quarantined.sort_unstable();
                    quarantined.dedup();
                    d.prepared.winners.retain(|r| !d.dropped.contains(r));
                    let m = engine::merge(&d.prepared, &d.id, &schema, &tomb_schema, read)?;
                    let mut stats = m.stats;
                    stats.ignored_older += d.older;
                    quarantined.extend(&d.prepared.quarantined);
                    quarantined.extend(&m.quarantined);
                    quarantined.sort_unstable();
                    quarantined.dedup();
                    // Every row set aside is a conflict: with this date's stored rows, with a
                    // row under another date (stored, or of the batch), or within the batch.
                    stats.conflicts = quarantined.len() as u64;
                    let quarantine = if quarantined.is_empty() {
                        None
                    } else {
                        Some(d.prepared.table.take(&quarantined).map_err(|e| PartitionError::Other(e.to_string()))?)
                    };
                    // The rows the quarantine file holds, whichever step set them aside.
                    let counts = PrepareStats { quarantined_rows: quarantined.len() as u64, ..d.prepared.stats };
                    (m.rows, m.tombstones, stats, counts, quarantine)
                }
                None => {
                    let (rows, tombs) = read.unwrap_or_else(|| {
                        (RecordBatch::new_empty(schema.clone()), RecordBatch::new_empty(tomb_schema.clone()))
                    });
                    (rows, tombs, MergeStats::default(), PrepareStats::default(), None)
                }
            };
            stats.moved_out = moved_out;
            stats.moved_in = moved_in;
            let (tombs, expired) = match cutoff {
                Some(c) => engine::expire(&tombs, c).map_err(PartitionError::Other)?,
                None => (tombs, 0),
            };
            stats.expired_tombstones = expired;
            // The file depends on the resulting state only, not on the batch.
            let lineage =
                Lineage::new(cfg.fingerprint(), date, Vec::new(), PrepareStats::default(), rows.num_rows() as u64);
            let index = engine::key_index(&rows, &tombs, &key).map_err(PartitionError::Other)?;
            let mut sidecars =
                vec![Sidecar::new(sidecar::Kind::Keys, &dir, sidecar::encode_keys(&index), index.len() as u64)];
            if tombs.num_rows() > 0 {
                let b = engine::encode_tombstones(&tombs)?;
                sidecars.push(Sidecar::new(sidecar::Kind::Tombstones, &dir, b, tombs.num_rows() as u64));
            }
            let entries: Vec<(&str, String)> = sidecars.iter().map(|s| s.footer_entry()).collect();
            let bytes = commit::encode(&rows, &lineage, &entries)?;
            let quarantine = match quarantine {
                Some(q) => Some(commit::encode(&q, &lineage, &[])?),
                None => None,
            };
            let names: Vec<&str> = sidecars.iter().map(|s| s.reference.object.as_str()).collect();
            let replaces = replaces.into_iter().filter(|r| !names.contains(&r.as_str())).collect();
            // Nothing to write: no batch rows and nothing leaving; or no partition yet and
            // nothing to put in one (the batch's rows were all older than what is stored).
            let nothing_to_do = (counts.input_rows == 0 && moved_out == 0 && rebuild.is_none() && expired == 0)
                || (!existed && rows.num_rows() == 0 && tombs.num_rows() == 0);
            Ok(PartitionFile {
                body: Body::Memory(bytes),
                rows: rows.num_rows(),
                schema: schema.clone(),
                stats: counts,
                merge: Some(stats),
                quarantine,
                sidecars,
                replaces,
                skip: nothing_to_do,
                spilled_bytes: 0,
                seen_digest,
            })
        })
        .await
        .map_err(|e| PartitionError::Other(format!("merge task failed: {e}")))?
    }
}

/// Under `on_conflict = "quarantine"`, a version of a key in conflict anywhere in the batch —
/// inside one date, or the key's newest version held by two dates — is set aside on every date
/// that holds it, and such a date keeps its newest other version of the key (it is prepared
/// again, until no date holds a row of a version set aside that it has not set aside: as its
/// winner, or below a newer one). The table is then the same however
/// the batch's rows are spread over dates, and over batches that each hold a conflict whole:
/// a key keeps its newest version without a conflict. With `on_date_change = "fail"`, a key's
/// newest version under two dates is left to fail both dates (the key changes date).
fn set_aside_across_dates(slots: &mut [Slot], on_date_change: OnDateChange) {
    let hasher = prepare::key_hasher();
    let mut named: HashMap<Vec<u8>, Vec<i64>> = HashMap::new();
    for slot in slots.iter() {
        let Ok(Some(d)) = &slot.state else { continue };
        if d.prepared.quarantined.is_empty() {
            continue;
        }
        let (Some(cols), Ok(versions)) = (d.prepared.table.columns(&d.id.key), version_chunks(d)) else { continue };
        let Ok(keys) = prepare::key_bytes(&cols) else { continue };
        for &r in &d.prepared.quarantined {
            let (c, i) = crate::read::split_id(r as usize);
            named.entry(keys.get(r as usize).to_vec()).or_default().push(versions.get(c).map_or(0, |v| v[i]));
        }
    }
    loop {
        let before: usize = named.values().map(Vec::len).sum();
        // A key's newest version held by two dates: the dates differ, so the rows do.
        let mut all: Vec<(u64, usize, usize)> = Vec::new();
        for (s, slot) in slots.iter().enumerate() {
            if let Ok(Some(d)) = &slot.state {
                all.extend(d.keys.iter().enumerate().map(|(i, k)| (k.hash, s, i)));
            }
        }
        all.sort_unstable();
        let cols = DateKeys::columns(slots);
        let keys = DateKeys::new(&cols);
        for group in all.chunk_by(|a, b| a.0 == b.0) {
            if on_date_change == OnDateChange::Fail || group.iter().all(|g| g.1 == group[0].1) {
                continue;
            }
            let mut by_key: BTreeMap<Vec<u8>, Vec<i64>> = BTreeMap::new();
            for &(_, s, i) in group {
                let Ok(Some(d)) = &slots[s].state else { continue };
                by_key.entry(keys.get(s, d.keys[i].row)).or_default().push(d.keys[i].version);
            }
            for (key, versions) in by_key {
                let newest = versions.iter().copied().max().unwrap_or(i64::MIN);
                if versions.iter().filter(|&&v| v == newest).count() > 1 {
                    let set = named.entry(key).or_default();
                    if !set.contains(&newest) {
                        set.push(newest);
                    }
                }
            }
        }
        // Dates holding a row of a version set aside (their winner, or an older row), prepared
        // again.
        let hashes: HashSet<u64> = named.keys().map(|k| hasher.hash_one(k)).collect();
        let shared = std::sync::Arc::new(named.clone());
        let mut again = false;
        let hits: Vec<bool> = slots
            .iter()
            .enumerate()
            .map(|(s, slot)| match &slot.state {
                Ok(Some(d)) => {
                    d.keys.iter().any(|k| {
                        hashes.contains(&k.hash)
                            && named.get(&keys.get(s, k.row)).is_some_and(|v| v.contains(&k.version))
                    }) || holds_older_set_aside(d, &keys, s, &hashes, &named)
                }
                _ => false,
            })
            .collect();
        for (slot, hit) in slots.iter_mut().zip(hits) {
            if !hit {
                continue;
            }
            let Ok(Some(d)) = std::mem::replace(&mut slot.state, Ok(None)) else { continue };
            let id = Identity { set_aside: Some(shared.clone()), ..d.id };
            slot.state = prepare::prepare(d.prepared.table, &id).and_then(|prepared| {
                let keys = winner_keys(&prepared, &id).map_err(PartitionError::Other)?;
                Ok(Some(Dated { prepared, id, keys, ..d }))
            });
            again = true;
        }
        let after: usize = named.values().map(Vec::len).sum();
        if !again && after == before {
            return;
        }
    }
}

/// Whether a date holds, below its winner of a key, a row of a version set aside (`named`, its
/// key hashes `hashes`) that it has not set aside yet: its winner is another version, newer.
fn holds_older_set_aside(
    d: &Dated,
    keys: &DateKeys<'_>,
    s: usize,
    hashes: &HashSet<u64>,
    named: &HashMap<Vec<u8>, Vec<i64>>,
) -> bool {
    if named.is_empty() || d.prepared.stats.superseded == 0 {
        return false;
    }
    let (Some(keys), Ok(versions)) = (keys.bytes(s), version_chunks(d)) else { return false };
    let hasher = prepare::key_hasher();
    d.prepared.table.ids().any(|id| {
        let k = keys.get(id);
        let (c, i) = crate::read::split_id(id);
        hashes.contains(&hasher.hash_one(k))
            && named.get(k).is_some_and(|v| v.contains(&versions.get(c).map_or(0, |x| x[i])))
            && d.prepared.quarantined.binary_search(&(id as u32)).is_err()
    })
}

/// A row of a date of the batch: (slot, row id).
type Place = (usize, u32);

/// The versions of keys held by several dates (`winners`: their winners' key hash, version,
/// slot and row) older than their newest and held by two dates or more: each key (rendered),
/// version and rows.
fn older_versions_under_two_dates(
    slots: &[Slot],
    keys: &DateKeys<'_>,
    mut winners: Vec<(u64, i64, usize, u32)>,
) -> Vec<(String, i64, Vec<Place>)> {
    let hasher = prepare::key_hasher();
    winners.sort_unstable();
    // A key's newest version: the greatest of its winners (same hash and bytes).
    let newest = |h: u64, k: &[u8]| {
        let at = winners.partition_point(|w| w.0 < h);
        winners[at..].iter().take_while(|w| w.0 == h).filter(|w| keys.get(w.2, w.3) == k).map(|w| w.1).max()
    };
    // (key hash, version, slot, row) of every row whose key hash is a wandering key's. A date
    // that kept one version of each key and set none aside holds no other rows: its winners.
    let scanned = |d: &Dated| d.prepared.stats.superseded > 0 || d.prepared.stats.quarantined_rows > 0;
    let any_scanned = slots.iter().any(|slot| matches!(&slot.state, Ok(Some(d)) if scanned(d)));
    let mut rows: Vec<(u64, i64, usize, u32)> = Vec::new();
    if any_scanned {
        // The hashes alone, held inline: one probe per row.
        let hashes: HashSet<u64, foldhash::fast::FixedState> = winners.iter().map(|w| w.0).collect();
        rows.extend(winners.iter().copied().filter(|w| !matches!(&slots[w.2].state, Ok(Some(d)) if scanned(d))));
        for (s, slot) in slots.iter().enumerate() {
            let Ok(Some(d)) = &slot.state else { continue };
            if !scanned(d) {
                continue;
            }
            let (Some(kb), Ok(versions)) = (keys.bytes(s), version_chunks(d)) else { continue };
            for id in d.prepared.table.ids() {
                let h = hasher.hash_one(kb.get(id));
                if hashes.contains(&h) {
                    let (c, i) = crate::read::split_id(id);
                    rows.push((h, versions.get(c).map_or(0, |v| v[i]), s, id as u32));
                }
            }
        }
        rows.sort_unstable();
    }
    let found = if any_scanned { &rows } else { &winners };
    let mut out = Vec::new();
    for group in found.chunk_by(|a, b| (a.0, a.1) == (b.0, b.1)) {
        if group.iter().all(|g| g.2 == group[0].2) {
            continue;
        }
        // The real keys behind the hash, each with its rows, at a version below its newest.
        let version = group[0].1;
        let mut by_key: BTreeMap<Vec<u8>, Vec<Place>> = BTreeMap::new();
        for &(h, _, s, r) in group {
            let k = keys.get(s, r);
            if newest(h, &k).is_some_and(|n| version < n) {
                by_key.entry(k).or_default().push((s, r));
            }
        }
        for rows in by_key.into_values().filter(|rows| rows.iter().any(|r| r.0 != rows[0].0)) {
            let key = match &slots[rows[0].0].state {
                Ok(Some(d)) => render(d, rows[0].1),
                _ => String::new(),
            };
            out.push((key, group[0].1, rows));
        }
    }
    out
}

/// The versions of a prepared date, chunk by chunk (none without a version column).
fn version_chunks(d: &Dated) -> Result<Vec<arrow::buffer::ScalarBuffer<i64>>, String> {
    match &d.id.version {
        Some(v) => d.prepared.table.column(v).ok_or("no version column")?.iter().map(prepare::version_values).collect(),
        None => Ok(Vec::new()),
    }
}

/// Dates of the batch that hold the same key, each pair with one such key (for the message). A
/// key's newest version in the batch depends on every date that holds it, so a date that fails
/// (writes nothing) leaves it unknown: dates that share keys commit together or not at all.
#[derive(Default)]
struct Shared(BTreeMap<(NaiveDate, NaiveDate), String>);

impl Shared {
    fn add(&mut self, a: NaiveDate, b: NaiveDate, key: impl FnOnce() -> String) {
        if a != b {
            self.0.entry((a.min(b), a.max(b))).or_insert_with(key);
        }
    }

    /// The key `date` shares with `other`, if any.
    fn key(&self, date: NaiveDate, other: NaiveDate) -> Option<&String> {
        self.0.get(&(date.min(other), date.max(other)))
    }
}

/// The keys of the dates of the batch that failed while they were prepared join `shared`. When
/// a failed date's rows could not be read at all, its keys are unknown, and every date of the
/// batch fails.
fn guard_failed_dates(slots: &mut [Slot], shared: &mut Shared) {
    let mut known: HashMap<u64, NaiveDate> = HashMap::new();
    let mut unknown: Vec<NaiveDate> = Vec::new();
    for slot in slots.iter() {
        match (&slot.failed_keys, &slot.state) {
            (_, Err(PartitionError::Stopped { .. })) | (None, _) => {}
            (Some(Some(keys)), _) => known.extend(keys.iter().map(|k| (*k, slot.plan.date))),
            (Some(None), _) => unknown.push(slot.plan.date),
        }
    }
    if let Some(from) = unknown.first() {
        let e = format!(
            "{from}, a date of this batch, failed before its keys could be read: their newest version in the \
             batch is unknown, so no date of the batch is merged. Fix {from}'s input and run the batch again \
             (or merge the other dates alone, with --from/--to)"
        );
        slots.iter_mut().for_each(|s| s.fail(PartitionError::Other(e.clone())));
        return;
    }
    for slot in slots.iter() {
        let Ok(Some(d)) = &slot.state else { continue };
        for k in &d.keys {
            if let Some(&from) = known.get(&k.hash) {
                shared.add(slot.plan.date, from, || render(d, k.row));
            }
        }
    }
}

/// Fails every date that shares keys of the batch ([`Shared`]) or moves keys ([`Move`]) with a
/// date that failed, directly or through other dates, until none is left to fail; drops the
/// moves of failed dates.
fn fail_together<T>(parts: &mut [(NaiveDate, &mut Result<T, PartitionError>)], shared: &Shared, moves: &mut Vec<Move>) {
    while fail_shared(parts, shared) | abort_broken_moves(parts, moves) {}
}

/// Fails every date that shares keys of the batch with a date that failed, directly or through
/// other dates. True when it failed one.
fn fail_shared<T>(parts: &mut [(NaiveDate, &mut Result<T, PartitionError>)], shared: &Shared) -> bool {
    if shared.0.is_empty() {
        return false;
    }
    let failed = first_failed_linked(parts, shared.0.keys().copied());
    // The signal of each failed part that was stopped.
    let stopped: Vec<Option<&'static str>> = parts
        .iter()
        .map(|p| match &*p.1 {
            Err(PartitionError::Stopped { signal }) => Some(*signal),
            _ => None,
        })
        .collect();
    let dates: Vec<NaiveDate> = parts.iter().map(|p| p.0).collect();
    let mut any = false;
    for ((date, result), f) in parts.iter_mut().zip(failed) {
        let Some(f) = f else { continue };
        let (date, from, stopped) = (*date, dates[f], stopped[f]);
        any = true;
        if let Some(signal) = stopped {
            // Not bad input: run again, as any stopped partition.
            **result = Err(PartitionError::Stopped { signal });
            continue;
        }
        let why = match shared.key(date, from) {
            Some(key) => format!(
                "key {key} is also under {from} in this batch, which failed: its newest version is unknown, so it \
                 cannot be merged here"
            ),
            None => {
                let (other, key) = shared
                    .0
                    .iter()
                    .find_map(|((a, b), k)| match (*a == date, *b == date) {
                        (true, _) => Some((*b, k)),
                        (_, true) => Some((*a, k)),
                        _ => None,
                    })
                    .map_or((from, String::new()), |(o, k)| (o, k.clone()));
                format!(
                    "key {key} is also under {other} in this batch, which shares keys with {from}, which failed: \
                     their newest versions are unknown"
                )
            }
        };
        **result = Err(PartitionError::Other(format!(
            "{why}; nothing is written for this date. Fix {from}'s input and run the batch again"
        )));
    }
    any
}

/// For each part still ok, the first failed part linked to it by `links` (pairs of dates),
/// directly or through other parts; `None` for the others.
fn first_failed_linked<T>(
    parts: &[(NaiveDate, &mut Result<T, PartitionError>)],
    links: impl Iterator<Item = (NaiveDate, NaiveDate)>,
) -> Vec<Option<usize>> {
    let index: BTreeMap<NaiveDate, usize> = parts.iter().enumerate().map(|(i, p)| (p.0, i)).collect();
    let mut parent: Vec<usize> = (0..parts.len()).collect();
    for (a, b) in links {
        if let (Some(&a), Some(&b)) = (index.get(&a), index.get(&b)) {
            let (ra, rb) = (find(&mut parent, a), find(&mut parent, b));
            parent[ra] = rb;
        }
    }
    let mut first: BTreeMap<usize, usize> = BTreeMap::new();
    for i in (0..parts.len()).filter(|&i| parts[i].1.is_err()) {
        first.entry(find(&mut parent, i)).or_insert(i);
    }
    (0..parts.len())
        .map(|i| match parts[i].1.is_ok() {
            true => first.get(&find(&mut parent, i)).copied(),
            false => None,
        })
        .collect()
}

/// The root of `x` in a union-find forest, compressing its path.
fn find(p: &mut [usize], x: usize) -> usize {
    let mut r = x;
    while p[r] != r {
        r = p[r];
    }
    p[x] = r;
    r
}

/// Reads and prepares one date of the batch, and reads its stored file (under its lease). When
/// it fails after its rows were read, `keys` gets the keys of every row.
async fn prepare_date(
    cx: &Context<'_>,
    p: &PartitionPlan,
    keys: &mut Option<HashSet<u64>>,
) -> Result<Dated, PartitionError> {
    // No object of the batch has a row (text holding a header alone) and no table gives the
    // columns: nothing to merge, and no column has a type.
    if cx.plan.output_schema.is_none() {
        return Err(PartitionError::Input(crate::error::InputError::unreadable(
            crate::error::Location::object(cx.job.input.url.clone()),
            "no object of the batch has a row, so its columns have no types and there is no table yet to take \
             them from: nothing was merged; run again once a batch with rows has arrived",
        )));
    }
    let table = cx.table(p).await?;
    let kept = table.clone();
    let prepared = prepare_read(cx, p, table).await;
    if prepared.is_err() {
        let run = cx.plan.output_schema.clone().unwrap_or_else(|| kept.schema().clone());
        *keys = every_key(&kept, &cx.job.config.identity.key, &run);
    }
    prepared
}

/// The key hashes of every row of `table` with a key, taken as the winners' are: the key
/// columns in the run's types (`run`), rows with a null key part left out. `None` when a key
/// column is missing or a key does not convert to the run's type.
fn every_key(table: &Table, key: &[String], run: &SchemaRef) -> Option<HashSet<u64>> {
    let cast = arrow::compute::CastOptions { safe: false, ..Default::default() };
    let mut chunks: Vec<Vec<arrow::array::ArrayRef>> = Vec::new();
    for cols in table.columns(key)? {
        let mut cols = cols
            .iter()
            .zip(key)
            .map(|(c, name)| {
                let to = run.field_with_name(name).map_or(c.data_type(), |f| f.data_type());
                arrow::compute::cast_with_options(c, to, &cast).ok()
            })
            .collect::<Option<Vec<_>>>()?;
        if cols.iter().any(|c| c.null_count() > 0) {
            let all: Vec<&dyn arrow::array::Array> = cols.iter().map(|c| c.as_ref()).collect();
            let keep = arrow::array::BooleanArray::from_iter(
                (0..cols[0].len()).map(|i| Some(all.iter().all(|c| c.is_valid(i)))),
            );
            cols = cols.iter().map(|c| arrow::compute::filter(c, &keep).ok()).collect::<Option<Vec<_>>>()?;
        }
        chunks.push(cols);
    }
    let keys = prepare::key_bytes(&chunks).ok()?;
    let hasher = prepare::key_hasher();
    let ids = chunks.iter().enumerate().flat_map(|(c, cols)| {
        let base = c << crate::read::CHUNK_BITS;
        (0..cols.first().map_or(0, |a| a.len())).map(move |i| base + i)
    });
    Some(ids.map(|id| hasher.hash_one(keys.get(id))).collect())
}

async fn prepare_read(cx: &Context<'_>, p: &PartitionPlan, mut table: Table) -> Result<Dated, PartitionError> {
    // The date's own objects give the run's columns and types, in any order: a column the run
    // does not know would be dropped, another type could not be stored. A column they lack is
    // null (an optional field).
    if let Some(run) = &cx.plan.output_schema {
        let lacking: Vec<_> =
            run.fields().iter().filter(|f| table.schema().field_with_name(f.name()).is_err()).cloned().collect();
        if !lacking.is_empty() {
            table = table.with_nulls(&lacking).map_err(|e| PartitionError::Other(e.to_string()))?;
        }
        let own = crate::merge::output_schema(table.schema(), &cx.job.config.partition.column);
        let differ: Vec<String> = crate::schema::differences(run, &own)
            .into_iter()
            .filter(|d| !d.starts_with("the columns are reordered"))
            .map(|d| {
                d.replace(" in the table, ", " in the run's schema, ")
                    .replace(" in this run", " in this date's objects")
                    .replace(
                        ") added",
                        ") is not in the run's schema (the run's objects read to plan do not hold it: to add it \
                         to the table, run with --schema-change rebuild over every committed partition)",
                    )
                    .replace(") removed", ") is missing from this date's objects")
            })
            .collect();
        if !differ.is_empty() {
            return Err(PartitionError::OutputSchema {
                why: format!("{} ({})", differ.join("; "), table.objects().join(", ")),
            });
        }
    }
    let mut id = cx.identity(&table);
    id.keep_deletes = true;
    id.key_hashes = false;
    let stored = match &p.seen.meta {
        Some(_) => commit::get(&cx.job.output, &commit::target_path(&cx.job.output, &p.dir)).await?,
        None => None,
    };
    if let Some(b) = &stored {
        commit::holds_its_date(b, p.date, &cx.job.output.display(&commit::target_path(&cx.job.output, &p.dir)))?;
    }
    tokio::task::spawn_blocking(move || {
        let prepared = prepare::prepare(table, &id)?;
        let keys = winner_keys(&prepared, &id).map_err(PartitionError::Other)?;
        Ok(Dated { prepared, id, keys, stored, dropped: HashSet::new(), quarantined: Vec::new(), older: 0 })
    })
    .await
    .map_err(|e| PartitionError::Other(format!("prepare task failed: {e}")))?
}

/// The winners of a prepared date with their key hash and version, by hash.
fn winner_keys(p: &Prepared, id: &Identity) -> Result<Vec<KeyAt>, String> {
    let t = &p.table;
    let cols = t.columns(&id.key).ok_or("no key column")?;
    let keys = prepare::key_bytes(&cols)?;
    let versions: Vec<_> = match &id.version {
        Some(v) => {
            t.column(v).ok_or("no version column")?.iter().map(prepare::version_values).collect::<Result<_, _>>()?
        }
        None => Vec::new(),
    };
    let hasher = prepare::key_hasher();
    let mut out: Vec<KeyAt> = p
        .winners
        .iter()
        .map(|&row| {
            let (c, i) = crate::read::split_id(row as usize);
            KeyAt { hash: hasher.hash_one(keys.get(row as usize)), version: versions.get(c).map_or(0, |v| v[i]), row }
        })
        .collect();
    out.sort_unstable_by_key(|k| k.hash);
    Ok(out)
}

/// The keys of the batch found newer than their stored row under another date (the moves, and
/// what each key leaves), and those whose newest version stays under its stored date while
/// other dates of the batch hold it too.
#[derive(Default)]
struct Moving {
    moves: Vec<Move>,
    keys: HashMap<Vec<u8>, Leaving>,
    /// The stored rows of the keys that leave, copied.
    rows: Vec<RecordBatch>,
}

/// What a moving key leaves: the date, its stored version, and its stored row (in
/// [`Moving::rows`]; `None`: a tombstone, or a key that stays). `stays`: the key does not leave
/// — its newest version in the batch is under its stored date, whose own rows of it the merge
/// checks itself; a row of it at the stored version elsewhere is a conflict whatever its values.
#[derive(Clone, Copy)]
struct Leaving {
    from: NaiveDate,
    version: i64,
    row: Option<(usize, usize)>,
    tombstone: bool,
    stays: bool,
}

impl Moving {
    fn add(&mut self, from: NaiveDate, stored: &RecordBatch, leaving: Vec<(Vec<u8>, i64, Option<u32>)>, stays: bool) {
        if leaving.is_empty() {
            return;
        }
        let at = self.rows.len();
        // The stored rows, to compare with; a key that stays is compared under no other date.
        // Rows that cannot be copied are not checked (as before this check).
        let copied = stays || {
            let live: Vec<u32> = leaving.iter().filter_map(|l| l.2).collect();
            arrow::compute::take_record_batch(stored, &arrow::array::UInt32Array::from(live))
                .map(|rows| self.rows.push(rows))
                .is_ok()
        };
        let mut j = 0;
        for (key, version, row) in leaving {
            let place = match row {
                Some(_) if !copied => continue,
                Some(_) if !stays => {
                    j += 1;
                    Some((at, j - 1))
                }
                _ => None,
            };
            self.keys.insert(key, Leaving { from, version, row: place, tombstone: row.is_none(), stays });
        }
    }
}

/// A key that moves out of a stored partition (or stays there, beside rows of it under other
/// dates), newer in the batch: the batch's other rows of it at the stored version must be the
/// stored row (or a delete, for a tombstone) under its date, as they would be in one batch with
/// it — else a conflict, wherever the batch dates them.
fn conflicts_beside_moves(cx: &Context<'_>, slots: &mut [Slot], keys: &DateKeys<'_>, moving: &Moving) {
    if moving.keys.is_empty() {
        return;
    }
    let cfg = &cx.job.config;
    let version_col = cfg.identity.version.clone().unwrap_or_default();
    for (s, slot) in slots.iter_mut().enumerate() {
        let date = slot.plan.date;
        let Ok(Some(d)) = &mut slot.state else { continue };
        let Some(bytes) = keys.bytes(s) else { continue };
        let table = &d.prepared.table;
        let versions: Vec<arrow::buffer::ScalarBuffer<i64>> = match table.column(&version_col) {
            Some(chunks) => match chunks.iter().map(prepare::version_values).collect() {
                Ok(v) => v,
                Err(_) => continue,
            },
            None => continue,
        };
        let deletes: Option<Vec<arrow::array::BooleanArray>> = cfg.identity.deleted.as_ref().and_then(|del| {
            let chunks = table.column(&del.column)?;
            chunks.iter().map(|c| crate::predicate::Equals::rows(c, &del.equals, cfg.timezone()).ok()).collect()
        });
        let mut found: Option<ConflictKey> = None;
        for id in table.ids() {
            let Some(&Leaving { from, version: sv, row: stored, tombstone, stays }) = moving.keys.get(bytes.get(id))
            else {
                continue;
            };
            let (c, i) = crate::read::split_id(id);
            if (stays && date == from)
                || versions[c][i] != sv
                || d.prepared.quarantined.binary_search(&(id as u32)).is_ok()
            {
                continue;
            }
            let del = deletes.as_ref().is_some_and(|m| m[c].value(i));
            // Its date is part of the row: at the stored version under another date, it is
            // another row (as one batch holding both, or this row alone, finds it).
            let same = date == from
                && match stored {
                    Some((b, r)) => !del && same_row(table, id, &moving.rows[b], r),
                    None => tombstone && del,
                };
            if same {
                continue;
            }
            if d.id.on_conflict == OnConflict::Quarantine {
                d.quarantined.push(id as u32);
                continue;
            }
            let shown = table.column(&version_col).and_then(|c| c.first().map(|a| a.data_type().clone()));
            found = Some(ConflictKey {
                key: render(d, id as u32),
                version: Some(shown.map_or(sv.to_string(), |t| prepare::show_version(&t, sv))),
                at: vec![
                    table.locate(id, None),
                    Location::object(match tombstone {
                        false => format!("the stored partition of {from}"),
                        true => format!("a delete of the same version, stored under {from}"),
                    }),
                ],
            });
            break;
        }
        if let Some(key) = found {
            slot.fail(PartitionError::Conflict { keys: vec![key], total: 1 });
        }
    }
}

/// Whether row `id` of `table` holds the values of row `r` of `stored`, column by column (a
/// zero's sign and a NaN's bits tell no row apart).
fn same_row(table: &Table, id: usize, stored: &RecordBatch, r: usize) -> bool {
    let Ok(row) = table.take(&[id as u32]) else { return false };
    stored.schema().fields().iter().zip(stored.columns()).all(|(f, b)| match row.column_by_name(f.name()) {
        Some(a) => {
            let (a, b) = (prepare::one_zero_one_nan(a), prepare::one_zero_one_nan(b));
            arrow::array::make_comparator(a.as_ref(), b.as_ref(), arrow::compute::SortOptions::default())
                .is_ok_and(|cmp| cmp(0, r) == std::cmp::Ordering::Equal)
        }
        None => b.is_null(r),
    })
}

/// The key bytes of the rows of each date of the batch, encoded once per date and only when
/// first asked for (a key of several columns, or of a number, is encoded for the whole date).
struct DateKeys<'a> {
    cols: &'a [Option<Vec<Vec<ArrayRef>>>],
    keys: Vec<std::sync::OnceLock<Option<prepare::KeyBytes<'a>>>>,
}

impl<'a> DateKeys<'a> {
    /// The key columns of each slot, for [`DateKeys::new`].
    fn columns(slots: &[Slot]) -> Vec<Option<Vec<Vec<ArrayRef>>>> {
        slots
            .iter()
            .map(|slot| match &slot.state {
                Ok(Some(d)) => d.prepared.table.columns(&d.id.key),
                _ => None,
            })
            .collect()
    }

    fn new(cols: &'a [Option<Vec<Vec<ArrayRef>>>]) -> Self {
        DateKeys { cols, keys: cols.iter().map(|_| std::sync::OnceLock::new()).collect() }
    }

    /// The key bytes of row `row` of slot `s`.
    fn get(&self, s: usize, row: u32) -> Vec<u8> {
        self.bytes(s).map(|k| k.get(row as usize).to_vec()).unwrap_or_default()
    }

    /// The key bytes of slot `s`'s rows.
    fn bytes(&self, s: usize) -> Option<&prepare::KeyBytes<'a>> {
        let keys = self.keys.get(s)?;
        keys.get_or_init(|| self.cols[s].as_ref().and_then(|c| prepare::key_bytes(c).ok())).as_ref()
    }
}

fn render(d: &Dated, row: u32) -> String {
    d.prepared.table.columns(&d.id.key).map(|cols| prepare::render_id(&cols, row as usize)).unwrap_or_default()
}

fn key_columns(cx: &Context<'_>, rows: &RecordBatch) -> Vec<String> {
    if cx.job.config.is_whole_record_key() {
        rows.schema().fields().iter().map(|f| f.name().clone()).collect()
    } else {
        cx.job.config.identity.key.clone()
    }
}

/// The key hashes of `places` (slot and place) of the batch.
fn hashes_of(slots: &[Slot], places: &[(usize, usize)]) -> HashSet<u64> {
    places
        .iter()
        .filter_map(|(s, i)| match &slots[*s].state {
            Ok(Some(d)) => Some(d.keys[*i].hash),
            _ => None,
        })
        .collect()
}

/// The stored version of each key of a stored partition's rows and tombstones whose hash is
/// `wanted`, and its stored row (`None`: a tombstone), by key bytes.
fn stored_versions(
    cx: &Context<'_>,
    stored: &(RecordBatch, RecordBatch),
    wanted: &HashSet<u64>,
) -> HashMap<Vec<u8>, (i64, Option<u32>)> {
    let key = key_columns(cx, &stored.0);
    let hasher = prepare::key_hasher();
    let mut found = HashMap::new();
    let version_col = cx.job.config.identity.version.clone().unwrap_or_default();
    for (batch, col, live) in [(&stored.0, version_col.as_str(), true), (&stored.1, "version", false)] {
        let Some(vs) = batch.column_by_name(col).and_then(|c| prepare::version_values(c).ok()) else { continue };
        let _ = engine::each_key(batch, &key, |row, k| {
            if wanted.contains(&hasher.hash_one(k)) {
                found.insert(k.to_vec(), (vs[row], live.then_some(row as u32)));
            }
        });
    }
    found
}

/// Reads a stored partition's rows and tombstones, fetching its tombstone object.
async fn stored_state(cx: &Context<'_>, file: &Bytes) -> Result<(RecordBatch, RecordBatch), PartitionError> {
    let tombstones = match engine::stored_refs(file)?.0 {
        TombstonesAt::Object(r) => Some(fetch(cx, &r.object).await?),
        TombstonesAt::Footer(b) => Some(b),
        TombstonesAt::None => None,
    };
    read_state(cx, file, tombstones)
}

/// Reads a stored partition's rows and tombstones (the tombstone object, when it has one, is
/// fetched by the caller and passed as `tombstones`).
fn read_state(
    cx: &Context<'_>,
    file: &Bytes,
    tombstones: Option<Bytes>,
) -> Result<(RecordBatch, RecordBatch), PartitionError> {
    let schema = cx.plan.output_schema.clone().ok_or_else(|| PartitionError::Other("no output schema".into()))?;
    let tomb_schema = engine::tombstone_schema(&schema, &cx.job.config.identity.key);
    let tombstones = match tombstones {
        Some(t) => Some(t),
        None => match engine::stored_refs(file)?.0 {
            TombstonesAt::Footer(b) => Some(b),
            // Only the keys matter here: rows of a tombstone object are looked up in the index.
            _ => None,
        },
    };
    engine::read_stored(file, tombstones, &schema, &tomb_schema, cx.rebuild.then_some(cx.job.config.timezone()))
}

/// The key index of a committed partition (its footer names it; a partition written before
/// indexes existed is read whole), given its stored file when the run already has it.
async fn partition_index(cx: &Context<'_>, dir: &str, stored: Option<&Bytes>) -> Result<Vec<u64>, String> {
    let out = &cx.job.output;
    let target = commit::target_path(out, dir);
    let kv_refs = match stored {
        Some(b) => parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(b.clone())
            .map(|r| sidecar::referenced(r.metadata().file_metadata().key_value_metadata()))
            .map_err(|e| e.to_string())?,
        None => match commit::committed_footer(out, &target).await.map_err(|e| e.to_string())? {
            Some(Some(md)) => sidecar::referenced(md.file_metadata().key_value_metadata()),
            Some(None) => return Err("not a readable Parquet file".into()),
            None => return Ok(Vec::new()),
        },
    };
    if let Some((_, r)) = kv_refs.iter().find(|(k, _)| *k == sidecar::Kind::Keys) {
        // An index is derived data: when it is gone, it is made again from the rows.
        let state = &cx.job.state;
        match commit::get(state, &state.child(&[&r.object])).await.map_err(|e| e.to_string())? {
            Some(b) => return sidecar::decode_keys(&b),
            None => tracing::warn!(object = %r.object, "a key index is missing; reading the partition instead"),
        }
    }
    // No index yet: from the rows and tombstones themselves.
    let file = match stored {
        Some(b) => b.clone(),
        None => commit::get(out, &target).await.map_err(|e| e.to_string())?.unwrap_or_default(),
    };
    let tombstones = match engine::stored_refs(&file).map_err(|e| e.to_string())?.0 {
        TombstonesAt::Object(r) => Some(fetch(cx, &r.object).await.map_err(|e| e.to_string())?),
        TombstonesAt::Footer(b) => Some(b),
        TombstonesAt::None => None,
    };
    let (rows, tombs) = read_state(cx, &file, tombstones).map_err(|e| e.to_string())?;
    engine::key_index(&rows, &tombs, &key_columns(cx, &rows))
}

/// A partition outside the batch that holds keys of it: leased now, its file read under the
/// lease.
async fn lease_extra(cx: &Context<'_>, dir: &str, date: NaiveDate) -> Result<Slot, PartitionError> {
    let out = &cx.job.output;
    let leases = cx.leases.ok_or_else(|| PartitionError::Other("no leases".into()))?;
    leases.acquire(dir, &cx.opts.stop).await?;
    let target = commit::target_path(out, dir);
    let meta = commit::head(out, &target).await?;
    let stored = commit::get(out, &target).await?;
    if let Some(b) = &stored {
        commit::holds_its_date(b, date, &out.display(&target))?;
    }
    let plan = PartitionPlan { date, dir: dir.to_string(), inputs: Vec::new(), seen: Seen { meta } };
    Ok(Slot {
        plan,
        started: Instant::now(),
        state: Ok(None),
        removals: HashSet::new(),
        stored,
        moved_in: 0,
        failed_keys: None,
    })
}

/// Fails the dates of the batch holding `candidates`, keys stored under `from`, a date of the
/// batch that failed: it writes nothing, so they cannot be merged beside it — an older version
/// would be let in beside the stored newer one (one key under two dates), a newer one would move
/// the key out of a partition that is not rewritten.
fn fail_beside(slots: &mut [Slot], candidates: &[(usize, usize)], from: NaiveDate) {
    // Each date's first such key, named, and how many there are.
    let mut named: BTreeMap<usize, (Option<String>, usize)> = BTreeMap::new();
    for &(s, i) in candidates {
        let e = named.entry(s).or_insert((None, 0));
        e.1 += 1;
        if e.0.is_none() {
            if let Ok(Some(d)) = &slots[s].state {
                e.0 = Some(render(d, d.keys[i].row));
            }
        }
    }
    for (s, (key, n)) in named {
        let keys = match (key, n) {
            (Some(k), 1) => format!("key {k} of this date is stored under {from}, which failed: it cannot"),
            (Some(k), n) => format!(
                "key {k} and {} other(s) of this date are stored under {from}, which failed: they cannot",
                n - 1
            ),
            (None, _) => format!("keys of this date are stored under {from}, which failed: they cannot"),
        };
        slots[s].fail(PartitionError::Other(format!("{keys} be checked against it, nothing is written for either")));
    }
}

/// A merge that moves keys between partitions is all or nothing: when one of them fails, every
/// partition connected to it by moves fails too, and those moves are dropped. `parts`: each
/// partition's date and result (its prepared state, or its computed file). True when it failed one.
fn abort_broken_moves<T>(parts: &mut [(NaiveDate, &mut Result<T, PartitionError>)], moves: &mut Vec<Move>) -> bool {
    if moves.is_empty() {
        return false;
    }
    let failed = first_failed_linked(parts, moves.iter().map(|m| (m.from, m.to)));
    if failed.iter().all(Option::is_none) {
        return false;
    }
    let dates: Vec<NaiveDate> = parts.iter().map(|p| p.0).collect();
    let mut any = false;
    for ((_, result), f) in parts.iter_mut().zip(failed) {
        if let Some(f) = f {
            **result = Err(PartitionError::Other(format!(
                "keys move between this date and {}, which failed: nothing is written for either",
                dates[f]
            )));
            any = true;
        }
    }
    let ok: BTreeMap<NaiveDate, bool> = parts.iter().map(|p| (p.0, p.1.is_ok())).collect();
    moves.retain(|m| ok.get(&m.from).copied().unwrap_or(false));
    any
}

/// The bytes of an object under the output.
async fn fetch(cx: &Context<'_>, rel: &str) -> Result<Bytes, PartitionError> {
    let state = &cx.job.state;
    let path = state.child(&[rel]);
    commit::get(state, &path).await?.ok_or_else(|| {
        PartitionError::Other(format!(
            "{} is missing (a partition's footer names it): the table is damaged, or was copied or moved \
             without its state location {} — a table and its state go together",
            state.display(&path),
            state.url
        ))
    })
}

/// `when` in the units of the version column (a date or timestamp), for the retention.
fn version_cutoff(record: &SchemaRef, version: &str, when: chrono::DateTime<chrono::Utc>) -> Option<i64> {
    let f = record.field_with_name(version).ok()?;
    Some(match f.data_type() {
        DataType::Date32 => crate::dates::to_days(when.date_naive()) as i64,
        DataType::Date64 => when.timestamp_millis(),
        DataType::Timestamp(TimeUnit::Second, _) => when.timestamp(),
        DataType::Timestamp(TimeUnit::Millisecond, _) => when.timestamp_millis(),
        DataType::Timestamp(TimeUnit::Microsecond, _) => when.timestamp_micros(),
        DataType::Timestamp(TimeUnit::Nanosecond, _) => when.timestamp_nanos_opt()?,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(day: u32) -> NaiveDate {
        NaiveDate::from_ymd_opt(2026, 11, day).unwrap()
    }

    /// Dates 1–2 and 2–3 share keys, date 4 shares none; date 1 fails with `first`.
    fn after(first: PartitionError) -> Vec<Result<(), PartitionError>> {
        let mut shared = Shared::default();
        shared.add(d(1), d(2), || "a".into());
        shared.add(d(3), d(2), || "b".into());
        let mut results = vec![Err(first), Ok(()), Ok(()), Ok(())];
        let mut parts: Vec<(NaiveDate, &mut Result<(), PartitionError>)> =
            results.iter_mut().enumerate().map(|(i, r)| (d(i as u32 + 1), r)).collect();
        fail_together(&mut parts, &shared, &mut Vec::new());
        results
    }

    #[test]
    fn dates_sharing_keys_fail_with_a_failed_one_directly_or_through_another() {
        let r = after(PartitionError::Other("bad".into()));
        let message = |i: usize| r[i].as_ref().err().map(|e| e.to_string()).unwrap_or_default();
        assert!(message(1).starts_with("key a is also under 2026-11-01 in this batch, which failed"), "{}", message(1));
        assert!(
            message(2).starts_with("key b is also under 2026-11-02 in this batch, which shares keys with 2026-11-01"),
            "{}",
            message(2)
        );
        assert!(r[3].is_ok(), "a date sharing no key commits");
    }

    #[test]
    fn a_stopped_date_stops_the_dates_sharing_its_keys() {
        let r = after(PartitionError::Stopped { signal: "SIGTERM" });
        for i in [1, 2] {
            assert!(matches!(r[i], Err(PartitionError::Stopped { signal: "SIGTERM" })), "{:?}", r[i]);
        }
        assert!(r[3].is_ok());
    }
}
