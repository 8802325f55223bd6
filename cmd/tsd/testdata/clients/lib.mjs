// Shared by the client scripts: the scenario runner and a fetch that
// records which request fields a client sends (so the gateway's
// admission table can be checked against what real clients send).
//
// Env: TSD_BASE_URL (e.g. http://127.0.0.1:8000/v1), TSD_API_KEY,
// TSD_MODEL, TSD_ONLY (a comma list of scenario names to run; empty:
// all). Output: one JSON line per scenario on stdout,
// {name, ok, detail, ms, fields}, where fields maps each route the
// scenario called ("POST /v1/chat/completions") to every request-body
// key path it sent there ("messages[].role", ...), JSON schemas left out
// (their keys are the user's, not the client's).

export const baseURL = process.env.TSD_BASE_URL;
export const apiKey = process.env.TSD_API_KEY || 'test-key';
export const model = process.env.TSD_MODEL || 'qwen3-demo';
const only = (process.env.TSD_ONLY || '').split(',').filter(Boolean);

if (!baseURL) {
  console.error('TSD_BASE_URL is not set');
  process.exit(2);
}

let fields = new Map(); // route → Set of key paths

// Subtrees whose keys are user data (JSON schemas, tool arguments, the
// user's metadata), not fields the client library chose.
const opaque = new Set(['parameters', 'schema', 'properties', 'input_schema', 'metadata', 'arguments', '$defs', 'definitions', 'items']);

function walk(set, v, path, depth) {
  if (depth > 6 || v === null || typeof v !== 'object') return;
  if (Array.isArray(v)) {
    for (const x of v) walk(set, x, path + '[]', depth + 1);
    return;
  }
  for (const [k, x] of Object.entries(v)) {
    const p = path ? path + '.' + k : k;
    set.add(p);
    if (!opaque.has(k)) walk(set, x, p, depth + 1);
  }
}

// recordingFetch is handed to every client as its fetch.
export async function recordingFetch(input, init) {
  try {
    const url = typeof input === 'string' ? input : input instanceof URL ? input.href : input.url;
    const method = (init && init.method) || (typeof input === 'object' && input.method) || 'GET';
    const route = method + ' ' + new URL(url).pathname;
    if (!fields.has(route)) fields.set(route, new Set());
    const body = init && init.body;
    if (typeof body === 'string' && body.startsWith('{')) walk(fields.get(route), JSON.parse(body), '', 0);
  } catch {
    // recording is best effort; the request goes out regardless
  }
  return fetch(input, init);
}

export class Fail extends Error {}

// check throws a Fail naming what was expected and what came back.
export function check(cond, what, got) {
  if (!cond) throw new Fail(what + '; got ' + JSON.stringify(got));
}

// describe renders a client error with whatever the library attached:
// its class, HTTP status, the server's error body.
function describe(e) {
  const parts = [(e && e.constructor && e.constructor.name) || 'Error', String((e && e.message) || e)];
  if (e && e.status) parts.push('status ' + e.status);
  if (e && e.statusCode) parts.push('status ' + e.statusCode);
  if (e && e.responseBody) parts.push('body ' + String(e.responseBody).slice(0, 600));
  if (e && e.error && typeof e.error === 'object') parts.push('error ' + JSON.stringify(e.error).slice(0, 600));
  if (e && e.cause && e.cause !== e) parts.push('cause ' + describe(e.cause));
  if (e && e.text && typeof e.text === 'string') parts.push('text ' + e.text.slice(0, 300));
  return parts.join(': ');
}

// run runs each [name, fn] in order (one at a time: their field records
// must not mix) and prints one line per scenario.
export async function run(prefix, scenarios) {
  for (const [name, fn] of scenarios) {
    if (only.length && !only.includes(name)) continue;
    fields = new Map();
    const line = { name, ok: false, detail: '' };
    const t0 = Date.now();
    try {
      const detail = await fn();
      line.ok = true;
      line.detail = typeof detail === 'string' ? detail : JSON.stringify(detail ?? null);
    } catch (e) {
      line.detail = describe(e);
    }
    line.ms = Date.now() - t0;
    line.fields = Object.fromEntries([...fields].map(([r, f]) => [r, [...f].sort()]));
    process.stdout.write(JSON.stringify(line) + '\n');
  }
}

// The tool every scenario offers, as JSON schema.
export const weatherParams = {
  type: 'object',
  properties: { city: { type: 'string', description: 'the city name' } },
  required: ['city'],
  additionalProperties: false,
};
export const timeParams = {
  type: 'object',
  properties: { zone: { type: 'string' } },
  required: ['zone'],
  additionalProperties: false,
};
export const citySchema = {
  type: 'object',
  properties: { city: { type: 'string' }, population: { type: 'integer' } },
  required: ['city', 'population'],
  additionalProperties: false,
};

// Prompts the ts-fake reply rules (clients_e2e_test.go) key on.
export const prompts = {
  weather: 'What is the weather in Paris?',
  hello: 'Say hello.',
  city: 'Describe a city as JSON.',
  plain: 'Tell me something.',
  think: 'Think first: which city is the capital of France?',
};
export const helloReply = 'Hello from tsd.';

// checkTop checks logprob entries in OpenAI's chat / Responses shape
// ({token, logprob, top_logprobs: [{token, logprob}]}): every token has k
// alternatives, most likely first, and ts-fake's sampled token leads them.
export function checkTop(entries, k, what) {
  check(Array.isArray(entries) && entries.length > 0, what + ': logprob entries', entries);
  for (const e of entries) {
    const alts = e.top_logprobs || e.topLogprobs;
    check(Array.isArray(alts) && alts.length === k, what + ': ' + k + ' alternatives per token', e);
    check(alts[0].token === e.token && alts[0].logprob === e.logprob, what + ': the sampled token leads', e);
    for (let j = 1; j < k; j++) check(alts[j].logprob <= alts[j - 1].logprob, what + ': alternatives most likely first', alts);
  }
  return { tokens: entries.length, first: entries[0] };
}
export const toolResultReply = 'It is sunny in Paris.';
// The think rule's reply, split by the reasoning parser.
export const thinkReasoning = 'The capital of France is Paris.';
export const thinkAnswer = 'Paris.';
