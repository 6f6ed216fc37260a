#!/usr/bin/env python3
"""Write the hostile files of issue 10 (A-D) into tests/fuzz/regressions/.

Each is a file that once got past a check: A through the safetensors reader, B-D through
`tinytrain verify`. B-D are seeds/tiny_reference.safetensors with one metadata value changed
(the header is rewritten, the data section kept), so everything else in them is valid.
The files are committed; this script says how they were made. Run from the repository root:
    python3 tests/fuzz/make_regressions.py
"""
import json
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
TINY = os.path.join(HERE, "seeds", "tiny_reference.safetensors")
OUT = os.path.join(HERE, "regressions")


def split(data):
    """(header dict, data section bytes) of a safetensors file."""
    (n,) = struct.unpack("<Q", data[:8])
    return json.loads(data[8:8 + n]), data[8 + n:]


def join(header, body):
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)
    return struct.pack("<Q", len(head)) + head + body


def with_metadata(key, edit):
    """The tiny reference with metadata[key] replaced by edit(old value)."""
    with open(TINY, "rb") as f:
        header, body = split(f.read())
    header["__metadata__"][key] = edit(header["__metadata__"][key])
    return join(header, body)


def config_field(field, spelling):
    """An edit of the config's JSON text that writes `field` exactly as `spelling`."""
    def edit(text):
        config = json.loads(text)
        old = f'"{field}": {json.dumps(config[field])}'
        assert text.count(old) == 1, (old, text)
        return text.replace(old, f'"{field}": {spelling}')
    return edit


FILES = {
    # A: a header number beyond double's range; nlohmann throws out_of_range, not parse_error
    "a_header_number_1E400.safetensors": struct.pack("<Q", 11) + b'{"a":1E400}',
    # B: steps claims 16777216 x batch x seq tokens; x and y hold 2 x 1 x 4
    "b_steps_16777216.safetensors": with_metadata("steps", lambda _: "16777216"),
    # C: d_model 8192 in a file whose tensors are d_model 4 (n_head 1 still divides it)
    "c_d_model_8192.safetensors": with_metadata("config", config_field("d_model", "8192")),
    # D: integers that are not ints: beyond double-to-int range, wrapping to 4, truncating to 8
    "d_d_model_1e300.safetensors": with_metadata("config", config_field("d_model", "1e300")),
    "d_d_model_4294967300.safetensors": with_metadata("config", config_field("d_model", "4294967300")),
    "d_vocab_size_8.9.safetensors": with_metadata("config", config_field("vocab_size", "8.9")),
}

if __name__ == "__main__":
    os.makedirs(OUT, exist_ok=True)
    for name, data in FILES.items():
        with open(os.path.join(OUT, name), "wb") as f:
            f.write(data)
        print(f"wrote {os.path.join(OUT, name)}: {len(data)} bytes")
