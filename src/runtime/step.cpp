#include "runtime/step.h"

#include <algorithm>
#include <bit>
#include <limits>
#include <cstring>

namespace skippy {

result<std::unique_ptr<lane_sampler>> lane_sampler::make(sampling_config config, constraint_cache * constraints) {
    if (config.grammar.empty()) return std::make_unique<lane_sampler>(std::move(config));
    if (!constraints) return make_error(error_code::unsupported, "grammar: this stage cannot constrain its output");
    SKIPPY_ASSIGN_OR_RETURN(auto compiled, constraints->get(config.grammar));
    config.grammar.clear();  // compiled: the sampler itself never reads it
    auto s = std::make_unique<lane_sampler>(std::move(config));
    s->vocab_ = std::move(compiled.vocab);
    s->matcher_ = std::make_unique<grammar::matcher>(std::move(compiled.grammar));
    return s;
}

void lane_sampler::track(int64_t pos_start, std::span<const token_id> tokens) {
    sequence_.resize(static_cast<size_t>(std::clamp<int64_t>(pos_start, 0, static_cast<int64_t>(sequence_.size()))));
    sequence_.insert(sequence_.end(), tokens.begin(), tokens.end());
}

void lane_sampler::trim(int64_t n_tokens) {
    if (static_cast<int64_t>(sequence_.size()) > n_tokens) sequence_.resize(static_cast<size_t>(std::max<int64_t>(n_tokens, 0)));
}

status lane_sampler::catch_up() {
    const int64_t n = static_cast<int64_t>(sequence_.size());
    if (output_start_ < 0) output_start_ = n;  // the first draw follows the prompt
    if (n < output_start_ + n_fed_) {
        // Positions the matcher had consumed were dropped: start the output again.
        matcher_->reset();
        n_fed_ = 0;
        output_start_ = std::min(output_start_, n);
    }
    for (int64_t pos = output_start_ + n_fed_; pos < n; ++pos) {
        const token_id id = sequence_[static_cast<size_t>(pos)];
        status st = matcher_->advance_token(*vocab_, id);
        if (!st.is_ok()) {
            return make_error(error_code::invalid_argument, "grammar: the output token " + std::to_string(id) +
                                                                " at position " + std::to_string(pos) +
                                                                " does not continue the grammar: " + st.message());
        }
        ++n_fed_;
    }
    return status::ok();
}

status lane_sampler::mask(std::span<float> logits) {
    SKIPPY_TRY(matcher_->allowed_tokens(*vocab_, mask_));
    if (mask_.count() == 0) {
        return make_error(error_code::invalid_argument,
                          "grammar: dead end: the grammar can go on, but no token of the vocabulary continues it");
    }
    constexpr float banned = -std::numeric_limits<float>::infinity();
    const auto & words = mask_.words();
    for (size_t w = 0; w < words.size(); ++w) {
        uint64_t refused = ~words[w];
        while (refused) {
            const size_t id = w * 64 + static_cast<size_t>(std::countr_zero(refused));
            refused &= refused - 1;
            if (id >= logits.size()) break;
            logits[id] = banned;
        }
    }
    return status::ok();
}

result<token_id> lane_sampler::sample(std::span<float> logits, token_logprobs * logprobs) {
    const int32_t n_logprobs = sampler_.config().n_logprobs;
    auto report = [&](token_id id) -> token_id {
        if (logprobs) {
            if (n_logprobs > 0) {
                compute_logprobs(logits, id, n_logprobs, *logprobs);
            } else {
                *logprobs = {};
            }
        }
        return id;
    };
    sampler_.set_history(sequence_);
    if (!matcher_) {
        SKIPPY_TRY(sampler::check_finite(logits));
        sampler_.adjust(logits);
        return report(sampler_.pick(logits));
    }
    SKIPPY_TRY(sampler::check_finite(logits));
    SKIPPY_TRY(catch_up());
    if (static_cast<int64_t>(logits.size()) != vocab_->n_vocab()) {
        return make_error(error_code::invalid_argument, "grammar: the model has " + std::to_string(logits.size()) +
                                                            " logits but its vocabulary " + std::to_string(vocab_->n_vocab()) +
                                                            " tokens");
    }
    sampler_.adjust(logits);
    const token_id favourite = sampler_.pick(logits);
    if (matcher_->accepts_token(*vocab_, favourite)) {
        // The draw never needed the mask; the reported distribution does (the same
        // token either way: the mask keeps the favourite).
        if (logprobs && n_logprobs > 0) SKIPPY_TRY(mask(logits));
        return report(favourite);
    }
    SKIPPY_TRY(mask(logits));
    ++n_masked_draws_;
    return report(sampler_.pick(logits));
}

std::span<const float> step_runner::rows(const step_item & item) const {
    const size_t n_embd = static_cast<size_t>(stage_.hparams().n_embd);
    return std::span<const float>(out_).subspan(item.out_offset, item.tokens.size() * n_embd);
}

void step_runner::run(std::span<step_item> items, step_lanes_i & lanes) {
    const int64_t n_embd = stage_.hparams().n_embd;
    const bool first = stage_.is_first(), last = stage_.is_last();
    size_t total = 0;
    for (step_item & it : items) {
        it.out_offset = total;
        total += it.tokens.size() * static_cast<size_t>(n_embd);
    }
    out_.resize(total);

    // Lookups, and the spans left to compute.
    spans_.clear();
    span_item_.clear();
    size_t n_in = 0;
    for (size_t i = 0; i < items.size(); ++i) {
        step_item & it = items[i];
        it.result = status::ok();
        it.restored = 0;
        it.from_cache = false;
        it.checkpoints.clear();
        it.sampled = -1;
        it.logprobs = {};
        const int64_t n = static_cast<int64_t>(it.tokens.size());
        if (n == 0) {
            it.result = make_error(error_code::invalid_argument, "a step item needs at least one token");
            continue;
        }
        if (!first && it.rows_in.size() != static_cast<size_t>(n * n_embd)) {
            it.result = make_error(error_code::invalid_argument, "activation frame holds " + std::to_string(it.rows_in.size()) +
                                                                     " floats, expected " + std::to_string(n * n_embd));
            continue;
        }
        if (last && !lanes.sampler(it.lane)) {
            it.result = make_error(error_code::invalid_data, "prefill/decode before ConfigureGeneration");
            continue;
        }
        lanes.before(it, std::span<float>(out_).subspan(it.out_offset, static_cast<size_t>(n * n_embd)));
        if (it.from_cache || it.restored >= n) continue;  // nothing left to compute
        spans_.push_back({it.lane, it.pos_start + it.restored, n - it.restored, it.checkpoints});
        span_item_.push_back(i);
        n_in += static_cast<size_t>((n - it.restored) * n_embd);
    }

    // The computed rows' inputs, packed in span order.
    x_.resize(n_in);
    size_t at = 0;
    for (size_t k = 0; k < spans_.size(); ++k) {
        step_item & it = items[span_item_[k]];
        const size_t n = static_cast<size_t>(spans_[k].n_tokens * n_embd);
        if (first) {
            it.result = stage_.slice().embed(it.tokens.subspan(static_cast<size_t>(it.restored)), x_.data() + at);
        } else {
            std::memcpy(x_.data() + at, it.rows_in.data() + it.restored * n_embd, n * sizeof(float));
        }
        at += n;
    }
    // A token outside the vocabulary fails its item before the pass.
    if (std::any_of(span_item_.begin(), span_item_.end(), [&](size_t i) { return !items[i].result.is_ok(); })) {
        size_t from = 0, to = 0, kept = 0;
        for (size_t k = 0; k < spans_.size(); ++k) {
            const size_t n = static_cast<size_t>(spans_[k].n_tokens * n_embd);
            if (items[span_item_[k]].result.is_ok()) {
                if (from != to) std::memmove(x_.data() + to, x_.data() + from, n * sizeof(float));
                spans_[kept] = spans_[k];
                span_item_[kept] = span_item_[k];
                ++kept;
                to += n;
            }
            from += n;
        }
        spans_.resize(kept);
        span_item_.resize(kept);
        x_.resize(to);
    }

    span_status_.assign(spans_.size(), status::ok());
    if (!spans_.empty()) stage_.forward_batch(spans_, x_.data(), span_status_);

    at = 0;
    for (size_t k = 0; k < spans_.size(); ++k) {
        step_item & it = items[span_item_[k]];
        const size_t n = static_cast<size_t>(spans_[k].n_tokens * n_embd);
        if (span_status_[k].is_ok()) {
            std::memcpy(out_.data() + it.out_offset + static_cast<size_t>(it.restored * n_embd), x_.data() + at, n * sizeof(float));
            lanes.after(it, rows(it));
        } else {
            it.result = span_status_[k];
        }
        at += n;
    }
    if (!last) return;

    // The final stage: every lane's window follows its positions; the rows that sample
    // go through the head in one pass.
    last_rows_.clear();
    for (step_item & it : items) {
        if (!it.result.is_ok()) continue;
        lanes.sampler(it.lane)->track(it.pos_start, it.tokens);
        if (!samples(it.kind)) continue;
        const float * row = out_.data() + it.out_offset + (it.tokens.size() - 1) * static_cast<size_t>(n_embd);
        last_rows_.insert(last_rows_.end(), row, row + n_embd);
    }
    const int64_t n_rows = static_cast<int64_t>(last_rows_.size()) / n_embd;
    if (n_rows == 0) return;
    const int64_t n_vocab = stage_.hparams().n_vocab;
    logits_.resize(static_cast<size_t>(n_rows * n_vocab));
    stage_.logits(last_rows_, n_rows, logits_);
    int64_t r = 0;
    for (step_item & it : items) {
        if (!it.result.is_ok() || !samples(it.kind)) continue;
        auto sampled = lanes.sampler(it.lane)->sample(std::span<float>(logits_).subspan(static_cast<size_t>(r * n_vocab), static_cast<size_t>(n_vocab)),
                                                      &it.logprobs);
        ++r;
        if (sampled.is_ok()) {
            it.sampled = sampled.value();
        } else {
            it.result = sampled.error();
        }
    }
}

}  // namespace skippy
