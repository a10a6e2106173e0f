"""Tokenizers against their references, and image-caption records.

The models are made here: SentencePiece models trained by Debian's spm_train
on text from /usr/share/common-licenses and generated lines (accents, CJK,
emoji, digits, contractions, every kind of whitespace), and byte-level BPE
merges learned by a small learner below, written as GPT-2's vocab.json +
merges.txt and as CLIP's merges file. The references: python3-sentencepiece
on the same .model, and GPT-2's and CLIP's tokenizer algorithms written out
below from their published code (with the regex module's Unicode classes;
CLIP's ftfy and HTML unescaping are not applied on either side).

Image-caption WebDataset shards (key.jpg, key.txt, key.json) train-iterate
as dicts: the caption's ids equal the reference's, the image equals the
image-only pipeline's, and a worker gives the same at every cut, or leaves
the tokenizer to the trainer where it cannot read the model."""
import io
import json
import os
import pathlib
import random
import shutil
import subprocess
import tarfile
import tempfile
import unittest

import numpy as np
import regex

import prepflow
import testdata
from prepflow import ops
from text_reference import (BYTES, CLIP_PAT, GPT2_PAT, ClipReference, Gpt2Reference,
                            learn_merges, whitespace_clean)

try:
    import sentencepiece
except ImportError:
    sentencepiece = None

BUILD = pathlib.Path(os.environ.get("PREPFLOW_BUILD_DIR", "build")).resolve()
BIN = BUILD / "bin"
SPM_TRAIN = shutil.which("spm_train")

def generated_lines(rng, words, n):
    extras = ["café", "naïve", "Ünïcödé", "ΣΟΦΙΑ", "İstanbul", "漢字かな", "🙂👍🏽", "x²", "Ⅻ",
              "don't", "we're", "I'LL", "it's", "'s", "1234567", "3.14", "$5", "--", "...",
              "<|endoftext|>", "\t", "\n", "  ", "\u00a0", "\u3000", "\x1c", " \n ", "e\u0301"]
    lines = []
    for _ in range(n):
        parts = [rng.choice(words if rng.random() < 0.7 else extras)
                 for _ in range(rng.randint(1, 14))]
        lines.append(rng.choice(["", " ", "  "]).join(parts) + rng.choice(["", " ", "\n", "."]))
    return lines


def setUpModule():
    global TMP, LINES, CAPTIONS, GPT2_VOCAB, GPT2_MERGES, CLIP_MERGES
    TMP = tempfile.mkdtemp(prefix="prepflow-text-")
    licenses = pathlib.Path("/usr/share/common-licenses")
    text = "\n".join(p.read_text(errors="replace") for p in sorted(licenses.glob("*"))
                     if p.is_file())[:400000]
    rng = random.Random(7)
    words = regex.findall(r"\p{L}+", text)[:20000] or ["word"]
    LINES = [ln for ln in text.splitlines() if ln.strip()][:400] + generated_lines(rng, words, 400)
    CAPTIONS = generated_lines(rng, words, 24)
    corpus = pathlib.Path(TMP, "corpus.txt")
    corpus.write_text("\n".join(LINES), encoding="utf-8")
    # GPT-2: pre-tokens of the corpus; vocab.json holds the bytes, each new
    # merge result, and <|endoftext|>.
    merges = learn_merges(GPT2_PAT.findall("\n".join(LINES))[:30000], 300)
    vocab = {s: i for i, s in enumerate(BYTES.values())}
    for a, b in merges:
        vocab.setdefault(a + b, len(vocab))
    vocab["<|endoftext|>"] = len(vocab)
    GPT2_VOCAB, GPT2_MERGES = os.path.join(TMP, "vocab.json"), os.path.join(TMP, "merges.txt")
    pathlib.Path(GPT2_VOCAB).write_text(json.dumps(vocab), encoding="utf-8")
    pathlib.Path(GPT2_MERGES).write_text(
        "#version: 0.2\n" + "".join("%s %s\n" % m for m in merges), encoding="utf-8")
    # CLIP: pre-tokens of the cleaned, lowered text, the last symbol "</w>".
    clip_words = CLIP_PAT.findall(whitespace_clean("\n".join(LINES)).lower())[:30000]
    CLIP_MERGES = os.path.join(TMP, "clip_merges.txt")
    pathlib.Path(CLIP_MERGES).write_text(
        '"bpe_simple_vocab_16e6.txt#version: 0.2\n' +
        "".join("%s %s\n" % m for m in learn_merges(clip_words, 300, "</w>")), encoding="utf-8")


def tearDownModule():
    shutil.rmtree(TMP, ignore_errors=True)


def write_pairs(path, jpegs, captions):
    with tarfile.open(path, "w") as tar:
        for n, (jpeg, caption) in enumerate(zip(jpegs, captions)):
            members = [("jpg", jpeg), ("txt", caption.encode("utf-8")),
                       ("json", json.dumps({"caption": caption, "n": n}).encode("utf-8"))]
            for ext, data in members:
                info = tarfile.TarInfo("%06d.%s" % (n, ext))
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))


class References(unittest.TestCase):
    """The ids of every line of the corpus against each reference, one
    stage on a record field of a shard of texts."""

    @classmethod
    def setUpClass(cls):
        cls.shard = os.path.join(TMP, "lines.tar")
        with tarfile.open(cls.shard, "w") as tar:
            for n, line in enumerate(LINES):
                data = line.encode("utf-8")
                info = tarfile.TarInfo("%06d.txt" % n)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
                info = tarfile.TarInfo("%06d.cls" % n)
                info.size = 1
                tar.addfile(info, io.BytesIO(b"0"))

    def ids(self, stage):
        loader = prepflow.Loader(self.shard, pipeline={"txt": [stage]}, batch_size=50,
                                 shuffle=False, as_numpy=True)
        out = []
        for batch in loader:
            ids, lengths = batch["txt"], batch.get("txt_lengths")
            self.assertEqual(ids.dtype, np.int64)
            for i in range(len(ids)):
                out.append(ids[i][:int(lengths[i])].tolist() if lengths is not None
                           else ids[i].tolist())
        loader.close()
        self.assertEqual(len(out), len(LINES))
        return out

    def test_gpt2_bpe_is_the_reference(self):
        ref = Gpt2Reference(GPT2_VOCAB, GPT2_MERGES)
        got = self.ids(ops.Tokenize(kind="bpe", vocab=GPT2_VOCAB, merges=GPT2_MERGES))
        for line, ids in zip(LINES, got):
            self.assertEqual(ids, ref.encode(line), repr(line))

    def test_clip_bpe_is_the_reference(self):
        ref = ClipReference(CLIP_MERGES)
        got = self.ids(ops.Tokenize(kind="clip", merges=CLIP_MERGES, context_length=77,
                                    pad=True, add_bos=True, add_eos=True))
        for line, ids in zip(LINES, got):
            self.assertEqual(ids, ref.tokenize(line), repr(line))

    @unittest.skipIf(sentencepiece is None or not SPM_TRAIN, "needs spm_train and sentencepiece")
    def test_sentencepiece_is_the_library(self):
        corpus = os.path.join(TMP, "corpus.txt")
        for model_type in ("unigram", "bpe"):
            prefix = os.path.join(TMP, "spm-" + model_type)
            subprocess.run([SPM_TRAIN, "--input", corpus, "--model_prefix", prefix,
                            "--vocab_size", "600", "--model_type", model_type,
                            "--character_coverage", "1.0", "--byte_fallback", "true",
                            "--minloglevel", "2"], check=True, capture_output=True)
            sp = sentencepiece.SentencePieceProcessor(model_file=prefix + ".model")
            got = self.ids(ops.Tokenize(kind="sentencepiece", model=prefix + ".model",
                                        add_bos=True, add_eos=True, context_length=48))
            for line, ids in zip(LINES, got):
                want = [sp.bos_id()] + sp.encode(line) + [sp.eos_id()]
                if len(want) > 48:
                    want = want[:48]
                    want[-1] = sp.eos_id()
                self.assertEqual(ids, want, (model_type, line))


class ImageCaptionPairs(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        images = sorted(pathlib.Path(testdata.demo_dataset(BIN, os.path.join(TMP, "demo")))
                        .glob("*/*.jpg"))[:len(CAPTIONS)]
        cls.captions = CAPTIONS[:len(images)]
        cls.shard = os.path.join(TMP, "pairs.tar")
        write_pairs(cls.shard, [p.read_bytes() for p in images], cls.captions)
        cls.clip = ClipReference(CLIP_MERGES)

    IMAGE = [ops.Decode(), ops.RandomResizedCrop(size=32), ops.RandomHorizontalFlip(),
             ops.Normalize()]

    def pipeline(self, field="txt", **kw):
        return {"jpg": self.IMAGE,
                field: [ops.Tokenize(kind="clip", merges=CLIP_MERGES, context_length=77, pad=True,
                                     add_bos=True, add_eos=True, **kw)]}

    def run_pairs(self, pipeline, **kw):
        loader = prepflow.Loader(self.shard, pipeline=pipeline, batch_size=5, shuffle=False,
                                 seed=3, as_numpy=True, **kw)
        rows = []
        for batch in loader:
            for i, index in enumerate(batch["index"]):
                rows.append({k: batch[k][i] for k in batch if k not in ("index", "text")} |
                            {"index": index})
        stats = loader.stats()
        loader.close()
        return rows, stats

    def test_pairs_iterate_as_dicts_with_the_references_ids(self):
        loader = prepflow.Loader(self.shard, pipeline=self.pipeline(), batch_size=5,
                                 shuffle=False, seed=3)
        batch = next(iter(loader))
        # "text": each record's key.txt as a string, as transcripts are
        # given (ASCII whitespace trimmed).
        self.assertEqual(sorted(batch), ["index", "jpg", "text", "txt"])
        self.assertEqual(batch["text"], [c.strip(" \t\n\r\v\f") for c in self.captions[:5]])
        self.assertEqual(tuple(batch["txt"].shape), (5, 77))
        self.assertEqual(str(batch["txt"].dtype), "torch.int64")
        self.assertEqual(tuple(batch["jpg"].shape), (5, 3, 32, 32))
        loader.close()
        rows, _ = self.run_pairs(self.pipeline())
        self.assertEqual(len(rows), len(self.captions))
        for row in rows:
            self.assertEqual(row["txt"].tolist(), self.clip.tokenize(self.captions[row["index"]]))
        # The caption of the JSON member (LAION's "caption"): the same ids.
        from_json, _ = self.run_pairs(self.pipeline("json", json_key="caption"))
        for a, b in zip(rows, from_json):
            self.assertEqual(a["txt"].tolist(), b["json"].tolist())
        # The image field is what the image pipeline alone gives.
        alone = prepflow.Loader(self.shard, pipeline=self.IMAGE, batch_size=5, shuffle=False,
                                seed=3, as_numpy=True)
        images = [x for batch in alone for x in batch["image"]]  # a dict: the shards have text
        alone.close()
        for row, image in zip(rows, images):
            self.assertTrue(np.array_equal(row["jpg"], image), row["index"])

    def test_offloaded_at_every_cut_and_without_the_model(self):
        local, st_local = self.run_pairs(self.pipeline())
        with testdata.Worker(BIN, TMP) as worker:
            for offload in ["remote"] + ["cut=%d" % k for k in range(1, 5)]:
                remote, st = self.run_pairs(self.pipeline(), offload=offload,
                                            workers=[worker.address])
                self.assertEqual(st["checksum"], st_local["checksum"], offload)
                self.assertEqual(st["remote_images"], len(self.captions), offload)
                for a, b in zip(local, remote):
                    self.assertEqual(a["txt"].tolist(), b["txt"].tolist(), offload)
        # A worker that cannot read the merges (outside its --data-root) runs
        # the image stages; the tokenizer runs here; the same values.
        shards = os.path.join(TMP, "shards-only")
        os.makedirs(shards, exist_ok=True)
        shutil.copy(self.shard, shards)
        with testdata.Worker(BIN, shards) as worker:
            data = os.path.join(shards, "pairs.tar")
            loader = prepflow.Loader(data, pipeline=self.pipeline(), batch_size=5, shuffle=False,
                                     seed=3, offload="remote", workers=[worker.address])
            for _ in loader:
                pass
            st = loader.stats()
            loader.close()
            self.assertEqual(st["checksum"], st_local["checksum"])
            self.assertEqual(st["remote_images"], len(self.captions))

    def test_a_caption_that_cannot_be_tokenized_fails_its_sample(self):
        shard = os.path.join(TMP, "bad-pairs.tar")
        with tarfile.open(self.shard) as src:
            first = src.extractfile("000000.jpg").read()
        write_pairs(shard, [first] * 3, ["fine", "also fine", "x"])
        with tarfile.open(shard, "a") as tar:  # 000003: a caption not UTF-8
            for ext, data in (("jpg", first), ("txt", b"bad \xff byte")):
                info = tarfile.TarInfo("000003.%s" % ext)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
        loader = prepflow.Loader(shard, pipeline=self.pipeline(), batch_size=4, shuffle=False,
                                 on_error="skip", as_numpy=True)
        got = [int(i) for b in loader for i in b["index"]]
        st = loader.stats()
        loader.close()
        self.assertEqual(got, [0, 1, 2])
        self.assertIn("not UTF-8 (at byte 4)", st["first_errors"][0]["error"])

    def test_records_without_a_caption_fail_or_are_filtered(self):
        shard = os.path.join(TMP, "some-uncaptioned.tar")
        with tarfile.open(self.shard) as src:
            first = src.extractfile("000000.jpg").read()
        with tarfile.open(shard, "w") as tar:
            for n in range(6):
                members = [("jpg", first)] + ([("txt", b"caption %d" % n)] if n % 3 else [])
                for ext, data in members:
                    info = tarfile.TarInfo("%06d.%s" % (n, ext))
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
        # Without a filter each record missing its caption fails (skipped and
        # counted); with require_fields it is no sample at all.
        loader = prepflow.Loader(shard, pipeline=self.pipeline(), batch_size=4, shuffle=False,
                                 as_numpy=True, epochs=1)
        self.assertEqual([int(i) for b in loader for i in b["index"]], [1, 2, 4, 5])
        st = loader.stats()
        loader.close()
        self.assertEqual(st["errors"], 2)
        self.assertIn("has no member 'txt'", st["first_errors"][0]["error"])
        loader = prepflow.Loader(shard, pipeline=self.pipeline(), batch_size=4, shuffle=False,
                                 as_numpy=True, epochs=1, require_fields=["txt"])
        batches = list(loader)
        st = loader.stats()
        self.assertEqual(loader.samples_per_epoch, 4)
        loader.close()
        self.assertEqual(st["errors"], 0)
        self.assertEqual([len(b["index"]) for b in batches], [4])
        self.assertEqual([b["text"] for b in batches],
                         [["caption 1", "caption 2", "caption 4", "caption 5"]])


if __name__ == "__main__":
    unittest.main()
