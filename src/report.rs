//! The end-of-run summary: a table per partition for people, JSON for orchestrators.

use std::fmt::Write as _;

use std::collections::BTreeMap;

use serde::Serialize;

use crate::commit::Action;
use crate::error::ExitCode;

use crate::journal::PartitionReport;
use crate::prepare::PrepareStats;
use crate::run::RunSummary;

/// The summary as an aligned text table and the run's totals.
pub fn table(s: &RunSummary) -> String {
    let mut out = partitions(s);
    let count = |a: Action| s.partitions.iter().filter(|p| p.action == a).count();
    let untouched = count(Action::Untouched);
    let stopped = count(Action::Stopped);
    let _ = writeln!(
        out,
        "run {}: {} created, {} replaced, {} unchanged, {} skipped, {}{} failed{} in {:.2}s",
        s.run_id,
        count(Action::Created),
        count(Action::Replaced),
        count(Action::Unchanged),
        count(Action::Skipped),
        if untouched > 0 { format!("{untouched} untouched, ") } else { String::new() },
        count(Action::Failed),
        if stopped > 0 { format!(", {stopped} stopped") } else { String::new() },
        s.seconds
    );
    for c in &s.completed {
        let _ = writeln!(
            out,
            "completed first: {} swapped in, a swap run {} left pending when it died (its move is now whole)",
            c.partition, c.run_id
        );
    }
    let rows = quarantined_now(s);
    if rows > 0 {
        let _ = writeln!(
            out,
            "{rows} conflicting row(s) set aside in quarantine/{}/ of the state location (on_conflict = \"quarantine\")",
            s.run_id
        );
    }
    out
}

/// `verify`'s summary: the table and how many partitions match their recomputation. It
/// writes nothing, so it has no run to name.
pub fn verify_table(s: &RunSummary) -> String {
    let mut out = partitions(s);
    let count = |a: Action| s.partitions.iter().filter(|p| p.action == a).count();
    let _ = writeln!(
        out,
        "verify: {} verified, {} differ, {}{} failed in {:.2}s",
        count(Action::Verified),
        count(Action::Differs),
        match count(Action::Untouched) {
            0 => String::new(),
            n => format!("{n} untouched (no input, no file), "),
        },
        count(Action::Failed),
        s.seconds
    );
    for p in s.partitions.iter().filter(|p| p.note.is_some()) {
        let _ = writeln!(out, "{}: {}", p.date, p.note.as_deref().unwrap_or_default());
    }
    out
}

/// The partitions as an aligned text table.
fn partitions(s: &RunSummary) -> String {
    let merging = s.merge || s.partitions.iter().any(|p| p.merge.is_some());
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
    // Rows set aside under `on_conflict = "quarantine"`: a column when there are any.
    let quarantine = s.partitions.iter().any(|p| p.counts.is_some_and(|c| c.quarantined_rows > 0));
    let mut head = head;
    if quarantine {
        head.insert(head.len() - 2, "quarantined");
    }
    let mut rows: Vec<Vec<String>> = Vec::new();
    for p in &s.partitions {
        // Counts not taken (failed before its rows were all read): "-", not 0.
        let count = |f: fn(&PrepareStats) -> u64| p.counts.as_ref().map_or("-".to_string(), |c| f(c).to_string());
        let mut r = vec![p.date.to_string(), p.action.to_string(), count(|c| c.input_rows), count(|c| c.duplicates)];
        match (&p.merge, merging) {
            (Some(m), _) => r.extend(
                [m.inserted, m.updated, m.deleted, m.unchanged, m.ignored_older, m.conflicts, m.moved_in, m.moved_out]
                    .map(|v| v.to_string()),
            ),
            (None, true) => r.extend(std::iter::repeat_n(String::new(), 8)),
            (None, false) => r.extend([count(|c| c.superseded), count(|c| c.deleted)]),
        }
        if quarantine {
            r.push(count(|c| c.quarantined_rows));
        }
        // A failed partition wrote nothing: its committed file, if any, is as it was.
        r.push(match p.action {
            Action::Failed => "-".to_string(),
            _ => p.output_rows.to_string(),
        });
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
    out
}

#[derive(Serialize)]
struct SummaryJson<'a> {
    run_id: Option<&'a str>,
    exit_code: i32,
    /// Why the run stopped as a whole (a refused config, a busy table, a journal that could
    /// not be written); a partition's own error is in its report.
    error: Option<&'a str>,
    seconds: f64,
    counts: BTreeMap<String, usize>,
    quarantined_rows: u64,
    partitions: &'a [PartitionReport],
    /// Swaps a killed run left pending that this run completed first: the table changed in
    /// those partitions though no report of this run says so.
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    completed_moves: &'a [crate::journal::CompletedSwap],
}

fn counts(partitions: &[PartitionReport]) -> BTreeMap<String, usize> {
    let mut c = BTreeMap::new();
    for p in partitions {
        *c.entry(p.action.to_string()).or_insert(0) += 1;
    }
    c
}

/// The summary as JSON (`--summary-json`).
pub fn json(s: &RunSummary) -> String {
    serde_json::to_string_pretty(&SummaryJson {
        run_id: Some(&s.run_id),
        exit_code: s.exit_code.code(),
        error: s.journal_error.as_deref(),
        seconds: s.seconds,
        counts: counts(&s.partitions),
        quarantined_rows: quarantined_now(s),
        partitions: &s.partitions,
        completed_moves: &s.completed,
    })
    .unwrap_or_default()
}

/// The summary of a run refused as a whole before it ran (a bad config, a busy table).
pub fn refused_json(exit_code: ExitCode, error: &str, seconds: f64) -> String {
    ended_json(None, exit_code, error, seconds)
}

/// The summary of a run that ended without its partitions' reports (refused before it ran, or
/// exited as a stop ran out of time): its id when it had one, its exit code and why.
pub fn ended_json(run_id: Option<&str>, exit_code: ExitCode, error: &str, seconds: f64) -> String {
    serde_json::to_string_pretty(&SummaryJson {
        run_id,
        exit_code: exit_code.code(),
        error: Some(error),
        seconds,
        counts: BTreeMap::new(),
        quarantined_rows: 0,
        partitions: &[],
        completed_moves: &[],
    })
    .unwrap_or_default()
}

/// What `--summary-json` holds while the run goes: an older attempt's summary is gone. Its
/// run id once the run has one, so a run killed on the way can be retried (`--retry-failed`).
pub fn running_json(run_id: Option<&str>) -> String {
    serde_json::to_string_pretty(&serde_json::json!({ "run_id": run_id, "status": "running", "exit_code": null }))
        .unwrap_or_default()
}

/// The rows set aside in `quarantine/` by this run: those of the partitions it wrote, and of a
/// merge's partitions it found unchanged or left untouched (a merge writes them whenever it sets
/// rows aside).
pub fn quarantined_now(s: &RunSummary) -> u64 {
    s.partitions.iter().map(|p| p.quarantined_by_run()).sum()
}

/// The summary of `--dry-run`: nothing ran.
pub fn dry_run_json() -> String {
    serde_json::to_string_pretty(
        &serde_json::json!({ "run_id": null, "dry_run": true, "exit_code": 0, "partitions": [] }),
    )
    .unwrap_or_default()
}

/// `verify --json`: how many partitions match their recomputation, how many do not.
/// `strays`: objects of the table's folder outside every partition.
pub fn verify_json(s: &RunSummary, strays: &[String]) -> String {
    let count = |a: Action| s.partitions.iter().filter(|p| p.action == a).count();
    serde_json::to_string_pretty(&serde_json::json!({
        "exit_code": s.exit_code.code(),
        "verified": count(Action::Verified),
        "differs": count(Action::Differs),
        "failed": count(Action::Failed),
        "strays": strays,
        "seconds": s.seconds,
        "partitions": s.partitions,
    }))
    .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_merge_whose_partitions_all_failed_shows_a_merges_columns() {
        let failed = PartitionReport {
            date: chrono::NaiveDate::from_ymd_opt(2026, 11, 1).unwrap(),
            action: Action::Failed,
            counts: Default::default(),
            output_rows: 0,
            merge: None,
            seconds: 0.0,
            spilled_bytes: 0,
            error: Some("a conflict".into()),
            note: None,
            exit_code: 3,
        };
        let summary = |merge: bool| RunSummary {
            run_id: "r".into(),
            partitions: vec![failed.clone()],
            exit_code: ExitCode::DataContract,
            seconds: 0.0,
            journal_error: None,
            merge,
            completed: Vec::new(),
        };
        let merged = table(&summary(true));
        assert!(
            merged.contains("inserted") && merged.contains("moved in") && !merged.contains("superseded"),
            "{merged}"
        );
        let aggregated = table(&summary(false));
        assert!(aggregated.contains("superseded") && !aggregated.contains("inserted"), "{aggregated}");
    }
}
