//! Plan: what a run will do, decided before anything is written (docs/design.md §2).
//!
//! The dates become partitions; the input is listed ([`read::list`]: what is listed is what is
//! meant) — only the `col=date/` folders of the wanted dates when the input is Hive
//! partitioned, every object otherwise. In a flat layout each date's inputs are the objects
//! that can hold its rows: for Parquet, by the row-group statistics of the date column (read
//! from the footers alone), so a date's lineage names only its own objects. A reference record
//! schema is unified from the first date's objects' (text: the first object with rows) and
//! every column the config names is checked against it (a config error, exit 2, still before
//! anything runs); each date still reads its own objects' types. The committed state of
//! each target is read later, under the partition's lease, so the swap can be a
//! compare-and-swap against it. `--dry-run` prints the plan and stops.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;

use arrow::datatypes::{DataType, SchemaRef};
use chrono::NaiveDate;
use futures::StreamExt;
use object_store::{ObjectMeta, ObjectStoreExt};

use crate::commit::{self, Seen};
use crate::config::{ConfigError, Format, JobConfig};
use crate::dates;
use crate::error::{Error, InputError, Location, Result};
use crate::kind::Kind;
use crate::lineage::InputObject;
use crate::prepare;
use crate::read::unify::{fill_nulls, has_null};
use crate::read::{self, list, DateSource, Decoder};
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
    /// Flat Parquet input: the dates each object's row groups may hold (`None`: any date).
    pub object_dates: Vec<Vec<Option<(i32, i32)>>>,
    pub decoder: Decoder,
    /// The run's reference record schema (its objects' unified), which the config is checked
    /// against.
    pub record_schema: Option<SchemaRef>,
    pub output_schema: Option<SchemaRef>,
    /// The lookup tables of the daily table's query, read once for the run.
    pub lookups: Arc<Vec<crate::engine::Lookup>>,
    /// The query's plan, for `--dry-run`.
    pub query_plan: Option<String>,
    /// The input columns the daily table's query reads.
    pub query_columns: Vec<String>,
    /// Dates of the range this run does not compute — skipped as unchanged, or held by
    /// another run — whose keys still take part in the check that no key is under two dates.
    pub others: Vec<PartitionPlan>,
}

fn config_err(cfg: &JobConfig, key: &str, message: String) -> Error {
    Error::Config(ConfigError::Invalid { path: cfg.origin.clone(), key: key.into(), message })
}

/// The columns the config uses: every input object must hold them.
fn required_columns(cfg: &JobConfig, kind: &dyn Kind, date_source: &DateSource) -> Vec<String> {
    let mut v: Vec<String> = Vec::new();
    if let DateSource::Column(c) | DateSource::Timestamp(c) = date_source {
        v.push(c.clone());
    }
    if !cfg.is_whole_record_key() {
        v.extend(cfg.identity.key.iter().cloned());
    }
    v.extend(cfg.identity.version.iter().cloned());
    v.extend(cfg.identity.deleted.iter().map(|d| d.column.clone()));
    v.extend(kind.required_columns());
    let mut seen = std::collections::HashSet::new();
    v.retain(|c| seen.insert(c.clone()));
    v
}

/// Builds the plan for `dates` (None: every date found in the input — merge jobs).
pub async fn plan(
    cfg: &JobConfig,
    kind: &dyn Kind,
    input: &StoreLocation,
    dates: Option<&[NaiveDate]>,
) -> Result<Plan> {
    let column = &cfg.partition.column;
    let list::DateFolders { dated: folders, undated } = match cfg.partition.from_timestamp {
        None => list::hive_folders(input, column).await?,
        Some(_) => list::DateFolders::default(),
    };
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
                let mut objs = Vec::new();
                for folder in folders.get(d).into_iter().flatten() {
                    let listed = list::objects(input, folder).await?;
                    if let Some(m) = listed.iter().find(|m| nested_date_folder(&m.location, folder, column)) {
                        return Err(Error::Input(InputError::bad(
                            Location::object(input.display(&m.location)),
                            format!(
                                "a `{column}=` folder inside the date folder `{}`: which date its rows belong to is \
                                 unclear (they would count for the outer folder's); move it beside the other date \
                                 folders, or give it a name starting with `_` to have it ignored",
                                input.relative(folder)
                            ),
                        )));
                    }
                    if !cfg.input.ignore_folder_values {
                        valued_folders(input, &listed, folder, Some(column))?;
                    }
                    objs.extend(listed);
                }
                objects.extend(objs.iter().cloned());
                inputs.insert(*d, objs);
            }
        }
        Layout::Flat => {
            objects = list::objects(input, &input.prefix).await?;
            if objects.is_empty() && list::names_an_object(input).await {
                return Err(config_err(cfg, "input.url", list::object_not_folder(&cfg.input.url)));
            }
            if !cfg.input.ignore_folder_values {
                // Dated by a timestamp, no folder's value is read, the partition column's
                // included.
                let read = cfg.partition.from_timestamp.is_none().then_some(column.as_str());
                valued_folders(input, &objects, &input.prefix, read)?;
            }
        }
    }

    // The reference record schema: the run's first date's objects' (a flat input's: all of
    // them; with none, a folder's of the input).
    let mut dates: Vec<usize> = match layout {
        Layout::Hive => wanted.iter().filter_map(|d| inputs.get(d)).map(Vec::len).filter(|n| *n > 0).collect(),
        Layout::Flat => vec![objects.len()],
    };
    let sample = match objects.is_empty() {
        false => objects.clone(),
        true if layout == Layout::Hive => match folders.values().flatten().next() {
            Some(f) => list::objects(input, f).await?,
            None => Vec::new(),
        },
        true => Vec::new(),
    };
    let mut decoder = Decoder {
        format: cfg.input.format,
        delimiter: cfg.input.delimiter.as_bytes().first().copied().unwrap_or(b','),
        header: cfg.input.header,
        date_source: DateSource::Path,
        tz: cfg.timezone(),
        declared: cfg
            .input
            .schema
            .iter()
            .filter_map(|(c, t)| read::parse_type(t).ok().map(|d| (c.clone(), d)))
            .collect(),
        required: Vec::new(),
        tombstone: None,
        run: None,
        version: cfg.identity.version.clone(),
    };
    let lookups = Arc::new(read_lookups(cfg).await?);
    if objects.is_empty() {
        dates = vec![sample.len()];
    }
    let reference = reference(&decoder, input, &sample, &dates, column, kind.reads_stored_state()).await?;
    let (record_schema, output_schema, query_plan, used) = match reference {
        None => (None, None, None, Vec::new()),
        Some((schema, name, dated)) => {
            let own_column = schema.field_with_name(column).is_ok() || dated;
            // A merge stores the input's columns: one named alike but for case (`EVENT_DATE`),
            // beside the partition folder, is read by case-insensitive readers (Hive) as the
            // folder's date. (An aggregate stores its query's columns, which are checked so.)
            let alike = schema
                .fields()
                .iter()
                .find(|f| kind.reads_stored_state() && f.name().eq_ignore_ascii_case(column))
                .map(|f| f.name());
            decoder.date_source = if let Some(ts) = &cfg.partition.from_timestamp {
                if own_column || alike.is_some() {
                    // Dated by `ts`, the query's `event_date` would be the input's own column:
                    // another date, or text.
                    let own = alike.map_or(column.as_str(), |n| n.as_str());
                    let or = match own == column {
                        true => format!("drop `from_timestamp` to partition by `{own}`"),
                        false => format!("rename the input's column `{own}`"),
                    };
                    return Err(config_err(
                        cfg,
                        "partition.column",
                        format!(
                            "the input {} has a column `{own}` of its own, and with `from_timestamp = \"{ts}\"` the \
                             partition dates come from `{ts}`: `{own}` would be taken for the partition's date (in the \
                             query, and by readers of the table's `{column}=` folders), not the input's column. Name \
                             the partition column otherwise (e.g. `column = \"{ts}_date\"`), or {or}",
                            input.url
                        ),
                    ));
                }
                DateSource::Timestamp(ts.clone())
            } else if schema.field_with_name(column).is_ok()
                || dated
                || (layout == Layout::Hive && cfg.input.format != Format::Parquet)
            {
                // Text objects are not all read to plan: in a Hive layout any of them may hold
                // the column, so each object's own rows are checked against its folder's date
                // (an object without it takes the folder's date).
                DateSource::Column(column.clone())
            } else if layout == Layout::Hive {
                DateSource::Path
            } else if !undated.is_empty() {
                return Err(config_err(
                    cfg,
                    "partition.column",
                    format!(
                        "the input {} has no column `{column}`, and its `{column}=` folders do not name dates: {}. \
                         Name each folder by its date (`{column}=2026-11-01/`)",
                        input.url,
                        undated.join(", ")
                    ),
                ));
            } else {
                return Err(config_err(
                    cfg,
                    "partition.column",
                    format!(
                        "the input {} has no column `{column}` and no `{column}=YYYY-MM-DD/` folders; \
                         name the date column, or set `from_timestamp`",
                        input.url
                    ),
                ));
            };
            // The date source's column has the type it will have once read.
            let schema = decoder_schema(&decoder, schema);
            check_columns(cfg, &schema, &name)?;
            // An NDJSON tombstone column these objects leave out (`optional = true`): nulls,
            // placed where the objects are read to have it.
            let schema = match (cfg.identity.deleted.as_ref(), absent_tombstone(cfg)) {
                (Some(d), Some(t)) if schema.field_with_name(&d.column).is_err() => {
                    let field = arrow::datatypes::Field::new(&d.column, t, true);
                    Arc::new(arrow::datatypes::Schema::new(read::in_name_order(schema.fields(), field)))
                }
                _ => schema,
            };
            let (output, query_plan, used) = kind.output_schema(cfg, &schema, &lookups).await.map_err(|(key, m)| {
                // A column with no value in the objects read has no type the query can use.
                let empty: Vec<String> = schema
                    .fields()
                    .iter()
                    .filter(|f| f.data_type() == &DataType::Null)
                    .map(|f| format!("`{}`", f.name()))
                    .collect();
                let (m, hint) = match empty.as_slice() {
                    _ if !m.contains(crate::engine::NULL_HINT) => (m, String::new()),
                    [] => (m, String::new()),
                    cols => (
                        m.replace(crate::engine::NULL_HINT, ""),
                        format!(
                            "; {} no value in the objects read to plan, so no type: declare it in [input.schema]",
                            match cols {
                                [one] => format!("column {one} has"),
                                more => format!("columns {} have", more.join(", ")),
                            }
                        ),
                    ),
                };
                config_err(cfg, &key, format!("{m} (the input read from {name}){hint}"))
            })?;
            // A merge's record may take its types from the table (checked then).
            let fieldless = (output.fields().iter())
                .find(|f| !kind.reads_stored_state() && crate::read::unify::has_fieldless_struct(f.data_type()));
            if let Some(f) = fieldless {
                return Err(config_err(
                    cfg,
                    "aggregate.sql",
                    format!(
                        "the output column `{}` is {}: an object with no fields (`{{}}` in every row of the input \
                         read from {name}), which Parquet cannot store; leave it out of the output",
                        f.name(),
                        f.data_type()
                    ),
                ));
            }
            (Some(schema), Some(output), query_plan, used)
        }
    };
    // A merge's empty columns take the run's types; an aggregate date's file depends on its
    // own objects alone (G2), so its empty columns are not typed from other dates.
    decoder.run = record_schema.clone().filter(|_| kind.reads_stored_state());
    decoder.required = required_columns(cfg, kind, &decoder.date_source);
    decoder.tombstone = tombstone_of(cfg);
    for c in &used {
        if !decoder.required.contains(c) {
            decoder.required.push(c.clone());
        }
    }
    if layout == Layout::Hive {
        // The folder gives the date of an object without the column.
        decoder.required.retain(|c| *c != cfg.partition.column);
    }

    // A flat layout: each date's objects are those whose rows may hold it.
    let mut object_dates = Vec::new();
    if layout == Layout::Flat && cfg.input.format == Format::Parquet && decoder.date_source != DateSource::Path {
        let (source, tz) = (decoder.date_source.clone(), decoder.tz);
        object_dates = futures::stream::iter(objects.iter().cloned())
            .map(|m| object_dates_of(input.store.clone(), m, source.clone(), tz))
            .buffered(8)
            .collect()
            .await;
    }
    if layout == Layout::Flat {
        for d in &wanted {
            inputs.insert(*d, objects_for(&objects, &object_dates, *d));
        }
    }

    let mut partitions = Vec::with_capacity(inputs.len());
    for (date, objs) in inputs {
        let dir = commit::partition_dir(column, date);
        partitions.push(PartitionPlan { date, dir, inputs: objs, seen: Seen::default() });
    }
    Ok(Plan {
        layout,
        partitions,
        objects,
        object_dates,
        decoder,
        record_schema,
        output_schema,
        lookups,
        query_plan,
        query_columns: used,
        others: Vec::new(),
    })
}

/// The dates an object's row groups may hold, from its footer (`None`: any date).
async fn object_dates_of(
    store: Arc<dyn object_store::ObjectStore>,
    m: ObjectMeta,
    source: DateSource,
    tz: chrono_tz::Tz,
) -> Vec<Option<(i32, i32)>> {
    let Ok(md) = read::parquet_footer(store.as_ref(), &m).await else { return vec![None] };
    let Ok(arrow) = read::footer_schema(&md) else { return vec![None] };
    let ranges = read::row_group_dates(&md, &arrow, &source, tz);
    if ranges.is_empty() {
        vec![Some((i32::MAX, i32::MIN))] // no row groups: no date
    } else {
        ranges
    }
}

/// The objects of a flat input that may hold rows of `date`.
fn objects_for(objects: &[ObjectMeta], object_dates: &[Vec<Option<(i32, i32)>>], date: NaiveDate) -> Vec<ObjectMeta> {
    if object_dates.is_empty() {
        return objects.to_vec();
    }
    let day = dates::to_days(date);
    objects
        .iter()
        .zip(object_dates)
        .filter(|(_, ranges)| ranges.iter().any(|r| r.is_none_or(|(lo, hi)| lo <= day && day <= hi)))
        .map(|(m, _)| m.clone())
        .collect()
}

/// Whether a folder's name is a Hive reader's `name=value` (a value of its rows' column `name`).
/// The name as stored: a Hive writer escapes an `=` in a value (`%3D`), and readers split
/// names at the `=` written.
pub fn valued_folder(name: &str) -> bool {
    name.split_once('=').is_some_and(|(n, value)| !n.is_empty() && !value.is_empty() && !value.contains('='))
}

/// Refuses objects in `name=value` folders under `folder` (a date folder, or a flat input's
/// root): Hive readers take such a folder's value for a column of its rows, which lakeswap
/// does not read. The value would be lost, and rows of `region=eu/` and `region=us/` alike
/// taken for exact duplicates, one of them dropped.
///
/// Folders of the partition column (`event_date=Nov-01/`) are left to the checks of dates.
fn valued_folders(
    input: &StoreLocation,
    objects: &[ObjectMeta],
    folder: &object_store::path::Path,
    column: Option<&str>,
) -> Result<()> {
    let dated = column.map(|c| format!("{}=", c.to_ascii_lowercase()));
    let read = match column {
        Some(_) => "reads no column from folder names but the partition column's",
        None => "reads no column from folder names (the partition dates come from `from_timestamp`)",
    };
    for m in objects {
        let Some(parts) = m.location.prefix_match(folder) else { continue };
        let parts: Vec<_> = parts.collect();
        let below = &parts[..parts.len().saturating_sub(1)];
        let valued = |p: &&object_store::path::PathPart| {
            valued_folder(p.as_ref()) && !dated.as_ref().is_some_and(|d| p.as_ref().to_ascii_lowercase().starts_with(d))
        };
        if let Some(f) = below.iter().find(valued) {
            return Err(Error::Input(InputError::bad(
                Location::object(input.display(&m.location)),
                format!(
                    "a folder named like `{}/`: Hive readers take its value for a column of its rows, and lakeswap \
                     {read}, so the value would be lost (rows alike in two such folders taken for duplicates). Write \
                     the value into the files' rows, or read each such folder as an input of its own; if the value \
                     is not data (a landing date, whose redeliveries are duplicates), set \
                     `input.ignore_folder_values = true`",
                    f.as_ref()
                ),
            )));
        }
    }
    Ok(())
}

/// Whether an object under a date folder lies in another `column=` folder below it.
fn nested_date_folder(object: &object_store::path::Path, folder: &object_store::path::Path, column: &str) -> bool {
    let Some(parts) = object.prefix_match(folder) else { return false };
    let parts: Vec<_> = parts.collect();
    let below = &parts[..parts.len().saturating_sub(1)];
    let prefix = format!("{}=", column.to_ascii_lowercase());
    below.iter().any(|p| p.as_ref().to_ascii_lowercase().starts_with(&prefix))
}

/// The run's reference record schema, which the config is checked against and the query is
/// planned on; the object it is named after; and whether any object holds the partition
/// `column`. Parquet: the footers of the first date's objects with rows (`dates` counts each
/// date's objects, in order; a few ranged reads each; objects without rows type nothing, as
/// in a date's own read, so a date holding only such objects gives way to the next), each
/// column in the type they unify to ([`read::unify::unify_types`]; the first object's where
/// they do not), so no object's place in the listing decides the plan; every
/// object's footer is read for the partition column. Each date still reads its own objects'
/// types: a date's output depends on its own input alone. A merge (`stored`) takes every
/// date's objects with rows, as its table stores them all. Text: the first object that has rows
/// (a header alone gives no types). `stored`: the run stores its input columns (a merge), so a
/// nested column's places with no value are typed from any object of the run that has them.
async fn reference(
    decoder: &Decoder,
    input: &StoreLocation,
    objects: &[ObjectMeta],
    dates: &[usize],
    column: &str,
    stored: bool,
) -> Result<Option<(SchemaRef, String, bool)>> {
    let Some(head) = objects.first() else { return Ok(None) };
    let name = input.display(&head.location);
    if decoder.format != Format::Parquet {
        let schema = reference_schema(decoder, input, head).await?;
        let (mut schema, mut name, mut at) = (schema, name, 0);
        if schema.fields().is_empty() {
            for (i, m) in objects.iter().enumerate().skip(1) {
                let s = reference_schema(decoder, input, m).await?;
                if !s.fields().is_empty() {
                    (schema, name, at) = (s, input.display(&m.location), i);
                    break;
                }
            }
        }
        // Text objects holding a header alone: no rows, so nothing to plan by, as with no
        // object at all (each date then has no input rows).
        if schema.fields().is_empty() {
            return Ok(None);
        }
        let typed = typed_from_later_objects(decoder, input, &objects[at + 1..], schema, stored).await?;
        return Ok(Some((typed, name, false)));
    }
    let (schema, rows) = parquet_reference(input, head).await?;
    let footers: Vec<_> = objects[1..]
        .iter()
        .map(|m| {
            let (store, m) = (input.store.clone(), m.clone());
            async move {
                let md = read::parquet_footer(store.as_ref(), &m).await.ok()?;
                Some((read::footer_schema(&md).ok()?, md.file_metadata().num_rows(), m.location))
            }
        })
        .collect();
    let others: Vec<Option<(arrow::datatypes::Schema, i64, object_store::path::Path)>> =
        futures::stream::iter(footers).buffered(8).collect().await;
    let dated = others.iter().flatten().any(|(s, ..)| s.field_with_name(column).is_ok());
    // The first date with an object with rows: its objects with rows, as each date reads its
    // own (an object without rows gives no types); the first date's objects where none has one.
    let all: Vec<Option<(arrow::datatypes::Schema, i64, String)>> = std::iter::once(Some((schema, rows, name)))
        .chain(others.into_iter().map(|o| o.map(|(s, n, p)| (s, n, input.display(&p)))))
        .collect();
    let mut groups = Vec::new();
    let mut at = 0;
    for n in dates {
        groups.push(at..(at + n).min(all.len()));
        at += n;
    }
    if at < all.len() {
        groups.push(at..all.len());
    }
    let with_rows = |g: &std::ops::Range<usize>| all[g.clone()].iter().flatten().any(|(_, n, _)| *n > 0);
    // A merge stores every date's columns in one table: its schema is all of its dates' (a
    // date lacking a column holds nulls in it), so which date comes first decides nothing.
    let group = match stored {
        true if all.iter().flatten().any(|(_, n, _)| *n > 0) => 0..all.len(),
        _ => groups.iter().find(|g| with_rows(g)).or(groups.first()).cloned().unwrap_or(0..1),
    };
    let mut first_date: Vec<(arrow::datatypes::Schema, i64, String)> = all[group].iter().flatten().cloned().collect();
    if first_date.iter().any(|(_, n, _)| *n > 0) {
        first_date.retain(|(_, n, _)| *n > 0);
    }
    let mut first_date = first_date.into_iter();
    let Some((schema, _, name)) = first_date.next() else { return Ok(None) };
    let mut fields: Vec<arrow::datatypes::Field> = schema.fields().iter().map(|f| f.as_ref().clone()).collect();
    for f in first_date.flat_map(|(s, ..)| s.fields().iter().map(|f| f.as_ref().clone()).collect::<Vec<_>>()) {
        match fields.iter_mut().find(|g| g.name() == f.name()) {
            None => fields.push(f),
            Some(g) => {
                if let Some(t) = read::unify::unify_types(g.data_type(), f.data_type()) {
                    *g = g.clone().with_data_type(t);
                }
            }
        }
    }
    Ok(Some((Arc::new(arrow::datatypes::Schema::new(fields)), name, dated)))
}

/// A text merge's columns declared in `[input.schema]` that its objects read to plan lack: a
/// merge stores every column of its batch, and text objects are not all read to plan, so such
/// a column comes in others (an object of deletes alone leaves out the payload) and the run has
/// it — null where an object leaves it out — whichever object is listed first. In the table's
/// type when the table has it; a table without it keeps its columns, as before the declaration
/// (adding one is a schema change, `--schema-change rebuild`).
pub fn declared_columns(plan: &mut Plan, cfg: &JobConfig, table: Option<&SchemaRef>) {
    let Some(record) = plan.record_schema.clone() else { return };
    if cfg.input.format == Format::Parquet {
        return;
    }
    let tombstone = |c: &str| cfg.identity.deleted.as_ref().is_some_and(|d| d.column == c);
    let added: Vec<arrow::datatypes::Field> = (plan.decoder.declared.iter())
        .filter(|(c, _)| **c != cfg.partition.column && !tombstone(c) && record.field_with_name(c).is_err())
        .filter_map(|(c, d)| {
            let t = match table {
                None => read::unify::parquet_native(&d.ty),
                Some(t) => t.field_with_name(c).ok()?.data_type().clone(),
            };
            Some(arrow::datatypes::Field::new(c, t, true))
        })
        .collect();
    if added.is_empty() {
        return;
    }
    let with = |s: &SchemaRef| -> SchemaRef {
        let fields = s.fields().iter().map(|f| f.as_ref().clone()).chain(added.iter().cloned());
        Arc::new(arrow::datatypes::Schema::new_with_metadata(fields.collect::<Vec<_>>(), s.metadata().clone()))
    };
    let record = with(&record);
    plan.output_schema = plan.output_schema.as_ref().map(with);
    plan.decoder.run = Some(record.clone());
    plan.record_schema = Some(record);
}

/// Types the input columns that no object read to plan holds a value of (text left empty:
/// type Null). A merge, whose table stores its input's columns, takes the table's type of such
/// a column. A column still without a type is refused where the run needs one — a merge stores
/// every column, an aggregate reads those its query uses — because any type chosen for it
/// could be the wrong one: declare it in `[input.schema]`. Other empty columns stay Null (read
/// as text, unused).
pub fn type_empty_columns(
    plan: &mut Plan,
    cfg: &JobConfig,
    input: &StoreLocation,
    table: Option<&SchemaRef>,
    stores_input: bool,
) -> Result<()> {
    let Some(record) = plan.record_schema.clone() else { return Ok(()) };
    let untyped = |c: &str| record.field_with_name(c).is_ok_and(|f| has_null(f.data_type()));
    if !record.fields().iter().any(|f| untyped(f.name())) {
        return Ok(());
    }
    let empty: Vec<String> =
        record.fields().iter().filter(|f| f.data_type() == &DataType::Null).map(|f| f.name().clone()).collect();
    // The table's type of a column the plan has no value in (anywhere in it: a nested one may
    // lack values in a list or a struct field), where it fills those places.
    let stored = |c: &str| -> Option<DataType> {
        let t = table?.field_with_name(c).ok()?.data_type();
        let mine = record.field_with_name(c).ok()?.data_type();
        (stores_input && !has_null(t) && fill_nulls(mine, t).as_ref() == Some(t)).then(|| t.clone())
    };
    let retype = |s: &SchemaRef| -> SchemaRef {
        let fields: Vec<arrow::datatypes::Field> = s
            .fields()
            .iter()
            .map(|f| match stored(f.name()) {
                Some(t) if untyped(f.name()) => f.as_ref().clone().with_data_type(t),
                _ => f.as_ref().clone(),
            })
            .collect();
        Arc::new(arrow::datatypes::Schema::new_with_metadata(fields, s.metadata().clone()))
    };
    if stores_input {
        let record = retype(&record);
        plan.output_schema = plan.output_schema.as_ref().map(retype);
        plan.decoder.run = Some(record.clone());
        plan.record_schema = Some(record);
    }
    if let Some(record) = plan.record_schema.as_ref().filter(|_| stores_input) {
        let fieldless: Vec<String> = (record.fields().iter())
            .filter(|f| crate::read::unify::has_fieldless_struct(f.data_type()))
            .map(|f| format!("`{}`", f.name()))
            .collect();
        if !fieldless.is_empty() {
            let read = plan.objects.first().map(|m| input.display(&m.location)).unwrap_or_default();
            return Err(config_err(
                cfg,
                "input.url",
                format!(
                    "{} only empty objects (`{{}}`), at the top or inside, in the objects read to plan (from \
                     {read} on), so the fields of those objects are unknown, and a merge stores every input \
                     column: Parquet cannot store an object with no fields. Merge first a batch where some of \
                     them have a field: the table then holds the type",
                    match fieldless.as_slice() {
                        [one] => format!("column {one} holds"),
                        more => format!("columns {} hold", more.join(", ")),
                    }
                ),
            ));
        }
    }
    if stores_input {
        // The tombstone value is checked against the type the table gives the column.
        if let Some(d) = cfg.identity.deleted.as_ref().filter(|d| empty.contains(&d.column)) {
            if let Some(t) = stored(&d.column) {
                crate::predicate::Equals::new(&t, &d.equals, cfg.timezone())
                    .map_err(|m| config_err(cfg, "identity.deleted.equals", m))?;
            }
        }
    }
    // A merge needs the type of every column it stores. An aggregate needs the type of the
    // columns its query reads, but for a key or version: a null one is bad input of its date,
    // which fails naming the row (exit 3), before any query.
    let identity = |c: &String| cfg.identity.key.contains(c) || cfg.identity.version.as_ref() == Some(c);
    let needed: Vec<&String> = empty
        .iter()
        .filter(|c| stored(c).is_none() && (stores_input || (plan.query_columns.contains(c) && !identity(c))))
        .collect();
    if needed.is_empty() {
        return Ok(());
    }
    let (names, have) = match needed.as_slice() {
        [one] => (format!("column `{one}` has"), "its type is"),
        more => (
            format!("columns {} have", more.iter().map(|c| format!("`{c}`")).collect::<Vec<_>>().join(", ")),
            "their types are",
        ),
    };
    let read = plan.objects.first().map(|m| input.display(&m.location)).unwrap_or_default();
    let why = if stores_input { "a merge stores every input column" } else { "the query reads it" };
    Err(config_err(
        cfg,
        "input.schema",
        format!(
            "{names} no value in the objects read to plan (from {read} on, at most {TYPE_SEARCH_OBJECTS} more), \
             so {have} unknown, and {why}: declare it, e.g. `{} = \"bigint\"` or `\"string\"`",
            needed[0]
        ),
    ))
}

/// Objects read at most, past the first, to type the columns a text object leaves empty.
const TYPE_SEARCH_OBJECTS: usize = 8;
/// Bytes read at most, past the first object, to type them.
const TYPE_SEARCH_BYTES: u64 = 256 << 20;

/// A text object's record schema with the columns it leaves empty in every row (type Null)
/// typed by the values of the run's next objects, when they hold some (a bounded search; a
/// declared column needs none). A column still empty stays Null: the run refuses it where it
/// needs its type. With `nested_everywhere`, a nested column's places with no value (`[]`,
/// `{"x": null}`) are searched for in every object: a merge stores them, and a type cannot be
/// declared for them, nor changed once a table holds it.
async fn typed_from_later_objects(
    decoder: &Decoder,
    input: &StoreLocation,
    later: &[ObjectMeta],
    schema: SchemaRef,
    nested_everywhere: bool,
) -> Result<SchemaRef> {
    let untyped = |fields: &[arrow::datatypes::Field]| -> Vec<String> {
        fields
            .iter()
            .filter(|f| crate::read::unify::has_null(f.data_type()) && decoder.column_type(f.name()).is_none())
            .map(|f| f.name().clone())
            .collect()
    };
    let mut fields: Vec<arrow::datatypes::Field> = schema.fields().iter().map(|f| f.as_ref().clone()).collect();
    let mut bytes = 0u64;
    for (i, m) in later.iter().enumerate() {
        let mut open = untyped(&fields);
        let bounded = i < TYPE_SEARCH_OBJECTS && bytes + m.size <= TYPE_SEARCH_BYTES;
        if !bounded {
            let nested = |c: &String| fields.iter().any(|f| f.name() == c && f.data_type() != &DataType::Null);
            open.retain(|c| nested_everywhere && nested(c));
        }
        if open.is_empty() {
            break;
        }
        bytes += m.size;
        let s = reference_schema(decoder, input, m).await?;
        for f in fields.iter_mut().filter(|f| open.contains(f.name())) {
            if let Some(t) = s.field_with_name(f.name()).ok().and_then(|g| fill_nulls(f.data_type(), g.data_type())) {
                *f = f.clone().with_data_type(t);
            }
        }
    }
    Ok(Arc::new(arrow::datatypes::Schema::new(fields)))
}

/// The record schema of one object: a Parquet footer (a few ranged reads), or a text object
/// read through.
async fn reference_schema(decoder: &Decoder, input: &StoreLocation, first: &ObjectMeta) -> Result<SchemaRef> {
    if decoder.format == Format::Parquet {
        return Ok(Arc::new(parquet_reference(input, first).await?.0));
    }
    // An empty text object types nothing: refused or read as no rows by its own date's read,
    // it fails no other date.
    if first.size == 0 {
        return Ok(Arc::new(arrow::datatypes::Schema::empty()));
    }
    // A large NDJSON object is read as pieces of lines, never held whole.
    if decoder.format == Format::Ndjson && first.size > read::PIECE as u64 {
        return read::streamed_schema(input, decoder, first).await.map_err(Error::Input);
    }
    let name = input.display(&first.location);
    let bytes = fetch(input, first).await?;
    decoder.schema_of(&name, &bytes).map_err(Error::Input)
}

/// A Parquet object's record schema and row count, from its footer (a few ranged reads).
async fn parquet_reference(input: &StoreLocation, object: &ObjectMeta) -> Result<(arrow::datatypes::Schema, i64)> {
    let name = input.display(&object.location);
    let bad = |m: String| Error::Input(InputError::bad(Location::object(name.clone()), m));
    // A store that failed is worth a retry (exit 1); bytes that are not Parquet are not (3).
    let md = read::parquet_footer(input.store.as_ref(), object).await.map_err(|e| match e {
        read::FooterError::Store(e) => Error::store("cannot read", &name, e),
        read::FooterError::Bad(m) => bad(format!("not a readable Parquet file (truncated or corrupt?): {m}")),
    })?;
    Ok((read::footer_schema(&md).map_err(bad)?, md.file_metadata().num_rows()))
}

/// An object's schema as it will be decoded (from a Parquet footer, or a text object's head).
pub async fn object_schema(decoder: &Decoder, input: &StoreLocation, object: &ObjectMeta) -> Result<SchemaRef> {
    Ok(decoder_schema(decoder, reference_schema(decoder, input, object).await?))
}

/// The reference schema under the decoder's conversions (declared types, the date column).
fn decoder_schema(decoder: &Decoder, raw: SchemaRef) -> SchemaRef {
    let fields: Vec<arrow::datatypes::Field> = raw
        .fields()
        .iter()
        .map(|f| {
            let t = match (decoder.declared.get(f.name()), &decoder.date_source) {
                (Some(d), _) => d.ty.clone(),
                (None, DateSource::Column(c)) if c == f.name() => DataType::Date32,
                (None, DateSource::Timestamp(c))
                    if c == f.name()
                        && matches!(f.data_type(), DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View) =>
                {
                    DataType::Timestamp(arrow::datatypes::TimeUnit::Microsecond, Some("UTC".into()))
                }
                _ => read::unify::base(f.data_type()),
            };
            // Marks of how a column was read (text from JSON numbers) stay.
            arrow::datatypes::Field::new(f.name(), read::unify::parquet_native(&t), true)
                .with_metadata(f.metadata().clone())
        })
        .collect();
    Arc::new(arrow::datatypes::Schema::new(fields))
}

async fn fetch(input: &StoreLocation, m: &ObjectMeta) -> Result<bytes::Bytes> {
    let name = input.display(&m.location);
    let got = input.store.get(&m.location).await.map_err(|e| Error::store("cannot read", &name, e))?;
    got.bytes().await.map_err(|e| Error::store("cannot read", &name, e))
}

/// Checks the identity and partition columns against the record schema.
fn check_columns(cfg: &JobConfig, schema: &SchemaRef, object: &str) -> Result<()> {
    let has = |c: &str| schema.field_with_name(c).is_ok();
    let names: Vec<String> = schema.fields().iter().map(|f| f.name().clone()).collect();
    let missing = |key: &str, col: &str| {
        let hint = match (cfg.input.format, key) {
            (Format::Ndjson, "identity.deleted.column") => format!(
                "; if these objects simply have no deletes (JSON leaves out a field with no value), say so with \
                 `optional = true` in [identity.deleted]: an object without `{col}` then deletes nothing"
            ),
            _ => String::new(),
        };
        config_err(
            cfg,
            key,
            format!("no column `{col}` in the input (read from {object}; it has: {}){hint}", names.join(", ")),
        )
    };
    if !cfg.is_whole_record_key() {
        for k in &cfg.identity.key {
            if !has(k) {
                return Err(missing("identity.key", k));
            }
            // Text read as numbers: `1.1` and `1.10`, or `0.1` and `0.10000000000000001`, are one
            // double, so two ids written apart would be one key.
            let inferred = |t: fn(&DataType) -> bool| {
                cfg.input.format != Format::Parquet
                    && !cfg.input.schema.contains_key(k)
                    && schema.field_with_name(k).is_ok_and(|f| t(f.data_type()))
            };
            // Likewise CSV's `true`, `TRUE` and `True`: one boolean (JSON has one spelling).
            if cfg.input.format == Format::Csv && inferred(|t| t == &DataType::Boolean) {
                return Err(config_err(
                    cfg,
                    "identity.key",
                    format!(
                        "the key column `{k}` reads as booleans from {object}, where ids written apart (`true` and \
                         `TRUE`) would be one key; declare its type in [input.schema]: `{k} = \"utf8\"` to keep \
                         each id as written, or `bool` to compare the truth values"
                    ),
                ));
            }
            if inferred(DataType::is_floating) {
                return Err(config_err(
                    cfg,
                    "identity.key",
                    format!(
                        "the key column `{k}` reads as floating-point numbers from {object}, where ids written apart \
                         (`1.1` and `1.10`) would be one key; declare its type in [input.schema]: `{k} = \"utf8\"` to \
                         keep each id as written, a decimal(p,s), or `float64` to keep comparing the numbers (as a \
                         table written before holds them)"
                    ),
                ));
            }
        }
    }
    // A declared type for a column no object of the run has, spelled like one they have, is a
    // misspelling (a column these objects lack may come in others: an optional field).
    let tombstone = |c: &str| cfg.identity.deleted.as_ref().is_some_and(|d| d.column == c);
    // The tombstone is a column of the config's own: a declared column like it is another.
    let candidates: Vec<String> = names.iter().filter(|n| !tombstone(n)).cloned().collect();
    for c in cfg.input.schema.keys().filter(|c| !has(c) && !tombstone(c)) {
        if let Some(like) = misspelling_of(c, &candidates) {
            return Err(config_err(
                cfg,
                "input.schema",
                format!("no column `{c}` in the input (read from {object}); did you mean `{like}`?"),
            ));
        }
    }
    // A key, version or tombstone column with no value in the objects read to plan (type Null)
    // is checked where it has values: a null key or version fails its date, naming the row, and
    // an empty tombstone column means no deletes.
    if let Some(v) = &cfg.identity.version {
        let f = schema.field_with_name(v).map_err(|_| missing("identity.version", v))?;
        if f.data_type() != &DataType::Null {
            let arr = arrow::array::new_empty_array(f.data_type());
            prepare::version_values(&arr)
                .map_err(|m| config_err(cfg, "identity.version", format!("column `{v}` {m}")))?;
        }
    }
    if let Some(d) = &cfg.identity.deleted {
        let t = match schema.field_with_name(&d.column) {
            Ok(f) => f.data_type().clone(),
            Err(_) => {
                // Read as nulls, a misspelt tombstone would delete nothing.
                let c = &d.column;
                let fields = schema.fields().iter().map(|f| (f.name().as_str(), f.data_type()));
                if let Some(like) = tombstone_of(cfg).and_then(|t| t.like(fields).map(str::to_string)) {
                    let why = read::tombstone_missing(c, &like);
                    return Err(config_err(cfg, "identity.deleted.column", format!("{why} (read from {object})")));
                }
                absent_tombstone(cfg).ok_or_else(|| missing("identity.deleted.column", c))?
            }
        };
        crate::predicate::Equals::new(&t, &d.equals, cfg.timezone())
            .map_err(|m| config_err(cfg, "identity.deleted.equals", m))?;
    }
    if let Some(ts) = &cfg.partition.from_timestamp {
        let f = schema.field_with_name(ts).map_err(|_| missing("partition.from_timestamp", ts))?;
        if !matches!(f.data_type(), DataType::Timestamp(_, _) | DataType::Date32) {
            return Err(config_err(
                cfg,
                "partition.from_timestamp",
                format!(
                    "column `{ts}` has type {}; it must be a timestamp (declare it in [input.schema], e.g. \
                     `{ts} = \"timestamp\"`, or `\"timestamp(s)\"` for epoch seconds)",
                    f.data_type()
                ),
            ));
        }
    }
    Ok(())
}

/// The tombstone column of a job, and the columns its config names otherwise.
fn tombstone_of(cfg: &JobConfig) -> Option<read::Tombstone> {
    let d = cfg.identity.deleted.as_ref()?;
    let mut others: Vec<String> = cfg.input.schema.keys().cloned().collect();
    others.extend(cfg.identity.key.iter().cloned());
    others.extend(cfg.identity.version.iter().cloned());
    others.push(cfg.partition.column.clone());
    others.extend(cfg.partition.from_timestamp.iter().cloned());
    Some(read::Tombstone { column: d.column.clone(), others, optional: d.optional })
}

/// The type of an NDJSON tombstone column that no object read to plan has (a day without
/// deletes), when the config says objects may leave it out (`optional = true`): its declared
/// type, else Null (no value, no type). Not a misspelling of a column they have (checked
/// before), it is a column of nulls there.
fn absent_tombstone(cfg: &JobConfig) -> Option<DataType> {
    let d = cfg.identity.deleted.as_ref().filter(|d| d.optional && cfg.input.format == Format::Ndjson)?;
    match cfg.input.schema.get(&d.column).and_then(|t| read::parse_type(t).ok()) {
        Some(declared) => Some(read::unify::parquet_native(&declared.ty)),
        // No value, no type: a merge takes its table's, or asks for it to be declared.
        None => Some(DataType::Null),
    }
}

/// The column of `names` that `column` looks like a misspelling of: the same but for case, or
/// one or two letters off (of a name longer than three).
fn misspelling_of<'a>(column: &str, names: &'a [String]) -> Option<&'a str> {
    names
        .iter()
        .find(|n| n.eq_ignore_ascii_case(column) || (column.len() > 3 && strsim::levenshtein(n, column) <= 2))
        .map(String::as_str)
}

/// Reads the lookup tables of the daily table's query: every object under each table's URL,
/// read by column name and unified like the input.
async fn read_lookups(cfg: &JobConfig) -> Result<Vec<crate::engine::Lookup>> {
    let Some(agg) = &cfg.aggregate else { return Ok(Vec::new()) };
    let mut out = Vec::new();
    for (i, t) in agg.tables.iter().enumerate() {
        let key = format!("aggregate.tables[{i}].url");
        let store = crate::store::open(&t.url, &t.options, &key, false).map_err(|e| match e {
            ConfigError::Invalid { key, message, .. } => {
                ConfigError::Invalid { path: cfg.origin.clone(), key, message }
            }
            other => other,
        })?;
        let objects = list::objects(&store, &store.prefix).await?;
        if objects.is_empty() && list::names_an_object(&store).await {
            return Err(config_err(cfg, &key, list::object_not_folder(&t.url)));
        }
        if objects.is_empty() {
            return Err(config_err(cfg, &key, format!("the lookup table `{}` has no objects at {}", t.name, t.url)));
        }
        // A lookup of no bytes at all (not even a CSV header) is an upload cut short more
        // likely than a table meant empty, and joined it would empty every date it serves.
        if let Some(m) = objects.iter().find(|m| m.size == 0) {
            return Err(config_err(
                cfg,
                &key,
                format!(
                    "the lookup table `{}` has an empty object, {} (0 bytes): an upload cut short? A lookup meant to \
                     have no rows is a CSV header alone (with its `schema`); remove the object, or give it a name \
                     starting with `_` to have it ignored",
                    t.name,
                    store.display(&m.location)
                ),
            ));
        }
        // An object linked in from the table or its run state feeds each run's output into the
        // next, as a URL inside them would (refused with the config).
        let state = cfg.output.state_url();
        for m in &objects {
            let Some(file) = store.local_path(&m.location) else { break };
            let file = file.to_string_lossy();
            if let Some(url) =
                [Some(&cfg.output.url), state.as_ref()].into_iter().flatten().find(|u| list::nested(&file, u))
            {
                return Err(config_err(
                    cfg,
                    &key,
                    format!(
                        "the lookup table `{}` reads {}, which lies in `{url}`: the table's own files would be read \
                         back, and each run would give other numbers",
                        t.name,
                        store.display(&m.location)
                    ),
                ));
            }
        }
        // A folder `date=2026-11-01/` holds a value of its rows, as the input's date folders
        // do; a lookup is read as one plain table, so that value would be lost and every
        // folder's rows read alike (a join on the other columns would match each row once a
        // folder).
        if let Some((m, folder)) = objects.iter().find_map(|m| {
            let rel = store.relative(&m.location);
            let folders = rel.rsplit_once('/').map_or("", |(f, _)| f).to_string();
            let named = folders.split('/').find(|f| valued_folder(f))?;
            Some((m, named.to_string()))
        }) {
            return Err(config_err(
                cfg,
                &key,
                format!(
                    "the lookup table `{}` has objects in folders named like `{folder}/` ({}): a lookup table is read \
                     as one table, with no column from its folders' names, so their values would be lost and the \
                     rows of every folder read alike. Write the value into the files' rows, or give each folder \
                     its own lookup table",
                    t.name,
                    store.display(&m.location)
                ),
            ));
        }
        let decoder = Decoder {
            format: t.format,
            delimiter: t.delimiter.as_bytes().first().copied().unwrap_or(b','),
            header: t.header,
            date_source: DateSource::Path,
            tz: cfg.timezone(),
            declared: t.schema.iter().filter_map(|(c, ty)| read::parse_type(ty).ok().map(|d| (c.clone(), d))).collect(),
            required: Vec::new(),
            tombstone: None,
            run: None,
            version: None,
        };
        // Every row of a lookup belongs to it: read under one placeholder date.
        let day = NaiveDate::default();
        // A lookup's types are declared in its own `schema`, not the input's.
        let refused = |e: String| {
            let e = e
                .replace("[input.schema]", &format!("aggregate.tables[{i}].schema"))
                .replace("input.format", &format!("aggregate.tables[{i}].format"));
            config_err(cfg, &key, format!("the lookup table `{}`: {e}", t.name))
        };
        let mut pieces = Vec::new();
        for d in read::read_objects(&store, &decoder, &objects, &[day], Some(day)).await {
            let mut d = d.map_err(|e| refused(e.to_string()))?;
            if let Some(e) = d.bad.remove(&day) {
                return Err(refused(e.to_string()));
            }
            pieces.append(&mut d.pieces);
        }
        if let Some(why) = columns_differ(&pieces, t.format == Format::Ndjson) {
            return Err(refused(why));
        }
        let table = read::assemble(pieces, &decoder).map_err(|e| refused(e.to_string()))?;
        // A lookup with no rows (a CSV header alone) has its objects' columns, each of the type
        // its schema declares (a Parquet footer's otherwise); a text column left undeclared has
        // no type, and is not dropped.
        let table = match table.num_rows() {
            // NDJSON of no lines names no columns: those its schema declares.
            0 if !t.schema.is_empty() && t.format == Format::Ndjson => {
                let fields: Vec<arrow::datatypes::Field> =
                    decoder.declared.iter().map(|(c, d)| arrow::datatypes::Field::new(c, d.ty.clone(), true)).collect();
                read::Table::empty(Arc::new(arrow::datatypes::Schema::new(fields)))
            }
            0 if !t.schema.is_empty() => {
                let mut fields: Vec<arrow::datatypes::Field> = Vec::new();
                for m in &objects {
                    // (name, type in the object's own schema, if it has one)
                    let columns: Vec<(String, Option<DataType>)> = match t.format {
                        Format::Csv => {
                            let bytes = fetch(&store, m).await?;
                            let name = store.display(&m.location);
                            let names = decoder.csv_header(&name, &bytes).map_err(|e| refused(e.to_string()))?;
                            names.into_iter().map(|n| (n, None)).collect()
                        }
                        _ => {
                            let schema =
                                object_schema(&decoder, &store, m).await.map_err(|e| refused(e.to_string()))?;
                            schema.fields().iter().map(|f| (f.name().clone(), Some(f.data_type().clone()))).collect()
                        }
                    };
                    for (column, own) in columns {
                        if fields.iter().any(|g| *g.name() == column) {
                            continue;
                        }
                        let ty = match (decoder.declared.get(&column), own) {
                            (Some(d), _) => d.ty.clone(),
                            (None, Some(own)) if t.format == Format::Parquet => own,
                            (None, _) => {
                                return Err(config_err(
                                    cfg,
                                    &format!("aggregate.tables[{i}].schema"),
                                    format!(
                                        "the lookup table `{}` has no rows, so its column `{column}` has no type: \
                                         declare it in its `schema` beside the others",
                                        t.name
                                    ),
                                ))
                            }
                        };
                        fields.push(arrow::datatypes::Field::new(column, ty, true));
                    }
                }
                read::Table::empty(Arc::new(arrow::datatypes::Schema::new(fields)))
            }
            0 => {
                return Err(config_err(
                    cfg,
                    &format!("aggregate.tables[{i}].schema"),
                    format!(
                        "the lookup table `{}` has no rows, so its columns have no types: declare them in its \
                         `schema`",
                        t.name
                    ),
                ))
            }
            _ => table,
        };
        let has: Vec<String> = table.schema().fields().iter().map(|f| f.name().clone()).collect();
        if let Some(c) = t.schema.keys().find(|c| !has.contains(c)) {
            return Err(config_err(
                cfg,
                &format!("aggregate.tables[{i}].schema"),
                format!("the lookup table `{}` has no column `{c}` (it has: {})", t.name, has.join(", ")),
            ));
        }
        let (schema, batches) =
            crate::engine::lookup_in_job_zone(table.schema(), table.chunks().to_vec(), cfg.timezone())
                .map_err(|e| config_err(cfg, &key, format!("the lookup table `{}`: {e}", t.name)))?;
        let inputs = objects
            .iter()
            .map(|m| InputObject {
                path: format!("{}:{}", t.name, store.relative(&m.location)),
                size: m.size,
                e_tag: m.e_tag.clone(),
            })
            .collect();
        out.push(crate::engine::Lookup { name: t.name.clone(), schema, batches, inputs });
    }
    Ok(out)
}

/// Why a lookup's objects cannot be read as one table, if they cannot: one lacks a column
/// another has. Its rows would hold nulls there, and join nothing on it (a producer that
/// renamed `currency` to `ccy`: its rates silently lost). In NDJSON (`optional_fields`) a
/// field left out is how a null is written: only objects that each have a column the other
/// lacks (a rename) are refused.
fn columns_differ(pieces: &[read::Piece], optional_fields: bool) -> Option<String> {
    // Each set of columns once, with the first object that has it.
    let mut sets: Vec<(Vec<String>, &str)> = Vec::new();
    for p in pieces {
        let columns: Vec<String> = p.batch.schema().fields().iter().map(|f| f.name().clone()).collect();
        if !sets.iter().any(|(c, _)| *c == columns) {
            sets.push((columns, p.object.as_ref()));
        }
    }
    let within = |a: &[String], b: &[String]| a.iter().all(|c| b.contains(c));
    sets.iter().enumerate().find_map(|(i, (a, a_object))| {
        sets[i + 1..].iter().find_map(|(b, b_object)| {
            if optional_fields && (within(a, b) || within(b, a)) {
                return None;
            }
            let ((lacking, lacking_object), other, column) = match a.iter().find(|c| !b.contains(c)) {
                Some(c) => ((b, b_object), a_object, c),
                None => ((a, a_object), b_object, b.iter().find(|c| !a.contains(c))?),
            };
            Some(format!(
                "the object {lacking_object} has no column `{column}`, which {other} has (its columns: {}). A \
                 lookup's objects are read as one table, and its rows would hold nulls in that column and join \
                 nothing on it: give every object the same columns",
                lacking.join(", ")
            ))
        })
    })
}

impl Plan {
    /// Adds partitions for dates found in a flat input (a merge without a range), or for
    /// stored dates a merge rebuilds.
    pub fn add_partitions(&mut self, cfg: &JobConfig, dates: &[NaiveDate]) {
        for &date in dates {
            let dir = commit::partition_dir(&cfg.partition.column, date);
            let inputs = match self.layout {
                Layout::Flat => objects_for(&self.objects, &self.object_dates, date),
                Layout::Hive => Vec::new(),
            };
            self.partitions.push(PartitionPlan { date, dir, inputs, seen: Seen::default() });
        }
    }

    /// Looks up the committed object of every partition (for `--dry-run`; a run reads it again
    /// under the partition's lease, which is the state its swap compares with).
    pub async fn look_up_targets(&mut self, output: &StoreLocation) -> Result<()> {
        for p in &mut self.partitions {
            p.seen.meta =
                commit::head(output, &commit::target_path(output, &p.dir)).await.map_err(Error::of_partition)?;
        }
        Ok(())
    }

    /// A partition's input objects as recorded in lineage: its objects (paths relative to the
    /// input URL) and the lookup tables' (`<table>:<path>`).
    pub fn lineage_inputs(&self, p: &PartitionPlan, input: &StoreLocation) -> Vec<InputObject> {
        let mut v = p.lineage_inputs(input);
        v.extend(self.lookups.iter().flat_map(|l| l.inputs.iter().cloned()));
        v
    }

    /// The plan as text, for `--dry-run`; `verdicts`: what a run would do with a date where the
    /// plan alone does not tell (skip it, fail it for what its folder holds, …).
    pub fn describe(
        &self,
        input: &StoreLocation,
        output: &StoreLocation,
        verdicts: &BTreeMap<NaiveDate, String>,
    ) -> String {
        let mut s = String::new();
        let layout = match self.layout {
            Layout::Hive => "Hive-partitioned (only the folders of the planned dates, and of the dates they are checked against, are read)",
            Layout::Flat => "flat (row-group statistics prune what is decoded)",
        };
        let _ = writeln!(s, "input  {} — {layout}", input.url);
        let _ = writeln!(s, "output {}", output.url);
        let _ = writeln!(s, "{} partition(s):", self.partitions.len());
        for p in &self.partitions {
            let bytes: u64 = p.inputs.iter().map(|m| m.size).sum();
            let action = match (&p.seen.meta, p.inputs.is_empty()) {
                _ if verdicts.contains_key(&p.date) => verdicts[&p.date].as_str(),
                (_, true) => "no input: would fail (or be written empty with --allow-empty)",
                (Some(_), false) => "would replace (or keep, when unchanged)",
                (None, false) => "would create",
            };
            let _ = writeln!(s, "  {}  {} object(s), {} bytes  {action}", p.dir, p.inputs.len(), bytes);
            for m in p.inputs.iter().take(if self.layout == Layout::Hive { usize::MAX } else { 0 }) {
                let _ = writeln!(s, "      {}", input.relative(&m.location));
            }
        }
        if !self.others.is_empty() {
            let dates: Vec<String> = self.others.iter().map(|p| p.date.to_string()).collect();
            let _ = writeln!(
                s,
                "{} other date(s) whose keys these are checked against (no key under two dates), not written: {}",
                dates.len(),
                dates.join(", ")
            );
        }
        if self.layout == Layout::Flat {
            let _ = writeln!(s, "input objects ({}):", self.objects.len());
            for m in &self.objects {
                let _ = writeln!(s, "      {}", input.relative(&m.location));
            }
        }
        for l in self.lookups.iter() {
            let _ = writeln!(s, "lookup table {}: {} object(s)", l.name, l.inputs.len());
        }
        if let Some(q) = &self.query_plan {
            let _ = writeln!(s, "query plan (each date):");
            for line in q.lines() {
                let _ = writeln!(s, "  {line}");
            }
        }
        s
    }
}
