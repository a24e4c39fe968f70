"""The bad-input table of hardening_cli.py: (name, titan-train arguments, expected message
fragment). Files the cases need are written under `work`; every case must end with a non-zero
exit and its fragment, never a signal, an abort trace or a hang."""
import json
import os
import struct


def _write(path, data, mode="w"):
    with open(path, mode) as f:
        f.write(data)
    return path


def _safetensors(path, header, data=b""):
    h = json.dumps(header).encode() if isinstance(header, dict) else header
    return _write(path, struct.pack("<Q", len(h)) + h + data, "wb")


def _files(w):
    f = {}
    f["syntax"] = _write(os.path.join(w, "syntax.toml"), "[training]\nsteps = = 3\n")
    # Found by launch/fuzz: a DEL byte in a table header trips an assertion inside toml++
    # in builds without NDEBUG; Release must report a syntax error naming file and line.
    f["del"] = _write(os.path.join(w, "del.toml"), "[training\x7f]\nsteps = 3\n")
    f["typo"] = _write(os.path.join(w, "typo.toml"), "[training]\nstpes = 3\n")
    f["section"] = _write(os.path.join(w, "section.toml"), "[trainnig]\nsteps = 3\n")
    f["type"] = _write(os.path.join(w, "type.toml"), "[training]\nsteps = \"ten\"\n")
    f["dup"] = _write(os.path.join(w, "dup.toml"), "[training]\nsteps = 3\nsteps = 4\n")
    f["empty_data"] = _write(os.path.join(w, "empty.txt"), "")
    f["short_data"] = _write(os.path.join(w, "short.txt"), "abc")
    f["bad_json_tok"] = _write(os.path.join(w, "tokenizer_bad.json"), "{ not json")
    f["no_model_tok"] = _write(os.path.join(w, "tokenizer_nomodel.json"), json.dumps({"version": "1.0"}))
    f["garbage_st"] = _write(os.path.join(w, "garbage.safetensors"), b"\x01\x02\x03", "wb")
    f["huge_header_st"] = _safetensors(os.path.join(w, "huge.safetensors"), b"{}")
    with open(f["huge_header_st"], "r+b") as fh:
        fh.write(struct.pack("<Q", 1 << 60))
    f["sign_header_st"] = _safetensors(os.path.join(w, "sign.safetensors"), b"{}")
    with open(f["sign_header_st"], "r+b") as fh:
        fh.write(struct.pack("<Q", 1 << 63))  # negative as int64
    f["shape_st"] = _safetensors(os.path.join(w, "shape.safetensors"),
                                 {"x": {"dtype": "F32", "shape": [1 << 40, 1 << 40], "data_offsets": [0, 8]}},
                                 b"\0" * 8)
    f["fields_st"] = _safetensors(os.path.join(w, "fields.safetensors"), {"x": {"dtype": "F32"}})
    f["bad_header_st"] = _safetensors(os.path.join(w, "badheader.safetensors"), b"{ nope")
    f["oob_st"] = _safetensors(os.path.join(w, "oob.safetensors"),
                               {"tok_embeddings.weight": {"dtype": "F32", "shape": [4, 4], "data_offsets": [0, 64]}},
                               b"\0" * 8)
    f["wrong_names_st"] = _safetensors(os.path.join(w, "names.safetensors"),
                                       {"x": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}, b"\0" * 8)
    # Checkpoint folders: a step without its rank file; a COMPLETE marker that is not JSON.
    for name, marker in (("ckpt_missing", json.dumps({"rank_files": ["rank-00000.h5"], "rank_file_bytes": [10]})),
                         ("ckpt_badmarker", "{ torn")):
        step = os.path.join(w, name, "checkpoint", "step-1")
        os.makedirs(step, exist_ok=True)
        _write(os.path.join(step, "COMPLETE"), marker)
    step = os.path.join(w, "ckpt_truncated", "checkpoint", "step-1")
    os.makedirs(step, exist_ok=True)
    _write(os.path.join(step, "rank-00000.h5"), b"\x89HDF\r\n\x1a\n" + b"\0" * 20, "wb")
    _write(os.path.join(step, "COMPLETE"), json.dumps({"rank_files": ["rank-00000.h5"], "rank_file_bytes": [28]}))
    f["chip"] = _write(os.path.join(w, "chip.toml"), "name = \"x\"\n[compute]\npeak_bf16_flops = \"fast\"\n")
    os.makedirs(os.path.join(w, "a_dir.toml"), exist_ok=True)
    f["fifo"] = os.path.join(w, "data.fifo")  # no writer: opening it for reading blocks
    if not os.path.exists(f["fifo"]):
        os.mkfifo(f["fifo"])
    f["readonly"] = os.path.join(w, "readonly")
    os.makedirs(f["readonly"], exist_ok=True)
    _write(os.path.join(f["readonly"], "checkpoint"), "a file where the checkpoint folder should be")
    return f


def bad_inputs(w, config, tiny):
    f = _files(w)
    c = ["--config", config] + tiny + ["--job.dump_folder", os.path.join(w, "dump")]
    sim = ["--config", config, "--simulation.enable", "true", "--simulation.device", "h100",
           "--simulation.num_chips", "8"]
    ck = lambda name: ["--job.dump_folder", os.path.join(w, name), "--checkpoint.enable", "true"]
    return [
        # config files and the command line
        ("no --config", tiny, "--config"),
        ("--config a directory", ["--config", os.path.join(w, "a_dir.toml")], "a_dir.toml"),
        ("--config missing", ["--config", os.path.join(w, "nope.toml")], "nope.toml"),
        ("toml syntax", ["--config", f["syntax"]], "syntax.toml"),
        ("toml DEL in a table name", ["--config", f["del"]], "del.toml:1"),
        ("key typo", ["--config", f["typo"]], "steps"),
        ("section typo", ["--config", f["section"]], "trainnig"),
        ("value type", ["--config", f["type"]], "training.steps"),
        ("duplicate key", ["--config", f["dup"]], "dup.toml"),
        ("override without value", c + ["--training.steps"], "training.steps"),
        ("override unknown key", c + ["--training.stepz", "3"], "training.steps"),
        ("override not a number", c + ["--training.steps", "abc"], "training.steps"),
        ("positional argument", c + ["training.steps"], "training.steps"),
        ("negative steps", c + ["--training.steps", "-3"], "training.steps"),
        ("negative lr", c + ["--optimizer.lr", "-1"], "optimizer.lr"),
        ("seq_len 0", c + ["--training.seq_len", "0"], "training.seq_len"),
        ("bad optimizer", c + ["--optimizer.name", "SGD9"], "optimizer.name"),
        ("bad model name", c + ["--model.name", "gpt9"], "model.name"),
        ("bad flavor", c + ["--model.flavor", "huge"], "huge"),
        ("bad decay type", c + ["--lr_scheduler.decay_type", "zigzag"], "decay_type"),
        ("bad dtype", c + ["--training.mixed_precision_param", "float7"], "mixed_precision_param"),
        ("bad backend", c + ["--comm.backend", "carrier_pigeon"], "comm.backend"),
        # parallelism and sizes
        ("tp 3 on 1 rank", c + ["--parallelism.tensor_parallel_degree", "3"], "tensor_parallel"),
        ("dp shard 2 on 1 rank", c + ["--parallelism.data_parallel_shard_degree", "2"], "world"),
        ("pipeline layers per stage 0", c + ["--parallelism.pipeline_parallel_layers_per_stage", "0"],
         "pipeline_parallel_layers_per_stage"),
        ("pipeline schedule csv without pipeline", c + ["--parallelism.pipeline_parallel_schedule_csv",
                                                        os.path.join(w, "none.csv")], "pipeline_parallel_degree is 1"),
        ("context parallel", c + ["--parallelism.context_parallel_degree", "2"], "context"),
        ("huge batch", c + ["--training.local_batch_size", "1000000000"], "training.local_batch_size"),
        ("huge seq_len", c + ["--training.seq_len", "100000000"], "training.seq_len"),
        ("global batch not a multiple", c + ["--training.global_batch_size", "3"], "global_batch_size"),
        ("global batch 0", c + ["--training.global_batch_size", "0"], "training.global_batch_size"),
        ("lr 1e30 (non-finite)", c + ["--optimizer.lr", "1e30", "--training.steps", "20"], "not finite"),
        # checkpoints
        ("checkpoint folder is a file", c + ["--job.dump_folder", f["readonly"], "--checkpoint.enable", "true"],
         "checkpoint"),
        ("dump folder cannot be created", c + ["--job.dump_folder", "/proc/titan-none/dump"], "job.dump_folder"),
        ("traces folder cannot be created", c + ["--profiling.enable_profiling", "true",
                                                 "--profiling.save_traces_folder", "/proc/titan-none/traces"],
         "profiling.save_traces_folder"),
        ("checkpoint interval 0", c + ck("ck0") + ["--checkpoint.interval", "0"], "checkpoint.interval"),
        ("exclude unknown part", c + ck("ck1") + ["--checkpoint.exclude_from_loading", "[\"brain\"]"], "brain"),
        ("load_step without checkpoint.enable", c + ["--checkpoint.load_step", "2"], "checkpoint.enable"),
        ("load_step missing", c + ck("ck2") + ["--checkpoint.load_step", "7"], "step-7"),
        ("load_step without rank file", c + ck("ckpt_missing") + ["--checkpoint.load_step", "1"], "rank-00000.h5"),
        ("load_step torn marker", c + ck("ckpt_badmarker") + ["--checkpoint.load_step", "1"], "COMPLETE"),
        ("load_step truncated h5", c + ck("ckpt_truncated") + ["--checkpoint.load_step", "1"], "step-1"),
        ("initial_load_path missing", c + ["--checkpoint.initial_load_path", os.path.join(w, "none")], "none"),
        ("initial_load_path a FIFO (hung)", c + ["--checkpoint.initial_load_path", f["fifo"]], "not a regular file"),
        ("safetensors garbage", c + ["--checkpoint.initial_load_path", f["garbage_st"]], "garbage.safetensors"),
        ("safetensors huge header", c + ["--checkpoint.initial_load_path", f["huge_header_st"]], "huge.safetensors"),
        ("safetensors header length sign bit", c + ["--checkpoint.initial_load_path", f["sign_header_st"]],
         "sign.safetensors"),
        ("safetensors huge shape", c + ["--checkpoint.initial_load_path", f["shape_st"]], "too large"),
        ("safetensors entry without fields", c + ["--checkpoint.initial_load_path", f["fields_st"]],
         "needs dtype, shape and data_offsets"),
        ("safetensors bad header", c + ["--checkpoint.initial_load_path", f["bad_header_st"]], "badheader.safetensors"),
        ("safetensors out of bounds", c + ["--checkpoint.initial_load_path", f["oob_st"]], "oob.safetensors"),
        ("safetensors other names", c + ["--checkpoint.initial_load_path", f["wrong_names_st"]], "names.safetensors"),
        # data and tokenizer
        ("dataset missing", c + ["--training.dataset", "text", "--training.dataset_path", os.path.join(w, "no.txt")],
         "no.txt"),
        ("dataset empty", c + ["--training.dataset", "text", "--training.dataset_path", f["empty_data"]], "empty.txt"),
        ("dataset a directory", c + ["--training.dataset", "text", "--training.dataset_path", w], "directory"),
        ("dataset a FIFO (hung, 730 s: SIGTERM only noted)", c + ["--training.dataset", "text", "--training.dataset_path",
                                                                f["fifo"]], "a FIFO (named pipe), not a regular file"),
        ("dataset a device (read /dev/zero without end)", c + ["--training.dataset", "text", "--training.dataset_path",
                                                              "/dev/zero"], "a character device, not a regular file"),
        ("tokenizer a FIFO", c + ["--model.tokenizer_path", f["fifo"]], "a FIFO (named pipe)"),
        ("dataset too short", c + ["--training.dataset", "text", "--training.dataset_path", f["short_data"]], "dataset"),
        ("tokenizer missing", c + ["--model.tokenizer_path", os.path.join(w, "tok.json")], "tok.json"),
        ("tokenizer not json", c + ["--model.tokenizer_path", f["bad_json_tok"]], "tokenizer_bad.json"),
        ("tokenizer without model", c + ["--model.tokenizer_path", f["no_model_tok"]], "tokenizer_nomodel.json"),
        # simulation
        ("sim num_chips huge", sim[:-1] + ["1000000000"], "simulation.num_chips"),
        ("sim num_chips 0", sim[:-1] + ["0"], "simulation.num_chips"),
        ("sim unknown device", sim + ["--simulation.device", "abacus"], "abacus"),
        ("sim chip file missing", sim + ["--simulation.chip_file", os.path.join(w, "nochip.toml")], "nochip.toml"),
        ("sim chip file bad", sim + ["--simulation.chip_file", f["chip"]], "chip.toml"),
        ("sim bad topology", sim + ["--simulation.topology", "moebius"], "moebius"),
        ("sim bad execution", sim + ["--simulation.execution", "telepathy"], "simulation.execution"),
        ("sim dump folder cannot be created", sim + ["--job.dump_folder", "/proc/titan-none/sim"], "job.dump_folder"),
        ("sim traces folder cannot be created", sim + ["--profiling.enable_profiling", "true",
                                                       "--profiling.save_traces_folder", "/proc/titan-none/tr"],
         "profiling.save_traces_folder"),
        ("sim tp beyond chips", sim + ["--parallelism.tensor_parallel_degree", "16"], "tensor_parallel"),
    ]
