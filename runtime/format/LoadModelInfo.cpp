//===- LoadModelInfo.cpp - GGUF or key/value text, by content -------------===//
#include "runtime/format/Gguf.h"
#include "runtime/format/KeyValueFile.h"
#include "runtime/format/ModelInfo.h"

#include <fstream>
#include <sstream>

namespace strata::format {

std::unique_ptr<ModelInfo> loadModelInfo(const std::string &path,
                                         std::string &error) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    error = path + ": cannot open file";
    return nullptr;
  }
  char magic[4] = {};
  in.read(magic, 4);
  if (in.gcount() == 4 && magic[0] == 'G' && magic[1] == 'G' &&
      magic[2] == 'U' && magic[3] == 'F') {
    in.close();
    // Planning needs shapes and types only, so shapes-only files qualify.
    auto file = GgufFile::open(path, error, GgufContents::Shapes);
    if (!file)
      return nullptr;
    return std::make_unique<ModelInfo>(std::move(file->mutableInfo()));
  }
  // Key/value text: small by nature; refuse anything huge rather than read it.
  in.seekg(0, std::ios::end);
  std::streamoff size = in.tellg();
  if (size > (16 << 20)) {
    error = path + ": not a GGUF file, and too large (> 16 MiB) for a "
                   "key/value text file";
    return nullptr;
  }
  in.seekg(0);
  std::stringstream ss;
  ss << in.rdbuf();
  return parseKeyValueText(ss.str(), path, error);
}

} // namespace strata::format
