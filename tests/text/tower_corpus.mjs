// Parity corpus for the FLUX text-tower tokenizers (CLIP-L, Mistral Small 3.1; issue 36): the
// shared deterministic corpus (parity_corpus.mjs makeCorpus) plus fixed texts aimed at what
// these two tokenizers do differently from Qwen's:
//  - CLIP lower-cases (Rust char::to_lowercase per character in tokenizers' Lowercase: no final
//    sigma, İ -> i + U+0307) and collapses \s+ to one space; its added tokens are
//    <|startoftext|> (normalized: matched after lower-casing) and <|endoftext|> (raw text only);
//  - Mistral's released pre-tokenizer regex (Llama-3 pattern) differs from tekken's own on
//    case runs inside words, combining marks and digit groups; its specials are [INST],
//    [SYSTEM_PROMPT], <pad>, [IMG], <SPECIAL_n>, ...
// Items have the shape of parity_corpus.mjs ({cat, text} or {cat, bytes}); use its driverLine /
// referenceText.
import { makeCorpus } from "./parity_corpus.mjs";

export const TOWER_EXTRAS = [
  // case runs and mixed case inside words
  "eBay iPhone NaOH McDonald's HTTPServer XMLHttpRequest pH mL iOS macOS GmbH CamelCaseWord snake_case_WORD",
  "A PHOTO OF A CAT", "a Photo Of A Cat", "a photo of a cat", "aPhOtO oF a CaT",
  "THE QUICK BROWN FOX'S TAIL, IT'S DON'T WE'LL THEY'RE I'M YOU'VE HE'D",
  // lower-casing corner cases
  "ΟΔΟΣ ΣΑΣ Σ σς", "İstanbul IĞDIR ıi", "ǅemal ǈ ǋ", "ẞ Straße STRASSE", "ﬁ ﬂ ﬃ Ⅻ ⓐⒶ", "ÀÉÎÕÜ àéîõü Ǻ", "Ꞌꞌ Ꭰ ꭰ",
  // whitespace clean-up
  "  leading and trailing  ", "tab\tseparated\twords", "many     spaces   here", "line\nbreaks\r\nand\rcarriage",
  "nbsp\u00a0ideographic\u3000em\u2003thin\u2009zwsp\u200bnel\u0085ls\u2028ps\u2029", "\x1c\x1d\x1e\x1f unit separators",
  "\t \n \r\n \f \v", "",
  // punctuation, digits, emoji in prompts
  "a cat, a dog; and a bird: (all three!) -- \"quoted\" 'single' [brackets] {braces} <angles>",
  "4k, 8K, 1920x1080, 3.14, 1,000,000, 2024-06-01, 12:30pm, #1, 100%, $5, €5, ¥5",
  "sunset 🌅 over the sea 🌊 with a 🐱 and 👩‍💻 and 🇯🇵", "&amp; &lt;b&gt; &quot;html&quot; entities",
  // CLIP specials
  "<|startoftext|>a photo<|endoftext|>", "<|STARTOFTEXT|>x<|ENDOFTEXT|>", "<|endoftext|><|endoftext|>", "<|startoftext|",
  // Mistral specials and chat-template pieces
  "<s>[SYSTEM_PROMPT]You are an AI that reasons about image descriptions.[/SYSTEM_PROMPT][INST]a photo of a cat[/INST]",
  "[INST][/INST][AVAILABLE_TOOLS][/AVAILABLE_TOOLS][TOOL_RESULTS][/TOOL_RESULTS][TOOL_CALLS]",
  "<unk><s></s><pad>[IMG][IMG_BREAK][IMG_END][PREFIX][MIDDLE][SUFFIX][TOOL_CONTENT]<SPECIAL_20><SPECIAL_999>",
  "[inst] [ INST ] [INST [SYSTEM_PROMPT [/SYSTEM_PROMPT] </s >",
  // long prompt (truncation at 77 for CLIP)
  Array.from({ length: 60 }, (_, i) => `word${i} Word${i}`).join(", "),
];

// makeCorpus(n) (39 fixed + n generated) followed by the extras: n = 500 gives 573 texts.
export function towerCorpus(n = 2400, seed = 20240601) {
  return [...makeCorpus(n, seed), ...TOWER_EXTRAS.map((text) => ({ cat: "tower", text }))];
}
