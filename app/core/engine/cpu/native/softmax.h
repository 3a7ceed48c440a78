// Softmax weights of attention scores, for decode attention on the CPU.
//
// MLX's x86 CPU build has no SIMD types: `cpu_attention.softmax_weights` (a row maximum,
// two compiled elementwise kernels and a sum) ran at ~7 ns a score on the 2-core
// machine, 10-15 ms a qwen05 decode step at 4K keys. This computes the same thing
// (the same polynomial exponential with five squarings and the same floor at e^-30
// below the row's maximum) in one pass per row, with AVX2+FMA chosen at run time.
#pragma once

#include <vector>

#include "mlx/ops.h"
#include "mlx/primitives.h"

namespace swapless {

namespace mx = mlx::core;

// scores (..., T) float32 -> [weights (..., T), sums (..., 1)]: weights / sums is the
// softmax of each row.
std::vector<mx::array> softmax_weights(const mx::array& scores, mx::StreamOrDevice s = {});

class SoftmaxWeights : public mx::Primitive {
 public:
  explicit SoftmaxWeights(mx::Stream stream) : mx::Primitive(stream) {}

  void eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs)
      override;
  void eval_gpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs)
      override;

  const char* name() const override {
    return "SwaplessSoftmaxWeights";
  }

  bool is_equivalent(const mx::Primitive&) const override {
    return true;
  }
};

}  // namespace swapless
