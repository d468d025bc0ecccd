//! `poot rerank`: a cross-encoder scores each document against the query; the documents are
//! printed best first.

use std::time::Instant;

use poot_llm::CrossEncoder;
use serde_json::json;

use crate::catalog::Purpose;
use crate::cli::RerankArgs;
use crate::encoder_load::{self, LONGEST_BUCKET, MAX_ROWS};
use crate::error::CliError;
use crate::output;
use crate::resolve;
use crate::status::Status;

pub fn rerank(args: RerankArgs, status: Status) -> Result<(), CliError> {
    let resolved = resolve::model(&args.model, &args.revision, Purpose::Rerank, &status)?;
    let path = resolved.path.clone();
    // A manifest that cannot be read fails before the backend opens.
    let options = crate::run::load_options(resolved.verify(args.verify.as_deref()))?;
    // A token covers at least one character: the query, the longest document and the pair's
    // three special tokens bound every pair, and fewer lengths compile faster.
    let longest = args
        .documents
        .iter()
        .map(|d| d.chars().count())
        .max()
        .unwrap_or(0)
        + args.query.chars().count()
        + 3;
    let (prepared, buckets) = encoder_load::prepared_lengths(longest, LONGEST_BUCKET);
    let rows = args.documents.len().min(MAX_ROWS);
    let started = Instant::now();
    let loaded =
        encoder_load::open_and_load(args.backend.choice(), &path, buckets, &status, |exec| {
            CrossEncoder::load_with(&path, exec, rows, prepared, &options)
        })?;
    let mut encoder = loaded.encoder;
    status.line(format!(
        "loaded {} and compiled pair lengths up to {} for {rows} rows in {:.1} s",
        encoder.handle().config().family,
        encoder.max_tokens(),
        started.elapsed().as_secs_f64()
    ));

    let started = Instant::now();
    let docs: Vec<&str> = args.documents.iter().map(String::as_str).collect();
    let ranked = encoder.rerank(&args.query, &docs).map_err(|e| match e {
        poot_llm::EncoderError::Pair(poot_text::TokenizerError::PairFirstTooLong {
            tokens,
            max_tokens,
        }) => CliError::QueryTooLong { tokens, max_tokens },
        other => CliError::Encoder(other),
    })?;
    status.line(format!(
        "{} documents scored in {:.0} ms",
        ranked.len(),
        started.elapsed().as_secs_f64() * 1e3
    ));
    let shown = args.top_n.map_or(ranked.len(), |n| n as usize);
    let ranked = &ranked[..shown.min(ranked.len())];
    // A closed stdout (a pipe) ends the command quietly.
    let _ = if args.json {
        let results: Vec<_> = ranked
            .iter()
            .map(|r| json!({"index": r.index, "score": r.score, "document": docs.get(r.index)}))
            .collect();
        output::write_line(&json!({
            "model": path.display().to_string(),
            "backend": loaded.backend,
            "device": loaded.device,
            "query": args.query,
            "results": results,
        }))
    } else {
        ranked.iter().try_for_each(|r| {
            let doc = docs.get(r.index).copied().unwrap_or_default();
            output::write_text_line(&format!("{}\t{:.6}\t{doc}", r.index, r.score))
        })
    };
    Ok(())
}
