// What a generation loop needs from the stages that compute it, and the loop itself.
//
// A pipeline runs prefill chunks and decode steps for a lane across every stage of a
// chain and samples on the final stage. local_pipeline is a whole model in this
// process; the transport part provides the chain of stage processes. The generation
// loop (run_generation) is the same for both, so every front end (CLI, HTTP) shares it.
#pragma once

#include "base/status.h"
#include "runtime/sampler.h"
#include "runtime/scheduler.h"
#include "runtime/stage.h"
#include "runtime/step.h"

#include <chrono>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace skippy {

class pipeline_i {
public:
    virtual ~pipeline_i() = default;

    virtual int32_t n_lanes() const = 0;
    virtual int32_t ctx_size() const = 0;
    virtual int32_t n_vocab() const = 0;

    // Starts a request on `lane`: resets it, configures sampling on the final stage and,
    // with a prefix cache, restores what it can of the prompt (see cached_tokens).
    // prompt_tokens lets the final stage fill its penalty window. cache_key is the
    // client's cache namespace (prompt_cache_key; "" for the default): prefixes cached
    // under one key are never served to another (DESIGN §6).
    virtual status begin(int32_t lane, const sampling_config & sampling, std::span<const token_id> prompt_tokens,
                         std::string_view cache_key) = 0;

    // Computes tokens at positions [pos_start, pos_start + tokens.size()) without sampling.
    virtual status prefill(int32_t lane, int64_t pos_start, std::span<const token_id> tokens) = 0;

    // Computes `token` at `pos` and returns the token sampled after it.
    virtual result<token_id> decode(int32_t lane, int64_t pos, token_id token) = 0;
    // The logprobs of the token the lane's last decode() returned (sampling_config::
    // n_logprobs; empty when not asked for). Valid until the lane's next call.
    virtual const token_logprobs & last_logprobs(int32_t lane) const;

    // Ends the request on `lane` (stages may record what was computed, then reset it).
    virtual void end(int32_t lane) = 0;

    // Computes the prompt begin() was given up to its last token (which decode()
    // computes), from where begin()'s restore left off: positions [cached_tokens(),
    // n - 1), in chunks of at most chunk_tokens. `decodes` says whether decode() will
    // follow; a pipeline that meant to restore on the first decode restores now when
    // none follows, so that cached_tokens() counts only what was restored.
    // The default runs prefill() chunk by chunk.
    virtual status prefill_prompt(int32_t lane, std::span<const token_id> prompt, int32_t chunk_tokens, bool decodes);

    // Prompt positions [0, n) whose KV a prefix cache restored instead of computing.
    // After begin() prefill starts there; after the first decode it is final (a restore
    // that rode on that decode and missed was computed instead, and reads 0).
    virtual int64_t cached_tokens(int32_t lane) const { (void)lane; return 0; }

    // Which stages of the chain restored (hit) and recorded for the lane's current
    // request so far, bit i = stage i (the records end() makes come after).
    struct cache_stage_masks {
        uint64_t hit = 0;
        uint64_t record = 0;
    };
    virtual cache_stage_masks cache_masks(int32_t lane) const { (void)lane; return {}; }

    // A request on `lane` failed with `failure` before its first token existed (in
    // begin(), the prompt's prefill or the first decode), so nothing of it has reached
    // anyone. True when running it once more from begin() is worth it: the failure
    // was the pipeline's transport (a stage closed or could not be reached), not the
    // request's, nor a stage that is stuck (a retry would wait its deadline again).
    // The pipeline then gets ready to run it on a fresh lane (and counts it).
    // run_generation asks at most once per request, after end(lane). Default: never.
    virtual bool retry_before_first_token(int32_t lane, const status & failure) {
        (void)lane;
        (void)failure;
        return false;
    }
};

// A whole model in this process: one stage holding every layer, its lanes run by a
// lane_scheduler (decode batched across lanes, prompts chunked beside it) through the
// same step_runner every stage uses. No prefix cache.
class local_pipeline final : public pipeline_i {
public:
    explicit local_pipeline(std::unique_ptr<stage> whole_model, scheduler_options options = {});
    ~local_pipeline() override;

    int32_t n_lanes() const override { return stage_->n_lanes(); }
    int32_t ctx_size() const override { return stage_->ctx_size(); }
    int32_t n_vocab() const override { return stage_->hparams().n_vocab; }
    // No prefix cache here: the key is ignored.
    status begin(int32_t lane, const sampling_config & sampling, std::span<const token_id> prompt_tokens,
                 std::string_view cache_key) override;
    status prefill_prompt(int32_t lane, std::span<const token_id> prompt, int32_t chunk_tokens, bool decodes) override;
    status prefill(int32_t lane, int64_t pos_start, std::span<const token_id> tokens) override;
    result<token_id> decode(int32_t lane, int64_t pos, token_id token) override;
    const token_logprobs & last_logprobs(int32_t lane) const override;
    void end(int32_t lane) override;

    stage & model_stage() { return *stage_; }

private:
    struct lanes_view final : step_lanes_i {
        std::vector<std::unique_ptr<lane_sampler>> samplers;
        lane_sampler * sampler(int32_t lane) override { return samplers[static_cast<size_t>(lane)].get(); }
    };
    status check_lane(int32_t lane) const;

    std::unique_ptr<stage>          stage_;
    lanes_view                      lanes_;
    step_runner                     runner_;
    std::unique_ptr<lane_scheduler> scheduler_;
    std::vector<token_logprobs>     logprobs_;  // per lane
};

enum class finish_reason { length, stop, end_of_generation, cancelled };
const char * finish_reason_name(finish_reason r);

struct generation_request {
    std::vector<token_id> prompt;
    int32_t               max_tokens = 128;
    sampling_config       sampling;
    int32_t               prefill_chunk_tokens = 512;
    std::string           cache_key;  // prompt_cache_key: the client's cache namespace ("" for none)
    // End-of-generation ids (EOS, EOT): generation stops before emitting one.
    std::function<bool(token_id)> is_end_of_generation;
    // Called with each generated token; returning false stops generation (a stop
    // string matched, or the client went away).
    std::function<bool(token_id)> on_token;
    // With sampling.n_logprobs > 0: called with each generated token's logprobs just
    // before on_token (not for an end-of-generation token).
    std::function<void(token_id, const token_logprobs &)> on_logprobs;
};

struct generation_result {
    std::vector<token_id> tokens;
    std::vector<token_logprobs> logprobs;  // one per token when sampling.n_logprobs > 0, else empty
    int64_t               prompt_tokens = 0;
    int64_t               cached_tokens = 0;
    uint64_t              cache_hit_stage_mask = 0;     // pipeline_i::cache_masks at the last token
    uint64_t              cache_record_stage_mask = 0;
    finish_reason         finish = finish_reason::length;
    double                ttft_ms = 0;
    double                total_ms = 0;
};

// Runs one request on `lane`: prefill prompt[0, n-1) in chunks, then decode from the
// last prompt token on. Errors (empty prompt, prompt + max_tokens beyond the context,
// a stage failure) are returned; the lane is ended in every case. A failure before the
// first token is retried once from the start when the pipeline says so
// (retry_before_first_token); the retry sees the same request (seed included), so its
// tokens are those a clean run gives.
result<generation_result> run_generation(pipeline_i & pipeline, int32_t lane, const generation_request & request);

}  // namespace skippy
