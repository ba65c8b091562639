#include "runtime/pipeline.h"

#include <algorithm>
#include <optional>
#include <utility>

namespace skippy {

local_pipeline::local_pipeline(std::unique_ptr<stage> whole_model, scheduler_options options)
    : stage_(std::move(whole_model)), runner_(*stage_) {
    lanes_.samplers.resize(static_cast<size_t>(stage_->n_lanes()));
    logprobs_.resize(static_cast<size_t>(stage_->n_lanes()));
    scheduler_ = std::make_unique<lane_scheduler>(stage_->n_lanes(), options,
                                                  [this](std::span<step_item> items) { runner_.run(items, lanes_); });
}

local_pipeline::~local_pipeline() { scheduler_->stop(); }

status local_pipeline::check_lane(int32_t lane) const {
    if (lane < 0 || lane >= n_lanes()) return make_error(error_code::invalid_argument, "no such lane");
    return status::ok();
}

status local_pipeline::begin(int32_t lane, const sampling_config & sampling, std::span<const token_id>, std::string_view) {
    SKIPPY_TRY(check_lane(lane));
    SKIPPY_TRY(sampling.validate(n_vocab()));
    stage_->truncate_lane(lane, 0);
    SKIPPY_ASSIGN_OR_RETURN(lanes_.samplers[static_cast<size_t>(lane)], lane_sampler::make(sampling, &stage_->constraints()));
    return status::ok();
}

// The whole rest of the prompt goes to the scheduler at once: it cuts the chunks,
// smaller while other lanes decode.
status local_pipeline::prefill_prompt(int32_t lane, std::span<const token_id> prompt, int32_t chunk_tokens, bool) {
    SKIPPY_TRY(check_lane(lane));
    if (prompt.size() < 2) return status::ok();
    return scheduler_->prefill(lane, 0, prompt.first(prompt.size() - 1), chunk_tokens);
}

status local_pipeline::prefill(int32_t lane, int64_t pos_start, std::span<const token_id> tokens) {
    SKIPPY_TRY(check_lane(lane));
    return scheduler_->prefill(lane, pos_start, tokens, static_cast<int32_t>(std::max<size_t>(tokens.size(), 1)));
}

result<token_id> local_pipeline::decode(int32_t lane, int64_t pos, token_id token) {
    SKIPPY_TRY(check_lane(lane));
    if (!lanes_.samplers[static_cast<size_t>(lane)]) return make_error(error_code::internal, "decode before begin");
    return scheduler_->decode(lane, pos, token, &logprobs_[static_cast<size_t>(lane)]);
}

const token_logprobs & pipeline_i::last_logprobs(int32_t) const {
    static const token_logprobs none;
    return none;
}

const token_logprobs & local_pipeline::last_logprobs(int32_t lane) const {
    if (!check_lane(lane).is_ok()) return pipeline_i::last_logprobs(lane);
    return logprobs_[static_cast<size_t>(lane)];
}

void local_pipeline::end(int32_t lane) {
    if (!check_lane(lane).is_ok()) return;
    scheduler_->end(lane);
    stage_->truncate_lane(lane, 0);
    lanes_.samplers[static_cast<size_t>(lane)].reset();
}

status pipeline_i::prefill_prompt(int32_t lane, std::span<const token_id> prompt, int32_t chunk_tokens, bool) {
    const int64_t n_prefill = static_cast<int64_t>(prompt.size()) - 1;
    const int64_t from = std::clamp<int64_t>(cached_tokens(lane), 0, std::max<int64_t>(n_prefill, 0));
    for (int64_t pos = from; pos < n_prefill; pos += chunk_tokens) {
        const int64_t n = std::min<int64_t>(chunk_tokens, n_prefill - pos);
        SKIPPY_TRY(prefill(lane, pos, prompt.subspan(static_cast<size_t>(pos), static_cast<size_t>(n))));
    }
    return status::ok();
}

const char * finish_reason_name(finish_reason r) {
    switch (r) {
        case finish_reason::length: return "length";
        case finish_reason::stop: return "stop";
        case finish_reason::end_of_generation: return "stop";
        case finish_reason::cancelled: return "cancelled";
    }
    return "stop";
}

namespace {

double elapsed_ms(std::chrono::steady_clock::time_point since) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - since).count();
}

// Ends the lane however the request leaves the loop (unless released).
struct lane_guard {
    pipeline_i & pipeline;
    int32_t      lane;
    bool         held = true;
    ~lane_guard() {
        if (held) pipeline.end(lane);
    }
};

// Everything before the first token: begin(), the prompt and, when tokens are wanted,
// the first decode (the last prompt token, which samples the first new one). Positions
// a prefix cache restored in begin() are not computed again. On failure the lane has
// been ended (when begin() took it); on success it is the caller's to end.
result<std::optional<token_id>> run_to_first_token(pipeline_i & pipeline, int32_t lane, const generation_request & request) {
    SKIPPY_TRY(pipeline.begin(lane, request.sampling, request.prompt, request.cache_key));
    lane_guard guard{pipeline, lane};
    const bool decodes = request.max_tokens > 0;
    SKIPPY_TRY(pipeline.prefill_prompt(lane, request.prompt, request.prefill_chunk_tokens, decodes));
    std::optional<token_id> first;
    if (decodes) {
        const int64_t last = static_cast<int64_t>(request.prompt.size()) - 1;
        SKIPPY_ASSIGN_OR_RETURN(first, pipeline.decode(lane, last, request.prompt.back()));
    }
    guard.held = false;
    return first;
}

}  // namespace

result<generation_result> run_generation(pipeline_i & pipeline, int32_t lane, const generation_request & request) {
    const auto t_start = std::chrono::steady_clock::now();
    const int64_t n_prompt = static_cast<int64_t>(request.prompt.size());
    if (n_prompt == 0) return make_error(error_code::invalid_argument, "the prompt is empty (no tokens)");
    if (request.max_tokens < 0) return make_error(error_code::invalid_argument, "max_tokens must be >= 0");
    if (request.prefill_chunk_tokens < 1) return make_error(error_code::invalid_argument, "prefill chunk must be >= 1 token");
    if (n_prompt > pipeline.ctx_size()) {
        return make_error(error_code::invalid_argument, "the prompt has " + std::to_string(n_prompt) +
                                                            " tokens, more than the context of " +
                                                            std::to_string(pipeline.ctx_size()));
    }
    for (token_id t : request.prompt) {
        if (t < 0 || t >= pipeline.n_vocab()) {
            return make_error(error_code::invalid_argument, "prompt token " + std::to_string(t) + " is outside the vocabulary");
        }
    }

    generation_result out;
    out.prompt_tokens = n_prompt;
    auto first = run_to_first_token(pipeline, lane, request);
    // Nothing has reached the caller yet (on_token, on_logprobs): the pipeline may
    // have the request run again, once.
    if (!first.is_ok() && pipeline.retry_before_first_token(lane, first.error())) first = run_to_first_token(pipeline, lane, request);
    if (!first.is_ok()) return first.error();
    lane_guard guard{pipeline, lane};
    // A restore that rode on the first decode may have missed (and been computed
    // instead): cached_tokens is final only now.
    out.cached_tokens = pipeline.cached_tokens(lane);

    auto note_masks = [&] {
        const pipeline_i::cache_stage_masks m = pipeline.cache_masks(lane);
        out.cache_hit_stage_mask = m.hit;
        out.cache_record_stage_mask = m.record;
    };
    if (request.max_tokens == 0) {
        out.ttft_ms = out.total_ms = elapsed_ms(t_start);
        note_masks();
        return out;
    }
    out.ttft_ms = elapsed_ms(t_start);
    token_id current = request.prompt.back();
    int64_t pos = n_prompt - 1;
    std::optional<token_id> pending = *first;  // decoded at pos already
    while (static_cast<int32_t>(out.tokens.size()) < request.max_tokens) {
        if (pos >= pipeline.ctx_size()) break;  // context full: finish with "length"
        token_id next = 0;
        if (pending) {
            next = *std::exchange(pending, std::nullopt);
        } else {
            SKIPPY_ASSIGN_OR_RETURN(next, pipeline.decode(lane, pos, current));
        }
        if (request.is_end_of_generation && request.is_end_of_generation(next)) {
            out.finish = finish_reason::end_of_generation;
            break;
        }
        out.tokens.push_back(next);
        if (request.sampling.n_logprobs > 0) {
            const token_logprobs & lp = pipeline.last_logprobs(lane);
            out.logprobs.push_back(lp);
            if (request.on_logprobs) request.on_logprobs(next, lp);
        }
        if (request.on_token && !request.on_token(next)) {
            out.finish = finish_reason::stop;
            break;
        }
        current = next;
        ++pos;
    }
    out.total_ms = elapsed_ms(t_start);
    note_masks();
    return out;
}

}  // namespace skippy
