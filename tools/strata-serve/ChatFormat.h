//===- ChatFormat.h - chat messages to a prompt text ------------*- C++ -*-===//
//
// /v1/chat/completions turns its messages into one prompt text that the
// GGUF's tokenizer then reads (special tokens recognised). strata renders
// the formats it knows natively instead of running the GGUF's Jinja
// template (tokenizer.chat_template): it recognises a template by the text
// it contains, as llama.cpp does (src/llama-chat.cpp,
// llm_chat_detect_template), and refuses one it does not know at start-up.
//
// Known formats (ChatFormats.def):
//   - chatml: per message "<|im_start|>ROLE\nCONTENT<|im_end|>\n", then
//     "<|im_start|>assistant\n". A template containing "<|im_start|>" is
//     ChatML (as llama.cpp; not those with "<|im_sep|>" or
//     "<end_of_utterance>", which are other formats).
//   - Two Qwen variants of it, found in the template's text:
//       Qwen2/Qwen2.5 add a default system message ("You are a helpful
//       assistant", or the template's own text) when the first message is
//       not a system message; the text is read from the template;
//       Qwen3 templates have the enable_thinking switch: with thinking off
//       the assistant turn starts with an empty think block,
//       "<think>\n\n</think>\n\n".
//   - none: the contents of the messages joined by "\n", no markup (for a
//     base model; --chat-format none).
//
//===----------------------------------------------------------------------===//
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace strata::tools::serve {

/// One chat message, its content already flattened to text.
struct ChatMessage {
  std::string role; ///< system, user or assistant
  std::string content;
};

/// How chat messages become a prompt.
struct ChatFormat {
  enum class Kind { ChatML, None };
  Kind kind = Kind::ChatML;
  /// The default system message added when the first message is not a
  /// system message (Qwen2 templates); empty: none.
  std::string defaultSystem;
  /// The template has Qwen3's enable_thinking switch.
  bool thinkingSwitch = false;

  /// A short description for the start-up line, e.g. "chatml (qwen3
  /// thinking switch)".
  std::string describe() const;
};

/// Chooses the format: \p forced ("chatml": plain ChatML, without the Qwen
/// details; "none"; or "" for none given) wins; else the GGUF's
/// \p chatTemplate ("" when the file has none) is recognised. Returns false
/// with \p error set for an unknown --chat-format name or a template that is
/// not recognised (the error names
/// --chat-format chatml|none).
bool chooseChatFormat(std::string_view forced, std::string_view chatTemplate,
                      ChatFormat &format, std::string &error);

/// The prompt text of \p messages in \p format, ending with the start of the
/// assistant's turn. \p enableThinking: the request's
/// chat_template_kwargs.enable_thinking (Qwen3 templates; true when not
/// given, as the templates default).
std::string renderChat(const ChatFormat &format,
                       const std::vector<ChatMessage> &messages,
                       bool enableThinking);

} // namespace strata::tools::serve
