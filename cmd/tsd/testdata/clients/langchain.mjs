// LangChain's ChatOpenAI against tsd's gateway: bindTools and
// withStructuredOutput by each method.
import { ChatOpenAI } from '@langchain/openai';
import { tool } from '@langchain/core/tools';
import { HumanMessage, AIMessage, ToolMessage } from '@langchain/core/messages';
import { z } from 'zod';
import { run, check, checkTop, recordingFetch, baseURL, apiKey, model, prompts, helloReply, toolResultReply } from './lib.mjs';

const chat = new ChatOpenAI({ model, apiKey, maxRetries: 0, timeout: 30000, configuration: { baseURL, fetch: recordingFetch } });

const getWeather = tool(async ({ city }) => `sunny in ${city}`, {
  name: 'get_weather', description: 'Current weather in a city', schema: z.object({ city: z.string() }),
});
const getTime = tool(async ({ zone }) => `noon in ${zone}`, {
  name: 'get_time', description: 'Current time in a zone', schema: z.object({ zone: z.string() }),
});
const City = z.object({ city: z.string(), population: z.number().int() });

function weatherCall(msg) {
  const calls = msg.tool_calls || [];
  check(calls.length >= 1, 'tool_calls on the AIMessage', { content: msg.content, tool_calls: calls, invalid: msg.invalid_tool_calls });
  check(calls[0].name === 'get_weather' && calls[0].args.city === 'Paris', 'get_weather({city: Paris})', calls[0]);
  return calls[0];
}

await run('langchain', [
  ['invoke_common_params', async () => {
    const tuned = new ChatOpenAI({
      model, apiKey, maxRetries: 0, timeout: 30000, configuration: { baseURL, fetch: recordingFetch },
      temperature: 0.7, topP: 0.9, maxTokens: 64, presencePenalty: 0, frequencyPenalty: 0, stop: ['\n\n'],
    });
    const msg = await tuned.invoke([['system', 'You are terse.'], ['human', prompts.hello]]);
    check(msg.content === helloReply, 'the reply', msg.content);
    return msg.usage_metadata;
  }],
  ['invoke_top_logprobs', async () => {
    const withLogprobs = new ChatOpenAI({
      model, apiKey, maxRetries: 0, timeout: 30000, configuration: { baseURL, fetch: recordingFetch }, logprobs: true, topLogprobs: 3,
    });
    const msg = await withLogprobs.invoke(prompts.hello);
    check(msg.content === helloReply, 'the reply', msg.content);
    const lp = msg.response_metadata && msg.response_metadata.logprobs;
    return checkTop(lp && lp.content, 3, 'langchain');
  }],
  ['bindTools_invoke', async () => {
    const msg = await chat.bindTools([getWeather, getTime]).invoke(prompts.weather);
    return weatherCall(msg).args;
  }],
  ['bindTools_stream', async () => {
    let acc;
    for await (const chunk of await chat.bindTools([getWeather, getTime]).stream(prompts.weather)) acc = acc ? acc.concat(chunk) : chunk;
    return weatherCall(acc).args;
  }],
  ['bindTools_tool_choice_any', async () => {
    const msg = await chat.bindTools([getWeather, getTime], { tool_choice: 'any' }).invoke(prompts.plain);
    check((msg.tool_calls || []).length >= 1, 'a tool call', { content: msg.content, invalid: msg.invalid_tool_calls });
    return msg.tool_calls.map((c) => c.name);
  }],
  // A forced call cut by maxTokens is still the call: LangChain keeps
  // one whose arguments do not parse among invalid_tool_calls, by name,
  // with finish_reason 'length', and no forced JSON as content.
  ['bindTools_tool_choice_cut', async () => {
    const short = new ChatOpenAI({ model, apiKey, maxRetries: 0, timeout: 30000, maxTokens: 4, configuration: { baseURL, fetch: recordingFetch } });
    const msg = await short.bindTools([getWeather], { tool_choice: 'any' }).invoke(prompts.plain);
    const calls = [...(msg.tool_calls || []), ...(msg.invalid_tool_calls || [])];
    check(calls.length === 1 && calls[0].name === 'get_weather', 'the cut call of get_weather', { content: msg.content, tool_calls: msg.tool_calls, invalid: msg.invalid_tool_calls });
    check(msg.response_metadata && msg.response_metadata.finish_reason === 'length', "finish_reason 'length'", msg.response_metadata);
    check(msg.content === '', 'no forced JSON as content', msg.content);
    return calls[0];
  }],
  ['bindTools_named_cut', async () => {
    const short = new ChatOpenAI({ model, apiKey, maxRetries: 0, timeout: 30000, maxTokens: 3, configuration: { baseURL, fetch: recordingFetch } });
    const msg = await short.bindTools([getWeather, getTime], { tool_choice: 'get_time' }).invoke(prompts.plain);
    const calls = [...(msg.tool_calls || []), ...(msg.invalid_tool_calls || [])];
    check(calls.length === 1 && calls[0].name === 'get_time', 'the cut call of get_time', { content: msg.content, tool_calls: msg.tool_calls, invalid: msg.invalid_tool_calls });
    check(msg.response_metadata && msg.response_metadata.finish_reason === 'length', "finish_reason 'length'", msg.response_metadata);
    return calls[0];
  }],
  ['bindTools_tool_result', async () => {
    const msg = await chat.bindTools([getWeather]).invoke([
      new HumanMessage(prompts.weather),
      new AIMessage({ content: '', tool_calls: [{ id: 'call_1', name: 'get_weather', args: { city: 'Paris' }, type: 'tool_call' }] }),
      new ToolMessage({ tool_call_id: 'call_1', content: 'sunny, 22 C' }),
    ]);
    check(msg.content === toolResultReply, 'the answer after the tool result', msg.content);
    return msg.content;
  }],
  ['responses_api_bindTools', async () => {
    // ChatOpenAI on /v1/responses (useResponsesApi), as for OpenAI's
    // built-in tools.
    const viaResponses = new ChatOpenAI({ model, apiKey, maxRetries: 0, timeout: 30000, useResponsesApi: true, configuration: { baseURL, fetch: recordingFetch } });
    const msg = await viaResponses.bindTools([getWeather, getTime]).invoke(prompts.weather);
    return weatherCall(msg).args;
  }],
  ['withStructuredOutput_functionCalling', async () => {
    const v = await chat.withStructuredOutput(City, { method: 'functionCalling', name: 'city_facts' }).invoke(prompts.city);
    check(typeof v.city === 'string' && Number.isInteger(v.population), 'an object of the schema', v);
    return v;
  }],
  ['withStructuredOutput_jsonSchema', async () => {
    const v = await chat.withStructuredOutput(City, { method: 'jsonSchema', name: 'city_facts' }).invoke(prompts.city);
    check(typeof v.city === 'string' && Number.isInteger(v.population), 'an object of the schema', v);
    return v;
  }],
  ['withStructuredOutput_jsonMode', async () => {
    const v = await chat.withStructuredOutput(City, { method: 'jsonMode', name: 'city_facts' }).invoke(prompts.city + ' Reply in JSON.');
    check(typeof v.city === 'string' && Number.isInteger(v.population), 'an object of the schema', v);
    return v;
  }],
]);
