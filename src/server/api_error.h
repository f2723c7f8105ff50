// Errors a client of the HTTP API receives, in the OpenAI error object form:
//   {"error": {"message": ..., "type": ..., "param": ..., "code": ...}}
// Anything a client can send that the server refuses becomes an ApiError with a 4xx status (or 503
// while loading, draining or when the queue is full); nothing a client sends yields a 500.
#pragma once

#include <stdexcept>
#include <string>

namespace k3::server {

class ApiError : public std::runtime_error {
 public:
  // `param` names the offending request field ("" when none); `code` is a short machine-readable
  // reason ("" for none).
  ApiError(int status, std::string message, std::string param = "", std::string code = "");

  int status() const { return status_; }
  const std::string& param() const { return param_; }
  const std::string& code() const { return code_; }
  // The OpenAI error "type" for the status: invalid_request_error (400, 404, 405, 413),
  // authentication_error (401), rate_limit_error (429), service_unavailable (503).
  std::string type() const;
  // The JSON body: {"error": {"message","type","param","code"}}; param and code are null when empty.
  std::string body() const;

 private:
  int status_;
  std::string param_, code_;
};

}  // namespace k3::server
