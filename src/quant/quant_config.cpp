#include "quant/quant_config.h"

#include <charconv>

namespace k3 {
namespace {

QuantConfigOrigin origin_of(const JsonNode& node) { return QuantConfigOrigin{node.file(), node.path()}; }

// A list of strings where absent or null means "none".
std::vector<std::string> string_list(const JsonNode& node, std::string_view key) {
  return node.optional<std::vector<std::string>>(key).value_or(std::vector<std::string>{});
}

// A group size: absent or null -> nullopt.
std::optional<int64_t> optional_group_size(const JsonNode& node, std::string_view key) {
  return node.optional_int(key, 1, kMaxQuantBlockDim);
}

// Two block dimensions, each in [1, kMaxQuantBlockDim].
std::vector<int64_t> block_dims(const JsonNode& field) {
  std::vector<int64_t> dims = field.as_int_list_in(1, kMaxQuantBlockDim);
  if (dims.size() != 2) field.fail("expected two block dimensions, got " + std::to_string(dims.size()));
  return dims;
}

void parse_producer(const JsonNode& node, ModelOptConfig& config) {
  std::optional<JsonNode> producer = node.find("producer");
  if (!producer || producer->is_null()) return;
  producer->as_object();
  config.producer_name = producer->optional<std::string>("name");
  config.producer_version = producer->optional<std::string>("version");
}

std::optional<std::vector<ModelOptLayer>> parse_quantized_layers(const JsonNode& node) {
  std::optional<JsonNode> layers = node.find("quantized_layers");
  if (!layers || layers->is_null()) return std::nullopt;
  std::vector<ModelOptLayer> out;
  for (const auto& [module, entry] : layers->members()) {
    entry.as_object();
    out.push_back(ModelOptLayer{module, entry.required<std::string>("quant_algo"), optional_group_size(entry, "group_size")});
  }
  return out;
}

ModelOptConfig parse_modelopt_inline(const JsonNode& node) {
  ModelOptConfig config;
  config.origin = origin_of(node);
  config.inline_form = true;
  config.quant_method = node.required<std::string>("quant_method");
  parse_producer(node, config);
  config.quant_algo = node.required<std::string>("quant_algo");
  if (std::optional<JsonNode> kv = node.find("kv_cache_scheme"); kv && !kv->is_null()) {
    kv->as_object();
    config.kv_cache_scheme = ModelOptKvCacheScheme{kv->required<std::string>("type"), kv->required_int("num_bits", 1, kMaxQuantBits)};
  }
  config.group_size = optional_group_size(node, "group_size");
  config.exclude_modules = string_list(node, "ignore");
  config.quantized_layers = parse_quantized_layers(node);
  return config;
}

CtDynamic parse_dynamic(const JsonNode& args) {
  std::optional<JsonNode> field = args.find("dynamic");
  if (!field || field->is_null()) return CtDynamic::kStatic;  // compressed-tensors default: false
  if (field->is_string()) {
    if (field->as<std::string>() == "local") return CtDynamic::kLocal;
    field->fail("expected true, false or \"local\", got " + field->value().dump(-1, ' ', true));
  }
  return field->as<bool>() ? CtDynamic::kDynamic : CtDynamic::kStatic;
}

std::optional<std::vector<int64_t>> parse_block_structure(const JsonNode& args) {
  std::optional<JsonNode> field = args.find("block_structure");
  if (!field || field->is_null()) return std::nullopt;
  if (field->is_string()) {  // older writers: "128x128"
    std::string text = field->as<std::string>();
    size_t x = text.find('x');
    int64_t rows = 0, cols = 0;
    const char* end = text.data() + text.size();
    const auto whole = [](const char* first, const char* last, int64_t& out) {
      const std::from_chars_result r = std::from_chars(first, last, out);
      return r.ec == std::errc{} && r.ptr == last;
    };
    bool ok = x != std::string::npos && whole(text.data(), text.data() + x, rows) && whole(text.data() + x + 1, end, cols);
    if (!ok) field->fail("expected \"ROWSxCOLS\" or [rows, cols], got " + field->value().dump(-1, ' ', true));
    for (int64_t dim : {rows, cols}) {
      if (dim < 1 || dim > kMaxQuantBlockDim) {
        field->fail(std::to_string(dim) + " is out of range [1, " + std::to_string(kMaxQuantBlockDim) + "]");
      }
    }
    return std::vector<int64_t>{rows, cols};
  }
  return block_dims(*field);
}

std::optional<std::string> parse_actorder(const JsonNode& args) {
  std::optional<JsonNode> field = args.find("actorder");
  if (!field || field->is_null()) return std::nullopt;
  if (field->is_string()) return field->as<std::string>();
  return field->as<bool>() ? std::optional<std::string>("group") : std::nullopt;
}

// compressed-tensors QuantizationArgs. num_bits and type are required; symmetric (true) and
// dynamic (false) take the library's defaults when absent; the rest are null when absent.
std::optional<CtQuantArgs> parse_ct_args(const JsonNode& parent, std::string_view key) {
  std::optional<JsonNode> node = parent.find(key);
  if (!node || node->is_null()) return std::nullopt;
  node->as_object();
  CtQuantArgs args;
  args.num_bits = node->required_int("num_bits", 1, kMaxQuantBits);
  args.type = node->required<std::string>("type");
  args.strategy = node->optional<std::string>("strategy");
  args.group_size = optional_group_size(*node, "group_size");
  args.block_structure = parse_block_structure(*node);
  args.symmetric = node->optional<bool>("symmetric", true);
  args.dynamic = parse_dynamic(*node);
  args.scale_dtype = node->optional<std::string>("scale_dtype");
  args.zp_dtype = node->optional<std::string>("zp_dtype");
  args.actorder = parse_actorder(*node);
  return args;
}

CompressedTensorsConfig parse_compressed_tensors(const JsonNode& node) {
  CompressedTensorsConfig config;
  config.origin = origin_of(node);
  config.format = node.optional<std::string>("format");
  config.quantization_status = node.optional<std::string>("quantization_status");
  for (const auto& [name, group] : node.object("config_groups").members()) {
    group.as_object();
    CtConfigGroup out;
    out.name = name;
    out.targets = group.required<std::vector<std::string>>("targets");
    out.format = group.optional<std::string>("format");
    out.weights = parse_ct_args(group, "weights");
    out.input_activations = parse_ct_args(group, "input_activations");
    out.output_activations = parse_ct_args(group, "output_activations");
    config.config_groups.push_back(std::move(out));
  }
  config.ignore = string_list(node, "ignore");
  config.kv_cache_scheme = parse_ct_args(node, "kv_cache_scheme");
  return config;
}

Fp8Config parse_fp8(const JsonNode& node) {
  Fp8Config config;
  config.origin = origin_of(node);
  config.activation_scheme = node.required<std::string>("activation_scheme");
  config.fmt = node.optional<std::string>("fmt");
  if (std::optional<JsonNode> block = node.find("weight_block_size"); block && !block->is_null()) {
    std::vector<int64_t> dims = block_dims(*block);
    config.weight_block_size = std::make_pair(dims[0], dims[1]);
  }
  config.ignored_layers = string_list(node, "ignored_layers");
  for (std::string& name : string_list(node, "modules_to_not_convert")) config.ignored_layers.push_back(std::move(name));
  return config;
}

bool is_modelopt_method(const std::string& method) {
  return method == "modelopt" || method.rfind("modelopt_", 0) == 0;
}

void parse_packing(const JsonNode& mapping, ModelSlimConfig& config) {
  for (const auto& [key, value] : mapping.members()) {
    if (value.is_array()) {
      config.packed_modules_mapping.push_back({"", key, value.as<std::vector<std::string>>()});
      continue;
    }
    if (!value.is_object()) value.fail("expected a list of shard names or an object of such lists");
    for (const auto& [fused, shards] : value.members()) {
      config.packed_modules_mapping.push_back({key, fused, shards.as<std::vector<std::string>>()});
    }
  }
}

}  // namespace

ModelOptConfig parse_modelopt_hf_quant_config(const JsonNode& root) {
  ModelOptConfig config;
  config.origin = origin_of(root);
  parse_producer(root, config);
  JsonNode quant = root.object("quantization");
  config.quant_algo = quant.required<std::string>("quant_algo");
  config.kv_cache_quant_algo = quant.optional<std::string>("kv_cache_quant_algo");
  config.group_size = optional_group_size(quant, "group_size");
  config.exclude_modules = string_list(quant, "exclude_modules");
  config.quantized_layers = parse_quantized_layers(quant);
  return config;
}

ModelOptConfig load_modelopt_hf_quant_config(const std::string& path) {
  return parse_modelopt_hf_quant_config(load_json_file(path));
}

InlineQuantConfig parse_quantization_config(const JsonNode& node) {
  node.as_object();
  std::string method = node.required<std::string>("quant_method");
  if (is_modelopt_method(method)) return parse_modelopt_inline(node);
  if (method == "compressed-tensors") return parse_compressed_tensors(node);
  if (method == "fp8") return parse_fp8(node);
  return UnknownQuantConfig{origin_of(node), method};
}

std::optional<InlineQuantConfig> parse_inline_quant_config(const JsonNode& root) {
  std::optional<JsonNode> top = root.find("quantization_config");
  std::optional<JsonNode> nested;
  if (std::optional<JsonNode> text = root.find("text_config"); text && text->is_object()) {
    nested = text->find("quantization_config");
  }
  if (top && top->is_null()) top.reset();
  if (nested && nested->is_null()) nested.reset();
  if (top && nested) nested->fail("a second quantization_config (one is also at the top level)");
  if (top) return parse_quantization_config(*top);
  if (nested) return parse_quantization_config(*nested);
  return std::nullopt;
}

ModelSlimConfig parse_modelslim_description(const JsonNode& root) {
  ModelSlimConfig config;
  config.origin = origin_of(root);
  for (const auto& [key, value] : root.members()) {
    if (key == "model_quant_type") {
      config.model_quant_type = value.as<std::string>();
    } else if (key == "version") {
      config.version = value.as<std::string>();
    } else if (key == "group_size") {
      config.group_size = value.as_int_in(0, kMaxQuantBlockDim);  // 0: per-channel
    } else if (key == "ignore") {
      config.ignore = value.as<std::vector<std::string>>();
    } else if (key == "packed_modules_mapping") {
      parse_packing(value.as_object(), config);
    } else {
      config.tensor_schemes.emplace_back(key, value.as<std::string>());  // a scheme name
    }
  }
  return config;
}

ModelSlimConfig load_modelslim_description(const std::string& path) {
  return parse_modelslim_description(load_json_file(path));
}

}  // namespace k3
