#!/usr/bin/python3
"""Tokenizing documents with SentencePiece: prepflow.Loader against
python3-sentencepiece in a loop, on one core (a program, not a test; prints
one JSON line).

A unigram model (vocab 8,000) is trained here by spm_train on Debian's
license texts; the documents are paragraphs of those texts (a WebDataset
shard of key.txt for prepflow, strings in memory for the loop). prepflow
reads, tokenizes (`tokenize { kind: KIND_SENTENCEPIECE }`, EOS appended),
batches (padded, with lengths) and hands batches to Python; the loop calls
`encode` on each string and appends EOS. Tokens per CPU-second of the
process; rounds alternate, ratios per round, then the median.

With --pack N both sides also pack the ids into rows of N tokens, greedily
(concatenate, cut every N), giving each row its tokens and position ids
(restarting at each document): prepflow's `pack_length` against the same in
Python with numpy, the usual `group_texts` loop.

    PYTHONPATH=build/python taskset -c 0 /usr/bin/python3 bench/tokenize_bench.py --rounds 3
    PYTHONPATH=build/python taskset -c 0 /usr/bin/python3 bench/tokenize_bench.py --pack 2048
    ... --pack 2048 --cache-bytes 1000000000   (later epochs from prepflow's RAM cache)
"""
import argparse
import io
import json
import pathlib
import shutil
import subprocess
import tarfile
import tempfile
import time

import numpy as np
import sentencepiece

import prepflow
from paired import medians, paired_rounds
from prepflow import ops


def make_data(tmp, vocab):
    text = "\n".join(p.read_text(errors="replace")
                     for p in sorted(pathlib.Path("/usr/share/common-licenses").glob("*"))
                     if p.is_file())
    corpus = pathlib.Path(tmp, "corpus.txt")
    corpus.write_text(text, encoding="utf-8")
    prefix = str(pathlib.Path(tmp, "spm"))
    subprocess.run(["spm_train", "--input", str(corpus), "--model_prefix", prefix,
                    "--vocab_size", str(vocab), "--hard_vocab_limit", "false",
                    "--model_type", "unigram",
                    "--minloglevel", "2"], check=True, capture_output=True)
    docs = [p.strip() for p in text.split("\n\n") if len(p.strip()) > 40]
    shard = pathlib.Path(tmp, "docs.tar")
    with tarfile.open(shard, "w") as tar:
        for n, doc in enumerate(docs):
            data = doc.encode("utf-8")[:16000]  # (a .txt is also read as a transcript)
            info = tarfile.TarInfo("%06d.txt" % n)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return shard, [d.encode("utf-8")[:16000].decode("utf-8", "ignore") for d in docs], \
        prefix + ".model"


def run_python(docs, model, epochs):
    start = time.process_time()
    sp = sentencepiece.SentencePieceProcessor(model_file=model)
    eos, tokens = sp.eos_id(), 0
    for _ in range(epochs):
        for doc in docs:
            ids = sp.encode(doc)
            ids.append(eos)
            tokens += len(ids)
    return tokens / (time.process_time() - start)


def run_python_packed(docs, model, epochs, length, batch=8):
    """Tokenize, then greedy packing as HF's group_texts does it, with
    position ids restarting at each document (and each row)."""
    start = time.process_time()
    sp = sentencepiece.SentencePieceProcessor(model_file=model)
    eos, tokens = sp.eos_id(), 0
    ids, pos, rows = [], [], []
    for _ in range(epochs):
        for doc in docs:
            piece = sp.encode(doc)
            piece.append(eos)
            ids.extend(piece)
            pos.extend(range(len(piece)))
            while len(ids) >= length:
                row_pos = np.array(pos[:length], np.int64)
                if row_pos[0]:  # a document continued from the row before starts at 0
                    zeros = np.flatnonzero(row_pos == 0)
                    end = zeros[0] if len(zeros) else length
                    row_pos[:end] -= row_pos[0]
                rows.append((np.array(ids[:length], np.int64), row_pos))
                del ids[:length], pos[:length]
                if len(rows) == batch:
                    tokens += batch * length
                    np.stack([r[0] for r in rows]), np.stack([r[1] for r in rows])
                    rows = []
    return tokens / (time.process_time() - start)


def run_prepflow(shard, model, epochs, length=0, cache_bytes=0):
    start = time.process_time()
    options = dict(pack_length=length, batch_size=8) if length else dict(batch_size=64)
    options["cache_bytes"] = cache_bytes
    loader = prepflow.Loader(str(shard), pipeline={
        "txt": [ops.Tokenize(kind="sentencepiece", model=model, add_eos=True)]},
        threads=1, shuffle=False, as_numpy=True, epochs=epochs, **options)
    tokens = 0
    for _ in range(epochs):
        for batch in loader:
            tokens += batch["tokens"].size if length else int(batch["txt_lengths"].sum())
    loader.close()
    return tokens / (time.process_time() - start)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vocab", type=int, default=8000)
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--pack", type=int, default=0, help="rows of this many tokens (0: none)")
    ap.add_argument("--cache-bytes", type=int, default=0,
                    help="prepflow keeps the ids in RAM for later epochs (0: none)")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="prepflow-tokenize-bench-")
    try:
        shard, docs, model = make_data(tmp, args.vocab)
        ours, theirs, ratios = paired_rounds(
            args.rounds, lambda: run_prepflow(shard, model, args.epochs, args.pack,
                                              args.cache_bytes),
            lambda: run_python_packed(docs, model, args.epochs, args.pack) if args.pack
            else run_python(docs, model, args.epochs))
        print(json.dumps({"benchmark": "tokenize_pack" if args.pack else "tokenize",
                          "pack_length": args.pack, "cache_bytes": args.cache_bytes,
                          "documents": len(docs), "epochs": args.epochs, "vocab": args.vocab,
                          "rounds": args.rounds,
                          **medians("prepflow_tokens_per_cpu_s", ours,
                                    "python_tokens_per_cpu_s", theirs, ratios)}))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
