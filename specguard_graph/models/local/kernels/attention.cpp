// Causal attention for the CPU whose every output row is one fixed computation, whatever the
// feeding: a token's row is bit for bit the same decoded alone after a cache, inside a prefill
// of hundreds, or as one of k sampled rows, at any thread count, on AVX2 and AVX-512 alike.
//
// For one query row q and the keys its mask allows (in key order 0, 1, ...):
//   s_j = scale * (q . k_j)   the dot product in one fixed pattern: 8 lanes over d, lane j
//                             summing d = j, j + 8, ... by fused multiply-adds, then the lanes
//                             added in one fixed tree; a scalar tail for d % 8
//   m   = max_j s_j           exact, order-free
//   e_j = exp(s_j - m)        one function of the element alone (exp8)
//   Z   = sum_j e_j           in key order, from 0
//   o   = (sum_j e_j v_j) / Z in key order, from 0, one FMA chain per output element
// Masked keys are skipped, never added as zeros, so a row's sums hold exactly the same terms
// in the same order whether the call carries 1 key or 4,000, 1 row or 400. What the calls'
// shapes choose is only which rows one thread computes.
//
// Three copies compute it. The plain copy (attention_plain.inc) takes one row at a time and one
// sum after another: it is the reference. The fast copies (attention_row.inc, for AVX2 and for
// AVX-512) perform every operation above on the same operands in the same order; they only run
// more of the independent sums side by side (eight scores at a time, their lane trees added
// vertically; output sums 16 lanes wide on AVX-512) and take blocks of rows through the keys
// together, a chunk of keys at a time, so keys and values are read once per block. `copy` picks
// one: -1 the best this process runs (AVX-512 where `block_isa` allows it, so
// ATEN_CPU_CAPABILITY=avx2 holds it to AVX2), 0 plain, 1 AVX2, 2 AVX-512. Tests compare them bit
// for bit (tests/test_attention_kernel.py).
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <immintrin.h>

#include <cmath>
#include <cstring>
#include <vector>

int64_t block_isa();  // block_gemm.cpp: 0 AVX2, 1 AVX-512 VNNI, 2 AMX

constexpr int64_t kMaxGroups = 64;  // query heads per key/value head
constexpr int64_t kRowBlock = 8;    // query rows that go through the keys together
constexpr int64_t kKeyChunk = 128;  // keys (and values) a row block reads at a time: 64 KB at d = 128

namespace attn {  // used by every copy below

inline float hsum8(__m256 v) {  // one fixed tree: (0+4, 1+5, 2+6, 3+7), then pairs
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(t, _mm_shuffle_ps(t, t, 1)));
}

// exp(x) for 8 floats (Cephes' expf polynomial, ~1 ulp): a function of each element alone, so
// an element's value never depends on its lane or on its neighbours. Below -87 it is 0.
inline __m256 exp8(__m256 x) {
  const __m256 lo = _mm256_set1_ps(-87.0f);
  const __m256 under = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
  x = _mm256_min_ps(_mm256_max_ps(x, lo), _mm256_set1_ps(88.0f));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 y = _mm256_set1_ps(1.9875691500e-4f);
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.3981999507e-3f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(8.3334519073e-3f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(4.1665795894e-2f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.6666665459e-1f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(5.0000001201e-1f));
  y = _mm256_fmadd_ps(y, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_andnot_ps(under, _mm256_mul_ps(y, _mm256_castsi256_ps(e)));
}

}  // namespace attn

namespace attn_plain {
using attn::exp8, attn::hsum8;
#include "attention_plain.inc"
}  // namespace attn_plain

namespace attn_avx2 {
using attn::exp8, attn::hsum8;
#define SPECGUARD_ZMM 0
#include "attention_row.inc"
#undef SPECGUARD_ZMM
}  // namespace attn_avx2

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq")
namespace attn_avx512 {
using attn::exp8, attn::hsum8;
#define SPECGUARD_ZMM 1
#include "attention_row.inc"
#undef SPECGUARD_ZMM
}  // namespace attn_avx512
#pragma GCC pop_options

// query [b, heads, q, d], key/value [b, kv_heads, kv, d] float32; mask [1 or b, q, kv] bool
// (true = attend), or empty for causal: query row i is the (kv - q + i)-th position. Returns the output as [b, q, heads, d] (the layout the model reads next)
// and, when asked, the weights [b, heads, q, kv] (zero where masked).
std::vector<torch::Tensor> attention(torch::Tensor query, torch::Tensor key, torch::Tensor value,
                                     torch::Tensor mask, double scale, bool want_weights,
                                     int64_t copy) {
  static const int64_t best = block_isa() >= 1 ? 2 : 1;
  TORCH_CHECK(copy <= best, "attention: copy=", copy, " is not run here (best: ", best, ")");
  const int64_t use = copy < 0 ? best : copy;
  const auto row = use == 2 ? attn_avx512::group_rows
                 : use == 1 ? attn_avx2::group_rows : attn_plain::group_rows;
  TORCH_CHECK(query.dim() == 4 && key.dim() == 4 && value.dim() == 4, "attention: 4-d tensors");
  TORCH_CHECK(query.scalar_type() == torch::kFloat && key.scalar_type() == torch::kFloat &&
                  value.scalar_type() == torch::kFloat, "attention: float32 tensors");
  const bool causal = mask.numel() == 0;
  TORCH_CHECK(causal || (mask.scalar_type() == torch::kBool && mask.dim() == 3),
              "attention: the mask must be empty (causal) or a 3-d bool tensor");
  const int64_t b = query.size(0), heads = query.size(1), q_len = query.size(2), d = query.size(3);
  const int64_t kv_heads = key.size(1), kv_len = key.size(2);
  TORCH_CHECK(key.size(0) == b && value.sizes() == key.sizes() && key.size(3) == d,
              "attention: key and value must be [b, kv_heads, kv, d] like the query");
  TORCH_CHECK(kv_heads > 0 && heads % kv_heads == 0, "attention: heads must be a multiple of kv heads");
  TORCH_CHECK(causal || ((mask.size(0) == 1 || mask.size(0) == b) && mask.size(1) == q_len &&
                            mask.size(2) == kv_len),
              "attention: the mask must be [1 or b, q, kv]");
  TORCH_CHECK(!causal || q_len <= kv_len, "attention: a causal call needs q <= kv");
  const int64_t groups = heads / kv_heads;
  TORCH_CHECK(groups <= kMaxGroups, "attention: at most ", kMaxGroups, " heads per kv head");
  // keys and values may be views of a cache with room to grow: rows of d floats, any batch
  // and head strides (kv_cache.py); anything else is copied once
  auto rows = [d](const torch::Tensor& t) {
    return t.stride(3) == 1 && t.stride(2) == d ? t : t.contiguous();
  };
  auto q = query.contiguous(), k = rows(key), v = rows(value);
  auto mk = causal ? mask : mask.contiguous();
  auto out = torch::empty({b, q_len, heads, d}, query.options());
  auto weights = want_weights ? torch::empty({b, heads, q_len, kv_len}, query.options())
                              : torch::Tensor();
  const float* qp = q.data_ptr<float>();
  const float* kp = k.data_ptr<float>();
  const float* vp = v.data_ptr<float>();
  const bool* mp = causal ? nullptr : mk.data_ptr<bool>();
  float* op = out.data_ptr<float>();
  float* wp = want_weights ? weights.data_ptr<float>() : nullptr;
  const float sc = static_cast<float>(scale);
  const int64_t mb = causal ? 1 : mask.size(0);
  const int64_t blocks = (q_len + kRowBlock - 1) / kRowBlock;
  at::parallel_for(0, b * kv_heads * blocks, 1, [&](int64_t lo, int64_t hi) {
    thread_local std::vector<float> s;
    for (int64_t t = lo; t < hi; ++t) {
      const int64_t i = t % blocks * kRowBlock, h = (t / blocks) % kv_heads, bi = t / (blocks * kv_heads);
      const int64_t n_rows = std::min(kRowBlock, q_len - i), h0 = h * groups;  // h0: the group's first head
      const float* qr = qp + ((bi * heads + h0) * q_len + i) * d;
      const float* kr = kp + bi * k.stride(0) + h * k.stride(1);
      const float* vr = vp + bi * v.stride(0) + h * v.stride(1);
      const bool* mrow = causal ? nullptr : mp + ((mb == 1 ? 0 : bi) * q_len + i) * kv_len;
      float* orow = op + ((bi * q_len + i) * heads + h0) * d;
      float* wrow = wp == nullptr ? nullptr : wp + ((bi * heads + h0) * q_len + i) * kv_len;
      row(n_rows, qr, d, q_len * d, groups, kr, vr, kv_len, d, mrow, kv_len - q_len + i, sc, orow,
          heads * d, d, wrow, kv_len, q_len * kv_len, s);
    }
  });
  return want_weights ? std::vector<torch::Tensor>{out, weights} : std::vector<torch::Tensor>{out};
}
