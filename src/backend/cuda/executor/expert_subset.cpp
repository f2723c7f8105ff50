#include "backend/cuda/executor/expert_subset.h"

#include "backend/cuda/core/check.h"
#include "backend/cuda/executor/expert_stream.h"
#include "backend/cuda/moe/moe.h"
#include "core/error.h"

namespace k3::cuda {

ExpertSubset::ExpertSubset(const K3Config& config, const std::function<bool(int64_t, int64_t)>& kept, const char* flag)
    : config_(config), layers_(static_cast<size_t>(config.num_layers)) {
  if (!config.moe) throw Error(Where{"", "", flag}, "the model has no routed experts");
  experts_ = config.moe->num_experts;
  kept_.resize(layers_.size());
  counts_.assign(layers_.size(), 0);
  for (int64_t l = 0; l < config.num_layers; ++l) {
    if (!config.is_moe(l)) continue;
    std::vector<bool>& mine = kept_[static_cast<size_t>(l)];
    for (int64_t e = 0; e < experts_; ++e) mine.push_back(kept(l, e));
    for (bool k : mine) counts_[static_cast<size_t>(l)] += k;
    if (counts_[static_cast<size_t>(l)] == 0) {
      throw Error(Where{"", "", flag}, "leaves layer " + std::to_string(l) + " no routed expert on the GPU");
    }
  }
}

uint64_t ExpertSubset::keep(int64_t layer, int role, const DeviceExperts& bank) {
  Layer& l = layers_.at(static_cast<size_t>(layer));
  l.form[role] = bank;
  const std::vector<bool>& mine = kept_[static_cast<size_t>(layer)];
  uint64_t bytes = 0;
  for (const BankArray& a : bank_arrays(bank, experts_)) {
    std::vector<uint8_t>& host = l.bytes[role].emplace_back(a.per_expert * static_cast<size_t>(count(layer)));
    size_t at = 0;
    for (int64_t e = 0; e < experts_; ++e) {
      if (!mine[static_cast<size_t>(e)]) continue;
      K3_CUDA_CHECK(cudaMemcpy(host.data() + at, static_cast<const uint8_t*>(a.base) + static_cast<size_t>(e) * a.per_expert,
                               a.per_expert, cudaMemcpyDeviceToHost));
      at += a.per_expert;
    }
    bytes += a.per_expert * static_cast<size_t>(experts_);
  }
  return bytes;  // the caller gives the whole bank back
}

void ExpertSubset::allocate(Arena& arena, DeviceWeights& weights) {
  for (int64_t layer = 0; layer < config_.num_layers; ++layer) {
    if (!config_.is_moe(layer)) continue;
    Layer& l = layers_[static_cast<size_t>(layer)];
    const int64_t n = count(layer);
    DeviceExpertBanks& banks = weights.layers[static_cast<size_t>(layer)].moe.experts;
    for (int role = 0; role < 2; ++role) {
      const DeviceExperts bank = alloc_bank_like(arena, l.form[role], experts_, n, role == 0 ? "kept experts w13" : "kept experts w2");
      const std::vector<BankArray> arrays = bank_arrays(bank, n);
      if (arrays.size() != l.bytes[role].size()) throw Error("expert subset: a compact bank's layout differs from the bank's");
      for (size_t a = 0; a < arrays.size(); ++a) {
        std::vector<uint8_t>& host = l.bytes[role][a];
        if (host.size() != arrays[a].per_expert * static_cast<size_t>(n)) throw Error("expert subset: a compact bank's array differs in size");
        K3_CUDA_CHECK(cudaMemcpy(arrays[a].base, host.data(), host.size(), cudaMemcpyHostToDevice));
        device_bytes_ += host.size();
        std::vector<uint8_t>().swap(host);
      }
      (role == 0 ? banks.w13 : banks.w2) = bank;
      l.form[role] = DeviceExperts{};
    }
    std::vector<int32_t> map(static_cast<size_t>(experts_), -1);
    int32_t next = 0;
    for (int64_t e = 0; e < experts_; ++e) {
      if (kept(layer, e)) map[static_cast<size_t>(e)] = next++;
    }
    int32_t* device_map = arena.alloc_n<int32_t>(map.size(), "kept expert map");
    K3_CUDA_CHECK(cudaMemcpy(device_map, map.data(), map.size() * sizeof(int32_t), cudaMemcpyHostToDevice));
    l.map = device_map;
  }
}

DeviceTensor ExpertSubset::picks(int64_t layer, const DeviceTensor& ids, Arena& arena, cudaStream_t stream) const {
  const Layer& l = layers_.at(static_cast<size_t>(layer));
  if (l.map == nullptr) throw Error("expert subset: layer " + std::to_string(layer) + " is not a MoE layer");
  const DeviceTensor table = arena.alloc_tensor(DType::kI32, ids.rows, ids.cols, "kept expert picks");
  moe_map_experts(ids, l.map, experts_, table, stream);
  return table;
}

}  // namespace k3::cuda
