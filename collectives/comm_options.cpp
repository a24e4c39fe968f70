#include "collectives/comm_options.h"

#include "common/error.h"

namespace titan {

void validate(const CommOptions& o) {
  TITAN_CONFIG_CHECK(o.bucket_cap_mb > 0, "comm.bucket_cap_mb: expected > 0, got ",
                     o.bucket_cap_mb);
  TITAN_CONFIG_CHECK(o.init_timeout_seconds > 0, "comm.init_timeout_seconds: expected > 0, got ",
                     o.init_timeout_seconds);
  TITAN_CONFIG_CHECK(o.train_timeout_seconds > 0,
                     "comm.train_timeout_seconds: expected > 0, got ", o.train_timeout_seconds);
}

bool is_fused(const CommOptions& o) { return o.collective_mode == CollectiveMode::kFused; }

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kAvg:
      return "avg";
    case ReduceOp::kMax:
      return "max";
  }
  return "?";
}

}  // namespace titan
