//! Where data lives: a job URL resolved into an `Arc<dyn ObjectStore>`, a prefix, and the
//! store's [`Protocol`] — the one place that knows whether a partition is swapped in by a
//! rename or by a conditional put.
//!
//! Nothing else in the pipeline knows whether it runs on a folder or on S3. Credentials come
//! from the standard environment variables and the config's `options` table; they are never
//! printed — [`StoreLocation`]'s `Display` shows the URL only.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::{Arc, Mutex, OnceLock};

use object_store::aws::{AmazonS3Builder, S3ConditionalPut};
use object_store::azure::MicrosoftAzureBuilder;
use object_store::gcp::GoogleCloudStorageBuilder;
use object_store::local::LocalFileSystem;
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::ObjectStore;

use crate::error::ConfigError;

mod protocol;
pub use protocol::{ConditionalPut, LocalFolder, Protocol};

/// A store and a prefix inside it.
#[derive(Clone)]
pub struct StoreLocation {
    pub store: Arc<dyn ObjectStore>,
    pub prefix: Path,
    pub url: String,
    /// How partitions are swapped in and leases taken over on this store.
    pub protocol: Arc<dyn Protocol>,
}

impl fmt::Debug for StoreLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StoreLocation").field("url", &self.url).field("protocol", &self.protocol.name()).finish()
    }
}

impl fmt::Display for StoreLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.url)
    }
}

impl StoreLocation {
    pub fn new(store: Arc<dyn ObjectStore>, prefix: Path, url: impl Into<String>, protocol: Arc<dyn Protocol>) -> Self {
        StoreLocation { store, prefix, url: url.into(), protocol }
    }

    /// `prefix/<parts...>`.
    pub fn child(&self, parts: &[&str]) -> Path {
        let mut p = self.prefix.clone();
        for part in parts {
            for seg in part.split('/').filter(|s| !s.is_empty()) {
                p = p.clone().join(seg);
            }
        }
        p
    }

    /// Removes empty folders left below `path` on a local file system (object stores have
    /// no folders). Best effort: a folder that is not empty stays.
    pub fn tidy(&self, path: &Path) {
        if let Some(root) = self.protocol.local_root() {
            let dir = root.join(path.as_ref());
            let mut dirs: Vec<std::path::PathBuf> = Vec::new();
            let mut stack = vec![dir];
            while let Some(d) = stack.pop() {
                if let Ok(rd) = std::fs::read_dir(&d) {
                    for e in rd.flatten() {
                        if e.file_type().is_ok_and(|t| t.is_dir()) {
                            stack.push(e.path());
                        }
                    }
                    dirs.push(d);
                }
            }
            for d in dirs.iter().rev() {
                let _ = std::fs::remove_dir(d);
            }
        }
    }

    /// The file system path of `path`, when the store is a local folder.
    pub fn local_path(&self, path: &Path) -> Option<std::path::PathBuf> {
        self.protocol.local_root().map(|r| r.join(path.as_ref()))
    }

    /// A path relative to the prefix, for messages and lineage (`event_date=…/part-0.parquet`).
    pub fn relative(&self, path: &Path) -> String {
        match path.prefix_match(&self.prefix) {
            Some(parts) => parts.map(|p| p.as_ref().to_string()).collect::<Vec<_>>().join("/"),
            None => path.to_string(),
        }
    }

    /// The full URL of an object, for messages. An object outside the prefix (a folder around
    /// it) is named from the store's root: `s3://b/_lakeswap/t/table.json` for a prefix `lake/t`.
    pub fn display(&self, path: &Path) -> String {
        let url = self.url.trim_end_matches('/');
        if path.prefix_match(&self.prefix).is_none() {
            if let Some(root) = url.strip_suffix(self.prefix.as_ref()).and_then(|r| r.strip_suffix('/')) {
                return format!("{root}/{path}");
            }
        }
        let rel = self.relative(path);
        if rel.is_empty() {
            self.url.clone()
        } else {
            format!("{url}/{rel}")
        }
    }
}

/// Opens the state location of a job's `output` at `url` (with the output's `options`: the
/// same credentials). On a local folder, partitions are staged in the state folder and renamed
/// into the table, so both must be on one file system: checked here, with a probe file moved
/// from one to the other, rather than at the first swap.
pub fn open_state(
    url: &str,
    options: &BTreeMap<String, String>,
    output: &StoreLocation,
) -> Result<StoreLocation, ConfigError> {
    let state = open(url, options, "output.state_url", true)?;
    apart(&state, output)?;
    if let (Some(from), Some(to)) = (state.protocol.local_root(), output.protocol.local_root()) {
        let invalid =
            |message: String| ConfigError::Invalid { path: "config".into(), key: "output.state_url".into(), message };
        let name = probe_name();
        let (a, b) = (from.join(&name), to.join(&name));
        let moved = std::fs::write(&a, b"").and_then(|()| std::fs::rename(&a, &b));
        let _ = std::fs::remove_file(&a);
        let _ = std::fs::remove_file(&b);
        match moved {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::CrossesDevices => {
                return Err(two_file_systems(from, to, &format!(" ({e})")))
            }
            Err(e) => {
                return Err(invalid(format!(
                    "cannot move a file from the state folder {} into the output folder {}: {e}",
                    from.display(),
                    to.display()
                )))
            }
        }
    }
    Ok(state)
}

/// Opens the state location of a job's `output` for a command that only reads (`status`,
/// `verify`, `--dry-run`): nothing is created or written, so read-only credentials and mounts
/// do.
pub fn open_state_read(
    url: &str,
    options: &BTreeMap<String, String>,
    output: &StoreLocation,
) -> Result<StoreLocation, ConfigError> {
    let state = open_read(url, options, "output.state_url")?;
    apart(&state, output)?;
    // A run moves a probe file from one to the other; without writing, the file systems
    // they are (or would be made) on are compared.
    if let (Some(from), Some(to)) = (state.protocol.local_root(), output.protocol.local_root()) {
        if let (Some(a), Some(b)) = (device(from), device(to)) {
            if a != b {
                return Err(two_file_systems(from, to, ""));
            }
        }
    }
    Ok(state)
}

/// The refusal of a state folder on another file system than the output folder's.
fn two_file_systems(state: &std::path::Path, output: &std::path::Path, why: &str) -> ConfigError {
    ConfigError::Invalid {
        path: "config".into(),
        key: "output.state_url".into(),
        message: format!(
            "the state folder {} and the output folder {} are on different file systems{why}. Partitions are \
             staged in the state folder and swapped in by a rename, which cannot cross file systems: put \
             `state_url` on the output's file system",
            state.display(),
            output.display()
        ),
    }
}

/// Refuses a local state folder inside the output folder, or the other way round (resolved:
/// symlinks followed): readers of the table would read lakeswap's run state as data.
fn apart(state: &StoreLocation, output: &StoreLocation) -> Result<(), ConfigError> {
    if let (Some(from), Some(to)) = (state.protocol.local_root(), output.protocol.local_root()) {
        if from.starts_with(to) || to.starts_with(from) {
            return Err(ConfigError::Invalid {
                path: "config".into(),
                key: "output.state_url".into(),
                message: format!(
                    "the state folder {} and the output folder {} lie inside one another (symlinks followed): \
                     readers of the table would read lakeswap's run state as data",
                    from.display(),
                    to.display()
                ),
            });
        }
    }
    Ok(())
}

/// Resolves a job URL for a command that only reads: a local folder that does not exist yet
/// reads as an empty one (a first run would make it), and nothing is written to find out
/// whether a run could write there.
pub fn open_read(url: &str, options: &BTreeMap<String, String>, key: &str) -> Result<StoreLocation, ConfigError> {
    let (scheme, rest) = scheme_of(url);
    if scheme != "file" {
        return open(url, options, key, false);
    }
    // The folder a run would open (`stage/../lake/out` is `lake/out`, with `stage` or without).
    let root = resolved(std::path::Path::new(rest)).map_err(|message| ConfigError::Invalid {
        path: "config".into(),
        key: key.into(),
        message,
    })?;
    let url_shown = url.trim_end_matches('/').to_string();
    if root.is_dir() {
        return local_folder(&root, url_shown, false, key);
    }
    // Empty, where a run would make it: the same resolved folder names the table and is
    // checked against the state's.
    Ok(StoreLocation::new(Arc::new(InMemory::new()), Path::default(), url_shown, Arc::new(LocalFolder { root })))
}

/// The folder `dir` names once made: its nearest existing ancestor resolved (symlinks
/// followed), then the rest of the path, with `..` and `.` taken as the file system would
/// take them once the missing folders exist. A path that is there but no folder (a file, a
/// link to nothing) is one a run could not make a folder of: refused, as the run would.
fn resolved(dir: &std::path::Path) -> Result<std::path::PathBuf, String> {
    use std::path::Component;
    let absolute = std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf());
    let mut base = absolute.as_path();
    let mut rest = Vec::new();
    while !base.is_dir() {
        if std::fs::symlink_metadata(base).is_ok() {
            return Err(format!("{} is not a folder (a file, or a link to nothing)", base.display()));
        }
        match (base.parent(), base.components().next_back()) {
            (Some(parent), Some(last)) => {
                rest.push(last);
                base = parent;
            }
            _ => break,
        }
    }
    let mut out = std::fs::canonicalize(base).unwrap_or_else(|_| base.to_path_buf());
    for c in rest.into_iter().rev() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other.as_os_str()),
        }
    }
    Ok(out)
}

/// The device of `dir`'s nearest existing ancestor: where a folder made there would live.
fn device(dir: &std::path::Path) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    dir.ancestors().find_map(|d| std::fs::metadata(d).ok()).map(|m| m.dev())
}

/// The local folder a URL names, when it names one that does not exist.
pub fn missing_local_folder(url: &str) -> Option<std::path::PathBuf> {
    let (scheme, rest) = scheme_of(url);
    let dir = std::path::Path::new(rest);
    // Not a dangling link, nor a folder out of reach: those are errors of their own.
    let missing = matches!(std::fs::symlink_metadata(dir), Err(e) if e.kind() == std::io::ErrorKind::NotFound);
    (scheme == "file" && missing).then(|| dir.to_path_buf())
}

/// A URL's scheme, lower case (`file` for a plain path), and the rest.
fn scheme_of(url: &str) -> (String, &str) {
    match url.split_once("://") {
        Some((s, r)) => (s.to_ascii_lowercase(), r),
        None => ("file".to_string(), url),
    }
}

/// A name for a probe file no other process picks at the same moment (pids repeat across
/// containers: many jobs run as pid 1).
fn probe_name() -> String {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    format!(".lakeswap-probe-{}-{nanos}-{:x}", std::process::id(), rand::random::<u32>())
}

/// Whether `name` is a name lakeswap gives a probe file: a file a run killed at start-up may leave, which
/// `gc` removes.
pub fn is_probe_name(name: &str) -> bool {
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let parts: Vec<&str> = name.strip_prefix(".lakeswap-probe-").map(|r| r.split('-').collect()).unwrap_or_default();
    matches!(parts.as_slice(), [pid, nanos, r] if digits(pid) && digits(nanos)
        && !r.is_empty() && r.bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()))
}

fn memory_stores() -> &'static Mutex<HashMap<String, Arc<InMemory>>> {
    static STORES: OnceLock<Mutex<HashMap<String, Arc<InMemory>>>> = OnceLock::new();
    STORES.get_or_init(Default::default)
}

fn created_folders() -> &'static Mutex<Vec<(std::path::PathBuf, std::path::PathBuf)>> {
    static CREATED: OnceLock<Mutex<Vec<(std::path::PathBuf, std::path::PathBuf)>>> = OnceLock::new();
    CREATED.get_or_init(Default::default)
}

/// Removes the local folders this process made for a table or its state location (when it
/// opened them to write) that are still empty: a run refused as a whole leaves nothing behind. A
/// folder with anything in it stays.
pub fn remove_created_folders() {
    let made = std::mem::take(&mut *created_folders().lock().unwrap_or_else(|e| e.into_inner()));
    for (dir, top) in made.into_iter().rev() {
        for d in dir.ancestors() {
            if std::fs::remove_dir(d).is_err() || d == top {
                break;
            }
        }
    }
}

/// A local folder as a store: with `create`, made if missing and checked writable with a probe
/// file; else it must exist.
fn local_folder(
    dir: &std::path::Path,
    url_shown: String,
    create: bool,
    key: &str,
) -> Result<StoreLocation, ConfigError> {
    let invalid = |message: String| ConfigError::Invalid { path: "config".into(), key: key.into(), message };
    // `out/.` as `out` (a folder not made yet is no parent of `.`).
    let dir: &std::path::Path = &dir.components().collect::<std::path::PathBuf>();
    if create {
        // The highest folder this makes, to take back if the run is refused.
        let top =
            dir.ancestors().take_while(|a| !a.as_os_str().is_empty() && !a.exists()).last().map(|t| t.to_path_buf());
        std::fs::create_dir_all(dir)
            .map_err(|e| invalid(format!("cannot create the folder {}: {e}", dir.display())))?;
        if let Some(top) = top {
            created_folders().lock().unwrap_or_else(|e| e.into_inner()).push((dir.to_path_buf(), top));
        }
        // Writable, found now rather than after every partition was computed.
        let probe = dir.join(probe_name());
        std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&probe)
            .map_err(|e| invalid(format!("cannot write in the folder {}: {e}", dir.display())))?;
        let _ = std::fs::remove_file(&probe);
    } else if dir.is_file() {
        return Err(invalid(format!(
            "{} is a file; name the folder that holds the objects (every object under it is read)",
            dir.display()
        )));
    } else if !dir.is_dir() {
        return Err(invalid(format!(
            "the folder {} does not exist (a plain path is taken relative to the current directory)",
            dir.display()
        )));
    }
    let fs = LocalFileSystem::new_with_prefix(dir)
        .map_err(|e| invalid(format!("cannot open the folder {}: {e}", dir.display())))?
        .with_automatic_cleanup(true);
    let root =
        std::fs::canonicalize(dir).map_err(|e| invalid(format!("cannot open the folder {}: {e}", dir.display())))?;
    Ok(StoreLocation::new(Arc::new(fs), Path::default(), url_shown, Arc::new(LocalFolder { root })))
}

/// The process-wide in-memory store named `name` (`memory://name/prefix`), for tests and
/// examples: every URL with the same name in one process sees the same objects.
pub fn memory_store(name: &str) -> Arc<InMemory> {
    let mut stores = memory_stores().lock().unwrap_or_else(|e| e.into_inner());
    stores.entry(name.to_string()).or_insert_with(|| Arc::new(InMemory::new())).clone()
}

/// The key prefix of a bucket URL, exactly as written: `s3://b/t/ü` names keys under `t/ü/`,
/// not under their percent-encoding. A prefix that names no key as written (an empty segment
/// `a//b`, a `.` or `..` segment) is refused rather than sent elsewhere.
fn key_prefix(prefix: &str, key: &str) -> Result<Path, ConfigError> {
    let parsed = match prefix.starts_with('/') {
        true => Err(object_store::path::Error::EmptySegment { path: prefix.to_string() }),
        false => Path::parse(prefix.trim_end_matches('/')),
    };
    parsed.map_err(|e| ConfigError::Invalid {
        path: "config".into(),
        key: key.into(),
        message: format!(
            "`{prefix}` is not a key prefix as the store names keys ({e}): write it without empty, `.` or `..` \
             segments"
        ),
    })
}

/// Refuses a store endpoint that is not an `http://` or `https://` address with a host: the
/// store's client would take it and fail on its first request (in `object_store`'s S3 client,
/// with a panic). `from` says where it was given when no option names it (the environment).
fn web_address(endpoint: Option<&str>, options: &BTreeMap<String, String>, from: &str) -> Result<(), String> {
    let Some(endpoint) = endpoint else { return Ok(()) };
    let given = options
        .iter()
        .find(|(k, v)| k.contains("endpoint") && v.as_str() == endpoint)
        .map_or(format!("the environment ({from})"), |(k, _)| format!("the option `{k}`"));
    // The parser drops spaces around an address; the store's client does not.
    match url::Url::parse(endpoint) {
        Ok(u) if matches!(u.scheme(), "http" | "https") && u.host().is_some() && endpoint.trim() == endpoint => Ok(()),
        _ => Err(format!(
            "the store endpoint `{endpoint}`, from {given}, is not a web address: write it as \
             http://host:port or https://host, without spaces (or leave it unset)"
        )),
    }
}

/// Resolves a job URL. `create` makes a missing local folder (for outputs).
///
/// Accepted: a plain path (relative to the current directory), `file:///abs`, `memory://name/p`,
/// `s3://bucket/p`, `az://container/p` (also `abfs://`, `abfss://`, `azure://`), `gs://bucket/p`.
pub fn open(
    url: &str,
    options: &BTreeMap<String, String>,
    key: &str,
    create: bool,
) -> Result<StoreLocation, ConfigError> {
    let invalid = |message: String| ConfigError::Invalid { path: "config".into(), key: key.into(), message };
    let (scheme, rest) = scheme_of(url);
    let url_shown = url.trim_end_matches('/').to_string();
    match scheme.as_str() {
        "file" => local_folder(std::path::Path::new(rest), url_shown, create, key),
        "memory" => {
            let (name, prefix) = rest.split_once('/').unwrap_or((rest, ""));
            let store = memory_store(name);
            Ok(StoreLocation::new(store, key_prefix(prefix, key)?, url_shown, Arc::new(ConditionalPut)))
        }
        "s3" | "s3a" => {
            let (_, prefix) = rest.split_once('/').unwrap_or((rest, ""));
            let mut b = AmazonS3Builder::from_env().with_url(url).with_conditional_put(S3ConditionalPut::ETagMatch);
            // The AWS SDKs' name for a custom endpoint (object_store reads it too, and
            // AWS_ENDPOINT); set but empty, it is checked below as an address.
            if let Ok(endpoint) = std::env::var("AWS_ENDPOINT_URL") {
                b = b.with_endpoint(endpoint);
            }
            for (k, v) in options {
                let cfg = k.parse().map_err(|e| invalid(format!("unknown S3 option `{k}`: {e}")))?;
                b = b.with_config(cfg, v);
            }
            let endpoint = b.get_config_value(&object_store::aws::AmazonS3ConfigKey::Endpoint);
            web_address(endpoint.as_deref(), options, "AWS_ENDPOINT_URL or AWS_ENDPOINT").map_err(invalid)?;
            let store = b.build().map_err(|e| invalid(format!("cannot open {url_shown}: {e}")))?;
            Ok(StoreLocation::new(Arc::new(store), key_prefix(prefix, key)?, url_shown, Arc::new(ConditionalPut)))
        }
        "az" | "azure" | "abfs" | "abfss" | "adl" => {
            let (_, prefix) = rest.split_once('/').unwrap_or((rest, ""));
            let mut b = MicrosoftAzureBuilder::from_env().with_url(url);
            for (k, v) in options {
                let cfg = k.parse().map_err(|e| invalid(format!("unknown Azure option `{k}`: {e}")))?;
                b = b.with_config(cfg, v);
            }
            let endpoint = b.get_config_value(&object_store::azure::AzureConfigKey::Endpoint);
            web_address(endpoint.as_deref(), options, "AZURE_STORAGE_ENDPOINT").map_err(invalid)?;
            let store = b.build().map_err(|e| invalid(format!("cannot open {url_shown}: {e}")))?;
            Ok(StoreLocation::new(Arc::new(store), key_prefix(prefix, key)?, url_shown, Arc::new(ConditionalPut)))
        }
        "gs" | "gcs" => {
            let (_, prefix) = rest.split_once('/').unwrap_or((rest, ""));
            let mut b = GoogleCloudStorageBuilder::from_env().with_url(url);
            for (k, v) in options {
                let cfg = k.parse().map_err(|e| invalid(format!("unknown GCS option `{k}`: {e}")))?;
                b = b.with_config(cfg, v);
            }
            let store = b.build().map_err(|e| invalid(format!("cannot open {url_shown}: {e}")))?;
            Ok(StoreLocation::new(Arc::new(store), key_prefix(prefix, key)?, url_shown, Arc::new(ConditionalPut)))
        }
        other => Err(invalid(format!(
            "unsupported scheme `{other}://`; use a path, file://, s3://, az:// or gs:// (memory:// from the library only)"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::key_prefix;

    #[test]
    fn a_local_folder_ending_in_a_dot_is_made() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("new/out/.");
        let at = super::local_folder(&dir, dir.display().to_string(), true, "output.url").unwrap();
        assert!(tmp.path().join("new/out").is_dir(), "{at:?}");
    }

    #[test]
    fn a_bucket_prefix_is_the_key_as_written() {
        for (prefix, want) in [("t5/ü", "t5/ü"), ("t5/out ü%/", "t5/out ü%"), ("in%20x", "in%20x"), ("", "")] {
            assert_eq!(key_prefix(prefix, "input.url").unwrap().as_ref(), want, "{prefix}");
        }
        for bad in ["t1//out", "x/../in", "./a", "a/.", "/t/o11"] {
            assert!(key_prefix(bad, "output.url").is_err(), "{bad}");
        }
    }

    #[test]
    fn an_object_is_named_by_its_own_url_inside_the_prefix_or_outside_it() {
        use object_store::path::Path;
        let store = std::sync::Arc::new(object_store::memory::InMemory::new());
        let at = super::StoreLocation::new(
            store,
            Path::from("lake/orders"),
            "s3://b/lake/orders/",
            std::sync::Arc::new(super::protocol::ConditionalPut),
        );
        let shown = |p: &str| at.display(&Path::from(p));
        assert_eq!(
            shown("lake/orders/event_date=2026-11-01/part-00000.parquet"),
            "s3://b/lake/orders/event_date=2026-11-01/part-00000.parquet"
        );
        assert_eq!(shown("lake/orders"), "s3://b/lake/orders/");
        // A folder around the table (where a table around it keeps its state), not under it.
        assert_eq!(shown("lake/_lakeswap/x/table.json"), "s3://b/lake/_lakeswap/x/table.json");
        assert_eq!(shown("_lakeswap/lake/table.json"), "s3://b/_lakeswap/lake/table.json");
    }
}
