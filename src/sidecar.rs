//! Objects that belong to one partition file of a merged table: its tombstones (the deleted
//! keys and their versions) and its key index (the sorted hashes of every key it holds, live or
//! deleted).
//!
//! They live in the table's state location, outside what readers read, content-addressed —
//! `STATE/<tombstones|keys>/<col>=<date>/<sha-256>.<tombstones|keys>` — and the data
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

    /// The folder in the state location and the name's extension.
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
    /// The object's path, relative to the state location.
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
        let object = format!("{}/{dir}/{hash}.{}", kind.name(), kind.name());
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
            let mut r = serde_json::from_str::<Reference>(v).ok()?;
            // Footers written while the state lived in the table (`OUT/_lakeswap/`) name the
            // object with that folder; moved with the rest of the state, it is here.
            if let Some(rest) = r.object.strip_prefix(LEGACY_FOLDER) {
                r.object = rest.to_string();
            }
            Some((*k, r))
        })
        .collect()
}

/// The folder footers of older tables name their objects under.
const LEGACY_FOLDER: &str = "_lakeswap/";

/// Whether `rel` (a path in the state location) is a name this module makes: the kind and
/// the partition folder.
pub fn parse_name(rel: &str) -> Option<(Kind, String)> {
    let mut parts = rel.split('/');
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
        assert!(parse_name("keys/event_date=2026-11-01/notes.keys").is_none());
        assert!(parse_name("keys/x/y/aa.keys").is_none());
        assert!(parse_name("_lakeswap/keys/x/aa.keys").is_none());
        assert!(decode_keys(b"LSKEYS01\x05\0\0\0\0\0\0\0").is_err());
    }

    #[test]
    fn footers_of_tables_whose_state_was_inside_name_the_moved_objects() {
        let entry = |object: &str| parquet::file::metadata::KeyValue {
            key: Kind::Tombstones.footer_key().into(),
            value: Some(serde_json::json!({ "object": object, "count": 2 }).to_string()),
        };
        let legacy = format!("_lakeswap/tombstones/event_date=2026-11-01/{}.tombstones", "a".repeat(64));
        for named in [legacy.clone(), legacy["_lakeswap/".len()..].to_string()] {
            let refs = referenced(Some(&vec![entry(&named)]));
            assert_eq!(refs.len(), 1);
            assert_eq!(refs[0].1.object, &legacy["_lakeswap/".len()..]);
            assert!(parse_name(&refs[0].1.object).is_some());
        }
    }
}
