// Matmul over GGUF's own quantised blocks (Q8_0, Q5_0, Q4_K, Q6_K) whose every output is one
// fixed sum, whatever the rows.
//
// The weights are the file's bytes, row by row, never re-quantised: w = s_g * q + o_g for each
// group g of 32 weights (Q6_K: two scales per group, one per 16). The activations of each row
// are rounded to int16 with one float scale per group of 32 (dx_g = max|x| / 32767), from that
// row alone. Then one output is
//
//   y[m, n] = hsum( sum_g cvt(isum_g) * (dx[m, g] * s[n, g]) )  -  sum_g o[n, g] * (dx * sum xq)[m, g]
//
// where isum_g is the integer dot product of the group, kept as 8 int32 lanes (lane l holds
// weights 4l..4l+3: `Acc`): integers are exact, so any instruction that computes them gives the
// same lanes. The float part runs in one fixed order (even groups into one chain, odd groups
// into another, each in group order; then a fixed tree over the 8 lanes of each), whatever rows
// are fed together, on every thread count (threads split the outputs, never a sum), and on AVX2
// and AVX-512 machines alike (this file uses AVX2 + FMA + F16C only). int16 keeps an activation
// to 1/65534 of its group's largest, finer than bfloat16 for all but a group's smallest
// elements; `benchmarks/fidelity.py` measures what that does to the model's top-1 token.
//
// Speed: a decode streams each output's row of blocks once (`kAhead` prefetch); a few rows share
// one unpacking of each group (`kRows`). A prefill pays the per-group float work for every row,
// so it runs at about half the int8 kernel's rate (docs/numerics.md, "The gguf format").
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

namespace {

enum Fmt : int64_t { kQ8_0 = 8, kQ5_0 = 6, kQ4_K = 12, kQ6_K = 14 };  // ggml's type ids
constexpr int64_t kGroup = 32;
constexpr int64_t kRows = 4;        // rows of x per register tile
constexpr int64_t kOutChunk = 16;   // outputs whose weights stay in cache across row tiles

inline float f16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}

// One row's activations: int16 values, and per group the scale and scale * sum of the values.
struct Act {
  const int16_t* q;
  const float* d;    // per group of 32
  const float* s;    // per group of 32: d * the sum of its values
  const float* s16;  // per half group of 16: d * the sum of its values
};

// Sixteen int16 weights against sixteen activations: 8 int32 lanes of pair sums.
inline __m256i madd(__m256i w16, const int16_t* x) {
  return _mm256_madd_epi16(w16, _mm256_loadu_si256((const __m256i*)x));
}

// The R rows' accumulators for one output. `group` adds one group of 32 weights given as int16
// in two vectors, the group's even-indexed weights and its odd-indexed ones (each row's
// activations are stored the same way, `quantize_row`), so lane l sums weights 4l..4l+3. s holds
// the group's weight scale in every lane (for Q6_K, whose two halves have their own scales,
// lanes 0-3 hold one and lanes 4-7 the other); each row multiplies it by its activation scale.
template <int R>
struct Acc {
  __m256 v[2][R], mins[R];  // two chains: groups of even index add into v[0], odd into v[1]
  Acc() {
    for (int r = 0; r < R; ++r) v[0][r] = v[1][r] = mins[r] = _mm256_setzero_ps();
  }
  template <int P>
  inline void group(__m256i even, __m256i odd, int64_t g, __m256 s, const Act* a) {
    for (int r = 0; r < R; ++r) {
      const int16_t* x = a[r].q + g * kGroup;
      const __m256i is = _mm256_add_epi32(madd(even, x), madd(odd, x + 16));
      const __m256 sr = _mm256_mul_ps(_mm256_broadcast_ss(a[r].d + g), s);
      v[P][r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is), sr, v[P][r]);
    }
  }
  // 32 int8 weights in order: even-indexed and odd-indexed ones widened by shifts, not shuffles
  template <int P>
  inline void group8(__m256i q8, int64_t g, __m256 s, const Act* a) {
    group<P>(_mm256_srai_epi16(_mm256_slli_epi16(q8, 8), 8), _mm256_srai_epi16(q8, 8), g, s, a);
  }
  // 32 uint8 weights in order, widened the same way
  template <int P>
  inline void group8u(__m256i q8, int64_t g, __m256 s, const Act* a) {
    group<P>(_mm256_and_si256(q8, _mm256_set1_epi16(0x00FF)), _mm256_srli_epi16(q8, 8), g, s, a);
  }
  inline float result(int r) const { return (hsum(v[0][r]) + hsum(v[1][r])) - hsum(mins[r]); }
};

inline __m256i nibbles_lo(__m256i v) { return _mm256_and_si256(v, _mm256_set1_epi8(0x0F)); }
inline __m256i nibbles_hi(__m256i v) {
  return _mm256_and_si256(_mm256_srli_epi16(v, 4), _mm256_set1_epi8(0x0F));
}

// 32 bits -> 32 bytes, 0xFF where the bit is set (ggml's bytes_from_bits_32).
inline __m256i bits_to_bytes(uint32_t x) {
  const __m256i shuf = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202,
                                         0x0101010101010101, 0x0000000000000000);
  __m256i b = _mm256_shuffle_epi8(_mm256_set1_epi32((int)x), shuf);
  b = _mm256_or_si256(b, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe));
  return _mm256_cmpeq_epi8(b, _mm256_set1_epi64x(-1));
}

struct Layout {
  int64_t block_weights, block_bytes;
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
constexpr int64_t kBlockBytes = block_layout(F).block_bytes;

// Block b of one output's row (at w) against R rows of activations.
template <int F, int R, int P = 0>
inline void block(const uint8_t* w, int64_t b, Acc<R>& acc, const Act* a) {
  if constexpr (F == kQ8_0) {
    {
      acc.template group8<P>(_mm256_loadu_si256((const __m256i*)(w + 2)), b,
                             _mm256_set1_ps(f16(w)), a);
    }
  } else if constexpr (F == kQ5_0) {
    {
      const float d = f16(w);
      uint32_t qh;
      std::memcpy(&qh, w + 2, 4);
      const __m128i qs = _mm_loadu_si128((const __m128i*)(w + 6));
      const __m256i nib = _mm256_set_m128i(
          _mm_and_si128(_mm_srli_epi16(qs, 4), _mm_set1_epi8(0x0F)),
          _mm_and_si128(qs, _mm_set1_epi8(0x0F)));
      // (nib | h << 4) - 16: nib where the bit is set, nib | 0xF0 (= nib - 16) where not
      const __m256i q = _mm256_or_si256(
          nib, _mm256_andnot_si256(bits_to_bytes(qh), _mm256_set1_epi8((char)0xF0)));
      acc.template group8<P>(q, b, _mm256_set1_ps(d), a);
    }
  } else if constexpr (F == kQ4_K) {
    {
      // the 8 six-bit scales and mins, unpacked as ggml does (bytes 0-7 scales, 8-15 mins)
      uint32_t u0, u1, u2;
      std::memcpy(&u0, w + 4, 4);
      std::memcpy(&u1, w + 8, 4);
      std::memcpy(&u2, w + 12, 4);
      const __m128i packed = _mm_setr_epi32(
          (int)(u0 & 0x3f3f3f3f), (int)((u2 & 0x0f0f0f0f) | (((u0 >> 6) & 0x03030303) << 4)),
          (int)(u1 & 0x3f3f3f3f), (int)(((u2 >> 4) & 0x0f0f0f0f) | (((u1 >> 6) & 0x03030303) << 4)));
      const __m256 sv = _mm256_mul_ps(_mm256_set1_ps(f16(w)),
                                      _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(packed)));
      const __m256 mv = _mm256_mul_ps(
          _mm256_set1_ps(f16(w + 2)),
          _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(packed, 8))));
      for (int r = 0; r < R; ++r)
        acc.mins[r] = _mm256_fmadd_ps(mv, _mm256_loadu_ps(a[r].s + 8 * b), acc.mins[r]);
      const uint8_t* qs = w + 16;
      for (int c = 0; c < 4; ++c) {
        const __m256i v = _mm256_loadu_si256((const __m256i*)(qs + 32 * c));
        const __m256 s0 = _mm256_permutevar8x32_ps(sv, _mm256_set1_epi32(2 * c));
        const __m256 s1 = _mm256_permutevar8x32_ps(sv, _mm256_set1_epi32(2 * c + 1));
        // bytes 2i, 2i+1 as one int16 word: its four nibbles are weights 2i, 2i+1 of the low
        // group and 2i, 2i+1 of the high one
        const __m256i m = _mm256_set1_epi16(0x000F);
        acc.template group<0>(_mm256_and_si256(v, m),
                              _mm256_and_si256(_mm256_srli_epi16(v, 8), m), 8 * b + 2 * c, s0, a);
        acc.template group<1>(_mm256_and_si256(_mm256_srli_epi16(v, 4), m),
                              _mm256_srli_epi16(v, 12), 8 * b + 2 * c + 1, s1, a);
      }
    }
  } else {  // kQ6_K: q - 32 with q in [0, 63]; the -32 joins the offsets (`mins`)
    const uint8_t* ql = w;
    const uint8_t* qh = w + 128;
    const __m128i sc = _mm_loadu_si128((const __m128i*)(w + 192));
    const __m256 d = _mm256_set1_ps(f16(w + 208));
    // d * scale for the 16 halves of 16 weights, as two vectors (halves 0-7, 8-15)
    const __m256 sf0 = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(sc)));
    const __m256 sf1 =
        _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(sc, 8))));
    const __m256 k32 = _mm256_set1_ps(32.0f);
    for (int r = 0; r < R; ++r) {
      acc.mins[r] = _mm256_fmadd_ps(_mm256_mul_ps(k32, sf0), _mm256_loadu_ps(a[r].s16 + 16 * b),
                                    acc.mins[r]);
      acc.mins[r] = _mm256_fmadd_ps(_mm256_mul_ps(k32, sf1),
                                    _mm256_loadu_ps(a[r].s16 + 16 * b + 8), acc.mins[r]);
    }
    const __m256i m2 = _mm256_set1_epi8(3);
    for (int h = 0; h < 2; ++h) {
      const __m256i l0 = _mm256_loadu_si256((const __m256i*)(ql + 64 * h));
      const __m256i l1 = _mm256_loadu_si256((const __m256i*)(ql + 64 * h + 32));
      const __m256i hb = _mm256_loadu_si256((const __m256i*)(qh + 32 * h));
      const __m256i low[4] = {nibbles_lo(l0), nibbles_lo(l1), nibbles_hi(l0), nibbles_hi(l1)};
      for (int t = 0; t < 4; ++t) {
        const __m256i top = _mm256_and_si256(_mm256_srli_epi16(hb, 2 * t), m2);
        const __m256i q = _mm256_or_si256(low[t], _mm256_slli_epi16(top, 4));
        const __m256i pick = _mm256_setr_epi32(2 * t, 2 * t, 2 * t, 2 * t, 2 * t + 1, 2 * t + 1,
                                               2 * t + 1, 2 * t + 1);
        const __m256 s2 = _mm256_permutevar8x32_ps(h ? sf1 : sf0, pick);
        const int64_t g = 8 * b + 4 * h + t;
        if (t & 1)
          acc.template group8u<1>(q, g, s2, a);
        else
          acc.template group8u<0>(q, g, s2, a);
      }
    }
  }
}

// One output against R rows, its weights fetched kAhead bytes ahead of use (rows are
// contiguous, so a thread's outputs are one stream). Its sum is the same whatever R.
constexpr int64_t kAhead = 4096;

template <int F, int R>
void output(const uint8_t* w, int64_t blocks, const Act* a, float* y, int64_t ldy) {
  Acc<R> acc;
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* p = w + b * kBlockBytes<F>;
    for (int64_t line = 0; line < kBlockBytes<F>; line += 64)
      _mm_prefetch((const char*)(p + kAhead + line), _MM_HINT_T0);
    if constexpr (F == kQ8_0 || F == kQ5_0) {  // one group per block: alternate the chains
      if (b & 1) {
        block<F, R, 1>(p, b, acc, a);
        continue;
      }
    }
    block<F, R>(p, b, acc, a);
  }
  for (int r = 0; r < R; ++r) y[r * ldy] = acc.result(r);
}

template <int F>
void outputs(const uint8_t* w, int64_t row_bytes, int64_t blocks, const Act* a, int64_t m,
             float* y, int64_t N, int64_t n0, int64_t n1) {
  for (int64_t c0 = n0; c0 < n1; c0 += kOutChunk)
    for (int64_t r = 0; r < m; r += kRows) {
      const int64_t c1 = std::min(n1, c0 + kOutChunk);
      for (int64_t n = c0; n < c1; ++n) {
        const uint8_t* wn = w + n * row_bytes;
        float* yn = y + r * N + n;
        switch (std::min(kRows, m - r)) {
          case 4: output<F, 4>(wn, blocks, a + r, yn, N); break;
          case 3: output<F, 3>(wn, blocks, a + r, yn, N); break;
          case 2: output<F, 2>(wn, blocks, a + r, yn, N); break;
          default: output<F, 1>(wn, blocks, a + r, yn, N); break;
        }
      }
    }
}

Layout layout(int64_t fmt) {
  const Layout l = block_layout(fmt);
  TORCH_CHECK(l.block_bytes, "block_mm: unsupported block format ", fmt,
              " (Q8_0, Q5_0, Q4_K, Q6_K)");
  return l;
}

// Row m of x -> int16 values and per-group scales, from that row alone.
void quantize_row(const float* x, int64_t K, int16_t* q, float* d, float* s, float* s16) {
  for (int64_t g = 0; g < K / kGroup; ++g) {
    const float* xg = x + g * kGroup;
    float amax = 0.0f;
    for (int i = 0; i < kGroup; ++i) amax = std::max(amax, std::fabs(xg[i]));
    const float dx = amax / 32767.0f;
    int32_t sum = 0, half = 0;
    for (int i = 0; i < kGroup; ++i) {
      if (i == 16) half = sum;
      const float v = dx > 0.0f ? std::nearbyint(xg[i] / dx) : 0.0f;
      const int16_t qi = (int16_t)std::min(32767.0f, std::max(-32767.0f, v));
      q[g * kGroup + (i & 1) * 16 + i / 2] = qi;  // even-indexed first, then odd (`Acc`)
      sum += qi;
    }
    d[g] = dx;
    s[g] = dx * (float)sum;
    s16[2 * g] = dx * (float)half;
    s16[2 * g + 1] = dx * (float)(sum - half);
  }
}

}  // namespace

// The bytes one row of a [N, K] weight takes in `fmt` (K a multiple of the block).
int64_t block_row_bytes(int64_t fmt, int64_t K) {
  const Layout l = layout(fmt);
  TORCH_CHECK(K % l.block_weights == 0, "block_mm: K=", K, " is not a multiple of ",
              l.block_weights);
  return K / l.block_weights * l.block_bytes;
}

// x [M, K] float32, w [N, row bytes] uint8 (the GGUF tensor's data), fmt a ggml type id ->
// y [M, N] float32.
torch::Tensor block_mm(torch::Tensor x, torch::Tensor w, int64_t fmt) {
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == torch::kFloat32,
              "block_mm: x must be 2-D float32");
  TORCH_CHECK(w.dim() == 2 && w.scalar_type() == torch::kUInt8 && w.is_contiguous(),
              "block_mm: w must be 2-D contiguous uint8");
  x = x.contiguous();
  const int64_t M = x.size(0), K = x.size(1), N = w.size(0);
  const Layout l = layout(fmt);
  TORCH_CHECK(w.size(1) == block_row_bytes(fmt, K), "block_mm: w has ", w.size(1),
              " bytes per row, K=", K, " needs ", block_row_bytes(fmt, K));
  const int64_t G = K / kGroup, blocks = K / l.block_weights;
  std::vector<int16_t> xq(M * K);
  std::vector<float> xd(M * G), xs(M * G), xs16(2 * M * G);
  std::vector<Act> act(M);
  const float* xp = x.data_ptr<float>();
  at::parallel_for(0, M, 16, [&](int64_t m0, int64_t m1) {
    for (int64_t m = m0; m < m1; ++m)
      quantize_row(xp + m * K, K, &xq[m * K], &xd[m * G], &xs[m * G], &xs16[2 * m * G]);
  });
  for (int64_t m = 0; m < M; ++m) act[m] = {&xq[m * K], &xd[m * G], &xs[m * G], &xs16[2 * m * G]};
  auto y = torch::empty({M, N}, x.options());
  const uint8_t* wp = w.data_ptr<uint8_t>();
  float* yp = y.data_ptr<float>();
  const int64_t rb = w.size(1);
  at::parallel_for(0, N, kOutChunk, [&](int64_t n0, int64_t n1) {
    switch (fmt) {
      case kQ8_0: outputs<kQ8_0>(wp, rb, blocks, act.data(), M, yp, N, n0, n1); break;
      case kQ5_0: outputs<kQ5_0>(wp, rb, blocks, act.data(), M, yp, N, n0, n1); break;
      case kQ4_K: outputs<kQ4_K>(wp, rb, blocks, act.data(), M, yp, N, n0, n1); break;
      default: outputs<kQ6_K>(wp, rb, blocks, act.data(), M, yp, N, n0, n1); break;
    }
  });
  return y;
}
