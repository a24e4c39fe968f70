"""Shared pieces of the multi-process checkpoint tests (checkpoint_resume.py's scenarios and
moe_bias_resume.py): a titan-train runner on the debug model (seq_len 32, global batch 8,
vocabulary 258, LR warmup 3 steps) that returns per-step losses from metrics.jsonl, checkpoint
and mesh options, the interrupted first run, loss comparison and the h5py check that every
tensor of a checkpoint is stored exactly once."""
import json
import os
import shutil
import subprocess
import sys

from mpi_flags import MPI_FLAGS

SRC = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class Runner:
    def __init__(self, args):
        self.args = args

    def run(self, np, tag, overrides, expect_ok=True, env=None):
        dump = os.path.join(self.args.workdir, tag)
        shutil.rmtree(dump, ignore_errors=True)
        cmd = [self.args.titan_train, "--config", os.path.join(SRC, "configs/debug_model.toml"),
               "--job.dump_folder", dump, "--training.seq_len", "32", "--training.local_batch_size", "2",
               "--training.global_batch_size", "8", "--training.threads", "1", "--metrics.log_freq", "1",
               "--metrics.peak_flops", "1e11",
               "--model.vocab_size", "258", "--lr_scheduler.warmup_steps", "3"] + overrides
        if np > 1:
            cmd = [self.args.mpirun] + MPI_FLAGS + ["-np", str(np)] + cmd
        e = dict(os.environ)
        e.update(env or {})
        p = subprocess.run(cmd, capture_output=True, text=True, env=e)
        out = p.stdout + p.stderr
        if expect_ok and p.returncode != 0:
            sys.exit(f"FAIL: {tag} exited {p.returncode}\n{out}")
        if not expect_ok and p.returncode == 0:
            sys.exit(f"FAIL: {tag} should have failed\n{out}")
        losses = {}
        path = os.path.join(dump, "metrics.jsonl")
        if os.path.exists(path):
            for line in open(path):
                j = json.loads(line)
                losses[j["step"]] = j["loss"]
        return losses, out


def ckpt(folder, *extra):
    return ["--checkpoint.enable", "true", "--checkpoint.folder", folder, "--checkpoint.interval", "5",
            "--checkpoint.last_save_model_only", "false", "--checkpoint.keep_latest_k", "0"] + list(extra)


def mesh(np, replicate=1, tp=1):
    return ["--parallelism.data_parallel_replicate_degree", str(replicate),
            "--parallelism.data_parallel_shard_degree", str(np // replicate // tp),
            "--parallelism.tensor_parallel_degree", str(tp)]


# A checkpoint resumed on another layout: its losses differ from the straight run's only by
# the layouts' roundoff (worst 8.8e-8 over the scenarios; loss_parity.py holds losses to 1e-6).
LAYOUT_TOL = 1e-6

# The first, interrupted run: the 20-step schedule, stopped after the step-10 save.
STOP_AT_10 = {"TITAN_CHECKPOINT_FAULT": "exit_after_step:10"}


def interrupted(r, np, tag, m, folder):
    got, out = r.run(np, tag, m + ["--training.steps", "20"] + ckpt(folder), env=STOP_AT_10)
    if sorted(got) != list(range(1, 11)) or "exit_after_step:10" not in out:
        sys.exit(f"FAIL: {tag} did not stop after step 10 (steps {sorted(got)})\n{out}")
    return got


def compare(name, got, ref, steps, rel):
    worst = 0.0
    for s in steps:
        if s not in got:
            sys.exit(f"FAIL: {name}: no loss for step {s} (have {sorted(got)})")
        d = abs(got[s] - ref[s]) / abs(ref[s])
        worst = max(worst, d)
        if (rel == 0 and got[s] != ref[s]) or d > rel:
            sys.exit(f"FAIL: {name}: step {s} loss {got[s]!r} vs uninterrupted {ref[s]!r} (rel {d:.3e})")
    kind = "bit-identical" if rel == 0 else f"max rel diff {worst:.3e} (tolerance {rel:g})"
    print(f"ok: {name}: steps {steps[0]}..{steps[-1]} {kind}")


def check_tp_files(step_dir):
    """With h5py: every tensor of a TP checkpoint is stored exactly once (tensors replicated over
    tp only by tp rank 0), split ones in tp boxes, and the pieces assemble to the global tensor."""
    import h5py
    import numpy as np
    files = [h5py.File(os.path.join(step_dir, f), "r") for f in sorted(os.listdir(step_dir)) if f.endswith(".h5")]
    names = set()
    for f in files:
        f["model"].visititems(lambda n, o: names.add(n) if isinstance(o, h5py.Dataset) else None)
    boxed = 0
    for n in sorted(names):
        full, seen = None, None
        for f in files:
            if "model/" + n not in f:
                continue
            d = f["model/" + n]
            shape, off, bshape = (tuple(int(x) for x in d.attrs[k]) for k in ("global_shape", "box_offset", "box_shape"))
            if full is None:
                full, seen = np.zeros(shape, np.float32), np.zeros(shape, np.int64)
            box = np.zeros(int(np.prod(bshape)), np.float32)
            cnt = np.zeros(box.size, np.int64)
            fo = int(d.attrs["flat_offset"])
            box[fo:fo + d.size] = d[()]
            cnt[fo:fo + d.size] = 1
            sl = tuple(slice(o, o + b) for o, b in zip(off, bshape))
            full[sl] += box.reshape(bshape)
            seen[sl] += cnt.reshape(bshape)
            boxed += bshape != shape
        if not (seen == 1).all():
            sys.exit(f"FAIL: {n}: elements stored {seen.min()}..{seen.max()} times in {step_dir}")
    print(f"ok: h5py: {len(names)} tensors of {step_dir} each stored exactly once ({boxed} tp-box pieces)")


def straight_and_resumed(r, np, tag, label, m):
    """20 steps straight == 10 steps + a new process resuming for 10, bit for bit; returns the
    straight run's losses and the checkpoint folder (step 10 in it)."""
    straight, _ = r.run(np, f"{tag}_straight", m + ["--training.steps", "20"])
    folder = os.path.join(r.args.workdir, f"ckpt_{tag}")
    shutil.rmtree(folder, ignore_errors=True)
    first = interrupted(r, np, f"{tag}_first", m, folder)
    second, out = r.run(np, f"{tag}_second", m + ["--training.steps", "20"] + ckpt(folder))
    if "resumed from" not in out:
        sys.exit(f"FAIL: the {label} process did not resume\n{out}")
    compare(f"{label} first process", first, straight, list(range(1, 11)), 0)
    compare(f"{label} new process resumed at step 10", second, straight, list(range(11, 21)), 0)
    return straight, folder


MOE = ["--model.flavor", "debugmodel_moe"]


def ep_mesh(np, ep):
    return MOE + mesh(np) + ["--parallelism.expert_parallel_degree", str(ep)]


def resumed_on(r, folder, tag, np, m, name, ref):
    """A copy of folder resumed from its step 10 on another layout: within LAYOUT_TOL of ref."""
    copy = os.path.join(r.args.workdir, f"ckpt_{tag}")
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(folder, copy)
    got, out = r.run(np, tag, m + ["--training.steps", "20"] + ckpt(copy, "--checkpoint.load_step", "10"))
    if "resumed from" not in out or "step-10" not in out:
        sys.exit(f"FAIL: {name}: did not resume from step 10\n{out}")
    compare(name, got, ref, list(range(11, 21)), LAYOUT_TOL)
