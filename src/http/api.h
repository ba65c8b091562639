// The OpenAI-compatible API surface, without sockets: request bodies in, validated
// requests out; OpenAI error objects; response bodies and server-sent-event chunks.
//
// Endpoints (server.h serves them): POST /v1/chat/completions, POST /v1/completions,
// GET /v1/models, GET /health, GET /metrics. Field by field semantics, defaults and
// limits are in docs/http-api.md.
#pragma once

#include "chat/chat.h"
#include "protocol/protocol.h"
#include "runtime/sampler.h"
#include "tokenizer/chat_template.h"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace skippy::http {

// An OpenAI error object and the HTTP status that carries it.
struct api_error {
    int         http_status = 400;
    std::string message;
    std::string type = "invalid_request_error";
    std::string param;  // "" → null
    std::string code;   // "" → null
};

// {"error": {"message": ..., "type": ..., "param": ..., "code": ...}}
std::string error_body(const api_error & e);

// The error a status answers with when no handler said more: 400, 404, 405, 413,
// 429, 500, 503, 504 get their type and code (docs/http-api.md); `message` is used as is.
api_error error_for_status(int http_status, std::string message);

// The error a request gets when the pipeline failed after every check passed (so it is
// the server's failure, not the client's), decided by the status's code: `timed_out`
// (a stage did not answer within its step deadline; the message names it) is 504 with
// code "stage_timeout"; anything else (a stage died, non-finite logits) is 500.
// REQUIRES: !failure.is_ok().
api_error error_for_pipeline_failure(const status & failure);

enum class endpoint { chat_completions, completions };

// Limits that depend on the loaded model.
struct request_limits {
    int32_t ctx_size = 0;       // tokens per lane; max_tokens above it is refused
    int32_t n_vocab = 0;        // token ids (prompt arrays, logit_bias) must be below it
    size_t  max_stop_strings = 16;
    size_t  max_stop_bytes = 256;          // per stop string
    // prompt_cache_key: the wire protocol's bound, so that a key the front end accepts
    // reaches every stage of a chain (one limit on every topology).
    size_t  max_cache_key_bytes = protocol::protocol_limits{}.max_cache_key_bytes;
    // logit_bias entries: the wire's bound too, for the same reason.
    size_t  max_logit_bias = protocol::protocol_limits{}.max_logit_bias;
};

// A validated generation request.
struct completion_request {
    endpoint                  kind = endpoint::chat_completions;
    std::string               model;             // as sent ("" when absent); echoed back
    std::vector<chat::message> messages;         // chat: roles normalised (developer → system)
    chat::ojson               tools = chat::ojson::array();  // chat: validated tool objects
    chat::tool_choice         tool_choice;
    bool                      parallel_tool_calls = true;
    chat::ojson               template_kwargs = chat::ojson::object();  // chat_template_kwargs
    std::string               prompt_text;       // completions, when the prompt is text
    std::vector<int32_t>      prompt_tokens;     // completions, when the prompt is token ids (used as is)
    bool                      prompt_is_tokens = false;
    std::optional<int32_t>    max_tokens;        // nullopt: until the context is full
    sampling_config           sampling;          // llama.cpp defaults for absent fields
    bool                      seed_given = false;
    std::vector<std::string>  stop;
    bool                      stream = false;
    bool                      include_usage = false;  // stream_options.include_usage
    std::string               cache_key;              // prompt_cache_key ("" when absent)
    // Log-probabilities: -1 none; else each token's, with this many alternatives (chat
    // logprobs: true + top_logprobs; completions logprobs: N). sampling.n_logprobs is
    // then max(1, top_logprobs): the final stage always sends at least the best one.
    int32_t                   top_logprobs = -1;
};

// One generated token's logprobs as a response shows them.
struct logprob_item {
    std::string piece;    // the token's bytes (maybe part of a UTF-8 character)
    float       logprob = 0.0f;
    std::vector<std::pair<std::string, float>> top;  // the alternatives' pieces, best first
};

// The logprobs of the tokens one body or chunk carries.
struct logprobs_out {
    int32_t                   n_top = 0;        // alternatives shown per token (completion_request::top_logprobs)
    std::vector<logprob_item> items;
    size_t                    text_offset = 0;  // completions: where items[0]'s piece starts in the output
};

// Parses and validates a request body. Malformed JSON, a non-object body, a wrong type,
// an out-of-range value or an unsupported option (n != 1, echo, suffix, ...)
// is a 400 error naming the field in `param`. Unknown fields are ignored, as most
// OpenAI-compatible servers do. Sampling ranges are sampling_bounds (runtime/sampler.h)
// and the wire's limits (logit_bias entries, prompt_cache_key), so that whatever this
// accepts every topology runs. logit_bias keys must be canonical decimal token ids
// ("5", not " 5", "+5", "05"), each at most once, below n_vocab.
std::optional<api_error> parse_request(std::string_view body, endpoint kind, const request_limits & limits,
                                       completion_request & out);

// What every response and chunk of one request shares.
struct response_meta {
    endpoint    kind = endpoint::chat_completions;
    std::string id;        // "chatcmpl-…" or "cmpl-…"
    int64_t     created = 0;  // Unix seconds
    std::string model;
    std::string system_fingerprint;  // the build and configuration that answered
};

struct usage_numbers {
    int64_t prompt_tokens = 0;
    int64_t completion_tokens = 0;
    int64_t cached_tokens = 0;
    // Bit i: stage i restored / recorded the prompt's prefix (usage.skippy).
    uint64_t kv_hit_stage_mask = 0;
    uint64_t kv_record_stage_mask = 0;
};

// A fresh id with the endpoint's prefix; unique within the process.
std::string make_response_id(endpoint kind);

// The non-streaming response body (chat.completion or text_completion object). For chat,
// `reply` (when given) is the output read as content, reasoning_content and tool_calls
// (content null when there are only calls); else `text` is the content.
// With `logprobs`, choices[0].logprobs holds them (docs/http-api.md, "Log-probabilities").
std::string completion_body(const response_meta & meta, std::string_view text, std::string_view finish_reason,
                            const usage_numbers & usage, const chat::parsed_output * reply = nullptr,
                            const logprobs_out * logprobs = nullptr);

// One streaming chunk (chat.completion.chunk or text_completion) as JSON.
//   first: chat only, the delta carries "role": "assistant" (OpenAI's opening chunk).
//   finish_reason: "" while generating, else the reason (the chunk's text is then "").
//   usage_null: the client asked for usage, so every ordinary chunk says "usage": null.
//   logprobs: when given and not empty, the chunk's choices[0].logprobs.
std::string stream_chunk(const response_meta & meta, std::string_view text, bool first, std::string_view finish_reason,
                         bool usage_null, const logprobs_out * logprobs = nullptr);

// The chat chunks of a parsed piece of output: one for its reasoning_content, one for
// its content, and two per tool call (index, id, type and name with empty arguments;
// then the arguments), as OpenAI streams them. None when the delta is empty.
// `logprobs` (when given and not empty) go with the first chunk.
std::vector<std::string> stream_delta_chunks(const response_meta & meta, const chat::output_delta & delta, bool usage_null,
                                             const logprobs_out * logprobs = nullptr);

// The closing usage chunk of stream_options.include_usage: "choices": [] and "usage".
std::string stream_usage_chunk(const response_meta & meta, const usage_numbers & usage);

// Server-sent-event framing: "data: <payload>\n\n".
std::string sse_event(std::string_view payload);
inline constexpr std::string_view sse_done = "data: [DONE]\n\n";

// GET /v1/models body (one model) and one model object.
std::string models_body(const std::string & model_id, int64_t created);
std::string model_body(const std::string & model_id, int64_t created);

}  // namespace skippy::http
