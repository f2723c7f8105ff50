#include "server/api_error.h"

#include <nlohmann/json.hpp>

namespace k3::server {

ApiError::ApiError(int status, std::string message, std::string param, std::string code)
    : std::runtime_error(std::move(message)), status_(status), param_(std::move(param)), code_(std::move(code)) {}

std::string ApiError::type() const {
  switch (status_) {
    case 401: return "authentication_error";
    case 429: return "rate_limit_error";
    case 503: return "service_unavailable";
    default: return status_ >= 500 ? "server_error" : "invalid_request_error";
  }
}

std::string ApiError::body() const {
  nlohmann::ordered_json e;
  e["message"] = what();
  e["type"] = type();
  e["param"] = param_.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(param_);
  e["code"] = code_.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(code_);
  nlohmann::ordered_json body;
  body["error"] = std::move(e);
  return body.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

}  // namespace k3::server
