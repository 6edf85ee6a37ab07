//===- CachedKernelTest.cpp - the cached ops' launches and arguments ------===//
//
// The generation state ops become kernels of the families whose math they
// step (kv_store and attention_cached: attention; qsa_select_cached: qsa)
// on both GPU targets: states are `state:N` arguments (written in place: no
// const), the grids follow the rows (and heads), the decode step's attention
// and QSA selection are split over the GPU by a pre-launch, and what the family
// cannot express is refused with a reason. (Their numbers are checked on
// the H200 by test/device/state_run.sh against the cpu backend.)
//
//===----------------------------------------------------------------------===//
#include "codegen/KernelEmitter.h"
#include "runtime/format/Plan.h"

#include <gtest/gtest.h>

#include <algorithm>

using namespace strata;

namespace {

/// q [T, 4, 16], k/v [T, 2, 16] (bf16), seq/pos i32 [T], out [T, 4, 16]; a
/// K and a V cache of 3 slots x \p context positions; kernels kv_store(K,
/// k), kv_store(V, v), attention_cached(q, K, V, seq, pos).
format::Plan cachePlan(const std::string &target, uint64_t context = 32,
                       int64_t maxTokens = 16) {
  format::Plan p;
  p.model = p.arch = "m";
  p.target = target;
  p.maxTokens = maxTokens;
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
    p.states.push_back(
        {name, D::F32, {3, context, 2, 16}, 3 * context * 2 * 16 * 4});
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
  p.options["max_context"] = static_cast<int64_t>(context);
  p.options["max_batch"] = 3;
  return p;
}

} // namespace

TEST(CachedKernel, StatesAreArgumentsWrittenInPlace) {
  for (const char *target : {"sm_90", "gfx1151"}) {
    SCOPED_TRACE(target);
    format::Plan p = cachePlan(target);
    codegen::EmittedKernel store, att;
    std::string error;
    ASSERT_TRUE(codegen::emitKernel(p, 1, target, store, error)) << error;
    EXPECT_EQ(store.family, "attention");
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
    EXPECT_EQ(att.family, "attention");
    EXPECT_EQ(att.args, (std::vector<std::string>{
                            "buffer:3", "state:0", "state:1", "buffer:2",
                            "buffer:1", "buffer:6", "workspace", "T"}));
    // The merge: a block per (row, head, 32 value columns), four waves.
    EXPECT_EQ(att.grid[0].coef, 1);
    EXPECT_EQ(att.grid[1].constant, 4);
    EXPECT_EQ(att.grid[2].constant, 1);
    EXPECT_EQ(att.block[0], 128);
  }
}

TEST(CachedKernel, RefusesWhatItCannotExpress) {
  format::Plan p = cachePlan("sm_90");
  // A head dim above 256: more than eight values a lane.
  p.buffers[3].shape[2].constant = 512;
  p.states[0].shape[3] = 512;
  codegen::EmittedKernel out;
  std::string error;
  EXPECT_FALSE(codegen::emitKernel(p, 2, "sm_90", out, error));
  EXPECT_NE(error.find("a head dim above 256"), std::string::npos) << error;
}

namespace {

/// The units (SMs, CUs) of \p target, as Targets.def has them.
int64_t unitsOf(const std::string &target) {
  return target == "sm_90" ? 132 : 40;
}

/// cachePlan's attention made gated and block-sparse (QSA): gate [T, 4, 16]
/// and a block index i32 [T, 5] of blocks of 4 keys.
format::Plan sparsePlan(const std::string &target) {
  format::Plan p = cachePlan(target, 4096);
  const format::PlanDim t{1, 0, 1};
  uint64_t at = p.arenaBytes;
  p.buffers.push_back(
      {"gate", format::PlanDType::BF16, {t, {0, 4, 1}, {0, 16, 1}}, at, 2048});
  p.buffers.push_back(
      {"index", format::PlanDType::I32, {t, {0, 5, 1}}, at + 2048, 320});
  p.arenaBytes += 4096;
  format::PlanKernel &att = p.kernels[2];
  att.inputs.push_back({false, 7});
  att.inputs.push_back({false, 8});
  format::PlanAttr gated, block;
  gated.kind = format::PlanAttr::Kind::Bool;
  gated.b = true;
  block.kind = format::PlanAttr::Kind::Int;
  block.i = 4;
  att.attrs["gated"] = gated;
  att.attrs["block"] = block;
  return p;
}

/// One qsa_select_cached over block keys of 2 slots x \p nb blocks of 4
/// positions: q [T, 4, 128] (bf16), out i32 [T, top + 1].
format::Plan selectPlan(const std::string &target, uint64_t nb, int64_t top) {
  format::Plan p;
  p.model = p.arch = "m";
  p.target = target;
  p.maxTokens = 16;
  p.version = 3;
  const format::PlanDim t{1, 0, 1};
  using D = format::PlanDType;
  auto add = [&](const char *name, D dt, std::vector<format::PlanDim> shape,
                 uint64_t bytes) {
    p.buffers.push_back({name, dt, std::move(shape), p.arenaBytes, bytes});
    p.arenaBytes += (bytes + 255) / 256 * 256;
    return static_cast<uint32_t>(p.buffers.size() - 1);
  };
  uint32_t tok = add("tok", D::I32, {t}, 64);
  uint32_t pos = add("pos", D::I32, {t}, 64);
  uint32_t seq = add("seq", D::I32, {t}, 64);
  uint32_t q = add("q", D::BF16, {t, {0, 4, 1}, {0, 128, 1}}, 16 * 512 * 2);
  uint32_t o = add("o", D::I32, {t, {0, top + 1, 1}}, 16 * (top + 1) * 4);
  p.states.push_back(
      {"blk.0.indexer_keys", D::F32, {2, nb, 1, 128}, 2 * nb * 128 * 4});
  format::PlanOperand keys;
  keys.index = 0;
  keys.isState = true;
  format::PlanKernel sel;
  sel.recipe = format::Recipe::QsaSelectCached;
  sel.inputs = {{false, q}, keys, {false, seq}, {false, pos}};
  sel.outputs = {o};
  format::PlanAttr block, topAttr;
  block.kind = topAttr.kind = format::PlanAttr::Kind::Int;
  block.i = 4;
  topAttr.i = top;
  sel.attrs["block"] = block;
  sel.attrs["top"] = topAttr;
  p.kernels.push_back(sel);
  p.inputs = {tok, pos, seq};
  p.outputs = {o};
  p.options["max_context"] = static_cast<int64_t>(nb * 4);
  p.options["max_batch"] = 2;
  return p;
}

} // namespace

// The KV caches in bf16 and i8 (strata-compile --kv): the state pointers
// take the stored type, kv_store rounds (bf16) or quantises a head row per
// warp with its scale after the values (i8), the pre-launch dequantises
// keys and values as it loads them; only i8 sources embed
// runtime/KvQuant.h. The launches stay those of f32 caches.
TEST(CachedKernel, Bf16AndInt8CachesAreReadNatively) {
  for (const char *target : {"sm_90", "gfx1151"}) {
    SCOPED_TRACE(target);
    codegen::EmittedKernel f32Store, f32Att;
    std::string error;
    format::Plan base = cachePlan(target);
    ASSERT_TRUE(codegen::emitKernel(base, 0, target, f32Store, error));
    ASSERT_TRUE(codegen::emitKernel(base, 2, target, f32Att, error));
    EXPECT_FALSE(f32Store.kvQuant);
    EXPECT_FALSE(f32Att.kvQuant);
    for (format::PlanDType dt :
         {format::PlanDType::BF16, format::PlanDType::I8}) {
      SCOPED_TRACE(format::planDTypeName(dt));
      format::Plan p = cachePlan(target);
      for (format::PlanState &st : p.states) {
        st.dtype = dt;
        st.bytes = *format::stateBytes(dt, st.shape);
      }
      const bool i8 = dt == format::PlanDType::I8;
      const std::string ctype = i8 ? "int8_t" : "bf16";
      codegen::EmittedKernel store, att;
      ASSERT_TRUE(codegen::emitKernel(p, 0, target, store, error)) << error;
      EXPECT_NE(store.body.find(ctype + " *__restrict__ in0"),
                std::string::npos)
          << store.body;
      EXPECT_EQ(store.kvQuant, i8);
      if (i8) {
        // A warp per head row; rows of 16 values and a 4-byte scale.
        EXPECT_NE(store.body.find("kv_scale(warp_max(m))"), std::string::npos)
            << store.body;
        EXPECT_NE(store.body.find("*(float *)(q + 16L) = sc"),
                  std::string::npos);
      } else {
        EXPECT_NE(store.body.find("st(dst, i, ld(in1"), std::string::npos);
      }
      ASSERT_TRUE(codegen::emitKernel(p, 2, target, att, error)) << error;
      EXPECT_EQ(att.kvQuant, i8);
      EXPECT_NE(att.body.find("const " + ctype + " *kb = in1"),
                std::string::npos)
          << att.body;
      EXPECT_NE(att.body.find(i8 ? "kv_dequant4(kr, pc * 4, ksc, kv[u])"
                                 : "ld4(kr, pc * 4, kv[u])"),
                std::string::npos);
      EXPECT_NE(att.body.find(i8 ? "kv_dequant(vr[col], kv_row_scale(vr, 16L))"
                                 : "ld(vb, key * 32L + col)"),
                std::string::npos);
      // The same launches and workspace as over f32 caches.
      EXPECT_EQ(att.args, f32Att.args);
      EXPECT_EQ(att.pre->grid[2].constant, f32Att.pre->grid[2].constant);
      EXPECT_EQ(att.workspace.coef, f32Att.workspace.coef);
      EXPECT_EQ(store.block, f32Store.block);
    }
  }
}

TEST(CachedKernel, CachedAttentionSplitsKeysOverChunks) {
  for (const char *target : {"sm_90", "gfx1151"}) {
    SCOPED_TRACE(target);
    format::Plan p = cachePlan(target, 4096);
    codegen::EmittedKernel att;
    std::string error;
    ASSERT_TRUE(codegen::emitKernel(p, 2, target, att, error)) << error;
    // The pre-launch: a block per (row, kv head, chunk), so a K/V row is
    // read once for both query heads of its group, not once per head.
    ASSERT_TRUE(att.pre.has_value());
    EXPECT_EQ(att.pre->symbol, att.symbol + "_prep");
    EXPECT_NE(att.body.find("void " + att.symbol + "_prep("),
              std::string::npos);
    EXPECT_EQ(att.pre->grid[0].coef, 1);
    EXPECT_EQ(att.pre->grid[1].constant, 2);
    EXPECT_EQ(att.pre->block[0], 128);
    // One row at the full context fills the GPU: two blocks a unit, no
    // chunk shorter than 16 keys (attn-decode-chunk's default).
    int64_t chunks = att.pre->grid[2].constant;
    EXPECT_GE(chunks * 2, std::min<int64_t>(2 * unitsOf(target), 4096 / 16));
    EXPECT_LE(chunks, 4096 / 16);
    // Partials per row: (m, l) and 16 unnormalised values per head and
    // chunk, f(T) with no constant part.
    EXPECT_EQ(att.workspace.coef, (4 * chunks * (16 + 2) + 3) / 4 * 4 * 4);
    EXPECT_EQ(att.workspace.constant, 0);
    EXPECT_EQ(att.workspace.div, 1);
    // The merge reads them; nothing accumulates across blocks by atomics.
    EXPECT_EQ(att.body.find("atomic"), std::string::npos);
  }
}

TEST(CachedKernel, CachedAttentionChunksFollowContextAndWorkspace) {
  codegen::EmittedKernel small, wide, many;
  std::string error;
  // 32 positions: two chunks of at least 16 (attn-decode-chunk's default).
  ASSERT_TRUE(codegen::emitKernel(cachePlan("sm_90"), 2, "sm_90", small, error))
      << error;
  EXPECT_EQ(small.pre->grid[2].constant, 2);
  // Many rows at once: decode steps (up to 16 rows, the own code) keep the
  // split of a full context, a constant workspace; longer runs (an
  // alternate) take fewer chunks, the partials of max_tokens rows within
  // 64 MiB.
  ASSERT_TRUE(
      codegen::emitKernel(cachePlan("sm_90", 4096), 2, "sm_90", wide, error))
      << error;
  EXPECT_TRUE(wide.alternates.empty());
  format::Plan big = cachePlan("sm_90", 4096, 1 << 17);
  ASSERT_TRUE(codegen::emitKernel(big, 2, "sm_90", many, error)) << error;
  EXPECT_EQ(many.pre->grid[2].constant, wide.pre->grid[2].constant);
  EXPECT_EQ(many.workspace.coef, 0);
  EXPECT_LE(many.workspace.at(big.maxTokens), int64_t(64) << 20);
  ASSERT_EQ(many.alternates.size(), 1u);
  const codegen::EmittedKernel &longRuns = many.alternates[0];
  EXPECT_EQ(longRuns.minTokens, 17);
  EXPECT_EQ(longRuns.suffix, "_long");
  EXPECT_EQ(longRuns.args, many.args);
  EXPECT_LT(longRuns.pre->grid[2].constant, many.pre->grid[2].constant);
  EXPECT_LE(longRuns.workspace.at(big.maxTokens), int64_t(64) << 20);
}

TEST(CachedKernel, BlockSparseGatedAttention) {
  for (const char *target : {"sm_90", "gfx1151"}) {
    SCOPED_TRACE(target);
    codegen::EmittedKernel att;
    std::string error;
    ASSERT_TRUE(codegen::emitKernel(sparsePlan(target), 2, target, att, error))
        << error;
    EXPECT_EQ(att.args,
              (std::vector<std::string>{
                  "buffer:3", "state:0", "state:1", "buffer:2", "buffer:1",
                  "buffer:7", "buffer:8", "buffer:6", "workspace", "T"}));
    // The chunks split the slots of the 5 listed blocks of 4 keys (20): two
    // chunks of at least 16; the pre-launch reads the index, the merge
    // applies the gate.
    EXPECT_EQ(att.pre->grid[2].constant, 2);
    EXPECT_NE(att.body.find("in6[r * 5L"), std::string::npos) << att.body;
    EXPECT_NE(att.body.find("ld(in5, "), std::string::npos);
  }
}

TEST(CachedKernel, QsaSelectRanksWithoutRoundsOverTop) {
  for (const char *target : {"sm_90", "gfx1151"}) {
    SCOPED_TRACE(target);
    codegen::EmittedKernel sel;
    std::string error;
    ASSERT_TRUE(codegen::emitKernel(selectPlan(target, 1024, 512), 0, target,
                                    sel, error))
        << error;
    EXPECT_EQ(sel.family, "qsa");
    EXPECT_EQ(sel.args, (std::vector<std::string>{
                            "buffer:3", "state:0", "buffer:2", "buffer:1",
                            "buffer:4", "workspace", "T"}));
    // Scores: a pre-launch block per (row, 32 block scores); ranks: a
    // kernel block per (row, 32 candidates); one score per block key and
    // row in the workspace.
    ASSERT_TRUE(sel.pre.has_value());
    EXPECT_EQ(sel.pre->grid[0].coef, 1);
    EXPECT_EQ(sel.pre->grid[1].constant, 1024 / 32);
    EXPECT_EQ(sel.grid[0].coef, 1);
    EXPECT_EQ(sel.grid[1].constant, 1024 / 32);
    EXPECT_EQ(sel.workspace.coef, 1024 * 4);
    EXPECT_EQ(sel.workspace.constant, 0);
    // No loop runs over the chosen blocks but the tail's (count, then -1):
    // each candidate's rank is counted and places it.
    size_t at = 0, loops = 0;
    while ((at = sel.body.find("for (", at)) != std::string::npos) {
      std::string line = sel.body.substr(at, sel.body.find('\n', at) - at);
      if (line.find("chosen") != std::string::npos) {
        EXPECT_NE(line.find("k = chosen + tid"), std::string::npos) << line;
        ++loops;
      }
      ++at;
    }
    EXPECT_EQ(loops, 1u);
    EXPECT_NE(sel.body.find("row[rank] = (int32_t)b"), std::string::npos);
  }
}
