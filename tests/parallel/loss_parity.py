#!/usr/bin/python3
"""Loss parity of titan's parallelisms (run by ctest with Debian's /usr/bin/python3).

Runs parity_runner once single-process and once per parallel layout (same seed and global
batch, fp32), then checks that every step's loss and gradient norm and the final parameters
agree within a relative tolerance. Usage:
  loss_parity.py RUNNER MPIRUN_FLAGS... -- LAYOUT [LAYOUT ...]
A layout is NAME:NP:override,override,... e.g. fsdp4:4:--parallelism.data_parallel_shard_degree=4
An argument +override,override,... adds overrides to every run, the single process included
(e.g. +--model.vocab_size=258 so that the vocabulary divides over tensor parallelism).
An argument ^override,... adds overrides to the single process only: pipeline layouts give
it their micro-batch size (^--training.local_batch_size=1), because a weight gradient summed
over 32 or 64 tokens in one GEMM rounds differently, and Adam amplifies that past 1e-5 in
ten steps (measured: one process at local batch 1 vs 2 differs by 1.08e-5 on
attention.wo, exactly as much as PP 2 does, while PP 2 against local batch 1 agrees to 1e-7).
An argument %TOL sets the parameters' tolerance (default 1e-5) for layouts measured tighter.
"""
import json
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np

# Parameters: 1e-5 in norm (Adam lifts reassociation roundoff, see rel()). Losses and gradient
# norms are not amplified so: they agree to ~1e-7 on every layout, and are held to 1e-6.
TOL = 1e-5
STEP_TOL = 1e-6
BASE = ["--config", os.path.join(os.path.dirname(__file__), "..", "..", "configs", "debug_model.toml"),
        "--training.steps=10", "--training.seq_len=32", "--training.global_batch_size=8",
        "--training.local_batch_size=2", "--model.n_layers=2", "--metrics.peak_flops=1e11",
        "--lr_scheduler.warmup_steps=2", "--training.threads=1", "--comm.train_timeout_seconds=60"]


def read(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        dt = {"F32": np.float32, "F64": np.float64}[info["dtype"]]
        out[name] = np.frombuffer(data[b:e], dtype=dt).reshape(info["shape"]).astype(np.float64)
    return out


def run(runner, mpirun, np_, overrides, out, dump):
    cmd = [runner, out] + BASE + ["--job.dump_folder=" + dump] + overrides
    if np_ > 1:
        cmd = mpirun + ["-np", str(np_)] + cmd
    res = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)
    if res.returncode != 0:
        print(res.stdout)
        raise SystemExit(f"run failed ({res.returncode}): {' '.join(cmd)}")


def rel(a, b):
    # Per tensor, in norm: data parallelism adds per-rank partial gradient sums where a single
    # process adds micro-batches one by one; that reassociation (~1e-8) is amplified by
    # Adam's 1/sqrt(v) for near-zero-gradient entries, so single elements drift more than
    # the tensor does. The element-wise figure is printed too.
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


def rel_elem(a, b):
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-30))


def main():
    args = sys.argv[1:]
    sep = args.index("--")
    runner, mpirun, layouts = args[0], args[1:sep], args[sep + 1:]
    for extra in [a for a in layouts if a.startswith("+")]:
        BASE.extend(o for o in extra[1:].split(",") if o)
    single_only = [o for a in layouts if a.startswith("^") for o in a[1:].split(",") if o]
    param_tol = TOL
    for a in [a for a in layouts if a.startswith("%")]:
        param_tol = float(a[1:])
    layouts = [a for a in layouts if not a.startswith(("+", "^", "%"))]
    tmp = tempfile.mkdtemp(prefix="titan_parity_")
    ref_path = os.path.join(tmp, "single.safetensors")
    run(runner, mpirun, 1, single_only, ref_path, os.path.join(tmp, "single"))
    ref = read(ref_path)
    print("single process losses:", " ".join(f"{x:.6f}" for x in ref["losses"]))
    failed = []
    for layout in layouts:
        name, np_, over = layout.split(":", 2)
        path = os.path.join(tmp, name + ".safetensors")
        run(runner, mpirun, int(np_), [o for o in over.split(",") if o], path, os.path.join(tmp, name))
        got = read(path)
        loss_rel = max(abs(a - b) / abs(b) for a, b in zip(got["losses"], ref["losses"]))
        # The gradient norm before clipping, the direct sight of a gradient off by a constant
        # factor (a reduction that averages where it should sum): AdamW's update is scale-free
        # but for eps and clipping, so the parameters show one only through those (measured,
        # FSDP 2 with the data-parallel gradients halved: gradient norm 0.51, parameters 2.5e-2,
        # 1.2e-3 with clipping off, losses 2.6e-3 and 1.1e-5).
        norm_rel = max(abs(a - b) / abs(b) for a, b in zip(got["grad_norms"], ref["grad_norms"]))
        param_rel = max(rel(got[k], ref[k]) for k in ref if k.startswith("param."))
        elem_rel = max(rel_elem(got[k], ref[k]) for k in ref if k.startswith("param."))
        exact = all(np.array_equal(got[k], ref[k]) for k in ref)
        ok = (loss_rel <= STEP_TOL and norm_rel <= STEP_TOL and param_rel <= param_tol and len(got["losses"]) == len(ref["losses"])
              and len(got["grad_norms"]) == len(ref["grad_norms"]))
        if name.startswith("fsdp"):
            # Sharded bytes per rank: 1/N of the single process, plus at most the padding of
            # each parameter to a multiple of N elements (4-byte fp32).
            n = int(np_)
            params = [k for k in ref if k.startswith("param.")]
            limit = sum(-(-ref[k].size // n) * 4 for k in params)
            for what in ("rank0_param_bytes", "rank0_optimizer_bytes"):
                single, sharded = ref[what][0], got[what][0]
                factor = 2 if what == "rank0_optimizer_bytes" else 1  # exp_avg and exp_avg_sq
                fits = single / n <= sharded <= factor * limit
                print(f"{'':28s} {what}: single {single:.0f}, sharded {sharded:.0f} "
                      f"(1/{n} = {single / n:.0f}, padded limit {factor * limit}) {'ok' if fits else 'MISMATCH'}")
                ok = ok and fits
        print(f"{name:28s} np={np_}  max loss rel diff {loss_rel:.2e}  grad norm {norm_rel:.2e}  param rel diff {param_rel:.2e} (norm), {elem_rel:.2e} (max element)"
              f"  {'bit-identical' if exact else ''}  {'ok' if ok else 'MISMATCH'}")
        if not ok:
            failed.append(name)
    if failed:
        raise SystemExit("loss parity failed for: " + ", ".join(failed))


if __name__ == "__main__":
    main()
