#!/usr/bin/env python3
"""Rewrites a kernels/cuda/*.cu file into host C++ for the SIMT emulator (simt/prelude.h).

Two CUDA constructs are not C++ and are rewritten here; everything else is left as written:

  kernel<<<grid, block, shared, stream>>>(args);
      -> kernel | ::simt::launch_config("kernel", __FILE__, __LINE__, grid, block, shared, stream)(args);
  __shared__ T name[N][M];   ->  auto& name = ::simt::block_shared<T[N][M]>(KEY, __FILE__, __LINE__);
      (an __align__(N) after __shared__ is dropped: the emulator aligns every array to 128 bytes)
  extern __shared__ T name[];  ->  T* name = ::simt::dynamic_shared<T>();

  #pragma unroll [N]          ->  #pragma GCC unroll N (64 without N)
      (nvcc unrolls such a loop completely when its trip count is a constant; GCC ignores
      `#pragma unroll` and would keep the loop, whose counter and branch the op-count plugin
      would then count as instructions the GPU never runs)

KEY numbers the __shared__ declarations of the file, so each has its own storage per block.
Line breaks are kept and the output starts with a #line directive, so compiler errors,
__FILE__/__LINE__ and a debugger all point into the original .cu file.

  rewrite_cu.py IN.cu OUT.cpp [--mutate FIND REPLACE OCCURRENCE]

--mutate replaces the OCCURRENCE-th (1-based) exact occurrence of FIND in IN.cu before
rewriting (simt/mutants.txt); it fails if there is no such occurrence.
"""
import re
import sys

SHARED = re.compile(r"__shared__\s+(?:__align__\(\s*\d+\s*\)\s+)?(?P<type>[A-Za-z_][\w:]*(?:\s*<[^;{}]*?>)?)\s+(?P<name>[A-Za-z_]\w*)"
                    r"(?P<dims>(?:\s*\[[^\]]+\])*)\s*;")
EXTERN_SHARED = re.compile(r"extern\s+__shared__\s+(?:__align__\(\s*\d+\s*\)\s+)?(?P<type>[A-Za-z_][\w:]*)"
                           r"\s+(?:__align__\(\s*\d+\s*\)\s+)?(?P<name>[A-Za-z_]\w*)\s*\[\s*\]\s*;")


def callee_before(text, end):
    """The launched expression that ends at text[end] (just before '<<<'): an identifier,
    possibly qualified, with template arguments. Returns its start index."""
    i = end
    while i > 0 and text[i - 1].isspace():
        i -= 1
    if i > 0 and text[i - 1] == ">":  # template arguments: back to the matching '<'
        depth = 0
        while i > 0:
            i -= 1
            if text[i] == ">":
                depth += 1
            elif text[i] == "<":
                depth -= 1
                if depth == 0:
                    break
        while i > 0 and text[i - 1].isspace():
            i -= 1
    while i > 0 and (text[i - 1].isalnum() or text[i - 1] in "_:"):
        i -= 1
    return i


def rewrite_launches(text, path):
    out = []
    pos = 0
    while True:
        start = text.find("<<<", pos)
        if start < 0:
            out.append(text[pos:])
            return "".join(out)
        depth, i = 0, start + 3
        while i < len(text):
            if text[i] in "([{":
                depth += 1
            elif text[i] in ")]}":
                depth -= 1
            elif depth == 0 and text.startswith(">>>", i):
                break
            i += 1
        else:
            sys.exit(f"{path}: a '<<<' without its '>>>'")
        callee_start = callee_before(text, start)
        callee = " ".join(text[callee_start:start].split())
        config = text[start + 3:i]
        out.append(text[pos:start])
        out.append(f' | ::simt::launch_config("{callee}", __FILE__, __LINE__, {config})')
        pos = i + 3


def rewrite_shared(text):
    text = EXTERN_SHARED.sub(lambda m: f"{m['type']}* {m['name']} = ::simt::dynamic_shared<{m['type']}>();", text)
    key = iter(range(1 << 30))

    def static(m):
        dims = "".join(m["dims"].split())
        return f"auto& {m['name']} = ::simt::block_shared<{m['type']}{dims}>({next(key)}, __FILE__, __LINE__);"

    return SHARED.sub(static, text)


UNROLL = re.compile(r"^([ \t]*)#pragma\s+unroll(?:[ \t]+(?P<count>\d+))?[ \t]*$", re.M)


def rewrite_unroll(text):
    return UNROLL.sub(lambda m: f"{m[1]}#pragma GCC unroll {m['count'] or 64}", text)


def mutate(text, find, replace, occurrence, path):
    start = -1
    for _ in range(occurrence):
        start = text.find(find, start + 1)
        if start < 0:
            sys.exit(f"{path}: the mutant's text {find!r} does not occur {occurrence} times")
    return text[:start] + replace + text[start + len(find):]


def main(argv):
    if len(argv) not in (3, 7) or (len(argv) == 7 and argv[3] != "--mutate"):
        sys.exit(__doc__)
    source, target = argv[1], argv[2]
    with open(source, encoding="utf-8") as f:
        text = f.read()
    if len(argv) == 7:
        text = mutate(text, argv[4].encode().decode("unicode_escape"), argv[5].encode().decode("unicode_escape"),
                      int(argv[6]), source)
    text = rewrite_unroll(rewrite_shared(rewrite_launches(text, source)))
    with open(target, "w", encoding="utf-8") as f:
        f.write(f'#line 1 "{source}"\n')
        f.write(text)


if __name__ == "__main__":
    main(sys.argv)
