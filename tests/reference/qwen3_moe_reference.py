"""PyTorch reference of titan's Qwen3 mixture-of-experts block (trainer/model/moe.h), written
as Hugging Face's Qwen3MoeSparseMoeBlock computes it: a loop over experts with a one-hot mask,
not titan's sort-and-group. Used by qwen3_reference.py (forward, train_step, check) for blocks
whose parameters include "moe.router.weight".

Load-balancing loss: E * sum_i f_i P_i per MoE block (f_i: tokens that chose expert i / N,
HF's load_balancing_loss_func per block; P_i: mean router probability), times the coefficient.
Capacity (moe_capacity_factor > 0): an expert keeps its first ceil(cf N k / E) tokens in token
order. Aux-loss-free bias (TorchTitan): bias added to the probabilities for top-k only; after
the optimizer step bias += d - mean(d), d = coeff * sign(mean(load) - load).
"""
import math

import torch
import torch.nn.functional as F


def moe_block(x, p, pre, cfg, state):
    """x [B, S, D] -> [B, S, D]; state collects "aux" terms and per-layer "load" (for the bias)."""
    B, S, D = x.shape
    h = x.reshape(-1, D)
    N = h.shape[0]
    E, k = cfg["moe_experts"], cfg["moe_top_k"]
    probs = torch.softmax(h @ p[pre + "moe.router.weight"].T, dim=1, dtype=torch.float)
    bias = state.get("bias", {}).get(pre)
    with torch.no_grad():
        choose = probs + bias if bias is not None else probs
        _, sel = torch.topk(choose, k, dim=-1)
    w = probs.gather(1, sel)
    if cfg.get("moe_norm_topk_prob", True):
        w = w / w.sum(dim=-1, keepdim=True)
    w = w.to(h.dtype)
    cap = math.ceil(cfg["moe_capacity_factor"] * N * k / E) if cfg.get("moe_capacity_factor", 0) > 0 else N * k
    w1, w2, w3 = (p[pre + f"moe.experts.{n}.weight"] for n in ("w1", "w2", "w3"))
    out = torch.zeros_like(h)
    mask = F.one_hot(sel, E)  # [N, k, E]
    for e in range(E):
        tok, slot = torch.where(mask[:, :, e])  # token-major: the first tokens keep their place
        tok, slot = tok[:cap], slot[:cap]
        if tok.numel() == 0:
            continue
        xe = h[tok]
        ye = (F.silu(xe @ w1[e].T) * (xe @ w3[e].T)) @ w2[e].T
        out.index_add_(0, tok, ye * w[tok, slot, None])
    if pre + "moe.shared_expert.w1.weight" in p:
        sw = lambda n: p[pre + f"moe.shared_expert.{n}.weight"]
        out = out + (F.silu(h @ sw("w1").T) * (h @ sw("w3").T)) @ sw("w2").T
    load = mask.sum(dim=(0, 1)).float()
    state.setdefault("load", {})[pre] = load
    coeff = cfg.get("moe_aux_loss_coeff", 0.0)
    if coeff > 0:
        state.setdefault("aux", []).append(coeff * E * (load / N * probs.mean(0)).sum())
    return out.view(B, S, D)


def bias_after_step(bias, load, coeff):
    d = coeff * torch.sign(load.mean() - load)
    return bias + (d - d.mean())
