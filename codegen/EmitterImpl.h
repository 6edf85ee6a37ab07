//===- EmitterImpl.h - shared state of the kernel emitter -------*- C++ -*-===//
//
// Internal to codegen: the operand model every kernel family emits against
// (kernel inputs, outputs and body temporaries with their C types, shapes
// and index expressions), used by KernelEmitter.cpp (dispatch) and every
// family's emitter (codegen/<family>/).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "codegen/KernelEmitter.h"

#include <fmt/format.h>

#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace strata::codegen::detail {

using format::BodyRef;
using format::PlanDim;
using Shape = std::vector<PlanDim>;

/// What the emitter cannot express, with the reason (caught by emitKernel
/// and turned into a diagnostic naming the kernel).
struct Unsupported : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// A tensor as a kernel body sees it.
struct Tensor {
  std::string ptr;   ///< C expression of its base pointer
  std::string ctype; ///< float, bf16, f16, int32_t, uint8_t (quantised)
  Shape shape;       ///< IR order
  bool isWeight = false;
  bool isTemp = false; ///< a body temporary: one row in LDS/shared
  /// The kernel input it is (a BodyRef of kind In, views included), or -1:
  /// an output, a temporary, or a pointer an emitter made (a workspace).
  int64_t input = -1;
  format::GgmlType ggml = format::GgmlType::F32;
  uint32_t blockSize = 1, blockBytes = 4; ///< quantised weights
  bool quant() const { return ctype == "uint8_t"; }
};

/// The emitter of one kernel.
class Emitter {
public:
  Emitter(const format::Plan &plan, const format::PlanKernel &kernel,
          std::string target);

  const format::Plan &plan;
  const format::PlanKernel &kernel;
  std::string target;
  fmt::memory_buffer code; ///< the kernel's source
  EmittedKernel out;

  /// Recipe of the catalog kernel or each body op (a catalog kernel is a
  /// body of one op over its own operands).
  std::vector<format::BodyOp> body;

  /// The tensor \p r names (with its view, if any).
  Tensor tensor(const BodyRef &r) const;
  /// Attribute \p name of body op \p op, or its schema default.
  const format::PlanAttr &attr(const format::BodyOp &op,
                               const std::string &name) const;
  int64_t intAttr(const format::BodyOp &op, const std::string &name) const;
  double floatAttr(const format::BodyOp &op, const std::string &name) const;
  bool boolAttr(const format::BodyOp &op, const std::string &name) const;
  std::string strAttr(const format::BodyOp &op, const std::string &name) const;
  bool hasAttr(const format::BodyOp &op, const std::string &name) const;

  /// The parameter list "const float *in0, ..., float *out0, ..., [char
  /// *ws,] [const strata_tmap tmap0, ...,] long T" (and the plan's argument
  /// order in out.args); one tmap parameter per map in out.tensorMaps.
  std::string params();
  /// The PTX name of tensor map \p i's parameter (STRATA_PARAM_ADDR) in
  /// function \p fn (its name as emitted, before @SYMBOL@ becomes the
  /// symbol): params() numbers them
  /// after the pointers and the workspace.
  std::string tensorMapParam(size_t i, const std::string &fn) const;
  /// Emits the kernel's first lines: every pointer parameter is 16-byte
  /// aligned (arena offsets are multiples of 16, weights and workspaces are
  /// allocations), which lets the compiler merge adjacent accesses into
  /// 16-byte loads and stores.
  void prologue();
  /// The kernel takes the workspace (its temporaries, laid out as
  /// PlanKernel::workspaceBytes counts them) as argument "workspace".
  bool workspace = false;
  /// A decode form multiplies int8 activations: the source embeds
  /// runtime/format/BlockDecodeInt8.h (EmittedKernel::int8Decode).
  bool int8Decode = false;
  /// Every GEMM tile the kernel's code and its alternates take, once each
  /// (EmittedKernel::gemmTiles).
  std::vector<EmittedKernel::GemmTile> tiles;
  /// The tiles of the code object being emitted (EmittedKernel::codeTiles):
  /// an alternate's emitter sets it aside (withOwnTiles).
  std::vector<EmittedKernel::GemmTile> codeTiles;
  /// Records a tile of \p rows x \p cols taken as \p name (a variant or
  /// form row of KernelVariants.def) where the code being emitted prints
  /// it: the kernel's list and the code object's.
  void recordTile(const std::string &name, int rows, int cols) {
    pickedTile(name, rows, cols);
    addTile(codeTiles, name, rows, cols);
  }
  /// The same where a tile is chosen before any code object prints it
  /// (GemmEmitter::pickTile): the kernel's list only.
  void pickedTile(const std::string &name, int rows, int cols) {
    addTile(tiles, name, rows, cols);
  }
  static void addTile(std::vector<EmittedKernel::GemmTile> &list,
                      const std::string &name, int rows, int cols) {
    for (const EmittedKernel::GemmTile &t : list)
      if (t.variant == name && t.rows == rows && t.cols == cols)
        return;
    list.push_back({name, rows, cols});
  }
  /// Runs \p emit (an alternate's code) and returns the tiles it recorded,
  /// leaving the enclosing code's list as it was.
  template <class F>
  std::vector<EmittedKernel::GemmTile> withOwnTiles(F &&emit) {
    std::vector<EmittedKernel::GemmTile> outer = std::move(codeTiles);
    codeTiles.clear();
    emit();
    std::vector<EmittedKernel::GemmTile> mine = std::move(codeTiles);
    codeTiles = std::move(outer);
    return mine;
  }

  template <typename... A> void line(fmt::format_string<A...> f, A &&...a) {
    fmt::format_to(std::back_inserter(code), f, std::forward<A>(a)...);
    code.push_back('\n');
  }

private:
  mutable std::map<std::string, format::PlanAttr> defaults_;
};

/// C expression of dim \p d at run time (T is the kernel's `T` parameter).
std::string dimExpr(const PlanDim &d);
/// True if \p d does not depend on T.
inline bool isConst(const PlanDim &d) { return d.coef == 0; }
/// Product of dims [from, end) (all must be constants).
int64_t constProduct(const Shape &s, size_t from);
/// The device type of an activation element (device/common/Access.h: float,
/// bf16, f16, int32_t); the one mapping every emitter uses.
const char *elementCType(format::DType t);
/// Blocks of \p per rows covering \p rows: ceil(rows / per), or one or two
/// more where rows grow with T (PlanDim floors coef T on its own; extra
/// blocks find no row and exit).
format::PlanDim rowGroups(const format::PlanDim &rows, int64_t per);
/// A float literal that reads back as exactly \p v (hex float).
std::string floatLit(float v);
/// 64-bit FNV-1a of \p s, as 16 hex digits.
std::string hashHex(const std::string &s);

// The families (each fills e.code and e.out or throws Unsupported).
void emitRowKernel(Emitter &e);
void emitGemmKernel(Emitter &e);
void emitGroupedKernel(Emitter &e);
void emitAttentionKernel(Emitter &e);
void emitDeltaKernel(Emitter &e);
void emitSortKernel(Emitter &e);
/// moe_route alone (sort/RouteEmitter.cpp; its Row form is a row kernel).
void emitRouteKernel(Emitter &e);
/// moe_route and the moe_sort of its ids fused (fuse-route-sort;
/// sort/RouteEmitter.cpp).
void emitRouteSortKernel(Emitter &e);

/// The element of \p t that element (row, i) of an op output of shape
/// \p outShape reads, with numpy broadcasting over trailing dims; `row` and
/// `i` are C expressions (i is the flat index inside the row). Temporaries
/// hold one row. Throws Unsupported when \p t would be read across rows.
std::string elementIndex(const Tensor &t, const Shape &outShape,
                         const std::string &row, const std::string &i);

} // namespace strata::codegen::detail
