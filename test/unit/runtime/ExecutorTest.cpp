//===- ExecutorTest.cpp - plans end to end, and every error path ----------===//
//
// A tiny model (embedding Q8_0 -> rms_norm -> Q4_K matmul -> silu
// -> residual add -> Q6_K output head) written as a GGUF and a hand-built
// plan, run at every prompt length against a double-precision reference.
//
//===----------------------------------------------------------------------===//
#include "RuntimeTestUtil.h"

#include "runtime/Generate.h"
#include "runtime/Session.h"
#include "runtime/format/Gguf.h"

#include <filesystem>
#include <fstream>
#include <iterator>

#include <sys/wait.h>
#include <unistd.h>

using namespace strata;
using namespace strata::runtime;
using namespace strata::runtime::test;
using format::Plan;
using format::PlanDim;
using format::PlanOperand;
namespace fs = std::filesystem;

namespace {

class TempDir {
public:
  TempDir() {
    std::string templ = ::testing::TempDir() + "strata-runtime-test-XXXXXX";
    EXPECT_NE(::mkdtemp(templ.data()), nullptr);
    path = templ;
  }
  ~TempDir() { fs::remove_all(path); }
  std::string file(const std::string &name) const { return path + "/" + name; }
  std::string path;
};

constexpr PlanDim kT = {1, 0};
PlanDim c(int64_t v) { return {0, v}; }
PlanOperand B(uint32_t i) { return {false, i}; }
PlanOperand W(uint32_t i) { return {true, i}; }

/// Builds plans by hand: buffers packed in order (or at a given offset).
struct PlanBuilder {
  Plan p;
  uint64_t end = 0;

  explicit PlanBuilder(int64_t maxTokens) {
    p.model = "tiny";
    p.arch = "tiny";
    p.target = "host";
    p.maxTokens = maxTokens;
  }
  uint32_t buffer(const std::string &name, PlanDType type,
                  std::vector<PlanDim> shape, int64_t at = -1) {
    format::PlanBuffer b;
    b.name = name;
    b.dtype = type;
    b.shape = std::move(shape);
    b.bytes = b.numElements(p.maxTokens) * format::planDTypeSize(type);
    b.offset = at >= 0 ? static_cast<uint64_t>(at) : end;
    end = std::max(end, (b.offset + b.bytes + 63) / 64 * 64);
    p.buffers.push_back(b);
    return static_cast<uint32_t>(p.buffers.size() - 1);
  }
  uint32_t weight(const std::string &name, GgmlType type,
                  std::vector<uint64_t> dims) {
    p.weights.push_back({name, type, std::move(dims)});
    return static_cast<uint32_t>(p.weights.size() - 1);
  }
  void kernel(Recipe r, std::vector<PlanOperand> ins,
              std::vector<uint32_t> outs, AttrMap attrs = {}) {
    format::PlanKernel k;
    k.recipe = r;
    k.inputs = std::move(ins);
    k.outputs = std::move(outs);
    k.attrs = std::move(attrs);
    p.kernels.push_back(std::move(k));
  }
  Plan done() {
    p.arenaBytes = end;
    p.arenaLowerBound = end;
    return p;
  }
};

constexpr int64_t kV = 50, kD = 256, kMaxT = 6;

/// The tiny model: GGUF on disk, its plan, and its dequantised weights.
class TinyModel : public ::testing::Test {
protected:
  void SetUp() override {
    SCOPED_TRACE(rng.trace());
    embd = weight(GgmlType::Q8_0, {kV, kD}, rng.normal(kV * kD));
    norm = weight(GgmlType::F32, {kD}, rng.uniform(kD, 0.5f, 1.5f));
    w1 = weight(GgmlType::Q4_K, {kD, kD}, rng.normal(kD * kD, 0.06f));
    head = weight(GgmlType::Q6_K, {kV, kD}, rng.normal(kV * kD, 0.06f));
    conv = weight(GgmlType::F32, {kD, 3}, rng.normal(kD * 3, 0.5f));
    format::ModelInfo info;
    info.addMeta("general.architecture", format::MetaValue::makeString("tiny"));
    std::vector<format::GgufTensorData> tensors;
    auto add = [&](const char *name, HostTensor &t) {
      format::GgufTensorData d;
      d.info.name = name;
      d.info.type = t.weightType;
      for (auto it = t.shape.rbegin(); it != t.shape.rend(); ++it)
        d.info.dims.push_back(static_cast<uint64_t>(*it));
      d.bytes = t.bytes;
      tensors.push_back(std::move(d));
    };
    add("token_embd.weight", embd);
    add("output_norm.weight", norm);
    add("blk.0.ffn.weight", w1);
    add("output.weight", head);
    add("blk.0.conv.weight", conv); // recurrentPlan()'s only
    std::string error;
    gguf = dir.file("tiny.gguf");
    ASSERT_TRUE(format::writeGguf(gguf, info, tensors, error)) << error;
    plan = buildPlan();
  }

  Plan buildPlan() {
    PlanBuilder b(kMaxT);
    uint32_t wEmbd = b.weight("token_embd.weight", GgmlType::Q8_0, {kD, kV});
    uint32_t wNorm = b.weight("output_norm.weight", GgmlType::F32, {kD});
    uint32_t wW1 = b.weight("blk.0.ffn.weight", GgmlType::Q4_K, {kD, kD});
    uint32_t wHead = b.weight("output.weight", GgmlType::Q6_K, {kD, kV});
    uint32_t tok = b.buffer("tokens", PlanDType::I32, {kT});
    uint32_t x = b.buffer("x", PlanDType::F32, {kT, c(kD)});
    uint32_t xn = b.buffer("xn", PlanDType::F32, {kT, c(kD)});
    uint32_t h = b.buffer("h", PlanDType::F32, {kT, c(kD)});
    // Catalog kernels write storage of their own (only fused kernels tie
    // an output to an input): hs does not share h's bytes.
    uint32_t hs = b.buffer("hs", PlanDType::F32, {kT, c(kD)});
    uint32_t r = b.buffer("r", PlanDType::F32, {kT, c(kD)});
    uint32_t logits = b.buffer("logits", PlanDType::F32, {kT, c(kV)});
    b.kernel(Recipe::GetRows, {W(wEmbd), B(tok)}, {x});
    b.kernel(Recipe::RmsNorm, {B(x), W(wNorm)}, {xn}, {{"eps", aFloat(1e-6)}});
    b.kernel(Recipe::Matmul, {B(xn), W(wW1)}, {h});
    b.kernel(Recipe::Silu, {B(h)}, {hs});
    b.kernel(Recipe::Add, {B(hs), B(x)}, {r});
    b.kernel(Recipe::Matmul, {B(r), W(wHead)}, {logits});
    b.p.inputs = {tok};
    b.p.outputs = {logits};
    return b.done();
  }

  /// The plan of buildPlan() with generation state its logits do not read:
  /// a cache of the embeddings, one slot of \p context positions (inputs
  /// tokens, positions, slots). A Generator decodes over it, and every
  /// position's logits still depend on its token only.
  Plan statefulPlan(int64_t context = kMaxT) {
    Plan p = buildPlan();
    PlanBuilder b(kMaxT);
    b.p = p;
    b.end = p.arenaBytes;
    uint32_t pos = b.buffer("pos", PlanDType::I32, {kT});
    uint32_t seq = b.buffer("seq", PlanDType::I32, {kT});
    uint32_t x = 1; // buildPlan's embeddings [T, D]
    uint32_t xh = b.buffer("xh", PlanDType::F32, {kT, c(1), c(kD)},
                           static_cast<int64_t>(b.p.buffers[x].offset));
    b.p.buffers[xh].viewOf = x;
    b.p.states = {{"memo",
                   PlanDType::F32,
                   {1, uint64_t(context), 1, kD},
                   uint64_t(context) * kD * 4}};
    b.p.options = {{"max_context", context}, {"max_batch", 1}};
    // After the embedding lookup, before anything else reads x.
    format::PlanKernel store;
    store.recipe = Recipe::KvStore;
    store.inputs = {PlanOperand{false, 0, true}, B(xh), B(seq), B(pos)};
    b.p.kernels.insert(b.p.kernels.begin() + 1, store);
    b.p.inputs = {p.inputs[0], pos, seq};
    return b.done();
  }

  /// Logits [T, V] in double from the dequantised weights.
  std::vector<double> reference(const std::vector<int32_t> &tokens) {
    std::vector<float> e = embd.floats(), nw = norm.floats(), a = w1.floats(),
                       o = head.floats();
    std::vector<double> out;
    for (int32_t id : tokens) {
      std::vector<double> x(e.begin() + id * kD, e.begin() + (id + 1) * kD);
      double ss = 0;
      for (double v : x)
        ss += v * v;
      double scale = 1 / std::sqrt(ss / kD + 1e-6);
      std::vector<double> r(kD);
      for (int64_t n = 0; n < kD; ++n) {
        double acc = 0;
        for (int64_t k = 0; k < kD; ++k)
          acc += x[k] * scale * nw[k] * a[n * kD + k];
        r[n] = acc / (1 + std::exp(-acc)) + x[n];
      }
      for (int64_t v = 0; v < kV; ++v) {
        double acc = 0;
        for (int64_t k = 0; k < kD; ++k)
          acc += r[k] * o[v * kD + k];
        out.push_back(acc);
      }
    }
    return out;
  }

  std::unique_ptr<Executor> make(const Plan &p, std::string &error) {
    return Executor::create(p, gguf, "cpu", error);
  }

  Rng rng;
  TempDir dir;
  std::string gguf;
  HostTensor embd, norm, w1, head, conv;
  Plan plan;
};

TEST_F(TinyModel, EveryPromptLengthMatchesTheReference) {
  SCOPED_TRACE(rng.trace());
  std::string error;
  auto ex = make(plan, error);
  ASSERT_TRUE(ex) << error;
  std::vector<float> firstRow;
  for (int64_t t = 1; t <= kMaxT; ++t) {
    SCOPED_TRACE(fmt::format("T' = {}", t));
    std::vector<int32_t> tokens = rng.integers(t, 0, kV - 1);
    tokens[0] = 7;
    RunOutput out;
    ASSERT_TRUE(ex->run(tokens, out, error)) << error;
    EXPECT_EQ(out.shape, (std::vector<int64_t>{t, kV}));
    EXPECT_LT(nmse(out.data, reference(tokens)), kF32Bar);
    // Positions are independent here: token 7's logits never change.
    std::vector<float> row(out.data.begin(), out.data.begin() + kV);
    if (t == 1)
      firstRow = row;
    EXPECT_EQ(row, firstRow);
  }
}

/// The tiny model's embedding as keys, values and queries of 4 heads of 64
/// through a KV cache of 2 slots x 8 positions (generation state, plan
/// version 3), then the head: logits of row r depend on the rows of its
/// slot up to its position. Runs of at most \p maxTokens rows.
Plan statePlan(int64_t maxTokens = kMaxT) {
  PlanBuilder b(maxTokens);
  uint32_t wEmbd = b.weight("token_embd.weight", GgmlType::Q8_0, {kD, kV});
  uint32_t wHead = b.weight("output.weight", GgmlType::Q6_K, {kD, kV});
  uint32_t tok = b.buffer("tokens", PlanDType::I32, {kT});
  uint32_t pos = b.buffer("pos", PlanDType::I32, {kT});
  uint32_t seq = b.buffer("seq", PlanDType::I32, {kT});
  uint32_t x = b.buffer("x", PlanDType::F32, {kT, c(kD)});
  uint32_t xh = b.buffer("xh", PlanDType::F32, {kT, c(4), c(64)},
                         static_cast<int64_t>(b.p.buffers[x].offset));
  b.p.buffers[xh].viewOf = x;
  uint32_t o = b.buffer("o", PlanDType::F32, {kT, c(4), c(64)});
  uint32_t of = b.buffer("of", PlanDType::F32, {kT, c(kD)},
                         static_cast<int64_t>(b.p.buffers[o].offset));
  b.p.buffers[of].viewOf = o;
  uint32_t logits = b.buffer("logits", PlanDType::F32, {kT, c(kV)});
  b.p.states = {{"k_cache", PlanDType::F32, {2, 8, 4, 64}, 2 * 8 * 4 * 64 * 4},
                {"v_cache", PlanDType::F32, {2, 8, 4, 64}, 2 * 8 * 4 * 64 * 4}};
  b.p.options = {{"max_context", 8}, {"max_batch", 2}};
  PlanOperand kc{false, 0, true}, vc{false, 1, true};
  b.kernel(Recipe::GetRows, {W(wEmbd), B(tok)}, {x});
  b.kernel(Recipe::KvStore, {kc, B(xh), B(seq), B(pos)}, {});
  b.kernel(Recipe::KvStore, {vc, B(xh), B(seq), B(pos)}, {});
  b.kernel(Recipe::AttentionCached, {B(xh), kc, vc, B(seq), B(pos)}, {o},
           {{"scale", aFloat(0.125)}});
  b.kernel(Recipe::Matmul, {B(of), W(wHead)}, {logits});
  b.p.inputs = {tok, pos, seq};
  b.p.outputs = {logits};
  return b.done();
}

/// statePlan() with recurrent state too: the embeddings go through a
/// causal conv of 3 taps (conv1d_cached, its window a state of 2 slots)
/// before the K/V caches and attention of \p context positions, so every
/// logits row depends on the slot's earlier rows through both kinds of
/// state. With \p lastRow the plan returns the run's last row only
/// (strata-compile --logits last); \p slots is its max_batch.
Plan recurrentPlan(int64_t context, int64_t maxTokens = kMaxT,
                   bool lastRow = false, uint64_t slots = 2) {
  PlanBuilder b(maxTokens);
  uint32_t wEmbd = b.weight("token_embd.weight", GgmlType::Q8_0, {kD, kV});
  uint32_t wConv = b.weight("blk.0.conv.weight", GgmlType::F32, {3, kD});
  uint32_t wHead = b.weight("output.weight", GgmlType::Q6_K, {kD, kV});
  uint32_t tok = b.buffer("tokens", PlanDType::I32, {kT});
  uint32_t pos = b.buffer("pos", PlanDType::I32, {kT});
  uint32_t seq = b.buffer("seq", PlanDType::I32, {kT});
  uint32_t x = b.buffer("x", PlanDType::F32, {kT, c(kD)});
  uint32_t y = b.buffer("y", PlanDType::F32, {kT, c(kD)});
  uint32_t yh = b.buffer("yh", PlanDType::F32, {kT, c(4), c(64)},
                         static_cast<int64_t>(b.p.buffers[y].offset));
  b.p.buffers[yh].viewOf = y;
  uint32_t o = b.buffer("o", PlanDType::F32, {kT, c(4), c(64)});
  uint32_t of = b.buffer("of", PlanDType::F32, {kT, c(kD)},
                         static_cast<int64_t>(b.p.buffers[o].offset));
  b.p.buffers[of].viewOf = o;
  uint32_t last =
      lastRow ? b.buffer("of.last", PlanDType::F32, {c(1), c(kD)}) : of;
  uint32_t logits =
      b.buffer("logits", PlanDType::F32, {lastRow ? c(1) : kT, c(kV)});
  uint64_t cache = slots * uint64_t(context) * 4 * 64 * 4;
  b.p.states = {
      {"k_cache", PlanDType::F32, {slots, uint64_t(context), 4, 64}, cache},
      {"v_cache", PlanDType::F32, {slots, uint64_t(context), 4, 64}, cache},
      {"conv_window", PlanDType::F32, {slots, 2, kD}, slots * 2 * kD * 4}};
  b.p.options = {{"max_context", context},
                 {"max_batch", static_cast<int64_t>(slots)}};
  PlanOperand kc{false, 0, true}, vc{false, 1, true}, win{false, 2, true};
  b.kernel(Recipe::GetRows, {W(wEmbd), B(tok)}, {x});
  b.kernel(Recipe::Conv1dCached, {win, B(x), W(wConv), B(seq), B(pos)}, {y});
  b.kernel(Recipe::KvStore, {kc, B(yh), B(seq), B(pos)}, {});
  b.kernel(Recipe::KvStore, {vc, B(yh), B(seq), B(pos)}, {});
  b.kernel(Recipe::AttentionCached, {B(yh), kc, vc, B(seq), B(pos)}, {o},
           {{"scale", aFloat(0.125)}});
  if (lastRow)
    b.kernel(Recipe::LastRows, {B(of)}, {last}, {{"n", aInt(1)}});
  b.kernel(Recipe::Matmul, {B(last), W(wHead)}, {logits});
  b.p.inputs = {tok, pos, seq};
  b.p.outputs = {logits};
  return b.done();
}

/// Row \p r of \p out ([T, V]).
std::vector<float> rowOf(const RunOutput &out, int64_t r) {
  return {out.data.begin() + r * kV, out.data.begin() + (r + 1) * kV};
}

TEST_F(TinyModel, StateKeepsItsContentsAcrossRuns) {
  std::string error;
  Plan p = statePlan();
  auto ex = make(p, error);
  ASSERT_TRUE(ex) << error;
  EXPECT_EQ(ex->maxContext(), 8);
  EXPECT_EQ(ex->maxBatch(), 2);
  std::vector<float> k;
  ASSERT_TRUE(ex->readState(0, k, error)) << error;
  EXPECT_EQ(k, std::vector<float>(2 * 8 * 4 * 64, 0.0f));
  // A prompt of 4 tokens in slot 0 (run: positions 0.., slot 0) ...
  std::vector<int32_t> prompt = {3, 9, 27, 31};
  RunOutput whole;
  ASSERT_TRUE(ex->run(prompt, whole, error)) << error;
  ASSERT_EQ(whole.shape, (std::vector<int64_t>{4, kV}));
  // ... equals the same prompt one row at a time in slot 1, and a second
  // run reads what the first stored: each decode row is the prompt's row.
  for (int32_t i = 0; i < 4; ++i) {
    RunOutput one;
    ASSERT_TRUE(ex->runRows({{prompt[i], i, 1}}, one, error)) << error;
    EXPECT_EQ(rowOf(one, 0), rowOf(whole, i)) << "row " << i;
  }
  // Rows of both slots in one run, each at its own position.
  RunOutput both;
  ASSERT_TRUE(ex->runRows({{5, 4, 1}, {5, 4, 0}}, both, error)) << error;
  EXPECT_EQ(rowOf(both, 0), rowOf(both, 1));
  // Zeroed states forget: slot 0's next row no longer sees the prompt.
  ASSERT_TRUE(ex->resetStates(error)) << error;
  ASSERT_TRUE(ex->readState(1, k, error)) << error;
  EXPECT_EQ(k, std::vector<float>(2 * 8 * 4 * 64, 0.0f));
  EXPECT_FALSE(ex->readState(2, k, error));
}

/// A Session appends in chunks of max_tokens rows and decodes one row per
/// slot; every logits row equals the one run of the whole sequence.
TEST_F(TinyModel, SessionChunksAndBatchesEqualWholeRuns) {
  std::string error;
  Plan p = statePlan();
  // Whole sequences (up to the context), slot 0 from position 0.
  auto ref = make(statePlan(8), error);
  ASSERT_TRUE(ref) << error;
  auto ex = make(p, error);
  ASSERT_TRUE(ex) << error;
  auto session = Session::create(*ex, error);
  ASSERT_TRUE(session) << error;
  EXPECT_EQ(session->slots(), 2);
  EXPECT_EQ(session->context(), 8);
  EXPECT_EQ(session->chunk(), kMaxT);
  EXPECT_EQ(session->vocabSize(), kV);
  auto whole = [&](const std::vector<int32_t> &seq) {
    RunOutput out;
    EXPECT_TRUE(ref->run(seq, out, error)) << error;
    return rowOf(out, static_cast<int64_t>(seq.size()) - 1);
  };
  // 7 tokens in slot 1: two runs (6 + 1 rows).
  std::vector<int32_t> a = {3, 9, 27, 31, 4, 8, 15}, b = {11, 2};
  std::vector<float> logits;
  ASSERT_TRUE(session->append(1, a, logits, error)) << error;
  EXPECT_EQ(session->runs(), 2u);
  EXPECT_EQ(session->length(1), 7);
  EXPECT_EQ(logits, whole(a));
  ASSERT_TRUE(session->append(0, b, logits, error)) << error;
  EXPECT_EQ(logits, whole(b));
  // One decode run for both slots, in the order asked.
  std::vector<SessionStep> steps = {{0, 7}, {1, 5}};
  ASSERT_TRUE(session->decode(steps, logits, error)) << error;
  EXPECT_EQ(session->runs(), 4u);
  ASSERT_EQ(logits.size(), size_t(2 * kV));
  b.push_back(7);
  a.push_back(5);
  EXPECT_EQ(std::vector<float>(logits.begin(), logits.begin() + kV), whole(b));
  EXPECT_EQ(std::vector<float>(logits.begin() + kV, logits.end()), whole(a));
  EXPECT_EQ(session->length(0), 3);
  EXPECT_EQ(session->length(1), 8);
  // Refused before any run, the lengths unchanged.
  struct Case {
    std::vector<SessionStep> steps;
    const char *message;
  };
  const Case cases[] = {
      {{{1, 3}},
       "step 0: slot 1 is full (its 8 tokens fill the plan's "
       "context; strata-compile --max-context)"},
      {{{0, 3}, {0, 4}}, "step 1: slot 0 has two steps in one decode"},
      {{{2, 3}}, "step 0: slot 2 does not exist (the plan has 2 slots"},
      {{{0, 50}}, "step 0: id 50 is out of range (vocabulary of 50 tokens)"},
      {{}, "nothing to decode: no steps"},
  };
  for (const Case &c : cases) {
    EXPECT_FALSE(session->decode(c.steps, logits, error));
    EXPECT_NE(error.find(c.message), std::string::npos)
        << "want: " << c.message << "\ngot:  " << error;
  }
  EXPECT_FALSE(session->append(0, std::vector<int32_t>(6, 1), logits, error));
  EXPECT_EQ(error, "slot 0 holds 3 tokens; 6 more would pass the plan's "
                   "context of 8 positions (strata-compile --max-context)");
  EXPECT_EQ(session->runs(), 4u);
  EXPECT_EQ(session->length(0), 3);
  // A reset slot starts again at position 0: the same logits as a fresh
  // sequence, whatever the cache still holds.
  session->reset(1);
  ASSERT_TRUE(session->append(1, b, logits, error)) << error;
  EXPECT_EQ(logits, whole(b));
  // A plan without state has no decode entry.
  auto plain = make(plan, error);
  ASSERT_TRUE(plain) << error;
  EXPECT_FALSE(Session::create(*plain, error));
  EXPECT_EQ(error, "the plan has no decode entry (no generation state: it was "
                   "compiled without --max-context); recompile it with "
                   "strata-compile --max-context N");
}

/// \p p with the greedy ids of add-greedy-ids: an argmax kernel of its
/// logits (outputs[0]) as a second output.
Plan withGreedyIds(Plan p) {
  PlanBuilder b(p.maxTokens);
  b.p = p;
  b.end = p.arenaBytes;
  const format::PlanBuffer lg = p.buffers[p.outputs[0]];
  uint32_t ids = b.buffer("logits.ids", PlanDType::I32, {lg.shape[0]});
  b.kernel(Recipe::Argmax, {B(p.outputs[0])}, {ids});
  b.p.outputs.push_back(ids);
  return b.done();
}

/// The first index of the highest value of a row.
int32_t firstMax(const float *row, int64_t n) {
  return static_cast<int32_t>(std::max_element(row, row + n) - row);
}

/// Session::decodeGreedy reads the plan's ids: each the argmax of the row
/// decode() returns, for every slot of a step, step after step; the
/// Generator takes them where no logits are wanted, with the same tokens.
TEST_F(TinyModel, DecodeGreedyTakesThePlansIds) {
  std::string error;
  auto withIds = make(withGreedyIds(recurrentPlan(8)), error);
  ASSERT_TRUE(withIds) << error;
  auto plain = make(recurrentPlan(8), error);
  ASSERT_TRUE(plain) << error;
  EXPECT_TRUE(withIds->hasGreedyIds());
  EXPECT_FALSE(plain->hasGreedyIds());
  auto greedy = Session::create(*withIds, error);
  ASSERT_TRUE(greedy) << error;
  auto rows = Session::create(*plain, error);
  ASSERT_TRUE(rows) << error;
  std::vector<float> logits, want;
  std::vector<int32_t> ids;
  for (int32_t slot : {0, 1}) {
    std::vector<int32_t> prompt = {3 + slot, 9, 27};
    ASSERT_TRUE(greedy->append(slot, prompt, logits, error)) << error;
    ASSERT_TRUE(rows->append(slot, prompt, want, error)) << error;
    EXPECT_EQ(logits, want);
  }
  std::vector<SessionStep> a = {{1, 4}, {0, 8}}, b = a;
  for (int step = 0; step < 4; ++step) {
    ASSERT_TRUE(greedy->decodeGreedy(a, ids, error)) << error;
    ASSERT_TRUE(rows->decode(b, want, error)) << error;
    ASSERT_EQ(ids.size(), 2u);
    for (size_t i = 0; i < 2; ++i) {
      b[i].token = firstMax(want.data() + i * kV, kV);
      EXPECT_EQ(ids[i], b[i].token) << "step " << step << " row " << i;
      a[i].token = ids[i];
    }
  }
  EXPECT_EQ(greedy->runs(), rows->runs());
  EXPECT_EQ(greedy->length(0), rows->length(0));
  // Refused as decode() refuses, and on a plan without ids.
  EXPECT_FALSE(greedy->decodeGreedy({}, ids, error));
  EXPECT_EQ(error, "nothing to decode: no steps");
  EXPECT_FALSE(rows->decodeGreedy(b, ids, error));
  EXPECT_EQ(error, "greedy ids on the device need a plan that returns them "
                   "(strata-compile --greedy-ids on, the default with "
                   "--max-context)");
  // The Generator: the same tokens with and without the logits.
  SamplerOptions temp0;
  temp0.temperature = 0;
  std::vector<int32_t> got[2];
  for (bool wanted : {true, false}) {
    auto gen = Generator::create(*withIds, temp0, nullptr, error);
    ASSERT_TRUE(gen) << error;
    gen->setLogitsWanted(wanted);
    ASSERT_TRUE(gen->start(std::vector<int32_t>{5, 6}, error)) << error;
    for (int i = 0; i < 5; ++i) {
      int32_t token = -1;
      ASSERT_TRUE(gen->next(token, error)) << error;
      got[wanted].push_back(token);
      // The first token comes from the prompt's logits; later ones from
      // ids alone when no logits are wanted.
      EXPECT_EQ(gen->logits().size(), wanted || i == 0 ? size_t(kV) : 0u)
          << "token " << i;
    }
  }
  EXPECT_EQ(got[0], got[1]);
}

/// Over a plan with state the Generator decodes one row a step (slot 0):
/// the logits of each step are the last row of the whole sequence's run.
TEST_F(TinyModel, GeneratorDecodesOverTheState) {
  std::string error;
  Plan p = statePlan();
  auto ref = make(statePlan(8), error);
  ASSERT_TRUE(ref) << error;
  auto ex = make(p, error);
  ASSERT_TRUE(ex) << error;
  SamplerOptions greedy;
  greedy.temperature = 0;
  auto gen = Generator::create(*ex, greedy, nullptr, error);
  ASSERT_TRUE(gen) << error;
  EXPECT_EQ(gen->contextLimit(), 8); // max_context, not max_tokens (6)
  std::vector<int32_t> seq = {3, 9, 27, 31, 4, 8, 15};
  ASSERT_TRUE(gen->start(seq, error)) << error;
  for (int i = 0; i < 2; ++i) {
    RunOutput out;
    ASSERT_TRUE(ref->run(seq, out, error)) << error;
    std::vector<float> want = rowOf(out, static_cast<int64_t>(seq.size()) - 1);
    int32_t token = -1;
    ASSERT_TRUE(gen->next(token, error)) << error;
    EXPECT_EQ(std::vector<float>(gen->logits().begin(), gen->logits().end()),
              want)
        << "step " << i;
    seq.push_back(token);
  }
  // The prompt in two runs (6 + 1 rows), then one decode row.
  EXPECT_EQ(gen->timings().modelRuns, 3u);
  int32_t token = -1;
  EXPECT_FALSE(gen->next(token, error));
  EXPECT_EQ(error, "the context is full: the next step would hold 9 tokens, "
                   "more than the plan's max_context 8; recompile it with a "
                   "larger --max-context");
}

/// Rows taken back: a rewind leaves caches to be rewritten by position
/// and restores recurrent state from the slot's checkpoint, so the rows
/// that follow equal one run of the sequence without the rows taken back.
TEST_F(TinyModel, SessionRewindsRecurrentStateToItsCheckpoint) {
  std::string error;
  auto ref = make(recurrentPlan(16, 16), error);
  ASSERT_TRUE(ref) << error;
  auto ex = make(recurrentPlan(16), error);
  ASSERT_TRUE(ex) << error;
  EXPECT_TRUE(ex->hasRecurrentState());
  EXPECT_EQ(ex->recurrentSlotBytes(), uint64_t(2 * kD * 4));
  auto session = Session::create(*ex, error);
  ASSERT_TRUE(session) << error;
  EXPECT_TRUE(session->recurrent());
  EXPECT_TRUE(session->everyRowLogits());
  // The reference: a, then b, in one run.
  std::vector<int32_t> a = {3, 9, 27, 31}, junk = {40, 41, 42}, b = {4, 8, 15};
  std::vector<int32_t> ab = a;
  ab.insert(ab.end(), b.begin(), b.end());
  RunOutput want;
  ASSERT_TRUE(ref->run(ab, want, error)) << error;

  std::vector<float> logits;
  ASSERT_TRUE(session->append(1, a, logits, error)) << error;
  EXPECT_EQ(session->checkpointLength(1), -1);
  ASSERT_TRUE(session->checkpoint(1, error)) << error;
  EXPECT_EQ(session->checkpointLength(1), 4);
  EXPECT_EQ(session->stateBytesCopied(), uint64_t(2 * kD * 4));
  // Junk rows advance the conv window and fill cache positions 4..6.
  ASSERT_TRUE(session->appendEach(1, junk, logits, error)) << error;
  EXPECT_EQ(session->length(1), 7);
  // Only the checkpoint's length will do, and not past the sequence.
  EXPECT_FALSE(session->rewind(1, 5, error));
  EXPECT_EQ(error, "rewind: slot 1 has recurrent state, which goes back only "
                   "to its checkpoint (4 tokens), not to 5 tokens");
  EXPECT_FALSE(session->rewind(1, 8, error));
  EXPECT_EQ(error, "rewind: slot 1 holds 7 tokens; it cannot go back to 8");
  EXPECT_FALSE(session->rewind(0, 0, error));
  EXPECT_EQ(error, "rewind: slot 0 has recurrent state, which goes back only "
                   "to its checkpoint (none), not to 0 tokens");
  ASSERT_TRUE(session->rewind(1, 4, error)) << error;
  EXPECT_EQ(session->length(1), 4);
  EXPECT_EQ(session->stateBytesCopied(), uint64_t(2 * 2 * kD * 4));
  // No row ran since: neither a second rewind nor a checkpoint copies.
  ASSERT_TRUE(session->rewind(1, 4, error)) << error;
  ASSERT_TRUE(session->checkpoint(1, error)) << error;
  EXPECT_EQ(session->stateBytesCopied(), uint64_t(2 * 2 * kD * 4));
  // b after a, every row as in the one run.
  ASSERT_TRUE(session->appendEach(1, b, logits, error)) << error;
  ASSERT_EQ(logits.size(), size_t(3 * kV));
  for (int64_t r = 0; r < 3; ++r)
    EXPECT_EQ(std::vector<float>(logits.begin() + r * kV,
                                 logits.begin() + (r + 1) * kV),
              rowOf(want, 4 + r))
        << "row " << r;
  // Rows rewritten by position but the window not restored: the junk
  // shows (else this test would prove nothing).
  auto raw = make(recurrentPlan(16), error);
  ASSERT_TRUE(raw) << error;
  RunOutput out;
  for (const auto &[ids, at] :
       {std::pair{a, 0}, std::pair{junk, 4}, std::pair{b, 4}}) {
    std::vector<Row> rows;
    for (size_t i = 0; i < ids.size(); ++i)
      rows.push_back({ids[i], at + static_cast<int32_t>(i), 0});
    ASSERT_TRUE(raw->runRows(rows, out, error)) << error;
  }
  EXPECT_NE(rowOf(out, 0), rowOf(want, 4));
  // More rows than a run holds, and the executor's own checks.
  EXPECT_FALSE(session->appendEach(0, std::vector<int32_t>(kMaxT + 1, 1),
                                   logits, error));
  EXPECT_EQ(error, "7 tokens in one run, more than the plan's max_tokens 6");
  EXPECT_FALSE(ex->restoreSlot(0, error));
  EXPECT_EQ(error, "slot 0 has no saved state to restore");
  EXPECT_FALSE(ex->saveSlot(2, error));
  EXPECT_EQ(error, "slot 2 does not exist (the plan has 2 slots, "
                   "strata-compile --max-batch)");

  // Caches alone (no recurrent state): any shorter length, nothing copied.
  auto cached = make(statePlan(), error);
  ASSERT_TRUE(cached) << error;
  EXPECT_FALSE(cached->hasRecurrentState());
  EXPECT_EQ(cached->recurrentSlotBytes(), 0u);
  auto plain = Session::create(*cached, error);
  ASSERT_TRUE(plain) << error;
  ASSERT_TRUE(plain->append(0, ab, logits, error)) << error;
  ASSERT_TRUE(plain->rewind(0, 2, error)) << error;
  EXPECT_EQ(plain->length(0), 2);
  EXPECT_EQ(plain->stateBytesCopied(), 0u);

  // A plan of last rows cannot give each row's logits.
  auto last = make(recurrentPlan(16, kMaxT, true), error);
  ASSERT_TRUE(last) << error;
  auto lastSession = Session::create(*last, error);
  ASSERT_TRUE(lastSession) << error;
  EXPECT_FALSE(lastSession->everyRowLogits());
  EXPECT_FALSE(lastSession->appendEach(0, a, logits, error));
  EXPECT_EQ(error, "the plan returns the logits of a run's last row only (it "
                   "was compiled with --logits last); the logits of every row "
                   "need a plan compiled with strata-compile --logits all");
  EXPECT_EQ(lastSession->runs(), 0u);
}

/// runRows with rows to keep: only those rows of the output come back, in
/// the order asked (consecutive ones in one download), equal to the same
/// rows of the whole output; a row past the run is an error.
TEST_F(TinyModel, RunRowsReturnsOnlyTheRowsKept) {
  std::string error;
  auto whole = make(recurrentPlan(16, kMaxT, false, 2), error);
  ASSERT_TRUE(whole) << error;
  auto some = make(recurrentPlan(16, kMaxT, false, 2), error);
  ASSERT_TRUE(some) << error;
  const std::vector<Row> rows = {
      {3, 0, 0}, {9, 1, 0}, {27, 2, 0}, {5, 0, 1}, {11, 1, 1}};
  RunOutput all, kept;
  ASSERT_TRUE(whole->runRows(rows, all, error)) << error;
  const std::vector<int64_t> keep = {4, 1, 2, 0};
  ASSERT_TRUE(some->runRows(rows, kept, error, &keep)) << error;
  ASSERT_EQ(kept.shape, (std::vector<int64_t>{4, kV}));
  ASSERT_EQ(kept.data.size(), size_t(4 * kV));
  for (size_t i = 0; i < keep.size(); ++i)
    for (int64_t v = 0; v < kV; ++v)
      ASSERT_EQ(kept.data[i * kV + v], all.data[keep[i] * kV + v])
          << "kept row " << i << " (row " << keep[i] << ") logit " << v;
  // The state advanced as in the whole run: the next rows agree too.
  const std::vector<Row> next = {{7, 3, 0}, {8, 2, 1}};
  ASSERT_TRUE(whole->runRows(next, all, error)) << error;
  ASSERT_TRUE(some->runRows(next, kept, error)) << error;
  EXPECT_EQ(kept.data, all.data);
  // A row past the run's is refused before any kernel runs: the state is
  // as the whole run left it.
  const std::vector<int64_t> past = {0, 2};
  EXPECT_FALSE(some->runRows({{1, 4, 0}}, kept, error, &past));
  EXPECT_NE(error.find("row 2 of the output"), std::string::npos) << error;
  ASSERT_TRUE(whole->runRows({{1, 4, 0}}, all, error)) << error;
  ASSERT_TRUE(some->runRows({{1, 4, 0}}, kept, error)) << error;
  EXPECT_EQ(kept.data, all.data);
}

/// Session::step runs decode rows and a prompt chunk in ONE run (what
/// strata-serve runs each iteration): its logits, and those of every row
/// after it, equal the same rows run as separate decodes and appends, bit
/// for bit on the cpu, over caches and recurrent state; lengths advance and
/// checkpoints are left as those calls leave them.
TEST_F(TinyModel, SessionStepEqualsSeparateDecodesAndAppends) {
  std::string error;
  // Three slots of 16 positions, runs of 6 rows.
  auto mixedEx = make(recurrentPlan(16, kMaxT, false, 3), error);
  ASSERT_TRUE(mixedEx) << error;
  auto apartEx = make(recurrentPlan(16, kMaxT, false, 3), error);
  ASSERT_TRUE(apartEx) << error;
  auto mixed = Session::create(*mixedEx, error);
  ASSERT_TRUE(mixed) << error;
  auto apart = Session::create(*apartEx, error);
  ASSERT_TRUE(apart) << error;
  auto lengths = [](const Session &s) {
    return std::vector<int64_t>{s.length(0), s.length(1), s.length(2)};
  };
  // Slots 0 and 2 decode while slot 1 prefills b in chunks of 6 - 2 rows.
  std::vector<int32_t> a = {3, 9, 27}, c = {11, 2},
                       b = {4, 8, 15, 16, 23, 42, 7, 1};
  std::vector<float> got, want, one;
  for (Session *s : {mixed.get(), apart.get()}) {
    ASSERT_TRUE(s->append(0, a, one, error)) << error;
    ASSERT_TRUE(s->append(2, c, one, error)) << error;
  }
  std::span<const int32_t> bs(b);
  // The steps out of slot order: the logits follow the steps' order.
  const std::vector<std::vector<SessionStep>> decodes = {{{2, 6}, {0, 5}},
                                                         {{0, 17}, {2, 30}}};
  for (size_t i = 0; i < decodes.size(); ++i) {
    SCOPED_TRACE(fmt::format("step {}", i));
    std::span<const int32_t> chunk = bs.subspan(4 * i, 4);
    size_t runs = mixed->runs();
    ASSERT_TRUE(mixed->step(decodes[i], 1, chunk, got, error)) << error;
    EXPECT_EQ(mixed->runs(), runs + 1);
    EXPECT_EQ(mixed->lastRunRows(), 6);
    ASSERT_TRUE(apart->decode(decodes[i], want, error)) << error;
    ASSERT_TRUE(apart->append(1, chunk, one, error)) << error;
    want.insert(want.end(), one.begin(), one.end());
    ASSERT_EQ(got.size(), size_t(3 * kV));
    EXPECT_EQ(got, want);
    EXPECT_EQ(lengths(*mixed), lengths(*apart));
  }
  EXPECT_EQ(lengths(*mixed), (std::vector<int64_t>{5, 8, 4}));
  // Decode rows only, then a prompt chunk only (a full run of 6 rows).
  const std::vector<SessionStep> all = {{0, 1}, {1, 2}, {2, 3}};
  ASSERT_TRUE(mixed->step(all, 0, {}, got, error)) << error;
  ASSERT_TRUE(apart->decode(all, want, error)) << error;
  EXPECT_EQ(got, want);
  mixed->reset(2);
  apart->reset(2);
  ASSERT_TRUE(mixed->step({}, 2, bs.first(6), got, error)) << error;
  ASSERT_TRUE(apart->append(2, bs.first(6), want, error)) << error;
  EXPECT_EQ(got, want);
  EXPECT_EQ(lengths(*mixed), (std::vector<int64_t>{6, 9, 6}));
  // Every row after reads what the steps left in the state.
  ASSERT_TRUE(mixed->decode(all, got, error)) << error;
  ASSERT_TRUE(apart->decode(all, want, error)) << error;
  EXPECT_EQ(got, want);

  // A step moves each of its slots off its checkpoint: a rewind restores
  // the saved state (a copy per slot) and the same step again gives the
  // same logits.
  const uint64_t slotBytes = mixedEx->recurrentSlotBytes();
  for (int32_t s : {0, 1, 2})
    ASSERT_TRUE(mixed->checkpoint(s, error)) << error;
  uint64_t copied = mixed->stateBytesCopied();
  const std::vector<SessionStep> two = {{0, 12}, {2, 13}};
  ASSERT_TRUE(mixed->step(two, 1, bs.first(3), want, error)) << error;
  for (int32_t s : {0, 1, 2})
    ASSERT_TRUE(mixed->rewind(s, mixed->checkpointLength(s), error)) << error;
  EXPECT_EQ(mixed->stateBytesCopied(), copied + 3 * slotBytes);
  ASSERT_TRUE(mixed->step(two, 1, bs.first(3), got, error)) << error;
  EXPECT_EQ(got, want);
  // A step of decode rows only leaves the prefill slot at its checkpoint.
  for (int32_t s : {0, 1, 2})
    ASSERT_TRUE(mixed->rewind(s, mixed->checkpointLength(s), error)) << error;
  copied = mixed->stateBytesCopied();
  ASSERT_TRUE(mixed->step(std::vector<SessionStep>{{0, 12}}, 1, {}, got, error))
      << error;
  ASSERT_TRUE(mixed->rewind(1, mixed->checkpointLength(1), error)) << error;
  EXPECT_EQ(mixed->stateBytesCopied(), copied);
  ASSERT_TRUE(mixed->rewind(0, mixed->checkpointLength(0), error)) << error;
  EXPECT_EQ(mixed->stateBytesCopied(), copied + slotBytes);

  // Refused before any run, nothing changed.
  std::vector<int32_t> bad = {50}, seven(7, 1);
  struct Case {
    std::vector<SessionStep> steps;
    int32_t slot;
    std::span<const int32_t> ids;
    std::string message;
  };
  const Case cases[] = {
      {{}, 0, {}, "nothing to run: no decode steps and no prompt tokens"},
      {{{1, 3}},
       1,
       bs.first(2),
       "slot 1 has a decode step and prompt tokens in one run (its rows "
       "would repeat a position)"},
      {{{0, 3}, {2, 4}},
       1,
       bs.first(5),
       "2 decode steps and 5 prompt tokens in one run: 7 rows, more than "
       "the plan's max_tokens 6"},
      {{},
       1,
       seven,
       "slot 1 holds 10 tokens; 7 more would pass the plan's "
       "context of 16 positions (strata-compile --max-context)"},
      {{},
       3,
       bs.first(1),
       "token 0: slot 3 does not exist (the plan has 3 slots, strata-compile "
       "--max-batch)"},
      {{}, 1, bad, "token 0: id 50 is out of range (vocabulary of 50 tokens)"},
      {{{0, 50}},
       1,
       bs.first(1),
       "step 0: id 50 is out of range (vocabulary of 50 tokens)"},
      {{{0, 3}, {0, 4}},
       1,
       bs.first(1),
       "step 1: slot 0 has two steps in one decode"},
  };
  const size_t runs = mixed->runs();
  const std::vector<int64_t> before = lengths(*mixed);
  for (const Case &c : cases) {
    EXPECT_FALSE(mixed->step(c.steps, c.slot, c.ids, got, error));
    EXPECT_EQ(error, c.message);
  }
  EXPECT_EQ(mixed->runs(), runs);
  EXPECT_EQ(lengths(*mixed), before);

  // A last-row plan: a step that wants one row's logits is an append's
  // chunk or a decode of one slot; more is refused.
  auto lastEx = make(recurrentPlan(16, kMaxT, true, 3), error);
  ASSERT_TRUE(lastEx) << error;
  auto last = Session::create(*lastEx, error);
  ASSERT_TRUE(last) << error;
  ASSERT_TRUE(last->step({}, 1, bs.first(6), got, error)) << error;
  const std::vector<SessionStep> oneStep = {{1, 5}};
  ASSERT_TRUE(last->step(oneStep, 0, {}, want, error)) << error;
  auto fresh = make(recurrentPlan(16, kMaxT, false, 3), error);
  ASSERT_TRUE(fresh) << error;
  auto check = Session::create(*fresh, error);
  ASSERT_TRUE(check) << error;
  ASSERT_TRUE(check->append(1, bs.first(6), one, error)) << error;
  EXPECT_EQ(got, one);
  ASSERT_TRUE(check->decode(oneStep, one, error)) << error;
  EXPECT_EQ(want, one);
  EXPECT_FALSE(last->step(oneStep, 0, bs.first(1), got, error));
  EXPECT_EQ(error, "a run of 1 decode row and a prompt chunk needs the "
                   "logits of 2 rows, but the plan returns a run's last row "
                   "only (it was compiled with --logits last); recompile it "
                   "with strata-compile --logits all");
  EXPECT_FALSE(
      last->step(std::vector<SessionStep>{{0, 5}, {1, 6}}, 0, {}, got, error));
  EXPECT_EQ(error, "a run of 2 decode rows needs the logits of 2 rows, but "
                   "the plan returns a run's last row only (it was compiled "
                   "with --logits last); recompile it with strata-compile "
                   "--logits all");
  EXPECT_EQ(last->runs(), 2u);
}

/// Session::step with prompt chunks of several slots in ONE run: equal bit
/// for bit on the cpu to the decodes and appends run apart, a row per step
/// then each chunk's last row; refused before any run where two chunks
/// share a slot, a chunk is empty, or a chunk's slot also decodes.
TEST_F(TinyModel, SessionStepRunsChunksOfSeveralSlots) {
  std::string error;
  auto mixedEx = make(recurrentPlan(16, kMaxT, false, 3), error);
  ASSERT_TRUE(mixedEx) << error;
  auto apartEx = make(recurrentPlan(16, kMaxT, false, 3), error);
  ASSERT_TRUE(apartEx) << error;
  auto mixed = Session::create(*mixedEx, error);
  ASSERT_TRUE(mixed) << error;
  auto apart = Session::create(*apartEx, error);
  ASSERT_TRUE(apart) << error;
  std::vector<int32_t> a = {3, 9, 27}, b = {4, 8, 15}, c = {16, 23};
  std::vector<float> got, want, one;
  for (Session *s : {mixed.get(), apart.get()})
    ASSERT_TRUE(s->append(0, a, one, error)) << error;
  // Slot 0 decodes while slots 2 and 1 prefill (chunks out of slot order).
  const std::vector<SessionStep> steps = {{0, 5}};
  const std::vector<SessionChunk> chunks = {{2, c}, {1, b}};
  ASSERT_TRUE(mixed->step(steps, chunks, got, error)) << error;
  EXPECT_EQ(mixed->lastRunRows(), 6);
  ASSERT_TRUE(apart->decode(steps, want, error)) << error;
  ASSERT_TRUE(apart->append(2, c, one, error)) << error;
  want.insert(want.end(), one.begin(), one.end());
  ASSERT_TRUE(apart->append(1, b, one, error)) << error;
  want.insert(want.end(), one.begin(), one.end());
  ASSERT_EQ(got.size(), size_t(3 * kV));
  EXPECT_EQ(got, want);
  for (int32_t s : {0, 1, 2})
    EXPECT_EQ(mixed->length(s), apart->length(s)) << s;
  // Every row after reads what the run left in the state.
  const std::vector<SessionStep> all = {{0, 1}, {1, 2}, {2, 3}};
  ASSERT_TRUE(mixed->decode(all, got, error)) << error;
  ASSERT_TRUE(apart->decode(all, want, error)) << error;
  EXPECT_EQ(got, want);
  // Refused before any run.
  const size_t runs = mixed->runs();
  const std::vector<int32_t> none;
  const std::vector<SessionChunk> twice = {{1, b}, {1, c}};
  EXPECT_FALSE(mixed->step({}, twice, got, error));
  EXPECT_EQ(error, "slot 1 has two prompt chunks in one run (one chunk a "
                   "slot: its rows would repeat a position)");
  const std::vector<SessionChunk> empty = {{1, b}, {2, none}};
  EXPECT_FALSE(mixed->step({}, empty, got, error));
  EXPECT_EQ(error, "the prompt chunk of slot 2 is empty");
  const std::vector<SessionChunk> decoding = {{2, c}, {0, b}};
  EXPECT_FALSE(mixed->step(steps, decoding, got, error));
  EXPECT_EQ(error, "slot 0 has a decode step and prompt tokens in one run "
                   "(its rows would repeat a position)");
  EXPECT_EQ(mixed->runs(), runs);
}

/// Session::step with greedy flags: a flagged row's id is the argmax of
/// the row step() returns without them; only the unflagged rows' logits
/// come back, in order.
TEST_F(TinyModel, SessionStepTakesTheGreedyIdsOfFlaggedRows) {
  std::string error;
  auto idsEx = make(withGreedyIds(recurrentPlan(16, kMaxT, false, 3)), error);
  ASSERT_TRUE(idsEx) << error;
  auto plainEx = make(recurrentPlan(16, kMaxT, false, 3), error);
  ASSERT_TRUE(plainEx) << error;
  auto flagged = Session::create(*idsEx, error);
  ASSERT_TRUE(flagged) << error;
  auto plain = Session::create(*plainEx, error);
  ASSERT_TRUE(plain) << error;
  std::vector<int32_t> a = {3, 9, 27}, b = {4, 8, 15}, c = {16, 23};
  std::vector<float> got, want, one;
  std::vector<int32_t> ids;
  for (Session *s : {flagged.get(), plain.get()})
    ASSERT_TRUE(s->append(0, a, one, error)) << error;
  const std::vector<SessionStep> steps = {{0, 5}};
  const std::vector<SessionChunk> chunks = {{2, c}, {1, b}};
  // The decode row and slot 1's chunk by id, slot 2's chunk by logits.
  const std::vector<bool> greedy = {true, false, true};
  ASSERT_TRUE(flagged->step(steps, chunks, greedy, got, ids, error)) << error;
  ASSERT_TRUE(plain->step(steps, chunks, want, error)) << error;
  ASSERT_EQ(want.size(), size_t(3 * kV));
  ASSERT_EQ(ids.size(), 3u);
  EXPECT_EQ(ids[0], firstMax(want.data(), kV));
  EXPECT_EQ(ids[1], -1);
  EXPECT_EQ(ids[2], firstMax(want.data() + 2 * kV, kV));
  EXPECT_EQ(got, std::vector<float>(want.begin() + kV, want.begin() + 2 * kV));
  for (int32_t s : {0, 1, 2})
    EXPECT_EQ(flagged->length(s), plain->length(s)) << s;
  // Every row flagged: no logits at all.
  const std::vector<SessionStep> all = {{0, 1}, {1, 2}, {2, 3}};
  ASSERT_TRUE(flagged->step(all, {}, {true, true, true}, got, ids, error))
      << error;
  ASSERT_TRUE(plain->decode(all, want, error)) << error;
  EXPECT_TRUE(got.empty());
  for (size_t i = 0; i < 3; ++i)
    EXPECT_EQ(ids[i], firstMax(want.data() + i * kV, kV)) << i;
  // A flag for each wanted row, and a plan with ids.
  EXPECT_FALSE(flagged->step(all, {}, {true}, got, ids, error));
  EXPECT_EQ(error, "1 greedy flags for 3 rows whose logits are wanted");
  EXPECT_FALSE(plain->step(all, {}, {true, true, true}, got, ids, error));
  EXPECT_EQ(error, "greedy ids in a step need a plan that returns them and "
                   "every row's logits (strata-compile --greedy-ids on "
                   "--logits all)");
}

/// Speculative decoding makes the tokens, and the logits each was chosen
/// from, of plain generation, greedy or sampled, over recurrent state.
TEST_F(TinyModel, GeneratorSpeculationEqualsPlainGeneration) {
  std::string error;
  auto ex = make(recurrentPlan(40), error);
  ASSERT_TRUE(ex) << error;
  struct Run {
    std::vector<int32_t> tokens;
    std::vector<std::vector<float>> logits;
    GenerateTimings timings;
  };
  auto generate = [&](const SamplerOptions &o, int64_t drafts) {
    Run r;
    auto gen = Generator::create(*ex, o, nullptr, error);
    EXPECT_TRUE(gen) << error;
    EXPECT_TRUE(gen->setSpeculation(drafts, error)) << error;
    gen->setMaxTokens(24);
    // Repeats in the prompt give the drafting something to find.
    EXPECT_TRUE(
        gen->start(std::vector<int32_t>{3, 9, 27, 3, 9, 27, 3, 9}, error))
        << error;
    for (int i = 0; i < 24; ++i) {
      int32_t t = 0;
      EXPECT_TRUE(gen->next(t, error)) << error;
      r.tokens.push_back(t);
      r.logits.emplace_back(gen->logits().begin(), gen->logits().end());
    }
    r.timings = gen->timings();
    return r;
  };
  SamplerOptions greedy, sampled;
  greedy.temperature = 0;
  sampled.temperature = 0.8f;
  sampled.seed = 5;
  for (const SamplerOptions &o : {greedy, sampled}) {
    Run plain = generate(o, 0);
    EXPECT_EQ(plain.timings.verifyRuns, 0u);
    size_t proposed = 0;
    for (int64_t k : {1, 2, 4}) {
      SCOPED_TRACE(::testing::Message()
                   << "temperature " << o.temperature << ", drafts " << k);
      Run spec = generate(o, k);
      EXPECT_EQ(spec.tokens, plain.tokens);
      EXPECT_EQ(spec.logits, plain.logits);
      const GenerateTimings &t = spec.timings;
      proposed += t.draftsProposed;
      EXPECT_LE(t.draftsAccepted, t.draftsProposed);
      EXPECT_LE(t.draftsProposed, t.verifyRuns * static_cast<size_t>(k));
      // Every run makes a token or more.
      EXPECT_LE(t.modelRuns, 2 + t.generatedTokens);
    }
    EXPECT_GT(proposed, 0u);
  }
}

TEST_F(TinyModel, GeneratorSpeculationErrors) {
  std::string error;
  auto ex = make(recurrentPlan(16), error);
  ASSERT_TRUE(ex) << error;
  auto gen = Generator::create(*ex, SamplerOptions{}, nullptr, error);
  ASSERT_TRUE(gen) << error;
  EXPECT_FALSE(gen->setSpeculation(-1, error));
  EXPECT_EQ(error, "speculative decoding needs 0 or more draft tokens a run, "
                   "not -1");
  auto last = make(recurrentPlan(16, kMaxT, true), error);
  ASSERT_TRUE(last) << error;
  gen = Generator::create(*last, SamplerOptions{}, nullptr, error);
  ASSERT_TRUE(gen) << error;
  EXPECT_TRUE(gen->setSpeculation(0, error)) << "off needs nothing";
  EXPECT_FALSE(gen->setSpeculation(4, error));
  EXPECT_EQ(error, "speculative decoding checks each draft against the logits "
                   "of its own row, but the plan returns a run's last row only "
                   "(it was compiled with --logits last); recompile it with "
                   "strata-compile --logits all");
  auto one = make(recurrentPlan(16, 1), error);
  ASSERT_TRUE(one) << error;
  gen = Generator::create(*one, SamplerOptions{}, nullptr, error);
  ASSERT_TRUE(gen) << error;
  EXPECT_FALSE(gen->setSpeculation(2, error));
  EXPECT_EQ(error, "speculative decoding runs a token and its drafts "
                   "together, but the plan's runs hold one row (max_tokens "
                   "1); recompile it with strata-compile --max-tokens 2 or "
                   "more");
}

TEST_F(TinyModel, RowsOutsideTheStateFailBeforeAnyKernel) {
  std::string error;
  auto ex = make(statePlan(), error);
  ASSERT_TRUE(ex) << error;
  RunOutput out;
  struct Case {
    std::vector<Row> rows;
    const char *message;
  };
  const Case cases[] = {
      {{{1, 0, 0}, {2, 8, 0}},
       "row 1 is at position 8, outside the plan's context of 8 positions "
       "(0..7; strata-compile --max-context)"},
      {{{1, -1, 0}}, "row 0 is at position -1, outside the plan's context"},
      {{{1, 0, 2}},
       "row 0 is in slot 2, outside the plan's 2 slots (0..1; strata-compile "
       "--max-batch)"},
      {{{1, 3, 1}, {2, 3, 1}}, "rows 0 and 1 are both at position 3 of slot 1"},
      {{{1, 0, 0}, {50, 1, 0}},
       "token 1 (id 50) is out of range: the table 'token_embd.weight' has 50 "
       "rows"},
      {{}, "the prompt is empty; it needs at least one token"},
  };
  for (const Case &c : cases) {
    EXPECT_FALSE(ex->runRows(c.rows, out, error));
    EXPECT_NE(error.find(c.message), std::string::npos)
        << "want: " << c.message << "\ngot:  " << error;
    // Nothing ran: the caches are still zero.
    std::vector<float> k;
    ASSERT_TRUE(ex->readState(0, k, error)) << error;
    EXPECT_EQ(k, std::vector<float>(k.size(), 0.0f));
  }
  // A plan without state runs rows of one prompt only.
  auto plain = make(plan, error);
  ASSERT_TRUE(plain) << error;
  ASSERT_TRUE(plain->runRows({{1, 0, 0}, {2, 1, 0}}, out, error)) << error;
  EXPECT_FALSE(plain->runRows({{1, 1, 0}}, out, error));
  EXPECT_NE(error.find("row 0 is at position 1 of slot 0, but the plan has no "
                       "state"),
            std::string::npos)
      << error;
}

TEST_F(TinyModel, PlanFromDiskRunsTheSame) {
  std::string error;
  ASSERT_TRUE(format::writePlanDir(dir.file("plan"), plan, error)) << error;
  Plan read;
  ASSERT_TRUE(format::readPlanDir(dir.file("plan"), read, error)) << error;
  auto a = make(plan, error);
  ASSERT_TRUE(a) << error;
  auto b = make(read, error);
  ASSERT_TRUE(b) << error;
  RunOutput oa, ob;
  ASSERT_TRUE(a->run({1, 2, 3}, oa, error)) << error;
  ASSERT_TRUE(b->run({1, 2, 3}, ob, error)) << error;
  EXPECT_EQ(oa.data, ob.data);
}

TEST_F(TinyModel, TokenErrors) {
  std::string error;
  auto ex = make(plan, error);
  ASSERT_TRUE(ex) << error;
  RunOutput out;
  EXPECT_FALSE(ex->run({1, 50, 2}, out, error));
  EXPECT_EQ(error, "token 1 (id 50) is out of range: the table "
                   "'token_embd.weight' has 50 rows");
  EXPECT_FALSE(ex->run({-3}, out, error));
  EXPECT_EQ(error, "token 0 (id -3) is negative");
  EXPECT_FALSE(ex->run({}, out, error));
  EXPECT_EQ(error, "the prompt is empty; it needs at least one token");
  EXPECT_FALSE(ex->run(std::vector<int32_t>(kMaxT + 1, 1), out, error));
  EXPECT_EQ(error, "the prompt has 7 tokens, but the plan was compiled for at "
                   "most 6; recompile it with a larger T");
  // The executor still works after refusing.
  EXPECT_TRUE(ex->run({49}, out, error)) << error;
}

/// The id with the highest value of \p row (lowest id on ties).
int32_t argmax(const std::vector<double> &row) {
  int32_t best = 0;
  for (size_t i = 1; i < row.size(); ++i)
    if (row[i] > row[best])
      best = static_cast<int32_t>(i);
  return best;
}

/// Greedy generation: every token is the argmax of the last position's
/// logits of the sequence so far (here a position's logits depend on its
/// token only, so the reference is a chain of argmaxes); the logits of each
/// step are kept; the last token generated is never run.
TEST_F(TinyModel, GeneratorGreedyFollowsTheLastLogits) {
  std::string error;
  auto ex = make(statefulPlan(), error);
  ASSERT_TRUE(ex) << error;
  SamplerOptions greedy;
  greedy.temperature = 0;
  auto gen = Generator::create(*ex, greedy, nullptr, error);
  ASSERT_TRUE(gen) << error;
  EXPECT_EQ(gen->vocabSize(), kV);
  EXPECT_EQ(gen->contextLimit(), kMaxT);
  std::vector<int32_t> prompt = {3, 9, 4};
  ASSERT_TRUE(gen->start(prompt, error)) << error;
  int32_t last = prompt.back();
  std::vector<int32_t> expected;
  // The prompt (3) and 3 tokens fill T = 6; a 4th comes from that run.
  for (int i = 0; i < 4; ++i) {
    std::vector<double> ref = reference({last});
    int32_t token = -1;
    ASSERT_TRUE(gen->next(token, error)) << error;
    EXPECT_EQ(token, argmax(ref)) << "step " << i;
    ASSERT_EQ(gen->logits().size(), size_t(kV));
    EXPECT_LT(
        nmse(std::vector<float>(gen->logits().begin(), gen->logits().end()),
             ref),
        kF32Bar);
    expected.push_back(token);
    last = token;
  }
  EXPECT_EQ(std::vector<int32_t>(gen->prompt().begin(), gen->prompt().end()),
            prompt);
  EXPECT_EQ(
      std::vector<int32_t>(gen->generated().begin(), gen->generated().end()),
      expected);
  EXPECT_EQ(gen->sequence().size(), 7u);
  EXPECT_EQ(gen->timings().promptTokens, 3u);
  EXPECT_EQ(gen->timings().generatedTokens, 4u);
  // The prompt in one run, then one decode row for each of steps 2 to 4.
  EXPECT_EQ(gen->timings().modelRuns, 4u);
  // A 5th token would need a 7th position.
  int32_t token = -1;
  EXPECT_FALSE(gen->next(token, error));
  EXPECT_EQ(error, "the context is full: the next step would hold 7 tokens, "
                   "more than the plan's max_context 6; recompile it with a "
                   "larger --max-context");
  // start() begins a new sequence.
  ASSERT_TRUE(gen->start(std::vector<int32_t>{3}, error)) << error;
  ASSERT_TRUE(gen->next(token, error)) << error;
  EXPECT_EQ(token, argmax(reference({3})));
  EXPECT_EQ(gen->sequence().size(), 2u);
}

/// A seed gives the same tokens; the sampler's history is the sequence.
TEST_F(TinyModel, GeneratorSamplesBySeed) {
  std::string error;
  auto ex = make(statefulPlan(), error);
  ASSERT_TRUE(ex) << error;
  auto tokens = [&](uint64_t seed) {
    SamplerOptions o;
    o.temperature = 1.5f;
    o.topK = 0;
    o.topP = 1;
    o.minP = 0;
    o.seed = seed;
    auto gen = Generator::create(*ex, o, nullptr, error);
    EXPECT_TRUE(gen) << error;
    std::vector<int32_t> out;
    EXPECT_TRUE(gen->start(std::vector<int32_t>{1}, error)) << error;
    for (int i = 0; i < kMaxT; ++i) {
      int32_t t = 0;
      EXPECT_TRUE(gen->next(t, error)) << error;
      out.push_back(t);
    }
    return out;
  };
  std::vector<int32_t> a = tokens(5), b = tokens(5), c = tokens(6);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
}

/// An end-of-generation token is returned, then the sequence is over.
TEST_F(TinyModel, GeneratorStopsAtEndOfGeneration) {
  std::string error;
  auto ex = make(statefulPlan(), error);
  ASSERT_TRUE(ex) << error;
  SamplerOptions greedy;
  greedy.temperature = 0;
  // The second greedy token ends generation.
  int32_t first = argmax(reference({5}));
  int32_t second = argmax(reference({first}));
  auto gen = Generator::create(
      *ex, greedy, [&](int32_t id) { return id == second; }, error);
  ASSERT_TRUE(gen) << error;
  ASSERT_TRUE(gen->start(std::vector<int32_t>{5}, error)) << error;
  int32_t token = -1;
  ASSERT_TRUE(gen->next(token, error)) << error;
  EXPECT_EQ(token, first);
  EXPECT_EQ(gen->finished(), first == second);
  if (!gen->finished()) {
    ASSERT_TRUE(gen->next(token, error)) << error;
    EXPECT_EQ(token, second);
    EXPECT_TRUE(gen->finished());
  }
  EXPECT_FALSE(gen->next(token, error));
  EXPECT_EQ(error, "the sequence has ended (an end-of-generation token)");
}

TEST_F(TinyModel, GeneratorErrors) {
  std::string error;
  auto ex = make(statefulPlan(), error);
  ASSERT_TRUE(ex) << error;
  SamplerOptions bad;
  bad.topP = 0;
  EXPECT_FALSE(Generator::create(*ex, bad, nullptr, error));
  EXPECT_EQ(error, "sampler option top_p = 0 is out of range (0, 1]");
  auto gen = Generator::create(*ex, SamplerOptions{}, nullptr, error);
  ASSERT_TRUE(gen) << error;
  int32_t token = 0;
  EXPECT_FALSE(gen->next(token, error));
  EXPECT_EQ(error, "no sequence: start() it with a prompt first");
  EXPECT_FALSE(gen->start(std::vector<int32_t>{}, error));
  EXPECT_EQ(error, "the prompt is empty; it needs at least one token");
  EXPECT_FALSE(gen->start(std::vector<int32_t>{1, 50}, error));
  EXPECT_EQ(error, "prompt token 1 (id 50) is out of range (vocabulary of 50 "
                   "tokens)");
  EXPECT_FALSE(gen->start(std::vector<int32_t>(kMaxT + 1, 1), error));
  EXPECT_EQ(error, "the prompt has 7 tokens, more than the plan's max_context "
                   "6; recompile it with a larger --max-context");
  EXPECT_FALSE(gen->next(token, error)); // a failed start() starts nothing
  // A plan without state has no decode entry: it cannot generate.
  auto plain = make(plan, error);
  ASSERT_TRUE(plain) << error;
  EXPECT_FALSE(Generator::create(*plain, SamplerOptions{}, nullptr, error));
  EXPECT_EQ(error, "the plan has no decode entry (no generation state: it was "
                   "compiled without --max-context); recompile it with "
                   "strata-compile --max-context N");
}

TEST_F(TinyModel, WeightErrorsNameTheWeight) {
  std::string error;
  Plan missing = plan;
  missing.weights[2].name = "blk.0.ffn_up.weight";
  EXPECT_FALSE(make(missing, error));
  EXPECT_NE(error.find("weight 'blk.0.ffn_up.weight' of the plan is not in"),
            std::string::npos)
      << error;
  Plan wrongType = plan;
  wrongType.weights[1].type = GgmlType::Q8_0;
  EXPECT_FALSE(make(wrongType, error));
  EXPECT_NE(error.find("weight 'output_norm.weight' is F32 [256]"),
            std::string::npos)
      << error;
  Plan wrongDims = plan;
  wrongDims.weights[3].dims = {kD, kV + 1};
  EXPECT_FALSE(make(wrongDims, error));
  EXPECT_NE(error.find("weight 'output.weight'"), std::string::npos) << error;
  EXPECT_FALSE(Executor::create(plan, dir.file("nope.gguf"), "cpu", error));
  EXPECT_NE(error.find("nope.gguf"), std::string::npos) << error;
  EXPECT_FALSE(Executor::create(plan, gguf, "cuda", error));
  EXPECT_NE(error.find("backend 'cuda'"), std::string::npos) << error;
  EXPECT_FALSE(Executor::create(plan, gguf, "tpu", error));
  EXPECT_EQ(error, "unknown backend 'tpu' (available: cpu, cuda, hip)");
}

TEST_F(TinyModel, KernelErrorsNameTheKernel) {
  std::string error;
  // A missing attribute is refused when the plan is loaded (the schema of
  // the op table), before anything runs.
  Plan noEps = plan;
  noEps.kernels[1].attrs.clear();
  EXPECT_FALSE(make(noEps, error));
  EXPECT_EQ(error, "plan: kernel 1: 'rms_norm' needs attribute 'eps'");
  RunOutput out;
  std::unique_ptr<Executor> ex;

  Plan badShape = plan;
  badShape.buffers[3].shape = {kT, c(kD / 2)}; // h: the matmul writes [T, 256]
  badShape.buffers[3].bytes /= 2;
  ex = make(badShape, error);
  ASSERT_TRUE(ex) << error;
  EXPECT_FALSE(ex->run({1, 2}, out, error));
  EXPECT_EQ(error, "kernel 2 (matmul): output 0 'h' [2, 128] should be "
                   "[2, 256] from the inputs");
}

/// A buffer that no kernel writes is refused when the plan is loaded.
TEST_F(TinyModel, UnwrittenBuffersAreRefused) {
  std::string error;
  Plan noHead = plan;
  noHead.kernels.pop_back(); // logits never written
  EXPECT_FALSE(make(noHead, error));
  EXPECT_EQ(error, "plan: the plan's output is buffer 6 'logits', which no "
                   "plan input or earlier kernel writes; recompile the plan");
  Plan skipNorm = plan;
  skipNorm.kernels.erase(skipNorm.kernels.begin() + 1); // xn never written
  EXPECT_FALSE(make(skipNorm, error));
  EXPECT_EQ(error, "plan: kernel 1 (matmul) reads buffer 2 'xn', which no "
                   "plan input or earlier kernel writes; recompile the plan");
  // A buffer at a written one's offset and size is not a view of it unless
  // it says so (view_of).
  Plan viewed = plan;
  format::PlanBuffer alias = viewed.buffers[3];
  alias.name = "h_alias";
  viewed.buffers.push_back(alias);
  viewed.kernels[3].inputs = {B(7)};
  EXPECT_FALSE(make(viewed, error));
  EXPECT_EQ(error, "plan: kernel 3 (silu) reads buffer 7 'h_alias', which no "
                   "plan input or earlier kernel writes; recompile the plan");
  viewed.buffers[7].viewOf = 3;
  EXPECT_TRUE(make(viewed, error)) << error;
}

/// What the static check cannot see shows up as NaN: here a view of the
/// logits with a fixed first dim of max_tokens, so at T' < max_tokens its
/// last rows were never written.
TEST_F(TinyModel, PoisonRevealsUnwrittenRows) {
  std::string error;
  Plan p = plan;
  const format::PlanBuffer &logits = p.buffers[p.outputs[0]];
  format::PlanBuffer fixed = logits;
  fixed.name = "logits_fixed";
  fixed.viewOf = p.outputs[0];
  fixed.shape = {c(kMaxT), c(kV)};
  p.buffers.push_back(fixed);
  uint32_t fixedIndex = static_cast<uint32_t>(p.buffers.size() - 1);
  format::PlanBuffer probs = fixed;
  probs.name = "probs";
  probs.viewOf = -1;
  probs.offset = p.arenaBytes;
  p.arenaBytes += probs.bytes;
  p.buffers.push_back(probs);
  uint32_t probsIndex = fixedIndex + 1;
  format::PlanKernel softmax;
  softmax.recipe = Recipe::Softmax;
  softmax.inputs = {B(fixedIndex)};
  softmax.outputs = {probsIndex};
  p.kernels.push_back(softmax);
  p.outputs = {probsIndex};
  auto ex = make(p, error);
  ASSERT_TRUE(ex) << error;
  RunOutput out;
  EXPECT_TRUE(ex->run(std::vector<int32_t>(kMaxT, 3), out, error)) << error;
  EXPECT_FALSE(ex->run({1, 2, 3}, out, error));
  EXPECT_EQ(error, "the output 'probs' holds NaN at [3, 0]: a kernel read "
                   "memory nobody wrote or computed NaN (the per-kernel NaN "
                   "check names it)");
  ex->setNanCheck(true);
  EXPECT_FALSE(ex->run({1, 2, 3}, out, error));
  EXPECT_EQ(error.rfind("kernel 6 (softmax) left NaN in buffer 'probs' at "
                        "element 150 of 300",
                        0),
            0u)
      << error;
  // The poison is laid again before each run: a full run after a short one
  // still checks clean, and a short one after a full one still fails.
  EXPECT_TRUE(ex->run(std::vector<int32_t>(kMaxT, 3), out, error)) << error;
  EXPECT_FALSE(ex->run({1}, out, error));
  // Poisoned once (generation's setting): the first run still reads NaN
  // where nothing was written; a short run after a full one reads the full
  // run's rows instead, which only the fill before every run (--check,
  // --nan-check) reveals.
  auto once = make(p, error);
  ASSERT_TRUE(once) << error;
  once->setPoisonEachRun(false);
  EXPECT_FALSE(once->run({1, 2, 3}, out, error));
  EXPECT_TRUE(once->run(std::vector<int32_t>(kMaxT, 3), out, error)) << error;
  EXPECT_TRUE(once->run({1}, out, error)) << error;
  // With everything written the per-kernel check passes.
  auto good = make(plan, error);
  ASSERT_TRUE(good) << error;
  good->setNanCheck(true);
  EXPECT_TRUE(good->run({1, 2, 3}, out, error)) << error;
}

TEST_F(TinyModel, StructuralPlanErrors) {
  std::string error;
  Plan p = plan;
  p.buffers[6].offset = p.arenaBytes; // past the arena
  EXPECT_FALSE(make(p, error));
  EXPECT_NE(error.find("buffer 6 'logits'"), std::string::npos) << error;
  p = plan;
  p.kernels[2].inputs.pop_back();
  EXPECT_FALSE(make(p, error));
  EXPECT_EQ(error, "plan: kernel 2 (matmul) takes 2..2 inputs and 1 outputs, "
                   "got 1 and 1");
  p = plan;
  p.kernels[2].inputs[1] = W(9);
  EXPECT_FALSE(make(p, error));
  EXPECT_NE(error.find("reads weight 9"), std::string::npos) << error;
  p = plan;
  p.buffers[0].dtype = PlanDType::F32;
  EXPECT_FALSE(make(p, error));
  EXPECT_EQ(error, "plan: the input buffer 'tokens' must be i32 [T]");
  // A second output is the logits' greedy ids: i32, a row each; no third.
  p = withGreedyIds(plan);
  ASSERT_TRUE(make(p, error)) << error;
  p.buffers[p.outputs[1]].dtype = PlanDType::F32;
  EXPECT_FALSE(make(p, error));
  EXPECT_EQ(error, "plan: the second output 'logits.ids' must be i32 [rows] "
                   "of the logits 'logits' [rows, vocab] (their greedy ids)");
  p = withGreedyIds(plan);
  p.outputs.push_back(p.outputs[1]);
  EXPECT_FALSE(make(p, error));
  EXPECT_EQ(error, "plan: 3 outputs; a plan returns its logits and at most "
                   "their greedy ids");
}

//===----------------------------------------------------------------------===//
// strata-run
//===----------------------------------------------------------------------===//

std::string slurp(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

/// Runs strata-run with \p args; returns its exit status, stdout, stderr.
int strataRun(const TempDir &dir, const std::string &args, std::string &out,
              std::string &err) {
  std::string cmd = fmt::format("{} {} >{} 2>{}", STRATA_RUN_PATH, args,
                                dir.file("stdout"), dir.file("stderr"));
  int status = std::system(cmd.c_str());
  out = slurp(dir.file("stdout"));
  err = slurp(dir.file("stderr"));
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST_F(TinyModel, StrataRunPrintsTopTokensAndDumpsLogits) {
  std::string error, out, err;
  ASSERT_TRUE(format::writePlanDir(dir.file("plan"), plan, error)) << error;
  std::string common = fmt::format("{} --gguf {}", dir.file("plan"), gguf);
  ASSERT_EQ(strataRun(dir,
                      common + " --tokens 4,5,6 --top 3 --dump-logits " +
                          dir.file("l.f32"),
                      out, err),
            0)
      << err;
  auto ex = make(plan, error);
  ASSERT_TRUE(ex) << error;
  RunOutput want;
  ASSERT_TRUE(ex->run({4, 5, 6}, want, error)) << error;
  std::string dumped = slurp(dir.file("l.f32"));
  ASSERT_EQ(dumped.size(), want.data.size() * 4);
  EXPECT_EQ(std::memcmp(dumped.data(), want.data.data(), dumped.size()), 0);
  const float *last = want.data.data() + 2 * kV;
  int64_t best = std::max_element(last, last + kV) - last;
  EXPECT_NE(out.find("top 3 of 50 at position 2 (last of 3 tokens):"),
            std::string::npos)
      << out;
  EXPECT_NE(
      out.find(fmt::format("     1  {:>10}  {:>12.6f}\n", best, last[best])),
      std::string::npos)
      << out;
  EXPECT_NE(out.find("time: load "), std::string::npos) << out;
  EXPECT_EQ(err, "");

  // The same prompt from a file, separated by newlines, commas and spaces.
  std::ofstream(dir.file("prompt.txt")) << "4,\n 5  6\n";
  ASSERT_EQ(strataRun(dir,
                      common + " --tokens-file " + dir.file("prompt.txt") +
                          " --backend cpu --nan-check",
                      out, err),
            0)
      << err;
  EXPECT_NE(out.find("top 5 of 50"), std::string::npos) << out;
}

TEST_F(TinyModel, StrataRunErrorsExitNonZeroAndWriteNothing) {
  std::string error, out, err;
  ASSERT_TRUE(format::writePlanDir(dir.file("plan"), plan, error)) << error;
  std::string common = fmt::format("{} --gguf {} --dump-logits {}",
                                   dir.file("plan"), gguf, dir.file("l.f32"));
  // Errors exit 1; command-line mistakes exit 2.
  struct Case {
    std::string args, message;
    int status = 1;
  };
  std::vector<Case> cases = {
      {common + " --tokens 1,50",
       "token 1 (id 50) is out of range: the table 'token_embd.weight' has "
       "50 rows"},
      {common + " --tokens 1,x2",
       "--tokens: 'x2' (token 1) is not a token id (a non-negative 32-bit "
       "integer)",
       2},
      {common + " --tokens 1,-2",
       "--tokens: '-2' (token 1) is not a token id (a non-negative 32-bit "
       "integer)",
       2},
      {common + " --tokens ,", "--tokens: no token ids", 2},
      {common + " --tokens 1,2,3,4,5,6,7",
       "the prompt has 7 tokens, but the plan was compiled for at most 6; "
       "recompile it with a larger T"},
      {common, "give exactly one of --tokens and --tokens-file (see --help)",
       2},
      {common + " --tokens 1 --tokens-file x",
       "give exactly one of --tokens and --tokens-file (see --help)", 2},
      {common + " --tokens 1 --top 0",
       "--top needs a positive integer, got '0'", 2},
      {common + " --tokens 1 --frobnicate 3",
       "unknown option '--frobnicate' (see --help)", 2},
      {common + " --tokens 1 --backend tpu",
       "unknown backend 'tpu' (available: cpu, cuda, hip)", 2},
      {common + " --tokens 1 extra",
       "unexpected argument 'extra' (one PLAN_DIR; see --help)", 2},
      {fmt::format("{} --tokens 1", dir.file("plan")),
       "missing --gguf FILE (see --help)", 2},
      {"--tokens 1", "missing PLAN_DIR (see --help)", 2},
      {common + " --tokens 1 --top", "--top needs a value (see --help)", 2},
  };
  for (const Case &c : cases) {
    SCOPED_TRACE(c.args);
    EXPECT_EQ(strataRun(dir, c.args, out, err), c.status);
    EXPECT_EQ(err, "strata-run: error: " + c.message + "\n");
    EXPECT_EQ(out, "");
    EXPECT_FALSE(fs::exists(dir.file("l.f32")));
  }
  // Files that are not there.
  EXPECT_EQ(
      strataRun(dir,
                fmt::format("{} --gguf {} --tokens 1", dir.file("none"), gguf),
                out, err),
      1);
  EXPECT_NE(err.find("none/plan.json"), std::string::npos) << err;
  EXPECT_EQ(strataRun(dir,
                      fmt::format("{} --gguf {} --tokens-file {}",
                                  dir.file("plan"), gguf, dir.file("none")),
                      out, err),
            1);
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
}

TEST(StrataRun, HelpDocumentsEveryFlag) {
  TempDir dir;
  std::string out, err;
  ASSERT_EQ(strataRun(dir, "--help", out, err), 0);
  for (const char *flag :
       {"--gguf", "--tokens ", "--tokens-file", "--backend", "--dump-logits",
        "--top", "--nan-check", "--no-graphs", "--repeat", "--help"})
    EXPECT_NE(out.find(flag), std::string::npos) << flag;
}

TEST(CpuDevice, ImplementsEveryRecipe) {
  CpuDevice dev;
  for (const format::RecipeInfo &r : format::allRecipes())
    EXPECT_TRUE(dev.supports(r.id)) << r.name;
  EXPECT_EQ(deviceNames(), (std::vector<std::string>{"cpu", "cuda", "hip"}));
}

} // namespace
