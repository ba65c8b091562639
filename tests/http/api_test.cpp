// Request parsing and validation, error bodies, response and SSE formatting.
#include "http/api.h"

#include "grammar/grammar.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace skippy::http {
namespace {

using json = nlohmann::json;

request_limits limits() {
    request_limits l;
    l.ctx_size = 256;
    l.n_vocab = 512;
    return l;
}

// Parses `body` as a chat request and returns the error (fails the test if none).
api_error chat_error(const std::string & body) {
    completion_request r;
    auto e = parse_request(body, endpoint::chat_completions, limits(), r);
    EXPECT_TRUE(e.has_value()) << "accepted: " << body;
    return e.value_or(api_error{});
}

api_error completion_error(const std::string & body) {
    completion_request r;
    auto e = parse_request(body, endpoint::completions, limits(), r);
    EXPECT_TRUE(e.has_value()) << "accepted: " << body;
    return e.value_or(api_error{});
}

completion_request chat_ok(const std::string & body) {
    completion_request r;
    auto e = parse_request(body, endpoint::chat_completions, limits(), r);
    EXPECT_FALSE(e.has_value()) << body << " -> " << (e ? e->message : "");
    return r;
}

completion_request completion_ok(const std::string & body) {
    completion_request r;
    auto e = parse_request(body, endpoint::completions, limits(), r);
    EXPECT_FALSE(e.has_value()) << body << " -> " << (e ? e->message : "");
    return r;
}

const std::string k_msgs = R"("messages":[{"role":"user","content":"hi"}])";

TEST(ErrorBody, HasTheOpenAiShapeWithNullsForMissingParamAndCode) {
    api_error e;
    e.message = "bad thing";
    const json j = json::parse(error_body(e));
    ASSERT_TRUE(j.contains("error"));
    EXPECT_EQ(j["error"]["message"], "bad thing");
    EXPECT_EQ(j["error"]["type"], "invalid_request_error");
    EXPECT_TRUE(j["error"]["param"].is_null());
    EXPECT_TRUE(j["error"]["code"].is_null());
    e.param = "temperature";
    e.code = "invalid_value";
    const json k = json::parse(error_body(e));
    EXPECT_EQ(k["error"]["param"], "temperature");
    EXPECT_EQ(k["error"]["code"], "invalid_value");
}

TEST(ErrorBody, StatusesGetTheirTypes) {
    EXPECT_EQ(error_for_status(404, "x").type, "invalid_request_error");
    EXPECT_EQ(error_for_status(413, "x").code, "request_too_large");
    EXPECT_EQ(error_for_status(429, "x").type, "rate_limit_error");
    EXPECT_EQ(error_for_status(503, "x").type, "server_error");
    EXPECT_EQ(error_for_status(500, "x").type, "server_error");
    EXPECT_EQ(error_for_status(405, "x").http_status, 405);
    EXPECT_EQ(error_for_status(504, "x").code, "stage_timeout");
}

TEST(ErrorBody, PipelineFailuresAreDecidedByCode) {
    // The text says "timed out" in both; only the code counts.
    const api_error slow = error_for_pipeline_failure(make_error(error_code::timed_out, "stage 2 (h:1) timed out"));
    EXPECT_EQ(slow.http_status, 504);
    EXPECT_EQ(slow.type, "server_error");
    EXPECT_EQ(slow.code, "stage_timeout");
    EXPECT_EQ(slow.message, "stage 2 (h:1) timed out");
    for (error_code c : {error_code::peer_closed, error_code::unavailable, error_code::runtime, error_code::invalid_data}) {
        const api_error e = error_for_pipeline_failure(make_error(c, "stage 1: timed out reading"));
        EXPECT_EQ(e.http_status, 500) << error_code_name(c);
        EXPECT_EQ(e.type, "server_error");
        EXPECT_EQ(e.code, "");
    }
}

TEST(ParseRequest, MalformedJsonAndNonObjectsAre400) {
    for (const char * body : {"", "{", "{\"messages\": [}", "nul", "[1,2]", "\"text\"", "42", "{\"a\":1}garbage"}) {
        const api_error e = chat_error(body);
        EXPECT_EQ(e.http_status, 400) << body;
        EXPECT_EQ(e.type, "invalid_request_error");
    }
    // Invalid UTF-8 inside a JSON string is malformed JSON.
    EXPECT_EQ(chat_error("{\"messages\":[{\"role\":\"user\",\"content\":\"\xff\"}]}").code, "invalid_json");
}

TEST(ParseRequest, DeeplyNestedJsonIsRefusedWithoutCrashing) {
    const std::string deep = std::string(100000, '[') + std::string(100000, ']');
    EXPECT_EQ(chat_error(deep).http_status, 400);
}

TEST(ParseRequest, ChatMessagesAreValidated) {
    EXPECT_EQ(chat_error("{}").param, "messages");
    EXPECT_EQ(chat_error(R"({"messages":[]})").param, "messages");
    EXPECT_EQ(chat_error(R"({"messages":"hi"})").param, "messages");
    EXPECT_EQ(chat_error(R"({"messages":[42]})").param, "messages[0]");
    EXPECT_EQ(chat_error(R"({"messages":[{"content":"x"}]})").param, "messages[0].role");
    EXPECT_EQ(chat_error(R"({"messages":[{"role":"wizard","content":"x"}]})").param, "messages[0].role");
    EXPECT_EQ(chat_error(R"({"messages":[{"role":"function","content":"x"}]})").code, "unsupported_parameter");
    EXPECT_EQ(chat_error(R"({"messages":[{"role":"user"}]})").param, "messages[0].content");
    EXPECT_EQ(chat_error(R"({"messages":[{"role":"user","content":5}]})").param, "messages[0].content");
    EXPECT_EQ(chat_error(R"({"messages":[{"role":"user","content":[{"type":"image_url","image_url":{}}]}]})").param,
              "messages[0].content[0].type");
}

TEST(ParseRequest, ChatMessagesAreNormalised) {
    const completion_request r = chat_ok(R"({"messages":[
        {"role":"developer","content":"be brief"},
        {"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]},
        {"role":"assistant","content":null},
        {"role":"user","content":"c","name":"bob"}]})");
    ASSERT_EQ(r.messages.size(), 4u);
    EXPECT_EQ(r.messages[0].role, "system");
    EXPECT_EQ(r.messages[1].content, "a\nb");
    EXPECT_EQ(r.messages[2].role, "assistant");
    EXPECT_EQ(r.messages[2].content, "");
    EXPECT_EQ(r.messages[3].content, "c");
    EXPECT_EQ(r.kind, endpoint::chat_completions);
}

TEST(ParseRequest, DefaultsFollowOpenAiWhereItHasOneElseLlamaCpp) {
    const completion_request chat = chat_ok("{" + k_msgs + "}");
    EXPECT_FALSE(chat.max_tokens.has_value());  // chat: until the context is full
    EXPECT_FALSE(chat.stream);
    EXPECT_FALSE(chat.seed_given);
    EXPECT_TRUE(chat.stop.empty());
    EXPECT_EQ(chat.sampling.top_k, sampling_config{}.top_k);
    const completion_request comp = completion_ok(R"({"prompt":"x"})");
    EXPECT_EQ(comp.max_tokens, 16);  // OpenAI's default for /v1/completions
}

TEST(ParseRequest, SamplingFieldsAreRead) {
    const completion_request r = chat_ok("{" + k_msgs + R"(, "model":"m", "max_tokens":7, "temperature":0,
        "top_p":0.5, "top_k":3, "min_p":0.1, "presence_penalty":0.5, "frequency_penalty":-0.5,
        "repetition_penalty":1.1, "seed":42, "stop":["a","bb"], "stream":true,
        "stream_options":{"include_usage":true}, "prompt_cache_key":"tenant-a", "n":1,
        "logit_bias":{"5":-100,"7":2.5}, "user":"ignored", "unknown_field":{"x":1}})");
    EXPECT_EQ(r.model, "m");
    EXPECT_EQ(r.max_tokens, 7);
    EXPECT_EQ(r.sampling.temperature, 0.0f);
    EXPECT_TRUE(r.sampling.greedy());
    EXPECT_FLOAT_EQ(r.sampling.top_p, 0.5f);
    EXPECT_EQ(r.sampling.top_k, 3);
    EXPECT_FLOAT_EQ(r.sampling.min_p, 0.1f);
    EXPECT_FLOAT_EQ(r.sampling.presence_penalty, 0.5f);
    EXPECT_FLOAT_EQ(r.sampling.frequency_penalty, -0.5f);
    EXPECT_FLOAT_EQ(r.sampling.repeat_penalty, 1.1f);
    EXPECT_EQ(r.sampling.seed, 42u);
    EXPECT_TRUE(r.seed_given);
    EXPECT_EQ(r.stop, (std::vector<std::string>{"a", "bb"}));
    EXPECT_TRUE(r.stream);
    EXPECT_TRUE(r.include_usage);
    EXPECT_EQ(r.cache_key, "tenant-a");
    ASSERT_EQ(r.sampling.logit_bias.size(), 2u);
    EXPECT_EQ(r.sampling.logit_bias[0], (std::pair<token_id, float>{5, -100.0f}));
}

TEST(ParseRequest, StopMayBeOneString) {
    EXPECT_EQ(chat_ok("{" + k_msgs + R"(,"stop":"\n"})").stop, (std::vector<std::string>{"\n"}));
    EXPECT_TRUE(chat_ok("{" + k_msgs + R"(,"stop":null})").stop.empty());
    EXPECT_EQ(chat_error("{" + k_msgs + R"(,"stop":""})").param, "stop");
    EXPECT_EQ(chat_error("{" + k_msgs + R"(,"stop":[1]})").param, "stop[0]");
    EXPECT_EQ(chat_error("{" + k_msgs + R"(,"stop":["a","b","c","d","e","f","g","h","i","j","k","l","m","n","o","p","q"]})").param, "stop");
}

TEST(ParseRequest, MaxCompletionTokensWinsOverMaxTokens) {
    EXPECT_EQ(chat_ok("{" + k_msgs + R"(,"max_tokens":5,"max_completion_tokens":9})").max_tokens, 9);
}

TEST(ParseRequest, IncludeUsageNeedsStream) {
    EXPECT_FALSE(chat_ok("{" + k_msgs + R"(,"stream_options":{"include_usage":true}})").include_usage);
}

TEST(ParseRequest, NullMeansAbsent) {
    const completion_request r = chat_ok("{" + k_msgs + R"(,"temperature":null,"max_tokens":null,"seed":null,"n":null})");
    EXPECT_FALSE(r.max_tokens.has_value());
    EXPECT_FALSE(r.seed_given);
}

struct bad_value_case {
    const char * fragment;
    const char * param;
};

TEST(ParseRequest, WrongTypesAndOutOfRangeValuesNameTheField) {
    const bad_value_case cases[] = {
        {R"("temperature":-0.1)", "temperature"},
        {R"("temperature":"hot")", "temperature"},
        {R"("temperature":101)", "temperature"},
        {R"("top_p":0)", "top_p"},
        {R"("top_p":1.5)", "top_p"},
        {R"("top_k":-1)", "top_k"},
        {R"("top_k":2.5)", "top_k"},
        {R"("min_p":2)", "min_p"},
        {R"("presence_penalty":3)", "presence_penalty"},
        {R"("frequency_penalty":-2.5)", "frequency_penalty"},
        {R"("repetition_penalty":0)", "repetition_penalty"},
        {R"("max_tokens":-1)", "max_tokens"},
        {R"("max_tokens":257)", "max_tokens"},
        {R"("max_tokens":1000000000000)", "max_tokens"},
        {R"("max_tokens":18446744073709551615)", "max_tokens"},
        {R"("max_tokens":"10")", "max_tokens"},
        {R"("max_tokens":1.5)", "max_tokens"},
        {R"("seed":"x")", "seed"},
        {R"("stream":"yes")", "stream"},
        {R"("stream_options":3)", "stream_options"},
        {R"("stream_options":{"include_usage":1})", "stream_options.include_usage"},
        {R"("model":5)", "model"},
        {R"("prompt_cache_key":5)", "prompt_cache_key"},
        {R"("logit_bias":{"x":1})", "logit_bias"},
        {R"("logit_bias":{"512":1})", "logit_bias"},
        {R"("logit_bias":{"1":101})", "logit_bias"},
        {R"("n":2)", "n"},
        {R"("n":0)", "n"},
        {R"("logprobs":1)", "logprobs"},
        {R"("logprobs":true,"top_logprobs":21)", "top_logprobs"},
        {R"("logprobs":true,"top_logprobs":-1)", "top_logprobs"},
        {R"("logprobs":true,"top_logprobs":1.5)", "top_logprobs"},
        {R"("top_logprobs":3)", "top_logprobs"},
        {R"("logprobs":false,"top_logprobs":3)", "top_logprobs"},
        {R"("tools":[{"type":"function"}])", "tools[0].function"},
        {R"("response_format":"json")", "response_format"},
        {R"("response_format":{"type":"yaml"})", "response_format.type"},
        {R"("response_format":{"type":"json_schema"})", "response_format.json_schema"},
        {R"("response_format":{"type":"json_schema","json_schema":{"name":"x"}})", "response_format.json_schema.schema"},
        {R"("response_format":{"type":"json_schema","json_schema":{"schema":{"type":"string","minLength":5,"maxLength":2}}})",
         "response_format.json_schema.schema"},
        {R"("response_format":{"type":"json_schema","json_schema":{"schema":{"type":"strin"}}})",
         "response_format.json_schema.schema"},
        {R"("response_format":{"type":"json_schema","json_schema":{"schema":{"type":"string"},"strict":"yes"}})",
         "response_format.json_schema.strict"},
        {R"("grammar":5)", "grammar"},
        {R"("grammar":"root ::= \"a")", "grammar"},
        {R"("grammar":"root ::= missing")", "grammar"},
        {R"("grammar":"root ::= \"a\"","response_format":{"type":"json_object"})", "response_format"},
    };
    for (const auto & c : cases) {
        const api_error e = chat_error("{" + k_msgs + "," + c.fragment + "}");
        EXPECT_EQ(e.http_status, 400) << c.fragment;
        EXPECT_EQ(e.param, c.param) << c.fragment << ": " << e.message;
        EXPECT_FALSE(e.message.empty());
    }
}

TEST(ParseRequest, ResponseFormatAndGrammarBecomeTheSamplersGrammar) {
    EXPECT_TRUE(chat_ok("{" + k_msgs + R"(,"response_format":{"type":"text"}})").sampling.grammar.empty());
    EXPECT_EQ(chat_ok("{" + k_msgs + R"(,"response_format":{"type":"json_object"}})").sampling.grammar,
              grammar::gbnf_json_object());
    EXPECT_EQ(completion_ok(R"({"prompt":"x","grammar":"root ::= \"yes\" | \"no\""})").sampling.grammar,
              "root ::= \"yes\" | \"no\"");
    // The schema's own key order reaches the converter (nlohmann::json would sort b before a... and z).
    const auto r = chat_ok("{" + k_msgs + R"(,"response_format":{"type":"json_schema","json_schema":{"name":"o","strict":true,
        "schema":{"type":"object","properties":{"z":{"type":"integer"},"a":{"type":"string"}},"required":["z","a"],
                  "additionalProperties":false}}}})");
    auto want = grammar::gbnf_from_json_schema(std::string_view(
        R"({"type":"object","properties":{"z":{"type":"integer"},"a":{"type":"string"}},"required":["z","a"],"additionalProperties":false})"),
        {.strict = true});
    ASSERT_TRUE(want.is_ok());
    EXPECT_EQ(r.sampling.grammar, *want);
    auto g = grammar::compile(r.sampling.grammar);
    ASSERT_TRUE(g.is_ok());
    grammar::matcher m(*g);
    EXPECT_TRUE(m.accepts(R"({"z":1,"a":"b"})"));
    EXPECT_FALSE(m.accepts(R"({"a":"b")"));
    // strict: a keyword we do not enforce is refused; without strict it is ignored.
    const std::string fmt = R"("format":"hostname")";
    EXPECT_EQ(chat_error("{" + k_msgs + R"(,"response_format":{"type":"json_schema","json_schema":{"strict":true,"schema":{"type":"string",)" + fmt + "}}}}").param,
              "response_format.json_schema.schema");
    EXPECT_FALSE(chat_ok("{" + k_msgs + R"(,"response_format":{"type":"json_schema","json_schema":{"schema":{"type":"string",)" + fmt + "}}}}")
                     .sampling.grammar.empty());
    // The grammar module's message reaches the client.
    const api_error e = chat_error("{" + k_msgs + R"(,"grammar":"root ::= \"a"})");
    EXPECT_NE(e.message.find("1:"), std::string::npos) << e.message;
}

TEST(ParseRequest, LogprobsAskTheFinalStageForAtLeastOneAlternative) {
    auto off = chat_ok("{" + k_msgs + R"(,"logprobs":false,"top_logprobs":0})");
    EXPECT_EQ(off.top_logprobs, -1);
    EXPECT_EQ(off.sampling.n_logprobs, 0);
    auto on = chat_ok("{" + k_msgs + R"(,"logprobs":true})");
    EXPECT_EQ(on.top_logprobs, 0);
    EXPECT_EQ(on.sampling.n_logprobs, 1);
    auto top = chat_ok("{" + k_msgs + R"(,"logprobs":true,"top_logprobs":20})");
    EXPECT_EQ(top.top_logprobs, 20);
    EXPECT_EQ(top.sampling.n_logprobs, 20);
    EXPECT_EQ(completion_ok(R"({"prompt":"x","logprobs":null})").top_logprobs, -1);
    EXPECT_EQ(completion_ok(R"({"prompt":"x","logprobs":0})").sampling.n_logprobs, 1);
    EXPECT_EQ(completion_ok(R"({"prompt":"x","logprobs":7})").sampling.n_logprobs, 7);
    EXPECT_EQ(completion_error(R"({"prompt":"x","logprobs":21})").param, "logprobs");
    EXPECT_EQ(completion_error(R"({"prompt":"x","logprobs":true})").param, "logprobs");
    EXPECT_EQ(completion_error(R"({"prompt":"x","logprobs":-1})").param, "logprobs");
}

TEST(ParseRequest, OffValuesOfUnsupportedOptionsAreAccepted) {
    chat_ok("{" + k_msgs + R"(,"n":1,"logprobs":false,"tools":[],"response_format":{"type":"text"}})");
    completion_ok(R"({"prompt":"x","echo":false,"best_of":1,"logprobs":0,"suffix":""})");
    EXPECT_EQ(completion_error(R"({"prompt":"x","echo":true})").param, "echo");
    EXPECT_EQ(completion_error(R"({"prompt":"x","best_of":2})").param, "best_of");
    EXPECT_EQ(completion_error(R"({"prompt":"x","suffix":"end"})").param, "suffix");
}

TEST(ParseRequest, CompletionPromptIsATextOrTokenIds) {
    EXPECT_EQ(completion_ok(R"({"prompt":"hello"})").prompt_text, "hello");
    EXPECT_EQ(completion_ok(R"({"prompt":["hello"]})").prompt_text, "hello");
    const completion_request ids = completion_ok(R"({"prompt":[1,300,511]})");
    EXPECT_TRUE(ids.prompt_is_tokens);
    EXPECT_EQ(ids.prompt_tokens, (std::vector<int32_t>{1, 300, 511}));
    EXPECT_EQ(completion_ok(R"({"prompt":[[1,2]]})").prompt_tokens, (std::vector<int32_t>{1, 2}));

    EXPECT_EQ(completion_error("{}").param, "prompt");
    EXPECT_EQ(completion_error(R"({"prompt":[]})").param, "prompt");
    EXPECT_EQ(completion_error(R"({"prompt":["a","b"]})").code, "unsupported_parameter");
    EXPECT_EQ(completion_error(R"({"prompt":[1,512]})").param, "prompt[1]");
    EXPECT_EQ(completion_error(R"({"prompt":[1,-1]})").param, "prompt[1]");
    EXPECT_EQ(completion_error(R"({"prompt":[1,"a"]})").param, "prompt[1]");
    EXPECT_EQ(completion_error(R"({"prompt":{"text":"a"}})").param, "prompt");
    EXPECT_EQ(completion_error(R"({"prompt":[[1],[2]]})").param, "prompt");
}

TEST(ParseRequest, CacheKeyIsBoundedByTheWireProtocolLimit) {
    // One limit on every topology: the front end refuses what a chain could not carry.
    const request_limits l = limits();
    ASSERT_EQ(l.max_cache_key_bytes, protocol::protocol_limits{}.max_cache_key_bytes);
    const std::string at_limit(l.max_cache_key_bytes, 'k');
    completion_request r;
    EXPECT_FALSE(parse_request("{" + k_msgs + R"(,"prompt_cache_key":")" + at_limit + "\"}", endpoint::chat_completions,
                               l, r).has_value());
    EXPECT_EQ(r.cache_key, at_limit);
    const api_error e = chat_error("{" + k_msgs + R"(,"prompt_cache_key":")" + at_limit + "k\"}");
    EXPECT_EQ(e.http_status, 400);
    EXPECT_EQ(e.param, "prompt_cache_key");
    EXPECT_EQ(e.code, "string_above_max_length");
    EXPECT_EQ(e.type, "invalid_request_error");
}

const std::string k_tool = R"({"type":"function","function":{"name":"get_weather","parameters":{"type":"object"}}})";

TEST(ParseRequest, ToolsToolChoiceAndToolMessagesAreRead) {
    const completion_request r = chat_ok(R"({"messages":[
        {"role":"user","content":"weather?"},
        {"role":"assistant","content":null,"reasoning_content":"use the tool",
         "tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}]},
        {"role":"tool","tool_call_id":"call_1","content":"sunny"}],
      "tools":[)" + k_tool + R"(],"tool_choice":{"type":"function","function":{"name":"get_weather"}},
      "parallel_tool_calls":false,"chat_template_kwargs":{"enable_thinking":false}})");
    ASSERT_EQ(r.messages.size(), 3u);
    ASSERT_EQ(r.messages[1].tool_calls.size(), 1u);
    EXPECT_EQ(r.messages[1].tool_calls[0].name, "get_weather");
    EXPECT_EQ(r.messages[1].tool_calls[0].arguments, "{\"city\":\"Paris\"}");
    EXPECT_EQ(r.messages[1].reasoning_content, "use the tool");
    EXPECT_EQ(r.messages[2].role, "tool");
    EXPECT_EQ(r.messages[2].tool_call_id, "call_1");
    EXPECT_EQ(r.tools.size(), 1u);
    EXPECT_EQ(r.tool_choice.mode, chat::tool_choice_mode::named);
    EXPECT_EQ(r.tool_choice.name, "get_weather");
    EXPECT_FALSE(r.parallel_tool_calls);
    EXPECT_EQ(r.template_kwargs["enable_thinking"], false);
    EXPECT_EQ(chat_ok("{" + k_msgs + R"(,"tools":[)" + k_tool + R"(],"tool_choice":"required"})").tool_choice.mode,
              chat::tool_choice_mode::required);
}

TEST(ParseRequest, MalformedToolsAre400sNamingTheField) {
    struct bad_case {
        std::string fragment;
        std::string param;
    };
    const std::vector<bad_case> cases = {
        {R"("tools":{})", "tools"},
        {R"("tools":[5])", "tools[0]"},
        {R"("tools":[{"type":"retrieval"}])", "tools[0].type"},
        {R"("tools":[{"type":"function","function":{"name":"has space"}}])", "tools[0].function.name"},
        {R"("tools":[{"type":"function","function":{"name":""}}])", "tools[0].function.name"},
        {R"("tools":[{"type":"function","function":{"name":"f","parameters":"x"}}])", "tools[0].function.parameters"},
        {R"("tools":[{"type":"function","function":{"name":"f"}},{"type":"function","function":{"name":"f"}}])",
         "tools[1].function.name"},
        {R"("tool_choice":"sometimes")", "tool_choice"},
        {R"("tool_choice":"required")", "tool_choice"},
        {R"("tools":[)" + k_tool + R"(],"tool_choice":{"type":"function","function":{"name":"other"}})", "tool_choice"},
        {R"("tools":[)" + k_tool + R"(],"tool_choice":5)", "tool_choice"},
        {R"("parallel_tool_calls":"yes")", "parallel_tool_calls"},
        {R"("chat_template_kwargs":[1])", "chat_template_kwargs"},
    };
    for (const auto & c : cases) {
        const api_error e = chat_error("{" + k_msgs + "," + c.fragment + "}");
        EXPECT_EQ(e.http_status, 400) << c.fragment;
        EXPECT_EQ(e.param, c.param) << c.fragment << ": " << e.message;
    }
    EXPECT_EQ(chat_error(R"({"messages":[{"role":"assistant","content":null,"tool_calls":[{"function":{"arguments":"{}"}}]}]})").param,
              "messages[0].tool_calls[0].function.name");
    EXPECT_EQ(chat_error(R"({"messages":[{"role":"assistant","tool_calls":{}}]})").param, "messages[0].tool_calls");
    EXPECT_EQ(completion_error(R"({"prompt":"x","tools":[]})").param, "tools");
}

TEST(ResponseBody, ChatReplyCarriesToolCallsReasoningAndFingerprint) {
    response_meta meta{endpoint::chat_completions, "chatcmpl-1", 7, "m", "fp_test"};
    chat::parsed_output reply;
    reply.reasoning_content = "thought";
    reply.tool_calls.push_back({"call_a", "get_weather", "{\"city\":\"Paris\"}"});
    const json j = json::parse(completion_body(meta, "raw", "tool_calls", usage_numbers{}, &reply));
    EXPECT_EQ(j["system_fingerprint"], "fp_test");
    const json & m = j["choices"][0]["message"];
    EXPECT_TRUE(m["content"].is_null());
    EXPECT_EQ(m["reasoning_content"], "thought");
    EXPECT_EQ(m["tool_calls"][0]["id"], "call_a");
    EXPECT_EQ(m["tool_calls"][0]["type"], "function");
    EXPECT_EQ(m["tool_calls"][0]["function"]["name"], "get_weather");
    EXPECT_EQ(m["tool_calls"][0]["function"]["arguments"], "{\"city\":\"Paris\"}");
    EXPECT_EQ(j["choices"][0]["finish_reason"], "tool_calls");
    reply = {};
    reply.content = "hello";
    const json k = json::parse(completion_body(meta, "raw", "stop", usage_numbers{}, &reply));
    EXPECT_EQ(k["choices"][0]["message"]["content"], "hello");
    EXPECT_FALSE(k["choices"][0]["message"].contains("tool_calls"));
    EXPECT_FALSE(k["choices"][0]["message"].contains("reasoning_content"));
}

TEST(StreamChunk, ToolCallsStreamNameFirstThenArguments) {
    response_meta meta{endpoint::chat_completions, "chatcmpl-1", 7, "m", "fp_test"};
    chat::output_delta d;
    d.reasoning = "hmm";
    d.content = "ok";
    d.tool_calls.push_back({0, "call_a", "f", "{}"});
    const std::vector<std::string> chunks = stream_delta_chunks(meta, d, false);
    ASSERT_EQ(chunks.size(), 4u);
    const json r = json::parse(chunks[0]), c = json::parse(chunks[1]), t0 = json::parse(chunks[2]), t1 = json::parse(chunks[3]);
    EXPECT_EQ(r["choices"][0]["delta"]["reasoning_content"], "hmm");
    EXPECT_EQ(c["choices"][0]["delta"]["content"], "ok");
    EXPECT_EQ(t0["system_fingerprint"], "fp_test");
    const json & first = t0["choices"][0]["delta"]["tool_calls"][0];
    EXPECT_EQ(first["index"], 0);
    EXPECT_EQ(first["id"], "call_a");
    EXPECT_EQ(first["function"]["name"], "f");
    EXPECT_EQ(first["function"]["arguments"], "");
    const json & second = t1["choices"][0]["delta"]["tool_calls"][0];
    EXPECT_EQ(second["index"], 0);
    EXPECT_FALSE(second.contains("id"));
    EXPECT_EQ(second["function"]["arguments"], "{}");
    EXPECT_TRUE(stream_delta_chunks(meta, chat::output_delta{}, false).empty());
}

TEST(ResponseIds, CarryTheEndpointPrefixAndAreUnique) {
    const std::string a = make_response_id(endpoint::chat_completions);
    const std::string b = make_response_id(endpoint::chat_completions);
    EXPECT_EQ(a.rfind("chatcmpl-", 0), 0u);
    EXPECT_EQ(make_response_id(endpoint::completions).rfind("cmpl-", 0), 0u);
    EXPECT_NE(a, b);
}

response_meta meta(endpoint kind) {
    response_meta m;
    m.kind = kind;
    m.id = "id-1";
    m.created = 1700000000;
    m.model = "tiny";
    return m;
}

TEST(ResponseBody, ChatCompletionHasMessageFinishReasonAndUsage) {
    const json j = json::parse(completion_body(meta(endpoint::chat_completions), "Hello", "stop", {10, 3, 4}));
    EXPECT_EQ(j["object"], "chat.completion");
    EXPECT_EQ(j["id"], "id-1");
    EXPECT_EQ(j["created"], 1700000000);
    EXPECT_EQ(j["model"], "tiny");
    ASSERT_EQ(j["choices"].size(), 1u);
    EXPECT_EQ(j["choices"][0]["index"], 0);
    EXPECT_EQ(j["choices"][0]["message"]["role"], "assistant");
    EXPECT_EQ(j["choices"][0]["message"]["content"], "Hello");
    EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
    EXPECT_EQ(j["usage"]["prompt_tokens"], 10);
    EXPECT_EQ(j["usage"]["completion_tokens"], 3);
    EXPECT_EQ(j["usage"]["total_tokens"], 13);
    EXPECT_EQ(j["usage"]["prompt_tokens_details"]["cached_tokens"], 4);
}

TEST(ResponseBody, TextCompletionHasText) {
    const json j = json::parse(completion_body(meta(endpoint::completions), " there", "length", {2, 1, 0}));
    EXPECT_EQ(j["object"], "text_completion");
    EXPECT_EQ(j["choices"][0]["text"], " there");
    EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
}

logprobs_out sample_logprobs(int32_t n_top) {
    logprobs_out lp;
    lp.n_top = n_top;
    lp.text_offset = 3;
    lp.items.push_back({" a", -0.25f, {{" a", -0.25f}, {" b", -2.0f}, {" a", -3.0f}}});
    lp.items.push_back({"\xe2", -1.5f, {{"x", -0.5f}, {"\xe2", -1.5f}, {"y", -4.0f}}});
    return lp;
}

TEST(ResponseBody, ChatLogprobsHaveOpenAIsShape) {
    const logprobs_out lp = sample_logprobs(2);
    const json j = json::parse(completion_body(meta(endpoint::chat_completions), " a?", "stop", {}, nullptr, &lp));
    const json & c = j["choices"][0]["logprobs"]["content"];
    ASSERT_EQ(c.size(), 2u);
    EXPECT_EQ(c[0]["token"], " a");
    EXPECT_EQ(c[0]["logprob"], -0.25);
    EXPECT_EQ(c[0]["bytes"], json::array({32, 97}));
    ASSERT_EQ(c[0]["top_logprobs"].size(), 2u);  // n_top of the 3
    EXPECT_EQ(c[0]["top_logprobs"][1]["token"], " b");
    EXPECT_EQ(c[0]["top_logprobs"][1]["logprob"], -2.0);
    EXPECT_EQ(c[1]["bytes"], json::array({0xe2}));  // the real byte, though the text cannot show it
    EXPECT_TRUE(j["choices"][0]["logprobs"]["refusal"].is_null());
    // Without: null; asked for with nothing generated: an empty list.
    EXPECT_TRUE(json::parse(completion_body(meta(endpoint::chat_completions), "", "stop", {}))["choices"][0]["logprobs"].is_null());
    const logprobs_out none;
    EXPECT_EQ(json::parse(completion_body(meta(endpoint::chat_completions), "", "stop", {}, nullptr, &none))["choices"][0]["logprobs"]["content"].size(), 0u);
}

TEST(ResponseBody, CompletionLogprobsHaveTheLegacyShape) {
    const logprobs_out lp = sample_logprobs(3);
    const json j = json::parse(completion_body(meta(endpoint::completions), " a?", "stop", {}, nullptr, &lp));
    const json & l = j["choices"][0]["logprobs"];
    EXPECT_EQ(l["tokens"].size(), 2u);
    EXPECT_EQ(l["token_logprobs"], json::array({-0.25, -1.5}));
    EXPECT_EQ(l["text_offset"], json::array({3, 5}));
    ASSERT_EQ(l["top_logprobs"].size(), 2u);
    EXPECT_EQ(l["top_logprobs"][0].size(), 2u);  // " a" twice: the likelier one stands
    EXPECT_EQ(l["top_logprobs"][0][" a"], -0.25);
    EXPECT_EQ(l["top_logprobs"][1]["x"], -0.5);
}

TEST(StreamChunk, ChunksCarryTheLogprobsOfTheirTokens) {
    const logprobs_out lp = sample_logprobs(1);
    const json c = json::parse(stream_chunk(meta(endpoint::completions), " a", false, "", false, &lp));
    EXPECT_EQ(c["choices"][0]["logprobs"]["tokens"].size(), 2u);
    const logprobs_out none;
    EXPECT_TRUE(json::parse(stream_chunk(meta(endpoint::completions), " a", false, "", false, &none))["choices"][0]["logprobs"].is_null());
    chat::output_delta d;
    d.reasoning = "r";
    d.content = "c";
    const auto chunks = stream_delta_chunks(meta(endpoint::chat_completions), d, false, &lp);
    ASSERT_EQ(chunks.size(), 2u);
    EXPECT_EQ(json::parse(chunks[0])["choices"][0]["logprobs"]["content"].size(), 2u);  // once, with the first
    EXPECT_TRUE(json::parse(chunks[1])["choices"][0]["logprobs"].is_null());
}

TEST(ResponseBody, InvalidUtf8NeverBreaksTheJson) {
    const std::string body = completion_body(meta(endpoint::completions), "a\xe2\x82", "stop", {});
    EXPECT_TRUE(json::accept(body));
}

TEST(StreamChunk, ChatChunksOpenWithTheRoleAndCloseWithAnEmptyDelta) {
    const response_meta m = meta(endpoint::chat_completions);
    const json first = json::parse(stream_chunk(m, "", true, "", false));
    EXPECT_EQ(first["object"], "chat.completion.chunk");
    EXPECT_EQ(first["choices"][0]["delta"]["role"], "assistant");
    EXPECT_EQ(first["choices"][0]["delta"]["content"], "");
    EXPECT_TRUE(first["choices"][0]["finish_reason"].is_null());
    EXPECT_FALSE(first.contains("usage"));

    const json mid = json::parse(stream_chunk(m, "Hi", false, "", true));
    EXPECT_FALSE(mid["choices"][0]["delta"].contains("role"));
    EXPECT_EQ(mid["choices"][0]["delta"]["content"], "Hi");
    EXPECT_TRUE(mid.contains("usage"));
    EXPECT_TRUE(mid["usage"].is_null());

    const json last = json::parse(stream_chunk(m, "", false, "length", false));
    EXPECT_TRUE(last["choices"][0]["delta"].empty());
    EXPECT_EQ(last["choices"][0]["finish_reason"], "length");
}

TEST(StreamChunk, CompletionChunksCarryText) {
    const json j = json::parse(stream_chunk(meta(endpoint::completions), "abc", false, "", false));
    EXPECT_EQ(j["object"], "text_completion");
    EXPECT_EQ(j["choices"][0]["text"], "abc");
}

TEST(StreamChunk, UsageChunkHasNoChoices) {
    const json j = json::parse(stream_usage_chunk(meta(endpoint::chat_completions), {5, 2, 1}));
    EXPECT_TRUE(j["choices"].is_array());
    EXPECT_TRUE(j["choices"].empty());
    EXPECT_EQ(j["usage"]["total_tokens"], 7);
    EXPECT_EQ(j["usage"]["prompt_tokens_details"]["cached_tokens"], 1);
}

TEST(Sse, EventsAreDataLinesWithABlankLineAndTheStreamEndsWithDone) {
    EXPECT_EQ(sse_event("{\"a\":1}"), "data: {\"a\":1}\n\n");
    EXPECT_EQ(sse_done, "data: [DONE]\n\n");
    // A chunk's JSON never holds a raw newline, which would end the SSE event early.
    const std::string chunk = stream_chunk(meta(endpoint::completions), "line1\nline2\r\n", false, "", false);
    EXPECT_EQ(chunk.find('\n'), std::string::npos);
    EXPECT_EQ(chunk.find('\r'), std::string::npos);
}

TEST(ModelsBody, ListsTheModel) {
    const json j = json::parse(models_body("tiny", 5));
    EXPECT_EQ(j["object"], "list");
    ASSERT_EQ(j["data"].size(), 1u);
    EXPECT_EQ(j["data"][0]["id"], "tiny");
    EXPECT_EQ(j["data"][0]["object"], "model");
    EXPECT_EQ(j["data"][0]["owned_by"], "skippy");
}

}  // namespace
}  // namespace skippy::http
