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
// capped).
//
//===----------------------------------------------------------------------===//
#include "runtime/Executor.h"
#include "runtime/format/Plan.h"

#include <cstdio>
#include <cstdlib>
#include <string>
#include <sys/stat.h>

using namespace strata;

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

} // namespace

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

  uint64_t workspace = 0;
  for (const format::PlanKernel &k : plan.kernels)
    workspace = std::max(workspace, k.workspaceBytes(plan.maxTokens));
  std::string gguf = ggufFor(plan.arch);
  if (gguf.empty() || plan.arenaBytes > kMaxBytes || workspace > kMaxBytes)
    return 0;
  auto ex = runtime::Executor::create(plan, gguf, "cpu", error,
                                      runtime::DeviceOptions{1});
  if (!ex) {
    if (error.empty())
      die("executor refused without a message", plan.arch);
    return 0;
  }
  std::vector<int32_t> tokens;
  for (int64_t t = 0; t < std::min<int64_t>(plan.maxTokens, 3); ++t)
    tokens.push_back(static_cast<int32_t>(t + 1));
  runtime::RunOutput out;
  if (!ex->run(tokens, out, error) && error.empty())
    die("a run failed without a message", plan.arch);
  return 0;
}
