//! Risk: the numbers are wrong. The pipeline against a plain model (a HashMap of latest
//! versions, BTreeMap sums) on seeded random events with duplicates and several versions.

use crate::common::*;

#[tokio::test(flavor = "multi_thread")]
async fn pipeline_equals_the_model_on_random_events() {
    for seed in [1u64, 2, 3] {
        let lake = Lake::new();
        let rows = random_orders(seed, 4, 400);
        lake.write_hive(&rows, 3);
        let summary = run_range(&lake.config(), "2026-11-01", "2026-11-04").await;
        assert_eq!(summary.exit_code, lakeswap::ExitCode::Ok, "{}", lakeswap::report::table(&summary));
        let expected = model(&rows);
        assert_eq!(expected.len(), 4);
        for (date, want) in &expected {
            let got = read_partition(&lake.partition_file(&date.to_string()));
            assert_eq!(&got, want, "seed {seed}, {date}");
        }
        // The counts of each step, too.
        let raw_per_day = |day| rows.iter().filter(|r| r.date == day).count() as u64;
        for p in &summary.partitions {
            let distinct: std::collections::HashSet<&Order> = rows.iter().filter(|r| r.date == p.date).collect();
            let keys: std::collections::HashSet<&str> = distinct.iter().map(|r| r.order_id.as_str()).collect();
            assert_eq!(p.counts.unwrap().input_rows, raw_per_day(p.date));
            assert_eq!(p.counts.unwrap().duplicates, raw_per_day(p.date) - distinct.len() as u64);
            assert_eq!(p.counts.unwrap().superseded, (distinct.len() - keys.len()) as u64);
            assert_eq!(p.counts.unwrap().keys, keys.len() as u64);
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn flat_layout_gives_the_same_result_as_hive() {
    let lake = Lake::new();
    let rows = random_orders(7, 3, 300);
    // One flat folder of objects, each holding every date.
    for (i, chunk) in rows.chunks(rows.len() / 4 + 1).enumerate() {
        write_parquet(&lake.input().join(format!("events-{i}.parquet")), &batch(chunk));
    }
    let summary = run_range(&lake.config(), "2026-11-01", "2026-11-03").await;
    assert_eq!(summary.exit_code, lakeswap::ExitCode::Ok, "{}", lakeswap::report::table(&summary));
    for (date, want) in model(&rows) {
        assert_eq!(read_partition(&lake.partition_file(&date.to_string())), want, "{date}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn tombstones_leave_the_key_out() {
    let lake = Lake::new();
    // `status = "deleted"` marks a delete; the latest version decides.
    let rows = vec![
        order("a", 1, "2026-11-01", "USD", 1000, "placed"),
        order("a", 2, "2026-11-01", "USD", 1000, "deleted"),
        order("b", 2, "2026-11-01", "USD", 500, "placed"),
        order("b", 1, "2026-11-01", "USD", 500, "deleted"),
    ];
    lake.write_hive(&rows, 1);
    let cfg = lake.config_with(
        "key = [\"order_id\"]\nversion = \"source_version\"\ndeleted = { column = \"status\", equals = \"deleted\" }",
        "",
    );
    let s = run_range(&cfg, "2026-11-01", "2026-11-01").await;
    assert_eq!(s.partitions[0].counts.unwrap().deleted, 1);
    let got = read_partition(&lake.partition_file("2026-11-01"));
    assert_eq!(got.len(), 1);
    assert_eq!((got[0].orders, got[0].revenue), (1, 500));
}

#[tokio::test(flavor = "multi_thread")]
async fn min_max_count_of_a_column_and_no_group_by() {
    let lake = Lake::new();
    let rows = vec![
        order("a", 1, "2026-11-01", "USD", 500, "placed"),
        order("a", 2, "2026-11-01", "USD", 700, "shipped"),
        order("b", 1, "2026-11-01", "EUR", 100, "cancelled"),
        order("c", 1, "2026-11-01", "EUR", 900, "placed"),
    ];
    lake.write_hive(&rows, 1);
    let cfg = lake.config();
    let text = std::fs::read_to_string(&cfg).unwrap();
    let start = text.find("[aggregate]").unwrap();
    let end = text.find("[output]").unwrap();
    let agg = r#"[aggregate]
measures = [
  { name = "n",        fn = "count", column = "amount" },
  { name = "smallest", fn = "min", column = "amount" },
  { name = "largest",  fn = "max", column = "amount", where = { status = ["placed"] } },
  { name = "first_id", fn = "min", column = "order_id" },
  { name = "none",     fn = "sum", column = "amount", where = { status = ["refunded"] } },
]
"#;
    std::fs::write(&cfg, format!("{}{agg}\n{}", &text[..start], &text[end..])).unwrap();
    let s = run_range(&cfg, "2026-11-01", "2026-11-01").await;
    assert_eq!(s.exit_code, lakeswap::ExitCode::Ok, "{}", lakeswap::report::table(&s));
    use arrow::array::AsArray;
    let b = read_batch(&lake.partition_file("2026-11-01"));
    assert_eq!(b.num_rows(), 1, "no group-by: one row");
    let dec = |name: &str| b.column_by_name(name).unwrap().as_primitive::<arrow::datatypes::Decimal128Type>().value(0);
    assert_eq!(b.column_by_name("n").unwrap().as_primitive::<arrow::datatypes::Int64Type>().value(0), 3);
    assert_eq!(dec("smallest"), 100);
    assert_eq!(dec("largest"), 900, "the filter applies to max; a's latest version is shipped");
    assert_eq!(b.column_by_name("first_id").unwrap().as_string::<i32>().value(0), "a");
    assert_eq!(dec("none"), 0, "a sum over no rows is 0, not null");
    assert_eq!(b.schema().field_with_name("none").unwrap().data_type(), &arrow::datatypes::DataType::Decimal128(38, 2));
}

/// A null group-by value and an empty one are two groups, not one.
#[tokio::test(flavor = "multi_thread")]
async fn null_and_empty_group_values_are_different_groups() {
    let lake = Lake::new();
    let rows = vec![
        order("a", 1, "2026-11-01", "", 500, "placed"),
        order("b", 1, "2026-11-01", "", 700, "placed"),
        order("c", 1, "2026-11-01", "USD", 100, "placed"),
    ];
    // Row 1 ("b") gets a null currency (column 4).
    write_parquet(&lake.input().join("event_date=2026-11-01/part-0.parquet"), &with_null_at(&batch(&rows), 4, 1));
    let s = run_range(&lake.config(), "2026-11-01", "2026-11-01").await;
    assert_eq!(s.exit_code, lakeswap::ExitCode::Ok, "{}", lakeswap::report::table(&s));
    use arrow::array::{Array, AsArray};
    let b = read_batch(&lake.partition_file("2026-11-01"));
    let (cur, orders) = (b.column(0).as_string::<i32>(), b.column(1).as_primitive::<arrow::datatypes::Int64Type>());
    let groups: Vec<(Option<&str>, i64)> =
        (0..b.num_rows()).map(|i| (cur.is_valid(i).then(|| cur.value(i)), orders.value(i))).collect();
    assert_eq!(groups, [(None, 1), (Some(""), 1), (Some("USD"), 1)]);
}

/// A partition big enough for several threads (the hash pass split by key hash) gives exactly
/// what one thread gives — winners, quarantined rows, counts, key hashes.
#[test]
fn threads_do_not_change_the_result() {
    use lakeswap::prepare::{prepare, Identity};
    use lakeswap::read::{Piece, Table};
    let rows = random_orders(11, 1, 70_000); // 70 k keys, ~190 k rows
                                             // A few conflicts: the same key and version with another amount.
    let conflicting: Vec<Order> = rows.iter().step_by(997).map(|r| Order { cents: r.cents + 1, ..r.clone() }).collect();
    let lake = Lake::new();
    let job = lakeswap::Job::load(&lake.config_with(
        "key = [\"order_id\"]\nversion = \"source_version\"",
        "[prepare]\non_conflict = \"quarantine\"\n",
    ))
    .unwrap();
    let cfg = &job.config;
    let table = |rows: &[Order]| {
        let b = batch(rows);
        let object_rows = lakeswap::read::ObjectRows::Run(0..b.num_rows() as u64);
        let piece = Piece { date: d("2026-11-01"), batch: b, object: "in.parquet".into(), object_rows, lines: None };
        Table::from_pieces(schema(), vec![piece]).unwrap()
    };
    let names: Vec<String> = schema().fields().iter().map(|f| f.name().clone()).collect();
    for (label, input) in [("clean", rows.clone()), ("with conflicts", [rows.clone(), conflicting].concat())] {
        assert!(input.len() > 65_536, "{label}: the rows must be many enough to split");
        let mut results = Vec::new();
        for threads in [1, 2, 3, 4] {
            let id = Identity { threads, ..Identity::from_config(cfg, &names) };
            let p = prepare(table(&input), &id).unwrap();
            results.push((threads, p.winners, p.quarantined, p.stats, p.key_hashes));
        }
        let (_, w1, q1, s1, h1) = &results[0];
        assert!(w1.len() > 65_536, "{label}: the winners must be many enough to split");
        assert!(h1.windows(2).all(|w| w[0] <= w[1]), "{label}: key hashes sorted");
        let keys = input.iter().map(|r| &r.order_id).collect::<std::collections::HashSet<_>>().len();
        assert_eq!(h1.len(), keys, "{label}: one hash per key");
        for (threads, w, q, s, h) in &results[1..] {
            assert_eq!(w, w1, "{label}: winners with {threads} threads");
            assert_eq!(q, q1, "{label}: quarantined rows with {threads} threads");
            assert_eq!(s, s1, "{label}: counts with {threads} threads");
            assert_eq!(h, h1, "{label}: key hashes with {threads} threads");
        }
        if label == "clean" {
            assert_eq!(s1.conflicting_keys, 0);
        } else {
            assert_eq!(s1.conflicting_keys, rows.iter().step_by(997).count() as u64, "{label}");
            assert!(!q1.is_empty(), "{label}: conflicting rows set aside");
        }
    }
}
