// One decode step of attention over a segmented cache (INT8 slots, then model-dtype slots) on CPU, with the
// softmax probabilities returned as the attention mass. One call per layer replaces the ~17 small tensor ops of
// the PyTorch decode path (dequantize, join, cast, two matmuls, softmax), whose dispatch cost is what a decode
// step pays on CPU. Math in fp32: scores, softmax and accumulation, like the reference.
#include <torch/extension.h>
#include <ATen/Parallel.h>

#include <cmath>
#include <limits>
#include <vector>

namespace {

template <typename T>
void decode_rows(const at::Tensor& q, const at::Tensor& k_q, const at::Tensor& v_q, const at::Tensor& k_scale,
                 const at::Tensor& v_scale, const at::Tensor& k_channel, const at::Tensor& k_fp,
                 const at::Tensor& v_fp, int64_t n8, int64_t nf, int64_t hkv, float scale, at::Tensor& out,
                 at::Tensor& p) {
  const int64_t B = q.size(0), Hq = q.size(1), D = q.size(2), G = Hq / hkv, N = n8 + nf;
  const T* qp = q.data_ptr<T>();
  const int8_t* kqp = n8 ? k_q.data_ptr<int8_t>() : nullptr;
  const int8_t* vqp = n8 ? v_q.data_ptr<int8_t>() : nullptr;
  const float* ksp = n8 ? k_scale.data_ptr<float>() : nullptr;
  const float* vsp = n8 ? v_scale.data_ptr<float>() : nullptr;
  const float* kcp = (n8 && k_channel.numel()) ? k_channel.data_ptr<float>() : nullptr;
  const T* kfp = nf ? k_fp.data_ptr<T>() : nullptr;
  const T* vfp = nf ? v_fp.data_ptr<T>() : nullptr;
  // strides [B, H, T, D] (last dim contiguous, checked below) and [B, H, T] for the scales
  const int64_t q0 = q.stride(0), q1 = q.stride(1);
  const int64_t kq0 = n8 ? k_q.stride(0) : 0, kq1 = n8 ? k_q.stride(1) : 0, kq2 = n8 ? k_q.stride(2) : 0;
  const int64_t vq0 = n8 ? v_q.stride(0) : 0, vq1 = n8 ? v_q.stride(1) : 0, vq2 = n8 ? v_q.stride(2) : 0;
  const int64_t ks0 = n8 ? k_scale.stride(0) : 0, ks1 = n8 ? k_scale.stride(1) : 0, ks2 = n8 ? k_scale.stride(2) : 0;
  const int64_t vs0 = n8 ? v_scale.stride(0) : 0, vs1 = n8 ? v_scale.stride(1) : 0, vs2 = n8 ? v_scale.stride(2) : 0;
  const int64_t kc0 = kcp ? k_channel.stride(0) : 0, kc1 = kcp ? k_channel.stride(1) : 0;
  const int64_t kf0 = nf ? k_fp.stride(0) : 0, kf1 = nf ? k_fp.stride(1) : 0, kf2 = nf ? k_fp.stride(2) : 0;
  const int64_t vf0 = nf ? v_fp.stride(0) : 0, vf1 = nf ? v_fp.stride(1) : 0, vf2 = nf ? v_fp.stride(2) : 0;
  float* op = out.data_ptr<float>();
  float* pp = p.data_ptr<float>();

  at::parallel_for(0, B * Hq, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> qs(D), qc(D);
    for (int64_t r = begin; r < end; ++r) {
      const int64_t b = r / Hq, hq = r % Hq, h = hq / G;
      const T* qr = qp + b * q0 + hq * q1;
      for (int64_t d = 0; d < D; ++d) qs[d] = static_cast<float>(qr[d]) * scale;
      for (int64_t d = 0; d < D; ++d) qc[d] = kcp ? qs[d] * kcp[b * kc0 + h * kc1 + d] : qs[d];
      float* pr = pp + r * N;
      float m = -std::numeric_limits<float>::infinity();
      for (int64_t j = 0; j < n8; ++j) {
        const int8_t* kr = kqp + b * kq0 + h * kq1 + j * kq2;
        float acc = 0.f;
        for (int64_t d = 0; d < D; ++d) acc += qc[d] * static_cast<float>(kr[d]);
        acc *= ksp[b * ks0 + h * ks1 + j * ks2];
        pr[j] = acc;
        m = acc > m ? acc : m;
      }
      for (int64_t j = 0; j < nf; ++j) {
        const T* kr = kfp + b * kf0 + h * kf1 + j * kf2;
        float acc = 0.f;
        for (int64_t d = 0; d < D; ++d) acc += qs[d] * static_cast<float>(kr[d]);
        pr[n8 + j] = acc;
        m = acc > m ? acc : m;
      }
      float sum = 0.f;
      for (int64_t j = 0; j < N; ++j) {
        const float e = std::exp(pr[j] - m);
        pr[j] = e;
        sum += e;
      }
      const float inv = 1.f / sum;
      for (int64_t j = 0; j < N; ++j) pr[j] *= inv;
      float* o = op + r * D;
      for (int64_t d = 0; d < D; ++d) o[d] = 0.f;
      for (int64_t j = 0; j < n8; ++j) {
        const float w = pr[j] * vsp[b * vs0 + h * vs1 + j * vs2];
        const int8_t* vr = vqp + b * vq0 + h * vq1 + j * vq2;
        for (int64_t d = 0; d < D; ++d) o[d] += w * static_cast<float>(vr[d]);
      }
      for (int64_t j = 0; j < nf; ++j) {
        const float w = pr[n8 + j];
        const T* vr = vfp + b * vf0 + h * vf1 + j * vf2;
        for (int64_t d = 0; d < D; ++d) o[d] += w * static_cast<float>(vr[d]);
      }
    }
  });
}

}  // namespace

// q [B, Hq, D]; k_q, v_q int8 [B, Hkv, n8, D]; k_scale, v_scale fp32 [B, Hkv, n8]; k_channel fp32 [B, Hkv, D] or
// empty; k_fp, v_fp [B, Hkv, nf, D] in q's dtype. Returns (out fp32 [B, Hq, D], mass fp32: the probabilities
// [B, Hq, n8+nf], or with kv_head_mass their mean over each KV head's query group [B, Hkv, n8+nf]).
std::vector<at::Tensor> decode_attention(at::Tensor q, at::Tensor k_q, at::Tensor v_q, at::Tensor k_scale,
                                         at::Tensor v_scale, at::Tensor k_channel, at::Tensor k_fp, at::Tensor v_fp,
                                         int64_t n8, int64_t nf, int64_t hkv, double scale, bool kv_head_mass) {
  TORCH_CHECK(n8 + nf > 0, "decode_attention: no keys");
  TORCH_CHECK(q.dim() == 3 && q.stride(2) == 1, "decode_attention: q must be [B, Hq, D], last dim contiguous");
  if (n8) {
    TORCH_CHECK(k_q.scalar_type() == at::kChar && v_q.scalar_type() == at::kChar, "decode_attention: int8 K/V");
    TORCH_CHECK(k_scale.scalar_type() == at::kFloat && v_scale.scalar_type() == at::kFloat, "fp32 scales");
    TORCH_CHECK(k_q.stride(3) == 1 && v_q.stride(3) == 1, "decode_attention: INT8 K/V last dim contiguous");
    TORCH_CHECK(!k_channel.numel() || (k_channel.scalar_type() == at::kFloat && k_channel.stride(2) == 1),
                "decode_attention: k_channel fp32 [B, Hkv, D], last dim contiguous");
  }
  if (nf) {
    TORCH_CHECK(k_fp.scalar_type() == q.scalar_type() && v_fp.scalar_type() == q.scalar_type(),
                "decode_attention: model-dtype K/V must have q's dtype");
    TORCH_CHECK(k_fp.stride(3) == 1 && v_fp.stride(3) == 1, "decode_attention: K/V last dim contiguous");
  }
  const auto opts = q.options().dtype(at::kFloat);
  at::Tensor out = at::empty({q.size(0), q.size(1), q.size(2)}, opts);
  at::Tensor p = at::empty({q.size(0), q.size(1), n8 + nf}, opts);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, q.scalar_type(), "decode_attention", [&] {
    decode_rows<scalar_t>(q, k_q, v_q, k_scale, v_scale, k_channel, k_fp, v_fp, n8, nf, hkv,
                          static_cast<float>(scale), out, p);
  });
  if (!kv_head_mass) return {out, p};
  // The mass per KV head: the mean over its GQA group (what the policy ranks by), summed after the parallel part
  // so the query rows stay balanced across threads.
  const int64_t B = q.size(0), Hq = q.size(1), G = Hq / hkv, N = n8 + nf;
  at::Tensor mass = at::zeros({B, hkv, N}, opts);
  const float* pp = p.data_ptr<float>();
  float* mp = mass.data_ptr<float>();
  const float inv_g = 1.f / static_cast<float>(G);
  for (int64_t r = 0; r < B * Hq; ++r) {
    float* m = mp + (r / Hq * hkv + (r % Hq) / G) * N;
    const float* pr = pp + r * N;
    for (int64_t j = 0; j < N; ++j) m[j] += pr[j] * inv_g;
  }
  return {out, mass};
}

// cpu_prefill.cpp (built into the same extension)
at::Tensor prefill_mass(at::Tensor q, at::Tensor keys, at::Tensor lse, int64_t n_q, int64_t tail);
std::tuple<at::Tensor, at::Tensor> prefill_attention_fwd(at::Tensor q, at::Tensor keys, at::Tensor values, int64_t n_q,
                                                         int64_t tail);
at::Tensor confidence_rows(at::Tensor x, double w_e, double w_m, double w_p, bool rescale);

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  // The GIL is released: the math touches no Python object, and other threads (store leases) keep running.
  m.def("decode_attention", &decode_attention, py::call_guard<py::gil_scoped_release>());
  m.def("prefill_mass", &prefill_mass, py::call_guard<py::gil_scoped_release>());
  m.def("prefill_attention", &prefill_attention_fwd, py::call_guard<py::gil_scoped_release>());
  m.def("confidence_rows", &confidence_rows, py::call_guard<py::gil_scoped_release>());
}
