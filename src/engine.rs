//! The SQL engine of the daily table: Apache DataFusion runs the job's query over `events` —
//! one date's rows after prepare, every input column, the partition column included — and
//! over the lookup tables the job names (docs/design.md §2).
//!
//! The query is the user's `[aggregate] sql`, or the `measures` shorthand compiled to SQL
//! ([`compile`]): one engine, not two. Before anything runs, the query is parsed when the
//! config is loaded and planned against the input's schema ([`plan`]): a syntax error, an
//! unknown table, column or function, a type error, a statement that is not a query, a
//! non-deterministic function (`random()`, `now()`, `uuid()` …: a re-run must give the same
//! bytes), an output column named like the partition column — each is refused with the
//! engine's reason, its line and column.
//!
//! Invariants (G2): the engine runs with one partition per query, so no result depends on
//! thread timing (float sums included: rows reach it in row order); rows come out sorted by
//! the query's `ORDER BY`, else by every output column. The shorthand's sums are computed in a
//! type they cannot overflow (decimal(76) for decimals, decimal(38) for integers) and then
//! narrowed exactly to the documented type, or fail naming the measure.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, RecordBatch};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::catalog::MemTable;
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::error::DataFusionError;
use datafusion::execution::context::SQLOptions;
use datafusion::logical_expr::{Expr, LogicalPlan, Volatility};
use datafusion::prelude::{SessionConfig, SessionContext};

use crate::config::{AggregateSection, MeasureFn, Where};
use crate::error::PartitionError;
use crate::lineage::InputObject;

pub use crate::config::EVENTS;

/// A lookup table, read once per run.
#[derive(Debug, Clone)]
pub struct Lookup {
    pub name: String,
    pub schema: SchemaRef,
    pub batches: Vec<RecordBatch>,
    /// Its objects, for every partition's lineage.
    pub inputs: Vec<InputObject>,
}

/// A query the engine runs for each date.
#[derive(Debug, Clone)]
pub struct Query {
    pub sql: String,
    /// Whether the query orders its rows itself (`ORDER BY`); else they are sorted by every
    /// output column.
    pub ordered: bool,
    /// Shorthand measures whose results are narrowed exactly after the engine: column,
    /// documented type.
    pub narrow: Vec<(String, DataType)>,
    /// Shorthand measures that are never null (`count`, `sum` over no rows is 0).
    pub not_null: Vec<String>,
}

/// Parses SQL text (syntax only), as the config is loaded.
pub fn parse(sql: &str) -> Result<(), String> {
    let statements = datafusion::sql::parser::DFParser::parse_sql(sql).map_err(|e| reason(&e, sql))?;
    if statements.len() != 1 {
        return Err(format!("write one query (a SELECT over `{EVENTS}`), not {} statements", statements.len()));
    }
    Ok(())
}

/// The engine's reason, with the line and column it points at when it has them.
fn reason(e: &DataFusionError, _sql: &str) -> String {
    let mut msg = e.to_string();
    for prefix in ["SQL error: ", "Error during planning: ", "Schema error: ", "sql parser error: "] {
        if let Some(rest) = msg.strip_prefix(prefix) {
            msg = rest.to_string();
        }
    }
    if let Some(span) = e.diagnostic().and_then(|d| d.span) {
        if span.start.line > 0 && !msg.contains("Line:") {
            msg = format!("{msg} (at line {}, column {})", span.start.line, span.start.column);
        }
    }
    msg
}

/// A session for one query: one partition (deterministic results), no information schema.
fn session() -> SessionContext {
    SessionContext::new_with_config(config())
}

/// A session whose operators hold at most `memory.0` bytes, spilling to files in `memory.1`
/// beyond that (an aggregation with many groups, the final sort).
fn session_within(memory: &Memory) -> Result<SessionContext, DataFusionError> {
    use datafusion::execution::disk_manager::{DiskManagerBuilder, DiskManagerMode};
    let runtime = datafusion::execution::runtime_env::RuntimeEnvBuilder::new()
        .with_memory_pool(Arc::new(datafusion::execution::memory_pool::FairSpillPool::new(memory.bytes)))
        .with_disk_manager_builder(
            DiskManagerBuilder::default().with_mode(DiskManagerMode::Directories(vec![memory.spill_dir.clone()])),
        )
        .build_arc()?;
    Ok(SessionContext::new_with_config_rt(config(), runtime))
}

/// What the engine may hold while running one query, and where it spills beyond that.
#[derive(Debug, Clone)]
pub struct Memory {
    pub bytes: usize,
    pub spill_dir: std::path::PathBuf,
}

fn config() -> SessionConfig {
    SessionConfig::new()
        .with_target_partitions(1)
        .with_information_schema(false)
        .with_batch_size(8192)
        // Spans in the engine's errors: their line and column.
        .set_bool("datafusion.sql_parser.collect_spans", true)
}

fn options() -> SQLOptions {
    SQLOptions::new().with_allow_ddl(false).with_allow_dml(false).with_allow_statements(false)
}

fn register(
    ctx: &SessionContext,
    name: &str,
    schema: SchemaRef,
    batches: Vec<RecordBatch>,
) -> Result<(), DataFusionError> {
    let table = MemTable::try_new(schema, vec![batches])?;
    ctx.register_table(name, Arc::new(table))?;
    Ok(())
}

/// Whether the plan orders its output (an `ORDER BY` at the top, under projections and limits).
fn orders_output(plan: &LogicalPlan) -> bool {
    match plan {
        LogicalPlan::Sort(_) => true,
        LogicalPlan::Projection(p) => orders_output(&p.input),
        LogicalPlan::Limit(l) => orders_output(&l.input),
        LogicalPlan::SubqueryAlias(a) => orders_output(&a.input),
        _ => false,
    }
}

/// The first function in the plan whose result can change from one run to the next.
fn non_deterministic(plan: &LogicalPlan) -> Option<String> {
    let mut found = None;
    let _ = plan.apply_with_subqueries(|node| {
        node.apply_expressions(|e| {
            e.apply(|e| {
                let (name, volatility) = match e {
                    Expr::ScalarFunction(f) => (f.func.name().to_string(), f.func.signature().volatility),
                    Expr::AggregateFunction(f) => (f.func.name().to_string(), f.func.signature().volatility),
                    _ => return Ok(TreeNodeRecursion::Continue),
                };
                if volatility != Volatility::Immutable {
                    found = Some(name);
                    return Ok(TreeNodeRecursion::Stop);
                }
                Ok(TreeNodeRecursion::Continue)
            })
        })?;
        Ok(if found.is_some() { TreeNodeRecursion::Stop } else { TreeNodeRecursion::Continue })
    });
    found
}

/// Plans `query` against the schema of `events` and the lookups: its output schema and its
/// plan as text (for `--dry-run`), or why it is refused.
pub async fn plan(
    query: &Query,
    events: &SchemaRef,
    lookups: &[Lookup],
    partition_column: &str,
) -> Result<(SchemaRef, String), String> {
    let ctx = session();
    register(&ctx, EVENTS, events.clone(), Vec::new()).map_err(|e| reason(&e, &query.sql))?;
    for l in lookups {
        register(&ctx, &l.name, l.schema.clone(), Vec::new()).map_err(|e| reason(&e, &query.sql))?;
    }
    let df = ctx.sql_with_options(&query.sql, options()).await.map_err(|e| reason(&e, &query.sql))?;
    let plan = df.logical_plan().clone();
    if let Some(f) = non_deterministic(&plan) {
        return Err(format!(
            "`{f}` gives another result on every run; a re-run must give the same bytes. Compute the value \
             in the input, or use a lookup table"
        ));
    }
    let schema = Arc::new(df.schema().as_arrow().clone());
    let mut seen = std::collections::HashSet::new();
    for f in schema.fields() {
        if f.name() == partition_column {
            return Err(format!(
                "the query outputs a column `{partition_column}`: that is the partition column, which lives in the \
                 path; drop it from the SELECT"
            ));
        }
        if !seen.insert(f.name().clone()) {
            return Err(format!("the query outputs two columns named `{}`; give them distinct names (AS)", f.name()));
        }
    }
    let shaped = shape_schema(query, &schema);
    let text = df.logical_plan().display_indent().to_string();
    Ok((shaped, text))
}

/// The output schema after the shorthand's narrowing.
fn shape_schema(query: &Query, schema: &SchemaRef) -> SchemaRef {
    let fields: Vec<Field> = schema
        .fields()
        .iter()
        .map(|f| {
            let ty = query.narrow.iter().find(|(n, _)| n == f.name()).map(|(_, t)| t.clone());
            let nullable = f.is_nullable() && !query.not_null.contains(f.name());
            Field::new(f.name(), ty.unwrap_or_else(|| f.data_type().clone()), nullable)
        })
        .collect();
    Arc::new(Schema::new(fields))
}

/// One date's rows for the query: the prepared table's chunks, which rows of each are kept
/// (the winners), the date (added as the partition column when the objects do not hold it),
/// and the schema of `events`.
pub struct Rows {
    pub source: Source,
    pub date: chrono::NaiveDate,
    pub events: SchemaRef,
}

/// Where a date's rows come from.
pub enum Source {
    /// The prepared table's chunks in memory, and which rows of each are kept.
    Chunks { chunks: Vec<RecordBatch>, keep: Vec<arrow::array::BooleanArray> },
    /// The kept rows of a spilled partition: files of winners merged back into input order
    /// as the engine scans them (`record`: their schema; [`crate::spill::merged`]).
    Spilled { record: SchemaRef, files: Vec<std::path::PathBuf> },
}

/// A spilled partition's winners as a table's only partition: every scan (a query may read
/// `events` more than once) merges the files again.
#[derive(Debug)]
struct Spilled {
    schema: SchemaRef,
    record: SchemaRef,
    files: Vec<std::path::PathBuf>,
}

impl datafusion::physical_plan::streaming::PartitionStream for Spilled {
    fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    fn execute(&self, _: Arc<datafusion::execution::TaskContext>) -> datafusion::execution::SendableRecordBatchStream {
        use futures::StreamExt;
        let schema = self.schema.clone();
        let stream = crate::spill::merged(self.files.clone(), self.record.clone()).map(move |b| {
            let b = b.map_err(|e| DataFusionError::External(Box::new(e)))?;
            let mut cols = b.columns().to_vec();
            cols.push(Arc::new(arrow::array::BooleanArray::from(vec![true; b.num_rows()])));
            RecordBatch::try_new(schema.clone(), cols).map_err(DataFusionError::from)
        });
        Box::pin(datafusion::physical_plan::stream::RecordBatchStreamAdapter::new(self.schema.clone(), stream))
    }
}

/// The hidden column of the kept rows.
const KEEP: &str = "__lakeswap_keep";

/// Registers `events` as a view over the chunks: the kept rows, the columns of `events`. The
/// engine filters and projects as it scans, one chunk at a time, only the columns the query
/// uses — no copy of the whole date.
async fn register_events(ctx: &SessionContext, rows: Rows) -> Result<(), DataFusionError> {
    let Rows { source, date, events } = rows;
    let with_keep = |record: &Schema| {
        let mut fields: Vec<Field> = record.fields().iter().map(|f| f.as_ref().clone().with_nullable(true)).collect();
        fields.push(Field::new(KEEP, DataType::Boolean, false));
        Arc::new(Schema::new(fields))
    };
    let record = match source {
        Source::Chunks { chunks, keep } => {
            let record = chunks.first().map(|c| c.schema());
            let record = record.unwrap_or_else(|| {
                Arc::new(Schema::new(
                    events.fields().iter().filter(|f| f.data_type() != &DataType::Null).cloned().collect::<Vec<_>>(),
                ))
            });
            let schema = with_keep(&record);
            let batches: Vec<RecordBatch> = chunks
                .into_iter()
                .zip(keep)
                .map(|(c, k)| {
                    let mut cols = c.columns().to_vec();
                    cols.push(Arc::new(k));
                    RecordBatch::try_new(schema.clone(), cols).map_err(DataFusionError::from)
                })
                .collect::<Result<_, _>>()?;
            register(ctx, "__lakeswap_rows", schema, batches)?;
            record
        }
        Source::Spilled { record, files } => {
            let schema = with_keep(&record);
            let spilled = Spilled { schema: schema.clone(), record: record.clone(), files };
            let table = datafusion::catalog::streaming::StreamingTable::try_new(schema, vec![Arc::new(spilled)])?;
            ctx.register_table("__lakeswap_rows", Arc::new(table))?;
            record
        }
    };
    let col = |n: &str| Expr::Column(datafusion::common::Column::new_unqualified(n));
    let select: Vec<Expr> = events
        .fields()
        .iter()
        .map(|f| match record.field_with_name(f.name()) {
            Ok(_) => col(f.name()),
            Err(_) => {
                datafusion::prelude::lit(datafusion::common::ScalarValue::Date32(Some(crate::dates::to_days(date))))
                    .alias(f.name())
            }
        })
        .collect();
    let view = ctx.table("__lakeswap_rows").await?.filter(col(KEEP))?.select(select)?;
    ctx.register_table(EVENTS, view.into_view())?;
    Ok(())
}

/// Runs the query over one date's rows: the output, sorted (see the module documentation).
pub async fn execute(
    query: &Query,
    rows: Rows,
    lookups: &[Lookup],
    memory: Option<&Memory>,
) -> Result<RecordBatch, PartitionError> {
    let fail = |e: DataFusionError| match e.find_root() {
        DataFusionError::External(inner) if inner.downcast_ref::<PartitionError>().is_some() => {
            PartitionError::Other(inner.to_string())
        }
        DataFusionError::ResourcesExhausted(m) => PartitionError::Other(format!(
            "the daily table's query needs more memory than its share of --memory-limit (half of it) and cannot \
             spill what it holds ({m}); raise the limit"
        )),
        _ => PartitionError::Query { message: reason(&e, &query.sql) },
    };
    let ctx = match memory {
        Some(m) => session_within(m).map_err(fail)?,
        None => session(),
    };
    register_events(&ctx, rows).await.map_err(fail)?;
    for l in lookups {
        register(&ctx, &l.name, l.schema.clone(), l.batches.clone()).map_err(fail)?;
    }
    let mut df = ctx.sql_with_options(&query.sql, options()).await.map_err(fail)?;
    if !query.ordered && !orders_output(df.logical_plan()) {
        let by = df
            .schema()
            .fields()
            .iter()
            .map(|f| Expr::Column(datafusion::common::Column::new_unqualified(f.name())).sort(true, true))
            .collect();
        df = df.sort(by).map_err(fail)?;
    }
    let schema = Arc::new(df.schema().as_arrow().clone());
    // A task of its own: the dates in flight are polled by one task, and their queries would
    // otherwise take turns on one thread.
    let out = Owned(tokio::spawn(df.collect()))
        .await
        .map_err(|e| match e.try_into_panic() {
            Ok(panic) => {
                let why = panic.downcast_ref::<&str>().map(|s| s.to_string());
                let why = why.or_else(|| panic.downcast_ref::<String>().cloned()).unwrap_or_default();
                PartitionError::Other(format!("the engine failed running the query (a panic: {why})"))
            }
            Err(e) => PartitionError::Other(format!("the query was cancelled: {e}")),
        })?
        .map_err(fail)?;
    let batch =
        arrow::compute::concat_batches(&schema, &out).map_err(|e| PartitionError::Query { message: e.to_string() })?;
    shape(query, batch)
}

/// A task spawned for a date's query, cancelled when dropped: a stopped run drops the date's
/// future, and the query goes with it rather than run on unowned.
struct Owned<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for Owned<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl<T> std::future::Future for Owned<T> {
    type Output = Result<T, tokio::task::JoinError>;

    fn poll(mut self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<Self::Output> {
        std::pin::Pin::new(&mut self.0).poll(cx)
    }
}

/// Narrows the shorthand's exact sums to their documented types and marks its never-null
/// measures; a sum that does not fit fails naming the measure.
fn shape(query: &Query, batch: RecordBatch) -> Result<RecordBatch, PartitionError> {
    let schema = shape_schema(query, &batch.schema());
    let mut columns: Vec<ArrayRef> = Vec::with_capacity(batch.num_columns());
    for (f, c) in schema.fields().iter().zip(batch.columns()) {
        if c.data_type() == f.data_type() {
            columns.push(c.clone());
            continue;
        }
        let overflow = |what: &str| PartitionError::Overflow {
            measure: f.name().clone(),
            message: format!("the sum leaves the range of {what}; the input holds values too large to add up exactly"),
        };
        let narrowed = match f.data_type() {
            DataType::Decimal128(p, s) => {
                let wide = c.as_primitive::<arrow::datatypes::Decimal256Type>();
                let limit = arrow::datatypes::i256::from_i128(10i128.pow(*p as u32));
                let mut out = Vec::with_capacity(wide.len());
                for i in 0..wide.len() {
                    if wide.is_null(i) {
                        out.push(None);
                        continue;
                    }
                    let v = wide.value(i);
                    if v >= limit || v <= -limit {
                        return Err(overflow(&format!("decimal({p})")));
                    }
                    out.push(v.to_i128());
                }
                let a = arrow::array::Decimal128Array::from(out)
                    .with_precision_and_scale(*p, *s)
                    .map_err(|e| PartitionError::Query { message: e.to_string() })?;
                Arc::new(a) as ArrayRef
            }
            DataType::Int64 => {
                let wide = c.as_primitive::<arrow::datatypes::Decimal128Type>();
                let mut out = Vec::with_capacity(wide.len());
                for i in 0..wide.len() {
                    if wide.is_null(i) {
                        out.push(None);
                        continue;
                    }
                    out.push(Some(i64::try_from(wide.value(i)).map_err(|_| overflow("int64"))?));
                }
                Arc::new(arrow::array::Int64Array::from(out)) as ArrayRef
            }
            _ => {
                arrow::compute::cast(c, f.data_type()).map_err(|e| PartitionError::Query { message: e.to_string() })?
            }
        };
        columns.push(narrowed);
    }
    RecordBatch::try_new(schema, columns).map_err(|e| PartitionError::Query { message: e.to_string() })
}

/// `"name"`, quoted for SQL.
pub fn ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// A value of the config as a SQL literal of a column's type, exactly: `0.7` for a
/// decimal(12,2) column is `CAST('0.70' AS DECIMAL(12,2))`; a value the column can never hold
/// is refused.
fn literal(v: &toml::Value, column: &str, ty: &DataType, tz: chrono_tz::Tz) -> Result<String, String> {
    let text = match v {
        toml::Value::String(s) => s.clone(),
        toml::Value::Datetime(d) => d.to_string(),
        other => other.to_string(),
    };
    let never = |why: String| format!("`{text}` can never equal a value of column `{column}` ({ty}): {why}");
    let base = crate::read::unify::base(ty).clone();
    let quoted = |s: &str| format!("'{}'", s.replace('\'', "''"));
    let sql = match &base {
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => {
            if !matches!(v, toml::Value::String(_)) {
                return Err(never("the column holds text; quote the value".into()));
            }
            quoted(&text)
        }
        DataType::Boolean => match v {
            toml::Value::Boolean(b) => b.to_string().to_uppercase(),
            _ => return Err(never("write true or false".into())),
        },
        t if t.is_integer() || t.is_floating() || matches!(t, DataType::Decimal128(..) | DataType::Date32) => {
            let declared = crate::read::Declared::plain(match t {
                DataType::Date32 => DataType::Date32,
                t if t.is_integer() => DataType::Int64,
                t if t.is_floating() => DataType::Float64,
                t => t.clone(),
            });
            let parsed =
                crate::read::text::parse_column(&arrow::array::StringArray::from(vec![text.as_str()]), &declared, tz);
            if let Some((_, why)) = parsed.bad.first() {
                return Err(never(why.clone()));
            }
            match t {
                DataType::Date32 => format!("DATE {}", quoted(&text)),
                DataType::Decimal128(p, s) => format!("CAST({} AS DECIMAL({p},{s}))", quoted(&text)),
                t if t.is_integer() => {
                    let n = parsed.array.as_primitive::<arrow::datatypes::Int64Type>().value(0);
                    // A value outside the column's type can never match it.
                    let fits =
                        arrow::compute::cast(&(Arc::new(arrow::array::Int64Array::from(vec![n])) as ArrayRef), t)
                            .is_ok_and(|a| a.null_count() == 0);
                    if !fits {
                        return Err(never("out of the column's range".into()));
                    }
                    n.to_string()
                }
                _ => format!("CAST({} AS DOUBLE)", quoted(&text)),
            }
        }
        other => {
            return Err(never(format!(
                "values of type {other} cannot be listed; write the condition in SQL (`where = \"{column} = ...\"`)"
            )))
        }
    };
    Ok(sql)
}

/// The `measures` shorthand as SQL over `events` (`record`: the columns of `events`), or the
/// config key and the reason it cannot be compiled.
pub fn compile(agg: &AggregateSection, record: &Schema, tz: chrono_tz::Tz) -> Result<Query, (String, String)> {
    let type_of = |key: &str, c: &str| {
        record.field_with_name(c).map(|f| f.data_type().clone()).map_err(|_| {
            let names: Vec<&str> = record.fields().iter().map(|f| f.name().as_str()).collect();
            (key.to_string(), format!("no column `{c}` in the input (it has: {})", names.join(", ")))
        })
    };
    let mut select: Vec<String> = Vec::new();
    for (i, g) in agg.group_by.iter().enumerate() {
        type_of(&format!("aggregate.group_by[{i}]"), g)?;
        select.push(ident(g));
    }
    let mut narrow = Vec::new();
    let mut not_null = Vec::new();
    for (i, m) in agg.measures.iter().enumerate() {
        let key = format!("aggregate.measures[{i}]");
        let filter = match &m.filter {
            None => None,
            Some(Where::Sql(s)) => Some(format!("({s})")),
            Some(Where::Values(cols)) => {
                let mut parts = Vec::new();
                for (c, vals) in cols {
                    let k = format!("{key}.where.{c}");
                    let ty = type_of(&k, c)?;
                    let lits: Vec<String> = vals
                        .values()
                        .iter()
                        .map(|v| literal(v, c, &ty, tz))
                        .collect::<Result<_, _>>()
                        .map_err(|m| (k.clone(), m))?;
                    parts.push(format!("{} IN ({})", ident(c), lits.join(", ")));
                }
                Some(format!("({})", parts.join(" AND ")))
            }
        };
        let col = match &m.column {
            Some(c) => Some((ident(c), type_of(&format!("{key}.column"), c)?)),
            None => None,
        };
        let with_filter = |agg: String| match &filter {
            Some(f) => format!("{agg} FILTER (WHERE {f})"),
            None => agg,
        };
        let expr = match (m.func, &col) {
            (MeasureFn::Count, None) => with_filter("count(*)".into()),
            (MeasureFn::Count, Some((c, _))) => with_filter(format!("count({c})")),
            (MeasureFn::CountDistinct, Some((c, _))) => match &filter {
                Some(f) => format!("count(DISTINCT CASE WHEN {f} THEN {c} END)"),
                None => format!("count(DISTINCT {c})"),
            },
            (MeasureFn::Sum, Some((c, ty))) => {
                let (wide, out) = match crate::read::unify::base(ty) {
                    DataType::Decimal128(_, s) => (format!("DECIMAL(76,{s})"), DataType::Decimal128(38, *s)),
                    t if t.is_integer() => ("DECIMAL(38,0)".to_string(), DataType::Int64),
                    t if t.is_floating() => ("DOUBLE".to_string(), DataType::Float64),
                    t => {
                        return Err((
                            format!("{key}.column"),
                            format!("measure `{}`: sum needs a decimal, integer or float column, not {t}", m.name),
                        ))
                    }
                };
                if out != DataType::Float64 {
                    narrow.push((m.name.clone(), out));
                }
                format!("coalesce({}, CAST(0 AS {wide}))", with_filter(format!("sum(CAST({c} AS {wide}))")))
            }
            (MeasureFn::Avg, Some((c, _))) => with_filter(format!("avg({c})")),
            (MeasureFn::Min, Some((c, _))) => with_filter(format!("min({c})")),
            (MeasureFn::Max, Some((c, _))) => with_filter(format!("max({c})")),
            (_, None) => return Err((format!("{key}.column"), format!("measure `{}` needs a column", m.name))),
        };
        if matches!(m.func, MeasureFn::Count | MeasureFn::CountDistinct | MeasureFn::Sum) {
            not_null.push(m.name.clone());
        }
        select.push(format!("{expr} AS {}", ident(&m.name)));
    }
    let mut sql = format!("SELECT {} FROM {EVENTS}", select.join(", "));
    if agg.group_by.is_empty() {
        // One row for the date, none for a date without rows (an empty partition).
        sql += " HAVING count(*) > 0";
    } else {
        let g: Vec<String> = agg.group_by.iter().map(|g| ident(g)).collect();
        let order: Vec<String> = g.iter().map(|g| format!("{g} ASC NULLS FIRST")).collect();
        sql += &format!(" GROUP BY {} ORDER BY {}", g.join(", "), order.join(", "));
    }
    Ok(Query { sql, ordered: true, narrow, not_null })
}

/// The job's query: its SQL, or the shorthand compiled.
pub fn query_of(agg: &AggregateSection, record: &Schema, tz: chrono_tz::Tz) -> Result<Query, (String, String)> {
    match &agg.sql {
        Some(sql) => Ok(Query { sql: sql.clone(), ordered: false, narrow: Vec::new(), not_null: Vec::new() }),
        None => compile(agg, record, tz),
    }
}

#[cfg(test)]
mod tests {
    use super::Owned;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_dropped_query_task_is_cancelled() {
        // A task that has started and waits: dropping its handle drops its future (the
        // sender), which the receiver sees at once.
        let (started_tx, started_rx) = tokio::sync::oneshot::channel::<()>();
        let (held_tx, held_rx) = tokio::sync::oneshot::channel::<()>();
        let task = Owned(tokio::spawn(async move {
            let _held = held_tx;
            let _ = started_tx.send(());
            std::future::pending::<()>().await;
        }));
        started_rx.await.unwrap();
        drop(task);
        let gone = tokio::time::timeout(Duration::from_secs(10), held_rx).await;
        assert!(matches!(gone, Ok(Err(_))), "the task ran on after its handle was dropped");
        // Awaited, a task runs to its end.
        let done = Arc::new(AtomicBool::new(false));
        let flag = done.clone();
        Owned(tokio::spawn(async move { flag.store(true, Ordering::SeqCst) })).await.unwrap();
        assert!(done.load(Ordering::SeqCst));
    }
}
