//===- Resources.cpp - per-kernel resource usage and occupancy ------------===//
#include "codegen/Resources.h"

#include "ir/Target.h"

#include <fmt/format.h>

#include <llvm/BinaryFormat/ELF.h>
#include <llvm/BinaryFormat/MsgPackDocument.h>
#include <llvm/BinaryFormat/MsgPackReader.h>
#include <llvm/Object/ELFObjectFile.h>
#include <llvm/Support/Error.h>
#include <llvm/Support/MemoryBuffer.h>

#include <algorithm>
#include <cassert>
#include <charconv>
#include <climits>
#include <optional>
#include <string_view>

namespace strata::codegen {

namespace {

//===----------------------------------------------------------------------===//
// gfx1151 code objects
//===----------------------------------------------------------------------===//

using llvm::object::ELF64LE;
using llvm::object::ELF64LEObjectFile;
using llvm::object::ELFFile;

/// Outcome of looking for the metadata note: the msgpack blob, or why not.
struct NoteSearch {
  std::optional<std::string> blob;
  std::string error;
};

/// Scans the notes of one SHT_NOTE section or PT_NOTE segment for the AMDGPU
/// metadata note. The iteration error is checked on every path, as LLVM
/// requires of an llvm::Error, so no early return from inside the loop.
template <class Header>
void scanNotes(const ELFFile<ELF64LE> &elf, const Header &h, uint64_t align,
               NoteSearch &found) {
  llvm::Error err = llvm::Error::success();
  for (const auto &note : elf.notes(h, err)) {
    if (note.getName() == "AMDGPU" &&
        note.getType() == llvm::ELF::NT_AMDGPU_METADATA) {
      // Notes are 4-byte aligned unless the section says 8 (ELF gABI).
      found.blob = note.getDescAsStringRef(align == 8 ? 8 : 4).str();
      break;
    }
  }
  if (err)
    found.error = llvm::toString(std::move(err));
}

/// Finds the metadata note through the section table, or through the
/// program headers where a stripped object has no section table.
NoteSearch findMetadataNote(const ELFFile<ELF64LE> &elf) {
  NoteSearch found;
  llvm::Expected<ELFFile<ELF64LE>::Elf_Shdr_Range> sections = elf.sections();
  if (!sections) {
    found.error = llvm::toString(sections.takeError());
    return found;
  }
  for (const auto &sec : *sections) {
    if (sec.sh_type != llvm::ELF::SHT_NOTE)
      continue;
    scanNotes(elf, sec, sec.sh_addralign, found);
    if (found.blob || !found.error.empty())
      return found;
  }
  llvm::Expected<ELFFile<ELF64LE>::Elf_Phdr_Range> phdrs =
      elf.program_headers();
  if (!phdrs) {
    found.error = llvm::toString(phdrs.takeError());
    return found;
  }
  for (const auto &ph : *phdrs) {
    if (ph.p_type != llvm::ELF::PT_NOTE)
      continue;
    scanNotes(elf, ph, ph.p_align, found);
    if (found.blob || !found.error.empty())
      return found;
  }
  return found;
}

/// Checks that \p blob is one well-formed msgpack object whose map keys are
/// all strings, as AMDGPU metadata's are. LLVM 19's msgpack::Document
/// reader is not safe on arbitrary input: two map keys that are themselves
/// maps or arrays reach an llvm_unreachable in its key comparison (found by
/// corrupting single bytes of a real note), so nothing else reaches it.
bool wellFormedMetadata(llvm::StringRef blob, std::string &why) {
  struct Level {
    uint64_t left; ///< objects still to read at this level
    bool map;
    bool keyNext;
  };
  std::vector<Level> stack;
  llvm::msgpack::Reader reader(blob);
  do {
    llvm::msgpack::Object obj;
    llvm::Expected<bool> got = reader.read(obj);
    if (!got) {
      why = llvm::toString(got.takeError());
      return false;
    }
    if (!*got) {
      why = "msgpack ends inside a map or array";
      return false;
    }
    if (!stack.empty()) {
      Level &level = stack.back();
      if (level.map && level.keyNext &&
          obj.Kind != llvm::msgpack::Type::String) {
        why = "msgpack map key is not a string";
        return false;
      }
      level.keyNext = level.map && !level.keyNext;
      --level.left;
    }
    switch (obj.Kind) {
    case llvm::msgpack::Type::Map:
      stack.push_back({2 * static_cast<uint64_t>(obj.Length), true, true});
      break;
    case llvm::msgpack::Type::Array:
      stack.push_back({obj.Length, false, false});
      break;
    case llvm::msgpack::Type::Binary:
    case llvm::msgpack::Type::Extension:
      why = "msgpack binary or extension object";
      return false;
    default:
      break;
    }
    while (!stack.empty() && stack.back().left == 0)
      stack.pop_back();
  } while (!stack.empty());
  return true;
}

/// Reads the kernels of a decoded `amdhsa.kernels` array. Fields the code
/// object v3+ metadata marks required must be present with the right type;
/// the spill counts are optional.
class KernelsReader {
public:
  explicit KernelsReader(std::string &error) : error(error) {}

  bool read(llvm::msgpack::DocNode &root, std::vector<KernelResources> &out) {
    if (!root.isMap())
      return fail("metadata root is not a map");
    llvm::msgpack::MapDocNode &top = root.getMap();
    auto kernels = top.find("amdhsa.kernels");
    if (kernels == top.end())
      return fail("metadata has no amdhsa.kernels");
    if (!kernels->second.isArray())
      return fail("amdhsa.kernels is not an array");
    for (llvm::msgpack::DocNode &k : kernels->second.getArray()) {
      if (!k.isMap())
        return fail("an amdhsa.kernels entry is not a map");
      KernelResources r;
      if (!readKernel(k.getMap(), r))
        return false;
      out.push_back(std::move(r));
    }
    return true;
  }

private:
  std::string &error;
  std::string kernel; ///< the entry being read, for messages

  bool fail(const std::string &msg) {
    error = kernel.empty() ? msg : "kernel '" + kernel + "': " + msg;
    return false;
  }

  /// A non-negative integer field; msgpack may encode it as Int or UInt.
  std::optional<uint64_t> unsignedField(llvm::msgpack::MapDocNode &m,
                                        const char *key, bool required,
                                        bool &ok) {
    auto it = m.find(key);
    if (it == m.end()) {
      if (required)
        ok = fail(std::string("missing ") + key);
      return std::nullopt;
    }
    const llvm::msgpack::DocNode &v = it->second;
    if (v.getKind() == llvm::msgpack::Type::UInt)
      return v.getUInt();
    if (v.getKind() == llvm::msgpack::Type::Int && v.getInt() >= 0)
      return static_cast<uint64_t>(v.getInt());
    ok = fail(std::string(key) + " is not a non-negative integer");
    return std::nullopt;
  }

  /// Like unsignedField, into an int field that keeps its default if absent.
  void intField(llvm::msgpack::MapDocNode &m, const char *key, bool required,
                int &dst, bool &ok) {
    std::optional<uint64_t> v = unsignedField(m, key, required, ok);
    if (!v)
      return;
    if (*v > static_cast<uint64_t>(INT_MAX)) {
      ok = fail(std::string(key) + " is out of range");
      return;
    }
    dst = static_cast<int>(*v);
  }

  std::optional<std::string> stringField(llvm::msgpack::MapDocNode &m,
                                         const char *key) {
    auto it = m.find(key);
    if (it == m.end() || !it->second.isString())
      return std::nullopt;
    return it->second.getString().str();
  }

  bool readKernel(llvm::msgpack::MapDocNode &m, KernelResources &r) {
    kernel.clear();
    // `.symbol` names the kernel descriptor ("foo.kd"); a launch looks the
    // kernel up by `.name`.
    std::optional<std::string> name = stringField(m, ".name");
    std::optional<std::string> symbol = stringField(m, ".symbol");
    if (!name && symbol) {
      name = *symbol;
      if (name->size() > 3 && name->ends_with(".kd"))
        name->resize(name->size() - 3);
    }
    if (!name)
      return fail("an amdhsa.kernels entry has no .name or .symbol string");
    kernel = *name;
    r.symbol = *name;

    bool ok = true;
    intField(m, ".vgpr_count", true, r.vgprs, ok);
    intField(m, ".sgpr_count", true, r.sgprs, ok);
    intField(m, ".vgpr_spill_count", false, r.vgprSpills, ok);
    intField(m, ".sgpr_spill_count", false, r.sgprSpills, ok);
    intField(m, ".wavefront_size", true, r.waveSize, ok);
    intField(m, ".max_flat_workgroup_size", true, r.maxFlatWorkgroupSize, ok);
    if (auto v = unsignedField(m, ".group_segment_fixed_size", true, ok))
      r.sharedBytes = *v;
    if (auto v = unsignedField(m, ".private_segment_fixed_size", true, ok))
      r.scratchBytes = *v;
    return ok;
  }
};

//===----------------------------------------------------------------------===//
// ptxas -v
//===----------------------------------------------------------------------===//

/// Parses a decimal number at the start of \p s, skipping leading blanks;
/// advances \p s past it.
std::optional<uint64_t> leadingNumber(std::string_view &s) {
  while (!s.empty() && s.front() == ' ')
    s.remove_prefix(1);
  uint64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end == s.data())
    return std::nullopt;
  s.remove_prefix(end - s.data());
  return v;
}

/// Splits "a, b, c" into trimmed items.
std::vector<std::string_view> commaItems(std::string_view s) {
  std::vector<std::string_view> items;
  while (!s.empty()) {
    size_t comma = s.find(',');
    std::string_view item = s.substr(0, comma);
    while (!item.empty() && item.front() == ' ')
      item.remove_prefix(1);
    while (!item.empty() && (item.back() == ' ' || item.back() == '\r'))
      item.remove_suffix(1);
    if (!item.empty())
      items.push_back(item);
    if (comma == std::string_view::npos)
      break;
    s.remove_prefix(comma + 1);
  }
  return items;
}

/// The name in single quotes that \p rest starts with, after blanks.
std::optional<std::string> quotedName(std::string_view rest) {
  size_t open = rest.find_first_not_of(' ');
  if (open == std::string_view::npos || rest[open] != '\'')
    return std::nullopt;
  size_t close = rest.find('\'', open + 1);
  if (close == std::string_view::npos || close == open + 1)
    return std::nullopt;
  return std::string(rest.substr(open + 1, close - open - 1));
}

std::string_view trimLeft(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t'))
    s.remove_prefix(1);
  return s;
}

//===----------------------------------------------------------------------===//
// Occupancy helpers
//===----------------------------------------------------------------------===//

int64_t ceilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
int64_t roundUp(int64_t a, int64_t b) { return ceilDiv(a, b) * b; }

const ir::Target &targetNamed(const char *name) {
  const ir::Target *t = ir::lookupTarget(name);
  assert(t && "target missing from runtime/format/Targets.def");
  return *t;
}

} // namespace

bool readAmdgpuCodeObject(const std::string &path,
                          std::vector<KernelResources> &out,
                          std::string &error) {
  auto fail = [&](const std::string &msg) {
    error = path + ": " + msg;
    return false;
  };
  llvm::ErrorOr<std::unique_ptr<llvm::MemoryBuffer>> buf =
      llvm::MemoryBuffer::getFile(path, /*IsText=*/false,
                                  /*RequiresNullTerminator=*/false);
  if (!buf)
    return fail("cannot read: " + buf.getError().message());
  llvm::StringRef bytes = (*buf)->getBuffer();
  if (!bytes.starts_with("\x7f"
                         "ELF"))
    return fail("not an ELF file");

  llvm::Expected<std::unique_ptr<llvm::object::ObjectFile>> obj =
      llvm::object::ObjectFile::createELFObjectFile((*buf)->getMemBufferRef());
  if (!obj)
    return fail("malformed ELF: " + llvm::toString(obj.takeError()));
  // AMDGPU code objects are always ELF64 little-endian.
  const auto *elfObj = llvm::dyn_cast<ELF64LEObjectFile>(obj->get());
  if (!elfObj)
    return fail("not a 64-bit little-endian ELF, so not an AMDGPU code object");
  const ELFFile<ELF64LE> &elf = elfObj->getELFFile();
  if (elf.getHeader().e_machine != llvm::ELF::EM_AMDGPU)
    return fail("not an AMDGPU code object (e_machine " +
                std::to_string(elf.getHeader().e_machine) + ")");

  NoteSearch note = findMetadataNote(elf);
  if (!note.error.empty())
    return fail("malformed ELF notes: " + note.error);
  if (!note.blob)
    return fail("no AMDGPU metadata note (NT_AMDGPU_METADATA)");

  std::string why;
  if (!wellFormedMetadata(*note.blob, why))
    return fail("AMDGPU metadata note is not valid msgpack: " + why);
  llvm::msgpack::Document doc;
  if (!doc.readFromBlob(*note.blob, /*Multi=*/false))
    return fail("AMDGPU metadata note is not valid msgpack");
  std::vector<KernelResources> kernels;
  if (!KernelsReader(why).read(doc.getRoot(), kernels))
    return fail("malformed AMDGPU metadata: " + why);
  out.insert(out.end(), kernels.begin(), kernels.end());
  return true;
}

bool parsePtxasInfo(const std::string &text, std::vector<KernelResources> &out,
                    std::string &error) {
  // Measured with CUDA 13.0's ptxas (V13.0.88), -arch=sm_90 -v:
  //   ptxas info    : Compiling entry function 'heavy' for 'sm_90'
  //   ptxas info    : Function properties for heavy
  //       960 bytes stack frame, 956 bytes spill stores, 1872 bytes spill loads
  //   ptxas info    : Used 24 registers, used 0 barriers, 960 bytes cumulative
  //                   stack size                      (one line in the output)
  //   ptxas info    : Used 10 registers, used 1 barriers, 4096 bytes smem
  // Device functions get a "Function properties for" block of their own,
  // possibly between entries, so properties go to the entry of that name
  // and "Used" to the function whose block came last. Older ptxas versions
  // append "N bytes cmem[K]" items; unknown items are ignored.
  constexpr std::string_view kInfo = "ptxas info    :";
  constexpr std::string_view kEntry = "Compiling entry function";
  constexpr std::string_view kProps = "Function properties for ";
  constexpr std::string_view kUsed = "Used ";

  const int warp = targetNamed("sm_90").waveSize;
  std::vector<KernelResources> kernels;
  // The entry that the latest header line names, or -1 for a device
  // function (ptxas counts its stack in each calling entry's cumulative
  // stack size).
  int current = -1;
  // The entry whose stack-frame line comes next, or -1.
  int pending = -1;
  int lineNo = 0;
  auto fail = [&](const std::string &msg) {
    error = "ptxas output line " + std::to_string(lineNo) + ": " + msg;
    return false;
  };
  auto entryNamed = [&](const std::string &name) {
    for (int i = static_cast<int>(kernels.size()) - 1; i >= 0; --i)
      if (kernels[i].symbol == name)
        return i;
    return -1;
  };

  std::string_view rest = text;
  while (!rest.empty()) {
    size_t nl = rest.find('\n');
    std::string_view line = rest.substr(0, nl);
    rest.remove_prefix(nl == std::string_view::npos ? rest.size() : nl + 1);
    ++lineNo;
    if (!line.empty() && line.back() == '\r')
      line.remove_suffix(1);

    if (line.starts_with(kInfo)) {
      std::string_view body = trimLeft(line.substr(kInfo.size()));
      if (body.starts_with(kEntry)) {
        std::optional<std::string> name =
            quotedName(body.substr(kEntry.size()));
        if (!name)
          return fail("entry function without a quoted name");
        KernelResources r;
        r.symbol = *name;
        r.waveSize = warp;
        kernels.push_back(std::move(r));
        current = static_cast<int>(kernels.size()) - 1;
        pending = -1;
      } else if (body.starts_with(kProps)) {
        std::string name(body.substr(kProps.size()));
        while (!name.empty() && name.back() == ' ')
          name.pop_back();
        current = pending = entryNamed(name);
      } else if (body.starts_with(kUsed)) {
        std::vector<std::string_view> items = commaItems(body);
        std::string_view first = items.front().substr(kUsed.size());
        std::optional<uint64_t> regs = leadingNumber(first);
        if (!regs || trimLeft(first) != "registers" || *regs > INT_MAX)
          return fail("expected 'Used N registers'");
        if (current < 0)
          continue;
        KernelResources &k = kernels[current];
        k.registers = static_cast<int>(*regs);
        for (size_t i = 1; i < items.size(); ++i) {
          std::string_view item = items[i];
          std::optional<uint64_t> n = leadingNumber(item);
          item = trimLeft(item);
          if (!n)
            continue; // "used N barriers" and other non-byte items
          if (item == "bytes smem")
            k.sharedBytes = *n;
          else if (item == "bytes cumulative stack size")
            k.scratchBytes = std::max(k.scratchBytes, *n);
        }
      }
      continue;
    }

    std::string_view body = trimLeft(line);
    if (body.find("bytes stack frame") == std::string_view::npos)
      continue;
    std::vector<std::string_view> items = commaItems(body);
    uint64_t frame = 0, stores = 0, loads = 0;
    bool gotFrame = false, gotStores = false, gotLoads = false;
    for (std::string_view item : items) {
      std::optional<uint64_t> n = leadingNumber(item);
      item = trimLeft(item);
      if (!n)
        return fail("expected 'N bytes ...' items");
      if (item == "bytes stack frame")
        frame = *n, gotFrame = true;
      else if (item == "bytes spill stores")
        stores = *n, gotStores = true;
      else if (item == "bytes spill loads")
        loads = *n, gotLoads = true;
    }
    if (!gotFrame || !gotStores || !gotLoads)
      return fail("expected stack frame, spill stores and spill loads");
    if (pending < 0)
      continue;
    KernelResources &k = kernels[pending];
    k.scratchBytes = std::max(k.scratchBytes, frame);
    k.spillStoreBytes = stores;
    k.spillLoadBytes = loads;
    pending = -1;
  }

  if (kernels.empty()) {
    error = "ptxas output has no 'Compiling entry function' line (was it run "
            "with -v?)";
    return false;
  }
  out.insert(out.end(), kernels.begin(), kernels.end());
  return true;
}

int occupancyGfx1151(const KernelResources &r, int blockThreads) {
  const ir::Target &t = targetNamed("gfx1151");
  // Structure (targets.md 1.1, 1.3): a WGP is 2 CUs of 2 SIMD32 each, so 4
  // SIMDs, sharing 128 KiB of LDS. Targets.def gives per-CU figures:
  // LDS 64 KiB per CU -> 128 KiB per WGP; 98304 VGPRs per CU over 2 SIMDs
  // and 32 lanes -> 1536 VGPRs per lane per SIMD (targets.md 1.4).
  constexpr int kCusPerWgp = 2, kSimdsPerCu = 2;
  constexpr int kSimdsPerWgp = kCusPerWgp * kSimdsPerCu;
  // targets.md 1.4: 16 wave slots per SIMD, 24-VGPR granule (wave32, full
  // VGPR file), at most 256 VGPRs per wave.
  constexpr int kMaxWavesPerSimd = 16, kVgprGranule = 24, kMaxVgprs = 256;
  // The hardware workgroup limit; clang writes it as the default
  // `.max_flat_workgroup_size` (1024, measured with clang-19).
  constexpr int kMaxWorkgroupThreads = 1024;

  int wave = r.waveSize > 0 ? r.waveSize : t.waveSize;
  if (r.vgprs < 0 || wave != 32)
    return -1;
  int maxThreads = r.maxFlatWorkgroupSize > 0 ? r.maxFlatWorkgroupSize
                                              : kMaxWorkgroupThreads;
  if (blockThreads <= 0 || blockThreads > maxThreads ||
      blockThreads > kMaxWorkgroupThreads || r.vgprs > kMaxVgprs ||
      r.sharedBytes > static_cast<uint64_t>(t.sharedPerBlock))
    return 0;

  const int64_t vgprsPerLane = t.regsPerUnit / kSimdsPerCu / wave;
  const int64_t ldsPerWgp = t.sharedPerUnit * kCusPerWgp;
  int64_t perSimd = std::min<int64_t>(
      kMaxWavesPerSimd,
      vgprsPerLane / roundUp(std::max(r.vgprs, 1), kVgprGranule));

  // In WGP mode (clang's default on gfx11: `.workgroup_processor_mode: 1`) a
  // workgroup's waves spread over the WGP's 4 SIMDs and all of them must be
  // resident at once, so count whole workgroups per WGP, then average their
  // waves over the SIMDs (rounded up: the busiest SIMD holds that many).
  // For 1, 2 or 4-wave groups this is the plain per-SIMD VGPR limit; larger
  // groups can strand slots (8 waves at 5 slots/SIMD: 2 groups, 4 waves).
  int64_t wavesPerGroup = ceilDiv(blockThreads, wave);
  int64_t groups = perSimd * kSimdsPerWgp / wavesPerGroup;
  if (r.sharedBytes > 0)
    groups = std::min(groups, ldsPerWgp / static_cast<int64_t>(r.sharedBytes));
  if (groups == 0)
    return 0;
  return static_cast<int>(
      std::min(perSimd, ceilDiv(groups * wavesPerGroup, kSimdsPerWgp)));
}

int occupancySm90(const KernelResources &r, int blockThreads) {
  const ir::Target &t = targetNamed("sm_90");
  // CUDA C++ Programming Guide, technical specifications for compute
  // capability 9.0: 64 resident warps and 32 resident blocks per SM, 255
  // registers per thread, 1024 threads per block, 1 KiB of shared memory
  // reserved by the system per resident block. Registers are allocated per
  // warp in units of 256 with per-thread counts rounded up to 8. Shared
  // memory per SM (228 KiB) and per block (227 KiB) and the 64 Ki registers
  // per SM come from Targets.def (targets.md 3.1 / H200).
  constexpr int kMaxWarpsPerSm = 64, kMaxBlocksPerSm = 32;
  constexpr int kMaxRegsPerThread = 255, kMaxBlockThreads = 1024;
  constexpr int kRegGranuleThread = 8, kRegUnitWarp = 256;
  constexpr int64_t kSharedReservedPerBlock = 1024;

  if (r.registers < 0)
    return -1;
  int maxThreads =
      r.maxFlatWorkgroupSize > 0 ? r.maxFlatWorkgroupSize : kMaxBlockThreads;
  if (blockThreads <= 0 || blockThreads > maxThreads ||
      blockThreads > kMaxBlockThreads || r.registers > kMaxRegsPerThread ||
      r.sharedBytes > static_cast<uint64_t>(t.sharedPerBlock))
    return 0;

  int64_t warpsPerBlock = ceilDiv(blockThreads, t.waveSize);
  int64_t regsPerWarp =
      roundUp(roundUp(std::max(r.registers, 1), kRegGranuleThread) * t.waveSize,
              kRegUnitWarp);
  int64_t blocks = kMaxBlocksPerSm;
  blocks = std::min(blocks, kMaxWarpsPerSm / warpsPerBlock);
  blocks = std::min(blocks, t.regsPerUnit / regsPerWarp / warpsPerBlock);
  blocks =
      std::min(blocks, t.sharedPerUnit / (static_cast<int64_t>(r.sharedBytes) +
                                          kSharedReservedPerBlock));
  return static_cast<int>(blocks * warpsPerBlock);
}

std::string launchProblem(const KernelResources &r, int blockThreads,
                          const std::string &target) {
  const bool gfx = target == "gfx1151";
  int occupancy =
      gfx ? occupancyGfx1151(r, blockThreads) : occupancySm90(r, blockThreads);
  if (occupancy != 0)
    return "";
  const ir::Target &t = targetNamed(gfx ? "gfx1151" : "sm_90");
  if (gfx)
    return fmt::format(
        "a workgroup of {} threads using {} VGPRs per lane and {} bytes of "
        "LDS does not fit one WGP of gfx1151 (at most 1024 threads, 256 "
        "VGPRs per lane, {} bytes of LDS per workgroup)",
        blockThreads, r.vgprs, r.sharedBytes, t.sharedPerBlock);
  return fmt::format(
      "a block of {} threads using {} registers per thread and {} bytes of "
      "shared memory does not fit one SM of sm_90 (at most 1024 threads, 255 "
      "registers per thread, {} registers per SM, {} bytes of shared memory "
      "per block)",
      blockThreads, r.registers, r.sharedBytes, t.regsPerUnit,
      t.sharedPerBlock);
}

} // namespace strata::codegen
