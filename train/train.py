"""Trains a tiny Kimi-K3 or Kimi-Linear on the tasks of docs/eval-tasks.md and writes a bf16
checkpoint in the release layout (config.json + safetensors shards).

    python3 train/train.py --config train/configs/tiny-k3.json --out DIR [--minutes 8] [--seed 1]

The learning-rate schedule follows wall-clock time (warm-up, then cosine), so a run fits a time
budget whatever the machine. Only the reply tokens are trained on.
"""
import argparse
import json
import math
import os
import random
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from checkpoint import Config, finish_checkpoint, to_stored, write_safetensors  # noqa: E402
from kimi_model import KimiModel, load_model  # noqa: E402
import tasks  # noqa: E402

MAX_SHARD_BYTES = 12 << 20  # shards small enough to travel one by one


def init_weights(model, cfg, seed):
    torch.manual_seed(seed)
    out_proj = ("o_proj.weight", "down_proj.weight", "experts.w2.weight", "routed_expert_up_proj.weight")
    depth_scale = 1.0 / math.sqrt(2 * cfg.layers)
    for name, p in model.named_parameters():
        with torch.no_grad():
            if name.endswith("embed_tokens.weight"):
                p.normal_(0, 1.0)
            elif name.endswith("conv1d.weight"):
                p.uniform_(-0.5, 0.5)
            elif name.endswith("A_log"):
                p.copy_(torch.empty_like(p).uniform_(1, 16).log() if cfg.gate_lower_bound is None else torch.zeros_like(p))
            elif name.endswith("dt_bias"):
                dt = torch.exp(torch.empty_like(p).uniform_(math.log(1e-3), math.log(0.1)))
                # Kimi-Linear: softplus(dt_bias) = dt; K3's bounded gate: −5·sigmoid(dt_bias) = −5·dt.
                p.copy_(dt + torch.log(-torch.expm1(-dt)) if cfg.gate_lower_bound is None else torch.log(dt / (1 - dt)))
            elif name.endswith("e_score_correction_bias") or name.endswith("_res_proj.weight"):
                p.zero_()
            elif p.dim() == 1 or name.endswith("_res_norm.weight"):
                p.fill_(1.0)
            else:
                std = 0.02 * (depth_scale if name.endswith(out_proj) else 1.0)
                p.normal_(0, std)


def collate(examples, device, length=None):
    """Right-padded ids and loss mask; padded to `length` when given (one shape for a compiled model)."""
    T = length or max(len(ids) for ids, _ in examples)
    ids = torch.full((len(examples), T), tasks.PAD, dtype=torch.long)
    mask = torch.zeros((len(examples), T), dtype=torch.bool)
    for r, (i, m) in enumerate(examples):
        ids[r, : len(i)] = torch.tensor(i)
        mask[r, : len(m)] = torch.tensor(m, dtype=torch.bool)
    return ids.to(device), mask.to(device)


@torch.no_grad()
def greedy_accuracy(model, is_k3, examples, device):
    """Exact-match accuracy of greedy replies (no cache: a full forward per step, batched); each reply
    may run to the longest expected reply, its end marker included."""
    prompts, answers = [], []
    for prompt, answer in examples:
        s = tasks.render(is_k3, [(prompt, answer)])
        start = s.loss.index(1)
        prompts.append(s.ids[:start])
        answers.append(s.ids[start:])
    max_new = max(len(a) for a in answers)
    B, L = len(prompts), max(len(p) for p in prompts) + max_new
    ids = torch.full((B, L), tasks.PAD, dtype=torch.long, device=device)
    lengths = torch.tensor([len(p) for p in prompts], device=device)
    for r, p in enumerate(prompts):
        ids[r, : len(p)] = torch.tensor(p, device=device)
    done = torch.zeros(B, dtype=torch.bool, device=device)
    end_id = tasks.NUM_BASE + tasks.SPECIALS["<|end_of_msg|>" if is_k3 else "<|im_end|>"]
    rows = torch.arange(B, device=device)
    for _ in range(max_new):
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
            logits = model(ids[:, : int(lengths.max())])
        nxt = logits[rows, lengths - 1].argmax(-1)
        active = ~done & (lengths < L)
        pos = lengths.clamp(max=L - 1)
        ids[rows, pos] = torch.where(active, nxt, ids[rows, pos])  # finished rows keep their end marker
        lengths = lengths + active.long()
        done |= active & (nxt == end_id)
        if bool(done.all()):
            break
    correct = 0
    for r in range(B):
        got = ids[r, len(prompts[r]) : len(prompts[r]) + len(answers[r])].tolist()
        correct += got == answers[r]
    return correct / B


def train_step(forward, model, opt, cfg, rng, args, device):
    examples = tasks.batch(cfg.is_k3, rng, args.batch, max_tokens=args.max_tokens)
    ids, mask = collate(examples, device, args.max_tokens + 1 if args.compile else None)
    with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
        logits = forward(ids[:, :-1])
    target = mask[:, 1:]
    loss = F.cross_entropy(logits[target].float(), ids[:, 1:][target])
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    return loss


def save(model, cfg, out_dir):
    """The release layout: config.json, safetensors shards with their index, the byte-level tokenizer."""
    os.makedirs(out_dir, exist_ok=True)
    stored = to_stored(cfg, model.state_dict())
    shards, current, size = [], {}, 0
    for name, t in stored.items():
        nbytes = t.numel() * t.element_size()
        if current and size + nbytes > MAX_SHARD_BYTES:
            shards.append(current)
            current, size = {}, 0
        current[name] = t
        size += nbytes
    shards.append(current)
    for i, shard in enumerate(shards, 1):
        write_safetensors(os.path.join(out_dir, f"model-{i:05d}-of-{len(shards):05d}.safetensors"), shard, {"format": "pt"})
    finish_checkpoint(out_dir, cfg.doc)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--minutes", type=float, default=8.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--eval-n", type=int, default=200)
    ap.add_argument("--max-steps", type=int, default=0, help="stop after this many steps (0: the time budget only)")
    ap.add_argument("--init", help="start from this checkpoint's weights (a later stage of a run) instead of the seeded init")
    ap.add_argument("--max-tokens", type=int, default=768, help="longest training conversation")
    ap.add_argument("--compile", action="store_true", help="torch.compile the model (every batch padded to --max-tokens)")
    args = ap.parse_args()

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.backends.cuda.matmul.allow_tf32 = True  # the float32 KDA chunk products
    with open(args.config) as f:
        cfg = Config(json.load(f))
    model = KimiModel(cfg).to(device)
    init_weights(model, cfg, args.seed)
    if args.init:
        model.load_state_dict(load_model(args.init).state_dict())
    params = sum(p.numel() for p in model.parameters())
    print(f"{'kimi-k3' if cfg.is_k3 else 'kimi-linear'}: {params / 1e6:.2f} M parameters on {device}", flush=True)
    biases = [m.gate.e_score_correction_bias for m in model.modules() if hasattr(m, "gate") and hasattr(m, "experts")]
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2 and "embed_tokens" not in n]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2 and all(p is not b for b in biases)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95))
    forward = torch.compile(model) if args.compile else model
    rng = random.Random(args.seed)
    budget = args.minutes * 60
    start = time.time()
    step, log = 0, []
    while True:
        progress = (time.time() - start) / budget
        if progress >= 1 or (args.max_steps and step >= args.max_steps):
            break
        lr = args.lr * (progress / 0.03 if progress < 0.03 else 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * (progress - 0.03) / 0.97)))
        for g in opt.param_groups:
            g["lr"] = lr
        try:
            loss = train_step(forward, model, opt, cfg, rng, args, device)
        except torch.cuda.OutOfMemoryError:  # several runs share one GPU: halve the batch and go on
            opt.zero_grad(set_to_none=True)
            torch.cuda.empty_cache()
            args.batch //= 2
            print(json.dumps({"step": step, "out_of_memory": True, "batch": args.batch}), flush=True)
            if args.batch == 0:
                raise
            continue
        with torch.no_grad():  # auxiliary-loss-free balancing: push each expert's bias toward equal load
            for m in model.modules():
                if hasattr(m, "last_load"):
                    m.gate.e_score_correction_bias += 1e-3 * torch.sign(m.last_load.mean() - m.last_load)
        step += 1
        if step % 100 == 0 or step == 1:
            entry = {"step": step, "minutes": round((time.time() - start) / 60, 2), "lr": lr, "loss": round(loss.item(), 4)}
            log.append(entry)
            print(json.dumps(entry), flush=True)
    model.eval()
    # Evaluate the weights as they are saved: rounded to bf16.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if not name.endswith(("conv1d.weight", "A_log", "dt_bias", "o_norm.weight")):
                p.copy_(p.to(torch.bfloat16).float())
    accuracy = {t: greedy_accuracy(model, cfg.is_k3, tasks.eval_set(t, args.eval_n), device) for t in tasks.TASKS} if args.eval_n else {}
    report = {"params": params, "steps": step, "minutes": args.minutes, "seed": args.seed, "batch": args.batch, "init": args.init,
              "compile": args.compile, "max_tokens": args.max_tokens,
              "lr": args.lr, "final_loss": log[-1]["loss"] if log else None, "accuracy": accuracy, "device": str(device),
              "torch": torch.__version__}
    print(json.dumps(report), flush=True)
    save(model, cfg, args.out)
    with open(os.path.join(args.out, "train_report.json"), "w") as f:
        json.dump({"report": report, "log": log}, f, indent=1)


if __name__ == "__main__":
    main()
