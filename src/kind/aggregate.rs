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

use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use futures::future::BoxFuture;
use futures::StreamExt;

use super::{Computed, Context, Kind, Outcome, PartitionFile, Planned};
use crate::commit;
use crate::config::{AggregateSection, ConfigError, JobConfig};
use crate::engine::{self, Lookup};
use crate::error::PartitionError;
use crate::lineage::Lineage;
use crate::plan::PartitionPlan;
use crate::prepare::{self, Prepared};
use crate::read::Table;
use crate::run::Event;

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
}

/// The columns of `events` for a record schema: the partition column (a date) included.
pub fn events_schema(record: &Schema, partition_column: &str) -> SchemaRef {
    let mut fields: Vec<Field> = record.fields().iter().map(|f| f.as_ref().clone().with_nullable(true)).collect();
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
            let events = events_schema(record, &cfg.partition.column);
            let query = engine::query_of(&self.section, &events, cfg.timezone())?;
            let (schema, text) = engine::plan(&query, &events, lookups, &cfg.partition.column)
                .await
                .map_err(|m| (self.key().to_string(), m))?;
            Ok((schema, Some(text)))
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
            let mut done: Vec<(Outcome, Vec<u64>)> = futures::stream::iter(cx.plan.partitions.iter().cloned())
                .map(|p| async move {
                    let t = Instant::now();
                    let result = cx.opts.stop.unless(self.partition(cx, &p)).await;
                    let (result, hashes) = match result {
                        Ok((f, h)) => (Ok(f), h),
                        Err(e) => (Err(e), Vec::new()),
                    };
                    let input_rows = result.as_ref().map_or(0, |f| f.stats.input_rows);
                    cx.opts.observer.event(&Event::Computed { date: p.date, input_rows, failed: result.is_err() });
                    (Outcome { plan: p, result, seconds: t.elapsed().as_secs_f64() }, hashes)
                })
                .buffer_unordered(cx.opts.concurrency.max(1))
                .collect()
                .await;
            done.sort_by_key(|(o, _)| o.plan.date);
            // A key seen under two dates fails both partitions.
            if !cx.job.config.is_whole_record_key() {
                crate::crossdate::check(cx, &mut done).await;
            }
            Computed { outcomes: done.into_iter().map(|(o, _)| o).collect(), moves: Vec::new() }
        })
    }
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

impl Aggregate {
    /// One partition: read, prepare, query, encode. Also the sorted hashes of its keys.
    async fn partition(
        &self,
        cx: &Context<'_>,
        p: &PartitionPlan,
    ) -> Result<(PartitionFile, Vec<u64>), PartitionError> {
        let started = Instant::now();
        let table = cx.table(p).await?;
        let read_s = started.elapsed().as_secs_f64();
        if table.num_rows() == 0 && !cx.opts.allow_empty {
            return Err(PartitionError::MissingInput { date: p.date });
        }
        let id = Arc::new(cx.identity(&table));
        let fingerprint = cx.job.config.fingerprint();
        let inputs = cx.plan.lineage_inputs(p, &cx.job.input);
        let column = cx.job.config.partition.column.clone();
        let date = p.date;
        let phase = Instant::now();
        // Prepare; `events` is a view of the kept rows of the prepared table's chunks.
        let (prepared, masks) = tokio::task::spawn_blocking(move || {
            let prepared = prepare::prepare(table, &id)?;
            let masks = winner_masks(&prepared);
            Ok::<_, PartitionError>((prepared, masks))
        })
        .await
        .map_err(|e| PartitionError::Other(format!("prepare task failed: {e}")))??;
        let prepare_s = phase.elapsed().as_secs_f64();
        let events = events_schema(prepared.table.schema(), &column);
        let quarantined = if prepared.quarantined.is_empty() {
            None
        } else {
            Some(prepared.table.take(&prepared.quarantined).map_err(|e| PartitionError::Other(e.to_string()))?)
        };
        let (stats, hashes) = (prepared.stats, prepared.key_hashes);
        // Compiled for this date's own types: a shorthand sum keeps the date's decimal scale
        // (a date whose scale differs then fails the output check rather than round).
        let query = engine::query_of(&self.section, &events, cx.job.config.timezone())
            .map_err(|(_, m)| PartitionError::Query { message: m })?;
        let rows = engine::Rows { chunks: prepared.table.chunks().to_vec(), keep: masks, date, events };
        drop(prepared.table);
        let batch = engine::execute(&query, rows, &cx.plan.lookups).await?;
        let compute_s = phase.elapsed().as_secs_f64() - prepare_s;
        let schema = batch.schema();
        cx.check_output(&schema)?;
        let lineage = Lineage::new(fingerprint, inputs, stats, batch.num_rows() as u64);
        let bytes = commit::encode(&batch, &lineage, &[])?;
        let quarantine = match quarantined {
            Some(rows) => Some(commit::encode(&rows, &lineage, &[])?),
            None => None,
        };
        tracing::debug!(%date, read_s, prepare_s, compute_s, "computed partition");
        let file = PartitionFile {
            bytes,
            rows: batch.num_rows(),
            schema: schema.clone() as SchemaRef,
            stats,
            merge: None,
            quarantine,
            sidecars: Vec::new(),
            replaces: Vec::new(),
            skip: false,
        };
        Ok((file, hashes))
    }
}
