//! The end-of-run summary: a table per partition for people, JSON for orchestrators.

use std::fmt::Write as _;

use serde::Serialize;

use crate::journal::PartitionReport;
use crate::run::RunSummary;

/// The summary as an aligned text table, failed partitions' errors below it.
pub fn table(s: &RunSummary) -> String {
    let head = ["partition", "action", "input rows", "duplicates", "superseded", "deleted", "output rows", "time"];
    let mut rows: Vec<[String; 8]> = Vec::new();
    for p in &s.partitions {
        rows.push([
            p.date.to_string(),
            p.action.to_string(),
            p.counts.input_rows.to_string(),
            p.counts.duplicates.to_string(),
            p.counts.superseded.to_string(),
            p.counts.deleted.to_string(),
            p.output_rows.to_string(),
            format!("{:.2}s", p.seconds),
        ]);
    }
    let mut width = head.map(str::len);
    for r in &rows {
        for (w, c) in width.iter_mut().zip(r) {
            *w = (*w).max(c.len());
        }
    }
    let mut out = String::new();
    let line = |out: &mut String, cells: &[&str]| {
        for (i, (c, w)) in cells.iter().zip(width).enumerate() {
            let sep = if i == 0 { "" } else { "  " };
            if i < 2 {
                let _ = write!(out, "{sep}{c:<w$}");
            } else {
                let _ = write!(out, "{sep}{c:>w$}");
            }
        }
        out.push('\n');
    };
    line(&mut out, &head);
    for r in &rows {
        line(&mut out, &r.iter().map(String::as_str).collect::<Vec<_>>());
    }
    let count = |a: crate::commit::Action| s.partitions.iter().filter(|p| p.action == a).count();
    let _ = writeln!(
        out,
        "run {}: {} created, {} replaced, {} unchanged, {} failed in {:.2}s",
        s.run_id,
        count(crate::commit::Action::Created),
        count(crate::commit::Action::Replaced),
        count(crate::commit::Action::Unchanged),
        count(crate::commit::Action::Failed),
        s.seconds
    );
    for p in s.failed() {
        let _ = writeln!(out, "error: {}: {}", p.date, p.error.as_deref().unwrap_or("failed"));
    }
    out
}

#[derive(Serialize)]
struct SummaryJson<'a> {
    run_id: &'a str,
    exit_code: i32,
    seconds: f64,
    partitions: &'a [PartitionReport],
}

/// The summary as JSON (`--summary-json`).
pub fn json(s: &RunSummary) -> String {
    serde_json::to_string_pretty(&SummaryJson {
        run_id: &s.run_id,
        exit_code: s.exit_code.code(),
        seconds: s.seconds,
        partitions: &s.partitions,
    })
    .unwrap_or_default()
}
