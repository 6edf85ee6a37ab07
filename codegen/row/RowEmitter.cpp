//===- RowEmitter.cpp - the row family: one block per row -----------------===//
//
// Every op of the body runs over one row of the outputs' leading dim (a
// token, usually) in turn, with a block barrier between ops: elementwise
// ops and copies as loops over the row, normalisations and routing as
// reductions in registers and shuffles (codegen/device/row/, common/).
// Temporaries hold one row in LDS/shared. Kernel inputs may be read at any
// row (a convolution's history, a lookup table, block keys); outputs and
// temporaries only at the block's own row, which is what makes the
// decomposition legal.
//
//===----------------------------------------------------------------------===//
#include "codegen/EmitterImpl.h"
#include "codegen/Limits.h"
#include "codegen/Options.h"
#include "codegen/qsa/QsaForm.h"
#include "codegen/row/RowForm.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>

namespace strata::codegen::detail {

using format::BodyOp;
using format::Recipe;

namespace {

constexpr int kThreads = 256;

/// Emits the row family's ops.
class RowEmitter {
public:
  explicit RowEmitter(Emitter &e) : e(e) {}
  void run();
  /// The channels of a body that is conv1d_causal alone or followed by
  /// silu over its result, with row-aligned operands (0: another body).
  int64_t convChannels();
  /// The ConvRows form (RowForm.h): blocks of rows x channels with the
  /// weights loaded once (conv1d_rows).
  void convRows(const RowForm &form);
  /// hc_write followed by the per-stream norm of its result (K1), emitted
  /// as one register-resident pass (row_hc_write_norm); false where the
  /// shapes do not fit it (then each op is emitted on its own).
  bool writeNorm(const BodyOp &write, const BodyOp &norm);
  /// moe_scatter, the residual add and rms_norm in one pass
  /// (row_scatter_add_norm; option row-scatter-norm) where \p scatter,
  /// \p add and \p norm are that chain of one row; false (nothing
  /// printed) where they are not.
  bool scatterAddNorm(const BodyOp &scatter, const BodyOp &add,
                      const BodyOp &norm);
  /// A norm's optional weight: its element count (0: none) and pointer.
  std::pair<int64_t, std::string> normWeight(const BodyOp &norm) {
    if (norm.inputs.size() < 2)
      return {0, "(const float *)0"};
    Tensor wt = in(norm, 1);
    checkReadable(wt);
    return {constProduct(wt.shape, 0), wt.ptr};
  }

private:
  Emitter &e;
  Shape rowShape; ///< the outputs' shape: dim 0 is the row
  /// qsa_select's form (codegen/qsa/QsaForm.h; blocks 0: no qsa_select).
  QsaSelectForm qsa;
  /// Vector loads a thread issues before their first use (option
  /// row-loads; 1: a load at a time).
  int loads = 1;

  /// Pointer to the current row of \p t (which must be row-aligned).
  std::string rowPtr(const Tensor &t) {
    if (t.isTemp)
      return t.ptr;
    if (t.shape.empty() || !(t.shape[0] == rowShape[0]))
      throw Unsupported("an operand of a row op is not aligned with the row");
    return fmt::format("({} + row * {}L)", t.ptr, constProduct(t.shape, 1));
  }
  Tensor in(const BodyOp &op, size_t i) { return e.tensor(op.inputs.at(i)); }
  Tensor res(const BodyOp &op, size_t i = 0) {
    Tensor t = e.tensor(op.outputs.at(i));
    if (!t.isTemp && (t.shape.empty() || !(t.shape[0] == rowShape[0])))
      throw Unsupported("a body op's result is not aligned with the row");
    return t;
  }
  void checkReadable(const Tensor &t) {
    if (t.quant())
      throw Unsupported("an elementwise op reads a quantised weight");
  }
  /// A loop over the elements of a row of \p shape: 4 consecutive
  /// elements per thread when the row allows (adjacent, 16-byte aligned:
  /// the compiler makes 16-byte accesses of f32 rows).
  void loop(const Shape &shape, const std::function<void()> &bodyFn) {
    int64_t n = constProduct(shape, 1);
    if (n % 4 != 0) {
      e.line("  for (long i = tid_x(); i < {}L; i += {}) {{", n, kThreads);
      bodyFn();
      e.line("  }}");
      return;
    }
    e.line("  for (long i0 = tid_x() * 4L; i0 < {}L; i0 += {} * 4L) {{", n,
           kThreads);
    e.line("#pragma unroll");
    e.line("  for (int vv = 0; vv < 4; ++vv) {{");
    e.line("    const long i = i0 + vv;");
    bodyFn();
    e.line("  }}");
    e.line("  }}");
  }
  void elementwise(const BodyOp &op);
  void op(const BodyOp &op);
  /// Unary ops whose f32 temporary only one later elementwise op reads and
  /// whose input is a kernel input (not overwritten in the body): not
  /// emitted; the reader applies them to the input it loads (the sigmoid
  /// gate of the delta rule's output norm went through the workspace).
  std::map<uint32_t, const BodyOp *> inlined;
  void findInlined();
  /// The body's ops in independent chains (body order within each): ops
  /// that share no temporary and touch none of each other's written
  /// arena bytes are in different chains.
  std::vector<std::vector<size_t>> bodyChains() const;
  /// \p fn and \p extra of an elementwise op (sm_ function, attribute args).
  void elementFn(const BodyOp &op, std::string &fn, std::string &extra);
};

std::vector<std::vector<size_t>> RowEmitter::bodyChains() const {
  // The arena bytes an operand touches (weights and states: none; row
  // kernels write neither), so that a buffer and its view are one.
  auto bytes = [&](const BodyRef &r) -> std::pair<uint64_t, uint64_t> {
    if (r.kind == BodyRef::Kind::Tmp)
      return {0, 0};
    const format::PlanOperand o =
        r.kind == BodyRef::Kind::Out
            ? format::PlanOperand{false, e.kernel.outputs.at(r.index), false}
            : e.kernel.inputs.at(r.index);
    if (!o.isBuffer())
      return {0, 0};
    const format::PlanBuffer &b = e.plan.buffers.at(o.index);
    return {b.offset, b.offset + b.bytes};
  };
  auto touches = [&](const BodyRef &w, const BodyRef &r) {
    if (w.kind == BodyRef::Kind::Tmp || r.kind == BodyRef::Kind::Tmp)
      return w.kind == r.kind && w.index == r.index;
    auto [a0, a1] = bytes(w);
    auto [b0, b1] = bytes(r);
    return a0 < a1 && b0 < b1 && a0 < b1 && b0 < a1;
  };
  // Union-find over ops: an op joins every op that reads or writes what it
  // writes.
  const size_t n = e.body.size();
  std::vector<size_t> root(n);
  for (size_t i = 0; i < n; ++i)
    root[i] = i;
  auto find = [&](size_t i) {
    while (root[i] != i)
      i = root[i] = root[root[i]];
    return i;
  };
  for (size_t i = 0; i < n; ++i)
    for (size_t j = 0; j < n; ++j) {
      if (i == j)
        continue;
      bool joined = false;
      for (const BodyRef &w : e.body[i].outputs) {
        for (const BodyRef &r : e.body[j].inputs)
          joined = joined || touches(w, r);
        for (const BodyRef &r : e.body[j].outputs)
          joined = joined || touches(w, r);
      }
      if (joined)
        root[find(i)] = find(j);
    }
  std::vector<std::vector<size_t>> chains;
  std::map<size_t, size_t> index;
  for (size_t i = 0; i < n; ++i) {
    auto [it, fresh] = index.emplace(find(i), chains.size());
    if (fresh)
      chains.emplace_back();
    chains[it->second].push_back(i);
  }
  return chains;
}

void RowEmitter::findInlined() {
  std::map<uint32_t, int> reads;
  for (const BodyOp &op : e.body)
    for (const BodyRef &r : op.inputs)
      if (r.kind == BodyRef::Kind::Tmp)
        ++reads[r.index];
  for (size_t i = 0; i < e.body.size(); ++i) {
    const BodyOp &op = e.body[i];
    if (format::recipeInfo(op.recipe).cls != format::OpClass::Unary ||
        op.recipe == Recipe::Cast || op.outputs.size() != 1 ||
        op.outputs[0].kind != BodyRef::Kind::Tmp ||
        op.inputs[0].kind != BodyRef::Kind::In || !op.inputs[0].view.empty())
      continue;
    uint32_t t = op.outputs[0].index;
    bool written = false; // an output stored over the input (in place)
    for (int32_t tied : e.kernel.tied)
      written = written || tied == static_cast<int32_t>(op.inputs[0].index);
    if (reads[t] != 1 || written ||
        e.kernel.temps[t].dtype != format::DType::F32)
      continue;
    Tensor x = in(op, 0), y = res(op);
    if (x.quant() || x.isWeight || x.shape.size() != y.shape.size())
      continue;
    bool same = true;
    for (size_t d = 1; d < x.shape.size(); ++d)
      same = same && x.shape[d] == y.shape[d];
    // Its one reader: a later elementwise op of the same shape, reading
    // the temporary without a view.
    for (size_t j = i + 1; j < e.body.size() && same; ++j)
      for (const BodyRef &r : e.body[j].inputs)
        if (r.kind == BodyRef::Kind::Tmp && r.index == t) {
          format::OpClass c = format::recipeInfo(e.body[j].recipe).cls;
          Tensor z = res(e.body[j]);
          bool ok =
              r.view.empty() && z.shape.size() == y.shape.size() &&
              (c == format::OpClass::Unary || c == format::OpClass::Binary);
          for (size_t d = 1; ok && d < z.shape.size(); ++d)
            ok = z.shape[d] == y.shape[d];
          if (ok)
            inlined[t] = &op;
        }
  }
}

void RowEmitter::elementFn(const BodyOp &op, std::string &fn,
                           std::string &extra) {
  switch (op.recipe) {
#define OP(Id, Mnemonic, Min, Max, N, Attrs, Rule, Cost, Class)                \
  case Recipe::Id:                                                             \
    fn = "sm_" Mnemonic;                                                       \
    break;
#include "runtime/format/Ops.def"
  }
  extra.clear();
  if (op.recipe == Recipe::Clamp) {
    float lo = e.hasAttr(op, "min") ? static_cast<float>(e.floatAttr(op, "min"))
                                    : -INFINITY;
    float hi = e.hasAttr(op, "max") ? static_cast<float>(e.floatAttr(op, "max"))
                                    : INFINITY;
    extra = fmt::format(", {}, {}", floatLit(lo), floatLit(hi));
  } else if (op.recipe == Recipe::Scale) {
    extra = fmt::format(", {}, {}", floatLit(e.floatAttr(op, "s")),
                        floatLit(e.floatAttr(op, "b")));
  }
}

void RowEmitter::elementwise(const BodyOp &op) {
  Tensor y = res(op);
  std::string fn, extra;
  elementFn(op, fn, extra);
  // Per input: the tensor loaded and the unary op applied to it (inlined
  // temporaries load their op's input).
  std::vector<Tensor> ins;
  std::vector<std::string> wrap(op.inputs.size()), wrapExtra(op.inputs.size());
  for (size_t i = 0; i < op.inputs.size(); ++i) {
    const BodyRef &r = op.inputs[i];
    auto it =
        r.kind == BodyRef::Kind::Tmp ? inlined.find(r.index) : inlined.end();
    if (it != inlined.end()) {
      ins.push_back(in(*it->second, 0));
      elementFn(*it->second, wrap[i], wrapExtra[i]);
    } else {
      ins.push_back(in(op, i));
    }
    checkReadable(ins.back());
  }
  // Vector form: 4 adjacent elements per thread, one vector access per
  // operand whose innermost dim is neither broadcast nor ragged (others
  // read their element per lane), when the row splits into fours.
  int64_t n = constProduct(y.shape, 1);
  auto innerOk = [&](const Tensor &t) {
    return !t.shape.empty() && isConst(t.shape.back()) &&
           t.shape.back().constant % 4 == 0 && !y.shape.empty() &&
           isConst(y.shape.back()) &&
           t.shape.back().constant == y.shape.back().constant;
  };
  bool vec = n % 4 == 0 && y.shape.size() >= 2 && innerOk(y) &&
             (y.isTemp || !y.quant());
  // Chunks of C vector accesses a thread (option row-loads): every load
  // of a chunk is issued before its first store, since y may share storage
  // with an input and the compiler keeps the program's order of loads and
  // stores to memory that may alias (a load at a time waits a memory
  // latency per NT x 4 elements: a few rows a launch cannot hide it).
  const int64_t trips = (n + kThreads * 4 - 1) / (kThreads * 4);
  const int64_t chunk = std::min<int64_t>(loads, trips);
  // The op on element u of the inputs' vectors a<k><at>[4] (both loops).
  auto result = [&](const std::string &at) {
    std::string args;
    for (size_t k = 0; k < ins.size(); ++k)
      args += fmt::format("{}a{}{}[u]", k ? ", " : "", k, at);
    return op.recipe == Recipe::Cast || op.recipe == Recipe::Reshape
               ? args
               : fmt::format("{}({}{})", fn, args, extra);
  };
  if (vec && chunk > 1) {
    e.line("  for (long b0 = tid_x() * 4L; b0 < {}L; b0 += {} * 4L * {}) {{", n,
           kThreads, chunk);
    for (size_t k = 0; k < ins.size(); ++k)
      e.line("    float a{}[{}][4];", k, chunk);
    e.line("#pragma unroll");
    e.line("    for (int c = 0; c < {}; ++c) {{", chunk);
    e.line("      const long i0 = b0 + c * {} * 4L;", kThreads);
    e.line("      if (i0 >= {}L) continue;", n);
    for (size_t k = 0; k < ins.size(); ++k) {
      if (innerOk(ins[k]))
        e.line("      ld4({}, {}, a{}[c]);", ins[k].ptr,
               elementIndex(ins[k], y.shape, "row", "i0"), k);
      else
        e.line("      for (int u = 0; u < 4; ++u) a{}[c][u] = ld({}, {});", k,
               ins[k].ptr, elementIndex(ins[k], y.shape, "row", "(i0 + u)"));
      if (!wrap[k].empty())
        e.line("      for (int u = 0; u < 4; ++u) a{}[c][u] = {}(a{}[c][u]{});",
               k, wrap[k], k, wrapExtra[k]);
    }
    e.line("    }}");
    e.line("#pragma unroll");
    e.line("    for (int c = 0; c < {}; ++c) {{", chunk);
    e.line("      const long i0 = b0 + c * {} * 4L;", kThreads);
    e.line("      if (i0 >= {}L) continue;", n);
    e.line("      float r[4];");
    e.line("#pragma unroll");
    e.line("      for (int u = 0; u < 4; ++u) {{");
    e.line("        r[u] = {};", result("[c]"));
    e.line("      }}");
    e.line("      st4({}, {}, r);", y.ptr,
           elementIndex(y, y.shape, "row", "i0"));
    e.line("    }}");
    e.line("  }}");
    return;
  }
  if (vec) {
    e.line("  for (long i0 = tid_x() * 4L; i0 < {}L; i0 += {} * 4L) {{", n,
           kThreads);
    for (size_t k = 0; k < ins.size(); ++k) {
      e.line("    float a{}[4];", k);
      if (innerOk(ins[k]))
        e.line("    ld4({}, {}, a{});", ins[k].ptr,
               elementIndex(ins[k], y.shape, "row", "i0"), k);
      else
        e.line("    for (int u = 0; u < 4; ++u) a{}[u] = ld({}, {});", k,
               ins[k].ptr, elementIndex(ins[k], y.shape, "row", "(i0 + u)"));
      if (!wrap[k].empty())
        e.line("    for (int u = 0; u < 4; ++u) a{}[u] = {}(a{}[u]{});", k,
               wrap[k], k, wrapExtra[k]);
    }
    e.line("    float r[4];");
    e.line("#pragma unroll");
    e.line("    for (int u = 0; u < 4; ++u) {{");
    e.line("      r[u] = {};", result(""));
    e.line("    }}");
    e.line("    st4({}, {}, r);", y.ptr, elementIndex(y, y.shape, "row", "i0"));
    e.line("  }}");
    return;
  }
  loop(y.shape, [&] {
    std::string args;
    for (size_t i = 0; i < ins.size(); ++i) {
      std::string v = fmt::format("ld({}, {})", ins[i].ptr,
                                  elementIndex(ins[i], y.shape, "row", "i"));
      if (!wrap[i].empty())
        v = fmt::format("{}({}{})", wrap[i], v, wrapExtra[i]);
      args += fmt::format("{}{}", i ? ", " : "", v);
    }
    std::string v = op.recipe == Recipe::Cast || op.recipe == Recipe::Reshape
                        ? args
                        : fmt::format("{}({}{})", fn, args, extra);
    e.line("    st({}, {}, {});", y.ptr, elementIndex(y, y.shape, "row", "i"),
           v);
  });
}

void RowEmitter::op(const BodyOp &op) {
  switch (format::recipeInfo(op.recipe).cls) {
  case format::OpClass::Unary:
  case format::OpClass::Binary:
  case format::OpClass::View:
    return elementwise(op);
  default:
    break;
  }
  Tensor y = res(op);
  int64_t n = constProduct(y.shape, 1);
  switch (op.recipe) {
  case Recipe::RmsNorm:
  case Recipe::HcNorm: {
    Tensor x = in(op, 0);
    int64_t d = constProduct(x.shape, x.shape.size() - 1);
    int64_t gs = op.recipe == Recipe::RmsNorm ? d / e.intAttr(op, "groups") : d;
    auto [wn, w] = normWeight(op);
    // The loads in flight only where the option asks (1: the template's
    // default, the text of plans before the option); row-norm-block adds
    // the block form's flag where that form applies (row_rms_norm's test:
    // fewer groups than waves, whole vectors of every thread, at most 8).
    const bool block = option(e.plan, codegen::Opt::RowNormBlock) != 0 &&
                       n / gs < kThreads / 32 && gs % (kThreads * 4) == 0 &&
                       gs / (kThreads * 4) <= 8 && (wn == 0 || wn % 4 == 0);
    std::string extra =
        loads > 1 || block ? fmt::format(", {}", loads) : std::string();
    if (block)
      extra += ", true";
    e.line("  row_rms_norm<{}, {}, {}, {}{}>({}, {}, {}, {}, red);", n, gs,
           kThreads, wn, extra, rowPtr(x), w, rowPtr(y),
           floatLit(e.floatAttr(op, "eps")));
    break;
  }
  case Recipe::L2Norm: {
    Tensor x = in(op, 0);
    int64_t d = constProduct(x.shape, x.shape.size() - 1);
    e.line("  row_l2_norm<{}, {}, {}, {}>({}, {}, {});", n, d, kThreads,
           e.strAttr(op, "form") == "add", rowPtr(x), rowPtr(y),
           floatLit(e.floatAttr(op, "eps")));
    break;
  }
  case Recipe::Softmax: {
    Tensor x = in(op, 0);
    int64_t d = constProduct(x.shape, x.shape.size() - 1);
    e.line("  row_softmax<{}, {}, {}>({}, {});", n, d, kThreads, rowPtr(x),
           rowPtr(y));
    break;
  }
  case Recipe::Argmax: {
    Tensor x = in(op, 0);
    int64_t d = constProduct(x.shape, x.shape.size() - 1);
    // n rows of d values in the block's row ([T] ids: one logits row).
    // row-loads: the loop unrolled 4 x C (at most 16) turns, its loads
    // issued together.
    e.line("  row_argmax<{}, {}, {}{}>({}, {}, red, redi);", n, d, kThreads,
           loads > 1 ? fmt::format(", {}", std::min(16, 4 * loads)) : "",
           rowPtr(x), rowPtr(y));
    break;
  }
  case Recipe::Sinkhorn: {
    Tensor x = in(op, 0);
    int64_t m = constProduct(x.shape, x.shape.size() - 1);
    e.line("  row_sinkhorn<{}, {}, {}>({}, {}, {});", n, m, kThreads, rowPtr(x),
           rowPtr(y), e.intAttr(op, "iters"));
    break;
  }
  case Recipe::ReduceSum:
  case Recipe::ReduceMean: {
    Tensor x = in(op, 0);
    int64_t ax = e.intAttr(op, "axis");
    if (ax < 0)
      ax += static_cast<int64_t>(x.shape.size());
    if (ax <= 0)
      throw Unsupported("a reduction over the row dim");
    int64_t len = x.shape[ax].constant, inner = constProduct(x.shape, ax + 1);
    // reduce_mean divides the sum as it is stored.
    const std::string mean = op.recipe == Recipe::ReduceMean
                                 ? fmt::format(" / {}.0f", len)
                                 : std::string();
    if (inner == 1 && len >= 64) {
      // Over the last axis: a warp an output, its lanes striding the
      // contiguous values (a thread an output left all but a few threads
      // idle: the stream norms' sums of 4 x 2,560 took 66 us a row on the
      // H100).
      e.line("  for (long o = tid_x() >> 5; o < {}L; o += {}) {{",
             constProduct(y.shape, 1), kThreads / 32);
      e.line("    float s = 0;");
      // row-loads: a lane's loads C at a time, summed in their order.
      const int64_t chunk = std::min<int64_t>(loads, (len + 31) / 32);
      if (chunk > 1) {
        e.line("    for (long j0 = lane_id(); j0 < {}L; j0 += 32 * {}) {{", len,
               chunk);
        e.line("      float v[{}];", chunk);
        e.line("#pragma unroll");
        e.line("      for (int c = 0; c < {}; ++c)", chunk);
        e.line("        v[c] = j0 + 32 * c < {}L ? ld({}, o * {}L + j0 + 32 * "
               "c) : 0.0f;",
               len, rowPtr(x), len);
        e.line("#pragma unroll");
        e.line("      for (int c = 0; c < {}; ++c)", chunk);
        e.line("        if (j0 + 32 * c < {}L) s += v[c];", len);
        e.line("    }}");
      } else {
        e.line("    for (long j = lane_id(); j < {}L; j += 32) s += ld({}, o * "
               "{}L + j);",
               len, rowPtr(x), len);
      }
      e.line("    s = warp_sum(s);");
      e.line("    if (lane_id() == 0) st({}, o, s{});", rowPtr(y), mean);
      e.line("  }}");
      break;
    }
    loop(y.shape, [&] {
      e.line("    long o = i / {}L, c = i % {}L;", inner, inner);
      e.line("    float s = 0;");
      e.line("    for (long j = 0; j < {}L; ++j) s += ld({}, (o * {}L + j) * "
             "{}L + c);",
             len, rowPtr(x), len, inner);
      e.line("    st({}, i, s{});", rowPtr(y), mean);
    });
    break;
  }
  case Recipe::HcRead: {
    Tensor xn = in(op, 0), g = in(op, 1);
    int64_t s = xn.shape[1].constant, d = xn.shape[2].constant;
    if (d % 4 == 0) {
      // Four adjacent columns per thread, vector accesses.
      e.line("  for (long i0 = tid_x() * 4L; i0 < {}L; i0 += {} * 4L) {{", d,
             kThreads);
      e.line("    float a[4] = {{0, 0, 0, 0}};");
      e.line("    for (int s = 0; s < {}; ++s) {{", s);
      e.line("      float gv[4], xv[4];");
      e.line("      ld4({}, s * {}L + i0, gv);", rowPtr(g), d);
      e.line("      ld4({}, s * {}L + i0, xv);", rowPtr(xn), d);
      e.line("      for (int u = 0; u < 4; ++u) a[u] += gv[u] * xv[u];");
      e.line("    }}");
      e.line("    for (int u = 0; u < 4; ++u) a[u] = a[u] / {}.0f;", s);
      e.line("    st4({}, i0, a);", rowPtr(y));
      e.line("  }}");
      break;
    }
    loop(y.shape, [&] {
      e.line("    float a = 0;");
      e.line("    for (int s = 0; s < {}; ++s) a += ld({}, s * {}L + i) * "
             "ld({}, s * {}L + i);",
             s, rowPtr(g), d, rowPtr(xn), d);
      e.line("    st({}, i, a / {}.0f);", rowPtr(y), s);
    });
    break;
  }
  case Recipe::HcWrite: {
    Tensor r = in(op, 0), f = in(op, 1), lam = in(op, 2);
    int64_t d = r.shape[2].constant;
    if (d % 4 == 0) {
      e.line("  for (long i0 = tid_x() * 4L; i0 < {}L; i0 += {} * 4L) {{",
             constProduct(y.shape, 1), kThreads);
      e.line("    float rv[4], fv[4];");
      e.line("    ld4({}, i0, rv);", rowPtr(r));
      e.line("    ld4({}, i0 % {}L, fv);", rowPtr(f), d);
      e.line("    float l = ld({}, i0 / {}L);", rowPtr(lam), d);
      e.line("    for (int u = 0; u < 4; ++u) rv[u] = rv[u] + l * fv[u];");
      e.line("    st4({}, i0, rv);", rowPtr(y));
      e.line("  }}");
      break;
    }
    loop(y.shape, [&] {
      e.line("    st({}, i, ld({}, i) + ld({}, i / {}L) * ld({}, i % {}L));",
             rowPtr(y), rowPtr(r), rowPtr(lam), d, rowPtr(f), d);
    });
    break;
  }
  case Recipe::HcExpand: {
    Tensor x = in(op, 0);
    int64_t d = constProduct(x.shape, 1);
    if (d % 4 == 0) {
      e.line("  for (long i0 = tid_x() * 4L; i0 < {}L; i0 += {} * 4L) {{",
             constProduct(y.shape, 1), kThreads);
      e.line("    float v[4];");
      e.line("    ld4({}, i0 % {}L, v);", rowPtr(x), d);
      e.line("    st4({}, i0, v);", rowPtr(y));
      e.line("  }}");
      break;
    }
    loop(y.shape, [&] {
      e.line("    st({}, i, ld({}, i % {}L));", rowPtr(y), rowPtr(x), d);
    });
    break;
  }
  case Recipe::Rope: {
    Tensor x = in(op, 0), pos = in(op, 1);
    int64_t h = x.shape[1].constant, hd = x.shape[2].constant;
    int64_t nr = e.intAttr(op, "dims");
    std::string mode = e.strAttr(op, "mode");
    // theta_scale as the CPU computes it: powf(base, -2/n) in f32.
    float base = static_cast<float>(e.floatAttr(op, "base"));
    float scale = std::pow(base, -2.0f / static_cast<float>(nr));
    // row-rope-table: the pairs' sines and cosines once for all heads
    // (flag printed only where it applies: the text of one head unchanged).
    const bool table = option(e.plan, codegen::Opt::RowRopeTable) != 0 && h > 1;
    e.line("  row_rope<{}, {}, {}, {}, {}{}>({}, {}, {}[row], {});", h, hd, nr,
           mode == "neox", kThreads, table ? ", true" : "", rowPtr(x),
           rowPtr(y), pos.ptr, floatLit(scale));
    break;
  }
  case Recipe::MoeRoute: {
    Tensor x = in(op, 0);
    Tensor ids = res(op, 1);
    int64_t ne = constProduct(x.shape, 1), k = e.intAttr(op, "k");
    e.line("  {{ STRATA_SHARED float p[{}];", ne);
    e.line("  row_moe_route<{}, {}, {}, {}, {}>({}, {}, {}, p, red, redi); }}",
           ne, k, kThreads, e.strAttr(op, "func") == "softmax",
           e.boolAttr(op, "norm"), rowPtr(x), rowPtr(y), rowPtr(ids));
    break;
  }
  case Recipe::GetRows: {
    // ids [T] or [T, n...]: each row looks up nid table rows.
    Tensor table = in(op, 0), ids = in(op, 1);
    int64_t d = constProduct(table.shape, 1);
    int64_t nid = constProduct(ids.shape, 1);
    std::string id =
        fmt::format("(long){}[row * {}L + c / {}L]", ids.ptr, nid, d);
    if (table.quant()) {
      if (d % 8 != 0)
        throw Unsupported("a quantised table row that is not a multiple of 8");
      int64_t rowBytes = d / table.blockSize * table.blockBytes;
      e.line("  for (long c = tid_x() * 8; c < {}L; c += {} * 8) {{", nid * d,
             kThreads);
      e.line("    float v[8];");
      e.line("    long k = c % {}L;", d);
      e.line(
          "    strata_dq8_{}({} + {} * {}L + k / {} * {}, (int)(k % {}), v);",
          format::ggmlTypeInfo(table.ggml).irName, table.ptr, id, rowBytes,
          table.blockSize, table.blockBytes, table.blockSize);
      e.line("    for (int j = 0; j < 8; ++j) st({}, c + j, v[j]);", rowPtr(y));
      e.line("  }}");
    } else {
      std::string idI =
          fmt::format("(long){}[row * {}L + i / {}L]", ids.ptr, nid, d);
      loop(y.shape, [&] {
        e.line("    st({}, i, ld({}, {} * {}L + i % {}L));", rowPtr(y),
               table.ptr, idI, d, d);
      });
    }
    break;
  }
  case Recipe::Conv1dCausal: {
    Tensor x = in(op, 0), w = in(op, 1);
    if (x.isTemp)
      throw Unsupported("conv1d_causal over a temporary reads other rows");
    checkReadable(w);
    int64_t c = x.shape[1].constant, kw = w.shape[1].constant;
    int64_t dil = e.intAttr(op, "dilation");
    if (c % 4 == 0 && constProduct(y.shape, 1) == c) {
      // Four adjacent channels per thread: one vector load of each tap's
      // input row piece (and of the four taps' weights when there are four).
      e.line("  for (long i0 = tid_x() * 4L; i0 < {}L; i0 += {} * 4L) {{", c,
             kThreads);
      e.line("    float s[4] = {{0, 0, 0, 0}}, wv[4][{}];", kw);
      // The four channels' taps: 16-byte loads when there are four taps.
      e.line("    for (int u = 0; u < 4; ++u) {}",
             kw == 4
                 ? fmt::format("ld4({}, (i0 + u) * 4, wv[u]);", w.ptr)
                 : fmt::format("for (int j = 0; j < {}; ++j) wv[u][j] = ld({}, "
                               "(i0 + u) * {} + j);",
                               kw, w.ptr, kw));
      e.line("#pragma unroll");
      e.line("    for (int j = 0; j < {}; ++j) {{", kw);
      e.line("      long src = row - ({} - j) * {}L;", kw - 1, dil);
      e.line("      if (src < 0) continue;");
      e.line("      float xv[4];");
      e.line("      ld4({}, src * {}L + i0, xv);", x.ptr, c);
      e.line("#pragma unroll");
      e.line("      for (int u = 0; u < 4; ++u) s[u] += wv[u][j] * xv[u];");
      e.line("    }}");
      e.line("    st4({}, i0, s);", rowPtr(y));
      e.line("  }}");
      break;
    }
    loop(y.shape, [&] {
      e.line("    float s = 0;");
      e.line("    for (int j = 0; j < {}; ++j) {{", kw);
      e.line("      long src = row - ({} - j) * {}L;", kw - 1, dil);
      e.line("      if (src >= 0) s += ld({}, i * {} + j) * ld({}, src * {}L "
             "+ i);",
             w.ptr, kw, x.ptr, c);
      e.line("    }}");
      e.line("    st({}, i, s);", rowPtr(y));
    });
    break;
  }
  case Recipe::BlockMean: {
    Tensor x = in(op, 0);
    int64_t c = x.shape[1].constant, b = e.intAttr(op, "block");
    loop(y.shape, [&] {
      e.line("    float s = 0;");
      e.line("    for (int j = 0; j < {}; ++j) s += ld({}, (row * {}L + j) * "
             "{}L + i);",
             b, x.ptr, b, c);
      e.line("    st({}, i, s / {}.0f);", rowPtr(y), b);
    });
    break;
  }
  case Recipe::MoeCombine:
  case Recipe::MoeScatter: {
    bool scatter = op.recipe == Recipe::MoeScatter;
    size_t first = scatter ? 2 : 1;
    Tensor yv = in(op, 0), w = in(op, first);
    int64_t k = w.shape[1].constant, d = constProduct(y.shape, 1);
    bool shared = op.inputs.size() > first + 1;
    bool gate = op.inputs.size() > first + 2;
    std::string inv = scatter ? in(op, 1).ptr : "";
    std::string rowOf = scatter ? fmt::format("{}[row * {} + j]", inv, k)
                                : fmt::format("row * {} + j", k);
    if (d % 4 == 0) {
      // Four adjacent columns per thread: each of the k rows (and the
      // shared expert's) by one vector load, the sum in the scalar order.
      e.line("  for (long i0 = tid_x() * 4L; i0 < {}L; i0 += {} * 4L) {{", d,
             kThreads);
      e.line("    float a[4] = {{0.0f, 0.0f, 0.0f, 0.0f}};");
      e.line("#pragma unroll");
      e.line("    for (int j = 0; j < {}; ++j) {{", k);
      e.line("      long r = {};", rowOf);
      e.line("      float wj = ld({}, row * {} + j), v[4];", w.ptr, k);
      e.line("      ld4({}, r * {}L + i0, v);", yv.ptr, d);
      e.line("      for (int u = 0; u < 4; ++u) a[u] += wj * v[u];");
      e.line("    }}");
      if (shared) {
        e.line(
            "    {{ float g = {}, v[4];",
            gate ? fmt::format("sm_sigmoid(ld({}, row))", in(op, first + 2).ptr)
                 : "1.0f");
        e.line("    ld4({}, row * {}L + i0, v);", in(op, first + 1).ptr, d);
        e.line("    for (int u = 0; u < 4; ++u) a[u] += g * v[u]; }}");
      }
      e.line("    st4({}, i0, a);", rowPtr(y));
      e.line("  }}");
      break;
    }
    loop(y.shape, [&] {
      e.line("    float a = 0;");
      e.line("    for (int j = 0; j < {}; ++j) {{", k);
      e.line("      long r = {};", rowOf);
      e.line("      a += ld({}, row * {} + j) * ld({}, r * {}L + i);", w.ptr, k,
             yv.ptr, d);
      e.line("    }}");
      if (shared)
        e.line(
            "    a += {} * ld({}, row * {}L + i);",
            gate ? fmt::format("sm_sigmoid(ld({}, row))", in(op, first + 2).ptr)
                 : "1.0f",
            in(op, first + 1).ptr, d);
      e.line("    st({}, i, a);", rowPtr(y));
    });
    break;
  }
  case Recipe::Slice:
  case Recipe::Concat:
  case Recipe::Permute: {
    // Index maps of copies inside the row (never along the row dim).
    size_t rank = y.shape.size();
    auto strides = [&](const Shape &s) {
      std::vector<int64_t> st(s.size(), 1);
      for (size_t d = s.size(); d-- > 1;)
        st[d - 1] = st[d] * s[d].constant;
      return st;
    };
    std::vector<int64_t> ys = strides(y.shape);
    if (op.recipe == Recipe::Slice) {
      Tensor x = in(op, 0);
      int64_t ax = e.intAttr(op, "axis");
      if (ax < 0)
        ax += static_cast<int64_t>(rank);
      if (ax == 0)
        throw Unsupported("a slice along the row dim");
      std::vector<int64_t> xs = strides(x.shape);
      int64_t start = e.intAttr(op, "start");
      loop(y.shape, [&] {
        std::string src;
        for (size_t d = 1; d < rank; ++d)
          src += fmt::format(
              " + (i / {}L % {}L{}) * {}L", ys[d], y.shape[d].constant,
              (int64_t)d == ax ? fmt::format(" + {}L", start) : "", xs[d]);
        e.line("    st({}, i, ld({}, 0{}));", rowPtr(y),
               x.isTemp ? x.ptr : rowPtr(x), src);
      });
    } else if (op.recipe == Recipe::Permute) {
      Tensor x = in(op, 0);
      const std::vector<int64_t> &perm = e.attr(op, "perm").ints;
      if (perm.empty() || perm[0] != 0)
        throw Unsupported("a permute that moves the row dim");
      std::vector<int64_t> xs = strides(x.shape);
      loop(y.shape, [&] {
        std::string src;
        for (size_t d = 1; d < rank; ++d)
          src += fmt::format(" + (i / {}L % {}L) * {}L", ys[d],
                             y.shape[d].constant, xs[perm[d]]);
        e.line("    st({}, i, ld({}, 0{}));", rowPtr(y), rowPtr(x), src);
      });
    } else {
      int64_t ax = e.intAttr(op, "axis");
      if (ax < 0)
        ax += static_cast<int64_t>(rank);
      if (ax == 0)
        throw Unsupported("a concat along the row dim");
      int64_t inner = ys[ax], outer = y.shape[ax].constant;
      int64_t at = 0;
      for (size_t j = 0; j < op.inputs.size(); ++j) {
        Tensor x = in(op, j);
        int64_t len = x.shape[ax].constant;
        int64_t block = len * inner, total = constProduct(x.shape, 1);
        e.line("  for (long i = tid_x(); i < {}L; i += {}) {{", total,
               kThreads);
        e.line("    long o = i / {}L, r = i % {}L;", block, block);
        e.line("    st({}, o * {}L + {}L + r, ld({}, i));", rowPtr(y),
               outer * inner, at * inner, rowPtr(x));
        e.line("  }}");
        at += len;
      }
    }
    break;
  }
  case Recipe::Arange: {
    int64_t step = e.intAttr(op, "step");
    loop(y.shape, [&] {
      e.line("    {}[row * {}L + i] = (int32_t)(row * {}L);", y.ptr, n, step);
    });
    break;
  }
  case Recipe::LastRows: {
    Tensor x = in(op, 0);
    int64_t nr = e.intAttr(op, "n");
    loop(y.shape, [&] {
      e.line("    st({}, i, ld({}, (T - {}L + row) * {}L + i));", rowPtr(y),
             x.ptr, nr, n);
    });
    break;
  }
  case Recipe::QsaSelect: {
    Tensor q = in(op, 0), kb = in(op, 1);
    int64_t hi = q.shape[1].constant, di = q.shape[2].constant;
    int64_t block = e.intAttr(op, "block"), top = e.intAttr(op, "top");
    float inv = 1.0f / std::sqrt(static_cast<float>(di));
    if (qsa.allIds())
      e.line("  row_qsa_select<{}, {}, {}, {}, {}, {}>({}, {}, {}, row, T, {}, "
             "qsa_score, qsa_id, qsa_q);",
             hi, di, block, top, kThreads, qsa.blocks, rowPtr(q), kb.ptr,
             rowPtr(y), floatLit(inv));
    else
      e.line("  row_qsa_select<{}, {}, {}, {}, {}, {}, {}>({}, {}, {}, row, T, "
             "{}, qsa_score, qsa_id, qsa_q);",
             hi, di, block, top, kThreads, qsa.blocks, qsa.ids, rowPtr(q),
             kb.ptr, rowPtr(y), floatLit(inv));
    break;
  }
  case Recipe::NgramHash: {
    Tensor tok = in(op, 0);
    int64_t nn = e.intAttr(op, "n"), heads = e.intAttr(op, "heads");
    const std::vector<int64_t> &mults = e.attr(op, "mults").ints;
    const std::vector<int64_t> &sizes = e.attr(op, "sizes").ints;
    const std::vector<int64_t> &offs = e.attr(op, "offsets").ints;
    auto list = [](const std::vector<int64_t> &v) {
      std::string s;
      for (int64_t x : v)
        s += fmt::format("{}{}L", s.empty() ? "" : ", ", x);
      return s;
    };
    e.line("  if (tid_x() == 0) {{");
    e.line("    const long mults[{}] = {{{}}};", mults.size(), list(mults));
    e.line("    const long sizes[{}] = {{{}}};", sizes.size(), list(sizes));
    e.line("    const long offs[{}] = {{{}}};", offs.size(), list(offs));
    e.line("    ngram_hash_row<{}, {}>({}, row, {}L, mults, sizes, offs, {});",
           nn, heads, tok.ptr, e.intAttr(op, "eos"), rowPtr(y));
    e.line("  }}");
    break;
  }
  default:
    throw Unsupported(fmt::format("no row-family code for '{}'",
                                  format::recipeInfo(op.recipe).name));
  }
}

bool RowEmitter::writeNorm(const BodyOp &write, const BodyOp &norm) {
  if (write.recipe != Recipe::HcWrite ||
      (norm.recipe != Recipe::RmsNorm && norm.recipe != Recipe::HcNorm) ||
      norm.inputs[0].kind != write.outputs[0].kind ||
      norm.inputs[0].index != write.outputs[0].index ||
      !norm.inputs[0].view.empty() || !write.outputs[0].view.empty())
    return false;
  Tensor r = in(write, 0), f = in(write, 1), lam = in(write, 2);
  Tensor ro = res(write), y = res(norm);
  int64_t s = r.shape[1].constant, d = r.shape[2].constant, n = s * d;
  // Per-stream groups (an rms_norm of `groups` streams, or hc_norm's).
  int64_t gs = norm.recipe == Recipe::RmsNorm
                   ? constProduct(ro.shape, ro.shape.size() - 1) /
                         e.intAttr(norm, "groups")
                   : constProduct(ro.shape, ro.shape.size() - 1);
  if (gs != d || constProduct(ro.shape, 1) != n || d % 4 != 0 ||
      n % (kThreads * 4) != 0 || n / (kThreads * 4) > 16 ||
      kThreads / 32 * s > 32)
    return false;
  auto [wn, w] = normWeight(norm);
  if (wn % 4 != 0)
    return false;
  e.line(
      "  row_hc_write_norm<{}, {}, {}, {}>({}, {}, {}, {}, {}, {}, {}, red);",
      s, d, kThreads, wn, rowPtr(r), rowPtr(f), rowPtr(lam), w, rowPtr(ro),
      rowPtr(y), floatLit(e.floatAttr(norm, "eps")));
  return true;
}

bool RowEmitter::scatterAddNorm(const BodyOp &scatter, const BodyOp &add,
                                const BodyOp &norm) {
  using K = BodyRef::Kind;
  auto same = [](const BodyRef &a, const BodyRef &b) {
    return a.kind == b.kind && a.index == b.index && a.view.empty() &&
           b.view.empty();
  };
  if (option(e.plan, codegen::Opt::RowScatterNorm) == 0 ||
      scatter.recipe != Recipe::MoeScatter || scatter.inputs.size() != 3 ||
      add.recipe != Recipe::Add || norm.recipe != Recipe::RmsNorm ||
      scatter.outputs[0].kind != K::Tmp || !scatter.outputs[0].view.empty() ||
      add.outputs[0].kind != K::Out || !same(norm.inputs[0], add.outputs[0]) ||
      !norm.outputs[0].view.empty() || e.intAttr(norm, "groups") != 1)
    return false;
  // The add reads the scatter's sum and the residual; nothing else reads
  // the sum (it lives in registers only).
  const BodyRef &f = scatter.outputs[0];
  const int fi = same(add.inputs[0], f) ? 0 : same(add.inputs[1], f) ? 1 : -1;
  if (fi < 0 || add.inputs[1 - fi].kind == K::Tmp)
    return false;
  int reads = 0;
  for (const BodyOp &op : e.body)
    for (const BodyRef &r : op.inputs)
      reads += r.kind == K::Tmp && r.index == f.index ? 1 : 0;
  if (reads != 1)
    return false;
  Tensor x = in(scatter, 0), slots = in(scatter, 1), wt = in(scatter, 2);
  Tensor h = in(add, 1 - fi), ro = res(add), y = res(norm);
  const int64_t n = constProduct(ro.shape, 1), k = wt.shape[1].constant;
  if (ro.ctype != "float" || n % 4 != 0 ||
      (n + kThreads * 4 - 1) / (kThreads * 4) > 8 ||
      constProduct(x.shape, 1) != n || constProduct(h.shape, 1) != n ||
      constProduct(y.shape, 1) != n || x.quant() || h.quant())
    return false;
  auto [wn, w] = normWeight(norm);
  if (wn % 4 != 0)
    return false;
  e.line("  row_scatter_add_norm<{}, {}, {}, {}>({}, {} + row * {}, {} + row "
         "* {}, {}, {}, {}, {}, {}, red);",
         k, n, kThreads, wn, x.ptr, slots.ptr, k, wt.ptr, k, rowPtr(h), w,
         rowPtr(ro), rowPtr(y), floatLit(e.floatAttr(norm, "eps")));
  return true;
}

int64_t RowEmitter::convChannels() {
  const BodyOp &conv = e.body[0];
  if (conv.recipe != Recipe::Conv1dCausal || e.body.size() > 2)
    return 0;
  Tensor x = in(conv, 0), y = res(conv, 0);
  if (e.body.size() == 2) {
    const BodyOp &act = e.body[1];
    const BodyRef &a = act.inputs[0], &r = conv.outputs[0];
    if (act.recipe != Recipe::Silu || a.kind != r.kind || a.index != r.index ||
        !a.view.empty() || !y.isTemp)
      return 0;
    y = res(act, 0);
  }
  int64_t c = x.shape.size() == 2 ? x.shape[1].constant : 0;
  if (x.isTemp || y.isTemp || c % 4 != 0 || c == 0 ||
      constProduct(y.shape, 1) != c || !(x.shape[0] == rowShape[0]))
    return 0;
  return c;
}

void RowEmitter::convRows(const RowForm &form) {
  const BodyOp &conv = e.body[0];
  Tensor x = in(conv, 0), w = in(conv, 1),
         y = res(e.body.size() == 2 ? e.body[1] : conv, 0);
  const bool silu = e.body.size() == 2;
  const int64_t c = x.shape[1].constant;
  checkReadable(w);
  std::string params = e.params();
  e.line("STRATA_KERNEL({}) void @SYMBOL@({}) {{", kThreads, params);
  e.prologue();
  e.line("  conv1d_rows<{}, {}, {}, {}, {}, {}>({}, {}, {}, {});", c,
         w.shape[1].constant, e.intAttr(conv, "dilation"), form.rowsPerBlock,
         kThreads, silu, x.ptr, w.ptr, y.ptr, dimExpr(rowShape[0]));
  e.line("}}");
  e.out.grid = {{0, (c + form.channelsPerBlock - 1) / form.channelsPerBlock, 1},
                rowGroups(rowShape[0], form.rowsPerBlock),
                {0, 1, 1}};
  e.out.block = {kThreads, 1, 1};
}

void RowEmitter::run() {
  loads = static_cast<int>(option(e.plan, codegen::Opt::RowLoads));
  Tensor y0 = e.tensor({format::BodyRef::Kind::Out, 0, {}});
  rowShape = y0.shape;
  if (rowShape.empty())
    rowShape.push_back({0, 1, 1});
  // The form (RowForm.h): conv1d_causal (+ silu) as blocks of rows x
  // channels, else a block a row.
  RowProblem rp;
  rp.threads = kThreads;
  rp.channels = convChannels();
  rp.convBody = rp.channels > 0;
  for (const BodyOp &op : e.body) {
    if (op.recipe == Recipe::QsaSelect) {
      Tensor q = e.tensor(op.inputs[0]);
      QsaSelectProblem p;
      p.maxTokens = e.plan.maxTokens;
      p.block = e.intAttr(op, "block");
      p.heads = q.shape[1].constant;
      p.dims = q.shape[2].constant;
      p.top = e.intAttr(op, "top");
      p.threads = kThreads;
      rp.qsa = p;
    }
    if (op.recipe == Recipe::MoeRoute)
      rp.routeExperts.push_back(constProduct(e.tensor(op.inputs[0]).shape, 1));
  }
  if (!rp.convBody) {
    findInlined();
    for (uint32_t j = 0; j < e.kernel.temps.size(); ++j) {
      const format::BodyTemp &t = e.kernel.temps[j];
      if (inlined.count(j))
        continue; // never stored
      if (t.shape.empty() || !(t.shape[0] == rowShape[0]))
        throw Unsupported("a temporary is not aligned with the row");
      if (t.dtype != format::DType::F32 && t.dtype != format::DType::I32 &&
          t.dtype != format::DType::BF16 && t.dtype != format::DType::F16)
        throw Unsupported(fmt::format("a {} temporary (f32, bf16, f16 and "
                                      "i32 are generated)",
                                      format::planDTypeName(t.dtype)));
      rp.tempBytes += static_cast<int64_t>(format::planDTypeSize(t.dtype)) *
                      constProduct(t.shape, 1);
    }
  }
  const RowForm form = selectRow(rp);
  if (form.kind == RowForm::Kind::ConvRows)
    return convRows(form);
  qsa = form.qsa;
  const uint64_t fixed = static_cast<uint64_t>(form.fixedBytes);
  if (!form.fits) {
    std::string hint;
    if (qsa.blocks > 0)
      hint = fmt::format(
          " (qsa_select's scores of {} blocks; plans of at most {} tokens "
          "fit: --max-tokens)",
          qsa.blocks,
          qsa.longestFitting(int64_t(fixed) - qsa.sharedBytes(),
                             staticSharedBudget()));
    throw Unsupported(
        fmt::format("the row needs {} bytes of LDS{}", fixed, hint));
  }
  e.workspace = form.tempsInWorkspace;
  std::string params = e.params();
  e.line("STRATA_KERNEL({}) void @SYMBOL@({}) {{", kThreads, params);
  e.prologue();
  e.line("  const long row = bid_x();");
  e.line("  if (row >= {}) return;", dimExpr(rowShape[0]));
  e.line("  STRATA_SHARED float red[32];");
  e.line("  STRATA_SHARED int redi[32];");
  e.line("  (void)red; (void)redi;");
  if (e.workspace)
    e.line("  long wsoff = 0;");
  for (uint32_t j = 0; j < e.kernel.temps.size(); ++j) {
    const format::BodyTemp &t = e.kernel.temps[j];
    if (inlined.count(j))
      continue;
    int64_t n = constProduct(t.shape, 1);
    const char *type = elementCType(t.dtype);
    if (!e.workspace) {
      // 16-byte aligned: vector accesses read and write temporaries.
      e.line("  STRATA_SHARED __attribute__((aligned(16))) {} tmp{}[{}];", type,
             j, n);
      continue;
    }
    // PlanKernel::workspaceBytes' layout: each temporary 256-byte aligned.
    e.line("  {} *tmp{} = ({} *)(ws + wsoff) + row * {}L;", type, j, type, n);
    e.line("  wsoff += ({} * {}L * {} + 255) / 256 * 256;", dimExpr(t.shape[0]),
           n, format::planDTypeSize(t.dtype));
  }
  if (qsa.blocks) {
    e.line("  STRATA_SHARED float qsa_score[{}];", qsa.blocks);
    e.line("  STRATA_SHARED int qsa_id[{}];", qsa.ids);
    e.line("  STRATA_SHARED float qsa_q[{}];", qsa.query);
  }
  // row-chains: independent chains of the body (fuse-rows' side-by-side
  // pairs) run in blocks of their own (grid y), not one after the other.
  std::vector<std::vector<size_t>> chains =
      option(e.plan, codegen::Opt::RowChains) != 0 && !qsa.blocks &&
              !e.workspace
          ? bodyChains()
          : std::vector<std::vector<size_t>>{};
  if (chains.size() < 2) {
    chains.assign(1, {});
    for (size_t i = 0; i < e.body.size(); ++i)
      chains[0].push_back(i);
  }
  for (size_t c = 0; c < chains.size(); ++c) {
    if (chains.size() > 1)
      e.line("  if (bid_y() == {}) {{", c);
    const std::vector<size_t> &ops = chains[c];
    for (size_t n = 0; n < ops.size(); ++n) {
      const BodyOp &b = e.body[ops[n]];
      if (b.outputs.size() == 1 && b.outputs[0].kind == BodyRef::Kind::Tmp &&
          inlined.count(b.outputs[0].index) &&
          inlined[b.outputs[0].index] == &b)
        continue;
      if (n + 1 < ops.size() && writeNorm(b, e.body[ops[n + 1]]))
        ++n;
      else if (n + 2 < ops.size() &&
               scatterAddNorm(b, e.body[ops[n + 1]], e.body[ops[n + 2]]))
        n += 2;
      else
        this->op(b);
      e.line("  sync_block();");
    }
    if (chains.size() > 1)
      e.line("  }}");
  }
  e.line("}}");
  e.out.grid = {
      rowShape[0], {0, static_cast<int64_t>(chains.size()), 1}, {0, 1, 1}};
  e.out.block = {kThreads, 1, 1};
}

} // namespace

void emitRowKernel(Emitter &e) { RowEmitter(e).run(); }

} // namespace strata::codegen::detail
