#!/usr/bin/python3
"""Process-level hardening tests of titan-train (run by ctest, see mpi_tests.cmake). Every
scenario starts the real binary as a subprocess with a timeout.
  signal        SIGTERM (sync saves) and SIGINT (async saves) mid-run: exit status 128 + signal,
                a line naming the signal, no .tmp-step-N folder left (a stale one from an
                earlier killed save included), the newest checkpoint loadable
  determinism   the debug model 4 times at once on a busy host with [debug] deterministic = true
                and a seed: per-step losses identical bit for bit
  launchers     launch/titan-train and launch/titan-launch from another folder: relative
                --config and dump paths are the caller's; no build when the binary exists
                (launch/titan-study neither); a titan-launch option without its value is exit
                2 naming it; both set OpenMP's wait spin unless the caller chose one
  extend        a finished run (final save model-only) extended to more steps: resumes from
                the last full checkpoint saying so; with none left, a clear error
  rank_killed   4 ranks through launch/titan-launch, mpi and gloo: rank 2 SIGKILLed mid-run;
                the job ends non-zero within train_timeout_seconds + 10 s naming the rank or
                the op, with no process or gloo rendezvous folder left
  mfu           the log states its MFU peak and its source; MFU never above 100 %
  bad_inputs    the table in hardening_inputs.py: each exits non-zero (no signal, no
                timeout) with its message fragment
  write_failure checkpoint writes that fail (a file size limit: writes fail as on a full
                disk), sync and async: a runtime error naming the rank file and the OS
                reason, no crash at exit (HDF5's exit clean-up re-closed the failed file:
                SIGSEGV); a checkpoint past training.steps is a config error, not an
                exit 0 that trained nothing
  lone_process  a process no launcher started trains with TMPDIR unwritable: it must not
                need Open MPI's session directory, which every lone process shared
                (jf.0/1), so one finishing removed it under another starting (MPI_Init
                failed in 2 of 300 runs, 6 at a time); and 6 such runs at once all pass
usage: hardening_cli.py SCENARIO --titan-train BIN --workdir DIR"""
import argparse
import concurrent.futures
import json
import os
import shutil
import signal
import subprocess
import sys
import time

SRC = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
CONFIG = os.path.join(SRC, "configs/debug_model.toml")
# A tiny, fast job: 1 layer, 16 tokens x 2 sequences per step.
TINY = ["--model.n_layers", "1", "--training.seq_len", "16", "--training.local_batch_size", "2",
        "--training.threads", "1", "--metrics.log_freq", "1", "--metrics.peak_flops", "1e11"]


def fail(msg):
    sys.exit("FAIL: " + msg)


def run(args, cmd, timeout=60, cwd=None, env=None):
    e = dict(os.environ)
    e.update(env or {})
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=cwd, env=e)
    return p.returncode, p.stdout + p.stderr


def losses(dump):
    path = os.path.join(dump, "metrics.jsonl")
    return [json.loads(line)["loss"] for line in open(path)] if os.path.exists(path) else []


def fresh(args, tag):
    d = os.path.join(args.workdir, tag)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    return d


def scenario_signal(args):
    for sig, mode in ((signal.SIGTERM, "disabled"), (signal.SIGINT, "async")):
        dump = fresh(args, "signal_" + sig.name)
        cmd = [args.titan_train, "--config", CONFIG, "--job.dump_folder", dump, "--training.steps", "100000",
               "--checkpoint.enable", "true", "--checkpoint.interval", "3", "--checkpoint.keep_latest_k", "2",
               "--checkpoint.async_mode", mode] + TINY
        # A save killed by an earlier run: its temporary folder must be gone after the stop too.
        os.makedirs(os.path.join(dump, "checkpoint", ".tmp-step-99"))
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        # Wait until a few checkpoints exist, so that the signal lands mid-run with saves going on.
        deadline = time.time() + 60
        ckpt = os.path.join(dump, "checkpoint")
        while time.time() < deadline and not (os.path.isdir(ckpt) and len([n for n in os.listdir(ckpt) if n.startswith("step-")]) >= 2):
            time.sleep(0.05)
        p.send_signal(sig)
        try:
            out, _ = p.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
            fail(f"{sig.name}: titan-train did not stop within 30 s")
        if p.returncode != 128 + sig.value:
            fail(f"{sig.name}: exit status {p.returncode}, want {128 + sig.value}\n{out[-2000:]}")
        if f"stopped by {sig.name}" not in out:
            fail(f"{sig.name}: no line naming the signal\n{out[-2000:]}")
        left = [n for n in os.listdir(ckpt) if n.startswith(".tmp")]
        if left:
            fail(f"{sig.name}: temporary folders left: {left}")
        # The newest checkpoint resumes (it is complete).
        code, out2 = run(args, cmd[:cmd.index("--training.steps") + 1] + ["0"] + cmd[cmd.index("--training.steps") + 2:])
        if code != 0 or "resumed from" not in out2:
            fail(f"{sig.name}: the newest checkpoint does not resume ({code})\n{out2[-2000:]}")
        print(f"ok: {sig.name}: exit {p.returncode}, '{[l for l in out.splitlines() if 'stopped by' in l][0]}'")


def scenario_determinism(args):
    runs = 4
    # The debug config as shipped (seq 128, batch 8): without deterministic, 2-thread runs like
    # these differed in some of 50 steps' losses when 4 ran at once on 2 cores.
    steps = 50
    cmd = lambda d: [args.titan_train, "--config", CONFIG, "--job.dump_folder", d, "--training.steps", str(steps),
                     "--debug.deterministic", "true", "--debug.seed", "7", "--metrics.log_freq", "1",
                     "--metrics.peak_flops", "1e11"]
    dumps = [fresh(args, f"det_{i}") for i in range(runs)]
    procs = [subprocess.Popen(cmd(d), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for d in dumps]
    for p in procs:
        out, _ = p.communicate(timeout=300)
        if p.returncode != 0:
            fail(f"deterministic run exited {p.returncode}\n{out[-2000:]}")
    ls = [losses(d) for d in dumps]
    if len(ls[0]) != steps:
        fail(f"expected {steps} losses, got {ls[0]}")
    for i in range(1, runs):
        if ls[i] != ls[0]:
            first = next(k for k in range(steps) if ls[i][k] != ls[0][k])
            fail(f"run {i} differs from run 0 at step {first + 1}: {ls[i][first]!r} vs {ls[0][first]!r}")
    print(f"ok: {runs} concurrent deterministic runs, {steps} steps, losses identical bit for bit "
          f"(last {ls[0][-1]!r})")


def scenario_launchers(args):
    caller = fresh(args, "launch_caller")
    shutil.copy(CONFIG, os.path.join(caller, "my.toml"))
    env = {"TITAN_BUILD": os.path.dirname(os.path.dirname(args.titan_train))}
    cmd = [os.path.join(SRC, "launch/titan-train"), "--config", "my.toml", "--job.dump_folder", "out",
           "--training.steps", "2"] + TINY
    code, out = run(args, cmd, cwd=caller, env=env)
    if code != 0:
        fail(f"launch/titan-train with a relative --config from another folder exited {code}\n{out[-2000:]}")
    if not os.path.exists(os.path.join(caller, "out", "metrics.jsonl")):
        fail("launch/titan-train: the relative dump folder did not land in the caller's folder")
    if "launch/setup" in out or "Building" in out:
        fail(f"launch/titan-train built although the binary exists\n{out[-2000:]}")
    code, out = run(args, [os.path.join(SRC, "launch/titan-study"), "--help"], cwd=caller, env=env)
    if code != 0 or any(w in out for w in ("launch/setup", "Building", "ninja")):
        fail(f"launch/titan-study --help: exit {code}, or it ran a build although the binary exists\n{out[-2000:]}")
    code, out = run(args, [os.path.join(SRC, "launch/titan-launch"), "-n", "1", "--dry-run", "--", "--config", "my.toml"],
                    cwd=caller, env={"TITAN_LAUNCH_BINARY": args.titan_train})
    if code != 0 or "my.toml" not in out:
        fail(f"titan-launch --dry-run: {code}\n{out}")
    # Both launchers set OpenMP's wait spin unless the caller chose a wait policy (a spinning
    # waiter starves its peer on a shared host; launch/openmp_wait.sh says why).
    env_dump = fresh(args, "launch_env")
    os.makedirs(os.path.join(env_dump, "bin"))
    probe = os.path.join(env_dump, "bin", "titan-train")
    with open(probe, "w") as f:
        f.write('#!/bin/sh\necho "spin=${GOMP_SPINCOUNT:-unset}"\n')
    os.chmod(probe, 0o755)
    for extra, want in (({"GOMP_SPINCOUNT": "", "OMP_WAIT_POLICY": ""}, "spin=30000"),
                        ({"GOMP_SPINCOUNT": "7", "OMP_WAIT_POLICY": ""}, "spin=7"),
                        ({"OMP_WAIT_POLICY": "passive", "GOMP_SPINCOUNT": ""}, "spin=unset")):
        code, out = run(args, [os.path.join(SRC, "launch/titan-train")], env=dict(extra, TITAN_BUILD=env_dump))
        if code != 0 or want not in out:
            fail(f"launch/titan-train with {extra}: exit {code}, want '{want}'\n{out}")
    code, out = run(args, [os.path.join(SRC, "launch/titan-launch"), "-n", "2", "--dry-run", "--", "--config", "my.toml"],
                    env={"TITAN_LAUNCH_BINARY": args.titan_train})
    if code != 0 or "-x GOMP_SPINCOUNT" not in out:
        fail(f"titan-launch --dry-run does not pass GOMP_SPINCOUNT to the ranks: {code}\n{out}")
    # An option given last without its value ended the script with status 1 and no message.
    for argv in (["-n"], ["-n", "2", "--backend"], ["-n", "2", "--mpi-arg"]):
        code, out = run(args, [os.path.join(SRC, "launch/titan-launch")] + argv, env={"TITAN_LAUNCH_BINARY": args.titan_train})
        if code != 2 or f"{argv[-1]} needs a value" not in out:
            fail(f"titan-launch {' '.join(argv)}: exit {code}, want 2 naming the option\n{out}")
    print("ok: launchers keep the caller's folder (relative config and dump paths) and do not rebuild")


def scenario_extend(args):
    # (tag, checkpoint.interval, first run's steps, exit status and fragments of the longer run):
    # with full checkpoints, the newest (step 4) is resumed and the log says why; with none
    # (interval beyond the run), a config error naming the way on, not a silent restart.
    cases = [("extend", "2", "5", 0, ["final model-only export", "step-4"]),
             ("extend_none", "100", "3", 2, ["holds a finished run", "initial_load_path"])]
    for tag, interval, steps, want, fragments in cases:
        base = [args.titan_train, "--config", CONFIG, "--job.dump_folder", fresh(args, tag),
                "--checkpoint.enable", "true", "--checkpoint.interval", interval,
                "--checkpoint.last_save_model_only", "true"] + TINY
        code, out = run(args, base + ["--training.steps", steps])
        if code != 0:
            fail(f"{tag}: first run exited {code}\n{out[-2000:]}")
        code, out = run(args, base + ["--training.steps", str(int(steps) + 3)])
        if code != want or any(f not in out for f in fragments):
            fail(f"{tag}: extending exited {code} (want {want}) without {fragments}\n{out[-2000:]}")
    print("ok: extend resumes the last full checkpoint, saying so; with none, a config error naming the way on")


def scenario_mfu(args):
    dump = fresh(args, "mfu")
    cache = os.path.join(dump, "peak.toml")
    env = {"TITAN_PEAK_CACHE": cache, "TITAN_CPU_CALIBRATION": os.path.join(dump, "none.toml")}
    cmd = [args.titan_train, "--config", CONFIG, "--job.dump_folder", dump, "--training.steps", "3"] + \
        [a for a in TINY if a not in ("--metrics.peak_flops", "1e11")]
    code, out = run(args, cmd, env=env)
    if code != 0 or "MFU peak" not in out or "sgemm probe" not in out or not os.path.exists(cache):
        fail(f"first run must probe, cache and print its peak ({code})\n{out[-2000:]}")
    code, out2 = run(args, cmd, env=env)
    peak1 = [l for l in out.splitlines() if "MFU peak" in l][0].split()[3]
    peak2 = [l for l in out2.splitlines() if "MFU peak" in l][0]
    if code != 0 or "cached in" not in peak2 or peak2.split()[3] != peak1:
        fail(f"second run must reuse the cached peak {peak1}: {peak2}")
    # A peak far too low: MFU capped at 100 % with a warning naming the source.
    code, out = run(args, cmd + ["--metrics.peak_flops", "1"], env=env)
    mfus = [json.loads(l)["mfu"] for l in open(os.path.join(dump, "metrics.jsonl"))]
    if code != 0 or max(mfus) > 100 or "capped at 100%" not in out or "metrics.peak_flops" not in out:
        fail(f"MFU must be capped at 100 with a warning ({code}, {mfus})\n{out[-2000:]}")
    # A cache path that cannot be written: the log must not claim the figure was cached.
    env_ro = dict(env, TITAN_PEAK_CACHE="/proc/titan-none/peak.toml")
    code, out = run(args, cmd, env=env_ro)
    peak3 = next((l for l in out.splitlines() if "MFU peak" in l), "")
    if code != 0 or "not cached (cannot write /proc/titan-none/peak.toml" not in peak3:
        fail(f"an unwritable cache must be named as not written ({code}): {peak3}\n{out[-2000:]}")
    # A cache path at a file that is not TOML (a user's file): warned about and left as it is.
    foreign = os.path.join(dump, "notes.txt")
    with open(foreign, "w") as f:
        f.write("my notes {{\n")
    code, out = run(args, cmd, env=dict(env, TITAN_PEAK_CACHE=foreign))
    if code != 0 or "is not a peak cache" not in out or open(foreign).read() != "my notes {{\n":
        fail(f"a TITAN_PEAK_CACHE that is not TOML must be warned about and kept ({code})\n{out[-2000:]}")
    print(f"ok: MFU peak probed once ({peak1} FLOP/s), reused from the cache, capped at 100 % when too low; "
          "an unwritable cache is said to be one; a file that is not a cache is kept")


def _procs_with(marker):
    """pid -> environment of the live processes whose command line holds `marker`."""
    found = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if marker.encode() not in f.read() or int(pid) == os.getpid():
                    continue
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = dict(kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv)
            with open(f"/proc/{pid}/stat") as f:
                if f.read().split(") ")[1].startswith("Z"):
                    continue  # a zombie is already gone
            found[int(pid)] = env
        except (OSError, ValueError):
            continue
    return found


def scenario_rank_killed(args):
    timeout_s = 5
    for backend in ("mpi", "gloo"):
        dump = fresh(args, "killed_" + backend)
        run_id = f"hardening-kill-{backend}-{os.getpid()}"
        cmd = [os.path.join(SRC, "launch/titan-launch"), "-n", "4", "--backend", backend, "--",
               "--config", CONFIG, "--job.dump_folder", dump, "--training.steps", "100000",
               "--comm.train_timeout_seconds", str(timeout_s)] + TINY
        env = dict(os.environ, TITAN_LAUNCH_BINARY=args.titan_train, TITAN_RUN_ID=run_id)
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        deadline = time.time() + 120
        while time.time() < deadline and len(losses(dump)) < 3 and p.poll() is None:
            time.sleep(0.1)
        victims = [pid for pid, e in _procs_with(dump).items() if e.get(b"OMPI_COMM_WORLD_RANK") == b"2"
                   and b"titan-train" in open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")[0]]
        if len(victims) != 1:
            p.kill()
            fail(f"{backend}: rank 2 of the running job not found ({victims})")
        os.kill(victims[0], signal.SIGKILL)
        t0 = time.time()
        try:
            out, _ = p.communicate(timeout=timeout_s + 40)
        except subprocess.TimeoutExpired:
            p.kill()
            fail(f"{backend}: survivors still running {timeout_s + 40} s after rank 2 was killed")
        elapsed = time.time() - t0
        if p.returncode == 0 or elapsed > timeout_s + 10:
            fail(f"{backend}: exit {p.returncode} after {elapsed:.1f} s (want non-zero within {timeout_s + 10} s)\n{out[-3000:]}")
        names = ["rank 2", "all_reduce", "all_gather", "reduce_scatter", "broadcast", "barrier"]
        if not any(n in out for n in names):
            fail(f"{backend}: no message names the lost rank or the op\n{out[-3000:]}")
        time.sleep(1)
        left = _procs_with(dump)
        if left:
            fail(f"{backend}: processes left behind: {sorted(left)}")
        if os.path.exists("/tmp/titan-gloo-" + run_id):
            fail(f"{backend}: rendezvous folder /tmp/titan-gloo-{run_id} left behind")
        line = next((l for l in out.splitlines() if any(n in l for n in names)), "")
        print(f"ok: {backend}: rank 2 SIGKILLed, job ended {p.returncode} after {elapsed:.1f} s: {line[:160]}")


def scenario_bad_inputs(args):
    from hardening_inputs import bad_inputs
    work = fresh(args, "bad")
    cases = bad_inputs(work, CONFIG, TINY)
    if len(cases) < 40:
        fail(f"only {len(cases)} bad inputs in the table")

    def one(case):
        name, argv, fragment = case
        t0 = time.time()
        try:
            code, out = run(args, [args.titan_train] + argv, timeout=60)
        except subprocess.TimeoutExpired:
            return f"{name}: hang (timeout 60 s)"
        if code == 0:
            return f"{name}: exit 0\n{out[-1500:]}"
        if code < 0 or code >= 128:
            return f"{name}: ended by a signal / abort (status {code})\n{out[-1500:]}"
        if fragment not in out:
            return f"{name}: message lacks '{fragment}' (exit {code})\n{out[-1500:]}"
        if "terminate called" in out or "Exception raised from" in out:
            return f"{name}: a C++ trace instead of a message\n{out[-1500:]}"
        return None

    t0 = time.time()
    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as ex:
        errors = [e for e in ex.map(one, cases) if e]
    if errors:
        fail(f"{len(errors)} of {len(cases)} bad inputs misbehave:\n" + "\n".join(errors))
    print(f"ok: {len(cases)} bad inputs, each a non-zero exit with its message, in {time.time() - t0:.1f} s")


def scenario_write_failure(args):
    import resource

    def file_size_limit():
        # A 1 MiB limit: the 3.2 MB rank file's writes fail with EFBIG, as they fail with
        # ENOSPC on a full disk (ignored SIGXFSZ makes write() return the error).
        resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)

    for mode in ("disabled", "async"):
        dump = fresh(args, "write_failure_" + mode)
        # gloo, which the other lone-process runs here do not cover (the mpi backend passes too).
        # A save every 20 steps: the async one that fails at step 20 must stop the job at a
        # step end soon after (its write fails within milliseconds), not at the next save.
        cmd = [args.titan_train, "--config", CONFIG, "--job.dump_folder", dump, "--training.steps", "100",
               "--checkpoint.enable", "true", "--checkpoint.interval", "20", "--checkpoint.async_mode", mode,
               "--comm.backend", "gloo"] + TINY
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=60, preexec_fn=file_size_limit)
        out = p.stdout + p.stderr
        if p.returncode != 1:
            fail(f"{mode}: a failed checkpoint write exited {p.returncode}, want 1\n{out[-2000:]}")
        line = next((l for l in out.splitlines() if "cannot write" in l), "")
        if "rank-00000.h5" not in line or "File too large" not in line:
            fail(f"{mode}: no line names the rank file and the OS reason\n{out[-2000:]}")
        if "Segmentation" in out or "signal" in out:
            fail(f"{mode}: a crash after the error\n{out[-2000:]}")
        steps = len(losses(dump))
        if steps >= 39:
            fail(f"{mode}: the save of step 20 failed but {steps} steps were logged (reported at the next save?)")
        print(f"ok: {mode}: exit 1 after {steps} logged steps: {line[:200]}")
    # A checkpoint at step 4 resumed by a 3-step config: nothing would train.
    dump = fresh(args, "past_the_end")
    base = [args.titan_train, "--config", CONFIG, "--job.dump_folder", dump, "--checkpoint.enable", "true",
            "--checkpoint.interval", "2", "--checkpoint.last_save_model_only", "false"] + TINY
    code, out = run(args, base + ["--training.steps", "4"])
    if code != 0:
        fail(f"the 4-step run exited {code}\n{out[-2000:]}")
    code, out = run(args, base + ["--training.steps", "3"])
    if code != 2 or "past training.steps = 3" not in out:
        fail(f"resuming step 4 with training.steps = 3 exited {code}\n{out[-2000:]}")
    code, out = run(args, base + ["--training.steps", "0"])
    if code != 0 or "resumed from" not in out:
        fail(f"training.steps = 0 must only load the checkpoint ({code})\n{out[-2000:]}")
    print("ok: a checkpoint past training.steps is a config error; training.steps = 0 only loads")


def scenario_lone_process(args):
    # An unwritable TMPDIR fails MPI_Init at once if the singleton makes a session directory,
    # so this check does not depend on catching the race.
    cmd = lambda d: [args.titan_train, "--config", CONFIG, "--job.dump_folder", d, "--training.steps", "2"] + TINY
    code, out = run(args, cmd(fresh(args, "lone_tmpdir")), env={"TMPDIR": "/proc/titan-none"})
    if code != 0 or "step:  2" not in out:
        fail(f"a lone process with TMPDIR unwritable exited {code}\n{out[-2000:]}")
    runs = 6
    dumps = [fresh(args, f"lone_{i}") for i in range(runs)]
    with concurrent.futures.ThreadPoolExecutor(runs) as pool:
        results = list(pool.map(lambda d: run(args, cmd(d)), dumps))
    bad = [(code, out[-600:]) for code, out in results if code != 0 or "step:  2" not in out]
    if bad:
        fail(f"{len(bad)} of {runs} concurrent lone processes failed:\n{bad[0][1]}")
    print(f"ok: a lone process trains with TMPDIR unwritable; {runs} at once all trained")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(usage=__doc__)
    ap.add_argument("scenario")
    ap.add_argument("--titan-train", required=True)
    ap.add_argument("--workdir", required=True)
    a = ap.parse_args()
    os.makedirs(a.workdir, exist_ok=True)
    globals()["scenario_" + a.scenario](a)
