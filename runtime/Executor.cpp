//===- Executor.cpp - run a compiled plan on a device ---------------------===//
#include "runtime/Executor.h"

#include "runtime/Elements.h"
#include "runtime/SyntheticWeights.h"
#include "runtime/format/BlockDecodeHost.h"
#include "runtime/format/Gguf.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>
#include <thread>

namespace strata::runtime {

using format::Plan;
using format::PlanBuffer;
using format::PlanDType;
using format::PlanOperand;

std::unique_ptr<Executor>
Executor::create(const Plan &plan, const std::string &ggufPath,
                 const std::string &backendName, std::string &error,
                 const DeviceOptions &options, const std::string &planDir,
                 std::optional<uint64_t> synthetic) {
  if (!format::validatePlan(plan, error))
    return nullptr;
  std::unique_ptr<Executor> ex(new Executor());
  ex->plan_ = plan;
  ex->planDir_ = planDir.empty() ? "." : planDir;
  ex->synthetic_ = synthetic;
  // Synthetic weights need the tensor infos only: a shapes-only file does.
  ex->gguf_ = format::GgufFile::open(ggufPath, error,
                                     synthetic ? format::GgufContents::Shapes
                                               : format::GgufContents::Data);
  if (!ex->gguf_)
    return nullptr;
  if (!format::checkPlanMetadata(plan, ex->gguf_->info(), error) ||
      !format::checkPlanWeights(plan, ex->gguf_->info(), error))
    return nullptr;
  ex->device_ = createDevice(backendName, error, options);
  if (!ex->device_)
    return nullptr;
  ex->main_.device = ex->device_.get();
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
  ex->code_ = std::string(ex->device_->codeTarget()) != "host";
  for (size_t k = 0; k < plan.kernels.size(); ++k) {
    const format::PlanKernel &pk = plan.kernels[k];
    workspaceBytes =
        std::max(workspaceBytes, pk.workspaceBytes(plan.maxTokens));
    if (ex->code_) {
      // Generated code: every kernel has a module and symbol; load each.
      if (!pk.code) {
        error = fmt::format("kernel {} ({}) has no code: the plan was "
                            "compiled with --no-codegen",
                            k, pk.label());
        return nullptr;
      }
      ex->functions_.emplace_back();
      ex->preFunctions_.emplace_back();
      for (size_t v = 0; v <= pk.code->alternates.size(); ++v) {
        const format::PlanCode &c =
            v == 0 ? *pk.code : pk.code->alternates[v - 1];
        const std::string which =
            v == 0 ? std::string()
                   : fmt::format(", its alternate for T >= {}", c.minTokens);
        DeviceFunction f;
        std::string what;
        if (!ex->device_->loadFunction(ex->planDir_ + "/" + c.module, c.symbol,
                                       f, what)) {
          error =
              fmt::format("kernel {} ({}){}: {}", k, pk.label(), which, what);
          return nullptr;
        }
        ex->functions_.back().push_back(f);
        DeviceFunction pf;
        if (c.pre && !ex->device_->loadFunction(ex->planDir_ + "/" + c.module,
                                                c.pre->symbol, pf, what)) {
          error = fmt::format("kernel {} ({}){}, its pre-launch: {}", k,
                              pk.label(), which, what);
          return nullptr;
        }
        ex->preFunctions_.back().push_back(pf);
      }
      continue;
    }
    std::vector<format::Recipe> recipes{pk.recipe};
    if (pk.isFused()) {
      recipes.clear();
      for (const format::BodyOp &op : pk.body)
        recipes.push_back(op.recipe);
    }
    for (format::Recipe r : recipes)
      if (!ex->device_->supports(r)) {
        error = fmt::format("backend '{}' does not implement recipe '{}' "
                            "(kernel {})",
                            backendName, format::recipeInfo(r).name, k);
        return nullptr;
      }
  }
  if (!ex->loadWeights(ex->main_, error))
    return nullptr;
  // Generation state lives outside the arena, zeroed once: it keeps its
  // contents from run to run.
  if (!plan.states.empty()) {
    ex->maxContext_ = plan.options.at("max_context");
    ex->maxBatch_ = plan.options.at("max_batch");
  }
  for (const format::PlanState &st : plan.states) {
    void *p = ex->device_->alloc((st.bytes + 3) / 4 * 4, error);
    if (!p) {
      error =
          fmt::format("state '{}' of {} bytes: {}", st.name, st.bytes, error);
      return nullptr;
    }
    ex->main_.states.push_back(p);
  }
  if (!ex->resetStates(error))
    return nullptr;
  // The recurrent states: written by a State-class kernel other than
  // kv_store (fused kernels never touch states).
  std::vector<bool> recurrent(plan.states.size(), false);
  for (const format::PlanKernel &pk : plan.kernels)
    if (!pk.isFused() &&
        format::recipeInfo(pk.recipe).cls == format::OpClass::State &&
        pk.recipe != format::Recipe::KvStore && !pk.inputs.empty() &&
        pk.inputs[0].isState)
      recurrent[pk.inputs[0].index] = true;
  for (size_t i = 0; i < recurrent.size(); ++i)
    if (recurrent[i])
      ex->recurrent_.push_back(i);
  // The arena rounded up to whole 32-bit words, so the poison covers it.
  uint64_t arenaBytes = (plan.arenaBytes + 3) / 4 * 4;
  ex->main_.arena =
      static_cast<uint8_t *>(ex->device_->alloc(arenaBytes, error));
  if (!ex->main_.arena) {
    error = fmt::format("arena of {} bytes: {}", plan.arenaBytes, error);
    return nullptr;
  }
  if (workspaceBytes > 0) {
    ex->main_.workspace =
        static_cast<uint8_t *>(ex->device_->alloc(workspaceBytes, error));
    if (!ex->main_.workspace) {
      error = fmt::format("workspace of {} bytes for kernels' temporaries: "
                          "{}",
                          workspaceBytes, error);
      return nullptr;
    }
  }
  return ex;
}

Executor::~Executor() {
  releaseGraphs();
  for (Bound *b : {&main_, &check_})
    if (b->device) {
      b->device->release(b->arena);
      b->device->release(b->workspace);
      for (void *p : b->states)
        b->device->release(p);
      for (void *p : b->owned)
        b->device->release(p);
    }
  for (auto &[slot, p] : snapshots_)
    device_->release(p);
}

TensorArg Executor::bufferArg(const Bound &bd, uint32_t index,
                              int64_t tokens) const {
  const PlanBuffer &b = plan_.buffers[index];
  TensorArg a;
  a.data = bd.arena + b.offset;
  a.dtype = b.dtype;
  for (const format::PlanDim &d : b.shape)
    a.shape.push_back(d.at(tokens));
  a.bytes = a.numElements() * format::planDTypeSize(b.dtype);
  a.name = b.name;
  return a;
}

TensorArg Executor::operandArg(const Bound &bd, const PlanOperand &o,
                               int64_t tokens) const {
  if (o.isState) {
    const format::PlanState &st = plan_.states[o.index];
    TensorArg a;
    a.data = bd.states[o.index];
    a.dtype = st.dtype;
    a.bytes = st.bytes;
    for (uint64_t d : st.shape)
      a.shape.push_back(static_cast<int64_t>(d));
    a.name = st.name;
    return a;
  }
  if (!o.isWeight)
    return bufferArg(bd, o.index, tokens);
  const format::PlanWeight &w = plan_.weights[o.index];
  TensorArg a;
  a.data = bd.weights[o.index];
  a.bytes = weightBytes_[o.index];
  a.isWeight = true;
  a.weightType = w.type;
  // IR order is ggml order reversed: ggml [K, N] is [N, K].
  for (auto it = w.dims.rbegin(); it != w.dims.rend(); ++it)
    a.shape.push_back(static_cast<int64_t>(*it));
  a.name = w.name;
  return a;
}

TensorArg Executor::bodyArg(const Bound &bd, const format::PlanKernel &k,
                            const format::BodyRef &ref, int64_t tokens) const {
  TensorArg a;
  switch (ref.kind) {
  case format::BodyRef::Kind::In:
    a = operandArg(bd, k.inputs[ref.index], tokens);
    break;
  case format::BodyRef::Kind::Out:
    a = bufferArg(bd, k.outputs[ref.index], tokens);
    break;
  case format::BodyRef::Kind::Tmp: {
    // Temporaries are packed in order, each 256-byte aligned, as
    // PlanKernel::workspaceBytes counts them.
    uint64_t offset = 0;
    for (uint32_t i = 0; i < ref.index; ++i)
      offset += (k.temps[i].bytes(plan_.maxTokens) + 255) / 256 * 256;
    const format::BodyTemp &t = k.temps[ref.index];
    a.data = bd.workspace + offset;
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

bool Executor::encodeTensorMap(CodeLaunch &l, const format::PlanTensorMap &m,
                               int64_t tokens, uint64_t workspaceBytes,
                               std::string &error) {
  const uint32_t i = m.operand.index;
  const uint8_t *base =
      m.workspace ? static_cast<const uint8_t *>(main_.workspace)
      : m.operand.isWeight
          ? static_cast<const uint8_t *>(main_.weights[i])
          : static_cast<const uint8_t *>(main_.arena) + plan_.buffers[i].offset;
  const uint64_t bytes = m.workspace          ? workspaceBytes
                         : m.operand.isWeight ? weightBytes_[i]
                                              : plan_.buffers[i].bytes;
  TensorMapRequest req;
  req.base = base + m.offset;
  req.dtype = m.dtype;
  req.rank = static_cast<uint32_t>(m.dims.size());
  // The tensor's last byte at this T, which the validator bounded for
  // buffers at maxTokens; weights are checked here.
  unsigned __int128 end = m.offset;
  for (uint32_t d = 0; d < req.rank; ++d) {
    req.dims[d] =
        static_cast<uint64_t>(std::max<int64_t>(m.dims[d].at(tokens), 1));
    req.box[d] = m.box[d];
    if (d > 0)
      req.strides[d - 1] = m.strides[d - 1];
    end += d == 0 ? req.dims[0] * format::planDTypeSize(m.dtype)
                  : (req.dims[d] - 1) * (unsigned __int128)m.strides[d - 1];
  }
  req.swizzle = m.swizzle;
  if (end > bytes) {
    error = fmt::format("{}: a tensor map spans {} bytes of {} {} ({} bytes) "
                        "at T = {}",
                        l.name, static_cast<uint64_t>(end),
                        m.workspace          ? "the workspace"
                        : m.operand.isWeight ? "weight"
                                             : "buffer",
                        m.workspace ? 0 : i, bytes, tokens);
    return false;
  }
  l.maps.emplace_back();
  if (!device_->encodeTensorMap(req, l.maps.back(), error)) {
    error = fmt::format("{}: {}", l.name, error);
    return false;
  }
  return true;
}

void Executor::releaseGraphs() {
  if (!device_)
    return;
  device_->releaseGraph(graph_);
  for (auto &[t, sh] : shapes_)
    device_->releaseGraph(sh.graph);
  shapes_.clear();
}

bool Executor::prepareLaunches(int64_t tokens, std::string &error) {
  if (launchesT_ == tokens)
    return true;
  // The graph holds the launches (grids, T) of another row count: kept
  // with them for when that count comes back.
  if (launchesT_ >= 0) {
    if (shapes_.size() >= kShapesKept) {
      for (auto &[t, sh] : shapes_)
        device_->releaseGraph(sh.graph);
      shapes_.clear();
    }
    Shape &sh = shapes_[launchesT_];
    sh.launches = std::move(launches_);
    sh.preLaunches = std::move(preLaunches_);
    sh.graph = graph_;
    sh.runs = runsAtT_;
    graph_ = DeviceGraph{};
  }
  if (auto it = shapes_.find(tokens); it != shapes_.end()) {
    launches_ = std::move(it->second.launches);
    preLaunches_ = std::move(it->second.preLaunches);
    graph_ = it->second.graph;
    runsAtT_ = it->second.runs;
    shapes_.erase(it);
    launchesT_ = tokens;
    return true;
  }
  launchesT_ = -1;
  runsAtT_ = 0;
  launches_.assign(plan_.kernels.size(), CodeLaunch{});
  preLaunches_.assign(plan_.kernels.size(), CodeLaunch{});
  // A grid dim of 0 at a short prompt still launches one block: the
  // kernels bound their work by T themselves.
  auto shape = [&](CodeLaunch &l, const std::vector<format::PlanDim> &grid,
                   const std::vector<int64_t> &block) {
    for (size_t d = 0; d < 3; ++d) {
      int64_t g = d < grid.size() ? grid[d].at(tokens) : 1;
      int64_t b = d < block.size() ? block[d] : 1;
      l.grid[d] = static_cast<uint32_t>(std::max<int64_t>(g, 1));
      l.block[d] = static_cast<uint32_t>(std::max<int64_t>(b, 1));
    }
  };
  for (size_t k = 0; k < plan_.kernels.size(); ++k) {
    const format::PlanKernel &pk = plan_.kernels[k];
    // The code for this prompt length: the kernel's or an alternate.
    const format::PlanCode &code = pk.code->at(tokens);
    const size_t v =
        &code == &*pk.code || pk.code->alternates.empty()
            ? 0
            : 1 + static_cast<size_t>(&code - pk.code->alternates.data());
    CodeLaunch &l = launches_[k];
    l.function = &functions_[k][v];
    l.overlap = plan_.options.count("grid_dependency_wait") != 0;
    shape(l, code.grid, code.block);
    l.sharedBytes = static_cast<uint32_t>(code.sharedBytes);
    l.name = fmt::format("kernel {} ({}) {}", k, pk.label(), code.symbol);
    for (const std::string &a : code.args) {
      if (a == "T") {
        l.args.push_back(static_cast<uint64_t>(tokens));
      } else if (a == "workspace") {
        l.args.push_back(reinterpret_cast<uint64_t>(main_.workspace));
      } else if (a.rfind("buffer:", 0) == 0 || a.rfind("weight:", 0) == 0) {
        bool weight = a[0] == 'w';
        uint64_t i = std::stoull(a.substr(7));
        if (i >= (weight ? plan_.weights.size() : plan_.buffers.size())) {
          error = fmt::format("{}: argument '{}' is out of range", l.name, a);
          return false;
        }
        l.args.push_back(weight ? reinterpret_cast<uint64_t>(main_.weights[i])
                                : reinterpret_cast<uint64_t>(
                                      main_.arena + plan_.buffers[i].offset));
      } else if (a.rfind("state:", 0) == 0) {
        uint64_t i = std::stoull(a.substr(6));
        if (i >= plan_.states.size()) {
          error = fmt::format("{}: argument '{}' is out of range", l.name, a);
          return false;
        }
        l.args.push_back(reinterpret_cast<uint64_t>(main_.states[i]));
      } else if (a.rfind("tmap:", 0) == 0) {
        // The validator checked N; the dims are the run's.
        const format::PlanTensorMap &m =
            code.tensorMaps[std::stoul(a.substr(5))];
        if (!encodeTensorMap(l, m, tokens, pk.workspaceBytes(tokens), error))
          return false;
        l.argMaps.resize(l.args.size(), -1);
        l.argMaps.push_back(static_cast<int32_t>(l.maps.size() - 1));
        l.args.push_back(0); // the map goes in its place
      } else {
        error = fmt::format("{}: unknown argument '{}'", l.name, a);
        return false;
      }
    }
    if (code.pre) {
      CodeLaunch &p = preLaunches_[k];
      p.function = &preFunctions_[k][v];
      shape(p, code.pre->grid, code.pre->block);
      p.sharedBytes = static_cast<uint32_t>(code.pre->sharedBytes);
      // The kernel's arguments, tensor maps included (passed by value in
      // their 128-byte slots: the pre-launch declares the same parameters).
      p.args = l.args;
      p.argMaps = l.argMaps;
      p.maps = l.maps;
      p.name = fmt::format("kernel {} ({}) pre-launch {}", k, pk.label(),
                           code.pre->symbol);
      p.overlap = l.overlap;
    }
  }
  launchesT_ = tokens;
  return true;
}

void Executor::setGraphs(bool on) {
  graphs_ = on;
  if (!on)
    releaseGraphs();
}

std::string Executor::graphsOffBecause() const {
  if (!code_ || !device_->supportsGraphs())
    return fmt::format("backend '{}' has none", device_->name());
  if (!graphs_)
    return "turned off";
  if (!graphFailure_.empty())
    return "capture failed: " + graphFailure_;
  // Each of these acts between two kernels, on the host.
  if (profile_)
    return "profiling each kernel";
  if (checkDevice_)
    return "checking each kernel";
  if (!capture_.empty())
    return "copying buffers after their kernels";
  if (nanCheck_)
    return "checking each kernel for NaN";
  if (graph_.empty() && runsAtT_ < 2)
    return kGraphFirstRun;
  return "";
}

void Executor::captureGraph() {
  auto start = std::chrono::steady_clock::now();
  std::string what;
  if (!device_->beginCapture(what)) {
    graphFailure_ = what;
    return;
  }
  for (size_t k = 0; k < launches_.size(); ++k) {
    if ((!preLaunches_[k].function ||
         device_->launchCode(preLaunches_[k], what)) &&
        device_->launchCode(launches_[k], what))
      continue;
    graphFailure_ =
        fmt::format("kernel {} ({}): {}", k, plan_.kernels[k].label(), what);
    // End the capture; what it recorded never runs.
    DeviceGraph partial;
    if (device_->endCapture(partial, what))
      device_->releaseGraph(partial);
    return;
  }
  if (!device_->endCapture(graph_, what)) {
    graphFailure_ = what;
    return;
  }
  graphUse_.captured = true;
  graphUse_.captureSeconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
}

bool Executor::launchKernel(const Bound &bd, size_t kernel, int64_t tokens,
                            std::string &error) {
  const format::PlanKernel &k = plan_.kernels[kernel];
  if (code_ && bd.device == device_.get())
    return (!preLaunches_[kernel].function ||
            device_->launchCode(preLaunches_[kernel], error)) &&
           device_->launchCode(launches_[kernel], error);
  if (!k.isFused()) {
    Launch l;
    l.recipe = k.recipe;
    l.attrs = &k.attrs;
    for (const PlanOperand &o : k.inputs)
      l.inputs.push_back(operandArg(bd, o, tokens));
    for (uint32_t o : k.outputs)
      l.outputs.push_back(bufferArg(bd, o, tokens));
    return bd.device->launch(l, error);
  }
  for (size_t i = 0; i < k.body.size(); ++i) {
    const format::BodyOp &op = k.body[i];
    Launch l;
    l.recipe = op.recipe;
    l.attrs = &op.attrs;
    for (const format::BodyRef &r : op.inputs)
      l.inputs.push_back(bodyArg(bd, k, r, tokens));
    for (const format::BodyRef &r : op.outputs)
      l.outputs.push_back(bodyArg(bd, k, r, tokens));
    std::string what;
    if (!bd.device->launch(l, what)) {
      error = fmt::format("body op {} ({}): {}", i,
                          format::recipeInfo(op.recipe).name, what);
      return false;
    }
  }
  return true;
}

bool Executor::readBuffer(const Bound &bd, uint32_t index, int64_t tokens,
                          std::vector<float> &out, std::string &error) {
  TensorArg a = bufferArg(bd, index, tokens);
  out.resize(a.numElements());
  if (a.dtype == PlanDType::F32)
    return bd.device->download(out.data(), a.data, a.bytes, error);
  hostStage_.resize(a.bytes);
  if (!bd.device->download(hostStage_.data(), a.data, a.bytes, error))
    return false;
  convertElements(a.dtype, hostStage_.data(), PlanDType::F32, out.data(),
                  a.numElements());
  return true;
}

bool Executor::readRows(const Bound &bd, uint32_t index, int64_t tokens,
                        const std::vector<int64_t> &keep,
                        std::vector<int64_t> &shape, std::vector<float> &out,
                        std::string &error) {
  TensorArg a = bufferArg(bd, index, tokens);
  const int64_t rows = a.shape.empty() ? 1 : a.shape[0];
  const int64_t rowElems = rows > 0 ? a.numElements() / rows : 0;
  const uint64_t rowBytes =
      static_cast<uint64_t>(rowElems) * format::planDTypeSize(a.dtype);
  // f32 rows straight into \p out (its capacity reused across steps),
  // others through the kept stage.
  const int64_t n = static_cast<int64_t>(keep.size()) * rowElems;
  out.resize(static_cast<size_t>(n));
  const bool direct = a.dtype == PlanDType::F32;
  if (!direct)
    hostStage_.resize(keep.size() * rowBytes);
  uint8_t *bytes =
      direct ? reinterpret_cast<uint8_t *>(out.data()) : hostStage_.data();
  for (size_t i = 0; i < keep.size();) {
    if (keep[i] < 0 || keep[i] >= rows) {
      error = fmt::format("row {} of the output '{}' was asked for, but the "
                          "run has {} rows",
                          keep[i], plan_.buffers[index].name, rows);
      return false;
    }
    // A run of consecutive rows is one download.
    size_t j = i + 1;
    while (j < keep.size() && keep[j] == keep[j - 1] + 1 && keep[j] < rows)
      ++j;
    if (!bd.device->download(bytes + i * rowBytes,
                             static_cast<uint8_t *>(a.data) +
                                 keep[i] * rowBytes,
                             (j - i) * rowBytes, error))
      return false;
    i = j;
  }
  if (!direct)
    convertElements(a.dtype, bytes, PlanDType::F32, out.data(), n);
  shape = a.shape;
  if (!shape.empty())
    shape[0] = static_cast<int64_t>(keep.size());
  return true;
}

bool Executor::resetStates(std::string &error) {
  for (size_t i = 0; i < plan_.states.size(); ++i)
    if (!device_->fill32(main_.states[i], 0,
                         (plan_.states[i].bytes + 3) / 4 * 4, error)) {
      error = fmt::format("state '{}': {}", plan_.states[i].name, error);
      return false;
    }
  return true;
}

bool Executor::readState(size_t index, std::vector<float> &out,
                         std::string &error) {
  if (index >= plan_.states.size()) {
    error = fmt::format("state {} does not exist (the plan has {})", index,
                        plan_.states.size());
    return false;
  }
  const format::PlanState &st = plan_.states[index];
  std::vector<uint8_t> bytes(st.bytes);
  if (!device_->synchronize(error) ||
      !device_->download(bytes.data(), main_.states[index], st.bytes, error))
    return false;
  out = stateElements(st, bytes.data());
  return true;
}

uint64_t Executor::recurrentSlotBytes() const {
  uint64_t bytes = 0;
  for (size_t i : recurrent_) {
    const format::PlanState &st = plan_.states[i];
    bytes = (bytes + kSnapshotAlign - 1) / kSnapshotAlign * kSnapshotAlign +
            st.bytes / st.shape[0];
  }
  return bytes;
}

bool Executor::saveSlot(int32_t slot, std::string &error) {
  return copySlot(slot, true, error);
}

bool Executor::restoreSlot(int32_t slot, std::string &error) {
  return copySlot(slot, false, error);
}

bool Executor::copySlot(int32_t slot, bool save, std::string &error) {
  if (slot < 0 || slot >= maxBatch_) {
    error = fmt::format("slot {} does not exist (the plan has {} slots, "
                        "strata-compile --max-batch)",
                        slot, maxBatch_);
    return false;
  }
  auto it = snapshots_.find(slot);
  if (it == snapshots_.end()) {
    if (!save) {
      error = fmt::format("slot {} has no saved state to restore", slot);
      return false;
    }
    void *p =
        device_->alloc(std::max<uint64_t>(recurrentSlotBytes(), 4), error);
    if (!p) {
      error = fmt::format("the snapshot of slot {}'s recurrent state: {}", slot,
                          error);
      return false;
    }
    it = snapshots_.emplace(slot, p).first;
  }
  uint8_t *snapshot = static_cast<uint8_t *>(it->second);
  uint64_t at = 0;
  for (size_t i : recurrent_) {
    const format::PlanState &st = plan_.states[i];
    // States are slot-major: [S, ...], slot s the s-th S-th of the bytes.
    if (st.shape.empty() || static_cast<int64_t>(st.shape[0]) <= slot) {
      error = fmt::format("state '{}' has no slot {} (its first dim is not "
                          "the plan's {} slots)",
                          st.name, slot, maxBatch_);
      return false;
    }
    uint64_t per = st.bytes / st.shape[0];
    at = (at + kSnapshotAlign - 1) / kSnapshotAlign * kSnapshotAlign;
    uint8_t *live = static_cast<uint8_t *>(main_.states[i]) + slot * per;
    if (!(save ? device_->copy(snapshot + at, live, per, error)
               : device_->copy(live, snapshot + at, per, error))) {
      error = fmt::format("{} state '{}' of slot {}: {}",
                          save ? "saving" : "restoring", st.name, slot, error);
      return false;
    }
    at += per;
  }
  return true;
}

bool Executor::run(const std::vector<int32_t> &tokens, RunOutput &out,
                   std::string &error) {
  if (plan_.states.empty())
    return runPrepared(tokens, nullptr, nullptr, out, error);
  // Rows of slot 0 from position 0.
  std::vector<Row> rows;
  for (size_t i = 0; i < tokens.size(); ++i)
    rows.push_back(
        {tokens[i], static_cast<int32_t>(std::min<size_t>(i, INT32_MAX)), 0});
  return runRows(rows, out, error);
}

namespace {

/// The error for a NaN or +inf at [row, col] of the output \p name.
std::string badOutputValue(const std::string &name, int64_t row, int64_t col,
                           float value) {
  if (std::isnan(value))
    return fmt::format("the output '{}' holds NaN at [{}, {}]: a kernel read "
                       "memory nobody wrote or computed NaN (the per-kernel "
                       "NaN check names it)",
                       name, row, col);
  return fmt::format("the output '{}' holds +inf at [{}, {}]: a kernel "
                     "overflowed",
                     name, row, col);
}

} // namespace

bool Executor::runRows(const std::vector<Row> &rows, RunOutput &out,
                       std::string &error, const std::vector<int64_t> *keep) {
  return runRowsAs(rows, out, error, keep, nullptr, nullptr);
}

bool Executor::runRowsIds(const std::vector<Row> &rows,
                          std::vector<int32_t> &ids, std::string &error) {
  RunOutput unused;
  const std::vector<int64_t> none;
  return runRowsAs(rows, unused, error, &none, &ids, nullptr);
}

bool Executor::runRowsIds(const std::vector<Row> &rows,
                          const std::vector<int64_t> &idRows,
                          std::vector<int32_t> &ids,
                          const std::vector<int64_t> &keep, RunOutput &out,
                          std::string &error) {
  return runRowsAs(rows, out, error, &keep, &ids, &idRows);
}

bool Executor::runRowsAs(const std::vector<Row> &rows, RunOutput &out,
                         std::string &error, const std::vector<int64_t> *keep,
                         std::vector<int32_t> *ids,
                         const std::vector<int64_t> *idRows) {
  if (ids && !hasGreedyIds()) {
    error = "the plan returns no greedy ids (it was compiled with "
            "strata-compile --greedy-ids off, or without --max-context)";
    return false;
  }
  std::vector<int32_t> tokens, pos, seq;
  for (const Row &r : rows) {
    tokens.push_back(r.token);
    pos.push_back(r.pos);
    seq.push_back(r.seq);
  }
  if (plan_.states.empty()) {
    // Without state a plan computes a prompt: slot 0 from position 0.
    for (size_t i = 0; i < rows.size(); ++i)
      if (rows[i].seq != 0 || rows[i].pos != static_cast<int64_t>(i)) {
        error = fmt::format("row {} is at position {} of slot {}, but the "
                            "plan has no state (compiled without "
                            "--max-context): its rows are one prompt, slot "
                            "0 from position 0",
                            i, rows[i].pos, rows[i].seq);
        return false;
      }
    return runPrepared(tokens, nullptr, nullptr, out, error, keep, ids, idRows);
  }
  // Before any kernel runs: every row inside the state, no two rows at one
  // place.
  std::map<std::pair<int32_t, int32_t>, size_t> seen;
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row &r = rows[i];
    if (r.pos < 0 || r.pos >= maxContext_) {
      error = fmt::format("row {} is at position {}, outside the plan's "
                          "context of {} positions (0..{}; strata-compile "
                          "--max-context)",
                          i, r.pos, maxContext_, maxContext_ - 1);
      return false;
    }
    if (r.seq < 0 || r.seq >= maxBatch_) {
      error = fmt::format("row {} is in slot {}, outside the plan's {} slots "
                          "(0..{}; strata-compile --max-batch)",
                          i, r.seq, maxBatch_, maxBatch_ - 1);
      return false;
    }
    auto [it, added] = seen.emplace(std::make_pair(r.seq, r.pos), i);
    if (!added) {
      error = fmt::format("rows {} and {} are both at position {} of slot {}",
                          it->second, i, r.pos, r.seq);
      return false;
    }
  }
  // The positions each slot's rows attend, for the profile's byte counts.
  std::map<int32_t, int64_t> attended;
  for (const Row &r : rows)
    attended[r.seq] = std::max<int64_t>(attended[r.seq], int64_t(r.pos) + 1);
  lastRunAttended_.clear();
  for (const auto &[slot, positions] : attended)
    lastRunAttended_.push_back(positions);
  return runPrepared(tokens, &pos, &seq, out, error, keep, ids, idRows);
}

bool Executor::runPrepared(const std::vector<int32_t> &tokens,
                           const std::vector<int32_t> *pos,
                           const std::vector<int32_t> *seq, RunOutput &out,
                           std::string &error, const std::vector<int64_t> *keep,
                           std::vector<int32_t> *ids,
                           const std::vector<int64_t> *idRows) {
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
  // The rows to keep are rows of the output: checked before any kernel
  // runs, so a wrong one changes no state.
  // The greedy ids' rows are the logits' (the validator checks).
  for (const std::vector<int64_t> *rows : {keep, idRows}) {
    if (!rows)
      continue;
    const TensorArg o = bufferArg(main_, plan_.outputs[0], t);
    const int64_t outRows = o.shape.empty() ? 1 : o.shape[0];
    for (int64_t r : *rows)
      if (r < 0 || r >= outRows) {
        error = fmt::format("row {} of the output '{}' was asked for, but "
                            "this run's has {} rows",
                            r, plan_.buffers[plan_.outputs[0]].name, outRows);
        return false;
      }
  }
  // Every table indexed by the tokens bounds them.
  for (size_t i = 0; i < tokens.size(); ++i)
    if (tokens[i] < 0) {
      error = fmt::format("token {} (id {}) is negative", i, tokens[i]);
      return false;
    }
  for (const format::PlanKernel &k : plan_.kernels) {
    if (k.isFused() || k.recipe != format::Recipe::GetRows ||
        !k.inputs[1].isBuffer() || k.inputs[1].index != plan_.inputs[0])
      continue;
    TensorArg table = operandArg(main_, k.inputs[0], t);
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
  if (code_ && !prepareLaunches(t, error))
    return false;
  ++runsAtT_;
  // The graph is captured before this run enqueues anything, and replayed
  // after the fill and the upload on the same stream.
  graphUse_ = GraphUse{};
  graphUse_.off = graphsOffBecause();
  if (graphUse_.off.empty() && graph_.empty()) {
    captureGraph();
    graphUse_.off = graphsOffBecause();
  }
  graphUse_.used = graphUse_.off.empty();
  graphUse_.launches = graphUse_.used ? graph_.launches : 0;
  if ((poisonEachRun_ || !poisoned_) &&
      !device_->fill32(main_.arena, kPoison, (plan_.arenaBytes + 3) / 4 * 4,
                       error))
    return false;
  poisoned_ = true;
  TensorArg in = bufferArg(main_, plan_.inputs[0], t);
  if (!device_->upload(in.data, tokens.data(), t * sizeof(int32_t), error))
    return false;
  for (auto [index, values] : {std::pair{format::kPlanInputPos, pos},
                               std::pair{format::kPlanInputSeq, seq}}) {
    if (!values)
      continue;
    TensorArg a = bufferArg(main_, plan_.inputs[index], t);
    if (!device_->upload(a.data, values->data(), t * sizeof(int32_t), error))
      return false;
  }

  // Profiling: an event before every kernel and one after the last, in
  // stream order (the CPU's events read the host clock after a sync).
  const size_t nk = plan_.kernels.size();
  kernelSeconds_.assign(profile_ ? nk : 0, 0.0);
  if (profile_ && (!device_->createEvents(nk + 1, error) ||
                   !device_->recordEvent(0, error)))
    return false;
  if (checkDevice_) {
    checks_.assign(nk, KernelCheck{});
    if (!checkDevice_->fill32(check_.arena, kPoison,
                              (plan_.arenaBytes + 3) / 4 * 4, error))
      return false;
  }
  if (graphUse_.used) {
    if (!device_->launchGraph(graph_, error))
      return false;
  } else if (!launchEach(t, error)) {
    return false;
  }
  if (!device_->synchronize(error))
    return false;
  if (profile_)
    for (size_t k = 0; k < nk; ++k)
      if (!device_->eventSeconds(k, k + 1, kernelSeconds_[k], error))
        return false;

  if (ids) {
    // The greedy ids: a few bytes, not rows of logits; those of idRows (or
    // of every row, checked above), each a token; then the logits of
    // \p keep, if any.
    const TensorArg a = bufferArg(main_, plan_.outputs[1], t);
    idStage_.resize(static_cast<size_t>(a.numElements()));
    if (!device_->download(idStage_.data(), a.data, a.bytes, error))
      return false;
    ids->clear();
    const size_t n = idRows ? idRows->size() : idStage_.size();
    for (size_t i = 0; i < n; ++i) {
      const int64_t r = idRows ? (*idRows)[i] : static_cast<int64_t>(i);
      if (idStage_[r] < 0) {
        error = badIdsRow(t, r);
        return false;
      }
      ids->push_back(idStage_[r]);
    }
    if (keep && keep->empty()) {
      out.data.clear();
      out.shape.clear();
      return true;
    }
  }
  uint32_t ob = plan_.outputs[0];
  out.shape = bufferArg(main_, ob, t).shape;
  if (keep ? !readRows(main_, ob, t, *keep, out.shape, out.data, error)
           : !readBuffer(main_, ob, t, out.data, error))
    return false;
  int64_t cols = out.shape.empty() ? 1 : out.shape.back();
  // Whether any value is NaN, without a branch a value (16 rows of 248K
  // logits a decode step), then where, for the diagnostic.
  const float *v = out.data.data();
  const size_t nv = out.data.size();
  int nan = 0;
  for (size_t i = 0; i < nv; ++i)
    nan |= v[i] != v[i];
  for (size_t i = 0; nan && i < nv; ++i)
    if (std::isnan(v[i])) {
      error = badOutputValue(plan_.buffers[ob].name, i / cols, i % cols, v[i]);
      return false;
    }
  return true;
}

std::string Executor::badIdsRow(int64_t tokens, int64_t row) {
  const uint32_t ob = plan_.outputs[0];
  const std::string &name = plan_.buffers[ob].name;
  std::vector<int64_t> shape;
  std::vector<float> v;
  std::string error;
  if (!readRows(main_, ob, tokens, {row}, shape, v, error))
    return fmt::format("row {} of the output '{}' has no greedy id, and "
                       "reading the row failed: {}",
                       row, name, error);
  for (size_t i = 0; i < v.size(); ++i)
    if (!(v[i] < INFINITY))
      return badOutputValue(name, row, static_cast<int64_t>(i), v[i]);
  return fmt::format("row {} of the output '{}' is -inf everywhere: no "
                     "token can be taken",
                     row, name);
}

bool Executor::launchEach(int64_t t, std::string &error) {
  for (size_t k = 0; k < plan_.kernels.size(); ++k) {
    const format::PlanKernel &pk = plan_.kernels[k];
    std::string recipe = pk.label();
    std::string what;
    if (checkDevice_ && !checkKernel(k, t, error))
      return false;
    if (!launchKernel(main_, k, t, what)) {
      error = fmt::format("kernel {} ({}): {}", k, recipe, what);
      return false;
    }
    if (profile_ && !device_->recordEvent(k + 1, error))
      return false;
    if (checkDevice_ && !compareKernel(k, t, error))
      return false;
    for (uint32_t o : pk.outputs) {
      auto cap = capture_.find(o);
      if (cap == capture_.end())
        continue;
      RunOutput &c = captured_[cap->second];
      c.shape = bufferArg(main_, o, t).shape;
      if (!device_->synchronize(error) ||
          !readBuffer(main_, o, t, c.data, error))
        return false;
    }
    if (!nanCheck_)
      continue;
    for (uint32_t o : pk.outputs) {
      if (!isFloatType(plan_.buffers[o].dtype))
        continue;
      std::vector<float> values;
      if (!device_->synchronize(error) ||
          !readBuffer(main_, o, t, values, error))
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
  return true;
}

bool Executor::loadWeights(Bound &b, std::string &error) {
  b.weights.clear();
  if (&b == &main_)
    weightBytes_.clear();
  std::vector<uint8_t> chunk;
  unsigned threads = std::max(1u, std::thread::hardware_concurrency());
  // GPU plans carry the fill kernel: synthetic blocks are made where they
  // are used (no host generation, no upload).
  DeviceFunction fill;
  const bool onDevice = synthetic_ && plan_.syntheticFill &&
                        std::string(b.device->codeTarget()) != "host";
  if (onDevice) {
    std::string what;
    if (!b.device->loadFunction(planDir_ + "/" + plan_.syntheticFill->module,
                                plan_.syntheticFill->symbol, fill, what)) {
      error = fmt::format("the synthetic weight fill: {}", what);
      return false;
    }
  }
  for (size_t i = 0; i < plan_.weights.size(); ++i) {
    const format::PlanWeight &w = plan_.weights[i];
    const format::TensorInfo *t = gguf_->info().findTensor(w.name);
    uint64_t bytes = t->numBytes();
    void *data = nullptr;
    if (!synthetic_) {
      data = b.device->mapWeight(gguf_->tensorData(*t), bytes, error);
      if (!data)
        return false;
    } else {
      data = b.device->alloc(bytes, error);
      if (!data) {
        error = fmt::format("weight '{}' ({} bytes): {}", w.name, bytes, error);
        return false;
      }
      format::GgmlTypeInfo info = format::ggmlTypeInfo(w.type);
      uint64_t blocks = bytes / info.typeSize;
      if (onDevice) {
        // One thread a block, grid-stride past 2^20 workgroups.
        uint64_t groups = std::min<uint64_t>((blocks + 255) / 256, 1u << 20);
        CodeLaunch l;
        l.function = &fill;
        l.grid[0] = static_cast<uint32_t>(std::max<uint64_t>(1, groups));
        l.block[0] = 256;
        l.args = {reinterpret_cast<uint64_t>(data),
                  *synthetic_,
                  i,
                  static_cast<uint64_t>(w.type),
                  info.typeSize,
                  syntheticRank1(w.dims) ? 1u : 0u,
                  blocks,
                  uint64_t(l.grid[0]) * 256};
        l.name = fmt::format("the synthetic fill of weight '{}'", w.name);
        if (!b.device->launchCode(l, error))
          return false;
      }
      // Else generated on host threads in chunks of whole blocks, uploaded.
      uint64_t per =
          std::max<uint64_t>(1, (uint64_t(256) << 20) / info.typeSize);
      for (uint64_t first = 0; !onDevice && first < blocks; first += per) {
        uint64_t n = std::min(per, blocks - first);
        chunk.resize(n * info.typeSize);
        syntheticBlocksParallel(*synthetic_, i, w.type, w.dims, first, n,
                                chunk.data(), static_cast<int>(threads));
        if (!b.device->upload(static_cast<uint8_t *>(data) +
                                  first * info.typeSize,
                              chunk.data(), chunk.size(), error))
          return false;
      }
      b.owned.push_back(data);
    }
    b.weights.push_back(data);
    if (&b == &main_)
      weightBytes_.push_back(bytes);
  }
  if (onDevice && !b.device->synchronize(error)) {
    error = "the synthetic weight fill: " + error;
    return false;
  }
  if (&b == &main_)
    syntheticOnDevice_ = onDevice;
  return true;
}

bool Executor::verifySyntheticWeights(std::string &report, std::string &error) {
  if (!synthetic_) {
    error = "the weights are the file's, not synthetic";
    return false;
  }
  unsigned threads = std::max(1u, std::thread::hardware_concurrency());
  std::vector<uint8_t> got, want;
  uint64_t total = 0;
  for (size_t i = 0; i < plan_.weights.size(); ++i) {
    const format::PlanWeight &w = plan_.weights[i];
    uint64_t bytes = weightBytes_[i];
    got.resize(bytes);
    want.resize(bytes);
    if (!device_->download(got.data(), main_.weights[i], bytes, error))
      return false;
    syntheticWeight(*synthetic_, i, w.type, w.dims, want.data(),
                    static_cast<int>(threads));
    auto diff = std::mismatch(got.begin(), got.end(), want.begin());
    if (diff.first != got.end()) {
      uint64_t at = static_cast<uint64_t>(diff.first - got.begin());
      error = fmt::format(
          "weight {} '{}' ({}): byte {} (block {}) is {:#04x} on {}, {:#04x} "
          "in the host fill",
          i, w.name, format::ggmlTypeInfo(w.type).name, at,
          at / format::ggmlTypeInfo(w.type).typeSize, *diff.first,
          device_->name(), *diff.second);
      return false;
    }
    total += bytes;
  }
  report = fmt::format(
      "synthetic weights: {} weights, {} bytes filled {}, "
      "identical to the host fill",
      plan_.weights.size(), total,
      syntheticOnDevice_
          ? fmt::format("on {} by the plan's fill kernel", device_->name())
          : std::string("on the host"));
  return true;
}

bool Executor::setCheck(const CheckBars &bars, std::string &error) {
  if (!code_) {
    error = fmt::format("--check compares a GPU backend with the cpu "
                        "backend; backend '{}' is the reference itself",
                        device_->name());
    return false;
  }
  bars_ = bars;
  checkDevice_ = createDevice("cpu", error);
  if (!checkDevice_)
    return false;
  check_.device = checkDevice_.get();
  uint64_t workspaceBytes = 0;
  for (const format::PlanKernel &pk : plan_.kernels)
    workspaceBytes =
        std::max(workspaceBytes, pk.workspaceBytes(plan_.maxTokens));
  check_.arena = static_cast<uint8_t *>(
      checkDevice_->alloc((plan_.arenaBytes + 3) / 4 * 4, error));
  if (!check_.arena)
    return false;
  if (workspaceBytes && !(check_.workspace = static_cast<uint8_t *>(
                              checkDevice_->alloc(workspaceBytes, error))))
    return false;
  // The states' host copies: each kernel that reads one gets the device's
  // contents first (checkKernel), so it starts from the same state.
  for (const format::PlanState &st : plan_.states) {
    void *p = checkDevice_->alloc((st.bytes + 3) / 4 * 4, error);
    if (!p)
      return false;
    check_.states.push_back(p);
  }
  return loadWeights(check_, error);
}

namespace {

/// Rounds the \p n elements of \p type at \p data as the int8 decode
/// forms read them (PlanCode::int8Inputs): each 8 consecutive values (a
/// row's K is a multiple of 8) become their int8 bytes times the piece's
/// scale (strata_qa8), stored back in \p type.
void roundAsInt8(format::PlanDType type, uint8_t *data, int64_t n) {
  for (int64_t i0 = 0; i0 + 8 <= n; i0 += 8) {
    float a[8];
    for (int j = 0; j < 8; ++j)
      a[j] = static_cast<float>(loadElement(type, data, i0 + j));
    uint32_t q[2];
    float s;
    int sum;
    strata_qa8(a, q, &s, &sum);
    for (int j = 0; j < 8; ++j) {
      const auto v = static_cast<int8_t>(q[j / 4] >> (8 * (j % 4)));
      storeElement(type, data, i0 + j, static_cast<float>(v) * s);
    }
  }
}

} // namespace

bool Executor::checkKernel(size_t k, int64_t tokens, std::string &error) {
  const format::PlanKernel &pk = plan_.kernels[k];
  if (!device_->synchronize(error))
    return false;
  // The inputs this launch reads as int8 activations: the cpu backend
  // reruns the kernel on them rounded alike.
  const std::vector<uint32_t> none;
  const std::vector<uint32_t> &int8Inputs =
      pk.code ? pk.code->at(tokens).int8Inputs : none;
  std::vector<uint8_t> bytes;
  for (size_t i = 0; i < pk.inputs.size(); ++i) {
    const PlanOperand &o = pk.inputs[i];
    if (o.isState) {
      uint64_t n = plan_.states[o.index].bytes;
      bytes.resize(n);
      if (!device_->download(bytes.data(), main_.states[o.index], n, error) ||
          !checkDevice_->upload(check_.states[o.index], bytes.data(), n, error))
        return false;
      continue;
    }
    if (!o.isBuffer())
      continue;
    TensorArg g = bufferArg(main_, o.index, tokens);
    TensorArg c = bufferArg(check_, o.index, tokens);
    bytes.resize(g.bytes);
    if (!device_->download(bytes.data(), g.data, g.bytes, error))
      return false;
    if (std::find(int8Inputs.begin(), int8Inputs.end(), i) !=
        int8Inputs.end()) {
      const format::PlanDType type = plan_.buffers[o.index].dtype;
      roundAsInt8(type, bytes.data(),
                  static_cast<int64_t>(g.bytes / format::planDTypeSize(type)));
    }
    if (!checkDevice_->upload(c.data, bytes.data(), c.bytes, error))
      return false;
  }
  std::string what;
  if (!launchKernel(check_, k, tokens, what)) {
    error = fmt::format("--check: kernel {} ({}) on the cpu: {}", k, pk.label(),
                        what);
    return false;
  }
  return true;
}

bool Executor::compareKernel(size_t k, int64_t tokens, std::string &error) {
  const format::PlanKernel &pk = plan_.kernels[k];
  if (!device_->synchronize(error))
    return false;
  KernelCheck &kc = checks_[k];
  // A state write (input 0 of a State-class kernel) is an output too.
  if (!pk.isFused() &&
      format::recipeInfo(pk.recipe).cls == format::OpClass::State &&
      !pk.inputs.empty() && pk.inputs[0].isState) {
    const format::PlanState &st = plan_.states[pk.inputs[0].index];
    // Compared as the values the readers see (bf16 widened, int8 rows
    // times their scales): both sides quantise alike, so an int8 cache
    // compares exactly unless a kernel stored a different row.
    std::vector<uint8_t> gb(st.bytes), cb(st.bytes);
    if (!device_->download(gb.data(), main_.states[pk.inputs[0].index],
                           st.bytes, error) ||
        !checkDevice_->download(cb.data(), check_.states[pk.inputs[0].index],
                                st.bytes, error))
      return false;
    std::vector<float> g = stateElements(st, gb.data());
    std::vector<float> c = stateElements(st, cb.data());
    double num = 0, den = 0;
    for (size_t i = 0; i < g.size(); ++i) {
      double d = double(g[i]) - c[i];
      num += d * d;
      den += double(c[i]) * c[i];
    }
    double nmse = den > 0 ? num / den : (num > 0 ? INFINITY : 0);
    kc.worstNmse = std::max(kc.worstNmse, nmse);
    if (!(nmse <= bars_.f32Nmse)) {
      kc.pass = false;
      kc.worstOutput = st.name;
    }
  }
  for (uint32_t o : pk.outputs) {
    std::vector<float> g, c;
    if (!readBuffer(main_, o, tokens, g, error) ||
        !readBuffer(check_, o, tokens, c, error))
      return false;
    const PlanBuffer &b = plan_.buffers[o];
    if (b.dtype == PlanDType::I32) {
      size_t diff = 0;
      for (size_t i = 0; i < g.size(); ++i)
        diff += g[i] != c[i];
      double frac = g.empty() ? 0.0 : double(diff) / g.size();
      kc.mismatch = std::max(kc.mismatch, frac);
      if (frac > bars_.i32Mismatch) {
        kc.pass = false;
        kc.worstOutput = b.name;
      }
      continue;
    }
    double num = 0, den = 0;
    bool nan = false;
    for (size_t i = 0; i < g.size(); ++i) {
      if (std::isnan(g[i]) != std::isnan(c[i]))
        nan = true;
      if (std::isnan(g[i]) || std::isnan(c[i]))
        continue;
      double d = double(g[i]) - c[i];
      num += d * d;
      den += double(c[i]) * c[i];
    }
    double nmse =
        nan ? INFINITY : (den > 0 ? num / den : (num > 0 ? INFINITY : 0));
    kc.worstNmse = std::max(kc.worstNmse, nmse);
    double bar = b.dtype == PlanDType::BF16 ? bars_.bf16Nmse : bars_.f32Nmse;
    if (!(nmse <= bar) && kc.pass) {
      kc.pass = false;
      kc.worstOutput = b.name;
    }
  }
  if (kc.pass)
    return true;
  std::string body = pk.label();
  if (pk.isFused()) {
    body += " =";
    for (const format::BodyOp &op : pk.body)
      body += std::string(" ") + format::recipeInfo(op.recipe).name;
  }
  error = fmt::format("--check: kernel {} ({}) diverges from the cpu backend: "
                      "output '{}' {} (bars: NMSE {:g} f32, {:g} bf16, i32 "
                      "mismatch {:g})",
                      k, body, kc.worstOutput,
                      kc.mismatch > bars_.i32Mismatch
                          ? fmt::format("mismatch {:.3g}", kc.mismatch)
                          : fmt::format("NMSE {:.3g}", kc.worstNmse),
                      bars_.f32Nmse, bars_.bf16Nmse, bars_.i32Mismatch);
  return false;
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
