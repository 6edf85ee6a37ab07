//===- cache_consistency_tool.cpp - decode steps against prefill rows
//------===//
//
// The C++ half of test/unit/runtime/cache_consistency.sh (ctest
// cache_consistency): the bars of docs/generation-design.md on one model.
//
//   cache-consistency-check GEN_PLAN REF_PLAN MODEL.gguf [options]
//
// GEN_PLAN was compiled with generation (--max-context, --max-batch; plan
// version 3 with KV caches); REF_PLAN is the same description and file
// without it (prefill only, no state), compiled for at least max_context
// tokens. Checks, printing one line each with the measured figure:
//
//   decode    for prompts of P tokens prefilled in chunks of 1, 7, 16 and 64
//             (and the plan's maximum; --chunks C,C,... others), at
//             positions P that put the decode step on a chunk boundary and
//             past it (and max_context - 1; --positions P,P,... others),
//             the logits of the decode
//             step at position P equal row P of one prefill of the same P + 1
//             tokens by REF_PLAN: NMSE <= 1e-10; every row of every prefill
//             chunk equals its row of the reference too (with --kv bf16
//             or int8 caches the reference, f32 attention over unrounded
//             keys, differs: --decode-bar)
//   self      the same decode steps against row P of the generation plan's
//             own prefill of the P + 1 tokens (chunks of its maximum):
//             NMSE <= --self-bar (default 1e-10); a cache row is rounded
//             (bf16) or quantised (int8, its own scale) from that row alone,
//             so a step reads what the prefill read
//   batch     four sequences of different prompt lengths in slots 0..3,
//             decoded together (B = 4, each row at its own position) give
//             each the logits it gets alone: NMSE <= 1e-12
//   context   a row at position max_context (or a slot >= max_batch) is
//             refused before any kernel runs (the caches are unchanged)
//
// Exit status 0 when every check holds, 1 otherwise (or on an error).
//
//===----------------------------------------------------------------------===//
#include "runtime/Executor.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

using namespace strata;
using namespace strata::runtime;

namespace {

constexpr double kDecodeBar = 1e-10, kBatchBar = 1e-12;

/// sum (a - b)^2 / sum b^2 over one row of logits, in double.
double nmse(const float *got, const float *want, int64_t n) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < n; ++i) {
    double d = double(got[i]) - want[i];
    num += d * d;
    den += double(want[i]) * want[i];
  }
  return den > 0 ? num / den : (num > 0 ? INFINITY : 0);
}

struct Checker {
  std::unique_ptr<Executor> gen, ref;
  int64_t vocab = 0;
  int failures = 0;
  std::string error;

  [[noreturn]] void die(const std::string &what) {
    std::fprintf(stderr, "cache-consistency: %s\n", what.c_str());
    std::exit(1);
  }

  const float *row(const RunOutput &out, int64_t r) {
    return out.data.data() + r * vocab;
  }

  /// Row P of one prefill of tokens[0..P] by the reference plan.
  std::vector<float> refRow(const std::vector<int32_t> &tokens, int64_t p) {
    RunOutput out;
    std::vector<int32_t> prompt(tokens.begin(), tokens.begin() + p + 1);
    if (!ref->run(prompt, out, error))
      die("reference prefill: " + error);
    return {out.data.begin() + p * vocab, out.data.begin() + (p + 1) * vocab};
  }

  /// Runs \p rows on the generation plan.
  RunOutput rows(const std::vector<Row> &rs) {
    RunOutput out;
    if (!gen->runRows(rs, out, error))
      die("generation run: " + error);
    if (vocab == 0)
      vocab = out.shape.back();
    return out;
  }

  /// Prefills tokens[0..p) into \p slot in chunks of \p chunk, checking every
  /// row against the one-prefill reference \p all (rows [T, V]); returns the
  /// worst NMSE.
  double prefill(const std::vector<int32_t> &tokens, int64_t p, int64_t chunk,
                 int32_t slot, const RunOutput &all) {
    double worst = 0;
    for (int64_t at = 0; at < p; at += chunk) {
      std::vector<Row> rs;
      for (int64_t i = at; i < std::min(p, at + chunk); ++i)
        rs.push_back({tokens[i], static_cast<int32_t>(i), slot});
      RunOutput out = rows(rs);
      for (size_t r = 0; r < rs.size(); ++r)
        worst = std::max(worst, nmse(row(out, r), row(all, at + r), vocab));
    }
    return worst;
  }

  void check(bool ok, const std::string &line) {
    std::printf("%s %s\n", ok ? "PASS" : "FAIL", line.c_str());
    failures += ok ? 0 : 1;
  }
};

} // namespace

int main(int argc, char **argv) {
  std::string backend = "cpu";
  std::optional<uint64_t> synthetic;
  double decodeBar = kDecodeBar, batchBar = kBatchBar, selfBar = kDecodeBar;
  std::vector<int64_t> chunks = {1, 7, 16, 64};
  std::vector<int64_t> positions = {0,  1,  6,  7,  8,  13, 14, 15,
                                    16, 17, 40, 63, 64, 65, 100};
  // A comma-separated list of non-negative integers, at least one.
  auto list = [](const std::string &v, std::vector<int64_t> &out) {
    out.clear();
    size_t at = 0;
    while (at <= v.size()) {
      size_t comma = std::min(v.find(',', at), v.size());
      std::string item = v.substr(at, comma - at);
      char *end = nullptr;
      long long n = std::strtoll(item.c_str(), &end, 10);
      if (item.empty() || *end || n < 0)
        return false;
      out.push_back(n);
      at = comma + 1;
    }
    return !out.empty();
  };
  bool usage = argc < 4;
  for (int i = 4; i + 1 < argc && !usage; i += 2) {
    std::string a = argv[i], v = argv[i + 1];
    char *end = nullptr;
    if (a == "--backend")
      backend = v;
    else if (a == "--synthetic-weights")
      synthetic = std::strtoull(v.c_str(), &end, 10);
    else if (a == "--decode-bar")
      decodeBar = std::strtod(v.c_str(), &end);
    else if (a == "--batch-bar")
      batchBar = std::strtod(v.c_str(), &end);
    else if (a == "--self-bar")
      selfBar = std::strtod(v.c_str(), &end);
    else if (a == "--chunks")
      usage = !list(v, chunks) ||
              std::find(chunks.begin(), chunks.end(), 0) != chunks.end();
    else if (a == "--positions")
      usage = !list(v, positions);
    else
      usage = true;
    usage = usage || (end && *end);
  }
  if (usage || argc % 2 != 0) {
    std::fprintf(stderr,
                 "usage: cache-consistency-check GEN_PLAN REF_PLAN MODEL.gguf "
                 "[--backend cpu|cuda|hip] [--synthetic-weights SEED] "
                 "[--decode-bar X] [--batch-bar X] [--self-bar X] "
                 "[--chunks C,C,...] [--positions P,P,...]\n");
    return 1;
  }
  Checker c;
  format::Plan genPlan, refPlan;
  if (!format::readPlanDir(argv[1], genPlan, c.error) ||
      !format::readPlanDir(argv[2], refPlan, c.error))
    c.die(c.error);
  if (genPlan.states.empty())
    c.die(fmt::format("{} has no state (compile it with --max-context)",
                      argv[1]));
  if (!refPlan.states.empty())
    c.die(fmt::format("{} has state; the reference is a prefill-only plan",
                      argv[2]));
  c.gen = Executor::create(genPlan, argv[3], backend, c.error, {}, argv[1],
                           synthetic);
  if (!c.gen)
    c.die(c.error);
  c.ref = Executor::create(refPlan, argv[3], backend, c.error, {}, argv[2],
                           synthetic);
  if (!c.ref)
    c.die(c.error);
  const int64_t context = c.gen->maxContext(), batch = c.gen->maxBatch();
  const int64_t maxT = genPlan.maxTokens;
  if (refPlan.maxTokens < context)
    c.die(fmt::format("the reference plan serves {} tokens; the context is {}",
                      refPlan.maxTokens, context));
  if (batch < 4)
    c.die("the batch check needs --max-batch 4 or more");
  std::printf("model %s on %s: context %lld, %lld slots, %lld rows a run\n",
              genPlan.model.c_str(), backend.c_str(),
              static_cast<long long>(context), static_cast<long long>(batch),
              static_cast<long long>(maxT));

  // Token ids of a fixed pseudo-random prompt below the vocabulary (the
  // embedding table's rows; 997 is below every tiny model's).
  auto prompt = [](uint32_t seed, int64_t n) {
    std::vector<int32_t> t;
    uint32_t x = seed * 2654435761u + 12345u;
    for (int64_t i = 0; i < n; ++i) {
      x = x * 1664525u + 1013904223u;
      t.push_back(static_cast<int32_t>((x >> 8) % 997));
    }
    return t;
  };

  // Decode at P after a prefill of P tokens in chunks.
  std::vector<int32_t> tokens = prompt(1, context);
  RunOutput all;
  if (!c.ref->run(tokens, all, c.error))
    c.die("reference prefill: " + c.error);
  c.vocab = all.shape.back();
  // The chunks a run can hold, and the plan's maximum; the positions in
  // the context, and its last.
  std::vector<int64_t> runChunks;
  chunks.push_back(maxT);
  for (int64_t ch : chunks)
    if (ch <= maxT &&
        std::find(runChunks.begin(), runChunks.end(), ch) == runChunks.end())
      runChunks.push_back(ch);
  chunks = runChunks;
  positions.push_back(context - 1);
  std::vector<int64_t> inContext;
  for (int64_t p : positions)
    if (p < context &&
        std::find(inContext.begin(), inContext.end(), p) == inContext.end())
      inContext.push_back(p);
  positions = inContext;
  // Row P of one prefill of P + 1 tokens by the reference, per position
  // (the same for every chunk size).
  std::map<int64_t, std::vector<float>> refRows;
  // Row P of the generation plan's own prefill of P + 1 tokens (slot 1,
  // chunks of its maximum), per position.
  std::map<int64_t, std::vector<float>> selfRows;
  for (int64_t p : positions) {
    if (selfRows.count(p))
      continue;
    if (!c.gen->resetStates(c.error))
      c.die(c.error);
    for (int64_t at = 0; at <= p; at += maxT) {
      std::vector<Row> rs;
      for (int64_t i = at; i < std::min(p + 1, at + maxT); ++i)
        rs.push_back({tokens[i], static_cast<int32_t>(i), 1});
      RunOutput out = c.rows(rs);
      if (at + maxT > p)
        selfRows[p].assign(c.row(out, rs.size() - 1),
                           c.row(out, rs.size() - 1) + c.vocab);
    }
  }
  double worstDecode = 0, worstChunk = 0, worstSelf = 0;
  int cases = 0;
  for (int64_t chunk : chunks) {
    for (int64_t p : positions) {
      if (!c.gen->resetStates(c.error))
        c.die(c.error);
      // Slot 2: the other slots hold zeros, which the rows must not read.
      worstChunk = std::max(worstChunk, c.prefill(tokens, p, chunk, 2, all));
      RunOutput step = c.rows({{tokens[p], static_cast<int32_t>(p), 2}});
      if (!refRows.count(p))
        refRows[p] = c.refRow(tokens, p);
      const std::vector<float> &want = refRows[p];
      double e = nmse(c.row(step, 0), want.data(), c.vocab);
      worstDecode = std::max(worstDecode, e);
      worstSelf = std::max(worstSelf,
                           nmse(c.row(step, 0), selfRows[p].data(), c.vocab));
      if (!(e <= decodeBar))
        std::printf("  chunk %lld, P = %lld: NMSE %.3g\n",
                    static_cast<long long>(chunk), static_cast<long long>(p),
                    e);
      ++cases;
    }
  }
  c.check(worstDecode <= decodeBar,
          fmt::format("decode: {} cases (chunks of {}; P = {}): decode "
                      "step at P against row P of one prefill of P + 1 "
                      "tokens, worst NMSE {:.3g} (bar {:g})",
                      cases, fmt::join(chunks, ", "),
                      fmt::join(positions, ", "), worstDecode, decodeBar));
  c.check(worstSelf <= selfBar,
          fmt::format("self: the same decode steps against row P of the "
                      "generation plan's own prefill of P + 1 tokens, worst "
                      "NMSE {:.3g} (bar {:g})",
                      worstSelf, selfBar));
  c.check(worstChunk <= decodeBar,
          fmt::format("prefill chunks: every row against the one-prefill "
                      "reference, worst NMSE {:.3g} (bar {:g})",
                      worstChunk, decodeBar));

  // Batch independence: four sequences, prompts of different lengths, each
  // prefilled in its slot (chunks of the plan's maximum), then decoded
  // together; against each alone in slot 0 of fresh caches.
  const std::vector<int64_t> lengths = {3, 9, 20, 31};
  const int64_t steps = 5;
  std::vector<std::vector<int32_t>> seqs;
  for (size_t s = 0; s < lengths.size(); ++s)
    seqs.push_back(prompt(100 + s, lengths[s] + steps));
  auto decodeRows = [&](const std::vector<size_t> &which, int64_t step,
                        bool ownSlots) {
    std::vector<Row> rs;
    for (size_t s : which)
      rs.push_back({seqs[s][lengths[s] + step],
                    static_cast<int32_t>(lengths[s] + step),
                    static_cast<int32_t>(ownSlots ? s : 0)});
    return rs;
  };
  auto prefillSeq = [&](size_t s, int32_t slot) {
    for (int64_t at = 0; at < lengths[s]; at += maxT) {
      std::vector<Row> rs;
      for (int64_t i = at; i < std::min(lengths[s], at + maxT); ++i)
        rs.push_back({seqs[s][i], static_cast<int32_t>(i), slot});
      c.rows(rs);
    }
  };
  // Together.
  if (!c.gen->resetStates(c.error))
    c.die(c.error);
  for (size_t s = 0; s < seqs.size(); ++s)
    prefillSeq(s, static_cast<int32_t>(s));
  std::vector<std::vector<float>> together; // [step * 4 + s] rows
  for (int64_t step = 0; step < steps; ++step) {
    RunOutput out = c.rows(decodeRows({0, 1, 2, 3}, step, true));
    for (size_t s = 0; s < 4; ++s)
      together.emplace_back(c.row(out, s), c.row(out, s) + c.vocab);
  }
  // Alone.
  double worstBatch = 0;
  for (size_t s = 0; s < seqs.size(); ++s) {
    if (!c.gen->resetStates(c.error))
      c.die(c.error);
    prefillSeq(s, 0);
    for (int64_t step = 0; step < steps; ++step) {
      RunOutput out = c.rows(decodeRows({s}, step, false));
      worstBatch =
          std::max(worstBatch,
                   nmse(c.row(out, 0), together[step * 4 + s].data(), c.vocab));
    }
  }
  c.check(worstBatch <= batchBar,
          fmt::format("batch: 4 sequences (prompts of {} tokens) decoded "
                      "together for {} steps against each alone, worst NMSE "
                      "{:.3g} (bar {:g})",
                      fmt::join(lengths, ", "), steps, worstBatch, batchBar));

  // Past the context: refused before any kernel runs.
  if (!c.gen->resetStates(c.error))
    c.die(c.error);
  RunOutput out;
  std::string why;
  bool refused = !c.gen->runRows(
      {{tokens[0], 0, 1}, {tokens[1], static_cast<int32_t>(context), 1}}, out,
      why);
  bool untouched = true;
  for (size_t i = 0; i < genPlan.states.size(); ++i) {
    std::vector<float> values;
    if (!c.gen->readState(i, values, c.error))
      c.die(c.error);
    untouched &= std::all_of(values.begin(), values.end(),
                             [](float v) { return v == 0; });
  }
  c.check(refused && untouched &&
              why.find(fmt::format("row 1 is at position {}", context)) !=
                  std::string::npos,
          fmt::format("context: a row at position {} is refused before any "
                      "kernel runs ({}), caches unchanged: {}",
                      context, why, untouched ? "yes" : "no"));
  bool slotRefused =
      !c.gen->runRows({{tokens[0], 0, static_cast<int32_t>(batch)}}, out, why);
  c.check(slotRefused,
          fmt::format("slots: a row in slot {} is refused ({})", batch, why));
  return c.failures == 0 ? 0 : 1;
}
