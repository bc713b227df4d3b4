//! `kind = "aggregate"`: a daily table computed from each date's prepared rows (SPEC §2.4).
//!
//! Partitions stream through `--concurrency` at a time, each read → prepared → aggregated →
//! encoded (a small file); all are computed before any is committed, so the run-wide check for
//! keys seen under two dates ([`crate::crossdate`]) can fail both partitions before either is
//! written. A partition depends on its input alone: `--skip-unchanged` and `verify` apply.

use std::sync::Arc;
use std::time::Instant;

use arrow::datatypes::SchemaRef;
use futures::future::BoxFuture;
use futures::StreamExt;

use super::{Computed, Context, Kind, Outcome, PartitionFile};
use crate::aggregate as engine;
use crate::commit;
use crate::config::{AggregateSection, ConfigError, JobConfig};
use crate::error::PartitionError;
use crate::lineage::Lineage;
use crate::plan::PartitionPlan;
use crate::prepare;
use crate::run::Event;

/// A daily table.
#[derive(Debug)]
pub struct Aggregate {
    section: AggregateSection,
}

impl Aggregate {
    pub fn new(cfg: &JobConfig) -> Result<Self, ConfigError> {
        let section = cfg.aggregate.clone().ok_or_else(|| ConfigError::Invalid {
            path: cfg.origin.clone(),
            key: "aggregate".into(),
            message: "kind = \"aggregate\" needs an [aggregate] section".into(),
        })?;
        Ok(Aggregate { section })
    }
}

impl Kind for Aggregate {
    fn name(&self) -> &'static str {
        "aggregate"
    }

    fn required_columns(&self) -> Vec<String> {
        let mut v: Vec<String> = self.section.group_by.clone();
        for m in &self.section.measures {
            v.extend(m.column.iter().cloned());
            v.extend(m.filter.keys().cloned());
        }
        v
    }

    fn output_schema(&self, _cfg: &JobConfig, record: &SchemaRef) -> Result<SchemaRef, (String, String)> {
        let has = |c: &str| record.field_with_name(c).is_ok();
        let names: Vec<String> = record.fields().iter().map(|f| f.name().clone()).collect();
        let missing =
            |key: String, col: &str| (key, format!("no column `{col}` in the input (it has: {})", names.join(", ")));
        let agg = &self.section;
        for (i, g) in agg.group_by.iter().enumerate() {
            if !has(g) {
                return Err(missing(format!("aggregate.group_by[{i}]"), g));
            }
        }
        for (i, m) in agg.measures.iter().enumerate() {
            if let Some(c) = &m.column {
                if !has(c) {
                    return Err(missing(format!("aggregate.measures[{i}].column"), c));
                }
            }
            for c in m.filter.keys() {
                if !has(c) {
                    return Err(missing(format!("aggregate.measures[{i}].where"), c));
                }
            }
        }
        engine::output_schema(agg, record).map_err(|m| ("aggregate.measures".to_string(), m))
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
                    let result = self.partition(cx, &p).await;
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

impl Aggregate {
    /// One partition: read, prepare, aggregate, encode. Also the sorted hashes of its keys.
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
        let section = self.section.clone();
        let fingerprint = cx.job.config.fingerprint();
        let inputs = p.lineage_inputs(&cx.job.input);
        let expected = cx.plan.output_schema.clone();
        let date = p.date;
        tokio::task::spawn_blocking(move || {
            let phase = Instant::now();
            let prepared = prepare::prepare(table, &id)?;
            let prepare_s = phase.elapsed().as_secs_f64();
            let schema = engine::output_schema(&section, prepared.table.schema()).map_err(PartitionError::Other)?;
            if let Some(expected) = &expected {
                crate::schema::same_output(expected, &schema).map_err(|why| PartitionError::OutputSchema { why })?;
            }
            let batch = engine::aggregate(&prepared, &section, &schema, id.threads)?;
            let compute_s = phase.elapsed().as_secs_f64() - prepare_s;
            let lineage = Lineage::new(fingerprint, inputs, prepared.stats, batch.num_rows() as u64);
            let bytes = commit::encode(&batch, &lineage, &[])?;
            let encode_s = phase.elapsed().as_secs_f64() - prepare_s - compute_s;
            tracing::debug!(%date, read_s, prepare_s, compute_s, encode_s, "computed partition");
            let quarantine = if prepared.quarantined.is_empty() {
                None
            } else {
                let rows =
                    prepared.table.take(&prepared.quarantined).map_err(|e| PartitionError::Other(e.to_string()))?;
                Some(commit::encode(&rows, &lineage, &[])?)
            };
            let file = PartitionFile {
                bytes,
                rows: batch.num_rows(),
                schema,
                stats: prepared.stats,
                merge: None,
                quarantine,
                sidecars: Vec::new(),
                replaces: Vec::new(),
                skip: false,
            };
            Ok((file, prepared.key_hashes))
        })
        .await
        .map_err(|e| PartitionError::Other(format!("compute task failed: {e}")))?
    }
}
