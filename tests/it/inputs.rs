//! Risk: inputs as they really arrive are misread — columns taken by position, a date folder
//! hidden by another, timestamps in text unreadable or in the wrong zone, producers upgraded
//! mid-day, a table whose schema changes silently, a flat input that rewrites every date.
//! Every case runs the real binary, on a local folder and (the `s3` suite) on SeaweedFS.

use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::common::backends::{Backend, Kind};
use crate::common::*;
use arrow::array::{Array, ArrayRef, RecordBatch, TimestampMicrosecondArray};
use arrow::datatypes::{DataType, Field, Schema, TimeUnit};
use chrono::{NaiveDateTime, TimeZone};
use std::sync::Arc;

/// A place to run the binary against: input and output on one backend, the config beside.
struct Place {
    b: Backend,
    dir: tempfile::TempDir,
}

impl Place {
    fn new(kind: Kind) -> Place {
        Place { b: Backend::new(kind), dir: tempfile::tempdir().unwrap() }
    }

    async fn put(&self, rel: &str, bytes: Vec<u8>) {
        self.b.put("in", rel, bytes).await;
    }

    /// A job over `in/` with the standard measures; `input` adds lines to `[input]`,
    /// `partition` replaces the `[partition]` section, `timezone` sets the job's zone.
    fn config(&self, format: &str, input: &str, partition: &str, timezone: &str) -> PathBuf {
        self.config_text(format, input, partition, timezone, MEASURES)
    }

    fn config_text(&self, format: &str, input: &str, partition: &str, timezone: &str, aggregate: &str) -> PathBuf {
        if self.b.kind == Kind::Local {
            std::fs::create_dir_all(self.b.url("in")).unwrap();
        }
        let text = format!(
            "[job]\nname = \"t\"\nkind = \"aggregate\"\ntimezone = \"{timezone}\"\n\n[input]\nurl = \"{}\"\nformat = \"{format}\"\n{input}\n\n\
             [identity]\nkey = [\"order_id\"]\nversion = \"source_version\"\n\n{partition}\n{aggregate}\n[output]\nurl = \"{}\"\n",
            self.b.url("in"),
            self.b.url("out")
        );
        let p = self.dir.path().join("job.toml");
        std::fs::write(&p, text).unwrap();
        p
    }

    fn run(&self, cfg: &std::path::Path, args: &[&str]) -> std::process::Output {
        let mut all = vec!["run", "--config", cfg.to_str().unwrap()];
        all.extend_from_slice(args);
        cli(&all, self.dir.path())
    }

    /// The committed partitions, decoded: date to rows.
    async fn tables(&self) -> BTreeMap<String, Vec<OutRow>> {
        self.b.partitions().await.into_iter().map(|(k, v)| (date_of(&k), partition_rows(&v))).collect()
    }
}

fn date_of(key: &str) -> String {
    key.split('=').nth(1).unwrap().split('/').next().unwrap().to_string()
}

fn model_tables(rows: &[Order]) -> BTreeMap<String, Vec<OutRow>> {
    model(rows).into_iter().map(|(d, v)| (d.to_string(), v)).collect()
}

fn code(o: &std::process::Output) -> i32 {
    o.status.code().unwrap_or(-1)
}

const TYPES: &str = "schema = { amount = \"decimal(12,2)\" }";

/// CSV with its columns in the order given (the standard columns plus any extra).
fn csv_in_order(rows: &[Order], order: &[&str]) -> Vec<u8> {
    let mut s = order.join(",") + "\n";
    for r in rows {
        let cells: Vec<String> = order
            .iter()
            .map(|c| match *c {
                "order_id" => r.order_id.clone(),
                "source_version" => r.version.to_string(),
                "event_date" => r.date.to_string(),
                "customer_id" => r.customer.clone(),
                "currency" => r.currency.clone(),
                "amount" => format!("{}.{:02}", r.cents / 100, r.cents % 100),
                "status" => r.status.clone(),
                _ => "extra".to_string(),
            })
            .collect();
        s += &(cells.join(",") + "\n");
    }
    s.into_bytes()
}

// ---------------------------------------------------------------------------------------
// 1. Every object read by column name.

async fn columns_by_name_in_every_format(kind: Kind) {
    let p = Place::new(kind);
    let rows = random_orders(301, 3, 80);
    let day = |n: u32| rows.iter().filter(|r| r.date == d(&format!("2026-11-0{n}"))).cloned().collect::<Vec<_>>();
    // CSV: each object with its own header order, one with an unused extra column.
    let std_order = ["order_id", "source_version", "event_date", "customer_id", "currency", "amount", "status"];
    let shuffled = ["status", "amount", "currency", "customer_id", "event_date", "source_version", "order_id"];
    let extra = ["status", "amount", "note", "currency", "customer_id", "event_date", "source_version", "order_id"];
    let d1 = day(1);
    p.put("event_date=2026-11-01/a.csv", csv_in_order(&d1[..d1.len() / 2], &std_order)).await;
    p.put("event_date=2026-11-01/b.csv", csv_in_order(&d1[d1.len() / 2..], &shuffled)).await;
    p.put("event_date=2026-11-02/a.csv", csv_in_order(&day(2), &extra)).await;
    p.put("event_date=2026-11-03/a.csv.gz", gzip(&csv_in_order(&day(3), &std_order))).await;
    let cfg = p.config("csv", TYPES, "", "UTC");
    let o = p.run(&cfg, &["--from", "2026-11-01", "--to", "2026-11-03"]);
    assert_eq!(code(&o), 0, "{}", text(&o));
    assert_eq!(p.tables().await, model_tables(&rows));

    // Parquet: currency and customer_id swapped in one object (same types: a positional read
    // would give currency groups named like customers).
    let q = Place::new(kind);
    let b = batch(&d1);
    let swapped = b.project(&[0, 1, 2, 4, 3, 5, 6]).unwrap();
    q.put("event_date=2026-11-01/a.parquet", parquet_bytes(&b.slice(0, 10))).await;
    q.put("event_date=2026-11-01/b.parquet", parquet_bytes(&swapped.slice(10, b.num_rows() - 10))).await;
    let cfg = q.config("parquet", "", "", "UTC");
    let o = q.run(&cfg, &["--date", "2026-11-01"]);
    assert_eq!(code(&o), 0, "{}", text(&o));
    assert_eq!(q.tables().await["2026-11-01"], model(&d1)[&d("2026-11-01")]);

    // NDJSON: fields in any order, zstd-compressed.
    let r = Place::new(kind);
    r.put("event_date=2026-11-02/a.json.zst", zstd::encode_all(&ndjson_bytes(&day(2))[..], 3).unwrap()).await;
    let cfg = r.config("ndjson", TYPES, "", "UTC");
    let o = r.run(&cfg, &["--date", "2026-11-02"]);
    assert_eq!(code(&o), 0, "{}", text(&o));
    assert_eq!(r.tables().await["2026-11-02"], model(&day(2))[&d("2026-11-02")]);
}

fn gzip(b: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(b).unwrap();
    e.finish().unwrap()
}

async fn a_missing_column_names_the_column_and_the_object(kind: Kind) {
    let p = Place::new(kind);
    let rows = random_orders(302, 2, 30);
    let day1: Vec<Order> = rows.iter().filter(|r| r.date == d("2026-11-01")).cloned().collect();
    let day2: Vec<Order> = rows.iter().filter(|r| r.date == d("2026-11-02")).cloned().collect();
    p.put(
        "event_date=2026-11-01/a.csv",
        csv_in_order(
            &day1,
            &["order_id", "source_version", "event_date", "customer_id", "currency", "amount", "status"],
        ),
    )
    .await;
    // No `status` column (the measures filter on it).
    p.put(
        "event_date=2026-11-02/a.csv",
        csv_in_order(&day2, &["order_id", "source_version", "event_date", "customer_id", "currency", "amount"]),
    )
    .await;
    let cfg = p.config("csv", TYPES, "", "UTC");
    let o = p.run(&cfg, &["--from", "2026-11-01", "--to", "2026-11-02"]);
    assert_eq!(code(&o), 3, "{}", text(&o));
    let t = text(&o);
    assert!(t.contains("event_date=2026-11-02/a.csv, column `status`") && t.contains("missing column"), "{t}");
    assert_eq!(p.tables().await.keys().collect::<Vec<_>>(), ["2026-11-01"], "the good date still commits");
}

// ---------------------------------------------------------------------------------------
// 2. What is listed is what is meant.

async fn date_folders_spelled_two_ways_are_both_read(kind: Kind) {
    let p = Place::new(kind);
    let rows = random_orders(303, 1, 200);
    let n = rows.len();
    p.put("event_date=2026-11-01/a.parquet", parquet_bytes(&batch(&rows[..n - 5]))).await;
    p.put("event_date=2026-11-1/b.parquet", parquet_bytes(&batch(&rows[n - 5..]))).await;
    let cfg = p.config("parquet", "", "", "UTC");
    let o = p.run(&cfg, &["--date", "2026-11-01"]);
    assert_eq!(code(&o), 0, "{}", text(&o));
    assert!(text(&o).contains(&format!("created  {n:>10}")), "every row of both folders is read: {}", text(&o));
    assert_eq!(p.tables().await, model_tables(&rows));
    // A date folder inside a date folder: its rows were counted for the outer date.
    p.put("event_date=2026-11-01/event_date=2026-11-02/c.parquet", parquet_bytes(&batch(&rows[..1]))).await;
    let o = p.run(&cfg, &["--date", "2026-11-01"]);
    assert_eq!(code(&o), 3, "{}", text(&o));
    let t = text(&o);
    assert!(
        t.contains("event_date=2026-11-01/event_date=2026-11-02/c.parquet") && t.contains("inside the date folder"),
        "{t}"
    );
    assert_eq!(p.tables().await, model_tables(&rows), "the committed date is untouched");
    // A folder that is not a date, or an object beside the date folders, is refused by name.
    p.put("event_date=2026-11-31/c.parquet", parquet_bytes(&batch(&rows[..1]))).await;
    p.put("stray.parquet", parquet_bytes(&batch(&rows[..1]))).await;
    let o = p.run(&cfg, &["--date", "2026-11-01"]);
    assert_eq!(code(&o), 3, "{}", text(&o));
    let t = text(&o);
    assert!(t.contains("event_date=2026-11-31/ (`2026-11-31` is not a date") && t.contains("stray.parquet"), "{t}");
    // With no date folder at all, and no date column in the objects, the error names the
    // folders that meant to be date folders, not only the config key.
    let q = Place::new(kind);
    let order = ["order_id", "source_version", "customer_id", "currency", "amount", "status"];
    q.put("event_date=Nov-01/a.csv", csv_in_order(&rows, &order)).await;
    let o = q.run(&q.config("csv", TYPES, "", "UTC"), &["--date", "2026-11-01"]);
    assert_eq!(code(&o), 2, "{}", text(&o));
    let t = text(&o);
    assert!(t.contains("partition.column") && t.contains("event_date=Nov-01/ (`Nov-01` is not a date"), "{t}");
}

#[test]
fn a_dangling_symlink_is_an_error_naming_it() {
    let lake = Lake::new();
    lake.write_hive(&random_orders(304, 1, 20), 1);
    let link = lake.input().join("event_date=2026-11-01/part-00009.parquet");
    std::os::unix::fs::symlink(lake.dir.path().join("gone.parquet"), &link).unwrap();
    let o = cli(&["run", "--config", lake.config().to_str().unwrap(), "--date", "2026-11-01"], lake.dir.path());
    assert_eq!(code(&o), 1, "{}", text(&o));
    assert!(text(&o).contains("part-00009.parquet") && text(&o).contains("dangling symbolic link"), "{}", text(&o));
    assert!(!lake.partition_file("2026-11-01").exists());
}

#[test]
fn an_output_inside_the_input_is_refused() {
    let lake = Lake::new();
    lake.write_hive(&random_orders(305, 1, 20), 1);
    for (input, output) in [(lake.input(), lake.input().join("out")), (lake.input().join("x/.."), lake.input())] {
        let cfg = lake.config();
        let t = std::fs::read_to_string(&cfg)
            .unwrap()
            .replace(&format!("url = \"{}\"", lake.input().display()), &format!("url = \"{}\"", input.display()))
            .replace(&format!("url = \"{}\"", lake.output().display()), &format!("url = \"{}\"", output.display()));
        std::fs::write(&cfg, t).unwrap();
        let o = cli(&["run", "--config", cfg.to_str().unwrap(), "--date", "2026-11-01"], lake.dir.path());
        assert_eq!(code(&o), 2, "{}", text(&o));
        assert!(text(&o).contains("output.url") && text(&o).contains("inside one another"), "{}", text(&o));
    }
    assert!(!lake.input().join("out").exists());
}

/// An input or lookup URL naming one object on an object store, not a folder: listed as a
/// folder it held nothing, and every date failed with "no input rows" (exit 1), a lookup with
/// "no objects" — a local file is refused as one. Refused alike (exit 2), naming the key.
#[test]
#[ignore = "needs the S3 server that scripts/test starts (not requested)"]
fn s3_a_url_naming_an_object_is_refused() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let p = Place::new(Kind::S3);
    let rows = random_orders(307, 1, 50);
    rt.block_on(p.b.write_input(&rows, 1));
    let object = format!("{}/event_date=2026-11-01/part-00000.parquet", p.b.url("in"));
    let cfg = p.config("parquet", "", "", "UTC");
    let written = std::fs::read_to_string(&cfg).unwrap();
    std::fs::write(&cfg, written.replacen(&format!("url = \"{}\"", p.b.url("in")), &format!("url = \"{object}\""), 1))
        .unwrap();
    let o = p.run(&cfg, &["--date", "2026-11-01"]);
    assert_eq!(code(&o), 2, "{}", text(&o));
    assert!(text(&o).contains("input.url") && text(&o).contains("is an object, not a folder"), "{}", text(&o));
    let lookup = format!(
        "[aggregate]\nsql = \"SELECT count(*) AS n FROM events JOIN fx USING (order_id)\"\n\n\
         [[aggregate.tables]]\nname = \"fx\"\nurl = \"{object}\"\nformat = \"parquet\"\n"
    );
    let cfg = p.config_text("parquet", "", "", "UTC", &lookup);
    let o = p.run(&cfg, &["--date", "2026-11-01"]);
    assert_eq!(code(&o), 2, "{}", text(&o));
    assert!(
        text(&o).contains("aggregate.tables[0].url") && text(&o).contains("is an object, not a folder"),
        "{}",
        text(&o)
    );
    // Its folder is read as ever.
    let o = p.run(&p.config("parquet", "", "", "UTC"), &["--date", "2026-11-01"]);
    assert_eq!(code(&o), 0, "{}", text(&o));
    assert_eq!(rt.block_on(p.tables()), model_tables(&rows));
}

/// S3 folder markers (`key/`, zero bytes, as the AWS console and pyarrow make them) beside the
/// data: not data.
#[test]
#[ignore = "needs the S3 server that scripts/test starts (not requested)"]
fn s3_folder_markers_are_not_data() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let p = Place::new(Kind::S3);
    let rows = random_orders(306, 1, 50);
    rt.block_on(p.b.write_input(&rows, 2));
    let prefix = p.b.url("in").trim_start_matches("s3://").split_once('/').unwrap().1.to_string();
    let admin = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/store_admin.py");
    // The marker of an empty folder inside a date folder (the S3 console's "Create folder"):
    // listed without its `/`, it named no object, and the date failed on it for good (exit 1).
    for key in [
        format!("{prefix}/"),
        format!("{prefix}/event_date=2026-11-01/"),
        format!("{prefix}/event_date=2026-11-02/"),
        format!("{prefix}/event_date=2026-11-01/sub/"),
    ] {
        let o = std::process::Command::new("python3").arg(&admin).args(["put-s3-marker", &key]).output().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    let cfg = p.config("parquet", "", "", "UTC");
    let o = p.run(&cfg, &["--date", "2026-11-01"]);
    assert_eq!(code(&o), 0, "{}", text(&o));
    assert_eq!(rt.block_on(p.tables()), model_tables(&rows));
    // A marker of the committed partition's folder, or of an empty folder in it or beside it,
    // is no foreign object or stray: a re-run keeps the file, `status` lists nothing foreign,
    // `verify` passes (an empty folder made in the S3 console failed the date, exit 1).
    let out = p.b.url("out").trim_start_matches("s3://").split_once('/').unwrap().1.to_string();
    for key in
        [format!("{out}/event_date=2026-11-01/"), format!("{out}/event_date=2026-11-01/sub/"), format!("{out}/x/")]
    {
        let o = std::process::Command::new("python3").arg(&admin).args(["put-s3-marker", &key]).output().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    let o = p.run(&cfg, &["--date", "2026-11-01"]);
    assert_eq!(code(&o), 0, "{}", text(&o));
    assert!(text(&o).contains("unchanged"), "{}", text(&o));
    let o = cli(&["status", "--config", cfg.to_str().unwrap()], p.dir.path());
    assert!(o.status.success() && !text(&o).contains("foreign"), "{}", text(&o));
    let o = cli(&["verify", "--config", cfg.to_str().unwrap(), "--date", "2026-11-01"], p.dir.path());
    assert_eq!(code(&o), 0, "{}", text(&o));
    // The marker of a date without data is that date's folder, not data in it.
    let o = p.run(&cfg, &["--date", "2026-11-02"]);
    assert_eq!(code(&o), 1, "{}", text(&o));
    assert!(text(&o).contains("no input rows for 2026-11-02"), "{}", text(&o));
    // `gc` lists no marker as "not mine": of the table, of an empty partition folder, of a
    // folder of the state location. A zero-byte object that is not a folder's is listed.
    let state = out.rsplit_once('/').map(|(parent, name)| format!("{parent}/_lakeswap/{name}")).unwrap();
    for key in [
        format!("{out}/"),
        format!("{out}/event_date=2026-11-09/"),
        format!("{out}/empty.txt"),
        format!("{state}/"),
        format!("{state}/runs/"),
    ] {
        let o = std::process::Command::new("python3").arg(&admin).args(["put-s3-marker", &key]).output().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    let o = cli(&["gc", "--config", cfg.to_str().unwrap()], p.dir.path());
    assert!(o.status.success(), "{}", text(&o));
    let said = text(&o);
    let listed: Vec<&str> = said.lines().filter(|l| l.contains("s3://")).map(str::trim).collect();
    assert_eq!(listed, [format!("{}/empty.txt", p.b.url("out"))], "{said}");
    // `status` lists the zero-byte object as a stray, and no marker (the table's own was one
    // with an empty name).
    let o = cli(&["status", "--config", cfg.to_str().unwrap(), "--json"], p.dir.path());
    assert!(o.status.success(), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["strays"], serde_json::json!(["empty.txt"]), "{}", text(&o));
}

/// Risk: a date folder holding `region=eu/` and `region=us/` folders, read with no `region`
/// column: rows alike in both taken for exact duplicates and one dropped (exit 0, the count
/// and sum short). Refused by name in a Hive and a flat layout; read when the config says the
/// folders' values are not data.
#[test]
fn folders_named_by_value_below_the_date_are_refused_unless_their_values_are_not_data() {
    let lake = Lake::new();
    let rows = random_orders(307, 1, 10);
    for region in ["eu", "us"] {
        write_parquet(&lake.input().join(format!("event_date=2026-11-01/region={region}/a.parquet")), &batch(&rows));
    }
    let cfg = lake.config();
    let o = cli(&["run", "--config", cfg.to_str().unwrap(), "--date", "2026-11-01"], lake.dir.path());
    assert_eq!(code(&o), 3, "{}", text(&o));
    let t = text(&o);
    assert!(t.contains("region=eu/a.parquet") && t.contains("`region=eu/`"), "{t}");
    assert!(t.contains("ignore_folder_values"), "{t}");
    assert!(!lake.output().exists());
    // The same objects in a flat input.
    let flat = Lake::new();
    for region in ["eu", "us"] {
        write_parquet(&flat.input().join(format!("region={region}/a.parquet")), &batch(&rows));
    }
    let o = cli(&["run", "--config", flat.config().to_str().unwrap(), "--date", "2026-11-01"], flat.dir.path());
    assert_eq!(code(&o), 3, "{}", text(&o));
    assert!(text(&o).contains("`region=eu/`"), "{}", text(&o));
    // Redeliveries under landing dates: the same rows twice are one delivery too many.
    let t = std::fs::read_to_string(&cfg)
        .unwrap()
        .replace("format = \"parquet\"", "format = \"parquet\"\nignore_folder_values = true");
    std::fs::write(&cfg, t).unwrap();
    let o = cli(&["run", "--config", cfg.to_str().unwrap(), "--date", "2026-11-01"], lake.dir.path());
    assert_eq!(code(&o), 0, "{}", text(&o));
    assert_eq!(read_partition(&lake.partition_file("2026-11-01")), model(&rows)[&d("2026-11-01")]);
}

/// Risk: an input folder a scheduler's variable names before its data lands (`raw/${DS}`)
/// was a config error (exit 2, never retried), where an empty one was input not arrived
/// (exit 1); and a flat CSV input holding a header alone was "no column event_date" (exit 2).
#[test]
fn input_not_arrived_is_a_retry_whether_its_folder_is_missing_or_holds_a_header_alone_and_status_needs_none() {
    let lake = Lake::new();
    std::fs::remove_dir_all(lake.input()).unwrap();
    let cfg = lake.config();
    let o = cli(&["run", "--config", cfg.to_str().unwrap(), "--date", "2026-11-01"], lake.dir.path());
    assert_eq!(code(&o), 1, "{}", text(&o));
    assert!(text(&o).contains("does not exist (yet)"), "{}", text(&o));
    // What reads or tidies the table alone needs no input (`status` was exit 1 here).
    for args in [&["status"][..], &["gc"], &["gc", "--dry-run"]] {
        let o = cli(&[args, &["--config", cfg.to_str().unwrap()]].concat(), lake.dir.path());
        assert_eq!(code(&o), 0, "{args:?}: {}", text(&o));
    }
    assert!(!lake.input().exists(), "status and gc made the input folder");
    std::fs::create_dir_all(lake.input()).unwrap();
    std::fs::write(
        lake.input().join("f1.csv"),
        "order_id,source_version,event_date,customer_id,currency,amount,status\n",
    )
    .unwrap();
    let t =
        std::fs::read_to_string(&cfg).unwrap().replace("format = \"parquet\"", &format!("format = \"csv\"\n{TYPES}"));
    std::fs::write(&cfg, t).unwrap();
    let o = cli(&["run", "--config", cfg.to_str().unwrap(), "--date", "2026-11-01"], lake.dir.path());
    assert_eq!(code(&o), 1, "{}", text(&o));
    assert!(text(&o).contains("no input rows for 2026-11-01"), "{}", text(&o));
    // No row anywhere: no type to write even a zero-row file with (was exit 3, "bad input at ,
    // column `order_id`: missing key column").
    let o = cli(&["run", "--config", cfg.to_str().unwrap(), "--date", "2026-11-01", "--allow-empty"], lake.dir.path());
    assert_eq!(code(&o), 1, "{}", text(&o));
    assert!(text(&o).contains("no object of the input has a row"), "{}", text(&o));
    assert!(!lake.output().join("event_date=2026-11-01").exists());
}

// ---------------------------------------------------------------------------------------
// 3. Timestamps in text, and wall-clock time in the job's zone.

/// Order events with an instant `ts` around New York's change from EDT to EST (2026-11-01
/// 06:00Z), dated by their local date there.
fn timed_orders() -> Vec<(Order, NaiveDateTime)> {
    use rand::{Rng, SeedableRng};
    let ny: chrono_tz::Tz = "America/New_York".parse().unwrap();
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(307);
    let start = NaiveDateTime::parse_from_str("2026-10-31 18:00:00", "%Y-%m-%d %H:%M:%S").unwrap();
    let mut out = Vec::new();
    let salt: u64 = rng.random_range(0..1000);
    for mut r in random_orders(307, 1, 300) {
        // Every version of an order gets the same instant: its date is a property of the order.
        let key: u64 = r.order_id.bytes().enumerate().map(|(i, b)| (i as u64 + 1) * u64::from(b)).sum::<u64>() + salt;
        let ts = start + chrono::Duration::minutes(((key * 7919) % (60 * 40)) as i64);
        r.date = ny.from_utc_datetime(&ts).date_naive();
        out.push((r, ts));
    }
    out
}

/// The columns of `timed_orders`, `ts` instead of `event_date`.
fn timed_schema(ts: DataType) -> Arc<Schema> {
    Arc::new(Schema::new(vec![
        Field::new("order_id", DataType::Utf8, true),
        Field::new("source_version", DataType::Int64, true),
        Field::new("ts", ts, true),
        Field::new("customer_id", DataType::Utf8, true),
        Field::new("currency", DataType::Utf8, true),
        Field::new("amount", DataType::Decimal128(12, 2), true),
        Field::new("status", DataType::Utf8, true),
    ]))
}

fn timed_parquet(rows: &[(Order, NaiveDateTime)], wall_clock_in: Option<chrono_tz::Tz>) -> Vec<u8> {
    let plain: Vec<Order> = rows.iter().map(|(r, _)| r.clone()).collect();
    let b = batch(&plain);
    let (values, ty): (Vec<i64>, DataType) = match wall_clock_in {
        None => (
            rows.iter().map(|(_, t)| t.and_utc().timestamp_micros()).collect(),
            DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
        ),
        Some(tz) => (
            rows.iter().map(|(_, t)| tz.from_utc_datetime(t).naive_local().and_utc().timestamp_micros()).collect(),
            DataType::Timestamp(TimeUnit::Microsecond, None),
        ),
    };
    let ts: ArrayRef = Arc::new(TimestampMicrosecondArray::from(values).with_data_type(ty.clone()));
    let mut cols = b.columns().to_vec();
    cols[2] = ts;
    parquet_bytes(&RecordBatch::try_new(timed_schema(ty), cols).unwrap())
}

/// `ts` as text: with `Z`, with New York's offset, or as New York wall-clock time.
fn ts_text(t: &NaiveDateTime, how: u64) -> String {
    let ny: chrono_tz::Tz = "America/New_York".parse().unwrap();
    match how % 3 {
        0 => t.format("%Y-%m-%dT%H:%M:%SZ").to_string(),
        1 => ny.from_utc_datetime(t).format("%Y-%m-%dT%H:%M:%S%:z").to_string(),
        _ => ny.from_utc_datetime(t).naive_local().format("%Y-%m-%d %H:%M:%S").to_string(),
    }
}

fn timed_text(rows: &[(Order, NaiveDateTime)], json: bool) -> Vec<u8> {
    let mut s =
        if json { String::new() } else { "order_id,source_version,ts,customer_id,currency,amount,status\n".into() };
    for (r, t) in rows {
        let ts = ts_text(t, r.version as u64 + r.order_id.len() as u64);
        let amount = format!("{}.{:02}", r.cents / 100, r.cents % 100);
        if json {
            s += &format!(
                "{{\"ts\":\"{ts}\",\"order_id\":\"{}\",\"source_version\":{},\"customer_id\":\"{}\",\"currency\":\"{}\",\"amount\":{amount},\"status\":\"{}\"}}\n",
                r.order_id, r.version, r.customer, r.currency, r.status
            );
        } else {
            s += &format!("{},{},{ts},{},{},{amount},{}\n", r.order_id, r.version, r.customer, r.currency, r.status);
        }
    }
    s.into_bytes()
}

async fn timestamps_give_the_same_dates_in_every_format(kind: Kind) {
    let rows = timed_orders();
    let plain: Vec<Order> = rows.iter().map(|(r, _)| r.clone()).collect();
    let want = model_tables(&plain);
    assert!(want.len() >= 2, "the events straddle local midnight");
    let ny: chrono_tz::Tz = "America/New_York".parse().unwrap();
    let partition = "[partition]\nfrom_timestamp = \"ts\"\n";
    let half = rows.len() / 2;
    type Objects<'a> = Vec<(&'a str, Vec<u8>)>;
    let cases: Vec<(&str, &str, Objects)> = vec![
        ("parquet", "", vec![("a.parquet", timed_parquet(&rows, None))]),
        // Wall-clock time in Parquet (no zone) belongs to the job's zone.
        ("parquet", "", vec![("a.parquet", timed_parquet(&rows, Some(ny)))]),
        // Text, declared `timestamp`, in two objects.
        (
            "csv",
            "schema = { amount = \"decimal(12,2)\", ts = \"timestamp\" }",
            vec![("a.csv", timed_text(&rows[..half], false)), ("b.csv", timed_text(&rows[half..], false))],
        ),
        // Text, the type implied by from_timestamp.
        ("ndjson", TYPES, vec![("a.json", timed_text(&rows, true))]),
        (
            "ndjson",
            "schema = { amount = \"decimal(12,2)\", ts = \"timestamp\" }",
            vec![("a.json.gz", gzip(&timed_text(&rows, true)))],
        ),
    ];
    for (format, types, objects) in cases {
        let p = Place::new(kind);
        for (name, bytes) in objects {
            p.put(name, bytes).await;
        }
        let cfg = p.config(format, types, partition, "America/New_York");
        let o = p.run(&cfg, &["--from", "2026-10-30", "--to", "2026-11-03", "--allow-empty"]);
        assert_eq!(code(&o), 0, "{format}: {}", text(&o));
        let got: BTreeMap<String, Vec<OutRow>> = p.tables().await.into_iter().filter(|(_, v)| !v.is_empty()).collect();
        assert_eq!(got, want, "{format} {types}");
    }
}

async fn epoch_values_when_declared_and_bad_timestamps_named(kind: Kind) {
    let rows = timed_orders();
    let plain: Vec<Order> = rows.iter().map(|(r, _)| r.clone()).collect();
    let p = Place::new(kind);
    let mut s = String::new();
    for (r, t) in &rows {
        s += &format!(
            "{{\"order_id\":\"{}\",\"source_version\":{},\"ts\":{},\"customer_id\":\"{}\",\"currency\":\"{}\",\"amount\":\"{}.{:02}\",\"status\":\"{}\"}}\n",
            r.order_id, r.version, t.and_utc().timestamp_millis(), r.customer, r.currency, r.cents / 100, r.cents % 100, r.status
        );
    }
    p.put("a.json", s.into_bytes()).await;
    let partition = "[partition]\nfrom_timestamp = \"ts\"\n";
    let cfg = p.config(
        "ndjson",
        "schema = { amount = \"decimal(12,2)\", ts = \"timestamp(ms)\" }",
        partition,
        "America/New_York",
    );
    let o = p.run(&cfg, &["--from", "2026-10-31", "--to", "2026-11-02"]);
    assert_eq!(code(&o), 0, "{}", text(&o));
    assert_eq!(p.tables().await, model_tables(&plain));
    // Without a unit, a number is refused with the reason; a value that is not a timestamp names
    // object, row, line and column (exit 3).
    let cfg = p.config(
        "ndjson",
        "schema = { amount = \"decimal(12,2)\", ts = \"timestamp\" }",
        partition,
        "America/New_York",
    );
    let o = p.run(&cfg, &["--from", "2026-10-31", "--to", "2026-11-01"]);
    assert_eq!(code(&o), 3, "{}", text(&o));
    assert!(
        text(&o).contains("a.json, row 0 (line 1), column `ts`") && text(&o).contains("timestamp(ms)"),
        "{}",
        text(&o)
    );
    let q = Place::new(kind);
    let mut csv = timed_text(&rows[..3], false);
    csv.extend_from_slice(b"x1,1,2026-11-01T25:00:00Z,c,USD,1.00,placed\n");
    q.put("a.csv", csv).await;
    let cfg = q.config("csv", TYPES, partition, "America/New_York");
    let o = q.run(&cfg, &["--from", "2026-10-31", "--to", "2026-11-01"]);
    assert_eq!(code(&o), 3, "{}", text(&o));
    assert!(
        text(&o).contains("a.csv, row 3 (line 5), column `ts`") && text(&o).contains("not a timestamp"),
        "{}",
        text(&o)
    );
}

// ---------------------------------------------------------------------------------------
// 4. Schema drift, by the written rule.

async fn drift_within_a_date_is_unified(kind: Kind) {
    let p = Place::new(kind);
    let rows = random_orders(308, 4, 60);
    let day = |n: u32| rows.iter().filter(|r| r.date == d(&format!("2026-11-0{n}"))).cloned().collect::<Vec<_>>();
    // 11-01: the producer is upgraded mid-day — source_version int32 then int64, amount
    // decimal(12,2) then decimal(14,2); one row sits in both objects (an exact duplicate,
    // judged on the unified values).
    let d1 = day(1);
    let old = recast(&batch(&d1[..30]), 1, DataType::Int32);
    let new = recast(&batch(&d1[29..]), 5, DataType::Decimal128(14, 2));
    p.put("event_date=2026-11-01/a.parquet", parquet_bytes(&old)).await;
    p.put("event_date=2026-11-01/b.parquet", parquet_bytes(&new)).await;
    // 11-02: a string where a number was: that date fails, naming both.
    let d2 = day(2);
    p.put("event_date=2026-11-02/a.parquet", parquet_bytes(&batch(&d2[..10]))).await;
    p.put("event_date=2026-11-02/b.parquet", parquet_bytes(&recast(&batch(&d2[10..]), 5, DataType::Utf8))).await;
    p.put("event_date=2026-11-03/a.parquet", parquet_bytes(&batch(&day(3)))).await;
    // 11-04: amounts with three decimals: the revenue column would be decimal(38,3) where the
    // table's is decimal(38,2) — that date fails rather than mix two schemas in one table.
    p.put("event_date=2026-11-04/a.parquet", parquet_bytes(&recast(&batch(&day(4)), 5, DataType::Decimal128(12, 3))))
        .await;
    let cfg = p.config("parquet", "", "", "UTC");
    let o = p.run(&cfg, &["--from", "2026-11-01", "--to", "2026-11-04"]);
    assert_eq!(code(&o), 3, "{}", text(&o));
    let t = text(&o);
    assert!(
        t.contains("column `amount` cannot be unified: Decimal128(12, 2) in")
            && t.contains("event_date=2026-11-02/a.parquet")
            && t.contains("Utf8 in")
            && t.contains("event_date=2026-11-02/b.parquet"),
        "{t}"
    );
    assert!(
        t.contains("error: 2026-11-04") && t.contains("`revenue` is Decimal128(38, 2) in the table, Decimal128(38, 3)"),
        "{t}"
    );
    let got = p.tables().await;
    let want = model_tables(&rows);
    assert_eq!(got.keys().collect::<Vec<_>>(), ["2026-11-01", "2026-11-03"]);
    assert_eq!(got["2026-11-01"], want["2026-11-01"]);
    assert_eq!(got["2026-11-03"], want["2026-11-03"]);
    let t = text(&o);
    let dup = t.lines().find(|l| l.starts_with("2026-11-01")).unwrap().split_whitespace().nth(3).unwrap().to_string();
    let base_dups = {
        let mut seen = std::collections::HashSet::new();
        d1.iter().filter(|r| !seen.insert((*r).clone())).count()
    };
    assert_eq!(dup, (base_dups + 1).to_string(), "the row in both objects is an exact duplicate");
}

// ---------------------------------------------------------------------------------------
// 5. Output schema changes are deliberate.

async fn a_schema_change_is_refused_then_rebuilt(kind: Kind) {
    let p = Place::new(kind);
    p.b.write_input(&random_orders(309, 3, 40), 1).await;
    let cfg = p.config("parquet", "", "", "UTC");
    let o = p.run(&cfg, &["--from", "2026-11-01", "--to", "2026-11-03"]);
    assert_eq!(code(&o), 0, "{}", text(&o));
    let before = p.b.partitions().await;
    let wider = MEASURES.replace("group_by = [\"currency\"]", "group_by = [\"currency\", \"status\"]");
    let cfg = p.config_text("parquet", "", "", "UTC", &wider);
    let o = p.run(&cfg, &["--date", "2026-11-02"]);
    assert_eq!(code(&o), 2, "{}", text(&o));
    assert!(
        text(&o).contains("column `status` (Utf8) added") && text(&o).contains("--schema-change rebuild"),
        "{}",
        text(&o)
    );
    assert_eq!(p.b.partitions().await, before, "nothing done");
    // A rebuild must cover every committed partition.
    let o = p.run(&cfg, &["--date", "2026-11-02", "--schema-change", "rebuild"]);
    assert_eq!(code(&o), 2, "{}", text(&o));
    assert!(
        text(&o).contains("2 of them are outside") && text(&o).contains("2026-11-01 to 2026-11-03"),
        "{}",
        text(&o)
    );
    let o = p.run(&cfg, &["--from", "2026-11-01", "--to", "2026-11-03", "--schema-change", "rebuild"]);
    assert_eq!(code(&o), 0, "{}", text(&o));
    let after = p.b.partitions().await;
    assert!(after.iter().all(|(k, v)| before[k] != *v), "every partition rewritten");
    let st = cli(&["status", "--config", cfg.to_str().unwrap()], p.dir.path());
    assert!(!text(&st).contains("older schema"), "{}", text(&st));
    // Back to the old config: refused again, and status shows which partitions a partial
    // rebuild left under the older schema.
    let old_cfg = p.config("parquet", "", "", "UTC");
    let o = p.run(&old_cfg, &["--date", "2026-11-01"]);
    assert_eq!(code(&o), 2, "{}", text(&o));
    let o = p.run(&old_cfg, &["--from", "2026-11-01", "--to", "2026-11-03", "--schema-change", "rebuild"]);
    assert_eq!(code(&o), 0, "{}", text(&o));
    let cfg = p.config_text("parquet", "", "", "UTC", &wider);
    p.b.delete("in", "event_date=2026-11-03/part-00000.parquet").await;
    let o = p.run(&cfg, &["--from", "2026-11-01", "--to", "2026-11-03", "--schema-change", "rebuild"]);
    assert_eq!(code(&o), 1, "11-03 has no input: {}", text(&o));
    let st = cli(&["status", "--config", cfg.to_str().unwrap()], p.dir.path());
    let st = text(&st);
    let older: Vec<&str> = st.lines().filter(|l| l.contains("older schema")).collect();
    assert_eq!(older.len(), 1, "{st}");
    assert!(older[0].contains("2026-11-03"), "{st}");
}

/// A merged table is rebuilt from its stored state: an added column is null in the rows
/// stored before it existed.
async fn a_merged_table_is_rebuilt_under_a_new_schema(kind: Kind) {
    let p = Place::new(kind);
    let rows =
        vec![order("a", 1, "2026-11-01", "USD", 100, "placed"), order("b", 1, "2026-11-02", "EUR", 200, "placed")];
    p.b.put("b1", "x.parquet", parquet_bytes(&batch(&rows))).await;
    let merge_cfg = |batch: &str| {
        if kind == Kind::Local {
            std::fs::create_dir_all(p.b.url(batch)).unwrap();
        }
        let text = format!(
            "[job]\nname = \"m\"\nkind = \"merge\"\n[input]\nurl = \"{}\"\nformat = \"parquet\"\n\
             [identity]\nkey = [\"order_id\"]\nversion = \"source_version\"\n[output]\nurl = \"{}\"\n",
            p.b.url(batch),
            p.b.url("out")
        );
        let path = p.dir.path().join(format!("{batch}.toml"));
        std::fs::write(&path, text).unwrap();
        path
    };
    let o = p.run(&merge_cfg("b1"), &[]);
    assert_eq!(code(&o), 0, "{}", text(&o));
    // The producer adds a column `channel`.
    let newer = batch(&[order("a", 2, "2026-11-01", "USD", 150, "shipped")]);
    let channel: ArrayRef = Arc::new(arrow::array::StringArray::from(vec!["web"]));
    let mut fields: Vec<Field> = newer.schema().fields().iter().map(|f| f.as_ref().clone()).collect();
    fields.push(Field::new("channel", DataType::Utf8, true));
    let mut cols = newer.columns().to_vec();
    cols.push(channel);
    let with_channel = RecordBatch::try_new(Arc::new(Schema::new(fields)), cols).unwrap();
    p.b.put("b2", "x.parquet", parquet_bytes(&with_channel)).await;
    let before = p.b.partitions().await;
    let o = p.run(&merge_cfg("b2"), &[]);
    assert_eq!(code(&o), 2, "{}", text(&o));
    assert!(text(&o).contains("column `channel` (Utf8) added"), "{}", text(&o));
    assert_eq!(p.b.partitions().await, before);
    let o = p.run(&merge_cfg("b2"), &["--schema-change", "rebuild"]);
    assert_eq!(code(&o), 0, "{}", text(&o));
    for (k, v) in p.b.partitions().await {
        let b = read_batch_bytes(&v);
        let ch = b.column_by_name("channel").unwrap_or_else(|| panic!("{k} has the new column"));
        let ids = b.column_by_name("order_id").unwrap();
        let ids = arrow::array::AsArray::as_string::<i32>(ids);
        let ch = arrow::array::AsArray::as_string::<i32>(ch);
        for i in 0..b.num_rows() {
            let want = if ids.value(i) == "a" { Some("web") } else { None };
            assert_eq!(ch.is_valid(i).then(|| ch.value(i)), want, "{k}");
        }
    }
}

fn read_batch_bytes(bytes: &[u8]) -> RecordBatch {
    let r = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(bytes::Bytes::from(bytes.to_vec()))
        .unwrap()
        .build()
        .unwrap();
    r.map(|b| b.unwrap()).next().unwrap()
}

// ---------------------------------------------------------------------------------------
// 6. Flat input: per-date lineage, and a bad row fails only its date.

async fn flat_input_lineage_is_per_date(kind: Kind) {
    for format in ["parquet", "csv"] {
        let p = Place::new(kind);
        let rows = random_orders(310, 3, 50);
        let ext = if format == "csv" { "csv" } else { "parquet" };
        let encode = |rows: &[Order]| if format == "csv" { csv_bytes(rows) } else { parquet_bytes(&batch(rows)) };
        for n in 1..=3u32 {
            let day: Vec<Order> = rows.iter().filter(|r| r.date == d(&format!("2026-11-0{n}"))).cloned().collect();
            p.put(&format!("batch-{n}.{ext}"), encode(&day)).await;
        }
        let types = if format == "csv" { "schema = { amount = \"decimal(12,2)\", event_date = \"date\" }" } else { "" };
        let cfg = p.config(format, types, "", "UTC");
        let o = p.run(&cfg, &["--from", "2026-11-01", "--to", "2026-11-03", "--skip-unchanged"]);
        assert_eq!(code(&o), 0, "{}", text(&o));
        // A late object with rows of 11-02 only.
        let mut late = rows.iter().find(|r| r.date == d("2026-11-02")).unwrap().clone();
        late.version = 77;
        late.cents += 1;
        p.put(&format!("late.{ext}"), encode(&[late.clone()])).await;
        let o = p.run(&cfg, &["--from", "2026-11-01", "--to", "2026-11-03", "--skip-unchanged"]);
        assert_eq!(code(&o), 0, "{}", text(&o));
        let t = text(&o);
        let action = |date: &str| {
            t.lines().find(|l| l.starts_with(date)).unwrap().split_whitespace().nth(1).unwrap().to_string()
        };
        let untouched = if format == "parquet" { "skipped" } else { "unchanged" };
        assert_eq!(
            [action("2026-11-01"), action("2026-11-02"), action("2026-11-03")],
            [untouched, "replaced", untouched],
            "{format}: {t}"
        );
        let mut all = rows.clone();
        all.push(late);
        assert_eq!(p.tables().await, model_tables(&all), "{format}");
        let st = cli(&["status", "--config", cfg.to_str().unwrap(), "--json"], p.dir.path());
        let v: serde_json::Value = serde_json::from_slice(&st.stdout).unwrap();
        let inputs = |i: usize| -> Vec<String> {
            v["partitions"][i]["lineage"]["inputs"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x["path"].as_str().unwrap().to_string())
                .collect()
        };
        assert_eq!(inputs(0), [format!("batch-1.{ext}")], "{format}");
        assert_eq!(inputs(1), [format!("batch-2.{ext}"), format!("late.{ext}")], "{format}");
    }
}

async fn a_bad_row_in_flat_input_fails_only_its_date(kind: Kind) {
    let p = Place::new(kind);
    let rows = random_orders(311, 3, 30);
    let mut csv = csv_bytes(&rows);
    csv.extend_from_slice(b"bad-1,1,2026-11-02,c,USD,twelve,placed\n");
    p.put("all.csv", csv).await;
    let cfg = p.config("csv", "schema = { amount = \"decimal(12,2)\" }", "", "UTC");
    let o = p.run(&cfg, &["--from", "2026-11-01", "--to", "2026-11-03"]);
    assert_eq!(code(&o), 3, "{}", text(&o));
    assert!(
        text(&o).contains(&format!("all.csv, row {} (line {}), column `amount`", rows.len(), rows.len() + 2)),
        "{}",
        text(&o)
    );
    let got = p.tables().await;
    assert_eq!(got.keys().collect::<Vec<_>>(), ["2026-11-01", "2026-11-03"], "{}", text(&o));
    let want = model_tables(&rows);
    assert_eq!(got["2026-11-01"], want["2026-11-01"]);
}

/// How a table's rows are dated is kept like its schema: another zone for a `from_timestamp`
/// job, or another partition column, is refused (another zone re-dated some rows: re-running one
/// date under it held keys under two dates and none; another column gave the table `d=` and
/// `d2=` folders, which DuckDB refuses to read and pyarrow over-counts). A rebuild of every
/// partition re-dates the whole table.
async fn a_tables_dating_is_kept_like_its_schema(kind: Kind) {
    let rows = timed_orders();
    let p = Place::new(kind);
    p.put("a.parquet", timed_parquet(&rows, None)).await;
    let partition = "[partition]\nfrom_timestamp = \"ts\"\n";
    let range = ["--from", "2026-10-30", "--to", "2026-11-03", "--allow-empty"];
    let o = p.run(&p.config("parquet", "", partition, "America/New_York"), &range);
    assert_eq!(code(&o), 0, "{}", text(&o));
    let before = p.b.partitions().await;
    let tokyo = p.config("parquet", "", partition, "Asia/Tokyo");
    let o = p.run(&tokyo, &["--date", "2026-11-01"]);
    assert_eq!(code(&o), 2, "{}", text(&o));
    assert!(
        text(&o).contains(
            "rows are dated by `ts` in America/New_York in the table, dated by `ts` in Asia/Tokyo in this run"
        ),
        "{}",
        text(&o)
    );
    assert_eq!(p.b.partitions().await, before, "nothing done");
    let mut all = range.to_vec();
    all.extend(["--schema-change", "rebuild"]);
    let o = p.run(&tokyo, &all);
    assert_eq!(code(&o), 0, "{}", text(&o));
    let tz: chrono_tz::Tz = "Asia/Tokyo".parse().unwrap();
    let redated: Vec<Order> =
        rows.iter().map(|(r, t)| Order { date: tz.from_utc_datetime(t).date_naive(), ..r.clone() }).collect();
    let got: BTreeMap<String, Vec<OutRow>> = p.tables().await.into_iter().filter(|(_, v)| !v.is_empty()).collect();
    assert_eq!(got, model_tables(&redated));
    let o = p.run(&tokyo, &["--date", "2026-11-01"]);
    assert_eq!(code(&o), 0, "the table is Tokyo's now: {}", text(&o));
    // A zone of the same rules under another name dates alike.
    let o = p.run(&p.config("parquet", "", partition, "Japan"), &["--date", "2026-11-01"]);
    assert_eq!(code(&o), 0, "Japan is Tokyo's zone: {}", text(&o));
    // Another partition column, even with a rebuild (which would leave the old folders).
    let before = p.b.partitions().await;
    let day = p.config("parquet", "", "[partition]\ncolumn = \"day\"\nfrom_timestamp = \"ts\"\n", "Asia/Tokyo");
    for args in [&all[..], &["--date", "2026-11-01"]] {
        let o = p.run(&day, args);
        assert_eq!(code(&o), 2, "{}", text(&o));
        assert!(
            text(&o).contains("holds 5 partition(s) in `event_date=` folders (first: event_date=2026-10-30/)")
                && text(&o).contains("this config partitions by `day`"),
            "{}",
            text(&o)
        );
    }
    assert_eq!(p.b.partitions().await, before, "nothing done");
}

macro_rules! suite {
    ($name:ident, $kind:expr $(, $attr:meta)?) => {
        mod $name {
            use super::*;
            #[tokio::test(flavor = "multi_thread")]
            $(#[$attr])?
            async fn columns_by_name_in_every_format() {
                super::columns_by_name_in_every_format($kind).await
            }
            #[tokio::test(flavor = "multi_thread")]
            $(#[$attr])?
            async fn a_missing_column_names_the_column_and_the_object() {
                super::a_missing_column_names_the_column_and_the_object($kind).await
            }
            #[tokio::test(flavor = "multi_thread")]
            $(#[$attr])?
            async fn date_folders_spelled_two_ways_are_both_read() {
                super::date_folders_spelled_two_ways_are_both_read($kind).await
            }
            #[tokio::test(flavor = "multi_thread")]
            $(#[$attr])?
            async fn timestamps_give_the_same_dates_in_every_format() {
                super::timestamps_give_the_same_dates_in_every_format($kind).await
            }
            #[tokio::test(flavor = "multi_thread")]
            $(#[$attr])?
            async fn epoch_values_when_declared_and_bad_timestamps_named() {
                super::epoch_values_when_declared_and_bad_timestamps_named($kind).await
            }
            #[tokio::test(flavor = "multi_thread")]
            $(#[$attr])?
            async fn drift_within_a_date_is_unified() {
                super::drift_within_a_date_is_unified($kind).await
            }
            #[tokio::test(flavor = "multi_thread")]
            $(#[$attr])?
            async fn a_schema_change_is_refused_then_rebuilt() {
                super::a_schema_change_is_refused_then_rebuilt($kind).await
            }
            #[tokio::test(flavor = "multi_thread")]
            $(#[$attr])?
            async fn a_tables_dating_is_kept_like_its_schema() {
                super::a_tables_dating_is_kept_like_its_schema($kind).await
            }
            #[tokio::test(flavor = "multi_thread")]
            $(#[$attr])?
            async fn a_merged_table_is_rebuilt_under_a_new_schema() {
                super::a_merged_table_is_rebuilt_under_a_new_schema($kind).await
            }
            #[tokio::test(flavor = "multi_thread")]
            $(#[$attr])?
            async fn flat_input_lineage_is_per_date() {
                super::flat_input_lineage_is_per_date($kind).await
            }
            #[tokio::test(flavor = "multi_thread")]
            $(#[$attr])?
            async fn a_bad_row_in_flat_input_fails_only_its_date() {
                super::a_bad_row_in_flat_input_fails_only_its_date($kind).await
            }
        }
    };
}

suite!(local, Kind::Local);
suite!(s3, Kind::S3, ignore = "needs the S3 server that scripts/test starts (not requested)");
