#!/usr/bin/env python3
"""Checks of the gloo rendezvous (collectives/gloo_store.h), run by mpi_tests.cmake.

  gloo_rendezvous.py tcp-manual NP BINARY ARGS...
      NP processes started by hand (TITAN_RANK / TITAN_WORLD_SIZE, no job id, so no file
      store is possible) meet through a TCP store at 127.0.0.1 on a free port; all exit 0.
  gloo_rendezvous.py tcp-ompi MPIRUN-COMMAND...
      the command (an mpirun of timeout_probe --mode=ok, with `-x TITAN_MASTER_PORT`) gets a
      free TITAN_MASTER_PORT and no TITAN_MASTER_ADDR: the ranks must use a TCP store at
      Open MPI's launcher host on that port, and exit 0.
  gloo_rendezvous.py unreachable PROBE
      rank 1 of 2 alone, its TCP store never served: it must fail within 15 s naming
      127.0.0.1:PORT and its rank.
  gloo_rendezvous.py cleanup MPIRUN-COMMAND...
      a plain mpirun of a failing gloo job (no titan-launch): it must fail, and the
      /tmp/titan-gloo-<job id> folder its ranks printed must be gone afterwards.
"""
import os
import re
import socket
import subprocess
import sys
import time


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("TITAN_MASTER_", "TITAN_RUN_ID", "TITAN_RANK", "TITAN_WORLD"))}
    env.update({k: str(v) for k, v in extra.items()})
    return env


def run(cmd, env, limit):
    start = time.time()
    try:
        p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True, timeout=limit)
    except subprocess.TimeoutExpired as e:
        fail(f"{' '.join(cmd)} hung (> {limit} s); output:\n{e.output}")
    out = p.stdout
    print(out[-4000:])
    return p.returncode, out, time.time() - start


def tcp_manual(np, cmd):
    port = free_port()
    procs = []
    for r in range(np):
        env = clean_env(TITAN_RANK=r, TITAN_WORLD_SIZE=np, TITAN_MASTER_ADDR="127.0.0.1",
                        TITAN_MASTER_PORT=port)
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True))
    codes = []
    for r, p in enumerate(procs):
        try:
            out, _ = p.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            fail(f"rank {r} hung")
        print(f"--- rank {r} (exit {p.returncode})\n{out[-3000:]}")
        codes.append(p.returncode)
    if any(codes):
        fail(f"exit codes {codes}")
    print(f"PASS: {np} ranks met through the TCP store at 127.0.0.1:{port}")


def tcp_ompi(cmd):
    port = free_port()
    rc, out, _ = run(cmd, clean_env(TITAN_MASTER_PORT=port), 120)
    if rc != 0:
        fail(f"exit code {rc}")
    want = rf"rendezvous TCP store at \S+:{port} \(from Open MPI launcher host"
    if not re.search(want, out):
        fail(f"no line matches {want}")
    print(f"PASS: Open MPI launcher host, port {port}")


def unreachable(probe):
    port = free_port()
    env = clean_env(TITAN_RANK=1, TITAN_WORLD_SIZE=2, TITAN_MASTER_ADDR="127.0.0.1",
                    TITAN_MASTER_PORT=port)
    rc, out, took = run([probe, "--backend=gloo", "--mode=ok", "--init-timeout=3"], env, 60)
    if rc == 0:
        fail("rank 1 succeeded without a store")
    want = rf"rank 1 of 2 cannot reach 127\.0\.0\.1:{port}"
    if not re.search(want, out):
        fail(f"no line matches {want}")
    if took > 15:
        fail(f"took {took:.1f} s > 15 s")
    print(f"PASS: failed in {took:.1f} s with exit {rc}")


def cleanup(cmd):
    rc, out, took = run(cmd, clean_env(), 60)
    if rc == 0:
        fail("the job succeeded")
    dirs = set(re.findall(r"rendezvous file store in (/tmp/titan-gloo-\S+)", out))
    if not dirs:
        fail("no rank printed its rendezvous folder")
    left = [d for d in dirs if os.path.exists(d)]
    if left:
        fail(f"left behind: {left}")
    print(f"PASS: exit {rc} after {took:.1f} s, {sorted(dirs)} removed")


def main():
    if len(sys.argv) < 3:
        print(__doc__)
        sys.exit(2)
    what, rest = sys.argv[1], sys.argv[2:]
    if what == "tcp-manual":
        tcp_manual(int(rest[0]), rest[1:])
    elif what == "tcp-ompi":
        tcp_ompi(rest)
    elif what == "unreachable":
        unreachable(rest[0])
    elif what == "cleanup":
        cleanup(rest)
    else:
        print(__doc__)
        sys.exit(2)


if __name__ == "__main__":
    main()
