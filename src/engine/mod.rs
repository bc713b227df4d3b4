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
//! thread timing (float sums included: rows reach it in row order); a date that has a second
//! core to itself may split its query in two by group, each group wholly in one half and its
//! rows in the same order (`split`), which changes no byte; rows come out sorted by
//! the query's `ORDER BY`, else by every output column. The shorthand's sums are computed in a
//! type they cannot overflow (decimal(76) for decimals, decimal(38) for integers) and then
//! narrowed exactly to the documented type, or fail naming the measure; the user's own sums
//! are added in a type they cannot leave where theirs could wrap, and checked on the way back
//! (`engine/sums.rs`), and timestamp literals read in the job's zone (`engine/zones.rs`).

mod aggregates;
mod distinct;
mod floats;
mod in_order;
mod intervals;
mod mean;
mod sums;
mod unlike;
mod zones;

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, BooleanArray, RecordBatch};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::catalog::MemTable;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
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

/// The type a column has in the query: a zoned timestamp is shown in the job's zone `tz`
/// (the same instants), so that hours, days and zone-less literals read the job's clock.
pub fn in_job_zone(t: &DataType, tz: chrono_tz::Tz) -> DataType {
    match t {
        DataType::Timestamp(unit, Some(_)) => DataType::Timestamp(*unit, Some(tz.name().into())),
        other => other.clone(),
    }
}

/// A lookup table's rows with their zoned timestamps in the job's zone ([`in_job_zone`]), and
/// one zero and one NaN in its float columns, as in `events`.
pub fn lookup_in_job_zone(
    schema: &SchemaRef,
    batches: Vec<RecordBatch>,
    tz: chrono_tz::Tz,
) -> Result<(SchemaRef, Vec<RecordBatch>), arrow::error::ArrowError> {
    let fields: Vec<Field> =
        schema.fields().iter().map(|f| f.as_ref().clone().with_data_type(in_job_zone(f.data_type(), tz))).collect();
    let zoned = Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone()));
    let batches = batches
        .into_iter()
        .map(|b| {
            let columns = b
                .columns()
                .iter()
                .zip(zoned.fields())
                .map(|(c, f)| arrow::compute::cast(c, f.data_type()).map(|c| crate::prepare::one_zero_one_nan(&c)))
                .collect::<Result<Vec<_>, _>>()?;
            RecordBatch::try_new(zoned.clone(), columns)
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok((zoned, batches))
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
    /// The job's zone: a timestamp the query makes from an epoch is an instant in it.
    pub zone: Option<String>,
}

/// Parses SQL text (syntax only), as the config is loaded.
pub fn parse(sql: &str) -> Result<(), String> {
    let statements = datafusion::sql::parser::DFParser::parse_sql(sql).map_err(|e| reason(&e, sql))?;
    if statements.len() != 1 {
        return Err(format!("write one query (a SELECT over `{EVENTS}`), not {} statements", statements.len()));
    }
    for statement in &statements {
        use datafusion::sql::sqlparser::ast::{Statement, Visit};
        let datafusion::sql::parser::Statement::Statement(query) = statement else {
            return Err(format!("write one query (a SELECT over `{EVENTS}`), not `{statement}`"));
        };
        if !matches!(query.as_ref(), Statement::Query(_)) {
            return Err(format!("write one query (a SELECT over `{EVENTS}`), not `{query}`"));
        }
        let mut names = Unnamed::default();
        if let std::ops::ControlFlow::Break(e) = query.visit(&mut names) {
            return Err(format!(
                "the column `{e}` has no name of its own (the engine would call it by its text); name it: \
                 `{e} AS some_name`"
            ));
        }
        if let std::ops::ControlFlow::Break(cast) = query.visit(&mut ZonedCasts) {
            return Err(format!(
                "`{cast}` asks for a timestamp with a time zone, which the engine makes a zone-less one (UTC's \
                 wall-clock time, read as the job's): a timestamp that names an instant is one in the job's zone \
                 already, so use it as it is; text with an offset is read as the instant it names where it meets \
                 one (`ts = CAST(s AS TIMESTAMP)`, `ts < to_timestamp(s)`)"
            ));
        }
        if let std::ops::ControlFlow::Break(sample) = query.visit(&mut Samples) {
            return Err(format!(
                "`{sample}` picks rows at random, and the engine would not apply it (it reads every row); a \
                 re-run must give the same bytes: filter rows by a value instead (WHERE …)"
            ));
        }
    }
    statements.iter().try_for_each(unlike::unlike_syntax)?;
    statements.iter().try_for_each(unlike::unlike_set_operations)
}

/// Finds a column without a name of its own (an expression without `AS`, or `VALUES`) in the
/// output of any query whose columns can reach the file: the whole query, a subquery in `FROM`
/// and a `WITH` query (through `*` or a column named by the engine's text), unless a column list
/// names them (`AS t(a, b)`, `WITH c(a, b)`). A subquery inside an expression outputs no column.
#[derive(Default)]
struct Unnamed {
    /// Queries whose column names reach no output (by address).
    exempt: std::collections::HashSet<usize>,
}

impl Unnamed {
    fn exempt(&mut self, q: &datafusion::sql::sqlparser::ast::Query) {
        self.exempt.insert(q as *const _ as usize);
    }
}

impl datafusion::sql::sqlparser::ast::Visitor for Unnamed {
    type Break = String;

    fn pre_visit_query(&mut self, q: &datafusion::sql::sqlparser::ast::Query) -> std::ops::ControlFlow<String> {
        for cte in q.with.iter().flat_map(|w| &w.cte_tables) {
            if !cte.alias.columns.is_empty() {
                self.exempt(&cte.query);
            }
        }
        match self.exempt.contains(&(q as *const _ as usize)) {
            true => std::ops::ControlFlow::Continue(()),
            false => unnamed_output(&q.body).map_or(std::ops::ControlFlow::Continue(()), std::ops::ControlFlow::Break),
        }
    }

    fn pre_visit_table_factor(
        &mut self,
        t: &datafusion::sql::sqlparser::ast::TableFactor,
    ) -> std::ops::ControlFlow<String> {
        if let datafusion::sql::sqlparser::ast::TableFactor::Derived { subquery, alias: Some(a), .. } = t {
            if !a.columns.is_empty() {
                self.exempt(subquery);
            }
        }
        std::ops::ControlFlow::Continue(())
    }

    fn pre_visit_expr(&mut self, e: &datafusion::sql::sqlparser::ast::Expr) -> std::ops::ControlFlow<String> {
        use datafusion::sql::sqlparser::ast::Expr;
        match e {
            Expr::Subquery(q) | Expr::InSubquery { subquery: q, .. } | Expr::Exists { subquery: q, .. } => {
                self.exempt(q)
            }
            _ => {}
        }
        std::ops::ControlFlow::Continue(())
    }
}

/// The first column of a query's own output that it does not name: an expression without `AS`
/// (a bare column keeps its name), or a `VALUES` row.
fn unnamed_output(body: &datafusion::sql::sqlparser::ast::SetExpr) -> Option<String> {
    use datafusion::sql::sqlparser::ast::{Expr, SelectItem, SetExpr};
    fn bare(e: &Expr) -> bool {
        match e {
            Expr::Identifier(_) | Expr::CompoundIdentifier(_) => true,
            Expr::Nested(inner) => bare(inner),
            _ => false,
        }
    }
    match body {
        SetExpr::Select(s) => s.projection.iter().find_map(|item| match item {
            SelectItem::UnnamedExpr(e) if !bare(e) => Some(e.to_string()),
            _ => None,
        }),
        SetExpr::Query(q) => unnamed_output(&q.body),
        // The first query of a UNION names the columns.
        SetExpr::SetOperation { left, .. } => unnamed_output(left),
        SetExpr::Values(v) => Some(format!("{v}")),
        _ => None,
    }
}

/// Finds a cast to a timestamp with a time zone (`CAST(x AS TIMESTAMPTZ)`, `x::TIMESTAMP WITH
/// TIME ZONE`). The engine, given no session zone, makes it a zone-less timestamp; a literal so
/// typed (`TIMESTAMPTZ '…'`) is read as the instant it names where it meets one.
struct ZonedCasts;

impl datafusion::sql::sqlparser::ast::Visitor for ZonedCasts {
    type Break = String;

    fn pre_visit_expr(&mut self, e: &datafusion::sql::sqlparser::ast::Expr) -> std::ops::ControlFlow<String> {
        use datafusion::sql::sqlparser::ast::{DataType, Expr, TimezoneInfo};
        match e {
            Expr::Cast { data_type: DataType::Timestamp(_, TimezoneInfo::WithTimeZone | TimezoneInfo::Tz), .. } => {
                std::ops::ControlFlow::Break(e.to_string())
            }
            _ => std::ops::ControlFlow::Continue(()),
        }
    }
}

/// Finds a `TABLESAMPLE` in a query.
struct Samples;

impl datafusion::sql::sqlparser::ast::Visitor for Samples {
    type Break = String;

    fn pre_visit_table_factor(
        &mut self,
        t: &datafusion::sql::sqlparser::ast::TableFactor,
    ) -> std::ops::ControlFlow<String> {
        use datafusion::sql::sqlparser::ast::{TableFactor, TableSampleKind};
        match t {
            TableFactor::Table { sample: Some(s), .. } | TableFactor::Derived { sample: Some(s), .. } => {
                let (TableSampleKind::BeforeTableAlias(s) | TableSampleKind::AfterTableAlias(s)) = s;
                std::ops::ControlFlow::Break(s.to_string())
            }
            _ => std::ops::ControlFlow::Continue(()),
        }
    }
}

/// Said of an engine error about a column of type Null.
pub const NULL_HINT: &str = ". A column read from text whose every value is empty has no type of its own (Null): \
                             declare its type in [input.schema]";

/// Arrow's "Cannot cast timezone to different timezone", said of what it means here.
const SKIPPED_TIME: &str = "a wall-clock time (a timestamp without a zone) is taken as an instant in a time zone \
     (the job's, or one the query casts to), and one of its values is a time the clocks there skip or repeat (when \
     summer time starts or ends): it names no one instant. Compare wall-clock times with wall-clock times, or \
     correct the value";

/// The engine's reason, with the line and column it points at when it has them.
fn reason(e: &DataFusionError, _sql: &str) -> String {
    // A rule's refusal (an analyzer's, an optimizer's: "type_coercion", "Optimizer rule
    // 'simplify_expressions' failed"): the reason, not the rule's name.
    let mut e = e;
    while let DataFusionError::Context(_, inner) = e {
        e = inner.as_ref();
    }
    let mut msg = e.to_string();
    for prefix in ["SQL error: ", "Error during planning: ", "Schema error: ", "sql parser error: "] {
        if let Some(rest) = msg.strip_prefix(prefix) {
            msg = rest.to_string();
        }
    }
    // A function given types it does not take: the engine lists every signature it tried.
    if let Some(rest) = msg.strip_prefix("Internal error: Function '") {
        if let (Some(name), Some(got)) = (rest.split('\'').next(), rest.split("but received ").nth(1)) {
            let got = got.split(").").next().unwrap_or(got);
            msg = format!(
                "`{name}` does not take {got}); if an input column was read as text (a value with spaces \
                 around it, letters in a number column), declare its type in [input.schema]"
            );
        }
    }
    // The engine's setting is not the user's to change here.
    msg = msg.replace(" or disable the datafusion.sql_parser.enable_ident_normalization configuration", "");
    if msg.contains("Cannot cast timezone to different timezone") {
        msg = SKIPPED_TIME.to_string();
    }
    // Text read as a time in a zone (a lookup's undeclared column met with a zoned timestamp).
    if msg.contains("error computing timezone offset") {
        let value = msg.split_once("from '").and_then(|(_, r)| r.split_once('\'')).map(|(v, _)| v.to_string());
        msg = match value {
            Some(v) => format!("{SKIPPED_TIME} (the value '{v}', text read as a time)"),
            None => SKIPPED_TIME.to_string(),
        };
    }
    // `s['f']`, `m['k']`, `l[1]`: the engine is built without its nested-type functions.
    if msg.contains("GetFieldAccess not supported") {
        msg = "field access with `[...]` (`s['f']` on a struct, `m['k']` on a map, `l[1]` on a list) is not \
               supported: use `get_field(s, 'f')` for a struct's field or `get_field(m, 'k')` for a map's value; a \
               list's elements cannot be read in the query"
            .to_string();
    }
    // `1e300`: the parser reads a number with an exponent as a decimal of negative scale.
    if msg.contains("exceeds the minimum supported scale") || msg.contains("exceeds the maximum supported scale") {
        msg = format!(
            "a number written with an exponent is an exact decimal, and this one has more digits than a decimal \
             holds ({msg}); write it as a double: CAST('1e300' AS DOUBLE)"
        );
    }
    // A text column empty in every row of its objects reads as type Null.
    if msg.contains("for Null") || msg.contains("take Null") || msg.contains("(Null") {
        msg.push_str(NULL_HINT);
    }
    if msg.contains("duplicate unqualified field name") {
        msg.push_str(
            ": the engine names an expression without the casts inside it, so `min(x)` and \
             `min(CAST(x AS REAL))` have one name; cast the result instead (`CAST(min(x) AS REAL)`), or compute \
             one of them in a subquery",
        );
    }
    // An unknown function: the engine suggests the nearest name it finds first in a hash map,
    // another on a tie from run to run (`md5`: `min` or `max`).
    if let Some((head, _)) = msg.split_once("\nDid you mean '") {
        let name = head.strip_prefix("Invalid function '").and_then(|r| r.strip_suffix("'.")).unwrap_or_default();
        msg = match nearest_function(name) {
            Some(f) => format!("{head} Did you mean '{f}'?"),
            None => head.to_string(),
        };
    }
    if let Some(span) = e.diagnostic().and_then(|d| d.span) {
        if span.start.line > 0 && !msg.contains("Line:") {
            msg = format!("{msg} (at line {}, column {})", span.start.line, span.start.column);
        }
    }
    msg
}

/// An engine's reason without the position `reason` ends it with (` (at line L, column C)`):
/// for the shorthand, whose SQL the user did not write.
pub fn without_position(message: &str) -> String {
    let position = message.strip_suffix(')').and_then(|m| m.rsplit_once(" (at line ")).filter(|(_, at)| {
        at.split_once(", column ").is_some_and(|(line, column)| {
            [line, column].iter().all(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        })
    });
    match position {
        Some((head, _)) => head.to_string(),
        None => message.to_string(),
    }
}

/// The function of the engine's nearest to `name` by edit distance, the first in alphabetical
/// order on a tie.
fn nearest_function(name: &str) -> Option<String> {
    let state = session(None).state();
    let names = state.scalar_functions().keys().chain(state.aggregate_functions().keys());
    let name = name.to_lowercase();
    names.min_by_key(|f| (strsim::levenshtein(&f.to_lowercase(), &name), f.as_str())).cloned()
}

/// `plan` under a projection of its columns, the `i`-th as `f(i, column, field)` gives it
/// (under the column's own name when changed).
fn columns_over(
    plan: LogicalPlan,
    f: impl Fn(usize, Expr, &arrow::datatypes::Field) -> Expr,
) -> datafusion::common::Result<LogicalPlan> {
    use datafusion::common::Column;
    let schema = plan.schema().clone();
    let exprs: Vec<Expr> = schema
        .iter()
        .enumerate()
        .map(|(i, (q, field))| {
            let column = Expr::Column(Column::from((q, field)));
            let new = f(i, column.clone(), field);
            if new == column {
                column
            } else {
                new.alias_qualified(q.cloned(), field.name())
            }
        })
        .collect();
    Ok(LogicalPlan::Projection(datafusion::logical_expr::Projection::try_new(exprs, Arc::new(plan))?))
}

/// The columns a plan node's expressions can refer to: its inputs' schemas merged.
fn input_schema(p: &datafusion::logical_expr::LogicalPlan) -> datafusion::common::DFSchema {
    let mut schema = datafusion::common::DFSchema::empty();
    for input in p.inputs() {
        schema.merge(input.schema());
    }
    schema
}

/// `plan` with `f` applied bottom-up to every expression of every node (subqueries too), given
/// the node's input schema. Names are kept, so the nodes above still find the expressions they
/// refer to, and a changed node's schema follows its expressions' new types. A grouping set's
/// members keep theirs one by one (`ROLLUP (k, -x)`): the set's name is made of them, and an
/// alias over the whole set would leave the aggregate one opaque group key.
fn rewrite_exprs(
    plan: LogicalPlan,
    f: impl Fn(Expr, &datafusion::common::DFSchema) -> datafusion::common::Result<Transformed<Expr>>,
) -> datafusion::common::Result<LogicalPlan> {
    use datafusion::logical_expr::expr::GroupingSet;
    plan.transform_up_with_subqueries(|p| {
        let schema = input_schema(&p);
        let names = datafusion::logical_expr::expr_rewriter::NamePreserver::new(&p);
        let member = |m: Expr| {
            let name = m.schema_name().to_string();
            let t = m.transform_up(|e| f(e, &schema))?;
            Ok(if t.transformed && t.data.schema_name().to_string() != name { t.data.alias(name) } else { t.data })
        };
        let members = |v: Vec<Expr>| v.into_iter().map(member).collect::<datafusion::common::Result<Vec<_>>>();
        let t = p.map_expressions(|e| {
            let name = names.save(&e);
            let new = match e {
                Expr::GroupingSet(gs) => {
                    let before = Expr::GroupingSet(gs.clone());
                    let new = Expr::GroupingSet(match gs {
                        GroupingSet::Rollup(v) => GroupingSet::Rollup(members(v)?),
                        GroupingSet::Cube(v) => GroupingSet::Cube(members(v)?),
                        GroupingSet::GroupingSets(v) => GroupingSet::GroupingSets(
                            v.into_iter().map(members).collect::<datafusion::common::Result<Vec<_>>>()?,
                        ),
                    });
                    let changed = new != before;
                    Transformed::new_transformed(new, changed)
                }
                e => e.transform_up(|e| f(e, &schema))?,
            };
            Ok(new.update_data(|e| name.restore(e)))
        })?;
        match t.transformed {
            true => Ok(Transformed::yes(t.data.recompute_schema()?)),
            false => Ok(t),
        }
    })
    .map(|t| t.data)
}

/// A session for one query: one partition (deterministic results), no information schema;
/// epochs are instants in the job's zone (`zone`).
fn session(zone: Option<&str>) -> SessionContext {
    with_rules(SessionContext::new_with_config(config()), zone)
}

/// The session with lakeswap's analyzer rules (those that change types before type coercion,
/// the others after it) and its own `min`, `max` and `count` ([`aggregates`]).
fn with_rules(ctx: SessionContext, zone: Option<&str>) -> SessionContext {
    let state = ctx.state();
    let mut rules = state.analyzer().rules.clone();
    let at = rules.iter().position(|r| r.name() == "type_coercion").unwrap_or(0);
    rules.insert(at, Arc::new(unlike::WholeDecimals));
    rules.insert(at + 1, Arc::new(unlike::DoubleQuotients));
    rules.insert(at + 2, Arc::new(unlike::FloatsOverDecimals));
    rules.insert(at + 3, Arc::new(unlike::ExactMedians));
    rules.insert(at + 4, Arc::new(intervals::DatesPlusTimes));
    rules.insert(at + 5, Arc::new(unlike::SqlFunctions));
    rules.insert(at + 6, Arc::new(intervals::ComparedIntervals));
    if let Some(zone) = zone {
        let at = rules.iter().position(|r| r.name() == "type_coercion").unwrap_or(0);
        rules.insert(at, Arc::new(zones::EpochInstants { zone: zone.into() }));
    }
    // After `EpochInstants`: a value `AT TIME ZONE` is an instant in the job's zone by then.
    let at = rules.iter().position(|r| r.name() == "type_coercion").unwrap_or(0);
    rules.insert(at, Arc::new(intervals::WallClockMeetsInstant));
    rules.push(Arc::new(zones::ZonedLiterals));
    rules.push(Arc::new(zones::WrittenTimes));
    rules.push(Arc::new(intervals::ZonedIntervals));
    rules.push(Arc::new(unlike::UnlikeSql));
    rules.push(Arc::new(sums::ExactSums));
    rules.push(Arc::new(floats::OneZeroOneNan));
    // DataFusion 55 rewrites `count(DISTINCT x), sum(y)` as a sum of sums grouped by `x`, whose
    // outer sum widens a decimal again (decimal(12,2) summed twice is decimal(32,2), not the
    // planned (22,2)): every date failed with "column types must match schema types". The
    // distinct count is one grouped accumulator without it (for text, [`distinct`]'s).
    let optimizer = state.optimizer().rules.iter().filter(|r| r.name() != "single_distinct_aggregation_to_group_by");
    let state = datafusion::execution::session_state::SessionStateBuilder::new_from_existing(state.clone())
        .with_analyzer_rules(rules)
        .with_optimizer_rules(optimizer.cloned().collect())
        .with_physical_optimizer_rule(Arc::new(in_order::Sequential))
        .build();
    let ctx = SessionContext::new_with_state(state);
    for f in aggregates::own() {
        ctx.register_udaf(f);
    }
    ctx
}

/// A session whose operators hold at most `memory.bytes`, spilling to files in
/// `memory.spill_dir` beyond that (an aggregation with many groups, the final sort) when
/// `spill`; without, an operator that outgrows its share fails the date.
fn session_within(memory: &Memory, spill: bool, zone: Option<&str>) -> Result<SessionContext, DataFusionError> {
    use datafusion::execution::disk_manager::{DiskManagerBuilder, DiskManagerMode};
    let mode = match spill {
        true => DiskManagerMode::Directories(vec![memory.spill_dir.clone()]),
        false => DiskManagerMode::Disabled,
    };
    let runtime = datafusion::execution::runtime_env::RuntimeEnvBuilder::new()
        .with_memory_pool(Arc::new(datafusion::execution::memory_pool::FairSpillPool::new(memory.bytes)))
        .with_disk_manager_builder(DiskManagerBuilder::default().with_mode(mode))
        .build_arc()?;
    Ok(with_rules(SessionContext::new_with_config_rt(config(), runtime), zone))
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
        // `1.15` is an exact number, as in SQL: a decimal, not a double (`amount * 1.15` on a
        // decimal column was computed in binary floating point, a cent off).
        .set_bool("datafusion.sql_parser.parse_float_as_decimal", true)
        // The top-K aggregation (`ORDER BY min(f) LIMIT n`) compares floats its own way, and
        // took a group whose min was after a NaN for the smallest.
        .set_bool("datafusion.optimizer.enable_topk_aggregation", false)
        // A sort that holds its input sorts it as one batch. Otherwise it sorts runs cut by the
        // batches' memory sizes (which differ in memory and spilled) and merges them: rows that
        // tie (a window without an order) came out in another order, and a window's float sum
        // or first value with them.
        .set_usize("datafusion.execution.sort_in_place_threshold_bytes", usize::MAX)
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
/// `DISTINCT ON (…) … ORDER BY` orders it too: the engine sorts the rows it keeps by the
/// `ORDER BY`'s leading terms, the `ON` expressions, which no two of its rows share.
fn orders_output(plan: &LogicalPlan) -> bool {
    match plan {
        LogicalPlan::Sort(_) => true,
        LogicalPlan::Distinct(datafusion::logical_expr::Distinct::On(d)) => d.sort_expr.is_some(),
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
                if volatility != Volatility::Immutable || name == "version" {
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

/// The first finding of `f` over the expressions of the plan (subqueries too), each given the
/// schema of its node's inputs.
fn first_finding(
    plan: &LogicalPlan,
    f: impl Fn(&Expr, &datafusion::common::DFSchema) -> Option<String>,
) -> Option<String> {
    let mut found = None;
    let _ = plan.apply_with_subqueries(|node| {
        if node.inputs().is_empty() {
            return Ok(TreeNodeRecursion::Continue);
        }
        let schema = input_schema(node);
        node.apply_expressions(|e| {
            e.apply(|e| {
                found = f(e, &schema);
                Ok(if found.is_some() { TreeNodeRecursion::Stop } else { TreeNodeRecursion::Continue })
            })
        })?;
        Ok(if found.is_some() { TreeNodeRecursion::Stop } else { TreeNodeRecursion::Continue })
    });
    found
}

/// The first condition of the plan (a `FILTER (WHERE …)`, a `CASE WHEN …`) that is not true or
/// false but a number or text: the engine would cast it (any number but 0 true, the text
/// `'true'` true, other text an error on some date), where the query wrote no such test.
fn non_boolean_condition(plan: &LogicalPlan) -> Option<String> {
    use datafusion::logical_expr::ExprSchemable;
    first_finding(plan, |e, schema| {
        let conditions: Vec<&Expr> = match e {
            Expr::AggregateFunction(f) => f.params.filter.iter().map(AsRef::as_ref).collect(),
            Expr::WindowFunction(w) => w.params.filter.iter().map(AsRef::as_ref).collect(),
            Expr::Case(c) if c.expr.is_none() => c.when_then_expr.iter().map(|(w, _)| w.as_ref()).collect(),
            _ => Vec::new(),
        };
        conditions.into_iter().find_map(|c| match c.get_type(schema) {
            Ok(DataType::Boolean | DataType::Null) | Err(_) => None,
            Ok(t) => {
                let test = match t.is_numeric() {
                    true => format!("`{c} <> 0`"),
                    false => format!("`{c} = 'yes'`"),
                };
                Some(format!(
                    "the condition `{c}` (of a FILTER (WHERE …), a CASE WHEN or a measure's `where`) is {t}, not \
                     true or false: the engine would take any number but 0 (or the text 'true') as true. Write the \
                     test you mean ({test}, say)"
                ))
            }
        })
    })
}

/// Whether a type is text (in any of arrow's encodings).
pub(crate) fn text(t: &DataType) -> bool {
    matches!(t, DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View)
}

/// How values of two types compared or made one would be read otherwise than SQL reads them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Clash {
    /// Text against a number: every text value read as a number, or every number as text.
    Text,
    /// A date or time against a number: the number read as a count of days (or of the type's
    /// unit) since 1970-01-01, where SQL refuses it (`event_date = 20261101`).
    Time,
}

impl Clash {
    /// What meets a number, for messages.
    fn what(self) -> &'static str {
        match self {
            Clash::Text => "text",
            Clash::Time => "a date or time",
        }
    }

    /// What the engine would do with it, and the way out.
    fn reading(self) -> &'static str {
        match self {
            Clash::Text => {
                "the engine would read every text value as a number ('007' equal to 7, and the date failing at the \
                 first value that is not one)"
            }
            Clash::Time => {
                "the engine would read the number as a count of days (or of the type's unit) since 1970-01-01 \
                 (20758 is 2026-11-01, 20261101 a day in the year 57443), where SQL refuses it"
            }
        }
    }
}

/// Whether a type is a date, a time of day, a timestamp, a duration or an interval.
fn temporal(t: &DataType) -> bool {
    use DataType::*;
    matches!(t, Date32 | Date64 | Timestamp(..) | Time32(_) | Time64(_) | Duration(_) | Interval(_))
}

/// Whether values of types `a` and `b`, compared or made one, would be text or a date against
/// a number, at any depth (`struct(code) = struct(n)`).
fn clash(a: &DataType, b: &DataType) -> Option<Clash> {
    use DataType::*;
    match (a, b) {
        (a, b) if (text(a) && b.is_numeric()) || (a.is_numeric() && text(b)) => Some(Clash::Text),
        (a, b) if (temporal(a) && b.is_numeric()) || (a.is_numeric() && temporal(b)) => Some(Clash::Time),
        (Struct(x), Struct(y)) => x.iter().zip(y.iter()).find_map(|(f, g)| clash(f.data_type(), g.data_type())),
        (List(x) | LargeList(x) | FixedSizeList(x, _), List(y) | LargeList(y) | FixedSizeList(y, _)) => {
            clash(x.data_type(), y.data_type())
        }
        _ => None,
    }
}

/// Text against a number where plans meet rather than expressions: a join's keys (`USING`,
/// `NATURAL`, `INTERSECT` and `EXCEPT`, which the engine plans as joins) and the columns of a
/// `UNION`'s queries.
fn mixed_in_joins_and_unions(plan: &LogicalPlan) -> Option<String> {
    use datafusion::logical_expr::ExprSchemable;
    let mut found = None;
    let _ = plan.apply_with_subqueries(|node| {
        found = match node {
            LogicalPlan::Join(j) => j.on.iter().find_map(|(l, r)| {
                let (a, b) = (l.get_type(j.left.schema()).ok()?, r.get_type(j.right.schema()).ok()?);
                clash(&a, &b).map(|c| {
                    format!(
                        "the join on `{l}` = `{r}` (a USING, a NATURAL JOIN, an INTERSECT or an EXCEPT) compares \
                         {} with a number: {}. Cast one side to the other's type",
                        c.what(),
                        c.reading()
                    )
                })
            }),
            LogicalPlan::Union(u) => {
                let schemas: Vec<_> = u.inputs.iter().map(|i| i.schema().clone()).collect();
                let first = u.schema.clone();
                (0..first.fields().len()).find_map(|c| {
                    let types: Vec<&DataType> =
                        schemas.iter().filter_map(|s| s.fields().get(c)).map(|f| f.data_type()).collect();
                    types.iter().find_map(|a| types.iter().find_map(|b| clash(a, b))).map(|k| {
                        format!(
                            "the column `{}` of a UNION is {} in one of its queries and a number in another: {}. \
                             Cast it to one type in each query",
                            first.field(c).name(),
                            k.what(),
                            k.reading()
                        )
                    })
                })
            }
            _ => None,
        };
        Ok(if found.is_some() { TreeNodeRecursion::Stop } else { TreeNodeRecursion::Continue })
    });
    found
}

/// The first expression of the plan that compares text with a number (`s = 7`, `s < 10`,
/// `s IN (1, 2)`, `s BETWEEN 1 AND 9`) or makes one value of both (`coalesce(s, 0)`,
/// `nvl(s, 1)`, `CASE … THEN amount ELSE '0' END`, `greatest(s, n)`); in a comparison, where
/// the text is not a literal.
/// The engine would read every text value as a number (`'007'` equal to 7, the date failing on
/// the first value that is not a number) or every number as text (`1` sorting after `'09'`);
/// PostgreSQL and DuckDB refuse most of these. Quoted text meeting a number (`amount > '100'`)
/// is read as a number, as in SQL, and stays accepted. Also finds a distinct count of several
/// columns, which the engine fails on only when it runs.
fn mixed_text_and_numbers(plan: &LogicalPlan) -> Option<String> {
    use datafusion::logical_expr::{BinaryExpr, ExprSchemable, Operator as Op};
    if let Some(why) = mixed_in_joins_and_unions(plan) {
        return Some(why);
    }
    first_finding(plan, |e, schema| {
        // Quoted text is read as a number where it is compared with one, but the engine makes
        // `CASE … THEN amount ELSE '0' END` text.
        let typed = |x: &Expr, literals: bool| match x.get_type(schema) {
            Ok(t) if literals || !(text(&t) && matches!(x, Expr::Literal(..))) => Some(t),
            _ => None,
        };
        let mixing = |xs: &[&Expr], literals: bool| {
            let types: Vec<DataType> = xs.iter().filter_map(|x| typed(x, literals)).collect();
            types.iter().enumerate().find_map(|(i, a)| types[i + 1..].iter().find_map(|b| clash(a, b)))
        };
        let mixed = |xs: &[&Expr]| mixing(xs, false);
        let compared = match e {
            Expr::BinaryExpr(BinaryExpr {
                left,
                op:
                    Op::Eq | Op::NotEq | Op::Lt | Op::LtEq | Op::Gt | Op::GtEq | Op::IsDistinctFrom | Op::IsNotDistinctFrom,
                right,
            }) => mixed(&[left, right]),
            Expr::InList(l) => l.list.iter().find_map(|x| mixed(&[&l.expr, x])),
            Expr::Between(b) => mixed(&[&b.expr, &b.low]).or_else(|| mixed(&[&b.expr, &b.high])),
            Expr::Case(c) => c.expr.as_deref().and_then(|x| c.when_then_expr.iter().find_map(|(w, _)| mixed(&[x, w]))),
            Expr::InSubquery(q) => match (q.expr.get_type(schema), q.subquery.subquery.schema().fields().first()) {
                (Ok(a), Some(b)) => clash(&a, b.data_type()),
                _ => None,
            },
            _ => None,
        };
        match compared {
            Some(Clash::Text) => {
                return Some(format!(
                    "`{e}` compares text with a number: {}. Compare text with text (quote the number), or cast the \
                     text to the number you mean (CAST(s AS BIGINT), CAST(s AS DECIMAL(12,2)))",
                    Clash::Text.reading()
                ))
            }
            Some(Clash::Time) => {
                return Some(format!(
                    "`{e}` compares a date or time with a number: {}. Compare it with a date (DATE '2026-11-01'), \
                     or turn the date into the number you mean (CAST(to_char(d, '%Y%m%d') AS BIGINT) is 20261101)",
                    Clash::Time.reading()
                ))
            }
            None => {}
        }
        if let Some(why) = unlike_sql_cast(e, schema) {
            return Some(why);
        }
        let one_value: Vec<&Expr> = match e {
            Expr::Case(c) => c.when_then_expr.iter().map(|(_, t)| t.as_ref()).chain(c.else_expr.as_deref()).collect(),
            Expr::ScalarFunction(f)
                if matches!(f.name(), "coalesce" | "nvl" | "ifnull" | "nullif" | "greatest" | "least") =>
            {
                f.args.iter().collect()
            }
            Expr::ScalarFunction(f) if f.name() == "nvl2" => f.args.iter().skip(1).collect(),
            _ => Vec::new(),
        };
        match mixing(&one_value, true) {
            Some(Clash::Text) => {
                return Some(format!(
                    "`{e}` makes one value of text and a number: the engine would read every text value as a \
                     number (the date failing at the first that is not one), or write every number as text. Give \
                     every branch one type: write a number unquoted (0, not '0'), or cast the text to the number \
                     you mean (CAST(s AS BIGINT)), or the number to text (CAST(n AS VARCHAR) of an integer or a decimal; a double cast to \
                     a DECIMAL first)"
                ))
            }
            Some(Clash::Time) => {
                return Some(format!(
                    "`{e}` makes one value of a date or time and a number: {}. Give every branch one type: a \
                     date (DATE '2026-11-01'), or the date turned into the number you mean \
                     (CAST(to_char(d, '%Y%m%d') AS BIGINT))",
                    Clash::Time.reading()
                ))
            }
            None => {}
        }
        match e {
            Expr::AggregateFunction(f) if f.params.distinct && f.func.name() == "count" && f.params.args.len() > 1 => {
                Some(format!(
                    "`{e}`: the engine counts distinct values of one expression only. Count distinct \
                     combinations as count(DISTINCT struct(a, b)) (a combination holding a null counts too; add \
                     FILTER (WHERE a IS NOT NULL AND b IS NOT NULL) to leave those out)"
                ))
            }
            _ => None,
        }
    })
}

/// The value a cast takes and the type it makes: `CAST`, `TRY_CAST`, and `arrow_cast(x, 'T')`
/// with its type written out (which the engine makes a `CAST` later), so one check covers all.
pub(crate) fn cast_of(e: &Expr) -> Option<(&Expr, DataType)> {
    match e {
        Expr::Cast(c) => Some((c.expr.as_ref(), c.field.data_type().clone())),
        Expr::TryCast(c) => Some((c.expr.as_ref(), c.field.data_type().clone())),
        Expr::ScalarFunction(f) if f.name() == "arrow_cast" && f.args.len() == 2 => match &f.args[1] {
            Expr::Literal(v, _) => Some((&f.args[0], v.try_as_str().flatten()?.parse().ok()?)),
            _ => None,
        },
        _ => None,
    }
}

/// Why a cast computes otherwise than SQL, if it does; PostgreSQL and DuckDB agree on each:
/// - a number to a date: the engine counts days since 1970-01-01 (`CAST(20261101 AS DATE)` is a
///   day in the year 57443), SQL refuses;
/// - a date or time to a number: the engine gives a count in the value's own unit (days,
///   microseconds or nanoseconds since 1970), SQL refuses;
/// - a decimal or a float to an integer: the engine cuts the fraction (2.7 is 2), SQL rounds (3).
fn unlike_sql_cast(e: &Expr, schema: &datafusion::common::DFSchema) -> Option<String> {
    use datafusion::logical_expr::ExprSchemable;
    let ty = |x: &Expr| x.get_type(schema).ok();
    // (A time made text, here or by the engine's own casts, is refused after type coercion:
    // `unlike::refuse`.)
    let (expr, to) = cast_of(e)?;
    let to = &to;
    let from = ty(expr)?;
    if matches!(to, DataType::Date32 | DataType::Date64) && from.is_numeric() {
        return Some(format!(
            "`{e}` casts a number to a date: the engine would read it as a count of days since 1970-01-01 \
             (20261101 a day in the year 57443), where SQL refuses the cast. Write the date (DATE '2026-11-01'), \
             or read a number of the form yyyymmdd with to_date(CAST(n AS VARCHAR), '%Y%m%d')"
        ));
    }
    if temporal(&from) && to.is_numeric() {
        return Some(format!(
            "`{e}` casts a date or time to a number: the engine would give a count in the value's own unit (days, \
             or microseconds or nanoseconds since 1970, as each object stores it), where SQL refuses the cast. \
             Write date_part('epoch', ts) for seconds since 1970, or the field you mean (extract(year FROM d))"
        ));
    }
    let fractional =
        matches!(from, DataType::Decimal128(_, s) | DataType::Decimal256(_, s) if s > 0) || from.is_floating();
    // Whole already: `floor`, `ceil`, and `round` or `trunc` to no decimal places.
    let rounded = match expr {
        Expr::ScalarFunction(f) if matches!(f.name(), "floor" | "ceil") => true,
        Expr::ScalarFunction(f) if matches!(f.name(), "round" | "trunc") => match f.args.get(1) {
            None => true,
            Some(Expr::Literal(v, _)) => v.is_null() || v.to_string() == "0",
            Some(_) => false,
        },
        _ => false,
    };
    if to.is_integer() && fractional && !rounded {
        return Some(format!(
            "`{e}` casts a number with a fraction to an integer: the engine would cut the fraction (2.7 becomes \
             2), where SQL rounds (3). Say which: CAST(round(x) AS BIGINT), or CAST(trunc(x) AS BIGINT) to cut"
        ));
    }
    None
}

/// Plans `query` against the schema of `events` and the lookups: its output schema, its plan
/// as text (for `--dry-run`) and the columns of `events` it reads; or why it is refused.
pub async fn plan(
    query: &Query,
    events: &SchemaRef,
    lookups: &[Lookup],
    partition_column: &str,
) -> Result<(SchemaRef, String, Vec<String>), String> {
    let ctx = session(query.zone.as_deref());
    register(&ctx, EVENTS, events.clone(), Vec::new()).map_err(|e| reason(&e, &query.sql))?;
    for l in lookups {
        register(&ctx, &l.name, l.schema.clone(), Vec::new()).map_err(|e| reason(&e, &query.sql))?;
    }
    // The shorthand's SQL too: its `where` is the user's text.
    parse(&query.sql)?;
    let df = ctx.sql_with_options(&query.sql, options()).await.map_err(|e| reason(&e, &query.sql))?;
    let plan = df.logical_plan().clone();
    if let Some(why) = non_boolean_condition(&plan).or_else(|| mixed_text_and_numbers(&plan)) {
        return Err(why);
    }
    // Planned through to execution (over no rows), so the analyzer's refusals come now.
    df.clone().create_physical_plan().await.map_err(|e| reason(&e, &query.sql))?;
    if let Some(f) = non_deterministic(&plan) {
        if f == "version" {
            return Err("`version()` names the engine's build: a re-run by another build of lakeswap would \
                        write other bytes. Leave it out; each file's lineage records the lakeswap that wrote it"
                .into());
        }
        return Err(format!(
            "`{f}` gives another result on every run; a re-run must give the same bytes. Compute the value \
             in the input, or use a lookup table"
        ));
    }
    let schema = output_schema(&ctx, &df).map_err(|e| reason(&e, &query.sql))?;
    if schema.fields().is_empty() {
        return Err("the query outputs no columns (`SELECT FROM …`); name at least one".into());
    }
    let mut seen = std::collections::HashSet::new();
    // Names compared as case-insensitive readers (DuckDB, Spark, Hive) compare them: to them,
    // `Event_Date` beside the path's `event_date` is one column, and one of the two is lost.
    for f in schema.fields() {
        if f.name().to_lowercase() == partition_column.to_lowercase() {
            return Err(format!(
                "the query outputs a column `{}`: that is the partition column `{partition_column}` (readers ignore \
                 case), which lives in the path; drop it from the SELECT or rename it",
                f.name()
            ));
        }
        if f.name().trim().is_empty() {
            return Err("the query outputs a column with no name; name it (AS)".into());
        }
        if !seen.insert(f.name().to_lowercase()) {
            return Err(format!(
                "the query outputs two columns named `{}` (readers ignore case); give them distinct names (AS)",
                f.name()
            ));
        }
    }
    let shaped = shape_schema(query, &schema);
    if let Some(why) = unwritable(&shaped) {
        return Err(why);
    }
    let text = df.logical_plan().display_indent().to_string();
    let used = events_read(&df.into_optimized_plan().map_err(|e| reason(&e, &query.sql))?);
    Ok((shaped, text, used))
}

/// The columns of `events` an optimized plan reads (its scans' projections).
fn events_read(plan: &LogicalPlan) -> Vec<String> {
    let mut used = Vec::new();
    let _ = plan.apply_with_subqueries(|p| {
        if let LogicalPlan::TableScan(s) = p {
            if s.table_name.table() == EVENTS {
                let schema = s.source.schema();
                let all: Vec<usize> = (0..schema.fields().len()).collect();
                for &i in s.projection.as_ref().unwrap_or(&all) {
                    let name = schema.field(i).name();
                    if !used.contains(name) {
                        used.push(name.clone());
                    }
                }
            }
        }
        Ok(TreeNodeRecursion::Continue)
    });
    used
}

/// Why a column of the output cannot be written as what it is, if one cannot: Parquet has no
/// type for an interval or a duration (at any depth). Arrow's writer fails on an interval and
/// writes a duration as a bare integer, which readers other than Arrow take for a number in
/// no stated unit.
fn unwritable(schema: &Schema) -> Option<String> {
    fn timespan(t: &DataType) -> bool {
        match t {
            DataType::Interval(_) | DataType::Duration(_) => true,
            DataType::List(f)
            | DataType::LargeList(f)
            | DataType::ListView(f)
            | DataType::LargeListView(f)
            | DataType::FixedSizeList(f, _)
            | DataType::Map(f, _) => timespan(f.data_type()),
            DataType::Struct(fs) => fs.iter().any(|f| timespan(f.data_type())),
            DataType::Dictionary(_, v) => timespan(v),
            _ => false,
        }
    }
    let f = schema.fields().iter().find(|f| timespan(f.data_type()))?;
    Some(format!(
        "the column `{}` is {}: Parquet has no type for an interval or a duration, and other readers would \
         see a bare number in no stated unit. Write it as a number in a unit its name says, e.g. \
         date_part('epoch', max(ts) - min(ts)) AS span_seconds",
        f.name(),
        f.data_type()
    ))
}

/// The schema of a query's results: the planner's names, nullability and metadata, with the
/// types the analyzer gives (type coercion can change them: DataFusion types `uint64 - 5` as
/// decimal(20,0) before coercion and computes it as decimal(21,0)).
fn output_schema(ctx: &SessionContext, df: &datafusion::dataframe::DataFrame) -> Result<SchemaRef, DataFusionError> {
    let state = ctx.state();
    let analyzed = state.analyzer().execute_and_check(df.logical_plan().clone(), state.config_options(), |_, _| {})?;
    let fields: Vec<Field> = df
        .schema()
        .fields()
        .iter()
        .zip(analyzed.schema().fields())
        .map(|(f, a)| f.as_ref().clone().with_data_type(a.data_type().clone()))
        .collect();
    Ok(Arc::new(Schema::new_with_metadata(fields, df.schema().as_arrow().metadata().clone())))
}

/// The output schema after the shorthand's narrowing, in types Parquet holds as themselves
/// ([`crate::read::unify::parquet_native`]: times in seconds in milliseconds).
fn shape_schema(query: &Query, schema: &SchemaRef) -> SchemaRef {
    let fields: Vec<Field> = schema
        .fields()
        .iter()
        .map(|f| {
            let ty = query.narrow.iter().find(|(n, _)| n == f.name()).map(|(_, t)| t.clone());
            let nullable = f.is_nullable() && !query.not_null.contains(f.name());
            let ty = crate::read::unify::parquet_native(&ty.unwrap_or_else(|| f.data_type().clone()));
            Field::new(f.name(), ty, nullable)
        })
        .collect();
    Arc::new(Schema::new(fields))
}

/// Fails on a decimal value with more digits than its column's precision: DataFusion types
/// a sum of two decimal(38) as decimal(38) and does not check it, and such a value makes a
/// file other readers refuse.
fn check_precision(batch: &RecordBatch) -> Result<(), PartitionError> {
    for (f, c) in batch.schema().fields().iter().zip(batch.columns()) {
        let checked = match f.data_type() {
            DataType::Decimal128(p, _) => {
                c.as_primitive::<arrow::datatypes::Decimal128Type>().validate_decimal_precision(*p)
            }
            DataType::Decimal256(p, _) => {
                c.as_primitive::<arrow::datatypes::Decimal256Type>().validate_decimal_precision(*p)
            }
            _ => Ok(()),
        };
        checked.map_err(|e| PartitionError::Query {
            message: format!(
                "the column `{}` has a value that does not fit its type {} ({e}); widen it in the query, e.g. \
                 CAST(x AS DECIMAL(38, 0)) before adding, or round it",
                f.name(),
                f.data_type()
            ),
        })?;
    }
    Ok(())
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
#[derive(Debug)]
pub enum Source {
    /// The prepared table's chunks in memory, and which rows of each are kept.
    Chunks { chunks: Vec<RecordBatch>, keep: Vec<arrow::array::BooleanArray> },
    /// The kept rows of a spilled partition: files of winners merged back into input order
    /// as the engine scans them, `batch_rows` at a time (`record`: their schema;
    /// [`crate::spill::merged`]).
    Spilled { record: SchemaRef, files: Vec<std::path::PathBuf>, batch_rows: usize },
}

/// The kept rows of a date as a table: every scan reads the columns the query uses of the kept
/// rows only, in input order, in batches of exactly [`KEPT_BATCH`] rows (the last one less).
/// The batches' edges then depend on the rows alone, not on where the input was cut (its row
/// groups, or the spilled files' parts): an aggregate that adds a batch at a time (a `sum` of
/// doubles without `GROUP BY`, an approximate percentile) gives the same bytes in memory and
/// spilled.
#[derive(Debug)]
struct KeptRows {
    record: SchemaRef,
    source: Arc<Source>,
}

/// Rows in each batch of the kept rows.
const KEPT_BATCH: usize = 8192;

#[async_trait::async_trait]
impl datafusion::catalog::TableProvider for KeptRows {
    fn schema(&self) -> SchemaRef {
        self.record.clone()
    }

    fn table_type(&self) -> datafusion::logical_expr::TableType {
        datafusion::logical_expr::TableType::Base
    }

    async fn scan(
        &self,
        _: &dyn datafusion::catalog::Session,
        projection: Option<&Vec<usize>>,
        _: &[Expr],
        _: Option<usize>,
    ) -> Result<Arc<dyn datafusion::physical_plan::ExecutionPlan>, DataFusionError> {
        let columns: Vec<usize> = match projection {
            Some(p) => p.clone(),
            None => (0..self.record.fields().len()).collect(),
        };
        let schema = Arc::new(self.record.project(&columns)?);
        let stream =
            KeptStream { schema: schema.clone(), record: self.record.clone(), columns, source: self.source.clone() };
        let exec = datafusion::physical_plan::streaming::StreamingTableExec::try_new(
            schema,
            vec![Arc::new(stream)],
            None,
            Vec::new(),
            false,
            None,
        )?;
        Ok(Arc::new(exec))
    }
}

/// One scan of [`KeptRows`]: `columns` of the record.
#[derive(Debug)]
struct KeptStream {
    schema: SchemaRef,
    record: SchemaRef,
    columns: Vec<usize>,
    source: Arc<Source>,
}

impl datafusion::physical_plan::streaming::PartitionStream for KeptStream {
    fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    fn execute(&self, _: Arc<datafusion::execution::TaskContext>) -> datafusion::execution::SendableRecordBatchStream {
        use futures::StreamExt;
        let (schema, columns) = (self.schema.clone(), self.columns.clone());
        // Pieces of the kept rows, each with the rows of it to keep (`None`: all).
        type Piece = Result<(RecordBatch, Option<arrow::array::BooleanArray>), DataFusionError>;
        let pieces: futures::stream::BoxStream<'static, Piece> = match self.source.as_ref() {
            Source::Chunks { chunks, keep } => {
                let pieces: Vec<Piece> =
                    chunks.iter().zip(keep).map(|(c, k)| Ok((c.clone(), Some(k.clone())))).collect();
                futures::stream::iter(pieces).boxed()
            }
            Source::Spilled { files, batch_rows, .. } => {
                crate::spill::merged(files.clone(), self.record.clone(), *batch_rows)
                    .map(|b| b.map(|b| (b, None)).map_err(|e| DataFusionError::External(Box::new(e))))
                    .boxed()
            }
        };
        let stream =
            futures::stream::unfold((pieces, Some(Batches::new(schema.clone()))), move |(mut pieces, batches)| {
                let columns = columns.clone();
                async move {
                    let mut out = batches?;
                    loop {
                        if let Some(b) = out.ready.pop_front() {
                            return Some((one_zero_one_nan(b), (pieces, Some(out))));
                        }
                        let pushed = match pieces.next().await {
                            Some(Ok((batch, keep))) => batch
                                .project(&columns)
                                .and_then(|b| match keep {
                                    Some(k) => arrow::compute::filter_record_batch(&b, &k),
                                    None => Ok(b),
                                })
                                .and_then(|b| out.push(b))
                                .map_err(DataFusionError::from),
                            Some(Err(e)) => Err(e),
                            None => {
                                return match out.finish() {
                                    Err(e) => Some((Err(e.into()), (pieces, None))),
                                    Ok(()) => out.ready.pop_front().map(|b| (one_zero_one_nan(b), (pieces, None))),
                                };
                            }
                        };
                        if let Err(e) = pushed {
                            return Some((Err(e), (pieces, None)));
                        }
                    }
                }
            });
        Box::pin(datafusion::physical_plan::stream::RecordBatchStreamAdapter::new(self.schema.clone(), stream))
    }
}

/// The most bytes of text and binary values in one batch of kept rows: a batch ends at the row
/// that brings its values to this many bytes, when that comes before [`KEPT_BATCH`] rows (rows
/// of 100 KiB of text go 40 to a batch, not 8,192). Decided by the rows alone, as the count is.
const KEPT_BYTES: u64 = 4 << 20;

/// Rows cut into batches of exactly [`KEPT_BATCH`] rows, or fewer whose values reach
/// [`KEPT_BYTES`] (the last one less): whole batches are slices of what is pushed, and only one
/// that spans two pushes is copied.
struct Batches {
    schema: SchemaRef,
    /// Rows waiting for the rest of their batch, fewer than [`KEPT_BATCH`], their values fewer
    /// than [`KEPT_BYTES`] bytes.
    pending: Vec<RecordBatch>,
    pending_rows: usize,
    pending_bytes: u64,
    ready: std::collections::VecDeque<RecordBatch>,
}

impl Batches {
    fn new(schema: SchemaRef) -> Self {
        Batches { schema, pending: Vec::new(), pending_rows: 0, pending_bytes: 0, ready: Default::default() }
    }

    fn push(&mut self, b: RecordBatch) -> Result<(), arrow::error::ArrowError> {
        let n = b.num_rows();
        // Row by row only when the values could reach the bytes of a batch.
        let sizes = (self.pending_bytes + value_bytes(&b, None) >= KEPT_BYTES).then(|| {
            let mut sizes = vec![0u64; n];
            value_bytes(&b, Some(&mut sizes));
            sizes
        });
        let mut at = 0;
        while at < n {
            let room = KEPT_BATCH - self.pending_rows;
            let mut take = room.min(n - at);
            let mut full = take == room;
            match &sizes {
                Some(sizes) => {
                    for (i, &x) in sizes[at..at + take].iter().enumerate() {
                        self.pending_bytes += x;
                        if self.pending_bytes >= KEPT_BYTES {
                            (take, full) = (i + 1, true);
                            break;
                        }
                    }
                }
                None => self.pending_bytes += value_bytes(&b.slice(at, take), None),
            }
            self.pending.push(b.slice(at, take));
            self.pending_rows += take;
            at += take;
            if full {
                self.flush()?;
            }
        }
        Ok(())
    }

    /// Makes the pending rows a batch.
    fn flush(&mut self) -> Result<(), arrow::error::ArrowError> {
        match self.pending.len() {
            0 => {}
            1 => self.ready.extend(self.pending.pop()),
            _ => self.ready.push_back(arrow::compute::concat_batches(&self.schema, &self.pending)?),
        }
        self.pending.clear();
        self.pending_rows = 0;
        self.pending_bytes = 0;
        Ok(())
    }

    fn finish(&mut self) -> Result<(), arrow::error::ArrowError> {
        self.flush()
    }
}

/// The bytes of the text and binary values of `b`'s rows: in all, and each row's added to
/// `rows` when given.
fn value_bytes(b: &RecordBatch, mut rows: Option<&mut [u64]>) -> u64 {
    use arrow::array::{Array, AsArray};
    fn add<O: arrow::array::OffsetSizeTrait>(offsets: &[O], rows: &mut Option<&mut [u64]>) -> u64 {
        if let Some(rows) = rows {
            for (r, w) in rows.iter_mut().zip(offsets.windows(2)) {
                *r += (w[1] - w[0]).as_usize() as u64;
            }
        }
        match (offsets.first(), offsets.last()) {
            (Some(a), Some(z)) => (*z - *a).as_usize() as u64,
            _ => 0,
        }
    }
    let mut total = 0;
    for c in b.columns() {
        total += match c.data_type() {
            DataType::Utf8 => add(c.as_string::<i32>().value_offsets(), &mut rows),
            DataType::LargeUtf8 => add(c.as_string::<i64>().value_offsets(), &mut rows),
            DataType::Binary => add(c.as_binary::<i32>().value_offsets(), &mut rows),
            DataType::LargeBinary => add(c.as_binary::<i64>().value_offsets(), &mut rows),
            DataType::Utf8View | DataType::BinaryView => {
                let data = c.to_data();
                let views = &data.buffers()[0].typed_data::<u128>()[data.offset()..data.offset() + data.len()];
                let mut sum = 0;
                for (i, v) in views.iter().enumerate() {
                    let len = (*v as u32) as u64;
                    sum += len;
                    if let Some(rows) = rows.as_deref_mut() {
                        rows[i] += len;
                    }
                }
                sum
            }
            _ => 0,
        };
    }
    total
}

/// A batch of kept rows with one zero and one NaN in its float columns: `0.0` and `-0.0` are
/// equal in SQL, and so are NaNs, but the engine's hash tables and orders keep their bits apart
/// (`count(DISTINCT f)` counted both zeros, a NaN with its sign bit set made a second group
/// and was the `min`).
fn one_zero_one_nan(b: RecordBatch) -> Result<RecordBatch, DataFusionError> {
    if !b.schema().fields().iter().any(|f| crate::prepare::holds_floats(f.data_type())) {
        return Ok(b);
    }
    let columns = b.columns().iter().map(crate::prepare::one_zero_one_nan).collect();
    Ok(RecordBatch::try_new(b.schema(), columns)?)
}

/// The table of a date's kept rows, of which `events` is a view.
const ROWS: &str = "__lakeswap_rows";

/// Registers `events` as a view over the kept rows ([`KeptRows`]): the columns of `events`,
/// the engine reading only those the query uses — no copy of the whole date.
async fn register_events(ctx: &SessionContext, rows: Rows) -> Result<(), DataFusionError> {
    let Rows { source, date, events } = rows;
    let nullable = |record: &Schema| {
        let fields: Vec<Field> = record.fields().iter().map(|f| f.as_ref().clone().with_nullable(true)).collect();
        Arc::new(Schema::new(fields))
    };
    let record = match &source {
        Source::Chunks { chunks, .. } => {
            let record = chunks.first().map(|c| c.schema());
            record.unwrap_or_else(|| {
                Arc::new(Schema::new(
                    events.fields().iter().filter(|f| f.data_type() != &DataType::Null).cloned().collect::<Vec<_>>(),
                ))
            })
        }
        Source::Spilled { record, .. } => record.clone(),
    };
    let table = KeptRows { record: nullable(&record), source: Arc::new(source) };
    ctx.register_table(ROWS, Arc::new(table))?;
    let col = |n: &str| Expr::Column(datafusion::common::Column::new_unqualified(n));
    let select: Vec<Expr> = events
        .fields()
        .iter()
        .map(|f| match record.field_with_name(f.name()) {
            // A zoned timestamp shown in the job's zone: the same instants.
            Ok(r) if r.data_type() != f.data_type() => {
                datafusion::prelude::cast(col(f.name()), f.data_type().clone()).alias(f.name())
            }
            Ok(_) => col(f.name()),
            Err(_) => {
                datafusion::prelude::lit(datafusion::common::ScalarValue::Date32(Some(crate::dates::to_days(date))))
                    .alias(f.name())
            }
        })
        .collect();
    let view = ctx.table(ROWS).await?.select(select)?;
    ctx.register_table(EVENTS, view.into_view())?;
    Ok(())
}

/// Runs the query over one date's rows: the output, sorted (see the module documentation).
/// Given two `threads` or more, a query whose groups can be computed apart runs on two
/// (`split`), with the same result.
pub async fn execute(
    query: &Query,
    rows: Rows,
    lookups: &[Lookup],
    memory: Option<&Memory>,
    threads: usize,
) -> Result<RecordBatch, PartitionError> {
    let split_from = if threads > 1 { SPLIT_MIN_ROWS } else { usize::MAX };
    execute_with(query, rows, lookups, memory, split_from).await
}

/// Kept rows from which a date's query is split between two threads.
const SPLIT_MIN_ROWS: usize = 65_536;

/// [`execute`], splitting the query between two threads from `split_min_rows` kept rows.
async fn execute_with(
    query: &Query,
    rows: Rows,
    lookups: &[Lookup],
    memory: Option<&Memory>,
    split_min_rows: usize,
) -> Result<RecordBatch, PartitionError> {
    let spill_dir = memory.map(|m| m.spill_dir.display().to_string());
    let fail = |e: DataFusionError| failure(e, query, spill_dir.as_deref());
    let ctx = match memory {
        Some(m) => {
            let spill = spills_exactly(query, &rows.events, lookups).await.map_err(fail)?;
            session_within(m, spill, query.zone.as_deref()).map_err(fail)?
        }
        None => session(query.zone.as_deref()),
    };
    // An unbounded in-memory date may be split; a bounded one keeps its one memory pool.
    let in_memory = match (&rows.source, memory) {
        (Source::Chunks { chunks, keep }, None) => Some((chunks.clone(), keep.clone())),
        _ => None,
    };
    let (date, events) = (rows.date, rows.events.clone());
    register_events(&ctx, rows).await.map_err(fail)?;
    for l in lookups {
        register(&ctx, &l.name, l.schema.clone(), l.batches.clone()).map_err(fail)?;
    }
    let mut df = ctx.sql_with_options(&query.sql, options()).await.map_err(fail)?;
    let schema = output_schema(&ctx, &df).map_err(fail)?;
    if !query.ordered && !orders_output(df.logical_plan()) {
        let halves = in_memory.and_then(|(chunks, keep)| {
            let masks = split(df.logical_plan(), &ctx.state(), &chunks, &keep, split_min_rows)?;
            Some((chunks, masks))
        });
        if let Some((chunks, masks)) = halves {
            let jobs: Vec<_> = masks
                .into_iter()
                .map(|keep| {
                    let rows =
                        Rows { source: Source::Chunks { chunks: chunks.clone(), keep }, date, events: events.clone() };
                    let (sql, lookups, zone) = (query.sql.clone(), lookups.to_vec(), query.zone.clone());
                    move || -> Result<Vec<RecordBatch>, DataFusionError> {
                        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
                        rt.block_on(async move {
                            let ctx = session(zone.as_deref());
                            register_events(&ctx, rows).await?;
                            for l in &lookups {
                                register(&ctx, &l.name, l.schema.clone(), l.batches.clone())?;
                            }
                            ctx.sql_with_options(&sql, options()).await?.collect().await
                        })
                    }
                })
                .collect();
            let halves = tokio::task::spawn_blocking(move || at_once(jobs));
            let mut out = Vec::new();
            for half in joined(Owned(halves)).await? {
                let batches = half.map_err(|p| panicked(p.as_ref()))?.map_err(fail)?;
                for b in batches {
                    // In the planned schema, as one query's batches are concatenated below.
                    out.push(RecordBatch::try_new(schema.clone(), b.columns().to_vec()).map_err(|e| fail(e.into()))?);
                }
            }
            // The two halves' groups, sorted as one: the same operator as below, over the
            // same rows.
            let ctx = session(query.zone.as_deref());
            register(&ctx, "__lakeswap_out", schema.clone(), out).map_err(fail)?;
            df = ctx.table("__lakeswap_out").await.map_err(fail)?;
        }
        let by = df
            .schema()
            .fields()
            .iter()
            .map(|f| Expr::Column(datafusion::common::Column::new_unqualified(f.name())).sort(true, true))
            .collect();
        df = df.sort(by).map_err(fail)?;
    }
    let schema = output_schema(&ctx, &df).map_err(fail)?;
    // A task of its own: the dates in flight are polled by one task, and their queries would
    // otherwise take turns on one thread.
    let out = joined(Owned(tokio::spawn(df.collect()))).await?.map_err(fail)?;
    let batch =
        arrow::compute::concat_batches(&schema, &out).map_err(|e| PartitionError::Query { message: e.to_string() })?;
    shape(query, batch)
}

/// Whether the query gives the same bytes when the engine spills its state to disk as when it
/// holds it: no `ORDER BY` or window of the user's (rows that tie come out of a spilled sort in
/// another order), and only aggregates whose partial states merge exactly (`count`, `min`,
/// `max`, `median`, `approx_distinct`, `bool_and`/`bool_or`, `sum` of integers and decimals,
/// `avg` of decimals: the engine averages integers as doubles). A float sum spilled adds its
/// partial sums in another order; `array_agg`, `string_agg` and the approximate percentiles
/// merge in another order too.
async fn spills_exactly(query: &Query, events: &SchemaRef, lookups: &[Lookup]) -> Result<bool, DataFusionError> {
    let ctx = session(query.zone.as_deref());
    register(&ctx, EVENTS, events.clone(), Vec::new())?;
    for l in lookups {
        register(&ctx, &l.name, l.schema.clone(), Vec::new())?;
    }
    let plan = ctx.sql_with_options(&query.sql, options()).await?.into_optimized_plan()?;
    let mut exact = true;
    plan.apply_with_subqueries(|p| {
        exact &= match p {
            LogicalPlan::Window(_) | LogicalPlan::Sort(_) => false,
            LogicalPlan::Aggregate(a) => a.aggr_expr.iter().all(|e| {
                let Expr::AggregateFunction(f) = e.clone().unalias_nested().data else { return false };
                let schema = a.input.schema();
                let float = f.params.args.iter().any(|x| {
                    datafusion::logical_expr::ExprSchemable::get_type(x, schema).is_ok_and(|t| t.is_floating())
                });
                match f.func.name() {
                    "count" | "min" | "max" | "median" | "approx_distinct" | "bool_and" | "bool_or" => true,
                    "sum" | "avg" => !float,
                    _ => false,
                }
            }),
            _ => true,
        };
        Ok(if exact { TreeNodeRecursion::Continue } else { TreeNodeRecursion::Stop })
    })?;
    Ok(exact)
}

/// The engine's error as the date's. An input or output error is the engine's spill files
/// failing (a full disk): the date's rows are not at fault (exit 1, not 3).
fn failure(e: DataFusionError, query: &Query, spill_dir: Option<&str>) -> PartitionError {
    let spill = |message: String| PartitionError::Spill {
        path: spill_dir.unwrap_or("the spill folder (--spill-dir)").to_string(),
        message,
    };
    let io = match e.find_root() {
        DataFusionError::IoError(io) => Some(io.to_string()),
        DataFusionError::ArrowError(inner, _) => match inner.as_ref() {
            arrow::error::ArrowError::IoError(_, io) => Some(io.to_string()),
            _ => None,
        },
        _ => None,
    };
    if let Some(message) = io {
        return spill(message);
    }
    match e.find_root() {
        DataFusionError::External(inner) if inner.downcast_ref::<PartitionError>().is_some() => {
            PartitionError::Other(inner.to_string())
        }
        DataFusionError::ResourcesExhausted(m) => PartitionError::Other(format!(
            "the daily table's query needs more memory than its share of --memory-limit (half of it) and cannot \
             spill what it holds ({m}); raise the limit. (A query whose result would change with where the engine \
             spills does not spill: a float sum or average, an ORDER BY or a window, an ordered or approximate \
             aggregate.)"
        )),
        DataFusionError::ArrowError(inner, _) if matches!(inner.as_ref(), arrow::error::ArrowError::CastError(m) if m.contains("Overflowing") || m.contains("out of range")) => {
            PartitionError::Query {
                message: format!(
                    "{}. A value (a sum, an average, a cast) does not fit its type (int64, or a decimal's 38 \
                     digits) and is not written wrapped or rounded; an integer total that large fits \
                     sum(CAST(x AS DECIMAL(38, 0)))",
                    reason(&e, &query.sql)
                ),
            }
        }
        _ => PartitionError::Query { message: reason(&e, &query.sql) },
    }
}

/// A query task's result; a panic inside the engine fails the date, naming it.
async fn joined<T>(task: Owned<T>) -> Result<T, PartitionError> {
    task.await.map_err(|e| match e.try_into_panic() {
        Ok(panic) => panicked(panic.as_ref()),
        Err(e) => PartitionError::Other(format!("the query was cancelled: {e}")),
    })
}

/// A panic inside the engine as the date's error.
fn panicked(panic: &(dyn std::any::Any + Send)) -> PartitionError {
    let why = crate::error::panic_message(panic);
    PartitionError::Other(format!("the engine failed running the query (a panic: {why})"))
}

/// Runs `jobs` at once, the first on the calling thread and every other on a thread started
/// for it: the kernel places a new thread on an idle core, where two pool threads woken
/// together were seen to share one core for tens of milliseconds while the other idled.
/// Each job's result, or its panic.
fn at_once<T: Send>(jobs: Vec<impl FnOnce() -> T + Send>) -> Vec<std::thread::Result<T>> {
    std::thread::scope(|s| {
        let mut jobs = jobs.into_iter();
        let Some(mine) = jobs.next() else { return Vec::new() };
        let others: Vec<_> = jobs.map(|job| s.spawn(job)).collect();
        let mut out = vec![std::panic::catch_unwind(std::panic::AssertUnwindSafe(mine))];
        out.extend(others.into_iter().map(|h| h.join()));
        out
    })
}

/// A date's kept rows in two halves, each group of the query wholly in one, for the query to
/// run on two threads — or `None` where that could change a byte of the result.
///
/// The query must compute each output row from one group's rows alone: `events` filtered row
/// by row, one `GROUP BY` of plain columns, then `HAVING` and projections (no joins, no
/// subqueries, windows, `LIMIT`, `DISTINCT` or unions), and aggregates that add their rows
/// one at a time in arrival order or exactly (`count`, `sum`, `avg`, `min`, `max`, their
/// `DISTINCT` and `FILTER` forms). Each group then sees the same rows in the same order as
/// in one run, so its values are the same to the bit, float sums included; the halves' rows
/// are sorted together afterwards. The halves are the groups whose hash has a given bit set
/// and those whose hash has not: of its top 16 bits, the one that splits the rows most evenly
/// (past 4,096 distinct values of those bits, the top bit) — a function of the data, so a re-run splits the same way.
fn split(
    plan: &LogicalPlan,
    state: &datafusion::execution::SessionState,
    chunks: &[RecordBatch],
    keep: &[arrow::array::BooleanArray],
    min_rows: usize,
) -> Option<[Vec<arrow::array::BooleanArray>; 2]> {
    let record = chunks.first()?.schema();
    let columns = group_columns(plan, &record)?;
    let kept: usize = keep.iter().map(|k| k.true_count()).sum();
    if kept < min_rows.max(2) || !cannot_fail(&state.optimize(plan).ok()?) {
        return None;
    }
    let state = foldhash::fast::FixedState::with_seed(0);
    // The top 16 bits of each row's group hash (2 bytes a row).
    let hashes: Vec<Vec<u16>> = on_two_threads(chunks, |c| {
        let arrays: Vec<&ArrayRef> = columns.iter().filter_map(|n| c.column_by_name(n)).collect();
        let mut h = vec![0u64; c.num_rows()];
        datafusion::common::hash_utils::create_hashes(arrays, &state, &mut h).ok()?;
        Some(h.into_iter().map(|h| (h >> 48) as u16).collect())
    })
    .into_iter()
    .collect::<Option<_>>()?;
    // Rows per group hash, from every eighth row: enough to balance the halves.
    const MANY: usize = 4096;
    let mut counts: hashbrown::HashMap<u16, u64, foldhash::fast::FixedState> = Default::default();
    'count: for (h, k) in hashes.iter().zip(keep) {
        for i in (0..h.len()).step_by(8).filter(|&i| k.value(i)) {
            *counts.entry(h[i]).or_default() += 1;
            if counts.len() > MANY {
                break 'count;
            }
        }
    }
    if counts.len() < 2 {
        return None;
    }
    // The bit of the group hash that splits the rows most evenly (the lowest of equals).
    let bit = match counts.len() > MANY {
        true => 15,
        false => {
            let total: u64 = counts.values().sum();
            let imbalance = |b: u32| {
                let second: u64 = counts.iter().filter(|(h, _)| *h >> b & 1 == 1).map(|(_, n)| n).sum();
                (total as i64 - 2 * second as i64).unsigned_abs()
            };
            (0..16).min_by_key(|&b| (imbalance(b), b))?
        }
    };
    let pairs: Vec<(&Vec<u16>, &arrow::array::BooleanArray)> = hashes.iter().zip(keep).collect();
    let masks = on_two_threads(&pairs, |(h, k)| {
        let in_second = arrow::buffer::BooleanBuffer::collect_bool(h.len(), |i| h[i] >> bit & 1 == 1);
        (k.values() & &!&in_second, k.values() & &in_second)
    });
    let (first, second) =
        masks.into_iter().map(|(a, b)| (BooleanArray::new(a, None), BooleanArray::new(b, None))).unzip();
    Some([first, second])
}

/// `f` of each item, in order, the items shared between the calling thread and one other.
fn on_two_threads<T: Sync, R: Send>(items: &[T], f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    let mid = items.len().div_ceil(2);
    let (a, b) = items.split_at(mid);
    std::thread::scope(|s| {
        let other = s.spawn(|| b.iter().map(&f).collect::<Vec<_>>());
        let mut out: Vec<R> = a.iter().map(&f).collect();
        out.extend(other.join().unwrap_or_else(|p| std::panic::resume_unwind(p)));
        out
    })
}

/// Whether no expression of the plan (as it runs: type casts added, view inlined) can fail on
/// a value. The engine evaluates `AND`, `OR` and `CASE` on some rows of a batch or on all of
/// them, by the batch; a half's batches hold other rows, so an expression that can fail
/// (division, a cast of text to a number …) could fail in one run and not in the other.
fn cannot_fail(plan: &LogicalPlan) -> bool {
    use datafusion::logical_expr::Operator as Op;
    fn widening(from: &DataType, to: &DataType) -> bool {
        use DataType::*;
        let int_bits = |t: &DataType| match t {
            Int8 => Some(8),
            Int16 => Some(16),
            Int32 => Some(32),
            Int64 => Some(64),
            _ => None,
        };
        match (from, to) {
            _ if from == to => true,
            (Utf8 | LargeUtf8 | Utf8View, Utf8 | LargeUtf8 | Utf8View) => true,
            (Int8 | Int16 | Int32 | Int64 | Float32 | Decimal128(..) | Decimal256(..), Float64) => true,
            (Decimal128(p1, s1) | Decimal256(p1, s1), Decimal128(p2, s2) | Decimal256(p2, s2)) => {
                s2 >= s1 && (*p2 as i16 - *s2 as i16) >= (*p1 as i16 - *s1 as i16)
            }
            (a, Decimal128(p, s) | Decimal256(p, s)) if int_bits(a).is_some() => {
                // Digits of the largest value of the integer type.
                let digits = match int_bits(a) {
                    Some(8) => 3,
                    Some(16) => 5,
                    Some(32) => 10,
                    _ => 19,
                };
                *s >= 0 && (*p as i16 - *s as i16) >= digits
            }
            (a, b) => matches!((int_bits(a), int_bits(b)), (Some(x), Some(y)) if x <= y),
        }
    }
    let mut ok = true;
    let _ = plan.apply(|node| {
        let inputs = node.inputs();
        let schema = match inputs.as_slice() {
            [one] => Some(one.schema().clone()),
            _ => None,
        };
        node.apply_expressions(|e| {
            e.apply(|e| {
                let safe = match e {
                    Expr::Column(_)
                    | Expr::Literal(..)
                    | Expr::Alias(_)
                    | Expr::Not(_)
                    | Expr::IsNull(_)
                    | Expr::IsNotNull(_)
                    | Expr::IsTrue(_)
                    | Expr::IsFalse(_)
                    | Expr::IsUnknown(_)
                    | Expr::IsNotTrue(_)
                    | Expr::IsNotFalse(_)
                    | Expr::IsNotUnknown(_)
                    | Expr::InList(_)
                    | Expr::Between(_)
                    | Expr::Like(_)
                    | Expr::SimilarTo(_)
                    | Expr::Case(_)
                    | Expr::TryCast(_)
                    | Expr::AggregateFunction(_) => true,
                    Expr::BinaryExpr(b) => matches!(
                        b.op,
                        Op::Eq
                            | Op::NotEq
                            | Op::Lt
                            | Op::LtEq
                            | Op::Gt
                            | Op::GtEq
                            | Op::And
                            | Op::Or
                            | Op::IsDistinctFrom
                            | Op::IsNotDistinctFrom
                    ),
                    Expr::ScalarFunction(f) => {
                        matches!(f.func.name(), "coalesce" | "nullif") || f.func.name() == floats::NAME
                    }
                    Expr::Cast(c) => schema
                        .as_ref()
                        .and_then(|s| {
                            datafusion::logical_expr::ExprSchemable::get_type(c.expr.as_ref(), s.as_ref()).ok()
                        })
                        .is_some_and(|from| widening(&from, c.field.data_type())),
                    _ => false,
                };
                ok &= safe;
                Ok(if safe { TreeNodeRecursion::Continue } else { TreeNodeRecursion::Stop })
            })
        })?;
        Ok(if ok { TreeNodeRecursion::Continue } else { TreeNodeRecursion::Stop })
    });
    ok
}

/// The `GROUP BY` columns of a query that [`split`] may divide (the columns of `record` among
/// them; one absent from it is the date, the same on every row), or `None`.
fn group_columns(plan: &LogicalPlan, record: &Schema) -> Option<Vec<String>> {
    fn row_level(e: &Expr) -> bool {
        !e.exists(|e| {
            Ok(matches!(
                e,
                Expr::ScalarSubquery(_)
                    | Expr::InSubquery(_)
                    | Expr::Exists(_)
                    | Expr::OuterReferenceColumn(..)
                    | Expr::WindowFunction(_)
                    | Expr::AggregateFunction(_)
                    | Expr::GroupingSet(_)
                    | Expr::Placeholder(_)
            ))
        })
        .unwrap_or(true)
    }
    // `events` as [`register_events`] defines it: the kept rows, their columns and the date.
    fn kept_rows(plan: &LogicalPlan) -> bool {
        let LogicalPlan::Projection(p) = plan else { return false };
        let LogicalPlan::TableScan(t) = p.input.as_ref() else { return false };
        p.expr.iter().all(|e| matches!(e.clone().unalias(), Expr::Column(_) | Expr::Literal(..)))
            && t.table_name.table() == ROWS
            && t.filters.is_empty()
            && t.fetch.is_none()
    }
    fn over_events(plan: &LogicalPlan) -> bool {
        match plan {
            LogicalPlan::Filter(f) => row_level(&f.predicate) && over_events(&f.input),
            LogicalPlan::SubqueryAlias(a) if a.alias.table() == EVENTS && kept_rows(&a.input) => true,
            LogicalPlan::SubqueryAlias(a) => over_events(&a.input),
            LogicalPlan::TableScan(t) => {
                t.table_name.table() == EVENTS
                    && t.table_name.schema().is_none()
                    && t.filters.is_empty()
                    && t.fetch.is_none()
            }
            _ => false,
        }
    }
    let mut node = plan;
    let aggregate = loop {
        node = match node {
            LogicalPlan::Projection(p) if p.expr.iter().all(row_level) => &p.input,
            LogicalPlan::Filter(f) if row_level(&f.predicate) => &f.input,
            LogicalPlan::SubqueryAlias(a) => &a.input,
            LogicalPlan::Aggregate(a) => break a,
            _ => return None,
        };
    };
    if aggregate.group_expr.is_empty() || !over_events(&aggregate.input) {
        return None;
    }
    for e in &aggregate.aggr_expr {
        let Expr::AggregateFunction(f) = e.clone().unalias_nested().data else { return None };
        let p = &f.params;
        // A distinct sum or average adds its set's values in the set's order, which depends
        // on how the group's rows were cut into batches.
        let exact_or_in_order = match f.func.name() {
            "count" | "min" | "max" => true,
            "sum" | "avg" => !p.distinct,
            _ => false,
        };
        if !exact_or_in_order
            || !p.order_by.is_empty()
            || !p.args.iter().all(row_level)
            || !p.filter.as_deref().is_none_or(row_level)
        {
            return None;
        }
    }
    let mut columns = Vec::new();
    for e in &aggregate.group_expr {
        let Expr::Column(c) = e else { return None };
        let Ok(field) = record.field_with_name(&c.name) else { continue };
        let hashed_as_grouped = matches!(
            field.data_type(),
            DataType::Int8
                | DataType::Int16
                | DataType::Int32
                | DataType::Int64
                | DataType::UInt8
                | DataType::UInt16
                | DataType::UInt32
                | DataType::UInt64
                | DataType::Utf8
                | DataType::LargeUtf8
                | DataType::Utf8View
                | DataType::Binary
                | DataType::LargeBinary
                | DataType::Boolean
                | DataType::Date32
                | DataType::Date64
                | DataType::Timestamp(..)
                | DataType::Decimal128(..)
                | DataType::Decimal256(..)
        );
        if !hashed_as_grouped {
            return None;
        }
        columns.push(c.name.clone());
    }
    (!columns.is_empty()).then_some(columns)
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
    if let Some(why) = unwritable(&schema) {
        return Err(PartitionError::Query { message: why });
    }
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
            DataType::Date32 if c.data_type() == &DataType::Date64 => {
                // A date64 that is not a midnight has no date32: cut, it would name another day.
                let ms = c.as_primitive::<arrow::datatypes::Date64Type>();
                if let Some(i) = (0..ms.len()).find(|&i| ms.is_valid(i) && ms.value(i).rem_euclid(86_400_000) != 0) {
                    return Err(PartitionError::Query {
                        message: format!(
                            "the column `{}` holds {} ms, a date64 that is not a midnight; it is written as a \
                             date: make it a timestamp (CAST(… AS TIMESTAMP)) or a date of its day",
                            f.name(),
                            ms.value(i)
                        ),
                    });
                }
                arrow::compute::cast(c, f.data_type())
                    .map_err(|e| PartitionError::Query { message: format!("the column `{}`: {e}", f.name()) })?
            }
            _ => {
                let exact = arrow::compute::CastOptions { safe: false, ..Default::default() };
                arrow::compute::cast_with_options(c, f.data_type(), &exact)
                    .map_err(|e| PartitionError::Query { message: format!("the column `{}`: {e}", f.name()) })?
            }
        };
        columns.push(narrowed);
    }
    let batch = RecordBatch::try_new(schema, columns).map_err(|e| PartitionError::Query { message: e.to_string() })?;
    check_precision(&batch)?;
    Ok(batch)
}

/// `"name"`, quoted for SQL.
pub fn ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// A value of the config as a SQL literal of a column's type, exactly: `0.7` for a
/// decimal(12,2) column is `CAST('0.70' AS DECIMAL(12,2))`; a value the column can never hold
/// is refused.
fn literal(v: &toml::Value, column: &str, ty: &DataType, tz: chrono_tz::Tz) -> Result<String, String> {
    let text = crate::predicate::value_text(v, ty);
    if ty == &DataType::Null {
        return Err(format!(
            "column `{column}` has no value in the objects read to plan, so its type is unknown and `{text}` \
             cannot be compared in it: declare its type in [input.schema]"
        ));
    }
    let never = |why: String| format!("`{text}` can never equal a value of column `{column}` ({ty}): {why}");
    crate::predicate::exact_float(v, ty).map_err(|why| format!("column `{column}`: {why}"))?;
    crate::predicate::quoted_integer(v, ty).map_err(|why| format!("column `{column}`: {why}"))?;
    let base = crate::read::unify::base(ty).clone();
    let quoted = |s: &str| format!("'{}'", s.replace('\'', "''"));
    let sql = match &base {
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => {
            if !matches!(v, toml::Value::String(_)) {
                return Err(never("the column holds text; quote the value".into()));
            }
            quoted(&text)
        }
        // As a tombstone's value and the input's text read: `true`, `"TRUE"`, `1`, `"0"`.
        DataType::Boolean => match v {
            toml::Value::Boolean(_) | toml::Value::String(_) | toml::Value::Integer(_) => {
                crate::read::text::parse_bool(&text).map_err(never)?.to_string().to_uppercase()
            }
            _ => return Err(never("write true or false".into())),
        },
        t if t.is_integer() => match crate::predicate::integer_value(&text, t) {
            Some(Ok(v)) => arrow::util::display::array_value_to_string(&v, 0).map_err(|e| never(e.to_string()))?,
            Some(Err(why)) => return Err(never(why)),
            None => return Err(never(format!("`{text}` is not an integer"))),
        },
        t if t.is_floating() || matches!(t, DataType::Decimal128(..) | DataType::Date32) => {
            let declared = crate::read::Declared::plain(match t {
                DataType::Date32 => DataType::Date32,
                // In the column's own width: a value a float32 cannot hold is refused.
                DataType::Float32 => DataType::Float32,
                t if t.is_floating() => DataType::Float64,
                t => t.clone(),
            });
            let parsed =
                crate::read::text::parse_column(&arrow::array::StringArray::from(vec![text.as_str()]), &declared, tz);
            if let Some((_, why)) = parsed.bad.first() {
                return Err(never(why.clone()));
            }
            // Dates and decimals as their values read (`" 2026-11-01"`, `"1e-2"`), which the
            // engine's own casts of the text would not all take.
            let shown =
                || arrow::util::display::array_value_to_string(&parsed.array, 0).map_err(|e| never(e.to_string()));
            match t {
                DataType::Date32 => format!("DATE {}", quoted(&shown()?)),
                DataType::Decimal128(p, s) => format!("CAST({} AS DECIMAL({p},{s}))", quoted(&shown()?)),
                // In the column's own type: `0.1` for a float32 column is float32's 0.1.
                DataType::Float32 => format!("CAST({} AS REAL)", quoted(text.trim())),
                _ => format!("CAST({} AS DOUBLE)", quoted(text.trim())),
            }
        }
        other => {
            return Err(format!(
                "column `{column}` is of type {other}, whose values cannot be listed; write the condition in SQL \
                 (`where = \"{column} = ...\"`)"
            ))
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
            Some(Where::Sql(s)) => Some(format!("({})", one_expression(s).map_err(|m| (format!("{key}.where"), m))?)),
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
                let (wide, out) = match &crate::read::unify::base(ty) {
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
    Ok(Query { sql, ordered: true, narrow, not_null, zone: Some(tz.name().to_string()) })
}

/// A shorthand's `where` as one SQL expression, written anew from its parse: text that closes
/// the expression and goes on (`x > 0) OR (true`), or a comment, cannot reach the query.
fn one_expression(sql: &str) -> Result<String, String> {
    use datafusion::sql::sqlparser::{dialect::GenericDialect, parser::Parser, tokenizer::Token};
    let bad = |e: &dyn std::fmt::Display| format!("`{sql}` is not a SQL boolean expression: {e}");
    let mut parser = Parser::new(&GenericDialect {}).try_with_sql(sql).map_err(|e| bad(&e))?;
    let expr = parser.parse_expr().map_err(|e| bad(&e))?;
    let next = parser.peek_token();
    if next.token != Token::EOF {
        return Err(bad(&format!(
            "it is one expression followed by more, from `{}` at {}",
            next.token, next.span.start
        )));
    }
    // A condition on each row by itself: a subquery reads other rows (and the engine cannot
    // compute one inside an aggregate's filter).
    let subquery = datafusion::sql::sqlparser::ast::visit_expressions(&expr, |e| {
        use datafusion::sql::sqlparser::ast::Expr as Sql;
        match e {
            Sql::Subquery(_) | Sql::InSubquery { .. } | Sql::Exists { .. } => {
                std::ops::ControlFlow::Break(e.to_string())
            }
            _ => std::ops::ControlFlow::Continue(()),
        }
    });
    if let std::ops::ControlFlow::Break(sub) = subquery {
        let which = match sub == expr.to_string() {
            true => String::new(),
            false => format!(" (`{sub}`)"),
        };
        return Err(format!(
            "`{sql}`: a measure's where is a condition on each row by itself, not a subquery{which}; write the \
             daily table in SQL (aggregate.sql) to use one"
        ));
    }
    Ok(expr.to_string())
}

/// The job's query: its SQL, or the shorthand compiled.
pub fn query_of(agg: &AggregateSection, record: &Schema, tz: chrono_tz::Tz) -> Result<Query, (String, String)> {
    match &agg.sql {
        Some(sql) => Ok(Query {
            sql: sql.clone(),
            ordered: false,
            narrow: Vec::new(),
            not_null: Vec::new(),
            zone: Some(tz.name().to_string()),
        }),
        None => compile(agg, record, tz),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Float64Array, Int64Array, StringArray};
    use datafusion::physical_plan::ExecutionPlanProperties;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;

    /// Only the position `reason` ends a message with is cut, not text that looks like one.
    #[test]
    fn only_the_engines_position_is_cut() {
        assert_eq!(without_position("No field named x. (at line 1, column 50)"), "No field named x.");
        for kept in
            ["a value ' (at line 2)' (at line 1)", "x (at line 1, column 5) and more", "x (at line a, column 5)"]
        {
            assert_eq!(without_position(kept), kept);
        }
    }

    /// A boolean is listed as a tombstone's value is written: `true`, `"TRUE"`, `1`, `"0"` are
    /// accepted by both, and what one refuses the other does.
    #[test]
    fn a_boolean_is_listed_as_a_tombstone_value_is_written() {
        let tz = chrono_tz::UTC;
        let column: ArrayRef = Arc::new(arrow::array::BooleanArray::from(vec![true, false]));
        for (v, want) in [
            (toml::Value::Boolean(true), "TRUE"),
            ("true".into(), "TRUE"),
            ("FALSE".into(), "FALSE"),
            (toml::Value::Integer(1), "TRUE"),
            ("0".into(), "FALSE"),
        ] {
            assert_eq!(literal(&v, "f", &DataType::Boolean, tz).as_deref(), Ok(want), "{v}");
            let rows = crate::predicate::Equals::rows(&column, &v, tz).unwrap();
            assert_eq!(rows.value(0), want == "TRUE", "{v}");
        }
        for v in [toml::Value::from("yes"), toml::Value::Integer(2), toml::Value::Float(1.0)] {
            let e = literal(&v, "f", &DataType::Boolean, tz).unwrap_err();
            assert!(e.contains("can never equal"), "{v}: {e}");
            assert!(crate::predicate::Equals::rows(&column, &v, tz).is_err(), "{v}");
        }
    }

    /// A listed value in a type that cannot be listed is refused for its column's type, not as
    /// a value that "can never equal" it.
    #[test]
    fn a_timestamp_column_cannot_be_listed_and_says_so() {
        let ty = DataType::Timestamp(arrow::datatypes::TimeUnit::Microsecond, None);
        let e = literal(&"2026-11-01 00:00:00".into(), "ts", &ty, chrono_tz::UTC).unwrap_err();
        assert!(e.contains("column `ts` is of type Timestamp") && e.contains("write the condition in SQL"), "{e}");
        assert!(!e.contains("can never equal"), "{e}");
    }

    /// Kept rows are cut by their count and by the bytes of their text, and where they are cut
    /// depends on the rows alone, not on how they were pushed.
    #[test]
    fn kept_batches_end_at_8192_rows_or_4_mib_of_text_wherever_the_input_was_cut() {
        use arrow::array::{Array, Int64Array, StringArray};
        use arrow::datatypes::{Field, Schema};
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("t", DataType::Utf8, true),
        ]));
        // 20,000 short rows, then 40 of 300 KB, a null, then 10,000 short ones.
        let n = 30_041usize;
        let text: Vec<Option<String>> = (0..n)
            .map(|i| match i {
                20_000..20_040 => Some("x".repeat(300_000 + i)),
                20_040 => None,
                _ => Some(format!("v{i}")),
            })
            .collect();
        let all = RecordBatch::try_new(
            schema.clone(),
            vec![Arc::new(Int64Array::from_iter_values(0..n as i64)), Arc::new(StringArray::from(text))],
        )
        .unwrap();
        let edges = |cut: usize| {
            let mut b = Batches::new(schema.clone());
            let mut at = 0;
            while at < n {
                let len = cut.min(n - at);
                b.push(all.slice(at, len)).unwrap();
                at += len;
            }
            b.finish().unwrap();
            let sizes: Vec<usize> = b.ready.iter().map(|r| r.num_rows()).collect();
            let ids: Vec<i64> = b
                .ready
                .iter()
                .flat_map(|r| r.column(0).as_any().downcast_ref::<Int64Array>().unwrap().values().to_vec())
                .collect();
            assert_eq!(ids, (0..n as i64).collect::<Vec<_>>(), "every row once, in order");
            sizes
        };
        let whole = edges(n);
        for cut in [1, 7, 1000, 8192, 20_001] {
            assert_eq!(edges(cut), whole, "cut every {cut} rows");
        }
        assert_eq!(&whole[..2], [8192, 8192]);
        // The wide rows end batches early (14 of them make 4 MiB of text).
        assert!(whole[..whole.len() - 1].iter().filter(|&&r| r < 8192).count() >= 2, "{whole:?}");
        assert!(whole.contains(&14), "{whole:?}");
        let mut rows = 0;
        for (k, &r) in whole.iter().enumerate() {
            let text = value_bytes(&all.slice(rows, r), None);
            let last = value_bytes(&all.slice(rows + r - 1, 1), None);
            // A batch ends at 8,192 rows, or at the row that brings it to 4 MiB: without its
            // last row it is under 4 MiB (the last batch may end sooner).
            assert!(r == 8192 || text >= KEPT_BYTES || k == whole.len() - 1, "batch {k}: {r} rows, {text} bytes");
            assert!(text - last < KEPT_BYTES, "batch {k}: {r} rows, {text} bytes");
            rows += r;
        }
    }

    /// Rows whose float sums depend on the order they are added in: magnitudes from 1e-3 to
    /// 1e9, groups of very different sizes, about a third of the rows not kept.
    fn date_rows() -> (Vec<RecordBatch>, Vec<BooleanArray>) {
        let schema = Arc::new(Schema::new(vec![
            Field::new("g", DataType::Utf8, true),
            Field::new("h", DataType::Int64, true),
            Field::new("x", DataType::Float64, true),
            Field::new("k", DataType::Utf8, true),
            Field::new("f", DataType::Float64, true),
        ]));
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let mut chunks = Vec::new();
        let mut keep = Vec::new();
        for len in [40_000, 25_000, 35_000] {
            let r: Vec<u64> = (0..len).map(|_| next()).collect();
            let g: StringArray =
                r.iter().map(|v| Some(["a", "bb", "c", "d", "e", "ff", "g"][(v % 97 % 7) as usize])).collect();
            let h = Int64Array::from_iter_values(r.iter().map(|v| (v >> 8) as i64 % 1000));
            let x = Float64Array::from_iter_values(
                r.iter().map(|v| (v >> 11) as f64 / (1u64 << 53) as f64 * 10f64.powi((v >> 3) as i32 % 13 - 3)),
            );
            let k: StringArray = r.iter().map(|v| Some(format!("k{}", (v >> 20) % 5000))).collect();
            let f = Float64Array::from_iter_values(r.iter().map(|v| (v % 5) as f64));
            let cols: Vec<ArrayRef> = vec![Arc::new(g), Arc::new(h), Arc::new(x), Arc::new(k), Arc::new(f)];
            chunks.push(RecordBatch::try_new(schema.clone(), cols).unwrap());
            keep.push(BooleanArray::from_iter(r.iter().map(|v| Some((v >> 40) % 3 != 0))));
        }
        (chunks, keep)
    }

    fn rows(chunks: &[RecordBatch], keep: &[BooleanArray]) -> Rows {
        Rows {
            source: Source::Chunks { chunks: chunks.to_vec(), keep: keep.to_vec() },
            date: chrono::NaiveDate::from_ymd_opt(2026, 11, 5).unwrap(),
            events: chunks[0].schema(),
        }
    }

    fn query(sql: &str) -> Query {
        Query { sql: sql.into(), ordered: false, narrow: Vec::new(), not_null: Vec::new(), zone: None }
    }

    /// The plan [`execute`] sees: `events` registered as it registers it.
    async fn logical(sql: &str, chunks: &[RecordBatch], keep: &[BooleanArray]) -> LogicalPlan {
        let ctx = session(None);
        register_events(&ctx, rows(chunks, keep)).await.unwrap();
        register(&ctx, "fx", chunks[0].schema(), Vec::new()).unwrap();
        ctx.sql(sql).await.unwrap().logical_plan().clone()
    }

    fn ipc(batch: &RecordBatch) -> Vec<u8> {
        let mut w = arrow::ipc::writer::StreamWriter::try_new(Vec::new(), &batch.schema()).unwrap();
        w.write(batch).unwrap();
        w.into_inner().unwrap()
    }

    /// A full disk under the engine's spill files failed the date with exit 3, "the query
    /// failed on this date's rows": the rows are not at fault, and a retry elsewhere may pass.
    #[test]
    fn an_input_or_output_error_of_the_engine_is_a_spill_failure() {
        let full = || std::io::Error::new(std::io::ErrorKind::StorageFull, "No space left on device");
        let q = query("SELECT 1 AS x");
        for e in [
            DataFusionError::ArrowError(Box::new(arrow::error::ArrowError::IoError("IO error".into(), full())), None),
            DataFusionError::Context("spilling".into(), Box::new(DataFusionError::IoError(full()))),
        ] {
            let f = failure(e, &q, Some("/spill/lakeswap-run"));
            assert_eq!(f.exit_code(), crate::ExitCode::PartialFailure, "{f}");
            let m = f.to_string();
            assert!(m.contains("spilling to /spill/lakeswap-run failed") && m.contains("free disk space"), "{m}");
        }
        let cast = DataFusionError::ArrowError(Box::new(arrow::error::ArrowError::CastError("bad".into())), None);
        assert_eq!(failure(cast, &q, None).exit_code(), crate::ExitCode::DataContract);
    }

    /// A `UNION`'s branches were read at once and their rows passed on as they came: a float
    /// sum over them changed from run to run. They are read one after the other, the first
    /// branch first, wherever the engine merges partitions and at the top of the plan.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_unions_branches_are_read_in_order() {
        let (chunks, keep) = date_rows();
        for sql in [
            "SELECT sum(x) AS s FROM (SELECT x FROM events UNION ALL SELECT x * 3 FROM events WHERE h < 500) u",
            "SELECT array_agg(x) AS a FROM (SELECT x FROM events WHERE h > 10 UNION ALL SELECT -x FROM events) u",
            "SELECT x FROM events WHERE h < 3 UNION ALL SELECT x FROM events WHERE h > 996",
        ] {
            let ctx = session(None);
            register_events(&ctx, rows(&chunks, &keep)).await.unwrap();
            let plan = ctx.sql(sql).await.unwrap().create_physical_plan().await.unwrap();
            let shown = datafusion::physical_plan::displayable(plan.as_ref()).indent(false).to_string();
            assert!(shown.contains("InOrder") && !shown.contains("CoalescePartitionsExec"), "{sql}:\n{shown}");
            assert_eq!(plan.output_partitioning().partition_count(), 1, "{sql}:\n{shown}");
        }
        // And so the same bytes each time.
        let sql = "SELECT sum(x) AS s FROM (SELECT x FROM events UNION ALL SELECT x * 3 FROM events WHERE h < 500) u";
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..4 {
            seen.insert(ipc(&execute_with(&query(sql), rows(&chunks, &keep), &[], None, usize::MAX).await.unwrap()));
        }
        assert_eq!(seen.len(), 1);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_split_query_gives_the_same_bytes() {
        let (chunks, keep) = date_rows();
        // The data tells orders apart: group `a`'s kept values add up differently backwards.
        let xs: Vec<f64> = chunks
            .iter()
            .zip(&keep)
            .flat_map(|(c, k)| {
                let (g, x) =
                    (c.column(0).as_string::<i32>(), c.column(2).as_primitive::<arrow::datatypes::Float64Type>());
                (0..c.num_rows()).filter(move |&i| k.value(i) && g.value(i) == "a").map(move |i| x.value(i))
            })
            .collect();
        assert_ne!(xs.iter().sum::<f64>().to_bits(), xs.iter().rev().sum::<f64>().to_bits());
        for sql in [
            "SELECT g, sum(x) AS s, avg(x) AS a, count(DISTINCT k) AS d, min(x) AS lo, max(x) AS hi, \
             sum(x) FILTER (WHERE h < 500) AS s2, count(*) AS n FROM events WHERE x < 100000000 GROUP BY g HAVING count(*) > 10",
            // Past 4,096 groups: halves by the hash's top bit.
            "SELECT h, g, sum(x) AS s, avg(x) AS a FROM events GROUP BY h, g",
            // No group column in the output.
            "SELECT sum(x) AS s, count(DISTINCT k) AS d FROM events e GROUP BY e.g",
        ] {
            let plan = logical(sql, &chunks, &keep).await;
            let halves = split(&plan, &session(None).state(), &chunks, &keep, 0).expect(sql);
            let kept: usize = keep.iter().map(|k| k.true_count()).sum();
            let sizes: Vec<usize> = halves.iter().map(|h| h.iter().map(|k| k.true_count()).sum()).collect();
            assert_eq!(sizes[0] + sizes[1], kept, "{sql}");
            assert!(sizes.iter().all(|&n| n > kept / 4), "{sql}: halves of {sizes:?} rows");
            let one = execute_with(&query(sql), rows(&chunks, &keep), &[], None, usize::MAX).await.unwrap();
            let two = execute_with(&query(sql), rows(&chunks, &keep), &[], None, 0).await.unwrap();
            assert!(one.num_rows() > 1, "{sql}");
            assert_eq!(ipc(&one), ipc(&two), "{sql}");
        }
    }

    #[tokio::test]
    async fn queries_that_could_change_are_not_split() {
        let (chunks, keep) = date_rows();
        for sql in [
            "SELECT count(*) AS n FROM events",
            "SELECT g, sum(x) AS s FROM events GROUP BY g LIMIT 3",
            "SELECT DISTINCT count(*) AS n FROM events GROUP BY g",
            "SELECT upper(g) AS u, sum(x) AS s FROM events GROUP BY upper(g)",
            "SELECT f, sum(x) AS s FROM events GROUP BY f",
            "SELECT g, median(x) AS m FROM events GROUP BY g",
            "SELECT g, array_agg(x) AS xs FROM events GROUP BY g",
            "SELECT g, sum(x) AS s, rank() OVER (ORDER BY sum(x)) AS r FROM events GROUP BY g",
            "SELECT g, sum(x) AS s FROM events GROUP BY g HAVING sum(x) > (SELECT avg(x) FROM events)",
            "SELECT g, sum(x) AS s FROM events WHERE x > (SELECT avg(x) FROM events) GROUP BY g",
            "SELECT e.g, sum(fx.x) AS s FROM events e JOIN fx ON e.g = fx.g GROUP BY e.g",
            "SELECT g, sum(x) AS s FROM (SELECT * FROM events LIMIT 10) t GROUP BY g",
            "SELECT g, sum(x) AS s FROM events GROUP BY GROUPING SETS ((g), ())",
            "SELECT g, n FROM (SELECT g, count(*) AS n FROM events GROUP BY g) t UNION ALL SELECT 'z', 1",
            // A distinct sum adds in its set's order.
            "SELECT g, sum(DISTINCT x) AS s, count(*) AS n FROM events GROUP BY g",
            "SELECT g, avg(DISTINCT h) AS a, count(*) AS n FROM events GROUP BY g",
            // Expressions that can fail, which AND evaluates on more or fewer rows by the batch.
            "SELECT g, count(*) AS n FROM events GROUP BY g HAVING count(*) > 1 AND count(*) / (count(DISTINCT k) - 1) > 10",
            "SELECT g, count(*) AS n FROM events WHERE x > 0.5 AND CAST(k AS INT) > 3 GROUP BY g",
            "SELECT g, count(*) AS n FROM events WHERE x > 0.5 AND k = 3 GROUP BY g",
            "SELECT g, sum(h * 1000) AS s FROM events GROUP BY g",
            "SELECT g, sum(x) / count(*) AS m FROM events GROUP BY g",
        ] {
            let plan = logical(sql, &chunks, &keep).await;
            assert!(split(&plan, &session(None).state(), &chunks, &keep, 0).is_none(), "split: {sql}");
        }
        // One group, or too few rows: nothing to share.
        let plan = logical("SELECT g, sum(x) AS s FROM events WHERE g = 'a' GROUP BY g", &chunks, &keep).await;
        let only_a: Vec<BooleanArray> = chunks
            .iter()
            .zip(&keep)
            .map(|(c, k)| {
                let g = c.column(0).as_string::<i32>();
                BooleanArray::from_iter((0..c.num_rows()).map(|i| Some(k.value(i) && g.value(i) == "a")))
            })
            .collect();
        assert!(split(&plan, &session(None).state(), &chunks, &only_a, 0).is_none());
        assert!(split(&plan, &session(None).state(), &chunks, &keep, usize::MAX).is_none());
    }

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

    /// lakeswap's grouped distinct count of text and bytes gives DataFusion's own counts, held
    /// in memory and spilled: many groups, values inline and long, nulls, `FILTER`.
    #[tokio::test]
    async fn a_distinct_count_of_text_is_datafusions() {
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let r: Vec<u64> = (0..60_000).map(|_| next()).collect();
        let g = Int64Array::from_iter_values(r.iter().map(|v| (v % 3000) as i64));
        let s: StringArray = r
            .iter()
            .map(|v| {
                let len = [0, 2, 5, 8, 12, 16, 17, 30][(v >> 12) as usize % 8];
                ((v >> 20) % 13 != 0)
                    .then(|| (0..len).map(|i| ['x', 'y'][(v >> (24 + i)) as usize & 1]).collect::<String>())
            })
            .collect();
        let f = BooleanArray::from_iter(r.iter().map(|v| [Some(true), Some(false), None][(v >> 50) as usize % 3]));
        let sql = "SELECT g, count(DISTINCT s) AS d, count(DISTINCT s) FILTER (WHERE f) AS df, count(*) AS n \
                   FROM t GROUP BY g ORDER BY g";
        for t in distinct::TYPES {
            let schema = Arc::new(Schema::new(vec![
                Field::new("g", DataType::Int64, false),
                Field::new("s", t.clone(), true),
                Field::new("f", DataType::Boolean, true),
            ]));
            let column = arrow::compute::cast(&s, &t).unwrap();
            let all =
                RecordBatch::try_new(schema.clone(), vec![Arc::new(g.clone()), column, Arc::new(f.clone())]).unwrap();
            let batches: Vec<RecordBatch> =
                (0..all.num_rows()).step_by(8192).map(|o| all.slice(o, 8192.min(all.num_rows() - o))).collect();
            let run = |ctx: SessionContext| {
                let (schema, batches) = (schema.clone(), batches.clone());
                async move {
                    register(&ctx, "t", schema, batches).unwrap();
                    let plan = ctx.sql(sql).await.unwrap().create_physical_plan().await.unwrap();
                    let out = datafusion::physical_plan::collect(plan.clone(), ctx.task_ctx()).await.unwrap();
                    // Bytes the plan's operators spilled.
                    fn spilled(p: &Arc<dyn datafusion::physical_plan::ExecutionPlan>) -> usize {
                        p.metrics().and_then(|m| m.spilled_bytes()).unwrap_or(0)
                            + p.children().into_iter().map(spilled).sum::<usize>()
                    }
                    (arrow::compute::concat_batches(&out[0].schema(), &out).unwrap(), spilled(&plan))
                }
            };
            let (want, _) = run(SessionContext::new_with_config(config())).await;
            assert_eq!(want.num_rows(), 3000);
            assert!(want.column(1).as_primitive::<arrow::datatypes::Int64Type>().values().iter().any(|&d| d > 5));
            assert_eq!(run(session(None)).await.0, want, "{t}, in memory");
            let dir = tempfile::tempdir().unwrap();
            let memory = Memory { bytes: 4 << 20, spill_dir: dir.path().into() };
            let ctx = session_within(&memory, true, None).unwrap();
            ctx.state_ref().write().config_mut().options_mut().execution.sort_spill_reservation_bytes = 64 << 10;
            let (got, spilled) = run(ctx).await;
            assert_eq!(got, want, "{t}, spilled");
            assert!(spilled > 0, "{t}: the aggregation spilled");
        }
    }

    /// The queries a spilled date's engine may spill for: those whose partial states merge
    /// exactly. The others run without spilling, so their bytes are the in-memory path's.
    #[tokio::test]
    async fn only_queries_whose_states_merge_exactly_spill() {
        let (chunks, _) = date_rows();
        let events = chunks[0].schema();
        for (sql, exact) in [
            ("SELECT g, count(*) AS n, sum(h) AS s, min(x) AS lo, max(f) AS hi FROM events GROUP BY g", true),
            ("SELECT g, avg(CAST(h AS DECIMAL(20, 0))) AS a FROM events GROUP BY g", true),
            // The engine averages integers in double.
            ("SELECT g, avg(h) AS a FROM events GROUP BY g", false),
            ("SELECT g, count(DISTINCT k) AS d, median(x) AS m, approx_distinct(k) AS ad FROM events GROUP BY g", true),
            ("SELECT g, sum(x) AS s FROM events GROUP BY g", false),
            ("SELECT g, avg(f) AS a FROM events GROUP BY g", false),
            ("SELECT g, array_agg(k) AS ks FROM events GROUP BY g", false),
            ("SELECT g, approx_median(h) AS m FROM events GROUP BY g", false),
            ("SELECT g, h FROM events ORDER BY h LIMIT 5", false),
            ("SELECT g, row_number() OVER (ORDER BY h) AS r FROM events", false),
            ("SELECT g, (SELECT sum(x) FROM events) AS t FROM events GROUP BY g", false),
        ] {
            assert_eq!(spills_exactly(&query(sql), &events, &[]).await.unwrap(), exact, "{sql}");
        }
    }
}
