#!/usr/bin/python3
"""Writes docs/study/goodput.md from the results.csv files of launch/goodput-study.

Usage: goodput_report.py DOCS_FOLDER OUT.md "EXTRA ARGS"
Every figure comes from the CSVs titan-study wrote (the run model's columns and the [goodput]
settings they were worked out with, study/results_io.h) or from the study files
(configs/studies/<name>.toml, read with tomllib: the searched layouts); this script only
formats them and adds totals for the whole run (M$, MWh, tCO2). Nothing it prints is typed in
here, so the prose cannot drift from the data.
"""
import csv
import os
import sys
import tomllib

MODELS = [("goodput_qwen3_8b", "Qwen3-8B"), ("goodput_llama3_70b", "Llama 3 70B")]
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def num(row, key):
    v = row.get(key, "")
    return float(v) if v not in ("", None) else None


def fmt(v, digits):
    return "-" if v is None else f"{v:,.{digits}f}"


def spares(row):
    v = row.get("goodput.spare_fraction", "")
    return f"{100 * float(v):g}%" if v else "0%"


def layout(row):
    parts = []
    for key, name in (("pp", "pp"), ("dp_replicate", "dp_replicate"), ("dp_shard", "dp_shard"), ("tp", "tp")):
        v = row.get(key, "")
        if v and v != "0" and v != "1":
            parts.append(f"{name} {v}")
    return " x ".join(parts) + f", rows {row.get('local_batch_size', '')}, AC {row.get('activation_checkpoint', '')}"


def setting(rows, key, unit=""):
    """A [goodput] setting as the CSVs give it: one value, or the range when points differ."""
    vals = sorted({float(r[key]) for r in rows if r.get(key)})
    if not vals:
        sys.exit(f"goodput_report.py: no {key} column in the results (rerun launch/goodput-study)")
    return f"{vals[0]:g}{unit}" if len(vals) == 1 else f"{vals[0]:g}{unit} to {vals[-1]:g}{unit}"


def tokens_text(t):
    for div, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M")):
        if t >= div:
            return f"{t / div:g}{suffix}"
    return f"{t:g}"


def and_list(items):
    items = list(items)
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def span(values):
    vals = sorted(set(values))
    return f"{vals[0]}" if len(vals) == 1 else f"{vals[0]}-{vals[-1]}"


def searched(stems):
    """The searched layouts of the study files, as the intro describes them."""
    tp, rows, ac, coll, ckpt = set(), set(), [], [], set()
    for stem in stems:
        with open(os.path.join(ROOT, "configs", "studies", stem + ".toml"), "rb") as f:
            study = tomllib.load(f)
        s = study.get("search", {})
        tp |= set(s.get("tp", []))
        rows |= set(s.get("local_batch", []))
        ac += [a for a in s.get("activation_checkpoint", []) if a not in ac]
        coll += [c for c in s.get("collective_modes", []) if c not in coll]
        ckpt.add(study.get("fixed", {}).get("checkpoint.async_mode", "default"))
    parts = []
    if tp:
        parts.append(f"tp {span(tp)}")
    if rows:
        parts.append(f"rows {span(rows)}")
    if ac:
        parts.append(" or ".join(ac) + " AC")
    if coll:
        parts.append(" or ".join(coll) + " collectives")
    parts.append(" or ".join(sorted(ckpt)) + " checkpoints")
    return ", ".join(parts)


def assumed_intro(rows):
    """Which devices' failure rates and power the chip files mark ASSUMED or ESTIMATE."""
    out = []
    for what, prefix in (("failure rates", "reliability."), ("power figures", "power.")):
        devs = []
        for r in rows:
            if prefix in r.get("assumed_figures", "") and r["device"] not in devs:
                devs.append(r["device"])
        if devs:
            out.append(f"the {what} of {and_list(devs)}")
    return out


def failure_rates(device):
    """The [reliability] MTBFs of a catalog chip file (devices/chips/), following its base files."""
    name = device
    while name:
        with open(os.path.join(ROOT, "devices", "chips", name + ".toml"), "rb") as f:
            chip = tomllib.load(f)
        rel = chip.get("reliability", {})
        if rel:
            return tuple((k, v["value"], v.get("unit", "")) for k, v in sorted(rel.items())
                         if k.endswith("_mtbf") and isinstance(v, dict))
        name = chip.get("base")
    return ()


def chip_title(device):
    """A chip file's description without its parenthesis ("Google TPU v7"), else the device name."""
    path = os.path.join(ROOT, "devices", "chips", device + ".toml")
    if not os.path.exists(path):
        return device
    with open(path, "rb") as f:
        desc = tomllib.load(f).get("description", "")
    return desc.split(" (")[0].strip() or device


def assumed_prices(docs, stems, devices):
    """Devices whose price the study's price file marks "assumed" (from the tables titan-study wrote)."""
    out = []
    for stem in stems:
        path = os.path.join(docs, stem + "_table.md")
        if not os.path.exists(path):
            continue
        for line in open(path):
            if line.startswith("- ") and ": " in line and "(assumed;" in line:
                dev = line[2:line.index(": ")]
                if dev in devices and dev not in out:
                    out.append(dev)
    return out


def main():
    docs, out, extra = sys.argv[1], sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else ""
    stems = [stem for stem, _ in MODELS if os.path.exists(os.path.join(docs, stem + ".csv"))]
    every = [r for stem in stems for r in csv.DictReader(open(os.path.join(docs, stem + ".csv")))]
    if not every:
        sys.exit(f"goodput_report.py: no results in {docs}")
    devices = []
    for r in every:
        if r["device"] not in devices:
            devices.append(r["device"])
    total = {float(r["goodput.total_tokens"]) for r in every if r.get("goodput.total_tokens")}
    if len(total) != 1:
        sys.exit(f"goodput_report.py: expected one goodput.total_tokens over the points, got {sorted(total)}")
    total = total.pop()
    ok = [r for r in every if r.get("verdict") == "ok"]
    batches = sorted({(int(r["global_batch_size"]), int(r["seq_len"])) for r in ok})
    if len(batches) == 1:
        (gb, seq), = batches
        batch = (f"Every point trains with the same global batch, {gb} sequences of {seq} tokens "
                 f"({gb * seq / 1e6:.0f}M tokens; DeepSeek-V3's final batch was about 63M, RECALLED from its report and not checked here), so {tokens_text(total)} tokens is "
                 f"{total / (gb * seq):,.0f} steps everywhere and the smaller clusters accumulate gradients.")
    else:
        batch = "Global batches differ between points: " + "; ".join(
            f"{gb} x {seq} tokens, {total / (gb * seq):,.0f} steps" for gb, seq in batches) + "."
    assumed = assumed_intro(every)
    prices = assumed_prices(docs, stems, devices)
    if prices:
        assumed.append(f"the price{'s' if len(prices) > 1 else ''} of {and_list(prices)}")
    assumed_text = ("With no public figures, ASSUMED or ESTIMATED (listed under each table): " + "; ".join(assumed) +
                    ". ") if assumed else ""
    lines = [
        f"# Goodput at scale: {tokens_text(total)} tokens on {and_list([chip_title(d) for d in devices])}",
        "",
        "Generated by `launch/goodput-study" + (" " + extra if extra else "") + "` (do not edit by hand): "
        f"`titan-study` searches each point's best layout ({searched(stems)}; "
        "`configs/studies/goodput_*.toml`), simulates its step and puts it "
        "through the run model (failures, restarts, checkpoints at the Young/Daly interval, lost work, "
        "stragglers; energy at the simulated busy share). The model, every default and every figure's "
        "source: [../goodput.md](../goodput.md). " + assumed_text + batch,
        "",
        "Columns: hot spares (share of the job's chips, paid and idle); MFU of the simulated step; goodput = "
        "simulated step time x steps / expected wall time; wall time in hours; expected failures over the "
        "run; checkpoint interval (compute seconds between saves: async saves of shards this small cost "
        "milliseconds, so Young/Daly saves at nearly every step; fixed costs of a real save, metadata and "
        "barriers, are not modelled); cost of every chip (and spare) for the whole wall time at the price file's $/chip-hour; "
        f"facility energy (chips, hosts, network, x PUE {setting(every, 'goodput.pue')}) and CO2 at "
        f"{setting(every, 'goodput.grid_gco2_per_kwh', ' g/kWh')}.",
        "",
    ]
    # Summary: goodput per chip count and spare share, over every model and device.
    summary = {}
    for stem, _ in MODELS:
        path = os.path.join(docs, stem + ".csv")
        if os.path.exists(path):
            for r in csv.DictReader(open(path)):
                if r.get("verdict") == "ok" and r.get("goodput"):
                    summary.setdefault((int(r["num_chips"]), spares(r)), []).append(100 * float(r["goodput"]))
    if summary:
        lines += ["## Goodput by chip count (every model and device)", "",
                  "| chips | spares | goodput % (lowest - highest) |", "|---:|---:|---|"]
        for (chips, sp), g in sorted(summary.items()):
            lines.append(f"| {chips:,} | {sp} | {min(g):.1f} - {max(g):.1f} |")
        rates = {failure_rates(d) for d in devices}
        spare = ("Hot spares cut a hardware failure's restart from `restart_s` "
                 f"({setting(every, 'goodput.restart_s', ' s')}) to `spare_restart_s` "
                 f"({setting(every, 'goodput.spare_restart_s', ' s')}).")
        if len(rates) == 1 and next(iter(rates)):
            why = ("Every chip family takes the same per-chip failure rates (" +
                   ", ".join(f"{k.replace('_mtbf', '')} MTBF {v:,g} {u}" for k, v, u in next(iter(rates))) +
                   "; those with no public source are listed above) and the same restart times, and saves cost "
                   "milliseconds, so goodput follows the chip count (the job's MTBF, N times shorter) and hardly "
                   "the chip or the model: a figure of the failure and restart assumptions, which `[reliability]` "
                   "in a chip file and `[goodput]` change. ")
        else:
            why = ("The chip families' failure rates differ (`[reliability]` in their chip files), so goodput "
                   "follows the chip and the chip count (the job's MTBF, N times shorter). ")
        lines += ["", why + spare, ""]
    for stem, title in MODELS:
        path = os.path.join(docs, stem + ".csv")
        if not os.path.exists(path):
            continue
        rows = list(csv.DictReader(open(path)))
        lines += [f"## {title}", "",
                  "| device | chips | spares | best layout | MFU % | goodput % | wall h | failures | ckpt s | "
                  "M$ | $/Mtok | MWh | kWh/Mtok | t CO2 |",
                  "|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for r in rows:
            if r.get("verdict") != "ok":
                lines.append(f"| {r['device']} | {r['num_chips']} | {spares(r)} | none fits: {r.get('reason', '')[:80]} |"
                             " - | - | - | - | - | - | - | - | - | - |")
                continue
            mtok = float(r["goodput.total_tokens"]) / 1e6  # the run's tokens in millions
            kwh = num(r, "kwh_per_million_tokens")
            usd = num(r, "run_usd")
            g = num(r, "gco2_per_million_tokens")
            ckpt = num(r, "checkpoint_interval_s")
            lines.append(
                f"| {r['device']} | {int(r['num_chips']):,} | {spares(r)} | {layout(r)} | {fmt(num(r, 'mfu'), 1)} | "
                f"{fmt(100 * num(r, 'goodput'), 1)} | {fmt(24 * num(r, 'run_wall_days'), 1)} | "
                f"{fmt(num(r, 'run_failures'), 1)} | {fmt(ckpt, 1)} | "
                f"{fmt(usd / 1e6 if usd else None, 2)} | {fmt(num(r, 'run_usd_per_million_tokens'), 3)} | "
                f"{fmt(kwh * mtok / 1e3 if kwh else None, 0)} | {fmt(kwh, 3)} | "
                f"{fmt(g * mtok / 1e6 if g else None, 0)} |")
        png = stem + "_goodput.png"
        if os.path.exists(os.path.join(docs, png)):
            lines += ["", f"![goodput against chip count, {title}](goodput/{png})"]
        assumed = sorted({f"{r['device']}: {r['assumed_figures']}" for r in rows if r.get("assumed_figures")})
        if assumed:
            lines += ["", "Figures with no public source (marked ASSUMED or ESTIMATE in the chip files): " +
                      "; ".join(assumed) + "."]
        lines.append("")
    with open(out, "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
