//===- OpTableTest.cpp - every op of the table is whole -------------------===//
//
// Each op of runtime/format/Ops.def must have a CPU implementation (the cpu
// backend's dispatch is generated from the table, so a missing run<Id> is a
// link error; here: the backend says it supports every op), a cost rule that
// counts its bytes and FLOPs (cost<Cost> is generated too; here: every op of
// the round-trip lit test gets positive bytes and non-negative FLOPs at
// several T), and a lit round trip (test/IR/roundtrip-ops.strata or
// roundtrip-qwen4exp-ops.strata writes it).
//
//===----------------------------------------------------------------------===//
#include "ir/OpCost.h"
#include "ir/Parser.h"
#include "ir/Verifier.h"
#include "runtime/Device.h"

#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <set>
#include <sstream>

using namespace strata;

namespace {

std::string readFile(const std::string &path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

const char *kRoundTrips[] = {STRATA_SOURCE_DIR "/test/IR/roundtrip-ops.strata",
                             STRATA_SOURCE_DIR
                             "/test/IR/roundtrip-qwen4exp-ops.strata"};

} // namespace

TEST(OpTable, EveryOpHasACpuImplementation) {
  std::string error;
  auto cpu = runtime::createDevice("cpu", error);
  ASSERT_TRUE(cpu) << error;
  for (const format::RecipeInfo &r : format::allRecipes())
    EXPECT_TRUE(cpu->supports(r.id)) << r.name;
}

TEST(OpTable, EveryOpHasALitRoundTripAndACostRule) {
  std::set<std::string> seen;
  for (const char *path : kRoundTrips) {
    std::string text = readFile(path);
    ASSERT_FALSE(text.empty()) << path;
    ir::SourceMgr sm;
    std::ostringstream diags;
    ir::DiagnosticEngine diag(sm, diags);
    auto m = ir::parseModule(sm, sm.addBuffer(path, text), diag);
    ASSERT_TRUE(m && ir::verifyModule(*m, diag)) << diags.str();
    std::function<void(const ir::Block &)> visit = [&](const ir::Block &b) {
      for (const auto &op : b.ops) {
        for (const auto &region : op->regions)
          visit(*region);
        const ir::OpInfo *info = ir::opInfo(op->kind);
        if (!info)
          continue;
        seen.insert(info->mnemonic);
        // Every op's types are known in the round-trip files, so its cost
        // rule gives the bytes it moves and its FLOPs at any T.
        ir::KernelCost c = ir::kernelCost(*op);
        for (int64_t t : {1, 7, 64, 4096}) {
          EXPECT_GT(c.bytes.at(t), 0) << info->mnemonic << " at T = " << t;
          EXPECT_GE(c.flops.at(t), 0) << info->mnemonic << " at T = " << t;
        }
      }
    };
    for (const auto &f : m->funcs)
      visit(f->body);
  }
  for (const format::RecipeInfo &r : format::allRecipes())
    EXPECT_TRUE(seen.count(r.name))
        << "op '" << r.name << "' has no lit round trip";
}

// qsa_select's FLOPs are the indexer's dot products: query t scores its
// (t + 1) / block visible blocks, 2 * Hi * Di each (here Hi = 4, Di = 32,
// block = 4), not one operation per result element.
/// A verified round-trip file and its last op named \p mnemonic at the top
/// level of a function (null if none; \p error says why).
struct FoundOp {
  ir::SourceMgr sm;
  std::unique_ptr<ir::Module> module;
  const ir::Operation *op = nullptr;
  std::string error;
};
static std::unique_ptr<FoundOp> findOp(const char *path,
                                       const std::string &mnemonic) {
  auto found = std::make_unique<FoundOp>();
  std::string text = readFile(path);
  std::ostringstream diags;
  ir::DiagnosticEngine diag(found->sm, diags);
  found->module =
      ir::parseModule(found->sm, found->sm.addBuffer(path, text), diag);
  if (!found->module || !ir::verifyModule(*found->module, diag)) {
    found->error = diags.str();
    return found;
  }
  for (const auto &f : found->module->funcs)
    for (const auto &op : f->body.ops)
      if (ir::opInfo(op->kind) && ir::opInfo(op->kind)->mnemonic == mnemonic)
        found->op = op.get();
  if (!found->op)
    found->error = "no " + mnemonic + " in " + path;
  return found;
}

TEST(OpTable, QsaSelectCountsTheIndexerDotProducts) {
  auto found = findOp(kRoundTrips[1], "qsa_select");
  ASSERT_NE(found->op, nullptr) << found->error;
  const ir::Operation *select = found->op;
  ir::KernelCost c = ir::kernelCost(*select);
  for (int64_t t : {4, 64, 4096}) {
    double expected = t * (t + 1) / 2.0 / 4 * (2 * 4 * 32);
    EXPECT_NEAR(c.flops.at(t), expected, 1e-9 * expected) << "T = " << t;
  }
}

// Expert stacks are read in part: T rows routed to k of E experts each read
// the expected distinct experts E (1 - (1 - k/E)^T). The fraction is exact
// at its samples, linear (below the curve) between them, 1 once saturated.
TEST(OpTable, ExpertStacksReadTheExpectedDistinctExperts) {
  const double e = 512, k = 10;
  format::PlanPoly f = ir::expertFraction(e, k);
  EXPECT_EQ(f.at(0), 0);
  for (int64_t t : {1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128})
    EXPECT_NEAR(f.at(t), ir::expectedExperts(e, k, t) / e, 1e-12) << t;
  EXPECT_NEAR(f.at(1), k / e, 1e-15);
  double last = 0;
  for (int64_t t = 1; t <= 5000; ++t) {
    double v = f.at(t), exact = ir::expectedExperts(e, k, t) / e;
    EXPECT_GE(v, last) << "monotone at T = " << t;
    // A floor, but for the saturated tail (1 once within 1e-6 of it).
    EXPECT_LE(v, exact + (v == 1 ? 1e-6 : 1e-12)) << "a floor at T = " << t;
    EXPECT_GE(v, exact - 0.02) << "close at T = " << t;
    last = v;
  }
  EXPECT_EQ(f.at(100000), 1);
  EXPECT_EQ(ir::expertFraction(4, 4).at(1), 1) << "every expert routed";

  // moe_experts of the round trip (E = 8, k = 2): its three stacks count
  // k/E of their bytes at T = 1 and all of them at large T.
  auto found = findOp(kRoundTrips[0], "moe_experts");
  ASSERT_NE(found->op, nullptr) << found->error;
  const ir::Operation *experts = found->op;
  double stacks = 0;
  for (size_t i = 2; i < 5; ++i)
    stacks += ir::tensorBytes(experts->operands[i].type()).at(0);
  ir::KernelCost c = ir::kernelCost(*experts);
  double rest1 = c.bytes.at(1) - stacks * 2 / 8;
  double restBig = c.bytes.at(4096) - stacks;
  // What is left is the activations: linear in T.
  EXPECT_GT(rest1, 0);
  EXPECT_NEAR(restBig / 4096, rest1, 1e-6 * restBig);
}

// moe_route's expert stacks (prefetch-experts' hints) cost nothing: the
// grouped GEMMs that read the slabs count their bytes, so a hinted route
// costs what the plain one does.
TEST(OpTable, RouteHintsAddNoBytes) {
  auto found = findOp(kRoundTrips[0], "moe_route");
  ASSERT_NE(found->op, nullptr) << found->error;
  const ir::Operation *hinted = found->op, *plain = nullptr;
  for (const auto &f : found->module->funcs)
    for (const auto &op : f->body.ops)
      if (op.get() != hinted && op->kind == hinted->kind &&
          op->operands.size() == 1 &&
          op->results[0]->type.str() == hinted->results[0]->type.str())
        plain = op.get();
  ASSERT_EQ(hinted->operands.size(), 4u) << "the round trip's last route";
  ASSERT_NE(plain, nullptr);
  ir::KernelCost h = ir::kernelCost(*hinted), p = ir::kernelCost(*plain);
  for (int64_t t : {1, 16, 4096}) {
    EXPECT_EQ(h.bytes.at(t), p.bytes.at(t)) << "T = " << t;
    EXPECT_EQ(h.flops.at(t), p.flops.at(t)) << "T = " << t;
  }
}
