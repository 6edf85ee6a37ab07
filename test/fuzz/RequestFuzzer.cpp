//===- RequestFuzzer.cpp - libFuzzer target for strata-serve's bodies -----===//
//
// The first byte, modulo 4 (the seeds' '0' to '3'), picks what the rest
// is:
//
//   0-1: the body of POST /v1/completions (0) or /v1/chat/completions (1),
//     read by parseRequest. A refused body has a message and names a field
//     of RequestFields.def (or none, for the body as a whole), and the
//     400's JSON error body serialises. An accepted one holds what the
//     table allows (ranges, one kind of prompt, the sampler's checks), and
//     a chat's messages render in each chat format, ending with the
//     assistant's turn.
//   2: a GGUF chat template (tokenizer.chat_template) to recognise: a known
//     one gives a format, an unknown one an error naming --chat-format.
//   3: a request's stop strings and a generated text (byte 1: the count of
//     stops, 1 to 4; then each stop's length, 0 to 7, and bytes; the rest
//     is the text). Streamed through StopStrings in pieces cut by the
//     input's bytes, and one byte at a time, the text shown is the text
//     before the stop completed first (then the longest), the same however
//     it is cut, and no more than the longest stop's length - 1 is held.
//
//===----------------------------------------------------------------------===//
#include "runtime/Sampler.h"
#include "runtime/tokenizer/StopStrings.h"
#include "tools/strata-serve/ChatFormat.h"
#include "tools/strata-serve/Request.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

using namespace strata;
using namespace strata::tools::serve;
using nlohmann::json;

namespace {

[[noreturn]] void die(const char *what, const std::string &detail) {
  std::fprintf(stderr, "RequestFuzzer: %s: %s\n", what, detail.c_str());
  std::abort();
}

/// True if \p param is "" or names a field of the table, alone or with a
/// path into it ("messages[2].content[0].type", "stream_options.x").
bool namesAField(const std::string &param) {
  if (param.empty())
    return true;
  auto under = [&](std::string_view name) {
    return param.rfind(name, 0) == 0 &&
           (param.size() == name.size() || param[name.size()] == '.' ||
            param[name.size()] == '[');
  };
#define SERVE_FIELD(Name, Kind, Lo, Hi, Endpoints, Apply)                      \
  if (under(Name))                                                             \
    return true;
#include "tools/strata-serve/RequestFields.def"
  return false;
}

bool within(float v, double lo, double hi) {
  return std::isfinite(v) && v >= lo && v <= hi;
}

void checkRefused(const RequestError &error, const std::string &body) {
  if (error.message.empty())
    die("refused without a message", body);
  if (!namesAField(error.param))
    die("refused naming no field of RequestFields.def",
        error.param + " <- " + body);
  // The HTTP layer's 400 body (as HttpServer::sendError writes it).
  json reply = {
      {"error",
       {{"message", error.message},
        {"type", "invalid_request_error"},
        {"param", error.param.empty() ? json(nullptr) : json(error.param)}}}};
  std::string text = reply.dump(-1, ' ', false, json::error_handler_t::replace);
  if (!json::accept(text))
    die("the error body is not JSON", text);
}

void checkAccepted(const GenerationRequest &r, Endpoint endpoint,
                   const std::string &body) {
  if (r.endpoint != endpoint)
    die("accepted for the other endpoint", body);
  const runtime::SamplerOptions &s = r.sampling;
  if (!within(s.temperature, 0, 2) || !within(s.topP, 1e-9, 1) ||
      !within(s.minP, 0, 1) || !within(s.penaltyPresent, -2, 2) ||
      !within(s.penaltyFreq, -2, 2) || s.topK < 0)
    die("a sampler value outside the table's range", body);
  std::string samplerError;
  if (!runtime::validateSamplerOptions(s, samplerError))
    die("accepted what the sampler refuses", samplerError + " <- " + body);
  if (r.maxTokens && *r.maxTokens < 1)
    die("accepted max_tokens < 1", body);
  if (r.logprobs < -1 || r.logprobs > 5)
    die("logprobs outside -1..5", body);
  if (r.stops.size() > 16)
    die("more than 16 stop strings", body);
  if (r.streamOptions && !r.stream)
    die("stream_options without stream", body);
  if (endpoint == Endpoint::Completions) {
    if (!r.messages.empty())
      die("completions with messages", body);
    if (r.promptIsIds == r.promptIds.empty())
      die("prompt ids without the ids flag, or the flag without ids", body);
    if (r.promptIsIds && !r.promptText.empty())
      die("a prompt both text and ids", body);
    for (int32_t id : r.promptIds)
      if (id < 0)
        die("a negative prompt id", body);
    return;
  }
  if (r.messages.empty() || r.promptIsIds || !r.promptText.empty())
    die("a chat without messages, or with a completion prompt", body);
  for (const ChatMessage &m : r.messages)
    if (m.role != "system" && m.role != "user" && m.role != "assistant")
      die("a message of an unsupported role", m.role + " <- " + body);
  // Every format renders it, ending where the assistant's turn begins.
  ChatFormat chatml, qwen3, none;
  qwen3.thinkingSwitch = true;
  qwen3.defaultSystem = "You are a helpful assistant.";
  none.kind = ChatFormat::Kind::None;
  for (const ChatFormat *f : {&chatml, &qwen3}) {
    std::string text = renderChat(*f, r.messages, r.enableThinking);
    std::string_view end = "<|im_start|>assistant\n";
    if (f->thinkingSwitch && !r.enableThinking)
      end = "<think>\n\n</think>\n\n";
    if (text.rfind("<|im_start|>", 0) != 0 || text.size() < end.size() ||
        text.compare(text.size() - end.size(), end.size(), end) != 0)
      die("a ChatML rendering that does not start and end as ChatML", text);
  }
  std::string plain = renderChat(none, r.messages, r.enableThinking);
  size_t chars = 0;
  for (const ChatMessage &m : r.messages)
    chars += m.content.size();
  if (plain.size() != chars + r.messages.size() - 1)
    die("'none' is not the contents joined by newlines", plain);
}

/// What StopStrings must show of \p text: the text before the occurrence
/// of a stop that ends first (of those ending together, the longest), or
/// all of it.
std::string shownOf(const std::vector<std::string> &stops,
                    const std::string &text, std::string *matched) {
  size_t first = std::string::npos, end = std::string::npos;
  for (const std::string &s : stops) {
    if (s.empty())
      continue;
    size_t at = text.find(s);
    if (at != std::string::npos &&
        (at + s.size() < end || (at + s.size() == end && at < first))) {
      first = at;
      end = at + s.size();
      *matched = s;
    }
  }
  return first == std::string::npos ? text : text.substr(0, first);
}

/// \p text streamed through \p stops in pieces of the given lengths (the
/// last piece takes the rest).
std::string streamed(const std::vector<std::string> &stops,
                     const std::string &text, const std::vector<size_t> &pieces,
                     std::string *matched, size_t maxHeld) {
  tokenizer::StopStrings s(stops);
  std::string out;
  size_t at = 0;
  for (size_t i = 0; at < text.size(); ++i) {
    size_t n = i < pieces.size() ? pieces[i] : text.size() - at;
    n = std::min(n, text.size() - at);
    bool stop = s.push(std::string_view(text).substr(at, n), out);
    at += n;
    if (stop) {
      *matched = std::string(s.matched());
      return out;
    }
    if (s.heldBytes() > maxHeld)
      die("StopStrings held more than the longest stop - 1", text);
  }
  s.finish(out);
  return out;
}

void checkStops(const uint8_t *data, size_t size) {
  if (size < 1)
    return;
  std::vector<std::string> stops;
  size_t at = 1, longest = 1;
  for (int n = 1 + data[0] % 4; n > 0 && at < size; --n) {
    size_t len = data[at++] % 8;
    len = std::min(len, size - at);
    stops.emplace_back(reinterpret_cast<const char *>(data) + at, len);
    longest = std::max(longest, len);
    at += len;
  }
  const std::string text(reinterpret_cast<const char *>(data) + at, size - at);
  std::string want, got;
  const std::string expect = shownOf(stops, text, &want);
  // Pieces cut by the text's own bytes (0 to 7 long), and single bytes.
  std::vector<size_t> cuts, ones(text.size(), 1);
  for (unsigned char c : text)
    cuts.push_back(c % 8);
  for (const std::vector<size_t> *pieces : {&cuts, &ones}) {
    std::string shown = streamed(stops, text, *pieces, &got, longest - 1);
    if (shown != expect || got != want)
      die("stop strings: the text shown depends on how it is cut",
          "shown '" + shown + "', want '" + expect + "' (stop '" + got +
              "', want '" + want + "')");
  }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0)
    return 0;
  const std::string body(reinterpret_cast<const char *>(data) + 1, size - 1);
  switch (data[0] % 4) {
  case 0:
  case 1: {
    const Endpoint endpoint =
        data[0] % 4 == 0 ? Endpoint::Completions : Endpoint::Chat;
    GenerationRequest r;
    RequestError error;
    if (parseRequest(body, endpoint, r, error))
      checkAccepted(r, endpoint, body);
    else
      checkRefused(error, body);
    return 0;
  }
  case 3:
    checkStops(data + 1, size - 1);
    return 0;
  default: {
    ChatFormat format;
    std::string error;
    if (chooseChatFormat("", body, format, error)) {
      if (format.describe().empty())
        die("a format without a description", body);
    } else if (error.find("--chat-format") == std::string::npos) {
      die("an unknown template's error does not name --chat-format", error);
    }
    return 0;
  }
  }
}
