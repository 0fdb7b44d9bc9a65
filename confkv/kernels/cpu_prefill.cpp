// The attention mass of a prefill chunk on CPU, given each query row's log-sum-exp (from the fused SDPA that
// computed the chunk's output). Why a kernel: in PyTorch the mass needs the full fp32 score matrix materialized
// (a [Hq, L, T] matmul, an exp and a sum: three passes over ~86 MB for a 512-token chunk over 3K keys on a 0.5B
// model), which cost more than the attention output itself. Here each thread owns a tile of keys, keeps it
// transposed in fp32, and streams the query rows past it: scores, exp and the sum over queries in one pass, with
// nothing but the [Hq, T] result written. Math in fp32, like the reference.
#include <torch/extension.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <cmath>
#include <limits>
#include <vector>

#include "cpu_simd.h"

namespace {

constexpr int64_t KB = 64;  // keys per tile: four 16-float vectors
constexpr int64_t RB = 4;   // query rows per pass over the tile: 16 score vectors stay in registers

template <typename T>
void mass_tiles(const at::Tensor& q, const at::Tensor& keys, const at::Tensor& lse, int64_t n_q, int64_t tail,
                at::Tensor& mass) {
  const int64_t B = q.size(0), H = q.size(1), R = q.size(2), D = q.size(3), N = keys.size(2), G = R / n_q;
  const int64_t tiles = (N + KB - 1) / KB;
  const float* qp = q.data_ptr<float>();
  const T* kp = keys.data_ptr<T>();
  const float* lp = lse.data_ptr<float>();
  float* mp = mass.data_ptr<float>();
  const int64_t k0 = keys.stride(0), k1 = keys.stride(1), k2 = keys.stride(2);
  const int64_t first_tail = N - tail;  // keys at or past this index are the chunk's own tokens, in query order
  constexpr int64_t V = KB / 16;
  const v16f zero = {};

  at::parallel_for(0, B * H * tiles, 1, [&](int64_t begin, int64_t end) {
    std::vector<v16f> kt(D * V), acc(G * V);
    for (int64_t w = begin; w < end; ++w) {
      const int64_t bh = w / tiles, tile = w % tiles, b = bh / H, h = bh % H;
      const int64_t j0 = tile * KB, n = std::min(KB, N - j0);
      // the tile, transposed to [D, KB] in fp32 (zero past the last key; those lanes are dropped below)
      std::fill(kt.begin(), kt.end(), zero);
      float* ktf = reinterpret_cast<float*>(kt.data());
      for (int64_t j = 0; j < n; ++j) {
        const T* kr = kp + b * k0 + h * k1 + (j0 + j) * k2;
        for (int64_t d = 0; d < D; ++d) ktf[d * KB + j] = static_cast<float>(kr[d]);
      }
      std::fill(acc.begin(), acc.end(), zero);
      const float* qh = qp + bh * R * D;
      const float* lh = lp + bh * R;
      for (int64_t g = 0; g < G; ++g) {
        v16f* a = acc.data() + g * V;
        for (int64_t l0 = 0; l0 < n_q; l0 += RB) {
          const int64_t rows = std::min(RB, n_q - l0);
          if (first_tail + l0 + rows - j0 <= 0) continue;  // the tile is in all these queries' future
          v16f s[RB][V];
          for (int64_t i = 0; i < RB; ++i)
            for (int64_t v = 0; v < V; ++v) s[i][v] = zero;
          const float* q0 = qh + (g * n_q + l0) * D;
          if (rows == RB) {
            for (int64_t d = 0; d < D; ++d) {
              const v16f* row = kt.data() + d * V;
              for (int64_t i = 0; i < RB; ++i) {
                const float qd = q0[i * D + d];
                for (int64_t v = 0; v < V; ++v) s[i][v] += qd * row[v];
              }
            }
          } else {  // the last, partial block of query rows
            for (int64_t d = 0; d < D; ++d)
              for (int64_t i = 0; i < rows; ++i)
                for (int64_t v = 0; v < V; ++v) s[i][v] += q0[i * D + d] * kt[d * V + v];
          }
          for (int64_t i = 0; i < rows; ++i) {
            const int64_t l = l0 + i;
            // keys visible to query l: all but the chunk's own tokens after it, none past the tile's end
            const int64_t visible = std::min(n, first_tail + l + 1 - j0);
            if (visible <= 0) continue;
            const float m = lh[g * n_q + l];
            for (int64_t v = 0; v < V; ++v) {
              v16f p = exp_le0(s[i][v] - m);
              if (visible < (v + 1) * 16) {
                v16i lane = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
                p = (lane + static_cast<int32_t>(v * 16)) < static_cast<int32_t>(visible) ? p : zero;
              }
              a[v] += p;
            }
          }
        }
      }
      float* out = mp + bh * G * N;
      const float* accf = reinterpret_cast<const float*>(acc.data());
      for (int64_t g = 0; g < G; ++g)
        for (int64_t j = 0; j < n; ++j) out[g * N + j0 + j] = accf[g * KB + j];
    }
  });
}

}  // namespace

// q fp32 [B, Hkv, G*L, D], contiguous and already scaled (row g*L + l: query head h*G + g, query l); keys
// [B, Hkv, N, D], last dim contiguous (INT8 slots dequantized, then model-dtype slots; the last `tail` = L are the
// queries' own tokens in order, causal among themselves, every other key visible to all); lse fp32 [B, Hkv, G*L]
// contiguous (natural log, over the scaled scores of the visible keys). Returns fp32 [B, Hkv, G, N]: for each
// query head, the softmax probabilities exp(s - lse) summed over the L queries.
at::Tensor prefill_mass(at::Tensor q, at::Tensor keys, at::Tensor lse, int64_t n_q, int64_t tail) {
  TORCH_CHECK(q.dim() == 4 && q.scalar_type() == at::kFloat && q.is_contiguous(), "prefill_mass: q fp32 [B,Hkv,R,D]");
  TORCH_CHECK(keys.dim() == 4 && keys.stride(3) == 1 && keys.size(1) == q.size(1) && keys.size(3) == q.size(3),
              "prefill_mass: keys [B, Hkv, N, D], last dim contiguous");
  TORCH_CHECK(lse.scalar_type() == at::kFloat && lse.is_contiguous() && lse.numel() == q.size(0) * q.size(1) * q.size(2),
              "prefill_mass: lse fp32 [B, Hkv, R]");
  TORCH_CHECK(n_q > 0 && q.size(2) % n_q == 0 && tail >= 0 && tail <= keys.size(2), "prefill_mass: shapes");
  at::Tensor mass = at::empty({q.size(0), q.size(1), q.size(2) / n_q, keys.size(2)}, q.options());
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, keys.scalar_type(), "prefill_mass", [&] {
    mass_tiles<scalar_t>(q, keys, lse, n_q, tail, mass);
  });
  return mass;
}

