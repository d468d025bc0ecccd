//! Decoding GGUF block formats inside kernels: the expression that decodes one element of a
//! packed row, so a contraction reads its weights as stored and never materializes them in f32.
//!
//! [`decode_element`] mirrors `poot_formats::decode_blocks` (itself bit-identical to ggml's
//! `dequantize_row_*`) element by element: the same f32 operations on the same operands in the
//! same order, each rounded on its own. That holds on a device only when the renderer keeps
//! every multiply and add separate (no contraction into fused multiply-add).
//!
//! Weights are a u32-word buffer read through `LoadByte` and `LoadHalf`. Every f16 field of
//! every format lies at an even byte offset of its block and every format with f16 fields has
//! even-sized blocks, so with an even `row_byte` each f16 field is one whole half of the buffer
//! and is read with `LoadHalf` (F16, exact). MXFP4 (17-byte blocks, so rows may start at odd
//! bytes) has only byte fields. Multi-byte integer fields (Q5's `qh`, IQ2_XS codes, IQ3_XXS
//! scales-and-signs) are read one byte or two at a time, only the bits an element needs.
//!
//! Codebooks (the IQ grids, `ksigns`, the IQ4_NL and MXFP4 levels) are constant u32-word buffers
//! bound as extra read-only kernel parameters: [`tables_of`] names those a format reads,
//! [`table_words`] gives their contents and [`FormatTables`] their parameters.

use poot_formats::{BlockFormat, codebooks};

use poot_kernel::build::{
    KernelBuilder, cast, eq, load, load_byte, load_half, lt, select, u32c, un,
};
use poot_kernel::ir::{Access, Expr, Half, ParamId, Ty, UnOp, Word};

/// A constant table some block formats decode through, bound as a read-only u32-word parameter.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FormatTable {
    /// `iq2xs_grid` (IQ2_XS): 512 entries of 8 byte magnitudes, 8 bytes per entry.
    Iq2xsGrid,
    /// `iq3xxs_grid` (IQ3_XXS): 256 entries of 4 byte magnitudes, one word per entry.
    Iq3xxsGrid,
    /// `iq3s_grid` (IQ3_S): 512 entries of 4 byte magnitudes, one word per entry.
    Iq3sGrid,
    /// `ksigns_iq2xs` (IQ2_XS, IQ3_XXS): 128 sign bytes, 7 stored sign bits widened to 8 with
    /// even parity.
    KsignsIq2xs,
    /// `kvalues_iq4nl` (IQ4_NL, IQ4_XS): the 16 levels, one f32 (as its bits) per word.
    KvaluesIq4nl,
    /// `kvalues_mxfp4` (MXFP4): the 16 doubled E2M1 levels, one f32 (as its bits) per word.
    KvaluesMxfp4,
}

impl FormatTable {
    pub const ALL: [FormatTable; 6] = [
        FormatTable::Iq2xsGrid,
        FormatTable::Iq3xxsGrid,
        FormatTable::Iq3sGrid,
        FormatTable::KsignsIq2xs,
        FormatTable::KvaluesIq4nl,
        FormatTable::KvaluesMxfp4,
    ];

    /// ggml's name for the table, also the name of its kernel parameter.
    pub fn name(self) -> &'static str {
        match self {
            FormatTable::Iq2xsGrid => "iq2xs_grid",
            FormatTable::Iq3xxsGrid => "iq3xxs_grid",
            FormatTable::Iq3sGrid => "iq3s_grid",
            FormatTable::KsignsIq2xs => "ksigns_iq2xs",
            FormatTable::KvaluesIq4nl => "kvalues_iq4nl",
            FormatTable::KvaluesMxfp4 => "kvalues_mxfp4",
        }
    }
}

/// The tables [`decode_element`] reads for `format`.
pub fn tables_of(format: BlockFormat) -> &'static [FormatTable] {
    match format {
        BlockFormat::Q4_0
        | BlockFormat::Q4_1
        | BlockFormat::Q5_0
        | BlockFormat::Q5_1
        | BlockFormat::Q8_0
        | BlockFormat::Q2_K
        | BlockFormat::Q3_K
        | BlockFormat::Q4_K
        | BlockFormat::Q5_K
        | BlockFormat::Q6_K => &[],
        BlockFormat::IQ2_XS => &[FormatTable::Iq2xsGrid, FormatTable::KsignsIq2xs],
        BlockFormat::IQ3_XXS => &[FormatTable::Iq3xxsGrid, FormatTable::KsignsIq2xs],
        BlockFormat::IQ3_S => &[FormatTable::Iq3sGrid],
        BlockFormat::IQ4_NL | BlockFormat::IQ4_XS => &[FormatTable::KvaluesIq4nl],
        BlockFormat::MXFP4 => &[FormatTable::KvaluesMxfp4],
    }
}

/// The contents of `table` as the decode expressions read it: byte tables packed little-endian
/// into words (read with `LoadByte`), level tables one f32 bit pattern per word (read with
/// `Load` and `BitsToF32`, the exact f32 of each i8 level).
pub fn table_words(table: FormatTable) -> Vec<u32> {
    match table {
        FormatTable::Iq2xsGrid => words_of_bytes(codebooks::IQ2XS_GRID.as_flattened()),
        FormatTable::Iq3xxsGrid => words_of_bytes(codebooks::IQ3XXS_GRID.as_flattened()),
        FormatTable::Iq3sGrid => words_of_bytes(codebooks::IQ3S_GRID.as_flattened()),
        FormatTable::KsignsIq2xs => words_of_bytes(codebooks::KSIGNS_IQ2XS),
        FormatTable::KvaluesIq4nl => codebooks::KVALUES_IQ4NL
            .iter()
            .map(|&v| f32::from(v).to_bits())
            .collect(),
        FormatTable::KvaluesMxfp4 => codebooks::KVALUES_MXFP4
            .iter()
            .map(|&v| f32::from(v).to_bits())
            .collect(),
    }
}

/// `bytes` as little-endian u32 words, the last one padded with zeros: how packed weights and
/// byte tables are laid out in a u32-word buffer for `LoadByte`.
pub fn words_of_bytes(bytes: &[u8]) -> Vec<u32> {
    bytes
        .chunks(4)
        .map(|chunk| {
            chunk
                .iter()
                .enumerate()
                .fold(0u32, |w, (i, &b)| w | (u32::from(b) << (8 * i)))
        })
        .collect()
}

/// Bytes of one row of `k` elements of `format`, or `None` when `k` is not a whole number of
/// blocks or the size overflows.
pub fn row_bytes(format: BlockFormat, k: usize) -> Option<usize> {
    format.row_bytes(k)
}

/// The parameter each bound [`FormatTable`] is read from.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FormatTables {
    params: Vec<(FormatTable, ParamId)>,
}

impl FormatTables {
    pub fn new() -> FormatTables {
        FormatTables::default()
    }

    /// Adds one read-only u32-word parameter, named for its table, for each table `format`
    /// reads; upload [`table_words`] into each.
    pub fn declare(format: BlockFormat, kernel: &mut KernelBuilder) -> FormatTables {
        let mut tables = FormatTables::new();
        for &table in tables_of(format) {
            let param = kernel.param(table.name(), Word::U32, Access::Read);
            tables.insert(table, param);
        }
        tables
    }

    /// Binds `table` to `param` (a read-only u32-word parameter holding [`table_words`]).
    pub fn insert(&mut self, table: FormatTable, param: ParamId) {
        match self.params.iter_mut().find(|(t, _)| *t == table) {
            Some(entry) => entry.1 = param,
            None => self.params.push((table, param)),
        }
    }

    pub fn get(&self, table: FormatTable) -> Option<ParamId> {
        self.params
            .iter()
            .find(|(t, _)| *t == table)
            .map(|&(_, p)| p)
    }

    /// Checks that every table `format` reads is bound.
    pub fn check(&self, format: BlockFormat) -> Result<(), DequantError> {
        match tables_of(format).iter().find(|&&t| self.get(t).is_none()) {
            Some(&table) => Err(DequantError::MissingTable { format, table }),
            None => Ok(()),
        }
    }

    /// The bound tables and their parameters, in binding order.
    pub fn iter(&self) -> impl Iterator<Item = (FormatTable, ParamId)> + '_ {
        self.params.iter().copied()
    }
}

/// A decode the planner asked for that cannot be built (a planner bug, never user input).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DequantError {
    /// The format reads a table the [`FormatTables`] do not bind: bind every table of
    /// [`tables_of`] (as [`FormatTables::declare`] does).
    #[error("{format:?} reads table `{}`, which is not bound", table.name())]
    MissingTable {
        format: BlockFormat,
        table: FormatTable,
    },
}

/// The f32 expression of element `k` (u32, 0-based within the row) of a row of `format` whose
/// first byte is at byte `row_byte` (u32) of the u32-word buffer `weights`; the row is whole
/// blocks. `row_byte` must be even for every format but MXFP4 (rows of those formats are even
/// sized, so any row of a tensor starting at an even byte is). Bit-identical to
/// `poot_formats::decode_block_row` when f32 multiplies and adds are not fused.
///
/// `row_byte` and `k` are repeated in the expression; pass variables or cheap expressions.
/// Fails only when `tables` lacks a table of [`tables_of`] (see [`FormatTables::declare`]).
pub fn decode_element(
    format: BlockFormat,
    weights: ParamId,
    tables: &FormatTables,
    row_byte: Expr,
    k: Expr,
) -> Result<Expr, DequantError> {
    let (block_elems_log2, block_bytes) = (
        format.block_elems().trailing_zeros(),
        format.block_bytes() as u32,
    );
    let block_byte = row_byte + (k.clone() >> u32c(block_elems_log2)) * u32c(block_bytes);
    let j = k & u32c((1 << block_elems_log2) - 1);
    decode_in_block(format, weights, tables, block_byte, j)
}

/// The f32 expression of element `j` (u32, below the block's element count) of the block of
/// `format` whose first byte is at byte `block_byte` (u32) of `weights`; the same expression
/// [`decode_element`] builds for that element. `block_byte` must be even but for MXFP4.
///
/// `block_byte` and `j` are repeated in the expression; pass variables or cheap expressions.
pub fn decode_in_block(
    format: BlockFormat,
    weights: ParamId,
    tables: &FormatTables,
    block_byte: Expr,
    j: Expr,
) -> Result<Expr, DequantError> {
    let table = |table: FormatTable| {
        tables
            .get(table)
            .ok_or(DequantError::MissingTable { format, table })
    };
    let b = Block {
        weights,
        base: block_byte,
    };
    Ok(match format {
        BlockFormat::Q4_0 => q4_0(&b, j),
        BlockFormat::Q4_1 => q4_1(&b, j),
        BlockFormat::Q5_0 => q5_0(&b, j),
        BlockFormat::Q5_1 => q5_1(&b, j),
        BlockFormat::Q8_0 => q8_0(&b, j),
        BlockFormat::Q2_K => q2_k(&b, j),
        BlockFormat::Q3_K => q3_k(&b, j),
        BlockFormat::Q4_K => q4_k(&b, j),
        BlockFormat::Q5_K => q5_k(&b, j),
        BlockFormat::Q6_K => q6_k(&b, j),
        BlockFormat::IQ2_XS => iq2_xs(
            &b,
            j,
            table(FormatTable::Iq2xsGrid)?,
            table(FormatTable::KsignsIq2xs)?,
        ),
        BlockFormat::IQ3_XXS => iq3_xxs(
            &b,
            j,
            table(FormatTable::Iq3xxsGrid)?,
            table(FormatTable::KsignsIq2xs)?,
        ),
        BlockFormat::IQ3_S => iq3_s(&b, j, table(FormatTable::Iq3sGrid)?),
        BlockFormat::IQ4_NL => iq4_nl(&b, j, table(FormatTable::KvaluesIq4nl)?),
        BlockFormat::IQ4_XS => iq4_xs(&b, j, table(FormatTable::KvaluesIq4nl)?),
        BlockFormat::MXFP4 => mxfp4(&b, j, table(FormatTable::KvaluesMxfp4)?),
    })
}

/// One block of the weights: its first byte.
struct Block {
    weights: ParamId,
    base: Expr,
}

impl Block {
    /// Byte `offset` (u32) of the block, as a u32.
    fn byte(&self, offset: Expr) -> Expr {
        load_byte(self.weights, self.base.clone() + offset)
    }

    /// The little-endian f16 at even byte `offset` of the block, as f32.
    fn f16(&self, offset: u32) -> Expr {
        load_half(
            self.weights,
            (self.base.clone() + u32c(offset)) >> u32c(1),
            Half::F16,
        )
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

/// The low (`high` = 0) or high (`high` = 1) nibble of `byte`.
fn nibble(byte: Expr, high: Expr) -> Expr {
    (byte >> (high << c(2))) & c(15)
}

/// A byte (u32 in 0..=255) as the i8 it stores, as i32.
fn i8_of(byte: Expr) -> Expr {
    i32_of(byte.clone()) - i32_of((byte >> c(7)) << c(8))
}

/// -1.0 where `bit` (u32, 0 or 1) is set, else 1.0: ggml's `sign` factor.
fn sign_of(bit: Expr) -> Expr {
    select(eq(bit, c(1)), Expr::F32(-1.0), Expr::F32(1.0))
}

/// ggml: `y[j] = (q[j] - 8) * d`, low nibbles first.
fn q4_0(b: &Block, j: Expr) -> Expr {
    let d = b.f16(0);
    let q = nibble(b.byte(c(2) + (j.clone() & c(15))), j >> c(4));
    f32_of(i32_of(q) - Expr::I32(8)) * d
}

/// ggml: `y[j] = q[j] * d + m`.
fn q4_1(b: &Block, j: Expr) -> Expr {
    let (d, m) = (b.f16(0), b.f16(2));
    let q = nibble(b.byte(c(4) + (j.clone() & c(15))), j >> c(4));
    f32_of(q) * d + m
}

/// The 5-bit code of element `j` of a Q5_0/Q5_1 block: nibble from `qs`, high bit `j` of the
/// little-endian u32 `qh` (ggml's `xh_0`/`xh_1` both pick bit `j`).
fn q5_code(b: &Block, j: Expr, qh: u32, qs: u32) -> Expr {
    let low = nibble(b.byte(c(qs) + (j.clone() & c(15))), j.clone() >> c(4));
    let high = (b.byte(c(qh) + (j.clone() >> c(3))) >> (j & c(7))) & c(1);
    low | (high << c(4))
}

/// ggml: `y[j] = (q[j] - 16) * d`.
fn q5_0(b: &Block, j: Expr) -> Expr {
    let d = b.f16(0);
    f32_of(i32_of(q5_code(b, j, 2, 6)) - Expr::I32(16)) * d
}

/// ggml: `y[j] = q[j] * d + m`.
fn q5_1(b: &Block, j: Expr) -> Expr {
    let (d, m) = (b.f16(0), b.f16(2));
    f32_of(q5_code(b, j, 4, 8)) * d + m
}

/// ggml: `y[j] = q[j] * d`, `q` signed bytes.
fn q8_0(b: &Block, j: Expr) -> Expr {
    let d = b.f16(0);
    f32_of(i8_of(b.byte(c(2) + j))) * d
}

/// ggml: sub-block `j / 16` has scale byte `sc`; `y = (d * (sc & 15)) * q - dmin * (sc >> 4)`,
/// `q` the 2-bit field `(j / 32) % 4` of byte `16 + 32 * (j / 128) + j % 32`.
fn q2_k(b: &Block, j: Expr) -> Expr {
    let (d, min) = (b.f16(80), b.f16(82));
    let sc = b.byte(j.clone() >> c(4));
    let dl = d * f32_of(sc.clone() & c(15));
    let ml = min * f32_of(sc >> c(4));
    let q_byte = b.byte(c(16) + ((j.clone() >> c(7)) << c(5)) + (j.clone() & c(31)));
    let q = (q_byte >> (((j >> c(5)) & c(3)) << c(1))) & c(3);
    dl * f32_of(q) - ml
}

/// ggml: `y = (d * (scale - 32)) * (q - (hmask bit ? 0 : 4))`, the 6-bit scale of sub-block
/// `is = j / 16` from its low nibble (byte `is % 8`, nibble `is / 8`) and 2 high bits (byte
/// `8 + is % 4`, field `is / 4`), the hmask bit `j / 32` of byte `j % 32`.
fn q3_k(b: &Block, j: Expr) -> Expr {
    let d_all = b.f16(108);
    let is = j.clone() >> c(4);
    let low4 = nibble(b.byte(c(96) + (is.clone() & c(7))), is.clone() >> c(3));
    let high2 = (b.byte(c(104) + (is.clone() & c(3))) >> ((is >> c(2)) << c(1))) & c(3);
    let dl = d_all * f32_of(i32_of(low4 | (high2 << c(4))) - Expr::I32(32));
    let q_byte = b.byte(c(32) + ((j.clone() >> c(7)) << c(5)) + (j.clone() & c(31)));
    let low = (q_byte >> (((j.clone() >> c(5)) & c(3)) << c(1))) & c(3);
    let hbit = (b.byte(j.clone() & c(31)) >> (j >> c(5))) & c(1);
    dl * f32_of(i32_of(low) - i32_of((hbit ^ c(1)) << c(2)))
}

/// ggml's `get_scale_min_k4` for sub-block `sub` (u32, 0..8) of the 12 scale bytes at block
/// byte 4: `(d * sc, dmin * m)`. Both arms are evaluated; every byte index stays in 4..16.
fn k4_scale_min(b: &Block, sub: Expr) -> (Expr, Expr) {
    let (d, min) = (b.f16(0), b.f16(2));
    let s0 = b.byte(c(4) + sub.clone());
    let s4 = b.byte(c(8) + sub.clone());
    let s_low = b.byte(c(4) + (sub.clone() & c(3)));
    let first = lt(sub, c(4));
    let sc = select(
        first.clone(),
        s0.clone() & c(63),
        (s4.clone() & c(15)) | ((s_low >> c(6)) << c(4)),
    );
    let m = select(
        first,
        s4.clone() & c(63),
        (s4 >> c(4)) | ((s0 >> c(6)) << c(4)),
    );
    (d * f32_of(sc), min * f32_of(m))
}

/// ggml: `y = (d * sc) * q - dmin * m` for sub-block `j / 32`, `q` nibble `(j / 32) % 2` of
/// byte `16 + 32 * (j / 64) + j % 32`.
fn q4_k(b: &Block, j: Expr) -> Expr {
    let (dl, ml) = k4_scale_min(b, j.clone() >> c(5));
    let q_byte = b.byte(c(16) + ((j.clone() >> c(6)) << c(5)) + (j.clone() & c(31)));
    dl * f32_of(nibble(q_byte, (j >> c(5)) & c(1))) - ml
}

/// As Q4_K with a fifth bit: bit `j / 32` of `qh` byte `j % 32` adds 16.
fn q5_k(b: &Block, j: Expr) -> Expr {
    let (dl, ml) = k4_scale_min(b, j.clone() >> c(5));
    let q_byte = b.byte(c(48) + ((j.clone() >> c(6)) << c(5)) + (j.clone() & c(31)));
    let h = (b.byte(c(16) + (j.clone() & c(31))) >> (j.clone() >> c(5))) & c(1);
    dl * f32_of(nibble(q_byte, (j >> c(5)) & c(1)) + (h << c(4))) - ml
}

/// ggml: `y = (d * sc) * (q - 32)`; half `n = j / 128`, quarter `g = (j / 32) % 4`, lane
/// `l = j % 32`: nibble `g / 2` of `ql[64n + l + 32 (g % 2)]`, high bits `2g` of
/// `qh[32n + l]`, signed scale `scales[8n + l / 16 + 2g]`.
fn q6_k(b: &Block, j: Expr) -> Expr {
    let d = b.f16(208);
    let n = j.clone() >> c(7);
    let g = (j.clone() >> c(5)) & c(3);
    let l = j & c(31);
    let ql = b.byte(((n.clone() << c(6)) + l.clone()) + ((g.clone() & c(1)) << c(5)));
    let low = nibble(ql, g.clone() >> c(1));
    let high = (b.byte(c(128) + (n.clone() << c(5)) + l.clone()) >> (g.clone() << c(1))) & c(3);
    let q = i32_of(low | (high << c(4))) - Expr::I32(32);
    let sc = i8_of(b.byte(c(192) + (n << c(3)) + (l >> c(4)) + (g << c(1))));
    d * f32_of(sc) * f32_of(q)
}

/// ggml: `db = d * (0.5 + s) * 0.25` with `s` nibble `(j / 16) % 2` of `scales[j / 32]`;
/// `y = db * grid[code & 511][j % 8] * sign`, `code` the little-endian u16 `j / 8` of `qs`,
/// the sign bit `j % 8` of `ksigns[code >> 9]`.
fn iq2_xs(b: &Block, j: Expr, grid: ParamId, ksigns: ParamId) -> Expr {
    let d = b.f16(0);
    let s = nibble(
        b.byte(c(66) + (j.clone() >> c(5))),
        (j.clone() >> c(4)) & c(1),
    );
    let db = d * (Expr::F32(0.5) + f32_of(s)) * Expr::F32(0.25);
    let code_byte = c(2) + ((j.clone() >> c(3)) << c(1));
    let (lo, hi) = (b.byte(code_byte.clone()), b.byte(code_byte + c(1)));
    let index = lo | ((hi.clone() & c(1)) << c(8));
    let signs = load_byte(ksigns, hi >> c(1));
    let magnitude = load_byte(grid, (index << c(3)) + (j.clone() & c(7)));
    db * f32_of(magnitude) * sign_of((signs >> (j & c(7))) & c(1))
}

/// ggml: per 32 elements a little-endian u32 `aux` at byte `66 + 4 (j / 32)`: `db = d * (0.5 +
/// (aux >> 28)) * 0.5`; `y = db * grid[qs[j / 4]][j % 4] * sign`, the sign bit `j % 8` of
/// `ksigns[(aux >> 7 l) & 127]`, `l = (j / 8) % 4` (those 7 bits span at most two bytes).
fn iq3_xxs(b: &Block, j: Expr, grid: ParamId, ksigns: ParamId) -> Expr {
    let d = b.f16(0);
    let aux = c(66) + ((j.clone() >> c(5)) << c(2));
    let db = d * (Expr::F32(0.5) + f32_of(b.byte(aux.clone() + c(3)) >> c(4))) * Expr::F32(0.5);
    let bit = ((j.clone() >> c(3)) & c(3)) * c(7);
    let at = aux + (bit.clone() >> c(3));
    let pair = b.byte(at.clone()) | (b.byte(at + c(1)) << c(8));
    let signs = load_byte(ksigns, (pair >> (bit & c(7))) & c(127));
    let magnitude = load_byte(
        grid,
        (b.byte(c(2) + (j.clone() >> c(2))) << c(2)) + (j.clone() & c(3)),
    );
    db * f32_of(magnitude) * sign_of((signs >> (j & c(7))) & c(1))
}

/// ggml: `db = d * (1 + 2 s)`, `s` nibble `(j / 32) % 2` of `scales[j / 64]`; `y = db *
/// grid[index][j % 4] * sign`, `index` = `qs[j / 4]` with bit 8 from bit `(j / 4) % 8` of
/// `qh[j / 32]`, the sign bit `j % 8` of `signs[j / 8]`.
fn iq3_s(b: &Block, j: Expr, grid: ParamId) -> Expr {
    let d = b.f16(0);
    let ib32 = j.clone() >> c(5);
    let s = nibble(b.byte(c(106) + (ib32.clone() >> c(1))), ib32.clone() & c(1));
    let db = d * f32_of((s << c(1)) + c(1));
    let high = (b.byte(c(66) + ib32) >> ((j.clone() >> c(2)) & c(7))) & c(1);
    let index = b.byte(c(2) + (j.clone() >> c(2))) | (high << c(8));
    let magnitude = load_byte(grid, (index << c(2)) + (j.clone() & c(3)));
    let signs = b.byte(c(74) + (j.clone() >> c(3)));
    db * f32_of(magnitude) * sign_of((signs >> (j & c(7))) & c(1))
}

/// A level of `kvalues` (a table of f32 bit patterns) at `index`.
fn level(kvalues: ParamId, index: Expr) -> Expr {
    un(UnOp::BitsToF32, load(kvalues, index))
}

/// ggml: `y[j] = d * kvalues[q[j]]`, low nibbles first.
fn iq4_nl(b: &Block, j: Expr, kvalues: ParamId) -> Expr {
    let d = b.f16(0);
    let q = nibble(b.byte(c(2) + (j.clone() & c(15))), j >> c(4));
    d * level(kvalues, q)
}

/// ggml: `dl = d * (scale - 32)`, the 6-bit scale of sub-block `ib = j / 32` from nibble
/// `ib % 2` of `scales_l[ib / 2]` and bits `2 ib` of the little-endian u16 `scales_h`;
/// `y = dl * kvalues[q]`, `q` nibble `(j / 16) % 2` of `qs[16 ib + j % 16]`.
fn iq4_xs(b: &Block, j: Expr, kvalues: ParamId) -> Expr {
    let d = b.f16(0);
    let ib = j.clone() >> c(5);
    let low = nibble(b.byte(c(4) + (ib.clone() >> c(1))), ib.clone() & c(1));
    let high = (b.byte(c(2) + (ib.clone() >> c(2))) >> ((ib.clone() & c(3)) << c(1))) & c(3);
    let dl = d * f32_of(i32_of(low | (high << c(4))) - Expr::I32(32));
    let q_byte = b.byte(c(8) + (ib << c(4)) + (j.clone() & c(15)));
    dl * level(kvalues, nibble(q_byte, (j >> c(4)) & c(1)))
}

/// ggml: `y[j] = kvalues[q[j]] * d`, `d` = `GGML_E8M0_TO_FP32_HALF(e)`: the bits
/// `0x00200000 << e` for `e < 2`, else `(e - 1) << 23`.
fn mxfp4(b: &Block, j: Expr, kvalues: ParamId) -> Expr {
    let bits = e8m0_half_bits(b.byte(c(0)));
    let q = nibble(b.byte(c(1) + (j.clone() & c(15))), j >> c(4));
    level(kvalues, q) * un(UnOp::BitsToF32, bits)
}

/// The f32 bits of ggml's `GGML_E8M0_TO_FP32_HALF(e)` for MXFP4's scale byte `e` (a u32
/// expression, repeated): `0x00200000 << e` for `e < 2`, else `(e - 1) << 23`.
pub(super) fn e8m0_half_bits(e: Expr) -> Expr {
    select(
        lt(e.clone(), c(2)),
        c(0x0020_0000) << (e.clone() & c(1)),
        (e - c(1)) << c(23),
    )
}
