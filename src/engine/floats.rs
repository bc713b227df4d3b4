//! One zero and one NaN wherever the engine tells values apart. SQL has `-0.0 = 0.0`, and
//! DuckDB and PostgreSQL hold every NaN equal; DataFusion hashes a float's bits where it groups,
//! so a computed `-0.0` and `0.0` (`round(-0.3)` beside `round(0.3)`), or two NaNs of other
//! bits, were two groups, two distinct values of `count(DISTINCT …)`, two rows of a `SELECT
//! DISTINCT`, and did not join. Input columns already hold one zero and one NaN (prepare); this
//! analyzer rule gives computed floats the same where values are grouped or matched: the
//! group keys of an aggregate, the arguments of a distinct aggregate, the partition keys of a
//! window, the rows of a `DISTINCT` (and so of `UNION`), the keys of a `DISTINCT ON`, and the
//! keys of a join (and so of `INTERSECT` and `EXCEPT`).
//!
//! Every float the query computes has them too ([`OneZeroOneNan`]): the engine compares floats
//! by IEEE's total order, where `-0.0 < 0.0` and a NaN with its sign bit set (`inf - inf`,
//! `-x` of a NaN on x86) is below every number. Such a NaN was the `min` and passed `x < 0`,
//! and `-0.0` missed `IN (0.0)`, `CASE x WHEN 0.0` and `nullif(x, 0.0)`. With one zero and one
//! NaN the total order is SQL's as DuckDB and PostgreSQL have it: `-0.0 = 0.0`, `NaN = NaN`,
//! and a NaN above every number.

use std::sync::Arc;

use arrow::datatypes::DataType;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{Column, DFSchema, Result, ScalarValue};
use datafusion::logical_expr::expr::{AggregateFunction, GroupingSet, ScalarFunction, WindowFunction};
use datafusion::logical_expr::expr_rewriter::NamePreserver;
use datafusion::logical_expr::{
    ColumnarValue, Distinct, DistinctOn, Expr, ExprSchemable, LogicalPlan, Projection, ScalarFunctionArgs, ScalarUDF,
    ScalarUDFImpl, Signature, Volatility,
};
use datafusion::optimizer::AnalyzerRule;

/// The function giving a float one zero and one NaN (it cannot fail).
pub(super) const NAME: &str = "one_zero_one_nan";

/// A float with one zero and one NaN; other types as they are.
#[derive(Debug, PartialEq, Eq, Hash)]
struct OneZeroOneNanFn {
    signature: Signature,
}

impl ScalarUDFImpl for OneZeroOneNanFn {
    fn name(&self) -> &str {
        NAME
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, args: &[DataType]) -> Result<DataType> {
        Ok(args[0].clone())
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        Ok(match &args.args[0] {
            ColumnarValue::Array(a) => ColumnarValue::Array(crate::prepare::one_zero_one_nan(a)),
            ColumnarValue::Scalar(s) => {
                let a = crate::prepare::one_zero_one_nan(&s.to_array()?);
                ColumnarValue::Scalar(ScalarValue::try_from_array(&a, 0)?)
            }
        })
    }
}

fn is_float(t: &DataType) -> bool {
    matches!(t, DataType::Float32 | DataType::Float64)
}

/// `e` with one zero and one NaN, when it is a float (and not already).
fn one_zero(e: Expr, schema: &DFSchema) -> Expr {
    let done = matches!(&e, Expr::ScalarFunction(f) if f.func.name() == NAME);
    if done || !e.get_type(schema).is_ok_and(|t| is_float(&t)) {
        return e;
    }
    let f = OneZeroOneNanFn { signature: Signature::any(1, Volatility::Immutable) };
    Expr::ScalarFunction(ScalarFunction::new_udf(Arc::new(ScalarUDF::from(f)), vec![e]))
}

/// The analyzer rule (see the module documentation); it runs after type coercion.
#[derive(Debug, Default)]
pub struct OneZeroOneNan;

impl AnalyzerRule for OneZeroOneNan {
    fn analyze(&self, plan: LogicalPlan, _: &ConfigOptions) -> Result<LogicalPlan> {
        // Every float computed by an expression, then by an aggregate or a window function.
        let plan = super::rewrite_exprs(plan, computed)?;
        let plan = plan.transform_up_with_subqueries(outputs)?.data;
        plan.transform_up_with_subqueries(node).map(|t| t.data)
    }

    fn name(&self) -> &str {
        "lakeswap_one_zero_one_nan"
    }
}

/// A float an expression computes, with one zero and one NaN: literals made so (a literal
/// stays one: some arguments must be), other expressions wrapped. Columns are left as they
/// are (the input's floats and the nodes' outputs have them), and so are aggregate and window
/// functions ([`outputs`]).
fn computed(e: Expr, schema: &DFSchema) -> Result<Transformed<Expr>> {
    Ok(match e {
        Expr::Literal(v, m) if is_float(&v.data_type()) => {
            let one = ScalarValue::try_from_array(&crate::prepare::one_zero_one_nan(&v.to_array()?), 0)?;
            // Equal by their bits.
            let changed = one != v;
            Transformed::new_transformed(Expr::Literal(one, m), changed)
        }
        Expr::Literal(..)
        | Expr::Column(_)
        | Expr::OuterReferenceColumn(..)
        | Expr::Alias(_)
        | Expr::AggregateFunction(_)
        | Expr::WindowFunction(_)
        | Expr::GroupingSet(_)
        | Expr::Placeholder(_)
        | Expr::ScalarSubquery(_) => Transformed::no(e),
        e => {
            let new = one_zero(e.clone(), schema);
            let changed = new != e;
            Transformed::new_transformed(new, changed)
        }
    })
}

/// An aggregate or a window node whose functions give floats, under a projection that gives
/// them one zero and one NaN (`sum` of `inf` and `-inf` is a NaN with its sign bit set on
/// x86), every name kept.
fn outputs(p: LogicalPlan) -> Result<Transformed<LogicalPlan>> {
    // `HAVING` over the aggregate: the filter stays on the aggregate (a correlated subquery's
    // must, for the engine to see it returns one row), its outputs given one zero and one NaN
    // where it reads them, and the projection above it.
    if let LogicalPlan::Filter(f) = &p {
        if let LogicalPlan::Projection(proj) = f.input.as_ref() {
            if matches!(proj.input.as_ref(), LogicalPlan::Aggregate(_)) && ours(proj) {
                let schema = proj.input.schema().clone();
                let wrapped: Vec<Column> = proj
                    .expr
                    .iter()
                    .zip(schema.iter())
                    .filter(|(e, _)| !matches!(e, Expr::Column(_)))
                    .map(|(_, (q, f))| Column::from((q, f)))
                    .collect();
                let predicate = f.predicate.clone().transform_up(|e| match e {
                    Expr::Column(c) if wrapped.contains(&c) => Ok(Transformed::yes(one_zero(Expr::Column(c), &schema))),
                    e => Ok(Transformed::no(e)),
                })?;
                let filter = datafusion::logical_expr::Filter::try_new(predicate.data, proj.input.clone())?;
                let above = Projection::try_new(proj.expr.clone(), Arc::new(LogicalPlan::Filter(filter)))?;
                return Ok(Transformed::yes(LogicalPlan::Projection(above)));
            }
        }
    }
    let computed_from = match &p {
        LogicalPlan::Aggregate(a) => a.schema.fields().len() - a.aggr_expr.len(),
        LogicalPlan::Window(w) => w.input.schema().fields().len(),
        _ => return Ok(Transformed::no(p)),
    };
    let schema = p.schema().clone();
    if !schema.fields().iter().skip(computed_from).any(|f| is_float(f.data_type())) {
        return Ok(Transformed::no(p));
    }
    let over = super::columns_over(p, |i, column, f| match i >= computed_from && is_float(f.data_type()) {
        true => one_zero(column, &schema),
        false => column,
    })?;
    Ok(Transformed::yes(over))
}

/// Whether `p` is a projection [`outputs`] put over an aggregate: columns, and columns given
/// one zero and one NaN under their own names.
fn ours(p: &Projection) -> bool {
    p.expr.iter().all(|e| match e {
        Expr::Column(_) => true,
        Expr::Alias(a) => matches!(a.expr.as_ref(), Expr::ScalarFunction(f)
            if f.func.name() == NAME && matches!(f.args.as_slice(), [Expr::Column(c)] if c.name == a.name)),
        _ => false,
    })
}

fn node(p: LogicalPlan) -> Result<Transformed<LogicalPlan>> {
    match p {
        LogicalPlan::Aggregate(_) | LogicalPlan::Window(_) => {
            let schema = super::input_schema(&p);
            let names = NamePreserver::new(&p);
            let t = p.map_expressions(|e| {
                let name = names.save(&e);
                let new = top(e.clone(), &schema);
                Ok(match new != e {
                    true => Transformed::yes(name.restore(new)),
                    false => Transformed::no(e),
                })
            })?;
            match t.transformed {
                true => Ok(Transformed::yes(t.data.recompute_schema()?)),
                false => Ok(t),
            }
        }
        LogicalPlan::Distinct(Distinct::All(input))
            if input.schema().fields().iter().any(|f| is_float(f.data_type())) =>
        {
            let schema = input.schema().clone();
            let projection =
                super::columns_over(Arc::unwrap_or_clone(input), |_, column, f| match is_float(f.data_type()) {
                    true => one_zero(column, &schema),
                    false => column,
                })?;
            Ok(Transformed::yes(LogicalPlan::Distinct(Distinct::All(Arc::new(projection)))))
        }
        LogicalPlan::Distinct(Distinct::On(d)) => {
            // The `ON` keys, and the leading `ORDER BY` keys that must match them.
            let schema = d.input.schema().clone();
            let on: Vec<Expr> = d.on_expr.iter().map(|e| one_zero(e.clone(), &schema)).collect();
            if on == d.on_expr {
                return Ok(Transformed::no(LogicalPlan::Distinct(Distinct::On(d))));
            }
            let sort = d.sort_expr.map(|sorts| {
                let n = on.len();
                sorts
                    .into_iter()
                    .enumerate()
                    .map(|(i, mut s)| {
                        if i < n {
                            s.expr = one_zero(s.expr, &schema);
                        }
                        s
                    })
                    .collect()
            });
            let d = DistinctOn::try_new(on, d.select_expr, sort, d.input)?;
            Ok(Transformed::yes(LogicalPlan::Distinct(Distinct::On(d))))
        }
        LogicalPlan::Join(mut j) => {
            let (left, right) = (j.left.schema().clone(), j.right.schema().clone());
            let mut changed = false;
            for (l, r) in j.on.iter_mut() {
                let float =
                    l.get_type(&left).is_ok_and(|t| is_float(&t)) || r.get_type(&right).is_ok_and(|t| is_float(&t));
                if float {
                    *l = one_zero(l.clone(), &left);
                    *r = one_zero(r.clone(), &right);
                    changed = true;
                }
            }
            Ok(Transformed::new_transformed(LogicalPlan::Join(j), changed))
        }
        p => Ok(Transformed::no(p)),
    }
}

/// An expression of an aggregate or window node: a distinct aggregate's arguments, a window's
/// partition keys, a group key (a grouping set's members).
fn top(e: Expr, schema: &DFSchema) -> Expr {
    match e {
        Expr::Alias(mut al) => {
            al.expr = Box::new(top(*al.expr, schema));
            Expr::Alias(al)
        }
        Expr::AggregateFunction(mut f) => {
            if f.params.distinct || f.func.name() == "approx_distinct" {
                f.params.args = f.params.args.into_iter().map(|a| one_zero(a, schema)).collect();
            }
            Expr::AggregateFunction(AggregateFunction { func: f.func, params: f.params })
        }
        Expr::WindowFunction(w) => {
            let mut w: WindowFunction = *w;
            w.params.partition_by = w.params.partition_by.into_iter().map(|a| one_zero(a, schema)).collect();
            Expr::WindowFunction(Box::new(w))
        }
        Expr::GroupingSet(gs) => {
            // A column has one zero and one NaN already (the input's, or a node's output); an
            // alias of its own would lose its qualifier (`events.x`).
            let member = |e: Expr| {
                let name = e.schema_name().to_string();
                let new = match &e {
                    Expr::Column(_) => e.clone(),
                    _ => one_zero(e.clone(), schema),
                };
                if new == e {
                    e
                } else {
                    new.alias(name)
                }
            };
            Expr::GroupingSet(match gs {
                GroupingSet::Rollup(v) => GroupingSet::Rollup(v.into_iter().map(member).collect()),
                GroupingSet::Cube(v) => GroupingSet::Cube(v.into_iter().map(member).collect()),
                GroupingSet::GroupingSets(v) => {
                    GroupingSet::GroupingSets(v.into_iter().map(|s| s.into_iter().map(member).collect()).collect())
                }
            })
        }
        e => one_zero(e, schema),
    }
}
