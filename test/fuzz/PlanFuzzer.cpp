//===- PlanFuzzer.cpp - libFuzzer target for plans and the executor -------===//
//
// Any byte string: read it as plan.json (planFromJson: parse + validatePlan)
// and write it back (it must read back to the same text). If it validates
// and a tiny GGUF of its architecture is at hand ($STRATA_PLAN_FUZZ_DIR/
// <arch>.gguf, which scripts/fuzz.sh synthesises), create an executor over
// that file and run a few tokens on the cpu backend: every failure must be an
// error message, never a crash, a hang, a leak or a sanitizer report. Plans
// asking for more than kMaxBytes of arena or workspace are validated only
// (a real device would refuse them the same way; the fuzzer's memory is
// capped), and so are plans whose generation states (version 3) are larger.
//
// Semantics, not only syntax: the custom mutator edits parsed plans where
// the validator's deep checks look (buffer offsets and sizes, views, ties,
// temporaries, workspaces, grids, operands, arguments) and keeps the JSON
// valid, so inputs reach the memory proof instead of the parser. And every
// plan that runs is moved: its storage sets are placed elsewhere (one set at
// a random offset, or all of them packed again in a random order); a moved
// plan the validator accepts computes the same kernels over the same
// operands, so its logits must equal the original's bit for bit (the arena
// is poisoned first): an accepted placement must be a correct one.
//
//===----------------------------------------------------------------------===//
#include "runtime/Executor.h"
#include "runtime/format/Plan.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <sys/stat.h>

using namespace strata;
using json = nlohmann::json;

extern "C" size_t LLVMFuzzerMutate(uint8_t *data, size_t size, size_t maxSize);

namespace {

constexpr uint64_t kMaxBytes = uint64_t(64) << 20;

[[noreturn]] void die(const char *what, const std::string &detail) {
  std::fprintf(stderr, "PlanFuzzer: %s: %s\n", what, detail.c_str());
  std::abort();
}

std::string ggufFor(const std::string &arch) {
  const char *dir = std::getenv("STRATA_PLAN_FUZZ_DIR");
  if (!dir || arch.empty() || arch.find('/') != std::string::npos)
    return {};
  std::string path = std::string(dir) + "/" + arch + ".gguf";
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 ? path : std::string();
}

//===----------------------------------------------------------------------===//
// Semantic mutations of plan JSON
//===----------------------------------------------------------------------===//

/// A value near one the validator compares against: small, aligned, huge,
/// or just past a power of two.
int64_t interesting(std::mt19937_64 &rng) {
  static const int64_t kValues[] = {0,         1,         -1,        15,
                                    16,        255,       256,       4096,
                                    1 << 20,   1 << 30,   1LL << 40, 1LL << 50,
                                    1LL << 61, INT64_MAX, INT64_MIN};
  if (rng() % 2)
    return kValues[rng() % std::size(kValues)];
  return static_cast<int64_t>(rng() % 4096) * 16;
}

/// A random element of the array \p a (non-empty), or null.
json *pick(json &a, std::mt19937_64 &rng) {
  if (!a.is_array() || a.empty())
    return nullptr;
  return &a[rng() % a.size()];
}

/// One edit of a parsed plan where the validator looks; false if the plan
/// has nothing of that kind.
bool mutatePlan(json &p, std::mt19937_64 &rng) {
  json &bufs = p["buffers"], &kernels = p["kernels"];
  switch (rng() % 12) {
  case 0: { // move a buffer (misaligned sometimes, overlapping often)
    json *b = pick(bufs, rng);
    if (!b)
      return false;
    json *other = pick(bufs, rng);
    (*b)["offset"] = rng() % 3 == 0 ? (*other)["offset"].get<int64_t>()
                     : rng() % 2    ? static_cast<int64_t>(rng() % 1024) * 256
                                    : interesting(rng);
    return true;
  }
  case 1: { // resize a buffer or the arena
    if (rng() % 2 == 0) {
      p["arena"]["bytes"] = interesting(rng);
      return true;
    }
    json *b = pick(bufs, rng);
    if (!b)
      return false;
    (*b)["bytes"] = interesting(rng);
    return true;
  }
  case 2: { // a view of another buffer, or none
    json *b = pick(bufs, rng);
    if (!b)
      return false;
    if (rng() % 3 == 0)
      b->erase("view_of");
    else
      (*b)["view_of"] = rng() % std::max<size_t>(bufs.size(), 1);
    return true;
  }
  case 3: { // tie an output to some input, or untie it
    json *k = pick(kernels, rng);
    if (!k || !(*k)["outputs"].is_array() || (*k)["outputs"].empty())
      return false;
    json tied = json::array();
    for (size_t o = 0; o < (*k)["outputs"].size(); ++o)
      tied.push_back(
          rng() % 2 ? -1
                    : static_cast<int64_t>(
                          rng() % std::max<size_t>((*k)["inputs"].size(), 1)));
    (*k)["tied"] = tied;
    return true;
  }
  case 4: { // temporaries: many, huge, or of a T-dependent shape
    json *k = pick(kernels, rng);
    if (!k || !k->contains("fused"))
      return false;
    json temp = {{"dtype", rng() % 2 ? "f32" : "bf16"},
                 {"shape", json::array({json::array({rng() % 4, 1LL << 40}),
                                        interesting(rng)})}};
    size_t n = 1 + rng() % (rng() % 4 == 0 ? 4096 : 3);
    for (size_t i = 0; i < n; ++i)
      (*k)["temps"].push_back(temp);
    return true;
  }
  case 5: { // a code workspace as a function of T
    json *k = pick(kernels, rng);
    if (!k || !k->contains("code"))
      return false;
    (*k)["code"]["workspace_bytes"] =
        json::array({interesting(rng), interesting(rng)});
    return true;
  }
  case 6: { // a grid dim or shared memory size
    json *k = pick(kernels, rng);
    if (!k || !k->contains("code"))
      return false;
    json &c = (*k)["code"];
    if (rng() % 2)
      c["shared_bytes"] = interesting(rng);
    else if (c["grid"].is_array() && !c["grid"].empty())
      c["grid"][rng() % c["grid"].size()] =
          json::array({interesting(rng), interesting(rng)});
    return true;
  }
  case 7: { // an operand names another buffer
    json *k = pick(kernels, rng);
    if (!k || bufs.empty())
      return false;
    uint64_t b = rng() % bufs.size();
    if (rng() % 2 && !(*k)["outputs"].empty())
      (*k)["outputs"][rng() % (*k)["outputs"].size()] = b;
    else if (json *in = pick((*k)["inputs"], rng))
      *in = {{"buffer", b}};
    return true;
  }
  case 8: { // an argument names other storage
    json *k = pick(kernels, rng);
    if (!k || !k->contains("code") || (*k)["code"]["args"].empty())
      return false;
    static const char *kArgs[] = {"buffer:", "weight:", "tmap:"};
    (*k)["code"]["args"][rng() % (*k)["code"]["args"].size()] =
        std::string(kArgs[rng() % 3]) +
        std::to_string(rng() % std::max<size_t>(bufs.size(), 1));
    return true;
  }
  case 9: { // swap two kernels (reads before writes)
    if (kernels.size() < 2)
      return false;
    std::swap(kernels[rng() % kernels.size()], kernels[rng() % kernels.size()]);
    return true;
  }
  case 10: { // code on a host plan, tensor maps elsewhere: another target
    static const char *kTargets[] = {"host", "gfx1151", "sm_90", "tpu9000"};
    p["target"] = kTargets[rng() % 4];
    return true;
  }
  default: { // max_tokens
    p["max_tokens"] =
        rng() % 2 ? static_cast<int64_t>(1 + rng() % 64) : interesting(rng);
    return true;
  }
  }
}

//===----------------------------------------------------------------------===//
// Moving a valid plan's buffers
//===----------------------------------------------------------------------===//

/// \p plan with its storage sets placed elsewhere: one set at a random
/// aligned offset, or every set packed again (first fit in a random order).
/// Views and in-place outputs move with their set.
format::Plan moved(const format::Plan &plan, std::mt19937_64 &rng) {
  format::Plan out = plan;
  std::vector<format::LiveSet> sets = format::planLiveSets(plan);
  if (sets.empty())
    return out;
  std::vector<uint64_t> offsets(sets.size());
  for (size_t i = 0; i < sets.size(); ++i)
    offsets[i] = plan.buffers[sets[i].values[0]].offset;
  if (rng() % 2) {
    size_t s = rng() % sets.size();
    offsets[s] = (rng() % ((plan.arenaBytes + sets[s].bytes) / 256 + 1)) * 256;
  } else {
    std::vector<size_t> order(sets.size());
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    std::vector<bool> placed(sets.size(), false);
    for (size_t s : order) {
      std::vector<std::pair<uint64_t, uint64_t>> busy;
      for (size_t o = 0; o < sets.size(); ++o)
        if (placed[o] &&
            !(sets[o].end < sets[s].start || sets[s].end < sets[o].start))
          busy.push_back({offsets[o], offsets[o] + sets[o].bytes});
      std::sort(busy.begin(), busy.end());
      uint64_t at = 0;
      for (const auto &[lo, hi] : busy) {
        if (at + sets[s].bytes <= lo)
          break;
        at = std::max(at, (hi + 255) / 256 * 256);
      }
      offsets[s] = at;
      placed[s] = true;
    }
  }
  out.arenaBytes = 0;
  for (size_t i = 0; i < sets.size(); ++i) {
    for (uint32_t b : sets[i].values)
      out.buffers[b].offset = offsets[i];
    out.arenaBytes = std::max(out.arenaBytes, offsets[i] + sets[i].bytes);
  }
  // Buffers no kernel reads or writes keep their offsets.
  for (const format::PlanBuffer &b : out.buffers)
    out.arenaBytes = std::max(out.arenaBytes, b.offset + b.bytes);
  return out;
}

bool runPlan(const format::Plan &plan, const std::string &gguf,
             runtime::RunOutput &out, std::string &error) {
  auto ex = runtime::Executor::create(plan, gguf, "cpu", error,
                                      runtime::DeviceOptions{1});
  if (!ex) {
    if (error.empty())
      die("executor refused without a message", plan.arch);
    return false;
  }
  std::vector<int32_t> tokens;
  for (int64_t t = 0; t < std::min<int64_t>(plan.maxTokens, 3); ++t)
    tokens.push_back(static_cast<int32_t>(t + 1));
  if (!ex->run(tokens, out, error)) {
    if (error.empty())
      die("a run failed without a message", plan.arch);
    return false;
  }
  return true;
}

/// The bytes of the plan's generation states (allocated beside the arena).
uint64_t stateBytesOf(const format::Plan &plan) {
  uint64_t n = 0;
  for (const format::PlanState &st : plan.states)
    n += st.bytes; // validated: the sum is below 2^50
  return n;
}

uint64_t workspaceOf(const format::Plan &plan) {
  uint64_t workspace = 0;
  for (const format::PlanKernel &k : plan.kernels)
    workspace = std::max(workspace, k.workspaceBytes(plan.maxTokens));
  return workspace;
}

} // namespace

extern "C" size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size,
                                          size_t maxSize, unsigned seed) {
  std::mt19937_64 rng(seed);
  // Half the time a plan-level edit (when the input parses), else bytes.
  if (rng() % 2) {
    json p = json::parse(data, data + size, nullptr, false);
    if (p.is_object() && p.contains("buffers") && p.contains("kernels")) {
      bool changed = false;
      // Byte edits leave plans whose fields have the wrong JSON type (a
      // string "temps", an object "outputs"); the plan-level edits assume
      // the written types, so such a plan takes byte edits only. The
      // reader under test sees those plans through LLVMFuzzerMutate.
      try {
        for (int i = 0, n = 1 + static_cast<int>(rng() % 3); i < n; ++i)
          changed |= mutatePlan(p, rng);
      } catch (const json::exception &) {
        changed = false;
      }
      std::string text = p.dump(1);
      if (changed && text.size() <= maxSize) {
        std::memcpy(data, text.data(), text.size());
        return text.size();
      }
    }
  }
  return LLVMFuzzerMutate(data, size, maxSize);
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::string text(reinterpret_cast<const char *>(data), size);
  format::Plan plan;
  std::string error;
  if (!format::planFromJson(text, "fuzz.json", plan, error)) {
    if (error.empty())
      die("rejected without a message", text);
    return 0;
  }
  // What validates writes back and reads back to the same plan.
  std::string once = format::planToJson(plan);
  format::Plan again;
  if (!format::planFromJson(once, "again.json", again, error))
    die("a written plan does not read back", error);
  if (format::planToJson(again) != once)
    die("a plan does not round-trip", once);

  std::string gguf = ggufFor(plan.arch);
  if (gguf.empty() || plan.arenaBytes > kMaxBytes ||
      workspaceOf(plan) > kMaxBytes || stateBytesOf(plan) > kMaxBytes)
    return 0;
  runtime::RunOutput first;
  if (!runPlan(plan, gguf, first, error))
    return 0;
  // Moved placements: refused, or the same logits bit for bit.
  std::mt19937_64 rng(std::hash<std::string>{}(text));
  for (int round = 0; round < 2; ++round) {
    format::Plan m = moved(plan, rng);
    if (!format::validatePlan(m, error) || m.arenaBytes > kMaxBytes)
      continue;
    runtime::RunOutput second;
    if (!runPlan(m, gguf, second, error))
      die("a moved plan the validator accepted failed to run", error);
    if (second.data.size() != first.data.size() ||
        second.shape != first.shape ||
        std::memcmp(second.data.data(), first.data.data(),
                    first.data.size() * sizeof(float)) != 0)
      die("a moved plan the validator accepted computes other logits",
          format::planToJson(m));
  }
  return 0;
}
