//! Decoding a unit of a packed row: the share of one block that one thread of a decode-shaped
//! contraction reads per step, from whole u32 words. The block's scales are decoded once per
//! unit and every element of the unit from words already loaded, where [`decode_element`]
//! re-reads a byte (and the scales) per element.
//!
//! A unit is a list of groups of elements. In the symmetric formats (Q4_0, Q5_0, Q8_0, IQ4_NL,
//! IQ4_XS, Q6_K, MXFP4: `y = scale * code`) a group is the elements of one (sub-)block scale, and
//! carries the scale as its factor: each element is only its code as an exact f32, so a reader
//! can multiply a group's dot product by the scale once instead of every element by it. The
//! product `scale * element` in f32 is the oracle's value bit for bit (one multiply of the same
//! two numbers), which the tests check; a reader summing `x * code` first reassociates. In the
//! affine formats (Q4_1, Q5_1, Q4_K, Q5_K: `y = scale * code + bias`) a group also carries its
//! bias, and `scale * element + bias` in f32 is the oracle's value bit for bit. The other
//! formats (decoded element by element) are one group without a factor, each element the same
//! f32 expression, on the same operands in the same order, as [`decode_element`] builds for
//! it, bit for bit the oracle's (`poot_formats::decode_block_row`).
//! Formats without a word decoder here decode their unit element by element through
//! [`decode_in_block`], which is still exact.
//!
//! Blocks of most formats start at a multiple of 4 bytes (their size is, and so is every row of
//! whole blocks). Q4_0, Q5_0, Q8_0, IQ4_NL and Q6_K blocks have an even size that is not: a
//! field of theirs at an even byte is read as a window of words shifted by the half-word the
//! block is off by, decided per block at run time. MXFP4's 17-byte blocks start at any byte:
//! its fields are read as windows shifted by the bytes the start is off a word.
//!
//! [`decode_element`]: super::dequant::decode_element

use std::collections::HashMap;

use poot_formats::BlockFormat;

use super::dequant::{DequantError, FormatTable, FormatTables, decode_in_block, e8m0_half_bits};
use poot_kernel::build::{
    KernelBuilder, cast, cmp, load, load_half, min, mul_add, select, u32c, un,
};
use poot_kernel::ir::{CmpOp, Expr, Half, ParamId, Ty, UnOp};

/// Elements every unit of a word-decoded format holds, but Q4_K's and Q6_K's 32.
const UNIT_ELEMS: u32 = 16;

/// Units per block of `format`: a power of two.
pub fn units_per_block(format: BlockFormat) -> u32 {
    match format {
        BlockFormat::Q4_K | BlockFormat::Q6_K => 8,
        _ => format.block_elems() as u32 / UNIT_ELEMS,
    }
}

/// The aligned run of a row's elements that each unit of `format` stays within: unit `sub` of a
/// block holds elements of window `sub / units_per_window` only, counted from the block's
/// first element in windows of this many. A block of 32 elements for the 32-element formats, a
/// 64-element chunk for Q4_K and Q5_K, a 128-element half for Q6_K, a 32-element sub-block for
/// IQ4_XS, and the unit's own 16 elements where it decodes element by element.
pub fn unit_window(format: BlockFormat) -> u32 {
    match format {
        BlockFormat::Q4_0
        | BlockFormat::IQ4_NL
        | BlockFormat::Q4_1
        | BlockFormat::Q5_0
        | BlockFormat::Q5_1
        | BlockFormat::Q8_0
        | BlockFormat::IQ4_XS
        | BlockFormat::MXFP4 => 32,
        BlockFormat::Q4_K | BlockFormat::Q5_K => 64,
        BlockFormat::Q6_K => 128,
        _ => UNIT_ELEMS,
    }
}

/// Units of `format` in each of its windows ([`unit_window`]).
pub fn units_per_window(format: BlockFormat) -> u32 {
    units_per_block(format) * unit_window(format) / format.block_elems() as u32
}

/// Stored bytes per unit of `format`, on average (the block's bytes over its units).
pub fn unit_bytes(format: BlockFormat) -> u32 {
    (format.block_bytes() as u32).div_ceil(units_per_block(format))
}

/// One decoded unit: for each `(offset, value)` of each group's `elements`, element
/// `first + offset` of the block has value `scale * value` (f32), or `value` where the group has
/// no scale. Offsets are constants and never carry `first` across a multiple of 32:
/// `(first + offset) / 32 = first / 32 + offset / 32` for every element, so a reader can pad
/// its own copy of the row every 32 elements at the cost of one shift per unit. And `first` is a
/// multiple of 8 and the offsets are whole runs of 8 from multiples of 8, so a reader can store
/// a unit 8 elements at a time at aligned places.
pub struct Unit {
    pub first: Expr,
    pub groups: Vec<Group>,
}

/// Elements of a unit that share a factor (f32), if any, and a term added after it.
pub struct Group {
    pub scale: Option<Expr>,
    /// Only with a scale: each element's value is `scale * e + bias`, in that order (two
    /// roundings, as the oracle decodes the affine formats), so a reader can add
    /// `scale * dot(x, e) + bias * sum(x)` per group instead of decoding every element.
    pub bias: Option<Expr>,
    pub elements: Vec<(u32, Expr)>,
}

impl Group {
    /// Elements whose values are their expressions.
    pub fn plain(elements: Vec<(u32, Expr)>) -> Group {
        Group {
            scale: None,
            bias: None,
            elements,
        }
    }

    /// Elements whose values are `scale` times their expressions.
    pub fn scaled(scale: Expr, elements: Vec<(u32, Expr)>) -> Group {
        Group {
            scale: Some(scale),
            bias: None,
            elements,
        }
    }

    /// Elements whose values are `scale` times their expressions plus `bias`.
    pub fn affine(scale: Expr, bias: Expr, elements: Vec<(u32, Expr)>) -> Group {
        Group {
            scale: Some(scale),
            bias: Some(bias),
            elements,
        }
    }
}

/// Where a unit's loads land: in variables declared where the unit is decoded
/// ([`DirectLoads`]), or in ones a reader filled earlier (a tiled kernel issues the next
/// slice's loads before it multiplies the current one, and decodes them after).
pub trait UnitLoads {
    /// A variable of type `ty` holding `value`, a load.
    fn load(&mut self, kb: &mut KernelBuilder, ty: Ty, value: Expr) -> Expr;
    /// Words `index..index + n` of u32 buffer `buf`, in one wide load
    /// ([`KernelBuilder::let_words`]).
    fn load_words(
        &mut self,
        kb: &mut KernelBuilder,
        buf: ParamId,
        index: Expr,
        n: u32,
    ) -> Vec<Expr>;
}

/// Loads emitted where the unit is decoded.
pub struct DirectLoads;

impl UnitLoads for DirectLoads {
    fn load(&mut self, kb: &mut KernelBuilder, ty: Ty, value: Expr) -> Expr {
        kb.let_(ty, value)
    }

    fn load_words(
        &mut self,
        kb: &mut KernelBuilder,
        buf: ParamId,
        index: Expr,
        n: u32,
    ) -> Vec<Expr> {
        kb.let_words(buf, index, n)
    }
}

/// Where the unit's words are read from.
struct Src<'a> {
    kb: &'a mut KernelBuilder,
    loads: &'a mut dyn UnitLoads,
    weights: ParamId,
    /// The block's first byte (a variable).
    base: Expr,
    /// The weights buffer's last word: no load reaches past it.
    last_word: u32,
}

impl Src<'_> {
    /// The aligned word at byte `offset` of a 4-byte-aligned block.
    fn word(&mut self, offset: Expr) -> Expr {
        let at = (self.base.clone() + offset) >> u32c(2);
        self.loads.load(self.kb, Ty::U32, load(self.weights, at))
    }

    /// Words `index..index + n` of the weights, in one wide load.
    fn words(&mut self, index: Expr, n: u32) -> Vec<Expr> {
        self.loads.load_words(self.kb, self.weights, index, n)
    }

    /// `n` consecutive u32 values at even byte `offset` of a 2-byte-aligned block: `n + 1`
    /// words, each value funnelled from two when the bytes start mid-word.
    fn window(&mut self, offset: Expr, n: u32) -> Vec<Expr> {
        let at = self.kb.let_(Ty::U32, self.base.clone() + offset);
        let first = self.kb.let_(Ty::U32, at.clone() >> u32c(2));
        let odd = self
            .kb
            .let_(Ty::Bool, cmp(CmpOp::Ne, at & u32c(2), u32c(0)));
        let raw: Vec<Expr> = (0..=n)
            .map(|j| {
                let index = first.clone() + u32c(j);
                // The last word is read only when the bytes start mid-word, and is then in
                // bounds; clamped, the aligned case never reads past the buffer.
                let index = if j == n {
                    min(index, u32c(self.last_word))
                } else {
                    index
                };
                self.loads.load(self.kb, Ty::U32, load(self.weights, index))
            })
            .collect();
        (0..n as usize)
            .map(|j| {
                let shifted = (raw[j].clone() >> u32c(16)) | (raw[j + 1].clone() << u32c(16));
                self.kb
                    .let_(Ty::U32, select(odd.clone(), shifted, raw[j].clone()))
            })
            .collect()
    }

    /// `n` consecutive u32 values at any byte `offset` of a block at any byte: `n + 1` words
    /// (the last clamped to the buffer; it is read only when the start is off a word, and is
    /// then in bounds), each value funnelled from two.
    fn byte_window(&mut self, offset: Expr, n: u32) -> Vec<Expr> {
        let at = self.kb.let_(Ty::U32, self.base.clone() + offset);
        let first = self.kb.let_(Ty::U32, at.clone() >> u32c(2));
        let shift = self.kb.let_(Ty::U32, (at & u32c(3)) << u32c(3));
        let raw: Vec<Expr> = (0..=n)
            .map(|j| {
                let index = min(first.clone() + u32c(j), u32c(self.last_word));
                self.loads.load(self.kb, Ty::U32, load(self.weights, index))
            })
            .collect();
        // The next word's share, shifted in two steps so that no shift reaches 32: with the
        // start on a word, all of it is shifted out.
        let back = self.kb.let_(Ty::U32, u32c(31) - shift.clone());
        (0..n as usize)
            .map(|j| {
                let next = (raw[j + 1].clone() << back.clone()) << u32c(1);
                self.kb
                    .let_(Ty::U32, (raw[j].clone() >> shift.clone()) | next)
            })
            .collect()
    }

    /// The byte at `offset` of a block at any byte.
    fn byte(&mut self, offset: Expr) -> Expr {
        let at = self.kb.let_(Ty::U32, self.base.clone() + offset);
        let word = self
            .loads
            .load(self.kb, Ty::U32, load(self.weights, at.clone() >> u32c(2)));
        (word >> ((at & u32c(3)) << u32c(3))) & u32c(0xff)
    }

    /// The f16 at even byte `offset` of the block, as f32.
    fn f16(&mut self, offset: Expr) -> Expr {
        let at = (self.base.clone() + offset) >> u32c(1);
        self.loads
            .load(self.kb, Ty::F32, load_half(self.weights, at, Half::F16))
    }
}

fn c(v: u32) -> Expr {
    u32c(v)
}

fn f32_of(e: Expr) -> Expr {
    cast(Ty::F32, e)
}

fn i32_of(e: Expr) -> Expr {
    cast(Ty::I32, e)
}

/// Bits `shift..shift + width` of `word` (`shift + width <= 32`).
fn bits(word: &Expr, shift: Expr, width: u32) -> Expr {
    (word.clone() >> shift) & c((1 << width) - 1)
}

/// `code - offset` as an exact f32, for `code` a u32 below 2^23 and `offset` below 2^22: the
/// bits `0x4b000000 | code` are the f32 `2^23 + code`, and subtracting `2^23 + offset` (exact)
/// leaves the difference exactly. One bitwise or (which merges with the mask that extracts the
/// code) and one add, where a conversion instruction issues at a fraction of the rate.
fn code_minus(code: Expr, offset: u32) -> Expr {
    un(UnOp::BitsToF32, code | c(0x4b00_0000)) - Expr::F32((8_388_608 + offset) as f32)
}

/// `code - offset` as an exact f32 for a code already in place: `bits` holds it at bit `shift`
/// (`shift + width <= 23`) and nothing else. The code stays where it is, under the exponent
/// bits of 2^23 (one bitwise or, which merges with the mask that isolated it), and one
/// multiply-add scales it down and offsets it: `(2^23 + code 2^shift) 2^-shift` is exact and
/// so is the subtraction, whether or not the backend fuses them. One logic instruction a code
/// where a shift would cost a second (the decode contractions issue little else).
fn placed_code(bits: Expr, shift: u32, offset: u32) -> Expr {
    placed(bits | c(MAGIC), shift, offset)
}

/// The exponent bits of 2^23.
const MAGIC: u32 = 0x4b00_0000;

/// [`placed_code`] of bits already under the exponent bits of 2^23.
fn placed(magic_bits: Expr, shift: u32, offset: u32) -> Expr {
    let scale = Expr::F32(1.0 / (1u32 << shift) as f32);
    let top = (1u32 << (23 - shift)) + offset;
    mul_add(
        un(UnOp::BitsToF32, magic_bits),
        scale,
        Expr::F32(-(top as f32)),
    )
}

/// The i8 in byte `shift / 8` of `word` as an exact f32, in place ([`placed_code`]): the byte
/// with its top bit flipped is the i8 plus 128, and the flip merges with the exponent bits.
fn placed_i8(word: &Expr, shift: u32) -> Expr {
    let biased = (word.clone() & c(0xff << shift)) ^ c(MAGIC | (0x80 << shift));
    placed(biased, shift, 128)
}

/// A code word and its top half shifted down, so each field of it can be read in place below
/// bit 23 ([`placed_code`]): one shift per word instead of one per field.
struct WordViews {
    low: Expr,
    high: Expr,
}

impl WordViews {
    fn new(kb: &mut KernelBuilder, word: &Expr) -> WordViews {
        WordViews {
            low: word.clone(),
            high: kb.let_(Ty::U32, word.clone() >> c(16)),
        }
    }

    /// The view holding bits `shift..shift + width` of the word below bit 23 (the word itself
    /// where they already are), and their place in it.
    fn at(&self, shift: u32, width: u32) -> (&Expr, u32) {
        if shift + width <= 23 {
            (&self.low, shift)
        } else {
            (&self.high, shift - 16)
        }
    }
}

/// The nibbles of code words as exact f32s `code - offset`: `[t][high][e]` is nibble `high` of
/// byte `e` of word `t`.
fn nibble_values(kb: &mut KernelBuilder, words: &[Expr], offset: u32) -> Vec<[[Expr; 4]; 2]> {
    words
        .iter()
        .map(|word| {
            let views = WordViews::new(kb, word);
            [0u32, 1].map(|high| {
                [0u32, 1, 2, 3].map(|e| {
                    let (view, at) = views.at(8 * e + 4 * high, 4);
                    placed_code(view.clone() & c(0xf << at), at, offset)
                })
            })
        })
        .collect()
}

/// [`nibble_values`] at the offsets of [`split_nibbles`].
fn split_nibble_values(kb: &mut KernelBuilder, words: &[Expr], offset: u32) -> Vec<(u32, Expr)> {
    let mut out = Vec::with_capacity(8 * words.len());
    for (t, values) in nibble_values(kb, words, offset).into_iter().enumerate() {
        for (high, bytes) in values.into_iter().enumerate() {
            for (e, value) in bytes.into_iter().enumerate() {
                out.push((4 * t as u32 + e as u32 + 16 * high as u32, value));
            }
        }
    }
    out
}

/// A level of `kvalues` (a table of f32 bit patterns) at `index`.
fn level(kvalues: ParamId, index: Expr) -> Expr {
    un(UnOp::BitsToF32, load(kvalues, index))
}

/// Decodes unit `sub` (u32, below [`units_per_block`]) of the block of `format` whose first
/// byte is `base` (a u32 variable, even but for MXFP4) in `weights`, whose last word is
/// `last_word`. Emits the unit's word loads into `kb` as variables, loads first, and returns
/// its elements, whose values are expressions over those variables.
pub fn decode_unit(
    kb: &mut KernelBuilder,
    format: BlockFormat,
    weights: ParamId,
    tables: &FormatTables,
    base: Expr,
    sub: Expr,
    last_word: u32,
) -> Result<Unit, DequantError> {
    let at = (weights, base, sub, last_word);
    decode_unit_with(kb, &mut DirectLoads, format, tables, at)
}

/// [`decode_unit`] with its word loads placed by `loads`: they are the same loads in the same
/// order on every call for the same format, so a reader can issue them ahead of the decoding.
/// (Formats decoded element by element read their bytes where they are decoded.)
pub fn decode_unit_with(
    kb: &mut KernelBuilder,
    loads: &mut dyn UnitLoads,
    format: BlockFormat,
    tables: &FormatTables,
    (weights, base, sub, last_word): (ParamId, Expr, Expr, u32),
) -> Result<Unit, DequantError> {
    let table = |table: FormatTable| {
        tables
            .get(table)
            .ok_or(DequantError::MissingTable { format, table })
    };
    let mut s = Src {
        kb,
        loads,
        weights,
        base,
        last_word,
    };
    Ok(match format {
        BlockFormat::Q4_0 => nibbles_32(&mut s, sub, Legacy::Q4_0),
        BlockFormat::IQ4_NL => nibbles_32(
            &mut s,
            sub,
            Legacy::Iq4Nl(table(FormatTable::KvaluesIq4nl)?),
        ),
        BlockFormat::Q4_1 => q4_1(&mut s, sub),
        BlockFormat::Q5_0 => q5_0(&mut s, sub),
        BlockFormat::Q5_1 => q5_1(&mut s, sub),
        BlockFormat::Q8_0 => q8_0(&mut s, sub),
        BlockFormat::Q4_K => q4_k(&mut s, sub),
        BlockFormat::Q5_K => q5_k(&mut s, sub),
        BlockFormat::Q6_K => q6_k(&mut s, sub),
        BlockFormat::IQ4_XS => iq4_xs(&mut s, sub, table(FormatTable::KvaluesIq4nl)?),
        BlockFormat::MXFP4 => mxfp4(&mut s, sub),
        BlockFormat::Q2_K
        | BlockFormat::Q3_K
        | BlockFormat::IQ2_XS
        | BlockFormat::IQ3_XXS
        | BlockFormat::IQ3_S => decode_by_element(s.kb, format, weights, tables, s.base, sub)?,
    })
}

/// Unit `sub` of the block of `format` at byte `base` decoded element by element: each of its
/// [`UNIT_ELEMS`] consecutive elements reads its own bytes where it is decoded. The formats
/// without a word decoder take this form; so does MXFP4 where a reader holds a unit's values
/// for many rows at once (its word decoder's values would then stay live in registers).
pub fn decode_by_element(
    kb: &mut KernelBuilder,
    format: BlockFormat,
    weights: ParamId,
    tables: &FormatTables,
    base: Expr,
    sub: Expr,
) -> Result<Unit, DequantError> {
    let first = kb.let_(Ty::U32, sub << c(UNIT_ELEMS.trailing_zeros()));
    let mut elements = Vec::with_capacity(UNIT_ELEMS as usize);
    for i in 0..UNIT_ELEMS {
        let j = first.clone() + c(i);
        elements.push((
            i,
            decode_in_block(format, weights, tables, base.clone(), j)?,
        ));
    }
    Ok(Unit {
        first,
        groups: vec![Group::plain(elements)],
    })
}

/// The 32-element formats whose 16 code bytes hold element `i` in the low nibble of byte `i`
/// and element `i + 16` in its high nibble, after an f16 scale.
enum Legacy {
    /// ggml: `y = (q - 8) * d`.
    Q4_0,
    /// ggml: `y = d * kvalues[q]`.
    Iq4Nl(ParamId),
}

/// The 4-bit codes of words of nibble-split code bytes (two words: bytes `first..first + 8`;
/// four: a whole block's 16): offset `4 t + e` (low nibble of byte `e` of word `t`) and 16
/// further (its high nibble).
fn split_nibbles(q: &[Expr]) -> Vec<(u32, Expr)> {
    let mut out = Vec::with_capacity(16);
    for (t, word) in q.iter().enumerate() {
        for e in 0..4u32 {
            for high in [0u32, 1] {
                let code = bits(word, c(8 * e + 4 * high), 4);
                out.push((4 * t as u32 + e + 16 * high, code));
            }
        }
    }
    out
}

/// Q4_0 or IQ4_NL (18-byte blocks): unit `sub` is code bytes `8 sub..8 sub + 8`, one group
/// of scale `d`.
fn nibbles_32(s: &mut Src, sub: Expr, kind: Legacy) -> Unit {
    let d = s.f16(c(0));
    let first = s.kb.let_(Ty::U32, sub << c(3));
    let q = s.window(c(2) + first.clone(), 2);
    let elements = legacy_values(s.kb, &kind, &q);
    Unit {
        first,
        groups: vec![Group::scaled(d, elements)],
    }
}

/// The 18-byte formats whose blocks a row can read whole ([`decode_whole`]), or in consecutive
/// pairs as nine whole words ([`decode_pair`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PairFormat {
    Q4_0,
    Iq4Nl,
}

impl PairFormat {
    /// The pair format of `format`, if it has one.
    pub fn of(format: BlockFormat) -> Option<PairFormat> {
        match format {
            BlockFormat::Q4_0 => Some(PairFormat::Q4_0),
            BlockFormat::IQ4_NL => Some(PairFormat::Iq4Nl),
            _ => None,
        }
    }

    pub fn block_format(self) -> BlockFormat {
        match self {
            PairFormat::Q4_0 => BlockFormat::Q4_0,
            PairFormat::Iq4Nl => BlockFormat::IQ4_NL,
        }
    }

    fn legacy(self, tables: &FormatTables) -> Result<Legacy, DequantError> {
        Ok(match self {
            PairFormat::Q4_0 => Legacy::Q4_0,
            PairFormat::Iq4Nl => {
                let table = FormatTable::KvaluesIq4nl;
                let kv = tables.get(table).ok_or(DequantError::MissingTable {
                    format: self.block_format(),
                    table,
                })?;
                Legacy::Iq4Nl(kv)
            }
        })
    }
}

/// Decodes the whole block of `pair`'s format whose first byte is `base` (a u32 variable, even)
/// in `weights`, whose last word is `last_word`: one group of scale `d` over its 32 elements,
/// from one window of four half-word-shifted words. Half the address work and scale loads of
/// two 16-element units, for twice the registers.
pub fn decode_whole(
    kb: &mut KernelBuilder,
    pair: PairFormat,
    weights: ParamId,
    tables: &FormatTables,
    base: Expr,
    last_word: u32,
) -> Result<Unit, DequantError> {
    let kind = pair.legacy(tables)?;
    let mut s = Src {
        kb,
        loads: &mut DirectLoads,
        weights,
        base,
        last_word,
    };
    let d = s.f16(c(0));
    let q = s.window(c(2), 4);
    let elements = legacy_values(s.kb, &kind, &q);
    Ok(Unit {
        first: c(0),
        groups: vec![Group::scaled(d, elements)],
    })
}

/// Decodes the two consecutive blocks of `pair`'s format whose first byte is `base` (a u32
/// variable, a multiple of 4) in `weights`: 36 bytes, nine whole words, where a unit of one
/// block reads a window of half-word-shifted words chosen at run time. Elements `0..32` are
/// the first block's (one group of scale `d0`, the low half of word 0, its codes the words
/// shifted by a half), `32..64` the second's (scale `d1`, the high half of word 4, its codes
/// words 5..9 as they are).
pub fn decode_pair(
    kb: &mut KernelBuilder,
    pair: PairFormat,
    weights: ParamId,
    tables: &FormatTables,
    base: Expr,
) -> Result<Unit, DequantError> {
    let kind = pair.legacy(tables)?;
    let first_word = kb.let_(Ty::U32, base >> c(2));
    let w: Vec<Expr> = (0..9)
        .map(|j| kb.let_(Ty::U32, load(weights, first_word.clone() + c(j))))
        .collect();
    let d0 = kb.let_(Ty::F32, un(UnOp::F16ToF32, w[0].clone()));
    let d1 = kb.let_(Ty::F32, un(UnOp::F16ToF32, w[4].clone() >> c(16)));
    let q0: Vec<Expr> = (0..4)
        .map(|j| {
            kb.let_(
                Ty::U32,
                (w[j].clone() >> c(16)) | (w[j + 1].clone() << c(16)),
            )
        })
        .collect();
    let second = legacy_values(kb, &kind, &w[5..9])
        .into_iter()
        .map(|(off, value)| (off + 32, value))
        .collect();
    let groups = vec![
        Group::scaled(d0, legacy_values(kb, &kind, &q0)),
        Group::scaled(d1, second),
    ];
    Ok(Unit {
        first: c(0),
        groups,
    })
}

/// The values before their block's scale of the legacy 4-bit codes in `words`, at the offsets
/// of [`split_nibbles`].
fn legacy_values(kb: &mut KernelBuilder, kind: &Legacy, words: &[Expr]) -> Vec<(u32, Expr)> {
    match kind {
        Legacy::Q4_0 => split_nibble_values(kb, words, 8),
        Legacy::Iq4Nl(kv) => split_nibbles(words)
            .into_iter()
            .map(|(off, code)| (off, level(*kv, code)))
            .collect(),
    }
}

/// MXFP4 (17 bytes: an E8M0 scale byte, then 16 code bytes laid out as Q4_0's): unit `sub`
/// is code bytes `8 sub..8 sub + 8`, one group of ggml's scale `GGML_E8M0_TO_FP32_HALF(e)`
/// (bits `0x00200000 << e` for `e < 2`, else `(e - 1) << 23`) over the doubled E2M1 levels
/// (`kvalues_mxfp4`: 0, 1, 2, 3, 4, 6, 8, 12 and their negatives) computed from each code's
/// bits, not read from the table: `2^e (1 + m / 2)` for exponent field `e > 0` and mantissa
/// bit `m`, else `m`, with the sign bit; code 8 is +0 as the table's 0 is.
fn mxfp4(s: &mut Src, sub: Expr) -> Unit {
    let e = s.byte(c(0));
    let e = s.kb.let_(Ty::U32, e);
    let d = s.kb.let_(Ty::F32, un(UnOp::BitsToF32, e8m0_half_bits(e)));
    let first = s.kb.let_(Ty::U32, sub << c(3));
    let q = s.byte_window(c(1) + first.clone(), 2);
    let elements = split_nibbles(&q)
        .into_iter()
        .map(|(off, code)| {
            let code = s.kb.let_(Ty::U32, code);
            let exp = (code.clone() >> c(1)) & c(3);
            let m = code.clone() & c(1);
            let normal = ((exp.clone() + c(127)) << c(23)) | (m.clone() << c(22));
            let small = select(cmp(CmpOp::Eq, m, c(1)), c(0x3f80_0000), c(0));
            let magnitude = select(cmp(CmpOp::Eq, exp, c(0)), small, normal);
            let sign = (code.clone() & c(8)) << c(28);
            let bits = select(cmp(CmpOp::Eq, code & c(7), c(0)), c(0), magnitude | sign);
            (off, un(UnOp::BitsToF32, bits))
        })
        .collect();
    Unit {
        first,
        groups: vec![Group::scaled(d, elements)],
    }
}

/// Q4_1 (20 bytes: d, m, 16 code bytes): `y = q * d + m`.
fn q4_1(s: &mut Src, sub: Expr) -> Unit {
    let (d, m) = (s.f16(c(0)), s.f16(c(2)));
    let first = s.kb.let_(Ty::U32, sub << c(3));
    let q = [s.word(c(4) + first.clone()), s.word(c(8) + first.clone())];
    let elements = split_nibble_values(s.kb, &q, 0);
    Unit {
        first,
        groups: vec![Group::affine(d, m, elements)],
    }
}

/// The 5-bit codes of a Q5 unit: the nibble, and bit `j` of `qh` for element `j` as the fifth.
fn q5_codes(s: &mut Src, qh: &Expr, q: &[Expr], first: &Expr) -> Vec<(u32, Expr)> {
    // Bit first + off for every offset (below 24, first below 16): one shift per unit.
    let qh = s.kb.let_(Ty::U32, qh.clone() >> first.clone());
    split_nibbles(q)
        .into_iter()
        .map(|(off, low)| {
            let fifth = bits(&qh, c(off), 1);
            (off, low | (fifth << c(4)))
        })
        .collect()
}

/// Q5_0 (22 bytes: d, qh, 16 code bytes): `y = (q - 16) * d`, one group of scale `d`.
fn q5_0(s: &mut Src, sub: Expr) -> Unit {
    let d = s.f16(c(0));
    let qh = s.window(c(2), 1).remove(0);
    let first = s.kb.let_(Ty::U32, sub << c(3));
    let q = s.window(c(6) + first.clone(), 2);
    let elements = q5_codes(s, &qh, &q, &first)
        .into_iter()
        .map(|(off, code)| (off, code_minus(code, 16)))
        .collect();
    Unit {
        first,
        groups: vec![Group::scaled(d, elements)],
    }
}

/// Q5_1 (24 bytes: d, m, qh, 16 code bytes): `y = q * d + m`.
fn q5_1(s: &mut Src, sub: Expr) -> Unit {
    let (d, m) = (s.f16(c(0)), s.f16(c(2)));
    let qh = s.word(c(4));
    let first = s.kb.let_(Ty::U32, sub << c(3));
    let q = [s.word(c(8) + first.clone()), s.word(c(12) + first.clone())];
    let elements = q5_codes(s, &qh, &q, &first)
        .into_iter()
        .map(|(off, code)| (off, f32_of(code)))
        .collect();
    Unit {
        first,
        groups: vec![Group::affine(d, m, elements)],
    }
}

/// Q8_0 (34 bytes: d, 32 signed code bytes): `y = q * d`; unit `sub` is codes `16 sub..`, one
/// group of scale `d`.
fn q8_0(s: &mut Src, sub: Expr) -> Unit {
    let d = s.f16(c(0));
    let first = s.kb.let_(Ty::U32, sub << c(4));
    let q = s.window(c(2) + first.clone(), 4);
    let mut elements = Vec::with_capacity(16);
    for (t, word) in q.iter().enumerate() {
        let views = WordViews::new(s.kb, word);
        for e in 0..4u32 {
            let (view, at) = views.at(8 * e, 8);
            elements.push((4 * t as u32 + e, placed_i8(view, at)));
        }
    }
    Unit {
        first,
        groups: vec![Group::scaled(d, elements)],
    }
}

/// ggml's `get_scale_min_k4` for sub-blocks `2 chunk + h` (h = 0, 1) from the three scale words
/// `w` (block bytes 4..16) and the block's `d` and `dmin`: `(d * sc, dmin * m)` each. The 6-bit
/// values of all eight sub-blocks are assembled four to a word, a byte each (sub-blocks 0..4
/// read bytes 4..12 directly; 4..8 combine bytes 8..16 with the top bits of bytes 4..12), so a
/// unit spends a few logic instructions on its two pairs where per-value bit fields cost
/// dozens; each value then becomes an exact f32 in place ([`placed_code`]).
fn k4_scales(
    kb: &mut KernelBuilder,
    d: &Expr,
    dmin: &Expr,
    w: &[Expr; 3],
    chunk: &Expr,
) -> [(Expr, Expr); 2] {
    let low6 = c(0x3f3f_3f3f);
    let top2 = |word: &Expr| (word.clone() >> c(2)) & c(0x3030_3030);
    let first = kb.let_(Ty::Bool, cmp(CmpOp::Lt, chunk.clone(), c(2)));
    let sc = select(
        first.clone(),
        w[0].clone() & low6.clone(),
        (w[2].clone() & c(0x0f0f_0f0f)) | top2(&w[0]),
    );
    let m = select(
        first,
        w[1].clone() & low6,
        ((w[2].clone() >> c(4)) & c(0x0f0f_0f0f)) | top2(&w[1]),
    );
    // Bytes 2 (chunk % 2) and the next hold the unit's two sub-blocks.
    let shift = kb.let_(Ty::U32, (chunk.clone() & c(1)) << c(4));
    let sc = kb.let_(Ty::U32, sc >> shift.clone());
    let m = kb.let_(Ty::U32, m >> shift);
    [0u32, 1].map(|h| {
        let byte = |word: &Expr| placed_code(word.clone() & c(0xff << (8 * h)), 8 * h, 0);
        let dl = kb.let_(Ty::F32, d.clone() * byte(&sc));
        let ml = kb.let_(Ty::F32, dmin.clone() * byte(&m));
        (dl, ml)
    })
}

/// Q4_K (144 bytes: d, dmin, 12 scale bytes, 128 code bytes): `y = (d * sc) * q - dmin * m`.
/// Unit `sub` is code bytes `16 sub..16 sub + 16`, which are bytes `l0..l0 + 16` (l0 = 16
/// (sub % 2)) of 64-element chunk `sub / 2`: low nibbles are elements `64 chunk + l0 + i`
/// (sub-block `2 chunk`), high ones 32 further. Rows of whole blocks keep every block 16-byte
/// aligned, so the unit is two 16-byte loads: the block's head (d, dmin and every scale) and
/// its codes.
fn q4_k(s: &mut Src, sub: Expr) -> Unit {
    let chunk = s.kb.let_(Ty::U32, sub.clone() >> c(1));
    let l0 = s.kb.let_(Ty::U32, (sub.clone() & c(1)) << c(4));
    let head = s.words(s.base.clone() >> c(2), 4);
    let codes = (s.base.clone() + c(16) + (sub << c(4))) >> c(2);
    let q = s.words(codes, 4);
    let d = s.kb.let_(Ty::F32, un(UnOp::F16ToF32, head[0].clone()));
    let dmin =
        s.kb.let_(Ty::F32, un(UnOp::F16ToF32, head[0].clone() >> c(16)));
    let w = [head[1].clone(), head[2].clone(), head[3].clone()];
    let scales = k4_scales(s.kb, &d, &dmin, &w, &chunk);
    let first = s.kb.let_(Ty::U32, (chunk << c(6)) + l0);
    let mut halves = [Vec::with_capacity(16), Vec::with_capacity(16)];
    for (t, values) in nibble_values(s.kb, &q, 0).into_iter().enumerate() {
        for (high, bytes) in values.into_iter().enumerate() {
            for (e, value) in bytes.into_iter().enumerate() {
                halves[high].push((4 * t as u32 + e as u32 + 32 * high as u32, value));
            }
        }
    }
    // `(d * sc) * q - dmin * m` is `(d * sc) * q + -(dmin * m)`, bit for bit.
    let [low, high] = halves;
    let groups = scales
        .into_iter()
        .zip([low, high])
        .map(|((dl, ml), elements)| Group::affine(dl, un(UnOp::Neg, ml), elements))
        .collect();
    Unit { first, groups }
}

/// Q5_K (176 bytes): `y = (d * sc) * q - dmin * m`. Unit `sub` is code bytes `l0..l0 + 8`
/// (l0 = 8 (sub % 4)) of 64-element chunk `sub / 4`: low nibbles are elements
/// `64 chunk + l0 + i` (sub-block `2 chunk`), high ones 32 further. The fifth bit of element
/// `j` is bit `j / 32` of `qh` byte `j % 32`.
fn q5_k(s: &mut Src, sub: Expr) -> Unit {
    let chunk = s.kb.let_(Ty::U32, sub.clone() >> c(2));
    let l0 = s.kb.let_(Ty::U32, (sub.clone() & c(3)) << c(3));
    // Code bytes 32 chunk + l0 = 8 sub.
    let q = [
        s.word(c(48) + (sub.clone() << c(3))),
        s.word(c(52) + (sub << c(3))),
    ];
    // The fifth bits' words, shifted to bit 2 chunk (the low nibbles'): one shift per word.
    let qh = [s.word(c(16) + l0.clone()), s.word(c(20) + l0.clone())]
        .map(|w| s.kb.let_(Ty::U32, w >> (chunk.clone() << c(1))));
    let (d, dmin) = (s.f16(c(0)), s.f16(c(2)));
    let w = [s.word(c(4)), s.word(c(8)), s.word(c(12))];
    let scales = k4_scales(s.kb, &d, &dmin, &w, &chunk);
    let first = s.kb.let_(Ty::U32, (chunk.clone() << c(6)) + l0);
    let groups = scales
        .into_iter()
        .zip(0u32..)
        .map(|((dl, ml), high)| {
            let mut elements = Vec::with_capacity(8);
            for (t, word) in q.iter().enumerate() {
                for e in 0..4u32 {
                    let code = bits(word, c(8 * e + 4 * high), 4)
                        + (bits(&qh[t], c(8 * e + high), 1) << c(4));
                    elements.push((4 * t as u32 + e + 32 * high, f32_of(code)));
                }
            }
            // `(d * sc) * q - dmin * m` is `(d * sc) * q + -(dmin * m)`, bit for bit.
            Group::affine(dl, un(UnOp::Neg, ml), elements)
        })
        .collect();
    Unit { first, groups }
}

/// Q6_K (210 bytes: ql[128], qh[64], scales[16], d): `y = (d * sc) * (q - 32)`. Unit `sub` is
/// half `n = sub / 4` at `l = l0..l0 + 8` (l0 = 8 (sub % 4)) in each quarter `g` = 0..4:
/// element `128 n + 32 g + l`, low bits nibble `g / 2` of `ql[64 n + 32 (g % 2) + l]`, high
/// bits `2 g` of `qh[32 n + l]`, scale `scales[8 n + l / 16 + 2 g]`: four groups of eight, one
/// per quarter, of scale `d * sc`.
fn q6_k(s: &mut Src, sub: Expr) -> Unit {
    let n = s.kb.let_(Ty::U32, sub.clone() >> c(2));
    let l0 = s.kb.let_(Ty::U32, (sub & c(3)) << c(3));
    let ql_at = s.kb.let_(Ty::U32, (n.clone() << c(6)) + l0.clone());
    let ql = [s.window(ql_at.clone(), 2), s.window(ql_at + c(32), 2)];
    let qh = s.window(c(128) + (n.clone() << c(5)) + l0.clone(), 2);
    let sc = s.window(c(192) + (n.clone() << c(3)), 2);
    let d = s.f16(c(208));
    // Scale byte l0 / 16 + 2 g of the half's eight: word g / 2, byte (l0 / 16) + 2 (g % 2). Each
    // word is shifted by the first term once, so the scales sit at fixed places.
    let half = s.kb.let_(Ty::U32, (l0.clone() >> c(4)) << c(3));
    let scales: Vec<WordViews> = sc
        .iter()
        .map(|w| {
            let shifted = s.kb.let_(Ty::U32, w.clone() >> half.clone());
            WordViews::new(s.kb, &shifted)
        })
        .collect();
    let ds: Vec<Expr> = (0..4u32)
        .map(|g| {
            let (view, at) = scales[(g >> 1) as usize].at(16 * (g & 1), 8);
            s.kb.let_(Ty::F32, d.clone() * placed_i8(view, at))
        })
        .collect();
    let first = s.kb.let_(Ty::U32, (n << c(7)) + l0);
    // Each 6-bit code is assembled where its low nibble sits (below bit 18: a word's top half
    // is shifted down once), its two high bits shifted beside it: one shift per qh word and
    // distance (four of them), not three per code.
    let low_views: Vec<Vec<WordViews>> = ql
        .iter()
        .map(|words| words.iter().map(|w| WordViews::new(s.kb, w)).collect())
        .collect();
    let mut high_views: HashMap<(usize, i32), Expr> = HashMap::new();
    let groups = ds
        .into_iter()
        .zip(0..4u32)
        .map(|(dl, g)| {
            let mut elements = Vec::with_capacity(8);
            for t in 0..2usize {
                for e in 0..4u32 {
                    let (low, at) = low_views[(g & 1) as usize][t].at(8 * e + 4 * (g >> 1), 6);
                    let distance = (at + 4) as i32 - (8 * e + 2 * g) as i32;
                    let high = high_views.entry((t, distance)).or_insert_with(|| {
                        let word = qh[t].clone();
                        let moved = if distance >= 0 {
                            word << c(distance as u32)
                        } else {
                            word >> c(distance.unsigned_abs())
                        };
                        s.kb.let_(Ty::U32, moved)
                    });
                    let bits = (low.clone() & c(0xf << at)) | (high.clone() & c(0x3 << (at + 4)));
                    elements.push((32 * g + 4 * t as u32 + e, placed_code(bits, at, 32)));
                }
            }
            Group::scaled(dl, elements)
        })
        .collect();
    Unit { first, groups }
}

/// IQ4_XS (136 bytes: d, scales_h, scales_l[4], 8 sub-blocks of 16 code bytes):
/// `y = (d * (scale - 32)) * kvalues[q]`. Unit `sub` is half `sub % 2` of sub-block `sub / 2`,
/// one group of scale `d * (scale - 32)`.
fn iq4_xs(s: &mut Src, sub: Expr, kvalues: ParamId) -> Unit {
    let d = s.f16(c(0));
    let (w0, w1) = (s.word(c(0)), s.word(c(4)));
    let ib = s.kb.let_(Ty::U32, sub.clone() >> c(1));
    // The 6-bit scale: nibble ib % 2 of scales_l[ib / 2], bits 2 ib of scales_h.
    let low = bits(&w1, ib.clone() << c(2), 4);
    let high = bits(&w0, c(16) + (ib.clone() << c(1)), 2);
    let dl = s.kb.let_(
        Ty::F32,
        d * f32_of(i32_of(low | (high << c(4))) - Expr::I32(32)),
    );
    // Code bytes 16 ib + 8 (sub % 2) = 8 sub.
    let q = [
        s.word(c(8) + (sub.clone() << c(3))),
        s.word(c(12) + (sub.clone() << c(3))),
    ];
    let first = s.kb.let_(Ty::U32, (ib << c(5)) + ((sub & c(1)) << c(3)));
    let elements = split_nibbles(&q)
        .into_iter()
        .map(|(off, code)| (off, level(kvalues, code)))
        .collect();
    Unit {
        first,
        groups: vec![Group::scaled(dl, elements)],
    }
}
