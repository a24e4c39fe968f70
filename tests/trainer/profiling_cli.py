#!/usr/bin/python3
"""[profiling] traces from titan-train as a subprocess (run by ctest, see mpi_tests.cmake).
  real       2 ranks (FSDP 2, fused collectives) with enable_profiling and profile_freq 2 over
             4 steps: iteration_2 and iteration_4 each hold rank0/rank1 files and a merged
             trace.json that parses as trace-event JSON with a process per rank, a training
             thread with aten matmuls and autograd nodes on each, and the FSDP all-gathers and
             reduce-scatters (group, bytes) on the fsdp group's collectives thread; no other iteration traced
  simulated  a simulated Qwen3-8B step with enable_profiling writes simulated_step.json with
             the compute track and collective tracks
usage: profiling_cli.py SCENARIO --titan-train BIN --mpirun BIN --workdir DIR"""
import argparse
import json
import os
import shutil
import subprocess
import sys

from mpi_flags import MPI_FLAGS

SRC = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TINY = ["--model.n_layers", "2", "--training.seq_len", "16", "--training.local_batch_size", "2",
        "--training.threads", "1", "--metrics.log_freq", "1", "--metrics.peak_flops", "1e11"]


def fail(msg):
    sys.exit("FAIL: " + msg)


def run(cmd, timeout=240):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        fail("exit %d: %s\n%s" % (p.returncode, " ".join(cmd), p.stdout + p.stderr))
    return p.stdout + p.stderr


def load(path):
    if not os.path.isfile(path):
        fail("missing " + path)
    with open(path) as f:
        j = json.load(f)
    if not isinstance(j.get("traceEvents"), list) or not j["traceEvents"]:
        fail(path + ": no traceEvents")
    return j["traceEvents"]


def thread_names(events):
    return {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}


def real(args):
    dump = os.path.join(args.workdir, "real")
    shutil.rmtree(dump, ignore_errors=True)
    cmd = [args.mpirun] + MPI_FLAGS + ["-np", "2", args.titan_train, "--config",
                                       os.path.join(SRC, "configs/debug_model.toml"), "--job.dump_folder", dump,
                                       "--training.steps", "4", "--profiling.enable_profiling", "true",
                                       "--profiling.profile_freq", "2"] + TINY
    out = run(cmd)
    folder = os.path.join(dump, "profile_traces")
    got = sorted(os.listdir(folder)) if os.path.isdir(folder) else []
    if got != ["iteration_2", "iteration_4"]:
        fail("traced iterations %s, expected iteration_2 and iteration_4\n%s" % (got, out))
    for it in got:
        d = os.path.join(folder, it)
        for r in (0, 1):
            mine = load(os.path.join(d, "rank%d_trace.json" % r))
            if {e["pid"] for e in mine} != {r}:
                fail("%s rank%d_trace.json holds other ranks' events" % (it, r))
        events = load(os.path.join(d, "trace.json"))
        names = thread_names(events)
        for r in (0, 1):
            ops = [e for e in events if e["ph"] == "X" and e["pid"] == r]
            train = [e for e in ops if names.get((r, e["tid"])) == "training thread"]
            if not any(e["name"] == "aten::mm" and "input_shapes" in e.get("args", {}) for e in train):
                fail("%s rank %d: no aten::mm with input shapes on the training thread" % (it, r))
            if not any(e["cat"] == "autograd" for e in train):
                fail("%s rank %d: no autograd node on the training thread" % (it, r))
            coll = [e for e in ops if e["cat"] == "collective"]
            kinds = {e["name"] for e in coll}
            for k in ("titan::comm::all_gather", "titan::comm::reduce_scatter"):
                if k not in kinds:
                    fail("%s rank %d: no %s in %s" % (it, r, k, sorted(kinds)))
            fsdp = [e for e in coll if e["args"].get("group") == "fsdp" and e["args"].get("bytes", 0) > 0]
            if not fsdp or any(not names.get((r, e["tid"]), "").startswith("collectives fsdp") for e in fsdp):
                fail("%s rank %d: fused FSDP collectives must run on a collectives thread" % (it, r))
            if any(e["dur"] < 0 or e["ts"] < 0 for e in ops):
                fail("%s rank %d: negative time" % (it, r))
    if "profiling: wrote" not in out:
        fail("the log does not name the trace it wrote\n" + out)
    print("real: ok")


def simulated(args):
    dump = os.path.join(args.workdir, "simulated")
    shutil.rmtree(dump, ignore_errors=True)
    cmd = [args.titan_train, "--config", os.path.join(SRC, "configs/qwen3_8b.toml"), "--job.dump_folder", dump,
           "--simulation.num_chips", "64", "--model.n_layers", "2", "--profiling.enable_profiling", "true"]
    out = run(cmd)
    events = load(os.path.join(dump, "profile_traces", "simulated_step.json"))
    names = set(thread_names(events).values())
    if "compute" not in names or not any("all_gather" in n for n in names):
        fail("simulated trace tracks: %s\n%s" % (sorted(names), out))
    print("simulated: ok")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("scenario", choices=["real", "simulated"])
    ap.add_argument("--titan-train", required=True)
    ap.add_argument("--mpirun", default="mpirun")
    ap.add_argument("--workdir", required=True)
    args = ap.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    {"real": real, "simulated": simulated}[args.scenario](args)


if __name__ == "__main__":
    main()
