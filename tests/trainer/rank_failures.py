#!/usr/bin/python3
"""Failures at start-up of a 2-rank titan-train job under a plain mpirun (no titan-launch),
run by ctest (tests/trainer/mpi_tests.cmake). Every run has a timeout, so a hang fails.
  gloo_folder    gloo backend, rank 1 fails with a config error 3 s after rank 0 started:
                 rank 0 is waiting in the rendezvous, its folder /tmp/titan-gloo-ompi-<job id>
                 exists, mpirun ends it (SIGTERM, SIGKILL 1 s later); the folder must be gone
                 and rank 0 must say why it ended
  shared_error   both ranks read the same config file with the same unknown key (mpi and
                 gloo): exactly one error line, from rank 0, "all 2 ranks", naming the key
                 and the file; non-zero exit
  one_rank_error only rank 1's file has the unknown key (mpi and gloo): one error line,
                 "rank 1: ...", naming key and file; non-zero exit within 20 s
  startup_signal mpi backend, rank 1 starts 30 s late, so rank 0 waits in MPI_Init; one
                 SIGTERM to rank 0 must end the job within 10 s (it was only noted for a
                 step end that start-up never reached, so `timeout` could not stop a job)
usage: rank_failures.py SCENARIO --titan-train BIN --mpirun MPIRUN --workdir DIR"""
import argparse
import os
import re
import shutil
import signal
import subprocess
import sys

from mpi_flags import MPI_FLAGS
import threading
import time

SRC = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CONFIG = os.path.join(SRC, "configs/debug_model.toml")
TINY = ["--model.n_layers", "1", "--training.seq_len", "16", "--training.local_batch_size", "2",
        "--training.threads", "1", "--training.steps", "2", "--metrics.peak_flops", "1e11"]
LIMIT = 60  # seconds for one mpirun; the jobs below end in a few


def fail(msg):
    sys.exit("FAIL: " + msg)


def clean_env():
    # No launcher variables from the caller: the ranks must meet by Open MPI's job id.
    return {k: v for k, v in os.environ.items()
            if not k.startswith(("TITAN_MASTER_", "TITAN_RUN_ID", "TITAN_RANK", "TITAN_WORLD"))}


def bad_config(args):
    d = os.path.join(args.workdir, "rank_failures")
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    path = os.path.join(d, "bad.toml")
    with open(path, "w") as f:
        f.write(open(CONFIG).read() + "\n[checkpoint]\nbogus_key = 3\n")
    return d, path


def rank_cmd(args, config, dump, backend, delay=0):
    """One side of `mpirun A : B`; a shell prints the job id first (and may wait)."""
    train = [args.titan_train, "--config", config, "--job.dump_folder", dump,
             "--comm.backend", backend] + TINY
    script = ('echo "job id: $OMPI_MCA_ess_base_jobid pid: $$ rank: $OMPI_COMM_WORLD_RANK" >&2; '
              'sleep %d; exec "$@"' % delay)
    return ["-np", "1", "sh", "-c", script, "sh"] + train


def run_job(args, sides, watch=None):
    """Runs mpirun over the sides; watch(line) sees each output line as it comes."""
    cmd = [args.mpirun] + MPI_FLAGS + sides[0] + [":"] + sides[1]
    start = time.time()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         env=clean_env())
    lines = []

    def read():
        for line in p.stdout:
            lines.append(line)
            if watch:
                watch(line)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        p.wait(timeout=LIMIT)
    except subprocess.TimeoutExpired:
        p.kill()
        fail(f"hung (> {LIMIT} s): {' '.join(cmd)}\n{''.join(lines)}")
    reader.join(5)
    out = "".join(lines)
    print(out[-4000:])
    return p.returncode, out, time.time() - start


def rank_line_watcher(seen):
    """A run_job watch that fills seen["job"] and seen["pid"][rank] from the wrapper's lines."""
    seen.setdefault("pid", {})

    def watch(line):
        m = re.match(r"job id: (\S+) pid: (\d+) rank: (\d+)", line)
        if m:
            seen["job"] = m.group(1)
            seen["pid"][int(m.group(3))] = int(m.group(2))
    return watch


def error_lines(out):
    return [l for l in out.splitlines() if "config error" in l]


def scenario_gloo_folder(args):
    d, bad = bad_config(args)
    seen = {"folder": None, "existed": False}
    watch = rank_line_watcher(seen)

    def poll():  # the folder must appear while rank 1 sleeps, or the test proves nothing
        while not seen["existed"]:
            if "job" in seen:
                seen["folder"] = "/tmp/titan-gloo-ompi-" + seen["job"]
                seen["existed"] = os.path.isdir(seen["folder"])
            time.sleep(0.05)

    threading.Thread(target=poll, daemon=True).start()
    rc, out, took = run_job(args, [rank_cmd(args, CONFIG, os.path.join(d, "good"), "gloo"),
                                   rank_cmd(args, bad, os.path.join(d, "bad"), "gloo", delay=3)],
                            watch)
    if rc == 0:
        fail("the job succeeded")
    if not seen["folder"]:
        fail("no rank printed its job id")
    if not seen["existed"]:
        fail(f"{seen['folder']} never appeared: rank 0 did not reach the rendezvous in 3 s")
    if os.path.exists(seen["folder"]):
        fail(f"rendezvous folder {seen['folder']} left behind")
    if "rank 0: SIGTERM while waiting for peers in the gloo rendezvous" not in out:
        fail("rank 0 did not say why it ended")
    print(f"PASS: exit {rc} after {took:.1f} s, {seen['folder']} existed and was removed")


def check_error_line(line, bad):
    for part in ("checkpoint.bogus_key", bad):
        if part not in line:
            fail(f"error line does not name {part}: {line}")


def scenario_shared_error(args):
    d, bad = bad_config(args)
    for backend in ("mpi", "gloo"):
        side = rank_cmd(args, bad, os.path.join(d, backend), backend)
        rc, out, took = run_job(args, [side, side])
        errs = error_lines(out)
        if rc == 0:
            fail(f"{backend}: the job succeeded")
        if len(errs) != 1:
            fail(f"{backend}: {len(errs)} error lines, want one: {errs}")
        if not errs[0].startswith("titan: all 2 ranks: config error: "):
            fail(f"{backend}: the line does not say that all ranks agree: {errs[0]}")
        check_error_line(errs[0], bad)
        print(f"PASS {backend}: one line, exit {rc}, {took:.1f} s")


def scenario_one_rank_error(args):
    d, bad = bad_config(args)
    for backend in ("mpi", "gloo"):
        rc, out, took = run_job(args, [rank_cmd(args, CONFIG, os.path.join(d, backend + "0"), backend),
                                       rank_cmd(args, bad, os.path.join(d, backend + "1"), backend)])
        errs = error_lines(out)
        if rc == 0:
            fail(f"{backend}: the job succeeded")
        if len(errs) != 1 or not errs[0].startswith("titan: rank 1: config error: "):
            fail(f"{backend}: want one line from rank 1, got {errs}")
        check_error_line(errs[0], bad)
        if took > 20:
            fail(f"{backend}: took {took:.1f} s > 20 s")
        print(f"PASS {backend}: rank 1's line, exit {rc}, {took:.1f} s")


def scenario_startup_signal(args):
    d, _ = bad_config(args)
    seen = {"sent": None}
    watch = rank_line_watcher(seen)

    def signal_rank0():
        while 0 not in seen["pid"]:
            time.sleep(0.05)
        time.sleep(3)  # rank 0 is past parsing, in MPI_Init waiting for rank 1
        seen["sent"] = time.time()
        os.kill(seen["pid"][0], signal.SIGTERM)

    threading.Thread(target=signal_rank0, daemon=True).start()
    rc, out, took = run_job(args, [rank_cmd(args, CONFIG, os.path.join(d, "r0"), "mpi"),
                                   rank_cmd(args, CONFIG, os.path.join(d, "r1"), "mpi", delay=30)], watch)
    if seen["sent"] is None:
        fail("rank 0 never printed its pid")
    after = time.time() - seen["sent"]
    if rc == 0:
        fail("the job succeeded")
    if after > 10:
        fail(f"the job ended {after:.1f} s after SIGTERM to rank 0 (> 10 s)")
    if "stop signal during start-up" not in out:
        fail("rank 0 did not say why it ended")
    print(f"PASS: exit {rc}, {after:.1f} s after SIGTERM to rank 0 in start-up")


def main():
    ap = argparse.ArgumentParser(usage=__doc__)
    ap.add_argument("scenario")
    ap.add_argument("--titan-train", required=True)
    ap.add_argument("--mpirun", required=True)
    ap.add_argument("--workdir", required=True)
    a = ap.parse_args()
    globals()["scenario_" + a.scenario](a)


if __name__ == "__main__":
    main()
