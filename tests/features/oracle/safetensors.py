"""safetensors files with numpy only.

The format: an 8-byte little-endian header length N, N bytes of JSON
({name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__":
{str: str}}), then the tensor bytes, offsets relative to the end of the
header. The reader checks everything it relies on, so a file our runtime
wrote wrongly fails here with a message rather than loading garbage.
"""
import json
import struct

import numpy as np

# safetensors dtype names -> numpy dtypes (little endian). BF16 has no numpy
# dtype: it is read as uint16 and widened to float32 by hand.
DTYPES = {
    "F64": np.dtype("<f8"), "F32": np.dtype("<f4"), "F16": np.dtype("<f2"),
    "I64": np.dtype("<i8"), "I32": np.dtype("<i4"), "I16": np.dtype("<i2"),
    "I8": np.dtype("i1"), "U8": np.dtype("u1"), "BOOL": np.dtype("?"),
    "BF16": np.dtype("<u2"),
}
NAMES = {v: k for k, v in DTYPES.items() if k != "BF16"}

# Headers beyond this are refused: a corrupt length must not make us read
# gigabytes of "JSON".
MAX_HEADER = 100 << 20


class SafetensorsError(Exception):
    pass


def _bf16_to_f32(u16):
    return (u16.astype(np.uint32) << 16).view(np.float32)


def read(path, with_metadata=False):
    """Returns {name: numpy array} (and the __metadata__ dict if asked)."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 8:
        raise SafetensorsError("%s: truncated: %d bytes, no header" % (path, len(data)))
    (n,) = struct.unpack_from("<Q", data, 0)
    if n > MAX_HEADER or 8 + n > len(data):
        raise SafetensorsError("%s: header length %d exceeds the file (%d bytes)"
                               % (path, n, len(data)))
    try:
        header = json.loads(data[8:8 + n].decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise SafetensorsError("%s: bad JSON header: %s" % (path, e))
    if not isinstance(header, dict):
        raise SafetensorsError("%s: header is not a JSON object" % path)
    meta = header.pop("__metadata__", {}) or {}
    body = memoryview(data)[8 + n:]
    out = {}
    for name, info in header.items():
        try:
            dtype = DTYPES[info["dtype"]]
            shape = tuple(int(d) for d in info["shape"])
            begin, end = (int(x) for x in info["data_offsets"])
        except (KeyError, TypeError, ValueError) as e:
            raise SafetensorsError("%s: tensor %s: bad entry %r (%s)" % (path, name, info, e))
        count = int(np.prod(shape, dtype=np.int64)) if shape else 1
        if any(d < 0 for d in shape) or not 0 <= begin <= end <= len(body):
            raise SafetensorsError("%s: tensor %s: offsets [%d, %d) outside the %d data bytes"
                                   % (path, name, begin, end, len(body)))
        if end - begin != count * dtype.itemsize:
            raise SafetensorsError("%s: tensor %s: %d bytes for shape %s of %s"
                                   % (path, name, end - begin, list(shape), info["dtype"]))
        arr = np.frombuffer(body[begin:end], dtype=dtype).reshape(shape)
        out[name] = _bf16_to_f32(arr) if info["dtype"] == "BF16" else arr.copy()
    return (out, meta) if with_metadata else out


def write(path, tensors, metadata=None):
    """Writes {name: array} (f64, f32, f16, integer or bool arrays) in name
    order, the header padded with spaces to a multiple of 8 bytes."""
    header, chunks, offset = {}, [], 0
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    for name in sorted(tensors):
        arr = np.ascontiguousarray(tensors[name])
        dt = arr.dtype.newbyteorder("<") if arr.dtype.itemsize > 1 else arr.dtype
        if dt not in NAMES:
            raise SafetensorsError("tensor %s: dtype %s has no safetensors name" % (name, arr.dtype))
        raw = arr.astype(dt, copy=False).tobytes()
        header[name] = {"dtype": NAMES[dt], "shape": list(arr.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for raw in chunks:
            f.write(raw)
