#include "http/access.h"

#include <fstream>

namespace skippy::http {

bool bearer_key_matches(const std::string * authorization, const std::vector<std::string> & keys) {
    if (!authorization) return false;
    constexpr std::string_view scheme = "Bearer ";
    if (authorization->size() < scheme.size()) return false;
    // The scheme is case-insensitive (RFC 9110); the key is not.
    for (size_t i = 0; i < scheme.size(); ++i) {
        const char c = (*authorization)[i];
        if ((c | 0x20) != (scheme[i] | 0x20) && !(c == ' ' && scheme[i] == ' ')) return false;
    }
    const std::string_view given = std::string_view(*authorization).substr(scheme.size());
    unsigned any = 0;
    for (const std::string & key : keys) {
        // Every byte of the longer string is looked at, whatever differs first.
        const size_t n = std::max(given.size(), key.size());
        unsigned diff = given.size() == key.size() ? 0u : 1u;
        for (size_t i = 0; i < n; ++i) {
            const unsigned char a = i < given.size() ? static_cast<unsigned char>(given[i]) : 0;
            const unsigned char b = i < key.size() ? static_cast<unsigned char>(key[i]) : 0;
            diff |= static_cast<unsigned>(a ^ b);
        }
        any |= static_cast<unsigned>(diff == 0);
    }
    return any != 0;
}

result<std::vector<std::string>> read_api_key_file(const std::string & path) {
    std::ifstream in(path);
    if (!in) return make_error(error_code::not_found, "cannot open the API key file " + path);
    std::vector<std::string> keys;
    std::string line;
    while (std::getline(in, line)) {
        const size_t b = line.find_first_not_of(" \t\r");
        if (b == std::string::npos || line[b] == '#') continue;
        const size_t e = line.find_last_not_of(" \t\r");
        keys.push_back(line.substr(b, e - b + 1));
    }
    if (in.bad()) return make_error(error_code::io, "cannot read the API key file " + path);
    if (keys.empty()) return make_error(error_code::invalid_argument, "the API key file " + path + " holds no key");
    return keys;
}

namespace {

// The Origin header when CORS is on and allows it, else nullptr.
const std::string * allowed_origin(const cors_policy & policy, const http_request & req) {
    if (!policy.enabled()) return nullptr;
    const std::string * origin = req.header("origin");
    if (!origin) return nullptr;
    if (policy.allowed_origin != "*" && *origin != policy.allowed_origin) return nullptr;
    return origin;
}

}  // namespace

header_list cors_headers(const cors_policy & policy, const http_request & req) {
    header_list out;
    if (!allowed_origin(policy, req)) return out;
    if (policy.allowed_origin == "*") {
        out.emplace_back("Access-Control-Allow-Origin", "*");
    } else {
        out.emplace_back("Access-Control-Allow-Origin", policy.allowed_origin);
        out.emplace_back("Vary", "Origin");
    }
    return out;
}

std::optional<http_response> cors_preflight(const cors_policy & policy, const http_request & req,
                                            std::string_view allowed_methods) {
    if (req.method != "OPTIONS" || !req.header("access-control-request-method")) return std::nullopt;
    if (!allowed_origin(policy, req)) return std::nullopt;
    http_response r;
    r.status = 204;
    r.content_type = "";
    r.headers = cors_headers(policy, req);
    std::string methods(allowed_methods);
    r.headers.emplace_back("Access-Control-Allow-Methods", methods.empty() ? "OPTIONS" : methods + ", OPTIONS");
    const std::string * asked = req.header("access-control-request-headers");
    r.headers.emplace_back("Access-Control-Allow-Headers", asked && !asked->empty() ? *asked : "Authorization, Content-Type");
    r.headers.emplace_back("Access-Control-Max-Age", "600");
    return r;
}

std::string canonical_path(const std::string & path) {
    if (path == "/chat/completions" || path == "/completions" || path == "/models" || path.rfind("/models/", 0) == 0) {
        return "/v1" + path;
    }
    if (path == "/v1/tokenize" || path == "/v1/detokenize") return path.substr(3);
    return path;
}

}  // namespace skippy::http
