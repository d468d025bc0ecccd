//! Guided decoding through the driver on tiny-chat (random weights, a byte-level BPE tokenizer),
//! on the CPU oracle behind the executor contract: whatever the random model prefers, the output
//! matches the regex, parses as JSON valid under the schema, or is derived by the Lark grammar;
//! the request stops where the grammar completes; an unguided row batched beside a guided one is
//! untouched; two guided rows in one step, and rows preempted and recomputed, each follow their
//! own grammar; an invalid schema, regex or grammar is a typed error at `open`. One case runs
//! the real device path on the CPU executor (kernels compiled by `cc`).

#![allow(clippy::unwrap_used)]

mod common;

use std::ops::ControlFlow;
use std::path::PathBuf;
use std::sync::Arc;

use common::oracle_executor::OracleExecutor;
use poot_llm::{
    BackendChoice, Constraint, Driver, DriverError, DriverOptions, FinishReason, GenerateRequest,
    Generation, GuideError, Layout, LoadOptions, ModelHandle, Sampler, open_executor,
};
use poot_models::Registry;
use serde_json::{Value, json};

fn handle() -> Arc<ModelHandle> {
    let dir =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../poot-serve/tests/fixtures/tiny-chat");
    Arc::new(
        ModelHandle::load(&dir, &Registry::builtin().unwrap(), &LoadOptions::default()).unwrap(),
    )
}

fn driver(handle: &Arc<ModelHandle>, rows: usize) -> Driver {
    let options = DriverOptions::new(128, 8).with_rows(rows);
    let layout = if rows > 1 {
        Layout::Paged {
            block_tokens: 8,
            blocks: 64,
        }
    } else {
        Layout::Contiguous
    };
    Driver::new(Arc::clone(handle), OracleExecutor::boxed(), options)
        .unwrap()
        .serve(layout)
        .map_err(|r| r.1)
        .unwrap()
}

fn prompt(handle: &ModelHandle) -> Vec<u32> {
    handle
        .text()
        .unwrap()
        .encode("Answer in the format asked:")
        .unwrap()
}

fn guided(
    handle: &ModelHandle,
    c: Constraint,
    sampler: Sampler,
    max_new: usize,
) -> GenerateRequest {
    GenerateRequest {
        guide: Some(c),
        ..GenerateRequest::new(prompt(handle), max_new, sampler)
    }
}

fn generate(driver: &mut Driver, req: GenerateRequest) -> Generation {
    driver
        .generate(req, &mut |_| ControlFlow::Continue(()))
        .unwrap()
}

/// The grammar ended the output: it completed (`Stop`) or an end token was allowed and taken.
fn ended_by_grammar(g: &Generation) -> bool {
    matches!(g.finish, FinishReason::Stop | FinishReason::Eos)
}

/// `s` is three digits, a dash and two lowercase letters.
fn matches_code(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 6
        && b[..3].iter().all(u8::is_ascii_digit)
        && b[3] == b'-'
        && b[4..].iter().all(u8::is_ascii_lowercase)
}

#[test]
fn a_regex_constrains_greedy_and_sampled_output() {
    let handle = handle();
    let mut driver = driver(&handle, 1);
    // Unguided, the random model writes something else.
    let free = generate(
        &mut driver,
        GenerateRequest::new(prompt(&handle), 6, Sampler::greedy()),
    );
    assert!(!matches_code(&free.text), "{:?}", free.text);
    let rx = Constraint::Regex("[0-9]{3}-[a-z]{2}".into());
    let mut tokens = 0;
    for sampler in [
        Sampler::greedy(),
        Sampler::new(1.0, 0, 1.0, 11),
        Sampler::new(1.3, 20, 0.95, 12),
    ] {
        let g = generate(
            &mut driver,
            guided(&handle, rx.clone(), sampler.clone(), 20),
        );
        tokens += g.tokens.len();
        assert!(matches_code(&g.text), "{sampler:?}: {:?}", g.text);
        assert!(ended_by_grammar(&g), "{sampler:?}: {:?}", g.finish);
    }
    // One mask per pick of a guided row, the end token's included.
    let stats = driver.guide_stats();
    assert!(
        stats.masks >= tokens as u64,
        "{stats:?} for {tokens} tokens"
    );
    assert!(stats.mask_seconds > 0.0 && stats.wait_seconds > 0.0);
}

/// Checks `v` against the test's schema by hand.
fn satisfies_person(v: &Value) -> bool {
    let Some(o) = v.as_object() else { return false };
    let name_ok = o
        .get("name")
        .and_then(Value::as_str)
        .is_some_and(|n| n.chars().count() <= 8);
    let age_ok = o
        .get("age")
        .and_then(Value::as_i64)
        .is_some_and(|a| (0..=120).contains(&a));
    let tags_ok = o.get("tags").is_none_or(|t| {
        t.as_array()
            .is_some_and(|a| a.len() <= 2 && a.iter().all(|x| x == "a" || x == "b"))
    });
    name_ok
        && age_ok
        && tags_ok
        && o.keys()
            .all(|k| ["name", "age", "tags"].contains(&k.as_str()))
}

#[test]
fn a_json_schema_constrains_the_output_to_valid_json() {
    let handle = handle();
    let mut driver = driver(&handle, 1);
    let schema = json!({
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 8},
            "age": {"type": "integer", "minimum": 0, "maximum": 120},
            "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 2}
        },
        "required": ["name", "age"],
        "additionalProperties": false,
        // Compact JSON: a random model otherwise spends its budget on whitespace.
        "x-guidance": {"whitespace_flexible": false}
    });
    for seed in 0..4 {
        let sampler = if seed == 0 {
            Sampler::greedy()
        } else {
            Sampler::new(0.9, 0, 1.0, seed)
        };
        let g = generate(
            &mut driver,
            guided(
                &handle,
                Constraint::JsonSchema(schema.clone()),
                sampler,
                100,
            ),
        );
        assert!(
            ended_by_grammar(&g),
            "seed {seed}: {:?} {:?}",
            g.finish,
            g.text
        );
        let v: Value = serde_json::from_str(&g.text)
            .unwrap_or_else(|e| panic!("seed {seed}: {e}: {:?}", g.text));
        assert!(satisfies_person(&v), "seed {seed}: {v}");
    }
    // Any JSON object.
    let g = generate(
        &mut driver,
        guided(
            &handle,
            Constraint::JsonObject,
            Sampler::new(0.8, 0, 1.0, 5),
            100,
        ),
    );
    if ended_by_grammar(&g) {
        let v: Value = serde_json::from_str(&g.text).unwrap();
        assert!(v.is_object(), "{v}");
    } else {
        // Cut by max_new: still the start of an object.
        assert_eq!(g.finish, FinishReason::Length);
        assert!(g.text.trim_start().starts_with('{'), "{:?}", g.text);
    }
}

/// Random walks through each kind of constraint, each token drawn uniformly from what its mask
/// allows (far more varied text than a model writes): the guide accepts every token its own
/// mask allowed and never fails, so a sampled token can only be refused where the device
/// sampled outside the mask. The server once answered a schema request with a 500
/// (`ParserTooComplex` 18 tokens in, on lavapipe): this rules out the tokenizer's trie.
#[test]
fn every_token_a_mask_allows_is_accepted() {
    let handle = handle();
    let guides = handle.guides().unwrap();
    let eog = handle.end_of_generation().unwrap();
    let constraints = [
        Constraint::JsonSchema(json!({
            "type": "object",
            "properties": {
                "color": {"enum": ["red", "green", "blue"]},
                "count": {"type": "integer", "minimum": 1, "maximum": 9}
            },
            "required": ["color", "count"],
            "additionalProperties": false
        })),
        Constraint::JsonObject,
        Constraint::Regex("[0-9]{3}-[a-z]{2}".into()),
        Constraint::Lark("start: (\"ab\" | \"cd\")+ \".\"\n".into()),
    ];
    // xorshift64: the draws are the same on every run.
    let mut state: u64 = 0x1234_5678_9abc_def1;
    let mut draw = |n: usize| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state % n as u64) as usize
    };
    for c in &constraints {
        for walk in 0..100 {
            let mut guide = guides.compile(c).unwrap();
            for step in 0..200 {
                let mask = guide
                    .mask()
                    .unwrap_or_else(|e| panic!("{} walk {walk} step {step}: {e}", c.kind()));
                let allowed: Vec<u32> = (0..guides.vocab() as u32)
                    .filter(|&t| mask[(t / 32) as usize] >> (t % 32) & 1 == 1)
                    .collect();
                let token = allowed[draw(allowed.len())];
                if eog.contains(&token) {
                    break;
                }
                guide.advance(token).unwrap_or_else(|e| {
                    panic!("{} walk {walk} step {step}, token {token}: {e}", c.kind())
                });
                if guide.is_finished() {
                    break;
                }
            }
        }
    }
}

#[test]
fn a_lark_grammar_constrains_the_output() {
    let handle = handle();
    let mut driver = driver(&handle, 1);
    let lark = r#"
start: answer " because " reason
answer: "yes" | "no"
reason: /[a-z]{1,6}/
"#;
    for seed in 0..3 {
        let g = generate(
            &mut driver,
            guided(
                &handle,
                Constraint::Lark(lark.into()),
                Sampler::new(1.0, 0, 1.0, seed),
                40,
            ),
        );
        assert!(ended_by_grammar(&g), "{:?} {:?}", g.finish, g.text);
        let (answer, reason) = g.text.split_once(" because ").unwrap();
        assert!(answer == "yes" || answer == "no", "{:?}", g.text);
        assert!(
            (1..=6).contains(&reason.len()) && reason.bytes().all(|b| b.is_ascii_lowercase()),
            "{:?}",
            g.text
        );
    }
}

#[test]
fn a_guided_row_beside_an_unguided_one_leaves_it_untouched() {
    let handle = handle();
    let want = {
        let mut alone = driver(&handle, 1);
        generate(
            &mut alone,
            GenerateRequest {
                ignore_eos: true,
                ..GenerateRequest::new(prompt(&handle), 12, Sampler::new(0.9, 0, 1.0, 3))
            },
        )
        .tokens
    };
    let mut d = driver(&handle, 2);
    let free = d
        .open(GenerateRequest {
            ignore_eos: true,
            ..GenerateRequest::new(prompt(&handle), 12, Sampler::new(0.9, 0, 1.0, 3))
        })
        .unwrap();
    let rx = Constraint::Regex("[0-9]{3}-[a-z]{2}".into());
    let fixed = d.open(guided(&handle, rx, Sampler::greedy(), 12)).unwrap();
    let (mut free_tokens, mut text) = (Vec::new(), String::new());
    let mut done = (false, false);
    while !(done.0 && done.1) {
        let picks = d.step().unwrap();
        for e in d.commit(picks).unwrap() {
            if e.id == free {
                free_tokens.extend(e.tokens.iter().map(|t| t.id));
                done.0 |= e.finish.is_some();
            } else if e.id == fixed {
                text.extend(e.tokens.iter().map(|t| t.text.as_str()));
                text.push_str(&e.tail);
                done.1 |= e.finish.is_some();
            }
        }
    }
    assert_eq!(free_tokens, want);
    assert!(matches_code(&text), "{text:?}");
}

#[test]
fn an_invalid_constraint_is_a_typed_error_at_open() {
    let handle = handle();
    let mut driver = driver(&handle, 1);
    let cases = [
        Constraint::Regex("([0-9]".into()),
        Constraint::Lark("start: undefined_rule".into()),
        Constraint::JsonSchema(json!({"type": 12})),
        Constraint::JsonSchema(json!({"$ref": "#/$defs/missing"})),
    ];
    for c in cases {
        let kind = c.kind();
        match driver.open(guided(&handle, c, Sampler::greedy(), 8)) {
            Err(DriverError::Guide(GuideError::Invalid { kind: k, message })) => {
                assert_eq!(k, kind);
                assert!(!message.is_empty());
            }
            other => panic!("{kind}: {other:?}"),
        }
    }
    // The driver goes on serving.
    let g = generate(
        &mut driver,
        guided(
            &handle,
            Constraint::Regex("ok".into()),
            Sampler::greedy(),
            8,
        ),
    );
    assert_eq!(g.text, "ok");
}

#[test]
fn two_guided_rows_in_one_step_each_follow_their_own_grammar() {
    let handle = handle();
    let mut d = driver(&handle, 2);
    let code = d
        .open(guided(
            &handle,
            Constraint::Regex("[0-9]{3}-[a-z]{2}".into()),
            Sampler::new(1.0, 0, 1.0, 7),
            20,
        ))
        .unwrap();
    let word = d
        .open(guided(
            &handle,
            Constraint::Lark("start: \"yes\" | \"no\" | \"maybe\"".into()),
            Sampler::new(1.0, 0, 1.0, 8),
            20,
        ))
        .unwrap();
    let mut texts = [String::new(), String::new()];
    let mut done = [false, false];
    while !(done[0] && done[1]) {
        let picks = d.step().unwrap();
        for e in d.commit(picks).unwrap() {
            let i = usize::from(e.id == word);
            assert!(e.id == code || e.id == word);
            texts[i].extend(e.tokens.iter().map(|t| t.text.as_str()));
            texts[i].push_str(&e.tail);
            if let Some(f) = e.finish {
                assert!(matches!(f, FinishReason::Stop | FinishReason::Eos), "{f:?}");
                done[i] = true;
            }
        }
    }
    assert!(matches_code(&texts[0]), "{:?}", texts[0]);
    assert!(
        ["yes", "no", "maybe"].contains(&texts[1].as_str()),
        "{:?}",
        texts[1]
    );
    // Both rows took masks in the same steps.
    assert!(d.guide_stats().masks >= 2);
}

#[test]
fn guided_rows_preempted_by_a_small_pool_still_match() {
    let handle = handle();
    // Three rows over a pool too small for all of them: younger sequences are preempted and
    // recompute their prompt and output, the guide keeping its place.
    let options = DriverOptions::new(64, 8).with_rows(3);
    let layout = Layout::Paged {
        block_tokens: 4,
        blocks: 20,
    };
    let mut d = Driver::new(Arc::clone(&handle), OracleExecutor::boxed(), options)
        .unwrap()
        .serve(layout)
        .map_err(|r| r.1)
        .unwrap();
    let rx = "[a-z]{20,24}";
    let ids: Vec<_> = (0..3)
        .map(|i| {
            d.open(guided(
                &handle,
                Constraint::Regex(rx.into()),
                Sampler::new(1.0, 0, 1.0, 20 + i),
                30,
            ))
            .unwrap()
        })
        .collect();
    let mut texts = vec![String::new(); 3];
    let (mut open, mut steps) = (3, 0);
    while open > 0 {
        steps += 1;
        assert!(steps < 1000, "no progress: {texts:?}");
        let picks = d.step().unwrap();
        for e in d.commit(picks).unwrap() {
            let i = ids.iter().position(|&id| id == e.id).unwrap();
            texts[i].extend(e.tokens.iter().map(|t| t.text.as_str()));
            texts[i].push_str(&e.tail);
            if e.finish.is_some() {
                open -= 1;
                // Its blocks go back, so the parked ones can resume.
                d.release(e.id);
            }
        }
    }
    assert!(d.preemptions() > 0, "the pool was meant to run out");
    for t in &texts {
        assert!(
            (20..=24).contains(&t.len()) && t.bytes().all(|b| b.is_ascii_lowercase()),
            "{t:?}"
        );
    }
}

#[test]
fn a_regex_constrains_the_cpu_and_ptx_devices() {
    for choice in [BackendChoice::Cpu, BackendChoice::Ptx] {
        match open_executor(choice) {
            Ok(o) => regex_on_device(o.executor),
            Err(e) => eprintln!("SKIP ({choice:?}): {e}"),
        }
    }
}

fn regex_on_device(exec: Box<dyn poot_executor::Executor>) {
    let handle = handle();
    let mut d = Driver::new(Arc::clone(&handle), exec, DriverOptions::new(64, 8))
        .unwrap()
        .serve(Layout::Contiguous)
        .map_err(|r| r.1)
        .unwrap();
    for sampler in [Sampler::greedy(), Sampler::new(1.0, 8, 0.9, 4)] {
        let g = generate(
            &mut d,
            guided(
                &handle,
                Constraint::Regex("[0-9]{3}-[a-z]{2}".into()),
                sampler,
                20,
            ),
        );
        assert!(matches_code(&g.text), "{:?}", g.text);
        assert!(ended_by_grammar(&g), "{:?}", g.finish);
    }
}
