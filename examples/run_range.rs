//! Runs a job's date range through the library and prints the summary.
//!
//! cargo run --release --example run_range -- config/example.toml 2026-11-01 2026-11-07

use lakeswap::{dates, report, run, Job, RunOptions};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [config, from, to] = args.as_slice() else {
        return Err("usage: run_range CONFIG FROM TO".into());
    };
    let job = Job::load(std::path::Path::new(config))?;
    let dates = dates::range(from.parse()?, to.parse()?)?;
    let summary = run::run(&job, &RunOptions { dates: Some(dates), ..Default::default() }).await?;
    print!("{}", report::table(&summary));
    std::process::exit(summary.exit_code.code());
}
