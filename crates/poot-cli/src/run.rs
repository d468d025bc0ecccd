//! `poot run`: load a checkpoint, open a backend, build the driver, then generate for one
//! prompt or chat turn by turn on stdin.

use std::io::{self, BufRead, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use poot_llm::sampling::CANDIDATES;
use poot_llm::{
    BackendChoice, Constraint, Driver, DriverError, DriverOptions, GenerateRequest, GuideStats,
    Layout, LoadOptions, MAX_LOGIT_BIAS, ModelHandle, OpenedExecutor, Penalties, Sampler, Serving,
    open_placed_executor,
};
use poot_models::{ModelKind, Registry};
use poot_text::TextServices;
use serde_json::{Value as Json, json};

use crate::catalog::{self, Purpose};
use crate::cli::RunArgs;
use crate::error::CliError;
use crate::output::{self, Answer, Format, Placement, TokenSink};
use crate::progress::{self, Progress};
use crate::resolve;
use crate::sizing::{self, Sizing};
use crate::status::Status;

/// A prompt as token ids, with what ends its answer.
struct Prompt {
    ids: Vec<u32>,
    /// `--stop` strings, then the chat template's end-of-turn markers.
    stops: Vec<String>,
    /// The chat template's end-of-turn token ids.
    stop_ids: Vec<u32>,
}

/// What every generation of this run shares.
struct Session {
    driver: Driver<Serving>,
    placement: Placement,
    sampler: Sampler,
    max_new: usize,
    ignore_eos: bool,
    /// Alternatives per token when the JSON output reports log-probabilities.
    top_logprobs: Option<usize>,
    format: Format,
    status: Status,
    /// Report speculation, guided decoding's cost and step shapes after each answer.
    verbose: bool,
    /// The loaded LoRA adapter's name, when `--lora` gave one.
    lora: Option<String>,
    /// What every answer must match (guided decoding).
    guide: Option<Constraint>,
}

/// The `--json-schema`, `--json-object`, `--grammar` or `--regex` constraint (clap lets one
/// through at most).
fn guide(args: &RunArgs) -> Result<Option<Constraint>, CliError> {
    let read = |flag: &'static str, path: &Path| {
        std::fs::read_to_string(path).map_err(|e| CliError::GuideFile {
            flag,
            path: path.to_path_buf(),
            reason: e.to_string(),
        })
    };
    if let Some(path) = &args.json_schema {
        let schema = serde_json::from_str(&read("--json-schema", path)?).map_err(|e| {
            CliError::GuideFile {
                flag: "--json-schema",
                path: path.clone(),
                reason: format!("not JSON: {e}"),
            }
        })?;
        return Ok(Some(Constraint::JsonSchema(schema)));
    }
    if let Some(path) = &args.grammar {
        return Ok(Some(Constraint::Lark(read("--grammar", path)?)));
    }
    if let Some(rx) = &args.regex {
        return Ok(Some(Constraint::Regex(rx.clone())));
    }
    Ok(args.json_object.then_some(Constraint::JsonObject))
}

/// The `-v` line on guided decoding's masks: their count, the host time per mask (the cost per
/// guided token) and what the steps waited for them.
fn guide_line(s: &GuideStats) -> String {
    let per = |secs: f64| 1e3 * secs / s.masks.max(1) as f64;
    format!(
        "guided decoding: {} masks, {:.3} ms per mask on the host, steps waited {:.3} ms per mask",
        s.masks,
        per(s.mask_seconds),
        per(s.wait_seconds)
    )
}

pub fn run(args: RunArgs, status: Status) -> Result<(), CliError> {
    if args.logit_bias.len() > MAX_LOGIT_BIAS {
        return Err(CliError::TooManyLogitBiases {
            given: args.logit_bias.len(),
            max: MAX_LOGIT_BIAS,
        });
    }
    if args.stop.iter().any(String::is_empty) {
        return Err(CliError::EmptyStop);
    }
    if args.top_k as usize > CANDIDATES {
        return Err(CliError::TopKOverLimit {
            given: args.top_k,
            limit: CANDIDATES,
        });
    }
    let resolved = resolve::model(&args.model, &args.revision, Purpose::Generate, &status)?;
    let path = resolved.path.clone();
    let handle = load(&path, resolved.verify(args.verify.as_deref()), &status)?;
    let vocab = handle.config().vocab_size;
    if let Some(&(id, _)) = args.logit_bias.iter().find(|(id, _)| *id as usize >= vocab) {
        return Err(CliError::LogitBiasToken { id, vocab });
    }
    if handle.config().kind == ModelKind::Encoder {
        return Err(CliError::NotAGenerator {
            name: args.model.clone(),
            kind: "encoder (embedding)",
            known: catalog::names(Some(Purpose::Generate)),
        });
    }
    let text = handle.text().map_err(|source| CliError::Text {
        path: path.clone(),
        source: Box::new(source),
    })?;
    let chat = args.chat || args.system.is_some() || args.prompt.is_none();
    if chat && text.chat_templates().is_empty() {
        return Err(CliError::NoChatTemplate { path });
    }
    let mut conversation: Vec<Json> = args
        .system
        .iter()
        .map(|s| json!({"role": "system", "content": s}))
        .collect();
    let max_new = args.max_new as usize;
    let max_positions = handle.config().max_positions;
    let capacity = args.capacity.map(|c| c as usize);
    let prefill_chunk = args.prefill_chunk.map(|c| c as usize);
    let format = if args.json {
        Format::Json
    } else {
        Format::Text
    };
    let sampler = sampler(&args, &status);
    let guide = guide(&args)?;
    if let Some(c) = &guide {
        // An invalid schema, grammar or regex is reported before any device work.
        let guides = handle.guides().map_err(DriverError::from)?;
        guides.compile(c).map_err(DriverError::from)?;
    }

    let Some(user) = &args.prompt else {
        let sizing = sizing::size(capacity, prefill_chunk, max_positions, None)?;
        let handle = narrowed(handle, &path, sizing.capacity)?;
        let text = handle.text().map_err(|source| CliError::Text {
            path: path.clone(),
            source: Box::new(source),
        })?;
        let mut session = Session::start(&handle, &args, sizing, sampler, format, status)?;
        session.guide = guide;
        return chat_loop(&mut session, text, conversation, &args.stop);
    };
    let prompt = if chat {
        conversation.push(json!({"role": "user", "content": user}));
        chat_prompt(text, &conversation, &args.stop, args.ignore_eos)?
    } else {
        Prompt {
            ids: text.encode(user)?,
            stops: args.stop.clone(),
            stop_ids: Vec::new(),
        }
    };
    if prompt.ids.is_empty() {
        return Err(CliError::EmptyPrompt);
    }
    let sizing = sizing::size(
        capacity,
        prefill_chunk,
        max_positions,
        Some((prompt.ids.len(), max_new)),
    )?;
    let handle = narrowed(handle, &path, sizing.capacity)?;
    let mut session = Session::start(&handle, &args, sizing, sampler, format, status)?;
    session.guide = guide;
    let answer = session.generate(&prompt)?;
    if format == Format::Text && !answer.closed && io::stdout().is_terminal() {
        end_line(&answer.text);
    }
    Ok(())
}

/// The handle narrowed to `capacity` positions (its rotary tables sized by the capacity in
/// use, not by the context the checkpoint declares), ready to share with a driver.
pub(crate) fn narrowed(
    mut handle: ModelHandle,
    path: &Path,
    capacity: usize,
) -> Result<Arc<ModelHandle>, CliError> {
    handle
        .narrow_positions(capacity)
        .map_err(|source| CliError::Load {
            path: PathBuf::from(path),
            source: Box::new(source),
        })?;
    Ok(Arc::new(handle))
}

/// The load options `--verify MANIFEST` asks for (none: the defaults).
pub(crate) fn load_options(verify: Option<&Path>) -> Result<LoadOptions, CliError> {
    match verify {
        None => Ok(LoadOptions::default()),
        Some(manifest) => {
            poot_llm::handle::verifying(manifest).map_err(|source| CliError::Manifest {
                path: manifest.to_path_buf(),
                source: Box::new(source),
            })
        }
    }
}

/// Loads the checkpoint at `path`, checked against `verify`'s manifest when given.
pub(crate) fn load(
    path: &Path,
    verify: Option<&Path>,
    status: &Status,
) -> Result<ModelHandle, CliError> {
    let options = load_options(verify)?;
    status.line(format!("loading {}", path.display()));
    let started = Instant::now();
    let registry = Registry::builtin().map_err(CliError::Registry)?;
    let progress = Progress::new(status);
    progress.spinner(format!("reading {}", path.display()));
    let handle = ModelHandle::load(path, &registry, &options).map_err(|source| CliError::Load {
        path: PathBuf::from(path),
        source: Box::new(source),
    })?;
    progress.clear();
    let config = handle.config();
    status.line(format!(
        "loaded {} ({} layers, {} positions) in {:.1} s",
        config.family,
        config.n_layers,
        config.max_positions,
        started.elapsed().as_secs_f64()
    ));
    Ok(handle)
}

/// The sampler the flags ask for.
fn sampler(args: &RunArgs, status: &Status) -> Sampler {
    let adjusted = Sampler {
        penalties: Penalties {
            repetition: args.repeat_penalty,
            presence: args.presence_penalty,
            frequency: args.frequency_penalty,
        },
        logit_bias: args.logit_bias.clone(),
        ..Sampler::greedy()
    };
    if args.temperature == 0.0 {
        if args.top_k != 0 || args.top_p < 1.0 || args.min_p > 0.0 || args.seed.is_some() {
            status.line(
                "note: --top-k, --top-p, --min-p and --seed have no effect at --temperature 0 (greedy)",
            );
        }
        return adjusted;
    }
    let seed = args.seed.unwrap_or_else(|| {
        let seed = fresh_seed();
        status.line(format!("sampling with --seed {seed}"));
        seed
    });
    Sampler {
        temperature: args.temperature,
        top_k: args.top_k,
        top_p: args.top_p,
        min_p: args.min_p,
        seed,
        ..adjusted
    }
}

fn fresh_seed() -> u64 {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    nanos ^ (u64::from(std::process::id()) << 40)
}

/// Renders `conversation` with the model's chat template.
fn chat_prompt(
    text: &TextServices,
    conversation: &[Json],
    stops: &[String],
    ignore_eos: bool,
) -> Result<Prompt, CliError> {
    let rendered = text.render_chat_value(&Json::Array(conversation.to_vec()), None)?;
    let ids = text.encode_chat(&rendered)?;
    let mut all_stops = stops.to_vec();
    all_stops.extend(rendered.turn_stops(ignore_eos));
    Ok(Prompt {
        ids,
        stops: all_stops,
        stop_ids: rendered.turn_stop_ids(ignore_eos),
    })
}

impl Session {
    /// Opens the backend and builds the driver (uploads the weights, compiles every entry).
    fn start(
        handle: &Arc<ModelHandle>,
        args: &RunArgs,
        sizing: Sizing,
        sampler: Sampler,
        format: Format,
        status: Status,
    ) -> Result<Session, CliError> {
        let choice = args.backend.choice();
        // One adapter: tables of exactly its rank on exactly its projections, checked against
        // the model before the backend opens.
        let (adapter, lora_shape) = match &args.lora {
            Some(path) => {
                let lora = |source| CliError::Lora {
                    path: path.clone(),
                    source,
                };
                let a = poot_models::LoraAdapter::read(path).map_err(lora)?;
                let shape = poot_models::LoraShape {
                    targets: a.targets,
                    ..poot_models::LoraShape::new(1, a.rank)
                };
                a.check(handle.model().weights(), handle.config().n_layers, shape)
                    .map_err(lora)?;
                (Some(a), Some(shape))
            }
            None => (None, None),
        };
        let started = Instant::now();
        check_placement(handle, args.placement.placement())?;
        let opened = open(choice, args.placement.placement())?;
        status.line(format!(
            "backend {} on {} (opened in {:.1} s)",
            opened.backend,
            opened.device_name,
            started.elapsed().as_secs_f64()
        ));
        let placement = Placement {
            backend: opened.backend.to_string(),
            device: opened.device_name,
        };
        let top_logprobs = args.top_logprobs.map(usize::from);
        if top_logprobs.is_some() && format != Format::Json {
            status.line("note: --top-logprobs shows in the --json output only");
        }
        let started = Instant::now();
        let options = DriverOptions::new(sizing.capacity, sizing.prefill_chunk)
            .with_speculation(args.spec.speculation())
            .with_lora(lora_shape)
            .with_kv_type(args.kv_type);
        let executor = progress::reporting(opened.executor, &status, sizing.prefill_chunk);
        let driver = Driver::placed(
            Arc::clone(handle),
            executor,
            args.placement.placement(),
            options,
        )?;
        let uploaded = started.elapsed().as_secs_f64();
        let started = Instant::now();
        let mut driver = driver.serve(Layout::Contiguous).map_err(|refused| {
            let (_, error) = *refused;
            CliError::Driver(error)
        })?;
        status.line(format!(
            "weights on the device in {uploaded:.1} s; compiled for {} positions, prefill chunk {}, in {:.1} s",
            sizing.capacity,
            sizing.prefill_chunk,
            started.elapsed().as_secs_f64()
        ));
        let lora = match &adapter {
            Some(a) => {
                driver.load_lora("lora", a)?;
                status.line(format!(
                    "LoRA adapter of rank {} on {} projections",
                    a.rank,
                    a.targets.iter().count()
                ));
                Some("lora".to_owned())
            }
            None => None,
        };
        crate::draft::attach(
            &mut driver,
            &args.spec,
            choice,
            sizing.prefill_chunk,
            Layout::Contiguous,
            &status,
        )?;
        Ok(Session {
            driver,
            placement,
            sampler,
            max_new: args.max_new as usize,
            ignore_eos: args.ignore_eos,
            top_logprobs: top_logprobs.filter(|_| format == Format::Json),
            format,
            status,
            verbose: args.verbose,
            lora,
            guide: None,
        })
    }

    fn capacity(&self) -> usize {
        self.driver.options().capacity
    }

    /// Generates for `prompt`, streaming to stdout; the timings go to stderr.
    fn generate(&mut self, prompt: &Prompt) -> Result<Answer, CliError> {
        let request = GenerateRequest {
            stops: prompt.stops.clone(),
            ignore_eos: self.ignore_eos,
            top_logprobs: self.top_logprobs,
            lora: self.lora.clone(),
            guide: self.guide.clone(),
            ..GenerateRequest::new(prompt.ids.clone(), self.max_new, self.sampler.clone())
        };
        let handle = Arc::clone(self.driver.handle());
        let tokenizer = handle.text().map_err(DriverError::from)?.tokenizer();
        // The text one alternative token stands for; the driver checked its id.
        let piece = |id: u32| {
            let bytes = tokenizer.token_to_piece(id, false).unwrap_or_default();
            String::from_utf8_lossy(&bytes).into_owned()
        };
        let mut sink = TokenSink::new(self.format, &prompt.stops, &prompt.stop_ids);
        let generation = self
            .driver
            .generate(request, &mut |t| sink.token(t, &piece))?;
        let mut answer = sink.finish(&generation);
        if self.format == Format::Json && !answer.closed {
            answer.closed =
                output::write_summary(&prompt.ids, &answer, &generation, &self.placement).is_err();
        }
        self.status
            .line(output::timings(prompt.ids.len(), &answer, &generation));
        if self.verbose {
            if self.driver.options().speculation.is_on() {
                self.status
                    .line(crate::draft::stats_line(&self.driver.spec_stats()));
            }
            if self.guide.is_some() {
                self.status.line(guide_line(&self.driver.guide_stats()));
            }
            let runs: Vec<String> = self
                .driver
                .runs()
                .iter()
                .map(|(&(rows, tokens), n)| format!("{n} x {rows}x{tokens}"))
                .collect();
            self.status
                .line(format!("device steps (rows x tokens): {}", runs.join(", ")));
        }
        Ok(answer)
    }
}

/// Refuses a placement the model cannot take (a pipeline with more stages than layers) before
/// any device opens.
pub fn check_placement(
    handle: &ModelHandle,
    placement: poot_llm::Placement,
) -> Result<(), CliError> {
    if let poot_llm::Placement::Pipeline { stages } = placement {
        poot_models::Stage::new(0, stages)
            .and_then(|s| s.layers(handle.config().n_layers))
            .map_err(|e| CliError::Driver(e.into()))?;
    }
    Ok(())
}

/// The backend's executor over the devices `placement` spans: one device, or a group.
pub fn open(
    choice: BackendChoice,
    placement: poot_llm::Placement,
) -> Result<OpenedExecutor, CliError> {
    Ok(open_placed_executor(choice, placement)?)
}

/// Chats on stdin until `/exit` or end of input.
fn chat_loop(
    session: &mut Session,
    text: &TextServices,
    mut conversation: Vec<Json>,
    stops: &[String],
) -> Result<(), CliError> {
    let stdin = io::stdin();
    let interactive = stdin.is_terminal();
    session
        .status
        .line("chat: type a message and press Enter; /exit or Ctrl-D ends");
    let mut lines = stdin.lock();
    loop {
        if interactive {
            eprint!("> ");
            let _ = io::stderr().flush();
        }
        let mut line = String::new();
        if lines.read_line(&mut line).map_err(CliError::Stdin)? == 0 {
            break;
        }
        let line = line.trim_end_matches(['\n', '\r']);
        if line.trim() == "/exit" {
            break;
        }
        if line.trim().is_empty() {
            continue;
        }
        conversation.push(json!({"role": "user", "content": line}));
        let prompt = chat_prompt(text, &conversation, stops, session.ignore_eos)?;
        if prompt.ids.len() + session.max_new > session.capacity() {
            return Err(CliError::PromptOverCapacity {
                prompt: prompt.ids.len(),
                max_new: session.max_new,
                capacity: session.capacity(),
            });
        }
        let answer = session.generate(&prompt)?;
        if answer.closed {
            break;
        }
        if session.format == Format::Text {
            end_line(&answer.text);
        }
        conversation.push(json!({"role": "assistant", "content": answer.text}));
    }
    Ok(())
}

/// Ends the streamed text's line, so the next prompt or shell prompt starts on its own.
fn end_line(text: &str) {
    if !text.ends_with('\n') {
        let mut out = io::stdout().lock();
        let _ = writeln!(out).and_then(|()| out.flush());
    }
}
