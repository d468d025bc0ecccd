//! `poot bench --rows N`: N sequences prefilled and decoded together over a paged KV cache, as
//! a server's rows are. Each repeat opens N sequences of distinct prompts at once, runs the
//! driver's serving steps until all have generated, and reports the total prefill throughput
//! (every prompt token over the time until the last sequence has its first token) and the total
//! decode throughput (every later token over the rest), the figures llama-batched-bench prints
//! as S_PP and S_TG.

use std::sync::Arc;
use std::time::Instant;

use poot_llm::{Driver, DriverOptions, GenerateRequest, Layout, ModelHandle, Sampler, Serving};
use serde_json::json;

use crate::bench::{median, write_text};
use crate::cli::BenchArgs;
use crate::error::CliError;
use crate::output;
use crate::status::Status;

/// KV positions per block of the benchmark's paged cache.
pub(crate) const BLOCK_TOKENS: usize = 16;

/// One timed repeat.
#[derive(Clone, Copy, Debug)]
struct RowsRun {
    prefill_tok_s: f64,
    decode_tok_s: f64,
}

/// Runs the batched benchmark on an opened executor.
pub fn bench_rows(
    args: &BenchArgs,
    handle: &Arc<ModelHandle>,
    executor: Box<dyn poot_executor::Executor>,
    placement: poot_llm::Placement,
    prompt_ids: &[u32],
    prefill_chunk: usize,
    status: &Status,
) -> Result<(), CliError> {
    let rows = args.rows as usize;
    let (prompt, generate) = (args.prompt_tokens as usize, args.gen_tokens as usize);
    // Paged blocks must tile the capacity: round it up to whole blocks.
    let capacity = (prompt + generate).div_ceil(BLOCK_TOKENS) * BLOCK_TOKENS;
    let max_positions = handle.config().max_positions;
    if capacity > max_positions {
        return Err(CliError::BenchSize {
            prompt,
            generate,
            needed: capacity,
            limit: max_positions,
            what: "the model's positions (rounded up to whole KV blocks)",
        });
    }
    let options = DriverOptions::new(capacity, prefill_chunk.min(capacity))
        .with_rows(rows)
        .with_speculation(args.spec.speculation())
        .with_kv_type(args.kv_type);
    let layout = Layout::Paged {
        block_tokens: BLOCK_TOKENS,
        blocks: rows * capacity / BLOCK_TOKENS + 1,
    };
    let started = Instant::now();
    let mut driver = Driver::placed(Arc::clone(handle), executor, placement, options)?
        .serve(layout)
        .map_err(|refused| CliError::Driver(refused.1))?;
    crate::draft::attach(
        &mut driver,
        &args.spec,
        args.backend.choice(),
        prefill_chunk.min(capacity),
        layout,
        status,
    )?;
    // Every row bucket and prompt chunk is prepared before anything is timed.
    driver.warm_all();
    let p = driver.preparation();
    status.line(format!(
        "{rows} rows of {capacity} positions: {} step variants prepared in {:.1} s",
        p.entries,
        started.elapsed().as_secs_f64()
    ));
    // Distinct prompts per row (rotations of the fixed ids), so no row reuses another's prefix.
    let prompts: Vec<Vec<u32>> = (0..rows)
        .map(|r| {
            let mut ids = prompt_ids.to_vec();
            ids.rotate_left(r % prompt_ids.len().max(1));
            ids
        })
        .collect();
    // Warm-up: one short round.
    round(&mut driver, &prompts, 2)?;
    let mut runs = Vec::with_capacity(args.repeats as usize);
    for i in 0..args.repeats {
        // Released prompts stay in the prefix cache; shift them so no repeat reuses them.
        let shifted: Vec<Vec<u32>> = prompts
            .iter()
            .map(|p| {
                let mut p = p.clone();
                p.rotate_right(1 + i as usize);
                p
            })
            .collect();
        let run = round(&mut driver, &shifted, generate)?;
        status.line(format!(
            "run {}/{}: prefill {:.1} tok/s, decode {:.1} tok/s over {rows} rows",
            i + 1,
            args.repeats,
            run.prefill_tok_s,
            run.decode_tok_s
        ));
        runs.push(run);
    }
    let prefill = median(runs.iter().map(|r| r.prefill_tok_s).collect());
    let decode = median(runs.iter().map(|r| r.decode_tok_s).collect());
    let shapes: Vec<String> = driver
        .runs()
        .iter()
        .map(|((r, t), n)| format!("{r}x{t}:{n}"))
        .collect();
    let _ = if args.json {
        output::write_line(&json!({
            "model": args.model,
            "rows": rows,
            "prompt_tokens": prompt,
            "gen_tokens": generate,
            "prefill_chunk": options.prefill_chunk,
            "max_batched_tokens": options.max_batched_tokens,
            "repeats": runs.len(),
            "prefill_tok_s": prefill,
            "decode_tok_s": decode,
            "decode_tok_s_per_row": decode / rows as f64,
            "prefill_tok_s_runs": runs.iter().map(|r| r.prefill_tok_s).collect::<Vec<_>>(),
            "decode_tok_s_runs": runs.iter().map(|r| r.decode_tok_s).collect::<Vec<_>>(),
            "step_shapes": shapes,
            "tuning": std::env::var("POOT_TUNING").ok().filter(|t| !t.trim().is_empty()),
        }))
    } else {
        write_text(&format!(
            "rows         {rows}\nprefill      {prefill:.1} tok/s ({prompt} tokens a row, chunks up to {})\ndecode       {decode:.1} tok/s ({:.1} a row, {generate} tokens a row)\nsteps        {} (rows x tokens: runs)\n(medians of {} repeats)\n",
            options.prefill_chunk,
            decode / rows as f64,
            shapes.join(" "),
            runs.len()
        ))
    };
    Ok(())
}

/// Opens one sequence per prompt, steps until all have `generate` tokens, releases them.
fn round(
    driver: &mut Driver<Serving>,
    prompts: &[Vec<u32>],
    generate: usize,
) -> Result<RowsRun, CliError> {
    let started = Instant::now();
    let mut ids = Vec::with_capacity(prompts.len());
    for p in prompts {
        let request = GenerateRequest {
            ignore_eos: true,
            ..GenerateRequest::new(p.clone(), generate, Sampler::greedy())
        };
        ids.push(driver.open(request)?);
    }
    let mut got = vec![0usize; ids.len()];
    let mut finished = 0;
    let mut first_all: Option<Instant> = None;
    while finished < ids.len() {
        let picks = driver.step()?;
        for event in driver.commit(picks)? {
            let Some(i) = ids.iter().position(|&id| id == event.id) else {
                continue;
            };
            got[i] += event.tokens.len();
            if event.finish.is_some() {
                finished += 1;
            }
        }
        if first_all.is_none() && got.iter().all(|&g| g > 0) {
            first_all = Some(Instant::now());
        }
    }
    for &id in &ids {
        driver.release(id);
    }
    if let Some(&short) = got.iter().find(|&&g| g != generate) {
        return Err(CliError::BenchShort {
            got: short,
            want: generate,
        });
    }
    let first = first_all.unwrap_or(started);
    let prompt_tokens: usize = prompts.iter().map(Vec::len).sum();
    Ok(RowsRun {
        prefill_tok_s: output::per_second(prompt_tokens, (first - started).as_secs_f64()),
        decode_tok_s: output::per_second(
            prompts.len() * (generate - 1),
            first.elapsed().as_secs_f64(),
        ),
    })
}
