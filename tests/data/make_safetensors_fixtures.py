"""Writes the safetensors fixtures that tests/test_io_safetensors.cpp reads, with the Python
`safetensors` package (pip install safetensors numpy), so that sprig's reader is checked against
files it did not write. Run once from the repository root; the outputs are committed:

    python3 tests/data/make_safetensors_fixtures.py

tiny_mlp.safetensors      layers.0.{weight [2, 3], bias [2]}, layers.2.{weight [1, 2], bias [1]}
                          (a PyTorch nn.Sequential(Linear(3, 2), ReLU(), Linear(2, 1)) held as
                          `layers`), weight[i][j] = i + j / 4, metadata {"format": "pt"}.
tiny_bitmask.safetensors  layers.0.weight (4 x 10, five non-zeros) in compressed-tensors'
                          sparse-bitmask form, packed as its pack_bitmasks does
                          (numpy.packbits(axis=-1, bitorder="little")), and layers.0.bias [4].
tiny_bf16.safetensors     tiny_mlp's layout written by safetensors.torch with BF16 tensors
                          (PyTorch's float -> bfloat16 rounding, to nearest even) except
                          layers.2.weight, F32: a file that mixes the two (needs torch).
Nothing in the library, its tests or its build runs this script.
"""
import os

import numpy as np
from safetensors.numpy import save_file

HERE = os.path.dirname(os.path.abspath(__file__))


def tiny_mlp() -> None:
    w0 = np.array([[i + j / 4 for j in range(3)] for i in range(2)], dtype=np.float32)
    tensors = {
        "layers.0.weight": w0,
        "layers.0.bias": np.array([-1, 1], dtype=np.float32),
        "layers.2.weight": np.array([[0.5, -0.25]], dtype=np.float32),
        "layers.2.bias": np.array([3], dtype=np.float32),
    }
    save_file(tensors, os.path.join(HERE, "tiny_mlp.safetensors"), metadata={"format": "pt"})


def tiny_bitmask() -> None:
    w = np.zeros((4, 10), dtype=np.float32)
    w[0, 1], w[0, 9], w[2, 0], w[2, 8], w[3, 5] = 1.5, -2.0, 3.0, 0.25, -7.0
    mask = w != 0
    counts = mask.sum(axis=-1)
    tensors = {
        "layers.0.weight.shape": np.array(w.shape, dtype=np.int64),
        "layers.0.weight.compressed": w[mask],
        "layers.0.weight.bitmask": np.packbits(mask, axis=-1, bitorder="little"),
        "layers.0.weight.row_offsets": (np.cumsum(counts) - counts).astype(np.int64),
        "layers.0.bias": np.array([0.5, 0, 0, -0.5], dtype=np.float32),
    }
    save_file(tensors, os.path.join(HERE, "tiny_bitmask.safetensors"), metadata={"format": "pt"})


def tiny_bf16() -> None:
    import torch
    from safetensors.torch import save_file as save_torch

    def bf16(values):
        return torch.tensor(values, dtype=torch.float32).to(torch.bfloat16)

    tensors = {
        "layers.0.weight": bf16([[1 + 2**-8, 1 + 3 * 2**-8, -0.1], [3.0, 1e30, -2.5]]),
        "layers.0.bias": bf16([0.1, -1 / 3]),
        "layers.2.weight": torch.tensor([[0.5, -0.25]], dtype=torch.float32),
        "layers.2.bias": bf16([3.0]),
    }
    # The bits tests/test_io_safetensors.cpp expects, worked out by hand.
    want = {"layers.0.weight": [0x3F80, 0x3F82, 0xBDCD, 0x4040, 0x714A, 0xC020],
            "layers.0.bias": [0x3DCD, 0xBEAB], "layers.2.bias": [0x4040]}
    for name, bits in want.items():
        got = [b & 0xFFFF for b in tensors[name].view(torch.int16).flatten().tolist()]
        assert got == bits, (name, [hex(b) for b in got])
    save_torch(tensors, os.path.join(HERE, "tiny_bf16.safetensors"), metadata={"format": "pt"})


if __name__ == "__main__":
    tiny_mlp()
    tiny_bitmask()
    tiny_bf16()
