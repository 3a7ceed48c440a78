// The quantized product: AVX-512 and AVX2+FMA paths chosen at run time, a scalar path.
//
// All of them compute x @ dequantize(w).T up to float32 summation order, from the
// packed words, widened in registers only. No -march flag: each SIMD path is compiled
// per function (target attribute) and entered only when the CPU reports its
// instructions. Output rows can be split over a persistent pool of threads.
#include "qmm.h"
#include "pool.h"

#include <algorithm>
#include <atomic>
#include <stdexcept>
#include <string>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define SWAPLESS_X86 1
#endif

#include "mlx/allocator.h"
#include "mlx/backend/cpu/encoder.h"

namespace swapless {

namespace {

enum Path : int { kScalar = 0, kAvx2 = 1, kAvx512 = 2 };

std::atomic<int> g_forced_path{-1};  // -1: the best this CPU has
std::atomic<int> g_algebra{-1};  // 1: the SIMD paths use the algebra (see run_rows)
std::atomic<int> g_threads{1};

// Bytes of a pass's input rows one column slice may take (measured on a 48 KiB L1:
// 24-32 KiB did best; 8 rows of 896 floats, 28 KiB, stay whole).
constexpr long kXBytes = 32L * 1024;

// Below this many weights per thread, waking another thread costs more than it saves.
constexpr long kMinWeightsPerThread = 1L << 20;

// One call's operands. For the SIMD paths `x` is the block-major copy (see
// prepare); `xsum` holds the per-group sums of each input row.
struct Job {
  const float* x;
  const float* xsum;
  const uint32_t* w;
  const float* s;
  const float* b;
  float* out;
  int m;
  int n;
  int k;
  int g;
  int bits;
  // The SIMD paths' column range [k0, k1) (whole groups); past the first range the
  // products are added to `out` (see qmm_f32's column slices).
  int k0 = 0;
  int k1 = 0;
};

// The algebra s * dot(x, q) + b * sum(x) per group: the scalar loop never rebuilds a
// weight, it multiplies the unpacked integer into x.
template <int BITS>
void rows_scalar(const Job& j, int n0, int n1) {
  constexpr int per_word = 32 / BITS;
  constexpr uint32_t mask = (1u << BITS) - 1u;
  const int words_per_row = j.k / per_word;
  const int groups = j.k / j.g;
  for (int r = n0; r < n1; ++r) {
    const uint32_t* wr = j.w + static_cast<size_t>(r) * words_per_row;
    const float* sr = j.s + static_cast<size_t>(r) * groups;
    const float* br = j.b + static_cast<size_t>(r) * groups;
    for (int row = 0; row < j.m; ++row) {
      const float* xr = j.x + static_cast<size_t>(row) * j.k;
      const float* xs = j.xsum + static_cast<size_t>(row) * groups;
      float acc = 0.0f;
      for (int gi = 0; gi < groups; ++gi) {
        float dot = 0.0f;
        for (int e = gi * j.g; e < (gi + 1) * j.g; ++e) {
          const uint32_t q = (wr[e / per_word] >> ((e % per_word) * BITS)) & mask;
          dot += static_cast<float>(q) * xr[e];
        }
        acc += sr[gi] * dot + br[gi] * xs[gi];
      }
      j.out[static_cast<size_t>(row) * j.n + r] = acc;
    }
  }
}

#ifdef SWAPLESS_X86

namespace avx2 {

#define SWAPLESS_TARGET __attribute__((target("avx2,fma")))
using V = __m256;
constexpr int kLanes = 8;

SWAPLESS_TARGET inline V vzero() { return _mm256_setzero_ps(); }
SWAPLESS_TARGET inline V vload(const float* p) { return _mm256_loadu_ps(p); }
SWAPLESS_TARGET inline V vset1(float f) { return _mm256_set1_ps(f); }
SWAPLESS_TARGET inline V vfma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
SWAPLESS_TARGET inline V vadd(V a, V b) { return _mm256_add_ps(a, b); }
SWAPLESS_TARGET inline float vsum(V v) {
  __m128 lo = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
  lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
  return _mm_cvtss_f32(lo);
}

struct Affine {
  V s;
  V b;
};

template <int BITS, bool ALG>
SWAPLESS_TARGET inline Affine affine(float s, float b) {
  return {vset1(s), vset1(b)};
}

// Block c: 16 weights. 4 bits: 8 bytes widened to 8 lanes, low nibbles then high.
template <int BITS, bool ALG>
SWAPLESS_TARGET inline void unpack(const uint8_t* wr, int c, const Affine& a, V& lo, V& hi) {
  if constexpr (BITS == 4) {
    const __m256i v = _mm256_cvtepu8_epi32(
        _mm_loadl_epi64(reinterpret_cast<const __m128i*>(wr + 8 * c)));
    lo = _mm256_cvtepi32_ps(_mm256_and_si256(v, _mm256_set1_epi32(0xF)));
    hi = _mm256_cvtepi32_ps(_mm256_srli_epi32(v, 4));
  } else {
    const __m128i* p = reinterpret_cast<const __m128i*>(wr + 16 * c);
    lo = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(p)));
    hi = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(
        reinterpret_cast<const __m128i*>(wr + 16 * c + 8))));
  }
  if constexpr (!ALG) {
    lo = vfma(lo, a.s, a.b);
    hi = vfma(hi, a.s, a.b);
  }
}

#include "qmm_rows.h"
#undef SWAPLESS_TARGET

}  // namespace avx2

namespace avx512 {

#define SWAPLESS_TARGET __attribute__((target("avx512f")))
using V = __m512;
constexpr int kLanes = 16;

SWAPLESS_TARGET inline V vzero() { return _mm512_setzero_ps(); }
SWAPLESS_TARGET inline V vload(const float* p) { return _mm512_loadu_ps(p); }
SWAPLESS_TARGET inline V vset1(float f) { return _mm512_set1_ps(f); }
SWAPLESS_TARGET inline V vfma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
SWAPLESS_TARGET inline V vadd(V a, V b) { return _mm512_add_ps(a, b); }
SWAPLESS_TARGET inline float vsum(V v) { return _mm512_reduce_add_ps(v); }

// 4 bits: a 16-entry table, q -> q (ALG) or q * s + b, looked up with vpermps (which
// reads only the low 4 bits of each lane: no mask). 8 bits: the scale and bias.
struct Affine {
  V table;
  V s;
  V b;
};

template <int BITS, bool ALG>
SWAPLESS_TARGET inline Affine affine(float s, float b) {
  const V q = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  if constexpr (BITS == 4) {
    return {ALG ? q : vfma(q, vset1(s), vset1(b)), q, q};
  } else {
    return {q, vset1(s), vset1(b)};
  }
}

// Block c: 32 weights. 4 bits: 16 bytes widened to 16 lanes, low nibbles then high.
template <int BITS, bool ALG>
SWAPLESS_TARGET inline void unpack(const uint8_t* wr, int c, const Affine& a, V& lo, V& hi) {
  if constexpr (BITS == 4) {
    const __m512i v = _mm512_cvtepu8_epi32(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(wr + 16 * c)));
    lo = _mm512_permutexvar_ps(v, a.table);
    hi = _mm512_permutexvar_ps(_mm512_srli_epi32(v, 4), a.table);
  } else {
    const uint8_t* p = wr + 32 * c;
    lo = _mm512_cvtepi32_ps(
        _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
    hi = _mm512_cvtepi32_ps(
        _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16))));
    if constexpr (!ALG) {
      lo = vfma(lo, a.s, a.b);
      hi = vfma(hi, a.s, a.b);
    }
  }
}

#include "qmm_rows.h"
#undef SWAPLESS_TARGET

}  // namespace avx512

bool cpu_has(Path path) {
  static const bool avx2 = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  }();
  static const bool avx512 = [] {
    __builtin_cpu_init();
    return avx2 && __builtin_cpu_supports("avx512f");
  }();
  return path == kScalar || (path == kAvx2 && avx2) || (path == kAvx512 && avx512);
}

#else

bool cpu_has(Path path) {
  return path == kScalar;
}

#endif

Path best_path() {
  return cpu_has(kAvx512) ? kAvx512 : cpu_has(kAvx2) ? kAvx2 : kScalar;
}

Path current_path() {
  const int forced = g_forced_path.load();
  return forced < 0 ? best_path() : static_cast<Path>(forced);
}

int lanes(Path path) {
  return path == kAvx512 ? 16 : path == kAvx2 ? 8 : 0;
}

// Per-group sums of x and, on a SIMD path, x copied block-major: block c of every row
// side by side (row r's 2 * lanes floats of block c at (c * m + r) * 2 * lanes), so a
// pass reads its rows' slices of a block from one place at fixed offsets (one pointer,
// however many rows). For 4 bits each block is also reordered to line up with the
// unpacked nibbles: even elements, then odd ones. Done once per pass; every output row
// reuses it.
void prepare(const float* x, int m, int k, int g, int bits, int lane_count, float* xp,
             float* xsum) {
  const int groups = k / g;
  const int block = 2 * lane_count;
  for (int row = 0; row < m; ++row) {
    const float* xr = x + static_cast<size_t>(row) * k;
    for (int gi = 0; gi < groups; ++gi) {
      float sum = 0.0f;
      for (int e = gi * g; e < (gi + 1) * g; ++e) {
        sum += xr[e];
      }
      xsum[static_cast<size_t>(row) * groups + gi] = sum;
    }
    if (lane_count == 0) {
      continue;
    }
    for (int c = 0; c < k; c += block) {
      float* dst = xp + (static_cast<size_t>(c) * m + static_cast<size_t>(row) * block);
      if (bits == 4) {
        for (int i = 0; i < lane_count; ++i) {
          dst[i] = xr[c + 2 * i];
          dst[lane_count + i] = xr[c + 2 * i + 1];
        }
      } else {
        std::copy(xr + c, xr + c + block, dst);
      }
    }
  }
}

void run_rows(Path path, const Job& j, int n0, int n1) {
  // The algebra only when forced: on Zen 4 rebuilding each block (for 4 bits on
  // AVX-512, a table lookup of q * s + b) was as fast or faster for 1-2 rows at groups
  // 64 and 128, as the algebra's per-group reduction of its accumulators costs what it
  // saves (docs/native-kernel.md). The scalar loop always uses it.
  const bool alg = g_algebra.load() == 1;
#ifdef SWAPLESS_X86
  if (path == kAvx512) {
    return avx512::rows(j, n0, n1, alg);
  }
  if (path == kAvx2) {
    return avx2::rows(j, n0, n1, alg);
  }
#endif
  if (j.bits == 4) {
    return rows_scalar<4>(j, n0, n1);
  }
  return rows_scalar<8>(j, n0, n1);
}

Pool& pool() {
  // Never destroyed: its threads wait until the process ends (joining them from a
  // static destructor at interpreter exit could deadlock).
  static Pool* instance = new Pool();
  return *instance;
}

}  // namespace

const char* simd_path() {
  switch (current_path()) {
    case kAvx512: return "avx512";
    case kAvx2: return "avx2";
    default: return "scalar";
  }
}

std::vector<std::string> simd_paths() {
  std::vector<std::string> found;
  for (Path p : {kAvx512, kAvx2, kScalar}) {
    if (cpu_has(p)) {
      found.emplace_back(p == kAvx512 ? "avx512" : p == kAvx2 ? "avx2" : "scalar");
    }
  }
  return found;
}

void force_path(const std::string& name) {
  Path path;
  if (name == "auto") {
    g_forced_path.store(-1);
    return;
  } else if (name == "avx512") {
    path = kAvx512;
  } else if (name == "avx2") {
    path = kAvx2;
  } else if (name == "scalar") {
    path = kScalar;
  } else {
    throw std::invalid_argument(
        "force_path: '" + name + "' is not one of auto, avx512, avx2, scalar");
  }
  if (!cpu_has(path)) {
    throw std::invalid_argument("force_path: this CPU has no " + name + " path");
  }
  g_forced_path.store(path);
}

void force_scalar(bool on) {
  g_forced_path.store(on ? kScalar : -1);
}

void force_algebra(std::optional<bool> on) {
  g_algebra.store(on.has_value() ? static_cast<int>(*on) : -1);
}

int active_path() {
  return static_cast<int>(current_path());
}

void run_parallel(int parts, const std::function<void(int)>& fn) {
  pool().run(parts, fn);
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
  const Path path = current_path();
  const long wanted = static_cast<long>(n) * k / kMinWeightsPerThread;
  const int workers =
      static_cast<int>(std::min<long>(g_threads.load(), std::max<long>(wanted, 1)));
  const int groups = k / group_size;
  const int rows_now = std::min(kMaxRows, m);
  std::vector<float> xsum(static_cast<size_t>(rows_now) * groups);
  const bool reorder = path != kScalar;
  std::vector<float> xp(reorder ? static_cast<size_t>(rows_now) * k : 0);
  for (int m0 = 0; m0 < m; m0 += kMaxRows) {
    const int mm = std::min(kMaxRows, m - m0);
    const float* xs = x + static_cast<size_t>(m0) * k;
    prepare(xs, mm, k, group_size, bits, lanes(path), xp.data(), xsum.data());
    Job job{reorder ? xp.data() : xs, xsum.data(), w, scales, biases,
            out + static_cast<size_t>(m0) * n, mm, n, k, group_size, bits, 0, k};
    // Column slices whose pass of x stays in L1 while every weight row is read: 8
    // rows of 4864 floats (152 KiB) were read from L2 for each weight row, 0.78x the
    // speed of slices (qwen05's down projection, docs/native-kernel.md). The scalar
    // path takes whole rows.
    const long x_bytes = 4L * mm * k;
    const int slices = reorder ? static_cast<int>((x_bytes + kXBytes - 1) / kXBytes) : 1;
    const int groups_per_slice = (groups + slices - 1) / slices;
    for (int g0 = 0; g0 < groups; g0 += groups_per_slice) {
      job.k0 = g0 * group_size;
      job.k1 = std::min(groups, g0 + groups_per_slice) * group_size;
      if (workers <= 1) {
        run_rows(path, job, 0, n);
        continue;
      }
      // Contiguous row slices: each thread streams its own stretch of the weights.
      const int step = (n + workers - 1) / workers;
      pool().run(workers, [&](int t) {
        const int n0 = t * step;
        const int n1 = std::min(n, n0 + step);
        if (n0 < n1) {
          run_rows(path, job, n0, n1);
        }
      });
    }
  }
}

void check_format(const char* op, int group_size, int bits) {
  if (bits != 4 && bits != 8) {
    throw std::invalid_argument(std::string(op) + ": bits must be 4 or 8");
  }
  if (group_size != 32 && group_size != 64 && group_size != 128) {
    throw std::invalid_argument(std::string(op) + ": group_size must be 32, 64 or 128");
  }
}

int check_packed(
    const char* op,
    const mx::array& w,
    const mx::array& scales,
    const mx::array& biases,
    int group_size,
    int bits) {
  check_format(op, group_size, bits);
  if (w.dtype() != mx::uint32 || w.ndim() != 2) {
    throw std::invalid_argument(std::string(op) + ": w must be a 2-D uint32 array");
  }
  const int n = w.shape(0);
  const int k = w.shape(1) * (32 / bits);
  const mx::Shape group_shape{n, k / group_size};
  if (k % group_size != 0 || scales.shape() != group_shape ||
      biases.shape() != group_shape) {
    throw std::invalid_argument(
        std::string(op) + ": scales/biases must be (N, K/group) = (" + std::to_string(n) +
        ", " + std::to_string(k / group_size) + ") for " + std::to_string(k) +
        " columns");
  }
  return k;
}

mx::array quantized_matvec(
    const mx::array& x,
    const mx::array& w,
    const mx::array& scales,
    const mx::array& biases,
    int group_size,
    int bits,
    mx::StreamOrDevice s) {
  const int k = check_packed("quantized_matvec", w, scales, biases, group_size, bits);
  const int n = w.shape(0);
  if (x.ndim() < 1 || !mx::issubdtype(x.dtype(), mx::floating)) {
    throw std::invalid_argument("quantized_matvec: x must be a floating array");
  }
  if (x.shape(-1) != k) {
    throw std::invalid_argument(
        "quantized_matvec: x has " + std::to_string(x.shape(-1)) +
        " columns, the weights " + std::to_string(k));
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
