//! `avg` of decimals rounded to its scale, half away from zero, as Spark and PostgreSQL round
//! a decimal mean. DataFusion's cuts toward zero: the mean of 0.01, 0.00 and 0.01
//! (`decimal(12,2)`, a `decimal(16,6)` mean) was 0.006666 where it is 0.006667.
//!
//! The wrappers keep DataFusion's accumulators for everything but the last step: they add and
//! merge as before, and at the end the mean is taken from their state (a count and a sum, or
//! the distinct values) instead of from their `evaluate`.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, BooleanArray, Decimal256Array, UInt64Array};
use arrow::compute::kernels::aggregate;
use arrow::compute::{cast_with_options, CastOptions};
use arrow::datatypes::{i256, DataType, Decimal256Type, DecimalType, DECIMAL256_MAX_PRECISION};
use datafusion::common::{exec_err, Result, ScalarValue};
use datafusion::logical_expr::{Accumulator, EmitTo, GroupsAccumulator};

/// Whether `avg` returning `ty` is a decimal mean, which [`Rounded`] and [`RoundedGroups`]
/// round.
pub fn rounds(ty: &DataType) -> bool {
    matches!(
        ty,
        DataType::Decimal32(..) | DataType::Decimal64(..) | DataType::Decimal128(..) | DataType::Decimal256(..)
    )
}

/// The precision and scale of a decimal type.
fn parts(ty: &DataType) -> (u8, i8) {
    match ty {
        DataType::Decimal32(p, s)
        | DataType::Decimal64(p, s)
        | DataType::Decimal128(p, s)
        | DataType::Decimal256(p, s) => (*p, *s),
        _ => unreachable!("`rounds` admits decimals only"),
    }
}

/// A decimal array of any width as `decimal256` of the same scale.
fn widened(values: &ArrayRef) -> Result<Decimal256Array> {
    let (_, scale) = parts(values.data_type());
    let wide = DataType::Decimal256(DECIMAL256_MAX_PRECISION, scale);
    Ok(cast_with_options(values, &wide, &CastOptions { safe: false, ..Default::default() })?.as_primitive().clone())
}

/// `sum / count` for each row, in `out` (a decimal of a scale at least the sums'), rounded half
/// away from zero; null where the count is 0 or the sum null. A mean past `out`'s precision is
/// an error, as DataFusion's is.
fn means(counts: &UInt64Array, sums: &ArrayRef, out: &DataType) -> Result<ArrayRef> {
    let (_, scale) = parts(out);
    let sums = widened(sums)?;
    let mut rows = Vec::with_capacity(counts.len());
    for (count, sum) in counts.iter().zip(sums.iter()) {
        rows.push(match (count.filter(|&c| c > 0), sum) {
            (Some(count), Some(sum)) => Some(mean(sum, sums.scale(), count, out)?),
            _ => None,
        });
    }
    let wide = Decimal256Array::from(rows).with_precision_and_scale(DECIMAL256_MAX_PRECISION, scale)?;
    Ok(cast_with_options(&wide, out, &CastOptions { safe: false, ..Default::default() })?)
}

/// `sum` (of scale `sum_scale`) over `count` (more than 0), in `out`, rounded half away from
/// zero; past `out`'s precision an error, as DataFusion's is.
fn mean(sum: i256, sum_scale: i8, count: u64, out: &DataType) -> Result<i256> {
    let (precision, scale) = parts(out);
    let Ok(shift) = u32::try_from(scale - sum_scale) else {
        return exec_err!("avg of scale {sum_scale} to a mean of scale {scale}");
    };
    let up = arrow::array::ArrowNativeTypeOp::pow_wrapping(i256::from_i128(10), shift);
    let count = i256::from_i128(i128::from(count));
    let overflow = || exec_err!("avg overflows its type {out}");
    let Some(value) = sum.checked_mul(up) else { return overflow() };
    let (quotient, rest) = (value.wrapping_div(count), value.wrapping_rem(count));
    let mean = match rest.wrapping_abs().wrapping_mul(i256::from_i128(2)) >= count {
        true if value < i256::ZERO => quotient.wrapping_sub(i256::ONE),
        true => quotient.wrapping_add(i256::ONE),
        false => quotient,
    };
    match Decimal256Type::validate_decimal_precision(mean, precision, scale) {
        Ok(()) => Ok(mean),
        Err(_) => overflow(),
    }
}

/// A decimal scalar's value, widened, and its scale (`None`: null or not a decimal).
fn decimal(v: &ScalarValue) -> Option<(i256, i8)> {
    match v {
        ScalarValue::Decimal32(Some(x), _, s) => Some((i256::from_i128(i128::from(*x)), *s)),
        ScalarValue::Decimal64(Some(x), _, s) => Some((i256::from_i128(i128::from(*x)), *s)),
        ScalarValue::Decimal128(Some(x), _, s) => Some((i256::from_i128(*x), *s)),
        ScalarValue::Decimal256(Some(x), _, s) => Some((*x, *s)),
        _ => None,
    }
}

/// A mean from an accumulator's state: `[count, sum]`, or `[distinct values]`. The first is
/// taken at every row of a window: computed on the scalars, with no arrays.
fn mean_of_state(state: &[ScalarValue], out: &DataType) -> Result<ScalarValue> {
    if let [ScalarValue::UInt64(count), sum] = state {
        let (p, s) = parts(out);
        let m = match (count.filter(|&c| c > 0), decimal(sum)) {
            (Some(count), Some((sum, scale))) => Some(mean(sum, scale, count, out)?),
            _ => None,
        };
        // Within `out`'s precision (checked), so it fits `out`'s width.
        return Ok(match out {
            DataType::Decimal32(..) => ScalarValue::Decimal32(m.map(|m| m.as_i128() as i32), p, s),
            DataType::Decimal64(..) => ScalarValue::Decimal64(m.map(|m| m.as_i128() as i64), p, s),
            DataType::Decimal128(..) => ScalarValue::Decimal128(m.map(|m| m.as_i128()), p, s),
            _ => ScalarValue::Decimal256(m, p, s),
        });
    }
    let (counts, sums) = match state {
        [ScalarValue::List(list)] => {
            let values = widened(&list.value(0))?;
            let count = (values.len() - values.null_count()) as u64;
            let Some(sum) = aggregate::sum_checked(&values)? else {
                return ScalarValue::try_from(out);
            };
            let sum =
                Decimal256Array::from(vec![sum]).with_precision_and_scale(DECIMAL256_MAX_PRECISION, values.scale())?;
            (UInt64Array::from(vec![count]), Arc::new(sum) as ArrayRef)
        }
        _ => return exec_err!("avg's state has {} values", state.len()),
    };
    ScalarValue::try_from_array(&means(&counts, &sums, out)?, 0)
}

/// DataFusion's `avg` accumulator of a decimal (plain, distinct or over a window), rounding.
#[derive(Debug)]
pub struct Rounded {
    inner: Box<dyn Accumulator>,
    out: DataType,
}

impl Rounded {
    pub fn new(inner: Box<dyn Accumulator>, out: DataType) -> Self {
        Self { inner, out }
    }
}

impl Accumulator for Rounded {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        self.inner.update_batch(values)
    }
    fn evaluate(&mut self) -> Result<ScalarValue> {
        mean_of_state(&self.inner.state()?, &self.out)
    }
    fn size(&self) -> usize {
        self.inner.size()
    }
    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        self.inner.state()
    }
    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        self.inner.merge_batch(states)
    }
    fn retract_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        self.inner.retract_batch(values)
    }
    fn supports_retract_batch(&self) -> bool {
        self.inner.supports_retract_batch()
    }
}

/// DataFusion's grouped `avg` accumulator of a decimal, rounding.
pub struct RoundedGroups {
    inner: Box<dyn GroupsAccumulator>,
    out: DataType,
}

impl RoundedGroups {
    pub fn new(inner: Box<dyn GroupsAccumulator>, out: DataType) -> Self {
        Self { inner, out }
    }
}

impl GroupsAccumulator for RoundedGroups {
    fn update_batch(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        opt_filter: Option<&BooleanArray>,
        total_num_groups: usize,
    ) -> Result<()> {
        self.inner.update_batch(values, group_indices, opt_filter, total_num_groups)
    }
    fn evaluate(&mut self, emit_to: EmitTo) -> Result<ArrayRef> {
        let state = self.inner.state(emit_to)?;
        let [counts, sums] = state.as_slice() else {
            return exec_err!("avg's grouped state has {} arrays", state.len());
        };
        means(counts.as_primitive(), sums, &self.out)
    }
    fn state(&mut self, emit_to: EmitTo) -> Result<Vec<ArrayRef>> {
        self.inner.state(emit_to)
    }
    fn merge_batch(&mut self, values: &[ArrayRef], group_indices: &[usize], total_num_groups: usize) -> Result<()> {
        self.inner.merge_batch(values, group_indices, total_num_groups)
    }
    fn convert_to_state(&self, values: &[ArrayRef], opt_filter: Option<&BooleanArray>) -> Result<Vec<ArrayRef>> {
        self.inner.convert_to_state(values, opt_filter)
    }
    fn size(&self) -> usize {
        self.inner.size()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mean(sum: i128, count: u64, sum_scale: i8, out: DataType) -> Option<i128> {
        let sums: ArrayRef =
            Arc::new(arrow::array::Decimal128Array::from(vec![sum]).with_precision_and_scale(38, sum_scale).unwrap());
        let m = means(&UInt64Array::from(vec![count]), &sums, &out).unwrap();
        let m = m.as_primitive::<arrow::datatypes::Decimal128Type>();
        m.is_valid(0).then(|| m.value(0))
    }

    #[test]
    fn a_decimal_mean_rounds_half_away_from_zero() {
        let out = DataType::Decimal128(16, 6);
        // 0.02 / 3 = 0.0066666…: DataFusion's own gives 0.006666.
        assert_eq!(mean(2, 3, 2, out.clone()), Some(6667));
        assert_eq!(mean(-2, 3, 2, out.clone()), Some(-6667));
        // 0.01 / 3 = 0.003333…: down.
        assert_eq!(mean(1, 3, 2, out.clone()), Some(3333));
        // A tie, 0.0000005 at scale 6 (0.000001 / 2 at a sum of scale 6): away from zero.
        assert_eq!(mean(1, 2, 6, out.clone()), Some(1));
        assert_eq!(mean(-1, 2, 6, out.clone()), Some(-1));
        assert_eq!(mean(3, 2, 6, out.clone()), Some(2));
        // Exact means stay exact; no rows is null.
        assert_eq!(mean(300, 3, 2, out.clone()), Some(1_000_000));
        assert_eq!(mean(5, 0, 2, out), None);
    }

    #[test]
    fn a_mean_past_its_precision_is_an_error() {
        let sums: ArrayRef = Arc::new(
            arrow::array::Decimal128Array::from(vec![10i128.pow(20)]).with_precision_and_scale(38, 0).unwrap(),
        );
        let e = means(&UInt64Array::from(vec![1]), &sums, &DataType::Decimal128(22, 4)).unwrap_err();
        assert!(e.to_string().contains("avg overflows its type"), "{e}");
    }
}
