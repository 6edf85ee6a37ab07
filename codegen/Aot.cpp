//===- Aot.cpp - emit, cache and compile a plan's kernels -----------------===//
#include "codegen/Aot.h"

#include "codegen/KernelEmitter.h"
#include "runtime/format/FileUtil.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <fcntl.h>
#include <filesystem>
#include <map>
#include <mutex>
#include <spawn.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

extern char **environ;

namespace strata::codegen {

namespace fs = std::filesystem;

namespace {

/// Runs \p argv; stdout and stderr go to \p logPath. Returns the exit status
/// (-1 if it could not start).
int runTool(const std::vector<std::string> &argv, const std::string &logPath) {
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, logPath.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  std::vector<char *> args;
  for (const std::string &a : argv)
    args.push_back(const_cast<char *>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid;
  int rc = posix_spawnp(&pid, args[0], &fa, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0)
    return -1;
  int status = 0;
  if (waitpid(pid, &status, 0) < 0)
    return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

/// The first \p n lines of file \p path.
std::string headOf(const std::string &path, int n) {
  std::string text, err;
  if (!format::readWholeFile(path, 1 << 20, text, err))
    return "";
  size_t at = 0;
  for (int i = 0; i < n && at != std::string::npos; ++i)
    at = text.find('\n', at + 1);
  return at == std::string::npos ? text : text.substr(0, at);
}

/// Output of `prog --version` (first line), for the cache key.
std::string versionOf(const std::string &prog, const std::string &tmp) {
  std::string log = tmp + "/version.txt";
  if (runTool({prog, "--version"}, log) != 0)
    return "";
  return headOf(log, 1);
}

uint64_t fnv(const std::string &s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

std::string findPtxas(const std::string &given) {
  if (given == "none")
    return "";
  if (!given.empty())
    return given;
  if (const char *p = std::getenv("PATH")) {
    std::string path = p;
    size_t at = 0;
    while (at <= path.size()) {
      size_t end = path.find(':', at);
      std::string dir =
          path.substr(at, end == std::string::npos ? end : end - at);
      if (!dir.empty() && access((dir + "/ptxas").c_str(), X_OK) == 0)
        return dir + "/ptxas";
      if (end == std::string::npos)
        break;
      at = end + 1;
    }
  }
  if (access("/usr/local/cuda/bin/ptxas", X_OK) == 0)
    return "/usr/local/cuda/bin/ptxas";
  return "";
}

/// One distinct specialisation to build.
struct Job {
  std::string symbol;
  std::string source;
  std::string key; ///< cache key (hex)
  size_t firstKernel = 0;
  bool cached = false;
  std::string error;
};

} // namespace

std::string defaultCacheDir() {
  if (const char *x = std::getenv("XDG_CACHE_HOME"); x && *x)
    return std::string(x) + "/strata-compile";
  if (const char *h = std::getenv("HOME"); h && *h)
    return std::string(h) + "/.cache/strata-compile";
  return "/tmp/strata-compile-cache";
}

bool compileKernels(format::Plan &plan, const std::string &planDir,
                    const AotOptions &options, AotStats &stats,
                    std::string &error) {
  auto start = std::chrono::steady_clock::now();
  const std::string &target = plan.target;
  if (!isDeviceTarget(target)) {
    error = fmt::format("codegen: target '{}' has no device code generator",
                        target);
    return false;
  }
  const bool gfx = target == "gfx1151";
  std::string cacheDir =
      options.cacheDir.empty() ? defaultCacheDir() : options.cacheDir;
  std::error_code ec;
  fs::create_directories(cacheDir, ec);
  if (ec) {
    error = fmt::format("codegen: cannot create the cache folder {}: {}",
                        cacheDir, ec.message());
    return false;
  }
  std::string kdir = planDir + "/kernels";
  fs::create_directories(kdir, ec);
  if (ec) {
    error = fmt::format("codegen: cannot create {}: {}", kdir, ec.message());
    return false;
  }
  std::string tmp = fs::temp_directory_path().string() + "/strata-aot-" +
                    std::to_string(getpid());
  fs::create_directories(tmp, ec);
  struct Cleanup {
    std::string dir;
    ~Cleanup() {
      std::error_code e;
      fs::remove_all(dir, e);
    }
  } cleanup{tmp};

  std::string clangVersion = versionOf(options.clang, tmp);
  if (clangVersion.empty()) {
    error = fmt::format("codegen: the device compiler '{}' did not run (is "
                        "clang-19 installed? scripts/install-deps.sh installs "
                        "it)",
                        options.clang);
    return false;
  }
  std::string ptxas = gfx ? "" : findPtxas(options.ptxas);
  std::string ptxasVersion = ptxas.empty() ? "" : versionOf(ptxas, tmp);
  if (!ptxas.empty() && ptxasVersion.empty())
    ptxas.clear();
  stats.cubins = !ptxas.empty();

  std::vector<std::string> flags =
      gfx ? std::vector<std::string>{"-x",
                                     "hip",
                                     "--offload-arch=gfx1151",
                                     "--cuda-device-only",
                                     "--no-gpu-bundle-output",
                                     "-nogpulib",
                                     "-nogpuinc",
                                     "-O3",
                                     "-c"}
          : std::vector<std::string>{"-x",
                                     "cuda",
                                     "--cuda-gpu-arch=sm_90a",
                                     "--cuda-device-only",
                                     "-nocudainc",
                                     "-nocudalib",
                                     "-O3",
                                     "-S",
                                     "-Wno-unknown-cuda-version"};
  std::string flagText;
  for (const std::string &f : flags)
    flagText += f + " ";

  // Emit every kernel; one job per distinct symbol.
  std::vector<Job> jobs;
  std::map<std::string, size_t> bySymbol;
  std::vector<EmittedKernel> emitted(plan.kernels.size());
  for (size_t k = 0; k < plan.kernels.size(); ++k) {
    if (!emitKernel(plan, k, target, emitted[k], error))
      return false;
    if (bySymbol.count(emitted[k].symbol))
      continue;
    Job j;
    j.symbol = emitted[k].symbol;
    j.source = deviceSource(target, emitted[k]);
    j.key = fmt::format("{:016x}", fnv(j.source + "\n" + flagText + "\n" +
                                       clangVersion + "\n" + ptxasVersion));
    j.firstKernel = k;
    bySymbol[j.symbol] = jobs.size();
    jobs.push_back(std::move(j));
  }
  // The synthetic weight fill (strata-run --synthetic-weights on the
  // device): one more module, not a launch of the plan.
  {
    Job j;
    j.symbol = kSyntheticFillSymbol;
    j.source = syntheticFillSource(target);
    j.key = fmt::format("{:016x}", fnv(j.source + "\n" + flagText + "\n" +
                                       clangVersion + "\n" + ptxasVersion));
    j.firstKernel = SIZE_MAX;
    jobs.push_back(std::move(j));
  }
  const char *srcExt = gfx ? ".hip" : ".cu";
  const char *objExt = gfx ? ".co" : ".ptx";

  // Compile the cache misses in parallel.
  std::atomic<size_t> next{0}, done{0};
  std::mutex mu;
  int nj = options.jobs > 0 ? options.jobs
                            : std::max(1u, std::thread::hardware_concurrency());
  auto work = [&] {
    for (size_t i = next++; i < jobs.size(); i = next++) {
      Job &j = jobs[i];
      std::string base = cacheDir + "/" + j.key;
      bool have = fs::exists(base + objExt) &&
                  (ptxas.empty() || fs::exists(base + ".cubin"));
      if (have) {
        j.cached = true;
      } else {
        std::string src = fmt::format("{}/{}{}", tmp, j.symbol, srcExt);
        std::string obj = fmt::format("{}/{}{}", tmp, j.symbol, objExt);
        std::string log = fmt::format("{}/{}.log", tmp, j.symbol);
        std::string werr;
        if (!format::writeFileAtomic(src, j.source, werr)) {
          j.error = werr;
        } else {
          std::vector<std::string> argv{options.clang};
          argv.insert(argv.end(), flags.begin(), flags.end());
          argv.insert(argv.end(), {src, "-o", obj});
          if (runTool(argv, log) != 0) {
            j.error =
                fmt::format("{} failed:\n{}", options.clang, headOf(log, 12));
          } else if (!ptxas.empty()) {
            std::string cub = fmt::format("{}/{}.cubin", tmp, j.symbol);
            std::string plog = fmt::format("{}/{}.ptxas.txt", tmp, j.symbol);
            if (runTool({ptxas, "-arch=sm_90a", "-v", obj, "-o", cub}, plog) !=
                0)
              j.error = fmt::format("ptxas failed:\n{}", headOf(plog, 12));
            else {
              fs::copy_file(plog, base + ".ptxas.txt.part",
                            fs::copy_options::overwrite_existing, ec);
              fs::copy_file(cub, base + ".cubin.part",
                            fs::copy_options::overwrite_existing, ec);
            }
          }
          if (j.error.empty()) {
            // Publish into the cache: rename is atomic, so a reader sees a
            // whole file or none.
            std::error_code e2;
            fs::copy_file(obj, base + objExt + std::string(".part"),
                          fs::copy_options::overwrite_existing, e2);
            if (!ptxas.empty()) {
              fs::rename(base + ".ptxas.txt.part", base + ".ptxas.txt", e2);
              fs::rename(base + ".cubin.part", base + ".cubin", e2);
            }
            fs::rename(base + objExt + std::string(".part"), base + objExt, e2);
            if (e2)
              j.error = fmt::format("cannot write the cache entry {}{}: {}",
                                    base, objExt, e2.message());
          }
        }
      }
      size_t d = ++done;
      if (options.progress) {
        std::lock_guard<std::mutex> lock(mu);
        fmt::print(stderr, "\rstrata-compile: kernels {}/{} ({})", d,
                   jobs.size(), target);
        if (d == jobs.size())
          fmt::print(stderr, "\n");
      }
    }
  };
  std::vector<std::thread> pool;
  for (int t = 0; t < std::min<int>(nj, static_cast<int>(jobs.size())); ++t)
    pool.emplace_back(work);
  for (std::thread &t : pool)
    t.join();

  // Write sources and objects into the plan, all or nothing.
  std::vector<std::string> blobs;
  std::vector<format::FileToWrite> files;
  blobs.reserve(jobs.size() * 4);
  for (const Job &j : jobs) {
    if (!j.error.empty()) {
      // Keep the failing source where the user can read it (the plan
      // folder is not written when compilation fails).
      fs::create_directories(cacheDir + "/failed", ec);
      std::string src =
          fmt::format("{}/failed/{}{}", cacheDir, j.symbol, srcExt);
      std::string werr;
      format::writeFileAtomic(src, j.source, werr);
      error =
          j.firstKernel == SIZE_MAX
              ? fmt::format("codegen: the synthetic weight fill for {}: "
                            "{} (source: {})",
                            target, j.error, src)
              : fmt::format("codegen: kernel {} ({}) for {}: {} (source: "
                            "{})",
                            j.firstKernel, plan.kernels[j.firstKernel].label(),
                            target, j.error, src);
      return false;
    }
    std::string base = cacheDir + "/" + j.key, err;
    for (std::string ext : {std::string(objExt), std::string(".cubin"),
                            std::string(".ptxas.txt")}) {
      if (ext != objExt && ptxas.empty())
        continue;
      std::string data;
      if (!format::readWholeFile(base + ext, size_t(1) << 30, data, err)) {
        error = fmt::format("codegen: cannot read the cache entry {}: {}",
                            base + ext, err);
        return false;
      }
      blobs.push_back(std::move(data));
      files.push_back(
          {fmt::format("{}/{}{}", kdir, j.symbol, ext), blobs.back()});
    }
    blobs.push_back(j.source);
    files.push_back(
        {fmt::format("{}/{}{}", kdir, j.symbol, srcExt), blobs.back()});
    if (j.cached)
      ++stats.cached;
    else
      ++stats.compiled;
  }
  if (!format::writeFilesAtomic(files, error))
    return false;

  // One launch's code from what the emitter made (the module is the
  // kernel's: alternates live in the same one).
  auto codeOf = [](const EmittedKernel &e, const std::string &module) {
    format::PlanCode code;
    code.module = module;
    code.symbol = e.symbol;
    code.grid = e.grid;
    code.block = e.block;
    code.sharedBytes = e.sharedBytes;
    code.args = e.args;
    code.pre = e.pre;
    code.workspace = e.workspace;
    code.tensorMaps = e.tensorMaps;
    code.minTokens = e.minTokens;
    for (uint32_t i : e.int8Inputs)
      if (std::find(e.floatGemvInputs.begin(), e.floatGemvInputs.end(), i) ==
              e.floatGemvInputs.end() &&
          std::find(code.int8Inputs.begin(), code.int8Inputs.end(), i) ==
              code.int8Inputs.end())
        code.int8Inputs.push_back(i);
    std::sort(code.int8Inputs.begin(), code.int8Inputs.end());
    return code;
  };
  for (size_t k = 0; k < plan.kernels.size(); ++k) {
    const EmittedKernel &e = emitted[k];
    format::PlanCode code = codeOf(
        e, fmt::format("kernels/{}{}", e.symbol,
                       gfx ? ".co" : (ptxas.empty() ? ".ptx" : ".cubin")));
    for (const EmittedKernel &a : e.alternates)
      code.alternates.push_back(codeOf(a, code.module));
    plan.kernels[k].code = std::move(code);
  }
  format::PlanCode fill;
  fill.module = fmt::format("kernels/{}{}", kSyntheticFillSymbol,
                            gfx ? ".co" : (ptxas.empty() ? ".ptx" : ".cubin"));
  fill.symbol = kSyntheticFillSymbol;
  fill.grid = {{0, 1, 1}, {0, 1, 1}, {0, 1, 1}};
  fill.block = {256, 1, 1};
  fill.args = syntheticFillArgs();
  plan.syntheticFill = std::move(fill);
  stats.kernels = plan.kernels.size();
  stats.distinct = jobs.size() - 1;
  stats.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  return true;
}

} // namespace strata::codegen
