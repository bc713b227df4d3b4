//! The input rows of one partition date as a [`Table`]: decoded pieces kept as chunks,
//! addressed by row id, every row with its origin (object, row, line); and [`IdCmp`], which
//! compares rows of a table across its chunks.

use std::sync::Arc;

use arrow::array::{ArrayRef, RecordBatch};
use arrow::datatypes::SchemaRef;
use chrono::NaiveDate;

use crate::error::{InputError, Location};

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
    /// The rows, in the object's own schema (unified per date by [`super::assemble`]).
    pub batch: RecordBatch,
    pub object: Arc<str>,
    pub object_rows: ObjectRows,
    /// The line of each row, for text objects.
    pub lines: Option<Arc<[u64]>>,
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
