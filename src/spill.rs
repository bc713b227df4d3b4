//! The memory budget of a run, and spilling past it (docs/design.md §8).
//!
//! A run has one budget (`--memory-limit`): partitions reserve their estimated size from it
//! before they start, so fewer run at once when they are large. A partition estimated larger
//! than the budget is *spilled*: its rows are split by a hash of their key into buckets
//! written to local disk (Arrow IPC, LZ4), each bucket is prepared on its own — every
//! version of a key falls in one bucket, so duplicates, conflicts, the latest version and
//! deletes stay exact — and the winners of all buckets are merged back into their input order
//! on their way into the engine, so the engine sees exactly the rows, in exactly the order,
//! of the in-memory path: the same bytes come out.
//!
//! Spill files live in one folder per run, `<spill dir>/lakeswap-<run id>/`, removed when the
//! run ends on any path that unwinds; `gc` removes the folder of a run that was killed.
//! Nothing of a spill is ever written under the table or its state.

use std::collections::BinaryHeap;
use std::fs::File;
use std::hash::BuildHasher;
use std::io::{BufReader, BufWriter};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, RecordBatch, UInt32Array, UInt64Array};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, UInt64Type};
use arrow::ipc::writer::StreamWriter;
use arrow::row::{RowConverter, SortField};

use crate::error::PartitionError;
use tokio::sync::OwnedSemaphorePermit;

/// A spill folder's name starts so; the run id follows.
pub const PREFIX: &str = "lakeswap-";
/// The file in a run's spill folder naming the table's state location (for `gc`).
const OWNER: &str = "table";
/// The file a live run holds locked in its spill folder: `gc` leaves the folder alone while
/// it is locked (the kernel drops the lock when the process dies, however it dies).
const LOCK: &str = "lock";
/// Budget permits are counted in these units.
const UNIT: u64 = 1 << 20;

/// The hidden columns of a spill file: the row's place in the date's input order, its object,
/// its row in the object, and its line (text objects).
pub const SEQ: &str = "__lakeswap_seq";
const OBJECT: &str = "__lakeswap_object";
const ROW: &str = "__lakeswap_row";
const LINE: &str = "__lakeswap_line";

/// Parses a memory size: `512MiB`, `4GiB`, `1GB`, `800M`, `1073741824`, or `60%` of `machine`.
pub fn parse_size(text: &str, machine: u64) -> Result<u64, String> {
    let t = text.trim();
    if t.is_empty() {
        return Err("empty; write a size (e.g. 512MiB, 4GiB, 2GB or 60% of this machine's memory), or leave it \
                    out for the default (half of this machine's memory)"
            .into());
    }
    let bad =
        || format!("`{text}` is not a memory size; write e.g. 512MiB, 4GiB, 2GB or 60% (of this machine's memory)");
    if let Some(p) = t.strip_suffix('%') {
        let p: f64 = p.trim().parse().map_err(|_| bad())?;
        if !(p > 0.0 && p <= 100.0) {
            return Err(format!("`{text}`: a share of memory is more than 0% and at most 100%"));
        }
        let bytes = (machine as f64 * p / 100.0) as u64;
        if bytes < UNIT {
            return Err(format!("`{text}` of this machine's memory is below the smallest memory limit, 1MiB"));
        }
        return Ok(bytes);
    }
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: f64 = num.parse().map_err(|_| bad())?;
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" => 1000,
        "kib" => 1 << 10,
        "m" | "mb" => 1000 * 1000,
        "mib" => 1 << 20,
        "g" | "gb" => 1000 * 1000 * 1000,
        "gib" => 1 << 30,
        "t" | "tb" => 1000u64.pow(4),
        "tib" => 1 << 40,
        _ => return Err(bad()),
    };
    let exact = n * mult as f64;
    if exact >= u64::MAX as f64 {
        return Err(format!(
            "`{text}` is more bytes than lakeswap can count; write the limit in GiB or TiB, or a share such as 100%"
        ));
    }
    let bytes = exact as u64;
    if bytes < UNIT {
        return Err(format!("`{text}` is below the smallest memory limit, 1MiB"));
    }
    Ok(bytes)
}

/// The memory this process may use: the machine's, or its control group's limit when lower.
pub fn machine_memory() -> u64 {
    let total = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|k| k.parse::<u64>().ok()))
        })
        .map_or(8 << 30, |kib| kib * 1024);
    let cgroup = ["/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"]
        .iter()
        .find_map(|p| std::fs::read_to_string(p).ok().and_then(|s| s.trim().parse::<u64>().ok()));
    cgroup.map_or(total, |c| c.min(total))
}

/// The process's peak resident memory so far, in MiB (for the debug log; 0 when unknown).
pub fn peak_mib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with("VmHWM:")).and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        })
        .map_or(0, |kib| kib / 1024)
}

/// The default budget: half of [`machine_memory`], leaving the rest to the system and the
/// allocator's slack.
pub fn default_limit() -> u64 {
    machine_memory() / 2
}

/// A run's budget and spill folder. Dropped when the run ends: the folder goes with it.
#[derive(Debug)]
pub struct Area {
    root: PathBuf,
    table: String,
    limit: u64,
    permits: Arc<tokio::sync::Semaphore>,
    units: u64,
    /// Bytes kept in memory between partitions: see [`Area::may_hold`].
    held: std::sync::atomic::AtomicU64,
    made: std::sync::Mutex<Option<File>>,
}

impl Area {
    /// The area of run `run_id` of the table whose state is `table`, in `spill_dir`.
    pub fn new(spill_dir: &Path, run_id: &str, table: String, limit: u64) -> Self {
        let units = (limit / UNIT).clamp(1, tokio::sync::Semaphore::MAX_PERMITS as u64 / 2);
        Area {
            root: spill_dir.join(format!("{PREFIX}{run_id}")),
            table,
            limit,
            permits: Arc::new(tokio::sync::Semaphore::new(units as usize)),
            units,
            held: std::sync::atomic::AtomicU64::new(0),
            made: std::sync::Mutex::new(None),
        }
    }

    /// The budget, in bytes.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// Waits until `bytes` of the budget (at most all of it) are free, and holds them.
    pub async fn reserve(&self, bytes: u64) -> OwnedSemaphorePermit {
        let want = bytes.div_ceil(UNIT).clamp(1, self.units) as u32;
        self.permits.clone().acquire_many_owned(want).await.expect("the budget is never closed")
    }

    /// A meter for a date read in memory that holds `held` of the budget, and whose objects
    /// hold `stored` bytes.
    pub fn meter(&self, held: OwnedSemaphorePermit, stored: u64) -> Meter {
        Meter {
            permits: self.permits.clone(),
            units: self.units,
            limit: self.limit,
            stored,
            state: std::sync::Mutex::new(Metered { held: Some(held), decoded: 0, stored: 0 }),
            over: AtomicBool::new(false),
        }
    }

    /// A meter of its own, drawing nothing from the budget: over once what it counts passes
    /// `bytes` (at least one unit). For reading one object again whole to name its error
    /// within a part of the budget.
    pub fn meter_within(&self, bytes: u64, stored: u64) -> Meter {
        let units = (bytes / UNIT).clamp(1, u64::from(u32::MAX));
        let permits = Arc::new(tokio::sync::Semaphore::new(units as usize));
        let held = permits.clone().try_acquire_many_owned(0).expect("no permits asked of an open semaphore");
        Meter {
            permits,
            units,
            limit: self.limit,
            stored,
            state: std::sync::Mutex::new(Metered { held: Some(held), decoded: 0, stored: 0 }),
            over: AtomicBool::new(false),
        }
    }

    /// Whether `bytes` more may stay in memory until the run ends (a partition's key hashes,
    /// its computed file): yes while everything so kept stays within an eighth of the budget.
    /// Counted when the answer is yes.
    pub fn may_hold(&self, bytes: u64) -> bool {
        if self.held.fetch_add(bytes, Relaxed) + bytes <= self.limit / 8 {
            return true;
        }
        self.held.fetch_sub(bytes, Relaxed);
        false
    }

    /// A fresh folder for one partition's spill files (the run's folder made on first use).
    pub fn folder(&self, name: &str) -> Result<PathBuf, PartitionError> {
        let fail = |p: &Path, e: std::io::Error| PartitionError::Spill {
            path: p.display().to_string(),
            message: format!("cannot create the spill folder: {e}"),
        };
        // Made under the lock [`remove_all`] takes after closing: no folder is made again
        // once it has removed them.
        let mut live = LIVE.lock().unwrap_or_else(|e| e.into_inner());
        if CLOSED.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(fail(&self.root, std::io::Error::other("the process is exiting")));
        }
        {
            let mut made = self.made.lock().unwrap_or_else(|e| e.into_inner());
            if made.is_none() {
                // Locked before it names its table, so gc never takes it for a dead run's.
                std::fs::create_dir_all(&self.root).map_err(|e| fail(&self.root, e))?;
                let lock = File::create(self.root.join(LOCK)).map_err(|e| fail(&self.root, e))?;
                lock.lock().map_err(|e| fail(&self.root, e))?;
                std::fs::write(self.root.join(OWNER), &self.table).map_err(|e| fail(&self.root, e))?;
                *made = Some(lock);
                live.push(self.root.clone());
            }
        }
        let dir = self.root.join(name);
        std::fs::create_dir_all(&dir).map_err(|e| fail(&dir, e))?;
        Ok(dir)
    }

    /// Removes a partition's spill files once it is done with them.
    pub fn remove(&self, name: &str) {
        let _ = std::fs::remove_dir_all(self.root.join(name));
    }
}

impl Drop for Area {
    fn drop(&mut self) {
        if self.made.lock().unwrap_or_else(|e| e.into_inner()).is_some() {
            let _ = std::fs::remove_dir_all(&self.root);
            LIVE.lock().unwrap_or_else(|e| e.into_inner()).retain(|r| *r != self.root);
        }
    }
}

/// Memory a date read in memory takes per byte its rows decode to: the rows, and as much again
/// for what preparing, querying and encoding them hold at once (one date of the reference data
/// set peaks ~200 MiB above the process's own ~75 MiB, its rows counted at ~113 MiB).
const FOOTPRINT: u64 = 2;

/// Counts what a date's objects decode to while it is read in memory, so that a date whose
/// objects decode far larger than their estimate ([`estimate`]) is not read past the budget.
/// The date's reservation grows with what it decodes while the budget has room; when it has
/// none, the meter is over and the caller gives back what it holds before it waits for more
/// (no partition waits holding a part of the budget, so none waits on another forever).
pub struct Meter {
    permits: Arc<tokio::sync::Semaphore>,
    units: u64,
    limit: u64,
    /// The stored bytes of the date's objects.
    stored: u64,
    state: std::sync::Mutex<Metered>,
    over: AtomicBool,
}

struct Metered {
    held: Option<OwnedSemaphorePermit>,
    /// Bytes decoded so far, and the share of the objects' stored bytes they stand for.
    decoded: u64,
    stored: u64,
}

impl Meter {
    /// Counts `decoded` bytes more, standing for `stored` bytes of the objects; false once the
    /// date is over its budget (then for every later call too).
    pub fn add(&self, decoded: u64, stored: u64) -> bool {
        if self.over.load(Relaxed) {
            return false;
        }
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        s.decoded += decoded;
        s.stored += stored;
        let need = (s.decoded * FOOTPRINT).div_ceil(UNIT);
        let have = s.held.as_ref().map_or(0, |h| h.num_permits() as u64);
        if need <= have {
            return true;
        }
        // A quarter more than needed now: fewer, larger steps.
        let more = ((need + need / 4).min(self.units) - have) as u32;
        let grown = match need > self.units {
            true => None,
            false => self.permits.clone().try_acquire_many_owned(more).ok(),
        };
        match (grown, s.held.as_mut()) {
            (Some(p), Some(h)) => {
                h.merge(p);
                true
            }
            _ => {
                self.over.store(true, Relaxed);
                false
            }
        }
    }

    /// The decoded bytes of a part of an object: a sixty-fourth of the budget.
    pub fn part_bytes(&self) -> u64 {
        self.limit / 64
    }

    /// Whether the date went over its budget.
    pub fn is_over(&self) -> bool {
        self.over.load(Relaxed)
    }

    /// What the date is estimated to take in all, from what its objects decoded to so far.
    pub fn estimate(&self) -> u64 {
        let s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let per_stored = (s.decoded * FOOTPRINT) as f64 / s.stored.max(1) as f64;
        ((per_stored * self.stored as f64) as u64).max(s.decoded * FOOTPRINT)
    }

    /// The part of the budget the date holds (given back by the caller when it is spilled).
    pub fn held(&self) -> Option<OwnedSemaphorePermit> {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).held.take()
    }
}

/// The spill folders of this process's areas, for [`remove_all`].
static LIVE: std::sync::Mutex<Vec<PathBuf>> = std::sync::Mutex::new(Vec::new());

/// Removes every spill folder this process has made: for an exit that drops nothing (a second
/// signal). Files still being written are removed with their folder.
pub fn remove_all() {
    // No folder is made from here on; a file another thread creates in a folder while it is
    // being removed leaves it in place, so the removal is tried again.
    CLOSED.store(true, std::sync::atomic::Ordering::SeqCst);
    for root in LIVE.lock().unwrap_or_else(|e| e.into_inner()).drain(..) {
        for _ in 0..100 {
            if std::fs::remove_dir_all(&root).is_ok() || !root.exists() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }
}

/// Set once [`remove_all`] has run: the process is exiting, and no spill folder is made.
static CLOSED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// The spill folders in `spill_dir` of runs of the table whose state is `table` that no live
/// process holds (killed runs): run id, path.
pub fn abandoned(spill_dir: &Path, table: &str) -> Vec<(String, PathBuf)> {
    let Ok(entries) = std::fs::read_dir(spill_dir) else { return Vec::new() };
    let mut found: Vec<(String, PathBuf)> = entries
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().to_string();
            let run = name.strip_prefix(PREFIX)?.to_string();
            let owner = std::fs::read_to_string(e.path().join(OWNER)).ok()?;
            let lock = File::open(e.path().join(LOCK)).ok()?;
            let free = lock.try_lock().is_ok();
            (owner == table && free).then(|| (run, e.path()))
        })
        .collect();
    found.sort();
    found
}

/// The bucket of each row: a hash of its key columns (`cols`), fixed across runs and
/// independent of the hash prepare splits its threads by.
pub fn buckets_of(cols: &[ArrayRef], n: usize) -> Result<Vec<u32>, String> {
    let state = foldhash::fast::FixedState::with_seed(0x7370_696c_6c5f_6b65);
    let len = cols.first().map_or(0, |c| c.len());
    let of = |h: u64| ((h >> 32).wrapping_mul(n as u64) >> 32) as u32;
    if let [c] = cols {
        let text = match c.data_type() {
            DataType::Utf8 => Some(c.as_string::<i32>().iter().map(|v| of(state.hash_one(v))).collect()),
            DataType::LargeUtf8 => Some(c.as_string::<i64>().iter().map(|v| of(state.hash_one(v))).collect()),
            DataType::Utf8View => Some(c.as_string_view().iter().map(|v| of(state.hash_one(v))).collect()),
            _ => None,
        };
        if let Some(t) = text {
            return Ok(t);
        }
    }
    let fields = cols.iter().map(|c| SortField::new(c.data_type().clone())).collect();
    let conv = RowConverter::new(fields).map_err(|e| e.to_string())?;
    // One zero and one NaN, as prepare's keys: all versions of a key in one bucket.
    let cols: Vec<ArrayRef> = cols.iter().map(crate::prepare::one_zero_one_nan).collect();
    let rows = conv.convert_columns(&cols).map_err(|e| e.to_string())?;
    Ok((0..len).map(|i| of(state.hash_one(rows.row(i).as_ref()))).collect())
}

/// The schema of a spill file of rows of `record`.
pub fn spill_schema(record: &Schema) -> SchemaRef {
    let mut fields: Vec<Field> = record.fields().iter().map(|f| f.as_ref().clone()).collect();
    fields.push(Field::new(SEQ, DataType::UInt64, false));
    fields.push(Field::new(OBJECT, DataType::UInt32, false));
    fields.push(Field::new(ROW, DataType::UInt64, false));
    fields.push(Field::new(LINE, DataType::UInt64, true));
    Arc::new(Schema::new(fields))
}

/// Rows with their origin, as a spill file holds them.
pub fn with_origin(
    schema: &SchemaRef,
    batch: &RecordBatch,
    seq: u64,
    object: u32,
    rows: &crate::read::ObjectRows,
    lines: Option<&[u64]>,
) -> Result<RecordBatch, arrow::error::ArrowError> {
    let n = batch.num_rows();
    let mut cols = batch.columns().to_vec();
    cols.push(Arc::new(UInt64Array::from_iter_values(seq..seq + n as u64)));
    cols.push(Arc::new(UInt32Array::from_value(object, n)));
    cols.push(Arc::new(UInt64Array::from(rows.to_vec(0, n))));
    cols.push(match lines {
        Some(l) => Arc::new(UInt64Array::from(l.to_vec())),
        None => arrow::array::new_null_array(&DataType::UInt64, n),
    });
    RecordBatch::try_new(schema.clone(), cols)
}

/// A spilled batch split into its record columns and its origin: seq, object, rows, lines.
pub struct Origin {
    pub rows: RecordBatch,
    pub seq: Vec<u64>,
    pub object: Vec<u32>,
    pub object_rows: Vec<u64>,
    pub lines: Option<Vec<u64>>,
}

/// Splits a batch of a spill file.
pub fn split_origin(batch: &RecordBatch, record: &SchemaRef) -> Origin {
    let k = record.fields().len();
    let col = |i: usize| batch.column(k + i);
    let lines = col(3);
    Origin {
        rows: RecordBatch::try_new(record.clone(), batch.columns()[..k].to_vec()).expect("the spill's own schema"),
        seq: col(0).as_primitive::<UInt64Type>().values().to_vec(),
        object: col(1).as_primitive::<arrow::datatypes::UInt32Type>().values().to_vec(),
        object_rows: col(2).as_primitive::<UInt64Type>().values().to_vec(),
        lines: (lines.null_count() == 0).then(|| lines.as_primitive::<UInt64Type>().values().to_vec()),
    }
}

/// A spill file being written: batches gathered up to a size, then written compressed.
pub struct Writer {
    path: PathBuf,
    schema: SchemaRef,
    /// Encodes batches as IPC stream messages into memory, one message at a time.
    ipc: StreamWriter<Vec<u8>>,
    file: BufWriter<File>,
    /// Batches and rows written, for the end frame.
    batches: u64,
    rows: u64,
    pending: Vec<RecordBatch>,
    pending_rows: usize,
    /// Rows gathered before a write.
    pub flush_rows: usize,
}

fn io_error(path: &Path, e: impl std::fmt::Display) -> PartitionError {
    PartitionError::Spill { path: path.display().to_string(), message: e.to_string() }
}

/// A spill file is a sequence of frames: each Arrow IPC stream message (the schema first, then
/// one per batch) in a frame of its own, then an end frame. A frame's head is a kind byte
/// ([`RAW`], [`LZ4`] or [`END`]) and two u64 (little endian): for a message its length and the
/// length stored, for the end the batches and rows written. One LZ4 block per message, where
/// Arrow's own IPC compression makes one LZ4 frame per buffer: its decoder zero-fills a block
/// of up to 4 MiB for each buffer before decompressing into it, 7 % of a spilled date's CPU.
/// A file without its end, or with a frame that does not hold what its head says, is an error.
const RAW: u8 = 0;
const LZ4: u8 = 1;
const END: u8 = 2;
const FRAME_HEAD: usize = 17;

fn frame_head(kind: u8, a: u64, b: u64) -> [u8; FRAME_HEAD] {
    let mut head = [0u8; FRAME_HEAD];
    head[0] = kind;
    head[1..9].copy_from_slice(&a.to_le_bytes());
    head[9..].copy_from_slice(&b.to_le_bytes());
    head
}

impl Writer {
    pub fn create(path: PathBuf, schema: SchemaRef, flush_rows: usize) -> Result<Self, PartitionError> {
        let file = File::create(&path).map_err(|e| io_error(&path, e))?;
        let ipc = StreamWriter::try_new(Vec::new(), &schema).map_err(|e| io_error(&path, e))?;
        let mut w = Writer {
            path,
            schema,
            ipc,
            file: BufWriter::with_capacity(1 << 16, file),
            batches: 0,
            rows: 0,
            pending: Vec::new(),
            pending_rows: 0,
            flush_rows,
        };
        w.frame()?;
        Ok(w)
    }

    pub fn write(&mut self, batch: RecordBatch) -> Result<(), PartitionError> {
        if batch.num_rows() == 0 {
            return Ok(());
        }
        self.pending_rows += batch.num_rows();
        self.pending.push(batch);
        if self.pending_rows >= self.flush_rows {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<(), PartitionError> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let batch = arrow::compute::concat_batches(&self.schema, &self.pending).map_err(|e| io_error(&self.path, e))?;
        self.pending.clear();
        self.pending_rows = 0;
        // The message takes about the bytes of the batch's buffers: reserved at once, not grown.
        *self.ipc.get_mut() = Vec::with_capacity(batch.get_array_memory_size() + (1 << 12));
        self.ipc.write(&batch).map_err(|e| io_error(&self.path, e))?;
        self.batches += 1;
        self.rows += batch.num_rows() as u64;
        self.frame()
    }

    /// Writes the message the IPC writer holds as one frame; neither it nor its packed bytes
    /// are kept (a date spills into many files at once).
    fn frame(&mut self) -> Result<(), PartitionError> {
        let message = std::mem::take(self.ipc.get_mut());
        // Too small to gain, or not smaller packed: stored as it is.
        let packed = Some(message.len())
            .filter(|&n| n >= 256)
            .map(|_| lz4_flex::block::compress(&message))
            .filter(|p| p.len() < message.len());
        let (kind, stored) = match &packed {
            Some(p) => (LZ4, &p[..]),
            None => (RAW, &message[..]),
        };
        self.put(frame_head(kind, message.len() as u64, stored.len() as u64), stored)
    }

    /// Writes a frame, its bytes in pieces of the buffer's size: one write of megabytes into
    /// the page cache costs this kernel (6.18, ext4) many times what the same bytes cost in
    /// small writes.
    fn put(&mut self, head: [u8; FRAME_HEAD], bytes: &[u8]) -> Result<(), PartitionError> {
        use std::io::Write;
        std::iter::once(&head[..])
            .chain(bytes.chunks(1 << 16))
            .try_for_each(|piece| self.file.write_all(piece))
            .map_err(|e| io_error(&self.path, e))
    }

    /// Writes what is pending and closes the file; its size. Not synced: the file is read back
    /// by this run and removed, so a crash loses nothing it needs.
    pub fn finish(mut self) -> Result<(PathBuf, u64), PartitionError> {
        use std::io::Write;
        self.flush()?;
        self.put(frame_head(END, self.batches, self.rows), &[])?;
        self.file.flush().map_err(|e| io_error(&self.path, e))?;
        let size = self.file.get_ref().metadata().map(|m| m.len()).unwrap_or(0);
        Ok((self.path, size))
    }
}

/// The batches of a spill file, in order.
pub fn read(path: &Path) -> Result<impl Iterator<Item = Result<RecordBatch, PartitionError>>, PartitionError> {
    let file = File::open(path).map_err(|e| io_error(path, e))?;
    Ok(Frames {
        path: path.to_path_buf(),
        file: BufReader::with_capacity(1 << 16, file),
        decoder: arrow::ipc::reader::StreamDecoder::new(),
        left: arrow::buffer::Buffer::from_vec(Vec::<u8>::new()),
        batches: 0,
        rows: 0,
        ended: false,
        failed: false,
    })
}

/// A spill file's frames, read one at a time, and the batches decoded from them.
struct Frames {
    path: PathBuf,
    file: BufReader<File>,
    decoder: arrow::ipc::reader::StreamDecoder,
    /// What is left of the last frame's message.
    left: arrow::buffer::Buffer,
    /// Batches and rows decoded, for the end frame.
    batches: u64,
    rows: u64,
    ended: bool,
    failed: bool,
}

impl Iterator for Frames {
    type Item = Result<RecordBatch, PartitionError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        let next = self.next_batch();
        self.failed = next.is_err();
        next.map_err(|e| io_error(&self.path, e)).transpose()
    }
}

impl Frames {
    /// The next batch; none after the end frame, once the batches and rows decoded are those
    /// it counts (an empty bucket's schema leaves its empty body pending in the decoder).
    fn next_batch(&mut self) -> Result<Option<RecordBatch>, String> {
        loop {
            while !self.left.is_empty() {
                if let Some(b) = self.decoder.decode(&mut self.left).map_err(|e| e.to_string())? {
                    self.batches += 1;
                    self.rows += b.num_rows() as u64;
                    return Ok(Some(b));
                }
            }
            match self.next_message().map_err(|e| e.to_string())? {
                Some(m) => self.left = arrow::buffer::Buffer::from_vec(m),
                None => return Ok(None),
            }
        }
    }

    /// The next frame's message; none after the end frame.
    fn next_message(&mut self) -> std::io::Result<Option<Vec<u8>>> {
        use std::io::Read;
        let bad = |m: String| std::io::Error::new(std::io::ErrorKind::InvalidData, m);
        if self.ended {
            return Ok(None);
        }
        let mut head = [0u8; FRAME_HEAD];
        self.file.read_exact(&mut head).map_err(|e| match e.kind() {
            std::io::ErrorKind::UnexpectedEof => bad("the spill file ends before its end frame".into()),
            _ => e,
        })?;
        let a = u64::from_le_bytes(head[1..9].try_into().expect("8 bytes"));
        let b = u64::from_le_bytes(head[9..].try_into().expect("8 bytes"));
        let (kind, len, stored) = match head[0] {
            END if (a, b) == (self.batches, self.rows) => {
                self.ended = true;
                return Ok(None);
            }
            END => {
                let read = (self.batches, self.rows);
                return Err(bad(format!("the spill file's end counts {a} batches of {b} rows, {read:?} were read")));
            }
            k @ (RAW | LZ4) => (k, a, b),
            k => return Err(bad(format!("unknown spill frame kind {k}"))),
        };
        // A message is never empty; an LZ4 block expands at most ~255 times.
        let most = if kind == RAW { stored } else { stored.saturating_mul(255).saturating_add(16) };
        if len == 0 || len > most || (kind == RAW && len != stored) {
            return Err(bad(format!("a damaged spill frame: {len} bytes stored as {stored}")));
        }
        let mut bytes = Vec::new();
        bytes.try_reserve_exact(stored as usize).map_err(|e| bad(e.to_string()))?;
        if (&mut self.file).take(stored).read_to_end(&mut bytes)? as u64 != stored {
            return Err(bad("the spill file ends inside a frame".into()));
        }
        if kind == RAW {
            return Ok(Some(bytes));
        }
        let message = lz4_flex::block::decompress(&bytes, len as usize).map_err(|e| bad(e.to_string()))?;
        if message.len() as u64 != len {
            return Err(bad(format!("a spill frame decompressed to {} bytes, not {len}", message.len())));
        }
        Ok(Some(message))
    }
}

/// A merged source's current batch, its seqs, and its next row.
type Current = (RecordBatch, Arc<[u64]>, usize);

/// Merges spill files whose rows are each in increasing [`SEQ`] order into one sequence in
/// that order, `batch_rows` rows at a time, without the hidden columns (`record`: the
/// columns kept).
pub struct SeqMerge {
    record: SchemaRef,
    sources: Vec<Box<dyn Iterator<Item = Result<RecordBatch, PartitionError>> + Send>>,
    /// Each source's current batch, its seqs and the next row.
    current: Vec<Option<Current>>,
    heap: BinaryHeap<std::cmp::Reverse<(u64, usize)>>,
    batch_rows: usize,
    started: bool,
}

impl SeqMerge {
    pub fn new(paths: &[PathBuf], record: SchemaRef, batch_rows: usize) -> Result<Self, PartitionError> {
        let mut sources: Vec<Box<dyn Iterator<Item = Result<RecordBatch, PartitionError>> + Send>> = Vec::new();
        for p in paths {
            sources.push(Box::new(read(p)?));
        }
        let current = (0..sources.len()).map(|_| None).collect();
        Ok(SeqMerge { record, sources, current, heap: BinaryHeap::new(), batch_rows, started: false })
    }

    /// Loads source `s`'s next non-empty batch; pushes its first row on the heap.
    fn load(&mut self, s: usize) -> Result<(), PartitionError> {
        self.current[s] = None;
        for b in self.sources[s].by_ref() {
            let b = b?;
            if b.num_rows() == 0 {
                continue;
            }
            let k = self.record.fields().len();
            let seq: Arc<[u64]> = b.column(k).as_primitive::<UInt64Type>().values().to_vec().into();
            self.heap.push(std::cmp::Reverse((seq[0], s)));
            let rows = RecordBatch::try_new(self.record.clone(), b.columns()[..k].to_vec())
                .map_err(|e| PartitionError::Other(format!("spill: {e}")))?;
            self.current[s] = Some((rows, seq, 0));
            return Ok(());
        }
        Ok(())
    }

    /// The next batch in seq order, or None at the end.
    pub fn next_batch(&mut self) -> Result<Option<RecordBatch>, PartitionError> {
        if !self.started {
            self.started = true;
            for s in 0..self.sources.len() {
                self.load(s)?;
            }
        }
        // Batches referenced by this output batch, and (batch, row) picks.
        let mut held: Vec<RecordBatch> = Vec::new();
        let mut slot: Vec<Option<usize>> = vec![None; self.sources.len()];
        let mut picks: Vec<(usize, usize)> = Vec::with_capacity(self.batch_rows);
        while picks.len() < self.batch_rows {
            let Some(std::cmp::Reverse((_, s))) = self.heap.pop() else { break };
            let next_other = self.heap.peek().map_or(u64::MAX, |r| r.0 .0);
            let (batch, seq, at) = self.current[s].as_mut().expect("a source on the heap has a batch");
            let h = *slot[s].get_or_insert_with(|| {
                held.push(batch.clone());
                held.len() - 1
            });
            // A run of this source's rows before any other source's next one.
            while *at < seq.len() && seq[*at] < next_other && picks.len() < self.batch_rows {
                picks.push((h, *at));
                *at += 1;
            }
            if *at < seq.len() {
                self.heap.push(std::cmp::Reverse((seq[*at], s)));
            } else {
                slot[s] = None;
                self.load(s)?;
            }
        }
        if picks.is_empty() {
            return Ok(None);
        }
        let refs: Vec<&RecordBatch> = held.iter().collect();
        arrow::compute::interleave_record_batch(&refs, &picks)
            .map(Some)
            .map_err(|e| PartitionError::Other(format!("spill: {e}")))
    }
}

/// The memory a date's objects take once read and prepared in memory, estimated from their
/// stored sizes: a little over what a [`Meter`] counts for the reference data set (zstd
/// Parquet 11.1×; as CSV 3.5×, gzip CSV 12.5×, NDJSON 1.3×), and for NDJSON its text, held
/// whole while a date in memory decodes it (a reference day as one object, 129 MB, peaks at
/// ~2× in memory; gzip'ed, 15 MB, at ~18.6×), so that such dates reserve what they take up
/// front rather than outgrow it.
pub fn estimate(format: crate::read::Format, objects: &[object_store::ObjectMeta]) -> u64 {
    use crate::read::Format;
    objects
        .iter()
        .map(|m| {
            // Compressed as the reader finds it (`.gz`, `.GZ`, `.gzip`, `.zst` …).
            let packed = crate::read::text::compression(m.location.as_ref()).is_some();
            let factor = match (format, packed) {
                (Format::Parquet, _) => 12,
                (Format::Ndjson, true) => 20,
                (_, true) => 13,
                (Format::Csv, false) => 4,
                (Format::Ndjson, false) => 3,
            };
            m.size * factor
        })
        .sum()
}

/// The stored bytes of `objects`.
pub fn total_size(objects: &[object_store::ObjectMeta]) -> u64 {
    objects.iter().map(|m| m.size).sum()
}

/// The most buckets of one partition (open files while scattering; a bucket then holds more
/// than a quarter of a very small budget).
const MAX_BUCKETS: usize = 256;

/// Buckets for a spilled partition: each holds about a quarter of the budget once read.
pub fn buckets_for(estimate: u64, limit: u64) -> usize {
    let per = (limit / 4).max(1);
    (estimate.div_ceil(per) as usize).next_power_of_two().clamp(2, MAX_BUCKETS)
}

/// The schema of a file of prepared rows: the record, then [`SEQ`].
pub fn seq_schema(record: &Schema) -> SchemaRef {
    let mut fields: Vec<Field> = record.fields().iter().map(|f| f.as_ref().clone()).collect();
    fields.push(Field::new(SEQ, DataType::UInt64, false));
    Arc::new(Schema::new(fields))
}

/// What preparing one bucket gave.
pub enum Bucket {
    /// Its keys with conflicting versions: the first five, and how many.
    Conflict { keys: Vec<crate::error::ConflictKey>, total: usize },
    Done {
        stats: crate::prepare::PrepareStats,
        hashes: Vec<u64>,
        /// The file of its winners in input order, and its size.
        winners: (PathBuf, u64),
        /// Rows set aside, with their [`SEQ`].
        quarantined: Vec<RecordBatch>,
    },
}

/// What the buckets of one spilled date share.
pub struct Buckets {
    /// The date's record schema, and the winners' (the record and [`SEQ`]).
    pub record: SchemaRef,
    pub narrow: SchemaRef,
    /// The date's objects, by the index the rows' origin holds.
    pub objects: Vec<Arc<str>>,
    pub date: chrono::NaiveDate,
    pub id: crate::prepare::Identity,
    /// Rows per batch of a winners' file.
    pub batch_rows: usize,
}

/// Prepares the rows of the bucket file `path`, writing its winners to `out`.
pub fn prepare_bucket(path: &Path, out: &Path, shared: &Buckets) -> Result<Bucket, PartitionError> {
    let Buckets { record, narrow, objects, date, id, batch_rows } = shared;
    let (date, batch_rows) = (*date, *batch_rows);
    let mut pieces = Vec::new();
    let mut seqs: Vec<u64> = Vec::new();
    for b in read(path)? {
        let o = split_origin(&b?, record);
        let n = o.seq.len();
        let mut start = 0;
        while start < n {
            let obj = o.object[start];
            let end = start + o.object[start..].iter().take_while(|&&x| x == obj).count();
            pieces.push(crate::read::Piece {
                date,
                batch: o.rows.slice(start, end - start),
                object: objects[obj as usize].clone(),
                object_rows: o.object_rows[start..end].to_vec().into(),
                lines: o.lines.as_ref().map(|l| l[start..end].into()),
            });
            start = end;
        }
        seqs.extend(o.seq);
    }
    let table = crate::read::Table::from_pieces(record.clone(), pieces)?;
    let prepared = match crate::prepare::prepare(table, id) {
        Err(PartitionError::Conflict { keys, total }) => return Ok(Bucket::Conflict { keys, total }),
        r => r?,
    };
    let t = &prepared.table;
    let with_seq = |ids: &[u32]| -> Result<RecordBatch, PartitionError> {
        let rows = t.take(ids).map_err(|e| PartitionError::Other(format!("spill: {e}")))?;
        let seq = UInt64Array::from_iter_values(ids.iter().map(|&i| seqs[t.dense(i as usize)]));
        let mut cols = rows.columns().to_vec();
        cols.push(Arc::new(seq));
        RecordBatch::try_new(narrow.clone(), cols).map_err(|e| PartitionError::Other(format!("spill: {e}")))
    };
    let mut w = Writer::create(out.to_path_buf(), narrow.clone(), batch_rows)?;
    for ids in prepared.winners.chunks(batch_rows.max(1)) {
        w.write(with_seq(ids)?)?;
    }
    let quarantined = if prepared.quarantined.is_empty() { Vec::new() } else { vec![with_seq(&prepared.quarantined)?] };
    Ok(Bucket::Done { stats: prepared.stats, hashes: prepared.key_hashes, winners: w.finish()?, quarantined })
}

/// Rows with their [`SEQ`] (several buckets' batches) in input order, without it.
pub fn in_seq_order(record: &SchemaRef, batches: Vec<RecordBatch>) -> Result<Option<RecordBatch>, PartitionError> {
    let Some(first) = batches.first() else { return Ok(None) };
    let fail = |e: arrow::error::ArrowError| PartitionError::Other(format!("spill: {e}"));
    let all = arrow::compute::concat_batches(&first.schema(), &batches).map_err(fail)?;
    let k = record.fields().len();
    let order = arrow::compute::sort_to_indices(all.column(k), None, None).map_err(fail)?;
    let sorted = arrow::compute::take_record_batch(&all, &order).map_err(fail)?;
    RecordBatch::try_new(record.clone(), sorted.columns()[..k].to_vec()).map(Some).map_err(fail)
}

/// The rows of the winners' files, merged into input order, `batch_rows` at a time, as a stream
/// read on a blocking thread a few batches ahead.
pub fn merged(
    paths: Vec<PathBuf>,
    record: SchemaRef,
    batch_rows: usize,
) -> futures::stream::BoxStream<'static, Result<RecordBatch, PartitionError>> {
    use futures::StreamExt;
    // `Ok(None)` ends the merge: a merge that stops without it (a panic) is an error, not an end.
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Option<RecordBatch>, PartitionError>>(2);
    tokio::task::spawn_blocking(move || {
        let mut m = match SeqMerge::new(&paths, record, batch_rows.max(1)) {
            Ok(m) => m,
            Err(e) => {
                let _ = tx.blocking_send(Err(e));
                return;
            }
        };
        loop {
            let next = m.next_batch();
            let end = !matches!(next, Ok(Some(_)));
            if tx.blocking_send(next).is_err() || end {
                break;
            }
        }
    });
    futures::stream::unfold(Some(rx), |rx| async move {
        let mut rx = rx?;
        match rx.recv().await {
            Some(Ok(Some(b))) => Some((Ok(b), Some(rx))),
            Some(Ok(None)) => None,
            Some(Err(e)) => Some((Err(e), None)),
            None => Some((
                Err(PartitionError::Other("spill: the merge of the buckets stopped before its end".into())),
                None,
            )),
        }
    })
    .boxed()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_in_their_units_and_refuse_the_rest() {
        let gib = 1u64 << 30;
        assert_eq!(parse_size("512MiB", gib).unwrap(), 512 << 20);
        assert_eq!(parse_size("4GiB", gib).unwrap(), 4 << 30);
        assert_eq!(parse_size("1GB", gib).unwrap(), 1_000_000_000);
        assert_eq!(parse_size(" 2 gib ", gib).unwrap(), 2 << 30);
        assert_eq!(parse_size("1.5GiB", gib).unwrap(), 3 << 29);
        assert_eq!(parse_size("60%", 10 * gib).unwrap(), 6 * gib);
        for bad in [
            "",
            "  ",
            "lots",
            "4 GiBs",
            "0%",
            "150%",
            "100",
            "-1GiB",
            "1KiB",
            "0.0001%",
            "99999999999TiB",
            "18446744073709551617",
        ] {
            assert!(parse_size(bad, gib).is_err(), "{bad}");
        }
    }

    /// Batches of every width (a message too small to pack, text that packs, random bytes that
    /// do not, decimals, nulls, a batch spread over several writes) read back as written; a
    /// damaged file is an error naming it, never a panic.
    #[test]
    fn spill_files_read_back_what_was_written_and_refuse_a_damaged_frame() {
        use arrow::array::{Decimal128Array, Int64Array, StringArray};
        use rand::{Rng, SeedableRng};
        let dir = tempfile::tempdir().unwrap();
        let schema = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Utf8, true),
            Field::new("n", DataType::Int64, true),
            Field::new("d", DataType::Decimal128(12, 2), true),
        ]));
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        let batch = |rows: usize, rng: &mut rand_chacha::ChaCha8Rng, random: bool| {
            let k: StringArray = (0..rows)
                .map(|i| match (i % 7, random) {
                    (0, _) => None,
                    (_, true) => Some((0..24).map(|_| rng.random_range(33u8..127) as char).collect::<String>()),
                    (_, false) => Some(format!("key-{:08}", i % 1000)),
                })
                .collect();
            let n: Int64Array = (0..rows).map(|i| (i % 5 != 0).then(|| rng.random::<i64>())).collect();
            let d = Decimal128Array::from_iter((0..rows).map(|i| Some(i as i128 * 7 - 300)))
                .with_precision_and_scale(12, 2)
                .unwrap();
            RecordBatch::try_new(schema.clone(), vec![Arc::new(k), Arc::new(n), Arc::new(d)]).unwrap()
        };
        let written = [batch(1, &mut rng, false), batch(50_000, &mut rng, false), batch(20_000, &mut rng, true)];
        let path = dir.path().join("in.spill");
        let mut w = Writer::create(path.clone(), schema.clone(), 10_000).unwrap();
        for b in &written {
            // Halves: a batch gathered from several writes.
            let half = b.num_rows() / 2;
            w.write(b.slice(0, half)).unwrap();
            w.write(b.slice(half, b.num_rows() - half)).unwrap();
        }
        let (_, size) = w.finish().unwrap();
        let raw: usize = written.iter().map(|b| b.get_array_memory_size()).sum();
        assert!(size > 0 && (size as usize) < raw, "{size} bytes on disk for {raw} in memory");
        let back: Vec<RecordBatch> = read(&path).unwrap().collect::<Result<_, _>>().unwrap();
        let all = |bs: &[RecordBatch]| arrow::compute::concat_batches(&schema, bs).unwrap();
        assert_eq!(all(&back), all(&written));

        // A bucket no row fell in: no batch, and no error.
        let empty = dir.path().join("empty.spill");
        Writer::create(empty.clone(), schema.clone(), 10).unwrap().finish().unwrap();
        assert_eq!(read(&empty).unwrap().collect::<Result<Vec<_>, _>>().unwrap().len(), 0);

        // Damaged: a kind byte unknown; the file cut inside a frame, or between two (a batch
        // lost whole), or its end zeroed; a message's length said smaller, larger, absurd, or
        // nothing (the batches' frames are packed: see the size above).
        let bytes = std::fs::read(&path).unwrap();
        let frame_end =
            |at: usize| at + FRAME_HEAD + u64::from_le_bytes(bytes[at + 9..][..8].try_into().unwrap()) as usize;
        let second = frame_end(0);
        let third = frame_end(second);
        assert_eq!(bytes[second], LZ4);
        let mut unknown = bytes.clone();
        unknown[second] = 9;
        let length = |n: &dyn Fn(u64) -> u64| {
            let mut b = bytes.clone();
            let was = u64::from_le_bytes(b[second + 1..][..8].try_into().unwrap());
            b[second + 1..second + 9].copy_from_slice(&n(was).to_le_bytes());
            b
        };
        let mut zeroed = bytes.clone();
        zeroed[third..].fill(0);
        let damaged: [(&str, Vec<u8>); 9] = [
            ("unknown kind", unknown),
            ("cut inside a frame", bytes[..bytes.len() - 30].to_vec()),
            ("cut between frames", bytes[..third].to_vec()),
            ("without its end frame", bytes[..bytes.len() - FRAME_HEAD].to_vec()),
            ("zeroed from a frame on", zeroed),
            ("said smaller", length(&|n| n - 100)),
            ("said larger", length(&|n| n + 100)),
            ("said absurdly large", length(&|_| u64::MAX / 2)),
            ("said empty", length(&|_| 0)),
        ];
        for (what, damaged) in damaged {
            let bad = dir.path().join("bad.spill");
            std::fs::write(&bad, damaged).unwrap();
            let outcome: Result<Vec<RecordBatch>, _> = read(&bad).unwrap().collect();
            match outcome {
                Err(PartitionError::Spill { path, .. }) => assert!(path.ends_with("bad.spill"), "{what}: {path}"),
                other => panic!("{what}: {other:?}"),
            }
        }
    }

    #[test]
    fn buckets_agree_for_equal_keys_in_any_batch() {
        let a: ArrayRef = Arc::new(arrow::array::StringArray::from(vec!["a", "b", "c", "a"]));
        let b: ArrayRef = Arc::new(arrow::array::StringArray::from(vec!["c", "a"]));
        let (x, y) = (buckets_of(&[a], 16).unwrap(), buckets_of(&[b], 16).unwrap());
        assert_eq!((x[0], x[2]), (y[1], y[0]));
        assert_eq!(x[0], x[3]);
        assert!(x.iter().all(|&k| k < 16));
        let i: ArrayRef = Arc::new(arrow::array::Int64Array::from(vec![7, 8, 7]));
        let s: ArrayRef = Arc::new(arrow::array::StringArray::from(vec!["x", "y", "x"]));
        let two = buckets_of(&[i, s], 4).unwrap();
        assert_eq!(two[0], two[2]);
    }
}
