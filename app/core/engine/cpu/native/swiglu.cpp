// silu(gate) * up: AVX-512 and AVX2+FMA paths chosen at run time, a scalar path.
//
// exp(x) = 2^n * e^r with n = round(x / ln 2) and r = x - n ln 2 in two parts (Cephes
// expf: |r| <= ln 2 / 2, a degree-7 polynomial, ~1 ulp). Arguments are clamped to
// [-87.3, 88.3] so that e^-gate stays finite: a very negative gate then gives a result
// of about gate * up * 1e-38 (0 in practice), a very positive one gate * up.
#include "swiglu.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define SWAPLESS_SG_X86 1
#endif

#include "mlx/allocator.h"
#include "mlx/backend/cpu/encoder.h"
#include "qmm.h"

namespace swapless {

namespace {

// Below this many elements per thread, waking another thread costs more than it saves.
constexpr long kMinPerThread = 1L << 16;

constexpr float kLog2e = 1.44269504088896341f;
constexpr float kLn2Hi = 0.693359375f;
constexpr float kLn2Lo = -2.12194440e-4f;
constexpr float kLow = -87.3f;
constexpr float kHigh = 88.3f;
constexpr float kP0 = 1.9875691500e-4f;
constexpr float kP1 = 1.3981999507e-3f;
constexpr float kP2 = 8.3334519073e-3f;
constexpr float kP3 = 4.1665795894e-2f;
constexpr float kP4 = 1.6666665459e-1f;
constexpr float kP5 = 5.0000001201e-1f;

void run_scalar(const float* g, const float* u, float* o, long n0, long n1) {
  for (long i = n0; i < n1; ++i) {
    const float e = std::exp(std::min(std::max(-g[i], kLow), kHigh));
    o[i] = g[i] * u[i] / (1.0f + e);
  }
}

#ifdef SWAPLESS_SG_X86

#define SWAPLESS_512 __attribute__((target("avx512f")))

SWAPLESS_512 inline __m512 exp512(__m512 x) {
  x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(kLow)), _mm512_set1_ps(kHigh));
  const __m512 n = _mm512_roundscale_ps(
      _mm512_mul_ps(x, _mm512_set1_ps(kLog2e)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(kLn2Hi), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(kLn2Lo), r);
  __m512 p = _mm512_set1_ps(kP0);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kP1));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kP2));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kP3));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kP4));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kP5));
  p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  return _mm512_scalef_ps(p, n);
}

SWAPLESS_512 void run_avx512(const float* g, const float* u, float* o, long n0, long n1) {
  long i = n0;
  for (; i + 16 <= n1; i += 16) {
    const __m512 gv = _mm512_loadu_ps(g + i);
    const __m512 e = exp512(_mm512_sub_ps(_mm512_setzero_ps(), gv));
    const __m512 num = _mm512_mul_ps(gv, _mm512_loadu_ps(u + i));
    _mm512_storeu_ps(o + i, _mm512_div_ps(num, _mm512_add_ps(_mm512_set1_ps(1.0f), e)));
  }
  run_scalar(g, u, o, i, n1);
}

#define SWAPLESS_256 __attribute__((target("avx2,fma")))

SWAPLESS_256 inline __m256 exp256(__m256 x) {
  x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(kLow)), _mm256_set1_ps(kHigh));
  const __m256 n = _mm256_round_ps(
      _mm256_mul_ps(x, _mm256_set1_ps(kLog2e)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(kLn2Hi), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(kLn2Lo), r);
  __m256 p = _mm256_set1_ps(kP0);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kP1));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kP2));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kP3));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kP4));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kP5));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  // 2^n for n in [-126, 127] (the clamp keeps it there): n + 127 in the exponent bits.
  const __m256i bits = _mm256_slli_epi32(
      _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(bits));
}

SWAPLESS_256 void run_avx2(const float* g, const float* u, float* o, long n0, long n1) {
  long i = n0;
  for (; i + 8 <= n1; i += 8) {
    const __m256 gv = _mm256_loadu_ps(g + i);
    const __m256 e = exp256(_mm256_sub_ps(_mm256_setzero_ps(), gv));
    const __m256 num = _mm256_mul_ps(gv, _mm256_loadu_ps(u + i));
    _mm256_storeu_ps(o + i, _mm256_div_ps(num, _mm256_add_ps(_mm256_set1_ps(1.0f), e)));
  }
  run_scalar(g, u, o, i, n1);
}

#endif

void run_range(int path, const float* g, const float* u, float* o, long n0, long n1) {
#ifdef SWAPLESS_SG_X86
  if (path == 2) {
    return run_avx512(g, u, o, n0, n1);
  }
  if (path == 1) {
    return run_avx2(g, u, o, n0, n1);
  }
#endif
  run_scalar(g, u, o, n0, n1);
}

}  // namespace

void swiglu_f32(const float* gate, const float* up, float* out, long n) {
  const int path = active_path();
  const int workers =
      static_cast<int>(std::min<long>(threads(), std::max<long>(n / kMinPerThread, 1)));
  if (workers <= 1) {
    return run_range(path, gate, up, out, 0, n);
  }
  const long step = (n + workers - 1) / workers;
  run_parallel(workers, [&](int t) {
    const long n0 = t * step;
    const long n1 = std::min(n, n0 + step);
    if (n0 < n1) {
      run_range(path, gate, up, out, n0, n1);
    }
  });
}

mx::array swiglu(const mx::array& gate, const mx::array& up, mx::StreamOrDevice s) {
  if (gate.shape() != up.shape()) {
    throw std::invalid_argument("swiglu: gate and up must have the same shape");
  }
  if (!mx::issubdtype(gate.dtype(), mx::floating) ||
      !mx::issubdtype(up.dtype(), mx::floating)) {
    throw std::invalid_argument("swiglu: gate and up must be floating arrays");
  }
  auto stream = mx::to_stream(s);
  auto g = mx::contiguous(mx::astype(gate, mx::float32, stream), false, stream);
  auto u = mx::contiguous(mx::astype(up, mx::float32, stream), false, stream);
  auto out = mx::array(gate.shape(), mx::float32, std::make_shared<SwiGLU>(stream), {g, u});
  return mx::astype(out, gate.dtype(), stream);
}

void SwiGLU::eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) {
  const auto& g = inputs[0];
  const auto& u = inputs[1];
  auto& out = outputs[0];
  if (!g.flags().row_contiguous || !u.flags().row_contiguous) {
    throw std::runtime_error("SwaplessSwiGLU: inputs must be row-contiguous");
  }
  out.set_data(mx::allocator::malloc(out.nbytes()));
  auto& encoder = mx::cpu::get_command_encoder(stream());
  encoder.set_input_array(g);
  encoder.set_input_array(u);
  encoder.set_output_array(out);
  encoder.dispatch([gp = g.data<float>(),
                    up = u.data<float>(),
                    op = out.data<float>(),
                    n = static_cast<long>(out.size())]() { swiglu_f32(gp, up, op, n); });
}

void SwiGLU::eval_gpu(const std::vector<mx::array>&, std::vector<mx::array>&) {
  throw std::runtime_error("SwaplessSwiGLU runs on the CPU only");
}

}  // namespace swapless
