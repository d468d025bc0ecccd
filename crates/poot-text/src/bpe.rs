//! Byte-pair merging of one word: repeatedly join the adjacent pair with the best merge
//! rank, as llama.cpp's `llm_tokenizer_bpe_session` does (ties go to the leftmost pair).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::ops::Range;

/// Merge ranks keyed by left then right part, so lookups borrow `&str` without allocating.
#[derive(Debug, Default)]
pub(crate) struct MergeRanks {
    ranks: HashMap<String, HashMap<String, u32>>,
}

impl MergeRanks {
    /// Reads `"left right"` merges; the first occurrence of a pair keeps its rank.
    ///
    /// Like llama.cpp, the split is at the first space after the first byte (so a left part
    /// may itself be a space in vocabularies that do not byte-encode), and a line without a
    /// space becomes the pair ("", "") that can never match.
    pub(crate) fn from_merges(merges: &[String]) -> MergeRanks {
        let mut ranks: HashMap<String, HashMap<String, u32>> = HashMap::new();
        for (rank, merge) in merges.iter().enumerate() {
            // Byte-wise like `std::string::find(' ', 1)`: the space is ASCII, so the split
            // always lands on a character boundary even when the first character is wider.
            let split = merge.bytes().skip(1).position(|b| b == b' ').map(|p| p + 1);
            let (left, right) = match split {
                Some(p) => (&merge[..p], &merge[p + 1..]),
                None => ("", ""),
            };
            let rank = u32::try_from(rank).unwrap_or(u32::MAX);
            ranks
                .entry(left.to_owned())
                .or_default()
                .entry(right.to_owned())
                .or_insert(rank);
        }
        MergeRanks { ranks }
    }

    fn rank(&self, left: &str, right: &str) -> Option<u32> {
        self.ranks.get(left)?.get(right).copied()
    }
}

/// One symbol of the word being merged: a byte range, and its neighbours in the live chain.
#[derive(Clone, Copy)]
struct Symbol {
    start: usize,
    len: usize,
    prev: Option<usize>,
    next: Option<usize>,
}

/// A candidate merge, ordered so the heap pops the lowest rank, then the leftmost pair.
#[derive(PartialEq, Eq, PartialOrd, Ord)]
struct Bigram {
    rank: Reverse<u32>,
    left: Reverse<usize>,
    right: usize,
    /// Byte length of the merged text when queued; a later mismatch means it is stale.
    len: usize,
}

/// Merges `word` and returns the byte ranges of the final symbols, left to right.
pub(crate) fn merge_word(word: &str, ranks: &MergeRanks) -> Vec<Range<usize>> {
    let mut symbols: Vec<Symbol> = Vec::new();
    for (i, (start, c)) in word.char_indices().enumerate() {
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
    let text = |s: &Symbol| &word[s.start..s.start + s.len];
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
        if let Some(rank) = ranks.rank(text(ls), text(rs)) {
            heap.push(Bigram {
                rank: Reverse(rank),
                left: Reverse(l),
                right: r,
                len: ls.len + rs.len,
            });
        }
    };
    for i in 1..symbols.len() {
        push(&mut heap, &symbols, Some(i - 1), Some(i));
    }
    while let Some(bigram) = heap.pop() {
        let (l, r) = (bigram.left.0, bigram.right);
        let (Some(&ls), Some(&rs)) = (symbols.get(l), symbols.get(r)) else {
            continue;
        };
        // Stale when either side was merged away or grew since the pair was queued; the
        // ranges are contiguous, so adjacency plus total length identifies the same text.
        if ls.len == 0 || rs.len == 0 || ls.next != Some(r) || ls.len + rs.len != bigram.len {
            continue;
        }
        let merged_next = rs.next;
        if let Some(s) = symbols.get_mut(l) {
            s.len += rs.len;
            s.next = merged_next;
        }
        if let Some(s) = symbols.get_mut(r) {
            s.len = 0;
        }
        if let Some(n) = merged_next.and_then(|n| symbols.get_mut(n)) {
            n.prev = Some(l);
        }
        let prev = symbols.get(l).and_then(|s| s.prev);
        push(&mut heap, &symbols, prev, Some(l));
        push(&mut heap, &symbols, Some(l), merged_next);
    }
    symbols
        .iter()
        .filter(|s| s.len > 0)
        .map(|s| s.start..s.start + s.len)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn merged(word: &str, merges: &[&str]) -> Vec<String> {
        let ranks =
            MergeRanks::from_merges(&merges.iter().map(|m| (*m).to_owned()).collect::<Vec<_>>());
        merge_word(word, &ranks)
            .into_iter()
            .map(|r| word[r].to_owned())
            .collect()
    }

    #[test]
    fn applies_merges_by_rank() {
        assert_eq!(
            merged("hello", &["l l", "h e", "he ll", "hell o"]),
            ["hello"]
        );
        assert_eq!(merged("hello", &["h e", "l o"]), ["he", "l", "lo"]);
        assert_eq!(merged("aaa", &["a a"]), ["aa", "a"]);
        assert_eq!(merged("", &["a a"]), Vec::<String>::new());
    }

    #[test]
    fn splits_merges_after_a_wide_first_character() {
        assert_eq!(merged("Ġhe", &["h e", "Ġ he"]), ["Ġhe"]);
    }

    #[test]
    fn first_duplicate_merge_keeps_its_rank() {
        // "b c" appears twice; its first rank (0) beats "a b" (1).
        assert_eq!(merged("abc", &["b c", "a b", "b c"]), ["a", "bc"]);
    }
}
