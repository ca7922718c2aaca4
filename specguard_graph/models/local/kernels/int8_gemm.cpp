// Weight-only int8 matmul for the CPU whose every output is one fixed sum, whatever the rows.
//
// y[m, n] = scale[n] * sum_k x[m, k] * q[n, k], with x in float32 and q in int8. Each output
// element is accumulated by fused multiply-adds in k order 0, 1, ..., K-1, starting from 0, and
// multiplied by its scale once at the end. Register tiles, cache blocks, the dequantised weight
// buffer of the many-row path and the threads only choose *which* outputs are computed
// together, never the order of one output's sum, so a token's row is bit for bit the same fed
// alone, in a chunk of hundreds, or as one of k sampled rows; and the same on AVX2 and AVX-512
// machines (this file uses AVX2 + FMA only).
//
// Weights are packed in blocks of 64 output channels, k-major: block b holds q[64b + j, k] at
// [b][k][j], so one k step of a block is one 64-byte cache line and a one-row decode streams
// each block front to back. A thread's blocks are contiguous, so its weights are one stream.
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <immintrin.h>

#include <algorithm>
#include <vector>

namespace {

constexpr int64_t kBlock = 64;    // output channels per packed block (one cache line per k)
constexpr int64_t kSub = 16;      // output channels per register tile column (two vectors)
constexpr int64_t kKBlock = 256;  // k per cache block of the many-row path
constexpr int64_t kMBlock = 120;  // rows per cache block of the many-row path
constexpr int64_t kManyRows = 12; // from this many rows on, dequantise a weight block once
constexpr int64_t kMR = 6;        // rows per register tile of the many-row path
constexpr int64_t kSlice = 256;   // k steps per slice of the few-row path (16 KB, L1-resident)

inline __m256 widen(const int8_t* p) {
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i*)p)));
}

// The same sum with the weights already widened to float32: wf holds kc x 16 for one sub-column.
template <int MR>
inline void tile_f(const float* xa, const float* wf, int64_t kc,
                   float* y, int64_t ldy, const float* scale, bool first, bool last) {
  __m256 acc[MR][2];
  for (int r = 0; r < MR; ++r)
    for (int h = 0; h < 2; ++h)
      acc[r][h] = first ? _mm256_setzero_ps() : _mm256_loadu_ps(y + r * ldy + 8 * h);
  for (int64_t k = 0; k < kc; ++k) {
    const __m256 w0 = _mm256_load_ps(wf + k * kSub), w1 = _mm256_load_ps(wf + k * kSub + 8);
    for (int r = 0; r < MR; ++r) {
      const __m256 a = _mm256_broadcast_ss(xa + k * kMR + r);
      acc[r][0] = _mm256_fmadd_ps(a, w0, acc[r][0]);
      acc[r][1] = _mm256_fmadd_ps(a, w1, acc[r][1]);
    }
  }
  for (int h = 0; h < 2; ++h) {
    const __m256 s = _mm256_loadu_ps(scale + 8 * h);
    for (int r = 0; r < MR; ++r)
      _mm256_storeu_ps(y + r * ldy + 8 * h, last ? _mm256_mul_ps(acc[r][h], s) : acc[r][h]);
  }
}

// MR rows x NP sub-columns over one slice [0, kc) of k, carrying the raw sums in y between
// slices (a float32 store and load is exact, so the sum is unchanged) and scaling on the last.
// It prefetches one line of the next slice every `passes` k steps: the slice's passes together
// fetch the next slice once, so memory streams while these FMAs run from L1. Always inlined:
// where GCC chose not to, the 2- and 4-row forwards of the target ran 1.3-1.7x slower.
template <int MR, int NP>
__attribute__((always_inline)) inline void tile_s(const float* x, int64_t ldx, int64_t kc,
                                                  const int8_t* w, float* y, int64_t ldy,
                                                  const float* scale, bool first, bool last,
                                                  const int8_t* next, int64_t pass) {
  constexpr int64_t passes = kBlock / (NP * kSub);  // a power of two: k % passes is a mask
  __m256 acc[MR][2 * NP];
  for (int r = 0; r < MR; ++r)
    for (int h = 0; h < 2 * NP; ++h)
      acc[r][h] = first ? _mm256_setzero_ps() : _mm256_loadu_ps(y + r * ldy + 8 * h);
  for (int64_t k = 0; k < kc; ++k) {
    const int8_t* wk = w + k * kBlock;
    if (next != nullptr && k % passes == 0)
      _mm_prefetch((const char*)(next + (pass * kc + k) / passes * kBlock), _MM_HINT_T0);
    for (int p = 0; p < NP; ++p) {
      const __m256 w0 = widen(wk + p * kSub), w1 = widen(wk + p * kSub + 8);
      for (int r = 0; r < MR; ++r) {
        const __m256 a = _mm256_broadcast_ss(x + r * ldx + k);
        acc[r][2 * p] = _mm256_fmadd_ps(a, w0, acc[r][2 * p]);
        acc[r][2 * p + 1] = _mm256_fmadd_ps(a, w1, acc[r][2 * p + 1]);
      }
    }
  }
  for (int h = 0; h < 2 * NP; ++h) {
    const __m256 s = _mm256_loadu_ps(scale + 8 * h);
    for (int r = 0; r < MR; ++r)
      _mm256_storeu_ps(y + r * ldy + 8 * h, last ? _mm256_mul_ps(acc[r][h], s) : acc[r][h]);
  }
}

// One slice of one block: each pass of NP sub-columns, each group of rows. With NP = 2 (one to
// three rows, 32 columns per pass) a group is at most two rows, 8 accumulators: a third row is
// a second group over the same L1-resident slice, which measured cheaper than one tile of three
// rows and 12 accumulators (a 3-row target forward: 0.85x the time). With NP = 1 (four to six
// rows, 16 columns per pass) a group is up to six rows, at most 12 accumulators.
template <int NP>
void slice(const float* x, int64_t m, int64_t K, int64_t kc, const int8_t* w, float* y,
           int64_t N, const float* scale, bool first, bool last, const int8_t* next) {
  constexpr int64_t kCols = NP * kSub, kGroup = NP == 2 ? 2 : kMR;
  for (int64_t j = 0; j < kBlock; j += kCols)
    for (int64_t r = 0; r < m; r += kGroup) {
      const int8_t* pf = r == 0 ? next : nullptr;  // the first row group fetches the next slice
      const float* xr = x + r * K;
      float* yr = y + r * N + j;
      const int64_t pass = j / kCols;
#define SPECGUARD_TILE(MR_, NP_) \
  tile_s<MR_, NP_>(xr, K, kc, w + j, yr, N, scale + j, first, last, pf, pass)
      switch (std::min(kGroup, m - r)) {
        case 6: SPECGUARD_TILE(6, 1); break;
        case 5: SPECGUARD_TILE(5, 1); break;
        case 4: SPECGUARD_TILE(4, 1); break;
        case 3: SPECGUARD_TILE(3, 1); break;  // NP = 1 only: NP = 2 groups hold two rows
        case 2: SPECGUARD_TILE(2, NP); break;
        default: SPECGUARD_TILE(1, NP); break;
#undef SPECGUARD_TILE
      }
    }
}

// Few rows (a decode, k sampled rows, a verification forward): the weights pass through L1 a
// slice at a time, every row tile runs on a slice while the next one is fetched. Without the
// slices, the later passes over a block ran after its stream had ended: 4 rows cost 1.73x one
// row, now 1.21x. One row takes this path too: its own whole-k tile with NTA prefetches ran the
// target's decode 1.15-1.27x slower on an AVX-512 Xeon, at most 5 % faster on an AVX2 EPYC
// (`benchmarks/probes/kernel_ab.py --model target`, `benchmarks/results/engine/kernel-ab-one-row.txt`).
void few_rows(const float* x, int64_t m, int64_t K, const int8_t* w, float* y, int64_t N,
              const float* scale, int64_t b0, int64_t b1) {
  const int8_t* end = w + b1 * K * kBlock;
  for (int64_t b = b0; b < b1; ++b)
    for (int64_t k0 = 0; k0 < K; k0 += kSlice) {
      const int64_t kc = std::min(kSlice, K - k0);
      const int8_t* at = w + b * K * kBlock + k0 * kBlock;
      const int8_t* next = std::min(at + kc * kBlock, end - kc * kBlock);  // the last: itself
      const bool first = k0 == 0, last = k0 + kc == K;
      if (m <= 3)
        slice<2>(x + k0, m, K, kc, at, y + b * kBlock, N, scale + b * kBlock, first, last, next);
      else
        slice<1>(x + k0, m, K, kc, at, y + b * kBlock, N, scale + b * kBlock, first, last, next);
    }
}

// Row tiles of one row block against one widened sub-column: xa holds the block's activations
// for this k block packed tile by tile as [tile][k][6], so a tile's broadcasts read one stream.
void many_tiles(const float* xa, int64_t m, const float* wf, int64_t kc, float* y, int64_t N,
                const float* scale, bool first, bool last) {
  for (int64_t r = 0; r < m; r += kMR) {
    const float* xt = xa + r * kc;
    float* yt = y + r * N;
    switch (std::min(kMR, m - r)) {
      case 6: tile_f<6>(xt, wf, kc, yt, N, scale, first, last); break;
      case 5: tile_f<5>(xt, wf, kc, yt, N, scale, first, last); break;
      case 4: tile_f<4>(xt, wf, kc, yt, N, scale, first, last); break;
      case 3: tile_f<3>(xt, wf, kc, yt, N, scale, first, last); break;
      case 2: tile_f<2>(xt, wf, kc, yt, N, scale, first, last); break;
      default: tile_f<1>(xt, wf, kc, yt, N, scale, first, last); break;
    }
  }
}

// Many rows (a prefill): per row block and k block, pack the activations; per sub-column, widen
// the weights once into an L1 buffer and run every row tile against it.
void many_rows(const float* x, int64_t M, int64_t K, const int8_t* w, float* y, int64_t N,
               const float* scale, int64_t b0, int64_t b1) {
  alignas(32) float wf[kKBlock * kSub];
  std::vector<float> xa(kMBlock * kKBlock);
  for (int64_t m0 = 0; m0 < M; m0 += kMBlock) {
    const int64_t mb = std::min(kMBlock, M - m0);
    for (int64_t k0 = 0; k0 < K; k0 += kKBlock) {
      const int64_t kc = std::min(kKBlock, K - k0);
      for (int64_t r = 0; r < mb; ++r)  // row r of the block -> tile r / 6, lane r % 6
        for (int64_t k = 0; k < kc; ++k)
          xa[(r / kMR) * kMR * kc + k * kMR + r % kMR] = x[(m0 + r) * K + k0 + k];
      for (int64_t b = b0; b < b1; ++b)
        for (int64_t j = 0; j < kBlock; j += kSub) {
          const int8_t* src = w + b * K * kBlock + k0 * kBlock + j;
          for (int64_t k = 0; k < kc; ++k) {
            _mm256_store_ps(wf + k * kSub, widen(src + k * kBlock));
            _mm256_store_ps(wf + k * kSub + 8, widen(src + k * kBlock + 8));
          }
          many_tiles(xa.data(), mb, wf, kc, y + m0 * N + b * kBlock + j, N,
                     scale + b * kBlock + j, k0 == 0, k0 + kc == K);
        }
    }
  }
}

}  // namespace

// q [N, K] int8 -> blocks [N / 64, K, 64] (N must be a multiple of 64).
torch::Tensor pack(torch::Tensor q) {
  TORCH_CHECK(q.dim() == 2 && q.scalar_type() == torch::kInt8, "pack: q must be 2-D int8");
  TORCH_CHECK(q.size(0) % kBlock == 0, "pack: output channels must be a multiple of 64");
  return q.reshape({q.size(0) / kBlock, kBlock, q.size(1)}).transpose(1, 2).contiguous();
}

// x [M, K] float32, blocks from pack(), scale [N] float32 -> y [M, N] float32.
torch::Tensor mm(torch::Tensor x, torch::Tensor blocks, torch::Tensor scale) {
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == torch::kFloat32, "mm: x must be 2-D float32");
  TORCH_CHECK(blocks.dim() == 3 && blocks.size(2) == kBlock && blocks.is_contiguous() &&
                  blocks.scalar_type() == torch::kInt8,
              "mm: the weight must come from pack()");
  TORCH_CHECK(scale.scalar_type() == torch::kFloat32 && scale.is_contiguous(),
              "mm: scale must be contiguous float32");
  x = x.contiguous();
  const int64_t M = x.size(0), K = x.size(1), B = blocks.size(0), N = B * kBlock;
  TORCH_CHECK(blocks.size(1) == K, "mm: x has ", K, " columns, the weight ", blocks.size(1));
  TORCH_CHECK(scale.numel() == N, "mm: scale must have one value per output channel");
  auto y = torch::empty({M, N}, x.options());
  const float* xp = x.data_ptr<float>();
  const int8_t* wp = blocks.data_ptr<int8_t>();
  const float* sp = scale.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  at::parallel_for(0, B, 1, [&](int64_t b0, int64_t b1) {
    if (M >= kManyRows)
      many_rows(xp, M, K, wp, yp, N, sp, b0, b1);
    else
      few_rows(xp, M, K, wp, yp, N, sp, b0, b1);
  });
  return y;
}
