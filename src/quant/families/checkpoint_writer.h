// Writing safetensors checkpoints the way the real releases lay them out, shared by the
// safetensors families of `k3 make-tiny`: stored names, dtypes of the unquantized tensors,
// A_log padding, shards with model.safetensors.index.json, config files.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "io/json.h"
#include "io/safetensors.h"
#include "quant/families/master.h"

namespace k3 {

// Stored spelling of a logical name: Kimi-K3 checkpoints carry the multimodal "language_model."
// prefix; Kimi-Linear checkpoints (transformers save_pretrained) name the dense MLP of layers below
// first_k_dense_replace "block_sparse_moe.{gate,up,down}_proj".
std::string stored_tensor_name(const K3Config& config, const std::string& logical);

std::vector<uint8_t> f32_bytes(const float* v, size_t n);
std::vector<uint8_t> bf16_bytes(const float* v, size_t n);  // round to nearest even

// Collects tensors and writes them as `shards` files model-0000i-of-0000n.safetensors plus the
// index (or a single model.safetensors when shards == 1).
class ShardedCheckpointWriter {
 public:
  void add(std::string name, Dtype dtype, std::vector<uint64_t> shape, std::vector<uint8_t> bytes);
  void write(const std::string& dir, int shards) const;

 private:
  struct Tensor {
    std::string name;
    Dtype dtype;
    std::vector<uint64_t> shape;
    std::vector<uint8_t> bytes;
  };
  std::vector<Tensor> tensors_;
};

// Adds an unquantized parameter as the releases store it: KDA conv weights, A_log, dt_bias and
// o_norm in F32 (A_log of kimi-k3 zero-padded to [head_dim], of kimi-linear as [1,1,H,1]),
// everything else in `dtype` (BF16 or F32). Expert banks become experts.{e}.{w}.weight.
void add_unquantized(ShardedCheckpointWriter& out, const MasterWeights& master, const ParamSpec& spec, Dtype dtype);

// config.json (as given) and generation_config.json (token ids from the config).
void write_config_files(const std::string& dir, const Json& config_doc);

}  // namespace k3
