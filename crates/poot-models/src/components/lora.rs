//! The low-rank path of an adapted projection (see [`crate::lora`]).

use poot_graph_ir::Builder;
use poot_graph_ir::{DType, TensorType, Traced};

use super::Step;
use crate::error::TraceError;
use crate::lora::{LoraHalf, LoraTarget, table_name};
use crate::weights::Role;

/// `y + B[i] @ (A[i] @ x)` for projection `role` of `layer`, each token reading its row's
/// adapter index `i`; `y` unchanged when the step has no LoRA tables or the projection is not
/// targeted. `x` is `[rows, tokens, in]`, `y` `[rows, tokens, out]`.
pub fn adapted(
    b: &Builder,
    step: &Step,
    layer: usize,
    role: Role,
    x: Traced,
    y: Traced,
) -> Result<Traced, TraceError> {
    let Some(lora) = step.shape.lora else {
        return Ok(y);
    };
    let Some(target) = LoraTarget::from_role(role).filter(|t| lora.targets.contains(*t)) else {
        return Ok(y);
    };
    if !step.shape.shard.is_whole() {
        return Err(TraceError::LoraSharded {
            ranks: step.shape.shard.ranks,
        });
    }
    let xd = b.dims(x)?;
    let yd = b.dims(y)?;
    let (Some(&inp), Some(&out)) = (xd.last(), yd.last()) else {
        return Ok(y);
    };
    let (rows, tokens) = (step.shape.rows, step.shape.tokens);
    let (n, r) = (lora.table_rows(), lora.max_rank);
    let table = |half, dims: Vec<usize>| {
        b.constant(
            &table_name(layer, target, half),
            TensorType::new(DType::F32, dims),
        )
    };
    let a = table(LoraHalf::A, vec![n, r, inp])?;
    let bt = table(LoraHalf::B, vec![n, out, r])?;
    let idx = step.lora_index(b)?;
    let x2 = b.reshape(x, [rows * tokens, inp])?;
    let down = b.indexed_matmul(x2, a, idx)?;
    let up = b.indexed_matmul(down, bt, idx)?;
    let up = b.reshape(up, yd)?;
    let up = b.name(up, "lora")?;
    Ok(b.add(y, up)?)
}
