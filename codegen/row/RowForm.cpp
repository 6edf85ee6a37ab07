//===- RowForm.cpp - the row family's choice of form ----------------------===//
#include "codegen/row/RowForm.h"
#include "codegen/Limits.h"

namespace strata::codegen {

RowForm selectRow(const RowProblem &p) {
  RowForm f;
  if (p.convBody && p.channels > 0 && p.channels % 4 == 0) {
    f.kind = RowForm::Kind::ConvRows;
    f.rowsPerBlock = kConvRowsPerBlock;
    f.channelsPerBlock = 4 * int64_t(p.threads);
    return f;
  }
  if (p.qsa)
    f.qsa = selectQsaSelect(*p.qsa);
  // The reductions' words, the routes' logits, the QSA sort; then the
  // temporaries' rows if they fit the static limit, else the workspace.
  f.fixedBytes = 256 + f.qsa.sharedBytes();
  for (int64_t e : p.routeExperts)
    f.fixedBytes += 4 * e;
  f.fits = f.fixedBytes <= staticSharedBudget();
  f.tempsInWorkspace = f.fixedBytes + p.tempBytes > staticSharedBudget();
  return f;
}

} // namespace strata::codegen
