// One-pass kernels over the flat parameter, gradient and state buffers of the AdamW in
// optimizer.h (one buffer per dtype): the update with the clipping scale folded in, sums of
// squares for the gradient norm. Raw pointers, float and double; parallel over chunks.
#pragma once

#include <cstdint>

namespace titan {

struct AdamWCoefs {
  double decay;       // 1 - lr * weight_decay
  double beta1, beta2;
  double eps;
  double step_size;   // -lr / (1 - beta1^t)
  double bias2_sqrt;  // sqrt(1 - beta2^t)
  double grad_scale;  // clipping coefficient; gradients are written back scaled unless 1
};

// torch.optim.AdamW's arithmetic (foreach=False) element by element over [0, n); returns
// whether every updated parameter is finite.
bool adamw_update(float* p, float* g, float* m, float* v, int64_t n, const AdamWCoefs& c);
bool adamw_update(double* p, double* g, double* m, double* v, int64_t n, const AdamWCoefs& c);

// sum of x[i]^2 in double.
double sum_squares(const float* x, int64_t n);
double sum_squares(const double* x, int64_t n);

}  // namespace titan
