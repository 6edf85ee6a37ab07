//===- Gguf.h - GGUF v3 reader and writer -----------------------*- C++ -*-===//
//
// Reader: memory-maps a GGUF file and validates every field; any defect is a
// one-line error naming the byte offset and the field. Writer: emits GGUF v3.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/format/ModelInfo.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <sys/stat.h>

namespace strata::format {

/// The metadata key (bool) that marks a shapes-only GGUF: tensor infos with
/// offsets as if the data followed, but no data section. strata-compile
/// plans from such a file (it needs shapes and types only); nothing can run
/// it.
inline constexpr const char *kShapesOnlyKey = "strata.shapes_only";

/// What a reader needs from a GGUF beyond its header.
enum class GgufContents {
  /// Every tensor's data lies inside the file (to read or run weights). A
  /// shapes-only file is refused: "this GGUF holds shapes only (no tensor
  /// data)".
  Data,
  /// Tensor infos only (to plan): a file marked shapes-only is accepted
  /// without a data section; any other file is validated as for Data.
  Shapes,
};

/// Why a file with status \p st cannot be a GGUF file: "not a GGUF file (it
/// is a directory)", "not a regular file" (a device, FIFO or socket: one
/// such as /dev/zero never ends) or "not a GGUF file (the file is empty)";
/// "" if it is a nonempty regular file.
std::string describeNonGguf(const struct stat &st);

/// An opened, validated GGUF file. Tensor data stays memory-mapped.
///
/// Only little-endian GGUF version 3 is accepted. Every count, length, offset
/// and size is checked against the bytes that remain before it is used (sums
/// and products through CheckedMath.h), so a malformed or hostile file gives
/// an error, never a crash, an out-of-bounds read or an unbounded allocation.
/// Everything ggml's reader refuses is refused too: empty or duplicate keys,
/// strings over 1 GiB, tensor names over 63 bytes (GGML_MAX_NAME), duplicate
/// tensor names, and tensor data not laid out as ggml requires (each offset
/// the sum of the sizes before it, each padded to the alignment: file order,
/// aligned, no gaps, no overlaps). Nested metadata arrays, which ggml
/// refuses, are accepted (see kMaxArrayDepth). Limits beyond the format's own:
/// metadata arrays nest at most kMaxArrayDepth deep and hold at most
/// kMaxMetaElements elements in total (each costs about 100 bytes of memory, so
/// metadata never takes more than about 1 GiB). A mapped file must not be
/// truncated while it is open (reading its data would then raise SIGBUS).
class GgufFile {
public:
  /// Deepest nesting of metadata arrays accepted (an array of arrays is 2).
  static constexpr int kMaxArrayDepth = 8;
  /// Most metadata array elements accepted in one file, over all arrays; a
  /// large tokenizer has about 1.5 million.
  static constexpr uint64_t kMaxMetaElements = uint64_t(1) << 23;

  /// Opens and validates \p path. On failure returns nullptr and sets
  /// \p error to "<path>: offset N: <field>: <what is wrong>", to
  /// "<path>: <describeNonGguf()>" for a directory, device or empty file, or
  /// to "<path>: cannot open: <reason>" (likewise stat, map) if it cannot be
  /// read.
  /// With GgufContents::Shapes a shapes-only file is accepted (see
  /// kShapesOnlyKey); tensorData() must not be called on it.
  static std::unique_ptr<GgufFile>
  open(const std::string &path, std::string &error,
       GgufContents contents = GgufContents::Data);
  /// Validates an in-memory image (used by the fuzzer and tests); the bytes
  /// must outlive the returned object.
  static std::unique_ptr<GgufFile>
  fromBytes(const uint8_t *data, size_t size, const std::string &name,
            std::string &error, GgufContents contents = GgufContents::Data);
  ~GgufFile();
  GgufFile(const GgufFile &) = delete;
  GgufFile &operator=(const GgufFile &) = delete;

  const ModelInfo &info() const { return info_; }
  /// Takes ownership of the ModelInfo (the file stays usable for data).
  ModelInfo &mutableInfo() { return info_; }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  /// Absolute offset of the tensor data section.
  uint64_t dataOffset() const { return dataOffset_; }
  /// True if the file is marked shapes-only (opened with
  /// GgufContents::Shapes): it has no tensor data.
  bool shapesOnly() const { return shapesOnly_; }
  /// Pointer to the bytes of tensor \p t, one of info().tensors() (validated
  /// to lie inside the file).
  const uint8_t *tensorData(const TensorInfo &t) const {
    return base_ + dataOffset_ + t.offset;
  }

private:
  GgufFile() = default;
  /// Validates the image at base_/size_ and fills the fields below; on
  /// failure sets \p error to "<name>: offset N: <field>: <what>".
  bool parse(const std::string &name, std::string &error,
             GgufContents contents);

  ModelInfo info_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t dataOffset_ = 0;
  bool shapesOnly_ = false;
  const uint8_t *base_ = nullptr;
  size_t size_ = 0;
  void *mapping_ = nullptr; ///< mmap'ed region to unmap, or null
};

/// One tensor to write: info (offset is assigned by the writer) and bytes.
struct GgufTensorData {
  TensorInfo info;
  std::vector<uint8_t> bytes; ///< exactly info.numBytes() bytes
};

/// Writes a GGUF v3 file with \p info's metadata (in order) and \p tensors
/// (in order, each padded to the alignment). Writes to a temporary file and
/// renames it, so a failure never leaves a partial file. Returns false and
/// sets \p error on failure.
///
/// The alignment is `general.alignment` if \p info has it (it must be a u32
/// power of two, at least 8), else 32; the key is written only if present.
/// Tensor infos come from \p tensors alone (info.tensors() is not consulted)
/// and offsets are assigned in order. Everything the reader would reject is
/// refused: values that do not fit their type, arrays whose elements do not
/// match the element type or nest too deep, bad shapes, wrong byte counts,
/// duplicate tensor names.
bool writeGguf(const std::string &path, const ModelInfo &info,
               const std::vector<GgufTensorData> &tensors, std::string &error);

/// Writes a shapes-only GGUF: \p info's metadata, which must hold
/// kShapesOnlyKey = true, and the tensor infos of \p tensors with the offsets
/// writeGguf would assign, but no data section (the file ends after the
/// aligned header). Refuses what writeGguf refuses, bytes aside.
bool writeGgufShapesOnly(const std::string &path, const ModelInfo &info,
                         const std::vector<TensorInfo> &tensors,
                         std::string &error);

} // namespace strata::format
