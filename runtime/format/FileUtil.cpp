//===- FileUtil.cpp - whole-file reads and atomic writes ------------------===//
#include "runtime/format/FileUtil.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <unistd.h>

namespace strata::format {

bool readWholeFile(const std::string &path, size_t maxBytes, std::string &out,
                   std::string &error) {
  FILE *f = path == "-" ? stdin : std::fopen(path.c_str(), "rb");
  if (!f) {
    error = fmt::format("{}: cannot open: {}", path, std::strerror(errno));
    return false;
  }
  out.clear();
  char buf[1 << 16];
  size_t n;
  bool ok = true;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) {
    if (out.size() + n > maxBytes) {
      error =
          fmt::format("{}: input is larger than {} MiB", path, maxBytes >> 20);
      ok = false;
      break;
    }
    out.append(buf, n);
  }
  if (ok && std::ferror(f)) {
    error = fmt::format("{}: read error: {}", path, std::strerror(errno));
    ok = false;
  }
  if (f != stdin)
    std::fclose(f);
  return ok;
}

bool writeFileAtomic(const std::string &path, std::string_view data,
                     std::string &error) {
  if (path == "-") {
    std::cout.write(data.data(), static_cast<std::streamsize>(data.size()));
    std::cout.flush();
    if (!std::cout) {
      error = "cannot write to standard output";
      return false;
    }
    return true;
  }
  std::string tmp = fmt::format("{}.tmp.{}", path, ::getpid());
  FILE *f = std::fopen(tmp.c_str(), "wb");
  if (!f) {
    error = fmt::format("{}: cannot create: {}", path, std::strerror(errno));
    return false;
  }
  bool ok = std::fwrite(data.data(), 1, data.size(), f) == data.size();
  ok = (std::fclose(f) == 0) && ok;
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    error = fmt::format("{}: cannot write: {}", path, std::strerror(errno));
    std::remove(tmp.c_str());
    return false;
  }
  return true;
}

} // namespace strata::format
