//===- RequestFuzzer.cpp - libFuzzer target for strata-serve's bodies -----===//
//
// The first byte, modulo 3 (the seeds' '0', '1' and '2'), picks what the
// rest is:
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
//
//===----------------------------------------------------------------------===//
#include "runtime/Sampler.h"
#include "tools/strata-serve/ChatFormat.h"
#include "tools/strata-serve/Request.h"

#include <nlohmann/json.hpp>

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

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0)
    return 0;
  const std::string body(reinterpret_cast<const char *>(data) + 1, size - 1);
  switch (data[0] % 3) {
  case 0:
  case 1: {
    const Endpoint endpoint =
        data[0] % 3 == 0 ? Endpoint::Completions : Endpoint::Chat;
    GenerationRequest r;
    RequestError error;
    if (parseRequest(body, endpoint, r, error))
      checkAccepted(r, endpoint, body);
    else
      checkRefused(error, body);
    return 0;
  }
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
