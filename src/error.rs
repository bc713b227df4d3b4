//! Errors and exit codes.
//!
//! Two levels: an [`Error`] stops the whole run before or outside partition work (bad config,
//! unreachable store), a [`PartitionError`] fails one partition and the run goes on with the
//! others. Every message names the object (and row / column where known) and says what to do.
//! `main` maps both to the exit codes of the contract through [`ExitCode`].

use std::fmt;

use chrono::NaiveDate;

/// Exit codes for schedulers (docs/design.md §1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
pub enum ExitCode {
    /// Every partition committed or unchanged.
    Ok = 0,
    /// Some partitions failed, the others committed.
    PartialFailure = 1,
    /// Usage or config error, nothing done.
    Usage = 2,
    /// Data contract violation (conflicts, bad rows).
    DataContract = 3,
    /// A partition is leased by another live run.
    Leased = 4,
    /// Stopped by SIGHUP (the terminal that started it closed): what was in flight finished or
    /// was abandoned safely.
    HungUp = 129,
    /// Stopped by SIGINT (Ctrl-C): what was in flight finished or was abandoned safely.
    Interrupted = 130,
    /// Stopped by SIGTERM (a pod eviction, a task timeout), likewise.
    Terminated = 143,
}

impl ExitCode {
    pub fn code(self) -> i32 {
        self as i32
    }

    /// The exit code of a run whose partitions failed with `codes`, the most severe: what needs
    /// a person (a config error, then a contract violation) wins over a stop, which a scheduler
    /// retries — a stop that came after a date's conflicts must not have them retried unseen —
    /// a stop over a lease, a lease over any other failure.
    pub fn combine(codes: impl IntoIterator<Item = ExitCode>) -> ExitCode {
        let mut worst = ExitCode::Ok;
        for c in codes {
            let rank = |c: ExitCode| match c {
                ExitCode::Ok => 0,
                ExitCode::PartialFailure => 1,
                ExitCode::Leased => 2,
                ExitCode::HungUp | ExitCode::Interrupted | ExitCode::Terminated => 3,
                ExitCode::DataContract => 4,
                ExitCode::Usage => 5,
            };
            if rank(c) > rank(worst) {
                worst = c;
            }
        }
        worst
    }
}

/// A config problem: exit code 2, nothing done.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("config {path}: {message}")]
    Parse { path: String, message: String },
    #[error("config {path}: `{key}`: {message}")]
    Invalid { path: String, key: String, message: String },
}

/// An error that stops the run as a whole.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    Config(#[from] ConfigError),

    #[error("{0}")]
    Usage(String),

    /// Another live run holds what this run needs (exit 4).
    #[error("{0}")]
    Leased(String),

    #[error("{what} {path}: {source}")]
    Store {
        what: &'static str,
        path: String,
        #[source]
        source: object_store::Error,
    },

    #[error("{0}")]
    Input(#[from] InputError),

    #[error("could not write {path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },

    #[error("internal error in {what}: {message}")]
    Internal { what: &'static str, message: String },

    /// A killed run's move could not be completed and left keys under two dates (exit 1).
    #[error("{0}")]
    Unfinished(String),

    /// Stopped by a signal before any partition was held: nothing done.
    #[error("stopped ({0}) before any partition was taken: nothing was done")]
    Stopped(&'static str),
}

impl Error {
    pub fn exit_code(&self) -> ExitCode {
        match self {
            Error::Config(_) | Error::Usage(_) => ExitCode::Usage,
            Error::Leased(_) => ExitCode::Leased,
            Error::Input(e) => e.exit_code(),
            Error::Store { .. } | Error::Io { .. } | Error::Internal { .. } | Error::Unfinished(_) => {
                ExitCode::PartialFailure
            }
            Error::Stopped(signal) => PartitionError::Stopped { signal }.exit_code(),
        }
    }

    pub(crate) fn store(what: &'static str, path: impl fmt::Display, source: object_store::Error) -> Self {
        Error::Store { what, path: path.to_string(), source }
    }

    /// A partition's error met where no partition runs (reading a table's files for its plan,
    /// its status): a store that failed stays one (exit 1: a retry may pass), not a usage error.
    pub(crate) fn of_partition(e: PartitionError) -> Self {
        match e {
            PartitionError::Store { what, path, source } => Error::Store { what, path, source },
            other => Error::Internal { what: "reading the table", message: other.to_string() },
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Where in the input something was found: object, and row / column when known.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Location {
    pub object: String,
    /// 0-based row within the object (data rows, the CSV header not counted).
    pub row: Option<u64>,
    /// 1-based line within a text object (after decompression).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line: Option<u64>,
    pub column: Option<String>,
}

impl Location {
    pub fn object(object: impl Into<String>) -> Self {
        Location { object: object.into(), row: None, line: None, column: None }
    }
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.object)?;
        match (self.row, self.line) {
            (Some(row), Some(line)) => write!(f, ", row {row} (line {line})")?,
            (Some(row), None) => write!(f, ", row {row}")?,
            (None, Some(line)) => write!(f, ", line {line}")?,
            (None, None) => {}
        }
        if let Some(col) = &self.column {
            write!(f, ", column `{col}`")?;
        }
        Ok(())
    }
}

/// A problem with the input data itself.
#[derive(Debug, Clone, thiserror::Error)]
pub enum InputError {
    #[error("bad input at {at}: {message}")]
    Bad { at: Location, message: String },

    #[error("cannot read {at}: {message}")]
    Unreadable { at: Location, message: String },
}

impl InputError {
    pub fn bad(at: Location, message: impl Into<String>) -> Self {
        InputError::Bad { at, message: message.into() }
    }
    pub fn unreadable(at: Location, message: impl Into<String>) -> Self {
        InputError::Unreadable { at, message: message.into() }
    }
    /// Where the problem is.
    pub fn location(&self) -> &Location {
        match self {
            InputError::Bad { at, .. } | InputError::Unreadable { at, .. } => at,
        }
    }
    pub fn exit_code(&self) -> ExitCode {
        match self {
            InputError::Bad { .. } => ExitCode::DataContract,
            InputError::Unreadable { .. } => ExitCode::PartialFailure,
        }
    }
}

/// One conflicting key: the same key and version with two different payloads, or one key
/// under two partition dates.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ConflictKey {
    /// The key, rendered as text (`a|b` for a key of several columns).
    pub key: String,
    /// The version, rendered as text, when the conflict is between two payloads.
    pub version: Option<String>,
    /// The objects (and rows) holding the two rows.
    pub at: Vec<Location>,
}

impl fmt::Display for ConflictKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "key {}", self.key)?;
        if let Some(v) = &self.version {
            write!(f, " version {v}")?;
        }
        let at: Vec<String> = self.at.iter().map(|l| l.to_string()).collect();
        write!(f, " ({})", at.join(" vs "))
    }
}

/// The declared type that reads a key exactly on both sides of a [`PartitionError::KeyTypesDiffer`]:
/// int64 for integers, utf8 where one side is text (its digits were inferred a number); else
/// no suggestion, as text would spell one value two ways (`1.00` and `1.000`).
fn suggest(column: &str, here: &str, there: &str) -> String {
    let int = |t: &str| t.starts_with("Int") || t.starts_with("UInt");
    match (here, there) {
        (a, b) if int(a) && int(b) => format!(" (`{column} = \"int64\"`)"),
        (a, b) if a == "utf8" || b == "utf8" => format!(" (`{column} = \"utf8\"`)"),
        _ => " as the one type its values have".to_string(),
    }
}

/// Why one partition failed. The run goes on with the other partitions.
#[derive(Debug, thiserror::Error)]
pub enum PartitionError {
    #[error(
        "{total} conflicting key(s): the same key and version (without a version column, the same key) with two different \
         payloads; first {}: {}. \
         Fix the source, or set `[prepare] on_conflict = \"quarantine\"` to set them aside",
        keys.len(), list(keys)
    )]
    Conflict { keys: Vec<ConflictKey>, total: usize },

    #[error(
        "{total} key(s) seen under two dates (the partition date must be a property of the entity); \
         first {}: {}. Fix the source so every version of a key carries the same date",
        keys.len(), list(keys)
    )]
    KeyUnderTwoDates { keys: Vec<ConflictKey>, total: usize },

    #[error(
        "the key column `{column}` is {here} under this date but {there} under {date}{}: keys of \
         different types cannot be compared across dates, so a key under two dates could go unseen. \
         Declare the column's type in [input.schema]{}, so every date reads it alike",
        match others { 0 => String::new(), n => format!(" and {n} other date(s) of this run") },
        suggest(column, here, there)
    )]
    KeyTypesDiffer { column: String, here: String, there: String, date: NaiveDate, others: usize },

    #[error("{0}")]
    Input(#[from] InputError),

    /// Refused as a config the table cannot take (exit 2), found only when committing.
    #[error("{0}")]
    Refused(String),

    #[error(
        "no input rows for {date}: nothing was written, and a partition committed for it stays as it is. \
         Check that the input for this date has arrived, or pass --allow-empty to write a zero-row partition"
    )]
    MissingInput { date: NaiveDate },

    #[error(
        "this date's rows give another table schema than the run's: {why}. The objects of this date \
         differ from the others; declare the column's type in [input.schema], or rebuild the table \
         (--schema-change rebuild)"
    )]
    OutputSchema { why: String },

    #[error("the daily table's query failed on this date's rows: {message}")]
    Query { message: String },

    #[error("measure `{measure}` overflows: {message}")]
    Overflow { measure: String, message: String },

    #[error(
        "partition is leased by run {holder} on {host} since {since}; the lease expires at {expires} \
         (in {left} s) unless that run renews it: wait for it (--wait) or run again after it finishes"
    )]
    Leased { holder: String, host: String, since: String, expires: String, left: u64 },

    #[error(
        "not run: the run was stopped ({signal}) before this partition was committed; what is committed \
         stays as it was. Run it again (--retry-failed RUN_ID)"
    )]
    Stopped { signal: &'static str },

    #[error(
        "this run lost the lease of {dir} (it expired, or another run took it over): nothing was written. \
         Run again; if runs stall for long, raise --lease-ttl"
    )]
    LeaseLost { dir: String },

    #[error(
        "the store failed while this run held the lease of {dir}, so the lease could not be renewed and expired \
         ({error}): nothing was written, as another run may take the date now. Run again once the store \
         answers (--retry-failed RUN_ID)"
    )]
    LeaseUnrenewed { dir: String, error: String },

    #[error(
        "{path} changed since this run planned it (another run committed it in between); \
         nothing was overwritten. Run again to recompute from the newest state"
    )]
    Fenced { path: String },

    #[error(
        "readers of the partition {dir} would also read objects lakeswap did not write: {}. A partition is \
         exactly one object, or readers mix other rows into it; lakeswap never deletes what it did not write. \
         {}",
        objects.join(", "),
        if *remove_set {
            "Move them away: `foreign_files = \"remove\"` removes only objects inside the partition's own folder, \
             and nothing through a symbolic link"
        } else {
            "Move them away, or set `[output] foreign_files = \"remove\"`"
        }
    )]
    Foreign { dir: String, objects: Vec<String>, remove_set: bool },

    #[error(
        "{path} {}. A merged table is its own history, so nothing is merged into it: put this date's own file \
         back (from a backup), or remove it to start this date anew",
        match holds {
            Some(d) => format!("holds the partition of {d} by its lineage: a file of another date copied in"),
            None => "has no lakeswap lineage: lakeswap did not write it (a copy, or a file written by hand), or it was cut short or damaged since".into(),
        }
    )]
    Misplaced { path: String, holds: Option<chrono::NaiveDate> },

    #[error(
        "{path} is reached through a symbolic link ({link}), so a swap would replace the file the link leads \
         to: another table's partition, or another date's. Nothing was written. lakeswap writes only into its own \
         table's folders: remove the link (and keep what it leads to), then run the date again"
    )]
    Linked { path: String, link: String },

    /// `why` ends with what to do.
    #[error("{path} differs from a recomputation from its input: {why}")]
    Differs { path: String, why: String },

    #[error(
        "{path} has no lakeswap lineage: lakeswap did not write it (a copy, or another tool's file), or it was cut \
         short or damaged since, and lakeswap overwrites only its own files. Nothing was written. Move it away (to keep it), or set `[output] \
         foreign_files = \"remove\"` to have the run replace it"
    )]
    NotOurs { path: String },

    #[error("verification of the staged file {path} failed: {message}")]
    Verify { path: String, message: String },

    #[error("{what} {path}: {source}")]
    Store {
        what: &'static str,
        path: String,
        #[source]
        source: object_store::Error,
    },

    #[error("spilling to {path} failed: {message}. The partition was not written; {}", spill_hint(message))]
    Spill { path: String, message: String },

    #[error(
        "the keys of {date}, which this run does not compute (skipped as unchanged, held by another run, or another \
         date of the run it retries), could not be read for the check that no key is under two dates: {reason}"
    )]
    GuardUnread { date: chrono::NaiveDate, reason: String, exit: ExitCode },

    #[error(
        "the rows of {date} could not be read again to name the keys this date may share with it (for the check \
         that no key is under two dates): {reason}"
    )]
    KeysUnread { date: chrono::NaiveDate, reason: String, exit: ExitCode },

    #[error("{0}")]
    Other(String),
}

fn list(keys: &[ConflictKey]) -> String {
    keys.iter().map(|k| k.to_string()).collect::<Vec<_>>().join("; ")
}

impl PartitionError {
    pub fn exit_code(&self) -> ExitCode {
        match self {
            PartitionError::Conflict { .. }
            | PartitionError::KeyUnderTwoDates { .. }
            | PartitionError::KeyTypesDiffer { .. }
            | PartitionError::OutputSchema { .. }
            | PartitionError::Query { .. }
            | PartitionError::Overflow { .. } => ExitCode::DataContract,
            PartitionError::Input(e) => e.exit_code(),
            PartitionError::GuardUnread { exit, .. } | PartitionError::KeysUnread { exit, .. } => *exit,
            PartitionError::Leased { .. } | PartitionError::LeaseLost { .. } => ExitCode::Leased,
            PartitionError::Refused(_) => ExitCode::Usage,
            PartitionError::Stopped { signal } => match *signal {
                "SIGINT" => ExitCode::Interrupted,
                "SIGHUP" => ExitCode::HungUp,
                _ => ExitCode::Terminated,
            },
            PartitionError::MissingInput { .. }
            | PartitionError::Foreign { .. }
            | PartitionError::Linked { .. }
            | PartitionError::Misplaced { .. }
            | PartitionError::NotOurs { .. }
            | PartitionError::Fenced { .. }
            | PartitionError::Verify { .. }
            | PartitionError::Differs { .. }
            | PartitionError::Store { .. }
            | PartitionError::LeaseUnrenewed { .. }
            | PartitionError::Spill { .. }
            | PartitionError::Other(_) => ExitCode::PartialFailure,
        }
    }

    pub(crate) fn store(what: &'static str, path: impl fmt::Display, source: object_store::Error) -> Self {
        PartitionError::Store { what, path: path.to_string(), source }
    }
}

impl From<Error> for PartitionError {
    fn from(e: Error) -> Self {
        match e {
            Error::Input(i) => PartitionError::Input(i),
            Error::Store { what, path, source } => PartitionError::Store { what, path, source },
            other => PartitionError::Other(format!("{other:#}")),
        }
    }
}

/// What to do about a spill that failed, by the system's reason.
fn spill_hint(message: &str) -> &'static str {
    if message.contains("No space left") || message.contains("quota") {
        "free disk space there, or choose another folder with --spill-dir"
    } else if message.contains("Too many open files") {
        "raise the limit of open files (`ulimit -n`), or give a larger --memory-limit"
    } else {
        "check that --spill-dir names a folder this process can write, or choose another one"
    }
}

/// What a panic said (its message, when it is text).
pub(crate) fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    let why = panic.downcast_ref::<&str>().map(|s| s.to_string());
    why.or_else(|| panic.downcast_ref::<String>().cloned()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::ExitCode::{self, *};

    /// A run exits with the most severe of its dates' codes: what needs a person (2, 3) over a
    /// stop, which a scheduler retries; a stop over a lease (4) and any other failure (1).
    #[test]
    fn a_run_exits_with_its_most_severe_code() {
        for (codes, worst) in [
            (&[DataContract, Terminated][..], DataContract),
            (&[Terminated, DataContract], DataContract),
            (&[Interrupted, Usage, DataContract], Usage),
            (&[Leased, HungUp, PartialFailure], HungUp),
            (&[PartialFailure, Leased, Ok], Leased),
            (&[Ok, PartialFailure], PartialFailure),
            (&[], Ok),
        ] {
            assert_eq!(ExitCode::combine(codes.iter().copied()), worst, "{codes:?}");
        }
    }
}
