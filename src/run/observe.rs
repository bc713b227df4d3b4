//! What a run tells the outside world while it goes: events, to an [`Observer`] the caller
//! passes. The library prints nothing; the `lakeswap` binary turns the events into a progress
//! bar, plain progress lines or log records.

use chrono::NaiveDate;

use crate::journal::PartitionReport;

/// Something that happened in a run.
#[derive(Debug)]
pub enum Event<'a> {
    /// The partitions are planned.
    Planned { run_id: &'a str, partitions: usize },
    /// A partition is through its expensive part: computed (or failed computing).
    Computed { date: NaiveDate, input_rows: u64, failed: bool },
    /// A partition too large for the memory budget is prepared bucket by bucket.
    Spilling { date: NaiveDate, bucket: usize, buckets: usize },
    /// A partition was not computed: skipped as unchanged, or refused (leased elsewhere).
    Passed { date: NaiveDate, why: &'static str },
    /// A partition's outcome is final.
    Done { report: &'a PartitionReport },
}

/// Hears a run's events. Called from the run's tasks: keep it quick.
pub trait Observer: Send + Sync {
    fn event(&self, event: &Event<'_>);
}

/// Hears nothing.
#[derive(Debug, Default)]
pub struct Silent;

impl Observer for Silent {
    fn event(&self, _: &Event<'_>) {}
}
