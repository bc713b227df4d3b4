//! Text values and text objects: the types of `[input.schema]`, exact parsers for the values of
//! CSV and NDJSON (and text columns of Parquet), and the readers that turn a CSV or NDJSON
//! object into columns of text keyed by name, with the true line of every row.
//!
//! Invariant: a value is either converted exactly or reported with its row; nothing is rounded,
//! truncated or guessed. Decimals keep every digit or fail, timestamps with an offset are that
//! instant, timestamps without one are wall-clock time in the job's time zone.

use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, BooleanBuilder, Date32Builder, Decimal128Builder, Float32Builder, Float64Builder, Int32Builder,
    Int64Builder, PrimitiveBuilder, StringArray, StringBuilder,
};
use arrow::datatypes::{
    DataType, TimeUnit, TimestampMicrosecondType, TimestampMillisecondType, TimestampNanosecondType,
    TimestampSecondType,
};
use chrono::{NaiveDate, NaiveDateTime, NaiveTime, Offset, TimeZone, Timelike};
use chrono_tz::Tz;

use crate::dates;

/// A column type declared in `[input.schema]`.
#[derive(Debug, Clone, PartialEq)]
pub struct Declared {
    pub ty: DataType,
    /// Integers are epoch values in the timestamp's unit (`timestamp(s)`, `timestamp(ms)` …).
    pub epoch: bool,
}

impl Declared {
    pub fn plain(ty: DataType) -> Self {
        Declared { ty, epoch: false }
    }
}

const TYPES: &str = "utf8, int64, int32, float64, float32, bool, date, timestamp, timestamp(s|ms|us|ns), \
                     timestamp_ntz[(unit)], or decimal(p,s) (or SQL's names: string, bigint, int (32-bit), double, \
                     float (32-bit), boolean, …)";

/// Parses a type name of `[input.schema]`.
///
/// `timestamp` is an instant (stored in UTC); `timestamp(UNIT)` also reads integers as epoch
/// values in that unit; `timestamp_ntz` is wall-clock time without a zone.
pub fn parse_type(name: &str) -> Result<Declared, String> {
    let n: String = name.trim().to_ascii_lowercase().chars().filter(|c| !c.is_whitespace()).collect();
    let plain = |t| Ok(Declared::plain(t));
    match n.as_str() {
        "utf8" | "string" | "text" | "varchar" => return plain(DataType::Utf8),
        "int64" | "bigint" | "long" => return plain(DataType::Int64),
        "int32" | "int" | "integer" => return plain(DataType::Int32),
        "float64" | "double" => return plain(DataType::Float64),
        "float32" | "float" | "real" => return plain(DataType::Float32),
        "bool" | "boolean" => return plain(DataType::Boolean),
        "date" | "date32" => return plain(DataType::Date32),
        "timestamp" | "timestamptz" => return plain(DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()))),
        "timestamp_ntz" | "datetime" => return plain(DataType::Timestamp(TimeUnit::Microsecond, None)),
        _ => {}
    }
    let unit = |u: &str| -> Result<TimeUnit, String> {
        Ok(match u {
            "s" => TimeUnit::Second,
            "ms" => TimeUnit::Millisecond,
            "us" => TimeUnit::Microsecond,
            "ns" => TimeUnit::Nanosecond,
            _ => return Err(format!("unknown timestamp unit `{u}` in `{name}`: use s, ms, us or ns")),
        })
    };
    let args = |prefix: &str| {
        n.strip_prefix(prefix).and_then(|r| {
            r.strip_prefix('(')
                .and_then(|r| r.strip_suffix(')'))
                .or_else(|| r.strip_prefix('[').and_then(|r| r.strip_suffix(']')))
        })
    };
    if let Some(u) = args("timestamp_ntz") {
        return Ok(Declared { ty: DataType::Timestamp(unit(u)?, None), epoch: true });
    }
    if let Some(u) = args("timestamp") {
        return Ok(Declared { ty: DataType::Timestamp(unit(u)?, Some("UTC".into())), epoch: true });
    }
    if let Some(a) = args("decimal") {
        let (p, s) = a.split_once(',').ok_or("decimal needs (precision, scale), e.g. decimal(12,2)")?;
        let p: u8 = p.parse().map_err(|_| "bad decimal precision")?;
        let s: i8 = s.parse().map_err(|_| "bad decimal scale")?;
        if p == 0 || p > 38 || s < 0 || s as u8 > p {
            return Err(format!("decimal({p},{s}) is out of range: precision 1..38, 0 <= scale <= precision"));
        }
        return plain(DataType::Decimal128(p, s));
    }
    Err(format!("unknown type `{name}`; use {TYPES}"))
}

/// A column parsed from text: the values (null where a value failed) and the failed rows.
pub struct Parsed {
    pub array: ArrayRef,
    /// Rows whose value is not of the type, with the reason.
    pub bad: Vec<(usize, String)>,
}

/// A float from text: a number past the type's range is refused, not read as an infinity
/// (which only `inf` and `infinity` spell).
fn parse_float<T: std::str::FromStr + Into<f64> + Copy>(s: &str, ty: &str) -> Result<T, String> {
    let v: T = s.trim().parse().map_err(|_| format!("`{s}` is not a number"))?;
    float_as_written(s, v.into(), ty).map_err(|why| match why.whole {
        true => format!("{}: declare the column int64 or decimal", why.what),
        false => why.what,
    })?;
    Ok(v)
}

/// How a number's text and the float it reads as differ ([`float_as_written`]).
pub(crate) struct NotAsWritten {
    pub what: String,
    /// A whole number the float cannot hold exactly.
    pub whole: bool,
}

/// Whether `v`, the float (of type `ty`) that the number `s` reads as, is what `s` says: not an
/// infinity for a finite number, not 0 for a nonzero one, and the very integer for a whole
/// number ([`whole_number`]): `9007199254740993` as a double would become another one (two
/// ids, one key). Other numbers are read as the nearest float, as a float column's values are.
pub(crate) fn float_as_written(s: &str, v: f64, ty: &str) -> Result<(), NotAsWritten> {
    let word = s.trim().trim_start_matches(['+', '-']).to_ascii_lowercase();
    let not = |what: String, whole: bool| Err(NotAsWritten { what, whole });
    if v.is_infinite() && word != "inf" && word != "infinity" {
        return not(format!("`{s}` is past what a {ty} holds"), false);
    }
    let mantissa = word.split('e').next().unwrap_or("");
    if v == 0.0 && mantissa.bytes().any(|b| (b'1'..=b'9').contains(&b)) {
        return not(format!("`{s}` is too small for a {ty}: it would read as 0"), false);
    }
    if let Some(n) = whole_number(&word) {
        if !n.is_some_and(|n| v.abs() < 2f64.powi(127) && v.abs() as i128 == n) {
            return not(format!("`{s}` is a whole number a {ty} cannot hold exactly"), true);
        }
    }
    Ok(())
}

/// The whole number an unsigned number's text says, held to exactness when read as a float:
/// written out (`9007199254740993`, `…993.0`; `Some(None)` past i128), or with an exponent
/// below 2^64, where integer ids live (`9007199254740993e0`, `9.007199254740993e15`). A larger
/// number with an exponent (`6.02e23`) is a measurement, read as the nearest float. `None`: no
/// whole number, or zero.
fn whole_number(word: &str) -> Option<Option<i128>> {
    let digit = |t: &str| t.bytes().all(|b| b.is_ascii_digit());
    let (mantissa, exp) = match word.split_once(['e', 'E']) {
        Some((m, e)) => (m, Some(e)),
        None => (word, None),
    };
    let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    if !digit(int) || !digit(frac) {
        return None;
    }
    let Some(exp) = exp else {
        let whole = !int.is_empty() && frac.bytes().all(|b| b == b'0');
        return whole.then(|| int.parse::<i128>().ok());
    };
    let exp: i64 = exp.parse().ok()?;
    let all = format!("{int}{frac}");
    let digits = all.trim_start_matches('0');
    // The value is `digits` × 10^shift.
    let mut shift = exp.checked_sub(frac.len() as i64)?;
    let mut digits = digits;
    if shift < 0 {
        let cut = usize::try_from(-shift).ok().filter(|&c| c <= digits.len())?;
        let (kept, dropped) = digits.split_at(digits.len() - cut);
        if !dropped.bytes().all(|b| b == b'0') {
            return None;
        }
        (digits, shift) = (kept, 0);
    }
    if digits.is_empty() || digits.len() as i64 + shift > 20 {
        return None;
    }
    let n = digits.parse::<i128>().ok()? * 10i128.pow(shift as u32);
    (n < 1 << 64).then_some(Some(n))
}

/// Parses text values into `d`'s type, exactly. Nulls stay null.
pub fn parse_column(values: &StringArray, d: &Declared, tz: Tz) -> Parsed {
    let mut bad = Vec::new();
    macro_rules! each {
        ($builder:expr, $parse:expr) => {{
            let mut b = $builder;
            for i in 0..values.len() {
                if values.is_null(i) {
                    b.append_null();
                    continue;
                }
                match $parse(values.value(i)) {
                    Ok(v) => b.append_value(v),
                    Err(m) => {
                        bad.push((i, m));
                        b.append_null();
                    }
                }
            }
            Arc::new(b.finish()) as ArrayRef
        }};
    }
    let n = values.len();
    let array: ArrayRef = match &d.ty {
        DataType::Utf8 => Arc::new(values.clone()),
        DataType::Int64 => each!(Int64Builder::with_capacity(n), |s: &str| parse_int(s)),
        DataType::Int32 => each!(Int32Builder::with_capacity(n), |s: &str| parse_int(s)
            .and_then(|v| i32::try_from(v).map_err(|_| format!("`{s}` does not fit int32")))),
        DataType::Float64 => each!(Float64Builder::with_capacity(n), |s: &str| parse_float::<f64>(s, "float64")),
        DataType::Float32 => each!(Float32Builder::with_capacity(n), |s: &str| parse_float::<f32>(s, "float32")),
        DataType::Boolean => each!(BooleanBuilder::with_capacity(n), |s: &str| parse_bool(s)),
        DataType::Date32 => each!(Date32Builder::with_capacity(n), |s: &str| parse_date(s).map(dates::to_days)),
        &DataType::Decimal128(p, s) => {
            let a = each!(Decimal128Builder::with_capacity(n), |v: &str| parse_decimal(v, p, s));
            let a = a
                .as_any()
                .downcast_ref::<arrow::array::Decimal128Array>()
                .cloned()
                .unwrap_or_else(|| arrow::array::Decimal128Array::from(vec![None::<i128>; n]));
            Arc::new(a.with_precision_and_scale(p, s).unwrap_or_else(|_| arrow::array::Decimal128Array::new_null(n)))
        }
        DataType::Timestamp(unit, zone) => {
            let (aware, epoch) = (zone.is_some(), d.epoch);
            let parse = |s: &str| parse_timestamp(s, *unit, aware, epoch, tz);
            // The builders carry the declared zone (metadata only: the values are UTC instants).
            match unit {
                TimeUnit::Second => each!(
                    PrimitiveBuilder::<TimestampSecondType>::with_capacity(n).with_timezone_opt(zone.clone()),
                    parse
                ),
                TimeUnit::Millisecond => {
                    each!(
                        PrimitiveBuilder::<TimestampMillisecondType>::with_capacity(n).with_timezone_opt(zone.clone()),
                        parse
                    )
                }
                TimeUnit::Microsecond => {
                    each!(
                        PrimitiveBuilder::<TimestampMicrosecondType>::with_capacity(n).with_timezone_opt(zone.clone()),
                        parse
                    )
                }
                TimeUnit::Nanosecond => {
                    each!(
                        PrimitiveBuilder::<TimestampNanosecondType>::with_capacity(n).with_timezone_opt(zone.clone()),
                        parse
                    )
                }
            }
        }
        other => {
            bad.push((0, format!("type {other} cannot be read from text")));
            arrow::array::new_null_array(other, n)
        }
    };
    Parsed { array, bad }
}

fn parse_int(s: &str) -> Result<i64, String> {
    let t = s.trim();
    t.parse::<i64>().map_err(|_| {
        let digits = t.strip_prefix(['+', '-']).unwrap_or(t);
        match !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
            true => format!("`{s}` is out of the range of int64"),
            false => format!("`{s}` is not an integer"),
        }
    })
}

pub(crate) fn parse_bool(s: &str) -> Result<bool, String> {
    match s.trim().to_ascii_lowercase().as_str() {
        "true" | "1" => Ok(true),
        "false" | "0" => Ok(false),
        _ => Err(format!("`{s}` is not a boolean (true / false, in any case, or 1 / 0)")),
    }
}

/// A date `YYYY-MM-DD`, strictly: `2026-11-3x` is an error, never the 3rd.
pub fn parse_date(s: &str) -> Result<NaiveDate, String> {
    NaiveDate::parse_from_str(s.trim(), "%Y-%m-%d").map_err(|_| format!("`{s}` is not a date (YYYY-MM-DD)"))
}

/// An exact decimal: `[+-]digits[.digits][e[+-]digits]` with at most `scale` decimal places
/// (trailing zeros aside) and at most `precision` digits in all.
pub fn parse_decimal(s: &str, precision: u8, scale: i8) -> Result<i128, String> {
    let t = s.trim();
    let err = |why: &str| format!("`{s}` is not a decimal({precision},{scale}): {why}");
    let (neg, body) = match t.as_bytes().first() {
        Some(b'-') => (true, &t[1..]),
        Some(b'+') => (false, &t[1..]),
        _ => (false, t),
    };
    if !body.bytes().all(|b| b.is_ascii_digit() || matches!(b, b'.' | b'e' | b'E' | b'+' | b'-')) {
        return Err(err("not a number"));
    }
    let (mantissa, exp) = match body.find(['e', 'E']) {
        Some(i) => (&body[..i], body[i + 1..].parse::<i32>().map_err(|_| err("bad exponent"))?),
        None => (body, 0),
    };
    let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    if int.is_empty() && frac.is_empty() {
        return Err(err("no digits"));
    }
    if !int.bytes().chain(frac.bytes()).all(|b| b.is_ascii_digit()) {
        return Err(err("not a number"));
    }
    let digits: String = int.chars().chain(frac.chars()).collect();
    let digits = digits.trim_start_matches('0');
    // value = digits * 10^(exp - frac.len()), wanted as an integer count of 10^-scale.
    let mut shift = scale as i64 + exp as i64 - frac.len() as i64;
    let mut digits = digits.to_string();
    while shift < 0 {
        match digits.pop() {
            Some('0') => shift += 1,
            Some(_) => return Err(err(&format!("more than {scale} decimal places"))),
            None => {
                shift = 0;
            }
        }
    }
    if digits.len() as i64 + shift > precision as i64 {
        return Err(err("too many digits"));
    }
    let mut v: i128 = if digits.is_empty() { 0 } else { digits.parse().map_err(|_| err("too many digits"))? };
    for _ in 0..shift {
        v = v.checked_mul(10).ok_or_else(|| err("too many digits"))?;
    }
    Ok(if neg { -v } else { v })
}

/// Ticks of `unit` in a second.
pub fn per_second(unit: TimeUnit) -> i64 {
    match unit {
        TimeUnit::Second => 1,
        TimeUnit::Millisecond => 1_000,
        TimeUnit::Microsecond => 1_000_000,
        TimeUnit::Nanosecond => 1_000_000_000,
    }
}

/// A local date-time in `tz` as an instant: a time that happens twice (clocks going back) is
/// the earlier one; a time that does not exist (clocks going forward) is an error.
pub fn local_to_utc(ndt: NaiveDateTime, tz: Tz) -> Result<NaiveDateTime, String> {
    match tz.from_local_datetime(&ndt) {
        chrono::LocalResult::Single(t) => Ok(t.naive_utc()),
        chrono::LocalResult::Ambiguous(a, b) => Ok(a.naive_utc().min(b.naive_utc())),
        chrono::LocalResult::None => {
            Err(format!("{ndt} does not exist in {tz} (the clocks skip it); write the value with its offset"))
        }
    }
}

/// A timestamp: ISO 8601 (`2026-11-01`, `2026-11-01T02:00`, `… 02:00:00.123`, each optionally
/// followed by `Z` or an offset `+01:00` / `+0100` / `+01`), or, when `epoch`, an integer in
/// `unit` since 1970-01-01T00:00Z. Returned in `unit`: an instant (UTC) when `aware`, else
/// wall-clock time in `tz`.
pub fn parse_timestamp(s: &str, unit: TimeUnit, aware: bool, epoch: bool, tz: Tz) -> Result<i64, String> {
    let t = s.trim();
    let scale = per_second(unit);
    let magnitude = t.strip_prefix('-').unwrap_or(t);
    if !magnitude.is_empty() && magnitude.bytes().all(|b| b.is_ascii_digit()) {
        if !epoch {
            return Err(format!(
                "`{s}` is a number: declare the column `timestamp(s)` or `timestamp(ms)` (or us, ns) to read epoch values"
            ));
        }
        let v: i64 = t.parse().map_err(|_| format!("`{s}` is out of range"))?;
        if aware {
            return Ok(v);
        }
        let utc = chrono::DateTime::from_timestamp(
            v.div_euclid(scale),
            (v.rem_euclid(scale) * (1_000_000_000 / scale)) as u32,
        )
        .ok_or_else(|| format!("`{s}` is out of range"))?;
        return to_unit(utc.with_timezone(&tz).naive_local(), unit).ok_or_else(|| format!("`{s}` is out of range"));
    }
    if epoch && t.parse::<f64>().is_ok_and(f64::is_finite) {
        return Err(format!(
            "`{s}` is not a whole number in digits alone: epoch values are integers written out in the column's \
             unit ({unit:?}), without a fraction or an exponent; declare a finer unit for fractions of a second"
        ));
    }
    let bad = || format!("`{s}` is not a timestamp (ISO 8601, e.g. 2026-11-01T02:00:00Z)");
    let (date_part, rest) = match t.find(['T', 't', ' ']) {
        Some(i) => (&t[..i], t[i + 1..].trim_start()),
        None => (t, ""),
    };
    let date = NaiveDate::parse_from_str(date_part, "%Y-%m-%d").map_err(|_| bad())?;
    // The offset: `Z`, or a sign after the time's first characters.
    let (time_part, offset) = if let Some(r) = rest.strip_suffix(['Z', 'z']) {
        (r, Some(0))
    } else if let Some(i) = rest.get(2..).and_then(|r| r.rfind(['+', '-'])).map(|i| i + 2) {
        (&rest[..i], Some(parse_offset(&rest[i..]).ok_or_else(bad)?))
    } else {
        (rest, None)
    };
    let time_part = time_part.trim_end();
    // chrono reads the digits past the ninth and drops them: `.1234567891` and `.1234567892`
    // would be one value.
    let fraction = time_part.split_once('.').map_or("", |(_, f)| f);
    if fraction.len() > 9 && fraction.bytes().skip(9).any(|b| b != b'0') {
        return Err(format!("`{s}` has digits finer than a nanosecond, which no timestamp column holds"));
    }
    let time = if time_part.is_empty() {
        NaiveTime::MIN
    } else {
        NaiveTime::parse_from_str(time_part, "%H:%M:%S%.f")
            .or_else(|_| NaiveTime::parse_from_str(time_part, "%H:%M"))
            .map_err(|_| bad())?
    };
    // chrono reads second 60 as a leap second, which would then count as the next minute.
    if time.nanosecond() >= 1_000_000_000 {
        return Err(format!("`{s}` has second 60 (a leap second), which no timestamp column holds"));
    }
    let wall = NaiveDateTime::new(date, time);
    let value = match (offset, aware) {
        (Some(off), true) => wall - chrono::Duration::seconds(off as i64),
        (Some(off), false) => {
            let utc = wall - chrono::Duration::seconds(off as i64);
            tz.from_utc_datetime(&utc).naive_local()
        }
        (None, true) => local_to_utc(wall, tz).map_err(|m| format!("`{s}`: {m}"))?,
        (None, false) => wall,
    };
    let nanos = value.and_utc().timestamp_subsec_nanos() as i64;
    if nanos % (1_000_000_000 / scale) != 0 {
        return Err(format!("`{s}` is finer than the column's unit ({unit:?}); declare a finer unit"));
    }
    to_unit(value, unit).ok_or_else(|| format!("`{s}` is out of range"))
}

/// The wall-clock time (in `unit`) that `s` writes without `Z`, an offset or an epoch value:
/// where its zone repeats that time, which of two instants it is, is not in the text.
pub fn wall_clock_written(s: &str, unit: TimeUnit, tz: Tz) -> Option<i64> {
    let t = s.trim();
    let rest = t.find(['T', 't', ' ']).map_or("", |i| t[i + 1..].trim_start());
    if rest.ends_with(['Z', 'z']) || rest.get(2..).is_some_and(|r| r.contains(['+', '-'])) {
        return None;
    }
    parse_timestamp(s, unit, false, false, tz).ok()
}

fn to_unit(t: NaiveDateTime, unit: TimeUnit) -> Option<i64> {
    let u = t.and_utc();
    match unit {
        TimeUnit::Second => Some(u.timestamp()),
        TimeUnit::Millisecond => Some(u.timestamp_millis()),
        TimeUnit::Microsecond => Some(u.timestamp_micros()),
        TimeUnit::Nanosecond => u.timestamp_nanos_opt(),
    }
}

/// `+01:00`, `-0530`, `+01` as seconds east of UTC.
fn parse_offset(s: &str) -> Option<i32> {
    let (sign, body) = match s.as_bytes().first()? {
        b'+' => (1, &s[1..]),
        b'-' => (-1, &s[1..]),
        _ => return None,
    };
    let digits: String = body.chars().filter(|c| *c != ':').collect();
    if !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let (h, m) = match digits.len() {
        2 => (digits.parse::<i32>().ok()?, 0),
        4 => (digits[..2].parse::<i32>().ok()?, digits[2..].parse::<i32>().ok()?),
        _ => return None,
    };
    if h > 23 || m > 59 {
        return None;
    }
    Some(sign * (h * 3600 + m * 60))
}

/// The seconds east of UTC of `tz` at instant `utc` (for messages and tests).
pub fn offset_at(tz: Tz, utc: NaiveDateTime) -> i32 {
    tz.offset_from_utc_datetime(&utc).fix().local_minus_utc()
}

/// The type of a text column whose type is not declared, from every one of its values: int64
/// when each is a plain integer (no leading zeros, which identifiers keep, nor `-0`, an id
/// apart from `0` as written but one integer with it), float64 when each
/// is a number, bool when each is true / false, else utf8; a column of nulls only is `Null`.
pub fn infer(columns: &[&StringArray]) -> DataType {
    let mut t = Inference::default();
    for c in columns {
        t.add(c);
    }
    t.finish()
}

/// [`infer`], fed a batch of a column's values at a time, in order: the same type as from all
/// of them at once, without keeping them.
#[derive(Debug, Clone)]
pub struct Inference {
    all_int: bool,
    all_num: bool,
    all_bool: bool,
    any: bool,
    /// A whole number a double cannot hold exactly (past 2^53) keeps the column text unless
    /// every value is an integer: as doubles, the 20-digit ids 18446744073709551610 and …611,
    /// or 9007199254740993 beside a 0.5, would be one key.
    inexact: bool,
}

impl Default for Inference {
    fn default() -> Self {
        Inference { all_int: true, all_num: true, all_bool: true, any: false, inexact: false }
    }
}

impl Inference {
    /// Whether the column is text whatever values follow.
    fn settled(&self) -> bool {
        !self.all_int && !self.all_num && !self.all_bool
    }

    /// A batch of the column's values.
    pub fn add(&mut self, c: &StringArray) {
        for v in c.iter().flatten() {
            if self.settled() {
                return;
            }
            self.add_value(v);
        }
    }

    /// One value of the column (not a null).
    pub fn add_value(&mut self, v: &str) {
        if self.settled() {
            return;
        }
        self.any = true;
        if self.all_int {
            let digits = v.strip_prefix('-').unwrap_or(v);
            self.all_int = !digits.is_empty()
                && digits.bytes().all(|b| b.is_ascii_digit())
                && (v == "0" || !digits.starts_with('0'))
                && v.parse::<i64>().is_ok();
        }
        let unsigned = v.strip_prefix(['-', '+']).unwrap_or(v);
        self.inexact |= whole_number(unsigned).is_some_and(|n| n.is_none_or(|n| n > 1 << 53));
        if self.all_num && !self.all_int {
            let int_part = unsigned.split(['.', 'e', 'E']).next().unwrap_or("");
            self.all_num = !self.inexact
                && v.parse::<f64>().is_ok_and(f64::is_finite)
                && v.bytes().all(|b| b.is_ascii_digit() || matches!(b, b'-' | b'+' | b'.' | b'e' | b'E'))
                && !(int_part.len() > 1 && int_part.starts_with('0'));
        }
        if self.all_bool {
            self.all_bool = v.eq_ignore_ascii_case("true") || v.eq_ignore_ascii_case("false");
        }
    }

    pub fn finish(&self) -> DataType {
        if self.settled() {
            return DataType::Utf8;
        }
        match (self.any, self.all_int, self.all_num, self.all_bool) {
            (false, ..) => DataType::Null,
            (_, true, ..) => DataType::Int64,
            (_, _, true, _) if !self.inexact => DataType::Float64,
            (_, _, _, true) => DataType::Boolean,
            _ => DataType::Utf8,
        }
    }
}

/// Rows of a text object as text columns, in batches: the column names (the object's own
/// header, or `column_1` … without one), and the line each row starts on (1-based).
pub struct TextRows {
    pub names: Vec<String>,
    pub batches: Vec<Vec<StringArray>>,
    pub lines: Vec<u64>,
}

/// A problem in a text object: the row (0-based, data rows) and line (1-based) when known.
#[derive(Debug)]
pub struct TextError {
    pub row: Option<u64>,
    pub line: Option<u64>,
    pub column: Option<String>,
    pub message: String,
}

/// Rows per batch of text columns.
const TEXT_BATCH: usize = 65_536;

/// Reads a CSV object into text columns, by its own header.
pub fn read_csv(bytes: &[u8], header: bool, delimiter: u8) -> Result<TextRows, TextError> {
    let mut reader = CsvReader::new(bytes, header, delimiter)?;
    let (mut batches, mut lines) = (Vec::new(), Vec::new());
    while let Some(b) = reader.next_batch()? {
        batches.push(b.columns);
        lines.extend(b.lines);
    }
    Ok(TextRows { names: reader.names, batches, lines })
}

/// One batch of a CSV object's rows as text columns ([`CsvReader::next_batch`]).
pub struct CsvBatch {
    pub columns: Vec<StringArray>,
    /// The line each row starts on (1-based).
    pub lines: Vec<u64>,
    /// Where the text after the batch's last row starts (a byte of the object).
    pub end: u64,
}

/// A CSV object's rows as text columns, 65,536 rows at a time: besides the text, one batch is
/// held, however long the object. The column names are the object's own header, or `column_1` …
/// from the first row without one.
pub struct CsvReader<'b> {
    bytes: &'b [u8],
    delimiter: u8,
    header: bool,
    rdr: csv::Reader<&'b [u8]>,
    rec: csv::ByteRecord,
    pub names: Vec<String>,
    width: usize,
    counted: Lines,
    /// Where the last record read starts (byte, line, row): an unclosed quote runs to the end.
    last: Option<(u64, u64, Option<u64>)>,
    row: u64,
    done: bool,
}

impl<'b> CsvReader<'b> {
    /// A reader past the header, when there is one.
    pub fn new(bytes: &'b [u8], header: bool, delimiter: u8) -> Result<Self, TextError> {
        let rdr = csv::ReaderBuilder::new().has_headers(false).delimiter(delimiter).flexible(true).from_reader(bytes);
        let mut r = CsvReader {
            bytes,
            delimiter,
            header,
            rdr,
            rec: csv::ByteRecord::new(),
            names: Vec::new(),
            width: 0,
            counted: Lines::default(),
            last: None,
            row: 0,
            done: false,
        };
        if header {
            if !r.rdr.read_byte_record(&mut r.rec).map_err(|e| r.csv_err(e, 0))? {
                r.done = true;
                return Ok(r);
            }
            for (i, f) in r.rec.iter().enumerate() {
                let n = std::str::from_utf8(f)
                    .map_err(|_| err_at(None, Some(1), format!("header field {} is not valid UTF-8", i + 1)))?;
                let n = n.trim_start_matches('\u{feff}').to_string();
                if r.names.contains(&n) {
                    return Err(err_at(None, Some(1), format!("the header names column `{n}` twice")));
                }
                r.names.push(n);
            }
        }
        r.width = r.names.len();
        r.last = r.rec.position().map(|p| (p.byte(), r.counted.at(bytes, p.byte()), None));
        Ok(r)
    }

    fn csv_err(&self, e: csv::Error, row: u64) -> TextError {
        let line = e.position().map(|p| Lines::default().at(self.bytes, p.byte()));
        let message = match e.kind() {
            csv::ErrorKind::Io(io) => format!("cannot read CSV: {io}"),
            _ => format!("malformed CSV: {e}"),
        };
        err_at(Some(row), line, message)
    }

    /// Reads the next row (blank lines passed over) into `self.rec`, its fields checked to be
    /// as many as the header's and UTF-8: its line, or `None` past the last row, once the
    /// object's closing checks (a quote never closed, text after a closing quote) are passed.
    fn next_row(&mut self) -> Result<Option<u64>, TextError> {
        if self.done {
            return Ok(None);
        }
        while self.rdr.read_byte_record(&mut self.rec).map_err(|e| self.csv_err(e, self.row))? {
            let (rec, row) = (&self.rec, self.row);
            let line = rec.position().map_or(0, |p| self.counted.at(self.bytes, p.byte()));
            self.last = rec.position().map(|p| (p.byte(), line, Some(row)));
            if !self.header && row == 0 && self.names.is_empty() {
                self.width = rec.len();
                self.names = (1..=self.width).map(|i| format!("column_{i}")).collect();
            }
            if rec.len() == 1 && rec.get(0).is_some_and(<[u8]>::is_empty) && self.width != 1 {
                continue; // a blank line
            }
            if rec.len() != self.width {
                return Err(err_at(
                    Some(row),
                    Some(line),
                    format!("{} field(s), but the header has {}", rec.len(), self.width),
                ));
            }
            if let Some(i) = rec.iter().position(|f| std::str::from_utf8(f).is_err()) {
                return Err(TextError {
                    row: Some(row),
                    line: Some(line),
                    column: Some(self.names[i].clone()),
                    message: "the value is not valid UTF-8 text".into(),
                });
            }
            self.row += 1;
            return Ok(Some(line));
        }
        self.done = true;
        self.closing_checks()?;
        Ok(None)
    }

    /// The fields of the row [`CsvReader::next_row`] read: `None` for an empty one (a null).
    fn fields(&self) -> impl Iterator<Item = Option<&str>> {
        // SAFETY: `next_row` has checked that every field is UTF-8.
        self.rec.iter().map(|f| (!f.is_empty()).then(|| unsafe { std::str::from_utf8_unchecked(f) }))
    }

    /// The next 65,536 rows (fewer at the end), or `None` past the last.
    pub fn next_batch(&mut self) -> Result<Option<CsvBatch>, TextError> {
        let mut builders: Vec<StringBuilder> = Vec::new();
        let mut lines = Vec::new();
        while let Some(line) = self.next_row()? {
            if builders.is_empty() {
                builders = (0..self.width).map(|_| StringBuilder::with_capacity(TEXT_BATCH, TEXT_BATCH * 8)).collect();
            }
            for (f, b) in self.fields().zip(builders.iter_mut()) {
                b.append_option(f);
            }
            lines.push(line);
            if lines.len() == TEXT_BATCH {
                break;
            }
        }
        let end = match self.done {
            true => self.bytes.len() as u64,
            false => self.rdr.position().byte(),
        };
        Ok((!lines.is_empty()).then(|| CsvBatch {
            columns: builders.iter_mut().map(|b| b.finish()).collect(),
            lines,
            end,
        }))
    }

    /// The rest of the rows read through without keeping them: the type the values of each
    /// column `infers` names share ([`Inference`]; the others' stay untouched), and how many
    /// rows there were.
    pub fn infer_rest(&mut self, infers: impl Fn(&str) -> bool) -> Result<(Vec<Inference>, u64), TextError> {
        let (mut types, mut wanted, mut rows) = (Vec::new(), Vec::new(), 0u64);
        while self.next_row()?.is_some() {
            if types.is_empty() {
                types = vec![Inference::default(); self.width];
                wanted = self.names.iter().map(|n| infers(n)).collect();
            }
            for ((t, f), w) in types.iter_mut().zip(self.fields()).zip(&wanted) {
                if let (true, Some(v)) = (*w, f) {
                    t.add_value(v);
                }
            }
            rows += 1;
        }
        Ok((types, rows))
    }

    /// At the end of the text: a quoted field never closed, or text after a closing quote.
    fn closing_checks(&self) -> Result<(), TextError> {
        let bytes = self.bytes;
        if let Some((start, line, row)) = self.last {
            // The reader skips a byte-order mark before the first field.
            let rest = bytes.get(start as usize..).unwrap_or_default();
            let rest = if start == 0 { rest.strip_prefix(b"\xef\xbb\xbf").unwrap_or(rest) } else { rest };
            if quotes(rest, self.delimiter).open {
                return Err(err_at(
                    row,
                    Some(line),
                    "malformed CSV: a quoted field opened here is never closed (its closing `\"` is missing), \
                     so the rest of the object would be read as one value"
                        .into(),
                ));
            }
        }
        let bom = if bytes.starts_with(b"\xef\xbb\xbf") { 3 } else { 0 };
        if let Some(at) = quotes(&bytes[bom..], self.delimiter).text_after.map(|at| at + bom) {
            let line = 1 + bytes[..at].iter().filter(|&&b| b == b'\n').count() as u64;
            let shown = String::from_utf8_lossy(&bytes[at..bytes.len().min(at + 12)]).into_owned();
            let shown = shown.split(['\n', '\r']).next().unwrap_or_default().to_string();
            return Err(err_at(
                None,
                Some(line),
                format!(
                    "malformed CSV: a quoted field is closed and then goes on (`{shown}` after its closing `\"`), where \
                     a delimiter or the line's end must follow; a `\"` inside a quoted field is written `\"\"`"
                ),
            ));
        }
        Ok(())
    }
}

fn err_at(row: Option<u64>, line: Option<u64>, message: String) -> TextError {
    TextError { row, line, column: None, message }
}

/// The line (1-based) of a record from the byte where the CSV reader says it starts, counted
/// over the text: the reader's own count is one short after a CRLF (a record following
/// `\r\n` starts at its `\n`, before the reader counts it), and it counts no lone `\r`. Positions asked for in ascending
/// order are counted from the last one.
#[derive(Default)]
struct Lines {
    /// Bytes counted, and the newlines among them.
    upto: usize,
    newlines: u64,
}

impl Lines {
    fn at(&mut self, bytes: &[u8], start: u64) -> u64 {
        // The record's first byte: past the end of the line before it.
        let mut at = (start as usize).min(bytes.len());
        while bytes.get(at).is_some_and(|b| *b == b'\n' || *b == b'\r') {
            at += 1;
        }
        if at < self.upto {
            *self = Lines::default();
        }
        // A line ends at `\n`, or at a `\r` not followed by one (the reader takes both).
        let span = &bytes[self.upto..at];
        // Newlines counted a vector at a time; lone `\r`s only where there is a `\r` at all.
        self.newlines += memchr::memchr_iter(b'\n', span).count() as u64;
        if memchr::memchr(b'\r', span).is_some() {
            self.newlines += span
                .iter()
                .enumerate()
                .filter(|&(i, &b)| b == b'\r' && bytes.get(self.upto + i + 1) != Some(&b'\n'))
                .count() as u64;
        }
        self.upto = at;
        self.newlines + 1
    }
}

/// How CSV text uses quotes, read as the CSV reader reads them: a `"` opens a quoted field only
/// at the field's start, and `""` inside one is a quote.
struct Quotes {
    /// The text ends inside a quoted field.
    open: bool,
    /// Where text first follows a closed quoted field (`"abc"def`, `"a\"b"`): the reader would
    /// join it to the field's value, a guess at what the writer meant.
    text_after: Option<usize>,
}

fn quotes(text: &[u8], delimiter: u8) -> Quotes {
    let boundary = |b: u8| b == delimiter || b == b'\n' || b == b'\r';
    let quote_from = |i: usize| memchr::memchr(b'"', &text[i..]).map(|p| i + p);
    let mut text_after = None;
    let mut i = 0;
    // Outside quotes: from one quote to the next. A quote opens a field at its start (the
    // text's start, or past a delimiter or a line's end); any other is text.
    while let Some(open) = quote_from(i) {
        if open > 0 && !boundary(text[open - 1]) {
            i = open + 1;
            continue;
        }
        // Inside: to the quote that is not doubled.
        let mut at = open + 1;
        let close = loop {
            match quote_from(at) {
                None => return Quotes { open: true, text_after },
                Some(q) if text.get(q + 1) == Some(&b'"') => at = q + 2,
                Some(q) => break q,
            }
        };
        if text.get(close + 1).is_some_and(|&b| !boundary(b)) {
            text_after = text_after.or(Some(close + 1));
        }
        i = close + 1;
    }
    Quotes { open: false, text_after }
}

/// The non-blank lines of NDJSON text, as [`ndjson_lines`] counts them: the rows before a
/// piece of lines, for the rows [`first_bad_json_line`] and [`first_repeated_field`] name.
pub fn ndjson_row_count(bytes: &[u8]) -> u64 {
    bytes.split(|&b| b == b'\n').filter(|l| l.iter().any(|b| !b.is_ascii_whitespace())).count() as u64
}

/// The line (1-based) of every non-blank line of NDJSON text: row `i` is on `lines[i]`.
pub fn ndjson_lines(bytes: &[u8]) -> Vec<u64> {
    let mut lines = Vec::new();
    for (i, l) in bytes.split(|&b| b == b'\n').enumerate() {
        if l.iter().any(|b| !b.is_ascii_whitespace()) {
            lines.push(i as u64 + 1);
        }
    }
    lines
}

/// The parser's reason `e` for refusing the JSON `line`, placed in the line by its byte; a
/// number past what a double holds (`1e400`) is valid JSON, named with its field.
fn json_error(line: &[u8], e: &serde_json::Error) -> String {
    let said = e.to_string();
    let said = said.strip_suffix(&format!(" at line {} column {}", e.line(), e.column())).unwrap_or(&said);
    if said == "number out of range" {
        let field = field_before(&line[..e.column().min(line.len())]);
        return format!(
            "a number past what a 64-bit float holds (±1.8e308){}",
            field.map(|f| format!(" in the field `{f}`")).unwrap_or_default()
        );
    }
    format!("malformed NDJSON: {said} (at byte {} of the line)", e.column())
}

/// The field (`a.b` for `b` inside the object of `a`; a list's values are its field's) whose
/// value `text`, a line of JSON cut inside a value, ends in.
fn field_before(text: &[u8]) -> Option<String> {
    // Per open object or list, the last key seen (objects) or `None` (lists).
    let mut open: Vec<(bool, Option<String>)> = Vec::new();
    let (mut i, mut last) = (0, None::<String>);
    while i < text.len() {
        match text[i] {
            b'"' => {
                let start = i;
                i += 1;
                while i < text.len() && text[i] != b'"' {
                    i += if text[i] == b'\\' { 2 } else { 1 };
                }
                last = serde_json::from_slice::<String>(text.get(start..=i)?).ok();
            }
            b':' => {
                if let Some((true, key)) = open.last_mut() {
                    *key = last.take();
                }
            }
            b'{' => open.push((true, None)),
            b'[' => open.push((false, None)),
            b'}' | b']' => {
                open.pop();
            }
            _ => {}
        }
        i += 1;
    }
    let path: Vec<String> = open.into_iter().filter_map(|(_, k)| k).collect();
    (!path.is_empty()).then(|| path.join("."))
}

/// The first line of NDJSON text that is not one JSON value, with the parser's reason.
pub fn first_bad_json_line(bytes: &[u8]) -> Option<(u64, u64, String)> {
    let mut row = 0u64;
    for (i, l) in bytes.split(|&b| b == b'\n').enumerate() {
        if l.iter().all(|b| b.is_ascii_whitespace()) {
            continue;
        }
        if let Err(e) = serde_json::from_slice::<serde_json::Value>(l) {
            let why = match (l.starts_with(b"\xEF\xBB\xBF"), l.starts_with(b"\xFF\xFE") || l.starts_with(b"\xFE\xFF")) {
                (true, _) => "malformed NDJSON: the line opens with a UTF-8 byte-order mark (one is passed over only \
                              at the very start of the object: objects joined together?)"
                    .to_string(),
                (_, true) => "malformed NDJSON: the line opens with a UTF-16 byte-order mark: NDJSON is read as UTF-8"
                    .to_string(),
                _ => json_error(l, &e),
            };
            return Some((row, i as u64 + 1, why));
        }
        row += 1;
    }
    None
}

/// Where Arrow's NDJSON reader failed with `why` on a list or an object in a field of single
/// values (`whilst decoding field 'a': whilst decoding field 'b': expected … got [3]`): the
/// first line of `bytes` (all of whose lines are JSON) whose field (`a.b`) holds a list or an
/// object — `(row, line, field, value)`, the value shortened. Only where `read` (the fields the
/// reader was given) types that field as single values: the reader reads lines in order, so
/// the first such line is the one it failed on. (A field of lists failing on a list inside one
/// is not named: which line is not told.)
pub fn first_nested_in_single(
    bytes: &[u8],
    why: &str,
    read: &arrow::datatypes::Schema,
) -> Option<(u64, u64, String, String)> {
    use arrow::datatypes::DataType;
    const AT: &str = "whilst decoding field '";
    let mut path = Vec::new();
    let mut rest = why;
    while let Some(i) = rest.find(AT) {
        let (name, tail) = rest[i + AT.len()..].split_once('\'')?;
        path.push(name);
        rest = tail;
    }
    let got = rest.rsplit_once(" got ")?.1.trim_start();
    if path.is_empty() || !(got.starts_with('[') || got.starts_with('{')) {
        return None;
    }
    // The field's type, through structs.
    let (first, inner) = path.split_first()?;
    let mut t = read.field_with_name(first).ok()?.data_type();
    for name in inner {
        let DataType::Struct(fs) = t else { return None };
        t = fs.iter().find(|f| f.name() == name)?.data_type();
    }
    if t.is_nested() {
        return None;
    }
    let mut row = 0u64;
    for (i, l) in bytes.split(|&b| b == b'\n').enumerate() {
        if l.iter().all(|b| b.is_ascii_whitespace()) {
            continue;
        }
        let v: serde_json::Value = serde_json::from_slice(l).ok()?;
        let found = path.iter().try_fold(&v, |v, name| v.get(name));
        if let Some(v @ (serde_json::Value::Array(_) | serde_json::Value::Object(_))) = found {
            let mut shown = v.to_string();
            if shown.len() > 40 {
                let cut = (0..=37).rev().find(|&c| shown.is_char_boundary(c)).unwrap_or(0);
                shown.truncate(cut);
                shown.push('…');
            }
            return Some((row, i as u64 + 1, path.join("."), shown));
        }
        row += 1;
    }
    None
}

/// The first line of NDJSON text (all of whose lines are JSON) holding an object, at any depth,
/// that names a field twice, with the field: `(row, line, field)`. A reader keeps one of the
/// two values, so such a line is refused rather than read.
pub fn first_repeated_field(bytes: &[u8]) -> Option<(u64, u64, String)> {
    use serde::de::{DeserializeSeed, Deserializer, Error, MapAccess, SeqAccess, Visitor};

    /// Walks one JSON value; `repeated` gets the first field named twice in an object.
    struct Walk<'r>(&'r mut Option<String>);

    impl<'de> DeserializeSeed<'de> for Walk<'_> {
        type Value = ();
        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
            d.deserialize_any(self)
        }
    }

    impl<'de> Visitor<'de> for Walk<'_> {
        type Value = ();
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a JSON value")
        }
        fn visit_bool<E>(self, _: bool) -> Result<(), E> {
            Ok(())
        }
        fn visit_i64<E>(self, _: i64) -> Result<(), E> {
            Ok(())
        }
        fn visit_u64<E>(self, _: u64) -> Result<(), E> {
            Ok(())
        }
        fn visit_f64<E>(self, _: f64) -> Result<(), E> {
            Ok(())
        }
        fn visit_str<E>(self, _: &str) -> Result<(), E> {
            Ok(())
        }
        fn visit_unit<E>(self) -> Result<(), E> {
            Ok(())
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
            while seq.next_element_seed(Walk(&mut *self.0))?.is_some() {}
            Ok(())
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
            // Names borrowed from the line unless escaped; an object has few.
            let mut names: Vec<std::borrow::Cow<'de, str>> = Vec::new();
            while let Some(Name(name)) = map.next_key::<Name<'de>>()? {
                if names.contains(&name) {
                    *self.0 = Some(name.into_owned());
                    return Err(A::Error::custom("a field named twice"));
                }
                map.next_value_seed(Walk(&mut *self.0))?;
                names.push(name);
            }
            Ok(())
        }
    }

    /// A field name, unescaped.
    struct Name<'de>(std::borrow::Cow<'de, str>);

    impl<'de> serde::Deserialize<'de> for Name<'de> {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct V;
            impl<'de> Visitor<'de> for V {
                type Value = Name<'de>;
                fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                    f.write_str("a field name")
                }
                fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Name<'de>, E> {
                    Ok(Name(std::borrow::Cow::Borrowed(v)))
                }
                fn visit_str<E>(self, v: &str) -> Result<Name<'de>, E> {
                    Ok(Name(std::borrow::Cow::Owned(v.to_string())))
                }
            }
            d.deserialize_str(V)
        }
    }

    let mut row = 0u64;
    for (i, l) in bytes.split(|&b| b == b'\n').enumerate() {
        if l.iter().all(|b| b.is_ascii_whitespace()) {
            continue;
        }
        let mut repeated = None;
        let _ = Walk(&mut repeated).deserialize(&mut serde_json::Deserializer::from_slice(l));
        if let Some(field) = repeated {
            return Some((row, i as u64 + 1, field));
        }
        row += 1;
    }
    None
}

/// The compression a text object's name says it has: `gzip` (`*.gz`), `zstd` (`*.zst`), or none.
pub fn compression(name: &str) -> Option<&'static str> {
    let lower = name.to_ascii_lowercase();
    if lower.ends_with(".gz") || lower.ends_with(".gzip") {
        Some("gzip")
    } else if lower.ends_with(".zst") || lower.ends_with(".zstd") {
        Some("zstd")
    } else {
        None
    }
}

/// Why a compressed object could not be read.
pub fn decompress_error(name: &str, e: impl std::fmt::Display) -> String {
    format!("cannot decompress the {} object: {e}", compression(name).unwrap_or("compressed"))
}

/// Decompresses a text object named `*.gz` or `*.zst`; other objects are returned as they are.
pub fn decompress(name: &str, bytes: bytes::Bytes) -> Result<bytes::Bytes, String> {
    use std::io::Read;
    match compression(name) {
        Some("gzip") => {
            let mut out = Vec::with_capacity(bytes.len() * 4);
            flate2::read::MultiGzDecoder::new(&bytes[..])
                .read_to_end(&mut out)
                .map_err(|e| decompress_error(name, e))?;
            Ok(out.into())
        }
        Some(_) => zstd::stream::decode_all(&bytes[..]).map(Into::into).map_err(|e| decompress_error(name, e)),
        None => Ok(bytes),
    }
}

/// A text object's stored bytes as its text, decompressed as they are read ([`decompress`],
/// without holding the text).
pub fn decompressing<'r>(name: &str, stored: impl std::io::Read + 'r) -> std::io::Result<Box<dyn std::io::Read + 'r>> {
    Ok(match compression(name) {
        Some("gzip") => Box::new(flate2::read::MultiGzDecoder::new(stored)),
        Some(_) => Box::new(zstd::stream::read::Decoder::new(stored)?),
        None => Box::new(stored),
    })
}

/// A piece of a text object: whole lines ([`Pieces`]).
pub struct LinePiece {
    pub text: bytes::Bytes,
    /// The lines before the piece (its first line is `lines_before + 1`).
    pub lines_before: u64,
}

/// A text's lines, read a piece of about `size` bytes of whole lines at a time (a line longer
/// than that is a piece of its own): besides the piece, only the start of the next line is held.
/// A piece ends with a `\n`, except the text's last.
pub struct Pieces<R> {
    text: R,
    size: usize,
    /// The text read past the last piece's end.
    carry: Vec<u8>,
    ended: bool,
    lines: u64,
}

impl<R: std::io::Read> Pieces<R> {
    pub fn new(text: R, size: usize) -> Self {
        Pieces { text, size: size.max(1), carry: Vec::new(), ended: false, lines: 0 }
    }

    pub fn next_piece(&mut self) -> std::io::Result<Option<LinePiece>> {
        use std::io::Read;
        let mut buf = std::mem::take(&mut self.carry);
        let (mut goal, mut scanned) = (self.size, 0);
        let cut = loop {
            while !self.ended && buf.len() < goal {
                let want = (goal - buf.len()) as u64;
                if (&mut self.text).take(want).read_to_end(&mut buf)? == 0 {
                    self.ended = true;
                }
            }
            if self.ended {
                break buf.len();
            }
            match memchr::memrchr(b'\n', &buf[scanned..]) {
                Some(at) => break scanned + at + 1,
                // A line longer than a piece (held whole, as a record is): read on to its end.
                None => (scanned, goal) = (buf.len(), buf.len() + self.size),
            }
        };
        if cut == 0 {
            return Ok(None);
        }
        self.carry = buf[cut..].to_vec();
        buf.truncate(cut);
        let lines_before = self.lines;
        self.lines += memchr::memchr_iter(b'\n', &buf).count() as u64;
        Ok(Some(LinePiece { text: buf.into(), lines_before }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_that_is_not_json_is_named_with_its_reason() {
        let text = b"{\"id\":\"a\",\"amount\":2.0}\n{\"id\":\"b\",\"p\":{\"amount\": 1e400}}\n";
        let (row, line, why) = first_bad_json_line(text).unwrap();
        assert_eq!((row, line), (1, 2));
        assert_eq!(why, "a number past what a 64-bit float holds (±1.8e308) in the field `p.amount`");
        for (line, field) in [
            (&b"{\"a\":[1, 2e999]}"[..], "`a`"),
            (b"{\"p\":{\"amount\": 1e400}}", "`p.amount`"),
            (b"{\"items\":[{\"sku\":\"s:\\\"x\",\"q\":1}, 2e400]}", "`items`"),
        ] {
            let (_, _, why) = first_bad_json_line(line).unwrap();
            assert!(why.ends_with(&format!("in the field {field}")), "{why}");
        }
        let (row, line, why) = first_bad_json_line(b"{\"a\":1}\n\n{\"a\":1,}\n").unwrap();
        assert_eq!((row, line), (1, 3));
        assert!(why.starts_with("malformed NDJSON: trailing comma (at byte "), "{why}");
        assert!(!why.contains("line 1"), "the line is named by the caller: {why}");
    }

    #[test]
    fn a_list_in_a_field_of_single_values_is_found_at_its_line() {
        use arrow::datatypes::{DataType, Field, Fields, Schema};
        let read = Schema::new(vec![
            Field::new("id", DataType::Int64, true),
            Field::new("x", DataType::Int64, true),
            Field::new("s", DataType::Struct(Fields::from(vec![Field::new("y", DataType::Float64, true)])), true),
            Field::new("tags", DataType::new_list(DataType::Utf8, true), true),
        ]);
        let text = b"{\"id\":1,\"x\":1}\n\n{\"id\":2,\"x\":2,\"s\":{\"y\":1}}\n{\"id\":3,\"x\":{\"b\":1,\"a\":2}}\n";
        // Arrow's own rendering of the object (no comma between pairs) is not needed to find it.
        let why = "Json error: whilst decoding field 'x': expected string got {\"b\": 1\"a\": 2}";
        assert_eq!(first_nested_in_single(text, why, &read), Some((2, 4, "x".into(), "{\"a\":2,\"b\":1}".into())));
        let text = b"{\"s\":{\"y\":1}}\n{\"s\":{\"y\":{\"z\":\"a\"}}}\n";
        let why = "Json error: whilst decoding field 's': whilst decoding field 'y': expected number got {\"z\": a}";
        assert_eq!(first_nested_in_single(text, why, &read), Some((1, 2, "s.y".into(), "{\"z\":\"a\"}".into())));
        // Another failure, a field no line holds a list in, a field the reader was not given.
        let scalar = "Json error: whilst decoding field 's': expected number got \"a\"";
        assert_eq!(first_nested_in_single(text, scalar, &read), None);
        assert_eq!(first_nested_in_single(b"{\"x\":1}\n", "whilst decoding field 'x': got [3]", &read), None);
        assert_eq!(first_nested_in_single(b"{\"q\":[1]}\n", "whilst decoding field 'q': got [1]", &read), None);
        // A field of lists failing on a list inside one: which line is not told.
        let text = b"{\"tags\":[\"a\"]}\n{\"tags\":[[\"a\"]]}\n";
        assert_eq!(first_nested_in_single(text, "whilst decoding field 'tags': expected string got [a]", &read), None);
        let long = format!("{{\"x\":[{}]}}\n", vec!["1"; 40].join(","));
        let (.., shown) = first_nested_in_single(long.as_bytes(), "whilst decoding field 'x': got [1", &read).unwrap();
        assert!(shown.ends_with('…') && shown.chars().count() == 38, "{shown}");
    }

    /// The quotes of CSV text read a byte at a time, as the reader reads them.
    fn quotes_byte_by_byte(text: &[u8], delimiter: u8) -> Quotes {
        let (mut quoted, mut closed, mut at_start, mut i) = (false, false, true, 0);
        let mut text_after = None;
        while i < text.len() {
            let b = text[i];
            if quoted {
                if b == b'"' {
                    if text.get(i + 1) == Some(&b'"') {
                        i += 1;
                    } else {
                        (quoted, closed) = (false, true);
                    }
                }
            } else if b == delimiter || b == b'\n' || b == b'\r' {
                (at_start, closed) = (true, false);
            } else {
                if closed {
                    text_after = text_after.or(Some(i));
                    closed = false;
                }
                quoted = at_start && b == b'"';
                at_start = false;
            }
            i += 1;
        }
        Quotes { open: quoted, text_after }
    }

    #[test]
    fn quotes_found_from_quote_to_quote_are_those_read_byte_by_byte() {
        // Every text of up to 7 bytes of `a` `,` `"` `\n` `\r`, and longer random ones.
        let alphabet = [b'a', b',', b'"', b'\n', b'\r'];
        let mut texts: Vec<Vec<u8>> = vec![Vec::new()];
        for len in 1..=7 {
            let mut n = 5usize.pow(len);
            while n > 0 {
                n -= 1;
                texts.push(
                    (0..len)
                        .scan(n, |k, _| {
                            Some(
                                alphabet[{
                                    let d = *k % 5;
                                    *k /= 5;
                                    d
                                }],
                            )
                        })
                        .collect(),
                );
            }
        }
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..2000 {
            let len = (x % 200) as usize;
            texts.push(
                (0..len)
                    .map(|_| {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        alphabet[(x % 5) as usize]
                    })
                    .collect(),
            );
        }
        for t in &texts {
            let (a, b) = (quotes(t, b','), quotes_byte_by_byte(t, b','));
            assert_eq!((a.open, a.text_after), (b.open, b.text_after), "{:?}", String::from_utf8_lossy(t));
        }
    }

    #[test]
    fn an_unclosed_quote_is_refused_not_read_to_the_end() {
        let rows = |t: &str| read_csv(t.as_bytes(), true, b',').map(|r| r.lines.len());
        let e = rows("k,v\n1,a\n2,\"abc\n3,c\n4,d\n").unwrap_err();
        assert_eq!((e.row, e.line), (Some(1), Some(3)), "{}", e.message);
        assert!(e.message.contains("never closed"), "{}", e.message);
        assert!(rows("k,\"v\n1,a\n").unwrap_err().message.contains("never closed"));
        assert!(rows("\u{feff}\"k,v\n1,a\n").unwrap_err().message.contains("never closed"));
        // Closed quotes, doubled quotes, and a quote inside an unquoted field are fine.
        assert_eq!(rows("k,v\n1,\"a,\"\"b\"\"\nc\"\n2,x\"y\n3,\"z\"\r\n").unwrap(), 3);
        assert_eq!(rows("k;v\n1;\"a;b\"\n").map_err(|e| e.message), Ok(1));
        assert_eq!(rows("\u{feff}\"k\",\"v\"\r\n1,\"\"\r\n").map_err(|e| e.message), Ok(1));
        // Text after a closing quote is refused, not joined to the value.
        for (t, line, shown) in [
            ("k,v\n1,\"abc\"def\n", 2, "def"),
            ("k,v\n1,a\n2,\"a\\\"b\"\n", 3, "b\""),
            ("k,v\n1,\"a,b\" \n", 2, " "),
            ("\"k\"x,v\n1,a\n", 1, "x,v"),
        ] {
            let e = rows(t).unwrap_err();
            assert_eq!(e.line, Some(line), "{t:?}: {}", e.message);
            assert!(e.message.contains(&format!("`{shown}` after its closing")), "{t:?}: {}", e.message);
        }
    }

    #[test]
    fn integers_past_int64_are_out_of_range_not_unreadable() {
        assert_eq!(parse_int(" -12 "), Ok(-12));
        assert!(parse_int("9223372036854775808").unwrap_err().contains("out of the range of int64"));
        assert!(parse_int("-99999999999999999999999").unwrap_err().contains("out of the range"));
        assert!(parse_int("1e3").unwrap_err().contains("not an integer"));
    }

    #[test]
    fn decimals_are_exact_or_refused() {
        assert_eq!(parse_decimal("0.7", 12, 2), Ok(70));
        for s in ["true", "1,000.00", "0x10", "NaN", "1e"] {
            let e = parse_decimal(s, 12, 2).unwrap_err();
            assert!(e.contains("not a number") || e.contains("bad exponent"), "{s}: {e}");
        }
        assert!(parse_decimal("true", 12, 2).unwrap_err().contains("not a number"));
        assert_eq!(parse_decimal("0.70", 12, 2), Ok(70));
        assert_eq!(parse_decimal("-1.500", 12, 2), Ok(-150));
        assert_eq!(parse_decimal("12", 12, 2), Ok(1200));
        assert_eq!(parse_decimal("1.5e2", 12, 2), Ok(15000));
        assert_eq!(parse_decimal(".5", 12, 2), Ok(50));
        assert!(parse_decimal("1.005", 12, 2).unwrap_err().contains("more than 2 decimal places"));
        assert!(parse_decimal("12345678901", 12, 2).unwrap_err().contains("too many digits"));
        assert!(parse_decimal("1,5", 12, 2).is_err());
        assert!(parse_decimal("", 12, 2).is_err());
    }

    #[test]
    fn floats_past_their_range_are_refused_not_infinite() {
        assert_eq!(parse_float::<f64>(" 1.5 ", "float64"), Ok(1.5));
        assert_eq!(parse_float::<f64>("-inf", "float64"), Ok(f64::NEG_INFINITY));
        assert_eq!(parse_float::<f32>("Infinity", "float32"), Ok(f32::INFINITY));
        assert!(parse_float::<f64>("NaN", "float64").unwrap().is_nan());
        assert!(parse_float::<f64>("1e400", "float64").unwrap_err().contains("past what a float64 holds"));
        assert!(parse_float::<f32>("-1e39", "float32").unwrap_err().contains("past what a float32 holds"));
        assert!(parse_float::<f64>("1,5", "float64").is_err());
        // Whole numbers exactly or not at all; nothing nonzero read as 0.
        assert_eq!(parse_float::<f64>("9007199254740992", "float64"), Ok(9007199254740992.0));
        assert_eq!(parse_float::<f64>("-9007199254740992", "float64"), Ok(-9007199254740992.0));
        assert_eq!(parse_float::<f64>("18014398509481988", "float64"), Ok(18014398509481988.0));
        assert!(parse_float::<f64>("9007199254740993", "float64").unwrap_err().contains("cannot hold exactly"));
        assert!(parse_float::<f64>("+9007199254740993", "float64").unwrap_err().contains("cannot hold exactly"));
        assert!(parse_float::<f64>("-9007199254740993.00", "float64").unwrap_err().contains("cannot hold exactly"));
        assert_eq!(parse_float::<f64>("-9007199254740992.0", "float64"), Ok(-9007199254740992.0));
        assert_eq!(parse_float::<f64>("6.02e23", "float64"), Ok(6.02e23));
        // The same with an exponent, below 2^64.
        for s in ["9007199254740993e0", "9.007199254740993e15", "90071992547409930e-1", "12345678901234567E0"] {
            assert!(parse_float::<f64>(s, "float64").unwrap_err().contains("cannot hold exactly"), "{s}");
        }
        for s in ["16777217e0", "1.6777217e7"] {
            assert!(parse_float::<f32>(s, "float32").unwrap_err().contains("cannot hold exactly"), "{s}");
        }
        assert_eq!(parse_float::<f64>("9.007199254740992e15", "float64"), Ok(9007199254740992.0));
        assert_eq!(parse_float::<f64>("1.5e2", "float64"), Ok(150.0));
        assert_eq!(parse_float::<f64>("1.0000000000000001e300", "float64"), Ok(1e300));
        assert_eq!(parse_float::<f64>("1.5e-1", "float64"), Ok(0.15));
        assert_eq!(parse_float::<f64>("9007199254740993.5e0", "float64"), Ok(9007199254740994.0));
        assert!(parse_float::<f32>("16777217", "float32").unwrap_err().contains("cannot hold exactly"));
        assert!(parse_float::<f64>("1000000000000000000000000000000000000000", "float64").is_err());
        assert_eq!(parse_float::<f32>("16777216", "float32"), Ok(16777216.0));
        assert_eq!(parse_float::<f64>("0.1", "float64"), Ok(0.1));
        assert_eq!(parse_float::<f64>("9007199254740993.5", "float64"), Ok(9007199254740994.0));
        assert!(parse_float::<f64>("1e-400", "float64").unwrap_err().contains("would read as 0"));
        assert!(parse_float::<f64>("-0.0000e-999", "float64").is_ok());
        assert_eq!(parse_float::<f64>("0e5", "float64"), Ok(0.0));
        assert!(parse_float::<f64>("1e-310", "float64").is_ok_and(|v| v > 0.0));
    }

    #[test]
    fn timestamps_with_and_without_offsets() {
        let ny: Tz = "America/New_York".parse().unwrap();
        let us = TimeUnit::Microsecond;
        let utc = |s: &str| parse_timestamp(s, us, true, false, ny).unwrap();
        let at = |s: &str| NaiveDateTime::parse_from_str(s, "%Y-%m-%d %H:%M:%S").unwrap().and_utc().timestamp_micros();
        assert_eq!(utc("2026-11-01T06:00:00Z"), at("2026-11-01 06:00:00"));
        assert_eq!(utc("2026-11-01T01:00:00-05:00"), at("2026-11-01 06:00:00"));
        assert_eq!(utc("2026-11-01 01:00:00-0500"), at("2026-11-01 06:00:00"));
        // Without an offset: wall-clock time in the job's zone (EDT before the change).
        assert_eq!(utc("2026-10-31T22:00"), at("2026-11-01 02:00:00"));
        // 01:30 happens twice on 2026-11-01 in New York: the earlier instant.
        assert_eq!(utc("2026-11-01 01:30:00"), at("2026-11-01 05:30:00"));
        // 02:30 does not exist on 2026-03-08.
        assert!(parse_timestamp("2026-03-08 02:30", us, true, false, ny).unwrap_err().contains("does not exist"));
        assert!(parse_timestamp("1700000000", us, true, false, ny).unwrap_err().contains("timestamp(s)"));
        assert_eq!(parse_timestamp("1700000000", TimeUnit::Second, true, true, ny), Ok(1_700_000_000));
        assert!(parse_timestamp("2026-11-01T01:00:00.5Z", TimeUnit::Second, true, false, ny).is_err());
        for s in ["1793534400.5", "1e12", "1.7935344001235e12"] {
            let e = parse_timestamp(s, TimeUnit::Second, true, true, ny).unwrap_err();
            assert!(e.contains("not a whole number"), "{s}: {e}");
        }
        assert!(parse_timestamp("yesterday", us, true, false, ny).is_err());
        assert!(parse_timestamp("2026-11-01T23:59:60Z", us, true, false, ny).unwrap_err().contains("leap second"));
        assert!(parse_timestamp("2026-11-01 10:15:60.5", us, false, false, ny).unwrap_err().contains("leap second"));
        // Wall-clock columns keep the wall clock; an offset is converted to the job's zone.
        let ntz = |s: &str| parse_timestamp(s, us, false, false, ny).unwrap();
        assert_eq!(ntz("2026-11-01 02:00"), at("2026-11-01 02:00:00"));
        assert_eq!(ntz("2026-11-01T07:00:00Z"), at("2026-11-01 02:00:00"));
        // The two instants of the hour New York repeats are one wall-clock time, as declared.
        assert_eq!(ntz("2026-11-01T01:30:00-04:00"), ntz("2026-11-01T01:30:00-05:00"));
        // Digits past the ninth are not dropped: two values would be one.
        let ns = TimeUnit::Nanosecond;
        for s in ["2026-11-01T12:00:00.1234567891Z", "2026-11-01 12:00:00.0000000001"] {
            let e = parse_timestamp(s, ns, true, false, ny).unwrap_err();
            assert!(e.contains("finer than a nanosecond"), "{s}: {e}");
        }
        assert_eq!(
            parse_timestamp("2026-11-01T12:00:00.123456789000Z", ns, true, false, ny),
            parse_timestamp("2026-11-01T12:00:00.123456789Z", ns, true, false, ny)
        );
    }

    #[test]
    fn types_of_the_config() {
        assert_eq!(
            parse_type("timestamp(ms)").unwrap(),
            Declared { ty: DataType::Timestamp(TimeUnit::Millisecond, Some("UTC".into())), epoch: true }
        );
        assert_eq!(parse_type("Decimal(12, 2)").unwrap().ty, DataType::Decimal128(12, 2));
        assert!(parse_type("timestamp(h)").is_err());
        assert!(parse_type("money").unwrap_err().contains("decimal(p,s)"));
    }

    #[test]
    fn inference_keeps_identifiers_text() {
        let a = |v: &[&str]| StringArray::from(v.to_vec());
        assert_eq!(infer(&[&a(&["1", "-2", "30"])]), DataType::Int64);
        assert_eq!(infer(&[&a(&["007", "8"])]), DataType::Utf8, "leading zeros are kept");
        assert_eq!(infer(&[&a(&["0", "-0"])]), DataType::Float64, "-0 is not written as an integer is");
        assert_eq!(infer(&[&a(&["0", "-1"])]), DataType::Int64);
        assert_eq!(infer(&[&a(&["1", "2.5"])]), DataType::Float64);
        // Past int64, a double would round 18446744073709551610 and …611 to one value.
        assert_eq!(infer(&[&a(&["18446744073709551610", "18446744073709551611"])]), DataType::Utf8);
        assert_eq!(infer(&[&a(&["1.5", "-9223372036854775809"])]), DataType::Utf8);
        assert_eq!(infer(&[&a(&["1.5", "9007199254740993"])]), DataType::Utf8, "2^53 + 1 is no double");
        assert_eq!(infer(&[&a(&["2.5", "1", "-9007199254740992"])]), DataType::Float64);
        assert_eq!(infer(&[&a(&["9007199254740993", "0.5"])]), DataType::Utf8, "the integer came first");
        assert_eq!(infer(&[&a(&["9007199254740993"]), &a(&["-0.25"])]), DataType::Utf8);
        assert_eq!(infer(&[&a(&["1", "9007199254740993e0"])]), DataType::Utf8, "in any notation");
        assert_eq!(infer(&[&a(&["1", "6.02e23", "2.5e-3"])]), DataType::Float64);
        assert_eq!(infer(&[&a(&["9223372036854775807", "-9223372036854775808"])]), DataType::Int64);
        assert_eq!(infer(&[&a(&["true", "False"])]), DataType::Boolean);
        assert_eq!(infer(&[&a(&["2026-11-01"])]), DataType::Utf8);
        assert_eq!(infer(&[&StringArray::from(vec![None::<&str>])]), DataType::Null);
    }

    #[test]
    fn csv_by_header_with_true_lines() {
        let t = read_csv(b"b,a\n1,\"x\ny\"\n2,z\n", true, b',').ok().unwrap();
        assert_eq!(t.names, ["b", "a"]);
        assert_eq!(t.lines, [2, 4], "a quoted newline moves the next row's line");
        // CRLF, a blank line, and an error's line.
        let t = read_csv(b"b,a\r\n1,\"x\r\ny\"\r\n\r\n2,z\r\n3,w", true, b',').ok().unwrap();
        assert_eq!(t.lines, [2, 5, 6]);
        let e = read_csv(b"a,b\r\n1,2\r\n3\r\n", true, b',').err().unwrap();
        assert_eq!((e.row, e.line), (Some(1), Some(3)));
        // Lines ended by a lone CR.
        let t = read_csv(b"a,b\r1,2\r\r3,4\r", true, b',').ok().unwrap();
        assert_eq!(t.lines, [2, 4]);
        let e = read_csv(b"a,b\n1,2\n3\n", true, b',').err().unwrap();
        assert_eq!((e.row, e.line), (Some(1), Some(3)));
        assert!(read_csv(b"a,a\n1,2\n", true, b',').err().unwrap().message.contains("twice"));
        let json = b"{\"a\":1}\n\n{\"a\":{\"b\":1,\"c\":[{\"b\":2,\"b\":3}]}}\n{\"a\":1,\"a\":2}\n";
        assert_eq!(first_repeated_field(json), Some((1, 3, "b".to_string())));
        assert_eq!(first_repeated_field(b"{\"op\":1,\"o\\u0070\":2}"), Some((0, 1, "op".to_string())));
        assert_eq!(first_repeated_field(b"{\"a\":{\"a\":1},\"b\":[{\"a\":1},{\"a\":2}]}\n[1,1]\n"), None);
    }
}
