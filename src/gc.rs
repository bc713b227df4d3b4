//! Cleanup of what crashed runs leave behind (G4): staged files under `_staging/<run_id>/`,
//! expired leases, and (on a local folder) the temporary files of interrupted writes.
//!
//! Staging of a partition is stale unless the partition's lease is live and held by the run
//! that staged it; a live run's staging is never touched. Staging is never the committed
//! copy of a partition (the swap writes or renames into `<col>=<date>/`), so removing stale
//! staging can never lose committed data. Every `run` does this for its own partitions once
//! it holds their leases; `lakeswap gc` does it for the whole output.

use chrono::Utc;
use futures::TryStreamExt;
use object_store::ObjectStoreExt;
use serde::Serialize;

use crate::error::{Error, Result};
use crate::lease;
use crate::store::StoreLocation;

/// What `gc` removed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct GcReport {
    pub expired_leases: usize,
    pub staging_removed: usize,
    pub staging_kept: usize,
    /// Temporary files of interrupted writes on a local folder (`<name>#<n>`).
    pub temp_files_removed: usize,
}

async fn list(out: &StoreLocation, parts: &[&str]) -> Result<Vec<object_store::ObjectMeta>> {
    let prefix = out.child(parts);
    out.store.list(Some(&prefix)).try_collect().await.map_err(|e| Error::store("cannot list", out.display(&prefix), e))
}

async fn delete(out: &StoreLocation, path: &object_store::path::Path) -> Result<()> {
    match out.store.delete(path).await {
        Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
        Err(e) => Err(Error::store("cannot delete", out.display(path), e)),
    }
}

/// The `(run id, partition folder)` pairs under `_staging/`.
async fn staging_pairs(out: &StoreLocation) -> Result<Vec<(String, String)>> {
    let root = out.child(&["_staging"]);
    if let Some(runs) = out.local_subdirs(&root) {
        let mut pairs = Vec::new();
        for run in runs {
            for dir in out.local_subdirs(&out.child(&["_staging", &run])).unwrap_or_default() {
                pairs.push((run.clone(), dir));
            }
        }
        return Ok(pairs);
    }
    let mut pairs: Vec<(String, String)> = list(out, &["_staging"])
        .await?
        .iter()
        .filter_map(|m| {
            let rel = out.relative(&m.location);
            let mut parts = rel.split('/').skip(1);
            Some((parts.next()?.to_string(), parts.next()?.to_string()))
        })
        .collect();
    pairs.sort();
    pairs.dedup();
    Ok(pairs)
}

/// Removes staged files of other runs: for the partition folders in `dirs` (whose leases the
/// caller holds), or, with `None`, wherever the staging run does not hold a live lease.
/// Returns the number of (run, partition) staging folders removed and kept.
pub async fn remove_stale_staging(
    out: &StoreLocation,
    own_run: &str,
    dirs: Option<&[String]>,
) -> Result<(usize, usize)> {
    let (mut removed, mut kept) = (0, 0);
    for (run, dir) in staging_pairs(out).await? {
        if run == own_run || dirs.is_some_and(|d| !d.contains(&dir)) {
            continue;
        }
        let stale = dirs.is_some()
            || match lease::read(out, &lease::lease_path(out, &dir)).await {
                Ok(Some((Some(b), _))) => !(b.run_id == run && b.expires > Utc::now()),
                Ok(_) => true,
                Err(_) => false,
            };
        if !stale {
            kept += 1;
            continue;
        }
        for m in list(out, &["_staging", &run, &dir]).await? {
            delete(out, &m.location).await?;
        }
        // On a local folder, also the temporary files of a write that was interrupted.
        if let Some(p) = out.local_path(&out.child(&["_staging", &run, &dir])) {
            let _ = std::fs::remove_dir_all(p);
        }
        removed += 1;
    }
    out.tidy(&out.child(&["_staging"]));
    Ok((removed, kept))
}

/// Removes expired leases and stale staging under the output.
pub async fn gc(out: &StoreLocation) -> Result<GcReport> {
    let mut report = GcReport::default();
    let now = Utc::now();
    for m in list(out, &["_lakeswap", "leases"]).await? {
        let name = m.location.filename().unwrap_or_default().to_string();
        let expired = if name.contains(".json.expired-") {
            true
        } else if name.ends_with(".json") {
            match lease::read(out, &m.location).await {
                Ok(Some((Some(b), _))) => b.expires <= now,
                Ok(Some((None, _))) => true,
                _ => false,
            }
        } else {
            false
        };
        if expired {
            delete(out, &m.location).await?;
            report.expired_leases += 1;
        }
    }
    let (removed, kept) = remove_stale_staging(out, "", None).await?;
    report.staging_removed = removed;
    report.staging_kept = kept;
    report.temp_files_removed = remove_temp_files(out);
    Ok(report)
}

/// On a local folder, removes the temporary files that interrupted writes left anywhere under
/// the output — `<name>#<n>`, which the object store API neither lists nor overwrites — once
/// they are older than [`lease::TEMP_FILE_AGE`] (a younger one may be a write in flight).
fn remove_temp_files(out: &StoreLocation) -> usize {
    fn is_temp(name: &str) -> bool {
        name.rsplit_once('#')
            .is_some_and(|(base, n)| !base.is_empty() && !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
    }
    fn walk(dir: &std::path::Path, removed: &mut usize) {
        let Ok(rd) = std::fs::read_dir(dir) else { return };
        for e in rd.flatten() {
            let Ok(meta) = e.metadata() else { continue };
            if meta.is_dir() {
                walk(&e.path(), removed);
            } else if is_temp(&e.file_name().to_string_lossy())
                && meta.modified().is_ok_and(|t| t.elapsed().unwrap_or_default() > lease::TEMP_FILE_AGE)
                && std::fs::remove_file(e.path()).is_ok()
            {
                *removed += 1;
            }
        }
    }
    let mut removed = 0;
    if let Some(root) = out.local_path(&out.child(&[])) {
        walk(&root, &mut removed);
    }
    removed
}
