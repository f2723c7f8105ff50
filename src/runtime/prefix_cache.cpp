#include "runtime/prefix_cache.h"

#include <algorithm>
#include <string>

#include "core/error.h"

namespace k3 {

struct PrefixCache::Node {
  Node* parent = nullptr;
  std::vector<int64_t> key;  // this block's tokens (empty at the root)
  Block block;
  uint64_t last_used = 0;
  std::map<std::vector<int64_t>, std::unique_ptr<Node>> children;
};

PrefixCache::PrefixCache(int64_t block_tokens, BlockPool* pages, BlockPool* snapshots)
    : block_tokens_(block_tokens), pages_(pages), snapshots_(snapshots), root_(std::make_unique<Node>()) {
  if (block_tokens < 1) throw Error("PrefixCache: block_tokens " + std::to_string(block_tokens) + " must be at least 1");
  if (pages == nullptr) throw Error("PrefixCache: no page pool");
}

PrefixCache::~PrefixCache() {
  // Give back every reference the tree holds, deepest first.
  std::vector<Node*> stack{root_.get()}, order;
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    order.push_back(n);
    for (auto& [key, child] : n->children) stack.push_back(child.get());
  }
  for (Node* n : order) {
    if (n != root_.get()) release(n->block);
  }
}

void PrefixCache::retain(const Block& b) {
  pages_->retain(b.page);
  if (b.snapshot >= 0) snapshots_->retain(b.snapshot);
}

void PrefixCache::release(const Block& b) {
  pages_->release(b.page);
  if (b.snapshot >= 0) snapshots_->release(b.snapshot);
}

PrefixCache::Match PrefixCache::match(std::span<const int64_t> tokens, int64_t max_tokens, bool need_snapshot) {
  const int64_t limit = std::min<int64_t>(max_tokens, static_cast<int64_t>(tokens.size()));
  std::vector<Node*> path;
  Node* n = root_.get();
  for (int64_t start = 0; start + block_tokens_ <= limit; start += block_tokens_) {
    const std::vector<int64_t> key(tokens.begin() + start, tokens.begin() + start + block_tokens_);
    const auto it = n->children.find(key);
    if (it == n->children.end()) break;
    n = it->second.get();
    path.push_back(n);
  }
  if (need_snapshot) {
    while (!path.empty() && path.back()->block.snapshot < 0) path.pop_back();
  }
  Match m;
  ++clock_;
  for (Node* p : path) {
    p->last_used = clock_;
    // Only the last block's snapshot is the caller's resume point; the others' are not retained.
    Block b{p->block.page, p == path.back() ? p->block.snapshot : -1};
    retain(b);
    m.blocks.push_back(b);
  }
  m.tokens = static_cast<int64_t>(path.size()) * block_tokens_;
  return m;
}

void PrefixCache::insert(std::span<const int64_t> tokens, std::span<const Block> blocks) {
  if (static_cast<int64_t>(blocks.size()) * block_tokens_ > static_cast<int64_t>(tokens.size())) {
    throw Error("PrefixCache::insert: " + std::to_string(blocks.size()) + " blocks of " + std::to_string(block_tokens_) +
                " tokens but only " + std::to_string(tokens.size()) + " tokens");
  }
  ++clock_;
  Node* n = root_.get();
  for (size_t i = 0; i < blocks.size(); ++i) {
    const Block& offered = blocks[i];
    if (offered.snapshot >= 0 && snapshots_ == nullptr) throw Error("PrefixCache::insert: a snapshot without a snapshot pool");
    std::vector<int64_t> key(tokens.begin() + static_cast<int64_t>(i) * block_tokens_,
                             tokens.begin() + static_cast<int64_t>(i + 1) * block_tokens_);
    auto it = n->children.find(key);
    if (it == n->children.end()) {
      retain(offered);
      auto child = std::make_unique<Node>();
      child->parent = n;
      child->key = key;
      child->block = offered;
      it = n->children.emplace(std::move(key), std::move(child)).first;
      ++nodes_;
    } else if (it->second->block.snapshot < 0 && offered.snapshot >= 0) {
      snapshots_->retain(offered.snapshot);
      it->second->block.snapshot = offered.snapshot;
    }
    n = it->second.get();
    n->last_used = clock_;
  }
}

int64_t PrefixCache::evict(int64_t want) {
  int64_t freed = 0;
  while (freed < want) {
    Node* victim = nullptr;
    std::vector<Node*> stack{root_.get()};
    while (!stack.empty()) {
      Node* n = stack.back();
      stack.pop_back();
      for (auto& [key, child] : n->children) stack.push_back(child.get());
      if (n == root_.get() || !n->children.empty() || pages_->refcount(n->block.page) > 1) continue;
      if (victim == nullptr || n->last_used < victim->last_used) victim = n;
    }
    if (victim == nullptr) break;
    release(victim->block);
    const std::vector<int64_t> key = victim->key;  // erasing destroys the node that holds it
    victim->parent->children.erase(key);
    --nodes_;
    ++freed;
  }
  return freed;
}

}  // namespace k3
