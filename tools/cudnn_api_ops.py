#!/usr/bin/env python3
"""cuDNN's API log -> every operation of every operation graph, one line each.

Usage: cudnn_api_ops.py LOG   (LOG written with CUDNN_LOGLEVEL_DBG=3 CUDNN_LOGDEST_DBG=LOG)

Each finalized operation descriptor becomes a line with its attributes and, for each tensor it
names, the tensor's data type, dims, strides, alignment and flags, as cuDNN logged them. Tensor
uids become t1, t2... in order of first use within each graph, so that graphs built by
different code (tinytrain's kernels/cudnn/, NVIDIA's cudnn-frontend: tools/cudnn_frontend_sdpa.cpp)
can be compared with diff. A "# graph N" line closes each operation graph, followed by how many
times each attribute worth watching was set (cudnnBackendSetAttribute calls), since cuDNN's
printout of a descriptor leaves some out (the matmul padding value, the GEN_INDEX axis).
"""
import collections
import re
import sys

WATCHED = ('PADDING', 'ALPHA', 'DETERMINISTIC', 'AXIS', 'BY_VALUE', 'IS_VIRTUAL', 'BYTE_ALIGN', 'BERNOULLI')


def main(path):
    calls = re.split(r'\n(?=I! CuDNN)', open(path).read())
    uids, sets, graph = {}, collections.Counter(), 0
    for call in calls:
        if 'cudnnBackendSetAttribute() called' in call:
            name = re.search(r'attributeName: .*?val=(CUDNN_ATTR_\w+)', call)
            if name:
                sets[name.group(1)] += 1
            continue
        if 'cudnnBackendFinalize() called' not in call:
            continue
        kind = re.search(r'descriptor: type=CUDNN_BACKEND_(OPERATION\w*?)_DESCRIPTOR:', call)
        if not kind:
            continue
        if kind.group(1) == 'OPERATIONGRAPH':
            graph += 1
            watched = sorted((k, n) for k, n in sets.items() if any(w in k for w in WATCHED))
            print('# graph %d; set: %s' % (graph, ', '.join('%s x%d' % kn for kn in watched)))
            uids, sets = {}, collections.Counter()
            continue
        fields = [kind.group(1)]
        for line in call.splitlines()[2:]:
            line = line.replace('i!', '').strip()
            if line.startswith(('Time:', 'Process=')):
                break
            tensor = re.match(r'(\w+): type=CUDNN_BACKEND_TENSOR_DESCRIPTOR:', line)
            if tensor:
                fields.append('|' + tensor.group(1) + ':')
                continue
            pair = re.match(r'(\w+): type=[\w ]+; val=(.*?);?$', line)
            if not pair or pair.group(1) in ('nbDims', 'nanOpt'):
                continue
            key, value = pair.groups()
            value = re.sub(r' \(\d+\)$', '', re.sub(r'CUDNN_(DATA_|POINTWISE_|REDUCE_TENSOR_)?', '', value))
            if key == 'uid':
                value = uids.setdefault(value, 't%d' % (len(uids) + 1))
            fields.append('%s=%s' % (key, value))
        print(' '.join(fields))


if __name__ == '__main__':
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
