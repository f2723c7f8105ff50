"""Kimi-K3 and Kimi-Linear text models in PyTorch: a second, independent implementation of the
architecture spec (KDA, MLA with its output gate, latent MoE with SiTU, attention residuals), used to
train the tiny models and to cross-check k3's CPU forward pass.

Parameter names are k3's logical names (model.layers.{i}.self_attn.q_proj.weight, expert banks as
model.layers.{i}.block_sparse_moe.experts.w1.weight [E, N, K]); checkpoint.py maps them to the
stored names. Norms, SiTU, the router, AttnRes and all KDA math run in float32 (or float64 when the
whole model is float64); linears follow the autocast dtype when training.
"""
import math

import torch
import torch.nn.functional as F
from torch import nn

KDA_CHUNK = 16  # chunk length of the parallel KDA form


def fp(x):
    """x in the precision of the float math: float64 stays, anything else becomes float32."""
    return x if x.dtype == torch.float64 else x.float()


def rmsnorm(x, w, eps):
    x = fp(x)
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def gated_act(cfg, g, u):
    if cfg.act == "silu":
        return F.silu(g) * u
    b = cfg.situ_beta
    gate = b * torch.tanh(g / b) * torch.sigmoid(g)
    if cfg.situ_linear_beta:
        u = cfg.situ_linear_beta * torch.tanh(u / cfg.situ_linear_beta)
    return gate * u


def linear(x, w):
    return F.linear(x, w)


def _param(*shape):
    return nn.Parameter(torch.empty(*shape))


class Linear(nn.Module):
    def __init__(self, n_out, n_in):
        super().__init__()
        self.weight = _param(n_out, n_in)

    def forward(self, x):
        return linear(x, self.weight)


class Vector(nn.Module):
    def __init__(self, *shape):
        super().__init__()
        self.weight = _param(*shape)


class GatedMlp(nn.Module):
    def __init__(self, cfg, hidden, inter):
        super().__init__()
        self.cfg = cfg
        self.gate_proj, self.up_proj, self.down_proj = Linear(inter, hidden), Linear(inter, hidden), Linear(hidden, inter)

    def forward(self, x):
        return self.down_proj(gated_act(self.cfg, fp(self.gate_proj(x)), fp(self.up_proj(x))))


def causal_conv_silu(x, w):
    """x [B, T, P], w [P, 1, W]: y_t = SiLU(Σ_j w[:, 0, j] x_{t-W+1+j}), zeros before the start."""
    T, W = x.shape[1], w.shape[-1]
    with torch.autocast(x.device.type, enabled=False):  # accumulated in float32 (spec §6.2)
        y = F.conv1d(x.transpose(1, 2), w, padding=W - 1, groups=x.shape[-1])[..., :T]
    return F.silu(y).transpose(1, 2)


def kda_recurrent(q, k, v, g, beta):
    """The normative recurrence (spec §6.5), token by token. q, k [B, T, H, K]; v [B, T, H, V];
    g [B, T, H, K] log-decays; beta [B, T, H]. Returns o [B, T, H, V]."""
    B, T, H, K = k.shape
    S = q.new_zeros(B, H, K, v.shape[-1])
    out = []
    for t in range(T):
        S = S * g[:, t].exp().unsqueeze(-1)
        u = beta[:, t].unsqueeze(-1) * (v[:, t] - torch.einsum("bhkv,bhk->bhv", S, k[:, t]))
        S = S + k[:, t].unsqueeze(-1) * u.unsqueeze(-2)
        out.append(torch.einsum("bhkv,bhk->bhv", S, q[:, t]))
    return torch.stack(out, 1)


def kda_chunked(q, k, v, g, beta, min_log_decay=None):
    """The same recurrence in chunks (spec §6.6): parallel within a chunk, a state carried across.
    Exact up to rounding. With a lower bound on the log-decays (K3's bounded gate), chunks of at most
    80/|bound| tokens keep exp(±G) inside float32, and the intra-chunk products factor into matmuls
    (k·e^G)(k·e^−G)ᵀ; without one, every exp(G_i − G_j) is formed from the difference ([C, C, K] per chunk)."""
    B, T, H, K = k.shape
    V = v.shape[-1]
    chunk = KDA_CHUNK if min_log_decay is None else max(1, min(KDA_CHUNK, int(80 // abs(min_log_decay))))
    pad = -T % chunk
    if pad:
        q, k, v, g = (F.pad(x, (0, 0, 0, 0, 0, pad)) for x in (q, k, v, g))
        beta = F.pad(beta, (0, 0, 0, pad))
    n = (T + pad) // chunk
    # [B, H, n, C, ·]
    q, k, v, g = (x.reshape(B, n, chunk, H, -1).permute(0, 3, 1, 2, 4) for x in (q, k, v, g))
    beta = beta.reshape(B, n, chunk, H).permute(0, 3, 1, 2)
    G = g.cumsum(-2)
    strict = torch.tril(torch.ones(chunk, chunk, dtype=torch.bool, device=q.device), -1)
    causal = torch.tril(torch.ones(chunk, chunk, dtype=torch.bool, device=q.device))
    if min_log_decay is not None:
        k_neg = k * (-G).exp()
        A = ((k * G.exp()) @ k_neg.transpose(-1, -2)).masked_fill(~strict, 0.0)
        Aqk = ((q * G.exp()) @ k_neg.transpose(-1, -2)).masked_fill(~causal, 0.0)
    else:
        diff = G.unsqueeze(-2) - G.unsqueeze(-3)  # [B, H, n, C_i, C_j, K] = G_i − G_j
        decay_strict = torch.where(strict[..., None], diff, diff.new_full((), -math.inf)).exp()
        decay_causal = torch.where(causal[..., None], diff, diff.new_full((), -math.inf)).exp()
        A = torch.einsum("bhnik,bhnjk,bhnijk->bhnij", k, k, decay_strict)
        Aqk = torch.einsum("bhnik,bhnjk,bhnijk->bhnij", q, k, decay_causal)
    A = A * beta.unsqueeze(-1)
    eye = torch.eye(chunk, dtype=q.dtype, device=q.device)
    Tm = torch.linalg.solve_triangular(eye + A, torch.diag_embed(beta), upper=False, unitriangular=True)
    W = Tm @ (k * G.exp())
    U = Tm @ v
    # Across chunks the state is affine in the previous one: S_c = M_c S_{c-1} + N_c with
    # M_c = diag(e^{G_last}) − (k e^{G_last − G})ᵀ W and N_c = (k e^{G_last − G})ᵀ U. An inclusive scan of
    # these maps (log2 n levels of batched products, each map a contraction) gives every S_c at once.
    kG = k * (G[..., -1:, :] - G).exp()
    M = torch.diag_embed(G[..., -1, :].exp()) - kG.transpose(-1, -2) @ W  # [B, H, n, K, K]
    N = kG.transpose(-1, -2) @ U  # [B, H, n, K, V]
    step = 1
    while step < n:
        M, N = (torch.cat([M[:, :, :step], M[:, :, step:] @ M[:, :, :-step]], 2),
                torch.cat([N[:, :, :step], M[:, :, step:] @ N[:, :, :-step] + N[:, :, step:]], 2))
        step *= 2
    S_before = torch.cat([torch.zeros_like(N[:, :, :1]), N[:, :, :-1]], 2)  # the state entering each chunk
    o = (q * G.exp()) @ S_before + Aqk @ (U - W @ S_before)  # [B, H, n, C, V]
    return o.permute(0, 2, 3, 1, 4).reshape(B, n * chunk, H, V)[:, :T]


class Kda(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        Hd, D, P = cfg.hidden, cfg.kda_dim, cfg.kda_heads * cfg.kda_dim
        self.q_proj, self.k_proj, self.v_proj = Linear(P, Hd), Linear(P, Hd), Linear(P, Hd)
        if cfg.full_rank_gate:
            self.g_proj = Linear(P, Hd)
        else:
            self.g_a_proj, self.g_b_proj = Linear(D, Hd), Linear(P, D)
        self.f_a_proj, self.f_b_proj = Linear(D, Hd), Linear(P, D)
        self.b_proj = Linear(cfg.kda_heads, Hd)
        self.q_conv1d, self.k_conv1d, self.v_conv1d = Vector(P, 1, cfg.conv), Vector(P, 1, cfg.conv), Vector(P, 1, cfg.conv)
        self.A_log = _param(cfg.kda_heads)
        self.dt_bias = _param(P)
        self.o_norm = Vector(D)
        self.o_proj = Linear(Hd, P)

    def forward(self, x, recurrent=False):
        cfg = self.cfg
        B, T, _ = x.shape
        H, D = cfg.kda_heads, cfg.kda_dim
        q = causal_conv_silu(fp(self.q_proj(x)), self.q_conv1d.weight).reshape(B, T, H, D)
        k = causal_conv_silu(fp(self.k_proj(x)), self.k_conv1d.weight).reshape(B, T, H, D)
        v = causal_conv_silu(fp(self.v_proj(x)), self.v_conv1d.weight).reshape(B, T, H, D)
        f = (fp(self.f_b_proj(self.f_a_proj(x))) + self.dt_bias).reshape(B, T, H, D)
        a = self.A_log.exp().reshape(1, 1, H, 1)
        if cfg.gate_lower_bound is not None:
            g = cfg.gate_lower_bound * torch.sigmoid(a * f)
        else:
            g = -a * F.softplus(f, beta=1.0, threshold=20.0)
        beta = torch.sigmoid(fp(self.b_proj(x)))
        q = q * torch.rsqrt(q.pow(2).sum(-1, keepdim=True) + 1e-6) / math.sqrt(D)
        k = k * torch.rsqrt(k.pow(2).sum(-1, keepdim=True) + 1e-6)
        with torch.autocast(x.device.type, enabled=False):  # the recurrence in float32 (spec §11)
            o = kda_recurrent(q, k, v, g, beta) if recurrent else kda_chunked(q, k, v, g, beta, cfg.gate_lower_bound)
        gate = self.g_proj(x) if cfg.full_rank_gate else self.g_b_proj(self.g_a_proj(x))
        y = rmsnorm(o, self.o_norm.weight, cfg.eps) * torch.sigmoid(fp(gate).reshape(B, T, H, D))
        return self.o_proj(y.reshape(B, T, H * D))


class Mla(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        Hd, nh = cfg.hidden, cfg.mla_heads
        dqk = cfg.nope + cfg.rope
        if cfg.q_lora:
            self.q_a_proj, self.q_a_layernorm, self.q_b_proj = Linear(cfg.q_lora, Hd), Vector(cfg.q_lora), Linear(nh * dqk, cfg.q_lora)
        else:
            self.q_proj = Linear(nh * dqk, Hd)
        self.kv_a_proj_with_mqa = Linear(cfg.kv_lora + cfg.rope, Hd)
        self.kv_a_layernorm = Vector(cfg.kv_lora)
        self.kv_b_proj = Linear(nh * (cfg.nope + cfg.v_head), cfg.kv_lora)
        if cfg.mla_gate:
            self.g_proj = Linear(nh * cfg.v_head, Hd)
        self.o_proj = Linear(Hd, nh * cfg.v_head)

    LOW_RANK_EPS = 1e-6  # q_a_layernorm / kv_a_layernorm: the official reference's KimiRMSNorm default

    def forward(self, x):
        cfg = self.cfg
        B, T, _ = x.shape
        nh, dn, dr, dv = cfg.mla_heads, cfg.nope, cfg.rope, cfg.v_head
        if cfg.q_lora:
            cq = rmsnorm(self.q_a_proj(x), self.q_a_layernorm.weight, self.LOW_RANK_EPS)
            q = self.q_b_proj(cq)
        else:
            q = self.q_proj(x)
        q = q.reshape(B, T, nh, dn + dr)
        kv = self.kv_a_proj_with_mqa(x)
        c = rmsnorm(kv[..., : cfg.kv_lora], self.kv_a_layernorm.weight, self.LOW_RANK_EPS)
        kvb = self.kv_b_proj(c).reshape(B, T, nh, dn + dv)
        q, kpe = q.to(kvb.dtype), kv[..., cfg.kv_lora :].to(kvb.dtype)
        k = torch.cat([kvb[..., :dn], kpe.unsqueeze(2).expand(B, T, nh, dr)], -1)
        vv = kvb[..., dn:]
        qh, kh, vh = q.transpose(1, 2), k.transpose(1, 2), vv.transpose(1, 2)  # [B, nh, T, ·]
        scale = 1.0 / math.sqrt(dn + dr)
        if hasattr(F, "scaled_dot_product_attention") and qh.dtype != torch.float64:
            o = F.scaled_dot_product_attention(qh, kh, vh, is_causal=True, scale=scale)
        else:
            s = (qh @ kh.transpose(-1, -2)) * scale
            mask = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1)
            o = torch.softmax(fp(s).masked_fill(mask, -math.inf), -1).to(vh.dtype) @ vh
        o = o.transpose(1, 2).reshape(B, T, nh * dv)
        if cfg.mla_gate:
            o = fp(o) * torch.sigmoid(fp(self.g_proj(x)))
        return self.o_proj(o)


class Experts(nn.Module):
    def __init__(self, cfg, width):
        super().__init__()
        E, I = cfg.experts, cfg.moe_inter
        self.w1, self.w3, self.w2 = Vector(E, I, width), Vector(E, I, width), Vector(E, width, I)


class Gate(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.weight = _param(cfg.experts, cfg.hidden)
        self.e_score_correction_bias = _param(cfg.experts)


class Moe(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        width = cfg.latent or cfg.hidden
        self.gate = Gate(cfg)
        if cfg.latent:
            self.routed_expert_down_proj = Linear(width, cfg.hidden)
            if cfg.latent_norm:
                self.routed_expert_norm = Vector(width)
            self.routed_expert_up_proj = Linear(cfg.hidden, width)
        self.experts = Experts(cfg, width)
        if cfg.shared:
            self.shared_experts = GatedMlp(cfg, cfg.hidden, cfg.moe_inter * cfg.shared)

    def route(self, x):
        """Combine weights [N, E] (zero for unselected experts) and the selection mask (spec §7.1)."""
        cfg = self.cfg
        with torch.autocast(x.device.type, enabled=False):  # float32 router logits
            logits = fp(x) @ fp(self.gate.weight).t()
        s = torch.sigmoid(logits) if cfg.scoring == "sigmoid" else torch.softmax(logits, -1)
        choice = (s + self.gate.e_score_correction_bias).detach()
        if cfg.groups > 1 and cfg.topk_group < cfg.groups:
            per = cfg.experts // cfg.groups
            grouped = choice.reshape(-1, cfg.groups, per)
            group_score = grouped.topk(min(2, per), -1).values.sum(-1)
            keep = torch.zeros_like(group_score, dtype=torch.bool).scatter_(-1, group_score.topk(cfg.topk_group, -1).indices, True)
            choice = choice.masked_fill(~keep.repeat_interleave(per, -1), -math.inf)
        idx = choice.topk(cfg.top_k, -1).indices
        mask = torch.zeros_like(s, dtype=torch.bool).scatter_(-1, idx, True)
        w = s * mask
        if cfg.renormalize:
            w = w / w.sum(-1, keepdim=True)
        return w * cfg.routed_scale, mask

    def forward(self, x):
        cfg = self.cfg
        shape = x.shape
        x2 = x.reshape(-1, shape[-1])
        w, mask = self.route(x2)
        self.last_load = mask.float().mean(0).detach()
        z = self.routed_expert_down_proj(x2) if cfg.latent else x2
        e = self.experts
        # Every expert on every token (the tiny models have few), weighted by the combine weights,
        # which are zero for the unselected ones: the same sum as computing only the selected.
        g = fp(torch.einsum("nl,eil->nei", z, e.w1.weight))
        u = fp(torch.einsum("nl,eil->nei", z, e.w3.weight))
        h = gated_act(cfg, g, u) * w.unsqueeze(-1)  # the routing weight, applied before the linear w2
        r = torch.einsum("nei,eli->nl", h, e.w2.weight)
        if cfg.latent:
            if cfg.latent_norm:
                r = rmsnorm(r, self.routed_expert_norm.weight, cfg.eps)
            out = self.routed_expert_up_proj(r)
        else:
            out = r
        if cfg.shared:
            out = out + self.shared_experts(x2)
        return out.reshape(shape[:-1] + (out.shape[-1],))


class Layer(nn.Module):
    def __init__(self, cfg, i):
        super().__init__()
        self.i = i
        self.kda = cfg.is_kda(i)
        self.input_layernorm, self.post_attention_layernorm = Vector(cfg.hidden), Vector(cfg.hidden)
        if cfg.attn_res_block:
            self.self_attention_res_norm, self.self_attention_res_proj = Vector(cfg.hidden), Vector(1, cfg.hidden)
            self.mlp_res_norm, self.mlp_res_proj = Vector(cfg.hidden), Vector(1, cfg.hidden)
        self.self_attn = Kda(cfg) if self.kda else Mla(cfg)
        if cfg.is_moe(i):
            self.block_sparse_moe = Moe(cfg)
        else:
            self.mlp = GatedMlp(cfg, cfg.hidden, cfg.inter)

    def ffn(self, x):
        return self.block_sparse_moe(x) if hasattr(self, "block_sparse_moe") else self.mlp(x)


def attn_res_mix(run, bank, norm, proj, eps):
    """AttnResMix (spec §3.2): softmax over candidates scored by RMS-normalised ⟨v, norm⊙proj⟩."""
    cf = torch.stack([fp(v) for v in bank + [run]])  # [n+1, B, T, H]
    c = norm.weight * proj.weight[0]
    score = torch.rsqrt(cf.pow(2).mean(-1) + eps) * (cf * c).sum(-1)
    p = torch.softmax(score, 0)
    return (p.unsqueeze(-1) * cf).sum(0).to(run.dtype)


class Body(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.embed_tokens = Vector(cfg.vocab, cfg.hidden)
        self.layers = nn.ModuleList([Layer(cfg, i) for i in range(cfg.layers)])
        self.norm = Vector(cfg.hidden)
        if cfg.attn_res_block:
            self.output_attn_res_norm, self.output_attn_res_proj = Vector(cfg.hidden), Vector(1, cfg.hidden)


class KimiModel(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.model = Body(cfg)
        if not cfg.tie:
            self.lm_head = Linear(cfg.vocab, cfg.hidden)

    def forward(self, ids, recurrent_kda=False):
        """Logits [B, T, vocab] in the parameters' dtype (float32 under autocast)."""
        cfg, m = self.cfg, self.model
        eps = cfg.eps
        x = m.embed_tokens.weight[ids]
        mixer = lambda layer, h: layer.self_attn(h, recurrent_kda) if layer.kda else layer.self_attn(h)
        norm_in = lambda h, w: rmsnorm(h, w.weight, eps)
        if not cfg.attn_res_block:
            for layer in m.layers:
                x = x + mixer(layer, norm_in(x, layer.input_layernorm))
                x = x + layer.ffn(norm_in(x, layer.post_attention_layernorm))
            final = x
        else:
            bank, run = [], x
            for layer in m.layers:
                h = run if not bank else attn_res_mix(run, bank, layer.self_attention_res_norm, layer.self_attention_res_proj, eps)
                sealed = layer.i % cfg.attn_res_block == 0
                if sealed:
                    bank.append(run)
                a = mixer(layer, norm_in(h, layer.input_layernorm))
                run = a if sealed else run + a
                h2 = attn_res_mix(run, bank, layer.mlp_res_norm, layer.mlp_res_proj, eps)
                run = run + layer.ffn(norm_in(h2, layer.post_attention_layernorm))
            final = attn_res_mix(run, bank, m.output_attn_res_norm, m.output_attn_res_proj, eps)
        head = m.embed_tokens.weight if cfg.tie else self.lm_head.weight
        return fp(linear(norm_in(final, m.norm), head))

    def logical_shapes(self):
        return {k: tuple(v.shape) for k, v in self.state_dict().items()}


def load_model(directory, dtype=torch.float32):
    """The model of a bf16/f16/f32 safetensors checkpoint directory (config.json beside it)."""
    from checkpoint import from_stored, load_config, read_checkpoint

    cfg = load_config(directory)
    model = KimiModel(cfg)
    state = from_stored(cfg, read_checkpoint(directory), model.logical_shapes())
    model.load_state_dict(state)
    return model.to(dtype).eval()
