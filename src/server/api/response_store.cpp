#include "server/api/response_store.h"

#include "io/json.h"

namespace k3::server {
namespace {

uint64_t entry_bytes(const std::string& id, const std::string& text) { return id.size() + text.size(); }

}  // namespace

ResponseStore::ResponseStore(size_t max_responses, uint64_t max_bytes) : max_responses_(max_responses), max_bytes_(max_bytes) {}

std::optional<chat::Json> ResponseStore::items(const std::string& id) {
  std::string text;
  {
    std::lock_guard lock(mutex_);
    auto it = by_id_.find(id);
    if (it == by_id_.end()) return std::nullopt;
    lru_.splice(lru_.begin(), lru_, it->second);
    text = it->second->text;
  }
  return parse_json_value<chat::Json>(text, Where{"stored response " + id, "", ""});
}

void ResponseStore::put(const std::string& id, const chat::Json& items) {
  std::string text = chat::dump_output(items);
  std::lock_guard lock(mutex_);
  if (auto it = by_id_.find(id); it != by_id_.end()) erase(it->second);
  if (max_responses_ == 0 || entry_bytes(id, text) > max_bytes_) return;
  bytes_ += entry_bytes(id, text);
  lru_.push_front(Entry{id, std::move(text)});
  by_id_[id] = lru_.begin();
  while (lru_.size() > max_responses_ || bytes_ > max_bytes_) erase(std::prev(lru_.end()));
}

void ResponseStore::erase(std::list<Entry>::iterator it) {
  bytes_ -= entry_bytes(it->id, it->text);
  by_id_.erase(it->id);
  lru_.erase(it);
}

size_t ResponseStore::size() const {
  std::lock_guard lock(mutex_);
  return lru_.size();
}

uint64_t ResponseStore::bytes() const {
  std::lock_guard lock(mutex_);
  return bytes_;
}

}  // namespace k3::server
