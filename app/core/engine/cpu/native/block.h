// One decode token through a transformer block's two halves, each as one MLX operation.
//
// A decode step of a Llama/Qwen2-style block on MLX's CPU backend is ~160 graph nodes
// (RMSNorm and RoPE have no CPU kernels in MLX: they run as their composed fallbacks;
// every quantized product adds copies around the kernel; scalars are broadcast), and
// each node costs MLX a few microseconds of scheduling whatever its size. For one token
// the work of those nodes is tiny, so the two halves around attention are computed
// here, each in one node, calling the quantized product (`qmm_f32`) directly:
//
// - `decode_qkv`: RMSNorm, the q/k/v projections (+ biases), RoPE -> q, k, v;
// - `decode_mlp`: o projection + residual, RMSNorm, gate/up, SiLU(gate) * up, down
//   projection + residual -> the block's output.
//
// Attention and the cache update stay MLX operations (the cache classes and the KV
// products are unchanged). All inputs and outputs are float32 except packed weights.
#pragma once

#include <vector>

#include "mlx/ops.h"
#include "mlx/primitives.h"

namespace swapless {

namespace mx = mlx::core;

// A quantized projection's arrays: packed weights, scales, biases and an optional
// additive output bias (4 arrays) or none (3 arrays).
using Projection = std::vector<mx::array>;

// RoPE as mlx's fast.rope: `dims` leading features rotated, pairs (i, i + dims/2), or
// (2i, 2i + 1) when `traditional`; angle (offset * scale) * base^(-2i/dims).
struct Rope {
  int dims;
  bool traditional;
  float base;
  float scale;
  int offset;
};

// Returns q (1, heads, 1, head_dim), k and v (1, kv_heads, 1, head_dim) for one token x
// (any shape of hidden_size elements).
std::vector<mx::array> decode_qkv(
    const mx::array& x,
    const mx::array& norm_weight,
    float eps,
    const Projection& q,
    const Projection& k,
    const Projection& v,
    int group_size,
    int bits,
    int heads,
    int kv_heads,
    int rope_dims,
    bool rope_traditional,
    float rope_base,
    float rope_scale,
    int offset,
    mx::StreamOrDevice s = {});

// Returns h + down(silu(gate(n)) * up(n)) with h = residual + o(attention) and
// n = rmsnorm(h), shaped like `residual`.
mx::array decode_mlp(
    const mx::array& attention,
    const mx::array& residual,
    const Projection& o,
    const mx::array& norm_weight,
    float eps,
    const Projection& gate,
    const Projection& up,
    const Projection& down,
    int group_size,
    int bits,
    mx::StreamOrDevice s = {});

// A float32 array's elements in row order: its own buffer when row-contiguous, else
// gathered into `scratch` through its strides (a view MLX did not copy). Call inside a
// dispatched task, where the array's data has been computed.
const float* contiguous_row(const mx::array& a, std::vector<float>& scratch);

// The layout of a block operation's inputs: which projections carry an output bias.
struct BlockLayout {
  bool mlp;  // decode_mlp (else decode_qkv)
  std::vector<bool> has_bias;  // per projection, in input order
  float eps;
  int group_size;
  int bits;
  int heads;
  int kv_heads;
  Rope rope;
};

class DecodeBlock : public mx::Primitive {
 public:
  DecodeBlock(mx::Stream stream, BlockLayout layout)
      : mx::Primitive(stream), layout_(std::move(layout)) {}

  void eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs)
      override;
  void eval_gpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs)
      override;

  const char* name() const override {
    return layout_.mlp ? "SwaplessDecodeMLP" : "SwaplessDecodeQKV";
  }

  bool is_equivalent(const mx::Primitive& other) const override;

 private:
  BlockLayout layout_;
};

}  // namespace swapless
