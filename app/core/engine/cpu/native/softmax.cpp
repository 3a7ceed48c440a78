// Softmax weights in one pass per row (see softmax.h): AVX2+FMA chosen at run time, a
// scalar path with the same arithmetic.
#include "softmax.h"

#include "block.h"
#include "qmm.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define SWAPLESS_SOFTMAX_X86 1
#endif

#include "mlx/allocator.h"
#include "mlx/backend/cpu/encoder.h"

namespace swapless {

namespace {

// cpu_attention.py's constants: e^x = (e^(x/32))^32, arguments below the floor raised
// to it, and the least-squares polynomial of e^y on [-30/32, 0], low order first.
constexpr float kFloor = -30.0f;
constexpr float kShrink = 1.0f / 32.0f;
constexpr float kC[8] = {
    0.999999999539124f,
    0.9999999433506804f,
    0.4999988243148713f,
    0.16665717430266133f,
    0.04162835786161558f,
    0.008247832877330613f,
    0.0012805174650401359f,
    0.00012331352810273377f,
};

inline float weight_of(float score, float row_max) {
  const float y = std::max((score - row_max) * kShrink, kFloor * kShrink);
  const float y2 = y * y;
  const float low = (kC[0] + kC[1] * y) + y2 * (kC[2] + kC[3] * y);
  const float high = (kC[4] + kC[5] * y) + y2 * (kC[6] + kC[7] * y);
  float e = low + (y2 * y2) * high;
  for (int i = 0; i < 5; ++i) {
    e = e * e;
  }
  return e;
}

float row_scalar(const float* s, float* w, int n) {
  float row_max = s[0];
  for (int i = 1; i < n; ++i) {
    row_max = std::max(row_max, s[i]);
  }
  float sum = 0.0f;
  for (int i = 0; i < n; ++i) {
    w[i] = weight_of(s[i], row_max);
    sum += w[i];
  }
  return sum;
}

#ifdef SWAPLESS_SOFTMAX_X86

#define SWAPLESS_TARGET __attribute__((target("avx2,fma")))

SWAPLESS_TARGET float hsum(__m256 v) {
  __m128 lo = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
  lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
  return _mm_cvtss_f32(lo);
}

SWAPLESS_TARGET float hmax(__m256 v) {
  __m128 lo = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  lo = _mm_max_ps(lo, _mm_movehl_ps(lo, lo));
  lo = _mm_max_ss(lo, _mm_movehdup_ps(lo));
  return _mm_cvtss_f32(lo);
}

SWAPLESS_TARGET float row_avx2(const float* s, float* w, int n) {
  const int vec = n - n % 8;
  __m256 m = _mm256_set1_ps(s[0]);
  for (int i = 0; i < vec; i += 8) {
    m = _mm256_max_ps(m, _mm256_loadu_ps(s + i));
  }
  float row_max = hmax(m);
  for (int i = vec; i < n; ++i) {
    row_max = std::max(row_max, s[i]);
  }
  const __m256 vmax = _mm256_set1_ps(row_max);
  const __m256 shrink = _mm256_set1_ps(kShrink);
  const __m256 floor = _mm256_set1_ps(kFloor * kShrink);
  __m256 c[8];
  for (int k = 0; k < 8; ++k) {
    c[k] = _mm256_set1_ps(kC[k]);
  }
  __m256 total = _mm256_setzero_ps();
  for (int i = 0; i < vec; i += 8) {
    const __m256 y =
        _mm256_max_ps(_mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(s + i), vmax), shrink), floor);
    const __m256 y2 = _mm256_mul_ps(y, y);
    const __m256 low = _mm256_add_ps(
        _mm256_fmadd_ps(c[1], y, c[0]), _mm256_mul_ps(y2, _mm256_fmadd_ps(c[3], y, c[2])));
    const __m256 high = _mm256_add_ps(
        _mm256_fmadd_ps(c[5], y, c[4]), _mm256_mul_ps(y2, _mm256_fmadd_ps(c[7], y, c[6])));
    __m256 e = _mm256_fmadd_ps(_mm256_mul_ps(y2, y2), high, low);
    for (int k = 0; k < 5; ++k) {
      e = _mm256_mul_ps(e, e);
    }
    _mm256_storeu_ps(w + i, e);
    total = _mm256_add_ps(total, e);
  }
  float sum = hsum(total);
  for (int i = vec; i < n; ++i) {
    w[i] = weight_of(s[i], row_max);
    sum += w[i];
  }
  return sum;
}

#undef SWAPLESS_TARGET

bool has_avx2() {
  static const bool yes = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  }();
  return yes;
}

#else

bool has_avx2() {
  return false;
}

float row_avx2(const float* s, float* w, int n) {
  return row_scalar(s, w, n);
}

#endif

}  // namespace

std::vector<mx::array> softmax_weights(const mx::array& scores, mx::StreamOrDevice s) {
  if (scores.dtype() != mx::float32 || scores.ndim() < 1 || scores.shape(-1) < 1) {
    throw std::invalid_argument("softmax_weights: scores must be float32 with a last axis");
  }
  auto stream = mx::to_stream(s);
  mx::Shape sums_shape = scores.shape();
  sums_shape.back() = 1;
  return mx::array::make_arrays(
      {scores.shape(), sums_shape},
      {mx::float32, mx::float32},
      std::make_shared<SoftmaxWeights>(stream),
      {scores});
}

void SoftmaxWeights::eval_cpu(
    const std::vector<mx::array>& inputs,
    std::vector<mx::array>& outputs) {
  const auto& scores = inputs[0];
  for (auto& out : outputs) {
    out.set_data(mx::allocator::malloc(out.nbytes()));
  }
  auto& encoder = mx::cpu::get_command_encoder(stream());
  encoder.set_input_array(scores);
  encoder.set_output_array(outputs[0]);
  encoder.set_output_array(outputs[1]);
  const int n = scores.shape(-1);
  const size_t rows = scores.size() / n;
  // Scores come row-contiguous from the KV products; a strided view is gathered in the
  // task (no copy node: each costs MLX microseconds per token).
  encoder.dispatch([scores, wp = outputs[0].data<float>(), sums = outputs[1].data<float>(),
                    n, rows]() {
    std::vector<float> scratch;
    const float* sp = contiguous_row(scores, scratch);
    // The kernel's forced path (force_path / force_scalar) holds here too.
    const bool fast = has_avx2() && std::strcmp(simd_path(), "scalar") != 0;
    for (size_t r = 0; r < rows; ++r) {
      const float* s = sp + r * n;
      float* w = wp + r * n;
      sums[r] = fast ? row_avx2(s, w, n) : row_scalar(s, w, n);
    }
  });
}

void SoftmaxWeights::eval_gpu(const std::vector<mx::array>&, std::vector<mx::array>&) {
  throw std::runtime_error("SwaplessSoftmaxWeights runs on the CPU only");
}

}  // namespace swapless
