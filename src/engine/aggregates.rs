//! DataFusion's aggregate functions with lakeswap's own grouped accumulators, where
//! DataFusion's gives a different or a slow answer.
//!
//! - **`min` and `max` of floats, as SQL computes them.** DataFusion's grouped `min` and `max`
//!   of a float keep a NaN and then whatever value comes after it (`max` of 1.0, NaN, 2.0 in
//!   one group was 2.0, and so was its `min`), where its own ungrouped aggregate, DuckDB and
//!   PostgreSQL take a NaN as larger than every number. Here the grouped accumulator is left
//!   out for floats: a group's float values then go through the ungrouped one, which orders
//!   them as SQL does.
//! - **`count(DISTINCT x)` of text or bytes**, grouped, by [`distinct::DistinctBytes`]
//!   instead of one ungrouped accumulator per group. Same counts, faster.
//! - **`avg` of decimals rounded**, by [`mean::Rounded`] and [`mean::RoundedGroups`] around
//!   DataFusion's, which cut the mean toward zero.
//!
//! Everything else is DataFusion's function, unchanged.

use arrow::datatypes::{DataType, FieldRef};
use datafusion::common::{Result, ScalarValue};
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::utils::AggregateOrderSensitivity;
use datafusion::logical_expr::{
    Accumulator, AggregateUDF, AggregateUDFImpl, Documentation, GroupsAccumulator, ReversedUDAF, SetMonotonicity,
    Signature, StatisticsArgs,
};

use super::{distinct, mean};

/// Which accumulator lakeswap chooses in place of DataFusion's.
#[derive(Debug, PartialEq, Eq, Hash)]
enum Grouped {
    /// No grouped one for floats (`min`, `max`).
    NotForFloats,
    /// [`distinct::DistinctBytes`] for a distinct count of text or bytes (`count`).
    DistinctBytes,
    /// DataFusion's, rounding a decimal mean (`avg`).
    RoundsDecimals,
}

/// One of DataFusion's aggregate functions, with its grouped accumulator chosen by `grouped`.
#[derive(Debug, PartialEq, Eq, Hash)]
struct Own {
    inner: AggregateUDF,
    grouped: Grouped,
}

impl Own {
    /// Whether this call is a decimal mean that lakeswap rounds.
    fn rounds(&self, args: &AccumulatorArgs) -> bool {
        self.grouped == Grouped::RoundsDecimals && mean::rounds(args.return_type())
    }

    /// Whether lakeswap's distinct count takes this call.
    fn distinct_bytes(&self, args: &AccumulatorArgs) -> bool {
        self.grouped == Grouped::DistinctBytes
            && args.is_distinct
            && args.exprs.len() == 1
            && distinct::counts(args.expr_fields[0].data_type())
    }
}

/// `min`, `max`, `count` and `avg`, in place of DataFusion's.
pub fn own() -> [AggregateUDF; 4] {
    use datafusion::functions_aggregate::average::avg_udaf;
    use datafusion::functions_aggregate::count::count_udaf;
    use datafusion::functions_aggregate::min_max::{max_udaf, min_udaf};
    [
        (min_udaf(), Grouped::NotForFloats),
        (max_udaf(), Grouped::NotForFloats),
        (count_udaf(), Grouped::DistinctBytes),
        (avg_udaf(), Grouped::RoundsDecimals),
    ]
    .map(|(f, grouped)| AggregateUDF::new_from_impl(Own { inner: f.as_ref().clone(), grouped }))
}

impl AggregateUDFImpl for Own {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn aliases(&self) -> &[String] {
        self.inner.aliases()
    }
    fn signature(&self) -> &Signature {
        self.inner.signature()
    }
    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        self.inner.return_type(arg_types)
    }
    fn return_field(&self, arg_fields: &[FieldRef]) -> Result<FieldRef> {
        self.inner.return_field(arg_fields)
    }
    fn is_nullable(&self) -> bool {
        self.inner.is_nullable()
    }
    fn accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        match self.rounds(&args) {
            true => Ok(Box::new(mean::Rounded::new(self.inner.accumulator(args.clone())?, args.return_type().clone()))),
            false => self.inner.accumulator(args),
        }
    }
    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        self.inner.state_fields(args)
    }
    fn groups_accumulator_supported(&self, args: AccumulatorArgs) -> bool {
        match self.grouped {
            Grouped::NotForFloats => {
                !args.return_field.data_type().is_floating() && self.inner.groups_accumulator_supported(args)
            }
            Grouped::DistinctBytes => self.distinct_bytes(&args) || self.inner.groups_accumulator_supported(args),
            Grouped::RoundsDecimals => self.inner.groups_accumulator_supported(args),
        }
    }
    fn create_groups_accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn GroupsAccumulator>> {
        if self.distinct_bytes(&args) {
            return Ok(Box::new(distinct::DistinctBytes::new(args.expr_fields[0].data_type().clone())));
        }
        match self.rounds(&args) {
            true => Ok(Box::new(mean::RoundedGroups::new(
                self.inner.create_groups_accumulator(args.clone())?,
                args.return_type().clone(),
            ))),
            false => self.inner.create_groups_accumulator(args),
        }
    }
    fn create_sliding_accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        match self.rounds(&args) {
            true => Ok(Box::new(mean::Rounded::new(
                self.inner.create_sliding_accumulator(args.clone())?,
                args.return_type().clone(),
            ))),
            false => self.inner.create_sliding_accumulator(args),
        }
    }
    fn order_sensitivity(&self) -> AggregateOrderSensitivity {
        self.inner.inner().order_sensitivity()
    }
    fn reverse_expr(&self) -> ReversedUDAF {
        self.inner.reverse_udf()
    }
    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        self.inner.coerce_types(arg_types)
    }
    fn is_descending(&self) -> Option<bool> {
        self.inner.is_descending()
    }
    fn value_from_stats(&self, args: &StatisticsArgs) -> Option<ScalarValue> {
        self.inner.value_from_stats(args)
    }
    fn default_value(&self, data_type: &DataType) -> Result<ScalarValue> {
        self.inner.default_value(data_type)
    }
    fn documentation(&self) -> Option<&Documentation> {
        self.inner.documentation()
    }
    fn set_monotonicity(&self, data_type: &DataType) -> SetMonotonicity {
        self.inner.inner().set_monotonicity(data_type)
    }
}
