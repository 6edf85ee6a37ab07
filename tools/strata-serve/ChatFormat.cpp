//===- ChatFormat.cpp - chat messages to a prompt text --------------------===//
#include "tools/strata-serve/ChatFormat.h"

#include <fmt/format.h>

namespace strata::tools::serve {

namespace {

bool contains(std::string_view text, std::string_view what) {
  return text.find(what) != std::string_view::npos;
}

/// The default system message of a Qwen2-style template: the text of the
/// literal '<|im_start|>system\n...<|im_end|>' that the template emits when
/// messages[0] is not a system message; empty when it has none.
std::string defaultSystemMessage(std::string_view tmpl) {
  if (!contains(tmpl, "messages[0]['role'] != 'system'") &&
      !contains(tmpl, "messages[0].role != 'system'") &&
      !contains(tmpl, "messages[0]['role'] != \"system\""))
    return "";
  // The literal sits in a Jinja string after the condition; its newlines
  // are real newlines or the escape "\n".
  for (std::string_view open :
       {"<|im_start|>system\n", "<|im_start|>system\\n"}) {
    size_t at = tmpl.find(open);
    if (at == std::string_view::npos)
      continue;
    size_t begin = at + open.size();
    size_t end = tmpl.find("<|im_end|>", begin);
    if (end == std::string_view::npos)
      return "";
    std::string_view text = tmpl.substr(begin, end - begin);
    // A template that builds the system turn from a variable (a message's
    // content) has Jinja syntax here, not a literal default.
    if (contains(text, "{{") || contains(text, "{%") || contains(text, "'") ||
        contains(text, "+"))
      continue;
    return std::string(text);
  }
  return "";
}

} // namespace

std::string ChatFormat::describe() const {
  if (kind == Kind::None)
    return "none (message contents joined by newlines)";
  std::string s = "chatml";
  if (!defaultSystem.empty())
    s += fmt::format(" (default system message \"{}\")", defaultSystem);
  if (thinkingSwitch)
    s += " (qwen3 enable_thinking switch)";
  return s;
}

bool chooseChatFormat(std::string_view forced, std::string_view chatTemplate,
                      ChatFormat &format, std::string &error) {
  format = ChatFormat{};
  if (forced == "none") {
    format.kind = ChatFormat::Kind::None;
    return true;
  }
  if (forced == "chatml") {
    // Plain ChatML, llama.cpp's "chatml": the template is not read at all
    // (it may be missing, or a format strata does not know).
    format.kind = ChatFormat::Kind::ChatML;
    return true;
  }
  if (!forced.empty()) {
    error = fmt::format("--chat-format {}: unknown format (chatml or none)",
                        forced);
    return false;
  }
  if (chatTemplate.empty()) {
    error = "the GGUF has no chat template (tokenizer.chat_template): give "
            "--chat-format chatml|none to serve /v1/chat/completions";
    return false;
  }
  // As llama.cpp's detection: <|im_start|> is ChatML unless the template
  // is Phi-4's (<|im_sep|>) or SmolVLM's (<end_of_utterance>).
  if (!contains(chatTemplate, "<|im_start|>") ||
      contains(chatTemplate, "<|im_sep|>") ||
      contains(chatTemplate, "<end_of_utterance>")) {
    error = "the GGUF's chat template (tokenizer.chat_template) is not one "
            "strata-serve knows (it renders ChatML natively): give "
            "--chat-format chatml|none";
    return false;
  }
  format.kind = ChatFormat::Kind::ChatML;
  format.defaultSystem = defaultSystemMessage(chatTemplate);
  format.thinkingSwitch = contains(chatTemplate, "enable_thinking");
  return true;
}

std::string renderChat(const ChatFormat &format,
                       const std::vector<ChatMessage> &messages,
                       bool enableThinking) {
  std::string out;
  if (format.kind == ChatFormat::Kind::None) {
    for (size_t i = 0; i < messages.size(); ++i) {
      if (i)
        out += '\n';
      out += messages[i].content;
    }
    return out;
  }
  if (!format.defaultSystem.empty() &&
      (messages.empty() || messages[0].role != "system"))
    out += "<|im_start|>system\n" + format.defaultSystem + "<|im_end|>\n";
  for (const ChatMessage &m : messages)
    out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
  out += "<|im_start|>assistant\n";
  // Qwen3's template: {%- if enable_thinking is defined and enable_thinking
  // is false %}{{- '<think>\n\n</think>\n\n' }}.
  if (format.thinkingSwitch && !enableThinking)
    out += "<think>\n\n</think>\n\n";
  return out;
}

} // namespace strata::tools::serve
