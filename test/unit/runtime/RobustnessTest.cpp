//===- RobustnessTest.cpp - random launches never crash the CPU backend ---===//
//
// Every recipe gets launches with random operand counts, shapes, element
// types, attributes and index values. Each must either succeed or return an
// error; none may crash or touch memory outside its operands (operands are
// sized exactly, so a sanitizer build catches a stray access).
//
//===----------------------------------------------------------------------===//
#include "RuntimeTestUtil.h"

using namespace strata::runtime;
using namespace strata::runtime::test;

namespace {

std::vector<int64_t> randomShape(Rng &rng) {
  std::vector<int64_t> s(rng.integer(0, 4));
  for (int64_t &d : s)
    d = rng.integer(0, 19) == 0 ? 0 : rng.integer(1, 4);
  return s;
}

HostTensor randomOperand(Rng &rng, bool allowWeight) {
  if (allowWeight && rng.integer(0, 4) == 0) {
    std::vector<int64_t> s = randomShape(rng);
    if (s.empty() || s.back() == 0)
      s.push_back(1);
    bool q8 = rng.integer(0, 1) == 1;
    if (q8)
      s.back() = 32;
    return weight(q8 ? GgmlType::Q8_0 : GgmlType::F32, s, rng.normal(count(s)));
  }
  std::vector<int64_t> s = randomShape(rng);
  int64_t pick = rng.integer(0, 7);
  if (pick < 2) {
    std::vector<int32_t> v = rng.integers(count(s), -1, 6);
    return ids(s, v);
  }
  return buffer(s, rng.normal(count(s)),
                pick == 2 ? PlanDType::F16 : PlanDType::F32);
}

PlanAttr randomAttr(Rng &rng) {
  switch (rng.integer(0, 5)) {
  case 0:
    return aInt(rng.integer(-2, 6));
  case 1:
    return aFloat(rng.uniform(1, -1, 2)[0]);
  case 2:
    return aBool(rng.integer(0, 1) == 1);
  case 3: {
    static const char *kStrs[] = {"f32",    "f16",     "i32",     "neox",
                                  "normal", "softmax", "sigmoid", "x"};
    return aStr(kStrs[rng.integer(0, 7)]);
  }
  case 4: {
    std::vector<int64_t> v(rng.integer(0, 4));
    for (int64_t &x : v)
      x = rng.integer(-1, 4);
    return aInts(v);
  }
  default: {
    PlanAttr a;
    a.kind = PlanAttr::Kind::Floats;
    a.floats = {0.5, 1.5};
    return a;
  }
  }
}

TEST(CpuRobustness, RandomLaunchesOfEveryRecipeNeverCrash) {
  Rng rng;
  SCOPED_TRACE(rng.trace());
  static const char *kNames[] = {
      "eps",  "s",        "b",     "to",     "axis",  "groups", "mode", "dims",
      "base", "sections", "scale", "causal", "gated", "block",  "k",    "func",
      "norm", "n",        "iters", "perm",   "start", "end"};
  int succeeded = 0;
  for (const format::RecipeInfo &r : format::allRecipes()) {
    SCOPED_TRACE(r.name);
    for (int iter = 0; iter < 300; ++iter) {
      std::vector<HostTensor> ins, outs;
      int64_t nin = rng.integer(r.minInputs, r.maxInputs < 0 ? 8 : r.maxInputs);
      for (int64_t i = 0; i < nin; ++i)
        ins.push_back(randomOperand(rng, true));
      // A state write lists no output (it writes its input 0).
      for (int o = 0; o < format::planOutputs(r); ++o) {
        // Half the time the output looks like the first input, which gets
        // past more checks.
        std::vector<int64_t> s = !ins.empty() && rng.integer(0, 1) == 0
                                     ? ins[0].shape
                                     : randomShape(rng);
        outs.push_back(output(s, rng.integer(0, 3) == 0 ? PlanDType::I32
                                                        : PlanDType::F32));
      }
      AttrMap attrs;
      for (const char *name : kNames)
        if (rng.integer(0, 2) == 0)
          attrs[name] = randomAttr(rng);
      std::vector<HostTensor *> inPtrs, outPtrs;
      for (HostTensor &t : ins)
        inPtrs.push_back(&t);
      for (HostTensor &t : outs)
        outPtrs.push_back(&t);
      std::string error;
      bool ok = runKernel(r.id, attrs, inPtrs, outPtrs, error,
                          static_cast<int>(rng.integer(1, 2)));
      if (ok)
        ++succeeded;
      else
        EXPECT_FALSE(error.empty());
      EXPECT_EQ(error.find("internal error"), std::string::npos) << error;
    }
  }
  // Some random launches are consistent and run to completion.
  EXPECT_GT(succeeded, 100);
}

/// A launch with the wrong operand count is refused before any kernel runs.
TEST(CpuRobustness, OperandCountsAreChecked) {
  HostTensor x = buffer({2}, {1, 2}), y = output({2});
  std::string error;
  EXPECT_FALSE(runKernel(Recipe::Add, {}, {&x}, {&y}, error));
  EXPECT_EQ(error, "takes 2..2 inputs and 1 outputs, got 1 and 1");
  EXPECT_FALSE(runKernel(Recipe::MoeRoute, {}, {&x}, {&y}, error));
  EXPECT_EQ(error, "takes 1..4 inputs and 2 outputs, got 1 and 1");
  HostTensor short_ = x;
  short_.bytes.resize(4);
  EXPECT_FALSE(runKernel(Recipe::Neg, {}, {&short_}, {&y}, error));
  EXPECT_EQ(error, "input 0 't' [2] needs 8 bytes, only 4 are addressable");
}

} // namespace
