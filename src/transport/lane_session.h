// What one lane holds on one stage for the life of a request, and the parts of the lane
// loop that are the same on every stage (docs/transport.md, "Lanes and steps"): the
// lane's view of the prefix cache, the in-band lookup of a prompt chunk and the
// bookkeeping after it is computed, the activation frame a stage forwards, and on the
// final stage the sampler with its penalty window. Stage 0 (chain_pipeline) and the
// stage servers drive their lanes through it; session_lanes hands a step's lanes to
// step_runner.
//
// Not thread-safe: one thread drives a lane at a time.
#pragma once

#include "protocol/protocol.h"
#include "runtime/stage.h"
#include "runtime/step.h"
#include "transport/lane_cache.h"

#include <algorithm>
#include <functional>
#include <memory>
#include <span>
#include <utility>
#include <vector>

namespace skippy::transport {

class lane_session {
public:
    // REQUIRES: `st` and `cache` (may be null: no cache) outlive the session; lane is
    // one of st's lanes.
    lane_session(stage & st, stage_cache_host * cache, int32_t lane, int32_t stage_index);

    int32_t lane() const { return lane_; }
    lane_cache & cache() { return cache_; }

    // ---- the final stage's sampler
    // A fresh sampler with an empty penalty window, under config's grammar when it has
    // one (compiled through the stage's constraint cache; a bad grammar is
    // invalid_argument and leaves the lane without a sampler).
    status start_sampling(sampling_config config) {
        sampler_.reset();
        SKIPPY_ASSIGN_OR_RETURN(sampler_, lane_sampler::make(std::move(config), &stage_.constraints()));
        return status::ok();
    }
    void stop_sampling() { sampler_.reset(); }
    bool sampling() const { return sampler_ != nullptr; }
    lane_sampler * sampler() { return sampler_.get(); }
    // The lane now holds `tokens` at positions [pos_start, +n) (no-op without a sampler).
    void track_tokens(int64_t pos_start, std::span<const token_id> tokens) {
        if (sampler_) sampler_->track(pos_start, tokens);
    }
    void trim_tokens(int64_t n_tokens) {
        if (sampler_) sampler_->trim(n_tokens);
    }
    // Samples the token after the last row of hidden(). REQUIRES: sampling(), and the
    // stage is the last.
    // `runtime` if a logit is not finite.
    // `logprobs` receives the token's logprobs (empty unless asked for).
    result<token_id> sample_last_row(token_logprobs * logprobs = nullptr);

    // ---- prompt chunks
    struct chunk_lookup {
        bool    from_cache = false;  // KV and output frame both restored: out holds the frame
        int64_t restored = 0;        // leading tokens whose KV was restored
    };
    // The in-band lookup of a prompt chunk at position 0 (docs/kv-cache.md §10, step
    // 5): a non-final stage restores the chunk's KV and the frame it forwarded for it
    // (into out, tokens.size() rows), or nothing; the final stage the longest prefix it
    // holds (for PrefillFinal, all but the last token, which must be computed to
    // sample). Anywhere but position 0, or with lookups off, nothing.
    chunk_lookup lookup_chunk(int64_t pos_start, std::span<const token_id> tokens, bool prefill_final, std::span<float> out,
                              cache::cache_counters & counters, uint64_t request_id = 0);
    // After prompt tokens [pos_start, +n) were computed into `rows`: notes them for the
    // record and, on a non-final stage at position 0, records the frame it forwards.
    void note_computed(int64_t pos_start, std::span<const token_id> tokens, std::span<const float> rows);
    // Stages with recurrent layers: the lengths at which to snapshot the state while
    // computing the prompt chunk at pos_start (step_item::checkpoints), and the
    // records of the snapshots the stage took (after note_computed). Returns the
    // records' counters.
    std::vector<int64_t> prefill_checkpoints(int64_t pos_start, std::span<const token_id> chunk) const {
        return cache_.prefill_checkpoints(pos_start, chunk);
    }
    cache::cache_counters record_checkpoints(uint64_t request_id, protocol::message_kind kind);

    // ---- one-token compute outside a step (TryRestorePrefillDecode)
    // Runs the stage's layers on `tokens` at pos_start into hidden() (act_in: the rows
    // from upstream on stages after the first).
    status compute(int64_t pos_start, std::span<const token_id> tokens, std::span<const float> act_in);
    std::vector<float> & hidden() { return hidden_; }
    // The frame of hidden() rows as this stage forwards it.
    protocol::activation_frame output_frame() const { return output_frame(hidden_); }
    protocol::activation_frame output_frame(std::span<const float> rows) const;

    // Counters of the lane's cache in the current step (session_lanes adds to them).
    cache::cache_counters step_counters;

    // Stats the final stage holds until its next reply to stage 0, and a forward time
    // reported with the lane's next message (docs/protocol.md, max_forward_us).
    protocol::stats_block pending_stats;
    void note_forward_us(uint32_t us) { pending_forward_us_ = std::max(pending_forward_us_, us); }
    uint32_t take_pending_forward_us() { return std::exchange(pending_forward_us_, 0); }

    // Back to idle: cache state, sampler, pending stats; the lane's KV truncated.
    void reset();

private:
    stage &                       stage_;
    const int32_t                 lane_;
    const int32_t                 stage_index_;
    const int32_t                 n_embd_;
    lane_cache                    cache_;
    std::unique_ptr<lane_sampler> sampler_;
    std::vector<float>            hidden_, logits_;
    uint32_t                      pending_forward_us_ = 0;
};

// A step's view of the lanes of one stage: the in-band lookup before a prompt chunk
// (when `in_band`: every stage but a one-stage chain's, which restored in begin()),
// the bookkeeping after it, and the samplers. Counters go to each session's
// step_counters.
class session_lanes final : public step_lanes_i {
public:
    using lookup_fn = std::function<lane_session *(int32_t lane)>;
    session_lanes(lookup_fn sessions, bool in_band) : sessions_(std::move(sessions)), in_band_(in_band) {}

    void before(step_item & item, std::span<float> out) override;
    void after(const step_item & item, std::span<const float> out) override;
    lane_sampler * sampler(int32_t lane) override { return sessions_(lane)->sampler(); }

private:
    lookup_fn  sessions_;
    const bool in_band_;
};

}  // namespace skippy::transport
