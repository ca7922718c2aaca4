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
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <immintrin.h>

#include <cmath>
#include <vector>

namespace {

inline float hsum8(__m256 v) {  // one fixed tree: (0+4, 1+5, 2+6, 3+7), then pairs
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(t, _mm_shuffle_ps(t, t, 1)));
}

// G dot products q_g . k, each in the one fixed pattern (8 lanes over d, then hsum8, then a
// scalar tail), side by side: G independent chains, so G does not change any one sum.
template <int G>
inline void dots(const float* q, int64_t q_stride, const float* k, int64_t d, float scale,
                 float* s, int64_t s_stride) {
  __m256 acc[G];
  for (int g = 0; g < G; ++g) acc[g] = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= d; i += 8) {
    const __m256 kv = _mm256_loadu_ps(k + i);
    for (int g = 0; g < G; ++g) acc[g] = _mm256_fmadd_ps(_mm256_loadu_ps(q + g * q_stride + i), kv, acc[g]);
  }
  for (int g = 0; g < G; ++g) {
    float x = hsum8(acc[g]);
    for (int64_t t = i; t < d; ++t) x = std::fma(q[g * q_stride + t], k[t], x);
    s[g * s_stride] = scale * x;
  }
}

// o[0:8C] = sum over the allowed keys j, in key order, of e[j] * v[j, 0:8C]: one FMA chain per
// output element, held in registers.
template <int C, typename Allowed>
inline void weighted_sum(const float* e, const float* v, int64_t kv_len, int64_t d,
                         Allowed allowed, float* o) {
  __m256 acc[C];
  for (int c = 0; c < C; ++c) acc[c] = _mm256_setzero_ps();
  for (int64_t j = 0; j < kv_len; ++j) {
    if (!allowed(j)) continue;
    const __m256 ev = _mm256_set1_ps(e[j]);
    for (int c = 0; c < C; ++c) acc[c] = _mm256_fmadd_ps(ev, _mm256_loadu_ps(v + j * d + 8 * c), acc[c]);
  }
  for (int c = 0; c < C; ++c) _mm256_storeu_ps(o + 8 * c, acc[c]);
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

// One query row of every head in one key/value group: the group's keys are read once per four
// heads. `s` holds the row's scores, then their exponentials, `kv_len` rounded up to whole
// vectors.
void group_row(const float* q, int64_t groups, int64_t q_stride, const float* k, const float* v,
               int64_t kv_len, int64_t d, const bool* mask, int64_t last, float scale, float* out,
               int64_t out_stride, float* weights, int64_t w_stride, std::vector<float>& s) {
  const int64_t width = (kv_len + 7) / 8 * 8;
  s.assign(groups * width, -INFINITY);  // masked keys stay -inf: exp gives 0, never summed
  auto allowed = [&](int64_t j) { return mask == nullptr ? j <= last : mask[j]; };
  for (int64_t j = 0; j < kv_len; ++j) {
    if (!allowed(j)) continue;
    for (int64_t g = 0; g < groups; g += 4) {
      const float* qg = q + g * q_stride;
      float* sg = s.data() + g * width + j;
      switch (std::min<int64_t>(4, groups - g)) {
        case 4: dots<4>(qg, q_stride, k + j * d, d, scale, sg, width); break;
        case 3: dots<3>(qg, q_stride, k + j * d, d, scale, sg, width); break;
        case 2: dots<2>(qg, q_stride, k + j * d, d, scale, sg, width); break;
        default: dots<1>(qg, q_stride, k + j * d, d, scale, sg, width); break;
      }
    }
  }
  for (int64_t g = 0; g < groups; ++g) {
    float* sg = s.data() + g * width;
    float m = -INFINITY;  // the max is exact whatever the order
    for (int64_t j = 0; j < kv_len; ++j) m = std::max(m, sg[j]);
    const __m256 mv = _mm256_set1_ps(m);
    for (int64_t j = 0; j < width; j += 8)
      _mm256_storeu_ps(sg + j, exp8(_mm256_sub_ps(_mm256_loadu_ps(sg + j), mv)));
    float z = 0.0f;  // in key order
    for (int64_t j = 0; j < kv_len; ++j)
      if (allowed(j)) z += sg[j];
    float* o = out + g * out_stride;
    int64_t i = 0;
    for (; i + 64 <= d; i += 64) weighted_sum<8>(sg, v + i, kv_len, d, allowed, o + i);
    for (; i + 8 <= d; i += 8) weighted_sum<1>(sg, v + i, kv_len, d, allowed, o + i);
    for (; i < d; ++i) {  // the scalar tail: the same chain per element
      float x = 0.0f;
      for (int64_t j = 0; j < kv_len; ++j)
        if (allowed(j)) x = std::fma(sg[j], v[j * d + i], x);
      o[i] = x;
    }
    for (i = 0; i < d; ++i) o[i] /= z;
    if (weights == nullptr) continue;
    float* w = weights + g * w_stride;
    for (int64_t j = 0; j < kv_len; ++j) w[j] = allowed(j) ? sg[j] / z : 0.0f;
  }
}

}  // namespace

// query [b, heads, q, d], key/value [b, kv_heads, kv, d] float32; mask [1 or b, q, kv] bool
// (true = attend), or empty for causal: query row i is the (kv - q + i)-th position. Returns the output as [b, q, heads, d] (the layout the model reads next)
// and, when asked, the weights [b, heads, q, kv] (zero where masked).
std::vector<torch::Tensor> attention(torch::Tensor query, torch::Tensor key, torch::Tensor value,
                                     torch::Tensor mask, double scale, bool want_weights) {
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
  at::parallel_for(0, b * kv_heads * q_len, 1, [&](int64_t lo, int64_t hi) {
    thread_local std::vector<float> s;
    for (int64_t t = lo; t < hi; ++t) {
      const int64_t i = t % q_len, h = (t / q_len) % kv_heads, bi = t / (q_len * kv_heads);
      const int64_t h0 = h * groups;  // first query head of this group
      const float* qr = qp + ((bi * heads + h0) * q_len + i) * d;
      const float* kr = kp + bi * k.stride(0) + h * k.stride(1);
      const float* vr = vp + bi * v.stride(0) + h * v.stride(1);
      const bool* mrow = causal ? nullptr : mp + ((mb == 1 ? 0 : bi) * q_len + i) * kv_len;
      float* orow = op + ((bi * q_len + i) * heads + h0) * d;
      float* wrow = wp == nullptr ? nullptr : wp + ((bi * heads + h0) * q_len + i) * kv_len;
      group_row(qr, groups, q_len * d, kr, vr, kv_len, d, mrow, kv_len - q_len + i, sc, orow, d, wrow,
                q_len * kv_len, s);
    }
  });
  return want_weights ? std::vector<torch::Tensor>{out, weights} : std::vector<torch::Tensor>{out};
}
