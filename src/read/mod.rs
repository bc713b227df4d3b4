//! Read: input objects decoded into one Arrow table per partition date.
//!
//! Formats: Parquet (row groups decoded in parallel, and skipped by their statistics when no
//! row of a wanted date can be in them), CSV and NDJSON. Every row keeps where it came from —
//! object and row number — so later stages can name the exact place of bad input. The first
//! input object defines the record schema; an object whose columns differ is bad input.
//! A row whose partition date is null, unparseable, or disagrees with the `col=date/` folder
//! it lies in is bad input too.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::array::{ArrayRef, RecordBatch};
use arrow::datatypes::SchemaRef;
use chrono::NaiveDate;
use futures::{StreamExt, TryStreamExt};
use object_store::{ObjectMeta, ObjectStoreExt};

use crate::error::{InputError, Location, PartitionError};
use crate::store::StoreLocation;

mod decode;
pub use decode::{infer_schema, parse_type, DateSource, Decoder};

/// Rows of one object that landed in a table: `len` rows from `start`, which are rows
/// `object_rows` of the object.
#[derive(Debug, Clone)]
struct Span {
    start: usize,
    object: Arc<str>,
    object_rows: Arc<[u64]>,
}

/// The input rows of one partition date, with their origin.
#[derive(Debug, Clone)]
pub struct Table {
    pub batch: RecordBatch,
    spans: Vec<Span>,
}

impl Table {
    pub fn empty(schema: SchemaRef) -> Self {
        Table { batch: RecordBatch::new_empty(schema), spans: Vec::new() }
    }

    pub fn num_rows(&self) -> usize {
        self.batch.num_rows()
    }

    /// Where row `row` of the table came from.
    pub fn locate(&self, row: usize, column: Option<&str>) -> Location {
        let i = self.spans.partition_point(|s| s.start <= row).saturating_sub(1);
        match self.spans.get(i) {
            Some(s) => Location {
                object: s.object.to_string(),
                row: s.object_rows.get(row - s.start).copied(),
                column: column.map(str::to_string),
            },
            None => Location { object: "?".into(), row: None, column: column.map(str::to_string) },
        }
    }

    /// The distinct objects the table's rows came from.
    pub fn objects(&self) -> Vec<String> {
        let mut v: Vec<String> = self.spans.iter().map(|s| s.object.to_string()).collect();
        v.dedup();
        v
    }

    /// Builds a table from decoded pieces, in the order given.
    pub fn from_pieces(schema: SchemaRef, pieces: Vec<Piece>) -> Result<Self, InputError> {
        let mut spans = Vec::with_capacity(pieces.len());
        let mut start = 0;
        let mut columns: Vec<Vec<ArrayRef>> = vec![Vec::with_capacity(pieces.len()); schema.fields().len()];
        for p in pieces {
            if p.batch.num_rows() == 0 {
                continue;
            }
            spans.push(Span { start, object: p.object, object_rows: p.object_rows });
            start += p.batch.num_rows();
            for (c, a) in columns.iter_mut().zip(p.batch.columns()) {
                c.push(a.clone());
            }
        }
        let err = |e: arrow::error::ArrowError| {
            InputError::unreadable(Location::object("input"), format!("cannot combine the input: {e}"))
        };
        // Column by column, letting go of each column's pieces once it is combined: the peak is
        // the pieces plus one combined column, not twice the partition.
        let mut combined = Vec::with_capacity(columns.len());
        for (parts, field) in columns.into_iter().zip(schema.fields()) {
            combined.push(match parts.len() {
                0 => arrow::array::new_empty_array(field.data_type()),
                1 => parts.into_iter().next().unwrap_or_else(|| arrow::array::new_empty_array(field.data_type())),
                _ => {
                    let refs: Vec<&dyn arrow::array::Array> = parts.iter().map(|a| a.as_ref()).collect();
                    arrow::compute::concat(&refs).map_err(err)?
                }
            });
        }
        let batch = RecordBatch::try_new_with_options(
            schema,
            combined,
            &arrow::array::RecordBatchOptions::new().with_row_count(Some(start)),
        )
        .map_err(err)?;
        Ok(Table { batch, spans })
    }
}

/// A decoded piece of one object, destined for one date.
#[derive(Debug, Clone)]
pub struct Piece {
    pub date: NaiveDate,
    pub batch: RecordBatch,
    pub object: Arc<str>,
    pub object_rows: Arc<[u64]>,
}

/// The column arrays of `batch` named `names`, in that order.
pub fn columns(batch: &RecordBatch, names: &[String]) -> Option<Vec<ArrayRef>> {
    names.iter().map(|n| batch.column_by_name(n).cloned()).collect()
}

/// Fetches objects (a few at a time) and decodes them in parallel, keeping the objects' order.
pub async fn read_objects(
    input: &StoreLocation,
    decoder: &Decoder,
    objects: &[ObjectMeta],
    dates: &[NaiveDate],
    path_date: Option<NaiveDate>,
) -> Result<Vec<Piece>, PartitionError> {
    let wanted: Arc<[NaiveDate]> = Arc::from(dates);
    let pieces: Vec<Vec<Piece>> = futures::stream::iter(objects.iter().cloned())
        .map(|m| {
            let decoder = decoder.clone();
            let wanted = wanted.clone();
            async move {
                let name = input.display(&m.location);
                let unreadable = |e: object_store::Error| {
                    PartitionError::Input(InputError::unreadable(Location::object(name.clone()), e.to_string()))
                };
                let bytes =
                    input.store.get(&m.location).await.map_err(unreadable)?.bytes().await.map_err(unreadable)?;
                tokio::task::spawn_blocking(move || decoder.decode(&name, bytes, &wanted, path_date))
                    .await
                    .map_err(|e| PartitionError::Other(format!("decoding task failed: {e}")))?
                    .map_err(PartitionError::from)
            }
        })
        .buffered(4)
        .try_collect()
        .await?;
    Ok(pieces.into_iter().flatten().collect())
}

/// The pieces of a flat input, read once and split by date.
pub type FlatInput = Result<BTreeMap<NaiveDate, Vec<Piece>>, String>;

/// Reads every object of a flat input once, splitting its rows by date.
pub async fn read_flat(
    input: &StoreLocation,
    decoder: &Decoder,
    objects: &[ObjectMeta],
    dates: &[NaiveDate],
) -> FlatInput {
    let pieces = read_objects(input, decoder, objects, dates, None).await.map_err(|e| e.to_string())?;
    let mut by_date: BTreeMap<NaiveDate, Vec<Piece>> = BTreeMap::new();
    for p in pieces {
        by_date.entry(p.date).or_default().push(p);
    }
    Ok(by_date)
}
