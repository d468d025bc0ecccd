//! Lowering a graph to a plan: decide which values get buffers, build one kernel per buffered
//! value (with its inlined producers), pack intermediates into reused buffers.

mod access;
mod attention;
mod attention_decode;
mod attention_mma;
mod attention_rows;
mod attention_tiled;
mod buffers;
mod classify;
pub mod components;
mod context;
pub mod dequant;
pub mod dequant_unit;
mod emit;
mod epilogue;
mod experts;
mod fan_in;
mod gemm;
mod gemv;
mod horizontal;
mod library;
mod rows;
mod split;

pub(crate) use gemm::tiled as tiled_contraction;
pub(crate) use gemm::{contraction_rows, stages_blocks};
pub(crate) use library::exact_operands as exact_library_weights;

use std::collections::{HashMap, HashSet};

use poot_formats::{BlockFormat, DenseType, GgmlType, PackedFormat};
use poot_graph_ir::{
    DType, Eqn, Graph, OpKind, Storage, TensorType, ValueId, component_const_name,
};

use self::classify::{Classification, Placement, classify};
use self::context::{KernelCtx, LBuf};
use self::dequant::FormatTable;
use crate::plan::{BufferRole, CollectiveOp, DeviceWords, HostValue, LibraryOperands, Plan};
use crate::refusal::PlanError;
use crate::target::Target;
use poot_kernel::Kernel;

pub use self::access::{convert, kty};
pub use self::classify::is_elementwise_like;

/// Kernel fault codes: what a failed device check means.
pub mod fault {
    pub const GATHER_INDEX: u32 = 1;
    pub const TAKE_ALONG_INDEX: u32 = 2;
    pub const DYNAMIC_SLICE_START: u32 = 3;
    pub const UPDATE_SLICE_START: u32 = 4;
    pub const SCATTER_INDEX: u32 = 5;
    pub const DIVIDE_BY_ZERO: u32 = 6;
    pub const EXPERT_INDEX: u32 = 7;
    pub const GROUP_INDEX: u32 = 8;

    /// What a fault code means, for error messages.
    pub fn describe(code: u32) -> &'static str {
        match code {
            GATHER_INDEX => "gather index out of range",
            TAKE_ALONG_INDEX => "take-along index out of range",
            DYNAMIC_SLICE_START => "dynamic slice start out of range",
            UPDATE_SLICE_START => "dynamic update start out of range",
            SCATTER_INDEX => "scatter index out of range",
            DIVIDE_BY_ZERO => "integer division by zero",
            EXPERT_INDEX => "expert index out of range",
            GROUP_INDEX => "GPTQ g_idx names a group the weight has no scales for",
            _ => "unknown kernel check",
        }
    }
}

/// A planned buffer before physical assignment.
struct LBufInfo {
    role: BufferRole,
    size_bytes: u64,
    /// Holds f16 elements two to a word (an f16 KV cache), read with half loads and written
    /// a word (two elements) at a time.
    halves: bool,
}

/// The state of one lowering.
pub(crate) struct Lowering<'g> {
    g: &'g Graph,
    target: &'g Target,
    cls: Classification,
    /// The buffer of each buffered value.
    lbuf: Vec<Option<LBuf>>,
    /// The buffer of each component of a component-format constant, by value index.
    component_bufs: HashMap<usize, Vec<(&'static str, LBuf)>>,
    bufs: Vec<LBufInfo>,
    tables: HashMap<FormatTable, LBuf>,
    kernels: Vec<Kernel>,
    /// Each distinct kernel's index, by its text.
    kernel_index: HashMap<String, usize>,
    dispatches: Vec<PlannedDispatch>,
    /// Collectives, each with the number of dispatches planned before it.
    collectives: Vec<(usize, PlannedCollective)>,
    /// The equations the device's library computes ([`library`]).
    library: HashSet<usize>,
    /// Library contractions, each with the numbers of dispatches and collectives planned
    /// before it.
    contractions: Vec<(usize, usize, PlannedContraction)>,
    /// Equations already computed by an earlier equation's kernel (horizontal fusion), or
    /// computed later by a later one's (see `deferred`).
    done: std::collections::HashSet<usize>,
    /// Split reductions computed together at the last one's place, by that equation, and the
    /// place each of them is computed at (see `split`).
    deferred: HashMap<usize, Vec<usize>>,
    deferred_to: HashMap<usize, usize>,
    /// Each expert's count and list of the rows that selected it, by the ids value they were
    /// listed from ([`experts`]): the routed contractions of one layer share them.
    expert_rows: HashMap<ValueId, experts::ExpertRows>,
}

/// A dispatch before physical buffer assignment.
pub(crate) struct PlannedDispatch {
    kernel: usize,
    grid: [u32; 3],
    args: Vec<LBuf>,
    label: String,
}

/// A collective before physical buffer assignment.
pub(crate) struct PlannedCollective {
    op: CollectiveOp,
    src: LBuf,
    dst: LBuf,
    n_elems: u64,
    label: String,
}

/// A library contraction before physical buffer assignment.
pub(crate) struct PlannedContraction {
    operands: LibraryOperands,
    lhs: LBuf,
    weights: LBuf,
    transpose_weights: bool,
    out: LBuf,
    rows: u32,
    cols: u32,
    depth: u32,
    label: String,
}

/// Lowers `g` for `target`. A graph whose fused attention kernel would bind more buffers than
/// the target allows is planned again without the attention rewrite.
pub fn lower(g: &Graph, target: &Target) -> Result<Plan, PlanError> {
    match lower_with(g, target, true) {
        Err(PlanError::TooManyBindings { .. }) => lower_with(g, target, false),
        planned => planned,
    }
}

fn lower_with(g: &Graph, target: &Target, rewrite_attention: bool) -> Result<Plan, PlanError> {
    let library = library::chosen(g, target);
    let mut cls = classify(g, rewrite_attention, &library, target.tiled_min_rows());
    library::absorb_roundings(g, target, &library, &mut cls);
    fan_in::limit(g, &mut cls, target.limits.max_bindings);
    let mut l = Lowering {
        g,
        target,
        cls,
        lbuf: vec![None; g.values().len()],
        component_bufs: HashMap::new(),
        bufs: Vec::new(),
        tables: HashMap::new(),
        expert_rows: HashMap::new(),
        kernels: Vec::new(),
        kernel_index: HashMap::new(),
        dispatches: Vec::new(),
        collectives: Vec::new(),
        library,
        contractions: Vec::new(),
        done: std::collections::HashSet::new(),
        deferred: HashMap::new(),
        deferred_to: HashMap::new(),
    };
    l.bind_inputs()?;
    for (i, e) in g.eqns().iter().enumerate() {
        if l.done.contains(&i) {
            continue;
        }
        match l.cls.placement[e.out.index()] {
            Placement::Inline | Placement::Input | Placement::RowReduce | Placement::Absorbed => {}
            Placement::View => {
                let src = l.buffer_of(e.inputs[0])?;
                l.lbuf[e.out.index()] = Some(src);
            }
            Placement::Materialized => l.emit(i)?,
        }
    }
    l.finish_states()?;
    l.into_plan()
}

impl<'g> Lowering<'g> {
    /// The collective `op` of eqn `i` (an all-reduce, a broadcast): a collective step from its
    /// operand's buffer into its own (the identity, as a copy, for a group of one). Refused
    /// unless the target is one rank of a group of exactly the op's size.
    fn emit_collective(&mut self, i: usize, op: CollectiveOp) -> Result<(), PlanError> {
        let e = &self.g.eqns()[i];
        let (v, x) = (e.out, e.inputs[0]);
        let group_ranks = self.target.limits.group_ranks;
        let ranks = op.ranks();
        if ranks != group_ranks {
            return Err(PlanError::GroupRanks {
                backend: self.target.backend,
                label: self.label(v),
                what: op.what(),
                ranks,
                group_ranks,
            });
        }
        let src = self.materialized(x)?;
        let dst = self.scratch_for(v)?;
        if ranks == 1 {
            return self.emit_copy(v, src, dst);
        }
        self.collectives.push((
            self.dispatches.len(),
            PlannedCollective {
                op,
                src,
                dst,
                n_elems: u64::from(self.n_elems(v)?),
                label: self.label(v),
            },
        ));
        Ok(())
    }

    /// The buffer of `v`, computing it into one of its own first when kernels compute it in
    /// place (a collective reads buffers, not elements).
    fn materialized(&mut self, v: ValueId) -> Result<LBuf, PlanError> {
        if let Some(b) = self.lbuf[v.index()] {
            return Ok(b);
        }
        let eqn = self.cls.producer[v.index()].ok_or_else(|| PlanError::Unplaced {
            label: self.label(v),
        })?;
        match self.cls.placement[v.index()] {
            Placement::Inline => {
                self.cls.placement[v.index()] = Placement::Materialized;
                self.emit_elementwise(eqn)?;
            }
            Placement::RowReduce => {
                self.cls.placement[v.index()] = Placement::Materialized;
                self.emit_reduce(eqn)?;
            }
            Placement::Input | Placement::Materialized | Placement::View | Placement::Absorbed => {}
        }
        self.buffer_of(v)
    }

    fn label(&self, v: ValueId) -> String {
        let info = &self.g.values()[v.index()];
        if info.label.is_empty() {
            v.to_string()
        } else {
            info.label.clone()
        }
    }

    fn producer_of(&self, v: ValueId) -> Result<&'g Eqn, PlanError> {
        let g = self.g;
        self.cls.producer[v.index()]
            .map(|i| &g.eqns()[i])
            .ok_or_else(|| PlanError::Unplaced {
                label: self.label(v),
            })
    }

    fn buffer_of(&self, v: ValueId) -> Result<LBuf, PlanError> {
        self.lbuf[v.index()].ok_or_else(|| PlanError::Unplaced {
            label: self.label(v),
        })
    }

    fn unsupported(&self, op: &'static str, v: ValueId, dtype: DType) -> PlanError {
        PlanError::UnsupportedType {
            backend: self.target.backend,
            op,
            label: self.label(v),
            dtype,
        }
    }

    fn block_format(&self, g: GgmlType, v: ValueId) -> Result<BlockFormat, PlanError> {
        match g.packed_format() {
            Ok(Some(PackedFormat::Block(b))) => Ok(b),
            _ => Err(self.unsupported("decode", v, DType::Packed(g))),
        }
    }

    pub(super) fn new_buffer(&mut self, role: BufferRole, size_bytes: u64) -> LBuf {
        self.bufs.push(LBufInfo {
            role,
            size_bytes,
            halves: false,
        });
        LBuf(self.bufs.len() as u32 - 1)
    }

    /// Whether buffer `b` holds f16 elements two to a word.
    pub(super) fn halves(&self, b: LBuf) -> bool {
        self.bufs[b.0 as usize].halves
    }

    fn table_buffer(&mut self, t: FormatTable) -> LBuf {
        if let Some(&b) = self.tables.get(&t) {
            return b;
        }
        let words = dequant::table_words(t);
        let size = 4 * words.len() as u64;
        let b = self.new_buffer(BufferRole::Table { words }, size);
        self.tables.insert(t, b);
        b
    }

    /// Element count of `v`, checked against 32-bit kernel indexing.
    fn n_elems(&self, v: ValueId) -> Result<u32, PlanError> {
        let n = self.g.values()[v.index()]
            .ty
            .shape
            .n_elems()
            .unwrap_or(usize::MAX) as u64;
        u32::try_from(n).map_err(|_| PlanError::IndexOverflow {
            label: self.label(v),
            n_elems: n,
        })
    }

    /// A buffer of `size_bytes` for a value, refused when it exceeds the target's limit.
    pub(super) fn check_size(&self, v: ValueId, size_bytes: u64) -> Result<(), PlanError> {
        let limit = self.target.limits.max_buffer_bytes;
        if size_bytes <= limit {
            return Ok(());
        }
        let info = &self.g.values()[v.index()];
        Err(match &info.storage {
            Storage::Const(name) => PlanError::ConstantTooLarge {
                backend: self.target.backend,
                name: name.clone(),
                needed_bytes: size_bytes,
                limit_bytes: limit,
            },
            Storage::Slot(_) | Storage::State(_) | Storage::Device => PlanError::ValueTooLarge {
                backend: self.target.backend,
                label: self.label(v),
                needed_bytes: size_bytes,
                limit_bytes: limit,
            },
        })
    }

    fn bind_inputs(&mut self) -> Result<(), PlanError> {
        for (i, info) in self.g.values().iter().enumerate() {
            let v = ValueId(i as u32);
            let ty = &info.ty;
            let halves = matches!(info.storage, Storage::State(_)) && ty.dtype == DType::F16;
            let (role, size) = match &info.storage {
                Storage::Device => continue,
                Storage::Const(name) if matches!(ty.dtype, DType::Components(_)) => {
                    self.bind_components(v, name)?;
                    continue;
                }
                Storage::Const(name) => {
                    let size = ty
                        .size_bytes()
                        .ok_or_else(|| self.unsupported("bind", v, ty.dtype))?;
                    (
                        BufferRole::Const { name: name.clone() },
                        size.div_ceil(4) * 4,
                    )
                }
                Storage::Slot(slot) => (
                    BufferRole::Slot { slot: slot.clone() },
                    4 * self.n_elems(v)? as u64,
                ),
                // An f16 state (a KV cache) is stored as halves: half the memory and traffic.
                Storage::State(name) => (
                    BufferRole::State { name: name.clone() },
                    if halves {
                        (self.n_elems(v)? as u64).div_ceil(2) * 4
                    } else {
                        4 * self.n_elems(v)? as u64
                    },
                ),
            };
            self.check_size(v, size)?;
            let b = self.new_buffer(role, size.max(4));
            self.bufs[b.0 as usize].halves = halves;
            self.lbuf[i] = Some(b);
        }
        Ok(())
    }

    /// One constant buffer per component of the component-format constant `v` (named
    /// [`component_const_name`]), each checked against the target's buffer limit.
    fn bind_components(&mut self, v: ValueId, name: &str) -> Result<(), PlanError> {
        let ty = &self.g.values()[v.index()].ty;
        let DType::Components(format) = ty.dtype else {
            return Err(self.unsupported("bind", v, ty.dtype));
        };
        let specs = format
            .components(ty.dims())
            .map_err(|_| self.unsupported("bind", v, ty.dtype))?;
        let limit = self.target.limits.max_buffer_bytes;
        let mut bufs = Vec::with_capacity(specs.len());
        for c in specs {
            let full = component_const_name(name, c.name);
            let size = c
                .n_bytes()
                .map(|b| (b as u64).div_ceil(4) * 4)
                .ok_or_else(|| self.unsupported("bind", v, ty.dtype))?;
            if size > limit {
                return Err(PlanError::ConstantTooLarge {
                    backend: self.target.backend,
                    name: full,
                    needed_bytes: size,
                    limit_bytes: limit,
                });
            }
            let b = self.new_buffer(BufferRole::Const { name: full }, size.max(4));
            bufs.push((c.name, b));
        }
        self.lbuf[v.index()] = bufs.first().map(|&(_, b)| b);
        self.component_bufs.insert(v.index(), bufs);
        Ok(())
    }

    /// The buffers of the component-format constant `v`'s components, by role.
    fn component_buffers(&self, v: ValueId) -> Result<Vec<(&'static str, LBuf)>, PlanError> {
        self.component_bufs
            .get(&v.index())
            .cloned()
            .ok_or_else(|| PlanError::Unplaced {
                label: self.label(v),
            })
    }

    /// The scratch buffer of the computed value `v` (a fresh one on first call).
    fn scratch_for(&mut self, v: ValueId) -> Result<LBuf, PlanError> {
        if let Some(b) = self.lbuf[v.index()] {
            return Ok(b);
        }
        let size = 4 * self.n_elems(v)? as u64;
        self.check_size(v, size)?;
        let b = self.new_buffer(BufferRole::Scratch, size.max(4));
        self.lbuf[v.index()] = Some(b);
        Ok(b)
    }

    /// Adds a dispatch of the kernel `cx` built, sharing the compiled kernel with an identical
    /// one already planned (every layer's kernels are the same code over other buffers).
    fn push_kernel(&mut self, cx: KernelCtx, grid: [u32; 3]) -> Result<(), PlanError> {
        let (mut kernel, args, label) = cx.finish();
        kernel.validate()?;
        if args.len() as u32 > self.target.limits.max_bindings {
            return Err(PlanError::TooManyBindings {
                backend: self.target.backend,
                kernel: kernel.name.clone(),
                needed: args.len() as u32,
                limit: self.target.limits.max_bindings,
            });
        }
        let key = format!("{kernel:?}");
        let index = match self.kernel_index.get(&key) {
            Some(&i) => i,
            None => {
                kernel.name = format!("{}_{}", kernel.name, self.kernels.len());
                self.kernels.push(kernel);
                self.kernel_index.insert(key, self.kernels.len() - 1);
                self.kernels.len() - 1
            }
        };
        self.dispatches.push(PlannedDispatch {
            kernel: index,
            grid,
            args,
            label,
        });
        Ok(())
    }

    /// Makes every state output land in its state buffer: in place when the step already wrote
    /// it there, by a copy at the end otherwise.
    fn finish_states(&mut self) -> Result<(), PlanError> {
        for &(si, so) in &self.g.outputs().state {
            let (dst, src) = (self.buffer_of(si)?, self.buffer_of(so)?);
            if dst != src {
                self.emit_copy(so, src, dst)?;
            }
        }
        Ok(())
    }

    fn host_value(&self, v: ValueId) -> Result<(LBuf, HostValue), PlanError> {
        let info = &self.g.values()[v.index()];
        let words = match (&info.storage, info.ty.dtype) {
            (Storage::Const(_), DType::F32) => DeviceWords::F32,
            (Storage::Const(_), DType::I32) => DeviceWords::I32,
            (Storage::Const(_), _) => DeviceWords::Stored,
            (_, d) => crate::plan::device_words(d),
        };
        let b = self.buffer_of(v)?;
        let words = if self.halves(b) {
            DeviceWords::F16Pairs
        } else {
            words
        };
        Ok((
            b,
            HostValue {
                buffer: crate::plan::BufferId(b.0),
                ty: info.ty.clone(),
                words,
            },
        ))
    }

    /// Each component of the component-format constant `v` (named `name`) as a stored constant
    /// of its own: its buffer name and its dense type (an FP8 byte as u8).
    fn component_host_values(
        &self,
        v: ValueId,
        name: &str,
    ) -> Result<Vec<(String, HostValue)>, PlanError> {
        let ty = &self.g.values()[v.index()].ty;
        let DType::Components(format) = ty.dtype else {
            return Err(self.unsupported("bind", v, ty.dtype));
        };
        let specs = format
            .components(ty.dims())
            .map_err(|_| self.unsupported("bind", v, ty.dtype))?;
        let bufs = self.component_buffers(v)?;
        let mut out = Vec::with_capacity(specs.len());
        for (c, (_, b)) in specs.iter().zip(bufs) {
            let dtype = match c.dtype {
                DenseType::I32 => DType::I32,
                DenseType::F16 => DType::F16,
                DenseType::BF16 => DType::BF16,
                DenseType::F32 => DType::F32,
                _ => DType::U8,
            };
            out.push((
                component_const_name(name, c.name),
                HostValue {
                    buffer: crate::plan::BufferId(b.0),
                    ty: TensorType::new(dtype, c.dims.clone()),
                    words: DeviceWords::Stored,
                },
            ));
        }
        Ok(out)
    }

    fn into_plan(self) -> Result<Plan, PlanError> {
        let mut slots = Vec::new();
        let mut states = Vec::new();
        let mut consts = Vec::new();
        for (i, info) in self.g.values().iter().enumerate() {
            let v = ValueId(i as u32);
            match &info.storage {
                Storage::Slot(s) => slots.push((s.clone(), self.host_value(v)?.1)),
                Storage::State(n) => states.push((n.clone(), self.host_value(v)?.1)),
                Storage::Const(n) if matches!(info.ty.dtype, DType::Components(_)) => {
                    consts.extend(self.component_host_values(v, n)?);
                }
                Storage::Const(n) => consts.push((n.clone(), self.host_value(v)?.1)),
                Storage::Device => {}
            }
        }
        let mut outputs = Vec::new();
        for &o in &self.g.outputs().primary {
            outputs.push(self.host_value(o)?.1);
        }
        let infos: Vec<(BufferRole, u64)> = self
            .bufs
            .iter()
            .map(|b| (b.role.clone(), b.size_bytes))
            .collect();
        let pinned: Vec<LBuf> = outputs.iter().map(|o| LBuf(o.buffer.0)).collect();
        // Every step in order, collectives and library contractions among the dispatches, so
        // a buffer one of them reads or writes lives across it.
        let calls: Vec<(usize, Vec<LBuf>)> = self.call_order();
        let mut uses: Vec<&[LBuf]> = Vec::new();
        let mut next = calls.iter().peekable();
        for (i, d) in self.dispatches.iter().enumerate() {
            while let Some((_, args)) = next.next_if(|(before, _)| *before == i) {
                uses.push(args.as_slice());
            }
            uses.push(d.args.as_slice());
        }
        uses.extend(next.map(|(_, args)| args.as_slice()));
        let assignment = buffers::assign(&infos, &uses, &pinned);
        let remap = |b: crate::plan::BufferId| assignment.map[b.0 as usize];
        let slots = slots.into_iter().map(|(s, mut h)| {
            h.buffer = remap(h.buffer);
            (s, h)
        });
        let states = states.into_iter().map(|(s, mut h)| {
            h.buffer = remap(h.buffer);
            (s, h)
        });
        let consts = consts.into_iter().map(|(s, mut h)| {
            h.buffer = remap(h.buffer);
            (s, h)
        });
        let outputs = outputs
            .into_iter()
            .map(|mut h| {
                h.buffer = remap(h.buffer);
                h
            })
            .collect();
        let dispatches = self
            .dispatches
            .iter()
            .map(|d| crate::plan::Dispatch {
                kernel: d.kernel,
                grid: d.grid,
                args: d
                    .args
                    .iter()
                    .map(|a| assignment.map[a.0 as usize])
                    .collect(),
                label: d.label.clone(),
            })
            .collect();
        let collectives = self
            .collectives
            .iter()
            .map(|(before, c)| crate::plan::Collective {
                before: *before,
                op: c.op,
                src: assignment.map[c.src.0 as usize],
                dst: assignment.map[c.dst.0 as usize],
                n_elems: c.n_elems,
                label: c.label.clone(),
            })
            .collect();
        let contractions = self
            .contractions
            .iter()
            .map(
                |(before, collectives_before, c)| crate::plan::LibraryContraction {
                    before: *before,
                    collectives_before: *collectives_before,
                    operands: c.operands,
                    lhs: assignment.map[c.lhs.0 as usize],
                    weights: assignment.map[c.weights.0 as usize],
                    transpose_weights: c.transpose_weights,
                    out: assignment.map[c.out.0 as usize],
                    rows: c.rows,
                    cols: c.cols,
                    depth: c.depth,
                    label: c.label.clone(),
                },
            )
            .collect();
        Ok(Plan {
            target: self.target.clone(),
            kernels: self.kernels,
            buffers: assignment.buffers,
            dispatches,
            collectives,
            contractions,
            slots: slots.collect(),
            states: states.collect(),
            consts: consts.collect(),
            outputs,
        })
    }

    /// The buffers of the collectives and library contractions, each with the number of
    /// dispatches before it, in the order the step runs them.
    fn call_order(&self) -> Vec<(usize, Vec<LBuf>)> {
        // A contraction runs before the collective its count of collectives names.
        let mut calls: Vec<((usize, usize, u8), Vec<LBuf>)> = self
            .collectives
            .iter()
            .enumerate()
            .map(|(j, (before, c))| ((*before, j, 1), vec![c.src, c.dst]))
            .chain(self.contractions.iter().map(|(before, collectives, c)| {
                ((*before, *collectives, 0), vec![c.lhs, c.weights, c.out])
            }))
            .collect();
        calls.sort_by_key(|(key, _)| *key);
        calls
            .into_iter()
            .map(|((before, _, _), args)| (before, args))
            .collect()
    }

    /// Emits the kernel(s) computing materialized eqn `i`.
    fn emit(&mut self, i: usize) -> Result<(), PlanError> {
        let e = &self.g.eqns()[i];
        match &e.op {
            OpKind::DynamicUpdateSlice => self.emit_update_group(i),
            OpKind::ScatterUpdate { .. } => self.emit_update_group(i),
            OpKind::Reduce { .. } | OpKind::ArgMax { .. } => self.emit_reduce(i),
            OpKind::ArgTopK { k } => self.emit_top_k(i, *k),
            OpKind::MatMul { transpose_rhs } => match self.cls.attention.get(&i).cloned() {
                Some(a) => self.emit_attention(&a),
                None if self.library.contains(&i) => self.emit_library_contraction(i),
                None => self.emit_sibling_matmuls(i, *transpose_rhs),
            },
            OpKind::IndexedMatMul => self.emit_routed(i),
            OpKind::AllReduceSum { ranks } => {
                self.emit_collective(i, CollectiveOp::AllReduceSum { ranks: *ranks })
            }
            OpKind::BroadcastFrom { root, ranks } => self.emit_collective(
                i,
                CollectiveOp::Broadcast {
                    root: *root,
                    ranks: *ranks,
                },
            ),
            OpKind::Literal(_)
            | OpKind::Iota { .. }
            | OpKind::Unary(_)
            | OpKind::Binary(_)
            | OpKind::Compare(_)
            | OpKind::Select
            | OpKind::Cast { .. }
            | OpKind::Reshape { .. }
            | OpKind::Broadcast { .. }
            | OpKind::Transpose { .. }
            | OpKind::Slice { .. }
            | OpKind::Concat { .. }
            | OpKind::Gather { .. }
            | OpKind::TakeAlong { .. }
            | OpKind::DynamicSlice { .. } => self.emit_elementwise(i),
        }
    }
}
