//! The tombstone test of `[identity] deleted = { column = "op", equals = "D" }`: a row is a
//! delete when its value equals the configured one, compared in the column's own type (`1`
//! equals an integer 1, `"2026-11-01"` a date, `0.7` a decimal 0.70). A value the column can
//! never hold is refused when the job is planned. Nulls never match: a column with no value in a
//! date's objects (type Null) means that date has no deletes.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, BooleanArray, Datum, Scalar, StringArray};
use arrow::datatypes::DataType;

/// `column = value`, in the column's type.
#[derive(Debug, Clone)]
pub struct Equals {
    /// None: the column is of type Null, all nulls, and no row matches.
    value: Option<Scalar<ArrayRef>>,
}

/// A TOML float compared with a column that is not a float: refused past 15 significant
/// digits, where TOML may already have rounded what was written (`1234567890123456.78` reads as
/// `…456.8`, and would match nothing). Any decimal of up to 15 digits survives a double exactly.
pub(crate) fn exact_float(v: &toml::Value, column_ty: &DataType) -> Result<(), String> {
    let toml::Value::Float(f) = v else { return Ok(()) };
    if crate::read::unify::base(column_ty).is_floating() {
        return Ok(());
    }
    let shown = toml::Value::Float(*f).to_string();
    let mantissa = shown.split(['e', 'E']).next().unwrap_or("");
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let significant = digits.trim_start_matches('0').trim_end_matches('0').len();
    if significant > 15 {
        return Err(format!(
            "a TOML number of more than 15 digits is rounded as it is read (this one reads as {shown}); quote the \
             value as written, in a string"
        ));
    }
    Ok(())
}

/// The text a config value is compared as. A TOML float without a fraction is, for an integer
/// column, that integer: `1.0` equals 1 (and `1.5` stays no integer, refused).
pub(crate) fn value_text(v: &toml::Value, column_ty: &DataType) -> String {
    match v {
        toml::Value::String(s) => s.clone(),
        toml::Value::Datetime(d) => d.to_string(),
        toml::Value::Float(f) if crate::read::unify::base(column_ty).is_integer() && f.fract() == 0.0 => {
            integer_text(*f).unwrap_or_else(|| v.to_string())
        }
        other => other.to_string(),
    }
}

/// The integer a float was written as: its shortest text that reads back as it (what
/// [`exact_float`] keeps exact), not the double's own value, which may lie off it
/// (`999999999999999e3` is held as 999999999999998976). `None` past 10^40.
fn integer_text(f: f64) -> Option<String> {
    let shortest = format!("{f:e}");
    let (mantissa, exp) = shortest.split_once('e')?;
    let exp: usize = exp.parse().ok()?;
    let (sign, mantissa) = mantissa.strip_prefix('-').map_or(("", mantissa), |m| ("-", m));
    let (whole, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let zeros = exp.checked_sub(fraction.len()).filter(|&z| z <= 40)?;
    let digits = format!("{whole}{fraction}{}", "0".repeat(zeros));
    Some(match digits.trim_start_matches('0') {
        "" => "0".to_string(),
        d => format!("{sign}{d}"),
    })
}

/// An integer written for an integer column of type `ty`, as one value of that type, or why
/// it can never be one; `None` when `text` is no integer.
pub(crate) fn integer_value(text: &str, ty: &DataType) -> Option<Result<ArrayRef, String>> {
    let n = text.trim().parse::<i128>().ok()?;
    let out_of_range = || format!("{n} is out of the range of the column's type ({ty})");
    let value: ArrayRef = match (i64::try_from(n), u64::try_from(n)) {
        (Ok(v), _) => Arc::new(arrow::array::Int64Array::from(vec![v])),
        (Err(_), Ok(v)) if ty == &DataType::UInt64 => Arc::new(arrow::array::UInt64Array::from(vec![v])),
        _ => return Some(Err(out_of_range())),
    };
    let exact = arrow::compute::CastOptions { safe: false, ..Default::default() };
    Some(arrow::compute::cast_with_options(&value, ty, &exact).map_err(|_| out_of_range()))
}

/// A quoted value for an integer column must be the integer as it is written: `"007"` would
/// match 7 on a date whose text column read as integers, and only `007` on a date where it stayed
/// text (integers with leading zeros keep a text column text).
pub(crate) fn quoted_integer(v: &toml::Value, column_ty: &DataType) -> Result<(), String> {
    let toml::Value::String(s) = v else { return Ok(()) };
    if !crate::read::unify::base(column_ty).is_integer() {
        return Ok(());
    }
    // An integer in another spelling (`"007"`, `"+7"`, `"7.0"`, `"7e0"`): which integer is meant is
    // plain, and that the text is not it.
    let whole = match s.trim().parse::<i128>() {
        Ok(n) => Some(n.to_string()),
        Err(_) => s.trim().parse::<f64>().ok().filter(|f| f.is_finite() && f.fract() == 0.0).and_then(integer_text),
    };
    match whole {
        Some(n) if n != *s => Err(format!(
            "`\"{s}\"` is text, and the column holds integers, where it would read as {n}; write {n} to match the \
             number, or declare the column `utf8` in [input.schema] to compare the text as written"
        )),
        _ => Ok(()),
    }
}

impl Equals {
    /// The config value `v` as a value of type `ty`, exactly, or why it can never be one.
    pub fn new(ty: &DataType, v: &toml::Value, tz: chrono_tz::Tz) -> Result<Self, String> {
        if let toml::Value::Table(_) | toml::Value::Array(_) = v {
            return Err(format!("`{v}` is not one value"));
        }
        let text = value_text(v, ty);
        if ty == &DataType::Null {
            return Ok(Equals { value: None });
        }
        let never = |why: &str| format!("`{text}` can never equal a value of type {ty}: {why}");
        exact_float(v, ty)?;
        quoted_integer(v, ty)?;
        let base = crate::read::unify::base(ty).clone();
        let value: ArrayRef = match &base {
            DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => {
                if !matches!(v, toml::Value::String(_)) {
                    return Err(never("the column holds text; quote the value"));
                }
                arrow::compute::cast(&(Arc::new(StringArray::from(vec![text.as_str()])) as ArrayRef), &base)
                    .map_err(|e| e.to_string())?
            }
            other if other.is_integer() => match integer_value(&text, other) {
                Some(v) => v.map_err(|why| never(&why))?,
                None => return Err(never(&format!("`{text}` is not an integer"))),
            },
            other => {
                let parsed = crate::read::text::parse_column(
                    &StringArray::from(vec![text.as_str()]),
                    &crate::read::Declared { ty: other.clone(), epoch: true },
                    tz,
                );
                if let Some((_, why)) = parsed.bad.first() {
                    return Err(never(why));
                }
                crate::prepare::one_zero_one_nan(&parsed.array)
            }
        };
        Ok(Equals { value: Some(Scalar::new(value)) })
    }

    /// Which rows of `array` equal `v` in the array's type. An array with no value (nulls only:
    /// a column left empty in a date's objects, read as text where the date gives it no other
    /// type) has no match, whatever `v` is.
    pub fn rows(array: &ArrayRef, v: &toml::Value, tz: chrono_tz::Tz) -> Result<BooleanArray, String> {
        if array.logical_null_count() == array.len() {
            return Ok(BooleanArray::from(vec![false; array.len()]));
        }
        Equals::new(array.data_type(), v, tz)?.matches(array)
    }

    /// Which rows of `array` (of the column's type, or a dictionary of it) equal the value.
    pub fn matches(&self, array: &ArrayRef) -> Result<BooleanArray, String> {
        let Some(value) = &self.value else {
            return Ok(BooleanArray::from(vec![false; array.len()]));
        };
        if array.data_type() == &DataType::Null {
            return Ok(BooleanArray::from(vec![false; array.len()]));
        }
        let plain = match array.data_type() {
            DataType::Dictionary(_, v) => arrow::compute::cast(array, v).map_err(|e| e.to_string())?,
            t if t != value.get().0.data_type() => {
                arrow::compute::cast(array, value.get().0.data_type()).map_err(|e| e.to_string())?
            }
            _ => array.clone(),
        };
        // Floats compare as numbers: -0.0 equals 0.0, and every NaN the value NaN.
        let plain = crate::prepare::one_zero_one_nan(&plain);
        let eq = arrow::compute::kernels::cmp::eq(&plain, value).map_err(|e| e.to_string())?;
        // Nulls never match.
        Ok(match eq.nulls() {
            Some(n) => BooleanArray::new(eq.values() & n.inner(), None),
            None => eq,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Decimal128Array, Int64Array};

    #[test]
    fn compared_in_the_column_type() {
        let tz = chrono_tz::UTC;
        let s: ArrayRef = Arc::new(StringArray::from(vec![Some("D"), None, Some("d")]));
        let m = Equals::new(&DataType::Utf8, &"D".into(), tz).unwrap().matches(&s).unwrap();
        assert_eq!(m.iter().collect::<Vec<_>>(), [Some(true), Some(false), Some(false)]);
        assert!(Equals::new(&DataType::Utf8, &toml::Value::Integer(1), tz).is_err());
        let n: ArrayRef = Arc::new(Int64Array::from(vec![1, 2]));
        let m = Equals::new(&DataType::Int64, &toml::Value::Integer(2), tz).unwrap().matches(&n).unwrap();
        assert_eq!(m.iter().collect::<Vec<_>>(), [Some(false), Some(true)]);
        let d: ArrayRef = Arc::new(Decimal128Array::from(vec![70, 71]).with_precision_and_scale(12, 2).unwrap());
        let m = Equals::new(&DataType::Decimal128(12, 2), &toml::Value::Float(0.7), tz).unwrap().matches(&d).unwrap();
        assert_eq!(m.iter().collect::<Vec<_>>(), [Some(true), Some(false)]);
        assert!(Equals::new(&DataType::Decimal128(12, 2), &toml::Value::Float(0.705), tz).is_err());
        // Past 15 digits TOML has rounded what was written: refused, not matched against nothing.
        let e =
            Equals::new(&DataType::Decimal128(20, 2), &toml::Value::Float("1234567890123456.78".parse().unwrap()), tz)
                .unwrap_err();
        assert!(e.contains("quote the value"), "{e}");
        assert!(Equals::new(&DataType::Decimal128(20, 2), &toml::Value::Float(123456789012.25), tz).is_ok());
        assert!(
            Equals::new(&DataType::Float64, &toml::Value::Float("1234567890123456.78".parse().unwrap()), tz).is_ok()
        );
        assert!(Equals::new(&DataType::Int64, &"x".into(), tz).is_err());
        // A float without a fraction is that integer; with one, no integer.
        let m = Equals::new(&DataType::Int64, &toml::Value::Float(2.0), tz).unwrap().matches(&n).unwrap();
        assert_eq!(m, BooleanArray::from(vec![false, true]));
        assert!(Equals::new(&DataType::Int64, &toml::Value::Float(1.5), tz).is_err());
        // Every integer width; a value past the column's range is refused, past int64 too.
        let small: ArrayRef = Arc::new(arrow::array::Int8Array::from(vec![0, 2]));
        for v in [toml::Value::Integer(2), toml::Value::Float(2.0), "2".into()] {
            let m = Equals::new(&DataType::Int8, &v, tz).unwrap().matches(&small).unwrap();
            assert_eq!(m, BooleanArray::from(vec![false, true]), "{v}");
        }
        assert!(Equals::new(&DataType::Int8, &toml::Value::Integer(300), tz).unwrap_err().contains("out of the range"));
        let big: ArrayRef = Arc::new(arrow::array::UInt64Array::from(vec![u64::MAX, 3]));
        let m =
            Equals::new(&DataType::UInt64, &u64::MAX.to_string().as_str().into(), tz).unwrap().matches(&big).unwrap();
        assert_eq!(m, BooleanArray::from(vec![true, false]));
        // A float is the number written, not the double next to it: 999999999999999e3 is
        // 999999999999999000 (the double holds 999999999999998976).
        let near: ArrayRef = Arc::new(Int64Array::from(vec![999_999_999_999_999_000, 999_999_999_999_998_976]));
        let m = Equals::new(&DataType::Int64, &toml::Value::Float(999_999_999_999_999e3), tz).unwrap().matches(&near);
        assert_eq!(m.unwrap(), BooleanArray::from(vec![true, false]));
        let e = Equals::new(&DataType::Int64, &toml::Value::Float(9.3e18), tz).unwrap_err();
        assert!(e.contains("out of the range"), "{e}");
        // Floats compare as numbers: one zero, one NaN whatever its bits.
        let other_nan = f64::from_bits(0x7ff8_0000_0000_0001);
        let f: ArrayRef = Arc::new(arrow::array::Float64Array::from(vec![0.0, -0.0, other_nan, -f64::NAN, 1.0]));
        for (v, want) in [
            (0.0, [true, true, false, false, false]),
            (-0.0, [true, true, false, false, false]),
            (f64::NAN, [false, false, true, true, false]),
        ] {
            let m = Equals::new(&DataType::Float64, &toml::Value::Float(v), tz).unwrap().matches(&f).unwrap();
            assert_eq!(m, BooleanArray::from(want.to_vec()), "{v}");
        }
        assert!(Equals::new(&DataType::Int64, &"007".into(), tz).unwrap_err().contains("write 7"));
        assert!(Equals::new(&DataType::Int32, &"+7".into(), tz).unwrap_err().contains("write 7"));
        for (v, n) in [("7.0", "7"), ("1e3", "1000"), ("-2.00", "-2")] {
            let e = Equals::new(&DataType::Int64, &v.into(), tz).unwrap_err();
            assert!(e.contains(&format!("write {n} ")), "{v}: {e}");
        }
        assert!(Equals::new(&DataType::Int64, &"7.5".into(), tz).unwrap_err().contains("not an integer"));
        let m = Equals::new(&DataType::Int64, &"2".into(), tz).unwrap().matches(&n).unwrap();
        assert_eq!(m, BooleanArray::from(vec![false, true]));
        // A column with no value that day: no deletes, whatever the value.
        let empty: ArrayRef = Arc::new(arrow::array::NullArray::new(3));
        for v in [toml::Value::from("D"), toml::Value::Integer(1)] {
            let m = Equals::new(&DataType::Null, &v, tz).unwrap().matches(&empty).unwrap();
            assert_eq!(m, BooleanArray::from(vec![false; 3]));
        }
        let m = Equals::new(&DataType::Utf8, &"D".into(), tz).unwrap().matches(&empty).unwrap();
        assert_eq!(m, BooleanArray::from(vec![false; 3]));
        // Also read as text, an empty column holds no value an integer could be refused against.
        let text: ArrayRef = Arc::new(StringArray::from(vec![None::<&str>, None]));
        assert_eq!(Equals::rows(&text, &toml::Value::Integer(1), tz).unwrap(), BooleanArray::from(vec![false; 2]));
        assert!(Equals::rows(&s, &toml::Value::Integer(1), tz).is_err());
    }
}
