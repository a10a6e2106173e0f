"""Sequence packing through the loader: a corpus of text-only WebDataset
records (key.txt), tokenized by byte-level BPE with EOS appended, packed into
rows of pack_length tokens (greedy and best_fit).

The rows give back every document exactly (by document_index and
document_offset, or by segment_ids alone), their ids equal the reference
tokenizer's, position_ids and cu_seqlens describe the same pieces, rows are
the same at 1 and 2 threads and with the documents tokenized on a worker,
a loader resumed from a state_dict taken at 3 random points (mid sequence:
a document cut across rows) delivers exactly the rest, and the same
documents as a JSON Lines corpus (--format lines) give the same rows."""
import io
import json
import os
import pathlib
import random
import shutil
import tarfile
import tempfile
import unittest

import numpy as np
import regex

import prepflow
import testdata
from prepflow import ops
from text_reference import BYTES, GPT2_PAT, Gpt2Reference, learn_merges

BUILD = pathlib.Path(os.environ.get("PREPFLOW_BUILD_DIR", "build")).resolve()
BIN = BUILD / "bin"
LENGTH = 64


def setUpModule():
    global TMP, DOCS, SHARD, VOCAB, MERGES, EOS, REFERENCE
    TMP = tempfile.mkdtemp(prefix="prepflow-packing-")
    licenses = pathlib.Path("/usr/share/common-licenses")
    text = "\n".join(p.read_text(errors="replace") for p in sorted(licenses.glob("*"))
                     if p.is_file())[:300000]
    words = regex.findall(r"\S+", text) or ["word"]
    rng = random.Random(5)
    # Documents from a word to a few hundred tokens, one over a row, one
    # over the 16 KiB a transcript may have, and an empty one.
    DOCS = [" ".join(rng.choice(words) for _ in range(rng.choice([1, 5, 20, 40, 90])))
            for _ in range(300)]
    DOCS[10] = " ".join(words[:4000])[:40000]
    DOCS[20] = ""
    SHARD = os.path.join(TMP, "corpus.tar")
    with tarfile.open(SHARD, "w") as tar:
        for n, doc in enumerate(DOCS):
            data = doc.encode("utf-8")
            info = tarfile.TarInfo("%06d.txt" % n)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    merges = learn_merges(GPT2_PAT.findall(" ".join(DOCS[:100]))[:20000], 200)
    vocab = {s: i for i, s in enumerate(BYTES.values())}
    for a, b in merges:
        vocab.setdefault(a + b, len(vocab))
    vocab["<|endoftext|>"] = EOS = len(vocab)
    VOCAB, MERGES = os.path.join(TMP, "vocab.json"), os.path.join(TMP, "merges.txt")
    pathlib.Path(VOCAB).write_text(json.dumps(vocab), encoding="utf-8")
    pathlib.Path(MERGES).write_text(
        "#version: 0.2\n" + "".join("%s %s\n" % m for m in merges), encoding="utf-8")
    ref = Gpt2Reference(VOCAB, MERGES)
    REFERENCE = [ref.encode(doc) + [EOS] for doc in DOCS]


def tearDownModule():
    shutil.rmtree(TMP, ignore_errors=True)


def make(mode="greedy", **kw):
    kw.setdefault("threads", 2)
    mode = kw.pop("pack_mode", mode)
    return prepflow.Loader(
        SHARD, pipeline={"txt": [ops.Tokenize(kind="bpe", vocab=VOCAB, merges=MERGES,
                                              add_eos=True)]},
        pack_mode=mode, pack_pad_id=EOS + 1, seed=3, as_numpy=True,
        **dict(dict(pack_length=LENGTH, batch_size=4), **kw))


def run(loader, batches=None):
    """The batches' dicts, up to `batches` of them."""
    out = []
    for batch in loader.batches():
        out.append(batch.fields)
        if batches is not None and len(out) == batches:
            break
    return out


def rows_of(batches):
    return np.concatenate([b["tokens"] for b in batches])


def unpack(batches):
    """{document index: its tokens}, from the pieces each row lists."""
    pieces = {}
    for b in batches:
        for r in range(len(b["tokens"])):
            at = 0
            for p, index in enumerate(b["document_index"][r]):
                if index < 0:
                    break
                n = int((b["segment_ids"][r] == p + 1).sum())
                pieces.setdefault(int(index), {})[int(b["document_offset"][r][p])] = \
                    b["tokens"][r][at:at + n].tolist()
                at += n
    docs = {}
    for index, parts in pieces.items():
        docs[index] = []
        for offset in sorted(parts):
            assert offset == len(docs[index]), (index, offset)
            docs[index] += parts[offset]
    return docs


class Packing(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.runs = {}
        for mode in ("greedy", "best_fit"):
            loader = make(mode, pack_window_tokens=500)
            cls.runs[mode] = (run(loader), loader.stats())
            loader.close()

    def check_describes_itself(self, b):
        tokens, pos, seg, cu = b["tokens"], b["position_ids"], b["segment_ids"], b["cu_seqlens"]
        self.assertEqual(tokens.shape[1], LENGTH)
        self.assertEqual(tokens.dtype, np.int64)
        self.assertEqual(cu.dtype, np.int32)
        self.assertEqual(cu[-1], tokens.size)
        runs = np.diff(cu)
        self.assertEqual(b["max_seqlen"], runs.max())
        flat_pos, flat_seg = pos.ravel(), seg.ravel()
        for start, n in zip(cu[:-1], runs):
            self.assertTrue((flat_seg[start:start + n] == flat_seg[start]).all())
            if flat_seg[start] > 0:
                self.assertEqual(flat_pos[start:start + n].tolist(), list(range(n)))
            else:  # padding
                self.assertTrue((tokens.ravel()[start:start + n] == EOS + 1).all())

    def test_rows_give_the_documents_back_exactly(self):
        for mode, (batches, stats) in self.runs.items():
            docs = unpack(batches)
            want = {i: ids for i, ids in enumerate(REFERENCE) if ids}
            self.assertEqual(sorted(docs), sorted(want), mode)
            for i, ids in want.items():
                self.assertEqual(docs[i], ids, (mode, i))
            for b in batches:
                self.check_describes_itself(b)
            # Counted as fed to the packer (the next epoch's first few too).
            self.assertGreaterEqual(stats["documents"], len(DOCS), mode)

    def test_greedy_fills_every_row_but_the_last(self):
        batches, _ = self.runs["greedy"]
        rows = rows_of(batches)
        total = sum(len(ids) for ids in REFERENCE)
        self.assertEqual(len(rows), -(-total // LENGTH))
        self.assertTrue((np.concatenate([b["segment_ids"] for b in batches])[:-1] > 0).all())

    def test_best_fit_keeps_documents_whole_where_they_fit(self):
        batches, _ = self.runs["best_fit"]
        pieces = {}
        for b in batches:
            for index in b["document_index"].ravel():
                if index >= 0:
                    pieces[int(index)] = pieces.get(int(index), 0) + 1
        for i, ids in enumerate(REFERENCE):
            self.assertEqual(pieces.get(i, 0), -(-len(ids) // LENGTH), i)

    def test_the_same_at_any_thread_count_and_on_a_worker(self):
        batches, stats = self.runs["greedy"]
        loader = make(threads=1)
        self.assertTrue((rows_of(run(loader)) == rows_of(batches)).all())
        self.assertEqual(loader.stats()["checksum"], stats["checksum"])
        loader.close()
        with testdata.Worker(BIN, TMP) as worker:
            loader = make(threads=1, offload="remote", workers=[worker.address])
            got = run(loader)
            st = loader.stats()
            loader.close()
        self.assertTrue((rows_of(got) == rows_of(batches)).all())
        self.assertEqual(st["checksum"], stats["checksum"])
        self.assertEqual(st["remote_documents"], st["documents"])

    def test_resumes_exactly_from_a_state_dict(self):
        rng = random.Random(17)
        for mode, (batches, _) in self.runs.items():
            for stop in sorted(rng.sample(range(1, len(batches) - 1), 3)):
                first = make(mode, pack_window_tokens=500)
                head = run(first, batches=stop)
                state = first.state_dict()
                first.close()
                resumed = make(mode, pack_window_tokens=500)
                resumed.load_state_dict(state)
                tail = run(resumed)
                resumed.close()
                self.assertEqual(len(head) + len(tail), len(batches), (mode, stop))
                self.assertTrue((rows_of(head + tail) == rows_of(batches)).all(), (mode, stop))

    def test_a_state_dict_mid_document_says_so(self):
        loader = make()
        for _ in loader.batches():
            state = loader.state_dict()
            if state["pack_tokens"] > 0:
                break
        loader.close()
        self.assertGreater(state["pack_tokens"], 0)
        self.assertIsNone(state["step"])

    def test_a_json_lines_corpus_packs_as_the_shard(self):
        corpus = os.path.join(TMP, "corpus.jsonl")
        with open(corpus, "w", encoding="utf-8") as f:
            for doc in DOCS:
                f.write(json.dumps({"text": doc, "source": "licenses"}) + "\n")
        loader = prepflow.Loader(
            corpus, format="lines",
            pipeline=[ops.Tokenize(kind="bpe", vocab=VOCAB, merges=MERGES, add_eos=True,
                                   json_key="text")],
            pack_length=LENGTH, pack_pad_id=EOS + 1, batch_size=4, seed=3, as_numpy=True,
            threads=2)
        got = run(loader)
        st = loader.stats()
        loader.close()
        batches, stats = self.runs["greedy"]
        self.assertTrue((rows_of(got) == rows_of(batches)).all())
        self.assertEqual(st["checksum"], stats["checksum"])

    def test_refusals_name_the_option(self):
        images = testdata.demo_dataset(BIN, os.path.join(TMP, "demo"))
        with self.assertRaisesRegex(ValueError, "pack_length: the pipeline must end in token ids"):
            prepflow.Loader(images, pipeline=[ops.Decode(), ops.CenterCrop(size=8)], pack_length=8,
                            as_numpy=True)
        with self.assertRaisesRegex(ValueError, "pack_mode: 'tight' is not greedy or best_fit"):
            make(pack_mode="tight")
        with self.assertRaisesRegex(ValueError, "a batch of 4294967296 tokens is over 2\\^31"):
            make(pack_length=1 << 24, batch_size=256)
        loader = make()
        with self.assertRaises(TypeError):
            len(loader)
        loader.close()


if __name__ == "__main__":
    unittest.main()
