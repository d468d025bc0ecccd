//! The kernel decode of every GGUF block format against the CPU reference: each element's
//! expression, evaluated on the CPU, must equal `poot_formats::decode_block_row` bit for bit
//! (NaN where it is NaN).

use poot_formats::{BlockFormat, FieldKind, MatrixShape, decode_block_row};
use poot_graph_plan::lower::dequant::{
    DequantError, FormatTable, FormatTables, decode_element, row_bytes, table_words, tables_of,
    words_of_bytes,
};
use poot_graph_plan::lower::dequant_unit::{
    PairFormat, Unit, decode_pair, decode_unit, decode_whole, unit_window, units_per_block,
    units_per_window,
};
use poot_kernel::build::{KernelBuilder, load, mul_add, u32c};
use poot_kernel::expr_eval::{Env, Value};
use poot_kernel::{Access, Expr, ParamId, Stmt, Ty, Word};

/// splitmix64: a small seeded generator, so every run checks the same blocks.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn byte(&mut self) -> u8 {
        self.next() as u8
    }

    /// A finite f16 of either sign below 2 in magnitude, subnormals included: the range block
    /// scales and minimums take.
    fn scale_f16(&mut self) -> u16 {
        let r = self.next();
        let sign = (r & 1) as u16;
        let exp = ((r >> 1) % 16) as u16;
        let mantissa = ((r >> 8) & 0x3ff) as u16;
        (sign << 15) | (exp << 10) | mantissa
    }
}

/// How a case fills its blocks.
#[derive(Clone, Copy, Debug)]
enum Fill {
    /// Random codes, f16 fields finite in the range of real scales.
    Realistic,
    /// Every byte random: f16 fields may be infinite or NaN.
    RandomBytes,
}

/// `n_rows` rows of `blocks_per_row` blocks each.
fn random_rows(format: BlockFormat, n_blocks: usize, fill: Fill, rng: &mut Rng) -> Vec<u8> {
    let mut bytes: Vec<u8> = (0..n_blocks * format.block_bytes())
        .map(|_| rng.byte())
        .collect();
    match fill {
        Fill::RandomBytes => {}
        Fill::Realistic => {
            for block in bytes.chunks_mut(format.block_bytes()) {
                for field in format.fields().iter().filter(|f| f.kind == FieldKind::F16) {
                    let at = field.offset_bytes;
                    block[at..at + 2].copy_from_slice(&rng.scale_f16().to_le_bytes());
                }
            }
        }
    }
    bytes
}

/// Decodes every element of `n_rows` rows of `blocks_per_row` blocks of `format`, stored after
/// `prefix_bytes` bytes of other data, through the kernel expression and through the
/// reference, and returns how many elements matched (all, or it panics).
fn check(
    format: BlockFormat,
    blocks_per_row: usize,
    n_rows: usize,
    prefix_bytes: usize,
    fill: Fill,
    seed: u64,
) -> usize {
    let mut rng = Rng(seed);
    let k = blocks_per_row * format.block_elems();
    let row_len = row_bytes(format, k).expect("whole blocks");
    let bytes = random_rows(format, blocks_per_row * n_rows, fill, &mut rng);
    let mut stored: Vec<u8> = (0..prefix_bytes).map(|_| rng.byte()).collect();
    stored.extend_from_slice(&bytes);
    let words = words_of_bytes(&stored);

    let mut kb = KernelBuilder::new("dequant_test", 1);
    let weights = kb.param("weights", Word::U32, Access::Read);
    let tables = FormatTables::declare(format, &mut kb);
    tables.check(format).expect("declare binds every table");
    let row_var = kb.var(Ty::U32, u32c(0));
    let k_var = kb.var(Ty::U32, u32c(0));
    let expr = decode_element(
        format,
        weights,
        &tables,
        Expr::Var(row_var),
        Expr::Var(k_var),
    )
    .expect("tables bound");
    let kernel = kb.finish();
    assert_eq!(kernel.type_of(&expr), Ok(Ty::F32), "{format:?}");

    let table_data: Vec<_> = tables.iter().map(|(t, p)| (p, table_words(t))).collect();
    let mut env = Env::new();
    env.bind(weights, Word::U32, &words);
    for (p, w) in &table_data {
        env.bind(*p, Word::U32, w);
    }

    let mut want = vec![0f32; k];
    let mut n_checked = 0;
    for row in 0..n_rows {
        decode_block_row(format, MatrixShape::new(n_rows, k), &bytes, row, &mut want)
            .expect("reference decode");
        let row_byte = u32::try_from(prefix_bytes + row * row_len).expect("small test");
        env.set_var(row_var, Value::U32(row_byte));
        for (kk, &w) in want.iter().enumerate() {
            env.set_var(k_var, Value::U32(kk as u32));
            let got = env
                .eval_f32(&expr)
                .unwrap_or_else(|e| panic!("{format:?} row {row} k {kk}: {e}"));
            let same = if w.is_nan() {
                got.is_nan()
            } else {
                got.to_bits() == w.to_bits()
            };
            assert!(
                same,
                "{format:?} ({fill:?}, seed {seed}) row {row} k {kk}: got {got:e} ({:#010x}), want {w:e} ({:#010x})",
                got.to_bits(),
                w.to_bits()
            );
            n_checked += 1;
        }
    }
    n_checked
}

#[test]
fn every_format_matches_the_reference_bit_for_bit() {
    let mut total = 0;
    for (i, format) in BlockFormat::ALL.into_iter().enumerate() {
        let seed = 1000 * i as u64;
        let mut n = 0;
        // One, two and three blocks per row; rows after the first start mid-buffer (at an odd
        // byte for MXFP4), and the tensor starts after some other data.
        n += check(format, 1, 3, 0, Fill::Realistic, seed + 1);
        n += check(format, 2, 3, 8, Fill::Realistic, seed + 2);
        n += check(format, 3, 2, 4, Fill::Realistic, seed + 3);
        for s in 0..4 {
            n += check(format, 2, 2, 0, Fill::Realistic, seed + 10 + s);
        }
        for s in 0..3 {
            n += check(format, 2, 3, 8, Fill::RandomBytes, seed + 20 + s);
        }
        assert!(n > 0);
        total += n;
    }
    eprintln!("{total} elements decoded bit-exactly");
}

#[test]
fn random_bytes_reach_special_values() {
    // A block whose scale is an f16 NaN or infinity must decode to NaN/inf at the same places.
    for format in BlockFormat::ALL {
        let fields: Vec<_> = format
            .fields()
            .iter()
            .filter(|f| f.kind == FieldKind::F16)
            .collect();
        for special in [0x7c00u16, 0xfc00, 0x7e01, 0x0001] {
            let mut rng = Rng(special.into());
            let mut bytes = random_rows(format, 2, Fill::Realistic, &mut rng);
            for f in &fields {
                let at = f.offset_bytes;
                bytes[at..at + 2].copy_from_slice(&special.to_le_bytes());
            }
            check_bytes(format, &bytes);
        }
    }
}

/// Checks one row of whole blocks `bytes` at byte 0.
fn check_bytes(format: BlockFormat, bytes: &[u8]) {
    let k = bytes.len() / format.block_bytes() * format.block_elems();
    let words = words_of_bytes(bytes);
    let mut kb = KernelBuilder::new("dequant_test", 1);
    let weights = kb.param("weights", Word::U32, Access::Read);
    let tables = FormatTables::declare(format, &mut kb);
    let table_data: Vec<_> = tables.iter().map(|(t, p)| (p, table_words(t))).collect();
    let mut env = Env::new();
    env.bind(weights, Word::U32, &words);
    for (p, w) in &table_data {
        env.bind(*p, Word::U32, w);
    }
    let mut want = vec![0f32; k];
    decode_block_row(format, MatrixShape::new(1, k), bytes, 0, &mut want)
        .expect("reference decode");
    for (kk, &w) in want.iter().enumerate() {
        let expr = decode_element(format, weights, &tables, u32c(0), u32c(kk as u32))
            .expect("tables bound");
        let got = env
            .eval_f32(&expr)
            .unwrap_or_else(|e| panic!("{format:?} k {kk}: {e}"));
        let same = if w.is_nan() {
            got.is_nan()
        } else {
            got.to_bits() == w.to_bits()
        };
        assert!(same, "{format:?} k {kk}: got {got:e}, want {w:e}");
    }
}

#[test]
fn tables_cover_exactly_what_formats_read() {
    for table in FormatTable::ALL {
        assert!(
            BlockFormat::ALL
                .iter()
                .any(|&f| tables_of(f).contains(&table)),
            "{table:?} is unused"
        );
    }
    let lens: Vec<usize> = FormatTable::ALL
        .iter()
        .map(|&t| table_words(t).len())
        .collect();
    assert_eq!(lens, [1024, 256, 512, 32, 16, 16]);
    assert_eq!(
        f32::from_bits(table_words(FormatTable::KvaluesIq4nl)[0]),
        -127.0
    );
    assert_eq!(
        f32::from_bits(table_words(FormatTable::KvaluesMxfp4)[15]),
        -12.0
    );
}

#[test]
fn an_unbound_table_is_refused() {
    let format = BlockFormat::IQ3_XXS;
    let mut tables = FormatTables::new();
    tables.insert(FormatTable::Iq3xxsGrid, ParamId(1));
    let missing = DequantError::MissingTable {
        format,
        table: FormatTable::KsignsIq2xs,
    };
    assert_eq!(tables.check(format), Err(missing.clone()));
    assert_eq!(
        decode_element(format, ParamId(0), &tables, u32c(0), u32c(0)),
        Err(missing)
    );
    assert_eq!(row_bytes(BlockFormat::Q4_K, 300), None);
    assert_eq!(row_bytes(BlockFormat::Q4_K, 512), Some(288));
}

#[test]
fn a_decode_kernel_validates() {
    for format in BlockFormat::ALL {
        let mut kb = KernelBuilder::new("dequant_row", 64);
        let weights = kb.param("weights", Word::U32, Access::Read);
        let out = kb.param("out", Word::F32, Access::ReadWrite);
        let tables = FormatTables::declare(format, &mut kb);
        let row_len = row_bytes(format, 512).expect("whole blocks") as u32;
        let row_byte = kb.let_(Ty::U32, u32c(row_len));
        kb.for_(u32c(0), u32c(512), u32c(1), |kb, k| {
            let value = decode_element(format, weights, &tables, row_byte.clone(), k.clone())
                .expect("tables bound");
            kb.store(out, k, value);
        });
        kb.finish().validate().expect("a well-typed decode");
    }
}

/// Runs a unit's statements in `env`: declarations, and wide loads read word by word from an
/// index their count divides.
fn declare(env: &mut Env, body: &[Stmt], what: &str) {
    let set = |env: &mut Env, var, value: &Expr| {
        let v = env.eval(value).unwrap_or_else(|e| panic!("{what}: {e}"));
        env.set_var(var, v);
    };
    for stmt in body {
        match stmt {
            Stmt::Let { var, value, .. } => set(env, *var, value),
            Stmt::LetWords { vars, buf, index } => {
                let at = env
                    .eval_u32(index)
                    .unwrap_or_else(|e| panic!("{what}: {e}"));
                assert_eq!(
                    at % vars.len() as u32,
                    0,
                    "{what}: a wide load at word {at}"
                );
                for (i, var) in vars.iter().enumerate() {
                    set(env, *var, &load(*buf, u32c(at + i as u32)));
                }
            }
            _ => panic!("{what}: a unit emits only declarations, found {stmt:?}"),
        }
    }
}

/// Checks each element of `unit` (times its group's scale, in one f32 multiply, plus its bias)
/// against `want` (the elements of the unit's block, or pair of blocks) bit for bit, marks it in
/// `seen` (an element decoded twice fails), and checks the padding invariant of its offset.
fn check_elements(
    env: &Env,
    unit: &Unit,
    want: &[f32],
    seen: &mut [bool],
    window: Option<(u32, u32)>,
    what: &str,
) {
    let first = env.eval_u32(&unit.first).expect("first element");
    if window.is_some() {
        // A unit's elements come in aligned runs of 8 (the tiles store them 4 words at a time
        // as packed pairs of halves).
        let mut offs: Vec<u32> = unit
            .groups
            .iter()
            .flat_map(|g| g.elements.iter().map(|e| e.0))
            .collect();
        offs.sort_unstable();
        assert_eq!(
            first % 8,
            0,
            "{what}: first element {first} is not a multiple of 8"
        );
        for run in offs.chunks(8) {
            assert!(
                run.len() == 8 && run[0] % 8 == 0 && run.iter().zip(run[0]..).all(|(&o, w)| o == w),
                "{what}: offsets {run:?} are not an aligned run of 8"
            );
        }
    }
    for group in &unit.groups {
        for (off, code) in &group.elements {
            let value = match (&group.scale, &group.bias) {
                (Some(scale), Some(bias)) => scale.clone() * code.clone() + bias.clone(),
                (Some(scale), None) => scale.clone() * code.clone(),
                (None, _) => code.clone(),
            };
            assert_eq!(
                (first + off) / 32,
                first / 32 + off / 32,
                "{what}: offset {off} from {first} crosses a multiple of 32"
            );
            if let Some((size, index)) = window {
                assert_eq!(
                    (first + off) / size,
                    index,
                    "{what}: element {} outside window {index} of {size}",
                    first + off
                );
            }
            let j = (first + off) as usize;
            assert!(!seen[j], "{what}: element {j} decoded twice");
            seen[j] = true;
            let got = env
                .eval_f32(&value)
                .unwrap_or_else(|e| panic!("{what} element {j}: {e}"));
            let w = want[j];
            let same = if w.is_nan() {
                got.is_nan()
            } else {
                got.to_bits() == w.to_bits()
            };
            assert!(same, "{what} element {j}: got {got:e}, want {w:e}");
            // `scale * e` is exact in f32 for every affine format, so the fused form the tiled
            // kernels use rounds once, as the two steps do.
            if let (Some(scale), Some(bias)) = (&group.scale, &group.bias) {
                let fused = mul_add(scale.clone(), code.clone(), bias.clone());
                let got = env.eval_f32(&fused).expect("fused element");
                assert!(
                    got.to_bits() == w.to_bits() || (w.is_nan() && got.is_nan()),
                    "{what} element {j}: fused {got:e}, want {w:e}"
                );
            }
        }
    }
}

/// Decodes every unit of `n_blocks` consecutive blocks of `format` stored after `prefix_bytes`
/// bytes (so blocks of 2-byte-aligned formats start at both halves of a word) through
/// `decode_unit`, checks each element (times its group's scale, where it has one) against the
/// reference bit for bit, that the units of a block cover its elements exactly once, and the
/// padding invariant of their offsets.
fn check_units(format: BlockFormat, n_blocks: usize, prefix_bytes: usize, fill: Fill, seed: u64) {
    let mut rng = Rng(seed);
    let bytes = random_rows(format, n_blocks, fill, &mut rng);
    let prefix: Vec<u8> = (0..prefix_bytes).map(|_| rng.byte()).collect();
    check_unit_bytes(format, &prefix, &bytes, &format!("{fill:?}"));
}

/// [`check_units`] of the blocks `bytes`, stored after `prefix`; `case` names them in failures.
fn check_unit_bytes(format: BlockFormat, prefix: &[u8], bytes: &[u8], case: &str) {
    let n_blocks = bytes.len() / format.block_bytes();
    let prefix_bytes = prefix.len();
    let k = n_blocks * format.block_elems();
    let mut stored = prefix.to_vec();
    stored.extend_from_slice(bytes);
    let words = words_of_bytes(&stored);
    let mut want = vec![0f32; k];
    decode_block_row(format, MatrixShape::new(1, k), bytes, 0, &mut want)
        .expect("reference decode");

    let mut kb = KernelBuilder::new("unit_test", 1);
    let weights = kb.param("weights", Word::U32, Access::Read);
    let tables = FormatTables::declare(format, &mut kb);
    let base = kb.var(Ty::U32, u32c(0));
    let sub = kb.var(Ty::U32, u32c(0));
    let unit = decode_unit(
        &mut kb,
        format,
        weights,
        &tables,
        Expr::Var(base),
        Expr::Var(sub),
        words.len() as u32 - 1,
    )
    .expect("tables bound");
    let kernel = kb.finish();
    kernel.validate().expect("the unit's statements validate");
    let table_data: Vec<_> = tables.iter().map(|(t, p)| (p, table_words(t))).collect();
    let per_block = units_per_block(format);
    for block in 0..n_blocks {
        let mut seen = vec![false; format.block_elems()];
        for s in 0..per_block {
            let mut env = Env::new();
            env.bind(weights, Word::U32, &words);
            for (p, w) in &table_data {
                env.bind(*p, Word::U32, w);
            }
            let block_byte = prefix_bytes + block * format.block_bytes();
            env.set_var(base, Value::U32(block_byte as u32));
            env.set_var(sub, Value::U32(s));
            // The unit's own statements: straight-line declarations after `base` and `sub`.
            let what = format!("{format:?} ({case}) block {block} unit {s}");
            declare(&mut env, &kernel.body[2..], &what);
            let block_want = &want[block * format.block_elems()..][..format.block_elems()];
            // Each unit keeps to its window, which tiled kernels stage a slice of at a time.
            let window = (unit_window(format), s / units_per_window(format));
            check_elements(&env, &unit, block_want, &mut seen, Some(window), &what);
        }
        assert!(
            seen.iter().all(|&s| s),
            "{format:?}: a unit missed elements"
        );
    }
}

#[test]
fn every_format_decodes_by_units_bit_for_bit() {
    for (i, format) in BlockFormat::ALL.into_iter().enumerate() {
        let seed = 5000 + 100 * i as u64;
        // Three blocks, so blocks of a size that is not a multiple of 4 alternate halves of a
        // word; after other data of a size rows of the format can start at (any for MXFP4),
        // and with the last block ending the buffer.
        let prefixes: &[usize] = if format == BlockFormat::MXFP4 {
            &[0, 1, 2, 3]
        } else if format == BlockFormat::Q4_K {
            // Its units read 16 bytes at a time: rows start 16-byte aligned.
            &[0, 16]
        } else if format.block_bytes() % 4 == 0 {
            &[0, 4]
        } else {
            &[0, 2]
        };
        for &prefix in prefixes {
            check_units(format, 3, prefix, Fill::Realistic, seed + prefix as u64);
            check_units(
                format,
                2,
                prefix,
                Fill::RandomBytes,
                seed + 10 + prefix as u64,
            );
        }
    }
}

#[test]
fn every_code_decodes_by_units_bit_for_bit() {
    // The codes of the formats whose units factor out a scale take every value: every byte
    // value at every code byte offset of a block (so every nibble, 2-bit field and fifth bit at
    // every place), with realistic scales.
    for format in [
        BlockFormat::Q4_0,
        BlockFormat::Q5_0,
        BlockFormat::Q8_0,
        BlockFormat::IQ4_NL,
        BlockFormat::IQ4_XS,
        BlockFormat::Q6_K,
    ] {
        let mut rng = Rng(format.block_bytes() as u64);
        let mut bytes = random_rows(format, 256, Fill::Realistic, &mut rng);
        let f16_at: Vec<usize> = format
            .fields()
            .iter()
            .filter(|f| f.kind == FieldKind::F16)
            .map(|f| f.offset_bytes)
            .collect();
        for (b, block) in bytes.chunks_mut(format.block_bytes()).enumerate() {
            for (i, byte) in block.iter_mut().enumerate() {
                if !f16_at.iter().any(|&at| (at..at + 2).contains(&i)) {
                    *byte = (b + i) as u8;
                }
            }
        }
        check_unit_bytes(format, &[], &bytes, "every code");
    }
}

/// How a row of an 18-byte format is read in units larger than a half block.
#[derive(Clone, Copy, Debug)]
enum Reading {
    /// Two blocks from a word boundary: `decode_pair`.
    Pairs,
    /// One block, at either half of a word: `decode_whole`.
    Whole,
}

impl Reading {
    fn blocks(self) -> usize {
        match self {
            Reading::Pairs => 2,
            Reading::Whole => 1,
        }
    }
}

/// Decodes the units of `bytes` (whole units of `pair`'s format, from a word boundary) read as
/// `reading` and checks every element, times its group's scale, against the reference bit for
/// bit.
fn check_large_units(pair: PairFormat, reading: Reading, bytes: &[u8], case: &str) {
    let format = pair.block_format();
    let unit_bytes = reading.blocks() * format.block_bytes();
    let k = bytes.len() / format.block_bytes() * format.block_elems();
    let words = words_of_bytes(bytes);
    let mut want = vec![0f32; k];
    decode_block_row(format, MatrixShape::new(1, k), bytes, 0, &mut want).expect("reference");
    let mut kb = KernelBuilder::new("unit_test", 1);
    let weights = kb.param("weights", Word::U32, Access::Read);
    let tables = FormatTables::declare(format, &mut kb);
    let base = kb.var(Ty::U32, u32c(0));
    let last_word = (words.len() - 1) as u32;
    let unit = match reading {
        Reading::Pairs => decode_pair(&mut kb, pair, weights, &tables, Expr::Var(base)),
        Reading::Whole => decode_whole(&mut kb, pair, weights, &tables, Expr::Var(base), last_word),
    }
    .expect("tables");
    let kernel = kb.finish();
    kernel.validate().expect("the unit's statements validate");
    assert!(
        unit.groups.iter().all(|g| g.scale.is_some()),
        "{pair:?}: a unit's groups carry their block's scale"
    );
    let table_data: Vec<_> = tables.iter().map(|(t, p)| (p, table_words(t))).collect();
    for p in 0..bytes.len() / unit_bytes {
        let mut env = Env::new();
        env.bind(weights, Word::U32, &words);
        for (param, w) in &table_data {
            env.bind(*param, Word::U32, w);
        }
        env.set_var(base, Value::U32((p * unit_bytes) as u32));
        let what = format!("{pair:?} {reading:?} ({case}) unit {p}");
        declare(&mut env, &kernel.body[1..], &what);
        let span = reading.blocks() * format.block_elems();
        let mut seen = vec![false; span];
        check_elements(
            &env,
            &unit,
            &want[p * span..][..span],
            &mut seen,
            None,
            &what,
        );
        assert!(seen.iter().all(|&s| s), "{what}: missed elements");
    }
}

#[test]
fn block_pairs_and_whole_blocks_decode_bit_for_bit() {
    for (i, pair) in [PairFormat::Q4_0, PairFormat::Iq4Nl]
        .into_iter()
        .enumerate()
    {
        let format = pair.block_format();
        for reading in [Reading::Pairs, Reading::Whole] {
            let mut rng = Rng(9000 + i as u64);
            for fill in [Fill::Realistic, Fill::RandomBytes] {
                let bytes = random_rows(format, 6, fill, &mut rng);
                check_large_units(pair, reading, &bytes, &format!("{fill:?}"));
            }
            // Every byte value at every code byte of a unit's blocks.
            let mut bytes = random_rows(format, 256, Fill::Realistic, &mut rng);
            for (b, block) in bytes.chunks_mut(format.block_bytes()).enumerate() {
                for (i, byte) in block.iter_mut().enumerate().skip(2) {
                    *byte = (b + i) as u8;
                }
            }
            check_large_units(pair, reading, &bytes, "every code");
        }
    }
}
