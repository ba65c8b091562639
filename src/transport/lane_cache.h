// The prefix cache as one lane of a stage sees it during a request: the request's
// namespace and cache mode, and the few calls the message loop makes. Used by stage 0
// (chain_pipeline) and by the stage servers alike. Without a cache (host null or the
// cache off) every call is a cheap no-op that reports nothing.
#pragma once

#include "protocol/protocol.h"
#include "runtime/stage.h"
#include "transport/stage_cache_host.h"

#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace skippy::transport {

// The message a cache call serves, for its decision event (skippy.kv.request_id,
// skippy.kv.message_kind): the lane's request id on the wire and the message kind.
struct cache_call {
    uint64_t               request_id = 0;
    protocol::message_kind kind = protocol::message_kind::prefill;
};

// The longest prompt prefix, at most `limit` tokens, that this stage (`here`) and the
// stages below it (`below`; empty on the final stage) can all restore (docs/kv-cache.md
// §10, step 2). Each answers the longest prefix it holds of the length it is asked,
// the stages below already agreed among themselves. A stage whose prefixes restore
// only at whole checkpoints (recurrent layers) may not hold the shorter length a stage
// below answered: that length is asked again, here and then below, shorter each time,
// until the answers meet (at most max_rounds trips below). Below min_tokens, or with
// no agreement, 0. A KV-only chain agrees on the first trip.
result<int64_t> agree_on_prefix(int64_t limit, int64_t min_tokens, const std::function<int64_t(int64_t)> & here,
                                const std::function<result<int64_t>(int64_t)> & below, int max_rounds = 4);

class lane_cache {
public:
    lane_cache(stage_cache_host * host, int32_t lane) : host_(host), lane_(lane) {}

    // Starts a request: resets the lane's cache state and picks the namespace for the
    // client key. `mode` is the request's mode, capped by the stage's own.
    void configure(const std::string & cache_key, cache::cache_mode mode, int64_t prompt_tokens);
    void reset();

    bool lookups() const;
    bool records() const;
    int64_t min_tokens() const { return host_ ? host_->min_tokens() : 0; }

    // Tokens of `tokens` this stage could restore now (0 when below min_tokens).
    int64_t probe(std::span<const token_id> tokens, cache_call call);

    // Restores a cached prefix of `tokens` into the lane (see stage_cache::restore).
    cache::restore_result restore(std::span<const token_id> tokens, int64_t max_tokens, cache::lookup_kind kind, bool allow_short,
                                  cache_call call);

    // In-band on a Prefill at position 0: the forwarded frame and KV of the whole chunk.
    // On a hit, `frame_out` (tokens.size() * width floats) holds the chunk's output rows
    // and the KV is in place.
    bool restore_chunk_with_activation(std::span<const token_id> tokens, int32_t width, std::span<float> frame_out,
                                       cache::cache_counters & counters, cache_call call);
    void record_activation(std::span<const token_id> tokens, int32_t width, std::span<const float> frame);

    void rollback();
    // Stages with recurrent layers, records on: the lengths at which the stage should
    // snapshot its state while it computes the prompt chunk at pos_start (with its
    // branch point, stage_cache::prefill_checkpoints).
    std::vector<int64_t> prefill_checkpoints(int64_t pos_start, std::span<const token_id> chunk) const;
    // Records the snapshots the stage took (stage::take_captures), after their chunk
    // was noted. Returns the counters to report.
    cache::cache_counters record_checkpoints(std::vector<recurrent_state> captured, cache_call call);
    // Tokens whose KV the lane now holds: a prefilled chunk or a decoded token.
    void note_prefill(int64_t pos_start, std::span<const token_id> tokens);
    // After a prefilled chunk ending at `pos_end`: records the accumulated prompt when
    // the chunk was the prompt's last prefill chunk. Returns the counters to report.
    cache::cache_counters record_if_final(int64_t pos_end, bool prefill_final, cache_call call);
    // At Stop (the generation ended: stop, length or cancel): records the prompt and
    // every decoded token added since the last record, so the conversation's next turn
    // restores the answer too; then resets.
    cache::cache_counters stop(cache_call call);

private:
    cache::stage_cache * cache() const { return host_ ? host_->cache() : nullptr; }

    stage_cache_host *                    host_;
    int32_t                               lane_;
    std::optional<cache::cache_namespace> ns_;
    cache::cache_mode                     mode_ = cache::cache_mode::off;
    int64_t                               prompt_tokens_ = 0;
};

}  // namespace skippy::transport
