#include "runtime/block_pool.h"

#include <string>

#include "core/error.h"

namespace k3 {

BlockPool::BlockPool(int64_t capacity) {
  if (capacity < 0 || capacity > INT32_MAX) throw Error("BlockPool: capacity " + std::to_string(capacity) + " is out of range");
  refs_.assign(static_cast<size_t>(capacity), 0);
  free_.reserve(static_cast<size_t>(capacity));
  for (int64_t b = capacity - 1; b >= 0; --b) free_.push_back(static_cast<int32_t>(b));
}

std::optional<int32_t> BlockPool::allocate() {
  if (free_.empty()) return std::nullopt;
  const int32_t b = free_.back();
  free_.pop_back();
  refs_[static_cast<size_t>(b)] = 1;
  return b;
}

bool BlockPool::allocate(int64_t n, std::vector<int32_t>& out) {
  if (n < 0 || n > free_count()) return false;
  for (int64_t i = 0; i < n; ++i) out.push_back(*allocate());
  return true;
}

void BlockPool::check(int32_t block, const char* what) const {
  if (block < 0 || block >= capacity()) {
    throw Error(std::string("BlockPool::") + what + ": block " + std::to_string(block) + " is not in a pool of " +
                std::to_string(capacity()));
  }
  if (refs_[static_cast<size_t>(block)] == 0) {
    throw Error(std::string("BlockPool::") + what + ": block " + std::to_string(block) + " is free");
  }
}

void BlockPool::retain(int32_t block) {
  check(block, "retain");
  ++refs_[static_cast<size_t>(block)];
}

void BlockPool::release(int32_t block) {
  check(block, "release");
  if (--refs_[static_cast<size_t>(block)] == 0) free_.push_back(block);
}

void BlockPool::release_all(std::vector<int32_t>& blocks) {
  for (int32_t b : blocks) release(b);
  blocks.clear();
}

int32_t BlockPool::refcount(int32_t block) const {
  if (block < 0 || block >= capacity()) {
    throw Error("BlockPool::refcount: block " + std::to_string(block) + " is not in a pool of " + std::to_string(capacity()));
  }
  return refs_[static_cast<size_t>(block)];
}

}  // namespace k3
