#!/usr/bin/env python3
"""Build the fuzz targets' seed corpora from the committed files.

    build_corpus.py OUT_DIR FILE...

Each safetensors FILE (the committed references of tests/data, tests/fuzz/seeds and the
hostile files of tests/fuzz/regressions) is copied into OUT_DIR/reference/, the corpus of
fuzz_reference; each token shard (.bin, tests/fuzz/seeds) into OUT_DIR/token_shard/, the
corpus of fuzz_token_shard.
The text of its metadata values (config and optimizer JSON, the batch, seq and steps counts)
goes into OUT_DIR/config/, the corpus of fuzz_config. A file whose header Python cannot read
(regression A) seeds fuzz_reference only. OUT_DIR is emptied first.
"""
import json
import os
import shutil
import struct
import sys


def metadata(path):
    """The __metadata__ of a safetensors file, or {} when its header is unreadable."""
    with open(path, "rb") as f:
        data = f.read()
    try:
        (n,) = struct.unpack("<Q", data[:8])
        header = json.loads(data[8:8 + n])
        meta = header.get("__metadata__", {})
        return {k: v for k, v in meta.items() if isinstance(v, str)}
    except (ValueError, struct.error, AttributeError):
        return {}


def main(out, files):
    for sub in ("reference", "config", "token_shard"):
        shutil.rmtree(os.path.join(out, sub), ignore_errors=True)
        os.makedirs(os.path.join(out, sub))
    for path in files:
        stem = os.path.basename(path)
        if stem.endswith(".bin"):
            shutil.copyfile(path, os.path.join(out, "token_shard", stem))
            continue
        shutil.copyfile(path, os.path.join(out, "reference", stem))
        for key, value in metadata(path).items():
            if key in ("config", "optimizer", "batch", "seq", "steps"):
                with open(os.path.join(out, "config", f"{stem}.{key}"), "w") as f:
                    f.write(value)
    counts = {sub: len(os.listdir(os.path.join(out, sub))) for sub in ("reference", "config", "token_shard")}
    print(f"fuzz corpus in {out}: {counts['reference']} files for fuzz_reference, {counts['config']} for fuzz_config, "
          f"{counts['token_shard']} for fuzz_token_shard")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
