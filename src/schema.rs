//! The table's schema: output schema changes are deliberate, never silent (G8).
//!
//! The schema a table holds is recorded in `STATE/table-schema` (beside the table, see `[output] state_url`), a zero-row Parquet
//! file written before the first partition is swapped in (a table written before this record
//! existed is read from its newest partition). A run whose partitions would have another
//! schema — a column added, removed, renamed, reordered or retyped — is refused before
//! anything is done (exit 2), naming the difference, unless it says `--schema-change rebuild`:
//! then its range must cover every committed partition, the record is replaced, and every
//! partition is rewritten. `status` shows partitions still written under an older schema.
//!
//! A merge table's record also names the identity its rows were merged by (key columns and
//! version column, [`IDENTITY_KEY`]): a run under another identity is refused (exit 2), as its
//! key would find no stored row (each key held twice) and its version would be compared with
//! tombstones kept by another column.

use std::sync::Arc;

use arrow::datatypes::{Schema, SchemaRef};
use bytes::Bytes;
use chrono::NaiveDate;
use object_store::ObjectStoreExt;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

use crate::commit;
use crate::error::{Error, Result};
use crate::store::StoreLocation;

/// What a run does when its output schema differs from the table's.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum SchemaChange {
    /// Refuse the run (exit 2).
    #[default]
    Refuse,
    /// Rewrite every committed partition under the new schema (the range must cover them).
    Rebuild,
}

fn record_path(state: &StoreLocation) -> object_store::path::Path {
    state.child(&["table-schema"])
}

/// The schema record's metadata key naming a merge table's identity.
pub const IDENTITY_KEY: &str = "lakeswap.identity";

/// The schema record's metadata key naming how the table's rows are dated ([`partitioning_text`]).
pub const PARTITIONING_KEY: &str = "lakeswap.partitioning";

/// How a job dates its rows, as recorded: the partition column, and for dates taken from a
/// timestamp, that column and the zone whose calendar dates it (another zone moves rows
/// between dates: re-running some dates under it would hold a key under two dates, or none).
pub fn partitioning_text(cfg: &crate::config::JobConfig) -> String {
    let p = &cfg.partition;
    let zone = p.from_timestamp.as_ref().map(|_| cfg.timezone().name().to_string());
    serde_json::json!({ "column": p.column, "from_timestamp": p.from_timestamp, "timezone": zone }).to_string()
}

/// A recorded partitioning ([`partitioning_text`]) in words.
fn partitioning_words(text: &str) -> String {
    let v: serde_json::Value = serde_json::from_str(text).unwrap_or_default();
    match (v["from_timestamp"].as_str(), v["timezone"].as_str()) {
        (Some(ts), Some(zone)) => format!("dated by `{ts}` in {zone}"),
        (Some(ts), None) => format!("dated by `{ts}`"),
        _ => format!("dated by the column `{}`", v["column"].as_str().unwrap_or("?")),
    }
}

/// How this run would date the table's rows otherwise than the table's record says, in words;
/// `None` when alike, or for a record written before the dating was recorded. Zones are
/// compared by their rules: `Etc/UTC` dates as `UTC`, `US/Eastern` as `America/New_York`.
pub fn redating(recorded: Option<&str>, cfg: &crate::config::JobConfig) -> Option<String> {
    let (have, want) = (recorded?, partitioning_text(cfg));
    let parse = |t: &str| serde_json::from_str::<serde_json::Value>(t).unwrap_or_default();
    let (a, b) = (parse(have), parse(&want));
    let same_zone = || match (a["timezone"].as_str(), b["timezone"].as_str()) {
        (Some(x), Some(y)) => same_rules(x, y),
        (x, y) => x == y,
    };
    if a["column"] == b["column"] && a["from_timestamp"] == b["from_timestamp"] && same_zone() {
        return None;
    }
    Some(format!(
        "its rows are {} in the table, {} in this run (re-running some dates alone would hold a key under two \
         dates, or none)",
        partitioning_words(have),
        partitioning_words(&want)
    ))
}

/// Whether two zones give every instant from 1950 to 2100, hour by hour, the same offset.
fn same_rules(a: &str, b: &str) -> bool {
    use chrono::Offset;
    let (Ok(x), Ok(y)) = (a.parse::<chrono_tz::Tz>(), b.parse::<chrono_tz::Tz>()) else { return a == b };
    if x == y || a == b {
        return true;
    }
    let start = chrono::NaiveDate::from_ymd_opt(1950, 1, 1).and_then(|d| d.and_hms_opt(0, 0, 0));
    let Some(start) = start else { return false };
    (0..150 * 366 * 24).map(|h| start + chrono::Duration::hours(h)).all(|t| {
        use chrono::TimeZone;
        x.offset_from_utc_datetime(&t).fix() == y.offset_from_utc_datetime(&t).fix()
    })
}

/// What the table's schema record says beside its columns.
#[derive(Debug, Default)]
pub struct TableRecord {
    /// The schema the table holds (see [`table_record`]).
    pub schema: Option<SchemaRef>,
    /// A merge table's identity ([`identity_text`]); `None` for a record written before
    /// identities were recorded.
    pub identity: Option<String>,
    /// How its rows are dated ([`partitioning_text`]); `None` for a record written before.
    pub partitioning: Option<String>,
}

/// A merge job's identity as recorded: its key columns and version column.
pub fn identity_text(identity: &crate::config::IdentitySection) -> String {
    serde_json::json!({ "key": identity.key, "version": identity.version }).to_string()
}

/// The recorded schema, with its metadata; `None` without a record.
async fn read_record(state: &StoreLocation) -> Result<Option<Schema>> {
    let path = record_path(state);
    match state.store.get(&path).await {
        Ok(r) => {
            let bytes = r.bytes().await.map_err(|e| Error::store("cannot read", state.display(&path), e))?;
            let reader = ParquetRecordBatchReaderBuilder::try_new(bytes).map_err(|e| Error::Internal {
                what: "the table's schema record",
                message: format!("{} is damaged: {e}", state.display(&path)),
            })?;
            Ok(Some(reader.schema().as_ref().clone()))
        }
        Err(object_store::Error::NotFound { .. }) => Ok(None),
        Err(e) => Err(Error::store("cannot read", state.display(&path), e)),
    }
}

/// How the table's schema record, read now, differs from a daily run's output schema and
/// dating (empty without a record, or when they agree). A daily run does not hold the table: a
/// `--schema-change rebuild` may record another schema while it computes, and its partitions in
/// the schema it planned would then sit in a table of another.
pub async fn recorded_changes(
    state: &StoreLocation,
    run: &Schema,
    cfg: &crate::config::JobConfig,
) -> Result<Vec<String>> {
    let Some(record) = read_record(state).await? else { return Ok(Vec::new()) };
    let columns = Schema::new(record.fields().clone());
    let mut out = differences(&columns, run);
    out.extend(redating(record.metadata().get(PARTITIONING_KEY).map(String::as_str), cfg));
    Ok(out)
}

/// The differences between the table's schema and a run's, in words (names and types; a
/// column's nullability is not part of it). Empty when they agree.
pub fn differences(table: &Schema, run: &Schema) -> Vec<String> {
    let mut out = Vec::new();
    for f in run.fields() {
        match table.field_with_name(f.name()) {
            Err(_) => out.push(format!("column `{}` ({}) added", f.name(), f.data_type())),
            // `large_string` and `string`, views and dictionaries are one type to a reader, and
            // are read as one (a table written from any of them stays readable).
            Ok(t) if crate::read::unify::base(t.data_type()) != crate::read::unify::base(f.data_type()) => out.push(
                format!("column `{}` is {} in the table, {} in this run", f.name(), t.data_type(), f.data_type()),
            ),
            Ok(_) => {}
        }
    }
    for t in table.fields() {
        if run.field_with_name(t.name()).is_err() {
            out.push(format!("column `{}` ({}) removed", t.name(), t.data_type()));
        }
    }
    if out.is_empty() {
        let names = |s: &Schema| s.fields().iter().map(|f| f.name().clone()).collect::<Vec<_>>();
        if names(table) != names(run) {
            out.push(format!("the columns are reordered: {} in the table", names(table).join(", ")));
        }
    }
    out
}

/// `Ok` when a partition's output schema is the expected one, else the difference in words.
pub fn same_output(expected: &Schema, got: &Schema) -> std::result::Result<(), String> {
    let d = differences(expected, got);
    if d.is_empty() {
        Ok(())
    } else {
        Err(d.join("; "))
    }
}

/// The arrow schema of a Parquet footer.
pub fn of_footer(md: &parquet::file::metadata::ParquetMetaData) -> Option<Schema> {
    crate::read::footer_schema(md).ok()
}

/// The committed partitions' dates: the `<column>=<date>/` folders of the output.
pub async fn committed_dates(out: &StoreLocation, column: &str) -> Result<Vec<NaiveDate>> {
    let mut v: Vec<NaiveDate> =
        partition_folders(out).await?.into_iter().filter(|(name, _)| name == column).map(|(_, d)| d).collect();
    v.sort();
    v.dedup();
    Ok(v)
}

/// The output's `<name>=<date>/` folders, by name and date: a table's partitions, whatever
/// column named them.
async fn partition_folders(out: &StoreLocation) -> Result<Vec<(String, NaiveDate)>> {
    let listing =
        out.store.list_with_delimiter(Some(&out.prefix)).await.map_err(|e| Error::store("cannot list", &out.url, e))?;
    Ok(listing
        .common_prefixes
        .iter()
        .filter_map(|p| {
            // Readers skip `_`- and `.`-folders, and no partition column is named so.
            let (name, date) = p.filename().filter(|f| !f.starts_with(['_', '.']))?.split_once('=')?;
            Some((name.to_string(), NaiveDate::parse_from_str(date, "%Y-%m-%d").ok()?))
        })
        .collect())
}

/// Refuses a run whose partition column is not the one the table's partitions (`folders`) are
/// named by (`[partition] column` changed between runs): readers of the whole table would see
/// two partition columns (DuckDB refuses the mix, pyarrow reads each row under one of them),
/// and a merge would hold each key twice, as this run finds none of the stored rows.
fn same_partition_column(out: &StoreLocation, folders: &[(String, NaiveDate)], column: &str) -> Result<()> {
    let Some((other, date)) = folders.iter().find(|(name, _)| name != column) else { return Ok(()) };
    let n = folders.iter().filter(|(name, _)| name == other).count();
    Err(Error::Usage(format!(
        "the table {} holds {n} partition(s) in `{other}=` folders (first: {other}={date}/), and this config \
         partitions by `{column}`: a reader of the table would find two partition columns, and a merge would hold \
         each key twice. Nothing was done. Keep [partition] column = \"{other}\", or write to a new table \
         (another [output] url)",
        out.url
    )))
}

/// The schema the table holds: its record, or (a table written before the record existed) its
/// newest partition's. `None` for a table without partitions — also when a record is left
/// (the table folder emptied by hand, a first run that died before its first swap): an empty
/// table holds no schema to keep.
pub async fn table_schema(out: &StoreLocation, state: &StoreLocation, column: &str) -> Result<Option<SchemaRef>> {
    let folders = partition_folders(out).await?;
    Ok(record_of(out, state, column, &folders).await?.schema)
}

/// For a run: [`table_schema`], with what the record says beside it, from one listing and one
/// read of the record; a table partitioned by another column is refused.
pub async fn table_record(out: &StoreLocation, state: &StoreLocation, column: &str) -> Result<TableRecord> {
    let folders = partition_folders(out).await?;
    same_partition_column(out, &folders, column)?;
    record_of(out, state, column, &folders).await
}

async fn record_of(
    out: &StoreLocation,
    state: &StoreLocation,
    column: &str,
    folders: &[(String, NaiveDate)],
) -> Result<TableRecord> {
    let mut committed: Vec<NaiveDate> = folders.iter().filter(|(name, _)| name == column).map(|(_, d)| *d).collect();
    committed.sort();
    committed.dedup();
    if committed.is_empty() {
        return Ok(TableRecord::default());
    }
    // The columns alone: the record's metadata is not the partitions'.
    if let Some(schema) = read_record(state).await? {
        let said = |key: &str| schema.metadata().get(key).cloned();
        return Ok(TableRecord {
            identity: said(IDENTITY_KEY),
            partitioning: said(PARTITIONING_KEY),
            schema: Some(Arc::new(Schema::new(schema.fields().clone()))),
        });
    }
    for date in committed.into_iter().rev() {
        let target = commit::target_path(out, &commit::partition_dir(column, date));
        let footer = commit::committed_footer(out, &target).await.map_err(Error::of_partition)?;
        if let Some(Some(md)) = footer {
            return Ok(TableRecord { schema: of_footer(&md).map(Arc::new), ..Default::default() });
        }
    }
    Ok(TableRecord::default())
}

/// Records `schema` as the table's, with how its rows are dated ([`partitioning_text`]) and a
/// merge table's `identity` ([`identity_text`]).
pub async fn record(
    state: &StoreLocation,
    schema: &SchemaRef,
    partitioning: String,
    identity: Option<String>,
) -> Result<()> {
    let path = record_path(state);
    let metadata = identity
        .map(|i| (IDENTITY_KEY.to_string(), i))
        .into_iter()
        .chain([(PARTITIONING_KEY.to_string(), partitioning)])
        .collect();
    let schema = &Arc::new(Schema::new_with_metadata(schema.fields().clone(), metadata));
    let mut buf = Vec::new();
    let internal = |e: parquet::errors::ParquetError| Error::Internal {
        what: "the table's schema record",
        message: e.to_string(),
    };
    let w = parquet::arrow::ArrowWriter::try_new(&mut buf, schema.clone(), None).map_err(internal)?;
    w.close().map_err(internal)?;
    state
        .store
        .put(&path, Bytes::from(buf).into())
        .await
        .map_err(|e| Error::store("cannot write", state.display(&path), e))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::datatypes::{DataType, Field};

    #[test]
    fn zones_are_compared_by_their_rules() {
        assert!(same_rules("UTC", "Etc/UTC") && same_rules("US/Eastern", "America/New_York"));
        assert!(same_rules("Europe/Kiev", "Europe/Kyiv"));
        assert!(!same_rules("UTC", "Europe/London") && !same_rules("America/New_York", "America/Chicago"));
    }

    #[test]
    fn differences_in_words() {
        let t = Schema::new(vec![Field::new("country", DataType::Utf8, true), Field::new("n", DataType::Int64, false)]);
        assert!(differences(&t, &t).is_empty());
        let r = Schema::new(vec![
            Field::new("country", DataType::Utf8, true),
            Field::new("url", DataType::Utf8, true),
            Field::new("n", DataType::Int32, true),
        ]);
        let d = differences(&t, &r).join("; ");
        assert!(d.contains("`url` (Utf8) added") && d.contains("`n` is Int64 in the table, Int32 in this run"), "{d}");
        let swapped =
            Schema::new(vec![Field::new("n", DataType::Int64, false), Field::new("country", DataType::Utf8, true)]);
        assert!(differences(&t, &swapped)[0].contains("reordered"));
        // One type to a reader, whatever the encoding of its text.
        let large =
            Schema::new(vec![Field::new("country", DataType::LargeUtf8, true), Field::new("n", DataType::Int64, true)]);
        assert!(differences(&t, &large).is_empty());
    }
}
