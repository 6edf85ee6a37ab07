//===- KernelEmitter.h - device source for plan kernels ---------*- C++ -*-===//
//
// The C-style emitter of the code generator: for one kernel of a plan (a
// catalog recipe or a fused body, with its selected variant) it writes a
// device function specialised at compile time (dims, block types, tiles,
// attributes as constants; T, the token count, is the one run-time scalar)
// and its launch: grid as functions of T, block, LDS/shared bytes and the
// argument order. Targets differ only in the device prelude
// (codegen/device/arch/<target>/Prelude_<target>.h) the source is compiled
// with.
//
// Kernel families:
//   row       one block per row of the outputs' leading dim; the body's ops
//             run in order over the row (temporaries in LDS/shared), each a
//             loop or a reduction in registers and shuffles
//   gemm      matmul chains with elementwise epilogues on the matrix units
//             (tiles through LDS, weight blocks decoded once per tile)
//   grouped   the grouped expert GEMMs over expert-sorted rows
//   attention flash-style causal / block-sparse attention
//   delta     the gated delta rule, one block per value head
//   sort      moe_sort: expert histogram, offsets and the stable permutation
//   state     the generation state ops (kv_store, attention_cached, the
//             recurrent and QSA cached forms; codegen/state/): cached
//             attention and QSA selection split over the GPU for decode
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/format/Plan.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace strata::codegen {

/// One emitted kernel: its source (the kernel part; deviceSource adds the
/// prelude and shared headers) and how to launch it.
struct EmittedKernel {
  std::string symbol; ///< entry point, unique per specialisation
  std::string family; ///< row, gemm, grouped, attention, delta, qsa, sort
  std::string body;   ///< the kernel's own device code
  /// The body reads or writes an i8 state: its source embeds
  /// runtime/KvQuant.h (the quantisation the CPU backend shares).
  bool kvQuant = false;
  /// A decode form multiplies int8 activations (gemm-decode-int8): its
  /// source embeds runtime/format/BlockDecodeInt8.h.
  bool int8Decode = false;
  /// The kernel inputs (PlanKernel::inputs indices) a GEMV of this code
  /// reads as int8 activations, and those a GEMV reads as floats: the
  /// plan's PlanCode::int8Inputs are the first less the second (an input
  /// both ways, as siblings of an f32 and a quantised chain could read it,
  /// is checked as floats).
  std::vector<uint32_t> int8Inputs, floatGemvInputs;
  std::vector<format::PlanDim> grid; ///< x, y, z as functions of T
  std::vector<int64_t> block;        ///< x, y, z
  /// Dynamic LDS/shared bytes of a launch (static use is read back from
  /// the code object).
  uint64_t sharedBytes = 0;
  /// Argument order: "buffer:N", "weight:N", "state:N" per pointer, then
  /// "T".
  std::vector<std::string> args;
  /// A pre-launch from the same source, with the same arguments (its symbol
  /// is the kernel's with the suffix "_prep"; the body names it
  /// @SYMBOL@_prep).
  std::optional<format::PlanPreLaunch> pre;
  /// Workspace bytes the code needs, f(T) (zero: none).
  format::PlanDim workspace;
  /// The tensor maps its `tmap:N` arguments pass (sm_90 TMA copies).
  std::vector<format::PlanTensorMap> tensorMaps;
  /// Launches from the same source for longer prompts (PlanCode::
  /// alternates): each from minTokens on, its symbol the kernel's plus
  /// suffix.
  std::vector<EmittedKernel> alternates;
  int64_t minTokens = 0;
  std::string suffix;
  /// Every GEMM tile of the kernel's code and its alternates, once each:
  /// the variant or form row of KernelVariants.def it was taken as and the
  /// rows x columns it got, checked against that row by the codegen unit
  /// tests (VariantTilesTest).
  struct GemmTile {
    std::string variant; ///< the variant or form row's name
    int rows = 0, cols = 0;
  };
  std::vector<GemmTile> gemmTiles;
  /// The tiles this code object itself takes (the own code's, or an
  /// alternate's): `--report` prices a run by the row of the code it
  /// launches.
  std::vector<GemmTile> codeTiles;
};

/// Emits kernel \p k of \p plan for \p target ("gfx1151" or "sm_90"). The
/// symbol is derived from the kernel's label and a hash of its body, so
/// identical specialisations get the same symbol and source. Returns false
/// with \p error naming the kernel and what the emitter cannot express.
bool emitKernel(const format::Plan &plan, size_t k, const std::string &target,
                EmittedKernel &out, std::string &error);

/// The whole translation unit of \p kernel for \p target: the target's
/// prelude, ScalarMath.h, BlockDecode.h, DeviceLib.h and the kernel. Self
/// contained (no #include), so hiprtc/NVRTC can compile it elsewhere.
std::string deviceSource(const std::string &target,
                         const EmittedKernel &kernel);

/// The symbol of the synthetic weight fill kernel every GPU plan carries.
inline constexpr const char *kSyntheticFillSymbol = "strata_synthetic_fill";

/// The complete source of the synthetic weight fill kernel for \p target
/// (runtime/SyntheticBlock.h over a grid-stride loop of blocks, one thread
/// a block; 256 threads; arguments as syntheticFillArgs() names them).
std::string syntheticFillSource(const std::string &target);

/// Its eight 8-byte arguments, in order.
std::vector<std::string> syntheticFillArgs();

/// True if \p target has a device code generator.
bool isDeviceTarget(const std::string &target);

} // namespace strata::codegen
