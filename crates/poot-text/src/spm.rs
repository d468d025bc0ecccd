//! SentencePiece BPE over a scored vocabulary, as llama.cpp's `llm_tokenizer_spm_session`:
//! start from single characters, repeatedly join the adjacent pair whose joined text is a
//! token with the highest score (ties to the leftmost), and spell leftovers byte by byte.

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::ops::Range;

/// What the merge loop needs from the vocabulary.
pub(crate) trait ScoredVocab {
    /// The id of a token spelled exactly `text`.
    fn id_of(&self, text: &str) -> Option<u32>;
    /// The merge score of a token.
    fn score(&self, id: u32) -> f32;
}

#[derive(Clone, Copy)]
struct Symbol {
    start: usize,
    len: usize,
    prev: Option<usize>,
    next: Option<usize>,
}

/// A candidate pair; the heap pops the highest score, then the leftmost pair.
struct Bigram {
    left: usize,
    right: usize,
    score: f32,
    len: usize,
}

impl PartialEq for Bigram {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Bigram {}
impl PartialOrd for Bigram {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Bigram {
    fn cmp(&self, other: &Self) -> Ordering {
        // `total_cmp` keeps NaN scores (a broken file) ordered instead of panicking.
        self.score
            .total_cmp(&other.score)
            .then_with(|| other.left.cmp(&self.left))
    }
}

/// Splits `text` (spaces already escaped to "▁") into the byte ranges of its final symbols.
/// A returned range is either a vocabulary token or a single character that is not one
/// (which the caller spells with byte tokens).
pub(crate) fn segment<V: ScoredVocab>(text: &str, vocab: &V) -> Vec<Range<usize>> {
    let mut symbols: Vec<Symbol> = Vec::new();
    for (i, (start, c)) in text.char_indices().enumerate() {
        symbols.push(Symbol {
            start,
            len: c.len_utf8(),
            prev: i.checked_sub(1),
            next: None,
        });
        if let Some(prev) = i.checked_sub(1).and_then(|p| symbols.get_mut(p)) {
            prev.next = Some(i);
        }
    }
    let mut heap = BinaryHeap::new();
    let push = |heap: &mut BinaryHeap<Bigram>,
                symbols: &[Symbol],
                left: Option<usize>,
                right: Option<usize>| {
        let (Some(l), Some(r)) = (left, right) else {
            return;
        };
        let (Some(ls), Some(rs)) = (symbols.get(l), symbols.get(r)) else {
            return;
        };
        let joined = &text[ls.start..rs.start + rs.len];
        if let Some(id) = vocab.id_of(joined) {
            heap.push(Bigram {
                left: l,
                right: r,
                score: vocab.score(id),
                len: joined.len(),
            });
        }
    };
    for i in 1..symbols.len() {
        push(&mut heap, &symbols, Some(i - 1), Some(i));
    }
    while let Some(bigram) = heap.pop() {
        let (Some(&ls), Some(&rs)) = (symbols.get(bigram.left), symbols.get(bigram.right)) else {
            continue;
        };
        if ls.len == 0 || rs.len == 0 || ls.len + rs.len != bigram.len {
            continue;
        }
        let next = rs.next;
        if let Some(s) = symbols.get_mut(bigram.left) {
            s.len += rs.len;
            s.next = next;
        }
        if let Some(s) = symbols.get_mut(bigram.right) {
            s.len = 0;
        }
        if let Some(n) = next.and_then(|n| symbols.get_mut(n)) {
            n.prev = Some(bigram.left);
        }
        push(&mut heap, &symbols, ls.prev, Some(bigram.left));
        push(&mut heap, &symbols, Some(bigram.left), next);
    }
    symbols
        .iter()
        .filter(|s| s.len > 0)
        .map(|s| s.start..s.start + s.len)
        .collect()
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    struct Toy(HashMap<&'static str, (u32, f32)>);
    impl ScoredVocab for Toy {
        fn id_of(&self, text: &str) -> Option<u32> {
            self.0.get(text).map(|v| v.0)
        }
        fn score(&self, id: u32) -> f32 {
            self.0.values().find(|v| v.0 == id).map_or(0.0, |v| v.1)
        }
    }

    #[test]
    fn merges_best_scores_first() {
        let vocab = Toy(HashMap::from([("ab", (0, -1.0)), ("bc", (1, -0.5))]));
        let text = "abc";
        let got: Vec<_> = segment(text, &vocab)
            .into_iter()
            .map(|r| &text[r])
            .collect();
        // "bc" scores higher than "ab"; "a"+"bc" is not a token.
        assert_eq!(got, ["a", "bc"]);
        let vocab = Toy(HashMap::from([
            ("ab", (0, -1.0)),
            ("bc", (1, -0.5)),
            ("abc", (2, -2.0)),
        ]));
        let got: Vec<_> = segment(text, &vocab)
            .into_iter()
            .map(|r| &text[r])
            .collect();
        assert_eq!(got, ["abc"]);
    }

    #[test]
    fn ties_go_left() {
        let vocab = Toy(HashMap::from([("aa", (0, -1.0))]));
        let text = "aaa";
        let got: Vec<_> = segment(text, &vocab)
            .into_iter()
            .map(|r| &text[r])
            .collect();
        assert_eq!(got, ["aa", "a"]);
    }
}
