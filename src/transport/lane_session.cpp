#include "transport/lane_session.h"

namespace skippy::transport {

lane_session::lane_session(stage & st, stage_cache_host * cache, int32_t lane, int32_t stage_index)
    : stage_(st), lane_(lane), stage_index_(stage_index), n_embd_(st.hparams().n_embd), cache_(cache, lane) {}

void lane_session::start_sampling(sampling_config config) {
    sampler_ = std::make_unique<sampler>(std::move(config));
    sequence_.clear();
}

void lane_session::stop_sampling() {
    sampler_.reset();
    sequence_.clear();
}

void lane_session::track_tokens(int64_t pos_start, std::span<const token_id> tokens) {
    sequence_.resize(static_cast<size_t>(std::min<int64_t>(pos_start, static_cast<int64_t>(sequence_.size()))));
    sequence_.insert(sequence_.end(), tokens.begin(), tokens.end());
}

void lane_session::trim_tokens(int64_t n_tokens) {
    if (static_cast<int64_t>(sequence_.size()) > n_tokens) sequence_.resize(static_cast<size_t>(std::max<int64_t>(n_tokens, 0)));
}

token_id lane_session::sample_last_row() {
    const int64_t rows = static_cast<int64_t>(hidden_.size()) / n_embd_;
    logits_.resize(static_cast<size_t>(stage_.hparams().n_vocab));
    stage_.logits(std::span<const float>(hidden_).subspan(static_cast<size_t>((rows - 1) * n_embd_)), 1, logits_);
    sampler_->set_history(sequence_);
    return sampler_->sample(logits_);
}

lane_session::chunk_lookup lane_session::lookup_chunk(int64_t pos_start, std::span<const token_id> tokens, bool prefill_final,
                                                      cache::cache_counters & counters) {
    chunk_lookup out;
    if (pos_start != 0 || !cache_.lookups()) return out;
    const int64_t n = static_cast<int64_t>(tokens.size());
    if (!stage_.is_last()) {
        out.from_cache = cache_.restore_chunk_with_activation(tokens, n_embd_, hidden_, counters);
        out.restored = out.from_cache ? n : 0;
        return out;
    }
    const auto r = cache_.restore(tokens, prefill_final ? n - 1 : n, cache::lookup_kind::in_band, true);
    counters.merge(r.counters);
    out.restored = r.restored_tokens;
    return out;
}

status lane_session::compute(int64_t pos_start, std::span<const token_id> tokens, std::span<const float> act_in) {
    const int64_t n = static_cast<int64_t>(tokens.size());
    hidden_.resize(static_cast<size_t>(n * n_embd_));
    return stage_.forward(lane_, pos_start, tokens, act_in, n, hidden_);
}

void lane_session::note_computed(int64_t pos_start, std::span<const token_id> tokens) {
    cache_.note_prefill(pos_start, tokens);
    if (!stage_.is_last() && pos_start == 0) cache_.record_activation(tokens, n_embd_, hidden_);
}

void lane_session::fill_output_frame(protocol::activation_frame & frame) const {
    frame.dtype = protocol::activation_dtype::f32;
    frame.producer_stage = static_cast<uint32_t>(stage_index_);
    frame.layer_start = static_cast<uint32_t>(stage_.slice().range().start);
    frame.layer_end = static_cast<uint32_t>(stage_.slice().range().end);
    frame.n_embd = static_cast<uint32_t>(n_embd_);
    frame.values.assign(hidden_.begin(), hidden_.end());
}

protocol::activation_frame lane_session::output_frame() const {
    protocol::activation_frame frame;
    fill_output_frame(frame);
    return frame;
}

void lane_session::reset() {
    cache_.reset();
    stop_sampling();
    pending_stats = {};
    pending_forward_us_ = 0;
    stage_.truncate_lane(lane_, 0);
}

}  // namespace skippy::transport
