"""Writes PyTorch Distributed Checkpoint (DCP) directories as PyTorch 2.x
lays them out (reference/formats.md §4), for the tests: Debian's torch 1.13
has no working DCP writer. `.metadata` is a pickle (protocol 4) of
torch.distributed.checkpoint.metadata.Metadata with the field names and
module paths of PyTorch 2.x, made from stand-in dataclasses registered under
those module paths; each chunk is a complete torch.save blob of one tensor
inside __<rank>_0.distcp files; byte items are raw bytes. With megatron=True
the directory is a Megatron-core torch_dist checkpoint (metadata.json and an
opaque common.pt beside).

    write_dcp(dir, {"key": [(offsets, tensor_chunk), ...]}, byte_items={"k": b"..."},
              ranks=2, megatron=False)
"""
import dataclasses
import enum
import io
import json
import os
import pickle
import sys
import types

import torch

META_MOD = "torch.distributed.checkpoint.metadata"
FS_MOD = "torch.distributed.checkpoint.filesystem"


def _module(name):
    m = types.ModuleType(name)
    sys.modules[name] = m
    return m


_meta, _fs = _module(META_MOD), _module(FS_MOD)


def _register(mod, cls):
    cls.__module__ = mod.__name__
    cls.__qualname__ = cls.__name__
    setattr(mod, cls.__name__, cls)
    return cls


class _MEM_FORMAT_ENCODING(enum.Enum):
    TORCH_CONTIGUOUS_FORMAT = 0
    TORCH_CHANNELS_LAST = 1
    TORCH_PRESERVE_FORMAT = 2


_register(_meta, _MEM_FORMAT_ENCODING)


@dataclasses.dataclass
class ChunkStorageMetadata:
    offsets: torch.Size
    sizes: torch.Size


@dataclasses.dataclass
class TensorProperties:
    dtype: torch.dtype = None
    layout: torch.layout = torch.strided
    requires_grad: bool = False
    memory_format: torch.memory_format = torch.contiguous_format
    pin_memory: bool = False

    def __getstate__(self):  # PyTorch 2.x: a tuple, memory format as the enum
        return (self.dtype, self.layout, self.requires_grad,
                _MEM_FORMAT_ENCODING.TORCH_CONTIGUOUS_FORMAT, self.pin_memory)

    def __setstate__(self, state):
        self.dtype, self.layout, self.requires_grad, _, self.pin_memory = state


@dataclasses.dataclass
class TensorStorageMetadata:
    properties: TensorProperties
    size: torch.Size
    chunks: list


@dataclasses.dataclass
class BytesStorageMetadata:
    pass


@dataclasses.dataclass(frozen=True)
class MetadataIndex:
    fqn: str
    offset: object = None
    index: object = dataclasses.field(hash=False, compare=False, default=None)


@dataclasses.dataclass
class Metadata:
    state_dict_metadata: dict
    planner_data: object = None
    storage_data: object = None


@dataclasses.dataclass
class _StorageInfo:
    relative_path: str
    offset: int
    length: int


for _c in (ChunkStorageMetadata, TensorProperties, TensorStorageMetadata, BytesStorageMetadata,
           MetadataIndex, Metadata):
    _register(_meta, _c)
_register(_fs, _StorageInfo)


def write_dcp(d, tensors, byte_items=None, ranks=2, megatron=False):
    """tensors: key -> list of (offsets tuple, chunk tensor) covering the key."""
    os.makedirs(d, exist_ok=True)
    files = [io.BytesIO() for _ in range(ranks)]
    sdm, storage = {}, {}
    n = 0
    for key, chunks in tensors.items():
        full = [0] * chunks[0][1].dim()
        for off, t in chunks:
            full = [max(a, o + s) for a, o, s in zip(full, off, t.shape)]
        metas = []
        for off, t in chunks:
            rank = n % ranks
            n += 1
            buf = io.BytesIO()
            torch.save(t, buf)
            blob = buf.getvalue()
            f = files[rank]
            start = f.tell()
            f.write(blob)
            metas.append(ChunkStorageMetadata(torch.Size(off), torch.Size(t.shape)))
            storage[MetadataIndex(key, torch.Size(off), len(metas) - 1)] = \
                _StorageInfo(f"__{rank}_0.distcp", start, len(blob))
        sdm[key] = TensorStorageMetadata(TensorProperties(dtype=chunks[0][1].dtype), torch.Size(full), metas)
    for key, data in (byte_items or {}).items():
        f = files[0]
        start = f.tell()
        f.write(data)
        sdm[key] = BytesStorageMetadata()
        storage[MetadataIndex(key)] = _StorageInfo("__0_0.distcp", start, len(data))
    for r, f in enumerate(files):
        with open(os.path.join(d, f"__{r}_0.distcp"), "wb") as out:
            out.write(f.getvalue())
    with open(os.path.join(d, ".metadata"), "wb") as out:
        pickle.dump(Metadata(sdm, None, storage), out, protocol=4)
    if megatron:
        json.dump({"sharded_backend": "torch_dist", "sharded_backend_version": 1,
                   "common_backend": "torch", "common_backend_version": 1},
                  open(os.path.join(d, "metadata.json"), "w"))
        torch.save({"args": {"tensor_model_parallel_size": 2}, "iteration": 100},
                   os.path.join(d, "common.pt"))


def read_back(d):
    """The stand-ins unpickle too: key -> global tensor (for cross-checks)."""
    meta = pickle.load(open(os.path.join(d, ".metadata"), "rb"))
    out = {}
    for key, m in meta.state_dict_metadata.items():
        if not isinstance(m, TensorStorageMetadata):
            continue
        t = torch.empty(tuple(m.size), dtype=m.properties.dtype)
        for i, c in enumerate(m.chunks):
            info = meta.storage_data[MetadataIndex(key, c.offsets, i)]
            with open(os.path.join(d, info.relative_path), "rb") as f:
                f.seek(info.offset)
                chunk = torch.load(io.BytesIO(f.read(info.length)))
            t[tuple(slice(o, o + s) for o, s in zip(c.offsets, c.sizes))] = chunk
        out[key] = t
    return out
