//===- DeviceLib.h - target-independent device code of emitted kernels ----===//
//
// Included (as text) after a target prelude, ScalarMath.h and BlockDecode.h
// in every emitted source: typed loads/stores, block reductions and the
// building blocks the emitter specialises with compile-time constants (row
// normalisations, routing, top-k, the GEMM tile, attention, the gated delta
// rule). Everything here uses only the prelude's primitives, so it builds
// for every target.
//
//===----------------------------------------------------------------------===//
#ifdef STRATA_TARGET_SM90
#include "codegen/device/arch/sm_90/MmaConvert.h"
#else
#include "codegen/device/common/MmaPack.h"
#endif

#include "codegen/device/gemm/SplitBf16.h"

#include "codegen/device/common/Access.h"

#include "codegen/device/common/Copy.h"

#include "codegen/device/common/Reduce.h"

#include "codegen/device/row/RowOps.h"

#include "codegen/device/sort/RouteOrder.h"

#include "codegen/device/row/Conv1d.h"

#include "codegen/device/sort/MoeRoute.h"

#include "codegen/device/qsa/Select.h"

#include "codegen/device/row/NgramHash.h"

#include "codegen/device/qsa/Bitmap.h"

#include "codegen/device/attention/AttentionLayouts.h"

#include "codegen/device/attention/AttentionTile.h"

#include "codegen/device/sort/MoeSort.h"

#include "codegen/device/common/Mma.h"

#include "codegen/device/attention/AttentionGqa.h"

#ifdef STRATA_TARGET_SM90
#include "codegen/device/arch/sm_90/Pairs.h"
#include "codegen/device/arch/sm_90/QsaUnion.h"
#include "codegen/device/arch/sm_90/AttentionWg.h"
#include "codegen/device/arch/sm_90/AttentionWs.h"
#endif

#include "codegen/device/delta/DeltaChunked.h"

#include "codegen/device/common/MmaSplit.h"

#include "codegen/device/delta/DeltaMma.h"
