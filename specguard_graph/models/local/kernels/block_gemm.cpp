// Matmul over GGUF's own quantised blocks (Q8_0, Q5_0, Q4_K, Q6_K) whose every output is one
// fixed sum, whatever the rows.
//
// The weights are the file's bytes, reordered at load (`blocks/panels.py`): the blocks of eight
// consecutive outputs are interleaved so that one vector of 16 int16 holds weights 2j and 2j+1
// of each of the eight outputs (lanes = outputs). w = s_g * q + o_g for each group g of 32
// weights (Q6_K: one scale per 16). The activations of each row are rounded to int16 with one
// float scale per group of 32 (dx_g = max|x| / 32767), from that row alone. Then output n is
//
//   y[m, n] = sum_g cvt(isum[m, n, g]) * (dx[m, g] * s[n, g])  -  sum_g o[n, g] * (dx * sum xq)[m, g]
//
// with isum the exact integer dot product of the group (Q6_K: of each half), and both float sums
// taken in group order, one chain per output (its lane). Integers are exact, so any instruction
// that forms them gives the same value; the float part is one per-lane sequence of IEEE ops, the
// same for every row count (rows only share the unpacking of each weight vector), thread count
// (threads split the panels, never a sum) and instruction set: the panel code is compiled twice,
// for AVX2 + FMA + F16C and for AVX-512 VNNI (`block_panels.inc`), and both give the same bits.
// int16 keeps an activation to 1/65534 of its group's largest, finer than bfloat16 for all but
// a group's smallest elements; `benchmarks/fidelity.py` measures what that does to the top-1.
//
// Speed: each pair of weights is unpacked once per tile of up to `kRows` rows and met by one
// `vpmaddwd` per row; the float work is per group and row, for eight outputs at once. A decode
// streams each panel's bytes once (`kAhead` prefetch); a prefill keeps a chunk of panels in cache
// while all its row tiles pass, each over one k slice at a time (`kSliceWeights`).
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

namespace {

enum Fmt : int64_t { kQ8_0 = 8, kQ5_0 = 6, kQ4_K = 12, kQ6_K = 14 };  // ggml's type ids
constexpr int64_t kGroup = 32;
constexpr int64_t kLanes = 8;            // outputs per panel
constexpr int64_t kRows = 4;             // rows of x per register tile
constexpr int64_t kChunkBytes = 1 << 17;  // panels kept in cache while the row tiles pass
// Prefetch distance in a panel's stream: 1-2 KB ahead read a decode's weights from memory at
// 1.3x the rate 4 KB ahead did (docs/numerics.md, "Prefetch distance"). A macro, so that
// benchmarks/probes/prefetch_sweep.py can build the kernel at other distances; sums unchanged.
#ifndef SPECGUARD_AHEAD
#define SPECGUARD_AHEAD 2048
#endif
constexpr int64_t kAhead = SPECGUARD_AHEAD;
constexpr int64_t kMaxChunk = 32;         // panels per chunk, at most
constexpr int64_t kSliceWeights = 2048;  // k per slice when several rows meet a panel
// int8 activations meet quads from this many rows; a macro, so that a probe can build the kernel
// at other thresholds (the sums are the same either way)
#ifndef SPECGUARD_QUAD_ROWS
#define SPECGUARD_QUAD_ROWS 8
#endif
constexpr int64_t kQuadRows = SPECGUARD_QUAD_ROWS;
constexpr int64_t kAmxMinRows = 16;      // fewer rows run the panel code where AMX runs

struct Layout {
  int64_t block_weights, block_bytes;  // per output; a panel's block is kLanes times the bytes
};

// {0, 0}: not a block format this kernel reads
constexpr Layout block_layout(int64_t fmt) {
  return fmt == kQ8_0   ? Layout{32, 34}
         : fmt == kQ5_0 ? Layout{32, 22}
         : fmt == kQ4_K ? Layout{256, 144}
         : fmt == kQ6_K ? Layout{256, 210}
                        : Layout{0, 0};
}

template <int F>
constexpr int64_t kPanelBlock = kLanes * block_layout(F).block_bytes;

// One row's activations: int16 values in order, per group the scale and scale * sum, and per
// half group (16) the exact sum of the values (Q6_K's -32 is taken off the integer sums).
struct Act {
  const int16_t* q;
  const float* d;
  const float* s;
  const int32_t* h;
  const int8_t* b;  // int8 activations: the same values as bytes (else null)
  const int32_t* e;  // per group, its `n` int16 values as k << 16 | uint16(x) (their b bytes: 0)
  int n;             // int16 values per group among int8 ones (0: all int8)
};

// Memory each thread keeps from call to call, grown to the largest call it has seen (not
// zeroed): a prefill runs the kernel hundreds of times, and fresh buffers cost more in page
// faults and zeroing than quantising the activations does.
template <typename T, int Slot>
T* scratch(size_t n) {
  static thread_local std::unique_ptr<T[]> buf;
  static thread_local size_t size = 0;
  if (size < n) buf.reset(new T[n]), size = n;
  return buf.get();
}

inline __m256 halves(const uint8_t* p) {  // eight float16 -> eight float32
  return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)p));
}
inline __m256i bytes16(const uint8_t* p) {  // sixteen uint8 -> sixteen int16
  return _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i*)p));
}

}  // namespace

namespace avx2 {
#define SPECGUARD_VNNI 0
#include "block_panels.inc"
#undef SPECGUARD_VNNI
}  // namespace avx2

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512vnni")
namespace vnni {
#define SPECGUARD_VNNI 1
#include "block_panels.inc"
#undef SPECGUARD_VNNI
}  // namespace vnni
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512vnni,amx-tile,amx-int8")
namespace amx {
#define SPECGUARD_VNNI 1
#include "block_panels.inc"
#include "block_amx.inc"
#undef SPECGUARD_VNNI
}  // namespace amx
#pragma GCC pop_options

namespace {

Layout layout(int64_t fmt) {
  const Layout l = block_layout(fmt);
  TORCH_CHECK(l.block_bytes, "block_mm: unsupported block format ", fmt,
              " (Q8_0, Q5_0, Q4_K, Q6_K)");
  return l;
}

inline int32_t hsum(__m256i v) {  // eight int32 -> their sum (integers: any order)
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
  return _mm_cvtsi128_si32(_mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1)));
}

// Row m of x -> int16 values and per-group scales, from that row alone (and, for the AMX copy,
// the values' high and low bytes). Per group of 32:
//   dx = max|x| / 32767,  q = clamp(round_half_even(x / dx), -32767, 32767)  (0 where dx = 0)
// Vectorised, yet the same bits as that formula taken element by element: max is exact, and
// IEEE division and rounding give each lane what the scalar operation gives it. A NaN element
// counts as 0 in the max and rounds to -32767 (`tests/test_blocks.py` pins all of it).
//
// With `n` > 0 (int8 levels only) a group's n largest |x| (the first of equals; never a NaN) are
// kept as int16 values on the same step, which the others set:
//   dx = max(next largest / 127, largest / 32767),  q = round_half_even(x / dx)
// clamped to +-32767 for the n and +-127 for the rest. A group's step is then set by its ordinary
// values, not by an outlier (Qwen2.5's activations have channels many times the rest), and
// rounding costs five times less KL against float32 (docs/numerics.md, "Which rounding would
// keep it"). Each goes to `e` as k << 16 | uint16(q); its byte in `b` is 0 (the quads add it
// apart).
// The positions of group x's n largest |x| into `at` (the first of equals; NaN never), and the
// next largest |x| (0 if none). Fewer than n numbers: the rest of `at` are other positions, whose
// values then stay as the int8 rounding left them (only their bytes move to the int16 side).
inline float top_values(const float* x, int n, uint8_t* at) {
  float best[3] = {-1.0f, -1.0f, -1.0f};
  int where[3] = {0, 0, 0}, found = 0;
  for (int k = 0; k < kGroup; ++k) {
    const float m = std::fabs(x[k]);
    if (!(m > best[n])) continue;  // NaN, and not above the (n+1)-th largest so far
    int i = n;
    for (; i > 0 && m > best[i - 1]; --i) best[i] = best[i - 1], where[i] = where[i - 1];
    best[i] = m, where[i] = k;
    found = std::min(found + 1, n + 1);
  }
  for (int i = 0; i < n; ++i) at[i] = (uint8_t)where[i];
  for (int i = found, k = 0; i < n; ++i, ++k) {  // distinct positions for the missing ones
    while (std::find(at, at + i, (uint8_t)k) != at + i) ++k;
    at[i] = (uint8_t)k;
  }
  return found > n ? best[n] : 0.0f;
}

void quantize_row(const float* x, int64_t K, float levels, int16_t* q, float* d, float* s,
                  int32_t* h, int8_t* hi, uint8_t* lo, int8_t* b, int n, int32_t* e) {
  const __m256 sign = _mm256_set1_ps(-0.0f), top = _mm256_set1_ps(levels),
               bottom = _mm256_set1_ps(-levels);
  for (int64_t g = 0; g < K / kGroup; ++g) {
    const float* xg = x + g * kGroup;
    __m256 v[4], m = _mm256_setzero_ps();
    for (int i = 0; i < 4; ++i) {
      v[i] = _mm256_loadu_ps(xg + 8 * i);
      m = _mm256_max_ps(_mm256_andnot_ps(sign, v[i]), m);  // a NaN lane keeps m
    }
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    float dx = _mm_cvtss_f32(_mm_max_ss(m4, _mm_movehdup_ps(m4))) / levels;
    uint8_t og[2];
    if (n) {
      const float next = top_values(xg, n, og);
      dx = std::max(next / levels, std::fabs(xg[og[0]]) / 32767.0f);  // NaN: next / levels
    }
    __m256i iv[4];
    for (int i = 0; i < 4; ++i) {
      __m256 r = _mm256_setzero_ps();
      if (dx > 0.0f)
        r = _mm256_round_ps(_mm256_div_ps(v[i], _mm256_set1_ps(dx)),
                            _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      iv[i] = _mm256_cvtps_epi32(_mm256_min_ps(_mm256_max_ps(r, bottom), top));  // NaN: bottom
    }
    if (n) {  // the n values at int16 (a NaN is never one of them)
      alignas(32) int32_t all[kGroup];
      for (int i = 0; i < 4; ++i) _mm256_store_si256((__m256i*)(all + 8 * i), iv[i]);
      for (int i = 0; i < n; ++i) {
        const float xi = xg[og[i]];
        if (dx > 0.0f && !std::isnan(xi))  // else the int8 rounding's value stays
          all[og[i]] = (int32_t)std::clamp(std::nearbyint(xi / dx), -32767.0f, 32767.0f);
      }
      for (int i = 0; i < 4; ++i) iv[i] = _mm256_load_si256((const __m256i*)(all + 8 * i));
      for (int i = 0; i < n; ++i) e[g * n + i] = og[i] << 16 | (uint16_t)all[og[i]];
    }
    const int32_t first = hsum(_mm256_add_epi32(iv[0], iv[1]));
    const int32_t sum = first + hsum(_mm256_add_epi32(iv[2], iv[3]));
    h[2 * g] = first;
    h[2 * g + 1] = sum - first;
    d[g] = dx;
    s[g] = dx * (float)sum;
    // int32 -> int16 in order (packs works per 128-bit half; the permute puts the halves back)
    const __m256i q0 = _mm256_permute4x64_epi64(_mm256_packs_epi32(iv[0], iv[1]), 0xD8);
    const __m256i q1 = _mm256_permute4x64_epi64(_mm256_packs_epi32(iv[2], iv[3]), 0xD8);
    if (q) {
      _mm256_storeu_si256((__m256i*)(q + g * kGroup), q0);
      _mm256_storeu_si256((__m256i*)(q + g * kGroup + 16), q1);
    }
    if (b) {  // |q| <= 127 here: the same values as bytes, in order
      const __m256i b8 = _mm256_permute4x64_epi64(_mm256_packs_epi16(q0, q1), 0xD8);
      _mm256_storeu_si256((__m256i*)(b + g * kGroup), b8);
      for (int i = 0; i < n; ++i) b[g * kGroup + og[i]] = 0;  // the quads add these apart
    }
    if (hi) {  // x = 256 * hi + lo, exactly: hi the signed high byte, lo the unsigned low one
      const __m256i ff = _mm256_set1_epi16(255);
      const __m256i h8 = _mm256_packs_epi16(_mm256_srai_epi16(q0, 8), _mm256_srai_epi16(q1, 8));
      const __m256i l8 = _mm256_packus_epi16(_mm256_and_si256(q0, ff), _mm256_and_si256(q1, ff));
      _mm256_storeu_si256((__m256i*)(hi + g * kGroup), _mm256_permute4x64_epi64(h8, 0xD8));
      _mm256_storeu_si256((__m256i*)(lo + g * kGroup), _mm256_permute4x64_epi64(l8, 0xD8));
    }
  }
}

}  // namespace

// The bytes one output's row of a [N, K] weight takes in `fmt` (K a multiple of the block); a
// panel of eight outputs takes eight times this.
int64_t block_row_bytes(int64_t fmt, int64_t K) {
  const Layout l = layout(fmt);
  TORCH_CHECK(K % l.block_weights == 0, "block_mm: K=", K, " is not a multiple of ",
              l.block_weights);
  return K / l.block_weights * l.block_bytes;
}

// The best copy of the panel kernel this process runs: 0 AVX2, 1 AVX-512 VNNI, 2 AMX-INT8 (its
// tile registers granted by Linux). `ATEN_CPU_CAPABILITY` below avx512 holds it to AVX2, as
// tests/test_instruction_sets.py does to run the suite the way an AVX2 machine would;
// SPECGUARD_AMX=0 holds it to VNNI (benchmarks compare the two). All give the same bits.
int64_t block_isa() {
  const char* held = std::getenv("ATEN_CPU_CAPABILITY");
  if (held && std::strcmp(held, "avx512") != 0) return 0;
  if (!(__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni")))
    return 0;
  const char* amx = std::getenv("SPECGUARD_AMX");
  if (amx && std::strcmp(amx, "0") == 0) return 1;
  unsigned eax, ebx, ecx, edx;
  if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return 1;
  const bool tiles = (edx >> 24 & 1) && (edx >> 25 & 1);  // AMX-TILE, AMX-INT8
  constexpr long kReqXcompPerm = 0x1023, kXtileData = 18;  // arch_prctl: ask for the tiles
  return tiles && syscall(SYS_arch_prctl, kReqXcompPerm, kXtileData) == 0 ? 2 : 1;
}

// x [M, K] float32, w [ceil(N / 8), 8 * row bytes] uint8 (`blocks/panels.py`), fmt a ggml type
// id -> y [M, N] float32. isa: -1 the best copy (`block_isa`), else that copy (the same bits;
// tests compare them).
torch::Tensor block_mm(torch::Tensor x, torch::Tensor w, int64_t fmt, int64_t N, int64_t isa,
                       int64_t bits) {
  static const int64_t best = block_isa();
  TORCH_CHECK(isa <= best, "block_mm: isa=", isa, " is not run here (best: ", best, ")");
  // bits 8: int8 values; 9 and 10: int8 with each group's largest one or two at int16
  // (`quantize_row`); -8, -9, -10: the same values through the int16 products, the reference
  // the tests hold the quads to
  const int64_t kind = std::abs(bits);
  TORCH_CHECK(bits == 16 || (kind >= 8 && kind <= 10), "block_mm: activation bits=", bits,
              " must be 16, 8, 9 or 10");
  const float levels = bits == 16 ? 32767.0f : 127.0f;
  const int n = bits == 16 ? 0 : (int)(kind - 8);
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == torch::kFloat32,
              "block_mm: x must be 2-D float32");
  TORCH_CHECK(w.dim() == 2 && w.scalar_type() == torch::kUInt8 && w.is_contiguous(),
              "block_mm: w must be 2-D contiguous uint8");
  x = x.contiguous();
  const int64_t M = x.size(0), K = x.size(1), P = w.size(0);
  const Layout l = layout(fmt);
  TORCH_CHECK(P == (N + kLanes - 1) / kLanes, "block_mm: ", P, " panels cannot hold N=", N);
  TORCH_CHECK(w.size(1) == kLanes * block_row_bytes(fmt, K), "block_mm: w has ", w.size(1),
              " bytes per panel, K=", K, " needs ", kLanes * block_row_bytes(fmt, K));
  const int64_t G = K / kGroup, blocks = K / l.block_weights;
  const int64_t use = isa < 0 ? best : isa;
  // the AMX copy from kAmxMinRows rows on (fewer: VNNI, which streams the bytes once); it reads
  // x as two byte planes
  const bool tiles = use == 2 && M >= kAmxMinRows;
  // the AMX copy reads the values as their two bytes only
  int16_t* xq = scratch<int16_t, 0>(tiles ? 0 : M * K);
  int8_t* xhi = scratch<int8_t, 0>(tiles ? M * K : 0);
  uint8_t* xlo = scratch<uint8_t, 0>(tiles ? M * K : 0);
  // the quads (block_quads.inc) read int8 values as bytes too
  const bool bytes = bits > 0 && bits != 16 && !tiles;
  int8_t* xb = scratch<int8_t, 1>(bytes ? M * K : 0);
  int32_t* xe = scratch<int32_t, 7>(M * G * n);  // 7: no other slot of the calling thread
  float* xd = scratch<float, 0>(M * G);
  float* xs = scratch<float, 1>(M * G);
  int32_t* xh = scratch<int32_t, 0>(2 * M * G);
  Act* act = scratch<Act, 0>(M);
  const float* xp = x.data_ptr<float>();
  at::parallel_for(0, M, 16, [&](int64_t m0, int64_t m1) {
    for (int64_t m = m0; m < m1; ++m)
      quantize_row(xp + m * K, K, levels, tiles ? nullptr : &xq[m * K], &xd[m * G], &xs[m * G],
                   &xh[2 * m * G], tiles ? &xhi[m * K] : nullptr, tiles ? &xlo[m * K] : nullptr,
                   bytes ? &xb[m * K] : nullptr, n, n ? &xe[m * G * n] : nullptr);
  });
  for (int64_t m = 0; m < M; ++m)
    act[m] = {tiles ? nullptr : &xq[m * K], &xd[m * G], &xs[m * G], &xh[2 * m * G],
              bytes ? &xb[m * K] : nullptr, n ? &xe[m * G * n] : nullptr, n};
  auto y = torch::empty({M, N}, x.options());
  const uint8_t* wp = w.data_ptr<uint8_t>();
  float* yp = y.data_ptr<float>();
  const int64_t pb = w.size(1);
  at::parallel_for(0, P, 4, [&](int64_t p0, int64_t p1) {
    if (tiles)
      amx::run_amx(fmt, wp, pb, blocks, act, xhi, xlo, K, M, yp, N, p0, p1);
    else if (use >= 1)
      vnni::run(fmt, wp, pb, blocks, act, M, yp, N, p0, p1, bytes);
    else
      avx2::run(fmt, wp, pb, blocks, act, M, yp, N, p0, p1, bytes);
  });
  return y;
}
