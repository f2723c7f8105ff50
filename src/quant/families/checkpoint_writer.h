// Writing safetensors checkpoints the way the real releases lay them out, shared by the safetensors
// families' writers: stored names, dtypes of the unquantized tensors, A_log padding, shards with
// model.safetensors.index.json, config files — streamed (family_writer.h).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "io/json.h"
#include "io/safetensors_stream.h"
#include "quant/families/family_writer.h"

namespace k3 {

// Stored spelling of a logical name: Kimi-K3 checkpoints carry the multimodal "language_model."
// prefix; Kimi-Linear checkpoints (transformers save_pretrained) name the dense MLP of layers below
// first_k_dense_replace "block_sparse_moe.{gate,up,down}_proj".
std::string stored_tensor_name(const K3Config& config, const std::string& logical);

std::vector<uint8_t> f32_bytes(const float* v, size_t n);
std::vector<uint8_t> bf16_bytes(const float* v, size_t n);  // round to nearest even

// [UNCONFIRMED] Shards hold up to this many payload bytes (Hugging Face's save_pretrained default
// is 5 GB); a checkpoint gets at least two shards, as make-tiny's always had.
inline constexpr uint64_t kMaxShardBytes = uint64_t{5} << 30;

// The files model-0000i-of-0000n.safetensors plus model.safetensors.index.json (or one
// model.safetensors when n == 1). Tensors fill the shards by bytes in declaration order (a module's
// tensors may straddle two shards); each file lays its tensors out as SafetensorsWriter does.
class ShardedSafetensorsSink final : public TensorSink {
 public:
  // shards == 0: two, or more so that none exceeds kMaxShardBytes.
  explicit ShardedSafetensorsSink(int shards = 0) : shards_(shards) {}

  size_t declare(std::string name, Dtype dtype, std::vector<uint64_t> shape);

  size_t size() const override { return tensors_.size(); }
  uint64_t nbytes(size_t tensor) const override { return tensors_.at(tensor).nbytes; }
  uint64_t total_bytes() const override { return total_; }
  void open(const std::string& dir) override;
  void write(size_t tensor, uint64_t offset, std::span<const uint8_t> bytes) override;
  void close(PayloadPolicy policy) override;

 private:
  struct Tensor {
    std::string name;
    Dtype dtype;
    std::vector<uint64_t> shape;
    uint64_t nbytes = 0;
    size_t shard = 0, index = 0;  // where open() placed it
  };
  int shards_;
  std::vector<Tensor> tensors_;
  uint64_t total_ = 0;
  std::string dir_;
  std::vector<SafetensorsStreamWriter> files_;
  std::vector<std::string> file_names_;
};

// Whole payloads of a unit's tensors, in the order they were given.
using Payloads = std::vector<std::vector<uint8_t>>;
// Payloads moved in (an initializer list would copy each one).
template <class... Bytes>
Payloads payloads(Bytes&&... bytes) {
  Payloads out;
  out.reserve(sizeof...(bytes));
  (out.push_back(std::forward<Bytes>(bytes)), ...);
  return out;
}

// A safetensors family's write plan under construction.
class SafetensorsPlanBuilder {
 public:
  explicit SafetensorsPlanBuilder(const FloatSource& source);

  const FloatSource& source() const { return source_; }
  const K3Config& config() const { return source_.config(); }
  // Declares a tensor under the stored spelling of `logical`; returns its id.
  size_t declare(const std::string& logical, Dtype dtype, std::vector<uint64_t> shape);
  // A unit whose `produce` returns one whole payload per tensor of `tensors`, in order.
  void add_unit(std::string label, std::string format, std::vector<size_t> tensors,
                std::function<Payloads()> produce);

  // An unquantized parameter as the releases store it: KDA conv weights, A_log, dt_bias and o_norm
  // in F32 (A_log of kimi-k3 zero-padded to [head_dim], of kimi-linear as [1,1,H,1]), everything else
  // in `dtype` (BF16 or F32). Expert banks become one unit per expert, experts.{e}.{w}.weight.
  void add_unquantized(const ParamSpec& spec, Dtype dtype);

  // The plan: config.json = config_doc; `files` are the family's other files.
  WritePlan build(Json config_doc, std::vector<std::pair<std::string, std::string>> files = {});

 private:
  const FloatSource& source_;
  std::unique_ptr<ShardedSafetensorsSink> sink_;
  std::vector<WriteUnit> units_;
};

// config.json (as given) and generation_config.json (token ids from the config).
void write_config_files(const std::string& dir, const Json& config_doc);
// A text file of a checkpoint; throws k3::Error naming it when it cannot be written.
void write_text_file(const std::string& path, const std::string& text);

}  // namespace k3
