// Stage 0's chain-wide prefix restore for one lane (DESIGN §6, docs/kv-cache.md §10):
// the plan (the longest prompt prefix every stage can restore), its commit (on every
// stage or on none) and the roll back when a stage misses after all. chain_pipeline
// owns one per lane; nothing else decides what a request restores.
//
//   plan     stage 0 probes itself, then ProbePrefill down the chain: R tokens
//   commit   R = n - 1  -> deferred: TryRestorePrefillDecode on the first decode
//            otherwise  -> TryRestorePrefill down the chain, stage 0 restoring
//                          itself while it travels (the imports overlap)
//   undo     a miss below rolls the stages above it back (they do it themselves,
//            stage 0 too); stage 0 missing after a chain hit sends TrimSession(0)
//
// With one stage there is no chain: stage 0 restores the longest prefix it holds.
#pragma once

#include "protocol/protocol.h"
#include "transport/lane_session.h"

#include <functional>
#include <optional>
#include <span>
#include <vector>

namespace skippy::transport {

class chain_restore {
public:
    // How the coordinator reaches the stages below stage 0 on its lane.
    class chain_i {
    public:
        virtual ~chain_i() = default;
        virtual protocol::request make_request(protocol::message_kind kind, int64_t pos_start) = 0;
        // A synchronous request down the chain; the reply's stats are merged into the
        // request's. `meanwhile` (optional) runs once the request is sent, before its
        // reply is read (downstream_link::roundtrip).
        virtual status roundtrip(protocol::request req, protocol::reply & reply, const std::function<void()> & meanwhile = {}) = 0;
        // Stage 0's own cache counters, for the request's stats.
        virtual void add_counters(const cache::cache_counters & c) = 0;
    };

    // REQUIRES: session and chain outlive the coordinator. With one stage the chain
    // only takes counters.
    chain_restore(lane_session & session, chain_i & chain, bool one_stage)
        : session_(session), chain_(chain), one_stage_(one_stage) {}

    // A new request with this prompt (the session's cache is configured for it): plans
    // the restore and commits it, unless it is deferred to the first decode.
    status begin(std::span<const token_id> prompt);

    // Prompt positions [0, restored()) are restored on every stage (or will be, by the
    // first decode, when deferred()). After the first decode this is final.
    int64_t restored() const { return restored_; }
    bool deferred() const { return deferred_; }

    // Forgets the last request's restore.
    void reset() {
        prompt_.clear();
        restored_ = 0;
        deferred_ = false;
    }
    const std::vector<token_id> & prompt() const { return prompt_; }

    // No decode follows (max_tokens 0): commits a deferred restore now.
    status settle();

    // The first decode of token `token` at `pos`, when deferred(): restores the prefix
    // on stage 0, runs compute_row (stage 0's layers on the token, into the session's
    // hidden()) and sends TryRestorePrefillDecode. Returns the final stage's token on a
    // chain hit; on a miss anywhere every stage is as before the restore (restored()
    // is 0) and the result is empty: the caller computes the prompt instead.
    // `logprobs` receives the predicted token's logprobs (empty unless asked for).
    result<std::optional<int32_t>> decode(int64_t pos, token_id token, const std::function<status()> & compute_row,
                                          token_logprobs * logprobs = nullptr);

private:
    status restore_everywhere(int64_t n_tokens);

    lane_session &        session_;
    chain_i &             chain_;
    const bool            one_stage_;
    std::vector<token_id> prompt_;
    int64_t               restored_ = 0;
    bool                  deferred_ = false;
};

}  // namespace skippy::transport
