//! Record: the deterministic lineage every partition file carries in its Parquet footer
//! (docs/design.md §3) — tool version, config fingerprint, input fingerprint (the input objects with
//! their sizes and e-tags) and the row counts of each step.
//!
//! Invariant: nothing run-specific (run id, wall clock, host) is in here, so the same input
//! and config give byte-identical files.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::config::hex;
use crate::prepare::PrepareStats;

/// The footer key holding the lineage JSON.
pub const FOOTER_KEY: &str = "lakeswap.lineage";

/// The tool and version, as written into files.
pub fn tool() -> String {
    format!("lakeswap {}", env!("CARGO_PKG_VERSION"))
}

/// One input object that can hold rows of the partition.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct InputObject {
    /// Path relative to the input URL.
    pub path: String,
    pub size: u64,
    pub e_tag: Option<String>,
}

/// The rules a partition's rows follow from its input and config. Raised by every fix that
/// changes what some input and config compute (a value read another way, a refusal that made a
/// date fail), so that `--skip-unchanged` recomputes a partition written under older rules
/// rather than keep what a fixed bug wrote.
pub const RULES: u32 = 4;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lineage {
    pub tool: String,
    /// The [`RULES`] the file was written under; 0 for a file older than the record.
    #[serde(default)]
    pub rules: u32,
    pub config_fingerprint: String,
    /// The partition's date: a file copied under another date's folder says so. `None` in
    /// files written before the record held it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub date: Option<chrono::NaiveDate>,
    pub input_fingerprint: String,
    pub inputs: Vec<InputObject>,
    pub counts: PrepareStats,
    pub output_rows: u64,
}

/// A fingerprint of a sorted list of input objects.
pub fn input_fingerprint(inputs: &[InputObject]) -> String {
    let mut h = Sha256::new();
    for i in inputs {
        h.update(i.path.as_bytes());
        h.update([0]);
        h.update(i.size.to_le_bytes());
        h.update(i.e_tag.as_deref().unwrap_or("").as_bytes());
        h.update([0]);
    }
    hex(&h.finalize()[..16])
}

impl Lineage {
    pub fn new(
        config_fingerprint: String,
        date: chrono::NaiveDate,
        mut inputs: Vec<InputObject>,
        counts: PrepareStats,
        output_rows: u64,
    ) -> Self {
        inputs.sort();
        Lineage {
            tool: tool(),
            rules: RULES,
            config_fingerprint,
            date: Some(date),
            input_fingerprint: input_fingerprint(&inputs),
            inputs,
            counts,
            output_rows,
        }
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// The lineage stored in a Parquet footer's key-value metadata, if any.
    pub fn from_footer(kv: Option<&Vec<parquet::file::metadata::KeyValue>>) -> Option<Lineage> {
        let v = kv?.iter().find(|k| k.key == FOOTER_KEY)?.value.as_ref()?;
        serde_json::from_str(v).ok()
    }
}
