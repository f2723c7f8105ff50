"""k3's CPU forward pass against the PyTorch implementation (float64) on the same bf16 checkpoints:
the trained tiny models and random make-tiny ones of both architectures. Also checks the chunked
KDA form against the recurrence and the training chat rendering against k3's tokenizer.

    K3_CLI=build/release/k3 python3 -m unittest train/test_torch_parity.py
"""
import os
import random
import subprocess
import sys
import tempfile
import unittest

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from kimi_model import kda_chunked, kda_recurrent, load_model  # noqa: E402
import tasks  # noqa: E402

K3 = os.environ.get("K3_CLI", os.path.join(HERE, "..", "build", "release", "k3"))
MODELS = os.path.join(HERE, "..", "models")
# max |k3 − torch| over max |logit|, every position: k3 computes in float32, torch in float64.
LOGIT_BOUND = 1e-4


def k3(*args):
    return subprocess.run([K3, *args], check=True, capture_output=True, text=True).stdout


def k3_logits(model_dir, ids):
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "logits.npy")
        k3("logits", "--model", model_dir, "--ids", ",".join(map(str, ids)), "--out", out, "--threads", "2")
        return np.load(out).astype(np.float64)


def prompt_ids(is_k3, seed):
    rng = random.Random(seed)
    return [tasks.render(is_k3, [tasks.draw(task, rng)]).ids for task in tasks.TASKS]


class LogitParity(unittest.TestCase):
    def check(self, model_dir, sequences):
        model = load_model(model_dir, torch.float64)
        worst = 0.0
        for ids in sequences:
            ref = k3_logits(model_dir, ids)
            with torch.no_grad():
                got = model(torch.tensor([ids]))[0].numpy()
            worst = max(worst, np.abs(got - ref).max() / np.abs(ref).max())
        print(f"{os.path.basename(model_dir)}: max|k3 - torch| / max|logit| = {worst:.2e}", file=sys.stderr)
        self.assertLess(worst, LOGIT_BOUND)

    def test_trained_models(self):
        for name, is_k3 in (("tiny-k3", True), ("tiny-linear", False)):
            directory = os.path.join(MODELS, name)
            if not os.path.exists(os.path.join(directory, "config.json")):
                continue
            with self.subTest(model=name):
                self.check(directory, prompt_ids(is_k3, seed=7))

    def test_random_models(self):
        with tempfile.TemporaryDirectory() as tmp:
            for arch in ("kimi-k3", "kimi-linear"):
                with self.subTest(arch=arch):
                    out = os.path.join(tmp, arch)
                    k3("make-tiny", "--arch", arch, "--family", "bf16", "--out", out, "--seed", "3")
                    rng = random.Random(3)
                    self.check(out, [[rng.randrange(512) for _ in range(24)]])


class ChunkedKda(unittest.TestCase):
    def test_chunked_equals_recurrent(self):
        gen = torch.Generator().manual_seed(0)
        B, T, H, K, V = 2, 203, 3, 8, 6  # T not a multiple of the chunk; several scan levels
        q = torch.nn.functional.normalize(torch.randn(B, T, H, K, generator=gen, dtype=torch.float64), dim=-1)
        k = torch.nn.functional.normalize(torch.randn(B, T, H, K, generator=gen, dtype=torch.float64), dim=-1)
        v = torch.randn(B, T, H, V, generator=gen, dtype=torch.float64)
        g = -5 * torch.rand(B, T, H, K, generator=gen, dtype=torch.float64)  # down to the K3 lower bound
        beta = torch.rand(B, T, H, generator=gen, dtype=torch.float64)
        ref = kda_recurrent(q, k, v, g, beta)
        self.assertLess((kda_chunked(q, k, v, g, beta) - ref).abs().max().item(), 1e-12)
        self.assertLess((kda_chunked(q, k, v, g, beta, min_log_decay=-5.0) - ref).abs().max().item(), 1e-12)


class ChatRendering(unittest.TestCase):
    def test_training_prompt_tokenizes_as_k3(self):
        """The training rendering, written out as text, tokenizes (specials on) to the same ids in k3."""
        names = {tasks.NUM_BASE + v: k for k, v in tasks.SPECIALS.items()}
        with tempfile.TemporaryDirectory() as tmp:
            model = os.path.join(tmp, "m")
            k3("make-tiny", "--arch", "kimi-k3", "--family", "bf16", "--out", model)
            for i, s in enumerate([tasks.render_k3([("What is 2+2?", "4")]), tasks.render_k3([("Sort: 3 1", "1 3")], thinking=False),
                                   tasks.render_kimi_linear([("Repeat: ab", "ab"), ("What is 1+1?", "2")])]):
                text = b"".join(names[t].encode() if t >= tasks.NUM_BASE else bytes([t]) for t in s.ids)
                path = os.path.join(tmp, f"r{i}.txt")
                with open(path, "wb") as f:
                    f.write(text)
                got = [int(t) for t in k3("tokenize", "--model", model, "--file", path, "--specials").split()]
                self.assertEqual(got, s.ids)


if __name__ == "__main__":
    unittest.main()
