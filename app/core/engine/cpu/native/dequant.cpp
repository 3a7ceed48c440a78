// Widening affine-quantized weights to float32: AVX-512 and AVX2 paths chosen at run
// time (the product's switch, qmm.h), a scalar path.
//
// Every path computes float(q) * scale, then + bias, as two roundings: what MLX's
// dequantize computes, so the result is bit for bit mx.dequantize's at float32 scales.
// CMake compiles this file with -ffp-contract=off: the compiler must not fuse the two
// into one FMA (one rounding, up to an ulp away), in the intrinsics code either.
#include "dequant.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define SWAPLESS_DQ_X86 1
#endif

#include "mlx/allocator.h"
#include "mlx/backend/cpu/encoder.h"
#include "qmm.h"

namespace swapless {

namespace {

// Below this many weights per thread, waking another thread costs more than it saves.
constexpr long kMinWeightsPerThread = 1L << 18;

// One call's operands: rows [r0, r1) of the (n, k) output.
struct Rows {
  const uint8_t* w;  // the packed words as bytes (little-endian: element 0 lowest)
  const float* s;
  const float* b;
  float* out;
  int k;
  int g;
};

template <int BITS>
void rows_scalar(const Rows& j, int r0, int r1) {
  constexpr int per_byte = 8 / BITS;
  constexpr unsigned mask = (1u << BITS) - 1u;
  const int groups = j.k / j.g;
  const size_t row_bytes = static_cast<size_t>(j.k) / per_byte;
  for (int r = r0; r < r1; ++r) {
    const uint8_t* wr = j.w + r * row_bytes;
    float* o = j.out + static_cast<size_t>(r) * j.k;
    for (int gi = 0; gi < groups; ++gi) {
      const float s = j.s[static_cast<size_t>(r) * groups + gi];
      const float b = j.b[static_cast<size_t>(r) * groups + gi];
      for (int e = gi * j.g; e < (gi + 1) * j.g; ++e) {
        const unsigned q = (wr[e / per_byte] >> ((e % per_byte) * BITS)) & mask;
        const float scaled = static_cast<float>(q) * s;
        o[e] = scaled + b;
      }
    }
  }
}

#ifdef SWAPLESS_DQ_X86

// 4 bits: the 16 values q * s + b of a group are a table, looked up per nibble
// (vpermps reads the low 4 bits of each index). 16 bytes hold 32 weights: low
// nibbles are the even elements, high nibbles the odd ones; interleaving the two
// byte vectors puts them back in order.
__attribute__((target("avx512f"))) void rows4_avx512(const Rows& j, int r0, int r1) {
  const __m512 levels =
      _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m128i low4 = _mm_set1_epi8(0x0F);
  const int groups = j.k / j.g;
  const size_t row_bytes = static_cast<size_t>(j.k) / 2;
  for (int r = r0; r < r1; ++r) {
    const uint8_t* wr = j.w + r * row_bytes;
    float* o = j.out + static_cast<size_t>(r) * j.k;
    for (int gi = 0; gi < groups; ++gi) {
      const size_t at = static_cast<size_t>(r) * groups + gi;
      const __m512 table = _mm512_add_ps(
          _mm512_mul_ps(levels, _mm512_set1_ps(j.s[at])), _mm512_set1_ps(j.b[at]));
      for (int e = gi * j.g; e < (gi + 1) * j.g; e += 32) {
        const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(wr + e / 2));
        const __m128i lo = _mm_and_si128(v, low4);
        const __m128i hi = _mm_and_si128(_mm_srli_epi16(v, 4), low4);
        const __m512i first = _mm512_cvtepu8_epi32(_mm_unpacklo_epi8(lo, hi));
        const __m512i second = _mm512_cvtepu8_epi32(_mm_unpackhi_epi8(lo, hi));
        _mm512_storeu_ps(o + e, _mm512_permutexvar_ps(first, table));
        _mm512_storeu_ps(o + e + 16, _mm512_permutexvar_ps(second, table));
      }
    }
  }
}

__attribute__((target("avx512f"))) void rows8_avx512(const Rows& j, int r0, int r1) {
  const int groups = j.k / j.g;
  for (int r = r0; r < r1; ++r) {
    const uint8_t* wr = j.w + static_cast<size_t>(r) * j.k;
    float* o = j.out + static_cast<size_t>(r) * j.k;
    for (int gi = 0; gi < groups; ++gi) {
      const size_t at = static_cast<size_t>(r) * groups + gi;
      const __m512 s = _mm512_set1_ps(j.s[at]);
      const __m512 b = _mm512_set1_ps(j.b[at]);
      for (int e = gi * j.g; e < (gi + 1) * j.g; e += 16) {
        const __m512 q = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(
            _mm_loadu_si128(reinterpret_cast<const __m128i*>(wr + e))));
        _mm512_storeu_ps(o + e, _mm512_add_ps(_mm512_mul_ps(q, s), b));
      }
    }
  }
}

#define SWAPLESS_AVX2 __attribute__((target("avx2")))

SWAPLESS_AVX2 inline void store8(float* o, __m128i bytes, __m256 s, __m256 b) {
  const __m256 q = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(bytes));
  _mm256_storeu_ps(o, _mm256_add_ps(_mm256_mul_ps(q, s), b));
}

SWAPLESS_AVX2 void rows4_avx2(const Rows& j, int r0, int r1) {
  const __m128i low4 = _mm_set1_epi8(0x0F);
  const int groups = j.k / j.g;
  const size_t row_bytes = static_cast<size_t>(j.k) / 2;
  for (int r = r0; r < r1; ++r) {
    const uint8_t* wr = j.w + r * row_bytes;
    float* o = j.out + static_cast<size_t>(r) * j.k;
    for (int gi = 0; gi < groups; ++gi) {
      const size_t at = static_cast<size_t>(r) * groups + gi;
      const __m256 s = _mm256_set1_ps(j.s[at]);
      const __m256 b = _mm256_set1_ps(j.b[at]);
      for (int e = gi * j.g; e < (gi + 1) * j.g; e += 32) {
        const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(wr + e / 2));
        const __m128i lo = _mm_and_si128(v, low4);
        const __m128i hi = _mm_and_si128(_mm_srli_epi16(v, 4), low4);
        const __m128i first = _mm_unpacklo_epi8(lo, hi);
        const __m128i second = _mm_unpackhi_epi8(lo, hi);
        store8(o + e, first, s, b);
        store8(o + e + 8, _mm_srli_si128(first, 8), s, b);
        store8(o + e + 16, second, s, b);
        store8(o + e + 24, _mm_srli_si128(second, 8), s, b);
      }
    }
  }
}

SWAPLESS_AVX2 void rows8_avx2(const Rows& j, int r0, int r1) {
  const int groups = j.k / j.g;
  for (int r = r0; r < r1; ++r) {
    const uint8_t* wr = j.w + static_cast<size_t>(r) * j.k;
    float* o = j.out + static_cast<size_t>(r) * j.k;
    for (int gi = 0; gi < groups; ++gi) {
      const size_t at = static_cast<size_t>(r) * groups + gi;
      const __m256 s = _mm256_set1_ps(j.s[at]);
      const __m256 b = _mm256_set1_ps(j.b[at]);
      for (int e = gi * j.g; e < (gi + 1) * j.g; e += 8) {
        store8(o + e, _mm_loadl_epi64(reinterpret_cast<const __m128i*>(wr + e)), s, b);
      }
    }
  }
}

#undef SWAPLESS_AVX2

#endif

void run_rows(int path, int bits, const Rows& j, int r0, int r1) {
#ifdef SWAPLESS_DQ_X86
  if (path == 2) {
    return bits == 4 ? rows4_avx512(j, r0, r1) : rows8_avx512(j, r0, r1);
  }
  if (path == 1) {
    return bits == 4 ? rows4_avx2(j, r0, r1) : rows8_avx2(j, r0, r1);
  }
#endif
  return bits == 4 ? rows_scalar<4>(j, r0, r1) : rows_scalar<8>(j, r0, r1);
}

}  // namespace

void dequant_f32(
    const uint32_t* w,
    const float* scales,
    const float* biases,
    float* out,
    int n,
    int k,
    int group_size,
    int bits) {
  const int path = active_path();
  const Rows job{reinterpret_cast<const uint8_t*>(w), scales, biases, out, k, group_size};
  const long wanted = static_cast<long>(n) * k / kMinWeightsPerThread;
  const int workers = static_cast<int>(std::min<long>(threads(), std::max<long>(wanted, 1)));
  if (workers <= 1) {
    return run_rows(path, bits, job, 0, n);
  }
  const int step = (n + workers - 1) / workers;
  run_parallel(workers, [&](int t) {
    const int r0 = t * step;
    const int r1 = std::min(n, r0 + step);
    if (r0 < r1) {
      run_rows(path, bits, job, r0, r1);
    }
  });
}

mx::array dequantize_f32(
    const mx::array& w,
    const mx::array& scales,
    const mx::array& biases,
    int group_size,
    int bits,
    mx::StreamOrDevice s) {
  const int k = check_packed("dequantize_f32", w, scales, biases, group_size, bits);
  const int n = w.shape(0);
  if (!mx::issubdtype(scales.dtype(), mx::floating) ||
      !mx::issubdtype(biases.dtype(), mx::floating)) {
    throw std::invalid_argument("dequantize_f32: scales and biases must be floating");
  }
  auto stream = mx::to_stream(s);
  auto wc = mx::contiguous(w, false, stream);
  auto sf = mx::contiguous(mx::astype(scales, mx::float32, stream), false, stream);
  auto bf = mx::contiguous(mx::astype(biases, mx::float32, stream), false, stream);
  return mx::array(
      mx::Shape{n, k},
      mx::float32,
      std::make_shared<DequantizeF32>(stream, group_size, bits),
      {wc, sf, bf});
}

void DequantizeF32::eval_cpu(
    const std::vector<mx::array>& inputs,
    std::vector<mx::array>& outputs) {
  const auto& w = inputs[0];
  const auto& sc = inputs[1];
  const auto& bi = inputs[2];
  auto& out = outputs[0];
  for (const auto* a : {&w, &sc, &bi}) {
    if (!a->flags().row_contiguous) {
      throw std::runtime_error("SwaplessDequantizeF32: inputs must be row-contiguous");
    }
  }
  out.set_data(mx::allocator::malloc(out.nbytes()));
  auto& encoder = mx::cpu::get_command_encoder(stream());
  encoder.set_input_array(w);
  encoder.set_input_array(sc);
  encoder.set_input_array(bi);
  encoder.set_output_array(out);
  encoder.dispatch([wp = w.data<uint32_t>(),
                    sp = sc.data<float>(),
                    bp = bi.data<float>(),
                    op = out.data<float>(),
                    n = out.shape(0),
                    k = out.shape(1),
                    g = group_size_,
                    bits = bits_]() { dequant_f32(wp, sp, bp, op, n, k, g, bits); });
}

void DequantizeF32::eval_gpu(
    const std::vector<mx::array>&,
    std::vector<mx::array>&) {
  throw std::runtime_error("SwaplessDequantizeF32 runs on the CPU only");
}

bool DequantizeF32::is_equivalent(const mx::Primitive& other) const {
  const auto& o = static_cast<const DequantizeF32&>(other);
  return group_size_ == o.group_size_ && bits_ == o.bits_;
}

}  // namespace swapless
