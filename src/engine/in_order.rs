//! A plan's partitions read one after another, never at once.
//!
//! The engine reads a plan of several partitions (the branches of a `UNION`) into one by
//! running them at once and passing batches on as they come (`CoalescePartitionsExec`): which
//! branch's rows came first depended on thread timing, and with it a float sum, an
//! `array_agg`'s order, or which rows a `LIMIT` kept. [`InOrder`] reads partition 0 to its end,
//! then partition 1, and so on; [`Sequential`] puts it wherever the engine would have merged
//! partitions, and at the top of the plan.

use std::sync::Arc;

use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::Result;
use datafusion::execution::TaskContext;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use datafusion::physical_plan::limit::GlobalLimitExec;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, ExecutionPlanProperties, Partitioning, PlanProperties,
    SendableRecordBatchStream,
};
use futures::StreamExt;

/// One partition: the input's partitions in their order, each read to its end.
#[derive(Debug)]
pub struct InOrder {
    input: Arc<dyn ExecutionPlan>,
    properties: Arc<PlanProperties>,
}

impl InOrder {
    pub fn new(input: Arc<dyn ExecutionPlan>) -> Self {
        // Each partition's order and constants hold within it, not across the concatenation.
        let mut eq = input.equivalence_properties().clone();
        eq.clear_orderings();
        eq.clear_per_partition_constants();
        let properties = PlanProperties::new(
            eq,
            Partitioning::UnknownPartitioning(1),
            input.pipeline_behavior(),
            input.boundedness(),
        );
        InOrder { input, properties: Arc::new(properties) }
    }
}

impl DisplayAs for InOrder {
    fn fmt_as(&self, _: DisplayFormatType, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(f, "InOrder")
    }
}

impl ExecutionPlan for InOrder {
    fn name(&self) -> &str {
        "InOrder"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }

    fn apply_expressions(
        &self,
        _: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn with_new_children(self: Arc<Self>, mut children: Vec<Arc<dyn ExecutionPlan>>) -> Result<Arc<dyn ExecutionPlan>> {
        match children.len() {
            1 => Ok(Arc::new(InOrder::new(children.swap_remove(0)))),
            n => datafusion::common::internal_err!("InOrder takes one input, not {n}"),
        }
    }

    fn execute(&self, partition: usize, context: Arc<TaskContext>) -> Result<SendableRecordBatchStream> {
        if partition != 0 {
            return datafusion::common::internal_err!("InOrder has one partition, not {partition}");
        }
        let input = self.input.clone();
        let n = input.output_partitioning().partition_count();
        let batches = futures::stream::iter(0..n)
            .map(move |i| match input.execute(i, context.clone()) {
                Ok(stream) => stream.boxed(),
                Err(e) => futures::stream::once(async { Err(e) }).boxed(),
            })
            .flatten();
        Ok(Box::pin(RecordBatchStreamAdapter::new(self.input.schema(), batches)))
    }
}

/// Replaces every merge of partitions that passes batches on as they come by [`InOrder`] (with
/// its row limit, if any), and reads a plan of several partitions in order at its top too.
#[derive(Debug)]
pub struct Sequential;

impl PhysicalOptimizerRule for Sequential {
    fn optimize(&self, plan: Arc<dyn ExecutionPlan>, _: &ConfigOptions) -> Result<Arc<dyn ExecutionPlan>> {
        let plan = plan
            .transform_up(|node| {
                let Some(merge) = node.downcast_ref::<CoalescePartitionsExec>() else {
                    return Ok(Transformed::no(node));
                };
                let in_order: Arc<dyn ExecutionPlan> = Arc::new(InOrder::new(merge.input().clone()));
                Ok(Transformed::yes(match merge.fetch() {
                    Some(n) => Arc::new(GlobalLimitExec::new(in_order, 0, Some(n))),
                    None => in_order,
                }))
            })?
            .data;
        Ok(match plan.output_partitioning().partition_count() {
            0 | 1 => plan,
            _ => Arc::new(InOrder::new(plan)),
        })
    }

    fn name(&self) -> &str {
        "lakeswap_sequential"
    }

    fn schema_check(&self) -> bool {
        true
    }
}
