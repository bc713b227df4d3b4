//! A Parquet object read from its store a row group at a time: the footer, then each row
//! group's column chunks in one ranged read, held until the next row group's replace them.
//! Memory then holds one row group's stored bytes, whatever the object's size, where a whole
//! object would be fetched first (a spilled date's objects larger than a part of the budget).
//! A large NDJSON object is read the same way from start to end ([`Ranged::sequential`]).

use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use object_store::path::Path;
use object_store::ObjectStore;
use parquet::errors::ParquetError;
use parquet::file::reader::{ChunkReader, Length};

/// Where a Parquet decoder reads an object's bytes from, told which span it reads next.
pub trait Held: ChunkReader + Clone + 'static {
    /// Reads to come lie within `span` (a row group's column chunks) until the next call.
    fn hold(&self, span: Range<u64>) -> Result<(), String>;

    /// Why a read from the store failed, when one did: a decoding error that follows is the
    /// store's, not the object's.
    fn failure(&self) -> Option<String>;
}

impl Held for Bytes {
    fn hold(&self, _: Range<u64>) -> Result<(), String> {
        Ok(())
    }

    fn failure(&self) -> Option<String> {
        None
    }
}

/// An object in a store, read in ranges ([`Held`]).
#[derive(Clone)]
pub struct Ranged(Arc<Inner>);

struct Inner {
    store: Arc<dyn ObjectStore>,
    location: Path,
    /// The version the first read found: every later read is of it, or fails (an object
    /// rewritten while it is read would mix two versions). Every read also finds the size
    /// listed. (A local folder's e-tag misses a rewrite that keeps the size and the time of
    /// change; the listing's e-tag, which adds it, is not the one its reads report.)
    e_tag: Mutex<Option<String>>,
    len: u64,
    runtime: tokio::runtime::Handle,
    /// The span held, from its first byte.
    held: Mutex<Option<(u64, Bytes)>>,
    failure: Mutex<Option<String>>,
    /// Set when nobody waits for the reading any more: later reads fail.
    abandoned: Abandoned,
}

/// Set when the caller waiting for a reading on a thread of its own has gone (its future was
/// dropped): the thread's next read from the store fails, so that it stops instead of reading
/// on to the end of the object ([`crate::read::on_own_thread`]).
#[derive(Clone, Debug, Default)]
pub struct Abandoned(Arc<AtomicBool>);

impl Abandoned {
    pub fn set(&self) {
        self.0.store(true, Ordering::Relaxed);
    }

    pub fn is_set(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

/// Bytes read beyond a requested start when the length is not known (a page header).
const HEADER_READ: u64 = 64 << 10;

impl Ranged {
    /// The object `meta` lists, read on `runtime` from a thread outside its workers (a thread
    /// of the caller's own: a read may need one of the runtime's blocking threads).
    pub fn new(store: Arc<dyn ObjectStore>, meta: &object_store::ObjectMeta, runtime: tokio::runtime::Handle) -> Self {
        Ranged::until(store, meta, runtime, Abandoned::default())
    }

    /// [`Ranged::new`], whose reads fail once `abandoned` is set.
    pub fn until(
        store: Arc<dyn ObjectStore>,
        meta: &object_store::ObjectMeta,
        runtime: tokio::runtime::Handle,
        abandoned: Abandoned,
    ) -> Self {
        Ranged(Arc::new(Inner {
            store,
            location: meta.location.clone(),
            e_tag: Mutex::new(None),
            len: meta.size,
            runtime,
            held: Mutex::new(None),
            failure: Mutex::new(None),
            abandoned,
        }))
    }

    fn fetch(&self, range: Range<u64>) -> Result<Bytes, String> {
        let i = &self.0;
        if i.abandoned.is_set() {
            return Err("the reading was abandoned: nobody waits for it any more".into());
        }
        let opts = object_store::GetOptions { range: Some(range.clone().into()), ..Default::default() };
        let got = i.runtime.block_on(async {
            let got = i.store.get_opts(&i.location, opts).await?;
            let meta = got.meta.clone();
            Ok::<_, object_store::Error>((meta, got.bytes().await?))
        });
        let (meta, bytes) = got.map_err(|e| e.to_string())?;
        // Its footer is read at the size listed.
        if meta.size != i.len {
            return Err(format!("the object was rewritten since it was listed ({} bytes, now {})", i.len, meta.size));
        }
        let e_tag = meta.e_tag;
        let mut first = i.e_tag.lock().unwrap_or_else(|e| e.into_inner());
        match (first.as_ref(), e_tag) {
            (Some(a), Some(b)) if *a != b => {
                return Err(format!("the object was rewritten while it was read (version {a}, then {b})"));
            }
            (None, Some(b)) => *first = Some(b),
            _ => {}
        }
        drop(first);
        if bytes.len() as u64 != range.end - range.start {
            return Err(format!("the store gave {} bytes for a range of {}", bytes.len(), range.end - range.start));
        }
        Ok(bytes)
    }

    /// `start..end`, from the span held or the store; a range past the object's end is an
    /// error, as it is for bytes in memory.
    fn bytes(&self, start: u64, end: u64) -> parquet::errors::Result<Bytes> {
        if start > end || end > self.0.len {
            return Err(ParquetError::EOF(format!(
                "a read of bytes {start}..{end}, past the object's {} bytes",
                self.0.len
            )));
        }
        if let Some((at, held)) = self.0.held.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
            if start >= *at && end <= at + held.len() as u64 {
                return Ok(held.slice((start - at) as usize..(end - at) as usize));
            }
        }
        self.fetch(start..end).map_err(|m| {
            *self.0.failure.lock().unwrap_or_else(|e| e.into_inner()) = Some(m.clone());
            ParquetError::External(m.into())
        })
    }
}

/// An object read from its start to its end, `step` bytes a request ([`Ranged::sequential`]).
pub struct Sequential {
    ranged: Ranged,
    at: u64,
    step: u64,
    buf: Bytes,
}

impl Ranged {
    /// The object as a reader, read from its store `step` bytes at a time; a failed read is
    /// also kept as [`Held::failure`].
    pub fn sequential(&self, step: u64) -> Sequential {
        Sequential { ranged: self.clone(), at: 0, step: step.max(1), buf: Bytes::new() }
    }
}

impl std::io::Read for Sequential {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        use bytes::Buf;
        if self.buf.is_empty() {
            let len = self.ranged.0.len;
            if self.at >= len || out.is_empty() {
                return Ok(0);
            }
            let end = self.at.saturating_add(self.step).min(len);
            self.buf = self.ranged.bytes(self.at, end).map_err(|e| std::io::Error::other(e.to_string()))?;
            self.at = end;
        }
        let n = out.len().min(self.buf.len());
        out[..n].copy_from_slice(&self.buf[..n]);
        self.buf.advance(n);
        Ok(n)
    }
}

impl Length for Ranged {
    fn len(&self) -> u64 {
        self.0.len
    }
}

impl ChunkReader for Ranged {
    type T = bytes::buf::Reader<Bytes>;

    fn get_read(&self, start: u64) -> parquet::errors::Result<Self::T> {
        use bytes::Buf;
        // To the end of the span held, when `start` is in it; else a header's worth.
        let end = match self.0.held.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
            Some((at, held)) if start >= *at && start < at + held.len() as u64 => at + held.len() as u64,
            _ => start.saturating_add(HEADER_READ).min(self.0.len),
        };
        Ok(self.bytes(start, end)?.reader())
    }

    fn get_bytes(&self, start: u64, length: usize) -> parquet::errors::Result<Bytes> {
        self.bytes(start, start.saturating_add(length as u64))
    }
}

impl Held for Ranged {
    fn hold(&self, span: Range<u64>) -> Result<(), String> {
        // The span before is let go first: never two held at once.
        *self.0.held.lock().unwrap_or_else(|e| e.into_inner()) = None;
        let bytes = self.fetch(span.clone())?;
        *self.0.held.lock().unwrap_or_else(|e| e.into_inner()) = Some((span.start, bytes));
        Ok(())
    }

    fn failure(&self) -> Option<String> {
        self.0.failure.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::memory::InMemory;
    use object_store::ObjectStoreExt;

    /// Reads within the span held come from it; reads past the object's end are errors, as
    /// in memory; an object rewritten between two reads fails the second, and one whose size
    /// is not the listed one fails the first.
    #[test]
    fn reads_come_from_the_span_held_and_one_version_of_the_object() {
        let rt = tokio::runtime::Runtime::new().unwrap();
        let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let path = Path::from("a.parquet");
        let bytes: Vec<u8> = (0..=255u8).cycle().take(1000).collect();
        rt.block_on(store.put(&path, bytes.clone().into())).unwrap();
        let meta = rt.block_on(store.head(&path)).unwrap();
        let r = Ranged::new(store.clone(), &meta, rt.handle().clone());
        r.hold(100..400).unwrap();
        assert_eq!(&r.get_bytes(150, 50).unwrap()[..], &bytes[150..200]);
        let mut rest = Vec::new();
        std::io::Read::read_to_end(&mut r.get_read(390).unwrap(), &mut rest).unwrap();
        assert_eq!(rest, &bytes[390..400], "a reader to the end of the span held");
        assert_eq!(&r.get_bytes(900, 100).unwrap()[..], &bytes[900..], "outside the span: from the store");
        assert!(r.get_bytes(990, 11).is_err(), "past the end");
        assert!(r.failure().is_none());
        // Rewritten (another version, the same length): the next read from the store fails.
        rt.block_on(store.put(&path, vec![7u8; 1000].into())).unwrap();
        assert_eq!(&r.get_bytes(150, 50).unwrap()[..], &bytes[150..200], "the span held is the first version");
        assert!(r.get_bytes(0, 4).is_err());
        assert!(r.failure().is_some_and(|m| m.contains("rewritten")), "{:?}", r.failure());
        // Rewritten to another size since it was listed: the first read fails.
        rt.block_on(store.put(&path, vec![7u8; 1200].into())).unwrap();
        let r = Ranged::new(store.clone(), &meta, rt.handle().clone());
        assert!(r.get_bytes(992, 8).is_err());
        assert!(r.failure().is_some_and(|m| m.contains("since it was listed")), "{:?}", r.failure());
    }
}
