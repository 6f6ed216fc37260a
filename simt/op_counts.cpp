// The operation counters of simt/op_counts.h, defined once for every instrumented object.
#include "simt/op_counts.h"

uint64_t simt_fp32_ops = 0;
uint64_t simt_fp64_ops = 0;
uint64_t simt_special_ops = 0;
uint64_t simt_statements = 0;

namespace simt {

OpCounts read_op_counts() {
  OpCounts counts;
  counts.fp32 = simt_fp32_ops;
  counts.fp64 = simt_fp64_ops;
  counts.special = simt_special_ops;
  counts.statements = simt_statements;
  return counts;
}

// TINYTRAIN_SIMT_OP_COUNTS: set by simt/op_count_plugin.cmake, 1 when it builds the plugin.
bool op_counts_available() {
#if defined(TINYTRAIN_SIMT_OP_COUNTS) && TINYTRAIN_SIMT_OP_COUNTS
  return true;
#else
  return false;
#endif
}

}  // namespace simt
