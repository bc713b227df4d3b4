//! Plan: what a run will do, decided before anything is written (SPEC §2.1–2.2).
//!
//! The dates become partitions; the input is listed — only the `col=date/` folders of the
//! wanted dates when the input is Hive partitioned, every object otherwise (row-group
//! statistics prune later); the record schema is read from the first input object and every
//! column the config names is checked against it (a config error, exit 2, still before
//! anything runs). The committed state of each target is read later, under the partition's
//! lease, so the swap can be a compare-and-swap against it. `--dry-run` prints the plan and stops.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use arrow::datatypes::{DataType, SchemaRef};
use chrono::NaiveDate;
use futures::TryStreamExt;
use object_store::path::Path;
use object_store::{ObjectMeta, ObjectStoreExt};

use crate::aggregate;
use crate::commit::{self, Seen};
use crate::config::{ConfigError, JobConfig};
use crate::error::{Error, Result};
use crate::lineage::InputObject;
use crate::prepare;
use crate::read::{self, DateSource, Decoder};
use crate::store::StoreLocation;

/// How the input is laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// `INPUT/<col>=<date>/…`: each date's objects in its own folder.
    Hive,
    /// Anything else: every object may hold any date.
    Flat,
}

/// One partition of the plan.
#[derive(Debug, Clone)]
pub struct PartitionPlan {
    pub date: NaiveDate,
    /// `<col>=<date>`.
    pub dir: String,
    /// The input objects that can hold rows of this date.
    pub inputs: Vec<ObjectMeta>,
    /// The committed object as seen now.
    pub seen: Seen,
}

impl PartitionPlan {
    /// The input objects as recorded in lineage: paths relative to the input URL.
    pub fn lineage_inputs(&self, input: &StoreLocation) -> Vec<InputObject> {
        self.inputs
            .iter()
            .map(|m| InputObject { path: input.relative(&m.location), size: m.size, e_tag: m.e_tag.clone() })
            .collect()
    }
}

/// A run's plan.
#[derive(Debug, Clone)]
pub struct Plan {
    pub layout: Layout,
    pub partitions: Vec<PartitionPlan>,
    /// Every input object listed (flat layout: read once, shared by all dates).
    pub objects: Vec<ObjectMeta>,
    pub decoder: Decoder,
    pub output_schema: Option<SchemaRef>,
}

/// A data object, as opposed to markers and transient files (`_SUCCESS`, `.crc`, `_temporary/`).
pub fn is_data_object(input: &StoreLocation, path: &Path) -> bool {
    let rel = input.relative(path);
    !rel.split('/').any(|seg| seg.starts_with('_') || seg.starts_with('.')) && !rel.ends_with(".crc")
}

async fn list(input: &StoreLocation, prefix: &Path) -> Result<Vec<ObjectMeta>> {
    let mut v: Vec<ObjectMeta> = input
        .store
        .list(Some(prefix))
        .try_collect()
        .await
        .map_err(|e| Error::store("cannot list", input.display(prefix), e))?;
    v.retain(|m| is_data_object(input, &m.location));
    v.sort_by(|a, b| a.location.cmp(&b.location));
    Ok(v)
}

/// The `<col>=<value>` folders directly under the input prefix, by date.
async fn hive_folders(input: &StoreLocation, column: &str) -> Result<BTreeMap<NaiveDate, Path>> {
    let res = input
        .store
        .list_with_delimiter(Some(&input.prefix))
        .await
        .map_err(|e| Error::store("cannot list", &input.url, e))?;
    let mut out = BTreeMap::new();
    let want = format!("{column}=");
    for p in res.common_prefixes {
        if let Some(name) = p.filename() {
            if let Some(v) = name.strip_prefix(&want) {
                if let Ok(d) = NaiveDate::parse_from_str(v, "%Y-%m-%d") {
                    out.insert(d, p.clone());
                }
            }
        }
    }
    Ok(out)
}

fn config_err(key: &str, message: String) -> Error {
    Error::Config(ConfigError::Invalid { path: "config".into(), key: key.into(), message })
}

/// Builds the plan for `dates` (None: every date found in the input — merge jobs).
pub async fn plan(cfg: &JobConfig, input: &StoreLocation, dates: Option<&[NaiveDate]>) -> Result<Plan> {
    let column = &cfg.partition.column;
    let folders =
        if cfg.partition.from_timestamp.is_none() { hive_folders(input, column).await? } else { BTreeMap::new() };
    let layout = if folders.is_empty() { Layout::Flat } else { Layout::Hive };

    let mut inputs: BTreeMap<NaiveDate, Vec<ObjectMeta>> = BTreeMap::new();
    let mut objects = Vec::new();
    let wanted: Vec<NaiveDate> = match (layout, dates) {
        (_, Some(d)) => d.to_vec(),
        (Layout::Hive, None) => folders.keys().copied().collect(),
        (Layout::Flat, None) => Vec::new(),
    };
    match layout {
        Layout::Hive => {
            for d in &wanted {
                let objs = match folders.get(d) {
                    Some(p) => list(input, p).await?,
                    None => Vec::new(),
                };
                objects.extend(objs.iter().cloned());
                inputs.insert(*d, objs);
            }
        }
        Layout::Flat => {
            objects = list(input, &input.prefix).await?;
            for d in &wanted {
                inputs.insert(*d, objects.clone());
            }
        }
    }

    // The record schema, from the first object of the run (or of the whole input).
    let first = match objects.first() {
        Some(o) => Some(o.clone()),
        None => list(input, &input.prefix).await?.into_iter().next(),
    };
    let decoder_base = |schema: SchemaRef, date_source: DateSource| Decoder {
        format: cfg.input.format,
        schema,
        delimiter: cfg.input.delimiter.as_bytes().first().copied().unwrap_or(b','),
        header: cfg.input.header,
        date_source,
        tz: cfg.timezone(),
    };
    let (decoder, output_schema) = match first {
        None => (decoder_base(std::sync::Arc::new(arrow::datatypes::Schema::empty()), DateSource::Path), None),
        Some(first) => {
            let bytes = input
                .store
                .get(&first.location)
                .await
                .map_err(|e| Error::store("cannot read", input.display(&first.location), e))?
                .bytes()
                .await
                .map_err(|e| Error::store("cannot read", input.display(&first.location), e))?;
            let schema = read::infer_schema(cfg, &input.display(&first.location), &bytes)?;
            let date_source = if let Some(ts) = &cfg.partition.from_timestamp {
                DateSource::Timestamp(ts.clone())
            } else if schema.field_with_name(column).is_ok() {
                DateSource::Column(column.clone())
            } else if layout == Layout::Hive {
                DateSource::Path
            } else {
                return Err(config_err(
                    "partition.column",
                    format!(
                        "the input {} has no column `{column}` and no `{column}=YYYY-MM-DD/` folders; \
                         name the date column, or set `from_timestamp`",
                        input.url
                    ),
                ));
            };
            let output_schema = check_columns(cfg, &schema, &input.display(&first.location))?;
            (decoder_base(schema, date_source), output_schema)
        }
    };

    let mut partitions = Vec::with_capacity(inputs.len());
    for (date, objs) in inputs {
        let dir = commit::partition_dir(column, date);
        partitions.push(PartitionPlan { date, dir, inputs: objs, seen: Seen::default() });
    }
    Ok(Plan { layout, partitions, objects, decoder, output_schema })
}

/// Checks every column the config names against the record schema; returns the output schema
/// of an aggregate job.
fn check_columns(cfg: &JobConfig, schema: &SchemaRef, object: &str) -> Result<Option<SchemaRef>> {
    let has = |c: &str| schema.field_with_name(c).is_ok();
    let names: Vec<String> = schema.fields().iter().map(|f| f.name().clone()).collect();
    let missing = |key: &str, col: &str| {
        config_err(key, format!("no column `{col}` in the input (read from {object}; it has: {})", names.join(", ")))
    };
    if !cfg.is_whole_record_key() {
        for k in &cfg.identity.key {
            if !has(k) {
                return Err(missing("identity.key", k));
            }
        }
    }
    if let Some(v) = &cfg.identity.version {
        let f = schema.field_with_name(v).map_err(|_| missing("identity.version", v))?;
        let arr = arrow::array::new_empty_array(f.data_type());
        prepare::version_values(&arr).map_err(|m| config_err("identity.version", format!("column `{v}` {m}")))?;
    }
    if let Some(d) = &cfg.identity.deleted {
        if !has(&d.column) {
            return Err(missing("identity.deleted.column", &d.column));
        }
    }
    if let Some(ts) = &cfg.partition.from_timestamp {
        let f = schema.field_with_name(ts).map_err(|_| missing("partition.from_timestamp", ts))?;
        if !matches!(f.data_type(), DataType::Timestamp(_, _)) {
            return Err(config_err(
                "partition.from_timestamp",
                format!("column `{ts}` has type {}; it must be a timestamp", f.data_type()),
            ));
        }
    }
    let Some(agg) = &cfg.aggregate else {
        return Ok(Some(crate::merge::output_schema(schema, &cfg.partition.column)));
    };
    for (i, g) in agg.group_by.iter().enumerate() {
        if !has(g) {
            return Err(missing(&format!("aggregate.group_by[{i}]"), g));
        }
    }
    for (i, m) in agg.measures.iter().enumerate() {
        if let Some(c) = &m.column {
            if !has(c) {
                return Err(missing(&format!("aggregate.measures[{i}].column"), c));
            }
        }
        for c in m.filter.keys() {
            if !has(c) {
                return Err(missing(&format!("aggregate.measures[{i}].where"), c));
            }
        }
    }
    aggregate::output_schema(agg, schema).map(Some).map_err(|m| config_err("aggregate.measures", m))
}

impl Plan {
    /// Adds partitions for dates found in a flat input (a merge without a range).
    pub fn add_partitions(&mut self, cfg: &JobConfig, dates: &[NaiveDate]) {
        for &date in dates {
            let dir = commit::partition_dir(&cfg.partition.column, date);
            self.partitions.push(PartitionPlan { date, dir, inputs: self.objects.clone(), seen: Seen::default() });
        }
    }

    /// Looks up the committed object of every partition (for `--dry-run`; a run reads it again
    /// under the partition's lease, which is the state its swap compares with).
    pub async fn look_up_targets(&mut self, output: &StoreLocation) -> Result<()> {
        for p in &mut self.partitions {
            p.seen.meta = commit::head(output, &commit::target_path(output, &p.dir))
                .await
                .map_err(|e| Error::Usage(e.to_string()))?;
        }
        Ok(())
    }

    /// The plan as text, for `--dry-run`.
    pub fn describe(&self, input: &StoreLocation, output: &StoreLocation) -> String {
        let mut s = String::new();
        let layout = match self.layout {
            Layout::Hive => "Hive-partitioned (only the folders of the planned dates are read)",
            Layout::Flat => "flat (row-group statistics prune what is decoded)",
        };
        let _ = writeln!(s, "input  {} — {layout}", input.url);
        let _ = writeln!(s, "output {}", output.url);
        let _ = writeln!(s, "{} partition(s):", self.partitions.len());
        for p in &self.partitions {
            let bytes: u64 = p.inputs.iter().map(|m| m.size).sum();
            let action = match (&p.seen.meta, p.inputs.is_empty()) {
                (_, true) => "no input: would fail (or be written empty with --allow-empty)",
                (Some(_), false) => "would replace (or keep, when unchanged)",
                (None, false) => "would create",
            };
            let _ = writeln!(s, "  {}  {} object(s), {} bytes  {action}", p.dir, p.inputs.len(), bytes);
            for m in p.inputs.iter().take(if self.layout == Layout::Hive { usize::MAX } else { 0 }) {
                let _ = writeln!(s, "      {}", input.relative(&m.location));
            }
        }
        if self.layout == Layout::Flat {
            let _ = writeln!(s, "input objects ({}):", self.objects.len());
            for m in &self.objects {
                let _ = writeln!(s, "      {}", input.relative(&m.location));
            }
        }
        s
    }
}
