"""Kimi checkpoints on disk: config.json parsing, safetensors reading and writing, and the stored
tensor names of the releases (the "language_model." prefix of Kimi-K3, per-expert tensors, A_log
padding, the F32 KDA parameters). Written from the architecture spec, independently of k3's C++.
"""
import json
import os
import shutil
import struct
import sys

import torch

_DTYPES = {"BF16": torch.bfloat16, "F16": torch.float16, "F32": torch.float32, "F64": torch.float64}
_NAMES = {v: k for k, v in _DTYPES.items()}
_SIZES = {"BF16": 2, "F16": 2, "F32": 4, "F64": 8}


class Config:
    """The text-model fields of a Kimi-K3 (text_config) or Kimi-Linear config.json."""

    def __init__(self, doc):
        self.doc = doc
        self.is_k3 = doc.get("model_type") == "kimi_k3"
        t = doc["text_config"] if "text_config" in doc else doc
        la = t["linear_attn_config"]
        self.hidden = t["hidden_size"]
        self.vocab = t["vocab_size"]
        self.layers = t["num_hidden_layers"]
        self.eps = t["rms_norm_eps"]
        self.act = t.get("hidden_act", "silu")
        self.situ_beta = t.get("activation_situ_beta") or 1.0
        self.situ_linear_beta = t.get("activation_situ_linear_beta")
        self.inter = t["intermediate_size"]
        self.first_dense = t.get("first_k_dense_replace", 0)
        self.moe_freq = t.get("moe_layer_freq", 1)
        self.experts = t.get("num_experts")
        self.top_k = t.get("num_experts_per_token")
        self.shared = t.get("num_shared_experts", 0)
        self.moe_inter = t.get("moe_intermediate_size")
        self.latent = t.get("routed_expert_hidden_size")
        self.latent_norm = t.get("latent_moe_use_norm", False)
        self.scoring = t.get("moe_router_activation_func", "sigmoid")
        self.renormalize = t.get("moe_renormalize", True)
        self.routed_scale = t.get("routed_scaling_factor", 1.0)
        grouped = t.get("use_grouped_topk", False)
        self.groups = t.get("num_expert_group", 1) if grouped else 1
        self.topk_group = t.get("topk_group", 1)
        self.mla_heads = t["num_attention_heads"]
        self.q_lora = t.get("q_lora_rank")
        self.kv_lora = t["kv_lora_rank"]
        self.nope = t["qk_nope_head_dim"]
        self.rope = t["qk_rope_head_dim"]
        self.v_head = t["v_head_dim"]
        self.mla_gate = t.get("mla_use_output_gate", False)
        self.kda_heads = la["num_heads"]
        self.kda_dim = la["head_dim"]
        self.conv = la["short_conv_kernel_size"]
        self.gate_lower_bound = la.get("gate_lower_bound")
        self.full_rank_gate = la.get("use_full_rank_gate", False)
        self.kda_layers = set(la["kda_layers"])
        self.attn_res_block = t.get("attn_res_block_size")
        self.tie = t.get("tie_word_embeddings", False)
        self.bos = t.get("bos_token_id")
        self.eos = t.get("eos_token_id")

    def is_kda(self, layer):
        return (layer + 1) in self.kda_layers

    def is_moe(self, layer):
        return self.experts is not None and layer >= self.first_dense and layer % self.moe_freq == 0


def load_config(directory):
    with open(os.path.join(directory, "config.json")) as f:
        return Config(json.load(f))


def read_safetensors(path):
    """{name: tensor} of one safetensors file, each converted to its stored torch dtype."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        dtype = _DTYPES[info["dtype"]]
        raw = bytearray(data[begin:end])
        t = torch.frombuffer(raw, dtype=dtype) if end > begin else torch.empty(0, dtype=dtype)
        out[name] = t.reshape(info["shape"])
    return out


def write_safetensors(path, tensors, metadata=None):
    header, blobs, offset = {}, [], 0
    for name, t in tensors.items():
        t = t.detach().contiguous().cpu()
        raw = t.view(torch.int16).numpy().tobytes() if t.dtype == torch.bfloat16 else t.numpy().tobytes()
        header[name] = {"dtype": _NAMES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    if metadata:
        header["__metadata__"] = metadata
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)
    os.replace(tmp, path)


def read_checkpoint(directory):
    """Every tensor of the safetensors files of a checkpoint directory (sharded or not)."""
    out = {}
    for name in sorted(os.listdir(directory)):
        if name.endswith(".safetensors") and name != "master.safetensors":
            out.update(read_safetensors(os.path.join(directory, name)))
    return out


def _stored_f32(logical):
    return logical.endswith(("conv1d.weight", ".A_log", ".dt_bias", "self_attn.o_norm.weight"))


def _stored_prefix(cfg, logical):
    """The releases' spelling: K3 adds "language_model."; Kimi-Linear names the dense MLP block_sparse_moe."""
    if cfg.is_k3:
        return "language_model." + logical
    return logical.replace(".mlp.", ".block_sparse_moe.")


def to_stored(cfg, state):
    """Logical state dict (k3's parameter names, expert banks [E, N, K]) -> the stored tensors."""
    out = {}
    for logical, t in state.items():
        t = t.detach().float()
        if ".experts.w" in logical:  # ...experts.w1.weight [E, N, K] -> experts.{e}.w1.weight
            head, tail = logical.split(".experts.")
            for e in range(t.shape[0]):
                out[_stored_prefix(cfg, f"{head}.experts.{e}.{tail}")] = t[e].to(torch.bfloat16)
            continue
        if logical.endswith(".A_log"):
            t = torch.cat([t, t.new_zeros(cfg.kda_dim - t.numel())]) if cfg.is_k3 else t.reshape(1, 1, -1, 1)
        out[_stored_prefix(cfg, logical)] = t if _stored_f32(logical) else t.to(torch.bfloat16)
    return out


def from_stored(cfg, stored, logical_shapes):
    """The inverse of to_stored: logical name -> float tensor of its logical shape."""
    state = {}
    for logical, shape in logical_shapes.items():
        if ".experts.w" in logical:
            head, tail = logical.split(".experts.")
            parts = [stored[_stored_prefix(cfg, f"{head}.experts.{e}.{tail}")] for e in range(shape[0])]
            state[logical] = torch.stack(parts).float()
            continue
        t = stored[_stored_prefix(cfg, logical)].float()
        if logical.endswith(".A_log"):
            t = t.reshape(-1)[: shape[0]]
        state[logical] = t.reshape(shape)
    return state


def _header(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        return json.loads(f.read(n))


def finish_checkpoint(directory, config_doc):
    """Writes config.json, the shard index (rebuilt from the shards' headers) and the byte-level
    tokenizer of the tiny models (train/configs) into a directory of safetensors shards."""
    weight_map, total = {}, 0
    for name in sorted(os.listdir(directory)):
        if name.startswith("model-") and name.endswith(".safetensors"):
            for tensor, info in _header(os.path.join(directory, name)).items():
                if tensor != "__metadata__":
                    weight_map[tensor] = name
                    total += info["data_offsets"][1] - info["data_offsets"][0]
    with open(os.path.join(directory, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)
    with open(os.path.join(directory, "config.json"), "w") as f:
        json.dump(config_doc, f, indent=2)
    configs = os.path.join(os.path.dirname(os.path.abspath(__file__)), "configs")
    for name in ("tiktoken.model", "tokenizer_config.json"):
        shutil.copy(os.path.join(configs, name), os.path.join(directory, name))


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[1] != "finish":
        sys.exit("usage: checkpoint.py finish DIR CONFIG.json  (config, index and tokenizer beside the shards)")
    with open(sys.argv[3]) as f:
        finish_checkpoint(sys.argv[2], json.load(f))
