// Drives the official openai npm client against our handlers. Prints one
// JSON object with what each scenario saw; the Go test asserts on it.
import { createRequire } from 'node:module';

const require = createRequire(process.env.OPENAI_DIR + '/');
const OpenAI = require('openai');
const Client = OpenAI.default || OpenAI.OpenAI || OpenAI;
const client = new Client({ baseURL: process.argv[2], apiKey: 'test-key', maxRetries: 0, timeout: 20000 });
const messages = [{ role: 'user', content: 'Say hello' }];
const out = {};

async function scenario(name, fn) {
  try {
    out[name] = await fn();
  } catch (e) {
    out[name] = { thrown: true, status: e.status, message: e.message, code: e.code, type: e.type, param: e.param, body: e.error };
  }
}

await scenario('chat', async () => {
  const r = await client.chat.completions.create({ model: 'demo', messages, max_tokens: 64 });
  return { content: r.choices[0].message.content, finish: r.choices[0].finish_reason, usage: r.usage, object: r.object };
});

await scenario('chat_stream', async () => {
  const s = await client.chat.completions.create({ model: 'demo', messages, stream: true, stream_options: { include_usage: true } });
  let content = '', finish = null, usage = null, role = null, chunks = 0;
  for await (const c of s) {
    chunks++;
    if (c.usage) usage = c.usage;
    for (const ch of c.choices) {
      if (ch.delta.role) role = ch.delta.role;
      if (ch.delta.content) content += ch.delta.content;
      if (ch.finish_reason) finish = ch.finish_reason;
    }
  }
  return { content, finish, usage, role, chunks };
});

await scenario('completion', async () => {
  const r = await client.completions.create({ model: 'demo', prompt: 'Once upon a time', max_tokens: 3 });
  return { text: r.choices[0].text, finish: r.choices[0].finish_reason, usage: r.usage };
});

await scenario('completion_stream', async () => {
  const s = await client.completions.create({ model: 'demo', prompt: 'Once upon a time', stream: true, max_tokens: 64 });
  let text = '', finish = null;
  for await (const c of s) {
    for (const ch of c.choices) {
      text += ch.text || '';
      if (ch.finish_reason) finish = ch.finish_reason;
    }
  }
  return { text, finish };
});

await scenario('n2', async () => {
  const r = await client.chat.completions.create({ model: 'demo', messages, n: 2 });
  return { contents: r.choices.map((c) => c.message.content), indexes: r.choices.map((c) => c.index) };
});

await scenario('stop', async () => {
  const r = await client.chat.completions.create({ model: 'demo', messages, stop: ['STOP', 'never'] });
  const s = await client.chat.completions.create({ model: 'demo', messages, stop: 'STOP', stream: true });
  let streamed = '';
  for await (const c of s) for (const ch of c.choices) streamed += ch.delta.content || '';
  return { content: r.choices[0].message.content, finish: r.choices[0].finish_reason, streamed };
});

await scenario('top_logprobs', async () => {
  const r = await client.chat.completions.create({ model: 'demo', messages, logprobs: true, top_logprobs: 3 });
  const entries = r.choices[0].logprobs.content;
  return { tokens: entries.length, alternatives: entries.map((e) => e.top_logprobs.length), leads: entries.every((e) => e.top_logprobs[0].token === e.token) };
});

await scenario('bad_request', async () => {
  await client.chat.completions.create({ model: 'demo', messages, logprobs: true, top_logprobs: 21 });
  return { thrown: false };
});

await scenario('bad_image', async () => {
  await client.chat.completions.create({ model: 'demo', messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'data:image/png;base64,AAAA' } }] }] });
  return { thrown: false };
});

console.log(JSON.stringify(out));
