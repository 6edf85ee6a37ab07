//===- PlanTest.cpp - plan.json round trip and validation -----------------===//
#include "runtime/format/Plan.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <functional>

using namespace strata::format;

namespace {

Plan smallPlan() {
  Plan p;
  p.model = "m";
  p.arch = "qwen3";
  p.target = "host";
  p.maxTokens = 8;
  PlanBuffer tok{"tok", PlanDType::I32, {{1, 0}}, 0, 32};
  PlanBuffer x{"x", PlanDType::F32, {{1, 0}, {0, 64}}, 256, 8 * 64 * 4};
  p.buffers = {tok, x};
  p.arenaBytes = 256 + 8 * 64 * 4;
  p.arenaLowerBound = p.arenaBytes;
  p.weights = {{"token_embd.weight", GgmlType::Q8_0, {64, 100}}};
  PlanKernel k;
  k.recipe = Recipe::GetRows;
  k.inputs = {{true, 0}, {false, 0}};
  k.outputs = {1};
  k.bytes = PlanPoly::of({100, 260});
  k.flops = PlanPoly::constant(0);
  p.kernels = {k};
  p.inputs = {0};
  p.outputs = {1};
  return p;
}

/// smallPlan plus a fused kernel: y = silu(scale(x)) with the scaled value a
/// temporary, written in place over x's storage (tied).
Plan fusedPlan() {
  Plan p = smallPlan();
  p.buffers.push_back(
      {"y", PlanDType::F32, {{1, 0}, {0, 64}}, 256, 8 * 64 * 4});
  PlanKernel k;
  k.fused = "scale_silu";
  k.inputs = {{false, 1}};
  k.outputs = {2};
  k.tied = {0};
  k.temps = {{PlanDType::F32, {{1, 0}, {0, 64}}}};
  BodyOp scale;
  scale.recipe = Recipe::Scale;
  scale.inputs = {{BodyRef::Kind::In, 0, {}}};
  scale.outputs = {{BodyRef::Kind::Tmp, 0, {}}};
  PlanAttr s;
  s.kind = PlanAttr::Kind::Float;
  s.f = 0.5;
  scale.attrs["s"] = s;
  BodyOp silu;
  silu.recipe = Recipe::Silu;
  silu.inputs = {{BodyRef::Kind::Tmp, 0, {{1, 0}, {0, 8}, {0, 8}}}};
  silu.outputs = {{BodyRef::Kind::Out, 0, {}}};
  k.body = {scale, silu};
  k.bytes = PlanPoly::of({0, 512});
  k.flops = PlanPoly::of({0, 128});
  p.kernels.push_back(k);
  p.outputs = {2};
  return p;
}

std::string errorOf(const std::string &json) {
  Plan p;
  std::string err;
  EXPECT_FALSE(planFromJson(json, "plan.json", p, err));
  return err;
}

std::string validationError(const Plan &p) {
  std::string err;
  EXPECT_FALSE(validatePlan(p, err));
  return err;
}

} // namespace

TEST(Plan, JsonRoundTrip) {
  Plan p = smallPlan();
  std::string text = planToJson(p);
  Plan q;
  std::string err;
  ASSERT_TRUE(planFromJson(text, "plan.json", q, err)) << err;
  EXPECT_EQ(planToJson(q), text);
  EXPECT_EQ(q.buffers[1].numElements(3), 3 * 64);
  EXPECT_EQ(q.kernels[0].bytes, p.kernels[0].bytes);
  EXPECT_DOUBLE_EQ(q.kernels[0].bytes.at(4), 100 + 4 * 260);
}

TEST(Plan, SyntheticFillRoundTripAndValidation) {
  Plan p = smallPlan();
  p.target = "sm_90";
  PlanCode fill;
  fill.module = "kernels/strata_synthetic_fill.cubin";
  fill.symbol = "strata_synthetic_fill";
  fill.grid = {{0, 1, 1}, {0, 1, 1}, {0, 1, 1}};
  fill.block = {256, 1, 1};
  fill.args = {"out",       "seed",  "index", "type",
               "type_size", "rank1", "count", "stride"};
  p.syntheticFill = fill;
  std::string text = planToJson(p), err;
  Plan q;
  ASSERT_TRUE(planFromJson(text, "plan.json", q, err)) << err;
  ASSERT_TRUE(q.syntheticFill.has_value());
  EXPECT_EQ(q.syntheticFill->symbol, "strata_synthetic_fill");
  EXPECT_EQ(q.syntheticFill->args.size(), 8u);
  EXPECT_EQ(planToJson(q), text);
  // The runtime launches it with 256 threads and 8 arguments: a plan that
  // says otherwise is refused where it is read.
  p.syntheticFill->block = {128, 1, 1};
  EXPECT_NE(errorOf(planToJson(p))
                .find("$.synthetic_fill: expected a module, a symbol, block "
                      "[256, 1, 1] and 8 arguments"),
            std::string::npos);
  // Host plans (and GPU plans compiled before the device fill) have none.
  EXPECT_FALSE(smallPlan().syntheticFill.has_value());
  EXPECT_EQ(planToJson(smallPlan()).find("synthetic_fill"), std::string::npos);
}

TEST(Plan, PreLaunchAndCodeWorkspaceRoundTrip) {
  Plan p = smallPlan();
  p.target = "sm_90";
  PlanCode c;
  c.module = "kernels/k.cubin";
  c.symbol = "k";
  c.grid = {{0, 4, 1}, {0, 1, 1}, {0, 1, 1}};
  c.block = {128, 1, 1};
  c.sharedBytes = 96512;
  c.args = {"buffer:0", "buffer:1", "workspace", "T"};
  c.pre = PlanPreLaunch{
      "k_prep", {{1, 1, 32}, {0, 4, 1}, {0, 1, 1}}, {128, 1, 1}, 35392};
  c.workspace = {33280, 33280, 32};
  p.kernels[0].code = c;
  std::string text = planToJson(p), err;
  Plan q;
  ASSERT_TRUE(planFromJson(text, "plan.json", q, err)) << err;
  EXPECT_EQ(planToJson(q), text);
  ASSERT_TRUE(q.kernels[0].code->pre.has_value());
  EXPECT_EQ(q.kernels[0].code->pre->symbol, "k_prep");
  EXPECT_EQ(q.kernels[0].code->pre->grid[0], (PlanDim{1, 1, 32}));
  EXPECT_EQ(q.kernels[0].code->pre->sharedBytes, 35392u);
  // One record of 33,280 bytes per chunk of 32 tokens, and one more.
  EXPECT_EQ(q.kernels[0].workspaceBytes(64), 3u * 33280);
  EXPECT_EQ(q.kernels[0].workspaceBytes(65), 33280u * 65 / 32 + 33280);
  EXPECT_GE(q.kernels[0].workspaceBytes(65), 3u * 33280);
  // Code without either writes neither field.
  p.kernels[0].code->pre.reset();
  p.kernels[0].code->workspace = {};
  EXPECT_EQ(planToJson(p).find("\"pre\""), std::string::npos);
  EXPECT_EQ(planToJson(p).find("workspace_bytes"), std::string::npos);
  EXPECT_EQ(p.kernels[0].workspaceBytes(64), 0u);
  // A pre-launch without a symbol is refused where the plan is read.
  p.kernels[0].code->pre = PlanPreLaunch{"", c.pre->grid, c.pre->block, 0};
  EXPECT_NE(errorOf(planToJson(p)).find("its pre-launch needs a symbol"),
            std::string::npos);
}

// A code's int8 inputs (the decode GEMVs' activations read as int8, eight
// a scale) round-trip per form: --check rounds them alike for the form a
// run launches. Only float buffer inputs of the kernel may be named.
TEST(Plan, Int8InputsRoundTripAndValidation) {
  Plan p = fusedPlan();
  p.target = "sm_90";
  auto codeOf = [](const char *symbol, std::vector<std::string> args) {
    PlanCode c;
    c.module = "kernels/k.cubin";
    c.symbol = symbol;
    c.grid = {{1, 0, 1}, {0, 1, 1}, {0, 1, 1}};
    c.block = {256, 1, 1};
    c.args = std::move(args);
    return c;
  };
  p.kernels[0].code = codeOf("g", {"weight:0", "buffer:0", "buffer:1", "T"});
  PlanCode c = codeOf("k", {"buffer:1", "buffer:2", "T"});
  c.int8Inputs = {0};
  PlanCode tile = codeOf("k_tile", {"buffer:1", "buffer:2", "T"});
  tile.minTokens = 4;
  c.alternates = {tile};
  p.kernels[1].code = c;
  std::string text = planToJson(p), err;
  EXPECT_NE(text.find("\"int8_inputs\": [\n"), std::string::npos) << text;
  Plan q;
  ASSERT_TRUE(planFromJson(text, "plan.json", q, err)) << err;
  EXPECT_EQ(planToJson(q), text);
  EXPECT_EQ(q.kernels[1].code->at(1).int8Inputs, std::vector<uint32_t>{0});
  EXPECT_TRUE(q.kernels[1].code->at(4).int8Inputs.empty());
  EXPECT_TRUE(q.kernels[0].code->int8Inputs.empty());
  // Not a float buffer input: an i32 buffer, a weight, past the inputs.
  for (auto [kernel, input] :
       {std::pair<size_t, uint32_t>{0, 1}, {0, 0}, {1, 1}}) {
    Plan bad = p;
    bad.kernels[kernel].code->int8Inputs = {input};
    EXPECT_NE(validationError(bad).find(fmt::format(
                  "int8 input {} is not a float buffer input", input)),
              std::string::npos)
        << kernel << " " << input;
  }
  // A code without int8 inputs writes no field.
  p.kernels[1].code->int8Inputs.clear();
  EXPECT_EQ(planToJson(p).find("int8_inputs"), std::string::npos);
}

TEST(Plan, FusedKernelRoundTripAndValidation) {
  Plan p = fusedPlan();
  std::string err;
  ASSERT_TRUE(validatePlan(p, err)) << err;
  std::string text = planToJson(p);
  Plan q;
  ASSERT_TRUE(planFromJson(text, "plan.json", q, err)) << err;
  EXPECT_EQ(planToJson(q), text);
  ASSERT_TRUE(q.kernels[1].isFused());
  EXPECT_EQ(q.kernels[1].label(), "fused:scale_silu");
  EXPECT_EQ(q.kernels[1].body[1].inputs[0].view.size(), 3u);
  EXPECT_EQ(q.kernels[1].tied, (std::vector<int32_t>{0}));
  EXPECT_EQ(q.kernels[1].workspaceBytes(8), 8u * 64 * 4);

  // A temporary read before any body op writes it.
  Plan bad = fusedPlan();
  std::swap(bad.kernels[1].body[0], bad.kernels[1].body[1]);
  EXPECT_NE(validationError(bad).find("reads temporary 0 before any body op "
                                      "writes it"),
            std::string::npos);
  // An output no body op writes.
  bad = fusedPlan();
  bad.kernels[1].body[1].outputs[0] = {BodyRef::Kind::Tmp, 0, {}};
  EXPECT_NE(validationError(bad).find("no body op writes output 0"),
            std::string::npos);
  // A view with another element count.
  bad = fusedPlan();
  bad.kernels[1].body[1].inputs[0].view = {{1, 0}, {0, 8}};
  EXPECT_NE(validationError(bad).find("views a tensor with another element "
                                      "count"),
            std::string::npos);
  // Tied outputs share their input's storage.
  bad = fusedPlan();
  bad.buffers[2].offset = 0;
  bad.buffers[2].shape = {{1, 0}};
  bad.buffers[2].dtype = PlanDType::I32;
  bad.buffers[2].bytes = 32;
  EXPECT_NE(validationError(bad).find("does not share its storage"),
            std::string::npos);
  // Body ops obey the op table: arity and attribute schema.
  bad = fusedPlan();
  bad.kernels[1].body[0].attrs.clear();
  EXPECT_NE(validationError(bad).find("'scale' needs attribute 's'"),
            std::string::npos);
  bad = fusedPlan();
  bad.kernels[1].body[0].inputs.push_back({BodyRef::Kind::In, 0, {}});
  EXPECT_NE(validationError(bad).find("(scale) takes 1..1 inputs"),
            std::string::npos);
}

TEST(Plan, DividedDims) {
  Plan p = smallPlan();
  // A pooled [T / 4, 64] buffer: floor(T / 4) rows, empty below T = 4.
  p.buffers.push_back(
      {"kb", PlanDType::F32, {{1, 0, 4}, {0, 64}}, p.arenaBytes, 2 * 64 * 4});
  p.arenaBytes += 2 * 64 * 4;
  std::string text = planToJson(p);
  Plan q;
  std::string err;
  ASSERT_TRUE(planFromJson(text, "plan.json", q, err)) << err;
  EXPECT_EQ(planToJson(q), text);
  EXPECT_EQ(q.buffers[2].shape[0], (PlanDim{1, 0, 4}));
  EXPECT_EQ(q.buffers[2].numElements(8), 2 * 64);
  EXPECT_EQ(q.buffers[2].numElements(7), 1 * 64);
  EXPECT_EQ(q.buffers[2].numElements(3), 0);
  EXPECT_EQ((PlanDim{3, 1, 2}).at(5), 8);
  p.buffers[2].shape[0].div = 0;
  EXPECT_NE(errorOf(planToJson(p)).find("buffer 2 'kb': dim 0 is out of range"),
            std::string::npos)
      << errorOf(planToJson(p));
}

TEST(Plan, Polynomials) {
  // Quadratic up to a budget of 16 keys, linear after (QSA attention).
  PlanPoly keys = PlanPoly::of({0, 0.5, 0.5});
  keys.pieces.push_back({16, {-16.0 * 15 / 2, 16, 0}});
  EXPECT_DOUBLE_EQ(keys.at(4), 10);
  EXPECT_DOUBLE_EQ(keys.at(16), 136);
  EXPECT_DOUBLE_EQ(keys.at(17), 136 + 16);
  PlanPoly sum = PlanPoly::of({1, 1});
  sum += keys;
  EXPECT_EQ(sum.pieces.size(), 2u);
  EXPECT_DOUBLE_EQ(sum.at(4), 15);
  EXPECT_DOUBLE_EQ(sum.at(20), 21 + keys.at(20));
  EXPECT_DOUBLE_EQ((sum * 2).at(3), 2 * (4 + 6));
}

TEST(Plan, RejectsWithJsonPath) {
  std::string text = planToJson(smallPlan());
  auto replace = [&](const std::string &from, const std::string &to) {
    std::string t = text;
    size_t pos = t.find(from);
    EXPECT_NE(pos, std::string::npos) << from;
    return t.replace(pos, from.size(), to);
  };
  EXPECT_NE(errorOf("{").find("not valid JSON"), std::string::npos);
  EXPECT_NE(errorOf(replace("\"version\": 2", "\"version\": 1"))
                .find("$.version: plan version 1 is not supported (this build "
                      "reads versions 2 to 3); recompile the plan"),
            std::string::npos);
  EXPECT_NE(errorOf(replace("\"recipe\": \"get_rows\"", "\"recipe\": \"zap\""))
                .find("$.kernels[0].recipe: unknown recipe 'zap'"),
            std::string::npos);
  EXPECT_NE(errorOf(replace("\"offset\": 256", "\"offset\": 4096"))
                .find("buffer 1 'x': bytes [4096, 6144) lie outside the arena"),
            std::string::npos);
  // A misaligned buffer (found by the plan fuzzer: an f32 store to an odd
  // address).
  EXPECT_NE(errorOf(replace("\"offset\": 256", "\"offset\": 257"))
                .find("buffer 1 'x': offset 257 is not a multiple of 16"),
            std::string::npos);
  EXPECT_NE(errorOf(replace("\"bytes\": 32", "\"bytes\": 33"))
                .find("buffer 0 'tok' has 33 bytes, but its shape and dtype "
                      "need 32"),
            std::string::npos);
  EXPECT_NE(errorOf(replace("\"weight\": 0", "\"weight\": 5"))
                .find("kernel 0 (get_rows) reads weight 5, which does not "
                      "exist"),
            std::string::npos);
  EXPECT_NE(errorOf(replace("\"weight\": 0", "\"weight\": 4294967296"))
                .find("$.kernels[0].inputs[0]: expected an index"),
            std::string::npos);
  EXPECT_NE(errorOf(replace("\"type\": \"q8_0\"", "\"type\": \"q2_k\""))
                .find("$.weights[0].type: unknown or unloadable"),
            std::string::npos);
  EXPECT_NE(errorOf(replace("\"attrs\": {}", "\"attrs\": {\"zap\": 1}"))
                .find("'get_rows' has no attribute 'zap'"),
            std::string::npos);
  // The last of two equal keys would win silently: refused.
  EXPECT_NE(errorOf(replace("\"model\": \"m\"", "\"model\": \"m\", \"model\": "
                                                "\"n\""))
                .find("the key \"model\" appears twice"),
            std::string::npos);
  // An arena near 2^64 would wrap when rounded up.
  EXPECT_NE(errorOf(replace("\"bytes\": 2304", "\"bytes\": "
                                               "18446744073709551613"))
                .find("larger than 2^50"),
            std::string::npos);
}

TEST(Plan, OpTableIsConsistent) {
  for (const RecipeInfo &r : allRecipes()) {
    EXPECT_EQ(lookupRecipe(r.name), &recipeInfo(r.id));
    EXPECT_TRUE(r.maxInputs < 0 || r.minInputs <= r.maxInputs) << r.name;
    EXPECT_GE(r.numOutputs, 1);
    for (const AttrSpec &a : attrSchema(r.id)) {
      EXPECT_TRUE(a.kind == "int" || a.kind == "float" || a.kind == "bool" ||
                  a.kind == "str" || a.kind == "type" || a.kind == "ints" ||
                  a.kind == "floats")
          << r.name << "." << a.name << ": " << a.kind;
      // Only optional attributes have defaults.
      EXPECT_TRUE(!a.dflt || a.optional) << r.name << "." << a.name;
    }
  }
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::I32, DType::I64,
                  DType::Bool})
    EXPECT_EQ(planDTypeFromName(planDTypeName(t)), t);
}

TEST(Plan, AttributesThatDriveLoopsOrAddressesAreBounded) {
  // Attributes the op table bounds (a loop count, an address stride) are
  // refused outside their range when the plan is loaded, so no kernel
  // loops 2^62 times or reads outside the arena.
  for (auto [recipe, name, value, msg] :
       {std::tuple{Recipe::Sinkhorn, "iters", int64_t(1) << 62,
                   "attribute 'iters' of 'sinkhorn' must lie in 1..1000"},
        std::tuple{Recipe::Conv1dCausal, "dilation", int64_t(1) << 62,
                   "attribute 'dilation' of 'conv1d_causal' must lie in "
                   "1..1048576"}}) {
    Plan p = smallPlan();
    PlanKernel k;
    k.recipe = recipe;
    k.inputs = {{false, 1}};
    if (recipe == Recipe::Conv1dCausal)
      k.inputs.push_back({true, 0});
    k.outputs = {1};
    PlanAttr a;
    a.kind = PlanAttr::Kind::Int;
    a.i = value;
    k.attrs[name] = a;
    p.kernels.push_back(k);
    EXPECT_NE(validationError(p).find(msg), std::string::npos)
        << validationError(p);
  }
}

TEST(Plan, NamesThatAreNotUtf8AreWrittenNotThrown) {
  // general.architecture and tensor names come from files nobody here
  // controls; bytes that are not UTF-8 must not make the writer throw.
  Plan p = smallPlan();
  p.arch = "qwen\xff\xfe";
  p.weights[0].name = "token_embd\xc3.weight";
  std::string text = planToJson(p);
  Plan q;
  std::string err;
  ASSERT_TRUE(planFromJson(text, "plan.json", q, err)) << err;
  EXPECT_EQ(q.arch, "qwen\xef\xbf\xbd\xef\xbf\xbd"); // U+FFFD twice
}

TEST(Plan, TensorMapsRoundTripAndValidation) {
  // x [T, 64] f32 (buffer 1, 8 x 64 x 4 bytes at maxTokens): the map sees
  // it as dims {64, T}, rows 256 bytes apart, 32 x 8 boxes.
  Plan p = smallPlan();
  p.target = "sm_90";
  PlanCode c;
  c.module = "kernels/k.cubin";
  c.symbol = "k";
  c.grid = {{0, 1, 1}, {0, 1, 1}, {0, 1, 1}};
  c.block = {128, 1, 1};
  c.args = {"buffer:0", "buffer:1", "tmap:0", "T"};
  PlanTensorMap m;
  m.operand = {false, 1};
  m.dtype = PlanDType::F32;
  m.dims = {{0, 64, 1}, {1, 0, 1}};
  m.strides = {256};
  m.box = {32, 8};
  m.swizzle = 128;
  c.tensorMaps = {m};
  p.kernels[0].code = c;
  std::string text = planToJson(p), err;
  Plan q;
  ASSERT_TRUE(planFromJson(text, "plan.json", q, err)) << err;
  EXPECT_EQ(planToJson(q), text);
  ASSERT_EQ(q.kernels[0].code->tensorMaps.size(), 1u);
  const PlanTensorMap &r = q.kernels[0].code->tensorMaps[0];
  EXPECT_FALSE(r.operand.isWeight);
  EXPECT_EQ(r.operand.index, 1u);
  EXPECT_EQ(r.dims[1], (PlanDim{1, 0, 1}));
  EXPECT_EQ(r.strides, (std::vector<uint64_t>{256}));
  EXPECT_EQ(r.box, (std::vector<uint32_t>{32, 8}));
  EXPECT_EQ(r.swizzle, 128u);
  // Code without maps writes no field.
  Plan none = p;
  none.kernels[0].code->tensorMaps.clear();
  none.kernels[0].code->args = {"buffer:0", "T"};
  EXPECT_EQ(planToJson(none).find("tensor_maps"), std::string::npos);

  // What the driver would refuse is refused where the plan is read, named.
  auto refused = [&](auto edit, const std::string &why) {
    Plan b = p;
    edit(b.kernels[0].code->tensorMaps[0]);
    std::string e = errorOf(planToJson(b));
    EXPECT_NE(e.find("tensor map 0: " + why), std::string::npos) << e;
  };
  refused([](PlanTensorMap &t) { t.box = {32, 300}; },
          "box size 300 is outside 1..256");
  refused([](PlanTensorMap &t) { t.box = {2, 8}; },
          "the box's inner size (8 bytes) is not a multiple of 16");
  refused([](PlanTensorMap &t) { t.box = {64, 8}; },
          "the box's inner size (256 bytes) exceeds the 128-byte swizzle");
  refused([](PlanTensorMap &t) { t.swizzle = 16; }, "swizzle 16");
  refused([](PlanTensorMap &t) { t.strides = {200}; },
          "stride 200 is not a positive multiple of 16");
  refused([](PlanTensorMap &t) { t.strides = {}; }, "2 dims, 0 strides");
  refused([](PlanTensorMap &t) { t.offset = 8; },
          "offset 8 is not a multiple of 16 bytes");
  refused([](PlanTensorMap &t) { t.dtype = PlanDType::Bool; },
          "element type bool");
  refused([](PlanTensorMap &t) { t.operand = {false, 9}; },
          "its operand (buffer 9) is out of range");
  // Rows 512 bytes apart overrun x's 2,048 bytes at maxTokens = 8.
  refused([](PlanTensorMap &t) { t.strides = {512}; },
          "it spans 3840 bytes of buffer 1 (2048 bytes)");
  refused([](PlanTensorMap &t) { t.dims[1] = {1, -1, 1}; },
          "dim 1 is not within 1..2^32");
  // The kernel's workspace as the operand: bounded by the workspace its
  // code asks for (2,048 bytes fit the map's 64 x 8 f32 at maxTokens).
  {
    Plan w = p;
    PlanTensorMap &t = w.kernels[0].code->tensorMaps[0];
    t.workspace = true;
    t.operand = {false, 0};
    w.kernels[0].code->workspace = {0, 2048, 1};
    std::string wt = planToJson(w);
    EXPECT_NE(wt.find("\"workspace\": 0"), std::string::npos) << wt;
    Plan wq;
    ASSERT_TRUE(planFromJson(wt, "plan.json", wq, err)) << err;
    EXPECT_TRUE(wq.kernels[0].code->tensorMaps[0].workspace);
    EXPECT_EQ(planToJson(wq), wt);
    w.kernels[0].code->workspace = {0, 1024, 1};
    std::string e = errorOf(planToJson(w));
    EXPECT_NE(e.find("tensor map 0: it spans 2048 bytes of the kernel's "
                     "workspace (1024 bytes at T = 8)"),
              std::string::npos)
        << e;
    std::string j = wt;
    size_t at = j.find("\"workspace\": 0");
    ASSERT_NE(at, std::string::npos) << j;
    j.replace(at, 14, "\"workspace\": 3");
    e = errorOf(j);
    EXPECT_NE(e.find("a workspace operand is 0"), std::string::npos) << e;
  }
  // An argument naming a map the code does not have.
  Plan b = p;
  b.kernels[0].code->args = {"tmap:1"};
  std::string e = errorOf(planToJson(b));
  EXPECT_NE(e.find("argument 'tmap:1' names no tensor map of the kernel"),
            std::string::npos)
      << e;
  // A malformed operand is a JSON-path error.
  std::string j = text;
  size_t at = j.find("\"buffer\"", j.find("\"tensor_maps\""));
  ASSERT_NE(at, std::string::npos) << j;
  j.replace(at, 8, "\"arena\"");
  e = errorOf(j);
  EXPECT_NE(e.find("tensor_maps[0].operand"), std::string::npos) << e;
}

namespace {

/// tok -> get_rows -> x; x -> scale -> y; (x, y) -> add -> z (the output):
/// x is still read by kernel 2 when kernel 1 writes y.
Plan chainPlan() {
  Plan p = smallPlan();
  const uint64_t n = 8 * 64 * 4;
  p.buffers.push_back({"y", PlanDType::F32, {{1, 0}, {0, 64}}, 256 + n, n});
  p.buffers.push_back({"z", PlanDType::F32, {{1, 0}, {0, 64}}, 256 + 2 * n, n});
  p.arenaBytes = 256 + 3 * n;
  PlanKernel scale;
  scale.recipe = Recipe::Scale;
  scale.inputs = {{false, 1}};
  scale.outputs = {2};
  PlanAttr s;
  s.kind = PlanAttr::Kind::Float;
  s.f = 2;
  scale.attrs["s"] = s;
  PlanKernel add;
  add.recipe = Recipe::Add;
  add.inputs = {{false, 1}, {false, 2}};
  add.outputs = {3};
  p.kernels.push_back(scale);
  p.kernels.push_back(add);
  p.outputs = {3};
  return p;
}

} // namespace

TEST(PlanMemory, AcceptsAPlacementThatKeepsLiveValuesApart) {
  Plan p = chainPlan();
  std::string err;
  EXPECT_TRUE(validatePlan(p, err)) << err;
  // One storage set per value: tok, x, y, z.
  std::vector<LiveSet> sets = planLiveSets(p);
  ASSERT_EQ(sets.size(), 4u);
  EXPECT_EQ(sets[1].values, (std::vector<uint32_t>{1}));
  EXPECT_EQ(sets[1].start, 1u); // written by kernel 0
  EXPECT_EQ(sets[1].end, 3u);   // read by kernel 2
  EXPECT_EQ(sets[3].end, 4u);   // the output, read after the last kernel
  // The lower bound is x, y and z together.
  EXPECT_EQ(liveLowerBound(sets), 3u * 8 * 64 * 4);
}

TEST(PlanMemory, RefusesABufferMovedOverAValueStillRead) {
  // y moved onto x: kernel 1 would overwrite x, which kernel 2 still reads
  // (the unchecked plan ran and gave other logits).
  Plan p = chainPlan();
  p.buffers[2].offset = p.buffers[1].offset;
  std::string e = validationError(p);
  EXPECT_NE(e.find("plan: kernel 1 (scale) writes buffer 2 'y' [256, 2304) "
                   "over bytes of buffer 1 'x' [256, 2304), which kernel 2 "
                   "(add) still reads; recompile the plan"),
            std::string::npos)
      << e;
  // Half-way over it too.
  p.buffers[2].offset = p.buffers[1].offset + 1024;
  e = validationError(p);
  EXPECT_NE(e.find("kernel 1 (scale) writes buffer 2 'y'"), std::string::npos)
      << e;
  // The output may not be overwritten before the end either.
  p = chainPlan();
  PlanKernel late = p.kernels[1];
  late.outputs = {4};
  p.buffers.push_back(p.buffers[1]);
  p.buffers.back().name = "w";
  p.buffers.back().offset = p.buffers[3].offset;
  p.kernels.push_back(late);
  e = validationError(p);
  EXPECT_NE(e.find("kernel 3 (scale) writes buffer 4 'w' [4352, 6400) over "
                   "bytes of buffer 3 'z' [4352, 6400), which the plan's "
                   "output still reads"),
            std::string::npos)
      << e;
  // A kernel's output over its own (untied) input.
  p = chainPlan();
  p.buffers[3].offset = p.buffers[2].offset;
  e = validationError(p);
  EXPECT_NE(e.find("kernel 2 (add) writes buffer 3 'z'"), std::string::npos)
      << e;
}

TEST(PlanMemory, RefusesATieOverAnInputReadLater) {
  // fusedPlan writes y in place over x (tied); a later kernel reading x
  // would read y's values.
  Plan p = fusedPlan();
  PlanKernel reread = p.kernels[1];
  reread.tied.clear();
  reread.inputs = {{false, 1}};
  p.buffers.push_back({"w", PlanDType::F32, {{1, 0}, {0, 64}}, 2304, 2048});
  p.arenaBytes = 2304 + 2048;
  reread.outputs = {3};
  p.kernels.push_back(reread);
  p.outputs = {3};
  std::string e = validationError(p);
  EXPECT_NE(e.find("plan: kernel 1 (fused:scale_silu) writes buffer 2 'y' in "
                   "place over buffer 1 'x', which kernel 2 "
                   "(fused:scale_silu) reads after it; recompile the plan"),
            std::string::npos)
      << e;
  // Ties are for fused kernels only.
  Plan c = chainPlan();
  c.kernels[1].tied = {0};
  c.buffers[2].offset = c.buffers[1].offset;
  e = validationError(c);
  EXPECT_NE(e.find("kernel 1 (scale) ties outputs to inputs, which only fused "
                   "kernels do"),
            std::string::npos)
      << e;
}

TEST(PlanMemory, ViewsShowTheirBase) {
  // z' views z: the output may be read through it.
  Plan p = chainPlan();
  PlanBuffer v = p.buffers[3];
  v.name = "zv";
  v.shape = {{8, 0}, {0, 8}};
  v.viewOf = 3;
  p.buffers.push_back(v);
  p.outputs = {4};
  std::string err;
  EXPECT_TRUE(validatePlan(p, err)) << err;
  Plan q;
  ASSERT_TRUE(planFromJson(planToJson(p), "plan.json", q, err)) << err;
  EXPECT_EQ(q.buffers[4].viewOf, 3);
  EXPECT_NE(planToJson(p).find("\"view_of\": 3"), std::string::npos);
  // A view elsewhere than its base, of a later buffer, or written.
  Plan b = p;
  b.buffers[4].offset = 0;
  EXPECT_NE(validationError(b).find("buffer 4 'zv' is a view of buffer 3 'z' "
                                    "but does not share its storage"),
            std::string::npos);
  b = p;
  b.buffers[2].viewOf = 3;
  EXPECT_NE(validationError(b).find("is a view of buffer 3, which is not an "
                                    "earlier buffer"),
            std::string::npos);
  b = p;
  b.kernels[2].outputs = {4};
  EXPECT_NE(validationError(b).find("kernel 2 (add) writes buffer 4 'zv', a "
                                    "view of buffer 3; views are never "
                                    "written"),
            std::string::npos);
  // A buffer nothing writes, at the offset of one that is written, is no
  // longer taken for a view of it.
  b = p;
  b.buffers[4].viewOf = -1;
  EXPECT_NE(validationError(b).find("the plan's output is buffer 4 'zv', "
                                    "which no plan input or earlier kernel "
                                    "writes"),
            std::string::npos);
}

TEST(PlanMemory, EachBufferIsWrittenOnce) {
  Plan p = chainPlan();
  p.kernels[2].outputs = {2};
  p.kernels[2].inputs = {{false, 1}, {false, 1}};
  p.outputs = {2};
  EXPECT_NE(validationError(p).find("kernel 2 (add) writes buffer 2 'y', "
                                    "which kernel 1 (scale) wrote already; a "
                                    "buffer holds one value"),
            std::string::npos);
}

TEST(PlanCaps, SizesAreSummedWithoutWrapping) {
  // Thousands of 2^50-byte temporaries beside a small one: each alone is
  // within the cap, their sum wrapped past 2^64 to about 1 KiB and the body
  // wrote far outside it (a crash).
  Plan p = fusedPlan();
  BodyTemp huge{PlanDType::F32, {{0, int64_t(1) << 40}, {0, 256}}};
  for (int i = 0; i < 16384; ++i)
    p.kernels[1].temps.push_back(huge);
  std::string e = validationError(p);
  EXPECT_NE(e.find("kernel 1 (fused:scale_silu): its temporaries need more "
                   "than 2^50 bytes together"),
            std::string::npos)
      << e;
  // A code workspace of 2^61 x T bytes (it overflowed at T = 16).
  Plan w = chainPlan();
  w.target = "sm_90";
  PlanCode c;
  c.module = "kernels/k.cubin";
  c.symbol = "k";
  c.grid = {{0, 1, 1}, {0, 1, 1}, {0, 1, 1}};
  c.block = {128, 1, 1};
  c.args = {"buffer:1", "buffer:2", "T"};
  w.kernels[1].code = c;
  std::string err;
  ASSERT_TRUE(validatePlan(w, err)) << err;
  w.kernels[1].code->workspace = {int64_t(1) << 61, 0, 1};
  e = validationError(w);
  EXPECT_NE(e.find("kernel 1 (scale): its code's workspace is not a "
                   "non-negative function of T of at most 2^50 bytes"),
            std::string::npos)
      << e;
  // Grids within the launch limits at every T.
  w.kernels[1].code->workspace = {};
  w.kernels[1].code->grid[1] = {1 << 20, 0, 1};
  e = validationError(w);
  EXPECT_NE(e.find("kernel 1 (scale): its launch grid dim 1 is not within "
                   "0..65535 for every T in 1..8"),
            std::string::npos)
      << e;
  // Shared memory within the target's block.
  w.kernels[1].code->grid[1] = {0, 1, 1};
  w.kernels[1].code->sharedBytes = 232449;
  e = validationError(w);
  EXPECT_NE(e.find("asks for 232449 bytes of shared memory, more than a "
                   "block has on sm_90 (232448)"),
            std::string::npos)
      << e;
}

TEST(PlanTargets, FieldsTheTargetDoesNotAllowAreRefused) {
  Plan p = chainPlan();
  p.target = "tpu9000";
  EXPECT_NE(validationError(p).find("plan: target 'tpu9000' is not one this "
                                    "build knows (host, gfx1151, sm_90)"),
            std::string::npos);
  // Generated code on a host plan (it used to run, the code ignored).
  p.target = "host";
  PlanCode c;
  c.module = "kernels/k.co";
  c.symbol = "k";
  c.grid = {{0, 1, 1}, {0, 1, 1}, {0, 1, 1}};
  c.block = {64, 1, 1};
  c.args = {"buffer:1", "buffer:2"};
  p.kernels[1].code = c;
  EXPECT_NE(validationError(p).find("kernel 1 (scale) carries generated code, "
                                    "but a 'host' plan runs on the CPU "
                                    "reference backend"),
            std::string::npos);
  // Tensor maps on a target without a tensor memory accelerator.
  p.target = "gfx1151";
  std::string err;
  ASSERT_TRUE(validatePlan(p, err)) << err;
  PlanTensorMap m;
  m.operand = {false, 1};
  m.dtype = PlanDType::F32;
  m.dims = {{0, 64, 1}, {1, 0, 1}};
  m.strides = {256};
  m.box = {32, 8};
  p.kernels[1].code->tensorMaps = {m};
  EXPECT_NE(validationError(p).find("tensor maps are for targets with a "
                                    "tensor memory accelerator (sm_90), not "
                                    "'gfx1151'"),
            std::string::npos);
  // Arguments and maps reach only the kernel's own operands.
  p.target = "sm_90";
  ASSERT_TRUE(validatePlan(p, err)) << err;
  p.kernels[1].code->args = {"buffer:3"};
  EXPECT_NE(validationError(p).find("kernel 1 (scale): argument 'buffer:3' "
                                    "names no operand of the kernel"),
            std::string::npos);
  p.kernels[1].code->args = {"buffer:x1"};
  EXPECT_NE(validationError(p).find("argument 'buffer:x1' names no operand"),
            std::string::npos);
  p.kernels[1].code->args = {"arena"};
  EXPECT_NE(validationError(p).find("unknown argument 'arena'"),
            std::string::npos);
  // Every code is handed the kernel's outputs.
  p.kernels[1].code->args = {"buffer:1", "T"};
  EXPECT_NE(validationError(p).find("takes no argument for the output "
                                    "buffer 2"),
            std::string::npos)
      << validationError(p);
  p.kernels[1].code->args = {"buffer:1"};
  p.kernels[1].code->tensorMaps[0].operand = {false, 3};
  EXPECT_NE(validationError(p).find("tensor map 0: its operand (buffer 3) is "
                                    "not one of the kernel's"),
            std::string::npos);
}

TEST(Liveness, SetsBoundsAndClashes) {
  // 0 defined at 0, read at 2; 1 views 0; 2 defined at 1, read at 3; 3
  // written over 2 in place at 3; 2 read again at 4: stale.
  LivenessBuilder live(4);
  live.define(0, 0, 100);
  live.alias(1, 0);
  live.use(1, 2);
  live.define(2, 1, 50);
  live.use(2, 3);
  live.overwrite(3, 2, 3);
  live.use(3, 4);
  EXPECT_FALSE(live.staleRead().has_value());
  ASSERT_EQ(live.sets().size(), 2u);
  EXPECT_EQ(live.sets()[0].values, (std::vector<uint32_t>{0, 1}));
  EXPECT_EQ(live.sets()[0].end, 2u);
  EXPECT_EQ(live.sets()[1].values, (std::vector<uint32_t>{2, 3}));
  EXPECT_EQ(live.sets()[1].end, 4u);
  EXPECT_EQ(liveLowerBound(live.sets()), 150u);
  // Live together at 1..2: apart they fit, one byte shared clashes.
  EXPECT_FALSE(findLiveClash(live.sets(), {0, 100}).has_value());
  std::optional<LiveClash> c = findLiveClash(live.sets(), {0, 99});
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->first, 0u);
  EXPECT_EQ(c->second, 1u);
  // Offsets near 2^64 do not wrap into a false "apart".
  EXPECT_TRUE(findLiveClash(live.sets(), {UINT64_MAX - 10, UINT64_MAX - 20})
                  .has_value());
  live.use(2, 5);
  ASSERT_TRUE(live.staleRead().has_value());
  EXPECT_EQ(live.staleRead()->value, 2u);
  EXPECT_EQ(live.staleRead()->overwriter, 3u);
  EXPECT_EQ(live.staleRead()->overwrittenAt, 3u);
  EXPECT_EQ(live.staleRead()->readAt, 5u);
}

namespace {

/// A plan with generation state (version 3): tokens, positions and slots
/// (i32 [T]), q [T, 2, 4] from the embedding, a KV cache of 2 slots x 16
/// positions written by kv_store (no output listed) and read by
/// attention_cached.
Plan statePlan() {
  Plan p;
  p.model = "m";
  p.arch = "qwen3";
  p.target = "host";
  p.maxTokens = 8;
  p.options = {{"max_context", 16}, {"max_batch", 2}};
  p.buffers = {{"tok", PlanDType::I32, {{1, 0}}, 0, 32},
               {"pos", PlanDType::I32, {{1, 0}}, 256, 32},
               {"seq", PlanDType::I32, {{1, 0}}, 512, 32},
               {"q", PlanDType::F32, {{1, 0}, {0, 2}, {0, 4}}, 768, 256},
               {"o", PlanDType::F32, {{1, 0}, {0, 2}, {0, 4}}, 1024, 256}};
  p.arenaBytes = 1280;
  p.arenaLowerBound = 1280;
  p.weights = {{"token_embd.weight", GgmlType::F32, {8, 100}}};
  p.states = {{"blk.0.k_cache", PlanDType::F32, {2, 16, 1, 4}, 512},
              {"blk.0.v_cache", PlanDType::F32, {2, 16, 1, 4}, 512}};
  PlanKernel emb;
  emb.recipe = Recipe::GetRows;
  emb.inputs = {{true, 0}, {false, 0}};
  emb.outputs = {3};
  PlanKernel kstore;
  kstore.recipe = Recipe::KvStore;
  kstore.inputs = {{false, 0, true}, {false, 3}, {false, 2}, {false, 1}};
  PlanKernel vstore = kstore;
  vstore.inputs[0].index = 1;
  PlanKernel att;
  att.recipe = Recipe::AttentionCached;
  att.inputs = {
      {false, 3}, {false, 0, true}, {false, 1, true}, {false, 2}, {false, 1}};
  att.outputs = {4};
  PlanAttr scale;
  scale.kind = PlanAttr::Kind::Float;
  scale.f = 0.5;
  att.attrs["scale"] = scale;
  p.kernels = {emb, kstore, vstore, att};
  p.inputs = {0, 1, 2};
  p.outputs = {4};
  return p;
}

} // namespace

TEST(PlanState, VersionThreeRoundTrip) {
  Plan p = statePlan();
  std::string err;
  ASSERT_TRUE(validatePlan(p, err)) << err;
  EXPECT_EQ(planVersionOf(p), 3);
  std::string text = planToJson(p);
  EXPECT_NE(text.find("\"version\": 3"), std::string::npos);
  EXPECT_NE(text.find("\"state\": 0"), std::string::npos) << text;
  Plan q;
  ASSERT_TRUE(planFromJson(text, "plan.json", q, err)) << err;
  EXPECT_EQ(planToJson(q), text);
  ASSERT_EQ(q.states.size(), 2u);
  EXPECT_EQ(q.states[1].name, "blk.0.v_cache");
  EXPECT_EQ(q.states[1].shape, (std::vector<uint64_t>{2, 16, 1, 4}));
  EXPECT_TRUE(q.kernels[1].inputs[0].isState);
  EXPECT_FALSE(q.kernels[1].inputs[1].isState);
  EXPECT_TRUE(q.kernels[1].outputs.empty());
  // Without state a plan is written as version 2, as before version 3.
  EXPECT_EQ(planVersionOf(smallPlan()), 2);
  EXPECT_NE(planToJson(smallPlan()).find("\"version\": 2"), std::string::npos);
}

TEST(PlanState, CacheReadsScaleToThePositionsARunAttends) {
  Plan p = statePlan();
  // As the compiler counts attention_cached: 100 bytes of its own, and the
  // whole cache (keys and values, 512 bytes a slot at 16 positions) for
  // each slot a run touches, min(T, 2) slots.
  PlanKernel &att = p.kernels[3];
  att.bytes = PlanPoly::of({100, 512});
  att.bytes.pieces.push_back({2, {100 + 1024}});
  std::string err;
  ASSERT_TRUE(validatePlan(p, err)) << err;
  // No positions: the plan's count.
  KernelRunBytes whole = kernelRunBytes(p, att, 2, {});
  EXPECT_EQ(whole.bytes, 1124);
  EXPECT_EQ(whole.cacheBytes, 0);
  // Two slots attending 4 and 16 of 16 positions: a quarter and all.
  KernelRunBytes two = kernelRunBytes(p, att, 2, {4, 16});
  EXPECT_EQ(two.cacheBytes, 128 + 512);
  EXPECT_EQ(two.bytes, 100 + 128 + 512);
  // One row at position 7 (8 positions): half a slot's cache.
  KernelRunBytes one = kernelRunBytes(p, att, 1, {8});
  EXPECT_EQ(one.cacheBytes, 256);
  EXPECT_EQ(one.bytes, 100 + 256);
  // Past the context a slot reads no more than it holds.
  EXPECT_EQ(kernelRunBytes(p, att, 1, {1000}).cacheBytes, 512);
  // A kernel that reads no cache keeps its count.
  p.kernels[0].bytes = PlanPoly::of({0, 32});
  KernelRunBytes emb = kernelRunBytes(p, p.kernels[0], 3, {4, 16});
  EXPECT_EQ(emb.bytes, 96);
  EXPECT_EQ(emb.cacheBytes, 0);
}

TEST(PlanState, ReaderRefusesStateInVersionTwo) {
  std::string text = planToJson(statePlan());
  size_t at = text.find("\"version\": 3");
  ASSERT_NE(at, std::string::npos);
  text.replace(at, 12, "\"version\": 2");
  EXPECT_NE(errorOf(text).find("a version 2 plan has no state"),
            std::string::npos)
      << errorOf(text);
  EXPECT_NE(errorOf(planToJson(smallPlan())
                        .replace(planToJson(smallPlan()).find("\"version\": 2"),
                                 12, "\"version\": 4"))
                .find("plan version 4 is not supported"),
            std::string::npos);
}

TEST(PlanState, ValidatorRefusesBadStates) {
  struct Case {
    std::function<void(Plan &)> edit;
    const char *message;
  };
  const Case cases[] = {
      {[](Plan &p) { p.states[0].bytes = 4; },
       "state 0 'blk.0.k_cache' has 4 bytes, but its shape and dtype need 512"},
      {[](Plan &p) { p.states[1].name = "blk.0.k_cache"; },
       "state 1 'blk.0.k_cache': a state needs a name of its own"},
      {[](Plan &p) { p.states[0].dtype = PlanDType::BF16; },
       "state 0 'blk.0.k_cache' has 512 bytes, but its shape and dtype need "
       "256"},
      {[](Plan &p) { p.states[0].dtype = PlanDType::I8; },
       "state 0 'blk.0.k_cache' has 512 bytes, but its shape and dtype need "
       "256"},
      {[](Plan &p) { p.states[0].dtype = PlanDType::F16; },
       "state 0 'blk.0.k_cache' is f16; states are f32, bf16 or i8"},
      {[](Plan &p) {
         p.states[0].dtype = PlanDType::I8;
         p.states[0].shape = {2, 16, 2, 2};
       },
       "state 0 'blk.0.k_cache' is i8 with rows of 2 values; an i8 state's "
       "last dim is a multiple of 4"},
      {[](Plan &p) {
         // 2^48 rows of 4: 2^50 values, 2^50 scale bytes on top.
         p.states[0].dtype = PlanDType::I8;
         p.states[0].shape = {uint64_t(1) << 48, 4};
       },
       "state 0 'blk.0.k_cache' is larger than 2^50 bytes"},
      {[](Plan &p) { p.buffers[4].dtype = PlanDType::I8; },
       "buffer 4 'o' is i8; i8 is a state dtype only"},
      {[](Plan &p) { p.states[0].shape = {2, 0, 1, 4}; },
       "state 0 'blk.0.k_cache' is larger than 2^50 bytes (or has an empty "
       "dim)"},
      {[](Plan &p) {
         p.states[0].shape = {uint64_t(1) << 40, uint64_t(1) << 40};
         p.states[0].bytes = 0;
       },
       "state 0 'blk.0.k_cache' is larger than 2^50 bytes"},
      {[](Plan &p) {
         // Each within the cap, their sum not.
         for (PlanState &st : p.states) {
           st.shape = {uint64_t(1) << 47};
           st.bytes = uint64_t(1) << 49;
         }
         p.states.push_back(p.states[0]);
         p.states.back().name = "third";
       },
       "the states need more than 2^50 bytes together (at state 2 'third')"},
      {[](Plan &p) { p.options.erase("max_context"); },
       "a plan with state needs the option 'max_context' in 1..16777216"},
      {[](Plan &p) { p.options["max_batch"] = 0; },
       "a plan with state needs the option 'max_batch' in 1..65536"},
      {[](Plan &p) { p.inputs = {0}; },
       "a plan with state has three inputs (tokens, positions, slots), not 1"},
      {[](Plan &p) { p.buffers[2].dtype = PlanDType::F32; },
       "the input buffer 'seq' (the slots) must be i32 [T]"},
      {[](Plan &p) { p.kernels[1].inputs[0].index = 2; },
       "kernel 1 (kv_store) reads state 2, which does not exist"},
      {[](Plan &p) { p.kernels[1].inputs[0] = {false, 3}; },
       "kernel 1 (kv_store) writes its input 0 in place, which must be a "
       "state"},
      {[](Plan &p) { p.kernels[1].outputs = {4}; },
       "kernel 1 (kv_store) takes 4..4 inputs and 0 outputs, got 4 and 1"},
      {[](Plan &p) { p.kernels[2].recipe = Recipe::State; },
       "kernel 2 (state): 'state' is not a kernel"},
      {[](Plan &p) {
         p.kernels[2].recipe = Recipe::State;
         p.kernels[2].inputs.clear();
         p.kernels[2].outputs = {4};
       },
       "kernel 2 (state): 'state' is not a kernel"},
      {[](Plan &p) { p.kernels[1].inputs[0] = {true, 0, true}; },
       "names an input that is both a weight and a state"},
      {[](Plan &p) { p.version = 2; }, "a version 2 plan has no state"},
  };
  for (const Case &c : cases) {
    Plan p = statePlan();
    c.edit(p);
    std::string e = validationError(p);
    EXPECT_NE(e.find(c.message), std::string::npos)
        << "want: " << c.message << "\ngot:  " << e;
  }
  // A fused kernel takes no state.
  Plan f = statePlan();
  PlanKernel &att = f.kernels[3];
  att.fused = "att";
  BodyOp op;
  op.recipe = Recipe::AttentionCached;
  op.attrs = att.attrs;
  for (uint32_t i = 0; i < 5; ++i)
    op.inputs.push_back({BodyRef::Kind::In, i, {}});
  op.outputs = {{BodyRef::Kind::Out, 0, {}}};
  att.body = {op};
  att.attrs.clear();
  std::string e = validationError(f);
  EXPECT_NE(e.find("kernel 3 (fused:att) is fused and takes a state"),
            std::string::npos)
      << e;
}

TEST(PlanState, StateBytesOfEachDType) {
  // f32 and bf16 dense; i8 rows of the last dim, D values then an f32
  // scale each.
  EXPECT_EQ(stateBytes(PlanDType::F32, {2, 16, 1, 4}), 512u);
  EXPECT_EQ(stateBytes(PlanDType::BF16, {2, 16, 1, 4}), 256u);
  EXPECT_EQ(stateBytes(PlanDType::I8, {2, 16, 1, 4}), 2u * 16 * 1 * (4 + 4));
  EXPECT_EQ(stateBytes(PlanDType::I8, {4, 4096, 8, 128}),
            uint64_t(4) * 4096 * 8 * 132);
  // Refused: rows not a multiple of 4, an empty dim or shape, a dtype that
  // is no state's, overflow.
  EXPECT_EQ(stateBytes(PlanDType::I8, {2, 16, 1, 6}), std::nullopt);
  EXPECT_EQ(stateBytes(PlanDType::F32, {2, 0, 4}), std::nullopt);
  EXPECT_EQ(stateBytes(PlanDType::F32, {}), std::nullopt);
  EXPECT_EQ(stateBytes(PlanDType::F16, {4}), std::nullopt);
  EXPECT_EQ(stateBytes(PlanDType::F32, {uint64_t(1) << 62, 4}), std::nullopt);
  EXPECT_EQ(stateBytes(PlanDType::I8, {uint64_t(1) << 62, 4}), std::nullopt);
}

TEST(PlanState, ValidatorAcceptsBf16AndI8Caches) {
  for (PlanDType dt : {PlanDType::BF16, PlanDType::I8}) {
    Plan p = statePlan();
    for (PlanState &st : p.states) {
      st.dtype = dt;
      st.bytes = *stateBytes(dt, st.shape);
    }
    std::string err;
    EXPECT_TRUE(validatePlan(p, err)) << planDTypeName(dt) << ": " << err;
    Plan q;
    ASSERT_TRUE(planFromJson(planToJson(p), "plan.json", q, err)) << err;
    EXPECT_EQ(q.states[0].dtype, dt);
    // 128 values: bf16 2 bytes each; i8 1 each and 32 row scales.
    EXPECT_EQ(q.states[0].bytes, 256u);
  }
}

TEST(PlanState, StatesStayOutOfTheMemoryProof) {
  // The caches are not arena buffers: a plan whose buffers reuse every
  // byte still validates, and the live sets name buffers only.
  Plan p = statePlan();
  std::string err;
  ASSERT_TRUE(validatePlan(p, err)) << err;
  for (const LiveSet &s : planLiveSets(p))
    for (uint32_t v : s.values)
      EXPECT_LT(v, p.buffers.size());
}
