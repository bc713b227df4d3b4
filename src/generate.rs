//! `lakeswap generate`: the reference data set of README.md, raw order events as
//! `OUT/event_date=YYYY-MM-DD/part-NNNNN.parquet`, in the same schema and shape as the peers'
//! `gen_orders.py` (same proportions of versions, duplicates, currencies and statuses).
//!
//! Deterministic: each date has its own random stream seeded by (seed, day index), so day k
//! is the same in a 10-day and a 16-day data set, and the same arguments give the same bytes.

use std::sync::Arc;

use arrow::array::{Date32Array, Decimal128Array, Int64Array, RecordBatch, StringArray, TimestampMicrosecondArray};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use bytes::Bytes;
use chrono::NaiveDate;
use object_store::ObjectStoreExt;
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;

use crate::dates;
use crate::error::{Error, Result};
use crate::store::StoreLocation;

const CURRENCIES: [&str; 4] = ["USD", "EUR", "GBP", "JPY"];
const CURRENCY_P: [f64; 4] = [0.55, 0.25, 0.12, 0.08];
const STATUSES: [&str; 4] = ["placed", "shipped", "cancelled", "refunded"];
const STATUS_P_V1: [f64; 4] = [0.80, 0.12, 0.08, 0.00];
const STATUS_P_LATER: [f64; 4] = [0.05, 0.55, 0.20, 0.20];
const VERSIONS_P: [f64; 3] = [0.70, 0.20, 0.10];
const N_CUSTOMERS: u64 = 200_000;
const ORDER_ID_STRIDE: u64 = 100_000_000;
const ROW_GROUP: usize = 131_072;
const US_PER_DAY: i64 = 86_400 * 1_000_000;

/// What to generate.
#[derive(Debug, Clone, Serialize)]
pub struct GenerateOptions {
    pub days: u32,
    pub rows_per_day: u64,
    pub start_date: NaiveDate,
    pub seed: u64,
    pub conflicts: u64,
    pub files_per_day: u32,
}

/// The expected row counts of one generated date.
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq, Eq)]
pub struct DayCounts {
    pub raw_rows: u64,
    pub duplicate_rows: u64,
    pub conflict_rows: u64,
    pub after_dedup: u64,
    pub orders: u64,
}

/// The Arrow schema of the reference data set.
pub fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("order_id", DataType::Utf8, true),
        Field::new("source_version", DataType::Int64, true),
        Field::new("event_timestamp", DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())), true),
        Field::new("event_date", DataType::Date32, true),
        Field::new("customer_id", DataType::Utf8, true),
        Field::new("currency", DataType::Utf8, true),
        Field::new("amount", DataType::Decimal128(12, 2), true),
        Field::new("status", DataType::Utf8, true),
    ]))
}

fn pick(rng: &mut ChaCha8Rng, p: &[f64]) -> usize {
    let x: f64 = rng.random();
    let mut acc = 0.0;
    for (i, w) in p.iter().enumerate() {
        acc += w;
        if x < acc {
            return i;
        }
    }
    p.len() - 1
}

fn day_rng(seed: u64, day: u64) -> ChaCha8Rng {
    ChaCha8Rng::seed_from_u64(
        seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ day.wrapping_add(1).wrapping_mul(0xD1B5_4A32_D192_ED03),
    )
}

/// Generates one date: the rows (shuffled) and their expected counts.
pub fn generate_day(
    day_index: u64,
    date: NaiveDate,
    rows: u64,
    seed: u64,
    n_conflicts: u64,
) -> (RecordBatch, DayCounts) {
    let mut rng = day_rng(seed, day_index);
    let n_dup = (rows as f64 * 0.03).round() as u64;
    let base = (rows - n_dup) as usize;

    // Orders and their number of versions, adding up to `base` rows exactly.
    let mut nver: Vec<u8> = Vec::new();
    let mut used = 0usize;
    while used < base {
        let v = (pick(&mut rng, &VERSIONS_P) + 1).min(base - used);
        nver.push(v as u8);
        used += v;
    }
    let n_orders = nver.len();
    let mut perm: Vec<u64> = (0..n_orders as u64).collect();
    perm.shuffle(&mut rng);
    let order_num: Vec<u64> = perm.iter().map(|p| day_index * ORDER_ID_STRIDE + p).collect();
    let cust: Vec<u64> = (0..n_orders).map(|_| rng.random_range(0..N_CUSTOMERS)).collect();
    let curr: Vec<u8> = (0..n_orders).map(|_| pick(&mut rng, &CURRENCY_P) as u8).collect();

    // Rows grouped by order, versions 1..n with increasing timestamps.
    let mut row_order = Vec::with_capacity(base);
    let mut version = Vec::with_capacity(base);
    let mut ts = Vec::with_capacity(base);
    let mut status = Vec::with_capacity(base);
    let mut cents: Vec<i64> = Vec::with_capacity(base);
    for (o, &k) in nver.iter().enumerate() {
        let mut t: Vec<i64> = (0..k).map(|_| rng.random_range(0..US_PER_DAY)).collect();
        t.sort_unstable();
        for (v, &stamp) in t.iter().enumerate() {
            row_order.push(o as u32);
            version.push(v as i64 + 1);
            ts.push(stamp);
            status.push(pick(&mut rng, if v == 0 { &STATUS_P_V1 } else { &STATUS_P_LATER }) as u8);
            let fresh = rng.random_range(100..=50_000i64);
            let change = rng.random::<f64>() < 0.3;
            cents.push(if v > 0 && !change { *cents.last().unwrap_or(&fresh) } else { fresh });
        }
    }

    // Conflicting copies (same key and version, another payload) and exact duplicates.
    let conf_idx = if n_conflicts > 0 {
        let mut v = rand::seq::index::sample(&mut rng, base, n_conflicts as usize).into_vec();
        v.sort_unstable();
        v
    } else {
        Vec::new()
    };
    let dup_idx = rand::seq::index::sample(&mut rng, base, n_dup as usize).into_vec();

    let mut src: Vec<(usize, i64, u8)> = Vec::with_capacity(rows as usize + conf_idx.len());
    src.extend((0..base).map(|i| (i, cents[i], status[i])));
    src.extend(dup_idx.iter().map(|&i| (i, cents[i], status[i])));
    for &i in &conf_idx {
        let c = cents[i] + if cents[i] >= 50_000 { -1 } else { 1 };
        let s = if rng.random::<f64>() < 0.5 { (status[i] + 1) % 4 } else { status[i] };
        src.push((i, c, s));
    }
    src.shuffle(&mut rng);

    let day_start = dates::to_days(date) as i64 * US_PER_DAY;
    let n = src.len();
    let order_ids: StringArray =
        src.iter().map(|(i, _, _)| Some(format!("ord-{:011}", order_num[row_order[*i] as usize]))).collect();
    let versions = Int64Array::from(src.iter().map(|(i, _, _)| version[*i]).collect::<Vec<_>>());
    let stamps = TimestampMicrosecondArray::from(src.iter().map(|(i, _, _)| ts[*i] + day_start).collect::<Vec<_>>())
        .with_timezone("UTC");
    let event_dates = Date32Array::from(vec![dates::to_days(date); n]);
    let customers: StringArray =
        src.iter().map(|(i, _, _)| Some(format!("cus-{:07}", cust[row_order[*i] as usize]))).collect();
    let currencies: StringArray =
        src.iter().map(|(i, _, _)| Some(CURRENCIES[curr[row_order[*i] as usize] as usize])).collect();
    let amounts = Decimal128Array::from(src.iter().map(|(_, c, _)| *c as i128).collect::<Vec<_>>())
        .with_precision_and_scale(12, 2)
        .expect("decimal(12,2) is valid");
    let statuses: StringArray = src.iter().map(|(_, _, s)| Some(STATUSES[*s as usize])).collect();
    let batch = RecordBatch::try_new(
        schema(),
        vec![
            Arc::new(order_ids),
            Arc::new(versions),
            Arc::new(stamps),
            Arc::new(event_dates),
            Arc::new(customers),
            Arc::new(currencies),
            Arc::new(amounts),
            Arc::new(statuses),
        ],
    )
    .expect("the generated columns match the schema");
    let counts = DayCounts {
        raw_rows: n as u64,
        duplicate_rows: n_dup,
        conflict_rows: n_conflicts,
        after_dedup: base as u64 + n_conflicts,
        orders: n_orders as u64,
    };
    (batch, counts)
}

fn write_parquet(batch: &RecordBatch) -> Result<Bytes> {
    let props = WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::default()))
        .set_max_row_group_row_count(Some(ROW_GROUP))
        .build();
    let mut buf = Vec::new();
    let err = |e: parquet::errors::ParquetError| Error::Internal { what: "generate", message: e.to_string() };
    let mut w = ArrowWriter::try_new(&mut buf, batch.schema(), Some(props)).map_err(err)?;
    w.write(batch).map_err(err)?;
    w.close().map_err(err)?;
    Ok(Bytes::from(buf))
}

#[derive(Serialize)]
struct Meta<'a> {
    args: &'a GenerateOptions,
    days: std::collections::BTreeMap<String, DayCounts>,
    total: DayCounts,
}

/// Writes the data set under `out`; returns the total counts. `on_day` is told of each date.
pub async fn generate(
    out: &StoreLocation,
    opts: &GenerateOptions,
    on_day: impl Fn(NaiveDate, &DayCounts),
) -> Result<DayCounts> {
    let days = opts.days.max(1) as u64;
    let mut conf_rng = day_rng(opts.seed, 1_000_003);
    let mut conf_days = vec![0u64; days as usize];
    for _ in 0..opts.conflicts {
        conf_days[conf_rng.random_range(0..days) as usize] += 1;
    }
    let mut meta = Meta { args: opts, days: Default::default(), total: DayCounts::default() };
    for d in 0..days {
        let date = opts.start_date + chrono::Days::new(d);
        let (rows, seed, nc) = (opts.rows_per_day, opts.seed, conf_days[d as usize]);
        let files = opts.files_per_day.max(1) as usize;
        let (parts, counts) = tokio::task::spawn_blocking(move || -> Result<(Vec<Bytes>, DayCounts)> {
            let (batch, counts) = generate_day(d, date, rows, seed, nc);
            let n = batch.num_rows();
            let mut parts = Vec::with_capacity(files);
            for f in 0..files {
                let (a, b) = (n * f / files, n * (f + 1) / files);
                parts.push(write_parquet(&batch.slice(a, b - a))?);
            }
            Ok((parts, counts))
        })
        .await
        .map_err(|e| Error::Internal { what: "generate", message: e.to_string() })??;
        for (f, bytes) in parts.into_iter().enumerate() {
            let path = out.child(&[&format!("event_date={date}"), &format!("part-{f:05}.parquet")]);
            out.store
                .put(&path, bytes.into())
                .await
                .map_err(|e| Error::store("cannot write", out.display(&path), e))?;
        }
        on_day(date, &counts);
        meta.total.raw_rows += counts.raw_rows;
        meta.total.duplicate_rows += counts.duplicate_rows;
        meta.total.conflict_rows += counts.conflict_rows;
        meta.total.after_dedup += counts.after_dedup;
        meta.total.orders += counts.orders;
        meta.days.insert(date.to_string(), counts);
    }
    let path = out.child(&["_gen_meta.json"]);
    let body = serde_json::to_vec_pretty(&meta).unwrap_or_default();
    out.store.put(&path, body.into()).await.map_err(|e| Error::store("cannot write", out.display(&path), e))?;
    Ok(meta.total)
}
