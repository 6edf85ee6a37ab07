//===- FileUtilTest.cpp - whole-file reads and atomic writes --------------===//
#include "runtime/format/FileUtil.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <sys/stat.h>
#include <unistd.h>

using namespace strata::format;
namespace fs = std::filesystem;

namespace {

/// A fresh directory, removed with its contents at the end of the test.
class TempDir {
public:
  TempDir() {
    std::string templ = ::testing::TempDir() + "strata-fileutil-test-XXXXXX";
    EXPECT_NE(::mkdtemp(templ.data()), nullptr);
    path = templ;
  }
  ~TempDir() {
    ::chmod(path.c_str(), 0700);
    fs::remove_all(path);
  }
  std::string file(const std::string &name) const { return path + "/" + name; }
  std::vector<std::string> entries() const {
    std::vector<std::string> names;
    for (const auto &e : fs::directory_iterator(path))
      names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  }
  std::string path;
};

std::string slurp(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void spit(const std::string &path, const std::string &text) {
  std::ofstream(path, std::ios::binary) << text;
}

} // namespace

TEST(ReadWholeFileTest, ReadsARegularFile) {
  TempDir dir;
  spit(dir.file("a"), "hello");
  std::string out, error;
  ASSERT_TRUE(readWholeFile(dir.file("a"), 5, out, error)) << error;
  EXPECT_EQ(out, "hello");
  EXPECT_FALSE(readWholeFile(dir.file("a"), 4, out, error));
  EXPECT_EQ(error, dir.file("a") + ": input is larger than 0 MiB");
}

TEST(ReadWholeFileTest, RefusesWhatIsNotARegularFile) {
  // /dev/zero never ends: it used to be read until memory ran out when the
  // cap was larger than memory, because the size check trusted stat.
  TempDir dir;
  std::string out, error;
  EXPECT_FALSE(readWholeFile("/dev/zero", size_t(1) << 40, out, error));
  EXPECT_EQ(error, "/dev/zero: not a regular file");
  EXPECT_FALSE(readWholeFile(dir.path, 1 << 20, out, error));
  EXPECT_EQ(error, dir.path + ": not a regular file");
  EXPECT_FALSE(readWholeFile(dir.file("missing"), 1 << 20, out, error));
  EXPECT_EQ(error, dir.file("missing") + ": cannot open: No such file or "
                                         "directory");
}

TEST(WriteFilesAtomicTest, WritesEveryFile) {
  TempDir dir;
  spit(dir.file("old"), "old");
  std::string error;
  ASSERT_TRUE(
      writeFilesAtomic({{dir.file("a"), "A"}, {dir.file("old"), "B"}}, error))
      << error;
  EXPECT_EQ(slurp(dir.file("a")), "A");
  EXPECT_EQ(slurp(dir.file("old")), "B");
  EXPECT_EQ(dir.entries(), (std::vector<std::string>{"a", "old"}));
  struct stat st;
  ASSERT_EQ(::stat(dir.file("a").c_str(), &st), 0);
  mode_t mask = ::umask(0);
  ::umask(mask);
  EXPECT_EQ(st.st_mode & 0777, 0666 & ~mask);
}

TEST(WriteFilesAtomicTest, AFailureLeavesEveryFileAsItWas) {
  // The first target exists, the second cannot be created: the first keeps
  // its contents and no temporary is left behind.
  TempDir dir;
  spit(dir.file("existing"), "keep");
  std::string error;
  EXPECT_FALSE(writeFilesAtomic({{dir.file("existing"), "new"},
                                 {dir.file("new"), "n"},
                                 {dir.file("no/such/x"), "x"}},
                                error));
  EXPECT_EQ(error, dir.file("no/such/x") + ": cannot create: No such file or "
                                           "directory");
  EXPECT_EQ(slurp(dir.file("existing")), "keep");
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"existing"});
}

TEST(WriteFilesAtomicTest, ATargetThatIsADirectoryIsFoundBeforeAnyRename) {
  // Renaming onto a directory would fail half-way through the commit; it is
  // found first, and nothing is replaced or left behind.
  TempDir dir;
  spit(dir.file("existing"), "keep");
  fs::create_directory(dir.file("d"));
  std::string error;
  EXPECT_FALSE(writeFilesAtomic({{dir.file("existing"), "new"},
                                 {dir.file("fresh"), "f"},
                                 {dir.file("d"), "x"}},
                                error));
  EXPECT_EQ(error, dir.file("d") + ": cannot write: it is a directory");
  EXPECT_EQ(slurp(dir.file("existing")), "keep");
  EXPECT_EQ(dir.entries(), (std::vector<std::string>{"d", "existing"}));
}

TEST(WriteFilesAtomicTest, APathNamedTwiceIsRefused) {
  TempDir dir;
  std::string error;
  EXPECT_FALSE(
      writeFilesAtomic({{dir.file("a"), "1"}, {dir.file("a"), "2"}}, error));
  EXPECT_EQ(error, dir.file("a") + ": given as more than one output");
  EXPECT_TRUE(dir.entries().empty());
}

TEST(WriteFileAtomicTest, OneFile) {
  TempDir dir;
  std::string error;
  ASSERT_TRUE(writeFileAtomic(dir.file("a"), "x", error)) << error;
  EXPECT_EQ(slurp(dir.file("a")), "x");
  EXPECT_FALSE(writeFileAtomic(dir.file("no/a"), "x", error));
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"a"});
}
