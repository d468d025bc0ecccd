// The CPU device's contraction library: out[m, n] = sum_k lhs[m, k] * w[n, k], f32 sums, for
// weights stored as f32, f16, bf16 or GGUF blocks (decoded as ggml decodes them). Three exact
// forms, by the left side's rows, and integer products over a left side rounded to 8-bit blocks
// (`contract_integer`, below `contract_many`, where the plan says so: a prefill chunk's rows
// against block weights on hosts with AVX-512 VNNI):
//
// - A decode step's few rows (up to four) against any format but f32
//   (`contract_fused`): each block decoded into registers and multiplied there, four weight rows
//   walked together with their bytes a little ahead requested from memory.
// - Other few-row products (`contract_few`): RN weight rows decoded a chunk of KC elements at a
//   time into an f32 panel, and a register tile of RM left-side rows by RN weight rows keeping
//   vector sums over k (both operands read along k, as stored), reduced once a chunk.
// - A prefill chunk's many rows (`contract_many`): the textbook blocked product, weights decoded
//   and packed k-major, a GQ x GR tile of sums in registers.
//
// Vector widths follow the compiler's target (-march=native): 16 lanes with AVX-512, 8 with AVX,
// 4 otherwise (SSE, NEON). The decoders compute ggml's values with the same f32 operations in
// the same order (for the K-quants the function attribute keeps GCC from fusing them; a
// 32-element block's multiply-add may be fused, within an ulp of ggml's value), and every form
// sums with fused multiply-adds in an order of its own: both within the contraction tolerance
// (reassociated f32 sums).

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__AVX512F__)
#define VW 16
#define RM 4
#define RN 6
#elif defined(__AVX__)
#define VW 8
#define RM 3
#define RN 4
#elif defined(__aarch64__)
#define VW 4
#define RM 4
#define RN 6
#else
#define VW 4
#define RM 3
#define RN 4
#endif

// Elements of k one panel holds: a multiple of every block size (256), small enough that RN
// decoded rows stay in the first-level cache.
#define KC 1024

#if defined(__GNUC__) && !defined(__clang__)
#define EXACT __attribute__((optimize("fp-contract=off")))
#else
#define EXACT
#endif

typedef float vf __attribute__((vector_size(VW * 4)));

// Sixteen-lane vectors the decoders work in, whatever the host's width (the compiler splits
// them where registers are narrower).
typedef uint8_t u8x16 __attribute__((vector_size(16)));
typedef int8_t i8x16 __attribute__((vector_size(16)));
typedef int32_t i32x16 __attribute__((vector_size(64)));
typedef uint32_t u32x16 __attribute__((vector_size(64)));
typedef float f32x16 __attribute__((vector_size(64)));

#if defined(__AVX512F__) || defined(__F16C__) || defined(__AVX2__)
#include <immintrin.h>
#endif

// Codes shared with the Rust side (library.rs, `WeightCode`).
enum {
    W_F32 = 0,
    W_F16 = 1,
    W_BF16 = 2,
    W_Q4_0 = 3,
    W_Q4_1 = 4,
    W_Q5_0 = 5,
    W_Q5_1 = 6,
    W_Q8_0 = 7,
    W_Q4_K = 8,
    W_Q5_K = 9,
    W_Q6_K = 10,
};

// The left side rounded to 8-bit blocks of 32: per row `depth` integers, a scale per 32 and the
// integers' sum per 16.
struct rounded_rows {
    int8_t *q;
    float *scale;
    int32_t *sum16;
};

struct contraction {
    const float *lhs;
    const uint8_t *weights;
    float *out;
    uint32_t format;
    uint32_t rows;
    uint32_t cols;
    uint32_t depth;
    // Set for integer products (`contract_integer`): the left side rounded to 8-bit blocks,
    // written by `poot_contract_round` before any chunk runs. Null otherwise.
    const struct rounded_rows *rounded;
};

static inline vf vload(const float *p) {
    vf v;
    memcpy(&v, p, sizeof v);
    return v;
}

// The sum of v's lanes, by halving.
static inline float hsum(vf v) {
#if VW == 16
    typedef float h8 __attribute__((vector_size(32)));
    h8 lo, hi;
    memcpy(&lo, &v, 32);
    memcpy(&hi, (char *)&v + 32, 32);
    h8 s8 = lo + hi;
#else
    typedef float h8 __attribute__((vector_size(VW * 4)));
    h8 s8 = v;
#endif
#if VW >= 8
    typedef float h4 __attribute__((vector_size(16)));
    h4 a, b;
    memcpy(&a, &s8, 16);
    memcpy(&b, (char *)&s8 + 16, 16);
    h4 s4 = a + b;
#else
    typedef float h4 __attribute__((vector_size(16)));
    h4 s4;
    memcpy(&s4, &s8, 16);
#endif
    return (s4[0] + s4[2]) + (s4[1] + s4[3]);
}

static inline f32x16 load16(const float *p) {
    f32x16 v;
    memcpy(&v, p, 64);
    return v;
}

static inline void store16(float *p, f32x16 v) { memcpy(p, &v, 64); }

static inline u8x16 bytes16(const uint8_t *p) {
    u8x16 v;
    memcpy(&v, p, 16);
    return v;
}

// Sixteen bytes widened to i32 lanes. GCC widens a generic vector
// lane by lane, so the x86 extensions are named where the host has them.
static inline i32x16 widen(u8x16 b) {
    i32x16 r;
#if defined(__AVX512F__)
    __m128i x;
    memcpy(&x, &b, 16);
    __m512i w = _mm512_cvtepu8_epi32(x);
    memcpy(&r, &w, 64);
#elif defined(__AVX2__)
    __m128i x;
    memcpy(&x, &b, 16);
    __m256i lo = _mm256_cvtepu8_epi32(x), hi = _mm256_cvtepu8_epi32(_mm_srli_si128(x, 8));
    memcpy(&r, &lo, 32);
    memcpy((char *)&r + 32, &hi, 32);
#else
    r = __builtin_convertvector(b, i32x16);
#endif
    return r;
}

// Sixteen signed bytes widened to i32 lanes: one sign-extending instruction where the host has
// it (through the unsigned widening, a flip and a subtraction more, Q8_0's decode ran 25%
// slower).
static inline i32x16 widen_signed(i8x16 b) {
    i32x16 r;
#if defined(__AVX512F__)
    __m128i x;
    memcpy(&x, &b, 16);
    __m512i w = _mm512_cvtepi8_epi32(x);
    memcpy(&r, &w, 64);
#elif defined(__AVX2__)
    __m128i x;
    memcpy(&x, &b, 16);
    __m256i lo = _mm256_cvtepi8_epi32(x), hi = _mm256_cvtepi8_epi32(_mm_srli_si128(x, 8));
    memcpy(&r, &lo, 32);
    memcpy((char *)&r + 32, &hi, 32);
#else
    r = __builtin_convertvector(b, i32x16);
#endif
    return r;
}

static inline f32x16 to_f32(i32x16 v) { return __builtin_convertvector(v, f32x16); }

static inline f32x16 splat(float x) {
    return (f32x16){x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x};
}

static inline float half_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t man = h & 0x3ffu;
    uint32_t bits;
    if (exp == 0x1f) {
        bits = sign | 0x7f800000u | (man << 13);
    } else if (exp != 0) {
        bits = sign | ((exp + 112) << 23) | (man << 13);
    } else if (man == 0) {
        bits = sign;
    } else {
        // Subnormal: normalize the mantissa.
        int e = -1;
        do {
            man <<= 1;
            e++;
        } while ((man & 0x400u) == 0);
        bits = sign | ((uint32_t)(112 - e) << 23) | ((man & 0x3ffu) << 13);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static inline float f16_at(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
#if defined(__F16C__)
    return _cvtsh_ss(h);
#else
    return half_to_f32(h);
#endif
}

// Block sizes (elements, bytes) of the block formats.
static inline uint32_t block_elems(uint32_t f) {
    return f >= W_Q4_K ? 256 : 32;
}

static inline uint32_t block_bytes(uint32_t f) {
    switch (f) {
        case W_Q4_0: return 18;
        case W_Q4_1: return 20;
        case W_Q5_0: return 22;
        case W_Q5_1: return 24;
        case W_Q8_0: return 34;
        case W_Q4_K: return 144;
        case W_Q5_K: return 176;
        case W_Q6_K: return 210;
        default: return 0;
    }
}

static size_t row_bytes(uint32_t f, uint32_t depth) {
    switch (f) {
        case W_F32: return (size_t)depth * 4;
        case W_F16:
        case W_BF16: return (size_t)depth * 2;
        default: return (size_t)depth / block_elems(f) * block_bytes(f);
    }
}

static void dec_f16(const uint8_t *row, uint32_t k0, uint32_t n, float *y) {
    const uint8_t *h = row + 2 * (size_t)k0;
    uint32_t i = 0;
#if defined(__AVX512F__)
    for (; i + 16 <= n; i += 16) {
        __m256i x = _mm256_loadu_si256((const __m256i *)(h + 2 * i));
        _mm512_storeu_ps(y + i, _mm512_cvtph_ps(x));
    }
#elif defined(__F16C__)
    for (; i + 8 <= n; i += 8) {
        __m128i x = _mm_loadu_si128((const __m128i *)(h + 2 * i));
        _mm256_storeu_ps(y + i, _mm256_cvtph_ps(x));
    }
#endif
    for (; i < n; i++) y[i] = f16_at(h + 2 * i);
}

EXACT static void dec_bf16(const uint8_t *row, uint32_t k0, uint32_t n, float *y) {
    const uint16_t *h = (const uint16_t *)(row) + k0;
    uint32_t *out = (uint32_t *)y;
    for (uint32_t i = 0; i < n; i++) out[i] = (uint32_t)h[i] << 16;
}

static const i32x16 LANE = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};

// Q5's fifth bits of elements j and j + 16, at bit 4.
static inline void q5_high(const uint8_t *p, i32x16 *h0, i32x16 *h1) {
    uint32_t qh;
    memcpy(&qh, p, 4);
    u32x16 v = (u32x16){0} + qh;
    *h0 = (i32x16)(((v >> (u32x16)LANE) << 4) & 0x10);
    *h1 = (i32x16)((v >> ((u32x16)LANE + 12)) & 0x10);
}

// One 32-element block of a Q4_0, Q4_1, Q5_0, Q5_1 or Q8_0 row as two vectors of sixteen (ggml's
// operations; a multiply-add may be fused, within an ulp of its value).
static inline void block32(uint32_t f, const uint8_t *b, f32x16 *lo, f32x16 *hi) {
    if (f == W_Q4_0) {
        f32x16 d = splat(f16_at(b));
        i32x16 q = widen(bytes16(b + 2));
        *lo = to_f32((q & 0x0f) - 8) * d;
        *hi = to_f32((q >> 4) - 8) * d;
    } else if (f == W_Q4_1) {
        f32x16 d = splat(f16_at(b)), m = splat(f16_at(b + 2));
        i32x16 q = widen(bytes16(b + 4));
        *lo = to_f32(q & 0x0f) * d + m;
        *hi = to_f32(q >> 4) * d + m;
    } else if (f == W_Q5_0) {
        f32x16 d = splat(f16_at(b));
        i32x16 h0, h1;
        q5_high(b + 2, &h0, &h1);
        i32x16 q = widen(bytes16(b + 6));
        *lo = to_f32(((q & 0x0f) | h0) - 16) * d;
        *hi = to_f32(((q >> 4) | h1) - 16) * d;
    } else if (f == W_Q5_1) {
        f32x16 d = splat(f16_at(b)), m = splat(f16_at(b + 2));
        i32x16 h0, h1;
        q5_high(b + 4, &h0, &h1);
        i32x16 q = widen(bytes16(b + 8));
        *lo = to_f32((q & 0x0f) | h0) * d + m;
        *hi = to_f32((q >> 4) | h1) * d + m;
    } else {
        f32x16 d = splat(f16_at(b));
        i8x16 q0, q1;
        memcpy(&q0, b + 2, 16);
        memcpy(&q1, b + 18, 16);
        *lo = to_f32(widen_signed(q0)) * d;
        *hi = to_f32(widen_signed(q1)) * d;
    }
}


// ggml's get_scale_min_k4.
static inline void scale_min_k4(int j, const uint8_t *q, uint8_t *sc, uint8_t *m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

EXACT static void dec_q4_k(const uint8_t *b, float *y) {
    float d = f16_at(b), min = f16_at(b + 2);
    const uint8_t *scales = b + 4;
    for (int c = 0; c < 4; c++) {
        uint8_t sc, m;
        scale_min_k4(2 * c, scales, &sc, &m);
        float d1 = d * (float)sc, m1 = min * (float)m;
        scale_min_k4(2 * c + 1, scales, &sc, &m);
        float d2 = d * (float)sc, m2 = min * (float)m;
        const uint8_t *q = b + 16 + 32 * c;
        for (int l = 0; l < 32; l += 16) {
            i32x16 v = widen(bytes16(q + l));
            store16(y + 64 * c + l, splat(d1) * to_f32(v & 0x0f) - splat(m1));
            store16(y + 64 * c + 32 + l, splat(d2) * to_f32(v >> 4) - splat(m2));
        }
    }
}

EXACT static void dec_q5_k(const uint8_t *b, float *y) {
    float d = f16_at(b), min = f16_at(b + 2);
    const uint8_t *scales = b + 4, *qh = b + 16;
    for (int c = 0; c < 4; c++) {
        uint8_t sc, m;
        scale_min_k4(2 * c, scales, &sc, &m);
        float d1 = d * (float)sc, m1 = min * (float)m;
        scale_min_k4(2 * c + 1, scales, &sc, &m);
        float d2 = d * (float)sc, m2 = min * (float)m;
        const uint8_t *ql = b + 48 + 32 * c;
        for (int l = 0; l < 32; l += 16) {
            i32x16 h = widen(bytes16(qh + l)), v = widen(bytes16(ql + l));
            i32x16 h1 = ((h >> (2 * c)) & 1) << 4, h2 = ((h >> (2 * c + 1)) & 1) << 4;
            store16(y + 64 * c + l, splat(d1) * to_f32((v & 0x0f) + h1) - splat(m1));
            store16(y + 64 * c + 32 + l, splat(d2) * to_f32((v >> 4) + h2) - splat(m2));
        }
    }
}

EXACT static void dec_q6_k(const uint8_t *b, float *y) {
    float d = f16_at(b + 208);
    for (int n = 0; n < 2; n++) {
        const uint8_t *ql = b + 64 * n, *qh = b + 128 + 32 * n;
        const int8_t *sc = (const int8_t *)(b + 192 + 8 * n);
        float *o = y + 128 * n;
        for (int l = 0; l < 32; l += 16) {
            int is = l / 16;
            i32x16 h = widen(bytes16(qh + l));
            i32x16 a = widen(bytes16(ql + l)), c = widen(bytes16(ql + l + 32));
            i32x16 q1 = ((a & 0x0f) | ((h & 3) << 4)) - 32;
            i32x16 q2 = ((c & 0x0f) | (((h >> 2) & 3) << 4)) - 32;
            i32x16 q3 = ((a >> 4) | (((h >> 4) & 3) << 4)) - 32;
            i32x16 q4 = ((c >> 4) | (((h >> 6) & 3) << 4)) - 32;
            store16(o + l, splat(d * (float)sc[is]) * to_f32(q1));
            store16(o + l + 32, splat(d * (float)sc[is + 2]) * to_f32(q2));
            store16(o + l + 64, splat(d * (float)sc[is + 4]) * to_f32(q3));
            store16(o + l + 96, splat(d * (float)sc[is + 6]) * to_f32(q4));
        }
    }
}

// Elements [k0, k0 + n) of a weight row into y; k0 and n are whole blocks.
static void decode(uint32_t f, const uint8_t *row, uint32_t k0, uint32_t n, float *y) {
    if (f == W_F16) {
        dec_f16(row, k0, n, y);
        return;
    }
    if (f == W_BF16) {
        dec_bf16(row, k0, n, y);
        return;
    }
    uint32_t be = block_elems(f), bb = block_bytes(f);
    const uint8_t *b = row + (size_t)(k0 / be) * bb;
    for (uint32_t i = 0; i < n; i += be, b += bb, y += be) {
        switch (f) {
            case W_Q4_0:
            case W_Q4_1:
            case W_Q5_0:
            case W_Q5_1:
            case W_Q8_0: {
                f32x16 lo, hi;
                block32(f, b, &lo, &hi);
                store16(y, lo);
                store16(y + 16, hi);
                break;
            }
            case W_Q4_K: dec_q4_k(b, y); break;
            case W_Q5_K: dec_q5_k(b, y); break;
            case W_Q6_K: dec_q6_k(b, y); break;
            default: break;
        }
    }
}

// The tile: rm left-side rows (stride lda) by RN weight rows (w[c], each kc elements) into out
// (stride ldo), of which the first rn are written; `add` accumulates onto what out holds. Only
// rm is a constant where it is inlined (a missing weight row repeats another, its sums not
// written), which keeps the library quick to compile.
static inline __attribute__((always_inline)) void tile(int rm, int rn, const float *a,
                                                       size_t lda, const float *const *w,
                                                       uint32_t kc, float *out, size_t ldo,
                                                       int add) {
    vf acc[RM][RN];
#pragma GCC unroll 8
    for (int r = 0; r < RM; r++)
#pragma GCC unroll 8
        for (int c = 0; c < RN; c++) acc[r][c] = (vf){0};
    uint32_t kv = kc - kc % VW;
    for (uint32_t k = 0; k < kv; k += VW) {
        vf wv[RN];
#pragma GCC unroll 8
        for (int c = 0; c < RN; c++) wv[c] = vload(w[c] + k);
#pragma GCC unroll 8
        for (int r = 0; r < RM; r++) {
            if (r >= rm) break;
            vf av = vload(a + r * lda + k);
#pragma GCC unroll 8
            for (int c = 0; c < RN; c++) acc[r][c] += av * wv[c];
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < RM; r++) {
        if (r >= rm) break;
#pragma GCC unroll 8
        for (int c = 0; c < RN; c++) {
            if (c >= rn) break;
            float s = hsum(acc[r][c]);
            for (uint32_t k = kv; k < kc; k++) s += a[r * lda + k] * w[c][k];
            float *o = out + r * ldo + c;
            *o = add ? *o + s : s;
        }
    }
}

static void any_tile(int rm, int rn, const float *a, size_t lda, const float *const *w,
                     uint32_t kc, float *out, size_t ldo, int add) {
    switch (rm) {
        case 1: tile(1, rn, a, lda, w, kc, out, ldo, add); break;
        case 2: tile(2, rn, a, lda, w, kc, out, ldo, add); break;
        case 3: tile(3, rn, a, lda, w, kc, out, ldo, add); break;
        default: tile(RM, rn, a, lda, w, kc, out, ldo, add); break;
    }
}

static inline float hsum16(f32x16 v) {
    float s = 0.0f;
    vf part;
    for (int i = 0; i < 16; i += VW) {
        memcpy(&part, (char *)&v + 4 * i, sizeof part);
        s += hsum(part);
    }
    return s;
}

// A decode step's rows (at most FUSED_ROWS) against any stored format but f32 (read in place
// by the panel form): each block decoded into registers (a K-quant superblock into the stack)
// and multiplied there.
#define FUSED_ROWS 4
#define FUSED_COLS 4
// Bytes ahead of each row's block requested from memory.
#define FUSED_AHEAD 256

static int fused_format(uint32_t f) {
    return f != W_F32;
}

// Sixteen f16 or bf16 weights as f32.
static inline f32x16 halves16(uint32_t f, const uint8_t *p) {
    f32x16 r;
    if (f == W_BF16) {
        typedef uint16_t u16x16 __attribute__((vector_size(32)));
        u16x16 h;
        memcpy(&h, p, 32);
        u32x16 w = __builtin_convertvector(h, u32x16) << 16;
        memcpy(&r, &w, 64);
        return r;
    }
#if defined(__AVX512F__)
    __m512 v = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
    memcpy(&r, &v, 64);
#elif defined(__F16C__)
    __m256 a = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
    __m256 b = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p + 16)));
    memcpy(&r, &a, 32);
    memcpy((char *)&r + 32, &b, 32);
#else
    for (int i = 0; i < 16; i++) r[i] = f16_at(p + 2 * i);
#endif
    return r;
}

// `nrows` and `format` are constants where this is inlined, so the sums stay in registers and
// the decode is one straight path.
static inline __attribute__((always_inline)) void fused_rows(const struct contraction *j,
                                                             uint32_t col0, uint32_t col1,
                                                             const uint32_t nrows,
                                                             const uint32_t format) {
    const int half = format == W_F16 || format == W_BF16;
    // K-quant superblocks (256 elements) are decoded a whole block at a time into the stack
    // (their scales are per sub-block); the others go 32 elements a step, halves 64 bytes of
    // them (a tail of fewer is summed alone).
    const int super = format >= W_Q4_K;
    const uint32_t step = super ? 256 : 32;
    const uint32_t bb = half ? 64 : block_bytes(format), blocks = j->depth / step;
    const size_t rb = row_bytes(format, j->depth);
    // FUSED_COLS weight rows walked together: as many streams of weights in flight, where one
    // row at a time waits on each block's load.
    for (uint32_t n = col0; n < col1; n += FUSED_COLS) {
        uint32_t nc = col1 - n < FUSED_COLS ? col1 - n : FUSED_COLS;
        const uint8_t *rows[FUSED_COLS];
        for (uint32_t c = 0; c < FUSED_COLS; c++)
            rows[c] = j->weights + (size_t)(n + (c < nc ? c : 0)) * rb;
        f32x16 acc[FUSED_ROWS][FUSED_COLS];
        for (uint32_t m = 0; m < nrows; m++)
            for (uint32_t c = 0; c < FUSED_COLS; c++) acc[m][c] = (f32x16){0};
        for (uint32_t i = 0; i < blocks; i++) {
            for (uint32_t c = 0; c < FUSED_COLS; c++) {
                f32x16 lo, hi;
                const uint8_t *at = rows[c] + (size_t)i * bb;
                __builtin_prefetch(at + FUSED_AHEAD, 0, 3);
                if (super) {
                    float y[256] __attribute__((aligned(64)));
                    decode(format, at, 0, 256, y);
                    for (uint32_t m = 0; m < nrows; m++) {
                        const float *x = j->lhs + (size_t)m * j->depth + 256 * (size_t)i;
                        f32x16 s = acc[m][c];
                        for (int e = 0; e < 256; e += 32)
                            s += load16(y + e) * load16(x + e) +
                                 load16(y + e + 16) * load16(x + e + 16);
                        acc[m][c] = s;
                    }
                    continue;
                }
                if (half) {
                    lo = halves16(format, at);
                    hi = halves16(format, at + 32);
                } else {
                    block32(format, at, &lo, &hi);
                }
                for (uint32_t m = 0; m < nrows; m++) {
                    const float *x = j->lhs + (size_t)m * j->depth + 32 * (size_t)i;
                    acc[m][c] += lo * load16(x) + hi * load16(x + 16);
                }
            }
        }
        for (uint32_t m = 0; m < nrows; m++)
            for (uint32_t c = 0; c < nc; c++) {
                float sum = hsum16(acc[m][c]);
                // A half row's last depth % 32 elements.
                for (uint32_t k = step * blocks; k < j->depth; k++) {
                    const uint8_t *w = rows[c] + 2 * (size_t)k;
                    uint16_t h;
                    memcpy(&h, w, 2);
                    uint32_t bits = (uint32_t)h << 16;
                    float wf;
                    memcpy(&wf, &bits, 4);
                    float v = format == W_F16 ? f16_at(w) : wf;
                    sum += j->lhs[(size_t)m * j->depth + k] * v;
                }
                j->out[(size_t)m * j->cols + n + c] = sum;
            }
    }
}

static void contract_few(const struct contraction *j, uint32_t col0, uint32_t col1);

// One row (a decode step) with the format a constant; two to four rows share a path.
#define FUSED_CASE(F)                                        \
    case F:                                                  \
        if (j->rows == 1)                                    \
            fused_rows(j, col0, col1, 1, F);                 \
        else                                                 \
            fused_rows(j, col0, col1, j->rows, F);           \
        break;

static void contract_fused(const struct contraction *j, uint32_t col0, uint32_t col1) {
    switch (j->format) {
        FUSED_CASE(W_Q4_0)
        FUSED_CASE(W_Q4_1)
        FUSED_CASE(W_Q5_0)
        FUSED_CASE(W_Q5_1)
        FUSED_CASE(W_Q8_0)
        FUSED_CASE(W_F16)
        FUSED_CASE(W_BF16)
        FUSED_CASE(W_Q4_K)
        FUSED_CASE(W_Q5_K)
        FUSED_CASE(W_Q6_K)
        default: contract_few(j, col0, col1); break;
    }
}

// Few rows (a decode step): columns [col0, col1) in the dot-product form above, the weights
// read once.
static void contract_few(const struct contraction *j, uint32_t col0, uint32_t col1) {
    float panel[RN * KC] __attribute__((aligned(64)));
    const size_t rb = row_bytes(j->format, j->depth);
    const size_t lda = j->depth, ldo = j->cols;
    for (uint32_t n = col0; n < col1; n += RN) {
        int rn = (int)(col1 - n < RN ? col1 - n : RN);
        for (uint32_t k0 = 0; k0 < j->depth; k0 += KC) {
            uint32_t kc = j->depth - k0 < KC ? j->depth - k0 : KC;
            const float *w[RN];
            for (int c = 0; c < RN; c++) {
                // A column past the last repeats the last; its sums are not written.
                const uint8_t *row = j->weights + (size_t)(n + (c < rn ? c : rn - 1)) * rb;
                if (j->format == W_F32) {
                    w[c] = (const float *)row + k0;
                } else {
                    decode(j->format, row, k0, kc, panel + (size_t)c * KC);
                    w[c] = panel + (size_t)c * KC;
                }
            }
            for (uint32_t m = 0; m < j->rows; m += RM) {
                int rm = (int)(j->rows - m < RM ? j->rows - m : RM);
                any_tile(rm, rn, j->lhs + (size_t)m * lda + k0, lda, w, kc,
                         j->out + (size_t)m * ldo + n, ldo, k0 != 0);
            }
        }
    }
}

// Many rows (a prefill chunk): the textbook blocked product. A chunk of GK elements of k of
// GN weight rows is decoded and packed k-major in micro-panels of GR columns; a GQ x GR tile
// of sums stays in registers while each step of k broadcasts GQ left-side values (read from
// their rows in place) against two vectors of weights.
#define GQ 8
#define GV 2
#define GR (GV * VW)
#define GK 256
#define GM 96
#define GN 1024
#define GEMM_MIN_ROWS 16
_Static_assert(GN % GR == 0, "a block of weight rows is whole micro-panels");

// x in every lane (an initializer, which GCC turns into one broadcast).
static inline vf vsplat(float x) {
#if VW == 16
    return (vf){x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x};
#elif VW == 8
    return (vf){x, x, x, x, x, x, x, x};
#else
    return (vf){x, x, x, x};
#endif
}

// The GQ x GR tile at c (stride ldc) += (or =, when `first`) a . bp over kc steps, a[r] the
// left-side rows (read in place: eight sequential streams); only rows < mr and columns < nr
// are written.
static inline void gemm_tile(uint32_t kc, const float *const *a, const float *bp, float *c,
                             size_t ldc, int first, int mr, int nr) {
    vf acc[GQ][GV];
#pragma GCC unroll 8
    for (int r = 0; r < GQ; r++)
#pragma GCC unroll 4
        for (int v = 0; v < GV; v++) acc[r][v] = (vf){0};
#pragma GCC unroll 4
    for (uint32_t k = 0; k < kc; k++) {
        vf b[GV];
#pragma GCC unroll 4
        for (int v = 0; v < GV; v++) b[v] = vload(bp + (size_t)k * GR + v * VW);
#pragma GCC unroll 8
        for (int r = 0; r < GQ; r++) {
            vf x = vsplat(a[r][k]);
#pragma GCC unroll 4
            for (int v = 0; v < GV; v++) acc[r][v] += x * b[v];
        }
    }
    if (mr == GQ && nr == GR) {
#pragma GCC unroll 8
        for (int r = 0; r < GQ; r++) {
            float *row = c + (size_t)r * ldc;
#pragma GCC unroll 4
            for (int v = 0; v < GV; v++) {
                if (!first) acc[r][v] += vload(row + v * VW);
                memcpy(row + v * VW, &acc[r][v], sizeof(vf));
            }
        }
        return;
    }
    float t[GQ][GR];
    memcpy(t, acc, sizeof t);
    for (int r = 0; r < mr; r++)
        for (int q = 0; q < nr; q++) {
            float *o = c + (size_t)r * ldc + q;
            *o = first ? t[r][q] : *o + t[r][q];
        }
}

static void contract_many(const struct contraction *j, uint32_t col0, uint32_t col1) {
    float rows[GR * GK] __attribute__((aligned(64)));
    // A megabyte, once per call (a call is a chunk of a prefill's product); without it the
    // few-rows form computes the same sums, slower.
    float *bpack = aligned_alloc(64, sizeof(float) * GN * GK);
    if (!bpack) {
        contract_few(j, col0, col1);
        return;
    }
    const size_t rb = row_bytes(j->format, j->depth);
    const size_t lda = j->depth, ldc = j->cols;
    for (uint32_t jc = col0; jc < col1; jc += GN) {
        uint32_t nc = col1 - jc < GN ? col1 - jc : GN;
        for (uint32_t pc = 0; pc < j->depth; pc += GK) {
            uint32_t kc = j->depth - pc < GK ? j->depth - pc : GK;
            // The weights, decoded and packed: micro-panel p holds columns jc + p*GR ..,
            // element (k, c) at k*GR + c, zeros past the last column.
            for (uint32_t p = 0; p * GR < nc; p++) {
                float *dst = bpack + (size_t)p * GR * GK;
                for (uint32_t c = 0; c < GR; c++) {
                    uint32_t n = jc + p * GR + c;
                    float *src = rows + (size_t)c * GK;
                    if (n >= jc + nc) {
                        memset(src, 0, kc * sizeof(float));
                    } else if (j->format == W_F32) {
                        memcpy(src, (const float *)(j->weights + (size_t)n * rb) + pc,
                               kc * sizeof(float));
                    } else {
                        decode(j->format, j->weights + (size_t)n * rb, pc, kc, src);
                    }
                }
                for (uint32_t k = 0; k < kc; k++)
                    for (uint32_t c = 0; c < GR; c++)
                        dst[(size_t)k * GR + c] = rows[(size_t)c * GK + k];
            }
            for (uint32_t ic = 0; ic < j->rows; ic += GM) {
                uint32_t mc = j->rows - ic < GM ? j->rows - ic : GM;
                for (uint32_t p = 0; p * GR < nc; p++) {
                    int nr = (int)(nc - p * GR < GR ? nc - p * GR : GR);
                    for (uint32_t q = 0; q * GQ < mc; q++) {
                        int mr = (int)(mc - q * GQ < GQ ? mc - q * GQ : GQ);
                        // Rows past the last repeat it; their sums are not written.
                        const float *a[GQ];
                        for (int r = 0; r < GQ; r++)
                            a[r] = j->lhs + (size_t)(ic + q * GQ + (r < mr ? r : mr - 1)) * lda + pc;
                        gemm_tile(kc, a, bpack + (size_t)p * GR * GK,
                                  j->out + (size_t)(ic + q * GQ) * ldc + jc + p * GR, ldc,
                                  pc == 0, mr, nr);
                    }
                }
            }
        }
    }
    free(bpack);
}

// Integer products (a prefill chunk's rows against block-quantized weights, where the graph
// rounds the left side to 8-bit blocks: poot-graph-plan's `activation_blocks`). Every format's
// block is read as unsigned integers u, a scale and an offset per sub-block of SB elements (32,
// 16 for Q6_K): w = scale * u + offset, the offset folding ggml's centring (Q4_0's -8 d) and
// minimum. The left side's block of 32 is d * q, so a sub-block's share of a sum is
// d * (scale * sum(u q) + offset * sum(q)), the integer sums exact.

// Rounds rows [row0, row1) of the left side as the graph does: d = max |x| / 127, q = round(x *
// (1 / d)) to nearest even (0 where d is 0), each an f32 operation.
void poot_contract_round(const struct contraction *j, uint32_t row0, uint32_t row1) {
    const struct rounded_rows *r = j->rounded;
    const uint32_t blocks = j->depth / 32;
    for (uint32_t m = row0; m < row1; m++) {
        for (uint32_t b = 0; b < blocks; b++) {
            size_t at = (size_t)m * j->depth + 32 * (size_t)b;
            const float *x = j->lhs + at;
            float amax = 0.0f;
            for (int i = 0; i < 32; i++) {
                float a = x[i] < 0 ? -x[i] : x[i];
                amax = a > amax ? a : amax;
            }
            float d = amax / 127.0f;
            float id = d > 0.0f ? 1.0f / d : 0.0f;
            int8_t *q = r->q + at;
#if defined(__AVX512F__)
            __m512 v = _mm512_set1_ps(id);
            for (int h = 0; h < 2; h++) {
                __m512i n = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(x + 16 * h), v));
                _mm_storeu_si128((__m128i *)(q + 16 * h), _mm512_cvtepi32_epi8(n));
            }
#else
            for (int i = 0; i < 32; i++) q[i] = (int8_t)__builtin_rintf(x[i] * id);
#endif
            int32_t s0 = 0, s1 = 0;
            for (int i = 0; i < 16; i++) {
                s0 += q[i];
                s1 += q[16 + i];
            }
            size_t blk = (size_t)m * blocks + b;
            r->scale[blk] = d;
            r->sum16[2 * blk] = s0;
            r->sum16[2 * blk + 1] = s1;
        }
    }
}

// Elements of a sub-block: one scale and offset.
static inline uint32_t sub_elems(uint32_t f) { return f == W_Q6_K ? 16 : 32; }

// One block of format f at b as unsigned integers u (block_elems(f) of them) with a scale and
// offset per sub-block.
EXACT static void unpack_block(uint32_t f, const uint8_t *b, uint8_t *u, float *scale,
                               float *offset) {
    switch (f) {
        case W_Q4_0:
        case W_Q4_1:
        case W_Q5_0:
        case W_Q5_1: {
            int one = f == W_Q4_1 || f == W_Q5_1, five = f == W_Q5_0 || f == W_Q5_1;
            float d = f16_at(b);
            uint32_t qh = 0;
            if (five) memcpy(&qh, b + 2 + 2 * one, 4);
            const uint8_t *qs = b + 2 + 2 * one + 4 * five;
            for (int i = 0; i < 16; i++) {
                u[i] = (qs[i] & 15) | (((qh >> i) & 1) << 4);
                u[i + 16] = (qs[i] >> 4) | (((qh >> (i + 16)) & 1) << 4);
            }
            scale[0] = d;
            offset[0] = one ? f16_at(b + 2) : (five ? -16.0f : -8.0f) * d;
            break;
        }
        case W_Q8_0: {
            float d = f16_at(b);
            for (int i = 0; i < 32; i++) u[i] = b[2 + i] ^ 0x80;
            scale[0] = d;
            offset[0] = -128.0f * d;
            break;
        }
        case W_Q4_K:
        case W_Q5_K: {
            int five = f == W_Q5_K;
            float d = f16_at(b), min = f16_at(b + 2);
            const uint8_t *qh = b + 16, *ql = b + 16 + 32 * five;
            for (int c = 0; c < 4; c++) {
                for (int h = 0; h < 2; h++) {
                    uint8_t sc, m;
                    scale_min_k4(2 * c + h, b + 4, &sc, &m);
                    scale[2 * c + h] = d * (float)sc;
                    offset[2 * c + h] = -(min * (float)m);
                }
                for (int l = 0; l < 32; l++) {
                    uint8_t q = ql[32 * c + l];
                    uint8_t h0 = five ? ((qh[l] >> (2 * c)) & 1) << 4 : 0;
                    uint8_t h1 = five ? ((qh[l] >> (2 * c + 1)) & 1) << 4 : 0;
                    u[64 * c + l] = (q & 15) + h0;
                    u[64 * c + 32 + l] = (q >> 4) + h1;
                }
            }
            break;
        }
        case W_Q6_K: {
            float d = f16_at(b + 208);
            const int8_t *sc = (const int8_t *)(b + 192);
            for (int n = 0; n < 2; n++) {
                const uint8_t *ql = b + 64 * n, *qh = b + 128 + 32 * n;
                uint8_t *o = u + 128 * n;
                for (int l = 0; l < 32; l++) {
                    o[l] = (ql[l] & 15) | ((qh[l] & 3) << 4);
                    o[l + 32] = (ql[l + 32] & 15) | (((qh[l] >> 2) & 3) << 4);
                    o[l + 64] = (ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4);
                    o[l + 96] = (ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4);
                }
            }
            for (int t = 0; t < 16; t++) {
                scale[t] = d * (float)sc[t];
                offset[t] = -32.0f * scale[t];
            }
            break;
        }
        default: break;
    }
}

// A panel holds IR weight rows packed for the tile, sub-block by sub-block: its integers in
// groups of four along k (group g of column c at (g * IR + c) * 4), then IR scales, IR offsets.
#define IR 32
#define IQ 6
#define IGK 256
// Weight rows packed at a time: the panels (at most 96 kB) live on the stack.
#define IGN 256
#define PANELS_BYTES ((IGN / IR) * (IGK / 16) * (16 * IR + 8 * IR))

static inline size_t panel_stride(uint32_t sb) { return (size_t)sb * IR + 8 * IR; }

// Columns jc.. (nc of them) over k in [pc, pc + kc) into panels.
static void pack_integer(const struct contraction *j, uint32_t jc, uint32_t nc, uint32_t pc,
                         uint32_t kc, uint8_t *panels) {
    const uint32_t f = j->format, be = block_elems(f), bb = block_bytes(f), sb = sub_elems(f);
    const size_t rb = row_bytes(f, j->depth), stride = panel_stride(sb);
    const uint32_t subs = kc / sb;
    uint8_t u[256];
    float scale[16], offset[16];
    for (uint32_t p = 0; p * IR < nc; p++) {
        uint8_t *panel = panels + (size_t)p * subs * stride;
        for (uint32_t c = 0; c < IR; c++) {
            uint32_t n = jc + p * IR + c;
            if (p * IR + c >= nc) {
                for (uint32_t s = 0; s < subs; s++) {
                    uint8_t *at = panel + s * stride;
                    for (uint32_t g = 0; g < sb / 4; g++) memset(at + (g * IR + c) * 4, 0, 4);
                    float zero = 0.0f;
                    memcpy(at + sb * IR + 4 * c, &zero, 4);
                    memcpy(at + sb * IR + 4 * IR + 4 * c, &zero, 4);
                }
                continue;
            }
            const uint8_t *row = j->weights + (size_t)n * rb;
            for (uint32_t k = pc; k < pc + kc; k += be) {
                unpack_block(f, row + (size_t)(k / be) * bb, u, scale, offset);
                for (uint32_t t = 0; t < be / sb; t++) {
                    uint8_t *at = panel + ((k - pc) / sb + t) * stride;
                    for (uint32_t g = 0; g < sb / 4; g++)
                        memcpy(at + (g * IR + c) * 4, u + t * sb + 4 * g, 4);
                    memcpy(at + sb * IR + 4 * c, &scale[t], 4);
                    memcpy(at + sb * IR + 4 * IR + 4 * c, &offset[t], 4);
                }
            }
        }
    }
}

// The IQ x IR tile at c (stride ldc) += (or =, when `first`) the rows' share over `subs`
// sub-blocks of sb elements: q[r] the rows' integers, d[r] their scales per 32, s[r] their
// sums per 16 (all from the chunk's first element). Only rows < mr and columns < nr are
// written.
static inline __attribute__((always_inline)) void integer_tile(
    const uint32_t sb, uint32_t subs, const int8_t *const *q, const float *const *d,
    const int32_t *const *s, const uint8_t *panel, float *c, size_t ldc, int first, int mr,
    int nr) {
    const size_t stride = panel_stride(sb);
#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
    __m512 acc[IQ][2];
    for (int r = 0; r < IQ; r++) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
    for (uint32_t t = 0; t < subs; t++) {
        const uint8_t *p = panel + t * stride;
        __m512i ip[IQ][2];
#pragma GCC unroll 8
        for (int r = 0; r < IQ; r++) ip[r][0] = ip[r][1] = _mm512_setzero_si512();
#pragma GCC unroll 8
        for (uint32_t g = 0; g < sb / 4; g++) {
            __m512i b0 = _mm512_load_si512(p + g * 128), b1 = _mm512_load_si512(p + g * 128 + 64);
#pragma GCC unroll 8
            for (int r = 0; r < IQ; r++) {
                int32_t four;
                memcpy(&four, q[r] + t * sb + 4 * g, 4);
                __m512i a = _mm512_set1_epi32(four);
                ip[r][0] = _mm512_dpbusd_epi32(ip[r][0], b0, a);
                ip[r][1] = _mm512_dpbusd_epi32(ip[r][1], b1, a);
            }
        }
        const float *sc = (const float *)(p + sb * IR), *of = sc + IR;
        __m512 sc0 = _mm512_load_ps(sc), sc1 = _mm512_load_ps(sc + 16);
        __m512 of0 = _mm512_load_ps(of), of1 = _mm512_load_ps(of + 16);
#pragma GCC unroll 8
        for (int r = 0; r < IQ; r++) {
            float dr = d[r][t * sb / 32];
            int32_t sum = sb == 32 ? s[r][2 * t] + s[r][2 * t + 1] : s[r][t];
            __m512 dv = _mm512_set1_ps(dr), mv = _mm512_set1_ps(dr * (float)sum);
            acc[r][0] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ip[r][0]), _mm512_mul_ps(dv, sc0),
                                        _mm512_fmadd_ps(mv, of0, acc[r][0]));
            acc[r][1] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ip[r][1]), _mm512_mul_ps(dv, sc1),
                                        _mm512_fmadd_ps(mv, of1, acc[r][1]));
        }
    }
    float t[IQ][IR];
    for (int r = 0; r < IQ; r++) {
        _mm512_storeu_ps(t[r], acc[r][0]);
        _mm512_storeu_ps(t[r] + 16, acc[r][1]);
    }
#else
    float t[IQ][IR];
    memset(t, 0, sizeof t);
    for (uint32_t k = 0; k < subs; k++) {
        const uint8_t *p = panel + k * stride;
        const float *sc = (const float *)(p + sb * IR), *of = sc + IR;
        for (int r = 0; r < IQ; r++) {
            float dr = d[r][k * sb / 32];
            int32_t sum = sb == 32 ? s[r][2 * k] + s[r][2 * k + 1] : s[r][k];
            for (int n = 0; n < IR; n++) {
                int32_t ip = 0;
                for (uint32_t e = 0; e < sb; e++)
                    ip += (int32_t)p[((e / 4) * IR + n) * 4 + e % 4] * q[r][k * sb + e];
                t[r][n] += dr * (sc[n] * (float)ip + of[n] * (float)sum);
            }
        }
    }
#endif
    for (int r = 0; r < mr; r++)
        for (int n = 0; n < nr; n++) {
            float *o = c + (size_t)r * ldc + n;
            *o = first ? t[r][n] : *o + t[r][n];
        }
}

static void contract_integer(const struct contraction *j, uint32_t col0, uint32_t col1) {
    const uint32_t sb = sub_elems(j->format);
    const size_t stride = panel_stride(sb);
    uint8_t panels[PANELS_BYTES] __attribute__((aligned(64)));
    const struct rounded_rows *rr = j->rounded;
    const size_t ldc = j->cols;
    for (uint32_t jc = col0; jc < col1; jc += IGN) {
        uint32_t nc = col1 - jc < IGN ? col1 - jc : IGN;
        for (uint32_t pc = 0; pc < j->depth; pc += IGK) {
            uint32_t kc = j->depth - pc < IGK ? j->depth - pc : IGK;
            uint32_t subs = kc / sb;
            pack_integer(j, jc, nc, pc, kc, panels);
            for (uint32_t ic = 0; ic < j->rows; ic += GM) {
                uint32_t mc = j->rows - ic < GM ? j->rows - ic : GM;
                for (uint32_t p = 0; p * IR < nc; p++) {
                    int nr = (int)(nc - p * IR < IR ? nc - p * IR : IR);
                    for (uint32_t t = 0; t * IQ < mc; t++) {
                        int mr = (int)(mc - t * IQ < IQ ? mc - t * IQ : IQ);
                        // Rows past the last repeat it; their sums are not written.
                        const int8_t *q[IQ];
                        const float *d[IQ];
                        const int32_t *s[IQ];
                        for (int r = 0; r < IQ; r++) {
                            size_t m = ic + t * IQ + (r < mr ? r : mr - 1);
                            q[r] = rr->q + m * j->depth + pc;
                            d[r] = rr->scale + (m * j->depth + pc) / 32;
                            s[r] = rr->sum16 + (m * j->depth + pc) / 16;
                        }
                        const uint8_t *panel = panels + (size_t)p * subs * stride;
                        float *c = j->out + (size_t)(ic + t * IQ) * ldc + jc + p * IR;
                        if (sb == 32)
                            integer_tile(32, subs, q, d, s, panel, c, ldc, pc == 0, mr, nr);
                        else
                            integer_tile(16, subs, q, d, s, panel, c, ldc, pc == 0, mr, nr);
                    }
                }
            }
        }
    }
}

// Columns [col0, col1) of the contraction, for every row.
void poot_contract(const struct contraction *j, uint32_t col0, uint32_t col1) {
    if (j->rounded)
        contract_integer(j, col0, col1);
    else if (j->rows >= GEMM_MIN_ROWS)
        contract_many(j, col0, col1);
    else if (j->rows <= FUSED_ROWS && fused_format(j->format))
        contract_fused(j, col0, col1);
    else
        contract_few(j, col0, col1);
}

// Columns a chunk of the caller's should be a multiple of.
uint32_t poot_contract_columns_per_tile(void) { return GR; }
