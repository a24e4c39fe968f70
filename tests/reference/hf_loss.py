#!/usr/bin/python3
"""Loss of Hugging Face-named weights (a titan export) on a batch, computed by the PyTorch
reference (qwen3_reference.py). Used by tests/trainer/checkpoint_test.cpp:
  hf_loss.py MODEL.safetensors BATCH.safetensors OUT.txt
BATCH holds inputs/labels and a "config" metadata JSON (head_dim, norm_eps, ...); OUT gets
the mean cross entropy with 17 significant digits."""
import json
import re
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from qwen3_reference import forward, read_safetensors  # noqa: E402

LAYER = {"self_attn.q_proj": "attention.wq", "self_attn.k_proj": "attention.wk",
         "self_attn.v_proj": "attention.wv", "self_attn.o_proj": "attention.wo",
         "self_attn.q_norm": "attention.q_norm", "self_attn.k_norm": "attention.k_norm",
         "input_layernorm": "attention_norm", "post_attention_layernorm": "ffn_norm",
         "mlp.gate_proj": "feed_forward.w1", "mlp.up_proj": "feed_forward.w3",
         "mlp.down_proj": "feed_forward.w2"}
TOP = {"model.embed_tokens.weight": "tok_embeddings.weight", "model.norm.weight": "norm.weight",
       "lm_head.weight": "output.weight"}


def titan_name(hf):
    if hf in TOP:
        return TOP[hf]
    m = re.fullmatch(r"model\.layers\.(\d+)\.(.+)\.weight", hf)
    return f"layers.{m.group(1)}.{LAYER[m.group(2)]}.weight"


def main(model_path, batch_path, out_path):
    hf, _ = read_safetensors(model_path)
    params = {titan_name(k): v for k, v in hf.items()}
    batch, meta = read_safetensors(batch_path)
    cfg = json.loads(meta["config"])
    logits = forward(params, cfg, batch["inputs"])
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), batch["labels"].reshape(-1))
    with open(out_path, "w") as f:
        f.write(f"{loss.item():.17g}\n")


if __name__ == "__main__":
    main(*sys.argv[1:4])
