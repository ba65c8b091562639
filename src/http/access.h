// Who may call the API and from which web pages: API keys (Authorization: Bearer),
// CORS, and the route aliases without /v1. Pure functions over requests; the server
// applies them before routing (docs/http-api.md, "Authentication" and "CORS").
#pragma once

#include "base/status.h"
#include "http/event_loop.h"

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace skippy::http {

// True when `authorization` (the header's value, nullptr when absent) is
// "Bearer <key>" for one of `keys`. The comparison takes the same time whichever key
// matches and wherever the first difference is (no early exit), so response times do
// not leak a key byte by byte. REQUIRES: keys is not empty.
bool bearer_key_matches(const std::string * authorization, const std::vector<std::string> & keys);

// The API keys of --api-key-file: one per line; blank lines, surrounding whitespace
// and lines starting with '#' are skipped. Errors: not_found / io; invalid_argument
// when the file holds no key.
result<std::vector<std::string>> read_api_key_file(const std::string & path);

using header_list = std::vector<std::pair<std::string, std::string>>;

// --cors-origin: "" (off: no CORS headers at all), "*", or one origin
// ("https://app.example.com").
struct cors_policy {
    std::string allowed_origin;
    bool enabled() const { return !allowed_origin.empty(); }
};

// The headers a response to `req` carries: Access-Control-Allow-Origin (and Vary:
// Origin for a named origin) when CORS is on and the request's Origin is allowed;
// none otherwise.
header_list cors_headers(const cors_policy & policy, const http_request & req);

// A CORS preflight (OPTIONS with Origin and Access-Control-Request-Method) answered:
// 204 with the allowed origin, methods (`allowed_methods` plus OPTIONS), the requested
// headers (Authorization and Content-Type when none are named) and a max age. nullopt
// when CORS is off, the origin is not allowed, or `req` is not a preflight.
std::optional<http_response> cors_preflight(const cors_policy & policy, const http_request & req,
                                            std::string_view allowed_methods);

// The canonical route of a path: "/chat/completions", "/completions", "/models" and
// "/models/{id}" are aliases of their /v1 forms, as in llama.cpp's server; "/v1/tokenize"
// and "/v1/detokenize" of "/tokenize" and "/detokenize". Anything else is returned as is.
std::string canonical_path(const std::string & path);

}  // namespace skippy::http
