//! LoRA adapters: reading a PEFT adapter, checking it against a model, and the adapter tables a
//! step reads.
//!
//! A step compiled with a [`LoraShape`] reads, for each targeted projection of each layer, two
//! constants: `A [max_loras + 1, max_rank, in]` and `B [max_loras + 1, out, max_rank]`, and one
//! slot, each row's adapter index (`i32 [rows]`). Index 0 is "no adapter": its tables are zeros.
//! A projection adds `B[i] @ (A[i] @ x)` for each token of a row with index `i` (two per-row
//! gathered contractions, as Punica and S-LoRA do), so rows with different adapters share one
//! step. The adapter's scaling (`alpha / r`, or `alpha / sqrt(r)` with rsLoRA) is folded into
//! `B` when the tables are written, and a rank below `max_rank` is zero-padded, so the padding
//! adds nothing. The base weights are never touched, whatever their format.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use poot_formats::{DenseType, decode_dense};
use poot_load::safetensors::{SafetensorsError, SafetensorsHeader};
use serde_json::Value;

use crate::weights::{Role, WeightMap, WeightRole};

/// The adapter config file of a PEFT adapter directory.
pub const ADAPTER_CONFIG_FILE: &str = "adapter_config.json";
/// The adapter weights file of a PEFT adapter directory.
pub const ADAPTER_WEIGHTS_FILE: &str = "adapter_model.safetensors";
/// The slot holding each row's adapter index (`i32 [rows]`, 0 for none).
pub const LORA_INDEX_SLOT: &str = "lora_index";
/// The most adapters one compiled step can hold at once.
pub const MAX_LORAS_LIMIT: usize = 256;
/// The largest rank the tables can be compiled for.
pub const MAX_RANK_LIMIT: usize = 1024;

/// A projection an adapter may target.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LoraTarget {
    Q,
    K,
    V,
    O,
    Gate,
    Up,
    Down,
}

impl LoraTarget {
    pub const ALL: [LoraTarget; 7] = [
        LoraTarget::Q,
        LoraTarget::K,
        LoraTarget::V,
        LoraTarget::O,
        LoraTarget::Gate,
        LoraTarget::Up,
        LoraTarget::Down,
    ];

    /// The PEFT (Hugging Face) module name.
    pub fn module(self) -> &'static str {
        match self {
            LoraTarget::Q => "q_proj",
            LoraTarget::K => "k_proj",
            LoraTarget::V => "v_proj",
            LoraTarget::O => "o_proj",
            LoraTarget::Gate => "gate_proj",
            LoraTarget::Up => "up_proj",
            LoraTarget::Down => "down_proj",
        }
    }

    pub fn from_module(module: &str) -> Option<LoraTarget> {
        LoraTarget::ALL.into_iter().find(|t| t.module() == module)
    }

    /// The weight role of the projection.
    pub fn role(self) -> Role {
        match self {
            LoraTarget::Q => Role::AttnQ,
            LoraTarget::K => Role::AttnK,
            LoraTarget::V => Role::AttnV,
            LoraTarget::O => Role::AttnO,
            LoraTarget::Gate => Role::FfnGate,
            LoraTarget::Up => Role::FfnUp,
            LoraTarget::Down => Role::FfnDown,
        }
    }

    pub fn from_role(role: Role) -> Option<LoraTarget> {
        LoraTarget::ALL.into_iter().find(|t| t.role() == role)
    }

    fn bit(self) -> u8 {
        1 << (self as u8)
    }
}

/// A set of [`LoraTarget`]s.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct LoraTargets(u8);

impl LoraTargets {
    pub const NONE: LoraTargets = LoraTargets(0);
    pub const ALL: LoraTargets = LoraTargets(0x7f);

    pub fn with(self, t: LoraTarget) -> LoraTargets {
        LoraTargets(self.0 | t.bit())
    }

    pub fn contains(self, t: LoraTarget) -> bool {
        self.0 & t.bit() != 0
    }

    pub fn iter(self) -> impl Iterator<Item = LoraTarget> {
        LoraTarget::ALL
            .into_iter()
            .filter(move |t| self.contains(*t))
    }
}

/// The compile-time capacity of a step's adapter tables (vLLM's `--max-loras` and
/// `--max-lora-rank`), and which projections carry them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LoraShape {
    pub max_loras: usize,
    pub max_rank: usize,
    pub targets: LoraTargets,
}

impl LoraShape {
    /// Every projection, `max_loras` adapters of rank at most `max_rank`.
    pub fn new(max_loras: usize, max_rank: usize) -> LoraShape {
        LoraShape {
            max_loras,
            max_rank,
            targets: LoraTargets::ALL,
        }
    }

    /// Table rows: the adapters and the zero row 0.
    pub fn table_rows(self) -> usize {
        self.max_loras + 1
    }

    /// Refuses a capacity of zero or past the limits before anything is sized by it.
    pub fn check(self) -> Result<(), LoraError> {
        for (what, value, limit) in [
            ("max_loras", self.max_loras, MAX_LORAS_LIMIT),
            ("max_lora_rank", self.max_rank, MAX_RANK_LIMIT),
        ] {
            if value == 0 || value > limit {
                return Err(LoraError::Capacity { what, value, limit });
            }
        }
        Ok(())
    }
}

/// Which of a projection's two tables.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LoraHalf {
    /// `[max_loras + 1, max_rank, in]`.
    A,
    /// `[max_loras + 1, out, max_rank]`, scaled.
    B,
}

/// The graph constant of one table: `lora.l3.attn.q.a`.
pub fn table_name(layer: usize, target: LoraTarget, half: LoraHalf) -> String {
    let half = match half {
        LoraHalf::A => "a",
        LoraHalf::B => "b",
    };
    format!("lora.l{layer}.{}.{half}", target.role().name())
}

/// Why an adapter could not be read, checked or written.
#[derive(Debug, thiserror::Error)]
pub enum LoraError {
    /// A file of the adapter directory could not be read: check the path.
    #[error("cannot read LoRA adapter file {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    /// `adapter_config.json` is not JSON.
    #[error("adapter_config.json is not valid JSON: {message}")]
    ConfigJson { message: String },
    /// A config key is missing or of the wrong type.
    #[error("adapter_config.json key `{key}` should be {expected}")]
    ConfigKey {
        key: &'static str,
        expected: &'static str,
    },
    /// A config value poot does not support (DoRA, fan_in_fan_out, per-module rank or alpha
    /// patterns, trained biases, saved modules, another PEFT type).
    #[error("adapter_config.json key `{key}` = {value} is not supported (supported: {supported})")]
    Unsupported {
        key: &'static str,
        value: String,
        supported: &'static str,
    },
    /// The weights file is not a valid safetensors file.
    #[error("adapter_model.safetensors: {0}")]
    Safetensors(#[from] SafetensorsError),
    /// A tensor name that is not a LoRA `A` or `B` of a layer's projection (an embedding or
    /// head adapter, say).
    #[error("adapter tensor `{name}` is not a layer projection's lora_A or lora_B weight")]
    TensorName { name: String },
    /// A module outside the seven projections poot adapts (q/k/v/o/gate/up/down_proj).
    #[error(
        "adapter module `{module}` is not supported (supported: q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj)"
    )]
    UnsupportedModule { module: String },
    /// A tensor stored in a type other than f32, f16 or bf16.
    #[error("adapter tensor `{name}` is stored as {dtype}; supported: F32, F16, BF16")]
    TensorType { name: String, dtype: &'static str },
    /// A tensor whose shape disagrees with the config's rank or the model's projection.
    #[error("adapter tensor `{name}` has shape {found:?}, expected {expected:?}")]
    TensorShape {
        name: String,
        expected: Vec<u64>,
        found: Vec<u64>,
    },
    /// A projection has a `lora_A` without its `lora_B` or the other way round.
    #[error("layer {layer} {module}: lora_{missing} is missing")]
    MissingHalf {
        layer: usize,
        module: &'static str,
        missing: &'static str,
    },
    /// The adapter holds no LoRA tensor at all.
    #[error("the adapter has no lora_A/lora_B tensors")]
    Empty,
    /// The adapter adapts a layer the model does not have.
    #[error("adapter tensor `{name}` is for layer {layer}, the model has {n_layers} layers")]
    Layer {
        name: String,
        layer: usize,
        n_layers: usize,
    },
    /// The model has no such projection to adapt.
    #[error("the model has no {module} in layer {layer} to adapt")]
    NoProjection { layer: usize, module: &'static str },
    /// The adapter's rank is over the compiled `--max-lora-rank`: restart with a larger one.
    #[error("the adapter's rank {rank} is over --max-lora-rank {max_rank}")]
    RankTooLarge { rank: usize, max_rank: usize },
    /// The adapter targets a projection the tables were not compiled for.
    #[error("the adapter targets {module}, which the compiled LoRA tables do not carry")]
    TargetNotCompiled { module: &'static str },
    /// A capacity of zero or past the engine's limit.
    #[error("{what} = {value} is out of range (1..={limit})")]
    Capacity {
        what: &'static str,
        value: usize,
        limit: usize,
    },
    /// An adapter table index outside `1..=max_loras`.
    #[error("adapter index {index} is out of range (1..={max_loras})")]
    Index { index: usize, max_loras: usize },
    /// The tables would not fit in memory.
    #[error("the LoRA tables of {what} are too large")]
    TooLarge { what: String },
}

/// One projection's adapter: `A [rank, in]` and `B [out, rank]` as f32, row-major.
#[derive(Clone, Debug, PartialEq)]
pub struct LoraPair {
    pub a: Vec<f32>,
    pub b: Vec<f32>,
    pub in_features: usize,
    pub out_features: usize,
}

/// A PEFT LoRA adapter read into f32.
#[derive(Clone, Debug, PartialEq)]
pub struct LoraAdapter {
    pub rank: usize,
    /// `lora_alpha / r`, or `lora_alpha / sqrt(r)` with rsLoRA.
    pub scaling: f32,
    pub targets: LoraTargets,
    pub pairs: BTreeMap<(usize, LoraTarget), LoraPair>,
}

impl LoraAdapter {
    /// Reads a PEFT adapter directory (`adapter_config.json`, `adapter_model.safetensors`).
    pub fn read(dir: &Path) -> Result<LoraAdapter, LoraError> {
        let read = |file: &str| {
            let path = dir.join(file);
            std::fs::read(&path).map_err(|source| LoraError::Io { path, source })
        };
        let config = read(ADAPTER_CONFIG_FILE)?;
        let weights = read(ADAPTER_WEIGHTS_FILE)?;
        LoraAdapter::parse(&config, &weights)
    }

    /// An adapter from the bytes of its config and weights files.
    pub fn parse(config_json: &[u8], safetensors: &[u8]) -> Result<LoraAdapter, LoraError> {
        let config = AdapterConfig::parse(config_json)?;
        let header = SafetensorsHeader::parse(safetensors)?;
        let mut halves: BTreeMap<(usize, LoraTarget), [Option<LoraMatrix>; 2]> = BTreeMap::new();
        for t in &header.tensors {
            let (layer, target, half) = parse_tensor_name(&t.name)?;
            if let Some(allowed) = config.targets
                && !allowed.contains(target)
            {
                return Err(LoraError::TensorName {
                    name: t.name.clone(),
                });
            }
            let want_rank = config.rank as u64;
            let ok = t.shape.len() == 2
                && match half {
                    LoraHalf::A => t.shape[0] == want_rank,
                    LoraHalf::B => t.shape[1] == want_rank,
                };
            if !ok {
                let expected = match half {
                    LoraHalf::A => vec![want_rank, t.shape.get(1).copied().unwrap_or(0)],
                    LoraHalf::B => vec![t.shape.first().copied().unwrap_or(0), want_rank],
                };
                return Err(LoraError::TensorShape {
                    name: t.name.clone(),
                    expected,
                    found: t.shape.clone(),
                });
            }
            if !matches!(t.dtype, DenseType::F32 | DenseType::F16 | DenseType::BF16) {
                return Err(LoraError::TensorType {
                    name: t.name.clone(),
                    dtype: t.dtype.name(),
                });
            }
            // The header parser checked the range lies in the file and matches the shape.
            let bytes = usize::try_from(t.file_range.start)
                .ok()
                .zip(usize::try_from(t.file_range.end).ok())
                .and_then(|(s, e)| safetensors.get(s..e))
                .ok_or_else(|| LoraError::TensorName {
                    name: t.name.clone(),
                })?;
            let n = bytes.len() / t.dtype.size_bytes();
            let mut data = vec![0f32; n];
            decode_dense(t.dtype, bytes, &mut data).map_err(|_| LoraError::TensorType {
                name: t.name.clone(),
                dtype: t.dtype.name(),
            })?;
            let slot = &mut halves.entry((layer, target)).or_default()[half as usize];
            *slot = Some(LoraMatrix {
                rows: t.shape[0] as usize,
                cols: t.shape[1] as usize,
                data,
            });
        }
        if halves.is_empty() {
            return Err(LoraError::Empty);
        }
        let mut pairs = BTreeMap::new();
        let mut targets = LoraTargets::NONE;
        for ((layer, target), [a, b]) in halves {
            let missing = |m| LoraError::MissingHalf {
                layer,
                module: target.module(),
                missing: m,
            };
            let a = a.ok_or_else(|| missing("A"))?;
            let b = b.ok_or_else(|| missing("B"))?;
            targets = targets.with(target);
            pairs.insert(
                (layer, target),
                LoraPair {
                    in_features: a.cols,
                    out_features: b.rows,
                    a: a.data,
                    b: b.data,
                },
            );
        }
        Ok(LoraAdapter {
            rank: config.rank,
            scaling: config.scaling,
            targets,
            pairs,
        })
    }

    /// Checks the adapter against a model's weights and the compiled capacity: every layer and
    /// projection exists, with the adapter's in/out features, the rank fits, and every target
    /// has tables.
    pub fn check(
        &self,
        weights: &WeightMap,
        n_layers: usize,
        shape: LoraShape,
    ) -> Result<(), LoraError> {
        if self.rank > shape.max_rank {
            return Err(LoraError::RankTooLarge {
                rank: self.rank,
                max_rank: shape.max_rank,
            });
        }
        for (&(layer, target), pair) in &self.pairs {
            let name = || format!("layers.{layer}.{}", target.module());
            if layer >= n_layers {
                return Err(LoraError::Layer {
                    name: name(),
                    layer,
                    n_layers,
                });
            }
            if !shape.targets.contains(target) {
                return Err(LoraError::TargetNotCompiled {
                    module: target.module(),
                });
            }
            let (out, inp) =
                projection_dims(weights, layer, target).ok_or(LoraError::NoProjection {
                    layer,
                    module: target.module(),
                })?;
            if (pair.out_features, pair.in_features) != (out, inp) {
                return Err(LoraError::TensorShape {
                    name: name(),
                    expected: vec![out as u64, inp as u64],
                    found: vec![pair.out_features as u64, pair.in_features as u64],
                });
            }
            // The fields are public: the data must hold what the dims and rank say.
            if pair.a.len() != self.rank * inp || pair.b.len() != out * self.rank {
                return Err(LoraError::TensorShape {
                    name: name(),
                    expected: vec![(self.rank * inp) as u64, (out * self.rank) as u64],
                    found: vec![pair.a.len() as u64, pair.b.len() as u64],
                });
            }
        }
        Ok(())
    }
}

struct LoraMatrix {
    rows: usize,
    cols: usize,
    data: Vec<f32>,
}

/// The keys of `adapter_config.json` poot reads.
struct AdapterConfig {
    rank: usize,
    scaling: f32,
    /// `None` for `"all-linear"` (the tensors say which).
    targets: Option<LoraTargets>,
}

impl AdapterConfig {
    fn parse(bytes: &[u8]) -> Result<AdapterConfig, LoraError> {
        let v: Value = serde_json::from_slice(bytes).map_err(|e| LoraError::ConfigJson {
            message: e.to_string(),
        })?;
        let obj = v.as_object().ok_or(LoraError::ConfigKey {
            key: "(top level)",
            expected: "an object",
        })?;
        let get = |k: &str| obj.get(k).filter(|v| !v.is_null());
        if let Some(t) = get("peft_type")
            && t.as_str() != Some("LORA")
        {
            return Err(LoraError::Unsupported {
                key: "peft_type",
                value: t.to_string(),
                supported: "\"LORA\"",
            });
        }
        let rank = get("r")
            .and_then(Value::as_u64)
            .filter(|&r| r > 0)
            .and_then(|r| usize::try_from(r).ok())
            .ok_or(LoraError::ConfigKey {
                key: "r",
                expected: "a positive integer",
            })?;
        // PEFT's default alpha is 8.
        let alpha = match get("lora_alpha") {
            None => 8.0,
            Some(a) => a
                .as_f64()
                .filter(|a| a.is_finite())
                .ok_or(LoraError::ConfigKey {
                    key: "lora_alpha",
                    expected: "a finite number",
                })?,
        };
        let flag = |key: &'static str| -> Result<bool, LoraError> {
            match get(key) {
                None => Ok(false),
                Some(v) => v.as_bool().ok_or(LoraError::ConfigKey {
                    key,
                    expected: "a boolean",
                }),
            }
        };
        let rslora = flag("use_rslora")?;
        for key in ["fan_in_fan_out", "use_dora"] {
            if flag(key)? {
                return Err(LoraError::Unsupported {
                    key,
                    value: "true".into(),
                    supported: "false",
                });
            }
        }
        for key in ["rank_pattern", "alpha_pattern"] {
            if let Some(p) = get(key)
                && p.as_object().is_none_or(|o| !o.is_empty())
            {
                return Err(LoraError::Unsupported {
                    key,
                    value: p.to_string(),
                    supported: "an empty pattern (one rank and alpha for every module)",
                });
            }
        }
        if let Some(m) = get("modules_to_save")
            && m.as_array().is_none_or(|a| !a.is_empty())
        {
            return Err(LoraError::Unsupported {
                key: "modules_to_save",
                value: m.to_string(),
                supported: "none",
            });
        }
        if let Some(b) = get("bias")
            && b.as_str() != Some("none")
        {
            return Err(LoraError::Unsupported {
                key: "bias",
                value: b.to_string(),
                supported: "\"none\"",
            });
        }
        let targets = match get("target_modules") {
            None => None,
            Some(Value::String(s)) if s == "all-linear" => None,
            Some(Value::Array(list)) => {
                let mut t = LoraTargets::NONE;
                for m in list {
                    let m = m.as_str().ok_or(LoraError::ConfigKey {
                        key: "target_modules",
                        expected: "a list of module names",
                    })?;
                    t = t.with(LoraTarget::from_module(m).ok_or_else(|| {
                        LoraError::UnsupportedModule {
                            module: m.to_string(),
                        }
                    })?);
                }
                Some(t)
            }
            Some(other) => {
                return Err(LoraError::Unsupported {
                    key: "target_modules",
                    value: other.to_string(),
                    supported: "a list of module names, or \"all-linear\"",
                });
            }
        };
        let r = rank as f64;
        let scaling = if rslora { alpha / r.sqrt() } else { alpha / r };
        Ok(AdapterConfig {
            rank,
            scaling: scaling as f32,
            targets,
        })
    }
}

/// `(layer, target, half)` from a PEFT tensor name such as
/// `base_model.model.model.layers.3.self_attn.q_proj.lora_A.weight`.
fn parse_tensor_name(name: &str) -> Result<(usize, LoraTarget, LoraHalf), LoraError> {
    let bad = || LoraError::TensorName {
        name: name.to_string(),
    };
    let (rest, half) = if let Some(r) = name.strip_suffix(".lora_A.weight") {
        (r, LoraHalf::A)
    } else if let Some(r) = name.strip_suffix(".lora_B.weight") {
        (r, LoraHalf::B)
    } else {
        return Err(bad());
    };
    let (_, after) = rest.split_once("layers.").ok_or_else(bad)?;
    let mut parts = after.split('.');
    let layer = parts
        .next()
        .and_then(|l| l.parse::<usize>().ok())
        .ok_or_else(bad)?;
    let block = parts.next().ok_or_else(bad)?;
    let module = parts.next().ok_or_else(bad)?;
    if parts.next().is_some() || !matches!(block, "self_attn" | "mlp") {
        return Err(bad());
    }
    let target = LoraTarget::from_module(module).ok_or_else(|| LoraError::UnsupportedModule {
        module: module.to_string(),
    })?;
    Ok((layer, target, half))
}

/// `(out, in)` of a layer's projection in the model, whatever its stored format.
fn projection_dims(
    weights: &WeightMap,
    layer: usize,
    target: LoraTarget,
) -> Option<(usize, usize)> {
    let e = weights.get(WeightRole::layer(layer, target.role()))?;
    match e.ty.shape.dims() {
        &[out, inp] => Some((out, inp)),
        _ => None,
    }
}

/// How a model's stored Q and K rows are ordered against the Hugging Face rows an adapter's
/// `B` is written in.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum QkRows {
    /// The same order.
    #[default]
    AsStored,
    /// Within each head, Hugging Face row `i * head_dim / 2 + j` (half `i`, feature `j`) is
    /// stored at `2 * j + i` (llama.cpp's permutation of a Llama's Q and K).
    Interleaved { head_dim: usize },
}

impl QkRows {
    /// The stored row of Hugging Face row `row` of `target`'s output.
    fn stored_row(self, target: LoraTarget, row: usize) -> usize {
        let QkRows::Interleaved { head_dim, .. } = self else {
            return row;
        };
        if !matches!(target, LoraTarget::Q | LoraTarget::K) || head_dim < 2 || head_dim % 2 != 0 {
            return row;
        }
        let (head, within) = (row / head_dim, row % head_dim);
        let half = head_dim / 2;
        head * head_dim + 2 * (within % half) + within / half
    }
}

/// One table: its dims and f32 data.
#[derive(Clone, Debug, PartialEq)]
pub struct LoraTable {
    pub dims: [usize; 3],
    pub data: Vec<f32>,
}

/// The adapter tables of a model compiled with a [`LoraShape`]: zeros until adapters are
/// written in. Index 0 stays zero.
#[derive(Clone, Debug)]
pub struct LoraTables {
    shape: LoraShape,
    n_layers: usize,
    tables: BTreeMap<String, LoraTable>,
    qk_rows: QkRows,
}

impl LoraTables {
    /// Zero tables for every targeted projection the model has in each of its `n_layers`.
    pub fn new(
        weights: &WeightMap,
        n_layers: usize,
        shape: LoraShape,
    ) -> Result<LoraTables, LoraError> {
        shape.check()?;
        let (n, r) = (shape.table_rows(), shape.max_rank);
        let mut tables = BTreeMap::new();
        let mut total: usize = 0;
        for layer in 0..n_layers {
            for target in shape.targets.iter() {
                let Some((out, inp)) = projection_dims(weights, layer, target) else {
                    continue;
                };
                for (half, dims) in [(LoraHalf::A, [n, r, inp]), (LoraHalf::B, [n, out, r])] {
                    let name = table_name(layer, target, half);
                    let elems = dims
                        .iter()
                        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
                        .and_then(|e| total.checked_add(e).map(|t| (e, t)))
                        .filter(|&(_, t)| t <= isize::MAX as usize / 4)
                        .ok_or_else(|| LoraError::TooLarge { what: name.clone() })?;
                    total = elems.1;
                    // A capacity the host cannot hold is a refusal, not an abort.
                    let mut data = Vec::new();
                    data.try_reserve_exact(elems.0)
                        .map_err(|_| LoraError::TooLarge { what: name.clone() })?;
                    data.resize(elems.0, 0.0);
                    tables.insert(name, LoraTable { dims, data });
                }
            }
        }
        Ok(LoraTables {
            shape,
            n_layers,
            tables,
            qk_rows: QkRows::AsStored,
        })
    }

    /// Writes adapters' Q and K rows in the model's stored order (its
    /// [`crate::Model::lora_qk_rows`]).
    pub fn with_qk_rows(mut self, qk_rows: QkRows) -> LoraTables {
        self.qk_rows = qk_rows;
        self
    }

    pub fn shape(&self) -> LoraShape {
        self.shape
    }

    /// The table behind graph constant `name`.
    pub fn table(&self, name: &str) -> Option<&LoraTable> {
        self.tables.get(name)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &LoraTable)> {
        self.tables.iter().map(|(n, t)| (n.as_str(), t))
    }

    fn check_index(&self, index: usize) -> Result<(), LoraError> {
        if index == 0 || index > self.shape.max_loras {
            return Err(LoraError::Index {
                index,
                max_loras: self.shape.max_loras,
            });
        }
        Ok(())
    }

    /// Writes `adapter` at `index` (1..=max_loras), replacing what was there: its `A` rows and
    /// its scaled `B` columns, zero-padded to the compiled rank; projections it does not
    /// target are zeroed. Checks the adapter against `weights` first, so a refusal changes
    /// nothing.
    pub fn write(
        &mut self,
        index: usize,
        adapter: &LoraAdapter,
        weights: &WeightMap,
    ) -> Result<(), LoraError> {
        self.check_index(index)?;
        adapter.check(weights, self.n_layers, self.shape)?;
        self.clear(index)?;
        let r_max = self.shape.max_rank;
        for (&(layer, target), pair) in &adapter.pairs {
            let r = adapter.rank;
            if let Some(t) = self.tables.get_mut(&table_name(layer, target, LoraHalf::A)) {
                let inp = t.dims[2];
                let base = index * r_max * inp;
                t.data[base..base + r * inp].copy_from_slice(&pair.a);
            }
            if let Some(t) = self.tables.get_mut(&table_name(layer, target, LoraHalf::B)) {
                let out = t.dims[1];
                let base = index * out * r_max;
                for o in 0..out {
                    let at = self.qk_rows.stored_row(target, o);
                    if at >= out {
                        return Err(LoraError::TensorShape {
                            name: table_name(layer, target, LoraHalf::B),
                            expected: vec![out as u64],
                            found: vec![at as u64 + 1],
                        });
                    }
                    let dst = &mut t.data[base + at * r_max..base + at * r_max + r];
                    for (d, s) in dst.iter_mut().zip(&pair.b[o * r..(o + 1) * r]) {
                        *d = s * adapter.scaling;
                    }
                }
            }
        }
        Ok(())
    }

    /// Zeroes the tables at `index` (the adapter there adds nothing after).
    pub fn clear(&mut self, index: usize) -> Result<(), LoraError> {
        self.check_index(index)?;
        for t in self.tables.values_mut() {
            let per = t.dims[1] * t.dims[2];
            t.data[index * per..(index + 1) * per].fill(0.0);
        }
        Ok(())
    }

    /// The byte range index `index` occupies in every table (for writing it in place on a
    /// device).
    pub fn index_range_bytes(&self, table: &LoraTable, index: usize) -> std::ops::Range<usize> {
        let per = table.dims[1] * table.dims[2] * 4;
        index * per..(index + 1) * per
    }
}
