// A prefill chunk's attention output on CPU, fp32, in one pass over the keys (online softmax, as flash attention):
// the output and each query row's log-sum-exp, which the mass kernel (cpu_prefill.cpp) then reads. Why our own:
// torch's fused CPU attention ran at ~64 GFLOP/s on one Zen 5 thread where this file's register block (the mass
// kernel's: 4 query rows x 64 keys of scores in 16 vector registers) ran the same scores at ~130, and attention was
// half of a forced episode's time. Same contract as the mass kernel: GQA heads folded into the query rows, the last
// `tail` keys the chunk's own tokens in order (causal among themselves), every other key visible to all.
#include <torch/extension.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <tuple>
#include <vector>

#include "cpu_simd.h"

namespace {

constexpr int64_t KB = 64;  // keys per tile: four 16-float vectors of scores per query row
constexpr int64_t RB = 4;   // query rows per block: 16 score vectors stay in registers
constexpr int64_t V = KB / 16;

// acc[i][c*16 .. c*16+16*CV) += sum_j p[i][j] * values[j][...] for the CV vectors of one chunk of the head dim:
// the chunk's 4 x CV accumulators stay in registers over the tile's keys.
template <int CV>
inline void pv_chunk(float* acc, const float* p, const float* vals, int64_t n, int64_t D, int64_t c0, int64_t rows) {
  v16f a[RB][CV];
  for (int64_t i = 0; i < RB; ++i)
    for (int v = 0; v < CV; ++v) std::memcpy(&a[i][v], acc + i * D + c0 + v * 16, sizeof(v16f));
  for (int64_t j = 0; j < n; ++j) {
    v16f x[CV];
    for (int v = 0; v < CV; ++v) std::memcpy(&x[v], vals + j * D + c0 + v * 16, sizeof(v16f));
    for (int64_t i = 0; i < RB; ++i) {
      const float pij = p[i * KB + j];
      for (int v = 0; v < CV; ++v) a[i][v] += pij * x[v];
    }
  }
  for (int64_t i = 0; i < rows; ++i)
    for (int v = 0; v < CV; ++v) std::memcpy(acc + i * D + c0 + v * 16, &a[i][v], sizeof(v16f));
}

// The online-softmax state of one block of RB query rows: each row's running max and sum of exp (its output
// accumulators live in the caller's `acc`), and how many keys it sees.
struct Rows {
  float m[RB], l[RB];
  int64_t sees[RB];  // keys row i sees in all: those before the chunk's tail and its own tokens up to itself
};

// One block of rows against one key tile (keys j0 .. j0+n, transposed in `kv`): scores, the running max and sum,
// the accumulators rescaled, then P x V added.

void tile_update(const float* q0, const v16f* kv, const float* vals, Rows& st, float* acc, float* p, int64_t rows,
                 int64_t j0, int64_t n, int64_t D) {
  const v16f zero = {};
  const v16f lane = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
  const float lowest = -std::numeric_limits<float>::infinity();
  v16f s[RB][V];
  for (int64_t i = 0; i < RB; ++i)
    for (int64_t v = 0; v < V; ++v) s[i][v] = zero;
  if (rows == RB) {
    for (int64_t d = 0; d < D; ++d) {
      const v16f* row = kv + d * V;
      for (int64_t i = 0; i < RB; ++i) {
        const float qd = q0[i * D + d];
        for (int64_t v = 0; v < V; ++v) s[i][v] += qd * row[v];
      }
    }
  } else {
    for (int64_t d = 0; d < D; ++d)
      for (int64_t i = 0; i < rows; ++i)
        for (int64_t v = 0; v < V; ++v) s[i][v] += q0[i * D + d] * kv[d * V + v];
  }
  for (int64_t i = 0; i < RB; ++i) {
    const int64_t visible = std::min(n, st.sees[i] - j0);
    float* pi = p + i * KB;
    if (visible <= 0) {  // nothing of this tile for this row (or no row): it adds nothing
      std::fill(pi, pi + KB, 0.0f);
      continue;
    }
    float tile_max = lowest;
    for (int64_t v = 0; v < V; ++v) {
      alignas(64) float lanes[16];
      std::memcpy(lanes, &s[i][v], sizeof lanes);
      for (int64_t k = 0; k < 16 && v * 16 + k < visible; ++k) tile_max = std::max(tile_max, lanes[k]);
    }
    const float m_new = std::max(st.m[i], tile_max);
    const float alpha = std::exp(st.m[i] - m_new);  // 0 on the row's first tile (m = -inf)
    v16f sum = zero;
    for (int64_t v = 0; v < V; ++v) {
      v16f e = exp_le0(s[i][v] - m_new);
      e = (lane + static_cast<float>(v * 16)) < static_cast<float>(visible) ? e : zero;
      sum += e;
      std::memcpy(pi + v * 16, &e, sizeof e);
    }
    float tile_sum = 0.0f;
    for (int k = 0; k < 16; ++k) tile_sum += sum[k];
    st.l[i] = st.l[i] * alpha + tile_sum;
    st.m[i] = m_new;
    if (alpha != 1.0f)
      for (int64_t c = 0; c < D; ++c) acc[i * D + c] *= alpha;
  }
  int64_t c0 = 0;
  for (; c0 + 64 <= D; c0 += 64) pv_chunk<4>(acc, p, vals, n, D, c0, RB);
  for (; c0 < D; c0 += 16) pv_chunk<1>(acc, p, vals, n, D, c0, RB);
}

// Why blocks of SB rows over each key tile, not one RB block over all keys: a tile (64 keys of K and V, 64 KB in
// fp32 at D = 128) is then read from memory once per SB rows and from cache for the rest; one 4-row block at a time
// streamed every key from memory per block, and over 16K keys ran no faster than torch's fused attention.
constexpr int64_t SB = 64;

void attention_rows(const float* qh, const float* kt, const float* vh, float* oh, float* lh, int64_t R, int64_t N,
                    int64_t D, int64_t n_q, int64_t tail) {
  const int64_t first_tail = N - tail;
  std::vector<float> acc(SB * D), p(RB * KB);
  std::vector<Rows> state(SB / RB);
  for (int64_t s0 = 0; s0 < R; s0 += SB) {
    const int64_t blocks = (std::min(SB, R - s0) + RB - 1) / RB;
    int64_t last = 0;
    for (int64_t b = 0; b < blocks; ++b) {
      Rows& st = state[b];
      for (int64_t i = 0; i < RB; ++i) {
        const int64_t r = s0 + b * RB + i;
        st.m[i] = -std::numeric_limits<float>::infinity();
        st.l[i] = 0.0f;
        st.sees[i] = r < R ? (tail ? first_tail + r % n_q + 1 : N) : 0;
        last = std::max(last, st.sees[i]);
      }
    }
    std::fill(acc.begin(), acc.end(), 0.0f);
    for (int64_t j0 = 0; j0 < last; j0 += KB) {
      const int64_t n = std::min(KB, N - j0);
      const v16f* kv = reinterpret_cast<const v16f*>(kt + (j0 / KB) * D * KB);
      for (int64_t b = 0; b < blocks; ++b) {
        const Rows& st = state[b];
        if (*std::max_element(st.sees, st.sees + RB) <= j0) continue;  // the tile is in all these rows' future
        const int64_t r0 = s0 + b * RB;
        tile_update(qh + r0 * D, kv, vh + j0 * D, state[b], acc.data() + b * RB * D, p.data(), std::min(RB, R - r0),
                    j0, n, D);
      }
    }
    for (int64_t b = 0; b < blocks; ++b)
      for (int64_t i = 0; i < RB && s0 + b * RB + i < R; ++i) {
        const int64_t r = s0 + b * RB + i;
        const float inv = 1.0f / state[b].l[i];
        for (int64_t c = 0; c < D; ++c) oh[r * D + c] = acc[(b * RB + i) * D + c] * inv;
        lh[r] = state[b].m[i] + std::log(state[b].l[i]);
      }
  }
}

}  // namespace

// q fp32 [B, Hkv, R, D] contiguous and already scaled (row g*L + l: query head h*G + g, query l; R = G*L);
// keys, values fp32 [B, Hkv, N, D] contiguous (the last `tail` keys are the L queries' own tokens in order, causal
// among themselves; every other key visible to all; tail = 0: every key visible to every row); D a multiple of 16.
// Returns (out fp32 [B, Hkv, R, D], lse fp32 [B, Hkv, R], natural log over the scaled scores of the visible keys).
std::tuple<at::Tensor, at::Tensor> prefill_attention_fwd(at::Tensor q, at::Tensor keys, at::Tensor values, int64_t n_q,
                                                         int64_t tail) {
  TORCH_CHECK(q.dim() == 4 && q.scalar_type() == at::kFloat && q.is_contiguous(), "prefill_attention: q fp32 [B,Hkv,R,D]");
  TORCH_CHECK(keys.sizes() == values.sizes() && keys.dim() == 4 && keys.scalar_type() == at::kFloat &&
                  values.scalar_type() == at::kFloat && keys.is_contiguous() && values.is_contiguous(),
              "prefill_attention: keys and values fp32 [B, Hkv, N, D], contiguous");
  const int64_t B = q.size(0), H = q.size(1), R = q.size(2), D = q.size(3), N = keys.size(2);
  TORCH_CHECK(keys.size(0) == B && keys.size(1) == H && keys.size(3) == D && D % 16 == 0, "prefill_attention: shapes");
  TORCH_CHECK(n_q > 0 && R % n_q == 0 && tail >= 0 && tail <= N && (tail == 0 || tail == n_q), "prefill_attention: tail");
  at::Tensor out = at::empty({B, H, R, D}, q.options());
  at::Tensor lse = at::empty({B, H, R}, q.options());
  const int64_t tiles = (N + KB - 1) / KB;
  const float* qp = q.data_ptr<float>();
  const float* kp = keys.data_ptr<float>();
  const float* vp = values.data_ptr<float>();
  float* op = out.data_ptr<float>();
  float* lp = lse.data_ptr<float>();
  at::parallel_for(0, B * H, 1, [&](int64_t begin, int64_t end) {
    std::vector<v16f> kt(tiles * D * V);  // the head's keys as tiles [tile][D][KB], zero past the last key
    for (int64_t bh = begin; bh < end; ++bh) {
      const float* kh = kp + bh * N * D;
      std::fill(kt.begin(), kt.end(), v16f{});
      float* ktf = reinterpret_cast<float*>(kt.data());
      for (int64_t j = 0; j < N; ++j) {
        float* tile = ktf + (j / KB) * D * KB + j % KB;
        for (int64_t d = 0; d < D; ++d) tile[d * KB] = kh[j * D + d];
      }
      attention_rows(qp + bh * R * D, ktf, vp + bh * N * D, op + bh * R * D, lp + bh * R, R, N, D, n_q, tail);
    }
  });
  return {out, lse};
}
