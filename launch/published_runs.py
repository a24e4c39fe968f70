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
    """True when the source states ZeRO-1 / Megatron's distributed optimizer, None when it leaves
    optimizer sharding open (NeuronX Distributed offers ZeRO-1 and its 70B rows do not say),
    False otherwise."""
    # Optimizer state sharded over the replicas, weights and gradients whole on each: FSDP that
    # gathers once per step and keeps the weights (fsdp_reshard_after_forward = never) moves and
    # holds the same bytes.
    note = row["source_note"]
    if "ZeRO-1" in note or "distributed optimizer" in note:
        return True
    if row["id"].startswith("neuron_") and int(row["dp_rep"]) > 1:
        return None
    return False


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


def overrides(row, choice):
    """titan-train overrides for a row run with one choice of what its source left open."""
    microbatch, ac, schedule, sharded_optimizer = choice
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
            "--parallelism.data_parallel_replicate_degree", str(1 if sharded_optimizer else rep),
            "--parallelism.data_parallel_shard_degree", str(dp if sharded_optimizer else shard),
            "--parallelism.tensor_parallel_degree", str(tp),
            "--parallelism.pipeline_parallel_degree", str(pp),
            "--simulation.execution", row["execution"]]
    if row["mlp"] != "swiglu":
        over += ["--model.mlp_activation", row["mlp"]]
    if row["topology"]:
        over += ["--simulation.topology", row["topology"]]
    if row["attention"] != "flash":
        over += ["--simulation.flash_attention", "false"]
    if sharded_optimizer:
        over += ["--parallelism.fsdp_reshard_after_forward", "never"]
    if row["id"].startswith(("maxtext", "tpurecipes")):
        # MaxText under XLA: the weight-gradient dot returns bf16 and the SPMD partitioner
        # reduce-scatters it there, before its cast to the fp32 master (an assumption about
        # XLA's placement; docs/memory.md).
        over += ["--training.mixed_precision_reduce", "bfloat16"]
    if "weight_dtype=bfloat16" in row["source_note"]:
        over += ["--training.master_dtype", "bfloat16"]  # MaxText's bf16 weights (and moments)
    if "--tp-comm-overlap" in row["source_note"] and tp > 1:
        # Megatron's TP communication overlap: the sequence-parallel gathers and scatters run
        # chunk by chunk under the matmuls beside them (titan's simulated async TP).
        over += ["--parallelism.enable_async_tensor_parallel", "true"]
    if pp > 1:
        # Megatron and NxD split the transformer layers evenly and put the embedding and the
        # output beside the first and last stage's layers (they count as no layers).
        name, v = schedule
        over += ["--training.local_batch_size", str(local),
                 "--parallelism.pipeline_parallel_microbatch_size", str(microbatch),
                 "--parallelism.pipeline_parallel_schedule", name,
                 "--parallelism.pipeline_parallel_first_stage_less_layers", "0",
                 "--parallelism.pipeline_parallel_last_stage_less_layers", "0"]
        if v > 1:
            over += ["--parallelism.pipeline_parallel_layers_per_stage",
                     str(int(row["n_layers"]) // (pp * v))]
    else:
        over += ["--training.local_batch_size", str(microbatch)]
    return over + ac_overrides(ac)


def choices(row):
    """(micro-batch, recompute, (schedule, virtual stages per rank), ZeRO-1) to try.

    What a source publishes is used as it is. What it does not (Megatron's micro-batch,
    recompute and pipeline schedule) is chosen as a user tuning the run would: the fastest
    simulated step that fits, over recompute none / selective / full, micro-batches up to 8
    (1 under PP, which keeps the bubble and the in-flight activations smallest), and under PP
    1F1B or Megatron's interleaved 1F1B with the fewest virtual stages per rank (more than one)
    that divide its layers (where the micro-batches divide too), and with or without ZeRO-1
    where the framework offers it and the source does not say."""
    rep, shard, tp, pp = layout(row)
    local = int(row["global_batch"]) // (rep * shard)
    given = row["remat"] or row["ac"]
    acs = [given] if given else ["none", "selective", "full"]
    if row["microbatch"]:
        mbs = [int(row["microbatch"])]
    elif pp > 1:
        mbs = [1]
    else:
        mbs = [m for m in (8, 4, 2, 1) if local % m == 0]
    scheds = [("1F1B", 1)]
    per_rank = int(row["n_layers"]) // pp
    if pp > 1 and row["pp_schedule"] == "" and per_rank * pp == int(row["n_layers"]) and per_rank > 1:
        scheds.append(("Interleaved1F1B", next(v for v in range(2, per_rank + 1) if per_rank % v == 0)))
    z = zero1(row)
    zs = [False, True] if z is None else [z]
    return [(mb, ac, sc, zo) for zo in zs for ac in acs for mb in mbs for sc in scheds
            if pp == 1 or (sc[1] == 1 or (local // mb) % pp == 0)]


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


def simulate(exe, root, work, row, extra=(), only=None):
    """The row's run: the fastest of its choices that fits (`only`: just that choice). Without
    one that fits, the first choice's result (flagged by fits_in_memory) or its error."""
    best, first = None, None
    for i, choice in enumerate([only] if only else choices(row)):
        over = overrides(row, choice)
        r = run(exe, root, f"{work}/{row['id']}_{i}", over, extra)
        r["overrides"], r["choice"] = over, choice
        first = first or r
        if "error" not in r and r["fits_in_memory"] and (
                best is None or r["tokens_per_s_per_chip"] > best["tokens_per_s_per_chip"]):
            best = r
    return best or first
