//! GPT-2's byte-level alphabet: every byte gets a printable stand-in character, so a
//! byte-level BPE vocabulary can spell any byte sequence with ordinary strings.

use std::sync::OnceLock;

/// The two directions of the byte ↔ character table.
struct Alphabet {
    to_char: [char; 256],
    /// Indexed by code point for the range the alphabet uses (0..=0x143).
    to_byte: [Option<u8>; 0x144],
}

fn alphabet() -> &'static Alphabet {
    static TABLE: OnceLock<Alphabet> = OnceLock::new();
    TABLE.get_or_init(|| {
        let mut to_char = ['\0'; 256];
        let mut to_byte = [None; 0x144];
        let printable = |b: u32| {
            (0x21..=0x7E).contains(&b) || (0xA1..=0xAC).contains(&b) || (0xAE..=0xFF).contains(&b)
        };
        let mut next_free = 256u32;
        for b in 0..256u32 {
            let cp = if printable(b) {
                b
            } else {
                let cp = next_free;
                next_free += 1;
                cp
            };
            // Both ranges hold valid scalar values below 0x144, by construction.
            let c = char::from_u32(cp).unwrap_or('\u{FFFD}');
            to_char[b as usize] = c;
            if let Some(slot) = to_byte.get_mut(cp as usize) {
                *slot = Some(b as u8);
            }
        }
        Alphabet { to_char, to_byte }
    })
}

/// The stand-in character for one byte.
pub(crate) fn byte_to_char(b: u8) -> char {
    alphabet().to_char[b as usize]
}

/// The byte a stand-in character encodes, or `None` for a character outside the alphabet.
pub(crate) fn char_to_byte(c: char) -> Option<u8> {
    alphabet().to_byte.get(c as usize).copied().flatten()
}

/// Spells arbitrary bytes in the alphabet.
pub(crate) fn encode_bytes(bytes: &[u8]) -> String {
    bytes.iter().map(|&b| byte_to_char(b)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_every_byte() {
        for b in 0..=255u8 {
            assert_eq!(char_to_byte(byte_to_char(b)), Some(b));
        }
        assert_eq!(byte_to_char(b' '), 'Ġ');
        assert_eq!(byte_to_char(b'\n'), 'Ċ');
        assert_eq!(byte_to_char(b'a'), 'a');
        assert_eq!(char_to_byte('中'), None);
    }
}
