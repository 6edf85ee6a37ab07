//===- SortForm.cpp - moe_sort's choice of form ---------------------------===//
#include "codegen/sort/SortForm.h"
#include "codegen/Limits.h"

namespace strata::codegen {

SortForm selectSort(int64_t experts) {
  // Per-wave counts of every expert and two more rows of them.
  auto fits = [&](int threads) {
    return experts * (threads / 32 + 2) * 4 <= staticSharedBudget();
  };
  SortForm f;
  f.threads = fits(512) ? 512 : 256;
  f.fits = fits(f.threads);
  f.slice = kSortSlice;
  return f;
}

} // namespace strata::codegen
