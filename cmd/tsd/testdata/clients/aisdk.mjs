// Vercel AI SDK (`ai`) against tsd's gateway: @ai-sdk/openai-compatible
// (chat completions) and @ai-sdk/openai, whose default provider speaks
// /v1/responses.
import { generateText, generateObject, streamText, tool, stepCountIs } from 'ai';
import { createOpenAICompatible } from '@ai-sdk/openai-compatible';
import { createOpenAI } from '@ai-sdk/openai';
import { z } from 'zod';
import { run, check, checkTop, recordingFetch, baseURL, apiKey, model, prompts, helloReply, toolResultReply, thinkReasoning, thinkAnswer } from './lib.mjs';

const compat = createOpenAICompatible({ name: 'tsd', baseURL, apiKey, fetch: recordingFetch, supportsStructuredOutputs: true });
// json_object instead of json_schema: what a provider without structured
// outputs sends for generateObject.
const compatJSONMode = createOpenAICompatible({ name: 'tsd', baseURL, apiKey, fetch: recordingFetch });
const openai = createOpenAI({ baseURL, apiKey, fetch: recordingFetch });

const getWeather = tool({ description: 'Current weather in a city', inputSchema: z.object({ city: z.string() }) });
const getTime = tool({ description: 'Current time in a zone', inputSchema: z.object({ zone: z.string() }) });
const tools = { get_weather: getWeather, get_time: getTime };
const citySchema = z.object({ city: z.string(), population: z.number().int() });

// streamed reports a streamText failure, which the SDK hands to onError
// instead of rejecting the stream's promises.
function streamed(opts) {
  const errors = [];
  const r = streamText({ ...opts, maxRetries: 0, onError: ({ error }) => errors.push(error) });
  return { r, failed: () => { if (errors.length) throw errors[0]; } };
}

function firstCall(r, want) {
  check(r.toolCalls && r.toolCalls.length >= 1, 'a tool call', { text: r.text, finishReason: r.finishReason });
  const c = r.toolCalls[0];
  check(c.toolName === want, 'call of ' + want, c);
  return c;
}

await run('aisdk', [
  ['generateText_tools_auto', async () => {
    const r = await generateText({ model: compat(model), tools, toolChoice: 'auto', prompt: prompts.weather, maxRetries: 0 });
    const c = firstCall(r, 'get_weather');
    check(c.input.city === 'Paris', 'input {city: Paris}', c.input);
    check(r.finishReason === 'tool-calls', "finishReason 'tool-calls'", r.finishReason);
    return c.input;
  }],
  ['generateText_tools_required', async () => {
    const r = await generateText({ model: compat(model), tools, toolChoice: 'required', prompt: prompts.plain, maxRetries: 0 });
    firstCall(r, r.toolCalls[0] && r.toolCalls[0].toolName);
    return r.toolCalls.map((c) => c.toolName);
  }],
  ['generateText_tools_named', async () => {
    const r = await generateText({ model: compat(model), tools, toolChoice: { type: 'tool', toolName: 'get_time' }, prompt: prompts.plain, maxRetries: 0 });
    const c = firstCall(r, 'get_time');
    return c.input;
  }],
  // A forced call cut by maxOutputTokens is still the call (the input it
  // got, which the SDK marks invalid) with finishReason 'length', not the
  // forced JSON as text: with one tool offered, or one named.
  ['generateText_tools_required_cut', async () => {
    const r = await generateText({ model: compat(model), tools: { get_weather: getWeather }, toolChoice: 'required', prompt: prompts.plain, maxOutputTokens: 4, maxRetries: 0 });
    const c = firstCall(r, 'get_weather');
    check(r.finishReason === 'length', "finishReason 'length'", r.finishReason);
    check(r.text === '', 'no forced JSON as text', r.text);
    return { input: c.input, invalid: c.invalid === true };
  }],
  ['generateText_tools_named_cut', async () => {
    const r = await generateText({ model: compat(model), tools, toolChoice: { type: 'tool', toolName: 'get_time' }, prompt: prompts.plain, maxOutputTokens: 3, maxRetries: 0 });
    const c = firstCall(r, 'get_time');
    check(r.finishReason === 'length', "finishReason 'length'", r.finishReason);
    check(r.text === '', 'no forced JSON as text', r.text);
    return { input: c.input, invalid: c.invalid === true };
  }],
  ['streamText_tools_required_cut', async () => {
    const { r, failed } = streamed({ model: compat(model), tools: { get_weather: getWeather }, toolChoice: 'required', prompt: prompts.plain, maxOutputTokens: 4 });
    const calls = await r.toolCalls;
    const text = await r.text;
    failed();
    check(calls.length === 1 && calls[0].toolName === 'get_weather', 'one streamed call of get_weather', calls);
    check((await r.finishReason) === 'length', "finishReason 'length'", await r.finishReason);
    check(text === '', 'no forced JSON as text', text);
    return calls[0].input;
  }],
  ['generateText_tools_two_steps', async () => {
    // The tool runs and its result goes back in the history: the second
    // step renders a tool message through the chat template.
    const r = await generateText({
      model: compat(model), prompt: prompts.weather, maxRetries: 0, stopWhen: stepCountIs(3),
      tools: { get_weather: tool({ description: 'Current weather in a city', inputSchema: z.object({ city: z.string() }), execute: async ({ city }) => ({ city, sky: 'sunny', celsius: 22 }) }) },
    });
    check(r.steps.length === 2, 'two steps (call, answer)', r.steps.map((s) => s.finishReason));
    check(r.text === toolResultReply, 'the answer after the tool result', r.text);
    return r.text;
  }],
  ['generateText_common_params', async () => {
    const r = await generateText({
      model: compat(model), system: 'You are terse.', prompt: prompts.hello, maxRetries: 0,
      temperature: 0.7, topP: 0.9, maxOutputTokens: 64, seed: 7, stopSequences: ['\n\n'], presencePenalty: 0, frequencyPenalty: 0,
    });
    check(r.text === helloReply, 'the reply', r.text);
    return r.usage;
  }],
  ['generateText_reasoning', async () => {
    // openai-compatible reads reasoning_content into reasoningText.
    const r = await generateText({ model: compat(model), prompt: prompts.think, maxRetries: 0 });
    check(r.text === thinkAnswer && r.reasoningText === thinkReasoning, 'text and reasoningText split', { text: r.text, reasoning: r.reasoningText });
    return { text: r.text, reasoning: r.reasoningText };
  }],
  ['streamText_tools', async () => {
    const { r, failed } = streamed({ model: compat(model), tools, prompt: prompts.weather });
    const calls = await r.toolCalls;
    failed();
    check(calls.length === 1 && calls[0].toolName === 'get_weather' && calls[0].input.city === 'Paris', 'one streamed call of get_weather(Paris)', calls);
    check((await r.finishReason) === 'tool-calls', "finishReason 'tool-calls'", await r.finishReason);
    return calls[0].input;
  }],
  ['generateObject', async () => {
    const r = await generateObject({ model: compat(model), schema: citySchema, prompt: prompts.city, maxRetries: 0 });
    check(typeof r.object.city === 'string', 'an object of the schema', r.object);
    return r.object;
  }],
  ['generateObject_json_mode', async () => {
    const r = await generateObject({ model: compatJSONMode(model), schema: citySchema, prompt: prompts.city, maxRetries: 0 });
    check(typeof r.object.city === 'string', 'an object of the schema', r.object);
    return r.object;
  }],
  ['chat_top_logprobs', async () => {
    // The openai provider's chat model: providerOptions logprobs N sends
    // logprobs and top_logprobs; the entries come back in providerMetadata.
    const r = await generateText({ model: openai.chat(model), prompt: prompts.hello, maxRetries: 0, providerOptions: { openai: { logprobs: 3 } } });
    check(r.text === helloReply, 'the reply', r.text);
    return checkTop(r.providerMetadata && r.providerMetadata.openai && r.providerMetadata.openai.logprobs, 3, 'chat');
  }],
  ['responses_top_logprobs', async () => {
    // The Responses model asks include message.output_text.logprobs and
    // top_logprobs; one list of entries per output_text part.
    const r = await generateText({ model: openai(model), prompt: prompts.hello, maxRetries: 0, providerOptions: { openai: { logprobs: 2 } } });
    check(r.text === helloReply, 'the reply', r.text);
    const parts = r.providerMetadata && r.providerMetadata.openai && r.providerMetadata.openai.logprobs;
    check(Array.isArray(parts) && parts.length >= 1, 'logprobs per output_text part', r.providerMetadata);
    return checkTop(parts.flat(), 2, 'responses');
  }],
  ['responses_generateText', async () => {
    const r = await generateText({ model: openai(model), prompt: prompts.hello, maxRetries: 0 });
    check(r.text === helloReply, 'the reply text', r.text);
    return r.text;
  }],
  ['responses_streamText', async () => {
    const { r, failed } = streamed({ model: openai(model), prompt: prompts.hello });
    let text = '';
    for await (const d of r.textStream) text += d;
    failed();
    check(text === helloReply, 'the streamed reply text', text);
    return text;
  }],
  ['responses_generateText_common_params', async () => {
    const r = await generateText({ model: openai(model), system: 'You are terse.', prompt: prompts.hello, maxRetries: 0, temperature: 0.7, topP: 0.9, maxOutputTokens: 64 });
    check(r.text === helloReply, 'the reply', r.text);
    return r.usage;
  }],
  ['responses_generateText_two_steps', async () => {
    const r = await generateText({
      model: openai(model), prompt: prompts.weather, maxRetries: 0, stopWhen: stepCountIs(3),
      tools: { get_weather: tool({ description: 'Current weather in a city', inputSchema: z.object({ city: z.string() }), execute: async ({ city }) => ({ city, sky: 'sunny', celsius: 22 }) }) },
    });
    check(r.steps.length === 2, 'two steps (call, answer)', r.steps.map((s) => s.finishReason));
    check(r.text === toolResultReply, 'the answer after the tool result', r.text);
    return r.text;
  }],
  ['responses_generateText_tools', async () => {
    const r = await generateText({ model: openai(model), tools, prompt: prompts.weather, maxRetries: 0 });
    const c = firstCall(r, 'get_weather');
    check(c.input.city === 'Paris', 'input {city: Paris}', c.input);
    return c.input;
  }],
]);
