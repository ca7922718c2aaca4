// A decoder layer's glue for the lean forward (lean_layers.py), in C++: the ATen ops that
// `lean_forward` issues between its kernel calls, in the same order, on the same tensors, with
// the same kernels (mm, block_mm) for the projections. Every element is therefore the same
// bits as the Python forward's; what goes is the interpreter and the Python bindings around
// two dozen small ops per layer (on a 2-core CPU, ~1/4 of a one-token decode step of the 0.5B
// draft). The cache update and the attention stay in Python, so the attention capture and the
// growing cache work as before.
//
// A projection is three tensors and four integers: (weight, int8 scale or empty, bias or
// empty) and (fmt, N, isa, activation bits), fmt -1 for the int8 kernel (`mm`), else a GGUF
// block type for `block_mm`. An empty tensor means absent (a bias never has zero elements).
#include <torch/extension.h>

#include <vector>

torch::Tensor mm(torch::Tensor x, torch::Tensor blocks, torch::Tensor scale);  // int8_gemm.cpp
torch::Tensor block_mm(torch::Tensor x, torch::Tensor w, int64_t fmt, int64_t N, int64_t isa,
                       int64_t act);  // block_gemm.cpp

namespace {

constexpr int64_t kInt8 = -1;

struct Proj {
  const torch::Tensor& w;
  const torch::Tensor& scale;
  const torch::Tensor& bias;
  int64_t fmt, n, isa, act;
};

constexpr int64_t kInts = 4;  // a projection's integers

// the projection at t[ti:ti+3], i[ii:ii+kInts] (the callers check the arguments' counts)
Proj proj(const std::vector<torch::Tensor>& t, int64_t ti, const std::vector<int64_t>& i,
          int64_t ii) {
  return {t[ti], t[ti + 1], t[ti + 2], i[ii], i[ii + 1], i[ii + 2], i[ii + 3]};
}

// `Int8WeightOnlyLinear.forward` (its direct path) or `BlockLinear.forward`
torch::Tensor linear(const torch::Tensor& x, const Proj& p) {
  auto sizes = x.sizes().vec();
  const auto rows = x.reshape({-1, sizes.back()});
  auto y = p.fmt == kInt8 ? mm(rows, p.w, p.scale) : block_mm(rows, p.w, p.fmt, p.n, p.isa, p.act);
  sizes.back() = p.n;
  y = y.view(sizes);
  return p.bias.numel() ? y + p.bias : y;
}

// `Qwen2RMSNorm.forward` on float32
torch::Tensor rms(const torch::Tensor& h, const torch::Tensor& weight, double eps) {
  const auto variance = h.pow(2).mean(-1, true);
  return weight * (h * at::rsqrt(variance + eps));
}

// `lean_layers._rope`
torch::Tensor rope(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) {
  const int64_t half = x.size(-1) / 2;
  const auto turned = at::cat({-x.slice(-1, half), x.slice(-1, 0, half)}, -1);
  return (x * cos) + (turned * sin);
}

}  // namespace

// Before the cache: the input norm, the q, k and v projections, the rotation. The first
// projection holds `parts` of them stacked (3: q, k, v; 2: q, k; 1: q alone), the others follow
// one each. t: norm weight, the projections; i: head_dim, nq, nk, parts, the projections' ints.
// -> q, k, v as [b, heads, T, d].
std::vector<torch::Tensor> layer_pre(torch::Tensor h, torch::Tensor cos, torch::Tensor sin,
                                     std::vector<torch::Tensor> t, std::vector<int64_t> i,
                                     double eps) {
  TORCH_CHECK(h.scalar_type() == torch::kFloat32 && h.dim() == 3, "layer_pre: h [b, T, H] float32");
  TORCH_CHECK(i.size() >= 4 && i[3] >= 1 && i[3] <= 3, "layer_pre: parts must be 1, 2 or 3");
  const int64_t head_dim = i[0], nq = i[1], nk = i[2], parts = i[3];
  TORCH_CHECK(t.size() == 1 + 3 * (4 - parts) && i.size() == 4 + kInts * (4 - parts),
              "layer_pre: ", 4 - parts, " projections need ", 1 + 3 * (4 - parts), " tensors");
  const auto x = rms(h, t[0], eps);
  std::vector<int64_t> shape(x.sizes().begin(), x.sizes().end() - 1);
  shape.push_back(-1);
  shape.push_back(head_dim);
  const auto c = cos.unsqueeze(1), s = sin.unsqueeze(1);
  const auto heads = [&](int64_t k) {
    return linear(x, proj(t, 1 + 3 * k, i, 4 + kInts * k)).view(shape).transpose(1, 2);
  };
  const auto first = heads(0);
  if (parts == 1) return {rope(first, c, s), rope(heads(1), c, s), heads(2)};
  const auto qk = rope(first.slice(1, 0, nq + nk), c, s);
  return {qk.slice(1, 0, nq), qk.slice(1, nq), parts == 3 ? first.slice(1, nq + nk) : heads(1)};
}

// After the attention: the output projection and residual, the post-attention norm, the gated
// MLP (gate and up stacked, SiLU) and its residual.
// t: o's projection, the norm weight, gate_up's, down's; i: intermediate, o's ints, gate_up's,
// down's. attn: the attention's output [b, T, heads, d]; residual: the layer's input.
torch::Tensor layer_post(torch::Tensor attn, torch::Tensor residual, std::vector<torch::Tensor> t,
                         std::vector<int64_t> i, double eps) {
  TORCH_CHECK(t.size() == 10 && i.size() == 1 + 3 * kInts, "layer_post: 10 tensors and ",
              1 + 3 * kInts, " ints");
  std::vector<int64_t> shape(residual.sizes().begin(), residual.sizes().end() - 1);
  shape.push_back(-1);
  const auto out = linear(attn.reshape(shape).contiguous(), proj(t, 0, i, 1));
  const auto hidden = residual + out;
  const auto x = rms(hidden, t[3], eps);
  const auto gu = linear(x, proj(t, 4, i, 1 + kInts));
  const int64_t n = i[0];
  const auto gated = at::silu(gu.slice(-1, 0, n)) * gu.slice(-1, n);
  return hidden + linear(gated, proj(t, 7, i, 1 + 2 * kInts));
}
