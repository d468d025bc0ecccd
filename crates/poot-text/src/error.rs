//! The crate's typed errors: one enum per service, each variant holding the facts a caller
//! needs to report or handle it.

use std::error::Error as StdError;

/// A boxed error from the `tokenizers` crate, kept as the source of our own variants.
pub type HfError = Box<dyn StdError + Send + Sync>;

/// A GGUF file's tokenizer metadata cannot form a vocabulary.
#[derive(Debug, thiserror::Error)]
pub enum VocabError {
    /// A key every vocabulary needs is absent; the file was not converted with a tokenizer.
    #[error("GGUF tokenizer metadata lacks `{key}`")]
    MissingKey {
        /// The metadata key.
        key: &'static str,
    },
    /// A key holds a value of another type than the GGUF convention gives it.
    #[error("GGUF key `{key}` cannot be read")]
    Metadata {
        /// The metadata key.
        key: &'static str,
        /// The reader's error (wrong type, value out of range).
        #[source]
        source: Box<poot_load::LoadError>,
    },
    /// `tokenizer.ggml.model` names a tokenizer family poot does not implement.
    #[error("GGUF tokenizer model `{model}` is not supported (supported: gpt2, llama)")]
    UnsupportedModel {
        /// The value of `tokenizer.ggml.model`.
        model: String,
    },
    /// `tokenizer.ggml.pre` names a pre-tokenizer poot has no regex set for.
    #[error("GGUF pre-tokenizer `{pre}` is not supported")]
    UnsupportedPreTokenizer {
        /// The value of `tokenizer.ggml.pre`.
        pre: String,
    },
    /// A per-token array is shorter than the token list.
    #[error("GGUF key `{key}` has {len} entries for {n_tokens} tokens")]
    LengthMismatch {
        /// The metadata key of the short array.
        key: &'static str,
        /// Its length.
        len: usize,
        /// The number of tokens.
        n_tokens: usize,
    },
    /// Two token ids spell the same text, so text-to-id lookup would be ambiguous.
    #[error("tokens {first} and {second} both spell {text:?}")]
    DuplicateToken {
        /// The shared spelling.
        text: String,
        /// The first id.
        first: u32,
        /// The second id.
        second: u32,
    },
    /// The vocabulary has more tokens than a `u32` id can name.
    #[error("vocabulary of {n_tokens} tokens does not fit u32 ids")]
    TooManyTokens {
        /// The number of tokens.
        n_tokens: usize,
    },
    /// The vocabulary has no tokens at all.
    #[error("GGUF tokenizer has an empty token list")]
    Empty,
    /// A pre-tokenizer regex failed to compile (a bug in poot's regex table).
    #[error("pre-tokenizer regex {pattern:?} does not compile")]
    Regex {
        /// The pattern.
        pattern: String,
        /// The compiler's error.
        #[source]
        source: Box<fancy_regex::Error>,
    },
}

/// Encoding, decoding or loading a tokenizer failed.
#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    /// `tokenizer.json` could not be parsed by the `tokenizers` crate.
    #[error("tokenizer.json does not load")]
    HfLoad {
        /// The parser's error.
        #[source]
        source: HfError,
    },
    /// The `tokenizers` crate failed to encode a text.
    #[error("tokenizer.json tokenizer failed to encode")]
    HfEncode {
        /// Its error.
        #[source]
        source: HfError,
    },
    /// The `tokenizers` crate failed to decode ids.
    #[error("tokenizer.json tokenizer failed to decode")]
    HfDecode {
        /// Its error.
        #[source]
        source: HfError,
    },
    /// An id to decode is not in the vocabulary.
    #[error("token id {id} is outside the vocabulary of {vocab_size}")]
    UnknownId {
        /// The id.
        id: u32,
        /// The vocabulary size.
        vocab_size: usize,
    },
    /// A SentencePiece text needs byte fallback for a byte the vocabulary has no token for.
    #[error("the vocabulary has no byte token for 0x{byte:02X}")]
    MissingByteToken {
        /// The byte.
        byte: u8,
    },
    /// Encoding with `add_special` needs a BOS or EOS token the vocabulary does not define.
    #[error("the tokenizer adds a {which} token but defines none")]
    MissingSpecialToken {
        /// `"BOS"` or `"EOS"`.
        which: &'static str,
    },
    /// Plain text encoded to a control token (the vocabulary's merges spell it), so a chat
    /// message would produce that control token; the prompt is refused.
    #[error("plain text encodes to control token {id}")]
    ControlFromText {
        /// The control token's id.
        id: u32,
    },
    /// A pair (query and document) needs a tokenizer whose `tokenizer.json` says how two texts
    /// are joined; a GGUF vocabulary does not.
    #[error("encoding a text pair needs a tokenizer.json tokenizer")]
    PairNeedsTokenizerJson,
    /// The first text of a pair, with the tokens that join it to a second, leaves no room for
    /// the second within the model's positions.
    #[error(
        "the first text is {tokens} tokens with the pair's special tokens; at most {max_tokens} fit with a second text"
    )]
    PairFirstTooLong {
        /// Tokens of the first text plus the pair's special tokens.
        tokens: usize,
        /// The most a pair may have, less one for the second text.
        max_tokens: usize,
    },
    /// A protected range given to a chat encode lies outside the text or off a char boundary.
    #[error("protected range {start}..{end} does not fit a text of {len} bytes")]
    BadProtectedRange {
        /// Range start (bytes).
        start: usize,
        /// Range end (bytes).
        end: usize,
        /// The text length.
        len: usize,
    },
}

/// Rendering a chat prompt failed.
#[derive(Debug, thiserror::Error)]
pub enum ChatError {
    /// The model ships no chat template and no built-in format was named for it.
    #[error("the model has no chat template; name a built-in format (one of: {known})")]
    NoTemplate {
        /// The built-in format keys, comma separated.
        known: String,
    },
    /// A built-in format key is not in the table.
    #[error("unknown built-in chat format `{key}` (known: {known})")]
    UnknownFormat {
        /// The key asked for.
        key: String,
        /// The known keys, comma separated.
        known: String,
    },
    /// `tokenizer_config.json` lists named templates but none is called `default`.
    #[error("tokenizer_config.json lists chat templates {names:?} but no `default`")]
    NoDefaultTemplate {
        /// The names it lists.
        names: Vec<String>,
    },
    /// The caller asked for a named template the model does not ship.
    #[error("no chat template named `{name}` (available: {available:?})")]
    UnknownTemplateName {
        /// The name asked for.
        name: String,
        /// The names the model ships.
        available: Vec<String>,
    },
    /// The template does not compile.
    #[error("chat template `{name}` does not compile")]
    Syntax {
        /// Which template.
        name: String,
        /// The compiler's error (with line information).
        #[source]
        source: minijinja::Error,
    },
    /// The template called `raise_exception`: it refuses these messages (a role it does not
    /// know, roles that do not alternate, ...). Change the conversation.
    #[error("chat template refused the conversation: {message}")]
    Raised {
        /// The template's message.
        message: String,
    },
    /// The template failed while rendering.
    #[error("chat template failed to render")]
    Render {
        /// The engine's error.
        #[source]
        source: minijinja::Error,
    },
    /// `messages` is not a JSON array of objects.
    #[error("chat messages must be a JSON array of objects, found {found}")]
    BadMessages {
        /// What was found instead, in words.
        found: &'static str,
    },
    /// `tools` is neither an array nor null.
    #[error("chat tools must be a JSON array, found {found}")]
    BadTools {
        /// What was found instead, in words.
        found: &'static str,
    },
}

/// Building text services from a checkpoint's files failed.
#[derive(Debug, thiserror::Error)]
pub enum TextError {
    /// The GGUF vocabulary is invalid.
    #[error(transparent)]
    Vocab(#[from] VocabError),
    /// The tokenizer failed.
    #[error(transparent)]
    Tokenizer(#[from] TokenizerError),
    /// The chat template failed.
    #[error(transparent)]
    Chat(#[from] ChatError),
    /// `tokenizer_config.json` is not valid JSON of the expected shape.
    #[error("tokenizer_config.json is not valid")]
    Config {
        /// The parser's error.
        #[source]
        source: serde_json::Error,
    },
    /// A field of `tokenizer_config.json` has an unexpected shape.
    #[error("tokenizer_config.json field `{field}` should be {expected}")]
    ConfigField {
        /// The field.
        field: &'static str,
        /// What it should hold, in words.
        expected: &'static str,
    },
    /// A file a convenience loader needs could not be read.
    #[error("cannot read {path}")]
    Io {
        /// The path.
        path: std::path::PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}
