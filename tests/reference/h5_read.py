#!/usr/bin/python3
"""Reads one tensor piece of a titan checkpoint rank file with h5py (Debian's python3-h5py),
verifies its block CRC32s with zlib, and writes it as raw little-endian float32 reshaped to
nothing (flat). Used by tests/trainer/checkpoint_test.cpp:
  h5_read.py RANK_FILE DATASET OUT.bin"""
import sys
import zlib

import h5py
import numpy as np

path, name, out = sys.argv[1:4]
with h5py.File(path, "r") as f:
    assert f.attrs["format"] == "titan-checkpoint", f.attrs["format"]
    d = f[name]
    a = d[()]
    block = int(d.attrs["crc32_block_elems"])
    crcs = [zlib.crc32(a[i:i + block].tobytes()) for i in range(0, a.size, block)]
    assert crcs == list(d.attrs["crc32"]), "crc mismatch"
    print(f"{name}: {a.size} elements of {d.attrs['dtype']}, global shape {list(d.attrs['global_shape'])}, "
          f"flat offset {int(d.attrs['flat_offset'])}, step {int(f.attrs['step'])}")
    a.astype(np.float32).tofile(out)
