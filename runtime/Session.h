//===- Session.h - sequences in the state slots of a plan -------*- C++ -*-===//
//
// A Session keeps the sequences of a plan with generation state (plan v3,
// docs/generation-design.md): one per slot (strata-compile --max-batch), each
// with its length, i.e. the position of its next token. It is the only code
// that builds rows for Executor::runRows:
//
//   - append(slot, ids): a prompt, or any tokens, added to a slot's sequence
//     in chunks of at most the plan's max_tokens rows of that slot at
//     consecutive positions; the logits after the last id come back;
//   - decode(steps): one token for each of several distinct slots, all in
//     one run (one row per slot at its own position); a row of logits per
//     step comes back;
//   - appendEach(slot, ids): tokens of one slot in one run, the logits after
//     each of them (a plan compiled with --logits all): what verifies
//     speculative drafts;
//   - step(steps, slot, ids): a decode() and one chunk of an append() to
//     another slot in ONE run (a plan compiled with --logits all): the
//     decode rows, then the prompt rows; the logits of each decode row and
//     of the chunk's last row come back (step(steps, chunks): chunks of
//     several slots' prompts in the same run). What a server runs each
//     iteration, so that a prompt being prefilled does not cost the streams
//     already decoding a run of their own per chunk.
//
// Taking tokens back: rewind(slot, n) shortens a sequence to n tokens.
// Caches indexed by position need nothing (the next rows at those positions
// rewrite them), but recurrent state (conv windows, delta-rule states, token
// histories; Executor::hasRecurrentState) has folded every row in, so where
// the plan has some, a rewind goes back to the slot's checkpoint only:
// checkpoint(slot) saves the slot's recurrent state on the device
// (Executor::saveSlot) and rewind restores it.
//
// The plan reads the past from its state (KV caches, recurrent state) at the
// rows' positions, so a decode step costs one row, not the whole sequence.
// A slot's state needs no clearing between sequences: a row at position 0
// starts a sequence (its recurrent state from zero; its cache positions are
// rewritten before they are read), so reset() only sets the length to 0.
//
// Logits: a plan compiled with --logits all returns a row per run row; one
// compiled with --logits last only the run's last row. Appends use the last
// row either way; a decode of several slots on a last-row plan runs each
// slot on its own (the same rows, so the same numbers: each row depends only
// on its own slot's state). step() needs every row's logits once a run holds
// more than one row whose logits are wanted (several decode rows, or decode
// rows and a chunk); it never splits the run, since one run is its point.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace strata::runtime {

class Executor;
struct Row;

/// One decode step of a slot: the token appended at the slot's position.
struct SessionStep {
  int32_t slot = 0;
  int32_t token = 0;
};

/// A chunk of a slot's prompt: \p ids appended at the slot's position.
struct SessionChunk {
  int32_t slot = 0;
  std::span<const int32_t> ids;
};

/// The sequences of a plan with state, one per slot (see the file comment).
class Session {
public:
  /// A session over \p executor (used, not owned; it must outlive the
  /// session), every slot empty. Fails when the plan has no state (it was
  /// compiled without --max-context: no decode entry) or its output is not
  /// logits ([T, vocab] or [1, vocab] in f32).
  static std::unique_ptr<Session> create(Executor &executor,
                                         std::string &error);
  ~Session();
  Session(const Session &) = delete;
  Session &operator=(const Session &) = delete;

  /// The number of slots (the plan's max_batch).
  int64_t slots() const { return static_cast<int64_t>(length_.size()); }
  /// The positions of a slot (the plan's max_context): a sequence holds at
  /// most this many tokens.
  int64_t context() const { return context_; }
  /// The most rows of one run (the plan's max_tokens): an append of more
  /// ids runs in chunks of this size.
  int64_t chunk() const { return chunk_; }
  /// The size of a logits row.
  int64_t vocabSize() const { return vocab_; }
  /// The tokens held by \p slot, i.e. the position of its next token.
  int64_t length(int32_t slot) const { return length_.at(slot); }
  /// Runs of the plan so far (appends count one per chunk).
  size_t runs() const { return runs_; }
  /// The rows of the latest run (0 before any).
  int64_t lastRunRows() const { return lastRunRows_; }
  /// The bytes of recurrent state checkpoint() and rewind() copied so far.
  uint64_t stateBytesCopied() const { return stateBytesCopied_; }

  /// Forgets \p slot's sequence (and its checkpoint): its next token is at
  /// position 0.
  void reset(int32_t slot);
  /// True if runs return the logits of every row (a plan compiled with
  /// --logits all), which appendEach() needs; else of a run's last row.
  bool everyRowLogits() const { return allRows_; }
  /// True if the plan's state includes recurrent state, so that rewind()
  /// needs a checkpoint (see the file comment).
  bool recurrent() const;

  /// Appends \p ids (at least one, each in [0, vocabSize())) to \p slot's
  /// sequence and sets \p logits to the logits after the last one
  /// ([vocabSize()]). Fails, before any run, naming a bad slot or id or a
  /// sequence that would pass the context; on a run's error the slot's
  /// length is what the completed chunks made it.
  bool append(int32_t slot, std::span<const int32_t> ids,
              std::vector<float> &logits, std::string &error);

  /// Appends \p ids (1 to chunk() of them) to \p slot's sequence in one
  /// run and sets \p logits to the logits after each of them
  /// ([ids.size(), vocabSize()]). Fails, before any run, as append() does,
  /// and when the plan returns the last row's logits only.
  bool appendEach(int32_t slot, std::span<const int32_t> ids,
                  std::vector<float> &logits, std::string &error);

  /// Makes \p slot's current length its checkpoint: where the plan has
  /// recurrent state, saves the slot's part of it (a device copy; none when
  /// it was saved at this length and no row of the slot ran since).
  bool checkpoint(int32_t slot, std::string &error);
  /// The length of \p slot's checkpoint, -1 if it has none.
  int64_t checkpointLength(int32_t slot) const { return checkpoint_.at(slot); }
  /// Shortens \p slot's sequence to its first \p length tokens. Without
  /// recurrent state any length up to the current one will do; with it,
  /// only the checkpoint's, whose saved state is restored (no copy when no
  /// row of the slot ran since). Fails, changing nothing, naming the slot
  /// and lengths.
  bool rewind(int32_t slot, int64_t length, std::string &error);

  /// Appends one token to each slot of \p steps (distinct slots, at most
  /// chunk() of them) in one run and sets \p logits to a row per step
  /// ([steps.size(), vocabSize()], in the order of \p steps). Fails, before
  /// any run, naming a bad or repeated slot, a bad id or a full slot.
  bool decode(std::span<const SessionStep> steps, std::vector<float> &logits,
              std::string &error);

  /// decode() for greedy decoding: \p ids gets each step's next token,
  /// the argmax of its logits row computed on the device (the lowest id on
  /// ties: what the sampler's greedy rule takes), and no logits cross to
  /// the host. Fails as decode() does, on a plan that returns no greedy ids
  /// (hasGreedyIds()), and on a row whose logits hold NaN or +inf.
  bool decodeGreedy(std::span<const SessionStep> steps,
                    std::vector<int32_t> &ids, std::string &error);
  /// True if the plan returns greedy ids (decodeGreedy() works).
  bool hasGreedyIds() const;

  /// Runs in ONE run the rows of \p steps (one token of each of its
  /// slots, as decode()) followed by \p ids appended to slot \p prefillSlot
  /// (one chunk of an append(); \p prefillSlot is not read when \p ids is
  /// empty). Sets \p logits to a row per step, in the order of \p steps,
  /// then, when \p ids is not empty, the row after its last id:
  /// [steps.size() + (ids.empty() ? 0 : 1), vocabSize()]. Every slot of
  /// the run advances: a step's by one, \p prefillSlot's by ids.size().
  /// Fails, before any run, as decode() and append() do, and naming a slot
  /// that has both a step and ids, more rows than chunk(), no rows at all,
  /// or a plan that returns the last row's logits only when more than one
  /// row's are wanted; on a run's error no length changes, and every slot
  /// of the run has lost its checkpoint's state (rewind() restores it).
  bool step(std::span<const SessionStep> steps, int32_t prefillSlot,
            std::span<const int32_t> ids, std::vector<float> &logits,
            std::string &error);
  /// The same with several prompt chunks, each of its own slot (none with
  /// a step): the decode rows, then each chunk's rows in order; \p logits
  /// gets a row per step, then each chunk's last row's, in order
  /// ([steps.size() + chunks.size(), vocabSize()]). Fails, before any run,
  /// as above, and on an empty chunk or two chunks of one slot. What a
  /// server runs when several prompts are being prefilled at once.
  bool step(std::span<const SessionStep> steps,
            std::span<const SessionChunk> chunks, std::vector<float> &logits,
            std::string &error);

  /// step() where some rows take the plan's greedy ids: \p greedy has a
  /// flag for each row whose logits step() returns (each step's, then
  /// each chunk's last); \p ids gets one value for each of them (its
  /// greedy id where flagged, -1 elsewhere) and \p logits only the rows of
  /// the unflagged ones, in order ([unflagged, vocabSize()]). What a server
  /// runs when some of its streams decode greedily (an id each) and others
  /// sample (their logits). Fails as step() does, and on a plan without
  /// greedy ids or without every row's logits.
  bool step(std::span<const SessionStep> steps,
            std::span<const SessionChunk> chunks,
            const std::vector<bool> &greedy, std::vector<float> &logits,
            std::vector<int32_t> &ids, std::string &error);

private:
  /// The step()s: with \p greedy (and \p ids), the flagged rows' ids.
  bool runStep(std::span<const SessionStep> steps,
               std::span<const SessionChunk> chunks,
               const std::vector<bool> *greedy, std::vector<float> &logits,
               std::vector<int32_t> *ids, std::string &error);
  Session(Executor &executor, int64_t context, int64_t chunk, int64_t vocab,
          int64_t slots, bool allRows);
  /// Runs \p rows in one run of a plan that returns a logits row per run
  /// row and moves them into \p logits, counting the run; fails on the
  /// executor's error or an output of another size.
  bool runEveryRow(const std::vector<Row> &rows, std::vector<float> &logits,
                   std::string &error);
  /// Checks that \p slot exists (where: "rewind").
  bool checkSlot(int32_t slot, const std::string &where,
                 std::string &error) const;
  /// Checks that \p id may be appended to \p slot (where: "token 3").
  bool checkToken(int32_t slot, int32_t id, const std::string &where,
                  std::string &error) const;
  /// Checks \p ids for an append to \p slot: at least one, each valid, and
  /// room for them in the context.
  bool checkAppend(int32_t slot, std::span<const int32_t> ids,
                   std::string &error) const;
  /// decode()'s checks of \p steps, then their rows (each slot's next
  /// position), the slots marked as off their checkpoints.
  bool decodeRows(std::span<const SessionStep> steps, std::vector<Row> &rows,
                  std::string &error);
  /// Checks \p steps for a decode: at most chunk() of them, each a valid
  /// id of a distinct slot that is not full. Marks their slots in \p used
  /// (resized to slots()).
  bool checkSteps(std::span<const SessionStep> steps, std::vector<bool> &used,
                  std::string &error) const;

  Executor &executor_;
  int64_t context_ = 0, chunk_ = 0, vocab_ = 0;
  /// The plan returns a logits row per run row (--logits all).
  bool allRows_ = false;
  std::vector<int64_t> length_;
  /// Per slot, the length of its checkpoint (-1: none) and whether its
  /// recurrent state is still the checkpoint's (no row of it ran since).
  std::vector<int64_t> checkpoint_;
  std::vector<bool> atCheckpoint_;
  size_t runs_ = 0;
  int64_t lastRunRows_ = 0;
  uint64_t stateBytesCopied_ = 0;
};

} // namespace strata::runtime
