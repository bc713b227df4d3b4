//! Leases: one writer per partition at a time (G6).
//!
//! A lease is the object `STATE/leases/<col>=<date>.json` naming its holder (run id,
//! host, pid, since, expiry). It is taken with a put-if-absent, renewed while the holder lives,
//! and released after the partition is committed. A holder that died stops renewing, so its
//! lease expires and the next run takes it over — a retry is never blocked forever. A holder
//! that died on this very host (an OOM kill, a SIGKILL) is known dead at once: its lease names
//! the process precisely ([`Process`]: boot id, pid namespace, start time), and a run on the same
//! host that finds that process gone takes the lease over without waiting for it to expire.
//!
//! Taking over an expired lease is itself a compare-and-swap, done by the store's
//! [`Protocol`](crate::store::Protocol): on object stores a conditional put against the expired
//! lease's e-tag; on a local folder (no conditional update there) the expired lease is first
//! renamed aside, which only one contender can do, and checked to be the one that was read. A holder that finds its lease gone, or past its expiry, stops before
//! swapping anything in ([`Leases::check`]); the swap's own compare-and-swap stays the last
//! line of defence.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use chrono::{DateTime, Utc};
use object_store::path::Path;
use object_store::{ObjectStoreExt, PutMode, PutOptions, UpdateVersion};
use serde::{Deserialize, Serialize};

use crate::error::PartitionError;
use crate::store::StoreLocation;

/// Temporary files of interrupted writes older than this are debris.
pub const TEMP_FILE_AGE: Duration = Duration::from_secs(600);

/// What a lease object says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseBody {
    pub run_id: String,
    pub host: String,
    pub pid: u32,
    pub since: DateTime<Utc>,
    pub expires: DateTime<Utc>,
    /// Which process on `host` holds it, precisely enough to tell it died (Linux).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub process: Option<Process>,
}

/// A process told apart from any other on its machine, before and after a reboot or a pid's
/// reuse: the kernel's boot id, the pid namespace (containers on one node) and the process's
/// start time in clock ticks since boot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Process {
    pub boot: String,
    pub pid_namespace: String,
    pub start_ticks: u64,
}

impl Process {
    /// This process; `None` where /proc does not tell (not Linux, or a /proc of another pid
    /// namespace than this process's).
    pub fn current() -> Option<Process> {
        let me = std::process::id();
        let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
        if stat.split_whitespace().next()?.parse::<u32>().ok()? != me {
            return None;
        }
        Some(Process {
            boot: std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?.trim().to_string(),
            pid_namespace: pid_namespace()?,
            start_ticks: start_ticks(me)?,
        })
    }
}

fn pid_namespace() -> Option<String> {
    Some(std::fs::read_link("/proc/self/ns/pid").ok()?.to_string_lossy().into_owned())
}

/// Field 22 of `/proc/<pid>/stat`: when the process started, in clock ticks since boot.
fn start_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may hold spaces and parentheses itself.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// Whether `/proc/<pid>/stat` shows a process that has exited (zombie `Z`, or dead `X`).
fn exited(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return false };
    let state = stat.rfind(')').and_then(|i| stat[i + 1..].split_whitespace().next());
    matches!(state, Some("Z" | "X" | "x"))
}

/// Whether a lease's holder is known to be gone: it ran on this host, under this kernel boot,
/// in this pid namespace, and its pid is either not running or running a process that started
/// at another time (the pid was reused). Anything less certain (another host, a lease written
/// without a process identity) is not known to be gone: that lease expires instead.
pub fn holder_gone(holder: &LeaseBody) -> bool {
    let (Some(theirs), Some(mine)) = (&holder.process, Process::current()) else { return false };
    if holder.host != crate::journal::host() || theirs.boot != mine.boot || theirs.pid_namespace != mine.pid_namespace {
        return false;
    }
    match start_ticks(holder.pid) {
        // A process that has exited but is not yet reaped by its parent (a zombie) holds
        // nothing: a retry right after `kill -9` need not wait for the parent.
        Some(_) if exited(holder.pid) => true,
        // Running, but a process that started at another time: the pid was reused.
        Some(ticks) => ticks != theirs.start_ticks,
        // Not readable: gone only if the kernel says no such process (a /proc mounted with
        // `hidepid`, or no file descriptor left, must not make a live run look dead).
        None => no_such_process(holder.pid),
    }
}

#[cfg(unix)]
fn no_such_process(pid: u32) -> bool {
    let Ok(pid) = i32::try_from(pid) else { return false };
    if pid <= 0 {
        return false;
    }
    // SAFETY: signal 0 only checks whether the process exists; nothing is sent.
    let r = unsafe { libc::kill(pid, 0) };
    r != 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
}

#[cfg(not(unix))]
fn no_such_process(_: u32) -> bool {
    false
}

#[derive(Debug, Clone)]
struct Held {
    body: LeaseBody,
    version: UpdateVersion,
    lost: bool,
    /// Why the last renewal failed, when the store failed it (cleared by one that succeeds).
    unrenewed: Option<String>,
}

impl Held {
    /// A lease just taken. One whose taking took the store longer than its time to live was
    /// born expired, for the store's slowness.
    fn taken(body: LeaseBody, version: UpdateVersion) -> Held {
        let late = Utc::now() >= body.expires;
        let unrenewed = late.then(|| "the store took longer than the lease's time to live to write it".to_string());
        Held { body, version, lost: false, unrenewed }
    }
}

/// The leases of one run.
#[derive(Debug)]
pub struct Leases {
    state: StoreLocation,
    run_id: String,
    ttl: Duration,
    wait: bool,
    process: Option<Process>,
    held: Mutex<BTreeMap<String, Held>>,
    /// A renewal pass holds it exclusively, a release shared: a lease released while a pass
    /// is renewing it is deleted after that pass's write, never before it (a local folder's
    /// renewal is a read then a plain put, which would otherwise bring a released lease back).
    renewing: tokio::sync::RwLock<()>,
    /// When the renewal pass under way fell due, if one is: a lease that expires while the pass
    /// waits for the store (its own renewal, another's, or a release it waits behind) expired
    /// for the store's want of an answer.
    pass_since: Mutex<Option<DateTime<Utc>>>,
}

/// The lease of the table as a whole (held by a merge, and by the run that makes a table).
pub const TABLE: &str = "_merge";

/// A lease's name in messages: its partition folder, or the table.
fn shown(dir: &str) -> String {
    match dir {
        TABLE => "the table".to_string(),
        dir => dir.to_string(),
    }
}

/// The lease object of a partition folder.
pub fn lease_path(state: &StoreLocation, dir: &str) -> Path {
    state.child(&["leases", &format!("{dir}.json")])
}

fn chrono_ttl(ttl: Duration) -> chrono::Duration {
    chrono::Duration::from_std(ttl).unwrap_or(chrono::Duration::seconds(60))
}

/// Reads a lease: its body (None when unreadable) and version. `Ok(None)`: no lease.
pub async fn read(
    out: &StoreLocation,
    path: &Path,
) -> Result<Option<(Option<LeaseBody>, UpdateVersion)>, PartitionError> {
    match out.store.get(path).await {
        Ok(r) => {
            let version = UpdateVersion { e_tag: r.meta.e_tag.clone(), version: r.meta.version.clone() };
            let bytes =
                r.bytes().await.map_err(|e| PartitionError::store("cannot read the lease", out.display(path), e))?;
            Ok(Some((serde_json::from_slice(&bytes).ok(), version)))
        }
        Err(object_store::Error::NotFound { .. }) => Ok(None),
        Err(e) => Err(PartitionError::store("cannot read the lease", out.display(path), e)),
    }
}

impl Leases {
    pub fn new(state: StoreLocation, run_id: &str, ttl: Duration, wait: bool) -> Self {
        Leases {
            state,
            run_id: run_id.to_string(),
            ttl,
            wait,
            process: Process::current(),
            held: Mutex::new(BTreeMap::new()),
            renewing: tokio::sync::RwLock::new(()),
            pass_since: Mutex::new(None),
        }
    }

    fn body(&self, since: Option<DateTime<Utc>>) -> LeaseBody {
        let now = Utc::now();
        LeaseBody {
            run_id: self.run_id.clone(),
            host: crate::journal::host(),
            pid: std::process::id(),
            since: since.unwrap_or(now),
            expires: now + chrono_ttl(self.ttl),
            process: self.process.clone(),
        }
    }

    fn held(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Held>> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes the lease of a partition folder, or says who holds it. With `wait`, waits for
    /// the holder to release it or for it to expire.
    pub async fn acquire(&self, dir: &str, stop: &crate::stop::Stop) -> Result<(), PartitionError> {
        self.acquire_waiting(dir, stop, self.wait).await
    }

    /// Removes the lease of `dir` when its holder is gone (died on this host, or let it
    /// expire); one held by a live run stays. One read when there is none.
    pub async fn clear_if_gone(&self, dir: &str, stop: &crate::stop::Stop) {
        if let Ok(Some(_)) = read(&self.state, &lease_path(&self.state, dir)).await {
            if self.acquire_waiting(dir, stop, false).await.is_ok() {
                self.release(dir).await;
            }
        }
    }

    /// [`Leases::acquire`], waiting for a live holder when `wait` (whatever the run's `--wait`).
    pub async fn acquire_waiting(&self, dir: &str, stop: &crate::stop::Stop, wait: bool) -> Result<(), PartitionError> {
        let path = lease_path(&self.state, dir);
        let store_err = |what, e| PartitionError::store(what, self.state.display(&path), e);
        loop {
            // Asked to stop: no new lease. (A put in flight is never abandoned half-way: the
            // lease it takes is recorded, so it is released.)
            stop.check()?;
            let body = self.body(None);
            let bytes = Bytes::from(serde_json::to_vec(&body).unwrap_or_default());
            let create = PutOptions { mode: PutMode::Create, ..Default::default() };
            match self.state.store.put_opts(&path, bytes.clone().into(), create).await {
                Ok(r) => {
                    let version = UpdateVersion { e_tag: r.e_tag, version: r.version };
                    self.held().insert(dir.to_string(), Held::taken(body, version));
                    return Ok(());
                }
                Err(object_store::Error::AlreadyExists { .. }) => {}
                Err(e) => return Err(store_err("cannot take the lease", e)),
            }
            let Some((current, version)) = read(&self.state, &path).await? else { continue };
            let now = Utc::now();
            let gone = current.as_ref().is_some_and(holder_gone);
            if let Some(c) = current.as_ref().filter(|_| !gone) {
                if c.expires > now {
                    if wait {
                        let left = (c.expires - now).to_std().unwrap_or_default();
                        let nap = tokio::time::sleep(left.min(Duration::from_millis(500)) + Duration::from_millis(20));
                        tokio::select! {
                            _ = nap => continue,
                            e = stop.wait() => return Err(e),
                        }
                    }
                    return Err(PartitionError::Leased {
                        holder: c.run_id.clone(),
                        host: format!("{} (pid {})", c.host, c.pid),
                        since: c.since.to_rfc3339(),
                        expires: c.expires.to_rfc3339(),
                        left: (c.expires - now).num_seconds().max(1) as u64,
                    });
                }
            }
            // Expired, unreadable, or its holder died on this host: take it over, as a
            // compare-and-swap.
            if gone {
                tracing::warn!(lease = %self.state.display(&path), run = current.as_ref().map(|c| c.run_id.as_str()).unwrap_or(""),
                    "taking over the lease of a run that died on this host");
            } else if current.is_none() {
                // At the lease's own path, but not a lease lakeswap can read: it would block the
                // partition for ever. Said, since it is replaced.
                tracing::warn!(lease = %self.state.display(&path),
                    "replacing an object at this partition's lease path that is not a lakeswap lease");
            } else {
                tracing::info!(lease = %self.state.display(&path), "taking over an expired lease");
            }
            let protocol = self.state.protocol.clone();
            if let Some(version) = protocol.take_over(&self.state, &path, version, current, bytes, &self.run_id).await?
            {
                self.held().insert(dir.to_string(), Held::taken(body, version));
                return Ok(());
            }
        }
    }

    /// Removes what interrupted lease writes left for `dirs` on a local folder: leases renamed
    /// aside during a takeover, and temporary files (`<dir>.json#N`, invisible to the object
    /// store API) older than [`TEMP_FILE_AGE`] — younger ones may be a contender's write in
    /// flight. One pass over the lease folder, however many partitions.
    pub fn remove_leftovers(&self, dirs: &[String]) {
        let Some(folder) = self.state.local_path(&self.state.child(&["leases"])) else { return };
        let dirs: std::collections::HashSet<&str> = dirs.iter().map(String::as_str).collect();
        let Ok(rd) = std::fs::read_dir(folder) else { return };
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let (dir, aside) = match (name.split_once(".json.expired-"), name.split_once(".json#")) {
                (Some((dir, _)), _) => (dir, true),
                (None, Some((dir, _))) => (dir, false),
                _ => continue,
            };
            let old = || {
                e.metadata().and_then(|m| m.modified()).is_ok_and(|t| t.elapsed().unwrap_or_default() > TEMP_FILE_AGE)
            };
            if dirs.contains(dir) && (aside || old()) {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }

    /// Renews every lease held; marks those found taken as lost.
    pub async fn renew_all(&self) {
        // Due from now, even while it waits for a release talking to the store.
        *self.pass_since.lock().unwrap_or_else(|e| e.into_inner()) = Some(Utc::now());
        let _pass = self.renewing.write().await;
        let dirs: Vec<(String, Held)> =
            self.held().iter().filter(|(_, h)| !h.lost).map(|(d, h)| (d.clone(), h.clone())).collect();
        for (dir, h) in dirs {
            let path = lease_path(&self.state, &dir);
            let body = self.body(Some(h.body.since));
            let bytes = Bytes::from(serde_json::to_vec(&body).unwrap_or_default());
            let protocol = self.state.protocol.clone();
            let result = protocol.renew(&self.state, &path, h.version.clone(), &self.run_id, bytes).await;
            let mut held = self.held();
            let Some(entry) = held.get_mut(&dir) else { continue };
            match result {
                Ok(version) => {
                    entry.body = body;
                    entry.version = version;
                    entry.unrenewed = None;
                }
                Err(object_store::Error::Precondition { .. } | object_store::Error::NotFound { .. }) => {
                    tracing::warn!(lease = %self.state.display(&path), "lease lost to another run");
                    entry.lost = true;
                }
                Err(e) => {
                    tracing::warn!(lease = %self.state.display(&path), error = %e, "cannot renew the lease; will retry");
                    entry.unrenewed = Some(e.to_string());
                }
            }
        }
        *self.pass_since.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }

    /// Whether this run took the lease of `dir` (and has not released it), lost since or not.
    pub fn holds(&self, dir: &str) -> bool {
        self.held().contains_key(dir)
    }

    /// Whether this run may still write the partition: its lease is held, not lost, not expired.
    /// A lease that expired because the store failed its renewals, or did not answer them, is
    /// the store's failure (exit 1), not another run's doing (exit 4).
    pub fn check(&self, dir: &str) -> Result<(), PartitionError> {
        let now = Utc::now();
        let pass = *self.pass_since.lock().unwrap_or_else(|e| e.into_inner());
        let held = self.held();
        let unrenewed = |error: String| Err(PartitionError::LeaseUnrenewed { dir: shown(dir), error });
        match held.get(dir) {
            Some(h) if !h.lost && h.body.expires > now => Ok(()),
            Some(Held { lost: false, unrenewed: Some(error), .. }) => unrenewed(error.clone()),
            Some(Held { lost: false, body, .. }) => match pass {
                Some(since) if since < body.expires => unrenewed(format!(
                    "the renewal of this run's leases, due {:.1} s before it expired, had no answer from the store",
                    (body.expires - since).num_milliseconds() as f64 / 1000.0
                )),
                _ => Err(PartitionError::LeaseLost { dir: shown(dir) }),
            },
            _ => Err(PartitionError::LeaseLost { dir: shown(dir) }),
        }
    }

    /// Releases a partition's lease, if this run still holds it.
    pub async fn release(&self, dir: &str) {
        let Some(h) = self.held().remove(dir) else { return };
        if h.lost {
            return;
        }
        // Removed from `held` first, so a pass that starts now leaves it alone; one under way
        // finishes its write before this reads.
        let _no_pass = self.renewing.read().await;
        let path = lease_path(&self.state, dir);
        if let Ok(Some((Some(b), _))) = read(&self.state, &path).await {
            if b.run_id == self.run_id {
                let _ = self.state.store.delete(&path).await;
            }
        }
    }

    /// Renews the leases every third of their time to live, until dropped.
    pub fn spawn_renewer(self: &Arc<Self>) -> Renewer {
        let me = Arc::clone(self);
        let period = self.ttl / 3;
        let handle = tokio::spawn(async move {
            loop {
                tokio::time::sleep(period).await;
                me.renew_all().await;
            }
        });
        Renewer(handle)
    }
}

/// Stops renewing when dropped.
pub struct Renewer(tokio::task::JoinHandle<()>);

impl Drop for Renewer {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A holder that was killed and not yet reaped by its parent (a zombie) is gone.
    #[test]
    fn an_unreaped_holder_is_gone() {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !exited(pid) && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(exited(pid), "the child never showed as exited");
        let mine = Process::current().unwrap();
        let holder = LeaseBody {
            run_id: "run-b".into(),
            host: crate::journal::host(),
            pid,
            since: Utc::now(),
            expires: Utc::now() + chrono::Duration::seconds(60),
            process: Some(Process { start_ticks: start_ticks(pid).unwrap(), ..mine }),
        };
        assert!(holder_gone(&holder));
        child.wait().unwrap();
        assert!(!exited(std::process::id()));
    }

    /// A lease released while a renewal pass is writing it stays released: on a local folder
    /// a renewal is a read and then a plain put, which used to bring the lease back after the
    /// release had deleted it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_release_during_a_renewal_leaves_no_lease() {
        let dir = tempfile::tempdir().unwrap();
        let url = dir.path().display().to_string();
        let state = crate::store::open(&url, &BTreeMap::new(), "output.state_url", true).unwrap();
        let leases = Arc::new(Leases::new(state.clone(), "run-a", Duration::from_secs(30), false));
        let stop = crate::stop::Stop::default();
        let path = lease_path(&state, "event_date=2026-11-10");
        for _ in 0..300 {
            leases.acquire("event_date=2026-11-10", &stop).await.unwrap();
            let renewing = tokio::spawn({
                let leases = leases.clone();
                async move { leases.renew_all().await }
            });
            leases.release("event_date=2026-11-10").await;
            renewing.await.unwrap();
            assert!(read(&state, &path).await.unwrap().is_none(), "a released lease came back");
        }
    }
}
