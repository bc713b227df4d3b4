//! Risk: CSV and NDJSON inputs, or flat layouts, are read differently from Parquet. The same
//! events in every format and layout give the same table.

use crate::common::*;

const SCHEMA: &str = "schema = { amount = \"decimal(12,2)\", event_date = \"date\" }\n";

fn config(lake: &Lake, format: &str, extra_input: &str) -> std::path::PathBuf {
    let p = lake.config();
    let t = std::fs::read_to_string(&p)
        .unwrap()
        .replace("format = \"parquet\"", &format!("format = \"{format}\"\n{extra_input}"));
    std::fs::write(&p, t).unwrap();
    p
}

#[tokio::test(flavor = "multi_thread")]
async fn csv_hive_equals_the_model() {
    let lake = Lake::new();
    let rows = random_orders(41, 2, 200);
    for day in ["2026-11-01", "2026-11-02"] {
        let day_rows: Vec<Order> = rows.iter().filter(|r| r.date == d(day)).cloned().collect();
        let p = lake.input().join(format!("event_date={day}/events.csv"));
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, csv_bytes(&day_rows)).unwrap();
    }
    // Marker files beside the data are ignored.
    std::fs::write(lake.input().join("event_date=2026-11-01/_SUCCESS"), "").unwrap();
    std::fs::write(lake.input().join("event_date=2026-11-01/.events.csv.crc"), "crc").unwrap();
    let s = run_range(&config(&lake, "csv", SCHEMA), "2026-11-01", "2026-11-02").await;
    assert_eq!(s.exit_code, lakeswap::ExitCode::Ok, "{}", lakeswap::report::table(&s));
    for (date, want) in model(&rows) {
        assert_eq!(read_partition(&lake.partition_file(&date.to_string())), want, "{date}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn ndjson_flat_equals_the_model() {
    let lake = Lake::new();
    let rows = random_orders(42, 3, 150);
    for (i, chunk) in rows.chunks(rows.len() / 3 + 1).enumerate() {
        let body = ndjson_bytes(chunk);
        std::fs::write(lake.input().join(format!("batch-{i}.json")), body).unwrap();
    }
    let s = run_range(&config(&lake, "ndjson", SCHEMA), "2026-11-01", "2026-11-03").await;
    assert_eq!(s.exit_code, lakeswap::ExitCode::Ok, "{}", lakeswap::report::table(&s));
    for (date, want) in model(&rows) {
        assert_eq!(read_partition(&lake.partition_file(&date.to_string())), want, "{date}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn malformed_csv_names_the_object() {
    let lake = Lake::new();
    let p = lake.input().join("event_date=2026-11-01/events.csv");
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(&p, "order_id,source_version,event_date,customer_id,currency,amount,status\na,1,2026-11-01,c,USD,1.00,placed\nb,x,2026-11-01,c,USD,1.00,placed\n").unwrap();
    let s = run_range(
        &config(
            &lake,
            "csv",
            "schema = { amount = \"decimal(12,2)\", source_version = \"int64\", event_date = \"date\" }\n",
        ),
        "2026-11-01",
        "2026-11-01",
    )
    .await;
    assert_eq!(s.exit_code, lakeswap::ExitCode::DataContract);
    let e = s.partitions[0].error.clone().unwrap();
    assert!(
        e.contains("events.csv, row 1 (line 3), column `source_version`") && e.contains("`x` is not an integer"),
        "{e}"
    );
}

/// A flat object is read once for the whole range, but a row group whose date statistics rule
/// out every wanted date is never decoded: here its bytes are garbage, and a run over the other
/// date does not notice, while asking for its date does.
#[test]
fn flat_layout_skips_row_groups_without_a_wanted_date() {
    use lakeswap::config::Format;
    use lakeswap::read::{DateSource, Decoder};
    use parquet::arrow::ArrowWriter;
    use parquet::file::reader::{FileReader, SerializedFileReader};
    let rows = random_orders(41, 2, 60);
    let day = |date: &str| batch(&rows.iter().filter(|r| r.date == d(date)).cloned().collect::<Vec<_>>());
    let (first, second) = (day("2026-11-01"), day("2026-11-02"));
    let mut buf = Vec::new();
    let mut w = ArrowWriter::try_new(&mut buf, first.schema(), None).unwrap();
    w.write(&first).unwrap();
    w.flush().unwrap(); // one row group per date
    w.write(&second).unwrap();
    w.close().unwrap();
    // Overwrite every column chunk of the second row group.
    let reader = SerializedFileReader::new(bytes::Bytes::from(buf.clone())).unwrap();
    assert_eq!(reader.metadata().num_row_groups(), 2);
    for c in reader.metadata().row_group(1).columns() {
        let (start, len) = c.byte_range();
        buf[start as usize..(start + len) as usize].fill(0xA5);
    }
    let decoder = Decoder {
        format: Format::Parquet,
        delimiter: b',',
        header: true,
        date_source: DateSource::Column("event_date".into()),
        tz: chrono_tz::UTC,
        declared: Default::default(),
        required: vec!["event_date".into()],
    };
    let bytes = bytes::Bytes::from(buf);
    let pieces = decoder.decode("events.parquet", bytes.clone(), &[d("2026-11-01")], None).unwrap().pieces;
    let decoded: usize = pieces.iter().map(|p| p.batch.num_rows()).sum();
    assert_eq!(decoded, first.num_rows(), "every row of the wanted date, from the intact row group");
    assert!(pieces.iter().all(|p| p.date == d("2026-11-01")));
    let err = decoder.decode("events.parquet", bytes, &[d("2026-11-02")], None).unwrap_err();
    assert!(err.to_string().contains("row group 1"), "the damaged row group is read for its date: {err}");
}
