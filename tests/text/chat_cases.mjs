// Conversations for the chat-template parity check: each is one line for `tokenize_driver --chat`
// and is rendered by the real Qwen3 chat template (tokenizer_config.json) with @huggingface/jinja.
import { Template } from "@huggingface/jinja";
import { mulberry32 } from "./parity_corpus.mjs";

export function renderChat(chatTemplate, c) {
  const ctx = { messages: c.messages, add_generation_prompt: !!c.add_generation_prompt };
  if (c.enable_thinking !== undefined) ctx.enable_thinking = c.enable_thinking;
  return new Template(chatTemplate).render(ctx);
}

const USER = ["Hello!", "What is 2+2?", "写一首关于秋天的诗。", "Explain ZeRO-3 in one sentence.", "Can you fix this code?\n```py\nprint(x\n```",
  "  leading spaces and trailing  ", "Émojis 👍🏽 and ZWJ 👨‍👩‍👧 please", "Tabs\tand\r\nCRLF", "مرحبا", "<think>not really</think>",
  "Is <|im_end|> a token?", "Numbers: 1234567 3.14 1e9"];
const ANSWER = ["Hi! How can I help?", "4", "秋风起，落叶黄。", "ZeRO-3 shards parameters, gradients and optimizer states.",
  "Sure:\n```py\nprint(x)\n```", "Trailing newline\n", "👍", "Line one\nLine two", "مرحبا بك", "Done.", "It is.", "1234567"];
const THOUGHT = ["Let me think.", "The user asks a question.\nI should answer briefly.", "数学：2+2=4", "", "\nleading newline thought\n"];

// Deterministic list of conversations without tools (what SFT jsonl data holds).
export function chatCases(n = 120, seed = 7) {
  const rng = mulberry32(seed);
  const pick = (a) => a[Math.floor(rng() * a.length)];
  const cases = [
    { messages: [{ role: "system", content: "You are a helpful assistant." }, { role: "user", content: "Hi" }, { role: "assistant", content: "Hello!" }] },
    { messages: [{ role: "user", content: "Hi" }, { role: "assistant", content: "<think>\nGreeting.\n</think>\n\nHello!" }] },
    { messages: [{ role: "user", content: "Hi" }, { role: "assistant", content: "Hello!", reasoning_content: "Greeting back." }] },
    { messages: [{ role: "user", content: "a" }, { role: "assistant", content: "<think>x</think>b" }, { role: "user", content: "c" }, { role: "assistant", content: "d" }] },
    { messages: [{ role: "user", content: "a" }, { role: "assistant", content: "b" }, { role: "system", content: "mid system" }, { role: "user", content: "c" }, { role: "assistant", content: "<think>\n\nt\n\n</think>\n\n\ne" }] },
    { messages: [{ role: "system", content: "S" }, { role: "user", content: "Q" }], add_generation_prompt: true },
    { messages: [{ role: "user", content: "Q" }], add_generation_prompt: true, enable_thinking: false },
    { messages: [{ role: "user", content: "Q" }], add_generation_prompt: true, enable_thinking: true },
    { messages: [{ role: "system", content: "S" }, { role: "assistant", content: "only assistant" }] },
    { messages: [{ role: "user", content: "Q" }, { role: "assistant", content: "A", reasoning_content: "" }] },
    { messages: [{ role: "user", content: "Q" }, { role: "assistant", content: "<think>r1</think>A1" }, { role: "assistant", content: "A2" }] },
  ];
  while (cases.length < n) {
    const messages = [];
    if (rng() < 0.5) messages.push({ role: "system", content: pick(["You are Qwen.", "Answer in Chinese.", "Be brief.\nBe kind."]) });
    const turns = 1 + Math.floor(rng() * 3);
    for (let t = 0; t < turns; t++) {
      messages.push({ role: "user", content: pick(USER) });
      const r = rng();
      let content = pick(ANSWER);
      const msg = { role: "assistant", content };
      if (r < 0.3) msg.content = `<think>\n${pick(THOUGHT)}\n</think>\n\n${content}`;
      else if (r < 0.45) msg.reasoning_content = pick(THOUGHT);
      messages.push(msg);
    }
    const c = { messages };
    if (rng() < 0.2) {
      messages.push({ role: "user", content: pick(USER) });
      c.add_generation_prompt = true;
      if (rng() < 0.5) c.enable_thinking = rng() < 0.5;
    }
    cases.push(c);
  }
  return cases;
}
