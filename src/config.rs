//! The job config: TOML as in README.md ("Config reference"), parsed strictly and validated before anything runs.
//!
//! Invariants after [`JobConfig::parse`]: no unknown keys; an entity that can change has a
//! version column (or is declared `immutable`, or keyed by the whole record with `key = ["*"]`);
//! every measure names a column where its function needs one; the time zone is a real IANA
//! name. Checks that need the input's schema (does the column exist, has it a usable type) are
//! made by [`crate::plan`] against the first input object, still before anything is written.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

pub use crate::error::ConfigError;
pub use crate::read::Format;

/// The table of one date's cleaned rows, in the daily table's query.
pub const EVENTS: &str = "events";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum JobKind {
    Aggregate,
    Merge,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum OnConflict {
    #[default]
    Fail,
    Quarantine,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobSection {
    pub name: String,
    pub kind: JobKind,
    #[serde(default = "default_tz")]
    pub timezone: String,
}

fn default_tz() -> String {
    "UTC".into()
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InputSection {
    pub url: String,
    pub format: Format,
    /// Store options (`aws_endpoint`, `azure_storage_account_name`, …). Never logged.
    #[serde(default, skip_serializing)]
    pub options: BTreeMap<String, String>,
    /// Column types for CSV / NDJSON (`amount = "decimal(12,2)"`); inferred when absent.
    #[serde(default)]
    pub schema: BTreeMap<String, String>,
    /// CSV field delimiter (one character).
    #[serde(default = "default_delimiter")]
    pub delimiter: String,
    /// Whether CSV files start with a header line.
    #[serde(default = "default_true")]
    pub header: bool,
    /// Objects in `name=value` folders below the input (below its date folders, in a Hive
    /// layout) are read, the folders' values not being data (a landing date whose redeliveries
    /// are duplicates). Without it they are refused: Hive readers take such a value for a
    /// column of the folder's rows, which lakeswap would lose.
    #[serde(default)]
    pub ignore_folder_values: bool,
}

/// A CSV delimiter is one ASCII character, not a line break, a quote or another control
/// character, and the delimiter and header apply to CSV only: the offending key under `at`
/// (`input`, `aggregate.tables[0]`) and why.
fn check_csv_options(at: &str, delimiter: &str, header: bool, format: Format) -> Result<(), (String, String)> {
    let key = |k: &str| format!("{at}.{k}");
    if delimiter.len() != 1 {
        return Err((key("delimiter"), "must be exactly one ASCII character".into()));
    }
    if delimiter.chars().any(|c| c.is_ascii_control() && c != '\t' || c == '"') {
        return Err((
            key("delimiter"),
            "cannot be a line break, a quote or another control character (a tab is fine: \"\\t\")".into(),
        ));
    }
    if format != Format::Csv && (delimiter != "," || !header) {
        let k = if delimiter != "," { key("delimiter") } else { key("header") };
        return Err((k, format!("applies to CSV only; this input is {format:?}").to_lowercase()));
    }
    Ok(())
}

fn default_delimiter() -> String {
    ",".into()
}
fn default_true() -> bool {
    true
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Deleted {
    pub column: String,
    pub equals: toml::Value,
    /// NDJSON only: an object whose lines all leave the column out (JSON's way of writing no
    /// value: a day without deletes) has no deletes, rather than failing its date.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub optional: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IdentitySection {
    pub key: Vec<String>,
    #[serde(default)]
    pub version: Option<String>,
    #[serde(default)]
    pub immutable: bool,
    #[serde(default)]
    pub deleted: Option<Deleted>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PartitionSection {
    /// The partition column: a date column of the input, and the name in the output path.
    #[serde(default = "default_partition_column")]
    pub column: String,
    /// Derive the date from this timestamp column, in the job's time zone.
    #[serde(default)]
    pub from_timestamp: Option<String>,
}

fn default_partition_column() -> String {
    "event_date".into()
}

#[derive(Debug, Clone, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct PrepareSection {
    #[serde(default)]
    pub on_conflict: OnConflict,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MeasureFn {
    Count,
    CountDistinct,
    Sum,
    Avg,
    Min,
    Max,
}

impl MeasureFn {
    /// The name the config writes (`fn = "count_distinct"`).
    pub fn name(self) -> &'static str {
        match self {
            MeasureFn::Count => "count",
            MeasureFn::CountDistinct => "count_distinct",
            MeasureFn::Sum => "sum",
            MeasureFn::Avg => "avg",
            MeasureFn::Min => "min",
            MeasureFn::Max => "max",
        }
    }

    fn needs_column(self) -> bool {
        !matches!(self, MeasureFn::Count)
    }
}

/// One value or a list of values, for `where = { status = "placed" }` or `["placed", "shipped"]`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(untagged)]
pub enum OneOrMany {
    Many(Vec<toml::Value>),
    One(toml::Value),
}

impl OneOrMany {
    pub fn values(&self) -> Vec<toml::Value> {
        match self {
            OneOrMany::Many(v) => v.clone(),
            OneOrMany::One(v) => vec![v.clone()],
        }
    }
}

/// A measure's filter: a SQL boolean expression over the columns of `events`
/// (`where = "amount > 100 AND status IN ('placed', 'shipped')"`), or values per column
/// (`where = { status = ["placed", "shipped"] }`), compared in the column's own type.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(untagged)]
pub enum Where {
    Sql(String),
    Values(BTreeMap<String, OneOrMany>),
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Measure {
    pub name: String,
    #[serde(rename = "fn")]
    pub func: MeasureFn,
    #[serde(default)]
    pub column: Option<String>,
    /// Rows count for this measure only where the filter holds.
    #[serde(default, rename = "where")]
    pub filter: Option<Where>,
}

/// A small dimension table the query may join (`[[aggregate.tables]]`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LookupTable {
    /// The name the query uses.
    pub name: String,
    /// Where its objects are (every object under it is read). Not in the fingerprint: its
    /// objects, with sizes and e-tags, are in each partition's lineage.
    #[serde(skip_serializing)]
    pub url: String,
    pub format: Format,
    #[serde(default, skip_serializing)]
    pub options: BTreeMap<String, String>,
    #[serde(default)]
    pub schema: BTreeMap<String, String>,
    #[serde(default = "default_delimiter")]
    pub delimiter: String,
    #[serde(default = "default_true")]
    pub header: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AggregateSection {
    /// The daily table as one SQL query over `events` (one date's cleaned rows).
    #[serde(default)]
    pub sql: Option<String>,
    /// The shorthand: group-by columns and measures, compiled to the same SQL.
    #[serde(default)]
    pub group_by: Vec<String>,
    #[serde(default)]
    pub measures: Vec<Measure>,
    /// Lookup tables the query may join.
    #[serde(default)]
    pub tables: Vec<LookupTable>,
}

/// What a run does with objects in a partition folder that lakeswap did not write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum ForeignFiles {
    /// Fail the partition (exit 1), naming them; nothing is deleted.
    #[default]
    Fail,
    /// Remove them once the partition is swapped in.
    Remove,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutputSection {
    pub url: String,
    #[serde(default, skip_serializing)]
    pub options: BTreeMap<String, String>,
    /// Objects in a partition folder besides its one data file.
    #[serde(default, skip_serializing)]
    pub foreign_files: ForeignFiles,
    /// Where lakeswap keeps the table's run state — journals, leases, staged and quarantined
    /// files, the table's schema, a merge's tombstones and key indexes — outside the data tree
    /// so that readers of `url` see the table only. Default: [`default_state_url`].
    #[serde(default, skip_serializing)]
    pub state_url: Option<String>,
}

impl OutputSection {
    /// The state location: `state_url`, else the default beside the table.
    pub fn state_url(&self) -> Option<String> {
        match &self.state_url {
            Some(u) => Some(u.trim_end_matches('/').to_string()),
            None => default_state_url(&self.url),
        }
    }
}

/// The default state location of the table at `url`: `_lakeswap/<name>` in the folder that
/// holds the table (`s3://lake/tables/orders_daily` → `s3://lake/tables/_lakeswap/orders_daily`).
/// A leading `_` keeps Spark, Hive and Trino from taking it for a table. `None` when the table
/// is the root of its store and has no folder beside it.
pub fn default_state_url(url: &str) -> Option<String> {
    let mut url = url.trim_end_matches('/');
    while let Some(rest) = url.strip_suffix("/.") {
        url = rest.trim_end_matches('/');
    }
    let (head, path) = match url.split_once("://") {
        // `file:///abs`: the whole rest is a path.
        Some((scheme, rest)) if scheme.eq_ignore_ascii_case("file") => (format!("{scheme}://"), rest.to_string()),
        // `s3://bucket/p`: the bucket stays.
        Some((scheme, rest)) => {
            let (authority, path) = rest.split_once('/')?;
            (format!("{scheme}://{authority}/"), path.to_string())
        }
        None => (String::new(), url.to_string()),
    };
    let (parent, name) = match path.rsplit_once('/') {
        Some((parent, name)) => (format!("{parent}/"), name),
        None => (String::new(), path.as_str()),
    };
    if name.is_empty() || name == "." || name == ".." {
        return None;
    }
    Some(format!("{head}{parent}_lakeswap/{name}"))
}

/// The path of a `file://` URL: `file:///abs/path` (three slashes). `file://host/path` names a
/// host, which a local folder has none of: read as a relative path it would be another folder.
fn file_url_path(url: &str) -> Result<(), String> {
    if !url.get(..5).is_some_and(|s| s.eq_ignore_ascii_case("file:")) {
        return Ok(());
    }
    let Some(rest) = url.get(..7).filter(|s| s.eq_ignore_ascii_case("file://")).map(|_| &url[7..]) else {
        // `file:/abs` would be read as a relative path `file:/abs`.
        return Err(format!(
            "`{url}` is no file URL: write `file://` and an absolute path, three slashes in all (`file:///abs/path`), \
             or the path alone"
        ));
    };
    if rest.starts_with('/') {
        return Ok(());
    }
    let (host, path) = rest.split_once('/').unwrap_or((rest, ""));
    let path = if host.eq_ignore_ascii_case("localhost") { path } else { rest };
    Err(format!(
        "`{url}` names the host `{host}`: a file URL is `file://` and an absolute path, three slashes in all \
         (`file:///{path}`), and names no host (not even localhost); or write the path alone"
    ))
}

/// The family of a URL's scheme (`s3a` is `s3`, a plain path is `file`).
pub fn scheme_family(url: &str) -> &'static str {
    let scheme = url.split_once("://").map(|(s, _)| s.to_ascii_lowercase()).unwrap_or_default();
    match scheme.as_str() {
        "" | "file" => "file",
        "s3" | "s3a" => "s3",
        "az" | "azure" | "abfs" | "abfss" | "adl" => "az",
        "gs" | "gcs" => "gs",
        "memory" => "memory",
        _ => "other",
    }
}

/// What a merge does with a key whose newest version carries another date than the one it
/// is stored under.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum OnDateChange {
    /// Move it: the new date gains the row, the old date loses it.
    #[default]
    Move,
    /// Refuse the batch's dates that would move a key (exit 3).
    Fail,
}

/// `[merge]`: options of a merge job.
#[derive(Debug, Clone, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct MergeSection {
    /// Tombstones whose version is older than this (`30d`, `12h`) before now are dropped at the
    /// next write of their partition. Needs a date or timestamp version column.
    #[serde(default)]
    pub tombstone_retention: Option<String>,
    #[serde(default)]
    pub on_date_change: OnDateChange,
}

/// A duration of the config: `<n>w`, `<n>d`, `<n>h`, `<n>m` or `<n>s`.
pub fn parse_duration(s: &str) -> Result<chrono::Duration, String> {
    let t = s.trim();
    let err = || format!("`{s}` is not a duration: write e.g. 30d, 12h, 90m (w, d, h, m, s)");
    let (n, unit) = t.split_at(t.find(|c: char| !c.is_ascii_digit()).ok_or_else(err)?);
    let n: i64 = match n.parse() {
        Ok(n) => n,
        Err(_) if !n.is_empty() => return Err(format!("`{s}` is more than 36,500 days: write a shorter duration")),
        Err(_) => return Err(err()),
    };
    let d = match unit {
        "w" => chrono::Duration::try_weeks(n),
        "d" => chrono::Duration::try_days(n),
        "h" => chrono::Duration::try_hours(n),
        "m" => chrono::Duration::try_minutes(n),
        "s" => chrono::Duration::try_seconds(n),
        _ => return Err(err()),
    };
    let d = d.ok_or_else(|| format!("`{s}` is more than 36,500 days: write a shorter duration"))?;
    if d <= chrono::Duration::zero() {
        return Err(format!("`{s}` is no time at all: a duration must be more than zero"));
    }
    // Taken from the clock (`now - d`), which must stay a time.
    if d > chrono::Duration::days(36_500) {
        return Err(format!("`{s}` is more than 36,500 days: write a shorter duration"));
    }
    Ok(d)
}

/// The whole job config, as written in TOML.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobConfig {
    pub job: JobSection,
    pub input: InputSection,
    pub identity: IdentitySection,
    #[serde(default = "default_partition")]
    pub partition: PartitionSection,
    #[serde(default)]
    pub prepare: PrepareSection,
    #[serde(default)]
    pub aggregate: Option<AggregateSection>,
    #[serde(default)]
    pub merge: Option<MergeSection>,
    pub output: OutputSection,
    /// Where the config came from (its file), for messages.
    #[serde(skip)]
    pub origin: String,
}

fn default_partition() -> PartitionSection {
    PartitionSection { column: default_partition_column(), from_timestamp: None }
}

impl JobConfig {
    /// Reads and validates a config file, its `${VAR}`s taken from the environment.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        Self::load_with(path, &crate::vars::Vars::environment())
    }

    /// Reads and validates a config file, its `${VAR}`s taken from `vars` (see [`crate::vars`]).
    pub fn load_with(path: &Path, vars: &crate::vars::Vars) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path)
            .map_err(|source| ConfigError::Read { path: path.display().to_string(), source })?;
        Self::parse_with(&text, &path.display().to_string(), vars)
    }

    /// Parses and validates config text; `origin` names it in errors.
    pub fn parse(text: &str, origin: &str) -> Result<Self, ConfigError> {
        Self::parse_with(text, origin, &crate::vars::Vars::environment())
    }

    /// Parses config text, substitutes its variables, validates it.
    pub fn parse_with(text: &str, origin: &str, vars: &crate::vars::Vars) -> Result<Self, ConfigError> {
        let syntax = |e: toml::de::Error| ConfigError::Parse {
            path: origin.to_string(),
            message: format!("{}. See the config reference in README.md", e.to_string().trim_end()),
        };
        let mut table: toml::Table = toml::from_str(text).map_err(syntax)?;
        if let Some((key, message)) = rounded_float(text) {
            return Err(ConfigError::Invalid { path: origin.to_string(), key, message });
        }
        let substituted = vars.substitute(&mut table).map_err(|(key, message)| ConfigError::Invalid {
            path: origin.to_string(),
            key,
            message,
        })?;
        // Without variables, the text itself is read: its errors carry line and column.
        let mut cfg: JobConfig = if substituted {
            // An error the text has too is shown with the text's line and column.
            JobConfig::deserialize(toml::Value::Table(table))
                .map_err(|e| syntax(toml::from_str::<JobConfig>(text).err().unwrap_or(e)))?
        } else {
            toml::from_str(text).map_err(syntax)?
        };
        cfg.origin = origin.to_string();
        cfg.validate(origin)?;
        Ok(cfg)
    }

    fn validate(&self, origin: &str) -> Result<(), ConfigError> {
        let bad = |key: &str, message: String| ConfigError::Invalid {
            path: origin.to_string(),
            key: key.to_string(),
            message,
        };
        if self.job.name.trim().is_empty() {
            return Err(bad("job.name", "must not be empty".into()));
        }
        if self.job.timezone.parse::<chrono_tz::Tz>().is_err() {
            return Err(bad(
                "job.timezone",
                format!("`{}` is not an IANA time zone name (e.g. \"UTC\", \"Europe/Berlin\")", self.job.timezone),
            ));
        }
        if self.input.url.trim().is_empty() {
            return Err(bad("input.url", "must not be empty".into()));
        }
        if self.output.url.trim().is_empty() {
            return Err(bad("output.url", "must not be empty".into()));
        }
        // Every location: a file URL names a path, and only an object store takes options.
        let none = BTreeMap::new();
        let lookups = self.aggregate.iter().flat_map(|a| a.tables.iter());
        let places = [
            ("input.url", self.input.url.as_str(), "input.options", &self.input.options),
            ("output.url", self.output.url.as_str(), "output.options", &self.output.options),
        ]
        .into_iter()
        .chain(self.output.state_url.iter().map(|u| ("output.state_url", u.as_str(), "", &none)))
        .chain(lookups.map(|t| ("aggregate.tables.url", t.url.as_str(), "aggregate.tables.options", &t.options)));
        for (url_key, url, options_key, options) in places {
            file_url_path(url).map_err(|m| bad(url_key, m))?;
            if scheme_family(url) == "file" && !options.is_empty() {
                let names: Vec<&str> = options.keys().map(String::as_str).collect();
                return Err(bad(
                    options_key,
                    format!(
                        "`{url}` is a local folder, which takes no options ({} would not be used): options are for \
                         object stores (s3://, az://, gs://). Remove them, or give the store's URL",
                        names.join(", ")
                    ),
                ));
            }
        }
        if crate::read::list::nested(&self.input.url, &self.output.url) {
            return Err(bad(
                "output.url",
                format!(
                    "`{}` and the input `{}` lie inside one another: the table would be read back as input. \
                     Write the output to a location of its own",
                    self.output.url, self.input.url
                ),
            ));
        }
        if self.output.state_url.as_deref().is_some_and(|u| u.trim().is_empty()) {
            return Err(bad(
                "output.state_url",
                "must not be empty (leave it out for the default beside the table)".into(),
            ));
        }
        let Some(state) = self.output.state_url() else {
            return Err(bad(
                "output.state_url",
                format!(
                    "`{}` has no folder beside it for lakeswap's run state (journals, leases, staged files): \
                     set `state_url` to a location of its own on the same store",
                    self.output.url
                ),
            ));
        };
        if crate::read::list::nested(&state, &self.output.url) {
            return Err(bad(
                "output.state_url",
                format!(
                    "`{state}` and the output `{}` lie inside one another: readers of the table would read \
                     lakeswap's run state as data. {}",
                    self.output.url,
                    match default_state_url(&self.output.url) {
                        Some(d) => format!("Keep the state beside the table (the default: `{d}`)"),
                        None => "Set `state_url` to a location outside the table".to_string(),
                    }
                ),
            ));
        }
        if crate::read::list::nested(&state, &self.input.url) {
            return Err(bad(
                "output.state_url",
                format!(
                    "`{state}` and the input `{}` lie inside one another: lakeswap's run state would be read as \
                     input. Set `state_url` to a location of its own",
                    self.input.url
                ),
            ));
        }
        if scheme_family(&state) != scheme_family(&self.output.url) {
            return Err(bad(
                "output.state_url",
                format!(
                    "`{state}` is on another kind of store than the output `{}`: partitions are staged in the \
                     state location and swapped into the table, so both must be on the same store",
                    self.output.url
                ),
            ));
        }
        let i = &self.input;
        check_csv_options("input", &i.delimiter, i.header, i.format).map_err(|(key, m)| bad(&key, m))?;
        for (col, ty) in &self.input.schema {
            let d = crate::read::parse_type(ty).map_err(|m| bad(&format!("input.schema.{col}"), m))?;
            if *col == self.partition.column && d.ty != arrow::datatypes::DataType::Date32 {
                return Err(bad(
                    &format!("input.schema.{col}"),
                    format!(
                        "`{col}` is the partition column: it is a date; for a timestamp use [partition] from_timestamp"
                    ),
                ));
            }
        }
        let id = &self.identity;
        if id.key.is_empty() {
            return Err(bad("identity.key", "name at least one key column, or [\"*\"] for the whole record".into()));
        }
        let whole_record = id.key == ["*"];
        if id.key.iter().any(|k| k == "*") && !whole_record {
            return Err(bad("identity.key", "\"*\" (the whole record) stands alone".into()));
        }
        if whole_record && self.job.kind != JobKind::Merge && id.version.is_some() {
            return Err(bad(
                "identity.version",
                "`key = [\"*\"]` makes the whole record the identity, version included: no row is another's older \
                 version, so a version would order nothing. Name the key columns, or leave the version out"
                    .into(),
            ));
        }
        if let Some(v) = id.version.as_ref().filter(|v| id.key.contains(v)) {
            return Err(bad(
                "identity.version",
                format!(
                    "`{v}` is also a key column: each version would be a key of its own, so no row would replace \
                     an older version of its key. Leave the version out of `key`"
                ),
            ));
        }
        match (&id.version, id.immutable) {
            (Some(_), true) => {
                return Err(bad(
                    "identity.immutable",
                    "a job has either a `version` column or `immutable = true`, not both".into(),
                ))
            }
            (None, false) if !whole_record => {
                return Err(bad(
                    "identity.version",
                    "missing. An entity that can change needs a version column to tell which row is newest: \
                     add `version = \"<column>\"` (e.g. \"source_version\" or an updated_at timestamp), or \
                     `immutable = true` for facts that never change, or `key = [\"*\"]` for exact dedup only"
                        .into(),
                ))
            }
            _ => {}
        }
        if self.job.kind == JobKind::Merge && id.version.is_none() {
            return Err(bad(
                "identity.version",
                "kind = \"merge\" needs a version column: a stored row is replaced only by a strictly newer version"
                    .into(),
            ));
        }
        if id.deleted.as_ref().is_some_and(|d| d.column.trim().is_empty()) {
            return Err(bad("identity.deleted.column", "must not be empty".into()));
        }
        if id.deleted.as_ref().is_some_and(|d| d.optional) && self.input.format != Format::Ndjson {
            return Err(bad(
                "identity.deleted.optional",
                "only NDJSON leaves out a field with no value; a CSV or Parquet object has its columns, and one \
                 without the tombstone column is an error"
                    .into(),
            ));
        }
        // CSV has no empty text: an empty field, quoted or not, reads as null, and null matches
        // nothing.
        let empty_text = |v: &toml::Value| v.as_str().is_some_and(|s| s.trim().is_empty());
        if self.input.format == Format::Csv {
            if id.deleted.as_ref().is_some_and(|d| empty_text(&d.equals)) {
                return Err(bad(
                    "identity.deleted.equals",
                    "a CSV reads an empty field (and `\"\"`) as null, which matches nothing: no row would be a \
                     delete. Name the value a delete holds"
                        .into(),
                ));
            }
            let measures = self.aggregate.iter().flat_map(|a| a.measures.iter().enumerate());
            for (i, m) in measures {
                if let Some(Where::Values(cols)) = &m.filter {
                    if let Some((col, _)) = cols.iter().find(|(_, v)| v.values().iter().any(empty_text)) {
                        return Err(bad(
                            &format!("aggregate.measures[{i}].where.{col}"),
                            format!(
                                "a CSV reads an empty field (and `\"\"`) as null, which no value matches: write \
                                 `where = \"{col} IS NULL\"`"
                            ),
                        ));
                    }
                }
            }
        }
        if id.deleted.is_some() && id.version.is_none() {
            return Err(bad("identity.deleted", "tombstones need a `version` column to order them".into()));
        }
        if let Some(d) = id.deleted.as_ref().filter(|d| id.key.contains(&d.column)) {
            return Err(bad(
                "identity.deleted.column",
                format!(
                    "`{}` is also a key column: a delete would be a key of its own, never the key of the rows it \
                     should remove, so nothing would be deleted. Leave the tombstone column out of `key`",
                    d.column
                ),
            ));
        }
        let column = &self.partition.column;
        if column.trim().is_empty() {
            return Err(bad("partition.column", "must not be empty".into()));
        }
        // It names the output's folders: `<column>=<date>/`.
        if column.trim() != column
            || column.starts_with(['_', '.'])
            || column.contains(['/', '\\', '=', '%'])
            || column.chars().any(char::is_control)
        {
            return Err(bad(
                "partition.column",
                format!(
                    "`{column}` cannot name the partition folders `{column}=YYYY-MM-DD/`: a name with `/`, `\\`, `=` or \
                     `%`, or starting with `_` or `.` (which readers skip as hidden), or with spaces around it, would \
                     be read back as another column or none"
                ),
            ));
        }
        // Object stores' keys are written with some characters percent-encoded: the folder of
        // `día` is `d%C3%ADa=…/`, which DuckDB reads as a column `d%C3%ADa` and pyarrow as `día`.
        let stored = object_store::path::PathPart::from(column.as_str());
        if stored.as_ref() != column {
            return Err(bad(
                "partition.column",
                format!(
                    "`{column}` would name the partition folders `{}=YYYY-MM-DD/` (stores percent-encode letters \
                     outside ASCII and some signs), which readers name differently; choose a name of ASCII letters, \
                     digits and `_`",
                    stored.as_ref()
                ),
            ));
        }
        // A folder of the table's path named like its partitions: readers that take columns from
        // folder names (DuckDB's hive_partitioning) would date every row by it.
        let url = &self.output.url;
        if let Some(folder) = url.split('/').find(|seg| seg.split_once('=').is_some_and(|(name, _)| name == column)) {
            return Err(bad(
                "output.url",
                format!(
                    "`{url}` has a folder `{folder}` named like the partitions (`{column}=`): a reader that \
                         takes columns from folder names (DuckDB's hive_partitioning) would give every row of the \
                     table that folder's value. Choose a path without it"
                ),
            ));
        }
        // Inside a state location (`<folder>/_lakeswap/<table>/…`): the `gc` of the table that
        // owns it removes what it did not write there (old staging, unknown run folders).
        if url.split('/').any(|seg| seg == "_lakeswap") {
            return Err(bad(
                "output.url",
                format!(
                    "`{url}` is inside a `_lakeswap/` folder, where lakeswap keeps tables' run state: the `gc` of the table whose state it is would remove this table's files. Choose a path outside it"
                ),
            ));
        }
        if self.job.kind == JobKind::Merge {
            // A merge keeps each key under the date of its latest version, and stores rows without
            // the partition column (the path holds it): the date is where a key lives, not who it
            // is or how new.
            if whole_record {
                return Err(bad(
                    "identity.key",
                    "kind = \"merge\" needs named key columns: `[\"*\"]` (the whole record) holds the version and \
                     the date too, so no row could ever replace or delete another"
                        .into(),
                ));
            }
            if id.key.contains(column) {
                return Err(bad(
                    "identity.key",
                    format!(
                        "the partition column `{column}` cannot be part of a merge's key: a key moves to the date of \
                         its latest version, so its date is not part of who it is"
                    ),
                ));
            }
            if id.version.as_ref() == Some(column) {
                return Err(bad(
                    "identity.version",
                    format!("the partition column `{column}` cannot be a merge's version: name a column of the rows"),
                ));
            }
        }
        match (self.job.kind, &self.aggregate) {
            (JobKind::Aggregate, None) => {
                return Err(bad("aggregate", "kind = \"aggregate\" needs an [aggregate] section with measures".into()))
            }
            (JobKind::Merge, Some(_)) => {
                return Err(bad("aggregate", "kind = \"merge\" takes no [aggregate] section".into()))
            }
            _ => {}
        }
        if let Some(m) = &self.merge {
            if self.job.kind != JobKind::Merge {
                return Err(bad("merge", "a [merge] section belongs to kind = \"merge\"".into()));
            }
            if let Some(r) = &m.tombstone_retention {
                parse_duration(r).map_err(|e| bad("merge.tombstone_retention", e))?;
            }
        }
        if let Some(agg) = &self.aggregate {
            self.validate_aggregate(agg, &bad)?;
        }
        Ok(())
    }

    fn validate_aggregate(
        &self,
        agg: &AggregateSection,
        bad: &dyn Fn(&str, String) -> ConfigError,
    ) -> Result<(), ConfigError> {
        match (&agg.sql, agg.measures.is_empty()) {
            (Some(_), false) => {
                return Err(bad(
                    "aggregate",
                    "write the daily table either as `sql` or as `measures`, not both".into(),
                ))
            }
            (None, true) => {
                return Err(bad(
                    "aggregate",
                    "needs `sql` (a query over `events`) or `measures` (see \"Writing the daily table in SQL\" in README.md)"
                        .into(),
                ))
            }
            _ => {}
        }
        if let Some(sql) = &agg.sql {
            if !agg.group_by.is_empty() {
                return Err(bad(
                    "aggregate.group_by",
                    "belongs to the `measures` shorthand; with `sql`, group in the query (GROUP BY)".into(),
                ));
            }
            if sql.trim().is_empty() {
                return Err(bad("aggregate.sql", "an empty query".into()));
            }
        }
        let mut tables: Vec<&str> = vec![EVENTS];
        for (i, t) in agg.tables.iter().enumerate() {
            let key = format!("aggregate.tables[{i}]");
            let valid = !t.name.is_empty()
                && t.name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                && !t.name.starts_with(|c: char| c.is_ascii_digit());
            if !valid {
                return Err(bad(
                    &format!("{key}.name"),
                    format!("`{}` is not a table name (letters, digits, _)", t.name),
                ));
            }
            // Unquoted names are one name whatever their case, to the engine as to the query.
            if tables.iter().any(|n| n.eq_ignore_ascii_case(&t.name)) {
                return Err(bad(&format!("{key}.name"), format!("`{}` names two tables", t.name)));
            }
            tables.push(&t.name);
            if t.url.trim().is_empty() {
                return Err(bad(&format!("{key}.url"), "must not be empty".into()));
            }
            check_csv_options(&key, &t.delimiter, t.header, t.format).map_err(|(key, m)| bad(&key, m))?;
            // The table's own files, or its run state, would feed back into what it computes:
            // each run would give other numbers.
            let state = self.output.state_url();
            for (what, url) in [("output", Some(&self.output.url)), ("run state", state.as_ref())] {
                if let Some(url) = url.filter(|u| crate::read::list::nested(&t.url, u)) {
                    return Err(bad(
                        &format!("{key}.url"),
                        format!(
                            "the lookup table `{}` at `{}` and the {what} `{url}` lie inside one another: the \
                             table's own files would be read back, and each run would give other numbers. Read \
                             lookups from a location of their own",
                            t.name, t.url
                        ),
                    ));
                }
            }
            for (col, ty) in &t.schema {
                crate::read::parse_type(ty).map_err(|m| bad(&format!("{key}.schema.{col}"), m))?;
            }
        }
        let mut names: Vec<&str> = Vec::new();
        for (i, g) in agg.group_by.iter().enumerate() {
            if names.contains(&g.as_str()) {
                return Err(bad(&format!("aggregate.group_by[{i}]"), format!("`{g}` is listed twice")));
            }
            names.push(g);
        }
        for (i, m) in agg.measures.iter().enumerate() {
            let key = format!("aggregate.measures[{i}]");
            if m.name.trim().is_empty() {
                return Err(bad(&format!("{key}.name"), "must not be empty".into()));
            }
            if names.contains(&m.name.as_str()) {
                return Err(bad(&format!("{key}.name"), format!("`{}` is used twice in the output", m.name)));
            }
            names.push(&m.name);
            if m.func.needs_column() && m.column.is_none() {
                return Err(bad(
                    &format!("{key}.column"),
                    format!("measure `{}` ({}) needs a column", m.name, m.func.name()),
                ));
            }
            match &m.filter {
                Some(Where::Sql(s)) if s.trim().is_empty() => {
                    return Err(bad(&format!("{key}.where"), "an empty condition".into()))
                }
                Some(Where::Values(cols)) => {
                    if cols.is_empty() {
                        return Err(bad(&format!("{key}.where"), "name at least one column".into()));
                    }
                    for (col, vals) in cols {
                        let k = format!("{key}.where.{col}");
                        let vals = vals.values();
                        if vals.is_empty() {
                            return Err(bad(&k, "list at least one value".into()));
                        }
                        if let Some(v) =
                            vals.iter().find(|v| matches!(v, toml::Value::Table(_) | toml::Value::Array(_)))
                        {
                            return Err(bad(
                                &k,
                                format!(
                                    "`{v}` is not a value to compare with; list values (`{col} = [\"a\", \"b\"]`), \
                                     or write the condition in SQL (`where = \"{col} > 100\"`)"
                                ),
                            ));
                        }
                    }
                }
                _ => {}
            }
        }
        if agg.group_by.iter().any(|g| g == &self.partition.column) {
            return Err(bad(
                "aggregate.group_by",
                format!("`{}` is the partition column; it is in the path already", self.partition.column),
            ));
        }
        Ok(())
    }

    pub fn is_whole_record_key(&self) -> bool {
        self.identity.key == ["*"]
    }

    pub fn timezone(&self) -> chrono_tz::Tz {
        self.job.timezone.parse().unwrap_or(chrono_tz::UTC)
    }

    /// A fingerprint of everything that decides the output's content: the job, identity,
    /// partitioning, preparation and computation. Not the store URLs or options (secrets never
    /// enter it), so moving a lake keeps its fingerprints.
    pub fn fingerprint(&self) -> String {
        #[derive(Serialize)]
        struct Decisive<'a> {
            kind: JobKind,
            timezone: &'a str,
            format: Format,
            schema: &'a BTreeMap<String, String>,
            /// CSV's delimiter and header (absent for other formats, whose fingerprints these
            /// options never changed).
            #[serde(skip_serializing_if = "Option::is_none")]
            csv: Option<(&'a str, bool)>,
            identity: &'a IdentitySection,
            partition: &'a PartitionSection,
            prepare: &'a PrepareSection,
            aggregate: &'a Option<AggregateSection>,
            #[serde(skip_serializing_if = "Option::is_none")]
            retention: Option<&'a String>,
        }
        let d = Decisive {
            kind: self.job.kind,
            timezone: &self.job.timezone,
            format: self.input.format,
            schema: &self.input.schema,
            csv: (self.input.format == Format::Csv).then_some((self.input.delimiter.as_str(), self.input.header)),
            identity: &self.identity,
            partition: &self.partition,
            prepare: &self.prepare,
            aggregate: &self.aggregate,
            retention: self.merge.as_ref().and_then(|m| m.tombstone_retention.as_ref()),
        };
        let json = serde_json::to_vec(&d).unwrap_or_default();
        hex(&Sha256::digest(&json)[..16])
    }
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The first float in config text that TOML reads as another number than the one written,
/// with its key: a double keeps about 17 significant digits, so `0.700000000000000001` reads
/// as 0.7 and `1e-400` as 0, and a value compared in a column's type (`deleted.equals`, a
/// measure's `where`) would match another value than the one written, which lakeswap could no
/// longer tell apart from what it reads. Quoted, the value is compared as written (and refused
/// where the column cannot hold it).
fn rounded_float(text: &str) -> Option<(String, String)> {
    fn walk(value: &toml::de::DeValue<'_>, key: String, at: usize, text: &str) -> Option<(String, String)> {
        match value {
            toml::de::DeValue::Float(written) => {
                let written = written.as_str();
                let read: f64 = written.replace('_', "").parse().ok()?;
                if !read.is_finite() || digits_of(written) == digits_of(&format!("{read:e}")) {
                    return None;
                }
                let line = text[..at.min(text.len())].matches('\n').count() + 1;
                let read = toml::Value::Float(read);
                Some((
                    key,
                    format!(
                        "`{written}` (line {line}) is a TOML number that reads as {read} (a TOML float keeps about \
                         17 significant digits), so it would be compared as {read}; write it in quotes, \"{written}\", \
                         to have it compared as written"
                    ),
                ))
            }
            toml::de::DeValue::Array(items) => items
                .iter()
                .enumerate()
                .find_map(|(i, item)| walk(item.get_ref(), format!("{key}[{i}]"), item.span().start, text)),
            toml::de::DeValue::Table(table) => table.iter().find_map(|(name, item)| {
                let key = match key.is_empty() {
                    true => name.get_ref().to_string(),
                    false => format!("{key}.{}", name.get_ref()),
                };
                walk(item.get_ref(), key, item.span().start, text)
            }),
            _ => None,
        }
    }
    let document = toml::de::DeTable::parse(text).ok()?;
    walk(&toml::de::DeValue::Table(document.into_inner()), String::new(), 0, text)
}

/// A decimal number's significant digits and the power of ten of its last one (`0.70` and
/// `7e-1` are both `("7", -1)`; zero is `("", 0)`); `None` for text that is not one.
fn digits_of(number: &str) -> Option<(String, i64)> {
    let number = number.replace('_', "");
    let unsigned = number.trim_start_matches(['+', '-']);
    let (mantissa, exponent) = match unsigned.split_once(['e', 'E']) {
        Some((m, e)) => (m, e.parse::<i64>().ok()?),
        None => (unsigned, 0),
    };
    let (whole, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let all = format!("{whole}{fraction}");
    if all.is_empty() || !all.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let significant = all.trim_start_matches('0');
    let trimmed = significant.trim_end_matches('0');
    if trimmed.is_empty() {
        return Some((String::new(), 0));
    }
    let power = exponent - fraction.len() as i64 + (significant.len() - trimmed.len()) as i64;
    Some((trimmed.to_string(), power))
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str = r#"
[job]
name = "t"
kind = "aggregate"
[input]
url = "in"
format = "parquet"
[identity]
key = ["order_id"]
version = "source_version"
[aggregate]
group_by = ["currency"]
measures = [{ name = "orders", fn = "count" }, { name = "revenue", fn = "sum", column = "amount", where = { status = ["placed"] } }]
[output]
url = "out"
"#;

    #[test]
    fn the_state_lives_beside_the_table() {
        for (out, state) in [
            ("out", Some("_lakeswap/out")),
            ("lake/revenue_daily/", Some("lake/_lakeswap/revenue_daily")),
            ("/data/lake/t", Some("/data/lake/_lakeswap/t")),
            ("file:///data/t", Some("file:///data/_lakeswap/t")),
            ("s3://bucket/tables/orders", Some("s3://bucket/tables/_lakeswap/orders")),
            ("s3://bucket/orders", Some("s3://bucket/_lakeswap/orders")),
            ("memory://m/out", Some("memory://m/_lakeswap/out")),
            ("s3://bucket", None),
            ("s3://bucket/", None),
            ("/", None),
            ("lake/..", None),
            ("lake/t/./", Some("lake/_lakeswap/t")),
        ] {
            assert_eq!(default_state_url(out).as_deref(), state, "{out}");
        }
        let with = |output: &str| BASE.replace("url = \"out\"", output);
        let key_of = |text: String| match JobConfig::parse(&text, "t.toml").unwrap_err() {
            ConfigError::Invalid { key, message, .. } => (key, message),
            e => panic!("{e}"),
        };
        let (key, message) = key_of(with("url = \"s3://bucket\""));
        assert_eq!(key, "output.state_url");
        assert!(message.contains("set `state_url`"), "{message}");
        for (state, why) in [
            ("out/_state", "inside one another"),
            (".", "inside one another"),
            ("in/state", "the input"),
            ("s3://bucket/state", "another kind of store"),
            ("", "must not be empty"),
        ] {
            let (key, message) = key_of(with(&format!("url = \"out\"\nstate_url = \"{state}\"")));
            assert_eq!(key, "output.state_url", "{state}");
            assert!(message.contains(why), "{state}: {message}");
        }
        // A lookup read from the table or its run state would feed each run's output into the next.
        for (lookup, what) in
            [("out", "the output"), ("out/event_date=2026-11-01", "the output"), ("_lakeswap", "run state")]
        {
            let text = BASE.replace(
                "[output]",
                &format!("[[aggregate.tables]]\nname = \"fx\"\nurl = \"{lookup}\"\nformat = \"parquet\"\n[output]"),
            );
            let (key, message) = key_of(text);
            assert_eq!(key, "aggregate.tables[0].url", "{lookup}");
            assert!(message.contains(what) && message.contains("inside one another"), "{lookup}: {message}");
        }
        let c = JobConfig::parse(&with("url = \"out\"\nstate_url = \"elsewhere/state/\""), "t.toml").unwrap();
        assert_eq!(c.output.state_url().as_deref(), Some("elsewhere/state"));
        assert_eq!(c.fingerprint(), JobConfig::parse(BASE, "t.toml").unwrap().fingerprint());
    }

    #[test]
    fn a_float_toml_rounds_as_it_reads_it_is_refused_with_its_key_and_line() {
        let with = |value: &str| BASE.replace("[output]", &format!("[merge]\nx = {value}\n[output]"));
        for written in
            ["0.700000000000000001", "1e-400", "1.0000000000000001", "1234567890123456.78", "-0.1000000000000000055"]
        {
            let e = rounded_float(&with(written)).unwrap_or_else(|| panic!("{written} accepted"));
            assert_eq!(e.0, "merge.x", "{written}");
            assert!(e.1.contains(&format!("`{written}`")) && e.1.contains("in quotes"), "{}", e.1);
            assert!(
                e.1.contains(&format!("line {}", BASE.lines().position(|l| l == "[output]").unwrap() + 2)),
                "{}",
                e.1
            );
        }
        let e = rounded_float(&with("1e-400")).unwrap().1;
        assert!(e.contains("reads as 0.0 "), "{e}");
        for exact in [
            "0.7",
            "7e-1",
            "0.70",
            "-0.0",
            "1_000.5",
            "+1.5e3",
            "0.30000000000000004",
            "nan",
            "-inf",
            "2.0",
            "1e300",
            "5e-324",
        ] {
            assert_eq!(rounded_float(&with(exact)), None, "{exact}");
        }
        // Inside inline tables and arrays, named by their place.
        let text = BASE.replace("[output]", "[merge]\nx = { y = [1.5, 0.1000000000000000001] }\n[output]");
        assert_eq!(rounded_float(&text).unwrap().0, "merge.x.y[1]");
        let e = JobConfig::parse(&BASE.replace("status = [\"placed\"", "status = [0.300000000000000001"), "t.toml");
        assert!(e.unwrap_err().to_string().contains("where.status[0]"));
    }

    #[test]
    fn parses_the_reference_shape() {
        let c = JobConfig::parse(BASE, "t.toml").unwrap();
        assert_eq!(c.aggregate.unwrap().measures[1].func, MeasureFn::Sum);
        assert_eq!(c.partition.column, "event_date");
    }

    #[test]
    fn unknown_key_is_named() {
        let text = BASE.replace("group_by", "grup_by");
        let e = JobConfig::parse(&text, "t.toml").unwrap_err().to_string();
        assert!(e.contains("grup_by"), "{e}");
    }

    #[test]
    fn a_merge_is_not_keyed_by_its_partition_column_or_the_whole_record() {
        let merge = |identity: &str| {
            format!(
                "[job]\nname = \"t\"\nkind = \"merge\"\n[input]\nurl = \"in\"\nformat = \"parquet\"\n[identity]\n{identity}\n\
                 [partition]\ncolumn = \"event_date\"\n[output]\nurl = \"out\"\n"
            )
        };
        JobConfig::parse(&merge("key = [\"id\"]\nversion = \"v\""), "t.toml").unwrap();
        for (identity, key) in [
            ("key = [\"id\", \"event_date\"]\nversion = \"v\"", "identity.key"),
            ("key = [\"id\"]\nversion = \"event_date\"", "identity.version"),
        ] {
            let e = JobConfig::parse(&merge(identity), "t.toml").unwrap_err().to_string();
            assert!(e.contains(key) && e.contains("partition column `event_date`"), "{e}");
        }
        // The whole record holds the date and the version: it failed every date at run time.
        let e = JobConfig::parse(&merge("key = [\"*\"]\nversion = \"v\""), "t.toml").unwrap_err().to_string();
        assert!(e.contains("identity.key") && e.contains("named key columns"), "{e}");
    }

    #[test]
    fn durations_are_more_than_zero_and_less_than_a_century() {
        assert_eq!(parse_duration("30d").unwrap(), chrono::Duration::days(30));
        assert!(parse_duration("0d").unwrap_err().contains("more than zero"));
        // `now - d` overflowed the clock: a panic at run time.
        assert!(parse_duration("100000000000d").unwrap_err().contains("36,500 days"));
        assert!(parse_duration("999999999999w").unwrap_err().contains("36,500 days"));
        assert!(parse_duration("36500d").is_ok());
        assert!(parse_duration("36501d").unwrap_err().contains("36,500 days"));
        assert!(parse_duration("5215w").unwrap_err().contains("36,500 days"));
        assert!(parse_duration("9223372036854775807s").is_err());
        assert!(parse_duration("30 days").unwrap_err().contains("not a duration"));
        assert!(parse_duration("99999999999999999999d").unwrap_err().contains("36,500 days"));
    }

    #[test]
    fn csv_options_belong_to_csv_and_a_whole_record_key_has_no_version() {
        let csv = BASE.replace("format = \"parquet\"", "format = \"csv\"");
        let lookup = |options: &str| {
            BASE.replace("[output]", &format!("[[aggregate.tables]]\nname = \"fx\"\nurl = \"fx\"\n{options}\n[output]"))
        };
        for (text, key) in [
            (BASE.replace("format = \"parquet\"", "format = \"parquet\"\ndelimiter = \";\""), "input.delimiter"),
            (BASE.replace("format = \"parquet\"", "format = \"ndjson\"\nheader = false"), "input.header"),
            (csv.replace("format = \"csv\"", "format = \"csv\"\ndelimiter = \"\\n\""), "input.delimiter"),
            (csv.replace("format = \"csv\"", "format = \"csv\"\ndelimiter = '\"'"), "input.delimiter"),
            // A lookup table's CSV options, by the same rules.
            (lookup("format = \"csv\"\ndelimiter = '\"'"), "aggregate.tables[0].delimiter"),
            (lookup("format = \"csv\"\ndelimiter = \";;\""), "aggregate.tables[0].delimiter"),
            (lookup("format = \"parquet\"\ndelimiter = \";\""), "aggregate.tables[0].delimiter"),
            (lookup("format = \"ndjson\"\nheader = false"), "aggregate.tables[0].header"),
            (BASE.replace("key = [\"order_id\"]", "key = [\"*\"]"), "identity.version"),
            // A version in the key: each version a key of its own, none replacing another.
            (BASE.replace("key = [\"order_id\"]", "key = [\"order_id\", \"source_version\"]"), "identity.version"),
            // A tombstone column in the key: a delete is a key of its own, deleting nothing.
            (
                BASE.replace(
                    "key = [\"order_id\"]",
                    "key = [\"order_id\", \"op\"]\ndeleted = { column = \"op\", equals = \"D\" }",
                ),
                "identity.deleted.column",
            ),
            // An empty CSV field is null: `""` would match nothing.
            (csv.replace("status = [\"placed\"]", "status = [\"\"]"), "aggregate.measures[1].where.status"),
            (
                csv.replace(
                    "version = \"source_version\"",
                    "version = \"v\"\ndeleted = { column = \"op\", equals = \"\" }",
                ),
                "identity.deleted.equals",
            ),
        ] {
            let e = JobConfig::parse(&text, "t.toml").unwrap_err().to_string();
            assert!(e.contains(key), "{text}\n{e}");
        }
        JobConfig::parse(&csv.replace("format = \"csv\"", "format = \"csv\"\ndelimiter = \"\\t\""), "t.toml").unwrap();
        JobConfig::parse(&lookup("format = \"csv\"\ndelimiter = \";\"\nheader = false"), "t.toml").unwrap();
    }

    #[test]
    fn a_file_url_names_a_path_and_a_local_folder_takes_no_options() {
        for (text, key, says) in [
            (BASE.replace("url = \"in\"", "url = \"file://tmp/in\""), "input.url", "file:///tmp/in"),
            (BASE.replace("url = \"out\"", "url = \"FILE://localhost/out\""), "output.url", "names the host `localhost`"),
            (BASE.replace("url = \"out\"", "url = \"file://localhost/tmp/out\""), "output.url", "(`file:///tmp/out`)"),
            (BASE.replace("url = \"out\"", "url = \"file:/tmp/out\""), "output.url", "is no file URL"),
            (BASE.replace("url = \"out\"", "url = \"out\"\nstate_url = \"file://st\""), "output.state_url", "file:///st"),
            (BASE.replace("url = \"in\"", "url = \"in\"\noptions = { foo = \"bar\" }"), "input.options", "foo would not be used"),
            (
                BASE.replace("url = \"out\"", "url = \"file:///out\"\noptions = { aws_region = \"x\" }"),
                "output.options",
                "local folder",
            ),
            (
                BASE.replace("[output]", "[[aggregate.tables]]\nname = \"fx\"\nurl = \"fx\"\nformat = \"csv\"\noptions = { a = \"b\" }\n[output]"),
                "aggregate.tables.options",
                "local folder",
            ),
        ] {
            let e = JobConfig::parse(&text, "t.toml").unwrap_err().to_string();
            assert!(e.contains(key) && e.contains(says), "{text}\n{e}");
        }
        for url in ["file:///tmp/in", "/tmp/in", "in"] {
            JobConfig::parse(&BASE.replace("url = \"in\"", &format!("url = \"{url}\"")), "t.toml").unwrap();
        }
        let s3 = BASE.replace("url = \"in\"", "url = \"s3://b/in\"\noptions = { aws_region = \"x\" }");
        JobConfig::parse(&s3, "t.toml").unwrap();
    }

    #[test]
    fn missing_version_says_why() {
        let text = BASE.replace("version = \"source_version\"", "");
        let e = JobConfig::parse(&text, "t.toml").unwrap_err().to_string();
        assert!(e.contains("identity.version") && e.contains("immutable = true"), "{e}");
    }

    #[test]
    fn measure_without_column_is_named() {
        let text = BASE.replace(r#"fn = "sum", column = "amount","#, r#"fn = "sum","#);
        let e = JobConfig::parse(&text, "t.toml").unwrap_err().to_string();
        assert!(e.contains("aggregate.measures[1].column"), "{e}");
        let text = BASE.replace(
            r#"name = "revenue", fn = "sum", column = "amount","#,
            r#"name = "Buyers", fn = "count_distinct","#,
        );
        let e = JobConfig::parse(&text, "t.toml").unwrap_err().to_string();
        assert!(e.contains("measure `Buyers` (count_distinct) needs a column"), "{e}");
    }

    #[test]
    fn fingerprint_ignores_urls_and_secrets() {
        let a = JobConfig::parse(BASE, "a").unwrap();
        let b = JobConfig::parse(
            &BASE.replace("url = \"out\"", "url = \"s3://x/y\"\noptions = { aws_secret_access_key = \"s\" }"),
            "b",
        )
        .unwrap();
        assert_eq!(a.fingerprint(), b.fingerprint());
        let c = JobConfig::parse(&BASE.replace("placed", "shipped"), "c").unwrap();
        assert_ne!(a.fingerprint(), c.fingerprint());
        // CSV's options decide what is read: a changed delimiter or header is another output.
        let csv = |extra: &str| {
            let t = BASE.replace("format = \"parquet\"", &format!("format = \"csv\"\n{extra}"));
            JobConfig::parse(&t, "csv").unwrap().fingerprint()
        };
        assert_ne!(csv(""), csv("delimiter = \";\""));
        assert_ne!(csv(""), csv("header = false"));
        assert_eq!(csv(""), csv("delimiter = \",\""));
    }

    #[test]
    fn a_partition_column_is_a_plain_folder_name() {
        // `día` would be the folder `d%C3%ADa=…/`: DuckDB names that column `d%C3%ADa`, pyarrow `día`.
        for bad in ["date/time", "d=", "_date", ".d", " d", "día", "d#1", "d*"] {
            let t = BASE.replace("[aggregate]", &format!("[partition]\ncolumn = \"{bad}\"\n[aggregate]"));
            let e = JobConfig::parse(&t, "t.toml").unwrap_err().to_string();
            assert!(e.contains("partition.column"), "{bad}: {e}");
        }
        for good in ["event_date", "Day-2", "d.1"] {
            let t = BASE.replace("[aggregate]", &format!("[partition]\ncolumn = \"{good}\"\n[aggregate]"));
            assert!(JobConfig::parse(&t, "t.toml").is_ok(), "{good}");
        }
    }

    /// A folder of the table's path named like its partitions gave every row, to DuckDB's
    /// `hive_partitioning` read, that folder's date.
    #[test]
    fn a_table_path_holds_no_folder_named_like_its_partitions() {
        let t = BASE.replace("url = \"out\"", "url = \"lake/event_date=2020-01-01/revenue\"");
        let e = JobConfig::parse(&t, "t.toml").unwrap_err().to_string();
        assert!(e.contains("output.url") && e.contains("`event_date=2020-01-01` named like the partitions"), "{e}");
        let t = BASE.replace("url = \"out\"", "url = \"lake/region=eu/revenue\"");
        assert!(JobConfig::parse(&t, "t.toml").is_ok());
    }

    /// A table inside another table's state location was accepted, and that table's `gc` listed
    /// its committed partitions for removal.
    #[test]
    fn a_table_is_not_kept_inside_a_state_location() {
        for url in ["lake/_lakeswap/revenue_daily/staging/x", "_lakeswap/t", "s3://b/_lakeswap/t"] {
            let t = BASE.replace("url = \"out\"", &format!("url = \"{url}\""));
            let e = JobConfig::parse(&t, "t.toml").unwrap_err().to_string();
            assert!(e.contains("output.url") && e.contains("inside a `_lakeswap/` folder"), "{url}: {e}");
        }
        let t = BASE.replace("url = \"out\"", "url = \"lake/_lakeswap_old/t\"");
        assert!(JobConfig::parse(&t, "t.toml").is_ok());
    }
}
