#!/usr/bin/env python3
"""Writes a directory of llm.c-style files for tests/llmc_data.sh, following llm.c's layouts
(karpathy/llm.c: dev/data/data_common.py write_datafile, train_gpt2.py write_tokenizer), not
tinytrain's writer:

  shards     header 256 x int32 little-endian: magic 20240520, version 1, token count; then the
             tokens as uint16 little-endian
  tokenizer  header 256 x int32: magic 20240328, version 2, the number of ids N, the
             end-of-text id; then per id one length byte and the id's bytes

  llmc_files.py OUT_DIR N_IDS      shards tiny_train_000.bin, tiny_train_001.bin, tiny_val.bin
                                   of ids below N_IDS - 1 (N_IDS - 1 is end-of-text, starting
                                   each "document"), and gpt2_tokenizer.bin: id i decodes to
                                   "<i>" and the end-of-text id to "|"
  llmc_files.py OUT_DIR N_IDS --truncate-tokenizer   the tokenizer cut 3 bytes short
"""
import os
import struct
import sys


def header(*fields):
    values = list(fields) + [0] * (256 - len(fields))
    return struct.pack("<256i", *values)


def write_shard(path, tokens):
    with open(path, "wb") as f:
        f.write(header(20240520, 1, len(tokens)))
        f.write(struct.pack("<%dH" % len(tokens), *tokens))


def document_stream(n_ids, count, offset):
    eot = n_ids - 1
    tokens = []
    while len(tokens) < count:
        tokens.append(eot)
        tokens.extend((offset + 7 * j) % eot for j in range(40))  # a cycle a model can learn
    return tokens[:count]


def main(argv):
    out, n_ids = argv[1], int(argv[2])
    os.makedirs(out, exist_ok=True)
    write_shard(os.path.join(out, "tiny_train_000.bin"), document_stream(n_ids, 3000, 0))
    write_shard(os.path.join(out, "tiny_train_001.bin"), document_stream(n_ids, 2000, 1))
    write_shard(os.path.join(out, "tiny_val.bin"), document_stream(n_ids, 1200, 2))
    pieces = [("<%d>" % i).encode() for i in range(n_ids - 1)] + [b"|"]
    body = b"".join(struct.pack("<B", len(p)) + p for p in pieces)
    data = header(20240328, 2, n_ids, n_ids - 1) + body
    if "--truncate-tokenizer" in argv:
        data = data[:-3]
    with open(os.path.join(out, "gpt2_tokenizer.bin"), "wb") as f:
        f.write(data)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
