//! Prepare: one partition's input rows cleaned by identity and ordering, before anything
//! touches the target (docs/design.md §2).
//!
//! One hash pass over the rows, keyed by the raw bytes of the key: each key holds its winning
//! (highest) version and a short chain of the other versions seen. A row whose key and version
//! are already known is compared column by column with the first such row: equal is an exact
//! duplicate (dropped), different is a conflict. No sort, no second scan; the payload of a row
//! is only looked at when its key and version repeat. A conflict fails the partition, or under
//! `on_conflict = "quarantine"` sets aside every row of that key and version: the key keeps its
//! newest version without a conflict (none: it is left out).
//!
//! Invariants: the result depends only on the set of rows, never on their order (winners are
//! returned in row order, conflicts sorted by key); a null key or version is bad input naming
//! its object, row and column.

use std::collections::{HashMap, HashSet};
use std::hash::BuildHasher;
use std::sync::Arc;

use arrow::array::{ArrayRef, AsArray};
use arrow::buffer::ScalarBuffer;
use arrow::datatypes::{DataType, Int64Type};
use arrow::row::{RowConverter, Rows, SortField};
use arrow::util::display::{ArrayFormatter, FormatOptions};
use hashbrown::HashTable;

use crate::config::{Deleted, JobConfig, OnConflict};
use crate::error::{ConflictKey, InputError, Location, PartitionError};
use crate::predicate;
use crate::read::{split_id, IdCmp, Table};

/// The end of a version chain (rows and chain indices stay below 2^31).
const NONE: u32 = !CONFLICTED;

/// The message of a row without a key.
pub const NULL_KEY: &str = "the key is null; every row needs a key";

/// Counts of one partition's preparation.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PrepareStats {
    pub input_rows: u64,
    pub duplicates: u64,
    pub superseded: u64,
    pub deleted: u64,
    pub conflicting_keys: u64,
    pub quarantined_rows: u64,
    /// Keys left after preparation (one winning row each).
    pub keys: u64,
}

/// A partition's rows after preparation.
#[derive(Debug)]
pub struct Prepared {
    pub table: Table,
    /// The winning row of each live key, in row order.
    pub winners: Vec<u32>,
    /// Rows set aside under `on_conflict = "quarantine"` (every row of a key's version in
    /// conflict), in row order.
    pub quarantined: Vec<u32>,
    pub stats: PrepareStats,
    /// Sorted hashes of every key seen, for the cross-date check of the run.
    pub key_hashes: Vec<u64>,
}

/// The hasher of key bytes: fixed seed, so hashes agree across partitions and runs.
pub fn key_hasher() -> foldhash::fast::FixedState {
    foldhash::fast::FixedState::with_seed(0x6c61_6b65_7377_6170)
}

/// The identity columns of a config, resolved against a record schema.
#[derive(Debug, Clone)]
pub struct Identity {
    pub key: Vec<String>,
    pub version: Option<String>,
    pub deleted: Option<Deleted>,
    pub on_conflict: OnConflict,
    /// Keep keys whose latest version is a delete among the winners (a merge applies them).
    pub keep_deletes: bool,
    /// Keep the sorted key hashes, for the run-wide check of keys under two dates (only
    /// needed when a run has more than one partition).
    pub key_hashes: bool,
    /// Threads for the hash pass of one partition (keys are split among them by hash).
    pub threads: usize,
    /// The job's time zone (for a tombstone value that is a timestamp).
    pub tz: chrono_tz::Tz,
    /// The key is the whole record (`key = ["*"]`): a null is one of its values.
    pub whole_record: bool,
    /// Versions to set aside as conflicts beside this partition's own, by key bytes (a merge's
    /// conflicts found across the dates of its batch; `on_conflict = "quarantine"` only).
    pub set_aside: Option<Arc<HashMap<Vec<u8>, Vec<i64>>>>,
}

impl Identity {
    pub fn from_config(cfg: &JobConfig, all_columns: &[String]) -> Self {
        let key = if cfg.is_whole_record_key() { all_columns.to_vec() } else { cfg.identity.key.clone() };
        Identity {
            key,
            version: cfg.identity.version.clone(),
            deleted: cfg.identity.deleted.clone(),
            on_conflict: cfg.prepare.on_conflict,
            keep_deletes: cfg.job.kind == crate::config::JobKind::Merge,
            key_hashes: true,
            threads: 1,
            tz: cfg.timezone(),
            whole_record: cfg.is_whole_record_key(),
            set_aside: None,
        }
    }
}

/// Raw key bytes by row id: straight from a single text/binary column, else Arrow's row
/// format; one entry per chunk of the table.
pub(crate) enum KeyBytes<'a> {
    Utf8(Chunked<&'a arrow::array::StringArray>),
    LargeUtf8(Chunked<&'a arrow::array::LargeStringArray>),
    View(Chunked<&'a arrow::array::StringViewArray>),
    Binary(Chunked<&'a arrow::array::BinaryArray>),
    Rows(Chunked<Rows>),
}

impl KeyBytes<'_> {
    /// The key bytes of row `id` (for the cold paths; hot loops use `with_keys!`).
    pub(crate) fn get(&self, id: usize) -> &[u8] {
        with_keys!(self, |k| k.key(id))
    }
}

/// Per-chunk key columns, addressed by row id.
pub(crate) struct Chunked<T>(Vec<T>);

/// Key bytes by row within one chunk.
pub(crate) trait ChunkKeys: Sync {
    fn chunk_key(&self, i: usize) -> &[u8];
    /// Asks the CPU for what finding row `i`'s bytes reads first (its offsets). Nothing for
    /// key columns where that was not measured to help (views, the row format).
    #[inline(always)]
    fn prefetch_index(&self, _i: usize) {}
    /// Asks the CPU for row `i`'s bytes (this reads the offsets: call it once
    /// [`ChunkKeys::prefetch_index`] has had time to bring them). Nothing by default.
    #[inline(always)]
    fn prefetch_bytes(&self, _i: usize) {}
}

/// A hint to the CPU to bring the cache line at `p` in. It never faults, whatever `p` is.
#[inline(always)]
pub(crate) fn prefetch<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is a hint: it reads nothing into the program and never faults, even
    // on an address that is not mapped.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

impl<O: arrow::array::OffsetSizeTrait> ChunkKeys for &arrow::array::GenericStringArray<O> {
    #[inline(always)]
    fn chunk_key(&self, i: usize) -> &[u8] {
        self.value(i).as_bytes()
    }
    #[inline(always)]
    fn prefetch_index(&self, i: usize) {
        prefetch(self.value_offsets().as_ptr().wrapping_add(i));
    }
    #[inline(always)]
    fn prefetch_bytes(&self, i: usize) {
        prefetch(self.chunk_key(i).as_ptr());
    }
}

impl ChunkKeys for &arrow::array::StringViewArray {
    #[inline(always)]
    fn chunk_key(&self, i: usize) -> &[u8] {
        self.value(i).as_bytes()
    }
}

impl ChunkKeys for &arrow::array::BinaryArray {
    #[inline(always)]
    fn chunk_key(&self, i: usize) -> &[u8] {
        self.value(i)
    }
    #[inline(always)]
    fn prefetch_index(&self, i: usize) {
        prefetch(self.value_offsets().as_ptr().wrapping_add(i));
    }
    #[inline(always)]
    fn prefetch_bytes(&self, i: usize) {
        prefetch(self.chunk_key(i).as_ptr());
    }
}

impl ChunkKeys for Rows {
    #[inline(always)]
    fn chunk_key(&self, i: usize) -> &[u8] {
        self.row(i).data()
    }
}

/// Key bytes by row id, for the hot loops: one implementation per kind of key column, chosen
/// once per partition (`with_keys!`), so no row pays for the choice.
pub(crate) trait Keys: Sync {
    fn key(&self, id: usize) -> &[u8];
    /// [`ChunkKeys::prefetch_index`] by row id.
    fn prefetch_index(&self, id: usize);
    /// [`ChunkKeys::prefetch_bytes`] by row id.
    fn prefetch_bytes(&self, id: usize);
}

impl<T: ChunkKeys> Keys for Chunked<T> {
    #[inline(always)]
    fn key(&self, id: usize) -> &[u8] {
        let (c, i) = split_id(id);
        self.0[c].chunk_key(i)
    }
    #[inline(always)]
    fn prefetch_index(&self, id: usize) {
        let (c, i) = split_id(id);
        self.0[c].prefetch_index(i)
    }
    #[inline(always)]
    fn prefetch_bytes(&self, id: usize) {
        let (c, i) = split_id(id);
        self.0[c].prefetch_bytes(i)
    }
}

/// Runs `$body` with `$k` bound to the concrete [`Keys`] behind a `&KeyBytes`.
macro_rules! with_keys {
    ($keys:expr, |$k:ident| $body:expr) => {
        match $keys {
            $crate::prepare::KeyBytes::Utf8($k) => $body,
            $crate::prepare::KeyBytes::LargeUtf8($k) => $body,
            $crate::prepare::KeyBytes::View($k) => $body,
            $crate::prepare::KeyBytes::Binary($k) => $body,
            $crate::prepare::KeyBytes::Rows($k) => $body,
        }
    };
}
pub(crate) use with_keys;

/// The key bytes of columns given chunk by chunk (`chunks[c]` = the key columns of chunk `c`,
/// all chunks of one schema). A null never shares bytes with an empty value: columns holding
/// nulls go through Arrow's row format, which marks them.
pub(crate) fn key_bytes(chunks: &[Vec<ArrayRef>]) -> Result<KeyBytes<'_>, String> {
    let Some(first) = chunks.first() else { return Ok(KeyBytes::Rows(Chunked(Vec::new()))) };
    let no_nulls = chunks.iter().flatten().all(|c| c.null_count() == 0);
    if let ([c], true) = (first.as_slice(), no_nulls) {
        match c.data_type() {
            DataType::Utf8 => return Ok(KeyBytes::Utf8(Chunked(chunks.iter().map(|c| c[0].as_string()).collect()))),
            DataType::LargeUtf8 => {
                return Ok(KeyBytes::LargeUtf8(Chunked(chunks.iter().map(|c| c[0].as_string()).collect())))
            }
            DataType::Utf8View => {
                return Ok(KeyBytes::View(Chunked(chunks.iter().map(|c| c[0].as_string_view()).collect())))
            }
            DataType::Binary => {
                return Ok(KeyBytes::Binary(Chunked(chunks.iter().map(|c| c[0].as_binary()).collect())))
            }
            _ => {}
        }
    }
    let conv = RowConverter::new(first.iter().map(|c| SortField::new(c.data_type().clone())).collect())
        .map_err(|e| e.to_string())?;
    let rows = chunks
        .iter()
        .map(|cols| conv.convert_columns(&cols.iter().map(one_zero_one_nan).collect::<Vec<_>>()))
        .collect::<Result<Vec<_>, _>>();
    rows.map(|r| KeyBytes::Rows(Chunked(r))).map_err(|e| e.to_string())
}

/// A column with one zero and one NaN in its floats, also inside lists, structs, maps and
/// dictionaries: the row format keeps the sign of zero and a NaN's bits apart, and `0.0` and
/// `-0.0` are one key, as they are equal in SQL (`[0.0]` and `[-0.0]` one value). Other columns
/// as they are.
pub(crate) fn one_zero_one_nan(c: &ArrayRef) -> ArrayRef {
    use arrow::array::{Array, FixedSizeListArray, LargeListArray, ListArray, MapArray, StructArray};
    use arrow::datatypes::{Float16Type, Float32Type, Float64Type};
    match c.data_type() {
        t if !holds_floats(t) => c.clone(),
        DataType::Float16 => Arc::new(c.as_primitive::<Float16Type>().unary::<_, Float16Type>(|v| match v.to_f32() {
            x if x.is_nan() => f16_of(f32::NAN),
            0.0 => f16_of(0.0),
            _ => v,
        })),
        DataType::Float64 => Arc::new(c.as_primitive::<Float64Type>().unary::<_, Float64Type>(|v| {
            if v.is_nan() {
                f64::NAN
            } else {
                v + 0.0
            }
        })),
        DataType::Float32 => Arc::new(c.as_primitive::<Float32Type>().unary::<_, Float32Type>(|v| {
            if v.is_nan() {
                f32::NAN
            } else {
                v + 0.0
            }
        })),
        DataType::List(f) => {
            let l = c.as_list::<i32>();
            Arc::new(ListArray::new(f.clone(), l.offsets().clone(), one_zero_one_nan(l.values()), l.nulls().cloned()))
        }
        DataType::LargeList(f) => {
            let l = c.as_list::<i64>();
            Arc::new(LargeListArray::new(
                f.clone(),
                l.offsets().clone(),
                one_zero_one_nan(l.values()),
                l.nulls().cloned(),
            ))
        }
        DataType::FixedSizeList(f, n) => {
            let l = c.as_fixed_size_list();
            Arc::new(FixedSizeListArray::new(f.clone(), *n, one_zero_one_nan(l.values()), l.nulls().cloned()))
        }
        DataType::Struct(fields) => {
            let s = c.as_struct();
            Arc::new(StructArray::new(
                fields.clone(),
                s.columns().iter().map(one_zero_one_nan).collect(),
                s.nulls().cloned(),
            ))
        }
        DataType::Map(f, sorted) => {
            let m = c.as_map();
            let entries = one_zero_one_nan(&(Arc::new(m.entries().clone()) as ArrayRef));
            Arc::new(MapArray::new(
                f.clone(),
                m.offsets().clone(),
                entries.as_struct().clone(),
                m.nulls().cloned(),
                *sorted,
            ))
        }
        DataType::Dictionary(..) => {
            let d = c.as_any_dictionary();
            d.with_values(one_zero_one_nan(d.values()))
        }
        // Views, run-end encoded arrays and unions: no reader of lakeswap's makes them.
        _ => c.clone(),
    }
}

/// An `f32` as the half float type (arrow does not name it).
fn f16_of(v: f32) -> <arrow::datatypes::Float16Type as arrow::datatypes::ArrowPrimitiveType>::Native {
    <arrow::datatypes::Float16Type as arrow::datatypes::ArrowPrimitiveType>::Native::from_f32(v)
}

/// Whether a value of `t` holds a float, at its top or nested.
pub(crate) fn holds_floats(t: &DataType) -> bool {
    match t {
        DataType::Float16 | DataType::Float32 | DataType::Float64 => true,
        DataType::List(f)
        | DataType::LargeList(f)
        | DataType::FixedSizeList(f, _)
        | DataType::ListView(f)
        | DataType::LargeListView(f)
        | DataType::Map(f, _) => holds_floats(f.data_type()),
        DataType::Struct(fields) => fields.iter().any(|f| holds_floats(f.data_type())),
        DataType::Dictionary(_, v) => holds_floats(v),
        DataType::RunEndEncoded(_, v) => holds_floats(v.data_type()),
        _ => false,
    }
}

/// Versions as `i64`: integers, dates and timestamps order as their integer value.
pub fn version_values(arr: &ArrayRef) -> Result<ScalarBuffer<i64>, String> {
    match arr.data_type() {
        DataType::Int8
        | DataType::Int16
        | DataType::Int32
        | DataType::Int64
        | DataType::UInt8
        | DataType::UInt16
        | DataType::UInt32
        | DataType::UInt64
        | DataType::Date32
        | DataType::Date64
        | DataType::Timestamp(_, _) => {
            if let Some(i) = version_past_int64(arr) {
                return Err(version_too_large(arr, i));
            }
            let ints = arrow::compute::cast(arr, &DataType::Int64).map_err(|e| e.to_string())?;
            Ok(ints.as_primitive::<Int64Type>().values().clone())
        }
        other => Err(format!("has type {other}; a version must be an integer, a date or a timestamp")),
    }
}

/// The first row of a uint64 version past int64's range: versions are compared as int64.
pub fn version_past_int64(arr: &ArrayRef) -> Option<usize> {
    let u = arr.as_primitive_opt::<arrow::datatypes::UInt64Type>()?;
    (0..u.len()).find(|&i| arrow::array::Array::is_valid(u, i) && u.value(i) > i64::MAX as u64)
}

fn version_too_large(arr: &ArrayRef, i: usize) -> String {
    let v = arr.as_primitive::<arrow::datatypes::UInt64Type>().value(i);
    format!(
        "the version {v} is past {}, the largest version lakeswap compares (versions are compared as int64)",
        i64::MAX
    )
}

/// Renders the key of `row` as text (`a|b` for several columns).
pub fn render_key(cols: &[ArrayRef], row: usize) -> String {
    cols.iter().map(|c| show_value(c.as_ref(), row)).collect::<Vec<_>>().join("|")
}

/// Value `row` of `a` as text for a message (`null` for a null): a time past what a calendar
/// date can show (an epoch value beyond year 262,143) as its count since 1970 and its unit,
/// not as the formatter's error.
pub fn show_value(a: &dyn arrow::array::Array, row: usize) -> String {
    let opts = FormatOptions::default().with_null("null").with_display_error(false);
    if let Some(shown) = ArrayFormatter::try_new(a, &opts).ok().and_then(|f| f.value(row).try_to_string().ok()) {
        return shown;
    }
    use arrow::datatypes::TimeUnit;
    let unit = match a.data_type() {
        DataType::Timestamp(TimeUnit::Second, _) => " (seconds since 1970)",
        DataType::Timestamp(TimeUnit::Millisecond, _) | DataType::Date64 => " (milliseconds since 1970)",
        DataType::Timestamp(TimeUnit::Microsecond, _) => " (microseconds since 1970)",
        DataType::Timestamp(TimeUnit::Nanosecond, _) => " (nanoseconds since 1970)",
        DataType::Date32 => " (days since 1970)",
        _ => "",
    };
    match arrow::compute::cast(&a.slice(row, 1), &DataType::Int64) {
        Ok(n) if n.is_valid(0) => format!("{}{unit}", n.as_primitive::<arrow::datatypes::Int64Type>().value(0)),
        // A nested value: the formatter's own words, which name the value it could not show.
        _ => ArrayFormatter::try_new(a, &FormatOptions::default().with_null("null"))
            .map(|f| f.value(row).to_string())
            .unwrap_or_else(|_| "?".into()),
    }
}

/// Renders the key of row id `id` of key columns given chunk by chunk.
pub(crate) fn render_id(chunks: &[Vec<ArrayRef>], id: usize) -> String {
    let (c, i) = split_id(id);
    chunks.get(c).map_or_else(|| "?".into(), |cols| render_key(cols, i))
}

/// A key's entry: its winning row and the chain of its other versions. 8 bytes, so the table
/// of a million keys stays small and dense; versions are looked up by row (only on a repeat).
struct Head {
    row: u32,
    /// The index of the next version in `others` (low 31 bits), and the conflict flag.
    link: u32,
}

const CONFLICTED: u32 = 1 << 31;

impl Head {
    fn next(&self) -> u32 {
        self.link & !CONFLICTED
    }
    fn set_next(&mut self, next: u32) {
        self.link = (self.link & CONFLICTED) | next;
    }
    fn conflicted(&self) -> bool {
        self.link & CONFLICTED != 0
    }
}

/// A superseded version of a key, chained from its head.
struct Other {
    row: u32,
    next: u32,
}

/// The shard of a key hash among `shards`: by the hash's top bits, so shard order is hash
/// order and the shards' sorted hashes, concatenated, are sorted.
#[inline]
pub(crate) fn shard_of(h: u64, shards: usize) -> usize {
    (((h >> 32) * shards as u64) >> 32) as usize
}

/// The hash a hash table is given for a key hash: rotated, because the table takes its
/// 7-bit tags from the top bits, which [`shard_of`] fixes within a shard.
#[inline(always)]
pub(crate) fn table_hash(h: u64) -> u64 {
    h.rotate_left(8)
}

/// What the hash pass found for the keys of one shard.
struct Shard {
    heads: HashTable<Head>,
    others: Vec<Other>,
    duplicates: u64,
    /// (first row, other row) of each conflicting pair.
    conflicts: Vec<(u32, u32)>,
    /// Hashes of the shard's keys, sorted (when asked for).
    key_hashes: Vec<u64>,
}

/// Rows the hash pass looks ahead (see [`Pass::rows`]).
const AHEAD: usize = 16;

/// Versions a key's chain is walked for before its versions are looked up by value.
const CHAIN_WALK: usize = 32;

/// The versions of keys with long chains, by (key hash, version): a key seen in thousands of
/// versions would otherwise walk its whole chain for every new row.
#[derive(Default)]
struct LongChains {
    /// The keys indexed so far (a row of each).
    keys: HashTable<u32>,
    /// (key hash, version, row) of every superseded row of an indexed key.
    versions: HashTable<(u64, i64, u32)>,
}

impl LongChains {
    fn slot(h: u64, v: i64) -> u64 {
        table_hash(h ^ (v as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15))
    }

    /// The superseded row of key `k` (hash `h`) with version `v`, if any; the key's chain
    /// (from `first`) is indexed the first time it is asked about.
    fn find_or_index<K: Keys + ?Sized>(
        &mut self,
        h: u64,
        k: &[u8],
        v: i64,
        first: u32,
        others: &[Other],
        input: &Input<'_, K>,
    ) -> Option<u32> {
        let keys = input.keys;
        if self.keys.find(table_hash(h), |&r| keys.key(r as usize) == k).is_none() {
            let mut cur = first;
            while cur != NONE {
                let o = &others[cur as usize];
                self.add(h, input.version(o.row), o.row);
                cur = o.next;
            }
            let row = others[first as usize].row;
            self.keys.insert_unique(table_hash(h), row, |&r| input.hash(r as usize));
        }
        let found =
            self.versions.find(Self::slot(h, v), |&(eh, ev, r)| eh == h && ev == v && keys.key(r as usize) == k);
        found.map(|e| e.2)
    }

    fn add(&mut self, h: u64, v: i64, row: u32) {
        self.versions.insert_unique(Self::slot(h, v), (h, v, row), |&(eh, ev, _)| Self::slot(eh, ev));
    }
}

/// The rows of a partition, as the hash pass sees them.
struct Input<'a, K: ?Sized> {
    table: &'a Table,
    keys: &'a K,
    /// The versions, chunk by chunk.
    versions: Option<&'a [ScalarBuffer<i64>]>,
    hasher: foldhash::fast::FixedState,
}

impl<K: Keys + ?Sized> Input<'_, K> {
    #[inline]
    fn version(&self, row: u32) -> i64 {
        self.versions.map_or(0, |v| {
            let (c, i) = split_id(row as usize);
            v[c][i]
        })
    }
    /// Asks the CPU for the version of `row`.
    #[inline(always)]
    fn prefetch_version(&self, row: u32) {
        if let Some(v) = self.versions {
            let (c, i) = split_id(row as usize);
            prefetch(v[c].as_ptr().wrapping_add(i));
        }
    }
    #[inline]
    fn hash(&self, row: usize) -> u64 {
        table_hash(self.hasher.hash_one(self.keys.key(row)))
    }

    /// The hash pass, its shards on as many threads. With several, the rows are first listed
    /// by shard (each thread lists a run of chunks), so each shard's thread reads its own
    /// rows only, in row order.
    fn hash_pass(&self, shards: usize, want_hashes: bool) -> Result<Vec<Shard>, String> {
        let n = self.table.num_rows();
        if shards == 1 {
            let mut pass = Pass::new(self, n, want_hashes);
            for (c, b) in self.table.chunks().iter().enumerate() {
                let base = c << crate::read::CHUNK_BITS;
                pass.rows(b.num_rows(), |j| base + j)?;
            }
            return Ok(vec![pass.finish()]);
        }
        // Runs of chunks of about equal rows, one per thread.
        let chunks = self.table.chunks();
        let mut runs: Vec<std::ops::Range<usize>> = Vec::with_capacity(shards);
        let (mut first, mut rows) = (0, 0);
        for (c, b) in chunks.iter().enumerate() {
            rows += b.num_rows();
            if rows as u64 * shards as u64 >= n as u64 * (runs.len() as u64 + 1) && runs.len() + 1 < shards {
                runs.push(first..c + 1);
                first = c + 1;
            }
        }
        runs.push(first..chunks.len());
        let list = |run: std::ops::Range<usize>| -> Vec<Vec<u32>> {
            // A shard's share of the run and an eighth more: hashes spread keys evenly, so a
            // list seldom grows (a copy, and twice the memory for a moment).
            let rows: usize = chunks[run.clone()].iter().map(|b| b.num_rows()).sum();
            let mut lists: Vec<Vec<u32>> =
                (0..shards).map(|_| Vec::with_capacity(rows / shards + rows / shards / 8 + 64)).collect();
            for c in run {
                let base = c << crate::read::CHUNK_BITS;
                for j in 0..chunks[c].num_rows() {
                    let h = self.hasher.hash_one(self.keys.key(base + j));
                    lists[shard_of(h, shards)].push((base + j) as u32);
                }
            }
            lists
        };
        // A shard's lists, one per run in row order, each freed once scanned.
        let scan = |lists: Vec<Vec<u32>>| -> Result<Shard, String> {
            let mut pass = Pass::new(self, lists.iter().map(Vec::len).sum(), want_hashes);
            for ids in lists {
                pass.rows(ids.len(), |j| ids[j] as usize)?;
            }
            Ok(pass.finish())
        };
        let panicked = || "a prepare thread panicked".to_string();
        let lists: Vec<Vec<Vec<u32>>> = std::thread::scope(|s| {
            let mut runs = runs.into_iter();
            let mine = runs.next().unwrap_or_default();
            let handles: Vec<_> = runs.map(|r| s.spawn(move || list(r))).collect();
            let mut lists = vec![Ok(list(mine))];
            // Every thread joined before an error is returned (a second panic stays an error).
            lists.extend(handles.into_iter().map(|h| h.join().map_err(|_| panicked())));
            lists.into_iter().collect::<Result<Vec<_>, String>>()
        })?;
        let mut by_shard: Vec<Vec<Vec<u32>>> = (0..shards).map(|_| Vec::with_capacity(lists.len())).collect();
        for run in lists {
            for (shard, ids) in run.into_iter().enumerate() {
                by_shard[shard].push(ids);
            }
        }
        std::thread::scope(|s| {
            let mut by_shard = by_shard.into_iter();
            let mine = by_shard.next().unwrap_or_default();
            let handles: Vec<_> = by_shard.map(|l| s.spawn(move || scan(l))).collect();
            let mut out = vec![scan(mine)];
            out.extend(handles.into_iter().map(|h| h.join().unwrap_or_else(|_| Err(panicked()))));
            out.into_iter().collect()
        })
    }
}

/// The hash pass over one shard's rows, fed in row order ([`Pass::rows`]): every key's head
/// and chain, and what was found on the way.
struct Pass<'i, 'a, K: ?Sized> {
    input: &'i Input<'a, K>,
    heads: HashTable<Head>,
    key_hashes: Vec<u64>,
    want_hashes: bool,
    others: Vec<Other>,
    row_eq: Option<IdCmp>,
    duplicates: u64,
    conflicts: Vec<(u32, u32)>,
    long_chains: LongChains,
}

impl<'i, 'a, K: Keys + ?Sized> Pass<'i, 'a, K> {
    /// A pass over about `rows` rows.
    fn new(input: &'i Input<'a, K>, rows: usize, want_hashes: bool) -> Self {
        Pass {
            input,
            heads: HashTable::with_capacity(rows / 8 * 7),
            key_hashes: Vec::new(),
            want_hashes,
            others: Vec::new(),
            row_eq: None,
            duplicates: 0,
            conflicts: Vec::new(),
            long_chains: LongChains::default(),
        }
    }

    fn finish(mut self) -> Shard {
        radix_sort(&mut self.key_hashes);
        let Pass { heads, others, duplicates, conflicts, key_hashes, .. } = self;
        Shard { heads, others, duplicates, conflicts, key_hashes }
    }

    /// Rows `row(0)`, …, `row(m - 1)`, in that order (row order).
    ///
    /// A software pipeline. While row `j` is handled, row `j + AHEAD`'s slot is looked up and
    /// the offsets and version of the row found there are asked for; for row `j + AHEAD / 2`,
    /// the found row's key bytes. The cache misses of repeated keys then overlap instead of
    /// queueing (a repeat compares its key with a row read long before).
    #[inline(always)]
    fn rows(&mut self, m: usize, row: impl Fn(usize) -> usize) -> Result<(), String> {
        let input = self.input;
        let keys = input.keys;
        let mut ring = [0u64; AHEAD];
        for (j, h) in ring.iter_mut().enumerate().take(m) {
            *h = input.hasher.hash_one(keys.key(row(j)));
        }
        for j in 0..m {
            if j + AHEAD / 2 < m {
                let h = ring[(j + AHEAD / 2) % AHEAD];
                let _ = self.heads.find(table_hash(h), |e| {
                    keys.prefetch_bytes(e.row as usize);
                    false
                });
            }
            let h = ring[j % AHEAD];
            if j + AHEAD < m {
                let ahead = input.hasher.hash_one(keys.key(row(j + AHEAD)));
                ring[j % AHEAD] = ahead;
                let _ = self.heads.find(table_hash(ahead), |e| {
                    keys.prefetch_index(e.row as usize);
                    input.prefetch_version(e.row);
                    false
                });
            }
            self.row(row(j), h)?;
        }
        Ok(())
    }

    /// Row `i`, whose key hash is `h`.
    #[inline(always)]
    fn row(&mut self, i: usize, h: u64) -> Result<(), String> {
        let input = self.input;
        let keys = input.keys;
        let k = keys.key(i);
        let entry = self.heads.entry(table_hash(h), |e| keys.key(e.row as usize) == k, |e| input.hash(e.row as usize));
        let head = match entry {
            hashbrown::hash_table::Entry::Vacant(slot) => {
                slot.insert(Head { row: i as u32, link: NONE });
                if self.want_hashes {
                    self.key_hashes.push(h);
                }
                return Ok(());
            }
            hashbrown::hash_table::Entry::Occupied(o) => o.into_mut(),
        };
        // Same key and version seen before? The chain is walked for a few versions; a key
        // with more has its versions indexed, so a key updated all day long stays linear.
        let v = input.version(i as u32);
        let head_version = input.version(head.row);
        let mut same = (head_version == v).then_some(head.row);
        let mut cur = head.next();
        let mut steps = 0;
        while same.is_none() && cur != NONE && steps < CHAIN_WALK {
            let o = &self.others[cur as usize];
            if input.version(o.row) == v {
                same = Some(o.row);
            }
            cur = o.next;
            steps += 1;
        }
        let long = same.is_none() && cur != NONE;
        if long {
            same = self.long_chains.find_or_index(h, k, v, head.next(), &self.others, input);
        }
        if let Some(first) = same {
            let row_eq = self.row_eq.get_or_insert_with(|| {
                // One zero and one NaN, as in keys and in the query: `0.0` and `-0.0`
                // payloads are the same record.
                IdCmp::new(
                    input.table.chunks().iter().map(|b| b.columns().iter().map(one_zero_one_nan).collect()).collect(),
                )
            });
            if row_eq.cmp(first as usize, i).map_err(|e| e.to_string())?.is_eq() {
                self.duplicates += 1;
            } else {
                head.link |= CONFLICTED;
                self.conflicts.push((first, i as u32));
            }
            return Ok(());
        }
        // A new version of a known key: the greater one becomes the head.
        let pushed = if v > head_version {
            let old = head.row;
            self.others.push(Other { row: old, next: head.next() });
            head.row = i as u32;
            (old, head_version)
        } else {
            self.others.push(Other { row: i as u32, next: head.next() });
            (i as u32, v)
        };
        head.set_next((self.others.len() - 1) as u32);
        if long {
            self.long_chains.add(h, pushed.1, pushed.0);
        }
        Ok(())
    }
}

/// Cleans one partition's rows: exact duplicates dropped, conflicts found, latest version per
/// key kept, tombstoned keys left out. With `id.threads > 1` the keys are split among threads
/// by hash; the result is the same.
pub fn prepare(table: Table, id: &Identity) -> Result<Prepared, PartitionError> {
    let n = table.num_rows();
    let internal = |m: String| PartitionError::Other(format!("prepare: {m}"));
    let missing = |column: &String, what: &str| {
        PartitionError::Input(InputError::bad(
            Location { object: table.objects().join(", "), row: None, line: None, column: Some(column.clone()) },
            what,
        ))
    };
    for k in &id.key {
        if table.column(k).is_none() {
            return Err(missing(k, "missing key column"));
        }
    }
    // The first row, in input order, with a null in a key column (as a spilled date finds it).
    let null_key = id.key.iter().filter_map(|k| Some((table.first_null(k)?, k))).min();
    if let Some((i, k)) = null_key.filter(|_| !id.whole_record) {
        return Err(InputError::bad(table.locate(i, Some(k)), NULL_KEY).into());
    }
    let key_cols = table.columns(&id.key).unwrap_or_default();
    let versions: Option<Vec<ScalarBuffer<i64>>> = match &id.version {
        None => None,
        Some(v) => {
            let chunks = table.column(v).ok_or_else(|| missing(v, "missing version column"))?;
            if let Some(i) = table.first_null(v) {
                return Err(
                    InputError::bad(table.locate(i, Some(v)), "the version is null; every row needs one").into()
                );
            }
            for (c, a) in chunks.iter().enumerate() {
                if let Some(i) = version_past_int64(a) {
                    let row = (c << crate::read::CHUNK_BITS) + i;
                    return Err(InputError::bad(table.locate(row, Some(v)), version_too_large(a, i)).into());
                }
            }
            let values: Result<Vec<_>, _> = chunks.iter().map(version_values).collect();
            Some(values.map_err(|m| missing(v, &m))?)
        }
    };

    let keys = key_bytes(&key_cols).map_err(internal)?;
    // Row ids stay below 2^31 (`Table`); chain indices, below `NONE`.
    if n >= NONE as usize || table.id_bound() > NONE as usize {
        return Err(internal(format!("{n} rows in one partition; at most {} are supported", NONE - 1)));
    }
    // Small partitions are not worth a thread.
    let shards = if n < 65_536 { 1 } else { id.threads.clamp(1, 64) };
    let hasher = key_hasher();
    let mut shards: Vec<Shard> = with_keys!(&keys, |k| {
        let input = Input { table: &table, keys: k, versions: versions.as_deref(), hasher: hasher.clone() };
        input.hash_pass(shards, id.key_hashes)
    })
    .map_err(internal)?;
    let version = |row: u32| {
        let (c, i) = split_id(row as usize);
        versions.as_ref().map_or(0, |v| v[c][i])
    };

    // Conflicts: the first five keys by (key, version), with both rows' places.
    let conflicting_keys: usize = shards.iter().map(|s| s.heads.iter().filter(|h| h.conflicted()).count()).sum();
    if conflicting_keys > 0 && id.on_conflict == OnConflict::Fail {
        let mut named: Vec<(String, i64, u32, u32)> = shards
            .iter()
            .flat_map(|s| &s.conflicts)
            .map(|&(a, b)| (render_id(&key_cols, a as usize), version(a), a, b))
            .collect();
        named.sort();
        named.dedup_by(|x, y| x.0 == y.0);
        let version_type = id.version.as_ref().and_then(|v| table.column(v)?.first().map(|a| a.data_type().clone()));
        let keys = named
            .into_iter()
            .take(5)
            .map(|(key, v, a, b)| ConflictKey {
                key,
                version: version_type.as_ref().map(|t| show_version(t, v)),
                at: vec![table.locate(a as usize, None), table.locate(b as usize, None)],
            })
            .collect();
        return Err(PartitionError::Conflict { keys, total: conflicting_keys });
    }

    if let (Some(v), Some(values)) = (&id.version, &versions) {
        if let Some(ty) = table.column(v).and_then(|c| c.first().map(|a| a.data_type().clone())) {
            unordered_versions(&table, &shards, values, &ty, id.tz, &key_cols, v)?;
        }
    }

    // Under `on_conflict = "quarantine"`: each version of a key with a conflict is set aside, and
    // the key keeps its newest version without one.
    let named = id.set_aside.as_deref().filter(|n| !n.is_empty() && id.on_conflict == OnConflict::Quarantine);
    let aside = if conflicting_keys > 0 || named.is_some() {
        set_aside(&mut shards, &keys, named, &version)
    } else {
        HashMap::new()
    };
    let mut quarantined = Vec::new();
    if !aside.is_empty() {
        for i in table.ids() {
            let k = keys.get(i);
            let h = hasher.hash_one(k);
            let shard = &shards[if shards.len() > 1 { shard_of(h, shards.len()) } else { 0 }];
            let found = shard.heads.find(table_hash(h), |e| keys.get(e.row as usize) == k);
            if found.and_then(|e| aside.get(&e.row)).is_some_and(|a| a.versions.contains(&version(i as u32))) {
                quarantined.push(i as u32);
            }
        }
    }

    // The winners in row order, by a bitmap rather than a sort.
    let bound = table.id_bound();
    let mut is_winner = arrow::array::BooleanBufferBuilder::new(bound);
    is_winner.append_n(bound, false);
    for h in shards.iter().flat_map(|s| s.heads.iter()) {
        let row = if h.conflicted() { aside.get(&h.row).and_then(|a| a.winner) } else { Some(h.row) };
        if let Some(row) = row {
            is_winner.set_bit(row as usize, true);
        }
    }
    let is_winner = is_winner.finish();
    let mut winners: Vec<u32> = is_winner.set_indices().map(|i| i as u32).collect();
    let mut deleted = 0u64;
    if let Some(del) = &id.deleted {
        let chunks = table
            .column(&del.column)
            .ok_or_else(|| missing(&del.column, "missing tombstone column of [identity] deleted"))?;
        let masks: Vec<_> = chunks
            .iter()
            .map(|a| predicate::Equals::rows(a, &del.equals, id.tz))
            .collect::<Result<_, _>>()
            .map_err(|m| missing(&del.column, &format!("[identity] deleted: {m}")))?;
        let is_delete = |r: u32| {
            let (c, i) = split_id(r as usize);
            masks[c].value(i)
        };
        deleted = winners.iter().filter(|&&r| is_delete(r)).count() as u64;
        if !id.keep_deletes {
            winners.retain(|&r| !is_delete(r));
        }
    }
    let superseded = shards.iter().map(|s| s.others.len() as u64).sum::<u64>()
        - aside.values().map(|a| (a.versions.len() + usize::from(a.winner.is_some()) - 1) as u64).sum::<u64>();
    // Each row is set aside, a version kept (the winner or superseded), or a duplicate of one: a
    // repeat of a row at a version set aside is counted as set aside, whatever the row order.
    let kept_versions = superseded + shards.iter().map(|s| s.heads.len() as u64).sum::<u64>()
        - aside.values().filter(|a| a.winner.is_none()).count() as u64;
    let stats = PrepareStats {
        input_rows: n as u64,
        duplicates: if aside.is_empty() {
            shards.iter().map(|s| s.duplicates).sum()
        } else {
            n as u64 - quarantined.len() as u64 - kept_versions
        },
        superseded,
        deleted,
        conflicting_keys: aside.len() as u64,
        quarantined_rows: quarantined.len() as u64,
        keys: winners.len() as u64,
    };
    // Shards split the hash range in order: their sorted hashes, one after another, are sorted.
    let key_hashes = if shards.len() == 1 {
        let mut h = shards.into_iter().next().map(|s| s.key_hashes).unwrap_or_default();
        h.shrink_to_fit(); // kept until the end of the run
        h
    } else {
        shards.iter().flat_map(|s| s.key_hashes.iter().copied()).collect()
    };
    drop(keys);
    Ok(Prepared { table, winners, quarantined, stats, key_hashes })
}

/// A key with versions set aside: the versions, and its winner (its newest other version).
struct Aside {
    versions: Vec<i64>,
    winner: Option<u32>,
}

/// Marks every key with a version set aside — a conflict of this partition, or a version named
/// by the caller — and finds its newest other version; by the key's head row.
fn set_aside(
    shards: &mut [Shard],
    keys: &KeyBytes<'_>,
    named: Option<&HashMap<Vec<u8>, Vec<i64>>>,
    version: &dyn Fn(u32) -> i64,
) -> HashMap<u32, Aside> {
    let mut out = HashMap::new();
    for s in shards {
        let Shard { heads, others, conflicts, .. } = s;
        // A conflict's first row is the one its key's chain holds for that version.
        let conflicted: HashSet<u32> = conflicts.iter().map(|&(first, _)| first).collect();
        for h in heads.iter_mut() {
            let given = named.and_then(|n| n.get(keys.get(h.row as usize)));
            if !h.conflicted() && given.is_none() {
                continue;
            }
            // The chain holds one row per version of the key.
            let mut rows = vec![h.row];
            let mut cur = h.next();
            while cur != NONE {
                rows.push(others[cur as usize].row);
                cur = others[cur as usize].next;
            }
            let is_aside = |r: u32| conflicted.contains(&r) || given.is_some_and(|g| g.contains(&version(r)));
            let versions: Vec<i64> = rows.iter().filter(|&&r| is_aside(r)).map(|&r| version(r)).collect();
            if versions.is_empty() {
                continue;
            }
            h.link |= CONFLICTED;
            let winner = rows.iter().copied().filter(|&r| !is_aside(r)).max_by_key(|&r| version(r));
            out.insert(h.row, Aside { versions, winner });
        }
    }
    out
}

/// Fails the partition when a key's latest version cannot be told: a zone-less (wall-clock)
/// timestamp version, and another version of the key, both in the hour the job's zone repeats
/// when its clocks go back. `01:40` may be the first pass of that hour and `01:10` the second,
/// so which is later is not in the values.
fn unordered_versions(
    table: &Table,
    shards: &[Shard],
    values: &[ScalarBuffer<i64>],
    ty: &DataType,
    tz: chrono_tz::Tz,
    key_cols: &[Vec<ArrayRef>],
    column: &str,
) -> Result<(), PartitionError> {
    let unordered = Unordered::new(ty, tz, values.iter().flat_map(|v| v.iter()));
    if unordered.0.is_empty() {
        return Ok(());
    }
    let version = |row: u32| {
        let (c, i) = split_id(row as usize);
        values[c][i]
    };
    let mut found: Vec<(String, u32, u32)> = Vec::new();
    let mut total = 0usize;
    for s in shards {
        for h in s.heads.iter() {
            let v = version(h.row);
            if !unordered.holds(v) {
                continue;
            }
            let mut cur = h.next();
            while cur != NONE {
                let o = &s.others[cur as usize];
                if unordered.apart(v, version(o.row)) {
                    total += 1;
                    found.push((render_id(key_cols, h.row as usize), h.row, o.row));
                    break;
                }
                cur = o.next;
            }
        }
    }
    let Some((key, a, b)) = found.into_iter().min() else { return Ok(()) };
    Err(InputError::bad(
        table.locate(a as usize, Some(column)),
        format!(
            "{total} key(s) have versions whose order is unknown; first: key {key}, versions {} and {} (the other at {}), \
             both {}",
            show_version(ty, version(a)),
            show_version(ty, version(b)),
            table.locate(b as usize, Some(column)),
            unordered_reason(tz),
        ),
    )
    .into())
}

/// The wall-clock ranges `[start, end)` that `tz` repeats when its clocks go back, as zone-less
/// timestamps in `unit` hold them, on the wall-clock `days` (days since the epoch, sorted).
pub(crate) fn repeated_hours(tz: chrono_tz::Tz, unit: arrow::datatypes::TimeUnit, days: &[i64]) -> Vec<(i64, i64)> {
    use chrono::{Offset, TimeZone};
    const DAY: i64 = 86_400;
    let per_second = crate::read::per_second(unit);
    let offset = |t: i64| {
        chrono::DateTime::from_timestamp(t, 0)
            .map(|t| tz.offset_from_utc_datetime(&t.naive_utc()).fix().local_minus_utc() as i64)
    };
    let mut out = Vec::new();
    let mut scanned = i64::MIN;
    for &d in days {
        // The UTC days around a wall-clock day hold its transitions, whatever the zone's offset.
        for day in d.saturating_sub(1).max(scanned.saturating_add(1))..=d.saturating_add(1) {
            scanned = day;
            let (start, end) = (day.saturating_mul(DAY), day.saturating_add(1).saturating_mul(DAY));
            let (Some(before), Some(after)) = (offset(start), offset(end)) else { continue };
            if after >= before {
                continue;
            }
            // The instant the clocks go back, to the second.
            let (mut a, mut b) = (start, end);
            while b - a > 1 {
                let mid = a + (b - a) / 2;
                if offset(mid) == Some(before) {
                    a = mid
                } else {
                    b = mid
                }
            }
            let scale = |secs: i64| secs.checked_mul(per_second);
            if let (Some(from), Some(to)) = (scale(b + after), scale(b + before)) {
                out.push((from, to));
            }
        }
    }
    out
}

/// Why two wall-clock versions in a repeated hour of `tz` cannot be ordered, and the fix.
pub(crate) fn unordered_reason(tz: chrono_tz::Tz) -> String {
    format!(
        "wall-clock times in the hour {tz} repeats when its clocks go back, so either may be the later. Write the \
         version with its UTC offset and declare it `timestamp` (an instant)"
    )
}

/// A version (as int64) shown in its column's type.
pub(crate) fn show_version(ty: &DataType, v: i64) -> String {
    let a = arrow::array::Int64Array::from(vec![v]);
    arrow::compute::cast(&a, ty).map(|c| show_value(c.as_ref(), 0)).unwrap_or_else(|_| v.to_string())
}

/// The hours a zone-less timestamp version cannot be ordered in ([`repeated_hours`]): empty
/// unless the version is wall-clock time in a zone that puts its clocks back.
pub(crate) struct Unordered(Vec<(i64, i64)>);

impl Unordered {
    /// For versions of type `ty` in the job's zone `tz`, over the values `all`.
    pub(crate) fn new<'a>(ty: &DataType, tz: chrono_tz::Tz, all: impl Iterator<Item = &'a i64>) -> Self {
        let DataType::Timestamp(unit, None) = ty else { return Unordered(Vec::new()) };
        // The wall-clock days the versions fall on (rows of one day come together).
        let per_day = 86_400 * crate::read::per_second(*unit);
        let mut days: Vec<i64> = Vec::new();
        for &v in all {
            let d = v.div_euclid(per_day);
            if days.last() != Some(&d) {
                days.push(d);
            }
        }
        days.sort_unstable();
        days.dedup();
        Unordered(repeated_hours(tz, *unit, &days))
    }

    /// Two different versions in the same repeated hour: which is later is not in the values.
    pub(crate) fn apart(&self, a: i64, b: i64) -> bool {
        a != b && self.0.iter().any(|&(x, y)| (x..y).contains(&a) && (x..y).contains(&b))
    }

    /// Whether `v` is in a repeated hour.
    pub(crate) fn holds(&self, v: i64) -> bool {
        self.0.iter().any(|&(x, y)| (x..y).contains(&v))
    }
}

/// Sorts 64-bit hashes by their bytes, least significant first: the counts of all eight bytes
/// in one pass, then one scatter per byte (none for a byte every value shares). Several times
/// faster than a comparison sort on a million uniformly spread values.
fn radix_sort(v: &mut Vec<u64>) {
    if v.len() < 4096 {
        v.sort_unstable();
        return;
    }
    let mut counts = [[0usize; 256]; 8];
    for &x in v.iter() {
        for (byte, c) in counts.iter_mut().enumerate() {
            c[((x >> (byte * 8)) & 0xff) as usize] += 1;
        }
    }
    let mut buf = vec![0u64; v.len()];
    for (byte, c) in counts.iter().enumerate() {
        if c.contains(&v.len()) {
            continue;
        }
        let shift = byte * 8;
        let mut offsets = [0usize; 256];
        let mut sum = 0;
        for (o, &n) in offsets.iter_mut().zip(c) {
            *o = sum;
            sum += n;
        }
        for &x in v.iter() {
            let b = ((x >> shift) & 0xff) as usize;
            buf[offsets[b]] = x;
            offsets[b] += 1;
        }
        std::mem::swap(v, &mut buf);
    }
}

/// The sorted hashes of every key of `table`, as a prepared date gives them: a date this run
/// does not compute, for the check that no key is under two dates.
pub fn all_key_hashes(table: &Table, id: &Identity) -> Vec<u64> {
    let (Some(cols), hasher) = (table.columns(&id.key), key_hasher()) else { return Vec::new() };
    let Ok(keys) = key_bytes(&cols) else { return Vec::new() };
    let mut out: Vec<u64> = table.ids().map(|i| hasher.hash_one(keys.get(i))).collect();
    radix_sort(&mut out);
    out.dedup();
    out
}

/// The rendered keys of `table` whose hash is in `hashes` (sorted), with the row where each
/// first occurs: names the keys behind a cross-date hash match, and rules out hash collisions.
pub fn keys_with_hashes(table: &Table, id: &Identity, hashes: &[u64]) -> Vec<(Vec<u8>, String, usize)> {
    let Some(cols) = table.columns(&id.key) else {
        return Vec::new();
    };
    let Ok(keys) = key_bytes(&cols) else {
        return Vec::new();
    };
    let hasher = key_hasher();
    let mut out: Vec<(Vec<u8>, String, usize)> = Vec::new();
    // Keys already taken: every key of a date can be under another date too.
    let mut taken = hashbrown::HashSet::new();
    for i in table.ids() {
        let k = keys.get(i);
        if hashes.binary_search(&hasher.hash_one(k)).is_ok() && taken.insert(k) {
            out.push((k.to_vec(), render_id(&cols, i), i));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};
    use std::collections::HashMap;

    /// A piece of rows `id` (key), `v` (version), `x` (payload) from object `object`.
    fn piece(object: &str, keys: &[String], versions: &[i64], payload: &[i64]) -> crate::read::Piece {
        let batch = arrow::array::RecordBatch::try_from_iter([
            ("id", Arc::new(arrow::array::StringArray::from(keys.to_vec())) as ArrayRef),
            ("v", Arc::new(arrow::array::Int64Array::from(versions.to_vec())) as ArrayRef),
            ("x", Arc::new(arrow::array::Int64Array::from(payload.to_vec())) as ArrayRef),
        ])
        .unwrap();
        crate::read::Piece {
            date: chrono::NaiveDate::from_ymd_opt(2026, 11, 1).unwrap(),
            batch,
            object: object.into(),
            object_rows: crate::read::ObjectRows::Run(0..keys.len() as u64),
            lines: None,
        }
    }

    /// A table of one piece of rows `id`, `v`, `x` (see [`piece`]).
    fn table(keys: &[String], versions: &[i64], payload: &[i64]) -> Table {
        let piece = piece("in", keys, versions, payload);
        Table::from_pieces(piece.batch.schema(), vec![piece]).unwrap()
    }

    /// Key `id`, version `v`, conflicts fail, one thread.
    fn identity() -> Identity {
        Identity {
            key: vec!["id".into()],
            version: Some("v".into()),
            deleted: None,
            on_conflict: OnConflict::Fail,
            keep_deletes: false,
            key_hashes: true,
            threads: 1,
            tz: chrono_tz::UTC,
            whole_record: false,
            set_aside: None,
        }
    }

    /// What prepare must give, by a plain model: each key's first row of its greatest version
    /// wins, a repeat of key and version is a duplicate.
    struct Model {
        winners: Vec<usize>,
        duplicates: usize,
        superseded: usize,
    }

    fn model(keys: &[String], versions: &[i64]) -> Model {
        let mut first: HashMap<(&str, i64), usize> = HashMap::new();
        for (i, k) in keys.iter().enumerate() {
            first.entry((k.as_str(), versions[i])).or_insert(i);
        }
        let mut best: HashMap<&str, (i64, usize)> = HashMap::new();
        for (&(k, v), &i) in &first {
            let b = best.entry(k).or_insert((v, i));
            if v > b.0 {
                *b = (v, i);
            }
        }
        let mut winners: Vec<usize> = best.values().map(|b| b.1).collect();
        winners.sort_unstable();
        Model { winners, duplicates: keys.len() - first.len(), superseded: first.len() - best.len() }
    }

    /// Prepare's result against the model's, on `threads` threads.
    fn check(p: &Prepared, want: &Model, threads: usize) {
        let got: Vec<usize> = p.winners.iter().map(|&w| p.table.dense(w as usize)).collect();
        assert_eq!(got, want.winners, "{threads} threads: winners");
        assert_eq!(p.stats.superseded as usize, want.superseded, "{threads} threads: superseded");
        assert_eq!(p.stats.duplicates as usize, want.duplicates, "{threads} threads: duplicates");
    }

    /// Keys seen in tens of thousands of versions, in random order with repeats (their chains
    /// indexed): the model's winners and counts on one thread and on two, and a conflict deep
    /// in a chain still found.
    #[test]
    fn many_versions_of_a_key_agree_with_a_model() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
        let n = 140_000;
        let keys: Vec<String> = (0..n).map(|_| format!("k{}", rng.random_range(0..3))).collect();
        let versions: Vec<i64> = (0..n).map(|_| rng.random_range(0..50_000)).collect();
        let id = identity();
        let want = model(&keys, &versions);
        let payload = vec![0i64; n];
        for threads in [1, 2] {
            let p = prepare(table(&keys, &versions, &payload), &Identity { threads, ..id.clone() }).unwrap();
            check(&p, &want, threads);
        }
        // The same key and an early version again, with another payload, at the end.
        let (mut keys, mut versions, mut payload) = (keys.clone(), versions.clone(), payload);
        let (k, v) = (keys[10].clone(), versions[10]);
        keys.push(k.clone());
        versions.push(v);
        payload.push(1);
        match prepare(table(&keys, &versions, &payload), &id) {
            Err(PartitionError::Conflict { keys: named, total }) => {
                assert_eq!(total, 1);
                assert_eq!(named[0].key, k);
                assert_eq!(named[0].version.as_deref(), Some(v.to_string().as_str()));
            }
            other => panic!("a conflict was expected: {other:?}"),
        }
    }

    /// Many keys over chunks of every size, some shorter than the hash pass looks ahead: the
    /// winners, counts and key hashes of a model, on one, two and three threads.
    #[test]
    fn chunks_of_every_size_agree_with_a_model() {
        use std::collections::HashSet;
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        // Small pieces are put together into one chunk unless a large one follows; a large
        // one past a chunk's rows is cut.
        let sizes = [5usize, 70_000, 3, 131_079, 20, 1, 70_000, 8, 70_000, 16, 70_000, 17, 70_000];
        let n: usize = sizes.iter().sum();
        let keys: Vec<String> = (0..n).map(|_| format!("order-{}", rng.random_range(0..90_000))).collect();
        let versions: Vec<i64> = (0..n).map(|_| rng.random_range(0..4)).collect();
        // The payload follows from key and version: a repeat of both is an exact duplicate.
        let payload: Vec<i64> =
            keys.iter().zip(&versions).map(|(k, v)| k.len() as i64 * 31 + v * 7 + k.as_bytes()[6] as i64).collect();
        let mut pieces = Vec::new();
        let mut at = 0;
        for (p, &len) in sizes.iter().enumerate() {
            let r = at..at + len;
            pieces.push(piece(&format!("in-{p}"), &keys[r.clone()], &versions[r.clone()], &payload[r]));
            at += len;
        }
        let schema = pieces[0].batch.schema();
        let id = identity();
        let want = model(&keys, &versions);
        let mut want_hashes: Vec<u64> = keys
            .iter()
            .map(String::as_str)
            .collect::<HashSet<_>>()
            .iter()
            .map(|k| key_hasher().hash_one(k.as_bytes()))
            .collect();
        want_hashes.sort_unstable();
        // Threads past the chunks: runs with nothing to list.
        for threads in [1, 2, 3, 8, 64] {
            let table = crate::read::Table::from_pieces(schema.clone(), pieces.clone()).unwrap();
            let chunk_rows: Vec<usize> = table.chunks().iter().map(|b| b.num_rows()).collect();
            for short in [3, 5, 8, 16, 17] {
                assert!(chunk_rows.contains(&short), "{chunk_rows:?}");
            }
            let p = prepare(table, &Identity { threads, ..id.clone() }).unwrap();
            check(&p, &want, threads);
            assert_eq!(p.key_hashes, want_hashes, "{threads} threads: key hashes");
        }
        // A row of the first chunk repeated with another payload in a last chunk of one row: a
        // conflict, found by the thread that owns the key, whichever thread listed the two rows.
        let (k, v) = (keys[2].clone(), versions[2]);
        pieces.push(piece("conflict", std::slice::from_ref(&k), &[v], &[payload[2] + 1]));
        for threads in [1, 2, 3, 8] {
            let table = crate::read::Table::from_pieces(schema.clone(), pieces.clone()).unwrap();
            match prepare(table, &Identity { threads, ..id.clone() }) {
                Err(PartitionError::Conflict { keys: named, total }) => {
                    assert_eq!((total, named[0].key.as_str()), (1, k.as_str()), "{threads} threads");
                }
                other => panic!("{threads} threads: a conflict was expected: {other:?}"),
            }
        }
    }

    /// Under `on_conflict = "quarantine"`, conflicts at random versions of random keys, and
    /// versions named by the caller: each version in conflict is set aside whole, and the key
    /// keeps its newest other version — as a plain model says, on one, two and three threads.
    #[test]
    fn quarantine_keeps_each_keys_newest_version_without_a_conflict() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(11);
        let n = 100_000;
        let keys: Vec<String> = (0..n).map(|_| format!("k{}", rng.random_range(0..20_000))).collect();
        let versions: Vec<i64> = (0..n).map(|_| rng.random_range(0..6)).collect();
        // The payload follows from key and version, except for a few rows: conflicts.
        let payload: Vec<i64> = (0..n)
            .map(|i| if rng.random_bool(0.01) { -(i as i64) } else { keys[i].len() as i64 * 10 + versions[i] })
            .collect();
        let named: HashMap<Vec<u8>, Vec<i64>> =
            (0..200).map(|k| (format!("k{}", k * 7).into_bytes(), vec![rng.random_range(0..6)])).collect();
        // The model.
        let mut records: HashMap<(&str, i64), HashSet<i64>> = HashMap::new();
        for i in 0..n {
            records.entry((keys[i].as_str(), versions[i])).or_default().insert(payload[i]);
        }
        let aside =
            |k: &str, v: i64| records[&(k, v)].len() > 1 || named.get(k.as_bytes()).is_some_and(|vs| vs.contains(&v));
        let mut best: HashMap<&str, (i64, usize)> = HashMap::new();
        for i in 0..n {
            let (k, v) = (keys[i].as_str(), versions[i]);
            if !aside(k, v) && best.get(k).is_none_or(|b| v > b.0) {
                best.insert(k, (v, i));
            }
        }
        let mut want_winners: Vec<usize> = best.values().map(|b| b.1).collect();
        want_winners.sort_unstable();
        let want_quarantined: Vec<usize> = (0..n).filter(|&i| aside(&keys[i], versions[i])).collect();
        let conflicting: HashSet<&str> =
            (0..n).filter(|&i| aside(&keys[i], versions[i])).map(|i| keys[i].as_str()).collect();
        assert!(want_quarantined.len() > 1_000 && best.len() > 15_000, "the data has conflicts and winners");
        let id =
            Identity { on_conflict: OnConflict::Quarantine, set_aside: Some(Arc::new(named.clone())), ..identity() };
        for threads in [1, 2, 3] {
            let p = prepare(table(&keys, &versions, &payload), &Identity { threads, ..id.clone() }).unwrap();
            let dense = |rows: &[u32]| rows.iter().map(|&w| p.table.dense(w as usize)).collect::<Vec<_>>();
            assert_eq!(dense(&p.winners), want_winners, "{threads} threads: winners");
            assert_eq!(dense(&p.quarantined), want_quarantined, "{threads} threads: quarantined");
            assert_eq!(p.stats.conflicting_keys as usize, conflicting.len(), "{threads} threads");
            let distinct = records.len();
            let aside_versions = records.keys().filter(|(k, v)| aside(k, *v)).count();
            assert_eq!(p.stats.superseded as usize, distinct - aside_versions - best.len(), "{threads} threads");
            assert_eq!(
                p.stats.duplicates as usize,
                n - want_quarantined.len() - (distinct - aside_versions),
                "{threads} threads: duplicates (rows of a kept version but its first)"
            );
        }
    }

    #[test]
    fn a_time_past_the_calendar_is_shown_as_its_count() {
        use arrow::array::{TimestampMillisecondArray, TimestampSecondArray};
        let s = TimestampSecondArray::from(vec![Some(9_300_000_000_000_000), Some(0), None]).with_timezone("UTC");
        assert_eq!(show_value(&s, 0), "9300000000000000 (seconds since 1970)");
        assert_eq!(show_value(&s, 1), "1970-01-01T00:00:00Z");
        assert_eq!(show_value(&s, 2), "null");
        let ms: ArrayRef = Arc::new(TimestampMillisecondArray::from(vec![i64::MAX]));
        assert_eq!(
            render_key(&[ms.clone(), ms], 0),
            format!("{0} (milliseconds since 1970)|{0} (milliseconds since 1970)", i64::MAX)
        );
        assert_eq!(
            show_version(&DataType::Timestamp(arrow::datatypes::TimeUnit::Second, None), i64::MAX),
            format!("{} (seconds since 1970)", i64::MAX)
        );
    }

    #[test]
    fn radix_sort_sorts() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(1);
        for n in [0, 1, 100, 5000, 100_000] {
            let mut v: Vec<u64> = (0..n).map(|_| rng.random()).collect();
            v.extend([0, u64::MAX, 7, 7]);
            let mut want = v.clone();
            want.sort_unstable();
            radix_sort(&mut v);
            assert_eq!(v, want);
        }
        // Bytes every value shares (a shard's top bits) are skipped, the order still total:
        // six passes, seven, none.
        for (mask, set) in [(0x00ff_ffff_ffff_ff00, 0x4200_0000_0000_0011), (0x00ff_ffff_ffff_ffff, 1 << 63), (0, 7)] {
            let mut v: Vec<u64> = (0..50_000).map(|_| rng.random::<u64>() & mask | set).collect();
            let mut want = v.clone();
            want.sort_unstable();
            radix_sort(&mut v);
            assert_eq!(v, want);
        }
    }
}
