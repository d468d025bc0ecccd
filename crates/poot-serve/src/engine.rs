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
use std::time::Instant;

use poot_llm::{FinishReason, GenerateRequest, TokenLogprob};
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};

use crate::error::{ApiError, ServeError};
use crate::metrics::Metrics;
use crate::rows::{Admission, Rows, SeqEvent, SeqId};
use crate::stop_text::StopText;

/// One sequence of a job.
#[derive(Clone, Debug)]
pub struct SeqSpec {
    /// The driver request (its `stops` are left empty: the engine matches stop strings).
    pub request: GenerateRequest,
    /// Stop strings: the text ends before the first match.
    pub stops: Vec<String>,
    /// Token ids that end the sequence (a chat template's end-of-turn tokens); not included.
    pub stop_ids: Vec<u32>,
}

/// What a handler hears about its job.
#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    /// A token of choice `choice`, and the text now safe to send (held back while it could
    /// still become a stop string).
    Token {
        choice: usize,
        id: u32,
        text: String,
        logprob: Option<TokenLogprob>,
    },
    /// Choice `choice` ended; `text` is what was held back.
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

/// The handlers' side of the engine.
#[derive(Clone)]
pub struct Engine {
    jobs: mpsc::Sender<Job>,
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
        context: usize,
        max_waiting: usize,
        metrics: Arc<Metrics>,
    ) -> Result<Engine, ServeError>
    where
        R: Rows,
        F: FnOnce() -> Result<R, ServeError> + Send + 'static,
    {
        let (jobs, rx) = mpsc::channel::<Job>();
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
                Scheduler::new(rows, context, metrics, w, h).run(&rx);
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
        if self.jobs.send(job).is_err() {
            self.waiting.fetch_sub(n, Ordering::Relaxed);
            return Err(ApiError::engine("the engine thread has stopped"));
        }
        Ok(rx)
    }

    pub fn healthy(&self) -> bool {
        self.healthy.load(Ordering::Relaxed)
    }
}

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
    text: StopText,
    events: UnboundedSender<Event>,
    arrived: Instant,
    last_token: Option<Instant>,
    prompt_tokens: usize,
    generated: usize,
    /// KV positions the sequence will use at most.
    positions: usize,
}

struct Scheduler<R> {
    rows: R,
    context: usize,
    waiting: VecDeque<Waiting>,
    running: Vec<Running>,
    metrics: Arc<Metrics>,
    waiting_count: Arc<AtomicUsize>,
    healthy: Arc<AtomicBool>,
}

impl<R: Rows> Scheduler<R> {
    fn new(
        rows: R,
        context: usize,
        metrics: Arc<Metrics>,
        waiting_count: Arc<AtomicUsize>,
        healthy: Arc<AtomicBool>,
    ) -> Scheduler<R> {
        metrics.rows_total.set(rows.rows() as i64);
        metrics
            .kv_positions_total
            .set((rows.rows() * context) as i64);
        Scheduler {
            rows,
            context,
            waiting: VecDeque::new(),
            running: Vec::new(),
            metrics,
            waiting_count,
            healthy,
        }
    }

    fn run(mut self, jobs: &mpsc::Receiver<Job>) {
        loop {
            if self.running.is_empty() && self.waiting.is_empty() {
                match jobs.recv() {
                    Ok(job) => self.take(job),
                    Err(_) => return,
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

    fn take(&mut self, job: Job) {
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
                        text: StopText::new(w.spec.stops),
                        events: w.events,
                        arrived: w.arrived,
                        last_token: None,
                        prompt_tokens,
                        generated: 0,
                        positions: (prompt_tokens + w.spec.request.max_new).min(self.context),
                    });
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
        let events = match stepped {
            Ok(Ok(events)) => events,
            Ok(Err(e)) => return self.fail_running(ApiError::engine(format!("{e}"))),
            Err(_) => {
                self.healthy.store(false, Ordering::Relaxed);
                self.metrics.engine_healthy.set(0);
                return self.fail_running(ApiError::engine("the engine panicked during a step"));
            }
        };
        for event in events {
            let Some(at) = self.running.iter().position(|r| r.id == event.id) else {
                continue;
            };
            if let Some(finish) = self.deliver(at, event) {
                let r = self.running.swap_remove(at);
                self.finish(r, finish);
            }
        }
    }

    /// Sends one sequence's tokens; returns how it ended, if it did.
    fn deliver(&mut self, at: usize, event: SeqEvent) -> Option<Finish> {
        let metrics = Arc::clone(&self.metrics);
        let r = &mut self.running[at];
        if event.prompt_tokens > 0 {
            r.prompt_tokens = event.prompt_tokens;
        }
        for token in event.tokens {
            if r.stop_ids.contains(&token.id) {
                return Some(Finish::Stop);
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
            let piece = r.text.push(&token.text);
            let _ = r.events.send(Event::Token {
                choice: r.choice,
                id: token.id,
                text: piece.text,
                logprob: token.logprob,
            });
            if piece.stopped {
                return Some(Finish::Stop);
            }
        }
        event.finish.map(|f| match f {
            FinishReason::Length => Finish::Length,
            FinishReason::Eos | FinishReason::Stop | FinishReason::Cancelled => Finish::Stop,
        })
    }

    fn finish(&mut self, mut r: Running, finish: Finish) {
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
            text: r.text.finish(),
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
        let used: usize = self
            .running
            .iter()
            .map(|r| (r.prompt_tokens + r.generated).min(r.positions))
            .sum();
        m.kv_positions_used.set(used as i64);
        let total = (self.rows.rows() * self.context).max(1);
        m.kv_usage.set(used as f64 / total as f64);
    }
}
