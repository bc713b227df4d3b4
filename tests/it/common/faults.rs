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
    /// The call with this index takes effect, then reports an error (a timeout after success).
    LieAt(usize),
    None,
}

/// A store in a fault schedule. Stores made [`FaultStore::beside`] one another share it: one
/// count of calls, one crash — the process dying at call `i`, whichever store it was talking to.
#[derive(Debug)]
pub struct FaultStore {
    inner: Arc<dyn ObjectStore>,
    schedule: Arc<Schedule>,
}

impl std::ops::Deref for FaultStore {
    type Target = Schedule;
    fn deref(&self) -> &Schedule {
        &self.schedule
    }
}

/// What stores in one fault schedule share.
#[derive(Debug)]
pub struct Schedule {
    /// Reads of paths containing this fail with a "permission denied" error.
    deny: Mutex<Option<String>>,
    /// The next conditional update of a path containing this takes effect, then reports an
    /// error (its answer lost).
    lose_update: Mutex<Option<String>>,
    /// Updates applied whose answer was lost.
    pub updates_lost: AtomicUsize,
    /// Reads refused by `deny`.
    pub denied: AtomicUsize,
    calls: AtomicUsize,
    mode: Mutex<Mode>,
    crashed: AtomicBool,
    gate: Mutex<Option<(String, Arc<tokio::sync::Semaphore>)>>,
    /// Reads of paths containing the pattern wait here, as writes do at `gate`.
    read_gate: Mutex<Option<(String, Arc<tokio::sync::Semaphore>)>>,
    arrived: Arc<tokio::sync::Notify>,
    /// Multipart uploads started.
    pub multipart: AtomicUsize,
    /// Objects read (`get` calls).
    pub gets: AtomicUsize,
    /// Bytes served by reads (whole objects and ranges).
    pub bytes_read: std::sync::atomic::AtomicU64,
    /// Part index (from 0) at which every multipart upload fails, if any.
    fail_part: Mutex<Option<usize>>,
    /// Multipart uploads aborted.
    pub aborts: Arc<AtomicUsize>,
}

impl fmt::Display for FaultStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "FaultStore({})", self.inner)
    }
}

impl FaultStore {
    pub fn new(inner: Arc<dyn ObjectStore>, mode: Mode) -> Arc<Self> {
        Arc::new(FaultStore { inner, schedule: Arc::new(Schedule::new(mode)) })
    }

    /// `inner` in this store's fault schedule.
    pub fn beside(&self, inner: Arc<dyn ObjectStore>) -> Arc<Self> {
        Arc::new(FaultStore { inner, schedule: self.schedule.clone() })
    }

    /// Wraps a job's table and state stores in one schedule; the table's wrapper is returned.
    pub fn wrap_output(job: &mut lakeswap::Job, mode: Mode) -> Arc<Self> {
        let f = FaultStore::new(job.output.store.clone(), mode);
        job.state.store = f.beside(job.state.store.clone());
        job.output.store = f.clone();
        f
    }
}

impl Schedule {
    fn new(mode: Mode) -> Schedule {
        Schedule {
            deny: Mutex::new(None),
            lose_update: Mutex::new(None),
            updates_lost: AtomicUsize::new(0),
            denied: AtomicUsize::new(0),
            calls: AtomicUsize::new(0),
            mode: Mutex::new(mode),
            crashed: AtomicBool::new(false),
            gate: Mutex::new(None),
            read_gate: Mutex::new(None),
            arrived: Arc::new(tokio::sync::Notify::new()),
            multipart: AtomicUsize::new(0),
            gets: AtomicUsize::new(0),
            bytes_read: std::sync::atomic::AtomicU64::new(0),
            fail_part: Mutex::new(None),
            aborts: Arc::new(AtomicUsize::new(0)),
        }
    }
}

impl FaultStore {
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

    /// Holds reads (`get`) of paths containing `pattern` as [`FaultStore::gate`] holds writes.
    pub fn gate_reads(&self, pattern: &str) -> (Arc<tokio::sync::Semaphore>, Arc<tokio::sync::Notify>) {
        let s = Arc::new(tokio::sync::Semaphore::new(0));
        *self.read_gate.lock().unwrap() = Some((pattern.to_string(), s.clone()));
        (s, self.arrived.clone())
    }

    /// Part `n` (from 0) of every multipart upload fails.
    pub fn fail_part(&self, n: usize) {
        *self.fail_part.lock().unwrap() = Some(n);
    }

    /// Reads of paths containing `pattern` fail as if permission were denied.
    pub fn deny(&self, pattern: &str) {
        *self.deny.lock().unwrap() = Some(pattern.to_string());
    }

    /// Reads are no longer refused (see [`FaultStore::deny`]).
    pub fn allow(&self) {
        *self.deny.lock().unwrap() = None;
    }

    /// The next conditional update (`PutMode::Update`) of a path containing `pattern` is
    /// applied and answered with an error, as a timeout after the store applied it.
    pub fn lose_update(&self, pattern: &str) {
        *self.lose_update.lock().unwrap() = Some(pattern.to_string());
    }

    /// Runs `op`, applying the fault schedule to call number `i`.
    async fn call<T>(&self, what: &str, path: &str, op: impl std::future::Future<Output = Result<T>>) -> Result<T> {
        if let Some(p) = self.deny.lock().unwrap().clone() {
            if path.contains(&p) && what.starts_with("get") {
                self.denied.fetch_add(1, Ordering::SeqCst);
                let e = std::io::Error::new(std::io::ErrorKind::PermissionDenied, "Permission denied (os error 13)");
                return Err(object_store::Error::Generic { store: "LocalFileSystem", source: Box::new(e) });
            }
        }
        let i = self.calls.load(Ordering::SeqCst);
        if matches!(*self.mode.lock().unwrap(), Mode::LieAt(n) if n == i) {
            self.calls.fetch_add(1, Ordering::SeqCst);
            let _ = op.await;
            return Err(object_store::Error::Generic {
                store: "fault",
                source: format!("injected timeout after success at call {i} ({what} {path})").into(),
            });
        }
        self.fault(what, path)?;
        op.await
    }

    fn fault(&self, what: &str, path: &str) -> Result<()> {
        let i = self.calls.fetch_add(1, Ordering::SeqCst);
        let mode = *self.mode.lock().unwrap();
        let hit = match mode {
            Mode::LieAt(_) => false,
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
        Self::wait_at(gate, path, &self.arrived).await;
    }

    async fn wait_at(gate: Option<(String, Arc<tokio::sync::Semaphore>)>, path: &Path, arrived: &tokio::sync::Notify) {
        if let Some((pattern, sem)) = gate {
            if path.as_ref().contains(&pattern) {
                arrived.notify_one();
                let _ = sem.acquire().await.map(|p| p.forget());
            }
        }
    }
}

#[async_trait]
impl ObjectStore for FaultStore {
    async fn put_opts(&self, location: &Path, payload: PutPayload, opts: PutOptions) -> Result<PutResult> {
        self.pass_gate(location).await;
        if matches!(opts.mode, object_store::PutMode::Update(_)) {
            let lost = {
                let mut lose = self.lose_update.lock().unwrap();
                lose.take_if(|p| location.as_ref().contains(p.as_str())).is_some()
            };
            if lost {
                self.inner.put_opts(location, payload, opts).await?;
                self.updates_lost.fetch_add(1, Ordering::SeqCst);
                return Err(object_store::Error::Generic {
                    store: "fault",
                    source: format!("injected timeout after the update of {location} was applied").into(),
                });
            }
        }
        self.call("put", location.as_ref(), self.inner.put_opts(location, payload, opts)).await
    }
    async fn put_multipart_opts(&self, location: &Path, opts: PutMultipartOptions) -> Result<Box<dyn MultipartUpload>> {
        self.multipart.fetch_add(1, Ordering::SeqCst);
        let inner =
            self.call("put_multipart", location.as_ref(), self.inner.put_multipart_opts(location, opts)).await?;
        let fail_part = *self.fail_part.lock().unwrap();
        Ok(Box::new(FaultUpload { inner, parts: 0, fail_part, aborts: self.aborts.clone() }))
    }
    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        self.gets.fetch_add(1, Ordering::SeqCst);
        let gate = self.read_gate.lock().unwrap().clone();
        Self::wait_at(gate, location, &self.arrived).await;
        let head = options.head;
        let got = self.call("get", location.as_ref(), self.inner.get_opts(location, options)).await;
        if let (Ok(g), false) = (&got, head) {
            self.bytes_read.fetch_add(g.range.end - g.range.start, Ordering::SeqCst);
        }
        got
    }
    async fn get_ranges(&self, location: &Path, ranges: &[std::ops::Range<u64>]) -> Result<Vec<Bytes>> {
        self.call("get_ranges", location.as_ref(), self.inner.get_ranges(location, ranges)).await
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
        self.call(
            "list_with_delimiter",
            prefix.map(|p| p.as_ref()).unwrap_or(""),
            self.inner.list_with_delimiter(prefix),
        )
        .await
    }
    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> Result<()> {
        self.call("copy", from.as_ref(), self.inner.copy_opts(from, to, options)).await
    }
    async fn rename_opts(&self, from: &Path, to: &Path, options: RenameOptions) -> Result<()> {
        self.pass_gate(to).await;
        self.call("rename", from.as_ref(), self.inner.rename_opts(from, to, options)).await
    }
}

/// A multipart upload whose part `fail_part` fails; counts aborts.
#[derive(Debug)]
struct FaultUpload {
    inner: Box<dyn MultipartUpload>,
    parts: usize,
    fail_part: Option<usize>,
    aborts: Arc<AtomicUsize>,
}

#[async_trait]
impl MultipartUpload for FaultUpload {
    fn put_part(&mut self, data: PutPayload) -> object_store::UploadPart {
        let i = self.parts;
        self.parts += 1;
        if self.fail_part == Some(i) {
            return Box::pin(async move {
                Err(object_store::Error::Generic {
                    store: "fault",
                    source: format!("injected fault in part {i}").into(),
                })
            });
        }
        self.inner.put_part(data)
    }
    async fn complete(&mut self) -> Result<PutResult> {
        self.inner.complete().await
    }
    async fn abort(&mut self) -> Result<()> {
        self.aborts.fetch_add(1, Ordering::SeqCst);
        self.inner.abort().await
    }
}
