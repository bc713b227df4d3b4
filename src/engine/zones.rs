//! Timestamp literals in the job's zone. The query sees zoned timestamps in the job's zone
//! ([`super::in_job_zone`]); DataFusion reads `TIMESTAMP '…'` (and `CAST('…' AS TIMESTAMP)`,
//! `to_timestamp('…')`) as a zone-less value (a bare string compared with a zoned timestamp
//! is cast straight to it, cut to its unit), and where such a value meets a zoned one it is
//! taken as wall-clock time in that zone. That is right for `TIMESTAMP '2026-11-01 10:00:00'`
//! but shifts a literal that names its own offset (`'…T06:30:00Z'` became 06:30 in New
//! York), and fails on a wall-clock time that happens twice or never (a daylight-saving change).
//!
//! This analyzer rule runs after type coercion and replaces each such conversion of a literal
//! by the instant it means: a literal with an offset (`Z`, `+01:00`, `-0500`) is that instant;
//! one without is wall-clock time in the zone — the earlier of a time that happens twice, and
//! a time that does not exist is refused, and so is a literal finer than the column's unit
//! (it would be cut). A date meeting a zoned timestamp is midnight in its zone, and a zoned
//! timestamp made zone-less (to meet a date or a wall-clock value) is its wall-clock time there.
//! A zone-less timestamp made at run time from text meeting a zoned one is the instant it
//! names ([`meant`]); one made from an epoch is an instant from the start ([`EpochInstants`]).

use std::sync::Arc;

use chrono::{LocalResult, TimeZone};
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{plan_err, DFSchema, Result, ScalarValue};
use datafusion::logical_expr::expr::ScalarFunction;
use datafusion::logical_expr::{
    cast, ColumnarValue, Expr, ExprSchemable, LogicalPlan, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature,
    Volatility,
};
use datafusion::optimizer::AnalyzerRule;

use arrow::datatypes::{DataType, TimeUnit};

/// The analyzer rule (see the module documentation).
#[derive(Debug, Default)]
pub struct ZonedLiterals;

impl AnalyzerRule for ZonedLiterals {
    fn analyze(&self, plan: LogicalPlan, _: &ConfigOptions) -> Result<LogicalPlan> {
        // Names kept: a rewritten `GROUP BY` expression is still found by the nodes above it.
        let plan = super::rewrite_exprs(plan, rewrite)?;
        plan.apply_with_subqueries(|p| {
            p.apply_expressions(|e| {
                refuse_offsets_made_zone_less(e)?;
                Ok(datafusion::common::tree_node::TreeNodeRecursion::Continue)
            })
        })?;
        Ok(plan)
    }

    fn name(&self) -> &str {
        "lakeswap_zoned_literals"
    }
}

/// An analyzer rule run before type coercion: a timestamp made from an epoch
/// (`to_timestamp(n)` and its `_seconds` … `_nanos` forms, `from_unixtime(n)`,
/// `CAST(n AS TIMESTAMP)`) is the instant it counts to, in the job's zone like every instant
/// the query sees. DataFusion makes it a zone-less value (UTC's wall-clock time), which a
/// zoned timestamp then reads as wall-clock time in its own zone, shifted by the offset,
/// wherever the two meet (`CASE`, `COALESCE`, a subquery, an aggregate).
#[derive(Debug)]
pub struct EpochInstants {
    pub zone: Arc<str>,
}

impl AnalyzerRule for EpochInstants {
    fn analyze(&self, plan: LogicalPlan, _: &ConfigOptions) -> Result<LogicalPlan> {
        super::rewrite_exprs(plan, |e, schema| self.instant(e, schema))
    }

    fn name(&self) -> &str {
        "lakeswap_epoch_instants"
    }
}

impl EpochInstants {
    fn instant(&self, e: Expr, schema: &DFSchema) -> Result<Transformed<Expr>> {
        // `x AT TIME ZONE 'z'` (the engine's cast to a timestamp in `z`) of a zone-less `x` is
        // the instant `x` names on `z`'s clock, as in SQL, and seen in the job's zone like every
        // instant: the engine kept it in `z`, whose clock `extract(hour …)`, `date_trunc` and
        // `CAST(… AS DATE)` then read.
        if let Expr::Cast(c) = &e {
            if let DataType::Timestamp(unit, Some(z)) = c.field.data_type() {
                let zone_less = matches!(c.expr.get_type(schema), Ok(DataType::Timestamp(_, None)));
                if zone_less && z.as_ref() != self.zone.as_ref() {
                    let unit = *unit;
                    return Ok(Transformed::yes(cast(e, DataType::Timestamp(unit, Some(self.zone.clone())))));
                }
            }
        }
        // `arrow_cast(x, 'Timestamp(…)')` is the cast it names (as the optimizer makes it later),
        // read as every such cast is.
        if let Some(c) = arrow_cast_to_timestamp(&e) {
            return Ok(Transformed::yes(self.instant(c, schema)?.data));
        }
        if let Expr::ScalarFunction(f) = &e {
            if let Some(unit) = to_timestamp_unit(f.name()) {
                match (f.args.len(), f.args.first().map(|a| a.get_type(schema))) {
                    // A zoned timestamp made a timestamp again (to cut it to seconds, say): the same
                    // instant, not UTC's wall-clock time the engine would make it.
                    (1, Some(Ok(DataType::Timestamp(_, Some(zone))))) => {
                        return Ok(Transformed::yes(cast(f.args[0].clone(), DataType::Timestamp(unit, Some(zone)))));
                    }
                    // Text read by formats: where they read an offset, the engine holds the
                    // instant as UTC's wall-clock time.
                    (2.., Some(Ok(DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View))) => {
                        if formats_read_offsets(f.name(), &f.args[1..])? {
                            let utc = cast(e, DataType::Timestamp(unit, Some("UTC".into())));
                            return Ok(Transformed::yes(cast(utc, DataType::Timestamp(unit, Some(self.zone.clone())))));
                        }
                        return Ok(Transformed::no(e));
                    }
                    _ => {}
                }
            }
            if f.name() == "to_date" && f.args.len() >= 2 && formats_read_offsets(f.name(), &f.args[1..])? {
                return plan_err!(
                    "to_date with a format that reads an offset gives the date in UTC, not the date written: write \
                     CAST(s AS DATE) for the date written, or CAST(to_timestamp(s, format) AS DATE) for the date \
                     in the job's zone"
                );
            }
        }
        let epoch = match &e {
            Expr::ScalarFunction(f) if f.name().starts_with("to_timestamp") || f.name() == "from_unixtime" => {
                f.args.len() == 1 && f.args[0].get_type(schema).is_ok_and(|t| t.is_numeric())
            }
            Expr::Cast(c) => {
                matches!(c.field.data_type(), DataType::Timestamp(_, None))
                    && c.expr.get_type(schema).is_ok_and(|t| t.is_numeric())
            }
            _ => false,
        };
        if !epoch {
            return Ok(Transformed::no(e));
        }
        let Ok(DataType::Timestamp(unit, None)) = e.get_type(schema) else { return Ok(Transformed::no(e)) };
        let utc = cast(e, DataType::Timestamp(unit, Some("UTC".into())));
        Ok(Transformed::yes(cast(utc, DataType::Timestamp(unit, Some(self.zone.clone())))))
    }
}

/// The unit of the timestamp a `to_timestamp` function makes, if `name` is one.
fn to_timestamp_unit(name: &str) -> Option<TimeUnit> {
    match name {
        "to_timestamp" | "to_timestamp_nanos" => Some(TimeUnit::Nanosecond),
        "to_timestamp_micros" => Some(TimeUnit::Microsecond),
        "to_timestamp_millis" => Some(TimeUnit::Millisecond),
        "to_timestamp_seconds" => Some(TimeUnit::Second),
        _ => None,
    }
}

/// `arrow_cast(x, 'Timestamp(…)')` as the cast it names.
fn arrow_cast_to_timestamp(e: &Expr) -> Option<Expr> {
    let Expr::ScalarFunction(_) = e else { return None };
    let (x, to) = super::cast_of(e)?;
    matches!(to, DataType::Timestamp(..)).then(|| cast(x.clone(), to))
}

/// Whether the formats of `to_timestamp(text, format, …)` read an offset or a zone (`%z`,
/// `%:z`, `%#z`, `%Z`, `%+`), or an epoch (`%s`): then the engine gives the instant, as UTC's wall-clock time; without,
/// the text's wall-clock time. Formats that are not all literals, or of which some read one
/// and some do not, are refused: which the value is would depend on the row.
fn formats_read_offsets(name: &str, formats: &[Expr]) -> Result<bool> {
    let mut read = Vec::new();
    for f in formats {
        match f {
            Expr::Literal(
                ScalarValue::Utf8(Some(t)) | ScalarValue::Utf8View(Some(t)) | ScalarValue::LargeUtf8(Some(t)),
                _,
            ) => {
                // `%%` is a percent sign; an offset is `%z`, `%:z`, `%::z`, `%:::z`, `%#z`, `%Z`.
                let t = t.replace("%%", "");
                read.push(t.split('%').skip(1).any(|spec| {
                    let spec = spec.trim_start_matches([':', '#', '-', '_', '0', '.', '3', '6', '9']);
                    // `%+` is RFC 3339 with its offset; `%s` counts seconds from the epoch.
                    spec.starts_with(['z', 'Z', '+', 's'])
                }));
            }
            _ if matches!(f, Expr::Literal(v, _) if v.is_null()) => {
                return plan_err!("{name} is given a NULL format: give each format as text")
            }
            _ => {
                return plan_err!(
                    "{name}'s formats must be written out (literal text): whether they read an offset decides \
                     whether the result is an instant or a wall-clock time"
                )
            }
        }
    }
    match (read.iter().any(|r| *r), read.iter().all(|r| *r)) {
        (true, false) => plan_err!(
            "{name} is given formats of which some read an offset or zone (%z, %Z) and some do not: its result \
             would be an instant for some rows and a wall-clock time for others. Give every format an offset, or \
             none"
        ),
        (any, _) => Ok(any),
    }
}

/// The text of a timestamp made from a string literal, if `e` is one: a string, or a
/// zone-less timestamp made of one.
fn literal_text(e: &Expr) -> Option<&str> {
    fn text(e: &Expr) -> Option<&str> {
        match e {
            Expr::Literal(
                ScalarValue::Utf8(Some(s)) | ScalarValue::LargeUtf8(Some(s)) | ScalarValue::Utf8View(Some(s)),
                _,
            ) => Some(s.as_str()),
            _ => None,
        }
    }
    match e {
        Expr::Cast(c) if matches!(c.field.data_type(), DataType::Timestamp(_, None)) => text(&c.expr),
        Expr::ScalarFunction(f) if f.name().starts_with("to_timestamp") && f.args.len() == 1 => text(&f.args[0]),
        other => text(other),
    }
}

/// A zone-less timestamp made at run time from text (`to_timestamp(s)`, `CAST(s AS
/// TIMESTAMP)`), as the zoned timestamp of type `to` it means — DataFusion would take it as
/// wall-clock time in `to`'s zone: read as arrow reads text into a zoned type, the instant its
/// offset gives, or without one wall-clock time there. (Epochs are instants already:
/// [`EpochInstants`].)
fn meant(e: &Expr, to: &DataType, schema: &DFSchema) -> Option<Expr> {
    let DataType::Timestamp(_, Some(zone)) = to else { return None };
    let arg = match e {
        Expr::Cast(c) => c.expr.as_ref(),
        Expr::ScalarFunction(f) if f.args.len() == 1 && f.name().starts_with("to_timestamp") => &f.args[0],
        _ => return None,
    };
    let Ok(DataType::Timestamp(unit, None)) = e.get_type(schema) else { return None };
    match arg.get_type(schema).ok()? {
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => {
            Some(cast(arg.clone(), DataType::Timestamp(unit, Some(zone.clone()))))
        }
        _ => None,
    }
}

/// A zone-less constant computed from literals that name their offsets (`TIMESTAMP
/// '…T09:00:00Z' + INTERVAL '1 hour'`), as the instant it means: DataFusion holds UTC's
/// wall-clock time in it, which is read as such (a zone-less literal among them is refused).
fn constant_from_offsets(e: &Expr, schema: &DFSchema) -> Result<Option<Expr>> {
    let Ok(DataType::Timestamp(unit, None)) = e.get_type(schema) else { return Ok(None) };
    if !e.column_refs().is_empty() {
        return Ok(None);
    }
    let (mut with, mut without) = (false, None);
    e.apply(|x| {
        // Literals made zone-less timestamps (`literal_text` also takes a bare string).
        if let Some(s) = literal_text(x).filter(|_| matches!(x, Expr::Cast(_))) {
            match has_offset(s) {
                true => with = true,
                false => without = Some(s.to_string()),
            }
        }
        Ok(datafusion::common::tree_node::TreeNodeRecursion::Continue)
    })?;
    match (with, without) {
        (false, _) => Ok(None),
        (true, Some(s)) => {
            plan_err!("the time '{s}' has no offset beside times that have one in one expression; give it its offset")
        }
        (true, None) => {
            // The literals as the zone-less values DataFusion makes of them (UTC's clock), so
            // they are not taken for zone-less literals left over.
            let utc = e.clone().transform_up(|x| {
                let Expr::Cast(c) = &x else { return Ok(Transformed::no(x)) };
                let (Some(s), DataType::Timestamp(u, None)) = (literal_text(&x), c.field.data_type()) else {
                    return Ok(Transformed::no(x));
                };
                let Ok(nanos) = arrow::compute::kernels::cast_utils::string_to_timestamp_nanos(s) else {
                    return Ok(Transformed::no(x));
                };
                let value = Expr::Literal(ScalarValue::TimestampNanosecond(Some(nanos), None), None);
                Ok(Transformed::yes(cast(value, DataType::Timestamp(*u, None))))
            })?;
            Ok(Some(cast(utc.data, DataType::Timestamp(unit, Some("UTC".into())))))
        }
    }
}

/// Refuses a literal naming an offset or zone made a zone-less timestamp where it does not
/// meet a zoned one (`TIMESTAMP '…T09:00:00Z' + INTERVAL '1 hour'`, `extract(hour FROM
/// TIMESTAMP '…-05:00')`): DataFusion keeps it as UTC's wall-clock time, which a zoned
/// timestamp then reads as wall-clock time in the job's zone.
fn refuse_offsets_made_zone_less(e: &Expr) -> Result<()> {
    e.apply(|x| {
        if let Expr::Cast(c) = x {
            if matches!(c.field.data_type(), DataType::Timestamp(_, None)) {
                if let Some(s) = literal_text(x).filter(|s| has_offset(s)) {
                    return plan_err!(
                        "the time '{s}' names an offset or zone, but here it is a zone-less TIMESTAMP, which \
                         would hold UTC's wall-clock time rather than the instant; compare it with a zoned \
                         timestamp, or write it without an offset, as wall-clock time in the job's zone"
                    );
                }
            }
        }
        Ok(datafusion::common::tree_node::TreeNodeRecursion::Continue)
    })
    .map(|_| ())
}

/// Text cast to a type `to` picks (`CAST`, or `TRY_CAST`: `safe`): the text, the type and
/// whether it is safe.
fn text_cast<'e>(e: &'e Expr, schema: &DFSchema, to: fn(&DataType) -> bool) -> Option<(&'e Expr, &'e DataType, bool)> {
    let text = |a: &Expr| a.get_type(schema).is_ok_and(|t| super::text(&t));
    match e {
        Expr::Cast(c) if to(c.field.data_type()) && text(&c.expr) => {
            Some((c.expr.as_ref(), c.field.data_type(), false))
        }
        Expr::TryCast(c) if to(c.field.data_type()) && text(&c.expr) => {
            Some((c.expr.as_ref(), c.field.data_type(), true))
        }
        Expr::ScalarFunction(f)
            if f.name() == "to_date" && f.args.len() == 1 && to(&DataType::Date32) && text(&f.args[0]) =>
        {
            Some((&f.args[0], &DataType::Date32, false))
        }
        _ => None,
    }
}

/// `text` read by [`Written`] as `to` (a date, or a zone-less timestamp).
fn written(text: &Expr, to: &DataType, safe: bool) -> Expr {
    let f = Written { signature: Signature::any(2, Volatility::Immutable), to: to.clone() };
    let args = vec![text.clone(), Expr::Literal(ScalarValue::Boolean(Some(safe)), None)];
    Expr::ScalarFunction(ScalarFunction::new_udf(Arc::new(ScalarUDF::from(f)), args))
}

/// Text made a date (`CAST(s AS DATE)`, `TRY_CAST`, `to_date(s)`) as [`Written`] makes it.
fn written_date(e: &Expr, schema: &DFSchema) -> Option<Expr> {
    let (arg, to, safe) = text_cast(e, schema, |t| matches!(t, DataType::Date32 | DataType::Date64))?;
    // A literal is read now: left as it is without an offset (as the engine reads it), cut to
    // its date with one.
    if let Expr::Literal(
        ScalarValue::Utf8(Some(s)) | ScalarValue::LargeUtf8(Some(s)) | ScalarValue::Utf8View(Some(s)),
        _,
    ) = arg
    {
        let s = s.trim();
        let date = date_written(s).filter(|_| has_offset(s))?.to_string();
        let date = Expr::Literal(ScalarValue::Utf8(Some(date)), None);
        return Some(match e {
            Expr::TryCast(_) => Expr::TryCast(datafusion::logical_expr::TryCast::new(Box::new(date), to.clone())),
            _ => cast(date, to.clone()),
        });
    }
    let date = written(arg, &DataType::Date32, safe);
    Some(match to {
        DataType::Date32 => date,
        other => cast(date, other.clone()),
    })
}

/// An analyzer rule run after [`ZonedLiterals`]: text made a zone-less timestamp
/// (`CAST(s AS TIMESTAMP)`, `TRY_CAST`) that meets no zoned one is the wall-clock time written,
/// as in DuckDB and PostgreSQL (`'2026-11-01T23:30:00-05:00'` is 23:30). The engine gives UTC's
/// wall-clock time (04:30 the next day). Where such a cast meets a zoned timestamp,
/// [`ZonedLiterals`] has made it the instant already.
#[derive(Debug, Default)]
pub struct WrittenTimes;

impl AnalyzerRule for WrittenTimes {
    fn analyze(&self, plan: LogicalPlan, _: &ConfigOptions) -> Result<LogicalPlan> {
        super::rewrite_exprs(plan, |e, schema| {
            let zone_less = |t: &DataType| matches!(t, DataType::Timestamp(_, None));
            match text_cast(&e, schema, zone_less) {
                // Literals with an offset left zone-less are refused ([`refuse_offsets_made_zone_less`]).
                Some((arg, to, safe)) if !matches!(arg, Expr::Literal(..)) => {
                    Ok(Transformed::yes(written(arg, to, safe)))
                }
                _ => Ok(Transformed::no(e)),
            }
        })
    }

    fn name(&self) -> &str {
        "lakeswap_written_times"
    }
}

/// The date and time of a timestamp text with an offset or zone, without it, if the whole text
/// is a timestamp.
fn wall_written(s: &str) -> Option<&str> {
    arrow::compute::kernels::cast_utils::string_to_timestamp_nanos(s).ok()?;
    let tail = s.get(11..)?;
    let at = tail.find(|c: char| c == '+' || c == '-' || c.is_ascii_alphabetic())? + 11;
    Some(s[..at].trim_end())
}

/// The date part of a timestamp text with an offset, if the whole text is a timestamp.
fn date_written(s: &str) -> Option<&str> {
    arrow::compute::kernels::cast_utils::string_to_timestamp_nanos(s).ok()?;
    s.split(['T', 't', ' ']).next()
}

/// `written_date(text, safe)` and `written_time(text, safe)`: the date, or the zone-less
/// timestamp (`to`), that text names as it is written. Arrow reads text with a time and an
/// offset (`2026-11-01T23:30:00-05:00`) as the instant and gives its date and time in UTC
/// (11-02, 04:30); SQL (DuckDB, PostgreSQL) gives them as written (11-01, 23:30), as for text
/// without one ([`WrittenTimes`], [`written_date`]). Text with an offset that is no timestamp is
/// left whole, for the cast to refuse as before; `safe`: text that is no date or time gives null
/// (`TRY_CAST`) rather than failing the date.
#[derive(Debug, PartialEq, Eq, Hash)]
struct Written {
    signature: Signature,
    to: DataType,
}

impl ScalarUDFImpl for Written {
    fn name(&self) -> &str {
        match self.to {
            DataType::Date32 => "written_date",
            _ => "written_time",
        }
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, _: &[DataType]) -> Result<DataType> {
        Ok(self.to.clone())
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        use arrow::array::{Array, AsArray};
        let cut = match self.to {
            DataType::Date32 => date_written,
            _ => wall_written,
        };
        let safe = matches!(&args.args[1], ColumnarValue::Scalar(ScalarValue::Boolean(Some(true))));
        let scalar = matches!(&args.args[0], ColumnarValue::Scalar(_));
        let text = arrow::compute::cast(&args.args[0].to_array(args.number_rows.max(1))?, &DataType::Utf8)?;
        let text = text.as_string::<i32>();
        let written: arrow::array::StringArray = text
            .iter()
            .map(|v| {
                v.map(|s| match has_offset(s.trim()) {
                    true => cut(s.trim()).unwrap_or(s),
                    false => s,
                })
            })
            .collect();
        let options = arrow::compute::CastOptions { safe, ..Default::default() };
        let out = arrow::compute::cast_with_options(&written, &self.to, &options)?;
        debug_assert_eq!(out.len(), text.len());
        Ok(match scalar {
            true => ColumnarValue::Scalar(ScalarValue::try_from_array(&out, 0)?),
            false => ColumnarValue::Array(out),
        })
    }
}

/// Whether a timestamp text names its offset or zone (`Z`, `+01:00`, `-0500`, `UTC`,
/// `Europe/Paris` after the date and its `T`).
fn has_offset(s: &str) -> bool {
    let tail = s.get(11..).unwrap_or("");
    tail.contains(['+', '-']) || tail.chars().any(|c| c.is_ascii_alphabetic())
}

/// Nanoseconds per `unit`.
pub(super) fn per(unit: &TimeUnit) -> i64 {
    match unit {
        TimeUnit::Second => 1_000_000_000,
        TimeUnit::Millisecond => 1_000_000,
        TimeUnit::Microsecond => 1_000,
        TimeUnit::Nanosecond => 1,
    }
}

/// The unit of a timestamp column read in a finer one, if `e` is such a cast.
fn coarser_unit(e: &Expr, schema: &DFSchema) -> Option<TimeUnit> {
    let Expr::Cast(c) = e else { return None };
    let DataType::Timestamp(to, _) = c.field.data_type() else { return None };
    match c.expr.get_type(schema) {
        Ok(DataType::Timestamp(from, _)) if per(&from) > per(to) => Some(from),
        _ => None,
    }
}

/// A timestamp literal's value in nanoseconds (wall-clock ones as if in UTC), if `e` is one.
fn literal_nanos(e: &Expr) -> Option<i64> {
    if let Some(s) = literal_text(e) {
        return arrow::compute::kernels::cast_utils::string_to_timestamp_nanos(s).ok();
    }
    match e {
        Expr::Literal(ScalarValue::TimestampSecond(Some(v), _), _) => v.checked_mul(1_000_000_000),
        Expr::Literal(ScalarValue::TimestampMillisecond(Some(v), _), _) => v.checked_mul(1_000_000),
        Expr::Literal(ScalarValue::TimestampMicrosecond(Some(v), _), _) => v.checked_mul(1_000),
        Expr::Literal(ScalarValue::TimestampNanosecond(Some(v), _), _) => Some(*v),
        _ => None,
    }
}

/// The value of a timestamp computed from constants alone (`to_timestamp_micros(…)`,
/// `TIMESTAMP '…' + INTERVAL '…'`), folded as the optimizer will fold it.
fn constant_nanos(e: &Expr, schema: &DFSchema) -> Option<i64> {
    if !e.column_refs().is_empty() || !matches!(e.get_type(schema), Ok(DataType::Timestamp(..))) {
        return None;
    }
    let context =
        datafusion::logical_expr::simplify::SimplifyContext::builder().with_schema(Arc::new(schema.clone())).build();
    let folded = datafusion::optimizer::simplify_expressions::ExprSimplifier::new(context).simplify(e.clone()).ok()?;
    literal_nanos(&folded)
}

/// Refuses a comparison of a timestamp column with a literal finer than the column's unit.
/// Type coercion reads the column in the literal's unit, which is exact, but DataFusion's
/// optimizer then moves the cast onto the literal, cutting it: `ts < '…10:00:00.0005Z'` on
/// milliseconds dropped the row at 10:00:00.000.
fn refuse_finer_literals(e: &Expr, schema: &DFSchema) -> Result<()> {
    let pairs: Vec<(&Expr, &Expr)> = match e {
        Expr::BinaryExpr(b) if b.op.supports_propagation() => {
            vec![(b.left.as_ref(), b.right.as_ref()), (b.right.as_ref(), b.left.as_ref())]
        }
        Expr::Between(b) => vec![(b.expr.as_ref(), b.low.as_ref()), (b.expr.as_ref(), b.high.as_ref())],
        Expr::InList(l) => l.list.iter().map(|v| (l.expr.as_ref(), v)).collect(),
        _ => return Ok(()),
    };
    for (column, value) in pairs {
        let Some(unit) = coarser_unit(column, schema) else { continue };
        let Some(nanos) = literal_nanos(value).or_else(|| constant_nanos(value, schema)) else { continue };
        if nanos % per(&unit) != 0 {
            let time = literal_text(value).map(str::to_string).unwrap_or_else(|| {
                chrono::DateTime::from_timestamp_nanos(nanos).to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true)
            });
            return plan_err!(
                "the time '{time}' is finer than the {unit:?}s it is compared with, and would be cut to them; write \
                 it to the {unit:?}"
            );
        }
    }
    Ok(())
}

fn rewrite(e: Expr, schema: &DFSchema) -> Result<Transformed<Expr>> {
    refuse_finer_literals(&e, schema)?;
    if let Some(written) = written_date(&e, schema) {
        return Ok(Transformed::yes(written));
    }
    // The engine reads second 60 as the next minute's first; the input refuses it.
    let made = match &e {
        Expr::Cast(c) if matches!(c.field.data_type(), DataType::Timestamp(..)) => literal_text(&c.expr),
        Expr::ScalarFunction(f) if f.name().starts_with("to_timestamp") && f.args.len() == 1 => {
            literal_text(&f.args[0])
        }
        _ => None,
    };
    if let Some(s) =
        made.filter(|s| s.get(11..).and_then(|t| t.split(':').nth(2)).is_some_and(|sec| sec.starts_with("60")))
    {
        return plan_err!("the time '{s}' has second 60 (a leap second), which no timestamp holds");
    }
    let Expr::Cast(c) = &e else { return Ok(Transformed::no(e)) };
    // A zoned timestamp made zone-less (DataFusion compares a date, or a wall-clock value,
    // with it that way) is its wall-clock time in its zone, not in UTC as arrow's cast has it.
    if let DataType::Timestamp(_, None) = c.field.data_type() {
        if c.expr.get_type(schema).is_ok_and(|t| matches!(t, DataType::Timestamp(_, Some(_)))) {
            let local = datafusion::functions::datetime::expr_fn::to_local_time(vec![c.expr.as_ref().clone()]);
            return Ok(Transformed::yes(cast(local, c.field.data_type().clone())));
        }
    }
    let DataType::Timestamp(unit, Some(zone)) = c.field.data_type() else { return Ok(Transformed::no(e)) };
    // A date meeting a zoned timestamp is midnight in that zone, as a zone-less literal is
    // (arrow's cast gives midnight UTC).
    if c.expr.get_type(schema).is_ok_and(|t| matches!(t, DataType::Date32 | DataType::Date64)) {
        let wall = cast(c.expr.as_ref().clone(), DataType::Timestamp(*unit, None));
        return Ok(Transformed::yes(cast(wall, c.field.data_type().clone())));
    }
    if literal_text(&c.expr).is_none() {
        if let Some(m) = meant(&c.expr, c.field.data_type(), schema) {
            return Ok(Transformed::yes(cast(m, c.field.data_type().clone())));
        }
        if let Some(m) = constant_from_offsets(&c.expr, schema)? {
            return Ok(Transformed::yes(cast(m, c.field.data_type().clone())));
        }
    }
    let Some(s) = literal_text(&c.expr) else { return Ok(Transformed::no(e)) };
    let Ok(tz) = zone.parse::<chrono_tz::Tz>() else { return Ok(Transformed::no(e)) };
    let nanos = match arrow::compute::kernels::cast_utils::string_to_timestamp_nanos(s) {
        Ok(n) => n,
        Err(_) => return Ok(Transformed::no(e)),
    };
    let instant = match has_offset(s) {
        true => nanos,
        false => {
            let wall = chrono::DateTime::from_timestamp_nanos(nanos).naive_utc();
            match tz.from_local_datetime(&wall) {
                LocalResult::Single(t) | LocalResult::Ambiguous(t, _) => t.timestamp_nanos_opt().unwrap_or(nanos),
                LocalResult::None => {
                    return plan_err!(
                        "the time '{s}' does not exist in {tz} (the clocks skip it); give the offset, e.g. '{s}{}'",
                        chrono::Offset::fix(&tz.offset_from_utc_datetime(&wall))
                    )
                }
            }
        }
    };
    if instant % per(unit) != 0 {
        return plan_err!(
            "the time '{s}' is finer than the {unit:?}s it is compared with, and would be cut to them; write it to \
             the {unit:?}"
        );
    }
    let zone = Some(zone.clone());
    let v = match unit {
        TimeUnit::Second => ScalarValue::TimestampSecond(Some(instant.div_euclid(1_000_000_000)), zone),
        TimeUnit::Millisecond => ScalarValue::TimestampMillisecond(Some(instant.div_euclid(1_000_000)), zone),
        TimeUnit::Microsecond => ScalarValue::TimestampMicrosecond(Some(instant.div_euclid(1_000)), zone),
        TimeUnit::Nanosecond => ScalarValue::TimestampNanosecond(Some(instant), zone),
    };
    Ok(Transformed::yes(Expr::Literal(v, None)))
}

#[cfg(test)]
mod tests {
    use super::has_offset;

    #[test]
    fn offsets_are_told_from_wall_clock_times() {
        for s in [
            "2026-11-01T06:30:00Z",
            "2026-11-01 01:30:00-05:00",
            "2026-11-01T01:30:00+0100",
            "2026-11-01T01:30z",
            "2026-11-01 06:30:00 UTC",
            "2026-11-01 07:30:00 Europe/Paris",
        ] {
            assert!(has_offset(s), "{s}");
        }
        for s in ["2026-11-01", "2026-11-01 01:30:00", "2026-11-01T01:30:00.123456"] {
            assert!(!has_offset(s), "{s}");
        }
    }
}
