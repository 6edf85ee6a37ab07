//===- RewriteTest.cpp - Rewriter::fuse and unfuse ------------------------===//
#include "ir/Rewrite.h"
#include "ir/Parser.h"
#include "ir/Printer.h"
#include "ir/Verifier.h"

#include <gtest/gtest.h>

#include <sstream>

using namespace strata::ir;

namespace {

std::unique_ptr<Module> parse(const std::string &text) {
  SourceMgr sm;
  std::ostringstream os;
  DiagnosticEngine diag(sm, os);
  auto m = parseModule(sm, sm.addBuffer("t.strata", text), diag);
  EXPECT_TRUE(m && verifyModule(*m, diag)) << os.str();
  return m;
}

bool verifies(Module &m) {
  SourceMgr sm;
  std::ostringstream os;
  DiagnosticEngine diag(sm, os);
  bool ok = verifyModule(m, diag);
  EXPECT_TRUE(ok) << os.str() << printModule(m);
  return ok;
}

const char *kFused = R"(model m {
  func @main(%x: f32[T, 8]) -> (f32[T, 4], f32[T, 4]) {
    %b = fused "matmul+sigmoid"(%x.in = %x) {
      %b0 = matmul(%x.in, weight<f32>("wb", [4, 8])) : f32[T, 4]
      %b = sigmoid(%b0) : f32[T, 4]
      yield %b
    } : f32[T, 4]
    %c = neg(%b)
    %d = matmul(%x, weight<f32>("wd", [4, 8]))
    return %c, %d
  }
})";

} // namespace

TEST(Rewrite, UnfuseGivesTheBodyBackInPlace) {
  auto m = parse(kFused);
  Func &f = *m->funcs[0];
  Rewriter rw(f);
  Operation *fused = f.body.ops[0].get();
  std::vector<Operation *> ops = rw.unfuse(fused);
  ASSERT_EQ(ops.size(), 2u);
  EXPECT_EQ(ops[0]->kind, OpKind::Matmul);
  EXPECT_EQ(ops[1]->kind, OpKind::Sigmoid);
  EXPECT_EQ(rw.lastRewriteStart(), 0u);
  ASSERT_TRUE(verifies(*m));
  // The body's ops read %x again; %c reads the sigmoid's value.
  EXPECT_EQ(f.body.ops[0].get(), ops[0]);
  EXPECT_EQ(ops[0]->operands[0].value, f.params[0].value);
  EXPECT_EQ(f.body.ops[2]->operands[0].value, ops[1]->results[0]);
  EXPECT_EQ(rw.defUse().uses(ops[1]->results[0]).size(), 1u);
  // Fusing the two GEMM chains again: one kernel, both values out.
  Operation *both = rw.fuse({ops[0], ops[1], f.body.ops[3].get()}, "s");
  ASSERT_NE(both, nullptr);
  EXPECT_EQ(both->results.size(), 2u);
  EXPECT_EQ(both->operands.size(), 1u);
  ASSERT_TRUE(verifies(*m));
}

TEST(Rewrite, UnfuseRefusesWhatIsNoPlainFusedKernel) {
  auto m = parse(kFused);
  Func &f = *m->funcs[0];
  Rewriter rw(f);
  // Not a fused op: nothing changes.
  const std::string before = printModule(*m);
  EXPECT_TRUE(rw.unfuse(f.body.ops[1].get()).empty());
  // A kernel whose result overwrites its input (tied) keeps its body.
  Operation *fused = f.body.ops[0].get();
  auto list = std::make_shared<Expr>();
  list->kind = ExprKind::List;
  fused->attrs.push_back(Attr{"tied", list, fused->loc});
  EXPECT_TRUE(rw.unfuse(fused).empty());
  fused->attrs.pop_back();
  EXPECT_EQ(printModule(*m), before);
}

// fuseKernels: a fused kernel and a top-level op become one kernel whose
// body holds the fused kernel's ops and the op, in body order.
TEST(Rewrite, FuseKernelsJoinsBodiesAndOps) {
  auto m = parse(kFused);
  Func &f = *m->funcs[0];
  Rewriter rw(f);
  Operation *fused = f.body.ops[0].get(), *neg = f.body.ops[1].get();
  ASSERT_TRUE(rw.canFuse({fused, neg}));
  Operation *k = rw.fuseKernels({fused, neg}, "matmul+sigmoid+neg");
  ASSERT_NE(k, nullptr);
  ASSERT_TRUE(verifies(*m));
  EXPECT_EQ(k->callee, "matmul+sigmoid+neg");
  ASSERT_EQ(k->regions.size(), 1u);
  std::vector<OpKind> kinds;
  for (const auto &op : k->regions[0]->ops)
    kinds.push_back(op->kind);
  EXPECT_EQ(kinds, (std::vector<OpKind>{OpKind::Matmul, OpKind::Sigmoid,
                                        OpKind::Neg, OpKind::Yield}));
  // Only %c leaves the kernel (the sigmoid's value became a temporary).
  EXPECT_EQ(k->results.size(), 1u);
  EXPECT_EQ(f.body.ops.size(), 3u); // the kernel, %d's matmul, return
}
