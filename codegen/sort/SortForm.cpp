//===- SortForm.cpp - moe_sort's choice of form ---------------------------===//
#include "codegen/sort/SortForm.h"
#include "codegen/Limits.h"

namespace strata::codegen {

SortForm selectSort(int64_t experts) {
  // Per-wave counts of every expert and two more rows of them.
  auto fits = [&](int threads, int rows) {
    return experts * (threads / 32 + rows) * 4 <= staticSharedBudget();
  };
  SortForm f;
  f.threads = fits(512, 2) ? 512 : 256;
  f.fits = fits(f.threads, 2);
  f.oneFits = fits(f.threads, 3);
  f.slice = kSortSlice;
  return f;
}

SortForm selectSort(const SortProblem &p) {
  SortForm f = selectSort(p.experts);
  f.one = p.oneOption && p.state && p.rowsAreTokens && f.oneFits;
  return f;
}

} // namespace strata::codegen
