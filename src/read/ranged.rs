//! A Parquet object read from its store a row group at a time: the footer, then each row
//! group's column chunks in one ranged read, held until the next row group's replace them.
//! Memory then holds one row group's stored bytes, whatever the object's size, where a whole
//! object would be fetched first (a spilled date's objects larger than a part of the budget).

use std::ops::Range;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use object_store::path::Path;
use object_store::ObjectStore;
use object_store::ObjectStoreExt;
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
    len: u64,
    runtime: tokio::runtime::Handle,
    /// The span held, from its first byte.
    held: Mutex<Option<(u64, Bytes)>>,
    failure: Mutex<Option<String>>,
}

/// Bytes read beyond a requested start when the length is not known (a page header).
const HEADER_READ: u64 = 64 << 10;

impl Ranged {
    /// `len` bytes at `location`, read on `runtime` (from a thread outside it: a blocking task's).
    pub fn new(store: Arc<dyn ObjectStore>, location: Path, len: u64, runtime: tokio::runtime::Handle) -> Self {
        Ranged(Arc::new(Inner { store, location, len, runtime, held: Mutex::new(None), failure: Mutex::new(None) }))
    }

    fn fetch(&self, range: Range<u64>) -> Result<Bytes, String> {
        let i = &self.0;
        let got = i.runtime.block_on(i.store.get_range(&i.location, range.clone()));
        let bytes = got.map_err(|e| e.to_string())?;
        if bytes.len() as u64 != range.end - range.start {
            return Err(format!("the store gave {} bytes for a range of {}", bytes.len(), range.end - range.start));
        }
        Ok(bytes)
    }

    /// `start..end` (`end`: at most the object's length), from the span held or the store.
    fn bytes(&self, start: u64, end: u64) -> parquet::errors::Result<Bytes> {
        let end = end.min(self.0.len);
        if start > end {
            return Err(ParquetError::EOF(format!("a read at {start}, past the object's {} bytes", self.0.len)));
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
            _ => start.saturating_add(HEADER_READ),
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
        let span = span.start..span.end.min(self.0.len);
        let bytes = self.fetch(span.clone())?;
        *self.0.held.lock().unwrap_or_else(|e| e.into_inner()) = Some((span.start, bytes));
        Ok(())
    }

    fn failure(&self) -> Option<String> {
        self.0.failure.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}
