//! Shared test helpers: a temporary lake, raw order rows, configs, and readers of the output.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::Arc;

use arrow::array::{Array, AsArray, Date32Array, Decimal128Array, Int64Array, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Decimal128Type, Field, Int64Type, Schema, SchemaRef};
use chrono::NaiveDate;
use lakeswap::{dates, run, Job, RunOptions, RunSummary};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::arrow::ArrowWriter;

/// One raw order event.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Order {
    pub order_id: String,
    pub version: i64,
    pub date: NaiveDate,
    pub customer: String,
    pub currency: String,
    pub cents: i128,
    pub status: String,
}

pub fn d(s: &str) -> NaiveDate {
    s.parse().unwrap()
}

pub fn order(id: &str, version: i64, date: &str, currency: &str, cents: i128, status: &str) -> Order {
    Order {
        order_id: id.into(),
        version,
        date: d(date),
        customer: format!("cus-{id}"),
        currency: currency.into(),
        cents,
        status: status.into(),
    }
}

/// A decoder of `format` objects dated by their `event_date` column, nothing declared.
pub fn dated_decoder(format: lakeswap::config::Format) -> lakeswap::read::Decoder {
    lakeswap::read::Decoder {
        format,
        delimiter: b',',
        header: true,
        date_source: lakeswap::read::DateSource::Column("event_date".into()),
        tz: chrono_tz::UTC,
        declared: Default::default(),
        required: vec!["event_date".into()],
        tombstone: None,
        run: None,
        version: None,
    }
}

pub fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("order_id", DataType::Utf8, true),
        Field::new("source_version", DataType::Int64, true),
        Field::new("event_date", DataType::Date32, true),
        Field::new("customer_id", DataType::Utf8, true),
        Field::new("currency", DataType::Utf8, true),
        Field::new("amount", DataType::Decimal128(12, 2), true),
        Field::new("status", DataType::Utf8, true),
    ]))
}

pub fn batch(rows: &[Order]) -> RecordBatch {
    RecordBatch::try_new(
        schema(),
        vec![
            Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.order_id.as_str()))),
            Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.version))),
            Arc::new(Date32Array::from_iter_values(rows.iter().map(|r| dates::to_days(r.date)))),
            Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.customer.as_str()))),
            Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.currency.as_str()))),
            Arc::new(
                Decimal128Array::from_iter_values(rows.iter().map(|r| r.cents))
                    .with_precision_and_scale(12, 2)
                    .unwrap(),
            ),
            Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.status.as_str()))),
        ],
    )
    .unwrap()
}

pub mod backends;
pub mod faults;

/// `b` with column `col` cast to `to` (its field's type too).
pub fn recast(b: &RecordBatch, col: usize, to: DataType) -> RecordBatch {
    let mut cols = b.columns().to_vec();
    cols[col] = arrow::compute::cast(&cols[col], &to).unwrap();
    let mut fields: Vec<Field> = b.schema().fields().iter().map(|f| f.as_ref().clone()).collect();
    fields[col] = Field::new(fields[col].name(), to, true);
    RecordBatch::try_new(Arc::new(Schema::new(fields)), cols).unwrap()
}

/// `b` with column `col` null at `row`.
pub fn with_null_at(b: &RecordBatch, col: usize, row: usize) -> RecordBatch {
    let c = b.column(col);
    let mask = arrow::array::BooleanArray::from((0..c.len()).map(|i| i == row).collect::<Vec<_>>());
    let nulls = arrow::array::new_null_array(c.data_type(), c.len());
    let mut cols = b.columns().to_vec();
    cols[col] = arrow::compute::kernels::zip::zip(&mask, &nulls, c).unwrap();
    RecordBatch::try_new(b.schema(), cols).unwrap()
}

/// A batch as Parquet bytes.
pub fn parquet_bytes(b: &RecordBatch) -> Vec<u8> {
    let mut buf = Vec::new();
    let mut w = ArrowWriter::try_new(&mut buf, b.schema(), None).unwrap();
    w.write(b).unwrap();
    w.close().unwrap();
    buf
}

pub fn write_parquet(path: &Path, b: &RecordBatch) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let f = std::fs::File::create(path).unwrap();
    let mut w = ArrowWriter::try_new(f, b.schema(), None).unwrap();
    w.write(b).unwrap();
    w.close().unwrap();
}

/// Rows split into Hive-partitioned objects, `files` per date: relative path and rows.
pub fn hive_parts(rows: &[Order], files: usize) -> Vec<(String, RecordBatch)> {
    let mut by_date: BTreeMap<NaiveDate, Vec<Order>> = BTreeMap::new();
    for r in rows {
        by_date.entry(r.date).or_default().push(r.clone());
    }
    let mut out = Vec::new();
    for (date, rows) in by_date {
        let n = rows.len();
        for f in 0..files {
            out.push((
                format!("event_date={date}/part-{f:05}.parquet"),
                batch(&rows[n * f / files..n * (f + 1) / files]),
            ));
        }
    }
    out
}

/// A temporary folder with `in/` (raw events) and `out/` (the table).
pub struct Lake {
    pub dir: tempfile::TempDir,
}

pub const MEASURES: &str = r#"
[aggregate]
group_by = ["currency"]
measures = [
  { name = "orders",           fn = "count" },
  { name = "revenue",          fn = "sum", column = "amount", where = { status = ["placed", "shipped"] } },
  { name = "cancelled_orders", fn = "count", where = { status = ["cancelled"] } },
  { name = "refunded_amount",  fn = "sum", column = "amount", where = { status = ["refunded"] } },
  { name = "customers",        fn = "count_distinct", column = "customer_id" },
]
"#;

impl Lake {
    pub fn new() -> Lake {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("in")).unwrap();
        Lake { dir }
    }
    pub fn input(&self) -> PathBuf {
        self.dir.path().join("in")
    }
    pub fn output(&self) -> PathBuf {
        self.dir.path().join("out")
    }
    /// The output's run state: the default `state_url`, beside the table.
    pub fn state(&self) -> PathBuf {
        self.dir.path().join("_lakeswap/out")
    }
    /// Writes rows as Hive-partitioned Parquet, `files` objects per date.
    pub fn write_hive(&self, rows: &[Order], files: usize) {
        for (rel, b) in hive_parts(rows, files) {
            write_parquet(&self.input().join(rel), &b);
        }
    }
    /// The standard revenue config, with `extra` TOML appended to `[identity]`-level choices.
    pub fn config_with(&self, identity: &str, extra: &str) -> PathBuf {
        let text = format!(
            "[job]\nname = \"revenue_daily\"\nkind = \"aggregate\"\n\n[input]\nurl = \"{}\"\nformat = \"parquet\"\n\n[identity]\n{identity}\n{extra}\n{MEASURES}\n[output]\nurl = \"{}\"\n",
            self.input().display(),
            self.output().display()
        );
        let p = self.dir.path().join("job.toml");
        std::fs::write(&p, text).unwrap();
        p
    }
    pub fn config(&self) -> PathBuf {
        self.config_with("key = [\"order_id\"]\nversion = \"source_version\"", "")
    }
    pub fn partition_file(&self, date: &str) -> PathBuf {
        self.output().join(format!("event_date={date}/part-00000.parquet"))
    }
    /// Every file under the output, with its bytes: the table holds its partitions and
    /// nothing else.
    pub fn snapshot(&self) -> BTreeMap<String, Vec<u8>> {
        let root = self.output();
        walk(&root)
            .into_iter()
            .map(|p| (p.strip_prefix(&root).unwrap().to_string_lossy().to_string(), std::fs::read(&p).unwrap()))
            .collect()
    }
}

/// Runs a config over a date range through the library.
pub async fn run_range(config: &Path, from: &str, to: &str) -> RunSummary {
    run_with(config, from, to, |_| {}).await
}

pub async fn run_with(config: &Path, from: &str, to: &str, tweak: impl FnOnce(&mut RunOptions)) -> RunSummary {
    let job = Job::load(config).unwrap();
    let mut opts = RunOptions { dates: Some(dates::range(d(from), d(to)).unwrap()), ..Default::default() };
    tweak(&mut opts);
    run::run(&job, &opts).await.unwrap()
}

/// Runs the `lakeswap` binary.
pub fn cli(args: &[&str], cwd: &Path) -> Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_lakeswap")).args(args).current_dir(cwd).output().unwrap()
}

/// The result table: stdout, which holds nothing else.
pub fn table_of(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

/// One output row: currency, orders, revenue (cents), cancelled, refunded (cents), customers.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct OutRow {
    pub currency: String,
    pub orders: i64,
    pub revenue: i128,
    pub cancelled: i64,
    pub refunded: i128,
    pub customers: i64,
}

/// Reads one partition file into rows, in file order.
pub fn read_partition(path: &Path) -> Vec<OutRow> {
    partition_rows(&std::fs::read(path).unwrap())
}

/// The first record batch of a partition file (lakeswap writes one).
pub fn read_batch(path: &Path) -> RecordBatch {
    let bytes = bytes::Bytes::from(std::fs::read(path).unwrap());
    ParquetRecordBatchReaderBuilder::try_new(bytes).unwrap().build().unwrap().next().unwrap().unwrap()
}

/// Decodes partition file bytes into rows, in file order.
pub fn partition_rows(bytes: &[u8]) -> Vec<OutRow> {
    let bytes = bytes::Bytes::from(bytes.to_vec());
    let reader = ParquetRecordBatchReaderBuilder::try_new(bytes).unwrap().build().unwrap();
    let mut out = Vec::new();
    for b in reader {
        let b = b.unwrap();
        let cur = b.column(0).as_string::<i32>();
        let i64s = |i: usize| b.column(i).as_primitive::<Int64Type>().clone();
        let decs = |i: usize| b.column(i).as_primitive::<Decimal128Type>().clone();
        let (orders, revenue, cancelled, refunded, customers) = (i64s(1), decs(2), i64s(3), decs(4), i64s(5));
        assert_eq!(revenue.scale(), 2);
        assert_eq!(revenue.null_count() + orders.null_count(), 0, "sums and counts are never null");
        for i in 0..b.num_rows() {
            out.push(OutRow {
                currency: cur.value(i).to_string(),
                orders: orders.value(i),
                revenue: revenue.value(i),
                cancelled: cancelled.value(i),
                refunded: refunded.value(i),
                customers: customers.value(i),
            });
        }
    }
    out
}

/// The plain model: exact duplicates dropped, latest version per key, sums in a BTreeMap.
pub fn model(rows: &[Order]) -> BTreeMap<NaiveDate, Vec<OutRow>> {
    use std::collections::{HashMap, HashSet};
    let distinct: HashSet<&Order> = rows.iter().collect();
    let mut latest: HashMap<&str, &Order> = HashMap::new();
    for r in distinct {
        let e = latest.entry(r.order_id.as_str()).or_insert(r);
        if r.version > e.version {
            *e = r;
        }
    }
    let mut groups: BTreeMap<(NaiveDate, String), (OutRow, HashSet<String>)> = BTreeMap::new();
    for r in latest.values() {
        let (row, customers) = groups.entry((r.date, r.currency.clone())).or_default();
        row.currency = r.currency.clone();
        row.orders += 1;
        match r.status.as_str() {
            "placed" | "shipped" => row.revenue += r.cents,
            "cancelled" => row.cancelled += 1,
            "refunded" => row.refunded += r.cents,
            _ => {}
        }
        customers.insert(r.customer.clone());
    }
    let mut out: BTreeMap<NaiveDate, Vec<OutRow>> = BTreeMap::new();
    for ((date, _), (mut row, customers)) in groups {
        row.customers = customers.len() as i64;
        out.entry(date).or_default().push(row);
    }
    out
}

/// A seeded random stream of order events: several versions per order, exact duplicates,
/// shuffled; payload a function of (key, version), so there are no conflicts.
pub fn random_orders(seed: u64, days: u32, orders_per_day: u32) -> Vec<Order> {
    use rand::{Rng, SeedableRng};
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let currencies = ["USD", "EUR", "GBP", "JPY"];
    let statuses = ["placed", "shipped", "cancelled", "refunded"];
    let mut rows = Vec::new();
    for day in 0..days {
        let date = d("2026-11-01") + chrono::Days::new(day as u64);
        for o in 0..orders_per_day {
            let id = format!("ord-{day:03}-{o:06}");
            let currency = currencies[rng.random_range(0..4)];
            let customer = format!("cus-{:04}", rng.random_range(0..500));
            let versions = rng.random_range(1..=4);
            for v in 1..=versions {
                let r = Order {
                    order_id: id.clone(),
                    version: v,
                    date,
                    customer: customer.clone(),
                    currency: currency.to_string(),
                    cents: rng.random_range(100..50_000),
                    status: statuses[rng.random_range(0..4)].to_string(),
                };
                if rng.random_bool(0.1) {
                    rows.push(r.clone());
                }
                rows.push(r);
            }
        }
    }
    use rand::seq::SliceRandom;
    rows.shuffle(&mut rng);
    rows
}

/// Orders as CSV with a header.
pub fn csv_bytes(rows: &[Order]) -> Vec<u8> {
    let mut s = String::from("order_id,source_version,event_date,customer_id,currency,amount,status\n");
    for r in rows {
        s += &format!(
            "{},{},{},{},{},{}.{:02},{}\n",
            r.order_id,
            r.version,
            r.date,
            r.customer,
            r.currency,
            r.cents / 100,
            r.cents % 100,
            r.status
        );
    }
    s.into_bytes()
}

/// Orders as NDJSON, amounts as strings.
/// `b` with a second column named `column`, holding `values` (writers allow it; readers must
/// not pick one).
pub fn with_second_column(b: &RecordBatch, column: &str, values: Vec<&str>) -> RecordBatch {
    let mut fields: Vec<_> = b.schema().fields().iter().cloned().collect();
    let mut columns = b.columns().to_vec();
    fields.push(fields[b.schema().index_of(column).unwrap()].clone());
    columns.push(std::sync::Arc::new(arrow::array::StringArray::from(values)));
    RecordBatch::try_new(std::sync::Arc::new(arrow::datatypes::Schema::new(fields)), columns).unwrap()
}

pub fn ndjson_bytes(rows: &[Order]) -> Vec<u8> {
    let mut s = String::new();
    for r in rows {
        s += &format!(
            "{{\"order_id\":\"{}\",\"source_version\":{},\"event_date\":\"{}\",\"customer_id\":\"{}\",\"currency\":\"{}\",\"amount\":\"{}.{:02}\",\"status\":\"{}\"}}\n",
            r.order_id, r.version, r.date, r.customer, r.currency, r.cents / 100, r.cents % 100, r.status
        );
    }
    s.into_bytes()
}

/// Every file below `dir`.
pub fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            if e.path().is_dir() {
                out.extend(walk(&e.path()));
            } else {
                out.push(e.path());
            }
        }
    }
    out
}
