#!/usr/bin/env python3
"""Re-shards a make-tiny safetensors checkpoint into 1000 shards for timing `k3 check`.

Every text tensor goes into a shard of its own; the remaining shards hold small vision-tower
tensors (which a text-only plan skips), so the index names exactly 1000 shards.
Usage: shard_1000.py SRC_DIR DST_DIR
"""
import json, os, shutil, struct, sys

SHARDS = 1000


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    header.pop("__metadata__", None)
    return [(name, e["dtype"], e["shape"], data[e["data_offsets"][0]:e["data_offsets"][1]]) for name, e in header.items()]


def write_safetensors(path, tensors):
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, dtype, shape, payload in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(payload)]}
        offset += len(payload)
    text = json.dumps(header).encode()
    text += b" " * ((8 - (8 + len(text)) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        for _, _, _, payload in tensors:
            f.write(payload)


def main(src, dst):
    index = json.load(open(os.path.join(src, "model.safetensors.index.json")))
    tensors = []
    for shard in sorted(set(index["weight_map"].values())):
        tensors += read_safetensors(os.path.join(src, shard))
    if len(tensors) > SHARDS:
        sys.exit(f"{len(tensors)} tensors do not fit {SHARDS} shards")
    tensors += [(f"vision_tower.blocks.{i}.weight", "BF16", [4], b"\0" * 8) for i in range(SHARDS - len(tensors))]
    os.makedirs(dst, exist_ok=True)
    weight_map, total = {}, 0
    for i, t in enumerate(tensors):
        name = f"model-{i + 1:05d}-of-{SHARDS:05d}.safetensors"
        write_safetensors(os.path.join(dst, name), [t])
        weight_map[t[0]] = name
        total += len(t[3])
    json.dump({"metadata": {"total_size": total}, "weight_map": weight_map},
              open(os.path.join(dst, "model.safetensors.index.json"), "w"), indent=1)
    for extra in ("config.json", "generation_config.json"):
        shutil.copy(os.path.join(src, extra), dst)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
