#include "grammar/engine.h"
#include "grammar/grammar.h"

namespace skippy::grammar {

namespace {

// The state after `bytes` from `state` (dead_state when some byte cannot come).
uint32_t run_bytes(detail::engine & e, uint32_t state, std::string_view bytes) {
    for (char c : bytes) {
        state = e.step(state, uint8_t(c));
        if (state == detail::dead_state) break;
    }
    return state;
}

}  // namespace

matcher::matcher(grammar_ptr grammar, const matcher_limits & limits)
    : grammar_(std::move(grammar)), engine_(std::make_unique<detail::engine>(grammar_->data(), limits)) {
    state_ = engine_->start();
}

matcher::~matcher() = default;
matcher::matcher(matcher &&) noexcept = default;
matcher & matcher::operator=(matcher &&) noexcept = default;

void matcher::reset() {
    engine_->clear_error();  // (makes the start anew if a failure had left none)
    state_ = engine_->start();
    ended_ = false;
}

status matcher::error() const { return engine_->error(); }

bool matcher::can_end() const {
    if (engine_->failed()) return false;
    return ended_ || engine_->may_end(state_);
}

bool matcher::is_done() const {
    if (engine_->failed()) return false;
    return ended_ || (engine_->may_end(state_) && !engine_->has_stacks(state_));
}

bool matcher::accepts(std::string_view bytes) {
    engine_->begin_call(&state_, 1);
    if (engine_->failed()) return false;
    if (ended_) return bytes.empty();
    uint32_t s = run_bytes(*engine_, state_, bytes);
    return s != detail::dead_state && !engine_->failed();
}

status matcher::advance(std::string_view bytes) {
    engine_->begin_call(&state_, 1);
    if (engine_->failed()) return engine_->error();
    if (ended_ && !bytes.empty()) {
        return make_error(error_code::invalid_argument, "grammar: output continues after the end of generation");
    }
    uint32_t s = run_bytes(*engine_, state_, bytes);
    if (engine_->failed()) return engine_->error();
    if (s == detail::dead_state) {
        return make_error(error_code::invalid_argument, "grammar: the bytes are not allowed here");
    }
    state_ = s;
    return status::ok();
}

status matcher::allowed_tokens(const token_trie & vocab, token_mask & mask) {
    engine_->begin_call(&state_, 1);
    if (engine_->failed()) return engine_->error();
    if (ended_) {
        mask.reset(vocab.n_vocab());
        return status::ok();
    }
    return engine_->allowed_tokens(state_, vocab.data(), mask);
}

bool matcher::accepts_token(const token_trie & vocab, token_id id) {
    if (id < 0 || id >= vocab.n_vocab()) return false;
    if (vocab.is_end_of_generation(id)) return can_end();
    std::string_view piece = vocab.piece(id);
    return !piece.empty() && accepts(piece);
}

status matcher::advance_token(const token_trie & vocab, token_id id) {
    if (id < 0 || id >= vocab.n_vocab()) {
        return make_error(error_code::invalid_argument, "grammar: token id " + std::to_string(id) + " out of range");
    }
    if (engine_->failed()) return engine_->error();
    if (vocab.is_end_of_generation(id)) {
        if (!can_end()) return make_error(error_code::invalid_argument, "grammar: the output may not end here");
        ended_ = true;
        return status::ok();
    }
    std::string_view piece = vocab.piece(id);
    if (piece.empty()) return make_error(error_code::invalid_argument, "grammar: a token without bytes is not allowed");
    return advance(piece);
}

size_t matcher::memo_bytes() const { return engine_->memo_bytes(); }
matcher_stats matcher::stats() const { return engine_->stats(); }

}  // namespace skippy::grammar
