// Cross entropy fused with the logits' softmax (an autograd Function): forward reads each
// row of logits once (running max and sum of exponentials, chunk by chunk) and keeps only its
// log-sum-exp; backward writes softmax - one_hot in one pass. Used by cross_entropy_sum
// (trainer/model/model.h) when its `fused` argument is on.
#pragma once

#include <torch/torch.h>

namespace titan {

// sum over rows of (logsumexp(logits[r]) - logits[r][labels[r]]) / normalizer, as a float
// scalar (double for double logits); logits [..., V] float or double, labels int64 [...].
torch::Tensor fused_cross_entropy_sum(const torch::Tensor& logits, const torch::Tensor& labels, double normalizer);

}  // namespace titan
