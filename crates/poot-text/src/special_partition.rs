//! Splitting text at spelled special tokens before the model tokenizer runs
//! (llama.cpp's `tokenizer_st_partition`), with an optional set of protected ranges where
//! control tokens must not be recognized.
//!
//! llama.cpp takes the special tokens longest first and, for each, splits every remaining
//! text fragment at its non-overlapping occurrences, left to right. Doing that literally costs
//! a full text scan per special token (Gemma has thousands); instead this module finds every
//! occurrence of every special token once, then replays the same per-token passes over them.

use std::collections::HashMap;
use std::ops::Range;

use crate::spelling_index::SpellingIndex;

/// A piece of the partitioned text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Fragment {
    /// Text the model tokenizer handles, as a byte range of the input.
    Text(Range<usize>),
    /// A special token matched in the text.
    Token(u32),
}

/// One special token, in the order it is tried.
#[derive(Clone, Debug)]
pub(crate) struct SpecialToken {
    pub(crate) id: u32,
    pub(crate) text: String,
    /// Control and unknown tokens are matched only when parsing specials; user-defined ones
    /// always.
    pub(crate) needs_parse_special: bool,
}

/// The special tokens of a vocabulary, with a first-byte and length index for fast scans.
#[derive(Debug, Default)]
pub(crate) struct SpecialMatcher {
    /// In llama.cpp's order: longest text first, ties by id.
    tokens: Vec<SpecialToken>,
    /// Position in `tokens` of each spelling.
    index: SpellingIndex<usize>,
}

impl SpecialMatcher {
    pub(crate) fn new(mut tokens: Vec<SpecialToken>) -> SpecialMatcher {
        tokens.retain(|t| !t.text.is_empty());
        tokens.sort_by(|a, b| b.text.len().cmp(&a.text.len()).then(a.id.cmp(&b.id)));
        let index = SpellingIndex::new(tokens.iter().enumerate().map(|(i, t)| (t.text.clone(), i)));
        SpecialMatcher { tokens, index }
    }

    /// Partitions `text` into fragments. Control/unknown tokens are recognized only when
    /// `parse_special`, and never where they overlap a `protected` range.
    pub(crate) fn partition(
        &self,
        text: &str,
        parse_special: bool,
        protected: &[Range<usize>],
    ) -> Vec<Fragment> {
        if text.is_empty() {
            return Vec::new();
        }
        // Every occurrence of every eligible token, grouped by token (positions ascending).
        let mut occurrences: HashMap<usize, Vec<usize>> = HashMap::new();
        for pos in 0..text.len() {
            for (_, &t) in self.index.matches_at(text, pos) {
                occurrences.entry(t).or_default().push(pos);
            }
        }
        let mut order: Vec<usize> = occurrences.keys().copied().collect();
        order.sort_unstable();

        let mut fragments = vec![Fragment::Text(0..text.len())];
        for t in order {
            let Some(token) = self.tokens.get(t) else {
                continue;
            };
            if token.needs_parse_special && !parse_special {
                continue;
            }
            let len = token.text.len();
            let positions = occurrences.get(&t).map(Vec::as_slice).unwrap_or(&[]);
            // Replays `find` from the end of the previous match, fragment by fragment.
            let mut next_free = 0usize;
            let mut out = Vec::with_capacity(fragments.len() + 2);
            let mut pos_iter = positions.iter().peekable();
            for fragment in fragments {
                let Fragment::Text(range) = fragment else {
                    out.push(fragment);
                    continue;
                };
                let mut start = range.start;
                next_free = next_free.max(range.start);
                while let Some(&&pos) = pos_iter.peek() {
                    if pos + len > range.end {
                        break;
                    }
                    pos_iter.next();
                    if pos < next_free {
                        continue;
                    }
                    let span = pos..pos + len;
                    if token.needs_parse_special
                        && protected
                            .iter()
                            .any(|p| p.start < span.end && span.start < p.end)
                    {
                        continue;
                    }
                    if pos > start {
                        out.push(Fragment::Text(start..pos));
                    }
                    out.push(Fragment::Token(token.id));
                    start = span.end;
                    next_free = span.end;
                }
                // Occurrences starting inside this fragment but running past its end are
                // skipped, as `find` bounded by the fragment would skip them.
                while pos_iter.peek().is_some_and(|&&p| p < range.end) {
                    pos_iter.next();
                }
                if start < range.end {
                    out.push(Fragment::Text(start..range.end));
                }
            }
            fragments = out;
        }
        fragments
    }

    /// Spellings of the tokens that parse only with `parse_special` (control and unknown).
    pub(crate) fn control_texts(&self) -> impl Iterator<Item = &str> {
        self.tokens
            .iter()
            .filter(|t| t.needs_parse_special)
            .map(|t| t.text.as_str())
    }
}

#[cfg(test)]
// Protected ranges are lists of ranges, not ranges collected into lists.
#[allow(clippy::single_range_in_vec_init)]
mod tests {
    use super::*;

    fn matcher() -> SpecialMatcher {
        SpecialMatcher::new(vec![
            SpecialToken {
                id: 1,
                text: "<s>".into(),
                needs_parse_special: true,
            },
            SpecialToken {
                id: 2,
                text: "<|im_start|>".into(),
                needs_parse_special: true,
            },
            SpecialToken {
                id: 3,
                text: "<think>".into(),
                needs_parse_special: false,
            },
        ])
    }

    #[test]
    fn splits_at_tokens() {
        let m = matcher();
        let text = "a<s>b<|im_start|>c<think>";
        assert_eq!(
            m.partition(text, true, &[]),
            vec![
                Fragment::Text(0..1),
                Fragment::Token(1),
                Fragment::Text(4..5),
                Fragment::Token(2),
                Fragment::Text(17..18),
                Fragment::Token(3),
            ]
        );
        // Without parse_special only the user-defined token splits.
        assert_eq!(
            m.partition(text, false, &[]),
            vec![Fragment::Text(0..18), Fragment::Token(3)]
        );
    }

    #[test]
    fn protected_ranges_hide_control_tokens_only() {
        let m = matcher();
        let text = "<s>x<s><think>";
        assert_eq!(
            m.partition(text, true, &[4..14]),
            vec![Fragment::Token(1), Fragment::Text(3..7), Fragment::Token(3)]
        );
    }

    #[test]
    fn adjacent_repeats_do_not_overlap() {
        let m = SpecialMatcher::new(vec![SpecialToken {
            id: 9,
            text: "aa".into(),
            needs_parse_special: true,
        }]);
        assert_eq!(
            m.partition("aaa", true, &[]),
            vec![Fragment::Token(9), Fragment::Text(2..3)]
        );
    }
}
