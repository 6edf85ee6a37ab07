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

std::unique_ptr<Executor> Executor::create(const Plan &plan,
                                           const std::string &ggufPath,
                                           const std::string &backendName,
                                           std::string &error,
                                           const DeviceOptions &options) {
  if (!format::validatePlan(plan, error))
    return nullptr;
  std::unique_ptr<Executor> ex(new Executor());
  ex->plan_ = plan;
  ex->gguf_ = format::GgufFile::open(ggufPath, error);
  if (!ex->gguf_)
    return nullptr;
  if (!format::checkPlanMetadata(plan, ex->gguf_->info(), error) ||
      !format::checkPlanWeights(plan, ex->gguf_->info(), error))
    return nullptr;
  ex->device_ = createDevice(backendName, error, options);
  if (!ex->device_)
    return nullptr;
  // A plan runs on the backend of its target.
  const char *backendOf = plan.target == "host"      ? "cpu"
                          : plan.target == "sm_90"   ? "cuda"
                          : plan.target == "gfx1151" ? "hip"
                                                     : nullptr;
  if (!backendOf || backendName != backendOf) {
    error = fmt::format("the plan was compiled for target '{}', which runs "
                        "on {}, not on backend '{}'",
                        plan.target,
                        backendOf ? fmt::format("backend '{}'", backendOf)
                                  : std::string("no backend of this build"),
                        backendName);
    return nullptr;
  }
  uint64_t workspaceBytes = 0;
  for (size_t k = 0; k < plan.kernels.size(); ++k) {
    const format::PlanKernel &pk = plan.kernels[k];
    std::vector<format::Recipe> recipes{pk.recipe};
    if (pk.isFused()) {
      recipes.clear();
      for (const format::BodyOp &op : pk.body)
        recipes.push_back(op.recipe);
      workspaceBytes =
          std::max(workspaceBytes, pk.workspaceBytes(plan.maxTokens));
    }
    for (format::Recipe r : recipes)
      if (!ex->device_->supports(r)) {
        error = fmt::format("backend '{}' does not implement recipe '{}' "
                            "(kernel {})",
                            backendName, format::recipeInfo(r).name, k);
        return nullptr;
      }
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
  if (workspaceBytes > 0) {
    ex->workspace_ =
        static_cast<uint8_t *>(ex->device_->alloc(workspaceBytes, error));
    if (!ex->workspace_) {
      error = fmt::format("workspace of {} bytes for fused kernels: {}",
                          workspaceBytes, error);
      return nullptr;
    }
  }
  return ex;
}

Executor::~Executor() {
  if (device_ && arena_)
    device_->release(arena_);
  if (device_ && workspace_)
    device_->release(workspace_);
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

TensorArg Executor::bodyArg(const format::PlanKernel &k,
                            const format::BodyRef &ref, int64_t tokens) const {
  TensorArg a;
  switch (ref.kind) {
  case format::BodyRef::Kind::In:
    a = operandArg(k.inputs[ref.index], tokens);
    break;
  case format::BodyRef::Kind::Out:
    a = bufferArg(k.outputs[ref.index], tokens);
    break;
  case format::BodyRef::Kind::Tmp: {
    // Temporaries are packed in order, each 256-byte aligned, as
    // PlanKernel::workspaceBytes counts them.
    uint64_t offset = 0;
    for (uint32_t i = 0; i < ref.index; ++i)
      offset += (k.temps[i].bytes(plan_.maxTokens) + 255) / 256 * 256;
    const format::BodyTemp &t = k.temps[ref.index];
    a.data = workspace_ + offset;
    a.dtype = t.dtype;
    for (const format::PlanDim &d : t.shape)
      a.shape.push_back(d.at(tokens));
    a.bytes = a.numElements() * format::planDTypeSize(t.dtype);
    a.name = fmt::format("{} temporary {}", k.fused, ref.index);
    break;
  }
  }
  if (!ref.view.empty()) {
    a.shape.clear();
    for (const format::PlanDim &d : ref.view)
      a.shape.push_back(d.at(tokens));
  }
  return a;
}

bool Executor::launchKernel(const format::PlanKernel &k, int64_t tokens,
                            std::string &error) {
  if (!k.isFused()) {
    Launch l;
    l.recipe = k.recipe;
    l.attrs = &k.attrs;
    for (const PlanOperand &o : k.inputs)
      l.inputs.push_back(operandArg(o, tokens));
    for (uint32_t o : k.outputs)
      l.outputs.push_back(bufferArg(o, tokens));
    return device_->launch(l, error);
  }
  for (size_t i = 0; i < k.body.size(); ++i) {
    const format::BodyOp &op = k.body[i];
    Launch l;
    l.recipe = op.recipe;
    l.attrs = &op.attrs;
    for (const format::BodyRef &r : op.inputs)
      l.inputs.push_back(bodyArg(k, r, tokens));
    for (const format::BodyRef &r : op.outputs)
      l.outputs.push_back(bodyArg(k, r, tokens));
    std::string what;
    if (!device_->launch(l, what)) {
      error = fmt::format("body op {} ({}): {}", i,
                          format::recipeInfo(op.recipe).name, what);
      return false;
    }
  }
  return true;
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
    if (k.isFused() || k.recipe != format::Recipe::GetRows ||
        k.inputs[1].isWeight || k.inputs[1].index != plan_.inputs[0])
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
    std::string recipe = pk.label();
    std::string what;
    const Clock::time_point start = Clock::now();
    if (!launchKernel(pk, t, what)) {
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
