//! The engine thread: it alone owns the driver. Handlers send it a job (one sequence per
//! choice) and read the job's events from a channel; dropping that channel's receiver is how a
//! handler says its client is gone, and the engine frees the job's rows before its next step.
//!
//! Each loop: take new jobs, drop the jobs whose client left, admit waiting sequences into free
//! rows in arrival order, run one step over every open sequence, and send what each produced.
//! A request the driver refuses at admission fails alone; a failed or panicking step fails the
//! sequences in that step, never the thread.

use std::collections::VecDeque;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use poot_llm::{DriverError, FinishReason, GenerateRequest, SeqEvent, SeqId, TokenLogprob};
use poot_models::LoraAdapter;
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};
use tokio::sync::oneshot;

use crate::error::{ApiError, ServeError};
use crate::metrics::Metrics;
use crate::rows::{Admission, Rows};

/// One sequence of a job.
#[derive(Clone, Debug)]
pub struct SeqSpec {
    /// The driver request; the driver ends the text before the first of its stop strings.
    pub request: GenerateRequest,
    /// Token ids that end the sequence (a chat template's end-of-turn tokens that are not
    /// already end-of-generation tokens); not included. Text the driver held back as a possible
    /// stop-string start when one of these ends the sequence is dropped with it.
    pub stop_ids: Vec<u32>,
}

/// What a handler hears about its job.
#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    /// A token of choice `choice`, and the text it releases (held back by the driver while it
    /// could still become a stop string).
    Token {
        choice: usize,
        id: u32,
        text: String,
        logprob: Option<TokenLogprob>,
    },
    /// Choice `choice` ended; `text` is what no token released (the decoder's last bytes).
    Done {
        choice: usize,
        text: String,
        finish: Finish,
        prompt_tokens: usize,
        completion_tokens: usize,
    },
    /// The job failed; no more events follow.
    Failed(ApiError),
}

/// Why a choice ended, in OpenAI's words.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Finish {
    /// An end-of-text token or a stop.
    Stop,
    /// max_tokens.
    Length,
}

impl Finish {
    pub fn as_str(self) -> &'static str {
        match self {
            Finish::Stop => "stop",
            Finish::Length => "length",
        }
    }
}

struct Job {
    seqs: Vec<SeqSpec>,
    events: UnboundedSender<Event>,
    arrived: Instant,
}

/// A LoRA load or unload, run on the engine thread between steps.
pub enum LoraChange {
    Load {
        name: String,
        adapter: Box<LoraAdapter>,
    },
    Unload {
        name: String,
    },
}

/// What the engine thread receives.
enum Work {
    Job(Job),
    Lora(LoraChange, oneshot::Sender<Result<(), DriverError>>),
}

/// The handlers' side of the engine.
#[derive(Clone)]
pub struct Engine {
    jobs: mpsc::Sender<Work>,
    /// Sequences sent and not yet admitted or dropped.
    waiting: Arc<AtomicUsize>,
    max_waiting: usize,
    healthy: Arc<AtomicBool>,
}

impl Engine {
    /// Starts the engine thread. `start` runs on it and builds the rows (the driver is made
    /// where it is used, so it need not move between threads); its error is returned here.
    pub fn spawn<R, F>(
        start: F,
        max_waiting: usize,
        warm_when_idle: bool,
        metrics: Arc<Metrics>,
    ) -> Result<Engine, ServeError>
    where
        R: Rows,
        F: FnOnce() -> Result<R, ServeError> + Send + 'static,
    {
        let (jobs, rx) = mpsc::channel::<Work>();
        let (ready_tx, ready_rx) = mpsc::channel::<Result<(), ServeError>>();
        let waiting = Arc::new(AtomicUsize::new(0));
        let healthy = Arc::new(AtomicBool::new(true));
        let (w, h) = (Arc::clone(&waiting), Arc::clone(&healthy));
        std::thread::Builder::new()
            .name("poot-engine".to_owned())
            .spawn(move || {
                let rows = match start() {
                    Ok(rows) => rows,
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                };
                let _ = ready_tx.send(Ok(()));
                Scheduler::new(rows, metrics, w, h).run(&rx, warm_when_idle);
            })
            .map_err(|source| ServeError::Io {
                what: "starting the engine thread".to_owned(),
                source,
            })?;
        ready_rx.recv().map_err(|_| ServeError::EngineGone)??;
        Ok(Engine {
            jobs,
            waiting,
            max_waiting,
            healthy,
        })
    }

    /// Queues a job; its events come on the returned receiver.
    pub fn submit(&self, seqs: Vec<SeqSpec>) -> Result<UnboundedReceiver<Event>, ApiError> {
        let waiting = self.waiting.load(Ordering::Relaxed);
        if waiting + seqs.len() > self.max_waiting {
            return Err(ApiError::overloaded(waiting));
        }
        let (events, rx) = unbounded_channel();
        self.waiting.fetch_add(seqs.len(), Ordering::Relaxed);
        let n = seqs.len();
        let job = Job {
            seqs,
            events,
            arrived: Instant::now(),
        };
        if self.jobs.send(Work::Job(job)).is_err() {
            self.waiting.fetch_sub(n, Ordering::Relaxed);
            return Err(ApiError::engine("the engine thread has stopped"));
        }
        Ok(rx)
    }

    pub fn healthy(&self) -> bool {
        self.healthy.load(Ordering::Relaxed)
    }

    /// Loads or unloads a LoRA adapter on the engine thread (before its next step); the
    /// driver's answer.
    pub async fn change_lora(
        &self,
        change: LoraChange,
    ) -> Result<Result<(), DriverError>, ApiError> {
        let (tx, rx) = oneshot::channel();
        self.jobs
            .send(Work::Lora(change, tx))
            .map_err(|_| ApiError::engine("the engine thread has stopped"))?;
        rx.await
            .map_err(|_| ApiError::engine("the engine thread has stopped"))
    }
}

/// How long the engine must have been idle before it prepares a pending step variant.
const QUIET_BEFORE_WARMING: Duration = Duration::from_millis(300);

struct Waiting {
    choice: usize,
    spec: SeqSpec,
    events: UnboundedSender<Event>,
    arrived: Instant,
}

struct Running {
    id: SeqId,
    choice: usize,
    stop_ids: Vec<u32>,
    events: UnboundedSender<Event>,
    arrived: Instant,
    last_token: Option<Instant>,
    prompt_tokens: usize,
    generated: usize,
    /// The prefix cache's hit was counted.
    cache_counted: bool,
}

/// How a sequence's step went.
enum Outcome {
    Going,
    Ended(Finish, String),
    Failed(ApiError),
}

struct Scheduler<R> {
    rows: R,
    waiting: VecDeque<Waiting>,
    running: Vec<Running>,
    metrics: Arc<Metrics>,
    waiting_count: Arc<AtomicUsize>,
    healthy: Arc<AtomicBool>,
}

impl<R: Rows> Scheduler<R> {
    fn new(
        rows: R,
        metrics: Arc<Metrics>,
        waiting_count: Arc<AtomicUsize>,
        healthy: Arc<AtomicBool>,
    ) -> Scheduler<R> {
        metrics.rows_total.set(rows.rows() as i64);
        Scheduler {
            rows,
            waiting: VecDeque::new(),
            running: Vec::new(),
            metrics,
            waiting_count,
            healthy,
        }
    }

    fn run(mut self, jobs: &mpsc::Receiver<Work>, warm_when_idle: bool) {
        // Step variants left to prepare: idle time prepares them one at a time, checking for
        // jobs between each, so the server is ready before every variant is. Only after a
        // quiet spell: a variant takes up to a second or two, and requests arriving back to
        // back (a client's next one milliseconds after its last) must not each wait for one.
        let mut warming = warm_when_idle;
        let mut idle_since: Option<Instant> = None;
        loop {
            if self.running.is_empty() && self.waiting.is_empty() {
                if warming {
                    let since = *idle_since.get_or_insert_with(Instant::now);
                    let quiet = QUIET_BEFORE_WARMING.saturating_sub(since.elapsed());
                    match jobs.recv_timeout(quiet) {
                        Ok(job) => {
                            idle_since = None;
                            self.take(job);
                        }
                        Err(mpsc::RecvTimeoutError::Timeout) => {
                            warming = self.warm();
                            if !warming {
                                eprintln!("every step variant is prepared");
                            }
                            continue;
                        }
                        Err(mpsc::RecvTimeoutError::Disconnected) => return,
                    }
                } else {
                    match jobs.recv() {
                        Ok(job) => self.take(job),
                        Err(_) => return,
                    }
                }
            }
            while let Ok(job) = jobs.try_recv() {
                self.take(job);
            }
            self.drop_gone();
            self.admit();
            self.publish();
            if !self.running.is_empty() {
                self.step();
                self.publish();
            }
        }
    }

    fn take(&mut self, work: Work) {
        let job = match work {
            Work::Job(job) => job,
            Work::Lora(change, reply) => {
                let done = match &change {
                    LoraChange::Load { name, adapter } => self.rows.load_lora(name, adapter),
                    LoraChange::Unload { name } => self.rows.unload_lora(name),
                };
                let _ = reply.send(done);
                return;
            }
        };
        for (choice, spec) in job.seqs.into_iter().enumerate() {
            self.waiting.push_back(Waiting {
                choice,
                spec,
                events: job.events.clone(),
                arrived: job.arrived,
            });
        }
    }

    /// Frees the rows and queue places of clients that went away.
    fn drop_gone(&mut self) {
        let before = self.waiting.len();
        self.waiting.retain(|w| !w.events.is_closed());
        self.unwait(before - self.waiting.len());
        let (gone, kept): (Vec<_>, Vec<_>) = std::mem::take(&mut self.running)
            .into_iter()
            .partition(|r| r.events.is_closed());
        self.running = kept;
        for r in gone {
            self.release(r.id);
            self.metrics.finished.with_label_values(&["abort"]).inc();
        }
    }

    /// Prepares one step variant; false when none are left or preparing panicked.
    fn warm(&mut self) -> bool {
        catch_unwind(AssertUnwindSafe(|| self.rows.warm())).unwrap_or(false)
    }

    fn unwait(&self, n: usize) {
        self.waiting_count.fetch_sub(n, Ordering::Relaxed);
    }

    /// Opens waiting sequences in arrival order until the driver has no room.
    fn admit(&mut self) {
        while let Some(w) = self.waiting.pop_front() {
            let request = w.spec.request.clone();
            let opened = catch_unwind(AssertUnwindSafe(|| self.rows.open(request)));
            match opened {
                Ok(Ok(id)) => {
                    self.unwait(1);
                    let now = Instant::now();
                    self.metrics
                        .queue_seconds
                        .observe((now - w.arrived).as_secs_f64());
                    let prompt_tokens = w.spec.request.prompt.len();
                    self.metrics.prompt_tokens.inc_by(prompt_tokens as u64);
                    self.running.push(Running {
                        id,
                        choice: w.choice,
                        stop_ids: w.spec.stop_ids,
                        events: w.events,
                        arrived: w.arrived,
                        last_token: None,
                        prompt_tokens,
                        generated: 0,
                        cache_counted: false,
                    });
                }
                Ok(Err(Admission::NoRoom)) if self.running.is_empty() => {
                    // Nothing will be released: the request can never fit.
                    self.unwait(1);
                    self.metrics.finished.with_label_values(&["error"]).inc();
                    let _ = w.events.send(Event::Failed(ApiError::invalid(
                        "the request needs more KV blocks than the whole pool holds",
                        Some("max_tokens"),
                    )));
                }
                Ok(Err(Admission::NoRoom)) => {
                    self.waiting.push_front(w);
                    return;
                }
                Ok(Err(Admission::Refused(e))) => {
                    self.unwait(1);
                    self.metrics.finished.with_label_values(&["error"]).inc();
                    let _ = w.events.send(Event::Failed(ApiError::from_admission(&e)));
                }
                Err(_) => {
                    self.unwait(1);
                    self.metrics.finished.with_label_values(&["error"]).inc();
                    let _ = w.events.send(Event::Failed(ApiError::engine(
                        "the engine panicked while admitting the request",
                    )));
                }
            }
        }
    }

    fn step(&mut self) {
        let stepped = catch_unwind(AssertUnwindSafe(|| self.rows.advance()));
        self.metrics.steps.inc();
        let failure = match stepped {
            Ok(Ok(events)) => return self.dispatch(events),
            Ok(Err(e)) => ApiError::engine(format!("the engine failed a step: {e}")),
            Err(_) => ApiError::engine("the engine panicked during a step"),
        };
        // The device may refuse further work: /health reports it from now on.
        self.healthy.store(false, Ordering::Relaxed);
        self.metrics.engine_healthy.set(0);
        self.fail_running(failure);
    }

    fn dispatch(&mut self, events: Vec<SeqEvent>) {
        for event in events {
            let Some(at) = self.running.iter().position(|r| r.id == event.id) else {
                continue;
            };
            match self.deliver(at, event) {
                Outcome::Going => {}
                Outcome::Ended(finish, tail) => {
                    let r = self.running.swap_remove(at);
                    self.finish(r, finish, tail);
                }
                Outcome::Failed(e) => {
                    let r = self.running.swap_remove(at);
                    self.release(r.id);
                    self.metrics.finished.with_label_values(&["error"]).inc();
                    let _ = r.events.send(Event::Failed(e));
                }
            }
        }
    }

    /// Sends one sequence's tokens and says whether it ended.
    fn deliver(&mut self, at: usize, event: SeqEvent) -> Outcome {
        let metrics = Arc::clone(&self.metrics);
        let r = &mut self.running[at];
        if event.prompt_tokens > 0 {
            r.prompt_tokens = event.prompt_tokens;
        }
        if !r.cache_counted {
            r.cache_counted = true;
            metrics.cached_tokens.inc_by(event.cached_tokens as u64);
        }
        for token in event.tokens {
            if r.stop_ids.contains(&token.id) {
                return Outcome::Ended(Finish::Stop, String::new());
            }
            let now = Instant::now();
            match r.last_token {
                None => metrics
                    .first_token_seconds
                    .observe((now - r.arrived).as_secs_f64()),
                Some(last) => metrics
                    .per_token_seconds
                    .observe((now - last).as_secs_f64()),
            }
            r.last_token = Some(now);
            r.generated += 1;
            metrics.generation_tokens.inc();
            let _ = r.events.send(Event::Token {
                choice: r.choice,
                id: token.id,
                text: token.text,
                logprob: token.logprob,
            });
        }
        match event.finish {
            None => Outcome::Going,
            Some(FinishReason::Length) => Outcome::Ended(Finish::Length, event.tail),
            Some(FinishReason::Eos | FinishReason::Stop | FinishReason::Cancelled) => {
                Outcome::Ended(Finish::Stop, event.tail)
            }
            Some(FinishReason::NonFinite) => Outcome::Failed(ApiError::engine(format!(
                "the device produced non-finite logits at generated token {}",
                r.generated
            ))),
            Some(FinishReason::Guide) => {
                Outcome::Failed(ApiError::engine(match event.guide_error {
                    Some(e) => e.to_string(),
                    None => "guided decoding failed".to_string(),
                }))
            }
        }
    }

    fn finish(&mut self, r: Running, finish: Finish, tail: String) {
        self.release(r.id);
        self.metrics
            .finished
            .with_label_values(&[finish.as_str()])
            .inc();
        self.metrics
            .e2e_seconds
            .observe(r.arrived.elapsed().as_secs_f64());
        let _ = r.events.send(Event::Done {
            choice: r.choice,
            text: tail,
            finish,
            prompt_tokens: r.prompt_tokens,
            completion_tokens: r.generated,
        });
    }

    fn release(&mut self, id: SeqId) {
        // A release that panics leaves the row to the driver; the thread goes on.
        if catch_unwind(AssertUnwindSafe(|| self.rows.release(id))).is_err() {
            self.healthy.store(false, Ordering::Relaxed);
            self.metrics.engine_healthy.set(0);
        }
    }

    fn fail_running(&mut self, error: ApiError) {
        for r in std::mem::take(&mut self.running) {
            self.release(r.id);
            self.metrics.finished.with_label_values(&["error"]).inc();
            let _ = r.events.send(Event::Failed(error.clone()));
        }
    }

    fn publish(&self) {
        let m = &self.metrics;
        m.running.set(self.running.len() as i64);
        m.waiting.set(self.waiting.len() as i64);
        let (used, total) = self.rows.kv_usage();
        m.kv_used.set(used as i64);
        m.kv_total.set(total as i64);
        m.kv_usage.set(used as f64 / total.max(1) as f64);
        m.preemptions.set(self.rows.preemptions() as i64);
        let (queried, hit) = self.rows.prefix_cache();
        m.prefix_cache_queries.set(queried as i64);
        m.prefix_cache_hits.set(hit as i64);
        m.prefix_cache_hit_rate
            .set(hit as f64 / queried.max(1) as f64);
        let spec = self.rows.spec_stats();
        m.spec_drafted.set(spec.drafted_tokens as i64);
        m.spec_accepted.set(spec.accepted_tokens as i64);
        m.spec_verify_steps.set(spec.verify_steps as i64);
        m.spec_acceptance_rate.set(spec.acceptance_rate());
        let guide = self.rows.guide_stats();
        m.guided_masks.set(guide.masks as i64);
        m.guided_mask_seconds.set(guide.mask_seconds);
        m.guided_wait_seconds.set(guide.wait_seconds);
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::time::Duration;

    use poot_llm::{DriverError, Sampler, SeqToken};

    use super::*;

    /// Prompt token that makes the fake refuse the request at admission.
    const REFUSE: u32 = 900;
    /// Prompt token that makes the fake panic in the step after admission.
    const PANIC: u32 = 901;

    /// Rows without a device: each step gives every open sequence the token `prompt[0] + k`
    /// for its k-th token, and ends it after `max_new`.
    struct FakeRows {
        rows: usize,
        open: BTreeMap<u64, (GenerateRequest, usize)>,
        next: u64,
        /// Variants "prepared" so far; there are always more.
        warms: Arc<AtomicUsize>,
    }

    impl Rows for FakeRows {
        fn open(&mut self, request: GenerateRequest) -> Result<SeqId, Admission> {
            if request.prompt.contains(&REFUSE) {
                return Err(Admission::Refused(DriverError::Sampling("refused".into())));
            }
            if self.open.len() == self.rows {
                return Err(Admission::NoRoom);
            }
            self.next += 1;
            self.open.insert(self.next, (request, 0));
            Ok(SeqId(self.next))
        }

        fn advance(&mut self) -> Result<Vec<SeqEvent>, DriverError> {
            std::thread::sleep(Duration::from_millis(2));
            let mut events = Vec::new();
            for (&id, (req, done)) in &mut self.open {
                assert!(!req.prompt.contains(&PANIC), "the fake step panics");
                if *done == req.max_new {
                    continue;
                }
                let token = req.prompt[0] + *done as u32;
                *done += 1;
                events.push(SeqEvent {
                    id: SeqId(id),
                    tokens: vec![SeqToken {
                        id: token,
                        text: format!("<{token}>"),
                        logprob: None,
                    }],
                    finish: (*done == req.max_new).then_some(FinishReason::Length),
                    prompt_tokens: req.prompt.len(),
                    cached_tokens: 0,
                    guide_error: None,
                    tail: String::new(),
                });
            }
            Ok(events)
        }

        fn release(&mut self, id: SeqId) {
            self.open.remove(&id.0);
        }

        fn rows(&self) -> usize {
            self.rows
        }

        fn kv_usage(&self) -> (usize, usize) {
            (self.open.len(), self.rows)
        }

        fn warm(&mut self) -> bool {
            self.warms.fetch_add(1, Ordering::SeqCst);
            std::thread::sleep(Duration::from_millis(20));
            true
        }
    }

    fn engine(rows: usize, max_waiting: usize) -> (Engine, Arc<Metrics>) {
        engine_counting_warms(rows, max_waiting, Arc::new(AtomicUsize::new(0)))
    }

    fn engine_counting_warms(
        rows: usize,
        max_waiting: usize,
        warms: Arc<AtomicUsize>,
    ) -> (Engine, Arc<Metrics>) {
        let metrics = Arc::new(Metrics::new().expect("metrics register once"));
        let engine = Engine::spawn(
            move || {
                Ok(FakeRows {
                    rows,
                    open: BTreeMap::new(),
                    next: 0,
                    warms,
                })
            },
            max_waiting,
            true,
            Arc::clone(&metrics),
        )
        .expect("the fake engine starts");
        (engine, metrics)
    }

    fn seq(first: u32, max_new: usize) -> SeqSpec {
        SeqSpec {
            request: GenerateRequest::new(vec![first], max_new, Sampler::greedy()),
            stop_ids: Vec::new(),
        }
    }

    /// Every event of a job until each of its `choices` is done or it failed.
    fn drain(rx: &mut UnboundedReceiver<Event>, choices: usize) -> Vec<Event> {
        let mut events = Vec::new();
        let mut open = choices;
        while open > 0 {
            let e = rx.blocking_recv().expect("the engine answers");
            match &e {
                Event::Done { .. } => open -= 1,
                Event::Failed(_) => open = 0,
                Event::Token { .. } => {}
            }
            events.push(e);
        }
        events
    }

    fn tokens(events: &[Event], choice: usize) -> Vec<u32> {
        events
            .iter()
            .filter_map(|e| match e {
                Event::Token { choice: c, id, .. } if *c == choice => Some(*id),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn queued_jobs_wait_for_a_row_and_all_finish() {
        let (engine, _) = engine(1, 16);
        let mut a = engine.submit(vec![seq(10, 3), seq(20, 2)]).expect("queued");
        let mut b = engine.submit(vec![seq(30, 2)]).expect("queued");
        let ea = drain(&mut a, 2);
        let eb = drain(&mut b, 1);
        assert_eq!(tokens(&ea, 0), vec![10, 11, 12]);
        assert_eq!(tokens(&ea, 1), vec![20, 21]);
        assert_eq!(tokens(&eb, 0), vec![30, 31]);
        assert!(ea.iter().any(|e| matches!(
            e,
            Event::Done {
                choice: 0,
                finish: Finish::Length,
                completion_tokens: 3,
                prompt_tokens: 1,
                ..
            }
        )));
    }

    #[test]
    fn a_client_that_leaves_frees_its_row() {
        let (engine, metrics) = engine(1, 16);
        let mut long = engine.submit(vec![seq(1, 1_000_000)]).expect("queued");
        assert!(matches!(long.blocking_recv(), Some(Event::Token { .. })));
        drop(long);
        // One row: the next job runs only once the abandoned sequence is released.
        let mut next = engine.submit(vec![seq(50, 2)]).expect("queued");
        assert_eq!(tokens(&drain(&mut next, 1), 0), vec![50, 51]);
        assert_eq!(metrics.finished.with_label_values(&["abort"]).get(), 1);
    }

    #[test]
    fn a_refused_request_fails_alone() {
        let (engine, _) = engine(2, 16);
        let mut bad = engine.submit(vec![seq(REFUSE, 2)]).expect("queued");
        let mut good = engine.submit(vec![seq(5, 2)]).expect("queued");
        let events = drain(&mut bad, 1);
        assert!(
            matches!(&events[..], [Event::Failed(e)] if e.status == 400),
            "{events:?}"
        );
        assert_eq!(tokens(&drain(&mut good, 1), 0), vec![5, 6]);
    }

    #[test]
    fn a_panicking_step_fails_its_sequences_and_the_engine_goes_on() {
        let (engine, metrics) = engine(1, 16);
        let mut bad = engine.submit(vec![seq(PANIC, 2)]).expect("queued");
        let events = drain(&mut bad, 1);
        assert!(
            matches!(&events[..], [Event::Failed(e)] if e.status == 500),
            "{events:?}"
        );
        assert!(!engine.healthy());
        assert_eq!(metrics.engine_healthy.get(), 0);
        let mut good = engine.submit(vec![seq(7, 1)]).expect("queued");
        assert_eq!(tokens(&drain(&mut good, 1), 0), vec![7]);
    }

    #[test]
    fn variants_are_prepared_only_after_a_quiet_spell() {
        let warms = Arc::new(AtomicUsize::new(0));
        let (engine, _) = engine_counting_warms(1, 16, Arc::clone(&warms));
        // Requests back to back, as one client sends them: none waits for a variant.
        for first in [10, 20, 30] {
            let mut job = engine.submit(vec![seq(first, 2)]).expect("queued");
            assert_eq!(tokens(&drain(&mut job, 1), 0), vec![first, first + 1]);
        }
        assert_eq!(warms.load(Ordering::SeqCst), 0);
        // Left alone, the engine prepares variants one after another.
        std::thread::sleep(QUIET_BEFORE_WARMING * 4);
        assert!(warms.load(Ordering::SeqCst) >= 2);
    }

    #[test]
    fn a_full_queue_is_refused_at_once() {
        let (engine, _) = engine(1, 2);
        let e = engine
            .submit(vec![seq(1, 1), seq(1, 1), seq(1, 1)])
            .expect_err("three sequences exceed a queue of two");
        assert_eq!(e.status, 503);
    }
}
