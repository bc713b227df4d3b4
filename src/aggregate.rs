//! Compute, `kind = "aggregate"`: one partition's winning rows grouped by the configured
//! dimensions into measures (SPEC §2.4).
//!
//! Invariants: decimal sums are exact (`i128`, widened to decimal(38, s); overflow is an
//! error naming the measure), never floating point; a `sum` or `count` over no matching rows
//! is 0, not null; rows come out sorted by the group-by columns, so the same rows always give
//! the same batch.

use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, AsArray, BooleanArray, Decimal128Array, Float64Array, Int64Array, RecordBatch, UInt32Array,
};
use arrow::compute::{take, SortOptions};
use arrow::datatypes::{DataType, Field, Float64Type, Int64Type, Schema, SchemaRef};
use arrow::row::{RowConverter, SortField};
use hashbrown::{HashMap, HashSet};

use crate::config::{AggregateSection, Measure, MeasureFn};
use crate::error::PartitionError;
use crate::predicate;
use crate::prepare::{key_bytes, Prepared};

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

/// Aggregates the winning rows of one partition.
pub fn aggregate(p: &Prepared, agg: &AggregateSection, schema: &SchemaRef) -> Result<RecordBatch, PartitionError> {
    let other = |m: String| PartitionError::Other(format!("aggregate: {m}"));
    let batch = &p.table.batch;
    let idx = UInt32Array::from(p.winners.clone());
    let pick = |name: &str| -> Result<ArrayRef, PartitionError> {
        let col = batch.column_by_name(name).ok_or_else(|| other(format!("no column `{name}`")))?;
        take(col.as_ref(), &idx, None).map_err(|e| other(e.to_string()))
    };
    let n = p.winners.len();

    // Group ids, in order of first appearance.
    let group_cols: Vec<ArrayRef> = agg.group_by.iter().map(|g| pick(g)).collect::<Result<_, _>>()?;
    let (group_of, firsts, order): (Vec<u32>, Vec<u32>, Vec<usize>) = if group_cols.is_empty() {
        if p.stats.input_rows == 0 {
            (vec![], vec![], vec![])
        } else {
            (vec![0; n], vec![0], vec![0])
        }
    } else {
        let conv = RowConverter::new(group_cols.iter().map(|c| SortField::new(c.data_type().clone())).collect())
            .map_err(|e| other(e.to_string()))?;
        let rows = conv.convert_columns(&group_cols).map_err(|e| other(e.to_string()))?;
        let mut ids: HashMap<&[u8], u32> = HashMap::new();
        let mut group_of = Vec::with_capacity(n);
        let mut firsts = Vec::new();
        for i in 0..n {
            let next = ids.len() as u32;
            let g = *ids.entry(rows.row(i).data()).or_insert_with(|| {
                firsts.push(i as u32);
                next
            });
            group_of.push(g);
        }
        // Output order: by the group-by values (the row format sorts like the values).
        let mut order: Vec<usize> = (0..firsts.len()).collect();
        order.sort_by(|&a, &b| rows.row(firsts[a] as usize).cmp(&rows.row(firsts[b] as usize)));
        (group_of, firsts, order)
    };
    let groups = firsts.len();

    let mut columns: Vec<ArrayRef> = Vec::with_capacity(schema.fields().len());
    let sorted_firsts = UInt32Array::from(order.iter().map(|&g| firsts[g]).collect::<Vec<_>>());
    for c in &group_cols {
        columns.push(take(c.as_ref(), &sorted_firsts, None).map_err(|e| other(e.to_string()))?);
    }

    for m in &agg.measures {
        let mask: Option<BooleanArray> = if m.filter.is_empty() {
            None
        } else {
            let cols: Vec<ArrayRef> = m.filter.keys().map(|k| pick(k)).collect::<Result<_, _>>()?;
            let fields: Vec<Field> =
                m.filter.keys().zip(&cols).map(|(k, c)| Field::new(k, c.data_type().clone(), true)).collect();
            let sub = RecordBatch::try_new(Arc::new(Schema::new(fields)), cols).map_err(|e| other(e.to_string()))?;
            predicate::all_match(&sub, m.filter.iter().map(|(k, v)| (k, v.values()))).map_err(other)?
        };
        let keep = |i: usize| mask.as_ref().is_none_or(|mk| mk.value(i));
        let col = match &m.column {
            Some(c) => Some(pick(c)?),
            None => None,
        };
        let out: ArrayRef = match m.func {
            MeasureFn::Count => {
                let mut acc = vec![0i64; groups];
                for i in 0..n {
                    if keep(i) && col.as_ref().is_none_or(|c| c.is_valid(i)) {
                        acc[group_of[i] as usize] += 1;
                    }
                }
                Arc::new(Int64Array::from(reorder(&acc, &order)))
            }
            MeasureFn::CountDistinct => {
                let col = col.ok_or_else(|| other("count_distinct needs a column".into()))?;
                let keys = key_bytes(std::slice::from_ref(&col)).map_err(other)?;
                let mut sets: Vec<HashSet<&[u8]>> = (0..groups).map(|_| HashSet::new()).collect();
                for i in 0..n {
                    if keep(i) && col.is_valid(i) {
                        sets[group_of[i] as usize].insert(keys.get(i));
                    }
                }
                let acc: Vec<i64> = sets.iter().map(|s| s.len() as i64).collect();
                Arc::new(Int64Array::from(reorder(&acc, &order)))
            }
            MeasureFn::Sum => {
                let col = col.ok_or_else(|| other("sum needs a column".into()))?;
                sum(m, &col, n, groups, &group_of, &keep, &order)?
            }
            MeasureFn::Min | MeasureFn::Max => {
                let col = col.ok_or_else(|| other("min/max needs a column".into()))?;
                let cmp = arrow::array::make_comparator(col.as_ref(), col.as_ref(), SortOptions::default())
                    .map_err(|e| other(e.to_string()))?;
                let want =
                    if m.func == MeasureFn::Min { std::cmp::Ordering::Less } else { std::cmp::Ordering::Greater };
                let mut best: Vec<Option<u32>> = vec![None; groups];
                for i in 0..n {
                    if keep(i) && col.is_valid(i) {
                        let b = &mut best[group_of[i] as usize];
                        if b.is_none_or(|j| cmp(i, j as usize) == want) {
                            *b = Some(i as u32);
                        }
                    }
                }
                let idx = UInt32Array::from(order.iter().map(|&g| best[g]).collect::<Vec<_>>());
                take(col.as_ref(), &idx, None).map_err(|e| other(e.to_string()))?
            }
        };
        columns.push(out);
    }
    RecordBatch::try_new(schema.clone(), columns).map_err(|e| other(e.to_string()))
}

fn reorder<T: Copy>(acc: &[T], order: &[usize]) -> Vec<T> {
    order.iter().map(|&g| acc[g]).collect()
}

fn sum(
    m: &Measure,
    col: &ArrayRef,
    n: usize,
    groups: usize,
    group_of: &[u32],
    keep: &dyn Fn(usize) -> bool,
    order: &[usize],
) -> Result<ArrayRef, PartitionError> {
    let overflow = |what: &str| PartitionError::Overflow {
        measure: m.name.clone(),
        message: format!("the sum leaves the range of {what}; the input holds values too large to add up exactly"),
    };
    match col.data_type() {
        DataType::Decimal128(_, s) => {
            let a = col.as_primitive::<arrow::datatypes::Decimal128Type>();
            let mut acc = vec![0i128; groups];
            for i in 0..n {
                if keep(i) && a.is_valid(i) {
                    let g = &mut acc[group_of[i] as usize];
                    *g = g.checked_add(a.value(i)).ok_or_else(|| overflow("decimal(38)"))?;
                }
            }
            if acc.iter().any(|v| v.unsigned_abs() > MAX_DECIMAL38 as u128) {
                return Err(overflow("decimal(38)"));
            }
            let out = Decimal128Array::from(reorder(&acc, order))
                .with_precision_and_scale(38, *s)
                .map_err(|e| PartitionError::Other(e.to_string()))?;
            Ok(Arc::new(out))
        }
        t if t.is_integer() => {
            let ints = arrow::compute::cast(col, &DataType::Int64).map_err(|_| overflow("int64"))?;
            let a = ints.as_primitive::<Int64Type>();
            let mut acc = vec![0i64; groups];
            for i in 0..n {
                if keep(i) && a.is_valid(i) {
                    let g = &mut acc[group_of[i] as usize];
                    *g = g.checked_add(a.value(i)).ok_or_else(|| overflow("int64"))?;
                }
            }
            Ok(Arc::new(Int64Array::from(reorder(&acc, order))))
        }
        t if t.is_floating() => {
            let f = arrow::compute::cast(col, &DataType::Float64).map_err(|e| PartitionError::Other(e.to_string()))?;
            let a = f.as_primitive::<Float64Type>();
            let mut acc = vec![0f64; groups];
            for i in 0..n {
                if keep(i) && a.is_valid(i) {
                    acc[group_of[i] as usize] += a.value(i);
                }
            }
            Ok(Arc::new(Float64Array::from(reorder(&acc, order))))
        }
        other => Err(PartitionError::Other(format!("measure `{}`: cannot sum {other}", m.name))),
    }
}
