#include "quant/families/expert_pack.h"

#include <bit>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <regex>

#include "core/sha256.h"
#include "io/file.h"
#include "io/positional_file.h"

namespace k3 {
namespace fs = std::filesystem;

namespace {

constexpr GgmlType kRoleTypes[3] = {GgmlType::Q2_K, GgmlType::Q2_K, GgmlType::Q3_K};

void put_u32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
void put_u64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint32_t get_u32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
uint64_t get_u64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

std::string pack_entry_name(int64_t layer, int role) {
  return "blk." + std::to_string(layer) + ".ffn_" + kPackRoleNames[role] + "_exps.weight";
}

std::string u64s(uint64_t v) { return std::to_string(v); }

std::string shape_text(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

}  // namespace

uint64_t PackRoleSpec::expert_bytes() const { return rows * ggml_row_size(type, cols); }

std::array<PackRoleSpec, 3> kimi_pack_roles(const K3Config& c) {
  const uint64_t inter = static_cast<uint64_t>(c.moe->moe_intermediate_size);
  const uint64_t width = static_cast<uint64_t>(c.moe->routed_expert_hidden_size.value_or(c.hidden_size));
  return {PackRoleSpec{kRoleTypes[0], inter, width}, PackRoleSpec{kRoleTypes[1], inter, width},
          PackRoleSpec{kRoleTypes[2], width, inter}};
}

std::vector<int64_t> moe_layer_ids(const K3Config& c) {
  std::vector<int64_t> ids;
  for (int64_t l = 0; l < c.num_layers; ++l) {
    if (c.is_moe(l)) ids.push_back(l);
  }
  return ids;
}

uint64_t kimi_pack_alignment(const std::array<PackRoleSpec, 3>& roles) {
  uint64_t a = kKimiPackMaxAlignment;
  for (const auto& r : roles) {
    while (a > 1 && r.expert_bytes() % a != 0) a /= 2;
  }
  return a;
}

std::string manifest_dtype_name(GgmlType type) {
  std::string s(ggml_type_name(type));
  for (char& ch : s) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  return s;
}

std::string inventory_sha256(const std::vector<GgufTensorRecord>& tensors) {
  Sha256 h;
  for (const auto& t : tensors) h.update(t.name + "\t" + std::to_string(t.shard_index) + "\t" + t.dtype + "\n");
  return to_hex(h.finish());
}

Json kimi_hard_constraints(int64_t top_k) {
  return {{"all_selected_experts_must_execute", true},
          {"expert_pruning_allowed", false},
          {"requantization_allowed", false},
          {"top_k", top_k},
          {"top_k_is_immutable", true}};
}

// ---- writing -------------------------------------------------------------------------------

void write_kimi_expert_pack(const std::string& dir, const std::string& pack_name, const KimiPackSource& src) {
  const K3Config& c = *src.config;
  const std::array<PackRoleSpec, 3> roles = kimi_pack_roles(c);
  const std::vector<int64_t> layers = moe_layer_ids(c);
  const uint64_t experts = static_cast<uint64_t>(c.moe->num_experts);
  const uint64_t alignment = kimi_pack_alignment(roles);
  const uint64_t count = layers.size() * experts * 3;
  const uint64_t data_start = align_up(kKimiPackHeaderBytes + count * kKimiPackEntryBytes, alignment);
  uint64_t object_bytes = 0;
  for (const auto& r : roles) object_bytes += r.expert_bytes();

  const uint64_t file_size = data_start + layers.size() * experts * object_bytes;
  // Header and index in memory (152 bytes per entry); payload streamed one expert slice at a time.
  std::vector<uint8_t> head(data_start, 0);
  std::memcpy(head.data(), kKimiPackMagic, 16);
  put_u32(head.data() + 16, kKimiPackVersion);
  put_u32(head.data() + 20, static_cast<uint32_t>(kKimiPackHeaderBytes));
  put_u64(head.data() + 24, count);
  put_u64(head.data() + 32, data_start);
  uint64_t entry = 0, offset = data_start;
  for (size_t li = 0; li < layers.size(); ++li) {
    for (uint64_t e = 0; e < experts; ++e) {
      for (int role = 0; role < 3; ++role, ++entry) {
        const uint64_t n = roles[role].expert_bytes();
        uint8_t* p = head.data() + kKimiPackHeaderBytes + entry * kKimiPackEntryBytes;
        const std::string name = pack_entry_name(layers[li], role);
        std::memcpy(p, name.data(), name.size());
        put_u32(p + 128, static_cast<uint32_t>(e));
        put_u64(p + 136, offset);
        put_u64(p + 144, n);
        offset += n;
      }
    }
  }
  const std::string pack_path = (fs::path(dir) / pack_name).string();
  const std::string index_sha256 = sha256_hex(std::span<const uint8_t>(head.data(), kKimiPackHeaderBytes + count * kKimiPackEntryBytes));
  Sha256 whole;
  {
    PositionalFile out(pack_path, file_size);
    out.write_at(0, head);
    whole.update(head);
    std::vector<uint8_t> slice;
    offset = data_start;
    for (size_t li = 0; li < layers.size(); ++li) {
      for (uint64_t e = 0; e < experts; ++e) {
        for (int role = 0; role < 3; ++role) {
          slice.resize(roles[role].expert_bytes());
          src.read_expert(li, role, e, slice);
          out.write_at(offset, slice);
          whole.update(slice);
          offset += slice.size();
        }
      }
    }
    out.close();
  }

  Json role_json = Json::object();
  for (int r = 0; r < 3; ++r) {
    role_json[kPackRoleNames[r]] = {{"dtype", manifest_dtype_name(roles[r].type)},
                                    {"dtype_id", static_cast<uint32_t>(roles[r].type)},
                                    {"expert_bytes", roles[r].expert_bytes()},
                                    {"logical_shape", {roles[r].cols, roles[r].rows}}};
  }
  Json shards = Json::array(), tensors = Json::array();
  for (const auto& s : src.shards) shards.push_back({{"index", s.index}, {"path", s.path}, {"size", s.size}});
  for (const auto& t : src.tensors) tensors.push_back({{"name", t.name}, {"shard_index", t.shard_index}, {"dtype", t.dtype}});
  const Json manifest = {
      {"format", kKimiPackFormat},
      {"complete", true},
      {"hard_constraints", kimi_hard_constraints(c.moe->experts_per_token)},
      {"model",
       {{"num_hidden_layers", c.num_layers},
        {"num_experts", c.moe->num_experts},
        {"num_experts_per_token", c.moe->experts_per_token},
        {"active_moe_layer_ids", layers},
        {"config_sha256", src.config_sha256}}},
      {"expert_pack",
       {{"path", pack_name},
        {"size", file_size},
        {"data_start", data_start},
        {"alignment", alignment},
        {"object_bytes", object_bytes},
        {"index_sha256", index_sha256},
        {"sha256", to_hex(whole.finish())},
        {"physical_role_order", {"up", "gate", "down"}},
        {"roles", role_json}}},
      {"source", {{"inventory_sha256", inventory_sha256(src.tensors)}, {"shards", shards}, {"tensors", tensors}}},
  };
  const std::string manifest_path = (fs::path(dir) / kExpertPackManifestName).string();
  std::ofstream out(manifest_path);
  out << manifest.dump(2) << "\n";
  if (!out) throw Error(Where{manifest_path, "", ""}, "write failed");
}

// ---- planning ------------------------------------------------------------------------------

namespace {

class PackPlanner {
 public:
  PackPlanner(const std::string& dir, const K3Config& config, const GgufModel& gguf, LoadPlan& plan)
      : dir_(dir), config_(config), gguf_(gguf), plan_(plan),
        manifest_(load_json_file((fs::path(dir) / kExpertPackManifestName).string())),
        roles_(kimi_pack_roles(config)), layers_(moe_layer_ids(config)) {}

  PlannedPack run() {
    PlannedPack out;
    out.layers = layers_;
    out.roles = roles_;
    const size_t before = plan_.problems.size();
    check_header_fields();
    const JsonNode pack = manifest_.object("expert_pack");
    check_model(manifest_.object("model"));
    check_roles(pack);
    check_source(manifest_.object("source"));
    const bool manifest_ok = plan_.problems.size() == before;
    // The pack file itself (header + index) is validated whenever its geometry is readable.
    std::vector<std::array<std::vector<SourceTensor>, 3>> slices;
    const bool pack_ok = check_pack(pack, slices);
    if (manifest_ok && pack_ok) out.slices = std::move(slices);
    return out;
  }

 private:
  void problem(const JsonNode& node, const std::string& message) { plan_.problems.push_back({node.where(), message}); }
  void pack_problem(const std::string& tensor, const std::string& field, const std::string& message) {
    plan_.problems.push_back({Where{pack_path_, tensor, field}, message});
  }

  void check_header_fields() {
    const JsonNode format = manifest_.at("format");
    if (format.as<std::string>() != kKimiPackFormat) {
      problem(format, "unsupported expert pack format '" + format.as<std::string>() + "' (expected " + kKimiPackFormat + ")");
    }
    const JsonNode complete = manifest_.at("complete");
    if (!complete.as<bool>()) problem(complete, "expert pack manifest is not complete");
    const JsonNode hard = manifest_.at("hard_constraints");
    const Json want = kimi_hard_constraints(config_.moe->experts_per_token);
    if (hard.value() != want) problem(hard, "hard constraints must be exactly " + want.dump());
  }

  void check_count(const JsonNode& model, const char* key, int64_t want, const char* config_key) {
    const JsonNode n = model.at(key);
    if (n.as<int64_t>() != want) {
      problem(n, "is " + std::to_string(n.as<int64_t>()) + " but config.json has " + config_key + " = " + std::to_string(want));
    }
  }

  void check_model(const JsonNode& model) {
    check_count(model, "num_hidden_layers", config_.num_layers, "num_hidden_layers");
    check_count(model, "num_experts", config_.moe->num_experts, "num_experts");
    check_count(model, "num_experts_per_token", config_.moe->experts_per_token, "num_experts_per_token");
    const JsonNode active = model.at("active_moe_layer_ids");
    if (active.as<std::vector<int64_t>>() != layers_) {
      problem(active, "is " + shape_text(active.as<std::vector<int64_t>>()) + " but the config's MoE layers are " + shape_text(layers_));
    }
    const std::string config_path = (fs::path(dir_) / "config.json").string();
    const JsonNode sha = model.at("config_sha256");
    const std::string actual = sha256_file_hex(config_path);
    if (sha.as<std::string>() != actual) problem(sha, "does not match the sha256 of config.json (" + actual + ")");
  }

  void check_roles(const JsonNode& pack) {
    const JsonNode order = pack.at("physical_role_order");
    if (order.as<std::vector<std::string>>() != std::vector<std::string>{"up", "gate", "down"}) {
      problem(order, "must be [\"up\", \"gate\", \"down\"]");
    }
    const JsonNode roles = pack.object("roles");
    uint64_t object_bytes = 0;
    for (int r = 0; r < 3; ++r) {
      const JsonNode role = roles.object(kPackRoleNames[r]);
      const PackRoleSpec& want = roles_[r];
      const std::string dtype = role.required<std::string>("dtype");
      const int64_t id = role.required<int64_t>("dtype_id");
      const std::string want_dtype = manifest_dtype_name(want.type);
      if (dtype != want_dtype || id != static_cast<int64_t>(want.type)) {
        problem(role, std::string("expert pack role '") + kPackRoleNames[r] + "' must be " + want_dtype + " (dtype_id " +
                          std::to_string(static_cast<uint32_t>(want.type)) + "), got " + dtype + " (" + std::to_string(id) + ")");
      }
      const JsonNode bytes = role.at("expert_bytes");
      if (bytes.as<uint64_t>() != want.expert_bytes()) {
        problem(bytes, "is " + u64s(bytes.as<uint64_t>()) + " but one " + want_dtype + " expert of " + u64s(want.rows) + " rows of " +
                           u64s(want.cols) + " takes " + u64s(want.expert_bytes()));
      }
      const JsonNode shape = role.at("logical_shape");
      const std::vector<int64_t> want_shape{static_cast<int64_t>(want.cols), static_cast<int64_t>(want.rows)};
      if (shape.as<std::vector<int64_t>>() != want_shape) {
        problem(shape, "is " + shape_text(shape.as<std::vector<int64_t>>()) + " but the config implies (ne0, ne1) = " + shape_text(want_shape));
      }
      object_bytes += want.expert_bytes();
    }
    const JsonNode obj = pack.at("object_bytes");
    if (obj.as<uint64_t>() != object_bytes) problem(obj, "is " + u64s(obj.as<uint64_t>()) + " but the role sizes add up to " + u64s(object_bytes));
  }

  void check_source(const JsonNode& source) {
    // Shards: the manifest's set must be exactly the GGUF split set, with unchanged sizes.
    const JsonNode shards = source.at("shards");
    const auto& files = gguf_.files();
    std::vector<JsonNode> listed = shards.elements();
    if (listed.size() != files.size()) {
      problem(shards, "lists " + std::to_string(listed.size()) + " shards but the GGUF split set has " + std::to_string(files.size()));
    }
    for (const JsonNode& s : listed) {
      const int64_t index = s.required<int64_t>("index");
      std::string path;
      try {
        path = path_inside(dir_, s.required<std::string>("path"), s.at("path").where());
      } catch (const Error& e) {
        plan_.problems.push_back({e.where(), e.detail()});
        continue;
      }
      const uint64_t size = s.required<uint64_t>("size");
      if (!fs::is_regular_file(path)) {
        problem(s, "shard file missing: " + path);
        continue;
      }
      if (index < 0 || static_cast<size_t>(index) >= files.size() || fs::path(files[index].path()).filename() != fs::path(path).filename()) {
        problem(s, "shard " + std::to_string(index) + " (" + path + ") is not split " + std::to_string(index) + " of the GGUF set");
        continue;
      }
      if (files[index].file_size() != size) {
        problem(s, "shard size changed: manifest " + u64s(size) + ", file " + u64s(files[index].file_size()));
      }
    }
    // Tensors: same names, shards and dtypes as the GGUF, and the inventory digest.
    const JsonNode tensors = source.at("tensors");
    std::vector<GgufTensorRecord> records;
    std::map<std::string, bool> seen;
    for (const JsonNode& t : tensors.elements()) {
      GgufTensorRecord rec{t.required<std::string>("name"), static_cast<uint32_t>(t.required_int("shard_index", 0, std::numeric_limits<uint32_t>::max())),
                           t.required<std::string>("dtype")};
      records.push_back(rec);
      seen[rec.name] = true;
      const GgufTensorInfo* info = gguf_.find_tensor(rec.name);
      if (info == nullptr) {
        problem(t, "manifest tensor '" + rec.name + "' is missing from the GGUF shards");
        continue;
      }
      if (info->file_index != rec.shard_index) {
        problem(t, "tensor '" + rec.name + "' is in shard " + std::to_string(info->file_index) + ", manifest says " + std::to_string(rec.shard_index));
      }
      if (manifest_dtype_name(info->type) != rec.dtype) {
        problem(t, "tensor '" + rec.name + "' type " + manifest_dtype_name(info->type) + " does not match the manifest dtype " + rec.dtype);
      }
    }
    for (const auto& info : gguf_.tensors()) {
      if (!seen.count(info.name)) problem(tensors, "GGUF tensor '" + info.name + "' is not in the manifest inventory");
    }
    const JsonNode digest = source.at("inventory_sha256");
    const std::string actual = inventory_sha256(records);
    if (digest.as<std::string>() != actual) problem(digest, "does not match the sha256 of the listed tensor inventory (" + actual + ")");
  }

  // Header and index of the pack file. Returns false (after one problem) at the first failure,
  // as the store treats each as fatal; the index digest is checked separately.
  bool check_pack(const JsonNode& pack, std::vector<std::array<std::vector<SourceTensor>, 3>>& slices) {
    pack_path_ = path_inside(dir_, pack.required<std::string>("path"), pack.at("path").where());
    const std::shared_ptr<File> file = File::open(pack_path_);
    const uint32_t file_index = static_cast<uint32_t>(plan_.files.size());
    plan_.files.push_back(pack_path_);
    const uint64_t file_size = file->size();
    const JsonNode size = pack.at("size");
    if (size.as<uint64_t>() != file_size) {
      problem(size, "pack file is " + u64s(file_size) + " bytes but the manifest says " + u64s(size.as<uint64_t>()));
      return false;
    }
    const JsonNode align_node = pack.at("alignment");
    const uint64_t alignment = align_node.as<uint64_t>();
    if (alignment == 0 || !std::has_single_bit(alignment)) {
      problem(align_node, "must be a nonzero power of two, got " + u64s(alignment));
      return false;
    }
    if (file_size < kKimiPackHeaderBytes) {
      pack_problem("", "header", "pack file is shorter than its " + u64s(kKimiPackHeaderBytes) + "-byte header");
      return false;
    }
    const std::vector<uint8_t> header = file->read_range(0, kKimiPackHeaderBytes, "pack header");
    if (std::memcmp(header.data(), kKimiPackMagic, 16) != 0) {
      pack_problem("", "magic", "bad magic (expected GGMLMOEPACKv1)");
      return false;
    }
    if (const uint32_t v = get_u32(header.data() + 16); v != kKimiPackVersion) {
      pack_problem("", "version", "unsupported version " + std::to_string(v) + " (expected 1)");
      return false;
    }
    if (const uint32_t hs = get_u32(header.data() + 20); hs != kKimiPackHeaderBytes) {
      pack_problem("", "header_size", "is " + std::to_string(hs) + ", expected 40");
      return false;
    }
    const uint64_t experts = static_cast<uint64_t>(config_.moe->num_experts);
    const uint64_t count = get_u64(header.data() + 24);
    const uint64_t want_count = layers_.size() * experts * 3;
    if (count != want_count) {
      pack_problem("", "index_count", "is " + u64s(count) + ", expected " + u64s(want_count) + " (MoE layers x experts x 3)");
      return false;
    }
    const uint64_t data_start = get_u64(header.data() + 32);
    const uint64_t index_end = kKimiPackHeaderBytes + count * kKimiPackEntryBytes;
    if (data_start != pack.at("data_start").as<uint64_t>()) {
      pack_problem("", "data_start", "is " + u64s(data_start) + " but the manifest says " + u64s(pack.at("data_start").as<uint64_t>()));
      return false;
    }
    if (data_start < index_end || data_start % alignment != 0 || data_start > file_size) {
      pack_problem("", "data_start", "is " + u64s(data_start) + ": must be a multiple of " + u64s(alignment) + " in [" + u64s(index_end) +
                                         ", " + u64s(file_size) + "]");
      return false;
    }
    const std::vector<uint8_t> index = file->read_range(0, index_end, "pack index");

    const JsonNode index_sha = pack.at("index_sha256");
    const std::string actual_sha = sha256_hex(index);
    bool ok = true;
    const JsonNode sha = pack.at("sha256");
    if (valid_sha256_hex(sha.as<std::string>())) {
      plan_.digests.push_back({pack_path_, sha.as<std::string>(), sha.where()});
    } else {
      problem(sha, "must be 64 lower-case hex digits of the pack's sha256, not all zero; got '" + sha.as<std::string>() + "'");
      ok = false;
    }
    if (index_sha.as<std::string>() != actual_sha) {
      pack_problem("", "index_sha256", "index sha256 " + actual_sha + " does not match the manifest's " + index_sha.as<std::string>());
      ok = false;
    }
    slices.assign(layers_.size(), {});
    static const std::regex kName(R"(blk\.(\d+)\.ffn_(up|gate|down)_exps\.weight)");
    uint64_t previous_end = data_start, object_start = 0;
    for (uint64_t i = 0; i < count; ++i) {
      const uint8_t* p = index.data() + kKimiPackHeaderBytes + i * kKimiPackEntryBytes;
      const std::string name(reinterpret_cast<const char*>(p), strnlen(reinterpret_cast<const char*>(p), kKimiPackNameBytes));
      const int32_t expert = static_cast<int32_t>(get_u32(p + 128));
      const uint32_t reserved = get_u32(p + 132);
      const uint64_t offset = get_u64(p + 136), nbytes = get_u64(p + 144);
      const uint64_t object = i / 3;
      const int role = static_cast<int>(i % 3);
      const size_t layer_pos = object / experts;
      const int64_t want_expert = static_cast<int64_t>(object % experts);
      const std::string want_name = pack_entry_name(layers_[layer_pos], role);
      const std::string at = "entry " + u64s(i) + ": ";
      std::smatch m;
      if (!std::regex_match(name, m, kName)) {
        pack_problem(name, "name", at + "name is not blk.L.ffn_{up,gate,down}_exps.weight");
        return false;
      }
      if (name != want_name || expert != want_expert) {
        pack_problem(name, "expert", at + "is expert " + std::to_string(expert) + " of " + name + ", expected expert " +
                                         std::to_string(want_expert) + " of " + want_name);
        return false;
      }
      if (reserved != 0) {
        pack_problem(name, "reserved", at + "reserved is " + std::to_string(reserved) + ", must be 0");
        return false;
      }
      const uint64_t role_bytes = roles_[role].expert_bytes();
      if (nbytes != role_bytes) {
        pack_problem(name, "nbytes", at + "nbytes " + u64s(nbytes) + " is not the " + kPackRoleNames[role] + " role size " + u64s(role_bytes));
        return false;
      }
      if (offset % alignment != 0) {
        pack_problem(name, "offset", at + "offset " + u64s(offset) + " is not a multiple of the alignment " + u64s(alignment));
        return false;
      }
      if (offset < previous_end) {
        pack_problem(name, "offset", at + "offset " + u64s(offset) + " is before the end of the previous entry " + u64s(previous_end));
        return false;
      }
      if (!range_fits(offset, nbytes, file_size)) {
        pack_problem(name, "offset", at + "bytes [" + u64s(offset) + ", +" + u64s(nbytes) + ") run past the end of the file (" + u64s(file_size) + ")");
        return false;
      }
      if (role == 0) object_start = offset;
      uint64_t want_in_object = 0;
      for (int r = 0; r < role; ++r) want_in_object += roles_[r].expert_bytes();
      if (offset - object_start != want_in_object) {
        pack_problem(name, "offset", at + "role offset " + u64s(offset - object_start) + " inside its object, expected " +
                                         u64s(want_in_object) + " (physical order up, gate, down)");
        return false;
      }
      previous_end = offset + nbytes;
      const PackRoleSpec& spec = roles_[role];
      slices[layer_pos][role].push_back(SourceTensor{file_index, name, std::string(ggml_type_name(spec.type)),
                                                     {spec.rows, spec.cols}, offset, nbytes});
    }
    if (previous_end != file_size) {
      pack_problem("", "size", u64s(file_size - previous_end) + " trailing bytes after the last object");
      return false;
    }
    return ok;
  }

  std::string dir_;
  const K3Config& config_;
  const GgufModel& gguf_;
  LoadPlan& plan_;
  JsonNode manifest_;
  std::array<PackRoleSpec, 3> roles_;
  std::vector<int64_t> layers_;
  std::string pack_path_;
};

}  // namespace

PlannedPack plan_kimi_expert_pack(const std::string& dir, const K3Config& config, const GgufModel& gguf, LoadPlan& plan) {
  return PackPlanner(dir, config, gguf, plan).run();
}

}  // namespace k3
