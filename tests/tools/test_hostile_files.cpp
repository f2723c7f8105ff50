// Hostile files around a checkpoint, through the CLI: FIFOs where files are expected (must not
// block), shard names that leave the folder, a folder with two checkpoint formats, the
// ExpertPack payload digest, large GGUF metadata arrays.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "cli_runner.h"
#include "io/gguf.h"

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using k3::test::CliResult;
using k3::test::run_k3;
using k3::test::slurp;

// Under `timeout 10`: a blocked open shows up as exit 124 instead of a hung test.
CliResult run_k3_guarded(const std::string& args) {
  static int counter = 0;
  const std::string base = ::testing::TempDir() + "/guarded_" + std::to_string(counter++);
  const std::string cmd = "timeout 10 " + std::string(K3_CLI_PATH) + " " + args + " >" + base + ".out 2>" + base + ".err";
  const int status = std::system(cmd.c_str());
  CliResult r;
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = slurp(base + ".out");
  r.err = slurp(base + ".err");
  return r;
}

std::string tiny(const std::string& family, const std::string& name) {
  const std::string dir = ::testing::TempDir() + "/hostile_" + name;
  fs::remove_all(dir);
  const auto r = run_k3("make-tiny --arch kimi-k3 --family " + family + " --out " + dir);
  EXPECT_EQ(r.code, 0) << r.err;
  return dir;
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

void make_fifo(const std::string& path) {
  fs::remove(path);
  ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0) << path;
}

json read_json(const std::string& path) { return json::parse(slurp(path)); }

std::string first_shard(const std::string& dir) {
  const json index = read_json(dir + "/model.safetensors.index.json");
  return index["weight_map"].begin().value().get<std::string>();
}

TEST(HostileFiles, FifoShardIsRefusedNotWaitedOn) {
  const std::string dir = tiny("bf16", "fifo_shard");
  const std::string shard = first_shard(dir);
  make_fifo(dir + "/" + shard);
  const auto r = run_k3_guarded("check " + dir);
  EXPECT_EQ(r.code, 1) << "exit 124 means the open blocked: " << r.err;
  EXPECT_NE(r.err.find(shard + ": not a regular file"), std::string::npos) << r.err;
}

TEST(HostileFiles, FifoNamedByAnIndexEntryIsRefusedNotWaitedOn) {
  const std::string dir = tiny("bf16", "fifo_entry");
  json index = read_json(dir + "/model.safetensors.index.json");
  const std::string key = index["weight_map"].begin().key();
  index["weight_map"][key] = "pipe.safetensors";
  write_text(dir + "/model.safetensors.index.json", index.dump());
  make_fifo(dir + "/pipe.safetensors");
  const auto r = run_k3_guarded("inspect " + dir);
  EXPECT_EQ(r.code, 1) << "exit 124 means the open blocked: " << r.err;
  EXPECT_NE(r.err.find("pipe.safetensors: not a regular file"), std::string::npos) << r.err;
}

TEST(HostileFiles, FifoConfigJsonIsRefusedNotWaitedOn) {
  const std::string dir = tiny("bf16", "fifo_config");
  make_fifo(dir + "/config.json");
  const auto r = run_k3_guarded("check " + dir);
  EXPECT_EQ(r.code, 1) << "exit 124 means the open blocked: " << r.err;
  EXPECT_NE(r.err.find("config.json: not a regular file"), std::string::npos) << r.err;
}

TEST(HostileFiles, InspectOfAFifoIsRefusedNotWaitedOn) {
  const std::string fifo = ::testing::TempDir() + "/hostile_inspect.gguf";
  make_fifo(fifo);
  const auto r = run_k3_guarded("inspect " + fifo);
  EXPECT_EQ(r.code, 1) << "exit 124 means the open blocked: " << r.err;
  EXPECT_NE(r.err.find("hostile_inspect.gguf: not a regular file"), std::string::npos) << r.err;
  const std::string plain = ::testing::TempDir() + "/hostile_inspect.safetensors";
  make_fifo(plain);
  const auto r2 = run_k3_guarded("inspect " + plain);
  EXPECT_EQ(r2.code, 1) << r2.err;
  EXPECT_NE(r2.err.find("not a regular file"), std::string::npos) << r2.err;
}

TEST(HostileFiles, IndexShardNameLeavingTheFolderIsRefused) {
  const std::string dir = tiny("bf16", "escape");
  const std::string outside = ::testing::TempDir() + "/outside";
  fs::create_directories(outside);
  const std::string shard = first_shard(dir);
  fs::copy_file(dir + "/" + shard, outside + "/x.safetensors", fs::copy_options::overwrite_existing);
  json index = read_json(dir + "/model.safetensors.index.json");
  std::string key;
  for (auto& [k, v] : index["weight_map"].items()) {
    if (v == shard) {
      v = "../outside/x.safetensors";
      if (key.empty()) key = k;
    }
  }
  write_text(dir + "/model.safetensors.index.json", index.dump());
  for (const char* cmd : {"check ", "inspect "}) {
    const auto r = run_k3(cmd + dir);
    EXPECT_EQ(r.code, 1) << cmd << r.err;
    EXPECT_NE(r.err.find("model.safetensors.index.json: tensor '"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("leads outside the folder"), std::string::npos) << r.err;
  }
  // A folder symlink inside the checkpoint that points out of it: refused the same way.
  fs::create_directory_symlink(outside, dir + "/sub");
  for (auto& [k, v] : index["weight_map"].items()) {
    if (v == "../outside/x.safetensors") v = "sub/x.safetensors";
  }
  write_text(dir + "/model.safetensors.index.json", index.dump());
  const auto r = run_k3("check " + dir);
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_NE(r.err.find("'sub/x.safetensors' leads outside the folder"), std::string::npos) << r.err;
}

TEST(HostileFiles, FolderWithSafetensorsAndGgufIsRefusedByEveryTool) {
  const std::string dir = tiny("bf16", "mixed");
  const std::string gguf_dir = tiny("gguf", "mixed_gguf");
  std::string gguf;
  for (const auto& e : fs::directory_iterator(gguf_dir)) {
    if (e.path().extension() == ".gguf") gguf = e.path().filename().string();
  }
  ASSERT_FALSE(gguf.empty());
  fs::copy_file(gguf_dir + "/" + gguf, dir + "/" + gguf);
  for (const std::string& cmd : {"check " + dir, "inspect " + dir, "logits --model " + dir + " --ids 1,2 --out " + dir + "/l.npy"}) {
    const auto r = run_k3(cmd);
    EXPECT_EQ(r.code, 1) << cmd << ": " << r.err;
    EXPECT_NE(r.err.find("holds both a safetensors checkpoint (model"), std::string::npos) << cmd << ": " << r.err;
    EXPECT_NE(r.err.find("and a GGUF checkpoint (" + gguf + ")"), std::string::npos) << cmd << ": " << r.err;
  }
  EXPECT_FALSE(fs::exists(dir + "/l.npy"));
}

std::string pack_file(const std::string& dir) {
  return dir + "/" + read_json(dir + "/expert_pack_manifest.json")["expert_pack"]["path"].get<std::string>();
}

TEST(HostileFiles, PackDigestIsCheckedOnLoadAndByCheckVerify) {
  const std::string dir = tiny("gguf-expert-pack", "pack_digest");
  const std::string pack = pack_file(dir);
  const std::string cache = pack + ".sha256-verified";
  // Intact: loading verifies once and caches; check says it did not verify unless asked.
  auto r = run_k3("logits --model " + dir + " --ids 1,2 --out " + dir + "/l.npy");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(fs::exists(cache));
  r = run_k3("check " + dir);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("sha256 of " + pack + ": not verified"), std::string::npos) << r.out;
  r = run_k3("check --verify " + dir);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("sha256 of " + pack + ": verified"), std::string::npos) << r.out;
  // One payload byte flipped in place.
  const std::string want = read_json(dir + "/expert_pack_manifest.json")["expert_pack"]["sha256"];
  {
    std::fstream f(pack, std::ios::binary | std::ios::in | std::ios::out);
    f.seekg(-1, std::ios::end);
    const char c = static_cast<char>(f.get());
    f.seekp(-1, std::ios::end);
    f.put(static_cast<char>(c ^ 1));
  }
  ::utimensat(AT_FDCWD, pack.c_str(), nullptr, 0);  // a new mtime even on a coarse clock
  fs::remove(cache);
  r = run_k3("check " + dir);
  EXPECT_EQ(r.code, 0) << "check reads headers only: " << r.err;
  r = run_k3("check --verify " + dir);
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find(pack + ": sha256 mismatch: manifest says " + want + ", payload is "), std::string::npos) << r.out;
  fs::remove(dir + "/l.npy");
  r = run_k3("logits --model " + dir + " --ids 1,2 --out " + dir + "/l.npy");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find(pack + ": sha256 mismatch: manifest says " + want + ", payload is "), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(dir + "/l.npy"));
  EXPECT_FALSE(fs::exists(cache));
}

TEST(HostileFiles, PackManifestWithAZeroHashOrAnEscapingPathIsRefusedAtPlanTime) {
  const std::string dir = tiny("gguf-expert-pack", "pack_manifest");
  const std::string manifest_path = dir + "/expert_pack_manifest.json";
  const json manifest = read_json(manifest_path);
  json zero = manifest;
  zero["expert_pack"]["sha256"] = std::string(64, '0');
  write_text(manifest_path, zero.dump());
  auto r = run_k3("check " + dir);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE((r.out + r.err).find("must be 64 lower-case hex digits of the pack's sha256, not all zero"), std::string::npos)
      << r.out << r.err;
  json escape = manifest;
  escape["expert_pack"]["path"] = "../" + fs::path(dir).filename().string() + "/" + manifest["expert_pack"]["path"].get<std::string>();
  write_text(manifest_path, escape.dump());
  r = run_k3("check " + dir);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("leads outside the folder"), std::string::npos) << r.out << r.err;
  EXPECT_NE(r.err.find("expert_pack_manifest.json"), std::string::npos) << r.err;
}

TEST(HostileFiles, InspectJsonOfALargeMetadataArrayIsExact) {
  constexpr uint64_t kN = 1u << 20;
  const std::string path = ::testing::TempDir() + "/hostile_big_array.gguf";
  k3::GgufArray a;
  a.elem_type = k3::GgufType::U8;
  a.count = kN;
  a.packed.resize(kN);
  for (uint64_t i = 0; i < kN; ++i) a.packed[i] = static_cast<uint8_t>(i % 251);
  k3::GgufWriter w;
  w.set("general.architecture", {std::string("kimi-k3")});
  w.set("big", {std::move(a)});
  w.set("names", k3::GgufValue::array(k3::GgufType::STRING, {{std::string("a\"b")}, {std::string("\xff")}}));
  w.write(path);
  auto r = run_k3("inspect " + path + " --json");
  ASSERT_EQ(r.code, 0) << r.err;
  const json doc = json::parse(r.out);
  ASSERT_EQ(doc["metadata"]["big"].size(), kN);
  for (uint64_t i : {uint64_t{0}, uint64_t{250}, uint64_t{251}, kN - 1}) EXPECT_EQ(doc["metadata"]["big"][i], i % 251) << i;
  EXPECT_EQ(doc["metadata_types"]["big"], "arr[u8]");
  EXPECT_EQ(doc["metadata"]["general.architecture"], "kimi-k3");
  EXPECT_EQ(doc["metadata"]["names"], json::parse(R"(["a\"b", "\ufffd"])"));
  EXPECT_EQ(doc["format"], "gguf");
  r = run_k3("inspect " + path);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("arr[u8]    [0,1,2,3,"), std::string::npos) << r.out.substr(0, 400);
  EXPECT_NE(r.out.find("...\n"), std::string::npos);
}

TEST(HostileFiles, GgufArchitectureOfTheWrongTypeSaysSo) {
  const std::string dir = tiny("gguf", "arch_type");
  std::string first;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().filename().string().find("-00001-of-") != std::string::npos) first = e.path().string();
  }
  ASSERT_FALSE(first.empty());
  {
    const k3::GgufFile f = k3::GgufFile::open(first);
    k3::GgufWriter w;
    for (const auto& kv : f.metadata()) w.set(kv.key, kv.key == "general.architecture" ? k3::GgufValue{uint32_t{7}} : kv.value);
    for (const auto& t : f.tensors()) {
      w.add_tensor(t.name, t.type, std::vector<uint64_t>(t.ne.begin(), t.ne.begin() + t.n_dims), f.tensor_data(t));
    }
    w.write(first + ".new");
  }
  fs::rename(first + ".new", first);
  const auto r = run_k3("check " + dir);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("field 'general.architecture': must be a string (found u32)"), std::string::npos) << r.out;
}

}  // namespace
