#include "transport/lane_cache.h"

#include "base/log.h"

#include <algorithm>
#include <cstring>

namespace skippy::transport {

result<int64_t> agree_on_prefix(int64_t limit, int64_t min_tokens, const std::function<int64_t(int64_t)> & here,
                                const std::function<result<int64_t>(int64_t)> & below, int max_rounds) {
    int64_t n = here(limit);
    if (n < min_tokens) return int64_t{0};
    if (!below) return n;
    for (int round = 0; round < max_rounds; ++round) {
        SKIPPY_ASSIGN_OR_RETURN(int64_t m, below(n));
        m = std::min(m, n);
        if (m < min_tokens) return int64_t{0};
        if (m == n) return n;
        // The stages below restore exactly m: does this one?
        const int64_t again = here(m);
        if (again < min_tokens) return int64_t{0};
        if (again == m) return m;
        n = again;
    }
    return int64_t{0};
}

void lane_cache::configure(const std::string & cache_key, cache::cache_mode mode, int64_t prompt_tokens) {
    reset();
    prompt_tokens_ = prompt_tokens;
    if (!cache()) return;
    const cache::cache_mode stage_mode = cache()->config().mode;
    mode_ = static_cast<int>(mode) < static_cast<int>(stage_mode) ? mode : stage_mode;
    auto ns = host_->namespace_for(cache_key);
    if (ns.is_ok()) {
        ns_ = *ns;
    } else {
        SKIPPY_LOG_WARN("stage %d: no cache namespace: %s", host_->stage_index(), ns.error().to_string().c_str());
        mode_ = cache::cache_mode::off;
    }
}

void lane_cache::reset() {
    if (cache()) cache()->reset_session(lane_);
    ns_.reset();
    mode_ = cache::cache_mode::off;
    prompt_tokens_ = 0;
}

bool lane_cache::lookups() const { return cache() && ns_ && mode_ == cache::cache_mode::lookup_record; }
bool lane_cache::records() const { return cache() && ns_ && mode_ != cache::cache_mode::off; }

int64_t lane_cache::probe(std::span<const token_id> tokens, cache_call call) {
    if (!lookups()) return 0;
    cache::probe_request req;
    req.ns = *ns_;
    req.tokens = tokens;
    req.max_tokens = static_cast<int64_t>(tokens.size());
    req.session = lane_;
    req.request_id = call.request_id;
    req.message_kind = protocol::message_kind_name(call.kind);
    const cache::probe_result r = cache()->probe(req);
    return r.outcome == cache::lookup_outcome::miss ? 0 : r.restorable_tokens;
}

cache::restore_result lane_cache::restore(std::span<const token_id> tokens, int64_t max_tokens, cache::lookup_kind kind,
                                          bool allow_short, cache_call call) {
    if (!lookups()) return {};
    cache::restore_request req;
    req.ns = *ns_;
    req.session = lane_;
    req.tokens = tokens;
    req.max_tokens = max_tokens;
    req.kind = kind;
    req.allow_short = allow_short;
    req.request_id = call.request_id;
    req.message_kind = protocol::message_kind_name(call.kind);
    return cache()->restore(req);
}

bool lane_cache::restore_chunk_with_activation(std::span<const token_id> tokens, int32_t width, std::span<float> frame_out,
                                               cache::cache_counters & counters, cache_call call) {
    if (!lookups()) return false;
    cache::activation_restore_request req;
    req.ns = *ns_;
    req.session = lane_;
    req.tokens = tokens;
    req.width = width;
    req.request_id = call.request_id;
    req.message_kind = protocol::message_kind_name(call.kind);
    cache::activation_restore_result r = cache()->restore_with_activation(req);
    counters.merge(r.kv.counters);
    const size_t want_bytes = tokens.size() * static_cast<size_t>(width) * sizeof(float);
    if (r.outcome != cache::activation_outcome::hit || !r.frame || r.frame->size() != want_bytes ||
        frame_out.size() * sizeof(float) != want_bytes) {
        if (r.kv.restored_tokens > 0) rollback();  // KV without its frame: the chunk is recomputed whole
        return false;
    }
    std::memcpy(frame_out.data(), r.frame->data(), want_bytes);
    return true;
}

void lane_cache::record_activation(std::span<const token_id> tokens, int32_t width, std::span<const float> frame) {
    if (!records()) return;
    std::vector<uint8_t> bytes(frame.size() * sizeof(float));
    std::memcpy(bytes.data(), frame.data(), bytes.size());
    (void)cache()->record_activation(*ns_, tokens, width, std::move(bytes));
}

void lane_cache::rollback() {
    if (cache()) cache()->rollback_session(lane_);
}

std::vector<int64_t> lane_cache::prefill_checkpoints(int64_t pos_start, std::span<const token_id> chunk) const {
    if (!records()) return {};
    return cache()->prefill_checkpoints(*ns_, lane_, pos_start, chunk);
}

cache::cache_counters lane_cache::record_checkpoints(std::vector<recurrent_state> captured, cache_call call) {
    cache::cache_counters c;
    if (!records() || !host_->backend()) return c;
    for (recurrent_state & state : captured) {
        const int64_t n = state.n_tokens();
        cache::record_request req{*ns_, lane_, cache::record_reason::checkpoint, call.request_id, protocol::message_kind_name(call.kind)};
        c.merge(cache()->record_checkpoint(req, n, host_->backend()->wrap(std::move(state))).counters);
    }
    return c;
}

void lane_cache::note_prefill(int64_t pos_start, std::span<const token_id> tokens) {
    if (records()) cache()->note_prefill(lane_, pos_start, tokens);
}

cache::cache_counters lane_cache::record_if_final(int64_t pos_end, bool prefill_final, cache_call call) {
    if (!records()) return {};
    // The last prompt token always runs through decode, so the prefill of a prompt of
    // n tokens ends at n - 1 (or at n for PrefillFinal, which samples itself).
    const int64_t prefill_end = prefill_final ? prompt_tokens_ : prompt_tokens_ - 1;
    if (pos_end != prefill_end) return {};
    return cache()->record(cache::record_request{*ns_, lane_, cache::record_reason::final_prefill, call.request_id,
                                                 protocol::message_kind_name(call.kind)}).counters;
}

cache::cache_counters lane_cache::stop(cache_call call) {
    cache::cache_counters c;
    if (records()) {
        c = cache()->record(cache::record_request{*ns_, lane_, cache::record_reason::stop, call.request_id,
                                                  protocol::message_kind_name(call.kind)}).counters;
    }
    reset();
    return c;
}

}  // namespace skippy::transport
