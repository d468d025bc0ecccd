//! Chat renders against transformers' `apply_chat_template` (`scripts/ref/chat_refs.py`):
//! 37 real templates (36 from the axolotl wheel plus SmolLM2's) times 11 conversations,
//! including tools, tool calls and replies, reasoning and messages spelling control tokens.

mod support;

use poot_text::{ChatError, ChatOptions, ChatTemplate, ChatTokens};
use serde_json::Value as Json;
use support::*;

fn now(reference: &Json) -> jiff::civil::DateTime {
    str_of(&reference["now"])
        .parse()
        .expect("fixture time parses")
}

fn options_for(scenario: &Json, reference: &Json) -> ChatOptions {
    ChatOptions {
        add_generation_prompt: scenario
            .get("add_generation_prompt")
            .and_then(Json::as_bool)
            .unwrap_or(true),
        extra: scenario
            .get("extra")
            .and_then(Json::as_object)
            .cloned()
            .unwrap_or_default(),
        now: Some(now(reference)),
        ..ChatOptions::default()
    }
}

fn tokens_for(reference: &Json, template: &str) -> ChatTokens {
    let t = &reference["tokens"][template];
    ChatTokens {
        bos: t["bos_token"].as_str().map(str::to_owned),
        eos: t["eos_token"].as_str().map(str::to_owned),
        ..ChatTokens::default()
    }
}

#[test]
fn renders_match_transformers() {
    let reference = fixture("chat_renders.json");
    let renders = reference["renders"].as_object().expect("renders");
    let scenarios = reference["scenarios"].as_object().expect("scenarios");
    let (mut texts, mut errors, mut failures) = (0, 0, Vec::new());
    for (name, cases) in renders {
        let source = std::fs::read_to_string(fixture_path(&format!("chat_templates/{name}.jinja")))
            .expect("template");
        let template = ChatTemplate::new(name, &source).expect("template compiles");
        let tokens = tokens_for(&reference, name);
        for (scenario_name, want) in cases.as_object().expect("cases") {
            let scenario = &scenarios[scenario_name];
            let got = template.render_messages(
                &scenario["messages"],
                scenario.get("tools"),
                &options_for(scenario, &reference),
                &tokens,
            );
            let case = format!("{name}/{scenario_name}");
            match (got, want.get("text"), want.get("raised")) {
                (Ok(text), Some(expected), _) => {
                    texts += 1;
                    if text != str_of(expected) {
                        failures.push(format!(
                            "{case}: render differs\n got: {text:?}\nwant: {:?}",
                            str_of(expected)
                        ));
                    }
                }
                (Err(ChatError::Raised { message }), None, Some(expected)) => {
                    errors += 1;
                    if message != str_of(expected) {
                        failures.push(format!(
                            "{case}: raised {message:?}, want {:?}",
                            str_of(expected)
                        ));
                    }
                }
                (Err(ChatError::Render { .. }), None, None) => errors += 1,
                (got, _, _) => failures.push(format!("{case}: got {got:?}, want {want}")),
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases differ:\n{}",
        failures.len(),
        texts + errors + failures.len(),
        failures.join("\n")
    );
    assert!(
        texts >= 300 && errors >= 40,
        "{texts} renders, {errors} errors"
    );
}
