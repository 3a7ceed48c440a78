// The SIMD loop over output rows, written once and compiled once per instruction set.
//
// qmm.cpp includes this file inside a namespace per path (avx2, avx512) after defining
// there: SWAPLESS_TARGET (the function target attribute), the vector type V with
// kLanes floats, vzero/vload/vset1/vfma/vadd/vsum, and the group and unpack steps
// (`Affine`, `affine<BITS, ALG>`, `unpack<BITS, ALG>`). A block is 2 * kLanes weights,
// unpacked into two vectors `lo` and `hi`; for 4 bits the input row was reordered so
// that these two vectors line up with it (low nibbles, then high nibbles).
//
// Two ways to spend the arithmetic, both exact up to float32 summation order:
// - ALG (the algebra): sum_j x_j (q_j s + b) = s * dot(x, q) + b * sum(x); unpacked q
//   are multiplied into the rows directly, each group's dot is scaled once, and the
//   per-group sums of x (computed once per call) take the biases.
// - otherwise each block is rebuilt as q * s + b before the rows use it: cheaper once
//   many rows share a block than scaling every row's group sums.
// Not a standalone header: no include guard on purpose.

template <int BITS, int M, bool ALG, int U>
SWAPLESS_TARGET void rows_t(const Job& j, int n0, int n1) {
  constexpr int kBlock = 2 * kLanes;
  const int blocks_per_group = j.g / kBlock;  // a multiple of U (the dispatcher checks)
  const int groups = j.k / j.g;
  const size_t row_bytes = static_cast<size_t>(j.k) * BITS / 8;
  const uint8_t* wb = reinterpret_cast<const uint8_t*>(j.w);
  // Accumulators a row: one or two rows need several chains in flight; with more rows
  // the rows are the independent chains, and one each keeps AVX2's 16 registers from
  // spilling at 8 rows.
  constexpr int A = M <= 2 ? 2 * U : 1;
  for (int r = n0; r < n1; ++r) {
    const uint8_t* wr = wb + static_cast<size_t>(r) * row_bytes;
    const float* sr = j.s + static_cast<size_t>(r) * groups;
    const float* br = j.b + static_cast<size_t>(r) * groups;
    V acc[M][A];
    V tot[M];
    for (int row = 0; row < M; ++row) {
      tot[row] = vzero();
      for (int a = 0; a < A; ++a) {
        acc[row][a] = vzero();
      }
    }
    for (int gi = j.k0 / j.g; gi < j.k1 / j.g; ++gi) {
      const Affine a = affine<BITS, ALG>(sr[gi], br[gi]);
      const int c0 = gi * blocks_per_group;
      for (int c = c0; c < c0 + blocks_per_group; c += U) {
        for (int u = 0; u < U; ++u) {
          V lo, hi;
          unpack<BITS, ALG>(wr, c + u, a, lo, hi);
          for (int row = 0; row < M; ++row) {
            // The block-major copy (prepare): this block's rows side by side.
            const float* xr = j.x + (static_cast<size_t>(c + u) * M + row) * kBlock;
            V& even = acc[row][(2 * u) % A];
            even = vfma(lo, vload(xr), even);
            V& odd = acc[row][(2 * u + 1) % A];
            odd = vfma(hi, vload(xr + kLanes), odd);
          }
        }
      }
      if constexpr (ALG) {
        const V scale = vset1(sr[gi]);
        for (int row = 0; row < M; ++row) {
          V dot = acc[row][0];
          acc[row][0] = vzero();
          for (int a = 1; a < A; ++a) {
            dot = vadd(dot, acc[row][a]);
            acc[row][a] = vzero();
          }
          tot[row] = vfma(scale, dot, tot[row]);
        }
      }
    }
    for (int row = 0; row < M; ++row) {
      float result;
      if constexpr (ALG) {
        result = vsum(tot[row]);
        const float* xs = j.xsum + static_cast<size_t>(row) * groups;
        for (int gi = j.k0 / j.g; gi < j.k1 / j.g; ++gi) {
          result += br[gi] * xs[gi];
        }
      } else {
        V total = acc[row][0];
        for (int a = 1; a < A; ++a) {
          total = vadd(total, acc[row][a]);
        }
        result = vsum(total);
      }
      float& slot = j.out[static_cast<size_t>(row) * j.n + r];
      slot = j.k0 == 0 ? result : slot + result;
    }
  }
}

// Few input rows: U blocks in flight (2U accumulators a row) so that the FMA latency
// (4 cycles) is hidden; U must divide a group's blocks.
template <int BITS, int M, bool ALG>
SWAPLESS_TARGET void rows_u(const Job& j, int n0, int n1) {
  const int blocks_per_group = j.g / (2 * kLanes);
  if constexpr (M == 1) {
    if (blocks_per_group % 4 == 0) {
      return rows_t<BITS, M, ALG, 4>(j, n0, n1);
    }
  }
  if constexpr (M <= 2) {
    if (blocks_per_group % 2 == 0) {
      return rows_t<BITS, M, ALG, 2>(j, n0, n1);
    }
  }
  return rows_t<BITS, M, ALG, 1>(j, n0, n1);
}

template <int BITS, bool ALG>
SWAPLESS_TARGET void rows_m(const Job& j, int n0, int n1) {
  switch (j.m) {
    case 1: return rows_u<BITS, 1, ALG>(j, n0, n1);
    case 2: return rows_u<BITS, 2, ALG>(j, n0, n1);
    case 3: return rows_u<BITS, 3, ALG>(j, n0, n1);
    case 4: return rows_u<BITS, 4, ALG>(j, n0, n1);
    case 5: return rows_u<BITS, 5, ALG>(j, n0, n1);
    case 6: return rows_u<BITS, 6, ALG>(j, n0, n1);
    case 7: return rows_u<BITS, 7, ALG>(j, n0, n1);
    default: return rows_u<BITS, 8, ALG>(j, n0, n1);
  }
}

void rows(const Job& j, int n0, int n1, bool alg) {
  if (j.bits == 4) {
    return alg ? rows_m<4, true>(j, n0, n1) : rows_m<4, false>(j, n0, n1);
  }
  return alg ? rows_m<8, true>(j, n0, n1) : rows_m<8, false>(j, n0, n1);
}
