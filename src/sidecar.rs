//! Objects that belong to one partition file of a merged table: its tombstones (the deleted
//! keys and their versions) and its key index (the sorted hashes of every key it holds, live or
//! deleted).
//!
//! They live beside the table, content-addressed —
//! `OUT/_lakeswap/<tombstones|keys>/<col>=<date>/<sha-256>.<tombstones|keys>` — and the data
//! file's footer names them (`lakeswap.tombstones`, `lakeswap.keys`: a small JSON object). A run
//! writes them before it swaps the data file in, so the file and the objects it names change
//! together atomically; the footer stays small however many keys were deleted. An object no
//! footer names any more is removed after the swap, and by `gc`.

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::config::hex;

/// Which object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Tombstones,
    Keys,
}

impl Kind {
    pub const ALL: [Kind; 2] = [Kind::Tombstones, Kind::Keys];

    /// The folder under `_lakeswap/` and the name's extension.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Tombstones => "tombstones",
            Kind::Keys => "keys",
        }
    }

    /// The footer key naming the object.
    pub fn footer_key(self) -> &'static str {
        match self {
            Kind::Tombstones => "lakeswap.tombstones",
            Kind::Keys => "lakeswap.keys",
        }
    }
}

/// What a footer says of one object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reference {
    /// The object's path, relative to the output.
    pub object: String,
    /// Rows (tombstones) or keys it holds.
    pub count: u64,
}

/// An object to write before the data file that names it.
#[derive(Debug, Clone)]
pub struct Sidecar {
    pub kind: Kind,
    pub reference: Reference,
    pub bytes: Bytes,
}

impl Sidecar {
    /// A content-addressed object for partition folder `dir`.
    pub fn new(kind: Kind, dir: &str, bytes: Bytes, count: u64) -> Self {
        let hash = hex(&Sha256::digest(&bytes));
        let object = format!("_lakeswap/{}/{dir}/{hash}.{}", kind.name(), kind.name());
        Sidecar { kind, reference: Reference { object, count }, bytes }
    }

    /// The footer entry naming it.
    pub fn footer_entry(&self) -> (&'static str, String) {
        (self.kind.footer_key(), serde_json::to_string(&self.reference).unwrap_or_default())
    }
}

/// The objects a data file's footer names.
pub fn referenced(kv: Option<&Vec<parquet::file::metadata::KeyValue>>) -> Vec<(Kind, Reference)> {
    let Some(kv) = kv else { return Vec::new() };
    Kind::ALL
        .iter()
        .filter_map(|k| {
            let v = kv.iter().find(|e| e.key == k.footer_key())?.value.as_ref()?;
            serde_json::from_str::<Reference>(v).ok().map(|r| (*k, r))
        })
        .collect()
}

/// Whether `rel` (a path under the output) is a name this module makes: the kind and the
/// partition folder.
pub fn parse_name(rel: &str) -> Option<(Kind, String)> {
    let mut parts = rel.split('/');
    if parts.next()? != "_lakeswap" {
        return None;
    }
    let folder = parts.next()?;
    let kind = Kind::ALL.into_iter().find(|k| k.name() == folder)?;
    let dir = parts.next()?;
    let file = parts.next()?;
    if parts.next().is_some() {
        return None;
    }
    let hash = file.strip_suffix(&format!(".{}", kind.name()))?;
    (hash.len() == 64 && hash.bytes().all(|b| b.is_ascii_hexdigit())).then(|| (kind, dir.to_string()))
}

const KEYS_MAGIC: &[u8; 8] = b"LSKEYS01";

/// A key index: the sorted hashes, as bytes.
pub fn encode_keys(hashes: &[u64]) -> Bytes {
    let mut b = Vec::with_capacity(16 + hashes.len() * 8);
    b.extend_from_slice(KEYS_MAGIC);
    b.extend_from_slice(&(hashes.len() as u64).to_le_bytes());
    for h in hashes {
        b.extend_from_slice(&h.to_le_bytes());
    }
    Bytes::from(b)
}

/// The sorted hashes of a key index.
pub fn decode_keys(b: &[u8]) -> Result<Vec<u64>, String> {
    let bad = || "not a lakeswap key index".to_string();
    if b.len() < 16 || &b[..8] != KEYS_MAGIC {
        return Err(bad());
    }
    let n = u64::from_le_bytes(b[8..16].try_into().map_err(|_| bad())?) as usize;
    let body = &b[16..];
    if body.len() != n.checked_mul(8).ok_or_else(bad)? {
        return Err(bad());
    }
    Ok(body.chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().unwrap_or_default())).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_indexes_round_trip() {
        let s = Sidecar::new(Kind::Keys, "event_date=2026-11-01", encode_keys(&[1, 5, u64::MAX]), 3);
        assert_eq!(parse_name(&s.reference.object), Some((Kind::Keys, "event_date=2026-11-01".to_string())));
        assert_eq!(decode_keys(&s.bytes).unwrap(), [1, 5, u64::MAX]);
        assert!(parse_name("_lakeswap/keys/event_date=2026-11-01/notes.keys").is_none());
        assert!(parse_name("_lakeswap/keys/x/y/aa.keys").is_none());
        assert!(decode_keys(b"LSKEYS01\x05\0\0\0\0\0\0\0").is_err());
    }
}
