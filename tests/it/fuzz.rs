//! Risk: hostile bytes crash the job instead of failing it. Property tests over the CSV and
//! NDJSON decoders (and the prepare and aggregate steps behind them) and the config parser:
//! any input becomes rows or an error, never a panic.

use crate::common::*;
use lakeswap::config::{Format, JobConfig};
use lakeswap::read::{assemble, Decoder};
use proptest::prelude::*;

const VALID: &str = r#"[job]
name = "t"
kind = "aggregate"
[input]
url = "in"
format = "csv"
[identity]
key = ["order_id"]
version = "source_version"
[aggregate]
group_by = ["currency"]
measures = [{ name = "orders", fn = "count" }, { name = "revenue", fn = "sum", column = "amount", where = { status = ["placed"] } }]
[output]
url = "out"
"#;

fn decoder(format: Format) -> Decoder {
    let declared = [("amount", "decimal(12,2)"), ("source_version", "int64")]
        .into_iter()
        .map(|(c, t)| (c.to_string(), lakeswap::read::parse_type(t).unwrap()))
        .collect();
    Decoder {
        declared,
        required: ["event_date", "order_id", "source_version"].map(String::from).to_vec(),
        ..dated_decoder(format)
    }
}

fn csv_sample() -> Vec<u8> {
    csv_bytes(&random_orders(7, 1, 5))
}

fn ndjson_sample() -> Vec<u8> {
    ndjson_bytes(&random_orders(8, 1, 5))
}

/// Decodes, then prepares whatever decoded: errors are fine, panics not.
fn pipeline(format: Format, bytes: Vec<u8>) {
    let dec = decoder(format);
    let wanted = [d("2026-11-01")];
    let Ok(decoded) = dec.decode("fuzz", bytes::Bytes::from(bytes), &wanted, None) else { return };
    let Ok(table) = assemble(decoded.pieces, &dec) else { return };
    let cfg = JobConfig::parse(VALID, "fuzz").unwrap();
    let id = lakeswap::prepare::Identity::from_config(&cfg, &[]);
    let _ = lakeswap::prepare::prepare(table, &id);
}

/// A valid sample with a few bytes overwritten, inserted or cut.
fn mutate(sample: Vec<u8>, edits: Vec<(usize, u8, u8)>) -> Vec<u8> {
    let mut b = sample;
    for (pos, byte, op) in edits {
        if b.is_empty() {
            break;
        }
        let i = pos % b.len();
        match op % 3 {
            0 => b[i] = byte,
            1 => b.insert(i, byte),
            _ => b.truncate(i),
        }
    }
    b
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, .. ProptestConfig::default() })]

    #[test]
    fn csv_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
        pipeline(Format::Csv, bytes);
    }

    #[test]
    fn mutated_csv_never_panics(edits in proptest::collection::vec((any::<usize>(), any::<u8>(), any::<u8>()), 1..6)) {
        pipeline(Format::Csv, mutate(csv_sample(), edits));
    }

    #[test]
    fn ndjson_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
        pipeline(Format::Ndjson, bytes);
    }

    #[test]
    fn mutated_ndjson_never_panics(edits in proptest::collection::vec((any::<usize>(), any::<u8>(), any::<u8>()), 1..6)) {
        pipeline(Format::Ndjson, mutate(ndjson_sample(), edits));
    }

    #[test]
    fn config_parser_never_panics(text in "\\PC{0,300}") {
        let _ = JobConfig::parse(&text, "fuzz");
    }

    #[test]
    fn mutated_config_never_panics(edits in proptest::collection::vec((any::<usize>(), 32u8..127, any::<u8>()), 1..8)) {
        let bytes = mutate(VALID.as_bytes().to_vec(), edits);
        if let Ok(text) = String::from_utf8(bytes) {
            let _ = JobConfig::parse(&text, "fuzz");
        }
    }
}

#[test]
fn the_samples_decode() {
    // The mutation bases are valid, so the properties start from real rows.
    for (f, b) in [(Format::Csv, csv_sample()), (Format::Ndjson, ndjson_sample())] {
        let pieces = decoder(f).decode("sample", bytes::Bytes::from(b), &[d("2026-11-01")], None).unwrap().pieces;
        assert!(pieces.iter().map(|p| p.batch.num_rows()).sum::<usize>() > 5);
    }
}
