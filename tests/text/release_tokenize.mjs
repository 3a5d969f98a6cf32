#!/usr/bin/env node
// Reference ids for the FLUX text-tower tokenizers (issue 36): tokenizes texts with a JavaScript /
// Rust implementation of Hugging Face's tokenizer.json format on the files that
// make_release_tokenizers.mjs writes, and prints one JSON array of ids per text (stdout or
// --output), in input order, for comparison with the C++ tokenize_driver.
//
//   node release_tokenize.mjs --tokenizer DIR (--input FILE | --corpus N | --text STRING ...)
//        [--engine hf-rust|hf-js|lenml-js] [--add-special-tokens]
//        [--max-length N [--truncation] [--pad-id ID] [--padding-side right|left]]
//        [--flux1-clip | --flux2-mistral] [--output FILE] [--compare ENGINE,...]
//
// DIR holds tokenizer.json and tokenizer_config.json (OUT/clip or OUT/mistral).
// --input FILE: one text per line, a JSON string or {"bytes": [...]} (tokenize_driver's format;
//   byte strings reach the engines as TextDecoder output, U+FFFD substitutions, BOM kept).
// --corpus N: the deterministic corpus of tower_corpus.mjs towerCorpus(N) (parity_corpus.mjs's
//   makeCorpus(N), 39 + N texts, then the tower-specific extras), e.g. 600.
// Engines: hf-rust = npm `tokenizers` (the Rust library transformers uses), hf-js =
//   @huggingface/tokenizers, lenml-js = @lenml/tokenizers. --compare runs several engines and
//   reports on stderr how many texts each one tokenizes differently from the first.
// Shapes like the FLUX pipelines call the tokenizers:
//   --flux1-clip     = --add-special-tokens --max-length 77 --truncation --pad-id 49407
//                      (tokenizer(prompt, padding="max_length", max_length=77, truncation=True):
//                      <|startoftext|> + at most 75 ids + <|endoftext|>, padded with
//                      <|endoftext|>, the pad token of FLUX.1's tokenizer_config.json)
//   --flux2-mistral  = --max-length 512 --truncation --pad-id 11 --padding-side left, on texts
//                      that already hold the rendered chat template (add_special_tokens off:
//                      the template writes <s> itself)
// Truncation keeps the first ids of the text (right truncation) and leaves room for the special
// tokens the post-processor adds.
import { readFileSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { join } from "node:path";
import { referenceText } from "./parity_corpus.mjs";
import { towerCorpus } from "./tower_corpus.mjs";

const require = createRequire(import.meta.url);

export async function loadEngine(name, dir) {
  const tokJson = JSON.parse(readFileSync(join(dir, "tokenizer.json"), "utf8"));
  const tokConfig = JSON.parse(readFileSync(join(dir, "tokenizer_config.json"), "utf8"));
  if (name === "hf-rust") {
    const { Tokenizer } = require("tokenizers");
    const t = Tokenizer.fromFile(join(dir, "tokenizer.json"));
    return async (text, special) => Array.from((await t.encode(text, null, { addSpecialTokens: special })).getIds());
  }
  if (name === "hf-js") {
    const { Tokenizer } = await import("@huggingface/tokenizers");
    const t = new Tokenizer(tokJson, tokConfig);
    return async (text, special) => t.encode(text, { add_special_tokens: special }).ids;
  }
  if (name === "lenml-js") {
    const { TokenizerLoader } = await import("@lenml/tokenizers");
    const t = TokenizerLoader.fromPreTrained({ tokenizerJSON: tokJson, tokenizerConfig: tokConfig });
    return async (text, special) => t.encode(text, { add_special_tokens: special });
  }
  throw new Error(`unknown engine ${name}`);
}

// The ids the post-processor puts before and after a text (from encoding the empty string).
async function specialFrame(encode) {
  const withSpecials = await encode("", true);
  const marker = "a";
  const plain = await encode(marker, false);
  const framed = await encode(marker, true);
  const at = framed.findIndex((_, i) => plain.every((x, j) => framed[i + j] === x));
  if (at < 0) throw new Error("cannot locate the text inside the post-processed ids");
  const prefix = framed.slice(0, at), suffix = framed.slice(at + plain.length);
  if (prefix.length + suffix.length !== withSpecials.length) throw new Error("post-processor frame is not constant");
  return { prefix, suffix };
}

export async function encodeShaped(encode, text, opts, frame) {
  let ids = await encode(text, false);
  if (opts.truncation && opts.maxLength != null) {
    const room = opts.maxLength - (opts.addSpecial ? frame.prefix.length + frame.suffix.length : 0);
    ids = ids.slice(0, Math.max(0, room));
  }
  if (opts.addSpecial) ids = [...frame.prefix, ...ids, ...frame.suffix];
  if (opts.padId != null && opts.maxLength != null && ids.length < opts.maxLength) {
    const pad = new Array(opts.maxLength - ids.length).fill(opts.padId);
    ids = opts.paddingSide === "left" ? [...pad, ...ids] : [...ids, ...pad];
  }
  return ids;
}

function parseArgs(argv) {
  const a = { engine: "hf-rust", addSpecial: false, maxLength: null, truncation: false, padId: null, paddingSide: "right",
    texts: [], compare: null };
  for (let i = 2; i < argv.length; i++) {
    const x = argv[i];
    if (x === "--tokenizer") a.dir = argv[++i];
    else if (x === "--input") a.input = argv[++i];
    else if (x === "--corpus") a.corpus = Number(argv[++i]);
    else if (x === "--text") a.texts.push(argv[++i]);
    else if (x === "--engine") a.engine = argv[++i];
    else if (x === "--compare") a.compare = argv[++i].split(",");
    else if (x === "--add-special-tokens") a.addSpecial = true;
    else if (x === "--max-length") a.maxLength = Number(argv[++i]);
    else if (x === "--truncation") a.truncation = true;
    else if (x === "--pad-id") a.padId = Number(argv[++i]);
    else if (x === "--padding-side") a.paddingSide = argv[++i];
    else if (x === "--output") a.output = argv[++i];
    else if (x === "--flux1-clip") Object.assign(a, { addSpecial: true, maxLength: 77, truncation: true, padId: 49407, paddingSide: "right" });
    else if (x === "--flux2-mistral") Object.assign(a, { addSpecial: false, maxLength: 512, truncation: true, padId: 11, paddingSide: "left" });
    else throw new Error(`unknown argument ${x}`);
  }
  if (!a.dir) throw new Error("--tokenizer DIR is required");
  return a;
}

function readTexts(a) {
  const texts = [...a.texts];
  if (a.input) {
    for (const line of readFileSync(a.input, "utf8").split("\n")) {
      if (!line.length) continue;
      const j = JSON.parse(line);
      texts.push(typeof j === "string" ? j : referenceText({ bytes: Uint8Array.from(j.bytes) }));
    }
  }
  if (a.corpus) for (const it of towerCorpus(a.corpus)) texts.push(referenceText(it));
  return texts;
}

async function main() {
  const a = parseArgs(process.argv);
  const texts = readTexts(a);
  const engines = a.compare || [a.engine];
  const results = [];
  for (const name of engines) {
    const encode = await loadEngine(name, a.dir);
    const frame = a.addSpecial ? await specialFrame(encode) : null;
    const ids = [];
    for (const t of texts) ids.push(await encodeShaped(encode, t, a, frame));
    results.push([name, ids]);
  }
  const [firstName, first] = results[0];
  for (const [name, ids] of results.slice(1)) {
    let diff = 0;
    for (let i = 0; i < texts.length; i++) if (JSON.stringify(ids[i]) !== JSON.stringify(first[i])) {
      if (diff < 5) process.stderr.write(`  ${name} != ${firstName} on text ${i} ${JSON.stringify(texts[i].slice(0, 80))}: ${JSON.stringify(ids[i].slice(0, 12))} vs ${JSON.stringify(first[i].slice(0, 12))}\n`);
      diff++;
    }
    process.stderr.write(`${name} vs ${firstName}: ${texts.length - diff}/${texts.length} identical\n`);
  }
  const out = first.map((ids) => JSON.stringify(ids)).join("\n") + (first.length ? "\n" : "");
  if (a.output) writeFileSync(a.output, out);
  else process.stdout.write(out);
}

main().catch((e) => {
  console.error(e.stack || String(e));
  process.exit(2);
});
