//! Decoding one input object: Parquet (row groups skipped by their date statistics), CSV and
//! NDJSON, into pieces per partition date, each row keeping its object and row number.

use std::collections::BTreeMap;
use std::io::Cursor;
use std::sync::Arc;

use arrow::array::{Array, AsArray, Int32Array, RecordBatch, UInt32Array};
use arrow::compute::take_record_batch;
use arrow::datatypes::{DataType, Date32Type, Field, Schema, SchemaRef, TimeUnit};
use bytes::Bytes;
use chrono::{NaiveDate, TimeZone};
use chrono_tz::Tz;
use parquet::arrow::arrow_reader::{ArrowReaderMetadata, ArrowReaderOptions, ParquetRecordBatchReaderBuilder};
use parquet::file::statistics::Statistics;

use super::Piece;
use crate::config::{Format, JobConfig};
use crate::dates;
use crate::error::{InputError, Location};

/// How to turn the bytes of an input object into rows.
#[derive(Debug, Clone)]
pub struct Decoder {
    pub format: Format,
    /// The record schema (of the first object); every object must match it.
    pub schema: SchemaRef,
    pub delimiter: u8,
    pub header: bool,
    /// Where each row's partition date comes from.
    pub date_source: DateSource,
    pub tz: Tz,
}

#[derive(Debug, Clone, PartialEq)]
pub enum DateSource {
    /// A `date32` column (or a `YYYY-MM-DD` text column).
    Column(String),
    /// A timestamp column, converted to a date in the job's time zone.
    Timestamp(String),
    /// Not in the file: the `col=date/` folder of a Hive layout gives it.
    Path,
}

/// An object and column, no row.
fn column_at(object: &str, column: &str) -> Location {
    Location { object: object.into(), row: None, column: Some(column.into()) }
}

/// Parses `YYYY-MM-DD` text strictly (nulls stay null): `2026-11-3x` is an error naming the
/// object, row and column, never the 3rd.
fn parse_dates(
    object: &str,
    column: &str,
    text: &arrow::array::StringArray,
    first_row: u64,
) -> Result<Vec<Option<i32>>, InputError> {
    (0..text.len())
        .map(|r| {
            if text.is_null(r) {
                return Ok(None);
            }
            let v = text.value(r);
            NaiveDate::parse_from_str(v, "%Y-%m-%d").map(|d| Some(dates::to_days(d))).map_err(|_| {
                InputError::bad(
                    Location { object: object.into(), row: Some(first_row + r as u64), column: Some(column.into()) },
                    format!("`{v}` is not a date (YYYY-MM-DD)"),
                )
            })
        })
        .collect()
}

/// Parses a type name of `[input.schema]`.
pub fn parse_type(name: &str) -> Result<DataType, String> {
    let n = name.trim().to_ascii_lowercase();
    let t = match n.as_str() {
        "utf8" | "string" | "text" => DataType::Utf8,
        "int64" | "bigint" | "long" => DataType::Int64,
        "int32" | "int" | "integer" => DataType::Int32,
        "float64" | "double" => DataType::Float64,
        "float32" | "float" => DataType::Float32,
        "bool" | "boolean" => DataType::Boolean,
        "date" | "date32" => DataType::Date32,
        "timestamp" | "timestamp[us]" => DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
        "timestamp[ms]" => DataType::Timestamp(TimeUnit::Millisecond, Some("UTC".into())),
        "timestamp[s]" => DataType::Timestamp(TimeUnit::Second, Some("UTC".into())),
        "timestamp[ns]" => DataType::Timestamp(TimeUnit::Nanosecond, Some("UTC".into())),
        _ => {
            if let Some(args) = n.strip_prefix("decimal(").and_then(|r| r.strip_suffix(')')) {
                let (p, s) = args.split_once(',').ok_or("decimal needs (precision, scale)")?;
                let p: u8 = p.trim().parse().map_err(|_| "bad decimal precision")?;
                let s: i8 = s.trim().parse().map_err(|_| "bad decimal scale")?;
                if p == 0 || p > 38 || s < 0 || s as u8 > p {
                    return Err(format!("decimal({p},{s}) is out of range: precision 1..38, 0 <= scale <= precision"));
                }
                DataType::Decimal128(p, s)
            } else {
                return Err(format!(
                    "unknown type `{name}`; use utf8, int64, int32, float64, bool, date, timestamp, or decimal(p,s)"
                ));
            }
        }
    };
    Ok(t)
}

/// Makes every field nullable: the record schema describes what may arrive, not a promise.
fn relaxed(schema: &Schema) -> SchemaRef {
    Arc::new(Schema::new(
        schema.fields().iter().map(|f| Field::new(f.name(), f.data_type().clone(), true)).collect::<Vec<_>>(),
    ))
}

/// Reads the record schema from the first object (Parquet footer, CSV header and a sample,
/// NDJSON sample), applying declared `[input.schema]` types.
pub fn infer_schema(cfg: &JobConfig, object: &str, bytes: &Bytes) -> Result<SchemaRef, InputError> {
    let at = || Location::object(object);
    let mut schema = match cfg.input.format {
        Format::Parquet => {
            let meta = ArrowReaderMetadata::load(bytes, ArrowReaderOptions::new())
                .map_err(|e| InputError::bad(at(), format!("not a readable Parquet file: {e}")))?;
            meta.schema().as_ref().clone()
        }
        Format::Csv => {
            let fmt = arrow::csv::reader::Format::default()
                .with_header(cfg.input.header)
                .with_delimiter(cfg.input.delimiter.as_bytes()[0]);
            fmt.infer_schema(Cursor::new(bytes), Some(1000))
                .map_err(|e| InputError::bad(at(), format!("cannot read the CSV header: {e}")))?
                .0
        }
        Format::Ndjson => {
            arrow::json::reader::infer_json_schema(Cursor::new(bytes), Some(1000))
                .map_err(|e| InputError::bad(at(), format!("not valid NDJSON: {e}")))?
                .0
        }
    };
    if !cfg.input.schema.is_empty() {
        let fields: Vec<Field> = schema
            .fields()
            .iter()
            .map(|f| match cfg.input.schema.get(f.name()) {
                Some(t) => Field::new(f.name(), parse_type(t).unwrap_or(f.data_type().clone()), true),
                None => f.as_ref().clone(),
            })
            .collect();
        schema = Schema::new(fields);
    }
    Ok(relaxed(&schema))
}

impl Decoder {
    /// Decodes one object into pieces per date, keeping only rows whose date is in `wanted`.
    /// `path_date` is the date of the object's `col=date/` folder, when the input is Hive
    /// partitioned.
    pub fn decode(
        &self,
        object: &str,
        bytes: Bytes,
        wanted: &[NaiveDate],
        path_date: Option<NaiveDate>,
    ) -> Result<Vec<Piece>, InputError> {
        let batches = match self.format {
            Format::Parquet => self.decode_parquet(object, bytes, wanted, path_date)?,
            Format::Csv => self.decode_csv(object, bytes)?,
            Format::Ndjson => self.decode_ndjson(object, bytes)?,
        };
        let object: Arc<str> = Arc::from(object);
        let mut out = Vec::new();
        for (batch, first_row) in batches {
            out.extend(self.split_by_date(&object, batch, first_row, wanted, path_date)?);
        }
        Ok(out)
    }

    fn check_schema(&self, object: &str, got: &Schema) -> Result<(), InputError> {
        for f in self.schema.fields() {
            match got.field_with_name(f.name()) {
                Err(_) => {
                    return Err(InputError::bad(
                        Location { object: object.into(), row: None, column: Some(f.name().clone()) },
                        "missing column (the first input object has it); every input object needs the same columns",
                    ))
                }
                Ok(g) if g.data_type() != f.data_type() => {
                    return Err(InputError::bad(
                        Location { object: object.into(), row: None, column: Some(f.name().clone()) },
                        format!(
                            "wrong column type {} (the first input object has {}); fix the writer or declare the type",
                            g.data_type(),
                            f.data_type()
                        ),
                    ))
                }
                Ok(_) => {}
            }
        }
        for g in got.fields() {
            if self.schema.field_with_name(g.name()).is_err() {
                return Err(InputError::bad(
                    Location { object: object.into(), row: None, column: Some(g.name().clone()) },
                    "unexpected column (the first input object does not have it); every input object needs the same columns",
                ));
            }
        }
        Ok(())
    }

    fn decode_parquet(
        &self,
        object: &str,
        bytes: Bytes,
        wanted: &[NaiveDate],
        path_date: Option<NaiveDate>,
    ) -> Result<Vec<(RecordBatch, u64)>, InputError> {
        let at = || Location::object(object);
        if bytes.is_empty() {
            return Err(InputError::bad(at(), "the object is empty (0 bytes), not a Parquet file"));
        }
        let meta = ArrowReaderMetadata::load(&bytes, ArrowReaderOptions::new())
            .map_err(|e| InputError::bad(at(), format!("not a readable Parquet file (truncated or corrupt?): {e}")))?;
        self.check_schema(object, meta.schema())?;
        let md = meta.metadata().clone();
        // Row groups that may hold a wanted date, by the date column's statistics.
        let stats_col = match (&self.date_source, path_date) {
            (DateSource::Column(c), None) => {
                md.file_metadata().schema_descr().columns().iter().position(|cd| cd.path().string() == *c)
            }
            _ => None,
        };
        let (lo, hi) = match (wanted.first(), wanted.last()) {
            (Some(a), Some(b)) => (dates::to_days(*a), dates::to_days(*b)),
            _ => (i32::MIN, i32::MAX),
        };
        let mut out = Vec::new();
        let mut first_row = 0u64;
        for (i, rg) in md.row_groups().iter().enumerate() {
            let n = rg.num_rows() as u64;
            let skip = stats_col.is_some_and(|c| match rg.column(c).statistics() {
                Some(Statistics::Int32(s)) => match (s.min_opt(), s.max_opt()) {
                    (Some(mn), Some(mx)) => *mx < lo || *mn > hi,
                    _ => false,
                },
                _ => false,
            });
            if !skip && n > 0 {
                let reader = ParquetRecordBatchReaderBuilder::new_with_metadata(bytes.clone(), meta.clone())
                    .with_row_groups(vec![i])
                    .with_batch_size(n as usize)
                    .build()
                    .map_err(|e| InputError::bad(at(), format!("cannot decode row group {i}: {e}")))?;
                let mut row = first_row;
                for b in reader {
                    let b = b.map_err(|e| {
                        InputError::bad(
                            Location { object: object.into(), row: Some(row), column: None },
                            format!("cannot decode row group {i} (truncated or corrupt?): {e}"),
                        )
                    })?;
                    let len = b.num_rows() as u64;
                    out.push((self.conform(object, b)?, row));
                    row += len;
                }
            }
            first_row += n;
        }
        Ok(out)
    }

    fn decode_csv(&self, object: &str, bytes: Bytes) -> Result<Vec<(RecordBatch, u64)>, InputError> {
        let reader = arrow::csv::ReaderBuilder::new(self.text_dates_schema())
            .with_header(self.header)
            .with_delimiter(self.delimiter)
            .with_batch_size(65_536)
            .build(Cursor::new(bytes))
            .map_err(|e| InputError::bad(Location::object(object), format!("cannot read CSV: {e}")))?;
        let mut out = Vec::new();
        let mut row = 0u64;
        for b in reader {
            let b = b.map_err(|e| {
                // arrow-csv counts "lines" from 0 with the header as line 0.
                let msg = e.to_string();
                let line = msg
                    .split("at line ")
                    .nth(1)
                    .and_then(|r| r.split(|c: char| !c.is_ascii_digit()).next())
                    .and_then(|n| n.parse::<u64>().ok());
                let row = line.map(|l| l.saturating_sub(self.header as u64));
                let column = msg
                    .split("for column ")
                    .nth(1)
                    .and_then(|r| r.split(|c: char| !c.is_ascii_digit()).next())
                    .and_then(|n| n.parse::<usize>().ok())
                    .and_then(|i| self.schema.fields().get(i).map(|f| f.name().clone()));
                InputError::bad(Location { object: object.into(), row, column }, msg)
            })?;
            let n = b.num_rows() as u64;
            out.push((self.strict_dates(object, b, row)?, row));
            row += n;
        }
        Ok(out)
    }

    fn decode_ndjson(&self, object: &str, bytes: Bytes) -> Result<Vec<(RecordBatch, u64)>, InputError> {
        let reader = arrow::json::ReaderBuilder::new(self.text_dates_schema())
            .with_batch_size(65_536)
            .build(Cursor::new(bytes))
            .map_err(|e| InputError::bad(Location::object(object), format!("cannot read NDJSON: {e}")))?;
        let mut out = Vec::new();
        let mut row = 0u64;
        for b in reader {
            let b = b.map_err(|e| {
                InputError::bad(
                    Location { object: object.into(), row: None, column: None },
                    format!("malformed NDJSON after {row} good rows: {e}"),
                )
            })?;
            let n = b.num_rows() as u64;
            out.push((self.strict_dates(object, b, row)?, row));
            row += n;
        }
        Ok(out)
    }

    /// The record schema with date columns read as text: text formats' dates are parsed
    /// strictly here (`2026-11-3x` is an error, not the 3rd).
    fn text_dates_schema(&self) -> SchemaRef {
        Arc::new(Schema::new(
            self.schema
                .fields()
                .iter()
                .map(|f| match f.data_type() {
                    DataType::Date32 => Field::new(f.name(), DataType::Utf8, true),
                    _ => f.as_ref().clone(),
                })
                .collect::<Vec<_>>(),
        ))
    }

    /// Parses the text date columns of a batch read with [`Self::text_dates_schema`].
    fn strict_dates(&self, object: &str, b: RecordBatch, first_row: u64) -> Result<RecordBatch, InputError> {
        let mut cols = b.columns().to_vec();
        for (i, f) in self.schema.fields().iter().enumerate() {
            if f.data_type() != &DataType::Date32 {
                continue;
            }
            let days = parse_dates(object, f.name(), cols[i].as_string::<i32>(), first_row)?;
            cols[i] = Arc::new(arrow::array::Date32Array::from(days));
        }
        RecordBatch::try_new(self.schema.clone(), cols).map_err(|e| {
            InputError::bad(Location::object(object), format!("columns do not match the first object: {e}"))
        })
    }

    /// The batch under the record schema (all fields nullable).
    fn conform(&self, object: &str, b: RecordBatch) -> Result<RecordBatch, InputError> {
        RecordBatch::try_new(self.schema.clone(), b.columns().to_vec()).map_err(|e| {
            InputError::bad(Location::object(object), format!("columns do not match the first object: {e}"))
        })
    }

    /// The partition date of every row, as days since the epoch.
    fn row_dates(&self, object: &str, batch: &RecordBatch, first_row: u64) -> Result<Option<Int32Array>, InputError> {
        let null_at = |col: &str, arr: &dyn Array| -> Result<(), InputError> {
            if arr.null_count() > 0 {
                let i = (0..arr.len()).find(|&i| arr.is_null(i)).unwrap_or(0);
                return Err(InputError::bad(
                    Location { object: object.into(), row: Some(first_row + i as u64), column: Some(col.into()) },
                    "the partition date is null; every row needs one",
                ));
            }
            Ok(())
        };
        match &self.date_source {
            DateSource::Path => Ok(None),
            DateSource::Column(c) => {
                let arr = batch
                    .column_by_name(c)
                    .ok_or_else(|| InputError::bad(column_at(object, c), "missing partition column"))?;
                null_at(c, arr.as_ref())?;
                let days = match arr.data_type() {
                    DataType::Date32 => arr.as_primitive::<Date32Type>().reinterpret_cast::<arrow::datatypes::Int32Type>(),
                    DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => {
                        let s = arrow::compute::cast(arr, &DataType::Utf8)
                            .map_err(|e| InputError::bad(column_at(object, c), e.to_string()))?;
                        Int32Array::from(parse_dates(object, c, s.as_string::<i32>(), first_row)?)
                    }
                    other => {
                        return Err(InputError::bad(
                            column_at(object, c),
                            format!("the partition column has type {other}; it must be a date (or set [partition] from_timestamp)"),
                        ))
                    }
                };
                Ok(Some(days))
            }
            DateSource::Timestamp(c) => {
                let arr = batch
                    .column_by_name(c)
                    .ok_or_else(|| InputError::bad(column_at(object, c), "missing timestamp column"))?;
                null_at(c, arr.as_ref())?;
                let per_sec = match arr.data_type() {
                    DataType::Timestamp(u, _) => match u {
                        TimeUnit::Second => 1i64,
                        TimeUnit::Millisecond => 1_000,
                        TimeUnit::Microsecond => 1_000_000,
                        TimeUnit::Nanosecond => 1_000_000_000,
                    },
                    other => {
                        return Err(InputError::bad(
                            column_at(object, c),
                            format!("from_timestamp column has type {other}; it must be a timestamp"),
                        ))
                    }
                };
                let ints = arrow::compute::cast(arr, &DataType::Int64)
                    .map_err(|e| InputError::bad(column_at(object, c), e.to_string()))?;
                let ints = ints.as_primitive::<arrow::datatypes::Int64Type>();
                let mut v = Vec::with_capacity(ints.len());
                for i in 0..ints.len() {
                    let t = ints.value(i);
                    let secs = t.div_euclid(per_sec);
                    let nanos = (t.rem_euclid(per_sec) * (1_000_000_000 / per_sec)) as u32;
                    let local = self.tz.timestamp_opt(secs, nanos).single().map(|dt| dt.date_naive());
                    let d = local.ok_or_else(|| {
                        InputError::bad(
                            Location {
                                object: object.into(),
                                row: Some(first_row + i as u64),
                                column: Some(c.clone()),
                            },
                            "timestamp out of range",
                        )
                    })?;
                    v.push(dates::to_days(d));
                }
                Ok(Some(Int32Array::from(v)))
            }
        }
    }

    fn split_by_date(
        &self,
        object: &Arc<str>,
        batch: RecordBatch,
        first_row: u64,
        wanted: &[NaiveDate],
        path_date: Option<NaiveDate>,
    ) -> Result<Vec<Piece>, InputError> {
        let n = batch.num_rows();
        let days = self.row_dates(object, &batch, first_row)?;
        if let Some(pd) = path_date {
            // Hive layout: every row belongs to the folder's date.
            if let (Some(days), DateSource::Column(c)) = (&days, &self.date_source) {
                let want = dates::to_days(pd);
                if let Some(i) = days.values().iter().position(|d| *d != want) {
                    let got = dates::from_days(days.value(i)).map(|d| d.to_string()).unwrap_or_default();
                    return Err(InputError::bad(
                        Location {
                            object: object.to_string(),
                            row: Some(first_row + i as u64),
                            column: Some(c.clone()),
                        },
                        format!("holds {got} but the object lies under the {c}={pd}/ folder"),
                    ));
                }
            }
            let rows: Arc<[u64]> = (first_row..first_row + n as u64).collect();
            return Ok(vec![Piece { date: pd, batch, object: object.clone(), object_rows: rows }]);
        }
        let days = days.ok_or_else(|| {
            InputError::bad(
                Location::object(object.to_string()),
                "no partition date: the input is not Hive partitioned and has no date column",
            )
        })?;
        let mut by_date: BTreeMap<i32, Vec<u32>> = BTreeMap::new();
        let (lo, hi) = match (wanted.first(), wanted.last()) {
            (Some(a), Some(b)) => (dates::to_days(*a), dates::to_days(*b)),
            _ => (i32::MIN, i32::MAX),
        };
        for (i, d) in days.values().iter().enumerate() {
            if *d >= lo && *d <= hi {
                by_date.entry(*d).or_default().push(i as u32);
            }
        }
        let mut out = Vec::with_capacity(by_date.len());
        for (d, idx) in by_date {
            let date = dates::from_days(d).unwrap_or_default();
            if !wanted.is_empty() && wanted.binary_search(&date).is_err() {
                continue;
            }
            let rows: Arc<[u64]> = idx.iter().map(|i| first_row + *i as u64).collect();
            let piece = if idx.len() == n {
                batch.clone()
            } else {
                take_record_batch(&batch, &UInt32Array::from(idx))
                    .map_err(|e| InputError::unreadable(Location::object(object.to_string()), e.to_string()))?
            };
            out.push(Piece { date, batch: piece, object: object.clone(), object_rows: rows });
        }
        Ok(out)
    }
}
