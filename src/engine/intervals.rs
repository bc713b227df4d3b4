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

/// An analyzer rule run before type coercion: an interval compared (`=`, `<`, `BETWEEN`, `IN`)
/// is compared by its length, as in SQL (PostgreSQL and DuckDB count a day as 24 hours). The
/// engine orders intervals by their months, then their days, then the rest, and makes a
/// duration it compares with one an interval of no days: `delivered_at - ordered_at <=
/// INTERVAL '2 days'` held for a delivery of 60 hours, and `INTERVAL '1 day' = INTERVAL '24
/// hours'` was false. A constant interval of days and smaller parts is made the duration it
/// lasts; one with months (which have no one length), or one computed, is refused.
#[derive(Debug, Default)]
pub struct ComparedIntervals;

impl AnalyzerRule for ComparedIntervals {
    fn analyze(&self, plan: LogicalPlan, _: &ConfigOptions) -> Result<LogicalPlan> {
        super::rewrite_exprs(plan, compared_interval)
    }

    fn name(&self) -> &str {
        "lakeswap_compared_intervals"
    }
}

fn compared_interval(e: Expr, schema: &DFSchema) -> Result<Transformed<Expr>> {
    use datafusion::logical_expr::expr::{Between, Case, InList};
    let comparison = |op: &Operator| {
        matches!(
            op,
            Operator::Eq
                | Operator::NotEq
                | Operator::Lt
                | Operator::LtEq
                | Operator::Gt
                | Operator::GtEq
                | Operator::IsDistinctFrom
                | Operator::IsNotDistinctFrom
        )
    };
    let shown = match &e {
        Expr::BinaryExpr(_) | Expr::Between(_) | Expr::InList(_) | Expr::Case(_) | Expr::ScalarFunction(_) => {
            e.to_string()
        }
        _ => return Ok(Transformed::no(e)),
    };
    let mut changed = false;
    // Each group of operands compared (`true`) or made one value (`false`), as durations.
    let mut durations = |xs: Vec<Expr>, compared: bool| -> Result<Vec<Expr>> {
        match as_durations(&xs, schema, compared, &shown)? {
            Some(ys) => {
                changed = true;
                Ok(ys)
            }
            None => Ok(xs),
        }
    };
    let e = match e {
        // SQL's `extract(epoch FROM b - a)`: the engine dropped the fraction of a duration of a
        // minute or more (61.5 seconds gave 61).
        Expr::ScalarFunction(f)
            if f.name() == "date_part" && f.args.len() == 2 && epoch_of_duration(&f.args, schema) =>
        {
            use datafusion::logical_expr::{cast, lit};
            // Counted in nanoseconds whatever unit the duration is in (its unit is known for
            // sure only once types are coerced).
            let nanos = cast(cast(f.args[1].clone(), DataType::Duration(TimeUnit::Nanosecond)), DataType::Int64);
            return Ok(Transformed::yes(cast(nanos, DataType::Float64) / lit(1e9)));
        }
        Expr::BinaryExpr(BinaryExpr { left, op, right }) if comparison(&op) => {
            let [l, r]: [Expr; 2] = durations(vec![*left, *right], true)?.try_into().map_err(|_| operands_changed())?;
            Expr::BinaryExpr(BinaryExpr { left: Box::new(l), op, right: Box::new(r) })
        }
        Expr::Between(Between { expr, negated, low, high }) => {
            let [x, l, h]: [Expr; 3] =
                durations(vec![*expr, *low, *high], true)?.try_into().map_err(|_| operands_changed())?;
            Expr::Between(Between { expr: Box::new(x), negated, low: Box::new(l), high: Box::new(h) })
        }
        Expr::InList(InList { expr, list, negated }) => {
            let mut all = durations(std::iter::once(*expr).chain(list).collect(), true)?;
            let expr = Box::new(all.remove(0));
            Expr::InList(InList { expr, list: all, negated })
        }
        Expr::Case(Case { expr, when_then_expr, else_expr }) => {
            let (whens, thens): (Vec<Expr>, Vec<Expr>) = when_then_expr.into_iter().map(|(w, t)| (*w, *t)).unzip();
            // `CASE x WHEN v …` compares `x` with each `v`.
            let (expr, whens) = match expr {
                Some(x) => {
                    let mut all = durations(std::iter::once(*x).chain(whens).collect(), true)?;
                    (Some(Box::new(all.remove(0))), all)
                }
                None => (None, whens),
            };
            let n = thens.len();
            let mut values = durations(thens.into_iter().chain(else_expr.map(|x| *x)).collect(), false)?;
            let else_expr = (values.len() > n).then(|| Box::new(values.remove(n)));
            let when_then_expr = whens.into_iter().zip(values).map(|(w, t)| (Box::new(w), Box::new(t))).collect();
            Expr::Case(Case { expr, when_then_expr, else_expr })
        }
        // `nullif`, `greatest` and `least` compare their arguments; `coalesce` makes them one.
        Expr::ScalarFunction(mut f)
            if matches!(f.name(), "nullif" | "greatest" | "least" | "coalesce" | "nvl" | "ifnull") =>
        {
            // Their result is of their arguments' type: constants alone stay intervals.
            let beside_duration = f.args.iter().any(|a| matches!(a.get_type(schema), Ok(DataType::Duration(_))));
            let compared = matches!(f.name(), "nullif" | "greatest" | "least") && beside_duration;
            f.args = durations(std::mem::take(&mut f.args), compared)?;
            Expr::ScalarFunction(f)
        }
        e => e,
    };
    Ok(if changed { Transformed::yes(e) } else { Transformed::no(e) })
}

fn operands_changed() -> datafusion::common::DataFusionError {
    datafusion::common::DataFusionError::Internal("the operands of an expression changed in number".into())
}

/// Whether `date_part`'s arguments ask for the epoch of a duration.
fn epoch_of_duration(args: &[Expr], schema: &DFSchema) -> bool {
    let epoch = matches!(&args[0], Expr::Literal(v, _) if v.try_as_str().flatten().is_some_and(|p| p.eq_ignore_ascii_case("epoch")));
    epoch && matches!(args[1].get_type(schema), Ok(DataType::Duration(_)))
}

/// `xs` with their constant intervals (days and smaller parts) as the durations they last, in
/// the unit of a duration among them (else nanoseconds); `None` when nothing is to change.
/// Operands `compared` with one another that hold an interval not made a duration (one with
/// months, or one computed) are refused; operands made one value (`coalesce`, the branches of a
/// `CASE`) are made durations only beside a duration, and left as they are otherwise.
fn as_durations(xs: &[Expr], schema: &DFSchema, compared: bool, shown: &str) -> Result<Option<Vec<Expr>>> {
    let Ok(types) = xs.iter().map(|x| x.get_type(schema)).collect::<Result<Vec<_>>>() else { return Ok(None) };
    if !types.iter().any(|t| matches!(t, DataType::Interval(_))) {
        return Ok(None);
    }
    let unit = types.iter().find_map(|t| match t {
        DataType::Duration(u) => Some(*u),
        _ => None,
    });
    if !compared && unit.is_none() {
        return Ok(None);
    }
    let unit = unit.unwrap_or(TimeUnit::Nanosecond);
    let refused = |why: &str| -> Result<Option<Vec<Expr>>> {
        datafusion::common::plan_err!(
            "`{shown}` compares an interval {why}: the engine orders intervals by their months, then their days, \
             then the rest (36 hours below INTERVAL '1 day'), where SQL compares how long they last. Compare \
             with a constant of days, hours and smaller parts (INTERVAL '2 days', INTERVAL '36 hours'), or \
             compare seconds: date_part('epoch', b - a) > 86400"
        )
    };
    let per = i128::from(super::zones::per(&unit));
    let mut out = Vec::with_capacity(xs.len());
    for (x, t) in xs.iter().zip(&types) {
        if !matches!(t, DataType::Interval(_)) {
            out.push(x.clone());
            continue;
        }
        let nanos: Option<i128> = match x {
            Expr::Literal(ScalarValue::IntervalMonthDayNano(Some(v)), _) if v.months == 0 => {
                Some(i128::from(v.days) * 86_400_000_000_000 + i128::from(v.nanoseconds))
            }
            Expr::Literal(ScalarValue::IntervalDayTime(Some(v)), _) => {
                Some(i128::from(v.days) * 86_400_000_000_000 + i128::from(v.milliseconds) * 1_000_000)
            }
            Expr::Literal(v, _) if v.is_null() => None,
            _ if !compared => return Ok(None),
            Expr::Literal(ScalarValue::IntervalMonthDayNano(Some(_)) | ScalarValue::IntervalYearMonth(Some(_)), _) => {
                return refused("with months, which have no one length (SQL counts 30 days)");
            }
            _ => return refused("that is not a constant"),
        };
        let length = match nanos {
            None => None,
            Some(n) if n % per != 0 => {
                if !compared {
                    return Ok(None);
                }
                return refused(&format!("finer than the {unit:?}s of the duration it meets"));
            }
            Some(n) => match i64::try_from(n / per) {
                Ok(v) => Some(v),
                Err(_) if !compared => return Ok(None),
                Err(_) => return refused("too long to count"),
            },
        };
        let d = match unit {
            TimeUnit::Second => ScalarValue::DurationSecond(length),
            TimeUnit::Millisecond => ScalarValue::DurationMillisecond(length),
            TimeUnit::Microsecond => ScalarValue::DurationMicrosecond(length),
            TimeUnit::Nanosecond => ScalarValue::DurationNanosecond(length),
        };
        out.push(Expr::Literal(d, None));
    }
    Ok(Some(out))
}

/// An analyzer rule run before type coercion: a zone-less timestamp or a date that meets a
/// zoned timestamp in a subtraction (`ts - local_ts`, `ts - event_date`) or as one value
/// (`coalesce(ts, event_date)`, `greatest`, `least`, `nullif`, the branches of a `CASE`) is the
/// instant its wall-clock time names in that timestamp's zone (a date its midnight there), as
/// SQL makes it. The engine took a zone-less value for UTC's wall-clock time (off by the zone's
/// offset every day) and subtracted a date from the zoned value's wall-clock time (off by an
/// hour across a daylight-saving change), and a `coalesce` of the two lost the zone.
#[derive(Debug, Default)]
pub struct WallClockMeetsInstant;

impl AnalyzerRule for WallClockMeetsInstant {
    fn analyze(&self, plan: LogicalPlan, _: &ConfigOptions) -> Result<LogicalPlan> {
        super::rewrite_exprs(plan, wall_clock_meets_instant)
    }

    fn name(&self) -> &str {
        "lakeswap_wall_clock_meets_instant"
    }
}

fn wall_clock_meets_instant(e: Expr, schema: &DFSchema) -> Result<Transformed<Expr>> {
    use datafusion::logical_expr::cast;
    let ty = |x: &Expr| x.get_type(schema).ok();
    let zoned = |t: &Option<DataType>| match t {
        Some(DataType::Timestamp(u, Some(z))) => Some((*u, z.clone())),
        _ => None,
    };
    let wall =
        |t: &Option<DataType>| matches!(t, Some(DataType::Timestamp(_, None) | DataType::Date32 | DataType::Date64));
    // `x` as the instant its wall-clock time names in `z` (a date: its midnight).
    let instant = |x: Expr, t: &Option<DataType>, (u, z): &(TimeUnit, Arc<str>)| -> Expr {
        let x = match t {
            Some(DataType::Date32 | DataType::Date64) => cast(x, DataType::Timestamp(*u, None)),
            _ => x,
        };
        cast(x, DataType::Timestamp(*u, Some(z.clone())))
    };
    // The zone the values meet in, when one is zoned and another is wall-clock time.
    let meeting = |types: &[Option<DataType>]| match types.iter().find_map(zoned) {
        Some(zu) if types.iter().any(wall) => Some(zu),
        _ => None,
    };
    match e {
        Expr::BinaryExpr(BinaryExpr { left, op: Operator::Minus, right }) => {
            let (l, r) = (ty(&left), ty(&right));
            let Some(zu) = meeting(&[l.clone(), r.clone()]) else {
                return Ok(Transformed::no(Expr::BinaryExpr(BinaryExpr { left, op: Operator::Minus, right })));
            };
            let left = if wall(&l) { Box::new(instant(*left, &l, &zu)) } else { left };
            let right = if wall(&r) { Box::new(instant(*right, &r, &zu)) } else { right };
            Ok(Transformed::yes(Expr::BinaryExpr(BinaryExpr { left, op: Operator::Minus, right })))
        }
        Expr::ScalarFunction(mut f)
            if matches!(f.name(), "coalesce" | "nvl" | "ifnull" | "nullif" | "greatest" | "least") =>
        {
            let types: Vec<Option<DataType>> = f.args.iter().map(ty).collect();
            let Some(zu) = meeting(&types) else { return Ok(Transformed::no(Expr::ScalarFunction(f))) };
            f.args = std::mem::take(&mut f.args)
                .into_iter()
                .zip(&types)
                .map(|(a, t)| if wall(t) { instant(a, t, &zu) } else { a })
                .collect();
            Ok(Transformed::yes(Expr::ScalarFunction(f)))
        }
        Expr::Case(mut c) => {
            let branch_types: Vec<Option<DataType>> =
                c.when_then_expr.iter().map(|(_, t)| ty(t)).chain(c.else_expr.as_deref().map(ty)).collect();
            let Some(zu) = meeting(&branch_types) else { return Ok(Transformed::no(Expr::Case(c))) };
            let mut types = branch_types.into_iter();
            for (_, then) in c.when_then_expr.iter_mut() {
                let t = types.next().flatten();
                if wall(&t) {
                    **then = instant(then.as_ref().clone(), &t, &zu);
                }
            }
            if let Some(x) = c.else_expr.as_mut() {
                let t = types.next().flatten();
                if wall(&t) {
                    **x = instant(x.as_ref().clone(), &t, &zu);
                }
            }
            Ok(Transformed::yes(Expr::Case(c)))
        }
        e => Ok(Transformed::no(e)),
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
