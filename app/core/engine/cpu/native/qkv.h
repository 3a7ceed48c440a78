// Decode attention's two products read straight from a KV cache, on the CPU.
//
// scores = q @ K^T and out = p @ V per (batch, kv head), where K and V are a cache's
// keys and values as stored: dense (float32, float16 or bfloat16) or MLX affine
// quantized along head_dim (4 or 8 bits, groups 32/64/128, scales and biases in any of
// the three float dtypes). They are widened in registers only, and read through their
// strides, so a cache's slice of its allocation is never copied.
#pragma once

#include <optional>

#include "mlx/ops.h"
#include "mlx/primitives.h"

namespace swapless {

namespace mx = mlx::core;

// q: (B, H, R, D) float32 query rows; k: (B, H, T, D) dense, or (B, H, T, D*bits/32)
// uint32 with scales/biases (B, H, T, D/group). bits 16 means dense. Returns (B, H, R, T)
// float32.
mx::array kv_scores(
    const mx::array& q,
    const mx::array& k,
    const std::optional<mx::array>& scales,
    const std::optional<mx::array>& biases,
    int group_size,
    int bits,
    mx::StreamOrDevice s = {});

// p: (B, H, R, T) float32 weights; v as k above. Returns (B, H, R, D) float32.
mx::array kv_values(
    const mx::array& p,
    const mx::array& v,
    const std::optional<mx::array>& scales,
    const std::optional<mx::array>& biases,
    int group_size,
    int bits,
    mx::StreamOrDevice s = {});

class KVProduct : public mx::Primitive {
 public:
  KVProduct(mx::Stream stream, bool values, int group_size, int bits)
      : mx::Primitive(stream), values_(values), group_size_(group_size), bits_(bits) {}

  void eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs)
      override;
  void eval_gpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs)
      override;

  const char* name() const override {
    return values_ ? "SwaplessKVValues" : "SwaplessKVScores";
  }

  bool is_equivalent(const mx::Primitive& other) const override;

 private:
  bool values_;
  int group_size_;
  int bits_;
};

}  // namespace swapless
