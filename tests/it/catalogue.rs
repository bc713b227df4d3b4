//! Risk: bad input is committed, loses data, or is reported vaguely (G5). The catalogue of bad
//! inputs, each with its exact behaviour: the error names the object (and row and column
//! where known), the exit code is the contract's, the partition's committed bytes stay as
//! they were, and the unaffected partition is still committed.

use crate::common::faults::{FaultStore, Mode};
use crate::common::*;
use lakeswap::commit::Action;
use lakeswap::{ExitCode, Job, RunOptions};
use std::path::Path;

const BAD: &str = "2026-11-02";

#[derive(Clone, Copy)]
enum Fmt {
    Parquet,
    Csv,
    Ndjson,
}

fn encode(f: Fmt, rows: &[Order]) -> Vec<u8> {
    match f {
        Fmt::Parquet => parquet_bytes(&batch(rows)),
        Fmt::Csv => csv_bytes(rows),
        Fmt::Ndjson => ndjson_bytes(rows),
    }
}

fn ext(f: Fmt) -> &'static str {
    match f {
        Fmt::Parquet => "parquet",
        Fmt::Csv => "csv",
        Fmt::Ndjson => "json",
    }
}

fn write(lake: &Lake, rel: &str, bytes: &[u8]) {
    let p = lake.input().join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, bytes).unwrap();
}

fn config(lake: &Lake, f: Fmt) -> std::path::PathBuf {
    let p = lake.config();
    let format = match f {
        Fmt::Parquet => "format = \"parquet\"".to_string(),
        Fmt::Csv => "format = \"csv\"\nschema = { amount = \"decimal(12,2)\", source_version = \"int64\", event_date = \"date\" }".into(),
        Fmt::Ndjson => "format = \"ndjson\"\nschema = { amount = \"decimal(12,2)\", source_version = \"int64\", event_date = \"date\" }".into(),
    };
    let t = std::fs::read_to_string(&p).unwrap().replace("format = \"parquet\"", &format);
    std::fs::write(&p, t).unwrap();
    p
}

/// Commits 2026-11-01 and 2026-11-02 from good input, then changes 11-01's input and lets
/// `corrupt` break 11-02's; a second run must replace 11-01, fail 11-02 with `code` and an
/// error holding every needle, and keep 11-02's committed bytes.
async fn case(f: Fmt, corrupt: impl FnOnce(&Lake), code: ExitCode, needles: &[&str]) -> String {
    case_with(f, corrupt, |j| j, code, needles).await
}

async fn case_with(
    f: Fmt,
    corrupt: impl FnOnce(&Lake),
    wrap: impl FnOnce(Job) -> Job,
    code: ExitCode,
    needles: &[&str],
) -> String {
    let lake = Lake::new();
    let rows = random_orders(101, 2, 40);
    for day in ["2026-11-01", BAD] {
        let day_rows: Vec<Order> = rows.iter().filter(|r| r.date == d(day)).cloned().collect();
        write(&lake, &format!("event_date={day}/part-00000.{}", ext(f)), &encode(f, &day_rows));
    }
    let cfg = config(&lake, f);
    let first = run_range(&cfg, "2026-11-01", BAD).await;
    assert_eq!(first.exit_code, ExitCode::Ok, "{}", lakeswap::report::table(&first));
    let before = lake.snapshot();
    // 11-01 changes (a late version), 11-02 goes bad.
    let mut day1: Vec<Order> = rows.iter().filter(|r| r.date == d("2026-11-01")).cloned().collect();
    let mut late = day1[0].clone();
    late.version = 99;
    day1.push(late);
    write(&lake, &format!("event_date=2026-11-01/part-00000.{}", ext(f)), &encode(f, &day1));
    corrupt(&lake);
    let job = wrap(Job::load(&cfg).unwrap());
    let opts = RunOptions { dates: Some(vec![d("2026-11-01"), d(BAD)]), ..Default::default() };
    let s = lakeswap::run::run(&job, &opts).await.unwrap();
    assert_eq!(s.exit_code, code, "{}", lakeswap::report::table(&s));
    assert_eq!(s.partitions[0].action, Action::Replaced, "the unaffected partition still commits");
    assert_eq!(s.partitions[1].action, Action::Failed);
    let err = s.partitions[1].error.clone().unwrap();
    for n in needles {
        assert!(err.contains(n), "missing `{n}` in: {err}");
    }
    let key = format!("event_date={BAD}/part-00000.parquet");
    assert_eq!(lake.snapshot()[&key], before[&key], "the committed partition stays byte for byte");
    err
}

fn bad_rows() -> Vec<Order> {
    vec![order("a", 1, BAD, "USD", 100, "placed"), order("b", 1, BAD, "EUR", 200, "shipped")]
}

#[tokio::test(flavor = "multi_thread")]
async fn truncated_parquet() {
    let corrupt = |l: &Lake| {
        let p = l.input().join(format!("event_date={BAD}/part-00000.parquet"));
        let b = std::fs::read(&p).unwrap();
        std::fs::write(&p, &b[..b.len() / 2]).unwrap();
    };
    case(Fmt::Parquet, corrupt, ExitCode::DataContract, &["event_date=2026-11-02/part-00000.parquet", "Parquet"]).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn zero_byte_file() {
    let corrupt = |l: &Lake| write(l, &format!("event_date={BAD}/part-00001.parquet"), b"");
    case(Fmt::Parquet, corrupt, ExitCode::DataContract, &["part-00001.parquet", "empty (0 bytes)"]).await;
    // A CSV read with a header has at least that line: one without, stored empty or
    // compressed from nothing, was cut short.
    let corrupt = |l: &Lake| write(l, &format!("event_date={BAD}/part-00001.csv"), b"");
    case(Fmt::Csv, corrupt, ExitCode::DataContract, &["part-00001.csv", "empty (0 bytes)", "header line"]).await;
    let corrupt = |l: &Lake| {
        use std::io::Write;
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        e.write_all(b"").unwrap();
        write(l, &format!("event_date={BAD}/part-00001.csv.gz"), &e.finish().unwrap());
    };
    case(Fmt::Csv, corrupt, ExitCode::DataContract, &["part-00001.csv.gz", "holds no text", "header line"]).await;
}

/// An object of no rows whose header or footer lacks the key is not of this table (another
/// export's header, a line of blanks, an empty file of other columns): it fails its date as it
/// would with rows, naming the object and the column, instead of passing unseen.
#[tokio::test(flavor = "multi_thread")]
async fn an_object_of_no_rows_without_the_key_fails_its_date() {
    for header in [&b"customer,total\n"[..], b"   \r\n"] {
        let corrupt = |l: &Lake| write(l, &format!("event_date={BAD}/part-00001.csv"), header);
        let needles = ["part-00001.csv", "missing column", "`order_id`", "it holds no rows"];
        case(Fmt::Csv, corrupt, ExitCode::DataContract, &needles).await;
    }
    let corrupt = |l: &Lake| {
        use arrow::array::{ArrayRef, Int64Array, RecordBatch};
        let total = std::sync::Arc::new(Int64Array::from(Vec::<i64>::new())) as ArrayRef;
        let none = RecordBatch::try_from_iter([("total", total)]);
        write_parquet(&l.input().join(format!("event_date={BAD}/part-00001.parquet")), &none.unwrap());
    };
    let needles = ["part-00001.parquet", "missing column", "`order_id`", "it holds no rows"];
    case(Fmt::Parquet, corrupt, ExitCode::DataContract, &needles).await;
}

/// An empty CSV object listed first, where the run is planned from, fails its own date alone.
#[tokio::test(flavor = "multi_thread")]
async fn an_empty_csv_listed_first_fails_its_date_alone() {
    let lake = Lake::new();
    let rows = random_orders(104, 2, 30);
    for day in ["2026-11-01", BAD] {
        let day_rows: Vec<Order> = rows.iter().filter(|r| r.date == d(day)).cloned().collect();
        write(&lake, &format!("event_date={day}/part-00000.csv"), &encode(Fmt::Csv, &day_rows));
    }
    write(&lake, "event_date=2026-11-01/a.csv", b"");
    let s = run_range(&config(&lake, Fmt::Csv), "2026-11-01", BAD).await;
    assert_eq!(s.exit_code, ExitCode::DataContract, "{}", lakeswap::report::table(&s));
    assert_eq!(s.partitions[0].action, Action::Failed);
    let err = s.partitions[0].error.clone().unwrap();
    assert!(err.contains("event_date=2026-11-01/a.csv") && err.contains("empty (0 bytes)"), "{err}");
    assert_eq!(s.partitions[1].action, Action::Created, "{}", lakeswap::report::table(&s));
    assert_eq!(read_partition(&lake.partition_file(BAD)), model(&rows)[&d(BAD)]);
}

/// An empty NDJSON object is a whole document of no rows: its date is the other objects' rows.
#[tokio::test(flavor = "multi_thread")]
async fn zero_byte_ndjson_holds_no_rows() {
    let lake = Lake::new();
    let rows = random_orders(103, 1, 40);
    write(&lake, "event_date=2026-11-01/part-00000.json", &encode(Fmt::Ndjson, &rows));
    write(&lake, "event_date=2026-11-01/part-00001.json", b"");
    let s = run_range(&config(&lake, Fmt::Ndjson), "2026-11-01", "2026-11-01").await;
    assert_eq!(s.exit_code, ExitCode::Ok, "{}", lakeswap::report::table(&s));
    assert_eq!(s.partitions[0].counts.as_ref().unwrap().input_rows, rows.len() as u64);
    assert_eq!(read_partition(&lake.partition_file("2026-11-01")), model(&rows)[&d("2026-11-01")]);
}

#[tokio::test(flavor = "multi_thread")]
async fn non_data_files_are_ignored() {
    let lake = Lake::new();
    lake.write_hive(&random_orders(102, 1, 30), 1);
    for junk in [
        "event_date=2026-11-01/_SUCCESS",
        "event_date=2026-11-01/.part-00000.parquet.crc",
        "event_date=2026-11-01/x.crc",
        "event_date=2026-11-01/_temporary/0/part-9.parquet",
        "_SUCCESS",
    ] {
        write(&lake, junk, b"not parquet");
    }
    let s = run_range(&lake.config(), "2026-11-01", "2026-11-01").await;
    assert_eq!(s.exit_code, ExitCode::Ok, "{}", lakeswap::report::table(&s));
}

#[tokio::test(flavor = "multi_thread")]
async fn wrong_column_type() {
    let corrupt = |l: &Lake| {
        let b = recast(&batch(&bad_rows()), 5, arrow::datatypes::DataType::Utf8);
        write(l, &format!("event_date={BAD}/part-00001.parquet"), &parquet_bytes(&b));
    };
    case(
        Fmt::Parquet,
        corrupt,
        ExitCode::DataContract,
        &[
            "column `amount` cannot be unified",
            "Decimal128(12, 2) in",
            "part-00000.parquet",
            "Utf8 in",
            "part-00001.parquet",
        ],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn missing_column() {
    let corrupt = |l: &Lake| {
        let b = batch(&bad_rows());
        let b = b.project(&[0, 1, 2, 3, 4, 5]).unwrap();
        write(l, &format!("event_date={BAD}/part-00001.parquet"), &parquet_bytes(&b));
    };
    case(Fmt::Parquet, corrupt, ExitCode::DataContract, &["part-00001.parquet, column `status`", "missing column"])
        .await;
}

fn with_null(col: usize, row: usize) -> impl FnOnce(&Lake) {
    move |l: &Lake| {
        let b = with_null_at(&batch(&bad_rows()), col, row);
        write(l, &format!("event_date={BAD}/part-00001.parquet"), &parquet_bytes(&b));
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn null_key() {
    case(
        Fmt::Parquet,
        with_null(0, 1),
        ExitCode::DataContract,
        &["part-00001.parquet, row 1, column `order_id`", "key is null"],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn null_version() {
    case(
        Fmt::Parquet,
        with_null(1, 0),
        ExitCode::DataContract,
        &["part-00001.parquet, row 0, column `source_version`", "version is null"],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn null_date() {
    case(
        Fmt::Parquet,
        with_null(2, 1),
        ExitCode::DataContract,
        &["part-00001.parquet, row 1, column `event_date`", "date is null"],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn unparseable_date_in_csv() {
    let corrupt = |l: &Lake| {
        let mut b = csv_bytes(&bad_rows());
        b.extend_from_slice(b"c,1,2026-11-3x,cus,USD,1.00,placed\n");
        write(l, &format!("event_date={BAD}/part-00001.csv"), &b);
    };
    case(
        Fmt::Csv,
        corrupt,
        ExitCode::DataContract,
        &["part-00001.csv, row 2 (line 4), column `event_date`", "2026-11-3x"],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn non_utf8_csv() {
    let corrupt = |l: &Lake| {
        let mut b = csv_bytes(&bad_rows());
        b.extend_from_slice(b"c\xff\xfe,1,2026-11-02,cus,USD,1.00,placed\n");
        write(l, &format!("event_date={BAD}/part-00001.csv"), &b);
    };
    case(Fmt::Csv, corrupt, ExitCode::DataContract, &["part-00001.csv", "UTF-8"]).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn malformed_ndjson_line() {
    let corrupt = |l: &Lake| {
        let mut b = ndjson_bytes(&bad_rows());
        b.extend_from_slice(b"{\"order_id\": \"c\", \"source_version\": \n");
        write(l, &format!("event_date={BAD}/part-00001.json"), &b);
    };
    case(Fmt::Ndjson, corrupt, ExitCode::DataContract, &["part-00001.json", "malformed NDJSON"]).await;
}

/// A list where the column holds single values: every line is JSON, and the reader's own
/// words ("expected string got [3]", of an int64 column) named no line.
#[tokio::test(flavor = "multi_thread")]
async fn ndjson_list_in_a_column_of_single_values() {
    let corrupt = |l: &Lake| {
        let mut b = ndjson_bytes(&bad_rows());
        b.extend_from_slice(
            b"{\"order_id\":\"c\",\"source_version\":[3],\"event_date\":\"2026-11-02\",\"customer_id\":\"cus\",\"currency\":\"USD\",\"amount\":\"1.00\",\"status\":\"placed\"}\n",
        );
        write(l, &format!("event_date={BAD}/part-00001.json"), &b);
    };
    let needles = ["part-00001.json", "column `source_version`", "`[3]` is a list or an object", "line"];
    case(Fmt::Ndjson, corrupt, ExitCode::DataContract, &needles).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_parquet_column_named_twice() {
    let corrupt = |l: &Lake| {
        // A second `status` column, of other values: it was read as the first.
        let b = with_second_column(&batch(&bad_rows()), "status", vec!["refunded", "cancelled"]);
        write(l, &format!("event_date={BAD}/part-00001.parquet"), &parquet_bytes(&b));
    };
    case(
        Fmt::Parquet,
        corrupt,
        ExitCode::DataContract,
        &["part-00001.parquet", "column `status`", "two columns of this name"],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_ndjson_field_named_twice() {
    let corrupt = |l: &Lake| {
        // A reader keeps one of the two values: which one was meant is unknown.
        let mut b = ndjson_bytes(&bad_rows());
        b.extend_from_slice(
            b"{\"order_id\": \"c\", \"source_version\": 1, \"event_date\": \"2026-11-02\", \"customer_id\": \"x\", \
              \"currency\": \"USD\", \"amount\": \"1.00\", \"status\": \"placed\", \"status\": \"cancelled\"}\n",
        );
        write(l, &format!("event_date={BAD}/part-00001.json"), &b);
    };
    case(
        Fmt::Ndjson,
        corrupt,
        ExitCode::DataContract,
        &["part-00001.json", "row 2 (line 3)", "column `status`", "names the field twice"],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn schema_drift_in_one_object() {
    let corrupt = |l: &Lake| {
        // Two objects of the date whose decimals no decimal(38) holds both of.
        let rows: Vec<Order> = (0..3).map(|i| order(&format!("o{i}"), 1, BAD, "USD", 100, "placed")).collect();
        let b = recast(&batch(&rows), 5, arrow::datatypes::DataType::Decimal128(38, 2));
        write(l, &format!("event_date={BAD}/part-00001.parquet"), &parquet_bytes(&b));
        let b = recast(&batch(&rows), 5, arrow::datatypes::DataType::Decimal128(38, 3));
        write(l, &format!("event_date={BAD}/part-00002.parquet"), &parquet_bytes(&b));
    };
    case(
        Fmt::Parquet,
        corrupt,
        ExitCode::DataContract,
        &[
            "column `amount` cannot be unified",
            "Decimal128(38, 2) in",
            "part-00000.parquet",
            "Decimal128(38, 3) in",
            "part-00002.parquet",
        ],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn conflict() {
    let corrupt = |l: &Lake| {
        let rows = vec![order("a", 1, BAD, "USD", 100, "placed"), order("a", 1, BAD, "USD", 101, "placed")];
        write(l, &format!("event_date={BAD}/part-00001.parquet"), &parquet_bytes(&batch(&rows)));
    };
    case(
        Fmt::Parquet,
        corrupt,
        ExitCode::DataContract,
        &["1 conflicting key(s)", "key a version 1", "part-00001.parquet, row 0 vs"],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn key_under_two_dates() {
    let corrupt = |l: &Lake| {
        // An order of 11-01 shows up again under 11-02.
        let p = l.input().join("event_date=2026-11-01/part-00000.parquet");
        let rows = partition_input_rows(&p);
        let mut moved = rows[0].clone();
        moved.date = d(BAD);
        moved.version = 50;
        write(l, &format!("event_date={BAD}/part-00001.parquet"), &parquet_bytes(&batch(&[moved])));
    };
    let lake_err = case_two_dates(corrupt).await;
    assert!(lake_err.contains("seen under two dates"), "{lake_err}");
}

/// Like `case`, but both partitions depend on the bad key: both fail.
async fn case_two_dates(corrupt: impl FnOnce(&Lake)) -> String {
    let lake = Lake::new();
    lake.write_hive(&random_orders(103, 2, 40), 1);
    let first = run_range(&lake.config(), "2026-11-01", BAD).await;
    assert_eq!(first.exit_code, ExitCode::Ok);
    let before = lake.snapshot();
    corrupt(&lake);
    let s = run_range(&lake.config(), "2026-11-01", BAD).await;
    assert_eq!(s.exit_code, ExitCode::DataContract);
    assert!(s.partitions.iter().all(|p| p.action == Action::Failed));
    assert_eq!(lake.snapshot(), before);
    s.partitions[1].error.clone().unwrap()
}

fn partition_input_rows(p: &Path) -> Vec<Order> {
    use arrow::array::{AsArray, Decimal128Array};
    use arrow::datatypes::{Date32Type, Int64Type};
    let bytes = bytes::Bytes::from(std::fs::read(p).unwrap());
    let mut out = Vec::new();
    for b in parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(bytes).unwrap().build().unwrap() {
        let b = b.unwrap();
        let s = |i: usize| b.column(i).as_string::<i32>().clone();
        let dec: &Decimal128Array = b.column(5).as_primitive();
        for i in 0..b.num_rows() {
            out.push(Order {
                order_id: s(0).value(i).into(),
                version: b.column(1).as_primitive::<Int64Type>().value(i),
                date: lakeswap::dates::from_days(b.column(2).as_primitive::<Date32Type>().value(i)).unwrap(),
                customer: s(3).value(i).into(),
                currency: s(4).value(i).into(),
                cents: dec.value(i),
                status: s(6).value(i).into(),
            });
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread")]
async fn unreadable_input() {
    // Root reads any file, so the permission error is injected at the store.
    let wrap = |mut job: Job| {
        let f = FaultStore::new(job.input.store.clone(), Mode::None);
        f.deny(&format!("event_date={BAD}/"));
        job.input.store = f;
        job
    };
    let err = case_with(
        Fmt::Parquet,
        |_| {},
        wrap,
        ExitCode::PartialFailure,
        &["cannot read", "event_date=2026-11-02/part-00000.parquet", "Permission denied"],
    )
    .await;
    assert!(!err.contains("bad input"), "{err}");
}

#[test]
fn unknown_config_key() {
    let lake = Lake::new();
    lake.write_hive(&random_orders(104, 1, 20), 1);
    let cfg = lake.config();
    let t = std::fs::read_to_string(&cfg).unwrap().replace("[identity]", "[identity]\nversoin = \"x\"");
    std::fs::write(&cfg, t).unwrap();
    let o = cli(&["run", "--config", cfg.to_str().unwrap(), "--date", "2026-11-01"], lake.dir.path());
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o).contains("unknown field `versoin`") && text(&o).contains("job.toml"), "{}", text(&o));
    assert!(!lake.output().join("event_date=2026-11-01").exists());
}

#[test]
fn output_url_that_cannot_be_written() {
    let lake = Lake::new();
    lake.write_hive(&random_orders(105, 1, 20), 1);
    std::fs::write(lake.dir.path().join("a-file"), b"x").unwrap();
    let cfg = lake.config();
    let bad = lake.dir.path().join("a-file/out");
    let t = std::fs::read_to_string(&cfg)
        .unwrap()
        .replace(&lake.output().display().to_string(), &bad.display().to_string());
    std::fs::write(&cfg, t).unwrap();
    let o = cli(&["run", "--config", cfg.to_str().unwrap(), "--date", "2026-11-01"], lake.dir.path());
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("output.url") && text(&o).contains("a-file/out"), "{}", text(&o));
}
