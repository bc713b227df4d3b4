//! `min` and `max` of floats as SQL computes them.
//!
//! DataFusion's grouped `min` and `max` of a float keep a NaN and then whatever value comes
//! after it (`max` of 1.0, NaN, 2.0 in one group was 2.0, and so was its `min`), where its own
//! ungrouped aggregate, DuckDB and PostgreSQL take a NaN as larger than every number. The
//! functions here are DataFusion's, with the grouped accumulator left out for floats: a group's
//! float values then go through the ungrouped one, which orders them as SQL does.

use arrow::datatypes::{DataType, FieldRef};
use datafusion::common::{Result, ScalarValue};
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::utils::AggregateOrderSensitivity;
use datafusion::logical_expr::{
    Accumulator, AggregateUDF, AggregateUDFImpl, Documentation, GroupsAccumulator, ReversedUDAF, SetMonotonicity,
    Signature, StatisticsArgs,
};

/// `min` or `max` (see the module documentation).
#[derive(Debug, PartialEq, Eq, Hash)]
struct NanLargest(AggregateUDF);

/// `min` and `max`, in place of DataFusion's.
pub fn min_max() -> [AggregateUDF; 2] {
    use datafusion::functions_aggregate::min_max::{max_udaf, min_udaf};
    [min_udaf(), max_udaf()].map(|f| AggregateUDF::new_from_impl(NanLargest(f.as_ref().clone())))
}

impl AggregateUDFImpl for NanLargest {
    fn name(&self) -> &str {
        self.0.name()
    }
    fn aliases(&self) -> &[String] {
        self.0.aliases()
    }
    fn signature(&self) -> &Signature {
        self.0.signature()
    }
    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        self.0.return_type(arg_types)
    }
    fn return_field(&self, arg_fields: &[FieldRef]) -> Result<FieldRef> {
        self.0.return_field(arg_fields)
    }
    fn is_nullable(&self) -> bool {
        self.0.is_nullable()
    }
    fn accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        self.0.accumulator(args)
    }
    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        self.0.state_fields(args)
    }
    fn groups_accumulator_supported(&self, args: AccumulatorArgs) -> bool {
        !args.return_field.data_type().is_floating() && self.0.groups_accumulator_supported(args)
    }
    fn create_groups_accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn GroupsAccumulator>> {
        self.0.create_groups_accumulator(args)
    }
    fn create_sliding_accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        self.0.create_sliding_accumulator(args)
    }
    fn order_sensitivity(&self) -> AggregateOrderSensitivity {
        self.0.inner().order_sensitivity()
    }
    fn reverse_expr(&self) -> ReversedUDAF {
        self.0.reverse_udf()
    }
    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        self.0.coerce_types(arg_types)
    }
    fn is_descending(&self) -> Option<bool> {
        self.0.is_descending()
    }
    fn value_from_stats(&self, args: &StatisticsArgs) -> Option<ScalarValue> {
        self.0.value_from_stats(args)
    }
    fn default_value(&self, data_type: &DataType) -> Result<ScalarValue> {
        self.0.default_value(data_type)
    }
    fn documentation(&self) -> Option<&Documentation> {
        self.0.documentation()
    }
    fn set_monotonicity(&self, data_type: &DataType) -> SetMonotonicity {
        self.0.inner().set_monotonicity(data_type)
    }
}
