#include "runtime/sampler.h"

#include "kernels/kernels.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <unordered_map>

namespace skippy {

status sampling_config::validate() const {
    using b = sampling_bounds;
    auto bad = [](const char * field, const std::string & why) {
        return make_error(error_code::invalid_argument, std::string(field) + " " + why);
    };
    auto in = [](float v, float lo, float hi) { return std::isfinite(v) && v >= lo && v <= hi; };
    if (!in(temperature, 0.0f, b::max_temperature)) return bad("temperature", "must be in [0, 100]");
    if (top_k < 0 || top_k > b::max_top_k) return bad("top_k", "must be in [0, 16777216]");
    if (!(top_p > 0.0f && top_p <= 1.0f)) return bad("top_p", "must be in (0, 1]");
    if (!(min_p >= 0.0f && min_p <= 1.0f)) return bad("min_p", "must be in [0, 1]");
    if (!in(repeat_penalty, b::min_repeat_penalty, b::max_repeat_penalty)) return bad("repeat_penalty", "must be in [0.01, 100]");
    if (!in(presence_penalty, -b::max_abs_penalty, b::max_abs_penalty)) return bad("presence_penalty", "must be in [-2, 2]");
    if (!in(frequency_penalty, -b::max_abs_penalty, b::max_abs_penalty)) return bad("frequency_penalty", "must be in [-2, 2]");
    if (penalty_last_n < 0 || penalty_last_n > b::max_penalty_last_n) return bad("penalty_last_n", "must be in [0, 1048576]");
    for (const auto & [id, bias] : logit_bias) {
        if (id < 0) return bad("logit_bias", "has a negative token id");
        // Finite, as the wire requires (docs/protocol.md): a config valid in one process
        // must be valid on a chain. A large negative bias bans a token just as well.
        if (!std::isfinite(bias)) return bad("logit_bias", "has a bias that is not finite");
    }
    if (grammar.size() > b::max_grammar_bytes) return bad("grammar", "is longer than 1 MiB");
    if (n_logprobs < 0 || n_logprobs > b::max_logprobs) return bad("n_logprobs", "must be in [0, 20]");
    return status::ok();
}

status sampling_config::validate(int32_t n_vocab) const {
    SKIPPY_TRY(validate());
    for (const auto & [id, bias] : logit_bias) {
        if (id >= n_vocab) {
            return make_error(error_code::invalid_argument, "logit_bias token id " + std::to_string(id) +
                                                                " is outside the vocabulary [0, " + std::to_string(n_vocab) + ")");
        }
    }
    return status::ok();
}

void compute_logprobs(std::span<const float> logits, token_id sampled, int32_t n_top, token_logprobs & out) {
    float max_logit = -std::numeric_limits<float>::infinity();
    for (float l : logits) max_logit = std::max(max_logit, l);
    // Index order, in double: exp of a max-subtracted logit is in (0, 1], so the sum is
    // in [1, n_vocab] and loses nothing that a float result could show.
    double sum = 0.0;
    for (float l : logits) {
        if (l != -std::numeric_limits<float>::infinity()) sum += std::exp(static_cast<double>(l) - max_logit);
    }
    const double log_norm = static_cast<double>(max_logit) + std::log(sum);
    auto logprob = [&](float l) { return static_cast<float>(std::min(static_cast<double>(l) - log_norm, 0.0)); };
    out.sampled = logprob(logits[static_cast<size_t>(sampled)]);

    // The n_top best by (logit descending, id ascending), in one pass: a small sorted list.
    out.top.clear();
    const size_t n = static_cast<size_t>(n_top);
    std::vector<std::pair<float, token_id>> best;
    best.reserve(n + 1);
    for (size_t i = 0; i < logits.size(); ++i) {
        const float l = logits[i];
        if (l == -std::numeric_limits<float>::infinity()) continue;
        if (best.size() == n && !(l > best.back().first)) continue;  // a later id loses a tie
        auto at = std::upper_bound(best.begin(), best.end(), l, [](float v, const auto & e) { return v > e.first; });
        best.insert(at, {l, static_cast<token_id>(i)});
        if (best.size() > n) best.pop_back();
    }
    for (const auto & [l, id] : best) out.top.push_back({id, logprob(l)});
}

sampler::sampler(sampling_config config) : config_(std::move(config)), rng_state_(config_.seed) {}

double sampler::next_uniform() {
    // splitmix64: tiny, well-mixed and fully specified, unlike std distributions.
    uint64_t z = (rng_state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return static_cast<double>(z >> 11) * (1.0 / 9007199254740992.0);
}

void sampler::accept(token_id id) {
    if (config_.penalty_last_n <= 0) return;
    recent_.push_back(id);
    while (recent_.size() > static_cast<size_t>(config_.penalty_last_n)) recent_.pop_front();
}

void sampler::set_history(std::span<const token_id> sequence) {
    recent_.clear();
    if (config_.penalty_last_n <= 0) return;
    const size_t n = std::min(sequence.size(), static_cast<size_t>(config_.penalty_last_n));
    recent_.assign(sequence.end() - static_cast<std::ptrdiff_t>(n), sequence.end());
}

status sampler::check_finite(std::span<const float> logits) {
    if (kernels::all_finite(logits.data(), static_cast<int64_t>(logits.size()))) return status::ok();
    for (size_t i = 0; i < logits.size(); ++i) {
        if (!std::isfinite(logits[i])) {
            return make_error(error_code::runtime, "the model computed a logit that is not finite (" +
                                                       std::string(std::isnan(logits[i]) ? "NaN" : "infinite") +
                                                       " for token " + std::to_string(i) +
                                                       "): its weights or activations are broken");
        }
    }
    return status::ok();
}

result<token_id> sampler::sample_finite(std::span<float> logits) {
    SKIPPY_TRY(check_finite(logits));
    return sample(logits);
}

token_id sampler::sample(std::span<float> logits) {
    adjust(logits);
    return pick(logits);
}

void sampler::adjust(std::span<float> logits) {
    const int64_t n_vocab = static_cast<int64_t>(logits.size());
    for (const auto & [id, bias] : config_.logit_bias) {
        if (id < n_vocab) logits[static_cast<size_t>(id)] += bias;
    }
    const bool penalize = config_.repeat_penalty != 1.0f || config_.presence_penalty != 0.0f || config_.frequency_penalty != 0.0f;
    if (penalize && !recent_.empty()) {
        std::unordered_map<token_id, int32_t> counts;
        for (token_id id : recent_) ++counts[id];
        for (const auto & [id, count] : counts) {
            if (id < 0 || id >= n_vocab) continue;
            float & l = logits[static_cast<size_t>(id)];
            l = l > 0 ? l / config_.repeat_penalty : l * config_.repeat_penalty;
            l -= static_cast<float>(count) * config_.frequency_penalty + config_.presence_penalty;
        }
    }

}

namespace {

// a ranks before b: the higher logit, then the lower id (a total order on distinct ids).
bool ranks_before(const std::pair<float, token_id> & a, const std::pair<float, token_id> & b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
}

}  // namespace

void top_candidates(std::span<const float> logits, size_t k, std::vector<std::pair<float, token_id>> & out) {
    out.clear();
    out.reserve(k);
    for (size_t i = 0; i < k; ++i) out.emplace_back(logits[i], static_cast<token_id>(i));
    // A heap of the best k so far whose top is the worst of them; a later token has a
    // higher id than all of them, so it replaces the worst only with a higher logit.
    std::make_heap(out.begin(), out.end(), ranks_before);
    for (size_t i = k; i < logits.size(); ++i) {
        if (!(logits[i] > out.front().first)) continue;
        std::pop_heap(out.begin(), out.end(), ranks_before);
        out.back() = {logits[i], static_cast<token_id>(i)};
        std::push_heap(out.begin(), out.end(), ranks_before);
    }
    std::sort(out.begin(), out.end(), ranks_before);
}

token_id sampler::pick(std::span<const float> logits) {
    const int64_t n_vocab = static_cast<int64_t>(logits.size());
    if (config_.greedy()) return n_vocab > 0 ? static_cast<token_id>(kernels::argmax_first(logits.data(), n_vocab)) : 0;

    // Candidates sorted by logit, descending; ties by id for determinism.
    size_t n = static_cast<size_t>(n_vocab);
    if (config_.top_k > 0 && static_cast<size_t>(config_.top_k) < n) {
        n = static_cast<size_t>(config_.top_k);
        top_candidates(logits, n, candidates_);
    } else {
        candidates_.clear();
        candidates_.reserve(n);
        for (int64_t i = 0; i < n_vocab; ++i) candidates_.emplace_back(logits[static_cast<size_t>(i)], static_cast<token_id>(i));
        std::sort(candidates_.begin(), candidates_.end(), ranks_before);
    }

    // Probabilities (before temperature, as in llama.cpp's top-p/min-p stages).
    auto softmax = [&](size_t count, float temp, std::vector<double> & probs) {
        probs.resize(count);
        const double max_logit = candidates_[0].first;
        double sum = 0.0;
        for (size_t i = 0; i < count; ++i) {
            probs[i] = std::exp((candidates_[i].first - max_logit) / temp);
            sum += probs[i];
        }
        for (auto & p : probs) p /= sum;
    };
    std::vector<double> probs;
    if (config_.top_p < 1.0f) {
        softmax(n, 1.0f, probs);
        double cumulative = 0.0;
        size_t keep = n;
        for (size_t i = 0; i < n; ++i) {
            cumulative += probs[i];
            if (cumulative >= config_.top_p) { keep = i + 1; break; }
        }
        n = keep;
    }
    if (config_.min_p > 0.0f) {
        const float threshold = candidates_[0].first + std::log(config_.min_p);
        size_t keep = 1;
        while (keep < n && candidates_[keep].first >= threshold) ++keep;
        n = keep;
    }
    softmax(n, config_.temperature, probs);
    const double r = next_uniform();
    double cumulative = 0.0;
    for (size_t i = 0; i < n; ++i) {
        cumulative += probs[i];
        if (r < cumulative) return candidates_[i].second;
    }
    return candidates_[n - 1].second;
}

}  // namespace skippy
