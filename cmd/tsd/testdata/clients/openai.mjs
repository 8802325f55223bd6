// The official openai npm client against tsd's gateway. TSD_OPENAI_PKG
// picks the installed copy: "openai" (latest), or "openai4", "openai5",
// "openai6" (the last of each major, npm aliases in package.json).
import { run, check, checkTop, recordingFetch, baseURL, apiKey, model, prompts, helloReply, toolResultReply, thinkReasoning, thinkAnswer, weatherParams, timeParams, citySchema } from './lib.mjs';

const pkg = process.env.TSD_OPENAI_PKG || 'openai';
const { default: OpenAI } = await import(pkg);
const client = new OpenAI({ baseURL, apiKey, fetch: recordingFetch, maxRetries: 0, timeout: 30000 });

const tools = [
  { type: 'function', function: { name: 'get_weather', description: 'Current weather in a city', parameters: weatherParams } },
  { type: 'function', function: { name: 'get_time', description: 'Current time in a zone', parameters: timeParams } },
];

function oneCall(calls, want) {
  check(Array.isArray(calls) && calls.length >= 1, 'tool_calls present', calls);
  const c = calls[0];
  check(c.type === 'function' && typeof c.id === 'string' && c.id.length > 0, 'call has type function and an id', c);
  check(c.function.name === want, 'call names ' + want, c);
  const args = JSON.parse(c.function.arguments);
  return { c, args };
}

await run(pkg, [
  ['chat_tools', async () => {
    const r = await client.chat.completions.create({ model, messages: [{ role: 'user', content: prompts.weather }], tools });
    const ch = r.choices[0];
    check(ch.finish_reason === 'tool_calls', 'finish_reason tool_calls', ch);
    const { args } = oneCall(ch.message.tool_calls, 'get_weather');
    check(args.city === 'Paris', 'arguments {city: Paris}', args);
    check(!ch.message.content || !ch.message.content.includes('<tool_call>'), 'no markup left in content', ch.message.content);
    return args;
  }],
  ['chat_tools_stream', async () => {
    const stream = await client.chat.completions.create({
      model, messages: [{ role: 'user', content: prompts.weather }], tools, stream: true, stream_options: { include_usage: true },
    });
    const calls = [];
    let finish = null, content = '', usage = null;
    for await (const chunk of stream) {
      if (chunk.usage) usage = chunk.usage;
      for (const ch of chunk.choices || []) {
        if (ch.finish_reason) finish = ch.finish_reason;
        if (ch.delta && ch.delta.content) content += ch.delta.content;
        for (const d of (ch.delta && ch.delta.tool_calls) || []) {
          const c = (calls[d.index] ??= { id: '', type: 'function', function: { name: '', arguments: '' } });
          if (d.id) c.id = d.id;
          if (d.function && d.function.name) c.function.name += d.function.name;
          if (d.function && d.function.arguments) c.function.arguments += d.function.arguments;
        }
      }
    }
    check(finish === 'tool_calls', 'finish_reason tool_calls', { finish, content });
    const { args } = oneCall(calls, 'get_weather');
    check(args.city === 'Paris', 'arguments {city: Paris}', args);
    check(!content.includes('<tool_call>'), 'no markup streamed as content', content);
    check(usage && usage.completion_tokens > 0, 'usage chunk', usage);
    return { calls: calls.length, args };
  }],
  ['chat_tool_choice_required', async () => {
    const r = await client.chat.completions.create({ model, messages: [{ role: 'user', content: prompts.plain }], tools, tool_choice: 'required' });
    const ch = r.choices[0];
    check(ch.finish_reason === 'tool_calls', 'finish_reason tool_calls', ch);
    check(ch.message.tool_calls && ch.message.tool_calls.length >= 1, 'a tool call', ch.message);
    return ch.message.tool_calls.map((c) => c.function.name);
  }],
  ['chat_tool_choice_named', async () => {
    const r = await client.chat.completions.create({
      model, messages: [{ role: 'user', content: prompts.plain }], tools, tool_choice: { type: 'function', function: { name: 'get_time' } },
    });
    const ch = r.choices[0];
    const { args } = oneCall(ch.message.tool_calls, 'get_time');
    check(typeof args.zone === 'string', 'arguments match get_time', args);
    return args;
  }],
  ['chat_tool_result', async () => {
    const r = await client.chat.completions.create({
      model, tools,
      messages: [
        { role: 'user', content: prompts.weather },
        { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } }] },
        { role: 'tool', tool_call_id: 'call_1', content: '{"sky":"sunny","celsius":22}' },
      ],
    });
    const ch = r.choices[0];
    check(ch.finish_reason === 'stop' && ch.message.content === toolResultReply, 'the answer after the tool result', ch);
    return ch.message.content;
  }],
  ['response_format_json_schema', async () => {
    const r = await client.chat.completions.create({
      model, messages: [{ role: 'user', content: prompts.city }],
      response_format: { type: 'json_schema', json_schema: { name: 'city', strict: true, schema: citySchema } },
    });
    const v = JSON.parse(r.choices[0].message.content);
    check(typeof v.city === 'string' && Number.isInteger(v.population), 'an instance of the schema', v);
    return v;
  }],
  ['response_format_json_object', async () => {
    const r = await client.chat.completions.create({
      model, messages: [{ role: 'user', content: prompts.city + ' Reply in JSON.' }], response_format: { type: 'json_object' },
    });
    const v = JSON.parse(r.choices[0].message.content);
    check(v && typeof v === 'object' && !Array.isArray(v), 'a JSON object', v);
    return v;
  }],
  ['chat_common_params', async () => {
    // What applications commonly set besides the messages: each must be
    // accepted (not refused as unknown) and honoured.
    const r = await client.chat.completions.create({
      model, messages: [{ role: 'system', content: 'You are terse.' }, { role: 'user', content: prompts.hello }],
      temperature: 0.7, top_p: 0.9, max_completion_tokens: 64, seed: 7, stop: ['\n\n'], user: 'client-e2e',
      presence_penalty: 0, frequency_penalty: 0, n: 1, tools, tool_choice: 'auto', parallel_tool_calls: false,
    });
    check(r.choices[0].message.content === helloReply, 'the reply', r.choices[0]);
    return r.usage;
  }],
  ['chat_reasoning', async () => {
    // The <think> block goes to reasoning_content, not content.
    const r = await client.chat.completions.create({ model, messages: [{ role: 'user', content: prompts.think }] });
    const m = r.choices[0].message;
    check(m.content === thinkAnswer && m.reasoning_content === thinkReasoning, 'content and reasoning_content split', m);
    return m;
  }],
  ['chat_top_logprobs', async () => {
    const r = await client.chat.completions.create({ model, messages: [{ role: 'user', content: prompts.hello }], logprobs: true, top_logprobs: 3 });
    check(r.choices[0].message.content === helloReply, 'the reply', r.choices[0]);
    return checkTop(r.choices[0].logprobs.content, 3, 'chat');
  }],
  ['chat_top_logprobs_stream', async () => {
    const stream = await client.chat.completions.create({ model, messages: [{ role: 'user', content: prompts.hello }], logprobs: true, top_logprobs: 2, stream: true });
    const entries = [];
    let text = '';
    for await (const chunk of stream) {
      for (const ch of chunk.choices || []) {
        if (ch.delta && ch.delta.content) text += ch.delta.content;
        if (ch.logprobs && ch.logprobs.content) entries.push(...ch.logprobs.content);
      }
    }
    check(text === helloReply, 'the streamed reply', text);
    return checkTop(entries, 2, 'chat stream');
  }],
  ['completions_logprobs', async () => {
    const r = await client.completions.create({ model, prompt: prompts.hello, max_tokens: 6, logprobs: 2 });
    const lp = r.choices[0].logprobs;
    check(lp && lp.tokens.length > 0 && lp.top_logprobs.length === lp.tokens.length, 'tokens and top_logprobs', lp);
    lp.top_logprobs.forEach((m, i) => {
      check(m && Object.keys(m).length >= 2 && m[lp.tokens[i]] === lp.token_logprobs[i], 'the top 2 and the sampled token', { token: lp.tokens[i], top: m });
    });
    return { tokens: lp.tokens.length, first: lp.top_logprobs[0] };
  }],
  ['responses_top_logprobs', async () => {
    const r = await client.responses.create({ model, input: prompts.hello, include: ['message.output_text.logprobs'], top_logprobs: 2 });
    const msg = (r.output || []).find((o) => o.type === 'message');
    check(msg && r.output_text === helloReply, 'the reply', r.output);
    return checkTop(msg.content[0].logprobs, 2, 'responses');
  }],
  ['responses_create', async () => {
    const r = await client.responses.create({ model, input: prompts.hello });
    check(r.object === 'response' && r.status === 'completed', 'a completed response', r);
    check(r.output_text === helloReply, 'output_text', r.output_text);
    return { id: r.id, text: r.output_text };
  }],
  ['responses_stream', async () => {
    const stream = await client.responses.create({ model, input: prompts.hello, stream: true });
    const types = new Set();
    let text = '', done = null;
    for await (const ev of stream) {
      types.add(ev.type);
      if (ev.type === 'response.output_text.delta') text += ev.delta;
      if (ev.type === 'response.completed') done = ev.response;
    }
    check(types.has('response.created'), 'a response.created event', [...types]);
    check(text === helloReply, 'deltas spell the reply', text);
    check(done && done.status === 'completed', 'response.completed', done);
    return [...types];
  }],
  ['responses_tools', async () => {
    const r = await client.responses.create({
      model, input: prompts.weather,
      tools: [{ type: 'function', name: 'get_weather', description: 'Current weather in a city', parameters: weatherParams, strict: true }],
    });
    const call = (r.output || []).find((o) => o.type === 'function_call');
    check(call && call.name === 'get_weather', 'a function_call output item', r.output);
    check(JSON.parse(call.arguments).city === 'Paris', 'arguments {city: Paris}', call);
    return call.arguments;
  }],
  ['responses_common_params', async () => {
    const r = await client.responses.create({
      model, instructions: 'You are terse.', input: [{ role: 'user', content: prompts.hello }],
      temperature: 0.7, top_p: 0.9, max_output_tokens: 64, store: true,
    });
    check(r.status === 'completed' && r.output_text === helloReply, 'the reply', r);
    return r.usage;
  }],
  ['responses_tool_result', async () => {
    // A function_call and its output in the input: rendered as a tool
    // turn, answered from it.
    const r = await client.responses.create({
      model,
      tools: [{ type: 'function', name: 'get_weather', description: 'Current weather in a city', parameters: weatherParams, strict: true }],
      input: [
        { role: 'user', content: prompts.weather },
        { type: 'function_call', call_id: 'call_1', name: 'get_weather', arguments: '{"city":"Paris"}' },
        { type: 'function_call_output', call_id: 'call_1', output: '{"sky":"sunny","celsius":22}' },
      ],
    });
    check(r.status === 'completed' && r.output_text === toolResultReply, 'the answer after the tool result', r);
    return r.output_text;
  }],
  ['responses_previous_id', async () => {
    const first = await client.responses.create({ model, input: prompts.hello });
    const r = await client.responses.create({ model, input: prompts.hello, previous_response_id: first.id });
    check(r.status === 'completed' && r.previous_response_id === first.id && r.output_text === helloReply, 'chained on the first response', r);
    // The first exchange is part of the second prompt.
    check(r.usage.input_tokens > first.usage.input_tokens + first.usage.output_tokens, 'the history in the prompt', { first: first.usage, second: r.usage });
    return { first: first.usage, second: r.usage };
  }],
]);
