// Deterministic, varied tokenizer test corpus (no randomness outside the seeded generator).
// Each item: { cat, text } for a JavaScript string, or { cat, bytes } (a Uint8Array that is
// not valid UTF-8; references see `new TextDecoder().decode(bytes)`, our driver the raw bytes).

export function mulberry32(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const ENGLISH = `the quick brown fox jumps over lazy dog tokenizer model training data shard gradient
optimizer learning rate schedule warmup checkpoint resume parity reference implementation throughput
benchmark sentence paragraph language Unicode normalization whitespace digits emoji contraction
apostrophe hyphen-ated well-known state-of-the-art e-mail co-operate naïve café résumé façade`.split(/\s+/);
const CONTRACTIONS = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE", "'VE", "'M", "'LL", "'D",
  "'Re", "'lL", "’s", "’ll", "'", "''", "'x", "'ſ", "'K"];
const WORDS_WITH = ["it", "don", "we", "they", "I", "you", "she", "John", "DON", "Can", "won", "y", "o"];
const CJK = ["你好世界", "机器学习", "分布式训练", "数据并行", "我们的模型", "这是一个测试。", "中文，标点！", "深度学习框架",
  "こんにちは", "カタカナ", "ひらがなとカタカナ", "東京都", "日本語の文章です。", "안녕하세요", "한국어 문장", "대한민국",
  "繁體中文測試", "「引號」『書名』", "（括号）【方括号】", "ｆｕｌｌｗｉｄｔｈ　ＡＢＣ１２３"];
const EMOJI = ["😀", "🤖", "🚀", "❤️", "👍", "👍🏽", "👍🏿", "👩‍💻", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🇺🇸", "🇯🇵🇨🇳", "1️⃣", "#️⃣",
  "🧑🏾‍🤝‍🧑🏻", "👁️‍🗨️", "🫠", "☺", "✌🏼", "🤷‍♀️", "💯", "🔥🔥🔥", "😂😂", "🙏🏻"];
const WS = [" ", "  ", "   ", "\t", "\t\t", "\n", "\n\n", "\r\n", "\r\n\r\n", " \n", "\n ", " \t ", "\u00a0",
  "\u3000", "\u2003", "\u2028", "\u0085", "\u200b", "\f", "\v", "    ", "\n\n\n\n", " \r\n  ", "\u202f"];
const DIGITS = ["0", "7", "42", "123", "2024", "31415926535", "1,234,567", "3.14159", "-17", "+1e-9", "0x1F",
  "١٢٣٤", "०१२३", "１２３", "½", "²", "Ⅻ", "① ②", "12:30", "2024-06-01", "99.9%", "$1,000.00", "€5"];
const CODE = [
  "def f(x):\n    return x * 2\n",
  "for (int i = 0; i < n; ++i) {\n\tsum += a[i];\n}\n",
  "#include <vector>\nstd::vector<int> v{1, 2, 3};\n",
  "{\"key\": \"value\", \"n\": [1, 2, 3], \"ok\": true}",
  "<div class=\"x\">&amp;&lt;&gt;</div>",
  "SELECT * FROM t WHERE id = 42 AND name LIKE '%abc%';",
  "if x != None and y >= 3: print(f'{x=}')",
  "  \n    \n\t\n",
  "fn main() -> Result<(), Box<dyn Error>> { Ok(()) }",
  "$ ./train --lr=3e-4 --batch-size 64 && echo done",
  "a->b; c::d; e||f; g&&h; i>>=2; j<<=3; k**2; l//m",
  "https://example.com/path?q=1&r=two#frag",
  "/* comment */ // line comment\n# python comment",
  "    indented\n        more\n    back\n",
  "x=1;y=2;z=x+y\n\n\n",
];
const COMBINING = ["e\u0301", "a\u0300\u0301", "n\u0303", "A\u030a", "\u212b", "\u2126", "K\u0323\u0307",
  "Z\u0335\u0321\u0322o\u0358\u0360", "tiếng Việt", "Tie\u0302\u0301ng Vie\u0323\u0302t", "\u1100\u1161\u11a8",
  "\u1112\u1161\u11ab\u1100\u1173\u11af", "\uf900\uf901", "\u0958", "\u0915\u093c", "ﬁ ﬂ", "ǅ", "\u0041\u0308\u0304",
  "שָׁלוֹם", "مَرْحَبًا", "\u0e01\u0e34\u0e48", "ñ", "ü", "Å", "\u00c5\u0301", "\u1e9b\u0323"];
const RTL = ["مرحبا بالعالم", "שלום עולם", "\u200fעברית\u200e English", "العربية 123 نص", "فارسی", "اردو",
  "\u202eevil\u202c", "עִברִית"];
const SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>", "<tool_call>", "</tool_call>",
  "<|fim_prefix|>", "<|vision_start|>", "<|image_pad|>", "<|im_start|>user\n", "<|im_start|>assistant\n",
  "<|im_sta", "|im_end|>", "<|im_end|", "<<|im_end|>>", "<|im_end|><|im_end|>", "<think></think>", "<|IM_END|>",
  "< |im_end| >", "<tool_response>"];
const OTHER = ["Ελληνικά", "Русский текст", "Українська", "ქართული", "Հայերեն", "हिन्दी", "বাংলা", "தமிழ்", "ไทย",
  "ລາວ", "ᠮᠣᠩᠭᠣᠯ", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢", "𝐁𝐨𝐥𝐝", "ℌ𝔢𝔩𝔩𝔬", "©®™", "→←↑↓⇒", "∀x∈ℝ: x²≥0", "—–-", "…", "«»‹›", "¿¡",
  "\u0000", "\u0001\u001f", "\u007f", "\ufeff", "\ufffd", "\u00ad", "\u2060", "\ud83d\ude00"];

function pick(rng, arr) { return arr[Math.floor(rng() * arr.length)]; }

function englishSentence(rng) {
  const n = 3 + Math.floor(rng() * 12);
  const parts = [];
  for (let i = 0; i < n; i++) {
    let w = pick(rng, ENGLISH);
    if (rng() < 0.15) w = w[0].toUpperCase() + w.slice(1);
    if (rng() < 0.05) w = w.toUpperCase();
    if (rng() < 0.12) w = pick(rng, WORDS_WITH) + pick(rng, CONTRACTIONS);
    parts.push(w);
  }
  return parts.join(" ") + pick(rng, [".", "!", "?", "", ",", ";", ":", "...", " ."]);
}

function randomCodepointText(rng, len) {
  // Assigned blocks only (so Unicode-version differences between the engines do not count).
  const ranges = [[0x20, 0x7e], [0xa0, 0x24f], [0x370, 0x3ff], [0x400, 0x4ff], [0x590, 0x5ff], [0x600, 0x6ff],
    [0x900, 0x97f], [0xe00, 0xe5b], [0x1100, 0x11ff], [0x2000, 0x206f], [0x2190, 0x22ff], [0x3040, 0x30ff],
    [0x4e00, 0x9fff], [0xac00, 0xd7a3], [0xff01, 0xff5e], [0x1f300, 0x1f64f], [0x300, 0x36f]];
  let s = "";
  for (let i = 0; i < len; i++) {
    const [lo, hi] = pick(rng, ranges);
    let cp = lo + Math.floor(rng() * (hi - lo + 1));
    if ((cp >= 0x2065 && cp <= 0x2069) || cp === 0x2064) cp = 0x2063;  // skip unassigned/odd format chars
    s += String.fromCodePoint(cp);
  }
  return s;
}

function mixed(rng) {
  const sources = [() => englishSentence(rng), () => pick(rng, CJK), () => pick(rng, EMOJI), () => pick(rng, WS),
    () => pick(rng, DIGITS), () => pick(rng, CODE), () => pick(rng, COMBINING), () => pick(rng, RTL),
    () => pick(rng, SPECIALS), () => pick(rng, OTHER), () => randomCodepointText(rng, 1 + Math.floor(rng() * 8))];
  const n = 2 + Math.floor(rng() * 10);
  let s = "";
  for (let i = 0; i < n; i++) s += pick(rng, sources)() + (rng() < 0.5 ? pick(rng, WS) : "");
  return s;
}

const enc = new TextEncoder();
function invalidBytes(rng) {
  const bad = [[0xff], [0xfe], [0x80], [0xbf], [0xc0, 0xaf], [0xc1, 0x81], [0xe0, 0x80, 0x80], [0xed, 0xa0, 0x80],
    [0xed, 0xbf, 0xbf], [0xf4, 0x90, 0x80, 0x80], [0xf5, 0x80], [0xe2, 0x82], [0xf0, 0x9f, 0x98], [0xc3],
    [0xe4, 0xbd], [0xf0, 0x9f], [0x80, 0x80, 0x80], [0xc3, 0x28], [0xe2, 0x28, 0xa1], [0xf8, 0x88, 0x80, 0x80, 0x80]];
  const parts = [];
  const n = 1 + Math.floor(rng() * 4);
  for (let i = 0; i < n; i++) {
    parts.push(enc.encode(rng() < 0.5 ? englishSentence(rng) : mixed(rng).slice(0, 40)));
    parts.push(Uint8Array.from(pick(rng, bad)));
  }
  if (rng() < 0.3) parts.push(enc.encode(pick(rng, SPECIALS)));
  const total = parts.reduce((a, p) => a + p.length, 0);
  const out = new Uint8Array(total);
  let o = 0;
  for (const p of parts) { out.set(p, o); o += p.length; }
  return out;
}

// Returns the corpus: fixed hand-written edge cases, then `n` generated items.
export function makeCorpus(n = 2400, seed = 20240601) {
  const rng = mulberry32(seed);
  const items = [];
  const fixed = ["", " ", "a", "\n", "Hello world", "Hello  world", " leading", "trailing ", "  both  ",
    "I'm can't won't they'll we've she'd it's", "IT'S DON'T", "it’s", "don't'", "''''", "1234567890",
    "a\r\nb\r\n\r\nc", "\t\tindented", "x\u0085y", "x\u00a0y", "x\u3000y", "\u2028\u2029", "<|im_start|>",
    "<|im_start|><|im_end|>", "text<|endoftext|>text", " <|im_end|> ", "<think>\nreasoning\n</think>\n\nanswer",
    "a".repeat(5000), "ab".repeat(3000), "9".repeat(4000), " ".repeat(3000), "\n".repeat(1000),
    "x" + " ".repeat(200) + "y", "😀".repeat(500), "你".repeat(2000), "e\u0301".repeat(300),
    "Supercalifragilisticexpialidocious".repeat(50), "https://" + "a/".repeat(800), "\u212b\u2126\u212a", "ﬃ"];
  for (const t of fixed) items.push({ cat: "fixed", text: t });
  const gens = [
    ["english", () => englishSentence(rng) + (rng() < 0.5 ? " " + englishSentence(rng) : "")],
    ["cjk", () => Array.from({ length: 1 + Math.floor(rng() * 4) }, () => pick(rng, CJK)).join(rng() < 0.5 ? "" : " ")],
    ["emoji", () => Array.from({ length: 1 + Math.floor(rng() * 6) }, () => pick(rng, EMOJI) + (rng() < 0.3 ? " " : "")).join("")],
    ["whitespace", () => Array.from({ length: 2 + Math.floor(rng() * 6) }, () => pick(rng, WS) + (rng() < 0.5 ? pick(rng, ENGLISH) : "")).join("")],
    ["digits", () => Array.from({ length: 1 + Math.floor(rng() * 5) }, () => pick(rng, DIGITS)).join(rng() < 0.5 ? " " : "")],
    ["code", () => pick(rng, CODE) + (rng() < 0.5 ? pick(rng, CODE) : "")],
    ["combining", () => Array.from({ length: 1 + Math.floor(rng() * 4) }, () => pick(rng, COMBINING)).join(rng() < 0.5 ? " " : "")],
    ["rtl", () => pick(rng, RTL) + " " + (rng() < 0.5 ? englishSentence(rng) : pick(rng, RTL))],
    ["specials", () => englishSentence(rng) + pick(rng, SPECIALS) + (rng() < 0.5 ? pick(rng, WS) : "") + pick(rng, SPECIALS) + englishSentence(rng)],
    ["other", () => Array.from({ length: 1 + Math.floor(rng() * 4) }, () => pick(rng, OTHER)).join(" ")],
    ["random_cp", () => randomCodepointText(rng, 1 + Math.floor(rng() * 40))],
    ["long_word", () => Array.from({ length: 200 + Math.floor(rng() * 2000) }, () => String.fromCharCode(97 + Math.floor(rng() * 26))).join("")],
    ["mixed", () => mixed(rng)],
    ["invalid_utf8", null],
  ];
  for (let i = 0; i < n; i++) {
    const [cat, gen] = gens[i % gens.length];
    if (cat === "invalid_utf8") items.push({ cat, bytes: invalidBytes(rng) });
    else items.push({ cat, text: gen() });
  }
  return items;
}

// What a reference tokenizer (which takes JavaScript strings) is given for an item: the bytes
// decoded with U+FFFD substitutions, keeping a leading BOM as Python's 'utf-8' codec does.
export function referenceText(item) {
  return item.bytes ? new TextDecoder("utf-8", { ignoreBOM: true }).decode(item.bytes) : item.text;
}

// One driver input line.
export function driverLine(item) {
  return item.bytes ? JSON.stringify({ bytes: Array.from(item.bytes) }) : JSON.stringify(item.text);
}

// Index of the first token where id lists a and b differ, or -1 when they are equal.
export function firstDiff(a, b) {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) if (a[i] !== b[i]) return i;
  return a.length === b.length ? -1 : n;
}

// A text for a log line: JSON-quoted, cut at n characters.
export const show = (s, n = 160) => JSON.stringify(s.length > n ? s.slice(0, n) + "…" : s);

// Our ids (ours[i] for corpus[i]) against each reference's encode(text, special): one line per
// reference, tagged strict or informational, with up to 4 differing texts. Returns
// {reference name: mismatches}.
export async function compareWithReferences(corpus, ours, refs, strict, special) {
  const mismatches = {};
  for (const [name, ref] of Object.entries(refs)) {
    const bad = [];
    for (let i = 0; i < corpus.length; i++) {
      const ids = await ref.encode(referenceText(corpus[i]), special);
      if (firstDiff(ours[i], ids) >= 0) bad.push([i, ids]);
    }
    const badCats = {};
    for (const [i] of bad) badCats[corpus[i].cat] = (badCats[corpus[i].cat] || 0) + 1;
    const tag = strict.has(name) ? "strict" : "informational";
    console.log(`${name} (${tag}, add_special_tokens=${special}): ${corpus.length - bad.length}/${corpus.length} identical, ${bad.length} mismatches ${bad.length ? JSON.stringify(badCats) : ""}`);
    for (const [i, ids] of bad.slice(0, 4)) {
      const d = firstDiff(ours[i], ids);
      console.log(`  text ${i} [${corpus[i].cat}] ${show(referenceText(corpus[i]))}\n    first difference at token ${d}: ours ${JSON.stringify(ours[i].slice(d, d + 6))} vs ${name} ${JSON.stringify(ids.slice(d, d + 6))}`);
    }
    mismatches[name] = bad.length;
  }
  return mismatches;
}
