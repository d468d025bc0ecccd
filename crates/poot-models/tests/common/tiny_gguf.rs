//! A tiny GGUF writer for tests: metadata of any scalar type and F32 tensors (zeros unless
//! values are given; or zeros of another type), laid out as GGUF v3 (little-endian, 32-byte aligned tensor data). Enough to write a Llama-shaped
//! checkpoint whose metadata a test varies.

#![allow(dead_code)]

/// One metadata value as the file stores it.
#[derive(Clone, Debug)]
pub enum Meta {
    U32(u32),
    I32(i32),
    U64(u64),
    I64(i64),
    F32(f32),
    F64(f64),
    Str(String),
    Strs(Vec<String>),
    F32s(Vec<f32>),
}

/// A GGUF under construction: metadata entries and tensor shapes (outermost-first).
#[derive(Clone, Debug, Default)]
pub struct TinyGguf {
    pub meta: Vec<(String, Meta)>,
    pub tensors: Vec<(String, Vec<u64>)>,
    /// Values of the tensors that are not zeros, by name.
    pub values: std::collections::HashMap<String, Vec<f32>>,
    /// The ggml type of the tensors not stored F32 (their data zeros), by name.
    pub types: std::collections::HashMap<String, u32>,
}

/// The bytes of `n` elements of ggml type `ty` (F32, F16, I32, Q8_0 or MXFP4).
fn type_bytes(ty: u32, n: u64) -> usize {
    let n = n as usize;
    match ty {
        0 | 26 => 4 * n,
        1 => 2 * n,
        8 => n / 32 * 34,
        39 => n / 32 * 17,
        other => panic!("tiny_gguf: no size for ggml type {other}"),
    }
}

const ALIGN: usize = 32;

fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend((s.len() as u64).to_le_bytes());
    out.extend(s.as_bytes());
}

impl TinyGguf {
    /// Sets `key` (replacing an earlier value).
    pub fn set(&mut self, key: &str, value: Meta) {
        self.meta.retain(|(k, _)| k != key);
        self.meta.push((key.to_string(), value));
    }

    pub fn tensor(&mut self, name: &str, shape: &[u64]) {
        self.tensors.push((name.to_string(), shape.to_vec()));
    }

    /// The file's bytes.
    pub fn bytes(&self) -> Vec<u8> {
        let mut out = b"GGUF".to_vec();
        out.extend(3u32.to_le_bytes());
        out.extend((self.tensors.len() as u64).to_le_bytes());
        out.extend((self.meta.len() as u64).to_le_bytes());
        for (k, v) in &self.meta {
            put_str(&mut out, k);
            match v {
                Meta::U32(x) => {
                    out.extend(4u32.to_le_bytes());
                    out.extend(x.to_le_bytes());
                }
                Meta::I32(x) => {
                    out.extend(5u32.to_le_bytes());
                    out.extend(x.to_le_bytes());
                }
                Meta::F32(x) => {
                    out.extend(6u32.to_le_bytes());
                    out.extend(x.to_le_bytes());
                }
                Meta::Str(s) => {
                    out.extend(8u32.to_le_bytes());
                    put_str(&mut out, s);
                }
                Meta::Strs(list) => {
                    out.extend(9u32.to_le_bytes());
                    out.extend(8u32.to_le_bytes());
                    out.extend((list.len() as u64).to_le_bytes());
                    for s in list {
                        put_str(&mut out, s);
                    }
                }
                Meta::U64(x) => {
                    out.extend(10u32.to_le_bytes());
                    out.extend(x.to_le_bytes());
                }
                Meta::I64(x) => {
                    out.extend(11u32.to_le_bytes());
                    out.extend(x.to_le_bytes());
                }
                Meta::F64(x) => {
                    out.extend(12u32.to_le_bytes());
                    out.extend(x.to_le_bytes());
                }
                Meta::F32s(list) => {
                    out.extend(9u32.to_le_bytes());
                    out.extend(6u32.to_le_bytes());
                    out.extend((list.len() as u64).to_le_bytes());
                    for x in list {
                        out.extend(x.to_le_bytes());
                    }
                }
            }
        }
        let mut offset = 0usize;
        let mut sizes = Vec::new();
        for (name, shape) in &self.tensors {
            put_str(&mut out, name);
            out.extend((shape.len() as u32).to_le_bytes());
            // GGUF lists dims innermost-first.
            for d in shape.iter().rev() {
                out.extend(d.to_le_bytes());
            }
            let ty = self.types.get(name).copied().unwrap_or(0);
            out.extend(ty.to_le_bytes());
            out.extend((offset as u64).to_le_bytes());
            let bytes = type_bytes(ty, shape.iter().product::<u64>());
            sizes.push(bytes);
            offset += bytes.div_ceil(ALIGN) * ALIGN;
        }
        out.resize(out.len().div_ceil(ALIGN) * ALIGN, 0);
        for ((name, _), bytes) in self.tensors.iter().zip(sizes) {
            let start = out.len();
            if let Some(v) = self.values.get(name) {
                out.extend(v.iter().flat_map(|x| x.to_le_bytes()));
            }
            out.resize(start + bytes.div_ceil(ALIGN) * ALIGN, 0);
        }
        out
    }

    /// A two-layer Llama: hidden 8, 2 query heads and 1 key/value head of 4, feed-forward 16,
    /// 16 tokens (a tokenizer list of as many), context 64.
    pub fn llama() -> TinyGguf {
        let mut g = TinyGguf::default();
        g.set("general.architecture", Meta::Str("llama".into()));
        g.set("llama.embedding_length", Meta::U32(8));
        g.set("llama.block_count", Meta::U32(2));
        g.set("llama.attention.head_count", Meta::U32(2));
        g.set("llama.attention.head_count_kv", Meta::U32(1));
        g.set("llama.feed_forward_length", Meta::U32(16));
        g.set("llama.context_length", Meta::U32(64));
        g.set("llama.rope.dimension_count", Meta::U32(4));
        g.set("llama.rope.freq_base", Meta::F32(10000.0));
        g.set("llama.attention.layer_norm_rms_epsilon", Meta::F32(1e-5));
        g.set("tokenizer.ggml.model", Meta::Str("gpt2".into()));
        g.set(
            "tokenizer.ggml.tokens",
            Meta::Strs((0..16).map(|i| format!("t{i}")).collect()),
        );
        // Byte-level BPE without merges: each token is its own piece.
        g.set("tokenizer.ggml.merges", Meta::Strs(Vec::new()));
        g.set("tokenizer.ggml.bos_token_id", Meta::U32(1));
        g.set("tokenizer.ggml.eos_token_id", Meta::U32(2));
        g.tensor("token_embd.weight", &[16, 8]);
        g.tensor("output_norm.weight", &[8]);
        for l in 0..2 {
            g.llama_layer(l);
        }
        g
    }

    /// The tensors of Llama layer `l` (shapes of [`TinyGguf::llama`]).
    pub fn llama_layer(&mut self, l: usize) {
        for (role, shape) in [
            ("attn_norm", &[8][..]),
            ("ffn_norm", &[8]),
            ("attn_q", &[8, 8]),
            ("attn_k", &[4, 8]),
            ("attn_v", &[4, 8]),
            ("attn_output", &[8, 8]),
            ("ffn_gate", &[16, 8]),
            ("ffn_up", &[16, 8]),
            ("ffn_down", &[8, 16]),
        ] {
            self.tensor(&format!("blk.{l}.{role}.weight"), shape);
        }
    }
}
