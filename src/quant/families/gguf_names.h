// Kimi tensors in GGUF (spec quant-formats §5.4, kimi_k3_gguf.py), shared by the GGUF family's planner
// (gguf.cpp) and writer (gguf_write.cpp): tensor names, the derived tensors (ssm_a = −exp(A_log),
// *_res_score = norm ⊙ proj, the split kv_b), the llama.cpp hyper-parameter keys.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "io/gguf.h"
#include "model/config.h"
#include "model/parameters.h"

namespace k3::gguf {

using Shape = std::vector<uint64_t>;

// [UNCONFIRMED] prefix of the shard files k3 writes ("model-00001-of-00002.gguf").
inline constexpr char kShardPrefix[] = "model";
// [UNCONFIRMED] pack file name written next to the manifest (the manifest names it in expert_pack.path).
inline constexpr char kPackFileName[] = "kimi-k3-experts.ggmlmoepack";

const char* gguf_architecture(const K3Config& c);  // "kimi-k3" | "kimi-linear"
std::string blk(int64_t layer, const std::string& suffix);  // "blk.L.<suffix>"
// The GGUF tensor that stores a parameter (for split kv_b see split_kv_b_names).
std::string gguf_tensor_name(const K3Config& c, const ParamSpec& spec);
std::pair<std::string, std::string> split_kv_b_names(int64_t layer);  // attn_k_b, attn_v_b

bool ends_with(const std::string& s, const std::string& tail);
bool is_res_norm(const ParamSpec& s);  // AttnRes norm: folded into *_res_score
bool is_res_proj(const ParamSpec& s);  // AttnRes projection: stored as *_res_score
bool is_a_log(const ParamSpec& s);
bool is_kv_b(const ParamSpec& s);
Shape squeezed(const Shape& s);  // without the dimensions of size 1

bool is_float_type(GgmlType t);
std::string float_dtype_name(GgmlType t);  // "F32" | "F16" | "BF16"

std::optional<int64_t> integer_of(const GgufValue& v);
// The llama.cpp-style hyper-parameter keys k3 writes and cross-checks, with the config's values.
std::vector<std::pair<std::string, int64_t>> metadata_integers(const K3Config& c);

}  // namespace k3::gguf
