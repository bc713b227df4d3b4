//! Every integration test of lakeswap, one module per risk (docs/design.md §8). One binary:
//! the crate is linked once.

mod common;

mod bad_input;
mod catalogue;
mod cli;
mod concurrency;
mod crash;
mod formats;
mod fuzz;
mod gc;
mod idempotency;
mod inputs;
mod kill;
mod merge;
mod missing_input;
mod model;
mod operations;
mod readers;
mod scheduler;
mod spill;
mod sql;
mod stores;
