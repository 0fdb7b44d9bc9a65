// Shared by the compiled CPU kernels: 16-float vectors (GCC/Clang vector extensions) and a vectorized exp.
#pragma once

#include <cstdint>
#include <cstring>

// GCC/Clang vector extensions: 512-bit vectors where the CPU has them, split into narrower ones where not.
typedef float v16f __attribute__((vector_size(64), aligned(64)));
typedef int32_t v16i __attribute__((vector_size(64), aligned(64)));

// exp(x) for x <= ~0 (a score minus its row's log-sum-exp): 2^(x log2 e), a degree-6 polynomial for the fraction
// (relative error ~2e-7) and the exponent put in by bits; vectorized, since std::exp is not without libmvec.
inline v16f exp_le0(v16f x) {
  x = x < -87.0f ? -87.0f : x;
  const v16f t = x * 1.4426950408889634f;
  const v16i n = __builtin_convertvector(t - 0.5f, v16i);  // towards zero: round-half-up for t <= 0.5
  const v16f f = t - __builtin_convertvector(n, v16f);
  v16f p = f * 1.535336188319500e-4f + 1.339887440266574e-3f;
  p = p * f + 9.618437357674640e-3f;
  p = p * f + 5.550332471162809e-2f;
  p = p * f + 2.402264791363012e-1f;
  p = p * f + 6.931472028550421e-1f;
  p = p * f + 1.0f;
  const v16i bits = (n + 127) << 23;
  v16f two_n;
  std::memcpy(&two_n, &bits, sizeof two_n);
  return p * two_n;
}

