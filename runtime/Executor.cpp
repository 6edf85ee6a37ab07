//===- Executor.cpp - run a compiled plan on a device ---------------------===//
#include "runtime/Executor.h"

#include "runtime/Elements.h"
#include "runtime/format/Gguf.h"

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <optional>

namespace strata::runtime {

using format::Plan;
using format::PlanBuffer;
using format::PlanDType;
using format::PlanOperand;

namespace {

/// Structural checks for plans that did not come through planFromJson (built
/// in code); cheap, so every plan gets them.
bool validatePlan(const Plan &p, std::string &error) {
  if (p.maxTokens < 1) {
    error = fmt::format("plan: max_tokens is {}, expected >= 1", p.maxTokens);
    return false;
  }
  for (size_t i = 0; i < p.buffers.size(); ++i) {
    const PlanBuffer &b = p.buffers[i];
    unsigned __int128 elems = 1;
    for (const format::PlanDim &d : b.shape) {
      if (d.coef < 0 || d.constant < 0 || d.div < 1 ||
          d.at(p.maxTokens) < (d.div > 1 ? 0 : 1) ||
          elems > (static_cast<unsigned __int128>(1) << 62)) {
        error =
            fmt::format("plan: buffer {} '{}' has an invalid shape", i, b.name);
        return false;
      }
      elems *= static_cast<unsigned __int128>(d.at(p.maxTokens));
    }
    unsigned __int128 need = elems * format::planDTypeSize(b.dtype);
    if (need > b.bytes || b.offset > p.arenaBytes ||
        b.bytes > p.arenaBytes - b.offset) {
      error = fmt::format("plan: buffer {} '{}' ({} bytes at offset {}) does "
                          "not fit its shape or the arena of {} bytes",
                          i, b.name, b.bytes, b.offset, p.arenaBytes);
      return false;
    }
  }
  for (const format::PlanWeight &w : p.weights)
    if (w.dims.empty() || w.dims.size() > 4) {
      error = fmt::format("plan: weight '{}' has {} dims, expected 1..4",
                          w.name, w.dims.size());
      return false;
    }
  for (size_t k = 0; k < p.kernels.size(); ++k) {
    const format::PlanKernel &pk = p.kernels[k];
    if (static_cast<size_t>(pk.recipe) >= format::allRecipes().size()) {
      error = fmt::format("plan: kernel {} has an unknown recipe", k);
      return false;
    }
    const format::RecipeInfo &ri = format::recipeInfo(pk.recipe);
    int nin = static_cast<int>(pk.inputs.size());
    if (nin < ri.minInputs || nin > ri.maxInputs ||
        static_cast<int>(pk.outputs.size()) != ri.numOutputs) {
      error = fmt::format("plan: kernel {} ({}) takes {}..{} inputs and {} "
                          "outputs, got {} and {}",
                          k, ri.name, ri.minInputs, ri.maxInputs, ri.numOutputs,
                          nin, pk.outputs.size());
      return false;
    }
    for (const PlanOperand &o : pk.inputs)
      if (o.index >= (o.isWeight ? p.weights.size() : p.buffers.size())) {
        error =
            fmt::format("plan: kernel {} ({}) reads {} {}, which does not "
                        "exist",
                        k, ri.name, o.isWeight ? "weight" : "buffer", o.index);
        return false;
      }
    for (uint32_t o : pk.outputs)
      if (o >= p.buffers.size()) {
        error = fmt::format("plan: kernel {} ({}) writes buffer {}, which "
                            "does not exist",
                            k, ri.name, o);
        return false;
      }
  }
  for (const std::vector<uint32_t> *list : {&p.inputs, &p.outputs})
    for (uint32_t b : *list)
      if (b >= p.buffers.size()) {
        error = fmt::format("plan: input/output buffer {} does not exist", b);
        return false;
      }
  if (p.inputs.empty() || p.outputs.empty()) {
    error = "plan: needs an input buffer (the tokens) and an output buffer";
    return false;
  }
  const PlanBuffer &tok = p.buffers[p.inputs[0]];
  if (tok.dtype != PlanDType::I32 || tok.numElements(1) != 1 ||
      tok.numElements(p.maxTokens) != p.maxTokens) {
    error =
        fmt::format("plan: the input buffer '{}' must be i32 [T]", tok.name);
    return false;
  }
  // Every buffer a kernel reads must hold data: a plan input, an earlier
  // kernel's output, or a view (reshape) of one, which has the same offset
  // and size. Anything else would read whatever the arena held.
  std::vector<bool> written(p.buffers.size(), false);
  for (uint32_t b : p.inputs)
    written[b] = true;
  auto defined = [&](uint32_t b) {
    if (written[b])
      return true;
    for (size_t o = 0; o < p.buffers.size(); ++o)
      if (written[o] && p.buffers[o].offset == p.buffers[b].offset &&
          p.buffers[o].bytes == p.buffers[b].bytes)
        return true;
    return false;
  };
  auto undefinedError = [&](uint32_t b, const std::string &reader) {
    error = fmt::format("plan: {} buffer {} '{}', which no plan input, "
                        "earlier kernel or view of one (same offset and "
                        "size) writes; recompile the plan",
                        reader, b, p.buffers[b].name);
    return false;
  };
  for (size_t k = 0; k < p.kernels.size(); ++k) {
    const format::PlanKernel &pk = p.kernels[k];
    for (const PlanOperand &o : pk.inputs)
      if (!o.isWeight && !defined(o.index))
        return undefinedError(o.index,
                              fmt::format("kernel {} ({}) reads", k,
                                          format::recipeInfo(pk.recipe).name));
    for (uint32_t o : pk.outputs)
      written[o] = true;
  }
  if (!defined(p.outputs[0]))
    return undefinedError(p.outputs[0], "the output is");
  if (!isFloatType(p.buffers[p.outputs[0]].dtype)) {
    error = fmt::format("plan: the output buffer '{}' must be f32, f16 or "
                        "bf16",
                        p.buffers[p.outputs[0]].name);
    return false;
  }
  return true;
}

} // namespace

std::unique_ptr<Executor> Executor::create(const Plan &plan,
                                           const std::string &ggufPath,
                                           const std::string &backendName,
                                           std::string &error,
                                           const DeviceOptions &options) {
  if (!validatePlan(plan, error))
    return nullptr;
  std::unique_ptr<Executor> ex(new Executor());
  ex->plan_ = plan;
  ex->gguf_ = format::GgufFile::open(ggufPath, error);
  if (!ex->gguf_)
    return nullptr;
  if (!format::checkPlanWeights(plan, ex->gguf_->info(), error))
    return nullptr;
  ex->device_ = createDevice(backendName, error, options);
  if (!ex->device_)
    return nullptr;
  for (size_t k = 0; k < plan.kernels.size(); ++k)
    if (!ex->device_->supports(plan.kernels[k].recipe)) {
      error = fmt::format("backend '{}' does not implement recipe '{}' "
                          "(kernel {})",
                          backendName,
                          format::recipeInfo(plan.kernels[k].recipe).name, k);
      return nullptr;
    }
  for (const format::PlanWeight &w : plan.weights) {
    const format::TensorInfo *t = ex->gguf_->info().findTensor(w.name);
    void *data =
        ex->device_->mapWeight(ex->gguf_->tensorData(*t), t->numBytes(), error);
    if (!data)
      return nullptr;
    ex->weightData_.push_back(data);
    ex->weightBytes_.push_back(t->numBytes());
  }
  // The arena rounded up to whole 32-bit words, so the poison covers it.
  uint64_t arenaBytes = (plan.arenaBytes + 3) / 4 * 4;
  ex->arena_ = static_cast<uint8_t *>(ex->device_->alloc(arenaBytes, error));
  if (!ex->arena_) {
    error = fmt::format("arena of {} bytes: {}", plan.arenaBytes, error);
    return nullptr;
  }
  return ex;
}

Executor::~Executor() {
  if (device_ && arena_)
    device_->release(arena_);
}

TensorArg Executor::bufferArg(uint32_t index, int64_t tokens) const {
  const PlanBuffer &b = plan_.buffers[index];
  TensorArg a;
  a.data = arena_ + b.offset;
  a.dtype = b.dtype;
  for (const format::PlanDim &d : b.shape)
    a.shape.push_back(d.at(tokens));
  a.bytes = a.numElements() * format::planDTypeSize(b.dtype);
  a.name = b.name;
  return a;
}

TensorArg Executor::operandArg(const PlanOperand &o, int64_t tokens) const {
  if (!o.isWeight)
    return bufferArg(o.index, tokens);
  const format::PlanWeight &w = plan_.weights[o.index];
  TensorArg a;
  a.data = weightData_[o.index];
  a.bytes = weightBytes_[o.index];
  a.isWeight = true;
  a.weightType = w.type;
  // IR order is ggml order reversed: ggml [K, N] is [N, K].
  for (auto it = w.dims.rbegin(); it != w.dims.rend(); ++it)
    a.shape.push_back(static_cast<int64_t>(*it));
  a.name = w.name;
  return a;
}

bool Executor::readBuffer(uint32_t index, int64_t tokens,
                          std::vector<float> &out, std::string &error) {
  TensorArg a = bufferArg(index, tokens);
  std::vector<uint8_t> bytes(a.bytes);
  if (!device_->download(bytes.data(), a.data, a.bytes, error))
    return false;
  out.resize(a.numElements());
  convertElements(a.dtype, bytes.data(), PlanDType::F32, out.data(),
                  a.numElements());
  return true;
}

bool Executor::run(const std::vector<int32_t> &tokens, RunOutput &out,
                   std::string &error) {
  int64_t t = static_cast<int64_t>(tokens.size());
  if (t == 0) {
    error = "the prompt is empty; it needs at least one token";
    return false;
  }
  if (t > plan_.maxTokens) {
    error = fmt::format("the prompt has {} tokens, but the plan was compiled "
                        "for at most {}; recompile it with a larger T",
                        t, plan_.maxTokens);
    return false;
  }
  // Every table indexed by the tokens bounds them.
  for (size_t i = 0; i < tokens.size(); ++i)
    if (tokens[i] < 0) {
      error = fmt::format("token {} (id {}) is negative", i, tokens[i]);
      return false;
    }
  for (const format::PlanKernel &k : plan_.kernels) {
    if (k.recipe != format::Recipe::GetRows || k.inputs[1].isWeight ||
        k.inputs[1].index != plan_.inputs[0])
      continue;
    TensorArg table = operandArg(k.inputs[0], t);
    if (table.shape.size() != 2)
      continue; // the kernel reports it
    for (size_t i = 0; i < tokens.size(); ++i)
      if (tokens[i] >= table.shape[0]) {
        error = fmt::format("token {} (id {}) is out of range: the table "
                            "'{}' has {} rows",
                            i, tokens[i], table.name, table.shape[0]);
        return false;
      }
  }

  captured_.clear();
  if (!device_->fill32(arena_, kPoison, (plan_.arenaBytes + 3) / 4 * 4, error))
    return false;
  TensorArg in = bufferArg(plan_.inputs[0], t);
  if (!device_->upload(in.data, tokens.data(), t * sizeof(int32_t), error))
    return false;

  using Clock = std::chrono::steady_clock;
  kernelSeconds_.assign(profile_ ? plan_.kernels.size() : 0, 0.0);
  if (profile_ && !device_->synchronize(error))
    return false;
  for (size_t k = 0; k < plan_.kernels.size(); ++k) {
    const format::PlanKernel &pk = plan_.kernels[k];
    const char *recipe = format::recipeInfo(pk.recipe).name;
    Launch l;
    l.recipe = pk.recipe;
    l.attrs = &pk.attrs;
    for (const PlanOperand &o : pk.inputs)
      l.inputs.push_back(operandArg(o, t));
    for (uint32_t o : pk.outputs)
      l.outputs.push_back(bufferArg(o, t));
    std::string what;
    const Clock::time_point start = Clock::now();
    if (!device_->launch(l, what)) {
      error = fmt::format("kernel {} ({}): {}", k, recipe, what);
      return false;
    }
    if (profile_) {
      if (!device_->synchronize(error))
        return false;
      kernelSeconds_[k] =
          std::chrono::duration<double>(Clock::now() - start).count();
    }
    for (uint32_t o : pk.outputs) {
      auto cap = capture_.find(o);
      if (cap == capture_.end())
        continue;
      RunOutput &c = captured_[cap->second];
      c.shape = bufferArg(o, t).shape;
      if (!device_->synchronize(error) || !readBuffer(o, t, c.data, error))
        return false;
    }
    if (!nanCheck_)
      continue;
    for (uint32_t o : pk.outputs) {
      if (!isFloatType(plan_.buffers[o].dtype))
        continue;
      std::vector<float> values;
      if (!device_->synchronize(error) || !readBuffer(o, t, values, error))
        return false;
      for (size_t i = 0; i < values.size(); ++i)
        if (std::isnan(values[i])) {
          error =
              fmt::format("kernel {} ({}) left NaN in buffer '{}' at "
                          "element {} of {}: it read memory nobody "
                          "wrote, skipped part of its output or computed "
                          "NaN",
                          k, recipe, plan_.buffers[o].name, i, values.size());
          return false;
        }
    }
  }
  if (!device_->synchronize(error))
    return false;

  uint32_t ob = plan_.outputs[0];
  out.shape = bufferArg(ob, t).shape;
  if (!readBuffer(ob, t, out.data, error))
    return false;
  int64_t cols = out.shape.empty() ? 1 : out.shape.back();
  for (size_t i = 0; i < out.data.size(); ++i)
    if (std::isnan(out.data[i])) {
      error = fmt::format("the output '{}' holds NaN at [{}, {}]: a kernel "
                          "read memory nobody wrote or computed NaN (the "
                          "per-kernel NaN check names it)",
                          plan_.buffers[ob].name, i / cols, i % cols);
      return false;
    }
  return true;
}

bool Executor::setCapture(const std::vector<std::string> &names,
                          std::string &error) {
  capture_.clear();
  for (const std::string &name : names) {
    // Only a kernel's own output holds its values when the kernel finishes;
    // a view shares another buffer's bytes and is captured through it.
    std::optional<uint32_t> found;
    for (const format::PlanKernel &k : plan_.kernels)
      for (uint32_t o : k.outputs)
        if (plan_.buffers[o].name == name)
          found = o;
    if (!found) {
      error = fmt::format("no kernel of the plan writes a buffer named '{}' "
                          "(names are IR value names after expand; see "
                          "strata-compile --print-ir-after=plan-memory)",
                          name);
      return false;
    }
    capture_[*found] = name;
  }
  return true;
}

} // namespace strata::runtime
