"""Reference tokenizers, written out from their published code: GPT-2's
byte-level BPE (encoder.py) and CLIP's SimpleTokenizer and tokenize()
(ftfy.fix_text and html.unescape left out, as prepflow leaves them), with
the regex module's Unicode classes; and a small byte-level BPE learner for
the merges tests and benchmarks use. Imported by tests/python/test_text.py
and bench/clip_bench.py."""
import collections
import json
import pathlib

import regex

GPT2_PAT = regex.compile(
    r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""")
CLIP_PAT = regex.compile(
    r"""<\|startoftext\|>|<\|endoftext\|>|'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|"""
    r"""[^\s\p{L}\p{N}]+""", regex.IGNORECASE)


def bytes_to_unicode():
    bs = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) +
          list(range(ord("®"), ord("ÿ") + 1)))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, [chr(c) for c in cs]))


BYTES = bytes_to_unicode()


def get_pairs(word):
    return {(a, b) for a, b in zip(word, word[1:])}


def bpe(token, ranks, end=""):
    """The reference merge loop of GPT-2's encoder.py and CLIP's
    simple_tokenizer (`end`: CLIP's "</w>" on the last symbol)."""
    word = tuple(token[:-1]) + (token[-1] + end,)
    pairs = get_pairs(word)
    if not pairs:
        return [token + end]
    while True:
        bigram = min(pairs, key=lambda p: ranks.get(p, float("inf")))
        if bigram not in ranks:
            break
        first, second = bigram
        new_word, i = [], 0
        while i < len(word):
            try:
                j = word.index(first, i)
            except ValueError:
                new_word.extend(word[i:])
                break
            new_word.extend(word[i:j])
            i = j
            if word[i] == first and i < len(word) - 1 and word[i + 1] == second:
                new_word.append(first + second)
                i += 2
            else:
                new_word.append(word[i])
                i += 1
        word = tuple(new_word)
        if len(word) == 1:
            break
        pairs = get_pairs(word)
    return list(word)


class Gpt2Reference:
    def __init__(self, vocab_path, merges_path):
        self.encoder = json.loads(pathlib.Path(vocab_path).read_text(encoding="utf-8"))
        lines = pathlib.Path(merges_path).read_text(encoding="utf-8").split("\n")[1:-1]
        self.ranks = {tuple(m.split()): i for i, m in enumerate(lines)}

    def encode(self, text):
        ids = []
        for token in GPT2_PAT.findall(text):
            token = "".join(BYTES[b] for b in token.encode("utf-8"))
            ids.extend(self.encoder[t] for t in bpe(token, self.ranks))
        return ids


def whitespace_clean(text):
    return regex.sub(r"\s+", " ", text).strip()


class ClipReference:
    """CLIP's SimpleTokenizer and tokenize(), ftfy and html.unescape left out."""

    def __init__(self, merges_path, cache=False):
        self.cache = {} if cache else None  # CLIP memoizes bpe() per word
        merges = pathlib.Path(merges_path).read_text(encoding="utf-8").split("\n")
        merges = [tuple(m.split()) for m in merges[1:49152 - 256 - 2 + 1]]
        vocab = list(BYTES.values())
        vocab = vocab + [v + "</w>" for v in vocab]
        vocab += ["".join(m) for m in merges]
        vocab.extend(["<|startoftext|>", "<|endoftext|>"])
        self.encoder = dict(zip(vocab, range(len(vocab))))
        self.ranks = dict(zip(merges, range(len(merges))))

    def encode(self, text):
        ids = []
        for token in CLIP_PAT.findall(whitespace_clean(text.strip()).lower()):
            if token in ("<|startoftext|>", "<|endoftext|>"):
                ids.append(self.encoder[token])
                continue
            token = "".join(BYTES[b] for b in token.encode("utf-8"))
            if self.cache is None:
                words = bpe(token, self.ranks, "</w>")
            else:
                words = self.cache.get(token)
                if words is None:
                    words = self.cache[token] = bpe(token, self.ranks, "</w>")
            ids.extend(self.encoder[t] for t in words)
        return ids

    def tokenize(self, text, context_length=77):
        sot, eot = self.encoder["<|startoftext|>"], self.encoder["<|endoftext|>"]
        tokens = [sot] + self.encode(text) + [eot]
        if len(tokens) > context_length:
            tokens = tokens[:context_length]
            tokens[-1] = eot
        return tokens + [0] * (context_length - len(tokens))


def learn_merges(words, count, end=""):
    """Byte-level BPE merges learned from `words` (pre-tokens, as text):
    the most frequent adjacent pair each time (ties: the smallest)."""
    corpus = collections.Counter()
    for w in words:
        symbols = [BYTES[b] for b in w.encode("utf-8")]
        symbols[-1] += end
        corpus[tuple(symbols)] += 1
    merges = []
    for _ in range(count):
        pairs = collections.Counter()
        for word, n in corpus.items():
            for pair in zip(word, word[1:]):
                pairs[pair] += n
        if not pairs:
            break
        best = max(pairs.items(), key=lambda kv: (kv[1], [-ord(c) for c in "".join(kv[0])]))[0]
        merges.append(best)
        merged = collections.Counter()
        for word, n in corpus.items():
            merged[tuple(bpe_once(word, best))] += n
        corpus = merged
    return merges


def bpe_once(word, pair):
    out, i = [], 0
    while i < len(word):
        if i + 1 < len(word) and (word[i], word[i + 1]) == pair:
            out.append(word[i] + word[i + 1])
            i += 2
        else:
            out.append(word[i])
            i += 1
    return out
