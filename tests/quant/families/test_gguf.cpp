#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>

#include "core/numeric.h"
#include "core/sha256.h"
#include "family_test_util.h"
#include "io/gguf.h"
#include "quant/families/expert_pack.h"
#include "quant/formats/ggml/ggml_dequant.h"
#include "quant/formats/ggml/ggml_quantize.h"

namespace k3 {
namespace {

namespace fs = std::filesystem;
using test::plan_headers_only;
using test::problems_text;

// One make-tiny checkpoint per (family, arch) for the whole file; tests copy it before changing it.
const test::TinyCheckpoint& make_tiny(FamilyId family, TinyArch arch) {
  static std::map<std::pair<FamilyId, TinyArch>, test::TinyCheckpoint> cache;
  auto it = cache.find({family, arch});
  if (it == cache.end()) it = cache.emplace(std::pair{family, arch}, test::make_tiny(family, arch)).first;
  return it->second;
}
std::vector<float> dequant(GgmlType type, const std::vector<uint8_t>& bytes, size_t n) {
  std::vector<float> out(n);
  dequantize_row(type, bytes.data(), out.data(), static_cast<int64_t>(n));
  return out;
}

// What the writer stored for the master value, decoded by k3's reference.
std::vector<float> stored(GgmlType type, const std::vector<float>& master, uint64_t row) {
  return dequant(type, quantize_tensor(type, master, row), master.size());
}

bool has(const Binding& b, Transform t) { return std::find(b.transforms.begin(), b.transforms.end(), t) != b.transforms.end(); }

// kv_b rebuilt independently: split into k_b/v_b as llama.cpp does, quantize Q4_0/Q2_K, reassemble.
std::vector<float> split_kv_b_roundtrip(const K3Config& c, const std::vector<float>& w) {
  const uint64_t H = c.mla.num_heads, dn = c.mla.qk_nope_head_dim, dv = c.mla.v_head_dim, r = c.mla.kv_lora_rank;
  std::vector<float> k(H * r * dn), v(H * dv * r), out(w.size());
  for (uint64_t h = 0; h < H; ++h)
    for (uint64_t row = 0; row < dn + dv; ++row)
      for (uint64_t col = 0; col < r; ++col) {
        const float x = w[(h * (dn + dv) + row) * r + col];
        if (row < dn) k[(h * r + col) * dn + row] = x;
        else v[(h * dv + row - dn) * r + col] = x;
      }
  const auto kq = stored(GgmlType::Q4_0, k, dn), vq = stored(GgmlType::Q2_K, v, r);
  for (uint64_t h = 0; h < H; ++h)
    for (uint64_t row = 0; row < dn + dv; ++row)
      for (uint64_t col = 0; col < r; ++col)
        out[(h * (dn + dv) + row) * r + col] = row < dn ? kq[(h * r + col) * dn + row] : vq[(h * dv + row - dn) * r + col];
  return out;
}

double relative_rms(const std::vector<float>& got, const std::vector<float>& want) {
  double err = 0, ref = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    err += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
    ref += double(want[i]) * want[i];
  }
  return std::sqrt(err / std::max(ref, 1e-30));
}

// [sanity bound] relative RMS error of each storage type against the float master.
double error_bound(const std::string& storage) {
  if (storage == "q8_0") return 0.01;
  if (storage == "q6_K") return 0.03;
  if (storage == "q4_0" || storage == "q4_K") return 0.12;
  if (storage == "q3_K") return 0.25;
  if (storage == "q2_K" || storage == "q4_0+q2_K") return 0.45;
  if (storage == "F16" || storage == "BF16") return 0.005;
  return 0.0;
}

// Every parameter equals k3's dequant of the bytes the writer stored for the master, exactly;
// and is close to the master.
void expect_plan_matches_master(const test::TinyCheckpoint& t, const LoadPlan& plan) {
  ASSERT_TRUE(plan.ok()) << problems_text(plan);
  ASSERT_EQ(plan.bindings.size(), t.master.params.size());
  PlanFiles files(plan);
  for (size_t i = 0; i < plan.params.size(); ++i) {
    const ParamSpec& spec = plan.params[i];
    const Binding& b = plan.bindings[i];
    const auto got = materialize(b, spec, files);
    const auto& master = t.master.at(spec.name);
    ASSERT_EQ(got.size(), master.size()) << spec.name;
    std::vector<float> want(master.size());
    if (has(b, Transform::OnesFromResScore)) {
      std::fill(want.begin(), want.end(), 1.0f);
    } else if (has(b, Transform::ProjFromResScore)) {
      const auto& norm = t.master.at(spec.name.substr(0, spec.name.size() - 12) + "_norm.weight");
      for (size_t j = 0; j < want.size(); ++j) want[j] = norm[j] * master[j];
    } else if (has(b, Transform::ALogFromNegExp)) {
      for (size_t j = 0; j < want.size(); ++j) {
        want[j] = std::log(-(-std::exp(master[j])));
        EXPECT_NEAR(got[j], master[j], 1e-6 * std::max(1.0f, std::fabs(master[j]))) << spec.name;
      }
    } else if (b.scheme.kind == SchemeKind::GgmlSplitKvB) {
      want = split_kv_b_roundtrip(t.master.config, master);
    } else if (b.scheme.kind == SchemeKind::Ggml) {
      want = stored(find_ggml_type(b.scheme.storage)->type, master, spec.shape.back());
    } else {
      ASSERT_EQ(b.scheme.kind, SchemeKind::Dense) << spec.name;
      for (size_t j = 0; j < want.size(); ++j) {
        want[j] = b.scheme.storage == "F16"    ? decode_f16(encode_f16(master[j]))
                  : b.scheme.storage == "BF16" ? decode_bf16(encode_bf16(master[j]))
                                               : master[j];
      }
    }
    for (size_t j = 0; j < want.size(); ++j) ASSERT_EQ(got[j], want[j]) << spec.name << "[" << j << "] " << b.scheme.name();
    const bool quantized = b.scheme.kind != SchemeKind::Dense;
    if (quantized || b.scheme.storage != "F32") {
      EXPECT_LT(relative_rms(got, master), error_bound(b.scheme.storage)) << spec.name << " " << b.scheme.name();
    }
  }
}

TEST(GgufFamily, KimiK3EveryParameterIsTheDequantOfTheWrittenBytes) {
  const auto& t = make_tiny(FamilyId::Gguf, TinyArch::KimiK3);
  ASSERT_TRUE(fs::exists(t.dir + "/model-00001-of-00002.gguf"));
  ASSERT_TRUE(fs::exists(t.dir + "/model-00002-of-00002.gguf"));
  const LoadPlan plan = plan_headers_only(t.dir);
  EXPECT_EQ(plan.family, "gguf");
  EXPECT_TRUE(plan.caps.quantized_latent_projections);
  EXPECT_FALSE(plan.caps.split_gguf_kv_b);
  EXPECT_FALSE(plan.caps.experts_from_pack);
  EXPECT_EQ(plan.files.size(), 2u);
  expect_plan_matches_master(t, plan);
}

TEST(GgufFamily, KimiLinearEveryParameterIsTheDequantOfTheWrittenBytes) {
  const auto& t = make_tiny(FamilyId::Gguf, TinyArch::KimiLinear);
  const LoadPlan plan = plan_headers_only(t.dir);
  expect_plan_matches_master(t, plan);
  // Kimi-Linear expert rows are 128 wide: Q4_0 banks, sliced per expert.
  const auto& b = plan.bindings[plan.index_of("model.layers.1.block_sparse_moe.experts.w1.weight")];
  EXPECT_EQ(b.scheme.name(), "GGUF:q4_0");
  ASSERT_EQ(b.transforms, std::vector<Transform>{Transform::SliceExpert});
  ASSERT_EQ(b.parts.at(0).tensors.size(), 8u);
  EXPECT_EQ(b.parts[0].tensors[1].offset - b.parts[0].tensors[0].offset, 256u * 128 / 32 * 18);
}

TEST(GgufExpertPackFamily, KimiK3EveryParameterIsTheDequantOfTheWrittenBytes) {
  const auto& t = make_tiny(FamilyId::GgufExpertPack, TinyArch::KimiK3);
  const LoadPlan plan = plan_headers_only(t.dir);
  EXPECT_EQ(plan.family, "gguf-expert-pack");
  EXPECT_TRUE(plan.caps.experts_from_pack);
  EXPECT_TRUE(plan.caps.split_gguf_kv_b);
  EXPECT_TRUE(plan.caps.quantized_latent_projections);
  expect_plan_matches_master(t, plan);
  // Routed banks stay in the GGUF (the pack is a slice of it) but are skipped there.
  EXPECT_EQ(plan.skipped.size(), 5u * 3);
}

// Routed experts are zero-copy slices of the pack, byte-identical to the GGUF bank slices.
TEST(GgufExpertPackFamily, ExpertsAreAlignedPackSlicesOfTheGgufBanks) {
  const auto& t = make_tiny(FamilyId::GgufExpertPack, TinyArch::KimiK3);
  const LoadPlan plan = plan_headers_only(t.dir);
  ASSERT_TRUE(plan.ok()) << problems_text(plan);
  ASSERT_EQ(plan.files.size(), 3u);
  EXPECT_EQ(plan.files[2], t.dir + "/kimi-k3-experts.ggmlmoepack");
  const auto gguf = GgufModel::open(t.dir + "/model-00001-of-00002.gguf");
  PlanFiles files(plan);
  for (const char* w : {"w1", "w3", "w2"}) {
    const auto& b = plan.bindings[plan.index_of(std::string("model.layers.2.block_sparse_moe.experts.") + w + ".weight")];
    EXPECT_EQ(b.scheme.name(), std::string(w) == "w2" ? "GGUF:q3_K" : "GGUF:q2_K");
    const std::string bank = std::string("blk.2.ffn_") + (std::string(w) == "w1" ? "gate" : std::string(w) == "w3" ? "up" : "down") + "_exps.weight";
    const auto bank_bytes = gguf.tensor_data(*gguf.find_tensor(bank));
    const auto& slices = b.parts.at(0).tensors;
    ASSERT_EQ(slices.size(), 8u);
    for (size_t e = 0; e < slices.size(); ++e) {
      EXPECT_EQ(slices[e].file, 2u);
      EXPECT_EQ(slices[e].name, bank);
      EXPECT_EQ(slices[e].offset % 512, 0u);
      const auto bytes = files.bytes(slices[e]);
      ASSERT_EQ(std::memcmp(bytes.data(), bank_bytes.data() + e * slices[e].nbytes, slices[e].nbytes), 0) << bank << " " << e;
    }
  }
}

// The trap: split GGUF kv_b only when the family says so.
TEST(GgufFamily, OnlyTheExpertPackFamilyPlansSplitKvB) {
  const std::string param = "model.layers.3.self_attn.kv_b_proj.weight";
  const auto& plain = make_tiny(FamilyId::Gguf, TinyArch::KimiK3);
  const LoadPlan p = plan_headers_only(plain.dir);
  const Binding& whole = p.bindings[p.index_of(param)];
  EXPECT_EQ(whole.scheme.kind, SchemeKind::Ggml);
  ASSERT_EQ(whole.parts.size(), 1u);
  EXPECT_EQ(whole.parts[0].tensors.at(0).name, "blk.3.attn_kv_b.weight");

  const auto& packed = make_tiny(FamilyId::GgufExpertPack, TinyArch::KimiK3);
  const LoadPlan q = plan_headers_only(packed.dir);
  const Binding& split = q.bindings[q.index_of(param)];
  EXPECT_EQ(split.scheme.kind, SchemeKind::GgmlSplitKvB);
  ASSERT_EQ(split.parts.size(), 2u);
  EXPECT_EQ(split.parts[0].role, "k_b");
  EXPECT_EQ(split.parts[0].tensors.at(0).name, "blk.3.attn_k_b.weight");
  EXPECT_EQ(split.parts[0].tensors.at(0).shape, (std::vector<uint64_t>{4, 256, 32}));
  EXPECT_EQ(split.parts[1].role, "v_b");
  EXPECT_EQ(split.parts[1].tensors.at(0).shape, (std::vector<uint64_t>{4, 32, 256}));

  // The ExpertPack's GGUF without its manifest is a plain GGUF: the split tensors are refused,
  // not silently bound as split.
  const std::string dir = ::testing::TempDir() + "/k3_gguf_split_without_pack";
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const char* f : {"config.json", "model-00001-of-00002.gguf", "model-00002-of-00002.gguf"}) fs::copy_file(packed.dir + "/" + f, dir + "/" + f);
  const LoadPlan r = plan_headers_only(dir);
  EXPECT_FALSE(r.caps.split_gguf_kv_b);
  const std::string text = problems_text(r);
  EXPECT_NE(text.find(dir + "/model-00001-of-00002.gguf: parameter '" + param + "': missing GGUF tensor 'blk.3.attn_kv_b.weight'"),
            std::string::npos) << text;
  EXPECT_NE(text.find("tensor 'blk.3.attn_k_b.weight': split MLA K/V tensors need a family with split GGUF kv_b (the ExpertPack "
                      "family); this family binds attn_kv_b whole"),
            std::string::npos) << text;
}

// ---- negative tests: copies of a checkpoint with one thing changed ---------------------------

std::string copy_dir(const std::string& src, const std::string& name) {
  const std::string dst = ::testing::TempDir() + "/" + name;
  fs::remove_all(dst);
  fs::copy(src, dst);
  return dst;
}

Json read_json(const std::string& path) {
  std::ifstream in(path);
  return Json::parse(in);
}
void write_json(const std::string& path, const Json& j) { std::ofstream(path) << j.dump(2); }

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}
void write_bytes(const std::string& path, const std::vector<uint8_t>& b) {
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

// Rewrites every GGUF shard of dir in place; edit may change a tensor's name, type, ne and bytes.
using TensorEdit = std::function<void(std::string&, GgmlType&, std::vector<uint64_t>&, std::vector<uint8_t>&)>;
void rewrite_shards(const std::string& dir, const TensorEdit& edit) {
  for (const char* f : {"model-00001-of-00002.gguf", "model-00002-of-00002.gguf"}) {
    const std::string path = dir + "/" + f;
    GgufWriter w;
    {
      const GgufFile in = GgufFile::open(path);
      for (const auto& kv : in.metadata()) w.set(kv.key, kv.value);
      for (const auto& t : in.tensors()) {
        std::string name = t.name;
        GgmlType type = t.type;
        std::vector<uint64_t> ne(t.ne.begin(), t.ne.begin() + t.n_dims);
        const auto data = in.tensor_data(t);
        std::vector<uint8_t> bytes(data.begin(), data.end());
        edit(name, type, ne, bytes);
        w.add_tensor(name, type, ne, bytes);
      }
    }
    const auto image = w.to_bytes();
    write_bytes(path, image);
  }
}

const std::string kPack = "/kimi-k3-experts.ggmlmoepack";
const std::string kManifest = "/expert_pack_manifest.json";

TEST(GgufExpertPackFamily, WrongRoleDtypeIsReported) {
  const auto& t = make_tiny(FamilyId::GgufExpertPack, TinyArch::KimiK3);
  const std::string dir = copy_dir(t.dir, "k3_pack_role_dtype");
  Json m = read_json(dir + kManifest);
  m["expert_pack"]["roles"]["gate"]["dtype"] = "Q4_K";
  m["expert_pack"]["roles"]["gate"]["dtype_id"] = 12;
  write_json(dir + kManifest, m);
  const LoadPlan plan = plan_headers_only(dir);
  ASSERT_EQ(plan.problems.size(), 1u) << problems_text(plan);
  EXPECT_EQ(plan.problems[0].text(),
            dir + kManifest + ": field 'expert_pack.roles.gate': expert pack role 'gate' must be Q2_K (dtype_id 10), got Q4_K (12)");
}

TEST(GgufExpertPackFamily, BadMagicIsReported) {
  const auto& t = make_tiny(FamilyId::GgufExpertPack, TinyArch::KimiK3);
  const std::string dir = copy_dir(t.dir, "k3_pack_magic");
  auto bytes = read_bytes(dir + kPack);
  bytes[0] = 'X';
  write_bytes(dir + kPack, bytes);
  const LoadPlan plan = plan_headers_only(dir);
  ASSERT_EQ(plan.problems.size(), 1u) << problems_text(plan);
  EXPECT_EQ(plan.problems[0].text(), dir + kPack + ": field 'magic': bad magic (expected GGMLMOEPACKv1)");
}

// Shifts entry `i`'s offset and re-signs the index in the manifest, so only the layout check fires.
std::string pack_with_entry_offset(const std::string& src, const std::string& name, uint64_t entry, int64_t delta) {
  const std::string dir = copy_dir(src, name);
  auto bytes = read_bytes(dir + kPack);
  uint8_t* p = bytes.data() + kKimiPackHeaderBytes + entry * kKimiPackEntryBytes + 136;
  uint64_t offset = 0;
  std::memcpy(&offset, p, 8);
  offset += delta;
  std::memcpy(p, &offset, 8);
  write_bytes(dir + kPack, bytes);
  Json m = read_json(dir + kManifest);
  const uint64_t count = 5 * 8 * 3;
  m["expert_pack"]["index_sha256"] = sha256_hex(std::span<const uint8_t>(bytes.data(), kKimiPackHeaderBytes + count * kKimiPackEntryBytes));
  write_json(dir + kManifest, m);
  return dir;
}

TEST(GgufExpertPackFamily, MisalignedOffsetIsReported) {
  const auto& t = make_tiny(FamilyId::GgufExpertPack, TinyArch::KimiK3);
  const std::string dir = pack_with_entry_offset(t.dir, "k3_pack_misaligned", 4, 64);
  const LoadPlan plan = plan_headers_only(dir);
  ASSERT_EQ(plan.problems.size(), 1u) << problems_text(plan);
  const uint64_t data_start = read_json(dir + kManifest)["expert_pack"]["data_start"];
  const uint64_t offset = data_start + 21504 * 2 + 28160 + 21504 + 64;  // object 1, gate role, + 64
  EXPECT_EQ(plan.problems[0].text(), dir + kPack + ": tensor 'blk.1.ffn_gate_exps.weight': field 'offset': entry 4: offset " +
                                         std::to_string(offset) + " is not a multiple of the alignment 512");
}

TEST(GgufExpertPackFamily, RoleOffsetOutOfPhysicalOrderIsReported) {
  const auto& t = make_tiny(FamilyId::GgufExpertPack, TinyArch::KimiK3);
  const std::string dir = pack_with_entry_offset(t.dir, "k3_pack_order", 1, 512);
  const LoadPlan plan = plan_headers_only(dir);
  ASSERT_EQ(plan.problems.size(), 1u) << problems_text(plan);
  EXPECT_EQ(plan.problems[0].text(), dir + kPack + ": tensor 'blk.1.ffn_gate_exps.weight': field 'offset': entry 1: role offset 22016 "
                                         "inside its object, expected 21504 (physical order up, gate, down)");
}

TEST(GgufExpertPackFamily, IndexHashMismatchIsReported) {
  const auto& t = make_tiny(FamilyId::GgufExpertPack, TinyArch::KimiK3);
  const std::string dir = copy_dir(t.dir, "k3_pack_sha");
  Json m = read_json(dir + kManifest);
  const std::string actual = m["expert_pack"]["index_sha256"];
  m["expert_pack"]["index_sha256"] = std::string(64, '0');
  write_json(dir + kManifest, m);
  const LoadPlan plan = plan_headers_only(dir);
  ASSERT_EQ(plan.problems.size(), 1u) << problems_text(plan);
  EXPECT_EQ(plan.problems[0].text(), dir + kPack + ": field 'index_sha256': index sha256 " + actual + " does not match the manifest's " +
                                         std::string(64, '0'));
}

// Replaces one tensor by a requantization of its own dequantized values in another type.
TensorEdit retype(const std::string& target, GgmlType to) {
  return [target, to](std::string& name, GgmlType& type, std::vector<uint64_t>& ne, std::vector<uint8_t>& bytes) {
    if (name != target) return;
    uint64_t n = 1;
    for (auto d : ne) n *= d;
    std::vector<float> values(n);
    dequantize_row(type, bytes.data(), values.data(), static_cast<int64_t>(n));
    bytes = quantize_tensor(to, values, ne[0]);
    type = to;
  };
}

TEST(GgufExpertPackFamily, SplitKMustStayQ4_0AndVQ2_K) {
  const auto& t = make_tiny(FamilyId::GgufExpertPack, TinyArch::KimiK3);
  const std::string dir = copy_dir(t.dir, "k3_pack_kv_types");
  rewrite_shards(dir, retype("blk.3.attn_k_b.weight", GgmlType::Q8_0));
  rewrite_shards(dir, retype("blk.5.attn_v_b.weight", GgmlType::Q4_K));
  const LoadPlan plan = plan_headers_only(dir);
  // Both tensors live in the second shard; the manifest's source inventory notices the change too.
  const std::string shard = dir + "/model-00002-of-00002.gguf";
  ASSERT_EQ(plan.problems.size(), 5u) << problems_text(plan);
  EXPECT_EQ(plan.problems[1].text(), dir + kManifest + ": field 'source.tensors[89]': tensor 'blk.3.attn_k_b.weight' type Q8_0 does not "
                                                       "match the manifest dtype Q4_0");
  EXPECT_EQ(plan.problems[3].text(), shard + ": tensor 'blk.3.attn_k_b.weight': field 'type': Kimi-K3 MLA K projection must remain GGUF Q4_0");
  EXPECT_EQ(plan.problems[4].text(), shard + ": tensor 'blk.5.attn_v_b.weight': field 'type': Kimi-K3 MLA V projection must remain GGUF Q2_K");
}

// The pack format is Kimi-K3's: Kimi-Linear's 128-wide expert rows cannot be Q2_K/Q3_K.
TEST(GgufExpertPackFamily, MakeTinyRefusesKimiLinear) {
  try {
    test::make_tiny(FamilyId::GgufExpertPack, TinyArch::KimiLinear);
    FAIL() << "an ExpertPack of Kimi-Linear must not be written";
  } catch (const Error& e) {
    EXPECT_EQ(e.detail(), "the Kimi GGML MoE ExpertPack is a Kimi-K3 (MoE) format");
  }
}

TEST(GgufFamily, UnknownTensorNameIsReported) {
  const auto& t = make_tiny(FamilyId::Gguf, TinyArch::KimiK3);
  const std::string dir = copy_dir(t.dir, "k3_gguf_unknown_name");
  rewrite_shards(dir, [](std::string& name, GgmlType&, std::vector<uint64_t>&, std::vector<uint8_t>&) {
    if (name == "blk.1.attn_q.weight") name = "blk.1.attn_qx.weight";
  });
  const LoadPlan plan = plan_headers_only(dir);
  ASSERT_EQ(plan.problems.size(), 2u) << problems_text(plan);
  EXPECT_EQ(plan.problems[0].text(), dir + "/model-00001-of-00002.gguf: parameter 'model.layers.1.self_attn.q_proj.weight': "
                                           "missing GGUF tensor 'blk.1.attn_q.weight'");
  EXPECT_EQ(plan.problems[1].text(), dir + "/model-00001-of-00002.gguf: tensor 'blk.1.attn_qx.weight': unsupported Kimi-K3 GGUF tensor name");
}

TEST(GgufFamily, MissingShardFailsNamingIt) {
  const auto& t = make_tiny(FamilyId::Gguf, TinyArch::KimiLinear);
  const std::string dir = copy_dir(t.dir, "k3_gguf_missing_shard");
  fs::remove(dir + "/model-00002-of-00002.gguf");
  try {
    plan_checkpoint(dir);
    FAIL() << "planning a split set without its second shard must fail";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(dir + "/model-00002-of-00002.gguf"), std::string::npos) << e.what();
  }
}

TEST(GgufFamily, MetadataDisagreeingWithConfigIsReported) {
  const auto& t = make_tiny(FamilyId::Gguf, TinyArch::KimiLinear);
  const std::string dir = copy_dir(t.dir, "k3_gguf_metadata");
  Json doc = read_json(dir + "/config.json");
  doc["num_experts_per_token"] = 3;
  write_json(dir + "/config.json", doc);
  const LoadPlan plan = plan_headers_only(dir);
  ASSERT_EQ(plan.problems.size(), 1u) << problems_text(plan);
  EXPECT_EQ(plan.problems[0].text(),
            dir + "/model-00001-of-00002.gguf: field 'kimi-linear.expert_used_count': is 2 but config.json has 3");
}

TEST(GgufFamily, PositiveSsmAIsRefusedAtMaterialize) {
  const auto& t = make_tiny(FamilyId::Gguf, TinyArch::KimiK3);
  const std::string dir = copy_dir(t.dir, "k3_gguf_ssm_a");
  rewrite_shards(dir, [](std::string& name, GgmlType&, std::vector<uint64_t>&, std::vector<uint8_t>& bytes) {
    if (name != "blk.0.ssm_a") return;
    const float one = 1.0f;
    std::memcpy(bytes.data(), &one, 4);
  });
  const LoadPlan plan = plan_headers_only(dir);
  ASSERT_TRUE(plan.ok()) << problems_text(plan);
  PlanFiles files(plan);
  const int64_t i = plan.index_of("model.layers.0.self_attn.A_log");
  EXPECT_THROW(materialize(plan.bindings[i], plan.params[i], files), Error);
}

}  // namespace
}  // namespace k3
