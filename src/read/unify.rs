//! Schema drift, by a written rule: the objects of one partition date are unified to one record
//! schema before prepare, and each object's rows are conformed to it by column name — never by
//! position.
//!
//! The rule (also in README.md, "Schema drift"):
//! - integers widen: int8 < int16 < int32 < int64; an unsigned type joins a signed one as the
//!   signed type that holds both (uint64 and a signed type do not unify);
//! - float32 and float64 give float64; integers and floats do not mix;
//! - decimals widen to hold both: the larger scale, the larger count of integer digits
//!   (precision at most 38); an integer joins a decimal as the digits it needs;
//! - text (utf8, large utf8, utf8 view, dictionary) unifies to utf8 (large utf8 when one is);
//!   binary alike;
//! - timestamps take the finest unit; one zone stays, different zones become UTC, and a
//!   timestamp without a zone (wall-clock time in the job's `timezone`) joins a zoned one as UTC;
//! - date32 and date64 give date32;
//! - a column missing from an object is null there (a column the config uses must be in every
//!   object: that is checked when the object is read; an NDJSON object without the tombstone
//!   field has no deletes);
//! - a declared type (`[input.schema]`) is the column's type, whatever the objects hold;
//! - anything else — a string where a number was — cannot be unified: the date fails, and the
//!   error names the column, both types and an object of each.
//!
//! Conforming is exact: a value that does not survive the conversion unchanged (an integer
//! that does not fit, a decimal that would lose a digit, a timestamp finer than the unit) is an
//! error naming its row.

use std::sync::Arc;

use super::text::per_second;
use arrow::array::{Array, ArrayRef, AsArray, Int64Array, RecordBatch};
use arrow::compute::{cast_with_options, CastOptions};
use arrow::datatypes::{DataType, Field, Int64Type, Schema, SchemaRef, TimeUnit, DECIMAL128_MAX_PRECISION};
use chrono::TimeZone;
use chrono_tz::Tz;

/// Two types that cannot be unified, with an object holding each.
#[derive(Debug, Clone, PartialEq)]
pub struct Clash {
    pub column: String,
    pub types: Box<[(DataType, String); 2]>,
    /// Text from JSON numbers in the first object, from JSON strings in the second (or the
    /// other way round): both utf8.
    pub numbers_and_text: bool,
}

impl std::fmt::Display for Clash {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let [(a, oa), (b, ob)] = &*self.types;
        if self.numbers_and_text {
            return write!(
                f,
                "column `{}` holds numbers in {oa} (kept as text: a double would round them) and text in {ob}, \
                 so 1 and \"1\" would read alike; fix the writer to give each value one JSON type, or declare the \
                 column's type in [input.schema] (utf8 reads every value as text)",
                self.column
            );
        }
        if a.is_nested() || b.is_nested() {
            // [input.schema] names flat types only.
            return write!(
                f,
                "column `{}` cannot be unified: {a} in {oa}, {b} in {ob}. A nested column must have one type in \
                 every object (the same fields, in the same order, of the same types; list elements of one type): \
                 fix the writer",
                self.column
            );
        }
        write!(
            f,
            "column `{}` cannot be unified: {a} in {oa}, {b} in {ob}. Fix the writer, or declare the column's \
             type in [input.schema] if every value fits it",
            self.column
        )
    }
}

/// The field metadata of a text column read from JSON numbers (past what int64 and a double
/// hold exactly, kept as text by the rule of CSV).
const NUMBERS_AS_TEXT: &str = "lakeswap.numbers_as_text";

/// `batch` with the text columns that `numbers` names marked as read from JSON numbers: such a
/// column does not unify with one read from JSON strings, where `1` and `"1"` would be one value.
pub fn mark_numbers_as_text(batch: RecordBatch, numbers: &dyn Fn(&str) -> bool) -> RecordBatch {
    let schema = batch.schema();
    if !schema.fields().iter().any(|f| numbers(f.name())) {
        return batch;
    }
    let fields: Vec<Field> = schema
        .fields()
        .iter()
        .map(|f| match numbers(f.name()) {
            true => f.as_ref().clone().with_metadata([(NUMBERS_AS_TEXT.to_string(), "true".to_string())].into()),
            false => f.as_ref().clone(),
        })
        .collect();
    let opts = arrow::array::RecordBatchOptions::new().with_row_count(Some(batch.num_rows()));
    RecordBatch::try_new_with_options(Arc::new(Schema::new(fields)), batch.columns().to_vec(), &opts).unwrap_or(batch)
}

/// The type a dictionary stands for, every text encoding as utf8 and every byte encoding as
/// binary, a decimal256 of at most 38 digits as the decimal128 that holds it (as Parquet
/// writers that store the Arrow type may give one); other types as they are.
pub fn base(t: &DataType) -> DataType {
    match t {
        DataType::Dictionary(_, v) => base(v),
        // Every encoding of text is read as utf8, of bytes as binary: one type in the table.
        DataType::LargeUtf8 | DataType::Utf8View => DataType::Utf8,
        DataType::LargeBinary | DataType::BinaryView => DataType::Binary,
        DataType::Decimal256(p, s) if *p <= DECIMAL128_MAX_PRECISION => DataType::Decimal128(*p, *s),
        t => t.clone(),
    }
}

fn int_bits(t: &DataType) -> Option<(bool, u8)> {
    Some(match t {
        DataType::Int8 => (true, 8),
        DataType::Int16 => (true, 16),
        DataType::Int32 => (true, 32),
        DataType::Int64 => (true, 64),
        DataType::UInt8 => (false, 8),
        DataType::UInt16 => (false, 16),
        DataType::UInt32 => (false, 32),
        DataType::UInt64 => (false, 64),
        _ => return None,
    })
}

fn int_type(signed: bool, bits: u8) -> DataType {
    match (signed, bits) {
        (true, 8) => DataType::Int8,
        (true, 16) => DataType::Int16,
        (true, 32) => DataType::Int32,
        (true, _) => DataType::Int64,
        (false, 8) => DataType::UInt8,
        (false, 16) => DataType::UInt16,
        (false, 32) => DataType::UInt32,
        (false, _) => DataType::UInt64,
    }
}

/// The decimal digits an integer type needs.
fn int_digits(bits: u8, signed: bool) -> u8 {
    match (bits, signed) {
        (8, _) => 3,
        (16, _) => 5,
        (32, _) => 10,
        (_, true) => 19,
        (_, false) => 20,
    }
}

fn unit_rank(u: &TimeUnit) -> u8 {
    match u {
        TimeUnit::Second => 0,
        TimeUnit::Millisecond => 1,
        TimeUnit::Microsecond => 2,
        TimeUnit::Nanosecond => 3,
    }
}

/// The type both `a` and `b` convert into exactly, by the rule above; `None` when there is none.
pub fn unify_types(a: &DataType, b: &DataType) -> Option<DataType> {
    use DataType::*;
    let (a, b) = (&base(a), &base(b));
    if a == b {
        return Some(a.clone());
    }
    if let (Some((sa, ba)), Some((sb, bb))) = (int_bits(a), int_bits(b)) {
        return match (sa, sb) {
            (true, true) | (false, false) => Some(int_type(sa, ba.max(bb))),
            _ => {
                let (s, u) = if sa { (ba, bb) } else { (bb, ba) };
                (u < 64).then(|| int_type(true, s.max(u * 2)))
            }
        };
    }
    let decimal = |p: u8, s: i8, q: u8, t: i8| {
        let scale = s.max(t);
        let int = (p as i16 - s as i16).max(q as i16 - t as i16);
        let precision = int + scale as i16;
        (precision <= 38 && scale >= 0).then_some(Decimal128(precision as u8, scale))
    };
    match (a, b) {
        (Null, t) | (t, Null) => Some(t.clone()),
        (Float16 | Float32 | Float64, Float16 | Float32 | Float64) => {
            Some(if matches!(a, Float64) || matches!(b, Float64) { Float64 } else { Float32 })
        }
        (&Decimal128(p, s), &Decimal128(q, t)) => decimal(p, s, q, t),
        (&Decimal128(p, s), i) | (i, &Decimal128(p, s)) if int_bits(i).is_some() => {
            let (signed, bits) = int_bits(i)?;
            decimal(p, s, int_digits(bits, signed), 0)
        }
        (Utf8 | LargeUtf8 | Utf8View, Utf8 | LargeUtf8 | Utf8View) => {
            Some(if matches!(a, LargeUtf8) || matches!(b, LargeUtf8) { LargeUtf8 } else { Utf8 })
        }
        (Binary | LargeBinary | BinaryView, Binary | LargeBinary | BinaryView) => {
            Some(if matches!(a, LargeBinary) || matches!(b, LargeBinary) { LargeBinary } else { Binary })
        }
        (Date32 | Date64, Date32 | Date64) => Some(Date32),
        (Timestamp(ua, za), Timestamp(ub, zb)) => {
            let unit = if unit_rank(ua) >= unit_rank(ub) { *ua } else { *ub };
            let zone = if za == zb { za.clone() } else { Some("UTC".into()) };
            Some(Timestamp(unit, zone))
        }
        _ => fill_nulls(a, b),
    }
}

/// `a` and `b` when they differ only where one of them has no value at all (type Null, at any
/// depth: an NDJSON field `[]` or `{"x": null}` in every row of one object, values in another;
/// or an object with no fields, `{}` in every row): the other's type there. Lists of other
/// types, or structs of other fields, stay apart.
pub fn fill_nulls(a: &DataType, b: &DataType) -> Option<DataType> {
    use DataType::*;
    let child = |fa: &arrow::datatypes::FieldRef, fb: &arrow::datatypes::FieldRef| {
        let t = (fa.name() == fb.name()).then(|| fill_nulls(fa.data_type(), fb.data_type()))??;
        Some(Arc::new(fa.as_ref().clone().with_data_type(t).with_nullable(fa.is_nullable() || fb.is_nullable())))
    };
    // `{}`: every field of the other is absent, so null.
    let nullable = |fs: &arrow::datatypes::Fields| {
        Struct(fs.iter().map(|f| Arc::new(f.as_ref().clone().with_nullable(true))).collect())
    };
    match (a, b) {
        _ if a == b => Some(a.clone()),
        (Null, t) | (t, Null) => Some(t.clone()),
        (Struct(none), Struct(fs)) | (Struct(fs), Struct(none)) if none.is_empty() => Some(nullable(fs)),
        (List(fa), List(fb)) => Some(List(child(fa, fb)?)),
        (LargeList(fa), LargeList(fb)) => Some(LargeList(child(fa, fb)?)),
        (Struct(fa), Struct(fb)) if fa.len() == fb.len() => {
            Some(Struct(fa.iter().zip(fb.iter()).map(|(x, y)| child(x, y)).collect::<Option<_>>()?))
        }
        _ => None,
    }
}

/// Whether `t` has no value somewhere: it is Null, or holds Null or an object with no fields
/// (`{}`) in a list or a struct.
pub fn has_null(t: &DataType) -> bool {
    match t {
        DataType::Null => true,
        DataType::List(f) | DataType::LargeList(f) => has_null(f.data_type()),
        DataType::Struct(fs) => fs.is_empty() || fs.iter().any(|f| has_null(f.data_type())),
        _ => false,
    }
}

/// Whether `t` holds an object with no fields (`{}` in every row), which Parquet cannot store.
pub fn has_fieldless_struct(t: &DataType) -> bool {
    match t {
        DataType::List(f) | DataType::LargeList(f) => has_fieldless_struct(f.data_type()),
        DataType::Struct(fs) => fs.is_empty() || fs.iter().any(|f| has_fieldless_struct(f.data_type())),
        _ => false,
    }
}

/// `empty`'s type for a column of type `t` that has no value somewhere, when it is `t` with
/// those places filled.
fn filled(t: &DataType, empty: Option<DataType>) -> Option<DataType> {
    empty.filter(|e| fill_nulls(t, e).as_ref() == Some(e))
}

/// `arr` with its places that have no value (Null, `{}`) typed as in `to`, every value kept.
fn typed_places(arr: &ArrayRef, to: &DataType) -> Result<ArrayRef, arrow::error::ArrowError> {
    use arrow::array::{LargeListArray, ListArray, StructArray};
    let from = arr.data_type();
    match (from, to) {
        _ if from == to => Ok(arr.clone()),
        (DataType::Null, _) => Ok(arrow::array::new_null_array(to, arr.len())),
        (DataType::Struct(had), DataType::Struct(fs)) => {
            let s = arr.as_struct();
            let columns = match had.is_empty() {
                true => fs.iter().map(|f| arrow::array::new_null_array(f.data_type(), s.len())).collect(),
                false => s
                    .columns()
                    .iter()
                    .zip(fs.iter())
                    .map(|(c, f)| typed_places(c, f.data_type()))
                    .collect::<Result<_, _>>()?,
            };
            Ok(Arc::new(StructArray::try_new_with_length(fs.clone(), columns, s.nulls().cloned(), s.len())?))
        }
        (DataType::List(_), DataType::List(f)) => {
            let l = arr.as_list::<i32>();
            let values = typed_places(l.values(), f.data_type())?;
            Ok(Arc::new(ListArray::try_new(f.clone(), l.offsets().clone(), values, l.nulls().cloned())?))
        }
        (DataType::LargeList(_), DataType::LargeList(f)) => {
            let l = arr.as_list::<i64>();
            let values = typed_places(l.values(), f.data_type())?;
            Ok(Arc::new(LargeListArray::try_new(f.clone(), l.offsets().clone(), values, l.nulls().cloned())?))
        }
        _ => cast_with_options(arr, to, &CastOptions { safe: false, ..Default::default() }),
    }
}

/// `t` as Parquet holds it, at any depth (in lists, structs and maps): times in seconds in
/// milliseconds, and `date64` as `date32`. Parquet has no unit of seconds and no date in
/// milliseconds: arrow writes a `Timestamp(Second)`, `Time32(Second)` or `Date64` column as a
/// bare integer that other readers take for a number. The values convert exactly (a `date64`
/// that is not a midnight is refused where it is conformed).
pub fn parquet_native(t: &DataType) -> DataType {
    use DataType::*;
    let field =
        |f: &arrow::datatypes::FieldRef| Arc::new(f.as_ref().clone().with_data_type(parquet_native(f.data_type())));
    match t {
        Timestamp(TimeUnit::Second, tz) => Timestamp(TimeUnit::Millisecond, tz.clone()),
        Time32(TimeUnit::Second) => Time32(TimeUnit::Millisecond),
        Date64 => Date32,
        List(f) => List(field(f)),
        LargeList(f) => LargeList(field(f)),
        ListView(f) => ListView(field(f)),
        LargeListView(f) => LargeListView(field(f)),
        FixedSizeList(f, n) => FixedSizeList(field(f), *n),
        Struct(fs) => Struct(fs.iter().map(field).collect()),
        Map(f, sorted) => Map(field(f), *sorted),
        Dictionary(k, v) => Dictionary(k.clone(), Box::new(parquet_native(v))),
        other => other.clone(),
    }
}

/// The record schema of some objects: every column of any of them, in order of first
/// appearance, each of its unified type (or its declared type) as Parquet holds it
/// ([`parquet_native`]). A column with no value in any of them (type Null: text left empty)
/// takes the type `empty` gives it (the run's), else text.
pub fn unify(
    objects: &[(&str, &Schema)],
    declared: &dyn Fn(&str) -> Option<DataType>,
    empty: &dyn Fn(&str) -> Option<DataType>,
) -> Result<SchemaRef, Clash> {
    let mut fields: Vec<(String, DataType, String)> = Vec::new();
    // Per text column: whether its text came from JSON numbers, and the object that said so.
    let mut text_from: Vec<(String, bool, String)> = Vec::new();
    for (object, schema) in objects {
        for f in schema.fields() {
            let t = base(f.data_type()).clone();
            if t == DataType::Utf8 && declared(f.name()).is_none() {
                let numbers = f.metadata().contains_key(NUMBERS_AS_TEXT);
                match text_from.iter().find(|(n, _, _)| n == f.name()) {
                    None => text_from.push((f.name().clone(), numbers, object.to_string())),
                    Some((_, was, first)) if *was != numbers => {
                        // The object of numbers first.
                        let (with_numbers, with_text) = match was {
                            true => (first.clone(), object.to_string()),
                            false => (object.to_string(), first.clone()),
                        };
                        return Err(Clash {
                            column: f.name().clone(),
                            types: Box::new([(t.clone(), with_numbers), (t, with_text)]),
                            numbers_and_text: true,
                        });
                    }
                    Some(_) => {}
                }
            }
            match fields.iter_mut().find(|(n, _, _)| n == f.name()) {
                None => fields.push((f.name().clone(), declared(f.name()).unwrap_or(t), object.to_string())),
                Some(_) if declared(f.name()).is_some() => {}
                Some((name, have, first)) => match unify_types(have, &t) {
                    Some(u) => *have = u,
                    None => {
                        return Err(Clash {
                            column: name.clone(),
                            types: Box::new([(have.clone(), first.clone()), (t, object.to_string())]),
                            numbers_and_text: false,
                        })
                    }
                },
            }
        }
    }
    Ok(Arc::new(Schema::new(
        fields
            .into_iter()
            .map(|(n, t, _)| {
                let t = match t {
                    DataType::Null => empty(&n).unwrap_or(DataType::Utf8),
                    t if has_null(&t) => filled(&t, empty(&n)).unwrap_or_else(|| parquet_native(&t)),
                    t => parquet_native(&t),
                };
                Field::new(n, t, true)
            })
            .collect::<Vec<_>>(),
    )))
}

/// A value that does not convert exactly.
#[derive(Debug)]
pub struct Inexact {
    pub row: Option<usize>,
    pub message: String,
}

/// `batch` under `target`, columns taken by name (absent ones null), each converted exactly.
pub fn conform(batch: &RecordBatch, target: &SchemaRef, tz: Tz) -> Result<RecordBatch, (String, Inexact)> {
    if batch.schema().fields() == target.fields() {
        return Ok(batch.clone());
    }
    let n = batch.num_rows();
    let columns: Vec<ArrayRef> = target
        .fields()
        .iter()
        .map(|f| match batch.column_by_name(f.name()) {
            Some(c) => exact_cast(c, f.data_type(), tz).map_err(|e| (f.name().clone(), e)),
            None => Ok(arrow::array::new_null_array(f.data_type(), n)),
        })
        .collect::<Result<_, _>>()?;
    let opts = arrow::array::RecordBatchOptions::new().with_row_count(Some(n));
    RecordBatch::try_new_with_options(target.clone(), columns, &opts)
        .map_err(|e| (String::new(), Inexact { row: None, message: e.to_string() }))
}

/// `arr` as type `to`, exactly: every value survives the conversion unchanged, or the first
/// row where one does not is named.
pub fn exact_cast(arr: &ArrayRef, to: &DataType, tz: Tz) -> Result<ArrayRef, Inexact> {
    let from = arr.data_type();
    if from == to {
        return Ok(arr.clone());
    }
    let fail = |message: String| Inexact { row: None, message };
    if let DataType::Dictionary(_, v) = from {
        let plain = arrow::compute::cast(arr, v).map_err(|e| fail(e.to_string()))?;
        return exact_cast(&plain, to, tz);
    }
    if from == &DataType::Null {
        return Ok(arrow::array::new_null_array(to, arr.len()));
    }
    if has_null(from) && fill_nulls(from, to).as_ref() == Some(to) {
        // Only places without a value take a type: nothing to lose.
        return typed_places(arr, to).map_err(|e| fail(format!("cannot convert {from} to {to}: {e}")));
    }
    if let (DataType::Timestamp(fu, None), DataType::Timestamp(tu, Some(_))) = (from, to) {
        return wall_clock_to_instant(arr, *fu, *tu, to, tz);
    }
    if let (DataType::Date32 | DataType::Date64, DataType::Timestamp(tu, Some(_))) = (from, to) {
        // A date is midnight on the job zone's wall clock, as a date written in text is.
        let wall = DataType::Timestamp(*tu, None);
        let midnight = cast_with_options(arr, &wall, &CastOptions { safe: false, ..Default::default() })
            .map_err(|e| Inexact { row: None, message: format!("cannot convert {from} to {to}: {e}") })?;
        return wall_clock_to_instant(&midnight, *tu, *tu, to, tz);
    }
    if let (DataType::Timestamp(_, Some(_)), DataType::Timestamp(tu, None)) = (from, to) {
        return instant_to_wall_clock(arr, *tu, to, tz);
    }
    // The engine counts days since 1970-01-01 (20000 is 2024-10-04), which no writer of a
    // yyyymmdd number means, and text refuses: a number is not a date.
    if from.is_numeric() && matches!(to, DataType::Date32 | DataType::Date64) {
        return Err(fail(format!(
            "{from} values are numbers, not dates (20261101 is no date, nor is a count of days since 1970): \
             write the column as a date or as text (2026-11-01), or declare it another type"
        )));
    }
    // Anywhere else — a column of a table rebuilt under a new schema, a field inside a list, a
    // struct or a map — no declared unit says what a number counts, nor which count a time is.
    if numbers_as_time(from, to) {
        return Err(fail(format!(
            "{from} holds numbers where {to} holds times: a number is no time (20261101 is no date, and a \
             count since 1970 names no unit); write them as dates, timestamps or text, or declare a number \
             column `timestamp(s)` (ms, us, ns) in [input.schema] to read it as epoch values"
        )));
    }
    if time_as_numbers(from, to) {
        return Err(fail(format!(
            "{from} holds times where {to} holds numbers: a time is no number (its count since 1970 depends \
             on a unit it does not name); keep the column a time, or compute the number in the query \
             (`date_part('epoch', ts)`)"
        )));
    }
    epoch_values(arr, to)
}

/// `arr`, integers, as timestamps of `to`'s unit counted from 1970: only where that unit was
/// declared (`timestamp(s)` …) for the column; every value survives, or its row is named.
pub fn epoch_values(arr: &ArrayRef, to: &DataType) -> Result<ArrayRef, Inexact> {
    let from = arr.data_type();
    let fail = |message: String| Inexact { row: None, message };
    if let DataType::Dictionary(_, v) = from {
        let plain = arrow::compute::cast(arr, v).map_err(|e| fail(e.to_string()))?;
        return epoch_values(&plain, to);
    }
    if !arrow::compute::can_cast_types(from, to) {
        return Err(fail(format!("{from} values cannot be read as {to}: declare a type they can take")));
    }
    let opts = CastOptions { safe: true, ..Default::default() };
    let out = cast_with_options(arr, to, &opts).map_err(|e| fail(format!("cannot convert {from} to {to}: {e}")))?;
    // Exact means the round trip gives every value back (and no value became null).
    let back =
        cast_with_options(&out, from, &opts).map_err(|e| fail(format!("cannot convert {to} back to {from}: {e}")))?;
    // A float's -0.0 is the number 0 as much as 0.0 is: an integer or decimal 0 holds it exactly.
    let original = if to.is_floating() { arr.clone() } else { crate::prepare::one_zero_one_nan(arr) };
    let differs = arrow::compute::kernels::cmp::distinct(&original, &back).map_err(|e| fail(e.to_string()))?;
    if let Some(row) = differs.values().set_indices().next() {
        let shown = crate::prepare::show_value(arr.as_ref(), row);
        return Err(Inexact {
            row: Some(row),
            message: format!("the value {shown} does not convert exactly from {from} to {to}"),
        });
    }
    Ok(out)
}

/// Whether casting `from` to `to` would read numbers as times (dates, timestamps, times of day,
/// durations), at any depth.
fn numbers_as_time(from: &DataType, to: &DataType) -> bool {
    any_pair(from, to, &|f, t| f.is_numeric() && is_time(t))
}

/// Whether casting `from` to `to` would read times as numbers, at any depth.
fn time_as_numbers(from: &DataType, to: &DataType) -> bool {
    any_pair(from, to, &|f, t| is_time(f) && t.is_numeric())
}

fn is_time(t: &DataType) -> bool {
    use DataType::*;
    matches!(t, Date32 | Date64 | Timestamp(..) | Time32(_) | Time64(_) | Duration(_))
}

/// Whether `leaf` holds for a pair of types a cast from `from` to `to` converts one into the
/// other: the types themselves, or those inside lists, maps and structs, paired as the cast
/// pairs them.
fn any_pair(from: &DataType, to: &DataType, leaf: &dyn Fn(&DataType, &DataType) -> bool) -> bool {
    use DataType::*;
    match (from, to) {
        (Dictionary(_, v), t) => any_pair(v, t, leaf),
        (f, Dictionary(_, v)) => any_pair(f, v, leaf),
        (
            List(a) | LargeList(a) | ListView(a) | LargeListView(a) | FixedSizeList(a, _),
            List(b) | LargeList(b) | ListView(b) | LargeListView(b) | FixedSizeList(b, _),
        )
        | (Map(a, _), Map(b, _)) => any_pair(a.data_type(), b.data_type(), leaf),
        // By name when every field is found so, else by position.
        (Struct(fa), Struct(fb)) => {
            let named: Option<Vec<_>> = fb.iter().map(|b| fa.iter().find(|a| a.name() == b.name())).collect();
            match named {
                Some(named) => named.iter().zip(fb.iter()).any(|(a, b)| any_pair(a.data_type(), b.data_type(), leaf)),
                None => fa.iter().zip(fb.iter()).any(|(a, b)| any_pair(a.data_type(), b.data_type(), leaf)),
            }
        }
        (f, t) => leaf(f, t),
    }
}

fn raw(arr: &ArrayRef) -> Result<Int64Array, Inexact> {
    let ints =
        arrow::compute::cast(arr, &DataType::Int64).map_err(|e| Inexact { row: None, message: e.to_string() })?;
    Ok(ints.as_primitive::<Int64Type>().clone())
}

fn with_unit(v: i64, from: TimeUnit, to: TimeUnit) -> Option<i64> {
    let (f, t) = (per_second(from), per_second(to));
    if t >= f {
        v.checked_mul(t / f)
    } else {
        (v % (f / t) == 0).then_some(v / (f / t))
    }
}

fn timestamps(values: Vec<Option<i64>>, to: &DataType) -> Result<ArrayRef, Inexact> {
    arrow::compute::cast(&(Arc::new(Int64Array::from(values)) as ArrayRef), to)
        .map_err(|e| Inexact { row: None, message: e.to_string() })
}

/// Wall-clock timestamps (no zone) as instants: the wall clock is in the job's time zone.
fn wall_clock_to_instant(
    arr: &ArrayRef,
    fu: TimeUnit,
    tu: TimeUnit,
    to: &DataType,
    tz: Tz,
) -> Result<ArrayRef, Inexact> {
    let v = raw(arr)?;
    let scale = per_second(fu);
    let mut out = Vec::with_capacity(v.len());
    for i in 0..v.len() {
        if v.is_null(i) {
            out.push(None);
            continue;
        }
        let x = v.value(i);
        let bad = |m: String| Inexact { row: Some(i), message: m };
        let wall = chrono::DateTime::from_timestamp(
            x.div_euclid(scale),
            (x.rem_euclid(scale) * (1_000_000_000 / scale)) as u32,
        )
        .ok_or_else(|| bad("timestamp out of range".into()))?
        .naive_utc();
        let utc = super::text::local_to_utc(wall, tz).map_err(bad)?;
        let nanos = utc.and_utc().timestamp_nanos_opt().ok_or_else(|| bad("timestamp out of range".into()))?;
        let in_unit = with_unit(nanos, TimeUnit::Nanosecond, tu)
            .ok_or_else(|| bad(format!("{wall} is finer than the unit {tu:?}")))?;
        out.push(Some(in_unit));
    }
    timestamps(out, to)
}

/// The first row of `from` whose value became an instant in `to` (a timestamp with a zone)
/// from a wall-clock time that `tz` repeats when its clocks go back: text written without an
/// offset, a timestamp without a zone, or a date's midnight. Such a time is taken as the
/// earlier instant, a guess; for a key's version the guess would order its versions.
pub fn repeated_wall_clock(from: &ArrayRef, to: &ArrayRef, tz: Tz) -> Option<usize> {
    let DataType::Timestamp(unit, Some(_)) = to.data_type() else { return None };
    // Each row's wall-clock time, where it was one.
    let wall: Vec<Option<i64>> = match base(from.data_type()) {
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => {
            let text = arrow::compute::cast(from, &DataType::Utf8).ok()?;
            let text = text.as_string::<i32>();
            text.iter().map(|s| s.and_then(|s| super::text::wall_clock_written(s, *unit, tz))).collect()
        }
        DataType::Timestamp(_, None) | DataType::Date32 | DataType::Date64 => {
            let wall = arrow::compute::cast(from, &DataType::Timestamp(*unit, None)).ok()?;
            let wall = arrow::compute::cast(&wall, &DataType::Int64).ok()?;
            wall.as_primitive::<Int64Type>().iter().collect()
        }
        _ => return None,
    };
    let repeated = crate::prepare::Unordered::new(&DataType::Timestamp(*unit, None), tz, wall.iter().flatten());
    wall.iter().position(|v| v.is_some_and(|v| repeated.holds(v)))
}

/// Why row `row` of a version column (see [`repeated_wall_clock`]) is refused.
pub fn repeated_version(from: &ArrayRef, row: usize, tz: Tz) -> String {
    let shown = crate::prepare::show_value(from.as_ref(), row);
    format!(
        "the version `{shown}` is a wall-clock time that {tz} has twice (its clocks go back then), so which instant it \
         is, and which of the key's versions is the latest, is not in the value; write the version with its offset \
         (or `Z`), or declare it `timestamp_ntz` in [input.schema] (then only a key with two versions in that hour \
         fails)"
    )
}

/// Instants as wall-clock time in the job's time zone (a column declared `timestamp_ntz`).
fn instant_to_wall_clock(arr: &ArrayRef, tu: TimeUnit, to: &DataType, tz: Tz) -> Result<ArrayRef, Inexact> {
    let DataType::Timestamp(fu, _) = arr.data_type() else {
        return Err(Inexact { row: None, message: "not a timestamp".into() });
    };
    let v = raw(arr)?;
    let scale = per_second(*fu);
    let mut out = Vec::with_capacity(v.len());
    for i in 0..v.len() {
        if v.is_null(i) {
            out.push(None);
            continue;
        }
        let x = v.value(i);
        let bad = |m: &str| Inexact { row: Some(i), message: m.to_string() };
        let utc = chrono::DateTime::from_timestamp(
            x.div_euclid(scale),
            (x.rem_euclid(scale) * (1_000_000_000 / scale)) as u32,
        )
        .ok_or_else(|| bad("timestamp out of range"))?;
        let wall = tz.from_utc_datetime(&utc.naive_utc()).naive_local();
        let nanos = wall.and_utc().timestamp_nanos_opt().ok_or_else(|| bad("timestamp out of range"))?;
        out.push(Some(with_unit(nanos, TimeUnit::Nanosecond, tu).ok_or_else(|| bad("finer than the unit"))?));
    }
    timestamps(out, to)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Decimal128Array, Int32Array, StringArray};
    use DataType::*;

    #[test]
    fn numbers_in_lists_and_structs_are_not_read_as_dates_or_instants() {
        let list = |t: DataType| List(Arc::new(Field::new("item", t, true)));
        let ints: ArrayRef =
            Arc::new(arrow::array::ListArray::from_iter_primitive::<Int64Type, _, _>(vec![Some(vec![
                Some(20000i64),
                None,
            ])]));
        let ts = Timestamp(TimeUnit::Millisecond, Some("UTC".into()));
        for to in [list(Date32), list(ts.clone())] {
            let e = exact_cast(&ints, &to, Tz::UTC).map(|_| ()).unwrap_err();
            assert!(e.message.contains("holds numbers"), "{}", e.message);
        }
        let d = Arc::new(Field::new("d", Int64, true));
        let obj: ArrayRef = Arc::new(arrow::array::StructArray::from(vec![(
            d,
            Arc::new(arrow::array::Int64Array::from(vec![20000])) as ArrayRef,
        )]));
        let to = Struct(vec![Field::new("d", Date32, true)].into());
        assert!(exact_cast(&obj, &to, Tz::UTC).is_err());
        // Fields in another order are paired by name, as the cast pairs them: no date is a number.
        let from = Struct(vec![Field::new("a", Int64, true), Field::new("d", Date32, true)].into());
        let to = Struct(vec![Field::new("d", Date32, true), Field::new("a", Int64, true)].into());
        assert!(!numbers_as_time(&from, &to));
        assert!(numbers_as_time(&list(Dictionary(Box::new(Int32), Box::new(Int64))), &list(Date32)));
    }

    #[test]
    fn times_and_numbers_never_convert_into_each_other() {
        let us = Timestamp(TimeUnit::Microsecond, None);
        let ints: ArrayRef = Arc::new(arrow::array::Int64Array::from(vec![1_762_000_000]));
        let e = exact_cast(&ints, &us, Tz::UTC).unwrap_err();
        assert!(e.message.contains("holds numbers where"), "{}", e.message);
        let times: ArrayRef = Arc::new(arrow::array::TimestampMicrosecondArray::from(vec![1_793_527_200_000_000]));
        for to in [Int64, Float64, Decimal128(20, 0)] {
            let e = exact_cast(&times, &to, Tz::UTC).unwrap_err();
            assert!(e.message.contains("holds times where"), "{to}: {}", e.message);
        }
        let days: ArrayRef = Arc::new(arrow::array::Date32Array::from(vec![20_758]));
        assert!(exact_cast(&days, &Int32, Tz::UTC).is_err());
        assert!(exact_cast(&ints, &Duration(TimeUnit::Second), Tz::UTC).is_err());
        // A declared unit reads epoch values; a date is still midnight as a timestamp.
        let got = epoch_values(&ints, &Timestamp(TimeUnit::Second, None)).unwrap();
        assert_eq!(got.as_primitive::<arrow::datatypes::TimestampSecondType>().value(0), 1_762_000_000);
        assert!(exact_cast(&days, &us, Tz::UTC).is_ok());
        assert!(time_as_numbers(
            &Struct(vec![Field::new("t", us, true)].into()),
            &Struct(vec![Field::new("t", Int64, true)].into())
        ));
    }

    #[test]
    fn nulls_inside_lists_and_structs_take_the_other_type() {
        let list = |t: DataType| List(Arc::new(Field::new("item", t, true)));
        let obj = |fs: Vec<(&str, DataType)>| {
            Struct(fs.into_iter().map(|(n, t)| Field::new(n, t, true)).collect::<Vec<_>>().into())
        };
        assert_eq!(unify_types(&list(Null), &list(Utf8)), Some(list(Utf8)));
        assert_eq!(unify_types(&list(Int64), &list(Null)), Some(list(Int64)));
        assert_eq!(unify_types(&list(Int64), &list(Utf8)), None);
        assert_eq!(unify_types(&list(Int32), &list(Int64)), None);
        let full = obj(vec![("x", Utf8), ("y", list(Int64))]);
        assert_eq!(unify_types(&obj(vec![("x", Null), ("y", list(Null))]), &full), Some(full.clone()));
        assert_eq!(unify_types(&obj(vec![("y", Null), ("x", Utf8)]), &full), None);
        assert_eq!(unify_types(&obj(vec![("x", Null)]), &full), None);
        assert!(has_null(&obj(vec![("x", Utf8), ("y", list(Null))])) && !has_null(&full));
        // Conformed exactly: only places without a value take a type.
        let empty = arrow::array::new_null_array(&list(Null), 2);
        let filled = exact_cast(&empty, &list(Utf8), chrono_tz::UTC).unwrap();
        assert_eq!((filled.data_type(), filled.null_count()), (&list(Utf8), 2));
        // `{}` in every row: an object whose fields are all absent, not a null object.
        let none = obj(vec![]);
        assert!(has_null(&none) && has_null(&list(none.clone())));
        assert_eq!(unify_types(&none, &full), Some(full.clone()));
        assert_eq!(unify_types(&list(full.clone()), &list(none.clone())), Some(list(full.clone())));
        let json = b"{\"m\": {}}\n{\"m\": null}\n{\"m\": {}}\n";
        let (schema, _) = arrow::json::reader::infer_json_schema(std::io::Cursor::new(&json[..]), None).unwrap();
        let batch =
            arrow::json::ReaderBuilder::new(Arc::new(schema)).build(&json[..]).unwrap().next().unwrap().unwrap();
        assert_eq!(batch.column(0).data_type(), &none);
        let filled = exact_cast(batch.column(0), &full, chrono_tz::UTC).unwrap();
        assert_eq!(filled.data_type(), &full);
        assert_eq!((0..3).map(|i| filled.is_null(i)).collect::<Vec<_>>(), [false, true, false]);
        let inner = filled.as_struct().column(0);
        assert_eq!(inner.null_count(), 3);
    }

    #[test]
    fn the_written_rule() {
        assert_eq!(unify_types(&Int32, &Int64), Some(Int64));
        assert_eq!(unify_types(&UInt32, &Int16), Some(Int64));
        assert_eq!(unify_types(&UInt64, &Int64), None);
        assert_eq!(unify_types(&Decimal128(12, 2), &Decimal128(14, 2)), Some(Decimal128(14, 2)));
        assert_eq!(unify_types(&Decimal128(12, 2), &Decimal128(10, 4)), Some(Decimal128(14, 4)));
        assert_eq!(unify_types(&Decimal128(38, 2), &Decimal128(38, 3)), None);
        assert_eq!(unify_types(&Decimal128(12, 2), &Int32), Some(Decimal128(12, 2)));
        assert_eq!(unify_types(&Decimal128(5, 2), &Int64), Some(Decimal128(21, 2)));
        assert_eq!(unify_types(&Int64, &Float64), None);
        assert_eq!(unify_types(&Utf8, &Int64), None);
        assert_eq!(unify_types(&Utf8View, &Dictionary(Box::new(Int32), Box::new(Utf8))), Some(Utf8));
        assert_eq!(unify_types(&Utf8, &LargeUtf8), Some(Utf8));
        let ts = |u, z: Option<&str>| Timestamp(u, z.map(Into::into));
        assert_eq!(
            unify_types(&ts(TimeUnit::Millisecond, Some("UTC")), &ts(TimeUnit::Microsecond, Some("UTC"))),
            Some(ts(TimeUnit::Microsecond, Some("UTC")))
        );
        assert_eq!(
            unify_types(&ts(TimeUnit::Microsecond, None), &ts(TimeUnit::Microsecond, Some("+01:00"))),
            Some(ts(TimeUnit::Microsecond, Some("UTC")))
        );
        assert_eq!(unify_types(&Date32, &Timestamp(TimeUnit::Second, None)), None);
    }

    #[test]
    fn unify_names_the_column_both_types_and_objects() {
        let a = Schema::new(vec![Field::new("id", Utf8, true), Field::new("v", Int32, true)]);
        let b =
            Schema::new(vec![Field::new("v", Int64, true), Field::new("id", Utf8, true), Field::new("x", Utf8, true)]);
        let s = unify(&[("a.parquet", &a), ("b.parquet", &b)], &|_| None, &|_| None).unwrap();
        let names: Vec<_> = s.fields().iter().map(|f| (f.name().as_str(), f.data_type().clone())).collect();
        assert_eq!(names, [("id", Utf8), ("v", Int64), ("x", Utf8)]);
        let c = Schema::new(vec![Field::new("v", Utf8, true)]);
        let e = unify(&[("a.parquet", &a), ("c.parquet", &c)], &|_| None, &|_| None).unwrap_err().to_string();
        assert!(e.contains("`v`") && e.contains("Int32 in a.parquet") && e.contains("Utf8 in c.parquet"), "{e}");
    }

    #[test]
    fn conversions_are_exact_or_name_the_row() {
        let tz = chrono_tz::UTC;
        let ints: ArrayRef = Arc::new(Int32Array::from(vec![Some(1), None, Some(-7)]));
        assert_eq!(exact_cast(&ints, &Int64, tz).unwrap().as_primitive::<Int64Type>().values().to_vec(), [1, 0, -7]);
        let wide: ArrayRef = Arc::new(Int64Array::from(vec![1, 5_000_000_000]));
        assert_eq!(exact_cast(&wide, &Int32, tz).unwrap_err().row, Some(1));
        let dec: ArrayRef = Arc::new(Decimal128Array::from(vec![1500, 1505]).with_precision_and_scale(12, 3).unwrap());
        let e = exact_cast(&dec, &Decimal128(12, 2), tz).unwrap_err();
        assert_eq!(e.row, Some(1), "1.505 would lose a digit: {}", e.message);
        let up = exact_cast(&dec, &Decimal128(14, 4), tz).unwrap();
        assert_eq!(up.as_primitive::<arrow::datatypes::Decimal128Type>().value(1), 15050);
        let text: ArrayRef = Arc::new(StringArray::from(vec!["a"]));
        assert!(exact_cast(&text, &LargeUtf8, tz).is_ok());
    }

    #[test]
    fn wall_clock_joins_instants_in_the_job_zone() {
        let ny: Tz = "America/New_York".parse().unwrap();
        // 2026-11-01 02:00 wall clock (after the change: EST, -05:00) is 07:00Z.
        let wall = chrono::NaiveDate::from_ymd_opt(2026, 11, 1).unwrap().and_hms_opt(2, 0, 0).unwrap();
        let arr: ArrayRef =
            Arc::new(arrow::array::TimestampMicrosecondArray::from(vec![wall.and_utc().timestamp_micros()]));
        let to = Timestamp(TimeUnit::Microsecond, Some("UTC".into()));
        let got = exact_cast(&arr, &to, ny).unwrap();
        let v = got.as_primitive::<arrow::datatypes::TimestampMicrosecondType>().value(0);
        assert_eq!(v, wall.and_utc().timestamp_micros() + 5 * 3600 * 1_000_000);
    }
}
