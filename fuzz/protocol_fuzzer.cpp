// libFuzzer target for the stage wire format (src/protocol).
//
// Every input goes to all five decoders, once with the default limits and once with
// tiny ones (so that the limit checks are reached by short inputs). Beyond "no crash,
// no sanitizer report", each decoded message must satisfy what the API promises:
//   - it passes the matching validate_* call (decoders accept no more than encoders),
//   - it re-encodes to exactly the input bytes (one encoding per message),
//   - the peek_* helpers the transport frames by agree with the decoder.
#include "protocol/protocol.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <span>

namespace {

using namespace skippy::protocol;

#define FUZZ_CHECK(cond)                                                          \
    do {                                                                          \
        if (!(cond)) {                                                            \
            std::fprintf(stderr, "protocol_fuzzer: check failed: %s (%s:%d)\n",   \
                         #cond, __FILE__, __LINE__);                              \
            std::abort();                                                         \
        }                                                                         \
    } while (0)

bool same_bytes(const std::vector<uint8_t> & a, std::span<const uint8_t> b) {
    return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin());
}

void check_frame_peeks(std::span<const uint8_t> in, const protocol_limits & limits) {
    auto n = peek_frame_length(in.first(4), limits);
    FUZZ_CHECK(n.is_ok() && *n == in.size());
    FUZZ_CHECK(peek_frame_kind(in.first(frame_header_bytes)).is_ok());
}

void fuzz_request(std::span<const uint8_t> in, const protocol_limits & limits) {
    auto r = decode_request(in, limits);
    if (!r.is_ok()) return;
    FUZZ_CHECK(validate_request(*r, limits).is_ok());
    FUZZ_CHECK(encoded_request_bytes(*r) == in.size());
    FUZZ_CHECK(same_bytes(encode_request(*r), in));
    check_frame_peeks(in, limits);
}

void fuzz_step(std::span<const uint8_t> in, const protocol_limits & limits) {
    auto s = decode_step(in, limits);
    if (!s.is_ok()) return;
    FUZZ_CHECK(validate_step(*s, limits).is_ok());
    FUZZ_CHECK(encoded_step_bytes(*s) == in.size());
    FUZZ_CHECK(same_bytes(encode_step(*s), in));
    check_frame_peeks(in, limits);
}

void fuzz_reply(std::span<const uint8_t> in, const protocol_limits & limits) {
    auto r = decode_reply(in, limits);
    if (!r.is_ok()) return;
    FUZZ_CHECK(validate_reply(*r, limits).is_ok());
    FUZZ_CHECK(same_bytes(encode_reply(*r), in));
    check_frame_peeks(in, limits);
    if (r->kind == message_kind::error) FUZZ_CHECK(!error_reply_status(*r).is_ok());
}

void fuzz_hello(std::span<const uint8_t> in) {
    if (in.size() >= hello_prefix_bytes) (void)peek_hello_version(in.first(hello_prefix_bytes));
    auto c = decode_auth_challenge(in);
    if (c.is_ok()) FUZZ_CHECK(same_bytes(encode_auth_challenge(*c), in));
    auto h = decode_hello(in);
    if (!h.is_ok()) return;
    FUZZ_CHECK(validate_hello(*h).is_ok());
    FUZZ_CHECK(same_bytes(encode_hello(*h), in));
    FUZZ_CHECK(in.size() == hello_bytes);
    auto v = peek_hello_version(in.first(hello_prefix_bytes));
    FUZZ_CHECK(v.is_ok() && *v == protocol_version);
    // Deciding never fails and always yields a reply that can be sent.
    for (link_auth mine : {link_auth::none, link_auth::hmac_sha256}) {
        FUZZ_CHECK(validate_hello_reply(decide_hello(*h, mine), protocol_limits{}).is_ok());
    }
}

void fuzz_hello_reply(std::span<const uint8_t> in, const protocol_limits & limits) {
    if (in.size() >= hello_reply_fixed_bytes) (void)peek_hello_reply_length(in.first(hello_reply_fixed_bytes), limits);
    auto r = decode_hello_reply(in, limits);
    if (!r.is_ok()) return;
    FUZZ_CHECK(validate_hello_reply(*r, limits).is_ok());
    FUZZ_CHECK(same_bytes(encode_hello_reply(*r), in));
    auto n = peek_hello_reply_length(in.first(hello_reply_fixed_bytes), limits);
    FUZZ_CHECK(n.is_ok() && *n == in.size());
    (void)check_hello_reply(*r);
}

protocol_limits tiny_limits() {
    protocol_limits l;
    l.max_frame_bytes = 1024;
    l.max_tokens_per_message = 4;
    l.max_embd = 4;
    l.max_logit_bias = 2;
    l.max_cache_key_bytes = 4;
    l.max_error_message_bytes = 8;
    l.max_predicted_tokens = 4;
    l.max_step_entries = 2;
    return l;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t * data, size_t size) {
    static const protocol_limits defaults;
    static const protocol_limits tiny = tiny_limits();
    const std::span<const uint8_t> in(data, size);
    if (size >= 4) (void)peek_frame_length(in.first(4), defaults);
    if (size >= frame_header_bytes) (void)peek_frame_kind(in.first(frame_header_bytes));
    for (const protocol_limits * limits : {&defaults, &tiny}) {
        fuzz_request(in, *limits);
        fuzz_step(in, *limits);
        fuzz_reply(in, *limits);
        fuzz_hello(in);
        fuzz_hello_reply(in, *limits);
    }
    return 0;
}
