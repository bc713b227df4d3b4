//! The end-of-run summary: a table per partition for people, JSON for orchestrators.

use std::fmt::Write as _;

use serde::Serialize;

use crate::journal::PartitionReport;
use crate::run::RunSummary;

/// The summary as an aligned text table, failed partitions' errors below it.
pub fn table(s: &RunSummary) -> String {
    let merging = s.partitions.iter().any(|p| p.merge.is_some());
    let head: Vec<&str> = if merging {
        vec![
            "partition",
            "action",
            "input rows",
            "duplicates",
            "inserted",
            "updated",
            "deleted",
            "unchanged",
            "older",
            "conflicts",
            "moved in",
            "moved out",
            "output rows",
            "time",
        ]
    } else {
        vec!["partition", "action", "input rows", "duplicates", "superseded", "deleted", "output rows", "time"]
    };
    let mut rows: Vec<Vec<String>> = Vec::new();
    for p in &s.partitions {
        let mut r = vec![
            p.date.to_string(),
            p.action.to_string(),
            p.counts.input_rows.to_string(),
            p.counts.duplicates.to_string(),
        ];
        match (&p.merge, merging) {
            (Some(m), _) => r.extend(
                [m.inserted, m.updated, m.deleted, m.unchanged, m.ignored_older, m.conflicts, m.moved_in, m.moved_out]
                    .map(|v| v.to_string()),
            ),
            (None, true) => r.extend(std::iter::repeat_n(String::new(), 8)),
            (None, false) => r.extend([p.counts.superseded.to_string(), p.counts.deleted.to_string()]),
        }
        r.push(p.output_rows.to_string());
        r.push(format!("{:.2}s", p.seconds));
        rows.push(r);
    }
    let mut width: Vec<usize> = head.iter().map(|h| h.len()).collect();
    for r in &rows {
        for (w, c) in width.iter_mut().zip(r) {
            *w = (*w).max(c.len());
        }
    }
    let mut out = String::new();
    let line = |out: &mut String, cells: &[&str]| {
        for (i, (c, w)) in cells.iter().zip(&width).enumerate() {
            let sep = if i == 0 { "" } else { "  " };
            let w = *w;
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
    let untouched = count(crate::commit::Action::Untouched);
    let _ = writeln!(
        out,
        "run {}: {} created, {} replaced, {} unchanged, {} skipped, {}{} failed in {:.2}s",
        s.run_id,
        count(crate::commit::Action::Created),
        count(crate::commit::Action::Replaced),
        count(crate::commit::Action::Unchanged),
        count(crate::commit::Action::Skipped),
        if untouched > 0 { format!("{untouched} untouched, ") } else { String::new() },
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
