//===- GgufFuzzer.cpp - libFuzzer target for the GGUF reader --------------===//
//
// Any byte string: validate it as a GGUF image. If it is accepted, touch the
// first and last byte of every tensor (AddressSanitizer catches data that
// lies outside the input), render every metadata value, and check that the
// writer accepts what the reader accepted and writes it back identically.
//
//===----------------------------------------------------------------------===//
#include "runtime/format/Gguf.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <unistd.h>
#include <vector>

using namespace strata::format;

namespace {

[[noreturn]] void die(const char *what, const std::string &detail) {
  std::fprintf(stderr, "GgufFuzzer: %s: %s\n", what, detail.c_str());
  std::abort();
}

/// Where rewritten images go; one file per fuzzing process, in memory where
/// possible since the writer syncs every file it writes.
const std::string &scratchPath() {
  static const std::string path =
      std::string(::access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp") +
      "/strata-gguf-fuzz-" + std::to_string(::getpid()) + ".gguf";
  return path;
}

/// Writes \p file back with the writer, reads it again and compares.
void roundTrip(const GgufFile &file) {
  const ModelInfo &info = file.info();
  std::vector<GgufTensorData> tensors;
  for (const TensorInfo &t : info.tensors()) {
    const uint8_t *p = file.tensorData(t);
    tensors.push_back({t, std::vector<uint8_t>(p, p + t.numBytes())});
  }
  std::string error;
  if (!writeGguf(scratchPath(), info, tensors, error))
    die("the writer refused what the reader accepted", error);
  std::unique_ptr<GgufFile> again = GgufFile::open(scratchPath(), error);
  if (!again)
    die("the reader refused what the writer wrote", error);
  const ModelInfo &info2 = again->info();
  if (info2.metadata().size() != info.metadata().size() ||
      info2.tensors().size() != info.tensors().size())
    die("round trip changed the counts", scratchPath());
  for (size_t k = 0; k < info.metadata().size(); ++k) {
    const auto &[key, value] = info.metadata()[k];
    const auto &[key2, value2] = info2.metadata()[k];
    // toString renders full values (NaNs alike), which is equality enough.
    if (key != key2 || value.toString(SIZE_MAX) != value2.toString(SIZE_MAX))
      die("round trip changed metadata", key);
  }
  for (size_t k = 0; k < tensors.size(); ++k) {
    const TensorInfo &t = info2.tensors()[k];
    if (t.name != tensors[k].info.name || t.type != tensors[k].info.type ||
        t.dims != tensors[k].info.dims ||
        !std::equal(tensors[k].bytes.begin(), tensors[k].bytes.end(),
                    again->tensorData(t)))
      die("round trip changed a tensor", t.name);
  }
  ::unlink(scratchPath().c_str());
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  // A copy of exactly `size` bytes, so any read past the end is caught.
  std::vector<uint8_t> bytes(data, data + size);
  std::string error;
  std::unique_ptr<GgufFile> file =
      GgufFile::fromBytes(bytes.data(), bytes.size(), "fuzz.gguf", error);
  if (!file) {
    if (error.rfind("fuzz.gguf: offset ", 0) != 0 ||
        error.find('\n') != std::string::npos)
      die("malformed error message", error);
    return 0;
  }
  volatile uint8_t sink = 0;
  for (const TensorInfo &t : file->info().tensors()) {
    const uint8_t *p = file->tensorData(t);
    sink = sink ^ p[0] ^ p[t.numBytes() - 1];
  }
  size_t rendered = 0;
  for (const auto &kv : file->info().metadata())
    rendered += kv.second.toString().size();
  (void)rendered;
  // A file without tensors may declare an alignment up to 2^31 with its data
  // section past its end (ggml accepts it); writing it back would write that
  // much padding. Round trips stay within what a fuzzer iteration can afford.
  if (file->alignment() <= (uint64_t(1) << 16))
    roundTrip(*file);
  return 0;
}
