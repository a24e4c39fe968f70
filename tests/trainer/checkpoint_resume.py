#!/usr/bin/python3
"""Multi-process checkpoint tests driven through titan-train (run by ctest, see
mpi_tests.cmake). Each scenario trains the debug model (seq_len 32, global batch 8, vocabulary
258 so that it divides over tp, LR warmup 3 steps then linear decay over the 20-step run, so a
run that stopped with another training.steps would follow another schedule) and compares
per-step losses read from metrics.jsonl (exact doubles). The interrupted first runs keep
training.steps 20 and stop after the step-10 save through TITAN_CHECKPOINT_FAULT=exit_after_step:10.
  exact 1|2       20 steps straight == 10 steps + a NEW process resuming for 10 (bit for bit);
                  np 1 also checks that stopping with training.steps 10 instead changes the losses
  exact 4         the same on FSDP 2 x TP 2, then that TP checkpoint resumed on 1 rank and on
                  FSDP 4 (within 1e-6 of the straight run)
  reshard         saved under FSDP 4, resumed on 1 rank, FSDP 2, HSDP 2x2, FSDP 2 x TP 2 and
                  DDP 2 x TP 2: within 1e-6
  kill            rank 0 SIGKILLs itself in the middle of the step-10 save: step 5 stays
                  loadable and the resumed run matches the straight run bit for bit
  missing_shard   a rank file of step 10 removed: resume skips it with a warning naming it;
                  asking for it by load_step fails with a clear message
  pipeline 4      PP 2 x FSDP 2: 20 steps straight == 10 + a new process resuming (bit for bit);
                  that checkpoint resumed on 1 rank and on FSDP 2 x TP 2, and an FSDP 4
                  checkpoint resumed on PP 2 x TP 2 and on PP 4 (within 1e-6)
  expert 4        the debug MoE under expert parallelism 4: 20 steps straight == 10 + a new
                  process resuming (bit for bit); every expert stored once (in ep boxes); that
                  checkpoint resumed on EP 2 x efsdp 2, EP 2 (2 ranks), FSDP 4 without EP and 1
                  rank, and a 1-rank checkpoint resumed on EP 4 (within 1e-6)
  expert_pipeline 4  the debug MoE on PP 2 x EP 2 (ep borrowed from each stage's dp_shard 2):
                  resume bit for bit, every expert stored once; that checkpoint resumed on
                  EP 4 and on 1 rank, and a 1-rank checkpoint resumed on PP 2 x EP 2 (within
                  1e-6; the other layouts run the pipeline's micro-batch of 1, since the
                  load-balancing loss is a statistic of each forward, docs/models.md)
  expert_tensor 4 the debug MoE on expert TP 2 x EP 2 (tp 2 x dp_shard 2; experts split over ep
                  and their hidden dim over tp): resume bit for bit, every tensor stored once;
                  that checkpoint resumed on 1 rank and on EP 4, and a 1-rank checkpoint
                  resumed on expert TP 2 x EP 2 (within 1e-6)
  pipeline_tied 4 tied embeddings on PP 2 x FSDP 2: resume bit for bit; that checkpoint (the
                  weight written once, by the first stage) resumed on 1 rank, and a 1-rank
                  checkpoint resumed on PP 2 x TP 2 (both copies loaded; within 5e-6, see
                  TIED_LAYOUT_TOL)
usage: checkpoint_resume.py SCENARIO [NP] --titan-train BIN --mpirun BIN --workdir DIR"""
import argparse
import os
import shutil
import sys

from checkpoint_runs import (LAYOUT_TOL, MOE, Runner, check_tp_files, ckpt, compare, ep_mesh, interrupted, mesh,
                             resumed_on, straight_and_resumed)


def exact(r, np):
    w = r.args.workdir
    tp = 2 if np == 4 else 1  # np 4: FSDP 2 x TP 2
    m = mesh(np, 1, tp)
    label = "FSDP 2 x TP 2" if tp > 1 else f"np{np}"
    straight, _ = r.run(np, f"straight{np}", m + ["--training.steps", "20"])
    folder = os.path.join(w, f"ckpt_exact{np}")
    shutil.rmtree(folder, ignore_errors=True)
    first = interrupted(r, np, f"first{np}", m, folder)
    second, out = r.run(np, f"second{np}", m + ["--training.steps", "20"] + ckpt(folder))
    if "resumed from" not in out:
        sys.exit(f"FAIL: the second process did not resume\n{out}")
    compare(f"{label} first process", first, straight, list(range(1, 11)), 0)
    compare(f"{label} new process resumed at step 10", second, straight, list(range(11, 21)), 0)
    if np == 1:  # the schedule matters: a first run with training.steps 10 decays faster
        short, _ = r.run(1, "short10", m + ["--training.steps", "10"])
        diff = [s for s in range(1, 11) if short[s] != straight[s]]
        if not diff or diff[0] <= 3:
            sys.exit(f"FAIL: training.steps 10 vs 20 should differ after the warmup only, differ at {diff}")
        print(f"ok: a 10-step schedule changes the losses from step {diff[0]} (rel "
              f"{abs(short[10] - straight[10]) / straight[10]:.2e} at step 10): exit_after_step is needed")
    if tp > 1:
        check_tp_files(os.path.join(folder, "step-10"))
        # the TP checkpoint under other meshes
        for n, mm, name in [(1, mesh(1), "single process"), (4, mesh(4), "FSDP 4")]:
            copy = os.path.join(w, f"ckpt_tp_to_{n}")
            shutil.rmtree(copy, ignore_errors=True)
            shutil.copytree(folder, copy)
            got, out = r.run(n, f"tp_to_{n}", mm + ["--training.steps", "20"] + ckpt(copy, "--checkpoint.load_step", "10"))
            if "resumed from" not in out or "step-10" not in out:
                sys.exit(f"FAIL: {name} did not resume from step 10\n{out}")
            compare(f"FSDP 2 x TP 2 -> {name}", got, straight, list(range(11, 21)), LAYOUT_TOL)



def reshard(r):
    w = r.args.workdir
    straight, _ = r.run(4, "straight4", mesh(4) + ["--training.steps", "20"])
    folder = os.path.join(w, "ckpt_fsdp4")
    shutil.rmtree(folder, ignore_errors=True)
    interrupted(r, 4, "save_fsdp4", mesh(4), folder)
    for np, m, name in [(1, mesh(1), "single process"), (2, mesh(2), "FSDP 2"), (4, mesh(4, 2), "HSDP 2x2"),
                        (4, mesh(4, 1, 2), "FSDP 2 x TP 2"), (4, mesh(4, 2, 2), "DDP 2 x TP 2")]:
        copy = os.path.join(w, f"ckpt_fsdp4_to_{name.replace(' ', '')}")
        shutil.rmtree(copy, ignore_errors=True)
        shutil.copytree(folder, copy)
        got, out = r.run(np, f"resume_{name.replace(' ', '')}", m + ["--training.steps", "20"] + ckpt(copy))
        if "resumed from" not in out:
            sys.exit(f"FAIL: {name} did not resume\n{out}")
        compare(f"FSDP 4 -> {name}", got, straight, list(range(11, 21)), LAYOUT_TOL)


def kill(r):
    w = r.args.workdir
    straight, _ = r.run(2, "straight2", mesh(2) + ["--training.steps", "20"])
    folder = os.path.join(w, "ckpt_kill")
    shutil.rmtree(folder, ignore_errors=True)
    r.run(2, "killed", mesh(2) + ["--training.steps", "20"] + ckpt(folder), expect_ok=False,
          env={"TITAN_CHECKPOINT_FAULT": "kill_during_save:10"})
    left = sorted(os.listdir(folder))
    if "step-5" not in left or "step-10" in left or ".tmp-step-10" not in left:
        sys.exit(f"FAIL: after the kill the folder holds {left}")
    print(f"ok: killed mid-save, folder holds {left}")
    got, out = r.run(2, "after_kill", mesh(2) + ["--training.steps", "20"] + ckpt(folder))
    if "resumed from" not in out or "step-5" not in out or "ignoring unfinished save" not in out:
        sys.exit(f"FAIL: expected a resume from step-5 with a warning\n{out}")
    compare("resume after SIGKILL mid-save", got, straight, list(range(6, 21)), 0)


def missing_shard(r):
    w = r.args.workdir
    straight, _ = r.run(2, "straight2m", mesh(2) + ["--training.steps", "20"])
    folder = os.path.join(w, "ckpt_missing")
    shutil.rmtree(folder, ignore_errors=True)
    interrupted(r, 2, "save2", mesh(2), folder)
    os.remove(os.path.join(folder, "step-10", "rank-00001.h5"))
    _, out = r.run(2, "explicit", mesh(2) + ["--training.steps", "20"] + ckpt(folder, "--checkpoint.load_step", "10"),
                   expect_ok=False)
    if "step-10" not in out or "missing" not in out or "Segmentation" in out:
        sys.exit(f"FAIL: load_step of a checkpoint with a missing shard: unclear error\n{out}")
    print("ok: load_step 10 with a missing shard fails: " +
          next((l for l in out.splitlines() if "step-10" in l and "missing" in l), "")[:200])
    got, out = r.run(2, "skip", mesh(2) + ["--training.steps", "20"] + ckpt(folder))
    if "skipping damaged checkpoint" not in out or "step-10" not in out:
        sys.exit(f"FAIL: no warning naming the damaged step-10\n{out}")
    compare("resume skipping the damaged step 10", got, straight, list(range(6, 21)), 0)


def pipeline(r):
    w = r.args.workdir
    pp2 = mesh(2) + ["--parallelism.pipeline_parallel_degree", "2"]  # x FSDP 2 on 4 ranks
    straight, folder = straight_and_resumed(r, 4, "pp", "PP 2 x FSDP 2", pp2)
    for n, m, name in [(1, mesh(1), "single process"), (4, mesh(4, 1, 2), "FSDP 2 x TP 2")]:
        copy = os.path.join(w, f"ckpt_pp_to_{n}")
        shutil.rmtree(copy, ignore_errors=True)
        shutil.copytree(folder, copy)
        got, out = r.run(n, f"pp_to_{n}", m + ["--training.steps", "20"] + ckpt(copy, "--checkpoint.load_step", "10"))
        if "resumed from" not in out:
            sys.exit(f"FAIL: {name} did not resume the PP checkpoint\n{out}")
        compare(f"PP 2 x FSDP 2 -> {name}", got, straight, list(range(11, 21)), LAYOUT_TOL)
    # Layouts agree within LAYOUT_TOL (loss parity), so the PP run is the reference here too.
    fsdp_folder = os.path.join(w, "ckpt_fsdp4_pp")
    shutil.rmtree(fsdp_folder, ignore_errors=True)
    interrupted(r, 4, "fsdp4_save", mesh(4), fsdp_folder)
    for m, name in [(mesh(2, 1, 2) + ["--parallelism.pipeline_parallel_degree", "2"], "PP 2 x TP 2"),
                    (mesh(1) + ["--parallelism.pipeline_parallel_degree", "4"], "PP 4")]:
        copy = os.path.join(w, f"ckpt_fsdp4_to_{name.replace(' ', '')}")
        shutil.rmtree(copy, ignore_errors=True)
        shutil.copytree(fsdp_folder, copy)
        got, out = r.run(4, f"to_{name.replace(' ', '')}", m + ["--training.steps", "20"] + ckpt(copy))
        if "resumed from" not in out:
            sys.exit(f"FAIL: {name} did not resume the FSDP 4 checkpoint\n{out}")
        compare(f"FSDP 4 -> {name}", got, straight, list(range(11, 21)), LAYOUT_TOL)


# The tied model's later steps lift layout roundoff more: straight 20-step runs with no
# checkpoint involved already differ by up to 1.9e-6 (PP 2 x TP 2 vs PP 2 x FSDP 2, steps
# 18-20; one process in micro-batches of 1 vs PP 2 x FSDP 2: 9.8e-7, measured). Copies that
# part ways differ by far more (with the gradient sum switched off: 1.4e-2 in ten steps).
TIED_LAYOUT_TOL = 5e-6


def pipeline_tied(r):
    """Tied embeddings under PP: the first stage saves the weight, the last stage's copy loads it."""
    w = r.args.workdir
    # Adam's eps 1e-6, as in the TP loss-parity tests: with 1e-8, TP's reassociated partial sums
    # on near-zero gradients grew to 1.2e-6 by step 19 in the PP 2 x TP 2 leg (measured).
    tied = ["--model.tie_embeddings", "true", "--optimizer.eps", "1e-6"]
    pp2 = mesh(2) + ["--parallelism.pipeline_parallel_degree", "2"] + tied  # x FSDP 2 on 4 ranks
    straight, folder = straight_and_resumed(r, 4, "tied", "tied PP 2 x FSDP 2", pp2)
    # One process in micro-batches of 1, as the pipeline runs them (the same GEMM shapes, so
    # only the layouts' reassociation separates the runs; loss_parity.py does the same).
    one = mesh(1) + tied + ["--training.local_batch_size", "1"]
    # The weight is written once (from the first stage): one process loads the whole model from it.
    copy = os.path.join(w, "ckpt_tied_to_1")
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(folder, copy)
    got, out = r.run(1, "tied_to_1", one + ["--training.steps", "20"] + ckpt(copy, "--checkpoint.load_step", "10"))
    if "resumed from" not in out:
        sys.exit(f"FAIL: one process did not resume the tied PP checkpoint\n{out}")
    compare("tied PP 2 x FSDP 2 -> single process", got, straight, list(range(11, 21)), TIED_LAYOUT_TOL)
    # And a one-process checkpoint loads into both copies, vocabulary-sharded under TP.
    single = os.path.join(w, "ckpt_tied_single")
    shutil.rmtree(single, ignore_errors=True)
    interrupted(r, 1, "tied_single_save", one, single)
    got, out = r.run(4, "tied_to_pp_tp", mesh(2, 1, 2) + ["--parallelism.pipeline_parallel_degree", "2"] + tied +
                     ["--training.steps", "20"] + ckpt(single))
    if "resumed from" not in out:
        sys.exit(f"FAIL: PP 2 x TP 2 did not resume the single-process tied checkpoint\n{out}")
    compare("single process -> tied PP 2 x TP 2", got, straight, list(range(11, 21)), TIED_LAYOUT_TOL)


def expert(r):
    w = r.args.workdir
    straight, _ = r.run(4, "moe_straight", ep_mesh(4, 1) + ["--training.steps", "20"])
    ep_straight, _ = r.run(4, "ep4_straight", ep_mesh(4, 4) + ["--training.steps", "20"])
    compare("EP 4 vs FSDP 4 straight", ep_straight, straight, list(range(1, 21)), LAYOUT_TOL)
    folder = os.path.join(w, "ckpt_ep4")
    shutil.rmtree(folder, ignore_errors=True)
    first = interrupted(r, 4, "ep4_first", ep_mesh(4, 4), folder)
    second, out = r.run(4, "ep4_second", ep_mesh(4, 4) + ["--training.steps", "20"] + ckpt(folder))
    if "resumed from" not in out:
        sys.exit(f"FAIL: EP 4 did not resume\n{out}")
    compare("EP 4 first process", first, ep_straight, list(range(1, 11)), 0)
    compare("EP 4 new process resumed at step 10", second, ep_straight, list(range(11, 21)), 0)
    check_tp_files(os.path.join(folder, "step-10"))
    for np, m, name in [(4, ep_mesh(4, 2), "EP 2 x efsdp 2"), (2, ep_mesh(2, 2), "EP 2"),
                        (4, ep_mesh(4, 1), "FSDP 4"), (1, ep_mesh(1, 1), "single process")]:
        resumed_on(r, folder, f"ep4_to_{name.replace(' ', '')}", np, m, f"EP 4 -> {name}", ep_straight)
    single = os.path.join(w, "ckpt_moe_single")
    shutil.rmtree(single, ignore_errors=True)
    interrupted(r, 1, "moe_single_first", ep_mesh(1, 1), single)
    got, out = r.run(4, "single_to_ep4", ep_mesh(4, 4) + ["--training.steps", "20"] + ckpt(single))
    if "resumed from" not in out:
        sys.exit(f"FAIL: EP 4 did not resume the single-process checkpoint\n{out}")
    compare("single process -> EP 4", got, ep_straight, list(range(11, 21)), LAYOUT_TOL)


def expert_pipeline(r):
    w = r.args.workdir
    pp_ep = ep_mesh(2, 2) + ["--parallelism.pipeline_parallel_degree", "2"]  # x dp_shard 2 = ep 2, 4 ranks
    straight, folder = straight_and_resumed(r, 4, "pp_ep", "PP 2 x EP 2", pp_ep)
    check_tp_files(os.path.join(folder, "step-10"))
    mb1 = ["--training.local_batch_size", "1"]  # the pipeline's forwards: one row each
    for np, m, name in [(4, ep_mesh(4, 4) + mb1, "EP 4"), (1, ep_mesh(1, 1) + mb1, "single process")]:
        resumed_on(r, folder, f"pp_ep_to_{name.replace(' ', '')}", np, m, f"PP 2 x EP 2 -> {name}", straight)
    single = os.path.join(w, "ckpt_pp_ep_single")
    shutil.rmtree(single, ignore_errors=True)
    interrupted(r, 1, "pp_ep_single_first", ep_mesh(1, 1) + mb1, single)
    got, out = r.run(4, "single_to_pp_ep", pp_ep + ["--training.steps", "20"] + ckpt(single))
    if "resumed from" not in out:
        sys.exit(f"FAIL: PP 2 x EP 2 did not resume the single-process checkpoint\n{out}")
    compare("single process -> PP 2 x EP 2", got, straight, list(range(11, 21)), LAYOUT_TOL)


def expert_tensor(r):
    w = r.args.workdir
    etp = MOE + mesh(4, 1, 2) + ["--parallelism.expert_parallel_degree", "2",
                                 "--parallelism.expert_tensor_parallel_degree", "2"]
    straight, folder = straight_and_resumed(r, 4, "etp", "expert TP 2 x EP 2", etp)
    check_tp_files(os.path.join(folder, "step-10"))
    for np, m, name in [(1, ep_mesh(1, 1), "single process"), (4, ep_mesh(4, 4), "EP 4")]:
        resumed_on(r, folder, f"etp_to_{name.replace(' ', '')}", np, m, f"expert TP 2 x EP 2 -> {name}", straight)
    single = os.path.join(w, "ckpt_etp_single")
    shutil.rmtree(single, ignore_errors=True)
    interrupted(r, 1, "etp_single_first", ep_mesh(1, 1), single)
    got, out = r.run(4, "single_to_etp", etp + ["--training.steps", "20"] + ckpt(single))
    if "resumed from" not in out:
        sys.exit(f"FAIL: expert TP 2 x EP 2 did not resume the single-process checkpoint\n{out}")
    compare("single process -> expert TP 2 x EP 2", got, straight, list(range(11, 21)), LAYOUT_TOL)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("scenario")
    ap.add_argument("np", nargs="?", type=int, default=1)
    ap.add_argument("--titan-train", required=True)
    ap.add_argument("--mpirun", default="mpirun")
    ap.add_argument("--workdir", required=True)
    args = ap.parse_args()
    args.workdir = os.path.join(args.workdir, f"{args.scenario}{args.np}")
    os.makedirs(args.workdir, exist_ok=True)
    r = Runner(args)
    {"exact": lambda: exact(r, args.np), "reshard": lambda: reshard(r), "kill": lambda: kill(r),
     "missing_shard": lambda: missing_shard(r), "pipeline": lambda: pipeline(r),
     "pipeline_tied": lambda: pipeline_tied(r), "expert": lambda: expert(r),
     "expert_pipeline": lambda: expert_pipeline(r), "expert_tensor": lambda: expert_tensor(r)}[args.scenario]()
    shutil.rmtree(args.workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
