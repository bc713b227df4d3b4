//! Timestamp literals in the job's zone. The query sees zoned timestamps in the job's zone
//! ([`super::in_job_zone`]); DataFusion reads `TIMESTAMP '…'` (and `CAST('…' AS TIMESTAMP)`,
//! `to_timestamp('…')`) as a zone-less value, and where such a value meets a zoned one it is
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

use chrono::{LocalResult, TimeZone};
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{plan_err, DFSchema, Result, ScalarValue};
use datafusion::logical_expr::{cast, Expr, ExprSchemable, LogicalPlan};
use datafusion::optimizer::AnalyzerRule;

use arrow::datatypes::{DataType, TimeUnit};

/// The analyzer rule (see the module documentation).
#[derive(Debug, Default)]
pub struct ZonedLiterals;

impl AnalyzerRule for ZonedLiterals {
    fn analyze(&self, plan: LogicalPlan, _: &ConfigOptions) -> Result<LogicalPlan> {
        plan.transform_up_with_subqueries(|p| {
            let mut schema = DFSchema::empty();
            for input in p.inputs() {
                schema.merge(input.schema());
            }
            p.map_expressions(|e| e.transform_up(|e| rewrite(e, &schema)))
        })
        .map(|t| t.data)
    }

    fn name(&self) -> &str {
        "lakeswap_zoned_literals"
    }
}

/// The text of a zone-less timestamp made from a string literal, if `e` is one.
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
        _ => None,
    }
}

/// Whether a timestamp text names its offset or zone (`Z`, `+01:00`, `-0500`, `UTC`,
/// `Europe/Paris` after the date and its `T`).
fn has_offset(s: &str) -> bool {
    let tail = s.get(11..).unwrap_or("");
    tail.contains(['+', '-']) || tail.chars().any(|c| c.is_ascii_alphabetic())
}

fn rewrite(e: Expr, schema: &DFSchema) -> Result<Transformed<Expr>> {
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
    let per = match unit {
        TimeUnit::Second => 1_000_000_000,
        TimeUnit::Millisecond => 1_000_000,
        TimeUnit::Microsecond => 1_000,
        TimeUnit::Nanosecond => 1,
    };
    if instant % per != 0 {
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
