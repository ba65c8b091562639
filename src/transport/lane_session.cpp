#include "transport/lane_session.h"

namespace skippy::transport {

lane_session::lane_session(stage & st, stage_cache_host * cache, int32_t lane, int32_t stage_index)
    : stage_(st), lane_(lane), stage_index_(stage_index), n_embd_(st.hparams().n_embd), cache_(cache, lane) {}

result<token_id> lane_session::sample_last_row(token_logprobs * logprobs) {
    const int64_t rows = static_cast<int64_t>(hidden_.size()) / n_embd_;
    logits_.resize(static_cast<size_t>(stage_.hparams().n_vocab));
    stage_.logits(std::span<const float>(hidden_).subspan(static_cast<size_t>((rows - 1) * n_embd_)), 1, logits_);
    return sampler_->sample(logits_, logprobs);
}

lane_session::chunk_lookup lane_session::lookup_chunk(int64_t pos_start, std::span<const token_id> tokens, bool prefill_final,
                                                      std::span<float> out, cache::cache_counters & counters,
                                                      uint64_t request_id) {
    chunk_lookup found;
    if (pos_start != 0 || !cache_.lookups()) return found;
    const int64_t n = static_cast<int64_t>(tokens.size());
    const cache_call call{request_id, prefill_final ? protocol::message_kind::prefill_final : protocol::message_kind::prefill};
    if (!stage_.is_last()) {
        found.from_cache = cache_.restore_chunk_with_activation(tokens, n_embd_, out, counters, call);
        found.restored = found.from_cache ? n : 0;
        return found;
    }
    const auto r = cache_.restore(tokens, prefill_final ? n - 1 : n, cache::lookup_kind::in_band, true, call);
    counters.merge(r.counters);
    found.restored = r.restored_tokens;
    return found;
}

void lane_session::note_computed(int64_t pos_start, std::span<const token_id> tokens, std::span<const float> rows) {
    cache_.note_prefill(pos_start, tokens);
    if (!stage_.is_last() && pos_start == 0) cache_.record_activation(tokens, n_embd_, rows);
}

cache::cache_counters lane_session::record_checkpoints(uint64_t request_id, protocol::message_kind kind) {
    std::vector<recurrent_state> captured = stage_.take_captures(lane_);
    if (captured.empty()) return {};
    return cache_.record_checkpoints(std::move(captured), {request_id, kind});
}

status lane_session::compute(int64_t pos_start, std::span<const token_id> tokens, std::span<const float> act_in) {
    const int64_t n = static_cast<int64_t>(tokens.size());
    hidden_.resize(static_cast<size_t>(n * n_embd_));
    return stage_.forward(lane_, pos_start, tokens, act_in, n, hidden_);
}

protocol::activation_frame lane_session::output_frame(std::span<const float> rows) const {
    protocol::activation_frame frame;
    frame.dtype = protocol::activation_dtype::f32;
    frame.producer_stage = static_cast<uint32_t>(stage_index_);
    frame.layer_start = static_cast<uint32_t>(stage_.slice().range().start);
    frame.layer_end = static_cast<uint32_t>(stage_.slice().range().end);
    frame.n_embd = static_cast<uint32_t>(n_embd_);
    frame.values.assign(rows.begin(), rows.end());
    return frame;
}

void lane_session::reset() {
    cache_.reset();
    stop_sampling();
    step_counters = {};
    pending_stats = {};
    pending_forward_us_ = 0;
    stage_.truncate_lane(lane_, 0);
}

void session_lanes::before(step_item & item, std::span<float> out) {
    lane_session & s = *sessions_(item.lane);
    s.step_counters = {};
    if (item.kind == step_kind::decode) return;
    item.checkpoints = s.prefill_checkpoints(item.pos_start, item.tokens);
    if (!in_band_) return;
    const auto found =
        s.lookup_chunk(item.pos_start, item.tokens, item.kind == step_kind::prefill_final, out, s.step_counters, item.request_id);
    item.from_cache = found.from_cache;
    item.restored = found.restored;
}

void session_lanes::after(const step_item & item, std::span<const float> out) {
    if (item.kind == step_kind::decode) {
        // A decoded token's KV is now held too: the record at Stop covers the answer.
        sessions_(item.lane)->cache().note_prefill(item.pos_start, item.tokens);
        return;
    }
    const size_t skip = static_cast<size_t>(item.restored);
    const size_t n_embd = out.size() / item.tokens.size();
    lane_session & s = *sessions_(item.lane);
    s.note_computed(item.pos_start + item.restored, item.tokens.subspan(skip), out.subspan(skip * n_embd));
    const protocol::message_kind kind = item.kind == step_kind::prefill_final ? protocol::message_kind::prefill_final
                                                                              : protocol::message_kind::prefill;
    s.step_counters.merge(s.record_checkpoints(item.request_id, kind));
}

}  // namespace skippy::transport
