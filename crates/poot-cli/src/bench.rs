//! `poot bench`: batch-1 prefill and decode speed of one model on one device, set against the
//! device's measured copy bandwidth.
//!
//! The order matters: the bandwidth probe runs on the fresh executor (before the weights take
//! memory), then the driver is built once and every repeat reuses its entries. Each repeat is a
//! full generation through the driver (prefill of fixed ids, then greedy decode ignoring
//! end-of-text), timed by the driver itself; the host reads back 8 bytes per token.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Instant;

use poot_executor::CopyBandwidth;
use poot_llm::{
    Driver, DriverError, DriverOptions, FinishReason, GenerateRequest, Generation, Layout,
    ModelHandle, Placement, Sampler, Serving, SpecStats,
};
use poot_models::ModelKind;
use serde_json::json;

use crate::catalog::{self, Purpose};
use crate::cli::BenchArgs;
use crate::error::CliError;
use crate::output;
use crate::progress;
use crate::resolve;
use crate::run;
use crate::sizing::{self, Sizing};
use crate::status::Status;
use crate::traffic::{self, DecodeTraffic};

/// Timed rounds of the bandwidth probe (after one warm-up round).
const PROBE_ROUNDS: u32 = 5;

/// One timed generation.
#[derive(Clone, Copy, Debug)]
struct Run {
    prefill_tok_s: f64,
    decode_tok_s: f64,
}

pub fn bench(args: BenchArgs, status: Status) -> Result<(), CliError> {
    let resolved = resolve::model(&args.model, &args.revision, Purpose::Generate, &status)?;
    let path = resolved.path.clone();
    let handle = run::load(&path, resolved.verify(args.verify.as_deref()), &status)?;
    if handle.config().kind == ModelKind::Encoder {
        return Err(CliError::NotAGenerator {
            name: args.model.clone(),
            kind: "encoder (embedding)",
            known: catalog::names(Some(Purpose::Generate)),
        });
    }
    // The prompt: the file's text when given, else fixed ids.
    let file_ids = match &args.prompt_file {
        Some(file) => {
            let text = std::fs::read_to_string(file).map_err(|source| CliError::PromptFile {
                path: file.clone(),
                source,
            })?;
            let ids = handle.text().map_err(DriverError::from)?.encode(&text)?;
            if ids.is_empty() {
                return Err(CliError::EmptyPrompt);
            }
            Some(ids)
        }
        None => None,
    };
    let generate = args.gen_tokens as usize;
    let prompt = file_ids
        .as_ref()
        .map_or(args.prompt_tokens as usize, Vec::len);
    // Paged rows take whole KV blocks, so their capacity is rounded up to a block.
    let paged = args.rows > 1 || args.paged;
    let granule = if paged {
        crate::bench_rows::BLOCK_TOKENS
    } else {
        1
    };
    let sizing = bench_sizing(&args, prompt, handle.config().max_positions, granule)?;
    let handle = run::narrowed(handle, &path, sizing.capacity)?;
    let prompt_ids = |handle: &ModelHandle, n: usize| match &file_ids {
        Some(ids) => Ok(ids.clone()),
        None => prompt_ids(handle, n),
    };

    let started = Instant::now();
    let placement = args.placement.placement();
    run::check_placement(&handle, placement)?;
    let mut opened = run::open(args.backend.choice(), placement)?;
    status.line(format!(
        "backend {} on {} (opened in {:.1} s)",
        opened.backend,
        opened.device_name,
        started.elapsed().as_secs_f64()
    ));
    let probe_bytes = u64::from(args.probe_mib) << 20;
    let bandwidth = opened
        .executor
        .copy_bandwidth(probe_bytes, PROBE_ROUNDS)
        .map_err(|e| CliError::Driver(e.into()))?;
    status.line(format!(
        "copy bandwidth {:.1} GB/s ({} MiB buffers, best of {} rounds of {} copies)",
        bandwidth.bytes_per_second() / 1e9,
        bandwidth.buffer_bytes >> 20,
        bandwidth.rounds,
        bandwidth.copies_per_round
    ));

    if paged {
        let ids = prompt_ids(&handle, prompt)?;
        let executor = progress::reporting(opened.executor, &status, sizing.prefill_chunk);
        return crate::bench_rows::bench_rows(
            &args,
            &handle,
            executor,
            placement,
            &ids,
            sizing.prefill_chunk,
            &status,
        );
    }
    let started = Instant::now();
    let options = DriverOptions::new(sizing.capacity, sizing.prefill_chunk)
        .with_speculation(args.spec.speculation())
        .with_kv_type(args.kv_type);
    let executor = progress::reporting(opened.executor, &status, sizing.prefill_chunk);
    let driver = Driver::placed(Arc::clone(&handle), executor, placement, options)?;
    let upload_seconds = started.elapsed().as_secs_f64();
    let started = Instant::now();
    let mut driver = driver.serve(Layout::Contiguous).map_err(|refused| {
        let (_, error) = *refused;
        CliError::Driver(error)
    })?;
    let compile_seconds = started.elapsed().as_secs_f64();
    status.line(format!(
        "weights on the device in {upload_seconds:.1} s; compiled for {} positions, prefill chunk {}, in {compile_seconds:.1} s",
        sizing.capacity, sizing.prefill_chunk
    ));
    crate::draft::attach(
        &mut driver,
        &args.spec,
        args.backend.choice(),
        sizing.prefill_chunk,
        Layout::Contiguous,
        &status,
    )?;
    let traffic = traffic::decode_traffic(
        &handle,
        driver.executor().target(),
        sizing.capacity,
        options.kv_type,
        options.trace,
    )?;

    let ids = prompt_ids(&handle, prompt)?;
    // Warm-up: both entries (and, speculating, the verification entry) run before anything
    // is timed.
    timed(&mut driver, &ids, 2)?;
    if driver.options().speculation.is_on() {
        timed(&mut driver, &ids, generate)?;
    }
    let warm = driver.spec_stats();
    let mut runs = Vec::with_capacity(args.repeats as usize);
    for i in 0..args.repeats {
        let run = timed(&mut driver, &ids, generate)?;
        status.line(format!(
            "run {}/{}: prefill {:.1} tok/s, decode {:.1} tok/s",
            i + 1,
            args.repeats,
            run.prefill_tok_s,
            run.decode_tok_s
        ));
        runs.push(run);
    }
    let spec = driver
        .options()
        .speculation
        .is_on()
        .then(|| spec_delta(warm, driver.spec_stats()));

    let report = Report {
        model: path.display().to_string(),
        family: handle.config().family,
        layers: handle.config().n_layers,
        backend: opened.backend.to_string(),
        device: opened.device_name.clone(),
        placement,
        prompt,
        generate,
        sizing,
        runs,
        traffic,
        bandwidth,
        upload_seconds,
        compile_seconds,
        tuning: std::env::var("POOT_TUNING")
            .ok()
            .filter(|t| !t.trim().is_empty()),
        spec,
        spec_args: args.spec.clone(),
        prompt_file: args.prompt_file.clone(),
    };
    // A closed stdout (a pipe) ends the command quietly.
    let _ = if args.json {
        output::write_line(&report.json())
    } else {
        write_text(&report.table())
    };
    Ok(())
}

/// What speculation did between `before` and `after` (the timed repeats).
fn spec_delta(before: SpecStats, after: SpecStats) -> SpecStats {
    SpecStats {
        verify_steps: after.verify_steps - before.verify_steps,
        verified_rows: after.verified_rows - before.verified_rows,
        drafted_tokens: after.drafted_tokens - before.drafted_tokens,
        accepted_tokens: after.accepted_tokens - before.accepted_tokens,
        model_drafted_tokens: after.model_drafted_tokens - before.model_drafted_tokens,
        draft_model_steps: after.draft_model_steps - before.draft_model_steps,
    }
}

/// The capacity (default: what a repeat needs, rounded up to a multiple of `granule`) and the
/// prefill chunk.
fn bench_sizing(
    args: &BenchArgs,
    prompt: usize,
    max_positions: usize,
    granule: usize,
) -> Result<Sizing, CliError> {
    let generate = args.gen_tokens as usize;
    let needed = (prompt + generate).div_ceil(granule) * granule;
    if needed > max_positions {
        return Err(CliError::BenchSize {
            prompt,
            generate,
            needed,
            limit: max_positions,
            what: if granule > 1 {
                "the model's positions, counted in whole KV blocks"
            } else {
                "the model's positions"
            },
        });
    }
    let capacity = args.capacity.map_or(needed, |c| c as usize);
    if needed > capacity {
        return Err(CliError::BenchSize {
            prompt,
            generate,
            needed,
            limit: capacity,
            what: "--capacity",
        });
    }
    sizing::size(
        Some(capacity),
        args.prefill_chunk.map(|c| c as usize),
        max_positions,
        Some((prompt, generate)),
    )
}

/// `n` fixed prompt ids spread over the vocabulary, skipping the special tokens (so no
/// end-of-text or control token sits in the prompt).
fn prompt_ids(handle: &ModelHandle, n: usize) -> Result<Vec<u32>, CliError> {
    let vocab = handle.config().vocab_size as u64;
    let mut special: HashSet<u32> = handle.config().eos_ids.iter().copied().collect();
    special.extend(handle.config().bos_id);
    if let Ok(text) = handle.text() {
        let sp = text.tokenizer().special_tokens();
        special.extend(sp.eog.iter().copied());
        special.extend(
            [sp.bos, sp.eos, sp.eot, sp.eom, sp.pad, sp.unk]
                .into_iter()
                .flatten(),
        );
    }
    let ids: Vec<u32> = (0u64..)
        .map(|k| ((k * 7919 + 101) % vocab.max(1)) as u32)
        .filter(|id| !special.contains(id))
        .take(n)
        .collect();
    if ids.len() < n {
        return Err(CliError::EmptyPrompt);
    }
    Ok(ids)
}

/// One greedy generation of `generate` tokens after `prompt`, ignoring end-of-text.
fn timed(driver: &mut Driver<Serving>, prompt: &[u32], generate: usize) -> Result<Run, CliError> {
    let request = GenerateRequest {
        ignore_eos: true,
        ..GenerateRequest::new(prompt.to_vec(), generate, Sampler::greedy())
    };
    let g: Generation = driver.generate(request, &mut |_| std::ops::ControlFlow::Continue(()))?;
    if g.finish != FinishReason::Length || g.tokens.len() != generate {
        return Err(CliError::BenchShort {
            got: g.tokens.len(),
            want: generate,
        });
    }
    // The first token comes with the prefill; the rest are decode steps.
    Ok(Run {
        prefill_tok_s: output::per_second(prompt.len(), g.prefill_seconds),
        decode_tok_s: output::per_second(generate - 1, g.decode_seconds),
    })
}

/// The median of `v` (0 for none).
pub(crate) fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// Everything the benchmark measured.
struct Report {
    model: String,
    family: &'static str,
    layers: usize,
    backend: String,
    device: String,
    /// Where the model ran: a tensor-parallel group's devices each read their share of a
    /// token's bytes at once; a pipeline's stages read theirs one after another.
    placement: Placement,
    prompt: usize,
    generate: usize,
    sizing: Sizing,
    runs: Vec<Run>,
    traffic: DecodeTraffic,
    bandwidth: CopyBandwidth,
    upload_seconds: f64,
    compile_seconds: f64,
    /// The `POOT_TUNING` overrides the kernels were planned with, if any: a run with them
    /// measures something other than the defaults, and its record says so.
    tuning: Option<String>,
    /// What speculative decoding did over the timed repeats, when on.
    spec: Option<SpecStats>,
    spec_args: crate::cli::SpecArgs,
    prompt_file: Option<std::path::PathBuf>,
}

impl Report {
    fn prefill_tok_s(&self) -> f64 {
        median(self.runs.iter().map(|r| r.prefill_tok_s).collect())
    }

    fn decode_tok_s(&self) -> f64 {
        median(self.runs.iter().map(|r| r.decode_tok_s).collect())
    }

    /// The mean context a decode step reads: step k (1..generate) attends to prompt + k
    /// positions.
    fn mean_context(&self) -> f64 {
        self.prompt as f64 + self.generate as f64 / 2.0
    }

    fn bytes_per_token(&self) -> f64 {
        self.traffic.bytes_at(self.mean_context())
    }

    /// The time a decode token takes at the measured bandwidth (of every device of a
    /// tensor-parallel group together; of one device at a time for a pipeline's stages), in
    /// seconds.
    fn floor_seconds(&self) -> f64 {
        let at_once = self.placement.tensor_parallel();
        let bw = self.bandwidth.bytes_per_second() * at_once as f64;
        if bw > 0.0 {
            self.bytes_per_token() / bw
        } else {
            0.0
        }
    }

    /// The floor over the measured time per token.
    fn fraction(&self) -> f64 {
        self.floor_seconds() * self.decode_tok_s()
    }

    fn table(&self) -> String {
        let decode = self.decode_tok_s();
        let ms = if decode > 0.0 { 1e3 / decode } else { 0.0 };
        let kv = self.traffic.kv_bytes_per_position as f64 * self.mean_context();
        let rows: Vec<(&str, String)> = vec![
            (
                "model",
                format!("{} ({}, {} layers)", self.model, self.family, self.layers),
            ),
            ("backend", format!("{} on {}", self.backend, self.device)),
            (
                "bandwidth",
                format!(
                    "{:.1} GB/s measured (device-to-device copy, read + write){}",
                    self.bandwidth.bytes_per_second() / 1e9,
                    if self.placement.devices() > 1 {
                        format!(" on each of {} devices", self.placement.devices())
                    } else {
                        String::new()
                    }
                ),
            ),
            (
                "prefill",
                format!(
                    "{:.1} tok/s ({} tokens, chunks of {})",
                    self.prefill_tok_s(),
                    self.prompt,
                    self.sizing.prefill_chunk
                ),
            ),
            (
                "decode",
                format!(
                    "{decode:.1} tok/s, {ms:.3} ms/token ({} tokens after the prompt)",
                    self.generate
                ),
            ),
            (
                "dispatches",
                format!("{} per decode token", self.traffic.dispatches),
            ),
            (
                "bytes/token",
                format!(
                    "{:.1} MB = {:.1} MB weights + {:.1} MB KV at {:.0} positions",
                    self.bytes_per_token() / 1e6,
                    self.traffic.weight_bytes as f64 / 1e6,
                    kv / 1e6,
                    self.mean_context()
                ),
            ),
            (
                "floor",
                format!(
                    "{:.3} ms/token at the measured bandwidth",
                    self.floor_seconds() * 1e3
                ),
            ),
            (
                "fraction",
                format!("{:.1}% of the measured bandwidth", self.fraction() * 100.0),
            ),
        ];
        let mut out = String::new();
        for (k, v) in rows {
            out.push_str(&format!("{k:<12} {v}\n"));
        }
        if let Some(tuning) = &self.tuning {
            out.push_str(&format!("{:<12} POOT_TUNING={tuning}\n", "tuning"));
        }
        if let Some(file) = &self.prompt_file {
            out.push_str(&format!("{:<12} {}\n", "prompt", file.display()));
        }
        if let Some(spec) = &self.spec {
            out.push_str(&format!(
                "{:<12} {} drafts per step{}{}: {}\n",
                "speculation",
                self.spec_args.spec_tokens,
                if self.spec_args.spec_ngram {
                    ", prompt lookup"
                } else {
                    ""
                },
                self.spec_args
                    .draft_model
                    .as_ref()
                    .map(|m| format!(", draft model {m}"))
                    .unwrap_or_default(),
                crate::draft::stats_line(spec)
            ));
        }
        out.push_str(&format!(
            "(medians of {} repeats; capacity {})\n",
            self.runs.len(),
            self.sizing.capacity
        ));
        out
    }

    fn json(&self) -> serde_json::Value {
        let decode = self.decode_tok_s();
        let speculation = self.spec.map(|s| {
            json!({
                "tokens": self.spec_args.spec_tokens,
                "ngram": self.spec_args.spec_ngram,
                "draft_model": self.spec_args.draft_model,
                "verify_steps": s.verify_steps,
                "drafted_tokens": s.drafted_tokens,
                "accepted_tokens": s.accepted_tokens,
                "acceptance_rate": s.acceptance_rate(),
                "tokens_per_verified_row": s.tokens_per_verified_row(),
                "draft_model_steps": s.draft_model_steps,
            })
        });
        json!({
            "model": self.model,
            "family": self.family,
            "layers": self.layers,
            "backend": self.backend,
            "device": self.device,
            "tensor_parallel": self.placement.tensor_parallel(),
            "pipeline_stages": self.placement.pipeline_stages(),
            "prompt_tokens": self.prompt,
            "gen_tokens": self.generate,
            "repeats": self.runs.len(),
            "capacity": self.sizing.capacity,
            "prefill_chunk": self.sizing.prefill_chunk,
            "tuning": self.tuning,
            "prefill_tok_s": self.prefill_tok_s(),
            "decode_tok_s": decode,
            "decode_ms_per_token": if decode > 0.0 { 1e3 / decode } else { 0.0 },
            "prefill_tok_s_runs": self.runs.iter().map(|r| r.prefill_tok_s).collect::<Vec<_>>(),
            "decode_tok_s_runs": self.runs.iter().map(|r| r.decode_tok_s).collect::<Vec<_>>(),
            "dispatches_per_token": self.traffic.dispatches,
            "weight_bytes_per_token": self.traffic.weight_bytes,
            "kv_bytes_per_position": self.traffic.kv_bytes_per_position,
            "kv_elems_per_position": self.traffic.kv_elems_per_position,
            "mean_context": self.mean_context(),
            "bytes_per_token": self.bytes_per_token(),
            "bandwidth_bytes_per_s": self.bandwidth.bytes_per_second(),
            "bandwidth_probe": {
                "buffer_bytes": self.bandwidth.buffer_bytes,
                "copies_per_round": self.bandwidth.copies_per_round,
                "rounds": self.bandwidth.rounds,
                "best_seconds": self.bandwidth.best_seconds,
            },
            "floor_ms_per_token": self.floor_seconds() * 1e3,
            "bandwidth_fraction": self.fraction(),
            "upload_seconds": self.upload_seconds,
            "compile_seconds": self.compile_seconds,
            "prompt_file": self.prompt_file.as_ref().map(|f| f.display().to_string()),
            "speculation": speculation,
        })
    }
}

pub(crate) fn write_text(text: &str) -> std::io::Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())?;
    out.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 3.0, 2.0]), 2.5);
        assert_eq!(median(vec![]), 0.0);
    }
}
