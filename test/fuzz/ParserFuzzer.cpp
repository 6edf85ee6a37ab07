//===- ParserFuzzer.cpp - libFuzzer target for the IR front end -----------===//
//
// Any byte string: parse, verify, print, re-parse (must print identically),
// then expand against fixed metadata with a small op budget.
//
//===----------------------------------------------------------------------===//
#include "ir/Parser.h"
#include "ir/Printer.h"
#include "ir/Verifier.h"
#include "passes/Pass.h"
#include "runtime/format/KeyValueFile.h"

#include <cstdio>
#include <cstdlib>
#include <sstream>

using namespace strata;

namespace {

const format::ModelInfo &fuzzModel() {
  static std::unique_ptr<format::ModelInfo> model = [] {
    std::string err;
    auto m = format::parseKeyValueText(
        "general.architecture = \"qwen3\"\n"
        "qwen3.block_count = 2\nqwen3.embedding_length = 64\n"
        "qwen3.attention.head_count = 4\nqwen3.feed_forward_length = 128\n"
        "qwen3.attention.layer_norm_rms_epsilon = 1e-6\n"
        "tensor token_embd.weight f32 [64, 100]\n"
        "tensor blk.0.attn_norm.weight f32 [64]\n"
        "tensor blk.1.attn_norm.weight f32 [64]\n"
        "tensor blk.0.ffn_up.weight q8_0 [64, 128]\n",
        "fuzz.kv", err);
    if (!m)
      std::abort();
    return m;
  }();
  return *model;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  ir::SourceMgr sm;
  std::ostringstream os;
  ir::DiagnosticEngine diag(sm, os);
  uint32_t buf = sm.addBuffer(
      "fuzz.strata", std::string(reinterpret_cast<const char *>(data), size));
  auto m = ir::parseModule(sm, buf, diag);
  if (!m || !ir::verifyModule(*m, diag))
    return 0;
  std::string once = ir::printModule(*m);
  {
    ir::SourceMgr sm2;
    std::ostringstream os2;
    ir::DiagnosticEngine diag2(sm2, os2);
    auto m2 = ir::parseModule(sm2, sm2.addBuffer("again", once), diag2);
    if (!m2 || !ir::verifyModule(*m2, diag2)) {
      std::fprintf(stderr, "printed IR does not re-parse:\n%s\n%s\n",
                   once.c_str(), os2.str().c_str());
      std::abort();
    }
    if (ir::printModule(*m2) != once) {
      std::fprintf(stderr, "print(parse(print(m))) != print(m):\n%s\n",
                   once.c_str());
      std::abort();
    }
  }
  passes::PassManager pm;
  pm.add(passes::createPass("expand"));
  passes::PassContext ctx{diag};
  ctx.model = &fuzzModel();
  ctx.maxExpandedOps = 20000;
  if (pm.run(m, ctx))
    (void)ir::printModule(*m);
  return 0;
}
