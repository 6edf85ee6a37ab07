//===- StateEmitterTest.cpp - the state family's launches and arguments ---===//
//
// The generation state ops become kernels of the `state` family on both GPU
// targets: states are `state:N` arguments (written in place: no const), the
// grids follow the rows (and heads), and what the family cannot express is
// refused with a reason. (Their numbers are checked on the H200 by
// test/device/state_run.sh against the cpu backend.)
//
//===----------------------------------------------------------------------===//
#include "codegen/KernelEmitter.h"
#include "runtime/format/Plan.h"

#include <gtest/gtest.h>

#include <algorithm>

using namespace strata;

namespace {

/// q [T, 4, 16], k/v [T, 2, 16] (bf16), seq/pos i32 [T], out [T, 4, 16]; a
/// K and a V cache of 3 slots x 32 positions; kernels kv_store(K, k),
/// kv_store(V, v), attention_cached(q, K, V, seq, pos).
format::Plan cachePlan(const std::string &target) {
  format::Plan p;
  p.model = p.arch = "m";
  p.target = target;
  p.maxTokens = 16;
  p.version = 3;
  const format::PlanDim t{1, 0, 1};
  auto add = [&](const char *name, format::PlanDType dt,
                 std::vector<format::PlanDim> shape, uint64_t bytes) {
    uint64_t offset = p.arenaBytes;
    p.buffers.push_back({name, dt, std::move(shape), offset, bytes});
    p.arenaBytes += (bytes + 255) / 256 * 256;
    return static_cast<uint32_t>(p.buffers.size() - 1);
  };
  using D = format::PlanDType;
  uint32_t tok = add("tok", D::I32, {t}, 64);
  uint32_t pos = add("pos", D::I32, {t}, 64);
  uint32_t seq = add("seq", D::I32, {t}, 64);
  uint32_t q = add("q", D::BF16, {t, {0, 4, 1}, {0, 16, 1}}, 16 * 64 * 2);
  uint32_t k = add("k", D::BF16, {t, {0, 2, 1}, {0, 16, 1}}, 16 * 32 * 2);
  uint32_t v = add("v", D::BF16, {t, {0, 2, 1}, {0, 16, 1}}, 16 * 32 * 2);
  uint32_t o = add("o", D::BF16, {t, {0, 4, 1}, {0, 16, 1}}, 16 * 64 * 2);
  for (const char *name : {"blk.0.k_cache", "blk.0.v_cache"})
    p.states.push_back({name, D::F32, {3, 32, 2, 16}, 3 * 32 * 2 * 16 * 4});
  auto state = [](uint32_t i) {
    format::PlanOperand s;
    s.index = i;
    s.isState = true;
    return s;
  };
  auto buf = [](uint32_t i) { return format::PlanOperand{false, i}; };
  for (uint32_t s : {0u, 1u}) {
    format::PlanKernel store;
    store.recipe = format::Recipe::KvStore;
    store.inputs = {state(s), buf(s == 0 ? k : v), buf(seq), buf(pos)};
    p.kernels.push_back(store);
  }
  format::PlanKernel att;
  att.recipe = format::Recipe::AttentionCached;
  att.inputs = {buf(q), state(0), state(1), buf(seq), buf(pos)};
  att.outputs = {o};
  format::PlanAttr scale;
  scale.kind = format::PlanAttr::Kind::Float;
  scale.f = 0.25;
  att.attrs["scale"] = scale;
  p.kernels.push_back(att);
  p.inputs = {tok, pos, seq};
  p.outputs = {o};
  p.options["max_context"] = 32;
  p.options["max_batch"] = 3;
  return p;
}

} // namespace

TEST(StateEmitter, StatesAreArgumentsWrittenInPlace) {
  for (const char *target : {"sm_90", "gfx1151"}) {
    SCOPED_TRACE(target);
    format::Plan p = cachePlan(target);
    codegen::EmittedKernel store, att;
    std::string error;
    ASSERT_TRUE(codegen::emitKernel(p, 1, target, store, error)) << error;
    EXPECT_EQ(store.family, "state");
    EXPECT_EQ(store.args,
              (std::vector<std::string>{"state:1", "buffer:5", "buffer:2",
                                        "buffer:1", "T"}));
    // One block per row; the state pointer is not const.
    EXPECT_EQ(store.grid[0].coef, 1);
    EXPECT_NE(store.body.find("float *__restrict__ in0"), std::string::npos)
        << store.body;
    EXPECT_EQ(store.body.find("const float *__restrict__ in0"),
              std::string::npos);
    ASSERT_TRUE(codegen::emitKernel(p, 2, target, att, error)) << error;
    EXPECT_EQ(att.family, "state");
    EXPECT_EQ(att.args, (std::vector<std::string>{
                            "buffer:3", "state:0", "state:1", "buffer:2",
                            "buffer:1", "buffer:6", "T"}));
    // A block per (row, head), four waves.
    EXPECT_EQ(att.grid[0].coef, 1);
    EXPECT_EQ(att.grid[1].constant, 4);
    EXPECT_EQ(att.block[0], 128);
  }
}

TEST(StateEmitter, RefusesWhatItCannotExpress) {
  format::Plan p = cachePlan("sm_90");
  // A head dim above 256: more than eight values a lane.
  p.buffers[3].shape[2].constant = 512;
  p.states[0].shape[3] = 512;
  codegen::EmittedKernel out;
  std::string error;
  EXPECT_FALSE(codegen::emitKernel(p, 2, "sm_90", out, error));
  EXPECT_NE(error.find("a head dim above 256"), std::string::npos) << error;
}
