// Stored /v1/responses, for previous_response_id: each response's whole conversation (the items
// it was given, its predecessors' included, then its output items), in memory, least recently used
// first out, bounded by a count and by bytes (the items' JSON text). Thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include "chat/json_text.h"

namespace k3::server {

class ResponseStore {
 public:
  // max_responses 0 stores nothing.
  ResponseStore(size_t max_responses, uint64_t max_bytes);

  // The items of a stored response (now the most recently used); nullopt when unknown or evicted.
  std::optional<chat::Json> items(const std::string& id);
  // Stores (or replaces) `id`, then evicts the least recently used until both bounds hold; a
  // conversation larger than max_bytes alone is not kept.
  void put(const std::string& id, const chat::Json& items);

  size_t size() const;
  uint64_t bytes() const;

 private:
  struct Entry {
    std::string id, text;  // the items as JSON text
  };
  void erase(std::list<Entry>::iterator it);

  size_t max_responses_;
  uint64_t max_bytes_;
  mutable std::mutex mutex_;
  std::list<Entry> lru_;  // most recently used first
  std::unordered_map<std::string, std::list<Entry>::iterator> by_id_;
  uint64_t bytes_ = 0;
};

}  // namespace k3::server
