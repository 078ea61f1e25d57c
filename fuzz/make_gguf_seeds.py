#!/usr/bin/env python3
"""Writes the seed inputs of fuzz_gguf into fuzz/corpus/gguf/ (seed-*): the llama.cpp-written
reference file of tests/gguf/data, cuts of it, and small hand-built files with one defect each.
Run from the repository root: python3 fuzz/make_gguf_seeds.py
"""
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "corpus", "gguf")
REFERENCE = os.path.join(HERE, "..", "tests", "gguf", "data", "reference_qwen35.gguf")

U8, I8, U16, I16, U32, I32, F32, BOOL, STRING, ARRAY, U64, I64, F64 = range(13)


def s(text):
    b = text.encode()
    return struct.pack("<Q", len(b)) + b


def kv(key, vtype, payload):
    return s(key) + struct.pack("<I", vtype) + payload


def header(n_kv, version=3, n_tensors=0):
    return b"GGUF" + struct.pack("<IQQ", version, n_tensors, n_kv)


def array(item_type, items_payload, count):
    return struct.pack("<IQ", item_type, count) + items_payload


def qwen(arch="qwen35", Sk=128, Hk=16, Hv=48, inner=6144, extra=()):
    entries = [kv("general.architecture", STRING, s(arch)),
               kv(f"{arch}.block_count", U32, struct.pack("<I", 64)),
               kv(f"{arch}.ssm.state_size", U32, struct.pack("<I", Sk)),
               kv(f"{arch}.ssm.group_count", U32, struct.pack("<I", Hk)),
               kv(f"{arch}.ssm.time_step_rank", U32, struct.pack("<I", Hv)),
               kv(f"{arch}.ssm.inner_size", U32, struct.pack("<I", inner)),
               kv(f"{arch}.ssm.conv_kernel", U32, struct.pack("<I", 4)),
               kv(f"{arch}.full_attention_interval", U32, struct.pack("<I", 4))] + list(extra)
    return header(len(entries)) + b"".join(entries)


def main():
    os.makedirs(OUT, exist_ok=True)
    seeds = {}
    with open(REFERENCE, "rb") as f:
        ref = f.read()
    seeds["reference-qwen35"] = ref
    for cut in (3, 4, 8, 16, 24, 40, 100, len(ref) // 2, len(ref) - 1):
        seeds[f"reference-cut-{cut}"] = ref[:cut]
    seeds["empty"] = b""
    seeds["qwen35-minimal"] = qwen()
    seeds["qwen3next-minimal"] = qwen("qwen3next", Hv=32, inner=4096)
    seeds["mamba-arch"] = qwen("mamba2")
    seeds["zero-heads"] = qwen(Hk=0)
    seeds["hk-not-dividing-hv"] = qwen(Hk=7)
    seeds["inner-not-multiple"] = qwen(inner=6145)
    seeds["huge-heads"] = qwen(Sk=0xFFFFFFFF, Hk=1, Hv=0xFFFFFFFF, inner=0xFFFFFFFF)
    seeds["version-1"] = header(0, version=1)
    seeds["version-4"] = header(0, version=4)
    seeds["bad-magic"] = b"GGUG" + header(0)[4:]
    seeds["kv-count-huge"] = header(1 << 62)
    seeds["key-length-huge"] = header(1) + struct.pack("<Q", 1 << 63) + b"k"
    seeds["string-length-huge"] = header(1) + s("a") + struct.pack("<IQ", STRING, (1 << 64) - 1)
    seeds["array-count-huge"] = header(1) + s("a") + struct.pack("<I", ARRAY) + array(U64, b"", (1 << 64) - 1)
    seeds["array-bad-item-type"] = header(1) + kv("a", ARRAY, array(99, b"", 1))
    seeds["value-type-bad"] = header(1) + s("a") + struct.pack("<I", 13)
    nested = array(U8, b"\x01\x02", 2)
    for _ in range(6):
        nested = array(ARRAY, nested, 1)
    seeds["arrays-nested-deep"] = header(1) + kv("deep", ARRAY, nested)
    strings = b"".join(s(f"tok{i}") for i in range(50))
    seeds["array-of-strings"] = header(1) + kv("tokenizer.ggml.tokens", ARRAY, array(STRING, strings, 50))
    seeds["duplicate-key"] = header(2) + kv("a", U8, b"\x01") + kv("a", U8, b"\x02")
    seeds["every-scalar"] = header(11) + b"".join([
        kv("u8", U8, b"\xff"), kv("i8", I8, b"\x80"), kv("u16", U16, b"\xff\xff"), kv("i16", I16, b"\x00\x80"),
        kv("u32", U32, b"\xff" * 4), kv("i32", I32, b"\x00\x00\x00\x80"), kv("f32", F32, struct.pack("<f", float("nan"))),
        kv("bool", BOOL, b"\x02"), kv("u64", U64, b"\xff" * 8), kv("i64", I64, b"\x00" * 7 + b"\x80"),
        kv("f64", F64, struct.pack("<d", float("inf")))])
    seeds["key-not-utf8"] = header(1) + kv("\udcff".encode("utf-8", "surrogateescape").decode("latin-1"), U8, b"\x00")
    for name, data in seeds.items():
        with open(os.path.join(OUT, "seed-" + name), "wb") as f:
            f.write(data)
    print(f"wrote {len(seeds)} seeds to {OUT}")


if __name__ == "__main__":
    main()
