//===- ResourcesTest.cpp - kernel resources and occupancy -----------------===//
//
// Code objects and PTX are compiled here, at test time, by the clang-19 and
// ptxas that CMake found, so the reader is checked against what the real
// toolchain writes rather than against a frozen binary.
//
//===----------------------------------------------------------------------===//
#include "codegen/Resources.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <fcntl.h>
#include <unistd.h>

using namespace strata::codegen;
namespace fs = std::filesystem;

namespace {

/// A tool path CMake configured, or "" where find_program found none.
std::string configuredTool(const char *path) {
  std::string p = path;
  if (p.empty() || p.ends_with("-NOTFOUND") || ::access(p.c_str(), X_OK) != 0)
    return "";
  return p;
}

std::string clang19() { return configuredTool(STRATA_CLANG19); }
std::string ptxas() { return configuredTool(STRATA_PTXAS); }

std::string readFile(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void writeFile(const std::string &path, const std::string &bytes) {
  std::ofstream out(path, std::ios::binary);
  out << bytes;
}

/// A fresh directory, removed with its contents when the suite ends.
std::string makeTempDir() {
  std::string templ = ::testing::TempDir() + "strata-resources-test-XXXXXX";
  if (!::mkdtemp(templ.data()))
    return "";
  return templ;
}

/// Runs \p cmd through the shell; its stderr goes to \p log.
int run(const std::string &cmd, const std::string &log) {
  return std::system((cmd + " 2>" + log).c_str());
}

const KernelResources *find(const std::vector<KernelResources> &ks,
                            const std::string &symbol) {
  for (const KernelResources &k : ks)
    if (k.symbol == symbol)
      return &k;
  return nullptr;
}

// Three gfx1151 kernels: 4 KiB of LDS; a private array indexed by a run-time
// value (it cannot live in registers, so it goes to scratch); a declared
// workgroup size limit.
constexpr const char *kHipSource = R"(
extern "C" __attribute__((global)) void lds(float *p) {
  __attribute__((shared)) float tile[1024];
  unsigned t = __builtin_amdgcn_workitem_id_x();
  tile[t] = p[t];
  __builtin_amdgcn_s_barrier();
  p[t] = tile[1023 - t] * 2.0f;
}
extern "C" __attribute__((global)) void priv(float *p, int n) {
  float a[64];
  unsigned t = __builtin_amdgcn_workitem_id_x();
  for (int i = 0; i < 64; ++i)
    a[i] = p[t * 64 + i];
  p[t] = a[n & 63];
}
extern "C" __attribute__((global, amdgpu_flat_work_group_size(1, 256)))
void small(float *p) {
  p[__builtin_amdgcn_workitem_id_x()] += 1.0f;
}
)";

/// Compiles kHipSource once for the whole suite.
class ResourcesAmdgpu : public ::testing::Test {
protected:
  static void SetUpTestSuite() {
    dir = makeTempDir();
    if (clang19().empty() || dir.empty())
      return;
    std::string src = dir + "/k.hip";
    writeFile(src, kHipSource);
    codeObject = dir + "/k.co";
    int rc = run(clang19() +
                     " -x hip --offload-arch=gfx1151 --cuda-device-only"
                     " --no-gpu-bundle-output -nogpulib -nogpuinc -O3 -c " +
                     src + " -o " + codeObject,
                 dir + "/clang.log");
    if (rc != 0) {
      compileLog = readFile(dir + "/clang.log");
      codeObject.clear();
    }
  }
  static void TearDownTestSuite() {
    if (!dir.empty())
      fs::remove_all(dir);
  }
  void SetUp() override {
    if (clang19().empty())
      GTEST_SKIP() << "clang-19 not found at configure time";
    ASSERT_FALSE(codeObject.empty()) << "clang-19 failed:\n" << compileLog;
  }

  /// Reads the code object, expecting success.
  std::vector<KernelResources> kernels() {
    std::vector<KernelResources> ks;
    std::string error;
    EXPECT_TRUE(readAmdgpuCodeObject(codeObject, ks, error)) << error;
    return ks;
  }

  /// Writes \p bytes next to the code object and reads it, expecting
  /// failure; returns the message.
  std::string readFailure(const std::string &name, const std::string &bytes) {
    std::string path = dir + "/" + name;
    writeFile(path, bytes);
    std::vector<KernelResources> ks(1);
    std::string error;
    EXPECT_FALSE(readAmdgpuCodeObject(path, ks, error));
    EXPECT_EQ(ks.size(), 1u) << "output changed on failure";
    EXPECT_NE(error.find(path), std::string::npos) << error;
    return error;
  }

  static std::string dir, codeObject, compileLog;
};

std::string ResourcesAmdgpu::dir, ResourcesAmdgpu::codeObject,
    ResourcesAmdgpu::compileLog;

TEST_F(ResourcesAmdgpu, ReadsEveryKernelInOrder) {
  std::vector<KernelResources> ks = kernels();
  ASSERT_EQ(ks.size(), 3u);
  EXPECT_EQ(ks[0].symbol, "lds");
  EXPECT_EQ(ks[1].symbol, "priv");
  EXPECT_EQ(ks[2].symbol, "small");
}

TEST_F(ResourcesAmdgpu, LdsKernel) {
  std::vector<KernelResources> ks = kernels();
  const KernelResources *k = find(ks, "lds");
  ASSERT_NE(k, nullptr);
  EXPECT_GE(k->sharedBytes, 4096u);
  EXPECT_GT(k->vgprs, 0);
  EXPECT_GE(k->sgprs, 0);
  EXPECT_EQ(k->scratchBytes, 0u);
  EXPECT_EQ(k->vgprSpills, 0);
  EXPECT_EQ(k->sgprSpills, 0);
  EXPECT_EQ(k->waveSize, 32);
  EXPECT_EQ(k->maxFlatWorkgroupSize, 1024); // clang's default
  EXPECT_EQ(k->registers, -1);              // an sm_90 field
  // Few VGPRs and 4 KiB of LDS limit nothing: all 16 slots.
  EXPECT_EQ(occupancyGfx1151(*k, 256), 16);
}

TEST_F(ResourcesAmdgpu, PrivateArrayIndexedAtRunTimeNeedsScratch) {
  std::vector<KernelResources> ks = kernels();
  const KernelResources *k = find(ks, "priv");
  ASSERT_NE(k, nullptr);
  EXPECT_GE(k->scratchBytes, 64 * sizeof(float));
  EXPECT_EQ(k->sharedBytes, 0u);
}

TEST_F(ResourcesAmdgpu, DeclaredWorkgroupSizeLimit) {
  std::vector<KernelResources> ks = kernels();
  const KernelResources *k = find(ks, "small");
  ASSERT_NE(k, nullptr);
  EXPECT_EQ(k->maxFlatWorkgroupSize, 256);
  EXPECT_EQ(occupancyGfx1151(*k, 512), 0); // more than it was compiled for
  EXPECT_EQ(occupancyGfx1151(*k, 256), 16);
}

TEST_F(ResourcesAmdgpu, AppendsToTheOutput) {
  std::vector<KernelResources> ks(2);
  std::string error;
  ASSERT_TRUE(readAmdgpuCodeObject(codeObject, ks, error)) << error;
  ASSERT_EQ(ks.size(), 5u);
  EXPECT_EQ(ks[2].symbol, "lds");
}

TEST_F(ResourcesAmdgpu, MissingFile) {
  std::string path = dir + "/does-not-exist.co";
  std::vector<KernelResources> ks;
  std::string error;
  EXPECT_FALSE(readAmdgpuCodeObject(path, ks, error));
  EXPECT_TRUE(ks.empty());
  EXPECT_NE(error.find(path), std::string::npos) << error;
  EXPECT_NE(error.find("cannot read"), std::string::npos) << error;
}

TEST_F(ResourcesAmdgpu, NotAnElf) {
  std::string error = readFailure("text.co", "this is not a code object\n");
  EXPECT_NE(error.find("not an ELF file"), std::string::npos) << error;
  error = readFailure("empty.co", "");
  EXPECT_NE(error.find("not an ELF file"), std::string::npos) << error;
}

TEST_F(ResourcesAmdgpu, ElfOfAnotherMachine) {
  // The test binary itself: an ELF, but not for AMDGPU.
  std::string error = readFailure("host.elf", readFile("/proc/self/exe"));
  EXPECT_NE(error.find("not an AMDGPU code object"), std::string::npos)
      << error;
}

TEST_F(ResourcesAmdgpu, TruncatedElf) {
  std::string bytes = readFile(codeObject);
  for (size_t n : {size_t(4), size_t(16), size_t(64), size_t(200),
                   bytes.size() / 2, bytes.size() - 1})
    readFailure("truncated.co", bytes.substr(0, n));
}

TEST_F(ResourcesAmdgpu, NoMetadataNote) {
  // The note header is namesz 7, descsz, type 32, then "AMDGPU\0": change
  // the type so that no note is the metadata note.
  std::string bytes = readFile(codeObject);
  const std::string typeAndName("\x20\0\0\0AMDGPU\0", 11);
  size_t at = bytes.find(typeAndName);
  ASSERT_NE(at, std::string::npos);
  bytes[at] = '\x21';
  std::string error = readFailure("nonote.co", bytes);
  EXPECT_NE(error.find("no AMDGPU metadata note"), std::string::npos) << error;
}

TEST_F(ResourcesAmdgpu, MetadataWithoutKernels) {
  std::string bytes = readFile(codeObject);
  size_t at = bytes.find("amdhsa.kernels");
  ASSERT_NE(at, std::string::npos);
  bytes[at + 13] = 'z';
  std::string error = readFailure("nokernels.co", bytes);
  EXPECT_NE(error.find("no amdhsa.kernels"), std::string::npos) << error;
}

TEST_F(ResourcesAmdgpu, MissingRequiredField) {
  std::string bytes = readFile(codeObject);
  size_t at = bytes.find(".vgpr_count");
  ASSERT_NE(at, std::string::npos);
  bytes[at + 1] = 'w';
  std::string error = readFailure("novgpr.co", bytes);
  EXPECT_NE(error.find("kernel 'lds': missing .vgpr_count"), std::string::npos)
      << error;
}

TEST_F(ResourcesAmdgpu, CorruptNoteBytesNeverCrash) {
  // Every byte of the metadata descriptor replaced by a byte that msgpack
  // never uses, then by a map header: the reader must answer, never crash.
  std::string bytes = readFile(codeObject);
  const std::string typeAndName("\x20\0\0\0AMDGPU\0\0", 12);
  size_t at = bytes.find(typeAndName);
  ASSERT_NE(at, std::string::npos);
  uint32_t descSize = 0;
  std::memcpy(&descSize, bytes.data() + at - 4, 4);
  size_t desc = at + typeAndName.size();
  ASSERT_LE(desc + descSize, bytes.size());
  std::string path = dir + "/corrupt.co";
  writeFile(path, bytes);
  // One byte changed in place per read: rewriting whole files is slow on a
  // busy disk.
  int fd = ::open(path.c_str(), O_WRONLY);
  ASSERT_GE(fd, 0);
  int failures = 0;
  for (size_t i = desc; i < desc + descSize; ++i) {
    for (char b : {'\xc1', '\xdf', bytes[i]}) {
      ASSERT_EQ(::pwrite(fd, &b, 1, static_cast<off_t>(i)), 1);
      if (b == bytes[i])
        break; // restored
      std::vector<KernelResources> ks;
      std::string error;
      if (!readAmdgpuCodeObject(path, ks, error)) {
        ++failures;
        EXPECT_EQ(error.rfind(path, 0), 0u) << error;
      }
    }
  }
  ::close(fd);
  EXPECT_GT(failures, 0);
}

// A ptxas -v report in the CUDA 13 format (entries, a device function's
// block between them, cumulative stack size) with one entry in the older
// format (cmem items, no barriers), CRLF line ends on one line.
constexpr const char *kPtxasSample =
    "ptxas info    : Overriding maximum register limit 256 for 'heavy' with  "
    "24 of maxrregcount option\n"
    "ptxas info    : 0 bytes gmem\n"
    "ptxas info    : Compiling entry function 'callsdev' for 'sm_90'\n"
    "ptxas info    : Function properties for callsdev\n"
    "    128 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
    "ptxas info    : Used 19 registers, used 0 barriers, 128 bytes "
    "cumulative stack size\n"
    "ptxas info    : Compile time = 5.834 ms\n"
    "ptxas info    : Function properties for _Z6helperPfi\n"
    "    64 bytes stack frame, 8 bytes spill stores, 8 bytes spill loads\n"
    "ptxas info    : Compiling entry function 'heavy' for 'sm_90'\n"
    "ptxas info    : Function properties for heavy\n"
    "    960 bytes stack frame, 956 bytes spill stores, 1872 bytes spill "
    "loads\r\n"
    "ptxas info    : Used 24 registers, used 1 barriers, 4096 bytes smem, "
    "960 bytes cumulative stack size\n"
    "ptxas info    : Compile time = 20.921 ms\n"
    "ptxas info    : Compiling entry function '_Z3oldPf' for 'sm_80'\n"
    "ptxas info    : Function properties for _Z3oldPf\n"
    "    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
    "ptxas info    : Used 8 registers, 2048 bytes smem, 360 bytes cmem[0]\n";

TEST(ResourcesPtxas, FixedSample) {
  std::vector<KernelResources> ks;
  std::string error;
  ASSERT_TRUE(parsePtxasInfo(kPtxasSample, ks, error)) << error;
  ASSERT_EQ(ks.size(), 3u);

  EXPECT_EQ(ks[0].symbol, "callsdev");
  EXPECT_EQ(ks[0].registers, 19);
  EXPECT_EQ(ks[0].scratchBytes, 128u);
  EXPECT_EQ(ks[0].spillStoreBytes, 0u);
  EXPECT_EQ(ks[0].spillLoadBytes, 0u);
  EXPECT_EQ(ks[0].sharedBytes, 0u);
  EXPECT_EQ(ks[0].waveSize, 32);
  EXPECT_EQ(ks[0].vgprs, -1); // a gfx1151 field

  EXPECT_EQ(ks[1].symbol, "heavy");
  EXPECT_EQ(ks[1].registers, 24);
  EXPECT_EQ(ks[1].sharedBytes, 4096u);
  EXPECT_EQ(ks[1].scratchBytes, 960u);
  EXPECT_EQ(ks[1].spillStoreBytes, 956u);
  EXPECT_EQ(ks[1].spillLoadBytes, 1872u);

  EXPECT_EQ(ks[2].symbol, "_Z3oldPf");
  EXPECT_EQ(ks[2].registers, 8);
  EXPECT_EQ(ks[2].sharedBytes, 2048u);
  EXPECT_EQ(ks[2].scratchBytes, 0u);
}

TEST(ResourcesPtxas, Errors) {
  std::vector<KernelResources> ks(1);
  std::string error;
  EXPECT_FALSE(parsePtxasInfo("", ks, error));
  EXPECT_NE(error.find("no 'Compiling entry function'"), std::string::npos);
  EXPECT_FALSE(parsePtxasInfo("ptxas info    : 0 bytes gmem\n", ks, error));

  std::string bad = "ptxas info    : Compiling entry function 'k' for "
                    "'sm_90'\nptxas info    : Used many registers\n";
  EXPECT_FALSE(parsePtxasInfo(bad, ks, error));
  EXPECT_NE(error.find("line 2"), std::string::npos) << error;

  bad = "ptxas info    : Compiling entry function 'k' for 'sm_90'\n"
        "ptxas info    : Function properties for k\n"
        "    x bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n";
  EXPECT_FALSE(parsePtxasInfo(bad, ks, error));
  EXPECT_NE(error.find("line 3"), std::string::npos) << error;

  bad = "ptxas info    : Compiling entry function k for 'sm_90'\n";
  EXPECT_FALSE(parsePtxasInfo(bad, ks, error));
  EXPECT_EQ(ks.size(), 1u) << "output changed on failure";
}

constexpr const char *kCudaSource = R"(
extern "C" __attribute__((global)) void smem(float *p) {
  __attribute__((shared)) float tile[1024];
  unsigned t = __nvvm_read_ptx_sreg_tid_x();
  tile[t] = p[t];
  __syncthreads();
  p[t] = tile[1023 - t] * 2.0f;
}
extern "C" __attribute__((global)) void priv(float *p, int n) {
  float a[64];
  unsigned t = __nvvm_read_ptx_sreg_tid_x();
  for (int i = 0; i < 64; ++i)
    a[i] = p[t * 64 + i];
  p[t] = a[n & 63];
}
extern "C" __attribute__((global)) void heavy(float *p) {
  unsigned t = __nvvm_read_ptx_sreg_tid_x();
  float a[48];
#pragma unroll
  for (int i = 0; i < 48; ++i)
    a[i] = p[t + i * 1024];
  float s = 0;
#pragma unroll
  for (int j = 0; j < 8; ++j)
#pragma unroll
    for (int i = 0; i < 48; ++i)
      s += a[i] * a[(i * 7 + j) % 48];
  p[t] = s;
}
)";

TEST(ResourcesPtxas, RealPtxas) {
  if (clang19().empty())
    GTEST_SKIP() << "clang-19 not found at configure time";
  if (ptxas().empty())
    GTEST_SKIP() << "no ptxas (neither /usr/local/cuda/bin/ptxas nor on PATH "
                    "at configure time)";
  std::string dir = makeTempDir();
  ASSERT_FALSE(dir.empty());
  writeFile(dir + "/k.cu", kCudaSource);
  ASSERT_EQ(run(clang19() +
                    " -x cuda --cuda-gpu-arch=sm_90 --cuda-device-only"
                    " -nocudainc -nocudalib -O3 -S " +
                    dir + "/k.cu -o " + dir + "/k.ptx",
                dir + "/clang.log"),
            0)
      << readFile(dir + "/clang.log");
  // 24 registers cannot hold heavy's 48 live values: it must spill.
  ASSERT_EQ(run(ptxas() + " -arch=sm_90 -v --maxrregcount=24 " + dir +
                    "/k.ptx -o " + dir + "/k.cubin",
                dir + "/ptxas.log"),
            0)
      << readFile(dir + "/ptxas.log");
  std::string log = readFile(dir + "/ptxas.log");
  fs::remove_all(dir);

  std::vector<KernelResources> ks;
  std::string error;
  ASSERT_TRUE(parsePtxasInfo(log, ks, error)) << error << "\n" << log;
  ASSERT_EQ(ks.size(), 3u) << log;
  const KernelResources *smem = find(ks, "smem");
  const KernelResources *priv = find(ks, "priv");
  const KernelResources *heavy = find(ks, "heavy");
  ASSERT_TRUE(smem && priv && heavy) << log;
  EXPECT_GT(smem->registers, 0);
  EXPECT_LE(smem->registers, 24);
  EXPECT_EQ(smem->sharedBytes, 4096u);
  EXPECT_EQ(smem->scratchBytes, 0u);
  EXPECT_GE(priv->scratchBytes, 64 * sizeof(float));
  EXPECT_GT(heavy->spillStoreBytes, 0u) << log;
  EXPECT_GT(heavy->spillLoadBytes, 0u) << log;
  EXPECT_EQ(occupancySm90(*smem, 256), 64);
}

KernelResources gfx(int vgprs, uint64_t lds = 0) {
  KernelResources r;
  r.vgprs = vgprs;
  r.sharedBytes = lds;
  r.waveSize = 32;
  return r;
}

TEST(ResourcesOccupancyGfx1151, VgprBreakpoints) {
  // targets.md 1.4: floor(1536 / roundUp(v, 24)), at most 16. With 1- or
  // 4-wave workgroups, whole groups fill the slots exactly.
  struct Row {
    int vgprs, waves;
  };
  for (Row row :
       {Row{1, 16}, Row{24, 16}, Row{96, 16}, Row{97, 12}, Row{120, 12},
        Row{121, 10}, Row{128, 10}, Row{144, 10}, Row{145, 9}, Row{168, 9},
        Row{192, 8}, Row{221, 6}, Row{240, 6}, Row{241, 5}, Row{256, 5}}) {
    EXPECT_EQ(occupancyGfx1151(gfx(row.vgprs), 32), row.waves)
        << row.vgprs << " VGPRs, 32 threads";
    EXPECT_EQ(occupancyGfx1151(gfx(row.vgprs), 128), row.waves)
        << row.vgprs << " VGPRs, 128 threads";
  }
}

TEST(ResourcesOccupancyGfx1151, WholeWorkgroups) {
  // 8-wave groups at 5 slots per SIMD: 20 slots per WGP hold 2 groups.
  EXPECT_EQ(occupancyGfx1151(gfx(256), 256), 4);
  // 1024 threads = 32 waves need 8 slots on each of the 4 SIMDs.
  EXPECT_EQ(occupancyGfx1151(gfx(192), 1024), 8);
  EXPECT_EQ(occupancyGfx1151(gfx(193), 1024), 0);
  // A partial wave still takes a slot.
  EXPECT_EQ(occupancyGfx1151(gfx(32), 33), 16);
}

TEST(ResourcesOccupancyGfx1151, LdsLimit) {
  // 128 KiB per WGP: two 64 KiB groups of 4 waves = 8 waves on 4 SIMDs.
  EXPECT_EQ(occupancyGfx1151(gfx(32, 65536), 128), 2);
  // Four 32 KiB groups of 8 waves = 32 waves.
  EXPECT_EQ(occupancyGfx1151(gfx(32, 32768), 256), 8);
  // Two single-wave 64 KiB groups: the busiest SIMD holds one.
  EXPECT_EQ(occupancyGfx1151(gfx(32, 65536), 32), 1);
  // LDS and VGPRs together: 16 KiB groups (8 per WGP) of 4 waves would be
  // 8 per SIMD, but 144 VGPRs allow 10.
  EXPECT_EQ(occupancyGfx1151(gfx(144, 16384), 128), 8);
  EXPECT_EQ(occupancyGfx1151(gfx(192, 8192), 128), 8);
}

TEST(ResourcesOccupancyGfx1151, CannotFit) {
  EXPECT_EQ(occupancyGfx1151(gfx(32, 65537), 64), 0); // > 64 KiB per group
  EXPECT_EQ(occupancyGfx1151(gfx(257), 64), 0);
  EXPECT_EQ(occupancyGfx1151(gfx(32), 1025), 0);
  EXPECT_EQ(occupancyGfx1151(gfx(32), 0), 0);
  EXPECT_EQ(occupancyGfx1151(gfx(-1), 64), -1); // unknown VGPRs
  KernelResources wave64 = gfx(32);
  wave64.waveSize = 64;
  EXPECT_EQ(occupancyGfx1151(wave64, 64), -1); // not modelled
}

KernelResources sm90(int registers, uint64_t shared = 0) {
  KernelResources r;
  r.registers = registers;
  r.sharedBytes = shared;
  r.waveSize = 32;
  return r;
}

TEST(ResourcesOccupancySm90, Registers) {
  EXPECT_EQ(occupancySm90(sm90(32), 256), 64);
  EXPECT_EQ(occupancySm90(sm90(255), 256), 8); // 256 x 32 per warp
  EXPECT_EQ(occupancySm90(sm90(48), 256), 40); // 42 warps -> 5 blocks
  EXPECT_EQ(occupancySm90(sm90(41), 256), 40); // rounds up to 48
  EXPECT_EQ(occupancySm90(sm90(64), 1024), 32);
  EXPECT_EQ(occupancySm90(sm90(65), 1024), 0); // 72 x 1024 > 64 Ki
  EXPECT_EQ(occupancySm90(sm90(256), 32), 0);
}

TEST(ResourcesOccupancySm90, BlockAndWarpLimits) {
  EXPECT_EQ(occupancySm90(sm90(16), 32), 32); // 32 blocks of 1 warp
  EXPECT_EQ(occupancySm90(sm90(16), 64), 64); // 32 blocks of 2 warps
  EXPECT_EQ(occupancySm90(sm90(16), 96), 63); // 21 blocks of 3 warps
  EXPECT_EQ(occupancySm90(sm90(16), 1024), 64);
  EXPECT_EQ(occupancySm90(sm90(16), 1025), 0);
  EXPECT_EQ(occupancySm90(sm90(16), 0), 0);
  EXPECT_EQ(occupancySm90(sm90(-1), 128), -1); // unknown registers
}

TEST(ResourcesOccupancySm90, SharedMemory) {
  // 100 KiB + 1 KiB reserved per block: 2 blocks in 228 KiB.
  EXPECT_EQ(occupancySm90(sm90(32, 100 * 1024), 128), 8);
  EXPECT_EQ(occupancySm90(sm90(32, 227 * 1024), 128), 4);
  EXPECT_EQ(occupancySm90(sm90(32, 227 * 1024 + 1), 128), 0);
  // 113 KiB + 1 KiB fits twice in 228 KiB, 114 KiB + 1 KiB once.
  EXPECT_EQ(occupancySm90(sm90(32, 113 * 1024), 256), 16);
  EXPECT_EQ(occupancySm90(sm90(32, 114 * 1024), 256), 8);
}

TEST(ResourcesLaunchProblem, SaysWhatDoesNotFit) {
  // 65 registers x 1024 threads > 64 Ki: one sentence with the numbers.
  EXPECT_EQ(launchProblem(sm90(65), 1024, "sm_90"),
            "a block of 1024 threads using 65 registers per thread and 0 "
            "bytes of shared memory does not fit one SM of sm_90 (at most "
            "1024 threads, 255 registers per thread, 65536 registers per SM, "
            "232448 bytes of shared memory per block)");
  EXPECT_NE(launchProblem(sm90(32, 227 * 1024 + 1), 128, "sm_90")
                .find("232449 bytes of shared memory"),
            std::string::npos);
  EXPECT_NE(launchProblem(gfx(257), 64, "gfx1151").find("257 VGPRs per lane"),
            std::string::npos);
  // Launchable, or unknown resources: nothing to say.
  EXPECT_EQ(launchProblem(sm90(64), 1024, "sm_90"), "");
  EXPECT_EQ(launchProblem(sm90(-1), 128, "sm_90"), "");
  EXPECT_EQ(launchProblem(gfx(32), 64, "gfx1151"), "");
}

} // namespace
