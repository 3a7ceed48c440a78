// Quantized matrix-vector product over MLX's affine quantization, on the CPU.
//
// y = x @ dequantize(w, scales, biases).T for mlx-lm's packing: `w` is (N, K*bits/32)
// uint32 words, element j of a row sitting at bits (j % (32/bits)) * bits of word
// j / (32/bits); `scales` and `biases` are (N, K/group). The weights are read packed
// and widened in registers only, never in memory.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "mlx/ops.h"
#include "mlx/primitives.h"

namespace swapless {

namespace mx = mlx::core;

// The largest number of input rows one pass over the weights serves; more rows are
// served in passes of this many.
constexpr int kMaxRows = 8;

// The product for float32 inputs; returns (..., N) in x's dtype.
mx::array quantized_matvec(
    const mx::array& x,
    const mx::array& w,
    const mx::array& scales,
    const mx::array& biases,
    int group_size,
    int bits,
    mx::StreamOrDevice s = {});

// Which path the kernel takes now: "avx512", "avx2" or "scalar".
const char* simd_path();

// The paths this CPU can run, fastest first.
std::vector<std::string> simd_paths();

// Forces a path ("avx512", "avx2", "scalar"), or "auto" for the best this CPU has;
// std::invalid_argument for a name this CPU cannot run. Tests compare every path.
void force_path(const std::string& name);

// Forces the scalar path, or back to the best (the first switch; kept for callers).
void force_scalar(bool on);

// The algebra s * dot(x, q) + b * sum(x) per group on the SIMD paths: forced on, off, or
// (nullopt) the default, off: it measured no faster there. The scalar path always uses it.
void force_algebra(std::optional<bool> on);

// The path the kernels take now, as a number: 0 scalar, 1 AVX2+FMA, 2 AVX-512F (the
// other kernels of the module follow the same switch).
int active_path();

// Refuses (std::invalid_argument naming `op`) a format the kernels do not cover: bits
// other than 4 or 8, groups other than 32, 64 or 128.
void check_format(const char* op, int group_size, int bits);

// Checks a layer as mlx-lm packs it (check_format, then (N, K * bits / 32) uint32 words
// and (N, K / group) scales and biases) and returns K, its input width.
int check_packed(
    const char* op,
    const mx::array& w,
    const mx::array& scales,
    const mx::array& biases,
    int group_size,
    int bits);

// Runs fn(0) .. fn(parts - 1) on the kernel's thread pool, fn(0) on the caller.
void run_parallel(int parts, const std::function<void(int)>& fn);

// Rows of the output split across this many threads (1 = the calling worker only),
// taken from a pool that lives as long as the process.
void set_threads(int n);
int threads();

// The raw kernel over contiguous float32 buffers, for the self-test and the bench.
void qmm_f32(
    const float* x,
    const uint32_t* w,
    const float* scales,
    const float* biases,
    float* out,
    int m,
    int n,
    int k,
    int group_size,
    int bits);

class QuantizedMatvec : public mx::Primitive {
 public:
  QuantizedMatvec(mx::Stream stream, int group_size, int bits)
      : mx::Primitive(stream), group_size_(group_size), bits_(bits) {}

  void eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs)
      override;
  void eval_gpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs)
      override;

  const char* name() const override {
    return "SwaplessQuantizedMatvec";
  }

  bool is_equivalent(const mx::Primitive& other) const override;

 private:
  int group_size_;
  int bits_;
};

}  // namespace swapless
