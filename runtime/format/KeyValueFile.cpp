//===- KeyValueFile.cpp - model metadata as text --------------------------===//
#include "runtime/format/KeyValueFile.h"
#include "runtime/format/Gguf.h"

#include <fmt/format.h>

#include <cctype>
#include <cfloat>
#include <charconv>
#include <cmath>

namespace strata::format {

namespace {

/// Recursive-descent reader over one line at a time.
class KvParser {
public:
  KvParser(std::string_view text, const std::string &name)
      : text_(text), name_(name) {}

  std::unique_ptr<ModelInfo> run(std::string &error) {
    auto info = std::make_unique<ModelInfo>();
    info->source = name_;
    size_t lineStart = 0;
    while (lineStart <= text_.size()) {
      size_t end = text_.find('\n', lineStart);
      if (end == std::string_view::npos)
        end = text_.size();
      line_ = text_.substr(lineStart, end - lineStart);
      ++lineNo_;
      pos_ = 0;
      if (!parseLine(*info)) {
        error = fmt::format("{}:{}:{}: {}", name_, lineNo_, pos_ + 1, msg_);
        return nullptr;
      }
      lineStart = end + 1;
    }
    return info;
  }

private:
  // The GGUF reader's limit, so that every parsed file can be written.
  static constexpr int kMaxDepth = GgufFile::kMaxArrayDepth;

  static bool isSigned(const MetaValue &v) {
    return v.type == GgufValueType::Int8 || v.type == GgufValueType::Int16 ||
           v.type == GgufValueType::Int32 || v.type == GgufValueType::Int64;
  }

  bool fail(std::string msg) {
    msg_ = std::move(msg);
    return false;
  }
  void skipSpace() {
    while (pos_ < line_.size() &&
           (line_[pos_] == ' ' || line_[pos_] == '\t' || line_[pos_] == '\r'))
      ++pos_;
  }
  bool atEnd() {
    skipSpace();
    return pos_ >= line_.size() || line_[pos_] == '#';
  }
  std::string_view word() {
    skipSpace();
    size_t b = pos_;
    while (pos_ < line_.size() &&
           (std::isalnum(static_cast<unsigned char>(line_[pos_])) ||
            line_[pos_] == '_' || line_[pos_] == '.' || line_[pos_] == '-'))
      ++pos_;
    return line_.substr(b, pos_ - b);
  }
  /// A bare value: like word() but also taking '+', which exponents need
  /// ("1e+16" is how floats are printed).
  std::string_view valueWord() {
    skipSpace();
    size_t b = pos_;
    while (pos_ < line_.size() &&
           (std::isalnum(static_cast<unsigned char>(line_[pos_])) ||
            line_[pos_] == '_' || line_[pos_] == '.' || line_[pos_] == '-' ||
            line_[pos_] == '+'))
      ++pos_;
    return line_.substr(b, pos_ - b);
  }

  bool parseLine(ModelInfo &info) {
    if (atEnd())
      return true;
    size_t keyPos = pos_;
    std::string_view key = word();
    if (key.empty())
      return fail(fmt::format("expected a key, found '{}'", line_[pos_]));
    if (key == "tensor")
      return parseTensor(info);
    skipSpace();
    if (pos_ >= line_.size() || line_[pos_] != '=')
      return fail(fmt::format("expected '=' after key '{}'", key));
    ++pos_;
    MetaValue v;
    if (!parseValue(v, 0))
      return false;
    if (!atEnd())
      return fail("unexpected text after the value");
    if (!info.addMeta(std::string(key), std::move(v))) {
      pos_ = keyPos;
      return fail(fmt::format("duplicate key '{}'", key));
    }
    return true;
  }

  bool parseValue(MetaValue &v, int depth) {
    skipSpace();
    if (pos_ >= line_.size())
      return fail("expected a value");
    char c = line_[pos_];
    if (c == '"')
      return parseString(v);
    if (c == '[') {
      if (depth >= kMaxDepth)
        return fail("arrays nested too deeply");
      ++pos_;
      std::vector<MetaValue> elems;
      skipSpace();
      if (pos_ < line_.size() && line_[pos_] == ']') {
        ++pos_;
        v = MetaValue::makeArray(GgufValueType::UInt32, {});
        return true;
      }
      while (true) {
        MetaValue e;
        if (!parseValue(e, depth + 1))
          return false;
        elems.push_back(std::move(e));
        skipSpace();
        if (pos_ < line_.size() && line_[pos_] == ',') {
          ++pos_;
          continue;
        }
        if (pos_ < line_.size() && line_[pos_] == ']') {
          ++pos_;
          break;
        }
        return fail("expected ',' or ']' in array");
      }
      // Arrays are homogeneous in GGUF: promote ints to float if mixed.
      GgufValueType et = elems[0].type;
      bool anyFloat = false, allNum = true;
      for (const MetaValue &e : elems) {
        anyFloat |= e.isFloat();
        allNum &= e.isFloat() || e.isInteger();
      }
      if (allNum && anyFloat) {
        for (MetaValue &e : elems)
          e = MetaValue::makeFloat(*e.asDouble());
        et = GgufValueType::Float32;
      } else if (allNum) {
        // parseNumber makes negatives signed and the rest unsigned; pick the
        // narrowest type that holds every element and convert them all, so
        // elements always match the array's element type.
        bool anyNeg = false, needs64 = false;
        for (const MetaValue &e : elems)
          anyNeg |= isSigned(e);
        for (const MetaValue &e : elems)
          needs64 |=
              isSigned(e) ? e.i<INT32_MIN : e.u>(anyNeg ? uint64_t(INT32_MAX)
                                                        : uint64_t(UINT32_MAX));
        if (anyNeg)
          et = needs64 ? GgufValueType::Int64 : GgufValueType::Int32;
        else
          et = needs64 ? GgufValueType::UInt64 : GgufValueType::UInt32;
        for (MetaValue &e : elems) {
          std::optional<int64_t> x = e.asInt();
          if (anyNeg && !x)
            return fail("array mixes negative integers with integers above "
                        "INT64_MAX");
          e = anyNeg ? MetaValue::makeInt(*x, et)
                     : MetaValue::makeUInt(e.u, et);
        }
      } else {
        for (const MetaValue &e : elems)
          if (e.type != et)
            return fail("array elements must all have the same type");
      }
      v = MetaValue::makeArray(et, std::move(elems));
      return true;
    }
    std::string_view w = valueWord();
    if (w == "true" || w == "false") {
      v = MetaValue::makeBool(w == "true");
      return true;
    }
    if (w.empty())
      return fail(fmt::format("unexpected character '{}' in value", c));
    if (std::isalpha(static_cast<unsigned char>(w[0])) || w[0] == '_')
      return fail(fmt::format("'{}' is not a value (strings are quoted, bools "
                              "are true or false)",
                              w));
    return parseNumber(w, v);
  }

  bool parseString(MetaValue &v) {
    ++pos_;
    std::string s;
    while (pos_ < line_.size() && line_[pos_] != '"') {
      if (line_[pos_] == '\\' && pos_ + 1 < line_.size())
        ++pos_;
      s += line_[pos_++];
    }
    if (pos_ >= line_.size())
      return fail("unterminated string");
    ++pos_;
    v = MetaValue::makeString(std::move(s));
    return true;
  }

  bool parseNumber(std::string_view w, MetaValue &v) {
    const char *first = w.data(), *last = w.data() + w.size();
    bool isFloat = w.find_first_of(".eE") != std::string_view::npos &&
                   w.find("0x") == std::string_view::npos;
    if (isFloat) {
      // from_chars, unlike strtod, ignores the C locale's decimal point.
      double d = 0;
      auto [p, ec] = std::from_chars(first, last, d);
      if (ec == std::errc::result_out_of_range)
        return fail(fmt::format("'{}' is out of range for f32", w));
      if (ec != std::errc() || p != last)
        return fail(fmt::format("'{}' is not a number", w));
      // Floats become f32; one beyond its range would silently be inf.
      if (std::fabs(d) > FLT_MAX)
        return fail(fmt::format("'{}' is out of range for f32", w));
      v = MetaValue::makeFloat(d);
      return true;
    }
    // Non-negative integers are unsigned, so all of u64 can be written.
    if (!w.empty() && w[0] == '-') {
      int64_t x = 0;
      auto [p, ec] = std::from_chars(first, last, x);
      if (ec != std::errc() || p != last)
        return fail(fmt::format("'{}' is not an integer in range", w));
      v = x < INT32_MIN ? MetaValue::makeInt(x, GgufValueType::Int64)
                        : MetaValue::makeInt(x, GgufValueType::Int32);
      return true;
    }
    uint64_t x = 0;
    auto [p, ec] = std::from_chars(first, last, x);
    if (ec != std::errc() || p != last)
      return fail(fmt::format("'{}' is not an integer in range", w));
    v = x > UINT32_MAX ? MetaValue::makeUInt(x, GgufValueType::UInt64)
                       : MetaValue::makeUInt(x, GgufValueType::UInt32);
    return true;
  }

  bool parseTensor(ModelInfo &info) {
    size_t namePos = (skipSpace(), pos_);
    std::string_view name = word();
    if (name.empty())
      return fail("expected a tensor name after 'tensor'");
    // ggml's limit (GGML_MAX_NAME with its NUL), as the GGUF reader's.
    if (name.size() > 63) {
      pos_ = namePos;
      return fail(fmt::format("tensor name of {} bytes is longer than ggml's "
                              "limit of 63 bytes",
                              name.size()));
    }
    size_t typePos = (skipSpace(), pos_);
    std::string_view tname = word();
    auto ti = ggmlTypeFromIrName(tname);
    if (!ti) {
      pos_ = typePos;
      return fail(fmt::format("unknown tensor type '{}'", tname));
    }
    TensorInfo t;
    t.name = std::string(name);
    t.type = ti->type;
    MetaValue dims;
    size_t dimsPos = (skipSpace(), pos_);
    if (pos_ >= line_.size() || line_[pos_] != '[')
      return fail("expected '[' and the tensor's dims (ggml order)");
    if (!parseValue(dims, 0))
      return false;
    if (dims.array.empty() || dims.array.size() > 4) {
      pos_ = dimsPos;
      return fail("a tensor has 1 to 4 dims");
    }
    for (const MetaValue &d : dims.array) {
      auto x = d.asInt();
      if (!x || *x <= 0 || *x > (int64_t(1) << 40)) {
        pos_ = dimsPos;
        return fail("tensor dims must be positive integers");
      }
      t.dims.push_back(static_cast<uint64_t>(*x));
    }
    // Each dim is at most 2^40; their product must still fit ggml's int64.
    std::optional<uint64_t> elements = t.checkedNumElements();
    if (!elements || *elements > static_cast<uint64_t>(INT64_MAX)) {
      pos_ = dimsPos;
      return fail("tensor has more than INT64_MAX elements");
    }
    if (t.dims[0] % ti->blockSize != 0) {
      pos_ = dimsPos;
      return fail(fmt::format("first dim {} is not a multiple of the {} "
                              "block size {}",
                              t.dims[0], ti->name, ti->blockSize));
    }
    // Sizes and offsets computed from it must not wrap either.
    if (!t.checkedNumBytes()) {
      pos_ = dimsPos;
      return fail("tensor data size overflows 64 bits");
    }
    if (!atEnd())
      return fail("unexpected text after the tensor dims");
    if (!info.addTensor(std::move(t))) {
      pos_ = namePos;
      return fail(fmt::format("duplicate tensor '{}'", name));
    }
    return true;
  }

  std::string_view text_;
  const std::string &name_;
  std::string_view line_;
  size_t pos_ = 0;
  int lineNo_ = 0;
  std::string msg_;
};

} // namespace

std::unique_ptr<ModelInfo> parseKeyValueText(std::string_view text,
                                             const std::string &name,
                                             std::string &error) {
  return KvParser(text, name).run(error);
}

} // namespace strata::format
