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
#include <utility>
#include <vector>

namespace {

enum Fmt : int64_t { kQ8_0 = 8, kQ5_0 = 6, kQ4_K = 12, kQ6_K = 14 };  // ggml's type ids
constexpr int64_t kGroup = 32;
constexpr int64_t kLanes = 8;            // outputs per panel
constexpr int64_t kRows = 4;             // rows of x per register tile
constexpr int64_t kChunkBytes = 1 << 17;  // panels kept in cache while the row tiles pass
constexpr int64_t kAhead = 4096;         // prefetch distance in a panel's stream
constexpr int64_t kMaxChunk = 32;         // panels per chunk, at most
constexpr int64_t kSliceWeights = 2048;  // k per slice when several rows meet a panel
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
};

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

// Row m of x -> int16 values and per-group scales, from that row alone.
void quantize_row(const float* x, int64_t K, int16_t* q, float* d, float* s, int32_t* h) {
  for (int64_t g = 0; g < K / kGroup; ++g) {
    const float* xg = x + g * kGroup;
    float amax = 0.0f;
    for (int i = 0; i < kGroup; ++i) amax = std::max(amax, std::fabs(xg[i]));
    const float dx = amax / 32767.0f;
    int32_t sum = 0;
    for (int i = 0; i < kGroup; ++i) {
      if (i == 16) h[2 * g] = sum;
      const float v = dx > 0.0f ? std::nearbyint(xg[i] / dx) : 0.0f;
      q[g * kGroup + i] = (int16_t)std::min(32767.0f, std::max(-32767.0f, v));
      sum += q[g * kGroup + i];
    }
    h[2 * g + 1] = sum - h[2 * g];
    d[g] = dx;
    s[g] = dx * (float)sum;
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
torch::Tensor block_mm(torch::Tensor x, torch::Tensor w, int64_t fmt, int64_t N, int64_t isa) {
  static const int64_t best = block_isa();
  TORCH_CHECK(isa <= best, "block_mm: isa=", isa, " is not run here (best: ", best, ")");
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
  std::vector<int16_t> xq(M * K);
  std::vector<int8_t> xhi(tiles ? M * K : 0);
  std::vector<uint8_t> xlo(tiles ? M * K : 0);
  std::vector<float> xd(M * G), xs(M * G);
  std::vector<int32_t> xh(2 * M * G);
  std::vector<Act> act(M);
  const float* xp = x.data_ptr<float>();
  at::parallel_for(0, M, 16, [&](int64_t m0, int64_t m1) {
    for (int64_t m = m0; m < m1; ++m) {
      quantize_row(xp + m * K, K, &xq[m * K], &xd[m * G], &xs[m * G], &xh[2 * m * G]);
      for (int64_t k = 0; tiles && k < K; ++k) {  // x = 256 * hi + lo, exactly
        xhi[m * K + k] = (int8_t)(xq[m * K + k] >> 8);
        xlo[m * K + k] = (uint8_t)(xq[m * K + k] & 255);
      }
    }
  });
  for (int64_t m = 0; m < M; ++m) act[m] = {&xq[m * K], &xd[m * G], &xs[m * G], &xh[2 * m * G]};
  auto y = torch::empty({M, N}, x.options());
  const uint8_t* wp = w.data_ptr<uint8_t>();
  float* yp = y.data_ptr<float>();
  const int64_t pb = w.size(1);
  at::parallel_for(0, P, 4, [&](int64_t p0, int64_t p1) {
    if (tiles)
      amx::run_amx(fmt, wp, pb, blocks, act.data(), xhi.data(), xlo.data(), K, M, yp, N, p0, p1);
    else if (use >= 1)
      vnni::run(fmt, wp, pb, blocks, act.data(), M, yp, N, p0, p1);
    else
      avx2::run(fmt, wp, pb, blocks, act.data(), M, yp, N, p0, p1);
  });
  return y;
}
