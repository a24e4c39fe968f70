#!/usr/bin/env python3
"""Measures, on one NVIDIA GPU, the rates the simulator's NVIDIA rows rest on but no published
figure pins (docs/validation.md, "What the model does not know"):

- the sustained SM clock and power under dense bf16 GEMM load (nvidia-smi sampled while the
  GEMMs run), and GEMM TFLOP/s at Llama-3.1-8B's shapes (16,384 tokens: forward, input
  gradient and weight gradient layouts);
- causal attention through PyTorch's SDPA backends (flash, cuDNN, memory-efficient) at
  TorchTitan's Llama-3.1-8B shape (B 2, 32 heads, S 8192, head_dim 128), forward and backward,
  as a fraction of the large GEMM's rate measured in the same run;
- achieved HBM bandwidth of the eager PyTorch ops TorchTitan's step runs (RMSNorm's fp32
  composite, RoPE through complex numbers, SwiGLU, residual adds, casts, the fp32 loss, foreach
  AdamW), counting the bytes each op must read and write;
- the device time per kernel of a stream of tiny kernels (launch gap) and the host time per op.

It changes no GPU setting (clocks and power limit are read, never set). Needs PyTorch with CUDA
(the device machine's python3). Writes the figures as JSON to --out and a table to stdout.
Usage: launch/gpu_probe.py [--out FILE] [--device cuda|cpu] [--scale F]
  (--device cpu --scale 0.02 runs every code path on tiny shapes, to check the script here)
"""
import argparse
import json
import subprocess
import threading
import time

import torch
import torch.nn.functional as F

ap = argparse.ArgumentParser()
ap.add_argument("--out", default="")
ap.add_argument("--device", default="cuda")
ap.add_argument("--scale", type=float, default=1.0, help="shrink every shape (script check)")
args = ap.parse_args()
dev = torch.device(args.device)
cuda = dev.type == "cuda"
results = {"device": torch.cuda.get_device_name(0) if cuda else "cpu", "torch": torch.__version__}


def dim(n, mult=8):
    return max(mult, int(n * args.scale) // mult * mult)


def sync():
    if cuda:
        torch.cuda.synchronize()


def timed(fn, reps, warmup=2):
    """Seconds per call: the median of `reps` calls timed one by one after warm-up."""
    for _ in range(warmup):
        fn()
    sync()
    times = []
    for _ in range(reps):
        if cuda:
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b) / 1e3)
        else:
            t = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t)
    times.sort()
    return times[len(times) // 2]


class SmiSampler:
    """nvidia-smi readings every 100 ms while a block runs (clock, power, limit, throttling)."""
    fields = "clocks.sm,clocks.mem,power.draw,power.limit,temperature.gpu,clocks_event_reasons.active"

    def __enter__(self):
        self.rows, self.proc = [], None
        if cuda:
            try:
                self.proc = subprocess.Popen(
                    ["nvidia-smi", f"--query-gpu={self.fields}", "--format=csv,noheader,nounits",
                     "-lms", "100"], stdout=subprocess.PIPE, text=True)
                self.thread = threading.Thread(target=self._read, daemon=True)
                self.thread.start()
            except OSError:
                self.proc = None
        return self

    def _read(self):
        for line in self.proc.stdout:
            self.rows.append([v.strip() for v in line.split(",")])

    def __exit__(self, *exc):
        if self.proc:
            self.proc.terminate()
            self.proc.wait()
            self.thread.join(timeout=2)

    def summary(self):
        def col(i):
            vals = []
            for r in self.rows[len(self.rows) // 4:]:  # skip the ramp
                try:
                    vals.append(float(r[i]))
                except (ValueError, IndexError):
                    pass
            vals.sort()
            return vals[len(vals) // 2] if vals else None
        reasons = sorted({r[5] for r in self.rows if len(r) > 5})
        return {"samples": len(self.rows), "sm_clock_mhz": col(0), "mem_clock_mhz": col(1),
                "power_w": col(2), "power_limit_w": col(3), "temperature_c": col(4),
                "throttle_reasons": reasons}


# --- GEMMs ---------------------------------------------------------------------------------
bf16 = torch.bfloat16 if cuda else torch.float32
T, D, KV, FF = dim(16384), dim(4096), dim(1024), dim(14336)


def gemm_case(m, k, n, transpose_a=False, transpose_b=False):
    a = torch.randn((k, m) if transpose_a else (m, k), device=dev, dtype=bf16)
    b = torch.randn((n, k) if transpose_b else (k, n), device=dev, dtype=bf16)
    a = a.t() if transpose_a else a
    b = b.t() if transpose_b else b
    s = timed(lambda: torch.mm(a, b), reps=20)
    return 2 * m * k * n / s / 1e12


gemms = {}
big = dim(8192)
a_big = torch.randn(big, big, device=dev, dtype=bf16)
b_big = torch.randn(big, big, device=dev, dtype=bf16)
with SmiSampler() as smi:
    t_end = time.perf_counter() + (6.0 if cuda else 0.2)
    n_big = 0
    sync()
    t0 = time.perf_counter()
    while time.perf_counter() < t_end:
        for _ in range(10):
            torch.mm(a_big, b_big)
        sync()
        n_big += 10
    big_rate = 2 * big ** 3 * n_big / (time.perf_counter() - t0) / 1e12
gemms[f"{big}^3 random, 6 s sustained"] = big_rate
results["gemm_clock_under_load"] = smi.summary()
zeros = torch.zeros_like(a_big)
gemms[f"{big}^3 zeros"] = 2 * big ** 3 / timed(lambda: torch.mm(zeros, zeros), reps=10) / 1e12
del zeros, a_big, b_big
# Llama-3.1-8B (dim 4096, kv 1024, ffn 14336), 16,384 tokens: forward x W^T, input grad dY W,
# weight grad dY^T X.
for name, n, k in (("q/o", D, D), ("k/v", KV, D), ("w1/w3", FF, D), ("w2", D, FF)):
    gemms[f"fwd {name} {T}x{k}x{n}"] = gemm_case(T, k, n, transpose_b=True)
    gemms[f"dgrad {name} {T}x{n}x{k}"] = gemm_case(T, n, k)
    gemms[f"wgrad {name} {n}x{T}x{k}"] = gemm_case(n, T, k, transpose_a=True)
results["gemm_tflops"] = gemms

# --- attention -------------------------------------------------------------------------------
B, H, S, HD = 2, dim(32, 1), dim(8192, 64), 128 if cuda else dim(128)
attn_fwd_flop = 4 * B * H * S * S * HD / 2  # causal: half the score matrix
attention = {}
try:
    from torch.nn.attention import SDPBackend, sdpa_kernel
    backends = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
                "efficient": SDPBackend.EFFICIENT_ATTENTION}
except ImportError:  # PyTorch < 2.3: whatever SDPA picks
    backends, sdpa_kernel = {"default": None}, None
for name, backend in backends.items():
    q, k, v = (torch.randn(B, H, S, HD, device=dev, dtype=bf16, requires_grad=True) for _ in range(3))
    grad = torch.randn(B, H, S, HD, device=dev, dtype=bf16)

    def fwd():
        if hasattr(F, "scaled_dot_product_attention"):
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
        # PyTorch 1.13 (this script's check on a CPU host): the same maths, unfused.
        s_ = (q @ k.transpose(-1, -2)) / HD ** 0.5
        mask = torch.ones(S, S, device=dev, dtype=torch.bool).triu(1)
        return s_.masked_fill(mask, float("-inf")).softmax(-1) @ v

    def fwd_bwd():
        out = fwd()
        out.backward(grad)

    try:
        if sdpa_kernel is not None:
            with sdpa_kernel(backend):
                tf, tfb = timed(fwd, reps=10), timed(fwd_bwd, reps=10)
        else:
            tf, tfb = timed(fwd, reps=10), timed(fwd_bwd, reps=10)
    except RuntimeError as e:
        attention[name] = {"error": str(e).splitlines()[0][:200]}
        continue
    fwd_rate = attn_fwd_flop / tf / 1e12
    bwd_rate = 2.5 * attn_fwd_flop / (tfb - tf) / 1e12
    attention[name] = {"fwd_tflops": fwd_rate, "bwd_tflops": bwd_rate,
                       "fwd_of_big_gemm": fwd_rate / big_rate, "bwd_of_big_gemm": bwd_rate / big_rate}
results["attention_causal"] = {"shape": [B, H, S, HD], "flop_convention": "causal halved, bwd 2.5x fwd",
                               "backends": attention}
del q, k, v, grad

# --- memory-bound eager ops ------------------------------------------------------------------
band = {}


def bandwidth(name, fn, bytes_moved, reps=20):
    s = timed(fn, reps=reps)
    band[name] = {"GB_per_s": bytes_moved / s / 1e9, "us": s * 1e6}


x = torch.randn(T, D, device=dev, dtype=bf16)
xf = x.float()
r = torch.rand(T, 1, device=dev)
w = torch.randn(D, device=dev, dtype=bf16)
n = T * D
e2 = x.element_size()
bandwidth("copy bf16", lambda: x.clone(), 2 * e2 * n)
bandwidth("cast bf16->fp32", lambda: x.float(), (e2 + 4) * n)
bandwidth("pow fp32", lambda: xf.pow(2), 8 * n)
bandwidth("mean(-1) fp32", lambda: xf.mean(-1, keepdim=True), 4 * n)
bandwidth("mul fp32 by row", lambda: xf * r, 8 * n)
bandwidth("cast fp32->bf16", lambda: xf.type_as(x), (4 + e2) * n)
bandwidth("mul bf16 by weight", lambda: x * w, 2 * e2 * n)
bandwidth("add bf16", lambda: x + x, 3 * e2 * n)


def rmsnorm():  # TorchTitan's RMSNorm: fp32 composite, then the weight
    h = x.float()
    return (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-5)).type_as(x) * w


bandwidth("RMSNorm composite (min bytes)", rmsnorm, 2 * e2 * n)
g, u = torch.randn(T, FF, device=dev, dtype=bf16), torch.randn(T, FF, device=dev, dtype=bf16)
bandwidth("silu(g) * u (min bytes)", lambda: F.silu(g) * u, 3 * e2 * T * FF)
del g, u
xq = torch.randn(B, S, H, HD, device=dev, dtype=bf16)
freqs = torch.polar(torch.ones(S, HD // 2, device=dev), torch.rand(S, HD // 2, device=dev))


def rope():  # TorchTitan's apply_rotary_emb on one of q/k
    c = torch.view_as_complex(xq.float().reshape(B, S, H, HD // 2, 2))
    return torch.view_as_real(c * freqs.view(1, S, 1, HD // 2)).flatten(3).type_as(xq)


bandwidth("RoPE complex (min bytes)", rope, 2 * xq.element_size() * xq.numel())
del xq, x, xf
V = dim(128256)
logits = torch.randn(T // 2, V, device=dev, dtype=bf16, requires_grad=True)
tgt = torch.randint(0, V, (T // 2,), device=dev)


def loss_fwd_bwd():
    F.cross_entropy(logits.float(), tgt).backward()


bandwidth("cross_entropy fp32 fwd+bwd (min bytes)", loss_fwd_bwd, 2 * e2 * logits.numel(), reps=10)
del logits
# AdamW over one GPU's shard of an 8B model (1.0e9 fp32 parameters in 291 tensors): reads p, g,
# m, v and writes p, m, v.
per = max(1, int(1.0e9 * args.scale ** 2) // 291)
params = [torch.randn(per, device=dev, requires_grad=True) for _ in range(291)]
for p in params:
    p.grad = torch.randn_like(p)
opt = torch.optim.AdamW(params, lr=1e-4, foreach=True)
bandwidth("AdamW foreach fp32 (28 B/param)", opt.step, 28 * per * 291, reps=5)
del params, opt
results["eager_bandwidth"] = band

# --- launch gap and host time per op ---------------------------------------------------------
tiny = torch.randn(256, device=dev)
ops = 2000


def stream():
    y = tiny
    for _ in range(ops):
        y = y + 1.0
    return y


sync()
t = time.perf_counter()
stream()
host = (time.perf_counter() - t) / ops
device_per_kernel = timed(stream, reps=5) / ops
results["launch"] = {"host_us_per_op": host * 1e6, "device_us_per_tiny_kernel": device_per_kernel * 1e6}

# --- report ----------------------------------------------------------------------------------
print(f"device {results['device']}, torch {results['torch']}")
print("GEMM clock under load:", results["gemm_clock_under_load"])
for k_, v_ in gemms.items():
    print(f"  gemm {k_:40s} {v_:8.1f} TFLOP/s")
for k_, v_ in attention.items():
    print(f"  attention {k_:10s} {v_}")
for k_, v_ in band.items():
    print(f"  {k_:40s} {v_['GB_per_s']:8.1f} GB/s  {v_['us']:9.1f} us")
print("  launch:", results["launch"])
if args.out:
    with open(args.out, "w") as f:
        json.dump(results, f, indent=1)
