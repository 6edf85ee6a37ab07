//===- SequenceView.h - a sequence op's inputs as views ---------*- C++ -*-===//
//
// Internal to codegen: attention, the gated delta rule and moe_sort
// (codegen/attention/, codegen/delta/, codegen/sort/) take one op whose work
// is not per row. A fused body may put slices and reshapes of kernel
// inputs before the op (fuse-elementwise's prologue): they become strided
// views, so the op reads the input in place and nothing is copied.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "codegen/EmitterImpl.h"

#include <cstdint>
#include <map>
#include <vector>

namespace strata::codegen::detail {

/// A strided view of a kernel input: element (i0, i1, ...) is at
/// ptr[off + sum i_d * stride[d]].
struct Access {
  Tensor t;
  int64_t off = 0;
  std::vector<int64_t> stride; ///< per dim of `shape`
  Shape shape;
};

/// Contiguous strides of \p s (dim 0 may depend on T).
std::vector<int64_t> contiguous(const Shape &s);

/// The views of one sequence kernel's body.
class SequenceView {
public:
  explicit SequenceView(Emitter &e) : e(e) {}

  /// Resolves the prologue (slices of inputs into temporaries) and returns
  /// the single non-view op.
  const format::BodyOp &resolve(format::Recipe want);
  /// The view \p r names: a kernel input (with its reshape, if any) or a
  /// temporary the prologue made.
  Access access(const BodyRef &r);

  Emitter &e;
  std::map<uint32_t, Access> temps; ///< temporaries that are views
};

} // namespace strata::codegen::detail
