//===- dequant_tool.cpp - quants-oracle-check: file-level quant codec -----===//
//
// The C++ half of test/golden/quants_oracle.py: converts whole files between
// raw ggml blocks and little-endian float32 with runtime/format/Quants.h so
// the script can compare them with gguf-py.
//
//   quants-oracle-check dequant TYPE IN.bin OUT.f32   blocks -> floats
//   quants-oracle-check quant   TYPE IN.f32 OUT.bin   floats -> blocks
//
// TYPE is a ggml type name (Q4_K, iq3_s, ...). Exit status 0 on success, 1 on
// any error (usage, I/O, unsupported type, size not a whole number of
// blocks), with a message on stderr.
//
//===----------------------------------------------------------------------===//
#include "runtime/format/GgmlType.h"
#include "runtime/format/Quants.h"

#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

using namespace strata::format;

namespace {

bool readFile(const char *path, std::vector<uint8_t> &out) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return false;
  out.assign(std::istreambuf_iterator<char>(in),
             std::istreambuf_iterator<char>());
  return !in.bad();
}

bool writeFile(const char *path, const void *data, size_t size) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(static_cast<const char *>(data),
            static_cast<std::streamsize>(size));
  return static_cast<bool>(out);
}

int fail(const std::string &msg) {
  std::fprintf(stderr, "quants-oracle-check: error: %s\n", msg.c_str());
  return 1;
}

int usage() {
  std::fprintf(stderr,
               "usage: quants-oracle-check dequant TYPE IN.bin OUT.f32\n"
               "       quants-oracle-check quant TYPE IN.f32 OUT.bin\n");
  return 1;
}

int runDequant(const GgmlTypeInfo &info, const char *inPath,
               const char *outPath) {
  std::vector<uint8_t> in;
  if (!readFile(inPath, in))
    return fail(std::string("cannot read ") + inPath);
  if (in.size() % info.typeSize != 0)
    return fail(std::to_string(in.size()) + " bytes is not a whole number of " +
                info.name + " blocks");
  int64_t n = static_cast<int64_t>(in.size() / info.typeSize) * info.blockSize;
  std::vector<float> out(static_cast<size_t>(n));
  if (!dequantizeRow(info.type, in.data(), out.data(), n))
    return fail(std::string("cannot dequantize ") + info.name);
  if (!writeFile(outPath, out.data(), out.size() * sizeof(float)))
    return fail(std::string("cannot write ") + outPath);
  return 0;
}

int runQuant(const GgmlTypeInfo &info, const char *inPath,
             const char *outPath) {
  std::vector<uint8_t> in;
  if (!readFile(inPath, in))
    return fail(std::string("cannot read ") + inPath);
  if (in.size() % sizeof(float) != 0)
    return fail("input is not a float32 array");
  int64_t n = static_cast<int64_t>(in.size() / sizeof(float));
  int64_t bytes = rowSizeInBytes(info.type, n);
  if (bytes < 0)
    return fail(std::to_string(n) + " values is not a whole number of " +
                info.name + " blocks");
  std::vector<float> values(static_cast<size_t>(n));
  if (n)
    std::memcpy(values.data(), in.data(), in.size());
  std::vector<uint8_t> out(static_cast<size_t>(bytes));
  if (!quantizeRow(info.type, values.data(), out.data(), n))
    return fail(std::string("cannot quantize to ") + info.name);
  if (!writeFile(outPath, out.data(), out.size()))
    return fail(std::string("cannot write ") + outPath);
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  if (argc != 5)
    return usage();
  std::string mode = argv[1];
  std::optional<GgmlTypeInfo> info = ggmlTypeFromName(argv[2]);
  if (!info)
    return fail(std::string("unknown ggml type '") + argv[2] + "'");
  if (mode == "dequant")
    return runDequant(*info, argv[3], argv[4]);
  if (mode == "quant")
    return runQuant(*info, argv[3], argv[4]);
  return usage();
}
