// The Kimi GGML MoE ExpertPack (spec quant-formats §5.1–§5.2, §5.6): a manifest JSON next to a
// pack file whose payload is, per (MoE layer, expert), the up | gate | down GGUF byte slices of
// that expert, contiguous and aligned; a 40-byte header and a 152-byte-per-entry index precede it.
// Planning reads the manifest and the pack's header + index only (pread), never the payload.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "io/gguf.h"
#include "io/json.h"
#include "model/config.h"
#include "quant/plan/load_plan.h"

namespace k3 {

// [UNCONFIRMED] file name of the manifest in a checkpoint directory (sglang takes manifest_path
// from the loader config; k3 detects the family by this name).
inline constexpr char kExpertPackManifestName[] = "expert_pack_manifest.json";
inline constexpr char kKimiPackFormat[] = "SGLANG-KIMI-GGMLMOEPACK-ADAPTER-v1";
inline constexpr char kKimiPackMagic[16] = {'G', 'G', 'M', 'L', 'M', 'O', 'E', 'P', 'A', 'C', 'K', 'v', '1', 0, 0, 0};
inline constexpr uint32_t kKimiPackVersion = 1;
inline constexpr uint64_t kKimiPackHeaderBytes = 40;
inline constexpr uint64_t kKimiPackEntryBytes = 152;
inline constexpr uint64_t kKimiPackNameBytes = 128;
// The pack builder's fixed alignment (O_DIRECT reads).
inline constexpr uint64_t kKimiPackMaxAlignment = 4096;

// Physical role order inside an object.
enum class PackRole : uint8_t { Up = 0, Gate = 1, Down = 2 };
inline constexpr std::array<const char*, 3> kPackRoleNames = {"up", "gate", "down"};

// One role's GGUF slice of one expert: `rows` rows of `cols` values (GGUF ne = [cols, rows]).
struct PackRoleSpec {
  GgmlType type = GgmlType::Q2_K;
  uint64_t rows = 0;
  uint64_t cols = 0;
  uint64_t expert_bytes() const;
};

// What the config implies for the three roles (the dtypes the format requires: Q2_K up/gate,
// Q3_K down), in physical order. Dimensions: gate/up [moe_inter, width], down [width, moe_inter],
// width = routed_expert_hidden_size or hidden_size.
std::array<PackRoleSpec, 3> kimi_pack_roles(const K3Config& config);
// 0-based indices of the MoE layers (manifest active_moe_layer_ids).
std::vector<int64_t> moe_layer_ids(const K3Config& config);

// [UNCONFIRMED] alignment k3 writes: the builder's 4096 when every role size is a multiple of it
// (the real K3 dims), else the largest power of two dividing all role sizes (tiny dims), so that
// objects stay contiguous AND every role offset is aligned, as the validation requires.
uint64_t kimi_pack_alignment(const std::array<PackRoleSpec, 3>& roles);

// The GGUF shard set the pack was cut from (manifest `source`).
struct GgufShardRecord {
  uint32_t index = 0;  // split.no
  std::string path;    // relative to the manifest's directory
  uint64_t size = 0;
};
struct GgufTensorRecord {
  std::string name;
  uint32_t shard_index = 0;
  std::string dtype;  // gguf-py spelling: "Q2_K", "F32", "BF16"
};
// Upper-case GGML type name as gguf-py spells it ("q4_K" -> "Q4_K").
std::string manifest_dtype_name(GgmlType type);
// [UNCONFIRMED] sha256 over "name\tshard_index\tdtype\n" lines in inventory order.
std::string inventory_sha256(const std::vector<GgufTensorRecord>& tensors);
// The exact hard_constraints object for a top-k.
Json kimi_hard_constraints(int64_t top_k);

// Writes the pack file and the manifest, streamed: read_expert(i, role, e, dst) fills dst with
// expert e's GGUF slice (dst.size() = that role's expert_bytes) of layer moe_layer_ids[i].
struct KimiPackSource {
  const K3Config* config = nullptr;
  std::string config_sha256;
  std::function<void(size_t layer_index, int role, uint64_t expert, std::span<uint8_t> dst)> read_expert;
  std::vector<GgufShardRecord> shards;
  std::vector<GgufTensorRecord> tensors;
};
void write_kimi_expert_pack(const std::string& dir, const std::string& pack_name, const KimiPackSource& source);

// The validated pack as plan sources: slices[i][role] = one SourceTensor per expert of layer
// moe_layer_ids[i]; all empty when the manifest or the pack failed validation (problems recorded).
struct PlannedPack {
  std::vector<int64_t> layers;
  std::array<PackRoleSpec, 3> roles;
  std::vector<std::array<std::vector<SourceTensor>, 3>> slices;
  bool valid() const { return !slices.empty(); }
};

// Validates manifest, source shards and pack header + index (every check of spec §5.2/§5.6) and
// appends the pack file to plan.files (the GGUF shards must already be plan files 0..n-1).
// Manifest values that disagree are problems; an unreadable or malformed manifest throws.
PlannedPack plan_kimi_expert_pack(const std::string& dir, const K3Config& config, const GgufModel& gguf,
                                  LoadPlan& plan);

}  // namespace k3
