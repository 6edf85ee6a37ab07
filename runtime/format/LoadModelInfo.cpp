//===- LoadModelInfo.cpp - GGUF or key/value text, by content -------------===//
#include "runtime/format/FileUtil.h"
#include "runtime/format/Gguf.h"
#include "runtime/format/KeyValueFile.h"
#include "runtime/format/ModelInfo.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstring>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace strata::format {

std::unique_ptr<ModelInfo> loadModelInfo(const std::string &path,
                                         std::string &error) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    error = fmt::format("{}: cannot open: {}", path, std::strerror(errno));
    return nullptr;
  }
  // The open descriptor decides, never the name: a directory, a device such
  // as /dev/zero (which never ends) or an empty file is refused here.
  struct stat st;
  std::string why;
  char magic[4] = {};
  if (::fstat(fd, &st) != 0)
    why = fmt::format("cannot stat: {}", std::strerror(errno));
  else
    why = describeNonGguf(st);
  bool isGguf = why.empty() && ::pread(fd, magic, 4, 0) == 4 &&
                std::memcmp(magic, "GGUF", 4) == 0;
  ::close(fd);
  if (!why.empty()) {
    error = fmt::format("{}: {}", path, why);
    return nullptr;
  }
  if (isGguf) {
    // Planning needs shapes and types only, so shapes-only files qualify.
    auto file = GgufFile::open(path, error, GgufContents::Shapes);
    if (!file)
      return nullptr;
    return std::make_unique<ModelInfo>(std::move(file->mutableInfo()));
  }
  // Key/value text: small by nature; refuse anything huge rather than read it.
  constexpr size_t kMaxTextBytes = size_t(16) << 20;
  if (static_cast<uint64_t>(st.st_size) > kMaxTextBytes) {
    error = path + ": not a GGUF file, and too large (> 16 MiB) for a "
                   "key/value text file";
    return nullptr;
  }
  std::string text;
  if (!readWholeFile(path, kMaxTextBytes, text, error))
    return nullptr;
  return parseKeyValueText(text, path, error);
}

} // namespace strata::format
