// The quantized product: an AVX2+FMA path chosen at run time, a portable scalar path.
//
// Both widen one group's packed words in registers to q * scale + bias (exactly the
// dequantized weight) and multiply it into the input rows, so the result matches
// x @ dequantize(w).T up to float32 summation order. No -march flag: the AVX2 code is
// compiled per function (target attribute) and entered only when the CPU reports it.
#include "qmm.h"

#include <atomic>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define SWAPLESS_X86 1
#endif

#include "mlx/allocator.h"
#include "mlx/backend/cpu/encoder.h"

namespace swapless {

namespace {

std::atomic<bool> g_force_scalar{false};
std::atomic<int> g_threads{1};

// Below this many weights a second thread costs more to start than it saves.
constexpr long kMinWeightsPerThread = 1L << 20;

template <int BITS>
void rows_scalar(
    const float* x,
    const uint32_t* w,
    const float* s,
    const float* b,
    float* out,
    int m,
    int n0,
    int n1,
    int n,
    int k,
    int g) {
  constexpr int per_word = 32 / BITS;
  constexpr uint32_t mask = (1u << BITS) - 1u;
  const int words_per_row = k / per_word;
  const int groups = k / g;
  for (int r = n0; r < n1; ++r) {
    const uint32_t* wr = w + static_cast<size_t>(r) * words_per_row;
    const float* sr = s + static_cast<size_t>(r) * groups;
    const float* br = b + static_cast<size_t>(r) * groups;
    for (int row = 0; row < m; ++row) {
      const float* xr = x + static_cast<size_t>(row) * k;
      float acc = 0.0f;
      for (int gi = 0; gi < groups; ++gi) {
        const float scale = sr[gi];
        const float bias = br[gi];
        for (int j = gi * g; j < (gi + 1) * g; ++j) {
          const uint32_t q = (wr[j / per_word] >> ((j % per_word) * BITS)) & mask;
          acc += (static_cast<float>(q) * scale + bias) * xr[j];
        }
      }
      out[static_cast<size_t>(row) * n + r] = acc;
    }
  }
}

#ifdef SWAPLESS_X86

// Eight consecutive quantized values (one "octet") as floats.
template <int BITS>
__attribute__((target("avx2,fma"))) inline __m256 octet(const uint32_t* wr, int o) {
  if constexpr (BITS == 4) {
    const __m256i shifts = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);
    __m256i v = _mm256_set1_epi32(static_cast<int>(wr[o]));
    v = _mm256_and_si256(_mm256_srlv_epi32(v, shifts), _mm256_set1_epi32(0xF));
    return _mm256_cvtepi32_ps(v);
  } else {
    // Little-endian: byte j of the row is element j (8 bits, 4 to a word).
    const __m128i bytes = _mm_loadl_epi64(
        reinterpret_cast<const __m128i*>(reinterpret_cast<const uint8_t*>(wr) + 8 * o));
    return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(bytes));
  }
}

__attribute__((target("avx2,fma"))) inline float hsum(__m256 v) {
  __m128 lo = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
  lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
  return _mm_cvtss_f32(lo);
}

// M input rows at once. With few rows, U independent accumulators per row keep the
// FMA pipeline full (its latency is 4 cycles, two issue per cycle).
template <int BITS, int M>
__attribute__((target("avx2,fma"))) void rows_avx2(
    const float* x,
    const uint32_t* w,
    const float* s,
    const float* b,
    float* out,
    int n0,
    int n1,
    int n,
    int k,
    int g) {
  constexpr int U = M >= 4 ? 1 : 4 / M;
  const int words_per_row = k * BITS / 32;
  const int groups = k / g;
  const int octets_per_group = g / 8;  // 4, 8 or 16: a multiple of U
  for (int r = n0; r < n1; ++r) {
    const uint32_t* wr = w + static_cast<size_t>(r) * words_per_row;
    const float* sr = s + static_cast<size_t>(r) * groups;
    const float* br = b + static_cast<size_t>(r) * groups;
    __m256 acc[M][U];
    for (int row = 0; row < M; ++row) {
      for (int u = 0; u < U; ++u) {
        acc[row][u] = _mm256_setzero_ps();
      }
    }
    for (int gi = 0; gi < groups; ++gi) {
      const __m256 scale = _mm256_set1_ps(sr[gi]);
      const __m256 bias = _mm256_set1_ps(br[gi]);
      const int first = gi * octets_per_group;
      for (int o = first; o < first + octets_per_group; o += U) {
        for (int u = 0; u < U; ++u) {
          const __m256 wv = _mm256_fmadd_ps(octet<BITS>(wr, o + u), scale, bias);
          for (int row = 0; row < M; ++row) {
            const __m256 xv = _mm256_loadu_ps(x + static_cast<size_t>(row) * k + 8 * (o + u));
            acc[row][u] = _mm256_fmadd_ps(wv, xv, acc[row][u]);
          }
        }
      }
    }
    for (int row = 0; row < M; ++row) {
      __m256 total = acc[row][0];
      for (int u = 1; u < U; ++u) {
        total = _mm256_add_ps(total, acc[row][u]);
      }
      out[static_cast<size_t>(row) * n + r] = hsum(total);
    }
  }
}

template <int BITS>
void rows_avx2_any(
    const float* x,
    const uint32_t* w,
    const float* s,
    const float* b,
    float* out,
    int m,
    int n0,
    int n1,
    int n,
    int k,
    int g) {
  switch (m) {
    case 1: return rows_avx2<BITS, 1>(x, w, s, b, out, n0, n1, n, k, g);
    case 2: return rows_avx2<BITS, 2>(x, w, s, b, out, n0, n1, n, k, g);
    case 3: return rows_avx2<BITS, 3>(x, w, s, b, out, n0, n1, n, k, g);
    case 4: return rows_avx2<BITS, 4>(x, w, s, b, out, n0, n1, n, k, g);
    case 5: return rows_avx2<BITS, 5>(x, w, s, b, out, n0, n1, n, k, g);
    case 6: return rows_avx2<BITS, 6>(x, w, s, b, out, n0, n1, n, k, g);
    case 7: return rows_avx2<BITS, 7>(x, w, s, b, out, n0, n1, n, k, g);
    default: return rows_avx2<BITS, 8>(x, w, s, b, out, n0, n1, n, k, g);
  }
}

bool cpu_has_avx2() {
  static const bool has = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  }();
  return has;
}

#else

bool cpu_has_avx2() {
  return false;
}

#endif

bool use_avx2() {
  return !g_force_scalar.load() && cpu_has_avx2();
}

// Output rows [n0, n1) for up to kMaxRows input rows.
void rows(
    const float* x,
    const uint32_t* w,
    const float* s,
    const float* b,
    float* out,
    int m,
    int n0,
    int n1,
    int n,
    int k,
    int g,
    int bits,
    bool avx2) {
#ifdef SWAPLESS_X86
  if (avx2) {
    if (bits == 4) {
      return rows_avx2_any<4>(x, w, s, b, out, m, n0, n1, n, k, g);
    }
    return rows_avx2_any<8>(x, w, s, b, out, m, n0, n1, n, k, g);
  }
#endif
  if (bits == 4) {
    return rows_scalar<4>(x, w, s, b, out, m, n0, n1, n, k, g);
  }
  return rows_scalar<8>(x, w, s, b, out, m, n0, n1, n, k, g);
}

}  // namespace

const char* simd_path() {
  return use_avx2() ? "avx2" : "scalar";
}

void force_scalar(bool on) {
  g_force_scalar.store(on);
}

void set_threads(int n) {
  g_threads.store(n < 1 ? 1 : n);
}

int threads() {
  return g_threads.load();
}

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
    int bits) {
  const bool avx2 = use_avx2();
  long wanted = static_cast<long>(n) * k / kMinWeightsPerThread;
  int workers = static_cast<int>(std::min<long>(g_threads.load(), std::max<long>(wanted, 1)));
  for (int m0 = 0; m0 < m; m0 += kMaxRows) {
    const int mm = std::min(kMaxRows, m - m0);
    const float* xs = x + static_cast<size_t>(m0) * k;
    float* os = out + static_cast<size_t>(m0) * n;
    if (workers <= 1) {
      rows(xs, w, scales, biases, os, mm, 0, n, n, k, group_size, bits, avx2);
      continue;
    }
    // Contiguous row slices: each thread streams its own stretch of the weights.
    std::vector<std::thread> pool;
    const int step = (n + workers - 1) / workers;
    for (int t = 1; t < workers; ++t) {
      const int n0 = t * step;
      const int n1 = std::min(n, n0 + step);
      if (n0 < n1) {
        pool.emplace_back(
            rows, xs, w, scales, biases, os, mm, n0, n1, n, k, group_size, bits, avx2);
      }
    }
    rows(xs, w, scales, biases, os, mm, 0, std::min(n, step), n, k, group_size, bits, avx2);
    for (auto& th : pool) {
      th.join();
    }
  }
}

mx::array quantized_matvec(
    const mx::array& x,
    const mx::array& w,
    const mx::array& scales,
    const mx::array& biases,
    int group_size,
    int bits,
    mx::StreamOrDevice s) {
  if (bits != 4 && bits != 8) {
    throw std::invalid_argument("quantized_matvec: bits must be 4 or 8");
  }
  if (group_size != 32 && group_size != 64 && group_size != 128) {
    throw std::invalid_argument("quantized_matvec: group_size must be 32, 64 or 128");
  }
  if (w.dtype() != mx::uint32 || w.ndim() != 2) {
    throw std::invalid_argument("quantized_matvec: w must be a 2-D uint32 array");
  }
  if (x.ndim() < 1 || !mx::issubdtype(x.dtype(), mx::floating)) {
    throw std::invalid_argument("quantized_matvec: x must be a floating array");
  }
  const int n = w.shape(0);
  const int k = w.shape(1) * (32 / bits);
  const int groups = k / group_size;
  if (x.shape(-1) != k) {
    throw std::invalid_argument(
        "quantized_matvec: x has " + std::to_string(x.shape(-1)) +
        " columns, the weights " + std::to_string(k));
  }
  const mx::Shape group_shape{n, groups};
  if (k % group_size != 0 || scales.shape() != group_shape ||
      biases.shape() != group_shape) {
    throw std::invalid_argument("quantized_matvec: scales/biases must be (N, K/group)");
  }
  auto stream = mx::to_stream(s);
  auto xf = mx::contiguous(mx::astype(x, mx::float32, stream), false, stream);
  auto wc = mx::contiguous(w, false, stream);
  auto sf = mx::contiguous(mx::astype(scales, mx::float32, stream), false, stream);
  auto bf = mx::contiguous(mx::astype(biases, mx::float32, stream), false, stream);
  mx::Shape out_shape = x.shape();
  out_shape.back() = n;
  auto out = mx::array(
      out_shape,
      mx::float32,
      std::make_shared<QuantizedMatvec>(stream, group_size, bits),
      {xf, wc, sf, bf});
  return mx::astype(out, x.dtype(), stream);
}

void QuantizedMatvec::eval_cpu(
    const std::vector<mx::array>& inputs,
    std::vector<mx::array>& outputs) {
  const auto& x = inputs[0];
  const auto& w = inputs[1];
  const auto& sc = inputs[2];
  const auto& bi = inputs[3];
  auto& out = outputs[0];
  for (const auto* a : {&x, &w, &sc, &bi}) {
    if (!a->flags().row_contiguous) {
      throw std::runtime_error("SwaplessQuantizedMatvec: inputs must be row-contiguous");
    }
  }
  out.set_data(mx::allocator::malloc(out.nbytes()));
  auto& encoder = mx::cpu::get_command_encoder(stream());
  encoder.set_input_array(x);
  encoder.set_input_array(w);
  encoder.set_input_array(sc);
  encoder.set_input_array(bi);
  encoder.set_output_array(out);
  const int k = x.shape(-1);
  const int m = static_cast<int>(x.size() / k);
  const int n = out.shape(-1);
  encoder.dispatch([xp = x.data<float>(),
                    wp = w.data<uint32_t>(),
                    sp = sc.data<float>(),
                    bp = bi.data<float>(),
                    op = out.data<float>(),
                    m,
                    n,
                    k,
                    g = group_size_,
                    bits = bits_]() { qmm_f32(xp, wp, sp, bp, op, m, n, k, g, bits); });
}

void QuantizedMatvec::eval_gpu(
    const std::vector<mx::array>&,
    std::vector<mx::array>&) {
  throw std::runtime_error("SwaplessQuantizedMatvec runs on the CPU only");
}

bool QuantizedMatvec::is_equivalent(const mx::Primitive& other) const {
  const auto& o = static_cast<const QuantizedMatvec&>(other);
  return group_size_ == o.group_size_ && bits_ == o.bits_;
}

}  // namespace swapless
