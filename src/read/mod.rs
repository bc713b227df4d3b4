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

/// Row ids of a [`Table`]: the chunk in the high bits, the row within it in the low
/// `CHUNK_BITS`. Ids grow in row order; a chunk holds at most `CHUNK_ROWS` rows.
pub const CHUNK_BITS: u32 = 17;
/// The most rows in one chunk.
pub const CHUNK_ROWS: usize = 1 << CHUNK_BITS;

/// The chunk and the row within it of row id `id`.
#[inline(always)]
pub fn split_id(id: usize) -> (usize, usize) {
    (id >> CHUNK_BITS, id & (CHUNK_ROWS - 1))
}

/// Where the rows of one chunk came from: row `i` of the chunk is row `object_rows[offset + i]`
/// of `object`.
#[derive(Debug, Clone)]
struct Span {
    object: Arc<str>,
    object_rows: Arc<[u64]>,
    offset: usize,
}

/// The input rows of one partition date, with their origin: the decoded pieces as they came
/// (no copy into one batch), in chunks of at most [`CHUNK_ROWS`] rows, addressed by row id.
#[derive(Debug, Clone)]
pub struct Table {
    schema: SchemaRef,
    chunks: Vec<RecordBatch>,
    spans: Vec<Span>,
    /// The row number of each chunk's first row.
    starts: Vec<usize>,
    rows: usize,
}

impl Table {
    pub fn empty(schema: SchemaRef) -> Self {
        Table { schema, chunks: Vec::new(), spans: Vec::new(), starts: Vec::new(), rows: 0 }
    }

    pub fn num_rows(&self) -> usize {
        self.rows
    }

    pub fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    /// The chunks, in row order; chunk `c` holds the ids from `c << CHUNK_BITS`.
    pub fn chunks(&self) -> &[RecordBatch] {
        &self.chunks
    }

    /// One past the largest row id (ids have gaps between chunks).
    pub fn id_bound(&self) -> usize {
        self.chunks.len() << CHUNK_BITS
    }

    /// Every row id, in row order.
    pub fn ids(&self) -> impl Iterator<Item = usize> + '_ {
        self.chunks.iter().enumerate().flat_map(|(c, b)| (c << CHUNK_BITS)..(c << CHUNK_BITS) + b.num_rows())
    }

    /// The chunks of column `name`, or None when there is no such column.
    pub fn column(&self, name: &str) -> Option<Vec<ArrayRef>> {
        let i = self.schema.index_of(name).ok()?;
        Some(self.chunks.iter().map(|b| b.column(i).clone()).collect())
    }

    /// The chunks of the columns `names`, chunk by chunk, or None when one is missing.
    pub fn columns(&self, names: &[String]) -> Option<Vec<Vec<ArrayRef>>> {
        let idx: Vec<usize> = names.iter().map(|n| self.schema.index_of(n).ok()).collect::<Option<_>>()?;
        Some(self.chunks.iter().map(|b| idx.iter().map(|&i| b.column(i).clone()).collect()).collect())
    }

    /// The first null of column `name`, as a row id.
    pub fn first_null(&self, name: &str) -> Option<usize> {
        let chunks = self.column(name)?;
        chunks.iter().enumerate().find_map(|(c, a)| {
            if a.null_count() == 0 {
                return None;
            }
            (0..a.len()).find(|&i| a.is_null(i)).map(|i| (c << CHUNK_BITS) | i)
        })
    }

    /// Where row `id` of the table came from.
    pub fn locate(&self, id: usize, column: Option<&str>) -> Location {
        let (c, i) = split_id(id);
        match self.spans.get(c) {
            Some(s) => Location {
                object: s.object.to_string(),
                row: s.object_rows.get(s.offset + i).copied(),
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

    /// The row number of row id `id` (its place in [`Table::concat`]).
    pub fn dense(&self, id: usize) -> usize {
        let (c, i) = split_id(id);
        self.starts[c] + i
    }

    /// All rows as one batch (a copy).
    pub fn concat(&self) -> Result<RecordBatch, arrow::error::ArrowError> {
        arrow::compute::concat_batches(&self.schema, &self.chunks)
    }

    /// The rows `ids`, in that order, as one batch.
    pub fn take(&self, ids: &[u32]) -> Result<RecordBatch, arrow::error::ArrowError> {
        let idx: Vec<(usize, usize)> = ids.iter().map(|&id| split_id(id as usize)).collect();
        if self.chunks.is_empty() {
            return Ok(RecordBatch::new_empty(self.schema.clone()));
        }
        let refs: Vec<&RecordBatch> = self.chunks.iter().collect();
        arrow::compute::interleave_record_batch(&refs, &idx)
    }

    /// Values of column `name` at rows `ids`, in that order.
    pub fn take_column(&self, name: &str, ids: &[u32]) -> Result<ArrayRef, arrow::error::ArrowError> {
        let i = self.schema.index_of(name)?;
        if self.chunks.is_empty() {
            return Ok(arrow::array::new_empty_array(self.schema.field(i).data_type()));
        }
        let idx: Vec<(usize, usize)> = ids.iter().map(|&id| split_id(id as usize)).collect();
        let refs: Vec<&dyn arrow::array::Array> = self.chunks.iter().map(|b| b.column(i).as_ref()).collect();
        arrow::compute::interleave(&refs, &idx)
    }

    /// Builds a table from decoded pieces, in the order given. Nothing is copied: pieces
    /// longer than a chunk are sliced.
    pub fn from_pieces(schema: SchemaRef, pieces: Vec<Piece>) -> Result<Self, InputError> {
        let mut t = Table::empty(schema);
        for p in pieces {
            let n = p.batch.num_rows();
            let mut offset = 0;
            while offset < n {
                let len = (n - offset).min(CHUNK_ROWS);
                if t.chunks.len() >= 1 << (32 - CHUNK_BITS) {
                    return Err(InputError::unreadable(
                        Location::object(p.object.to_string()),
                        "too many rows for one partition (at most 2^32 row ids)",
                    ));
                }
                t.chunks.push(p.batch.slice(offset, len));
                t.starts.push(t.rows);
                t.spans.push(Span { object: p.object.clone(), object_rows: p.object_rows.clone(), offset });
                t.rows += len;
                offset += len;
            }
        }
        Ok(t)
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

/// Compares rows of a table by row id, over some of its columns (lexicographically, nulls
/// equal to nulls), across chunks: a comparator per pair of chunks, made when first needed.
pub struct IdCmp {
    /// `chunks[c]` = the compared columns of chunk `c`.
    chunks: Vec<Vec<ArrayRef>>,
    made: std::collections::HashMap<(usize, usize), Vec<arrow::array::DynComparator>>,
}

impl IdCmp {
    pub fn new(chunks: Vec<Vec<ArrayRef>>) -> Self {
        IdCmp { chunks, made: std::collections::HashMap::new() }
    }

    pub fn cmp(&mut self, a: usize, b: usize) -> Result<std::cmp::Ordering, arrow::error::ArrowError> {
        let ((ca, ia), (cb, ib)) = (split_id(a), split_id(b));
        let cmps = match self.made.entry((ca, cb)) {
            std::collections::hash_map::Entry::Occupied(o) => o.into_mut(),
            std::collections::hash_map::Entry::Vacant(v) => {
                let (l, r) = (&self.chunks[ca], &self.chunks[cb]);
                let opts = arrow::compute::SortOptions::default();
                let cmps = l
                    .iter()
                    .zip(r)
                    .map(|(x, y)| arrow::array::make_comparator(x.as_ref(), y.as_ref(), opts))
                    .collect::<Result<Vec<_>, _>>()?;
                v.insert(cmps)
            }
        };
        Ok(cmps.iter().map(|c| c(ia, ib)).find(|o| o.is_ne()).unwrap_or(std::cmp::Ordering::Equal))
    }
}
