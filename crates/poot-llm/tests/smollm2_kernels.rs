//! The exact source every backend compiles for SmolLM2-135M's steps, pinned by hash: the
//! kernels of a decode step (greedy, sampled, and with penalties and log-probabilities; one
//! row and four; over a contiguous and a paged cache) and of a 512-token prefill chunk,
//! planned for each backend's preset and rendered by that backend's renderer (CUDA C for PTX,
//! WGSL for wgpu, C for the host CPU). A change to the planner or a renderer that moves one
//! byte of any of them shows up here, so a refactor that claims to keep the kernels can prove
//! it (and the PTX device's cache, which keys on this text, is not invalidated by accident).
//!
//! The model is the packaged SmolLM2-135M-Instruct Q4_1 GGUF as the registry builds it from
//! the file's header, which `poot-load`'s tests record (metadata, and every tensor's name,
//! shape and type): no checkpoint bytes are needed. The steps are the driver's: the model's
//! trace with the sampling head appended, at `poot run`'s default capacity and chunk. (The
//! greedy decode step's kernels were checked once against `dump_kernels` over the real file,
//! for CUDA and host C: the same sources.)
//!
//! `tests/golden/smollm2_kernels.txt` holds one line per distinct kernel source: the case, the
//! entry point, the source's length and its SHA-256. When a change is meant to move kernels,
//! rerun with `POOT_BLESS=1` to rewrite it, and say in the commit why they moved. Either way a
//! failing run leaves every rendered source under the target's tmp directory for a diff.

#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::path::PathBuf;

use poot_formats::{GgmlType, StoredType};
use poot_graph_ir::{Graph, TraceLimits};
use poot_graph_plan::{Target, Tuning, compile};
use poot_kernel::render::{entry_name, render_cuda, render_host_c, render_wgsl};
use poot_llm::Head;
use poot_llm::sampling::append_head;
use poot_load::format_table::GgmlAdmission;
use poot_models::weights::{TensorIndex, TensorMeta};
use poot_models::{KvLayout, Model, Registry, StepShape, StepSpec};
use serde_json::Value;
use sha2::{Digest, Sha256};

/// `poot run`'s defaults (`poot-cli`'s sizing): cache positions and prefill chunk.
const CAPACITY: usize = 2048;
const PREFILL_CHUNK: usize = 512;

const GOLDEN: &str = "tests/golden/smollm2_kernels.txt";

/// The packaged GGUF's header as `poot-load`'s tests record it: its metadata (arrays by length
/// and hash only) and every tensor's name, shape and type.
const RECORD: &str = "../poot-load/tests/fixtures/real/smollm2-135m-instruct-q4_1.json";

/// The recorded tensors: shapes and stored types, no bytes.
struct Index(HashMap<String, TensorMeta>);

impl TensorIndex for Index {
    fn tensor_meta(&self, name: &str) -> Option<TensorMeta> {
        self.0.get(name).cloned()
    }
}

fn ggml_type(name: &str) -> GgmlType {
    (0..64)
        .filter_map(GgmlType::from_id)
        .find(|t| t.name() == name)
        .unwrap_or_else(|| panic!("no ggml type {name}"))
}

/// A GGUF holding the recorded scalar metadata and no tensors: what the registry reads a
/// GGUF's config from. (The tokenizer's arrays are left out; building the model reads none.)
fn header_only_gguf(metadata: &[Value]) -> Vec<u8> {
    let string = |out: &mut Vec<u8>, s: &str| {
        out.extend((s.len() as u64).to_le_bytes());
        out.extend(s.as_bytes());
    };
    let scalars: Vec<&Value> = metadata.iter().filter(|m| m["type"] != "array").collect();
    let mut out = b"GGUF".to_vec();
    out.extend(3u32.to_le_bytes());
    out.extend(0u64.to_le_bytes());
    out.extend((scalars.len() as u64).to_le_bytes());
    for m in scalars {
        string(&mut out, m["key"].as_str().unwrap());
        let v = &m["value"];
        match m["type"].as_str().unwrap() {
            "u32" => {
                out.extend(4u32.to_le_bytes());
                out.extend((v.as_u64().unwrap() as u32).to_le_bytes());
            }
            "f32" => {
                out.extend(6u32.to_le_bytes());
                out.extend((v.as_f64().unwrap() as f32).to_le_bytes());
            }
            "bool" => {
                out.extend(7u32.to_le_bytes());
                out.push(u8::from(v.as_bool().unwrap()));
            }
            "string" => {
                out.extend(8u32.to_le_bytes());
                string(&mut out, v.as_str().unwrap());
            }
            other => panic!("metadata type {other} in {RECORD}"),
        }
    }
    out
}

/// SmolLM2-135M-Instruct as the packaged Q4_1 GGUF builds it (interleaved rope pairs, Q8_0
/// embedding tied to the head, f32 norms, Q4_1 projections), from the recorded header.
fn smollm2() -> Box<dyn Model> {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let record: Value =
        serde_json::from_slice(&std::fs::read(manifest.join(RECORD)).unwrap()).unwrap();
    let gguf = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("smollm2_kernels-{}.gguf", std::process::id()));
    std::fs::write(
        &gguf,
        header_only_gguf(record["metadata"].as_array().unwrap()),
    )
    .unwrap();
    let config = poot_load::peek_config(&gguf).unwrap();
    let _ = std::fs::remove_file(&gguf);
    let index = Index(
        record["tensors"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| {
                let stored = match GgmlAdmission::of(ggml_type(t["type"].as_str().unwrap())) {
                    GgmlAdmission::Dense(d) => StoredType::Dense(d),
                    GgmlAdmission::Packed(p) => StoredType::Ggml(p),
                    GgmlAdmission::Refused(r) => panic!("{r:?} in {RECORD}"),
                };
                let shape = t["shape"].as_array().unwrap();
                let meta = TensorMeta {
                    shape: shape.iter().map(|d| d.as_u64().unwrap()).collect(),
                    stored,
                };
                (t["name"].as_str().unwrap().to_string(), meta)
            })
            .collect(),
    );
    let registry = Registry::builtin().unwrap();
    let family = registry.resolve(&config).unwrap();
    (family.build)(&config, &index).unwrap().model
}

/// One step the driver prepares: its name in the golden file and its graph.
struct Step {
    name: &'static str,
    graph: Graph,
}

fn steps(model: &dyn Model) -> Vec<Step> {
    let limits = TraceLimits::standard(PREFILL_CHUNK as u64);
    let trace = |shape: StepShape, head: Head| {
        let graph = model.trace(&StepSpec::step(shape), limits).unwrap();
        append_head(graph, head, limits, 1).unwrap()
    };
    let decode = StepShape::new(1, 1, CAPACITY);
    let paged = decode.with_kv(KvLayout::Paged {
        block_tokens: 16,
        blocks: CAPACITY / 16,
    });
    vec![
        Step {
            name: "decode.greedy",
            graph: trace(decode, Head::Greedy),
        },
        Step {
            name: "decode.sample",
            graph: trace(decode, Head::Sample),
        },
        Step {
            name: "decode.logprobs",
            graph: trace(decode, Head::Logprobs),
        },
        Step {
            name: "decode.rows4",
            graph: trace(StepShape::new(4, 1, CAPACITY), Head::Greedy),
        },
        Step {
            name: "decode.paged",
            graph: trace(paged, Head::Greedy),
        },
        Step {
            name: "prefill",
            graph: trace(StepShape::new(1, PREFILL_CHUNK, CAPACITY), Head::Greedy),
        },
    ]
}

/// A backend's renderer, and the targets its kernels are planned for: each preset with its
/// default tuning, and for PTX also `lib=0`, whose prefill multiplies in tiled kernels on the
/// matrix units where the default gives those contractions to cuBLASLt.
struct Renderer {
    name: &'static str,
    extension: &'static str,
    targets: Vec<(&'static str, Target)>,
    render: fn(&poot_kernel::Kernel) -> String,
}

fn renderers() -> Vec<Renderer> {
    let ptx_tuned = |spec: &str| {
        let mut t = Target::ptx_preset();
        t.tuning = Tuning::parse(spec).unwrap();
        t
    };
    vec![
        Renderer {
            name: "cuda",
            extension: "cu",
            targets: vec![
                ("ptx", Target::ptx_preset()),
                ("ptx.lib=0", ptx_tuned("lib=0")),
            ],
            render: |k| render_cuda(k).unwrap(),
        },
        Renderer {
            name: "wgsl",
            extension: "wgsl",
            targets: vec![("wgpu", Target::wgpu_preset())],
            render: |k| render_wgsl(k).unwrap().source,
        },
        Renderer {
            name: "host_c",
            extension: "c",
            targets: vec![("cpu", Target::cpu_preset())],
            render: |k| render_host_c(k).unwrap(),
        },
    ]
}

/// One rendered kernel: the first case that made it, its kind and entry point, and its source
/// with the file extension its language takes.
struct Rendered {
    case: String,
    kind: String,
    entry: String,
    source: String,
    extension: &'static str,
}

/// Every distinct source each renderer writes for the steps, keyed by renderer and source.
fn rendered() -> BTreeMap<(&'static str, String), Rendered> {
    let model = smollm2();
    let steps = steps(model.as_ref());
    let mut out = BTreeMap::new();
    for r in renderers() {
        for (target_name, target) in &r.targets {
            for step in &steps {
                let plan = compile(&step.graph, target).unwrap();
                for k in &plan.kernels {
                    let source = (r.render)(k);
                    out.entry((r.name, source.clone()))
                        .or_insert_with(|| Rendered {
                            case: format!("{}/{target_name}/{}", r.name, step.name),
                            kind: k.kind().to_string(),
                            entry: entry_name(k),
                            source,
                            extension: r.extension,
                        });
                }
            }
        }
    }
    out
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

#[test]
fn smollm2_kernels_render_as_pinned() {
    let rendered = rendered();
    let mut lines: Vec<String> = rendered
        .values()
        .map(|r| {
            let hash = hex(&Sha256::digest(r.source.as_bytes()));
            format!(
                "{} {} {} {} {hash}",
                r.case,
                r.kind,
                r.entry,
                r.source.len()
            )
        })
        .collect();
    lines.sort();
    let got = lines.join("\n") + "\n";
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(GOLDEN);
    if std::env::var_os("POOT_BLESS").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, &got).unwrap();
        return;
    }
    let want = std::fs::read_to_string(&path).unwrap_or_default();
    if got != want {
        let dump = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("smollm2_kernels-{}", std::process::id()));
        std::fs::create_dir_all(&dump).unwrap();
        for r in rendered.values() {
            let name = format!("{}.{}", r.entry, r.extension);
            std::fs::write(dump.join(name), &r.source).unwrap();
        }
        panic!(
            "rendered kernels differ from {GOLDEN} (this run's sources are under {}):\n{}",
            dump.display(),
            diff(&want, &got)
        );
    }
}

/// The lines only one side has.
fn diff(want: &str, got: &str) -> String {
    let (w, g): (Vec<&str>, Vec<&str>) = (want.lines().collect(), got.lines().collect());
    let mut s = String::new();
    for l in w.iter().filter(|l| !g.contains(l)) {
        let _ = writeln!(s, "- {l}");
    }
    for l in g.iter().filter(|l| !w.contains(l)) {
        let _ = writeln!(s, "+ {l}");
    }
    s
}
