//===- StrataGguf.cpp - inspect and normalise GGUF files ------------------===//
//
//   strata-gguf inspect [--full] FILE   metadata and tensor table
//   strata-gguf rewrite IN OUT          read IN, write it back canonically
//   strata-gguf dequant-all IN OUT      IN with every tensor as f32
//   strata-gguf types                   the ggml types strata knows
//   strata-gguf dequant FILE TENSOR -o OUT.f32
//                                       a tensor as raw little-endian f32
//   strata-gguf synth --arch A --preset P --seed N [--types S]
//                     [--shapes-only] -o OUT
//                                       a small random model (Synth.cpp)
//   strata-gguf tokenize FILE (--text T | --text-file F) [--no-special]
//                                       token ids of a text
//   strata-gguf detokenize FILE --ids 1,2,3 [--no-special]
//                                       the text of token ids
//
// `rewrite` re-emits a file with strata's writer: metadata in file order,
// tensors in file order at consecutive aligned offsets. A file written by
// gguf-py or llama.cpp comes out byte-identical, so the command doubles as a
// check of the reader and the writer against those implementations.
//
//===----------------------------------------------------------------------===//
#include "runtime/format/FileUtil.h"
#include "runtime/format/Gguf.h"
#include "runtime/format/Quants.h"
#ifdef STRATA_HAVE_TOKENIZER
#include "runtime/tokenizer/Tokenizer.h"
#endif
#include "tools/ToolMain.h"
#include "tools/strata-gguf/Synth.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

using namespace strata::format;

namespace {

constexpr const char *kUsage =
    "usage: strata-gguf inspect [--full] FILE\n"
    "       strata-gguf rewrite IN OUT\n"
    "       strata-gguf dequant-all IN OUT\n"
    "       strata-gguf types\n"
    "       strata-gguf dequant FILE TENSOR -o OUT.f32\n"
    "       strata-gguf synth --arch ARCH --preset PRESET --seed N\n"
    "                         [--types SPEC] [--shapes-only] -o FILE\n"
    "       strata-gguf tokenize FILE (--text TEXT | --text-file F)\n"
    "                            [--no-special]\n"
    "       strata-gguf detokenize FILE --ids ID,ID,... [--no-special]\n"
    "\n"
    "inspect  print the header, every metadata key (type and value; arrays\n"
    "         are cut after 8 elements unless --full) and the tensor table\n"
    "         (name, ggml type, dims in ggml order, offset in the data\n"
    "         section, bytes)\n"
    "rewrite  read IN and write it to OUT with strata's writer: same\n"
    "         metadata and tensors, canonical layout\n"
    "dequant-all\n"
    "         write IN to OUT with every tensor dequantised to F32 (same\n"
    "         names, dims and order; the metadata copied unchanged): the\n"
    "         reference a quantised file's plan is compared against\n"
    "types    list the ggml tensor types strata knows\n"
    "dequant  write TENSOR of FILE dequantised to raw little-endian float32\n"
    "         in ggml element order (ne[0] fastest)\n"
    "synth    write a small random qwen3/qwen3moe/qwen3next/qwen4exp model\n"
    "         (the first three load in llama.cpp), or a real-size qwen4exp\n"
    "         as shapes only (details: strata-gguf synth --help)\n"
    "tokenize print the token ids of TEXT (or of file F, '-' = standard\n"
    "         input) by FILE's tokenizer, comma-separated on one line;\n"
    "         special tokens written in the text are recognised unless\n"
    "         --no-special (BOS/EOS are added where the vocabulary asks)\n"
    "detokenize\n"
    "         print the text of the token ids, exactly (no newline added);\n"
    "         --no-special leaves out control tokens\n"
    "\n"
    "Exit status: 0 on success, 1 on an error (nothing is written then), 2\n"
    "on a command-line mistake.\n";

int usage() {
  std::fputs(kUsage, stderr);
  return 2;
}

int error(const std::string &message) {
  fmt::print(stderr, "strata-gguf: error: {}\n", message);
  return 1;
}

/// A command line that does not parse: the line saying what is wrong, then
/// the usage, exit status 2.
int usageError(const std::string &message) {
  fmt::print(stderr, "strata-gguf: error: {}\n", message);
  return usage();
}

/// Checks that \p cmd got exactly the operands \p names (args[1..]) and
/// says which are missing or extra; returns 0 if they match.
int checkOperands(const std::vector<std::string> &args,
                  const std::vector<const char *> &names) {
  const std::string &cmd = args[0];
  size_t given = args.size() - 1;
  if (given < names.size()) {
    std::vector<std::string> missing(names.begin() + given, names.end());
    return usageError(
        fmt::format("{}: missing {}", cmd, fmt::join(missing, " and ")));
  }
  if (given > names.size())
    return usageError(fmt::format("{}: unexpected argument '{}'", cmd,
                                  args[names.size() + 1]));
  return 0;
}

/// "u32", or "array<u32>" for arrays (nested arrays show as array<array>,
/// since each inner array carries its own element type).
std::string typeName(const MetaValue &v) {
  if (v.type != GgufValueType::Array)
    return valueTypeName(v.type);
  return fmt::format("array<{}>", valueTypeName(v.elemType));
}

std::string dimsString(const std::vector<uint64_t> &dims) {
  return fmt::format("[{}]", fmt::join(dims, ", "));
}

int inspect(const std::string &path, bool full) {
  std::string err;
  // Only infos are printed, so shapes-only files can be inspected.
  std::unique_ptr<GgufFile> file =
      GgufFile::open(path, err, GgufContents::Shapes);
  if (!file)
    return error(err);
  const ModelInfo &info = file->info();
  fmt::print("file: {}\n", path);
  fmt::print("version: {}\n", file->version());
  fmt::print("alignment: {}\n", file->alignment());
  fmt::print("data offset: {}\n", file->dataOffset());

  size_t maxElems = full ? std::numeric_limits<size_t>::max() : 8;
  size_t keyWidth = 0, typeWidth = 0;
  for (const auto &[key, value] : info.metadata()) {
    keyWidth = std::max(keyWidth, std::min<size_t>(key.size(), 48));
    typeWidth = std::max(typeWidth, typeName(value).size());
  }
  fmt::print("metadata ({}):\n", info.metadata().size());
  for (const auto &[key, value] : info.metadata())
    fmt::print("  {:<{}}  {:<{}}  {}\n", key, keyWidth, typeName(value),
               typeWidth, value.toString(maxElems));

  const std::vector<TensorInfo> &tensors = info.tensors();
  fmt::print("tensors ({}):\n", tensors.size());
  if (tensors.empty())
    return 0;
  std::vector<std::vector<std::string>> rows;
  rows.push_back({"name", "type", "dims", "offset", "bytes"});
  for (const TensorInfo &t : tensors)
    rows.push_back({t.name, ggmlTypeInfo(t.type).name, dimsString(t.dims),
                    fmt::format("{}", t.offset),
                    fmt::format("{}", t.numBytes())});
  std::vector<size_t> widths(rows[0].size(), 0);
  for (const auto &row : rows)
    for (size_t c = 0; c < row.size(); ++c)
      widths[c] = std::max(widths[c], row[c].size());
  for (const auto &row : rows) {
    std::string line = " ";
    for (size_t c = 0; c < row.size(); ++c)
      line += c + 1 == row.size() ? fmt::format(" {}", row[c])
                                  : fmt::format(" {:<{}} ", row[c], widths[c]);
    fmt::print("{}\n", line);
  }
  return 0;
}

/// Reads \p in and writes \p out with the same metadata, each tensor passed
/// through \p convert (which fills the output tensor from the input's bytes
/// or returns an error message).
int rewriteWith(
    const std::string &in, const std::string &out,
    const std::function<std::string(const TensorInfo &, const uint8_t *,
                                    GgufTensorData &)> &convert) {
  std::string err;
  std::unique_ptr<GgufFile> file = GgufFile::open(in, err);
  if (!file)
    return error(err);
  std::vector<GgufTensorData> tensors;
  tensors.reserve(file->info().tensors().size());
  for (const TensorInfo &t : file->info().tensors()) {
    GgufTensorData td;
    std::string why = convert(t, file->tensorData(t), td);
    if (!why.empty())
      return error(fmt::format("{}: {}", in, why));
    tensors.push_back(std::move(td));
  }
  if (!writeGguf(out, file->info(), tensors, err))
    return error(err);
  return 0;
}

int rewrite(const std::string &in, const std::string &out) {
  return rewriteWith(
      in, out,
      [](const TensorInfo &t, const uint8_t *data, GgufTensorData &td) {
        td.info = t;
        td.bytes.assign(data, data + t.numBytes());
        return std::string();
      });
}

int dequantAll(const std::string &in, const std::string &out) {
  return rewriteWith(
      in, out, [](const TensorInfo &t, const uint8_t *src, GgufTensorData &td) {
        if (!canDequantize(t.type))
          return fmt::format("tensor '{}' is {}, which strata cannot "
                             "dequantise",
                             t.name, ggmlTypeInfo(t.type).name);
        td.info = t;
        td.info.type = GgmlType::F32;
        td.bytes.resize(td.info.numBytes());
        const int64_t rowLen = static_cast<int64_t>(t.dims[0]);
        const int64_t rows = static_cast<int64_t>(t.numElements()) / rowLen;
        const int64_t rowBytes = rowSizeInBytes(t.type, rowLen);
        auto *dst = reinterpret_cast<float *>(td.bytes.data());
        for (int64_t r = 0; r < rows; ++r)
          if (!dequantizeRow(t.type, src + r * rowBytes, dst + r * rowLen,
                             rowLen))
            return fmt::format("cannot dequantise tensor '{}'", t.name);
        return std::string();
      });
}

int types() {
  fmt::print("{:<4} {:<8} {:<8} {:>5} {:>5}  {}\n", "id", "name", "ir", "block",
             "bytes", "loadable");
  for (uint32_t id = 0; id < 256; ++id) {
    std::optional<GgmlTypeInfo> t = ggmlTypeFromId(id);
    if (!t)
      continue;
    fmt::print("{:<4} {:<8} {:<8} {:>5} {:>5}  {}\n", id, t->name, t->irName,
               t->blockSize, t->typeSize, t->loadable ? "yes" : "no");
  }
  return 0;
}

int dequant(const std::string &path, const std::string &name,
            const std::string &out) {
  std::string err;
  std::unique_ptr<GgufFile> file = GgufFile::open(path, err);
  if (!file)
    return error(err);
  const TensorInfo *t = file->info().findTensor(name);
  if (!t)
    return error(fmt::format("{}: no tensor named '{}'", path, name));
  if (!canDequantize(t->type))
    return error(fmt::format("{}: tensor '{}' is {}, which strata cannot "
                             "dequantise",
                             path, name, ggmlTypeInfo(t->type).name));
  // Rows are converted one at a time and streamed to a temporary file that
  // is renamed at the end, so a failure never leaves a partial OUT.
  std::string tmp = out + ".tmp";
  FILE *f = std::fopen(tmp.c_str(), "wb");
  if (!f)
    return error(
        fmt::format("{}: cannot create: {}", out, std::strerror(errno)));
  const int64_t rowLen = static_cast<int64_t>(t->dims[0]);
  const int64_t rows = static_cast<int64_t>(t->numElements()) / rowLen;
  const int64_t rowBytes = rowSizeInBytes(t->type, rowLen);
  std::vector<float> row(static_cast<size_t>(rowLen));
  const uint8_t *src = file->tensorData(*t);
  bool ok = true;
  for (int64_t r = 0; r < rows && ok; ++r) {
    ok = dequantizeRow(t->type, src + r * rowBytes, row.data(), rowLen) &&
         std::fwrite(row.data(), sizeof(float), row.size(), f) == row.size();
  }
  ok = std::fclose(f) == 0 && ok;
  if (!ok || std::rename(tmp.c_str(), out.c_str()) != 0) {
    std::remove(tmp.c_str());
    return error(
        fmt::format("{}: cannot write: {}", out, std::strerror(errno)));
  }
  return 0;
}

#ifdef STRATA_HAVE_TOKENIZER
/// Loads the tokenizer of the GGUF \p path (tensor data is not needed).
std::unique_ptr<strata::tokenizer::Tokenizer>
loadTokenizer(const std::string &path, std::string &err) {
  std::unique_ptr<GgufFile> file =
      GgufFile::open(path, err, GgufContents::Shapes);
  if (!file)
    return nullptr;
  return strata::tokenizer::Tokenizer::load(file->info(), err);
}

int tokenize(const std::vector<std::string> &args) {
  std::string path, text, textFile;
  bool haveText = false, haveTextFile = false, noSpecial = false;
  for (size_t i = 1; i < args.size(); ++i) {
    const std::string &a = args[i];
    if (a == "--text" || a == "--text-file") {
      if (i + 1 >= args.size())
        return usageError(fmt::format("tokenize: {} needs a value", a));
      if (haveText || haveTextFile)
        return usageError("tokenize: give exactly one of --text and "
                          "--text-file");
      (a == "--text" ? haveText : haveTextFile) = true;
      (a == "--text" ? text : textFile) = args[++i];
    } else if (a == "--no-special") {
      noSpecial = true;
    } else if (a.starts_with("-") && a != "-") {
      return usageError(fmt::format("tokenize: unknown option '{}'", a));
    } else if (path.empty()) {
      path = a;
    } else {
      return usageError(fmt::format("tokenize: unexpected argument '{}'", a));
    }
  }
  if (path.empty())
    return usageError("tokenize: missing FILE");
  if (!haveText && !haveTextFile)
    return usageError("tokenize: give exactly one of --text and --text-file");
  std::string err;
  std::string where = "--text";
  if (haveTextFile) {
    where = textFile;
    // A text larger than this is not a prompt.
    constexpr size_t kMaxText = size_t(1) << 30;
    if (!readWholeFile(textFile, kMaxText, text, err))
      return error(err);
  }
  std::unique_ptr<strata::tokenizer::Tokenizer> tok = loadTokenizer(path, err);
  if (!tok)
    return error(err);
  strata::tokenizer::EncodeOptions options;
  options.parseSpecial = !noSpecial;
  std::vector<strata::tokenizer::TokenId> ids;
  if (!tok->encode(text, options, ids, err))
    return error(tok->hasVocab() ? fmt::format("{}: {}", where, err) : err);
  fmt::print("{}\n", fmt::join(ids, ","));
  return 0;
}

int detokenize(const std::vector<std::string> &args) {
  std::string path, idList;
  bool haveIds = false, noSpecial = false;
  for (size_t i = 1; i < args.size(); ++i) {
    const std::string &a = args[i];
    if (a == "--ids") {
      if (i + 1 >= args.size())
        return usageError("detokenize: --ids needs a value");
      if (haveIds)
        return usageError("detokenize: --ids given twice");
      haveIds = true;
      idList = args[++i];
    } else if (a == "--no-special") {
      noSpecial = true;
    } else if (a.starts_with("-")) {
      return usageError(fmt::format("detokenize: unknown option '{}'", a));
    } else if (path.empty()) {
      path = a;
    } else {
      return usageError(fmt::format("detokenize: unexpected argument '{}'", a));
    }
  }
  if (path.empty())
    return usageError("detokenize: missing FILE");
  if (!haveIds)
    return usageError("detokenize: missing --ids ID,ID,...");
  // Ids: decimal, comma-separated; "" is no ids at all.
  std::vector<strata::tokenizer::TokenId> ids;
  for (size_t pos = 0; !idList.empty() && pos <= idList.size();) {
    size_t comma = std::min(idList.find(',', pos), idList.size());
    std::string item = idList.substr(pos, comma - pos);
    int64_t value = -1;
    bool ok = !item.empty() && item.size() <= 10 &&
              std::all_of(item.begin(), item.end(),
                          [](char c) { return c >= '0' && c <= '9'; });
    if (ok)
      value = std::stoll(item);
    if (!ok || value > std::numeric_limits<int32_t>::max())
      return usageError(fmt::format("detokenize: --ids: '{}' (item {}) is not "
                                    "a token id",
                                    item, ids.size() + 1));
    ids.push_back(static_cast<strata::tokenizer::TokenId>(value));
    pos = comma + 1;
  }
  std::string err;
  std::unique_ptr<strata::tokenizer::Tokenizer> tok = loadTokenizer(path, err);
  if (!tok)
    return error(err);
  std::string text;
  if (!tok->decode(ids, !noSpecial, text, err))
    return error(tok->hasVocab() ? fmt::format("--ids: {}", err) : err);
  std::fwrite(text.data(), 1, text.size(), stdout);
  return 0;
}

#else
// A runtime-only build without PCRE2 (runtime/tokenizer/CMakeLists.txt).
int tokenize(const std::vector<std::string> &) {
  return error("this strata-gguf was built without the tokenizer (PCRE2 "
               "was missing)");
}
int detokenize(const std::vector<std::string> &args) { return tokenize(args); }
#endif

} // namespace

static int ggufMain(int argc, char **argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "-h" || args[0] == "--help") {
    std::fputs(kUsage, args.empty() ? stderr : stdout);
    return args.empty() ? 2 : 0;
  }
  const std::string &cmd = args[0];
  if (cmd == "inspect") {
    std::vector<std::string> rest = args;
    bool full = rest.size() > 1 && rest[1] == "--full";
    if (full)
      rest.erase(rest.begin() + 1);
    if (rest.size() > 1 && rest[1].starts_with("-"))
      return usageError(fmt::format("inspect: unknown option '{}'", rest[1]));
    if (int rc = checkOperands(rest, {"FILE"}))
      return rc;
    return inspect(rest[1], full);
  }
  if (cmd == "rewrite") {
    if (int rc = checkOperands(args, {"IN", "OUT"}))
      return rc;
    return rewrite(args[1], args[2]);
  }
  if (cmd == "dequant-all") {
    if (int rc = checkOperands(args, {"IN", "OUT"}))
      return rc;
    return dequantAll(args[1], args[2]);
  }
  if (cmd == "types") {
    if (int rc = checkOperands(args, {}))
      return rc;
    return types();
  }
  if (cmd == "dequant") {
    if (args.size() > 3 && args[3] != "-o")
      return usageError(fmt::format("dequant: unexpected argument '{}' "
                                    "(expected -o OUT.f32)",
                                    args[3]));
    if (args.size() == 4)
      return usageError("dequant: -o needs a file name");
    if (args.size() <= 3) {
      if (int rc = checkOperands(args, {"FILE", "TENSOR"}))
        return rc;
      return usageError("dequant: missing -o OUT.f32");
    }
    if (args.size() > 5)
      return usageError(
          fmt::format("dequant: unexpected argument '{}'", args[5]));
    return dequant(args[1], args[2], args[4]);
  }
  if (cmd == "synth")
    return strata::tools::synthMain({args.begin() + 1, args.end()});
  if (cmd == "tokenize")
    return tokenize(args);
  if (cmd == "detokenize")
    return detokenize(args);
  return usageError(fmt::format("unknown command '{}'", cmd));
}

int main(int argc, char **argv) {
  return strata::tools::runToolMain("strata-gguf",
                                    [&] { return ggufMain(argc, argv); });
}
