// Random valid messages of every kind: encode -> decode gives the same message, and
// the encoding is canonical (re-encoding the decoded message gives the same bytes).
#include "base/fp16.h"
#include "protocol/protocol.h"
#include "test_util.h"

#include <gtest/gtest.h>

#include <limits>
#include <random>

namespace skippy::protocol {
namespace {

class message_generator {
public:
    explicit message_generator(uint64_t seed) : rng_(seed) {}

    request random_request() {
        request r;
        r.kind = pick(12) == 11 ? message_kind::heartbeat : static_cast<message_kind>(1 + pick(11));
        r.request_id = rng_();
        r.session_id = rng_();
        r.stats = random_stats();
        r.state.decode_step = static_cast<uint32_t>(rng_());
        r.state.source_stage = static_cast<uint32_t>(pick(8));
        r.state.current_token = coin() ? -1 : static_cast<int32_t>(pick(1u << 31));
        const bool data_kind = r.kind == message_kind::prefill || r.kind == message_kind::prefill_final ||
                               r.kind == message_kind::decode;
        uint32_t n_tokens = 0;
        switch (r.kind) {
            case message_kind::decode: n_tokens = 1; break;
            case message_kind::stop:
            case message_kind::trim_session:
            case message_kind::prediction_return_open:
            case message_kind::heartbeat: n_tokens = 0; break;
            case message_kind::configure_generation: n_tokens = static_cast<uint32_t>(pick(20)); break;
            default: n_tokens = 1 + static_cast<uint32_t>(pick(20)); break;
        }
        r.pos_start = static_cast<int64_t>(pick(100000));
        if (pick(20) == 0) {
            // The last start the position range allows (kind 9 decodes one more token).
            const int64_t extra = r.kind == message_kind::try_restore_prefill_decode ? 1 : 0;
            r.pos_start = std::numeric_limits<int32_t>::max() - static_cast<int64_t>(n_tokens) - extra;
        }
        for (uint32_t i = 0; i < n_tokens; ++i) r.tokens.push_back(static_cast<int32_t>(pick(1u << 31)));
        if (data_kind && coin()) {
            for (uint32_t i = 0; i < n_tokens; ++i) r.positions.push_back(static_cast<int32_t>(pick(1u << 31)));
        }
        r.state.phase = message_phase::control;
        if (r.kind == message_kind::prefill || r.kind == message_kind::prefill_final) r.state.phase = message_phase::prefill;
        if (r.kind == message_kind::decode || r.kind == message_kind::try_restore_prefill_decode) {
            r.state.phase = message_phase::decode;
        }
        if (r.kind == message_kind::try_restore_prefill_decode) r.state.current_token = static_cast<int32_t>(pick(1000));
        const int64_t end = r.pos_start + n_tokens;
        r.state.prompt_token_count = static_cast<uint32_t>(
            r.kind == message_kind::prefill_final ? end : r.kind == message_kind::prefill ? end + pick(50) : rng_());
        if (r.kind == message_kind::configure_generation) r.generation = random_generation();
        if (data_kind && coin()) r.activation = random_activation(activation_rows(r.kind, n_tokens));
        // Required here: the current token's hidden state, one row whatever the prefix length.
        if (r.kind == message_kind::try_restore_prefill_decode) {
            r.activation = random_activation(activation_rows(r.kind, n_tokens));
        }
        return r;
    }

    reply random_reply() {
        reply r;
        r.kind = static_cast<message_kind>(64 + pick(4));
        r.request_id = rng_();
        r.stats = random_stats();
        switch (r.kind) {
            case message_kind::ack:
                r.outcome = static_cast<ack_outcome>(pick(5));
                r.restored_tokens = static_cast<int64_t>(rng_() >> 1);
                break;
            case message_kind::predicted_token:
                r.token = static_cast<int32_t>(pick(1u << 31));
                r.decode_step = static_cast<uint32_t>(rng_());
                r.top_logprobs.resize(pick(max_logprobs + 1));
                if (!r.top_logprobs.empty()) r.logprob = -std::fabs(random_finite());
                for (auto & e : r.top_logprobs) e = {static_cast<int32_t>(pick(1u << 31)), -std::fabs(random_finite())};
                break;
            case message_kind::predicted_tokens:
                r.tokens.resize(1 + pick(30));
                for (auto & t : r.tokens) t = static_cast<int32_t>(pick(1u << 31));
                break;
            default:
                r.code = static_cast<error_code>(1 + pick(11));
                r.message = random_text();
                break;
        }
        return r;
    }

private:
    uint64_t pick(uint64_t n) { return rng_() % n; }
    bool coin() { return rng_() & 1; }

    // Any bit pattern but non-finite ones.
    float random_finite() {
        for (;;) {
            const float f = bits_to_float(static_cast<uint32_t>(rng_()));
            if (std::isfinite(f)) return f;
        }
    }

    stats_block random_stats() {
        stats_block s;
        for (size_t i = 0; i < n_stat_ids; ++i) set_stat(s, static_cast<stat_id>(i), coin() ? rng_() : pick(100));
        return s;
    }

    std::string random_bytes(size_t max_len) {
        std::string out(pick(max_len + 1), '\0');
        for (char & c : out) c = static_cast<char>(rng_());
        return out;
    }

    std::string random_text() {
        static const char * const pieces[] = {"a", "Z", " ", "\xc3\xa9", "\xe2\x82\xac", "\xf0\x9f\x98\x80", "\n", "0"};
        std::string out;
        const size_t n = pick(40);
        for (size_t i = 0; i < n; ++i) out += pieces[pick(std::size(pieces))];
        return out;
    }

    generation_config random_generation() {
        generation_config g;
        sampling_params & s = g.sampling;
        s.temperature = random_finite();
        s.top_k = static_cast<int32_t>(rng_());
        s.top_p = random_finite();
        s.min_p = random_finite();
        s.seed = rng_();
        s.repeat_penalty = random_finite();
        s.presence_penalty = random_finite();
        s.frequency_penalty = random_finite();
        s.penalty_last_n = static_cast<int32_t>(rng_());
        s.logit_bias.resize(pick(10));
        for (auto & [token, bias] : s.logit_bias) {
            token = static_cast<int32_t>(pick(1u << 31));
            bias = random_finite();
        }
        g.cache_mode = static_cast<prompt_cache_mode>(pick(3));
        g.cache_min_tokens = static_cast<uint32_t>(rng_());
        g.cache_key = random_bytes(40);
        s.grammar = random_bytes(60);
        s.n_logprobs = static_cast<uint32_t>(pick(max_logprobs + 1));
        return g;
    }

    activation_frame random_activation(uint32_t n_rows) {
        activation_frame a;
        a.dtype = static_cast<activation_dtype>(pick(3));
        a.producer_stage = static_cast<uint32_t>(pick(8));
        a.layer_start = static_cast<uint32_t>(pick(40));
        a.layer_end = a.layer_start + static_cast<uint32_t>(pick(40));
        a.n_embd = 1 + static_cast<uint32_t>(pick(16));
        a.values.resize(static_cast<size_t>(n_rows) * a.n_embd);
        // Mostly values exact in the preferred type, sometimes one that is not, so both
        // the narrow and the fallback encodings are exercised.
        const bool exact = coin();
        for (float & v : a.values) {
            const float f = random_finite();
            if (!exact) {
                v = f;
            } else if (a.dtype == activation_dtype::f16) {
                uint16_t h = static_cast<uint16_t>(rng_());
                if ((h & 0x7c00u) == 0x7c00u) h &= 0x83ffu;  // keep it finite
                v = f16_to_f32(h);
            } else if (a.dtype == activation_dtype::bf16) {
                v = bf16_to_f32(static_cast<uint16_t>(float_to_bits(f) >> 16));
            } else {
                v = f;
            }
        }
        return a;
    }

    std::mt19937_64 rng_;
};

TEST(protocol_random, RequestsRoundTrip) {
    const protocol_limits wire_limits;
    message_generator gen(20240601);
    for (int i = 0; i < 3000; ++i) {
        const request r = gen.random_request();
        ASSERT_TRUE(validate_request(r, wire_limits).is_ok()) << i << ": " << validate_request(r, wire_limits).to_string();
        const auto bytes = encode_request(r);
        ASSERT_EQ(bytes.size(), encoded_request_bytes(r));
        auto back = decode_request(bytes, wire_limits);
        ASSERT_TRUE(back.is_ok()) << i << ": " << back.error().to_string();
        ASSERT_EQ(*back, testing::as_received(r)) << i;
        ASSERT_EQ(encode_request(*back), bytes) << i;
    }
}

TEST(protocol_random, RepliesRoundTrip) {
    const protocol_limits wire_limits;
    message_generator gen(77);
    for (int i = 0; i < 3000; ++i) {
        const reply r = gen.random_reply();
        ASSERT_TRUE(validate_reply(r, wire_limits).is_ok()) << i << ": " << validate_reply(r, wire_limits).to_string();
        const auto bytes = encode_reply(r);
        auto back = decode_reply(bytes, wire_limits);
        ASSERT_TRUE(back.is_ok()) << i << ": " << back.error().to_string();
        ASSERT_EQ(*back, r) << i;
        ASSERT_EQ(encode_reply(*back), bytes) << i;
    }
}

}  // namespace
}  // namespace skippy::protocol
