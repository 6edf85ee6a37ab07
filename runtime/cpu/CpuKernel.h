//===- CpuKernel.h - shared machinery of the CPU reference kernels -*- C++ -*-//
//
// Internal to runtime/cpu. Each op of the op table (runtime/format/Ops.def) is
// one function `run<Id>(KernelCtx &)` (declared below from the catalog, so a
// missing one is a link error). A kernel validates its operands first and
// throws KernelError for anything inconsistent; runCpuKernel turns that into an
// error message. Kernels read inputs as f32 (or i32) through the context,
// which converts f16/bf16 buffers and dequantises weights, and write f32 (or
// i32) outputs, which the context stages and converts when the output
// buffer has another type or overlaps an input.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/Device.h"
#include "runtime/ScalarMathCpu.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <deque>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

namespace strata::runtime::cpu {

/// An inconsistent launch (shape, type, attribute, index).
class KernelError : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

/// Throws KernelError(\p what).
[[noreturn]] void fail(const std::string &what);

/// "[2, 3, 4]".
std::string shapeStr(const std::vector<int64_t> &shape);

/// Row access to an operand of IR shape [..., K]: numRows() rows of K
/// elements; for a weight, row r is stored at r * rowSizeInBytes(type, K).
class RowReader {
public:
  explicit RowReader(const TensorArg &arg);
  int64_t rowLength() const { return rowLength_; }
  int64_t numRows() const { return numRows_; }
  /// Dequantises or converts row \p r into \p dst (rowLength() floats).
  void read(int64_t r, float *dst) const;
  /// Row \p r as f32: a pointer into the operand when it is stored as f32,
  /// else \p scratch (rowLength() floats) after read().
  const float *get(int64_t r, float *scratch) const;

private:
  const uint8_t *base_;
  bool isWeight_;
  format::GgmlType weightType_;
  format::PlanDType dtype_;
  int64_t rowLength_ = 1, numRows_ = 1;
  uint64_t rowBytes_ = 0;
};

/// One launch being executed.
class KernelCtx {
public:
  /// Checks the operand counts against the catalog and that every operand's
  /// bytes cover its shape (weights: whole rows of a readable type).
  KernelCtx(const Launch &launch, int threads);

  const char *recipeName() const;
  int threads() const { return threads_; }
  size_t numInputs() const { return launch_.inputs.size(); }
  const TensorArg &in(size_t i) const { return launch_.inputs[i]; }
  const TensorArg &out(size_t o) const { return launch_.outputs[o]; }
  const std::vector<int64_t> &inShape(size_t i) const { return in(i).shape; }
  const std::vector<int64_t> &outShape(size_t o) const { return out(o).shape; }

  // Attributes. Floats accept ints; a missing required one is an error.
  bool hasAttr(const std::string &name) const;
  int64_t intAttr(const std::string &name) const;
  int64_t intAttr(const std::string &name, int64_t dflt) const;
  float floatAttr(const std::string &name) const;
  float floatAttr(const std::string &name, float dflt) const;
  bool boolAttr(const std::string &name) const;
  bool boolAttr(const std::string &name, bool dflt) const;
  std::string strAttr(const std::string &name) const;
  std::string strAttr(const std::string &name, const std::string &dflt) const;
  std::vector<int64_t> intsAttr(const std::string &name) const;

  // Shape checks; \p what names the operand in the error.
  /// "input 1 'name' [2, 3]".
  std::string describeIn(size_t i) const;
  std::string describeOut(size_t o) const;
  void expectInRank(size_t i, size_t rank, const char *what) const;
  void expectOutShape(size_t o, const std::vector<int64_t> &want) const;
  /// Normalises a possibly negative \p axis of a rank-\p rank operand.
  int64_t axis(int64_t axis, size_t rank) const;

  // Inputs.
  /// The whole input as f32 (a pointer into the buffer when it is f32, else
  /// a converted or dequantised copy living as long as the context).
  const float *f32(size_t i);
  /// An integer buffer (i32 or i64) as i32.
  const int32_t *i32(size_t i);
  /// The input's elements stored as \p type (weights are dequantised first).
  const uint8_t *raw(size_t i, format::PlanDType type);
  RowReader rows(size_t i) const { return RowReader(in(i)); }

  // Outputs: numElements() elements of the kernel's type. Written through a
  // staging copy when the buffer has another type or overlaps an input.
  float *outF32(size_t o) {
    return static_cast<float *>(outRaw(o, format::PlanDType::F32));
  }
  int32_t *outI32(size_t o) {
    return static_cast<int32_t *>(outRaw(o, format::PlanDType::I32));
  }
  void *outRaw(size_t o, format::PlanDType type);
  /// Converts staged outputs into their buffers.
  void commit();

private:
  /// The attribute \p n of the launch, else its op-table default.
  const format::PlanAttr *findAttr(const AttrMap *attrs,
                                   const std::string &n) const;
  uint8_t *scratch(uint64_t bytes);

  const Launch &launch_;
  int threads_;
  std::deque<std::vector<uint64_t>> scratch_;
  struct Staged {
    size_t output;
    format::PlanDType type;
    uint8_t *data;
  };
  std::vector<Staged> staged_;
};

/// Runs \p fn(worker, numWorkers) once per worker on up to \p threads
/// threads (the calling one included); \p fn splits the kernel's \p items
/// between workers itself. With fewer than 2 items or \p work (a rough count
/// of multiply-adds) below 2^16, there is one worker, the calling thread. An
/// exception in any worker is rethrown after all have finished.
void onWorkers(int threads, int64_t items, int64_t work,
               const std::function<void(int worker, int numWorkers)> &fn);

/// sum_k a[k] * b[k] in f32: eight partial sums (lane l takes k = l mod 8 in
/// order), then ((s0+s4)+(s2+s6)) + ((s1+s5)+(s3+s7)), then the tail in
/// order. The order is part of the contract (the GPU kernels sum alike).
float dotF32(const float *a, const float *b, int64_t n);

inline float sigmoidF32(float x) { return scalar::sm_sigmoid(x); }

/// y = softmax(x) over \p n values: max subtracted, f32 sums in order (the
/// one summation order softmax and moe_route share).
inline void softmaxRow(const float *x, float *y, int64_t n) {
  float max = -INFINITY;
  for (int64_t i = 0; i < n; ++i)
    max = std::max(max, x[i]);
  float sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    y[i] = std::exp(x[i] - max);
    sum += y[i];
  }
  for (int64_t i = 0; i < n; ++i)
    y[i] /= sum;
}

/// QSA block selection of one query (qsa_select and qsa_select_cached share
/// it, so a decode step selects what the prefill row selects): the scores of
/// the \p nc complete blocks (keys \p kb, [nc, di]) against the query's
/// \p hi heads (\p q, [hi, di]): the sum over heads of max(0, q.k), times
/// 1/sqrt(di); the \p top best (ties: the lower block; NaN last) in
/// \p row[0 .. top), then the tail block nc, then -1 padding
/// (\p row holds top + 1). \p score and \p order are scratch.
void selectBlocksRow(const float *q, int64_t hi, int64_t di, const float *kb,
                     int64_t nc, int64_t top, std::vector<float> &score,
                     std::vector<int32_t> &order, int32_t *row);

/// l2_norm of one row of \p d values: y = x / sqrt(sum x^2 + eps) (\p add,
/// form "add") or x / max(sqrt(sum x^2), eps) ("max"), the squares summed in
/// double. l2_norm and gated_delta_qkv_cached share it, so the folded form
/// normalises q and k bit for bit as the ops it replaces.
void l2NormRow(const float *x, float *y, int64_t d, float eps, bool add);

// One entry point per recipe.
#define OP(Id, Mnemonic, MinOperands, MaxOperands, NumResults, Attrs, Rule,    \
           Cost, Class)                                                        \
  void run##Id(KernelCtx &ctx);
#include "runtime/format/Ops.def"

} // namespace strata::runtime::cpu
