//! lakeswap: idempotent daily tables for data lakes.
//!
//! A run reads raw events, cleans them by identity and ordering (exact duplicates dropped,
//! conflicting versions refused, the latest version of each key kept), computes a table per
//! date, and swaps each date's partition in atomically — so running a date again replaces it,
//! byte for byte, and never appends.
//!
//! The modules follow the pipeline:
//! [`config`] → [`plan`] → [`read`] → [`prepare`] → [`kind`] ([`engine`], [`merge`]) → [`commit`] → [`journal`],
//! driven by [`run`]. Storage goes through [`store`] (`object_store`): a local folder, S3,
//! Azure Blob, GCS, or memory.
//!
//! ```no_run
//! # async fn example() -> lakeswap::Result<()> {
//! use lakeswap::{run, Job, RunOptions};
//! let job = Job::load(std::path::Path::new("config/example.toml"))?;
//! let dates = lakeswap::dates::range("2026-11-01".parse().unwrap(), "2026-11-07".parse().unwrap()).unwrap();
//! let summary = run::run(&job, &RunOptions { dates: Some(dates), ..Default::default() }).await?;
//! print!("{}", lakeswap::report::table(&summary));
//! # Ok(()) }
//! ```

pub mod commit;
pub mod config;
pub mod crossdate;
pub mod dates;
pub mod engine;
pub mod error;
pub mod gc;
pub mod generate;
pub mod journal;
pub mod kind;
pub mod lease;
pub mod lineage;
pub mod merge;
pub mod plan;
pub mod predicate;
pub mod prepare;
pub mod read;
pub mod report;
pub mod run;
pub mod schema;
pub mod sidecar;
pub mod spill;
pub mod status;
pub mod stop;
pub mod store;
pub mod vars;

pub use config::JobConfig;
pub use error::{Error, ExitCode, PartitionError, Result};
pub use run::{Job, RunOptions, RunSummary};
