//===- sampler_tool.cpp - sampler-oracle-check: the sampler's chain -------===//
//
// The C++ half of test/golden/sampler_oracle.py: runs runtime/Sampler's chain
// (Sampler::distribution, no draw) over many cases in one process, so the
// script can compare the survivors and their probabilities with llama.cpp's.
//
//   sampler-oracle-check CASES.txt LOGITS.f32 HISTORY.i32
//
// Each line of CASES.txt is one case:
//   LOGIT_OFFSET VOCAB HISTORY_OFFSET HISTORY_LENGTH [NAME=VALUE ...]
// (offsets and lengths in elements of the raw little-endian float32 / int32
// files; NAME=VALUE as setSamplerOption). For each case it prints
//   case I ok N            then N lines "ID LOGIT PROB" (most likely first)
//   case I error MESSAGE   when the sampler refuses the case
// Exit status 0 when every case was read (refusals included), 1 on a usage,
// I/O or case-format error, with a message on stderr.
//
//===----------------------------------------------------------------------===//
#include "runtime/Sampler.h"

#include <cstdio>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

using namespace strata::runtime;

namespace {

template <typename T> bool readRaw(const char *path, std::vector<T> &out) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return false;
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)),
                          std::istreambuf_iterator<char>());
  if (in.bad() || bytes.size() % sizeof(T) != 0)
    return false;
  out.resize(bytes.size() / sizeof(T));
  std::copy(bytes.begin(), bytes.end(), reinterpret_cast<char *>(out.data()));
  return true;
}

int fail(const std::string &msg) {
  std::fprintf(stderr, "sampler-oracle-check: error: %s\n", msg.c_str());
  return 1;
}

} // namespace

int main(int argc, char **argv) {
  if (argc != 4) {
    std::fprintf(stderr,
                 "usage: sampler-oracle-check CASES.txt LOGITS.f32 "
                 "HISTORY.i32\noptions (NAME=VALUE):\n%s",
                 describeSamplerOptions().c_str());
    return 1;
  }
  std::ifstream cases(argv[1]);
  std::vector<float> logits;
  std::vector<int32_t> history;
  if (!cases)
    return fail(std::string("cannot read ") + argv[1]);
  if (!readRaw(argv[2], logits))
    return fail(std::string("cannot read float32 file ") + argv[2]);
  if (!readRaw(argv[3], history))
    return fail(std::string("cannot read int32 file ") + argv[3]);

  std::string line;
  std::vector<SampleCandidate> out;
  for (size_t index = 0; std::getline(cases, line); ++index) {
    std::istringstream fields(line);
    size_t logitOffset, vocab, historyOffset, historyLength;
    if (!(fields >> logitOffset >> vocab >> historyOffset >> historyLength) ||
        logitOffset + vocab > logits.size() ||
        historyOffset + historyLength > history.size())
      return fail("case " + std::to_string(index) + ": bad line '" + line +
                  "'");
    SamplerOptions options;
    std::string assignment, error;
    while (fields >> assignment)
      if (!setSamplerOption(options, assignment, error))
        return fail("case " + std::to_string(index) + ": " + error);
    std::optional<Sampler> sampler = Sampler::create(options, error);
    if (!sampler)
      return fail("case " + std::to_string(index) + ": " + error);
    std::span<const float> l(logits.data() + logitOffset, vocab);
    std::span<const int32_t> h(history.data() + historyOffset, historyLength);
    if (!sampler->distribution(l, h, out, error)) {
      std::printf("case %zu error %s\n", index, error.c_str());
      continue;
    }
    std::printf("case %zu ok %zu\n", index, out.size());
    for (const SampleCandidate &c : out)
      std::printf("%d %.17g %.17g\n", c.id, c.logit, c.prob);
  }
  return 0;
}
