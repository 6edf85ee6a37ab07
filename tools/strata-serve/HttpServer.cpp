//===- HttpServer.cpp - the OpenAI-compatible HTTP layer ------------------===//
#include "tools/strata-serve/HttpServer.h"

#include "runtime/tokenizer/Tokenizer.h"
#include "tools/strata-serve/Scheduler.h"

#include <fmt/format.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <ctime>

namespace strata::tools::serve {

namespace {

using nlohmann::json;

/// JSON text of \p j; bytes that are not UTF-8 (a token may end inside a
/// character) become U+FFFD instead of an exception.
std::string dump(const json &j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

/// OpenAI's error type for a status.
const char *errorType(int status) {
  switch (status) {
  case 401:
    return "authentication_error";
  case 404:
    return "not_found_error";
  case 503:
    return "server_busy";
  default:
    return status >= 500 ? "server_error" : "invalid_request_error";
  }
}

/// An error response in OpenAI's shape.
void sendError(httplib::Response &res, int status, const std::string &message,
               const std::string &param = "") {
  json body = {{"error",
                {{"message", message},
                 {"type", errorType(status)},
                 {"param", param.empty() ? json(nullptr) : json(param)},
                 {"code", nullptr}}}};
  res.status = status;
  res.set_content(dump(body), "application/json");
}

/// Whether \p path is a route that --api-key guards (Endpoints.def).
bool needsKey(const std::string &path) {
#define SERVE_ENDPOINT(Method, Path, Handler, Auth, Help)                      \
  if (path == Path)                                                            \
    return Auth;
#include "tools/strata-serve/Endpoints.def"
  return false;
}

/// The log-probabilities of a completion, in the shape of \p endpoint.
json logprobsJson(Endpoint endpoint, const std::vector<TokenLogprob> &lps,
                  size_t textOffset) {
  auto bytes = [](const std::string &s) {
    json b = json::array();
    for (unsigned char c : s)
      b.push_back(c);
    return b;
  };
  if (endpoint == Endpoint::Chat) {
    json content = json::array();
    for (const TokenLogprob &l : lps) {
      json top = json::array();
      for (const TokenAlternative &a : l.top)
        top.push_back({{"token", a.text},
                       {"logprob", a.logprob},
                       {"bytes", bytes(a.text)}});
      content.push_back({{"token", l.token.text},
                         {"logprob", l.token.logprob},
                         {"bytes", bytes(l.token.text)},
                         {"top_logprobs", top}});
    }
    return {{"content", content}};
  }
  json tokens = json::array(), tokenLogprobs = json::array(),
       top = json::array(), offsets = json::array();
  for (const TokenLogprob &l : lps) {
    tokens.push_back(l.token.text);
    tokenLogprobs.push_back(l.token.logprob);
    json alts = json::object();
    for (const TokenAlternative &a : l.top)
      alts[a.text] = a.logprob;
    top.push_back(alts);
    offsets.push_back(textOffset);
    textOffset += l.token.text.size();
  }
  return {{"tokens", tokens},
          {"token_logprobs", tokenLogprobs},
          {"top_logprobs", top},
          {"text_offset", offsets}};
}

json usageJson(const JobOutput &o) {
  return {{"prompt_tokens", o.promptTokens},
          {"completion_tokens", o.completionTokens},
          {"total_tokens", o.promptTokens + o.completionTokens}};
}

/// One response (or stream) of a generation: what every chunk repeats.
struct Reply {
  Endpoint endpoint;
  std::string id, model;
  int64_t created = 0;
  bool logprobs = false;
  /// Each choice carries its generated ids (return_token_ids, or a model
  /// without a vocabulary, whose output is ids only).
  bool tokenIds = false;

  json base(bool chunk) const {
    const char *object =
        endpoint == Endpoint::Chat
            ? (chunk ? "chat.completion.chunk" : "chat.completion")
            : "text_completion";
    return {
        {"id", id}, {"object", object}, {"created", created}, {"model", model}};
  }
  /// A choice holding \p text (a message, a delta or a completion's text)
  /// and, where asked for, the \p ids it came from.
  json choice(const std::string &text, const std::vector<TokenLogprob> &lps,
              size_t offset, const std::string &finish, bool chunk,
              const std::vector<int32_t> &ids = {}) const {
    json c = {{"index", 0}};
    if (endpoint == Endpoint::Chat) {
      if (chunk)
        c["delta"] = text.empty() ? json::object() : json{{"content", text}};
      else
        c["message"] = {{"role", "assistant"}, {"content", text}};
    } else {
      c["text"] = text;
    }
    c["logprobs"] = logprobs && (!lps.empty() || !chunk)
                        ? logprobsJson(endpoint, lps, offset)
                        : json(nullptr);
    c["finish_reason"] = finish.empty() ? json(nullptr) : json(finish);
    if (tokenIds)
      c["token_ids"] = ids;
    return c;
  }
};

/// What a stream's provider keeps between its calls.
struct StreamState {
  std::shared_ptr<Job> job;
  Reply reply;
  bool includeUsage = false;
  bool started = false;
  size_t offset = 0;
};

/// cpp-httplib 0.11 listens with a backlog of 5 connections: a burst of
/// clients (or of connect/close) overflows it, and the kernel drops their
/// SYNs, which the clients retry only after a second. Listening again on
/// the bound socket raises the backlog (Linux updates it in place).
class Listener : public httplib::Server {
public:
  void raiseBacklog(int backlog) { ::listen(svr_sock_, backlog); }
};

/// "data: JSON\n\n".
std::string event(const json &j) { return "data: " + dump(j) + "\n\n"; }

} // namespace

HttpServer::HttpServer(HttpSettings settings, Scheduler &scheduler,
                       const tokenizer::Tokenizer &tokenizer, ChatFormat chat,
                       Metrics &metrics)
    : settings_(std::move(settings)), scheduler_(scheduler),
      tokenizer_(tokenizer), chat_(std::move(chat)), metrics_(metrics),
      server_(std::make_unique<Listener>()) {
  httplib::Server &s = *server_;
  // The library's default pool has max(8, cores - 1) threads: fewer than
  // the slots and queue may hold streams.
  size_t threads = settings_.threads;
  s.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  s.set_payload_max_length(settings_.maxBody);
  // A client that sends its request slowly (slow-loris) holds a thread
  // for this long at most per read.
  s.set_read_timeout(settings_.readTimeout, 0);
  s.set_write_timeout(30, 0);
  s.set_keep_alive_timeout(5);
#define SERVE_ENDPOINT(Method, Path, Handler, Auth, Help)                      \
  s.Method(Path, [this](const httplib::Request &req, httplib::Response &res) { \
    Handler(req, res);                                                         \
  });
#include "tools/strata-serve/Endpoints.def"
  s.set_pre_routing_handler([this](const httplib::Request &req,
                                   httplib::Response &res) {
    if (!settings_.apiKey.empty() && needsKey(req.path) && !authorized(req)) {
      sendError(res, 401,
                "missing or wrong API key (Authorization: Bearer KEY)");
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  // The library's own refusals (no route, a body over the limit, a bad
  // request line) come with an empty body: give them a JSON error.
  s.set_error_handler([this](const httplib::Request &req,
                             httplib::Response &res) {
    if (!res.body.empty())
      return;
    int status = res.status;
    std::string message =
        status == 404   ? fmt::format("no route {} {}", req.method, req.path)
        : status == 413 ? fmt::format("the body is larger than --max-body {} "
                                      "bytes",
                                      settings_.maxBody)
        : status == 405 ? fmt::format("method {} not allowed", req.method)
                        : fmt::format("HTTP error {}", status);
    sendError(res, status, message);
  });
  s.set_exception_handler([](const httplib::Request &, httplib::Response &res,
                             std::exception_ptr ep) {
    std::string what = "unknown exception";
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception &e) {
      what = e.what();
    } catch (...) {
    }
    sendError(res, 500, "internal error: " + what);
  });
  s.set_logger([this](const httplib::Request &, const httplib::Response &res) {
    ++metrics_.requests;
    if (res.status >= 400)
      ++metrics_.requestErrors;
  });
}

HttpServer::~HttpServer() = default;

int HttpServer::bind(std::string &error) {
  int port = settings_.port;
  if (port == 0)
    port = server_->bind_to_any_port(settings_.host);
  else if (!server_->bind_to_port(settings_.host, port))
    port = -1;
  if (port >= 0)
    static_cast<Listener &>(*server_).raiseBacklog(1024);
  if (port < 0)
    error = fmt::format("cannot listen on {}:{} (in use, or not an address "
                        "of this machine)",
                        settings_.host, settings_.port);
  return port;
}

bool HttpServer::serve() { return server_->listen_after_bind(); }

void HttpServer::stop() { server_->stop(); }

bool HttpServer::authorized(const httplib::Request &req) const {
  // Constant time in the key: every byte of the expected text is compared
  // whatever the client sent, so the time says nothing about how much of a
  // guess was right.
  const std::string expected = "Bearer " + settings_.apiKey;
  const std::string given = req.get_header_value("Authorization");
  unsigned char diff = given.size() != expected.size();
  for (size_t i = 0; i < expected.size(); ++i)
    diff |= static_cast<unsigned char>(expected[i]) ^
            static_cast<unsigned char>(i < given.size() ? given[i] : 0);
  return diff == 0;
}

void HttpServer::completions(const httplib::Request &req,
                             httplib::Response &res) {
  generate(Endpoint::Completions, req, res);
}

void HttpServer::chatCompletions(const httplib::Request &req,
                                 httplib::Response &res) {
  generate(Endpoint::Chat, req, res);
}

void HttpServer::models(const httplib::Request &, httplib::Response &res) {
  json body = {{"object", "list"},
               {"data",
                {{{"id", settings_.modelId},
                  {"object", "model"},
                  {"created", 0},
                  {"owned_by", "strata"}}}}};
  res.set_content(dump(body), "application/json");
}

void HttpServer::health(const httplib::Request &, httplib::Response &res) {
  res.set_content(dump({{"status", "ok"}}), "application/json");
}

void HttpServer::prometheus(const httplib::Request &, httplib::Response &res) {
  res.set_content(metrics_.render(), "text/plain; version=0.0.4");
}

void HttpServer::generate(Endpoint endpoint, const httplib::Request &req,
                          httplib::Response &res) {
  std::string type = req.get_header_value("Content-Type");
  std::transform(type.begin(), type.end(), type.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  if (type.rfind("application/json", 0) != 0)
    return sendError(res, 415,
                     fmt::format("Content-Type must be application/json, not "
                                 "'{}'",
                                 type));
  GenerationRequest r;
  RequestError bad;
  if (!parseRequest(req.body, endpoint, r, bad))
    return sendError(res, 400, bad.message, bad.param);
  // A GGUF without a vocabulary (tokenizer.ggml.model "no_vocab", as
  // real-size shapes-only files): token ids in and out, no text.
  if (!tokenizer_.hasVocab()) {
    const std::string noVocab = "the model's GGUF has no vocabulary (token "
                                "ids in and out)";
    if (endpoint == Endpoint::Chat)
      return sendError(res, 400,
                       noVocab + ": chat needs one; use /v1/completions "
                                 "with 'prompt' as a list of token ids",
                       "messages");
    if (!r.promptIsIds)
      return sendError(res, 400,
                       noVocab + ": give 'prompt' as a list of token ids",
                       "prompt");
    if (!r.stops.empty())
      return sendError(res, 400, noVocab + ": 'stop' strings match text",
                       "stop");
    if (r.logprobs >= 0)
      return sendError(res, 400, noVocab + ": 'logprobs' name tokens by text",
                       "logprobs");
  }

  // The prompt's ids.
  const char *promptField = endpoint == Endpoint::Chat ? "messages" : "prompt";
  std::vector<int32_t> prompt;
  if (r.promptIsIds) {
    prompt = r.promptIds;
    for (size_t i = 0; i < prompt.size(); ++i)
      if (prompt[i] >= settings_.vocab)
        return sendError(res, 400,
                         fmt::format("'prompt[{}]' = {} is not a token id "
                                     "(the vocabulary has {})",
                                     i, prompt[i], settings_.vocab),
                         "prompt");
  } else {
    std::string text = endpoint == Endpoint::Chat
                           ? renderChat(chat_, r.messages, r.enableThinking)
                           : r.promptText;
    std::string error;
    if (!tokenizer_.encode(text, tokenizer::EncodeOptions{}, prompt, error))
      return sendError(res, 400, fmt::format("'{}': {}", promptField, error),
                       promptField);
  }
  const int64_t n = static_cast<int64_t>(prompt.size());
  const int64_t context = settings_.context;
  if (n == 0)
    return sendError(res, 400, fmt::format("'{}' has no tokens", promptField),
                     promptField);
  // As strata-run: the prompt and every generated token but the last must
  // fit the state's positions, prompt + max_tokens <= context.
  if (n >= context)
    return sendError(res, 400,
                     fmt::format("the prompt has {} tokens; the model's "
                                 "context is {} (at most {} prompt tokens "
                                 "and 1 generated)",
                                 n, context, context - 1),
                     promptField);
  int64_t maxTokens = r.maxTokens.value_or(context - n);
  if (n + maxTokens > context)
    return sendError(res, 400,
                     fmt::format("'{}' = {}: the prompt's {} tokens and {} "
                                 "generated make {}, more than the model's "
                                 "context {} (at most {})",
                                 r.maxTokensField, maxTokens, n, maxTokens,
                                 n + maxTokens, context, context - n),
                     r.maxTokensField);

  JobSpec spec;
  spec.prompt = std::move(prompt);
  spec.sampling = r.sampling;
  spec.maxTokens = maxTokens;
  spec.stops = r.stops;
  spec.logprobs = r.logprobs;
  spec.ignoreEos = r.ignoreEos;
  std::shared_ptr<Job> job = scheduler_.submit(std::move(spec));
  if (!job) {
    ++metrics_.rejectedBusy;
    return sendError(res, 503,
                     "the server is busy: every slot is generating and the "
                     "queue is full; retry later");
  }

  Reply reply;
  reply.endpoint = endpoint;
  reply.id = fmt::format(
      "{}-{}", endpoint == Endpoint::Chat ? "chatcmpl" : "cmpl", nextId_++);
  reply.model = settings_.modelId;
  reply.created = static_cast<int64_t>(std::time(nullptr));
  reply.logprobs = r.logprobs >= 0;
  reply.tokenIds = r.returnTokenIds || !tokenizer_.hasVocab();

  if (!r.stream) {
    std::string text;
    std::vector<TokenLogprob> lps;
    std::vector<int32_t> ids;
    JobOutput out;
    for (;;) {
      if (!job->take(out, std::chrono::milliseconds(1000)))
        continue;
      text += out.text;
      ids.insert(ids.end(), out.ids.begin(), out.ids.end());
      for (TokenLogprob &l : out.logprobs)
        lps.push_back(std::move(l));
      if (out.finished)
        break;
    }
    if (!out.error.empty())
      return sendError(res, 500, "generation failed: " + out.error);
    json body = reply.base(false);
    body["choices"] =
        json::array({reply.choice(text, lps, 0, out.finishReason, false, ids)});
    body["usage"] = usageJson(out);
    res.set_content(dump(body), "application/json");
    return;
  }

  auto state = std::make_shared<StreamState>();
  state->job = job;
  state->reply = reply;
  state->includeUsage = r.includeUsage;
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [state](size_t, httplib::DataSink &sink) {
        auto send = [&](const std::string &data) {
          if (sink.write(data.data(), data.size()))
            return true;
          state->job->cancel(); // the client went away
          return false;
        };
        const Reply &rp = state->reply;
        if (!state->started) {
          state->started = true;
          if (rp.endpoint == Endpoint::Chat) {
            json first = rp.base(true);
            json c = rp.choice("", {}, 0, "", true);
            c["delta"] = {{"role", "assistant"}, {"content", ""}};
            first["choices"] = json::array({c});
            if (!send(event(first)))
              return false;
          }
        }
        JobOutput out;
        // While the job waits in the queue or prefills a long prompt there
        // is nothing to send, and only a write tells that the client went
        // away: an SSE comment line (clients skip it) every second.
        while (!state->job->take(out, std::chrono::milliseconds(1000))) {
          if (!sink.is_writable()) {
            state->job->cancel();
            return false;
          }
          if (!send(": waiting\n\n"))
            return false;
        }
        if (!out.error.empty()) {
          json err = {{"error",
                       {{"message", "generation failed: " + out.error},
                        {"type", "server_error"},
                        {"param", nullptr},
                        {"code", nullptr}}}};
          if (!send(event(err)) || !send("data: [DONE]\n\n"))
            return false;
          sink.done();
          return true;
        }
        // A chunk per batch of new text (or of tokens, where they are
        // asked for: a token may add no text).
        if (!out.text.empty() || !out.logprobs.empty() ||
            (rp.tokenIds && !out.ids.empty())) {
          json chunk = rp.base(true);
          chunk["choices"] = json::array({rp.choice(
              out.text, out.logprobs, state->offset, "", true, out.ids)});
          state->offset += out.text.size();
          if (!send(event(chunk)))
            return false;
        }
        if (!out.finished)
          return true;
        json last = rp.base(true);
        last["choices"] =
            json::array({rp.choice("", {}, 0, out.finishReason, true)});
        if (!send(event(last)))
          return false;
        if (state->includeUsage) {
          json usage = rp.base(true);
          usage["choices"] = json::array();
          usage["usage"] = usageJson(out);
          if (!send(event(usage)))
            return false;
        }
        if (!send("data: [DONE]\n\n"))
          return false;
        sink.done();
        return true;
      },
      [state](bool success) {
        if (!success)
          state->job->cancel();
      });
}

} // namespace strata::tools::serve
