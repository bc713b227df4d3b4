//! Compute, `kind = "merge"`: a version-guarded upsert of one partition's prepared batch into
//! the stored current state (docs/design.md §2).
//!
//! An incoming row replaces the stored row of its key only when its version is strictly
//! greater. A replay (equal version, equal payload) changes nothing; equal version with
//! another payload is a conflict; an older version is ignored and counted. A delete with a
//! greater version removes the key and leaves a *tombstone* (key and version), so an older
//! version arriving later never brings the key back. Tombstones are kept in an object beside
//! the partition file ([`crate::sidecar`]), named by its footer, outside what readers read, and
//! swap in atomically with the rows they belong to; with `[merge] tombstone_retention` they are
//! dropped once older than it, at the next write of their partition.
//!
//! Invariants: the output holds one row per live key, sorted by key; its bytes depend only on
//! the resulting state (no input fingerprint, no counts), so any order of batches that leads
//! to the same state gives the same file.

use std::cmp::Ordering;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, DynComparator, Int64Array, RecordBatch, UInt32Array};
use arrow::compute::{interleave, take, SortOptions};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::row::{RowConverter, SortField};
use base64::Engine;
use bytes::Bytes;
use hashbrown::HashMap;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use serde::{Deserialize, Serialize};

use crate::error::{ConflictKey, InputError, Location, PartitionError};
use crate::predicate;
use crate::prepare::{render_key, version_values, Identity, Prepared};

/// What a merge did to one partition.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MergeStats {
    pub inserted: u64,
    pub updated: u64,
    pub deleted: u64,
    pub unchanged: u64,
    pub ignored_older: u64,
    /// Incoming rows set aside as conflicts (`on_conflict = "quarantine"`; with the default
    /// `fail` the partition fails instead): with a stored key's version but another payload,
    /// and, in a run's report, with another row of the batch too.
    pub conflicts: u64,
    /// Keys that moved here from another date (their newest version carries this date).
    #[serde(default)]
    pub moved_in: u64,
    /// Keys that moved from here to another date.
    #[serde(default)]
    pub moved_out: u64,
    /// Tombstones dropped by the retention.
    #[serde(default)]
    pub expired_tombstones: u64,
}

/// A key moved from one date to another by a merge: its version now lives under `to`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Move {
    pub key: String,
    pub version: i64,
    pub from: chrono::NaiveDate,
    pub to: chrono::NaiveDate,
}

/// A merged partition: the live rows, sorted by key, and the tombstones (keys + `version`).
#[derive(Debug)]
pub struct Merged {
    pub rows: RecordBatch,
    pub tombstones: RecordBatch,
    pub stats: MergeStats,
    /// Incoming rows (of the prepared table) set aside as conflicts.
    pub quarantined: Vec<u32>,
}

/// The output schema of a merge: the input's columns without the partition column, which
/// lives in the path.
pub fn output_schema(input: &Schema, partition_column: &str) -> SchemaRef {
    Arc::new(Schema::new(
        input
            .fields()
            .iter()
            .filter(|f| f.name() != partition_column)
            .map(|f| f.as_ref().clone().with_nullable(true))
            .collect::<Vec<_>>(),
    ))
}

/// The schema of the tombstones: the key columns and the version as int64.
pub fn tombstone_schema(output: &Schema, key: &[String]) -> SchemaRef {
    let mut fields: Vec<Field> =
        key.iter().filter_map(|k| output.field_with_name(k).ok()).map(|f| f.clone().with_nullable(true)).collect();
    fields.push(Field::new("version", DataType::Int64, true));
    Arc::new(Schema::new(fields))
}

/// Encodes tombstones as a Parquet file (the object the footer names).
pub fn encode_tombstones(t: &RecordBatch) -> Result<Bytes, PartitionError> {
    let mut buf = Vec::new();
    let err = |e: parquet::errors::ParquetError| PartitionError::Other(format!("encoding tombstones: {e}"));
    let props = parquet::file::properties::WriterProperties::builder()
        .set_compression(parquet::basic::Compression::ZSTD(Default::default()))
        .set_created_by(crate::lineage::tool())
        .build();
    let mut w = parquet::arrow::ArrowWriter::try_new(&mut buf, t.schema(), Some(props)).map_err(err)?;
    w.write(t).map_err(err)?;
    w.close().map_err(err)?;
    Ok(Bytes::from(buf))
}

/// Where a stored partition keeps its tombstones.
#[derive(Debug, Clone, PartialEq)]
pub enum TombstonesAt {
    None,
    /// In an object beside the file.
    Object(crate::sidecar::Reference),
    /// In the footer itself, base64 (tables written before the objects existed).
    Footer(Bytes),
}

/// What a stored partition file's footer says of its tombstones, and every object it names.
pub fn stored_refs(file: &Bytes) -> Result<(TombstonesAt, Vec<String>), PartitionError> {
    let meta = ParquetRecordBatchReaderBuilder::try_new(file.clone())
        .map_err(|e| PartitionError::Other(format!("the stored partition cannot be read: {e}")))?;
    let kv = meta.metadata().file_metadata().key_value_metadata();
    let refs = crate::sidecar::referenced(kv);
    let named = refs.iter().map(|(_, r)| r.object.clone()).collect();
    if let Some((_, r)) = refs.iter().find(|(k, _)| *k == crate::sidecar::Kind::Tombstones) {
        return Ok((TombstonesAt::Object(r.clone()), named));
    }
    let key = crate::sidecar::Kind::Tombstones.footer_key();
    let inline = kv.and_then(|kv| kv.iter().find(|k| k.key == key)).and_then(|k| k.value.clone());
    match inline {
        Some(b64) => {
            let raw = base64::engine::general_purpose::STANDARD
                .decode(b64)
                .map_err(|e| PartitionError::Other(format!("the stored tombstones are damaged: {e}")))?;
            Ok((TombstonesAt::Footer(Bytes::from(raw)), named))
        }
        None => Ok((TombstonesAt::None, named)),
    }
}

fn decode_parquet(
    bytes: Bytes,
    schema: &SchemaRef,
    what: &str,
    rebuild: Option<chrono_tz::Tz>,
) -> Result<RecordBatch, PartitionError> {
    let bad = |m: String| PartitionError::Other(format!("the stored {what} cannot be read: {m}"));
    let reader = ParquetRecordBatchReaderBuilder::try_new(bytes).map_err(|e| bad(e.to_string()))?;
    let got = reader.schema().clone();
    let differences = crate::schema::differences(&got, schema);
    if !differences.is_empty() && rebuild.is_none() {
        return Err(PartitionError::OutputSchema { why: format!("the stored {what}: {}", differences.join("; ")) });
    }
    let batches: Vec<RecordBatch> =
        reader.build().map_err(|e| bad(e.to_string()))?.collect::<Result<_, _>>().map_err(|e| bad(e.to_string()))?;
    let relaxed = Arc::new(Schema::new(
        schema.fields().iter().map(|f| f.as_ref().clone().with_nullable(true)).collect::<Vec<_>>(),
    ));
    // A rebuild under a new schema: the stored rows by column name, added columns null,
    // removed ones dropped, every value converted exactly.
    let batches: Vec<RecordBatch> = match rebuild {
        Some(tz) => {
            batches.iter().map(|b| crate::read::unify::conform(b, &relaxed, tz)).collect::<Result<_, _>>().map_err(
                |(c, e)| {
                    // Not the store's failure, nor one a retry passes: the run's schema cannot hold
                    // the stored rows (a text input whose types were inferred from other values).
                    PartitionError::Input(crate::error::InputError::bad(
                        crate::error::Location {
                            object: format!("the stored {what}"),
                            row: None,
                            line: None,
                            column: Some(c.clone()),
                        },
                        format!(
                        "{}: the rebuilt table's type of `{c}` cannot hold its stored values. Where the input is CSV \
                         or NDJSON, its types are inferred from each run's values: declare the column's type in \
                         [input.schema] as the table has it",
                        e.message
                    ),
                    ))
                },
            )?
        }
        // The same types, but for the encoding of text (a table written as `large_string`).
        None => batches
            .into_iter()
            .map(|b| {
                let columns = b
                    .columns()
                    .iter()
                    .zip(relaxed.fields())
                    .map(|(c, f)| match c.data_type() == f.data_type() {
                        true => Ok(c.clone()),
                        false => arrow::compute::cast(c, f.data_type()),
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                RecordBatch::try_new(relaxed.clone(), columns)
            })
            .collect::<Result<_, _>>()
            .map_err(|e| bad(e.to_string()))?,
    };
    arrow::compute::concat_batches(&relaxed, &batches).map_err(|e| bad(e.to_string()))
}

/// Reads a stored partition file: its rows and its tombstones.
/// Reads a stored partition: its rows (from `file`) and its tombstones (`tombstones`: the
/// Parquet file of them, when there are any). With `rebuild` (the table's schema changes:
/// `--schema-change rebuild`), stored rows are converted to `output` by column name, in the
/// job's time zone.
pub fn read_stored(
    file: &Bytes,
    tombstones: Option<Bytes>,
    output: &SchemaRef,
    tombs: &SchemaRef,
    rebuild: Option<chrono_tz::Tz>,
) -> Result<(RecordBatch, RecordBatch), PartitionError> {
    let rows = decode_parquet(file.clone(), output, "partition", rebuild)?;
    let tombstones = match tombstones {
        Some(b) => decode_parquet(b, tombs, "tombstones", rebuild)?,
        None => RecordBatch::new_empty(Arc::new(Schema::new(
            tombs.fields().iter().map(|f| f.as_ref().clone().with_nullable(true)).collect::<Vec<_>>(),
        ))),
    };
    Ok((rows, tombstones))
}

/// Calls `f(row, key bytes)` for every row of `batch`, the key bytes as [`crate::prepare`]
/// makes them (so their hashes agree with the prepared batch's).
pub fn each_key(batch: &RecordBatch, key: &[String], mut f: impl FnMut(usize, &[u8])) -> Result<(), String> {
    let cols: Vec<ArrayRef> = key
        .iter()
        .map(|k| batch.column_by_name(k).cloned().ok_or(format!("no key column `{k}`")))
        .collect::<Result<_, _>>()?;
    let chunks: Vec<Vec<ArrayRef>> = (0..batch.num_rows())
        .step_by(crate::read::CHUNK_ROWS)
        .map(|at| {
            let len = crate::read::CHUNK_ROWS.min(batch.num_rows() - at);
            cols.iter().map(|c| c.slice(at, len)).collect()
        })
        .collect();
    let keys = crate::prepare::key_bytes(&chunks)?;
    for (c, chunk) in chunks.iter().enumerate() {
        let n = chunk.first().map_or(0, |a| a.len());
        for i in 0..n {
            f(c * crate::read::CHUNK_ROWS + i, keys.get((c << crate::read::CHUNK_BITS) | i));
        }
    }
    Ok(())
}

/// The key index of a partition: the sorted hashes of the keys of its rows and tombstones.
pub fn key_index(rows: &RecordBatch, tombs: &RecordBatch, key: &[String]) -> Result<Vec<u64>, String> {
    use std::hash::BuildHasher;
    let hasher = crate::prepare::key_hasher();
    let mut v = Vec::with_capacity(rows.num_rows() + tombs.num_rows());
    each_key(rows, key, |_, k| v.push(hasher.hash_one(k)))?;
    each_key(tombs, key, |_, k| v.push(hasher.hash_one(k)))?;
    v.sort_unstable();
    v.dedup();
    Ok(v)
}

/// `batch` without the rows whose key is in `keys`, and how many went.
pub fn without_keys(
    batch: &RecordBatch,
    key: &[String],
    keys: &std::collections::HashSet<Vec<u8>>,
) -> Result<(RecordBatch, u64), String> {
    if keys.is_empty() {
        return Ok((batch.clone(), 0));
    }
    let mut keep = Vec::with_capacity(batch.num_rows());
    each_key(batch, key, |_, k| keep.push(!keys.contains(k)))?;
    let gone = keep.iter().filter(|k| !**k).count() as u64;
    let mask = arrow::array::BooleanArray::from(keep);
    Ok((arrow::compute::filter_record_batch(batch, &mask).map_err(|e| e.to_string())?, gone))
}

/// Tombstones without those whose version is older than `cutoff`, and how many went.
pub fn expire(tombs: &RecordBatch, cutoff: i64) -> Result<(RecordBatch, u64), String> {
    let Some(v) = tombs.column_by_name("version") else { return Ok((tombs.clone(), 0)) };
    let v = v.as_any().downcast_ref::<Int64Array>().ok_or("tombstone versions are not int64")?;
    let keep: arrow::array::BooleanArray = v.iter().map(|x| Some(x.is_none_or(|x| x >= cutoff))).collect();
    let gone = keep.iter().filter(|k| *k == Some(false)).count() as u64;
    Ok((arrow::compute::filter_record_batch(tombs, &keep).map_err(|e| e.to_string())?, gone))
}

#[derive(Clone, Copy)]
enum Slot {
    /// A stored row, by index; `None` once dropped.
    Row(u32),
    /// A stored tombstone.
    Tomb(u32),
}

/// What the incoming rows change: rows and tombstones to add, and the counts.
#[derive(Default)]
struct Changes {
    stats: MergeStats,
    rows: Vec<usize>,
    tombs: Vec<usize>,
}

/// Takes incoming row `r` as the key's new state: a tombstone when it is a delete, else a row
/// (an update when it replaces a stored row, an insert otherwise).
fn adopt(c: &mut Changes, r: usize, delete: bool, replaces_row: bool) {
    if delete {
        c.tombs.push(r);
        c.stats.deleted += 1;
    } else {
        c.rows.push(r);
        if replaces_row {
            c.stats.updated += 1;
        } else {
            c.stats.inserted += 1;
        }
    }
}

/// Where an output row or tombstone comes from: 0 = stored, 1 = incoming.
type Src = (usize, usize);

/// The stored rows not `dropped` and the `new` ones (row of `incoming`, key), sorted by key,
/// as one batch of `schema`.
fn sorted_union<'a>(
    stored: &RecordBatch,
    dropped: &[bool],
    stored_keys: &'a arrow::row::Rows,
    incoming: &RecordBatch,
    new: impl Iterator<Item = (usize, &'a [u8])>,
    schema: SchemaRef,
) -> Result<RecordBatch, String> {
    let mut rows: Vec<(Src, &[u8])> = (0..stored.num_rows())
        .filter(|&i| !dropped[i])
        .map(|i| ((0, i), stored_keys.row(i).data()))
        .chain(new.map(|(r, k)| ((1, r), k)))
        .collect();
    rows.sort_unstable_by(|a, b| a.1.cmp(b.1));
    let idx: Vec<Src> = rows.iter().map(|(s, _)| *s).collect();
    let columns: Vec<ArrayRef> = (0..schema.fields().len())
        .map(|c| interleave(&[stored.column(c).as_ref(), incoming.column(c).as_ref()], &idx))
        .collect::<Result<_, _>>()
        .map_err(|e| e.to_string())?;
    RecordBatch::try_new(schema, columns).map_err(|e| e.to_string())
}

/// Applies one partition's prepared batch to its stored state.
pub fn merge(
    p: &Prepared,
    id: &Identity,
    output: &SchemaRef,
    tomb_schema: &SchemaRef,
    stored: Option<(RecordBatch, RecordBatch)>,
) -> Result<Merged, PartitionError> {
    let other = |m: String| PartitionError::Other(format!("merge: {m}"));
    // The incoming rows as one batch, addressed by row number (`Table::dense`), with one zero
    // and one NaN: rows that differ only there are one row, so which of them is stored must
    // not depend on their order.
    let batch = &p.table.concat().map_err(|e| other(e.to_string()))?;
    let inc_cols: Vec<ArrayRef> = output
        .fields()
        .iter()
        .map(|f| {
            let c = batch.column_by_name(f.name()).ok_or_else(|| other(format!("no column `{}`", f.name())))?;
            Ok(crate::prepare::one_zero_one_nan(c))
        })
        .collect::<Result<_, PartitionError>>()?;
    let inc = RecordBatch::try_new(
        Arc::new(Schema::new(
            output.fields().iter().map(|f| f.as_ref().clone().with_nullable(true)).collect::<Vec<_>>(),
        )),
        inc_cols,
    )
    .map_err(|e| other(e.to_string()))?;
    let (stored_rows, stored_tombs) = match stored {
        Some(s) => s,
        None => (RecordBatch::new_empty(inc.schema()), RecordBatch::new_empty(tomb_schema.clone())),
    };
    let version_col = id.version.as_ref().ok_or_else(|| other("a merge needs a version column".into()))?;
    let key_of = |b: &RecordBatch| -> Result<Vec<ArrayRef>, PartitionError> {
        id.key
            .iter()
            .map(|k| b.column_by_name(k).cloned().ok_or_else(|| other(format!("no key column `{k}`"))))
            .collect()
    };
    let (inc_keys, stored_keys, tomb_keys) = (key_of(&inc)?, key_of(&stored_rows)?, key_of(&stored_tombs)?);
    let conv = RowConverter::new(inc_keys.iter().map(|c| SortField::new(c.data_type().clone())).collect())
        .map_err(|e| other(e.to_string()))?;
    // One zero and one NaN, as prepare's keys.
    let conv_rows = |cols: &[ArrayRef]| {
        let cols: Vec<ArrayRef> = cols.iter().map(crate::prepare::one_zero_one_nan).collect();
        conv.convert_columns(&cols).map_err(|e| other(e.to_string()))
    };
    let (inc_k, stored_k, tomb_k) = (conv_rows(&inc_keys)?, conv_rows(&stored_keys)?, conv_rows(&tomb_keys)?);
    let inc_v = version_values(batch.column_by_name(version_col).ok_or_else(|| other("no version column".into()))?)
        .map_err(other)?;
    let stored_v =
        version_values(stored_rows.column_by_name(version_col).ok_or_else(|| other("no version column".into()))?)
            .map_err(other)?;
    let tomb_v: Vec<i64> = stored_tombs
        .column_by_name("version")
        .map(|c| c.as_any().downcast_ref::<Int64Array>().map(|a| a.values().to_vec()).unwrap_or_default())
        .unwrap_or_default();
    let is_delete = match &id.deleted {
        Some(d) => {
            let col = batch.column_by_name(&d.column).ok_or_else(|| other("no tombstone column".into()))?;
            Some(predicate::Equals::rows(col, &d.equals, id.tz).map_err(other)?)
        }
        None => None,
    };

    // A wall-clock version in the hour the zone repeats cannot be ordered against a stored one.
    let version_type = batch.column_by_name(version_col).map(|c| c.data_type().clone()).unwrap_or(DataType::Null);
    let unordered = crate::prepare::Unordered::new(&version_type, id.tz, inc_v.iter().chain(&*stored_v).chain(&tomb_v));
    let mut unordered_at: Option<(u32, usize, i64, i64)> = None;
    let mut state: HashMap<&[u8], Slot> = HashMap::with_capacity(stored_rows.num_rows() + stored_tombs.num_rows());
    for i in 0..stored_rows.num_rows() {
        state.insert(stored_k.row(i).data(), Slot::Row(i as u32));
    }
    for i in 0..stored_tombs.num_rows() {
        state.insert(tomb_k.row(i).data(), Slot::Tomb(i as u32));
    }
    let mut cmps: Option<Vec<DynComparator>> = None;
    let mut payload_eq = |r: usize, s: usize| -> Result<bool, PartitionError> {
        if cmps.is_none() {
            cmps = Some(
                inc.columns()
                    .iter()
                    .zip(stored_rows.columns())
                    .map(|(a, b)| {
                        // A stored zero's sign or NaN's bits (from before) tell no row apart.
                        let b = crate::prepare::one_zero_one_nan(b);
                        arrow::array::make_comparator(a.as_ref(), b.as_ref(), SortOptions::default())
                    })
                    .collect::<Result<_, _>>()
                    .map_err(|e| other(e.to_string()))?,
            );
        }
        Ok(cmps.as_ref().is_some_and(|c| c.iter().all(|f| f(r, s) == Ordering::Equal)))
    };

    let mut changes = Changes::default();
    let mut dropped_rows = vec![false; stored_rows.num_rows()];
    let mut dropped_tombs = vec![false; stored_tombs.num_rows()];
    let mut conflicts: Vec<(u32, ConflictKey)> = Vec::new();
    let conflict = |list: &mut Vec<(u32, ConflictKey)>, w: u32, r: usize, other: String| {
        let key = ConflictKey {
            key: render_key(&inc_keys, r),
            version: Some(crate::prepare::show_version(&version_type, inc_v[r])),
            at: vec![p.table.locate(w as usize, None), Location::object(other)],
        };
        list.push((w, key));
    };
    for &w in &p.winners {
        let r = p.table.dense(w as usize);
        let (v, del) = (inc_v[r], is_delete.as_ref().is_some_and(|m| m.value(r)));
        let found = state.get(inc_k.row(r).data()).copied();
        let stored_version = match found {
            Some(Slot::Row(s)) => Some(stored_v[s as usize]),
            Some(Slot::Tomb(t)) => tomb_v.get(t as usize).copied(),
            None => None,
        };
        if let Some(sv) = stored_version.filter(|&sv| unordered.apart(v, sv)) {
            unordered_at.get_or_insert((w, r, v, sv));
        }
        match found {
            None => adopt(&mut changes, r, del, false),
            Some(Slot::Row(s)) => match v.cmp(&stored_v[s as usize]) {
                Ordering::Greater => {
                    dropped_rows[s as usize] = true;
                    adopt(&mut changes, r, del, true);
                }
                Ordering::Equal if !del && payload_eq(r, s as usize)? => changes.stats.unchanged += 1,
                Ordering::Equal => conflict(&mut conflicts, w, r, format!("the stored partition, row {s}")),
                Ordering::Less => changes.stats.ignored_older += 1,
            },
            Some(Slot::Tomb(t)) => match v.cmp(&tomb_v.get(t as usize).copied().unwrap_or(i64::MIN)) {
                Ordering::Greater => {
                    dropped_tombs[t as usize] = true;
                    adopt(&mut changes, r, del, false);
                }
                Ordering::Equal if del => changes.stats.unchanged += 1,
                Ordering::Equal => conflict(&mut conflicts, w, r, "a delete of the same version".to_string()),
                Ordering::Less => changes.stats.ignored_older += 1,
            },
        }
    }
    // A stored row or tombstone a newer version replaced (`dropped_…`): the batch's older rows
    // at its version must be that row (or a delete), as they would be in one batch with it.
    if p.stats.superseded > 0 {
        let mut winner = vec![false; inc.num_rows()];
        p.winners.iter().for_each(|&w| winner[p.table.dense(w as usize)] = true);
        for (r, id) in p.table.ids().enumerate() {
            if winner[r] || p.quarantined.binary_search(&(id as u32)).is_ok() {
                continue;
            }
            let del = is_delete.as_ref().is_some_and(|m| m.value(r));
            match state.get(inc_k.row(r).data()).copied() {
                Some(Slot::Row(s))
                    if dropped_rows[s as usize]
                        && inc_v[r] == stored_v[s as usize]
                        && (del || !payload_eq(r, s as usize)?) =>
                {
                    conflict(&mut conflicts, id as u32, r, format!("the stored partition, row {s}"))
                }
                Some(Slot::Tomb(t))
                    if dropped_tombs[t as usize] && tomb_v.get(t as usize) == Some(&inc_v[r]) && !del =>
                {
                    conflict(&mut conflicts, id as u32, r, "a delete of the same version".into())
                }
                _ => {}
            }
        }
    }
    if let Some((w, r, v, sv)) = unordered_at {
        let show = |x: i64| crate::prepare::show_version(&version_type, x);
        return Err(InputError::bad(
            p.table.locate(w as usize, Some(version_col)),
            format!(
                "key {}: version {} and the stored version {} are both {}",
                render_key(&inc_keys, r),
                show(v),
                show(sv),
                crate::prepare::unordered_reason(id.tz)
            ),
        )
        .into());
    }
    let Changes { mut stats, rows: new_rows, tombs: new_tombs } = changes;
    let (conflict_rows, mut conflicts): (Vec<u32>, Vec<ConflictKey>) = conflicts.into_iter().unzip();
    let mut quarantined = Vec::new();
    if !conflicts.is_empty() && id.on_conflict == crate::config::OnConflict::Quarantine {
        // The stored state of those keys stays; the incoming rows are set aside.
        stats.conflicts = conflict_rows.len() as u64;
        quarantined = conflict_rows;
        quarantined.sort_unstable();
    } else if !conflicts.is_empty() {
        conflicts.sort_by(|a, b| a.key.cmp(&b.key));
        // Rows alike in conflict with one stored row are one conflict.
        conflicts.dedup_by(|a, b| a.key == b.key && a.version == b.version);
        let total = conflicts.len();
        conflicts.truncate(5);
        return Err(PartitionError::Conflict { keys: conflicts, total });
    }

    // Live rows: the stored ones kept, and the new ones; sorted by key.
    let new = new_rows.iter().map(|&r| (r, inc_k.row(r).data()));
    let out_rows = sorted_union(&stored_rows, &dropped_rows, &stored_k, &inc, new, output.clone()).map_err(other)?;

    // Tombstones: the stored ones kept, and the new ones; sorted by key.
    let inc_tomb_keys: Vec<ArrayRef> = inc_keys
        .iter()
        .map(|k| take(k.as_ref(), &UInt32Array::from(new_tombs.iter().map(|&r| r as u32).collect::<Vec<_>>()), None))
        .collect::<Result<_, _>>()
        .map_err(|e| other(e.to_string()))?;
    let mut inc_tomb_cols = inc_tomb_keys;
    inc_tomb_cols.push(Arc::new(Int64Array::from(new_tombs.iter().map(|&r| inc_v[r]).collect::<Vec<_>>())));
    let inc_tombs = RecordBatch::try_new(stored_tombs.schema(), inc_tomb_cols).map_err(|e| other(e.to_string()))?;
    let new = new_tombs.iter().enumerate().map(|(j, &r)| (j, inc_k.row(r).data()));
    let tombstones =
        sorted_union(&stored_tombs, &dropped_tombs, &tomb_k, &inc_tombs, new, stored_tombs.schema()).map_err(other)?;
    Ok(Merged { rows: out_rows, tombstones, stats, quarantined })
}
