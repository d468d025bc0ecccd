//! The weight map: which checkpoint tensor (or computed table) fills each typed role a graph
//! names. Graphs name constants by role (`w.l3.attn.q`), never by checkpoint spelling; the
//! family's name table holds the spelling.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;
use std::ops::Range;

use poot_formats::{DenseType, FP4_GROUP_ELEMS, GgmlType, PackedFormat, StoredType};
use poot_graph_ir::{Builder, ComponentFormat, DType, TensorType, Traced, component_const_name};
use poot_load::{Checkpoint, ConfigSource, LinearWeight, WeightStore};

use crate::config::SourceKind;
use crate::error::{ModelError, TraceError};
use crate::table::{ComputedTable, Formula};

/// What a weight does in the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Role {
    TokenEmbed,
    PositionEmbed,
    TokenTypeEmbed,
    EmbedNorm,
    EmbedNormBias,
    FinalNorm,
    FinalNormBias,
    Head,
    AttnNorm,
    AttnNormBias,
    AttnQ,
    AttnQBias,
    AttnK,
    AttnKBias,
    AttnV,
    AttnVBias,
    AttnO,
    AttnOBias,
    QNorm,
    KNorm,
    PostAttnNorm,
    PostAttnNormBias,
    FfnNorm,
    FfnNormBias,
    PostFfnNorm,
    PostFfnNormBias,
    FfnGate,
    FfnUp,
    FfnUpBias,
    FfnDown,
    FfnDownBias,
    /// A learned sink logit per query head, `[heads]` (gpt-oss).
    AttnSinks,
    /// A mixture-of-experts layer's router, `[experts, hidden]`.
    Router,
    /// The router's bias, `[experts]` (gpt-oss).
    RouterBias,
    /// The routed experts' gate, up and down projections stacked `[experts, out, in]`.
    ExpertGate,
    ExpertUp,
    ExpertDown,
    /// The gate and up stacks fused along the output rows, `[experts, 2 * out, in]`, gate first
    /// (Granite-MoE's `input_linear`).
    ExpertGateUp,
    /// Each expert's bias on its fused gate and up rows, `[experts, 2 * out]` (gpt-oss).
    ExpertGateUpBias,
    /// Each expert's bias on its down projection, `[experts, hidden]` (gpt-oss).
    ExpertDownBias,
    /// Each expert's bias on its gate and on its up rows, `[experts, out]` each, beside
    /// separate gate and up stacks (gpt-oss as llama.cpp's converter splits it).
    ExpertGateBias,
    ExpertUpBias,
    /// A shared expert's gate, up and down projections: a SwiGLU every token runs beside its
    /// routed experts (Qwen2-MoE).
    SharedGate,
    SharedUp,
    SharedDown,
    /// The shared expert's gate logit `[1, hidden]`: its output is scaled by the logit's sigmoid.
    SharedGateLogit,
    Pooler,
    PoolerBias,
    Classifier,
    ClassifierBias,
    /// Rotary cosine table number `n` (a model may use several thetas).
    RopeCos(u8),
    RopeSin(u8),
    /// ALiBi's slope per query head, `[heads, 1]`, computed from the config (MPT, BLOOM).
    AlibiSlopes,
}

impl Role {
    pub fn name(self) -> String {
        let s = match self {
            Role::TokenEmbed => "embed",
            Role::PositionEmbed => "embed.pos",
            Role::TokenTypeEmbed => "embed.type",
            Role::EmbedNorm => "embed.norm",
            Role::EmbedNormBias => "embed.norm.bias",
            Role::FinalNorm => "final_norm",
            Role::FinalNormBias => "final_norm.bias",
            Role::Head => "head",
            Role::AttnNorm => "attn_norm",
            Role::AttnNormBias => "attn_norm.bias",
            Role::AttnQ => "attn.q",
            Role::AttnQBias => "attn.q.bias",
            Role::AttnK => "attn.k",
            Role::AttnKBias => "attn.k.bias",
            Role::AttnV => "attn.v",
            Role::AttnVBias => "attn.v.bias",
            Role::AttnO => "attn.o",
            Role::AttnOBias => "attn.o.bias",
            Role::QNorm => "attn.q_norm",
            Role::KNorm => "attn.k_norm",
            Role::PostAttnNorm => "post_attn_norm",
            Role::PostAttnNormBias => "post_attn_norm.bias",
            Role::FfnNorm => "ffn_norm",
            Role::FfnNormBias => "ffn_norm.bias",
            Role::PostFfnNorm => "post_ffn_norm",
            Role::PostFfnNormBias => "post_ffn_norm.bias",
            Role::FfnGate => "ffn.gate",
            Role::FfnUp => "ffn.up",
            Role::FfnUpBias => "ffn.up.bias",
            Role::FfnDown => "ffn.down",
            Role::FfnDownBias => "ffn.down.bias",
            Role::AttnSinks => "attn.sinks",
            Role::Router => "ffn.router",
            Role::RouterBias => "ffn.router.bias",
            Role::ExpertGate => "ffn.experts.gate",
            Role::ExpertUp => "ffn.experts.up",
            Role::ExpertDown => "ffn.experts.down",
            Role::ExpertGateUp => "ffn.experts.gate_up",
            Role::ExpertGateUpBias => "ffn.experts.gate_up.bias",
            Role::ExpertDownBias => "ffn.experts.down.bias",
            Role::ExpertGateBias => "ffn.experts.gate.bias",
            Role::ExpertUpBias => "ffn.experts.up.bias",
            Role::SharedGate => "ffn.shared.gate",
            Role::SharedUp => "ffn.shared.up",
            Role::SharedDown => "ffn.shared.down",
            Role::SharedGateLogit => "ffn.shared.gate_logit",
            Role::Pooler => "pooler",
            Role::PoolerBias => "pooler.bias",
            Role::Classifier => "classifier",
            Role::ClassifierBias => "classifier.bias",
            Role::RopeCos(n) => return format!("rope{n}.cos"),
            Role::RopeSin(n) => return format!("rope{n}.sin"),
            Role::AlibiSlopes => "alibi.slopes",
        };
        s.to_string()
    }
}

/// A role in a layer (`layer: None` for model-wide weights).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct WeightRole {
    pub layer: Option<usize>,
    pub role: Role,
}

impl WeightRole {
    pub fn global(role: Role) -> WeightRole {
        WeightRole { layer: None, role }
    }

    pub fn layer(layer: usize, role: Role) -> WeightRole {
        WeightRole {
            layer: Some(layer),
            role,
        }
    }

    /// The graph constant's name: `w.l3.attn.q`, `w.embed`.
    pub fn const_name(self) -> String {
        match self.layer {
            Some(l) => format!("w.l{l}.{}", self.role.name()),
            None => format!("w.{}", self.role.name()),
        }
    }
}

impl fmt::Display for WeightRole {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.const_name())
    }
}

/// Where a bound constant's data comes from.
#[derive(Clone, Debug, PartialEq)]
pub enum WeightSource {
    /// A checkpoint tensor as stored, or a range of its rows (a fused projection's part, a
    /// tensor-parallel rank's heads) and of each row's elements (a rank's input features).
    Tensor {
        name: String,
        rows: Option<Range<u64>>,
        cols: Option<Range<u64>>,
    },
    /// A table the family computes from the config (rotary angles), on first read.
    Table(ComputedTable),
    /// Per-expert checkpoint tensors (each `[out, in]`, one stored dtype) read as one
    /// `[experts, out, in]` stack: their stored bytes concatenated in expert order.
    Stacked { experts: Vec<String> },
    /// An expert stack stored as transformers' MXFP4 (`blocks`: E2M1 codes two a byte, even
    /// element low; `scales`: one E8M0 byte per 32 codes), read as ggml's MXFP4 blocks: the
    /// codes and scale bytes moved into that layout when uploaded, never decoded.
    Mxfp4Blocks { blocks: String, scales: String },
    /// `runs` runs of `run` consecutive rows of a checkpoint tensor, the first from row `start`
    /// and each `period` rows after the one before: one part of a projection whose parts
    /// interleave per head (BLOOM's `query_key_value` stores each head's query, key and value
    /// rows together), read as that part's rows in order. Their stored bytes are copied
    /// together when uploaded.
    Strided {
        name: String,
        start: u64,
        run: u64,
        period: u64,
        runs: u64,
    },
    /// A component-format constant (a GPTQ, AWQ, FP8 or FP4 linear): each component's role
    /// and the checkpoint tensor that stores it (or a tensor-parallel rank's slice of it), in
    /// the format's order.
    Components(Vec<ComponentSource>),
}

/// One component of a component-format constant: its role (`qweight`), the checkpoint tensor
/// storing it, and the range of its rows and of each row's elements a rank reads (in the
/// component tensor's own elements: packed words, groups, scale tiles), `None` for all.
#[derive(Clone, Debug, PartialEq)]
pub struct ComponentSource {
    pub role: &'static str,
    pub tensor: String,
    pub rows: Option<Range<u64>>,
    pub cols: Option<Range<u64>>,
}

/// One bound constant.
#[derive(Clone, Debug, PartialEq)]
pub struct WeightEntry {
    pub role: WeightRole,
    pub ty: TensorType,
    pub source: WeightSource,
}

/// A bound constant's data, as the weight store holds it.
#[derive(Clone, Debug)]
pub enum ConstData<'s> {
    /// Stored bytes (little-endian words or packed blocks), no alignment promised.
    Bytes(&'s [u8]),
    /// Stored bytes of a column range of every row, copied together (a tensor-parallel rank's
    /// slice of a row-parallel weight): still as stored, never converted.
    Gathered(Vec<u8>),
    /// A computed f32 table.
    F32(&'s [f32]),
    /// A component-format constant's components: each role and its stored bytes (a slice's
    /// column range gathered into a copy), in the format's order.
    Components(Vec<(&'static str, Cow<'s, [u8]>)>),
}

/// Shape and stored type of a checkpoint tensor, without its bytes.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorMeta {
    pub shape: Vec<u64>,
    pub stored: StoredType,
}

/// A linear layer a checkpoint stores in a component format: the format, its logical
/// `[out, in]` shape, and the tensor holding each component, by role in the format's order.
#[derive(Clone, Debug, PartialEq)]
pub struct PackedLinearMeta {
    pub format: PackedFormat,
    pub shape: [u64; 2],
    pub components: Vec<(&'static str, String)>,
}

/// What a family needs to know about a checkpoint's tensors to build its weight map: their
/// shapes and stored types, and which linears are stored in a component format. A weight store
/// and a checkpoint are indexes; a synthetic index (for planning a model at real dimensions
/// without its bytes) is another.
pub trait TensorIndex {
    fn tensor_meta(&self, name: &str) -> Option<TensorMeta>;

    /// The linear whose dense weight would be `{prefix}.weight`, when the checkpoint stores it
    /// in a component format (GPTQ, AWQ, FP8, FP4); `Ok(None)` when it is dense, absent, or the
    /// index knows no quantization (a bare weight store).
    fn packed_linear(&self, prefix: &str) -> Result<Option<PackedLinearMeta>, ModelError> {
        let _ = prefix;
        Ok(None)
    }
}

impl TensorIndex for WeightStore {
    fn tensor_meta(&self, name: &str) -> Option<TensorMeta> {
        self.get(name).map(|t| TensorMeta {
            shape: t.shape().to_vec(),
            stored: t.stored_type(),
        })
    }
}

/// A checkpoint knows its quantization config, so it also finds the Hugging Face packed
/// linears (`X.qweight`, `X.weight_packed`, an F8_E4M3 `X.weight` with its scale).
impl TensorIndex for Checkpoint {
    fn tensor_meta(&self, name: &str) -> Option<TensorMeta> {
        self.store().tensor_meta(name)
    }

    fn packed_linear(&self, prefix: &str) -> Result<Option<PackedLinearMeta>, ModelError> {
        if matches!(self.config(), ConfigSource::Gguf(_)) {
            return Ok(None);
        }
        let packed_here = self.store().contains(&format!("{prefix}.qweight"))
            || self.store().contains(&format!("{prefix}.weight_packed"))
            || self
                .store()
                .get(&format!("{prefix}.weight"))
                .is_some_and(|t| {
                    matches!(
                        t.stored_type(),
                        StoredType::Dense(DenseType::F8E4M3 | DenseType::F8E5M2)
                    )
                });
        if !packed_here {
            return Ok(None);
        }
        let LinearWeight::Quantized(l) = self.linear(prefix)? else {
            return Ok(None);
        };
        let p = l.packed().map_err(poot_load::LoadError::from)?;
        Ok(Some(PackedLinearMeta {
            format: p.format,
            shape: [p.shape.n_rows as u64, p.shape.k_cols as u64],
            components: p
                .components
                .iter()
                .map(|(role, t)| (*role, t.name().to_string()))
                .collect(),
        }))
    }
}

/// The element type a graph declares for a tensor stored as `stored`, when the graph can read it.
pub fn graph_dtype(stored: StoredType) -> Option<DType> {
    match stored {
        StoredType::Dense(DenseType::F32) | StoredType::Ggml(GgmlType::F32) => Some(DType::F32),
        StoredType::Dense(DenseType::F16) | StoredType::Ggml(GgmlType::F16) => Some(DType::F16),
        StoredType::Dense(DenseType::BF16) | StoredType::Ggml(GgmlType::BF16) => Some(DType::BF16),
        StoredType::Dense(DenseType::I32) | StoredType::Ggml(GgmlType::I32) => Some(DType::I32),
        StoredType::Dense(DenseType::U8) => Some(DType::U8),
        StoredType::Ggml(g) if g.block_elems() > 1 => Some(DType::Packed(g)),
        StoredType::Dense(_) | StoredType::Ggml(_) => None,
    }
}

/// Checkpoint spellings of a role: `{l}` stands for the layer index.
#[derive(Clone, Copy, Debug)]
pub struct Spelling {
    pub role: Role,
    pub hf: &'static str,
    pub gguf: &'static str,
}

pub const fn spell(role: Role, hf: &'static str, gguf: &'static str) -> Spelling {
    Spelling { role, hf, gguf }
}

/// A family's name table: the checkpoint spelling of every role it reads. A table may extend a
/// base table, overriding the roles it spells itself.
#[derive(Clone, Copy, Debug)]
pub struct NameTable {
    pub own: &'static [Spelling],
    pub base: Option<&'static NameTable>,
    /// Replaces `{p}` in every spelling (a checkpoint that nests the model under `bert.`).
    pub prefix: &'static str,
}

impl NameTable {
    pub const fn new(own: &'static [Spelling]) -> NameTable {
        NameTable {
            own,
            base: None,
            prefix: "",
        }
    }

    pub const fn extending(base: &'static NameTable, own: &'static [Spelling]) -> NameTable {
        NameTable {
            own,
            base: Some(base),
            prefix: "",
        }
    }

    /// This table with `{p}` spelled as `prefix`.
    pub const fn with_prefix(self, prefix: &'static str) -> NameTable {
        NameTable { prefix, ..self }
    }

    fn spelling(&self, role: Role) -> Option<&Spelling> {
        self.own
            .iter()
            .find(|s| s.role == role)
            .or_else(|| self.base.and_then(|b| b.spelling(role)))
    }

    /// The tensor name of expert `expert`'s part of `role` in `layer`, when the checkpoint of
    /// `kind` stores one tensor per expert (its spelling has `{e}`); `None` when it stores the
    /// experts as one stack.
    pub fn expert_name(
        &self,
        kind: SourceKind,
        layer: usize,
        role: Role,
        expert: usize,
    ) -> Option<String> {
        let name = self.name(kind, Some(layer), role)?;
        name.contains("{e}")
            .then(|| name.replace("{e}", &expert.to_string()))
    }

    /// The tensor name of `role` (in `layer`) for a checkpoint of `kind`.
    pub fn name(&self, kind: SourceKind, layer: Option<usize>, role: Role) -> Option<String> {
        let s = self.spelling(role)?;
        let pattern = match kind {
            SourceKind::HuggingFace => s.hf,
            SourceKind::Gguf => s.gguf,
        };
        if pattern.is_empty() {
            return None;
        }
        let name = pattern.replace("{p}", self.prefix);
        Some(match layer {
            Some(l) => name.replace("{l}", &l.to_string()),
            None => name,
        })
    }
}

/// How a fused projection's parts sit in its stored rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FusedRows {
    /// Each part's rows follow the part before (`[q; k; v]`).
    Consecutive,
    /// Each head's rows of every part follow the head before (`[heads, parts, head rows]`,
    /// BLOOM's `query_key_value`): part `i` of head `h` starts at `h * (rows / heads)` plus the
    /// rows per head of the parts before it.
    PerHead { heads: u64 },
}

/// A fused projection to bind as its parts: each part's role and row count, the columns of
/// each row (`None` for a fused bias), and how the parts' rows interleave.
#[derive(Clone, Copy, Debug)]
pub struct FusedParts<'a> {
    pub parts: &'a [(Role, u64)],
    pub cols: Option<u64>,
    pub rows: FusedRows,
}

/// Every constant a model's graphs may name, by role.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct WeightMap {
    entries: BTreeMap<WeightRole, WeightEntry>,
}

impl WeightMap {
    pub fn new() -> WeightMap {
        WeightMap::default()
    }

    pub fn get(&self, role: WeightRole) -> Option<&WeightEntry> {
        self.entries.get(&role)
    }

    pub fn has(&self, role: WeightRole) -> bool {
        self.entries.contains_key(&role)
    }

    pub fn iter(&self) -> impl Iterator<Item = &WeightEntry> {
        self.entries.values()
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The entry a graph constant name refers to.
    pub fn by_const(&self, const_name: &str) -> Option<&WeightEntry> {
        self.entries
            .values()
            .find(|e| e.role.const_name() == const_name)
    }

    /// Declares the constant of `role` in a trace (once per graph).
    pub fn declare(&self, b: &Builder, role: WeightRole) -> Result<Traced, TraceError> {
        let e = self.get(role).ok_or_else(|| TraceError::UnknownWeight {
            name: role.const_name(),
        })?;
        Ok(b.constant(&role.const_name(), e.ty.clone())?)
    }

    /// Declares the constant of `role` when the model has it (an optional bias, say).
    pub fn declare_opt(&self, b: &Builder, role: WeightRole) -> Result<Option<Traced>, TraceError> {
        if self.has(role) {
            self.declare(b, role).map(Some)
        } else {
            Ok(None)
        }
    }

    /// Binds `role` to a checkpoint tensor, checking its shape when `expected` is given. A
    /// linear the index stores in a component format (`name` is `X.weight` and the checkpoint
    /// holds `X.qweight`, say) binds as one component-format constant over its components, as
    /// stored.
    pub fn bind_tensor(
        &mut self,
        index: &dyn TensorIndex,
        role: WeightRole,
        name: &str,
        expected: Option<&[u64]>,
    ) -> Result<(), ModelError> {
        if let Some(prefix) = name.strip_suffix(".weight")
            && let Some(linear) = index.packed_linear(prefix)?
        {
            return self.bind_packed(role, name, linear, expected);
        }
        let meta = index
            .tensor_meta(name)
            .ok_or_else(|| ModelError::MissingTensor {
                name: name.to_string(),
                role: role.const_name(),
            })?;
        if let Some(want) = expected
            && want != meta.shape.as_slice()
        {
            return Err(ModelError::TensorShape {
                name: name.to_string(),
                expected: want.to_vec(),
                found: meta.shape,
            });
        }
        // Every dense weight, bias, norm and table is read as floats (block formats come through
        // `bind_packed` or as `Packed`): an integer tensor here is a broken checkpoint.
        let dtype = graph_dtype(meta.stored)
            .filter(|d| !matches!(d, DType::I32 | DType::U8))
            .ok_or(ModelError::TensorType {
                name: name.to_string(),
                stored: meta.stored.name(),
            })?;
        let dims = meta
            .shape
            .iter()
            .map(|&d| usize::try_from(d))
            .collect::<Result<Vec<usize>, _>>()
            .map_err(|_| ModelError::TensorShape {
                name: name.to_string(),
                expected: Vec::new(),
                found: meta.shape.clone(),
            })?;
        let ty = TensorType::new(dtype, dims);
        self.entries.insert(
            role,
            WeightEntry {
                role,
                ty,
                source: WeightSource::Tensor {
                    name: name.to_string(),
                    rows: None,
                    cols: None,
                },
            },
        );
        Ok(())
    }

    /// Binds `role` to a component-format linear stored in place of `name`.
    fn bind_packed(
        &mut self,
        role: WeightRole,
        name: &str,
        linear: PackedLinearMeta,
        expected: Option<&[u64]>,
    ) -> Result<(), ModelError> {
        if let Some(want) = expected
            && want != linear.shape.as_slice()
        {
            return Err(ModelError::TensorShape {
                name: name.to_string(),
                expected: want.to_vec(),
                found: linear.shape.to_vec(),
            });
        }
        let format = ComponentFormat::new(linear.format).ok_or(ModelError::TensorType {
            name: name.to_string(),
            stored: "GGUF blocks in place of a Hugging Face linear",
        })?;
        let dims = linear
            .shape
            .iter()
            .map(|&d| usize::try_from(d))
            .collect::<Result<Vec<usize>, _>>()
            .map_err(|_| ModelError::TensorShape {
                name: name.to_string(),
                expected: Vec::new(),
                found: linear.shape.to_vec(),
            })?;
        self.entries.insert(
            role,
            WeightEntry {
                role,
                ty: TensorType::new(DType::Components(format), dims),
                source: WeightSource::Components(
                    linear
                        .components
                        .into_iter()
                        .map(|(role, tensor)| ComponentSource {
                            role,
                            tensor,
                            rows: None,
                            cols: None,
                        })
                        .collect(),
                ),
            },
        );
        Ok(())
    }

    /// Binds `role` to a stack of `experts` expert matrices, each `[out, in]` = `expert_shape`:
    /// the stored `[experts, out, in]` tensor (GGUF, any format the graph reads), or one
    /// tensor per expert (Hugging Face, `{e}` in the spelling), stacked as stored when every
    /// one is present, of that shape and of one dense type. `count_key` is the config key the
    /// expert count came from, named when the checkpoint holds more experts than it says.
    #[allow(clippy::too_many_arguments)]
    pub fn bind_experts(
        &mut self,
        index: &dyn TensorIndex,
        table: &NameTable,
        kind: SourceKind,
        role: WeightRole,
        experts: usize,
        expert_shape: [u64; 2],
        count_key: &str,
    ) -> Result<(), ModelError> {
        let layer = role.layer.unwrap_or(0);
        let missing = |name: String| ModelError::MissingTensor {
            name,
            role: role.const_name(),
        };
        let Some(first) = table.expert_name(kind, layer, role.role, 0) else {
            let name = table
                .name(kind, role.layer, role.role)
                .ok_or_else(|| missing(format!("<no {kind:?} spelling>")))?;
            // A stored stack is contracted as it is: a float or a block format, never integers.
            if let Some(meta) = index.tensor_meta(&name)
                && !matches!(
                    graph_dtype(meta.stored),
                    Some(DType::F32 | DType::F16 | DType::BF16 | DType::Packed(_))
                )
            {
                return Err(ModelError::TensorType {
                    name,
                    stored: meta.stored.name(),
                });
            }
            let [n, k] = expert_shape;
            return self.bind_tensor(index, role, &name, Some(&[experts as u64, n, k]));
        };
        let mut names = Vec::with_capacity(experts);
        let mut dtype = None;
        for e in 0..experts {
            let name = table
                .expert_name(kind, layer, role.role, e)
                .unwrap_or_else(|| first.clone());
            if let Some(prefix) = name.strip_suffix(".weight")
                && index.packed_linear(prefix)?.is_some()
            {
                return Err(ModelError::TensorType {
                    name,
                    stored: "a quantized per-expert linear (expert stacks read f32, f16 or bf16)",
                });
            }
            let meta = index
                .tensor_meta(&name)
                .ok_or_else(|| missing(name.clone()))?;
            if meta.shape != expert_shape {
                return Err(ModelError::TensorShape {
                    name,
                    expected: expert_shape.to_vec(),
                    found: meta.shape,
                });
            }
            let here = match graph_dtype(meta.stored) {
                Some(d @ (DType::F32 | DType::F16 | DType::BF16)) => d,
                _ => {
                    return Err(ModelError::TensorType {
                        name,
                        stored: meta.stored.name(),
                    });
                }
            };
            match dtype {
                Some((d, first_stored)) if d != here => {
                    return Err(ModelError::ExpertType {
                        name,
                        stored: meta.stored.name(),
                        first,
                        first_stored,
                    });
                }
                Some(_) => {}
                None => dtype = Some((here, meta.stored.name())),
            }
            names.push(name);
        }
        if let Some(extra) = table.expert_name(kind, layer, role.role, experts)
            && index.tensor_meta(&extra).is_some()
        {
            return Err(ModelError::ExpertCount {
                key: count_key.to_string(),
                declared: experts,
                tensor: extra,
            });
        }
        let (dtype, _) = dtype.ok_or_else(|| missing(first))?;
        let [n, k] = expert_shape.map(|d| usize::try_from(d).unwrap_or(usize::MAX));
        self.entries.insert(
            role,
            WeightEntry {
                role,
                ty: TensorType::new(dtype, vec![experts, n, k]),
                source: WeightSource::Stacked { experts: names },
            },
        );
        Ok(())
    }

    /// Binds `role` to a stack of `experts` expert matrices, each `[out, in]` = `expert_shape`,
    /// stored as transformers' MXFP4 (gpt-oss's released checkpoints): `{stack}_blocks` U8
    /// `[experts, out, in / 32, 16]` and `{stack}_scales` U8 `[experts, out, in / 32]`, where
    /// `{stack}` is the role's spelling. The constant is an MXFP4 `[experts, out, in]` stack
    /// ([`WeightSource::Mxfp4Blocks`]), contracted packed like a GGUF's.
    pub fn bind_mxfp4_experts(
        &mut self,
        index: &dyn TensorIndex,
        table: &NameTable,
        kind: SourceKind,
        role: WeightRole,
        experts: usize,
        expert_shape: [u64; 2],
    ) -> Result<(), ModelError> {
        let stack =
            table
                .name(kind, role.layer, role.role)
                .ok_or_else(|| ModelError::MissingTensor {
                    name: format!("<no {kind:?} spelling>"),
                    role: role.const_name(),
                })?;
        let [n, k] = expert_shape;
        let (blocks, scales) = (format!("{stack}_blocks"), format!("{stack}_scales"));
        let group = FP4_GROUP_ELEMS as u64;
        if !k.is_multiple_of(group) {
            return Err(ModelError::Mxfp4Width {
                name: blocks,
                k_cols: k,
            });
        }
        let e = experts as u64;
        let want_blocks = [e, n, k / group, group / 2];
        let want_scales = [e, n, k / group];
        for (name, want) in [(&blocks, &want_blocks[..]), (&scales, &want_scales[..])] {
            let meta = index
                .tensor_meta(name)
                .ok_or_else(|| ModelError::MissingTensor {
                    name: name.clone(),
                    role: role.const_name(),
                })?;
            if meta.stored != StoredType::Dense(DenseType::U8) {
                return Err(ModelError::TensorType {
                    name: name.clone(),
                    stored: meta.stored.name(),
                });
            }
            if meta.shape != want {
                return Err(ModelError::TensorShape {
                    name: name.clone(),
                    expected: want.to_vec(),
                    found: meta.shape,
                });
            }
        }
        let dims = [e, n, k]
            .iter()
            .map(|&d| usize::try_from(d))
            .collect::<Result<Vec<usize>, _>>()
            .map_err(|_| ModelError::TensorShape {
                name: blocks.clone(),
                expected: Vec::new(),
                found: want_blocks.to_vec(),
            })?;
        self.entries.insert(
            role,
            WeightEntry {
                role,
                ty: TensorType::new(DType::Packed(GgmlType::MXFP4), dims),
                source: WeightSource::Mxfp4Blocks { blocks, scales },
            },
        );
        Ok(())
    }

    /// Adds (or replaces) an entry as it is.
    pub(crate) fn insert(&mut self, e: WeightEntry) {
        self.entries.insert(e.role, e);
    }

    /// Binds `role` to a computed f32 table.
    pub fn bind_table(&mut self, role: WeightRole, table: ComputedTable) {
        let ty = TensorType::new(DType::F32, table.dims());
        self.entries.insert(
            role,
            WeightEntry {
                role,
                ty,
                source: WeightSource::Table(table),
            },
        );
    }

    /// Cuts every rotary table to its first `positions` rows: a model narrowed to the capacity
    /// in use computes and uploads only those.
    pub fn narrow_rope_tables(&mut self, positions: usize) {
        for e in self.entries.values_mut() {
            if let WeightSource::Table(t) = &e.source
                && matches!(t.formula(), Formula::Rope { .. })
            {
                let narrowed = t.first_rows(positions);
                e.ty = TensorType::new(DType::F32, narrowed.dims());
                e.source = WeightSource::Table(narrowed);
            }
        }
    }

    /// Binds each of `parts` (a role and its row count) to consecutive row ranges of the one
    /// tensor the name table spells for the first part's role in `layer` (a fused projection:
    /// Phi-3's `qkv_proj`, its `gate_up_proj`), checking that tensor is `[sum of the rows,
    /// cols]`. A fused projection stored in a component format is refused.
    pub fn bind_fused(
        &mut self,
        index: &dyn TensorIndex,
        table: &NameTable,
        kind: SourceKind,
        layer: usize,
        parts: &[(Role, u64)],
        cols: u64,
    ) -> Result<(), ModelError> {
        let fused = FusedParts {
            parts,
            cols: Some(cols),
            rows: FusedRows::Consecutive,
        };
        self.bind_fused_parts(index, table, kind, layer, &fused)
    }

    /// Binds each of `fused.parts` to its rows of the one tensor the name table spells for the
    /// first part's role in `layer`, laid out as `fused.rows` says, checking that tensor is
    /// `[sum of the rows, cols]` (`[sum of the rows]` for a fused bias, `cols: None`). A fused
    /// projection stored in a component format is refused.
    pub fn bind_fused_parts(
        &mut self,
        index: &dyn TensorIndex,
        table: &NameTable,
        kind: SourceKind,
        layer: usize,
        fused: &FusedParts,
    ) -> Result<(), ModelError> {
        let Some(&(first, _)) = fused.parts.first() else {
            return Ok(());
        };
        let role = WeightRole::layer(layer, first);
        let total: u64 = fused.parts.iter().map(|&(_, n)| n).sum();
        let shape: Vec<u64> = match fused.cols {
            Some(cols) => vec![total, cols],
            None => vec![total],
        };
        self.bind_named(index, table, kind, role, Some(&shape))?;
        let whole = self
            .entries
            .remove(&role)
            .expect("bind_named inserted the role it was given");
        let WeightSource::Tensor { name, .. } = whole.source else {
            return Err(ModelError::TensorType {
                name: table.name(kind, Some(layer), first).unwrap_or_default(),
                stored: "a component-format linear where a fused projection is split by rows",
            });
        };
        let bad_shape = || ModelError::TensorShape {
            name: name.clone(),
            expected: shape.clone(),
            found: whole.ty.dims().iter().map(|&d| d as u64).collect(),
        };
        let width = match fused.cols {
            Some(cols) => Some(usize::try_from(cols).map_err(|_| bad_shape())?),
            None => None,
        };
        let heads = match fused.rows {
            FusedRows::Consecutive => None,
            FusedRows::PerHead { heads } => {
                // Every part must give each head the same whole number of rows.
                if heads == 0 || fused.parts.iter().any(|&(_, n)| n % heads != 0) {
                    return Err(bad_shape());
                }
                Some(heads)
            }
        };
        let mut start = 0;
        for &(r, n) in fused.parts {
            let role = WeightRole::layer(layer, r);
            let rows = usize::try_from(n).map_err(|_| bad_shape())?;
            let dims = match width {
                Some(w) => vec![rows, w],
                None => vec![rows],
            };
            let source = match heads {
                None => WeightSource::Tensor {
                    name: name.clone(),
                    rows: Some(start..start + n),
                    cols: None,
                },
                Some(h) => WeightSource::Strided {
                    name: name.clone(),
                    start,
                    run: n / h,
                    period: total / h,
                    runs: h,
                },
            };
            self.entries.insert(
                role,
                WeightEntry {
                    role,
                    ty: TensorType::new(whole.ty.dtype, dims),
                    source,
                },
            );
            start += match heads {
                None => n,
                Some(h) => n / h,
            };
        }
        Ok(())
    }

    /// Binds `role` to the tensor the family's name table spells for it.
    pub fn bind_named(
        &mut self,
        index: &dyn TensorIndex,
        table: &NameTable,
        kind: SourceKind,
        role: WeightRole,
        expected: Option<&[u64]>,
    ) -> Result<(), ModelError> {
        let name =
            table
                .name(kind, role.layer, role.role)
                .ok_or_else(|| ModelError::MissingTensor {
                    name: format!("<no {kind:?} spelling>"),
                    role: role.const_name(),
                })?;
        self.bind_tensor(index, role, &name, expected)
    }

    /// Like [`WeightMap::bind_named`], but a tensor absent from the checkpoint leaves the role
    /// unbound; returns whether it was bound.
    pub fn bind_named_opt(
        &mut self,
        index: &dyn TensorIndex,
        table: &NameTable,
        kind: SourceKind,
        role: WeightRole,
        expected: Option<&[u64]>,
    ) -> Result<bool, ModelError> {
        let Some(name) = table.name(kind, role.layer, role.role) else {
            return Ok(false);
        };
        let packed = match name.strip_suffix(".weight") {
            Some(prefix) => index.packed_linear(prefix)?.is_some(),
            None => false,
        };
        if packed || index.tensor_meta(&name).is_some() {
            self.bind_tensor(index, role, &name, expected)?;
            Ok(true)
        } else {
            Ok(false)
        }
    }

    /// The data of a graph constant, from the store (or the computed table).
    pub fn const_data<'s>(
        &'s self,
        const_name: &str,
        store: &'s WeightStore,
    ) -> Result<ConstData<'s>, ModelError> {
        let e = self
            .by_const(const_name)
            .ok_or_else(|| ModelError::MissingTensor {
                name: const_name.to_string(),
                role: const_name.to_string(),
            })?;
        match &e.source {
            WeightSource::Table(t) => Ok(ConstData::F32(t.data())),
            WeightSource::Tensor { name, rows, cols } => {
                Ok(match stored_slice(store, name, rows, cols)? {
                    Cow::Borrowed(b) => ConstData::Bytes(b),
                    Cow::Owned(b) => ConstData::Gathered(b),
                })
            }
            WeightSource::Stacked { experts } => {
                let mut bytes = Vec::new();
                for name in experts {
                    bytes.extend_from_slice(store.tensor(name)?.bytes());
                }
                Ok(ConstData::Gathered(bytes))
            }
            WeightSource::Mxfp4Blocks { blocks, scales } => {
                let (codes, exps) = (store.tensor(blocks)?, store.tensor(scales)?);
                let repacked = poot_formats::mxfp4_blocks_from_ocp(codes.bytes(), exps.bytes())
                    .map_err(|_| ModelError::TensorShape {
                        name: blocks.clone(),
                        expected: [exps.shape(), &[FP4_GROUP_ELEMS as u64 / 2]].concat(),
                        found: codes.shape().to_vec(),
                    })?;
                Ok(ConstData::Gathered(repacked))
            }
            WeightSource::Strided {
                name,
                start,
                run,
                period,
                runs,
            } => {
                let view = store.tensor(name)?;
                let mut bytes = Vec::new();
                for i in 0..*runs {
                    let first = start + i * period;
                    bytes.extend_from_slice(view.rows(first..first + run)?.bytes());
                }
                Ok(ConstData::Gathered(bytes))
            }
            WeightSource::Components(parts) => Ok(ConstData::Components(
                parts
                    .iter()
                    .map(|c| Ok((c.role, stored_slice(store, &c.tensor, &c.rows, &c.cols)?)))
                    .collect::<Result<_, ModelError>>()?,
            )),
        }
    }

    /// The names an executor uploads buffers under: every constant, a component-format one as
    /// each of its components ([`component_const_name`], `w.l0.attn.q:qweight`).
    pub fn buffer_names(&self) -> Vec<String> {
        let mut names = Vec::with_capacity(self.entries.len());
        for e in self.entries.values() {
            let name = e.role.const_name();
            match &e.source {
                WeightSource::Components(parts) => {
                    names.extend(parts.iter().map(|c| component_const_name(&name, c.role)))
                }
                WeightSource::Tensor { .. }
                | WeightSource::Table(_)
                | WeightSource::Stacked { .. }
                | WeightSource::Mxfp4Blocks { .. }
                | WeightSource::Strided { .. } => names.push(name),
            }
        }
        names
    }

    /// The stored bytes behind one of [`WeightMap::buffer_names`]: a whole constant's, or one
    /// component's.
    pub fn buffer_data<'s>(
        &'s self,
        buffer_name: &str,
        store: &'s WeightStore,
    ) -> Result<ConstData<'s>, ModelError> {
        if let Some((const_name, role)) = buffer_name.rsplit_once(':')
            && let Ok(ConstData::Components(parts)) = self.const_data(const_name, store)
        {
            return parts
                .into_iter()
                .find(|(r, _)| *r == role)
                .map(|(_, bytes)| match bytes {
                    Cow::Borrowed(b) => ConstData::Bytes(b),
                    Cow::Owned(b) => ConstData::Gathered(b),
                })
                .ok_or_else(|| ModelError::MissingTensor {
                    name: buffer_name.to_string(),
                    role: const_name.to_string(),
                });
        }
        self.const_data(buffer_name, store)
    }
}

/// The stored bytes of checkpoint tensor `name`, or of its `rows` and each row's `cols` (the
/// columns gathered into a copy).
fn stored_slice<'s>(
    store: &'s WeightStore,
    name: &str,
    rows: &Option<Range<u64>>,
    cols: &Option<Range<u64>>,
) -> Result<Cow<'s, [u8]>, ModelError> {
    let view = store.tensor(name)?;
    let view = match rows {
        Some(r) => view.rows(r.clone())?,
        None => view,
    };
    let Some(cols) = cols else {
        return Ok(Cow::Borrowed(view.bytes()));
    };
    let k = view.shape().get(1).copied().unwrap_or(0);
    crate::tensor_parallel::gather_cols(view.bytes(), view.stored_type(), k, cols)
        .filter(|_| view.shape().len() == 2)
        .map(Cow::Owned)
        .ok_or_else(|| ModelError::TensorShape {
            name: name.to_string(),
            expected: vec![view.shape().first().copied().unwrap_or(0), cols.end],
            found: view.shape().to_vec(),
        })
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    const STACK_NAMES: NameTable = NameTable::new(&[spell(Role::ExpertDown, "x.down", "")]);

    /// Tensor metadata by name, no bytes.
    struct MetaIndex(HashMap<&'static str, TensorMeta>);

    impl TensorIndex for MetaIndex {
        fn tensor_meta(&self, name: &str) -> Option<TensorMeta> {
            self.0.get(name).cloned()
        }
    }

    fn u8_meta(shape: &[u64]) -> TensorMeta {
        TensorMeta {
            shape: shape.to_vec(),
            stored: StoredType::Dense(DenseType::U8),
        }
    }

    fn bind(index: &MetaIndex, expert_shape: [u64; 2]) -> Result<WeightMap, ModelError> {
        let mut w = WeightMap::new();
        let role = WeightRole::layer(0, Role::ExpertDown);
        w.bind_mxfp4_experts(
            index,
            &STACK_NAMES,
            SourceKind::HuggingFace,
            role,
            2,
            expert_shape,
        )?;
        Ok(w)
    }

    #[test]
    fn mxfp4_blocks_bind_as_a_packed_stack_and_widths_off_the_blocks_are_refused() {
        let index = MetaIndex(HashMap::from([
            ("x.down_blocks", u8_meta(&[2, 8, 2, 16])),
            ("x.down_scales", u8_meta(&[2, 8, 2])),
        ]));
        let w = bind(&index, [8, 64]).unwrap();
        let e = w.get(WeightRole::layer(0, Role::ExpertDown)).unwrap();
        assert_eq!(e.ty.dtype, DType::Packed(GgmlType::MXFP4));
        assert_eq!(e.ty.dims(), [2, 8, 64]);
        assert_eq!(
            e.source,
            WeightSource::Mxfp4Blocks {
                blocks: "x.down_blocks".into(),
                scales: "x.down_scales".into()
            }
        );
        match bind(&index, [8, 48]) {
            Err(ModelError::Mxfp4Width { name, k_cols }) => {
                assert_eq!((name.as_str(), k_cols), ("x.down_blocks", 48));
            }
            other => panic!("expected the width refused, got {other:?}"),
        }
    }
}
