#include "model/state.h"

#include <algorithm>
#include <string>

#include "core/error.h"

namespace k3 {

LatentPages::LatentPages(int64_t blocks, int64_t block_tokens, int64_t row_width, std::vector<int64_t> mla_index)
    : block_tokens_(block_tokens), row_width_(row_width), mla_layers_(0), mla_index_(std::move(mla_index)),
      pages_(static_cast<size_t>(blocks)) {
  for (int64_t i : mla_index_) mla_layers_ += i >= 0;
}

uint64_t LatentPages::block_bytes() const {
  return static_cast<uint64_t>(mla_layers_ * block_tokens_ * row_width_) * sizeof(float);
}

float* LatentPages::page(int32_t block, int64_t layer) const {
  if (block < 0 || block >= blocks()) throw Error("latent cache: block " + std::to_string(block) + " outside the pool");
  auto& p = pages_[static_cast<size_t>(block)];
  if (!p) p = std::make_unique<float[]>(static_cast<size_t>(mla_layers_ * block_tokens_ * row_width_));
  return p.get() + mla_index_[static_cast<size_t>(layer)] * block_tokens_ * row_width_;
}

float* LatentPages::row(const std::vector<int32_t>& table, int64_t layer, int64_t position) {
  return page(table[static_cast<size_t>(position / block_tokens_)], layer) + position % block_tokens_ * row_width_;
}

const float* LatentPages::row(const std::vector<int32_t>& table, int64_t layer, int64_t position) const {
  return page(table[static_cast<size_t>(position / block_tokens_)], layer) + position % block_tokens_ * row_width_;
}

}  // namespace k3
