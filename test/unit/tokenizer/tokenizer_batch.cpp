//===- tokenizer_batch.cpp - many texts through the tokenizer at once -----===//
//
// The golden test (test/golden/tokenizer_golden.py) checks thousands of texts
// against llama.cpp; one process per text would spend its time loading the
// vocabulary. This reads a batch of cases and writes one line per case:
//
//   tokenizer-batch GGUF CASES OUT
//
// CASES: records of one flags byte (bit 0: add special tokens, bit 1: parse
// special tokens), a little-endian u32 byte count and the text's bytes.
// OUT: per record "ids<TAB>hex" — the ids comma-separated and the hex of the
// text decoded again (special tokens rendered) through StreamingDecoder, one
// token at a time — or "ERROR<TAB>message". Exit status 1 if the decoder
// streamed anything but what a whole decode gives.
//
//===----------------------------------------------------------------------===//
#include "runtime/format/FileUtil.h"
#include "runtime/format/Gguf.h"
#include "runtime/tokenizer/Tokenizer.h"
#include "runtime/tokenizer/Utf8.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstdio>
#include <cstring>

using namespace strata;

int main(int argc, char **argv) {
  if (argc != 4) {
    std::fputs("usage: tokenizer-batch GGUF CASES OUT\n", stderr);
    return 2;
  }
  std::string err;
  auto file =
      format::GgufFile::open(argv[1], err, format::GgufContents::Shapes);
  if (!file) {
    fmt::print(stderr, "tokenizer-batch: {}\n", err);
    return 1;
  }
  auto tok = tokenizer::Tokenizer::load(file->info(), err);
  if (!tok) {
    fmt::print(stderr, "tokenizer-batch: {}\n", err);
    return 1;
  }
  std::string cases;
  if (!format::readWholeFile(argv[2], size_t(1) << 31, cases, err)) {
    fmt::print(stderr, "tokenizer-batch: {}\n", err);
    return 1;
  }
  std::string out;
  int status = 0;
  size_t pos = 0, index = 0;
  while (pos < cases.size()) {
    if (cases.size() - pos < 5) {
      fmt::print(stderr, "tokenizer-batch: {}: truncated record\n", argv[2]);
      return 1;
    }
    uint8_t flags = uint8_t(cases[pos]);
    uint32_t n;
    std::memcpy(&n, cases.data() + pos + 1, 4);
    pos += 5;
    if (cases.size() - pos < n) {
      fmt::print(stderr, "tokenizer-batch: {}: truncated record\n", argv[2]);
      return 1;
    }
    std::string_view text(cases.data() + pos, n);
    pos += n;
    tokenizer::EncodeOptions options;
    options.addSpecial = flags & 1;
    options.parseSpecial = flags & 2;
    std::vector<tokenizer::TokenId> ids;
    if (!tok->encode(text, options, ids, err)) {
      out += fmt::format("ERROR\t{}\n", err);
      ++index;
      continue;
    }
    std::string whole, streamed;
    if (!tok->decode(ids, true, whole, err)) {
      out += fmt::format("ERROR\t{}\n", err);
      ++index;
      continue;
    }
    tokenizer::StreamingDecoder decoder(*tok);
    for (tokenizer::TokenId id : ids) {
      size_t before = streamed.size();
      if (!decoder.push(id, streamed, err))
        return 1;
      // The text is valid UTF-8, so every push must end on a character
      // boundary: what it added is valid on its own.
      if (tokenizer::findInvalidUtf8(std::string_view(streamed).substr(
              before)) != std::string_view::npos) {
        fmt::print(stderr,
                   "tokenizer-batch: case {}: streamed a partial character\n",
                   index);
        status = 1;
      }
    }
    streamed += decoder.flush();
    if (streamed != whole) {
      fmt::print(stderr, "tokenizer-batch: case {}: streamed decode differs\n",
                 index);
      status = 1;
    }
    std::string hex;
    for (unsigned char c : whole)
      hex += fmt::format("{:02x}", c);
    out += fmt::format("{}\t{}\n", fmt::join(ids, ","), hex);
    ++index;
  }
  if (!format::writeFileAtomic(argv[3], out, err)) {
    fmt::print(stderr, "tokenizer-batch: {}\n", err);
    return 1;
  }
  return status;
}
