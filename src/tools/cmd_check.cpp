// `k3 check DIR [--json]`: the whole load plan from headers and configs, every problem found.
// Exit 1 when the plan has problems.
//
// With --devices KIND [--nodes N] [--host-memory SIZE] [--cpu-experts] …: where every parameter
// goes on that machine and the decode performance model of it (parallel/placement.h,
// parallel/roofline.h, docs/parallelism.md); exit 1 when the model does not fit. A DIR holding only
// config files (config.json, hf_quant_config.json: no tensor files) is planned from the layout the
// detected family's writer gives the config (what `k3 make-headers` writes), without headers.
#include <cstdio>
#include <filesystem>
#include <iostream>

#include "io/file_digest.h"
#include "parallel/placement_report.h"
#include "quant/families/family_writer.h"
#include "quant/plan/plan_report.h"
#include "tools/cli.h"
#include "tools/flag_checks.h"
#include "tools/model_args.h"

namespace k3::cli {
namespace {

struct Options {
  std::string dir;
  bool json = false;
  bool verify = false;
  // Placement.
  std::string devices, host_memory, batch = "1,64";
  int64_t nodes = 1, context = kDefaultCudaContext;
  bool cpu_experts = false;
  double cpu_bandwidth_gbs = kDefaultCpuBandwidthBps / 1e9;
};

constexpr int64_t kMaxNodes = 1024;
constexpr int64_t kMaxPlanBatch = int64_t{1} << 20;

bool has_tensor_files(const std::string& dir) {
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (is_safetensors_checkpoint_file(name) || e.path().extension() == ".gguf") return true;
  }
  return false;
}

void print_json(const Json& doc) { std::cout << doc.dump(1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n"; }

int run_placement(const Options& opt) {
  const DeviceCount devices = parse_devices(opt.devices);
  Machine machine;
  machine.device = devices.kind;
  machine.gpus_per_node = devices.count;
  machine.nodes = opt.nodes;
  machine.host_bytes = opt.host_memory.empty() ? 0 : parse_byte_size(opt.host_memory, "--host-memory");
  machine.cpu_experts = opt.cpu_experts;
  machine.cpu_bps = opt.cpu_bandwidth_gbs * 1e9;
  PlanOptions options;
  options.batches = parse_batch_sizes(opt.batch, kMaxPlanBatch);
  options.context = opt.context;

  const CheckpointDir ckpt = open_checkpoint_dir(opt.dir);
  if (!ckpt.config) throw Error(Where{ckpt.path("config.json"), "", ""}, "missing config.json (placement needs the model's config)");
  Footprint footprint;
  if (has_tensor_files(opt.dir)) {
    const LoadPlan plan = plan_checkpoint(ckpt);
    if (!plan.ok()) {
      if (opt.json) print_json(plan_json(plan, opt.dir));
      else std::fputs(plan_table(plan, opt.dir).c_str(), stdout);
      return 1;
    }
    footprint = footprint_of(plan);
  } else {
    footprint = layout_footprint(ckpt.family, ShapeOnlySource(*ckpt.config), without_quantization_config(ckpt.config_json->value()));
  }
  const Placement placement = plan_placement(footprint, *ckpt.config, machine, options);
  std::vector<DecodeEstimate> decode;
  for (int64_t b : options.batches) decode.push_back(estimate_decode(placement, *ckpt.config, b));
  if (opt.json) {
    print_json({{"checkpoint", opt.dir}, {"family", footprint.family}, {"ok", true}, {"placement", placement_json(placement, decode)}});
  } else {
    std::printf("checkpoint %s\nfamily     %s\n", opt.dir.c_str(), footprint.family.c_str());
    std::fputs(placement_table(placement, decode).c_str(), stdout);
  }
  return 0;
}

}  // namespace

Registered add_check(CLI::App& app) {
  auto opt = std::make_shared<Options>();
  auto* cmd = app.add_subcommand("check", "Compute the load plan of a checkpoint from its headers and report every problem");
  cmd->add_option("dir", opt->dir, "checkpoint directory")->required();
  cmd->add_flag("--json", opt->json, "Print the plan as one JSON object");
  cmd->add_flag("--verify", opt->verify, "Also check whole-file sha256 digests (ExpertPack payload), reading every byte");
  auto* devices = cmd->add_option("--devices", opt->devices,
                                  "Plan the placement on GPUs of one node: COUNTxKIND, e.g. 8xH200 (kinds: H200, H100)")
                      ->check(parsed_by([](const std::string& t) { parse_devices(t); }));
  cmd->add_option("--nodes", opt->nodes, "nodes of --devices each (expert parallel across all; InfiniBand between nodes)")
      ->check(integer_in(1, kMaxNodes))
      ->capture_default_str()
      ->needs(devices);
  auto* host = cmd->add_option("--host-memory", opt->host_memory, "host memory per node routed experts may take, e.g. 1.5T")
                   ->check(parsed_by([](const std::string& t) { parse_byte_size(t, "--host-memory"); }))
                   ->needs(devices);
  cmd->add_flag("--cpu-experts", opt->cpu_experts, "experts that do not fit on the GPUs are computed by the CPU, not streamed")
      ->needs(host);
  cmd->add_option("--cpu-bandwidth", opt->cpu_bandwidth_gbs, "host memory bandwidth per node in GB/s (CPU experts, streamed copies)")
      ->check(real_in(0, true, 1e5))
      ->capture_default_str()
      ->needs(devices);
  cmd->add_option("--batch", opt->batch, "decode batch sizes to estimate (sequences of the whole deployment), e.g. 1,64,256")
      ->check(parsed_by([](const std::string& t) { parse_batch_sizes(t, kMaxPlanBatch); }))
      ->capture_default_str()
      ->needs(devices);
  cmd->add_option("--context", opt->context, "tokens per sequence: the state reserved and read per decode step")
      ->check(integer_in(1, kMaxContextFlag))
      ->capture_default_str()
      ->needs(devices);
  return {cmd, [opt] {
            if (!opt->devices.empty()) return run_placement(*opt);
            LoadPlan plan = plan_checkpoint(opt->dir);
            // Digests are read-everything checks: only with --verify (loading always runs them).
            std::vector<std::string> digest_lines;
            Json digests = Json::array();
            for (const FileDigest& d : plan.digests) {
              std::string state = "not verified (k3 check --verify reads it)";
              if (opt->verify) {
                try {
                  verify_file_digest(d);
                  state = "verified";
                } catch (const Error& e) {
                  plan.problems.push_back({e.where(), e.detail()});
                  state = "MISMATCH";
                }
              }
              digest_lines.push_back("sha256 of " + d.path + ": " + state + "\n");
              digests.push_back({{"file", d.path}, {"sha256", d.sha256}, {"verified", state == "verified"}});
            }
            if (opt->json) {
              Json doc = plan_json(plan, opt->dir);
              doc["digests"] = digests;
              print_json(doc);
            } else {
              std::fputs(plan_table(plan, opt->dir).c_str(), stdout);
              for (const auto& line : digest_lines) std::fputs(line.c_str(), stdout);
            }
            return plan.ok() ? 0 : 1;
          }};
}

}  // namespace k3::cli
