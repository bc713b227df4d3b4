//! Compute, `kind = "aggregate"`: one partition's winning rows grouped by the configured
//! dimensions into measures (SPEC §2.4).
//!
//! Invariants: decimal sums are exact (`i128`, widened to decimal(38, s); overflow is an
//! error naming the measure), never floating point; a `sum` or `count` over no matching rows
//! is 0, not null; rows come out sorted by the group-by columns, so the same rows always give
//! the same batch.

use std::hash::BuildHasher;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, Decimal128Array, Float64Array, Int64Array, RecordBatch};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::row::{RowConverter, SortField};
use hashbrown::{HashMap, HashTable};

use crate::config::{AggregateSection, Measure, MeasureFn};
use crate::error::PartitionError;
use crate::predicate;
use crate::prepare::{key_bytes, with_keys, Keys, Prepared};
use crate::read::{split_id, IdCmp, Table};

const MAX_DECIMAL38: i128 = 99_999_999_999_999_999_999_999_999_999_999_999_999;

/// The output type of a measure over a column of type `input` (None for `count`).
pub fn measure_type(m: &Measure, input: Option<&DataType>) -> Result<DataType, String> {
    Ok(match (m.func, input) {
        (MeasureFn::Count | MeasureFn::CountDistinct, _) => DataType::Int64,
        (MeasureFn::Sum, Some(DataType::Decimal128(_, s))) => DataType::Decimal128(38, *s),
        (MeasureFn::Sum, Some(t)) if t.is_integer() => DataType::Int64,
        (MeasureFn::Sum, Some(t)) if t.is_floating() => DataType::Float64,
        (MeasureFn::Sum, Some(t)) => return Err(format!("sum needs a decimal, integer or float column, not {t}")),
        (MeasureFn::Min | MeasureFn::Max, Some(t)) => {
            RowConverter::new(vec![SortField::new(t.clone())])
                .map_err(|_| format!("min/max cannot order values of type {t}"))?;
            t.clone()
        }
        (_, None) => return Err("needs a column".into()),
    })
}

/// The output schema: group-by columns, then the measures.
pub fn output_schema(agg: &AggregateSection, input: &Schema) -> Result<SchemaRef, String> {
    let mut fields = Vec::new();
    for g in &agg.group_by {
        let f = input.field_with_name(g).map_err(|_| format!("no group-by column `{g}` in the input"))?;
        fields.push(Field::new(g, f.data_type().clone(), true));
    }
    for m in &agg.measures {
        let t = match &m.column {
            Some(c) => Some(input.field_with_name(c).map_err(|_| format!("no column `{c}` in the input"))?.data_type()),
            None => None,
        };
        let ty = measure_type(m, t).map_err(|e| format!("measure `{}`: {e}", m.name))?;
        let nullable = matches!(m.func, MeasureFn::Min | MeasureFn::Max);
        fields.push(Field::new(&m.name, ty, nullable));
    }
    Ok(Arc::new(Schema::new(fields)))
}

/// Aggregates the winning rows of one partition, reading the columns in place (no copies).
/// With `threads > 1`, measures are computed side by side.
pub fn aggregate(
    p: &Prepared,
    agg: &AggregateSection,
    schema: &SchemaRef,
    threads: usize,
) -> Result<RecordBatch, PartitionError> {
    let other = |m: String| PartitionError::Other(format!("aggregate: {m}"));
    let table = &p.table;
    let col_of = |name: &str| -> Result<Vec<ArrayRef>, PartitionError> {
        table.column(name).ok_or_else(|| other(format!("no column `{name}`")))
    };
    let rows: &[u32] = &p.winners;
    let n = rows.len();

    // Group ids, in order of first appearance; `firsts` holds each group's first row.
    let group_cols: Vec<Vec<ArrayRef>> = agg.group_by.iter().map(|g| col_of(g)).collect::<Result<_, _>>()?;
    let (group_of, firsts): (Vec<u32>, Vec<u32>) = if group_cols.is_empty() {
        if p.stats.input_rows == 0 {
            (vec![], vec![])
        } else {
            (vec![0; n], vec![rows.first().copied().unwrap_or(0)])
        }
    } else {
        let by_chunk = table.columns(&agg.group_by).ok_or_else(|| other("no group-by column".into()))?;
        let keys = key_bytes(&by_chunk).map_err(other)?;
        with_keys!(&keys, |k| group_ids(k, rows))
    };
    let groups = firsts.len();
    // Output order: by the group-by values (Arrow's row format sorts like the values).
    let mut order: Vec<usize> = (0..groups).collect();
    if !group_cols.is_empty() && groups > 1 {
        let cols: Vec<ArrayRef> = agg
            .group_by
            .iter()
            .map(|g| table.take_column(g, &firsts))
            .collect::<Result<_, _>>()
            .map_err(|e| other(e.to_string()))?;
        let conv = RowConverter::new(cols.iter().map(|c| SortField::new(c.data_type().clone())).collect())
            .map_err(|e| other(e.to_string()))?;
        let sort_rows = conv.convert_columns(&cols).map_err(|e| other(e.to_string()))?;
        order.sort_by(|&a, &b| sort_rows.row(a).cmp(&sort_rows.row(b)));
    }

    let mut columns: Vec<ArrayRef> = Vec::with_capacity(schema.fields().len());
    let sorted_firsts: Vec<u32> = order.iter().map(|&g| firsts[g]).collect();
    for g in &agg.group_by {
        columns.push(table.take_column(g, &sorted_firsts).map_err(|e| other(e.to_string()))?);
    }

    let ctx = Ctx { table, rows, groups, group_of: &group_of, order: &order };
    // Work items: each measure once, a distinct count once per shard of its values (the
    // longest work, so it goes first); with several threads, each takes the next item.
    let parallel = threads > 1 && n >= 65_536;
    let shards = if parallel { threads } else { 1 };
    let mut items: Vec<(usize, usize)> = Vec::new();
    for (i, m) in agg.measures.iter().enumerate() {
        if m.func == MeasureFn::CountDistinct {
            items.extend((0..shards).map(|s| (i, s)));
        }
    }
    for (i, m) in agg.measures.iter().enumerate() {
        if m.func != MeasureFn::CountDistinct {
            items.push((i, 0));
        }
    }
    let run = |&(i, shard): &(usize, usize)| ctx.measure(&agg.measures[i], shard, shards);
    let done: Vec<Result<Partial, PartitionError>> = if !parallel {
        items.iter().map(run).collect()
    } else {
        let next = std::sync::atomic::AtomicUsize::new(0);
        let work = || {
            let mut mine = Vec::new();
            loop {
                let at = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(item) = items.get(at) else { break };
                mine.push((at, run(item)));
            }
            mine
        };
        let mut all: Vec<(usize, Result<Partial, PartitionError>)> = std::thread::scope(|s| {
            let handles: Vec<_> = (1..threads.min(items.len())).map(|_| s.spawn(work)).collect();
            let mut all = work();
            for h in handles {
                all.extend(h.join().map_err(|_| other("an aggregate thread panicked".into()))?);
            }
            Ok::<_, PartitionError>(all)
        })?;
        all.sort_by_key(|(at, _)| *at);
        all.into_iter().map(|(_, r)| r).collect()
    };
    // Back in measure order; a distinct count's shards add up.
    let mut by_measure: Vec<Option<ArrayRef>> = vec![None; agg.measures.len()];
    let mut counts: Vec<Vec<i64>> = vec![Vec::new(); agg.measures.len()];
    for (&(i, _), r) in items.iter().zip(done) {
        match r? {
            Partial::Done(a) => by_measure[i] = Some(a),
            Partial::Counts(c) => {
                let acc = &mut counts[i];
                acc.resize(c.len(), 0);
                acc.iter_mut().zip(c).for_each(|(a, b)| *a += b);
            }
        }
    }
    for (i, col) in by_measure.into_iter().enumerate() {
        columns.push(match col {
            Some(a) => a,
            None => Arc::new(Int64Array::from(reorder(&counts[i], &order))),
        });
    }
    RecordBatch::try_new(schema.clone(), columns).map_err(|e| other(e.to_string()))
}

/// The group of each winning row (ids in order of first appearance), and each group's first row.
fn group_ids<K: Keys + ?Sized>(keys: &K, rows: &[u32]) -> (Vec<u32>, Vec<u32>) {
    let mut ids: HashMap<&[u8], u32> = HashMap::new();
    let mut group_of = Vec::with_capacity(rows.len());
    let mut firsts = Vec::new();
    for &r in rows {
        let next = ids.len() as u32;
        let g = *ids.entry(keys.key(r as usize)).or_insert_with(|| {
            firsts.push(r);
            next
        });
        group_of.push(g);
    }
    (group_of, firsts)
}

/// A distinct value of one group, as the distinct count's table holds it: values of up to 16
/// bytes inline (two overlapping words and the length determine the bytes), so a probe that
/// finds its value never goes back to the column; longer values by row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Distinct {
    lo: u64,
    hi: u64,
    group: u32,
    len: u32,
}

impl Distinct {
    const INLINE: usize = 16;

    #[inline(always)]
    fn new(group: u32, k: &[u8], row: usize) -> Self {
        let n = k.len();
        let le8 = |b: &[u8]| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&b[..8]);
            u64::from_le_bytes(w)
        };
        let le4 = |b: &[u8]| {
            let mut w = [0u8; 4];
            w.copy_from_slice(&b[..4]);
            u64::from(u32::from_le_bytes(w))
        };
        let (lo, hi) = match n {
            8..=16 => (le8(k), le8(&k[n - 8..])),
            4..=7 => (le4(k), le4(&k[n - 4..])),
            0..=3 => (k.iter().rev().fold(0u64, |acc, &x| (acc << 8) | u64::from(x)), 0),
            _ => (row as u64, 0),
        };
        Distinct { lo, hi, group, len: n as u32 }
    }

    #[inline(always)]
    fn inline(&self) -> bool {
        self.len as usize <= Self::INLINE
    }
}

/// The number of distinct values per group, over the values whose hash is in shard `shard`
/// of `shards`: one table for all groups.
fn count_distinct<K: Keys + ?Sized>(
    keys: &K,
    ctx: &Ctx,
    keep: &dyn Fn(usize) -> bool,
    valid: &dyn Fn(usize) -> bool,
    shard: usize,
    shards: usize,
) -> Vec<i64> {
    let (rows, group_of) = (ctx.rows, ctx.group_of);
    let hasher = crate::prepare::key_hasher();
    // Inline values hash by their words, longer ones by their bytes: either way a function
    // of (group, value), so every thread puts a value in the same shard.
    let hash = |d: &Distinct| {
        if d.inline() {
            hasher.hash_one(d)
        } else {
            hasher.hash_one((d.group, keys.key(d.lo as usize)))
        }
    };
    let mut seen: HashTable<Distinct> = HashTable::with_capacity(rows.len() / shards / 4);
    let mut acc = vec![0i64; ctx.groups];
    for (i, &r) in rows.iter().enumerate() {
        let r = r as usize;
        if keep(r) && valid(r) {
            let (g, k) = (group_of[i], keys.key(r));
            let d = Distinct::new(g, k, r);
            let h = hash(&d);
            if shards > 1 && crate::prepare::shard_of(h, shards) != shard {
                continue;
            }
            let eq = |e: &Distinct| {
                if d.inline() {
                    *e == d
                } else {
                    e.group == g && e.len == d.len && keys.key(e.lo as usize) == k
                }
            };
            let rehash = |e: &Distinct| crate::prepare::table_hash(hash(e));
            if let hashbrown::hash_table::Entry::Vacant(slot) = seen.entry(crate::prepare::table_hash(h), eq, rehash) {
                slot.insert(d);
                acc[g as usize] += 1;
            }
        }
    }
    acc
}

/// What every measure reads: the winning rows and their groups.
struct Ctx<'a> {
    table: &'a Table,
    rows: &'a [u32],
    groups: usize,
    group_of: &'a [u32],
    order: &'a [usize],
}

impl Ctx<'_> {
    /// One measure (of a distinct count: the counts of values in hash shard `shard` of `shards`).
    fn measure(&self, m: &Measure, shard: usize, shards: usize) -> Result<Partial, PartitionError> {
        let other = |m: String| PartitionError::Other(format!("aggregate: {m}"));
        let col_of = |name: &str| -> Result<Vec<ArrayRef>, PartitionError> {
            self.table.column(name).ok_or_else(|| other(format!("no column `{name}`")))
        };
        let (rows, groups, group_of, order) = (self.rows, self.groups, self.group_of, self.order);
        // Per filter, a matcher per chunk.
        let matchers: Vec<Vec<predicate::Matcher>> = m
            .filter
            .iter()
            .map(|(k, v)| {
                let values = v.values();
                col_of(k)?.iter().map(|c| predicate::Matcher::new(c, &values).map_err(other)).collect()
            })
            .collect::<Result<_, _>>()?;
        let keep = |r: usize| {
            let (c, i) = split_id(r);
            matchers.iter().all(|mt| mt[c].is_match(i))
        };
        let col = match &m.column {
            Some(c) => Some(col_of(c)?),
            None => None,
        };
        let valid = |r: usize| {
            let (c, i) = split_id(r);
            col.as_ref().is_none_or(|a| a[c].is_valid(i))
        };
        Ok(Partial::Done(match m.func {
            MeasureFn::Count => {
                let mut acc = vec![0i64; groups];
                for (i, &r) in rows.iter().enumerate() {
                    let r = r as usize;
                    if keep(r) && valid(r) {
                        acc[group_of[i] as usize] += 1;
                    }
                }
                Arc::new(Int64Array::from(reorder(&acc, order)))
            }
            MeasureFn::CountDistinct => {
                let col = col.as_ref().ok_or_else(|| other("count_distinct needs a column".into()))?;
                let by_chunk: Vec<Vec<ArrayRef>> = col.iter().map(|a| vec![a.clone()]).collect();
                let keys = key_bytes(&by_chunk).map_err(other)?;
                let acc = with_keys!(&keys, |k| count_distinct(k, self, &keep, &valid, shard, shards));
                return Ok(Partial::Counts(acc));
            }
            MeasureFn::Sum => {
                let col = col.as_ref().ok_or_else(|| other("sum needs a column".into()))?;
                sum(m, &self.type_of(m)?, col, rows, groups, group_of, &keep, order)?
            }
            MeasureFn::Min | MeasureFn::Max => {
                let col = col.as_ref().ok_or_else(|| other("min/max needs a column".into()))?;
                let mut cmp = IdCmp::new(col.iter().map(|a| vec![a.clone()]).collect());
                let want =
                    if m.func == MeasureFn::Min { std::cmp::Ordering::Less } else { std::cmp::Ordering::Greater };
                let mut best: Vec<Option<u32>> = vec![None; groups];
                for (i, &r) in rows.iter().enumerate() {
                    if keep(r as usize) && valid(r as usize) {
                        let b = &mut best[group_of[i] as usize];
                        let better = match *b {
                            None => true,
                            Some(j) => cmp.cmp(r as usize, j as usize).map_err(|e| other(e.to_string()))? == want,
                        };
                        if better {
                            *b = Some(r);
                        }
                    }
                }
                // Groups without a value get a null, from a one-row null array after the chunks.
                let ty = col.first().map_or_else(|| self.type_of(m), |a| Ok(a.data_type().clone()))?;
                let null = arrow::array::new_null_array(&ty, 1);
                let mut arrays: Vec<&dyn Array> = col.iter().map(|a| a.as_ref()).collect();
                arrays.push(null.as_ref());
                let idx: Vec<(usize, usize)> =
                    order.iter().map(|&g| best[g].map_or((col.len(), 0), |r| split_id(r as usize))).collect();
                arrow::compute::interleave(&arrays, &idx).map_err(|e| other(e.to_string()))?
            }
        }))
    }

    /// The input type of a measure's column.
    fn type_of(&self, m: &Measure) -> Result<DataType, PartitionError> {
        let name = m.column.as_deref().unwrap_or_default();
        let f = self.table.schema().field_with_name(name);
        f.map(|f| f.data_type().clone()).map_err(|_| PartitionError::Other(format!("aggregate: no column `{name}`")))
    }
}

/// A measure's result, or a distinct count's counts per group over one shard of the values.
enum Partial {
    Done(ArrayRef),
    Counts(Vec<i64>),
}

fn reorder<T: Copy>(acc: &[T], order: &[usize]) -> Vec<T> {
    order.iter().map(|&g| acc[g]).collect()
}

#[allow(clippy::too_many_arguments)]
fn sum(
    m: &Measure,
    ty: &DataType,
    col: &[ArrayRef],
    rows: &[u32],
    groups: usize,
    group_of: &[u32],
    keep: &dyn Fn(usize) -> bool,
    order: &[usize],
) -> Result<ArrayRef, PartitionError> {
    let overflow = |what: &str| PartitionError::Overflow {
        measure: m.name.clone(),
        message: format!("the sum leaves the range of {what}; the input holds values too large to add up exactly"),
    };
    let cast = |to: &DataType, err: &dyn Fn(String) -> PartitionError| -> Result<Vec<ArrayRef>, PartitionError> {
        col.iter().map(|a| arrow::compute::cast(a, to).map_err(|e| err(e.to_string()))).collect()
    };
    let at = |r: u32| split_id(r as usize);
    match ty {
        &DataType::Decimal128(_, s) => {
            let a: Vec<&Decimal128Array> = col.iter().map(|c| c.as_primitive()).collect();
            let mut acc = vec![0i128; groups];
            for (i, &r) in rows.iter().enumerate() {
                let (c, j) = at(r);
                if keep(r as usize) && a[c].is_valid(j) {
                    let g = &mut acc[group_of[i] as usize];
                    *g = g.checked_add(a[c].value(j)).ok_or_else(|| overflow("decimal(38)"))?;
                }
            }
            if acc.iter().any(|v| v.unsigned_abs() > MAX_DECIMAL38 as u128) {
                return Err(overflow("decimal(38)"));
            }
            let out = Decimal128Array::from(reorder(&acc, order))
                .with_precision_and_scale(38, s)
                .map_err(|e| PartitionError::Other(e.to_string()))?;
            Ok(Arc::new(out))
        }
        t if t.is_integer() => {
            let ints = cast(&DataType::Int64, &|_| overflow("int64"))?;
            let a: Vec<&Int64Array> = ints.iter().map(|c| c.as_primitive()).collect();
            let mut acc = vec![0i64; groups];
            for (i, &r) in rows.iter().enumerate() {
                let (c, j) = at(r);
                if keep(r as usize) && a[c].is_valid(j) {
                    let g = &mut acc[group_of[i] as usize];
                    *g = g.checked_add(a[c].value(j)).ok_or_else(|| overflow("int64"))?;
                }
            }
            Ok(Arc::new(Int64Array::from(reorder(&acc, order))))
        }
        t if t.is_floating() => {
            let floats = cast(&DataType::Float64, &PartitionError::Other)?;
            let a: Vec<&Float64Array> = floats.iter().map(|c| c.as_primitive()).collect();
            let mut acc = vec![0f64; groups];
            for (i, &r) in rows.iter().enumerate() {
                let (c, j) = at(r);
                if keep(r as usize) && a[c].is_valid(j) {
                    acc[group_of[i] as usize] += a[c].value(j);
                }
            }
            Ok(Arc::new(Float64Array::from(reorder(&acc, order))))
        }
        other => Err(PartitionError::Other(format!("measure `{}`: cannot sum {other}", m.name))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    #[test]
    fn inline_distinct_values_are_equal_exactly_when_their_bytes_are() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
        // Few symbols, so equal values of each length are common.
        let values: Vec<Vec<u8>> =
            (0..4000).map(|_| (0..rng.random_range(0..=16)).map(|_| rng.random_range(0..3u8)).collect()).collect();
        for a in &values[..300] {
            for b in &values {
                let (da, db) = (Distinct::new(7, a, 0), Distinct::new(7, b, 1));
                assert_eq!(da == db, a == b, "{a:?} vs {b:?}");
            }
            assert_ne!(Distinct::new(1, a, 0), Distinct::new(2, a, 0), "other group");
        }
    }
}
