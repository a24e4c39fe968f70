#!/usr/bin/python3
"""Exact resume of the MoE expert biases (TorchTitan's auxiliary-loss-free balancing), driven
through titan-train (run by ctest, see mpi_tests.cmake). The debug MoE (configs/debug_moe.toml,
seq_len 32, global batch 8) with model.moe_bias_update_coeff 1e-3 trains 20 steps straight,
and 10 steps (stopped after the step-10 save, TITAN_CHECKPOINT_FAULT=exit_after_step:10) plus a
NEW process resuming for 10, on NP = 1 (one process) or NP = 2 (FSDP 2 and PP 2 on mpi). Checks:
  - the per-step losses of both halves equal the straight run's bit for bit;
  - every model_buffers/layers.N.moe.expert_bias of the step-20 checkpoints is bitwise equal
    between the two runs, and nonzero at step 10 (the bias moved, so dropping it would matter);
  - each bias is stored once over the rank files: by rank 0 (FSDP: every rank holds the same
    value), by each stage's first rank for its own layers (PP);
  - NP 1: the biases change the losses (the straight run with the coefficient 0 differs), so a
    resume that restarted them at zero could not pass the first check (it failed at step 11,
    rel 4e-4, while the reader skipped the biases);
  - NP 2: the FSDP 2 step-10 checkpoint resumed by one process follows the FSDP 2 run to 1e-6.
usage: moe_bias_resume.py NP --titan-train BIN --mpirun BIN --workdir DIR"""
import argparse
import json
import os
import shutil
import subprocess
import sys

import h5py
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from checkpoint_runs import LAYOUT_TOL, MPI_FLAGS, STOP_AT_10, ckpt, compare  # noqa: E402

SRC = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run(args, np_, tag, overrides, env=None):
    dump = os.path.join(args.workdir, tag)
    shutil.rmtree(dump, ignore_errors=True)
    cmd = [args.titan_train, "--config", os.path.join(SRC, "configs/debug_moe.toml"), "--job.dump_folder", dump,
           "--training.seq_len", "32", "--training.local_batch_size", "2", "--training.global_batch_size", "8",
           "--training.threads", "1", "--metrics.log_freq", "1", "--metrics.peak_flops", "1e11",
           "--lr_scheduler.warmup_steps", "3", "--training.steps", "20"] + overrides
    if np_ > 1:
        cmd = [args.mpirun] + MPI_FLAGS + ["-np", str(np_)] + cmd
    e = dict(os.environ)
    e.update(env or {})
    p = subprocess.run(cmd, capture_output=True, text=True, env=e)
    out = p.stdout + p.stderr
    if p.returncode != 0:
        sys.exit(f"FAIL: {tag} exited {p.returncode}\n{out}")
    losses = {}
    for line in open(os.path.join(dump, "metrics.jsonl")):
        j = json.loads(line)
        losses[j["step"]] = j["loss"]
    return losses, out


def biases(step_dir, np_, writers):
    """{name: array} over the rank files; `writers`: {rank: layers it must store, once}."""
    out = {}
    for r in range(np_):
        with h5py.File(os.path.join(step_dir, f"rank-{r:05d}.h5"), "r") as f:
            names = sorted(f["model_buffers"]) if "model_buffers" in f else []
            want = [f"layers.{i}.moe.expert_bias" for i in writers.get(r, [])]
            if names != want:
                sys.exit(f"FAIL: {step_dir}: rank {r} stores the expert biases {names}, expected {want}")
            out.update({n: f["model_buffers"][n][()] for n in names})
    return out


def resume_scenario(args, np_, tag, label, m, writers):
    on = m + ["--model.moe_bias_update_coeff", "1e-3"]
    straight_dir = os.path.join(args.workdir, f"ckpt_{tag}_straight")
    resumed_dir = os.path.join(args.workdir, f"ckpt_{tag}_resumed")
    for d in (straight_dir, resumed_dir):
        shutil.rmtree(d, ignore_errors=True)
    straight, _ = run(args, np_, f"{tag}_straight", on + ckpt(straight_dir))
    first, out = run(args, np_, f"{tag}_first", on + ckpt(resumed_dir), env=STOP_AT_10)
    if sorted(first) != list(range(1, 11)) or "exit_after_step:10" not in out:
        sys.exit(f"FAIL: {tag}: the first run did not stop after step 10 (steps {sorted(first)})\n{out}")
    second, out = run(args, np_, f"{tag}_second", on + ckpt(resumed_dir))
    if "resumed from" not in out:
        sys.exit(f"FAIL: {tag}: the second process did not resume\n{out}")
    compare(f"{label} first process", first, straight, list(range(1, 11)), 0)
    compare(f"{label} new process resumed at step 10", second, straight, list(range(11, 21)), 0)
    at10 = biases(os.path.join(resumed_dir, "step-10"), np_, writers)
    if not all(np.any(v != 0) for v in at10.values()):
        sys.exit(f"FAIL: {label}: an expert bias is still zero at step 10")
    want = biases(os.path.join(straight_dir, "step-20"), np_, writers)
    got = biases(os.path.join(resumed_dir, "step-20"), np_, writers)
    for n in want:
        if want[n].dtype != np.float32 or not np.array_equal(want[n], got[n]):
            sys.exit(f"FAIL: {label}: {n} at step 20: resumed {got[n]} vs uninterrupted {want[n]}")
    print(f"ok: {label}: the 4 expert biases at step 20 are bit-identical (max |bias| "
          f"{max(float(np.abs(v).max()) for v in want.values()):.3e}), each stored once")
    return straight, resumed_dir


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("np", type=int, choices=[1, 2])
    ap.add_argument("--titan-train", required=True)
    ap.add_argument("--mpirun", default="mpirun")
    ap.add_argument("--workdir", required=True)
    args = ap.parse_args()
    args.workdir = os.path.join(args.workdir, f"moe_bias{args.np}")
    os.makedirs(args.workdir, exist_ok=True)
    every = [0, 1, 2, 3]
    if args.np == 1:
        one = ["--parallelism.data_parallel_shard_degree", "1"]
        straight, _ = resume_scenario(args, 1, "np1", "one process", one, {0: every})
        off, _ = run(args, 1, "off", one)
        diff = [s for s in range(1, 21) if off[s] != straight[s]]
        if not diff:
            sys.exit("FAIL: the bias update changes no loss: the test would not see a lost bias")
        print(f"ok: the bias update changes the losses from step {diff[0]}")
    else:
        fsdp = ["--parallelism.data_parallel_shard_degree", "2"]
        straight, folder = resume_scenario(args, 2, "fsdp2", "FSDP 2", fsdp, {0: every})
        pp = ["--parallelism.data_parallel_shard_degree", "1", "--parallelism.pipeline_parallel_degree", "2"]
        resume_scenario(args, 2, "pp2", "PP 2", pp, {0: [0, 1], 1: [2, 3]})
        for d in ("step-15", "step-20"):
            shutil.rmtree(os.path.join(folder, d))
        got, out = run(args, 1, "fsdp2_to_one", ["--parallelism.data_parallel_shard_degree", "1"] +
                       ["--model.moe_bias_update_coeff", "1e-3"] + ckpt(folder))
        if "resumed from" not in out or "step-10" not in out:
            sys.exit(f"FAIL: one process did not resume the FSDP 2 step-10 checkpoint\n{out}")
        compare("FSDP 2 -> one process", got, straight, list(range(11, 21)), LAYOUT_TOL)
    shutil.rmtree(args.workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
