"""Published training runs (docs/calibration/points.csv) as titan-train workloads.

Shared by launch/validation_points.py (the table in docs/validation.md) and
launch/calibrate_chips.py (the per-chip fit). Each row becomes the overrides of
configs/qwen3_8b.toml that describe the run its source publishes: the model's dimensions and
MLP, the chip, chip count and slices, the layout, batch, micro-batch and recompute policy. The
published figure becomes tokens/s per chip under the FLOP convention its source used.
What a row does not publish is filled by one rule for every row (below), never per row.
"""
import csv
import json
import os
import subprocess

VENDOR = {"tpu": "Google", "trn": "AWS", "a100": "NVIDIA", "h100": "NVIDIA", "h200": "NVIDIA",
          "b200": "NVIDIA"}


def load(root):
    with open(os.path.join(root, "docs", "calibration", "points.csv"), newline="") as f:
        return list(csv.DictReader(f))


def vendor(row):
    return next(v for k, v in VENDOR.items() if row["device"].startswith(k))


def not_simulated(row):
    """Why a row is left out of the statistics, or None."""
    if row["precision"] == "fp8":
        return "fp8 matmuls and fp8 all-gathers are not modelled (titan simulates bf16 steps)"
    return None


def cores_per_chip(row):
    # Neuron publishes TP / PP / DP degrees in NeuronCores (2 per Trainium1 chip).
    return 2 if row["device"] == "trn1" else 1


def layout(row):
    """(dp_replicate, dp_shard, tp, pp) in chips."""
    rep, shard = int(row["dp_rep"]), int(row["dp_shard"])
    tp, pp = int(row["tp"]), int(row["pp"])
    # A NeuronCore-level TP group of 2k cores is k chips, each running its two cores' shards.
    tp //= cores_per_chip(row)
    assert rep * shard * tp * pp * int(row["cp"]) == int(row["chips"]), row["id"]
    return rep, shard, tp, pp


def zero1(row):
    # Optimizer state sharded over the replicas, weights and gradients whole on each (ZeRO-1,
    # Megatron's distributed optimizer): FSDP that gathers once per step and keeps the weights
    # (fsdp_reshard_after_forward = never) moves and holds the same bytes.
    note = row["source_note"]
    return "ZeRO-1" in note or "distributed optimizer" in note


def flops_per_token(row, convention):
    """FLOPs per token under a source's convention (docs/calibration/sources.md)."""
    d, L, H, KV, hd = (int(row[k]) for k in ("dim", "n_layers", "n_heads", "n_kv_heads", "head_dim"))
    f, V, s = int(row["ffn_dim"]), int(row["vocab"]), int(row["seq"])
    tied = row["tied"] == "true"
    mlp = (3 if row["mlp"] == "swiglu" else 2) * d * f
    attn = d * H * hd * 2 + d * KV * hd * 2
    blocks = L * (attn + mlp + 2 * d) + d
    if convention == "maxtext2023":  # 6 N, N with the (tied) embedding, no attention term
        return 6 * (blocks + V * d * (1 if tied else 2))
    if convention == "megatron2021":  # Narayanan et al. 2021 eq. 3 (includes the recompute)
        return 96 * L * d * d * (1 + s / (6 * d) + V / (16 * L * d))
    if convention == "megatron2024":  # model FLOPs: 6 N without the input embedding + attention
        return 6 * (blocks + V * d) + 12 * L * H * hd * s
    raise ValueError(convention)


def convention(row):
    if row["metric"] != "tflops_per_chip":
        return None
    return {"maxtext": "maxtext2023", "megatron2021": "megatron2021",
            "megatron2024": "megatron2024"}[row["id"].split("_")[0]]


def published_tokens_per_s(row):
    v = float(row["value"])
    c = convention(row)
    return v if c is None else v * 1e12 / flops_per_token(row, c)


def ac_overrides(spec):
    """titan's activation-checkpoint keys for a row's recompute ('ac' or 'remat' column)."""
    if spec in ("none", "core_attention"):
        # Core-attention recompute (NxD / Megatron selective) is what a flash kernel's
        # backward does anyway: nothing else is recomputed.
        return ["--activation_checkpoint.mode", "none"]
    if spec == "full":
        return ["--activation_checkpoint.mode", "full"]
    if spec in ("op", "selective"):
        return ["--activation_checkpoint.mode", "selective",
                "--activation_checkpoint.selective_ac_option", "op"]
    if spec.startswith("custom:"):
        out = ["--activation_checkpoint.mode", "policy", "--activation_checkpoint.policy", "custom"]
        for part in spec[len("custom:"):].split(";"):
            where, names = part.split("=")
            key = {"device": "save_on_device", "offload": "offload_to_host"}[where]
            out += [f"--activation_checkpoint.{key}", names]
        return out
    raise ValueError(f"unknown recompute '{spec}'")


def overrides(row, microbatch, ac):
    rep, shard, tp, pp = layout(row)
    dp = rep * shard
    gbs = int(row["global_batch"])
    local = gbs // dp
    over = ["--model.name", "llama3", "--model.qk_norm", "false",
            "--model.dim", row["dim"], "--model.n_layers", row["n_layers"],
            "--model.n_heads", row["n_heads"], "--model.n_kv_heads", row["n_kv_heads"],
            "--model.head_dim", row["head_dim"], "--model.ffn_dim", row["ffn_dim"],
            "--model.vocab_size", row["vocab"], "--model.tie_embeddings", row["tied"],
            "--simulation.device", row["device"], "--simulation.num_chips", row["chips"],
            "--training.seq_len", row["seq"], "--training.global_batch_size", str(gbs),
            "--parallelism.data_parallel_replicate_degree", str(rep if not zero1(row) else 1),
            "--parallelism.data_parallel_shard_degree", str(shard if not zero1(row) else dp),
            "--parallelism.tensor_parallel_degree", str(tp),
            "--parallelism.pipeline_parallel_degree", str(pp),
            "--simulation.execution", row["execution"]]
    if row["mlp"] != "swiglu":
        over += ["--model.mlp_activation", row["mlp"]]
    if row["topology"]:
        over += ["--simulation.topology", row["topology"]]
    if zero1(row):
        over += ["--parallelism.fsdp_reshard_after_forward", "never"]
    if pp > 1:
        # 1F1B: Megatron's schedule without virtual stages, and NxD's.
        over += ["--training.local_batch_size", str(local),
                 "--parallelism.pipeline_parallel_microbatch_size", str(microbatch),
                 "--parallelism.pipeline_parallel_schedule", "1F1B"]
    else:
        over += ["--training.local_batch_size", str(microbatch)]
    return over + ac_overrides(ac)


def choices(row):
    """(micro-batch, recompute) to try, in order; the first that fits is the run.

    Published: used as they are. Not published (Megatron's micro-batch and recompute): the
    least recompute, then the largest micro-batch up to 8 that fits, as a user tuning the run
    would; under PP micro-batches of 1, which keep the bubble and the in-flight activations
    smallest."""
    rep, shard, tp, pp = layout(row)
    local = int(row["global_batch"]) // (rep * shard)
    acs = [row["remat"] or row["ac"]] if (row["remat"] or row["ac"]) else ["none", "selective", "full"]
    if row["microbatch"]:
        mbs = [int(row["microbatch"])]
    elif pp > 1:
        mbs = [1]
    else:
        mbs = [m for m in (8, 4, 2, 1) if local % m == 0]
    return [(mb, ac) for ac in acs for mb in mbs]


def run(exe, root, folder, over, extra=()):
    """One simulated step; the simulation.json as a dict, or {'error': message}."""
    cmd = [exe, "--config", f"{root}/configs/qwen3_8b.toml", "--simulation.enable", "true",
           "--job.dump_folder", folder, "--simulation.allow_oom", "true", *over, *extra]
    p = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        lines = [l for l in p.stderr.strip().splitlines() if l.strip()]
        return {"error": lines[-1] if lines else f"exit {p.returncode}"}
    with open(f"{folder}/simulation.json") as f:
        return json.load(f)


def simulate(exe, root, work, row, extra=()):
    """The row's run: the first of its choices that fits (or the last one tried, flagged)."""
    last = None
    for i, (mb, ac) in enumerate(choices(row)):
        over = overrides(row, mb, ac)
        r = run(exe, root, f"{work}/{row['id']}_{i}", over, extra)
        r["overrides"] = over
        last = r
        if "error" not in r and r["fits_in_memory"]:
            return r
    return last
