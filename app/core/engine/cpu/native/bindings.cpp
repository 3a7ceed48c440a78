// The Python face of the kernel: one op and the switches the tests and bench use.
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/variant.h>
#include <nanobind/stl/vector.h>

#include "dequant.h"
#include "block.h"
#include "qkv.h"
#include "swiglu.h"
#include "qmm.h"
#include "softmax.h"

namespace nb = nanobind;
using namespace nb::literals;

NB_MODULE(_swapless_qmm, m) {
  m.doc() = "Swapless's quantized matrix-vector product for MLX's CPU backend";
  m.def(
      "quantized_matvec",
      &swapless::quantized_matvec,
      "x"_a,
      "w"_a,
      "scales"_a,
      "biases"_a,
      "group_size"_a,
      "bits"_a,
      nb::kw_only(),
      "stream"_a = nb::none(),
      "x @ dequantize(w, scales, biases, group_size, bits).T without widening w.");
  m.def(
      "dequantize_f32",
      &swapless::dequantize_f32,
      "w"_a,
      "scales"_a,
      "biases"_a,
      "group_size"_a,
      "bits"_a,
      nb::kw_only(),
      "stream"_a = nb::none(),
      "dequantize(w, scales, biases, group_size, bits) as (N, K) float32, bit for bit "
      "mx.dequantize at float32 scales (SIMD, the kernel's threads).");
  m.def("swiglu", &swapless::swiglu, "gate"_a, "up"_a, nb::kw_only(),
      "stream"_a = nb::none(),
      "silu(gate) * up with a vectorized exp (mlx-lm's swiglu; MLX's CPU exp is scalar).");
  m.def("kv_scores", &swapless::kv_scores, "q"_a, "k"_a, "scales"_a.none(), "biases"_a.none(),
      "group_size"_a, "bits"_a, nb::kw_only(), "stream"_a = nb::none(),
      "q @ K^T per (batch, kv head) over a cache as stored (bits 16: dense).");
  m.def("kv_values", &swapless::kv_values, "p"_a, "v"_a, "scales"_a.none(), "biases"_a.none(),
      "group_size"_a, "bits"_a, nb::kw_only(), "stream"_a = nb::none(),
      "p @ V per (batch, kv head) over a cache as stored (bits 16: dense).");
  m.def("decode_qkv", &swapless::decode_qkv, "x"_a, "norm_weight"_a, "eps"_a, "q"_a, "k"_a,
      "v"_a, "group_size"_a, "bits"_a, "heads"_a, "kv_heads"_a, "rope_dims"_a,
      "rope_traditional"_a, "rope_base"_a, "rope_scale"_a, "offset"_a, nb::kw_only(),
      "stream"_a = nb::none(),
      "One decode token's RMSNorm, q/k/v projections and RoPE in one operation.");
  m.def("decode_mlp", &swapless::decode_mlp, "attention"_a, "residual"_a, "o"_a,
      "norm_weight"_a, "eps"_a, "gate"_a, "up"_a, "down"_a, "group_size"_a, "bits"_a,
      nb::kw_only(), "stream"_a = nb::none(),
      "One decode token's o projection, residual, RMSNorm and SiLU MLP in one operation.");
  m.def("softmax_weights", &swapless::softmax_weights, "scores"_a, nb::kw_only(),
      "stream"_a = nb::none(),
      "[weights, sums] of each row's softmax (cpu_attention's exponential), one pass.");
  m.def("simd_path", &swapless::simd_path, "The path taken now: avx512, avx2 or scalar.");
  m.def("simd_paths", &swapless::simd_paths, "The paths this CPU can run, fastest first.");
  m.def(
      "force_path",
      &swapless::force_path,
      "name"_a,
      "Force a path (avx512, avx2, scalar) or 'auto'; ValueError if the CPU lacks it.");
  m.def("force_scalar", &swapless::force_scalar, "on"_a, "Force the scalar path.");
  m.def(
      "force_algebra",
      &swapless::force_algebra,
      "on"_a.none(),
      "The per-group algebra on the SIMD paths: on, off, or None (default: off).");
  m.def("set_threads", &swapless::set_threads, "n"_a, "Threads over output rows.");
  m.def("threads", &swapless::threads, "Threads over output rows.");
}
