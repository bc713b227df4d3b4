//! Expressions DataFusion computes otherwise than SQL does, refused before anything runs
//! (G8): a user who writes them means SQL's result, and would get another with exit 0.

use arrow::datatypes::DataType;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::common::{plan_err, DFSchema, Result};
use datafusion::logical_expr::{Expr, ExprSchemable, LogicalPlan};
use datafusion::optimizer::AnalyzerRule;

/// The analyzer rule (see the module documentation); it runs after type coercion.
#[derive(Debug, Default)]
pub struct UnlikeSql;

impl AnalyzerRule for UnlikeSql {
    fn analyze(&self, plan: LogicalPlan, _: &ConfigOptions) -> Result<LogicalPlan> {
        plan.apply_with_subqueries(|p| {
            let schema = super::input_schema(p);
            p.apply_expressions(|e| e.apply(|x| refuse(x, &schema).map(|_| TreeNodeRecursion::Continue)))
        })?;
        Ok(plan)
    }

    fn name(&self) -> &str {
        "lakeswap_unlike_sql"
    }
}

fn refuse(x: &Expr, schema: &DFSchema) -> Result<()> {
    match x {
        // DataFusion runs the pattern as an unanchored regular expression: `%` and `_` are no
        // wildcards, and `'abc' SIMILAR TO 'b'` is true.
        Expr::SimilarTo(_) => plan_err!(
            "`SIMILAR TO` is not computed as SQL says here (the engine matches the pattern as a regular \
             expression anywhere in the text, without the % and _ wildcards); write LIKE, or a regular \
             expression anchored at both ends: col ~ '^a.*$'"
        ),
        // A field of a duration: DataFusion counts the whole duration in that unit (`7199`
        // seconds for 1:59:59) where SQL gives the field (`59`), as DataFusion itself does for
        // an interval. `epoch` (the duration in seconds) is SQL's.
        Expr::ScalarFunction(f) if f.func.name() == "date_part" => {
            let [part, of] = f.args.as_slice() else { return Ok(()) };
            if !matches!(of.get_type(schema)?, DataType::Duration(_)) {
                return Ok(());
            }
            let part = match part {
                Expr::Literal(v, _) => v.try_as_str().flatten().map(|s| s.to_ascii_lowercase()),
                _ => None,
            };
            match part.as_deref() {
                Some("epoch") => Ok(()),
                _ => plan_err!(
                    "`{x}` takes a field of a duration (a timestamp minus a timestamp), which the engine counts \
                     as the whole duration in that unit (7199 seconds for 1:59:59) where SQL gives the field \
                     (59); write date_part('epoch', …) for the duration in seconds, and divide it"
                ),
            }
        }
        _ => Ok(()),
    }
}

/// An analyzer rule run before type coercion: a number written with an exponent (`1e8`), which
/// the parser reads as a decimal of negative scale, is that decimal at scale 0
/// (`decimal(9,0)`). Parquet has no negative scale, and other readers do not know one.
#[derive(Debug, Default)]
pub struct WholeDecimals;

impl AnalyzerRule for WholeDecimals {
    fn analyze(&self, plan: LogicalPlan, _: &ConfigOptions) -> Result<LogicalPlan> {
        use datafusion::common::tree_node::Transformed;
        use datafusion::common::ScalarValue;
        super::rewrite_exprs(plan, |x, _| match x {
            Expr::Literal(ScalarValue::Decimal128(Some(v), p, s), m) if s < 0 => {
                let digits = p as i32 - s as i32;
                let whole = 10i128.checked_pow(-s as u32).and_then(|f| v.checked_mul(f));
                match whole {
                    Some(w) if digits <= 38 => {
                        Ok(Transformed::yes(Expr::Literal(ScalarValue::Decimal128(Some(w), digits as u8, 0), m)))
                    }
                    _ => plan_err!(
                        "the number {v}e{} has more than 38 digits; write it as a double: CAST('…' AS DOUBLE)",
                        -s
                    ),
                }
            }
            x => Ok(Transformed::no(x)),
        })
    }

    fn name(&self) -> &str {
        "lakeswap_whole_decimals"
    }
}

/// An analyzer rule run before type coercion: a division whose result would be a decimal (a
/// decimal or an integer divided by a decimal, `count(*) / 1e6`, `100.0 * a / b`) is computed
/// in double, as DuckDB computes it. DataFusion gives the quotient its dividend's scale plus 4 and cuts the
/// rest (`count(*) / 1e9` was `0.0000`, `1 / 3.0` was `0.3333`).
#[derive(Debug, Default)]
pub struct DoubleQuotients;

impl AnalyzerRule for DoubleQuotients {
    fn analyze(&self, plan: LogicalPlan, _: &ConfigOptions) -> Result<LogicalPlan> {
        use datafusion::common::tree_node::Transformed;
        use datafusion::logical_expr::{cast, BinaryExpr, Operator};
        super::rewrite_exprs(plan, |x, schema| match &x {
            Expr::BinaryExpr(b) if b.op == Operator::Divide && decimal_quotient(b, schema) => {
                let double = |e: &Expr| Box::new(cast(e.clone(), DataType::Float64));
                Ok(Transformed::yes(Expr::BinaryExpr(BinaryExpr::new(
                    double(&b.left),
                    Operator::Divide,
                    double(&b.right),
                ))))
            }
            _ => Ok(Transformed::no(x)),
        })
    }

    fn name(&self) -> &str {
        "lakeswap_double_quotients"
    }
}

/// Whether a division's operands make its quotient a decimal: one is a decimal, and neither is
/// a float (types as far as they can be told before type coercion).
fn decimal_quotient(b: &datafusion::logical_expr::BinaryExpr, schema: &DFSchema) -> bool {
    let (Ok(l), Ok(r)) = (b.left.get_type(schema), b.right.get_type(schema)) else { return false };
    let decimal = |t: &DataType| matches!(t, DataType::Decimal128(..) | DataType::Decimal256(..));
    (decimal(&l) || decimal(&r)) && !l.is_floating() && !r.is_floating()
}
