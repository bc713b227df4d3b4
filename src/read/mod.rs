//! Read: input objects decoded into one Arrow table per partition date.
//!
//! Formats: Parquet (row groups decoded in parallel, and skipped by their statistics when no
//! row of a wanted date can be in them), CSV and NDJSON, plain or gzip / zstd compressed.
//! Every object is read by column name; the objects of one date are unified to one record
//! schema by a written rule ([`unify`]) before prepare. Every row keeps where it came from —
//! object, row number and, in text, line — so later stages can name the exact place of bad
//! input. A row whose partition date is null, unparseable, or disagrees with the `col=date/`
//! folder it lies in is bad input.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::array::{ArrayRef, RecordBatch};
use arrow::datatypes::SchemaRef;
use chrono::NaiveDate;
use futures::StreamExt;
use object_store::{ObjectMeta, ObjectStoreExt};

use crate::error::{InputError, Location, PartitionError};
use crate::store::StoreLocation;

mod decode;
pub mod list;
mod ranged;
pub mod text;
pub mod unify;
pub use decode::{
    footer_schema, in_name_order, parquet_footer, row_group_dates, rows_bytes, tombstone_missing, DateSource, Decoded,
    Decoder, FooterError, Parts, Stored, Tombstone, PIECE,
};
pub use text::{parse_type, per_second, Declared};

/// The format of input objects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    Parquet,
    Csv,
    Ndjson,
}

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

/// The numbers of a piece's rows in their object: a run of consecutive rows (a part of a row
/// group, an object under its date's folder: 16 bytes however many rows), or the rows a date
/// picked out of an object holding several dates.
#[derive(Debug, Clone)]
pub enum ObjectRows {
    Run(std::ops::Range<u64>),
    List(Arc<[u64]>),
}

impl ObjectRows {
    /// Rows `first + i` for each `i` of `picked` (increasing): a run when they follow each other.
    pub fn picked(first: u64, picked: &[u32]) -> Self {
        match (picked.first(), picked.last()) {
            (Some(&a), Some(&b)) if (b - a) as usize + 1 != picked.len() => {
                ObjectRows::List(picked.iter().map(|&i| first + i as u64).collect())
            }
            (Some(&a), Some(&b)) => ObjectRows::Run(first + a as u64..first + b as u64 + 1),
            _ => ObjectRows::Run(first..first),
        }
    }

    /// The object row of the piece's row `i`.
    pub fn get(&self, i: usize) -> Option<u64> {
        match self {
            ObjectRows::Run(r) => r.start.checked_add(i as u64).filter(|x| *x < r.end),
            ObjectRows::List(l) => l.get(i).copied(),
        }
    }

    /// The object rows of the piece's rows `start..end`, as a list. Panics past the piece's
    /// rows, as a slice does.
    pub fn to_vec(&self, start: usize, end: usize) -> Vec<u64> {
        match self {
            ObjectRows::Run(r) => {
                assert!(start <= end && r.start + end as u64 <= r.end, "rows {start}..{end} of {r:?}");
                (r.start + start as u64..r.start + end as u64).collect()
            }
            ObjectRows::List(l) => l[start..end].to_vec(),
        }
    }
}

impl From<Vec<u64>> for ObjectRows {
    fn from(rows: Vec<u64>) -> Self {
        ObjectRows::List(rows.into())
    }
}

/// Where a run of rows came from: row id `first + i` is row `object_rows[offset + i]` of
/// `object`. A chunk holds one span, or several when small pieces were put together.
#[derive(Debug, Clone)]
struct Span {
    first: usize,
    object: Arc<str>,
    object_rows: ObjectRows,
    lines: Option<Arc<[u64]>>,
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
        let at = self.spans.partition_point(|s| s.first <= id).checked_sub(1);
        match at.and_then(|i| self.spans.get(i)) {
            Some(s) => Location {
                object: s.object.to_string(),
                row: s.object_rows.get(s.offset + id - s.first),
                line: s.lines.as_ref().and_then(|l| l.get(s.offset + id - s.first).copied()),
                column: column.map(str::to_string),
            },
            None => Location { object: "?".into(), row: None, line: None, column: column.map(str::to_string) },
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

    /// The table with `fields` added, null in every row (columns its objects lack).
    pub fn with_nulls(mut self, fields: &[arrow::datatypes::FieldRef]) -> Result<Self, arrow::error::ArrowError> {
        let mut all = self.schema.fields().to_vec();
        all.extend(fields.iter().map(|f| Arc::new(f.as_ref().clone().with_nullable(true))));
        self.schema = Arc::new(arrow::datatypes::Schema::new(all));
        for chunk in &mut self.chunks {
            let mut columns = chunk.columns().to_vec();
            columns.extend(fields.iter().map(|f| arrow::array::new_null_array(f.data_type(), chunk.num_rows())));
            *chunk = RecordBatch::try_new(self.schema.clone(), columns)?;
        }
        Ok(self)
    }

    /// Builds a table from decoded pieces, in the order given. Large pieces are not copied
    /// (sliced into chunks when longer than one); runs of small ones (many small objects, or
    /// short CSV batches) are put together into full chunks, so row ids stay dense.
    pub fn from_pieces(schema: SchemaRef, pieces: Vec<Piece>) -> Result<Self, InputError> {
        let mut t = Table::empty(schema);
        let mut small: Vec<Part> = Vec::new();
        for p in pieces {
            let n = p.batch.num_rows();
            let mut offset = 0;
            while offset < n {
                let len = (n - offset).min(CHUNK_ROWS);
                let part =
                    (p.batch.slice(offset, len), p.object.clone(), p.object_rows.clone(), p.lines.clone(), offset);
                if len >= CHUNK_ROWS / 2 {
                    t.push_chunk(std::mem::take(&mut small))?;
                    t.push_chunk(vec![part])?;
                } else {
                    if small.iter().map(|s| s.0.num_rows()).sum::<usize>() + len > CHUNK_ROWS {
                        t.push_chunk(std::mem::take(&mut small))?;
                    }
                    small.push(part);
                }
                offset += len;
            }
        }
        t.push_chunk(small)?;
        Ok(t)
    }

    /// Appends one chunk made of `parts` (at most `CHUNK_ROWS` rows in all; none: nothing).
    fn push_chunk(&mut self, parts: Vec<Part>) -> Result<(), InputError> {
        let Some(first) = parts.first() else { return Ok(()) };
        // Row ids stay below 2^31 - 1, which prepare keeps as a marker.
        let most = (1usize << (31 - CHUNK_BITS)) - 1;
        if self.chunks.len() >= most {
            return Err(InputError::unreadable(
                Location::object(first.1.to_string()),
                format!("too many rows for one partition (at most {})", most << CHUNK_BITS),
            ));
        }
        let base = self.chunks.len() << CHUNK_BITS;
        let mut at = 0;
        for (b, object, object_rows, lines, offset) in &parts {
            self.spans.push(Span {
                first: base + at,
                object: object.clone(),
                object_rows: object_rows.clone(),
                lines: lines.clone(),
                offset: *offset,
            });
            at += b.num_rows();
        }
        let chunk = if parts.len() == 1 {
            parts[0].0.clone()
        } else {
            let batches: Vec<RecordBatch> = parts.into_iter().map(|p| p.0).collect();
            arrow::compute::concat_batches(&self.schema, &batches).map_err(|e| {
                InputError::unreadable(Location::object("input"), format!("cannot combine the input: {e}"))
            })?
        };
        self.starts.push(self.rows);
        self.rows += chunk.num_rows();
        self.chunks.push(chunk);
        Ok(())
    }
}

/// A slice of a piece on its way into a chunk: rows, object, object rows, their lines, offset
/// in those.
type Part = (RecordBatch, Arc<str>, ObjectRows, Option<Arc<[u64]>>, usize);

/// A decoded piece of one object, destined for one date.
#[derive(Debug, Clone)]
pub struct Piece {
    pub date: NaiveDate,
    /// The rows, in the object's own schema (unified per date by [`assemble`]).
    pub batch: RecordBatch,
    pub object: Arc<str>,
    pub object_rows: ObjectRows,
    /// The line of each row, for text objects.
    pub lines: Option<Arc<[u64]>>,
}

/// The rows of one date's pieces as one table: their schemas unified by the written rule
/// ([`unify`]), every piece conformed to it by column name, exactly.
pub fn assemble(pieces: Vec<Piece>, decoder: &Decoder) -> Result<Table, InputError> {
    let schemas: Vec<(&str, SchemaRef)> = pieces.iter().map(|p| (p.object.as_ref(), p.batch.schema())).collect();
    let refs: Vec<(&str, &arrow::datatypes::Schema)> = schemas.iter().map(|(o, s)| (*o, s.as_ref())).collect();
    let schema = unified(&refs, decoder)?;
    drop(schemas);
    let conformed = pieces.into_iter().map(|p| conform(p, &schema, decoder.tz)).collect::<Result<Vec<_>, _>>()?;
    Table::from_pieces(schema, conformed)
}

/// The schema the objects' schemas unify to (the written rule of [`unify`]): declared types
/// first, and a column with no value in any of them in the run's type.
pub fn unified(schemas: &[(&str, &arrow::datatypes::Schema)], decoder: &Decoder) -> Result<SchemaRef, InputError> {
    unify::unify(schemas, &|c| decoder.column_type(c), &|c| decoder.run_type(c)).map_err(|c| {
        let objects = format!("{} and {}", c.types[0].1, c.types[1].1);
        InputError::bad(
            Location { object: objects, row: None, line: None, column: Some(c.column.clone()) },
            c.to_string(),
        )
    })
}

/// A piece conformed to `schema` by column name, exactly; a value that does not fit names its
/// object, row and column.
pub fn conform(p: Piece, schema: &SchemaRef, tz: chrono_tz::Tz) -> Result<Piece, InputError> {
    let batch = unify::conform(&p.batch, schema, tz).map_err(|(column, e)| {
        let i = e.row.unwrap_or(0);
        InputError::bad(
            Location {
                object: p.object.to_string(),
                row: e.row.and_then(|r| p.object_rows.get(r)),
                line: p.lines.as_ref().and_then(|l| l.get(i).copied()).filter(|_| e.row.is_some()),
                column: Some(column),
            },
            e.message,
        )
    })?;
    Ok(Piece { batch, ..p })
}

/// Fetches objects (a few at a time) and decodes them in parallel; the results in the
/// objects' order. An object that cannot be fetched or decoded is an error for every date it
/// serves.
pub async fn read_objects(
    input: &StoreLocation,
    decoder: &Decoder,
    objects: &[ObjectMeta],
    dates: &[NaiveDate],
    path_date: Option<NaiveDate>,
) -> Vec<Result<Decoded, InputError>> {
    decoded(input, decoder, objects, dates, path_date, 4, None).collect().await
}

/// Fetches and decodes objects, `ahead` at a time, yielding them in the objects' order; each
/// counted by `meter`, when there is one ([`Decoder::decode_within`]).
pub fn decoded<'a>(
    input: &'a StoreLocation,
    decoder: &'a Decoder,
    objects: &'a [ObjectMeta],
    dates: &[NaiveDate],
    path_date: Option<NaiveDate>,
    ahead: usize,
    meter: Option<Arc<crate::spill::Meter>>,
) -> impl futures::Stream<Item = Result<Decoded, InputError>> + 'a {
    let wanted: Arc<[NaiveDate]> = Arc::from(dates);
    futures::stream::iter(objects.iter().cloned())
        .map(move |m| {
            let decoder = decoder.clone();
            let wanted = wanted.clone();
            let meter = meter.clone();
            async move {
                let name = input.display(&m.location);
                let unreadable =
                    |e: object_store::Error| InputError::unreadable(Location::object(name.clone()), e.to_string());
                let bytes =
                    input.store.get(&m.location).await.map_err(unreadable)?.bytes().await.map_err(unreadable)?;
                let task = name.clone();
                tokio::task::spawn_blocking(move || {
                    decoder.decode_within(&task, bytes, &wanted, path_date, meter.as_deref())
                })
                .await
                .map_err(|e| InputError::unreadable(Location::object(name), format!("decoding task failed: {e}")))?
            }
        })
        .buffered(ahead.max(1))
}

/// The record schema of an NDJSON object too large to fetch whole (past [`decode::PIECE`]):
/// read from its store as pieces of lines ([`Decoder::json_schema`]), on a thread of its own
/// (its reads wait on the runtime). Dropped before it answers, its thread makes no further
/// read (the read under way, and the parsing of its piece, finish first).
pub async fn streamed_schema(
    input: &StoreLocation,
    decoder: &Decoder,
    m: &ObjectMeta,
) -> Result<SchemaRef, InputError> {
    let name = input.display(&m.location);
    let abandoned = ranged::Abandoned::default();
    let runtime = tokio::runtime::Handle::current();
    let stored = Stored::Ranged(ranged::Ranged::until(input.store.clone(), m, runtime, abandoned.clone()));
    let (decoder, object) = (decoder.clone(), name.clone());
    on_own_thread(Some(abandoned), move || decoder.json_schema(&object, &stored)).await.unwrap_or_else(|why| {
        Err(InputError::unreadable(Location::object(name), format!("decoding task failed: {why}")))
    })
}

/// Runs `work` on a thread of its own, not one of the runtime's: work that waits on the
/// runtime (ranged reads; a local folder's read is a blocking task itself) or on a consumer.
/// Its result, or why there is none: the thread could not start, or `work` panicked. When the
/// caller's future is dropped first, `abandoned` (if given) is set: reads made
/// [`ranged::Ranged::until`] it then fail, and `work` ends at its next read.
async fn on_own_thread<T: Send + 'static>(
    abandoned: Option<ranged::Abandoned>,
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, String> {
    struct SetOnDrop(Option<ranged::Abandoned>);
    impl Drop for SetOnDrop {
        fn drop(&mut self) {
            if let Some(a) = &self.0 {
                a.set();
            }
        }
    }
    let _gone = SetOnDrop(abandoned);
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("lakeswap-decode".into())
        .spawn(move || {
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(work));
            let _ = tx.send(r.map_err(|p| crate::error::panic_message(p.as_ref())));
        })
        .map_err(|e| format!("cannot start a decoding thread: {e}"))?;
    match rx.await {
        Ok(Ok(t)) => Ok(t),
        Ok(Err(panic)) => Err(format!("the decoder panicked: {panic}")),
        Err(_) => Err("the decoder stopped without an answer".into()),
    }
}

/// Fetches and decodes objects a part at a time ([`Decoder::decode_parts`]), in the objects'
/// order: each part, or an object's error, with the index of its object. Parts are cut as
/// `parts` says. The next object is fetched while one is decoded, and a part is decoded while
/// the consumer works on the last one. An object within a part's bytes is fetched whole; a
/// larger Parquet object a row group at a time, a larger NDJSON object a piece of lines at a
/// time (CSV objects are fetched whole). Memory then holds about two such objects' or row
/// groups' stored bytes and a few parts. A decoder
/// that dies ends the stream with an error, never silently.
pub fn decoded_parts(
    input: StoreLocation,
    decoder: Decoder,
    objects: Vec<ObjectMeta>,
    dates: Vec<NaiveDate>,
    path_date: Option<NaiveDate>,
    parts: decode::Parts,
) -> impl futures::Stream<Item = (usize, Result<Decoded, InputError>)> {
    type Item = (usize, Result<Decoded, InputError>);
    let (tx, rx) = tokio::sync::mpsc::channel::<Item>(1);
    let producer = tokio::spawn(async move {
        // Each fetch is a task of its own, so it goes on while the previous object decodes.
        let fetches = futures::stream::iter(objects)
            .map(|m| {
                let (input, decoder) = (input.clone(), decoder.clone());
                tokio::spawn(async move {
                    let name = input.display(&m.location);
                    let unreadable =
                        |e: object_store::Error| InputError::unreadable(Location::object(name.clone()), e.to_string());
                    // A Parquet object past a part's bytes is read a row group at a time, an
                    // NDJSON object from start to end as pieces of lines.
                    let ranged = matches!(decoder.format, Format::Parquet | Format::Ndjson);
                    if ranged && parts.bytes.is_some_and(|b| m.size > b) {
                        let runtime = tokio::runtime::Handle::current();
                        let ranged = ranged::Ranged::new(input.store.clone(), &m, runtime);
                        return Ok((name, Stored::Ranged(ranged)));
                    }
                    let got = input.store.get(&m.location).await.map_err(unreadable)?;
                    Ok::<_, InputError>((name.clone(), Stored::Whole(got.bytes().await.map_err(unreadable)?)))
                })
            })
            .buffered(2);
        let mut fetches = std::pin::pin!(fetches.enumerate());
        while let Some((k, fetched)) = fetches.next().await {
            let fetched = fetched.unwrap_or_else(|e| {
                Err(InputError::unreadable(Location::object(format!("object {k}")), format!("fetch task failed: {e}")))
            });
            let (name, stored) = match fetched {
                Ok(f) => f,
                Err(e) => {
                    let _ = tx.send((k, Err(e))).await;
                    return;
                }
            };
            let (sender, decoder, dates) = (tx.clone(), decoder.clone(), dates.clone());
            let task = name.clone();
            // A thread of its own: it waits for the consumer and for its ranged reads, and
            // dates spilled at once must not take every blocking thread of the runtime waiting.
            let decode = move || {
                let mut gone = false;
                let r = decoder.decode_parts(&task, stored, &dates, path_date, parts, &mut |part| {
                    // The consumer has stopped: no need to decode the rest.
                    gone = sender.blocking_send((k, Ok(part))).is_err();
                    if gone {
                        Err(InputError::unreadable(Location::object(task.clone()), "the reader stopped"))
                    } else {
                        Ok(())
                    }
                });
                match r {
                    Err(_) if gone => false,
                    Err(e) => {
                        let _ = sender.blocking_send((k, Err(e)));
                        false
                    }
                    Ok(()) => true,
                }
            };
            let failed = match on_own_thread(None, decode).await {
                Ok(true) => None,
                Ok(false) => return,
                Err(why) => Some(why),
            };
            if let Some(why) = failed {
                let e = InputError::unreadable(Location::object(name), format!("decoding task failed: {why}"));
                let _ = tx.send((k, Err(e))).await;
                return;
            }
        }
    });
    // When the channel closes, the producer has finished, or failed: then say so.
    futures::stream::unfold((rx, Some(producer)), |(mut rx, producer)| async move {
        if let Some(item) = rx.recv().await {
            return Some((item, (rx, producer)));
        }
        match producer?.await {
            Ok(()) => None,
            Err(e) => {
                let e = InputError::unreadable(Location::object("the input"), format!("the reading task failed: {e}"));
                Some(((usize::MAX, Err(e)), (rx, None)))
            }
        }
    })
}

/// The rows of one date, read from objects that serve only it (a Hive folder): its table, or
/// why the date fails.
pub async fn read_date(
    input: &StoreLocation,
    decoder: &Decoder,
    objects: &[ObjectMeta],
    date: NaiveDate,
    path_date: Option<NaiveDate>,
) -> Result<Table, PartitionError> {
    read_date_within(input, decoder, objects, date, path_date, None).await
}

/// [`read_date`], its rows counted by `meter` as they are decoded. When the meter goes over
/// its budget, reading stops with an error: the caller asks the meter first.
pub async fn read_date_within(
    input: &StoreLocation,
    decoder: &Decoder,
    objects: &[ObjectMeta],
    date: NaiveDate,
    path_date: Option<NaiveDate>,
    meter: Option<Arc<crate::spill::Meter>>,
) -> Result<Table, PartitionError> {
    let mut pieces = Vec::new();
    let read: Vec<_> = decoded(input, decoder, objects, &[date], path_date, 4, meter).collect().await;
    for r in read {
        let mut d = r?;
        if let Some(e) = d.bad.remove(&date) {
            return Err(e.into());
        }
        pieces.append(&mut d.pieces);
    }
    Ok(assemble(pieces, decoder)?)
}

/// A flat input, read once for every wanted date: each object's rows split by date.
#[derive(Debug, Default)]
pub struct FlatInput {
    pub by_date: BTreeMap<NaiveDate, Vec<Piece>>,
    /// The first bad value of each date.
    pub bad: BTreeMap<NaiveDate, InputError>,
    /// Objects that could not be read at all, by location.
    pub failed: BTreeMap<String, InputError>,
}

impl FlatInput {
    /// The dates found.
    pub fn dates(&self) -> Vec<NaiveDate> {
        let mut d: Vec<NaiveDate> = self.by_date.keys().chain(self.bad.keys()).copied().collect();
        d.sort();
        d.dedup();
        d
    }

    /// The objects among `all` that hold rows of `date` (or a bad value of it).
    pub fn objects_of(&self, date: NaiveDate, all: &[ObjectMeta], input: &StoreLocation) -> Vec<ObjectMeta> {
        let mut names: std::collections::HashSet<&str> =
            self.by_date.get(&date).into_iter().flatten().map(|p| p.object.as_ref()).collect();
        if let Some(e) = self.bad.get(&date) {
            names.insert(e.location().object.as_str());
        }
        all.iter()
            .filter(|m| {
                names.contains(input.display(&m.location).as_str()) || self.failed.contains_key(m.location.as_ref())
            })
            .cloned()
            .collect()
    }

    /// The table of `date`, whose rows may lie in `objects`.
    pub fn table(&self, date: NaiveDate, objects: &[ObjectMeta], decoder: &Decoder) -> Result<Table, PartitionError> {
        if let Some(e) = objects.iter().find_map(|m| self.failed.get(m.location.as_ref())) {
            return Err(e.clone().into());
        }
        if let Some(e) = self.bad.get(&date) {
            return Err(e.clone().into());
        }
        let pieces = self.by_date.get(&date).cloned().unwrap_or_default();
        Ok(assemble(pieces, decoder)?)
    }
}

/// Reads every object of a flat input once, splitting its rows by date.
pub async fn read_flat(
    input: &StoreLocation,
    decoder: &Decoder,
    objects: &[ObjectMeta],
    dates: &[NaiveDate],
) -> FlatInput {
    let mut flat = FlatInput::default();
    for (m, r) in objects.iter().zip(read_objects(input, decoder, objects, dates, None).await) {
        match r {
            Err(e) => {
                flat.failed.insert(m.location.to_string(), e);
            }
            Ok(d) => {
                for (date, e) in d.bad {
                    flat.bad.entry(date).or_insert(e);
                }
                for p in d.pieces {
                    flat.by_date.entry(p.date).or_default().push(p);
                }
            }
        }
    }
    flat
}

/// Pairs of chunks whose comparators an [`IdCmp`] keeps at once.
const MAX_CACHED_PAIRS: usize = 4096;

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
        // Bounded: a partition of many chunks does not keep a comparator per pair forever.
        if self.made.len() >= MAX_CACHED_PAIRS && !self.made.contains_key(&(ca, cb)) {
            self.made.clear();
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{AsArray, Int64Array};
    use arrow::datatypes::{DataType, Field, Int64Type, Schema};

    fn piece(object: &str, values: std::ops::Range<i64>) -> Piece {
        let schema = Arc::new(Schema::new(vec![Field::new("v", DataType::Int64, false)]));
        let batch = RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from_iter_values(values.clone()))]).unwrap();
        // Object rows 100, 101, ...: distinguishable from positions in the table; listed for
        // the one piece sliced across chunks, a run for the others.
        let rows = 100..100 + (values.end - values.start) as u64;
        let object_rows = match object {
            "big" => ObjectRows::from(rows.collect::<Vec<_>>()),
            _ => ObjectRows::Run(rows),
        };
        Piece {
            date: NaiveDate::from_ymd_opt(2026, 11, 1).unwrap(),
            batch,
            object: object.into(),
            object_rows,
            lines: None,
        }
    }

    #[test]
    fn object_rows_picked_name_the_rows_picked_whether_they_follow_each_other_or_not() {
        for picked in [vec![], vec![3], vec![3, 4, 5, 6], vec![0, 2, 3], vec![1, 9]] {
            let rows = ObjectRows::picked(100, &picked);
            let run = matches!(rows, ObjectRows::Run(_));
            assert_eq!(run, picked.windows(2).all(|w| w[1] == w[0] + 1), "{picked:?}");
            let want: Vec<u64> = picked.iter().map(|&i| 100 + i as u64).collect();
            assert_eq!((0..picked.len()).map(|i| rows.get(i).unwrap()).collect::<Vec<_>>(), want);
            assert_eq!(rows.get(picked.len()), None);
            assert_eq!(rows.to_vec(0, picked.len()), want);
        }
    }

    #[test]
    fn small_pieces_share_chunks_large_ones_are_sliced_and_every_row_keeps_its_origin() {
        let mut pieces: Vec<Piece> = (0..5).map(|i| piece(&format!("small-{i}"), i * 10..i * 10 + 10)).collect();
        pieces.push(piece("big", 1000..1000 + 3 * CHUNK_ROWS as i64 / 2)); // one and a half chunks
        pieces.extend((0..3).map(|i| piece(&format!("tail-{i}"), 500 + i * 10..500 + i * 10 + 10)));
        let want: Vec<(i64, String, u64)> = pieces
            .iter()
            .flat_map(|p| {
                let v = p.batch.column(0).as_primitive::<Int64Type>().values().to_vec();
                let rows = p.object_rows.to_vec(0, v.len());
                v.into_iter().zip(rows).map(move |(x, r)| (x, p.object.to_string(), r))
            })
            .collect();
        let schema = pieces[0].batch.schema();
        let t = Table::from_pieces(schema, pieces).unwrap();
        // [5 small], [big: first chunk], [big: rest], [3 small].
        assert_eq!(t.chunks().iter().map(|c| c.num_rows()).collect::<Vec<_>>(), [50, CHUNK_ROWS, CHUNK_ROWS / 2, 30]);
        assert_eq!(t.num_rows(), want.len());
        let ids: Vec<usize> = t.ids().collect();
        assert_eq!(ids.len(), want.len());
        assert!(ids.windows(2).all(|w| w[0] < w[1]) && *ids.last().unwrap() < t.id_bound());
        let all: Vec<u32> = ids.iter().map(|&i| i as u32).collect();
        let taken = t.take(&all).unwrap();
        let values = taken.column(0).as_primitive::<Int64Type>().values().to_vec();
        for (k, &id) in ids.iter().enumerate() {
            let loc = t.locate(id, None);
            assert_eq!((values[k], loc.object, loc.row), (want[k].0, want[k].1.clone(), Some(want[k].2)), "row {k}");
            assert_eq!(t.dense(id), k);
        }
    }

    #[test]
    fn thousands_of_tiny_pieces_make_few_chunks() {
        let pieces: Vec<Piece> = (0..20_000).map(|i| piece(&format!("o{i}"), i * 3..i * 3 + 3)).collect();
        let schema = pieces[0].batch.schema();
        let t = Table::from_pieces(schema, pieces).unwrap();
        assert_eq!(t.num_rows(), 60_000);
        assert_eq!(t.chunks().len(), 1);
        assert_eq!(t.locate(59_999, None).object, "o19999");
    }
}
