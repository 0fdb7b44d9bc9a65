#include <torch/extension.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "cpu_simd.h"

// The confidence of each row of logits x fp32 [R, V] (contiguous), the same formula and clamps as
// `confkv.confidence.confidence` (its reference): from z = max(x - max x, -1e4) alone, H = log S - sum(e^z z) / S,
// the top-2 log-prob margin is -z2 (z2 the runner-up; 0 on a tie for the top), max p = 1 / S. Two passes per row
// instead of about a dozen tensor ops: this runs once per decode step, on 49K-152K logits.
at::Tensor confidence_rows(at::Tensor x, double w_e, double w_m, double w_p, bool rescale) {
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == at::kFloat && x.is_contiguous() && x.size(1) >= 2,
              "confidence_rows: x fp32 [R, V >= 2], contiguous");
  const int64_t R = x.size(0), V = x.size(1), V16 = V / 16 * 16;
  at::Tensor out = at::empty({R}, x.options());
  const float* xp = x.data_ptr<float>();
  float* op = out.data_ptr<float>();
  at::parallel_for(0, R, 1, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* row = xp + r * V;
      v16f vm;
      for (int i = 0; i < 16; ++i) vm[i] = -std::numeric_limits<float>::infinity();
      for (int64_t j = 0; j < V16; j += 16) {
        v16f v;
        std::memcpy(&v, row + j, sizeof v);
        vm = v > vm ? v : vm;
      }
      float top = -std::numeric_limits<float>::infinity();
      for (int i = 0; i < 16; ++i) top = std::max(top, vm[i]);
      for (int64_t j = V16; j < V; ++j) top = std::max(top, row[j]);
      const v16f floor_z = v16f{} - 1e4f;
      v16f vs = {}, vd = {}, vr = floor_z, vt = {};
      for (int64_t j = 0; j < V16; j += 16) {
        v16f v;
        std::memcpy(&v, row + j, sizeof v);
        v16f z = v - top;
        z = z < floor_z ? floor_z : z;
        const v16f e = exp_le0(z);
        vs += e;
        vd += e * z;
        const v16f one = v16f{} + 1.0f, zero = v16f{};
        vt += z == 0.0f ? one : zero;
        const v16f other = z == 0.0f ? floor_z : z;
        vr = other > vr ? other : vr;
      }
      double s = 0.0, dot = 0.0;
      float runner = -1e4f;
      int64_t ties = 0;
      for (int i = 0; i < 16; ++i) {
        s += vs[i];
        dot += vd[i];
        runner = std::max(runner, vr[i]);
        ties += static_cast<int64_t>(vt[i]);
      }
      for (int64_t j = V16; j < V; ++j) {
        const float z = std::max(row[j] - top, -1e4f);
        v16f zz = {};
        zz[0] = z;
        const float e = exp_le0(zz)[0];
        s += e;
        dot += static_cast<double>(e) * z;
        if (z == 0.0f) ++ties; else runner = std::max(runner, z);
      }
      if (ties > 1) runner = 0.0f;
      const double entropy = std::log(s) - dot / s;
      const double norm = std::min(1.0, std::max(0.0, entropy / std::log(static_cast<double>(V))));
      double c = w_e * (1.0 - norm) + w_m / (1.0 + std::exp(static_cast<double>(runner))) + w_p / s;
      if (rescale) {
        const double lo = w_m * 0.5 + w_p / static_cast<double>(V), hi = w_e + w_m + w_p;
        c = (c - lo) / (hi - lo);
      }
      op[r] = static_cast<float>(std::min(1.0, std::max(0.0, c)));
    }
  });
  return out;
}
