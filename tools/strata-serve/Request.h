//===- Request.h - a generation request's body, checked ---------*- C++ -*-===//
//
// The JSON body of POST /v1/completions or /v1/chat/completions, read
// against RequestFields.def into a GenerationRequest. Every mistake is a
// RequestError naming the field (OpenAI's "param"), which the HTTP layer
// returns as a 400 with a JSON error body.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/Sampler.h"
#include "tools/strata-serve/ChatFormat.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace strata::tools::serve {

/// Which endpoint a body is for.
enum class Endpoint { Completions, Chat };

/// A client's mistake in a request: the message and the field it names
/// ("" when it is about the body as a whole).
struct RequestError {
  std::string message;
  std::string param;
};

/// A generation request, checked.
struct GenerationRequest {
  Endpoint endpoint = Endpoint::Completions;
  /// The prompt as text (completions' string, or the rendered chat) ...
  std::string promptText;
  /// ... or as token ids (completions' array of integers).
  std::vector<int32_t> promptIds;
  bool promptIsIds = false;
  /// Chat: the messages, their content flattened to text.
  std::vector<ChatMessage> messages;
  bool enableThinking = true;
  /// The sampler: llama.cpp's defaults (as llama-server), then the
  /// request's fields.
  runtime::SamplerOptions sampling;
  /// Tokens to generate at most; none: until the context is full.
  std::optional<int64_t> maxTokens;
  /// The field that set maxTokens (chat has two names for it).
  std::string maxTokensField = "max_tokens";
  std::vector<std::string> stops;
  bool stream = false;
  /// stream_options.include_usage: a last chunk with the usage.
  bool includeUsage = false;
  /// stream_options was given (only allowed with stream).
  bool streamOptions = false;
  /// Top alternatives to report with each token's log-probability; -1:
  /// no log-probabilities.
  int64_t logprobs = -1;
  /// Chat's logprobs switch and top_logprobs count (resolved into
  /// logprobs).
  bool chatLogprobs = false;
  std::optional<int64_t> topLogprobs;
  /// Generate past end-of-generation tokens (max_tokens or the context
  /// ends the job).
  bool ignoreEos = false;
  /// Give each choice's generated token ids ("token_ids").
  bool returnTokenIds = false;
};

/// Reads \p body (the raw bytes) as a request for \p endpoint. Returns false
/// with \p error set on malformed JSON, a body that is not an object, a
/// field of the wrong type or out of range, or a missing prompt/messages.
bool parseRequest(const std::string &body, Endpoint endpoint,
                  GenerationRequest &request, RequestError &error);

} // namespace strata::tools::serve
