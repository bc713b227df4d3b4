//! Write and swap: one partition's result becomes exactly one Parquet object, atomically
//! (docs/design.md §4; G1–G4, G6).
//!
//! The protocol, per partition:
//! 1. encode the batch with fixed writer settings and the lineage footer (deterministic bytes);
//! 2. compare with the committed object: same bytes → `unchanged`, nothing written;
//! 3. write `STATE/staging/<run_id>/<col>=<date>/part-00000.parquet` (multipart when large,
//!    aborted on failure), read it back and check schema and row count;
//! 4. swap it in as a compare-and-swap against the state seen at planning time: on a local
//!    folder a `rename(2)` over the old file after checking its e-tag; on an object store a
//!    conditional put (`If-Match` the planned e-tag, or `If-None-Match: *` for a new
//!    partition). A lost race is [`PartitionError::Fenced`], never an overwrite;
//! 5. when the outcome of the swap is unknown (timeout, dropped connection), read the target
//!    back before anything is cleaned up; delete the staged copy only once the swap is known.
//!
//! The one store-specific step, the swap, belongs to the store's
//! [`Protocol`](crate::store::Protocol). A partition folder holds exactly one object (G3):
//! anything else in it fails the partition ([`foreign_objects`]), and so does anything in a
//! folder that spells the same date another way (`event_date=2026-11-1/`), unless the job says
//! `foreign_files = "remove"`.

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use object_store::path::Path;
use object_store::{ObjectMeta, ObjectStoreExt};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::metadata::KeyValue;
use parquet::file::properties::WriterProperties;
use serde::{Deserialize, Serialize};

use crate::error::PartitionError;
use crate::lineage::{self, Lineage};
use crate::store::StoreLocation;

/// The one data object of a partition.
pub const PART_FILE: &str = "part-00000.parquet";

/// Objects at or above this size go up as multipart uploads.
const MULTIPART_THRESHOLD: usize = 16 * 1024 * 1024;

/// What happened to a partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    Created,
    Replaced,
    Unchanged,
    /// Not computed: its committed file was made by this config from the same input
    /// (`--skip-unchanged`).
    Skipped,
    /// Nothing to do for it in this run (a merge date without batch rows).
    Untouched,
    Failed,
    /// Not run: the run was stopped (SIGTERM, SIGINT, SIGHUP) first.
    Stopped,
    Planned,
    /// `verify`: the committed bytes equal a recomputation.
    Verified,
    /// `verify`: the committed bytes differ from a recomputation (or are missing).
    Differs,
}

impl std::fmt::Display for Action {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = match self {
            Action::Created => "created",
            Action::Replaced => "replaced",
            Action::Unchanged => "unchanged",
            Action::Skipped => "skipped",
            Action::Untouched => "untouched",
            Action::Failed => "failed",
            Action::Stopped => "stopped",
            Action::Planned => "planned",
            Action::Verified => "verified",
            Action::Differs => "differs",
        };
        f.write_str(s)
    }
}

/// `<col>=<date>`, the partition's folder name.
pub fn partition_dir(column: &str, date: chrono::NaiveDate) -> String {
    format!("{column}={date}")
}

/// The committed object of a partition.
pub fn target_path(out: &StoreLocation, dir: &str) -> Path {
    out.child(&[dir, PART_FILE])
}

/// The staged object of a partition in a run, in the table's state location.
pub fn staging_path(state: &StoreLocation, run_id: &str, dir: &str) -> Path {
    state.child(&["staging", run_id, dir, PART_FILE])
}

/// The rows a run set aside for a partition (`on_conflict = "quarantine"`), in the state
/// location.
pub fn quarantine_path(state: &StoreLocation, run_id: &str, dir: &str) -> Path {
    state.child(&["quarantine", run_id, dir, PART_FILE])
}

/// Encodes a partition's rows with fixed writer settings and the lineage in the footer.
pub fn encode(batch: &RecordBatch, lineage: &Lineage, extra: &[(&str, String)]) -> Result<Bytes, PartitionError> {
    let mut kv = vec![KeyValue::new(lineage::FOOTER_KEY.to_string(), lineage.to_json())];
    kv.extend(extra.iter().map(|(k, v)| KeyValue::new(k.to_string(), v.clone())));
    let props = WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::try_new(3).unwrap_or_default()))
        .set_created_by(lineage::tool())
        .set_key_value_metadata(Some(kv))
        .build();
    let mut buf = Vec::with_capacity(4096);
    let err = |e: parquet::errors::ParquetError| PartitionError::Other(format!("encoding the partition file: {e}"));
    let mut w = ArrowWriter::try_new(&mut buf, batch.schema(), Some(props)).map_err(err)?;
    w.write(batch).map_err(err)?;
    w.close().map_err(err)?;
    Ok(Bytes::from(buf))
}

/// The footer key of a sealed file's digest: the SHA-256 (hex) of the whole file, taken with
/// this value's own 64 characters written as zeros.
pub const SEAL_KEY: &str = "lakeswap.seal";

/// [`encode`], sealed: the footer holds a digest of every byte of the file (row groups, page
/// indexes, the footer and its statistics; [`SEAL_KEY`]), so a file changed after its commit
/// (rewritten with the footer kept, a byte flipped anywhere) is told from the one written
/// ([`intact`]). A daily table's file, which `--skip-unchanged` may keep.
pub fn encode_sealed(batch: &RecordBatch, lineage: &Lineage) -> Result<Bytes, PartitionError> {
    let mut bytes = encode(batch, lineage, &[(SEAL_KEY, "0".repeat(64))])?.to_vec();
    let at = seal_at(&bytes)
        .filter(|&at| bytes[at..at + 64].iter().all(|&b| b == b'0'))
        .ok_or_else(|| PartitionError::Other("encoding the partition file: its seal was not found".into()))?;
    let sealed = digest(&bytes);
    bytes[at..at + 64].copy_from_slice(sealed.as_bytes());
    Ok(Bytes::from(bytes))
}

/// Where the seal's 64 characters lie in a file: in its footer, just after the key's name (the
/// value's field header and length take a byte each in Thrift's compact encoding).
fn seal_at(bytes: &[u8]) -> Option<usize> {
    let end = bytes.len().checked_sub(8)?;
    let tail = parquet::file::metadata::FooterTail::try_from(&bytes[end..]).ok()?;
    let start = end.checked_sub(tail.metadata_length())?;
    let key = memchr::memmem::rfind(&bytes[start..end], SEAL_KEY.as_bytes())?;
    let at = start + key + SEAL_KEY.len() + 2;
    (at + 64 <= end).then_some(at)
}

/// Whether a sealed file is every byte as written ([`encode_sealed`]); false for a file that is
/// not sealed or not readable.
pub fn intact(bytes: &[u8]) -> bool {
    let Some(at) = seal_at(bytes) else { return false };
    let sealed = &bytes[at..at + 64];
    let mut unsealed = bytes.to_vec();
    unsealed[at..at + 64].fill(b'0');
    sealed.iter().all(u8::is_ascii_hexdigit) && digest(&unsealed).as_bytes() == sealed
}

/// The first [`crate::lineage::RULES`] under which every daily table's file is sealed.
const SEALED_SINCE_RULES: u32 = 3;

/// Whether a file lakeswap wrote is not the bytes it wrote, though its rows may read alike: its
/// seal no longer matches (a flipped bit, an edited footer statistic), or it has none while its
/// lineage says it was written sealed (rewritten by a tool that kept the footer's lineage).
pub fn seal_broken(bytes: &Bytes) -> bool {
    match seal_at(bytes) {
        Some(_) => !intact(bytes),
        None => lineage_of(bytes).is_some_and(|l| l.rules >= SEALED_SINCE_RULES),
    }
}

/// Whether a file carries a seal (it may not match: [`intact`]).
pub fn has_seal(bytes: &[u8]) -> bool {
    seal_at(bytes).is_some()
}

/// Reads a partition file back and checks its schema and row count.
pub fn verify(bytes: &Bytes, schema: &SchemaRef, rows: usize) -> Result<(), String> {
    let reader =
        ParquetRecordBatchReaderBuilder::try_new(bytes.clone()).map_err(|e| format!("not readable as Parquet: {e}"))?;
    let got = reader.schema().clone();
    if got.fields().len() != schema.fields().len()
        || got.fields().iter().zip(schema.fields()).any(|(a, b)| a.name() != b.name() || a.data_type() != b.data_type())
    {
        return Err(format!("schema differs: wrote {schema:?}, read {got:?}"));
    }
    let mut n = 0;
    for b in reader.build().map_err(|e| e.to_string())? {
        n += b.map_err(|e| format!("cannot decode: {e}"))?.num_rows();
    }
    if n != rows {
        return Err(format!("row count differs: wrote {rows}, read {n}"));
    }
    Ok(())
}

/// The end of a file read to find its footer: Parquet footers of lakeswap's files are a few
/// KiB, so one read of the tail usually holds all of it.
const FOOTER_TAIL: u64 = 64 * 1024;

/// The lineage of the committed file at `path`: `None` when there is no file, `Some(None)`
/// when it has no readable lineage. Reads only the end of the object (see [`committed_footer`]).
pub async fn committed_lineage(out: &StoreLocation, path: &Path) -> Result<Option<Option<Lineage>>, PartitionError> {
    Ok(committed_footer(out, path)
        .await?
        .map(|f| f.and_then(|md| Lineage::from_footer(md.file_metadata().key_value_metadata()))))
}

/// The Parquet footer of the committed file at `path`: `None` when there is no file,
/// `Some(None)` when it is not readable as Parquet. Reads only the end of the object (a HEAD,
/// then one or two ranged reads), however large the file: a merged current-state partition
/// can be big.
pub async fn committed_footer(
    out: &StoreLocation,
    path: &Path,
) -> Result<Option<Option<parquet::file::metadata::ParquetMetaData>>, PartitionError> {
    // The file may be replaced between the HEAD and the reads (a commit in progress): the reads
    // are tied to the e-tag seen, and start over when it changed.
    let mut attempt = 0;
    loop {
        attempt += 1;
        match footer(out, path).await {
            Err(object_store::Error::Precondition { .. }) if attempt < 3 => continue,
            Err(e) => return Err(PartitionError::store("cannot read", out.display(path), e)),
            Ok(found) => return Ok(found),
        }
    }
}

async fn footer(
    out: &StoreLocation,
    path: &Path,
) -> object_store::Result<Option<Option<parquet::file::metadata::ParquetMetaData>>> {
    let meta = match out.store.head(path).await {
        Ok(m) => m,
        Err(object_store::Error::NotFound { .. }) => return Ok(None),
        Err(e) => return Err(e),
    };
    let size = meta.size;
    if size < 8 {
        return Ok(Some(None));
    }
    let read = |range: std::ops::Range<u64>| {
        let opts = object_store::GetOptions {
            if_match: meta.e_tag.clone(),
            range: Some(object_store::GetRange::Bounded(range)),
            ..Default::default()
        };
        async move { out.store.get_opts(path, opts).await?.bytes().await }
    };
    let tail = read(size.saturating_sub(FOOTER_TAIL)..size).await?;
    let Some(end) = tail.len().checked_sub(8) else { return Ok(Some(None)) };
    let Ok(footer) = parquet::file::metadata::FooterTail::try_from(&tail[end..]) else { return Ok(Some(None)) };
    let len = footer.metadata_length();
    let metadata = if len <= end {
        tail.slice(end - len..end)
    } else {
        let Some(start) = (size - 8).checked_sub(len as u64) else { return Ok(Some(None)) };
        read(start..size - 8).await?
    };
    Ok(Some(parquet::file::metadata::ParquetMetaDataReader::decode_metadata(&metadata).ok()))
}

/// The committed state of a partition, as seen when the run planned it.
#[derive(Debug, Clone, Default)]
pub struct Seen {
    pub meta: Option<ObjectMeta>,
}

impl Seen {
    /// Whether `now` is the object seen.
    pub fn same_object(&self, now: &Option<ObjectMeta>) -> bool {
        match (&self.meta, now) {
            (None, None) => true,
            (Some(a), Some(b)) => a.e_tag == b.e_tag && a.version == b.version && a.size == b.size,
            _ => false,
        }
    }
}

/// A digest of a file's bytes (SHA-256, hex): what a pending swap records of the committed file
/// it replaces, to tell a byte-identical copy (its e-tag differs) from a change.
pub fn digest(bytes: &[u8]) -> String {
    use sha2::Digest;
    crate::config::hex(&sha2::Sha256::digest(bytes))
}

/// Looks up the committed object at `path`.
pub async fn head(out: &StoreLocation, path: &Path) -> Result<Option<ObjectMeta>, PartitionError> {
    match out.store.head(path).await {
        Ok(m) => Ok(Some(m)),
        Err(object_store::Error::NotFound { .. }) => Ok(None),
        Err(e) => Err(PartitionError::store("cannot look up", out.display(path), e)),
    }
}

/// A stored partition file whose lineage names another date (copied in from it), or that has
/// no lakeswap lineage at all (a copy by another tool), is refused; a lineage without a date
/// (written before it held one) is taken as it is.
pub fn holds_its_date(file: &Bytes, date: chrono::NaiveDate, path: &str) -> Result<(), PartitionError> {
    match lineage_of(file).map(|l| l.date) {
        None => Err(PartitionError::Misplaced { path: path.to_string(), holds: None }),
        Some(Some(holds)) if holds != date => {
            Err(PartitionError::Misplaced { path: path.to_string(), holds: Some(holds) })
        }
        _ => Ok(()),
    }
}

/// The lakeswap lineage in a partition file's footer: `None` for a file lakeswap did not write
/// (another tool's Parquet, or not Parquet at all).
pub fn lineage_of(file: &Bytes) -> Option<crate::lineage::Lineage> {
    ParquetRecordBatchReaderBuilder::try_new(file.clone())
        .ok()
        .and_then(|r| crate::lineage::Lineage::from_footer(r.metadata().file_metadata().key_value_metadata()))
}

/// Whether two partition files hold the same rows under the same schema, whatever their
/// lineage says (a file's bytes differ with its lineage's record of the input objects).
pub fn same_rows(a: &Bytes, b: &Bytes) -> bool {
    let rows = |bytes: &Bytes| -> Option<RecordBatch> {
        let r = ParquetRecordBatchReaderBuilder::try_new(bytes.clone()).ok()?;
        let schema = r.schema().clone();
        let batches = r.build().ok()?.collect::<Result<Vec<_>, _>>().ok()?;
        arrow::compute::concat_batches(&schema, &batches).ok()
    };
    // The schema's metadata holds the footer's, lineage included: fields and values only.
    matches!((rows(a), rows(b)), (Some(x), Some(y)) if x.schema().fields() == y.schema().fields() && x.columns() == y.columns())
}

/// Reads the object at `path`, if there is one.
pub async fn get(out: &StoreLocation, path: &Path) -> Result<Option<Bytes>, PartitionError> {
    match out.store.get(path).await {
        Ok(r) => r.bytes().await.map(Some).map_err(|e| PartitionError::store("cannot read", out.display(path), e)),
        Err(object_store::Error::NotFound { .. }) => Ok(None),
        Err(e) => Err(PartitionError::store("cannot read", out.display(path), e)),
    }
}

/// Writes `bytes` to `path`: one put when small, a multipart upload (aborted on failure) when large.
pub async fn upload(out: &StoreLocation, path: &Path, bytes: Bytes) -> Result<(), PartitionError> {
    let err = |e| PartitionError::store("cannot write", out.display(path), e);
    if bytes.len() < MULTIPART_THRESHOLD {
        out.store.put(path, bytes.into()).await.map_err(err)?;
        return Ok(());
    }
    // Parts of MULTIPART_THRESHOLD bytes (zero-copy slices), a few in flight at once; any
    // failure aborts the upload, so no part is left behind on the store.
    let mut upload = out.store.put_multipart(path).await.map_err(err)?;
    let parts: Vec<_> = (0..bytes.len())
        .step_by(MULTIPART_THRESHOLD)
        .map(|at| upload.put_part(bytes.slice(at..(at + MULTIPART_THRESHOLD).min(bytes.len())).into()))
        .collect();
    let sent: object_store::Result<Vec<()>> = futures::stream::iter(parts).buffered(4).try_collect().await;
    let done = match sent {
        Ok(_) => upload.complete().await.map(|_| ()),
        Err(e) => Err(e),
    };
    if let Err(e) = done {
        let _ = upload.abort().await;
        return Err(err(e));
    }
    Ok(())
}

/// A partition file on its way in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Staged {
    /// The committed file already has these bytes: nothing to write.
    Unchanged,
    /// Staged and verified at this path: ready to swap in.
    Ready(Path),
}

/// Stages one partition's bytes: compare with what is committed (a change since planning
/// means another run won; a file lakeswap did not write is replaced only with
/// `replace_foreign`), write the staged copy, read it back and verify it.
#[allow(clippy::too_many_arguments)] // the table, its state, and what identifies and checks the file
pub async fn stage(
    out: &StoreLocation,
    state: &StoreLocation,
    run_id: &str,
    dir: &str,
    bytes: &Bytes,
    schema: &SchemaRef,
    rows: usize,
    seen: &Seen,
    replace_foreign: bool,
) -> Result<Staged, PartitionError> {
    let target = target_path(out, dir);
    let now = head(out, &target).await?;
    if !seen.same_object(&now) {
        return Err(PartitionError::Fenced { path: out.display(&target) });
    }
    if now.is_some() {
        let committed = get(out, &target).await?;
        if committed.as_ref() == Some(bytes) {
            return Ok(Staged::Unchanged);
        }
        if !replace_foreign && committed.as_ref().is_some_and(|c| lineage_of(c).is_none()) {
            return Err(PartitionError::NotOurs { path: out.display(&target) });
        }
    }
    let staged = staging_path(state, run_id, dir);
    upload(state, &staged, bytes.clone()).await?;
    let staged_back = get(state, &staged).await?.unwrap_or_default();
    if let Err(message) = verify(&staged_back, schema, rows).and_then(|_| {
        if staged_back == *bytes {
            Ok(())
        } else {
            Err("the staged bytes differ from the bytes written".to_string())
        }
    }) {
        let _ = state.store.delete(&staged).await;
        return Err(PartitionError::Verify { path: state.display(&staged), message });
    }
    Ok(Staged::Ready(staged))
}

/// Swaps a file staged in `state` into the table (the store's protocol: a compare-and-swap
/// against `seen`).
pub async fn swap_in(
    out: &StoreLocation,
    state: &StoreLocation,
    staged: &Path,
    dir: &str,
    bytes: Bytes,
    seen: &Seen,
) -> Result<Action, PartitionError> {
    let target = target_path(out, dir);
    out.protocol.swap(state, staged, out, &target, bytes, seen).await?;
    Ok(if seen.meta.is_some() { Action::Replaced } else { Action::Created })
}

/// Objects in a partition folder besides its one data file (another tool's or a person's), and
/// every object in a folder that spells the partition's date another way (`event_date=2026-11-1/`).
pub async fn foreign_objects(out: &StoreLocation, dir: &str) -> Result<Vec<Path>, PartitionError> {
    let target = target_path(out, dir);
    let mut found = Vec::new();
    for folder in std::iter::once(out.child(&[dir])).chain(other_spellings(out, dir).await?) {
        let mut listed: Vec<ObjectMeta> = out
            .store
            .list(Some(&folder))
            .try_collect()
            .await
            .map_err(|e| PartitionError::store("cannot list", out.display(&folder), e))?;
        // A zero-byte object at the folder's own name, or of a folder in it (`event_date=…/`,
        // `…/sub/`, as S3 consoles and some writers make them), is a folder marker: readers skip
        // it, as the input's listing does.
        listed.retain(|m| !(m.size == 0 && m.location == folder));
        crate::read::list::empty_folder_markers(out, &mut listed).await?;
        found.extend(listed.into_iter().map(|m| m.location).filter(|l| *l != target));
    }
    Ok(found)
}

/// The other folders of the table that name partition folder `dir`'s date (`<col>=<date>`):
/// `event_date=2026-11-1`, `event_date=2026%2D11%2D01`. Readers that take the partition value
/// from the folder name (DuckDB's `hive_partitioning`, Spark) read their rows as that date's,
/// beside the partition's own.
async fn other_spellings(out: &StoreLocation, dir: &str) -> Result<Vec<Path>, PartitionError> {
    let Some((column, date)) = dir.split_once('=').and_then(|(c, v)| Some((c, lenient_date(v)?))) else {
        return Ok(Vec::new());
    };
    // A name the store cannot take as a path (a local file name with a tab) must not stop every
    // date: the check is skipped, and said. A store that failed fails the partition (a retry
    // may pass): committed without the check, a second spelling would double its rows.
    let listed = match out.store.list_with_delimiter(Some(&out.prefix)).await {
        Ok(l) => l,
        Err(
            e @ (object_store::Error::InvalidPath { .. }
            | object_store::Error::Generic { store: "LocalFileSystem", .. }),
        ) => {
            tracing::warn!(table = %out.url, error = %e, "cannot list the table's folders; folders spelling {dir}'s date another way are not looked for");
            return Ok(Vec::new());
        }
        Err(source) => return Err(PartitionError::Store { what: "cannot list", path: out.url.clone(), source }),
    };
    Ok(listed
        .common_prefixes
        .into_iter()
        .filter(|p| {
            p.filename().is_some_and(|name| {
                name != dir && name.split_once('=').is_some_and(|(c, v)| c == column && lenient_date(v) == Some(date))
            })
        })
        .collect())
}

/// The date a folder name's value spells as readers take it: DuckDB reads a partition value
/// `2026-11-1`, `02026-11-01`, `2026 11 01`, `2026/11/01`, ` 2026-11-01 ` or
/// `2026-11-01 00:00:00` as the date 2026-11-01 (unescaped once: `2026%2D11%2D01`).
pub fn lenient_date(value: &str) -> Option<chrono::NaiveDate> {
    let v = percent_encoding::percent_decode_str(value).decode_utf8().ok()?;
    // DuckDB trims the vertical tab too.
    let space = |c: char| c.is_ascii_whitespace() || c == '\x0b';
    let v = v.trim_matches(space);
    // Leading digits of `s` (between `widths` of them) as a number, and the rest.
    fn number(s: &str, widths: std::ops::RangeInclusive<usize>) -> Option<(u32, &str)> {
        let n = s.bytes().take_while(u8::is_ascii_digit).count();
        let value: u32 = s[..n].parse().ok()?;
        widths.contains(&n).then_some((value, &s[n..]))
    }
    // Any number of leading zeros before the year.
    let zeros = v.len() - v.trim_start_matches('0').len();
    let v = match v[zeros..].starts_with(|c: char| c.is_ascii_digit()) {
        true => &v[zeros..],
        false => &v[zeros.saturating_sub(1)..],
    };
    let (year, rest) = number(v, 1..=9)?;
    let sep = rest.chars().next().filter(|c| matches!(c, '-' | '/' | ' ' | '\\'))?;
    let (month, rest) = number(rest.strip_prefix(sep)?, 1..=2)?;
    let (day, rest) = number(rest.strip_prefix(sep)?, 1..=2)?;
    // Nothing more, or a time of day after a `T` or spaces (`2026-11-01 12:34:56`, `… 00:`). What
    // follows the hour and minute is not looked at: a folder taken for the date by mistake
    // fails its date, and is never removed (see [`removable`]).
    if !rest.is_empty() {
        let time = rest.strip_prefix('T').unwrap_or(rest);
        let trimmed = time.trim_start_matches(space);
        if time.len() == rest.len() && trimmed.len() == time.len() {
            return None;
        }
        // The hour: any number of digits (`000:00`), then `:` and a minute, or none (`00:`).
        let n = trimmed.bytes().take_while(u8::is_ascii_digit).count();
        let hour: u64 = match trimmed[..n].trim_start_matches('0') {
            _ if n == 0 => return None,
            "" => 0,
            h => h.parse().ok()?,
        };
        let time = trimmed[n..].strip_prefix(':')?;
        let minute = match number(time, 1..=2) {
            Some((m, _)) => m,
            None if !time.starts_with(|c: char| c.is_ascii_digit()) => 0,
            None => return None,
        };
        if hour > 24 || minute > 59 || (hour == 24 && minute > 0) {
            return None;
        }
    }
    chrono::NaiveDate::from_ymd_opt(i32::try_from(year).ok()?, month, day)
}

/// Whether `foreign_files = "remove"` may remove foreign object `path` of partition folder
/// `dir`: only an object in the partition's own folder, and on a local folder not one reached
/// through a symbolic link (removing it would remove what the link points to: another
/// partition, or this one). A folder that spells the date another way is the user's to move.
pub fn removable(out: &StoreLocation, dir: &str, path: &Path) -> bool {
    let name = out.relative(path);
    name.split('/').next() == Some(dir) && !through_link(out, &name)
}

/// Whether a path of the table (relative to it) passes through a symbolic link on a local folder.
fn through_link(out: &StoreLocation, relative: &str) -> bool {
    first_link(out, relative).is_some()
}

/// The first symbolic link on a path of the table (relative to it), on a local folder.
pub fn first_link(out: &StoreLocation, relative: &str) -> Option<std::path::PathBuf> {
    let mut at = out.local_path(&out.prefix)?;
    relative.split('/').find_map(|part| {
        at.push(part);
        std::fs::symlink_metadata(&at).is_ok_and(|m| m.file_type().is_symlink()).then(|| at.clone())
    })
}

/// Names of foreign objects (see [`foreign_objects`]) for messages, relative to the table; one
/// that counts for a reason not plain from its name says why.
pub fn foreign_names(out: &StoreLocation, dir: &str, objects: &[Path]) -> Vec<String> {
    objects
        .iter()
        .map(|p| {
            let name = out.relative(p);
            if name.split('/').next() != Some(dir) {
                format!(
                    "{name} (its folder spells the same date as {dir}: readers that take the date from the folder \
                     name read its rows as this partition's; lakeswap removes nothing outside the partition's folder)"
                )
            } else if through_link(out, &name) {
                format!("{name} (reached through a symbolic link, which lakeswap does not remove through)")
            } else {
                name
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::lenient_date;

    #[test]
    fn a_folder_value_is_read_as_the_date_readers_take_it_for() {
        // What DuckDB's `TRY_CAST(v AS DATE)` gives 2026-11-01 for, and what it gives nothing for.
        let nov1 = chrono::NaiveDate::from_ymd_opt(2026, 11, 1);
        for v in [
            "2026-11-01",
            "2026-11-1",
            "02026-11-01",
            "2026 11 01",
            "2026/11/01",
            "2026\\11\\01",
            " 2026-11-01 ",
            "\t2026-11-01",
            "2026%2D11%2D01",
            "2026-11-01 00:00:00",
            "2026-11-01T00:00:00Z",
            "2026-11-01 12:34:56",
            "2026-11-01 0:0",
            "2026-11-01T 00:00",
            "2026-11-01  00:00:00-05:00",
            "00000002026-11-01",
            "2026-11-01\x0b",
            "2026-11-01 000:00",
            "2026-11-01 00:",
            "2026-11-01 24:00",
        ] {
            assert_eq!(lenient_date(v), nov1, "{v:?}");
        }
        for v in [
            "2026-11-01.bak",
            "20261101",
            "2026-13-01",
            "2026.11.01",
            "2026-11/01",
            "2026-11-001",
            "2026-11",
            "+2026-11-01",
            "2026-11-01Z",
            "2026-11-01t00:00",
            "2026-11-01T00",
            "2026-11-01 AD",
            "2026-11-01 UTC",
            "2026-11-01\u{a0}",
            "\u{3000}2026-11-01",
            "2026%252D11%252D01",
            "2026-11-01 24:01",
            "2026-11-01 23:60",
            "2026-11-01 00",
        ] {
            assert_eq!(lenient_date(v), None, "{v:?}");
        }
    }
}
