#include "transport/chain_restore.h"
#include "transport/convert.h"

#include <optional>

namespace skippy::transport {

using protocol::message_kind;

status chain_restore::begin(std::span<const token_id> prompt) {
    prompt_.assign(prompt.begin(), prompt.end());
    restored_ = 0;
    deferred_ = false;
    lane_cache & cache = session_.cache();
    // The last prompt token always runs through decode: at most n - 1 are restorable.
    const int64_t restorable_max = static_cast<int64_t>(prompt_.size()) - 1;
    if (!cache.lookups() || restorable_max < cache.min_tokens()) return status::ok();
    const std::span<const token_id> query = std::span<const token_id>(prompt_).first(static_cast<size_t>(restorable_max));

    if (one_stage_) {
        // No message travels: the id names the local restore in the decision event.
        const protocol::request local = chain_.make_request(message_kind::restore_prefill, 0);
        const auto r = cache.restore(query, restorable_max, cache::lookup_kind::restore, true, {local.request_id, local.kind});
        chain_.add_counters(r.counters);
        restored_ = r.restored_tokens;
        session_.track_tokens(0, query.first(static_cast<size_t>(restored_)));
        return status::ok();
    }

    protocol::request probe = chain_.make_request(message_kind::probe_prefill, 0);
    const int64_t local = cache.probe(query, {probe.request_id, probe.kind});
    if (local < cache.min_tokens()) return status::ok();
    probe.tokens.assign(query.begin(), query.begin() + local);
    protocol::reply reply;
    SKIPPY_TRY(chain_.roundtrip(std::move(probe), reply));
    const int64_t chain = std::min(local, reply.restored_tokens);
    if (chain < cache.min_tokens()) return status::ok();
    if (chain == static_cast<int64_t>(query.size())) {
        restored_ = chain;
        deferred_ = true;
        return status::ok();
    }
    return restore_everywhere(chain);
}

// TryRestorePrefill of the first n prompt tokens down the chain, then here; or, when
// stage 0's own entry went away since its probe, TrimSession(0) to undo the others.
status chain_restore::restore_everywhere(int64_t n) {
    const std::span<const token_id> query = std::span<const token_id>(prompt_).first(static_cast<size_t>(n));
    protocol::reply reply;
    protocol::request restore = chain_.make_request(message_kind::try_restore_prefill, 0);
    restore.tokens.assign(query.begin(), query.end());
    const cache_call call{restore.request_id, restore.kind};
    // Stage 0 restores its part while the request is on its way down: the stages'
    // imports (megabytes, each page's SHA-256 checked) overlap instead of adding up.
    // Whichever side missed is undone.
    std::optional<cache::restore_result> here;
    const status sent = chain_.roundtrip(std::move(restore), reply, [&] {
        here = session_.cache().restore(query, n, cache::lookup_kind::try_restore, false, call);
    });
    if (here) chain_.add_counters(here->counters);
    const bool here_hit = here && here->outcome == cache::lookup_outcome::hit && here->restored_tokens == n;
    if (!sent.is_ok() || reply.outcome != protocol::ack_outcome::hit) {
        // Everyone below rolled back (or the chain failed): so does stage 0.
        if (here && here->restored_tokens > 0) session_.cache().rollback();
        return sent;
    }
    if (here_hit) {
        restored_ = n;
        return status::ok();
    }
    if (here && here->restored_tokens > 0) session_.cache().rollback();
    protocol::request trim = chain_.make_request(message_kind::trim_session, 0);
    return chain_.roundtrip(std::move(trim), reply);
}

status chain_restore::settle() {
    if (!deferred_) return status::ok();
    deferred_ = false;
    const int64_t n = restored_;
    restored_ = 0;
    return restore_everywhere(n);
}

result<std::optional<int32_t>> chain_restore::decode(int64_t pos, token_id token, const std::function<status()> & compute_row,
                                                     token_logprobs * logprobs) {
    deferred_ = false;
    const int64_t n = restored_;
    const std::span<const token_id> prefix = std::span<const token_id>(prompt_).first(static_cast<size_t>(n));
    protocol::request req = chain_.make_request(message_kind::try_restore_prefill_decode, 0);
    const auto r = session_.cache().restore(prefix, n, cache::lookup_kind::try_restore_decode, false, {req.request_id, req.kind});
    chain_.add_counters(r.counters);
    if (r.outcome == cache::lookup_outcome::hit && r.restored_tokens == n && pos == n) {
        SKIPPY_TRY(compute_row());
        session_.cache().note_prefill(n, std::span<const token_id>(&token, 1));
        req.tokens.assign(prefix.begin(), prefix.end());
        req.state.current_token = token;
        req.activation = session_.output_frame();
        protocol::reply reply;
        SKIPPY_TRY(chain_.roundtrip(std::move(req), reply));
        if (reply.kind == message_kind::predicted_token) {
            if (logprobs) *logprobs = get_logprobs(reply);
            return std::optional<int32_t>(reply.token);
        }
    }
    // A miss somewhere: the stages below rolled back; so does stage 0.
    session_.cache().rollback();
    restored_ = 0;
    return std::optional<int32_t>();
}

}  // namespace skippy::transport
