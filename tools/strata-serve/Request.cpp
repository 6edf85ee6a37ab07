//===- Request.cpp - a generation request's body, checked -----------------===//
#include "tools/strata-serve/Request.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>

namespace strata::tools::serve {

namespace {

using nlohmann::json;

/// How deep a body may nest: OpenAI's bodies need 4 levels (messages,
/// content parts); anything far deeper is an attack on the parser's and
/// the destructor's recursion.
constexpr int kMaxDepth = 16;

/// The name of \p v's JSON type, for "must be a number, not a string".
const char *typeName(const json &v) { return v.type_name(); }

bool fail(RequestError &error, std::string param, std::string message) {
  error = {std::move(message), std::move(param)};
  return false;
}

bool readNumber(const json &v, const char *name, double lo, double hi,
                double &out, RequestError &error) {
  if (!v.is_number())
    return fail(
        error, name,
        fmt::format("'{}' must be a number, not {}", name, typeName(v)));
  out = v.get<double>();
  if (!std::isfinite(out) || out < lo || out > hi)
    return fail(
        error, name,
        fmt::format("'{}' = {} is out of range [{}, {}]", name, out, lo, hi));
  return true;
}

bool readInteger(const json &v, const char *name, double lo, double hi,
                 int64_t &out, RequestError &error) {
  // 2.0 is an integer in JSON's eyes too (Python's json writes floats so).
  bool integral = v.is_number_integer() ||
                  (v.is_number_float() && std::isfinite(v.get<double>()) &&
                   std::floor(v.get<double>()) == v.get<double>());
  if (!integral)
    return fail(error, name,
                fmt::format("'{}' must be an integer, not {}", name,
                            v.is_number() ? "a fraction" : typeName(v)));
  // Compared as doubles: an unsigned 64-bit value far out of range must not
  // wrap into it.
  double d = v.is_number_unsigned() ? static_cast<double>(v.get<uint64_t>())
                                    : v.get<double>();
  if (d < lo || d > hi) {
    if (lo == hi)
      return fail(
          error, name,
          fmt::format("'{}' = {}: only {} is supported", name, v.dump(), lo));
    return fail(error, name,
                fmt::format("'{}' = {} is out of range [{}, {}]", name,
                            v.dump(), static_cast<int64_t>(lo),
                            static_cast<int64_t>(hi)));
  }
  out = v.is_number_unsigned() ? static_cast<int64_t>(v.get<uint64_t>())
                               : v.get<int64_t>();
  return true;
}

bool readBool(const json &v, const char *name, bool &out, RequestError &error) {
  if (!v.is_boolean())
    return fail(
        error, name,
        fmt::format("'{}' must be true or false, not {}", name, typeName(v)));
  out = v.get<bool>();
  return true;
}

/// stop: a string or a list of up to 16 strings.
bool readStop(const json &v, GenerationRequest &r, RequestError &error) {
  if (v.is_string()) {
    r.stops = {v.get<std::string>()};
    return true;
  }
  if (!v.is_array())
    return fail(error, "stop",
                fmt::format("'stop' must be a string or a list of strings, "
                            "not {}",
                            typeName(v)));
  if (v.size() > 16)
    return fail(error, "stop",
                fmt::format("'stop' has {} strings; at most 16", v.size()));
  for (size_t i = 0; i < v.size(); ++i) {
    if (!v[i].is_string())
      return fail(error, "stop",
                  fmt::format("'stop[{}]' must be a string, not {}", i,
                              typeName(v[i])));
    r.stops.push_back(v[i].get<std::string>());
  }
  return true;
}

/// prompt: a string, a list holding one string, or a list of token ids.
bool readPrompt(const json &v, GenerationRequest &r, RequestError &error) {
  if (v.is_string()) {
    r.promptText = v.get<std::string>();
    return true;
  }
  if (v.is_array() && v.size() == 1 && v[0].is_string()) {
    r.promptText = v[0].get<std::string>();
    return true;
  }
  if (v.is_array() && !v.empty() &&
      std::all_of(v.begin(), v.end(),
                  [](const json &e) { return e.is_number_integer(); })) {
    for (const json &e : v) {
      if (e.is_number_unsigned()
              ? e.get<uint64_t>() > INT32_MAX
              : (e.get<int64_t>() < 0 || e.get<int64_t>() > INT32_MAX))
        return fail(
            error, "prompt",
            fmt::format("'prompt' token id {} is out of range", e.dump()));
      r.promptIds.push_back(static_cast<int32_t>(e.get<int64_t>()));
    }
    r.promptIsIds = true;
    return true;
  }
  return fail(error, "prompt",
              v.is_array() ? std::string("'prompt' must be a string, a list "
                                         "of one string or a list of token "
                                         "ids (several prompts are not "
                                         "supported)")
                           : fmt::format("'prompt' must be a string, not {}",
                                         typeName(v)));
}

/// messages: a non-empty list of {role, content}; content a string or a
/// list of text parts.
bool readMessages(const json &v, GenerationRequest &r, RequestError &error) {
  if (!v.is_array() || v.empty())
    return fail(error, "messages",
                v.is_array() ? std::string("'messages' is empty")
                             : fmt::format("'messages' must be a list, not {}",
                                           typeName(v)));
  for (size_t i = 0; i < v.size(); ++i) {
    const json &m = v[i];
    std::string at = fmt::format("messages[{}]", i);
    if (!m.is_object())
      return fail(
          error, at,
          fmt::format("'{}' must be an object, not {}", at, typeName(m)));
    auto role = m.find("role");
    if (role == m.end() || !role->is_string())
      return fail(error, at + ".role",
                  fmt::format("'{}.role' must be a string", at));
    ChatMessage msg;
    msg.role = role->get<std::string>();
    // OpenAI's "developer" messages are the newer name of system ones.
    if (msg.role == "developer")
      msg.role = "system";
    if (msg.role != "system" && msg.role != "user" && msg.role != "assistant")
      return fail(error, at + ".role",
                  fmt::format("'{}.role' = \"{}\" is not supported (system, "
                              "developer, user or assistant)",
                              at, role->get<std::string>()));
    auto content = m.find("content");
    if (content == m.end() || (content->is_null() && msg.role != "assistant"))
      return fail(error, at + ".content",
                  fmt::format("'{}.content' is missing", at));
    if (content->is_string()) {
      msg.content = content->get<std::string>();
    } else if (content->is_array()) {
      for (size_t j = 0; j < content->size(); ++j) {
        const json &part = (*content)[j];
        std::string pat = fmt::format("{}.content[{}]", at, j);
        auto type = part.is_object() ? part.find("type") : part.end();
        if (!part.is_object() || type == part.end() || !type->is_string())
          return fail(error, pat + ".type",
                      fmt::format("'{}' must be an object with a type", pat));
        if (*type != "text")
          return fail(error, pat + ".type",
                      fmt::format("'{}.type' = \"{}\": only text content is "
                                  "supported",
                                  pat, type->get<std::string>()));
        auto text = part.find("text");
        if (text == part.end() || !text->is_string())
          return fail(error, pat + ".text",
                      fmt::format("'{}.text' must be a string", pat));
        msg.content += text->get<std::string>();
      }
    } else if (!content->is_null()) {
      return fail(error, at + ".content",
                  fmt::format("'{}.content' must be a string or a list of "
                              "text parts, not {}",
                              at, typeName(*content)));
    }
    r.messages.push_back(std::move(msg));
  }
  return true;
}

bool readStreamOptions(const json &v, GenerationRequest &r,
                       RequestError &error) {
  if (!v.is_object())
    return fail(
        error, "stream_options",
        fmt::format("'stream_options' must be an object, not {}", typeName(v)));
  r.streamOptions = true;
  auto usage = v.find("include_usage");
  if (usage != v.end() && !usage->is_null())
    return readBool(*usage, "stream_options.include_usage", r.includeUsage,
                    error);
  return true;
}

bool readTemplateKwargs(const json &v, GenerationRequest &r,
                        RequestError &error) {
  if (!v.is_object())
    return fail(error, "chat_template_kwargs",
                fmt::format("'chat_template_kwargs' must be an object, not {}",
                            typeName(v)));
  auto thinking = v.find("enable_thinking");
  if (thinking != v.end() && !thinking->is_null())
    return readBool(*thinking, "chat_template_kwargs.enable_thinking",
                    r.enableThinking, error);
  return true;
}

/// A field strata-serve does not implement: only a value that asks for
/// nothing passes.
bool readUnsupported(const json &v, const char *name, RequestError &error) {
  bool nothing =
      v.is_null() || (v.is_boolean() && !v.get<bool>()) ||
      (v.is_number_integer() && v.get<int64_t>() >= 0 &&
       v.get<int64_t>() <= 1) ||
      // json::empty() is false for every string: "" is asked for here.
      (v.is_string() && v.get_ref<const std::string &>().empty()) ||
      ((v.is_array() || v.is_object()) && v.empty()) ||
      (v.is_object() && v.size() == 1 && v.contains("type") &&
       v["type"] == "text");
  if (nothing)
    return true;
  return fail(error, name,
              fmt::format("'{}' is not supported by strata-serve", name));
}

bool forEndpoint(const char *endpoints, Endpoint e) {
  std::string_view s(endpoints);
  return s == "Both" || (s == "Chat") == (e == Endpoint::Chat);
}

} // namespace

bool parseRequest(const std::string &body, Endpoint endpoint,
                  GenerationRequest &r, RequestError &error) {
  r = GenerationRequest{};
  r.endpoint = endpoint;
  bool tooDeep = false;
  json doc = json::parse(
      body,
      [&](int depth, json::parse_event_t, json &) {
        tooDeep |= depth > kMaxDepth;
        return !tooDeep;
      },
      /*allow_exceptions=*/false);
  if (tooDeep)
    return fail(error, "",
                fmt::format("the body nests deeper than {} levels", kMaxDepth));
  if (doc.is_discarded())
    return fail(error, "", "the body is not valid JSON");
  if (!doc.is_object())
    return fail(
        error, "",
        fmt::format("the body must be a JSON object, not {}", typeName(doc)));

  bool sawPrompt = false;
#define SERVE_FIELD(Name, Kind, Lo, Hi, Endpoints, Apply)                      \
  if (forEndpoint(#Endpoints, endpoint)) {                                     \
    auto it = doc.find(Name);                                                  \
    if (it != doc.end() && !it->is_null()) {                                   \
      const json &value = *it;                                                 \
      if (!SERVE_READ_##Kind(Name, Lo, Hi, Apply))                             \
        return false;                                                          \
    }                                                                          \
  }
#define SERVE_READ_Number(Name, Lo, Hi, Apply)                                 \
  [&] {                                                                        \
    double v = 0;                                                              \
    if (!readNumber(value, Name, Lo, Hi, v, error))                            \
      return false;                                                            \
    Apply;                                                                     \
    return true;                                                               \
  }()
#define SERVE_READ_Integer(Name, Lo, Hi, Apply)                                \
  [&] {                                                                        \
    int64_t v = 0;                                                             \
    if (!readInteger(value, Name, Lo, Hi, v, error))                           \
      return false;                                                            \
    Apply;                                                                     \
    return true;                                                               \
  }()
#define SERVE_READ_Bool(Name, Lo, Hi, Apply)                                   \
  [&] {                                                                        \
    bool v = false;                                                            \
    if (!readBool(value, Name, v, error))                                      \
      return false;                                                            \
    Apply;                                                                     \
    return true;                                                               \
  }()
#define SERVE_READ_Stop(Name, Lo, Hi, Apply) readStop(value, r, error)
#define SERVE_READ_Prompt(Name, Lo, Hi, Apply)                                 \
  (sawPrompt = true, readPrompt(value, r, error))
#define SERVE_READ_Messages(Name, Lo, Hi, Apply)                               \
  (sawPrompt = true, readMessages(value, r, error))
#define SERVE_READ_StreamOptions(Name, Lo, Hi, Apply)                          \
  readStreamOptions(value, r, error)
#define SERVE_READ_TemplateKwargs(Name, Lo, Hi, Apply)                         \
  readTemplateKwargs(value, r, error)
#define SERVE_READ_Unsupported(Name, Lo, Hi, Apply)                            \
  readUnsupported(value, Name, error)
#include "tools/strata-serve/RequestFields.def"
#undef SERVE_READ_Number
#undef SERVE_READ_Integer
#undef SERVE_READ_Bool
#undef SERVE_READ_Stop
#undef SERVE_READ_Prompt
#undef SERVE_READ_Messages
#undef SERVE_READ_StreamOptions
#undef SERVE_READ_TemplateKwargs
#undef SERVE_READ_Unsupported

  if (!sawPrompt)
    return endpoint == Endpoint::Chat
               ? fail(error, "messages", "'messages' is missing")
               : fail(error, "prompt", "'prompt' is missing");
  if (endpoint == Endpoint::Chat) {
    if (r.topLogprobs && !r.chatLogprobs)
      return fail(error, "top_logprobs",
                  "'top_logprobs' needs 'logprobs': true");
    r.logprobs = r.chatLogprobs ? r.topLogprobs.value_or(0) : -1;
  }
  if (!r.stream && r.streamOptions)
    return fail(error, "stream_options",
                "'stream_options' is only allowed with 'stream': true");
  // The table's ranges are within the sampler's; this is its own check.
  std::string samplerError;
  if (!runtime::validateSamplerOptions(r.sampling, samplerError))
    return fail(error, "", samplerError);
  return true;
}

} // namespace strata::tools::serve
