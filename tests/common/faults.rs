//! A wrapper store that injects faults: fail the Nth call, "crash" at the Nth call (that call
//! and every later one fail, as if the process had died), or hold calls on matching paths at a
//! gate until the test opens it. It counts every call, so a harness can crash at each index.

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::BoxStream;
use futures::StreamExt;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore, PutMultipartOptions,
    PutOptions, PutPayload, PutResult, RenameOptions, Result,
};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Only the call with this index fails.
    FailAt(usize),
    /// The call with this index and every later one fail.
    CrashAt(usize),
    None,
}

#[derive(Debug)]
pub struct FaultStore {
    inner: Arc<dyn ObjectStore>,
    calls: AtomicUsize,
    mode: Mutex<Mode>,
    crashed: AtomicBool,
    gate: Mutex<Option<(String, Arc<tokio::sync::Semaphore>)>>,
    arrived: Arc<tokio::sync::Notify>,
}

impl fmt::Display for FaultStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "FaultStore({})", self.inner)
    }
}

impl FaultStore {
    pub fn new(inner: Arc<dyn ObjectStore>, mode: Mode) -> Arc<Self> {
        Arc::new(FaultStore {
            inner,
            calls: AtomicUsize::new(0),
            mode: Mutex::new(mode),
            crashed: AtomicBool::new(false),
            gate: Mutex::new(None),
            arrived: Arc::new(tokio::sync::Notify::new()),
        })
    }
    pub fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }
    pub fn crashed(&self) -> bool {
        self.crashed.load(Ordering::SeqCst)
    }
    /// Holds writes to paths containing `pattern` until the returned semaphore gets permits;
    /// the notify fires when a call arrives at the gate.
    pub fn gate(&self, pattern: &str) -> (Arc<tokio::sync::Semaphore>, Arc<tokio::sync::Notify>) {
        let s = Arc::new(tokio::sync::Semaphore::new(0));
        *self.gate.lock().unwrap() = Some((pattern.to_string(), s.clone()));
        (s, self.arrived.clone())
    }

    fn fault(&self, what: &str, path: &str) -> Result<()> {
        let i = self.calls.fetch_add(1, Ordering::SeqCst);
        let mode = *self.mode.lock().unwrap();
        let hit = match mode {
            Mode::FailAt(n) => i == n,
            Mode::CrashAt(n) => {
                if i >= n {
                    self.crashed.store(true, Ordering::SeqCst);
                }
                i >= n
            }
            Mode::None => false,
        };
        if hit {
            return Err(object_store::Error::Generic {
                store: "fault",
                source: format!("injected fault at call {i} ({what} {path})").into(),
            });
        }
        Ok(())
    }

    async fn pass_gate(&self, path: &Path) {
        let gate = self.gate.lock().unwrap().clone();
        if let Some((pattern, sem)) = gate {
            if path.as_ref().contains(&pattern) {
                self.arrived.notify_one();
                let _ = sem.acquire().await.map(|p| p.forget());
            }
        }
    }
}

#[async_trait]
impl ObjectStore for FaultStore {
    async fn put_opts(&self, location: &Path, payload: PutPayload, opts: PutOptions) -> Result<PutResult> {
        self.pass_gate(location).await;
        self.fault("put", location.as_ref())?;
        self.inner.put_opts(location, payload, opts).await
    }
    async fn put_multipart_opts(&self, location: &Path, opts: PutMultipartOptions) -> Result<Box<dyn MultipartUpload>> {
        self.fault("put_multipart", location.as_ref())?;
        self.inner.put_multipart_opts(location, opts).await
    }
    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        self.fault("get", location.as_ref())?;
        self.inner.get_opts(location, options).await
    }
    async fn get_ranges(&self, location: &Path, ranges: &[std::ops::Range<u64>]) -> Result<Vec<Bytes>> {
        self.fault("get_ranges", location.as_ref())?;
        self.inner.get_ranges(location, ranges).await
    }
    fn delete_stream(&self, locations: BoxStream<'static, Result<Path>>) -> BoxStream<'static, Result<Path>> {
        match self.fault("delete", "") {
            Ok(()) => self.inner.delete_stream(locations),
            Err(e) => futures::stream::once(async move { Err(e) }).boxed(),
        }
    }
    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        match self.fault("list", prefix.map(|p| p.as_ref()).unwrap_or("")) {
            Ok(()) => self.inner.list(prefix),
            Err(e) => futures::stream::once(async move { Err(e) }).boxed(),
        }
    }
    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        self.fault("list_with_delimiter", prefix.map(|p| p.as_ref()).unwrap_or(""))?;
        self.inner.list_with_delimiter(prefix).await
    }
    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> Result<()> {
        self.fault("copy", from.as_ref())?;
        self.inner.copy_opts(from, to, options).await
    }
    async fn rename_opts(&self, from: &Path, to: &Path, options: RenameOptions) -> Result<()> {
        self.pass_gate(to).await;
        self.fault("rename", from.as_ref())?;
        self.inner.rename_opts(from, to, options).await
    }
}
