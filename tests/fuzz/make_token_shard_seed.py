#!/usr/bin/env python3
"""Write tests/fuzz/seeds/tiny_shard.bin, the seed of fuzz_token_shard.

    make_token_shard_seed.py [OUT]

A valid token shard in llm.c's format (data/token_shard.h), written here without tinytrain's
writer: 256 little-endian int32 (magic 20240520, version 1, the token count, zeros), then
uint16 tokens: two documents of the byte tokenizer, each preceded by its end-of-text id 0.
tests/test_token_shard.cpp reads it back and checks that write_token_shard writes the same bytes.
"""
import os
import struct
import sys

DOCUMENTS = [b"A tiny shard.\n", b"Two documents, bytes as ids.\n"]


def main(out):
    tokens = []
    for doc in DOCUMENTS:
        tokens += [0] + list(doc)
    header = [20240520, 1, len(tokens)] + [0] * 253
    with open(out, "wb") as f:
        f.write(struct.pack("<256i", *header))
        f.write(struct.pack(f"<{len(tokens)}H", *tokens))
    print(f"{out}: {len(tokens)} tokens, {os.path.getsize(out)} bytes")


if __name__ == "__main__":
    here = os.path.dirname(os.path.abspath(__file__))
    main(sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "seeds", "tiny_shard.bin"))
