//! Expressions DataFusion computes otherwise than SQL does, refused before anything runs
//! (G8): a user who writes them means SQL's result, and would get another with exit 0.

use std::fmt::Write as _;
use std::sync::Arc;

use arrow::datatypes::DataType;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::common::{plan_err, DFSchema, Result};
use datafusion::logical_expr::{Expr, ExprSchemable, LogicalPlan};
use datafusion::optimizer::AnalyzerRule;

/// What the parser reads otherwise than SQL means, refused from the query's text:
/// - `^`, a power in PostgreSQL and DuckDB, is a bitwise exclusive or here (`3 ^ 2` is 1);
/// - `a IS DISTINCT FROM b AND c` is parsed as `a IS DISTINCT FROM (b AND c)`;
/// - `count(DISTINCT *)` counts one constant (1 whatever the rows).
pub fn unlike_syntax(statement: &datafusion::sql::parser::Statement) -> Result<(), String> {
    use datafusion::sql::sqlparser::ast::{visit_expressions, BinaryOperator, Expr as Sql};
    use std::ops::ControlFlow;
    let datafusion::sql::parser::Statement::Statement(statement) = statement else { return Ok(()) };
    let found = visit_expressions(statement.as_ref(), |e| {
        let why = match e {
            Sql::BinaryOp { op: BinaryOperator::BitwiseXor | BinaryOperator::PGBitwiseXor, .. } => Some(format!(
                "`{e}`: `^` is a bitwise exclusive or in this engine, not a power as in PostgreSQL and DuckDB \
                 (`3 ^ 2` is 1); write power(a, b) for a power"
            )),
            Sql::Function(f) if distinct_of_every_column(f) => Some(format!(
                "`{e}`: the engine reads DISTINCT over `*` as DISTINCT over one constant (every row alike: the \
                 count is 1); count distinct rows as count(*) over a SELECT DISTINCT subquery, or name the columns: \
                 count(DISTINCT struct(a, b))"
            )),
            Sql::IsDistinctFrom(_, b) | Sql::IsNotDistinctFrom(_, b)
                if matches!(b.as_ref(), Sql::BinaryOp { op: BinaryOperator::And | BinaryOperator::Or, .. }) =>
            {
                Some(format!(
                    "`{e}`: the parser takes everything after IS [NOT] DISTINCT FROM as its operand, AND and OR \
                     included, where SQL ends the operand before them; put the operand in parentheses: \
                     (a IS DISTINCT FROM b) AND …"
                ))
            }
            _ => None,
        };
        match why {
            Some(w) => ControlFlow::Break(w),
            None => ControlFlow::Continue(()),
        }
    });
    match found {
        ControlFlow::Break(why) => Err(why),
        ControlFlow::Continue(()) => Ok(()),
    }
}

/// An aggregate of `DISTINCT *` (or `DISTINCT t.*`).
fn distinct_of_every_column(f: &datafusion::sql::sqlparser::ast::Function) -> bool {
    use datafusion::sql::sqlparser::ast::{DuplicateTreatment, FunctionArg, FunctionArgExpr, FunctionArguments};
    let FunctionArguments::List(list) = &f.args else { return false };
    list.duplicate_treatment == Some(DuplicateTreatment::Distinct)
        && list.args.iter().any(|a| {
            let (FunctionArg::Unnamed(a) | FunctionArg::Named { arg: a, .. } | FunctionArg::ExprNamed { arg: a, .. }) =
                a;
            matches!(a, FunctionArgExpr::Wildcard | FunctionArgExpr::QualifiedWildcard(_))
        })
}

/// `EXCEPT ALL` and `INTERSECT ALL` in a query: the engine keeps no count of duplicates (EXCEPT
/// ALL removed every copy of a value the right side held once; INTERSECT ALL kept every copy
/// of the left side's).
struct AllSetOps;

impl datafusion::sql::sqlparser::ast::Visitor for AllSetOps {
    type Break = String;

    fn pre_visit_query(&mut self, q: &datafusion::sql::sqlparser::ast::Query) -> std::ops::ControlFlow<String> {
        use datafusion::sql::sqlparser::ast::{SetExpr, SetOperator, SetQuantifier};
        fn find(s: &SetExpr) -> Option<String> {
            match s {
                SetExpr::SetOperation {
                    op: op @ (SetOperator::Except | SetOperator::Intersect | SetOperator::Minus),
                    set_quantifier: SetQuantifier::All | SetQuantifier::AllByName,
                    ..
                } => Some(format!("{op} ALL")),
                SetExpr::SetOperation { left, right, .. } => find(left).or_else(|| find(right)),
                SetExpr::Query(q) => find(&q.body),
                _ => None,
            }
        }
        match find(&q.body) {
            Some(op) => std::ops::ControlFlow::Break(format!(
                "`{op}` is not computed as SQL says here (the engine does not count duplicates: EXCEPT ALL \
                 removes every copy of a value the right side holds, INTERSECT ALL keeps every copy of the left \
                 side's); write it without ALL, or count copies with GROUP BY and count(*)"
            )),
            None => std::ops::ControlFlow::Continue(()),
        }
    }
}

/// Set operations the engine computes otherwise than SQL ([`AllSetOps`]).
pub fn unlike_set_operations(statement: &datafusion::sql::parser::Statement) -> Result<(), String> {
    use datafusion::sql::sqlparser::ast::Visit;
    let datafusion::sql::parser::Statement::Statement(statement) = statement else { return Ok(()) };
    match statement.visit(&mut AllSetOps) {
        std::ops::ControlFlow::Break(why) => Err(why),
        std::ops::ControlFlow::Continue(()) => Ok(()),
    }
}

/// An analyzer rule run before type coercion, for functions the engine computes otherwise than
/// SQL (DuckDB, PostgreSQL):
/// - `nvl(a, b)` and `ifnull(a, b)` (and `nvl2`) made a decimal a double (`sum(nvl(amount, 0))`
///   was `0.30000000000000004`): they are `coalesce(a, b)` (and a `CASE`), which keeps it;
/// - `regexp_replace`'s replacement read `$1` (and `$name`) as a group, where SQL has `$` as
///   itself and groups as `\1`: a `$` is given as `$$`;
/// - `lag`/`lead` with a default of another type than the value (`lag(qty, 1, 0.5)` on
///   integers) cut the default to the value's type: refused.
#[derive(Debug, Default)]
pub struct SqlFunctions;

impl AnalyzerRule for SqlFunctions {
    fn analyze(&self, plan: LogicalPlan, _: &ConfigOptions) -> Result<LogicalPlan> {
        use datafusion::common::tree_node::Transformed;
        use datafusion::logical_expr::{lit, when, WindowFunctionDefinition};
        super::rewrite_exprs(plan, |x, schema| match x {
            Expr::ScalarFunction(f) if matches!(f.name(), "nvl" | "ifnull") && f.args.len() == 2 => {
                Ok(Transformed::yes(datafusion::functions::core::expr_fn::coalesce(f.args)))
            }
            Expr::ScalarFunction(f) if f.name() == "nvl2" && f.args.len() == 3 => {
                let [a, b, c] = <[Expr; 3]>::try_from(f.args)
                    .map_err(|_| datafusion::common::DataFusionError::Internal("nvl2 takes three arguments".into()))?;
                Ok(Transformed::yes(when(a.is_not_null(), b).otherwise(c)?))
            }
            Expr::ScalarFunction(mut f) if f.name() == "regexp_replace" && f.args.len() >= 3 => {
                let dollars = |r: Expr| -> Result<Expr> {
                    Ok(match r {
                        Expr::Literal(v, m) => match v.try_as_str().flatten() {
                            Some(t) if t.contains(['$', '\\']) => {
                                let t = sql_replacement(t).or_else(|why| plan_err!("regexp_replace: {why}"))?;
                                Expr::Literal(datafusion::common::ScalarValue::Utf8(Some(t)), m)
                            }
                            _ => Expr::Literal(v, m),
                        },
                        r => datafusion::functions::string::expr_fn::replace(r, lit("$"), lit("$$")),
                    })
                };
                let before = f.args[2].clone();
                f.args[2] = dollars(f.args[2].clone())?;
                let changed = f.args[2] != before;
                Ok(Transformed::new_transformed(Expr::ScalarFunction(f), changed))
            }
            Expr::WindowFunction(w)
                if matches!(&w.fun, WindowFunctionDefinition::WindowUDF(f) if matches!(f.name(), "lag" | "lead"))
                    && w.params.args.len() == 3 =>
            {
                let (value, default) = (w.params.args[0].get_type(schema)?, w.params.args[2].get_type(schema)?);
                let text = super::text;
                let scale = |t: &DataType| match t {
                    DataType::Decimal128(_, s) | DataType::Decimal256(_, s) => Some(*s),
                    _ => None,
                };
                let exact = default == value
                    || default == DataType::Null
                    || (value.is_integer() && default.is_integer())
                    || (value.is_floating()
                        && (default.is_integer() || default.is_floating() || scale(&default).is_some()))
                    || (text(&value) && text(&default))
                    || scale(&value).is_some_and(|s| default.is_integer() || scale(&default).is_some_and(|d| d <= s));
                if !exact {
                    let shown = w.fun.name();
                    return plan_err!(
                        "`{shown}(…)`: its default ({default}) is not of the value's type ({value}), and the engine \
                         would cast it to that type (0.5 becomes 0 for an integer); cast the value to the \
                         default's type, or give a default of the value's type"
                    );
                }
                Ok(Transformed::no(Expr::WindowFunction(w)))
            }
            x => Ok(Transformed::no(x)),
        })
    }

    fn name(&self) -> &str {
        "lakeswap_sql_functions"
    }
}

/// A replacement of `regexp_replace` as SQL reads it (DuckDB's RE2, PostgreSQL), written for
/// the engine, which reads `\1` and `\\1` alike as group 1, a `\` without a digit as itself,
/// and `$1` as group 1: `\N` is group N, `\\` one backslash and `$` itself. A backslash before
/// anything else (`\&`, the whole match in PostgreSQL and an error in DuckDB), or a literal
/// backslash before a digit (which the engine would read as a group), is refused.
fn sql_replacement(t: &str) -> Result<String, String> {
    let mut out = String::with_capacity(t.len() + 4);
    let mut chars = t.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '$' => out.push_str("$$"),
            '\\' => match chars.next() {
                Some(d) if d.is_ascii_digit() => {
                    let _ = write!(out, "${{{d}}}");
                }
                Some('\\') if chars.peek().is_some_and(char::is_ascii_digit) => {
                    return Err(format!(
                        "the replacement `{t}` has a backslash before a digit, which the engine would read as a \
                         group; write the digit apart (concat) or leave the backslash out"
                    ))
                }
                Some('\\') => out.push('\\'),
                other => {
                    return Err(format!(
                        "the replacement `{t}` has `\\{}`, which SQL engines read differently (the whole \
                         match in PostgreSQL, an error in DuckDB); write `\\0` … `\\9` for groups and `\\\\` for \
                         a backslash",
                        other.map(String::from).unwrap_or_default()
                    ))
                }
            },
            c => out.push(c),
        }
    }
    Ok(out)
}

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
        // A time made text where the query does not say so (`string_agg(ts, ',')`, `left(ts,
        // 10)`): ISO 8601 text, where SQL writes `2026-11-01 05:30:00+00` or refuses.
        _ if super::cast_of(x).is_some_and(|(expr, to)| {
            super::text(&to)
                && expr.get_type(schema).is_ok_and(|t| {
                    // A time of day is written as SQL writes it (`05:30:00`).
                    matches!(t, DataType::Timestamp(..) | DataType::Duration(_) | DataType::Interval(_))
                })
        }) =>
        {
            plan_err!(
                "`{x}` makes a time text: the engine would write it as ISO 8601 text (2026-11-01T05:30:00Z), where \
                 SQL writes 2026-11-01 05:30:00+00 or refuses; write the text you mean with to_char(ts, \
                 '%Y-%m-%d %H:%M:%S')"
            )
        }
        // A floating-point number made text, said so or not (`'v=' || x`, `concat(x)`): the
        // engine writes 1e20 and 0.000015 where PostgreSQL and DuckDB write 1e+20 and 1.5e-05.
        _ if super::cast_of(x)
            .is_some_and(|(expr, to)| super::text(&to) && expr.get_type(schema).is_ok_and(|t| t.is_floating())) =>
        {
            plan_err!(
                "`{x}` makes a floating-point number text: the engine would write 1e20 and 0.000015 where SQL \
                 writes 1e+20 and 1.5e-05; make it a decimal of the digits you mean first: \
                 CAST(CAST(x AS DECIMAL(18, 6)) AS VARCHAR)"
            )
        }
        // A number made a date: days since 1970-01-01 (20261101 a day in the year 57443).
        Expr::ScalarFunction(f)
            if f.func.name() == "to_date"
                && f.args.len() == 1
                && f.args[0].get_type(schema).is_ok_and(|t| t.is_numeric()) =>
        {
            plan_err!(
                "`{x}` reads a number as a count of days since 1970-01-01 (20261101 a day in the year 57443), where \
                 SQL refuses it; read a number of the form yyyymmdd with to_date(CAST(n AS VARCHAR), '%Y%m%d')"
            )
        }
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
        // The engine's `to_char` takes strftime's patterns: PostgreSQL's `YYYY-MM-DD` has no
        // `%` and comes out as that text on every row.
        Expr::ScalarFunction(f) if f.func.name() == "to_char" => match f.args.get(1) {
            Some(Expr::Literal(v, _)) if v.try_as_str().flatten().is_some_and(|p| !p.contains('%')) => plan_err!(
                "`{x}`: the engine's to_char takes strftime patterns (`%Y-%m-%d %H:%M`), not PostgreSQL's \
                 (`YYYY-MM-DD HH24:MI`); a pattern without `%` would be written as itself on every row"
            ),
            _ => Ok(()),
        },
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

/// An analyzer rule run before type coercion: the `median` of a `decimal(p,s)` is a
/// `decimal(p+1,s+1)`, exact. The engine gives it the column's own type and cuts the midpoint
/// of an even count toward zero (the median of 0.01 and 0.02 was 0.01, of -0.01 and -0.02
/// -0.01); one more place holds every midpoint. A decimal of the most digits its type holds
/// has no place to spare, and its median is refused.
#[derive(Debug, Default)]
pub struct ExactMedians;

impl AnalyzerRule for ExactMedians {
    fn analyze(&self, plan: LogicalPlan, _: &ConfigOptions) -> Result<LogicalPlan> {
        use datafusion::common::tree_node::Transformed;
        use datafusion::logical_expr::{cast, WindowFunctionDefinition};
        // The argument one place wider, or the refusal.
        let wider = |args: &mut Vec<Expr>, schema: &DFSchema, x: &Expr| -> Result<bool> {
            let [arg] = args.as_mut_slice() else { return Ok(false) };
            let to = match arg.get_type(schema) {
                Ok(DataType::Decimal128(p, s)) if p < 38 => DataType::Decimal128(p + 1, s + 1),
                Ok(DataType::Decimal256(p, s)) if p < 76 => DataType::Decimal256(p + 1, s + 1),
                Ok(t @ (DataType::Decimal128(..) | DataType::Decimal256(..))) => {
                    return plan_err!(
                        "`{x}`: the median of an even count is the midpoint of two values, which can need one \
                         more decimal place than a {t} holds, and the engine would cut it; write the median of \
                         a narrower decimal (CAST(x AS DECIMAL(37, …))) or of a double"
                    )
                }
                _ => return Ok(false),
            };
            *arg = cast(arg.clone(), to);
            Ok(true)
        };
        super::rewrite_exprs(plan, |x, schema| match x {
            Expr::AggregateFunction(mut f) if f.func.name() == "median" => {
                let shown = Expr::AggregateFunction(f.clone());
                let changed = wider(&mut f.params.args, schema, &shown)?;
                Ok(Transformed::new_transformed(Expr::AggregateFunction(f), changed))
            }
            Expr::WindowFunction(mut w) if matches!(&w.fun, WindowFunctionDefinition::AggregateUDF(f) if f.name() == "median") =>
            {
                let shown = Expr::WindowFunction(w.clone());
                let changed = wider(&mut w.params.args, schema, &shown)?;
                Ok(Transformed::new_transformed(Expr::WindowFunction(w), changed))
            }
            x => Ok(Transformed::no(x)),
        })
    }

    fn name(&self) -> &str {
        "lakeswap_exact_medians"
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

/// An analyzer rule run before type coercion: a float beside a decimal (`f > 0.5`,
/// `f IN (1.0, 2.5)`, `f BETWEEN 0.1 AND 0.2`, `coalesce(f, 0.0)`, `nvl2(x, f, d)`, `CASE … ELSE
/// 0.0`, a double column times a decimal column, `f IN (SELECT d …)`, a float and a decimal column
/// beside each other in a `UNION`, or matched by `INTERSECT` or `EXCEPT`) is computed in the
/// float's type, as DuckDB computes it.
/// DataFusion made the float a `decimal(30,15)`: digits past the 15th were cut
/// (`1.0000000000000002 > 1.0` was false, `1e-20 > 0.0` was false), and a NaN or a value past
/// 10^15 failed the date.
#[derive(Debug, Default)]
pub struct FloatsOverDecimals;

impl AnalyzerRule for FloatsOverDecimals {
    fn analyze(&self, plan: LogicalPlan, _: &ConfigOptions) -> Result<LogicalPlan> {
        use datafusion::common::tree_node::Transformed;
        use datafusion::logical_expr::expr::{Between, Case, InList, ScalarFunction};
        use datafusion::logical_expr::{cast, BinaryExpr, Operator::*};
        let plan = super::rewrite_exprs(plan, |x, schema| {
            let decimal =
                |e: &Expr| matches!(e.get_type(schema), Ok(DataType::Decimal128(..) | DataType::Decimal256(..)));
            // The float type a group of operands is computed in, when they mix floats and decimals:
            // double, or float32 when the floats are float32 and the decimals literals (`f32 = 0.1`).
            let float_of = |es: &[&Expr]| -> Option<DataType> {
                if !es.iter().any(|e| decimal(e)) {
                    return None;
                }
                let computed = es.iter().any(|e| decimal(e) && !matches!(e, Expr::Literal(..)));
                let start = computed.then_some(DataType::Float64);
                let floats = es.iter().filter_map(|e| e.get_type(schema).ok().filter(DataType::is_floating));
                floats.fold(None, |acc, t| {
                    let acc = acc.or(start.clone());
                    Some(match (acc, t) {
                        (Some(DataType::Float64), _) | (_, DataType::Float64) => DataType::Float64,
                        _ => DataType::Float32,
                    })
                })
            };
            let to = |e: Expr, t: &DataType| if decimal(&e) { cast(e, t.clone()) } else { e };
            let yes = |e: Expr| Ok(Transformed::yes(e));
            match x {
                Expr::BinaryExpr(b)
                    if matches!(
                        b.op,
                        Plus | Minus
                            | Multiply
                            | Divide
                            | Modulo
                            | Eq
                            | NotEq
                            | Lt
                            | LtEq
                            | Gt
                            | GtEq
                            | IsDistinctFrom
                            | IsNotDistinctFrom
                    ) =>
                {
                    match float_of(&[&b.left, &b.right]) {
                        Some(t) => yes(Expr::BinaryExpr(BinaryExpr::new(
                            Box::new(to(*b.left, &t)),
                            b.op,
                            Box::new(to(*b.right, &t)),
                        ))),
                        None => Ok(Transformed::no(Expr::BinaryExpr(b))),
                    }
                }
                Expr::InList(l) => {
                    let all: Vec<&Expr> = std::iter::once(l.expr.as_ref()).chain(&l.list).collect();
                    match float_of(&all) {
                        Some(t) => yes(Expr::InList(InList::new(
                            Box::new(to(*l.expr, &t)),
                            l.list.into_iter().map(|e| to(e, &t)).collect(),
                            l.negated,
                        ))),
                        None => Ok(Transformed::no(Expr::InList(l))),
                    }
                }
                Expr::Between(b) => match float_of(&[&b.expr, &b.low, &b.high]) {
                    Some(t) => yes(Expr::Between(Between::new(
                        Box::new(to(*b.expr, &t)),
                        b.negated,
                        Box::new(to(*b.low, &t)),
                        Box::new(to(*b.high, &t)),
                    ))),
                    None => Ok(Transformed::no(Expr::Between(b))),
                },
                Expr::Case(c) => {
                    let results: Vec<&Expr> =
                        c.when_then_expr.iter().map(|(_, t)| t.as_ref()).chain(c.else_expr.as_deref()).collect();
                    let result = float_of(&results);
                    let compared: Vec<&Expr> = match &c.expr {
                        Some(e) => std::iter::once(e.as_ref())
                            .chain(c.when_then_expr.iter().map(|(w, _)| w.as_ref()))
                            .collect(),
                        None => Vec::new(),
                    };
                    let operand = float_of(&compared);
                    if result.is_none() && operand.is_none() {
                        return Ok(Transformed::no(Expr::Case(c)));
                    }
                    let (r, o) = (
                        |e: Expr| match &result {
                            Some(t) => to(e, t),
                            None => e,
                        },
                        |e: Expr| match &operand {
                            Some(t) => to(e, t),
                            None => e,
                        },
                    );
                    yes(Expr::Case(Case::new(
                        c.expr.map(|e| Box::new(o(*e))),
                        c.when_then_expr.into_iter().map(|(w, t)| (Box::new(o(*w)), Box::new(r(*t)))).collect(),
                        c.else_expr.map(|e| Box::new(r(*e))),
                    )))
                }
                // `x IN (SELECT d …)`, `x > ANY (SELECT d …)`: the subquery's column made the
                // float's type, or the decimal compared with a float column made a double.
                Expr::InSubquery(mut q) => match double_beside(&mut q.expr, &mut q.subquery, schema)? {
                    true => yes(Expr::InSubquery(q)),
                    false => Ok(Transformed::no(Expr::InSubquery(q))),
                },
                Expr::SetComparison(mut q) => match double_beside(&mut q.expr, &mut q.subquery, schema)? {
                    true => yes(Expr::SetComparison(q)),
                    false => Ok(Transformed::no(Expr::SetComparison(q))),
                },
                // `nvl2(x, a, b)` is `CASE WHEN x IS NOT NULL THEN a ELSE b END`: the engine
                // gives `x` a part in the result's type (a float `x` made decimals a
                // `decimal(30,15)`, a decimal `x` made a float `a` one).
                Expr::ScalarFunction(f) if f.func.name() == "nvl2" && f.args.len() == 3 => {
                    let t = float_of(&f.args[1..].iter().collect::<Vec<_>>());
                    let [x, a, b] = <[Expr; 3]>::try_from(f.args).map_err(|_| {
                        datafusion::common::DataFusionError::Internal("nvl2 takes three arguments".into())
                    })?;
                    let r = |e: Expr| match &t {
                        Some(t) => to(e, t),
                        None => e,
                    };
                    yes(Expr::Case(Case::new(
                        None,
                        vec![(Box::new(x.is_not_null()), Box::new(r(a)))],
                        Some(Box::new(r(b))),
                    )))
                }
                Expr::ScalarFunction(f)
                    if matches!(f.func.name(), "coalesce" | "nullif" | "greatest" | "least" | "nvl" | "ifnull") =>
                {
                    match float_of(&f.args.iter().collect::<Vec<_>>()) {
                        Some(t) => yes(Expr::ScalarFunction(ScalarFunction::new_udf(
                            f.func,
                            f.args.into_iter().map(|e| to(e, &t)).collect(),
                        ))),
                        None => Ok(Transformed::no(Expr::ScalarFunction(f))),
                    }
                }
                x => Ok(Transformed::no(x)),
            }
        })?;
        // Columns beside each other in a `UNION` (and the keys an `INTERSECT` or `EXCEPT`
        // matches on): a decimal beside a float made that float.
        plan.transform_up_with_subqueries(|p| match p {
            LogicalPlan::Union(mut u) => {
                // An input's types as its expressions give them: `UNION BY NAME` wraps each input
                // in a projection stating the first input's types.
                u.inputs = u
                    .inputs
                    .into_iter()
                    .map(|i| Arc::unwrap_or_clone(i).recompute_schema().map(Arc::new))
                    .collect::<Result<Vec<_>>>()?;
                let width = u.inputs.first().map_or(0, |i| i.schema().fields().len());
                // Each column's float type, where floats meet decimals: float32 when every float is one.
                let mixed: Vec<(usize, DataType)> = (0..width)
                    .filter_map(|c| {
                        let types =
                            || u.inputs.iter().filter_map(|i| i.schema().fields().get(c)).map(|f| f.data_type());
                        let decimals =
                            types().any(|t| matches!(t, DataType::Decimal128(..) | DataType::Decimal256(..)));
                        let float = types().filter(|t| t.is_floating()).fold(None, |acc, t| match (acc, t) {
                            (Some(DataType::Float64), _) | (_, DataType::Float64) => Some(DataType::Float64),
                            _ => Some(DataType::Float32),
                        });
                        float.filter(|_| decimals).map(|t| (c, t))
                    })
                    .collect();
                if mixed.is_empty() {
                    return Ok(Transformed::no(LogicalPlan::Union(u)));
                }
                let inputs = u
                    .inputs
                    .iter()
                    .map(|i| mixed.iter().try_fold(i.as_ref().clone(), |p, (c, t)| as_float(p, *c, t)).map(Arc::new))
                    .collect::<Result<Vec<_>>>()?;
                Ok(Transformed::yes(LogicalPlan::Union(datafusion::logical_expr::Union::try_new_with_loose_types(
                    inputs,
                )?)))
            }
            LogicalPlan::Join(mut j) => {
                let (left, right) = (j.left.schema().clone(), j.right.schema().clone());
                let mut changed = false;
                for (l, r) in j.on.iter_mut() {
                    let (lt, rt) = (l.get_type(&left), r.get_type(&right));
                    let float = |t: &Result<DataType>| t.as_ref().is_ok_and(DataType::is_floating);
                    let dec =
                        |t: &Result<DataType>| matches!(t, Ok(DataType::Decimal128(..) | DataType::Decimal256(..)));
                    if let (true, true, Ok(t)) = (float(&lt), dec(&rt), &lt) {
                        *r = datafusion::logical_expr::cast(r.clone(), t.clone());
                        changed = true;
                    } else if let (true, true, Ok(t)) = (dec(&lt), float(&rt), &rt) {
                        *l = datafusion::logical_expr::cast(l.clone(), t.clone());
                        changed = true;
                    }
                }
                match changed {
                    true => Ok(Transformed::yes(LogicalPlan::Join(j).recompute_schema()?)),
                    false => Ok(Transformed::no(LogicalPlan::Join(j))),
                }
            }
            p => Ok(Transformed::no(p)),
        })
        .map(|t| t.data)
    }

    fn name(&self) -> &str {
        "lakeswap_floats_over_decimals"
    }
}

/// `expr` compared with the values of `subquery`: when one is a float and the other a decimal,
/// the decimal made that float. Whether anything changed.
fn double_beside(
    expr: &mut Box<Expr>,
    subquery: &mut datafusion::logical_expr::Subquery,
    schema: &DFSchema,
) -> Result<bool> {
    let is_decimal = |t: &DataType| matches!(t, DataType::Decimal128(..) | DataType::Decimal256(..));
    let Some(inner) = subquery.subquery.schema().fields().first().map(|f| f.data_type().clone()) else {
        return Ok(false);
    };
    let Ok(outer) = expr.get_type(schema) else { return Ok(false) };
    if outer.is_floating() && is_decimal(&inner) {
        subquery.subquery = Arc::new(as_float(subquery.subquery.as_ref().clone(), 0, &outer)?);
        Ok(true)
    } else if is_decimal(&outer) && inner.is_floating() {
        **expr = datafusion::logical_expr::cast(expr.as_ref().clone(), inner);
        Ok(true)
    } else {
        Ok(false)
    }
}

/// `plan` with its decimal column `c` made the float `to` (a projection over it; names kept).
fn as_float(plan: LogicalPlan, c: usize, to: &DataType) -> Result<LogicalPlan> {
    if !matches!(plan.schema().field(c).data_type(), DataType::Decimal128(..) | DataType::Decimal256(..)) {
        return Ok(plan);
    }
    super::columns_over(plan, |i, column, _| match i == c {
        true => datafusion::logical_expr::cast(column, to.clone()),
        false => column,
    })
}
