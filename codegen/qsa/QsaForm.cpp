//===- QsaForm.cpp - qsa_select's choice of form --------------------------===//
#include "codegen/qsa/QsaForm.h"
#include "codegen/Limits.h"

#include <algorithm>

namespace strata::codegen {

QsaSelectForm selectQsaSelect(const QsaSelectProblem &p) {
  QsaSelectForm f;
  f.block = p.block;
  const int64_t most = std::max<int64_t>(1, p.maxTokens / p.block);
  f.blocks = 1;
  while (f.blocks < most)
    f.blocks *= 2;
  f.query = p.heads * p.dims;
  // qsa_top_select's compacted top (a power of two >= top, score and id),
  // histogram and scan words.
  int64_t pt = 1;
  while (pt < p.top)
    pt *= 2;
  f.select = 8 * pt + 4 * 256 + 64;
  f.ids = f.blocks;
  // Scores and ids past the static limit (with the row's 256 bytes of
  // reduction words): ids only for the bitonic sort's rows (those whose
  // visible blocks fit the top), which the radix select (256 threads, a
  // top) leaves to it.
  if (8 * f.blocks + 4 * f.query + f.select + 256 > staticSharedBudget() &&
      p.threads == 256 && p.top > 0)
    f.ids = std::min(f.blocks, pt);
  return f;
}

int64_t QsaSelectForm::longestFitting(int64_t other, int64_t budget) const {
  int64_t p = blocks;
  while (p > 1 &&
         other + 4 * query + select + 4 * p + 4 * std::min(p, ids) > budget)
    p /= 2;
  return p * block;
}

} // namespace strata::codegen
