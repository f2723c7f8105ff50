#!/usr/bin/env python3
"""The peer for k3's MoE benchmarks: the same routed layer with bf16 experts through
PyTorch's torch._grouped_mm, what a user would otherwise reach for on Hopper.

Kimi-K3 shape by default (896 experts, top-16, latent 3584 -> 2 x 3072 gate|up, 3072 -> 3584 down),
T tokens of uniform random routing (distinct experts per token), rows sorted by expert as k3's
moe_dispatch sorts them. Timed with CUDA events, median of --reps calls after warm-ups, rotating over
8 routings; TB/s counts the bf16 weight bytes of the experts a routing hits, TFLOP/s the real rows.
Prints one table; k3_bench_cuda --moe / --moe-w4 print the same columns for k3's kernels.

  python3 bench/scripts/torch_grouped_mm_moe.py [--tokens 1,8,64,512,4096] [--reps 20]
"""
import argparse
import statistics
import sys


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tokens", default="1,8,64,512,4096")
    ap.add_argument("--experts", type=int, default=896)
    ap.add_argument("--top-k", type=int, default=16)
    ap.add_argument("--hidden", type=int, default=3584)
    ap.add_argument("--inter", type=int, default=3072)
    ap.add_argument("--reps", type=int, default=20)
    args = ap.parse_args()
    try:
        import torch
    except ImportError:
        print("torch_grouped_mm_moe: PyTorch is not installed, nothing to measure")
        return 0
    if not torch.cuda.is_available() or not hasattr(torch, "_grouped_mm"):
        print("torch_grouped_mm_moe: needs a CUDA device and torch._grouped_mm (PyTorch >= 2.8)")
        return 0

    E, k, D, I = args.experts, args.top_k, args.hidden, args.inter
    dev = torch.device("cuda")
    gen = torch.Generator(device=dev).manual_seed(7)
    # Weights as checkpoints store them, [E, N, K]; the grouped GEMM takes their [E, K, N] views.
    w13 = torch.randn(E, 2 * I, D, device=dev, dtype=torch.bfloat16, generator=gen).mul_(D ** -0.5)
    w2 = torch.randn(E, D, I, device=dev, dtype=torch.bfloat16, generator=gen).mul_(I ** -0.5)
    w13_t, w2_t = w13.transpose(1, 2), w2.transpose(1, 2)
    bytes13, bytes2 = 2 * 2 * I * D, 2 * D * I  # per expert
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}; "
          f"{E} experts, top-{k}, {D} -> 2x{I} -> {D}; bf16 weights {(w13.numel() + w2.numel()) * 2 / 1e9:.1f} GB")
    print(f"{'T':>5} | {'GEMM1 us':>9} {'TB/s':>6} {'TF/s':>6} | {'GEMM2 us':>9} {'TB/s':>6} {'TF/s':>6} | {'layer us':>9}")

    def median_ms(fn, routings):
        for i in range(3):
            fn(routings[i % len(routings)])
        times = []
        for r in range(args.reps):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn(routings[r % len(routings)])
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b))
        return statistics.median(times)

    for T in [int(t) for t in args.tokens.split(",")]:
        x = torch.randn(T, D, device=dev, dtype=torch.bfloat16, generator=gen)
        routings = []
        for _ in range(8):
            ids = torch.rand(T, E, device=dev, generator=gen).topk(k, dim=1).indices.flatten()
            order = torch.sort(ids, stable=True).indices
            counts = torch.bincount(ids, minlength=E)
            offs = torch.cumsum(counts, 0).to(torch.int32)
            xs = x[order // k].contiguous()
            hit = int((counts > 0).sum())
            routings.append((xs, offs, hit))
        R = T * k
        gu = [None]

        def gemm1(r):
            gu[0] = torch._grouped_mm(r[0], w13_t, offs=r[1])

        def layer(r):
            h = torch._grouped_mm(r[0], w13_t, offs=r[1])
            act = torch.nn.functional.silu(h[:, :I]) * h[:, I:]
            return torch._grouped_mm(act, w2_t, offs=r[1])

        t1 = median_ms(gemm1, routings)
        act0 = torch.randn(R, I, device=dev, dtype=torch.bfloat16, generator=gen)
        t2 = median_ms(lambda r: torch._grouped_mm(act0, w2_t, offs=r[1]), routings)
        tl = median_ms(layer, routings)
        hit = statistics.mean(r[2] for r in routings)
        tb1, tb2 = hit * bytes13 / (t1 * 1e-3) / 1e12, hit * bytes2 / (t2 * 1e-3) / 1e12
        tf1, tf2 = 2 * R * 2 * I * D / (t1 * 1e-3) / 1e12, 2 * R * D * I / (t2 * 1e-3) / 1e12
        print(f"{T:>5} | {t1 * 1e3:>9.1f} {tb1:>6.2f} {tf1:>6.1f} | {t2 * 1e3:>9.1f} {tb2:>6.2f} {tf2:>6.1f} | {tl * 1e3:>9.1f}")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
