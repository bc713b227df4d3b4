//! An interval added to a zoned timestamp across a daylight-saving change. SQL adds an
//! interval's months and days to the wall-clock time in the timestamp's zone (`+ INTERVAL
//! '1 day'` is the same time of day tomorrow, 23 or 25 hours later on a change's night) and its
//! hours and smaller parts as elapsed time. The engine then fails the whole date ("Timestamp
//! out of range") wherever the wall-clock time it reaches is one the zone skips or repeats.
//!
//! This analyzer rule runs after type coercion and gives `timestamp ± interval` to
//! [`ZonedAdd`], which does what PostgreSQL does where the zone skips the time (the clocks go
//! forward: 02:30 on that night is read with the offset before the change, so 03:30 after it;
//! DuckDB gives the same) and refuses a time the zone repeats (the clocks go back), naming it:
//! PostgreSQL takes the later of the two, DuckDB one or the other depending on the interval, and
//! the hour between them is not lakeswap's to guess. `INTERVAL '24 hours'` is elapsed time and
//! never meets either.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray};
use arrow::datatypes::{DataType, IntervalUnit, TimeUnit};
use chrono::{Days, LocalResult, Months, NaiveDateTime, Offset, TimeZone};
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::Transformed;
use datafusion::common::{exec_err, DFSchema, Result, ScalarValue};
use datafusion::logical_expr::expr::ScalarFunction;
use datafusion::logical_expr::{
    BinaryExpr, ColumnarValue, Expr, ExprSchemable, LogicalPlan, Operator, ScalarFunctionArgs, ScalarUDF,
    ScalarUDFImpl, Signature, Volatility,
};
use datafusion::optimizer::AnalyzerRule;

/// The analyzer rule (see the module documentation).
#[derive(Debug, Default)]
pub struct ZonedIntervals;

impl AnalyzerRule for ZonedIntervals {
    fn analyze(&self, plan: LogicalPlan, _: &ConfigOptions) -> Result<LogicalPlan> {
        super::rewrite_exprs(plan, rewrite)
    }

    fn name(&self) -> &str {
        "lakeswap_zoned_intervals"
    }
}

/// An analyzer rule run before type coercion: a date plus (or minus) an interval with hours or
/// smaller parts is a timestamp, as in SQL (DuckDB, PostgreSQL). The engine keeps it a date and
/// drops them: `event_date + INTERVAL '12 hours'` was midnight, and `ts < event_date + INTERVAL
/// '12 hours'` counted nothing. The date is made a zone-less timestamp (its midnight, wall-clock
/// time) first. An interval of whole days or months leaves a date, as the engine has it.
#[derive(Debug, Default)]
pub struct DatesPlusTimes;

impl AnalyzerRule for DatesPlusTimes {
    fn analyze(&self, plan: LogicalPlan, _: &ConfigOptions) -> Result<LogicalPlan> {
        super::rewrite_exprs(plan, date_plus_time)
    }

    fn name(&self) -> &str {
        "lakeswap_dates_plus_times"
    }
}

fn date_plus_time(e: Expr, schema: &DFSchema) -> Result<Transformed<Expr>> {
    let Expr::BinaryExpr(BinaryExpr { left, op, right }) = &e else { return Ok(Transformed::no(e)) };
    if !matches!(op, Operator::Plus | Operator::Minus) {
        return Ok(Transformed::no(e));
    }
    let (Ok(l), Ok(r)) = (left.get_type(schema), right.get_type(schema)) else { return Ok(Transformed::no(e)) };
    let date = |t: &DataType| matches!(t, DataType::Date32 | DataType::Date64);
    let interval = |t: &DataType| matches!(t, DataType::Interval(_));
    let (date_left, i) = match (&l, &r) {
        (l, r) if date(l) && interval(r) => (true, right.as_ref()),
        (l, r) if interval(l) && date(r) && *op == Operator::Plus => (false, left.as_ref()),
        _ => return Ok(Transformed::no(e)),
    };
    // The smallest part of the interval finer than a day, in nanoseconds: none for whole days.
    let finer = match i {
        Expr::Literal(ScalarValue::IntervalYearMonth(_), _) => None,
        Expr::Literal(ScalarValue::IntervalDayTime(v), _) => v.filter(|v| v.milliseconds != 0).map(|_| 1_000_000),
        Expr::Literal(ScalarValue::IntervalMonthDayNano(v), _) => {
            v.filter(|v| v.nanoseconds != 0).map(|v| v.nanoseconds)
        }
        _ => Some(1_000),
    };
    let Some(finer) = finer else { return Ok(Transformed::no(e)) };
    let unit = if finer % 1_000 == 0 { TimeUnit::Microsecond } else { TimeUnit::Nanosecond };
    let at = |d: &Expr| datafusion::logical_expr::cast(d.clone(), DataType::Timestamp(unit, None));
    let (left, right) = match date_left {
        true => (Box::new(at(left)), right.clone()),
        false => (left.clone(), Box::new(at(right))),
    };
    Ok(Transformed::yes(Expr::BinaryExpr(BinaryExpr { left, op: *op, right })))
}

/// `t ± i` and `i + t`, where `t` is a timestamp in a zone with daylight-saving changes and `i`
/// an interval, as [`ZonedAdd`].
fn rewrite(e: Expr, schema: &DFSchema) -> Result<Transformed<Expr>> {
    let Expr::BinaryExpr(BinaryExpr { left, op, right }) = &e else { return Ok(Transformed::no(e)) };
    let (Ok(l), Ok(r)) = (left.get_type(schema), right.get_type(schema)) else { return Ok(Transformed::no(e)) };
    let (t, i, ty, sign) = match (op, &l, &r) {
        (Operator::Plus | Operator::Minus, DataType::Timestamp(_, Some(_)), DataType::Interval(_)) => {
            (left, right, &l, if *op == Operator::Plus { 1 } else { -1 })
        }
        (Operator::Plus, DataType::Interval(_), DataType::Timestamp(_, Some(_))) => (right, left, &r, 1),
        _ => return Ok(Transformed::no(e)),
    };
    let DataType::Timestamp(_, Some(zone)) = ty else { return Ok(Transformed::no(e)) };
    // Elapsed time alone (hours and smaller): the engine's own arithmetic, no wall-clock time.
    let elapsed = match i.as_ref() {
        Expr::Literal(ScalarValue::IntervalDayTime(Some(v)), _) => v.days == 0,
        Expr::Literal(ScalarValue::IntervalMonthDayNano(Some(v)), _) => v.months == 0 && v.days == 0,
        _ => false,
    };
    if elapsed {
        return Ok(Transformed::no(e));
    }
    // A fixed offset or UTC never skips or repeats a time: the engine's own arithmetic is exact.
    if zone.parse::<chrono_tz::Tz>().map_or(true, |tz| tz == chrono_tz::UTC) {
        return Ok(Transformed::no(e));
    }
    let f = ScalarUDF::from(ZonedAdd { signature: Signature::any(3, Volatility::Immutable) });
    let args = vec![t.as_ref().clone(), i.as_ref().clone(), Expr::Literal(ScalarValue::Int8(Some(sign)), None)];
    Ok(Transformed::yes(Expr::ScalarFunction(ScalarFunction::new_udf(Arc::new(f), args))))
}

/// `zoned_add(timestamp, interval, sign)`: the interval (times `sign`, 1 or -1) added to the
/// timestamp, its months and then its days to the wall-clock time in the timestamp's zone,
/// then its hours and smaller parts as elapsed time (the engine's and PostgreSQL's order). A
/// wall-clock time the zone skips is read with the offset before the change; one it repeats is
/// refused.
#[derive(Debug, PartialEq, Eq, Hash)]
struct ZonedAdd {
    signature: Signature,
}

impl ScalarUDFImpl for ZonedAdd {
    fn name(&self) -> &str {
        "zoned_add"
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, args: &[DataType]) -> Result<DataType> {
        Ok(args[0].clone())
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let ty = args.args[0].data_type();
        let DataType::Timestamp(unit, Some(zone)) = &ty else { return exec_err!("zoned_add: {ty} is not zoned") };
        let Ok(tz) = zone.parse::<chrono_tz::Tz>() else { return exec_err!("zoned_add: unknown zone {zone}") };
        let sign = match &args.args[2] {
            ColumnarValue::Scalar(ScalarValue::Int8(Some(s))) => i64::from(*s),
            _ => return exec_err!("zoned_add: the sign must be a constant"),
        };
        let known_until = crate::dates::zone_known_until(tz);
        let scalar = args.args.iter().all(|a| matches!(a, ColumnarValue::Scalar(_)));
        let n = args.number_rows.max(1);
        let t = arrow::compute::cast(&args.args[0].to_array(n)?, &DataType::Int64)?;
        let t = t.as_primitive::<arrow::datatypes::Int64Type>();
        let i = args.args[1].to_array(n)?;
        let mut out = arrow::array::Int64Builder::with_capacity(t.len());
        for row in 0..t.len() {
            match (t.is_valid(row), parts(&i, row)?) {
                (true, Some((months, days, nanos))) => {
                    let (months, days, nanos) = (i64::from(months) * sign, i64::from(days) * sign, nanos * sign);
                    out.append_value(add(t.value(row), *unit, (tz, known_until), months, days, nanos)?);
                }
                _ => out.append_null(),
            }
        }
        let result: ArrayRef = Arc::new(out.finish());
        let result = arrow::compute::cast(&result, &ty)?;
        Ok(match scalar {
            true => ColumnarValue::Scalar(ScalarValue::try_from_array(&result, 0)?),
            false => ColumnarValue::Array(result),
        })
    }
}

/// Row `row` of an interval array as months, days and nanoseconds; `None` when null.
fn parts(i: &ArrayRef, row: usize) -> Result<Option<(i32, i32, i64)>> {
    use arrow::datatypes::{IntervalDayTimeType, IntervalMonthDayNanoType, IntervalYearMonthType};
    if i.is_null(row) {
        return Ok(None);
    }
    Ok(Some(match i.data_type() {
        DataType::Interval(IntervalUnit::YearMonth) => (i.as_primitive::<IntervalYearMonthType>().value(row), 0, 0),
        DataType::Interval(IntervalUnit::DayTime) => {
            let v = i.as_primitive::<IntervalDayTimeType>().value(row);
            (0, v.days, i64::from(v.milliseconds) * 1_000_000)
        }
        DataType::Interval(IntervalUnit::MonthDayNano) => {
            let v = i.as_primitive::<IntervalMonthDayNanoType>().value(row);
            (v.months, v.days, v.nanoseconds)
        }
        t => return exec_err!("zoned_add: {t} is not an interval"),
    }))
}

/// `v` (in `unit`) plus the interval, in `tz` (see [`ZonedAdd`]).
/// `known_until`: where the zone's table of changes ends ([`crate::dates::zone_known_until`]).
fn add(
    v: i64,
    unit: TimeUnit,
    (tz, known_until): (chrono_tz::Tz, Option<i64>),
    months: i64,
    days: i64,
    nanos: i64,
) -> Result<i64> {
    let out_of_range = || datafusion::common::DataFusionError::Execution("Timestamp out of range".into());
    let p = super::zones::per(&unit);
    let per_second = 1_000_000_000 / p;
    let (secs, sub) = (v.div_euclid(per_second), v.rem_euclid(per_second) * p);
    let mut at = chrono::DateTime::from_timestamp(secs, sub as u32).ok_or_else(out_of_range)?;
    let months = i32::try_from(months).map_err(|_| out_of_range())?;
    for (step, last) in [(Step::Months(months), days == 0), (Step::Days(days), true)] {
        let wall = at.with_timezone(&tz).naive_local();
        let moved = match step {
            Step::Months(0) | Step::Days(0) => continue,
            Step::Months(m) if m > 0 => wall.checked_add_months(Months::new(m.unsigned_abs())),
            Step::Months(m) => wall.checked_sub_months(Months::new(m.unsigned_abs())),
            Step::Days(d) if d > 0 => wall.checked_add_days(Days::new(d.unsigned_abs())),
            Step::Days(d) => wall.checked_sub_days(Days::new(d.unsigned_abs())),
        }
        .ok_or_else(out_of_range)?;
        at = resolve(moved, tz, last)?;
    }
    let at = at.checked_add_signed(chrono::Duration::nanoseconds(nanos)).ok_or_else(out_of_range)?;
    if known_until.is_some_and(|end| at.timestamp() >= end || secs >= end) {
        return exec_err!(
            "adding an interval to a timestamp gives a time in {}, past the time zone table's daylight-saving \
             changes for {tz} (they end in 2099): its wall-clock time there cannot be known exactly",
            chrono::Datelike::year(&at)
        );
    }
    let whole = at.timestamp().checked_mul(per_second).ok_or_else(out_of_range)?;
    whole.checked_add(i64::from(at.timestamp_subsec_nanos()) / p).ok_or_else(out_of_range)
}

/// One wall-clock step of an interval.
#[derive(Clone, Copy)]
enum Step {
    Months(i32),
    Days(i64),
}

/// The instant of wall-clock time `wall` in `tz`: a time the zone skips is read with the
/// offset before the change; a time it repeats is refused when `last` (the interval's
/// wall-clock part ends there; a step before it keeps the wall-clock time either way).
fn resolve(wall: NaiveDateTime, tz: chrono_tz::Tz, last: bool) -> Result<chrono::DateTime<chrono::Utc>> {
    match tz.from_local_datetime(&wall) {
        LocalResult::Single(t) => Ok(t.to_utc()),
        LocalResult::Ambiguous(a, b) if !last => Ok(a.to_utc().min(b.to_utc())),
        LocalResult::Ambiguous(a, b) => exec_err!(
            "adding an interval to a timestamp gives the wall-clock time {wall}, which happens twice in {tz} (at \
             {} and at {}, the clocks going back), and which of the two is meant is not known; add elapsed time \
             instead (INTERVAL '24 hours' for a day), or compute in UTC",
            a.format("%H:%M%:z"),
            b.format("%H:%M%:z")
        ),
        LocalResult::None => {
            // The offset in force a day before: no zone changes its offset twice in a day.
            let before = tz.offset_from_utc_datetime(&(wall - chrono::Duration::days(1))).fix();
            Ok((wall - chrono::Duration::seconds(i64::from(before.local_minus_utc()))).and_utc())
        }
    }
}
