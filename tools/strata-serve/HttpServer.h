//===- HttpServer.h - the OpenAI-compatible HTTP layer ----------*- C++ -*-===//
//
// Routes (Endpoints.def) on cpp-httplib's threaded server. A generation
// request is read and checked here (Request.h), its prompt rendered
// (ChatFormat.h) and tokenized, then handed to the Scheduler as a Job; the
// handler's thread waits for the job's output and writes the response,
// whole or as server-sent events (OpenAI's chunk objects, then
// "data: [DONE]"). A client that goes away mid-stream cancels its job.
//
// Every error is a JSON body in OpenAI's shape, {"error": {"message",
// "type", "param", "code"}}, with a 4xx status for the client's mistakes
// (400 bad field, 401 key, 404 route, 413 body too large, 415 content
// type), 503 when the slots and the queue are full, 500 when the model
// failed.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "tools/strata-serve/ChatFormat.h"
#include "tools/strata-serve/Metrics.h"
#include "tools/strata-serve/Request.h"

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

namespace httplib {
class Server;
struct Request;
struct Response;
} // namespace httplib
namespace strata::tokenizer {
class Tokenizer;
} // namespace strata::tokenizer

namespace strata::tools::serve {

class Scheduler;

/// The server's settings that the HTTP layer reads.
struct HttpSettings {
  std::string host = "127.0.0.1";
  int port = 8080;
  std::string apiKey; ///< "" : no key needed
  size_t maxBody = 1 << 20;
  /// Threads that answer connections: every slot and queue place may hold
  /// one for a whole generation, and a few more answer /health and the
  /// refusals.
  size_t threads = 16;
  /// Seconds a connection may take to send its request (slow clients).
  int readTimeout = 5;
  std::string modelId; ///< /v1/models' id and every response's model
  int64_t context = 0; ///< positions of a slot
  int64_t vocab = 0;   ///< token ids are in [0, vocab)
};

/// The HTTP server (see the file comment).
class HttpServer {
public:
  HttpServer(HttpSettings settings, Scheduler &scheduler,
             const tokenizer::Tokenizer &tokenizer, ChatFormat chat,
             Metrics &metrics);
  ~HttpServer();

  /// Binds to settings.host:port (port 0: any free port). Returns the port,
  /// or -1 with \p error set.
  int bind(std::string &error);
  /// Serves until stop(); false if the server failed.
  bool serve();
  /// Makes serve() return (from any thread).
  void stop();

private:
#define SERVE_ENDPOINT(Method, Path, Handler, Auth, Help)                      \
  void Handler(const httplib::Request &req, httplib::Response &res);
#include "tools/strata-serve/Endpoints.def"

  /// Both generation endpoints.
  void generate(Endpoint endpoint, const httplib::Request &req,
                httplib::Response &res);
  /// True if the request carries the API key (or none is needed).
  bool authorized(const httplib::Request &req) const;

  HttpSettings settings_;
  Scheduler &scheduler_;
  const tokenizer::Tokenizer &tokenizer_;
  ChatFormat chat_;
  Metrics &metrics_;
  std::unique_ptr<httplib::Server> server_;
  std::atomic<uint64_t> nextId_{1};
};

} // namespace strata::tools::serve
