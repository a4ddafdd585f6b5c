# -*- coding: utf-8 -*-
# Copyright: laguna-spark developers
# Apache-2.0
"""The files of a DFlash draft (or target) checkpoint, read without torch.

``config.json``, ``model.safetensors.index.json`` and the safetensors
*headers* (8-byte little-endian length + JSON), and the model card's
``base_model`` front matter. What vLLM makes of them: dflash_vllm; the checks
on them: dflash_quant and dflash_config; the whole report: dflash_draft.
"""

from __future__ import annotations

import json
import os
import re
import struct

HEADER_LIMIT = 100 * 1024 * 1024
INDEX_NAME = "model.safetensors.index.json"


class DraftError(Exception):
    """The directory cannot be read as a checkpoint."""


# --------------------------------------------------------------------------
# safetensors headers
# --------------------------------------------------------------------------

def read_safetensors_header(path):
    """Return ``(tensors, metadata)`` from a safetensors file's header.

    tensors maps name -> {"dtype", "shape", "data_offsets"}. Raises DraftError
    on a truncated or malformed file.
    """
    size = os.path.getsize(path)
    with open(path, "rb") as handle:
        head = handle.read(8)
        if len(head) != 8:
            raise DraftError("%s: shorter than a safetensors header" % path)
        (length,) = struct.unpack("<Q", head)
        if length > HEADER_LIMIT or 8 + length > size:
            raise DraftError("%s: header length %d does not fit the file (%d bytes)" % (path, length, size))
        raw = handle.read(length)
    try:
        header = json.loads(raw.decode("utf-8"))
    except ValueError as exc:
        raise DraftError("%s: header is not JSON: %s" % (path, exc))
    if not isinstance(header, dict):
        raise DraftError("%s: header is not a JSON object" % path)
    metadata = header.pop("__metadata__", None) or {}
    end = 0
    for name, info in header.items():
        if not isinstance(info, dict) or "dtype" not in info or "shape" not in info:
            raise DraftError("%s: tensor %s has no dtype/shape" % (path, name))
        offsets = info.get("data_offsets") or [0, 0]
        end = max(end, int(offsets[1]))
    if 8 + length + end > size:
        raise DraftError("%s: truncated (%d bytes, header says %d)" % (path, size, 8 + length + end))
    return header, metadata


def write_safetensors(path, tensors, metadata=None):
    """Write a safetensors file of zero bytes: tensors maps name -> (dtype, shape).

    Used to generate test checkpoints without torch.
    """
    sizes = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E5M2": 1, "I16": 2, "U16": 2,
             "F16": 2, "BF16": 2, "I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8, "F64": 8}
    header = {}
    offset = 0
    for name in sorted(tensors):
        dtype, shape = tensors[name]
        count = 1
        for dim in shape:
            count *= int(dim)
        nbytes = count * sizes[dtype]
        header[name] = {"dtype": dtype, "shape": [int(d) for d in shape], "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    if metadata:
        header["__metadata__"] = dict(metadata)
    raw = json.dumps(header, separators=(",", ":")).encode("utf-8")
    raw += b" " * (-len(raw) % 8)
    with open(path, "wb") as handle:
        handle.write(struct.pack("<Q", len(raw)))
        handle.write(raw)
        handle.truncate(8 + len(raw) + offset)


def read_tensors(directory):
    """Map tensor name -> {"dtype", "shape", "file"} for a checkpoint directory."""
    index_path = os.path.join(directory, INDEX_NAME)
    if os.path.isfile(index_path):
        with open(index_path) as handle:
            weight_map = json.load(handle).get("weight_map") or {}
        files = sorted(set(weight_map.values()))
    else:
        weight_map = None
        files = sorted(f for f in os.listdir(directory) if f.endswith(".safetensors"))
    if not files:
        raise DraftError("%s: no *.safetensors files" % directory)
    tensors = {}
    for name in files:
        full = os.path.join(directory, name)
        if not os.path.isfile(full):
            raise DraftError("%s: the index names %s, which is missing" % (directory, name))
        header, _meta = read_safetensors_header(full)
        for tensor, info in header.items():
            tensors[tensor] = {"dtype": info["dtype"], "shape": list(info["shape"]), "file": name}
    if weight_map is not None:
        missing = sorted(set(weight_map) - set(tensors))
        if missing:
            raise DraftError("%s: the index lists tensors no shard holds: %s" % (directory, ", ".join(missing[:5])))
    return tensors


def read_json(path):
    with open(path) as handle:
        return json.load(handle)


def model_card_base_models(directory):
    """``base_model`` entries of README.md's YAML front matter (a list)."""
    path = os.path.join(directory, "README.md")
    if not os.path.isfile(path):
        return []
    with open(path, errors="replace") as handle:
        text = handle.read(65536)
    match = re.match(r"---\s*\n(.*?)\n---", text, re.S)
    if not match:
        return []
    found = []
    lines = match.group(1).splitlines()
    for number, line in enumerate(lines):
        head = re.match(r"base_model\s*:\s*(.*)$", line)
        if not head:
            continue
        value = head.group(1).strip()
        if value and not value.startswith("["):
            found.append(value.strip("'\""))
        elif value.startswith("["):
            found.extend(v.strip().strip("'\"") for v in value.strip("[]").split(",") if v.strip())
        else:
            for item in lines[number + 1:]:
                entry = re.match(r"\s*-\s*(.+)$", item)
                if not entry:
                    break
                found.append(entry.group(1).strip().strip("'\""))
    return found


def read_config(directory, what):
    """The config.json of a checkpoint directory; DraftError when it is missing or not JSON."""
    path = os.path.join(directory, "config.json")
    if not os.path.isfile(path):
        raise DraftError("%s has no config.json: is the %s staged there?" % (directory, what))
    try:
        return read_json(path)
    except ValueError as exc:
        raise DraftError("%s: config.json is not JSON: %s" % (directory, exc))
