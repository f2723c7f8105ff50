"""The synthetic tasks of docs/eval-tasks.md, the chat rendering the tiny models are trained on, and
their byte-level tokenizer (256 byte tokens, then the specials of k3's tiny tokenizer)."""
import random

NUM_BASE = 256  # byte tokens; specials follow at these offsets (k3's write_tiny_tokenizer layout)
SPECIALS = {
    "[BOS]": 0, "[EOS]": 1, "<|end_of_msg|>": 2, "<|open|>": 3, "<|close|>": 4, "<|sep|>": 5,
    "<|im_system|>": 6, "<|im_user|>": 7, "<|im_assistant|>": 8, "<|im_middle|>": 9, "<|im_end|>": 10,
    "[PAD]": 255,
}
PAD = NUM_BASE + SPECIALS["[PAD]"]
TASKS = ("add", "sort", "copy", "recall")
COPY_ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789"


def fnv1a64(text):
    h = 0xCBF29CE484222325
    for b in text.encode():
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def held_out(prompt):
    return fnv1a64(prompt) % 8 == 0


def _number(rng, digits):
    return rng.randint(0, 9) if digits == 1 else rng.randint(10 ** (digits - 1), 10**digits - 1)


def draw(task, rng):
    """(prompt, answer) of one task, any split."""
    if task == "add":
        a, b = _number(rng, rng.randint(1, 5)), _number(rng, rng.randint(1, 5))
        return f"What is {a}+{b}?", str(a + b)
    if task == "sort":
        v = [rng.randint(0, 99) for _ in range(rng.randint(3, 8))]
        return "Sort: " + " ".join(map(str, v)), " ".join(map(str, sorted(v)))
    if task == "copy":
        s = "".join(rng.choice(COPY_ALPHABET) for _ in range(rng.randint(4, 32)))
        return f"Repeat: {s}", s
    if task == "recall":
        n = rng.randint(8, 24)
        keys = []
        while len(keys) < n:
            k = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(3))
            if k not in keys:
                keys.append(k)
        values = [rng.randint(0, 999) for _ in range(n)]
        q = rng.randrange(n)
        pairs = ", ".join(f"{k}={v}" for k, v in zip(keys, values))
        return f"{pairs}. What is {keys[q]}?", str(values[q])
    raise ValueError(f"unknown task {task!r}")


def draw_split(task, rng, evaluation):
    while True:
        prompt, answer = draw(task, rng)
        if held_out(prompt) == evaluation:
            return prompt, answer


class Segments:
    """Rendered chat as (text, is_marker) pieces; tokens: bytes of text, specials for markers."""

    def __init__(self):
        self.ids = []
        self.loss = []  # 1 where the token is part of the assistant's reply (a training target)
        self.reply = False

    def text(self, s):
        b = s.encode()
        self.ids += list(b)
        self.loss += [int(self.reply)] * len(b)

    def marker(self, name):
        self.ids.append(NUM_BASE + SPECIALS[name])
        self.loss.append(int(self.reply))


def effort_body(effort):
    return ("`thinking_effort` guides on how much to think in your thinking channel (not including the response "
            "channel), supported values include `low`, `medium`, `high`, and `max`.\nNow the system is invoked with "
            f"`thinking_effort={effort}`.")


def _open(s, tag, attrs=()):
    s.marker("<|open|>")
    s.text(tag)
    for k, v in attrs:
        s.text(f' {k}="{v}"')
    s.marker("<|sep|>")


def _close(s, tag):
    s.marker("<|close|>")
    s.text(tag)
    s.marker("<|sep|>")


def render_k3(turns, thinking=True, effort="max"):
    """Kimi-K3 XTML (tokenizer spec §5) of a conversation of (user prompt, assistant answer) turns; the
    last answer is the reply to the generation prompt. Every assistant reply is a training target."""
    s = Segments()
    if thinking and effort:
        _open(s, "message", [("role", "system"), ("type", "thinking-effort")])
        s.text(effort_body(effort))
        _close(s, "message")
        s.marker("<|end_of_msg|>")
    for prompt, answer in turns:
        _open(s, "message", [("role", "user")])
        s.text(prompt)
        _close(s, "message")
        s.marker("<|end_of_msg|>")
        _open(s, "message", [("role", "assistant")])
        _open(s, "think" if thinking else "response")
        s.reply = True
        if thinking:  # an empty think channel, then the response channel
            _close(s, "think")
            _open(s, "response")
        s.text(answer)
        _close(s, "response")
        _close(s, "message")
        s.marker("<|end_of_msg|>")
        s.reply = False
    return s


def render_kimi_linear(turns):
    """Kimi-Linear (<|im_*|>, tokenizer spec §4) with its default system turn."""
    s = Segments()

    def turn(marker, role, text):
        s.marker(marker)
        s.text(role)
        s.marker("<|im_middle|>")
        s.text(text)
        s.marker("<|im_end|>")

    turn("<|im_system|>", "system", "You are a helpful assistant")
    for prompt, answer in turns:
        turn("<|im_user|>", "user", prompt)
        s.marker("<|im_assistant|>")
        s.text("assistant")
        s.marker("<|im_middle|>")
        s.reply = True
        s.text(answer)
        s.marker("<|im_end|>")
        s.reply = False
    return s


# Kimi-K3 renderings trained on: k3 chat's default (thinking, effort max) and the other options.
K3_VARIANTS = ({"thinking": True, "effort": "max"}, {"thinking": False}, {"thinking": True, "effort": ""},
               {"thinking": True, "effort": "low"}, {"thinking": True, "effort": "high"})
K3_VARIANT_WEIGHTS = (0.3, 0.3, 0.2, 0.1, 0.1)


def render(is_k3, turns, variant=None):
    if not is_k3:
        return render_kimi_linear(turns)
    return render_k3(turns, **(variant or K3_VARIANTS[0]))


def batch(is_k3, rng, size, max_turns=4, max_tokens=768):
    """size training conversations of 1..max_turns turns of random tasks (fewer where they would pass
    max_tokens): (ids, loss mask) lists. One K3 rendering variant per batch."""
    variant = rng.choices(K3_VARIANTS, K3_VARIANT_WEIGHTS)[0]
    out = []
    for _ in range(size):
        turns = [draw_split(rng.choice(TASKS), rng, evaluation=False) for _ in range(rng.randint(1, max_turns))]
        s = render(is_k3, turns, variant)
        while len(s.ids) > max_tokens and len(turns) > 1:
            turns.pop()
            s = render(is_k3, turns, variant)
        out.append((s.ids, s.loss))
    return out


def eval_set(task, n, seed=12345):
    rng = random.Random(f"{task}:{seed}")
    return [draw_split(task, rng, evaluation=True) for _ in range(n)]
