//! Speculative decoding's draft model (`--draft-model`): loaded, sized and served like the
//! target on the same backend, then attached to the target's driver, which refuses one whose
//! vocabulary differs.

use std::time::Instant;

use poot_llm::{BackendChoice, Driver, DriverOptions, Layout, Serving, SpecStats};

use crate::catalog::Purpose;
use crate::cli::SpecArgs;
use crate::error::CliError;
use crate::resolve;
use crate::run;
use crate::status::Status;

/// Loads `spec`'s draft model, if it names one, and attaches it to `driver`: `capacity`
/// positions, `prefill_chunk` tokens a chunk and `layout` as the target's, on `choice`'s
/// backend (one device).
pub fn attach(
    driver: &mut Driver<Serving>,
    spec: &SpecArgs,
    choice: BackendChoice,
    prefill_chunk: usize,
    layout: Layout,
    status: &Status,
) -> Result<(), CliError> {
    let Some(name) = &spec.draft_model else {
        return Ok(());
    };
    let started = Instant::now();
    let capacity = driver.options().capacity;
    // The draft resolves like the target's MODEL (a path, a packaged name or a Hub repository
    // at its main revision), and is checked against the repository's manifest where it has one.
    let resolved = resolve::model(name, "main", Purpose::Generate, status)?;
    let path = resolved.path.clone();
    let handle = run::narrowed(
        run::load(&path, resolved.verify(None), status)?,
        &path,
        capacity,
    )?;
    let opened = run::open(choice, poot_llm::Placement::Single)?;
    let options = DriverOptions::new(capacity, prefill_chunk)
        .with_rows(driver.rows())
        .with_kv_type(driver.options().kv_type);
    let draft = Driver::new(handle, opened.executor, options)?
        .serve(layout)
        .map_err(|refused| CliError::Driver(refused.1))?;
    driver.attach_draft(draft)?;
    status.line(format!(
        "draft model {} on {}, ready in {:.1} s; {} drafted tokens per step",
        path.display(),
        opened.device_name,
        started.elapsed().as_secs_f64(),
        spec.spec_tokens
    ));
    Ok(())
}

/// One line of what speculation did.
pub fn stats_line(stats: &SpecStats) -> String {
    format!(
        "speculation: {} verification steps, {} of {} drafted tokens accepted ({:.1}%), {:.2} tokens per verified row; the draft model drafted {} in {} steps",
        stats.verify_steps,
        stats.accepted_tokens,
        stats.drafted_tokens,
        stats.acceptance_rate() * 100.0,
        stats.tokens_per_verified_row(),
        stats.model_drafted_tokens,
        stats.draft_model_steps
    )
}
