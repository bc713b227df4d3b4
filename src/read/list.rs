//! Listing the input: what is listed is what is meant (G8). No object or folder is skipped or
//! shadowed silently.
//!
//! - Names starting with `_` or `.` (in any folder of the path) and `*.crc` files are markers of
//!   other tools (`_SUCCESS`, `.part.crc`, `_temporary/`), not data.
//! - A zero-byte object standing for a folder (an S3 "folder marker" `key/`, as the AWS
//!   console and pyarrow create) is not data.
//! - Hive folder values are parsed as dates, so `event_date=2026-11-1/` and
//!   `event_date=2026-11-01/` are the same date and both are read. A folder whose value is not
//!   a date, another folder, or an object beside the date folders is refused by name.
//! - On a local folder, a dangling symbolic link or an entry that cannot be read is an error
//!   naming it (the object store API would pass over it without a word).

use std::collections::BTreeMap;

use chrono::NaiveDate;
use futures::TryStreamExt;
use object_store::path::Path;
use object_store::{ObjectMeta, ObjectStoreExt};

use crate::error::{Error, InputError, Location, Result};
use crate::store::StoreLocation;

/// Whether a path (relative to the input) names data rather than another tool's marker.
pub fn is_data_name(rel: &str) -> bool {
    !rel.split('/').any(|seg| seg.starts_with('_') || seg.starts_with('.')) && !rel.ends_with(".crc")
}

fn refuse(object: String, message: String) -> Error {
    Error::Input(InputError::bad(Location::object(object), message))
}

/// Every data object under `prefix`, sorted by location.
pub async fn objects(input: &StoreLocation, prefix: &Path) -> Result<Vec<ObjectMeta>> {
    check_local_tree(input, prefix)?;
    let mut v: Vec<ObjectMeta> = input
        .store
        .list(Some(prefix))
        .try_collect()
        .await
        .map_err(|e| Error::store("cannot list", input.display(prefix), e))?;
    v.retain(|m| is_data_name(&input.relative(&m.location)));
    v.sort_by(|a, b| a.location.cmp(&b.location));
    without_folder_markers(&mut v, prefix);
    empty_folder_markers(input, &mut v).await?;
    if input.local_path(prefix).is_some() {
        for m in &mut v {
            m.e_tag = local_e_tag(input, m);
        }
    }
    Ok(v)
}

/// Whether an object store's URL names one object rather than a folder (`s3://b/events.parquet`):
/// listed as a folder it holds nothing, and the object would be ignored. Asked only when the
/// folder's listing found nothing; a local path that is a file is refused when it is opened.
pub async fn names_an_object(input: &StoreLocation) -> bool {
    if input.prefix.as_ref().is_empty() || input.local_path(&Path::default()).is_some() {
        return false;
    }
    // Only to say why nothing was found: a zero-byte object is a folder (ADLS Gen2 keeps its
    // folders as such), and a store that will not say (a policy scoped to the folder's keys)
    // leaves the folder's own message.
    match input.store.head(&input.prefix).await {
        Ok(m) => m.size > 0,
        Err(e) => {
            tracing::debug!(url = %input.url, error = %e, "not known to be an object");
            false
        }
    }
}

/// Why a URL that [`names_an_object`] is refused.
pub fn object_not_folder(url: &str) -> String {
    format!("{url} is an object, not a folder; name the folder that holds the objects (every object under it is read)")
}

/// Drops zero-byte folder markers (`key/`, as S3 consoles and some writers make them) from a
/// listing under `prefix`: the listed folder itself, or a folder of another object.
pub(crate) fn without_folder_markers(v: &mut Vec<ObjectMeta>, prefix: &Path) {
    let folders: std::collections::HashSet<String> = v
        .iter()
        .flat_map(|m| {
            let parts: Vec<&str> = m.location.as_ref().split('/').collect();
            (1..parts.len()).map(move |i| parts[..i].join("/"))
        })
        .collect();
    v.retain(|m| m.size > 0 || (m.location != *prefix && !folders.contains(m.location.as_ref())));
}

/// Drops zero-byte folder markers of empty folders (`…/sub/`, the S3 console's "Create
/// folder"), which [`without_folder_markers`] cannot tell from an empty object by the listing
/// alone: the store lists the marker without its `/`, and has no object by that name.
pub(crate) async fn empty_folder_markers(input: &StoreLocation, v: &mut Vec<ObjectMeta>) -> Result<()> {
    if input.local_path(&Path::default()).is_some() {
        return Ok(());
    }
    use futures::StreamExt;
    // Each request owns what it uses: a future borrowing the listing is not `Send` for every
    // lifetime the runtime asks of a spawned run.
    let heads: Vec<_> = v
        .iter()
        .filter(|m| m.size == 0)
        .map(|m| {
            let (store, location, shown) = (input.store.clone(), m.location.clone(), input.display(&m.location));
            async move {
                match store.head(&location).await {
                    Err(object_store::Error::NotFound { .. }) => Ok(Some(location)),
                    Err(e) => Err(Error::store("cannot read", shown, e)),
                    Ok(_) => Ok(None),
                }
            }
        })
        .collect();
    let found: Vec<Result<Option<Path>>> = futures::stream::iter(heads).buffer_unordered(16).collect().await;
    let mut markers = std::collections::HashSet::new();
    for f in found {
        markers.extend(f?);
    }
    v.retain(|m| !markers.contains(&m.location));
    Ok(())
}

/// Whether an object of a listing with a delimiter under `prefix` is a folder marker: zero
/// bytes, named as the listed folder or as a folder listed in it.
pub(crate) fn is_folder_marker(m: &ObjectMeta, prefix: &Path, folders: &[Path]) -> bool {
    m.size == 0 && (m.location == *prefix || folders.contains(&m.location))
}

/// A local file's e-tag with its status-change time added. The local store's e-tag is the
/// inode, modification time and size: a file rewritten in place at the same size with its
/// modification time put back (`cp -p`, `rsync -t --inplace`) keeps it, and lineage would take
/// the new content for the old. The change time cannot be set back; it also moves on a
/// `chmod` or a new link, which only costs a recomputation.
#[cfg(unix)]
fn local_e_tag(input: &StoreLocation, m: &ObjectMeta) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let root = input.local_path(&Path::default())?;
    let file = m.location.parts().fold(root, |p, part| p.join(percent_decode(part.as_ref())));
    match std::fs::metadata(file) {
        Ok(md) => Some(format!("{}-c{:x}.{:x}", m.e_tag.as_deref().unwrap_or(""), md.ctime(), md.ctime_nsec())),
        // Gone since the listing: reading it will say so.
        Err(_) => m.e_tag.clone(),
    }
}

#[cfg(not(unix))]
fn local_e_tag(_: &StoreLocation, m: &ObjectMeta) -> Option<String> {
    m.e_tag.clone()
}

/// On a local folder, walks the tree under `prefix` and refuses what the object store API
/// would silently pass over: dangling symbolic links and entries that cannot be read.
fn check_local_tree(input: &StoreLocation, prefix: &Path) -> Result<()> {
    let Some(root) = input.local_path(prefix) else { return Ok(()) };
    let mut stack = vec![root];
    while let Some(dir) = stack.pop() {
        let rd = match std::fs::read_dir(&dir) {
            Ok(rd) => rd,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => {
                return Err(Error::Input(InputError::unreadable(
                    Location::object(dir.display().to_string()),
                    format!("cannot list the folder: {e}"),
                )))
            }
        };
        for e in rd {
            let e = e.map_err(|e| {
                Error::Input(InputError::unreadable(Location::object(dir.display().to_string()), e.to_string()))
            })?;
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with('_') || name.starts_with('.') {
                continue;
            }
            let path = e.path();
            match std::fs::metadata(&path) {
                Ok(m) if m.is_dir() => stack.push(path),
                // The local store lists `name#123` as its own unfinished upload, not an object.
                Ok(_)
                    if name
                        .split_once('#')
                        .is_some_and(|(_, n)| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())) =>
                {
                    return Err(Error::Input(InputError::unreadable(
                        Location::object(path.display().to_string()),
                        "a name ending in `#` and digits is taken by the local store for an unfinished upload, so \
                         it would not be read: if it is one (a writer stopped while writing it), delete it; if it is \
                         data, rename it; or give it a name starting with `_` to have it ignored",
                    )));
                }
                Ok(_) => {}
                Err(err) => {
                    let what = if std::fs::symlink_metadata(&path).is_ok_and(|m| m.file_type().is_symlink()) {
                        "a dangling symbolic link (its target does not exist)".to_string()
                    } else {
                        format!("cannot be read: {err}")
                    };
                    return Err(Error::Input(InputError::unreadable(
                        Location::object(path.display().to_string()),
                        format!("{what}; remove it, or give it a name starting with `_` to have it ignored"),
                    )));
                }
            }
        }
    }
    Ok(())
}

/// The `<column>=<date>/` folders directly under the input.
#[derive(Debug, Default)]
pub struct DateFolders {
    /// By date (several folder names can spell one date: all of them are read). Empty when
    /// the input is not Hive partitioned.
    pub dated: BTreeMap<NaiveDate, Vec<Path>>,
    /// When none is dated: the folders named `<column>=` whose value is not a date, each with
    /// why (`event_date=2026-11-01 00:00:00/`), for an error to name.
    pub undated: Vec<String>,
}

/// The `<column>=<date>/` folders directly under the input ([`DateFolders`]). In a Hive
/// layout, anything else beside the date folders is refused by name.
pub async fn hive_folders(input: &StoreLocation, column: &str) -> Result<DateFolders> {
    let res = input
        .store
        .list_with_delimiter(Some(&input.prefix))
        .await
        .map_err(|e| Error::store("cannot list", &input.url, e))?;
    let want = format!("{column}=");
    let mut out: BTreeMap<NaiveDate, Vec<Path>> = BTreeMap::new();
    let mut strays: Vec<String> = Vec::new();
    let mut undated: Vec<String> = Vec::new();
    for p in &res.common_prefixes {
        let name = p.filename().unwrap_or_default().to_string();
        let decoded = percent_decode(&name);
        match decoded.strip_prefix(&want) {
            Some(v) => match NaiveDate::parse_from_str(v.trim(), "%Y-%m-%d") {
                Ok(d) => out.entry(d).or_default().push(p.clone()),
                Err(_) => {
                    undated.push(format!("{name}/ (`{v}` is not a date YYYY-MM-DD)"));
                    strays.push(format!("{name}/ (`{v}` is not a date YYYY-MM-DD)"));
                }
            },
            None if is_data_name(&name) => strays.push(format!("{name}/")),
            None => {}
        }
    }
    if out.is_empty() {
        undated.sort();
        return Ok(DateFolders { dated: out, undated });
    }
    for m in &res.objects {
        let name = m.location.filename().unwrap_or_default().to_string();
        if is_data_name(&name) && !is_folder_marker(m, &input.prefix, &res.common_prefixes) {
            strays.push(name);
        }
    }
    if !strays.is_empty() {
        strays.sort();
        return Err(refuse(
            input.url.clone(),
            format!(
                "the input is laid out in {column}=YYYY-MM-DD/ folders, but also holds {}; lakeswap would not know \
                 which date they belong to. Move them into a date folder, or give them a name starting with `_` \
                 to have them ignored",
                strays.join(", ")
            ),
        ));
    }
    for folders in out.values_mut() {
        folders.sort();
    }
    Ok(DateFolders { dated: out, undated: Vec::new() })
}

/// `%XX` escapes decoded (object stores keep `:` and spaces of folder names escaped).
fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            if let Ok(v) = u8::from_str_radix(&s[i + 1..i + 3], 16) {
                out.push(v);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8(out).unwrap_or_else(|_| s.to_string())
}

/// A local path as the file system resolves it, whether or not it exists yet: each part
/// that exists with its links followed, `..` taken from there (`y/../in/t`, `link/t` where
/// `link` is `in`: both are `in/t`).
pub fn physical(p: &std::path::Path) -> std::path::PathBuf {
    use std::path::Component;
    let abs = match p.is_absolute() {
        true => p.to_path_buf(),
        false => std::env::current_dir().map(|d| d.join(p)).unwrap_or_else(|_| p.to_path_buf()),
    };
    let mut out = std::path::PathBuf::new();
    for part in abs.components() {
        match part {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => {
                out.push(other);
                if let Ok(real) = std::fs::canonicalize(&out) {
                    out = real;
                }
            }
        }
    }
    out
}

/// Whether one location (a store URL or a local path) lies inside the other or is the same.
pub fn nested(a: &str, b: &str) -> bool {
    fn norm(u: &str) -> Vec<String> {
        let (scheme, rest) = match u.split_once("://") {
            // A local folder as a URL: resolved as a path is (`file:///x/other/../in` is `/x/in`).
            Some((s, r)) if s.eq_ignore_ascii_case("file") => {
                ("file".to_string(), physical(std::path::Path::new(r)).display().to_string())
            }
            Some((s, r)) => (s.to_ascii_lowercase(), r.to_string()),
            None => ("file".to_string(), physical(std::path::Path::new(u)).display().to_string()),
        };
        let scheme = match scheme.as_str() {
            "s3a" => "s3".to_string(),
            "azure" | "abfs" | "abfss" | "adl" => "az".to_string(),
            "gcs" => "gs".to_string(),
            s => s.to_string(),
        };
        std::iter::once(scheme)
            .chain(rest.split('/').filter(|s| !s.is_empty() && *s != ".").map(str::to_string))
            .collect()
    }
    let (x, y) = (norm(a), norm(b));
    let n = x.len().min(y.len());
    x[..n] == y[..n]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nesting() {
        assert!(nested("s3://b/lake", "s3://b/lake/out"));
        assert!(nested("s3a://b/lake/", "s3://b/lake"));
        assert!(!nested("s3://b/lake", "s3://b/lake2"));
        assert!(!nested("s3://b/lake", "gs://b/lake"));
        assert!(nested("/tmp/x/in", "/tmp/x/in/out"));
        assert!(!nested("/tmp/x/in", "/tmp/x/out"));
        // Paths not made yet, through `..` and a link: where the file system puts them.
        let dir = tempfile::tempdir().unwrap();
        let (input, link) = (dir.path().join("in"), dir.path().join("link"));
        std::fs::create_dir(&input).unwrap();
        std::os::unix::fs::symlink(&input, &link).unwrap();
        let at = |p: &str| dir.path().join(p).display().to_string();
        assert!(nested(&at("in"), &at("y/../in/tbl")));
        assert!(nested(&at("in"), &at("link/tbl")));
        assert!(!nested(&at("in"), &at("./in/../out")));
        assert!(!nested(&at("in"), &at("link/../out")));
        assert!(nested(&format!("file://{}", at("other/../in")), &at("in/tbl")));
        assert!(nested(&format!("FILE://{}", at("link")), &at("in/tbl")));
        assert!(!nested(&format!("file://{}", at("other/../out")), &at("in/tbl")));
    }

    #[test]
    fn percent() {
        assert_eq!(percent_decode("event_date=2026-11-01%2000%3A00"), "event_date=2026-11-01 00:00");
        assert_eq!(percent_decode("a%2"), "a%2");
    }
}
