//! Sums that cannot wrap. DataFusion adds an int64 `sum` in int64 and a decimal one in 128
//! bits, wrapping past either: a total past int64, or past 10^38 for a decimal(38), came out as
//! a wrong (often negative) number with exit 0. This analyzer rule runs after type coercion
//! and has every `sum` and `avg` that could wrap add in a type it cannot leave — decimal(38,0)
//! for integers, decimal(76,s) for decimals of more than 28 digits — and then casts the result
//! back to the query's own type with a checked cast: a total that does not fit fails the date
//! (exit 3) instead of being written. A query's output types do not change.
//!
//! Window sums (`sum(x) OVER …`) are widened the same way. Integer `+`, `-`, `*`, `<<` and
//! negation wrap in DataFusion too (`x * y`, `sum(x) + sum(y)`, `1 << 63`): they are
//! computed in decimal(38,0), which holds any product or sum of two int64, and cast back
//! checked. Decimal `+`, `-`, `*` whose result DataFusion caps at decimal(38) are computed in
//! decimal(76) and cast back checked. A shift's count must be a constant within the integer's bits (DataFusion takes
//! it modulo the bits: `1 << 64` is 1).
//!
//! A partition holds fewer than 2^31 rows, so a sum of integers stays below 2^95 < 10^38 and
//! a sum of decimal(28) values below 10^38 (128 bits hold 1.7·10^38): those need nothing.

use std::sync::Arc;

use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{plan_err, Column, DFSchema, Result, ScalarValue};
use datafusion::logical_expr::expr::AggregateFunction;
use datafusion::logical_expr::expr_rewriter::NamePreserver;
use datafusion::logical_expr::{
    cast, Aggregate, BinaryExpr, Expr, ExprSchemable, LogicalPlan, Operator, Projection, Window,
    WindowFunctionDefinition,
};
use datafusion::optimizer::AnalyzerRule;

use arrow::datatypes::DataType;

/// The analyzer rule (see the module documentation).
#[derive(Debug, Default)]
pub struct ExactSums;

impl AnalyzerRule for ExactSums {
    fn analyze(&self, plan: LogicalPlan, _: &ConfigOptions) -> Result<LogicalPlan> {
        plan.transform_up_with_subqueries(|p| {
            let p = checked_arithmetic(p)?;
            let done = p.transformed;
            rewrite(p.data).map(|t| Transformed::new_transformed(t.data, t.transformed || done))
        })
        .map(|t| t.data)
    }

    fn name(&self) -> &str {
        "lakeswap_exact_sums"
    }
}

/// The type a `sum` or `avg` of `arg` adds in without wrapping, when its own could wrap.
fn wide(func: &str, arg: &Expr, input: &DFSchema) -> Result<Option<DataType>> {
    if func != "sum" && func != "avg" {
        return Ok(None);
    }
    let t = arg.get_type(input)?;
    Ok(match t {
        // An avg of integers adds in float64: it does not wrap.
        DataType::Int64 | DataType::UInt64 if func == "sum" => Some(DataType::Decimal128(38, 0)),
        // Integers the shorthand already widened: far from 10^38.
        DataType::Decimal128(_, 0) if is_cast_integer(arg, input) => None,
        DataType::Decimal128(p, s) if p > 28 => Some(DataType::Decimal256(76, s)),
        _ => None,
    })
}

fn is_cast_integer(arg: &Expr, input: &DFSchema) -> bool {
    match arg {
        Expr::Cast(c) => c.expr.get_type(input).is_ok_and(|t| t.is_integer()),
        _ => false,
    }
}

/// An aggregate (or a window) whose wrapping sums add in a wide type, under a projection that
/// casts them back (checked) to the types and names the plan above expects.
fn rewrite(p: LogicalPlan) -> Result<Transformed<LogicalPlan>> {
    // The functions, their input, and the place of the first one's column in the output:
    // after the group columns (with the grouping id of ROLLUP, CUBE and GROUPING SETS), or
    // after the input's columns.
    let (exprs, input, first) = match &p {
        LogicalPlan::Aggregate(a) => (&a.aggr_expr, a.input.clone(), a.schema.fields().len() - a.aggr_expr.len()),
        LogicalPlan::Window(w) => (&w.window_expr, w.input.clone(), w.input.schema().fields().len()),
        _ => return Ok(Transformed::no(p)),
    };
    let schema = p.schema().clone();
    let mut changed = vec![false; exprs.len()];
    let mut wide_exprs = Vec::with_capacity(exprs.len());
    for (i, e) in exprs.iter().enumerate() {
        let inner = match e {
            Expr::Alias(al) => al.expr.as_ref(),
            other => other,
        };
        let widened = widened(inner, input.schema())?.map(|w| w.alias(schema.field(first + i).name()));
        changed[i] = widened.is_some();
        wide_exprs.push(widened.unwrap_or_else(|| e.clone()));
    }
    if !changed.contains(&true) {
        return Ok(Transformed::no(p));
    }
    let wide = match &p {
        LogicalPlan::Aggregate(a) => {
            LogicalPlan::Aggregate(Aggregate::try_new(input, a.group_expr.clone(), wide_exprs)?)
        }
        _ => LogicalPlan::Window(Window::try_new(wide_exprs, input)?),
    };
    let back: Vec<Expr> = schema
        .iter()
        .zip(wide.schema().iter())
        .enumerate()
        .map(|(i, ((q, f), (wq, wf)))| {
            let column = Expr::Column(Column::from((wq, wf)));
            match i >= first && changed[i - first] {
                true => cast(column, f.data_type().clone()).alias_qualified(q.cloned(), f.name()),
                false => column,
            }
        })
        .collect();
    let projection = Projection::try_new_with_schema(back, Arc::new(wide), schema)?;
    Ok(Transformed::yes(LogicalPlan::Projection(projection)))
}

/// `e` adding in a type it cannot leave, if it is a `sum` or `avg` (an aggregate, or over a
/// window) that could wrap in its own.
fn widened(e: &Expr, input: &DFSchema) -> Result<Option<Expr>> {
    Ok(match e {
        Expr::AggregateFunction(f) if f.params.args.len() == 1 => {
            wide(f.func.name(), &f.params.args[0], input)?.map(|t| {
                let mut params = f.params.clone();
                params.args = vec![cast(params.args[0].clone(), t)];
                Expr::AggregateFunction(AggregateFunction { func: f.func.clone(), params })
            })
        }
        Expr::WindowFunction(w) if w.params.args.len() == 1 => match &w.fun {
            WindowFunctionDefinition::AggregateUDF(u) => wide(u.name(), &w.params.args[0], input)?.map(|t| {
                let mut w = w.as_ref().clone();
                w.params.args = vec![cast(w.params.args[0].clone(), t)];
                Expr::WindowFunction(Box::new(w))
            }),
            _ => None,
        },
        _ => None,
    })
}

/// A plan node whose integer `+`, `-`, `*` are computed in decimal(38,0) and cast back
/// checked. Expressions whose types cannot be told (a schema the node's inputs do not join
/// into) are left as they are.
fn checked_arithmetic(p: LogicalPlan) -> Result<Transformed<LogicalPlan>> {
    let schema = super::input_schema(&p);
    let names = NamePreserver::new(&p);
    p.map_expressions(|e| {
        let name = names.save(&e);
        e.transform_up(|e| {
            // An integer, or one type coercion made a decimal (uint64 beside int64 becomes
            // decimal(20,0), whose difference DataFusion types as (20,0) but computes as (21,0)).
            let integer = |e: &Expr| {
                e.get_type(&schema).is_ok_and(|t| t.is_integer())
                    || matches!(e, Expr::Cast(c) if matches!(c.field.data_type(), DataType::Decimal128(_, 0))
                        && c.expr.get_type(&schema).is_ok_and(|t| t.is_integer()))
            };
            let wide = DataType::Decimal128(38, 0);
            let Ok(t) = e.get_type(&schema) else { return Ok(Transformed::no(e)) };
            let op = match &e {
                Expr::BinaryExpr(b)
                    if matches!(b.op, Operator::BitwiseShiftLeft | Operator::BitwiseShiftRight) && integer(&b.left) =>
                {
                    let bits = t.primitive_width().map_or(64, |w| 8 * w as i64);
                    let Some(n) = shift_count(&b.right).filter(|n| (0..bits).contains(n)) else {
                        return plan_err!(
                            "`{e}`: DataFusion shifts by the count modulo the integer's {bits} bits (1 << {bits} is \
                             1), so a shift is taken only by a constant from 0 to {}; multiply or divide by a power \
                             of two instead",
                            bits - 1
                        );
                    };
                    if b.op == Operator::BitwiseShiftRight {
                        return Ok(Transformed::no(e));
                    }
                    // `x << n` is x · 2^n, computed wide and cast back checked.
                    let factor = Expr::Literal(ScalarValue::Decimal128(Some(1i128 << n), 38, 0), None);
                    Expr::BinaryExpr(BinaryExpr::new(
                        Box::new(cast(b.left.as_ref().clone(), wide.clone())),
                        Operator::Multiply,
                        Box::new(factor),
                    ))
                }
                // Integers on both sides (`date - date` is an integer too, of dates).
                Expr::BinaryExpr(b)
                    if matches!(b.op, Operator::Plus | Operator::Minus | Operator::Multiply)
                        && integer(&b.left)
                        && integer(&b.right) =>
                {
                    let (l, r) = (cast(b.left.as_ref().clone(), wide.clone()), cast(b.right.as_ref().clone(), wide));
                    Expr::BinaryExpr(BinaryExpr::new(Box::new(l), b.op, Box::new(r)))
                }
                Expr::Negative(x) if integer(x) => Expr::Negative(Box::new(cast(x.as_ref().clone(), wide))),
                // `round(d, n)` of a decimal: DataFusion types it by whether `n` is a literal,
                // and after type coercion it is a cast of one, so the plan's type and the
                // result's differ (every date failed). Cast to the plan's type.
                Expr::ScalarFunction(f)
                    if f.name() == "round"
                        && f.args.len() == 2
                        && matches!(t, DataType::Decimal128(..) | DataType::Decimal256(..)) =>
                {
                    e.clone()
                }
                // Decimals whose result DataFusion caps at 38 digits without checking it (two
                // decimal(38) added): computed in 76 digits, cast back checked.
                Expr::BinaryExpr(b)
                    if matches!(b.op, Operator::Plus | Operator::Minus | Operator::Multiply)
                        && matches!(t, DataType::Decimal128(38, _)) =>
                {
                    let widen = |x: &Expr| match x.get_type(&schema) {
                        Ok(DataType::Decimal128(_, s)) => Some(cast(x.clone(), DataType::Decimal256(76, s))),
                        _ => None,
                    };
                    let (Some(l), Some(r)) = (widen(&b.left), widen(&b.right)) else {
                        return Ok(Transformed::no(e));
                    };
                    Expr::BinaryExpr(BinaryExpr::new(Box::new(l), b.op, Box::new(r)))
                }
                _ => return Ok(Transformed::no(e)),
            };
            Ok(Transformed::yes(cast(op, t)))
        })
        .map(|t| t.update_data(|e| name.restore(e)))
    })
}

/// A shift's count, when it is a constant integer.
fn shift_count(e: &Expr) -> Option<i64> {
    match e {
        Expr::Cast(c) => shift_count(&c.expr),
        Expr::Literal(v, _) if v.data_type().is_integer() => match v.cast_to(&DataType::Int64).ok()? {
            ScalarValue::Int64(n) => n,
            _ => None,
        },
        _ => None,
    }
}
