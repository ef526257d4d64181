"""Fashion-MNIST's gzipped IDX files as NumPy arrays, for the TF 1.x examples beside this file
(the part of a TF 1.x tutorial its `input_data` module played)."""

import gzip
import os

import numpy as np


def read_idx(path):
    """The uint8 array in a gzipped IDX file ([n, 28, 28] images or [n] labels); ValueError naming the file."""
    with gzip.open(path, "rb") as f:
        data = f.read()
    magic = int.from_bytes(data[0:4], "big")
    if magic not in (0x801, 0x803):
        raise ValueError(f"{path}: not an IDX file of uint8 images or labels (magic {magic:#x})")
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(magic & 0xff)]
    arr = np.frombuffer(data, np.uint8, offset=4 + 4 * len(dims))
    if arr.size != int(np.prod(dims)):
        raise ValueError(f"{path}: truncated ({arr.size} of {int(np.prod(dims))} values)")
    return arr.reshape(dims)


def load(data_dir, part, limit=0):
    """Part "train" or "t10k": uint8 images [n, 28, 28] and labels [n], the first `limit` (0: all)."""
    images = read_idx(os.path.join(data_dir, f"{part}-images-idx3-ubyte.gz"))
    labels = read_idx(os.path.join(data_dir, f"{part}-labels-idx1-ubyte.gz"))
    if limit:
        images, labels = images[:limit], labels[:limit]
    return images, labels
