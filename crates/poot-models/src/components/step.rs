//! The per-step inputs every family reads, the KV cache writes, and the graph's outputs.

use std::cell::RefCell;

use poot_graph_ir::ops::{causal_mask, key_offsets};
use poot_graph_ir::{Builder, CompareOp, DType, Graph, Outputs, Slot, TensorType, Traced};

use crate::error::TraceError;
use crate::lora::LORA_INDEX_SLOT;
use crate::schema::{StateRole, StepInput, kv_state_name};
use crate::step::{KvLayout, StepShape};
use crate::weights::{WeightMap, WeightRole};

/// One step being traced: its shape, its slots, its weights, and the states it carries.
pub struct Step<'m> {
    pub shape: StepShape,
    /// Token ids `[rows, tokens]`.
    pub tokens: Traced,
    /// Absolute positions `[rows, tokens]`.
    pub pos: Traced,
    weights: &'m WeightMap,
    token_mask: Option<Traced>,
    token_types: Option<Traced>,
    declared: RefCell<Vec<(WeightRole, Traced)>>,
    masks: RefCell<Vec<(Option<usize>, Traced)>>,
    offsets: RefCell<Option<Traced>>,
    states: RefCell<Vec<(Traced, Traced)>>,
    /// Paged KV: the block table and the flattened write map, once declared.
    paged: RefCell<Option<(Traced, Traced)>>,
    extra_outputs: RefCell<Vec<Traced>>,
    /// Each token's adapter index `[rows * tokens]`, once declared.
    lora_index: RefCell<Option<Traced>>,
}

impl<'m> Step<'m> {
    /// A decoder step: token and position slots.
    pub fn new(
        b: &Builder,
        shape: StepShape,
        weights: &'m WeightMap,
    ) -> Result<Step<'m>, TraceError> {
        Step::with_inputs(
            b,
            shape,
            weights,
            &[StepInput::Tokens, StepInput::Positions],
        )
    }

    /// A step declaring exactly `inputs` as slots. The paged block table and write map are not
    /// declared here but by the first [`Step::write_kv`] of a paged step.
    pub fn with_inputs(
        b: &Builder,
        shape: StepShape,
        weights: &'m WeightMap,
        inputs: &[StepInput],
    ) -> Result<Step<'m>, TraceError> {
        let rt = vec![shape.rows, shape.tokens];
        let slot = |input: StepInput, dtype: DType| -> Result<Option<Traced>, TraceError> {
            if !inputs.contains(&input) {
                return Ok(None);
            }
            Ok(Some(
                b.slot(input.slot(), TensorType::new(dtype, rt.clone()))?,
            ))
        };
        let tokens = slot(StepInput::Tokens, DType::I32)?;
        let pos = slot(StepInput::Positions, DType::I32)?;
        let token_mask = slot(StepInput::TokenMask, DType::I32)?;
        let token_types = slot(StepInput::TokenTypes, DType::I32)?;
        let (Some(tokens), Some(pos)) = (tokens, pos) else {
            return Err(TraceError::Shape {
                rows: shape.rows,
                tokens: shape.tokens,
                capacity: shape.capacity,
                why: "every step reads tokens and positions",
            });
        };
        Ok(Step {
            shape,
            tokens,
            pos,
            weights,
            token_mask,
            token_types,
            declared: RefCell::new(Vec::new()),
            masks: RefCell::new(Vec::new()),
            offsets: RefCell::new(None),
            states: RefCell::new(Vec::new()),
            paged: RefCell::new(None),
            extra_outputs: RefCell::new(Vec::new()),
            lora_index: RefCell::new(None),
        })
    }

    pub fn weights(&self) -> &'m WeightMap {
        self.weights
    }

    /// Segment ids `[rows, tokens]`, when the step declares them.
    pub fn token_types(&self) -> Option<Traced> {
        self.token_types
    }

    /// The constant of `role`, declared on first use and shared after (a rotary table read by
    /// every layer is one constant).
    pub fn weight(&self, b: &Builder, role: WeightRole) -> Result<Traced, TraceError> {
        if let Some((_, t)) = self.declared.borrow().iter().find(|(r, _)| *r == role) {
            return Ok(*t);
        }
        let t = self.weights.declare(b, role)?;
        self.declared.borrow_mut().push((role, t));
        Ok(t)
    }

    /// [`Step::weight`] for a role the model may not have.
    pub fn weight_opt(&self, b: &Builder, role: WeightRole) -> Result<Option<Traced>, TraceError> {
        if self.weights.has(role) {
            self.weight(b, role).map(Some)
        } else {
            Ok(None)
        }
    }

    /// `bool [rows, 1, tokens, capacity]`: which cache positions each new token sees (causal, and
    /// within `window` when given). Built once per window from the position slot.
    pub fn causal_mask(&self, b: &Builder, window: Option<usize>) -> Result<Traced, TraceError> {
        if let Some((_, m)) = self.masks.borrow().iter().find(|(w, _)| *w == window) {
            return Ok(*m);
        }
        let m = causal_mask(b, self.pos, self.shape.capacity, window)?;
        self.masks.borrow_mut().push((window, m));
        Ok(m)
    }

    /// `f32 [rows, 1, tokens, capacity]`: each cache position minus each new token's position
    /// (ALiBi's distances), built once from the position slot.
    pub fn key_offsets(&self, b: &Builder) -> Result<Traced, TraceError> {
        if let Some(o) = *self.offsets.borrow() {
            return Ok(o);
        }
        let o = key_offsets(b, self.pos, self.shape.capacity)?;
        *self.offsets.borrow_mut() = Some(o);
        Ok(o)
    }

    /// `bool [rows, 1, 1, tokens]`: the real (unpadded) tokens of each row, for an encoder.
    pub fn padding_mask(&self, b: &Builder) -> Result<Traced, TraceError> {
        let (r, t) = (self.shape.rows, self.shape.tokens);
        let Some(mask) = self.token_mask else {
            return Ok(b.broadcast(b.literal(poot_graph_ir::Scalar::Bool(true))?, [r, 1, 1, t])?);
        };
        let zero = b.broadcast(b.lit_i32(0)?, [r, t])?;
        let real = b.compare(CompareOp::Ne, mask, zero)?;
        Ok(b.reshape(real, [r, 1, 1, t])?)
    }

    /// Writes this step's keys and values `[rows, kv_heads, tokens, head_dim]` into layer
    /// `layer`'s caches (rounded to the cache's [`KvType`](crate::KvType)) and returns each
    /// row's whole cache `[rows, kv_heads, capacity, head_dim]` for attention, in f32. Declares and pairs the states. A contiguous cache is written at
    /// each row's first position; a paged pool is written through the write map and read
    /// through the block table (the contract is on [`KvLayout`]).
    pub fn write_kv(
        &self,
        b: &Builder,
        layer: usize,
        k: Traced,
        v: Traced,
    ) -> Result<(Traced, Traced), TraceError> {
        let kd = b.dims(k)?;
        let (heads, head_dim) = match kd.as_slice() {
            &[_, h, _, d] => (h, d),
            _ => {
                return Err(TraceError::Shape {
                    rows: self.shape.rows,
                    tokens: self.shape.tokens,
                    capacity: self.shape.capacity,
                    why: "keys must be [rows, heads, tokens, head_dim]",
                });
            }
        };
        let kv_dtype = self.shape.kv_type.dtype();
        let mut out = [k, k];
        for (i, (role, new)) in [(StateRole::Keys, k), (StateRole::Values, v)]
            .into_iter()
            .enumerate()
        {
            let name = kv_state_name(layer, role);
            // The rounding to the cache's type is written here, so the oracle stores what the
            // device stores.
            let new = if kv_dtype == DType::F32 {
                new
            } else {
                b.cast(new, kv_dtype)?
            };
            let (cache_in, written, cache) = match self.shape.kv {
                KvLayout::Contiguous => {
                    let (cache_in, cache) =
                        self.write_contiguous(b, &name, new, heads, head_dim)?;
                    (cache_in, cache, cache)
                }
                KvLayout::Paged {
                    block_tokens,
                    blocks,
                } => self.write_paged(b, &name, new, heads, head_dim, block_tokens, blocks)?,
            };
            self.states.borrow_mut().push((cache_in, written));
            out[i] = if kv_dtype == DType::F32 {
                cache
            } else {
                b.cast(cache, DType::F32)?
            };
        }
        Ok((out[0], out[1]))
    }

    /// One contiguous cache `[rows, heads, capacity, head_dim]`: each row's new entries written
    /// at its first position. Returns the state input and the written cache.
    fn write_contiguous(
        &self,
        b: &Builder,
        name: &str,
        new: Traced,
        heads: usize,
        head_dim: usize,
    ) -> Result<(Traced, Traced), TraceError> {
        let cache_ty = TensorType::new(
            self.shape.kv_type.dtype(),
            vec![self.shape.rows, heads, self.shape.capacity, head_dim],
        );
        let cache_in = b.state_input(name, cache_ty)?;
        let mut cache = cache_in;
        let zero = b.lit_i32(0)?;
        for row in 0..self.shape.rows {
            let start = b.slice(self.pos, vec![row, 0], vec![row + 1, 1])?;
            let start = b.reshape(start, Vec::<usize>::new())?;
            let row_new = if self.shape.rows == 1 {
                new
            } else {
                b.slice(
                    new,
                    vec![row, 0, 0, 0],
                    vec![row + 1, heads, self.shape.tokens, head_dim],
                )?
            };
            let row_idx = b.lit_i32(i32::try_from(row).unwrap_or(i32::MAX))?;
            cache = b.dynamic_update_slice(cache, row_new, &[row_idx, zero, start, zero])?;
        }
        Ok((cache_in, cache))
    }

    /// One paged pool `[blocks * block_tokens, heads, head_dim]`: the new entries scattered to
    /// their write-map slots (in place), then each row's blocks gathered through the block table
    /// into `[rows, heads, capacity, head_dim]`. Returns the state input, the written pool and
    /// the gathered cache.
    #[allow(clippy::too_many_arguments)]
    fn write_paged(
        &self,
        b: &Builder,
        name: &str,
        new: Traced,
        heads: usize,
        head_dim: usize,
        block_tokens: usize,
        blocks: usize,
    ) -> Result<(Traced, Traced, Traced), TraceError> {
        self.shape.check_kv()?;
        let (rows, tokens, capacity) = (self.shape.rows, self.shape.tokens, self.shape.capacity);
        let slots = blocks * block_tokens;
        let (table, write) = self.paged_slots(b, block_tokens)?;
        let pool_in = b.state_input(
            name,
            TensorType::new(self.shape.kv_type.dtype(), vec![slots, heads, head_dim]),
        )?;
        // Token-major rows: one pool slot per new token.
        let updates = b.transpose(new, vec![0, 2, 1, 3])?;
        let updates = b.reshape(updates, [rows * tokens, heads, head_dim])?;
        let pool = b.scatter_update(pool_in, write, updates, 0)?;
        let by_block = b.reshape(pool, [blocks, block_tokens, heads, head_dim])?;
        // [rows, capacity / block_tokens, block_tokens, heads, head_dim]: each row's blocks in
        // position order.
        let gathered = b.gather(by_block, table, 0)?;
        let gathered = b.reshape(gathered, [rows, capacity, heads, head_dim])?;
        let cache = b.transpose(gathered, vec![0, 2, 1, 3])?;
        Ok((pool_in, pool, cache))
    }

    /// The block table `[rows, capacity / block_tokens]` and the flattened write map
    /// `[rows * tokens]`, declared on first use and shared by every layer.
    fn paged_slots(
        &self,
        b: &Builder,
        block_tokens: usize,
    ) -> Result<(Traced, Traced), TraceError> {
        if let Some(slots) = *self.paged.borrow() {
            return Ok(slots);
        }
        let (rows, tokens) = (self.shape.rows, self.shape.tokens);
        let table = b.slot(
            Slot::SlotMap,
            TensorType::new(DType::I32, vec![rows, self.shape.capacity / block_tokens]),
        )?;
        let write = b.slot(
            Slot::WriteMap,
            TensorType::new(DType::I32, vec![rows, tokens]),
        )?;
        let write = b.reshape(write, [rows * tokens])?;
        *self.paged.borrow_mut() = Some((table, write));
        Ok((table, write))
    }

    /// Each token's adapter index `i32 [rows * tokens]`, from the per-row
    /// [`LORA_INDEX_SLOT`] `[rows]` declared on first use and shared by every projection.
    pub fn lora_index(&self, b: &Builder) -> Result<Traced, TraceError> {
        if let Some(t) = *self.lora_index.borrow() {
            return Ok(t);
        }
        let (rows, tokens) = (self.shape.rows, self.shape.tokens);
        let per_row = b.slot_named(LORA_INDEX_SLOT, TensorType::new(DType::I32, vec![rows]))?;
        let per_row = b.reshape(per_row, [rows, 1])?;
        let per_token = b.broadcast(per_row, [rows, tokens])?;
        let per_token = b.reshape(per_token, [rows * tokens])?;
        *self.lora_index.borrow_mut() = Some(per_token);
        Ok(per_token)
    }

    /// Adds another primary output after the main one (a hidden-state carry).
    pub fn add_output(&self, t: Traced) {
        self.extra_outputs.borrow_mut().push(t);
    }

    /// Closes the trace with `out` as the primary output and every KV pair carried.
    pub fn finish(self, b: Builder, out: Traced) -> Result<Graph, TraceError> {
        let mut outputs = Outputs::new(out);
        for t in self.extra_outputs.into_inner() {
            outputs = outputs.and(t);
        }
        let states = self.states.into_inner();
        Ok(b.finish(outputs.with_state(&states))?)
    }
}
