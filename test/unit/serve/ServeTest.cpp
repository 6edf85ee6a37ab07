//===- ServeTest.cpp - strata-serve's chat format and request checks ------===//
#include "tools/strata-serve/ChatFormat.h"
#include "tools/strata-serve/Metrics.h"
#include "tools/strata-serve/Request.h"

#include <gtest/gtest.h>

using namespace strata::tools::serve;

namespace {

// The template of llama.cpp's ggml-vocab-qwen2.gguf (Qwen2 / Qwen2.5): a
// default system message when the first is not a system message.
const char *kQwen2Template =
    "{% for message in messages %}{% if loop.first and messages[0]['role'] "
    "!= 'system' %}{{ '<|im_start|>system\nYou are a helpful "
    "assistant<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] "
    "+ '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if "
    "add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

// The part of Qwen3's template that matters here: the system turn comes
// from the messages (no default) and enable_thinking.
const char *kQwen3Template =
    "{%- if messages[0].role == 'system' %}{{- '<|im_start|>system\\n' + "
    "messages[0].content + '<|im_end|>\\n' }}{%- endif %}...{%- if "
    "add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- if "
    "enable_thinking is defined and enable_thinking is false %}{{- "
    "'<think>\\n\\n</think>\\n\\n' }}{%- endif %}{%- endif %}";

TEST(ServeChatFormat, Qwen2DefaultSystemMessage) {
  ChatFormat f;
  std::string error;
  ASSERT_TRUE(chooseChatFormat("", kQwen2Template, f, error)) << error;
  EXPECT_EQ(f.kind, ChatFormat::Kind::ChatML);
  EXPECT_EQ(f.defaultSystem, "You are a helpful assistant");
  EXPECT_FALSE(f.thinkingSwitch);
  EXPECT_EQ(renderChat(f, {{"user", "Hi"}}, true),
            "<|im_start|>system\nYou are a helpful assistant<|im_end|>\n"
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  // A system message of the request's own replaces the default.
  EXPECT_EQ(renderChat(f, {{"system", "S"}, {"user", "Hi"}}, true),
            "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nHi<|im_end|>"
            "\n<|im_start|>assistant\n");
}

TEST(ServeChatFormat, Qwen3ThinkingSwitch) {
  ChatFormat f;
  std::string error;
  ASSERT_TRUE(chooseChatFormat("", kQwen3Template, f, error)) << error;
  EXPECT_TRUE(f.thinkingSwitch);
  EXPECT_EQ(f.defaultSystem, "");
  std::vector<ChatMessage> m = {
      {"user", "Hi"}, {"assistant", "Hello"}, {"user", "Again"}};
  const std::string turns = "<|im_start|>user\nHi<|im_end|>\n"
                            "<|im_start|>assistant\nHello<|im_end|>\n"
                            "<|im_start|>user\nAgain<|im_end|>\n"
                            "<|im_start|>assistant\n";
  EXPECT_EQ(renderChat(f, m, true), turns);
  EXPECT_EQ(renderChat(f, m, false), turns + "<think>\n\n</think>\n\n");
}

TEST(ServeChatFormat, UnknownTemplateRefused) {
  ChatFormat f;
  std::string error;
  EXPECT_FALSE(chooseChatFormat("", "{{ '[INST] ' + m }}", f, error));
  EXPECT_NE(error.find("--chat-format chatml|none"), std::string::npos);
  EXPECT_FALSE(chooseChatFormat("", "", f, error));
  EXPECT_NE(error.find("--chat-format chatml|none"), std::string::npos);
  // Phi-4 uses <|im_start|> with <|im_sep|>: not ChatML (as llama.cpp).
  EXPECT_FALSE(
      chooseChatFormat("", "<|im_start|>user<|im_sep|>hi<|im_end|>", f, error));
  // --chat-format overrides.
  ASSERT_TRUE(chooseChatFormat("none", "{{ '[INST] ' + m }}", f, error));
  EXPECT_EQ(renderChat(f, {{"system", "a"}, {"user", "b"}}, true), "a\nb");
  ASSERT_TRUE(chooseChatFormat("chatml", "", f, error));
  EXPECT_EQ(renderChat(f, {{"user", "b"}}, true),
            "<|im_start|>user\nb<|im_end|>\n<|im_start|>assistant\n");
  // Plain ChatML: the template's default system message is not added.
  ASSERT_TRUE(chooseChatFormat("chatml", kQwen2Template, f, error));
  EXPECT_EQ(renderChat(f, {{"user", "b"}}, false),
            "<|im_start|>user\nb<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_FALSE(chooseChatFormat("llama3", "", f, error));
}

/// The error of parsing \p body for \p e (empty: it parsed).
RequestError parseError(const std::string &body,
                        Endpoint e = Endpoint::Completions) {
  GenerationRequest r;
  RequestError error;
  if (parseRequest(body, e, r, error))
    return {};
  return error;
}

TEST(ServeRequest, Fields) {
  GenerationRequest r;
  RequestError error;
  ASSERT_TRUE(parseRequest(
      R"({"model":"x","prompt":"Hi","max_tokens":5,"temperature":0,
          "top_p":0.5,"top_k":3,"min_p":0.1,"seed":7,"stop":["a","b"],
          "presence_penalty":0.5,"frequency_penalty":-1,"n":1,"stream":true,
          "stream_options":{"include_usage":true},"logprobs":2,"user":"u"})",
      Endpoint::Completions, r, error))
      << error.message;
  EXPECT_EQ(r.promptText, "Hi");
  EXPECT_EQ(*r.maxTokens, 5);
  EXPECT_EQ(r.sampling.temperature, 0.0f);
  EXPECT_EQ(r.sampling.topP, 0.5f);
  EXPECT_EQ(r.sampling.topK, 3);
  EXPECT_EQ(r.sampling.minP, 0.1f);
  EXPECT_EQ(r.sampling.seed, 7u);
  EXPECT_EQ(r.sampling.penaltyPresent, 0.5f);
  EXPECT_EQ(r.sampling.penaltyFreq, -1.0f);
  EXPECT_EQ(r.stops, (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.includeUsage);
  EXPECT_EQ(r.logprobs, 2);

  ASSERT_TRUE(parseRequest(
      R"({"messages":[{"role":"developer","content":"S"},
          {"role":"user","content":[{"type":"text","text":"a"},
                                    {"type":"text","text":"b"}]}],
          "logprobs":true,"top_logprobs":3,
          "chat_template_kwargs":{"enable_thinking":false}})",
      Endpoint::Chat, r, error))
      << error.message;
  ASSERT_EQ(r.messages.size(), 2u);
  EXPECT_EQ(r.messages[0].role, "system");
  EXPECT_EQ(r.messages[1].content, "ab");
  EXPECT_EQ(r.logprobs, 3);
  EXPECT_FALSE(r.enableThinking);

  ASSERT_TRUE(
      parseRequest(R"({"prompt":[1,2,3]})", Endpoint::Completions, r, error));
  EXPECT_TRUE(r.promptIsIds);
  EXPECT_EQ(r.promptIds, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_FALSE(r.ignoreEos);
  EXPECT_FALSE(r.returnTokenIds);

  // vLLM's extensions, on both endpoints.
  ASSERT_TRUE(parseRequest(
      R"({"prompt":[4],"ignore_eos":true,"return_token_ids":true})",
      Endpoint::Completions, r, error))
      << error.message;
  EXPECT_TRUE(r.ignoreEos);
  EXPECT_TRUE(r.returnTokenIds);
  ASSERT_TRUE(parseRequest(R"({"messages":[{"role":"user","content":"x"}],
                              "ignore_eos":true,"return_token_ids":false})",
                           Endpoint::Chat, r, error))
      << error.message;
  EXPECT_TRUE(r.ignoreEos);
  EXPECT_FALSE(r.returnTokenIds);
}

TEST(ServeRequest, ErrorsNameTheField) {
  EXPECT_EQ(parseError("{").message, "the body is not valid JSON");
  EXPECT_EQ(parseError("[1]").param, "");
  EXPECT_EQ(parseError(std::string(100, '[') + std::string(100, ']')).message,
            "the body nests deeper than 16 levels");
  EXPECT_EQ(parseError(R"({})").param, "prompt");
  EXPECT_EQ(parseError(R"({})", Endpoint::Chat).param, "messages");
  EXPECT_EQ(parseError(R"({"prompt":"a","max_tokens":0})").param, "max_tokens");
  EXPECT_EQ(parseError(R"({"prompt":"a","max_tokens":-3})").param,
            "max_tokens");
  EXPECT_EQ(parseError(R"({"prompt":"a","max_tokens":1e300})").param,
            "max_tokens");
  EXPECT_EQ(parseError(R"({"prompt":"a","max_tokens":2.5})").param,
            "max_tokens");
  EXPECT_EQ(parseError(R"({"prompt":"a","temperature":-1})").param,
            "temperature");
  EXPECT_EQ(parseError(R"({"prompt":"a","temperature":"hot"})").param,
            "temperature");
  // JSON has no NaN: Python's json.dumps(nan) writes a bare NaN.
  EXPECT_EQ(parseError(R"({"prompt":"a","temperature":NaN})").message,
            "the body is not valid JSON");
  // A number past double's range is refused by the parser.
  EXPECT_EQ(parseError(R"({"prompt":"a","temperature":1e999})").message,
            "the body is not valid JSON");
  EXPECT_EQ(parseError(R"({"prompt":"a","n":2})").message,
            "'n' = 2: only 1 is supported");
  EXPECT_EQ(parseError(R"({"prompt":"a","stop":[1]})").param, "stop");
  EXPECT_EQ(parseError(R"({"prompt":"a","logprobs":6})").param, "logprobs");
  EXPECT_EQ(parseError(R"({"prompt":"a","ignore_eos":1})").message,
            "'ignore_eos' must be true or false, not number");
  EXPECT_EQ(parseError(R"({"prompt":"a","return_token_ids":"yes"})").param,
            "return_token_ids");
  EXPECT_EQ(parseError(R"({"prompt":["a","b"]})").param, "prompt");
  EXPECT_EQ(parseError(R"({"prompt":"a","stream_options":{}})").param,
            "stream_options");
  EXPECT_EQ(parseError(R"({"messages":[{"role":"wizard","content":"x"}]})",
                       Endpoint::Chat)
                .param,
            "messages[0].role");
  EXPECT_EQ(parseError(R"({"messages":[{"role":"user","content":[
                {"type":"image_url","image_url":{"url":"x"}}]}]})",
                       Endpoint::Chat)
                .param,
            "messages[0].content[0].type");
  EXPECT_EQ(
      parseError(R"({"messages":[{"role":"user"}]})", Endpoint::Chat).param,
      "messages[0].content");
  EXPECT_EQ(parseError(R"({"messages":[]})", Endpoint::Chat).param, "messages");
  EXPECT_EQ(parseError(R"({"messages":[{"role":"user","content":"x"}],
                           "top_logprobs":2})",
                       Endpoint::Chat)
                .param,
            "top_logprobs");
}

TEST(ServeRequest, UnsupportedFieldsThatAskForSomething) {
  const char *chat = R"({"messages":[{"role":"user","content":"x"}],)";
  EXPECT_EQ(parseError(std::string(chat) + R"("tools":[{"type":"function"}]})",
                       Endpoint::Chat)
                .param,
            "tools");
  EXPECT_EQ(parseError(std::string(chat) +
                           R"("response_format":{"type":"json_object"}})",
                       Endpoint::Chat)
                .param,
            "response_format");
  EXPECT_EQ(parseError(R"({"prompt":"a","echo":true})").param, "echo");
  EXPECT_EQ(parseError(R"({"prompt":"a","best_of":3})").param, "best_of");
  EXPECT_EQ(parseError(R"({"prompt":"a","logit_bias":{"5":1}})").param,
            "logit_bias");
  // Values that ask for nothing pass.
  EXPECT_EQ(parseError(std::string(chat) +
                           R"("tools":[],"response_format":{"type":"text"},
                              "logit_bias":{}})",
                       Endpoint::Chat)
                .message,
            "");
  EXPECT_EQ(parseError(R"({"prompt":"a","echo":false,"best_of":1,
                           "suffix":null})")
                .message,
            "");
  // An empty string asks for nothing; a text suffix does (the request
  // fuzzer's seed found "" refused: json::empty() is false for strings).
  EXPECT_EQ(parseError(R"({"prompt":"a","suffix":""})").message, "");
  EXPECT_EQ(parseError(R"({"prompt":"a","suffix":"b"})").param, "suffix");
}

TEST(ServeMetrics, PrometheusText) {
  Metrics m;
  m.requests += 3;
  m.queueDepth = 2;
  m.decodeBatch.observe(3);
  m.decodeBatch.observe(8);
  std::string text = m.render();
  EXPECT_NE(text.find("# TYPE strata_requests_total counter\n"
                      "strata_requests_total 3\n"),
            std::string::npos);
  EXPECT_NE(text.find("strata_queue_depth 2\n"), std::string::npos);
  EXPECT_NE(text.find("strata_decode_batch_size_bucket{le=\"2\"} 0\n"
                      "strata_decode_batch_size_bucket{le=\"4\"} 1\n"
                      "strata_decode_batch_size_bucket{le=\"8\"} 2\n"),
            std::string::npos);
  EXPECT_NE(text.find("strata_decode_batch_size_sum 11\n"
                      "strata_decode_batch_size_count 2\n"),
            std::string::npos);
}

} // namespace
