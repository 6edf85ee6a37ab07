//===- SequenceView.cpp - a sequence op's inputs as views -----------------===//
//
// The prologue's slices and reshapes resolved into strided views (see
// SequenceView.h); anything else before the op is Unsupported.
//
//===----------------------------------------------------------------------===//
#include "codegen/SequenceView.h"

namespace strata::codegen::detail {

using format::BodyOp;
using format::Recipe;

std::vector<int64_t> contiguous(const Shape &s) {
  std::vector<int64_t> st(s.size(), 1);
  for (size_t d = s.size(); d-- > 1;)
    st[d - 1] = st[d] * s[d].constant;
  return st;
}

const BodyOp &SequenceView::resolve(Recipe want) {
  const BodyOp *main = nullptr;
  for (const BodyOp &op : e.body) {
    if (op.recipe == Recipe::Slice &&
        op.outputs[0].kind == BodyRef::Kind::Tmp) {
      Access a = access(op.inputs[0]);
      int64_t ax = e.intAttr(op, "axis");
      if (ax < 0)
        ax += static_cast<int64_t>(a.shape.size());
      if (ax <= 0 || ax >= static_cast<int64_t>(a.shape.size()))
        throw Unsupported("a slice along the token dim before a sequence op");
      int64_t start = e.intAttr(op, "start"), end = e.intAttr(op, "end");
      a.off += start * a.stride[ax];
      a.shape[ax] = {0, end - start, 1};
      temps[op.outputs[0].index] = a;
      continue;
    }
    if (op.recipe != want || main)
      throw Unsupported(fmt::format("'{}' in a {} kernel",
                                    format::recipeInfo(op.recipe).name,
                                    format::recipeInfo(want).name));
    main = &op;
  }
  if (!main)
    throw Unsupported("no sequence op in the kernel");
  return *main;
}

Access SequenceView::access(const BodyRef &r) {
  Access a;
  if (r.kind == BodyRef::Kind::Tmp) {
    auto it = temps.find(r.index);
    if (it == temps.end())
      throw Unsupported("a sequence op reads a temporary that is not a view");
    a = it->second;
  } else {
    a.t = e.tensor({r.kind, r.index, {}});
    a.shape = a.t.shape;
    a.stride = contiguous(a.shape);
  }
  if (!r.view.empty()) {
    // A reshape of the inner dims, which must be contiguous.
    std::vector<int64_t> inner = contiguous(a.shape);
    for (size_t d = 1; d < a.shape.size(); ++d)
      if (a.stride[d] != inner[d])
        throw Unsupported("a reshape of a strided view");
    if (!(r.view[0] == a.shape[0]))
      throw Unsupported("a reshape of the token dim");
    int64_t rowStride = a.stride[0];
    a.shape = r.view;
    a.stride = contiguous(a.shape);
    a.stride[0] = rowStride;
  }
  if (a.t.quant())
    throw Unsupported("a sequence op reads a quantised weight");
  return a;
}

} // namespace strata::codegen::detail
