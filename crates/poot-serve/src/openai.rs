//! The OpenAI wire format: request bodies as clients send them, and the response and stream
//! chunk bodies. Fields the server does not read are ignored, as OpenAI's own API ignores
//! unknown ones; fields it reads but cannot honour are refused where the request is checked.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// `"text"` or `["a", "b"]`: `stop`.
#[derive(Clone, Debug, Deserialize)]
#[serde(untagged)]
pub enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

impl OneOrMany {
    pub fn into_vec(self) -> Vec<String> {
        match self {
            OneOrMany::One(s) => vec![s],
            OneOrMany::Many(v) => v,
        }
    }
}

/// A completion prompt: a text, texts, token ids, or lists of token ids.
#[derive(Clone, Debug, Deserialize)]
#[serde(untagged)]
pub enum Prompt {
    Text(String),
    Texts(Vec<String>),
    Tokens(Vec<i64>),
    TokenLists(Vec<Vec<i64>>),
}

#[derive(Clone, Copy, Debug, Default, Deserialize)]
pub struct StreamOptions {
    #[serde(default)]
    pub include_usage: bool,
}

/// Sampling and stopping fields shared by both generation routes.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct SamplingFields {
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
    /// Extension (vLLM, llama-server).
    pub top_k: Option<i64>,
    /// Extension (vLLM, llama-server).
    pub min_p: Option<f32>,
    pub n: Option<i64>,
    pub seed: Option<i64>,
    pub stop: Option<OneOrMany>,
    pub presence_penalty: Option<f32>,
    pub frequency_penalty: Option<f32>,
    /// Extension (vLLM, llama-server): 1 disables.
    pub repetition_penalty: Option<f32>,
    pub logit_bias: Option<BTreeMap<String, f32>>,
    /// Extension (vLLM): keep generating past end-of-text tokens.
    #[serde(default)]
    pub ignore_eos: bool,
    /// Extension: `false` decodes this request one token a step when the server speculates.
    pub speculative: Option<bool>,
    /// Extension (vLLM): the output is JSON valid under this schema (an object or its text).
    pub guided_json: Option<Value>,
    /// Extension (vLLM): the output matches this regular expression.
    pub guided_regex: Option<String>,
    /// Extension (vLLM): the output is derived by this grammar (llguidance's Lark dialect).
    pub guided_grammar: Option<String>,
    /// Extension (vLLM): the output is exactly one of these strings.
    pub guided_choice: Option<Vec<String>>,
    #[serde(default)]
    pub stream: bool,
    pub stream_options: Option<StreamOptions>,
}

#[derive(Clone, Debug, Deserialize)]
pub struct CompletionRequest {
    pub model: String,
    pub prompt: Prompt,
    pub max_tokens: Option<i64>,
    /// Completions take the number of alternatives per token (0 to 5).
    pub logprobs: Option<i64>,
    #[serde(default)]
    pub echo: bool,
    pub suffix: Option<String>,
    pub best_of: Option<i64>,
    #[serde(flatten)]
    pub sampling: SamplingFields,
}

#[derive(Clone, Debug, Deserialize)]
pub struct ChatRequest {
    pub model: String,
    /// Kept as JSON: the chat template reads the messages as sent.
    pub messages: Value,
    pub max_tokens: Option<i64>,
    pub max_completion_tokens: Option<i64>,
    #[serde(default)]
    pub logprobs: bool,
    pub top_logprobs: Option<i64>,
    pub tools: Option<Value>,
    pub tool_choice: Option<Value>,
    /// With a forced call (`tool_choice` `required`): whether the answer may make several.
    pub parallel_tool_calls: Option<bool>,
    pub response_format: Option<Value>,
    #[serde(flatten)]
    pub sampling: SamplingFields,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(untagged)]
pub enum EmbeddingInput {
    Text(String),
    Texts(Vec<String>),
    /// Token ids, or anything else: refused.
    Other(Value),
}

#[derive(Clone, Debug, Deserialize)]
pub struct EmbeddingRequest {
    pub model: String,
    pub input: EmbeddingInput,
    pub encoding_format: Option<String>,
    pub dimensions: Option<i64>,
}

#[derive(Clone, Copy, Debug, Default, Serialize, PartialEq, Eq)]
pub struct Usage {
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
    pub total_tokens: usize,
}

impl Usage {
    pub fn add(&mut self, prompt: usize, completion: usize) {
        self.prompt_tokens += prompt;
        self.completion_tokens += completion;
        self.total_tokens = self.prompt_tokens + self.completion_tokens;
    }
}

/// A completion choice's log-probabilities (the legacy completions format).
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct CompletionLogprobs {
    pub tokens: Vec<String>,
    pub token_logprobs: Vec<f32>,
    pub top_logprobs: Vec<BTreeMap<String, f32>>,
    pub text_offset: Vec<usize>,
}

#[derive(Clone, Debug, Serialize)]
pub struct CompletionChoice {
    pub index: usize,
    pub text: String,
    pub logprobs: Option<CompletionLogprobs>,
    pub finish_reason: Option<&'static str>,
}

/// The body every completion and chat reply shares, whole or as a stream chunk; only the
/// choices differ.
#[derive(Clone, Debug, Serialize)]
pub struct Envelope<C> {
    pub id: String,
    pub object: &'static str,
    pub created: u64,
    pub model: String,
    pub choices: Vec<C>,
    /// Always present in a whole reply; in stream chunks absent unless `include_usage`, then
    /// `null` until the last chunk.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<Option<Usage>>,
}

/// One alternative in a chat log-probability record.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct TopLogprob {
    pub token: String,
    pub logprob: f32,
    pub bytes: Vec<u8>,
}

#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct ChatTokenLogprob {
    pub token: String,
    pub logprob: f32,
    pub bytes: Vec<u8>,
    pub top_logprobs: Vec<TopLogprob>,
}

#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct ChatLogprobs {
    pub content: Vec<ChatTokenLogprob>,
}

#[derive(Clone, Debug, Serialize)]
pub struct ChatMessage {
    pub role: &'static str,
    /// `null` when the answer is only tool calls.
    pub content: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<ToolCallOut>>,
}

/// A function call's name and its arguments object as JSON text.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct FunctionCall {
    pub name: String,
    pub arguments: String,
}

/// A tool call in a chat answer.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct ToolCallOut {
    pub id: String,
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub function: FunctionCall,
}

/// A tool call in a stream chunk: the first chunk of a call has its id, type and name, the next
/// its arguments.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct ToolCallDelta {
    /// The call's place among the choice's calls.
    pub index: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    pub kind: Option<&'static str>,
    pub function: FunctionDelta,
}

#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct FunctionDelta {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub arguments: String,
}

#[derive(Clone, Debug, Serialize)]
pub struct ChatChoice {
    pub index: usize,
    pub message: ChatMessage,
    pub logprobs: Option<ChatLogprobs>,
    pub finish_reason: Option<&'static str>,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct Delta {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<ToolCallDelta>>,
}

#[derive(Clone, Debug, Serialize)]
pub struct ChatChunkChoice {
    pub index: usize,
    pub delta: Delta,
    pub logprobs: Option<ChatLogprobs>,
    pub finish_reason: Option<&'static str>,
}

#[derive(Clone, Debug, Serialize)]
pub struct ModelCard {
    pub id: String,
    pub object: &'static str,
    pub created: u64,
    pub owned_by: &'static str,
    /// Extension (vLLM): the context a sequence has.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_model_len: Option<usize>,
    /// Extension (vLLM): the base model of a LoRA adapter.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
}

#[derive(Clone, Debug, Serialize)]
pub struct ModelList {
    pub object: &'static str,
    pub data: Vec<ModelCard>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Embedding {
    pub object: &'static str,
    pub index: usize,
    /// A list of floats, or base64 of little-endian f32 when `encoding_format` is `base64`.
    pub embedding: Value,
}

#[derive(Clone, Debug, Serialize)]
pub struct EmbeddingUsage {
    pub prompt_tokens: usize,
    pub total_tokens: usize,
}

#[derive(Clone, Debug, Serialize)]
pub struct EmbeddingResponse {
    pub object: &'static str,
    pub data: Vec<Embedding>,
    pub model: String,
    pub usage: EmbeddingUsage,
}
