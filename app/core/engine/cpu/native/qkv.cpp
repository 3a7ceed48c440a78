// Decode attention over a KV cache as stored: an AVX2+FMA+F16C path chosen at run time,
// a portable scalar path. One query token's rows (a GQA group's heads) against T cached
// tokens: per token the key row is widened once (dense 16-bit or q * scale + bias) and
// multiplied into every query row; the values are read in blocks of tokens that stay in
// L1 while each 8-wide slice of the output accumulates in registers.
#include "qkv.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <stdexcept>
#include <string>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define SWAPLESS_QKV_X86 1
#endif

#include "mlx/allocator.h"
#include "mlx/backend/cpu/encoder.h"
#include "qmm.h"

namespace swapless {

namespace {

// Element kinds of the cache and dtypes of its scales.
enum Kind { kF32 = 0, kF16 = 1, kBF16 = 2, kQ8 = 3, kQ4 = 4 };

// Value blocks: 64 tokens of a 128-wide float16 head are 16 KiB, inside L1.
constexpr int kTokenBlock = 64;

// Where one (batch, head) slice of a cache tensor starts and how its tokens step.
struct View {
  const char* data;  // the (b, h) slice's first token
  int64_t token_step;  // bytes between tokens
};

struct Cache {
  View kv;
  View scales;
  View biases;
  int kind;
  int scale_kind;  // kF32, kF16 or kBF16
  int group;
};

float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exponent = (h >> 10) & 0x1Fu;
  uint32_t mantissa = h & 0x3FFu;
  uint32_t bits;
  if (exponent == 0x1F) {
    bits = sign | 0x7F800000u | (mantissa << 13);
  } else if (exponent != 0) {
    bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
  } else if (mantissa == 0) {
    bits = sign;
  } else {  // subnormal: normalize
    exponent = 113;
    while ((mantissa & 0x400u) == 0) {
      mantissa <<= 1;
      --exponent;
    }
    bits = sign | (exponent << 23) | ((mantissa & 0x3FFu) << 13);
  }
  float out;
  std::memcpy(&out, &bits, sizeof(out));
  return out;
}

float bf16_to_float(uint16_t h) {
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float out;
  std::memcpy(&out, &bits, sizeof(out));
  return out;
}

inline float scalar_at(const char* row, int kind, int index) {
  if (kind == kF32) {
    return reinterpret_cast<const float*>(row)[index];
  }
  const uint16_t h = reinterpret_cast<const uint16_t*>(row)[index];
  return kind == kF16 ? half_to_float(h) : bf16_to_float(h);
}

// Element j of token row `row`, widened (and dequantized) to float.
inline float element(const Cache& c, const char* row, const char* s, const char* b, int j) {
  switch (c.kind) {
    case kQ8: {
      const float q = static_cast<float>(reinterpret_cast<const uint8_t*>(row)[j]);
      return q * scalar_at(s, c.scale_kind, j / c.group) + scalar_at(b, c.scale_kind, j / c.group);
    }
    case kQ4: {
      const uint32_t word = reinterpret_cast<const uint32_t*>(row)[j / 8];
      const float q = static_cast<float>((word >> ((j % 8) * 4)) & 0xFu);
      return q * scalar_at(s, c.scale_kind, j / c.group) + scalar_at(b, c.scale_kind, j / c.group);
    }
    default:
      return scalar_at(row, c.kind, j);
  }
}

void scores_scalar(const float* q, const Cache& c, float* out, int rows, int t_count, int dim) {
  for (int t = 0; t < t_count; ++t) {
    const char* row = c.kv.data + t * c.kv.token_step;
    const char* s = c.scales.data + t * c.scales.token_step;
    const char* b = c.biases.data + t * c.biases.token_step;
    for (int r = 0; r < rows; ++r) {
      float acc = 0.0f;
      for (int j = 0; j < dim; ++j) {
        acc += q[static_cast<size_t>(r) * dim + j] * element(c, row, s, b, j);
      }
      out[static_cast<size_t>(r) * t_count + t] = acc;
    }
  }
}

void values_scalar(const float* p, const Cache& c, float* out, int rows, int t_count, int dim) {
  std::memset(out, 0, sizeof(float) * rows * dim);
  for (int t = 0; t < t_count; ++t) {
    const char* row = c.kv.data + t * c.kv.token_step;
    const char* s = c.scales.data + t * c.scales.token_step;
    const char* b = c.biases.data + t * c.biases.token_step;
    for (int j = 0; j < dim; ++j) {
      const float v = element(c, row, s, b, j);
      for (int r = 0; r < rows; ++r) {
        out[static_cast<size_t>(r) * dim + j] += p[static_cast<size_t>(r) * t_count + t] * v;
      }
    }
  }
}

#ifdef SWAPLESS_QKV_X86

#define SWAPLESS_AVX2 __attribute__((target("avx2,fma,f16c")))

template <int SK>
SWAPLESS_AVX2 inline float scale_at(const char* row, int index) {
  if constexpr (SK == kF32) {
    return reinterpret_cast<const float*>(row)[index];
  } else if constexpr (SK == kF16) {
    return _cvtsh_ss(reinterpret_cast<const uint16_t*>(row)[index]);
  } else {
    return bf16_to_float(reinterpret_cast<const uint16_t*>(row)[index]);
  }
}

// Eight elements [e, e + 8) of a token row as floats; s and b: that group's scale, bias.
template <int K>
SWAPLESS_AVX2 inline __m256 load8(const char* row, int e, __m256 s, __m256 b) {
  if constexpr (K == kF32) {
    return _mm256_loadu_ps(reinterpret_cast<const float*>(row) + e);
  } else if constexpr (K == kF16) {
    return _mm256_cvtph_ps(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(reinterpret_cast<const uint16_t*>(row) + e)));
  } else if constexpr (K == kBF16) {
    const __m128i h =
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(reinterpret_cast<const uint16_t*>(row) + e));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  } else if constexpr (K == kQ8) {
    const __m128i bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(row + e));
    return _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(bytes)), s, b);
  } else {
    const __m256i shifts = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);
    const uint32_t word = reinterpret_cast<const uint32_t*>(row)[e / 8];
    __m256i v = _mm256_set1_epi32(static_cast<int>(word));
    v = _mm256_and_si256(_mm256_srlv_epi32(v, shifts), _mm256_set1_epi32(0xF));
    return _mm256_fmadd_ps(_mm256_cvtepi32_ps(v), s, b);
  }
}

SWAPLESS_AVX2 inline float hsum8(__m256 v) {
  __m128 lo = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
  lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
  return _mm_cvtss_f32(lo);
}

constexpr bool quantized(int k) {
  return k == kQ8 || k == kQ4;
}

// M query rows against every token: the key row is widened once per 8 elements.
template <int K, int SK, int M>
SWAPLESS_AVX2 void scores_avx2(const float* q, const Cache& c, float* out, int t_count, int dim) {
  __m256 s = _mm256_setzero_ps();
  __m256 b = _mm256_setzero_ps();
  for (int t = 0; t < t_count; ++t) {
    const char* row = c.kv.data + t * c.kv.token_step;
    const char* srow = c.scales.data + t * c.scales.token_step;
    const char* brow = c.biases.data + t * c.biases.token_step;
    __m256 acc[M];
    for (int r = 0; r < M; ++r) {
      acc[r] = _mm256_setzero_ps();
    }
    for (int e = 0; e < dim; e += 8) {
      if constexpr (quantized(K)) {
        if (e % c.group == 0) {
          s = _mm256_set1_ps(scale_at<SK>(srow, e / c.group));
          b = _mm256_set1_ps(scale_at<SK>(brow, e / c.group));
        }
      }
      const __m256 kv = load8<K>(row, e, s, b);
      for (int r = 0; r < M; ++r) {
        acc[r] = _mm256_fmadd_ps(_mm256_loadu_ps(q + static_cast<size_t>(r) * dim + e), kv, acc[r]);
      }
    }
    for (int r = 0; r < M; ++r) {
      out[static_cast<size_t>(r) * t_count + t] = hsum8(acc[r]);
    }
  }
}

// M weight rows times the values: each 8-wide output slice accumulates over a block of
// tokens in registers.
template <int K, int SK, int M>
SWAPLESS_AVX2 void values_avx2(const float* p, const Cache& c, float* out, int t_count, int dim) {
  std::memset(out, 0, sizeof(float) * M * dim);
  for (int t0 = 0; t0 < t_count; t0 += kTokenBlock) {
    const int t1 = std::min(t_count, t0 + kTokenBlock);
    for (int e = 0; e < dim; e += 8) {
      __m256 acc[M];
      for (int r = 0; r < M; ++r) {
        acc[r] = _mm256_loadu_ps(out + static_cast<size_t>(r) * dim + e);
      }
      __m256 s = _mm256_setzero_ps();
      __m256 b = _mm256_setzero_ps();
      for (int t = t0; t < t1; ++t) {
        const char* row = c.kv.data + t * c.kv.token_step;
        if constexpr (quantized(K)) {
          s = _mm256_set1_ps(scale_at<SK>(c.scales.data + t * c.scales.token_step, e / c.group));
          b = _mm256_set1_ps(scale_at<SK>(c.biases.data + t * c.biases.token_step, e / c.group));
        }
        const __m256 v = load8<K>(row, e, s, b);
        for (int r = 0; r < M; ++r) {
          acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(p[static_cast<size_t>(r) * t_count + t]), v, acc[r]);
        }
      }
      for (int r = 0; r < M; ++r) {
        _mm256_storeu_ps(out + static_cast<size_t>(r) * dim + e, acc[r]);
      }
    }
  }
}

template <int K, int SK>
void block_avx2(bool values, const float* x, const Cache& c, float* out, int m, int t_count, int dim) {
#define SWAPLESS_CASE(MM)                                    \
  case MM:                                                   \
    return values ? values_avx2<K, SK, MM>(x, c, out, t_count, dim) \
                  : scores_avx2<K, SK, MM>(x, c, out, t_count, dim);
  switch (m) {
    SWAPLESS_CASE(1)
    SWAPLESS_CASE(2)
    SWAPLESS_CASE(3)
    SWAPLESS_CASE(4)
    SWAPLESS_CASE(5)
    SWAPLESS_CASE(6)
    SWAPLESS_CASE(7)
    default:
      SWAPLESS_CASE(8)
  }
#undef SWAPLESS_CASE
}

template <int K>
void block_avx2_scales(bool values, const float* x, const Cache& c, float* out, int m, int t_count, int dim) {
  if (c.scale_kind == kF16) {
    return block_avx2<K, kF16>(values, x, c, out, m, t_count, dim);
  }
  if (c.scale_kind == kBF16) {
    return block_avx2<K, kBF16>(values, x, c, out, m, t_count, dim);
  }
  return block_avx2<K, kF32>(values, x, c, out, m, t_count, dim);
}

void block_fast(bool values, const float* x, const Cache& c, float* out, int m, int t_count, int dim) {
  switch (c.kind) {
    case kF32: return block_avx2<kF32, kF32>(values, x, c, out, m, t_count, dim);
    case kF16: return block_avx2<kF16, kF32>(values, x, c, out, m, t_count, dim);
    case kBF16: return block_avx2<kBF16, kF32>(values, x, c, out, m, t_count, dim);
    case kQ8: return block_avx2_scales<kQ8>(values, x, c, out, m, t_count, dim);
    default: return block_avx2_scales<kQ4>(values, x, c, out, m, t_count, dim);
  }
}

bool cpu_has_fast() {
  static const bool has = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
        __builtin_cpu_supports("f16c");
  }();
  return has;
}

#else

void block_fast(bool, const float*, const Cache&, float*, int, int, int) {}

bool cpu_has_fast() {
  return false;
}

#endif

// The qmm kernel's switch (force_scalar) governs this kernel too.
bool use_fast() {
  return cpu_has_fast() && std::strcmp(simd_path(), "scalar") != 0;
}

int kind_of(mx::Dtype dtype) {
  if (dtype == mx::float32) {
    return kF32;
  }
  if (dtype == mx::float16) {
    return kF16;
  }
  if (dtype == mx::bfloat16) {
    return kBF16;
  }
  throw std::invalid_argument("KV product: float32, float16 or bfloat16 expected");
}

mx::array product(
    bool values,
    const mx::array& x,
    const mx::array& kv,
    const std::optional<mx::array>& scales,
    const std::optional<mx::array>& biases,
    int group_size,
    int bits,
    mx::StreamOrDevice s) {
  const char* what = values ? "kv_values" : "kv_scores";
  const bool is_quantized = bits != 16;
  if (bits != 16 && bits != 8 && bits != 4) {
    throw std::invalid_argument(std::string(what) + ": bits must be 16, 8 or 4");
  }
  if (x.ndim() != 4 || kv.ndim() != 4) {
    throw std::invalid_argument(std::string(what) + ": 4-D (B, H, rows, ...) arrays expected");
  }
  const int tokens = kv.shape(2);
  const int dim = is_quantized ? kv.shape(3) * (32 / bits) : kv.shape(3);
  if (dim % 8 != 0) {
    throw std::invalid_argument(std::string(what) + ": head size must be a multiple of 8");
  }
  if (x.shape(0) != kv.shape(0) || x.shape(1) != kv.shape(1) ||
      x.shape(3) != (values ? tokens : dim)) {
    throw std::invalid_argument(std::string(what) + ": shapes do not match the cache");
  }
  auto stream = mx::to_stream(s);
  std::vector<mx::array> inputs{
      mx::contiguous(mx::astype(x, mx::float32, stream), false, stream), kv};
  if (is_quantized) {
    if (group_size != 32 && group_size != 64 && group_size != 128) {
      throw std::invalid_argument(std::string(what) + ": group_size must be 32, 64 or 128");
    }
    if (!scales || !biases || kv.dtype() != mx::uint32 || dim % group_size != 0) {
      throw std::invalid_argument(std::string(what) + ": packed uint32 with scales and biases expected");
    }
    const mx::Shape group_shape{kv.shape(0), kv.shape(1), tokens, dim / group_size};
    if (scales->shape() != group_shape || biases->shape() != group_shape ||
        scales->dtype() != biases->dtype()) {
      throw std::invalid_argument(std::string(what) + ": scales/biases must be (B, H, T, D/group)");
    }
    kind_of(scales->dtype());
    inputs.push_back(*scales);
    inputs.push_back(*biases);
  } else {
    kind_of(kv.dtype());
  }
  mx::Shape out_shape{x.shape(0), x.shape(1), x.shape(2), values ? dim : tokens};
  return mx::array(
      out_shape,
      mx::float32,
      std::make_shared<KVProduct>(stream, values, group_size, bits),
      std::move(inputs));
}

}  // namespace

mx::array kv_scores(
    const mx::array& q,
    const mx::array& k,
    const std::optional<mx::array>& scales,
    const std::optional<mx::array>& biases,
    int group_size,
    int bits,
    mx::StreamOrDevice s) {
  return product(false, q, k, scales, biases, group_size, bits, s);
}

mx::array kv_values(
    const mx::array& p,
    const mx::array& v,
    const std::optional<mx::array>& scales,
    const std::optional<mx::array>& biases,
    int group_size,
    int bits,
    mx::StreamOrDevice s) {
  return product(true, p, v, scales, biases, group_size, bits, s);
}

void KVProduct::eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) {
  const auto& x = inputs[0];
  const auto& kv = inputs[1];
  auto& out = outputs[0];
  const bool is_quantized = bits_ != 16;
  for (const auto& a : inputs) {
    if (a.strides().back() != 1 && a.shape().back() != 1) {
      throw std::runtime_error(std::string(name()) + ": the last axis must be contiguous");
    }
  }
  if (!x.flags().row_contiguous) {
    throw std::runtime_error(std::string(name()) + ": rows must be row-contiguous");
  }
  out.set_data(mx::allocator::malloc(out.nbytes()));
  auto& encoder = mx::cpu::get_command_encoder(stream());
  for (const auto& a : inputs) {
    encoder.set_input_array(a);
  }
  encoder.set_output_array(out);
  const int batch = x.shape(0);
  const int heads = x.shape(1);
  const int rows = x.shape(2);
  const int tokens = kv.shape(2);
  const int dim = is_quantized ? kv.shape(3) * (32 / bits_) : kv.shape(3);
  const int x_cols = x.shape(3);
  const int out_cols = out.shape(3);
  const int kind = is_quantized ? (bits_ == 8 ? kQ8 : kQ4) : kind_of(kv.dtype());
  const int scale_kind = is_quantized ? kind_of(inputs[2].dtype()) : kF32;
  // Strides in bytes of batch, head and token for the cache and its scales/biases.
  auto byte_strides = [](const mx::array& a) {
    const auto& st = a.strides();
    const int64_t size = a.itemsize();
    return std::array<int64_t, 3>{st[0] * size, st[1] * size, st[2] * size};
  };
  const auto kv_st = byte_strides(kv);
  const auto sc_st = is_quantized ? byte_strides(inputs[2]) : kv_st;
  const auto bi_st = is_quantized ? byte_strides(inputs[3]) : kv_st;
  const char* kv_ptr = kv.data<char>();
  const char* sc_ptr = is_quantized ? inputs[2].data<char>() : kv_ptr;
  const char* bi_ptr = is_quantized ? inputs[3].data<char>() : kv_ptr;
  encoder.dispatch([=, xp = x.data<float>(), op = out.data<float>(), values = values_,
                    group = group_size_]() {
    const bool fast = use_fast();
    for (int b = 0; b < batch; ++b) {
      for (int h = 0; h < heads; ++h) {
        Cache c;
        c.kv = {kv_ptr + b * kv_st[0] + h * kv_st[1], kv_st[2]};
        c.scales = {sc_ptr + b * sc_st[0] + h * sc_st[1], sc_st[2]};
        c.biases = {bi_ptr + b * bi_st[0] + h * bi_st[1], bi_st[2]};
        c.kind = kind;
        c.scale_kind = scale_kind;
        c.group = group;
        const size_t slice = static_cast<size_t>(b) * heads + h;
        const float* xs = xp + slice * rows * x_cols;
        float* os = op + slice * rows * out_cols;
        for (int r0 = 0; r0 < rows; r0 += kMaxRows) {
          const int m = std::min(kMaxRows, rows - r0);
          const float* xr = xs + static_cast<size_t>(r0) * x_cols;
          float* orow = os + static_cast<size_t>(r0) * out_cols;
          if (fast) {
            block_fast(values, xr, c, orow, m, tokens, dim);
          } else if (values) {
            values_scalar(xr, c, orow, m, tokens, dim);
          } else {
            scores_scalar(xr, c, orow, m, tokens, dim);
          }
        }
      }
    }
  });
}

void KVProduct::eval_gpu(const std::vector<mx::array>&, std::vector<mx::array>&) {
  throw std::runtime_error("Swapless's KV products run on the CPU only");
}

bool KVProduct::is_equivalent(const mx::Primitive& other) const {
  const auto& o = static_cast<const KVProduct&>(other);
  return values_ == o.values_ && group_size_ == o.group_size_ && bits_ == o.bits_;
}

}  // namespace swapless
