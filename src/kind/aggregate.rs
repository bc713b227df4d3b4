//! `kind = "aggregate"`: a daily table, the job's SQL query over each date's prepared rows
//! (docs/design.md §2; the engine is [`crate::engine`]).
//!
//! Partitions stream through `--concurrency` at a time, each read → prepared → queried →
//! encoded (a small file); all are computed before any is committed, so the run-wide check for
//! keys seen under two dates ([`crate::crossdate`]) can fail both partitions before either is
//! written. A partition depends on its input (and lookup tables) alone: `--skip-unchanged` and
//! `verify` apply.

use std::sync::Arc;
use std::time::Instant;

use arrow::array::RecordBatch;
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use futures::future::BoxFuture;
use futures::StreamExt;
use tokio::sync::OwnedSemaphorePermit;

use super::{Body, Computed, Context, Kind, Outcome, PartitionFile, Planned};
use crate::commit;
use crate::config::{AggregateSection, ConfigError, JobConfig};
use crate::crossdate::{Hashes, KeyTypes};
use crate::engine::{self, Lookup};
use crate::error::{InputError, Location, PartitionError};
use crate::lineage::Lineage;
use crate::plan::PartitionPlan;
use crate::prepare::{self, PrepareStats, Prepared};
use crate::read;
use crate::read::Table;
use crate::run::Event;
use crate::spill;

/// A daily table.
#[derive(Debug)]
pub struct Aggregate {
    section: AggregateSection,
}

impl Aggregate {
    pub fn new(cfg: &JobConfig) -> Result<Self, ConfigError> {
        let bad =
            |key: &str, message: String| ConfigError::Invalid { path: cfg.origin.clone(), key: key.into(), message };
        let section = cfg
            .aggregate
            .clone()
            .ok_or_else(|| bad("aggregate", "kind = \"aggregate\" needs an [aggregate] section".into()))?;
        // The query's syntax, as the config is loaded (it is planned against the input later).
        if let Some(sql) = &section.sql {
            engine::parse(sql).map_err(|m| bad("aggregate.sql", m))?;
        }
        Ok(Aggregate { section })
    }

    fn key(&self) -> &'static str {
        if self.section.sql.is_some() {
            "aggregate.sql"
        } else {
            "aggregate.measures"
        }
    }

    /// The config key of a query that did not plan, and the engine's reason. The shorthand's
    /// SQL is lakeswap's, not the user's: its measures are planned one by one to name the one
    /// (its `where`, when it has one) the engine refused, without a position in SQL the user
    /// never wrote.
    async fn blame(
        &self,
        message: String,
        events: &SchemaRef,
        cfg: &JobConfig,
        lookups: &[Lookup],
    ) -> (String, String) {
        if self.section.sql.is_some() {
            return (self.key().to_string(), message);
        }
        let plans = |section: AggregateSection| async move {
            let q = engine::query_of(&section, events, cfg.timezone()).map_err(|(_, why)| why)?;
            engine::plan(&q, events, lookups, &cfg.partition.column).await.map(|_| ())
        };
        if !self.section.group_by.is_empty() {
            if let Err(why) = plans(AggregateSection { measures: Vec::new(), ..self.section.clone() }).await {
                return ("aggregate.group_by".into(), engine::without_position(&why));
            }
        }
        for (i, m) in self.section.measures.iter().enumerate() {
            let Err(why) = plans(AggregateSection { measures: vec![m.clone()], ..self.section.clone() }).await else {
                continue;
            };
            // Its `where` when the measure plans without it.
            let unfiltered = crate::config::Measure { filter: None, ..m.clone() };
            let key = match &m.filter {
                Some(crate::config::Where::Sql(_))
                    if plans(AggregateSection { measures: vec![unfiltered], ..self.section.clone() }).await.is_ok() =>
                {
                    format!("aggregate.measures[{i}].where")
                }
                _ => format!("aggregate.measures[{i}]"),
            };
            return (key, engine::without_position(&why));
        }
        (self.key().to_string(), engine::without_position(&message))
    }
}

/// The columns of `events` for a record schema: the partition column (a date) included, and
/// every zoned timestamp in the job's zone `tz` (the same instants), so that `extract(hour …)`,
/// `date_trunc`, `CAST(… AS DATE)` and timestamp literals without a zone read the clock of the
/// zone that dates the partitions, whatever zone the objects were written in.
pub fn events_schema(record: &Schema, partition_column: &str, tz: chrono_tz::Tz) -> SchemaRef {
    let mut fields: Vec<Field> = record
        .fields()
        .iter()
        .map(|f| f.as_ref().clone().with_nullable(true).with_data_type(engine::in_job_zone(f.data_type(), tz)))
        .collect();
    if record.field_with_name(partition_column).is_err() {
        fields.push(Field::new(partition_column, DataType::Date32, true));
    }
    Arc::new(Schema::new(fields))
}

impl Kind for Aggregate {
    fn name(&self) -> &'static str {
        "aggregate"
    }

    fn required_columns(&self) -> Vec<String> {
        let mut v: Vec<String> = self.section.group_by.clone();
        for m in &self.section.measures {
            v.extend(m.column.iter().cloned());
            if let Some(crate::config::Where::Values(cols)) = &m.filter {
                v.extend(cols.keys().cloned());
            }
        }
        v
    }

    fn output_schema<'a>(
        &'a self,
        cfg: &'a JobConfig,
        record: &'a SchemaRef,
        lookups: &'a [Lookup],
    ) -> BoxFuture<'a, Planned> {
        Box::pin(async move {
            let events = events_schema(record, &cfg.partition.column, cfg.timezone());
            let query = engine::query_of(&self.section, &events, cfg.timezone())?;
            let (schema, text, used) = match engine::plan(&query, &events, lookups, &cfg.partition.column).await {
                Ok(planned) => planned,
                Err(m) => return Err(self.blame(m, &events, cfg, lookups).await),
            };
            // The input columns the query reads (not the partition column a folder gives).
            let used = used.into_iter().filter(|c| record.field_with_name(c).is_ok()).collect();
            Ok((schema, Some(text), used))
        })
    }

    fn needs_dates(&self) -> bool {
        true
    }

    fn output_from_input_alone(&self) -> bool {
        true
    }

    fn compute<'a>(&'a self, cx: &'a Context<'a>) -> BoxFuture<'a, Computed> {
        Box::pin(async move {
            let mut done: Vec<(Outcome, Hashes, KeyTypes)> = futures::stream::iter(cx.plan.partitions.iter().cloned())
                .map(|p| async move {
                    let t = Instant::now();
                    let result = cx.opts.stop.unless(self.partition(cx, &p)).await;
                    let result = result
                        .and_then(|(f, h, t)| Ok((cx.keep(&p.dir, f)?, crate::crossdate::keep(cx, &p.dir, h)?, t)));
                    let (result, hashes, types) = match result {
                        Ok((f, h, t)) => (Ok(f), h, t),
                        Err(e) => (Err(e), Hashes::Memory(Vec::new()), KeyTypes::default()),
                    };
                    let input_rows = result.as_ref().map_or(0, |f| f.stats.input_rows);
                    cx.opts.observer.event(&Event::Computed { date: p.date, input_rows, failed: result.is_err() });
                    (Outcome { plan: p, result, seconds: t.elapsed().as_secs_f64() }, hashes, types)
                })
                .buffer_unordered(cx.opts.concurrency.max(1))
                .collect()
                .await;
            done.sort_by_key(|(o, _, _)| o.plan.date);
            // A key seen under two dates fails both partitions.
            let mut checked = std::collections::BTreeMap::new();
            if !cx.job.config.is_whole_record_key() {
                let guards = match done.iter().any(|(o, _, _)| o.result.is_ok()) {
                    true => crate::crossdate::guards(cx, &cx.plan.others).await,
                    false => Vec::new(),
                };
                let guarded: Vec<PartitionPlan> = guards.iter().flatten().map(|g| g.plan.clone()).collect();
                crate::crossdate::check(cx, &mut done, guards).await;
                // A list that could not be read whole failed the dates computed: none is
                // recorded as checked.
                let config = cx.job.config.fingerprint();
                let computed = done.iter().filter(|(o, _, _)| o.result.is_ok()).map(|(o, _, _)| &o.plan);
                for p in computed.chain(&guarded) {
                    checked.insert(p.date, crate::crossdate::keys_fingerprint(cx.job, &config, cx.plan, p));
                }
                if checked.len() < 2 {
                    checked.clear();
                }
            }
            Computed { outcomes: done.into_iter().map(|(o, _, _)| o).collect(), moves: Vec::new(), checked }
        })
    }
}

/// Whether a date without input rows holds a partition file lakeswap committed for it: a
/// table lakeswap writes whose date was emptied (a merge whose keys there all moved or were
/// deleted). That input has arrived, and holds nothing: the date is computed over no rows
/// rather than refused as missing (which kept the rows it had before, numbers of keys gone).
async fn emptied_by_lakeswap(cx: &Context<'_>, p: &PartitionPlan) -> bool {
    if cx.job.config.input.format != crate::config::Format::Parquet {
        return false;
    }
    // A file of no rows is a few KiB: larger ones are not read for this.
    for m in p.inputs.iter().filter(|m| m.size < 1 << 20) {
        if let Ok(Some(bytes)) = commit::get(&cx.job.input, &m.location).await {
            if commit::lineage_of(&bytes).is_some_and(|l| l.date.is_none_or(|d| d == p.date)) {
                return true;
            }
        }
    }
    false
}

/// Which rows of each chunk of a prepared date are winners.
fn winner_masks(p: &Prepared) -> Vec<arrow::array::BooleanArray> {
    let t: &Table = &p.table;
    let mut winners = p.winners.iter().peekable();
    let mut out = Vec::with_capacity(t.chunks().len());
    for (c, chunk) in t.chunks().iter().enumerate() {
        let base = c << crate::read::CHUNK_BITS;
        let mut keep = arrow::array::BooleanBufferBuilder::new(chunk.num_rows());
        keep.append_n(chunk.num_rows(), false);
        while let Some(&&w) = winners.peek() {
            let w = w as usize;
            if w >= base + chunk.num_rows() {
                break;
            }
            keep.set_bit(w - base, true);
            winners.next();
        }
        out.push(arrow::array::BooleanArray::new(keep.finish(), None));
    }
    out
}

/// A date's rows after prepare, on their way into the engine.
struct Cleaned {
    source: engine::Source,
    /// The record schema (the columns of the input).
    record: SchemaRef,
    stats: PrepareStats,
    hashes: Vec<u64>,
    quarantined: Option<RecordBatch>,
    spilled_bytes: u64,
    read_s: f64,
    prepare_s: f64,
}

impl Aggregate {
    /// One partition: read, prepare, query, encode — in memory, or spilled to disk bucket by
    /// bucket when its estimated size is over the run's budget ([`crate::spill`]). Also the
    /// sorted hashes of its keys, and the key columns' types they were taken over.
    async fn partition(
        &self,
        cx: &Context<'_>,
        p: &PartitionPlan,
    ) -> Result<(PartitionFile, Vec<u64>, KeyTypes), PartitionError> {
        // A flat input is read once for the run (its objects serve many dates): not reserved
        // per date.
        let estimate = match cx.flat {
            Some(_) => 0,
            None => spill::estimate(cx.plan.decoder.format, &p.inputs),
        };
        // Larger partitions wait for room in the budget: fewer run at once.
        let held = cx.spill.reserve(estimate).await;
        let (cleaned, spilled, _held) = match (cx.flat, estimate > cx.spill.limit()) {
            (Some(_), _) => (self.in_memory(cx, p, None).await?, false, held),
            (None, true) => (self.spilled_or_removed(cx, p, estimate).await?, true, held),
            (None, false) => self.metered(cx, p, held).await?,
        };
        let Cleaned { source, record, stats, hashes, quarantined, spilled_bytes, read_s, prepare_s } = cleaned;
        let key_types = KeyTypes::of(&record, &cx.job.config.identity.key);
        let phase = Instant::now();
        let column = &cx.job.config.partition.column;
        let events = events_schema(&record, column, cx.job.config.timezone());
        // Compiled for this date's own types: a shorthand sum keeps the date's decimal scale
        // (a date whose scale differs then fails the output check rather than round).
        let query = engine::query_of(&self.section, &events, cx.job.config.timezone())
            .map_err(|(_, m)| PartitionError::Query { message: m })?;
        // The query was checked against the types the run was planned with; a date whose
        // objects read a column it uses as another type is checked against its own (a cast that
        // would cut a fraction, text met with numbers), as a run of that date alone would be.
        let differences = query_input_differences(cx.plan, &record);
        if !differences.is_empty() {
            engine::plan(&query, &events, &cx.plan.lookups, column)
                .await
                .map_err(|m| PartitionError::Query { message: format!("{m}{differences}") })?;
        }
        // A spilled partition's query runs within half the budget, spilling through the
        // engine where it can; an in-memory one as before, unbounded.
        let memory = match spilled {
            true => Some(engine::Memory {
                bytes: (cx.spill.limit() / 2).max(64 << 20) as usize,
                spill_dir: cx.spill.folder("engine")?,
            }),
            false => None,
        };
        let rows = engine::Rows { source, date: p.date, events };
        let batch = engine::execute(&query, rows, &cx.plan.lookups, memory.as_ref(), cx.threads()).await;
        if spilled {
            cx.spill.remove(&p.dir);
        }
        let batch = batch.map_err(|e| match e {
            PartitionError::Query { message } => {
                PartitionError::Query { message: format!("{message}{}", query_input_differences(cx.plan, &record)) }
            }
            e => e,
        })?;
        let compute_s = phase.elapsed().as_secs_f64();
        let schema = batch.schema();
        cx.check_output(&schema).map_err(|e| match e {
            PartitionError::OutputSchema { why } => {
                PartitionError::OutputSchema { why: format!("{why}{}", query_input_differences(cx.plan, &record)) }
            }
            e => e,
        })?;
        let inputs = cx.plan.lineage_inputs(p, &cx.job.input);
        let lineage = Lineage::new(cx.job.config.fingerprint(), p.date, inputs, stats, batch.num_rows() as u64);
        let bytes = commit::encode_sealed(&batch, &lineage)?;
        let quarantine = match quarantined {
            Some(rows) => Some(commit::encode(&rows, &lineage, &[])?),
            None => None,
        };
        tracing::debug!(date = %p.date, read_s, prepare_s, compute_s, spilled_bytes, peak_mib = spill::peak_mib(), "computed partition");
        let file = PartitionFile {
            body: Body::Memory(bytes),
            rows: batch.num_rows(),
            schema: schema.clone() as SchemaRef,
            stats,
            merge: None,
            quarantine,
            sidecars: Vec::new(),
            replaces: Vec::new(),
            skip: false,
            spilled_bytes,
            seen_digest: None,
        };
        Ok((file, hashes, key_types))
    }

    /// Reads a date in memory, counting what it decodes to: a date that decodes past what it
    /// holds of the budget, when the budget has no room for more, is read again once it has
    /// room for what it was found to take (and a quarter more); one that would take more than
    /// the whole budget, or outgrows its room again, is spilled after all. Then whether it was
    /// spilled, and what it holds of the budget.
    async fn metered(
        &self,
        cx: &Context<'_>,
        p: &PartitionPlan,
        held: OwnedSemaphorePermit,
    ) -> Result<(Cleaned, bool, OwnedSemaphorePermit), PartitionError> {
        let stored = spill::total_size(&p.inputs);
        let mut held = held;
        // The time of reads given up, counted in the read time of the one kept.
        let mut given_up = 0.0;
        for attempt in 1.. {
            let started = Instant::now();
            let meter = Arc::new(cx.spill.meter(held, stored));
            let read = self.in_memory(cx, p, Some(meter.clone())).await;
            if !meter.is_over() {
                let mut cleaned = read?;
                cleaned.read_s += given_up;
                tracing::debug!(date = %p.date, stored, took = meter.estimate(), "read in memory");
                return Ok((cleaned, false, meter.held().expect("a meter holds its reservation until taken")));
            }
            drop(read);
            given_up += started.elapsed().as_secs_f64();
            let estimate = meter.estimate();
            // Given back before waiting for more, so that no two partitions wait holding parts
            // of the budget.
            drop(meter.held());
            held = cx.spill.reserve(estimate + estimate / 4).await;
            if estimate > cx.spill.limit() || attempt == 2 {
                tracing::debug!(date = %p.date, estimate, "decodes past the memory budget: spilled");
                let mut cleaned = self.spilled_or_removed(cx, p, estimate).await?;
                cleaned.read_s += given_up;
                return Ok((cleaned, true, held));
            }
            tracing::debug!(date = %p.date, estimate, "decodes past its estimate: read again");
        }
        unreachable!("the second attempt returns")
    }

    /// [`Aggregate::spilled`], its spill files removed when it fails.
    async fn spilled_or_removed(
        &self,
        cx: &Context<'_>,
        p: &PartitionPlan,
        estimate: u64,
    ) -> Result<Cleaned, PartitionError> {
        let cleaned = self.spilled(cx, p, estimate).await;
        if cleaned.is_err() {
            cx.spill.remove(&p.dir);
        }
        cleaned
    }

    /// Reads and prepares a date in memory, its rows counted by `meter` when there is one;
    /// `events` is a view of the kept rows of the prepared table's chunks.
    async fn in_memory(
        &self,
        cx: &Context<'_>,
        p: &PartitionPlan,
        meter: Option<Arc<spill::Meter>>,
    ) -> Result<Cleaned, PartitionError> {
        let started = Instant::now();
        let table = cx.table_within(p, meter).await?;
        let read_s = started.elapsed().as_secs_f64();
        if table.num_rows() == 0 && !cx.opts.allow_empty && !emptied_by_lakeswap(cx, p).await {
            return Err(PartitionError::MissingInput { date: p.date });
        }
        if table.num_rows() == 0 && cx.plan.record_schema.is_none() {
            return Err(no_types(cx));
        }
        let id = Arc::new(cx.identity(&table));
        let phase = Instant::now();
        let (prepared, masks) = tokio::task::spawn_blocking(move || {
            let prepared = prepare::prepare(table, &id)?;
            let masks = winner_masks(&prepared);
            Ok::<_, PartitionError>((prepared, masks))
        })
        .await
        .map_err(|e| PartitionError::Other(format!("prepare task failed: {e}")))??;
        let prepare_s = phase.elapsed().as_secs_f64();
        let quarantined = if prepared.quarantined.is_empty() {
            None
        } else {
            Some(prepared.table.take(&prepared.quarantined).map_err(|e| PartitionError::Other(e.to_string()))?)
        };
        let record = prepared.table.schema().clone();
        let source = engine::Source::Chunks { chunks: prepared.table.chunks().to_vec(), keep: masks };
        Ok(Cleaned {
            source,
            record,
            stats: prepared.stats,
            hashes: prepared.key_hashes,
            quarantined,
            spilled_bytes: 0,
            read_s,
            prepare_s,
        })
    }

    /// Reads a date too large for the budget into key-hash buckets on disk, prepares them one
    /// at a time, and streams the winners back in input order (see [`crate::spill`]).
    async fn spilled(&self, cx: &Context<'_>, p: &PartitionPlan, estimate: u64) -> Result<Cleaned, PartitionError> {
        let started = Instant::now();
        let (input, decoder, date) = (&cx.job.input, &cx.plan.decoder, p.date);
        // The date's record schema: its objects' schemas unified, as the in-memory path
        // unifies those of its pieces.
        let mut schemas = Vec::with_capacity(p.inputs.len());
        for m in &p.inputs {
            let s = match crate::plan::object_schema(decoder, input, m).await {
                Ok(s) => s,
                // Named as the in-memory path names it, where that fits the budget.
                Err(crate::Error::Input(e)) => {
                    return Err(in_memory_error(input, decoder, Some(m), date, e, cx.spill).await)
                }
                Err(e) => return Err(PartitionError::Other(e.to_string())),
            };
            schemas.push((input.display(&m.location), s));
        }
        let refs: Vec<(&str, &arrow::datatypes::Schema)> =
            schemas.iter().map(|(o, s)| (o.as_str(), s.as_ref())).collect();
        let record = read::unified(&refs, decoder)?;
        let objects: Vec<Arc<str>> = schemas.iter().map(|(o, _)| Arc::from(o.as_str())).collect();
        let whole_record = cx.job.config.is_whole_record_key();
        let key: Vec<String> = if whole_record {
            record.fields().iter().map(|f| f.name().clone()).collect()
        } else {
            cx.job.config.identity.key.clone()
        };

        // Scatter: every object's rows, by a hash of their key, into the buckets' files.
        let limit = cx.spill.limit();
        let buckets = spill::buckets_for(estimate, limit);
        let dir = cx.spill.folder(&p.dir)?;
        let wide = spill::spill_schema(&record);
        // Rows gathered per bucket before a write, and per batch of a winners' file (the merge
        // back into input order holds one batch of each): the buffers together stay within an
        // eighth of the budget, at the widest rows decoded so far (~100 bytes until the first).
        let rows_per_flush = |row_bytes: u64| ((limit / 8 / row_bytes.max(1)) as usize / buckets).clamp(1, 1 << 16);
        let mut row_bytes = 100u64;
        let mut flush_rows = rows_per_flush(row_bytes);
        let mut writers = (0..buckets)
            .map(|b| spill::Writer::create(dir.join(format!("in-{b:05}.spill")), wide.clone(), flush_rows))
            .collect::<Result<Vec<_>, _>>()?;
        let mut seq = 0u64;
        let mut rows_in = 0u64;
        // Objects are decoded a part at a time, the next part while one is scattered: a part of
        // at most 64 Ki rows and a sixty-fourth of the budget.
        let cut = read::Parts { rows: 1 << 16, bytes: Some(limit / 64) };
        let parts = read::decoded_parts(input.clone(), decoder.clone(), p.inputs.clone(), vec![date], Some(date), cut);
        let mut stream = std::pin::pin!(parts);
        let mut next = stream.next().await;
        while let Some((object, d)) = next {
            let mut d = match d.and_then(|mut d| d.bad.remove(&date).map_or(Ok(d), Err)) {
                Ok(d) => d,
                Err(e) => return Err(in_memory_error(input, decoder, p.inputs.get(object), date, e, cx.spill).await),
            };
            let (record, wide, key, tz) = (record.clone(), wide.clone(), key.clone(), decoder.tz);
            let version = decoder.version.clone();
            let object = object as u32;
            let pieces = std::mem::take(&mut d.pieces);
            let rows: usize = pieces.iter().map(|p| p.batch.num_rows()).sum();
            let bytes: u64 = pieces.iter().map(|p| read::rows_bytes(&p.batch)).sum();
            if let Some(width) = bytes.checked_div(rows as u64) {
                row_bytes = row_bytes.max(width);
                flush_rows = rows_per_flush(row_bytes);
                writers.iter_mut().for_each(|w| w.flush_rows = flush_rows);
            }
            let scattered = tokio::task::spawn_blocking(move || {
                let t0 = Instant::now();
                // Each bucket's rows of the whole object, gathered straight from its pieces.
                let fail = |e: arrow::error::ArrowError| PartitionError::Other(format!("spill: {e}"));
                let mut origins = Vec::with_capacity(pieces.len());
                let mut picks: Vec<Vec<(usize, usize)>> = vec![Vec::new(); buckets];
                for piece in pieces {
                    let piece = read::conform(piece, &record, tz, version.as_deref())?;
                    let n = piece.batch.num_rows();
                    let cols = key
                        .iter()
                        .map(|c| piece.batch.column_by_name(c).cloned())
                        .collect::<Option<Vec<_>>>()
                        .ok_or_else(|| {
                        PartitionError::Other(format!("spill: no key column in {}", piece.object))
                    })?;
                    // A null key fails the date at its first row in input order, as in memory
                    // (the buckets would find it in another order).
                    let null_key = (!whole_record)
                        .then(|| {
                            key.iter()
                                .zip(&cols)
                                .filter(|(_, c)| c.null_count() > 0)
                                .filter_map(|(k, c)| Some(((0..n).find(|&i| c.is_null(i))?, k)))
                                .min()
                        })
                        .flatten();
                    if let Some((i, k)) = null_key {
                        let at = Location {
                            object: piece.object.to_string(),
                            row: piece.object_rows.get(i),
                            line: piece.lines.as_ref().and_then(|l| l.get(i).copied()),
                            column: Some(k.clone()),
                        };
                        return Err(InputError::bad(at, prepare::NULL_KEY).into());
                    }
                    let of = spill::buckets_of(&cols, buckets).map_err(PartitionError::Other)?;
                    let at = origins.len();
                    for (i, &b) in of.iter().enumerate() {
                        picks[b as usize].push((at, i));
                    }
                    let lines = piece.lines.as_deref();
                    origins.push(
                        spill::with_origin(&wide, &piece.batch, seq, object, &piece.object_rows, lines)
                            .map_err(fail)?,
                    );
                    seq += n as u64;
                }
                // Gathered, encoded and written by two threads, each for half of the buckets.
                let refs: Vec<&RecordBatch> = origins.iter().collect();
                let half = buckets.div_ceil(2);
                let (low, high) = writers.split_at_mut(half);
                let write = |ws: &mut [spill::Writer], picks: &[Vec<(usize, usize)>]| {
                    for (w, idx) in ws.iter_mut().zip(picks) {
                        if !idx.is_empty() {
                            w.write(arrow::compute::interleave_record_batch(&refs, idx).map_err(fail)?)?;
                        }
                    }
                    Ok::<_, PartitionError>(())
                };
                std::thread::scope(|sc| {
                    let other = sc.spawn(|| write(high, &picks[half..]));
                    let mine = write(low, &picks[..half]);
                    other.join().unwrap_or_else(|e| std::panic::resume_unwind(e)).and(mine)
                })?;
                tracing::trace!(scatter_s = t0.elapsed().as_secs_f64(), "scattered a part");
                Ok::<_, PartitionError>((writers, seq))
            });
            let (scattered, following) = futures::join!(scattered, stream.next());
            (writers, seq) = scattered.map_err(|e| PartitionError::Other(format!("spill task failed: {e}")))??;
            next = following;
            rows_in = seq;
        }
        if rows_in == 0 && !cx.opts.allow_empty && !emptied_by_lakeswap(cx, p).await {
            return Err(PartitionError::MissingInput { date });
        }
        if rows_in == 0 && cx.plan.record_schema.is_none() {
            return Err(no_types(cx));
        }
        let mut spilled_bytes = 0u64;
        let mut inputs = Vec::with_capacity(buckets);
        for w in writers {
            let (path, size) = w.finish()?;
            spilled_bytes += size;
            inputs.push(path);
        }
        let read_s = started.elapsed().as_secs_f64();
        tracing::debug!(%date, buckets, read_s, spilled_bytes, peak_mib = spill::peak_mib(), "scattered");

        // Prepare each bucket; its winners (and set-aside rows) keep their input order.
        let phase = Instant::now();
        let mut stats = PrepareStats::default();
        let mut hashes: Vec<u64> = Vec::new();
        let mut conflicts: Vec<crate::error::ConflictKey> = Vec::new();
        let mut conflicting = 0usize;
        let mut winners = Vec::with_capacity(buckets);
        let mut quarantined: Vec<RecordBatch> = Vec::new();
        // Two buckets at a time (each about a quarter of the budget), a thread each.
        let parallel = 2;
        let mut id = cx.identity(&Table::empty(record.clone()));
        id.key = key.clone();
        id.threads = 1;
        let shared = Arc::new(spill::Buckets {
            record: record.clone(),
            narrow: spill::seq_schema(&record),
            objects,
            date,
            id,
            batch_rows: flush_rows,
        });
        let observer = &cx.opts.observer;
        let mut prepared = futures::stream::iter(inputs.iter().cloned().enumerate())
            .map(|(b, path)| {
                observer.event(&Event::Spilling { date, bucket: b + 1, buckets });
                let shared = shared.clone();
                let out = dir.join(format!("win-{b:05}.spill"));
                async move {
                    tokio::task::spawn_blocking(move || {
                        let done = spill::prepare_bucket(&path, &out, &shared);
                        let _ = std::fs::remove_file(&path);
                        done
                    })
                    .await
                    .map_err(|e| PartitionError::Other(format!("prepare task failed: {e}")))?
                }
            })
            .buffered(parallel);
        while let Some(done) = prepared.next().await {
            match done? {
                spill::Bucket::Conflict { keys, total } => {
                    conflicts.extend(keys);
                    conflicting += total;
                }
                spill::Bucket::Done { stats: s, hashes: h, winners: (path, size), quarantined: q } => {
                    add_stats(&mut stats, &s);
                    hashes.extend(h);
                    spilled_bytes += size;
                    winners.push(path);
                    quarantined.extend(q);
                }
            }
        }
        drop(prepared);
        if conflicting > 0 {
            conflicts.sort_by(|a, b| a.key.cmp(&b.key));
            conflicts.truncate(5);
            return Err(PartitionError::Conflict { keys: conflicts, total: conflicting });
        }
        hashes.sort_unstable();
        hashes.dedup();
        let quarantined = spill::in_seq_order(&record, quarantined)?;
        let prepare_s = phase.elapsed().as_secs_f64();
        tracing::debug!(%date, prepare_s, peak_mib = spill::peak_mib(), "prepared the buckets");
        // Batches of at most 8,192 rows and a sixty-fourth of the budget (the merge holds one of
        // each file besides).
        let batch_rows = ((limit / 64 / row_bytes.max(1)) as usize).clamp(1, 8192);
        let source = engine::Source::Spilled { record: record.clone(), files: winners, batch_rows };
        Ok(Cleaned { source, record, stats, hashes, quarantined, spilled_bytes, read_s, prepare_s })
    }
}

/// The error a bad object fails its date with on the in-memory path: the object read again as
/// that path reads it, under the same budget (which of its errors comes first can depend on
/// how it is cut into parts); `found` when that finds none. Read again only within a quarter
/// of the budget, by its estimate and then by what it decodes to (a meter of its own, of at
/// least 1 MiB, counting rows as a date read in memory counts them): past that, and for an
/// NDJSON object read as pieces of lines, the error is the first fault its parts found, as
/// precisely named (of several faults, the in-memory path may name another first). Which
/// error a date names can then depend on whether it was spilled.
async fn in_memory_error(
    input: &crate::store::StoreLocation,
    decoder: &read::Decoder,
    object: Option<&object_store::ObjectMeta>,
    date: chrono::NaiveDate,
    found: crate::error::InputError,
    area: &spill::Area,
) -> PartitionError {
    let Some(m) = object else { return found.into() };
    // A read the store failed is not the object's: reading it again whole would name nothing
    // new, and would hold an object the spilled path reads in pieces.
    if matches!(found, crate::error::InputError::Unreadable { .. }) {
        return found.into();
    }
    let within = area.limit() / 4;
    let cut = read::Parts { rows: 1 << 16, bytes: Some(area.limit() / 64) };
    if decoder.streams(m.location.as_ref(), m.size, cut)
        || spill::estimate(decoder.format, std::slice::from_ref(m)) > within
    {
        return found.into();
    }
    let meter = Arc::new(area.meter_within(within, m.size));
    let again = read::read_date_within(input, decoder, std::slice::from_ref(m), date, Some(date), Some(meter.clone()));
    match again.await {
        Err(_) if meter.is_over() => found.into(),
        Err(e) => e,
        Ok(_) => found.into(),
    }
}

/// Adds one bucket's counts to a partition's.
fn add_stats(to: &mut PrepareStats, s: &PrepareStats) {
    to.input_rows += s.input_rows;
    to.duplicates += s.duplicates;
    to.superseded += s.superseded;
    to.deleted += s.deleted;
    to.conflicting_keys += s.conflicting_keys;
    to.quarantined_rows += s.quarantined_rows;
    to.keys += s.keys;
}

/// The input columns the query reads whose type on a date is not the one the run was planned
/// with: where a date's output type comes from. A column with no value in any of the date's
/// objects reads as text.
fn query_input_differences(plan: &crate::plan::Plan, record: &SchemaRef) -> String {
    let Some(planned) = &plan.record_schema else { return String::new() };
    let differ: Vec<String> = plan
        .query_columns
        .iter()
        .filter_map(|c| {
            let (here, there) = (record.field_with_name(c).ok()?, planned.field_with_name(c).ok()?);
            (here.data_type() != there.data_type()).then(|| {
                format!(
                    "`{c}` is {} in this date's objects, {} where the run was planned",
                    here.data_type(),
                    there.data_type()
                )
            })
        })
        .collect();
    match differ.is_empty() {
        true => String::new(),
        false => format!(
            " (of the input columns the query reads, {}; a column with no value in any of a date's objects \
             reads as text: declare its type in [input.schema] to read it so on every date)",
            differ.join(", ")
        ),
    }
}

/// A date without rows, in a run whose input has no row at all (no object, or text objects
/// holding a header alone): no column has a type, so not even a zero-row file can be written.
/// Input not arrived yet, worth a retry once it has.
fn no_types(cx: &Context<'_>) -> PartitionError {
    PartitionError::Input(crate::error::InputError::unreadable(
        crate::error::Location::object(cx.job.input.url.clone()),
        "no object of the input has a row, so its columns have no types and not even a zero-row file \
         (--allow-empty) can be written; run again once input with rows has arrived",
    ))
}
