//! llama.cpp's decode-time space cleanup (`clean_spaces`, transformers'
//! `clean_up_tokenization_spaces`): drops the space before `? ! . ,`, the spaces around a lone
//! apostrophe, and the space before `'s 'm 're 've`.
//!
//! Ported pass for pass from `llama_vocab::impl::detokenize`, in place over bytes, so results
//! match it on every input including odd ones (`" ' '"`).

/// Applies the three passes to `text` in place.
pub(crate) fn clean(text: &mut Vec<u8>) {
    // Pass 1: " ?", " !", " .", " ," lose the space.
    let n = text.len();
    let mut total = usize::from(n > 0);
    for i in 1..n {
        let x = text[i];
        if text[i - 1] == b' ' && matches!(x, b'?' | b'!' | b'.' | b',') {
            total -= 1;
        }
        text[total] = x;
        total += 1;
    }
    text.truncate(total);

    // Pass 2: " ' " becomes "'".
    let n = text.len();
    let mut total = usize::from(n > 0);
    let mut i = 1;
    while i < n {
        let x = text[i];
        if x == b'\'' && i + 1 < n && text[i - 1] == b' ' && text[i + 1] == b' ' {
            total -= 1;
            i += 1;
            // llama.cpp zeroes the skipped space so it cannot count as a "previous space".
            text[i] = 0;
        }
        text[total] = x;
        total += 1;
        i += 1;
    }
    text.truncate(total);

    // Pass 3: " 's", " 'm", " 're", " 've" lose the space (" 't", " 'd", " 'll" keep it).
    let n = text.len();
    let mut total = usize::from(n > 0);
    for i in 1..n {
        let x = text[i];
        if text[i - 1] == b' ' && x == b'\'' && i + 1 < n {
            let x1 = text[i + 1];
            if matches!(x1, b's' | b'm') {
                total -= 1;
            } else if i + 2 < n {
                let x2 = text[i + 2];
                if (x1 == b'r' || x1 == b'v') && x2 == b'e' {
                    total -= 1;
                }
            }
        }
        text[total] = x;
        total += 1;
    }
    text.truncate(total);
}

/// The largest prefix length `p` of `raw` after which cleaning is local: `raw[p-4..p]` holds
/// no space, so `clean(raw[..p]) ++ clean(raw[p..])` equals `clean(raw)` whatever follows.
///
/// Every rule is anchored at a space and looks at most three bytes past it, and only spaces
/// are ever removed, so four non-space bytes before `p` wall the two sides off.
pub(crate) fn stable_prefix_len(raw: &[u8]) -> Option<usize> {
    let mut run = 0;
    let mut best = None;
    for (i, &b) in raw.iter().enumerate() {
        if b == b' ' {
            run = 0;
        } else {
            run += 1;
            if run >= 4 {
                best = Some(i + 1);
            }
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn cleaned(s: &str) -> String {
        let mut v = s.as_bytes().to_vec();
        clean(&mut v);
        String::from_utf8_lossy(&v).into_owned()
    }

    #[test]
    fn matches_llama_cpp_rules() {
        assert_eq!(cleaned("Hello , world !"), "Hello, world!");
        assert_eq!(cleaned("rock ' n ' roll"), "rock'n'roll");
        assert_eq!(
            cleaned("it 's I 'm we 're you 've don 't I 'll he 'd"),
            "it's I'm we're you've don 't I 'll he 'd"
        );
        assert_eq!(cleaned(" ."), ".");
        assert_eq!(cleaned(""), "");
    }

    proptest! {
        /// Cleaning two sides of a stable split separately equals cleaning the whole.
        #[test]
        fn stable_split_is_local(raw in proptest::collection::vec(prop_oneof![
            Just(b' '), Just(b'\''), Just(b'.'), Just(b','), Just(b's'), Just(b'r'), Just(b'e'),
            Just(b'v'), Just(b'm'), Just(b'x'), Just(b'?')], 0..40)) {
            let mut whole = raw.clone();
            clean(&mut whole);
            for cut in 0..=raw.len() {
                if let Some(p) = stable_prefix_len(&raw[..cut]) {
                    let mut left = raw[..p].to_vec();
                    clean(&mut left);
                    let mut right = raw[p..].to_vec();
                    clean(&mut right);
                    left.extend_from_slice(&right);
                    prop_assert_eq!(&left, &whole);
                }
            }
        }
    }
}
