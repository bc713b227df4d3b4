//! The store protocol: the steps of the commit and lease protocols that depend on what the
//! store can do, in one place (docs/design.md, "Commit and lease protocol").
//!
//! - [`ConditionalPut`] — object stores with conditional writes (S3, Azure Blob, GCS, memory):
//!   a partition is swapped in by a put of the whole object `If-Match` the e-tag seen under the
//!   lease (`If-None-Match: *` for a new partition); an expired lease is taken over and a held
//!   one renewed by a put `If-Match` its e-tag.
//! - [`LocalFolder`] — a local file system: `rename(2)` over the old file after checking the
//!   committed object is still the one seen; an expired lease is taken over by renaming it
//!   aside, which only one contender can do. Interrupted writes leave temporary files
//!   (`name#N`) the object store API does not list; this protocol finds and tidies them.
//!
//! A store without conditional writes would be one more implementation of [`Protocol`].

use std::fmt;
use std::path::{Path as FsPath, PathBuf};

use bytes::Bytes;
use futures::future::BoxFuture;
use object_store::path::Path;
use object_store::{ObjectStoreExt, PutMode, PutOptions, UpdateVersion};

use super::StoreLocation;
use crate::commit::{self, Seen};
use crate::error::PartitionError;

/// The store-specific steps of the protocols. See the module documentation.
pub trait Protocol: fmt::Debug + Send + Sync {
    /// A short name, for messages (`rename`, `conditional put`).
    fn name(&self) -> &'static str;

    /// Replaces `target` in `out` by the object `staged` in `state` (whose bytes are `bytes`)
    /// atomically, provided the committed object is still the one `seen`; otherwise
    /// [`PartitionError::Fenced`]. When the outcome is unknown (a timeout), reads the target
    /// back before anything is cleaned up.
    fn swap<'a>(
        &'a self,
        state: &'a StoreLocation,
        staged: &'a Path,
        out: &'a StoreLocation,
        target: &'a Path,
        bytes: Bytes,
        seen: &'a Seen,
    ) -> BoxFuture<'a, Result<(), PartitionError>>;

    /// Takes over the expired lease at `path` — read with `version` and `body` — as a
    /// compare-and-swap: `Some` with the new version when taken, `None` when another run got
    /// there first (read it again).
    fn take_over<'a>(
        &'a self,
        out: &'a StoreLocation,
        path: &'a Path,
        version: UpdateVersion,
        body: Option<crate::lease::LeaseBody>,
        bytes: Bytes,
        run_id: &'a str,
    ) -> BoxFuture<'a, Result<Option<UpdateVersion>, PartitionError>>;

    /// Renews a lease this run holds (`held`): the new version, or
    /// `object_store::Error::Precondition` when another run took it.
    fn renew<'a>(
        &'a self,
        out: &'a StoreLocation,
        path: &'a Path,
        held: UpdateVersion,
        run_id: &'a str,
        bytes: Bytes,
    ) -> BoxFuture<'a, object_store::Result<UpdateVersion>>;

    /// The folder on the local file system, when the store is one.
    fn local_root(&self) -> Option<&FsPath> {
        None
    }
}

fn taken(path: &Path) -> object_store::Error {
    object_store::Error::Precondition { path: path.to_string(), source: "lease taken".into() }
}

/// Object stores with conditional writes.
#[derive(Debug, Default)]
pub struct ConditionalPut;

impl Protocol for ConditionalPut {
    fn name(&self) -> &'static str {
        "conditional put"
    }

    fn swap<'a>(
        &'a self,
        state: &'a StoreLocation,
        staged: &'a Path,
        out: &'a StoreLocation,
        target: &'a Path,
        bytes: Bytes,
        seen: &'a Seen,
    ) -> BoxFuture<'a, Result<(), PartitionError>> {
        Box::pin(async move {
            let fenced = || PartitionError::Fenced { path: out.display(target) };
            let mode = match &seen.meta {
                Some(m) => PutMode::Update(UpdateVersion { e_tag: m.e_tag.clone(), version: m.version.clone() }),
                None => PutMode::Create,
            };
            let res = out.store.put_opts(target, bytes.clone().into(), PutOptions { mode, ..Default::default() }).await;
            match res {
                Ok(_) => {}
                Err(object_store::Error::Precondition { .. } | object_store::Error::AlreadyExists { .. }) => {
                    let _ = state.store.delete(staged).await;
                    return Err(fenced());
                }
                Err(e) => {
                    // Outcome unknown: read the partition back before cleaning anything up.
                    match commit::get(out, target).await {
                        Ok(Some(b)) if b == bytes => {}
                        _ => {
                            return Err(PartitionError::store(
                                "cannot swap in (outcome checked: not committed)",
                                out.display(target),
                                e,
                            ))
                        }
                    }
                }
            }
            state
                .store
                .delete(staged)
                .await
                .or_else(|e| if matches!(e, object_store::Error::NotFound { .. }) { Ok(()) } else { Err(e) })
                .map_err(|e| PartitionError::store("cannot remove the staged copy", state.display(staged), e))?;
            Ok(())
        })
    }

    fn take_over<'a>(
        &'a self,
        out: &'a StoreLocation,
        path: &'a Path,
        version: UpdateVersion,
        _body: Option<crate::lease::LeaseBody>,
        bytes: Bytes,
        _run_id: &'a str,
    ) -> BoxFuture<'a, Result<Option<UpdateVersion>, PartitionError>> {
        Box::pin(async move {
            let update = PutOptions { mode: PutMode::Update(version), ..Default::default() };
            match out.store.put_opts(path, bytes.into(), update).await {
                Ok(r) => Ok(Some(UpdateVersion { e_tag: r.e_tag, version: r.version })),
                Err(object_store::Error::Precondition { .. } | object_store::Error::NotFound { .. }) => Ok(None),
                Err(e) => Err(PartitionError::store("cannot take over the lease", out.display(path), e)),
            }
        })
    }

    fn renew<'a>(
        &'a self,
        out: &'a StoreLocation,
        path: &'a Path,
        held: UpdateVersion,
        run_id: &'a str,
        bytes: Bytes,
    ) -> BoxFuture<'a, object_store::Result<UpdateVersion>> {
        Box::pin(async move {
            let update = |version| PutOptions { mode: PutMode::Update(version), ..Default::default() };
            match out.store.put_opts(path, bytes.clone().into(), update(held)).await {
                Ok(r) => Ok(UpdateVersion { e_tag: r.e_tag, version: r.version }),
                // A renewal the store applied but whose answer was lost (a timeout, a retried
                // put) left `held` behind the stored lease: if the lease still names this run,
                // no run took it (a takeover replaces the run id), so it is renewed from the
                // version read — a compare-and-swap still, against a takeover racing it.
                Err(e @ object_store::Error::Precondition { .. }) => match crate::lease::read(out, path).await {
                    Ok(Some((Some(b), version))) if b.run_id == run_id => {
                        let r = out.store.put_opts(path, bytes.into(), update(version)).await?;
                        Ok(UpdateVersion { e_tag: r.e_tag, version: r.version })
                    }
                    Ok(_) => Err(e),
                    // Whether another run took it is unknown: a failed renewal, tried again at
                    // the next pass (the lease expires, as a store's failure, if none succeeds).
                    Err(read) => Err(object_store::Error::Generic {
                        store: "lease",
                        source: format!("the renewal was refused and the lease could not be read back: {read}").into(),
                    }),
                },
                Err(e) => Err(e),
            }
        })
    }
}

/// A local file system.
#[derive(Debug)]
pub struct LocalFolder {
    /// The folder, canonical.
    pub root: PathBuf,
}

impl Protocol for LocalFolder {
    fn name(&self) -> &'static str {
        "rename"
    }

    fn swap<'a>(
        &'a self,
        state: &'a StoreLocation,
        staged: &'a Path,
        out: &'a StoreLocation,
        target: &'a Path,
        _bytes: Bytes,
        seen: &'a Seen,
    ) -> BoxFuture<'a, Result<(), PartitionError>> {
        Box::pin(async move {
            // The lease keeps other lakeswap runs out; this check catches a commit that happened
            // between planning and now.
            if !seen.same_object(&commit::head(out, target).await?) {
                let _ = state.store.delete(staged).await;
                return Err(PartitionError::Fenced { path: out.display(target) });
            }
            // The state folder and the table are two folders of one file system (checked when
            // the job is opened): one rename(2) between them.
            let (Some(from), Some(to)) = (state.local_path(staged), out.local_path(target)) else {
                return Err(PartitionError::Other(format!(
                    "cannot swap {} into {}: a local table needs a local state folder",
                    state.display(staged),
                    out.display(target)
                )));
            };
            let result = tokio::task::spawn_blocking(move || {
                if let Some(parent) = to.parent() {
                    std::fs::create_dir_all(parent)?;
                }
                std::fs::rename(&from, &to)
            })
            .await
            .unwrap_or_else(|e| Err(std::io::Error::other(e)));
            result.map_err(|e| {
                PartitionError::store(
                    "cannot swap in",
                    out.display(target),
                    object_store::Error::Generic { store: "LocalFileSystem", source: Box::new(e) },
                )
            })
        })
    }

    fn take_over<'a>(
        &'a self,
        out: &'a StoreLocation,
        path: &'a Path,
        _version: UpdateVersion,
        body: Option<crate::lease::LeaseBody>,
        _bytes: Bytes,
        run_id: &'a str,
    ) -> BoxFuture<'a, Result<Option<UpdateVersion>, PartitionError>> {
        Box::pin(async move {
            // Renaming the expired lease aside: only one contender can; then check it is the
            // one that was read, else put it back.
            let aside = Path::from(format!("{path}.expired-{run_id}"));
            match out.store.rename(path, &aside).await {
                Ok(()) => {}
                Err(object_store::Error::NotFound { .. }) => return Ok(None),
                Err(e) => return Err(PartitionError::store("cannot take over the lease", out.display(path), e)),
            }
            let moved = crate::lease::read(out, &aside).await?.and_then(|(b, _)| b);
            if moved != body {
                let _ = out.store.rename_if_not_exists(&aside, path).await;
            }
            let _ = out.store.delete(&aside).await;
            // Taken or not, the lease is free or someone else's now: the caller tries again.
            Ok(None)
        })
    }

    fn renew<'a>(
        &'a self,
        out: &'a StoreLocation,
        path: &'a Path,
        _held: UpdateVersion,
        run_id: &'a str,
        bytes: Bytes,
    ) -> BoxFuture<'a, object_store::Result<UpdateVersion>> {
        Box::pin(async move {
            // No conditional update on a local folder: renew only while the lease still names
            // this run (leases keep lakeswap runs apart; this is not a compare-and-swap).
            match crate::lease::read(out, path).await {
                Ok(Some((Some(b), _))) if b.run_id == run_id => {
                    let r = out.store.put(path, bytes.into()).await?;
                    Ok(UpdateVersion { e_tag: r.e_tag, version: r.version })
                }
                Ok(_) => Err(taken(path)),
                Err(e) => Err(object_store::Error::Generic { store: "lease", source: Box::new(e) }),
            }
        })
    }

    fn local_root(&self) -> Option<&FsPath> {
        Some(&self.root)
    }
}
