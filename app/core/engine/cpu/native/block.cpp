// A decode token's block halves as single MLX operations (see block.h for why).
//
// The products go through the quantized kernel's raw entry (`qmm_f32`, qmm.cpp), so the
// SIMD paths, their run-time choice and the thread count are the kernel's own; the
// small steps around them (RMSNorm, RoPE, biases, SiLU, residuals) are plain loops
// over a few thousand floats.
#include "block.h"

#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

#include "mlx/allocator.h"
#include "mlx/backend/cpu/encoder.h"
#include "qmm.h"

namespace swapless {

namespace {

// One projection's buffers and sizes, as the kernel reads them.
struct Proj {
  const uint32_t* w;
  const float* scales;
  const float* biases;
  const float* bias;  // nullptr when the layer has none
  int n;
  int k;
};

// y = x @ W.T (+ bias) for one row.
void project(const Proj& p, const float* x, float* y, int group_size, int bits) {
  qmm_f32(x, p.w, p.scales, p.biases, y, 1, p.n, p.k, group_size, bits);
  if (p.bias != nullptr) {
    for (int i = 0; i < p.n; ++i) {
      y[i] += p.bias[i];
    }
  }
}

// MLX's composed RMSNorm on the CPU: (x * rsqrt(mean(x^2) + eps)) * w.
void rms_norm(const float* x, const float* w, float eps, int n, float* y) {
  double sum = 0.0;
  for (int i = 0; i < n; ++i) {
    sum += static_cast<double>(x[i]) * x[i];
  }
  const float mean = static_cast<float>(sum / n);
  const float r = 1.0f / std::sqrt(mean + eps);
  for (int i = 0; i < n; ++i) {
    y[i] = (x[i] * r) * w[i];
  }
}

// mlx's fast.rope on one head of one token, in place.
void rope(float* h, const Rope& r) {
  const int half = r.dims / 2;
  const float position = static_cast<float>(r.offset) * r.scale;
  const float log_step = std::log(r.base) / static_cast<float>(half);
  for (int i = 0; i < half; ++i) {
    const float theta = position * std::exp(-static_cast<float>(i) * log_step);
    const float c = std::cos(theta);
    const float s = std::sin(theta);
    const int a = r.traditional ? 2 * i : i;
    const int b = r.traditional ? 2 * i + 1 : i + half;
    const float x1 = h[a];
    const float x2 = h[b];
    h[a] = x1 * c - x2 * s;
    h[b] = x1 * s + x2 * c;
  }
}

float silu(float x) {
  return x / (1.0f + std::exp(-x));
}

// Loaded parameters are contiguous already: no copy node for them (a node costs MLX
// microseconds per token whatever it does).
mx::array packed_input(const mx::array& a, const mx::Stream& stream) {
  if (a.is_available() && a.flags().row_contiguous) {
    return a;
  }
  return mx::contiguous(a, false, stream);
}

// Checks a projection's arrays and appends them (float32, contiguous) to `inputs`.
void add_projection(
    const Projection& p,
    int group_size,
    int bits,
    int k,
    std::vector<mx::array>& inputs,
    std::vector<bool>& has_bias,
    const mx::Stream& stream,
    const char* what) {
  if (p.size() != 3 && p.size() != 4) {
    throw std::invalid_argument(std::string(what) + ": a projection is 3 or 4 arrays");
  }
  const auto& w = p[0];
  if (check_packed(what, w, p[1], p[2], group_size, bits) != k) {
    throw std::invalid_argument(
        std::string(what) + ": packed weights must be (N, " + std::to_string(k) +
        " * bits / 32) uint32");
  }
  if (p.size() == 4 && p[3].size() != static_cast<size_t>(w.shape(0))) {
    throw std::invalid_argument(std::string(what) + ": the output bias must have N values");
  }
  for (size_t i = 0; i < p.size(); ++i) {
    inputs.push_back(packed_input(i == 0 ? p[i] : mx::astype(p[i], mx::float32, stream), stream));
  }
  has_bias.push_back(p.size() == 4);
}

mx::array as_float(const mx::array& a, const mx::Stream& stream) {
  if (!mx::issubdtype(a.dtype(), mx::floating)) {
    throw std::invalid_argument("decode block: activations must be floating");
  }
  return mx::astype(a, mx::float32, stream);
}

}  // namespace

// A float32 input as a contiguous row: its own buffer, or a gathered copy when a view
// (a transpose or slice MLX did not copy) hands it over strided.
const float* contiguous_row(const mx::array& a, std::vector<float>& scratch) {
  if (a.flags().row_contiguous) {
    return a.data<float>();
  }
  scratch.resize(a.size());
  const float* base = a.data<float>();
  const auto& shape = a.shape();
  const auto& strides = a.strides();
  std::vector<int> index(shape.size(), 0);
  for (size_t e = 0; e < a.size(); ++e) {
    int64_t at = 0;
    for (size_t d = 0; d < shape.size(); ++d) {
      at += index[d] * strides[d];
    }
    scratch[e] = base[at];
    for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d) {
      if (++index[d] < shape[d]) {
        break;
      }
      index[d] = 0;
    }
  }
  return scratch.data();
}

std::vector<mx::array> decode_qkv(
    const mx::array& x,
    const mx::array& norm_weight,
    float eps,
    const Projection& q,
    const Projection& k,
    const Projection& v,
    int group_size,
    int bits,
    int heads,
    int kv_heads,
    int rope_dims,
    bool rope_traditional,
    float rope_base,
    float rope_scale,
    int offset,
    mx::StreamOrDevice s) {
  const char* what = "decode_qkv";
  check_format(what, group_size, bits);
  auto stream = mx::to_stream(s);
  const int hidden = static_cast<int>(x.size());
  if (norm_weight.size() != x.size()) {
    throw std::invalid_argument("decode_qkv: x must be one token of the norm's width");
  }
  BlockLayout layout{false, {}, eps, group_size, bits, heads, kv_heads,
                     Rope{rope_dims, rope_traditional, rope_base, rope_scale, offset}};
  std::vector<mx::array> inputs{as_float(x, stream), as_float(norm_weight, stream)};
  add_projection(q, group_size, bits, hidden, inputs, layout.has_bias, stream, what);
  add_projection(k, group_size, bits, hidden, inputs, layout.has_bias, stream, what);
  add_projection(v, group_size, bits, hidden, inputs, layout.has_bias, stream, what);
  const int q_rows = q[0].shape(0);
  const int kv_rows = k[0].shape(0);
  if (heads <= 0 || kv_heads <= 0 || q_rows % heads != 0 || v[0].shape(0) != kv_rows ||
      kv_rows != kv_heads * (q_rows / heads)) {
    throw std::invalid_argument("decode_qkv: projection sizes do not match the heads");
  }
  const int head_dim = q_rows / heads;
  if (rope_dims <= 0 || rope_dims > head_dim || rope_dims % 2 != 0) {
    throw std::invalid_argument("decode_qkv: rope dims must be even and <= head_dim");
  }
  auto primitive = std::make_shared<DecodeBlock>(stream, std::move(layout));
  return mx::array::make_arrays(
      {{1, heads, 1, head_dim}, {1, kv_heads, 1, head_dim}, {1, kv_heads, 1, head_dim}},
      {mx::float32, mx::float32, mx::float32},
      primitive,
      inputs);
}

mx::array decode_mlp(
    const mx::array& attention,
    const mx::array& residual,
    const Projection& o,
    const mx::array& norm_weight,
    float eps,
    const Projection& gate,
    const Projection& up,
    const Projection& down,
    int group_size,
    int bits,
    mx::StreamOrDevice s) {
  const char* what = "decode_mlp";
  check_format(what, group_size, bits);
  auto stream = mx::to_stream(s);
  const int hidden = static_cast<int>(residual.size());
  if (norm_weight.size() != residual.size()) {
    throw std::invalid_argument("decode_mlp: the residual must be one token");
  }
  BlockLayout layout{true, {}, eps, group_size, bits, 0, 0, Rope{0, false, 0, 0, 0}};
  std::vector<mx::array> inputs{
      as_float(attention, stream), as_float(residual, stream), as_float(norm_weight, stream)};
  add_projection(o, group_size, bits, static_cast<int>(attention.size()), inputs,
                 layout.has_bias, stream, what);
  const int inner = gate.empty() ? 0 : gate[0].shape(0);
  add_projection(gate, group_size, bits, hidden, inputs, layout.has_bias, stream, what);
  add_projection(up, group_size, bits, hidden, inputs, layout.has_bias, stream, what);
  add_projection(down, group_size, bits, inner, inputs, layout.has_bias, stream, what);
  if (o[0].shape(0) != hidden || up[0].shape(0) != inner || down[0].shape(0) != hidden) {
    throw std::invalid_argument("decode_mlp: projection sizes do not chain");
  }
  return mx::array(
      residual.shape(),
      mx::float32,
      std::make_shared<DecodeBlock>(stream, std::move(layout)),
      std::move(inputs));
}

void DecodeBlock::eval_cpu(
    const std::vector<mx::array>& inputs,
    std::vector<mx::array>& outputs) {
  const int activations = layout_.mlp ? 3 : 2;  // then the norm weight was the last
  std::vector<Proj> projections;
  size_t at = static_cast<size_t>(activations);
  for (bool bias : layout_.has_bias) {
    const auto& w = inputs[at];
    for (size_t i = at; i < at + (bias ? 4 : 3); ++i) {
      if (!inputs[i].flags().row_contiguous) {
        throw std::runtime_error(std::string(name()) + ": weights must be row-contiguous");
      }
    }
    projections.push_back(Proj{
        w.data<uint32_t>(),
        inputs[at + 1].data<float>(),
        inputs[at + 2].data<float>(),
        bias ? inputs[at + 3].data<float>() : nullptr,
        w.shape(0),
        w.shape(1) * (32 / layout_.bits)});
    at += bias ? 4 : 3;
  }
  for (auto& out : outputs) {
    out.set_data(mx::allocator::malloc(out.nbytes()));
  }
  auto& encoder = mx::cpu::get_command_encoder(stream());
  for (const auto& a : inputs) {
    encoder.set_input_array(a);
  }
  for (auto& out : outputs) {
    encoder.set_output_array(out);
  }
  std::vector<float*> out_ptrs;
  for (auto& out : outputs) {
    out_ptrs.push_back(out.data<float>());
  }
  // Activations may be strided views: gathered here on the calling thread is too early
  // (their data is computed by earlier tasks), so the arrays travel to the task.
  std::vector<mx::array> acts(inputs.begin(), inputs.begin() + activations);
  encoder.dispatch([acts = std::move(acts), projections = std::move(projections),
                    out_ptrs = std::move(out_ptrs), layout = layout_]() {
    const int g = layout.group_size;
    const int bits = layout.bits;
    std::vector<float> scratch_a, scratch_b, scratch_n;
    if (!layout.mlp) {
      const float* x = contiguous_row(acts[0], scratch_a);
      const float* norm = contiguous_row(acts[1], scratch_b);
      const int hidden = static_cast<int>(acts[0].size());
      std::vector<float> normed(hidden);
      rms_norm(x, norm, layout.eps, hidden, normed.data());
      for (int p = 0; p < 3; ++p) {
        project(projections[p], normed.data(), out_ptrs[p], g, bits);
      }
      const int head_dim = projections[0].n / layout.heads;
      for (int h = 0; h < layout.heads; ++h) {
        rope(out_ptrs[0] + static_cast<size_t>(h) * head_dim, layout.rope);
      }
      for (int h = 0; h < layout.kv_heads; ++h) {
        rope(out_ptrs[1] + static_cast<size_t>(h) * head_dim, layout.rope);
      }
      return;
    }
    const float* attention = contiguous_row(acts[0], scratch_a);
    const float* residual = contiguous_row(acts[1], scratch_b);
    const float* norm = contiguous_row(acts[2], scratch_n);
    const Proj& o = projections[0];
    const Proj& gate = projections[1];
    const Proj& up = projections[2];
    const Proj& down = projections[3];
    float* out = out_ptrs[0];
    std::vector<float> h(o.n), normed(o.n), gated(gate.n), upped(up.n);
    project(o, attention, h.data(), g, bits);
    for (int i = 0; i < o.n; ++i) {
      h[i] += residual[i];
    }
    rms_norm(h.data(), norm, layout.eps, o.n, normed.data());
    project(gate, normed.data(), gated.data(), g, bits);
    project(up, normed.data(), upped.data(), g, bits);
    for (int i = 0; i < gate.n; ++i) {
      gated[i] = silu(gated[i]) * upped[i];
    }
    project(down, gated.data(), out, g, bits);
    for (int i = 0; i < down.n; ++i) {
      out[i] += h[i];
    }
  });
}

void DecodeBlock::eval_gpu(const std::vector<mx::array>&, std::vector<mx::array>&) {
  throw std::runtime_error("Swapless's decode block runs on the CPU only");
}

bool DecodeBlock::is_equivalent(const mx::Primitive& other) const {
  const auto& o = static_cast<const DecodeBlock&>(other);
  const auto& a = layout_;
  const auto& b = o.layout_;
  return a.mlp == b.mlp && a.has_bias == b.has_bias && a.eps == b.eps &&
      a.group_size == b.group_size && a.bits == b.bits && a.heads == b.heads &&
      a.kv_heads == b.kv_heads && a.rope.dims == b.rope.dims &&
      a.rope.traditional == b.rope.traditional && a.rope.base == b.rope.base &&
      a.rope.scale == b.rope.scale && a.rope.offset == b.rope.offset;
}

}  // namespace swapless
