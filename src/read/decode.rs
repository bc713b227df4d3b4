//! Decoding one input object: Parquet (row groups skipped by their date statistics), CSV and
//! NDJSON (plain, `.gz` or `.zst`), into pieces per partition date. Every column is taken by
//! its name in that object — the object's own footer, header or field names — never by
//! position, and every row keeps its object, row and (in text) line.
//!
//! Columns declared in `[input.schema]` are converted to their type exactly, in every format;
//! text columns that are not declared get the type all their values share (`text::infer`).
//! The partition column becomes a `date32`, and a `from_timestamp` column a timestamp. A value
//! that does not convert fails the date its row belongs to (in a flat layout, other dates of
//! the object still read); a column the config uses that is missing from an object fails every
//! date the object serves.

use std::collections::BTreeMap;
use std::io::Cursor;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, Int32Array, Int64Array, RecordBatch, UInt32Array};
use arrow::compute::take_record_batch;
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use bytes::Bytes;
use chrono::{NaiveDate, TimeZone};
use chrono_tz::Tz;
use parquet::arrow::arrow_reader::{
    ArrowReaderMetadata, ArrowReaderOptions, ParquetRecordBatchReaderBuilder, RowSelection, RowSelector,
};
use parquet::file::metadata::ParquetMetaData;
use parquet::file::statistics::Statistics;

use super::ranged::{Held, Ranged};
use super::text::{self, per_second, Declared};
use super::unify;
use super::Format;
use super::Piece;
use crate::dates;
use crate::error::{InputError, Location};

/// The tombstone column (`identity.deleted.column`) of a planned run, and the columns the
/// config names otherwise (declared in `[input.schema]`, key, version, partition column):
/// columns of their own, never taken for a misspelling of it.
#[derive(Debug, Clone, PartialEq)]
pub struct Tombstone {
    pub column: String,
    pub others: Vec<String>,
    /// `optional = true`: an NDJSON object without the column has no deletes.
    pub optional: bool,
}

impl Tombstone {
    /// A field of `fields` (name, type) the tombstone may be a misspelling of: the same name
    /// but for case or punctuation (`Op`, `__op`), the words of one among the words of the
    /// other (`meta_op`, `opType`, `isDeleted` for `deleted`, `deleted` for
    /// `_fivetran_deleted`), a letter off (two for a longer name: `opp`), or the object it
    /// would be a field of (`meta` of `meta.op`). An object with such a field is not read as
    /// one without deletes: a misspelt tombstone would delete nothing. Lists and objects are
    /// not flags, so never taken for one. This catches the likely slips, not every one.
    pub fn like<'a>(&self, fields: impl IntoIterator<Item = (&'a str, &'a DataType)>) -> Option<&'a str> {
        let t = self.column.as_str();
        let mine = words(t);
        let within = |a: &[String], b: &[String]| !a.is_empty() && b.windows(a.len()).any(|w| w == a);
        let near = |n: &str| {
            let d = strsim::levenshtein(n, t);
            let theirs = words(n);
            d <= 1
                || (t.chars().count() > 3 && d <= 2)
                || theirs.concat() == mine.concat()
                || within(&mine, &theirs)
                || within(&theirs, &mine)
        };
        fields.into_iter().find_map(|(n, ty)| {
            let inside = t.strip_prefix(n).is_some_and(|rest| rest.starts_with('.'));
            let flag = !ty.is_nested();
            let taken = n != t
                && ((inside && matches!(ty, DataType::Struct(_)))
                    || (flag && !self.others.iter().any(|o| o == n) && near(n)));
            taken.then_some(n)
        })
    }
}

/// The words of a name, lower case: split at anything but letters and digits, and where a
/// lower-case letter or digit meets an upper-case one (`opType`: `op`, `type`).
fn words(name: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut word = String::new();
    let mut lower = false;
    for c in name.chars() {
        if (!c.is_alphanumeric() || (lower && c.is_uppercase())) && !word.is_empty() {
            out.push(std::mem::take(&mut word));
        }
        if c.is_alphanumeric() {
            word.extend(c.to_lowercase());
        }
        lower = c.is_lowercase() || c.is_ascii_digit();
    }
    if !word.is_empty() {
        out.push(word);
    }
    out
}

/// Why an object without the tombstone column `tombstone`, but with the field `like`, is refused.
pub fn tombstone_missing(tombstone: &str, like: &str) -> String {
    if tombstone.strip_prefix(like).is_some_and(|rest| rest.starts_with('.')) {
        return format!(
            "no column `{tombstone}`: a field inside the object `{like}` cannot be the tombstone column; \
             name a column of the input"
        );
    }
    format!(
        "a column `{like}` beside or instead of the tombstone column `{tombstone}`: did you mean `{like}`? \
         A misspelt tombstone column would delete nothing. If `{like}` is another column, declare its type \
         in [input.schema] to say so (`{like} = \"utf8\"`, or its type)"
    )
}

/// `fields` with `field` placed where an object holding it has it: NDJSON fields are inferred
/// in name order, so a date whose objects leave the field out reads its columns in the order of
/// a date whose objects have it.
pub fn in_name_order(fields: &arrow::datatypes::Fields, field: Field) -> Vec<Field> {
    let mut out: Vec<Field> = fields.iter().map(|f| f.as_ref().clone()).collect();
    let at = out.iter().position(|f| f.name() > field.name()).unwrap_or(out.len());
    out.insert(at, field);
    out
}

/// How to turn the bytes of an input object into rows.
#[derive(Debug, Clone)]
pub struct Decoder {
    pub format: Format,
    pub delimiter: u8,
    pub header: bool,
    /// Where each row's partition date comes from.
    pub date_source: DateSource,
    pub tz: Tz,
    /// Column types declared in `[input.schema]`.
    pub declared: BTreeMap<String, Declared>,
    /// The columns the config uses: every object must hold them.
    pub required: Vec<String>,
    /// The tombstone column, once planned: an NDJSON object with a field like it is refused,
    /// and (with `optional`) one that leaves it out of every line has no deletes.
    pub tombstone: Option<Tombstone>,
    /// The run's record schema, once planned: the types of columns a date's objects leave
    /// empty (a text column with no value reads as type Null).
    pub run: Option<SchemaRef>,
    /// The version column: a wall-clock time of it that the zone repeats may not become an
    /// instant ([`unify::repeated_wall_clock`]).
    pub version: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum DateSource {
    /// A date column (`date32`, `date64`, or `YYYY-MM-DD` text).
    Column(String),
    /// A timestamp column: an instant's date in the job's time zone, or a wall-clock time's
    /// own date.
    Timestamp(String),
    /// Not in the file: the `col=date/` folder of a Hive layout gives it.
    Path,
}

/// What one object holds for the wanted dates: its rows by date, and the dates whose rows in
/// it are bad (the first bad value of each).
#[derive(Debug, Default)]
pub struct Decoded {
    pub pieces: Vec<Piece>,
    pub bad: BTreeMap<NaiveDate, InputError>,
}

/// How an object is cut into parts as it is decoded.
#[derive(Debug, Clone, Copy)]
pub struct Parts {
    /// At most this many rows a part (and never more than a row group).
    pub rows: usize,
    /// And at most about this many decoded bytes, at the widest rows of the object decoded so
    /// far: its first rows are decoded on their own to see how wide they are.
    pub bytes: Option<u64>,
}

impl Parts {
    /// Whole row groups.
    pub const WHOLE: Parts = Parts { rows: usize::MAX, bytes: None };
}

/// An object's stored bytes, for [`Decoder::decode_parts`].
pub enum Stored {
    /// Fetched whole.
    Whole(Bytes),
    /// Read from its store in ranges: a Parquet object a row group at a time, an NDJSON object
    /// from start to end.
    Ranged(Ranged),
}

/// The most bytes of text a piece of an NDJSON object read as pieces of lines holds, and the
/// fewest (a part's bytes in between).
pub const PIECE: usize = 8 << 20;
const MIN_PIECE: usize = 64 << 10;

/// Rows decoded on their own to see how wide an object's rows are ([`Parts::bytes`]).
const PROBE_ROWS: u64 = 64;

/// Rows of an object in its own (normalized) schema, with their row and line numbers, and the
/// values that failed to convert: (row within the batch, column, reason).
struct Rows {
    batch: RecordBatch,
    first_row: u64,
    lines: Option<Arc<[u64]>>,
    bad: Vec<(usize, String, String)>,
    /// The share of the object's stored bytes these rows stand for (their share of its rows).
    stored: u64,
}

/// The bytes a batch's rows take, without the spare capacity of its buffers: how wide its rows
/// are. (`get_array_memory_size` counts whole buffers, and the last rows of a row group are
/// decoded into buffers reserved for a whole part: several times their width.)
pub fn rows_bytes(batch: &RecordBatch) -> u64 {
    let column = |c: &ArrayRef| c.to_data().get_slice_memory_size().unwrap_or_else(|_| c.get_array_memory_size());
    batch.columns().iter().map(column).sum::<usize>() as u64
}

/// What a first reading of a CSV object finds ([`Decoder::csv_types`]).
struct CsvTypes {
    names: Vec<String>,
    /// The type each undeclared column's values share.
    inferred: BTreeMap<String, DataType>,
    /// Its rows.
    rows: u64,
}

/// A text reader's error, in `object`.
fn text_error(object: &str, e: text::TextError) -> InputError {
    InputError::bad(at(object, e.row, e.line, e.column.as_deref()), e.message)
}

fn at(object: &str, row: Option<u64>, line: Option<u64>, column: Option<&str>) -> Location {
    Location { object: object.into(), row, line, column: column.map(str::to_string) }
}

impl Decoder {
    /// The type a date's rows hold `column` in, when not their own objects' unified type: the
    /// declared type.
    pub fn column_type(&self, column: &str) -> Option<DataType> {
        self.declared.get(column).map(|d| d.ty.clone())
    }

    /// The run's type of `column`, for a date whose objects hold no value of it.
    pub fn run_type(&self, column: &str) -> Option<DataType> {
        let t = self.run.as_ref()?.field_with_name(column).ok()?.data_type();
        (t != &DataType::Null).then(|| t.clone())
    }

    /// The declared type of a column, including what the partition source implies: the
    /// partition column is a date, a `from_timestamp` column read from text a timestamp.
    fn declared(&self, column: &str) -> Option<Declared> {
        if let Some(d) = self.declared.get(column) {
            return Some(d.clone());
        }
        match &self.date_source {
            DateSource::Column(c) if c == column => Some(Declared::plain(DataType::Date32)),
            _ => None,
        }
    }

    /// The type a text value of `column` is read as when nothing is declared for it.
    fn implied_text(&self, column: &str) -> Option<Declared> {
        match &self.date_source {
            DateSource::Timestamp(c) if c == column => {
                Some(Declared::plain(DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()))))
            }
            _ => None,
        }
    }

    /// The column names of a CSV object's header, which a header alone (no rows) still gives.
    pub fn csv_header(&self, object: &str, bytes: &Bytes) -> Result<Vec<String>, InputError> {
        let bytes = self.text_bytes(object, bytes.clone())?;
        Ok(self.csv_types(&bytes).map_err(|e| text_error(object, e))?.names)
    }

    /// The record schema one object gives (Parquet: from its footer alone), under the same
    /// conversions as its rows.
    pub fn schema_of(&self, object: &str, bytes: &Bytes) -> Result<SchemaRef, InputError> {
        match self.format {
            Format::Parquet => {
                let meta = parquet_meta(object, bytes)?;
                let fields = meta.schema().fields().iter().map(|f| {
                    let t = match self.declared(f.name()) {
                        Some(d) => d.ty,
                        None => match (self.implied_text(f.name()), f.data_type()) {
                            (Some(d), DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View) => d.ty,
                            (_, t) => unify::base(t),
                        },
                    };
                    Field::new(f.name(), t, true)
                });
                Ok(Arc::new(Schema::new(fields.collect::<Vec<_>>())))
            }
            // Read through once for its columns' types, without keeping its rows.
            Format::Csv => {
                let bytes = self.text_bytes(object, bytes.clone())?;
                let CsvTypes { names, inferred, rows } = self.csv_types(&bytes).map_err(|e| text_error(object, e))?;
                if rows == 0 {
                    return Ok(Arc::new(Schema::empty()));
                }
                // The types its rows convert to: those of no rows converted.
                let none = names.iter().map(|_| arrow::array::StringArray::from(Vec::<Option<&str>>::new())).collect();
                let schema = self.csv_batch(object, &names, none, Arc::from([]), 0, &inferred)?.batch.schema();
                self.check_required(object, &schema)?;
                Ok(schema)
            }
            Format::Ndjson => self.json_schema(object, &Stored::Whole(bytes.clone())),
        }
    }

    /// The record schema of an NDJSON object ([`Decoder::schema_of`]): read through as pieces
    /// of lines for its fields' types, without keeping its rows (nor, from a store, its bytes).
    pub fn json_schema(&self, object: &str, stored: &Stored) -> Result<SchemaRef, InputError> {
        let src = Streamed { object, stored, piece: PIECE };
        let typed = self.json_typed(&src)?;
        if typed.rows == 0 {
            return Ok(Arc::new(Schema::empty()));
        }
        let none = RecordBatch::new_empty(typed.nulled.clone());
        let schema = self.json_rows(none, &typed.numbers, 0, None).batch.schema();
        self.check_required(object, &schema)?;
        Ok(schema)
    }

    /// Decodes one object into pieces per date, keeping only rows whose date is in `wanted`
    /// (all dates when `wanted` is empty). `path_date` is the date of the object's `col=date/`
    /// folder, when the input is Hive partitioned. An error fails every date the object serves.
    pub fn decode(
        &self,
        object: &str,
        bytes: Bytes,
        wanted: &[NaiveDate],
        path_date: Option<NaiveDate>,
    ) -> Result<Decoded, InputError> {
        self.decode_within(object, bytes, wanted, path_date, None)
    }

    /// [`Decoder::decode`], what the rows decode to counted by `meter` when there is one:
    /// decoding stops once it is over its budget.
    pub fn decode_within(
        &self,
        object: &str,
        bytes: Bytes,
        wanted: &[NaiveDate],
        path_date: Option<NaiveDate>,
        meter: Option<&crate::spill::Meter>,
    ) -> Result<Decoded, InputError> {
        // Every row group decoded before any is split by date: a corrupt row group fails the
        // object before a bad value in an earlier one.
        let object: Arc<str> = Arc::from(object);
        let rows = self.all_rows(&object, bytes, wanted, path_date, meter)?;
        let mut out = Decoded::default();
        for r in rows {
            self.split_by_date(&object, r, wanted, path_date, &mut out)?;
        }
        Ok(out)
    }

    /// [`Decoder::decode`], a part at a time: a Parquet object is decoded in `parts` (at most a
    /// row group) and each part handed to `f` before the next is decoded; a text object is one
    /// part per batch of its rows (a CSV object whose text is past `parts.bytes` is read a batch
    /// at a time: its text is held whole, decompressed, but one batch of its rows at a time; an
    /// NDJSON object as pieces of lines, [`Decoder::streams`], its text never held whole).
    /// The parts come in the object's row order.
    /// Which of an object's errors comes first can differ from [`Decoder::decode`] (a bad value
    /// found before a corrupt row group): a caller that must name the same error decodes the
    /// failed object again with it.
    pub fn decode_parts(
        &self,
        object: &str,
        stored: Stored,
        wanted: &[NaiveDate],
        path_date: Option<NaiveDate>,
        parts: Parts,
        f: &mut dyn FnMut(Decoded) -> Result<(), InputError>,
    ) -> Result<(), InputError> {
        let object: Arc<str> = Arc::from(object);
        let mut checked = false;
        let mut each = |r: Rows| {
            if !checked {
                self.check_required(&object, &r.batch.schema())?;
                checked = true;
            }
            let mut part = Decoded::default();
            self.split_by_date(&object, r, wanted, path_date, &mut part)?;
            f(part)
        };
        let piece = parts.bytes.map_or(PIECE, |b| (b as usize).clamp(MIN_PIECE, PIECE));
        match stored {
            Stored::Whole(bytes) if self.streams(&object, bytes.len() as u64, parts) => {
                let stored_bytes = bytes.len() as u64;
                let stored = Stored::Whole(bytes);
                let src = Streamed { object: &object, stored: &stored, piece };
                self.ndjson_parts(&src, stored_bytes, parts, &mut each)
            }
            Stored::Whole(bytes) => self.rows(&object, bytes, wanted, path_date, parts, &mut each),
            Stored::Ranged(r) if self.format == Format::Parquet => {
                self.parquet_rows(&object, r, wanted, path_date, parts, &mut each)
            }
            Stored::Ranged(r) => {
                let stored_bytes = parquet::file::reader::Length::len(&r);
                let stored = Stored::Ranged(r);
                let src = Streamed { object: &object, stored: &stored, piece };
                self.ndjson_parts(&src, stored_bytes, parts, &mut each)
            }
        }
    }

    fn rows(
        &self,
        object: &str,
        bytes: Bytes,
        wanted: &[NaiveDate],
        path_date: Option<NaiveDate>,
        parts: Parts,
        f: &mut dyn FnMut(Rows) -> Result<(), InputError>,
    ) -> Result<(), InputError> {
        let stored = bytes.len() as u128;
        let rows = match self.format {
            Format::Parquet => return self.parquet_rows(object, bytes, wanted, path_date, parts, f),
            Format::Csv | Format::Ndjson => {
                let bytes = self.text_bytes(object, bytes)?;
                // Text past a part's bytes is read a batch at a time; within them, whole (one
                // reading instead of two).
                if self.format == Format::Csv && parts.bytes.is_some_and(|b| bytes.len() as u64 > b) {
                    return self.csv_parts(object, &bytes, stored, f);
                }
                let mut rows = match self.format {
                    Format::Csv => self.csv_rows(object, &bytes)?,
                    _ => self.ndjson_rows(object, &bytes)?,
                };
                let all = rows.iter().map(|r| r.batch.num_rows() as u128).sum::<u128>().max(1);
                for r in &mut rows {
                    r.stored = (stored * r.batch.num_rows() as u128 / all) as u64;
                }
                rows
            }
        };
        rows.into_iter().try_for_each(f)
    }

    /// Every row of an object, whole row groups at a time, once the object is known to hold
    /// the columns the config uses. With a `meter`, a row group is decoded a part at a time and
    /// each part counted; decoding stops once the meter is over its budget.
    fn all_rows(
        &self,
        object: &str,
        bytes: Bytes,
        wanted: &[NaiveDate],
        path_date: Option<NaiveDate>,
        meter: Option<&crate::spill::Meter>,
    ) -> Result<Vec<Rows>, InputError> {
        let mut rows = Vec::new();
        let parts = meter.map_or(Parts::WHOLE, |m| Parts { rows: super::CHUNK_ROWS, bytes: Some(m.part_bytes()) });
        self.rows(object, bytes, wanted, path_date, parts, &mut |r| {
            if let Some(m) = meter {
                // With its row numbers (and lines), as a piece keeps them.
                let origin = r.batch.num_rows() as u64 * if r.lines.is_some() { 16 } else { 8 };
                if !m.add(r.batch.get_array_memory_size() as u64 + origin, r.stored) {
                    return Err(InputError::unreadable(Location::object(object), "over the memory budget"));
                }
            }
            rows.push(r);
            Ok(())
        })?;
        if let Some(first) = rows.first() {
            self.check_required(object, &first.batch.schema())?;
        }
        Ok(rows)
    }

    /// Fails an object that lacks a column the config uses.
    fn check_required(&self, object: &str, schema: &Schema) -> Result<(), InputError> {
        let has: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
        self.check_names(object, &has, "")
    }

    /// [`Decoder::check_required`] for an object of no rows, by the names its header or footer
    /// gives: an object that lacks the key is not of this table, rows or none (a header of
    /// another export, a line of blanks), as it would be refused the day it holds one.
    fn check_no_rows(&self, object: &str, names: &[&str]) -> Result<(), InputError> {
        self.check_names(object, names, " (it holds no rows)")
    }

    fn check_names(&self, object: &str, has: &[&str], note: &str) -> Result<(), InputError> {
        match self.required.iter().find(|c| !has.contains(&c.as_str())) {
            None => Ok(()),
            Some(c) => {
                let shown: Vec<String> = has.iter().map(|n| format!("`{n}`")).collect();
                let has = match shown.is_empty() {
                    true => "no column".to_string(),
                    false => format!("only {}", shown.join(", ")),
                };
                Err(InputError::bad(
                    at(object, None, None, Some(c)),
                    format!("missing column: the config uses it, and this object has {has}{note}"),
                ))
            }
        }
    }

    /// Converts every column to its declared type (or, for text, its inferred or implied one).
    /// `text_inferred` gives the type of undeclared text columns.
    fn convert(
        &self,
        batch: RecordBatch,
        text_inferred: &dyn Fn(&str) -> Option<DataType>,
    ) -> (RecordBatch, Vec<(usize, String, String)>) {
        let mut bad = Vec::new();
        let schema = batch.schema();
        let mut fields = Vec::with_capacity(schema.fields().len());
        let mut columns = Vec::with_capacity(schema.fields().len());
        for (f, c) in schema.fields().iter().zip(batch.columns()) {
            let name = f.name();
            let is_text =
                matches!(unify::base(c.data_type()), DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View);
            let want = self
                .declared(name)
                .or_else(|| if is_text { self.implied_text(name) } else { None })
                .or_else(|| if is_text { text_inferred(name).map(Declared::plain) } else { None });
            let converted: ArrayRef = match want {
                Some(d) if d.ty == DataType::Null => arrow::array::new_null_array(&DataType::Null, c.len()),
                Some(d) if is_text && d.ty != DataType::Utf8 => {
                    let s = arrow::compute::cast(c, &DataType::Utf8).unwrap_or_else(|_| c.clone());
                    let parsed = text::parse_column(s.as_string::<i32>(), &d, self.tz);
                    bad.extend(parsed.bad.into_iter().map(|(r, m)| (r, name.clone(), m)));
                    parsed.array
                }
                // A number is an epoch value only in a declared unit, as in text.
                Some(d) if matches!(d.ty, DataType::Timestamp(..)) && is_number(c.data_type()) && !d.epoch => {
                    let message = format!(
                        "is a {} column: declare it `timestamp(s)` or `timestamp(ms)` (or us, ns) to read epoch values",
                        c.data_type()
                    );
                    bad.extend(
                        (0..c.len()).map(|r| (r, name.clone(), if r == 0 { message.clone() } else { String::new() })),
                    );
                    arrow::array::new_null_array(&d.ty, c.len())
                }
                Some(d) => match match d.epoch && is_number(&unify::base(c.data_type())) {
                    true => unify::epoch_values(c, &d.ty),
                    false => unify::exact_cast(c, &d.ty, self.tz),
                } {
                    Ok(a) => a,
                    Err(e) => {
                        // Not value by value: every row of the batch is suspect.
                        bad.push((e.row.unwrap_or(0), name.clone(), e.message));
                        bad.extend((0..c.len()).map(|r| (r, name.clone(), String::new())));
                        arrow::array::new_null_array(&d.ty, c.len())
                    }
                },
                // Wider than 38 digits: past what lakeswap computes and most readers read
                // exactly (DuckDB reads such a column as a double, Spark not at all).
                None if matches!(unify::base(c.data_type()), DataType::Decimal256(..)) => {
                    let message = format!(
                        "is a {} column, wider than the 38 digits lakeswap computes: declare it in [input.schema] \
                         as a decimal of at most 38 digits if its values fit one, or as `utf8` to keep them as text",
                        c.data_type()
                    );
                    bad.extend(
                        (0..c.len()).map(|r| (r, name.clone(), if r == 0 { message.clone() } else { String::new() })),
                    );
                    arrow::array::new_null_array(&DataType::Utf8, c.len())
                }
                None => match unify::base(c.data_type()) {
                    t if &t != c.data_type() => arrow::compute::cast(c, &t).unwrap_or_else(|_| c.clone()),
                    _ => c.clone(),
                },
            };
            if self.version.as_ref() == Some(name) {
                if let Some(r) = unify::repeated_wall_clock(c, &converted, self.tz) {
                    bad.push((r, name.clone(), unify::repeated_version(c, r, self.tz)));
                }
            }
            fields.push(Field::new(name, converted.data_type().clone(), true));
            columns.push(converted);
        }
        let opts = arrow::array::RecordBatchOptions::new().with_row_count(Some(batch.num_rows()));
        let out = RecordBatch::try_new_with_options(Arc::new(Schema::new(fields)), columns, &opts).unwrap_or(batch);
        (out, bad)
    }

    fn parquet_rows<R: Held>(
        &self,
        object: &str,
        source: R,
        wanted: &[NaiveDate],
        path_date: Option<NaiveDate>,
        parts: Parts,
        f: &mut dyn FnMut(Rows) -> Result<(), InputError>,
    ) -> Result<(), InputError> {
        // A read the store failed is the store's error (worth a retry), not the object's.
        let failed = |e: InputError| match source.failure() {
            Some(m) => InputError::unreadable(Location::object(object), m),
            None => e,
        };
        let meta = parquet_meta(object, &source).map_err(failed)?;
        let md = meta.metadata().clone();
        let (size, file_rows) = (source.len() as u128, md.file_metadata().num_rows().max(1) as u128);
        let share = |rows: u64| (size * rows as u128 / file_rows) as u64;
        // Row groups that may hold a wanted date, by the date column's statistics.
        let ranges = match path_date {
            None => row_group_dates(&md, meta.schema(), &self.date_source, self.tz),
            Some(_) => vec![None; md.num_row_groups()],
        };
        let (lo, hi) = match (wanted.first(), wanted.last()) {
            (Some(a), Some(b)) => (dates::to_days(*a), dates::to_days(*b)),
            _ => (i32::MIN, i32::MAX),
        };
        // The widest rows decoded so far, in bytes, when parts are sized by bytes.
        let mut widest: Option<u64> = None;
        let mut first_row = 0u64;
        for (i, rg) in md.row_groups().iter().enumerate() {
            let n = rg.num_rows() as u64;
            let skip = ranges[i].is_some_and(|(mn, mx)| mx < lo || mn > hi);
            if !skip && n > 0 {
                // The row group's column chunks: past the object's end, the object is cut short
                // or its footer is wrong (as the whole object's decoding would find).
                let (mut start, mut end) = (u64::MAX, 0u64);
                for c in rg.columns() {
                    let at = c.dictionary_page_offset().unwrap_or(c.data_page_offset());
                    let (s, l) =
                        (u64::try_from(at).unwrap_or(u64::MAX), u64::try_from(c.compressed_size()).unwrap_or(0));
                    (start, end) = (start.min(s), end.max(s.saturating_add(l)));
                }
                if start >= end || end > source.len() {
                    let why = format!(
                        "cannot decode row group {i} (truncated or corrupt?): its column chunks lie at bytes \
                         {start}..{end} of {}",
                        source.len()
                    );
                    return Err(InputError::bad(Location::object(object), why));
                }
                source.hold(start..end).map_err(|m| InputError::unreadable(Location::object(object), m))?;
            }
            let mut done = 0u64;
            while !skip && done < n {
                // Until rows of the object have been seen, a few are decoded on their own to
                // see how wide they are; then the rest of the row group in parts of that width.
                let probe = parts.bytes.is_some() && widest.is_none();
                let take = if probe { PROBE_ROWS.min(n - done) } else { n - done };
                let batch = match (parts.bytes, widest) {
                    (Some(b), Some(w)) => (b / w.max(1)).clamp(1, parts.rows as u64),
                    _ => parts.rows as u64,
                };
                let mut builder = ParquetRecordBatchReaderBuilder::new_with_metadata(source.clone(), meta.clone())
                    .with_row_groups(vec![i])
                    .with_batch_size(take.min(batch).max(1) as usize);
                if done > 0 || take < n {
                    let selection = vec![RowSelector::skip(done as usize), RowSelector::select(take as usize)];
                    builder = builder.with_row_selection(RowSelection::from(selection));
                }
                let reader = builder.build().map_err(|e| {
                    failed(InputError::bad(Location::object(object), format!("cannot decode row group {i}: {e}")))
                })?;
                let mut row = first_row + done;
                for b in reader {
                    let b = b.map_err(|e| {
                        failed(InputError::bad(
                            at(object, Some(row), None, None),
                            format!("cannot decode row group {i} (truncated or corrupt?): {e}"),
                        ))
                    })?;
                    let len = b.num_rows() as u64;
                    let (batch, bad) = self.convert(b, &|_| None);
                    if parts.bytes.is_some() && len > 0 {
                        let width = rows_bytes(&batch) / len;
                        widest = Some(widest.map_or(width, |w| w.max(width)));
                    }
                    f(Rows { batch, first_row: row, lines: None, bad, stored: share(len) })?;
                    row += len;
                }
                done += take;
            }
            first_row += n;
        }
        if md.file_metadata().num_rows() == 0 {
            let names: Vec<&str> = meta.schema().fields().iter().map(|f| f.name().as_str()).collect();
            self.check_no_rows(object, &names)?;
        }
        Ok(())
    }

    /// A text object's stored bytes as text: decompressed, past a byte-order mark (NDJSON), and
    /// refused when they are another format's.
    fn text_bytes(&self, object: &str, bytes: Bytes) -> Result<Bytes, InputError> {
        let stored_empty = bytes.is_empty();
        let mut bytes = text::decompress(object, bytes).map_err(|m| InputError::bad(Location::object(object), m))?;
        // A CSV read with a header has at least that line: without one (blank lines alone, which
        // the reader passes over), the object is not a complete CSV. An empty NDJSON object, or
        // a CSV read without a header, is a whole document of no rows.
        let text = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(&bytes);
        if self.format == Format::Csv && self.header && text.iter().all(|b| matches!(b, b'\n' | b'\r')) {
            let what = match (stored_empty, bytes.is_empty()) {
                (true, _) => "the object is empty (0 bytes)",
                (false, true) => "the object holds no text",
                (false, false) => "the object holds blank lines alone",
            };
            return Err(InputError::bad(
                Location::object(object),
                format!("{what}: not even the header line a CSV read with a header has (an upload cut short?)"),
            ));
        }
        // A byte-order mark opens many text files written on Windows; CSV's reader passes over
        // it, JSON's would call the first line malformed.
        if self.format == Format::Ndjson && bytes.starts_with(b"\xEF\xBB\xBF") {
            bytes = bytes.slice(3..);
        }
        if let Some(what) = sniff(&bytes) {
            return Err(InputError::bad(Location::object(object), format!("not {:?} text: {what}", self.format)));
        }
        Ok(bytes)
    }

    /// A whole CSV object's rows, its undeclared columns typed by every value of the object.
    fn csv_rows(&self, object: &str, bytes: &[u8]) -> Result<Vec<Rows>, InputError> {
        let t = text::read_csv(bytes, self.header, self.delimiter).map_err(|e| text_error(object, e))?;
        let inferred: BTreeMap<String, DataType> = t
            .names
            .iter()
            .enumerate()
            .filter(|(_, n)| self.infers(n))
            .map(|(i, n)| (n.clone(), text::infer(&t.batches.iter().map(|b| &b[i]).collect::<Vec<_>>())))
            .collect();
        if self.header && t.batches.is_empty() {
            self.check_no_rows(object, &t.names.iter().map(String::as_str).collect::<Vec<_>>())?;
        }
        let lines: Arc<[u64]> = t.lines.into();
        let mut out = Vec::with_capacity(t.batches.len());
        let mut row = 0u64;
        for cols in t.batches {
            let n = cols.first().map_or(0, |c| c.len());
            let slice: Arc<[u64]> = lines[row as usize..row as usize + n].into();
            out.push(self.csv_batch(object, &t.names, cols, slice, row, &inferred)?);
            row += n as u64;
        }
        Ok(out)
    }

    /// A CSV object a batch at a time, each converted and handed to `f` before the next is
    /// read: the types of its undeclared columns come from a first reading of the whole text
    /// (which keeps none of it), so that besides the text itself one batch of its rows is held
    /// at a time, however long the object. Each batch stands for its share of the `stored`
    /// bytes by the text it spans.
    fn csv_parts(
        &self,
        object: &str,
        bytes: &[u8],
        stored: u128,
        f: &mut dyn FnMut(Rows) -> Result<(), InputError>,
    ) -> Result<(), InputError> {
        let mut reader = text::CsvReader::new(bytes, self.header, self.delimiter).map_err(|e| text_error(object, e))?;
        // Without a header the names come with the first row: read through for them.
        let inferred = match self.header && !reader.names.iter().any(|n| self.infers(n)) {
            true => BTreeMap::new(),
            false => self.csv_types(bytes).map_err(|e| text_error(object, e))?.inferred,
        };
        let (mut row, mut from) = (0u64, 0u64);
        let whole = bytes.len().max(1) as u128;
        while let Some(b) = reader.next_batch().map_err(|e| text_error(object, e))? {
            let n = b.lines.len() as u64;
            let mut rows = self.csv_batch(object, &reader.names, b.columns, b.lines.into(), row, &inferred)?;
            rows.stored = (stored * u128::from(b.end.saturating_sub(from)) / whole) as u64;
            (row, from) = (row + n, b.end);
            f(rows)?;
        }
        if self.header && row == 0 {
            self.check_no_rows(object, &reader.names.iter().map(String::as_str).collect::<Vec<_>>())?;
        }
        Ok(())
    }

    /// A CSV object's column names, the type each undeclared column's values share, and its
    /// rows: the whole text read through, one batch at a time.
    fn csv_types(&self, bytes: &[u8]) -> Result<CsvTypes, text::TextError> {
        let mut reader = text::CsvReader::new(bytes, self.header, self.delimiter)?;
        let (types, rows) = reader.infer_rest(|n| self.infers(n))?;
        let inferred = reader
            .names
            .iter()
            .zip(&types)
            .filter(|(n, _)| self.infers(n))
            .map(|(n, t)| (n.clone(), t.finish()))
            .collect();
        Ok(CsvTypes { names: reader.names, inferred, rows })
    }

    /// Whether a text column's type is inferred from its values: neither declared nor implied.
    fn infers(&self, column: &str) -> bool {
        self.declared(column).is_none() && self.implied_text(column).is_none()
    }

    /// One batch of a CSV object's text columns, converted to their types (`inferred`: those
    /// of undeclared columns); `first_row` is its first row's number in the object.
    fn csv_batch(
        &self,
        object: &str,
        names: &[String],
        columns: Vec<arrow::array::StringArray>,
        lines: Arc<[u64]>,
        first_row: u64,
        inferred: &BTreeMap<String, DataType>,
    ) -> Result<Rows, InputError> {
        let schema =
            Arc::new(Schema::new(names.iter().map(|n| Field::new(n, DataType::Utf8, true)).collect::<Vec<_>>()));
        let n = columns.first().map_or(0, |c| c.len());
        let columns: Vec<ArrayRef> = columns.into_iter().map(|c| Arc::new(c) as ArrayRef).collect();
        let opts = arrow::array::RecordBatchOptions::new().with_row_count(Some(n));
        let batch = RecordBatch::try_new_with_options(schema, columns, &opts)
            .map_err(|e| InputError::bad(Location::object(object), e.to_string()))?;
        let (batch, bad) = self.convert(batch, &|c| inferred.get(c).cloned());
        Ok(Rows { batch, first_row, lines: Some(lines), bad, stored: 0 })
    }

    fn ndjson_rows(&self, object: &str, bytes: &Bytes) -> Result<Vec<Rows>, InputError> {
        let (inferred, _) = arrow::json::reader::infer_json_schema(Cursor::new(bytes), None)
            .map_err(|e| json_malformed(object, || text::first_bad_json_line(bytes), e.to_string()))?;
        if let Some(found) = text::first_repeated_field(bytes) {
            return Err(repeated_field(object, found));
        }
        let JsonRead { inferred, read, numbers } = self.json_read(object, inferred)?;
        let malformed = |e: arrow::error::ArrowError| json_failed(object, bytes, 0, 0, &read, &e);
        let reader = json_reader(read.clone(), 65_536, Cursor::new(bytes)).map_err(malformed)?;
        let batches: Vec<RecordBatch> = reader.collect::<Result<_, _>>().map_err(malformed)?;
        let batches = self.unvalued_nested_text(batches).map_err(malformed)?;
        self.one_json_type(object, bytes, &inferred)?;
        self.exact_nested_numbers(object, bytes, &inferred)?;
        let typed: Vec<(String, DataType)> = numbers
            .into_iter()
            .map(|name| {
                let columns: Vec<_> =
                    batches.iter().filter_map(|b| b.column_by_name(&name)).map(|c| c.as_string::<i32>()).collect();
                let ty = text::infer(&columns);
                (name, ty)
            })
            .collect();
        let lines: Arc<[u64]> = text::ndjson_lines(bytes).into();
        let mut out = Vec::new();
        let mut row = 0u64;
        for b in batches {
            let n = b.num_rows();
            let slice: Option<Arc<[u64]>> = lines.get(row as usize..row as usize + n).map(Into::into);
            out.push(self.json_rows(b, &typed, row, slice));
            row += n as u64;
        }
        Ok(out)
    }

    /// How an NDJSON object's fields are read, from the types the reader infers for them.
    fn json_read(&self, object: &str, inferred: Schema) -> Result<JsonRead, InputError> {
        // A JSON line leaves out a field with no value, and an object whose lines all do has no
        // such field: with `optional = true`, an object without the tombstone field has no
        // deletes (a day without any). An object with a field the tombstone looks like a
        // misspelling of, beside it (a producer renamed it between two lines: those lines'
        // tombstone is null) or instead of it, is refused. Other columns the config uses stay
        // required: a renamed field is an error, not a column of nulls.
        if let Some(t) = &self.tombstone {
            if let Some(like) = t.like(inferred.fields().iter().map(|f| (f.name().as_str(), f.data_type()))) {
                return Err(InputError::bad(
                    at(object, None, None, Some(&t.column)),
                    tombstone_missing(&t.column, like),
                ));
            }
        }
        let optional = self.tombstone.as_ref().filter(|t| t.optional);
        let absent = optional.map(|t| &t.column).filter(|c| inferred.field_with_name(c).is_err());
        let absent = absent.map(|c| {
            let declared = self.declared(c).is_some();
            Field::new(c, if declared { DataType::Utf8 } else { DataType::Null }, true)
        });
        let inferred = match absent {
            None => inferred,
            Some(f) => Schema::new(in_name_order(inferred.fields(), f)),
        };
        // Declared and implied columns are read as text and parsed exactly here; so are
        // numbers the reader would take for doubles, typed then by the rule of CSV (a double
        // would round an integer past int64: two 20-digit ids would become one key).
        let mut numbers = Vec::new();
        let read = Arc::new(Schema::new(
            inferred
                .fields()
                .iter()
                .map(|f| {
                    let as_text = self.declared(f.name()).is_some() || self.implied_text(f.name()).is_some();
                    if !as_text && f.data_type() == &DataType::Float64 {
                        numbers.push(f.name().clone());
                    }
                    let t = if as_text || f.data_type() == &DataType::Float64 {
                        DataType::Utf8
                    } else {
                        f.data_type().clone()
                    };
                    Field::new(f.name(), t, true)
                })
                .collect::<Vec<_>>(),
        ));
        Ok(JsonRead { inferred, read, numbers })
    }

    /// A batch of an NDJSON object's rows as read (nested places of no value typed Null),
    /// converted: `typed` gives the type of each number read as text.
    fn json_rows(
        &self,
        b: RecordBatch,
        typed: &[(String, DataType)],
        first_row: u64,
        lines: Option<Arc<[u64]>>,
    ) -> Rows {
        let number_type = |name: &str| typed.iter().find(|(n, _)| n == name).map(|(_, t)| t.clone());
        let (batch, bad) = self.convert(b, &number_type);
        let batch = unify::mark_numbers_as_text(batch, &|c| number_type(c) == Some(DataType::Utf8));
        Rows { batch, first_row, lines, bad, stored: 0 }
    }

    /// Whether a date read a part at a time reads an NDJSON object of `stored` bytes as pieces
    /// of lines (`Decoder::ndjson_parts`): when its text is past a part's bytes (a compressed
    /// object's text is taken to be at least eight times its bytes).
    pub fn streams(&self, object: &str, stored: u64, parts: Parts) -> bool {
        let text = stored.saturating_mul(if text::compression(object).is_some() { 8 } else { 1 });
        self.format == Format::Ndjson && parts.bytes.is_some_and(|b| text > b)
    }

    /// The first two readings of an NDJSON object read as pieces ([`Streamed`]): the types the
    /// reader infers from every line, then the checks of [`Decoder::ndjson_rows`] and the types
    /// of its numbers and nested fields by all their values (without keeping the rows). What is
    /// found and refused is what [`Decoder::ndjson_rows`] finds and refuses (an object with
    /// several faults may be refused for another first), but for a line the reader refuses
    /// and no check finds: the third reading ([`Decoder::ndjson_parts`]) finds it, as that
    /// reading of the whole object would; the schema alone ([`Decoder::json_schema`]) does not.
    fn json_typed(&self, src: &Streamed) -> Result<JsonTyped, InputError> {
        let object = src.object;
        let mut reading = src.reading(self.format)?;
        // The rows the reader's inference counted, and the rows (non-blank lines) before the
        // piece the values come from, as the lines that name errors count them.
        let (mut rows, mut text_bytes, mut before) = (0u64, 0u64, 0u64);
        let mut current: Option<(text::LinePiece, arrow::json::reader::ValueIter<Cursor<Bytes>>)> = None;
        let mut failed: Option<InputError> = None;
        let inferred = {
            let values = std::iter::from_fn(|| loop {
                if let Some((_, values)) = current.as_mut() {
                    if let Some(v) = values.next() {
                        rows += u64::from(v.is_ok());
                        return Some(v);
                    }
                }
                // A piece read through: a field named twice on one of its lines is refused.
                if let Some((piece, _)) = current.take() {
                    if let Some((row, line, field)) = text::first_repeated_field(&piece.text) {
                        failed = Some(repeated_field(object, (before + row, piece.lines_before + line, field)));
                        return Some(Err(arrow::error::ArrowError::JsonError(String::new())));
                    }
                    before += text::ndjson_row_count(&piece.text);
                }
                match reading.next() {
                    Ok(None) => return None,
                    Ok(Some(piece)) => {
                        text_bytes += piece.text.len() as u64;
                        let values = arrow::json::reader::ValueIter::new(Cursor::new(piece.text.clone()), None);
                        current = Some((piece, values));
                    }
                    Err(e) => {
                        failed = Some(e);
                        return Some(Err(arrow::error::ArrowError::JsonError(String::new())));
                    }
                }
            });
            arrow::json::reader::infer_json_schema_from_iterator(values)
        };
        let inferred = match (inferred, failed) {
            (_, Some(e)) => return Err(e),
            (Ok(s), None) => s,
            // The first line that is not JSON, here or further on (a line that is JSON but not
            // an object fails the inference before one further on that is not JSON).
            (Err(e), None) => {
                let mut piece = current.map(|(p, _)| p);
                while let Some(p) = piece {
                    if let Some((row, line, why)) = text::first_bad_json_line(&p.text) {
                        return Err(json_malformed(
                            object,
                            || Some((before + row, p.lines_before + line, why)),
                            e.to_string(),
                        ));
                    }
                    before += text::ndjson_row_count(&p.text);
                    piece = reading.next()?;
                }
                return Err(json_malformed(object, || None, e.to_string()));
            }
        };
        let read = self.json_read(object, inferred)?;
        let mut typed = JsonTyped {
            numbers: read.numbers.iter().map(|n| (n.clone(), DataType::Null)).collect(),
            nulled: read.read.clone(),
            read,
            rows,
            text_bytes,
        };
        if rows == 0 {
            return Ok(typed);
        }
        // Read as the whole object is, then checked; numbers read as text and nested fields
        // (their places with no value in any line become Null) typed by all their values.
        let nested: Vec<Field> = typed
            .read
            .read
            .fields()
            .iter()
            .filter(|f| matches!(f.data_type(), DataType::List(_) | DataType::Struct(_)))
            .filter(|f| self.declared(f.name()).is_none() && self.implied_text(f.name()).is_none())
            .map(|f| f.as_ref().clone())
            .collect();
        let by_values: Vec<Field> = typed
            .read
            .read
            .fields()
            .iter()
            .filter(|f| typed.read.numbers.contains(f.name()))
            .map(|f| f.as_ref().clone())
            .chain(nested.iter().cloned())
            .collect();
        let by_values = Arc::new(Schema::new(by_values));
        let mut inference = vec![text::Inference::default(); typed.read.numbers.len()];
        let mut met: Vec<Option<DataType>> = vec![None; nested.len()];
        let mut check = || -> Result<(), InputError> {
            let mut reading = src.reading(self.format)?;
            let mut before = 0u64;
            while let Some(piece) = reading.next()? {
                if !by_values.fields().is_empty() {
                    let malformed = piece_malformed(object, &piece, before, &by_values);
                    let reader =
                        json_reader(by_values.clone(), 65_536, Cursor::new(piece.text.clone())).map_err(&malformed)?;
                    for b in reader {
                        let b = b.map_err(&malformed)?;
                        if b.num_rows() == 0 {
                            continue;
                        }
                        for (t, name) in inference.iter_mut().zip(&typed.read.numbers) {
                            if let Some(c) = b.column_by_name(name) {
                                t.add(c.as_string::<i32>());
                            }
                        }
                        for (m, f) in met.iter_mut().zip(&nested) {
                            if let Some(c) = b.column_by_name(f.name()) {
                                let t = nulled(f.data_type(), &[c.as_ref()]);
                                *m = Some(match m.take() {
                                    None => t,
                                    Some(m) => meet(&m, &t),
                                });
                            }
                        }
                    }
                }
                self.one_json_type(object, &piece.text, &typed.read.inferred)?;
                self.exact_nested_numbers(object, &piece.text, &typed.read.inferred)?;
                before += text::ndjson_row_count(&piece.text);
            }
            Ok(())
        };
        match check() {
            Ok(()) => {}
            Err(e @ InputError::Unreadable { .. }) => return Err(e),
            // The whole object's reading fails at the first line its reader refuses before any
            // check: so does this one, when there is such a line.
            Err(e) => return Err(self.json_reader_error(src, &typed.read.read)?.unwrap_or(e)),
        }
        for ((_, t), i) in typed.numbers.iter_mut().zip(&inference) {
            *t = i.finish();
        }
        let fields: Vec<Field> = typed
            .read
            .read
            .fields()
            .iter()
            .map(|f| match nested.iter().position(|n| n.name() == f.name()).and_then(|i| met[i].clone()) {
                Some(t) => f.as_ref().clone().with_data_type(t),
                None => f.as_ref().clone(),
            })
            .collect();
        typed.nulled = Arc::new(Schema::new(fields));
        Ok(typed)
    }

    /// The first error of the reader reading an NDJSON object as pieces ([`Streamed`]) with the
    /// fields `read`, if any.
    fn json_reader_error(&self, src: &Streamed, read: &SchemaRef) -> Result<Option<InputError>, InputError> {
        let mut reading = src.reading(self.format)?;
        let mut before = 0u64;
        while let Some(piece) = reading.next()? {
            let malformed = piece_malformed(src.object, &piece, before, read);
            let failed = match json_reader(read.clone(), 65_536, Cursor::new(piece.text.clone())) {
                Err(e) => Some(e),
                Ok(r) => r.into_iter().find_map(Result::err),
            };
            if let Some(e) = failed {
                return Ok(Some(malformed(e)));
            }
            before += text::ndjson_row_count(&piece.text);
        }
        Ok(None)
    }

    /// An NDJSON object read as pieces of whole lines ([`Streamed`]), converted and handed to
    /// `f` a batch at a time: besides one piece of its text (the stored bytes, when it was
    /// fetched whole) and one batch of its rows, nothing of it is held, however large. Two
    /// readings first type its fields ([`Decoder::json_typed`]); its rows, values and lines are
    /// those of [`Decoder::ndjson_rows`]. Each batch stands for its share of the `stored`
    /// bytes by the text it spans.
    fn ndjson_parts(
        &self,
        src: &Streamed,
        stored: u64,
        parts: Parts,
        f: &mut dyn FnMut(Rows) -> Result<(), InputError>,
    ) -> Result<(), InputError> {
        let typed = self.json_typed(src)?;
        // Lines the inference passes over as blank (Unicode spaces) that the reader refuses.
        if typed.rows == 0 {
            return self.json_reader_error(src, &typed.read.read)?.map_or(Ok(()), Err);
        }
        let object = src.object;
        let mut reading = src.reading(self.format)?;
        let (mut row, mut before) = (0u64, 0u64);
        while let Some(piece) = reading.next()? {
            let malformed = piece_malformed(object, &piece, before, &typed.read.read);
            before += text::ndjson_row_count(&piece.text);
            let lines: Vec<u64> = text::ndjson_lines(&piece.text).into_iter().map(|l| l + piece.lines_before).collect();
            let share = (u128::from(stored) * piece.text.len() as u128 / u128::from(typed.text_bytes.max(1))) as u64;
            let rows = parts.rows.clamp(1, 65_536);
            let reader =
                json_reader(typed.read.read.clone(), rows, Cursor::new(piece.text.clone())).map_err(&malformed)?;
            let mut first = 0usize;
            for b in reader {
                let b = renulled_batch(b.map_err(&malformed)?, &typed.nulled).map_err(&malformed)?;
                let n = b.num_rows();
                let slice: Option<Arc<[u64]>> = lines.get(first..first + n).map(Into::into);
                let mut rows = self.json_rows(b, &typed.numbers, row, slice);
                rows.stored = (u128::from(share) * n as u128 / lines.len().max(1) as u128) as u64;
                (row, first) = (row + n as u64, first + n);
                f(rows)?;
            }
        }
        Ok(())
    }

    /// Refuses a field that is text on some lines and another JSON value (a number, `true`) on
    /// others: the inference makes it text, and `1` and `"1"` would be one key. The same lines
    /// split between two objects are refused as types that cannot be unified.
    fn one_json_type(&self, object: &str, bytes: &Bytes, inferred: &Schema) -> Result<(), InputError> {
        // Text anywhere in a field: at its top, or inside its objects and arrays (`[1]` and
        // `["1"]` would read alike too).
        fn holds_text(t: &DataType) -> bool {
            match t {
                DataType::Utf8 => true,
                DataType::List(f) | DataType::LargeList(f) => holds_text(f.data_type()),
                DataType::Struct(fs) => fs.iter().any(|f| holds_text(f.data_type())),
                _ => false,
            }
        }
        let text: Vec<Field> = inferred
            .fields()
            .iter()
            .filter(|f| holds_text(f.data_type()))
            .filter(|f| self.declared(f.name()).is_none() && self.implied_text(f.name()).is_none())
            .map(|f| f.as_ref().clone())
            .collect();
        let strict = |fields: Vec<Field>| {
            arrow::json::ReaderBuilder::new(Arc::new(Schema::new(fields)))
                .with_batch_size(65_536)
                .with_coerce_primitive(false)
                .build(Cursor::new(bytes))
                .and_then(|r| r.collect::<Result<Vec<_>, _>>())
        };
        if text.is_empty() || strict(text.clone()).is_ok() {
            return Ok(());
        }
        let field = text.iter().find(|f| strict(vec![(*f).clone()]).is_err()).map(|f| f.name().clone());
        let nested = field
            .as_ref()
            .and_then(|f| inferred.field_with_name(f).ok())
            .is_some_and(|f| f.data_type() != &DataType::Utf8);
        let remedy = match nested {
            // A nested field's type cannot be declared.
            true => {
                " inside its objects or arrays, so 1 and \"1\" (or true and \"true\") would read alike; fix the \
                     writer to give each value one JSON type"
            }
            false => {
                ", so 1 and \"1\" would read alike; fix the writer, or declare the field's type in [input.schema] \
                      (utf8 reads every value as text)"
            }
        };
        Err(InputError::bad(
            at(object, None, None, field.as_deref()),
            format!("this field holds values of more than one JSON type (text, numbers, booleans) on different lines{remedy}"),
        ))
    }

    /// The reader types a place inside a list or an object that holds only nulls (`[null]`) as
    /// text; it has no value, like `[]`: typed Null, it takes the type other objects give it.
    fn unvalued_nested_text(&self, batches: Vec<RecordBatch>) -> Result<Vec<RecordBatch>, arrow::error::ArrowError> {
        let Some(schema) = batches.first().map(|b| b.schema()) else { return Ok(batches) };
        let mut fields: Vec<Field> = schema.fields().iter().map(|f| f.as_ref().clone()).collect();
        let mut changed = false;
        for (i, f) in fields.iter_mut().enumerate() {
            let nested = matches!(f.data_type(), DataType::List(_) | DataType::Struct(_));
            if !nested || self.declared(f.name()).is_some() || self.implied_text(f.name()).is_some() {
                continue;
            }
            let arrays: Vec<&dyn Array> = batches.iter().map(|b| b.column(i).as_ref()).collect();
            let t = nulled(f.data_type(), &arrays);
            if &t != f.data_type() {
                *f = f.clone().with_data_type(t);
                changed = true;
            }
        }
        if !changed {
            return Ok(batches);
        }
        let schema = Arc::new(Schema::new(fields));
        batches.into_iter().map(|b| renulled_batch(b, &schema)).collect()
    }

    /// Refuses a field whose objects or arrays hold numbers read as doubles (some are
    /// fractions) among which an integer a double cannot hold (past 2^53): it would be stored
    /// rounded, `9007199254740993` as `9007199254740992`. At the top of a record such a field
    /// stays text, by the rule of CSV; inside, a type cannot be declared, so the writer must
    /// write such numbers as strings.
    fn exact_nested_numbers(&self, object: &str, bytes: &Bytes, inferred: &Schema) -> Result<(), InputError> {
        fn floats_as_text(t: &DataType) -> Option<DataType> {
            let field = |f: &arrow::datatypes::FieldRef| {
                floats_as_text(f.data_type()).map(|t| Arc::new(f.as_ref().clone().with_data_type(t)))
            };
            match t {
                DataType::Float64 => Some(DataType::Utf8),
                DataType::List(f) => Some(DataType::List(field(f)?)),
                DataType::Struct(fs) => {
                    let fields: Vec<_> = fs.iter().map(|f| field(f).unwrap_or_else(|| f.clone())).collect();
                    (fields.iter().zip(fs.iter()).any(|(a, b)| a != b)).then(|| DataType::Struct(fields.into()))
                }
                _ => None,
            }
        }
        // The values of `a` that were numbers read as doubles (of type Float64 in `inferred`).
        fn texts<'a>(a: &'a dyn Array, inferred: &DataType, out: &mut Vec<&'a arrow::array::StringArray>) {
            match (a.data_type(), inferred) {
                (DataType::Utf8, DataType::Float64) => out.push(a.as_string::<i32>()),
                (DataType::List(_), DataType::List(f)) => {
                    texts(a.as_list::<i32>().values().as_ref(), f.data_type(), out)
                }
                (DataType::Struct(_), DataType::Struct(fs)) => a
                    .as_struct()
                    .columns()
                    .iter()
                    .zip(fs.iter())
                    .for_each(|(c, f)| texts(c.as_ref(), f.data_type(), out)),
                _ => {}
            }
        }
        let nested: Vec<Field> = inferred
            .fields()
            .iter()
            .filter(|f| matches!(f.data_type(), DataType::List(_) | DataType::Struct(_)))
            .filter(|f| self.declared(f.name()).is_none() && self.implied_text(f.name()).is_none())
            .filter_map(|f| floats_as_text(f.data_type()).map(|t| Field::new(f.name(), t, true)))
            .collect();
        if nested.is_empty() {
            return Ok(());
        }
        let batches = json_reader(Arc::new(Schema::new(nested.clone())), 65_536, Cursor::new(bytes))
            .and_then(|r| r.collect::<Result<Vec<_>, _>>())
            .map_err(|e| InputError::bad(Location::object(object), format!("malformed NDJSON: {e}")))?;
        // A number read as a double that is not what was written (see `float_as_written`).
        let not_as_written = |v: &str| {
            let read = v.trim().parse::<f64>().unwrap_or(f64::NAN);
            text::float_as_written(v, read, "double").err().map(|why| why.what)
        };
        for f in &nested {
            for b in &batches {
                let mut leaves = Vec::new();
                if let (Some(c), Ok(i)) = (b.column_by_name(f.name()), inferred.field_with_name(f.name())) {
                    texts(c.as_ref(), i.data_type(), &mut leaves);
                }
                if let Some(why) = leaves.iter().flat_map(|a| a.iter().flatten()).find_map(not_as_written) {
                    return Err(InputError::bad(
                        at(object, None, None, Some(f.name())),
                        format!(
                            "a number inside this field's objects or arrays is read as a double: {why}; a nested \
                             field's type cannot be declared: fix the writer to write such numbers as strings"
                        ),
                    ));
                }
            }
        }
        Ok(())
    }

    /// The partition date of every row, as days since the epoch (`None`: the path gives it).
    fn row_dates(&self, object: &str, r: &Rows) -> Result<Option<Int32Array>, InputError> {
        let (c, what) = match &self.date_source {
            DateSource::Path => return Ok(None),
            DateSource::Column(c) => (c, "partition column"),
            DateSource::Timestamp(c) => (c, "timestamp column"),
        };
        let loc = |i: usize| {
            at(object, Some(r.first_row + i as u64), r.lines.as_ref().and_then(|l| l.get(i).copied()), Some(c))
        };
        // A date that did not parse: the row's date is unknown, so the object fails as a whole.
        if let Some((i, _, m)) = r.bad.iter().find(|(_, col, m)| col == c && !m.is_empty()) {
            return Err(InputError::bad(loc(*i), m.clone()));
        }
        let arr = r
            .batch
            .column_by_name(c)
            .ok_or_else(|| InputError::bad(at(object, None, None, Some(c)), format!("missing {what}")))?;
        if arr.null_count() > 0 {
            let i = (0..arr.len()).find(|&i| arr.is_null(i)).unwrap_or(0);
            return Err(InputError::bad(loc(i), "the partition date is null; every row needs one"));
        }
        let days = match arr.data_type() {
            DataType::Date32 => {
                arr.as_primitive::<arrow::datatypes::Date32Type>().reinterpret_cast::<arrow::datatypes::Int32Type>()
            }
            DataType::Timestamp(unit, zone) => {
                let per_day = 86_400 * per_second(*unit);
                let ints =
                    arrow::compute::cast(arr, &DataType::Int64).map_err(|e| InputError::bad(loc(0), e.to_string()))?;
                let ints = ints.as_primitive::<arrow::datatypes::Int64Type>();
                // A local date from 2100 on, in a zone whose table ends in 2099: not known.
                let unknown_from = dates::zone_known_until(self.tz).map(|u| (u / 86_400) as i32);
                let mut v = Vec::with_capacity(ints.len());
                for i in 0..ints.len() {
                    let t = ints.value(i);
                    let d = match zone {
                        // Wall-clock time: its own date.
                        None => Some(t.div_euclid(per_day) as i32),
                        Some(_) => {
                            let ps = per_second(*unit);
                            let nanos = (t.rem_euclid(ps) * (1_000_000_000 / ps)) as u32;
                            self.tz
                                .timestamp_opt(t.div_euclid(ps), nanos)
                                .single()
                                .map(|dt| dates::to_days(dt.date_naive()))
                        }
                    };
                    if zone.is_some() && d.zip(unknown_from).is_some_and(|(d, u)| d >= u) {
                        return Err(InputError::bad(
                            loc(i),
                            format!(
                                "{} is in 2100 or later, past the time zone table's daylight-saving changes for {} (they \
                                 end in 2099): its date there cannot be known exactly",
                                chrono::DateTime::from_timestamp(t.div_euclid(per_second(*unit)), 0)
                                    .map_or(t.to_string(), |d| d.format("%Y-%m-%dT%H:%M:%SZ").to_string()),
                                self.tz.name()
                            ),
                        ));
                    }
                    v.push(d.ok_or_else(|| InputError::bad(loc(i), "timestamp out of range"))?);
                }
                Int32Array::from(v)
            }
            other => {
                return Err(InputError::bad(
                    at(object, None, None, Some(c)),
                    format!(
                    "the {what} has type {other}; it must be a date (or a timestamp with [partition] from_timestamp)"
                ),
                ))
            }
        };
        // A partition's folder is YYYY-MM-DD: years 0001 to 9999.
        let (first, last) = (dates::first_day(), dates::last_day());
        if let Some(i) = days.values().iter().position(|d| !(first..=last).contains(d)) {
            let shown = dates::from_days(days.value(i)).map_or(days.value(i).to_string(), |d| d.to_string());
            return Err(InputError::bad(
                loc(i),
                format!("the date {shown} is outside the years 0001 to 9999: a partition's folder is YYYY-MM-DD"),
            ));
        }
        Ok(Some(days))
    }

    fn split_by_date(
        &self,
        object: &Arc<str>,
        r: Rows,
        wanted: &[NaiveDate],
        path_date: Option<NaiveDate>,
        out: &mut Decoded,
    ) -> Result<(), InputError> {
        let n = r.batch.num_rows();
        let mut r = r;
        // Hive layout: an object without the partition column (others of the input hold it)
        // has the folder's date in every row.
        if let (Some(pd), DateSource::Column(c)) = (path_date, &self.date_source) {
            if r.batch.column_by_name(c).is_none() {
                let mut fields = r.batch.schema().fields().to_vec();
                fields.push(Arc::new(Field::new(c, DataType::Date32, true)));
                let mut columns = r.batch.columns().to_vec();
                columns.push(Arc::new(arrow::array::Date32Array::from_value(dates::to_days(pd), n)));
                let opts = arrow::array::RecordBatchOptions::new().with_row_count(Some(n));
                r.batch = RecordBatch::try_new_with_options(Arc::new(Schema::new(fields)), columns, &opts)
                    .map_err(|e| InputError::unreadable(Location::object(object.to_string()), e.to_string()))?;
            }
        }
        let days = self.row_dates(object, &r)?;
        let lines = |idx: &dyn Fn(usize) -> usize, len: usize| -> Option<Arc<[u64]>> {
            r.lines.as_ref().map(|l| (0..len).map(|i| l.get(idx(i)).copied().unwrap_or(0)).collect())
        };
        let bad_at = |i: usize, col: &str, m: &str| {
            InputError::bad(
                at(object, Some(r.first_row + i as u64), r.lines.as_ref().and_then(|l| l.get(i).copied()), Some(col)),
                m.to_string(),
            )
        };
        if let Some(pd) = path_date {
            // Hive layout: every row belongs to the folder's date.
            if let (Some(days), DateSource::Column(c)) = (&days, &self.date_source) {
                let want = dates::to_days(pd);
                if let Some(i) = days.values().iter().position(|d| *d != want) {
                    let got = dates::from_days(days.value(i)).map(|d| d.to_string()).unwrap_or_default();
                    return Err(bad_at(i, c, &format!("holds {got} but the object lies under the {c}={pd}/ folder")));
                }
            }
            if let Some((i, col, m)) = r.bad.iter().find(|(_, _, m)| !m.is_empty()) {
                out.bad.entry(pd).or_insert_with(|| bad_at(*i, col, m));
            }
            let rows = super::ObjectRows::Run(r.first_row..r.first_row + n as u64);
            let lines = r.lines.clone();
            out.pieces.push(Piece { date: pd, batch: r.batch, object: object.clone(), object_rows: rows, lines });
            return Ok(());
        }
        let days = days.ok_or_else(|| {
            InputError::bad(
                Location::object(object.to_string()),
                "no partition date: the input is not Hive partitioned and has no date column",
            )
        })?;
        let (lo, hi) = match (wanted.first(), wanted.last()) {
            (Some(a), Some(b)) => (dates::to_days(*a), dates::to_days(*b)),
            _ => (i32::MIN, i32::MAX),
        };
        let is_wanted = |d: i32| {
            d >= lo
                && d <= hi
                && (wanted.is_empty() || dates::from_days(d).is_some_and(|x| wanted.binary_search(&x).is_ok()))
        };
        // A bad value fails the date of its row (the first one found per date).
        for (i, col, m) in &r.bad {
            let d = days.value(*i);
            if is_wanted(d) {
                if let Some(date) = dates::from_days(d) {
                    let m = if m.is_empty() { "does not convert to the declared type" } else { m.as_str() };
                    out.bad.entry(date).or_insert_with(|| bad_at(*i, col, m));
                }
            }
        }
        let mut by_date: BTreeMap<i32, Vec<u32>> = BTreeMap::new();
        for (i, d) in days.values().iter().enumerate() {
            if is_wanted(*d) {
                by_date.entry(*d).or_default().push(i as u32);
            }
        }
        for (d, idx) in by_date {
            let date = dates::from_days(d).unwrap_or_default();
            let rows = super::ObjectRows::picked(r.first_row, &idx);
            let piece_lines = lines(&|i| idx[i] as usize, idx.len());
            let batch = if idx.len() == n {
                r.batch.clone()
            } else {
                take_record_batch(&r.batch, &UInt32Array::from(idx))
                    .map_err(|e| InputError::unreadable(Location::object(object.to_string()), e.to_string()))?
            };
            out.pieces.push(Piece { date, batch, object: object.clone(), object_rows: rows, lines: piece_lines });
        }
        Ok(())
    }
}

/// How an NDJSON object's fields are read ([`Decoder::json_read`]).
struct JsonRead {
    /// The fields as the reader infers them (with an optional tombstone it leaves out).
    inferred: Schema,
    /// The fields as read: declared and implied ones, and numbers the reader would take for
    /// doubles, as text.
    read: SchemaRef,
    /// The fields read as text that are numbers.
    numbers: Vec<String>,
}

/// What the first readings of an NDJSON object read as pieces find ([`Decoder::json_typed`]).
struct JsonTyped {
    read: JsonRead,
    /// Each number read as text, with the type all its values share.
    numbers: Vec<(String, DataType)>,
    /// The fields as read, their nested places that hold no value in any line typed Null.
    nulled: SchemaRef,
    rows: u64,
    /// The object's text, in bytes.
    text_bytes: u64,
}

/// A text object read as pieces of whole lines, as many times as needed, decompressed as it is
/// read: from its stored bytes in memory, or from its store from start to end.
pub struct Streamed<'s> {
    pub object: &'s str,
    pub stored: &'s Stored,
    /// About how many bytes of text a piece holds.
    pub piece: usize,
}

/// One reading of a [`Streamed`] object.
struct Reading<'s> {
    src: &'s Streamed<'s>,
    format: Format,
    pieces: text::Pieces<Box<dyn std::io::Read + 's>>,
    first: bool,
}

impl<'s> Streamed<'s> {
    fn reading(&'s self, format: Format) -> Result<Reading<'s>, InputError> {
        let stored: Box<dyn std::io::Read + 's> = match self.stored {
            Stored::Whole(b) => Box::new(&b[..]),
            Stored::Ranged(r) => Box::new(r.sequential(self.piece as u64)),
        };
        let text = text::decompressing(self.object, stored).map_err(|e| self.error(e))?;
        Ok(Reading { src: self, format, pieces: text::Pieces::new(text, self.piece), first: true })
    }

    /// A failed read: the store's (worth a retry) or the compressed text's.
    fn error(&self, e: std::io::Error) -> InputError {
        let failure = match self.stored {
            Stored::Ranged(r) => r.failure(),
            Stored::Whole(_) => None,
        };
        match (failure, text::compression(self.object)) {
            (Some(m), _) => InputError::unreadable(Location::object(self.object), m),
            (None, Some(_)) => InputError::bad(Location::object(self.object), text::decompress_error(self.object, e)),
            (None, None) => InputError::unreadable(Location::object(self.object), e.to_string()),
        }
    }
}

impl Reading<'_> {
    /// The next piece; the first is past a byte-order mark (as [`Decoder::text_bytes`] reads
    /// it) and refused when it is another format's.
    fn next(&mut self) -> Result<Option<text::LinePiece>, InputError> {
        let Some(mut piece) = self.pieces.next_piece().map_err(|e| self.src.error(e))? else { return Ok(None) };
        if std::mem::take(&mut self.first) {
            if self.format == Format::Ndjson && piece.text.starts_with(b"\xEF\xBB\xBF") {
                piece.text = piece.text.slice(3..);
            }
            if let Some(what) = sniff(&piece.text) {
                let why = format!("not {:?} text: {what}", self.format);
                return Err(InputError::bad(Location::object(self.src.object), why));
            }
        }
        Ok(Some(piece))
    }
}

/// Arrow's NDJSON reader of `text` with the fields `read`, `rows` rows a batch: a number or a
/// boolean in a field read as text is read as its text, as every reading of NDJSON reads it.
fn json_reader<R: std::io::BufRead>(
    read: SchemaRef,
    rows: usize,
    text: R,
) -> Result<arrow::json::Reader<R>, arrow::error::ArrowError> {
    arrow::json::ReaderBuilder::new(read).with_batch_size(rows).with_coerce_primitive(true).build(text)
}

/// An NDJSON object the reader could not read: at its first line that is not JSON (`bad`),
/// or as the reader says.
fn json_malformed(object: &str, bad: impl FnOnce() -> Option<(u64, u64, String)>, fallback: String) -> InputError {
    match bad() {
        Some((row, line, why)) => InputError::bad(at(object, Some(row), Some(line), None), why),
        // Every line parses: JSON the reader cannot type (`[{"y": 1}, null]`: a null among
        // the objects of a list).
        None if ["for struct array", "for scalar array", "non array element"].iter().any(|m| fallback.contains(m)) => {
            InputError::bad(
                Location::object(object),
                format!(
                    "NDJSON the reader cannot type: {fallback}. A list mixing objects, lists and other values \
                     (nulls among objects, as in `[{{\"y\": 1}}, null]`, too) is not supported"
                ),
            )
        }
        None => InputError::bad(Location::object(object), format!("malformed NDJSON: {fallback}")),
    }
}

/// The reader's error in a piece of an NDJSON object after `before` rows: at the piece's first
/// line that is not JSON, when there is one.
fn piece_malformed<'a>(
    object: &'a str,
    piece: &'a text::LinePiece,
    before: u64,
    read: &'a Schema,
) -> impl Fn(arrow::error::ArrowError) -> InputError + 'a {
    move |e| json_failed(object, &piece.text, before, piece.lines_before, read, &e)
}

/// The reader's error `e` in NDJSON `text` (after `rows_before` rows and `lines_before` lines
/// of its object): at its first line that is not JSON; else at the first value the reader
/// could not hold (a list or an object in a field of single values); else as the reader says.
fn json_failed(
    object: &str,
    text: &[u8],
    rows_before: u64,
    lines_before: u64,
    read: &Schema,
    e: &arrow::error::ArrowError,
) -> InputError {
    let why = e.to_string();
    if let Some((row, line, bad)) = text::first_bad_json_line(text) {
        return json_malformed(object, || Some((rows_before + row, lines_before + line, bad)), why);
    }
    match text::first_nested_in_single(text, &why, read) {
        Some((row, line, column, value)) => InputError::bad(
            at(object, Some(rows_before + row), Some(lines_before + line), Some(&column)),
            format!(
                "`{value}` is a list or an object, where the column holds single values; declare the column as \
                 a list or struct type in [input.schema], or write a single value"
            ),
        ),
        None => json_malformed(object, || None, why),
    }
}

/// A line whose object names a field twice: `(row, line, field)`.
fn repeated_field(object: &str, (row, line, field): (u64, u64, String)) -> InputError {
    InputError::bad(
        at(object, Some(row), Some(line), Some(&field)),
        "this line's object names the field twice: which value is meant is unknown",
    )
}

/// `t` with its text places that hold no value in any of `arrays` as Null.
fn nulled(t: &DataType, arrays: &[&dyn Array]) -> DataType {
    let field = |f: &arrow::datatypes::FieldRef, children: &[&dyn Array]| {
        Arc::new(f.as_ref().clone().with_data_type(nulled(f.data_type(), children)))
    };
    match t {
        DataType::Utf8 if arrays.iter().all(|a| a.logical_null_count() == a.len()) => DataType::Null,
        DataType::List(f) => {
            let children: Vec<&dyn Array> = arrays.iter().map(|a| a.as_list::<i32>().values().as_ref()).collect();
            DataType::List(field(f, &children))
        }
        DataType::Struct(fs) => DataType::Struct(
            fs.iter()
                .enumerate()
                .map(|(i, f)| {
                    let children: Vec<&dyn Array> = arrays.iter().map(|a| a.as_struct().column(i).as_ref()).collect();
                    field(f, &children)
                })
                .collect(),
        ),
        t => t.clone(),
    }
}

/// One type of [`nulled`] from the types it gives two runs of a field's values: a place is of
/// no value (Null) only where it is in both.
fn meet(a: &DataType, b: &DataType) -> DataType {
    let field = |x: &arrow::datatypes::FieldRef, y: &arrow::datatypes::FieldRef| {
        Arc::new(x.as_ref().clone().with_data_type(meet(x.data_type(), y.data_type())))
    };
    match (a, b) {
        (DataType::Null, t) | (t, DataType::Null) => t.clone(),
        (DataType::List(x), DataType::List(y)) => DataType::List(field(x, y)),
        (DataType::Struct(xs), DataType::Struct(ys)) => {
            DataType::Struct(xs.iter().zip(ys.iter()).map(|(x, y)| field(x, y)).collect())
        }
        (t, _) => t.clone(),
    }
}

/// `a` as `to`, which it is but for places of no value (all nulls) typed Null.
fn renulled(a: &ArrayRef, to: &DataType) -> ArrayRef {
    match to {
        t if t == a.data_type() => a.clone(),
        DataType::Null => Arc::new(arrow::array::NullArray::new(a.len())),
        DataType::List(f) => {
            let l = a.as_list::<i32>();
            let values = renulled(l.values(), f.data_type());
            Arc::new(arrow::array::ListArray::new(f.clone(), l.offsets().clone(), values, l.nulls().cloned()))
        }
        DataType::Struct(fs) => {
            let st = a.as_struct();
            let columns = st.columns().iter().zip(fs.iter()).map(|(c, f)| renulled(c, f.data_type())).collect();
            Arc::new(arrow::array::StructArray::new(fs.clone(), columns, st.nulls().cloned()))
        }
        _ => a.clone(),
    }
}

/// A batch with its columns as `schema` types them ([`renulled`]).
fn renulled_batch(b: RecordBatch, schema: &SchemaRef) -> Result<RecordBatch, arrow::error::ArrowError> {
    if b.schema().fields().iter().zip(schema.fields()).all(|(x, y)| x.data_type() == y.data_type()) {
        return Ok(b);
    }
    let columns = b.columns().iter().zip(schema.fields()).map(|(c, f)| renulled(c, f.data_type())).collect();
    RecordBatch::try_new(schema.clone(), columns)
}

/// The footer of a Parquet object held in memory.
fn parquet_meta<R: parquet::file::reader::ChunkReader>(
    object: &str,
    source: &R,
) -> Result<ArrowReaderMetadata, InputError> {
    if source.len() == 0 {
        return Err(InputError::bad(Location::object(object), "the object is empty (0 bytes), not a Parquet file"));
    }
    let meta = ArrowReaderMetadata::load(source, ArrowReaderOptions::new()).map_err(|e| {
        let hint = if source.get_bytes(0, 4).is_ok_and(|b| b.starts_with(b"PAR1")) {
            ""
        } else {
            " (it does not start like a Parquet file; check input.format)"
        };
        InputError::bad(
            Location::object(object),
            format!("not a readable Parquet file (truncated or corrupt?){hint}: {e}"),
        )
    })?;
    if let Some(name) = named_twice(meta.schema()) {
        return Err(InputError::bad(at(object, None, None, Some(name)), NAMED_TWICE));
    }
    Ok(meta)
}

/// Why an object that names a column twice is refused.
const NAMED_TWICE: &str = "the object has two columns of this name: which one is meant is unknown";

/// A column `schema` names twice: columns are found by name, so the second would be read as
/// the first.
fn named_twice(schema: &Schema) -> Option<&str> {
    let mut names = std::collections::HashSet::new();
    schema.fields().iter().map(|f| f.name().as_str()).find(|n| !names.insert(*n))
}

/// The dates each row group may hold, by the statistics of the date source's column (as days
/// since the epoch, inclusive); `None` where the statistics do not tell.
pub fn row_group_dates(md: &ParquetMetaData, arrow: &Schema, source: &DateSource, tz: Tz) -> Vec<Option<(i32, i32)>> {
    let none = vec![None; md.num_row_groups()];
    let name = match source {
        DateSource::Column(c) | DateSource::Timestamp(c) => c,
        DateSource::Path => return none,
    };
    let Some(col) = md.file_metadata().schema_descr().columns().iter().position(|cd| cd.path().string() == *name)
    else {
        return none;
    };
    let Ok(field) = arrow.field_with_name(name) else { return none };
    let ty = field.data_type().clone();
    // Past the zone table's daylight-saving changes a date is known to a day: such a row group
    // is read for those days, and its rows there refused.
    let known_until = dates::zone_known_until(tz);
    md.row_groups()
        .iter()
        .map(|rg| {
            let stats = rg.column(col).statistics()?;
            match (stats, &ty) {
                (Statistics::Int32(s), DataType::Date32) => Some((*s.min_opt()?, *s.max_opt()?)),
                // A timestamp in the partition column is a date as its rows read it: exactly,
                // by the same conversion, whatever the job's zone (no date where it is not one).
                (Statistics::Int64(s), DataType::Timestamp(..)) if matches!(source, DateSource::Column(_)) => {
                    let day = |t: i64| -> Option<i32> {
                        let one: ArrayRef = arrow::compute::cast(&Int64Array::from(vec![t]), &ty).ok()?;
                        let d = super::unify::exact_cast(&one, &DataType::Date32, tz).ok()?;
                        let d = d.as_primitive::<arrow::datatypes::Date32Type>();
                        d.is_valid(0).then(|| d.value(0))
                    };
                    Some((day(*s.min_opt()?)?, day(*s.max_opt()?)?))
                }
                (Statistics::Int64(s), DataType::Timestamp(unit, zone)) => {
                    // `by`: a day earlier for the least, later for the greatest, where the zone's
                    // offset is not known (a zone's date is within a day of UTC's).
                    let day = |t: i64, by: i32| -> Option<i32> {
                        let ps = per_second(*unit);
                        match zone {
                            None => Some(t.div_euclid(86_400 * ps) as i32),
                            Some(_) if known_until.is_some_and(|u| t.div_euclid(ps) >= u) => {
                                Some(t.div_euclid(86_400 * ps) as i32 + by)
                            }
                            Some(_) => {
                                tz.timestamp_opt(t.div_euclid(ps), 0).single().map(|dt| dates::to_days(dt.date_naive()))
                            }
                        }
                    };
                    Some((day(*s.min_opt()?, -1)?, day(*s.max_opt()?, 1)?))
                }
                _ => None,
            }
        })
        .collect()
}

/// Why a Parquet footer could not be read: the store failed (worth a retry), or the bytes are
/// not Parquet (bad input).
#[derive(Debug)]
pub enum FooterError {
    Store(object_store::Error),
    Bad(String),
}

impl std::fmt::Display for FooterError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FooterError::Store(e) => write!(f, "{e}"),
            FooterError::Bad(m) => f.write_str(m),
        }
    }
}

/// Reads a Parquet footer from the end of an object (a few ranged reads), without its data.
pub async fn parquet_footer(
    store: &dyn object_store::ObjectStore,
    meta: &object_store::ObjectMeta,
) -> Result<ParquetMetaData, FooterError> {
    use object_store::ObjectStoreExt;
    let bad = |m: String| FooterError::Bad(m);
    let size = meta.size;
    if size < 12 {
        return Err(bad(format!("the object is too small to be Parquet ({size} bytes)")));
    }
    let tail_len = size.min(64 * 1024);
    let tail = store.get_range(&meta.location, size - tail_len..size).await.map_err(FooterError::Store)?;
    let end = tail.len() - 8;
    let footer = parquet::file::metadata::FooterTail::try_from(&tail[end..]).map_err(|e| bad(e.to_string()))?;
    let len = footer.metadata_length();
    let raw = if len <= end {
        tail.slice(end - len..end)
    } else {
        let start =
            (size - 8).checked_sub(len as u64).ok_or_else(|| bad("the footer is longer than the object".into()))?;
        store.get_range(&meta.location, start..size - 8).await.map_err(FooterError::Store)?
    };
    parquet::file::metadata::ParquetMetaDataReader::decode_metadata(&raw).map_err(|e| bad(e.to_string()))
}

/// The arrow schema of a Parquet footer.
pub fn footer_schema(md: &ParquetMetaData) -> Result<Schema, String> {
    let schema = parquet::arrow::parquet_to_arrow_schema(
        md.file_metadata().schema_descr(),
        md.file_metadata().key_value_metadata(),
    )
    .map_err(|e| e.to_string())?;
    match named_twice(&schema) {
        Some(name) => Err(format!("column `{name}`: {NAMED_TWICE}")),
        None => Ok(schema),
    }
}

/// A short description of text that is not the expected format, for error messages.
pub fn sniff(bytes: &[u8]) -> Option<&'static str> {
    if bytes.starts_with(b"PAR1") {
        Some("this is a Parquet file; check input.format")
    } else if bytes.starts_with(&[0x1f, 0x8b]) {
        Some("this is gzip-compressed; name it *.gz")
    } else if bytes.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
        Some("this is zstd-compressed; name it *.zst")
    } else {
        None
    }
}

/// An integer, float or decimal type: a column of one holds numbers, not instants.
fn is_number(t: &DataType) -> bool {
    t.is_integer() || t.is_floating() || t.is_decimal()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn decoder(declared: &[(&str, &str)]) -> Decoder {
        Decoder {
            format: Format::Ndjson,
            delimiter: b',',
            header: true,
            date_source: DateSource::Path,
            tz: Tz::UTC,
            declared: declared.iter().map(|(c, t)| (c.to_string(), text::parse_type(t).unwrap())).collect(),
            required: Vec::new(),
            tombstone: None,
            run: None,
            version: None,
        }
    }

    /// What an object reads to: its rows (one batch), row numbers, lines and bad values, or
    /// the error.
    /// Rows (one batch), their numbers, lines and bad values.
    type Outcome = (RecordBatch, Vec<u64>, Vec<u64>, Vec<String>);

    fn outcome(rows: Result<Vec<Rows>, InputError>) -> Result<Outcome, String> {
        let rows = rows.map_err(|e| e.to_string())?;
        let schema = rows.first().map_or_else(|| Arc::new(Schema::empty()), |r| r.batch.schema());
        let batch = arrow::compute::concat_batches(&schema, rows.iter().map(|r| &r.batch)).unwrap();
        let mut numbers = Vec::new();
        let mut lines = Vec::new();
        let mut bad = Vec::new();
        for r in &rows {
            numbers.extend(r.first_row..r.first_row + r.batch.num_rows() as u64);
            lines.extend(r.lines.iter().flat_map(|l| l.iter().copied()));
            bad.extend(r.bad.iter().map(|(i, c, why)| format!("{} {c} {why}", r.first_row + *i as u64)));
        }
        Ok((batch, numbers, lines, bad))
    }

    fn streamed(d: &Decoder, name: &str, stored: &Bytes, piece: usize) -> Result<Vec<Rows>, InputError> {
        let whole = Stored::Whole(stored.clone());
        let src = Streamed { object: name, stored: &whole, piece };
        let mut rows = Vec::new();
        d.ndjson_parts(&src, stored.len() as u64, Parts { rows: 7, bytes: None }, &mut |r| {
            rows.push(r);
            Ok(())
        })?;
        Ok(rows)
    }

    #[test]
    fn a_csv_read_with_a_header_has_its_header_line() {
        let gz = |b: &[u8]| {
            use std::io::Write;
            let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
            e.write_all(b).unwrap();
            Bytes::from(e.finish().unwrap())
        };
        let csv = |header: bool| Decoder { format: Format::Csv, header, ..decoder(&[]) };
        let refused = |header: bool, name: &str, b: Bytes| csv(header).text_bytes(name, b).err().map(|e| e.to_string());
        for (name, b, why) in [
            ("e.csv", Bytes::new(), "empty (0 bytes)"),
            ("e.csv.gz", gz(b""), "holds no text"),
            ("e.csv", Bytes::from_static(b"\r\n\n"), "blank lines alone"),
            ("e.csv", Bytes::from_static(b"\xEF\xBB\xBF\n"), "blank lines alone"),
        ] {
            let e = refused(true, name, b.clone()).unwrap_or_else(|| panic!("{name} {b:?} accepted"));
            assert!(e.contains(name) && e.contains(why) && e.contains("header line"), "{e}");
            // Without a header, an empty CSV is a whole document of no rows; so is an empty NDJSON object.
            assert_eq!(refused(false, name, b.clone()), None);
            assert!(decoder(&[]).text_bytes(name, b).is_ok());
        }
        assert_eq!(refused(true, "h.csv", Bytes::from_static(b"\nid,v\n")), None, "a header after a blank line");
    }

    /// An object of no rows is held to the columns the config uses by the names its header or
    /// footer gives, read whole or in parts: a header of another table, or of blanks, is refused
    /// as it would be with rows, naming the object and the column; one of the table's is no rows.
    #[test]
    fn an_object_of_no_rows_has_the_columns_the_config_uses() {
        let csv = Decoder { format: Format::Csv, required: vec!["id".into(), "v".into()], ..decoder(&[]) };
        let parquet = Decoder { format: Format::Parquet, ..csv.clone() };
        let empty_parquet = |names: &[&str]| {
            let schema =
                Arc::new(Schema::new(names.iter().map(|n| Field::new(*n, DataType::Int64, true)).collect::<Vec<_>>()));
            let mut out = Vec::new();
            let w = parquet::arrow::ArrowWriter::try_new(&mut out, schema, None).unwrap();
            w.close().unwrap();
            Bytes::from(out)
        };
        let read = |d: &Decoder, b: Bytes| -> Vec<Result<usize, String>> {
            let rows = |o: &Decoded| o.pieces.iter().map(|p| p.batch.num_rows()).sum::<usize>();
            let whole = d.decode("o/x", b.clone(), &[], None).map(|o| rows(&o)).map_err(|e| e.to_string());
            // In parts: a CSV past a part's bytes is read a batch at a time.
            let mut n = 0;
            let parts = d
                .decode_parts("o/x", Stored::Whole(b), &[], None, Parts { rows: 2, bytes: Some(1) }, &mut |p| {
                    n += rows(&p);
                    Ok(())
                })
                .map(|()| n)
                .map_err(|e| e.to_string());
            vec![whole, parts]
        };
        for (d, b, missing) in [
            (&csv, Bytes::from_static(b"order_key,amount\n"), "id"),
            (&csv, Bytes::from_static(b"id,amount\n"), "v"),
            (&csv, Bytes::from_static(b"  \n"), "id"),
            (&parquet, empty_parquet(&["id", "amount"]), "v"),
        ] {
            for r in read(d, b.clone()) {
                let e = r.expect_err(&format!("{b:?} accepted"));
                assert!(
                    e.contains("o/x") && e.contains(&format!("`{missing}`")) && e.contains("missing column"),
                    "{e}"
                );
                assert!(e.contains("it holds no rows"), "{e}");
            }
        }
        for (d, b) in [(&csv, Bytes::from_static(b"v,x,id\n")), (&parquet, empty_parquet(&["v", "id"]))] {
            assert_eq!(read(d, b), vec![Ok(0), Ok(0)]);
        }
        // Without a header an empty CSV names no columns: a whole document of no rows.
        let headless = Decoder { header: false, ..csv.clone() };
        assert_eq!(read(&headless, Bytes::from_static(b"\n")), vec![Ok(0), Ok(0)]);
    }

    /// An NDJSON object read as pieces of lines (of every size, down to a line each) gives the
    /// rows, row numbers, lines, types and errors of the object decoded whole, and its schema
    /// for planning is that of its rows.
    #[test]
    fn ndjson_read_as_pieces_is_the_object_read_whole() {
        let mut many = String::from("\u{feff}");
        for i in 0..300 {
            let score = if i == 297 { "2.5".to_string() } else { i.to_string() };
            let tags = if i == 250 { r#"["x"]"# } else { "[null]" };
            many +=
                &format!(r#"{{"id": "k{i}", "v": {}, "score": {score}, "tags": {tags}, "s": {{"a": null}}}}"#, i % 4);
            many += if i % 50 == 0 { "\r\n  \n" } else { "\n" };
        }
        let body = many.trim_start_matches('\u{feff}');
        let texts: Vec<(&str, String)> = vec![
            ("good", many.clone()),
            ("no final newline", "{\"a\": 1}\n{\"a\": 2.5}".into()),
            ("blank only", "\n  \n".into()),
            ("empty", String::new()),
            ("bad late", format!("{many}{{\"id\": \"k\", \n")),
            ("bad early", format!("{{\"id\": 1\n{body}")),
            ("repeated late", format!("{many}{{\"id\": \"k\", \"id\": \"j\"}}\n")),
            ("text and number", format!("{many}{{\"id\": 7}}\n")),
            ("nested inexact", "{\"n\": [0.5]}\n{\"n\": [9007199254740993]}\n".into()),
            ("cannot type", "{\"n\": [{\"y\": 1}]}\n{\"n\": [null]}\n".into()),
            ("bom inside", "{\"a\": 1}\n\u{feff}{\"a\": 2}\n".to_string()),
            ("parquet", "PAR1 not text".into()),
            ("number too wide", "{\"a\": 1}\n{\"a\": 123456789012345678901234567890}\n".into()),
            // Lines the inference reads and the reader refuses.
            ("list then text", format!("{many}{{\"tags\": \"y\"}}\n")),
            ("nbsp line", format!("{many}\u{a0}\n{{\"id\": \"z\"}}\n")),
            ("form feed", format!("{many}\u{c}\n")),
            // A line that is JSON but not an object, and one further on that is not JSON.
            ("not an object first", format!("[1]\n{body}{{\"id\": \n")),
            ("repeated early", format!("{{\"id\": \"k\", \"id\": \"j\"}}\n{body}")),
            // Lines the inference takes for blank and the reader refuses, and nothing else.
            ("nbsp only", "\u{a0}\n\u{3000}\n".into()),
        ];
        for declared in [vec![], vec![("score", "double"), ("id", "string")]] {
            let d = decoder(&declared);
            for (what, t) in &texts {
                let bytes = Bytes::from(t.clone());
                let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
                gz.write_all(t.as_bytes()).unwrap();
                let gz = Bytes::from(gz.finish().unwrap());
                let whole = outcome(d.text_bytes("o.json", bytes.clone()).and_then(|b| d.ndjson_rows("o.json", &b)));
                // What the whole reading finds, for the record.
                let says = |what: &str| whole.as_ref().err().is_some_and(|e| e.contains(what));
                match *what {
                    "good" => {
                        let (b, _, lines, _) = whole.as_ref().unwrap();
                        assert_eq!((b.num_rows(), lines[1], lines[51]), (300, 3, 54));
                        let ty = |c: &str| b.schema().field_with_name(c).unwrap().data_type().to_string();
                        assert_eq!(ty("score"), "Float64");
                        assert!(ty("tags").contains("Utf8") && ty("s").contains("Null"), "{}", b.schema());
                    }
                    "bad late" => assert!(says("line 307"), "{whole:?}"),
                    "bad early" => assert!(says("line 1"), "{whole:?}"),
                    "repeated late" => assert!(says("twice") && says("line 307"), "{whole:?}"),
                    // Unless declared text, which reads every value as text.
                    "text and number" => assert!(says("more than one JSON type") == declared.is_empty(), "{whole:?}"),
                    "nested inexact" => assert!(says("read as a double"), "{whole:?}"),
                    "cannot type" | "bom inside" | "parquet" | "list then text" | "form feed" => {
                        assert!(whole.is_err(), "{what}: {whole:?}")
                    }
                    "nbsp line" => assert!(says("line 307"), "{whole:?}"),
                    "nbsp only" => assert!(says("line 1"), "{whole:?}"),
                    "not an object first" => assert!(says("line 308"), "{whole:?}"),
                    "repeated early" => assert!(says("twice") && says("line 1"), "{whole:?}"),
                    _ => {}
                }
                for piece in [1, 7, 64, 1000, 1 << 20] {
                    for (name, stored) in [("o.json", &bytes), ("o.json.gz", &gz)] {
                        let got = outcome(streamed(&d, name, stored, piece));
                        let got = got.map_err(|e| e.replace("o.json.gz", "o.json"));
                        assert!(got == whole, "{what}, pieces of {piece} bytes, {name}:\n{got:?}\nagainst\n{whole:?}");
                    }
                }
                // The schema alone misses only a line the reader refuses and no check finds (the
                // date's reading refuses it).
                match (&whole, d.schema_of("o.json", &bytes).map_err(|e| e.to_string())) {
                    (Ok((b, ..)), schema) => assert_eq!(schema.unwrap(), b.schema(), "{what}"),
                    (Err(e), Err(schema)) => assert_eq!(&schema, e, "{what}"),
                    (Err(e), Ok(_)) => assert!(["nbsp line", "form feed", "nbsp only"].contains(what), "{what}: {e}"),
                }
            }
        }
    }
}
