#!/usr/bin/python3
"""PyTorch reference of titan's dense decoder (Qwen3 / Llama 3 semantics as in Hugging Face)
and of one training step (cross entropy, clip by global norm, torch.optim.AdamW).

Run with Debian's python3-torch (/usr/bin/python3). Tests use it to check the C++ trainer:
  qwen3_reference.py check IN.safetensors CPP_OUT.safetensors   -> compares, exit 1 on mismatch
  (--optimizer-on-cpp-grads: the reference AdamW steps from the C++ gradients, once those are
  checked, so that parameters after the step test the optimizer alone; see check())
The bench uses it as the peer training loop:
  qwen3_reference.py bench --dim ... (see --help)
"""
import argparse
import json
import math
import resource
import struct
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

from qwen3_moe_reference import bias_after_step, moe_block

DTYPES = {"F32": np.float32, "F64": np.float64, "I64": np.int64, "I32": np.int32}


def read_safetensors(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = f.read()
    meta = header.pop("__metadata__", {})
    out = {}
    for name, info in header.items():
        b, e = info["data_offsets"]
        arr = np.frombuffer(data[b:e], dtype=DTYPES[info["dtype"]]).reshape(info["shape"])
        out[name] = torch.from_numpy(arr.copy())
    return out, meta


def rms_norm(x, w, eps):
    xf = x.float()
    return w * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def rope_tables(seq, head_dim, theta):
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))
    freqs = torch.outer(torch.arange(seq, dtype=torch.float64), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().float(), emb.sin().float()


def mlp(x, p, pre, activation):
    """SwiGLU w2(silu(w1 x) * w3 x), or the non-gated w2(act(w1 x)) (gelu: tanh approximation)."""
    h1 = x @ p[pre + "feed_forward.w1.weight"].T
    if activation == "swiglu":
        a = F.silu(h1) * (x @ p[pre + "feed_forward.w3.weight"].T)
    elif activation == "gelu":
        a = F.gelu(h1, approximate="tanh")
    elif activation == "relu":
        a = F.relu(h1)
    else:
        raise SystemExit(f"unknown mlp_activation {activation!r}")
    return a @ p[pre + "feed_forward.w2.weight"].T


def forward(p, cfg, tokens, state=None):
    """tokens [B, S] -> logits [B, S, V]; p maps titan parameter names to tensors. state (dict):
    MoE blocks' expert biases in, auxiliary losses and loads out (qwen3_moe_reference.py)."""
    state = {} if state is None else state
    B, S = tokens.shape
    D, eps = cfg["head_dim"], cfg["norm_eps"]
    cos, sin = rope_tables(S, D, cfg["rope_theta"])
    h = p["tok_embeddings.weight"][tokens]
    causal = torch.ones(S, S, dtype=torch.bool).triu(1)
    for i in range(cfg["n_layers"]):
        pre = f"layers.{i}."
        x = rms_norm(h, p[pre + "attention_norm.weight"], eps)
        q = (x @ p[pre + "attention.wq.weight"].T).view(B, S, -1, D)
        k = (x @ p[pre + "attention.wk.weight"].T).view(B, S, -1, D)
        v = (x @ p[pre + "attention.wv.weight"].T).view(B, S, -1, D)
        if cfg["qk_norm"]:
            q = rms_norm(q, p[pre + "attention.q_norm.weight"], eps)
            k = rms_norm(k, p[pre + "attention.k_norm.weight"], eps)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        rep = q.shape[1] // k.shape[1]
        k = k.repeat_interleave(rep, dim=1)
        v = v.repeat_interleave(rep, dim=1)
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(D)
        scores = scores.masked_fill(causal, float("-inf"))
        attn = torch.softmax(scores.float(), dim=-1).to(q.dtype) @ v
        h = h + attn.transpose(1, 2).reshape(B, S, -1) @ p[pre + "attention.wo.weight"].T
        x = rms_norm(h, p[pre + "ffn_norm.weight"], eps)
        if pre + "moe.router.weight" in p:
            h = h + moe_block(x, p, pre, cfg, state)
        else:
            h = h + mlp(x, p, pre, cfg.get("mlp_activation", "swiglu"))
    h = rms_norm(h, p["norm.weight"], eps)
    out_w = p["output.weight"] if "output.weight" in p else p["tok_embeddings.weight"]
    return h @ out_w.T


def train_step(params, cfg, inputs, labels, opt, before_step=None, state=None):
    state = {} if state is None else state
    logits = forward(params, cfg, inputs, state)
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), labels.reshape(-1))
    for aux in state.get("aux", []):  # MoE load-balancing terms
        loss = loss + aux
    opt.zero_grad()
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(list(params.values()), cfg["max_norm"])
    if before_step:
        before_step()
    opt.step()
    return logits, loss, norm


def make_optimizer(params, cfg):
    return torch.optim.AdamW(list(params.values()), lr=cfg["lr"], betas=(cfg["beta1"], cfg["beta2"]),
                             eps=cfg["eps"], weight_decay=cfg["weight_decay"], foreach=False)


def check(in_path, cpp_path, tol, optimizer_on_cpp_grads):
    """Compares logits, loss, grad norm, clipped gradients and parameters after one AdamW step.

    End to end, parameters after the step agree only while the gradients agree to the last
    bits: Adam's first step moves each element by lr * g / (|g| + eps), so an element whose
    gradient is ~eps (1e-8, where the largest is ~1e-3) moves by an amount that roundoff of
    1e-10 in g changes by a few percent of lr. A C++ path that sums in another order (fused
    kernels) differs from PyTorch by such roundoff; with optimizer_on_cpp_grads the reference
    AdamW therefore steps from the C++ gradients (compared with its own first), so that each
    stage is checked on the same inputs. For the same reason the reference runs on the caller's
    intra-op thread count (--threads): libtorch's GEMMs split their sums by thread, so 1 thread
    against 2 gives gradients that differ in the last bits (up to 2e-7 of the largest), and an
    element whose gradient is 1.5e-9, below eps, then moves 1.3e-6 further: 1.7e-5 of the
    parameters' scale (Qwen3WithQkNorm's layers.0.attention.wk)."""
    tensors, meta = read_safetensors(in_path)
    cfg = json.loads(meta["config"])
    inputs, labels = tensors.pop("inputs"), tensors.pop("labels")
    # MoE expert biases ("buffer.layers.N.moe.expert_bias"), keyed by their layer prefix.
    biases = {k[len("buffer."):-len("moe.expert_bias")]: tensors.pop(k) for k in list(tensors) if k.startswith("buffer.")}
    state = {"bias": biases}
    params = {k[len("param."):]: v.clone().requires_grad_(True) for k, v in tensors.items()}
    opt = make_optimizer(params, cfg)
    cpp, _ = read_safetensors(cpp_path)
    ref_grads = {}

    def before_step():
        for name, p in params.items():
            ref_grads[name] = p.grad.clone()  # already clipped: the C++ side saves clipped grads too
            if optimizer_on_cpp_grads:
                p.grad = cpp["grad." + name].to(p.dtype).clone()

    logits, loss, norm = train_step(params, cfg, inputs, labels, opt, before_step, state)
    ref = {"logits": logits.detach(), "loss": loss.detach().reshape(1),
           "grad_norm": norm.detach().reshape(1).double()}
    if cfg.get("moe_bias_update_coeff", 0) > 0:
        for pre, bias in biases.items():
            ref["buffer_after." + pre + "moe.expert_bias"] = bias_after_step(bias, state["load"][pre],
                                                                            cfg["moe_bias_update_coeff"])
    for name, p in params.items():
        ref["grad." + name] = ref_grads[name]
        ref["param_after." + name] = p.detach()
    worst = 0.0
    for name, r in ref.items():
        c = cpp[name].to(r.dtype)
        rel = ((c - r).abs().max() / r.abs().max().clamp_min(1e-30)).item()
        worst = max(worst, rel)
        status = "ok" if rel <= tol else "MISMATCH"
        print(f"{name:48s} max rel diff {rel:.3e} {status}")
    print(f"worst max rel diff {worst:.3e} (tolerance {tol:g})")
    return 0 if worst <= tol else 1


def bench(args):
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    cfg = dict(head_dim=args.head_dim, norm_eps=1e-6, rope_theta=1e6, n_layers=args.n_layers,
               qk_norm=True, lr=1e-3, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1, max_norm=1.0)
    q, kv = args.n_heads * args.head_dim, args.n_kv_heads * args.head_dim
    shapes = {"tok_embeddings.weight": (args.vocab, args.dim), "norm.weight": (args.dim,),
              "output.weight": (args.vocab, args.dim)}
    for i in range(args.n_layers):
        pre = f"layers.{i}."
        shapes.update({pre + "attention_norm.weight": (args.dim,), pre + "ffn_norm.weight": (args.dim,),
                       pre + "attention.wq.weight": (q, args.dim), pre + "attention.wk.weight": (kv, args.dim),
                       pre + "attention.wv.weight": (kv, args.dim), pre + "attention.wo.weight": (args.dim, q),
                       pre + "attention.q_norm.weight": (args.head_dim,),
                       pre + "attention.k_norm.weight": (args.head_dim,),
                       pre + "feed_forward.w1.weight": (args.ffn, args.dim),
                       pre + "feed_forward.w3.weight": (args.ffn, args.dim),
                       pre + "feed_forward.w2.weight": (args.dim, args.ffn)})
    params = {n: (torch.randn(s) * 0.02).requires_grad_(True) for n, s in shapes.items()}
    opt = make_optimizer(params, cfg)
    tokens = torch.randint(0, args.vocab, (args.batch, args.seq + 1))
    times = []
    for step in range(args.steps):
        t0 = time.perf_counter()
        train_step(params, cfg, tokens[:, :-1], tokens[:, 1:], opt)
        times.append(time.perf_counter() - t0)
    steady = sorted(times[1:])[len(times[1:]) // 2] if len(times) > 1 else times[0]
    peak_rss_gib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1048576.0  # ru_maxrss is in KiB
    print(json.dumps({"tokens_per_s": args.batch * args.seq / steady, "median_step_s": steady,
                      "peak_rss_gib": peak_rss_gib}))
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("check")
    c.add_argument("inputs")
    c.add_argument("cpp_outputs")
    c.add_argument("--tol", type=float, default=1e-5)
    c.add_argument("--optimizer-on-cpp-grads", action="store_true")
    # The caller's intra-op thread count: the GEMMs' reduction order follows it (see check()).
    c.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: torch's default)")
    b = sub.add_parser("bench")
    for name, default in [("dim", 128), ("n_layers", 4), ("n_heads", 8), ("n_kv_heads", 4), ("head_dim", 16),
                          ("ffn", 384), ("vocab", 257), ("batch", 8), ("seq", 128), ("steps", 10), ("threads", 2)]:
        b.add_argument("--" + name, type=int, default=default)
    args = ap.parse_args()
    torch.set_default_dtype(torch.float32)
    if args.cmd == "check":
        if args.threads > 0:
            torch.set_num_threads(args.threads)
        return check(args.inputs, args.cpp_outputs, args.tol, args.optimizer_on_cpp_grads)
    return bench(args)


if __name__ == "__main__":
    sys.exit(main())
