//! Prometheus metrics, served as text at GET /metrics/prometheus. Names follow vLLM's where one
//! exists (`poot_` in place of `vllm:`): request counts by route and status, prompt and
//! generated tokens, latency histograms (queue time, time to first token, time per output
//! token, end to end), and the engine's queue and rows.

use prometheus::{
    Encoder, Gauge, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge,
    Opts, Registry, TextEncoder,
};

/// Every metric the server records, in one registry.
pub struct Metrics {
    registry: Registry,
    /// HTTP requests by route and status code.
    pub requests: IntCounterVec,
    /// Sequences that ended, by finish reason (`stop`, `length`, `abort`, `error`).
    pub finished: IntCounterVec,
    pub prompt_tokens: IntCounter,
    /// Prompt tokens whose keys and values came from the prefix cache.
    pub cached_tokens: IntCounter,
    pub generation_tokens: IntCounter,
    pub embedding_tokens: IntCounter,
    /// Seconds from arrival to admission into a row.
    pub queue_seconds: Histogram,
    /// Seconds from arrival to the first generated token.
    pub first_token_seconds: Histogram,
    /// Seconds between generated tokens of one sequence.
    pub per_token_seconds: Histogram,
    /// Seconds from arrival to the end of a sequence.
    pub e2e_seconds: Histogram,
    /// HTTP handling time by route (embeddings and errors included).
    pub http_seconds: HistogramVec,
    /// Sequences in rows.
    pub running: IntGauge,
    /// Sequences waiting for a row.
    pub waiting: IntGauge,
    pub rows_total: IntGauge,
    /// KV blocks held by sequences over the pool's blocks (0 to 1); for a contiguous cache,
    /// rows in use over rows.
    pub kv_usage: Gauge,
    pub kv_used: IntGauge,
    pub kv_total: IntGauge,
    /// Prompt blocks the prefix cache was asked for since start, and those it served (gauges
    /// mirroring the driver's counters), and their ratio.
    pub prefix_cache_queries: IntGauge,
    pub prefix_cache_hits: IntGauge,
    pub prefix_cache_hit_rate: Gauge,
    /// Sequences preempted to make room in the KV pool (they recompute later).
    pub preemptions: IntGauge,
    /// Speculative decoding since start (gauges mirroring the driver's counters): tokens
    /// drafted, of those accepted, verification steps, and accepted over drafted.
    pub spec_drafted: IntGauge,
    pub spec_accepted: IntGauge,
    pub spec_verify_steps: IntGauge,
    pub spec_acceptance_rate: Gauge,
    /// Guided decoding since start (gauges mirroring the driver's counters): allowed-token
    /// masks computed, the seconds they took summed over masks (over masks: the cost per guided
    /// token), and the seconds steps waited for them (rows computed in parallel).
    pub guided_masks: IntGauge,
    pub guided_mask_seconds: Gauge,
    pub guided_wait_seconds: Gauge,
    /// Engine steps run.
    pub steps: IntCounter,
    /// 1 while the engine is healthy; 0 after a device failure.
    pub engine_healthy: IntGauge,
}

const LATENCY_BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0, 160.0, 640.0,
];

impl Metrics {
    pub fn new() -> Result<Metrics, prometheus::Error> {
        let registry = Registry::new();
        let counter_vec = |name: &str, help: &str, labels: &[&str]| {
            let c = IntCounterVec::new(Opts::new(name, help), labels)?;
            registry.register(Box::new(c.clone()))?;
            Ok::<_, prometheus::Error>(c)
        };
        let counter = |name: &str, help: &str| {
            let c = IntCounter::new(name, help)?;
            registry.register(Box::new(c.clone()))?;
            Ok::<_, prometheus::Error>(c)
        };
        let gauge = |name: &str, help: &str| {
            let g = IntGauge::new(name, help)?;
            registry.register(Box::new(g.clone()))?;
            Ok::<_, prometheus::Error>(g)
        };
        let histogram = |name: &str, help: &str| {
            let h = Histogram::with_opts(
                HistogramOpts::new(name, help).buckets(LATENCY_BUCKETS.to_vec()),
            )?;
            registry.register(Box::new(h.clone()))?;
            Ok::<_, prometheus::Error>(h)
        };
        let kv_usage = Gauge::new(
            "poot_kv_cache_usage_perc",
            "KV blocks held by sequences over the pool's blocks, 0 to 1 (contiguous cache: rows)",
        )?;
        registry.register(Box::new(kv_usage.clone()))?;
        let prefix_cache_hit_rate = Gauge::new(
            "poot_prefix_cache_hit_rate",
            "Prompt blocks the prefix cache served over those looked up since start, 0 to 1",
        )?;
        registry.register(Box::new(prefix_cache_hit_rate.clone()))?;
        let spec_acceptance_rate = Gauge::new(
            "poot_spec_decode_draft_acceptance_rate",
            "Drafted tokens the model accepted over those drafted since start, 0 to 1",
        )?;
        registry.register(Box::new(spec_acceptance_rate.clone()))?;
        let float_gauge = |name: &str, help: &str| {
            let g = Gauge::new(name, help)?;
            registry.register(Box::new(g.clone()))?;
            Ok::<_, prometheus::Error>(g)
        };
        let guided_mask_seconds = float_gauge(
            "poot_guided_mask_seconds_total",
            "Seconds spent computing guided decoding's allowed-token masks since start, summed over masks",
        )?;
        let guided_wait_seconds = float_gauge(
            "poot_guided_wait_seconds_total",
            "Seconds engine steps waited for guided decoding's masks since start",
        )?;
        let http_seconds = HistogramVec::new(
            HistogramOpts::new(
                "poot_http_request_duration_seconds",
                "Time to answer an HTTP request, by route (a stream: until its first event)",
            )
            .buckets(LATENCY_BUCKETS.to_vec()),
            &["route"],
        )?;
        registry.register(Box::new(http_seconds.clone()))?;
        let metrics = Metrics {
            requests: counter_vec(
                "poot_http_requests_total",
                "HTTP requests by route and status code",
                &["route", "status"],
            )?,
            finished: counter_vec(
                "poot_request_success_total",
                "Sequences that ended, by finish reason",
                &["finished_reason"],
            )?,
            prompt_tokens: counter("poot_prompt_tokens_total", "Prompt tokens admitted")?,
            cached_tokens: counter(
                "poot_prefix_cache_hit_tokens_total",
                "Prompt tokens whose keys and values came from the prefix cache",
            )?,
            generation_tokens: counter("poot_generation_tokens_total", "Tokens generated")?,
            embedding_tokens: counter("poot_embedding_tokens_total", "Tokens embedded")?,
            queue_seconds: histogram(
                "poot_request_queue_time_seconds",
                "Seconds a sequence waited for a row",
            )?,
            first_token_seconds: histogram(
                "poot_time_to_first_token_seconds",
                "Seconds from arrival to the first generated token",
            )?,
            per_token_seconds: histogram(
                "poot_time_per_output_token_seconds",
                "Seconds between generated tokens of one sequence",
            )?,
            e2e_seconds: histogram(
                "poot_e2e_request_latency_seconds",
                "Seconds from arrival to the end of a sequence",
            )?,
            http_seconds,
            running: gauge("poot_num_requests_running", "Sequences in rows")?,
            waiting: gauge("poot_num_requests_waiting", "Sequences waiting for a row")?,
            rows_total: gauge(
                "poot_rows_total",
                "Sequence rows the engine decodes together",
            )?,
            kv_usage,
            kv_used: gauge(
                "poot_kv_blocks_used",
                "KV blocks held by sequences (cached prefixes no sequence reads are free)",
            )?,
            kv_total: gauge("poot_kv_blocks_total", "KV blocks sequences can hold")?,
            prefix_cache_queries: gauge(
                "poot_prefix_cache_queries",
                "Prompt blocks looked up in the prefix cache since start",
            )?,
            prefix_cache_hits: gauge(
                "poot_prefix_cache_hits",
                "Prompt blocks the prefix cache served since start (token-checked)",
            )?,
            prefix_cache_hit_rate,
            preemptions: gauge(
                "poot_num_preemptions_total",
                "Sequences preempted to make room in the KV pool since start (they recompute)",
            )?,
            spec_drafted: gauge(
                "poot_spec_decode_num_draft_tokens",
                "Tokens drafted for speculative decoding since start",
            )?,
            spec_accepted: gauge(
                "poot_spec_decode_num_accepted_tokens",
                "Drafted tokens the model accepted since start",
            )?,
            spec_verify_steps: gauge(
                "poot_spec_decode_num_verify_steps",
                "Verification steps run since start",
            )?,
            spec_acceptance_rate,
            guided_masks: gauge(
                "poot_guided_masks_total",
                "Allowed-token masks guided decoding computed since start (one per guided token)",
            )?,
            guided_mask_seconds,
            guided_wait_seconds,
            steps: counter("poot_engine_steps_total", "Engine steps run")?,
            engine_healthy: gauge(
                "poot_engine_healthy",
                "1 while the engine is healthy, 0 after a device failure",
            )?,
            registry,
        };
        metrics.engine_healthy.set(1);
        Ok(metrics)
    }

    /// The text exposition format.
    pub fn render(&self) -> String {
        let mut out = Vec::new();
        // Encoding gathered families into a Vec cannot fail for the text format.
        let _ = TextEncoder::new().encode(&self.registry.gather(), &mut out);
        String::from_utf8_lossy(&out).into_owned()
    }
}
