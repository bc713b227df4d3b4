//! The `lakeswap` command: flags are parsed and checked first, then resolved into a job and a
//! run; `main` owns the exit codes and prints an error chain once.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode as ProcessExit;
use std::sync::Arc;

use clap::{Args, Parser, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use lakeswap::{dates, generate, report, run, Error, ExitCode, Job, RunOptions};

#[derive(Parser)]
#[command(
    name = "lakeswap",
    version,
    about = "Idempotent daily tables for data lakes",
    long_about = "Reads raw events, drops exact duplicates, refuses conflicting versions, keeps the latest \
version of each key, computes a table per date and swaps each date's partition in atomically. \
Running a date again replaces it byte for byte; it never appends.\n\n\
Exit codes: 0 every partition committed or unchanged, 1 some partitions failed (the others \
committed), 2 usage or config error (nothing done), 3 data contract violation (conflicts, bad \
rows), 4 a partition is leased by another live run.",
    after_help = "Examples:\n  lakeswap run --config config/example.toml --from 2026-11-01 --to 2026-11-07\n  \
lakeswap run --config revenue.toml --date yesterday\n  \
lakeswap generate --out /tmp/orders --days 10 --rows-per-day 1000000"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Compute and atomically replace the partitions of a date range.
    #[command(after_help = "Examples:\n  \
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
    #[command(after_help = "Examples:\n  lakeswap status --config revenue.toml\n  \
lakeswap status --config revenue.toml --from 2026-11-01 --to 2026-11-30   # missing days show too")]
    Status(RangeArgs),
    /// Recompute partitions in memory and report any whose committed bytes differ.
    #[command(after_help = "Exit code 0 when every partition matches, 1 when one differs or is missing.\n\n\
Example:\n  lakeswap verify --config revenue.toml --from 2026-11-01 --to 2026-11-07")]
    Verify(RangeArgs),
    /// Remove what crashed runs left behind: stale staging and expired leases.
    #[command(after_help = "A live run's staging and leases are never touched. Every run also cleans up\n\
the partitions it works on, so gc is only needed for dates that are not run again.\n\n\
Example:\n  lakeswap gc --config revenue.toml")]
    Gc(GcArgs),
}

#[derive(Args)]
struct RunArgs {
    /// The job's TOML config (see README.md for the keys).
    #[arg(long, short, env = "LAKESWAP_CONFIG")]
    config: PathBuf,
    /// One date: YYYY-MM-DD, today, yesterday or today-N (in the job's time zone). A merge job
    /// without dates merges every date its batch holds.
    #[arg(long, conflicts_with_all = ["from", "to", "retry_failed"])]
    date: Option<String>,
    /// Re-run exactly the partitions that the run RUN_ID failed (see its journal, or `status`).
    #[arg(long, value_name = "RUN_ID", conflicts_with_all = ["from", "to"])]
    retry_failed: Option<String>,
    /// Take a deterministic share of the dates: I/N runs every N-th date of the range, from
    /// the I-th (0-based), so N machines split a backfill; leases keep overlaps safe.
    #[arg(long, value_name = "I/N")]
    shard: Option<String>,
    /// Skip partitions whose committed file was made by the same config from the same input
    /// objects (sizes and e-tags), without reading their input: cheap trailing-window runs.
    #[arg(long)]
    skip_unchanged: bool,
    /// Log lines on stderr as text or as JSON objects (for log collectors).
    #[arg(long, value_enum, default_value_t = LogFormat::Text, env = "LAKESWAP_LOG_FORMAT")]
    log_format: LogFormat,
    /// First date of the range (inclusive).
    #[arg(long, requires = "to")]
    from: Option<String>,
    /// Last date of the range (inclusive).
    #[arg(long, requires = "from")]
    to: Option<String>,
    /// Partitions processed at once [default: the number of cores]. Cores left over (a range
    /// shorter than this) go to each partition's hash pass and measures.
    #[arg(long, env = "LAKESWAP_CONCURRENCY")]
    concurrency: Option<usize>,
    /// Write a zero-row partition for a date without input, instead of failing it.
    #[arg(long)]
    allow_empty: bool,
    /// Print the plan (dates, input objects, actions) and touch nothing.
    #[arg(long)]
    dry_run: bool,
    /// Also write the summary as JSON to this file.
    #[arg(long)]
    summary_json: Option<PathBuf>,
    /// Wait for partitions leased by another run, instead of failing them with exit code 4.
    #[arg(long)]
    wait: bool,
    /// Seconds a partition lease lives without renewal; a crashed run's partitions are free
    /// again after this long. Renewed every third of it while the run lives.
    #[arg(long, default_value_t = 60, env = "LAKESWAP_LEASE_TTL")]
    lease_ttl: u64,
    /// When this run's output schema differs from the table's (a column added, removed or
    /// retyped), the run is refused. `rebuild` rewrites every committed partition under the
    /// new schema instead; the range must cover all of them.
    #[arg(long, value_enum, value_name = "HOW")]
    schema_change: Option<SchemaChangeArg>,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum SchemaChangeArg {
    /// Rewrite every committed partition under the new schema.
    Rebuild,
}

#[derive(Args)]
struct RangeArgs {
    /// The job's TOML config.
    #[arg(long, short, env = "LAKESWAP_CONFIG")]
    config: PathBuf,
    /// One date (YYYY-MM-DD, today, yesterday, today-N).
    #[arg(long, conflicts_with_all = ["from", "to"])]
    date: Option<String>,
    /// First date of the range (inclusive).
    #[arg(long, requires = "to")]
    from: Option<String>,
    /// Last date of the range (inclusive).
    #[arg(long, requires = "from")]
    to: Option<String>,
    /// Print JSON instead of text (status).
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
    /// The job's TOML config.
    #[arg(long, short, env = "LAKESWAP_CONFIG")]
    config: PathBuf,
}

#[derive(Args)]
struct GenerateArgs {
    /// Where to write: a folder or a store URL.
    #[arg(long)]
    out: String,
    /// Number of dates.
    #[arg(long, default_value_t = 10)]
    days: u32,
    /// Raw rows per date (3% of them exact duplicates).
    #[arg(long, default_value_t = 1_000_000)]
    rows_per_day: u64,
    /// First date.
    #[arg(long, default_value = "2026-11-01")]
    start_date: String,
    /// Random seed; the same seed gives the same data.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Key+version pairs with two different payloads to inject.
    #[arg(long, default_value_t = 0)]
    conflicts: u64,
    /// Parquet files per date.
    #[arg(long, default_value_t = 4)]
    files_per_day: u32,
}

/// Keeps freed memory for reuse instead of returning it to the OS after a delay: partitions come
/// one after another with the same shapes, and re-faulting fresh pages for each cost a large
/// share of the CPU time of a backfill (BENCHMARKS.md).
fn tune_allocator() {
    // `mi_option_purge_delay` in mimalloc 3's `mimalloc.h` (the version this crate links).
    const PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;
    // SAFETY: querying the version and setting an option have no preconditions.
    unsafe {
        // `mi_version()` is major * 10000 + minor * 100 + patch (30302 for 3.3.2).
        if (30_000..40_000).contains(&libmimalloc_sys::mi_version()) {
            libmimalloc_sys::mi_option_set(PURGE_DELAY, -1);
        }
    }
}

fn main() -> ProcessExit {
    tune_allocator();
    let cli = Cli::parse();
    let filter = tracing_subscriber::EnvFilter::try_from_env("LAKESWAP_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let json = matches!(&cli.command, Command::Run(a) if a.log_format == LogFormat::Json);
    let logs = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    if json {
        logs.json().init();
    } else {
        logs.init();
    }
    let rt = match tokio::runtime::Builder::new_multi_thread().max_blocking_threads(4).enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return ProcessExit::from(1);
        }
    };
    let result = rt.block_on(async {
        match cli.command {
            Command::Run(a) => cmd_run(a).await,
            Command::Generate(a) => cmd_generate(a).await,
            Command::Gc(a) => cmd_gc(a).await,
            Command::Status(a) => cmd_status(a).await,
            Command::Verify(a) => cmd_verify(a).await,
        }
    });
    match result {
        Ok(code) => ProcessExit::from(code.code() as u8),
        Err(e) => {
            eprintln!("error: {}", chain(&e));
            ProcessExit::from(e.exit_code().code() as u8)
        }
    }
}

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

fn usage(m: impl Into<String>) -> Error {
    Error::Usage(m.into())
}

async fn cmd_run(a: RunArgs) -> Result<ExitCode, Error> {
    let job = Job::load(&a.config)?;
    let tz = job.config.timezone();
    let mut dates = match (&a.date, &a.from, &a.to, &a.retry_failed) {
        (Some(d), _, _, _) => Some(vec![dates::resolve(d, tz).map_err(usage)?]),
        (None, Some(f), Some(t), _) => {
            let (f, t) = (dates::resolve(f, tz).map_err(usage)?, dates::resolve(t, tz).map_err(usage)?);
            Some(dates::range(f, t).map_err(usage)?)
        }
        (None, None, None, Some(id)) => Some(failed_dates(&job, id).await?),
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
    if a.concurrency == Some(0) {
        return Err(usage("--concurrency must be at least 1"));
    }
    let n = dates.as_ref().map_or(0, Vec::len) as u64;
    let terminal = std::io::stderr().is_terminal();
    let mut opts = RunOptions {
        dates,
        concurrency: a.concurrency.unwrap_or_else(run::default_concurrency),
        allow_empty: a.allow_empty,
        lease_ttl: std::time::Duration::from_secs(a.lease_ttl.max(1)),
        wait: a.wait,
        skip_unchanged: a.skip_unchanged,
        schema_change: match a.schema_change {
            Some(SchemaChangeArg::Rebuild) => lakeswap::schema::SchemaChange::Rebuild,
            None => lakeswap::schema::SchemaChange::Refuse,
        },
        ..Default::default()
    };
    if a.dry_run {
        print!("{}", run::dry_run(&job, &opts).await?);
        return Ok(ExitCode::Ok);
    }
    let progress = Arc::new(Progress::new(n, terminal));
    opts.observer = progress.clone();
    let summary = run::run(&job, &opts).await?;
    progress.finish();
    print!("{}", report::table(&summary));
    if let Some(path) = &a.summary_json {
        std::fs::write(path, report::json(&summary))
            .map_err(|source| Error::Io { path: path.display().to_string(), source })?;
    }
    Ok(summary.exit_code)
}

/// Progress of a run: a bar on a terminal, a plain line per partition otherwise (cron, CI,
/// orchestrators), for runs of more than one partition.
struct Progress {
    bar: ProgressBar,
    plain: bool,
    total: std::sync::atomic::AtomicUsize,
    done: std::sync::atomic::AtomicUsize,
    rows: std::sync::atomic::AtomicU64,
    started: std::time::Instant,
}

impl Progress {
    fn new(partitions: u64, terminal: bool) -> Self {
        let bar = if terminal && partitions > 1 {
            let pb = ProgressBar::new(partitions);
            pb.set_style(
                ProgressStyle::with_template("{spinner} {bar:30} {pos}/{len} partitions, {msg}, eta {eta}")
                    .unwrap_or_else(|_| ProgressStyle::default_bar()),
            );
            pb
        } else {
            ProgressBar::hidden()
        };
        Progress {
            bar,
            plain: !terminal,
            total: std::sync::atomic::AtomicUsize::new(partitions as usize),
            done: Default::default(),
            rows: Default::default(),
            started: std::time::Instant::now(),
        }
    }

    fn finish(&self) {
        self.bar.finish_and_clear();
    }

    fn step(&self, date: chrono::NaiveDate, what: &str, input_rows: u64) {
        use std::sync::atomic::Ordering::Relaxed;
        let n = self.done.fetch_add(1, Relaxed) + 1;
        let rows = self.rows.fetch_add(input_rows, Relaxed) + input_rows;
        let rate = rows as f64 / self.started.elapsed().as_secs_f64().max(1e-3) / 1e6;
        self.bar.set_message(format!("{rate:.1} M rows/s"));
        self.bar.inc(1);
        let total = self.total.load(Relaxed);
        if self.plain && total > 1 {
            eprintln!("progress: {n}/{total} partitions ({date} {what}), {rate:.1} M rows/s");
        }
    }
}

impl run::Observer for Progress {
    fn event(&self, e: &run::Event<'_>) {
        match e {
            run::Event::Planned { partitions, .. } => {
                self.total.store(*partitions, std::sync::atomic::Ordering::Relaxed);
                self.bar.set_length(*partitions as u64);
            }
            run::Event::Computed { date, input_rows, failed } => {
                self.step(*date, if *failed { "failed" } else { "computed" }, *input_rows)
            }
            run::Event::Passed { date, why } => self.step(*date, why, 0),
            run::Event::Done { .. } => {}
        }
    }
}

async fn cmd_generate(a: GenerateArgs) -> Result<ExitCode, Error> {
    let out = lakeswap::store::open(&a.out, &Default::default(), "--out", true)?;
    let start_date = dates::resolve_at(&a.start_date, chrono::Utc::now().date_naive()).map_err(usage)?;
    let opts = generate::GenerateOptions {
        days: a.days,
        rows_per_day: a.rows_per_day,
        start_date,
        seed: a.seed,
        conflicts: a.conflicts,
        files_per_day: a.files_per_day,
    };
    let total = generate::generate(&out, &opts, |d, c| {
        eprintln!("{d} rows={} orders={} conflicts={}", c.raw_rows, c.orders, c.conflict_rows)
    })
    .await?;
    println!("{}", serde_json::to_string(&total).unwrap_or_default());
    Ok(ExitCode::Ok)
}

async fn cmd_gc(a: GcArgs) -> Result<ExitCode, Error> {
    let job = Job::load(&a.config)?;
    let r = lakeswap::gc::gc(&job.output, &job.config.partition.column).await?;
    println!(
        "removed {} expired lease(s) and {} stale staged file(s); kept {} staged file(s) of live runs or unfinished moves",
        r.expired_leases, r.staging_removed, r.staging_kept
    );
    if r.temp_files_removed > 0 {
        println!("removed {} temporary file(s) of interrupted writes", r.temp_files_removed);
    }
    if r.sidecars_removed > 0 {
        println!("removed {} tombstone / key-index object(s) no partition names", r.sidecars_removed);
    }
    if !r.not_mine.is_empty() {
        println!("not mine, left alone ({}):", r.not_mine.len());
        for p in &r.not_mine {
            println!("  {p}");
        }
    }
    Ok(ExitCode::Ok)
}

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

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
async fn failed_dates(job: &Job, run_id: &str) -> Result<Vec<chrono::NaiveDate>, Error> {
    let journals = lakeswap::journal::read_all(&job.output).await?;
    let j = journals.iter().find(|j| j.run_id == run_id).ok_or_else(|| {
        usage(format!("no run {run_id} in {}/_lakeswap/runs/ (lakeswap status lists the runs)", job.output.url))
    })?;
    let failed: Vec<chrono::NaiveDate> =
        j.partitions.iter().filter(|p| p.action == lakeswap::commit::Action::Failed).map(|p| p.date).collect();
    if failed.is_empty() {
        eprintln!("run {run_id} failed no partition: nothing to retry");
    }
    Ok(failed)
}

async fn cmd_status(a: RangeArgs) -> Result<ExitCode, Error> {
    let job = Job::load(&a.config)?;
    let (journals, parts) = lakeswap::status::status(&job, a.dates(job.config.timezone())?).await?;
    if a.json {
        let runs: Vec<_> = journals.iter().rev().take(20).collect();
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({ "runs": runs, "partitions": parts })).unwrap_or_default()
        );
    } else {
        print!("{}", lakeswap::status::render(&journals, &parts, 10));
    }
    Ok(ExitCode::Ok)
}

async fn cmd_verify(a: RangeArgs) -> Result<ExitCode, Error> {
    let job = Job::load(&a.config)?;
    let dates = a
        .dates(job.config.timezone())?
        .ok_or_else(|| usage("name the dates to verify: --date D or --from A --to B"))?;
    let opts = RunOptions { dates: Some(dates), ..Default::default() };
    let summary = run::verify(&job, &opts).await?;
    print!("{}", report::table(&summary));
    Ok(summary.exit_code)
}
