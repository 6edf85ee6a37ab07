//===- Session.cpp - sequences in the state slots of a plan ---------------===//
//
// Rows for Executor::runRows: chunks of one slot for an append, one row per
// slot for a decode step, both in one run for a step. Every check that does
// not need the model runs before the first run, so a refused call changes
// nothing.
//
//===----------------------------------------------------------------------===//
#include "runtime/Session.h"

#include "runtime/Executor.h"

#include <fmt/format.h>

#include <algorithm>

namespace strata::runtime {

std::unique_ptr<Session> Session::create(Executor &executor,
                                         std::string &error) {
  const format::Plan &plan = executor.plan();
  if (plan.states.empty() || executor.maxContext() <= 0 ||
      executor.maxBatch() <= 0) {
    error = "the plan has no decode entry (no generation state: it was "
            "compiled without --max-context); recompile it with "
            "strata-compile --max-context N";
    return nullptr;
  }
  // Logits: [T, vocab] (a row per run row) or [1, vocab] (--logits last).
  const format::PlanBuffer &out = plan.buffers[plan.outputs.at(0)];
  if (out.shape.size() != 2 || out.shape[1].coef != 0 ||
      out.shape[1].constant <= 0 || out.dtype != format::PlanDType::F32 ||
      (!(out.shape[0].coef == 1 && out.shape[0].constant == 0) &&
       !(out.shape[0].coef == 0 && out.shape[0].constant == 1))) {
    error = fmt::format("the plan's output '{}' is not logits [T, vocab] or "
                        "[1, vocab] in f32, so it cannot generate",
                        out.name);
    return nullptr;
  }
  return std::unique_ptr<Session>(new Session(
      executor, executor.maxContext(), plan.maxTokens, out.shape[1].constant,
      executor.maxBatch(), out.shape[0].coef == 1));
}

Session::Session(Executor &executor, int64_t context, int64_t chunk,
                 int64_t vocab, int64_t slots, bool allRows)
    : executor_(executor), context_(context), chunk_(chunk), vocab_(vocab),
      allRows_(allRows), length_(slots, 0), checkpoint_(slots, -1),
      atCheckpoint_(slots, false) {}

Session::~Session() = default;

void Session::reset(int32_t slot) {
  length_.at(slot) = 0;
  checkpoint_.at(slot) = -1;
  atCheckpoint_.at(slot) = false;
}

bool Session::recurrent() const { return executor_.hasRecurrentState(); }
bool Session::hasGreedyIds() const { return executor_.hasGreedyIds(); }

bool Session::checkSlot(int32_t slot, const std::string &where,
                        std::string &error) const {
  if (slot < 0 || slot >= slots()) {
    error = fmt::format("{}: slot {} does not exist (the plan has {} slots, "
                        "strata-compile --max-batch)",
                        where, slot, slots());
    return false;
  }
  return true;
}

bool Session::checkToken(int32_t slot, int32_t id, const std::string &where,
                         std::string &error) const {
  if (!checkSlot(slot, where, error))
    return false;
  if (id < 0 || id >= vocab_) {
    error = fmt::format("{}: id {} is out of range (vocabulary of {} tokens)",
                        where, id, vocab_);
    return false;
  }
  return true;
}

bool Session::checkAppend(int32_t slot, std::span<const int32_t> ids,
                          std::string &error) const {
  if (ids.empty()) {
    error = "nothing to append: no tokens";
    return false;
  }
  for (size_t i = 0; i < ids.size(); ++i)
    if (!checkToken(slot, ids[i], fmt::format("token {}", i), error))
      return false;
  int64_t have = length_[slot];
  if (have + static_cast<int64_t>(ids.size()) > context_) {
    error = fmt::format("slot {} holds {} tokens; {} more would pass the "
                        "plan's context of {} positions (strata-compile "
                        "--max-context)",
                        slot, have, ids.size(), context_);
    return false;
  }
  return true;
}

bool Session::append(int32_t slot, std::span<const int32_t> ids,
                     std::vector<float> &logits, std::string &error) {
  if (!checkAppend(slot, ids, error))
    return false;
  RunOutput out;
  for (size_t begin = 0; begin < ids.size();
       begin += static_cast<size_t>(chunk_)) {
    size_t end = std::min(ids.size(), begin + static_cast<size_t>(chunk_));
    std::vector<Row> rows;
    for (size_t i = begin; i < end; ++i)
      rows.push_back(
          {ids[i], static_cast<int32_t>(length_[slot] + (i - begin)), slot});
    atCheckpoint_[slot] = false;
    // Only the chunk's last row is wanted: a --logits all plan copies just
    // that one from the device.
    const std::vector<int64_t> last = {static_cast<int64_t>(rows.size()) - 1};
    if (!executor_.runRows(rows, out, error, allRows_ ? &last : nullptr))
      return false;
    length_[slot] += static_cast<int64_t>(rows.size());
    ++runs_;
    lastRunRows_ = static_cast<int64_t>(rows.size());
  }
  // The last row of the last chunk: the only row of a --logits last plan.
  if (out.data.size() < static_cast<size_t>(vocab_)) {
    error = fmt::format("the plan's output has {} values, fewer than a row of "
                        "{} logits",
                        out.data.size(), vocab_);
    return false;
  }
  logits.assign(out.data.end() - vocab_, out.data.end());
  return true;
}

bool Session::runEveryRow(const std::vector<Row> &rows,
                          std::vector<float> &logits, std::string &error) {
  RunOutput out;
  out.data.swap(logits); // its capacity reused, as in step()
  if (!executor_.runRows(rows, out, error))
    return false;
  ++runs_;
  lastRunRows_ = static_cast<int64_t>(rows.size());
  if (out.data.size() != rows.size() * static_cast<size_t>(vocab_)) {
    error = fmt::format("the plan's output has {} values, not {} rows of {} "
                        "logits",
                        out.data.size(), rows.size(), vocab_);
    return false;
  }
  logits = std::move(out.data);
  return true;
}

bool Session::appendEach(int32_t slot, std::span<const int32_t> ids,
                         std::vector<float> &logits, std::string &error) {
  if (!allRows_) {
    error = "the plan returns the logits of a run's last row only (it was "
            "compiled with --logits last); the logits of every row need a "
            "plan compiled with strata-compile --logits all";
    return false;
  }
  if (!checkAppend(slot, ids, error))
    return false;
  if (static_cast<int64_t>(ids.size()) > chunk_) {
    error = fmt::format("{} tokens in one run, more than the plan's "
                        "max_tokens {}",
                        ids.size(), chunk_);
    return false;
  }
  std::vector<Row> rows;
  for (size_t i = 0; i < ids.size(); ++i)
    rows.push_back({ids[i], static_cast<int32_t>(length_[slot] + i), slot});
  atCheckpoint_[slot] = false;
  if (!runEveryRow(rows, logits, error))
    return false;
  length_[slot] += static_cast<int64_t>(rows.size());
  return true;
}

bool Session::checkpoint(int32_t slot, std::string &error) {
  if (!checkSlot(slot, "checkpoint", error))
    return false;
  if (checkpoint_[slot] == length_[slot] && atCheckpoint_[slot])
    return true;
  if (recurrent()) {
    if (!executor_.saveSlot(slot, error))
      return false;
    stateBytesCopied_ += executor_.recurrentSlotBytes();
  }
  checkpoint_[slot] = length_[slot];
  atCheckpoint_[slot] = true;
  return true;
}

bool Session::rewind(int32_t slot, int64_t length, std::string &error) {
  if (!checkSlot(slot, "rewind", error))
    return false;
  if (length < 0 || length > length_[slot]) {
    error = fmt::format("rewind: slot {} holds {} tokens; it cannot go back "
                        "to {}",
                        slot, length_[slot], length);
    return false;
  }
  if (!recurrent()) {
    // Caches only: the next rows at those positions rewrite them.
    length_[slot] = length;
    return true;
  }
  if (checkpoint_[slot] != length) {
    error = fmt::format("rewind: slot {} has recurrent state, which goes back "
                        "only to its checkpoint ({}), not to {} tokens",
                        slot,
                        checkpoint_[slot] < 0
                            ? std::string("none")
                            : fmt::format("{} tokens", checkpoint_[slot]),
                        length);
    return false;
  }
  if (!atCheckpoint_[slot]) {
    if (!executor_.restoreSlot(slot, error))
      return false;
    stateBytesCopied_ += executor_.recurrentSlotBytes();
  }
  length_[slot] = length;
  atCheckpoint_[slot] = true;
  return true;
}

bool Session::checkSteps(std::span<const SessionStep> steps,
                         std::vector<bool> &used, std::string &error) const {
  if (static_cast<int64_t>(steps.size()) > chunk_) {
    error = fmt::format("{} decode steps in one run, more than the plan's "
                        "max_tokens {}",
                        steps.size(), chunk_);
    return false;
  }
  used.assign(slots(), false);
  for (size_t i = 0; i < steps.size(); ++i) {
    const SessionStep &s = steps[i];
    if (!checkToken(s.slot, s.token, fmt::format("step {}", i), error))
      return false;
    if (used[s.slot]) {
      error = fmt::format("step {}: slot {} has two steps in one decode", i,
                          s.slot);
      return false;
    }
    used[s.slot] = true;
    if (length_[s.slot] >= context_) {
      error = fmt::format("step {}: slot {} is full (its {} tokens fill the "
                          "plan's context; strata-compile --max-context)",
                          i, s.slot, length_[s.slot]);
      return false;
    }
  }
  return true;
}

bool Session::decodeRows(std::span<const SessionStep> steps,
                         std::vector<Row> &rows, std::string &error) {
  if (steps.empty()) {
    error = "nothing to decode: no steps";
    return false;
  }
  std::vector<bool> used;
  if (!checkSteps(steps, used, error))
    return false;
  rows.clear();
  for (const SessionStep &s : steps) {
    rows.push_back({s.token, static_cast<int32_t>(length_[s.slot]), s.slot});
    atCheckpoint_[s.slot] = false;
  }
  return true;
}

bool Session::decode(std::span<const SessionStep> steps,
                     std::vector<float> &logits, std::string &error) {
  std::vector<Row> rows;
  if (!decodeRows(steps, rows, error))
    return false;
  logits.clear();
  logits.reserve(steps.size() * static_cast<size_t>(vocab_));
  RunOutput out;
  if (allRows_ || rows.size() == 1) {
    if (!runEveryRow(rows, logits, error))
      return false;
    for (const SessionStep &s : steps)
      ++length_[s.slot];
  } else {
    // A --logits last plan returns one row a run: a run per slot.
    for (const Row &r : rows) {
      if (!executor_.runRows({r}, out, error))
        return false;
      ++runs_;
      lastRunRows_ = 1;
      logits.insert(logits.end(), out.data.end() - vocab_, out.data.end());
      ++length_[r.seq];
    }
  }
  return true;
}

bool Session::decodeGreedy(std::span<const SessionStep> steps,
                           std::vector<int32_t> &ids, std::string &error) {
  if (!executor_.hasGreedyIds()) {
    error = "greedy ids on the device need a plan that returns them "
            "(strata-compile --greedy-ids on, the default with "
            "--max-context)";
    return false;
  }
  std::vector<Row> rows;
  if (!decodeRows(steps, rows, error))
    return false;
  ids.clear();
  std::vector<int32_t> got;
  // As decode(): one run of every row, or a run per slot on a --logits
  // last plan (its ids are of the run's last row).
  const bool together = allRows_ || rows.size() == 1;
  for (size_t i = 0; i < (together ? 1 : rows.size()); ++i) {
    std::vector<Row> run = together ? rows : std::vector<Row>{rows[i]};
    if (!executor_.runRowsIds(run, got, error))
      return false;
    ++runs_;
    lastRunRows_ = static_cast<int64_t>(run.size());
    if (got.size() != (allRows_ ? run.size() : 1)) {
      error = fmt::format("the plan's greedy ids have {} values, not {}",
                          got.size(), allRows_ ? run.size() : 1);
      return false;
    }
    ids.insert(ids.end(), got.end() - (allRows_ ? run.size() : 1), got.end());
    for (const Row &r : run)
      ++length_[r.seq];
  }
  return true;
}

bool Session::step(std::span<const SessionStep> steps, int32_t prefillSlot,
                   std::span<const int32_t> ids, std::vector<float> &logits,
                   std::string &error) {
  const SessionChunk one{prefillSlot, ids};
  return step(steps,
              ids.empty() ? std::span<const SessionChunk>()
                          : std::span<const SessionChunk>(&one, 1),
              logits, error);
}

bool Session::step(std::span<const SessionStep> steps,
                   std::span<const SessionChunk> chunks,
                   std::vector<float> &logits, std::string &error) {
  return runStep(steps, chunks, nullptr, logits, nullptr, error);
}

bool Session::step(std::span<const SessionStep> steps,
                   std::span<const SessionChunk> chunks,
                   const std::vector<bool> &greedy, std::vector<float> &logits,
                   std::vector<int32_t> &ids, std::string &error) {
  if (!executor_.hasGreedyIds() || !allRows_) {
    error = "greedy ids in a step need a plan that returns them and every "
            "row's logits (strata-compile --greedy-ids on --logits all)";
    return false;
  }
  if (greedy.size() != steps.size() + chunks.size()) {
    error = fmt::format("{} greedy flags for {} rows whose logits are wanted",
                        greedy.size(), steps.size() + chunks.size());
    return false;
  }
  return runStep(steps, chunks, &greedy, logits, &ids, error);
}

bool Session::runStep(std::span<const SessionStep> steps,
                      std::span<const SessionChunk> chunks,
                      const std::vector<bool> *greedy,
                      std::vector<float> &logits, std::vector<int32_t> *ids,
                      std::string &error) {
  if (steps.empty() && chunks.empty()) {
    error = "nothing to run: no decode steps and no prompt tokens";
    return false;
  }
  std::vector<bool> used;
  if (!checkSteps(steps, used, error))
    return false;
  size_t promptRows = 0;
  std::vector<bool> chunked(used.size(), false);
  for (const SessionChunk &c : chunks) {
    if (c.ids.empty()) {
      error = fmt::format("the prompt chunk of slot {} is empty", c.slot);
      return false;
    }
    if (!checkAppend(c.slot, c.ids, error))
      return false;
    if (used[c.slot]) {
      error = fmt::format("slot {} has a decode step and prompt tokens in one "
                          "run (its rows would repeat a position)",
                          c.slot);
      return false;
    }
    if (chunked[c.slot]) {
      error = fmt::format("slot {} has two prompt chunks in one run (one "
                          "chunk a slot: its rows would repeat a position)",
                          c.slot);
      return false;
    }
    chunked[c.slot] = true;
    promptRows += c.ids.size();
  }
  const size_t rowCount = steps.size() + promptRows;
  if (static_cast<int64_t>(rowCount) > chunk_) {
    error = fmt::format("{} decode steps and {} prompt tokens in one run: {} "
                        "rows, more than the plan's max_tokens {}",
                        steps.size(), promptRows, rowCount, chunk_);
    return false;
  }
  // The logits wanted: each decode row's and each chunk's last. A last-row
  // plan returns the run's last row, which is enough for one of them only.
  const size_t wanted = steps.size() + chunks.size();
  if (!allRows_ && wanted > 1) {
    const std::string withChunks =
        chunks.empty() ? ""
        : chunks.size() == 1
            ? " and a prompt chunk"
            : fmt::format(" and {} prompt chunks", chunks.size());
    error = fmt::format("a run of {} decode row{}{} needs the logits of {} "
                        "rows, but the plan returns a run's last row only (it "
                        "was compiled with --logits last); recompile it with "
                        "strata-compile --logits all",
                        steps.size(), steps.size() == 1 ? "" : "s", withChunks,
                        wanted);
    return false;
  }
  // Decode rows first, then the chunks in order: the last chunk's last row
  // is the run's last, as in an append (the only row a last-row plan
  // returns). Of a --logits all plan's rows, only the decode rows and each
  // chunk's last come back from the device.
  std::vector<Row> rows;
  std::vector<int64_t> keep;
  rows.reserve(rowCount);
  for (const SessionStep &s : steps) {
    keep.push_back(static_cast<int64_t>(rows.size()));
    rows.push_back({s.token, static_cast<int32_t>(length_[s.slot]), s.slot});
    atCheckpoint_[s.slot] = false;
  }
  for (const SessionChunk &c : chunks) {
    for (size_t i = 0; i < c.ids.size(); ++i)
      rows.push_back(
          {c.ids[i], static_cast<int32_t>(length_[c.slot] + i), c.slot});
    keep.push_back(static_cast<int64_t>(rows.size()) - 1);
    atCheckpoint_[c.slot] = false;
  }
  // The caller's logits vector carries its capacity into the run and back,
  // so a decode step reuses one host buffer instead of allocating (and, past
  // glibc's mmap threshold, faulting in) a vocabulary per row each step.
  RunOutput out;
  out.data.swap(logits);
  size_t logitRows = wanted;
  if (greedy) {
    // Flagged rows: their id; the others: their logits.
    std::vector<int64_t> idRows, keepRows;
    for (size_t i = 0; i < wanted; ++i)
      ((*greedy)[i] ? idRows : keepRows).push_back(keep[i]);
    logitRows = keepRows.size();
    std::vector<int32_t> got;
    if (!executor_.runRowsIds(rows, idRows, got, keepRows, out, error))
      return false;
    ids->assign(wanted, -1);
    for (size_t i = 0, g = 0; i < wanted; ++i)
      if ((*greedy)[i])
        (*ids)[i] = got.at(g++);
  } else if (!executor_.runRows(rows, out, error, allRows_ ? &keep : nullptr)) {
    return false;
  }
  ++runs_;
  lastRunRows_ = static_cast<int64_t>(rowCount);
  if (out.data.size() != logitRows * static_cast<size_t>(vocab_)) {
    error = fmt::format("the plan's output has {} values, not {} rows of {} "
                        "logits",
                        out.data.size(), logitRows, vocab_);
    return false;
  }
  logits = std::move(out.data);
  for (const SessionStep &s : steps)
    ++length_[s.slot];
  for (const SessionChunk &c : chunks)
    length_[c.slot] += static_cast<int64_t>(c.ids.size());
  return true;
}

} // namespace strata::runtime
