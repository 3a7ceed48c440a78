// Widening MLX affine-quantized weights to float32, fast, for long inputs' BLAS matmul.
//
// A prefill chunk of hundreds of rows is best multiplied by BLAS on float32 weights:
// the quantized product (qmm.h) serves at most kMaxRows rows per pass over the
// weights, so it would unpack every weight dozens of times per chunk. MLX's own CPU
// dequantize is ~50x slower than memory (~150 ms for a 4864x896 4-bit matrix), so the
// kernel widens a layer itself: out[r, j] = q[r, j] * scale + bias, rounded as MLX
// rounds it (a product, then a sum: bit for bit mx.dequantize at float32 scales).
#pragma once

#include <cstdint>

#include "mlx/ops.h"
#include "mlx/primitives.h"

namespace swapless {

namespace mx = mlx::core;

// (N, K) float32 from (N, K*bits/32) uint32 words and (N, K/group) scales and biases
// (any float dtype; widened to float32 first, as the product does).
mx::array dequantize_f32(
    const mx::array& w,
    const mx::array& scales,
    const mx::array& biases,
    int group_size,
    int bits,
    mx::StreamOrDevice s = {});

// The raw widening of rows [0, n) over contiguous buffers, on the path the kernel
// takes now (qmm.h force_path) and the kernel's threads.
void dequant_f32(
    const uint32_t* w,
    const float* scales,
    const float* biases,
    float* out,
    int n,
    int k,
    int group_size,
    int bits);

class DequantizeF32 : public mx::Primitive {
 public:
  DequantizeF32(mx::Stream stream, int group_size, int bits)
      : mx::Primitive(stream), group_size_(group_size), bits_(bits) {}

  void eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs)
      override;
  void eval_gpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs)
      override;

  const char* name() const override {
    return "SwaplessDequantizeF32";
  }

  bool is_equivalent(const mx::Primitive& other) const override;

 private:
  int group_size_;
  int bits_;
};

}  // namespace swapless
