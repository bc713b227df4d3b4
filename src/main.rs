//! The `lakeswap` command: flags are parsed and checked first, then resolved into a job and a
//! run; `main` owns the exit codes and prints an error chain once.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode as ProcessExit;
use std::sync::Arc;

use clap::{Args, Parser, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use lakeswap::commit::Action;
use lakeswap::vars::Vars;
use lakeswap::{dates, generate, report, run, Error, ExitCode, Job, RunOptions};

// What the command prints goes to streams a reader may have closed (`| head`, a log shipper
// that died) or that cannot take more (a full disk): a write that fails is dropped, as
// `println!` would panic (exit 101, the summary left "running", a run stopped mid-commit).
// What a run did is told by its exit code, its summary and its journal all the same.
macro_rules! out {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let _ = write!(std::io::stdout(), $($t)*);
    }};
}
macro_rules! outln {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($t)*);
    }};
}
macro_rules! errln {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($t)*);
    }};
}

#[derive(Parser)]
#[command(
    name = "lakeswap",
    version,
    about = "Idempotent daily tables for data lakes",
    long_about = "Reads raw events, drops exact duplicates, refuses conflicting versions, keeps the latest \
version of each key, computes a table per date and swaps each date's partition in atomically. \
Running a date again replaces it byte for byte; it never appends.\n\n\
Exit codes: 0 every partition committed or unchanged, 1 some partitions failed (the others \
committed) or a store error stopped the run as a whole, 2 usage or config error (nothing done), 3 data contract violation (conflicts, bad \
rows), 4 a partition is leased by another live run, 129 / 130 / 143 stopped by SIGHUP / SIGINT / SIGTERM (the \
partitions in flight finished or were left as they were; the others are reported `stopped`; a \
second signal exits at once).\n\n\
Config values may use ${VAR} and ${VAR:-default}, from --var NAME=VALUE or the environment.",
    after_help = "Examples:\n  lakeswap run --config config/example.toml --from 2026-11-01 --to 2026-11-07\n  \
lakeswap run --config revenue.toml --date yesterday\n  \
lakeswap generate --out /tmp/orders --days 10 --rows-per-day 1000000"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// Set a config variable: `${NAME}` in the config's values reads it before the environment
    /// (repeatable; also accepted after the command, each name once in all).
    #[arg(long = "var", value_name = "NAME=VALUE", value_parser = lakeswap::vars::Vars::parse_pair)]
    vars: Vec<(String, String)>,
}

/// `--var` of the commands that read a config.
#[derive(Args)]
struct VarArgs {
    /// Set a config variable: `${NAME}` in the config's values reads it before the environment
    /// (repeatable, each name once).
    #[arg(long = "var", value_name = "NAME=VALUE", value_parser = lakeswap::vars::Vars::parse_pair)]
    vars: Vec<(String, String)>,
}

/// The variables given before the command and after it, together; a name given twice is
/// refused (which one was meant?).
fn config_vars(before: &[(String, String)], after: &VarArgs) -> Result<Vars, Error> {
    let mut seen = std::collections::HashSet::new();
    for (name, _) in before.iter().chain(&after.vars) {
        if !seen.insert(name) {
            return Err(usage(format!("--var {name}: given more than once; give each variable once")));
        }
    }
    Ok(Vars::environment().with(before.iter().chain(&after.vars).cloned()))
}

#[derive(Subcommand)]
enum Command {
    /// Compute and atomically replace the partitions of a date range.
    #[command(after_help = "Exit codes: 0 every partition committed or unchanged, 1 some partitions failed \
(the others committed) or a store error stopped the run, 2 usage or config error (nothing done), 3 a \
data contract violation (conflicts, bad rows, a key under two dates), 4 a partition leased by another \
live run, 129 / 130 / 143 stopped by SIGHUP / SIGINT / SIGTERM.\n\n\
Examples:\n  \
lakeswap run --config config/example.toml --from 2026-11-01 --to 2026-11-07\n  \
lakeswap run --config revenue.toml --date yesterday          # daily, from cron\n  \
lakeswap run --config revenue.toml --from today-7 --to yesterday --summary-json out.json\n  \
lakeswap run --config revenue.toml --date 2026-11-05 --dry-run   # show the plan only\n  \
lakeswap run --config config/orders_current.toml                 # merge: every date of the batch")]
    Run(RunArgs),
    /// Write the reference raw order events (Hive-partitioned Parquet).
    #[command(
        after_help = "Example:\n  lakeswap generate --out /tmp/orders --days 10 --rows-per-day 1000000 --conflicts 7"
    )]
    Generate(GenerateArgs),
    /// Show recent runs and, per partition, committed / failed / missing with rows and lineage.
    #[command(after_help = "Exit code 0, or 2 on a usage or config error; 1 when the table's store cannot be \
read.\n\nExamples:\n  lakeswap status --config revenue.toml\n  \
lakeswap status --config revenue.toml --from 2026-11-01 --to 2026-11-30   # missing days show too")]
    Status(RangeArgs),
    /// Recompute the partitions of --date or --from/--to (required), within --memory-limit as a
    /// run does, and report any whose committed bytes differ.
    #[command(after_help = "Exit code 0 when every partition matches, 1 when one differs or is missing (or \
its recomputation fails on the store), 3 when a recomputation fails on its data (conflicting \
versions, a bad row, a key under two dates: what a run of the date would fail on).\n\n\
Example:\n  lakeswap verify --config revenue.toml --from 2026-11-01 --to 2026-11-07")]
    Verify(VerifyArgs),
    /// Remove what crashed runs left behind: stale staging and expired leases.
    #[command(after_help = "A live run's staging and leases are never touched. Every run also cleans up\n\
the partitions it works on, so gc is only needed for dates that are not run again.\n\n\
Exit code 0, or 2 on a usage or config error; 1 when the store fails.\n\n\
Examples:\n  lakeswap gc --config revenue.toml\n  \
lakeswap gc --config revenue.toml --quarantine-older-than 30d\n  \
lakeswap gc --config revenue.toml --runs-older-than 90d")]
    Gc(GcArgs),
}

/// The memory a run (or `verify`) may use, and where it spills.
#[derive(Args)]
struct BudgetArgs {
    /// The memory the run may use: 512MiB, 4GiB (powers of 1024), 2GB or 2G (of 1000), or 60%
    /// (of the machine, or of the container's limit) [default: 50%]. Fewer partitions run at
    /// once when they are large; a partition larger than the limit is split by key into buckets
    /// spilled to --spill-dir and prepared one bucket at a time, with the same result, byte for
    /// byte. The program itself (its code, the query engine) takes 60 to 180 MiB beside the
    /// data: a limit below about 256MiB bounds the data a run holds, not the whole process.
    #[arg(long, value_name = "SIZE", env = "LAKESWAP_MEMORY_LIMIT")]
    memory_limit: Option<String>,
    /// Where partitions larger than --memory-limit spill (a local folder with room for about
    /// half the date's rows, uncompressed; created if missing, not its parent)
    /// [default: the system's temporary folder]. Each run
    /// spills into its own `lakeswap-<run id>/` folder, removed when it ends; `gc` removes a
    /// killed run's.
    #[arg(long, value_name = "DIR", env = "LAKESWAP_SPILL_DIR")]
    spill_dir: Option<PathBuf>,
}

impl BudgetArgs {
    /// The budget in bytes and the spill folder, the budget checked against the machine.
    fn resolve(&self) -> Result<(u64, PathBuf), Error> {
        // An empty value is refused, as every other flag's: the default is the flag (and
        // LAKESWAP_MEMORY_LIMIT) left out.
        let memory_limit = match self.memory_limit.as_deref() {
            Some(text) => lakeswap::spill::parse_size(text, lakeswap::spill::machine_memory())
                .map_err(|m| usage(format!("--memory-limit (or LAKESWAP_MEMORY_LIMIT): {m}")))?,
            None => lakeswap::spill::default_limit(),
        };
        let machine = lakeswap::spill::machine_memory();
        if memory_limit > machine {
            tracing::warn!(
                "--memory-limit {} MiB is more than this machine's memory ({} MiB): a date that does not fit in \
                 memory is read in memory all the same, not spilled",
                memory_limit >> 20,
                machine >> 20
            );
        }
        if memory_limit < SMALL_BUDGET {
            return_freed_memory();
        }
        Ok((memory_limit, self.spill_dir.clone().unwrap_or_else(std::env::temp_dir)))
    }
}

#[derive(Args)]
struct VerifyArgs {
    #[command(flatten)]
    range: RangeArgs,
    #[command(flatten)]
    budget: BudgetArgs,
}

#[derive(Args)]
struct RunArgs {
    #[command(flatten)]
    vars: VarArgs,
    /// The job's TOML config (see README.md for the keys).
    #[arg(long, short, env = "LAKESWAP_CONFIG")]
    config: PathBuf,
    /// One date: YYYY-MM-DD, today, yesterday or today-N (in the job's time zone). A merge job
    /// without dates merges every date its batch holds.
    #[arg(long, conflicts_with_all = ["from", "to", "retry_failed"])]
    date: Option<String>,
    /// Re-run exactly the partitions that the run RUN_ID failed or did not get to (stopped, or
    /// never reached by a run that was killed), from its journal (`status` lists the runs). A
    /// daily table's retried dates are checked against the run's other dates (no key under two
    /// dates), whose input is read for their keys and which are not written.
    #[arg(long, value_name = "RUN_ID", conflicts_with_all = ["from", "to"])]
    retry_failed: Option<String>,
    /// Take a deterministic share of the dates: I/N runs every N-th date of the range, from
    /// the I-th (0-based), so N machines split a backfill; leases keep overlaps safe.
    #[arg(long, value_name = "I/N")]
    shard: Option<String>,
    /// Skip partitions whose committed file was made by the same config from the same input
    /// objects (sizes and e-tags), without reading their input: cheap trailing-window runs. A
    /// file written under older rules (before a fix that changes what it holds) is recomputed.
    /// Aggregate jobs (a merge's partitions are not computed from input alone).
    #[arg(long)]
    skip_unchanged: bool,
    /// Log records on stderr as text or as JSON objects (for log collectors): one per partition
    /// outcome and one at the start and end of the run, errors included. On a terminal, text
    /// shows a progress bar instead of the records of partitions that went well.
    #[arg(long, value_enum, default_value_t = LogFormat::Text, env = "LAKESWAP_LOG_FORMAT")]
    log_format: LogFormat,
    /// Print nothing on stdout (the result table); logs and errors still go to stderr.
    #[arg(long, short)]
    quiet: bool,
    /// First date of the range (inclusive): YYYY-MM-DD, today, yesterday or today-N.
    #[arg(long, requires = "to")]
    from: Option<String>,
    /// Last date of the range (inclusive), written as --from.
    #[arg(long, requires = "from")]
    to: Option<String>,
    /// Partitions processed at once [default: the number of cores, at most 8]. Cores left over (a range
    /// shorter than this) go to each partition's hash pass and measures.
    #[arg(long, env = "LAKESWAP_CONCURRENCY")]
    concurrency: Option<usize>,
    /// Write a zero-row partition for a date without input, instead of failing it. Aggregate
    /// jobs (a merge date without input changes nothing).
    #[arg(long)]
    allow_empty: bool,
    /// Print the plan (dates, input objects, actions) and touch nothing.
    #[arg(long)]
    dry_run: bool,
    /// Also write the summary as JSON to this file, on every exit: a refused run's holds its
    /// error and exit code. Checked to be writable before the run starts.
    #[arg(long)]
    summary_json: Option<PathBuf>,
    /// Wait for partitions leased by another run, instead of failing them with exit code 4.
    #[arg(long)]
    wait: bool,
    /// Seconds a partition lease lives without renewal (1 to 604800, 7 days); a crashed run's
    /// partitions are free again after this long. Renewed every third of it while the run lives.
    #[arg(long, default_value_t = 60, env = "LAKESWAP_LEASE_TTL")]
    lease_ttl: u64,
    /// When this run's output schema differs from the table's (a column added, removed or
    /// retyped), the run is refused. `rebuild` rewrites every committed partition under the
    /// new schema instead; the range must cover all of them.
    #[arg(long, value_enum, value_name = "HOW")]
    schema_change: Option<SchemaChangeArg>,
    #[command(flatten)]
    budget: BudgetArgs,
    /// Seconds a run asked to stop (SIGTERM, SIGINT, SIGHUP) has to finish its swaps in flight,
    /// release its leases and write its journal. A store that does not answer would hold it for
    /// minutes of retries: past this, it exits as a second signal makes it (what is committed
    /// stays; its leases expire). Keep it below the scheduler's grace before SIGKILL
    /// (Kubernetes: 30 s by default).
    #[arg(long, value_name = "SECS", default_value_t = 20, env = "LAKESWAP_STOP_TIMEOUT")]
    stop_timeout: u64,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum SchemaChangeArg {
    /// Rewrite every committed partition under the new schema.
    Rebuild,
}

#[derive(Args)]
struct RangeArgs {
    #[command(flatten)]
    vars: VarArgs,
    /// The job's TOML config.
    #[arg(long, short, env = "LAKESWAP_CONFIG")]
    config: PathBuf,
    /// One date (YYYY-MM-DD, today, yesterday, today-N).
    #[arg(long, conflicts_with_all = ["from", "to"])]
    date: Option<String>,
    /// First date of the range (inclusive): YYYY-MM-DD, today, yesterday or today-N.
    #[arg(long, requires = "to")]
    from: Option<String>,
    /// Last date of the range (inclusive), written as --from.
    #[arg(long, requires = "from")]
    to: Option<String>,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

impl RangeArgs {
    fn dates(&self, tz: chrono_tz::Tz) -> Result<Option<Vec<chrono::NaiveDate>>, Error> {
        Ok(match (&self.date, &self.from, &self.to) {
            (Some(d), _, _) => Some(vec![dates::resolve(d, tz).map_err(usage)?]),
            (None, Some(f), Some(t)) => Some(
                dates::range(dates::resolve(f, tz).map_err(usage)?, dates::resolve(t, tz).map_err(usage)?)
                    .map_err(usage)?,
            ),
            _ => None,
        })
    }
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Args)]
struct GcArgs {
    #[command(flatten)]
    vars: VarArgs,
    /// The job's TOML config.
    #[arg(long, short, env = "LAKESWAP_CONFIG")]
    config: PathBuf,
    /// Also remove rows quarantined (on_conflict = "quarantine") longer ago than this: 30d,
    /// 12h, 2w. Without it quarantined rows are kept: they are the only copy of what a run set
    /// aside.
    #[arg(long, value_name = "AGE")]
    quarantine_older_than: Option<String>,
    /// Also remove the journals of runs that finished longer ago than this (30d, 12h, 2w): a
    /// table run every hour gathers thousands, and each merge run and `status` reads them all.
    /// The newest run's journal stays, and so do those of runs still running, with a move left
    /// to complete, or that failed a date no later run has done since. Without it every journal
    /// is kept: `status` shows the runs they hold.
    #[arg(long, value_name = "AGE")]
    runs_older_than: Option<String>,
    /// The folder runs spill to (their --spill-dir): spill folders a killed run of this table
    /// left there are removed [default: the system's temporary folder].
    #[arg(long, value_name = "DIR", env = "LAKESWAP_SPILL_DIR")]
    spill_dir: Option<PathBuf>,
    /// Remove nothing: list every object, file and folder gc would remove, and what it
    /// leaves alone. Reads only, so read-only credentials do.
    #[arg(long)]
    dry_run: bool,
}

#[derive(Args)]
struct GenerateArgs {
    /// Where to write: a folder or a store URL.
    #[arg(long)]
    out: String,
    /// Number of dates.
    #[arg(long, default_value_t = 10)]
    days: u32,
    /// Raw rows per date (3% of them exact duplicates), plus the rows of --conflicts.
    #[arg(long, default_value_t = 1_000_000)]
    rows_per_day: u64,
    /// First date.
    #[arg(long, default_value = "2026-11-01")]
    start_date: String,
    /// Random seed; the same seed gives the same data.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Key+version pairs with two different payloads to inject: one more row each, spread over
    /// the dates (at most half of --rows-per-day).
    #[arg(long, default_value_t = 0)]
    conflicts: u64,
    /// Parquet files per date.
    #[arg(long, default_value_t = 4)]
    files_per_day: u32,
}

/// Below this memory limit, freed memory goes back to the OS (see [`return_freed_memory`]).
const SMALL_BUDGET: u64 = 512 << 20;

/// Under a small budget, memory one phase frees must not stay resident while the next one
/// allocates: buffers of 1 MiB and more are mapped on their own and unmapped when freed, and a
/// heap's free top is trimmed past 1 MiB (a 20 M-row day under 256 MiB: a peak of ~390 MiB
/// with malloc's defaults, ~260 MiB so; BENCHMARKS.md).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn return_freed_memory() {
    if malloc_tuned_by_env() {
        return;
    }
    // SAFETY: `mallopt` only sets malloc's parameters and is safe to call from any thread.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 1 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 1 << 20);
    }
}

/// One malloc arena per core. glibc gives a thread that finds the arenas busy an arena of its
/// own, up to eight per core, and what is freed in one arena serves only that arena's threads:
/// the 10-day reference backfill peaked at ~540 MiB with the default, ~440 MiB so, in the same
/// time (BENCHMARKS.md). Set before the first thread starts.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn limit_malloc_arenas() {
    if malloc_tuned_by_env() {
        return;
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    // SAFETY: as in `return_freed_memory`.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, cores.min(i32::MAX as usize) as i32);
    }
}

/// malloc's settings given in the environment (`GLIBC_TUNABLES` naming them, or glibc's older
/// `MALLOC_ARENA_MAX`-style variables): lakeswap leaves malloc as they set it.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn malloc_tuned_by_env() -> bool {
    std::env::var("GLIBC_TUNABLES").is_ok_and(|t| t.contains("glibc.malloc."))
        || std::env::vars_os().any(|(name, _)| name.to_str().is_some_and(|n| n.starts_with("MALLOC_")))
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn return_freed_memory() {}

/// The target of the records of partition outcomes and runs: on at the default level.
const OUTCOME: &str = "lakeswap::outcome";

fn main() -> ProcessExit {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    limit_malloc_arenas();
    // A write past the file-size limit (`ulimit -f`) fails as an error the run reports (a spill
    // file, the summary), rather than killing the process without a word.
    #[cfg(unix)]
    // SAFETY: setting a signal's disposition to "ignore" before any thread starts.
    unsafe {
        libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
    }
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // A refused command line still answers the orchestrator waiting for the summary,
            // rather than leaving an older run's there.
            if e.use_stderr() {
                let text = e.render().to_string();
                let why = text.lines().next().unwrap_or_default().trim_start_matches("error: ");
                let configs = config_paths(std::env::args_os());
                let writable = |p: &PathBuf| {
                    summary_refusal(p, None, None).is_none()
                        && configs.iter().all(|c| summary_refusal(p, Some(c), None).is_none())
                };
                for path in summary_paths(std::env::args_os()).into_iter().filter(writable) {
                    let _ = std::fs::write(path, report::refused_json(lakeswap::ExitCode::Usage, why, 0.0));
                }
            }
            e.exit()
        }
    };
    let json = matches!(&cli.command, Command::Run(a) if a.log_format == LogFormat::Json);
    // A terminal's text shows a bar and the failures after the table instead of records.
    let records = json || !std::io::stderr().is_terminal();
    let default = if records { format!("warn,{OUTCOME}=info") } else { format!("warn,{OUTCOME}=off") };
    // Unset or empty: the default; a filter that does not parse is said so, not taken as silence.
    let filter = match std::env::var("LAKESWAP_LOG").ok().filter(|v| !v.trim().is_empty()) {
        None => tracing_subscriber::EnvFilter::new(&default),
        Some(v) => tracing_subscriber::EnvFilter::builder().parse(&v).unwrap_or_else(|e| {
            errln!("warning: LAKESWAP_LOG={v} is not a log filter ({e}); logging as without it");
            tracing_subscriber::EnvFilter::new(&default)
        }),
    };
    // Colours only for a person at a terminal, never in a log file.
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        // A log line that cannot be written is dropped, not reported on the same stream.
        .log_internal_errors(false)
        .with_ansi(std::io::stderr().is_terminal());
    if json {
        logs.json().init();
    } else {
        logs.init();
    }
    let rt = match tokio::runtime::Builder::new_multi_thread().max_blocking_threads(4).enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            errln!("error: cannot start the runtime: {e}");
            return ProcessExit::from(1);
        }
    };
    let vars = cli.vars;
    let result = rt.block_on(async {
        match cli.command {
            Command::Run(a) => cmd_run(a, &vars).await,
            Command::Generate(_) if !vars.is_empty() => {
                Err(usage("--var: `generate` reads no config; it takes no variables"))
            }
            Command::Generate(a) => cmd_generate(a).await,
            Command::Gc(a) => cmd_gc(a, &vars).await,
            Command::Status(a) => cmd_status(a, &vars).await,
            Command::Verify(a) => cmd_verify(a, &vars).await,
        }
    });
    // Work a stop abandoned (a decode on a blocking thread) is not waited for.
    rt.shutdown_background();
    match result {
        Ok(code) => ProcessExit::from(code.code() as u8),
        Err(e) => {
            let code = e.exit_code().code();
            // Refused as a whole: the folders it made for the table are taken back.
            lakeswap::store::remove_created_folders();
            if json {
                tracing::error!(target: OUTCOME, record = "run", exit_code = code, error = %chain(&e), "run refused");
            } else {
                errln!("error: {}", chain(&e));
            }
            ProcessExit::from(code as u8)
        }
    }
}

/// Set once, by whichever comes first: the run's end (its summary and exit code) or its stop's
/// time running out (the timeout's).
static ENDING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// The run's id once planned, for a summary written as the process exits on its own.
static RUN_ID: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// An error and its sources, once each.
fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(c) = src {
        let m = c.to_string();
        if !s.contains(&m) {
            s.push_str(": ");
            s.push_str(&m);
        }
        src = c.source();
    }
    s
}

/// Whether `path` is a regular file or nothing (not a device, a pipe or a folder).
fn is_file_or_absent(path: &std::path::Path) -> bool {
    std::fs::metadata(path).map_or(true, |m| m.is_file())
}

/// Why `path` may not take a run summary, if it may not. Refused: an existing file that is not
/// a run summary (the config itself, an input object: lakeswap overwrites only its own
/// summaries and empty files), a link to nothing, and a path inside the job's table, state,
/// input or a lookup table (it would be read as data, or fail the partition it sits in). A
/// device or a pipe (`/dev/stdout`) is written as it is. `config` is the job's config when
/// known; one that does not load is read for its locations alone.
fn summary_refusal(path: &std::path::Path, config: Option<&std::path::Path>, vars: Option<&Vars>) -> Option<String> {
    // Followed through a symbolic link: `Err` for nothing there, or a link to nothing.
    let meta = std::fs::metadata(path);
    if meta.is_err() && std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink()) {
        return Some("it is a link to nothing; name the file itself".into());
    }
    if meta.as_ref().is_ok_and(|m| m.is_dir()) {
        return Some("it is a folder; name a file (in it, say)".into());
    }
    let file = meta.as_ref().is_ok_and(|m| m.is_file());
    if file && meta.as_ref().is_ok_and(|m| std::os::unix::fs::MetadataExt::nlink(m) > 1) {
        return Some(
            "it is a hard link: the file has another name too (a run journal, say); name a file of its own".into(),
        );
    }
    if file {
        // A run journal has an `exit_code` too, and its `host`.
        let summary = std::fs::read(path).is_ok_and(|bytes| {
            bytes.is_empty()
                || serde_json::from_slice::<serde_json::Value>(&bytes).is_ok_and(|v| {
                    v.as_object().is_some_and(|o| o.contains_key("exit_code") && !o.contains_key("host"))
                })
        });
        if !summary {
            return Some(
                "the file exists and is not a run summary; lakeswap overwrites only its own summaries (and empty \
                 files): remove it, or choose another path"
                    .into(),
            );
        }
    }
    let config = config?;
    let inside = |what: &str, url: &str| {
        format!(
            "it lies inside the {what} {url}, where it would be read as data (or fail the partition it sits in); \
             choose a path outside it"
        )
    };
    if let Some(job) = vars.and_then(|v| Job::load_for_output(config, v, false).ok()) {
        return run::local_place_holding(&job, path).map(|(what, url)| inside(&what, &url));
    }
    // A config that does not load (its own error, reported in the summary): its locations as
    // written, with the variables that are set (one that is not leaves its location unknown).
    let table: toml::Table = std::fs::read_to_string(config).ok()?.parse().ok()?;
    let environment = Vars::environment();
    let vars = vars.unwrap_or(&environment);
    let expand = |u: &str| vars.expand(u).ok().map(|e| e.unwrap_or_else(|| u.to_string()));
    let at = |section: &str, key: &str| expand(table.get(section)?.get(key)?.as_str()?);
    let output = at("output", "url");
    let state = at("output", "state_url").or_else(|| output.as_deref().and_then(lakeswap::config::default_state_url));
    let lookups = table
        .get("aggregate")
        .and_then(|a| a.get("tables"))
        .and_then(|t| t.as_array())
        .into_iter()
        .flatten()
        .filter_map(|t| Some(("lookup table", expand(t.get("url")?.as_str()?)?)));
    let places = [("input", at("input", "url")), ("table", output), ("run state", state)]
        .into_iter()
        .filter_map(|(what, url)| Some((what, url?)))
        .chain(lookups);
    let shown = path.display().to_string();
    for (what, url) in places {
        let local = lakeswap::config::scheme_family(&url) == "file";
        let folder = url.get(7..).filter(|_| url.get(..7).is_some_and(|s| s.eq_ignore_ascii_case("file://")));
        if local && lakeswap::read::list::nested(folder.unwrap_or(&url), &shown) {
            return Some(inside(what, &url));
        }
    }
    None
}

/// The configs a command line names (`--config X`, `--config=X`, `-c X`, `-cX`, `-c=X`, each
/// time it does, and `LAKESWAP_CONFIG`), read without the parser (for a command line it refused).
fn config_paths(args: impl Iterator<Item = std::ffi::OsString>) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = std::env::var_os("LAKESWAP_CONFIG").map(PathBuf::from).into_iter().collect();
    let mut args = args.skip(1);
    while let Some(a) = args.next() {
        if a == "--config" || a == "-c" {
            found.extend(args.next().map(PathBuf::from));
        } else if let Some(path) = a.to_str().and_then(|a| a.strip_prefix("--config=").or_else(|| a.strip_prefix("-c")))
        {
            found.push(PathBuf::from(path.strip_prefix('=').unwrap_or(path)));
        }
    }
    found
}

/// The paths of `--summary-json` in a command line clap refused (given twice, each).
fn summary_paths(args: impl Iterator<Item = std::ffi::OsString>) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut args = args.skip(1);
    while let Some(a) = args.next() {
        if a == "--summary-json" {
            found.extend(args.next().map(PathBuf::from));
        } else if let Some(path) = a.to_str().and_then(|a| a.strip_prefix("--summary-json=")) {
            found.push(PathBuf::from(path));
        }
    }
    found
}

/// The largest day `generate` writes: a day is made in memory (about 150 bytes a row).
const MAX_GENERATED_ROWS: u64 = 200_000_000;

/// `generate`'s arguments, checked before anything is written: a data set is written into an
/// empty folder (over another one it would mix two sets, and the same order ids).
async fn check_generate(
    a: &GenerateArgs,
    start: chrono::NaiveDate,
    out: &lakeswap::store::StoreLocation,
) -> Result<(), Error> {
    use chrono::Datelike;
    if a.days == 0 || a.days as i64 > dates::MAX_RANGE_DAYS {
        return Err(usage(format!("--days {}: write 1 to {}", a.days, dates::MAX_RANGE_DAYS)));
    }
    if start.checked_add_days(chrono::Days::new(a.days as u64 - 1)).is_none_or(|last| last.year() > 9999) {
        return Err(usage(format!(
            "--start-date {start} --days {}: runs past 9999-12-31 (a partition's date has a year of four digits)",
            a.days
        )));
    }
    if a.rows_per_day == 0 || a.rows_per_day > MAX_GENERATED_ROWS {
        return Err(usage(format!(
            "--rows-per-day {}: write 1 to {MAX_GENERATED_ROWS} (a day is made in memory; write more days for more rows)",
            a.rows_per_day
        )));
    }
    if a.files_per_day == 0 || a.files_per_day as u64 > a.rows_per_day.min(10_000) {
        return Err(usage(format!(
            "--files-per-day {}: write 1 to {} (at most one file per row)",
            a.files_per_day,
            a.rows_per_day.min(10_000)
        )));
    }
    if a.conflicts > a.rows_per_day / 2 {
        return Err(usage(format!(
            "--conflicts {}: at most half of --rows-per-day ({}); each conflict is a copy of a row of its day",
            a.conflicts,
            a.rows_per_day / 2
        )));
    }
    use futures::StreamExt;
    let first = out.store.list(Some(&out.prefix)).next().await;
    if let Some(found) = first {
        let what = match found {
            Ok(m) => format!("already holds {}", out.display(&m.location)),
            Err(e) => format!("cannot be listed: {e}"),
        };
        return Err(usage(format!(
            "--out {}: {what}. generate writes a data set into an empty folder (over another it would mix the \
             two, their order ids alike); choose a new folder or remove this one",
            a.out
        )));
    }
    Ok(())
}

/// A store inside this process (`memory://`, for the library and its tests) would lose
/// whatever a command writes when it exits: refused for a command.
fn outside_the_process(job: &Job) -> Result<(), Error> {
    let lookups = job.config.aggregate.iter().flat_map(|a| a.tables.iter().map(|t| t.url.as_str()));
    let urls = [job.input.url.as_str(), job.output.url.as_str(), job.state.url.as_str()].into_iter().chain(lookups);
    match urls.into_iter().find(|u| in_memory(u)) {
        Some(url) => Err(in_process(url)),
        None => Ok(()),
    }
}

/// Whether a URL names a `memory:` store (a scheme is read in any case).
fn in_memory(url: &str) -> bool {
    url.get(..7).is_some_and(|scheme| scheme.eq_ignore_ascii_case("memory:"))
}

fn in_process(url: &str) -> Error {
    usage(format!(
        "{url}: a memory:// store lives inside one process (it is for the library and tests); what a command \
         wrote there would be gone when it exits. Use a folder or a bucket"
    ))
}

fn usage(m: impl Into<String>) -> Error {
    Error::Usage(m.into())
}

async fn cmd_run(a: RunArgs, vars: &[(String, String)]) -> Result<ExitCode, Error> {
    // Found before anything runs: a summary that cannot be written after every partition
    // committed would leave the orchestrator without its answer.
    // The file says `running` until the run ends: a reader never takes an older attempt's
    // summary (one killed with SIGKILL) for this one's.
    // Listening before anything else: a signal from here on stops the run politely and leaves
    // its own summary, never an older run's (a dry run writes nothing and keeps the default).
    let stop = Arc::new(run::Stop::default());
    if !a.dry_run {
        // Listening until the process exits: a second signal, or the stop's time running out,
        // exits at once at any point. (A value out of range refuses the run below.)
        let timeout = std::time::Duration::from_secs(a.stop_timeout.clamp(1, 3600));
        on_signals(stop.clone(), timeout, a.summary_json.clone());
    }
    if let Some(path) = &a.summary_json {
        check_summary_path(path, &a, vars)?;
        // A pipe or a device (`/dev/stdout`) gets the final summary alone: one JSON document,
        // and no second open that would wait for a reader gone after the first.
        if is_file_or_absent(path) {
            std::fs::write(path, report::running_json(None))
                .map_err(|e| usage(format!("--summary-json {}: cannot write it: {e}", path.display())))?;
        }
    }
    let summary_json = a.summary_json.clone();
    let started = std::time::Instant::now();
    let result = run_job(a, vars, stop).await;
    // The run ends here: a stop's time running out from now would race its summary and exit
    // code. Already ending that way, the timeout's summary and exit are the process's.
    if ENDING.swap(true, std::sync::atomic::Ordering::SeqCst) {
        std::future::pending::<()>().await;
    }
    if let Some(path) = &summary_json {
        let text = match &result {
            Ok(Some(summary)) => report::json(summary),
            Ok(None) => report::dry_run_json(),
            Err(e) => report::refused_json(e.exit_code(), &chain(e), started.elapsed().as_secs_f64()),
        };
        std::fs::write(path, text).map_err(|source| Error::Io { path: path.display().to_string(), source })?;
    }
    result.map(|s| s.map_or(ExitCode::Ok, |s| s.exit_code))
}

/// Refuses a `--summary-json` path whose file would be lost, or would be read as data
/// ([`summary_refusal`]).
fn check_summary_path(path: &std::path::Path, a: &RunArgs, vars: &[(String, String)]) -> Result<(), Error> {
    let vars = config_vars(vars, &a.vars).ok();
    match summary_refusal(path, Some(&a.config), vars.as_ref()) {
        Some(why) => Err(usage(format!("--summary-json {}: {why}. Nothing was done", path.display()))),
        None => Ok(()),
    }
}

/// A run, or its plan with `--dry-run` (`None`).
async fn run_job(
    a: RunArgs,
    vars: &[(String, String)],
    stop: Arc<run::Stop>,
) -> Result<Option<run::RunSummary>, Error> {
    let vars = &config_vars(vars, &a.vars)?;
    let (memory_limit, spill_dir) = a.budget.resolve()?;
    // A dry run writes nothing, not even the folders of a first run.
    let job = match a.dry_run {
        true => Job::load_read_only(&a.config, vars)?,
        false => Job::load_with(&a.config, vars)?,
    };
    outside_the_process(&job)?;
    let tz = job.config.timezone();
    let mut guard_dates = Vec::new();
    let mut dates = match (&a.date, &a.from, &a.to, &a.retry_failed) {
        (Some(d), _, _, _) => Some(vec![dates::resolve(d, tz).map_err(usage)?]),
        (None, Some(f), Some(t), _) => {
            let (f, t) = (dates::resolve(f, tz).map_err(usage)?, dates::resolve(t, tz).map_err(usage)?);
            Some(dates::range(f, t).map_err(usage)?)
        }
        (None, None, None, Some(id)) => {
            let (failed, others) = failed_dates(&job, id).await?;
            guard_dates = others;
            Some(failed)
        }
        _ => None,
    };
    if let Some(spec) = &a.shard {
        let (i, n) = parse_shard(spec)?;
        let all = dates.take().ok_or_else(|| usage("--shard needs a range (--from/--to)"))?;
        dates = Some(all.into_iter().enumerate().filter(|(k, _)| k % n == i).map(|(_, d)| d).collect());
    }
    if dates.is_none() && job.kind.needs_dates() {
        return Err(usage("name the dates: --date D, or --from A --to B (see lakeswap run --help)"));
    }
    let retried = dates.as_ref().is_some_and(|d| !d.is_empty());
    if retried && !guard_dates.is_empty() && job.kind.output_from_input_alone() && !job.config.is_whole_record_key() {
        errln!(
            "checking the retried dates' keys against the {} other date(s) of the run (no key under two dates), \
             reading their input; they are not written",
            guard_dates.len()
        );
    }
    if a.concurrency == Some(0) {
        return Err(usage("--concurrency (or LAKESWAP_CONCURRENCY) must be at least 1"));
    }
    if !(1..=3600).contains(&a.stop_timeout) {
        return Err(usage(format!(
            "--stop-timeout (or LAKESWAP_STOP_TIMEOUT) must be 1 to 3600 seconds, not {}",
            a.stop_timeout
        )));
    }
    let max_ttl = run::MAX_LEASE_TTL.as_secs();
    if !(1..=max_ttl).contains(&a.lease_ttl) {
        return Err(usage(format!(
            "--lease-ttl (or LAKESWAP_LEASE_TTL) must be 1 to {max_ttl} seconds (7 days), not {}: a crashed \
             run's partitions stay leased that long, and a live run renews its leases every third of it",
            a.lease_ttl
        )));
    }
    let n = dates.as_ref().map_or(0, Vec::len) as u64;
    let mut opts = RunOptions {
        memory_limit,
        spill_dir,
        dates,
        guard_dates,
        concurrency: a.concurrency.unwrap_or_else(run::default_concurrency),
        allow_empty: a.allow_empty,
        lease_ttl: std::time::Duration::from_secs(a.lease_ttl),
        wait: a.wait,
        skip_unchanged: a.skip_unchanged,
        schema_change: match a.schema_change {
            Some(SchemaChangeArg::Rebuild) => lakeswap::schema::SchemaChange::Rebuild,
            None => lakeswap::schema::SchemaChange::Refuse,
        },
        stop,
        ..Default::default()
    };
    if a.dry_run {
        // Planned with `--quiet` too: its refusals are its answer.
        let plan = run::dry_run(&job, &opts).await?;
        if !a.quiet {
            out!("{plan}");
        }
        return Ok(None);
    }
    let terminal = std::io::stderr().is_terminal() && a.log_format == LogFormat::Text;
    let progress = Arc::new(Progress::new(n, terminal, a.summary_json.clone()));
    opts.observer = progress.clone();
    let summary = run::run(&job, &opts).await?;
    progress.finish();
    if !a.quiet {
        out!("{}", report::table(&summary));
    }
    // Text ends with the errors, one line each, after the records (JSON has them in its records).
    if a.log_format == LogFormat::Text {
        for p in summary.failed() {
            errln!("error: {}: {}", p.date, p.error.as_deref().unwrap_or("failed"));
        }
        if let Some(e) = &summary.journal_error {
            errln!("error: {e}");
        }
    }
    run_record(&summary);
    Ok(Some(summary))
}

/// SIGTERM, SIGINT and SIGHUP: the first asks the run to stop politely (no new partition starts,
/// computations in flight are abandoned, swaps in flight finish, leases are released, the
/// journal and the summary are written; exit 143, 130 or 129, or a date's 2 or 3 when one failed
/// so before the stop); a second exits at once, as does
/// a stop that takes longer than `timeout` (a store that does not answer).
fn on_signals(
    stop: Arc<run::Stop>,
    timeout: std::time::Duration,
    summary_json: Option<PathBuf>,
) -> tokio::task::JoinHandle<()> {
    let started = std::time::Instant::now();
    tokio::spawn(async move {
        #[cfg(unix)]
        {
            let Some(mut signals) = Signals::listen() else { return };
            let (first, _) = signals.next().await;
            tracing::warn!(signal = first,
                "stopping: no new partition starts, swaps in flight finish, leases are released; a second signal exits at once");
            stop.stop(first);
            let second = tokio::select! {
                (_, code) = signals.next() => Some(code),
                _ = tokio::time::sleep(timeout) => None,
            };
            let code = match second {
                Some(code) => {
                    errln!("lakeswap: second signal: exiting at once");
                    code
                }
                // The run ended meanwhile: its own summary and exit code stand.
                None if ENDING.swap(true, std::sync::atomic::Ordering::SeqCst) => return,
                None => {
                    // A log record (JSON with --log-format json), as the stop's own.
                    tracing::error!(
                        signal = first,
                        "still stopping {} s after {first} (a store is not answering?): exiting now (--stop-timeout). \
                         What is committed stays as it was; this run's leases expire after --lease-ttl (the next run \
                         on this host takes them over at once), and `lakeswap gc` removes what it staged",
                        timeout.as_secs()
                    );
                    let code = lakeswap::error::PartitionError::Stopped { signal: first }.exit_code();
                    // The summary says how the run ended, not that it is running.
                    if let Some(path) = &summary_json {
                        let why = format!(
                            "stopped by {first}; the stop did not finish within --stop-timeout ({} s), so the run \
                             exited with its swaps in flight left as a killed run leaves them",
                            timeout.as_secs()
                        );
                        let run_id = RUN_ID.get().map(String::as_str);
                        let _ = std::fs::write(
                            path,
                            report::ended_json(run_id, code, &why, started.elapsed().as_secs_f64()),
                        );
                    }
                    code.code()
                }
            };
            lakeswap::spill::remove_all();
            std::process::exit(code);
        }
        #[cfg(not(unix))]
        if tokio::signal::ctrl_c().await.is_ok() {
            stop.stop("SIGINT");
            if tokio::signal::ctrl_c().await.is_ok() {
                std::process::exit(130);
            }
        }
    })
}

/// SIGTERM, SIGINT and SIGHUP for `verify`, which writes nothing but its spill: the spill
/// folder is removed and the process exits at once (143, 130 or 129).
fn exit_on_signals() {
    tokio::spawn(async {
        #[cfg(unix)]
        {
            let Some(mut signals) = Signals::listen() else { return };
            let (_, code) = signals.next().await;
            lakeswap::spill::remove_all();
            std::process::exit(code);
        }
        #[cfg(not(unix))]
        if tokio::signal::ctrl_c().await.is_ok() {
            lakeswap::spill::remove_all();
            std::process::exit(130);
        }
    });
}

/// SIGTERM, SIGINT and SIGHUP, listened for.
#[cfg(unix)]
struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
    /// None when the process was started ignoring SIGHUP (`nohup`): it goes on ignoring it, as
    /// listening would replace that.
    hup: Option<tokio::signal::unix::Signal>,
}

#[cfg(unix)]
impl Signals {
    fn listen() -> Option<Signals> {
        use tokio::signal::unix::{signal, SignalKind};
        let hup = match hangup_ignored() {
            true => None,
            false => signal(SignalKind::hangup()).ok(),
        };
        Some(Signals { term: signal(SignalKind::terminate()).ok()?, int: signal(SignalKind::interrupt()).ok()?, hup })
    }

    /// The next signal: its name and the exit code it gives (128 + its number).
    async fn next(&mut self) -> (&'static str, i32) {
        let hup = async {
            match &mut self.hup {
                Some(h) => h.recv().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = self.term.recv() => ("SIGTERM", 143),
            _ = self.int.recv() => ("SIGINT", 130),
            _ = hup => ("SIGHUP", 129),
        }
    }
}

/// Whether the process was started ignoring SIGHUP (`nohup`).
#[cfg(unix)]
fn hangup_ignored() -> bool {
    // SAFETY: reads the signal's disposition into a zeroed struct; changes nothing.
    unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        libc::sigaction(libc::SIGHUP, std::ptr::null(), &mut old) == 0 && old.sa_sigaction == libc::SIG_IGN
    }
}

/// The record of a run's end: its counts and exit code.
fn run_record(s: &run::RunSummary) {
    let count = |a: Action| s.partitions.iter().filter(|p| p.action == a).count();
    let code = s.exit_code.code();
    macro_rules! record {
        ($level:ident) => {
            tracing::$level!(
                target: OUTCOME,
                record = "run",
                run_id = %s.run_id,
                exit_code = code,
                partitions = s.partitions.len(),
                created = count(Action::Created),
                replaced = count(Action::Replaced),
                unchanged = count(Action::Unchanged),
                skipped = count(Action::Skipped),
                untouched = count(Action::Untouched),
                failed = count(Action::Failed),
                stopped = count(Action::Stopped),
                quarantined_rows = report::quarantined_now(s),
                seconds = s.seconds,
                error = s.journal_error.as_deref().unwrap_or(""),
                "run ended"
            )
        };
    }
    if code == 0 {
        record!(info);
    } else {
        record!(error);
    }
}

/// Progress of a run: a bar on a terminal, and a log record per partition outcome (on a
/// terminal, for failures only) and at the run's start.
struct Progress {
    bar: ProgressBar,
    done: std::sync::atomic::AtomicUsize,
    rows: std::sync::atomic::AtomicU64,
    started: std::time::Instant,
    /// `--summary-json`, given the run id as soon as there is one.
    summary_json: Option<PathBuf>,
}

impl Progress {
    fn new(partitions: u64, terminal: bool, summary_json: Option<PathBuf>) -> Self {
        let bar = if terminal && partitions > 1 {
            let pb = ProgressBar::new(partitions);
            pb.set_style(
                ProgressStyle::with_template("{spinner} {bar:30} {pos}/{len} partitions {msg}")
                    .unwrap_or_else(|_| ProgressStyle::default_bar()),
            );
            pb
        } else {
            ProgressBar::hidden()
        };
        Progress {
            bar,
            done: Default::default(),
            rows: Default::default(),
            started: std::time::Instant::now(),
            summary_json,
        }
    }

    fn finish(&self) {
        self.bar.finish_and_clear();
    }

    fn step(&self, input_rows: u64) {
        use std::sync::atomic::Ordering::Relaxed;
        self.done.fetch_add(1, Relaxed);
        let rows = self.rows.fetch_add(input_rows, Relaxed) + input_rows;
        let rate = rows as f64 / self.started.elapsed().as_secs_f64().max(1e-3) / 1e6;
        self.bar.set_message(format!("· {rate:.1} M rows/s · eta {}", indicatif::HumanDuration(self.bar.eta())));
        self.bar.inc(1);
    }
}

impl run::Observer for Progress {
    fn event(&self, e: &run::Event<'_>) {
        match e {
            run::Event::Planned { run_id, partitions } => {
                let _ = RUN_ID.set(run_id.to_string());
                if let Some(path) = self.summary_json.as_ref().filter(|p| is_file_or_absent(p)) {
                    // Written once already at start: a failure now is not the run's to fail.
                    let _ = std::fs::write(path, report::running_json(Some(run_id)));
                }
                self.bar.set_length(*partitions as u64);
                tracing::info!(target: OUTCOME, record = "run", run_id = %run_id, partitions, "run started");
            }
            run::Event::Computed { input_rows, .. } => self.step(*input_rows),
            run::Event::Passed { .. } => self.step(0),
            run::Event::Spilling { date, bucket, buckets } => {
                self.bar.set_message(format!("· {date}: spilling {bucket}/{buckets} buckets"));
                tracing::debug!(%date, bucket, buckets, "spilling");
            }
            run::Event::Done { report: r } => {
                let date = r.date.to_string();
                let action = r.action.to_string();
                let seconds = (r.seconds * 1000.0).round() / 1000.0;
                let q = r.counts.map(|c| c.quarantined_rows);
                let input_rows = r.counts.map(|c| c.input_rows);
                // Left out where nothing spilled, as in --summary-json.
                let spilled_bytes = (r.spilled_bytes > 0).then_some(r.spilled_bytes);
                let recorded = || {
                    if let Some(error) = &r.error {
                        tracing::error!(target: OUTCOME, record = "partition", date, action, input_rows,
                            output_rows = r.output_rows, quarantined_rows = q, seconds, exit_code = r.exit_code, error = %error, "partition {action}");
                    } else {
                        tracing::info!(target: OUTCOME, record = "partition", date, action, input_rows,
                            output_rows = r.output_rows, quarantined_rows = q, spilled_bytes, seconds, "partition {action}");
                    }
                };
                self.bar.suspend(recorded);
            }
        }
    }
}

async fn cmd_generate(a: GenerateArgs) -> Result<ExitCode, Error> {
    if in_memory(&a.out) {
        return Err(in_process(&a.out));
    }
    let out = lakeswap::store::open(&a.out, &Default::default(), "--out", true).map_err(|e| match e {
        lakeswap::error::ConfigError::Invalid { message, .. } => usage(format!("--out: {message}")),
        e => Error::Config(e),
    })?;
    let start_date = dates::resolve_at(&a.start_date, chrono::Utc::now().date_naive()).map_err(usage)?;
    check_generate(&a, start_date, &out).await?;
    let opts = generate::GenerateOptions {
        days: a.days,
        rows_per_day: a.rows_per_day,
        start_date,
        seed: a.seed,
        conflicts: a.conflicts,
        files_per_day: a.files_per_day,
    };
    let total = generate::generate(&out, &opts, |d, c| {
        errln!("{d} rows={} orders={} conflicts={}", c.raw_rows, c.orders, c.conflict_rows)
    })
    .await?;
    outln!("{}", serde_json::to_string(&total).unwrap_or_default());
    Ok(ExitCode::Ok)
}

async fn cmd_gc(a: GcArgs, vars: &[(String, String)]) -> Result<ExitCode, Error> {
    let vars = &config_vars(vars, &a.vars)?;
    // A dry run writes nothing: no folders made, no probe of whether a run could write.
    let job = Job::load_for_output(&a.config, vars, !a.dry_run)?;
    outside_the_process(&job)?;
    let opts = lakeswap::gc::GcOptions {
        quarantine_older_than: match &a.quarantine_older_than {
            Some(age) => Some(
                lakeswap::config::parse_duration(age).map_err(|e| usage(format!("--quarantine-older-than: {e}")))?,
            ),
            None => None,
        },
        runs_older_than: match &a.runs_older_than {
            Some(age) => {
                Some(lakeswap::config::parse_duration(age).map_err(|e| usage(format!("--runs-older-than: {e}")))?)
            }
            None => None,
        },
        spill_dir: Some(a.spill_dir.clone().unwrap_or_else(std::env::temp_dir)),
        dry_run: a.dry_run,
    };
    // A dry run claims no state: it writes nothing.
    job.check_layout(!a.dry_run).await?;
    let r = lakeswap::gc::gc(&job.output, &job.state, &job.config.partition.column, &opts).await?;
    let removed = if a.dry_run { "would remove" } else { "removed" };
    outln!(
        "{removed} {} expired lease(s) and {} stale staged file(s); kept {} staged file(s) of live runs or unfinished moves",
        r.expired_leases, r.staging_removed, r.staging_kept
    );
    if r.temp_files_removed > 0 {
        outln!("{removed} {} temporary file(s) of interrupted writes", r.temp_files_removed);
    }
    if r.quarantine_removed > 0 {
        outln!(
            "{removed} {} quarantined file(s) older than {}",
            r.quarantine_removed,
            a.quarantine_older_than.as_deref().unwrap_or("")
        );
    }
    if r.runs_removed > 0 {
        outln!(
            "{removed} {} journal(s) of runs that finished more than {} ago",
            r.runs_removed,
            a.runs_older_than.as_deref().unwrap_or("")
        );
    }
    if r.spill_removed > 0 {
        outln!("{removed} {} spill folder(s) of runs that were killed", r.spill_removed);
    }
    if r.sidecars_removed > 0 {
        outln!("{removed} {} tombstone / key-index object(s) no partition names", r.sidecars_removed);
    }
    if a.dry_run && !r.removed.is_empty() {
        outln!("would remove ({}):", r.removed.len());
        for p in &r.removed {
            outln!("  {p}");
        }
    }
    if !r.not_mine.is_empty() {
        outln!("not mine, left alone ({}):", r.not_mine.len());
        for p in &r.not_mine {
            outln!("  {p}");
        }
    }
    Ok(ExitCode::Ok)
}

/// `I/N` of `--shard`.
fn parse_shard(spec: &str) -> Result<(usize, usize), Error> {
    let bad = || usage(format!("--shard {spec}: write I/N with 0 <= I < N, e.g. 0/4"));
    let (i, n) = spec.split_once('/').ok_or_else(bad)?;
    let (i, n): (usize, usize) = (i.trim().parse().map_err(|_| bad())?, n.trim().parse().map_err(|_| bad())?);
    if n == 0 || i >= n {
        return Err(bad());
    }
    Ok((i, n))
}

/// The dates a run failed, from its journal.
/// The dates the run `run_id` failed or did not get to, and its other dates: a daily table's
/// retried dates are checked against those (no key under two dates), as the run would have.
async fn failed_dates(job: &Job, run_id: &str) -> Result<(Vec<chrono::NaiveDate>, Vec<chrono::NaiveDate>), Error> {
    job.check_layout(false).await?;
    let journals = lakeswap::journal::read_all(&job.state).await?;
    let j = journals
        .iter()
        .find(|j| j.run_id == run_id)
        .ok_or_else(|| usage(format!("no run {run_id} in {}/runs/ (lakeswap status lists the runs)", job.state.url)))?;
    // Its dates retried under another query, identity or `--var` would leave the run's dates
    // computed two ways, with exit 0.
    let now = job.config.fingerprint();
    if let Some(then) = j.config.as_ref().filter(|then| **then != now) {
        return Err(usage(format!(
            "run {run_id} ran under another config than this one (fingerprint {} against {}: its query, \
             identity, input or partitioning, or a ${{VAR}} or --var value, differs): retry it with the config \
             and --var values it ran with, or run its dates again with --date or --from/--to",
            then.get(..8).unwrap_or(then),
            now.get(..8).unwrap_or(&now)
        )));
    }
    let mut failed: Vec<chrono::NaiveDate> =
        j.partitions.iter().filter(|p| matches!(p.action, Action::Failed | Action::Stopped)).map(|p| p.date).collect();
    // A run that never finished (killed, or still going): also every date it planned and did
    // not report on. Leases keep a live run's dates its own.
    if j.status != "finished" {
        failed.extend(j.dates.iter().filter(|d| !j.partitions.iter().any(|p| p.date == **d)));
        failed.sort();
        failed.dedup();
        errln!("run {run_id} did not finish: retrying {} date(s) it failed or did not get to", failed.len());
    }
    if failed.is_empty() {
        errln!("run {run_id} failed no partition: nothing to retry");
    }
    // A retry's own guards too: a retry of a retry checks what the first run would have.
    let mut others: Vec<chrono::NaiveDate> =
        j.dates.iter().chain(&j.guarded).copied().filter(|d| !failed.contains(d)).collect();
    others.sort();
    others.dedup();
    Ok((failed, others))
}

async fn cmd_status(a: RangeArgs, vars: &[(String, String)]) -> Result<ExitCode, Error> {
    let vars = &config_vars(vars, &a.vars)?;
    let job = Job::load_for_output(&a.config, vars, false)?;
    outside_the_process(&job)?;
    let status = lakeswap::status::status(&job, a.dates(job.config.timezone())?).await?;
    if a.json {
        let runs: Vec<_> = status.journals.iter().rev().take(20).collect();
        let mut v = serde_json::json!({ "runs": runs, "partitions": status.partitions });
        if !status.strays.is_empty() {
            v["strays"] = serde_json::json!(status.strays);
        }
        outln!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
    } else {
        out!("{}", lakeswap::status::render(&status, 10));
    }
    Ok(ExitCode::Ok)
}

async fn cmd_verify(v: VerifyArgs, vars: &[(String, String)]) -> Result<ExitCode, Error> {
    let a = &v.range;
    let vars = &config_vars(vars, &a.vars)?;
    let (memory_limit, spill_dir) = v.budget.resolve()?;
    exit_on_signals();
    let job = Job::load_read_only(&a.config, vars)?;
    outside_the_process(&job)?;
    let dates = a
        .dates(job.config.timezone())?
        .ok_or_else(|| usage("name the dates to verify: --date D or --from A --to B"))?;
    // A date without input recomputes as a zero-row file: what `run --allow-empty` committed
    // is verified, and a committed file whose input is gone differs.
    let opts = RunOptions { dates: Some(dates), allow_empty: true, memory_limit, spill_dir, ..Default::default() };
    let mut summary = run::verify(&job, &opts).await?;
    // Objects outside every partition are read by a reader of the whole table, as its rows.
    let strays = lakeswap::status::strays(&job).await?;
    if !strays.is_empty() {
        summary.exit_code = ExitCode::combine([summary.exit_code, ExitCode::PartialFailure]);
    }
    if a.json {
        outln!("{}", report::verify_json(&summary, &strays));
    } else {
        out!("{}", report::verify_table(&summary));
        for p in summary.failed() {
            errln!("error: {}: {}", p.date, p.error.as_deref().unwrap_or("failed"));
        }
        if !strays.is_empty() {
            errln!(
                "error: the table's folder holds objects in no partition, which a reader of the whole table reads \
                 as its rows: {}. Move them away",
                strays.join(", ")
            );
        }
    }
    Ok(summary.exit_code)
}
