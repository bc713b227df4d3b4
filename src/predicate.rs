//! Value predicates of the config: `where = { status = ["placed", "shipped"] }` and
//! `deleted = { column = "op", equals = "D" }`.
//!
//! A row matches when its value, rendered as text, equals one of the listed values rendered
//! as text (so `equals = 1` matches an integer column holding 1 and a text column holding
//! "1"). Nulls never match.

use std::collections::HashSet;

use arrow::array::{Array, ArrayRef, AsArray, BooleanArray, BooleanBufferBuilder, RecordBatch};
use arrow::datatypes::DataType;

/// The text form of a config value, as compared with column values.
pub fn value_text(v: &toml::Value) -> String {
    match v {
        toml::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Rows of `array` whose value is one of `values`.
pub fn matches(array: &ArrayRef, values: &[toml::Value]) -> Result<BooleanArray, String> {
    let m = Matcher::new(array, values)?;
    let mut b = BooleanBufferBuilder::new(array.len());
    for i in 0..array.len() {
        b.append(m.is_match(i));
    }
    Ok(BooleanArray::new(b.finish(), None))
}

/// A prepared `column = values` test, asked row by row.
pub enum Matcher {
    /// A text column: compared with the few listed values directly.
    Utf8(arrow::array::StringArray, Vec<String>),
    /// Any other column: its text form, looked up in a set.
    Text(arrow::array::StringArray, HashSet<String>),
}

impl Matcher {
    pub fn new(array: &ArrayRef, values: &[toml::Value]) -> Result<Self, String> {
        let texts: Vec<String> = values.iter().map(value_text).collect();
        Ok(match array.data_type() {
            DataType::Utf8 => Matcher::Utf8(array.as_string::<i32>().clone(), texts),
            _ => {
                let t = arrow::compute::cast(array, &DataType::Utf8).map_err(|e| e.to_string())?;
                Matcher::Text(t.as_string::<i32>().clone(), texts.into_iter().collect())
            }
        })
    }

    #[inline]
    pub fn is_match(&self, row: usize) -> bool {
        match self {
            Matcher::Utf8(a, vals) => a.is_valid(row) && vals.iter().any(|v| v == a.value(row)),
            Matcher::Text(a, set) => a.is_valid(row) && set.contains(a.value(row)),
        }
    }
}

/// Rows of `batch` that satisfy every `column = values` condition (all rows when empty).
pub fn all_match<'a>(
    batch: &RecordBatch,
    conditions: impl IntoIterator<Item = (&'a String, Vec<toml::Value>)>,
) -> Result<Option<BooleanArray>, String> {
    let mut acc: Option<BooleanArray> = None;
    for (col, values) in conditions {
        let arr = batch.column_by_name(col).ok_or_else(|| format!("no column `{col}` in the input"))?;
        let m = matches(arr, &values)?;
        acc = Some(match acc {
            None => m,
            Some(a) => arrow::compute::and(&a, &m).map_err(|e| e.to_string())?,
        });
    }
    Ok(acc)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Int64Array, StringArray};
    use std::sync::Arc;

    #[test]
    fn matches_text_and_numbers_never_nulls() {
        let a: ArrayRef = Arc::new(StringArray::from(vec![Some("placed"), None, Some("shipped"), Some("x")]));
        let m = matches(&a, &["placed".into(), "shipped".into()]).unwrap();
        assert_eq!(m.iter().collect::<Vec<_>>(), vec![Some(true), Some(false), Some(true), Some(false)]);
        let n: ArrayRef = Arc::new(Int64Array::from(vec![1, 2, 3]));
        let m = matches(&n, &[toml::Value::Integer(2)]).unwrap();
        assert_eq!(m.iter().collect::<Vec<_>>(), vec![Some(false), Some(true), Some(false)]);
    }
}
