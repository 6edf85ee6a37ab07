//===- CpuKernel.cpp - operand access, attributes, threads ----------------===//
#include "runtime/cpu/CpuKernel.h"

#include "runtime/Elements.h"
#include "runtime/format/Quants.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <map>
#include <thread>

namespace strata::runtime::cpu {

using format::GgmlType;
using format::PlanAttr;
using format::PlanDType;

void fail(const std::string &what) { throw KernelError(what); }

std::string shapeStr(const std::vector<int64_t> &shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

//===----------------------------------------------------------------------===//
// RowReader
//===----------------------------------------------------------------------===//

RowReader::RowReader(const TensorArg &arg)
    : base_(static_cast<const uint8_t *>(arg.data)), isWeight_(arg.isWeight),
      weightType_(arg.weightType), dtype_(arg.dtype) {
  rowLength_ = arg.shape.empty() ? 1 : arg.shape.back();
  numRows_ = rowLength_ == 0 ? 0 : arg.numElements() / rowLength_;
  // KernelCtx has checked that the type is readable and K a block multiple.
  rowBytes_ = isWeight_ ? static_cast<uint64_t>(
                              format::rowSizeInBytes(weightType_, rowLength_))
                        : rowLength_ * format::planDTypeSize(dtype_);
}

void RowReader::read(int64_t r, float *dst) const {
  const uint8_t *src = base_ + r * rowBytes_;
  if (isWeight_)
    format::dequantizeRow(weightType_, src, dst, rowLength_);
  else
    convertElements(dtype_, src, PlanDType::F32, dst, rowLength_);
}

const float *RowReader::get(int64_t r, float *scratch) const {
  if (!isWeight_ && dtype_ == PlanDType::F32)
    return reinterpret_cast<const float *>(base_ + r * rowBytes_);
  if (isWeight_ && weightType_ == GgmlType::F32)
    return reinterpret_cast<const float *>(base_ + r * rowBytes_);
  read(r, scratch);
  return scratch;
}

//===----------------------------------------------------------------------===//
// KernelCtx
//===----------------------------------------------------------------------===//

namespace {

/// Elements of \p shape, or -1 if a dim is negative or the count is absurd.
int64_t checkedCount(const std::vector<int64_t> &shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0)
      return -1;
    if (d != 0 && n > (int64_t(1) << 50) / d)
      return -1;
    n *= d;
  }
  return n;
}

void checkOperand(const TensorArg &a, const std::string &desc) {
  int64_t n = checkedCount(a.shape);
  if (n < 0)
    fail(fmt::format("{} has an invalid shape", desc));
  if (n > 0 && !a.data)
    fail(fmt::format("{} has no data", desc));
  if (!a.isWeight) {
    uint64_t need = static_cast<uint64_t>(n) * format::planDTypeSize(a.dtype);
    if (need > a.bytes)
      fail(fmt::format("{} needs {} bytes, only {} are addressable", desc, need,
                       a.bytes));
    return;
  }
  format::GgmlTypeInfo ti = format::ggmlTypeInfo(a.weightType);
  if (!format::canDequantize(a.weightType))
    fail(fmt::format("{} has type {}, which the cpu backend cannot read", desc,
                     ti.name));
  if (a.shape.empty())
    fail(fmt::format("{} is a weight of rank 0", desc));
  int64_t k = a.shape.back();
  int64_t rowBytes = format::rowSizeInBytes(a.weightType, k);
  if (rowBytes < 0 || (k == 0 && n != 0))
    fail(fmt::format("{} has rows of {} elements, not a multiple of the {} "
                     "block size {}",
                     desc, k, ti.name, ti.blockSize));
  uint64_t rows = k == 0 ? 0 : static_cast<uint64_t>(n / k);
  if (rows * static_cast<uint64_t>(rowBytes) > a.bytes)
    fail(fmt::format("{} needs {} bytes of {} data, the tensor has {}", desc,
                     rows * rowBytes, ti.name, a.bytes));
}

} // namespace

KernelCtx::KernelCtx(const Launch &launch, int threads)
    : launch_(launch), threads_(threads < 1 ? 1 : threads) {
  if (static_cast<size_t>(launch.recipe) >= format::allRecipes().size())
    fail("unknown recipe");
  const format::RecipeInfo &ri = format::recipeInfo(launch.recipe);
  if (!format::arityAccepts(ri, launch.inputs.size()) ||
      static_cast<int>(launch.outputs.size()) != format::planOutputs(ri))
    fail(fmt::format("takes {}..{} inputs and {} outputs, got {} and {}",
                     ri.minInputs, ri.maxInputs, format::planOutputs(ri),
                     launch.inputs.size(), launch.outputs.size()));
  for (size_t i = 0; i < launch.inputs.size(); ++i)
    checkOperand(launch.inputs[i], describeIn(i));
  for (size_t o = 0; o < launch.outputs.size(); ++o) {
    if (launch.outputs[o].isWeight)
      fail(fmt::format("{} is a weight; outputs are buffers", describeOut(o)));
    checkOperand(launch.outputs[o], describeOut(o));
  }
}

const char *KernelCtx::recipeName() const {
  return format::recipeInfo(launch_.recipe).name;
}

/// The default of every optional attribute that has one in the op table,
/// parsed once: the kernels' defaults are the table's, not their own.
static const PlanAttr *schemaDefault(format::Recipe r, const std::string &n) {
  static const std::map<std::pair<format::Recipe, std::string>, PlanAttr>
      kDefaults = [] {
        std::map<std::pair<format::Recipe, std::string>, PlanAttr> all;
        for (const format::RecipeInfo &ri : format::allRecipes())
          for (const format::AttrSpec &s : format::attrSchema(ri.id)) {
            if (!s.dflt)
              continue;
            PlanAttr a;
            if (s.kind == "int") {
              a.kind = PlanAttr::Kind::Int;
              a.i = std::stoll(*s.dflt);
            } else if (s.kind == "float") {
              a.kind = PlanAttr::Kind::Float;
              a.f = std::stod(*s.dflt);
            } else if (s.kind == "bool") {
              a.kind = PlanAttr::Kind::Bool;
              a.b = *s.dflt == "true";
            } else {
              a.kind = PlanAttr::Kind::Str;
              a.s = *s.dflt;
            }
            all[{ri.id, s.name}] = a;
          }
        return all;
      }();
  auto it = kDefaults.find({r, n});
  return it == kDefaults.end() ? nullptr : &it->second;
}

const PlanAttr *KernelCtx::findAttr(const AttrMap *attrs,
                                    const std::string &n) const {
  if (attrs) {
    auto it = attrs->find(n);
    if (it != attrs->end())
      return &it->second;
  }
  return schemaDefault(launch_.recipe, n);
}

bool KernelCtx::hasAttr(const std::string &name) const {
  return findAttr(launch_.attrs, name) != nullptr;
}

int64_t KernelCtx::intAttr(const std::string &name) const {
  const PlanAttr *a = findAttr(launch_.attrs, name);
  if (!a)
    fail(fmt::format("missing attribute '{}'", name));
  if (a->kind != PlanAttr::Kind::Int)
    fail(fmt::format("attribute '{}' must be an integer", name));
  // Launches built in code bypass the plan validator: bound them here too.
  const format::AttrSpec *spec = format::findAttrSpec(launch_.recipe, name);
  if (spec && !spec->inRange(a->i))
    fail(fmt::format("attribute '{}' = {} must lie in {}", name, a->i,
                     spec->rangeStr()));
  return a->i;
}

int64_t KernelCtx::intAttr(const std::string &name, int64_t dflt) const {
  return hasAttr(name) ? intAttr(name) : dflt;
}

float KernelCtx::floatAttr(const std::string &name) const {
  const PlanAttr *a = findAttr(launch_.attrs, name);
  if (!a)
    fail(fmt::format("missing attribute '{}'", name));
  if (a->kind == PlanAttr::Kind::Float)
    return static_cast<float>(a->f);
  if (a->kind == PlanAttr::Kind::Int)
    return static_cast<float>(a->i);
  fail(fmt::format("attribute '{}' must be a number", name));
}

float KernelCtx::floatAttr(const std::string &name, float dflt) const {
  return hasAttr(name) ? floatAttr(name) : dflt;
}

bool KernelCtx::boolAttr(const std::string &name) const {
  if (!hasAttr(name))
    fail(fmt::format("missing attribute '{}'", name));
  return boolAttr(name, false);
}

bool KernelCtx::boolAttr(const std::string &name, bool dflt) const {
  const PlanAttr *a = findAttr(launch_.attrs, name);
  if (!a)
    return dflt;
  if (a->kind == PlanAttr::Kind::Bool)
    return a->b;
  if (a->kind == PlanAttr::Kind::Int && (a->i == 0 || a->i == 1))
    return a->i == 1;
  fail(fmt::format("attribute '{}' must be a bool", name));
}

std::string KernelCtx::strAttr(const std::string &name) const {
  const PlanAttr *a = findAttr(launch_.attrs, name);
  if (!a)
    fail(fmt::format("missing attribute '{}'", name));
  if (a->kind != PlanAttr::Kind::Str)
    fail(fmt::format("attribute '{}' must be a string", name));
  return a->s;
}

std::string KernelCtx::strAttr(const std::string &name,
                               const std::string &dflt) const {
  return hasAttr(name) ? strAttr(name) : dflt;
}

std::vector<int64_t> KernelCtx::intsAttr(const std::string &name) const {
  const PlanAttr *a = findAttr(launch_.attrs, name);
  if (!a)
    fail(fmt::format("missing attribute '{}'", name));
  if (a->kind == PlanAttr::Kind::Ints) {
    const format::AttrSpec *spec = format::findAttrSpec(launch_.recipe, name);
    for (int64_t v : a->ints)
      if (spec && !spec->inRange(v))
        fail(fmt::format("attribute '{}' holds {}, outside {}", name, v,
                         spec->rangeStr()));
    return a->ints;
  }
  if (a->kind == PlanAttr::Kind::Floats && a->floats.empty())
    return {};
  fail(fmt::format("attribute '{}' must be a list of integers", name));
}

std::string KernelCtx::describeIn(size_t i) const {
  const TensorArg &a = in(i);
  return fmt::format("input {} '{}' {}", i, a.name, shapeStr(a.shape));
}

std::string KernelCtx::describeOut(size_t o) const {
  const TensorArg &a = out(o);
  return fmt::format("output {} '{}' {}", o, a.name, shapeStr(a.shape));
}

void KernelCtx::expectInRank(size_t i, size_t rank, const char *what) const {
  if (inShape(i).size() != rank)
    fail(fmt::format("{} must be {} (rank {})", describeIn(i), what, rank));
}

void KernelCtx::expectOutShape(size_t o,
                               const std::vector<int64_t> &want) const {
  if (outShape(o) != want)
    fail(fmt::format("{} should be {} from the inputs", describeOut(o),
                     shapeStr(want)));
}

int64_t KernelCtx::axis(int64_t axis, size_t rank) const {
  int64_t r = static_cast<int64_t>(rank);
  if (axis < -r || axis >= r)
    fail(fmt::format("axis {} is out of range for rank {}", axis, rank));
  return axis < 0 ? axis + r : axis;
}

uint8_t *KernelCtx::scratch(uint64_t bytes) {
  scratch_.emplace_back((bytes + 7) / 8);
  return reinterpret_cast<uint8_t *>(scratch_.back().data());
}

const float *KernelCtx::f32(size_t i) {
  const TensorArg &a = in(i);
  int64_t n = a.numElements();
  if (!a.isWeight && a.dtype == PlanDType::F32)
    return static_cast<const float *>(a.data);
  float *dst = reinterpret_cast<float *>(scratch(n * sizeof(float)));
  if (!a.isWeight) {
    convertElements(a.dtype, a.data, PlanDType::F32, dst, n);
    return dst;
  }
  RowReader rows(a);
  for (int64_t r = 0; r < rows.numRows(); ++r)
    rows.read(r, dst + r * rows.rowLength());
  return dst;
}

const int32_t *KernelCtx::i32(size_t i) {
  const TensorArg &a = in(i);
  if (a.isWeight || (a.dtype != PlanDType::I32 && a.dtype != PlanDType::I64))
    fail(fmt::format("{} must be an i32 buffer of indices", describeIn(i)));
  return reinterpret_cast<const int32_t *>(raw(i, PlanDType::I32));
}

const uint8_t *KernelCtx::raw(size_t i, PlanDType type) {
  const TensorArg &a = in(i);
  if (!a.isWeight && a.dtype == type)
    return static_cast<const uint8_t *>(a.data);
  int64_t n = a.numElements();
  uint8_t *dst = scratch(n * format::planDTypeSize(type));
  if (a.isWeight)
    convertElements(PlanDType::F32, f32(i), type, dst, n);
  else
    convertElements(a.dtype, a.data, type, dst, n);
  return dst;
}

void *KernelCtx::outRaw(size_t o, PlanDType type) {
  const TensorArg &a = out(o);
  for (const Staged &s : staged_)
    if (s.output == o && s.type == type)
      return s.data;
  if (isFloatType(type) != isFloatType(a.dtype))
    fail(fmt::format("{} is {}, but the recipe writes {}", describeOut(o),
                     format::planDTypeName(a.dtype),
                     format::planDTypeName(type)));
  int64_t n = a.numElements();
  // Stage when any buffer input shares bytes with this output: the kernels
  // read inputs after they start writing.
  const uint8_t *lo = static_cast<const uint8_t *>(a.data);
  const uint8_t *hi = lo + n * format::planDTypeSize(a.dtype);
  bool overlaps = false;
  for (const TensorArg &b : launch_.inputs) {
    if (b.isWeight)
      continue;
    const uint8_t *blo = static_cast<const uint8_t *>(b.data);
    const uint8_t *bhi = blo + b.numElements() * format::planDTypeSize(b.dtype);
    overlaps |= blo < hi && lo < bhi;
  }
  if (type == a.dtype && !overlaps)
    return a.data;
  uint8_t *data = scratch(n * format::planDTypeSize(type));
  staged_.push_back({o, type, data});
  return data;
}

void KernelCtx::commit() {
  for (const Staged &s : staged_) {
    const TensorArg &a = out(s.output);
    convertElements(s.type, s.data, a.dtype, a.data, a.numElements());
  }
  staged_.clear();
}

//===----------------------------------------------------------------------===//
// Threads and dot products
//===----------------------------------------------------------------------===//

void onWorkers(int threads, int64_t items, int64_t work,
               const std::function<void(int, int)> &fn) {
  int n =
      items < 2 || work < (int64_t(1) << 16)
          ? 1
          : static_cast<int>(std::min<int64_t>(std::max(threads, 1), items));
  if (n == 1) {
    fn(0, 1);
    return;
  }
  // Workers 1..n-1 on their own threads, worker 0 on this one. Each worker
  // owns whole output items, so results do not depend on n.
  std::vector<std::exception_ptr> errors(n);
  std::vector<std::thread> pool;
  for (int w = 1; w < n; ++w) {
    try {
      pool.emplace_back([&, w] {
        try {
          fn(w, n);
        } catch (...) {
          errors[w] = std::current_exception();
        }
      });
    } catch (const std::system_error &) {
      // No more threads to be had: this thread takes worker w's share.
      try {
        fn(w, n);
      } catch (...) {
        errors[w] = std::current_exception();
      }
    }
  }
  try {
    fn(0, n);
  } catch (...) {
    errors[0] = std::current_exception();
  }
  for (std::thread &t : pool)
    t.join();
  for (const std::exception_ptr &e : errors)
    if (e)
      std::rethrow_exception(e);
}

float dotF32(const float *a, const float *b, int64_t n) {
  float s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t k = 0;
  for (; k + 8 <= n; k += 8)
    for (int l = 0; l < 8; ++l)
      s[l] += a[k + l] * b[k + l];
  float sum = ((s[0] + s[4]) + (s[2] + s[6])) + ((s[1] + s[5]) + (s[3] + s[7]));
  for (; k < n; ++k)
    sum += a[k] * b[k];
  return sum;
}

} // namespace strata::runtime::cpu
