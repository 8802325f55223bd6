#!/usr/bin/python3
"""Cross-check gateway/kvevents/testdata/kv-events-vectors.json.

The vectors are written by hand from TokenSpeed's publisher source
(docs/protocol.md §16). This script re-encodes each vector's decoded form
with msgpack-python (Debian's python3-msgpack), which writes the same
compact ints, float64 floats and str strings as msgspec, and recomputes
every block hash with a port of the scheduler's HashKvBlock. It is a
developer's check, not part of `make test`:

    /usr/bin/python3 scripts/kvevents-vectors.py
"""
import json
import os
import sys

import msgpack

HERE = os.path.dirname(os.path.abspath(__file__))
VECTORS = os.path.join(HERE, "..", "gateway", "kvevents", "testdata", "kv-events-vectors.json")


def block_hash(tokens, parent):
    h = 14695981039346656037
    prime = 1099511628211
    mask = (1 << 64) - 1

    def mix(b):
        nonlocal h
        h = ((h ^ b) * prime) & mask

    def mix64(v):
        for i in range(8):
            mix((v >> (8 * i)) & 0xFF)

    mix(1 if parent is not None else 0)
    if parent is not None:
        mix64(parent)
    mix64(len(tokens))
    for t in tokens:
        u = t & 0xFFFFFFFF
        for i in range(4):
            mix((u >> (8 * i)) & 0xFF)
    return h


def h(s):
    return None if s is None else int(s, 16)


def event(e):
    kind = e["kind"]
    if kind == "BlockStored":
        return [kind, [h(x) for x in e["block_hashes"]], h(e["parent"]), e["token_ids"], e["block_size"]]
    if kind == "BlockRemoved":
        return [kind, [h(x) for x in e["block_hashes"]]]
    return [kind]


def main():
    d = json.load(open(VECTORS))
    bad = 0
    for v in d["payloads"]:
        dec = v["decoded"]
        obj = [dec["ts"], [event(e) for e in dec["events"]]]
        if dec["dp_rank"] is not None:
            obj.append(dec["dp_rank"])
        got = msgpack.packb(obj, use_bin_type=True).hex()
        want = v["hex"].replace(" ", "")
        if got != want:
            bad += 1
            print("MISMATCH %s\n  vector  %s\n  msgpack %s" % (v["name"], want, got))
        else:
            print("ok  %s" % v["name"])
    for b in d["block_hashes"]:
        got = block_hash(b["tokens"], h(b["parent"]))
        if got != h(b["hash"]):
            bad += 1
            print("MISMATCH hash of %s: vector %s, computed %#018x" % (b["tokens"], b["hash"], got))
        else:
            print("ok  hash %s" % b["hash"])
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
